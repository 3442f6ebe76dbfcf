// gpu_forward.cu — the forward pass on the device (gpu.h), in
// cpu_forward.c's order and names: the state (tb_gpu_reserve as
// tb_cpu_state_init, tb_gpu_set_padding, free_buffers as
// tb_cpu_state_free), matmul_t, matmul_p (a projection, bf16 or fp8) and
// the product its consumer reads, the attention of a span, layer_forward,
// head, forward_head (forward_hidden and the head); then the roofline's
// count of the work, and the entry points: autoregressive (tb_gpu_prefill, tb_gpu_decode: as
// tb_cpu_forward) and spans (tb_gpu_logits, tb_gpu_forward_pick,
// tb_gpu_forward_logits: as tb_cpu_forward_at), and speculative
// decoding's ragged spans over the slots (tb_gpu_verify_slots,
// tb_gpu_draft_slots: as tb_cpu_forward_ragged) with the rollback and the
// captured hidden states.
#include "gpu_internal.cuh"

#include <cuda_profiler_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace tbgpu;

extern "C" int tb_gpu_reserve(tb_gpu *g, int seqs, int len, int rows, char *err, size_t err_size)
{
    if (g->ranks) { // a tensor-parallel group (gpu_tp.cu)
        int rc = tp_reserve(g, seqs, len, rows);
        if (rc)
            snprintf(err, err_size, "%s", g->error);
        return rc;
    }
    if (seqs <= g->seqs && len <= g->len && rows <= g->rows)
        return 0;
    free_buffers(g);
    const tb_model_config *c = &g->cfg;
    size_t h = c->hidden_size, kvd = (size_t)c->n_kv_heads * c->head_dim, nq = (size_t)c->n_heads * c->head_dim;
    // gu / act also carry a MoE layer's shared experts (S wide)
    size_t R = rows, I = c->intermediate_size > g->moe.shared_inter ? c->intermediate_size : g->moe.shared_inter;
    size_t V = c->vocab_size;
    size_t per_seq_rows = (rows + seqs - 1) / seqs;
    size_t score = (size_t)seqs * c->n_heads * per_seq_rows * len;
    g->score_elems = score;
    int rc = dalloc(g, (void **)&g->kc, (size_t)c->n_layers * seqs * len * kvd * sizeof(bf16)) ||
             dalloc(g, (void **)&g->vc, (size_t)c->n_layers * seqs * len * kvd * sizeof(bf16)) ||
             dalloc(g, (void **)&g->x, R * h * sizeof(float)) || dalloc(g, (void **)&g->xn, R * h * sizeof(bf16)) ||
             dalloc(g, (void **)&g->qkv, R * qkv_dim(c) * sizeof(float)) ||
             dalloc(g, (void **)&g->q, R * nq * sizeof(bf16)) || dalloc(g, (void **)&g->att, R * nq * sizeof(bf16)) ||
             dalloc(g, (void **)&g->gu, R * 2 * I * sizeof(float)) ||
             dalloc(g, (void **)&g->act, R * I * sizeof(bf16)) ||
             dalloc(g, (void **)&g->logits, R * V * sizeof(float)) ||
             // the batched attention's scores: only where it runs (else made
             // on its first use, attn_span)
             (!g->span_fused && (dalloc(g, (void **)&g->scores, score * sizeof(float)) ||
                                 dalloc(g, (void **)&g->probs, score * sizeof(bf16)))) ||
             dalloc(g, (void **)&g->tok, R * sizeof(int32_t)) ||
             dalloc(g, (void **)&g->out_tok, R * sizeof(int32_t)) ||
             dalloc(g, (void **)&g->out_conf, R * sizeof(double)) || dalloc(g, (void **)&g->d_pos, sizeof(int)) ||
             dalloc(g, (void **)&g->d_pad, (size_t)seqs * sizeof(int)) ||
             dalloc(g, (void **)&g->d_rslot, (size_t)seqs * sizeof(int)) ||
             dalloc(g, (void **)&g->d_rpos, (size_t)seqs * sizeof(int)) ||
             dalloc(g, (void **)&g->att_part,
                    (size_t)seqs * c->n_heads * ATT_MAX_SPLIT * (c->head_dim + 2) * sizeof(float)) ||
             dalloc(g, (void **)&g->att_count, (size_t)seqs * c->n_heads * sizeof(unsigned)) ||
             dalloc(g, (void **)&g->pick_parts, R * PICK_MAX_CHUNKS * sizeof(pick_part)) ||
             moe_reserve(g, rows);
    if (rc == 0 && g->fp8 && rows > 1) { // a span's projection inputs as E4M3 (gpu_internal.cuh)
        size_t in = h > nq ? h : nq, S = g->moe.shared_inter;
        in = (size_t)c->intermediate_size > in ? (size_t)c->intermediate_size : in;
        in = S > in ? S : in; // the shared experts' down product
        // fp8_t: a small span's unscaled product, of any projection (the
        // forward sends only o and down this way, out = hidden; tests all;
        // the shared experts' products too; the routed experts' never:
        // gpu_moe.cu's expert_fp8 takes the deferred route)
        size_t out = qkv_dim(c) > 2 * c->intermediate_size ? qkv_dim(c) : 2 * (size_t)c->intermediate_size;
        out = h > out ? h : out;
        out = 2 * S > out ? 2 * S : out;
        g->fp8_t_floats = (R < FP8_SCALAR_ROWS ? R : FP8_SCALAR_ROWS) * out;
        rc = dalloc(g, (void **)&g->xq, R * in) || dalloc(g, (void **)&g->xs, R * sizeof(float)) ||
             (!g->fp8_gemm && dalloc(g, (void **)&g->xdq, R * in * sizeof(bf16))) ||
             (g->fp8_gemm && dalloc(g, (void **)&g->fp8_t, g->fp8_t_floats * sizeof(float)));
    }
    if (rc == 0 && g->head_rows != c->vocab_size) { // a rank's vocabulary slice (gpu_internal.cuh)
        size_t nv = (V + g->tp - 1) / g->tp;
        rc = dalloc(g, (void **)&g->logits_part, R * nv * sizeof(float)) ||
             dalloc(g, (void **)&g->gath, (size_t)g->tp * R * nv * sizeof(float));
    }
    // on our stream: the legacy default stream would not be ordered before
    // a padding upload on our non-blocking one
    if (rc == 0 && (cudaMemsetAsync(g->d_pad, 0, (size_t)seqs * sizeof(int), g->stream) != cudaSuccess ||
                    cudaMemsetAsync(g->att_count, 0, (size_t)seqs * c->n_heads * sizeof(unsigned), g->stream) !=
                        cudaSuccess ||
                    cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "cudaMemsetAsync failed");
    if (rc == 0) {
        /* 6 arrays per (sequence, head) per layer: filled for all layers at
         * once and copied asynchronously from pinned memory, so the host
         * never waits on the device inside a forward */
        g->ptr_cap = (size_t)6 * c->n_layers * seqs * c->n_heads;
        rc = dalloc(g, (void **)&g->ptrs, g->ptr_cap * sizeof(void *));
        if (rc == 0 && (cudaMallocHost((void **)&g->hptrs, g->ptr_cap * sizeof(void *)) != cudaSuccess ||
                        cudaMallocHost((void **)&g->h_tok, R * sizeof(int32_t)) != cudaSuccess ||
                        cudaMallocHost((void **)&g->h_conf, R * sizeof(double)) != cudaSuccess ||
                        cudaMallocHost((void **)&g->h_rows, 2 * (size_t)seqs * sizeof(int)) != cudaSuccess))
            rc = fail(g, "cannot allocate pinned host memory");
        if (rc == 0 && !(g->slot_len = (int *)calloc((size_t)seqs, sizeof(int))))
            rc = fail(g, "out of host memory");
    }
    if (rc != 0) {
        snprintf(err, err_size, "%s", g->error);
        free_buffers(g);
        return -1;
    }
    g->seqs = seqs, g->len = len, g->rows = rows;
    return 0;
}

extern "C" int tb_gpu_set_padding(tb_gpu *g, const int *pad, int n)
{
    if (g->ranks)
        return tp_set_padding(g, pad, n);
    if (n < 0 || n > g->seqs)
        return fail(g, "padding for %d sequences; %d reserved", n, g->seqs);
    int *h = (int *)calloc(g->seqs > 0 ? g->seqs : 1, sizeof(int));
    if (!h)
        return fail(g, "out of host memory");
    for (int i = 0; i < n && pad; i++)
        h[i] = pad[i] > 0 ? pad[i] : 0;
    // pageable source: returns once staged, so h may be freed; ordered
    // before every later kernel on the stream
    cudaError_t e = cudaMemcpyAsync(g->d_pad, h, (size_t)g->seqs * sizeof(int), cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->stream);
    free(h);
    return e == cudaSuccess ? 0 : fail(g, "padding upload: %s", cudaGetErrorString(e));
}

namespace tbgpu {

// Free the buffers tb_gpu_reserve made (the weights stay).
void free_buffers(tb_gpu *g)
{
    void *bufs[] = {g->kc, g->vc, g->x, g->xn, g->qkv, g->q, g->att, g->gu, g->act, g->logits, g->scores,
                    g->probs, g->tok, g->out_tok, g->out_conf, g->d_pos, g->d_pad, g->d_rslot, g->d_rpos, g->ptrs, g->att_part, g->att_count, g->pick_parts, g->logits_part, g->gath, g->xq, g->xs, g->xdq, g->fp8_t, g->capture};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dfree(g, bufs[i]);
    moe_free(g);
    if (g->h_tok)
        cudaFreeHost(g->h_tok);
    if (g->h_conf)
        cudaFreeHost(g->h_conf);
    if (g->hptrs)
        cudaFreeHost(g->hptrs);
    if (g->h_rows)
        cudaFreeHost(g->h_rows);
    free(g->slot_len);
    if (g->graph)
        cudaGraphExecDestroy(g->graph);
    for (int b = 0; g->graph_slots && b <= g->seqs; b++)
        if (g->graph_slots[b])
            cudaGraphExecDestroy(g->graph_slots[b]);
    free(g->graph_slots);
    g->kc = g->vc = NULL;
    g->x = NULL;
    g->xn = g->q = g->att = g->act = g->probs = NULL;
    g->qkv = g->gu = g->logits = g->scores = NULL;
    g->tok = g->out_tok = NULL;
    g->out_conf = NULL;
    g->d_pos = NULL;
    g->d_pad = NULL;
    g->d_rslot = g->d_rpos = NULL;
    g->h_rows = NULL;
    g->slot_len = NULL;
    g->graph_slots = NULL;
    g->ptrs = NULL;
    g->hptrs = NULL;
    g->att_part = NULL;
    g->att_count = NULL;
    g->pick_parts = NULL;
    g->logits_part = g->gath = NULL;
    g->xq = NULL;
    g->xs = NULL;
    g->xdq = NULL;
    g->fp8_t = NULL;
    g->fp8_t_floats = 0;
    g->capture = NULL;
    g->capture_cap = g->capture_rows = 0;
    g->h_tok = NULL;
    g->h_conf = NULL;
    g->graph = NULL;
    g->graph_B = 0;
    g->seqs = g->len = g->rows = 0;
}

} // namespace tbgpu

// k_rmsnorm's threads a row: one row (decode) spreads over 1024; many
// rows fill the chip with 256 each (one wave of blocks, float4 loads)
static unsigned norm_threads(int rows) { return rows > 1 ? 256 : 1024; }

// y[rows][out] (+)= x[rows][in] W[out][in]^T; y float32, x and W bf16 (as
// cpu_forward.c's matmul_t: our GEMV at batch 1, else gpu_gemm.cu's
// product: cublasGemmEx, or cuBLASLt with the algorithm timed per shape
// when TB_GPU_GEMM_TUNE=1).
static int matmul_t(tb_gpu *g, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in, float beta)
{
    if (rows == 1 && in % 8 == 0) {
        gemv(g, w, x, y, out, in, beta, gemv_variant_for(g, out, in));
        LAUNCHED();
        return 0;
    }
    return gemm_bf16(g, y, x, w, rows, out, in, beta);
}

// A projection: bf16 W, or under dtype = fp8 its E4M3 codes q and row
// scales s (w NULL).
struct proj {
    const bf16 *w;
    const uint8_t *q;
    const float *s;
};

// A layer's four projections, in tb_gpu_fp8_product's order (its `which`)
enum { PROJ_QKV, PROJ_O, PROJ_GU, PROJ_DOWN };

static proj layer_proj(const gpu_layer *G, int which)
{
    switch (which) {
    case PROJ_QKV:
        return {G->wqkv, G->qqkv, G->sqkv};
    case PROJ_O:
        return {G->wo, G->qo, G->so};
    case PROJ_GU:
        return {G->wgu, G->qgu, G->sgu};
    default:
        return {G->wdown, G->qdown, G->sdown};
    }
}

// matmul_t over a projection. FP8 (fp8.h: E4M3 weights and inputs, both
// scaled per row): at batch 1 our FP8 GEMV, which quantizes x itself; a
// larger span quantizes its input rows (xq, xs), then the FP8 GEMM, or
// without one both sides dequantized to bf16 for the bf16 GEMM. Given
// dsx/dsw, the FP8 GEMM may leave the scales to the caller's next kernel
// (gpu_gemm_fp8.cu): then *dsx, *dsw are the row and column scales and y
// holds the bare products; else both NULL.
static int matmul_p(tb_gpu *g, float *y, const bf16 *x, proj p, int rows, int out, int in, float beta,
                    const float **dsx = NULL, const float **dsw = NULL)
{
    if (dsx)
        *dsx = *dsw = NULL;
    if (!p.q)
        return matmul_t(g, y, x, p.w, rows, out, in, beta);
    if (rows == 1) {
        gemv_fp8(g, p.q, p.s, x, y, out, in, beta);
        LAUNCHED();
        return 0;
    }
    k_fp8_quant_act<<<rows, FP8_QUANT_THREADS, 0, g->stream>>>(x, in, g->xq, g->xs);
    LAUNCHED();
    if (g->fp8_gemm) {
        int deferred = 0;
        if (gemm_fp8(g, y, g->xq, g->xs, p.q, p.s, rows, out, in, beta, dsx ? &deferred : NULL))
            return -1;
        if (deferred)
            *dsx = g->xs, *dsw = p.s;
        return 0;
    }
    size_t n = (size_t)out * in, nx = (size_t)rows * in;
    k_fp8_dequant<<<blocks_for(nx / 16), 256, 0, g->stream>>>(g->xq, g->xs, in, nx, g->xdq);
    LAUNCHED();
    k_fp8_dequant<<<blocks_for(n / 16), 256, 0, g->stream>>>(p.q, p.s, in, n, g->wdq);
    LAUNCHED();
    return matmul_t(g, y, g->xdq, g->wdq, rows, out, in, beta);
}

// A product as the kernel that consumes it reads it (QKV: k_qkv_post;
// gate-up: k_swiglu), so that the layer loop reads the same for every
// dtype: y [rows][out], float or (rounded) bf16, and the row and column
// scales sx [rows], sw [out] that dtype = fp8's GEMM left to the consumer
// (y then holds the bare products; both NULL where y is complete).
struct product {
    void *y;
    int rounded;
    const float *sx, *sw;
};

// y = x W^T for a consumer that takes a product (buffer y: rows x out
// floats). Above one row (not `one`, the layer's one_row) the bf16 path's
// GEMM rounds it to bf16 where g->span_bf16_out (the consumers read it as
// bf16; the device holds every activation so); else matmul_p, which under
// dtype = fp8 may defer the scales to the consumer.
static int consumed_product(tb_gpu *g, product *r, float *y, const bf16 *x, proj p, int rows, int out, int in, int one)
{
    r->y = y, r->rounded = 0, r->sx = r->sw = NULL;
    if (!one && !g->fp8 && g->span_bf16_out) {
        r->rounded = 1;
        return gemm_bf16_out(g, (bf16 *)y, x, p.w, rows, out, in);
    }
    return matmul_p(g, y, x, p, rows, out, in, 0.0f, &r->sx, &r->sw);
}

// k_swiglu over a gate-up product (n = rows x inter): the bf16 one, or
// the float one with its deferred scales
static void swiglu_product(tb_gpu *g, const product &gu, bf16 *act, int inter, size_t n)
{
    if (gu.rounded)
        swiglu_act(g, (const bf16 *)gu.y, act, inter, n);
    else
        swiglu_act(g, (const float *)gu.y, act, inter, n, gu.sx, gu.sw);
}

// Tests (gpu.h): one FP8 projection as the forward runs it, on host data.
extern "C" int tb_gpu_fp8_product(tb_gpu *g, int l, int which, const float *x, int rows, float *y, int accumulate,
                                  int deferred)
{
    const tb_model_config *c = &g->cfg;
    if (!g->fp8 || l < 0 || l >= c->n_layers || which < 0 || which > 3 || rows < 1 || rows > g->rows)
        return fail(g, "tb_gpu_fp8_product: projection %d of layer %d over %d rows (%d reserved)", which, l, rows,
                    g->rows);
    int h = c->hidden_size, I = c->intermediate_size, nq = c->n_heads * c->head_dim;
    const gpu_layer *G = &g->layers[l];
    if (!layer_proj(G, which).q) // a MoE layer's feed-forward: its experts are not one projection
        return fail(g, "tb_gpu_fp8_product: layer %d has no dense projection %d", l, which);
    int outs[4] = {qkv_dim(c), h, 2 * I, h}, ins[4] = {h, nq, h, I};
    int out = outs[which], in = ins[which];
    size_t nx = (size_t)rows * in, ny = (size_t)rows * out;
    bf16 *hx = (bf16 *)malloc(nx * sizeof(bf16)), *dx = NULL;
    float *dy = NULL;
    if (!hx)
        return fail(g, "out of host memory");
    for (size_t i = 0; i < nx; i++)
        hx[i] = __float2bfloat16(x[i]);
    int rc = dalloc(g, (void **)&dx, nx * sizeof(bf16)) || dalloc(g, (void **)&dy, ny * sizeof(float));
    if (rc == 0 && (cudaMemcpyAsync(dx, hx, nx * sizeof(bf16), cudaMemcpyHostToDevice, g->stream) != cudaSuccess ||
                    cudaMemcpyAsync(dy, y, ny * sizeof(float), cudaMemcpyHostToDevice, g->stream) != cudaSuccess))
        rc = fail(g, "tb_gpu_fp8_product: upload failed");
    const float *sx = NULL, *sw = NULL;
    if (rc == 0)
        rc = matmul_p(g, dy, dx, layer_proj(G, which), rows, out, in, accumulate ? 1.0f : 0.0f,
                      deferred ? &sx : NULL, deferred ? &sw : NULL);
    if (rc == 0 && sw) { // the consumer's part, here as a kernel of its own
        k_fp8_scale_out<<<blocks_for(ny), 256, 0, g->stream>>>(dy, sx, sw, dy, rows, out, 0.0f);
        if (cudaGetLastError() != cudaSuccess)
            rc = fail(g, "tb_gpu_fp8_product: scaling failed");
    }
    if (rc == 0 && (cudaMemcpyAsync(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost, g->stream) != cudaSuccess ||
                    cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "tb_gpu_fp8_product: download failed");
    cudaStreamSynchronize(g->stream);
    dfree(g, dx);
    dfree(g, dy);
    free(hx);
    return rc ? -1 : 0;
}

// Tests (gpu.h): one bf16 product as the forward runs it (matmul_t), on
// host data.
extern "C" int tb_gpu_product(tb_gpu *g, const float *w, const float *x, int rows, int out, int in, float *y,
                              int accumulate)
{
    if (g->ranks || rows < 1 || out < 1 || in < 1)
        return fail(g, "tb_gpu_product: %d x %d over %d rows%s", out, in, rows, g->ranks ? " on a tensor-parallel group" : "");
    size_t nw = (size_t)out * in, nx = (size_t)rows * in, ny = (size_t)rows * out;
    bf16 *hw = (bf16 *)malloc((nw + nx) * sizeof(bf16)), *dw = NULL;
    float *dy = NULL;
    if (!hw)
        return fail(g, "out of host memory");
    for (size_t i = 0; i < nw; i++)
        hw[i] = __float2bfloat16(w[i]);
    for (size_t i = 0; i < nx; i++)
        hw[nw + i] = __float2bfloat16(x[i]);
    int rc = dalloc(g, (void **)&dw, (nw + nx) * sizeof(bf16)) || dalloc(g, (void **)&dy, ny * sizeof(float));
    if (rc == 0 && (cudaMemcpyAsync(dw, hw, (nw + nx) * sizeof(bf16), cudaMemcpyHostToDevice, g->stream) != cudaSuccess ||
                    cudaMemcpyAsync(dy, y, ny * sizeof(float), cudaMemcpyHostToDevice, g->stream) != cudaSuccess))
        rc = fail(g, "tb_gpu_product: upload failed");
    if (rc == 0)
        rc = matmul_t(g, dy, dw + nw, dw, rows, out, in, accumulate ? 1.0f : 0.0f);
    if (rc == 0 && (cudaMemcpyAsync(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost, g->stream) != cudaSuccess ||
                    cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "tb_gpu_product: download failed");
    cudaStreamSynchronize(g->stream);
    dfree(g, dw);
    dfree(g, dy);
    free(hw);
    return rc ? -1 : 0;
}

// Attention of a span: S = Q K^T / sqrt(hd), softmax, O = P V, for every
// (sequence, head); in one kernel where it fits (g->span_fused), else with
// batched GEMMs around softmax_span.
static int attn_span_ragged(tb_gpu *g, int l, int B, int n, int causal);
static int attn_span(tb_gpu *g, int l, int B, int slot0, int pos0, int n, int n_attend, int causal)
{
    if (g->span_fused && B <= 65535) // one kernel, no scores in memory (gpu_attn_span.cu; B: its grid's z)
        return attn_span_fused(g, l, B, slot0, pos0, n, n_attend, causal);
    if ((!g->scores && dalloc(g, (void **)&g->scores, g->score_elems * sizeof(float))) ||
        (!g->probs && dalloc(g, (void **)&g->probs, g->score_elems * sizeof(bf16))))
        return -1;
    if (g->span_pos)
        return attn_span_ragged(g, l, B, n, causal);
    const tb_model_config *c = &g->cfg;
    int nh = c->n_heads, hd = c->head_dim, kvd = c->n_kv_heads * hd, nq = nh * hd, group = nh / c->n_kv_heads;
    int batch = B * nh;
    size_t layer_off = (size_t)l * g->seqs * g->len * kvd;
    void **hp = g->hptrs + (size_t)6 * batch * l;
    void **dp = g->ptrs + (size_t)6 * batch * l;
    const void **A1 = (const void **)hp, **B1 = (const void **)hp + batch;
    void **C1 = hp + 2 * batch;
    const void **A2 = (const void **)hp + 3 * batch, **B2 = (const void **)hp + 4 * batch;
    void **C2 = hp + 5 * batch;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            int i = b * nh + h, kvh = h / group;
            size_t seq = g->span_slots ? (size_t)g->span_slots[b] : (size_t)(slot0 + b);
            const bf16 *kb = g->kc + layer_off + seq * g->len * kvd + kvh * hd;
            const bf16 *vb = g->vc + layer_off + seq * g->len * kvd + kvh * hd;
            A1[i] = kb;
            B1[i] = g->q + (size_t)b * n * nq + h * hd;
            C1[i] = g->scores + (size_t)i * n * n_attend;
            A2[i] = vb;
            B2[i] = g->probs + (size_t)i * n * n_attend;
            C2[i] = g->att + (size_t)b * n * nq + h * hd;
        }
    CK(cudaMemcpyAsync(dp, hp, (size_t)6 * batch * sizeof(void *), cudaMemcpyHostToDevice, g->stream));
    float alpha = 1.0f / sqrtf((float)hd), zero = 0.0f, one = 1.0f;
    // S[n][n_attend] = Q[n][hd] K[n_attend][hd]^T (column-major: K^T Q)
    CB(cublasGemmBatchedEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, n_attend, n, hd, &alpha, (const void **)dp,
                           CUDA_R_16BF, kvd, (const void **)(dp + batch), CUDA_R_16BF, nq, &zero, dp + 2 * batch,
                           CUDA_R_32F, n_attend, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    softmax_span(g, g->scores, g->probs, (size_t)batch * n, n, n_attend, pos0, causal,
                 g->span_slots ? g->d_pad : g->d_pad + slot0, g->span_slots ? g->d_rslot : NULL, nh);
    LAUNCHED();
    // O[n][hd] = P[n][n_attend] V[n_attend][hd]
    CB(cublasGemmBatchedEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, n, n_attend, &one,
                           (const void **)(dp + 3 * batch), CUDA_R_16BF, kvd, (const void **)(dp + 4 * batch),
                           CUDA_R_16BF, n_attend, &zero, dp + 5 * batch,
                           CUDA_R_16BF, nq, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

// attn_span's batched GEMMs for a ragged span (g->span_pos: sequence b at
// its own position, keys [0, span_pos[b] + n)), where the one-kernel path
// does not run: a sequence at a time, its heads batched, so no key past a
// sequence's own is read (the cache there is stale or never written).
// Pointer arrays in layer l's region of the staging, sequence b's part.
static int attn_span_ragged(tb_gpu *g, int l, int B, int n, int causal)
{
    const tb_model_config *c = &g->cfg;
    int nh = c->n_heads, hd = c->head_dim, kvd = c->n_kv_heads * hd, nq = nh * hd, group = nh / c->n_kv_heads;
    size_t layer_off = (size_t)l * g->seqs * g->len * kvd;
    float alpha = 1.0f / sqrtf((float)hd), zero = 0.0f, one = 1.0f;
    for (int b = 0; b < B; b++) {
        int pos0 = g->span_pos[b], n_attend = pos0 + n;
        size_t seq = (size_t)g->span_slots[b];
        void **hp = g->hptrs + (size_t)6 * nh * ((size_t)l * B + b);
        void **dp = g->ptrs + (size_t)6 * nh * ((size_t)l * B + b);
        for (int h = 0; h < nh; h++) {
            int kvh = h / group;
            const bf16 *kb = g->kc + layer_off + seq * g->len * kvd + kvh * hd;
            const bf16 *vb = g->vc + layer_off + seq * g->len * kvd + kvh * hd;
            hp[h] = (void *)kb;
            hp[nh + h] = g->q + (size_t)b * n * nq + h * hd;
            hp[2 * nh + h] = g->scores + (size_t)h * n * n_attend;
            hp[3 * nh + h] = (void *)vb;
            hp[4 * nh + h] = g->probs + (size_t)h * n * n_attend;
            hp[5 * nh + h] = g->att + (size_t)b * n * nq + h * hd;
        }
        CK(cudaMemcpyAsync(dp, hp, (size_t)6 * nh * sizeof(void *), cudaMemcpyHostToDevice, g->stream));
        CB(cublasGemmBatchedEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, n_attend, n, hd, &alpha, (const void **)dp,
                               CUDA_R_16BF, kvd, (const void **)(dp + nh), CUDA_R_16BF, nq, &zero, dp + 2 * nh,
                               CUDA_R_32F, n_attend, nh, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        // one sequence: its slot is d_rslot[b] (the kernel's sequence 0)
        softmax_span(g, g->scores, g->probs, (size_t)nh * n, n, n_attend, pos0, causal, g->d_pad, g->d_rslot + b, nh);
        LAUNCHED();
        CB(cublasGemmBatchedEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, n, n_attend, &one,
                               (const void **)(dp + 3 * nh), CUDA_R_16BF, kvd, (const void **)(dp + 4 * nh),
                               CUDA_R_16BF, n_attend, &zero, dp + 5 * nh, CUDA_R_16BF, nq, nh, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

// Tests (gpu.h): attn_span alone on host data.
// Tests' attention hooks: q [B][n][n_heads][hd] into g->q and k, v
// [B][n_attend][n_kv_heads][hd] into layer 0's cache slots 0 .. B - 1
// (positions 0 .. n_attend - 1), all rounded to bf16; *hq: a host buffer
// of q's size (the caller reads the output back into it, then frees it).
static int upload_attention(tb_gpu *g, const float *q, const float *k, const float *v, int B, int n, int n_attend,
                            bf16 **hq_out)
{
    const tb_model_config *c = &g->cfg;
    int kvd = c->n_kv_heads * c->head_dim;
    size_t nqv = (size_t)B * n * c->n_heads * c->head_dim, nkv = (size_t)B * n_attend * kvd;
    bf16 *hq = (bf16 *)malloc(nqv * sizeof(bf16)), *hk = (bf16 *)malloc(nkv * sizeof(bf16)),
         *hv = (bf16 *)malloc(nkv * sizeof(bf16));
    int rc = hq && hk && hv ? 0 : fail(g, "out of host memory");
    for (size_t i = 0; rc == 0 && i < nqv; i++)
        hq[i] = __float2bfloat16(q[i]);
    for (size_t i = 0; rc == 0 && i < nkv; i++)
        hk[i] = __float2bfloat16(k[i]), hv[i] = __float2bfloat16(v[i]);
    for (int b = 0; rc == 0 && b < B; b++) {
        size_t at = (size_t)b * g->len * kvd, from = (size_t)b * n_attend * kvd, bytes = (size_t)n_attend * kvd * 2;
        if (cudaMemcpyAsync(g->kc + at, hk + from, bytes, cudaMemcpyHostToDevice, g->stream) != cudaSuccess ||
            cudaMemcpyAsync(g->vc + at, hv + from, bytes, cudaMemcpyHostToDevice, g->stream) != cudaSuccess)
            rc = fail(g, "attention test: upload failed");
    }
    if (rc == 0 && cudaMemcpyAsync(g->q, hq, nqv * sizeof(bf16), cudaMemcpyHostToDevice, g->stream) != cudaSuccess)
        rc = fail(g, "attention test: upload failed");
    if (rc == 0 && cudaStreamSynchronize(g->stream) != cudaSuccess) // hk, hv are freed below
        rc = fail(g, "attention test: upload failed");
    free(hk), free(hv);
    if (rc != 0) {
        free(hq);
        hq = NULL;
    }
    *hq_out = hq;
    return rc;
}

extern "C" int tb_gpu_span_attention(tb_gpu *g, const float *q, const float *k, const float *v, int B, int pos0, int n,
                                     int n_attend, int causal, int fused, float *out)
{
    const tb_model_config *c = &g->cfg;
    int hd = c->head_dim, nq = c->n_heads * hd;
    if (g->ranks || B < 1 || B > g->seqs || n < 1 || (size_t)B * n > (size_t)g->rows || n_attend < 1 ||
        n_attend > g->len || pos0 < 0 || pos0 + n > n_attend)
        return fail(g, "tb_gpu_span_attention: %d x %d rows at %d over %d keys do not fit (%d x %d reserved)", B, n,
                    pos0, n_attend, g->seqs, g->len);
    if (fused && !attn_span_fused_fits(g))
        return fail(g, "tb_gpu_span_attention: no one-kernel path for head_dim %d", hd);
    size_t nqv = (size_t)B * n * nq;
    bf16 *hq = NULL;
    int rc = upload_attention(g, q, k, v, B, n, n_attend, &hq);
    int was = g->span_fused;
    const int *slots = g->span_slots;
    g->span_fused = fused, g->span_slots = NULL;
    if (rc == 0)
        rc = attn_span(g, 0, B, 0, pos0, n, n_attend, causal);
    g->span_fused = was, g->span_slots = slots;
    if (rc == 0 && (cudaMemcpyAsync(hq, g->att, nqv * sizeof(bf16), cudaMemcpyDeviceToHost, g->stream) != cudaSuccess ||
                    cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "tb_gpu_span_attention: %s", cudaGetErrorString(cudaGetLastError()));
    for (size_t i = 0; rc == 0 && i < nqv; i++)
        out[i] = __bfloat162float(hq[i]);
    free(hq);
    return rc ? -1 : 0;
}

// How a forward finds its rows' positions and cache sequences.
enum fwd_mode {
    FWD_SPAN,   // sequences slot0 + b, positions [pos0, pos0 + n)
    FWD_DECODE, // one row per sequence b, at the shared position *d_pos
    FWD_SLOTS   // one row per sequence b: slot d_rslot[b] at d_rpos[b]
};

// A one-row forward (batch-1 decode) takes our GEMVs, with the fusions
// g->fusion asks for (gpu.h, TB_GPU_FUSE_*): the bf16 GEMV, or under
// dtype = fp8 the FP8 GEMV (whose widths, multiples of 16, the model's
// load checked: tb_config_check_fp8).
static int one_row(const tb_gpu *g, int rows)
{
    const tb_model_config *c = &g->cfg;
    return rows == 1 && c->hidden_size % 8 == 0 && (c->n_heads * c->head_dim) % 8 == 0 &&
           c->intermediate_size % 8 == 0;
}

// TB_GPU_FUSE_NORM in a one-row forward: each GEMV that writes the
// residual (o, down) leaves the next RMSNorm in xn (k_gemv's NORM_OUT),
// so only layer 0's norm is a kernel of its own, and head() finds the
// final norm done. Not under tensor parallelism (x is whole only after
// the all-reduce) nor with MoE layers (their FFN is not our GEMV).
static int norm_in_gemv(const tb_gpu *g, int rows)
{
    return one_row(g, rows) && (g->fusion & TB_GPU_FUSE_NORM) && !g->comm && g->n_moe_layers == 0;
}

// Decode attention of a layer's cache (at layer_off) for one row per
// sequence (mode FWD_DECODE or FWD_SLOTS), by `kernel` (ATTN_*; -1: as
// the forward chooses: from batch 2 by query group, one block per
// (sequence, G heads of one K/V head: attn_decode_heads_a_block, a group
// of 8 as two blocks of 4), where this model's head_dim and group have
// that kernel, unless g->att_splits asks for a split; else split over the
// keys when (sequence, head) blocks alone would leave most of the chip
// idle, by query group where that kernel exists and g->fusion has
// TB_GPU_FUSE_GROUP_ATTN, else per head, unless g->fusion says no split
// (g->att_splits, when set, is the number of splits)).
//
// Measured on the H200, Llama-3-8B (docs/PERFORMANCE.md): the group
// kernel against the split per head, a step at about 256 positions 4%
// faster at batch 2, 7% at 3, 9% at 4, 18% at 8, 28% at 16; after a
// 4,000-token prompt 18% at batch 2 and 66% at 4 (the split kernel reads
// each K/V row once per query head, the group kernel once per group). At
// batch 1 the split per head took 13.2 us a layer at 128-384 positions on
// the H100 (TB_GPU_KERNEL_PROFILE, 2026-12-07): each of its blocks waits
// on the cache four times in turn (scores, their maximum, values, the
// combine); the group kernel split the same way reads its part of the
// keys and values in one round.
enum { ATTN_HEAD, ATTN_HEAD_SPLIT, ATTN_GROUP, ATTN_GROUP_SPLIT };
// G query heads a block of the group kernels (a group of 8: two blocks of 4; 0: none)
static int attn_group_heads(const tb_model_config *c)
{
    return c->n_heads % c->n_kv_heads == 0 ? attn_decode_heads_a_block(c->n_heads / c->n_kv_heads) : 0;
}
// The kernel attn_decode runs for B rows (`kernel` >= 0: that one), and
// its splits of the keys (1: none)
static int attn_decode_kind(const tb_gpu *g, int B, int kernel, int *splits_out)
{
    const tb_model_config *c = &g->cfg;
    int G = attn_group_heads(c);
    bool gqa = G && attn_decode_gqa_kernel(G, c->head_dim, false);
    bool gqa_split = G && attn_decode_gqa_kernel(G, c->head_dim, true);
    // enough blocks for 4 a SM (at batch 1, 16 splits of Llama-3-8B's 32
    // heads measured 3% faster than 9); the group split as many parts
    int splits = (4 * g->prop.multiProcessorCount + B * c->n_heads - 1) / (B * c->n_heads);
    splits = splits > ATT_MAX_SPLIT ? ATT_MAX_SPLIT : splits < 2 ? 0 : splits;
    if (g->att_splits > 0)
        splits = g->att_splits;
    if (kernel < 0 && gqa && g->att_splits == 0 && B >= 2)
        kernel = ATTN_GROUP;
    else if (kernel < 0)
        kernel = (g->fusion & TB_GPU_FUSE_SPLIT_ATTN) && splits >= 1
                     ? ((g->fusion & TB_GPU_FUSE_GROUP_ATTN) && gqa_split ? ATTN_GROUP_SPLIT : ATTN_HEAD_SPLIT)
                 : gqa ? ATTN_GROUP
                       : ATTN_HEAD;
    *splits_out = splits < 1 ? 1 : splits;
    return kernel;
}

// TB_GPU_FUSE_ATTN_POST: whether a forward of `rows` rows in `mode` has
// its decode attention do k_qkv_post's work (batch 1, where the split
// kernel by query group runs and has a POST build for this head_dim; not
// under tensor parallelism, whose ranks' runs no test covers)
static int attn_takes_post(const tb_gpu *g, int rows, int mode)
{
    const tb_model_config *c = &g->cfg;
    int splits, G = attn_group_heads(c);
    return one_row(g, rows) && mode != FWD_SPAN && (g->fusion & TB_GPU_FUSE_ATTN_POST) && !g->comm && G &&
           attn_decode_gqa_post_kernel(G, c->head_dim) && tb_config_rope_dim(c) <= c->head_dim &&
           attn_decode_kind(g, 1, -1, &splits) == ATTN_GROUP_SPLIT;
}

// pa (NULL: none): k_qkv_post's work, done by the split group kernel
// (attn_takes_post said so)
static int attn_decode(tb_gpu *g, size_t layer_off, int B, int mode, const int *rslot, const int *rpos, int pdl,
                       int kernel, const qkv_post_args *pa)
{
    const tb_model_config *c = &g->cfg;
    const int *dpos = mode == FWD_DECODE ? g->d_pos : NULL;
    float scale = 1.0f / sqrtf((float)c->head_dim);
    int G = attn_group_heads(c);
    attn_gqa_kernel gqa = G ? attn_decode_gqa_kernel(G, c->head_dim, false) : NULL;
    attn_gqa_kernel gqa_split = G ? attn_decode_gqa_kernel(G, c->head_dim, true) : NULL;
    int splits;
    kernel = attn_decode_kind(g, B, kernel, &splits);
    if (pa) {
        attn_gqa_post_kernel k = kernel == ATTN_GROUP_SPLIT ? attn_decode_gqa_post_kernel(G, c->head_dim) : NULL;
        if (!k)
            return fail(g, "decode attention: no kernel that applies the QKV epilogue here");
        launch(g, k, dim3(B, c->n_heads / G, splits), dim3(ATTG_WARPS * 32), 0, pdl, (const bf16 *)g->q,
               (const bf16 *)(g->kc + layer_off), (const bf16 *)(g->vc + layer_off), g->att, g->len, c->n_heads,
               c->n_kv_heads, dpos, rslot, rpos, (const int *)g->d_pad, scale, g->att_part, g->att_count, *pa);
        LAUNCHED();
        return 0;
    }
    if (kernel == ATTN_HEAD_SPLIT) {
        dim3 grid(B, c->n_heads, splits);
        size_t smem = ((g->len + splits - 1) / splits + ATT_SPLIT_WARPS * c->head_dim) * sizeof(float);
        launch(g, k_attn_decode_split, grid, dim3(ATT_SPLIT_WARPS * 32), smem, pdl, (const bf16 *)g->q,
               (const bf16 *)(g->kc + layer_off), (const bf16 *)(g->vc + layer_off), g->att, g->len, c->n_heads,
               c->n_kv_heads, c->head_dim, dpos, rslot, rpos, (const int *)g->d_pad, scale, g->att_part,
               g->att_count);
    } else if (kernel == ATTN_GROUP || kernel == ATTN_GROUP_SPLIT) {
        attn_gqa_kernel k = kernel == ATTN_GROUP ? gqa : gqa_split;
        if (!k)
            return fail(g, "decode attention: no group kernel for %d heads over %d, head_dim %d", c->n_heads,
                        c->n_kv_heads, c->head_dim);
        launch(g, k, dim3(B, c->n_heads / G, kernel == ATTN_GROUP ? 1 : splits), dim3(ATTG_WARPS * 32), 0, pdl,
               (const bf16 *)g->q, (const bf16 *)(g->kc + layer_off), (const bf16 *)(g->vc + layer_off), g->att,
               g->len, c->n_heads, c->n_kv_heads, dpos, rslot, rpos, (const int *)g->d_pad, scale, g->att_part,
               g->att_count);
    } else {
        dim3 grid(B, c->n_heads);
        k_attn_decode<<<grid, ATT_WARPS * 32, (g->len + ATT_WARPS * c->head_dim) * sizeof(float), g->stream>>>(
            g->q, g->kc + layer_off, g->vc + layer_off, g->att, g->len, c->n_heads, c->n_kv_heads, c->head_dim, dpos,
            0, rslot, rpos, g->d_pad, scale);
    }
    LAUNCHED();
    return 0;
}

// k_rmsnorm of every row of x into xn with weights w; pdl: a
// programmatic dependent launch
static int norm_rows(tb_gpu *g, int rows, const float *w, int pdl)
{
    launch(g, k_rmsnorm, dim3(rows), dim3(norm_threads(rows)), 0, pdl, (const float *)g->x, 1, 0, 1, w, g->xn,
           g->cfg.hidden_size, (float)g->cfg.rms_eps);
    LAUNCHED();
    return 0;
}

// The rows of each sequence the last layer carries past its QKV product
// in a forward whose LM head reads rows [r0, r0 + nr) of each sequence's
// n: those nr (0 for a forward that only stores the cache) for a span with
// g->trim_last, else all n. Every row's K and V still enter the cache;
// nothing after the last layer's attention reads another row, so the
// head's rows come out as without it (to cuBLAS's rounding for their
// row count). forward_head and account share it.
// (The logits buffer is the residual's scratch there: vocab >= hidden.)
static int last_layer_rows(const tb_gpu *g, int mode, int n, int nr)
{
    return g->trim_last && mode == FWD_SPAN && nr < n && g->cfg.vocab_size >= g->cfg.hidden_size ? nr : n;
}

// rows [r0, r0 + nr) of each of B sequences of n rows of row_bytes each
// at p, moved to the front ([B][nr], in order) through scratch (at least
// B nr row_bytes, not overlapping p): one strided copy, or one copy a
// sequence where a sequence is longer than a copy's pitch may be
static int keep_rows(tb_gpu *g, void *p, void *scratch, size_t row_bytes, int B, int n, int r0, int nr)
{
    char *src = (char *)p + r0 * row_bytes, *dst = (char *)scratch;
    if (B == 1 || n * row_bytes > g->prop.memPitch) {
        for (int b = 0; b < B; b++)
            CK(cudaMemcpyAsync(dst + b * nr * row_bytes, src + b * n * row_bytes, nr * row_bytes,
                               cudaMemcpyDeviceToDevice, g->stream));
    } else {
        CK(cudaMemcpy2DAsync(dst, nr * row_bytes, src, n * row_bytes, nr * row_bytes, B, cudaMemcpyDeviceToDevice,
                             g->stream));
    }
    CK(cudaMemcpyAsync(p, scratch, (size_t)B * nr * row_bytes, cudaMemcpyDeviceToDevice, g->stream));
    return 0;
}

// One layer for B x n rows (mode above), as cpu_forward.c's layer_forward.
// nr < n (the last layer under last_layer_rows): after the QKV product and
// the cache write only rows [r0, r0 + nr) of each sequence go on, moved to
// the front of g->x ([B][nr][hidden]); nr = 0 stops there.
// A product into the residual stream x (attention's o, the MLP's down):
// x += W in, by the batch-1 GEMV when `one` (a: its fused norm; a.beta and
// the weights, p's, are set here) or matmul_p. Tensor parallelism lives here alone: the product
// is row-parallel, rank 0 adds its partial sum to x, the other ranks write
// theirs (beta 0), and the all-reduce sums them into x on every rank.
static int residual_product(tb_gpu *g, gemv_args a, proj p, int rows, int one, int pdl)
{
    a.beta = g->tp_rank == 0 ? 1.0f : 0.0f;
    a.w = p.w, a.q = p.q, a.s = p.s;
    if (one) {
        gemv_fused(g, a, pdl);
        LAUNCHED();
    } else if (matmul_p(g, g->x, a.x, p, rows, a.out, a.in, a.beta)) {
        return -1;
    }
    return g->comm ? tp_allreduce(g, g->x, (size_t)rows * a.out) : 0;
}

static int layer_forward(tb_gpu *g, int l, int B, int slot0, int pos0, int n, int n_attend, int causal, int mode,
                         int r0, int nr)
{
    const tb_model_config *c = &g->cfg;
    int rows = B * n, h = c->hidden_size, nq = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    int I = c->intermediate_size, qd = qkv_dim(c);
    gpu_layer *G = &g->layers[l];
    size_t layer_off = (size_t)l * g->seqs * g->len * kvd;
    float eps = (float)c->rms_eps;
    // one row: our GEMVs, as programmatic dependent launches inside the
    // decode graph when g->pdl
    int one = one_row(g, rows);
    int norm = norm_in_gemv(g, rows);
    int swiglu = one && (g->fusion & TB_GPU_FUSE_SWIGLU) && !G->router;
    int pdl = one && g->pdl && mode != FWD_SPAN;
    if (!norm || l == 0) { // else the layer before left it in xn
        if (norm_rows(g, rows, G->attn_norm, pdl))
            return -1;
    }
    // the QKV product, as k_qkv_post reads it (the GEMV's: float, complete)
    product qkv = {g->qkv, 0, NULL, NULL};
    if (one) {
        proj p = layer_proj(G, PROJ_QKV);
        gemv_args a = {p.w, g->xn, g->qkv, NULL, NULL, NULL, 0.0f, qd, h, 0.0f, p.q, p.s};
        gemv_fused(g, a, pdl);
        LAUNCHED();
    } else if (consumed_product(g, &qkv, g->qkv, g->xn, layer_proj(G, PROJ_QKV), rows, qd, h, one)) {
        return -1;
    }
    // k_qkv_post: a warp per head, QKV_POST_WARPS heads a block; the row's
    // rotation table (rope dim floats) in shared memory
    dim3 post_grid(rows, (c->n_heads + 2 * c->n_kv_heads + QKV_POST_WARPS - 1) / QKV_POST_WARPS);
    size_t post_smem = (size_t)tb_config_rope_dim(c) * sizeof(float);
    // a span's sequences start at cache sequence slot0
    size_t span_off = mode == FWD_SPAN ? (size_t)slot0 * g->len * kvd : 0;
    const int *rslot = mode == FWD_SLOTS || g->span_slots ? g->d_rslot : NULL;
    const int *rpos = mode == FWD_SLOTS || g->span_pos ? g->d_rpos : NULL;
    if (g->span_slots)
        span_off = 0; // the slots are in d_rslot
    // (TB_GPU_FUSE_ATTN_POST at batch 1: the attention kernel does this
    // work for its own heads, from the GEMV's float product)
    int post_in_attn = attn_takes_post(g, rows, mode);
    qkv_post_args post = {g->qkv,      G->bqkv, G->q_norm, G->k_norm, g->inv_freq, eps, tb_config_rope_dim(c),
                          g->kc + layer_off, g->vc + layer_off};
    if (!post_in_attn) {
        launch(g, qkv.rounded ? k_qkv_post_bf16 : k_qkv_post, post_grid, dim3(QKV_POST_WARPS * 32), post_smem, pdl,
               (const void *)qkv.y, (const float *)G->bqkv, (const float *)G->q_norm, (const float *)G->k_norm, eps,
               (const float *)g->inv_freq, n, pos0, (const int *)(mode == FWD_DECODE ? g->d_pos : NULL), rslot, rpos,
               (const int *)(g->d_pad + (mode == FWD_SPAN ? slot0 : 0)), g->kc + layer_off + span_off,
               g->vc + layer_off + span_off, g->len, g->q, c->n_heads, c->n_kv_heads, c->head_dim,
               tb_config_rope_dim(c), qkv.sx, qkv.sw);
        LAUNCHED();
    }
    if (nr < n) { // the head's rows only, from here on (one, norm and swiglu are 0: n > 1)
        if (nr == 0)
            return 0;
        // scratch: att (q's shape) and the logits (at least hidden floats a row), both written later
        if (keep_rows(g, g->q, g->att, (size_t)nq * sizeof(bf16), B, n, r0, nr) ||
            keep_rows(g, g->x, g->logits, (size_t)h * sizeof(float), B, n, r0, nr))
            return -1;
        pos0 += r0, n = nr, rows = B * nr;
    }
    if (mode != FWD_SPAN) {
        if (attn_decode(g, layer_off, B, mode, rslot, rpos, pdl, -1, post_in_attn ? &post : NULL))
            return -1;
    } else if (attn_span(g, l, B, slot0, pos0, n, n_attend, causal)) {
        return -1;
    }
    // (one row under NORM: also the MLP's RMSNorm into xn)
    gemv_args o = {NULL, g->att, g->x, NULL, norm ? g->xn : NULL, G->mlp_norm, eps, h, nq, 0.0f, NULL, NULL};
    if (residual_product(g, o, layer_proj(G, PROJ_O), rows, one, pdl))
        return -1;
    // (TB_GPU_FUSE_MOE_NORM: a MoE layer's fused router makes xn itself)
    int router_norm = G->router && moe_router_norms(g, rows);
    if (!norm && !router_norm && norm_rows(g, rows, G->mlp_norm, pdl))
        return -1;
    if (G->router) { // a MoE layer: the experts' output added into x
        if (moe_ffn(g, l, rows, mode != FWD_SPAN, router_norm ? G->mlp_norm : NULL))
            return -1;
        if (!G->sh_gu)
            return 0;
        // the shared experts (LLaDA 2.x): one SwiGLU of S over every row, added unscaled
        int S = g->moe.shared_inter;
        proj sgu = {G->sh_gu, G->qsh_gu, G->ssh_gu}, sdown = {G->sh_down, G->qsh_down, G->ssh_down};
        if (matmul_p(g, g->gu, g->xn, sgu, rows, 2 * S, h, 0.0f))
            return -1;
        swiglu_act(g, g->gu, g->act, S, (size_t)rows * S, NULL, NULL);
        LAUNCHED();
        return matmul_p(g, g->x, g->act, sdown, rows, h, S, 1.0f);
    }
    if (swiglu) { // gate-up with SwiGLU in its epilogue
        proj p = layer_proj(G, PROJ_GU);
        gemv_args gu = {p.w, g->xn, NULL, g->act, NULL, NULL, 0.0f, I, h, 0.0f, p.q, p.s};
        gemv_fused(g, gu, pdl);
        LAUNCHED();
    } else {
        product gu;
        if (consumed_product(g, &gu, g->gu, g->xn, layer_proj(G, PROJ_GU), rows, 2 * I, h, one))
            return -1;
        swiglu_product(g, gu, g->act, I, (size_t)rows * I);
        LAUNCHED();
    }
    // (one row under NORM: also the next layer's RMSNorm, or the final one, into xn)
    const float *next = l + 1 < c->n_layers ? g->layers[l + 1].attn_norm : g->final_norm;
    gemv_args dn = {NULL, g->act, g->x, NULL, norm ? g->xn : NULL, next, eps, h, I, 0.0f, NULL, NULL};
    return residual_product(g, dn, layer_proj(G, PROJ_DOWN), rows, one, pdl);
}

// Final norm + LM head over rows r0 .. r0 + nr - 1 of each sequence of
// n rows in g->x: logits [B][nr][vocab]. norm_done: the last down
// projection left the final norm in xn (norm_in_gemv; nr = n = 1).
static int head(tb_gpu *g, int B, int n, int r0, int nr, int norm_done)
{
    if (nr == 0) // a forward that only stores the cache
        return 0;
    const tb_model_config *c = &g->cfg;
    int h = c->hidden_size;
    // a rank's vocabulary slice: its logits, then all ranks' gathered
    int sliced = g->head_rows != c->vocab_size;
    float *out = sliced ? g->logits_part : g->logits;
    if (norm_done) {
        if (matmul_t(g, out, g->xn, g->lm_head, 1, g->head_rows, h, 0.0f))
            return -1;
    } else {
        k_rmsnorm<<<B * nr, norm_threads(B * nr), 0, g->stream>>>(g->x, n, r0, nr, g->final_norm, g->xn, h, (float)c->rms_eps);
        LAUNCHED();
        if (matmul_t(g, out, g->xn, g->lm_head, B * nr, g->head_rows, h, 0.0f))
            return -1;
    }
    return sliced ? tp_gather_logits(g, B * nr) : 0;
}

// The embedding, every layer and the LM head for B x n rows
// (layer_forward's mode): logits [B][nr][vocab] of rows r0 .. r0 + nr - 1
// of each sequence (nr = 0: none, the cache only), as cpu_forward.c's
// forward_hidden and its head. The last layer carries last_layer_rows of
// them past its QKV.
static int forward_head(tb_gpu *g, int B, int slot0, int pos0, int n, int n_attend, int causal, int mode, int r0,
                        int nr)
{
    const tb_model_config *c = &g->cfg;
    int rows = B * n, h = c->hidden_size, L = c->n_layers;
    int kept = last_layer_rows(g, mode, n, nr);
    for (int j = 0; g->capture_on && j < g->n_capture; j++)
        if (g->capture_layers[j] == L - 1) // every row's output of the last layer
            kept = n;
    k_embed<<<rows, 256, 0, g->stream>>>(g->tok, g->embed, g->x, h);
    LAUNCHED();
    for (int l = 0; l < L; l++) {
        if (layer_forward(g, l, B, slot0, pos0, n, n_attend, causal, mode, l + 1 < L || kept == n ? 0 : r0,
                          l + 1 < L ? n : kept))
            return -1;
        // the residual stream after layer l into its column of the capture
        // ([rows][n_capture][h])
        for (int j = 0; g->capture_on && j < g->n_capture; j++)
            if (g->capture_layers[j] == l)
                CK(cudaMemcpy2DAsync(g->capture + (size_t)j * h, (size_t)g->n_capture * h * sizeof(float), g->x,
                                     (size_t)h * sizeof(float), (size_t)h * sizeof(float), rows,
                                     cudaMemcpyDeviceToDevice, g->stream));
    }
    return kept == n ? head(g, B, n, r0, nr, norm_in_gemv(g, rows)) : head(g, B, nr, 0, nr, 0);
}

// The work of one forward over B sequences of n new positions attending to
// n_attend keys, with nr rows through the LM head: FLOPs (GEMMs, attention
// scores and P V, the head) and the bytes the device must move (bf16
// weights read once, K/V read for the keys and written for the new rows,
// the embedding rows). Norms, RoPE and activations are left out: they are
// small next to these.
//
// A MoE layer (gpu_moe.cu) reads its router and the experts some row
// chose: the FLOPs are known here (rows x top_k experts), the experts read
// only on the device, which counts the distinct ones per layer call;
// tb_gpu_take_work adds their bytes (tb_moe_active_bytes, moe.c: the one
// definition of a MoE layer's active bytes).
static void account(tb_gpu *g, int B, int n, int n_attend, int nr)
{
    const tb_model_config *c = &g->cfg;
    double h = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nq = nh * hd, kvd = (double)c->n_kv_heads * hd;
    // V: the LM head's rows (a rank's slice under tensor parallelism)
    double I = c->intermediate_size, V = g->head_rows, L = c->n_layers, rows = (double)B * n;
    double Lm = g->n_moe_layers, Ld = L - Lm;
    double attn = (nq + 2 * kvd) * h + h * nq, dense_ffn = 3 * I * h; // weight elements
    double routed = (g->moe.top_k * 3.0 * g->moe.expert_inter + 3.0 * g->moe.shared_inter + g->moe.n_experts) * h;
    g->work_flops += 2 * rows * (attn * L + dense_ffn * Ld + routed * Lm) + 4.0 * B * nh * n * n_attend * hd * L +
                     2.0 * B * nr * h * V;
    // the last layer's rows that stop after its QKV product: no attention,
    // output projection or feed-forward (last_layer_rows; spans only, as
    // every forward that reads fewer head rows than it runs is one)
    double cut = (double)B * (n - last_layer_rows(g, FWD_SPAN, n, nr));
    int last_moe = g->layers[c->n_layers - 1].router != NULL;
    g->work_flops -= 2 * cut * (h * nq + (last_moe ? routed : dense_ffn)) + 4.0 * cut * nh * n_attend * hd;
    g->work_moe_rows -= last_moe ? cut : 0;
    // dtype = fp8: the projections' E4M3 bytes and their float row scales
    double proj_bytes = g->fp8 ? attn * L + dense_ffn * Ld + 4.0 * (L * (qkv_dim(c) + h) + Ld * (2 * I + h))
                               : 2 * (attn * L + dense_ffn * Ld);
    g->work_bytes += proj_bytes + 2 * V * h +
                     2 * L * (2.0 * B * n_attend * kvd + 2 * rows * kvd) + 2 * rows * h;
    g->work_moe_rows += rows * Lm;
    g->work_moe_calls += Lm;
    if (n > 0 && last_layer_rows(g, FWD_SPAN, n, nr) == 0) {
        // a cache store: the last layer's output projection and dense
        // feed-forward are not read, nor its keys and values by attention
        // (a MoE feed-forward is not called: its experts are counted on the
        // device, its call here)
        double o_ffn = g->fp8 ? h * nq + 4 * h + (last_moe ? 0 : dense_ffn + 4.0 * (2 * I + h))
                              : 2 * (h * nq + (last_moe ? 0 : dense_ffn));
        g->work_bytes -= o_ffn + 2 * 2.0 * B * n_attend * kvd;
        g->work_moe_calls -= last_moe;
    }
}

extern "C" void tb_gpu_take_work(tb_gpu *g, double *flops, double *bytes, double *expert_reads, double *moe_rows)
{
    if (g->ranks) {
        tp_take_work(g, flops, bytes, expert_reads, moe_rows);
        return;
    }
    double touched = 0;
    if (g->n_moe_layers > 0 && moe_take_touched(g, &touched) != 0)
        touched = 0; // the error stays in g->error; the next CUDA call reports it
    *flops = g->work_flops;
    // plus the MoE layer calls' routers and touched experts (moe.c: bf16,
    // or under dtype = fp8 the experts' codes and scales)
    *bytes = g->work_bytes + (g->fp8 ? tb_moe_active_bytes_fp8(&g->moe, g->work_moe_calls, touched)
                                     : tb_moe_active_bytes_sum(&g->moe, g->work_moe_calls, touched, 2.0));
    if (expert_reads)
        *expert_reads = touched;
    if (moe_rows)
        *moe_rows = g->work_moe_rows;
    g->work_flops = g->work_bytes = g->work_moe_rows = g->work_moe_calls = 0;
}

// For ncu (tests/gpu/profile.sh): with TB_GPU_PROFILE_CALL=N the N-th
// decode step or diffusion forward of this context runs between
// cudaProfilerStart and cudaProfilerStop, so `ncu --profile-from-start
// off` profiles that one and not the load-time calibration.
static void profile_begin(tb_gpu *g)
{
    if (g->profile_call > 0 && ++g->profile_seen == g->profile_call)
        (void)cudaProfilerStart();
}

static void profile_end(tb_gpu *g)
{
    if (g->profile_call > 0 && g->profile_seen == g->profile_call) {
        (void)cudaStreamSynchronize(g->stream);
        (void)cudaProfilerStop();
    }
}

static int fetch_next(tb_gpu *g, int B, int32_t *next, float *logits_out)
{
    k_argmax<<<B, 1024, 0, g->stream>>>(g->logits, g->cfg.vocab_size, g->pick_vocab, g->out_tok);
    LAUNCHED();
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, B * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    if (logits_out)
        CK(cudaMemcpyAsync(logits_out, g->logits, (size_t)B * g->cfg.vocab_size * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    memcpy(next, g->h_tok, B * sizeof(int32_t));
    return 0;
}

extern "C" int tb_gpu_prefill(tb_gpu *g, const int32_t *tokens, int B, int P, int32_t *next, float *logits_out)
{
    if (g->ranks)
        return tp_prefill(g, tokens, B, P, next, logits_out);
    if (B > g->seqs || B * P > g->rows || P >= g->len)
        return fail(g, "prefill of %d x %d does not fit the reserved %d x %d", B, P, g->seqs, g->len);
    CK(cudaMemcpyAsync(g->tok, tokens, (size_t)B * P * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    if (forward_head(g, B, 0, 0, P, P, 1, FWD_SPAN, P - 1, 1))
        return -1;
    account(g, B, P, P, 1);
    g->pos = P;
    CK(cudaMemcpyAsync(g->d_pos, &g->pos, sizeof(int), cudaMemcpyHostToDevice, g->stream));
    return fetch_next(g, B, next, logits_out);
}

// One decode step as a graph: tokens in g->tok at position *d_pos; argmax
// into g->tok (fed back) and g->out_tok; *d_pos incremented.
static int capture_decode(tb_gpu *g, int B)
{
    if (g->graph) {
        cudaGraphExecDestroy(g->graph);
        g->graph = NULL;
    }
    // B > 1 rows take the GEMMs (gpu_gemm.cu); when their algorithms are
    // timed (TB_GPU_GEMM_TUNE=1), only outside capture: the step once
    // uncaptured first (it writes the K/V the graph's step writes, and
    // logits the step overwrites). Not with MoE layers: the experts that
    // run would count in the call's roofline (moe_touched)
    if (B > 1 && g->n_moe_layers == 0 && gemm_tuning(g) && (forward_head(g, B, 0, 0, 1, 0, 1, FWD_DECODE, 0, 1)))
        return -1;
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
    int rc = forward_head(g, B, 0, 0, 1, 0, 1, FWD_DECODE, 0, 1);
    if (rc == 0) {
        k_argmax<<<B, 1024, 0, g->stream>>>(g->logits, g->cfg.vocab_size, g->pick_vocab, g->out_tok);
        cudaMemcpyAsync(g->tok, g->out_tok, B * sizeof(int32_t), cudaMemcpyDeviceToDevice, g->stream);
        k_incr<<<1, 1, 0, g->stream>>>(g->d_pos);
    }
    cudaError_t e = cudaStreamEndCapture(g->stream, &graph);
    if (rc != 0 || e != cudaSuccess)
        (void)cudaGetLastError(); // a failed capture must not poison the next call
    if (rc != 0)
        return -1;
    if (e != cudaSuccess)
        return fail(g, "decode graph capture failed: %s", cudaGetErrorString(e));
    CK(cudaGraphInstantiate(&g->graph, graph, 0));
    cudaGraphDestroy(graph);
    g->graph_B = B;
    return 0;
}

extern "C" int tb_gpu_decode(tb_gpu *g, int32_t *next, int B, float *logits_out)
{
    if (g->ranks)
        return tp_decode(g, next, B, logits_out);
    if (g->pos >= g->len)
        return fail(g, "decode past the reserved %d positions", g->len);
    memcpy(g->h_tok, next, B * sizeof(int32_t));
    CK(cudaMemcpyAsync(g->tok, g->h_tok, B * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    if (g->graph_B != B && capture_decode(g, B))
        return -1;
    profile_begin(g);
    CK(cudaGraphLaunch(g->graph, g->stream));
    account(g, B, 1, g->pos + 1, 1);
    g->pos++;
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, B * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    if (logits_out)
        CK(cudaMemcpyAsync(logits_out, g->logits, (size_t)B * g->cfg.vocab_size * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    profile_end(g);
    memcpy(next, g->h_tok, B * sizeof(int32_t));
    return 0;
}

// A capturing call (prefill_slots, verify) of `rows` rows: room for their
// hidden states, and capture_on for its forward; capture_end: off again,
// and their count kept where the forward ran (else none).
static int capture_begin(tb_gpu *g, int rows)
{
    if (g->n_capture == 0)
        return 0;
    if (g->capture_cap < rows) {
        dfree(g, g->capture);
        g->capture = NULL;
        g->capture_cap = g->capture_rows = 0;
        if (dalloc(g, (void **)&g->capture, (size_t)rows * g->n_capture * g->cfg.hidden_size * sizeof(float)))
            return -1;
        g->capture_cap = rows;
    }
    g->capture_on = 1;
    return 0;
}

static void capture_end(tb_gpu *g, int rc, int rows)
{
    if (g->capture_on)
        g->capture_rows = rc ? 0 : rows;
    g->capture_on = 0;
}

extern "C" int tb_gpu_prefill_slots(tb_gpu *g, const int32_t *tokens, int B, int P, const int *slots, int32_t *next,
                                    float *logits_out)
{
    if (g->ranks)
        return tp_prefill_slots(g, tokens, B, P, slots, next, logits_out);
    if (B < 1 || B > g->seqs || P < 1 || B * P > g->rows || P >= g->len)
        return fail(g, "prefill of %d x %d tokens does not fit the reserved %d x %d", B, P, g->seqs, g->len);
    for (int b = 0; b < B; b++) {
        if (slots[b] < 0 || slots[b] >= g->seqs)
            return fail(g, "prefill into slot %d; %d reserved", slots[b], g->seqs);
        for (int a = 0; a < b; a++)
            if (slots[a] == slots[b])
                return fail(g, "slot %d twice in one prefill", slots[b]);
        g->h_rows[b] = slots[b];
    }
    CK(cudaMemcpyAsync(g->tok, tokens, (size_t)B * P * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    CK(cudaMemcpyAsync(g->d_rslot, g->h_rows, B * sizeof(int), cudaMemcpyHostToDevice, g->stream));
    if (capture_begin(g, B * P))
        return -1;
    g->span_slots = slots;
    int rc = forward_head(g, B, 0, 0, P, P, 1, FWD_SPAN, P - 1, 1);
    g->span_slots = NULL;
    capture_end(g, rc, B * P);
    if (rc)
        return -1;
    account(g, B, P, P, 1);
    for (int b = 0; b < B; b++)
        g->slot_len[slots[b]] = P;
    return fetch_next(g, B, next, logits_out);
}

// One continuous-batching decode step as a graph: row b's token (g->tok)
// at position d_rpos[b] of slot d_rslot[b]; argmax into g->out_tok.
static int capture_decode_slots(tb_gpu *g, int B)
{
    if (!g->graph_slots && !(g->graph_slots = (cudaGraphExec_t *)calloc((size_t)g->seqs + 1, sizeof *g->graph_slots)))
        return fail(g, "out of host memory");
    // as capture_decode: the step once uncaptured, so its GEMMs are tuned
    if (B > 1 && g->n_moe_layers == 0 && gemm_tuning(g) && (forward_head(g, B, 0, 0, 1, 0, 1, FWD_SLOTS, 0, 1)))
        return -1;
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
    int rc = forward_head(g, B, 0, 0, 1, 0, 1, FWD_SLOTS, 0, 1);
    if (rc == 0)
        k_argmax<<<B, 1024, 0, g->stream>>>(g->logits, g->cfg.vocab_size, g->pick_vocab, g->out_tok);
    cudaError_t e = cudaStreamEndCapture(g->stream, &graph);
    if (rc != 0 || e != cudaSuccess)
        (void)cudaGetLastError();
    if (rc != 0)
        return -1;
    if (e != cudaSuccess)
        return fail(g, "decode graph capture failed: %s", cudaGetErrorString(e));
    CK(cudaGraphInstantiate(&g->graph_slots[B], graph, 0));
    cudaGraphDestroy(graph);
    return 0;
}

extern "C" int tb_gpu_decode_slots(tb_gpu *g, const int *slots, int B, int32_t *next, float *logits_out)
{
    if (g->ranks)
        return tp_decode_slots(g, slots, B, next, logits_out);
    if (B < 1 || B > g->seqs)
        return fail(g, "decode of %d slots; %d reserved", B, g->seqs);
    long attend = 0;
    for (int b = 0; b < B; b++) {
        if (slots[b] < 0 || slots[b] >= g->seqs || g->slot_len[slots[b]] < 1 || g->slot_len[slots[b]] >= g->len)
            return fail(g, "decode of slot %d past its %d reserved positions (or never filled)", slots[b], g->len);
        for (int a = 0; a < b; a++)
            if (slots[a] == slots[b])
                return fail(g, "slot %d twice in one decode step", slots[b]);
        g->h_rows[b] = slots[b];
        g->h_rows[g->seqs + b] = g->slot_len[slots[b]];
        attend += g->slot_len[slots[b]] + 1;
    }
    memcpy(g->h_tok, next, B * sizeof(int32_t));
    CK(cudaMemcpyAsync(g->tok, g->h_tok, B * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    CK(cudaMemcpyAsync(g->d_rslot, g->h_rows, B * sizeof(int), cudaMemcpyHostToDevice, g->stream));
    CK(cudaMemcpyAsync(g->d_rpos, g->h_rows + g->seqs, B * sizeof(int), cudaMemcpyHostToDevice, g->stream));
    if ((!g->graph_slots || !g->graph_slots[B]) && capture_decode_slots(g, B))
        return -1;
    CK(cudaGraphLaunch(g->graph_slots[B], g->stream));
    account(g, B, 1, (int)((attend + B - 1) / B), 1); // attention work is linear in keys: their mean
    for (int b = 0; b < B; b++)
        g->slot_len[slots[b]]++;
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, B * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    if (logits_out)
        CK(cudaMemcpyAsync(logits_out, g->logits, (size_t)B * g->cfg.vocab_size * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    memcpy(next, g->h_tok, B * sizeof(int32_t));
    return 0;
}

// Speculative decoding's spans (gpu.h): B distinct slots, n rows each at
// the slot's own length, causal (a verification: the lengths grow,
// captures) or bidirectional over the span (a draft: they stay).
static int span_slots(tb_gpu *g, const int32_t *tokens, const int *slots, int B, int n, int causal, int32_t *argmax,
                      float *logits)
{
    const char *what = causal ? "verification" : "draft span";
    if (g->ranks)
        return fail(g, "%s: not under tensor parallelism", what);
    if (B < 1 || B > g->seqs || n < 1 || (long)B * n > g->rows)
        return fail(g, "%s of %d x %d tokens does not fit the reserved %d sequences x %d rows", what, B, n, g->seqs,
                    g->rows);
    long attend = 0;
    for (int b = 0; b < B; b++) {
        if (slots[b] < 0 || slots[b] >= g->seqs || g->slot_len[slots[b]] + n > g->len)
            return fail(g, "%s of %d tokens in slot %d: past its %d reserved positions (or no such slot)", what, n,
                        slots[b], g->len);
        for (int a = 0; a < b; a++)
            if (slots[a] == slots[b])
                return fail(g, "slot %d twice in one %s", slots[b], what);
        g->h_rows[b] = slots[b];
        g->h_rows[g->seqs + b] = g->slot_len[slots[b]];
        attend += g->slot_len[slots[b]] + n;
    }
    int rows = B * n, nr = argmax || logits ? n : 0;
    for (int r = 0; r < rows; r++) // k_embed trusts its ids
        if (tokens[r] < 0 || tokens[r] >= g->cfg.vocab_size)
            return fail(g, "%s: token %d (row %d) outside the vocabulary of %d", what, tokens[r], r,
                        g->cfg.vocab_size);
    CK(cudaMemcpyAsync(g->tok, tokens, (size_t)rows * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    CK(cudaMemcpyAsync(g->d_rslot, g->h_rows, B * sizeof(int), cudaMemcpyHostToDevice, g->stream));
    CK(cudaMemcpyAsync(g->d_rpos, g->h_rows + g->seqs, B * sizeof(int), cudaMemcpyHostToDevice, g->stream));
    if (causal && capture_begin(g, rows))
        return -1;
    g->span_slots = slots;
    g->span_pos = g->h_rows + g->seqs;
    int rc = forward_head(g, B, 0, 0, n, 0, causal, FWD_SPAN, 0, nr);
    g->span_slots = g->span_pos = NULL;
    capture_end(g, rc, rows);
    if (rc)
        return -1;
    account(g, B, n, (int)((attend + B - 1) / B), nr); // attention work is linear in keys: their mean
    for (int b = 0; causal && b < B; b++)
        g->slot_len[slots[b]] += n;
    size_t V = g->cfg.vocab_size;
    if (argmax) {
        k_argmax<<<rows, 1024, 0, g->stream>>>(g->logits, (int)V, g->pick_vocab, g->out_tok);
        LAUNCHED();
        CK(cudaMemcpyAsync(g->h_tok, g->out_tok, (size_t)rows * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    }
    if (logits)
        CK(cudaMemcpyAsync(logits, g->logits, (size_t)rows * V * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    // (also before the next call rewrites the pinned row staging)
    CK(cudaStreamSynchronize(g->stream));
    if (argmax)
        memcpy(argmax, g->h_tok, (size_t)rows * sizeof(int32_t));
    return 0;
}

extern "C" int tb_gpu_verify_slots(tb_gpu *g, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                                   float *logits)
{
    return span_slots(g, tokens, slots, B, n, 1, argmax, logits);
}

extern "C" int tb_gpu_draft_slots(tb_gpu *g, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                                  float *logits)
{
    return span_slots(g, tokens, slots, B, n, 0, argmax, logits);
}

extern "C" int tb_gpu_truncate_slot(tb_gpu *g, int slot, int len)
{
    if (g->ranks)
        return fail(g, "truncate: not under tensor parallelism");
    if (slot < 0 || slot >= g->seqs || len < 0 || len > g->slot_len[slot])
        return fail(g, "truncate of slot %d to %d positions: no such slot, or it holds fewer", slot, len);
    g->slot_len[slot] = len;
    return 0;
}

extern "C" int tb_gpu_set_capture(tb_gpu *g, const int *layers, int n)
{
    if (g->ranks && n > 0)
        return fail(g, "capture: not under tensor parallelism");
    if (n < 0 || n > TB_GPU_MAX_CAPTURE)
        return fail(g, "capture of %d layers: at most %d", n, TB_GPU_MAX_CAPTURE);
    for (int j = 0; j < n; j++)
        if (layers[j] < 0 || layers[j] >= g->cfg.n_layers)
            return fail(g, "capture of layer %d: the model has layers 0 .. %d", layers[j], g->cfg.n_layers - 1);
    // the buffer's row width changes: the next capturing call makes it anew
    dfree(g, g->capture);
    g->capture = NULL;
    g->capture_cap = g->capture_rows = 0;
    memcpy(g->capture_layers, layers, (size_t)n * sizeof(int));
    g->n_capture = n;
    return 0;
}

extern "C" const float *tb_gpu_captured(const tb_gpu *g, int *rows)
{
    int on = g->n_capture > 0 && g->capture_rows > 0;
    *rows = on ? g->capture_rows : 0;
    return on ? g->capture : NULL;
}

static int span(tb_gpu *g, const int32_t *tokens, int B, int pos0, int n, int n_attend, int causal, int r0, int nr)
{
    if (B > g->seqs || B * n > g->rows || n_attend > g->len || pos0 + n > g->len)
        return fail(g, "span of %d x %d (attending %d) does not fit the reserved %d x %d", B, n, n_attend, g->seqs,
                    g->len);
    CK(cudaMemcpyAsync(g->tok, tokens, (size_t)B * n * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    if (forward_head(g, B, 0, pos0, n, n_attend, causal, FWD_SPAN, r0, nr))
        return -1;
    account(g, B, n, n_attend, nr);
    return 0;
}

extern "C" int tb_gpu_logits(tb_gpu *g, const int32_t *tokens, int B, int pos0, int n, int n_attend, int causal,
                             float *logits)
{
    if (g->ranks)
        return tp_logits(g, tokens, B, pos0, n, n_attend, causal, logits);
    if (span(g, tokens, B, pos0, n, n_attend, causal, 0, n))
        return -1;
    CK(cudaMemcpyAsync(logits, g->logits, (size_t)B * n * g->cfg.vocab_size * sizeof(float), cudaMemcpyDeviceToHost,
                       g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

// The diffusion forward both pick paths share: positions [pos0, pos0 + n)
// of `rows` canvases ([rows][L] host ids) through the layers, and the LM
// head on the rows the picks read: [pick0, pick0 + npick), and for a
// shifted model (Dream: position i reads the output of i - 1) the row
// before. Those head rows are [*r0, *r0 + *nr) in g->logits.
static int canvas_span(tb_gpu *g, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend, int pick0,
                       int npick, int shifted, int *r0, int *nr)
{
    if (shifted && pos0 != 0)
        return fail(g, "shifted logits need the span to start at 0");
    int32_t *tokens = (int32_t *)malloc((size_t)rows * n * sizeof(int32_t));
    if (!tokens)
        return fail(g, "out of host memory");
    for (int b = 0; b < rows; b++)
        memcpy(tokens + (size_t)b * n, canvas + (size_t)b * L + pos0, (size_t)n * sizeof(int32_t));
    *r0 = shifted && pick0 > 0 ? pick0 - 1 : pick0;
    *nr = pick0 + npick - *r0;
    int rc = span(g, tokens, rows, pos0, n, n_attend, 0, *r0, *nr);
    free(tokens);
    return rc;
}

extern "C" int tb_gpu_forward_pick(tb_gpu *g, const int32_t *canvas, int rows, int B, int L, int pos0, int n,
                                   int n_attend, int pick0, int npick, int kind, double cfg_scale, int shifted,
                                   int32_t *x0, double *conf)
{
    if (g->ranks)
        return tp_forward_pick(g, canvas, rows, B, L, pos0, n, n_attend, pick0, npick, kind, cfg_scale, shifted,
                               x0, conf);
    int r0, nr;
    profile_begin(g);
    if (canvas_span(g, canvas, rows, L, pos0, n, n_attend, pick0, npick, shifted, &r0, &nr))
        return -1;
    size_t V = g->cfg.vocab_size;
    pick(g, g->logits, (int)V, B * npick, npick, nr, pick0 - r0, shifted, (size_t)B * nr * V, (float)cfg_scale, kind,
         -1, g->out_tok, g->out_conf);
    LAUNCHED();
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, (size_t)B * npick * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaMemcpyAsync(g->h_conf, g->out_conf, (size_t)B * npick * sizeof(double), cudaMemcpyDeviceToHost,
                       g->stream));
    CK(cudaStreamSynchronize(g->stream));
    profile_end(g);
    for (int b = 0; b < B; b++) {
        memcpy(x0 + (size_t)b * n + pick0, g->h_tok + (size_t)b * npick, npick * sizeof(int32_t));
        memcpy(conf + (size_t)b * n + pick0, g->h_conf + (size_t)b * npick, npick * sizeof(double));
    }
    return 0;
}

extern "C" int tb_gpu_forward_logits(tb_gpu *g, const int32_t *canvas, int rows, int L, int pos0, int n,
                                     int n_attend, int pick0, int npick, int shifted, float *logits)
{
    if (g->ranks)
        return tp_forward_logits(g, canvas, rows, L, pos0, n, n_attend, pick0, npick, shifted, logits);
    int r0, nr;
    if (canvas_span(g, canvas, rows, L, pos0, n, n_attend, pick0, npick, shifted, &r0, &nr))
        return -1;
    size_t V = g->cfg.vocab_size;
    for (int b = 0; b < rows; b++)
        for (int i = pick0; i < pick0 + npick; i++) {
            // the head row holding position i's logits: i, or i - 1 when
            // shifted (position 0 reads its own)
            int src = (shifted && i > 0 ? i - 1 : i) - r0;
            CK(cudaMemcpyAsync(logits + ((size_t)b * npick + (i - pick0)) * V, g->logits + ((size_t)b * nr + src) * V,
                               V * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
        }
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

extern "C" int tb_gpu_forward_pick_rows(tb_gpu *g, const int32_t *canvas, int L, const int *rows, int n_rows,
                                        int pos0, int n, int n_attend, int mask_block, int pick0, int npick,
                                        int kind, int shifted, int32_t never, int32_t *x0, double *conf)
{
    if (g->ranks)
        return tp_forward_pick_rows(g, canvas, L, rows, n_rows, pos0, n, n_attend, mask_block, pick0, npick, kind,
                                    shifted, never, x0, conf);
    if (n_rows < 1 || n_rows > g->seqs || n_rows * n > g->rows || n_attend > g->len || pos0 + n > g->len ||
        pick0 < 0 || npick < 0 || pick0 + npick > n)
        return fail(g, "block span of %d x %d at %d (attending %d, picks %d..%d) does not fit the reserved %d x %d",
                    n_rows, n, pos0, n_attend, pick0, pick0 + npick, g->seqs, g->len);
    int32_t *tokens = (int32_t *)malloc((size_t)n_rows * n * sizeof(int32_t));
    if (!tokens)
        return fail(g, "out of host memory");
    for (int b = 0; b < n_rows; b++) {
        if (rows[b] < 0 || rows[b] >= g->seqs) {
            free(tokens);
            return fail(g, "block span of canvas %d; %d reserved", rows[b], g->seqs);
        }
        for (int a = 0; a < b; a++)
            if (rows[a] == rows[b]) {
                free(tokens);
                return fail(g, "canvas %d twice in one block span", rows[b]);
            }
        g->h_rows[b] = rows[b];
        memcpy(tokens + (size_t)b * n, canvas + (size_t)rows[b] * L + pos0, (size_t)n * sizeof(int32_t));
    }
    // the head rows: the picks', and for shifted logits the row before
    int r0 = shifted && pick0 > 0 ? pick0 - 1 : pick0, nr = npick ? pick0 + npick - r0 : 0;
    cudaError_t e = cudaMemcpyAsync(g->tok, tokens, (size_t)n_rows * n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                    g->stream);
    free(tokens); // pageable source: staged before the call returns
    if (e != cudaSuccess)
        return fail(g, "token upload: %s", cudaGetErrorString(e));
    CK(cudaMemcpyAsync(g->d_rslot, g->h_rows, n_rows * sizeof(int), cudaMemcpyHostToDevice, g->stream));
    g->span_slots = rows;
    int rc = forward_head(g, n_rows, 0, pos0, n, n_attend, mask_block, FWD_SPAN, r0, nr);
    g->span_slots = NULL;
    if (rc)
        return -1;
    account(g, n_rows, n, n_attend, nr);
    if (npick == 0) {
        // a cache store returns nothing, but the next forward rewrites the
        // pinned staging (batched-GEMM pointers, row slots) that this one's
        // queued copies read when the stream reaches them: wait for it
        CK(cudaStreamSynchronize(g->stream));
        return 0;
    }
    size_t V = g->cfg.vocab_size;
    pick(g, g->logits, (int)V, n_rows * npick, npick, nr, pick0 - r0, shifted, (size_t)n_rows * nr * V, 0.0f, kind,
         never, g->out_tok, g->out_conf);
    LAUNCHED();
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, (size_t)n_rows * npick * sizeof(int32_t), cudaMemcpyDeviceToHost,
                       g->stream));
    CK(cudaMemcpyAsync(g->h_conf, g->out_conf, (size_t)n_rows * npick * sizeof(double), cudaMemcpyDeviceToHost,
                       g->stream));
    CK(cudaStreamSynchronize(g->stream));
    for (int b = 0; b < n_rows; b++) {
        memcpy(x0 + (size_t)b * n + pick0, g->h_tok + (size_t)b * npick, npick * sizeof(int32_t));
        memcpy(conf + (size_t)b * n + pick0, g->h_conf + (size_t)b * npick, npick * sizeof(double));
    }
    return 0;
}

extern "C" int tb_gpu_decode_attention(tb_gpu *g, const float *q, const float *k, const float *v, int B, int n_attend,
                                       int kernel, float *out)
{
    const tb_model_config *c = &g->cfg;
    if (g->ranks || B < 1 || B > g->seqs || B > g->rows || n_attend < 1 || n_attend > g->len || kernel < 0 ||
        kernel > ATTN_GROUP_SPLIT)
        return fail(g, "tb_gpu_decode_attention: %d rows over %d keys, kernel %d, do not fit (%d x %d reserved)", B,
                    n_attend, kernel, g->seqs, g->len);
    size_t nqv = (size_t)B * c->n_heads * c->head_dim;
    bf16 *hq = NULL;
    int rc = upload_attention(g, q, k, v, B, 1, n_attend, &hq);
    int pos = n_attend - 1; // the row's position: it sees keys [pad, pos]
    if (rc == 0 && cudaMemcpyAsync(g->d_pos, &pos, sizeof pos, cudaMemcpyHostToDevice, g->stream) != cudaSuccess)
        rc = fail(g, "tb_gpu_decode_attention: upload failed");
    // the output poisoned (bf16 0xFFFF is a NaN): a kernel that writes
    // nothing fails the check instead of passing on an earlier one's output
    if (rc == 0 && cudaMemsetAsync(g->att, 0xFF, nqv * sizeof(bf16), g->stream) != cudaSuccess)
        rc = fail(g, "tb_gpu_decode_attention: memset failed");
    if (rc == 0)
        rc = attn_decode(g, 0, B, FWD_DECODE, NULL, NULL, 0, kernel, NULL);
    if (rc == 0 && (cudaMemcpyAsync(hq, g->att, nqv * sizeof(bf16), cudaMemcpyDeviceToHost, g->stream) != cudaSuccess ||
                    cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "tb_gpu_decode_attention: %s", cudaGetErrorString(cudaGetLastError()));
    for (size_t i = 0; rc == 0 && i < nqv; i++)
        out[i] = __bfloat162float(hq[i]);
    free(hq);
    return rc ? -1 : 0;
}
