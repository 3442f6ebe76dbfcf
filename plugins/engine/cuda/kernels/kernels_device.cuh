// kernels_device.cuh — device helpers the engine's kernel files share
// (kernels_*.cu): programmatic dependent launch, a block's sum, loads of
// a product's elements as float, E4M3 pairs as floats, and the batch-1
// GEMVs' closing RMSNorm. Inline, so each kernel file compiles
// alone (no relocatable device code).
#ifndef TB_ENGINE_KERNELS_DEVICE_CUH
#define TB_ENGINE_KERNELS_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "gpu_kernels.cuh"

// Programmatic dependent launch (sm_90): a kernel launched with the
// attribute (launch(), gpu_internal.cuh) may start while the one before
// it drains, and must wait before it reads what earlier kernels wrote or
// writes what they read; both are no-ops in an ordinary launch.
static __device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
static __device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// The sum of v over the block (every thread gets it); sh: 32 floats of
// shared memory. blockDim.x a multiple of 32.
static __device__ __forceinline__ float block_sum(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, o);
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    __syncthreads();
    if (l == 0)
        sh[w] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.0f;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x == 0)
        sh[0] = v;
    __syncthreads();
    return sh[0];
}


// A product's element as float: float32, or bf16 (the bf16 path's spans,
// whose QKV and gate-up products come out of cuBLAS rounded to bf16)
static __device__ __forceinline__ float2 ld_f2(const float *p) { return *(const float2 *)p; }
static __device__ __forceinline__ float2 ld_f2(const bf16 *p) { return __bfloat1622float2(*(const __nv_bfloat162 *)p); }
static __device__ __forceinline__ float ld_f(const float *p) { return *p; }
static __device__ __forceinline__ float ld_f(const bf16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ float4 ld_f4(const float *p) { return *(const float4 *)p; }
static __device__ __forceinline__ float4 ld_f4(const bf16 *p)
{
    uint2 v = *(const uint2 *)p;
    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&v.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&v.y);
    return make_float4(a.x, a.y, b.x, b.y);
}


// Two E4M3 bytes (low byte first) to floats: the hardware conversion to
// half (exact: every E4M3 value is a half), then to float.
static __device__ __forceinline__ float2 e4m3x2_to_float2(unsigned short v)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2 *>(&h));
}

// Whether this block is the last of n to arrive at *count (zero between
// launches; the last one resets it), for the kernels whose last block
// finishes what the others wrote (split-K sums, the GEMVs' closing norm,
// the MoE combine and router). Every thread of the block calls it, after
// this block's writes: the fence orders them before the count, and the
// last block's reads after it (which read other blocks' writes from L2:
// __ldcg). arrived: a __shared__ unsigned of the caller's.
static __device__ __forceinline__ bool last_block_to_arrive(unsigned *count, unsigned n, unsigned *arrived)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        *arrived = atomicAdd(count, 1u);
    __syncthreads();
    if (*arrived != n - 1)
        return false;
    __threadfence();
    if (threadIdx.x == 0)
        *count = 0; // ready for the next launch
    return true;
}

// Warps of the batch-1 GEMVs' blocks (k_gemv, k_gemv_fp8)
#define GEMV_WARPS 4

// RMSNorm of x[h] (float) with weights w into y (bf16) by one block,
// k_rmsnorm's arithmetic; x is read from L2 (other blocks wrote it). One
// block does it alone at the end of a GEMV (k_gemv, k_gemv_fp8: NORM_OUT), so its latency is the cost:
// each thread issues all its 16-byte loads of x at once and keeps them in
// registers (h <= 4 x 8 x blockDim.x, h % 4 == 0: 4,096 for the GEMV's
// 128 threads; else a plain strided loop); few registers, so the GEMV
// around it keeps its occupancy.
#define NORM_BY_BLOCK_CHUNKS 8
static __device__ void rmsnorm_by_block(const float *x, const float *w, float eps, int h, bf16 *y, float *red)
{
    int n4 = h / 4;
    if (h % 4 == 0 && n4 <= NORM_BY_BLOCK_CHUNKS * (int)blockDim.x) {
        float4 xv[NORM_BY_BLOCK_CHUNKS];
        float ss = 0;
#pragma unroll
        for (int k = 0; k < NORM_BY_BLOCK_CHUNKS; k++) {
            int i = threadIdx.x + k * blockDim.x;
            xv[k] = i < n4 ? __ldcg(reinterpret_cast<const float4 *>(x) + i) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < NORM_BY_BLOCK_CHUNKS; k++)
            ss += xv[k].x * xv[k].x + xv[k].y * xv[k].y + xv[k].z * xv[k].z + xv[k].w * xv[k].w;
        ss = block_sum(ss, red);
        float inv = rsqrtf(ss / h + eps);
#pragma unroll
        for (int k = 0; k < NORM_BY_BLOCK_CHUNKS; k++) {
            int i = threadIdx.x + k * blockDim.x;
            if (i < n4) {
                float4 wv = __ldg(reinterpret_cast<const float4 *>(w) + i);
                __nv_bfloat162 *yo = reinterpret_cast<__nv_bfloat162 *>(y) + 2 * i;
                yo[0] = __floats2bfloat162_rn(wv.x * (xv[k].x * inv), wv.y * (xv[k].y * inv));
                yo[1] = __floats2bfloat162_rn(wv.z * (xv[k].z * inv), wv.w * (xv[k].w * inv));
            }
        }
        return;
    }
    float ss = 0;
    for (int i = threadIdx.x; i < h; i += blockDim.x) {
        float v = __ldcg(x + i);
        ss += v * v;
    }
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / h + eps);
    for (int i = threadIdx.x; i < h; i += blockDim.x)
        y[i] = __float2bfloat16(w[i] * (__ldcg(x + i) * inv));
}

#endif
