// kernels_norm.cu — RMSNorm into bf16 (CPU twin: cpu_forward.c's
// rmsnorm; the GEMV's fused norm is kernels_gemv.cu's rmsnorm_by_block).
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

// k_rmsnorm's output of four values: y[4 i ..] = bf16(w x inv), 8 bytes
__device__ __forceinline__ void norm_out4(bf16 *y, int i, float4 a, float4 ww, float inv)
{
    __nv_bfloat162 lo = __floats2bfloat162_rn(ww.x * (a.x * inv), ww.y * (a.y * inv));
    __nv_bfloat162 hi = __floats2bfloat162_rn(ww.z * (a.z * inv), ww.w * (a.w * inv));
    uint2 v;
    v.x = *reinterpret_cast<unsigned *>(&lo);
    v.y = *reinterpret_cast<unsigned *>(&hi);
    reinterpret_cast<uint2 *>(y)[i] = v;
}

// float4s a thread keeps of its row (k_rmsnorm): 256 threads x 4 x 4 =
// a 4096-wide row, 1024 threads a 16384-wide one
#define NORM_KEEP 4
// y[o] = bf16(x[r] / rms(x[r]) * w), one block per output row o: with
// (n, r0, nr) = (1, 0, 1) every row; otherwise rows r0 .. r0 + nr - 1 of
// each sequence of n rows (the LM head's rows). Four floats a load when
// h % 4 == 0 (rows, w and y then 16- and 8-byte aligned), the row read
// once when it fits NORM_KEEP a thread.
__global__ void k_rmsnorm(const float *x, int n, int r0, int nr, const float *w, bf16 *y, int h, float eps)
{
    __shared__ float sh[32];
    griddep_wait();
    griddep_launch();
    int o = blockIdx.x;
    const float *xr = x + ((size_t)(o / nr) * n + r0 + o % nr) * h;
    bf16 *yr = y + (size_t)blockIdx.x * h;
    float ss = 0;
    if (h % 4 == 0 && h / 4 <= NORM_KEEP * (int)blockDim.x) { // the row read once, kept in registers
        const float4 *x4 = reinterpret_cast<const float4 *>(xr), *w4 = reinterpret_cast<const float4 *>(w);
        float4 keep[NORM_KEEP];
#pragma unroll
        for (int k = 0; k < NORM_KEEP; k++) {
            int i = threadIdx.x + k * blockDim.x;
            keep[k] = i < h / 4 ? x4[i] : make_float4(0, 0, 0, 0);
            ss += keep[k].x * keep[k].x + keep[k].y * keep[k].y + keep[k].z * keep[k].z + keep[k].w * keep[k].w;
        }
        ss = block_sum(ss, sh);
        float inv = rsqrtf(ss / h + eps);
#pragma unroll
        for (int k = 0; k < NORM_KEEP; k++) {
            int i = threadIdx.x + k * blockDim.x;
            if (i >= h / 4)
                break;
            norm_out4(yr, i, keep[k], w4[i], inv);
        }
        return;
    }
    if (h % 4 == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(xr), *w4 = reinterpret_cast<const float4 *>(w);
        for (int i = threadIdx.x; i < h / 4; i += blockDim.x) {
            float4 a = x4[i];
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        }
        ss = block_sum(ss, sh);
        float inv = rsqrtf(ss / h + eps);
        for (int i = threadIdx.x; i < h / 4; i += blockDim.x) {
            norm_out4(yr, i, x4[i], w4[i], inv);
        }
        return;
    }
    for (int i = threadIdx.x; i < h; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / h + eps);
    for (int i = threadIdx.x; i < h; i += blockDim.x)
        yr[i] = __float2bfloat16(w[i] * (xr[i] * inv));
}
