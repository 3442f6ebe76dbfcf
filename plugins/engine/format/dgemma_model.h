/* dgemma_model.h — DiffusionGemma (Google DeepMind's block-diffusion
 * Gemma-4 MoE; transformers' DiffusionGemmaForBlockDiffusion, model_type
 * diffusion_gemma) as the engine holds it: its config.json (the root and
 * its text_config) and its weights in the published layout, float32 on the
 * CPU.
 *
 * Why a model struct of its own and not tb_model: its layers are not
 * uniform. Sliding-window layers and full-attention layers have their own
 * head size and KV heads (full layers: global_head_dim,
 * num_global_key_value_heads, no v_proj: V is the raw k_proj output);
 * every layer has a shared GeGLU MLP *and* a mixture of experts, seven
 * norms and a layer_scalar; the decoder adds a self-conditioning MLP. The
 * CUDA engine would mirror this struct (bf16 copies of the same arrays).
 *
 * Published tensor names (the text weights are tied encoder -> decoder,
 * so the files hold them once, under model.decoder.):
 *   model.decoder.embed_tokens.weight [V][H] (the LM head too: tied)
 *   model.decoder.norm.weight [H]
 *   model.decoder.self_conditioning.{pre_norm.weight [H], gate_proj [I][H],
 *       up_proj [I][H], down_proj [H][I]} (post_norm has no weight)
 *   model.decoder.layers.N.{input_layernorm, post_attention_layernorm,
 *       pre_feedforward_layernorm, post_feedforward_layernorm_1,
 *       pre_feedforward_layernorm_2, post_feedforward_layernorm_2,
 *       post_feedforward_layernorm}.weight [H]
 *   model.decoder.layers.N.self_attn.{q_proj [nh hd][H], k_proj [kv hd][H],
 *       v_proj [kv hd][H] (sliding layers only), o_proj [H][nh hd],
 *       q_norm [hd], k_norm [hd]}
 *   model.decoder.layers.N.mlp.{gate_proj, up_proj [I][H], down_proj [H][I]}
 *   model.decoder.layers.N.router.{proj.weight [E][H], scale [H],
 *       per_expert_scale [E]}
 *   model.decoder.layers.N.experts.{gate_up_proj [E][2 mi][H] (gate rows,
 *       then up rows), down_proj [E][H][mi]}
 *   model.decoder.layers.N.layer_scalar [1] (the decoder pass's) and
 *   model.encoder.language_model.layers.N.layer_scalar [1] (the encoder
 *       pass's: buffers are not tied, so each pass keeps its own)
 * The vision tower (model.encoder.vision_tower.*, embed_vision.*) and any
 * lm_head.weight are ignored. */
#ifndef TB_ENGINE_DGEMMA_MODEL_H
#define TB_ENGINE_DGEMMA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TB_DG_MAX_LAYERS 256
#define TB_DG_MAX_EOS 8

typedef struct tb_dgemma_config {
    int vocab, hidden, n_layers, n_heads;
    int inter;                /* intermediate_size: the shared MLP's and self-conditioning's width */
    int kv_sliding, hd_sliding; /* num_key_value_heads, head_dim */
    int kv_full, hd_full;     /* num_global_key_value_heads (num_key_value_heads
                                 when null, as DiffusionGemmaTextConfig), global_head_dim */
    int n_experts, top_k, moe_inter;
    int sliding_window;       /* W: a causal query at i sees keys j with i - j < W */
    double rms_eps;
    double theta_sliding;     /* rope_parameters.sliding_attention (rope_type default) */
    double theta_full;        /* rope_parameters.full_attention (rope_type proportional) */
    double rope_factor_full;  /* its "factor" (1: none): inv_freq divided by it */
    int rope_angles_full;     /* int(partial_rotary_factor x global_head_dim // 2):
                                 rotated pairs; the other hd_full/2 - angles pairs
                                 have frequency 0 (unrotated) */
    double softcap;           /* final_logit_softcapping; 0: none */
    int canvas;               /* canvas_length */
    int max_pos;
    unsigned char full[TB_DG_MAX_LAYERS]; /* layer l is full attention (the last always) */
    int32_t eos[TB_DG_MAX_EOS];
    int n_eos;
    int32_t pad_id, bos_id;   /* -1: none */
    int32_t image_id;         /* image_token_id (258880): the encoder pass embeds
                                 it as pad_id (the vision tower's slots; text
                                 only here); -1: none */
    int bf16;                 /* dtype bfloat16: rounds as transformers does in bf16 */
    char dtype[16];
} tb_dgemma_config;

typedef struct tb_dgemma_layer {
    int full, hd, kv;          /* attention type; this layer's head size and KV heads */
    float *attn_norm;          /* input_layernorm [H] */
    float *wq;                 /* [nh hd][H] */
    float *wk;                 /* [kv hd][H] */
    float *wv;                 /* [kv hd][H]; NULL in a full layer (V = raw k_proj output) */
    float *q_norm, *k_norm;    /* [hd] */
    float *wo;                 /* [H][nh hd] */
    float *post_attn_norm;     /* [H] */
    float *pre_ffn_norm;       /* [H]: the shared MLP's input norm */
    float *gate_up;            /* [2 I][H]: gate rows, then up rows */
    float *down;               /* [H][I] */
    float *post_ffn_norm1;     /* [H] */
    float *pre_ffn_norm2;      /* [H]: the experts' input norm */
    float *router;             /* [E][H] */
    float *router_scale;       /* [H] */
    float *expert_scale;       /* [E]: per_expert_scale */
    float *experts_gate_up;    /* [E][2 mi][H] */
    float *experts_down;       /* [E][H][mi] */
    float *post_ffn_norm2;     /* [H] */
    float *post_ffn_norm;      /* [H] */
    float scalar_enc, scalar_dec; /* layer_scalar of the encoder and of the decoder pass */
} tb_dgemma_layer;

typedef struct tb_dgemma_model {
    tb_dgemma_config cfg;
    char name[256];           /* folder base name or "preset:NAME" */
    float *embed;             /* [V][H], the LM head too */
    float *final_norm;        /* [H] */
    float *sc_pre_norm;       /* [H] */
    float *sc_gate_up;        /* [2 I][H] */
    float *sc_down;           /* [H][I] */
    float *inv_freq_sliding;  /* [hd_sliding / 2] */
    float *inv_freq_full;     /* [hd_full / 2], zeros after rope_angles_full */
    float embed_scale;        /* sqrt(H), rounded to bf16 in a bf16 model */
    tb_dgemma_layer *layers;  /* [n_layers] */
    float *arena;
    size_t arena_floats;
    int64_t n_params;
    char source_dtype[8];
    int fp8;                  /* tb_dgemma_round_fp8 was applied */
} tb_dgemma_model;

/* Whether a config.json text is DiffusionGemma's (model_type
 * diffusion_gemma, or architectures DiffusionGemmaForBlockDiffusion
 * without a model_type): 1, 0, or -1 when out of memory. */
int tb_dgemma_is_config(const char *json);

/* Parse config.json text (root + text_config); `path` names the file in
 * errors: "PATH: field text_config.NAME: expected ..., got ...". Missing
 * fields take DiffusionGemmaTextConfig's / DiffusionGemmaConfig's
 * defaults; settings computed otherwise than here are refused (another
 * activation, use_bidirectional_attention "all", attention biases, an
 * attention logit softcap, untied embeddings, other rope types). */
int tb_dgemma_config_parse(const char *json, const char *path, tb_dgemma_config *cfg, char *err, size_t err_size);
int tb_dgemma_config_load(const char *path, tb_dgemma_config *cfg, char *err, size_t err_size);

/* Load config.json + safetensors from a folder in the published layout.
 * 0, or -1 naming the file and the tensor (missing, wrong shape). */
int tb_dgemma_load(const char *dir, tb_dgemma_model *m, char *err, size_t err_size);

/* Presets: "diffusiongemma-26b-a4b" (the published shape; its weights are
 * ~100 GB as float32: the GPU makes them on the device from the config)
 * and "tiny-diffusiongemma" (tests). tb_dgemma_preset_config: the config
 * only; tb_dgemma_preset: seeded random weights on the CPU, norms and
 * scales perturbed around 1 so that an offset bug shows. */
int tb_dgemma_preset_config(const char *name, tb_dgemma_config *cfg, char *err, size_t err_size);
int tb_dgemma_preset(const char *name, uint64_t seed, tb_dgemma_model *m, char *err, size_t err_size);

/* RoPE frequencies (modeling_rope_utils: default for sliding layers,
 * proportional for full ones: zeros past rope_angles_full) into
 * [hd_sliding / 2] and [hd_full / 2], and the embedding scale sqrt(H)
 * (rounded to bf16 in a bf16 model), from the config alone: what a
 * loader derives, and what the GPU's preset needs without host weights. */
void tb_dgemma_derive(const tb_dgemma_config *c, float *inv_freq_sliding, float *inv_freq_full, float *embed_scale);

/* dtype = fp8 (fp8.h: W8A8, E4M3 with one power-of-two scale per row):
 * every projection becomes the float32 values of its E4M3 form, one scale
 * per output row: q, k, v, o, the shared MLP's gate-up and down, each
 * expert's gate-up and down (per row of each expert), and the
 * self-conditioning MLP's gate-up and down. The router, the embedding
 * (the LM head and the soft embedding too), the norms and the scalars keep
 * their precision, as the serving stacks' FP8 leaves them (the router's
 * top-k is decided by small margins). Any shape on the CPU. */
void tb_dgemma_round_fp8(tb_dgemma_model *m);
/* The device's FP8 kernels' shape rule (gpu_dgemma.cu): every projection's
 * input and output width a multiple of 16 (hidden, heads x head_dim of both
 * layer kinds, KV heads x head_dim of both, intermediate_size,
 * moe_intermediate_size). 0, or -1 naming the first that is not. */
int tb_dgemma_check_fp8_gpu(const tb_dgemma_config *c, char *err, size_t err_size);

/* Parameters as the checkpoint counts them (text only). */
int64_t tb_dgemma_n_params(const tb_dgemma_config *cfg);
/* Parameters one token reads (top_k of n_experts experts). */
int64_t tb_dgemma_n_active(const tb_dgemma_config *cfg);

void tb_dgemma_free(tb_dgemma_model *m);

#ifdef __cplusplus
}
#endif

#endif
