/* flow_model.h — a continuous (embedding-space) diffusion language model in
 * the LangFlow layout (Continuous-Rivals-Discrete/langflow-*, as its
 * published config.json and state dict name things), on the CPU in float32.
 *
 * The network f(z, gamma, x_sc) -> logits: z [L][D] is the noisy state,
 * gamma the log-SNR of its noise level, x_sc the previous step's estimate
 * of the clean embeddings (self-conditioning; 0 at the first step).
 *   time:   tf = [cos(gamma w_k), sin(gamma w_k)], w_k = 10000^(-k / (F/2)),
 *           k < F/2 (F = freq_dim); c = silu(W2 silu(W1 tf + b1) + b2) [C]
 *   input:  x = z + W_sc [z ; x_sc]
 *   block:  (sh1, sc1, g1, sh2, sc2, g2) = W_ada c + b_ada (each [D])
 *           h = LN(x) w1 (1 + sc1) + sh1; x += g1 * W_o attn(h)
 *           h = LN(x) w2 (1 + sc2) + sh2; x += g2 * (W_d gelu_tanh(W_u h + b_u) + b_d)
 *           attention: bidirectional, multi-head, rotate-half RoPE on q, k
 *           (positions 0 .. L-1); LN without bias, eps norm_eps
 *   out:    (shf, scf) = W_fa c + b_fa; h = LN(x) wf (1 + scf) + shf
 *           logits = W_out h + b_out [+ (alpha / sigma^2) z E^T when use_bias]
 * E: the token embeddings, rows L2-normalised and scaled by sqrt(D) at load
 * (use_normalized_embedding); x0_hat = softmax(logits) E.
 * Noise level gamma: alpha = sqrt(sigmoid(-gamma)), sigma =
 * sqrt(sigmoid(gamma)), z = alpha x + sigma eps (flow_sampler.h).
 * The level each position is conditioned on (c above, and the skip term's
 * alpha / sigma^2): the canvas's gamma, except, when config.json says
 * "prompt_gamma": "min", at the clean prompt positions, which get the
 * schedule's lowest level (its clamp at the cutoff): a model trained so
 * can tell a clean condition from a noisy position by its level (tokbench
 * addition; LangFlow, trained without prompts, has none).
 * With "prompt_attention": "prompt" (tokbench addition as well) the
 * prompt's rows attend to the prompt's keys only: no noise of the canvas
 * reaches the prompt's states, which a model so trained then reads as an
 * encoder's; the positions being generated attend to every position. */
#ifndef TB_FLOW_MODEL_H
#define TB_FLOW_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_flow_config {
    char arch_name[64];
    int vocab, hidden, cond_dim, n_blocks, n_heads, head_dim, mlp_dim;
    int model_length;   /* positions the model was trained on (the most a canvas may hold) */
    int freq_dim;       /* sinusoidal time features (256) */
    double time_max_period, rope_theta, norm_eps;
    int self_conditioning, use_bias, normalized_embedding;
    /* the noise schedule: gamma(q) = loc - scale ln(-ln q) on q in
     * [1 - t_eps, t_eps], clamped to its value at the cutoff (flow_sampler.c) */
    double gumbel_loc, gumbel_scale, gumbel_cutoff, t_eps;
    int prompt_gamma_min; /* "prompt_gamma": "min": prompt positions at the schedule's lowest level */
    int prompt_attends_prompt; /* "prompt_attention": "prompt": prompt rows attend to prompt keys only */
    int32_t eos_token_id; /* -1: none (the answer is the whole canvas) */
    int random_weights;
} tb_flow_config;

typedef struct tb_flow_block {
    float *norm1, *norm2;   /* [D] */
    float *wqkv;            /* [3D][D]: q | k | v, heads contiguous */
    float *wo;              /* [D][D] */
    float *w_up, *b_up;     /* [F][D], [F] */
    float *w_down, *b_down; /* [D][F], [D] */
    float *ada_w, *ada_b;   /* [6D][C], [6D]: sh1 sc1 g1 sh2 sc2 g2 */
} tb_flow_block;

typedef struct tb_flow_model {
    tb_flow_config cfg;
    float *embed;           /* [V][D], normalised as the config says */
    float *t_w1, *t_b1;     /* [C][freq], [C] */
    float *t_w2, *t_b2;     /* [C][C], [C] */
    float *sc_w;            /* [D][2D] (self_conditioning), else NULL */
    tb_flow_block *blocks;
    float *norm_f;          /* [D] */
    float *fada_w, *fada_b; /* [2D][C], [2D]: shift, scale */
    float *w_out, *b_out;   /* [V][D], [V] */
    float *inv_freq;        /* [head_dim / 2] */
    float *arena;
    size_t arena_floats;
    int64_t n_params;
    char name[256];
    char source_dtype[16];
} tb_flow_model;

/* Load a model folder (config.json + model.safetensors, LangFlow names).
 * 0, or -1 with "FILE: what is wrong" in err. */
int tb_flow_model_load(const char *dir, tb_flow_model *m, char *err, size_t err_size);
/* A preset's shapes ("langflow-owt": 12 x 768, V 50257, L 1024;
 * "flow-8b": Llama-3-8B's width and depth, 32 x 4096, V 128256, L 2048)
 * with seeded random weights. 0, or -1 with the reason. */
int tb_flow_model_preset(const char *name, uint64_t seed, tb_flow_model *m, char *err, size_t err_size);
void tb_flow_model_free(tb_flow_model *m);

#endif
