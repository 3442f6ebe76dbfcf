/* dflash.c — see dflash.h. RMSNorm and RoPE are cpu_forward.c's
 * (tb_cpu_rmsnorm, tb_cpu_rope); softmax and SwiGLU follow its float32
 * order, so the drafter and the target round alike; the products are
 * OpenBLAS. */
#define _GNU_SOURCE
#include "dflash.h"

#include "cpu_forward.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rows of one append's scratch: a longer append runs in chunks */
#define APPEND_CHUNK 256

/* C[rows][out] (+)= A[rows][in] (row stride lda) . W[out][in]^T */
static void matmul_t(float *c, const float *a, int lda, const float *w, int rows, int out, int in, int accumulate)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, a, lda, w, in,
                accumulate ? 1.0f : 0.0f, c, out);
}

int tb_dflash_check_target(const tb_model_config *d, const tb_model_config *t, char *err, size_t err_size)
{
    if (d->arch != TB_ARCH_DFLASH) {
        snprintf(err, err_size, "drafter: %s is not a DFlash drafter (DFlashDraftModel)", d->arch_name);
        return -1;
    }
    if (d->hidden_size != t->hidden_size) {
        snprintf(err, err_size, "drafter: field hidden_size: expected the target's %d, got %d", t->hidden_size,
                 d->hidden_size);
        return -1;
    }
    if (d->vocab_size != t->vocab_size) {
        snprintf(err, err_size, "drafter: field vocab_size: expected the target's %d, got %d", t->vocab_size,
                 d->vocab_size);
        return -1;
    }
    if (d->n_target_layers > 0 && d->n_target_layers != t->n_layers) {
        snprintf(err, err_size, "drafter: field num_target_layers: expected the target's %d layers, got %d",
                 t->n_layers, d->n_target_layers);
        return -1;
    }
    for (int i = 0; i < d->n_target_ids; i++)
        if (d->target_layer_ids[i] < 0 || d->target_layer_ids[i] >= t->n_layers) {
            snprintf(err, err_size,
                     "drafter: field dflash_config.target_layer_ids: expected layers of the target's %d, got %d",
                     t->n_layers, d->target_layer_ids[i]);
            return -1;
        }
    return 0;
}

int tb_dflash_init(tb_dflash_state *st, const tb_model *drafter, const tb_model *target, int max_seqs, int max_ctx,
                   char *err, size_t err_size)
{
    memset(st, 0, sizeof *st);
    const tb_model_config *c = &drafter->cfg;
    if (tb_dflash_check_target(c, &target->cfg, err, err_size) != 0)
        return -1;
    if (!target->embed || !target->lm_head || target->lm_head_rows > 0 || !drafter->fc) {
        snprintf(err, err_size, "drafter: the target's embedding and whole LM head, and the drafter's fc, are needed");
        return -1;
    }
    if (max_seqs < 1 || max_ctx < 1) {
        snprintf(err, err_size, "drafter: room for %d sequences of %d positions: expected >= 1 each", max_seqs,
                 max_ctx);
        return -1;
    }
    st->d = drafter;
    st->embed = target->embed;
    st->lm_head = target->lm_head;
    st->vocab = c->vocab_size;
    st->feat = c->n_target_ids * c->hidden_size;
    st->max_seqs = max_seqs;
    st->max_ctx = max_ctx;
    st->max_block = c->block_size;
    st->chunk = max_ctx < APPEND_CHUNK ? max_ctx : APPEND_CHUNK;
    size_t h = (size_t)c->hidden_size, hd = (size_t)c->head_dim, kvd = (size_t)c->n_kv_heads * hd;
    size_t nq = (size_t)c->n_heads * hd, rows = (size_t)max_seqs * (size_t)st->max_block;
    size_t cache = (size_t)c->n_layers * (size_t)max_seqs * (size_t)max_ctx * kvd;
    size_t sizes[] = {cache,
                      cache,
                      (size_t)st->chunk * h,
                      (size_t)st->chunk * 2 * kvd,
                      rows * h,
                      rows * h,
                      rows * (nq + 2 * kvd),
                      rows * nq,
                      rows * 2 * (size_t)c->intermediate_size,
                      (size_t)st->max_block * ((size_t)max_ctx + (size_t)st->max_block),
                      rows * (size_t)st->vocab};
    float **ptrs[] = {&st->k_cache, &st->v_cache, &st->ctx, &st->kv,  &st->x,     &st->xn,
                      &st->qkv,     &st->att,     &st->gu,  &st->scores, &st->logits};
    double need = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        need += (double)sizes[i] * sizeof(float);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && need > (double)pages * (double)page) {
        snprintf(err, err_size, "out of memory: the drafter's cache and buffers need %.2f GB, more than this machine's",
                 need / 1e9);
        return -1;
    }
    st->ctx_len = calloc((size_t)max_seqs, sizeof(int));
    int ok = st->ctx_len != NULL;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *ptrs[i] = ok ? malloc(sizes[i] * sizeof(float) + 1) : NULL;
        ok = ok && *ptrs[i];
        st->bytes += sizes[i] * sizeof(float);
    }
    if (!ok) {
        snprintf(err, err_size, "out of memory: the drafter's cache and buffers need %.2f GB", need / 1e9);
        tb_dflash_free(st);
        return -1;
    }
    return 0;
}

void tb_dflash_free(tb_dflash_state *st)
{
    free(st->k_cache);
    free(st->v_cache);
    free(st->ctx_len);
    free(st->ctx);
    free(st->kv);
    free(st->x);
    free(st->xn);
    free(st->qkv);
    free(st->att);
    free(st->gu);
    free(st->scores);
    free(st->logits);
    memset(st, 0, sizeof *st);
}

int tb_dflash_ctx_len(const tb_dflash_state *st, int slot)
{
    return slot >= 0 && slot < st->max_seqs ? st->ctx_len[slot] : -1;
}

int tb_dflash_rollback(tb_dflash_state *st, int slot, int n_keep)
{
    if (slot < 0 || slot >= st->max_seqs || n_keep < 0 || n_keep > st->ctx_len[slot])
        return -1;
    st->ctx_len[slot] = n_keep;
    return 0;
}

/* The cache rows of (layer l, slot): [max_ctx][kv_dim] */
static size_t cache_off(const tb_dflash_state *st, int l, int slot)
{
    const tb_model_config *c = &st->d->cfg;
    size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
    return (((size_t)l * st->max_seqs + (size_t)slot) * (size_t)st->max_ctx) * kvd;
}

int tb_dflash_append(tb_dflash_state *st, int slot, const float *features, int n)
{
    if (slot < 0 || slot >= st->max_seqs || n < 0 || n > st->max_ctx - st->ctx_len[slot])
        return -1;
    const tb_model *d = st->d;
    const tb_model_config *c = &d->cfg;
    int h = c->hidden_size, hd = c->head_dim, kvd = c->n_kv_heads * hd, nq = c->n_heads * hd;
    int rd = tb_config_rope_dim(c);
    for (int r0 = 0; r0 < n; r0 += st->chunk) {
        int rows = n - r0 < st->chunk ? n - r0 : st->chunk, pos0 = st->ctx_len[slot];
        /* ctx = hidden_norm(fc(features)): once, shared by every layer */
        matmul_t(st->ctx, features + (size_t)r0 * st->feat, st->feat, d->fc, rows, h, st->feat, 0);
        tb_cpu_rmsnorm(st->ctx, st->ctx, d->hidden_norm, rows, h, c->rms_eps);
        for (int l = 0; l < c->n_layers; l++) {
            const tb_layer *L = &d->layers[l];
            /* k and v rows of the fused projection: [2 kvd][h] after the q rows */
            matmul_t(st->kv, st->ctx, h, L->wqkv + (size_t)nq * h, rows, 2 * kvd, h, 0);
            size_t off = cache_off(st, l, slot);
            for (int r = 0; r < rows; r++) {
                float *k = st->kv + (size_t)r * 2 * kvd, *v = k + kvd;
                if (L->bqkv)
                    for (int i = 0; i < 2 * kvd; i++)
                        k[i] += L->bqkv[nq + i];
                tb_cpu_rmsnorm(k, k, L->k_norm, c->n_kv_heads, hd, c->rms_eps);
                for (int hh = 0; hh < c->n_kv_heads; hh++)
                    tb_cpu_rope(k + hh * hd, rd, pos0 + r, d->rope_inv_freq);
                memcpy(st->k_cache + off + (size_t)(pos0 + r) * kvd, k, (size_t)kvd * sizeof(float));
                memcpy(st->v_cache + off + (size_t)(pos0 + r) * kvd, v, (size_t)kvd * sizeof(float));
            }
        }
        st->ctx_len[slot] += rows;
    }
    return 0;
}

/* One drafter layer over the n_seqs x L block rows in st->x. */
static void layer_forward(tb_dflash_state *st, int l, const int *slots, int n_seqs, int L)
{
    const tb_model *d = st->d;
    const tb_model_config *c = &d->cfg;
    const tb_layer *W = &d->layers[l];
    int rows = n_seqs * L, h = c->hidden_size, hd = c->head_dim, nq = c->n_heads * hd;
    int kvd = c->n_kv_heads * hd, qkvd = nq + 2 * kvd, inter = c->intermediate_size;
    int group = c->n_heads / c->n_kv_heads, rd = tb_config_rope_dim(c);

    tb_cpu_rmsnorm(st->xn, st->x, W->attn_norm, rows, h, c->rms_eps);
    matmul_t(st->qkv, st->xn, h, W->wqkv, rows, qkvd, h, 0);
    for (int r = 0; r < rows; r++) {
        float *q = st->qkv + (size_t)r * qkvd;
        int pos = st->ctx_len[slots[r / L]] + r % L;
        if (W->bqkv)
            for (int i = 0; i < qkvd; i++)
                q[i] += W->bqkv[i];
        tb_cpu_rmsnorm(q, q, W->q_norm, c->n_heads, hd, c->rms_eps);
        tb_cpu_rmsnorm(q + nq, q + nq, W->k_norm, c->n_kv_heads, hd, c->rms_eps);
        for (int hh = 0; hh < c->n_heads; hh++)
            tb_cpu_rope(q + hh * hd, rd, pos, d->rope_inv_freq);
        for (int hh = 0; hh < c->n_kv_heads; hh++)
            tb_cpu_rope(q + nq + hh * hd, rd, pos, d->rope_inv_freq);
    }
    /* per (sequence, head): keys = the slot's C cached context positions,
     * then the block's L rows; no mask */
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < n_seqs; b++) {
        int C = st->ctx_len[slots[b]], nk = C + L;
        size_t off = cache_off(st, l, slots[b]);
        const float *qb = st->qkv + (size_t)b * L * qkvd;
        for (int hh = 0; hh < c->n_heads; hh++) {
            int kvh = hh / group;
            const float *q = qb + (size_t)hh * hd;
            float *s = st->scores; /* [L][nk] */
            if (C > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, C, hd, scale, q, qkvd,
                            st->k_cache + off + (size_t)kvh * hd, kvd, 0.0f, s, nk);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hd, scale, q, qkvd,
                        qb + nq + (size_t)kvh * hd, qkvd, 0.0f, s + C, nk);
            for (int t = 0; t < L; t++) {
                float *row = s + (size_t)t * nk, mx = -INFINITY, sum = 0;
                for (int j = 0; j < nk; j++)
                    mx = row[j] > mx ? row[j] : mx;
                for (int j = 0; j < nk; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = 1.0f / sum;
                for (int j = 0; j < nk; j++)
                    row[j] *= inv;
            }
            float *o = st->att + (size_t)b * L * nq + (size_t)hh * hd;
            if (C > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hd, C, 1.0f, s, nk,
                            st->v_cache + off + (size_t)kvh * hd, kvd, 0.0f, o, nq);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hd, L, 1.0f, s + C, nk,
                        qb + nq + kvd + (size_t)kvh * hd, qkvd, C > 0 ? 1.0f : 0.0f, o, nq);
        }
    }
    matmul_t(st->x, st->att, nq, W->wo, rows, h, nq, 1); /* residual add */

    tb_cpu_rmsnorm(st->xn, st->x, W->mlp_norm, rows, h, c->rms_eps);
    matmul_t(st->gu, st->xn, h, W->w_gate_up, rows, 2 * inter, h, 0);
    for (int r = 0; r < rows; r++) {
        float *g = st->gu + (size_t)r * 2 * inter, *u = g + inter;
        for (int i = 0; i < inter; i++)
            g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, h, inter, 1.0f, st->gu, 2 * inter, W->w_down, inter,
                1.0f, st->x, h);
}

int tb_dflash_draft(tb_dflash_state *st, const int *slots, int n_seqs, const int32_t *anchors, int L, float *logits,
                    int32_t *draft)
{
    const tb_model_config *c = &st->d->cfg;
    if (n_seqs < 1 || n_seqs > st->max_seqs || L < 2 || L > st->max_block)
        return -1;
    for (int b = 0; b < n_seqs; b++) {
        if (slots[b] < 0 || slots[b] >= st->max_seqs || anchors[b] < 0 || anchors[b] >= st->vocab)
            return -1;
        for (int a = 0; a < b; a++)
            if (slots[a] == slots[b])
                return -1;
    }
    int h = c->hidden_size, rows = n_seqs * L;
    for (int r = 0; r < rows; r++) { /* the "noise embedding": the target's, unscaled */
        int32_t t = r % L == 0 ? anchors[r / L] : c->mask_id;
        memcpy(st->x + (size_t)r * h, st->embed + (size_t)t * h, (size_t)h * sizeof(float));
    }
    for (int l = 0; l < c->n_layers; l++)
        layer_forward(st, l, slots, n_seqs, L);
    tb_cpu_rmsnorm(st->xn, st->x, st->d->final_norm, rows, h, c->rms_eps);
    float *out = logits ? logits : st->logits;
    matmul_t(out, st->xn, h, st->lm_head, rows, st->vocab, h, 0);
    if (draft)
        for (int b = 0; b < n_seqs; b++)
            for (int t = 1; t < L; t++) {
                const float *row = out + ((size_t)b * L + t) * st->vocab;
                int best = 0;
                for (int v = 1; v < st->vocab; v++)
                    best = row[v] > row[best] ? v : best;
                draft[(size_t)b * (L - 1) + t - 1] = best;
            }
    return 0;
}
