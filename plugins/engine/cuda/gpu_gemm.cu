// gpu_gemm.cu — the products of more than one row (gpu_forward.cu's
// matmul_t above batch 1): y[rows][out] (+)= x[rows][in] W[out][in]^T,
// bf16 inputs, float32 output and accumulation, through cuBLASLt with the
// algorithm chosen by timing: each distinct (out, rows, in, beta = 0 or
// not) is timed once over cuBLASLt's first GEMM_CANDIDATES heuristic
// algorithms and the fastest kept, in case cublasGemmEx's default choice
// is slow on a shape.
//
// Off by default: TB_GPU_GEMM_TUNE=1 turns it on. Measured on the H200
// (docs/PERFORMANCE.md, 2026-12-02), the tuned algorithms made a LLaDA-8B
// 384-row forward 0.9% faster (10.86 against 10.96 ms) and Llama-3-8B
// batch-32 decode 0.4% slower, while the timing added 100-200 ms to the
// first call of each shape: a cost a measured call (a served request's
// TTFT) would carry for nothing. Off, every product is cublasGemmEx's
// default choice. (gemm_bf16_out, the products whose consumers read bf16,
// is always cublasGemmEx's default choice.)
//
// The choice is process-wide per device (a table under a mutex): every
// context on a device runs a shape with the same algorithm, so results do
// not depend on which context computed them (tests/gpu/test_tp.c: tp = 1
// equals one device bit for bit). Timing needs the host to wait, so a
// shape first met inside graph capture runs as cublasGemmEx (as when a
// table is full); when tuning is on, capture_decode runs its step once
// uncaptured first, so the decode graphs get tuned algorithms.
#include "gpu_internal.cuh"

#include <cublasLt.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

namespace {

const int GEMM_CANDIDATES = 8;  // heuristic algorithms timed per shape
const int GEMM_TIMED_RUNS = 3;  // runs timed per algorithm (after one warm-up)
const int GEMM_MAX_PLANS = 512; // shapes a context keeps
const int GEMM_MAX_CHOICES = 4096; // shapes the process keeps, all devices

struct gemm_shape {
    int device, out, rows, in, accumulate; // accumulate: beta != 0
    bool operator==(const gemm_shape &o) const
    {
        return device == o.device && out == o.out && rows == o.rows && in == o.in && accumulate == o.accumulate;
    }
};

// A shape's algorithm: lt 1, algo through cuBLASLt; lt 0, cublasGemmEx.
struct gemm_choice {
    gemm_shape s;
    int lt;
    cublasLtMatmulAlgo_t algo;
};

// A context's plan: the choice and its cuBLASLt layouts, W as [in][out]
// column-major (op T), x [in][rows], y [out][rows].
struct gemm_plan {
    gemm_choice ch;
    cublasLtMatrixLayout_t a, b, c;
};

pthread_mutex_t choices_lock = PTHREAD_MUTEX_INITIALIZER;
gemm_choice choices[GEMM_MAX_CHOICES];
int n_choices;

// The process's choice for s into *out; 0 when none yet.
int choice_find(const gemm_shape &s, gemm_choice *out)
{
    int found = 0;
    pthread_mutex_lock(&choices_lock);
    for (int i = 0; i < n_choices && !found; i++)
        if (choices[i].s == s)
            *out = choices[i], found = 1;
    pthread_mutex_unlock(&choices_lock);
    return found;
}

// Record *ch as the process's choice unless another context recorded one
// for its shape meanwhile; then *ch becomes that one. 0: recorded or
// adopted; -1: the table is full.
int choice_add(gemm_choice *ch)
{
    int rc = 0, found = 0;
    pthread_mutex_lock(&choices_lock);
    for (int i = 0; i < n_choices && !found; i++)
        if (choices[i].s == ch->s)
            *ch = choices[i], found = 1;
    if (!found) {
        if (n_choices < GEMM_MAX_CHOICES)
            choices[n_choices++] = *ch;
        else
            rc = -1;
    }
    pthread_mutex_unlock(&choices_lock);
    return rc;
}

} // namespace

struct gemm_cache {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc; // float32 compute and scale, op(A) = A^T, op(B) = B
    int tune;                  // TB_GPU_GEMM_TUNE (default 0)
    int n, last;               // plans held; the last one used (a forward repeats a few shapes in turn)
    gemm_plan plans[GEMM_MAX_PLANS];
};

namespace tbgpu {

static int gemm_ex(tb_gpu *g, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in, float beta)
{
    float alpha = 1.0f;
    CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in,
                    &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

// The cache, made on first use; NULL when cuBLASLt cannot start (then
// every product is cublasGemmEx).
static gemm_cache *cache(tb_gpu *g)
{
    if (g->gemm || g->gemm_failed)
        return g->gemm;
    gemm_cache *c = (gemm_cache *)calloc(1, sizeof *c);
    cublasOperation_t ta = CUBLAS_OP_T, tn = CUBLAS_OP_N;
    if (!c || cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        free(c);
        g->gemm_failed = 1;
        return NULL;
    }
    if (cublasLtMatmulDescCreate(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tn, sizeof tn) !=
            CUBLAS_STATUS_SUCCESS) {
        if (c->desc)
            cublasLtMatmulDescDestroy(c->desc);
        cublasLtDestroy(c->lt);
        free(c);
        g->gemm_failed = 1;
        return NULL;
    }
    const char *env = getenv("TB_GPU_GEMM_TUNE");
    c->tune = env && strcmp(env, "1") == 0;
    g->gemm = c;
    return c;
}

static cublasStatus_t lt_run(tb_gpu *g, gemm_cache *c, const gemm_plan *p, const cublasLtMatmulAlgo_t *algo,
                             float *y, float *d, const bf16 *x, const bf16 *w, float beta)
{
    float alpha = 1.0f;
    return cublasLtMatmul(c->lt, c->desc, &alpha, w, p->a, x, p->b, &beta, y, p->c, d, p->c, algo, g->blas_ws,
                          TB_GPU_BLAS_WS, g->stream);
}

// Time the heuristic candidates for p's shape on the real operands and
// set p's choice to the fastest (lt 0 when none ran). The trials write y
// itself when beta = 0 (the real run overwrites it); with beta != 0 they
// read y and write g->logits, which holds nothing live inside a layer
// (the head writes it last; a product into the logits has beta 0), when
// it is big enough; otherwise the first candidate is taken untimed.
static void tune(tb_gpu *g, gemm_cache *c, gemm_plan *p, float *y, const bf16 *x, const bf16 *w, float beta)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[GEMM_CANDIDATES];
    int got = 0;
    size_t ws = TB_GPU_BLAS_WS;
    p->ch.lt = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return;
    if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic(c->lt, c->desc, p->a, p->b, p->c, p->c, pref, GEMM_CANDIDATES, res, &got) !=
            CUBLAS_STATUS_SUCCESS)
        got = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    if (got <= 0)
        return;
    float *d = y;
    if (beta != 0.0f) {
        size_t room = (size_t)g->rows * g->cfg.vocab_size;
        if (y == g->logits || !g->logits || (size_t)p->ch.s.rows * p->ch.s.out > room) {
            p->ch.algo = res[0].algo, p->ch.lt = 1;
            return;
        }
        d = g->logits;
    }
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess)
        return;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return;
    }
    float best_ms = INFINITY;
    int best = -1;
    for (int i = 0; i < got; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws)
            continue;
        if (lt_run(g, c, p, &res[i].algo, y, d, x, w, beta) != CUBLAS_STATUS_SUCCESS)
            continue;
        int ok = cudaEventRecord(e0, g->stream) == cudaSuccess;
        for (int r = 0; ok && r < GEMM_TIMED_RUNS; r++)
            ok = lt_run(g, c, p, &res[i].algo, y, d, x, w, beta) == CUBLAS_STATUS_SUCCESS;
        float ms = 0;
        ok = ok && cudaEventRecord(e1, g->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        if (ok && ms < best_ms)
            best_ms = ms, best = i;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    (void)cudaGetLastError(); // a candidate that failed to launch must not poison the next call
    if (best >= 0)
        p->ch.algo = res[best].algo, p->ch.lt = 1;
}

// The plan of a shape: the context's, or made from the process's choice,
// or (outside capture, tuning on) timed here; NULL: run cublasGemmEx.
static gemm_plan *plan(tb_gpu *g, gemm_cache *c, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in,
                       float beta)
{
    gemm_shape s = {g->device, out, rows, in, beta != 0.0f};
    for (int k = 0; k < c->n; k++) {
        int i = (c->last + k) % c->n;
        if (c->plans[i].ch.s == s) {
            c->last = i;
            return &c->plans[i];
        }
    }
    if (!c->tune || c->n == GEMM_MAX_PLANS)
        return NULL;
    gemm_plan *p = &c->plans[c->n];
    memset(p, 0, sizeof *p);
    p->ch.s = s;
    int known = choice_find(s, &p->ch);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (!known && (cudaStreamIsCapturing(g->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone))
        return NULL;
    if (cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, in, out, in) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, in, rows, in) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, out, rows, out) != CUBLAS_STATUS_SUCCESS) {
        if (p->a)
            cublasLtMatrixLayoutDestroy(p->a);
        if (p->b)
            cublasLtMatrixLayoutDestroy(p->b);
        return NULL;
    }
    if (!known) {
        tune(g, c, p, y, x, w, beta);
        if (choice_add(&p->ch)) { // the process's table is full: no choice other contexts could share
            cublasLtMatrixLayoutDestroy(p->a);
            cublasLtMatrixLayoutDestroy(p->b);
            cublasLtMatrixLayoutDestroy(p->c);
            return NULL;
        }
    }
    c->last = c->n++;
    return p;
}

int gemm_bf16(tb_gpu *g, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in, float beta)
{
    gemm_cache *c = cache(g);
    gemm_plan *p = c ? plan(g, c, y, x, w, rows, out, in, beta) : NULL;
    if (!p || !p->ch.lt)
        return gemm_ex(g, y, x, w, rows, out, in, beta);
    // an algorithm refused for these operands (their alignment, say) leaves
    // nothing launched: the product goes to cublasGemmEx instead
    if (lt_run(g, c, p, &p->ch.algo, y, y, x, w, beta) != CUBLAS_STATUS_SUCCESS)
        return gemm_ex(g, y, x, w, rows, out, in, beta);
    return 0;
}

int gemm_bf16_out(tb_gpu *g, bf16 *y, const bf16 *x, const bf16 *w, int rows, int out, int in)
{
    float alpha = 1.0f, beta = 0.0f;
    CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in,
                    &beta, y, CUDA_R_16BF, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

int gemm_tuning(tb_gpu *g)
{
    gemm_cache *c = cache(g);
    return c && c->tune;
}

void gemm_free(tb_gpu *g)
{
    gemm_cache *c = g->gemm;
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        cublasLtMatrixLayoutDestroy(c->plans[i].a);
        cublasLtMatrixLayoutDestroy(c->plans[i].b);
        cublasLtMatrixLayoutDestroy(c->plans[i].c);
    }
    cublasLtMatmulDescDestroy(c->desc);
    cublasLtDestroy(c->lt);
    free(c);
    g->gemm = NULL;
}

} // namespace tbgpu
