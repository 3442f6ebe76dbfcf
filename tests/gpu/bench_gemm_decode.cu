// bench_gemm_decode.cu — figures, not a test: at a decode batch (32 rows)
// Llama-3-8B's products read each weight once and are bound by that read,
// yet cuBLAS reads the narrow ones (QKV, o, down) well below the copy rate
// (docs/PERFORMANCE.md: few output tiles to spread over 132 SMs, and for
// down a split-K reduction kernel of its own). This times, per weight
// shape, y[rows][out] = x[rows][in] W[out][in]^T three ways:
//   plain   one cublasGemmEx, float out (as the engine's products);
//   bf16    the same with bf16 out (the engine's QKV and gate-up);
//   S=k     one strided-batched GEMM over k slices of `in` (W and x offset
//           by in / k, each slice's float partial product to its own
//           [rows][out]): k times the tiles, no reduction (a consumer
//           kernel would add the k partials in order);
// and prints the microseconds per product (median of 7 windows of 20) and
// W's bytes per second. Each timed product reads another copy of W (a
// pool of at least 1 GiB), so W comes from DRAM as in a decode step.
//
// Then the same products (plain) after a small kernel that leaves the
// memory system idle (a 10 us wait on 32 blocks, as a decode step's norm,
// QKV post or attention leaves most of it): serially, and with the first
// `cap` bytes of W prefetched into L2 (cp.async.bulk.prefetch) by a kernel
// on a second stream alongside it; microseconds for the pair.
//
//   bench_gemm_decode [rows = 32]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

__global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed * 40503u;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        p[i] = __float2bfloat16((float)(h & 0xffff) / 32768.0f - 1.0f);
    }
}

// wait ns nanoseconds (the device's global timer) and exit
__global__ void spin(long long ns)
{
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

// bytes (a multiple of 16) at p into L2, in 16 KiB pieces over the grid
__global__ void prefetch_l2(const char *p, size_t bytes)
{
    const size_t piece = 16384;
    for (size_t o = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * piece; o < bytes;
         o += (size_t)gridDim.x * blockDim.x * piece) {
        unsigned n = (unsigned)(bytes - o < piece ? bytes - o : piece);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(n) : "memory");
    }
}

// Microseconds per call of run(i) (i counts every call made), the median
// of 7 windows of 20 after one warm-up window, timed with e0 and e1 on the
// legacy stream; -1 when a call returned false or CUDA reported an error.
template <typename F> static float median_us(cudaEvent_t e0, cudaEvent_t e1, F run)
{
    std::vector<float> win;
    int calls = 0;
    for (int rep = -1; rep < 7; rep++) {
        cudaEventRecord(e0);
        for (int i = 0; i < 20; i++)
            if (!run(calls++))
                return -1;
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep >= 0)
            win.push_back(ms * 1e3f / 20);
    }
    if (cudaGetLastError() != cudaSuccess)
        return -1;
    std::sort(win.begin(), win.end());
    return win[win.size() / 2];
}

struct shape {
    const char *name;
    int out, in;
};

int main(int argc, char **argv)
{
    int rows = argc > 1 ? atoi(argv[1]) : 32;
    if (rows < 1 || rows > 4096) {
        fprintf(stderr, "usage: bench_gemm_decode [rows in 1..4096]\n");
        return 2;
    }
    const shape shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate-up", 28672, 4096},
                            {"down", 4096, 14336}, {"head", 128256, 4096}};
    const int slices[] = {2, 3, 4, 6, 8};
    const size_t pool = (size_t)1 << 30;
    __nv_bfloat16 *w, *x;
    float *y;
    cublasHandle_t h;
    cudaEvent_t e0, e1;
    size_t ymax = (size_t)8 * rows * 128256;
    if (cudaMalloc(&w, pool + (size_t)128256 * 4096 * 2) != cudaSuccess ||
        cudaMalloc(&x, (size_t)rows * 14336 * 2) != cudaSuccess || cudaMalloc(&y, ymax * 4) != cudaSuccess ||
        cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess) {
        fprintf(stderr, "bench_gemm_decode: no CUDA device, memory or cuBLAS\n");
        return 77;
    }
    void *ws;
    if (cudaMalloc(&ws, 32 << 20) != cudaSuccess || cublasSetWorkspace(h, ws, 32 << 20) != CUBLAS_STATUS_SUCCESS)
        return 1;
    fill<<<4096, 256>>>(w, (pool + (size_t)128256 * 4096 * 2) / 2, 11);
    fill<<<1024, 256>>>(x, (size_t)rows * 14336, 12);
    cudaDeviceSynchronize();
    printf("rows %d; us per product (median of 7 windows of 20), W read in TB/s\n", rows);
    printf("%-8s %14s %14s", "shape", "plain", "bf16 out");
    for (int S : slices)
        printf(" %11s=%d", "S", S);
    printf("\n");
    for (const shape &s : shapes) {
        size_t wbytes = (size_t)s.out * s.in * 2;
        int copies = (int)std::max<size_t>(1, pool / wbytes); // W's copies in the pool
        printf("%-8s", s.name);
        for (int mode = -2; mode < (int)(sizeof slices / sizeof slices[0]); mode++) {
            int S = mode < 0 ? 1 : slices[mode];
            if (s.in % (S * 8) != 0) {
                printf(" %14s", "-");
                continue;
            }
            int ks = s.in / S;
            float us = median_us(e0, e1, [&](int call) {
                const __nv_bfloat16 *W = w + (size_t)(call % copies) * s.out * s.in;
                float one = 1, zero = 0;
                if (mode < 0) // float out (-2) or bf16 (-1)
                    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.out, rows, s.in, &one, W, CUDA_R_16BF, s.in, x,
                                        CUDA_R_16BF, s.in, &zero, y, mode == -2 ? CUDA_R_32F : CUDA_R_16BF, s.out,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
                return cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.out, rows, ks, &one, W, CUDA_R_16BF,
                                                  s.in, ks, x, CUDA_R_16BF, s.in, ks, &zero, y, CUDA_R_32F, s.out,
                                                  (long long)s.out * rows, S, CUBLAS_COMPUTE_32F,
                                                  CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
            });
            if (us < 0) {
                printf(" %14s", "failed");
                continue;
            }
            printf(" %7.1f %5.2f", us, wbytes / (us * 1e-6) / 1e12);
        }
        printf("\n");
    }
    // the products after a small kernel, alone and with W prefetched
    // alongside it
    cudaStream_t side;
    cudaEvent_t fork, join;
    if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&join, cudaEventDisableTiming) != cudaSuccess)
        return 1;
    const size_t caps[] = {(size_t)16 << 20, (size_t)32 << 20, (size_t)48 << 20};
    printf("\nafter a 10 us kernel on 32 blocks: us for the pair (median of 7 windows of 20)\n");
    printf("%-8s %8s %12s %12s %12s\n", "shape", "serial", "pf 16 MiB", "pf 32 MiB", "pf 48 MiB");
    for (const shape &s : shapes) {
        size_t wbytes = (size_t)s.out * s.in * 2;
        int copies = (int)std::max<size_t>(1, pool / wbytes);
        printf("%-8s", s.name);
        for (int mode = -1; mode < 3; mode++) {
            float us = median_us(e0, e1, [&](int call) {
                const __nv_bfloat16 *W = w + (size_t)(call % copies) * s.out * s.in;
                float one = 1, zero = 0;
                if (mode >= 0) { // W's first caps[mode] bytes into L2 on the side stream, alongside the wait
                    cudaEventRecord(fork, 0);
                    cudaStreamWaitEvent(side, fork, 0);
                    prefetch_l2<<<8, 128, 0, side>>>((const char *)W, std::min(wbytes, caps[mode]));
                    cudaEventRecord(join, side);
                }
                spin<<<32, 256>>>(10000);
                if (mode >= 0)
                    cudaStreamWaitEvent(0, join, 0);
                return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.out, rows, s.in, &one, W, CUDA_R_16BF, s.in, x,
                                    CUDA_R_16BF, s.in, &zero, y, CUDA_R_32F, s.out, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
            });
            if (us < 0) {
                printf(" %12s", "failed");
                continue;
            }
            printf(mode < 0 ? " %8.1f" : " %12.1f", us);
        }
        printf("\n");
    }
    return 0;
}
