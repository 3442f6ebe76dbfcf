// gpu_attn_span.cu — attention of a span in one kernel: S = Q K^T / sqrt(hd),
// the masked row softmax and O = P V, tile by tile with a running max and
// sum per row (the online softmax), so neither the scores nor the
// probabilities go to memory. It replaces attn_span's two batched GEMMs and
// the softmax kernel between them (gpu_forward.cu) for head_dim 16, 32, 64
// and 128; the masks are softmax_row's (kernels_softmax.cu) and the CPU path's
// (cpu_forward.c): query row t of the span sits at position pos0 + t and
// sees keys [lo, visible) with
//   visible = n_attend, or for causal k >= 1 the end of its block of k
//             positions (k = 1: itself), at most n_attend;
//   lo      = pad[sequence] for a real row (pos0 + t >= pad), else 0.
// Speculative decoding's ragged spans give each sequence its own pos0 and
// n_attend = pos0 + n (gpu_forward.cu's span_slots).
//
// The products run on the tensor cores (mma.sync m16n8k16, bf16 in, float
// sums). A block takes 64 query rows of one (sequence, head), a warp 16 of
// them; keys come in tiles of 64 through shared memory, double-buffered
// with cp.async. Rounding: the scores and the running sums are float, the
// probabilities enter P V as bf16 (as attn_span's bf16 P did), and the row
// is divided by its sum at the end instead of before the rounding, so the
// two paths agree to bf16 rounding, not bit for bit; tests/gpu compare both
// with the CPU.
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

#include <math.h>
#include <stdlib.h>

using namespace tbgpu;

namespace {

// A kernel's shape: W warps a block (16 query rows each, 16 W a block),
// BN keys a tile. The default (4, 64) measured fastest on the H200
// (docs/PERFORMANCE.md); TB_GPU_SPAN_ATTN_SHAPE picks another for
// measurements: index into fa_shapes below.

// Shared memory rows are padded by 8 bf16 (16 bytes) so the 8 row
// addresses of an ldmatrix phase fall on distinct banks.
template <int HD> __host__ __device__ constexpr int fa_ld() { return HD + 8; }
// Q tile, then two buffers of K and of V
template <int HD, int W, int BN> __host__ __device__ constexpr size_t fa_smem()
{
    return (size_t)(16 * W + 4 * BN) * fa_ld<HD>() * sizeof(bf16);
}

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// d[4] += a (16x16, row) . b (16x8, col): bf16 in, float sums
__device__ __forceinline__ void mma_bf16(float d[4], const unsigned a[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(unsigned *)&v;
}

// rows [row0, row0 + BN) of a [rows][stride] bf16 matrix (hd wide from
// base) into a tile [BN][LD], by 32 W threads; rows >= n_rows are zeros
template <int HD, int W, int BN>
__device__ __forceinline__ void load_tile(bf16 *tile, const bf16 *base, size_t stride, int row0, int n_rows)
{
    constexpr int CHUNKS = HD / 8; // 16-byte pieces a row
    for (int i = threadIdx.x; i < BN * CHUNKS; i += 32 * W) {
        int r = i / CHUNKS, c = i % CHUNKS;
        bool valid = row0 + r < n_rows;
        const bf16 *src = base + (size_t)(valid ? row0 + r : 0) * stride + c * 8;
        cp_async16(tile + r * fa_ld<HD>() + c * 8, src, valid);
    }
}

// The keys query row t sees: [*lo, *vis) (the file's header)
__device__ __forceinline__ void row_keys(int t, int pos0, int causal, int n_attend, int pad, int *lo, int *vis)
{
    int v = n_attend;
    if (causal > 0) {
        long end = ((long)(pos0 + t) / causal + 1) * causal;
        v = end < n_attend ? (int)end : n_attend;
    }
    *vis = v;
    *lo = pos0 + t >= pad ? pad : 0;
}

// Grid (ceil(n / 16 W), nh, B); 32 W threads; fa_smem<HD, W, BN>() bytes.
// q, out: [B][n][nh][HD] (row stride nh HD); the keys and values of span
// sequence b are cache sequence rslot[b] (or slot0 + b) of kc / vc
// ([seqs][len][nkv][HD], this layer's), keys [0, n_attend). Ragged
// (speculative decoding's spans: rpos given): sequence b's rows start at
// position rpos[b] and see keys [0, rpos[b] + n), the causal mask counted
// from there; pos0 and n_attend are then unused.
template <int HD, int W, int BN>
__global__ void __launch_bounds__(32 * W)
    k_attn_span(const bf16 *__restrict__ q, const bf16 *__restrict__ kc, const bf16 *__restrict__ vc,
                bf16 *__restrict__ out, int n, int n_attend, int pos0, int causal, const int *__restrict__ pad,
                const int *__restrict__ rslot, const int *__restrict__ rpos, int slot0, int nh, int nkv, int len,
                float scale_log2)
{
    constexpr int LD = fa_ld<HD>(), KC = HD / 16, NT = BN / 8, DT = HD / 8, FA_BM = 16 * W, FA_BN = BN;
    extern __shared__ __align__(16) unsigned char fa_raw[];
    bf16 *Qs = (bf16 *)fa_raw;
    bf16 *Ks = Qs + FA_BM * LD; // [2][FA_BN][LD]
    bf16 *Vs = Ks + 2 * FA_BN * LD;

    int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * FA_BM;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tid = lane % 4;
    int seq = rslot ? rslot[b] : slot0 + b, p = pad[seq];
    if (rpos) {
        pos0 = rpos[b];
        n_attend = pos0 + n;
    }
    size_t qstride = (size_t)nh * HD, kvstride = (size_t)nkv * HD;
    const bf16 *qb = q + (size_t)b * n * qstride + (size_t)h * HD;
    size_t kv_off = (size_t)seq * len * kvstride + (size_t)(h / (nh / nkv)) * HD;
    const bf16 *kb = kc + kv_off, *vb = vc + kv_off;

    // the key tiles any row of the block sees (lo and visible grow with t)
    int t_last = q0 + FA_BM - 1 < n - 1 ? q0 + FA_BM - 1 : n - 1, lo_first, vis_first, lo_last, vis_last;
    row_keys(q0, pos0, causal, n_attend, p, &lo_first, &vis_first);
    row_keys(t_last, pos0, causal, n_attend, p, &lo_last, &vis_last);
    int kt0 = lo_first / FA_BN, kt1 = (vis_last + FA_BN - 1) / FA_BN;

    // this thread's two rows (gid, gid + 8 of its warp's 16); rows past the
    // span compute as its last row and are not stored
    int r[2], lo[2], vis[2];
    for (int i = 0; i < 2; i++) {
        r[i] = q0 + warp * 16 + gid + 8 * i;
        row_keys(r[i] < n ? r[i] : n - 1, pos0, causal, n_attend, p, &lo[i], &vis[i]);
    }

    { // Q tile (rows past the span: zeros), then the first K / V tile
        constexpr int CHUNKS = HD / 8;
        for (int i = threadIdx.x; i < FA_BM * CHUNKS; i += 32 * W) {
            int rr = i / CHUNKS, c = i % CHUNKS;
            bool valid = q0 + rr < n;
            cp_async16(Qs + rr * LD + c * 8, qb + (size_t)(valid ? q0 + rr : 0) * qstride + c * 8, valid);
        }
    }
    if (kt0 < kt1) {
        load_tile<HD, W, BN>(Ks, kb, kvstride, kt0 * FA_BN, n_attend);
        load_tile<HD, W, BN>(Vs, vb, kvstride, kt0 * FA_BN, n_attend);
    }
    cp_async_commit();

    float o[DT][4];
    for (int d = 0; d < DT; d++)
        o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2]; // running max, this thread's sums
    unsigned qa[KC][4];

    for (int kt = kt0; kt < kt1; kt++) {
        int buf = (kt - kt0) & 1;
        if (kt + 1 < kt1) { // the next tile into the other buffer (last read in the step before)
            load_tile<HD, W, BN>(Ks + (buf ^ 1) * FA_BN * LD, kb, kvstride, (kt + 1) * FA_BN, n_attend);
            load_tile<HD, W, BN>(Vs + (buf ^ 1) * FA_BN * LD, vb, kvstride, (kt + 1) * FA_BN, n_attend);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == kt0) // this warp's Q rows as A fragments, kept for every tile
            for (int kc = 0; kc < KC; kc++)
                ldmatrix_x4(qa[kc], Qs + (warp * 16 + lane % 16) * LD + kc * 16 + (lane / 16) * 8);
        const bf16 *Kt = Ks + buf * FA_BN * LD, *Vt = Vs + buf * FA_BN * LD;

        // S [16][FA_BN] of this warp: n-tiles of 8 keys
        float s[NT][4];
        for (int j = 0; j < NT; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        for (int kc = 0; kc < KC; kc++)
            for (int j = 0; j < NT; j += 2) { // two n-tiles a load: keys 16 j/2 .. +15
                unsigned kf[4];
                ldmatrix_x4(kf, Kt + (j * 8 + lane % 8 + (lane / 16) * 8) * LD + kc * 16 + ((lane / 8) % 2) * 8);
                mma_bf16(s[j], qa[kc], kf[0], kf[1]);
                mma_bf16(s[j + 1], qa[kc], kf[2], kf[3]);
            }

        // mask (only where the tile is not wholly visible to the warp's
        // rows), running max (raw score units) and sum per row; p =
        // 2^(s scale_log2 - m scale_log2) = e^((s - m) / sqrt(hd))
        int k0 = kt * FA_BN;
        bool whole = __all_sync(0xffffffff, k0 >= lo[0] && k0 >= lo[1] && k0 + FA_BN <= vis[0] && k0 + FA_BN <= vis[1]);
        bool same_max = true;
        for (int i = 0; i < 2; i++) {
            float mx = -INFINITY;
            for (int j = 0; j < NT; j++)
                for (int e = 0; e < 2; e++) {
                    int key = k0 + j * 8 + tid * 2 + e;
                    if (!whole && !(key >= lo[i] && key < vis[i]))
                        s[j][2 * i + e] = -INFINITY;
                    mx = fmaxf(mx, s[j][2 * i + e]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            float m_new = fmaxf(m[i], mx);
            // no key yet: everything stays 0, not NaN
            float ref = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
            alpha[i] = exp2f(m[i] * scale_log2 - ref); // exactly 1 for an unchanged max
            same_max &= m_new == m[i];
            m[i] = m_new;
            float sum = 0.0f;
            for (int j = 0; j < NT; j++)
                for (int e = 0; e < 2; e++) {
                    float pv = exp2f(fmaf(s[j][2 * i + e], scale_log2, -ref));
                    s[j][2 * i + e] = pv;
                    sum += pv;
                }
            l[i] = l[i] * alpha[i] + sum;
        }
        if (!__all_sync(0xffffffff, same_max)) // (an unchanged max leaves alpha 1 or 0 x 0)
            for (int d = 0; d < DT; d++) {
                o[d][0] *= alpha[0], o[d][1] *= alpha[0];
                o[d][2] *= alpha[1], o[d][3] *= alpha[1];
            }

        // O [16][HD] += P [16][FA_BN] V [FA_BN][HD]: P's accumulator layout
        // is the A fragment's, two n-tiles (16 keys) a k step
        for (int kc = 0; kc < FA_BN / 16; kc++) {
            unsigned pa[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]), pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                              pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                              pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
            for (int d = 0; d < DT; d += 2) { // two d-tiles a load
                unsigned vf[4];
                ldmatrix_x4_trans(vf, Vt + (kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD + d * 8 + (lane / 16) * 8);
                mma_bf16(o[d], pa, vf[0], vf[1]);
                mma_bf16(o[d + 1], pa, vf[2], vf[3]);
            }
        }
        __syncthreads(); // the step after next loads into this buffer
    }
    cp_async_wait<0>(); // (no tile at all: the Q group is still in flight)

    for (int i = 0; i < 2; i++) {
        float sum = l[i];
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        if (r[i] >= n)
            continue;
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        bf16 *y = out + ((size_t)b * n + r[i]) * qstride + (size_t)h * HD + tid * 2;
        for (int d = 0; d < DT; d++)
            *(__nv_bfloat162 *)(y + d * 8) = __floats2bfloat162_rn(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
    }
}

// The shapes TB_GPU_SPAN_ATTN_SHAPE chooses from (head_dim 128; others
// take shape 0)
#define FA_SHAPES(X) X(4, 64) X(2, 32) X(4, 32) X(2, 64)
constexpr int FA_N_SHAPES = 4;

// One launch of k_attn_span<HD, W, BN> (attn_span_rows's arguments; rslot,
// rpos: k_attn_span's)
template <int HD, int W, int BN>
cudaError_t launch_raw(cudaStream_t s, const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int B, int n,
                       int n_attend, int pos0, int causal, const int *pad, const int *rslot, const int *rpos,
                       int slot0, int nh, int nkv, int len)
{
    dim3 grid((n + 16 * W - 1) / (16 * W), nh, B);
    k_attn_span<HD, W, BN><<<grid, 32 * W, fa_smem<HD, W, BN>(), s>>>(
        q, kc, vc, out, n, n_attend, pos0, causal, pad, rslot, rpos, slot0, nh, nkv, len,
        (float)(1.4426950408889634 / sqrt((double)HD)));
    return cudaGetLastError();
}

template <int HD, int W, int BN> int launch_shape(tb_gpu *g, int l, int B, int slot0, int pos0, int n, int n_attend, int causal)
{
    const tb_model_config *c = &g->cfg;
    size_t layer_off = (size_t)l * g->seqs * g->len * c->n_kv_heads * HD;
    // the span's padding and cache sequences: by slot (g->span_slots, in
    // d_rslot) or slot0 + b; ragged positions (g->span_pos) in d_rpos
    CK((launch_raw<HD, W, BN>(g->stream, g->q, g->kc + layer_off, g->vc + layer_off, g->att, B, n, n_attend, pos0,
                              causal, g->d_pad, g->span_slots ? g->d_rslot : NULL, g->span_pos ? g->d_rpos : NULL,
                              slot0, c->n_heads, c->n_kv_heads, g->len)));
    return 0;
}

template <int HD, int W, int BN> cudaError_t raise_raw()
{
    return cudaFuncSetAttribute(k_attn_span<HD, W, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)fa_smem<HD, W, BN>());
}

template <int HD, int W, int BN> int raise_smem(tb_gpu *g)
{
    CK((raise_raw<HD, W, BN>()));
    return 0;
}

} // namespace

namespace tbgpu {

int attn_span_fused_init(tb_gpu *g)
{
    g->span_shape = getenv("TB_GPU_SPAN_ATTN_SHAPE") ? atoi(getenv("TB_GPU_SPAN_ATTN_SHAPE")) : 0;
    if (g->span_shape < 0 || g->span_shape >= FA_N_SHAPES)
        g->span_shape = 0;
#define FA_RAISE(w, bn) || raise_smem<128, w, bn>(g)
    return raise_smem<16, 4, 64>(g) || raise_smem<32, 4, 64>(g) || raise_smem<64, 4, 64>(g) FA_SHAPES(FA_RAISE) ? -1 : 0;
#undef FA_RAISE
}

int attn_span_fused_fits(const tb_gpu *g)
{
    int hd = g->cfg.head_dim;
    return (hd == 16 || hd == 32 || hd == 64 || hd == 128) && g->cfg.n_heads % g->cfg.n_kv_heads == 0 &&
           fa_smem<128, 4, 64>() <= g->prop.sharedMemPerBlockOptin;
}

int attn_span_fused(tb_gpu *g, int l, int B, int slot0, int pos0, int n, int n_attend, int causal)
{
    switch (g->cfg.head_dim) {
    case 16: return launch_shape<16, 4, 64>(g, l, B, slot0, pos0, n, n_attend, causal);
    case 32: return launch_shape<32, 4, 64>(g, l, B, slot0, pos0, n, n_attend, causal);
    case 64: return launch_shape<64, 4, 64>(g, l, B, slot0, pos0, n, n_attend, causal);
    case 128: {
        int k = 0;
#define FA_CASE(w, bn)                                                                                                 \
    if (g->span_shape == k++)                                                                                          \
        return launch_shape<128, w, bn>(g, l, B, slot0, pos0, n, n_attend, causal);
        FA_SHAPES(FA_CASE)
#undef FA_CASE
        return fail(g, "attn_span_fused: shape %d", g->span_shape);
    }
    default: return fail(g, "attn_span_fused: head_dim %d", g->cfg.head_dim);
    }
}

cudaError_t attn_span_rows_ready(int hd, size_t smem_optin)
{
    if (fa_smem<128, 4, 64>() > smem_optin)
        return cudaErrorInvalidValue;
    switch (hd) {
    case 16: return raise_raw<16, 4, 64>();
    case 32: return raise_raw<32, 4, 64>();
    case 64: return raise_raw<64, 4, 64>();
    case 128: return raise_raw<128, 4, 64>();
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t attn_span_rows(cudaStream_t s, const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int B, int n,
                           int n_attend, int pos0, int causal, const int *pad, int slot0, int nh, int nkv, int len,
                           int hd)
{
    switch (hd) {
    case 16: return launch_raw<16, 4, 64>(s, q, kc, vc, out, B, n, n_attend, pos0, causal, pad, NULL, NULL, slot0, nh, nkv, len);
    case 32: return launch_raw<32, 4, 64>(s, q, kc, vc, out, B, n, n_attend, pos0, causal, pad, NULL, NULL, slot0, nh, nkv, len);
    case 64: return launch_raw<64, 4, 64>(s, q, kc, vc, out, B, n, n_attend, pos0, causal, pad, NULL, NULL, slot0, nh, nkv, len);
    case 128: return launch_raw<128, 4, 64>(s, q, kc, vc, out, B, n, n_attend, pos0, causal, pad, NULL, NULL, slot0, nh, nkv, len);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace tbgpu
