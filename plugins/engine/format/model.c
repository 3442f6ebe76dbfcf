/* model.c — see model.h. */
#define _GNU_SOURCE
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "fp8.h"

/* ------------------------------------------------------------- sizes */

static int64_t qkv_rows(const tb_model_config *c)
{
    return (int64_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
}

/* Floats of layer l's feed-forward: dense SwiGLU, or the router and the
 * experts of a MoE layer. */
static size_t mlp_floats(const tb_model_config *c, int l)
{
    size_t h = (size_t)c->hidden_size, mi = (size_t)c->moe_intermediate_size;
    if (tb_config_layer_is_moe(c, l)) /* router, experts; LLaDA 2.x: expert_bias, shared experts */
        return (size_t)c->n_experts * (h + 3 * mi * h) +
               (c->arch == TB_ARCH_LLADA2_MOE ? (size_t)c->n_experts + 3 * (size_t)c->n_shared_experts * mi * h : 0);
    return 3 * (size_t)c->intermediate_size * h;
}

/* Floats of layer l in the fused CPU layout. */
static size_t layer_floats(const tb_model_config *c, int l)
{
    size_t h = (size_t)c->hidden_size, q = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t rows = (size_t)qkv_rows(c);
    return h + rows * h + (c->qkv_bias ? rows : 0) + (c->qk_norm ? 2 * (size_t)c->head_dim : 0) + h * q + h +
           mlp_floats(c, l);
}

/* A DFlash drafter's fc and hidden_norm */
static size_t dflash_floats(const tb_model_config *c)
{
    size_t h = (size_t)c->hidden_size;
    return h * (size_t)c->n_target_ids * h + h;
}

static size_t model_floats(const tb_model_config *c)
{
    size_t vh = (size_t)c->vocab_size * (size_t)c->hidden_size, n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += layer_floats(c, l);
    if (c->arch == TB_ARCH_DFLASH) /* no embedding, no LM head: the target's */
        return dflash_floats(c) + (size_t)c->hidden_size + n + (size_t)c->head_dim / 2;
    return vh * (c->tie_word_embeddings ? 1 : 2) + (size_t)c->hidden_size + n + (size_t)c->head_dim / 2;
}

size_t tb_model_cpu_bytes(const tb_model_config *cfg)
{
    return model_floats(cfg) * sizeof(float);
}

int64_t tb_config_n_params(const tb_model_config *c)
{
    /* rope_inv_freq is not a parameter */
    return (int64_t)(model_floats(c) - (size_t)c->head_dim / 2);
}

/* Carve the arena into the model's arrays. */
static int layout(tb_model *m, char *err, size_t err_size)
{
    const tb_model_config *c = &m->cfg;
    m->arena_floats = model_floats(c);
    m->arena = malloc(m->arena_floats * sizeof(float));
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->arena || !m->layers) {
        snprintf(err, err_size, "out of memory: the model needs %.2f GB as float32 on the CPU",
                 (double)m->arena_floats * 4 / 1e9);
        free(m->arena);
        free(m->layers);
        m->arena = NULL;
        m->layers = NULL;
        return -1;
    }
    float *p = m->arena;
    size_t h = (size_t)c->hidden_size, vh = (size_t)c->vocab_size * h;
    size_t q = (size_t)c->n_heads * (size_t)c->head_dim, inter = (size_t)c->intermediate_size;
    size_t rows = (size_t)qkv_rows(c);
    if (c->arch == TB_ARCH_DFLASH) {
        m->fc = p, p += h * (size_t)c->n_target_ids * h;
        m->hidden_norm = p, p += h;
    } else {
        m->embed = p, p += vh;
        m->lm_head = c->tie_word_embeddings ? m->embed : (p += vh, p - vh);
    }
    m->final_norm = p, p += h;
    for (int l = 0; l < c->n_layers; l++) {
        tb_layer *L = &m->layers[l];
        L->attn_norm = p, p += h;
        L->wqkv = p, p += rows * h;
        L->bqkv = c->qkv_bias ? (p += rows, p - rows) : NULL;
        L->q_norm = c->qk_norm ? (p += c->head_dim, p - c->head_dim) : NULL;
        L->k_norm = c->qk_norm ? (p += c->head_dim, p - c->head_dim) : NULL;
        L->wo = p, p += h * q;
        L->mlp_norm = p, p += h;
        if (tb_config_layer_is_moe(c, l)) {
            size_t E = (size_t)c->n_experts, mi = (size_t)c->moe_intermediate_size;
            L->router = p, p += E * h;
            L->experts_gate_up = p, p += E * 2 * mi * h;
            L->experts_down = p, p += E * h * mi;
            if (c->arch == TB_ARCH_LLADA2_MOE) {
                size_t S = (size_t)c->n_shared_experts * mi;
                L->score_bias = p, p += E;
                L->shared_gate_up = S ? p : NULL, p += 2 * S * h;
                L->shared_down = S ? p : NULL, p += h * S;
            }
        } else {
            L->w_gate_up = p, p += 2 * inter * h;
            L->w_down = p, p += h * inter;
        }
    }
    m->rope_inv_freq = p, p += (size_t)c->head_dim / 2;
    m->n_params = tb_config_n_params(c);
    return 0;
}

void tb_model_moe_config(const tb_model_config *c, tb_moe_config *out)
{
    /* Qwen3-MoE and LLaDA-MoE: softmax over all experts, top-k,
     * renormalised when norm_topk_prob (never for LLaDA-MoE: config.c);
     * no groups, no scaling, no shared expert */
    *out = (tb_moe_config){.hidden = c->hidden_size, .n_experts = c->n_experts, .top_k = c->n_experts_per_tok,
                           .expert_inter = c->moe_intermediate_size, .scoring = TB_MOE_SOFTMAX,
                           .norm_topk = c->norm_topk_prob, .n_group = 1, .topk_group = 1, .routed_scale = 1.0f};
    if (c->arch == TB_ARCH_LLADA2_MOE) { /* LLaDA2MoeGate (config.c: norm_topk_prob = k > 1) */
        out->scoring = TB_MOE_SIGMOID;
        out->n_group = c->n_group, out->topk_group = c->topk_group, out->group_mask_inf = 1;
        out->routed_scale = (float)c->routed_scale;
        out->shared_inter = c->n_shared_experts * c->moe_intermediate_size;
    }
}

void tb_rope_inv_freq(const tb_model_config *c, float *out)
{
    int dim = tb_config_rope_dim(c), half = dim / 2;
    for (int i = 0; i < half; i++) {
        /* transformers: 1 / theta^(arange(0, dim, 2) / dim), in float32 */
        float f = (float)(1.0 / pow(c->rope_theta, (double)(2 * i) / dim));
        if (c->rope_llama3) {
            double old = c->rope_original_max_pos;
            double low_wavelen = old / c->rope_low_freq_factor;
            double high_wavelen = old / c->rope_high_freq_factor;
            double wavelen = 2 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = (float)(f / c->rope_factor);
            } else if (wavelen >= high_wavelen) {
                double smooth = (old / wavelen - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (float)((1 - smooth) * f / c->rope_factor + smooth * f);
            }
        }
        out[i] = f;
    }
}

/* ------------------------------------------------------------ loading */

/* Copy tensor `name` (shape rows x cols, or a vector when cols == 0) into
 * dst as float32. */
static int take(const tb_weights *w, const char *name, int64_t rows, int64_t cols, float *dst,
                char *err, size_t err_size)
{
    int64_t shape[2] = {rows, cols};
    if (tb_weights_expect(w, name, cols ? 2 : 1, shape, err, err_size) != 0)
        return -1;
    const tb_tensor *t = tb_weights_find(w, name);
    tb_to_f32(t->dtype, t->data, dst, (size_t)t->n_elements);
    return 0;
}

/* Tensor names of one architecture family ("%d" = layer index). */
typedef struct weight_names {
    const char *embed, *final_norm, *lm_head, *layer;
    const char *attn_norm, *q, *k, *v, *o, *mlp_norm, *gate, *up, *down, *qb, *kb, *vb, *qn, *kn;
    const char *qkv, *qkvb; /* one fused [q; k; v] projection (LLaDA 2.x), NULL: separate */
} weight_names;

/* Llama, Qwen2, Qwen3 and the models on their blocks (Dream, SDAR,
 * Fast-dLLM v2) use transformers' names. */
static const weight_names hf_names = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.%d.",
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", NULL, NULL,
};

/* LLaDA keeps OLMo's names: ff_proj is the gate, ff_out the down proj. */
static const weight_names llada_names = {
    "model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight",
    "model.transformer.blocks.%d.", "attn_norm.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
    "attn_out.weight", "ff_norm.weight", "ff_proj.weight", "up_proj.weight", "ff_out.weight", "q_proj.bias",
    "k_proj.bias", "v_proj.bias", NULL, NULL, NULL, NULL,
};

/* LLaDA 2.x (modeling_llada2_moe.py): Bailing's names, q, k and v in one
 * query_key_value matrix with the engine's row order (q heads, k heads, v
 * heads), the o projection "dense". */
static const weight_names llada2_names = {
    "model.word_embeddings.weight", "model.norm.weight", "lm_head.weight", "model.layers.%d.",
    "input_layernorm.weight", NULL, NULL, NULL, "attention.dense.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", NULL, NULL, NULL,
    "attention.query_layernorm.weight", "attention.key_layernorm.weight", "attention.query_key_value.weight",
    "attention.query_key_value.bias",
};

/* DFlash's drafter (z-lab dflash/model.py DFlashDraftModel's modules): the
 * Qwen3 layer names without "model.", the final norm "norm", no embedding
 * and no LM head; fc.weight and hidden_norm.weight loaded apart. */
static const weight_names dflash_names = {
    NULL, "norm.weight", NULL, "layers.%d.",
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", NULL, NULL,
};

/* The same under "model." (checkpoints saved from a wrapper; SGLang's
 * loader takes both spellings) */
static const weight_names dflash_model_names = {
    NULL, "model.norm.weight", NULL, "model.layers.%d.",
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight", NULL, NULL,
};

static int load_folder(const char *dir, tb_model *m, int drafter, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (tb_config_load(path, &m->cfg, err, err_size) != 0)
        return -1;
    const tb_model_config *c = &m->cfg;
    if ((c->arch == TB_ARCH_DFLASH) != (drafter != 0)) {
        snprintf(err, err_size,
                 drafter ? "%s: field architectures: expected DFlashDraftModel (a DFlash drafter), got %s"
                         : "%s: %s is a DFlash drafter: it drafts for a target model and does not run alone",
                 path, c->arch_name);
        memset(m, 0, sizeof *m);
        return -1;
    }
    if (c->o_bias) {
        snprintf(err, err_size, "%s: %s = true (a bias on the o projection) is not supported by this engine", path,
                 c->arch == TB_ARCH_LLADA2_MOE ? "use_bias" : "attention_bias");
        return -1;
    }
    const weight_names *nm = c->arch == TB_ARCH_LLADA        ? &llada_names
                             : c->arch == TB_ARCH_LLADA2_MOE ? &llada2_names
                             : drafter                       ? &dflash_names
                                                             : &hf_names;
    tb_weights *w = NULL;
    if (tb_weights_open(dir, &w, err, err_size) != 0)
        return -1;
    if (layout(m, err, err_size) != 0) {
        tb_weights_close(w);
        return -1;
    }
    const char *base = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : dir);
    /* a drafter: "fc.weight" ..., or all of them under "model." */
    int model_prefix = drafter && !tb_weights_find(w, "fc.weight") && tb_weights_find(w, "model.fc.weight");
    if (model_prefix)
        nm = &dflash_model_names;
    const char *fc_name = model_prefix ? "model.fc.weight" : "fc.weight";
    const char *hn_name = model_prefix ? "model.hidden_norm.weight" : "hidden_norm.weight";
    const tb_tensor *emb = tb_weights_find(w, drafter ? fc_name : nm->embed);
    snprintf(m->source_dtype, sizeof m->source_dtype, "%s", emb ? tb_dtype_name(emb->dtype) : "?");

    int64_t h = c->hidden_size, hd = c->head_dim, inter = c->intermediate_size;
    int64_t qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
    int rc;
    if (drafter) { /* fc [hidden][ids x hidden], hidden_norm [hidden] */
        rc = take(w, fc_name, h, (int64_t)c->n_target_ids * h, m->fc, err, err_size) ||
             take(w, hn_name, h, 0, m->hidden_norm, err, err_size);
    } else {
        rc = take(w, nm->embed, c->vocab_size, h, m->embed, err, err_size);
        if (!rc && !c->tie_word_embeddings)
            rc = take(w, nm->lm_head, c->vocab_size, h, m->lm_head, err, err_size);
    }
    if (!rc)
        rc = take(w, nm->final_norm, h, 0, m->final_norm, err, err_size);
    for (int l = 0; l < c->n_layers && !rc; l++) {
        tb_layer *L = &m->layers[l];
        char prefix[64], n[192];
        snprintf(prefix, sizeof prefix, nm->layer, l);
#define T(suffix, rows, cols, dst) \
    (snprintf(n, sizeof n, "%s%s", prefix, suffix), take(w, n, rows, cols, dst, err, err_size))
        if (nm->qkv)
            rc = T(nm->attn_norm, h, 0, L->attn_norm) || T(nm->qkv, qd + 2 * kvd, h, L->wqkv);
        else
            rc = T(nm->attn_norm, h, 0, L->attn_norm) || T(nm->q, qd, h, L->wqkv) ||
                 T(nm->k, kvd, h, L->wqkv + qd * h) || T(nm->v, kvd, h, L->wqkv + (qd + kvd) * h);
        rc = rc || T(nm->o, h, qd, L->wo) || T(nm->mlp_norm, h, 0, L->mlp_norm);
        if (!rc && L->router) { /* a MoE layer: mlp.gate, mlp.experts.E.{gate,up,down}_proj, as published */
            int64_t mi = c->moe_intermediate_size;
            rc = T("mlp.gate.weight", c->n_experts, h, L->router);
            for (int e = 0; e < c->n_experts && !rc; e++) {
                char en[96];
                float *gu = L->experts_gate_up + (size_t)e * 2 * mi * h;
                snprintf(en, sizeof en, "mlp.experts.%d.gate_proj.weight", e);
                rc = T(en, mi, h, gu);
                snprintf(en, sizeof en, "mlp.experts.%d.up_proj.weight", e);
                rc = rc || T(en, mi, h, gu + mi * h);
                snprintf(en, sizeof en, "mlp.experts.%d.down_proj.weight", e);
                rc = rc || T(en, h, mi, L->experts_down + (size_t)e * h * mi);
            }
            if (!rc && L->score_bias) /* LLaDA 2.x: the gate's expert_bias buffer, shared_experts */
                rc = T("mlp.gate.expert_bias", c->n_experts, 0, L->score_bias);
            if (!rc && L->shared_gate_up) {
                int64_t S = (int64_t)c->n_shared_experts * mi;
                rc = T("mlp.shared_experts.gate_proj.weight", S, h, L->shared_gate_up) ||
                     T("mlp.shared_experts.up_proj.weight", S, h, L->shared_gate_up + S * h) ||
                     T("mlp.shared_experts.down_proj.weight", h, S, L->shared_down);
            }
        } else if (!rc) {
            rc = T(nm->gate, inter, h, L->w_gate_up) || T(nm->up, inter, h, L->w_gate_up + inter * h) ||
                 T(nm->down, h, inter, L->w_down);
        }
        if (!rc && c->qkv_bias && nm->qkvb)
            rc = T(nm->qkvb, qd + 2 * kvd, 0, L->bqkv);
        else if (!rc && c->qkv_bias)
            rc = T(nm->qb, qd, 0, L->bqkv) || T(nm->kb, kvd, 0, L->bqkv + qd) ||
                 T(nm->vb, kvd, 0, L->bqkv + qd + kvd);
        if (!rc && c->qk_norm)
            rc = T(nm->qn, hd, 0, L->q_norm) || T(nm->kn, hd, 0, L->k_norm);
#undef T
    }
    tb_weights_close(w);
    if (rc) {
        tb_model_free(m);
        return -1;
    }
    tb_rope_inv_freq(c, m->rope_inv_freq);
    return 0;
}

int tb_model_load(const char *dir, tb_model *m, char *err, size_t err_size)
{
    return load_folder(dir, m, 0, err, err_size);
}

int tb_dflash_load(const char *dir, tb_model *m, char *err, size_t err_size)
{
    return load_folder(dir, m, 1, err, err_size);
}

/* ------------------------------------------------------------- presets */

typedef struct preset {
    const char *name;
    tb_model_config cfg;
} preset;

#define LLAMA3_ROPE .rope_llama3 = 1, .rope_factor = 8, .rope_low_freq_factor = 1, \
                    .rope_high_freq_factor = 4, .rope_original_max_pos = 8192

static const preset presets[] = {
    {"llama-3-8b", {.arch = TB_ARCH_LLAMA, .arch_name = "LlamaForCausalLM", .vocab_size = 128256,
                    .hidden_size = 4096, .intermediate_size = 14336, .n_layers = 32, .n_heads = 32,
                    .n_kv_heads = 8, .head_dim = 128, .rms_eps = 1e-5, .rope_theta = 500000, LLAMA3_ROPE,
                    .max_position_embeddings = 131072, .eos_ids = {128001, 128009}, .n_eos = 2,
                    .bos_id = 128000, .mask_id = -1, .torch_dtype = "bfloat16"}},
    /* Llama-3.1-70B's shape: 141 GB of bf16 weights, more than one H200
     * holds: run it with tp >= 2 (gpu.h's tb_gpu_create_tp) */
    {"llama-3-70b", {.arch = TB_ARCH_LLAMA, .arch_name = "LlamaForCausalLM", .vocab_size = 128256,
                     .hidden_size = 8192, .intermediate_size = 28672, .n_layers = 80, .n_heads = 64,
                     .n_kv_heads = 8, .head_dim = 128, .rms_eps = 1e-5, .rope_theta = 500000, LLAMA3_ROPE,
                     .max_position_embeddings = 131072, .eos_ids = {128001, 128009}, .n_eos = 2,
                     .bos_id = 128000, .mask_id = -1, .torch_dtype = "bfloat16"}},
    {"llama-3.2-1b", {.arch = TB_ARCH_LLAMA, .arch_name = "LlamaForCausalLM", .vocab_size = 128256,
                      .hidden_size = 2048, .intermediate_size = 8192, .n_layers = 16, .n_heads = 32,
                      .n_kv_heads = 8, .head_dim = 64, .rms_eps = 1e-5, .rope_theta = 500000, .rope_llama3 = 1,
                      .rope_factor = 32, .rope_low_freq_factor = 1, .rope_high_freq_factor = 4,
                      .rope_original_max_pos = 8192, .max_position_embeddings = 131072,
                      .tie_word_embeddings = 1, .eos_ids = {128001}, .n_eos = 1, .bos_id = 128000,
                      .mask_id = -1, .torch_dtype = "bfloat16"}},
    {"qwen2.5-7b", {.arch = TB_ARCH_QWEN2, .arch_name = "Qwen2ForCausalLM", .vocab_size = 152064,
                    .hidden_size = 3584, .intermediate_size = 18944, .n_layers = 28, .n_heads = 28,
                    .n_kv_heads = 4, .head_dim = 128, .rms_eps = 1e-6, .rope_theta = 1000000,
                    .max_position_embeddings = 32768, .qkv_bias = 1, .eos_ids = {151643, 151645}, .n_eos = 2,
                    .bos_id = -1, .mask_id = -1, .torch_dtype = "bfloat16"}},
    {"qwen2.5-0.5b", {.arch = TB_ARCH_QWEN2, .arch_name = "Qwen2ForCausalLM", .vocab_size = 151936,
                      .hidden_size = 896, .intermediate_size = 4864, .n_layers = 24, .n_heads = 14,
                      .n_kv_heads = 2, .head_dim = 64, .rms_eps = 1e-6, .rope_theta = 1000000,
                      .max_position_embeddings = 32768, .tie_word_embeddings = 1, .qkv_bias = 1,
                      .eos_ids = {151643}, .n_eos = 1, .bos_id = -1, .mask_id = -1, .torch_dtype = "bfloat16"}},
    {"llada-8b", {.arch = TB_ARCH_LLADA, .arch_name = "LLaDAModelLM", .vocab_size = 126464,
                  .hidden_size = 4096, .intermediate_size = 12288, .n_layers = 32, .n_heads = 32,
                  .n_kv_heads = 32, .head_dim = 128, .rms_eps = 1e-5, .rope_theta = 500000,
                  .max_position_embeddings = 4096, .eos_ids = {126081}, .n_eos = 1, .bos_id = 126080,
                  .mask_id = 126336, .torch_dtype = "bfloat16"}},
    {"dream-7b", {.arch = TB_ARCH_DREAM, .arch_name = "DreamModel", .vocab_size = 152064,
                  .hidden_size = 3584, .intermediate_size = 18944, .n_layers = 28, .n_heads = 28,
                  .n_kv_heads = 4, .head_dim = 128, .rms_eps = 1e-6, .rope_theta = 1000000,
                  .max_position_embeddings = 131072, .qkv_bias = 1, .eos_ids = {151643}, .n_eos = 1,
                  .bos_id = 151643, .mask_id = 151666, .torch_dtype = "bfloat16"}},
    /* Qwen3-8B's shape, and SDAR-8B-Chat's (its config.json: Qwen3-8B
     * with block_size 4 and mask 151669) */
    {"qwen3-8b", {.arch = TB_ARCH_QWEN3, .arch_name = "Qwen3ForCausalLM", .vocab_size = 151936,
                  .hidden_size = 4096, .intermediate_size = 12288, .n_layers = 36, .n_heads = 32,
                  .n_kv_heads = 8, .head_dim = 128, .rms_eps = 1e-6, .rope_theta = 1000000,
                  .max_position_embeddings = 40960, .qk_norm = 1, .eos_ids = {151645, 151643}, .n_eos = 2,
                  .bos_id = -1, .mask_id = -1, .torch_dtype = "bfloat16"}},
    {"sdar-8b", {.arch = TB_ARCH_SDAR, .arch_name = "SDARForCausalLM", .vocab_size = 151936,
                 .hidden_size = 4096, .intermediate_size = 12288, .n_layers = 36, .n_heads = 32,
                 .n_kv_heads = 8, .head_dim = 128, .rms_eps = 1e-6, .rope_theta = 1000000,
                 .max_position_embeddings = 32768, .qk_norm = 1, .block_size = 4, .eos_ids = {151643}, .n_eos = 1,
                 .bos_id = 151643, .mask_id = 151669, .torch_dtype = "bfloat16"}},
    /* Fast_dLLM_v2_7B: Qwen2.5-7B-Instruct's shape, bd_size 32, mask 151665 */
    {"fast-dllm-v2-7b", {.arch = TB_ARCH_FAST_DLLM_V2, .arch_name = "Fast_dLLM_QwenForCausalLM",
                         .vocab_size = 152064, .hidden_size = 3584, .intermediate_size = 18944, .n_layers = 28,
                         .n_heads = 28, .n_kv_heads = 4, .head_dim = 128, .rms_eps = 1e-6, .rope_theta = 1000000,
                         .max_position_embeddings = 32768, .qkv_bias = 1, .block_size = 32,
                         .eos_ids = {151645}, .n_eos = 1, .bos_id = -1, .mask_id = 151665,
                         .torch_dtype = "bfloat16"}},
    {"tiny-qwen3", {.arch = TB_ARCH_QWEN3, .arch_name = "Qwen3ForCausalLM", .vocab_size = 512,
                    .hidden_size = 64, .intermediate_size = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                    .head_dim = 32, .rms_eps = 1e-6, .rope_theta = 1000000, .max_position_embeddings = 2048,
                    .qk_norm = 1, .eos_ids = {1}, .n_eos = 1, .bos_id = -1, .mask_id = -1,
                    .torch_dtype = "float32"}},
    /* a group of 8 query heads a K/V head (Qwen3-30B-A3B's), tiny: the
     * GPU's decode attention takes it as two blocks of 4 heads */
    {"tiny-qwen3-g8", {.arch = TB_ARCH_QWEN3, .arch_name = "Qwen3ForCausalLM", .vocab_size = 512,
                       .hidden_size = 64, .intermediate_size = 128, .n_layers = 2, .n_heads = 8, .n_kv_heads = 1,
                       .head_dim = 16, .rms_eps = 1e-6, .rope_theta = 1000000, .max_position_embeddings = 2048,
                       .qk_norm = 1, .eos_ids = {1}, .n_eos = 1, .bos_id = -1, .mask_id = -1,
                       .torch_dtype = "float32"}},
    {"tiny-sdar", {.arch = TB_ARCH_SDAR, .arch_name = "SDARForCausalLM", .vocab_size = 512, .hidden_size = 64,
                   .intermediate_size = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
                   .rms_eps = 1e-6, .rope_theta = 1000000, .max_position_embeddings = 4096, .qk_norm = 1,
                   .block_size = 4, .eos_ids = {508}, .n_eos = 1, .bos_id = 507, .mask_id = 510,
                   .torch_dtype = "float32"}},
    {"tiny-fast-dllm-v2", {.arch = TB_ARCH_FAST_DLLM_V2, .arch_name = "Fast_dLLM_QwenForCausalLM",
                           .vocab_size = 512, .hidden_size = 64, .intermediate_size = 128, .n_layers = 2,
                           .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .rms_eps = 1e-6, .rope_theta = 1000000,
                           .max_position_embeddings = 4096, .qkv_bias = 1, .block_size = 8, .eos_ids = {508},
                           .n_eos = 1, .bos_id = -1, .mask_id = 510, .torch_dtype = "float32"}},
    /* Qwen3-30B-A3B's shape (128 experts, 8 a token) and a tiny one */
    {"qwen3-30b-a3b", {.arch = TB_ARCH_QWEN3_MOE, .arch_name = "Qwen3MoeForCausalLM", .vocab_size = 151936,
                       .hidden_size = 2048, .intermediate_size = 6144, .n_layers = 48, .n_heads = 32,
                       .n_kv_heads = 4, .head_dim = 128, .rms_eps = 1e-6, .rope_theta = 1000000,
                       .max_position_embeddings = 40960, .qk_norm = 1, .n_experts = 128, .n_experts_per_tok = 8,
                       .moe_intermediate_size = 768, .norm_topk_prob = 1, .decoder_sparse_step = 1,
                       .eos_ids = {151645, 151643}, .n_eos = 2, .bos_id = -1, .mask_id = -1,
                       .torch_dtype = "bfloat16"}},
    {"tiny-qwen3-moe", {.arch = TB_ARCH_QWEN3_MOE, .arch_name = "Qwen3MoeForCausalLM", .vocab_size = 512,
                        .hidden_size = 64, .intermediate_size = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                        .head_dim = 32, .rms_eps = 1e-6, .rope_theta = 1000000, .max_position_embeddings = 2048,
                        .qk_norm = 1, .n_experts = 8, .n_experts_per_tok = 2, .moe_intermediate_size = 32,
                        .norm_topk_prob = 1, .decoder_sparse_step = 1, .eos_ids = {1}, .n_eos = 1, .bos_id = -1,
                        .mask_id = -1, .torch_dtype = "float32"}},
    /* a tiny one whose experts' widths are not round: hidden 200 (a
     * multiple of 8, not of 16), experts of 1,056 (132 chunks of 8), 8 of
     * 8 chosen: every warp and every bound of the GPU's batch-1 kernels */
    {"tiny-qwen3-moe-wide", {.arch = TB_ARCH_QWEN3_MOE, .arch_name = "Qwen3MoeForCausalLM", .vocab_size = 512,
                             .hidden_size = 200, .intermediate_size = 256, .n_layers = 2, .n_heads = 4,
                             .n_kv_heads = 2, .head_dim = 32, .rms_eps = 1e-6, .rope_theta = 1000000,
                             .max_position_embeddings = 2048, .qk_norm = 1, .n_experts = 8, .n_experts_per_tok = 8,
                             .moe_intermediate_size = 1056, .norm_topk_prob = 1, .decoder_sparse_step = 1,
                             .eos_ids = {1}, .n_eos = 1, .bos_id = -1, .mask_id = -1, .torch_dtype = "float32"}},
    /* LLaDA-MoE-7B-A1B's shape (inclusionAI/LLaDA-MoE-7B-A1B-Base: OLMoE
     * blocks with per-head q/k norms, every layer 64 experts, 8 a token,
     * weights not renormalised; mask 156895 as its generation code) and a
     * tiny one */
    {"llada-moe-7b-a1b", {.arch = TB_ARCH_LLADA_MOE, .arch_name = "LLaDAMoEModelLM", .vocab_size = 157184,
                          .hidden_size = 2048, .intermediate_size = 8192, .n_layers = 16, .n_heads = 16,
                          .n_kv_heads = 16, .head_dim = 128, .rms_eps = 1e-5, .rope_theta = 50000,
                          .max_position_embeddings = 8192, .qk_norm = 1, .n_experts = 64, .n_experts_per_tok = 8,
                          .moe_intermediate_size = 1024, .norm_topk_prob = 0, .decoder_sparse_step = 1,
                          .eos_ids = {156892}, .n_eos = 1, .bos_id = -1, .mask_id = 156895,
                          .torch_dtype = "bfloat16"}},
    {"tiny-llada-moe", {.arch = TB_ARCH_LLADA_MOE, .arch_name = "LLaDAMoEModelLM", .vocab_size = 512,
                        .hidden_size = 64, .intermediate_size = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4,
                        .head_dim = 16, .rms_eps = 1e-5, .rope_theta = 50000, .max_position_embeddings = 4096,
                        .qk_norm = 1, .n_experts = 8, .n_experts_per_tok = 2, .moe_intermediate_size = 32,
                        .norm_topk_prob = 0, .decoder_sparse_step = 1, .eos_ids = {508}, .n_eos = 1, .bos_id = 507,
                        .mask_id = 510, .torch_dtype = "float32"}},
    /* LLaDA2.0-mini's shape (the config.json inclusionAI publishes in
     * github.com/inclusionAI/dFactory configs/model_configs/llada2_mini/:
     * 20 layers, the first dense; 256 experts of 512 in 8 groups, 4 groups
     * and 8 experts a token, 1 shared expert, scaling 2.5; head_dim 128
     * with half of it rotated; mask 156895 and EOS 156892 as its
     * generate()) and a tiny one (groups of 2 experts, 2 of 4 groups) */
    {"llada2-mini", {.arch = TB_ARCH_LLADA2_MOE, .arch_name = "LLaDA2MoeModelLM", .vocab_size = 157184,
                     .hidden_size = 2048, .intermediate_size = 5120, .n_layers = 20, .n_heads = 16, .n_kv_heads = 4,
                     .head_dim = 128, .rope_dim = 64, .rms_eps = 1e-6, .rope_theta = 600000,
                     .max_position_embeddings = 16384, .qk_norm = 1, .block_size = 32, .n_experts = 256,
                     .n_experts_per_tok = 8, .moe_intermediate_size = 512, .norm_topk_prob = 1,
                     .decoder_sparse_step = 1, .n_shared_experts = 1, .n_group = 8, .topk_group = 4,
                     .first_k_dense = 1, .routed_scale = 2.5, .eos_ids = {156892}, .n_eos = 1, .bos_id = -1,
                     .mask_id = 156895, .torch_dtype = "bfloat16"}},
    {"tiny-llada2", {.arch = TB_ARCH_LLADA2_MOE, .arch_name = "LLaDA2MoeModelLM", .vocab_size = 512,
                     .hidden_size = 64, .intermediate_size = 128, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 16, .rope_dim = 8, .rms_eps = 1e-6, .rope_theta = 600000,
                     .max_position_embeddings = 4096, .qk_norm = 1, .block_size = 8, .n_experts = 8,
                     .n_experts_per_tok = 3, .moe_intermediate_size = 32, .norm_topk_prob = 1,
                     .decoder_sparse_step = 1, .n_shared_experts = 1, .n_group = 4, .topk_group = 2,
                     .first_k_dense = 1, .routed_scale = 2.5, .eos_ids = {508}, .n_eos = 1, .bos_id = 507,
                     .mask_id = 510, .torch_dtype = "float32"}},
    /* LLaDA2.0-mini's routing (256 experts in 8 groups, 4 groups and 8
     * experts a token) at the tiny width: the router's kernels at the
     * published expert count (tests/gpu) */
    {"tiny-llada2-wide", {.arch = TB_ARCH_LLADA2_MOE, .arch_name = "LLaDA2MoeModelLM", .vocab_size = 512,
                          .hidden_size = 64, .intermediate_size = 128, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                          .head_dim = 16, .rope_dim = 8, .rms_eps = 1e-6, .rope_theta = 600000,
                          .max_position_embeddings = 4096, .qk_norm = 1, .block_size = 8, .n_experts = 256,
                          .n_experts_per_tok = 8, .moe_intermediate_size = 16, .norm_topk_prob = 1,
                          .decoder_sparse_step = 1, .n_shared_experts = 1, .n_group = 8, .topk_group = 4,
                          .first_k_dense = 1, .routed_scale = 2.5, .eos_ids = {508}, .n_eos = 1, .bos_id = 507,
                          .mask_id = 510, .torch_dtype = "float32"}},
    {"tiny-llama", {.arch = TB_ARCH_LLAMA, .arch_name = "LlamaForCausalLM", .vocab_size = 512,
                    .hidden_size = 64, .intermediate_size = 160, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                    .head_dim = 16, .rms_eps = 1e-5, .rope_theta = 10000, .max_position_embeddings = 2048,
                    .eos_ids = {1}, .n_eos = 1, .bos_id = 0, .mask_id = -1, .torch_dtype = "float32"}},
    {"tiny-qwen2", {.arch = TB_ARCH_QWEN2, .arch_name = "Qwen2ForCausalLM", .vocab_size = 512,
                    .hidden_size = 64, .intermediate_size = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 1,
                    .head_dim = 16, .rms_eps = 1e-6, .rope_theta = 1000000, .max_position_embeddings = 2048,
                    .qkv_bias = 1, .eos_ids = {1}, .n_eos = 1, .bos_id = -1, .mask_id = -1,
                    .torch_dtype = "float32"}},
    {"tiny-llada", {.arch = TB_ARCH_LLADA, .arch_name = "LLaDAModelLM", .vocab_size = 512, .hidden_size = 64,
                    .intermediate_size = 160, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4, .head_dim = 16,
                    .rms_eps = 1e-5, .rope_theta = 500000, .max_position_embeddings = 4096, .eos_ids = {508},
                    .n_eos = 1, .bos_id = 507, .mask_id = 510, .torch_dtype = "float32"}},
    {"tiny-dream", {.arch = TB_ARCH_DREAM, .arch_name = "DreamModel", .vocab_size = 512, .hidden_size = 64,
                    .intermediate_size = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
                    .rms_eps = 1e-6, .rope_theta = 1000000, .max_position_embeddings = 4096, .qkv_bias = 1,
                    .eos_ids = {508}, .n_eos = 1, .bos_id = 507, .mask_id = 510, .torch_dtype = "float32"}},
};

int tb_preset_config(const char *name, tb_model_config *cfg, char *err, size_t err_size)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) {
            *cfg = presets[i].cfg;
            cfg->random_weights = 1;
            cfg->prompt_bos = tb_config_default_bos(cfg);
            return 0;
        }
    int n = snprintf(err, err_size, "unknown preset \"%s\" (presets:", name);
    for (size_t i = 0; i < sizeof presets / sizeof presets[0] && n > 0 && (size_t)n < err_size; i++)
        n += snprintf(err + n, err_size - (size_t)n, " %s", presets[i].name);
    if (n > 0 && (size_t)n < err_size)
        snprintf(err + n, err_size - (size_t)n, ")");
    return -1;
}

/* splitmix64: a seeded stream of 64-bit values. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in [-a, a] with a = std sqrt(3): speed does not depend on the
 * distribution, only on the values being ordinary (no zeros, no NaN). */
static void fill_random(float *p, size_t n, double std, uint64_t *s)
{
    float a = (float)(std * sqrt(3.0));
    for (size_t i = 0; i < n; i++)
        p[i] = a * (2.0f * (float)(mix(s) >> 40) / (float)(1 << 24) - 1.0f);
}

static void fill_const(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

/* DFlash drafters for tests (tb_dflash_preset), apart from the models
 * above: a drafter does not run alone. tiny-dflash drafts for tiny-llama
 * (its two layers' outputs as features). */
static const preset dflash_presets[] = {
    {"tiny-dflash", {.arch = TB_ARCH_DFLASH, .arch_name = "DFlashDraftModel", .vocab_size = 512, .hidden_size = 64,
                     .intermediate_size = 96, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
                     .rms_eps = 1e-6, .rope_theta = 10000, .max_position_embeddings = 2048, .qk_norm = 1,
                     .block_size = 8, .n_target_ids = 2, .target_layer_ids = {0, 1}, .n_target_layers = 2,
                     .bos_id = -1, .mask_id = 510, .torch_dtype = "float32"}},
    /* DFlash's published shape for Qwen3-8B (z-lab/Qwen3-8B-DFlash-b16's
     * config.json): 5 Qwen3 layers at the target's widths, block 16, five
     * target layers spread over its 36, mask <|MASK|> = 151669. */
    {"dflash-qwen3-8b", {.arch = TB_ARCH_DFLASH, .arch_name = "DFlashDraftModel", .vocab_size = 151936,
                         .hidden_size = 4096, .intermediate_size = 12288, .n_layers = 5, .n_heads = 32,
                         .n_kv_heads = 8, .head_dim = 128, .rms_eps = 1e-6, .rope_theta = 1000000,
                         .max_position_embeddings = 40960, .qk_norm = 1, .block_size = 16, .n_target_ids = 5,
                         .target_layer_ids = {1, 9, 17, 25, 33}, .n_target_layers = 36, .bos_id = -1,
                         .mask_id = 151669, .torch_dtype = "bfloat16"}},
    /* The same for Llama-3.1-8B (z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat):
     * 5 Qwen3-style layers at Llama-3.1-8B's widths, block 16, the spread
     * 1, 8, 15, 22, 29 of its 32 layers; mask: a reserved special token
     * (random weights: any unused id serves). */
    {"dflash-llama-3-8b", {.arch = TB_ARCH_DFLASH, .arch_name = "DFlashDraftModel", .vocab_size = 128256,
                           .hidden_size = 4096, .intermediate_size = 14336, .n_layers = 5, .n_heads = 32,
                           .n_kv_heads = 8, .head_dim = 128, .rms_eps = 1e-5, .rope_theta = 500000,
                           .max_position_embeddings = 131072, .qk_norm = 1, .block_size = 16, .n_target_ids = 5,
                           .target_layer_ids = {1, 8, 15, 22, 29}, .n_target_layers = 32, .bos_id = -1,
                           .mask_id = 128002, .torch_dtype = "bfloat16"}},
};

int tb_dflash_preset_config(const char *name, tb_model_config *cfg, char *err, size_t err_size)
{
    for (size_t i = 0; i < sizeof dflash_presets / sizeof dflash_presets[0]; i++)
        if (strcmp(dflash_presets[i].name, name) == 0) {
            *cfg = dflash_presets[i].cfg;
            cfg->random_weights = 1;
            return 0;
        }
    snprintf(err, err_size,
             "unknown DFlash drafter preset \"%s\" (presets: tiny-dflash, dflash-qwen3-8b, dflash-llama-3-8b)", name);
    return -1;
}

static int make_preset(const char *name, uint64_t seed, tb_model *m, char *err, size_t err_size);

int tb_dflash_preset(const char *name, uint64_t seed, tb_model *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    if (tb_dflash_preset_config(name, &m->cfg, err, err_size) != 0)
        return -1;
    return make_preset(name, seed, m, err, err_size);
}

int tb_model_preset(const char *name, uint64_t seed, tb_model *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    if (tb_preset_config(name, &m->cfg, err, err_size) != 0)
        return -1;
    return make_preset(name, seed, m, err, err_size);
}

/* Seeded random weights for m->cfg. */
static int make_preset(const char *name, uint64_t seed, tb_model *m, char *err, size_t err_size)
{
    if (layout(m, err, err_size) != 0)
        return -1;
    snprintf(m->name, sizeof m->name, "preset:%s", name);
    snprintf(m->source_dtype, sizeof m->source_dtype, "random");
    const tb_model_config *c = &m->cfg;
    uint64_t s = seed ^ 0x746F6B62656E6368ULL; /* "tokbench" */
    size_t h = (size_t)c->hidden_size, inter = (size_t)c->intermediate_size;
    size_t q = (size_t)c->n_heads * (size_t)c->head_dim, rows = (size_t)qkv_rows(c);
    if (m->fc) { /* a DFlash drafter */
        fill_random(m->fc, h * (size_t)c->n_target_ids * h, 0.02, &s);
        fill_const(m->hidden_norm, h, 1.0f);
    } else {
        fill_random(m->embed, (size_t)c->vocab_size * h, 0.02, &s);
        if (!c->tie_word_embeddings)
            fill_random(m->lm_head, (size_t)c->vocab_size * h, 0.02, &s);
    }
    fill_const(m->final_norm, h, 1.0f);
    for (int l = 0; l < c->n_layers; l++) {
        tb_layer *L = &m->layers[l];
        fill_const(L->attn_norm, h, 1.0f);
        fill_const(L->mlp_norm, h, 1.0f);
        fill_random(L->wqkv, rows * h, 0.02, &s);
        if (L->bqkv)
            fill_random(L->bqkv, rows, 0.02, &s);
        if (L->q_norm) {
            fill_const(L->q_norm, (size_t)c->head_dim, 1.0f);
            fill_const(L->k_norm, (size_t)c->head_dim, 1.0f);
        }
        fill_random(L->wo, h * q, 0.02, &s);
        if (L->router) {
            size_t E = (size_t)c->n_experts, mi = (size_t)c->moe_intermediate_size;
            fill_random(L->router, E * h, 0.02, &s);
            fill_random(L->experts_gate_up, E * 2 * mi * h, 0.02, &s);
            fill_random(L->experts_down, E * h * mi, 0.02, &s);
            if (L->score_bias) /* small, so that the bias moves some choices */
                fill_random(L->score_bias, E, 0.02, &s);
            if (L->shared_gate_up) {
                size_t S = (size_t)c->n_shared_experts * mi;
                fill_random(L->shared_gate_up, 2 * S * h, 0.02, &s);
                fill_random(L->shared_down, h * S, 0.02, &s);
            }
        } else {
            fill_random(L->w_gate_up, 2 * inter * h, 0.02, &s);
            fill_random(L->w_down, h * inter, 0.02, &s);
        }
    }
    tb_rope_inv_freq(c, m->rope_inv_freq);
    return 0;
}

void tb_model_free(tb_model *m)
{
    free(m->arena);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

int tb_config_check_fp8(const tb_model_config *c, char *err, size_t err_size)
{
    int nq = c->n_heads * c->head_dim, mi = c->n_experts > 0 ? c->moe_intermediate_size : 0, dense = 0;
    for (int l = 0; l < c->n_layers; l++) /* intermediate_size only where a layer is dense */
        dense |= !tb_config_layer_is_moe(c, l);
    if (c->hidden_size % 16 || nq % 16 || (dense && c->intermediate_size % 16) || mi % 16) {
        snprintf(err, err_size,
                 "dtype = fp8: the FP8 kernels need hidden (%d), heads x head_dim (%d), intermediate (%d) and expert "
                 "intermediate (%d) sizes that are multiples of 16",
                 c->hidden_size, nq, c->intermediate_size, mi);
        return -1;
    }
    return 0;
}

/* dtype = fp8 (fp8.h): every projection's weights rounded per output row
 * to their E4M3 values: attention, the dense feed-forward, and in a MoE
 * layer each routed expert's rows and the shared experts'. The router
 * (its choice is sensitive to rounding, and it is a small part of the
 * bytes) and the shared experts' gate vector stay as loaded. */
int tb_model_round_fp8(tb_model *m, char *err, size_t err_size)
{
    const tb_model_config *c = &m->cfg;
    (void)err, (void)err_size; /* every layout the engine loads has an FP8 form */
    size_t h = (size_t)c->hidden_size, nq = (size_t)c->n_heads * c->head_dim, I = (size_t)c->intermediate_size;
    size_t qkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    size_t E = c->n_experts > 0 ? (size_t)c->n_experts : 0, mi = (size_t)c->moe_intermediate_size;
    for (int l = 0; l < c->n_layers; l++) {
        tb_layer *L = &m->layers[l];
        tb_fp8_round_rows(L->wqkv, qkv, h);
        tb_fp8_round_rows(L->wo, h, nq);
        if (L->w_gate_up) {
            tb_fp8_round_rows(L->w_gate_up, 2 * I, h);
            tb_fp8_round_rows(L->w_down, h, I);
        }
        if (L->experts_gate_up) {
            tb_fp8_round_rows(L->experts_gate_up, E * 2 * mi, h);
            tb_fp8_round_rows(L->experts_down, E * h, mi);
        }
        if (L->shared_gate_up) {
            size_t S = (size_t)c->n_shared_experts * mi;
            tb_fp8_round_rows(L->shared_gate_up, 2 * S, h);
            tb_fp8_round_rows(L->shared_down, h, S);
        }
    }
    m->fp8 = 1;
    return 0;
}
