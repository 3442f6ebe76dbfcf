// kernels_embed.cu — the device's element-wise bookkeeping: seeded random
// weights (CPU twin: model.c's fill_random; the device draws its own, so
// the two agree in distribution, not in value), float to bf16, the
// embedding lookup (CPU twin: cpu_forward.c's forward_seqs' embedding
// rows) and the
// decode graph's position counter.
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

__global__ void k_init_uniform(bf16 *p, size_t n, uint64_t seed, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        p[i] = __float2bfloat16(a * (2.0f * (float)(z >> 40) / 16777216.0f - 1.0f));
    }
}

__global__ void k_f32_to_bf16(const float *src, bf16 *dst, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ void k_embed(const int32_t *tok, const bf16 *emb, float *x, int h)
{
    const bf16 *row = emb + (size_t)tok[blockIdx.x] * h;
    for (int i = threadIdx.x; i < h; i += blockDim.x)
        x[(size_t)blockIdx.x * h + i] = __bfloat162float(row[i]);
}

__global__ void k_incr(int *p) { *p += 1; }
