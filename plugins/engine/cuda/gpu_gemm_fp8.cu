// gpu_gemm_fp8.cu — dtype = fp8's products of more than one row
// (gpu_forward.cu's matmul_p above batch 1), on FP8 tensor cores:
//
//   y[r][o] (+)= sx[r] sw[o] sum_i e4m3(X[r][i]) e4m3(W[o][i])
//
// X's rows quantized with one power-of-two scale each (k_fp8_quant_act,
// fp8.h), W's output channels at load; float32 accumulation and output.
// In cuBLASLt's column-major terms D[out][rows] = diag(sw) (W^T)^T X^T
// diag(sx), A = W (op T, "TN", the only layout FP8 takes), B = X, C = D =
// y; the two scale vectors either in cuBLASLt's epilogue
// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, cuBLAS 12.9 and later) or
// applied by a kernel of ours after an unscaled product (the routes below).
//
// cuBLASLt's FP8 kernels without the scale vectors are faster. Measured on
// the H200 (docs/PERFORMANCE.md, 2026-12-02), Llama-3-8B's four shapes
// (qkv, o, gate-up, down) at 32 rows took 18.2 / 14.5 / 48.2 / 38.9 us with
// them against 8.2 / 7.3 / 35.6 / 20.6 without; at 384 rows qkv 26.9
// against 18.0 and gate-up 78.3 against 70.5. So a product whose consumer
// can scale (QKV: k_qkv_post; gate-up: k_swiglu) runs unscaled into y at
// any size and hands the scales on (deferred: gpu_forward.cu's struct
// product carries them to the consumer); an accumulating one (o,
// down) of at most FP8_SCALAR_ROWS rows runs unscaled into g->fp8_t and
// k_fp8_scale_out scales and adds it (a pass over a few output rows); a
// larger one keeps the outer-vector scales (its pass would cost more than
// the faster kernel saves).
//
// One heuristic algorithm a shape (out, rows, in, accumulate, route), no
// timing (a measured call would carry the timing's cost), kept per context.
#include "gpu_internal.cuh"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#if CUBLAS_VER_MAJOR * 100 + CUBLAS_VER_MINOR >= 1209
#define TB_HAVE_FP8_OUTER_VEC 1
#endif

namespace {

const int FP8_MAX_PLANS = 256; // shapes a context keeps; then the oldest make room

struct fp8_plan {
    int out, rows, in, acc; // acc: beta != 0 (always 0 on the unscaled route: the epilogue adds)
    int scaled;             // the outer-vector descriptor, else the unscaled one
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

} // namespace

struct fp8_gemm_cache {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;   // float32 compute and scale, op(A) = A^T, outer-vector scales
    cublasLtMatmulDesc_t scalar; // the same without scales (FP8_SCALAR_ROWS and fewer)
    int n, last, evict; // plans held; the last one used; the next to replace when full
    fp8_plan plans[FP8_MAX_PLANS];
};

namespace tbgpu {

#ifdef TB_HAVE_FP8_OUTER_VEC

static void cache_destroy(fp8_gemm_cache *c)
{
    for (int i = 0; i < c->n; i++) {
        cublasLtMatrixLayoutDestroy(c->plans[i].a);
        cublasLtMatrixLayoutDestroy(c->plans[i].b);
        cublasLtMatrixLayoutDestroy(c->plans[i].c);
    }
    if (c->desc)
        cublasLtMatmulDescDestroy(c->desc);
    if (c->scalar)
        cublasLtMatmulDescDestroy(c->scalar);
    if (c->lt)
        cublasLtDestroy(c->lt);
    free(c);
}

static fp8_gemm_cache *cache_make(void)
{
    fp8_gemm_cache *c = (fp8_gemm_cache *)calloc(1, sizeof *c);
    if (!c)
        return NULL;
    cublasOperation_t ta = CUBLAS_OP_T, tn = CUBLAS_OP_N;
    int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        c->lt = NULL;
        cache_destroy(c);
        return NULL;
    }
    if (cublasLtMatmulDescCreate(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
        c->desc = NULL;
        cache_destroy(c);
        return NULL;
    }
    if (cublasLtMatmulDescCreate(&c->scalar, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
        c->scalar = NULL;
        cache_destroy(c);
        return NULL;
    }
    if (cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tn, sizeof tn) ||
        cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec) ||
        cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec) ||
        cublasLtMatmulDescSetAttribute(c->scalar, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        cublasLtMatmulDescSetAttribute(c->scalar, CUBLASLT_MATMUL_DESC_TRANSB, &tn, sizeof tn)) {
        cache_destroy(c);
        return NULL;
    }
    return c;
}

// The plan of a shape, made (layouts, heuristic) on first use, in place of
// another when the table is full (a graph captured with that one keeps
// its own copy of the launch); NULL when cuBLASLt offers no algorithm.
static fp8_plan *plan(tb_gpu *g, fp8_gemm_cache *c, int rows, int out, int in, int acc, int scaled)
{
    cublasLtMatmulDesc_t desc = scaled ? c->desc : c->scalar;
    for (int k = 0; k < c->n; k++) {
        int i = (c->last + k) % c->n;
        fp8_plan *p = &c->plans[i];
        if (p->out == out && p->rows == rows && p->in == in && p->acc == acc && p->scaled == scaled) {
            c->last = i;
            return p;
        }
    }
    if (c->n == FP8_MAX_PLANS) { // full: one plan makes room, round robin
        int v = c->evict;
        c->evict = (c->evict + 1) % FP8_MAX_PLANS;
        cublasLtMatrixLayoutDestroy(c->plans[v].a);
        cublasLtMatrixLayoutDestroy(c->plans[v].b);
        cublasLtMatrixLayoutDestroy(c->plans[v].c);
        c->plans[v] = c->plans[--c->n]; // the last one moves into its slot
    }
    fp8_plan *p = &c->plans[c->n];
    memset(p, 0, sizeof *p);
    p->out = out, p->rows = rows, p->in = in, p->acc = acc, p->scaled = scaled;
    if (cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, in, out, in) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, in, rows, in) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, out, rows, out) != CUBLAS_STATUS_SUCCESS) {
        if (p->a)
            cublasLtMatrixLayoutDestroy(p->a);
        if (p->b)
            cublasLtMatrixLayoutDestroy(p->b);
        return NULL;
    }
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    size_t ws = TB_GPU_BLAS_WS;
    if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
        if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoGetHeuristic(c->lt, desc, p->a, p->b, p->c, p->c, pref, 1, &res, &got) !=
                CUBLAS_STATUS_SUCCESS)
            got = 0;
        cublasLtMatmulPreferenceDestroy(pref);
    }
    if (got < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatrixLayoutDestroy(p->a);
        cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->c);
        (void)g;
        return NULL;
    }
    p->algo = res.algo;
    c->last = c->n++;
    return p;
}

// The scale vectors of the next product: A's (W's channels), B's (X's rows).
static cublasStatus_t set_scales(fp8_gemm_cache *c, const float *ws, const float *xs)
{
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof ws);
    return s != CUBLAS_STATUS_SUCCESS
               ? s
               : cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs);
}

int gemm_fp8_available(tb_gpu *g)
{
    // the products the model runs: attention's; the dense feed-forward's
    // where a layer has one; the experts' and shared experts' (gpu_moe.cu)
    const tb_model_config *m = &g->cfg;
    int h = m->hidden_size, nq = m->n_heads * m->head_dim, I = m->intermediate_size;
    int mi = g->moe.expert_inter, S = g->moe.shared_inter, dense = g->n_moe_layers < m->n_layers;
    int outs[8] = {(m->n_heads + 2 * m->n_kv_heads) * m->head_dim, h}, ins[8] = {h, nq}, n = 2;
    if (dense)
        outs[n] = 2 * I, ins[n++] = h, outs[n] = h, ins[n++] = I;
    if (g->n_moe_layers > 0)
        outs[n] = 2 * mi, ins[n++] = h, outs[n] = h, ins[n++] = mi;
    if (g->n_moe_layers > 0 && S > 0)
        outs[n] = 2 * S, ins[n++] = h, outs[n] = h, ins[n++] = S;
    return gemm_fp8_available_for(g, n, outs, ins);
}

int gemm_fp8_available_for(tb_gpu *g, int n, const int *outs, const int *ins)
{
    if (g->prop.major * 10 + g->prop.minor < 89) // FP8 tensor cores: Ada and Hopper on
        return 0;
    if (!g->gemm_fp8) {
        if (g->gemm_fp8_failed || !(g->gemm_fp8 = cache_make())) {
            g->gemm_fp8_failed = 1;
            return 0;
        }
    }
    // the model's projection shapes must plan on every route (then a
    // forward's products find algorithms; a rows count cuBLASLt refused
    // later would fail its call by name). cuBLASLt offers outer-vector
    // scaling only once the scale pointers are set (measured: none
    // without), so any device address stands in here
    int ok = set_scales(g->gemm_fp8, (const float *)g->blas_ws, (const float *)g->blas_ws) == CUBLAS_STATUS_SUCCESS;
    for (int k = 0; k < n && ok; k++)
        ok = plan(g, g->gemm_fp8, FP8_SCALAR_ROWS, outs[k], ins[k], 0, 0) &&
             plan(g, g->gemm_fp8, FP8_SCALAR_ROWS + 1, outs[k], ins[k], 0, 1) &&
             plan(g, g->gemm_fp8, FP8_SCALAR_ROWS + 1, outs[k], ins[k], 1, 1);
    if (!ok) {
        cache_destroy(g->gemm_fp8);
        g->gemm_fp8 = NULL;
        g->gemm_fp8_failed = 1;
        return 0;
    }
    return 1;
}

int gemm_fp8(tb_gpu *g, float *y, const uint8_t *xq, const float *xs, const uint8_t *wq, const float *ws, int rows,
             int out, int in, float beta, int *deferred)
{
    fp8_gemm_cache *c = g->gemm_fp8;
    if (!c)
        return fail(g, "the FP8 GEMM is not available on this device");
    // the routes: unscaled into y, the caller's next kernel scaling (any
    // rows: faster at 384 too, and no extra pass); outer-vector scales
    // (above FP8_SCALAR_ROWS); unscaled, then k_fp8_scale_out
    int defer = deferred && beta == 0.0f, scaled = !defer && rows > FP8_SCALAR_ROWS;
    if (deferred)
        *deferred = defer;
    if (scaled)
        CB(set_scales(c, ws, xs));
    fp8_plan *p = plan(g, c, rows, out, in, scaled && beta != 0.0f, scaled);
    if (!p)
        return fail(g, "cuBLASLt has no FP8 algorithm for %d x %d x %d (rows x out x in)", rows, out, in);
    float alpha = 1.0f, zero = 0.0f;
    if (scaled || defer) {
        CB(cublasLtMatmul(c->lt, scaled ? c->desc : c->scalar, &alpha, wq, p->a, xq, p->b, scaled ? &beta : &zero, y,
                          p->c, y, p->c, &p->algo, g->blas_ws, TB_GPU_BLAS_WS, g->stream));
        return 0;
    }
    if ((size_t)rows * out > g->fp8_t_floats)
        return fail(g, "FP8 GEMM: %d x %d outputs, room for %zu", rows, out, g->fp8_t_floats);
    CB(cublasLtMatmul(c->lt, c->scalar, &alpha, wq, p->a, xq, p->b, &zero, g->fp8_t, p->c, g->fp8_t, p->c, &p->algo,
                      g->blas_ws, TB_GPU_BLAS_WS, g->stream));
    size_t n = (size_t)rows * out;
    k_fp8_scale_out<<<(unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 256, 0, g->stream>>>(
        g->fp8_t, xs, ws, y, rows, out, beta);
    LAUNCHED();
    return 0;
}

void gemm_fp8_free(tb_gpu *g)
{
    if (g->gemm_fp8)
        cache_destroy(g->gemm_fp8);
    g->gemm_fp8 = NULL;
}

#else // cuBLAS before 12.9: no outer-vector scales; dtype = fp8 spans dequantize

int gemm_fp8_available(tb_gpu *) { return 0; }

int gemm_fp8_available_for(tb_gpu *, int, const int *, const int *) { return 0; }

int gemm_fp8(tb_gpu *g, float *, const uint8_t *, const float *, const uint8_t *, const float *, int, int, int, float,
             int *)
{
    return fail(g, "the FP8 GEMM needs cuBLAS 12.9 or later");
}

void gemm_fp8_free(tb_gpu *) {}

#endif

} // namespace tbgpu
