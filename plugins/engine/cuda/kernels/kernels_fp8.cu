// kernels_fp8.cu — dtype = fp8 on the device: quantizing weights and
// activations to E4M3 with power-of-two row scales, dequantizing, the
// deferred scales, and the batch-1 FP8 GEMV (CPU twin: fp8.h's
// tb_fp8_quantize_rows and cpu_forward.c's fp8_act_round).
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

#include <cuda_fp8.h>

#include "fp8.h"

// dtype = fp8 (fp8.h). Quantize W[rows][in] (bf16) row by row, one block
// per row: the row's largest magnitude, its power-of-two scale, and each
// value's E4M3 byte, with fp8.h's functions (the CPU path's, so both give
// the same byte for the same value; tests compare the weights' bytes).
// The weights at load (spans' inputs: k_fp8_quant_act).
__global__ void k_fp8_quantize_rows(const bf16 *w, int in, uint8_t *q, float *scale)
{
    __shared__ float red[32];
    const bf16 *wr = w + (size_t)blockIdx.x * in;
    float amax = 0.0f;
    for (int i = threadIdx.x; i < in; i += blockDim.x)
        amax = fmaxf(amax, fabsf(__bfloat162float(wr[i])));
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = amax;
    __syncthreads();
    amax = 0.0f;
    for (int i = 0; i < (int)(blockDim.x / 32); i++)
        amax = fmaxf(amax, red[i]);
    int k = tb_fp8_scale_exp(amax);
    if (threadIdx.x == 0)
        scale[blockIdx.x] = ldexpf(1.0f, k);
    for (int i = threadIdx.x; i < in; i += blockDim.x)
        q[(size_t)blockIdx.x * in + i] = tb_e4m3_encode(ldexpf(__bfloat162float(wr[i]), -k));
}

// max(amax, |each of the eight bf16 values in v|)
__device__ __forceinline__ float amax8(uint4 v, float amax)
{
    const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 f = __bfloat1622float2(e[k]);
        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
    return amax;
}

// The block's largest of its threads' amax (every thread calls it; red:
// the caller's __shared__ floats, one a warp) as fp8.h's power-of-two
// scale exponent, the same in every thread.
__device__ __forceinline__ int block_fp8_scale_exp(float amax, float *red)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
    if (lane == 0)
        red[warp] = amax;
    __syncthreads();
    amax = red[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++)
        amax = fmaxf(amax, red[w]);
    return tb_fp8_scale_exp(amax);
}

// v / 2^k as two exact power-of-two steps (2^-k alone overflows a float
// below k = -127, for rows whose largest magnitude is under 2^-119, where
// the CPU's ldexpf stays finite): (d1, d2) = fp8_unscale(k).
__device__ __forceinline__ float2 fp8_unscale(int k)
{
    return make_float2(ldexpf(1.0f, -k / 2), ldexpf(1.0f, -k - -k / 2));
}

// Eight bf16 values v (16 bytes) as E4M3 codes of v / 2^k, (d1, d2) =
// fp8_unscale(k): the hardware's conversion (nearest, ties to even,
// saturating at +-448: what tb_e4m3_encode gives every finite value).
__device__ __forceinline__ uint2 fp8_codes8(uint4 v, float2 d)
{
    const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&v);
    unsigned short b[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 f = __bfloat1622float2(e[j]);
        b[j] = __nv_cvt_float2_to_fp8x2(make_float2(f.x * d.x * d.y, f.y * d.x * d.y), __NV_SATFINITE, __NV_E4M3);
    }
    return make_uint2(b[0] | (unsigned)b[1] << 16, b[2] | (unsigned)b[3] << 16);
}

// A span's projection input X[rows][in] (bf16) as E4M3 codes q[rows][in]
// and one power-of-two scale a row (fp8.h; in % 8 == 0): one block a row,
// 16-byte loads, the largest magnitude, then each value / scale by the
// hardware's conversion (round to nearest even, saturating at +-448: what
// tb_e4m3_encode gives every finite value). The row is read twice, the
// second time from L1/L2.
__global__ void __launch_bounds__(FP8_QUANT_THREADS) k_fp8_quant_act(const bf16 *x, int in, uint8_t *q, float *scale)
{
    __shared__ float red[FP8_QUANT_THREADS / 32];
    const uint4 *xr = reinterpret_cast<const uint4 *>(x + (size_t)blockIdx.x * in);
    uint2 *qr = reinterpret_cast<uint2 *>(q + (size_t)blockIdx.x * in);
    int chunks = in / 8;
    float amax = 0.0f;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x)
        amax = amax8(xr[c], amax);
    int k = block_fp8_scale_exp(amax, red);
    float2 d = fp8_unscale(k);
    if (threadIdx.x == 0)
        scale[blockIdx.x] = ldexpf(1.0f, k);
    for (int c = threadIdx.x; c < chunks; c += blockDim.x)
        qr[c] = fp8_codes8(xr[c], d);
}

// The scales of an unscaled FP8 product t[rows][out] (gpu_gemm_fp8.cu's
// small spans): y[r][o] = beta y[r][o] + t[r][o] sx[r] sw[o] (y not read
// when beta is 0).
__global__ void k_fp8_scale_out(const float *t, const float *sx, const float *sw, float *y, int rows, int out,
                                float beta)
{
    size_t n = (size_t)rows * out;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / out), o = (int)(i % out);
        float v = t[i] * sx[r] * sw[o];
        y[i] = beta != 0.0f ? y[i] * beta + v : v;
    }
}

// Dequantize for the cuBLAS path (more than one row): out[r][i] =
// bf16(e4m3(q[r][i]) x scale[r]) over n = rows x in weights, 16 a thread
// (in % 16 == 0). Exact: an E4M3 value times a power of two is a bf16.
__global__ void k_fp8_dequant(const uint8_t *q, const float *scale, int in, size_t n, bf16 *out)
{
    size_t chunks = n / 16;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < chunks; c += (size_t)gridDim.x * blockDim.x) {
        uint4 v = reinterpret_cast<const uint4 *>(q)[c];
        float s = scale[c * 16 / in];
        const unsigned short *p = reinterpret_cast<const unsigned short *>(&v);
        uint4 o[2];
        __nv_bfloat162 *e = reinterpret_cast<__nv_bfloat162 *>(o);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float2 f = e4m3x2_to_float2(p[k]);
            e[k] = __floats2bfloat162_rn(f.x * s, f.y * s);
        }
        reinterpret_cast<uint4 *>(out)[2 * c] = o[0];
        reinterpret_cast<uint4 *>(out)[2 * c + 1] = o[1];
    }
}

// The batch-1 FP8 product y[out] (+)= sx scale[o] (Q[out][in] e4m3(x / sx)),
// Q the E4M3 codes, x's own E4M3 form taken here (fp8.h: its power-of-two
// scale sx from max|x|, which every block computes for itself, x being a
// few KiB in L2): k_gemv's layout (each warp FP8_ROWS rows, lanes over
// 16-byte chunks, now 16 weights each, and the matching 32 bytes of x),
// products and sums in float32, the two scales applied once at the end.
// Half the weight bytes of the bf16 GEMV; in % 16 == 0.
//
// k_gemv's two decode fusions (kernels_gemv.cu), with its contracts:
// SWIGLU (out counts (gate, up) row pairs of the [2I][in] codes; act[i] =
// bf16(silu(gate) up), gate and up each the float k_swiglu would have read
// from y) and NORM_OUT (the grid's last block to finish leaves the RMSNorm
// of the whole y in xn). So an FP8 decode step launches the kernels a bf16
// one does. PDL: only the weights' L2 prefetch before griddep_wait().
template <int FP8_ROWS, int UNROLL, bool SWIGLU, bool NORM_OUT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_fp8(const uint8_t *__restrict__ q, const float *__restrict__ scale, const bf16 *__restrict__ x,
               const float *__restrict__ nw, float eps, float *__restrict__ y, bf16 *__restrict__ act,
               bf16 *__restrict__ xn, int out, int in, float beta, int prefetch, unsigned *__restrict__ done)
{
    static_assert(!SWIGLU || (FP8_ROWS % 2 == 0 && !NORM_OUT), "SwiGLU pairs are whole rows of their own output");
    __shared__ float red[32];
    __shared__ unsigned arrived;
    griddep_launch();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int P = SWIGLU ? FP8_ROWS / 2 : FP8_ROWS; // outputs per warp
    int o0 = (blockIdx.x * GEMV_WARPS + warp) * P;
    int chunks = in / 16;
    const uint4 *wr[FP8_ROWS];
    float acc[FP8_ROWS];
#pragma unroll
    for (int r = 0; r < FP8_ROWS; r++) {
        int o = o0 + (SWIGLU ? r % P : r);
        o = o < out ? o : out - 1; // a tail row recomputes the last one
        int row = SWIGLU && r >= P ? out + o : o;
        wr[r] = reinterpret_cast<const uint4 *>(q + (size_t)row * in);
        acc[r] = 0;
    }
    // the first UNROLL chunks each lane will load, into L2 (under PDL,
    // while the kernel before drains)
#pragma unroll
    for (int u = 0; u < UNROLL; u++)
#pragma unroll
        for (int r = 0; r < FP8_ROWS; r++)
            if (prefetch && lane + 32 * u < chunks)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(wr[r] + lane + 32 * u));
    griddep_wait();
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    float amax = 0.0f;
    for (int c = threadIdx.x; c < 2 * chunks; c += blockDim.x)
        amax = amax8(__ldg(xv + c), amax);
    int sx = block_fp8_scale_exp(amax, red);
    float2 d = fp8_unscale(sx);
    // the NORM_OUT barrier below needs every warp: none returns early then
    if (!NORM_OUT && o0 >= out)
        return;
#pragma unroll UNROLL
    for (int c = lane; c < chunks; c += 32) {
        uint4 x0 = __ldg(xv + 2 * c), x1 = __ldg(xv + 2 * c + 1);
        float xf[16];
        const __nv_bfloat162 *xa = reinterpret_cast<const __nv_bfloat162 *>(&x0);
        const __nv_bfloat162 *xb = reinterpret_cast<const __nv_bfloat162 *>(&x1);
#pragma unroll
        for (int k = 0; k < 4; k++) { // x / sx rounded to E4M3 (as tb_e4m3_encode: nearest, ties to even, +-448)
            float2 a = __bfloat1622float2(xa[k]), b = __bfloat1622float2(xb[k]);
            a = e4m3x2_to_float2(__nv_cvt_float2_to_fp8x2(make_float2(a.x * d.x * d.y, a.y * d.x * d.y),
                                                          __NV_SATFINITE, __NV_E4M3));
            b = e4m3x2_to_float2(__nv_cvt_float2_to_fp8x2(make_float2(b.x * d.x * d.y, b.y * d.x * d.y),
                                                          __NV_SATFINITE, __NV_E4M3));
            xf[2 * k] = a.x, xf[2 * k + 1] = a.y, xf[8 + 2 * k] = b.x, xf[8 + 2 * k + 1] = b.y;
        }
#pragma unroll
        for (int r = 0; r < FP8_ROWS; r++) {
            uint4 wc = __ldg(wr[r] + c);
            const unsigned short *p = reinterpret_cast<const unsigned short *>(&wc);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float2 f = e4m3x2_to_float2(p[k]);
                acc[r] += f.x * xf[2 * k] + f.y * xf[2 * k + 1];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FP8_ROWS; r++)
        for (int o = 16; o > 0; o >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffff, acc[r], o);
    float up = ldexpf(1.0f, sx);
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < P; r++) {
            int o = o0 + r;
            if (o >= out)
                break;
            if (SWIGLU) {
                float gt = acc[r] * scale[o] * up, u = acc[r + P] * scale[out + o] * up;
                act[o] = __float2bfloat16(gt / (1.0f + __expf(-gt)) * u);
            } else {
                float v = acc[r] * scale[o] * up;
                y[o] = beta != 0.0f ? y[o] * beta + v : v;
            }
        }
    if (NORM_OUT && last_block_to_arrive(done, gridDim.x, &arrived))
        rmsnorm_by_block(y, nw, eps, out, xn, red);
}

// The batch-1 FP8 product on tensor cores (variants 5-7): what
// k_gemv_fp8 computes, with the products summed by mma.sync's E4M3 form
// (m16n8k32, float32 out) in place of converting every code to float on
// the CUDA cores (two conversions and an FMA a weight, which bound
// k_gemv_fp8 below the bandwidth). A block holds 16 weight rows (SWIGLU:
// 8 gate rows and their 8 up rows) and W warps split their K, 64 codes a
// row a step: the quad of lanes q = 0..3 of group g (lane = 4 g + q) loads
// 16 bytes of row g and of row g + 8 at k = 64 t + 16 q, the two halves of
// which are two mma's A fragments; B is x's codes at the same k (staged in
// shared memory by every block, from max|x| as k_gemv_fp8 takes it), in
// every column, so each lane's D holds rows g and g + 8. Which k of the
// 32 an A byte stands for does not matter so long as its B byte stands
// for the same one: A's register a0 (rows g, g + 8: a1) meets B's b0, a2
// (a3) meets b1 (PTX ISA, "Matrix fragments for mma.m16n8k32"). Each mma
// starts from zero and its sum is added in float32 (the tensor core's
// own accumulation of a long K keeps fewer bits). The sum's order is not
// k_gemv_fp8's: these variants round apart from variants 0-4 (tested
// within the FP8 tensor-core GEMM's bound, test_gpu.c's
// check_fp8_products). in % 16 == 0; dynamic shared memory: in rounded
// up to 64 bytes.
const size_t FP8_MMA_MAX_IN = 46 * 1024; // x's codes in shared memory, within the 48 KB without opting in

// One mma.sync m16n8k32 over E4M3 (float32 out, from zero): A's fragment
// a0..a3, B's b0 b1 (PTX ISA, "Matrix fragments for mma.m16n8k32");
// returns D's d0 and d2 (rows groupID and groupID + 8 of the lane).
__device__ __forceinline__ float2 mma_e4m3(unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                          unsigned b1)
{
    float d[4]; // d[1], d[3]: D's odd columns, which the GEMV does not use
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
    return make_float2(d[0], d[2]);
}

// k_gemv_fp8_mma's loads of U steps from step t0 (a warp's steps are W
// apart): 16 bytes of rows a and b each at k = 64 t + 16 qd, zero past in.
template <int W, int U>
__device__ __forceinline__ void load_fp8_mma_steps(const uint8_t *wa, const uint8_t *wb, int t0, int steps, int in,
                                                   int qd, uint4 *A, uint4 *B)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        int t = t0 + u * W;
        bool in_k = t < steps && 64 * t + 16 * qd < in;
        A[u] = in_k ? __ldg(reinterpret_cast<const uint4 *>(wa + 64 * t)) : make_uint4(0, 0, 0, 0);
        B[u] = in_k ? __ldg(reinterpret_cast<const uint4 *>(wb + 64 * t)) : make_uint4(0, 0, 0, 0);
    }
}

template <int W, int U, bool SWIGLU, bool NORM_OUT>
__global__ void __launch_bounds__(W * 32)
    k_gemv_fp8_mma(const uint8_t *__restrict__ q, const float *__restrict__ scale, const bf16 *__restrict__ x,
                   const float *__restrict__ nw, float eps, float *__restrict__ y, bf16 *__restrict__ act,
                   bf16 *__restrict__ xn, int out, int in, float beta, int prefetch, unsigned *__restrict__ done)
{
    static_assert(!(SWIGLU && NORM_OUT), "SwiGLU writes act, not y");
    extern __shared__ __align__(16) uint8_t xq[]; // x's E4M3 codes
    __shared__ float red[32];
    __shared__ float part[W][16];
    __shared__ unsigned arrived;
    griddep_launch();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
    constexpr int P = SWIGLU ? 8 : 16; // outputs a block
    int o0 = blockIdx.x * P;
    int ra, rb; // the weight rows of tile rows g and g + 8 (a tail recomputes the last row)
    if (SWIGLU) {
        int o = min(o0 + g, out - 1);
        ra = o, rb = out + o;
    } else {
        ra = min(o0 + g, out - 1), rb = min(o0 + g + 8, out - 1);
    }
    const uint8_t *wa = q + (size_t)ra * in + 16 * qd, *wb = q + (size_t)rb * in + 16 * qd;
    int steps = (in + 63) / 64;
    // this warp's first U steps of codes, loaded before the wait (the
    // weights are no kernel's output, so under PDL they stream while the
    // kernel before drains) and in flight through x's staging below
    uint4 A[U], B[U];
    load_fp8_mma_steps<W, U>(wa, wb, warp, steps, in, qd, A, B);
    (void)prefetch; // k_gemv_fp8's L2 prefetch under PDL; these loads are made in every launch
    griddep_wait();
    // max |x|, its power-of-two scale, and x's codes into shared memory;
    // x read once into registers where it fits (XC chunks of 8 a thread:
    // its L2 round trips are this prologue's latency), else twice
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    int chunks = in / 8;
    constexpr int XC = 8;
    bool held = chunks <= XC * W * 32;
    uint4 xr[XC];
    float amax = 0.0f;
    if (held) {
#pragma unroll
        for (int j = 0; j < XC; j++) {
            int c = threadIdx.x + j * W * 32;
            xr[j] = c < chunks ? __ldg(xv + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < XC; j++)
            amax = amax8(xr[j], amax);
    } else {
        for (int c = threadIdx.x; c < chunks; c += blockDim.x)
            amax = amax8(__ldg(xv + c), amax);
    }
    int sx = block_fp8_scale_exp(amax, red);
    float2 d = fp8_unscale(sx);
    if (held) {
#pragma unroll
        for (int j = 0; j < XC; j++) {
            int c = threadIdx.x + j * W * 32;
            if (c < chunks)
                reinterpret_cast<uint2 *>(xq)[c] = fp8_codes8(xr[j], d);
        }
    } else {
        for (int c = threadIdx.x; c < chunks; c += blockDim.x)
            reinterpret_cast<uint2 *>(xq)[c] = fp8_codes8(__ldg(xv + c), d);
    }
    __syncthreads();
    float sa = 0.0f, sb = 0.0f; // rows g and g + 8: this warp's part of the K sum
    for (int t0 = warp; t0 < steps; t0 += W * U) {
        uint4 X[U], An[U], Bn[U];
#pragma unroll
        for (int u = 0; u < U; u++) { // x's codes at these steps (zero past in, as A's and B's)
            int t = t0 + u * W;
            X[u] = t < steps && 64 * t + 16 * qd < in ? *reinterpret_cast<const uint4 *>(xq + 64 * t + 16 * qd)
                                                       : make_uint4(0, 0, 0, 0);
        }
        load_fp8_mma_steps<W, U>(wa, wb, t0 + W * U, steps, in, qd, An, Bn); // the next U steps in flight
#pragma unroll
        for (int u = 0; u < U; u++) { // bytes 0-7 of the 16 of rows g and g + 8, then 8-15
            float2 d = mma_e4m3(A[u].x, B[u].x, A[u].y, B[u].y, X[u].x, X[u].y);
            float2 e = mma_e4m3(A[u].z, B[u].z, A[u].w, B[u].w, X[u].z, X[u].w);
            sa += d.x, sb += d.y;
            sa += e.x, sb += e.y;
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            A[u] = An[u], B[u] = Bn[u];
    }
    if (qd == 0) // the quad's four lanes hold the same sums (every column of B is x)
        part[warp][g] = sa, part[warp][g + 8] = sb;
    __syncthreads();
    float up = ldexpf(1.0f, sx);
    if (threadIdx.x < P) {
        int r = threadIdx.x, o = o0 + r;
        float v = 0.0f, v2 = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) // the warps' parts in one order
            v += part[w][r], v2 += SWIGLU ? part[w][r + 8] : 0.0f;
        if (o < out) {
            if (SWIGLU) {
                float gt = v * scale[o] * up, u = v2 * scale[out + o] * up;
                act[o] = __float2bfloat16(gt / (1.0f + __expf(-gt)) * u);
            } else {
                float val = v * scale[o] * up;
                y[o] = beta != 0.0f ? y[o] * beta + val : val;
            }
        }
    }
    if (NORM_OUT && last_block_to_arrive(done, gridDim.x, &arrived))
        rmsnorm_by_block(y, nw, eps, out, xn, red);
}

namespace tbgpu {

template <int R, int U, bool SWIGLU, bool NORM_OUT>
static void gemv_fp8_launch(tb_gpu *g, const gemv_args &a, int pdl)
{
    constexpr int P = SWIGLU ? R / 2 : R;
    unsigned blocks = (unsigned)((a.out + P * GEMV_WARPS - 1) / (P * GEMV_WARPS));
    launch(g, k_gemv_fp8<R, U, SWIGLU, NORM_OUT>, dim3(blocks), dim3(GEMV_WARPS * 32), 0, pdl, a.q, a.s, a.x, a.nw,
           a.eps, a.y, a.act, a.xn, a.out, a.in, a.beta, pdl, g->gemv_count + g->gemv_part_out);
}

// The tensor-core FP8 GEMV (k_gemv_fp8_mma) with W warps a block and U
// steps of loads in flight; false (nothing launched) where x's codes would
// not fit the 48 KB of shared memory a kernel has without opting in.
template <int W, int U, bool SWIGLU, bool NORM_OUT>
static bool gemv_fp8_mma_launch(tb_gpu *g, const gemv_args &a, int pdl)
{
    size_t smem = ((size_t)a.in + 63) / 64 * 64;
    if (smem > FP8_MMA_MAX_IN)
        return false;
    constexpr int P = SWIGLU ? 8 : 16;
    unsigned blocks = (unsigned)((a.out + P - 1) / P);
    launch(g, k_gemv_fp8_mma<W, U, SWIGLU, NORM_OUT>, dim3(blocks), dim3(W * 32), smem, pdl, a.q, a.s, a.x, a.nw,
           a.eps, a.y, a.act, a.xn, a.out, a.in, a.beta, pdl, g->gemv_count + g->gemv_part_out);
    return true;
}

// The FP8 GEMV's variants (rows per warp, loads in flight per lane; the
// tensor-core ones: warps a block, steps in flight; gpu_tune.h's
// tb_gpu_set_fp8_gemv). A SwiGLU pair needs two rows a warp, so the
// one-row shapes take their two-row form there; a tensor-core variant
// whose input is too wide for its shared memory runs variant 3.
template <bool SWIGLU, bool NORM_OUT>
static void gemv_fp8_pick(tb_gpu *g, const gemv_args &a, int variant, int pdl)
{
    switch (variant) {
    case 1:
        gemv_fp8_launch<2, 8, SWIGLU, NORM_OUT>(g, a, pdl);
        break;
    case 2:
        gemv_fp8_launch<SWIGLU ? 2 : 1, 8, SWIGLU, NORM_OUT>(g, a, pdl);
        break;
    case 3:
        gemv_fp8_launch<2, 4, SWIGLU, NORM_OUT>(g, a, pdl);
        break;
    case 4:
        gemv_fp8_launch<SWIGLU ? 2 : 1, 16, SWIGLU, NORM_OUT>(g, a, pdl);
        break;
    case 5:
        if (gemv_fp8_mma_launch<8, 2, SWIGLU, NORM_OUT>(g, a, pdl))
            break;
        gemv_fp8_launch<2, 4, SWIGLU, NORM_OUT>(g, a, pdl);
        break;
    case 6:
        if (gemv_fp8_mma_launch<8, 4, SWIGLU, NORM_OUT>(g, a, pdl))
            break;
        gemv_fp8_launch<2, 4, SWIGLU, NORM_OUT>(g, a, pdl);
        break;
    case 7:
        if (gemv_fp8_mma_launch<16, 2, SWIGLU, NORM_OUT>(g, a, pdl))
            break;
        gemv_fp8_launch<2, 4, SWIGLU, NORM_OUT>(g, a, pdl);
        break;
    default:
        gemv_fp8_launch<4, 4, SWIGLU, NORM_OUT>(g, a, pdl);
    }
}

int fp8_variant_for(const tb_gpu *g, int out, int in)
{
    if (g->fp8_forced)
        return g->fp8_variant;
    for (int i = 0; i < g->n_fp8_shapes; i++)
        if (g->fp8_shapes[i].out == out && g->fp8_shapes[i].in == in)
            return g->fp8_shapes[i].variant;
    return g->fp8_variant;
}

void gemv_fp8(tb_gpu *g, const uint8_t *q, const float *scale, const bf16 *x, float *y, int out, int in, float beta,
              int variant)
{
    gemv_args a = {NULL, x, y, NULL, NULL, NULL, 0.0f, out, in, beta, q, scale};
    gemv_fp8_pick<false, false>(g, a, variant >= 0 ? variant : fp8_variant_for(g, out, in), 0);
}

void gemv_fp8_fused(tb_gpu *g, const gemv_args &a, int pdl)
{
    // a SwiGLU GEMV's codes have 2 out rows
    int variant = fp8_variant_for(g, a.act ? 2 * a.out : a.out, a.in);
    if (a.act)
        gemv_fp8_pick<true, false>(g, a, variant, pdl);
    else if (a.xn)
        gemv_fp8_pick<false, true>(g, a, variant, pdl);
    else
        gemv_fp8_pick<false, false>(g, a, variant, pdl);
}

} // namespace tbgpu
