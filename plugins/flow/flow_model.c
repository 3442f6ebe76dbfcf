/* flow_model.c — see flow_model.h. */
#define _GNU_SOURCE
#include "flow_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "strmem.h"

/* ------------------------------------------------------------- sizes */

/* Floats of each array, in the arena's order (layout() and load share it). */
static size_t block_floats(const tb_flow_config *c)
{
    size_t D = (size_t)c->hidden, F = (size_t)c->mlp_dim, C = (size_t)c->cond_dim;
    return 2 * D + 3 * D * D + D * D + F * D + F + D * F + D + 6 * D * C + 6 * D;
}

static size_t model_floats(const tb_flow_config *c)
{
    size_t D = (size_t)c->hidden, V = (size_t)c->vocab, C = (size_t)c->cond_dim, Fq = (size_t)c->freq_dim;
    return V * D + C * Fq + C + C * C + C + (c->self_conditioning ? D * 2 * D : 0) +
           (size_t)c->n_blocks * block_floats(c) + D + 2 * D * C + 2 * D + V * D + V + (size_t)c->head_dim / 2;
}

static int layout(tb_flow_model *m, char *err, size_t err_size)
{
    const tb_flow_config *c = &m->cfg;
    m->arena_floats = model_floats(c);
    m->arena = malloc(m->arena_floats * sizeof(float));
    m->blocks = calloc((size_t)c->n_blocks, sizeof *m->blocks);
    if (!m->arena || !m->blocks) {
        snprintf(err, err_size, "out of memory: the model needs %.2f GB as float32 on the CPU",
                 (double)m->arena_floats * 4 / 1e9);
        return -1;
    }
    size_t D = (size_t)c->hidden, V = (size_t)c->vocab, C = (size_t)c->cond_dim, F = (size_t)c->mlp_dim;
    float *p = m->arena;
#define TAKE(dst, n) (dst = p, p += (n))
    TAKE(m->embed, V * D);
    TAKE(m->t_w1, C * (size_t)c->freq_dim);
    TAKE(m->t_b1, C);
    TAKE(m->t_w2, C * C);
    TAKE(m->t_b2, C);
    m->sc_w = NULL;
    if (c->self_conditioning)
        TAKE(m->sc_w, D * 2 * D);
    for (int l = 0; l < c->n_blocks; l++) {
        tb_flow_block *b = &m->blocks[l];
        TAKE(b->norm1, D);
        TAKE(b->norm2, D);
        TAKE(b->wqkv, 3 * D * D);
        TAKE(b->wo, D * D);
        TAKE(b->w_up, F * D);
        TAKE(b->b_up, F);
        TAKE(b->w_down, D * F);
        TAKE(b->b_down, D);
        TAKE(b->ada_w, 6 * D * C);
        TAKE(b->ada_b, 6 * D);
    }
    TAKE(m->norm_f, D);
    TAKE(m->fada_w, 2 * D * C);
    TAKE(m->fada_b, 2 * D);
    TAKE(m->w_out, V * D);
    TAKE(m->b_out, V);
    TAKE(m->inv_freq, (size_t)c->head_dim / 2);
#undef TAKE
    m->n_params = (int64_t)(m->arena_floats - (size_t)c->head_dim / 2);
    return 0;
}

/* RoPE's inverse frequencies, float32 as transformers computes them. */
static void make_inv_freq(tb_flow_model *m)
{
    int half = m->cfg.head_dim / 2;
    for (int i = 0; i < half; i++)
        m->inv_freq[i] = (float)(1.0 / pow(m->cfg.rope_theta, (double)(2 * i) / m->cfg.head_dim));
}

/* E's rows to length sqrt(D) (LangFlow's "layernorm" embedding norm). */
static void normalise_embedding(tb_flow_model *m)
{
    size_t D = (size_t)m->cfg.hidden;
    for (size_t v = 0; v < (size_t)m->cfg.vocab; v++) {
        float *e = m->embed + v * D;
        double ss = 0;
        for (size_t i = 0; i < D; i++)
            ss += (double)e[i] * e[i];
        double k = ss > 0 ? sqrt((double)D / ss) : 0;
        for (size_t i = 0; i < D; i++)
            e[i] = (float)(e[i] * k);
    }
}

static int check_config(const tb_flow_config *c, const char *where, char *err, size_t err_size)
{
    if (c->vocab < 2 || c->hidden < 2 || c->cond_dim < 1 || c->n_blocks < 1 || c->n_heads < 1 ||
        c->hidden % c->n_heads || (c->hidden / c->n_heads) % 2 || c->model_length < 2 || c->freq_dim < 2 ||
        c->cond_dim > 4096 || c->freq_dim > 65536 ||
        c->freq_dim % 2 || c->mlp_dim < 1 || c->vocab > (1 << 24) || c->hidden > 65536 || c->n_blocks > 1024 ||
        c->model_length > (1 << 20) || !(c->gumbel_scale > 0) || !(c->gumbel_cutoff > 0 && c->gumbel_cutoff < 1) ||
        !(c->t_eps > 0 && c->t_eps < 0.5) || !(c->norm_eps > 0) || !(c->rope_theta > 0) ||
        !(c->time_max_period > 0) || c->eos_token_id >= c->vocab) {
        snprintf(err, err_size,
                 "%s: sizes or schedule out of range (vocab %d, hidden %d, heads %d, blocks %d, cond_dim %d, "
                 "model_length %d, gumbel scale %g cutoff %g)",
                 where, c->vocab, c->hidden, c->n_heads, c->n_blocks, c->cond_dim, c->model_length, c->gumbel_scale,
                 c->gumbel_cutoff);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- config */

static int get_int(const cJSON *j, const char *key, int required, int def, int *out, const char *path, char *err,
                   size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) {
            snprintf(err, err_size, "%s: missing \"%s\"", path, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2e9) {
        snprintf(err, err_size, "%s: \"%s\" must be an integer", path, key);
        return -1;
    }
    *out = (int)v->valuedouble;
    return 0;
}

static int get_num(const cJSON *j, const char *key, int required, double def, double *out, const char *path,
                   char *err, size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) {
            snprintf(err, err_size, "%s: missing \"%s\"", path, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        snprintf(err, err_size, "%s: \"%s\" must be a number", path, key);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *j, const char *key, int def, int *out, const char *path, char *err,
                    size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) {
        snprintf(err, err_size, "%s: \"%s\" must be true or false", path, key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

static int parse_config(const char *path, tb_flow_config *c, char *err, size_t err_size)
{
    memset(c, 0, sizeof *c);
    size_t len = 0;
    char *text = tb_read_file_max(path, TB_READ_MAX_CONFIG, &len);
    if (!text) {
        char why[160];
        snprintf(err, err_size, "%s: %s", path, tb_read_file_why(errno, TB_READ_MAX_CONFIG, "a config.json", why, sizeof why));
        return -1;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j)) {
        snprintf(err, err_size, "%s: not a JSON object", path);
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    int rc = -1;
    if (!cJSON_IsString(mt) || (strcmp(mt->valuestring, "LangFlow") != 0 && strcmp(mt->valuestring, "flow") != 0)) {
        snprintf(err, err_size, "%s: model_type %s%s%s: the flow backend loads \"LangFlow\" (or \"flow\") models",
                 path, cJSON_IsString(mt) ? "\"" : "", cJSON_IsString(mt) ? mt->valuestring : "missing",
                 cJSON_IsString(mt) ? "\"" : "");
        goto out;
    }
    snprintf(c->arch_name, sizeof c->arch_name, "%s", mt->valuestring);
    int mlp_ratio, eos;
    const cJSON *enm = cJSON_GetObjectItemCaseSensitive(j, "embedding_norm_method");
    if (get_int(j, "vocab_size", 1, 0, &c->vocab, path, err, err_size) ||
        get_int(j, "hidden_size", 1, 0, &c->hidden, path, err, err_size) ||
        get_int(j, "cond_dim", 1, 0, &c->cond_dim, path, err, err_size) ||
        get_int(j, "n_blocks", 1, 0, &c->n_blocks, path, err, err_size) ||
        get_int(j, "n_heads", 1, 0, &c->n_heads, path, err, err_size) ||
        get_int(j, "model_length", 1, 0, &c->model_length, path, err, err_size) ||
        get_int(j, "mlp_ratio", 0, 4, &mlp_ratio, path, err, err_size) ||
        get_int(j, "freq_embed_dim", 0, 256, &c->freq_dim, path, err, err_size) ||
        get_int(j, "eos_token_id", 0, -1, &eos, path, err, err_size) ||
        get_num(j, "time_max_period", 0, 10000, &c->time_max_period, path, err, err_size) ||
        get_num(j, "rope_theta", 0, 10000, &c->rope_theta, path, err, err_size) ||
        get_num(j, "norm_eps", 0, 1e-5, &c->norm_eps, path, err, err_size) ||
        get_num(j, "t_eps", 0, 1e-5, &c->t_eps, path, err, err_size) ||
        get_num(j, "gumbel_loc", 1, 0, &c->gumbel_loc, path, err, err_size) ||
        get_num(j, "gumbel_scale", 1, 0, &c->gumbel_scale, path, err, err_size) ||
        get_num(j, "gumbel_cutoff", 1, 0, &c->gumbel_cutoff, path, err, err_size) ||
        get_bool(j, "self_conditioning", 1, &c->self_conditioning, path, err, err_size) ||
        get_bool(j, "use_bias", 1, &c->use_bias, path, err, err_size) ||
        get_bool(j, "use_normalized_embedding", 1, &c->normalized_embedding, path, err, err_size))
        goto out;
    if (c->normalized_embedding && enm && (!cJSON_IsString(enm) || strcmp(enm->valuestring, "layernorm") != 0)) {
        snprintf(err, err_size, "%s: embedding_norm_method must be \"layernorm\" (rows to length sqrt(hidden))", path);
        goto out;
    }
    if (mlp_ratio < 1 || mlp_ratio > 64) {
        snprintf(err, err_size, "%s: mlp_ratio %d outside [1, 64]", path, mlp_ratio);
        goto out;
    }
    const cJSON *pg = cJSON_GetObjectItemCaseSensitive(j, "prompt_gamma");
    if (pg && !cJSON_IsNull(pg) &&
        (!cJSON_IsString(pg) || (strcmp(pg->valuestring, "canvas") != 0 && strcmp(pg->valuestring, "min") != 0))) {
        snprintf(err, err_size, "%s: \"prompt_gamma\" must be \"canvas\" or \"min\"", path);
        goto out;
    }
    c->prompt_gamma_min = pg && cJSON_IsString(pg) && strcmp(pg->valuestring, "min") == 0;
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(j, "prompt_attention");
    if (pa && !cJSON_IsNull(pa) &&
        (!cJSON_IsString(pa) || (strcmp(pa->valuestring, "full") != 0 && strcmp(pa->valuestring, "prompt") != 0))) {
        snprintf(err, err_size, "%s: \"prompt_attention\" must be \"full\" or \"prompt\"", path);
        goto out;
    }
    c->prompt_attends_prompt = pa && cJSON_IsString(pa) && strcmp(pa->valuestring, "prompt") == 0;
    c->mlp_dim = mlp_ratio * c->hidden;
    c->head_dim = c->n_heads > 0 ? c->hidden / c->n_heads : 0;
    c->eos_token_id = eos;
    rc = check_config(c, path, err, err_size);
out:
    cJSON_Delete(j);
    return rc;
}

/* ------------------------------------------------------------- weights */

/* Copy tensor `name` of the expected shape into dst (as float32). */
static int take(const tb_weights *w, const char *name, int ndim, int64_t a, int64_t b, float *dst, char *err,
                size_t err_size)
{
    int64_t shape[2] = {a, b};
    if (tb_weights_expect(w, name, ndim, shape, err, err_size) != 0)
        return -1;
    const tb_tensor *t = tb_weights_find(w, name);
    tb_to_f32(t->dtype, t->data, dst, (size_t)t->n_elements);
    for (int64_t i = 0; i < t->n_elements; i++)
        if (!isfinite(dst[i])) {
            snprintf(err, err_size, "%s: tensor %s: element %lld is not finite", t->file, name, (long long)i);
            return -1;
        }
    return 0;
}

int tb_flow_model_load(const char *dir, tb_flow_model *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (parse_config(path, &m->cfg, err, err_size) != 0)
        return -1;
    const char *slash = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", slash && slash[1] ? slash + 1 : dir);
    tb_weights *w = NULL;
    if (tb_weights_open(dir, &w, err, err_size) != 0)
        return -1;
    const tb_flow_config *c = &m->cfg;
    int64_t D = c->hidden, V = c->vocab, C = c->cond_dim, F = c->mlp_dim;
    int rc = layout(m, err, err_size);
    char name[256];
#define T2(nm, a, b, dst)                                                                                            \
    do {                                                                                                             \
        if (rc == 0)                                                                                                 \
            rc = take(w, nm, 2, a, b, dst, err, err_size);                                                           \
    } while (0)
#define T1(nm, a, dst)                                                                                               \
    do {                                                                                                             \
        if (rc == 0)                                                                                                 \
            rc = take(w, nm, 1, a, 0, dst, err, err_size);                                                           \
    } while (0)
    T2("backbone.vocab_embed.embedding", V, D, m->embed);
    T2("backbone.sigma_map.mlp.0.weight", C, c->freq_dim, m->t_w1);
    T1("backbone.sigma_map.mlp.0.bias", C, m->t_b1);
    T2("backbone.sigma_map.mlp.2.weight", C, C, m->t_w2);
    T1("backbone.sigma_map.mlp.2.bias", C, m->t_b2);
    if (c->self_conditioning)
        T2("backbone.self_cond_proj.weight", D, 2 * D, m->sc_w);
    for (int l = 0; l < c->n_blocks && rc == 0; l++) {
        tb_flow_block *b = &m->blocks[l];
#define BN(suffix) (snprintf(name, sizeof name, "backbone.blocks.%d.%s", l, suffix), name)
        T1(BN("norm1.weight"), D, b->norm1);
        T1(BN("norm2.weight"), D, b->norm2);
        T2(BN("attn_qkv.weight"), 3 * D, D, b->wqkv);
        T2(BN("attn_out.weight"), D, D, b->wo);
        T2(BN("mlp.0.weight"), F, D, b->w_up);
        T1(BN("mlp.0.bias"), F, b->b_up);
        T2(BN("mlp.2.weight"), D, F, b->w_down);
        T1(BN("mlp.2.bias"), D, b->b_down);
        T2(BN("adaLN_modulation.weight"), 6 * D, C, b->ada_w);
        T1(BN("adaLN_modulation.bias"), 6 * D, b->ada_b);
#undef BN
    }
    T1("backbone.output_layer.norm_final.weight", D, m->norm_f);
    T2("backbone.output_layer.adaLN_modulation.weight", 2 * D, C, m->fada_w);
    T1("backbone.output_layer.adaLN_modulation.bias", 2 * D, m->fada_b);
    T2("backbone.output_layer.linear.weight", V, D, m->w_out);
    T1("backbone.output_layer.linear.bias", V, m->b_out);
#undef T1
#undef T2
    /* the learned schedule's parameters, where the file has them, over
     * the config's copies (the published models carry both) */
    static const char *const sched[2] = {"proposal.loc", "proposal.scale"};
    double *dst[2] = {&m->cfg.gumbel_loc, &m->cfg.gumbel_scale};
    for (int i = 0; i < 2 && rc == 0; i++) {
        const tb_tensor *t = tb_weights_find(w, sched[i]);
        if (!t)
            continue;
        float v;
        if (t->n_elements != 1) {
            snprintf(err, err_size, "%s: tensor %s: %lld elements, expected a scalar", t->file, sched[i],
                     (long long)t->n_elements);
            rc = -1;
            break;
        }
        tb_to_f32(t->dtype, t->data, &v, 1);
        *dst[i] = v;
    }
    if (rc == 0)
        rc = check_config(&m->cfg, path, err, err_size);
    if (rc == 0) {
        const tb_tensor *t = tb_weights_at(w, 0);
        snprintf(m->source_dtype, sizeof m->source_dtype, "%s", t ? tb_dtype_name(t->dtype) : "?");
        if (c->normalized_embedding)
            normalise_embedding(m);
        make_inv_freq(m);
    }
    tb_weights_close(w);
    if (rc != 0)
        tb_flow_model_free(m);
    return rc;
}

/* ------------------------------------------------------------- presets */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void fill_uniform(float *p, size_t n, float a, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        p[i] = a * (float)((double)(splitmix(s) >> 11) / 9007199254740992.0 * 2 - 1);
}

int tb_flow_model_preset(const char *name, uint64_t seed, tb_flow_model *m, char *err, size_t err_size)
{
    memset(m, 0, sizeof *m);
    tb_flow_config *c = &m->cfg;
    if (strcmp(name, "langflow-owt") == 0) {
        *c = (tb_flow_config){.vocab = 50257, .hidden = 768, .cond_dim = 128, .n_blocks = 12, .n_heads = 12,
                              .model_length = 1024};
    } else if (strcmp(name, "flow-8b") == 0) {
        *c = (tb_flow_config){.vocab = 128256, .hidden = 4096, .cond_dim = 256, .n_blocks = 32, .n_heads = 32,
                              .model_length = 2048};
    } else if (strcmp(name, "flow-tiny") == 0) {
        *c = (tb_flow_config){.vocab = 256, .hidden = 64, .cond_dim = 32, .n_blocks = 2, .n_heads = 4,
                              .model_length = 128};
    } else {
        snprintf(err, err_size, "preset:%s: unknown flow preset (langflow-owt, flow-8b, flow-tiny)", name);
        return -1;
    }
    snprintf(c->arch_name, sizeof c->arch_name, "LangFlow");
    c->head_dim = c->hidden / c->n_heads;
    c->mlp_dim = 4 * c->hidden;
    c->freq_dim = 256;
    c->time_max_period = 10000;
    c->rope_theta = 10000;
    c->norm_eps = 1e-5;
    c->t_eps = 1e-5;
    c->self_conditioning = 1;
    c->use_bias = 1;
    c->normalized_embedding = 1;
    c->gumbel_loc = 4.5, c->gumbel_scale = 2.0, c->gumbel_cutoff = 1e-3;
    c->eos_token_id = -1;
    c->random_weights = 1;
    snprintf(m->name, sizeof m->name, "preset:%s", name);
    snprintf(m->source_dtype, sizeof m->source_dtype, "random");
    if (layout(m, err, err_size) != 0) {
        tb_flow_model_free(m);
        return -1;
    }
    uint64_t s = seed ^ 0x5DEECE66DULL;
    fill_uniform(m->arena, m->arena_floats, 1.0f, &s);
    /* weights at 1/sqrt(fan in); norms at 1; modulations small, so the
     * blocks start near the identity as trained DiTs do */
    size_t D = (size_t)c->hidden, F = (size_t)c->mlp_dim, C = (size_t)c->cond_dim;
    float kd = 1.0f / sqrtf((float)D), kf = 1.0f / sqrtf((float)F), kc = 1.0f / sqrtf((float)C);
    for (size_t i = 0; i < C * (size_t)c->freq_dim; i++)
        m->t_w1[i] *= 1.0f / sqrtf((float)c->freq_dim);
    for (size_t i = 0; i < C * C; i++)
        m->t_w2[i] *= kc;
    for (size_t i = 0; m->sc_w && i < D * 2 * D; i++)
        m->sc_w[i] *= 0.1f * kd;
    for (int l = 0; l < c->n_blocks; l++) {
        tb_flow_block *b = &m->blocks[l];
        for (size_t i = 0; i < D; i++)
            b->norm1[i] = b->norm2[i] = 1.0f;
        for (size_t i = 0; i < 3 * D * D; i++)
            b->wqkv[i] *= kd;
        for (size_t i = 0; i < D * D; i++)
            b->wo[i] *= kd;
        for (size_t i = 0; i < F * D; i++)
            b->w_up[i] *= kd;
        for (size_t i = 0; i < D * F; i++)
            b->w_down[i] *= kf;
        for (size_t i = 0; i < 6 * D * C; i++)
            b->ada_w[i] *= 0.1f * kc;
        for (size_t i = 0; i < 6 * D; i++)
            b->ada_b[i] *= 0.1f;
    }
    for (size_t i = 0; i < D; i++)
        m->norm_f[i] = 1.0f;
    for (size_t i = 0; i < 2 * D * C; i++)
        m->fada_w[i] *= 0.1f * kc;
    for (size_t i = 0; i < (size_t)c->vocab * D; i++)
        m->w_out[i] *= kd;
    normalise_embedding(m);
    make_inv_freq(m);
    return 0;
}

void tb_flow_model_free(tb_flow_model *m)
{
    free(m->arena);
    free(m->blocks);
    memset(m, 0, sizeof *m);
}
