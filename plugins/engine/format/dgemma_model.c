/* dgemma_model.c — see dgemma_model.h. Config defaults and rules come from
 * transformers' configuration_diffusion_gemma.py (DiffusionGemmaTextConfig,
 * DiffusionGemmaConfig) and modeling_rope_utils.py (proportional RoPE);
 * tensor names from modeling_diffusion_gemma.py and its Orbax converter. */
#define _GNU_SOURCE
#include "dgemma_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fp8.h"
#include "safetensors.h"
#include "strmem.h"

#define MAX_VOCAB (1 << 24)
#define MAX_WIDTH (1 << 20)
#define MAX_POS (1 << 30)

typedef struct pctx {
    const char *path;
    const char *prefix; /* "text_config." or "" */
    char *err;
    size_t err_size;
} pctx;

static int fail(pctx *c, const char *field, const char *expected, const cJSON *got)
{
    char g[64];
    tb_json_describe(got, g, sizeof g);
    snprintf(c->err, c->err_size, "%s: field %s%s: expected %s, got %s", c->path, c->prefix, field, expected, g);
    return -1;
}

static const cJSON *item(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An integer in [lo, hi]; absent: *out kept. */
static int get_int(pctx *c, const cJSON *o, const char *name, long lo, long hi, int *out)
{
    const cJSON *v = item(o, name);
    if (!v)
        return 0;
    char want[80];
    snprintf(want, sizeof want, "an integer in [%ld, %ld]", lo, hi);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return fail(c, name, want, v);
    *out = (int)v->valuedouble;
    return 0;
}

static int get_num(pctx *c, const cJSON *o, const char *name, double lo, double hi, double *out)
{
    const cJSON *v = item(o, name);
    if (!v)
        return 0;
    char want[80];
    snprintf(want, sizeof want, "a number in (%g, %g)", lo, hi);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= lo || v->valuedouble >= hi)
        return fail(c, name, want, v);
    *out = v->valuedouble;
    return 0;
}

/* Refuse a value the engine would compute otherwise: absent/null, or `ok`. */
static int require_str(pctx *c, const cJSON *o, const char *name, const char *ok, const char *why)
{
    const cJSON *v = item(o, name);
    if (!v || (cJSON_IsString(v) && strcmp(v->valuestring, ok) == 0))
        return 0;
    char want[160];
    snprintf(want, sizeof want, "\"%s\" (%s)", ok, why);
    return fail(c, name, want, v);
}

static int require_false(pctx *c, const cJSON *o, const char *name, const char *why)
{
    const cJSON *v = item(o, name);
    if (!v || cJSON_IsFalse(v))
        return 0;
    char want[160];
    snprintf(want, sizeof want, "false (%s)", why);
    return fail(c, name, want, v);
}

static int get_ids(pctx *c, const cJSON *o, const char *name, int vocab, int32_t *ids, int max, int *n)
{
    const cJSON *v = item(o, name);
    if (!v)
        return 0;
    char want[96];
    snprintf(want, sizeof want, "a token id in [0, %d)%s", vocab, max > 1 ? " or a list of at most 8" : "");
    const cJSON *one = v;
    int count = 1;
    if (cJSON_IsArray(v) && max > 1) {
        count = cJSON_GetArraySize(v);
        if (count < 1 || count > max)
            return fail(c, name, want, v);
        one = v->child;
    }
    for (int i = 0; i < count; i++, one = one->next) {
        if (!cJSON_IsNumber(one) || one->valuedouble != floor(one->valuedouble) || one->valuedouble < 0 ||
            one->valuedouble >= vocab)
            return fail(c, name, want, one);
        ids[i] = (int32_t)one->valuedouble;
    }
    *n = count;
    return 0;
}

/* rope_parameters: {"sliding_attention": {rope_type default, rope_theta},
 * "full_attention": {rope_type proportional, partial_rotary_factor,
 * rope_theta, factor}} (the class defaults when absent). */
static int parse_rope(pctx *c, const cJSON *t, tb_dgemma_config *cfg)
{
    double partial = 0.25;
    const cJSON *rp = item(t, "rope_parameters");
    if (rp && !cJSON_IsObject(rp))
        return fail(c, "rope_parameters", "an object", rp);
    const cJSON *s = rp ? item(rp, "sliding_attention") : NULL;
    const cJSON *f = rp ? item(rp, "full_attention") : NULL;
    if (rp && (!cJSON_IsObject(s) || !cJSON_IsObject(f)))
        return fail(c, "rope_parameters", "objects \"sliding_attention\" and \"full_attention\"", cJSON_IsObject(s) ? f : s);
    pctx cs = *c, cf = *c;
    char ps[64], pf[64];
    snprintf(ps, sizeof ps, "%srope_parameters.sliding_attention.", c->prefix);
    snprintf(pf, sizeof pf, "%srope_parameters.full_attention.", c->prefix);
    cs.prefix = ps, cf.prefix = pf;
    if (s && (require_str(&cs, s, "rope_type", "default", "sliding layers: only the default rope") ||
              get_num(&cs, s, "rope_theta", 0, 1e12, &cfg->theta_sliding)))
        return -1;
    if (f && (require_str(&cf, f, "rope_type", "proportional", "full layers: only proportional rope") ||
              get_num(&cf, f, "rope_theta", 0, 1e12, &cfg->theta_full) ||
              get_num(&cf, f, "partial_rotary_factor", 0, 1.0000001, &partial) ||
              get_num(&cf, f, "factor", 0, 1e6, &cfg->rope_factor_full)))
        return -1;
    /* modeling_rope_utils: rope_angles = int(partial * head_dim // 2) */
    cfg->rope_angles_full = (int)floor(partial * cfg->hd_full / 2);
    if (cfg->rope_angles_full > cfg->hd_full / 2)
        cfg->rope_angles_full = cfg->hd_full / 2;
    return 0;
}

static int parse_layer_types(pctx *c, const cJSON *t, tb_dgemma_config *cfg)
{
    const cJSON *lt = item(t, "layer_types");
    if (!lt) { /* the class default: 5 sliding then 1 full, repeated */
        for (int l = 0; l < cfg->n_layers; l++)
            cfg->full[l] = (l + 1) % 6 == 0;
    } else {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers)
            return fail(c, "layer_types", "a list of num_hidden_layers entries", lt);
        int l = 0;
        for (const cJSON *x = lt->child; x; x = x->next, l++) {
            int full = cJSON_IsString(x) && strcmp(x->valuestring, "full_attention") == 0;
            int slid = cJSON_IsString(x) && strcmp(x->valuestring, "sliding_attention") == 0;
            if (!full && !slid)
                return fail(c, "layer_types", "\"sliding_attention\" or \"full_attention\" entries", x);
            cfg->full[l] = (unsigned char)full;
        }
    }
    /* DiffusionGemmaTextConfig forces the last layer to full attention */
    cfg->full[cfg->n_layers - 1] = 1;
    return 0;
}

static int parse_text(pctx *c, const cJSON *t, tb_dgemma_config *cfg)
{
    if (require_str(c, t, "hidden_activation", "gelu_pytorch_tanh", "only GeGLU with tanh GELU is computed") ||
        require_str(c, t, "hidden_act", "gelu_pytorch_tanh", "only GeGLU with tanh GELU is computed") ||
        require_false(c, t, "attention_bias", "attention biases are not computed") ||
        require_str(c, t, "use_bidirectional_attention", "vision",
                    "\"all\" makes the encoder bidirectional and halves the window"))
        return -1;
    const cJSON *sc = item(t, "attn_logit_softcapping");
    if (sc)
        return fail(c, "attn_logit_softcapping", "null (DiffusionGemma's attention has no logit softcap)", sc);
    int n_global_kv = 0;
    if (get_int(c, t, "vocab_size", 1, MAX_VOCAB, &cfg->vocab) ||
        get_int(c, t, "hidden_size", 2, MAX_WIDTH, &cfg->hidden) ||
        get_int(c, t, "intermediate_size", 1, MAX_WIDTH, &cfg->inter) ||
        get_int(c, t, "num_hidden_layers", 1, TB_DG_MAX_LAYERS, &cfg->n_layers) ||
        get_int(c, t, "num_attention_heads", 1, 4096, &cfg->n_heads) ||
        get_int(c, t, "num_key_value_heads", 1, 4096, &cfg->kv_sliding) ||
        get_int(c, t, "head_dim", 2, 65536, &cfg->hd_sliding) ||
        get_int(c, t, "global_head_dim", 2, 65536, &cfg->hd_full) ||
        get_int(c, t, "num_global_key_value_heads", 1, 4096, &n_global_kv) ||
        get_int(c, t, "max_position_embeddings", 1, MAX_POS, &cfg->max_pos) ||
        get_int(c, t, "sliding_window", 1, MAX_POS, &cfg->sliding_window) ||
        get_num(c, t, "rms_norm_eps", 0, 1, &cfg->rms_eps))
        return -1;
    /* MoE in every layer: HF builds it unconditionally, so the sizes are required */
    static const char *const moe_keys[] = {"num_experts", "top_k_experts", "moe_intermediate_size"};
    int *moe_dst[] = {&cfg->n_experts, &cfg->top_k, &cfg->moe_inter};
    for (int i = 0; i < 3; i++) {
        if (!item(t, moe_keys[i]))
            return fail(c, moe_keys[i], "an integer (every layer has a mixture of experts)", NULL);
        if (get_int(c, t, moe_keys[i], 1, i == 2 ? MAX_WIDTH : 1024, moe_dst[i]))
            return -1;
    }
    if (cfg->top_k > cfg->n_experts)
        return fail(c, "top_k_experts", "at most num_experts", item(t, "top_k_experts"));
    cfg->kv_full = n_global_kv ? n_global_kv : cfg->kv_sliding;
    if (cfg->n_heads % cfg->kv_sliding)
        return fail(c, "num_key_value_heads", "a divisor of num_attention_heads", item(t, "num_key_value_heads"));
    if (cfg->n_heads % cfg->kv_full)
        return fail(c, "num_global_key_value_heads", "a divisor of num_attention_heads",
                    item(t, "num_global_key_value_heads"));
    if (cfg->hd_sliding % 2 || cfg->hd_full % 2)
        return fail(c, cfg->hd_sliding % 2 ? "head_dim" : "global_head_dim", "an even head size (rotate-half RoPE)",
                    item(t, cfg->hd_sliding % 2 ? "head_dim" : "global_head_dim"));
    /* the LM head always divides by it: null would fail in transformers too */
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(t, "final_logit_softcapping");
    if (cap && cJSON_IsNull(cap))
        return fail(c, "final_logit_softcapping", "a number (the LM head always softcaps)", cap);
    if (get_num(c, t, "final_logit_softcapping", 0, 1e6, &cfg->softcap))
        return -1;
    if (parse_layer_types(c, t, cfg) || parse_rope(c, t, cfg))
        return -1;
    int n = 0;
    if (get_ids(c, t, "eos_token_id", cfg->vocab, cfg->eos, TB_DG_MAX_EOS, &cfg->n_eos) ||
        get_ids(c, t, "pad_token_id", cfg->vocab, &cfg->pad_id, 1, &n) ||
        get_ids(c, t, "bos_token_id", cfg->vocab, &cfg->bos_id, 1, &n))
        return -1;
    return 0;
}

static void set_dtype(tb_dgemma_config *cfg, const cJSON *o)
{
    const cJSON *d = item(o, "dtype");
    if (!d)
        d = item(o, "torch_dtype");
    if (cJSON_IsString(d))
        tb_strlcpy(cfg->dtype, d->valuestring, sizeof cfg->dtype);
}

static int parse_root(pctx *c, const cJSON *root, tb_dgemma_config *cfg)
{
    const cJSON *mt = item(root, "model_type");
    const cJSON *ar = item(root, "architectures");
    /* transformers dispatches on model_type; architectures when it is absent */
    int ours = cJSON_IsString(mt) && strcmp(mt->valuestring, "diffusion_gemma") == 0;
    if (!mt && cJSON_IsArray(ar) && cJSON_IsString(ar->child))
        ours = strcmp(ar->child->valuestring, "DiffusionGemmaForBlockDiffusion") == 0;
    if (!ours)
        return fail(c, "model_type", "\"diffusion_gemma\" (or architectures [\"DiffusionGemmaForBlockDiffusion\"])", mt);
    const cJSON *t = item(root, "text_config");
    if (!cJSON_IsObject(t))
        return fail(c, "text_config", "an object (DiffusionGemmaTextConfig's fields)", t);
    if (get_int(c, root, "canvas_length", 1, 65536, &cfg->canvas))
        return -1;
    const cJSON *tie = item(root, "tie_word_embeddings");
    if (tie && !cJSON_IsTrue(tie))
        return fail(c, "tie_word_embeddings", "true (false undoes the encoder/decoder ties)", tie);
    set_dtype(cfg, root);
    pctx ct = *c;
    ct.prefix = "text_config.";
    if (parse_text(&ct, t, cfg))
        return -1;
    set_dtype(cfg, t);
    int n = 0;
    if (get_ids(c, root, "image_token_id", cfg->vocab, &cfg->image_id, 1, &n))
        return -1;
    /* the root's eos list (the released config's [1, 106, 50]) wins */
    int32_t eos[TB_DG_MAX_EOS];
    if (get_ids(c, root, "eos_token_id", cfg->vocab, eos, TB_DG_MAX_EOS, &n))
        return -1;
    if (n) {
        memcpy(cfg->eos, eos, sizeof eos);
        cfg->n_eos = n;
    }
    cfg->bf16 = strcmp(cfg->dtype, "bfloat16") == 0;
    /* class defaults a tiny vocabulary does not hold: none */
    if (cfg->bos_id >= cfg->vocab)
        cfg->bos_id = -1;
    if (cfg->image_id >= cfg->vocab)
        cfg->image_id = -1;
    if (cfg->pad_id >= cfg->vocab)
        cfg->pad_id = -1;
    int k = 0;
    for (int e = 0; e < cfg->n_eos; e++)
        if (cfg->eos[e] < cfg->vocab)
            cfg->eos[k++] = cfg->eos[e];
    cfg->n_eos = k;
    return 0;
}

/* DiffusionGemmaTextConfig's and DiffusionGemmaConfig's defaults. */
static void defaults(tb_dgemma_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    *cfg = (tb_dgemma_config){.vocab = 262144, .hidden = 2304, .inter = 9216, .n_layers = 30, .n_heads = 8,
                              .kv_sliding = 4, .hd_sliding = 256, .hd_full = 512, .sliding_window = 512,
                              .rms_eps = 1e-6, .theta_sliding = 10000.0, .theta_full = 1000000.0,
                              .rope_factor_full = 1.0, .softcap = 30.0, .canvas = 256, .max_pos = 131072,
                              .eos = {1}, .n_eos = 1, .pad_id = 0, .bos_id = 2, .image_id = 258880};
}

int tb_dgemma_is_config(const char *json)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root && !end) /* cJSON's sign of a failed allocation */
        return -1;
    int ours = 0;
    if (cJSON_IsObject(root)) {
        const cJSON *mt = item(root, "model_type");
        const cJSON *ar = item(root, "architectures");
        ours = cJSON_IsString(mt) && strcmp(mt->valuestring, "diffusion_gemma") == 0;
        if (!mt && cJSON_IsArray(ar) && cJSON_IsString(ar->child))
            ours = strcmp(ar->child->valuestring, "DiffusionGemmaForBlockDiffusion") == 0;
    }
    cJSON_Delete(root);
    return ours;
}

int tb_dgemma_config_parse(const char *json, const char *path, tb_dgemma_config *cfg, char *err, size_t err_size)
{
    pctx c = {path, "", err, err_size};
    defaults(cfg);
    if (err_size)
        err[0] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        snprintf(err, err_size, "%s: not valid JSON (at byte %td)", path, end ? end - json : (ptrdiff_t)0);
        return -1;
    }
    int rc = cJSON_IsObject(root) ? parse_root(&c, root, cfg) : (snprintf(err, err_size, "%s: expected a JSON object", path), -1);
    cJSON_Delete(root);
    return rc;
}

int tb_dgemma_config_load(const char *path, tb_dgemma_config *cfg, char *err, size_t err_size)
{
    size_t len;
    char *text = tb_read_file_max(path, TB_READ_MAX_CONFIG, &len);
    if (!text) {
        char why[160];
        tb_read_file_why(errno, TB_READ_MAX_CONFIG, "a config.json", why, sizeof why);
        snprintf(err, err_size, "%s: %s", path, why);
        return -1;
    }
    int rc = strlen(text) != len ? (snprintf(err, err_size, "%s: not valid JSON (a NUL byte)", path), -1)
                                 : tb_dgemma_config_parse(text, path, cfg, err, err_size);
    free(text);
    return rc;
}

/* ------------------------------------------------------------- sizes */

static size_t layer_floats(const tb_dgemma_config *c, int l)
{
    size_t h = (size_t)c->hidden, hd = (size_t)(c->full[l] ? c->hd_full : c->hd_sliding);
    size_t kv = (size_t)(c->full[l] ? c->kv_full : c->kv_sliding), q = (size_t)c->n_heads * hd;
    size_t E = (size_t)c->n_experts, mi = (size_t)c->moe_inter, I = (size_t)c->inter;
    size_t attn = q * h + kv * hd * h * (c->full[l] ? 1 : 2) + 2 * hd + h * q;
    return 7 * h + attn + 3 * I * h + E * h + h + E + E * 3 * mi * h;
}

static size_t text_floats(const tb_dgemma_config *c)
{
    size_t h = (size_t)c->hidden, n = (size_t)c->vocab * h + h + h + 3 * (size_t)c->inter * h;
    for (int l = 0; l < c->n_layers; l++)
        n += layer_floats(c, l);
    return n;
}

int64_t tb_dgemma_n_params(const tb_dgemma_config *c)
{
    return (int64_t)text_floats(c) + 2 * c->n_layers; /* + the two layer_scalars */
}

int64_t tb_dgemma_n_active(const tb_dgemma_config *c)
{
    int64_t expert = 3 * (int64_t)c->moe_inter * c->hidden;
    return tb_dgemma_n_params(c) - (int64_t)c->n_layers * (c->n_experts - c->top_k) * expert;
}

static int layout(tb_dgemma_model *m, char *err, size_t err_size)
{
    const tb_dgemma_config *c = &m->cfg;
    size_t h = (size_t)c->hidden, I = (size_t)c->inter, E = (size_t)c->n_experts, mi = (size_t)c->moe_inter;
    m->arena_floats = text_floats(c) + (size_t)c->hd_sliding / 2 + (size_t)c->hd_full / 2;
    m->arena = malloc(m->arena_floats * sizeof(float));
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->arena || !m->layers) {
        snprintf(err, err_size, "out of memory: the model needs %.2f GB as float32 on the CPU",
                 (double)m->arena_floats * 4 / 1e9);
        free(m->arena), free(m->layers);
        m->arena = NULL, m->layers = NULL;
        return -1;
    }
    float *p = m->arena;
#define TAKE(dst, n) (dst = p, p += (n))
    TAKE(m->embed, (size_t)c->vocab * h);
    TAKE(m->final_norm, h);
    TAKE(m->sc_pre_norm, h);
    TAKE(m->sc_gate_up, 2 * I * h);
    TAKE(m->sc_down, h * I);
    for (int l = 0; l < c->n_layers; l++) {
        tb_dgemma_layer *L = &m->layers[l];
        L->full = c->full[l];
        L->hd = L->full ? c->hd_full : c->hd_sliding;
        L->kv = L->full ? c->kv_full : c->kv_sliding;
        size_t hd = (size_t)L->hd, kvd = (size_t)L->kv * hd, q = (size_t)c->n_heads * hd;
        TAKE(L->attn_norm, h);
        TAKE(L->wq, q * h);
        TAKE(L->wk, kvd * h);
        if (!L->full)
            TAKE(L->wv, kvd * h);
        TAKE(L->q_norm, hd);
        TAKE(L->k_norm, hd);
        TAKE(L->wo, h * q);
        TAKE(L->post_attn_norm, h);
        TAKE(L->pre_ffn_norm, h);
        TAKE(L->gate_up, 2 * I * h);
        TAKE(L->down, h * I);
        TAKE(L->post_ffn_norm1, h);
        TAKE(L->pre_ffn_norm2, h);
        TAKE(L->router, E * h);
        TAKE(L->router_scale, h);
        TAKE(L->expert_scale, E);
        TAKE(L->experts_gate_up, E * 2 * mi * h);
        TAKE(L->experts_down, E * h * mi);
        TAKE(L->post_ffn_norm2, h);
        TAKE(L->post_ffn_norm, h);
    }
    TAKE(m->inv_freq_sliding, (size_t)c->hd_sliding / 2);
    TAKE(m->inv_freq_full, (size_t)c->hd_full / 2);
#undef TAKE
    m->n_params = tb_dgemma_n_params(c);
    return 0;
}

void tb_dgemma_derive(const tb_dgemma_config *c, float *inv_freq_sliding, float *inv_freq_full, float *embed_scale)
{
    for (int i = 0; i < c->hd_sliding / 2; i++)
        inv_freq_sliding[i] = (float)(1.0 / pow(c->theta_sliding, (double)(2 * i) / c->hd_sliding));
    /* proportional: the exponent divides by the full head size; the pairs
     * past rope_angles get frequency 0 and stay as they are */
    for (int i = 0; i < c->hd_full / 2; i++)
        inv_freq_full[i] = i < c->rope_angles_full
                               ? (float)(1.0 / pow(c->theta_full, (double)(2 * i) / c->hd_full)) /
                                     (float)c->rope_factor_full
                               : 0.0f;
    /* DiffusionGemmaTextScaledWordEmbedding: embed_scale.to(weight dtype) */
    float s = (float)sqrt((double)c->hidden);
    *embed_scale = c->bf16 ? tb_bf16_to_f32(tb_f32_to_bf16(s)) : s;
}

static void derive(tb_dgemma_model *m)
{
    tb_dgemma_derive(&m->cfg, m->inv_freq_sliding, m->inv_freq_full, &m->embed_scale);
}

/* ------------------------------------------------------------ loading */

static int take(const tb_weights *w, const char *name, int ndim, int64_t a, int64_t b, int64_t cc, float *dst,
                char *err, size_t err_size)
{
    int64_t shape[3] = {a, b, cc};
    if (tb_weights_expect(w, name, ndim, shape, err, err_size) != 0)
        return -1;
    const tb_tensor *t = tb_weights_find(w, name);
    tb_to_f32(t->dtype, t->data, dst, (size_t)t->n_elements);
    return 0;
}

int tb_dgemma_load(const char *dir, tb_dgemma_model *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (tb_dgemma_config_load(path, &m->cfg, err, err_size) != 0)
        return -1;
    const tb_dgemma_config *c = &m->cfg;
    tb_weights *w = NULL;
    if (tb_weights_open(dir, &w, err, err_size) != 0)
        return -1;
    if (layout(m, err, err_size) != 0) {
        tb_weights_close(w);
        return -1;
    }
    const char *base = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : dir);
    const tb_tensor *emb = tb_weights_find(w, "model.decoder.embed_tokens.weight");
    snprintf(m->source_dtype, sizeof m->source_dtype, "%s", emb ? tb_dtype_name(emb->dtype) : "?");
    int64_t h = c->hidden, I = c->inter, E = c->n_experts, mi = c->moe_inter;
    char n[256];
#define T1(name, a, dst) take(w, name, 1, a, 0, 0, dst, err, err_size)
#define T2(name, a, b, dst) take(w, name, 2, a, b, 0, dst, err, err_size)
    int rc = T2("model.decoder.embed_tokens.weight", c->vocab, h, m->embed) ||
             T1("model.decoder.norm.weight", h, m->final_norm) ||
             T1("model.decoder.self_conditioning.pre_norm.weight", h, m->sc_pre_norm) ||
             T2("model.decoder.self_conditioning.gate_proj.weight", I, h, m->sc_gate_up) ||
             T2("model.decoder.self_conditioning.up_proj.weight", I, h, m->sc_gate_up + I * h) ||
             T2("model.decoder.self_conditioning.down_proj.weight", h, I, m->sc_down);
    for (int l = 0; l < c->n_layers && !rc; l++) {
        tb_dgemma_layer *L = &m->layers[l];
        int64_t hd = L->hd, kvd = (int64_t)L->kv * hd, q = (int64_t)c->n_heads * hd;
#define N(suffix) (snprintf(n, sizeof n, "model.decoder.layers.%d.%s", l, suffix), n)
        rc = T1(N("input_layernorm.weight"), h, L->attn_norm) || T2(N("self_attn.q_proj.weight"), q, h, L->wq) ||
             T2(N("self_attn.k_proj.weight"), kvd, h, L->wk) ||
             (L->wv && T2(N("self_attn.v_proj.weight"), kvd, h, L->wv)) ||
             T1(N("self_attn.q_norm.weight"), hd, L->q_norm) || T1(N("self_attn.k_norm.weight"), hd, L->k_norm) ||
             T2(N("self_attn.o_proj.weight"), h, q, L->wo) ||
             T1(N("post_attention_layernorm.weight"), h, L->post_attn_norm) ||
             T1(N("pre_feedforward_layernorm.weight"), h, L->pre_ffn_norm) ||
             T2(N("mlp.gate_proj.weight"), I, h, L->gate_up) || T2(N("mlp.up_proj.weight"), I, h, L->gate_up + I * h) ||
             T2(N("mlp.down_proj.weight"), h, I, L->down) ||
             T1(N("post_feedforward_layernorm_1.weight"), h, L->post_ffn_norm1) ||
             T1(N("pre_feedforward_layernorm_2.weight"), h, L->pre_ffn_norm2) ||
             T2(N("router.proj.weight"), E, h, L->router) || T1(N("router.scale"), h, L->router_scale) ||
             T1(N("router.per_expert_scale"), E, L->expert_scale) ||
             take(w, N("experts.gate_up_proj"), 3, E, 2 * mi, h, L->experts_gate_up, err, err_size) ||
             take(w, N("experts.down_proj"), 3, E, h, mi, L->experts_down, err, err_size) ||
             T1(N("post_feedforward_layernorm_2.weight"), h, L->post_ffn_norm2) ||
             T1(N("post_feedforward_layernorm.weight"), h, L->post_ffn_norm) ||
             T1(N("layer_scalar"), 1, &L->scalar_dec);
#undef N
        if (!rc && L->full && tb_weights_find(w, (snprintf(n, sizeof n, "model.decoder.layers.%d.self_attn.v_proj.weight", l), n))) {
            snprintf(err, err_size, "%s: tensor %s: a full-attention layer has no v_proj (V is k_proj's output)", dir, n);
            rc = -1;
        }
        snprintf(n, sizeof n, "model.encoder.language_model.layers.%d.layer_scalar", l);
        rc = rc || T1(n, 1, &L->scalar_enc);
    }
#undef T1
#undef T2
    tb_weights_close(w);
    if (rc) {
        tb_dgemma_free(m);
        return -1;
    }
    derive(m);
    return 0;
}

/* ------------------------------------------------------------ presets */

typedef struct preset {
    const char *name;
    tb_dgemma_config cfg;
} preset;

/* full attention at 0-based layers 5, 11, 17, 23, 29 */
#define DG26_FULL {[5] = 1, [11] = 1, [17] = 1, [23] = 1, [29] = 1}

static const preset presets[] = {
    /* google/diffusiongemma-26B-A4B-it's config.json (text_config): 30
     * layers, hidden 2816, 16 heads; sliding layers 8 KV heads of 256,
     * window 1024; full layers 2 KV heads of 512, a quarter rotated; 128
     * experts of 704, 8 a token, a shared MLP of 2112; canvas 256 */
    {"diffusiongemma-26b-a4b",
     {.vocab = 262144, .hidden = 2816, .n_layers = 30, .n_heads = 16, .inter = 2112, .kv_sliding = 8,
      .hd_sliding = 256, .kv_full = 2, .hd_full = 512, .n_experts = 128, .top_k = 8, .moe_inter = 704,
      .sliding_window = 1024, .rms_eps = 1e-6, .theta_sliding = 10000.0, .theta_full = 1000000.0,
      .rope_factor_full = 1.0, .rope_angles_full = 64, .softcap = 30.0, .canvas = 256, .max_pos = 262144,
      .full = DG26_FULL, .eos = {1, 106, 50}, .n_eos = 3, .pad_id = 0, .bos_id = 2, .image_id = 258880, .bf16 = 1,
      .dtype = "bfloat16"}},
    /* tests: 3 layers (sliding, sliding, full), window 6, canvas 8 */
    {"tiny-diffusiongemma",
     {.vocab = 128, .hidden = 32, .n_layers = 3, .n_heads = 2, .inter = 48, .kv_sliding = 1, .hd_sliding = 16,
      .kv_full = 1, .hd_full = 32, .n_experts = 4, .top_k = 2, .moe_inter = 16, .sliding_window = 6,
      .rms_eps = 1e-6, .theta_sliding = 10000.0, .theta_full = 1000000.0, .rope_factor_full = 1.0,
      .rope_angles_full = 4, .softcap = 30.0, .canvas = 8, .max_pos = 4096, .full = {[2] = 1}, .eos = {1},
      .n_eos = 1, .pad_id = 0, .bos_id = 2, .image_id = -1, .dtype = "float32"}},
};

int tb_dgemma_preset_config(const char *name, tb_dgemma_config *cfg, char *err, size_t err_size)
{
    for (size_t i = 0; i < TB_ARRAY_LEN(presets); i++)
        if (strcmp(presets[i].name, name) == 0) {
            *cfg = presets[i].cfg;
            return 0;
        }
    snprintf(err, err_size, "unknown DiffusionGemma preset \"%s\" (presets: diffusiongemma-26b-a4b, tiny-diffusiongemma)",
             name);
    return -1;
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* centre +- a, uniform */
static void fill(float *p, size_t n, float centre, float a, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        p[i] = centre + a * (2.0f * (float)(mix(s) >> 40) / (float)(1 << 24) - 1.0f);
}

int tb_dgemma_preset(const char *name, uint64_t seed, tb_dgemma_model *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    if (tb_dgemma_preset_config(name, &m->cfg, err, err_size) || layout(m, err, err_size))
        return -1;
    snprintf(m->name, sizeof m->name, "preset:%s", name);
    snprintf(m->source_dtype, sizeof m->source_dtype, "random");
    const tb_dgemma_config *c = &m->cfg;
    uint64_t s = seed ^ 0x746F6B62656E6368ULL;
    size_t h = (size_t)c->hidden, I = (size_t)c->inter, E = (size_t)c->n_experts, mi = (size_t)c->moe_inter;
    const float w = 0.035f, nrm = 0.2f; /* weights ~ 0.02 std; norms 1 +- 0.2 */
    fill(m->embed, (size_t)c->vocab * h, 0, w, &s);
    fill(m->final_norm, h, 1, nrm, &s);
    fill(m->sc_pre_norm, h, 1, nrm, &s);
    fill(m->sc_gate_up, 2 * I * h, 0, w, &s);
    fill(m->sc_down, h * I, 0, w, &s);
    for (int l = 0; l < c->n_layers; l++) {
        tb_dgemma_layer *L = &m->layers[l];
        size_t hd = (size_t)L->hd, kvd = (size_t)L->kv * hd, q = (size_t)c->n_heads * hd;
        fill(L->attn_norm, h, 1, nrm, &s);
        fill(L->wq, q * h, 0, w, &s);
        fill(L->wk, kvd * h, 0, w, &s);
        if (L->wv)
            fill(L->wv, kvd * h, 0, w, &s);
        fill(L->q_norm, hd, 1, nrm, &s);
        fill(L->k_norm, hd, 1, nrm, &s);
        fill(L->wo, h * q, 0, w, &s);
        fill(L->post_attn_norm, h, 1, nrm, &s);
        fill(L->pre_ffn_norm, h, 1, nrm, &s);
        fill(L->gate_up, 2 * I * h, 0, w, &s);
        fill(L->down, h * I, 0, w, &s);
        fill(L->post_ffn_norm1, h, 1, nrm, &s);
        fill(L->pre_ffn_norm2, h, 1, nrm, &s);
        fill(L->router, E * h, 0, w, &s);
        fill(L->router_scale, h, 1, nrm, &s);
        fill(L->expert_scale, E, 1, nrm, &s);
        fill(L->experts_gate_up, E * 2 * mi * h, 0, w, &s);
        fill(L->experts_down, E * h * mi, 0, w, &s);
        fill(L->post_ffn_norm2, h, 1, nrm, &s);
        fill(L->post_ffn_norm, h, 1, nrm, &s);
        fill(&L->scalar_dec, 1, 1, nrm, &s);
        L->scalar_enc = L->scalar_dec;
    }
    derive(m);
    return 0;
}

/* ------------------------------------------------------------ fp8 */

void tb_dgemma_round_fp8(tb_dgemma_model *m)
{
    const tb_dgemma_config *c = &m->cfg;
    size_t h = (size_t)c->hidden, I = (size_t)c->inter, E = (size_t)c->n_experts, mi = (size_t)c->moe_inter;
    tb_fp8_round_rows(m->sc_gate_up, 2 * I, h);
    tb_fp8_round_rows(m->sc_down, h, I);
    for (int l = 0; l < c->n_layers; l++) {
        tb_dgemma_layer *L = &m->layers[l];
        size_t q = (size_t)c->n_heads * L->hd, kvd = (size_t)L->kv * L->hd;
        tb_fp8_round_rows(L->wq, q, h);
        tb_fp8_round_rows(L->wk, kvd, h);
        if (L->wv)
            tb_fp8_round_rows(L->wv, kvd, h);
        tb_fp8_round_rows(L->wo, h, q);
        tb_fp8_round_rows(L->gate_up, 2 * I, h);
        tb_fp8_round_rows(L->down, h, I);
        /* [E][2 mi][H] and [E][H][mi]: every expert's rows are rows of one matrix */
        tb_fp8_round_rows(L->experts_gate_up, E * 2 * mi, h);
        tb_fp8_round_rows(L->experts_down, E * h, mi);
    }
    m->fp8 = 1;
}

int tb_dgemma_check_fp8_gpu(const tb_dgemma_config *c, char *err, size_t err_size)
{
    struct {
        const char *what;
        long long n;
    } w[] = {{"hidden_size", c->hidden},
             {"num_attention_heads x head_dim", (long long)c->n_heads * c->hd_sliding},
             {"num_attention_heads x global_head_dim", (long long)c->n_heads * c->hd_full},
             {"num_key_value_heads x head_dim", (long long)c->kv_sliding * c->hd_sliding},
             {"num_global_key_value_heads x global_head_dim", (long long)c->kv_full * c->hd_full},
             {"intermediate_size", c->inter},
             {"moe_intermediate_size", c->moe_inter}};
    int sliding = 0; /* the sliding layers' widths only where the model has one */
    for (int l = 0; l < c->n_layers; l++)
        sliding |= !c->full[l];
    for (size_t i = 0; i < TB_ARRAY_LEN(w); i++)
        if (w[i].n % 16 && (sliding || (i != 1 && i != 3))) {
            snprintf(err, err_size, "dtype = fp8 on CUDA: the FP8 kernels need every projection's widths to be "
                     "multiples of 16; %s is %lld", w[i].what, w[i].n);
            return -1;
        }
    return 0;
}

void tb_dgemma_free(tb_dgemma_model *m)
{
    free(m->arena);
    free(m->layers);
    memset(m, 0, sizeof *m);
}
