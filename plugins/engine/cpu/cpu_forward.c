/* cpu_forward.c — see cpu_forward.h. The reference for every GPU kernel:
 * plain loops and sgemm, in the order transformers computes. */
#define _GNU_SOURCE
#include "cpu_forward.h"
#include "fp8.h"
#include "safetensors.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int kv_dim(const tb_model_config *c)
{
    return c->n_kv_heads * c->head_dim;
}

static int qkv_dim(const tb_model_config *c)
{
    return (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
}

int tb_cpu_state_init(tb_cpu_state *st, const tb_model *m, int max_seqs, int max_len, int max_rows,
                      int n_threads, char *err, size_t err_size)
{
    memset(st, 0, sizeof *st);
    const tb_model_config *c = &m->cfg;
    st->m = m;
    st->fp8_act = m->fp8;
    st->max_seqs = max_seqs;
    st->max_len = max_len;
    st->max_rows = max_rows;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    st->n_threads = n_threads;
    openblas_set_num_threads(n_threads);

    size_t cache = (size_t)c->n_layers * (size_t)max_seqs * (size_t)max_len * (size_t)kv_dim(c);
    size_t rows = (size_t)max_rows, h = (size_t)c->hidden_size;
    size_t sizes[] = {cache, cache, rows * h, rows * h, rows * (size_t)qkv_dim(c),
                      rows * (size_t)(c->n_heads * c->head_dim), rows * 2 * (size_t)c->intermediate_size,
                      (size_t)max_rows * (size_t)max_len};
    float **ptrs[] = {&st->k_cache, &st->v_cache, &st->x, &st->xn, &st->qkv, &st->att, &st->gu, &st->scores};
    /* More than the machine's memory is refused before allocating:
     * malloc may promise it (overcommit) and the OOM killer collect. */
    double need = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        need += (double)sizes[i] * sizeof(float);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && need > (double)pages * (double)page) {
        snprintf(err, err_size,
                 "out of memory: KV cache and buffers need %.2f GB (%d sequences x %d positions), more than this "
                 "machine's %.2f GB",
                 need / 1e9, max_seqs, max_len, (double)pages * (double)page / 1e9);
        return -1;
    }
    st->seq_len = calloc((size_t)max_seqs, sizeof(int));
    st->pad = calloc((size_t)max_seqs, sizeof(int));
    st->seq_slot = calloc((size_t)max_seqs, sizeof(int));
    st->seq_pos0 = calloc((size_t)max_seqs, sizeof(int));
    st->seq_attend = calloc((size_t)max_seqs, sizeof(int));
    int ok = st->seq_len && st->pad && st->seq_slot && st->seq_pos0 && st->seq_attend;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *ptrs[i] = ok ? malloc(sizes[i] * sizeof(float) + 1) : NULL;
        ok = ok && *ptrs[i];
        st->bytes += sizes[i] * sizeof(float);
    }
    if (ok && c->n_experts > 0) {
        tb_model_moe_config(c, &st->moe_cfg);
        st->moe_out = malloc(rows * h * sizeof(float) + 1);
        ok = st->moe_out && tb_moe_scratch_init(&st->moe, &st->moe_cfg, max_rows, err, err_size) == 0;
        st->moe.fp8_act = m->fp8;
        st->bytes += rows * h * sizeof(float) + st->moe.bytes;
    }
    if (!ok) {
        snprintf(err, err_size, "out of memory: KV cache and buffers need %.2f GB (%d sequences x %d positions)",
                 (double)st->bytes / 1e9, max_seqs, max_len);
        tb_cpu_state_free(st);
        return -1;
    }
    return 0;
}

void tb_cpu_set_threads(tb_cpu_state *st, int n_threads)
{
    if (n_threads == st->n_threads || n_threads < 1)
        return;
    st->n_threads = n_threads;
    openblas_set_num_threads(n_threads);
}

void tb_cpu_state_reset(tb_cpu_state *st)
{
    memset(st->seq_len, 0, (size_t)st->max_seqs * sizeof(int));
    memset(st->pad, 0, (size_t)st->max_seqs * sizeof(int));
}

int tb_cpu_set_padding(tb_cpu_state *st, const int *pad, int n)
{
    if (n < 0 || n > st->max_seqs)
        return -1;
    memcpy(st->pad, pad, (size_t)n * sizeof(int));
    return 0;
}

void tb_cpu_state_free(tb_cpu_state *st)
{
    free(st->k_cache);
    free(st->v_cache);
    free(st->seq_len);
    free(st->pad);
    free(st->seq_slot);
    free(st->seq_pos0);
    free(st->seq_attend);
    free(st->x);
    free(st->xn);
    free(st->qkv);
    free(st->att);
    free(st->gu);
    free(st->scores);
    free(st->moe_out);
    free(st->capture_layers);
    free(st->capture);
    tb_moe_scratch_free(&st->moe);
    memset(st, 0, sizeof *st);
}

/* y[r] = x[r] / rms(x[r]) * w, over rows of width n (as transformers'
 * LlamaRMSNorm: mean of squares in float32, then rsqrt(. + eps)). */
void tb_cpu_rmsnorm(float *y, const float *x, const float *w, int rows, int n, double eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        float ss = 0;
        for (int i = 0; i < n; i++)
            ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss / (float)n + (float)eps);
        for (int i = 0; i < n; i++)
            yr[i] = w[i] * (xr[i] * inv);
    }
}

/* C[rows][out] (+)= A[rows][in] · W[out][in]^T */
static void matmul_t(float *c, const float *a, const float *w, int rows, int out, int in, int accumulate)
{
    if (rows == 1) { /* batch-1 decode: a GEMV streams W once, as fast as memory allows */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, a, 1, accumulate ? 1.0f : 0.0f, c, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, a, in, w, in,
                accumulate ? 1.0f : 0.0f, c, out);
}

/* dtype = fp8: a projection's input rows rounded to their E4M3 form
 * (fp8.h's tb_fp8_round_input_rows) */
static void fp8_act_round(const tb_cpu_state *st, float *a, int rows, int cols, int ld)
{
    if (st->fp8_act)
        tb_fp8_round_input_rows(a, (size_t)rows, (size_t)cols, (size_t)ld);
}

/* Half-split (NeoX) rotary embedding of the first rope_dim dims of one
 * head vector at position pos (the rest, partial rotary, unchanged):
 * x' = x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1]. */
void tb_cpu_rope(float *v, int rope_dim, int pos, const float *inv_freq)
{
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        float angle = (float)pos * inv_freq[i]; /* float32, as transformers */
        float cs = cosf(angle), sn = sinf(angle);
        float a = v[i], b = v[i + half];
        v[i] = a * cs - b * sn;
        v[i + half] = b * cs + a * sn;
    }
}

/* The keys a row at position pos sees, of n_keys: mask_block 0 =
 * bidirectional (all), 1 = causal (up to its own position), k > 1 =
 * block-causal (up to the end of its block of k positions, blocks counted
 * from position 0). */
static int visible_keys(int pos, int n_keys, int mask_block)
{
    if (mask_block <= 0)
        return n_keys;
    long end = ((long)pos / mask_block + 1) * mask_block;
    return end < n_keys ? (int)end : n_keys;
}

/* One layer for the n_new rows of each of n_seqs sequences: sequence b's
 * rows are positions [st->seq_pos0[b], + n_new) of cache slot
 * st->seq_slot[b] and attend to [0, st->seq_attend[b]), masked by
 * mask_block (visible_keys). */
static void layer_forward(tb_cpu_state *st, int l, int n_seqs, int n_new, int mask_block)
{
    const tb_model *m = st->m;
    const tb_model_config *c = &m->cfg;
    const tb_layer *L = &m->layers[l];
    int rows = n_seqs * n_new, h = c->hidden_size, hd = c->head_dim;
    int nq = c->n_heads * hd, kvd = kv_dim(c), qkvd = qkv_dim(c), inter = c->intermediate_size;
    int group = c->n_heads / c->n_kv_heads, rd = tb_config_rope_dim(c);
    size_t layer_off = (size_t)l * (size_t)st->max_seqs * (size_t)st->max_len * (size_t)kvd;

    /* attention block */
    tb_cpu_rmsnorm(st->xn, st->x, L->attn_norm, rows, h, c->rms_eps);
    fp8_act_round(st, st->xn, rows, h, h);
    matmul_t(st->qkv, st->xn, L->wqkv, rows, qkvd, h, 0);
    for (int r = 0; r < rows; r++) {
        float *q = st->qkv + (size_t)r * qkvd;
        int b = r / n_new, slot = st->seq_slot[b], pos = st->seq_pos0[b] + r % n_new;
        int rpos = pos >= st->pad[slot] ? pos - st->pad[slot] : 0; /* RoPE position */
        if (L->bqkv)
            for (int i = 0; i < qkvd; i++)
                q[i] += L->bqkv[i];
        if (L->q_norm) { /* Qwen3: RMSNorm of each q and k head, before RoPE */
            tb_cpu_rmsnorm(q, q, L->q_norm, c->n_heads, hd, c->rms_eps);
            tb_cpu_rmsnorm(q + nq, q + nq, L->k_norm, c->n_kv_heads, hd, c->rms_eps);
        }
        for (int hh = 0; hh < c->n_heads; hh++)
            tb_cpu_rope(q + hh * hd, rd, rpos, m->rope_inv_freq);
        for (int hh = 0; hh < c->n_kv_heads; hh++)
            tb_cpu_rope(q + nq + hh * hd, rd, rpos, m->rope_inv_freq);
        /* append k, v to this sequence's cache */
        size_t at = layer_off + ((size_t)slot * st->max_len + (size_t)pos) * kvd;
        memcpy(st->k_cache + at, q + nq, (size_t)kvd * sizeof(float));
        memcpy(st->v_cache + at, q + nq + kvd, (size_t)kvd * sizeof(float));
    }
    /* Attention per (sequence, head) as two GEMMs, so OpenBLAS's threads
     * do the work: S = Q K^T / sqrt(hd), masked and softmaxed per row, then
     * O = S V. Q rows are strided by the fused qkv width, K and V rows by
     * the cache's kv width; O lands in its head's columns of att. */
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < n_seqs; b++) {
        int slot = st->seq_slot[b], start = st->seq_pos0[b], n_keys = st->seq_attend[b], pad = st->pad[slot];
        const float *kb = st->k_cache + layer_off + (size_t)slot * st->max_len * kvd;
        const float *vb = st->v_cache + layer_off + (size_t)slot * st->max_len * kvd;
        for (int hh = 0; hh < c->n_heads; hh++) {
            int kvh = hh / group;
            const float *q = st->qkv + (size_t)b * n_new * qkvd + (size_t)hh * hd;
            float *s = st->scores; /* [n_new][n_keys] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_new, n_keys, hd, scale, q, qkvd,
                        kb + (size_t)kvh * hd, kvd, 0.0f, s, n_keys);
            for (int t = 0; t < n_new; t++) {
                float *row = s + (size_t)t * n_keys;
                int visible = visible_keys(start + t, n_keys, mask_block);
                /* keys [lo, visible): padding is masked for real rows (a
                 * padding row itself attends as usual; nothing reads it) */
                int lo = start + t >= pad ? pad : 0;
                float mx = -INFINITY, sum = 0;
                for (int j = lo; j < visible; j++)
                    mx = row[j] > mx ? row[j] : mx;
                for (int j = lo; j < visible; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = 1.0f / sum;
                for (int j = 0; j < lo; j++)
                    row[j] = 0.0f; /* masked: left padding */
                for (int j = lo; j < visible; j++)
                    row[j] *= inv;
                for (int j = visible; j < n_keys; j++)
                    row[j] = 0.0f; /* masked: the future of a causal row, later blocks */
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n_new, hd, n_keys, 1.0f, s, n_keys,
                        vb + (size_t)kvh * hd, kvd, 0.0f, st->att + (size_t)b * n_new * nq + (size_t)hh * hd, nq);
        }
    }
    fp8_act_round(st, st->att, rows, nq, nq);
    if (st->allreduce) { /* a rank's partial sum, completed over the ranks, then added */
        matmul_t(st->xn, st->att, L->wo, rows, h, nq, 0);
        st->allreduce(st->allreduce_ctx, st->xn, (size_t)rows * h);
        for (size_t i = 0; i < (size_t)rows * h; i++)
            st->x[i] += st->xn[i];
    } else {
        matmul_t(st->x, st->att, L->wo, rows, h, nq, 1); /* residual add */
    }

    /* MLP block: x += down(silu(gate(xn)) * up(xn)), or the experts' */
    tb_cpu_rmsnorm(st->xn, st->x, L->mlp_norm, rows, h, c->rms_eps);
    if (L->router) {
        tb_moe_weights w = {.router = L->router, .score_bias = L->score_bias, .gate_up = L->experts_gate_up,
                            .down = L->experts_down, .shared_gate_up = L->shared_gate_up,
                            .shared_down = L->shared_down};
        int touched = 0;
        tb_moe_forward(&st->moe_cfg, &w, &st->moe, st->xn, rows, st->moe_out, &touched); /* rows <= max_rows: checked */
        st->expert_reads += touched;
        st->moe_rows += rows;
        for (size_t i = 0; i < (size_t)rows * h; i++)
            st->x[i] += st->moe_out[i];
        return;
    }
    fp8_act_round(st, st->xn, rows, h, h);
    matmul_t(st->gu, st->xn, L->w_gate_up, rows, 2 * inter, h, 0);
    for (int r = 0; r < rows; r++) {
        float *g = st->gu + (size_t)r * 2 * inter, *u = g + inter;
        for (int i = 0; i < inter; i++)
            g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
    /* the activations sit in the first half of each gu row: lda = 2 inter */
    fp8_act_round(st, st->gu, rows, inter, 2 * inter);
    if (st->allreduce) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, h, inter, 1.0f, st->gu, 2 * inter, L->w_down,
                    inter, 0.0f, st->xn, h);
        st->allreduce(st->allreduce_ctx, st->xn, (size_t)rows * h);
        for (size_t i = 0; i < (size_t)rows * h; i++)
            st->x[i] += st->xn[i];
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, h, inter, 1.0f, st->gu, 2 * inter, L->w_down,
                inter, 1.0f, st->x, h);
}

static int check_fit(const tb_cpu_state *st, int n_seqs, int pos0, int n_new, int n_attend)
{
    if (n_seqs < 1 || n_new < 1 || pos0 < 0 || n_seqs > st->max_seqs || n_seqs * n_new > st->max_rows)
        return -1;
    return pos0 + n_new <= st->max_len && n_attend <= st->max_len && n_attend >= pos0 + n_new ? 0 : -1;
}

/* The layers for sequences laid out in st->seq_slot/seq_pos0/seq_attend
 * (checked against the state). */
static int forward_seqs_capture(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int n_new, int mask_block,
                                int n_layers, int capture)
{
    const tb_model_config *c = &st->m->cfg;
    for (int b = 0; b < n_seqs; b++)
        if (st->seq_slot[b] < 0 || st->seq_slot[b] >= st->max_seqs ||
            check_fit(st, 1, st->seq_pos0[b], n_new, st->seq_attend[b]) != 0)
            return -1;
    if (n_seqs < 1 || n_seqs > st->max_seqs || n_seqs * n_new > st->max_rows)
        return -1;
    int rows = n_seqs * n_new, h = c->hidden_size;
    for (int r = 0; r < rows; r++) {
        int32_t t = tokens[r];
        if (t < 0 || t >= c->vocab_size)
            return -1;
        memcpy(st->x + (size_t)r * h, st->m->embed + (size_t)t * h, (size_t)h * sizeof(float));
    }
    capture = capture && st->n_capture > 0;
    for (int l = 0; l < n_layers && l < c->n_layers; l++) {
        layer_forward(st, l, n_seqs, n_new, mask_block);
        for (int j = 0; capture && j < st->n_capture; j++)
            if (st->capture_layers[j] == l)
                for (int r = 0; r < rows; r++)
                    memcpy(st->capture + ((size_t)r * st->n_capture + j) * h, st->x + (size_t)r * h,
                           (size_t)h * sizeof(float));
    }
    if (capture)
        st->capture_rows = rows;
    return 0;
}

static int forward_seqs(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int n_new, int mask_block,
                        int n_layers)
{
    return forward_seqs_capture(st, tokens, n_seqs, n_new, mask_block, n_layers, 0);
}

/* Sequences 0 .. n_seqs - 1 in slots of the same index, all at pos0. */
static int forward_hidden(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int pos0, int n_new, int n_attend,
                          int causal, int n_layers)
{
    if (check_fit(st, n_seqs, pos0, n_new, n_attend) != 0)
        return -1;
    for (int b = 0; b < n_seqs; b++) {
        st->seq_slot[b] = b;
        st->seq_pos0[b] = pos0;
        st->seq_attend[b] = n_attend;
    }
    return forward_seqs(st, tokens, n_seqs, n_new, causal, n_layers);
}

int tb_cpu_forward_hidden(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int n_new, int causal,
                          int n_layers)
{
    int pos0 = st->seq_len[0];
    return forward_hidden(st, tokens, n_seqs, pos0, n_new, pos0 + n_new, causal, n_layers);
}

/* Logits a row: the vocabulary, or a tensor-parallel rank's slice of it */
static int logit_width(const tb_model *m)
{
    return m->lm_head_rows > 0 ? m->lm_head_rows : m->cfg.vocab_size;
}

/* Final norm and LM head over the rows computed last. */
static void head(tb_cpu_state *st, int n_seqs, int n_new, int all_logits, float *logits)
{
    const tb_model *m = st->m;
    const tb_model_config *c = &m->cfg;
    int h = c->hidden_size;
    if (all_logits) {
        int rows = n_seqs * n_new;
        tb_cpu_rmsnorm(st->xn, st->x, m->final_norm, rows, h, c->rms_eps);
        matmul_t(logits, st->xn, m->lm_head, rows, logit_width(m), h, 0);
    } else {
        /* only each sequence's last position: gather, norm, one GEMM */
        for (int b = 0; b < n_seqs; b++)
            memcpy(st->xn + (size_t)b * h, st->x + ((size_t)b * n_new + (size_t)n_new - 1) * h,
                   (size_t)h * sizeof(float));
        tb_cpu_rmsnorm(st->xn, st->xn, m->final_norm, n_seqs, h, c->rms_eps);
        matmul_t(logits, st->xn, m->lm_head, n_seqs, logit_width(m), h, 0);
    }
}

int tb_cpu_forward(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int n_new, int causal, int all_logits,
                   float *logits)
{
    int pos0 = st->seq_len[0];
    if (forward_hidden(st, tokens, n_seqs, pos0, n_new, pos0 + n_new, causal, st->m->cfg.n_layers) != 0)
        return -1;
    for (int b = 0; b < n_seqs; b++)
        st->seq_len[b] = pos0 + n_new;
    head(st, n_seqs, n_new, all_logits, logits);
    return 0;
}

int tb_cpu_forward_ragged(tb_cpu_state *st, const int32_t *tokens, const int *slots, int n_seqs, int n_new,
                          int mask_block, int grow, int all_logits, int capture, float *logits)
{
    if (n_seqs < 1 || n_seqs > st->max_seqs)
        return -1;
    for (int b = 0; b < n_seqs; b++) {
        if (slots[b] < 0 || slots[b] >= st->max_seqs)
            return -1;
        for (int a = 0; a < b; a++)
            if (slots[a] == slots[b])
                return -1; /* one sequence twice: its rows would race for one position */
        st->seq_slot[b] = slots[b];
        st->seq_pos0[b] = st->seq_len[slots[b]];
        st->seq_attend[b] = st->seq_len[slots[b]] + n_new;
    }
    /* mask_block 0 counts from each slot's own position 0, so the span
     * [len_b, len_b + n_new) is all visible to itself over n_attend */
    if (forward_seqs_capture(st, tokens, n_seqs, n_new, mask_block, st->m->cfg.n_layers, capture) != 0)
        return -1;
    for (int b = 0; grow && b < n_seqs; b++)
        st->seq_len[slots[b]] += n_new;
    if (logits)
        head(st, n_seqs, n_new, all_logits, logits);
    return 0;
}

int tb_cpu_forward_slots(tb_cpu_state *st, const int32_t *tokens, const int *slots, int n_seqs, int n_new,
                         float *logits)
{
    return tb_cpu_forward_ragged(st, tokens, slots, n_seqs, n_new, 1, 1, 0, 0, logits);
}

int tb_cpu_slot_truncate(tb_cpu_state *st, int slot, int len)
{
    if (slot < 0 || slot >= st->max_seqs || len < 0 || len > st->seq_len[slot])
        return -1;
    st->seq_len[slot] = len;
    return 0;
}

int tb_cpu_set_capture(tb_cpu_state *st, const int *layers, int n)
{
    free(st->capture_layers);
    free(st->capture);
    st->capture_layers = NULL;
    st->capture = NULL;
    st->n_capture = st->capture_rows = 0;
    if (n <= 0)
        return 0;
    for (int j = 0; j < n; j++)
        if (layers[j] < 0 || layers[j] >= st->m->cfg.n_layers)
            return -1;
    st->capture_layers = malloc((size_t)n * sizeof(int));
    st->capture = malloc((size_t)st->max_rows * (size_t)n * (size_t)st->m->cfg.hidden_size * sizeof(float) + 1);
    if (!st->capture_layers || !st->capture) {
        free(st->capture_layers);
        free(st->capture);
        st->capture_layers = NULL;
        st->capture = NULL;
        return -1;
    }
    memcpy(st->capture_layers, layers, (size_t)n * sizeof(int));
    st->n_capture = n;
    return 0;
}

void tb_cpu_slot_reset(tb_cpu_state *st, int slot)
{
    if (slot >= 0 && slot < st->max_seqs)
        st->seq_len[slot] = st->pad[slot] = 0;
}

int tb_cpu_forward_at(tb_cpu_state *st, const int32_t *tokens, int n_seqs, int pos0, int n_new, int n_attend,
                      float *logits)
{
    if (forward_hidden(st, tokens, n_seqs, pos0, n_new, n_attend, 0, st->m->cfg.n_layers) != 0)
        return -1;
    head(st, n_seqs, n_new, 1, logits);
    return 0;
}

int tb_cpu_forward_rows(tb_cpu_state *st, const int32_t *tokens, const int *slots, int n_seqs, int pos0, int n_new,
                        int n_attend, int mask_block, int head_row0, int head_rows, float *logits)
{
    if (n_seqs < 1 || n_seqs > st->max_seqs || head_row0 < 0 || head_rows < 0 || head_row0 + head_rows > n_new)
        return -1;
    for (int b = 0; b < n_seqs; b++) {
        if (slots[b] < 0 || slots[b] >= st->max_seqs)
            return -1;
        for (int a = 0; a < b; a++)
            if (slots[a] == slots[b])
                return -1; /* one sequence twice: its rows would race for one position */
        st->seq_slot[b] = slots[b];
        st->seq_pos0[b] = pos0;
        st->seq_attend[b] = n_attend;
    }
    if (forward_seqs(st, tokens, n_seqs, n_new, mask_block, st->m->cfg.n_layers) != 0)
        return -1;
    if (head_rows == 0)
        return 0;
    const tb_model *m = st->m;
    int h = m->cfg.hidden_size, rows = n_seqs * head_rows;
    for (int b = 0; b < n_seqs; b++) /* gather the head rows (in place: never ahead of the source) */
        memmove(st->xn + (size_t)b * head_rows * h, st->x + ((size_t)b * n_new + head_row0) * h,
                (size_t)head_rows * h * sizeof(float));
    tb_cpu_rmsnorm(st->xn, st->xn, m->final_norm, rows, h, m->cfg.rms_eps);
    matmul_t(logits, st->xn, m->lm_head, rows, logit_width(m), h, 0);
    return 0;
}
