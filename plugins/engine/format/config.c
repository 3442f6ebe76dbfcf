/* config.c — config.json → tb_model_config; see config.h.
 *
 * Missing optional fields take the defaults of the matching transformers
 * config class (LlamaConfig, Qwen2Config, DreamConfig) or of LLaDA's
 * ModelConfig, so a config behaves here as it does in Python. A JSON null
 * counts as absent, as it does there. */
#define _GNU_SOURCE
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "strmem.h"

/* Limits that keep every product the engine forms (hidden x vocab, ...)
 * far inside int64 and every count inside int. */
#define MAX_VOCAB (1 << 24)
#define MAX_WIDTH (1 << 20)
#define MAX_COUNT 4096
#define MAX_POS (1 << 30)

typedef struct ctx {
    const char *path;
    char *err;
    size_t err_size;
} ctx;

static const struct arch_info {
    const char *arch;       /* "architectures"[0] */
    const char *model_type; /* fallback, compared ignoring case */
    tb_arch id;
} archs[] = {
    {"LlamaForCausalLM", "llama", TB_ARCH_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", TB_ARCH_QWEN2},
    {"LLaDAModelLM", "llada", TB_ARCH_LLADA},
    {"DreamModel", "dream", TB_ARCH_DREAM},
    {"Qwen3ForCausalLM", "qwen3", TB_ARCH_QWEN3},
    {"SDARForCausalLM", "sdar", TB_ARCH_SDAR},
    {"Fast_dLLM_QwenForCausalLM", "Fast_dLLM_Qwen", TB_ARCH_FAST_DLLM_V2},
    {"Qwen3MoeForCausalLM", "qwen3_moe", TB_ARCH_QWEN3_MOE},
    {"LLaDAMoEModelLM", "lladamoe", TB_ARCH_LLADA_MOE},
    {"LLaDA2MoeModelLM", "llada2_moe", TB_ARCH_LLADA2_MOE},
    /* z-lab's drafters say model_type "qwen3" (that fallback finds Qwen3);
     * "dflash" is vLLM's name for the class */
    {"DFlashDraftModel", "dflash", TB_ARCH_DFLASH},
};

int tb_config_layer_is_moe(const tb_model_config *cfg, int l)
{
    if (cfg->n_experts <= 0 || cfg->decoder_sparse_step <= 0 || (l + 1) % cfg->decoder_sparse_step != 0 ||
        l < cfg->first_k_dense)
        return 0;
    for (int i = 0; i < cfg->n_mlp_only; i++)
        if (cfg->mlp_only_layers[i] == l)
            return 0;
    return 1;
}

int32_t tb_config_default_mask(const tb_model_config *cfg)
{
    /* Fast-dLLM v2's config names no mask token: its generate() takes
     * mask_id = 151665 ("|<MASK>|" in its tokenizer) by default; LLaDA-MoE's
     * and LLaDA 2.x's generation code passes mask_id 156895 */
    if (cfg->arch == TB_ARCH_FAST_DLLM_V2 && cfg->vocab_size > 151665)
        return 151665;
    if ((cfg->arch == TB_ARCH_LLADA_MOE || cfg->arch == TB_ARCH_LLADA2_MOE) && cfg->vocab_size > 156895)
        return 156895;
    return -1;
}

int32_t tb_config_default_bos(const tb_model_config *cfg)
{
    for (int e = 0; e < cfg->n_eos; e++)
        if (cfg->eos_ids[e] == cfg->bos_id)
            return -1;
    return cfg->bos_id;
}

int tb_config_rope_dim(const tb_model_config *cfg)
{
    return cfg->rope_dim > 0 ? cfg->rope_dim : cfg->head_dim;
}

int tb_arch_is_diffusion(tb_arch a)
{
    return a == TB_ARCH_LLADA || a == TB_ARCH_LLADA_MOE || a == TB_ARCH_DREAM || tb_arch_is_block_diffusion(a);
}

int tb_arch_is_block_diffusion(tb_arch a)
{
    return a == TB_ARCH_SDAR || a == TB_ARCH_FAST_DLLM_V2 || a == TB_ARCH_LLADA2_MOE;
}

/* A short rendering of a JSON value for "got ..." (never NULL). */
void tb_json_describe(const cJSON *v, char *out, size_t size)
{
    if (!v)
        snprintf(out, size, "nothing");
    else if (cJSON_IsNull(v))
        snprintf(out, size, "null");
    else if (cJSON_IsBool(v))
        snprintf(out, size, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v))
        snprintf(out, size, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v))
        snprintf(out, size, "\"%.40s%s\"", v->valuestring,
                 strlen(v->valuestring) > 40 ? "..." : "");
    else if (cJSON_IsArray(v))
        snprintf(out, size, "an array");
    else
        snprintf(out, size, "an object");
}

static int fail(ctx *c, const char *field, const char *expected, const cJSON *got)
{
    char g[64];
    tb_json_describe(got, g, sizeof g);
    snprintf(c->err, c->err_size, "%s: field %s: expected %s, got %s", c->path, field,
             expected, g);
    return -1;
}

/* The value under the first of names[] present and not null; *which gets
 * that name (or names[0] when none is). */
static const cJSON *lookup(const cJSON *obj, const char *const *names, const char **which)
{
    *which = names[0];
    for (; *names; names++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, *names);
        if (v && !cJSON_IsNull(v)) {
            *which = *names;
            return v;
        }
    }
    return NULL;
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* An integer in [lo, hi]. Returns 1 when read, 0 when absent (and not
 * required), -1 with err set. */
static int get_int(ctx *c, const cJSON *obj, const char *const *names, long long lo,
                   long long hi, int required, int *out)
{
    const char *name;
    const cJSON *v = lookup(obj, names, &name);
    if (!v && !required)
        return 0;
    if (!v)
        v = cJSON_GetObjectItemCaseSensitive(obj, name); /* null: say so */
    char want[80];
    snprintf(want, sizeof want, "an integer in [%lld, %lld]", lo, hi);
    if (!v || !cJSON_IsNumber(v))
        return fail(c, name, want, v);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
        return fail(c, name, want, v);
    *out = (int)d;
    return 1;
}

/* A finite number in (lo, hi). */
static int get_num(ctx *c, const cJSON *obj, const char *const *names, double lo, double hi,
                   double *out)
{
    const char *name;
    const cJSON *v = lookup(obj, names, &name);
    if (!v)
        return 0;
    char want[80];
    snprintf(want, sizeof want, "a number in (%g, %g)", lo, hi);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= lo ||
        v->valuedouble >= hi)
        return fail(c, name, want, v);
    *out = v->valuedouble;
    return 1;
}

static int get_bool(ctx *c, const cJSON *obj, const char *const *names, int *out)
{
    const char *name;
    const cJSON *v = lookup(obj, names, &name);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return fail(c, name, "true or false", v);
    *out = cJSON_IsTrue(v);
    return 1;
}

/* A setting the engine does not implement: absent, or exactly `want`. */
static int require_bool(ctx *c, const cJSON *obj, const char *name, int want, const char *why)
{
    int b = 0; /* set when r > 0; -O3 cannot see it */
    int r = get_bool(c, obj, NAMES(name), &b);
    if (r <= 0)
        return r;
    if (b != want) {
        char e[160];
        snprintf(e, sizeof e, "%s (%s)", want ? "true" : "false", why);
        return fail(c, name, e, cJSON_GetObjectItemCaseSensitive(obj, name));
    }
    return 0;
}

static int require_str(ctx *c, const cJSON *obj, const char *name, const char *want,
                       const char *why)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, want) != 0) {
        char e[160];
        snprintf(e, sizeof e, "\"%s\" (%s)", want, why);
        return fail(c, name, e, v);
    }
    return 0;
}

/* A token id or, for eos, a list of them; each in [0, vocab). */
static int get_ids(ctx *c, const cJSON *obj, const char *name, int vocab, int32_t *ids,
                   int max, int *n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    *n = 0;
    if (!v || cJSON_IsNull(v))
        return 0;
    char want[96];
    snprintf(want, sizeof want, "a token id in [0, %d)%s", vocab,
             max > 1 ? " or a list of them" : "");
    const cJSON *one = v;
    int count = 1;
    if (cJSON_IsArray(v) && max > 1) {
        count = cJSON_GetArraySize(v);
        if (count < 1 || count > max) {
            char e[96];
            snprintf(e, sizeof e, "a list of 1 to %d token ids", max);
            return fail(c, name, e, v);
        }
        one = v->child;
    }
    for (int i = 0; i < count; i++, one = one->next) {
        double d = cJSON_IsNumber(one) ? one->valuedouble : -1;
        if (!cJSON_IsNumber(one) || d != floor(d) || d < 0 || d >= vocab)
            return fail(c, name, want, one);
        ids[i] = (int32_t)d;
    }
    *n = count;
    return 1;
}

/* "rope_parameters" (transformers >= 5) or "rope_scaling": llama3 or none. */
static int parse_rope(ctx *c, const cJSON *root, tb_model_config *cfg)
{
    const char *key;
    const cJSON *rp = lookup(root, NAMES("rope_parameters", "rope_scaling"), &key);
    cfg->rope_theta = 10000.0; /* every class's default */
    if (get_num(c, root, NAMES("rope_theta"), 0, 1e12, &cfg->rope_theta) < 0)
        return -1;
    if (!rp)
        return 0;
    char field[96];
    if (!cJSON_IsObject(rp))
        return fail(c, key, "an object or null", rp);
    snprintf(field, sizeof field, "%s.rope_theta", key);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    if (t && !cJSON_IsNull(t)) {
        if (!cJSON_IsNumber(t) || !(t->valuedouble > 0) || !(t->valuedouble < 1e12))
            return fail(c, field, "a number in (0, 1e+12)", t);
        cfg->rope_theta = t->valuedouble;
    }
    const char *tkey;
    const cJSON *type = lookup(rp, NAMES("rope_type", "type"), &tkey);
    snprintf(field, sizeof field, "%s.%s", key, tkey);
    if (!type)
        return 0; /* rope_type null: the default rope */
    if (!cJSON_IsString(type))
        return fail(c, field, "a string", type);
    if (strcmp(type->valuestring, "default") == 0)
        return 0;
    if (strcmp(type->valuestring, "llama3") != 0)
        return fail(c, field, "\"llama3\" or \"default\" (unsupported rope scaling)", type);

    cfg->rope_llama3 = 1;
    static const char *const nums[] = {"factor", "low_freq_factor", "high_freq_factor"};
    double *dst[] = {&cfg->rope_factor, &cfg->rope_low_freq_factor,
                     &cfg->rope_high_freq_factor};
    for (int i = 0; i < 3; i++) {
        snprintf(field, sizeof field, "%s.%s", key, nums[i]);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp, nums[i]);
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !(v->valuedouble < 1e6))
            return fail(c, field, "a number in (0, 1e+06)", v);
        *dst[i] = v->valuedouble;
    }
    /* the wavelength bands divide by (high - low) */
    if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor)) {
        snprintf(field, sizeof field, "%s.high_freq_factor", key);
        return fail(c, field, "a number above low_freq_factor",
                    cJSON_GetObjectItemCaseSensitive(rp, "high_freq_factor"));
    }
    snprintf(field, sizeof field, "%s.original_max_position_embeddings", key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp, "original_max_position_embeddings");
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > MAX_POS)
        return fail(c, field, "an integer in [1, 1073741824]", v);
    cfg->rope_original_max_pos = (int)v->valuedouble;
    return 0;
}

static int parse_arch(ctx *c, const cJSON *root, tb_model_config *cfg)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const char *names = "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, LLaDAModelLM, "
                        "LLaDAMoEModelLM, LLaDA2MoeModelLM, DreamModel, SDARForCausalLM, Fast_dLLM_QwenForCausalLM "
                        "or DFlashDraftModel";
    if (list && !cJSON_IsNull(list)) {
        const cJSON *a = cJSON_IsArray(list) ? list->child : NULL;
        if (!cJSON_IsString(a))
            return fail(c, "architectures", "a list of names", list);
        for (size_t i = 0; i < TB_ARRAY_LEN(archs); i++)
            if (strcmp(a->valuestring, archs[i].arch) == 0) {
                cfg->arch = archs[i].id;
                tb_strlcpy(cfg->arch_name, a->valuestring, sizeof cfg->arch_name);
                return 0;
            }
        return fail(c, "architectures", names, a);
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (cJSON_IsString(mt))
        for (size_t i = 0; i < TB_ARRAY_LEN(archs); i++)
            if (strcasecmp(mt->valuestring, archs[i].model_type) == 0) {
                cfg->arch = archs[i].id;
                tb_strlcpy(cfg->arch_name, mt->valuestring, sizeof cfg->arch_name);
                return 0;
            }
    return fail(c, "architectures", names, mt);
}

/* LLaDA's config is OLMo's ModelConfig: check the options that would
 * change its block away from the LLaMA block the engine runs. */
static int check_llada(ctx *c, const cJSON *root)
{
    if (require_str(c, root, "block_type", "llama", "only LLaMA blocks are supported") ||
        require_str(c, root, "activation_type", "silu", "only SwiGLU is supported") ||
        require_str(c, root, "layer_norm_type", "rms", "only RMSNorm is supported") ||
        require_bool(c, root, "rope", 1, "only RoPE positions are supported") ||
        require_bool(c, root, "alibi", 0, "ALiBi is not supported") ||
        require_bool(c, root, "include_bias", 0, "biases outside q, k, v are not supported") ||
        require_bool(c, root, "attention_layer_norm", 0, "q/k norms are not supported") ||
        require_bool(c, root, "input_emb_norm", 0, "embedding norm is not supported") ||
        require_bool(c, root, "scale_logits", 0, "logit scaling is not supported"))
        return -1;
    return 0;
}

static int check_hf(ctx *c, const cJSON *root, const tb_model_config *cfg)
{
    if (require_str(c, root, "hidden_act", "silu", "only SwiGLU is supported") ||
        require_bool(c, root, "mlp_bias", 0, "MLP biases are not supported"))
        return -1;
    if (cfg->arch != TB_ARCH_LLAMA &&
        require_bool(c, root, "use_sliding_window", 0, "sliding window attention is not supported"))
        return -1;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Python's json keeps the last of two equal keys, cJSON finds the first:
 * refuse rather than read a value transformers would not. */
static int check_duplicates(ctx *c, const cJSON *obj, const char *prefix)
{
    size_t n = 0;
    for (const cJSON *e = obj->child; e; e = e->next)
        n++;
    if (n < 2)
        return 0;
    const char **names = malloc(n * sizeof *names);
    if (!names) {
        snprintf(c->err, c->err_size, "%s: out of memory", c->path);
        return -1;
    }
    n = 0;
    for (const cJSON *e = obj->child; e; e = e->next)
        names[n++] = e->string;
    qsort(names, n, sizeof *names, cmp_names);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            snprintf(c->err, c->err_size, "%s: field %s%s: expected one value, got it twice",
                     c->path, prefix, names[i]);
            rc = -1;
        }
    free(names);
    return rc;
}

/* Qwen3-MoE's keys (Qwen3MoeConfig's names and defaults: norm_topk_prob
 * false, decoder_sparse_step 1, mlp_only_layers []) */
static int parse_moe(ctx *c, const cJSON *root, tb_model_config *cfg)
{
    cfg->decoder_sparse_step = 1;
    /* transformers 5 writes num_local_experts; the published configs num_experts */
    if (get_int(c, root, NAMES("num_experts", "num_local_experts"), 1, 1024, 1, &cfg->n_experts) < 0 ||
        get_int(c, root, NAMES("num_experts_per_tok"), 1, cfg->n_experts, 1, &cfg->n_experts_per_tok) < 0 ||
        get_int(c, root, NAMES("moe_intermediate_size"), 1, MAX_WIDTH, 1, &cfg->moe_intermediate_size) < 0 ||
        get_bool(c, root, NAMES("norm_topk_prob"), &cfg->norm_topk_prob) < 0 ||
        get_int(c, root, NAMES("decoder_sparse_step"), 1, MAX_COUNT, 0, &cfg->decoder_sparse_step) < 0)
        return -1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (list && !cJSON_IsNull(list)) {
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > TB_MAX_MLP_ONLY)
            return fail(c, "mlp_only_layers", "a list of at most 64 layer indices", list);
        for (const cJSON *e = list->child; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble >= cfg->n_layers)
                return fail(c, "mlp_only_layers", "layer indices in [0, num_hidden_layers)", e);
            cfg->mlp_only_layers[cfg->n_mlp_only++] = (int)e->valuedouble;
        }
    }
    return 0;
}

/* LLaDA-MoE's keys (LLaDAMoEConfig, read by modeling_lladamoe.py):
 * num_experts, num_experts_per_tok, expert_intermediate_size, and
 * moe_layer_freq, one entry a layer (0: a dense SwiGLU of
 * dense_intermediate_size, read with the dense models' width). Its sparse
 * block fixes norm_topk_prob = False whatever the config says, and always
 * scores with a softmax; the options that block or layer would compute
 * otherwise than the engine are refused. */
static int parse_lladamoe(ctx *c, const cJSON *root, tb_model_config *cfg)
{
    cfg->decoder_sparse_step = 1;
    cfg->norm_topk_prob = 0;
    if (get_int(c, root, NAMES("num_experts"), 1, 1024, 1, &cfg->n_experts) < 0 ||
        get_int(c, root, NAMES("num_experts_per_tok"), 1, cfg->n_experts, 1, &cfg->n_experts_per_tok) < 0 ||
        get_int(c, root, NAMES("expert_intermediate_size"), 1, MAX_WIDTH, 1, &cfg->moe_intermediate_size) < 0)
        return -1;
    if (require_bool(c, root, "moe_router_enable_expert_bias", 0,
                     "its block adds the bias to the routing weights themselves: not supported") ||
        require_str(c, root, "moe_router_score_function", "softmax", "its block always takes a softmax"))
        return -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "shared_expert_intermediate_size");
    if (v && !cJSON_IsNull(v))
        return fail(c, "shared_expert_intermediate_size", "null (shared experts are not supported for LLaDA-MoE)", v);
    v = cJSON_GetObjectItemCaseSensitive(root, "clip_qkv");
    if (v && !cJSON_IsNull(v))
        return fail(c, "clip_qkv", "null (clipping q, k, v is not supported)", v);
    /* the default rope's rotated width is head_dim x partial_rotary_factor */
    v = cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1.0))
        return fail(c, "partial_rotary_factor", "1 (partial rotary embeddings are not supported)", v);
    v = cJSON_GetObjectItemCaseSensitive(root, "rope_theta");
    if (!v || cJSON_IsNull(v))
        return fail(c, "rope_theta", "a number (LLaDAMoEConfig's default -1 is no base)", v);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "moe_layer_freq");
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != cfg->n_layers)
        return fail(c, "moe_layer_freq", "a list of one 0 or 1 per layer (num_hidden_layers of them)", list);
    int l = 0;
    for (const cJSON *e = list->child; e; e = e->next, l++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
            return fail(c, "moe_layer_freq", "integers (0: a dense layer)", e);
        if (e->valuedouble != 0)
            continue;
        if (cfg->n_mlp_only == TB_MAX_MLP_ONLY)
            return fail(c, "moe_layer_freq", "at most 64 dense layers (zeros)", list);
        cfg->mlp_only_layers[cfg->n_mlp_only++] = l;
    }
    return 0;
}

/* LLaDA 2.x's keys (LLaDA2MoeConfig, read by modeling_llada2_moe.py) and
 * its class defaults: num_experts 16, num_experts_per_tok 2,
 * num_shared_experts 0, n_group 8, topk_group 4, routed_scaling_factor
 * 2.5, first_k_dense_replace 0, partial_rotary_factor 0.5; use_qkv_bias
 * false, use_bias (on the "dense" o projection) true, use_qk_norm true.
 * Its gate always scores with a sigmoid and renormalises the k weights
 * (k > 1) whatever score_function / norm_topk_prob say: a config naming
 * another score function is refused rather than run as the code would. */
static int parse_llada2(ctx *c, const cJSON *root, tb_model_config *cfg)
{
    double partial = 0.5, scale = 2.5;
    cfg->decoder_sparse_step = 1;
    cfg->n_experts = 16, cfg->n_experts_per_tok = 2, cfg->n_group = 8, cfg->topk_group = 4;
    if (get_int(c, root, NAMES("num_experts"), 1, 1024, 0, &cfg->n_experts) < 0 ||
        get_int(c, root, NAMES("num_experts_per_tok"), 1, cfg->n_experts, 0, &cfg->n_experts_per_tok) < 0 ||
        get_int(c, root, NAMES("moe_intermediate_size"), 1, MAX_WIDTH, 1, &cfg->moe_intermediate_size) < 0 ||
        get_int(c, root, NAMES("num_shared_experts"), 0, 64, 0, &cfg->n_shared_experts) < 0 ||
        get_int(c, root, NAMES("n_group"), 1, cfg->n_experts, 0, &cfg->n_group) < 0 ||
        get_int(c, root, NAMES("topk_group"), 1, cfg->n_group, 0, &cfg->topk_group) < 0 ||
        get_int(c, root, NAMES("first_k_dense_replace"), 0, cfg->n_layers, 0, &cfg->first_k_dense) < 0 ||
        get_num(c, root, NAMES("routed_scaling_factor"), 0, 1e6, &scale) < 0 ||
        get_num(c, root, NAMES("partial_rotary_factor"), 0, 1, &partial) < 0)
        return -1;
    if (require_str(c, root, "score_function", "sigmoid", "its gate always takes a sigmoid"))
        return -1;
    if (cfg->n_experts % cfg->n_group != 0)
        return fail(c, "n_group", "a divisor of num_experts", cJSON_GetObjectItemCaseSensitive(root, "n_group"));
    if ((long)cfg->topk_group * (cfg->n_experts / cfg->n_group) < cfg->n_experts_per_tok)
        return fail(c, "topk_group", "groups holding at least num_experts_per_tok experts",
                    cJSON_GetObjectItemCaseSensitive(root, "topk_group"));
    if (cfg->n_experts / cfg->n_group < 2)
        return fail(c, "n_group", "groups of at least 2 experts (a group scores by its two best)",
                    cJSON_GetObjectItemCaseSensitive(root, "n_group"));
    if (!(scale > 0))
        return fail(c, "routed_scaling_factor", "a number > 0",
                    cJSON_GetObjectItemCaseSensitive(root, "routed_scaling_factor"));
    cfg->routed_scale = scale;
    cfg->norm_topk_prob = cfg->n_experts_per_tok > 1;
    /* transformers' default rope: dim = int(head_dim x partial_rotary_factor) */
    cfg->rope_dim = (int)(cfg->head_dim * partial);
    if (cfg->rope_dim < 2 || cfg->rope_dim % 2 != 0)
        return fail(c, "partial_rotary_factor", "a factor giving an even rotated width >= 2 of head_dim",
                    cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor"));
    /* no config key: generate()'s defaults (block_length 32, mask_id 156895) */
    cfg->block_size = 32;
    return 0;
}

/* Upstream's default target layers (dflash/model.py build_target_layer_ids):
 * one per drafter layer, spread over [1, n_target - 3]; the middle one for
 * a single layer. */
static void dflash_default_ids(tb_model_config *cfg)
{
    int n = cfg->n_layers, t = cfg->n_target_layers;
    cfg->n_target_ids = n;
    if (n == 1) {
        cfg->target_layer_ids[0] = t / 2;
        return;
    }
    for (int i = 0; i < n; i++) /* Python's round(): halves to even, as nearbyint */
        cfg->target_layer_ids[i] = (int)nearbyint(1.0 + (double)i * (t - 4) / (n - 1));
}

/* DFlash's keys (DFlashDraftModel reads config.block_size and
 * config.dflash_config; Qwen3's attention reads layer_types): block_size
 * and dflash_config.mask_token_id required (the model has no default for
 * either), dflash_config.target_layer_ids or else num_target_layers for
 * the default spread; every layer "full_attention" (sliding-window drafter
 * layers are not computed here). */
static int parse_dflash(ctx *c, const cJSON *root, tb_model_config *cfg)
{
    if (get_int(c, root, NAMES("block_size"), 2, MAX_COUNT, 1, &cfg->block_size) < 0 ||
        get_int(c, root, NAMES("num_target_layers"), 1, MAX_COUNT, 0, &cfg->n_target_layers) < 0)
        return -1;
    const cJSON *dc = cJSON_GetObjectItemCaseSensitive(root, "dflash_config");
    if (!cJSON_IsObject(dc))
        return fail(c, "dflash_config", "an object with mask_token_id (and target_layer_ids)", dc);
    if (check_duplicates(c, dc, "dflash_config."))
        return -1;
    const cJSON *mk = cJSON_GetObjectItemCaseSensitive(dc, "mask_token_id");
    if (!cJSON_IsNumber(mk) || mk->valuedouble != floor(mk->valuedouble) || mk->valuedouble < 0 ||
        mk->valuedouble >= cfg->vocab_size) {
        char e[64];
        snprintf(e, sizeof e, "a token id in [0, %d)", cfg->vocab_size);
        return fail(c, "dflash_config.mask_token_id", e, mk);
    }
    cfg->mask_id = (int32_t)mk->valuedouble;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(dc, "target_layer_ids");
    if (!ids || cJSON_IsNull(ids)) {
        const cJSON *nt = cJSON_GetObjectItemCaseSensitive(root, "num_target_layers");
        if (cfg->n_target_layers == 0)
            return fail(c, "num_target_layers", "an integer (dflash_config names no target_layer_ids)", nt);
        if (cfg->n_layers > TB_MAX_TARGET_IDS || (cfg->n_layers > 1 && cfg->n_target_layers < 5))
            return fail(c, "num_target_layers", "a target of >= 5 layers (the default layer spread)", nt);
        dflash_default_ids(cfg);
    } else {
        int n = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
        if (n < 1 || n > TB_MAX_TARGET_IDS)
            return fail(c, "dflash_config.target_layer_ids", "a list of 1 to 64 layer indices", ids);
        int hi = cfg->n_target_layers > 0 ? cfg->n_target_layers : MAX_COUNT;
        char e[80];
        snprintf(e, sizeof e, "layer indices in [0, %d)%s", hi,
                 cfg->n_target_layers > 0 ? " (num_target_layers)" : "");
        for (const cJSON *x = ids->child; x; x = x->next) {
            if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
                x->valuedouble >= hi)
                return fail(c, "dflash_config.target_layer_ids", e, x);
            cfg->target_layer_ids[cfg->n_target_ids++] = (int)x->valuedouble;
        }
    }
    if ((long long)cfg->n_target_ids * cfg->hidden_size > MAX_WIDTH)
        return fail(c, "dflash_config.target_layer_ids", "at most 1048576 feature columns (ids x hidden_size)",
                    ids);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt))
            return fail(c, "layer_types", "a list of \"full_attention\"", lt);
        for (const cJSON *x = lt->child; x; x = x->next)
            if (!cJSON_IsString(x) || strcmp(x->valuestring, "full_attention") != 0)
                return fail(c, "layer_types",
                            "\"full_attention\" throughout (sliding-window drafter layers are not supported)", x);
    }
    return 0;
}

static int parse_root(ctx *c, const cJSON *root, tb_model_config *cfg)
{
    if (check_duplicates(c, root, ""))
        return -1;
    for (const char *const *k = NAMES("rope_scaling", "rope_parameters"); *k; k++) {
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, *k);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s.", *k);
        if (cJSON_IsObject(rp) && check_duplicates(c, rp, prefix))
            return -1;
    }
    if (parse_arch(c, root, cfg))
        return -1;
    int llada = cfg->arch == TB_ARCH_LLADA, lladamoe = cfg->arch == TB_ARCH_LLADA_MOE;
    int llada2 = cfg->arch == TB_ARCH_LLADA2_MOE;
    /* LLaDA and Dream split d_model across the heads; the others (block
     * diffusion included) read an explicit head_dim as transformers does */
    int split_heads = llada || lladamoe || cfg->arch == TB_ARCH_DREAM;
    int dflash = cfg->arch == TB_ARCH_DFLASH;
    int qwen3 = cfg->arch == TB_ARCH_QWEN3 || cfg->arch == TB_ARCH_SDAR || cfg->arch == TB_ARCH_QWEN3_MOE || dflash;
    if (llada ? check_llada(c, root) : check_hf(c, root, cfg))
        return -1;

    /* LLaDA spells the shapes its own way; released LLaDA-style configs
     * converted to HF names exist too, so both are read. */
#define KEY(llada_name, hf_name) (llada ? NAMES(llada_name, hf_name) : NAMES(hf_name))
    if (get_int(c, root, KEY("d_model", "hidden_size"), 1, MAX_WIDTH, 1, &cfg->hidden_size) < 0 ||
        get_int(c, root, KEY("n_layers", "num_hidden_layers"), 1, MAX_COUNT, 1,
                &cfg->n_layers) < 0 ||
        get_int(c, root, KEY("n_heads", "num_attention_heads"), 1, MAX_COUNT, 1,
                &cfg->n_heads) < 0)
        return -1;

    /* vocab: LLaDA's embedding_size is the padded vocab, the row count of
     * wte and ff_out, so the logits width; vocab_size may be smaller. */
    int tok_vocab = 0;
    if (get_int(c, root, NAMES("vocab_size"), 1, MAX_VOCAB, !llada, &tok_vocab) < 0)
        return -1;
    cfg->vocab_size = tok_vocab;
    if (llada) {
        int r = get_int(c, root, NAMES("embedding_size"), 1, MAX_VOCAB, tok_vocab == 0,
                        &cfg->vocab_size);
        if (r < 0)
            return -1;
        if (r > 0 && tok_vocab > cfg->vocab_size)
            return fail(c, "embedding_size", "at least vocab_size",
                        cJSON_GetObjectItemCaseSensitive(root, "embedding_size"));
    }

    /* SwiGLU width; LLaDA falls back to mlp_ratio x d_model like OLMo;
     * LLaDA-MoE's dense layers take dense_intermediate_size (required:
     * LLaDAMoEConfig's default is -1) */
    int r = get_int(c, root, lladamoe ? NAMES("dense_intermediate_size") : KEY("mlp_hidden_size", "intermediate_size"),
                    1, MAX_WIDTH, !llada, &cfg->intermediate_size);
    if (r < 0)
        return -1;
    if (r == 0 && llada) {
        int ratio = 4;
        if (get_int(c, root, NAMES("mlp_ratio"), 1, 64, 0, &ratio) < 0)
            return -1;
        if ((long long)ratio * cfg->hidden_size > MAX_WIDTH)
            return fail(c, "mlp_ratio", "mlp_ratio x d_model <= 1048576",
                        cJSON_GetObjectItemCaseSensitive(root, "mlp_ratio"));
        cfg->intermediate_size = ratio * cfg->hidden_size;
    }

    /* GQA: absent means multi-head (OLMo: multi_query_attention means 1) */
    const char *kvname;
    lookup(root, KEY("n_kv_heads", "num_key_value_heads"), &kvname);
    r = get_int(c, root, KEY("n_kv_heads", "num_key_value_heads"), 1, MAX_COUNT, 0,
                &cfg->n_kv_heads);
    if (r < 0)
        return -1;
    if (r == 0) {
        int mqa = 0;
        if (llada && get_bool(c, root, NAMES("multi_query_attention"), &mqa) < 0)
            return -1;
        cfg->n_kv_heads = mqa ? 1 : cfg->n_heads;
    }
    if (cfg->n_heads % cfg->n_kv_heads != 0) {
        char e[96];
        snprintf(e, sizeof e, "a divisor of %d (the number of heads)", cfg->n_heads);
        return fail(c, kvname, e, cJSON_GetObjectItemCaseSensitive(root, kvname));
    }

    /* head_dim: Llama and Qwen2 read an explicit one (transformers does);
     * LLaDA and Dream always split d_model across the heads. */
    r = 0;
    if (!split_heads && (r = get_int(c, root, NAMES("head_dim"), 1, MAX_COUNT, 0,
                                   &cfg->head_dim)) < 0)
        return -1;
    const char *hname;
    lookup(root, KEY("d_model", "hidden_size"), &hname);
    if (r == 0) {
        if (cfg->hidden_size % cfg->n_heads != 0) {
            char e[96];
            snprintf(e, sizeof e, "a multiple of the number of heads (%d)", cfg->n_heads);
            return fail(c, hname, e, cJSON_GetObjectItemCaseSensitive(root, hname));
        }
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    }
    if (cfg->head_dim % 2 != 0) { /* half-split RoPE pairs i with i + head_dim/2 */
        char e[96];
        snprintf(e, sizeof e, "an even head size (hidden / heads = %d is odd)", cfg->head_dim);
        return fail(c, r ? "head_dim" : hname, e,
                    cJSON_GetObjectItemCaseSensitive(root, r ? "head_dim" : hname));
    }

    cfg->rope_dim = cfg->head_dim;
    cfg->rms_eps = llada || lladamoe || llada2 ? 1e-5 : 1e-6;
    if (get_num(c, root, llada ? NAMES("rms_norm_eps", "layer_norm_eps") : NAMES("rms_norm_eps"),
                0, 1, &cfg->rms_eps) < 0)
        return -1;
    if (parse_rope(c, root, cfg))
        return -1;

    cfg->max_position_embeddings =
        llada ? 1024 : cfg->arch == TB_ARCH_LLAMA ? 2048 : lladamoe ? 4096 : llada2 ? 16384 : 32768;
    if (get_int(c, root, KEY("max_sequence_length", "max_position_embeddings"), 1, MAX_POS, 0,
                &cfg->max_position_embeddings) < 0)
        return -1;
    if (get_bool(c, root, KEY("weight_tying", "tie_word_embeddings"),
                 &cfg->tie_word_embeddings) < 0)
        return -1;

    /* Qwen2 and Dream default to q/k/v biases; Fast-dLLM v2's modelling
     * code hard-wires them (attention_bias is not read); Llama's and
     * Qwen3's attention_bias puts one on o_proj as well. */
    int hard_bias = cfg->arch == TB_ARCH_FAST_DLLM_V2;
    int attn_bias = hard_bias || cfg->arch == TB_ARCH_QWEN2 || cfg->arch == TB_ARCH_DREAM;
    if (!hard_bias &&
        get_bool(c, root, llada ? NAMES("include_qkv_bias") : llada2 ? NAMES("use_qkv_bias") : NAMES("attention_bias"),
                 &attn_bias) < 0)
        return -1;
    cfg->qkv_bias = attn_bias;
    cfg->o_bias = (cfg->arch == TB_ARCH_LLAMA || qwen3 || lladamoe) && attn_bias;
    cfg->qk_norm = qwen3;
    if (llada2) { /* use_bias (default true): a bias on the o projection "dense" */
        cfg->o_bias = 1, cfg->qk_norm = 1;
        if (get_bool(c, root, NAMES("use_bias"), &cfg->o_bias) < 0 ||
            get_bool(c, root, NAMES("use_qk_norm"), &cfg->qk_norm) < 0)
            return -1;
    }
    /* LLaDA-MoE: q_norm / k_norm over each head's head_dim, before RoPE */
    if (lladamoe && get_bool(c, root, NAMES("qk_layernorm"), &cfg->qk_norm) < 0)
        return -1;

    /* the trained block: SDAR's block_size (its configuration class has no
     * default: 4 as the published 8B config), Fast-dLLM v2's bd_size (32,
     * its class default) */
    if (cfg->arch == TB_ARCH_SDAR) {
        cfg->block_size = 4;
        if (get_int(c, root, NAMES("block_size"), 1, MAX_COUNT, 0, &cfg->block_size) < 0)
            return -1;
    } else if (cfg->arch == TB_ARCH_FAST_DLLM_V2) {
        cfg->block_size = 32;
        if (get_int(c, root, NAMES("bd_size"), 1, MAX_COUNT, 0, &cfg->block_size) < 0)
            return -1;
    }

    if (cfg->arch == TB_ARCH_QWEN3_MOE && parse_moe(c, root, cfg))
        return -1;
    if (lladamoe && parse_lladamoe(c, root, cfg))
        return -1;
    if (llada2 && parse_llada2(c, root, cfg))
        return -1;
    if (dflash && parse_dflash(c, root, cfg))
        return -1;

    int n_bos = 0;
    if (get_ids(c, root, "eos_token_id", cfg->vocab_size, cfg->eos_ids, TB_MAX_EOS,
                &cfg->n_eos) < 0 ||
        get_ids(c, root, "bos_token_id", cfg->vocab_size, &cfg->bos_id, 1, &n_bos) < 0 ||
        (!dflash && get_ids(c, root, "mask_token_id", cfg->vocab_size, &cfg->mask_id, 1, &r) < 0))
        return -1;
    if (dflash)
        r = 1; /* dflash_config.mask_token_id, read above */
    if (!n_bos)
        cfg->bos_id = -1;
    cfg->prompt_bos = tb_config_default_bos(cfg);
    if (!r) {
        /* no mask_token_id: the family's generate() default where the
         * vocabulary has it (folder.h looks in the tokenizer first), else
         * none (folder.h, or the diffusion backend's mask_id option) */
        cfg->mask_id = tb_config_default_mask(cfg);
        cfg->mask_is_default = cfg->mask_id >= 0;
    }

    const char *dname;
    const cJSON *dt = lookup(root, NAMES("torch_dtype", "dtype"), &dname);
    if (dt && !cJSON_IsString(dt))
        return fail(c, dname, "a string", dt);
    if (dt)
        tb_strlcpy(cfg->torch_dtype, dt->valuestring, sizeof cfg->torch_dtype);
    if (get_bool(c, root, NAMES("tokbench_random_weights"), &cfg->random_weights) < 0)
        return -1;
    return 0;
#undef KEY
}

int tb_config_parse(const char *json, const char *path, tb_model_config *cfg, char *err,
                    size_t err_size)
{
    ctx c = {path, err, err_size};
    memset(cfg, 0, sizeof *cfg);
    if (err_size)
        err[0] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        /* cJSON reports where it stopped; a NULL end means out of memory */
        snprintf(err, err_size, "%s: not valid JSON (at byte %td)", path,
                 end ? end - json : (ptrdiff_t)0);
        return -1;
    }
    int rc;
    if (!cJSON_IsObject(root)) {
        snprintf(err, err_size, "%s: expected a JSON object", path);
        rc = -1;
    } else {
        rc = parse_root(&c, root, cfg);
    }
    cJSON_Delete(root);
    if (rc)
        memset(cfg, 0, sizeof *cfg);
    return rc;
}

int tb_config_load(const char *path, tb_model_config *cfg, char *err, size_t err_size)
{
    size_t len;
    char *text = tb_read_file_max(path, TB_READ_MAX_CONFIG, &len);
    if (!text) {
        char why[160];
        tb_read_file_why(errno, TB_READ_MAX_CONFIG, "a config.json", why, sizeof why);
        memset(cfg, 0, sizeof *cfg);
        snprintf(err, err_size, "%s: %s", path, why);
        return -1;
    }
    size_t nul = strlen(text);
    if (nul != len) { /* cJSON would stop at the NUL */
        free(text);
        memset(cfg, 0, sizeof *cfg);
        snprintf(err, err_size, "%s: not valid JSON (NUL byte at %zu)", path, nul);
        return -1;
    }
    int rc = tb_config_parse(text, path, cfg, err, err_size);
    free(text);
    return rc;
}
