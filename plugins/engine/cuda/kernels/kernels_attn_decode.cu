// kernels_attn_decode.cu — decode attention: one query a (sequence,
// head) over the cache, per head, by query group, or split over the keys
// (CPU twin: cpu_forward.c's layer_forward, attention of one row over
// the cache under visible_keys; spans
// are gpu_forward.cu's batched GEMMs or gpu_attn_span.cu).
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

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

// A split decode attention's combine, by one warp: the S partials of a
// (sequence, head) at all[S][hd + 2] (output, then maximum m_t and sum
// l_t; L2 reads, other blocks wrote them) as each part's weight
// wt[t] = e^(m_t - M) / L, L = sum_t e^(m_t - M) l_t; a part of padding
// only (l = 0) weighs 0. S <= 32 (lane t: part t).
__device__ __forceinline__ void split_weights(const float *all, int S, int hd, float *wt)
{
    int lane = threadIdx.x % 32;
    float m = -INFINITY, l = 0.0f;
    if (lane < S) {
        m = __ldcg(all + lane * (hd + 2) + hd);
        l = __ldcg(all + lane * (hd + 2) + hd + 1);
    }
    float M = l > 0.0f ? m : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        M = fmaxf(M, __shfl_xor_sync(0xffffffff, M, o));
    float e = l > 0.0f ? __expf(m - M) : 0.0f, L = e * l;
    for (int o = 16; o > 0; o >>= 1)
        L += __shfl_xor_sync(0xffffffff, L, o);
    if (lane < S)
        wt[lane] = e / L;
}

// Decode attention for grouped queries (G query heads a block, 2 or 4,
// all of one K/V head: the model's group nh / nkv, or a G-th of a group
// that G divides, 8 as two blocks of 4): one block per (sequence, G
// heads) computes its G heads, so each key and value row is read once for
// the G heads and the grid is G times smaller than k_attn_decode's
// (Llama-3-8B at batch 32: 256 blocks instead of 1,024, one wave on 132
// SMs). Keys and masking per head as
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
//
// SPLIT (k_attn_decode_gqa_split, batch 1: one block a K/V head would be
// 8 blocks on 132 SMs, each reading the whole cache in rounds): grid
// (sequences, nh / G, S), block s over the s-th of S even parts of the
// keys, writing each head's maximum, sum and unnormalised output as
// k_attn_decode_split's partials; the last block of the group to finish
// combines them as that kernel does, for its G heads at once.
//
// POST (k_attn_decode_gqa_split_post, TB_GPU_FUSE_ATTN_POST: batch-1
// decode): k_qkv_post's work for this block's heads, so that kernel is
// not launched: from the QKV product (pa.qkv) each block computes its G
// query heads (qkv_head: bias, QK-norm, RoPE at the row's position) into
// shared memory, and the block whose part of the keys holds the new
// position also that position's key and value of its K/V head, which it
// reads from shared memory in its loop; the first block of the K/V head
// (by query heads) writes them into the cache for later steps. The same
// values as k_qkv_post's by the same code, so the same output.
#define ATTG_UNROLL 4
template <int G, int LPK, bool SPLIT, bool POST>
__device__ __forceinline__ void attn_decode_gqa(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len,
                                                int nh, int nkv, const int *d_pos, const int *row_slot,
                                                const int *row_pos, const int *pad, float scale, float *att_part,
                                                unsigned *count, const qkv_post_args pa)
{
    constexpr int hd = 8 * LPK, KPW = 32 / LPK;          // head dim; rows a warp reads a load
    constexpr int STEP = ATTG_WARPS * KPW * ATTG_UNROLL; // positions a block covers a round
    __shared__ float part[ATTG_WARPS][G][hd];            // each warp's output sums
    __shared__ float wmax[ATTG_WARPS][G], wsum[ATTG_WARPS][G];
    griddep_wait(); // (inside a decode graph with programmatic launches)
    griddep_launch();
    int b = blockIdx.x, h0 = blockIdx.y * G, kvh = h0 / (nh / nkv), kvd = nkv * hd; // heads h0 .. h0 + G - 1
    int n_keys = row_pos ? row_pos[b] + 1 : *d_pos + 1;
    int seq = row_pos ? row_slot[b] : b;
    int lo = pad[seq]; // keys [0, lo) are left padding: masked
    // this block's keys [jb, je): all of them, or (SPLIT) its part
    int S = SPLIT ? gridDim.z : 1, sp = SPLIT ? blockIdx.z : 0;
    int per = (n_keys + S - 1) / S, jb = sp * per, je = min(n_keys, jb + per);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / LPK, dl = lane % LPK;
    // this lane's 8 dims (8 dl ..) of key or value row j: 16 bytes
    const uint4 *kb = reinterpret_cast<const uint4 *>(kc + (size_t)seq * len * kvd + kvh * hd) + dl;
    const uint4 *vb = reinterpret_cast<const uint4 *>(vc + (size_t)seq * len * kvd + kvh * hd) + dl;
    const size_t row = kvd / 8; // uint4s from one position to the next
    // POST: the query heads, and the new position's key and value
    // (kvn[0], kvn[1]) where this block's keys hold it (pos: -1 if not)
    __shared__ __align__(16) bf16 qs[POST ? G : 1][POST ? hd : 8], kvn[POST ? 2 : 1][POST ? hd : 8];
    __shared__ __align__(16) float rot[POST ? hd : 2]; // [rd / 2] cos, then sin
    int pos = POST && n_keys - 1 >= jb && n_keys - 1 < je ? n_keys - 1 : -1;
    if (POST) {
        int rpos = n_keys - 1 >= lo ? n_keys - 1 - lo : 0, half = pa.rd / 2; // as k_qkv_post's
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            float ang = (float)rpos * pa.inv_freq[i];
            rot[i] = cosf(ang);
            rot[half + i] = sinf(ang);
        }
        __syncthreads();
        const float *prow = pa.qkv + (size_t)b * (nh + 2 * nkv) * hd; // the row's product
        int head = warp < G ? h0 + warp : warp == G ? nh + kvh : nh + nkv + kvh;
        if (warp < G || (pos >= 0 && warp < G + 2))
            qkv_head(prow + (size_t)head * hd, pa.bias ? pa.bias + (size_t)head * hd : NULL, (const float *)NULL,
                     1.0f, warp < G ? pa.q_norm : warp == G ? pa.k_norm : NULL, pa.eps, warp <= G ? rot : NULL, hd,
                     pa.rd, warp < G ? qs[warp] : kvn[warp - G], lane);
        __syncthreads();
        if (pos >= 0 && h0 % (nh / nkv) == 0 && threadIdx.x < 2 * LPK) { // the cache's new row: 16 bytes a thread
            int which = threadIdx.x / LPK, piece = threadIdx.x % LPK;
            uint4 *dst = reinterpret_cast<uint4 *>((which ? pa.vc : pa.kc) + ((size_t)seq * len + pos) * kvd + kvh * hd);
            dst[piece] = reinterpret_cast<const uint4 *>(kvn[which])[piece];
        }
    }
    float qf[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        uint4 qv = POST ? reinterpret_cast<const uint4 *>(qs[g])[dl]
                        : *(reinterpret_cast<const uint4 *>(q + ((size_t)b * nh + h0 + g) * hd) + dl);
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
    // position j0 + u KPW + sub for u < ATTG_UNROLL; warp w starts at jb + w KPW ATTG_UNROLL
    for (int j0 = jb + warp * KPW * ATTG_UNROLL; j0 < je; j0 += STEP) {
        uint4 kv[ATTG_UNROLL], vv[ATTG_UNROLL];
#pragma unroll
        for (int u = 0; u < ATTG_UNROLL; u++) {
            int j = j0 + u * KPW + sub;
            bool live = j < je && j >= lo;
            if (POST && j == pos) { // not in the cache yet
                kv[u] = reinterpret_cast<const uint4 *>(kvn[0])[dl];
                vv[u] = reinterpret_cast<const uint4 *>(kvn[1])[dl];
            } else {
                kv[u] = live ? __ldcs(kb + (size_t)j * row) : zero;
                vv[u] = live ? __ldcs(vb + (size_t)j * row) : zero;
            }
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
            bool live = j < je && j >= lo;
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
    // a split's partials of head h0 + g: [S][hd + 2] (output, then max, sum)
    size_t bh0 = (size_t)b * nh + h0;
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
        if (!SPLIT) {
            out[(bh0 + g) * hd + dd] = __float2bfloat16(o / sum);
        } else {
            float *mine = att_part + ((bh0 + g) * S + sp) * (hd + 2);
            mine[dd] = o;
            if (dd == 0) // a part of padding only: max -inf, sum 0 (the combine skips it)
                mine[hd] = mx, mine[hd + 1] = sum;
        }
    }
    if (!SPLIT)
        return;
    // the last of the S blocks of these heads to arrive combines (count: head h0's)
    __shared__ unsigned arrived;
    if (!last_block_to_arrive(count + bh0, (unsigned)S, &arrived))
        return;
    // warp g < G: head g's weights e^(m_t - M) / L of the S parts (lane t:
    // part t; L2 reads, other blocks wrote them); then every thread adds
    // the S partial outputs of its (head, dim)s
    __shared__ float wt[G][ATT_MAX_SPLIT];
    if (warp < G)
        split_weights(att_part + (bh0 + warp) * S * (hd + 2), S, hd, wt[warp]);
    __syncthreads();
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
        int g = i / hd, dd = i % hd;
        const float *all = att_part + (bh0 + g) * S * (hd + 2);
        float o = 0.0f;
        for (int t = 0; t < S; t++)
            o += wt[g][t] * __ldcg(all + t * (hd + 2) + dd);
        out[(bh0 + g) * hd + dd] = __float2bfloat16(o);
    }
}
template <int G, int LPK>
__global__ void __launch_bounds__(ATTG_WARPS * 32, 2) // two blocks an SM: 128 registers a thread
    k_attn_decode_gqa(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv,
                      const int *d_pos, const int *row_slot, const int *row_pos, const int *pad, float scale,
                      float *part, unsigned *count)
{
    attn_decode_gqa<G, LPK, false, false>(q, kc, vc, out, len, nh, nkv, d_pos, row_slot, row_pos, pad, scale, part,
                                          count, qkv_post_args{});
}
template <int G, int LPK>
__global__ void __launch_bounds__(ATTG_WARPS * 32, 2)
    k_attn_decode_gqa_split(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv,
                            const int *d_pos, const int *row_slot, const int *row_pos, const int *pad, float scale,
                            float *part, unsigned *count)
{
    attn_decode_gqa<G, LPK, true, false>(q, kc, vc, out, len, nh, nkv, d_pos, row_slot, row_pos, pad, scale, part,
                                         count, qkv_post_args{});
}
template <int G, int LPK>
__global__ void __launch_bounds__(ATTG_WARPS * 32, 2)
    k_attn_decode_gqa_split_post(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh,
                                 int nkv, const int *d_pos, const int *row_slot, const int *row_pos, const int *pad,
                                 float scale, float *part, unsigned *count, const qkv_post_args pa)
{
    attn_decode_gqa<G, LPK, true, true>(q, kc, vc, out, len, nh, nkv, d_pos, row_slot, row_pos, pad,
                                        scale, part, count, pa);
}

// the instantiation for G query heads a K/V head (2, 4) and head_dim hd
// (16 .. 256, a power of two), whole or split; NULL where there is none
template <int G> static attn_gqa_kernel gqa_kernel(int hd, bool split)
{
    switch (hd) {
    case 16:
        return split ? k_attn_decode_gqa_split<G, 2> : k_attn_decode_gqa<G, 2>;
    case 32:
        return split ? k_attn_decode_gqa_split<G, 4> : k_attn_decode_gqa<G, 4>;
    case 64:
        return split ? k_attn_decode_gqa_split<G, 8> : k_attn_decode_gqa<G, 8>;
    case 128:
        return split ? k_attn_decode_gqa_split<G, 16> : k_attn_decode_gqa<G, 16>;
    case 256:
        return split ? k_attn_decode_gqa_split<G, 32> : k_attn_decode_gqa<G, 32>;
    default:
        return NULL;
    }
}
attn_gqa_kernel attn_decode_gqa_kernel(int G, int hd, bool split)
{
    return G == 2 ? gqa_kernel<2>(hd, split) : G == 4 ? gqa_kernel<4>(hd, split) : NULL;
}
template <int G> static attn_gqa_post_kernel gqa_post_kernel(int hd)
{
    switch (hd) {
    case 16:
        return k_attn_decode_gqa_split_post<G, 2>;
    case 32:
        return k_attn_decode_gqa_split_post<G, 4>;
    case 64:
        return k_attn_decode_gqa_split_post<G, 8>;
    case 128:
        return k_attn_decode_gqa_split_post<G, 16>;
    case 256:
        return k_attn_decode_gqa_split_post<G, 32>;
    default:
        return NULL;
    }
}
attn_gqa_post_kernel attn_decode_gqa_post_kernel(int G, int hd)
{
    return G == 2 ? gqa_post_kernel<2>(hd) : G == 4 ? gqa_post_kernel<4>(hd) : NULL;
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
    int warp = threadIdx.x / 32;
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
    if (warp == 0)
        split_weights(all, S, hd, wt);
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
