// kernels_device.cuh — device helpers the engine's kernel files share
// (kernels_*.cu): programmatic dependent launch, a block's sum, loads of
// a product's elements as float, E4M3 pairs as floats, the batch-1
// GEMVs' closing RMSNorm, one head's QKV epilogue, cp.async. Inline, so each kernel file compiles
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


// cp.async (sm_80+): 16 bytes global -> shared without a register,
// zero-filled when !valid (src is then not read, but must be an address);
// a thread's copies since the last commit form one group, and
// cp_async_wait<N> waits until at most N of its groups are in flight.
static __device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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

// (sw NULL) qkv is the product; under dtype = fp8 (sw, sx given) the bare
// FP8 product, times its row's scale sx[r] and each column's sw[col] here
// (gpu_gemm_fp8.cu's deferred scales).
template <typename In>
static __device__ __forceinline__ float qkv_at(const In *v, const float *sw, float sxr, const float *bb, int i)
{
    float a = sw ? ld_f(v + i) * sxr * sw[i] : ld_f(v + i);
    return bb ? a + bb[i] : a;
}
// qkv_at of dims i, i + 1 (i even; v, sw, bb aligned there)
template <typename In>
static __device__ __forceinline__ float2 qkv_at2(const In *v, const float *sw, float sxr, const float *bb, int i)
{
    float2 a = ld_f2(v + i);
    if (sw) {
        float2 w = *(const float2 *)(sw + i);
        a.x = a.x * sxr * w.x, a.y = a.y * sxr * w.y;
    }
    if (bb) {
        float2 c = *(const float2 *)(bb + i);
        a.x += c.x, a.y += c.y;
    }
    return a;
}

// One warp (lane: its lane): one head of a row's QKV product after the
// GEMM, as every path applies it (k_qkv_post; k_attn_decode_gqa_split_post
// for its own heads): v the head's hd values, bb its bias (NULL: none),
// swh and sxr the FP8 product's scales (swh NULL: none), then Qwen3's
// QK-norm (nw: the head's norm weights, NULL for none: RMSNorm over its
// dims with eps), then the half-split RoPE over its first rd dims (rot:
// [rd / 2] cos, then [rd / 2] sin of the row's angles; NULL for a v
// head: none), into dst as bf16.
template <typename In>
static __device__ __forceinline__ void qkv_head(const In *v, const float *bb, const float *swh, float sxr,
                                                const float *nw, float eps, const float *rot, int hd, int rd,
                                                bf16 *dst, int lane)
{
    int half = rd / 2;
    float inv = 1.0f;
    if (nw) {
        float ss = 0;
        for (int i = lane; i < hd; i += 32) {
            float a = qkv_at(v, swh, sxr, bb, i);
            ss += a * a;
        }
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffff, ss, o);
        inv = rsqrtf(ss / hd + eps);
    }
    if (half % 2 == 0) { // two adjacent pairs a lane: 8-byte loads, 4-byte stores (the same values)
        for (int i = 2 * lane; i < half; i += 64) {
            float2 a = qkv_at2(v, swh, sxr, bb, i), c = qkv_at2(v, swh, sxr, bb, i + half);
            if (nw) {
                a.x = nw[i] * (a.x * inv), a.y = nw[i + 1] * (a.y * inv);
                c.x = nw[i + half] * (c.x * inv), c.y = nw[i + half + 1] * (c.y * inv);
            }
            if (rot) {
                float2 cs = *(const float2 *)(rot + i), sn = *(const float2 *)(rot + half + i);
                float2 ra = {a.x * cs.x - c.x * sn.x, a.y * cs.y - c.y * sn.y};
                float2 rc = {c.x * cs.x + a.x * sn.x, c.y * cs.y + a.y * sn.y};
                a = ra, c = rc;
            }
            *(__nv_bfloat162 *)(dst + i) = __floats2bfloat162_rn(a.x, a.y);
            *(__nv_bfloat162 *)(dst + i + half) = __floats2bfloat162_rn(c.x, c.y);
        }
    } else {
        for (int i = lane; i < half; i += 32) {
            float a = qkv_at(v, swh, sxr, bb, i), c = qkv_at(v, swh, sxr, bb, i + half);
            if (nw)
                a = nw[i] * (a * inv), c = nw[i + half] * (c * inv);
            if (rot) { /* q or k: rotate */
                float cs = rot[i], sn = rot[half + i];
                float ra = a * cs - c * sn, rc = c * cs + a * sn;
                a = ra, c = rc;
            }
            dst[i] = __float2bfloat16(a);
            dst[i + half] = __float2bfloat16(c);
        }
    }
    for (int i = rd + lane; i < hd; i += 32) { // the unrotated dims
        float a = qkv_at(v, swh, sxr, bb, i);
        if (nw)
            a = nw[i] * (a * inv);
        dst[i] = __float2bfloat16(a);
    }
}

#endif
