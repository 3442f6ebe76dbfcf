// gpu_ceilings.cu — measurements of the device rather than of the model
// (gpu.h): the roofline's ceilings (memory bandwidth and bf16 FLOP/s), and
// the calibration that picks this device's fastest batch-1 GEMV.
#include "gpu_internal.cuh"
#include "gpu_kprof.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace tbgpu;

// The ceilings, measured the way DEVICE.md's figures are: the best of 5
// device-to-device copies of 1 GiB (bytes read + written per second), and
// the best of 5 cuBLAS GEMMs of 8192^3, bf16 inputs, float32 accumulation
// and output as our own GEMMs (under dtype = fp8 with FP8 GEMMs: of our
// FP8 GEMM instead, tb_gpu_gemm_dtype). Transient buffers: 2 GiB + 256 MiB.
static const size_t CEIL_COPY = (size_t)1 << 30; // bytes a copy moves (read, and again written)
static const int CEIL_M = 8192;                  // the GEMM's M = N = K

// The best copy and bf16 GEMM times (ms) on a, b (CEIL_COPY bytes each; a
// holds random bf16 values on return, b a copy of them) and c (CEIL_M^2
// floats): the part of the measurement every CUDA context does alike.
static const char *time_copy_and_gemm(cudaStream_t s, cublasHandle_t blas, void *a, void *b, void *c,
                                      cudaEvent_t e0, cudaEvent_t e1, float *copy_ms, float *gemm_ms)
{
    const int M = CEIL_M;
    *copy_ms = *gemm_ms = 1e30f;
    // random operands: zeros would let the tensor cores run cooler and faster
    k_init_uniform<<<4096, 256, 0, s>>>((bf16 *)a, CEIL_COPY / sizeof(bf16), 11, 1.0f);
    k_init_uniform<<<4096, 256, 0, s>>>((bf16 *)b, CEIL_COPY / sizeof(bf16), 12, 1.0f);
    for (int i = 0; i < 6; i++) { // the first of each is a warm-up
        float ms = 0;
        cudaEventRecord(e0, s);
        cudaMemcpyAsync(b, a, CEIL_COPY, cudaMemcpyDeviceToDevice, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms < *copy_ms)
            *copy_ms = ms;
    }
    for (int i = 0; i < 6; i++) {
        float ms = 0, alpha = 1, beta = 0;
        cudaEventRecord(e0, s);
        if (cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, M, M, M, &alpha, a, CUDA_R_16BF, M, b, CUDA_R_16BF, M, &beta,
                         c, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
            return "cuBLAS failed measuring the FLOP/s ceiling";
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms < *gemm_ms)
            *gemm_ms = ms;
    }
    return cudaGetLastError() == cudaSuccess ? NULL : "measuring the ceilings failed";
}

static double copy_rate(float ms) { return 2.0 * CEIL_COPY / (ms * 1e-3); }
static double gemm_rate(float ms) { return 2.0 * CEIL_M * CEIL_M * (double)CEIL_M / (ms * 1e-3); }

extern "C" int tb_gpu_measure_ceilings(tb_gpu *g, double *peak_flops, double *peak_bytes_per_s)
{
    if (g->ranks) {
        // a tensor-parallel group (gpu_tp.cu): its work is summed over the
        // ranks, so its ceilings are rank 0's device's times the ranks
        // (the devices of one host taken as alike)
        (void)cudaSetDevice(g->ranks[0]->device);
        if (tb_gpu_measure_ceilings(g->ranks[0], peak_flops, peak_bytes_per_s) != 0)
            return fail(g, "%s", g->ranks[0]->error);
        *peak_flops *= g->n_ranks, *peak_bytes_per_s *= g->n_ranks;
        return 0;
    }
    if (g->peak_flops > 0) {
        *peak_flops = g->peak_flops, *peak_bytes_per_s = g->peak_bytes_per_s;
        return 0;
    }
    kprof_paused unrecorded; // not in TB_GPU_KERNEL_PROFILE's table
    const int M = CEIL_M;
    void *a = NULL, *b = NULL, *c = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = -1;
    float best_copy = 1e30f, best_gemm = 1e30f;
    const char *why;
    if (dalloc(g, &a, CEIL_COPY) || dalloc(g, &b, CEIL_COPY) || dalloc(g, &c, (size_t)M * M * sizeof(float)) ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        (void)cudaGetLastError();
        fail(g, "no room to measure the ceilings");
        goto out;
    }
    if ((why = time_copy_and_gemm(g->stream, g->blas, a, b, c, e0, e1, &best_copy, &best_gemm))) {
        fail(g, "%s", why);
        goto out;
    }
    if (g->fp8 && g->fp8_gemm) {
        // dtype = fp8's products run on FP8 tensor cores: their ceiling is
        // our own FP8 GEMM (gpu_gemm_fp8.cu) at 8192^3, on E4M3 codes of
        // random values (X's in b's first 64 MiB, W's in the next, their
        // scales after), float32 out
        uint8_t *xq = (uint8_t *)b, *wq = xq + (size_t)M * M;
        float *xs = (float *)(wq + (size_t)M * M), *ws = xs + M;
        k_fp8_quantize_rows<<<M, 256, 0, g->stream>>>((const bf16 *)a, M, xq, xs);
        k_fp8_quantize_rows<<<M, 256, 0, g->stream>>>((const bf16 *)a + (size_t)M * M, M, wq, ws);
        // both of its routes (gpu_gemm_fp8.cu: with the scale vectors, and
        // unscaled with the scales deferred), the faster kept
        best_gemm = 1e30f;
        for (int i = 0; i < 12; i++) {
            float ms = 0;
            int deferred = 0;
            cudaEventRecord(e0, g->stream);
            if (gemm_fp8(g, (float *)c, xq, xs, wq, ws, M, M, M, 0.0f, i < 6 ? NULL : &deferred) != 0)
                goto out; // g->error says why
            cudaEventRecord(e1, g->stream);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            if (i % 6 > 0 && ms < best_gemm)
                best_gemm = ms;
        }
    }
    if (cudaGetLastError() != cudaSuccess || !(best_copy > 0) || !(best_gemm > 0)) {
        fail(g, "measuring the ceilings failed");
        goto out;
    }
    g->peak_bytes_per_s = copy_rate(best_copy);
    g->peak_flops = gemm_rate(best_gemm);
    *peak_flops = g->peak_flops, *peak_bytes_per_s = g->peak_bytes_per_s;
    rc = 0;
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    dfree(g, a);
    dfree(g, b);
    dfree(g, c);
    return rc;
}

extern "C" int tb_gpu_device_ceilings(void *stream, void *blas, double *peak_flops, double *peak_bytes_per_s,
                                      char *err, size_t err_size)
{
    kprof_paused unrecorded; // not in TB_GPU_KERNEL_PROFILE's table
    void *a = NULL, *b = NULL, *c = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best_copy = 0, best_gemm = 0;
    const char *why = NULL;
    if (cudaMalloc(&a, CEIL_COPY) != cudaSuccess || cudaMalloc(&b, CEIL_COPY) != cudaSuccess ||
        cudaMalloc(&c, (size_t)CEIL_M * CEIL_M * sizeof(float)) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        (void)cudaGetLastError();
        why = "no room to measure the ceilings";
    } else {
        why = time_copy_and_gemm((cudaStream_t)stream, (cublasHandle_t)blas, a, b, c, e0, e1, &best_copy, &best_gemm);
    }
    if (!why && (!(best_copy > 0) || !(best_gemm > 0)))
        why = "measuring the ceilings failed";
    if (!why)
        *peak_bytes_per_s = copy_rate(best_copy), *peak_flops = gemm_rate(best_gemm);
    else
        snprintf(err, err_size, "%s", why);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(a); // cudaFree(NULL) does nothing
    cudaFree(b);
    cudaFree(c);
    return why ? -1 : 0;
}

extern "C" const char *tb_gpu_gemm_dtype(const tb_gpu *g)
{
    const tb_gpu *r = g->ranks ? g->ranks[0] : g;
    return r->fp8 && r->fp8_gemm ? "fp8" : "bf16";
}

extern "C" int tb_gpu_gemv_picks(const tb_gpu *g, int fp8, char *buf, size_t size)
{
    const tb_gpu *r = g->ranks ? g->ranks[0] : g;
    const gemv_shape_pick *t = fp8 ? r->fp8_shapes : r->gemv_shapes;
    int n = fp8 ? r->n_fp8_shapes : r->n_gemv_shapes, written = 0;
    size_t used = 0;
    if (size)
        buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int v = fp8 ? fp8_variant_for(r, t[i].out, t[i].in) : gemv_variant_for(r, t[i].out, t[i].in);
        char one[48];
        int k = snprintf(one, sizeof one, "%s%dx%d=%d", written ? "," : "", t[i].out, t[i].in, v);
        if (k < 0 || used + (size_t)k >= size)
            break;
        memcpy(buf + used, one, (size_t)k + 1);
        used += (size_t)k;
        written++;
    }
    return written;
}

// The GEMV picks of this process, per device and shape: the first
// context to time a shape decides for every later one on that device, so
// contexts compute a shape alike (two loads of a model; a tensor-parallel
// rank at tp = 1 and one device). The bf16 GEMV's variants 0-3 add each
// row's products in the same order, the split-K ones (4-6) in another;
// the FP8 GEMV's 0-4 in one order, the tensor-core ones (5-7) in others
// (gpu_tune.h): so which is picked changes float rounding. Keyed by
// kind (bf16 or fp8) too. Two processes may still pick apart.
namespace {
struct gemv_pick {
    int device, fp8, out, in, variant;
};
const int GEMV_PICKS = 256;
gemv_pick gemv_picks[GEMV_PICKS];
int n_gemv_picks;
pthread_mutex_t gemv_picks_lock = PTHREAD_MUTEX_INITIALIZER;

// The process's pick for the shape (of the bf16 GEMV, or fp8's), or
// (none yet) v, recorded.
int process_pick(int device, int fp8, int out, int in, int v)
{
    pthread_mutex_lock(&gemv_picks_lock);
    int i = 0;
    while (i < n_gemv_picks && (gemv_picks[i].device != device || gemv_picks[i].fp8 != fp8 ||
                                gemv_picks[i].out != out || gemv_picks[i].in != in))
        i++;
    if (i < n_gemv_picks)
        v = gemv_picks[i].variant;
    else if (n_gemv_picks < GEMV_PICKS)
        gemv_picks[n_gemv_picks++] = {device, fp8, out, in, v};
    pthread_mutex_unlock(&gemv_picks_lock);
    return v;
}
} // namespace

// A split-K variant (other rounding than variants 0-3) is picked only when
// it beats the fastest of those by this fraction, so a near tie does not
// flip a shape's rounding from one process to the next.
#define GEMV_SPLIT_MARGIN 0.03

// Copies of a weight matrix of `bytes` cycled in a GEMV's timing so reads
// come from DRAM, not L2: together more than 256 MB and four times the
// L2 (50-60 MB on Hopper), at most 64 (an FP8 matrix of 4 MB: 64), one of
// a large one (the head: 1 GB).
extern "C" int tb_gpu_timing_copies(const tb_gpu *g, size_t bytes)
{
    if (g->ranks)
        g = g->ranks[0];
    size_t want = (size_t)4 * g->prop.l2CacheSize;
    want = want > ((size_t)256 << 20) ? want : (size_t)256 << 20;
    size_t copies = want / (bytes ? bytes : 1) + 1;
    return (int)(copies > 64 ? 64 : copies);
}

// GB/s of weight bytes (w_bytes a copy) read by each of nv variants of a
// batch-1 product, into gbs (0: not run): run(v, i) launches variant v on
// copy i, or says false (this variant cannot take the shape). A warm-up
// over every copy of each, then TIMING_ROUNDS rounds of 64 launches a
// variant between two events, the variants in turn within a round, each
// variant's best round kept: a clock still rising at the first round, or
// a stall in one, then weighs on every variant alike, not on the one
// timed first. Returns the best.
#define TIMING_ROUNDS 3
template <typename Run>
static double time_variants(tb_gpu *g, int nv, int copies, size_t w_bytes, Run run, double *gbs)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    double best = 0;
    for (int v = 0; v < nv; v++) {
        gbs[v] = 0;
        int ok = 1;
        for (int i = 0; i < copies && ok; i++) // warm-up
            ok = run(v, i);
        gbs[v] = ok ? -1 : 0; // -1: runs, not timed yet
    }
    for (int round = 0; round < TIMING_ROUNDS; round++)
        for (int v = 0; v < nv; v++) {
            if (gbs[v] == 0)
                continue;
            cudaEventRecord(a, g->stream);
            const int iters = 64;
            for (int i = 0; i < iters; i++)
                run(v, (round * iters + i) % copies);
            cudaEventRecord(b, g->stream);
            cudaEventSynchronize(b);
            float ms = 0;
            cudaEventElapsedTime(&ms, a, b);
            double r = ms > 0 ? (double)iters * w_bytes / (ms * 1e-3) / 1e9 : 0;
            gbs[v] = r > gbs[v] ? r : gbs[v];
        }
    for (int v = 0; v < nv; v++) {
        gbs[v] = gbs[v] > 0 ? gbs[v] : 0;
        best = gbs[v] > best ? gbs[v] : best;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

// Time every GEMV variant on W[out][in] (random bf16, several copies so
// the reads come from DRAM, not L2) and keep the fastest for this shape
// (GEMV_SPLIT_MARGIN; the process's earlier pick for it, if any); returns
// the fastest variant's GB/s of weights read. Writes each variant's GB/s
// into gbs (0: not run, a split-K one wider than the partials buffer).
extern "C" double tb_gpu_bench_gemv(tb_gpu *g, int out, int in, double gbs[TB_GPU_GEMV_VARIANTS])
{
    if (g->ranks) { // a tensor-parallel group: its first rank's device
        (void)cudaSetDevice(g->ranks[0]->device);
        return tb_gpu_bench_gemv(g->ranks[0], out, in, gbs);
    }
    size_t n = (size_t)out * in;
    int copies = tb_gpu_timing_copies(g, n * sizeof(bf16));
    bf16 *w = NULL, *x = NULL;
    float *y = NULL;
    if (dalloc(g, (void **)&w, copies * n * sizeof(bf16)) || dalloc(g, (void **)&x, in * sizeof(bf16)) ||
        dalloc(g, (void **)&y, out * sizeof(float))) {
        dfree(g, w);
        dfree(g, x);
        return -1;
    }
    k_init_uniform<<<4096, 256, 0, g->stream>>>(w, copies * n, 1, 0.03f);
    k_init_uniform<<<64, 256, 0, g->stream>>>(x, in, 2, 1.0f);
    double best = time_variants(
        g, TB_GPU_GEMV_VARIANTS, copies, n * sizeof(bf16),
        [&](int v, int i) {
            if (v >= 4 && out > g->gemv_part_out) // split-K needs partials this wide: not run
                return false;
            gemv(g, w + (size_t)i * n, x, y, out, in, 0, v);
            return true;
        },
        gbs);
    int base = 0; // the fastest of variants 0-3 (one rounding)
    for (int v = 1; v < 4; v++)
        base = gbs[v] > gbs[base] ? v : base;
    int pick = base;
    for (int v = 4; v < TB_GPU_GEMV_VARIANTS; v++)
        if (gbs[v] > gbs[base] * (1.0 + GEMV_SPLIT_MARGIN) && gbs[v] > gbs[pick])
            pick = v;
    pick = process_pick(g->device, 0, out, in, pick);
    dfree(g, w);
    dfree(g, x);
    dfree(g, y);
    // keep it for this shape, and as the default for others
    g->gemv_variant = pick;
    keep_shape_pick(g->gemv_shapes, &g->n_gemv_shapes, out, in, pick);
    return cudaGetLastError() == cudaSuccess ? best : -1;
}

// Random E4M3 codes for timing: any byte but the two NaNs (bit 3 cleared
// keeps the exponent below 15).
__global__ void k_init_codes(uint8_t *q, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 0x2c1b3c6du;
        h ^= h >> 12;
        q[i] = (uint8_t)(h & 0xf7u);
    }
}

// As tb_gpu_bench_gemv for the FP8 GEMV (gpu_tune.h): the fastest of the
// variants that round alike, or a tensor-core one 3% faster (the margin
// and the process's pick as the split-K GEMVs'); kept in g->fp8_shapes.
extern "C" double tb_gpu_bench_gemv_fp8(tb_gpu *g, int out, int in, double gbs[TB_GPU_FP8_GEMV_VARIANTS])
{
    if (g->ranks) {
        (void)cudaSetDevice(g->ranks[0]->device);
        return tb_gpu_bench_gemv_fp8(g->ranks[0], out, in, gbs);
    }
    size_t n = (size_t)out * in;
    int copies = tb_gpu_timing_copies(g, n);
    uint8_t *q = NULL;
    float *s = NULL, *y = NULL;
    bf16 *x = NULL;
    if (dalloc(g, (void **)&q, copies * n) || dalloc(g, (void **)&s, out * sizeof(float)) ||
        dalloc(g, (void **)&x, in * sizeof(bf16)) || dalloc(g, (void **)&y, out * sizeof(float))) {
        dfree(g, q);
        dfree(g, s);
        dfree(g, x);
        return -1;
    }
    k_init_codes<<<4096, 256, 0, g->stream>>>(q, copies * n, 3);
    cudaMemsetAsync(s, 0, out * sizeof(float), g->stream); // the scales do not change the time
    k_init_uniform<<<64, 256, 0, g->stream>>>(x, in, 2, 1.0f);
    double best = time_variants(
        g, TB_GPU_FP8_GEMV_VARIANTS, copies, n,
        [&](int v, int i) {
            gemv_fp8(g, q + (size_t)i * n, s, x, y, out, in, 0.0f, v);
            return true;
        },
        gbs);
    int base = 0; // the fastest of the variants that round alike
    for (int v = 1; v < TB_GPU_FP8_GEMV_ROUNDING_ALIKE; v++)
        base = gbs[v] > gbs[base] ? v : base;
    int pick = base;
    for (int v = TB_GPU_FP8_GEMV_ROUNDING_ALIKE; v < TB_GPU_FP8_GEMV_VARIANTS; v++)
        if (gbs[v] > gbs[base] * (1.0 + GEMV_SPLIT_MARGIN) && gbs[v] > gbs[pick])
            pick = v;
    pick = process_pick(g->device, 1, out, in, pick);
    dfree(g, q);
    dfree(g, s);
    dfree(g, x);
    dfree(g, y);
    keep_shape_pick(g->fp8_shapes, &g->n_fp8_shapes, out, in, pick);
    return cudaGetLastError() == cudaSuccess ? best : -1;
}

namespace tbgpu {

void keep_shape_pick(gemv_shape_pick *t, int *n, int out, int in, int v)
{
    int i = 0;
    while (i < *n && (t[i].out != out || t[i].in != in))
        i++;
    if (i == TB_GPU_GEMV_SHAPES)
        i--;
    else if (i == *n)
        (*n)++;
    t[i].out = out, t[i].in = in, t[i].variant = v;
}

// The variant "OUTxIN=V,..." (TB_GPU_GEMV_PICKS, TB_GPU_FP8_PICKS) gives
// for shape out x in, or -1.
static int given_pick(const char *list, int out, int in)
{
    for (const char *p = list; p && *p;) {
        int o, i, v, used = 0;
        if (sscanf(p, "%dx%d=%d%n", &o, &i, &v, &used) == 3 && o == out && i == in)
            return v;
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return -1;
}

int calibrate_gemv_shape(tb_gpu *g, int fp8, int out, int in)
{
    int nv = fp8 ? TB_GPU_FP8_GEMV_VARIANTS : TB_GPU_GEMV_VARIANTS;
    int v = given_pick(getenv(fp8 ? "TB_GPU_FP8_PICKS" : "TB_GPU_GEMV_PICKS"), out, in);
    if (v >= 0 && v < nv) {
        if (fp8)
            keep_shape_pick(g->fp8_shapes, &g->n_fp8_shapes, out, in, v);
        else
            keep_shape_pick(g->gemv_shapes, &g->n_gemv_shapes, out, in, v);
        return 0;
    }
    double gbs[TB_GPU_GEMV_VARIANTS > TB_GPU_FP8_GEMV_VARIANTS ? TB_GPU_GEMV_VARIANTS : TB_GPU_FP8_GEMV_VARIANTS];
    if ((fp8 ? tb_gpu_bench_gemv_fp8(g, out, in, gbs) : tb_gpu_bench_gemv(g, out, in, gbs)) < 0)
        return fail(g, "%s calibration failed on %d x %d", fp8 ? "FP8 GEMV" : "GEMV", out, in);
    if (getenv("TB_GPU_GEMV_LOG")) { // measurements (docs/PERFORMANCE.md; tests/gpu/profile.sh reads the picks)
        fprintf(stderr, "gemv%s %dx%d: GB/s by variant", fp8 ? " fp8" : "", out, in);
        for (int k = 0; k < nv; k++)
            fprintf(stderr, " %.0f", gbs[k]);
        fprintf(stderr, "; variant %d\n", fp8 ? fp8_variant_for(g, out, in) : gemv_variant_for(g, out, in));
    }
    return 0;
}

} // namespace tbgpu
