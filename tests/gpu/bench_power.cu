// bench_power.cu — figures, not a test: the bf16 GEMM ceiling held for
// seconds rather than taken as the best of 5 (tb_gpu_measure_ceilings).
// A GEMM-bound workload draws the card's power limit within a fraction of
// a second and the SM clock then drops (docs/PERFORMANCE.md: LLaDA-8B's
// forwards at 700 W and about 1,540 MHz on the H200), so the burst ceiling
// is not what a sustained run can reach. Runs cuBLAS GEMMs of M^3 (bf16 in,
// float32 accumulation and output, random operands: as the ceiling's) back
// to back for `seconds`, timed in windows of 20 with CUDA events, and
// prints the first window, the median window of the last half, and the
// best. Sample the clocks and power alongside (nvidia-smi -lms).
//
//   bench_power [seconds = 5] [M = 8192]
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

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    int M = argc > 2 ? atoi(argv[2]) : 8192;
    if (!(seconds > 0) || M < 256 || M > 16384) {
        fprintf(stderr, "usage: bench_power [seconds > 0] [M in 256..16384]\n");
        return 2;
    }
    size_t n = (size_t)M * M;
    __nv_bfloat16 *a, *b;
    float *c;
    cublasHandle_t h;
    cudaEvent_t e0, e1;
    if (cudaMalloc(&a, n * 2) != cudaSuccess || cudaMalloc(&b, n * 2) != cudaSuccess ||
        cudaMalloc(&c, n * 4) != cudaSuccess || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        fprintf(stderr, "bench_power: no CUDA device, memory or cuBLAS\n");
        return 77;
    }
    fill<<<4096, 256>>>(a, n, 11);
    fill<<<4096, 256>>>(b, n, 12);
    const int per_window = 20;
    float alpha = 1, beta = 0, ms = 0, total = 0;
    std::vector<double> tflops; // per window, in time order
    while (total < seconds * 1e3) {
        cudaEventRecord(e0);
        for (int i = 0; i < per_window; i++)
            if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, M, M, &alpha, a, CUDA_R_16BF, M, b, CUDA_R_16BF, M, &beta,
                             c, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "bench_power: cuBLAS failed\n");
                return 1;
            }
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        total += ms;
        tflops.push_back(2.0 * M * M * (double)M * per_window / (ms * 1e-3) / 1e12);
    }
    if (cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "bench_power: a kernel failed\n");
        return 1;
    }
    std::vector<double> late(tflops.begin() + tflops.size() / 2, tflops.end());
    std::sort(late.begin(), late.end());
    double best = *std::max_element(tflops.begin(), tflops.end());
    printf("bench_power: %d^3 bf16 GEMMs for %.1f s, %zu windows of %d: first %.1f TFLOP/s, median of the last "
           "half %.1f, best %.1f\n",
           M, total / 1e3, tflops.size(), per_window, tflops[0], late[late.size() / 2], best);
    return 0;
}
