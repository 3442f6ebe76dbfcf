/* model.h — a transformer's weights in the layout the CPU path computes
 * with, loaded from a Hugging Face folder or made from a preset.
 *
 * CPU weights are float32, fused where it saves a GEMM: Q, K and V
 * projections in one matrix, gate and up projections in another. Matrices
 * keep PyTorch's [out][in] row-major layout, so y = x W^T. */
#ifndef TB_ENGINE_MODEL_H
#define TB_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "moe.h"

typedef struct tb_layer {
    float *attn_norm; /* [hidden] */
    float *wqkv;      /* [(n_heads + 2 n_kv) head_dim][hidden]: q rows, k rows, v rows */
    float *bqkv;      /* [(n_heads + 2 n_kv) head_dim], NULL without QKV bias */
    float *q_norm;    /* [head_dim], NULL without QK-norm (Qwen3) */
    float *k_norm;    /* [head_dim], NULL without QK-norm */
    float *wo;        /* [hidden][n_heads head_dim] */
    float *mlp_norm;  /* [hidden] */
    float *w_gate_up; /* [2 intermediate][hidden]: gate rows, then up rows; NULL in a MoE layer */
    float *w_down;    /* [hidden][intermediate]; NULL in a MoE layer */
    /* a MoE layer (tb_config_layer_is_moe), moe.h's layout; NULL otherwise */
    float *router;          /* [n_experts][hidden] */
    float *experts_gate_up; /* [n_experts][2 moe_intermediate][hidden] */
    float *experts_down;    /* [n_experts][hidden][moe_intermediate] */
    float *score_bias;      /* [n_experts]: LLaDA 2.x's mlp.gate.expert_bias; NULL: none */
    float *shared_gate_up;  /* [2 S][hidden], S = n_shared_experts x moe_intermediate; NULL: none */
    float *shared_down;     /* [hidden][S] */
} tb_layer;

typedef struct tb_model {
    tb_model_config cfg;
    char name[256];      /* folder base name or "preset:NAME" */
    float *embed;        /* [vocab][hidden]; NULL in a DFlash drafter (the target's) */
    float *final_norm;   /* [hidden] */
    float *lm_head;      /* [vocab][hidden]; == embed when tied; NULL in a DFlash drafter */
    /* DFlash drafter only (TB_ARCH_DFLASH; NULL otherwise): the features'
     * projection fc [hidden][n_target_ids hidden] and its hidden_norm [hidden] */
    float *fc, *hidden_norm;
    int lm_head_rows;    /* 0: lm_head has all vocab rows; else a tensor-parallel
                            rank's slice of them (tp_split.h): its logits' width */
    tb_layer *layers;    /* [n_layers] */
    float *rope_inv_freq; /* [head_dim / 2], llama3 scaling applied */
    float *arena;        /* every float above lives here */
    size_t arena_floats;
    int64_t n_params;    /* parameters as the checkpoint counts them */
    char source_dtype[8]; /* dtype of the checkpoint ("BF16", ...) */
    int fp8;             /* tb_model_round_fp8 was applied */
} tb_model;

/* Load config.json + safetensors from a Hugging Face folder (Llama, Qwen2,
 * Dream: transformers' tensor names; LLaDA: its own). Returns 0 or -1 with
 * a message naming the file and tensor. */
int tb_model_load(const char *dir, tb_model *m, char *err, size_t err_size);

/* Load a DFlash drafter folder (config.json with DFlashDraftModel,
 * model.safetensors in its published names: fc, hidden_norm, layers.N.*,
 * norm; no embedding, no LM head). tb_model_load refuses such a folder and
 * this one every other. Returns 0 or -1 naming the file and tensor. */
int tb_dflash_load(const char *dir, tb_model *m, char *err, size_t err_size);

/* The config of a preset (deterministic random weights): "llama-3-8b",
 * "qwen2.5-7b", "qwen3-8b", "llada-8b", "dream-7b", "sdar-8b",
 * "fast-dllm-v2-7b", "qwen3-30b-a3b", "llada-moe-7b-a1b", "llada2-mini", and tiny ones for tests ("tiny-llama", "tiny-qwen2",
 * "tiny-qwen3", "tiny-sdar", "tiny-fast-dllm-v2", ...). -1 with the list of presets when unknown. */
int tb_preset_config(const char *name, tb_model_config *cfg, char *err, size_t err_size);
/* Build a preset model on the CPU (float32, seeded random weights). */
int tb_model_preset(const char *name, uint64_t seed, tb_model *m, char *err, size_t err_size);

/* A DFlash drafter with seeded random weights ("tiny-dflash": drafts for
 * "tiny-llama"; "dflash-qwen3-8b", "dflash-llama-3-8b": DFlash's published
 * shapes for the qwen3-8b and llama-3-8b presets); -1 with the list when
 * unknown. tb_dflash_preset_config: its config only (the GPU makes the
 * weights on the device). */
int tb_dflash_preset(const char *name, uint64_t seed, tb_model *m, char *err, size_t err_size);
int tb_dflash_preset_config(const char *name, tb_model_config *cfg, char *err, size_t err_size);

/* Bytes the CPU model needs (float32 weights). */
size_t tb_model_cpu_bytes(const tb_model_config *cfg);
int64_t tb_config_n_params(const tb_model_config *cfg);

void tb_model_free(tb_model *m);

/* dtype = fp8 (fp8.h): every layer's projection matrices (QKV, output,
 * gate-up, down; in a MoE layer each routed expert's gate-up and down and
 * the shared experts') become the float32 values of their E4M3 form, one
 * power-of-two scale per output channel; embeddings, norms, biases, the
 * MoE router and the LM head stay as they are (the serving stacks' FP8
 * recipe leaves them in 16 bits too). Returns 0 (err: for a layout it
 * would not cover; none today). */
int tb_model_round_fp8(tb_model *m, char *err, size_t err_size);
/* The device's FP8 kernels' shape rule (16-byte rows of E4M3 codes): 0,
 * or -1 with the sizes that break it (checked before any upload). */
int tb_config_check_fp8(const tb_model_config *cfg, char *err, size_t err_size);


/* The MoE layer config (moe.h) of a Qwen3-MoE, LLaDA-MoE or LLaDA 2.x model's sparse layers. */
void tb_model_moe_config(const tb_model_config *cfg, tb_moe_config *out);

/* RoPE inverse frequencies for cfg (rope_dim / 2 of them, rope_dim the
 * rotated width, head_dim when 0), llama3 scaling applied as transformers does. */
void tb_rope_inv_freq(const tb_model_config *cfg, float *out);

#endif
