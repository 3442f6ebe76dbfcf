// gpu_dgemma.cu — DiffusionGemma on the GPU (gpu_dgemma.h; CPU twin:
// cpu/dgemma_forward.c, in its order and names). The context underneath
// is a bare tb_gpu (device, stream, cuBLAS, dalloc's accounting, the
// engine's GEMMs) holding no model of its own: this file owns the
// weights, the cache and the buffers. The MoE's route, grouping and
// gather are gpu_moe.cu's kernels. dtype = fp8 runs the dense projections
// on the engine's FP8 machinery (kernels_fp8.cu, gpu_gemm_fp8.cu) and the
// experts on gpu_moe.cu's grouped GEMM over their codes
// (moe_gemm_grouped); CPU twin: tb_dgemma_round_fp8 and
// dgemma_forward.c's fp8_act.
#include "gpu_dgemma.h"
#include "gpu_internal.cuh"
#include "gpu_kprof.h"
#include "kernels_device.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace tbgpu;

// gpu_moe.cu's kernels (their contracts are said there)
__global__ void k_moe_route(const float *logits, const moe_route_args a, int *idx, float *w);
__global__ void k_moe_group(const int *idx, int n, int E, int *off, int *order, int *pos,
                            unsigned long long *touched);
__global__ void k_moe_gather(const bf16 *xn, const int *order, int k, int h, int n, bf16 *xg);

// threads of the row kernels (a block per row)
#define DG_THREADS 256
// the largest head a qkv block holds in shared memory
#define DG_MAX_HD 512

// A projection's weights W[out][in]: bf16 w, or under dtype = fp8 (fp8.h)
// its E4M3 codes q [out][in] and one float scale a row s [out], made from
// the bf16 weights at load (w then freed: NULL).
struct dg_proj {
    bf16 *w;
    uint8_t *q;
    float *s;
};

struct dg_layer {
    int full, hd, kv;
    float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *pre_ffn_norm, *post_ffn_norm1, *pre_ffn_norm2;
    float *router_scale, *expert_scale, *post_ffn_norm2, *post_ffn_norm; // [H], [hd], [E]
    dg_proj wq;      // [nh hd][H]
    dg_proj wk;      // [kv hd][H]
    dg_proj wv;      // [kv hd][H]; none in a full layer (V = raw k_proj output)
    dg_proj wo;      // [H][nh hd]
    dg_proj gate_up; // [2 I][H]
    dg_proj down;    // [H][I]
    bf16 *router;    // [E][H]: bf16 under fp8 too (the top-k turns on small margins)
    dg_proj ex_gu;   // [E][2 mi][H] (fp8: a scale per row of each expert, [E][2 mi])
    dg_proj ex_down; // [E][H][mi]
    float scalar_enc, scalar_dec;
    bf16 *kc, *vc; // [cap][kv hd]: k after k_norm and RoPE, v after its weightless norm
};

struct tb_gpu_dgemma {
    tb_gpu *g;
    tb_dgemma_config cfg;
    dg_layer *L;
    bf16 *embed;              // [V][H], the LM head too
    float *final_norm, *sc_pre_norm; // [H]
    dg_proj sc_gu, sc_down;   // [2 I][H], [H][I]
    float *inv_sl, *inv_full; // [hd_sliding / 2], [hd_full / 2]
    float embed_scale;
    int R;                    // rows of one pass: the canvas
    int max_ctx, cap, len;    // cache: positions held, slots (max_ctx + R), cached
    int32_t *tok;             // [R]
    float *x, *r, *h1, *h2;   // [R][H]
    bf16 *xn;                 // [R][H]
    float *qf, *kf, *vf;      // [R][nh hd_max], [R][kvd_max] x 2
    bf16 *qb, *att;           // [R][nh hd_max]
    float *S;                 // [nh][R][cap] scores
    bf16 *P;                  // [nh][R][cap] probabilities
    float *gu;                // [R][2 I]
    bf16 *act;                // [R][I]
    float *rlog, *w;          // [R][E], [R k]
    int *idx, *off, *order, *pos; // [R k], [2 E + 1] (k_moe_group's starts and list), [R k], [R k]
    bf16 *xg;                 // [R k][H]
    bf16 *egu;                // [R k][2 mi]
    bf16 *eact;               // [R k][mi]
    bf16 *ey;                 // [R k][H]
    int *h_off;               // pinned [E + 1]
    void **h_ptrs, **d_ptrs;  // pinned and device [6 E]: the grouped GEMMs' operands
    int grouped_failed;       // cuBLAS refused the grouped GEMM: one GEMM an expert
    float *logits;            // [R][V]: softcapped logits, z after decide
    bf16 *soft;               // [R][V]: self-conditioning's probabilities
    int32_t *d_ids;           // [2 R]: sampled, argmax
    float *d_ent;             // [R]
    int have_z;               // logits hold a decide's z
    int have_logits;          // logits hold the last canvas pass's logits, not yet decided
    int32_t *route_log;       // test-only (tb_gpu_dgemma_log_routes): the pass's top-k sets, host
    size_t route_cap, route_n;
    double expert_reads, moe_rows;
    unsigned long long *d_touched; // device: distinct experts summed over MoE layer calls since the last fold
    // dtype = fp8 (g->fp8 too): each projection's input rows quantized into
    // xq [R k][largest in] / xs [R k] (k_fp8_quant_act), then the dense
    // projections on the FP8 GEMM (g->fp8_gemm: gpu_gemm_fp8.cu) or,
    // without one, both sides dequantized to bf16 (xdq, wdq: exact) for the
    // bf16 GEMMs; the experts on gpu_moe.cu's grouped GEMM over the codes
    // (either way: k_moe_gemm<true>, one launch a projection, its float
    // products scaled into egu_f, ey_f; its tile list in tile_e, tile_j,
    // ntiles).
    int fp8;
    uint8_t *xq;              // [R k][largest in]
    float *xs;                // [R k]
    bf16 *xdq;                // [R][largest dense in]: no FP8 GEMM only
    bf16 *wdq;                // the largest dense projection: no FP8 GEMM only
    float *egu_f, *ey_f;      // [R k][2 mi], [R k][H]: the experts' products
    int *tile_e, *tile_j, *ntiles; // [moe_tile_capacity(R k, E)] x 2, [1]
};

// ------------------------------------------------------------ kernels

__device__ __forceinline__ float dg_gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

static __device__ __forceinline__ double block_sum_d(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, o);
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    __syncthreads();
    if (l == 0)
        sh[w] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.0;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x == 0)
        sh[0] = v;
    __syncthreads();
    return sh[0];
}

// The block's largest v, ties to the lower index (every thread gets both).
static __device__ __forceinline__ void block_argmax(float *v, int *i, float *shv, int *shi)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffff, *v, o);
        int oi = __shfl_xor_sync(0xffffffff, *i, o);
        if (ov > *v || (ov == *v && oi < *i))
            *v = ov, *i = oi;
    }
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    __syncthreads();
    if (l == 0)
        shv[w] = *v, shi[w] = *i;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < (int)blockDim.x / 32; k++)
            if (shv[k] > shv[0] || (shv[k] == shv[0] && shi[k] < shi[0]))
                shv[0] = shv[k], shi[0] = shi[k];
    }
    __syncthreads();
    *v = shv[0], *i = shi[0];
}

// p[n] = centre + a (2u - 1), u uniform from (seed, index): the preset
__global__ void k_dg_init_bf16(bf16 *p, size_t n, uint64_t seed, float centre, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        p[i] = __float2bfloat16(centre + a * (2.0f * (float)(z >> 40) / 16777216.0f - 1.0f));
    }
}

__global__ void k_dg_init_f32(float *p, size_t n, uint64_t seed, float centre, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        p[i] = centre + a * (2.0f * (float)(z >> 40) / 16777216.0f - 1.0f);
    }
}

// x[r][h] = embed[id] x scale; id image_id -> pad_id when swap (encoder)
__global__ void k_dg_embed(const int32_t *tok, const bf16 *emb, float scale, int32_t image_id, int32_t pad_id,
                           float *x, int H)
{
    int32_t id = tok[blockIdx.x];
    if (image_id >= 0 && pad_id >= 0 && id == image_id)
        id = pad_id;
    const bf16 *e = emb + (size_t)id * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        x[(size_t)blockIdx.x * H + i] = __bfloat162float(e[i]) * scale;
}

// Row blockIdx.x: y = (add ? add : 0) + x (mean(x^2) + eps)^-1/2 (w ? w : 1) c
// into out_f (float; may be x) and/or out_b (bf16).
__global__ void k_dg_rms(const float *x, const float *w, float c, const float *add, float *out_f, bf16 *out_b, int H,
                         float eps)
{
    __shared__ float sh[32];
    size_t o = (size_t)blockIdx.x * H;
    float ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        ss += x[o + i] * x[o + i];
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float y = x[o + i] * inv * (w ? w[i] : 1.0f) * c;
        if (add)
            y += add[o + i];
        if (out_f)
            out_f[o + i] = y;
        if (out_b)
            out_b[o + i] = __float2bfloat16(y);
    }
}

// One head vector a block (grid rows x (nh + 2 kv)): q heads get q_norm
// and RoPE into qb [rows][nh hd]; k heads k_norm and RoPE into the cache
// kc [pos0 + row][kv hd]; v heads (from vf, which is kf in a full layer:
// V = the raw k_proj output) a weightless norm into vc.
__global__ void k_dg_qkv(const float *qf, const float *kf, const float *vf, const float *q_norm,
                         const float *k_norm, const float *inv_freq, int pos0, int nh, int kv, int hd, float eps,
                         bf16 *qb, bf16 *kc, bf16 *vc)
{
    __shared__ float v[DG_MAX_HD];
    __shared__ float sh[32];
    int row = blockIdx.x, u = blockIdx.y, kvd = kv * hd;
    const float *src, *w;
    bf16 *dst;
    int rope = 1;
    if (u < nh) {
        src = qf + ((size_t)row * nh + u) * hd, w = q_norm, dst = qb + ((size_t)row * nh + u) * hd;
    } else if (u < nh + kv) {
        int h = u - nh;
        src = kf + (size_t)row * kvd + h * hd, w = k_norm, dst = kc + (size_t)(pos0 + row) * kvd + h * hd;
    } else {
        int h = u - nh - kv;
        src = vf + (size_t)row * kvd + h * hd, w = NULL, dst = vc + (size_t)(pos0 + row) * kvd + h * hd, rope = 0;
    }
    float ss = 0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        v[i] = src[i];
        ss += v[i] * v[i];
    }
    ss = block_sum(ss, sh); // (synchronizes: v is complete)
    float inv = rsqrtf(ss / hd + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        v[i] = v[i] * inv * (w ? w[i] : 1.0f);
    __syncthreads();
    int half = hd / 2;
    if (!rope) {
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            dst[i] = __float2bfloat16(v[i]);
        return;
    }
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float a = (float)(pos0 + row) * inv_freq[i];
        double sd, cd;
        sincos((double)a, &sd, &cd);
        float c = (float)cd, s = (float)sd, x1 = v[i], x2 = v[i + half];
        dst[i] = __float2bfloat16(x1 * c - x2 * s);
        dst[i + half] = __float2bfloat16(x2 * c + x1 * s);
    }
}

// The scores of row blockIdx.x, head blockIdx.y (S [nh][rows][nk], keys
// at positions k0 + j) into probabilities P (bf16, same layout): encode
// (causal) row i at position pos0 + i sees keys [lo, pos0 + i] with lo =
// 0 in a full layer, else pos0 + i - W + 1; the canvas pass sees all nk.
__global__ void k_dg_softmax(const float *S, bf16 *P, int rows, int nk, int k0, int pos0, int causal, int full,
                             int W)
{
    __shared__ float sh[32];
    int i = blockIdx.x, h = blockIdx.y;
    size_t o = ((size_t)h * rows + i) * nk;
    int lo = 0, hi = nk; // [lo, hi) of j
    if (causal) {
        int p = pos0 + i, first = full ? 0 : p - W + 1;
        lo = first - k0 > 0 ? first - k0 : 0;
        hi = p + 1 - k0;
    }
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x)
        mx = fmaxf(mx, S[o + j]);
    for (int q = 16; q > 0; q >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, q));
    __shared__ float shm[32];
    if (threadIdx.x % 32 == 0)
        shm[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = shm[0];
    for (int k = 1; k < (int)blockDim.x / 32; k++)
        mx = fmaxf(mx, shm[k]);
    float sum = 0;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x)
        sum += expf(S[o + j] - mx);
    sum = block_sum(sum, sh);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < nk; j += blockDim.x)
        P[o + j] = __float2bfloat16(j >= lo && j < hi ? expf(S[o + j] - mx) * inv : 0.0f);
}

// act[r][i] = bf16(gelu_tanh(gate) up) over gu [n][2 inter] (gate, up)
__global__ void k_dg_geglu(const float *gu, bf16 *act, int inter, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n * inter; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / inter, i = e % inter;
        act[e] = __float2bfloat16(dg_gelu(gu[r * 2 * inter + i]) * gu[r * 2 * inter + inter + i]);
    }
}

// the same over bf16 products (the experts' grouped GEMMs)
__global__ void k_dg_geglu_b(const bf16 *gu, bf16 *act, int inter, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n * inter; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / inter, i = e % inter;
        act[e] = __float2bfloat16(dg_gelu(__bfloat162float(gu[r * 2 * inter + i])) *
                                  __bfloat162float(gu[r * 2 * inter + inter + i]));
    }
}

static __device__ __forceinline__ float dg_load(const bf16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ float dg_load(const float *p) { return *p; }

// x[r][h] = sum_t w[r k + t] y[pos[r k + t]][h], a block per row; y: the
// experts' products, bf16 (dtype auto's grouped GEMMs) or float (fp8's,
// k_moe_gemm's scaled output)
template <typename Y>
__global__ void k_dg_combine(float *x, const Y *y, const int *pos, const float *w, int k, int h)
{
    int r = blockIdx.x;
    for (int d = threadIdx.x; d < h; d += blockDim.x) {
        float s = 0;
        for (int t = 0; t < k; t++)
            s += w[r * k + t] * dg_load(&y[(size_t)pos[r * k + t] * h + d]);
        x[(size_t)r * h + d] = s;
    }
}

// w[p] *= per_expert_scale[idx[p]]
__global__ void k_dg_expert_scale(const int *idx, float *w, const float *scale, int n)
{
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < n)
        w[p] *= scale[idx[p]];
}

// The layer's end, row blockIdx.x: h1 (the shared MLP's output, normed)
// + rms(h2) w2 (the experts'), normed with wf, added to r, times scalar
// into x.
__global__ void k_dg_ffn_out(float *x, const float *r, float *h1, const float *h2, const float *w2, const float *wf,
                             float scalar, int H, float eps)
{
    __shared__ float sh[32];
    size_t o = (size_t)blockIdx.x * H;
    float ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        ss += h2[o + i] * h2[o + i];
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / H + eps), s2 = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float s = h1[o + i] + h2[o + i] * inv * w2[i];
        h1[o + i] = s;
        s2 += s * s;
    }
    s2 = block_sum(s2, sh);
    float inv2 = rsqrtf(s2 / H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x)
        x[o + i] = (r[o + i] + h1[o + i] * inv2 * wf[i]) * scalar;
}

__global__ void k_dg_softcap(float *l, size_t n, float cap)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        l[i] = tanhf(l[i] / cap) * cap;
}

__device__ __forceinline__ float dg_round_bf16(float f) { return __bfloat162float(__float2bfloat16(f)); }

// Self-conditioning's probabilities, row blockIdx.x: softmax of z (rounded
// to bf16 first in a bf16 model, as transformers' cast to the embedding
// dtype), float64 sum, into bf16.
__global__ void __launch_bounds__(1024) k_dg_sc_soft(const float *z, bf16 *soft, int V, int round)
{
    __shared__ float shv[32];
    __shared__ int shi[32];
    __shared__ double shd[32];
    const float *zr = z + (size_t)blockIdx.x * V;
    bf16 *pr = soft + (size_t)blockIdx.x * V;
    float mx = -INFINITY;
    int mi = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float a = round ? dg_round_bf16(zr[v]) : zr[v];
        if (a > mx)
            mx = a, mi = v;
    }
    block_argmax(&mx, &mi, shv, shi);
    double sum = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += exp((double)(round ? dg_round_bf16(zr[v]) : zr[v]) - mx);
    sum = block_sum_d(sum, shd);
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        pr[v] = __float2bfloat16((float)(exp((double)(round ? dg_round_bf16(zr[v]) : zr[v]) - mx) / sum));
}

// dgemma_sampler.c's tb_dg_rng value n as Exp(1): -log(u), u = ((value >>
// 11) + 0.5) 2^-53, in double, then float
__device__ __forceinline__ float dg_exp_noise(uint64_t seed, uint64_t n)
{
    uint64_t z = seed + (n + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    double u = ((double)(z >> 11) + 0.5) * 1.1102230246251565404e-16; // 2^-53
    return (float)-log(u);
}

// A step's per-position work, row blockIdx.x of l [C][V] (tb_dg_decide's
// loop, the same float32 and float64 steps): z = l / T in place; argmax
// (first of equal maxima); entropy from log_softmax in float64; the draw
// argmax_v (exp(z - mx) / sum) / q_v with q the stream's Exp(1) values n0 +
// row V + v (first of equal ratios).
__global__ void __launch_bounds__(1024) k_dg_decide(float *l, int V, float T, uint64_t seed, uint64_t n0, int32_t *sampled, int32_t *argmax,
                            float *entropy)
{
    __shared__ float shv[32];
    __shared__ int shi[32];
    __shared__ double shd[32];
    int row = blockIdx.x;
    float *z = l + (size_t)row * V;
    float mx = -INFINITY;
    int am = 0x7fffffff;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float a = z[v] / T;
        z[v] = a;
        if (a > mx || (a == mx && v < am))
            mx = a, am = v;
    }
    block_argmax(&mx, &am, shv, shi);
    double sum = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += exp((double)z[v] - mx);
    sum = block_sum_d(sum, shd);
    double lse = mx + log(sum);
    float inv = (float)(1.0 / sum);
    double h = 0;
    float best_r = -1;
    int best = 0x7fffffff;
    uint64_t base = n0 + (uint64_t)row * V;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float pv = expf(z[v] - mx) * inv;
        float ratio = pv / dg_exp_noise(seed, base + v);
        if (ratio > best_r || (ratio == best_r && v < best))
            best_r = ratio, best = v;
        double lp = (double)z[v] - lse;
        h -= exp(lp) * lp;
    }
    h = block_sum_d(h, shd);
    block_argmax(&best_r, &best, shv, shi);
    if (threadIdx.x == 0) {
        argmax[row] = am;
        sampled[row] = best;
        entropy[row] = (float)h;
    }
}

// ------------------------------------------------------------ host side

// y[rows][out] (beta: +)= x[rows][in] W[out][in]^T: the engine's GEMM, or
// for one row cublasGemmEx (gemm_bf16 is for spans)
static int mm(tb_gpu *g, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in, float beta)
{
    if (rows > 1)
        return gemm_bf16(g, y, x, w, rows, out, in, beta);
    float one = 1.0f;
    CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in,
                    &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

// y[rows][out] (beta: +)= x W^T over a projection: mm for bf16 weights;
// under dtype = fp8 (fp8.h: E4M3 weights and inputs, each row its own
// scale) the FP8 GEMV for one row (it quantizes x itself), else x's rows
// quantized (xq, xs), then the FP8 GEMM with the scales applied (its
// outer-vector route above FP8_SCALAR_ROWS rows, else unscaled into
// g->fp8_t and k_fp8_scale_out), or without one both sides dequantized to
// bf16 for mm: gpu_forward.cu's matmul_p, without its deferred scales.
static int mm_p(tb_gpu_dgemma *d, float *y, const bf16 *x, const dg_proj &p, int rows, int out, int in, float beta)
{
    tb_gpu *g = d->g;
    if (!p.q)
        return mm(g, y, x, p.w, rows, out, in, beta);
    if (rows == 1) {
        gemv_fp8(g, p.q, p.s, x, y, out, in, beta);
        LAUNCHED();
        return 0;
    }
    k_fp8_quant_act<<<rows, FP8_QUANT_THREADS, 0, g->stream>>>(x, in, d->xq, d->xs);
    LAUNCHED();
    if (g->fp8_gemm)
        return gemm_fp8(g, y, d->xq, d->xs, p.q, p.s, rows, out, in, beta, NULL);
    size_t nx = (size_t)rows * in, n = (size_t)out * in;
    k_fp8_dequant<<<blocks_for(nx / 16), 256, 0, g->stream>>>(d->xq, d->xs, in, nx, d->xdq);
    LAUNCHED();
    k_fp8_dequant<<<blocks_for(n / 16), 256, 0, g->stream>>>(p.q, p.s, in, n, d->wdq);
    LAUNCHED();
    return mm(g, y, d->xdq, d->wdq, rows, out, in, beta);
}

// dtype = fp8: W [rows][in] (p->w, bf16) replaced by its E4M3 codes and
// row scales (k_fp8_quantize_rows: fp8.h's rule, the CPU's bytes for the
// same values); the bf16 copy freed at once, so the load's peak is the
// FP8 weights plus one matrix in bf16.
static int quantize(tb_gpu *g, dg_proj *p, size_t rows, size_t in)
{
    if (dalloc(g, (void **)&p->q, rows * in) || dalloc(g, (void **)&p->s, rows * sizeof(float)))
        return -1;
    k_fp8_quantize_rows<<<(unsigned)rows, 256, 0, g->stream>>>(p->w, (int)in, p->q, p->s);
    LAUNCHED();
    CK(cudaStreamSynchronize(g->stream));
    dfree(g, p->w);
    p->w = NULL;
    return 0;
}

// dtype = fp8: layer l's projections (all but the router), once made in bf16
static int quantize_layer(tb_gpu_dgemma *d, int l)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    dg_layer *L = &d->L[l];
    size_t H = c->hidden, I = c->inter, E = c->n_experts, mi = c->moe_inter, q = (size_t)c->n_heads * L->hd;
    size_t kvd = (size_t)L->kv * L->hd;
    return quantize(g, &L->wq, q, H) || quantize(g, &L->wk, kvd, H) || (!L->full && quantize(g, &L->wv, kvd, H)) ||
                   quantize(g, &L->wo, H, q) || quantize(g, &L->gate_up, 2 * I, H) || quantize(g, &L->down, H, I) ||
                   quantize(g, &L->ex_gu, E * 2 * mi, H) || quantize(g, &L->ex_down, E * H, mi)
               ? -1
               : 0;
}

static void free_proj(tb_gpu *g, dg_proj *p)
{
    dfree(g, p->w);
    dfree(g, p->q);
    dfree(g, p->s);
    p->w = NULL, p->q = NULL, p->s = NULL;
}

static int up_f32(tb_gpu *g, float **dst, const float *src, size_t n)
{
    if (dalloc(g, (void **)dst, n * sizeof(float)))
        return -1;
    CK(cudaMemcpyAsync(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int up_bf16(tb_gpu *g, bf16 **dst, const float *src, size_t n, float *stage)
{
    if (dalloc(g, (void **)dst, n * sizeof(bf16)))
        return -1;
    CK(cudaMemcpyAsync(stage, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    k_f32_to_bf16<<<blocks_for(n), 256, 0, g->stream>>>(stage, *dst, n);
    LAUNCHED();
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int rnd_bf16(tb_gpu *g, bf16 **dst, size_t n, uint64_t *s, float centre, float a)
{
    if (dalloc(g, (void **)dst, n * sizeof(bf16)))
        return -1;
    *s += 0x632BE59BD9B4E019ULL;
    k_dg_init_bf16<<<4096, 256, 0, g->stream>>>(*dst, n, *s, centre, a);
    LAUNCHED();
    return 0;
}

static int rnd_f32(tb_gpu *g, float **dst, size_t n, uint64_t *s, float centre, float a)
{
    if (dalloc(g, (void **)dst, n * sizeof(float)))
        return -1;
    *s += 0x632BE59BD9B4E019ULL;
    k_dg_init_f32<<<blocks_for(n), 256, 0, g->stream>>>(*dst, n, *s, centre, a);
    LAUNCHED();
    return 0;
}

// A context with no model: device 0, its stream, cuBLAS with a fixed
// workspace (as create_on's), nothing else.
static int bare_context(tb_gpu **out, char *err, size_t err_size)
{
    *out = NULL;
    tb_gpu *g = (tb_gpu *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    g->tp = 1;
    g->device = 0;
    int rc = 0;
    if (cudaSetDevice(0) != cudaSuccess || cudaGetDeviceProperties(&g->prop, 0) != cudaSuccess)
        rc = fail(g, "no usable CUDA device 0");
    else if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess ||
             cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS)
        rc = fail(g, "cannot create a CUDA stream or cuBLAS handle");
    if (!rc) {
        cublasSetStream(g->blas, g->stream);
        rc = dalloc(g, &g->blas_ws, TB_GPU_BLAS_WS);
    }
    if (!rc) {
        cublasSetWorkspace(g->blas, g->blas_ws, TB_GPU_BLAS_WS);
        cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH);
    }
    if (rc) {
        snprintf(err, err_size, "%s", g->error);
        tb_gpu_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

static int fold_touched(tb_gpu_dgemma *d);

static void dg_free_buffers(tb_gpu_dgemma *d)
{
    tb_gpu *g = d->g;
    void *p[] = {d->tok, d->x,   d->r,  d->h1,  d->h2,  d->xn,  d->qf,  d->kf,     d->vf,   d->qb,   d->att,
                 d->S,   d->P,   d->gu, d->act, d->rlog, d->w,  d->idx, d->off,    d->order, d->pos, d->xg,
                 d->egu, d->eact, d->ey, d->logits, d->soft, d->d_ids, d->d_ent, d->xq, d->xs, d->xdq,
                 d->egu_f, d->ey_f, d->tile_e, d->tile_j, d->ntiles, g->fp8_t};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        dfree(g, p[i]);
    for (int l = 0; d->L && l < d->cfg.n_layers; l++) {
        dfree(g, d->L[l].kc);
        dfree(g, d->L[l].vc);
        d->L[l].kc = d->L[l].vc = NULL;
    }
    if (d->h_off)
        cudaFreeHost(d->h_off);
    if (d->h_ptrs)
        cudaFreeHost(d->h_ptrs);
    dfree(g, d->d_ptrs);
    dfree(g, d->d_touched);
    d->h_ptrs = d->d_ptrs = NULL;
    d->d_touched = NULL;
    d->tok = NULL, d->idx = d->off = d->order = d->pos = d->h_off = NULL;
    d->x = d->r = d->h1 = d->h2 = d->qf = d->kf = d->vf = d->S = d->gu = d->rlog = d->w = NULL;
    d->logits = d->d_ent = NULL;
    d->xn = d->qb = d->att = d->P = d->act = d->xg = d->eact = d->soft = d->egu = d->ey = NULL;
    d->d_ids = NULL;
    d->xq = NULL, d->xs = NULL, d->xdq = NULL, d->egu_f = d->ey_f = NULL;
    d->tile_e = d->tile_j = d->ntiles = NULL;
    g->fp8_t = NULL, g->fp8_t_floats = 0; // this context's (gpu_gemm_fp8.cu's small spans), made by reserve
    d->max_ctx = d->cap = d->len = 0;
    d->have_z = d->have_logits = 0;
}

extern "C" void tb_gpu_dgemma_free(tb_gpu_dgemma *d)
{
    if (!d)
        return;
    tb_gpu *g = d->g;
    if (g) {
        cudaStreamSynchronize(g->stream);
        dg_free_buffers(d);
        for (int l = 0; d->L && l < d->cfg.n_layers; l++) {
            dg_layer *L = &d->L[l];
            void *p[] = {L->attn_norm, L->q_norm, L->k_norm, L->post_attn_norm, L->pre_ffn_norm, L->post_ffn_norm1,
                         L->pre_ffn_norm2, L->router_scale, L->expert_scale, L->post_ffn_norm2, L->post_ffn_norm,
                         L->router};
            for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
                dfree(g, p[i]);
            dg_proj *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate_up, &L->down, &L->ex_gu, &L->ex_down};
            for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
                free_proj(g, w[i]);
        }
        void *p[] = {d->embed, d->final_norm, d->sc_pre_norm, d->inv_sl, d->inv_full, d->wdq};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            dfree(g, p[i]);
        free_proj(g, &d->sc_gu);
        free_proj(g, &d->sc_down);
        tb_gpu_free(g);
    }
    free(d->L);
    free(d);
}

static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int upload(tb_gpu_dgemma *d, const tb_dgemma_model *m)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    size_t H = c->hidden, V = c->vocab, I = c->inter, E = c->n_experts, mi = c->moe_inter, nh = c->n_heads;
    size_t hdm = c->hd_sliding > c->hd_full ? c->hd_sliding : c->hd_full;
    size_t big = V * H;
    size_t kvd = (size_t)(c->kv_sliding * c->hd_sliding > c->kv_full * c->hd_full ? c->kv_sliding * c->hd_sliding
                                                                                    : c->kv_full * c->hd_full);
    // every upload's float staging: the largest weight (the router's E H too: E > V is legal)
    size_t cand[] = {2 * I * H, H * I, E * 2 * mi * H, E * mi * H, nh * hdm * H, kvd * H, E * H};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        big = cand[i] > big ? cand[i] : big;
    float *stage = NULL;
    if (dalloc(g, (void **)&stage, big * sizeof(float)))
        return -1;
    int rc = up_bf16(g, &d->embed, m->embed, V * H, stage) || up_f32(g, &d->final_norm, m->final_norm, H) ||
             up_f32(g, &d->sc_pre_norm, m->sc_pre_norm, H) ||
             up_bf16(g, &d->sc_gu.w, m->sc_gate_up, 2 * I * H, stage) || up_bf16(g, &d->sc_down.w, m->sc_down, H * I, stage);
    if (!rc && d->fp8)
        rc = quantize(g, &d->sc_gu, 2 * I, H) || quantize(g, &d->sc_down, H, I);
    for (int l = 0; l < c->n_layers && !rc; l++) {
        const tb_dgemma_layer *S = &m->layers[l];
        dg_layer *L = &d->L[l];
        size_t hd = L->hd, kvd = (size_t)L->kv * hd, q = nh * hd;
        rc = up_f32(g, &L->attn_norm, S->attn_norm, H) || up_bf16(g, &L->wq.w, S->wq, q * H, stage) ||
             up_bf16(g, &L->wk.w, S->wk, kvd * H, stage) || (S->wv && up_bf16(g, &L->wv.w, S->wv, kvd * H, stage)) ||
             up_f32(g, &L->q_norm, S->q_norm, hd) || up_f32(g, &L->k_norm, S->k_norm, hd) ||
             up_bf16(g, &L->wo.w, S->wo, H * q, stage) || up_f32(g, &L->post_attn_norm, S->post_attn_norm, H) ||
             up_f32(g, &L->pre_ffn_norm, S->pre_ffn_norm, H) ||
             up_bf16(g, &L->gate_up.w, S->gate_up, 2 * I * H, stage) || up_bf16(g, &L->down.w, S->down, H * I, stage) ||
             up_f32(g, &L->post_ffn_norm1, S->post_ffn_norm1, H) || up_f32(g, &L->pre_ffn_norm2, S->pre_ffn_norm2, H) ||
             up_bf16(g, &L->router, S->router, E * H, stage) || up_f32(g, &L->router_scale, S->router_scale, H) ||
             up_f32(g, &L->expert_scale, S->expert_scale, E) ||
             up_bf16(g, &L->ex_gu.w, S->experts_gate_up, E * 2 * mi * H, stage) ||
             up_bf16(g, &L->ex_down.w, S->experts_down, E * H * mi, stage) ||
             up_f32(g, &L->post_ffn_norm2, S->post_ffn_norm2, H) || up_f32(g, &L->post_ffn_norm, S->post_ffn_norm, H);
        L->scalar_enc = S->scalar_enc, L->scalar_dec = S->scalar_dec;
        if (!rc && d->fp8) // layer by layer: the bf16 copies never all at once
            rc = quantize_layer(d, l);
    }
    dfree(g, stage);
    return rc ? -1 : 0;
}

static int randomize(tb_gpu_dgemma *d, uint64_t seed)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    size_t H = c->hidden, V = c->vocab, I = c->inter, E = c->n_experts, mi = c->moe_inter, nh = c->n_heads;
    const float w = 0.035f, nrm = 0.2f; // tb_dgemma_preset's ranges
    uint64_t s = seed ^ 0x746F6B62656E6368ULL;
    int rc = rnd_bf16(g, &d->embed, V * H, &s, 0, w) || rnd_f32(g, &d->final_norm, H, &s, 1, nrm) ||
             rnd_f32(g, &d->sc_pre_norm, H, &s, 1, nrm) || rnd_bf16(g, &d->sc_gu.w, 2 * I * H, &s, 0, w) ||
             rnd_bf16(g, &d->sc_down.w, H * I, &s, 0, w);
    if (!rc && d->fp8)
        rc = quantize(g, &d->sc_gu, 2 * I, H) || quantize(g, &d->sc_down, H, I);
    for (int l = 0; l < c->n_layers && !rc; l++) {
        dg_layer *L = &d->L[l];
        size_t hd = L->hd, kvd = (size_t)L->kv * hd, q = nh * hd;
        rc = rnd_f32(g, &L->attn_norm, H, &s, 1, nrm) || rnd_bf16(g, &L->wq.w, q * H, &s, 0, w) ||
             rnd_bf16(g, &L->wk.w, kvd * H, &s, 0, w) || (!L->full && rnd_bf16(g, &L->wv.w, kvd * H, &s, 0, w)) ||
             rnd_f32(g, &L->q_norm, hd, &s, 1, nrm) || rnd_f32(g, &L->k_norm, hd, &s, 1, nrm) ||
             rnd_bf16(g, &L->wo.w, H * q, &s, 0, w) || rnd_f32(g, &L->post_attn_norm, H, &s, 1, nrm) ||
             rnd_f32(g, &L->pre_ffn_norm, H, &s, 1, nrm) || rnd_bf16(g, &L->gate_up.w, 2 * I * H, &s, 0, w) ||
             rnd_bf16(g, &L->down.w, H * I, &s, 0, w) || rnd_f32(g, &L->post_ffn_norm1, H, &s, 1, nrm) ||
             rnd_f32(g, &L->pre_ffn_norm2, H, &s, 1, nrm) || rnd_bf16(g, &L->router, E * H, &s, 0, w) ||
             rnd_f32(g, &L->router_scale, H, &s, 1, nrm) || rnd_f32(g, &L->expert_scale, E, &s, 1, nrm) ||
             rnd_bf16(g, &L->ex_gu.w, E * 2 * mi * H, &s, 0, w) || rnd_bf16(g, &L->ex_down.w, E * H * mi, &s, 0, w) ||
             rnd_f32(g, &L->post_ffn_norm2, H, &s, 1, nrm) || rnd_f32(g, &L->post_ffn_norm, H, &s, 1, nrm);
        L->scalar_dec = L->scalar_enc = 1.0f + nrm * (2.0f * (float)(mix64(&s) >> 40) / 16777216.0f - 1.0f);
        if (!rc && d->fp8) // layer by layer: the preset's 50 GB of bf16 never all at once
            rc = quantize_layer(d, l);
    }
    if (!rc && cudaStreamSynchronize(g->stream) != cudaSuccess)
        rc = fail(g, "random weights: %s", cudaGetErrorString(cudaGetLastError()));
    return rc;
}

// dtype = fp8: whether the FP8 GEMM runs here (gpu_gemm_fp8.cu's
// gemm_fp8_available_for, over the sliding layers' q, k, v and o, and the
// dense gate-up and down); the environment's TB_GPU_FP8_GEMM=0 says no,
// as for the dense engine. The other shapes are planned on first use (a
// refusal fails its call by name).
static int fp8_gemm_probe(tb_gpu_dgemma *d)
{
    const char *env = getenv("TB_GPU_FP8_GEMM");
    if (env && strcmp(env, "0") == 0)
        return 0;
    const tb_dgemma_config *c = &d->cfg;
    int H = c->hidden, hd = c->hd_sliding, I = c->inter;
    int outs[4] = {(c->n_heads + 2 * c->kv_sliding) * hd, H, 2 * I, H}, ins[4] = {H, c->n_heads * hd, H, I};
    return gemm_fp8_available_for(d->g, 4, outs, ins);
}

// dtype = fp8 without the FP8 GEMM: room for the largest dense projection
// dequantized (the experts take the grouped GEMM over their codes)
static int alloc_wdq(tb_gpu_dgemma *d)
{
    const tb_dgemma_config *c = &d->cfg;
    size_t H = c->hidden, I = c->inter, hdm = c->hd_sliding > c->hd_full ? c->hd_sliding : c->hd_full;
    size_t a = 2 * I * H, b = (size_t)c->n_heads * hdm * H;
    return dalloc(d->g, (void **)&d->wdq, (a > b ? a : b) * sizeof(bf16));
}

extern "C" int tb_gpu_dgemma_create(tb_gpu_dgemma **out, const tb_dgemma_config *cfg, const tb_dgemma_model *cpu,
                                    uint64_t seed, char *err, size_t err_size)
{
    return tb_gpu_dgemma_create_dtype(out, cfg, cpu, seed, 0, err, err_size);
}

extern "C" int tb_gpu_dgemma_create_dtype(tb_gpu_dgemma **out, const tb_dgemma_config *cfg,
                                          const tb_dgemma_model *cpu, uint64_t seed, int fp8, char *err,
                                          size_t err_size)
{
    kprof_paused loading; // a load is not in TB_GPU_KERNEL_PROFILE's table
    *out = NULL;
    if (cpu)
        cfg = &cpu->cfg;
    const tb_dgemma_config *c = cfg;
    if (fp8 && tb_dgemma_check_fp8_gpu(c, err, err_size)) // refused before anything is made on the device
        return -1;
    if (c->hd_sliding > DG_MAX_HD || c->hd_full > DG_MAX_HD || c->hd_sliding % 2 || c->hd_full % 2 ||
        c->n_experts > TB_MOE_MAX_EXPERTS || c->n_experts < 1 || c->top_k < 1 || c->top_k > c->n_experts ||
        c->n_layers < 1 || c->n_layers > TB_DG_MAX_LAYERS || c->canvas < 1 || c->kv_sliding < 1 || c->kv_full < 1 ||
        c->n_heads % c->kv_sliding || c->n_heads % c->kv_full) {
        snprintf(err, err_size,
                 "DiffusionGemma on CUDA: head sizes %d and %d (even, at most %d), %d experts (1 .. %d), top_k %d, "
                 "%d layers, canvas %d, %d heads over %d and %d KV heads (a whole group each)",
                 c->hd_sliding, c->hd_full, DG_MAX_HD, c->n_experts, TB_MOE_MAX_EXPERTS, c->top_k, c->n_layers,
                 c->canvas, c->n_heads, c->kv_sliding, c->kv_full);
        return -1;
    }
    tb_gpu_dgemma *d = (tb_gpu_dgemma *)calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    d->cfg = *c;
    d->R = c->canvas;
    if (bare_context(&d->g, err, err_size)) {
        free(d);
        return -1;
    }
    tb_gpu *g = d->g;
    int rc = 0;
    if (fp8) {
        d->fp8 = g->fp8 = 1; // g->fp8: the FLOP/s ceiling is of the FP8 GEMM (gpu_ceilings.cu)
        g->fp8_variant = TB_GPU_FP8_GEMV_DEFAULT;
        g->fp8_gemm = fp8_gemm_probe(d);
        if (!g->fp8_gemm)
            rc = alloc_wdq(d);
    }
    d->L = (dg_layer *)calloc((size_t)c->n_layers, sizeof *d->L);
    float *inv_sl = (float *)malloc((size_t)c->hd_sliding / 2 * sizeof(float) + 4);
    float *inv_full = (float *)malloc((size_t)c->hd_full / 2 * sizeof(float) + 4);
    if (!d->L || !inv_sl || !inv_full)
        rc = fail(g, "out of host memory");
    for (int l = 0; !rc && l < c->n_layers; l++) {
        dg_layer *L = &d->L[l];
        L->full = c->full[l];
        L->hd = L->full ? c->hd_full : c->hd_sliding;
        L->kv = L->full ? c->kv_full : c->kv_sliding;
    }
    if (!rc) {
        tb_dgemma_derive(c, inv_sl, inv_full, &d->embed_scale);
        if (cpu) // the loader's own (equal by construction)
            d->embed_scale = cpu->embed_scale;
        rc = up_f32(g, &d->inv_sl, cpu ? cpu->inv_freq_sliding : inv_sl, (size_t)c->hd_sliding / 2) ||
             up_f32(g, &d->inv_full, cpu ? cpu->inv_freq_full : inv_full, (size_t)c->hd_full / 2);
    }
    free(inv_sl);
    free(inv_full);
    if (!rc)
        rc = cpu ? upload(d, cpu) : randomize(d, seed);
    if (rc) {
        snprintf(err, err_size, "%s", g->error);
        tb_gpu_dgemma_free(d);
        return -1;
    }
    // the kernel table (gpu_kprof.h) after the weights are made; tb_gpu_free ends it
    char what[384];
    snprintf(what, sizeof what, "DiffusionGemma%s on %.256s", fp8 ? " (dtype fp8)" : "", g->prop.name);
    g->kprof = tb_gpu_kprof_begin(what);
    *out = d;
    return 0;
}

extern "C" int tb_gpu_dgemma_reserve(tb_gpu_dgemma *d, int max_ctx)
{
    tb_gpu *g = d->g;
    if (max_ctx < 1)
        return fail(g, "DiffusionGemma cache of %d positions", max_ctx);
    if (max_ctx <= d->max_ctx)
        return 0;
    CK(cudaStreamSynchronize(g->stream));
    if (fold_touched(d)) // the count so far, before its buffer goes
        return -1;
    dg_free_buffers(d);
    const tb_dgemma_config *c = &d->cfg;
    size_t R = d->R, H = c->hidden, V = c->vocab, I = c->inter, E = c->n_experts, K = c->top_k, mi = c->moe_inter;
    size_t hdm = c->hd_sliding > c->hd_full ? c->hd_sliding : c->hd_full, nh = c->n_heads;
    size_t kvm = (size_t)c->kv_sliding * c->hd_sliding > (size_t)c->kv_full * c->hd_full
                     ? (size_t)c->kv_sliding * c->hd_sliding
                     : (size_t)c->kv_full * c->hd_full;
    size_t cap = (size_t)max_ctx + R, Pn = R * K;
    if (d->fp8 && !moe_grouped_fits((int)Pn, (int)E))
        return fail(g, "DiffusionGemma fp8: %zu (row, expert) pairs a pass, more than the grouped GEMM's grid takes",
                    Pn);
    int rc = 0;
    for (int l = 0; !rc && l < c->n_layers; l++) {
        size_t kvd = (size_t)d->L[l].kv * d->L[l].hd;
        rc = dalloc(g, (void **)&d->L[l].kc, cap * kvd * sizeof(bf16)) ||
             dalloc(g, (void **)&d->L[l].vc, cap * kvd * sizeof(bf16));
    }
#define A(p, n) (rc = rc || dalloc(g, (void **)&(p), (n) * sizeof *(p)))
    A(d->tok, R);
    A(d->x, R * H);
    A(d->r, R * H);
    A(d->h1, R * H);
    A(d->h2, R * H);
    A(d->xn, R * H);
    A(d->qf, R * nh * hdm);
    A(d->kf, R * kvm);
    A(d->vf, R * kvm);
    A(d->qb, R * nh * hdm);
    A(d->att, R * nh * hdm);
    A(d->S, nh * R * cap);
    A(d->P, nh * R * cap);
    A(d->gu, R * 2 * I);
    A(d->act, R * I);
    A(d->rlog, R * E);
    A(d->w, Pn);
    A(d->idx, Pn);
    A(d->off, 2 * E + 1); // k_moe_group: the starts, then its list of chosen experts
    A(d->order, Pn);
    A(d->pos, Pn);
    if (!d->fp8) { // bf16's cuBLAS experts (fp8's grouped GEMM gathers itself, into egu_f, ey_f)
        A(d->xg, Pn * H);
        A(d->egu, Pn * 2 * mi);
        A(d->ey, Pn * H);
    }
    A(d->eact, Pn * mi);
    A(d->logits, R * V);
    A(d->soft, R * V);
    A(d->d_ids, 2 * R);
    A(d->d_ent, R);
    A(d->d_ptrs, 6 * E);
    A(d->d_touched, 1);
    if (d->fp8) {
        // the largest projection input: a dense one (R rows) or an expert's (R k rows)
        size_t din = H > nh * hdm ? H : nh * hdm;
        din = I > din ? I : din;
        size_t xin = R * din > Pn * (H > mi ? H : mi) ? R * din : Pn * (H > mi ? H : mi);
        A(d->xq, xin);
        A(d->xs, Pn);
        A(d->egu_f, Pn * 2 * mi);
        A(d->ey_f, Pn * H);
        A(d->tile_e, (size_t)moe_tile_capacity((int)Pn, (int)E));
        A(d->tile_j, (size_t)moe_tile_capacity((int)Pn, (int)E));
        A(d->ntiles, 1);
        if (!g->fp8_gemm) {
            A(d->xdq, R * din);
        } else {
            // gemm_fp8's small products (FP8_SCALAR_ROWS rows and fewer) before their scales
            size_t out = nh * hdm > 2 * I ? nh * hdm : 2 * I;
            out = H > out ? H : out;
            out = kvm > out ? kvm : out;
            g->fp8_t_floats = (R < FP8_SCALAR_ROWS ? R : FP8_SCALAR_ROWS) * out;
            A(g->fp8_t, g->fp8_t_floats);
        }
    }
#undef A
    if (!rc && (cudaMallocHost((void **)&d->h_off, (E + 1) * sizeof(int)) != cudaSuccess ||
                cudaMallocHost((void **)&d->h_ptrs, 6 * E * sizeof(void *)) != cudaSuccess))
        rc = fail(g, "cannot allocate pinned host memory");
    if (!rc && cudaMemsetAsync(d->d_touched, 0, sizeof *d->d_touched, g->stream) != cudaSuccess)
        rc = fail(g, "cudaMemsetAsync failed");
    if (rc) {
        dg_free_buffers(d);
        return -1;
    }
    d->max_ctx = max_ctx;
    d->cap = (int)cap;
    d->len = 0;
    d->have_z = d->have_logits = 0;
    return 0;
}

extern "C" void tb_gpu_dgemma_reset(tb_gpu_dgemma *d)
{
    d->len = 0;
    d->have_z = d->have_logits = 0;
}

extern "C" void tb_gpu_dgemma_log_routes(tb_gpu_dgemma *d, int32_t *log, size_t cap)
{
    d->route_log = log, d->route_cap = log ? cap : 0, d->route_n = 0;
}

extern "C" size_t tb_gpu_dgemma_routes_logged(const tb_gpu_dgemma *d)
{
    return d->route_n;
}

extern "C" int tb_gpu_dgemma_len(const tb_gpu_dgemma *d)
{
    return d->len;
}

typedef enum { ENCODE, DENOISE } pass;

// Attention of `rows` rows at positions pos0 + i over layer l's cache,
// whose slots [pos0, pos0 + rows) the rows' own keys and values already
// hold: keys [k0, k1), the scores and probabilities [nh][rows][nk], then
// att [rows][nh hd] (bf16). Per K/V head: its `group` query heads as one
// strided batch (the K/V operand shared: stride 0).
static int attend(tb_gpu_dgemma *d, int l, int rows, int pos0, pass mode)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    const dg_layer *L = &d->L[l];
    int nh = c->n_heads, hd = L->hd, kv = L->kv, kvd = kv * hd, group = nh / kv, W = c->sliding_window;
    int k0, k1;
    if (mode == ENCODE) {
        k0 = L->full ? 0 : (pos0 - W + 1 > 0 ? pos0 - W + 1 : 0);
        k1 = pos0 + rows;
    } else {
        k0 = L->full ? 0 : (d->len - (W - 1) > 0 ? d->len - (W - 1) : 0);
        k1 = d->len + rows;
    }
    int nk = k1 - k0;
    float one = 1.0f, zero = 0.0f;
    long long sS = (long long)rows * nk;
    for (int h = 0; h < kv; h++) {
        CB(cublasGemmStridedBatchedEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, nk, rows, hd, &one,
                                      L->kc + (size_t)k0 * kvd + (size_t)h * hd, CUDA_R_16BF, kvd, 0,
                                      d->qb + (size_t)h * group * hd, CUDA_R_16BF, nh * hd, hd, &zero,
                                      d->S + (size_t)h * group * sS, CUDA_R_32F, nk, sS, group, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
    }
    k_dg_softmax<<<dim3(rows, nh), DG_THREADS, 0, g->stream>>>(d->S, d->P, rows, nk, k0, pos0, mode == ENCODE,
                                                                L->full, W);
    LAUNCHED();
    for (int h = 0; h < kv; h++) {
        CB(cublasGemmStridedBatchedEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, rows, nk, &one,
                                      L->vc + (size_t)k0 * kvd + (size_t)h * hd, CUDA_R_16BF, kvd, 0,
                                      d->P + (size_t)h * group * sS, CUDA_R_16BF, nk, sS, &zero,
                                      d->att + (size_t)h * group * hd, CUDA_R_16BF, nh * hd, hd, group,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    // the roofline: QK^T and PV, K and V read over the span's keys
    g->work_flops += 4.0 * rows * nh * (double)nk * hd;
    g->work_bytes += 2.0 * 2 * (double)nk * kvd;
    return 0;
}

static int experts_bf16(tb_gpu_dgemma *d, const dg_layer *L, int rows, const int *off);
static int experts_fp8(tb_gpu_dgemma *d, const dg_layer *L, int rows);

// DiffusionGemmaTextRouter and the experts, from the residual r into h2
// (before post_feedforward_layernorm_2). Under dtype = fp8 the router
// stays bf16 (its input is not quantized); the experts' inputs are.
static int moe(tb_gpu_dgemma *d, const dg_layer *L, int rows)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    int H = c->hidden, E = c->n_experts, K = c->top_k, mi = c->moe_inter, P = rows * K;
    float eps = (float)c->rms_eps;
    // the router's input: weightless norm x scale x H^-0.5
    k_dg_rms<<<rows, DG_THREADS, 0, g->stream>>>(d->r, L->router_scale, (float)pow((double)H, -0.5), NULL, NULL,
                                                 d->xn, H, eps);
    LAUNCHED();
    if (mm(g, d->rlog, d->xn, L->router, rows, E, H, 0.0f))
        return -1;
    // softmax over all experts, top-k (ties to the lower index), renormalised
    moe_route_args ra = {E, K, 0, NULL, 1, 1, 0, 1, 1.0f}; // softmax, top-K renormalised, no groups
    k_moe_route<<<rows, 32, 0, g->stream>>>(d->rlog, ra, d->idx, d->w);
    LAUNCHED();
    k_dg_expert_scale<<<(P + 255) / 256, 256, 0, g->stream>>>(d->idx, d->w, L->expert_scale, P);
    LAUNCHED();
    k_moe_group<<<1, 1024, 0, g->stream>>>(d->idx, P, E, d->off, d->order, d->pos, d->d_touched);
    LAUNCHED();
    // the experts' input
    k_dg_rms<<<rows, DG_THREADS, 0, g->stream>>>(d->r, L->pre_ffn_norm2, 1.0f, NULL, NULL, d->xn, H, eps);
    LAUNCHED();
    // the host waits for the groups only where it needs them: bf16's
    // cuBLAS calls take host pointers, a test's route log reads the sets;
    // dtype = fp8's grouped GEMM reads them on the device
    if (!d->fp8 || d->route_log) {
        CK(cudaMemcpyAsync(d->h_off, d->off, (size_t)(E + 1) * sizeof(int), cudaMemcpyDeviceToHost, g->stream));
        if (d->route_log) { // a test's record of the sets, in the order the CPU's replay reads them
            if (d->route_n + (size_t)P > d->route_cap)
                return fail(g, "DiffusionGemma route log: %zu ids, room for %zu", d->route_n + (size_t)P,
                            d->route_cap);
            CK(cudaMemcpyAsync(d->route_log + d->route_n, d->idx, (size_t)P * sizeof(int), cudaMemcpyDeviceToHost,
                               g->stream));
            d->route_n += (size_t)P;
        }
        CK(cudaStreamSynchronize(g->stream));
    }
    if (d->fp8 ? experts_fp8(d, L, rows) : experts_bf16(d, L, rows, d->h_off))
        return -1;
    // the roofline: every row's K experts' FLOPs; the bytes of the experts
    // some row chose are counted on the device (k_moe_group's d_touched)
    // and folded in by fold_touched
    g->work_flops += 2.0 * P * 3.0 * H * mi;
    d->moe_rows += rows;
    return 0;
}

// The distinct experts the MoE layer calls read since the last fold
// (k_moe_group's device count; an expert no row chose is never read) into
// expert_reads and the roofline's bytes (docs/METRICS.md's active bytes:
// an expert's three matrices, bf16, or under fp8 a byte a weight and a
// float scale an output row). Waits for the stream.
static int fold_touched(tb_gpu_dgemma *d)
{
    tb_gpu *g = d->g;
    if (!d->d_touched)
        return 0;
    unsigned long long n = 0;
    if (take_device_count(g, d->d_touched, &n))
        return -1;
    double H = d->cfg.hidden, mi = d->cfg.moe_inter;
    g->work_bytes += (double)n * (d->fp8 ? 3.0 * H * mi + 4.0 * (2.0 * mi + H) : 2.0 * 3.0 * H * mi);
    d->expert_reads += (double)n;
    return 0;
}

// The experts in bf16 over the rows xn (moe's): gathered into xg, each
// chosen expert's rows as one product, all experts in one grouped GEMM
// (bf16 out) where cuBLAS has it, else a GEMM each; then GeGLU, down, and
// the combine into h2.
static int experts_bf16(tb_gpu_dgemma *d, const dg_layer *L, int rows, const int *off)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    int H = c->hidden, E = c->n_experts, K = c->top_k, mi = c->moe_inter, P = rows * K;
    float one = 1.0f, zero = 0.0f;
    int touched = 0;
    k_moe_gather<<<P < 65535 ? P : 65535, 256, 0, g->stream>>>(d->xn, d->order, K, H, P, d->xg);
    LAUNCHED();
    // the chosen experts, group i: expert e's rows [off[e], off[e + 1])
    int gm[2][TB_MOE_MAX_EXPERTS], gn[TB_MOE_MAX_EXPERTS], gk[2][TB_MOE_MAX_EXPERTS], ones[TB_MOE_MAX_EXPERTS];
    float alpha[TB_MOE_MAX_EXPERTS], beta[TB_MOE_MAX_EXPERTS];
    cublasOperation_t opT[TB_MOE_MAX_EXPERTS], opN[TB_MOE_MAX_EXPERTS];
    void **hp = d->h_ptrs;
    for (int e = 0; e < E; e++) {
        int n = off[e + 1] - off[e];
        if (n == 0)
            continue; // an expert no row chose is never read
        int i = touched++;
        gm[0][i] = 2 * mi, gk[0][i] = H, gm[1][i] = H, gk[1][i] = mi, gn[i] = n, ones[i] = 1;
        alpha[i] = 1.0f, beta[i] = 0.0f, opT[i] = CUBLAS_OP_T, opN[i] = CUBLAS_OP_N;
        hp[i] = (void *)(L->ex_gu.w + (size_t)e * 2 * mi * H);
        hp[E + i] = d->xg + (size_t)off[e] * H;
        hp[2 * E + i] = d->egu + (size_t)off[e] * 2 * mi;
        hp[3 * E + i] = (void *)(L->ex_down.w + (size_t)e * H * mi);
        hp[4 * E + i] = d->eact + (size_t)off[e] * mi;
        hp[5 * E + i] = d->ey + (size_t)off[e] * H;
    }
#if CUBLAS_VERSION >= 120500 // cublasGemmGroupedBatchedEx came with cuBLAS 12.5
    int grouped = !d->grouped_failed;
#else
    int grouped = 0;
#endif
    void **dp = d->d_ptrs;
#if CUBLAS_VERSION >= 120500
    if (grouped) {
        CK(cudaMemcpyAsync(dp, hp, 6 * (size_t)E * sizeof(void *), cudaMemcpyHostToDevice, g->stream));
        cublasStatus_t st = cublasGemmGroupedBatchedEx(
            g->blas, opT, opN, gm[0], gn, gk[0], alpha, (const void *const *)dp, CUDA_R_16BF, gk[0],
            (const void *const *)(dp + E), CUDA_R_16BF, gk[0], beta, dp + 2 * E, CUDA_R_16BF, gm[0], touched, ones,
            CUBLAS_COMPUTE_32F);
        if (st != CUBLAS_STATUS_SUCCESS)
            d->grouped_failed = 1, grouped = 0;
    }
#endif
    if (!grouped)
        for (int i = 0; i < touched; i++)
            CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, 2 * mi, gn[i], H, &one, hp[i], CUDA_R_16BF, H,
                            hp[E + i], CUDA_R_16BF, H, &zero, hp[2 * E + i], CUDA_R_16BF, 2 * mi, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    k_dg_geglu_b<<<blocks_for((size_t)P * mi), 256, 0, g->stream>>>(d->egu, d->eact, mi, (size_t)P);
    LAUNCHED();
#if CUBLAS_VERSION >= 120500
    if (grouped)
        CB(cublasGemmGroupedBatchedEx(g->blas, opT, opN, gm[1], gn, gk[1], alpha,
                                      (const void *const *)(dp + 3 * E), CUDA_R_16BF, gk[1],
                                      (const void *const *)(dp + 4 * E), CUDA_R_16BF, gk[1], beta, dp + 5 * E,
                                      CUDA_R_16BF, gm[1], touched, ones, CUBLAS_COMPUTE_32F));
    else
#endif
        for (int i = 0; i < touched; i++)
            CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, H, gn[i], mi, &one, hp[3 * E + i], CUDA_R_16BF, mi,
                            hp[4 * E + i], CUDA_R_16BF, mi, &zero, hp[5 * E + i], CUDA_R_16BF, H, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    k_dg_combine<<<rows, 256, 0, g->stream>>>(d->h2, d->ey, d->pos, d->w, K, H);
    LAUNCHED();
    return 0;
}

// dtype = fp8 (with or without the FP8 GEMM): the rows xn quantized once
// (a scale a row, as the CPU rounds each row once for all its experts),
// then every chosen expert's rows in one grouped GEMM a projection
// (gpu_moe.cu's k_moe_gemm over the E4M3 codes, gathering the rows itself:
// their exact bf16 values on tensor cores, float sums, both scales
// applied), GeGLU, the down product's inputs quantized, the combine into
// h2. No call per expert (the ~7,700 cuBLASLt calls a canvas pass of the
// published shape took before) and no host wait: the groups stay on the
// device (moe() reads them back only for a test's route log), the
// experts' count for the roofline too (fold_touched).
static int experts_fp8(tb_gpu_dgemma *d, const dg_layer *L, int rows)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    int H = c->hidden, E = c->n_experts, K = c->top_k, mi = c->moe_inter, P = rows * K;
    moe_tiles t = {d->tile_e, d->tile_j, d->ntiles, NULL, NULL, 0, 0}; // FP8: no split
    k_fp8_quant_act<<<rows, FP8_QUANT_THREADS, 0, g->stream>>>(d->xn, H, d->xq, d->xs);
    LAUNCHED();
    if (moe_gemm_grouped(g, 1, L->ex_gu.q, d->xq, L->ex_gu.s, d->xs, d->off, d->order, K, 1, P, E, t, 1, d->egu_f,
                         2 * mi, H))
        return -1;
    k_dg_geglu<<<blocks_for((size_t)P * mi), 256, 0, g->stream>>>(d->egu_f, d->eact, mi, (size_t)P);
    LAUNCHED();
    k_fp8_quant_act<<<P, FP8_QUANT_THREADS, 0, g->stream>>>(d->eact, mi, d->xq, d->xs);
    LAUNCHED();
    if (moe_gemm_grouped(g, 1, L->ex_down.q, d->xq, L->ex_down.s, d->xs, d->off, NULL, K, 0, P, E, t, 0, d->ey_f, H,
                         mi))
        return -1;
    k_dg_combine<<<rows, 256, 0, g->stream>>>(d->h2, d->ey_f, d->pos, d->w, K, H);
    LAUNCHED();
    return 0;
}

static int layer(tb_gpu_dgemma *d, int l, int rows, int pos0, pass mode)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    const dg_layer *L = &d->L[l];
    int H = c->hidden, nh = c->n_heads, hd = L->hd, kvd = L->kv * hd, I = c->inter, E = c->n_experts;
    float eps = (float)c->rms_eps;
    k_dg_rms<<<rows, DG_THREADS, 0, g->stream>>>(d->x, L->attn_norm, 1.0f, NULL, NULL, d->xn, H, eps);
    LAUNCHED();
    if (mm_p(d, d->qf, d->xn, L->wq, rows, nh * hd, H, 0.0f) || mm_p(d, d->kf, d->xn, L->wk, rows, kvd, H, 0.0f) ||
        (!L->full && mm_p(d, d->vf, d->xn, L->wv, rows, kvd, H, 0.0f)))
        return -1;
    // q, k normed and turned, v normed; k and v into the cache at pos0 (a
    // canvas's into the slots after the cached positions)
    k_dg_qkv<<<dim3(rows, nh + 2 * L->kv), 128, 0, g->stream>>>(
        d->qf, d->kf, !L->full ? d->vf : d->kf, L->q_norm, L->k_norm, L->full ? d->inv_full : d->inv_sl, pos0, nh, L->kv,
        hd, eps, d->qb, L->kc, L->vc);
    LAUNCHED();
    if (attend(d, l, rows, pos0, mode) || mm_p(d, d->h1, d->att, L->wo, rows, H, nh * hd, 0.0f))
        return -1;
    // r = x + post_attention_layernorm(attn)
    k_dg_rms<<<rows, DG_THREADS, 0, g->stream>>>(d->h1, L->post_attn_norm, 1.0f, d->x, d->r, NULL, H, eps);
    LAUNCHED();
    // the shared MLP over pre_feedforward_layernorm(r), normed into h1
    k_dg_rms<<<rows, DG_THREADS, 0, g->stream>>>(d->r, L->pre_ffn_norm, 1.0f, NULL, NULL, d->xn, H, eps);
    LAUNCHED();
    if (mm_p(d, d->gu, d->xn, L->gate_up, rows, 2 * I, H, 0.0f))
        return -1;
    k_dg_geglu<<<blocks_for((size_t)rows * I), 256, 0, g->stream>>>(d->gu, d->act, I, (size_t)rows);
    LAUNCHED();
    if (mm_p(d, d->h1, d->act, L->down, rows, H, I, 0.0f))
        return -1;
    k_dg_rms<<<rows, DG_THREADS, 0, g->stream>>>(d->h1, L->post_ffn_norm1, 1.0f, NULL, d->h1, NULL, H, eps);
    LAUNCHED();
    if (moe(d, L, rows))
        return -1;
    k_dg_ffn_out<<<rows, DG_THREADS, 0, g->stream>>>(d->x, d->r, d->h1, d->h2, L->post_ffn_norm2, L->post_ffn_norm,
                                                     mode == ENCODE ? L->scalar_enc : L->scalar_dec, H, eps);
    LAUNCHED();
    // the roofline: the dense products' weights once, 2 FLOPs a weight a
    // row (bf16: 2 bytes a weight; fp8: the projections 1 byte a weight
    // plus a float scale an output row, the router still bf16); the rows'
    // keys and values written
    double nv = L->full ? 1.0 : 2.0, proj = (double)H * (2.0 * nh * hd + nv * kvd + 3.0 * I), router = (double)E * H;
    double proj_rows = (double)nh * hd + nv * kvd + H + 2.0 * I + H;
    g->work_flops += 2.0 * rows * (proj + router);
    g->work_bytes += (d->fp8 ? proj + 4.0 * proj_rows : 2.0 * proj) + 2.0 * router + 2.0 * 2 * rows * kvd;
    return 0;
}

static int check_ids(tb_gpu_dgemma *d, const int32_t *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= d->cfg.vocab)
            return fail(d->g, "DiffusionGemma: token id %d at %d outside the vocabulary of %d", t[i], i, d->cfg.vocab);
    return 0;
}

static int embed(tb_gpu_dgemma *d, const int32_t *t, int n, pass mode)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    CK(cudaMemcpyAsync(d->tok, t, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    k_dg_embed<<<n, DG_THREADS, 0, g->stream>>>(d->tok, d->embed, d->embed_scale, mode == ENCODE ? c->image_id : -1,
                                               c->pad_id, d->x, c->hidden);
    LAUNCHED();
    g->work_bytes += 2.0 * n * c->hidden; // the rows looked up
    // the host's ids must stay until the copy has read them
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

extern "C" int tb_gpu_dgemma_encode(tb_gpu_dgemma *d, const int32_t *tokens, int n, float *hidden)
{
    tb_gpu *g = d->g;
    if (n < 0 || d->len + n > d->max_ctx)
        return fail(g, "DiffusionGemma encode of %d positions after %d: the cache holds %d", n, d->len, d->max_ctx);
    if (check_ids(d, tokens, n))
        return -1;
    d->route_n = 0;
    d->have_z = d->have_logits = 0; // a new canvas starts without self-conditioning
    for (int done = 0; done < n;) {
        int rows = n - done < d->R ? n - done : d->R;
        if (embed(d, tokens + done, rows, ENCODE))
            return -1;
        for (int l = 0; l < d->cfg.n_layers; l++)
            if (layer(d, l, rows, d->len, ENCODE))
                return -1;
        if (hidden) { // the final norm's output, through h2
            int H = d->cfg.hidden;
            k_dg_rms<<<rows, DG_THREADS, 0, g->stream>>>(d->x, d->final_norm, 1.0f, NULL, d->h2, NULL, H,
                                                         (float)d->cfg.rms_eps);
            LAUNCHED();
            CK(cudaMemcpyAsync(hidden + (size_t)done * H, d->h2, (size_t)rows * H * sizeof(float),
                               cudaMemcpyDeviceToHost, g->stream));
            CK(cudaStreamSynchronize(g->stream));
        }
        d->len += rows;
        done += rows;
    }
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

// DiffusionGemmaSelfConditioning's signal added into x: the MLP over the
// soft embedding softmax(z) . embed x scale (z: d->logits).
static int self_condition(tb_gpu_dgemma *d, int n)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    int V = c->vocab, H = c->hidden, I = c->inter;
    float eps = (float)c->rms_eps, zero = 0.0f, scale = d->embed_scale;
    k_dg_sc_soft<<<n, 1024, 0, g->stream>>>(d->logits, d->soft, V, c->bf16);
    LAUNCHED();
    // h2 [n][H] = scale soft [n][V] . embed [V][H] (column-major: embed^T soft^T)
    CB(cublasGemmEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, H, n, V, &scale, d->embed, CUDA_R_16BF, H, d->soft,
                    CUDA_R_16BF, V, &zero, d->h2, CUDA_R_32F, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    k_dg_rms<<<n, DG_THREADS, 0, g->stream>>>(d->h2, d->sc_pre_norm, 1.0f, NULL, NULL, d->xn, H, eps);
    LAUNCHED();
    if (mm_p(d, d->gu, d->xn, d->sc_gu, n, 2 * I, H, 0.0f))
        return -1;
    k_dg_geglu<<<blocks_for((size_t)n * I), 256, 0, g->stream>>>(d->gu, d->act, I, (size_t)n);
    LAUNCHED();
    if (mm_p(d, d->x, d->act, d->sc_down, n, H, I, 1.0f)) // x += the signal
        return -1;
    g->work_flops += 2.0 * n * (double)V * H + 2.0 * n * 3.0 * H * I;
    // the soft embedding's bf16 table; the MLP's weights as layer()'s
    g->work_bytes += 2.0 * (double)V * H + (d->fp8 ? 3.0 * H * I + 4.0 * (2.0 * I + H) : 2.0 * 3.0 * H * I);
    return 0;
}

extern "C" int tb_gpu_dgemma_denoise(tb_gpu_dgemma *d, const int32_t *canvas, const float *sc, int use_device_sc,
                                     float *logits)
{
    tb_gpu *g = d->g;
    const tb_dgemma_config *c = &d->cfg;
    int n = d->R, H = c->hidden, V = c->vocab;
    float eps = (float)c->rms_eps;
    if (d->max_ctx < 1)
        return fail(g, "DiffusionGemma: no cache reserved");
    if (check_ids(d, canvas, n))
        return -1;
    if (!sc && use_device_sc && !d->have_z)
        return fail(g, "DiffusionGemma: no z on the device for self-conditioning (no decide since the last pass)");
    // from here logits are overwritten: neither the z nor the logits stay
    // usable if the pass fails part-way
    d->have_z = d->have_logits = 0;
    d->route_n = 0;
    if (sc)
        CK(cudaMemcpyAsync(d->logits, sc, (size_t)n * V * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    if (embed(d, canvas, n, DENOISE))
        return -1;
    if (sc || use_device_sc)
        if (self_condition(d, n))
            return -1;
    // post_norm (no weight), also on the first step
    k_dg_rms<<<n, DG_THREADS, 0, g->stream>>>(d->x, NULL, 1.0f, NULL, d->x, NULL, H, eps);
    LAUNCHED();
    for (int l = 0; l < c->n_layers; l++)
        if (layer(d, l, n, d->len, DENOISE))
            return -1;
    k_dg_rms<<<n, DG_THREADS, 0, g->stream>>>(d->x, d->final_norm, 1.0f, NULL, NULL, d->xn, H, eps);
    LAUNCHED();
    if (mm(g, d->logits, d->xn, d->embed, n, V, H, 0.0f))
        return -1;
    if (c->softcap > 0) {
        k_dg_softcap<<<blocks_for((size_t)n * V), 256, 0, g->stream>>>(d->logits, (size_t)n * V, (float)c->softcap);
        LAUNCHED();
    }
    g->work_flops += 2.0 * n * (double)V * H;
    g->work_bytes += 2.0 * (double)V * H;
    if (logits)
        CK(cudaMemcpyAsync(logits, d->logits, (size_t)n * V * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    d->have_logits = 1;
    return 0;
}

extern "C" int tb_gpu_dgemma_decide(tb_gpu_dgemma *d, float temperature, uint64_t seed, uint64_t n0, int32_t *sampled,
                                    int32_t *argmax, float *entropy)
{
    tb_gpu *g = d->g;
    int n = d->R, V = d->cfg.vocab;
    if (d->max_ctx < 1 || !d->have_logits || !(temperature > 0))
        return fail(g, "DiffusionGemma decide: no canvas pass's logits to decide (%s), or temperature %g",
                    d->have_logits ? "have them" : "none since the last pass, encode or decide", (double)temperature);
    d->have_logits = 0; // decide turns them into z in place: a second decide would divide again
    k_dg_decide<<<n, 1024, 0, g->stream>>>(d->logits, V, temperature, seed, n0, d->d_ids, d->d_ids + n, d->d_ent);
    LAUNCHED();
    CK(cudaMemcpyAsync(sampled, d->d_ids, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaMemcpyAsync(argmax, d->d_ids + n, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaMemcpyAsync(entropy, d->d_ent, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    d->have_z = 1;
    return 0;
}

extern "C" void tb_gpu_dgemma_take_work(tb_gpu_dgemma *d, double *flops, double *bytes, double *expert_reads,
                                        double *moe_rows)
{
    fold_touched(d); // a failure is the context's error (its next call reports it); the count then reads low
    tb_gpu_take_work(d->g, flops, bytes, NULL, NULL);
    if (expert_reads)
        *expert_reads = d->expert_reads;
    if (moe_rows)
        *moe_rows = d->moe_rows;
    d->expert_reads = d->moe_rows = 0;
}

extern "C" tb_gpu *tb_gpu_dgemma_gpu(tb_gpu_dgemma *d)
{
    return d->g;
}

extern "C" const char *tb_gpu_dgemma_error(const tb_gpu_dgemma *d)
{
    return d->g->error;
}
