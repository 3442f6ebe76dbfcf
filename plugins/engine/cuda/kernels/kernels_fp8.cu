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

// v / 2^k as two exact power-of-two steps (2^-k alone overflows a float
// below k = -127, for rows whose largest magnitude is under 2^-119, where
// the CPU's ldexpf stays finite): (d1, d2) = fp8_unscale(k).
__device__ __forceinline__ float2 fp8_unscale(int k)
{
    return make_float2(ldexpf(1.0f, -k / 2), ldexpf(1.0f, -k - -k / 2));
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
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        uint4 v = xr[c];
        const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(e[k]);
            amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = amax;
    __syncthreads();
    amax = red[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++)
        amax = fmaxf(amax, red[w]);
    int k = tb_fp8_scale_exp(amax);
    float2 d = fp8_unscale(k);
    if (threadIdx.x == 0)
        scale[blockIdx.x] = ldexpf(1.0f, k);
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        uint4 v = xr[c];
        const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&v);
        unsigned short b[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(e[j]);
            b[j] = __nv_cvt_float2_to_fp8x2(make_float2(f.x * d.x * d.y, f.y * d.x * d.y), __NV_SATFINITE,
                                            __NV_E4M3);
        }
        qr[c] = make_uint2(b[0] | (unsigned)b[1] << 16, b[2] | (unsigned)b[3] << 16);
    }
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
    for (int c = threadIdx.x; c < 2 * chunks; c += blockDim.x) {
        uint4 v = __ldg(xv + c);
        const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(e[k]);
            amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
    if (lane == 0)
        red[warp] = amax;
    __syncthreads();
    amax = red[0];
#pragma unroll
    for (int w = 1; w < GEMV_WARPS; w++)
        amax = fmaxf(amax, red[w]);
    int sx = tb_fp8_scale_exp(amax);
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

namespace tbgpu {

template <int R, int U, bool SWIGLU, bool NORM_OUT>
static void gemv_fp8_launch(tb_gpu *g, const gemv_args &a, int pdl)
{
    constexpr int P = SWIGLU ? R / 2 : R;
    unsigned blocks = (unsigned)((a.out + P * GEMV_WARPS - 1) / (P * GEMV_WARPS));
    launch(g, k_gemv_fp8<R, U, SWIGLU, NORM_OUT>, dim3(blocks), dim3(GEMV_WARPS * 32), 0, pdl, a.q, a.s, a.x, a.nw,
           a.eps, a.y, a.act, a.xn, a.out, a.in, a.beta, pdl, g->gemv_count + g->gemv_part_out);
}

// The FP8 GEMV's variants (rows per warp, loads in flight per lane;
// gpu_tune.h's tb_gpu_set_fp8_gemv). A SwiGLU pair needs two rows a warp,
// so the one-row shapes take their two-row form there.
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
