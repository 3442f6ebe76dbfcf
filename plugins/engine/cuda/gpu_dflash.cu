// gpu_dflash.cu — DFlash's drafter on the GPU (gpu_dflash.h; CPU twin:
// cpu/dflash.c). The block forward is the engine's bidirectional span
// (tb_gpu_forward_pick_rows, tb_gpu_logits) on a Qwen3 view of the
// drafter; what is the drafter's own is here: the context append
// (fc -> hidden_norm -> per layer k/v projection -> k_norm, RoPE, cache
// via k_qkv_post with no q heads) and the sharing of the target's
// embedding and LM head.
#include "gpu_dflash.h"
#include "gpu_internal.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dflash.h"

using namespace tbgpu;

// rows of one append's scratch (a longer append runs in chunks)
#define APPEND_CHUNK 256

struct tb_gpu_dflash {
    tb_gpu *g;          // the drafter's context (a Qwen3 view of its layers)
    tb_gpu *t;          // the target's, whose embedding and LM head g reads
    int max_seqs, max_ctx, block, feat, chunk;
    int *ctx_len;       // host [max_seqs]
    bf16 *fc;           // [h][feat]
    float *hidden_norm; // [h]
    float *feat_f;      // [chunk][feat] staging of host features
    bf16 *feat_b;       // [chunk][feat]
    float *ctx_f;       // [chunk][h] fc's product
    bf16 *ctx_b;        // [chunk][h] after hidden_norm
    float *kv;          // [chunk][2 kvd]
    int *slot_ids;      // device [max_seqs]: 0 .. max_seqs - 1 (k_qkv_post's row_slot)
    int32_t *canvas;    // host [max_seqs][g->len]: the blocks, at their positions
    int32_t *x0;        // host [block]
    double *conf;       // host [block]
};

// y[rows][out] = x[rows][in] W^T (our GEMV for one row, else the engine's GEMM)
static int product(tb_gpu *g, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in)
{
    if (rows == 1 && in % 8 == 0) {
        gemv(g, w, x, y, out, in, 0.0f, gemv_variant_for(g, out, in));
        LAUNCHED();
        return 0;
    }
    return gemm_bf16(g, y, x, w, rows, out, in, 0.0f);
}

// host float32 -> existing device bf16 (through the staging buffer)
static int put_bf16(tb_gpu *g, bf16 *dst, const float *src, size_t n, float *stage)
{
    CK(cudaMemcpyAsync(stage, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    k_f32_to_bf16<<<blocks_for(n), 256, 0, g->stream>>>(stage, dst, n);
    LAUNCHED();
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int put_f32(tb_gpu *g, float *dst, const float *src, size_t n)
{
    CK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

// The drafter's host weights over the random ones the view was made with
// (same shapes: the view is the drafter's config).
static int upload_drafter(tb_gpu_dflash *d, const tb_model *m)
{
    tb_gpu *g = d->g;
    const tb_model_config *c = &m->cfg;
    size_t h = c->hidden_size, nq = (size_t)c->n_heads * c->head_dim, I = c->intermediate_size;
    size_t rows = nq + 2 * (size_t)c->n_kv_heads * c->head_dim;
    size_t big = rows * h > 2 * I * h ? rows * h : 2 * I * h;
    big = big > h * (size_t)d->feat ? big : h * (size_t)d->feat;
    float *stage = NULL;
    if (dalloc(g, (void **)&stage, big * sizeof(float)))
        return -1;
    int rc = put_f32(g, g->final_norm, m->final_norm, h) || put_bf16(g, d->fc, m->fc, h * d->feat, stage) ||
             put_f32(g, d->hidden_norm, m->hidden_norm, h);
    for (int l = 0; l < c->n_layers && !rc; l++) {
        const tb_layer *L = &m->layers[l];
        gpu_layer *G = &g->layers[l];
        rc = put_f32(g, G->attn_norm, L->attn_norm, h) || put_f32(g, G->mlp_norm, L->mlp_norm, h) ||
             put_bf16(g, G->wqkv, L->wqkv, rows * h, stage) || put_bf16(g, G->wo, L->wo, h * nq, stage) ||
             put_bf16(g, G->wgu, L->w_gate_up, 2 * I * h, stage) || put_bf16(g, G->wdown, L->w_down, h * I, stage) ||
             put_f32(g, G->q_norm, L->q_norm, (size_t)c->head_dim) ||
             put_f32(g, G->k_norm, L->k_norm, (size_t)c->head_dim);
        if (!rc && L->bqkv)
            rc = put_f32(g, G->bqkv, L->bqkv, rows);
    }
    if (!rc)
        rc = put_f32(g, g->inv_freq, m->rope_inv_freq, (size_t)c->head_dim / 2);
    dfree(g, stage);
    return rc ? -1 : 0;
}

extern "C" void tb_gpu_dflash_free(tb_gpu_dflash *d)
{
    if (!d)
        return;
    if (d->g) {
        tb_gpu *g = d->g;
        cudaStreamSynchronize(g->stream);
        dfree(g, d->fc);
        dfree(g, d->hidden_norm);
        dfree(g, d->feat_f);
        dfree(g, d->feat_b);
        dfree(g, d->ctx_f);
        dfree(g, d->ctx_b);
        dfree(g, d->kv);
        dfree(g, d->slot_ids);
        // the target's: not ours to free
        g->embed = g->lm_head = NULL;
        tb_gpu_free(g);
    }
    free(d->ctx_len);
    free(d->canvas);
    free(d->x0);
    free(d->conf);
    free(d);
}

extern "C" int tb_gpu_dflash_create(tb_gpu_dflash **out, tb_gpu *target, const tb_model_config *target_cfg,
                                    const tb_model_config *dcfg, const tb_model *drafter, uint64_t seed, int max_seqs,
                                    int max_ctx, char *err, size_t err_size)
{
    *out = NULL;
    if (drafter)
        dcfg = &drafter->cfg;
    if (tb_dflash_check_target(dcfg, target_cfg, err, err_size) != 0)
        return -1;
    if (target->ranks || target->head_rows != target->cfg.vocab_size || target->fp8) {
        snprintf(err, err_size, "drafter: the target must be one bf16 device context with its whole LM head");
        return -1;
    }
    if (max_seqs < 1 || max_ctx < 1) {
        snprintf(err, err_size, "drafter: room for %d sequences of %d positions: expected >= 1 each", max_seqs,
                 max_ctx);
        return -1;
    }
    tb_gpu_dflash *d = (tb_gpu_dflash *)calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    d->t = target;
    d->max_seqs = max_seqs;
    d->max_ctx = max_ctx;
    d->block = dcfg->block_size;
    d->feat = dcfg->n_target_ids * dcfg->hidden_size;
    d->chunk = max_ctx < APPEND_CHUNK ? max_ctx : APPEND_CHUNK;
    // the view: Qwen3 layers, one (tied) embedding made at random and then
    // replaced by the target's
    tb_model_config view = *dcfg;
    view.arch = TB_ARCH_QWEN3;
    snprintf(view.arch_name, sizeof view.arch_name, "Qwen3ForCausalLM");
    view.tie_word_embeddings = 1;
    if (tb_gpu_create_dtype(&d->g, &view, NULL, seed, 0, err, err_size) != 0) {
        free(d);
        return -1;
    }
    tb_gpu *g = d->g;
    const tb_model_config *c = &g->cfg;
    size_t h = c->hidden_size, kvd = (size_t)c->n_kv_heads * c->head_dim, ch = (size_t)d->chunk;
    int len = max_ctx + d->block, rc = 0;
    d->ctx_len = (int *)calloc((size_t)max_seqs, sizeof(int));
    d->canvas = (int32_t *)calloc((size_t)max_seqs * len, sizeof(int32_t));
    d->x0 = (int32_t *)calloc((size_t)d->block, sizeof(int32_t));
    d->conf = (double *)calloc((size_t)d->block, sizeof(double));
    int *ids = (int *)malloc((size_t)max_seqs * sizeof(int));
    if (!d->ctx_len || !d->canvas || !d->x0 || !d->conf || !ids)
        rc = fail(g, "out of host memory");
    for (int i = 0; ids && i < max_seqs; i++)
        ids[i] = i;
    if (!rc)
        rc = dalloc(g, (void **)&d->fc, h * d->feat * sizeof(bf16)) ||
             dalloc(g, (void **)&d->hidden_norm, h * sizeof(float)) ||
             dalloc(g, (void **)&d->feat_f, ch * d->feat * sizeof(float)) ||
             dalloc(g, (void **)&d->feat_b, ch * d->feat * sizeof(bf16)) ||
             dalloc(g, (void **)&d->ctx_f, ch * h * sizeof(float)) || dalloc(g, (void **)&d->ctx_b, ch * h * sizeof(bf16)) ||
             dalloc(g, (void **)&d->kv, ch * 2 * kvd * sizeof(float)) ||
             dalloc(g, (void **)&d->slot_ids, (size_t)max_seqs * sizeof(int));
    if (!rc && (cudaMemcpyAsync(d->slot_ids, ids, (size_t)max_seqs * sizeof(int), cudaMemcpyHostToDevice, g->stream) !=
                    cudaSuccess ||
                cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "drafter: slot ids upload failed");
    free(ids);
    if (!rc && drafter) {
        rc = upload_drafter(d, drafter);
    } else if (!rc) { // random fc (as the view's weights), hidden_norm 1
        uint64_t s = seed ^ 0x6466666C617368ULL; // "dflash"
        k_init_uniform<<<4096, 256, 0, g->stream>>>(d->fc, h * d->feat, s, 0.02f * 1.7320508f);
        float *ones = (float *)malloc(h * sizeof(float));
        if (!ones) {
            rc = fail(g, "out of host memory");
        } else {
            for (size_t i = 0; i < h; i++)
                ones[i] = 1.0f;
            rc = put_f32(g, d->hidden_norm, ones, h);
            free(ones);
        }
    }
    if (!rc) { // share the target's embedding and LM head
        dfree(g, g->embed);
        g->embed = target->embed;
        g->lm_head = target->lm_head;
    }
    if (!rc)
        rc = tb_gpu_reserve(g, max_seqs, len, max_seqs * d->block, err, err_size);
    else
        snprintf(err, err_size, "%s", g->error);
    if (rc) {
        tb_gpu_dflash_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

extern "C" int tb_gpu_dflash_ctx_len(const tb_gpu_dflash *d, int slot)
{
    return slot >= 0 && slot < d->max_seqs ? d->ctx_len[slot] : -1;
}

extern "C" int tb_gpu_dflash_rollback(tb_gpu_dflash *d, int slot, int n_keep)
{
    if (slot < 0 || slot >= d->max_seqs || n_keep < 0 || n_keep > d->ctx_len[slot])
        return fail(d->g, "drafter rollback of slot %d to %d positions", slot, n_keep);
    d->ctx_len[slot] = n_keep;
    return 0;
}

extern "C" int tb_gpu_dflash_append(tb_gpu_dflash *d, int slot, const float *features, int n, int on_device)
{
    tb_gpu *g = d->g;
    if (slot < 0 || slot >= d->max_seqs || n < 0 || n > d->max_ctx - d->ctx_len[slot])
        return fail(g, "drafter append of %d positions to slot %d (%d of %d held)", n, slot,
                    slot >= 0 && slot < d->max_seqs ? d->ctx_len[slot] : -1, d->max_ctx);
    const tb_model_config *c = &g->cfg;
    int h = c->hidden_size, hd = c->head_dim, nkv = c->n_kv_heads, kvd = nkv * hd, nq = c->n_heads * hd;
    float eps = (float)c->rms_eps;
    if (on_device) // the producer's stream: the features must have landed
        CK(cudaStreamSynchronize(d->t->stream));
    for (int r0 = 0; r0 < n; r0 += d->chunk) {
        int rows = n - r0 < d->chunk ? n - r0 : d->chunk, pos0 = d->ctx_len[slot];
        size_t nf = (size_t)rows * d->feat;
        const float *src = features + (size_t)r0 * d->feat;
        if (!on_device) {
            CK(cudaMemcpyAsync(d->feat_f, src, nf * sizeof(float), cudaMemcpyHostToDevice, g->stream));
            src = d->feat_f;
        }
        k_f32_to_bf16<<<blocks_for(nf), 256, 0, g->stream>>>(src, d->feat_b, nf);
        LAUNCHED();
        // ctx = hidden_norm(fc(features)): once, every layer reads it
        if (product(g, d->ctx_f, d->feat_b, d->fc, rows, h, d->feat))
            return -1;
        k_rmsnorm<<<rows, rows > 1 ? 256 : 1024, 0, g->stream>>>(d->ctx_f, 1, 0, 1, d->hidden_norm, d->ctx_b, h, eps);
        LAUNCHED();
        for (int l = 0; l < c->n_layers; l++) {
            gpu_layer *G = &g->layers[l];
            // the k and v rows of the fused projection, [2 kvd][h] after the q rows
            if (product(g, d->kv, d->ctx_b, G->wqkv + (size_t)nq * h, rows, 2 * kvd, h))
                return -1;
            // k_qkv_post with no q heads: the row is [k heads | v heads];
            // k_norm and RoPE at pos0 + r, both into slot's cache rows
            size_t layer_off = (size_t)l * g->seqs * g->len * kvd;
            dim3 grid(rows, (2 * nkv + QKV_POST_WARPS - 1) / QKV_POST_WARPS);
            k_qkv_post<<<grid, QKV_POST_WARPS * 32, (size_t)tb_config_rope_dim(c) * sizeof(float), g->stream>>>(
                d->kv, G->bqkv ? G->bqkv + nq : NULL, NULL, G->k_norm, eps, g->inv_freq, rows, pos0, NULL,
                d->slot_ids + slot, NULL, g->d_pad, g->kc + layer_off, g->vc + layer_off, g->len, NULL, 0, nkv, hd,
                tb_config_rope_dim(c), NULL, NULL);
            LAUNCHED();
        }
        d->ctx_len[slot] += rows;
        // the roofline's work (docs/METRICS.md): fc and each layer's K/V
        // rows of wqkv, bf16, read once a chunk; the float32 features
        // read; each layer's keys and values written (bf16)
        double w = (double)h * d->feat + (double)c->n_layers * 2 * kvd * h;
        g->work_flops += 2.0 * rows * w;
        g->work_bytes += 2 * w + 4.0 * rows * d->feat + 2.0 * c->n_layers * rows * 2 * kvd;
    }
    CK(cudaStreamSynchronize(g->stream)); // the staging is reused by the next call
    return 0;
}

extern "C" int tb_gpu_dflash_draft(tb_gpu_dflash *d, const int *slots, int n_seqs, const int32_t *anchors, int L,
                                   int32_t *draft, float *logits)
{
    tb_gpu *g = d->g;
    if (n_seqs < 1 || n_seqs > d->max_seqs || L < 2 || L > d->block)
        return fail(g, "drafter: %d blocks of %d rows (block_size %d, %d sequences)", n_seqs, L, d->block,
                    d->max_seqs);
    int V = g->cfg.vocab_size;
    for (int b = 0; b < n_seqs; b++) {
        if (slots[b] < 0 || slots[b] >= d->max_seqs || anchors[b] < 0 || anchors[b] >= V)
            return fail(g, "drafter: slot %d, anchor %d", slots[b], anchors[b]);
        for (int a = 0; a < b; a++)
            if (slots[a] == slots[b])
                return fail(g, "drafter: slot %d twice", slots[b]);
    }
    // one span a sequence: each block sits at its own context's end
    for (int b = 0; b < n_seqs; b++) {
        int s = slots[b], C = d->ctx_len[s];
        int32_t *row = d->canvas + (size_t)s * g->len + C;
        row[0] = anchors[b];
        for (int i = 1; i < L; i++)
            row[i] = g->cfg.mask_id;
        if (tb_gpu_forward_pick_rows(g, d->canvas, g->len, &s, 1, C, L, C + L, 0, 1, L - 1, 0, 0, -1, d->x0,
                                     d->conf) != 0)
            return -1;
        memcpy(draft + (size_t)b * (L - 1), d->x0 + 1, (size_t)(L - 1) * sizeof(int32_t));
        if (logits) { // the head ran on the drafted rows 1 .. L - 1 alone: g->logits [L - 1][V]
            CK(cudaMemcpyAsync(logits + ((size_t)b * L + 1) * V, g->logits, (size_t)(L - 1) * V * sizeof(float),
                               cudaMemcpyDeviceToHost, g->stream));
            CK(cudaStreamSynchronize(g->stream));
        }
    }
    return 0;
}

extern "C" int tb_gpu_dflash_logits(tb_gpu_dflash *d, int32_t anchor, int L, float *logits)
{
    tb_gpu *g = d->g;
    if (L < 2 || L > d->block || anchor < 0 || anchor >= g->cfg.vocab_size)
        return fail(g, "drafter: a block of %d rows, anchor %d", L, anchor);
    int32_t *tok = (int32_t *)malloc((size_t)L * sizeof(int32_t));
    if (!tok)
        return fail(g, "out of host memory");
    tok[0] = anchor;
    for (int i = 1; i < L; i++)
        tok[i] = g->cfg.mask_id;
    int C = d->ctx_len[0];
    int rc = tb_gpu_logits(g, tok, 1, C, L, C + L, 0, logits);
    free(tok);
    return rc;
}

extern "C" void tb_gpu_dflash_take_work(tb_gpu_dflash *d, double *flops, double *bytes)
{
    tb_gpu_take_work(d->g, flops, bytes, NULL, NULL);
}

extern "C" const char *tb_gpu_dflash_error(const tb_gpu_dflash *d)
{
    return d->g->error;
}
