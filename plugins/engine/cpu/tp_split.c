/* tp_split.c — tensor parallelism's split of a model's weights (tp_split.h). */
#include "tp_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tb_tp_split_plan(const tb_model_config *c, int tp, int rank, tb_tp_split *s, char *err, size_t err_size)
{
    memset(s, 0, sizeof *s);
    if (tp < 1 || rank < 0 || rank >= tp) {
        snprintf(err, err_size, "tensor parallel: rank %d of tp %d", rank, tp);
        return -1;
    }
    if (c->n_experts > 0) {
        snprintf(err, err_size, "tensor parallel: %s is a mixture-of-experts model; its experts are not split",
                 c->arch_name);
        return -1;
    }
    if (c->n_heads % tp != 0) {
        snprintf(err, err_size, "tensor parallel: tp %d does not divide num_attention_heads %d", tp, c->n_heads);
        return -1;
    }
    if (c->n_kv_heads % tp != 0 && tp % c->n_kv_heads != 0) {
        snprintf(err, err_size, "tensor parallel: tp %d and num_key_value_heads %d: neither divides the other", tp,
                 c->n_kv_heads);
        return -1;
    }
    if (c->intermediate_size % tp != 0) {
        snprintf(err, err_size, "tensor parallel: tp %d does not divide intermediate_size %d", tp,
                 c->intermediate_size);
        return -1;
    }
    int nv = (c->vocab_size + tp - 1) / tp;
    if ((long)nv * (tp - 1) >= c->vocab_size) {
        snprintf(err, err_size, "tensor parallel: vocab_size %d leaves rank %d of tp %d no rows", c->vocab_size,
                 tp - 1, tp);
        return -1;
    }
    int group = c->n_heads / c->n_kv_heads;
    s->tp = tp;
    s->rank = rank;
    s->n_q_heads = c->n_heads / tp;
    s->q_head0 = rank * s->n_q_heads;
    /* the kv heads of the rank's q heads: n_kv / tp of them, or (tp a
     * multiple of n_kv) the one they share */
    s->n_kv_heads = c->n_kv_heads >= tp ? c->n_kv_heads / tp : 1;
    s->kv_head0 = s->q_head0 / group;
    s->n_inter = c->intermediate_size / tp;
    s->inter0 = rank * s->n_inter;
    s->vocab0 = rank * nv;
    s->n_vocab = rank == tp - 1 ? c->vocab_size - s->vocab0 : nv;
    return 0;
}

/* dst[r][0..cols) = src[row0 + r][col0 .. col0 + cols) of a [.][ld] matrix */
static float *copy_block(float *dst, const float *src, size_t ld, size_t row0, size_t rows, size_t col0,
                         size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * cols, src + (row0 + r) * ld + col0, cols * sizeof(float));
    return dst + rows * cols;
}

int tb_tp_split_model(const tb_model *full, const tb_tp_split *s, tb_model *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof *out);
    const tb_model_config *c = &full->cfg;
    tb_tp_split chk;
    if (tb_tp_split_plan(c, s->tp, s->rank, &chk, err, err_size) != 0)
        return -1;
    if (memcmp(&chk, s, sizeof chk) != 0) {
        snprintf(err, err_size, "tensor parallel: the split given is not tb_tp_split_plan's for rank %d of %d", s->rank,
                 s->tp);
        return -1;
    }
    size_t h = (size_t)c->hidden_size, hd = (size_t)c->head_dim, V = (size_t)c->vocab_size;
    size_t nq = (size_t)s->n_q_heads * hd, nkv = (size_t)s->n_kv_heads * hd, ni = (size_t)s->n_inter;
    size_t qkv = nq + 2 * nkv, full_q = (size_t)c->n_heads * hd, full_kv = (size_t)c->n_kv_heads * hd;
    size_t inter = (size_t)c->intermediate_size;
    size_t per_layer = h + qkv * h + (c->qkv_bias ? qkv : 0) + (c->qk_norm ? 2 * hd : 0) + h * nq + h + 3 * ni * h;
    size_t n = V * h + (size_t)s->n_vocab * h + h + (size_t)c->n_layers * per_layer + hd / 2;
    out->cfg = *c;
    out->cfg.n_heads = s->n_q_heads;
    out->cfg.n_kv_heads = s->n_kv_heads;
    out->cfg.intermediate_size = s->n_inter;
    out->cfg.tie_word_embeddings = 0; /* the head is a slice now, the embedding whole */
    out->arena = malloc(n * sizeof(float));
    out->layers = calloc((size_t)c->n_layers, sizeof *out->layers);
    if (!out->arena || !out->layers) {
        snprintf(err, err_size, "tensor parallel: out of memory for rank %d's %.2f GB", s->rank, n * 4.0 / 1e9);
        tb_model_free(out);
        return -1;
    }
    out->arena_floats = n;
    float *p = out->arena;
    out->embed = p;
    p = copy_block(p, full->embed, h, 0, V, 0, h);
    out->lm_head = p;
    p = copy_block(p, full->lm_head, h, (size_t)s->vocab0, (size_t)s->n_vocab, 0, h);
    out->lm_head_rows = s->n_vocab;
    out->final_norm = p;
    p = copy_block(p, full->final_norm, h, 0, 1, 0, h);
    size_t q0 = (size_t)s->q_head0 * hd, kv0 = (size_t)s->kv_head0 * hd, i0 = (size_t)s->inter0;
    for (int l = 0; l < c->n_layers; l++) {
        const tb_layer *F = &full->layers[l];
        tb_layer *L = &out->layers[l];
        L->attn_norm = p;
        p = copy_block(p, F->attn_norm, h, 0, 1, 0, h);
        /* wqkv rows: q heads, then k heads, then v heads of the rank */
        L->wqkv = p;
        p = copy_block(p, F->wqkv, h, q0, nq, 0, h);
        p = copy_block(p, F->wqkv, h, full_q + kv0, nkv, 0, h);
        p = copy_block(p, F->wqkv, h, full_q + full_kv + kv0, nkv, 0, h);
        if (c->qkv_bias) {
            L->bqkv = p;
            p = copy_block(p, F->bqkv, 1, q0, nq, 0, 1);
            p = copy_block(p, F->bqkv, 1, full_q + kv0, nkv, 0, 1);
            p = copy_block(p, F->bqkv, 1, full_q + full_kv + kv0, nkv, 0, 1);
        }
        if (c->qk_norm) {
            L->q_norm = p;
            p = copy_block(p, F->q_norm, hd, 0, 1, 0, hd);
            L->k_norm = p;
            p = copy_block(p, F->k_norm, hd, 0, 1, 0, hd);
        }
        L->wo = p; /* [hidden][n_heads hd]: the rank's heads' columns */
        p = copy_block(p, F->wo, full_q, 0, h, q0, nq);
        L->mlp_norm = p;
        p = copy_block(p, F->mlp_norm, h, 0, 1, 0, h);
        L->w_gate_up = p; /* gate rows of the slice, then up rows */
        p = copy_block(p, F->w_gate_up, h, i0, ni, 0, h);
        p = copy_block(p, F->w_gate_up, h, inter + i0, ni, 0, h);
        L->w_down = p; /* [hidden][intermediate]: the slice's columns */
        p = copy_block(p, F->w_down, inter, 0, h, i0, ni);
    }
    out->rope_inv_freq = p;
    p = copy_block(p, full->rope_inv_freq, hd / 2, 0, 1, 0, hd / 2);
    out->n_params = (int64_t)(n - hd / 2);
    snprintf(out->name, sizeof out->name, "%.200s [tp %d rank %d]", full->name, s->tp, s->rank);
    memcpy(out->source_dtype, full->source_dtype, sizeof out->source_dtype);
    return 0;
}
