// gpu_kernels.cu — the engine's device code (gpu_kernels.cuh): every
// kernel, and the launch of the GEMV variants (templates, instantiated
// here). The CPU path is the reference of every kernel (tests/gpu/).
#include "gpu_internal.cuh"

#include <cuda_fp8.h>
#include <limits.h>
#include <math.h>

#include "fp8.h"

// Programmatic dependent launch (sm_90): a kernel launched with the
// attribute (launch(), gpu_internal.cuh) may start while the one before
// it drains, and must wait before it reads what earlier kernels wrote or
// writes what they read; both are no-ops in an ordinary launch.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }

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

__device__ float block_sum(float v, float *sh)
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

// Bias, half-split RoPE on q and k (over the first rd dims of a head,
// pairs (i, i + rd/2); dims from rd on unrotated: partial rotary), k/v
// into the cache, q to bf16. Grid (row, group of QKV_POST_WARPS heads of
// q, k and v), a warp per head, lanes over the pairs of dims; the row's
// rotation (cos, sin of each pair's angle: the same for every head of the
// row) is computed once per block into shared memory (rd floats, dynamic).
// Positions pos0 + (row % n_new), or *d_pos in decode. A left-padded
// sequence's RoPE positions start at its first real token (pos - pad[b]),
// as on the CPU; the cache slot stays pos.
// (sw NULL) qkv is the product; under dtype = fp8 (sw, sx given) the bare
// FP8 product, times its row's scale sx[r] and each column's sw[col] here
// (gpu_gemm_fp8.cu's deferred scales).
// A product's element as float: float32, or bf16 (the bf16 path's spans,
// whose QKV and gate-up products come out of cuBLAS rounded to bf16)
__device__ __forceinline__ float2 ld_f2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ float2 ld_f2(const bf16 *p) { return __bfloat1622float2(*(const __nv_bfloat162 *)p); }
__device__ __forceinline__ float ld_f(const float *p) { return *p; }
__device__ __forceinline__ float ld_f(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float4 ld_f4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 ld_f4(const bf16 *p)
{
    uint2 v = *(const uint2 *)p;
    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&v.x), b = __bfloat1622float2(*(const __nv_bfloat162 *)&v.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

template <typename In>
__device__ __forceinline__ float qkv_at(const In *v, const float *sw, float sxr, const float *bb, int i)
{
    float a = sw ? ld_f(v + i) * sxr * sw[i] : ld_f(v + i);
    return bb ? a + bb[i] : a;
}
// qkv_at of dims i, i + 1 (i even; v, sw, bb aligned there)
template <typename In>
__device__ __forceinline__ float2 qkv_at2(const In *v, const float *sw, float sxr, const float *bb, int i)
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

template <typename In>
__device__ __forceinline__ void qkv_post(const In *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,
               const float *inv_freq, int n_new, int pos0, const int *d_pos, const int *row_slot, const int *row_pos,
               const int *pad, bf16 *kc, bf16 *vc, int len, bf16 *q_out, int nh, int nkv, int hd, int rd,
               const float *sx, const float *sw)
{
    extern __shared__ float rot[]; // [rd / 2] cos, then [rd / 2] sin
    griddep_wait();
    griddep_launch();
    int r = blockIdx.x, b = r / n_new;
    // sequence b of the call: cache sequence b at a shared position, or
    // (row_pos given: continuous batching) slot row_slot[b] at its own
    int pos = (row_pos ? row_pos[b] : d_pos ? *d_pos : pos0) + r % n_new;
    if (row_slot)
        b = row_slot[b];
    int rpos = pos >= pad[b] ? pos - pad[b] : 0;
    int nq = nh * hd, kvd = nkv * hd, qkvd = nq + 2 * kvd, half = rd / 2;
    int head0 = blockIdx.y * QKV_POST_WARPS;
    if (head0 < nh + nkv) // the block holds a q or k head: the row's rotation
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            float ang = (float)rpos * inv_freq[i];
            rot[i] = cosf(ang);
            rot[half + i] = sinf(ang);
        }
    __syncthreads();
    int head = head0 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (head >= nh + 2 * nkv)
        return;
    const In *v = qkv + (size_t)r * qkvd + (size_t)head * hd;
    const float *bb = bias ? bias + (size_t)head * hd : NULL;
    const float *swh = sw ? sw + (size_t)head * hd : NULL;
    float sxr = sx ? sx[blockIdx.x] : 1.0f;
    size_t at = ((size_t)b * len + pos) * kvd;
    bf16 *dst = head < nh         ? q_out + (size_t)r * nq + (size_t)head * hd
                : head < nh + nkv ? kc + at + (size_t)(head - nh) * hd
                                  : vc + at + (size_t)(head - nh - nkv) * hd;
    // Qwen3's QK-norm: RMSNorm over the head's dims (after the bias),
    // weights q_norm or k_norm; uniform per warp
    const float *nw = head < nh ? q_norm : head < nh + nkv ? k_norm : NULL;
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
            if (head < nh + nkv) {
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
            if (head < nh + nkv) { /* q or k: rotate */
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
// k_qkv_post over the product as float (the FP8 GEMM's, the GEMV's, or
// with TB_GPU_BF16_OUT=0) or as bf16 (gemm_bf16_out's): one signature, so
// the caller picks either by pointer
#define QKV_POST_KERNEL(name, In)                                                                                       \
    __global__ void __launch_bounds__(QKV_POST_WARPS * 32)                                                              \
        name(const void *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,                    \
             const float *inv_freq, int n_new, int pos0, const int *d_pos, const int *row_slot, const int *row_pos,   \
             const int *pad, bf16 *kc, bf16 *vc, int len, bf16 *q_out, int nh, int nkv, int hd, int rd,               \
             const float *sx, const float *sw)                                                                        \
    {                                                                                                                  \
        qkv_post((const In *)qkv, bias, q_norm, k_norm, eps, inv_freq, n_new, pos0, d_pos, row_slot, row_pos, pad, kc, vc, len,   \
                 q_out, nh, nkv, hd, rd, sx, sw);                                                                      \
    }
QKV_POST_KERNEL(k_qkv_post, float)
QKV_POST_KERNEL(k_qkv_post_bf16, bf16)

// One query against keys [j0, j1) of one (sequence, K/V head) by the WARPS
// warps of a block (the decode kernels below): scores with a warp per key
// (lanes over pairs of dims, bf16x2 loads, 4 keys in flight; keys before
// lo are left padding: masked), their maximum *mx (-INFINITY when every
// key is padding) and sum *sum of exp(score - max), then each warp adds
// its share of the keys' values for every dim and emit(d, o) gets each
// dim's unnormalised output o (the warps' partial sums added). Shared
// memory: sc [j1 - j0] scores, po [WARPS][hd] partial outputs, red [32].
// hd <= 256 (four pairs of dims a lane).
template <int WARPS, typename Emit>
__device__ __forceinline__ void attend_keys(const bf16 *qv, const bf16 *kb, const bf16 *vb, int kvd, int hd, int j0,
                                            int j1, int lo, float scale, float *sc, float *po, float *red, float *mx,
                                            float *sum, Emit emit)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // this lane's dims: pairs 2 lane + 64 p
    float2 qr[4];
    int npairs = 0;
    for (int d = 2 * lane; d < hd && npairs < 4; d += 64)
        qr[npairs++] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(qv + d));
    for (int jj = j0 + warp; jj < j1; jj += 4 * WARPS) {
        float dot[4] = {0, 0, 0, 0};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = jj + u * WARPS;
            if (j < j1) {
                const bf16 *k = kb + (size_t)j * kvd;
                for (int p = 0; p < npairs; p++) {
                    float2 kk = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(k + 2 * lane + 64 * p));
                    dot[u] += qr[p].x * kk.x + qr[p].y * kk.y;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float d = dot[u];
            for (int o = 16; o > 0; o >>= 1)
                d += __shfl_xor_sync(0xffffffff, d, o);
            int j = jj + u * WARPS;
            if (lane == 0 && j < j1)
                sc[j - j0] = j < lo ? -INFINITY : d * scale;
        }
    }
    __syncthreads();
    float m = -INFINITY;
    for (int j = j0 + threadIdx.x; j < j1; j += blockDim.x)
        m = fmaxf(m, sc[j - j0]);
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < WARPS; w++)
        m = fmaxf(m, red[w]);
    __syncthreads();
    float l = 0;
    for (int j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        float e = m == -INFINITY ? 0.0f : __expf(sc[j - j0] - m); // keys of padding only: nothing
        sc[j - j0] = e;
        l += e;
    }
    l = block_sum(l, red);
    *mx = m, *sum = l;
    // partial outputs: warp w over keys j0 + w, j0 + w + WARPS, ...; 4 keys in flight
    float2 acc[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    for (int jj = j0 + warp; jj < j1; jj += 4 * WARPS) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = jj + u * WARPS;
            if (j < j1) {
                const bf16 *v = vb + (size_t)j * kvd;
                float pj = sc[j - j0];
                for (int p = 0; p < npairs; p++) {
                    float2 vv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(v + 2 * lane + 64 * p));
                    acc[p].x += pj * vv.x;
                    acc[p].y += pj * vv.y;
                }
            }
        }
    }
    for (int p = 0; p < npairs; p++) {
        po[warp * hd + 2 * lane + 64 * p] = acc[p].x;
        po[warp * hd + 2 * lane + 64 * p + 1] = acc[p].y;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0;
        for (int w = 0; w < WARPS; w++)
            o += po[w * hd + d];
        emit(d, o);
    }
}

// Decode attention: one query per (sequence, head), keys [0, *d_pos] (or
// n_keys_fixed when d_pos is NULL), by ATT_WARPS warps (attend_keys).
// Latency, not bandwidth, is the enemy here: at batch 1 there are only
// heads-many blocks, so each keeps many independent loads in flight.
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attn_decode(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv, int hd,
                  const int *d_pos, int n_keys_fixed, const int *row_slot, const int *row_pos, const int *pad,
                  float scale)
{
    extern __shared__ float s[]; // [len] scores, then [ATT_WARPS][hd] partial outputs
    __shared__ float red[32];
    int b = blockIdx.x, h = blockIdx.y, kvh = h / (nh / nkv), kvd = nkv * hd;
    // query row b; its keys: cache sequence b up to *d_pos (or
    // n_keys_fixed), or (row_pos given) slot row_slot[b] up to row_pos[b]
    int n_keys = row_pos ? row_pos[b] + 1 : d_pos ? *d_pos + 1 : n_keys_fixed;
    int seq = row_pos ? row_slot[b] : b;
    int lo = pad[seq]; // keys [0, lo) are left padding: masked (the query is a real token)
    const bf16 *qv = q + ((size_t)b * nh + h) * hd;
    const bf16 *kb = kc + (size_t)seq * len * kvd + kvh * hd, *vb = vc + (size_t)seq * len * kvd + kvh * hd;
    bf16 *o = out + ((size_t)b * nh + h) * hd;
    float mx, sum;
    attend_keys<ATT_WARPS>(qv, kb, vb, kvd, hd, 0, n_keys, lo, scale, s, s + len, red, &mx, &sum,
                           [&](int d, float v) { o[d] = __float2bfloat16(v * (1.0f / sum)); });
}

// Decode attention for grouped queries (G = nh / nkv query heads per K/V
// head, 2 or 4): one block per (sequence, K/V head) computes its G heads,
// so each key and value row is read once for the group and the grid is G
// times smaller than k_attn_decode's (Llama-3-8B at batch 32: 256 blocks
// instead of 1,024, one wave on 132 SMs). Keys and masking per head as
// k_attn_decode's; the scale is applied to q, and the softmax is computed
// online (below), so the two agree to rounding. Built for head_dim 16,
// 32, 64, 128 and 256 (a row's 16-byte pieces must tile a warp); other
// head dims take k_attn_decode.
//
// Bound by reading the cache (batch 32 at 256 positions: 34 MB a layer),
// so it reads the keys and values once, in one pass, with wide loads and
// many in flight: a key or value row (hd = 8 LPK bf16) is read by LPK
// lanes, 16 bytes each, a warp reads 32 / LPK rows a load, and each lane
// has ATTG_UNROLL key and ATTG_UNROLL value loads in flight (at hd 128 a
// block covers 64 positions a round). Each warp keeps a running maximum,
// sum and output per head over its positions (the online softmax: a new
// maximum rescales what was summed); the warps' results are combined in
// shared memory at the end. Masked positions (left padding) and those past
// the sequence's end weigh 0.
#define ATTG_UNROLL 4
template <int G, int LPK>
__device__ __forceinline__ void attn_decode_gqa(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len,
                                                int nh, int nkv, const int *d_pos, const int *row_slot,
                                                const int *row_pos, const int *pad, float scale)
{
    constexpr int hd = 8 * LPK, KPW = 32 / LPK;          // head dim; rows a warp reads a load
    constexpr int STEP = ATTG_WARPS * KPW * ATTG_UNROLL; // positions a block covers a round
    __shared__ float part[ATTG_WARPS][G][hd];            // each warp's output sums
    __shared__ float wmax[ATTG_WARPS][G], wsum[ATTG_WARPS][G];
    griddep_wait(); // (inside a decode graph with programmatic launches)
    griddep_launch();
    int b = blockIdx.x, kvh = blockIdx.y, kvd = nkv * hd, h0 = kvh * G;
    int n_keys = row_pos ? row_pos[b] + 1 : *d_pos + 1;
    int seq = row_pos ? row_slot[b] : b;
    int lo = pad[seq]; // keys [0, lo) are left padding: masked
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / LPK, dl = lane % LPK;
    // this lane's 8 dims (8 dl ..) of key or value row j: 16 bytes
    const uint4 *kb = reinterpret_cast<const uint4 *>(kc + (size_t)seq * len * kvd + kvh * hd) + dl;
    const uint4 *vb = reinterpret_cast<const uint4 *>(vc + (size_t)seq * len * kvd + kvh * hd) + dl;
    const size_t row = kvd / 8; // uint4s from one position to the next
    float qf[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        uint4 qv = *(reinterpret_cast<const uint4 *>(q + ((size_t)b * nh + h0 + g) * hd) + dl);
        const __nv_bfloat162 *qe = reinterpret_cast<const __nv_bfloat162 *>(&qv);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __bfloat1622float2(qe[i]);
            qf[g][2 * i] = f.x * scale, qf[g][2 * i + 1] = f.y * scale;
        }
    }
    // the warp's running maximum (the same in every lane) and, per lane,
    // the sum of exp and the output over the positions it read
    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++)
            acc[g][i] = 0.0f;
    }
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // position j0 + u KPW + sub for u < ATTG_UNROLL; warp w starts at w KPW ATTG_UNROLL
    for (int j0 = warp * KPW * ATTG_UNROLL; j0 < n_keys; j0 += STEP) {
        uint4 kv[ATTG_UNROLL], vv[ATTG_UNROLL];
#pragma unroll
        for (int u = 0; u < ATTG_UNROLL; u++) {
            int j = j0 + u * KPW + sub;
            bool live = j < n_keys && j >= lo;
            kv[u] = live ? __ldcs(kb + (size_t)j * row) : zero;
            vv[u] = live ? __ldcs(vb + (size_t)j * row) : zero;
        }
        float d[ATTG_UNROLL][G], mr[G]; // scores (scaled), the round's maximum
#pragma unroll
        for (int g = 0; g < G; g++)
            mr[g] = -INFINITY;
#pragma unroll
        for (int u = 0; u < ATTG_UNROLL; u++) {
            const __nv_bfloat162 *ke = reinterpret_cast<const __nv_bfloat162 *>(&kv[u]);
#pragma unroll
            for (int g = 0; g < G; g++)
                d[u][g] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float2 kk = __bfloat1622float2(ke[i]);
#pragma unroll
                for (int g = 0; g < G; g++)
                    d[u][g] += qf[g][2 * i] * kk.x + qf[g][2 * i + 1] * kk.y;
            }
            int j = j0 + u * KPW + sub;
            bool live = j < n_keys && j >= lo;
#pragma unroll
            for (int g = 0; g < G; g++) {
#pragma unroll
                for (int o = LPK / 2; o > 0; o >>= 1) // over the row's LPK lanes
                    d[u][g] += __shfl_xor_sync(0xffffffff, d[u][g], o);
                d[u][g] = live ? d[u][g] : -INFINITY;
                mr[g] = fmaxf(mr[g], d[u][g]);
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
#pragma unroll
            for (int o = LPK; o < 32; o <<= 1) // over the warp's rows
                mr[g] = fmaxf(mr[g], __shfl_xor_sync(0xffffffff, mr[g], o));
            float mn = fmaxf(m[g], mr[g]);
            if (mn == -INFINITY) // nothing live yet
                continue;
            float keep = __expf(m[g] - mn); // 0 when m was -inf
            m[g] = mn;
            l[g] *= keep;
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[g][i] *= keep;
#pragma unroll
            for (int u = 0; u < ATTG_UNROLL; u++) {
                float p = __expf(d[u][g] - mn); // 0 for a dead position
                l[g] += p;
                const __nv_bfloat162 *ve = reinterpret_cast<const __nv_bfloat162 *>(&vv[u]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float2 f = __bfloat1622float2(ve[i]);
                    acc[g][2 * i] += p * f.x;
                    acc[g][2 * i + 1] += p * f.y;
                }
            }
        }
    }
    // the warp's rows summed (lanes with the same dl), then the warps'
    // combined: each rescaled to the block's maximum
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int o = LPK; o < 32; o <<= 1) {
            l[g] += __shfl_xor_sync(0xffffffff, l[g], o);
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[g][i] += __shfl_xor_sync(0xffffffff, acc[g][i], o);
        }
    if (sub == 0) {
#pragma unroll
        for (int g = 0; g < G; g++) {
#pragma unroll
            for (int i = 0; i < 8; i++)
                part[warp][g][8 * dl + i] = acc[g][i];
            if (dl == 0)
                wmax[warp][g] = m[g], wsum[warp][g] = l[g];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
        int g = i / hd, dd = i % hd;
        float mx = -INFINITY;
        for (int w = 0; w < ATTG_WARPS; w++)
            mx = fmaxf(mx, wmax[w][g]);
        float o = 0.0f, sum = 0.0f;
        for (int w = 0; w < ATTG_WARPS; w++)
            if (wmax[w][g] != -INFINITY) { // a warp that read no live position adds nothing
                float e = __expf(wmax[w][g] - mx);
                o += e * part[w][g][dd];
                sum += e * wsum[w][g];
            }
        out[((size_t)b * nh + h0 + g) * hd + dd] = __float2bfloat16(o / sum);
    }
}
template <int G, int LPK>
__global__ void __launch_bounds__(ATTG_WARPS * 32, 2) // two blocks an SM: 128 registers a thread
    k_attn_decode_gqa(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv,
                      const int *d_pos, const int *row_slot, const int *row_pos, const int *pad, float scale)
{
    attn_decode_gqa<G, LPK>(q, kc, vc, out, len, nh, nkv, d_pos, row_slot, row_pos, pad, scale);
}

// the instantiation for G query heads a K/V head (2, 4) and head_dim hd
// (16 .. 256, a power of two); NULL where there is none
template <int G> static attn_gqa_kernel gqa_kernel(int hd)
{
    switch (hd) {
    case 16:
        return k_attn_decode_gqa<G, 2>;
    case 32:
        return k_attn_decode_gqa<G, 4>;
    case 64:
        return k_attn_decode_gqa<G, 8>;
    case 128:
        return k_attn_decode_gqa<G, 16>;
    case 256:
        return k_attn_decode_gqa<G, 32>;
    default:
        return NULL;
    }
}
attn_gqa_kernel attn_decode_gqa_kernel(int G, int hd)
{
    return G == 2 ? gqa_kernel<2>(hd) : G == 4 ? gqa_kernel<4>(hd) : NULL;
}


// Row softmax of scores [sequence][head][n][n_keys] into bf16
// probabilities; causal rows (causal 1) see keys up to their own position
// pos0 + t, block-causal ones (causal k > 1) to the end of their block of
// k positions (blocks counted from position 0).
// Keys [0, pad[b]) are left padding, masked for real rows (a padding row
// attends as usual; nothing reads it), as on the CPU.
// The body of k_softmax and k_softmax_slots (row_slot: the call's
// sequence b is cache slot row_slot[b], whose padding applies).
__device__ void softmax_row(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad,
                            const int *row_slot, int nh, float *red)
{
    size_t row = blockIdx.x;
    int t = (int)(row % n), visible = n_keys;
    if (causal > 0) { // causal (1) or block-causal (k > 1): to the end of the row's block
        long end = ((long)(pos0 + t) / causal + 1) * causal;
        visible = end < n_keys ? (int)end : n_keys;
    }
    int b = (int)(row / ((size_t)n * nh));
    if (row_slot)
        b = row_slot[b];
    int lo = pos0 + t >= pad[b] ? pad[b] : 0;
    const float *x = sc + row * n_keys;
    bf16 *y = p + row * n_keys;
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j < visible; j += blockDim.x)
        mx = fmaxf(mx, x[j]);
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++)
        mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0;
    for (int j = lo + threadIdx.x; j < visible; j += blockDim.x)
        sum += __expf(x[j] - mx);
    sum = block_sum(sum, red);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < n_keys; j += blockDim.x)
        y[j] = __float2bfloat16(j >= lo && j < visible ? __expf(x[j] - mx) * inv : 0.0f);
}

__global__ void k_softmax(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad, int nh)
{
    __shared__ float red[32];
    softmax_row(sc, p, n, n_keys, pos0, causal, pad, NULL, nh, red);
}

__global__ void k_softmax_slots(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad,
                                const int *row_slot, int nh)
{
    __shared__ float red[32];
    softmax_row(sc, p, n, n_keys, pos0, causal, pad, row_slot, nh, red);
}

// softmax_row's rows, a warp per row and SOFTMAX_WARP_ROWS rows a block,
// for n_keys <= 32 K: the row's scores stay in registers (K a lane), so
// the scores are read once, exp once, and no block barrier. The same
// values as softmax_row (its max, __expf(x - max) / sum) but for the
// order of the sum.
#define SOFTMAX_WARP_ROWS 8
template <int K>
__global__ void __launch_bounds__(SOFTMAX_WARP_ROWS * 32)
    k_softmax_warp(const float *sc, bf16 *p, size_t n_rows, int n, int n_keys, int pos0, int causal, const int *pad,
                   const int *row_slot, int nh)
{
    size_t row = (size_t)blockIdx.x * SOFTMAX_WARP_ROWS + threadIdx.x / 32;
    if (row >= n_rows)
        return;
    int lane = threadIdx.x % 32;
    int t = (int)(row % n), visible = n_keys;
    if (causal > 0) {
        long end = ((long)(pos0 + t) / causal + 1) * causal;
        visible = end < n_keys ? (int)end : n_keys;
    }
    int b = (int)(row / ((size_t)n * nh));
    if (row_slot)
        b = row_slot[b];
    int lo = pos0 + t >= pad[b] ? pad[b] : 0;
    const float *x = sc + row * n_keys;
    bf16 *y = p + row * n_keys;
    float e[K];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        e[k] = j >= lo && j < visible ? x[j] : -INFINITY;
        mx = fmaxf(mx, e[k]);
    }
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    float sum = 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        e[k] = j >= lo && j < visible ? __expf(e[k] - mx) : 0.0f;
        sum += e[k];
    }
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffff, sum, o);
    float inv = 1.0f / sum;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = lane + 32 * k;
        if (j < n_keys)
            y[j] = __float2bfloat16(j >= lo && j < visible ? e[k] * inv : 0.0f);
    }
}

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

// RMSNorm of x[h] (float) with weights w into y (bf16) by one block,
// k_rmsnorm's arithmetic; x is read from L2 (other blocks wrote it). One
// block does it alone at the end of a GEMV, so its latency is the cost:
// each thread issues all its 16-byte loads of x at once and keeps them in
// registers (h <= 4 x 8 x blockDim.x, h % 4 == 0: 4,096 for the GEMV's
// 128 threads; else a plain strided loop); few registers, so the GEMV
// around it keeps its occupancy.
#define NORM_BY_BLOCK_CHUNKS 8
__device__ void rmsnorm_by_block(const float *x, const float *w, float eps, int h, bf16 *y, float *red)
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

#define GEMV_WARPS 4
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
        // the fence orders this block's partials before its count
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0)
            arrived = atomicAdd(count + blockIdx.x, 1u);
        __syncthreads();
        if (arrived != KS - 1)
            return;
        __threadfence();
        if (threadIdx.x == 0)
            count[blockIdx.x] = 0; // ready for the next launch
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
    if (NORM_OUT) {
        // the fence orders this block's outputs before its count
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0)
            arrived = atomicAdd(done, 1u);
        __syncthreads();
        if (arrived != gridDim.x - 1)
            return;
        __threadfence();
        if (threadIdx.x == 0)
            *done = 0; // ready for the next launch
        rmsnorm_by_block(y, nw, eps, out, xn, red);
    }
}

// Split decode attention (flash-decoding) for batches with too few
// (sequence, head) pairs to fill the chip: grid (B, nh, S), block
// ATT_SPLIT_WARPS warps over keys [s chunk, (s + 1) chunk) of the same
// keys as k_attn_decode. Each block writes its maximum score m, its sum
// of exp(score - m) l and its unnormalised output o[hd] to part[...]; the
// last block of a (sequence, head) to finish (a counter, reset by it)
// combines them: out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
__global__ void __launch_bounds__(ATT_SPLIT_WARPS * 32)
    k_attn_decode_split(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv, int hd,
                        const int *d_pos, const int *row_slot, const int *row_pos, const int *pad, float scale,
                        float *part, unsigned *count)
{
    extern __shared__ float s[]; // [chunk] scores, then [ATT_SPLIT_WARPS][hd] partial outputs
    __shared__ float red[32];
    __shared__ bool last;
    griddep_wait();
    griddep_launch();
    int b = blockIdx.x, h = blockIdx.y, S = gridDim.z, sp = blockIdx.z, kvh = h / (nh / nkv), kvd = nkv * hd;
    int n_keys = row_pos ? row_pos[b] + 1 : *d_pos + 1;
    int seq = row_pos ? row_slot[b] : b;
    int lo = pad[seq];
    int chunk = (len + S - 1) / S; // the smem layout's bound; keys split evenly below
    int per = (n_keys + S - 1) / S, j0 = sp * per, j1 = min(n_keys, j0 + per);
    const bf16 *qv = q + ((size_t)b * nh + h) * hd;
    const bf16 *kb = kc + (size_t)seq * len * kvd + kvh * hd, *vb = vc + (size_t)seq * len * kvd + kvh * hd;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t bh = (size_t)b * nh + h;
    float *mine = part + (bh * S + sp) * (hd + 2); // [hd] output, then m, l
    float mx, sum;
    // S = 1: the whole of (b, h), no partials to combine
    attend_keys<ATT_SPLIT_WARPS>(qv, kb, vb, kvd, hd, j0, j1, lo, scale, s, s + chunk, red, &mx, &sum,
                                 [&](int d, float v) {
                                     if (S == 1)
                                         out[bh * hd + d] = __float2bfloat16(v / sum);
                                     else
                                         mine[d] = v;
                                 });
    if (S == 1)
        return;
    if (threadIdx.x == 0) {
        mine[hd] = mx;
        mine[hd + 1] = sum;
    }
    // the last block of (b, h) to arrive combines; the fence orders this
    // block's partials before its count
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(count + bh, 1u) == (unsigned)S - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    // warp 0 reads the S maxima and sums at once (lane t: split t; L2
    // reads, other blocks wrote them) and turns them into each split's
    // weight e^(m_t - M) / L, with L = sum_t e^(m_t - M) l_t; then every
    // thread's dims add the S partial outputs with independent loads
    __shared__ float wt[ATT_MAX_SPLIT];
    const float *all = part + bh * S * (hd + 2);
    if (warp == 0) {
        float m = -INFINITY, l = 0.0f;
        if (lane < S) {
            m = __ldcg(all + lane * (hd + 2) + hd);
            l = __ldcg(all + lane * (hd + 2) + hd + 1);
        }
        float M = l > 0.0f ? m : -INFINITY; // a split of padding only (l = 0) takes no part
        for (int o = 16; o > 0; o >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffff, M, o));
        float e = l > 0.0f ? __expf(m - M) : 0.0f, L = e * l;
        for (int o = 16; o > 0; o >>= 1)
            L += __shfl_xor_sync(0xffffffff, L, o);
        if (lane < S)
            wt[lane] = e / L;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0;
        for (int t = 0; t < S; t++)
            o += wt[t] * __ldcg(all + t * (hd + 2) + d);
        out[bh * hd + d] = __float2bfloat16(o);
    }
    if (threadIdx.x == 0)
        count[bh] = 0; // ready for the next step
}

// First maximum of each row (torch.argmax), into out[row]; one block per
// row, each thread with 4 independent loads in flight (in index order,
// so a thread keeps its first maximum), then a reduction that prefers
// the smaller index on ties.
__global__ void k_argmax(const float *logits, int V, int32_t *out)
{
    __shared__ float bv[1024];
    __shared__ int bi[1024];
    const float *x = logits + (size_t)blockIdx.x * V;
    float best = -INFINITY;
    int idx = 0, n = blockDim.x, v = threadIdx.x;
    for (; v + 3 * n < V; v += 4 * n) {
        float a0 = x[v], a1 = x[v + n], a2 = x[v + 2 * n], a3 = x[v + 3 * n];
        if (a0 > best)
            best = a0, idx = v;
        if (a1 > best)
            best = a1, idx = v + n;
        if (a2 > best)
            best = a2, idx = v + 2 * n;
        if (a3 > best)
            best = a3, idx = v + 3 * n;
    }
    for (; v < V; v += n)
        if (x[v] > best)
            best = x[v], idx = v;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = bv[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (o > bv[threadIdx.x] || (o == bv[threadIdx.x] && oi < bi[threadIdx.x]))
                bv[threadIdx.x] = o, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = bi[0];
}

__global__ void k_incr(int *p) { *p += 1; }

// Diffusion pick for position r of [B][n]. Its logits come from row r, or
// (shifted, Dream) from the previous position of the same sequence; with
// cfg they are combined on the fly with the unconditional row
// uncond_offset floats further. Kinds as in gpu.h.
// never: a token whose logit counts as -inf (block samplers: the mask
// token), -1 = none.
struct pick_row {
    const float *c, *u;
    float cfg;
    int never;
    __device__ float operator[](int v) const
    {
        return v == never ? -INFINITY : cfg > 0 ? u[v] + (cfg + 1.0f) * (c[v] - u[v]) : c[v];
    }
};

__global__ void k_pick(const float *logits, int V, int npick, int nr, int off, int shifted, size_t uncond_offset,
                       float cfg, int kind, int never, int32_t *x0, double *conf)
{
    __shared__ float bv[256];
    __shared__ int bi[256];
    __shared__ double ds[256];
    int b = blockIdx.x / npick, i = blockIdx.x % npick, li = off + i; // li: row within the nr computed
    size_t src = (size_t)b * nr + (shifted && li > 0 ? li - 1 : li);
    pick_row x = {logits + src * V, logits + src * V + uncond_offset, cfg, never};
    float best = -INFINITY;
    int idx = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        if (x[v] > best)
            best = x[v], idx = v;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = bv[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (o > bv[threadIdx.x] || (o == bv[threadIdx.x] && oi < bi[threadIdx.x]))
                bv[threadIdx.x] = o, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    float mx = bv[0];
    int am = bi[0];
    __syncthreads();
    if (kind == 0) { // LLaDA: float64 softmax probability of the argmax
        double sum = 0;
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            sum += exp((double)x[v] - (double)mx);
        ds[threadIdx.x] = sum;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s)
                ds[threadIdx.x] += ds[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            x0[blockIdx.x] = am;
            conf[blockIdx.x] = 1.0 / ds[0];
        }
        return;
    }
    // Dream: float32 probabilities
    float sum = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += __expf(x[v] - mx);
    bv[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            bv[threadIdx.x] += bv[threadIdx.x + s];
        __syncthreads();
    }
    float z = bv[0];
    __syncthreads();
    float acc = -INFINITY; // kind 2: second largest logit; kind 3: sum p log p
    if (kind == 2) {
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            if (v != am && x[v] > acc)
                acc = x[v];
    } else {
        acc = 0;
        if (kind == 3)
            for (int v = threadIdx.x; v < V; v += blockDim.x) {
                float p = __expf(x[v] - mx) / z;
                acc += p * logf(p + 1e-10f);
            }
    }
    bv[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            bv[threadIdx.x] = kind == 2 ? fmaxf(bv[threadIdx.x], bv[threadIdx.x + s]) : bv[threadIdx.x] + bv[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        x0[blockIdx.x] = am;
        float p1 = 1.0f / z;
        conf[blockIdx.x] = kind == 1 ? p1 : kind == 2 ? p1 - __expf(bv[0] - mx) / z : bv[0];
    }
}

// k_pick's kind 0 (LLaDA) split: grid (chunks, picked rows). Block c of
// picked row p takes logits [c chunk, (c + 1) chunk) of the row (pick_row
// as k_pick: shift, cfg, never) and writes its largest logit, that
// logit's first index, and the float64 sum of exp(logit - its max) to
// part[p][c] (an empty chunk: -inf, V, 0).
__global__ void k_pick_part(const float *logits, int V, int npick, int nr, int off, int shifted,
                            size_t uncond_offset, float cfg, int never, pick_part *part)
{
    __shared__ float bv[256];
    __shared__ int bi[256];
    __shared__ double ds[256];
    int p = blockIdx.y, b = p / npick, i = p % npick, li = off + i;
    size_t src = (size_t)b * nr + (shifted && li > 0 ? li - 1 : li);
    pick_row x = {logits + src * V, logits + src * V + uncond_offset, cfg, never};
    int chunk = (V + gridDim.x - 1) / gridDim.x, v0 = blockIdx.x * chunk, v1 = v0 + chunk < V ? v0 + chunk : V;
    float best = -INFINITY;
    int idx = V;
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x)
        if (x[v] > best)
            best = x[v], idx = v;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = bv[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (o > bv[threadIdx.x] || (o == bv[threadIdx.x] && oi < bi[threadIdx.x]))
                bv[threadIdx.x] = o, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    float mx = bv[0];
    int am = bi[0];
    double sum = 0;
    if (mx > -INFINITY)
        for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x)
            sum += exp((double)x[v] - (double)mx);
    ds[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            ds[threadIdx.x] += ds[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        part[(size_t)p * gridDim.x + blockIdx.x] = {ds[0], mx, am};
}

// The picked rows' partials combined, a warp per row: the first index of
// the row's largest logit (chunks in order, so the lowest index among
// equal maxima) and the float64 probability 1 / sum over chunks of
// sum_c exp(mx_c - max), as k_pick's kind 0.
__global__ void k_pick_combine(const pick_part *part, int n_picks, int chunks, int32_t *x0, double *conf)
{
    int p = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (p >= n_picks)
        return;
    const pick_part *pp = part + (size_t)p * chunks;
    float mx = -INFINITY;
    int am = INT_MAX;
    for (int c = lane; c < chunks; c += 32)
        if (pp[c].mx > mx || (pp[c].mx == mx && pp[c].idx < am))
            mx = pp[c].mx, am = pp[c].idx;
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffff, mx, o);
        int oi = __shfl_xor_sync(0xffffffff, am, o);
        if (om > mx || (om == mx && oi < am))
            mx = om, am = oi;
    }
    double sum = 0;
    for (int c = lane; c < chunks; c += 32)
        if (pp[c].sum > 0)
            sum += pp[c].sum * exp((double)pp[c].mx - (double)mx);
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffff, sum, o);
    if (lane == 0) {
        x0[p] = mx > -INFINITY ? am : 0; // no finite logit: index 0, as k_pick
        conf[p] = 1.0 / sum;
    }
}

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

// Two E4M3 bytes (low byte first) to floats: the hardware conversion to
// half (exact: every E4M3 value is a half), then to float.
__device__ __forceinline__ float2 e4m3x2_to_float2(unsigned short v)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2 *>(&h));
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
template <int FP8_ROWS, int UNROLL>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_fp8(const uint8_t *__restrict__ q, const float *__restrict__ scale, const bf16 *__restrict__ x,
               float *__restrict__ y, int out, int in, float beta)
{
    __shared__ float red[GEMV_WARPS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int chunks = in / 16;
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
    int o0 = (blockIdx.x * GEMV_WARPS + warp) * FP8_ROWS;
    if (o0 >= out)
        return;
    const uint4 *wr[FP8_ROWS];
    float acc[FP8_ROWS];
#pragma unroll
    for (int r = 0; r < FP8_ROWS; r++) {
        int o = o0 + r < out ? o0 + r : out - 1; // a tail row recomputes the last one
        wr[r] = reinterpret_cast<const uint4 *>(q + (size_t)o * in);
        acc[r] = 0;
    }
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
    if (lane != 0)
        return;
    float up = ldexpf(1.0f, sx);
#pragma unroll
    for (int r = 0; r < FP8_ROWS; r++) {
        int o = o0 + r;
        if (o >= out)
            break;
        float v = acc[r] * scale[o] * up;
        y[o] = beta != 0.0f ? y[o] * beta + v : v;
    }
}

namespace tbgpu {

template <int R, int U>
static void gemv_fp8_launch(tb_gpu *g, const uint8_t *q, const float *scale, const bf16 *x, float *y, int out,
                            int in, float beta)
{
    unsigned blocks = (unsigned)((out + R * GEMV_WARPS - 1) / (R * GEMV_WARPS));
    k_gemv_fp8<R, U><<<blocks, GEMV_WARPS * 32, 0, g->stream>>>(q, scale, x, y, out, in, beta);
}

// The FP8 GEMV's variants (rows per warp, loads in flight per lane):
// g->fp8_variant (gpu.h: TB_GPU_FP8_GEMV_DEFAULT; docs/PERFORMANCE.md has
// the measurement that chose it).
void gemv_fp8(tb_gpu *g, const uint8_t *q, const float *scale, const bf16 *x, float *y, int out, int in, float beta)
{
    switch (g->fp8_variant) {
    case 1:
        gemv_fp8_launch<2, 8>(g, q, scale, x, y, out, in, beta);
        break;
    case 2:
        gemv_fp8_launch<1, 8>(g, q, scale, x, y, out, in, beta);
        break;
    case 3:
        gemv_fp8_launch<2, 4>(g, q, scale, x, y, out, in, beta);
        break;
    case 4:
        gemv_fp8_launch<1, 16>(g, q, scale, x, y, out, in, beta);
        break;
    default:
        gemv_fp8_launch<4, 4>(g, q, scale, x, y, out, in, beta);
    }
}

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
    gemv_args a = {w, x, y, NULL, NULL, NULL, 0.0f, out, in, beta};
    gemv_pick<false, false>(g, a, variant, 0);
}

void softmax_span(tb_gpu *g, const float *sc, bf16 *p, size_t n_rows, int n, int n_keys, int pos0, int causal,
                  const int *pad, const int *row_slot, int nh)
{
    unsigned blocks = (unsigned)((n_rows + SOFTMAX_WARP_ROWS - 1) / SOFTMAX_WARP_ROWS);
    dim3 block(SOFTMAX_WARP_ROWS * 32);
    if (n_keys <= 32 * 4)
        k_softmax_warp<4><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else if (n_keys <= 32 * 8)
        k_softmax_warp<8><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else if (n_keys <= 32 * 16)
        k_softmax_warp<16><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else if (n_keys <= 32 * 32)
        k_softmax_warp<32><<<blocks, block, 0, g->stream>>>(sc, p, n_rows, n, n_keys, pos0, causal, pad, row_slot, nh);
    else
        k_softmax_slots<<<(unsigned)n_rows, 256, 0, g->stream>>>(sc, p, n, n_keys, pos0, causal, pad, row_slot, nh);
}

void swiglu_act(tb_gpu *g, const float *gu, bf16 *act, int inter, size_t n, const float *sx, const float *sw)
{
    k_swiglu<<<blocks_for(inter % 4 == 0 ? n / 4 : n), 256, 0, g->stream>>>(gu, act, inter, n, sx, sw);
}

void swiglu_act(tb_gpu *g, const bf16 *gu, bf16 *act, int inter, size_t n)
{
    k_swiglu_bf16<<<blocks_for(inter % 4 == 0 ? n / 4 : n), 256, 0, g->stream>>>(gu, act, inter, n);
}

void pick(tb_gpu *g, const float *logits, int V, int n_picks, int npick, int nr, int off, int shifted,
          size_t uncond_offset, float cfg, int kind, int never, int32_t *x0, double *conf)
{
    if (n_picks < 1)
        return;
    if (kind != 0 || n_picks > 65535) {
        k_pick<<<n_picks, 256, 0, g->stream>>>(logits, V, npick, nr, off, shifted, uncond_offset, cfg, kind, never,
                                               x0, conf);
        return;
    }
    // chunks of at least 256 logits, enough blocks for about eight a
    // multiprocessor, at most PICK_MAX_CHUNKS (g->pick_parts's size)
    int chunks = 8 * g->prop.multiProcessorCount / n_picks, most = (V + 255) / 256;
    chunks = chunks > most ? most : chunks;
    chunks = chunks > PICK_MAX_CHUNKS ? PICK_MAX_CHUNKS : chunks < 1 ? 1 : chunks;
    k_pick_part<<<dim3(chunks, n_picks), 256, 0, g->stream>>>(logits, V, npick, nr, off, shifted, uncond_offset,
                                                              cfg, never, g->pick_parts);
    k_pick_combine<<<(n_picks + 7) / 8, 256, 0, g->stream>>>(g->pick_parts, n_picks, chunks, x0, conf);
}

void gemv_fused(tb_gpu *g, const gemv_args &a, int pdl)
{
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
