// kernels_gemv.cu — the MLP's element-wise SwiGLU and the batch-1 GEMV
// with its fusions (CPU twin: cpu_forward.c's matmul_t at one row, the
// SwiGLU of layer_forward, and rmsnorm for the fused norm).
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

// act[r][i] = silu(gate[r][i]) up[r][i]: a thread per element, so one row
// (decode) still spreads over the whole chip; with inter % 4 == 0 a
// thread per four elements (16-byte loads of gate and up, an 8-byte
// store), the same arithmetic per element.
template <typename In>
__device__ __forceinline__ void swiglu(const In *gu, bf16 *act, int inter, size_t n, const float *sx, const float *sw)
{
    if (inter % 4 == 0) {
        size_t quads = n / 4;
        int iq = inter / 4;
        for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < quads;
             e += (size_t)gridDim.x * blockDim.x) {
            size_t r = e / iq, i = (e % iq) * 4;
            float4 g = ld_f4(gu + r * 2 * inter + i);
            float4 u = ld_f4(gu + r * 2 * inter + inter + i);
            if (sw) { // dtype = fp8's deferred scales (gpu_gemm_fp8.cu)
                float s = sx[r];
                float4 wg = *reinterpret_cast<const float4 *>(sw + i);
                float4 wu = *reinterpret_cast<const float4 *>(sw + inter + i);
                g.x *= s * wg.x, g.y *= s * wg.y, g.z *= s * wg.z, g.w *= s * wg.w;
                u.x *= s * wu.x, u.y *= s * wu.y, u.z *= s * wu.z, u.w *= s * wu.w;
            }
            __nv_bfloat162 lo = __floats2bfloat162_rn(g.x / (1.0f + __expf(-g.x)) * u.x,
                                                      g.y / (1.0f + __expf(-g.y)) * u.y);
            __nv_bfloat162 hi = __floats2bfloat162_rn(g.z / (1.0f + __expf(-g.z)) * u.z,
                                                      g.w / (1.0f + __expf(-g.w)) * u.w);
            uint2 v;
            v.x = *reinterpret_cast<unsigned *>(&lo);
            v.y = *reinterpret_cast<unsigned *>(&hi);
            *reinterpret_cast<uint2 *>(act + r * inter + i) = v;
        }
        return;
    }
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / inter, i = e % inter;
        float g = ld_f(gu + r * 2 * inter + i), u = ld_f(gu + r * 2 * inter + inter + i);
        if (sw)
            g *= sx[r] * sw[i], u *= sx[r] * sw[inter + i];
        act[e] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
    }
}
__global__ void k_swiglu(const float *gu, bf16 *act, int inter, size_t n, const float *sx, const float *sw)
{
    swiglu(gu, act, inter, n, sx, sw);
}
__global__ void k_swiglu_bf16(const bf16 *gu, bf16 *act, int inter, size_t n)
{
    swiglu(gu, act, inter, n, NULL, NULL);
}

// Batch-1 product y[out] (+)= W[out][in] x[in]: each warp computes
// GEMV_ROWS rows, lanes stride over 16-byte chunks (8 bf16) of the rows
// and of x (x is small and stays in L1/L2), so every lane keeps
// GEMV_ROWS x unroll independent 16-byte loads of W in flight. No shared
// memory, no block-wide barrier on the way: the weights stream at memory
// speed.
//
// Split-K (KS > 1, not with SWIGLU): block (x, k) sums the k-th of KS
// slices of every row, writes its partial sums to part [KS][out], and
// the last of the KS blocks of row group x to arrive (count[x], reset by
// it) adds the KS partials in slice order, so the result does not depend
// on which block came last. For outputs of few rows over long inputs
// (Llama-3-8B's o and down projections: 4,096 rows), where one block per
// row group leaves each warp a long row and the chip a long tail.
//
// Two fusions (decode, gpu_forward.cu's fused path):
// - SWIGLU: out counts pairs of rows (gate row i, up row I + i of the
//   [2I][in] gate-up matrix; the warp's first GEMV_ROWS / 2 rows are
//   gates, the rest their ups), and act[i] = bf16(silu(gate) up) is
//   written instead of y: no k_swiglu launch, no float [2I] round trip.
// - NORM_OUT (a GEMV that writes the residual stream y, out = hidden):
//   the last block of the grid to finish (the counter done, reset by it)
//   computes the RMSNorm of the whole y with weights nw into xn, as
//   k_rmsnorm would for the next projection: no k_rmsnorm launch.
//
// PDL: everything before griddep_wait() touches only the weights, which
// nothing writes.

template <int GEMV_ROWS, int UNROLL, bool SWIGLU, int KS, bool NORM_OUT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv(const bf16 *__restrict__ w, const bf16 *__restrict__ x, const float *__restrict__ nw, float eps,
           float *__restrict__ y, bf16 *__restrict__ act, bf16 *__restrict__ xn, int out, int in, float beta,
           int prefetch, float *__restrict__ part, unsigned *__restrict__ count, unsigned *__restrict__ done)
{
    static_assert(!SWIGLU || (KS == 1 && !NORM_OUT), "SwiGLU pairs are whole rows of their own output");
    // the barriers below need every warp: none returns early then
    constexpr bool BARRIERS = KS > 1 || NORM_OUT;
    __shared__ float red[32];
    __shared__ unsigned arrived;
    griddep_launch();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int P = SWIGLU ? GEMV_ROWS / 2 : GEMV_ROWS; // outputs per warp
    int o0 = (blockIdx.x * GEMV_WARPS + warp) * P;
    const uint4 *wr[GEMV_ROWS];
    float acc[GEMV_ROWS];
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++) {
        int o = o0 + (SWIGLU ? r % P : r);
        o = o < out ? o : out - 1; // a tail row recomputes the last one
        int row = SWIGLU && r >= P ? out + o : o;
        wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)row * in);
        acc[r] = 0;
    }
    int chunks = in / 8, c0 = 0, c1 = chunks; // this block's slice of the row's 16-byte chunks
    if (KS > 1) {
        int per = (chunks + KS - 1) / KS;
        c0 = min(chunks, (int)blockIdx.y * per);
        c1 = min(chunks, c0 + per);
    }
    // the first UNROLL chunks each lane will load, into L2 (under PDL,
    // while the kernel before drains)
#pragma unroll
    for (int u = 0; u < UNROLL; u++)
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++)
            if (prefetch && c0 + lane + 32 * u < c1)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(wr[r] + c0 + lane + 32 * u));
    griddep_wait();
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    if (!BARRIERS && o0 >= out)
        return;
#pragma unroll UNROLL
    for (int c = c0 + lane; c < c1; c += 32) {
        uint4 xc = __ldg(xv + c);
        const __nv_bfloat162 *xe = reinterpret_cast<const __nv_bfloat162 *>(&xc);
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++) {
            uint4 wc = __ldg(wr[r] + c);
            const __nv_bfloat162 *we = reinterpret_cast<const __nv_bfloat162 *>(&wc);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 a = __bfloat1622float2(we[k]), b = __bfloat1622float2(xe[k]);
                acc[r] += a.x * b.x + a.y * b.y;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++)
        for (int o = 16; o > 0; o >>= 1)
            acc[r] += __shfl_xor_sync(0xffffffff, acc[r], o);
    if (KS > 1) {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < P; r++)
                if (o0 + r < out)
                    part[(size_t)blockIdx.y * out + o0 + r] = acc[r];
        if (!last_block_to_arrive(count + blockIdx.x, KS, &arrived))
            return;
#pragma unroll
        for (int r = 0; r < P; r++) { // the KS partials, in slice order (L2 reads: other blocks wrote them)
            acc[r] = 0.0f;
#pragma unroll
            for (int k = 0; k < KS; k++)
                acc[r] += o0 + r < out ? __ldcg(part + (size_t)k * out + o0 + r) : 0.0f;
        }
    }
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < P; r++) {
            if (o0 + r >= out)
                break;
            if (SWIGLU) {
                float gt = acc[r], up = acc[r + P];
                act[o0 + r] = __float2bfloat16(gt / (1.0f + __expf(-gt)) * up);
            } else {
                y[o0 + r] = beta != 0.0f ? y[o0 + r] * beta + acc[r] : acc[r];
            }
        }
    if (NORM_OUT && last_block_to_arrive(done, gridDim.x, &arrived))
        rmsnorm_by_block(y, nw, eps, out, xn, red);
}

namespace tbgpu {

// The GEMV variants (rows per warp, loads in flight per lane, K slices);
// tb_gpu_bench_gemv times them on each of the model's shapes at load and
// keeps the fastest per shape (gpu_ceilings.cu).
template <int R, int U, bool SWIGLU, int KS, bool NORM_OUT>
static void gemv_launch(tb_gpu *g, const gemv_args &a, int pdl)
{
    constexpr int P = SWIGLU ? R / 2 : R;
    unsigned blocks = (unsigned)((a.out + P * GEMV_WARPS - 1) / (P * GEMV_WARPS));
    launch(g, k_gemv<R, U, SWIGLU, KS, NORM_OUT>, dim3(blocks, KS), dim3(GEMV_WARPS * 32), 0, pdl, a.w, a.x, a.nw,
           a.eps, a.y, a.act, a.xn, a.out, a.in, a.beta, pdl, g->gemv_part, g->gemv_count,
           g->gemv_count + g->gemv_part_out);
}

template <bool SWIGLU, bool NORM_OUT>
static void gemv_pick(tb_gpu *g, const gemv_args &a, int variant, int pdl)
{
    if (variant >= 4 && a.out > g->gemv_part_out) // wider than the partials buffer: no split
        variant = 3;
    switch (variant) {
    case 1:
        gemv_launch<4, 4, SWIGLU, 1, NORM_OUT>(g, a, pdl);
        break;
    case 2:
        gemv_launch<2, 8, SWIGLU, 1, NORM_OUT>(g, a, pdl);
        break;
    case 3: // one row per warp: a SWIGLU pair needs two, so it takes variant 2's shape
        if constexpr (SWIGLU)
            gemv_launch<2, 8, SWIGLU, 1, NORM_OUT>(g, a, pdl);
        else
            gemv_launch<1, 8, SWIGLU, 1, NORM_OUT>(g, a, pdl);
        break;
    // split-K (not with SWIGLU, which takes variant 2's shape)
    case 4:
        if constexpr (!SWIGLU)
            gemv_launch<1, 8, false, 2, NORM_OUT>(g, a, pdl);
        else
            gemv_launch<2, 8, SWIGLU, 1, NORM_OUT>(g, a, pdl);
        break;
    case 5:
        if constexpr (!SWIGLU)
            gemv_launch<1, 8, false, 4, NORM_OUT>(g, a, pdl);
        else
            gemv_launch<2, 8, SWIGLU, 1, NORM_OUT>(g, a, pdl);
        break;
    case 6:
        if constexpr (!SWIGLU)
            gemv_launch<2, 8, false, 2, NORM_OUT>(g, a, pdl);
        else
            gemv_launch<2, 8, SWIGLU, 1, NORM_OUT>(g, a, pdl);
        break;
    default:
        gemv_launch<2, 4, SWIGLU, 1, NORM_OUT>(g, a, pdl);
    }
}

// The variant for a W of out x in: the one forced for tests, else the
// fastest measured on this shape, else the last measured one's.
int gemv_variant_for(const tb_gpu *g, int out, int in)
{
    if (g->gemv_forced >= 0)
        return g->gemv_forced;
    for (int i = 0; i < g->n_gemv_shapes; i++)
        if (g->gemv_shapes[i].out == out && g->gemv_shapes[i].in == in)
            return g->gemv_shapes[i].variant;
    return g->gemv_variant;
}

void gemv(tb_gpu *g, const bf16 *w, const bf16 *x, float *y, int out, int in, float beta, int variant)
{
    gemv_args a = {w, x, y, NULL, NULL, NULL, 0.0f, out, in, beta, NULL, NULL};
    gemv_pick<false, false>(g, a, variant, 0);
}

void swiglu_act(tb_gpu *g, const float *gu, bf16 *act, int inter, size_t n, const float *sx, const float *sw)
{
    k_swiglu<<<blocks_for(inter % 4 == 0 ? n / 4 : n), 256, 0, g->stream>>>(gu, act, inter, n, sx, sw);
}

void swiglu_act(tb_gpu *g, const bf16 *gu, bf16 *act, int inter, size_t n)
{
    k_swiglu_bf16<<<blocks_for(inter % 4 == 0 ? n / 4 : n), 256, 0, g->stream>>>(gu, act, inter, n);
}

void gemv_fused(tb_gpu *g, const gemv_args &a, int pdl)
{
    if (a.q) {
        gemv_fp8_fused(g, a, pdl);
        return;
    }
    // a SwiGLU GEMV's W has 2 out rows
    int variant = gemv_variant_for(g, a.act ? 2 * a.out : a.out, a.in);
    if (a.act)
        gemv_pick<true, false>(g, a, variant, pdl);
    else if (a.xn)
        gemv_pick<false, true>(g, a, variant, pdl);
    else
        gemv_pick<false, false>(g, a, variant, pdl);
}

} // namespace tbgpu
