/* config.h — a model's config.json (Hugging Face layout) as the engine
 * needs it. Architectures: LlamaForCausalLM, Qwen2ForCausalLM,
 * Qwen3ForCausalLM, Qwen3MoeForCausalLM (AR); LLaDA (LLaMA blocks, bidirectional), LLaDA-MoE
 * (OLMoE blocks, bidirectional) and Dream (Qwen2 blocks, bidirectional) for the diffusion backend; and the block
 * diffusion models, causal across blocks and bidirectional inside one:
 * SDAR (Qwen3 blocks) and Fast-dLLM v2 (Qwen2 blocks); and DFlash's
 * drafter (DFlashDraftModel: Qwen3 blocks that draft for a target, its
 * target's embedding and LM head shared: cpu/dflash.h). */
#ifndef TB_ENGINE_CONFIG_H
#define TB_ENGINE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef enum tb_arch {
    TB_ARCH_LLAMA = 1,  /* LlamaForCausalLM */
    TB_ARCH_QWEN2 = 2,  /* Qwen2ForCausalLM: QKV bias */
    TB_ARCH_LLADA = 3,  /* LLaDAModelLM: LLaMA blocks, no causal mask */
    TB_ARCH_DREAM = 4,  /* DreamModel: Qwen2 blocks, no causal mask */
    TB_ARCH_QWEN3 = 5,  /* Qwen3ForCausalLM: per-head RMSNorm on q and k */
    TB_ARCH_SDAR = 6,   /* SDARForCausalLM: Qwen3 blocks, block-causal */
    TB_ARCH_FAST_DLLM_V2 = 7, /* Fast_dLLM_QwenForCausalLM: Qwen2 blocks,
                                 block-causal, logits shifted (position i
                                 read from the output at i - 1) */
    TB_ARCH_QWEN3_MOE = 8, /* Qwen3MoeForCausalLM: Qwen3 attention, MoE
                              feed-forward (moe.h) in its sparse layers */
    TB_ARCH_LLADA_MOE = 9, /* LLaDAMoEModelLM (model_type lladamoe): OLMoE
                              blocks, no causal mask; d_model split across
                              the heads, per-head q/k norms when
                              qk_layernorm; softmax top-k router never
                              renormalised (its modelling code fixes
                              norm_topk_prob = False); dense layers where
                              moe_layer_freq[l] = 0 */
    TB_ARCH_LLADA2_MOE = 10, /* LLaDA2MoeModelLM (model_type llada2_moe,
                              LLaDA 2.x): fused query_key_value, per-head
                              q/k norms, partial rotary (rope_dim of
                              head_dim), o projection "dense"; sigmoid
                              router with expert_bias, group-limited top-k
                              (masked to -inf), renormalised, times
                              routed_scaling_factor, plus shared experts;
                              the first first_k_dense_replace layers dense;
                              block diffusion (block-causal mask, its
                              generate()'s block_length 32) */
    TB_ARCH_DFLASH = 11, /* DFlashDraftModel (z-lab DFlash; model_type
                            qwen3): Qwen3 layers without embedding or LM
                            head (the target's), fc + hidden_norm over
                            the target's features (cpu/dflash.h) */
} tb_arch;

#define TB_MAX_TARGET_IDS 64 /* DFlash: target layers whose outputs the drafter reads */

#define TB_MAX_MLP_ONLY 64 /* Qwen3-MoE mlp_only_layers entries (LLaDA-MoE: moe_layer_freq's zeros) */

#define TB_MAX_EOS 8

typedef struct tb_model_config {
    tb_arch arch;
    char arch_name[64];        /* "LlamaForCausalLM", ... as written */
    int vocab_size;
    int hidden_size;           /* d_model */
    int intermediate_size;     /* SwiGLU hidden width */
    int n_layers;
    int n_heads;
    int n_kv_heads;            /* GQA: n_heads % n_kv_heads == 0 */
    int head_dim;              /* config's head_dim, else hidden/heads */
    double rms_eps;
    double rope_theta;
    /* llama3 rope scaling ("rope_scaling" or "rope_parameters" with
     * rope_type "llama3"); rope_llama3 = 0 when absent or "default". */
    int rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int rope_dim;              /* rotated dims of a head (partial_rotary_factor x
                                  head_dim; = head_dim when 1), even: pairs
                                  (i, i + rope_dim/2), the rest unrotated */
    int max_position_embeddings;
    int tie_word_embeddings;
    int qkv_bias;              /* Qwen2 / Dream: q, k, v projections have bias */
    int o_bias;                /* Llama/Qwen3 attention_bias: o_proj has one too */
    int qk_norm;               /* Qwen3 / SDAR: q_norm, k_norm [head_dim] applied
                                  per head after the projections, before RoPE */
    int block_size;            /* block diffusion: the model's trained block
                                  (SDAR "block_size", Fast-dLLM v2 "bd_size");
                                  0 for the others */
    /* mixture of experts (Qwen3-MoE, LLaDA-MoE; 0 experts: a dense model): layer l
     * is sparse when tb_config_layer_is_moe(cfg, l), its feed-forward the
     * router over n_experts SwiGLU experts of moe_intermediate_size, top
     * n_experts_per_tok, renormalised when norm_topk_prob; the others
     * (mlp_only_layers, and those decoder_sparse_step skips) are dense
     * with intermediate_size */
    int n_experts, n_experts_per_tok, moe_intermediate_size, norm_topk_prob, decoder_sparse_step;
    int n_mlp_only, mlp_only_layers[TB_MAX_MLP_ONLY];
    /* LLaDA 2.x (moe.h's sigmoid router): n_shared_experts SwiGLU experts
     * of moe_intermediate_size every MoE layer adds unscaled; expert
     * groups; routed_scaling_factor; the first first_k_dense layers dense */
    int n_shared_experts, n_group, topk_group, first_k_dense;
    double routed_scale;
    int32_t eos_ids[TB_MAX_EOS]; /* eos_token_id: an int or a list (a folder's
                                    generation_config.json's replaces it: folder.h) */
    int n_eos;
    int32_t bos_id;            /* config.json's bos_token_id, -1: none */
    int32_t prompt_bos;        /* the token a prompt starts with, -1: none. From
                                  config.json alone (and presets):
                                  tb_config_default_bos; a folder with a
                                  tokenizer.json: what its tokenizer adds
                                  (folder.h) */
    /* DFlash drafter (dflash_config.target_layer_ids, num_target_layers):
     * the 0-based target layers whose outputs, concatenated in this order,
     * form the features [n_target_ids x hidden] fc reads; num_target_layers
     * is the target's layer count the drafter was made for (0: not said).
     * block_size is its block (anchor included), mask_id its mask token. */
    int n_target_ids, target_layer_ids[TB_MAX_TARGET_IDS], n_target_layers;
    int32_t mask_id;           /* diffusion mask token (config.json's
                                  mask_token_id, else folder.h's), -1: none */
    int mask_is_default;       /* mask_id is tb_config_default_mask's, not
                                  config.json's: a folder's tokenizer may name
                                  another (folder.h) */
    char torch_dtype[16];      /* "bfloat16", "float32", ... or "" */
    int random_weights;        /* presets, or "tokbench_random_weights": true */
} tb_model_config;

/* Parse config.json text; `path` only names the file in errors. Checks
 * every field it reads (types, > 0, divisibility, ids inside the
 * vocabulary) and refuses settings the engine would silently compute wrong
 * (other activations, sliding window, rope scaling other than llama3,
 * LLaDA options beyond its 8B layout). A diffusion model without a
 * mask_token_id parses, with mask_id the family's default or -1: the
 * folder's tokenizer may name it (folder.h).
 * Returns 0 or -1 with "PATH: field NAME: expected ..., got ..." in err.
 * LLaDA's own keys (d_model, n_layers, n_heads, n_kv_heads,
 * mlp_hidden_size, max_sequence_length, embedding_size, weight_tying,
 * include_qkv_bias) are read first, then the Hugging Face names. */
int tb_config_parse(const char *json, const char *path, tb_model_config *cfg, char *err,
                    size_t err_size);
/* LLaDA, LLaDA-MoE, Dream, SDAR, Fast-dLLM v2: masked-diffusion models. */
int tb_arch_is_diffusion(tb_arch a);
/* SDAR and Fast-dLLM v2: block diffusion (causal across blocks,
 * bidirectional inside one; exact KV cache of finished blocks). */
int tb_arch_is_block_diffusion(tb_arch a);

/* Layer l's feed-forward is a mixture of experts (Qwen3-MoE's rule: not
 * in mlp_only_layers, and (l + 1) % decoder_sparse_step == 0). */
int tb_config_layer_is_moe(const tb_model_config *cfg, int l);

/* The mask id a family's generation code uses when its config names none:
 * Fast-dLLM v2's generate() 151665, LLaDA-MoE's and LLaDA 2.x's 156895,
 * each when the vocabulary holds it; -1 for the others. */
int32_t tb_config_default_mask(const tb_model_config *cfg);
/* The prompt's BOS from config.json alone: bos_id unless it is also one
 * of eos_ids (GPT-2-style models start with the text itself); -1: none. */
int32_t tb_config_default_bos(const tb_model_config *cfg);

/* The rotated width of a head: rope_dim, or head_dim when 0 (presets). */
int tb_config_rope_dim(const tb_model_config *cfg);

/* Read and parse a file. */
int tb_config_load(const char *path, tb_model_config *cfg, char *err, size_t err_size);

/* A JSON value for an error message ("nothing", "null", a number, a
 * string cut at 40 characters, "an array", "an object"), into out. */
struct cJSON;
void tb_json_describe(const struct cJSON *v, char *out, size_t size);

#endif
