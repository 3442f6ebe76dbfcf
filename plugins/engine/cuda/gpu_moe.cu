// gpu_moe.cu — the mixture-of-experts feed-forward on the device (issue
// 22), as moe.c computes it on the CPU (the reference, tests/gpu/):
//
//   router      logits[rows][E] = xn W_r^T (cuBLAS), then k_moe_route:
//               softmax (or sigmoid, plus a per-expert bias for the
//               choice), the group-limited choice when n_group > 1, top-k
//               (ties to the lower index), renormalised when norm_topk,
//               times routed_scale
//   grouping    k_moe_group: the (row, slot) pairs sorted by expert on the
//               device (off[E + 1], order[j] = pair, pos[pair] = j), and the
//               count of distinct experts added to the roofline's counter
//               (for up to TB_GPU_MOE_FUSE_ROWS rows and 256 experts, under
//               TB_GPU_FUSE_MOE_ROUTER: k_moe_router, the three in one
//               kernel, the same route and grouping code)
//   experts     three ways over the same groups (moe_ffn chooses by rows
//               and the pairs a routed expert, gpu_tune.h):
//               - k_moe_gemv: one grid over (output tiles, experts), or
//                 where the pairs are fewer than the experts over (output
//                 tiles, pairs), each block row finding its chosen expert
//                 (moe_block_expert); only the chosen experts' weights are
//                 read, and the expert ids come from device memory: the
//                 decode step's CUDA graph replays it whatever the router
//                 picks
//               - cuBLAS per expert over its gathered rows (a grouped GEMM
//                 one group at a time), for long spans whose experts have
//                 many rows each: the host reads the group offsets, so
//                 never inside a graph
//               - or for those spans one tensor-core GEMM over every
//                 expert's tiles, the tiles listed on the device
//                 (k_moe_tiles), no host wait, where a span's pairs are
//                 few an expert (gpu_tune.h's tb_gpu_set_moe_span_grouped;
//                 TB_GPU_MOE_SPAN): k_moe_gemm_async, its tiles 16 or 64
//                 rows by the pairs an expert, 128 by TB_GPU_MOE_TILES=big
//                 (tb_gpu_set_moe_gemm_tiles), the gate-up's SwiGLU in its
//                 epilogue under TB_GPU_FUSE_SWIGLU, its K steps split
//                 where the tiles are few under TB_GPU_MOE_SPLIT,
//                 or k_moe_gemm (FP8, and the first form)
//               (k_moe_gemv's gate-up writes the SwiGLU activations
//               itself under TB_GPU_FUSE_SWIGLU, and its down product
//               does the combine under TB_GPU_FUSE_MOE_COMBINE; at batch
//               1 under TB_GPU_FUSE_MOE_DOWN1 k_moe_down1 does both, a
//               block over every expert of the row)
//   combine     k_moe_combine: x[r] += sum_t w[r][t] y[pos[r k + t]]
//   fp8         dtype = fp8 (fp8.h): the experts' weights are E4M3 codes
//               with a scale an output row (gpu_context.cu), their inputs
//               (the layer's rows, the pairs' SwiGLU activations) are
//               quantized per row by k_fp8_quant_act; the same two ways:
//               k_moe_gemv_fp8, or for long spans FP8 tensor-core GEMMs
//               one expert at a time (gemm_fp8, gpu_gemm_fp8.cu) over the
//               gathered codes (k_moe_gather_q), or k_moe_gemm<true> (the
//               grouped GEMM over the codes' bf16 values, when spans are
//               grouped); without FP8 GEMMs on the device and not grouped,
//               k_moe_gemv_fp8 at any length. The router stays bf16
//
//   shared      the shared experts (LLaDA 2.x): a dense SwiGLU over every
//               row, added after the routed ones (gpu_forward.cu's
//               layer_forward, with the dense layers' GEMMs)
#include "gpu_internal.cuh"
#include "kernels_device.cuh"

#include <mma.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

using namespace tbgpu;

// The route's two shared steps. moe_group_score: group gi's score, the
// sum of its two best choice scores (of per from choice[gi per]; moe.c's).
// warp_argmax: every lane's (i, v) to the warp's best v, ties to the
// lower i; i < 0 is no candidate.
__device__ __forceinline__ float moe_group_score(const float *choice, int gi, int per)
{
    float b1 = -INFINITY, b2 = -INFINITY;
    for (int j = 0; j < per; j++) {
        float v = choice[gi * per + j];
        if (v > b1)
            b2 = b1, b1 = v;
        else if (v > b2)
            b2 = v;
    }
    return per >= 2 ? b1 + b2 : b1;
}
__device__ __forceinline__ void warp_argmax(int &i, float &v)
{
    for (int o = 16; o > 0; o >>= 1) {
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i)))
            i = oi, v = ov;
    }
}

// One warp: the router's choice for row r from its logits [rows][E] into
// idx[rows][k], w[rows][k] (moe.c's tb_moe_route: float32 scores, the
// softmax's sum in double, ties to the lower index). score, choice,
// gscore: the warp's scratch, E floats each (shared memory).
__device__ void moe_route_row(const float *logits, const moe_route_args a, int r, int *idx, float *w, float *score,
                              float *choice, float *gscore)
{
    int E = a.E, k = a.k, n_group = a.n_group, topk_group = a.topk_group, mask_inf = a.mask_inf;
    const float *bias = a.bias;
    int lane = threadIdx.x % 32;
    const float *l = logits + (size_t)r * E;
    if (!a.sigmoid) {
        float mx = -INFINITY;
        for (int e = lane; e < E; e += 32) // L2 reads (k_moe_router's other blocks wrote them), once
            mx = fmaxf(mx, score[e] = __ldcg(l + e));
        for (int o = 16; o > 0; o >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double z = 0;
        for (int e = lane; e < E; e += 32)
            z += (score[e] = expf(score[e] - mx));
        for (int o = 16; o > 0; o >>= 1)
            z += __shfl_xor_sync(0xffffffffu, z, o);
        for (int e = lane; e < E; e += 32)
            score[e] = (float)(score[e] / z);
    } else {
        for (int e = lane; e < E; e += 32)
            score[e] = 1.0f / (1.0f + expf(-__ldcg(l + e)));
    }
    for (int e = lane; e < E; e += 32)
        choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    __syncwarp();
    if (n_group > 1) {
        // group-limited (moe.c): a group's score is the sum of its two best
        // choice scores; outside the topk_group best groups (ties to the
        // lower group) the choice score becomes 0, or -inf (mask_inf).
        // A lane per group, then lane 0 picks the groups.
        int per = E / n_group;
        for (int gi = lane; gi < n_group; gi += 32)
            gscore[gi] = moe_group_score(choice, gi, per);
        __syncwarp();
        if (n_group <= 32) { // the kept groups as a mask, which every lane applies to its experts
            unsigned kept = 0;
            if (lane == 0)
                for (int t = 0; t < topk_group; t++) {
                    int best = -1;
                    for (int gi = 0; gi < n_group; gi++)
                        if (!(kept >> gi & 1u) && (best < 0 || gscore[gi] > gscore[best]))
                            best = gi;
                    kept |= 1u << best;
                }
            kept = __shfl_sync(0xffffffffu, kept, 0);
            for (int e = lane; e < E; e += 32)
                if (!(kept >> (e / per) & 1u))
                    choice[e] = mask_inf ? -INFINITY : 0.0f;
        } else if (lane == 0) {
            unsigned char keep[TB_MOE_MAX_EXPERTS];
            for (int gi = 0; gi < n_group; gi++)
                keep[gi] = 0;
            for (int t = 0; t < topk_group; t++) {
                int best = -1;
                for (int gi = 0; gi < n_group; gi++)
                    if (!keep[gi] && (best < 0 || gscore[gi] > gscore[best]))
                        best = gi;
                keep[best] = 1;
            }
            for (int e = 0; e < E; e++)
                if (!keep[e / per])
                    choice[e] = mask_inf ? -INFINITY : 0.0f;
        }
        __syncwarp();
    }
    // the k best: up to 32, the t-th kept by lane t in registers until the
    // one write at the end; more (no model routes so many), in w itself
    int *ri = idx + (size_t)r * k;
    float *rw = w + (size_t)r * k;
    int my_i = -1;
    float my_w = 0.0f;
    for (int t = 0; t < k; t++) {
        int bi = -1;
        float bv = 0;
        for (int e = lane; e < E; e += 32)
            if (choice[e] != -INFINITY && (bi < 0 || choice[e] > bv))
                bi = e, bv = choice[e];
        warp_argmax(bi, bv);
        if (k <= 32 && lane == t)
            my_i = bi, my_w = score[bi]; // the unbiased score
        if (lane == 0) {
            if (k > 32)
                ri[t] = bi, rw[t] = score[bi];
            choice[bi] = -INFINITY;
        }
        __syncwarp();
    }
    // the sum in the order t = 0 .. k - 1 (as the CPU's moe.c), then each
    // weight normalised and scaled
    if (k <= 32) {
        float sum = 0;
        for (int t = 0; t < k; t++)
            sum += __shfl_sync(0xffffffffu, my_w, t);
        if (lane < k) {
            if (a.norm_topk)
                my_w /= sum;
            ri[lane] = my_i;
            rw[lane] = my_w * a.scale;
        }
    } else if (lane == 0) {
        float sum = 0;
        for (int t = 0; t < k; t++)
            sum += rw[t];
        for (int t = 0; t < k; t++) {
            if (a.norm_topk)
                rw[t] /= sum;
            rw[t] *= a.scale;
        }
    }
    __syncwarp();
}

// One warp per row (blockIdx.x) over the logits cuBLAS wrote.
__global__ void k_moe_route(const float *logits, const moe_route_args a, int *idx, float *w)
{
    __shared__ float score[TB_MOE_MAX_EXPERTS], choice[TB_MOE_MAX_EXPERTS], gscore[TB_MOE_MAX_EXPERTS];
    moe_route_row(logits, a, blockIdx.x, idx, w, score, choice, gscore);
}

// One block: the n pairs idx[n] grouped by expert. off[E + 1]: group
// starts, then off[E + 1 + i] the i-th chosen expert ascending (-1 past
// the last: moe_block_expert's list); order[j]: the pair at grouped
// position j; pos[p]: pair p's position. *touched += the distinct
// experts (the roofline's count). cnt, fill: the block's scratch, E + 1
// and E ints (shared memory).
__device__ void moe_group_pairs(const int *idx, int n, int E, int *off, int *order, int *pos,
                                unsigned long long *touched, int *cnt, int *fill)
{
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        cnt[e] = 0, fill[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < n; p += blockDim.x)
        atomicAdd(&cnt[idx[p]], 1);
    __syncthreads();
    if (threadIdx.x < 32) { // the counts' exclusive prefix sums by warp 0, 32 experts a round
        int lane = threadIdx.x, carry = 0, nz = 0;
        for (int base = 0; base < E; base += 32) {
            int e = base + lane, c = e < E ? cnt[e] : 0, incl = c;
            for (int o = 1; o < 32; o <<= 1) {
                int t = __shfl_up_sync(0xffffffffu, incl, o);
                incl += lane >= o ? t : 0;
            }
            if (e < E)
                off[e] = cnt[e] = carry + incl - c;
            unsigned chosen = __ballot_sync(0xffffffffu, c > 0);
            if (c > 0)
                off[E + 1 + nz + __popc(chosen & ((1u << lane) - 1))] = e;
            nz += __popc(chosen);
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
        for (int i = nz + lane; i < E; i += 32)
            off[E + 1 + i] = -1;
        if (lane == 0) {
            off[E] = carry;
            if (touched)
                *touched += (unsigned long long)nz;
        }
    }
    __syncthreads();
    // within a group the order is whatever the atomics give: every pair's
    // products are its own (no sum across a group), so results do not
    // depend on it
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        int e = idx[p], j = cnt[e] + atomicAdd(&fill[e], 1);
        order[j] = p;
        pos[p] = j;
    }
}

__global__ void k_moe_group(const int *idx, int n, int E, int *off, int *order, int *pos,
                            unsigned long long *touched)
{
    __shared__ int cnt[TB_MOE_MAX_EXPERTS + 1], fill[TB_MOE_MAX_EXPERTS];
    moe_group_pairs(idx, n, E, off, order, pos, touched, cnt, fill);
}

// The router of a few rows in one kernel (TB_GPU_FUSE_MOE_ROUTER): each
// warp one logit (row, expert) at a time, xn[r] . W_r[e] over 16-byte
// chunks in float32 (bf16 inputs and weights, as cuBLAS's product, in
// another order), into logits [rows][E]; then the grid's last block to
// finish (count, reset by it) routes the rows, a warp a row at a time
// (moe_route_row, its scratch 3 E floats a warp), and groups the pairs
// (moe_group_pairs): no cuBLAS call, no k_moe_route or k_moe_group
// launch. NORM (TB_GPU_FUSE_MOE_NORM, nw given): the rows' RMSNorm too,
// from the residual x with weights nw: each block normalizes them into
// its shared memory (rmsnorm_by_block: k_rmsnorm's arithmetic, the sum of
// squares in another order) while its warps' first weight loads are in
// flight, and block 0 also writes them to xn for the experts after it; no
// k_rmsnorm launch. Dynamic shared memory (moe_router_smem): the
// normalized rows (NORM: rows h bf16), then MOE_ROUTER_WARPS 3 E floats
// + 2 E + 1 ints. h % 8 == 0.
#define MOE_ROUTER_WARPS 8
#define MOE_ROUTER_LOADS 8
static size_t moe_router_smem(int rows, int h, int E, bool norm)
{
    return (norm ? (size_t)rows * h * sizeof(bf16) : 0) + (size_t)MOE_ROUTER_WARPS * 3 * E * sizeof(float) +
           (2 * (size_t)E + 1) * sizeof(int);
}
__global__ void __launch_bounds__(MOE_ROUTER_WARPS * 32)
    k_moe_router(const bf16 *__restrict__ W, bf16 *__restrict__ xn, int rows, int h, float *logits,
                 const moe_route_args a, int *idx, float *w, int *off, int *order, int *pos,
                 unsigned long long *touched, unsigned *count, const float *__restrict__ x,
                 const float *__restrict__ nw, float eps)
{
    extern __shared__ __align__(16) unsigned char router_raw[];
    __shared__ unsigned arrived;
    __shared__ float red[32];
    int E = a.E, warp = threadIdx.x / 32, lane = threadIdx.x % 32, chunks = h / 8;
    const bf16 *xs = xn; // the normalized rows the logits read
    float *router_smem = reinterpret_cast<float *>(router_raw + (nw ? (size_t)rows * h * sizeof(bf16) : 0));
    // NORM: the warp's first weight loads issued before the norm, which
    // reads x from L2 meanwhile
    int q0 = blockIdx.x * MOE_ROUTER_WARPS + warp;
    uint4 wpre[MOE_ROUTER_LOADS];
    if (nw) {
#pragma unroll
        for (int u = 0; u < MOE_ROUTER_LOADS; u++) {
            int c = lane + 32 * u;
            wpre[u] = q0 < rows * E && c < chunks ? __ldg(reinterpret_cast<const uint4 *>(W + (size_t)(q0 % E) * h) + c)
                                                  : make_uint4(0, 0, 0, 0);
        }
        bf16 *xsm = reinterpret_cast<bf16 *>(router_raw);
        for (int r = 0; r < rows; r++) // L2 reads: the GEMV before wrote x
            rmsnorm_by_block(x + (size_t)r * h, nw, eps, h, xsm + (size_t)r * h, red);
        __syncthreads();
        if (blockIdx.x == 0)
            for (int i = threadIdx.x; i < rows * h / 8; i += blockDim.x)
                reinterpret_cast<uint4 *>(xn)[i] = reinterpret_cast<const uint4 *>(xsm)[i];
        xs = xsm;
    }
    for (int q = q0; q < rows * E; q += gridDim.x * MOE_ROUTER_WARPS) {
        const uint4 *wr = reinterpret_cast<const uint4 *>(W + (size_t)(q % E) * h);
        const uint4 *xr = reinterpret_cast<const uint4 *>(xs + (size_t)(q / E) * h);
        float acc = 0;
        // MOE_ROUTER_LOADS chunks a lane loaded at once, then summed in
        // the order of c (one wait on memory for a row of up to 8 x 256
        // weights, where a load a chunk waited h / 256 times)
        for (int c0 = lane; c0 < chunks; c0 += 32 * MOE_ROUTER_LOADS) {
            uint4 wv[MOE_ROUTER_LOADS], xv[MOE_ROUTER_LOADS];
            bool pre = nw && q == q0 && c0 == lane; // loaded before the norm
#pragma unroll
            for (int u = 0; u < MOE_ROUTER_LOADS; u++) {
                int c = c0 + 32 * u;
                wv[u] = pre ? wpre[u] : c < chunks ? __ldg(wr + c) : make_uint4(0, 0, 0, 0);
                xv[u] = c < chunks ? xr[c] : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < MOE_ROUTER_LOADS; u++) {
                const __nv_bfloat162 *we = reinterpret_cast<const __nv_bfloat162 *>(&wv[u]);
                const __nv_bfloat162 *xe = reinterpret_cast<const __nv_bfloat162 *>(&xv[u]);
                if (c0 + 32 * u < chunks)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float2 p = __bfloat1622float2(we[i]), s = __bfloat1622float2(xe[i]);
                        acc += p.x * s.x + p.y * s.y;
                    }
            }
        }
        for (int o = 16; o > 0; o >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0)
            logits[q] = acc;
    }
    if (!last_block_to_arrive(count, gridDim.x, &arrived))
        return;
    float *mine = router_smem + (size_t)warp * 3 * E;
    for (int r = warp; r < rows; r += MOE_ROUTER_WARPS) // L2 reads: other blocks wrote the logits
        moe_route_row(logits, a, r, idx, w, mine, mine + E, mine + 2 * E);
    __threadfence_block();
    __syncthreads();
    int *cnt = reinterpret_cast<int *>(router_smem + (size_t)MOE_ROUTER_WARPS * 3 * E);
    moe_group_pairs(idx, rows * a.k, E, off, order, pos, touched, cnt, cnt + E + 1);
}

// The expert a grouped GEMV's block row y works on. A grid of E rows:
// expert y (its blocks return at once when no pair chose it). A grid of
// fewer rows (moe_grid_rows: as many as there are pairs, when that is
// less than E; batch-1 decode launches 8 rows, not 128): the y-th expert,
// ascending, that some pair chose, or -1 past the last, from the list
// moe_group_pairs wrote after the offsets (one load before the block's
// first weight load, where a search of off[] took a load per 32
// experts).
__device__ __forceinline__ int moe_block_expert(const int *off, int E, int y)
{
    return (int)gridDim.y >= E ? y : off[E + 1 + y];
}

// Grid rows for the grouped GEMVs over P (row, slot) pairs: at most one
// per distinct expert chosen (all E under TB_GPU_MOE_GRID=all, the way
// before session 19, kept to measure against).
static unsigned moe_grid_rows(const tb_gpu *g, int P, int E)
{
    return (unsigned)(P < E && !g->moe_grid_all ? P : E);
}

// Grouped products over the experts' weights W[E][out][in] (bf16):
// Y[j][out] = W[e] x_j for every grouped position j of expert e (the
// block row's: moe_block_expert), where x_j is X[order[j] / k] (gather:
// the layer's input rows) or X[j] (!gather: rows already grouped). Each
// warp computes MOE_ROWS outputs for MOE_VECS vectors at a time, lanes
// striding over 16-byte chunks (8 bf16) of the weight rows. Blocks of an
// expert with no pairs return before reading any weight.
// SWIGLU (the gate-up product, TB_GPU_FUSE_SWIGLU): W[E][2 out][in], a
// warp's two rows are gate row o and up row out + o, and it writes
// act[j][o] = bf16(silu(gate) up) (k_swiglu's arithmetic) instead of Y:
// no k_swiglu launch, no float [P][2 out] round trip.
// COMBINE (the down product, TB_GPU_FUSE_MOE_COMBINE): then the last
// block of each column of blocks adds its MOE_TILE outputs of every row
// into the residual, as k_moe_combine (moe_combine_tile).
#define MOE_WARPS 8
#define MOE_ROWS 2
#define MOE_VECS 4
#define MOE_TILE (MOE_WARPS * MOE_ROWS) // a block's outputs: the down product's column width
// the down product's columns of blocks over h outputs (moe_count holds a
// counter each, then the router's)
static inline int moe_columns(int h) { return (h + MOE_TILE - 1) / MOE_TILE; }
// One 16-byte chunk's products: 8 bf16 weights by 8 bf16 inputs, summed
// in float32 in this order (every bf16 grouped GEMV's, so that their
// fused forms give the same bits)
__device__ __forceinline__ float moe_chunk_dot(uint4 wq, uint4 xq)
{
    const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&wq);
    const __nv_bfloat162 *xp = reinterpret_cast<const __nv_bfloat162 *>(&xq);
    float s = 0;
    for (int q = 0; q < 4; q++) {
        float2 a = __bfloat1622float2(wp[q]), b = __bfloat1622float2(xp[q]);
        s += a.x * b.x + a.y * b.y;
    }
    return s;
}

template <bool SWIGLU>
__device__ __forceinline__ void moe_gemv_block(const bf16 *__restrict__ W, const bf16 *__restrict__ X,
                                               const int *__restrict__ off, const int *__restrict__ order, int k,
                                               int gather, float *__restrict__ Y, bf16 *__restrict__ act, int out,
                                               int in, int E)
{
    constexpr int P = SWIGLU ? 1 : MOE_ROWS; // outputs per warp
    int rows_e = SWIGLU ? 2 * out : out;     // W's rows per expert
    int e = moe_block_expert(off, E, blockIdx.y);
    if (e < 0)
        return;
    int j0 = off[e], j1 = off[e + 1];
    if (j0 == j1)
        return;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row0 = (blockIdx.x * MOE_WARPS + warp) * P;
    if (row0 >= out)
        return;
    int chunks = in / 8;
    const uint4 *wr[MOE_ROWS];
    for (int r = 0; r < MOE_ROWS; r++) {
        int row = SWIGLU ? row0 + r * out : (row0 + r < out ? row0 + r : row0);
        wr[r] = reinterpret_cast<const uint4 *>(W + ((size_t)e * rows_e + row) * in);
    }
    for (int j = j0; j < j1; j += MOE_VECS) {
        int nv = j1 - j < MOE_VECS ? j1 - j : MOE_VECS;
        const uint4 *xv[MOE_VECS];
        for (int v = 0; v < MOE_VECS; v++) {
            int jj = j + (v < nv ? v : 0);
            size_t xr = gather ? (size_t)(order[jj] / k) : (size_t)jj;
            xv[v] = reinterpret_cast<const uint4 *>(X + xr * in);
        }
        float acc[MOE_ROWS][MOE_VECS] = {};
        for (int c = lane; c < chunks; c += 32) {
            uint4 wq[MOE_ROWS];
            for (int r = 0; r < MOE_ROWS; r++)
                wq[r] = __ldg(wr[r] + c);
            for (int v = 0; v < MOE_VECS; v++) {
                if (v >= nv)
                    break;
                uint4 xq = xv[v][c];
                for (int r = 0; r < MOE_ROWS; r++)
                    acc[r][v] += moe_chunk_dot(wq[r], xq);
            }
        }
        for (int r = 0; r < MOE_ROWS; r++)
            for (int v = 0; v < MOE_VECS; v++)
                for (int o = 16; o > 0; o >>= 1)
                    acc[r][v] += __shfl_xor_sync(0xffffffffu, acc[r][v], o);
        if (lane == 0)
            for (int v = 0; v < nv; v++) {
                if (SWIGLU) {
                    float gt = acc[0][v], up = acc[1][v];
                    act[(size_t)(j + v) * out + row0] = __float2bfloat16(gt / (1.0f + __expf(-gt)) * up);
                } else {
                    for (int r = 0; r < MOE_ROWS; r++)
                        if (row0 + r < out)
                            Y[(size_t)(j + v) * out + row0 + r] = acc[r][v];
                }
            }
    }
}

// k_moe_combine's sum for outputs [blockIdx.x MOE_TILE, + MOE_TILE) of
// every row, by the last block of this column of the grid to finish its
// products (count[blockIdx.x], reset by it): x[r][d] += sum_t w[r k + t]
// Y[pos[r k + t]][d], t in order (the same arithmetic). Every thread of
// the block calls it.
__device__ void moe_combine_tile(float *x, const float *Y, const int *pos, const float *w, const int *off, int E,
                                 int k, int h, unsigned *count)
{
    __shared__ unsigned arrived;
    if (!last_block_to_arrive(count + blockIdx.x, gridDim.y, &arrived))
        return;
    int rows = off[E] / k, d0 = blockIdx.x * MOE_TILE;
    for (int i = threadIdx.x; i < rows * MOE_TILE; i += blockDim.x) {
        int r = i / MOE_TILE, d = d0 + i % MOE_TILE;
        if (d >= h)
            continue;
        float s = 0;
        for (int t = 0; t < k; t++) // L2 reads: other blocks wrote Y
            s += w[r * k + t] * __ldcg(Y + (size_t)pos[r * k + t] * h + d);
        x[(size_t)r * h + d] += s;
    }
}

// The experts' down product and the combine of one row in one kernel
// (TB_GPU_FUSE_MOE_DOWN1, batch-1 decode, top_k <= MOE_WARPS): block b
// owns outputs [b MOE_DOWN1_ROWS, + MOE_DOWN1_ROWS) of x, warp t the
// row's t-th pair (expert idx[t], its activations act[pos[t]]); each
// lane loads MOE_DOWN1_LOADS chunks of MOE_DOWN1_BATCH rows at once and
// sums them in chunk order (moe_chunk_dot, then the warp's sum: each
// output Y_t[d] as k_moe_gemv computes it), into shared memory; then
// thread d adds sum_t w[t] Y_t[d], t in order, into x (moe_combine_tile's
// sum). One block a 16 outputs over every chosen expert, where
// k_moe_gemv<false, true> runs a block a (16 outputs, expert) and its
// last block a column sums the experts' outputs after an arrival count.
#define MOE_DOWN1_ROWS 16
#define MOE_DOWN1_BATCH 4
#define MOE_DOWN1_LOADS 4
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_down1(const bf16 *__restrict__ W, const bf16 *__restrict__ act, const int *__restrict__ idx,
                const int *__restrict__ pos, const float *__restrict__ w, int k, int h, int mi, float *__restrict__ x)
{
    __shared__ float y[MOE_WARPS][MOE_DOWN1_ROWS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, d0 = blockIdx.x * MOE_DOWN1_ROWS, chunks = mi / 8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    if (warp < k) {
        const uint4 *wt = reinterpret_cast<const uint4 *>(W + (size_t)idx[warp] * h * mi); // expert's [h][mi]
        const uint4 *ar = reinterpret_cast<const uint4 *>(act + (size_t)pos[warp] * mi);
        for (int r0 = 0; r0 < MOE_DOWN1_ROWS; r0 += MOE_DOWN1_BATCH) {
            float acc[MOE_DOWN1_BATCH] = {};
            for (int c0 = lane; c0 < chunks; c0 += 32 * MOE_DOWN1_LOADS) {
                uint4 wq[MOE_DOWN1_LOADS][MOE_DOWN1_BATCH], xq[MOE_DOWN1_LOADS];
#pragma unroll
                for (int u = 0; u < MOE_DOWN1_LOADS; u++) {
                    int c = c0 + 32 * u;
                    xq[u] = c < chunks ? ar[c] : zero;
#pragma unroll
                    for (int r = 0; r < MOE_DOWN1_BATCH; r++) {
                        int d = d0 + r0 + r;
                        wq[u][r] = c < chunks && d < h ? __ldg(wt + (size_t)d * chunks + c) : zero;
                    }
                }
#pragma unroll
                for (int u = 0; u < MOE_DOWN1_LOADS; u++)
                    if (c0 + 32 * u < chunks)
#pragma unroll
                        for (int r = 0; r < MOE_DOWN1_BATCH; r++)
                            acc[r] += moe_chunk_dot(wq[u][r], xq[u]);
            }
#pragma unroll
            for (int r = 0; r < MOE_DOWN1_BATCH; r++) {
                for (int o = 16; o > 0; o >>= 1)
                    acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
                if (lane == 0)
                    y[warp][r0 + r] = acc[r];
            }
        }
    }
    __syncthreads();
    int d = d0 + (int)threadIdx.x;
    if (threadIdx.x < MOE_DOWN1_ROWS && d < h) {
        float s = 0;
        for (int t = 0; t < k; t++)
            s += w[t] * y[t][threadIdx.x];
        x[d] += s;
    }
}

template <bool SWIGLU, bool COMBINE>
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_gemv(const bf16 *__restrict__ W, const bf16 *__restrict__ X, const int *__restrict__ off,
               const int *__restrict__ order, int k, int gather, float *__restrict__ Y, bf16 *__restrict__ act,
               int out, int in, int E, float *x, const int *pos, const float *w, unsigned *count)
{
    static_assert(!(SWIGLU && COMBINE), "the combine sums the down product");
    moe_gemv_block<SWIGLU>(W, X, off, order, k, gather, Y, act, out, in, E);
    if (COMBINE)
        moe_combine_tile(x, Y, pos, w, off, E, k, out, count);
}

// k_moe_gemv under dtype = fp8: W[E][out][in] E4M3 codes with scales
// WS[E out] (one an output row), X[.][in] E4M3 codes with scales XS[.]
// (one a row): Y[j][o] = WS[e out + o] XS[x_j] sum_i W[e][o][i] X[x_j][i],
// products and sums in float32. Lanes stride over 16-byte chunks (16
// codes); in % 16 == 0. SWIGLU and COMBINE as k_moe_gemv's (the gate and
// up values each scaled as Y's would be).
template <bool SWIGLU>
__device__ __forceinline__ void moe_gemv_fp8_block(const uint8_t *__restrict__ W, const float *__restrict__ WS,
                                                   const uint8_t *__restrict__ X, const float *__restrict__ XS,
                                                   const int *__restrict__ off, const int *__restrict__ order, int k,
                                                   int gather, float *__restrict__ Y, bf16 *__restrict__ act, int out,
                                                   int in, int E)
{
    constexpr int P = SWIGLU ? 1 : MOE_ROWS; // outputs per warp
    int rows_e = SWIGLU ? 2 * out : out;     // W's rows per expert
    int e = moe_block_expert(off, E, blockIdx.y);
    if (e < 0)
        return;
    int j0 = off[e], j1 = off[e + 1];
    if (j0 == j1)
        return;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row0 = (blockIdx.x * MOE_WARPS + warp) * P;
    if (row0 >= out)
        return;
    int chunks = in / 16;
    const float *ws = WS + (size_t)e * rows_e + row0; // row r's scale: ws[r] (SWIGLU: gate ws[0], up ws[out])
    const uint4 *wr[MOE_ROWS];
    for (int r = 0; r < MOE_ROWS; r++) {
        int row = SWIGLU ? row0 + r * out : (row0 + r < out ? row0 + r : row0);
        wr[r] = reinterpret_cast<const uint4 *>(W + ((size_t)e * rows_e + row) * in);
    }
    for (int j = j0; j < j1; j += MOE_VECS) {
        int nv = j1 - j < MOE_VECS ? j1 - j : MOE_VECS;
        const uint4 *xv[MOE_VECS];
        float xs[MOE_VECS];
        for (int v = 0; v < MOE_VECS; v++) {
            int jj = j + (v < nv ? v : 0);
            size_t xr = gather ? (size_t)(order[jj] / k) : (size_t)jj;
            xv[v] = reinterpret_cast<const uint4 *>(X + xr * in);
            xs[v] = XS[xr];
        }
        float acc[MOE_ROWS][MOE_VECS] = {};
        for (int c = lane; c < chunks; c += 32) {
            float wf[MOE_ROWS][16];
            for (int r = 0; r < MOE_ROWS; r++) {
                uint4 wq = __ldg(wr[r] + c);
                const unsigned short *p = reinterpret_cast<const unsigned short *>(&wq);
                for (int q = 0; q < 8; q++) {
                    float2 f = e4m3x2_to_float2(p[q]);
                    wf[r][2 * q] = f.x, wf[r][2 * q + 1] = f.y;
                }
            }
            for (int v = 0; v < MOE_VECS; v++) {
                if (v >= nv)
                    break;
                uint4 xq = xv[v][c];
                const unsigned short *p = reinterpret_cast<const unsigned short *>(&xq);
                float xf[16];
                for (int q = 0; q < 8; q++) {
                    float2 f = e4m3x2_to_float2(p[q]);
                    xf[2 * q] = f.x, xf[2 * q + 1] = f.y;
                }
                for (int r = 0; r < MOE_ROWS; r++) {
                    float s = 0;
                    for (int q = 0; q < 16; q++)
                        s += wf[r][q] * xf[q];
                    acc[r][v] += s;
                }
            }
        }
        for (int r = 0; r < MOE_ROWS; r++)
            for (int v = 0; v < MOE_VECS; v++)
                for (int o = 16; o > 0; o >>= 1)
                    acc[r][v] += __shfl_xor_sync(0xffffffffu, acc[r][v], o);
        if (lane == 0)
            for (int v = 0; v < nv; v++) {
                if (SWIGLU) {
                    float gt = acc[0][v] * ws[0] * xs[v], up = acc[1][v] * ws[out] * xs[v];
                    act[(size_t)(j + v) * out + row0] = __float2bfloat16(gt / (1.0f + __expf(-gt)) * up);
                } else {
                    for (int r = 0; r < MOE_ROWS; r++)
                        if (row0 + r < out)
                            Y[(size_t)(j + v) * out + row0 + r] = acc[r][v] * ws[r] * xs[v];
                }
            }
    }
}

template <bool SWIGLU, bool COMBINE>
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_gemv_fp8(const uint8_t *__restrict__ W, const float *__restrict__ WS, const uint8_t *__restrict__ X,
                   const float *__restrict__ XS, const int *__restrict__ off, const int *__restrict__ order, int k,
                   int gather, float *__restrict__ Y, bf16 *__restrict__ act, int out, int in, int E, float *x,
                   const int *pos, const float *w, unsigned *count)
{
    static_assert(!(SWIGLU && COMBINE), "the combine sums the down product");
    moe_gemv_fp8_block<SWIGLU>(W, WS, X, XS, off, order, k, gather, Y, act, out, in, E);
    if (COMBINE)
        moe_combine_tile(x, Y, pos, w, off, E, k, out, count);
}

// The codes and scales of each grouped pair's row together for the
// experts' FP8 GEMMs: xgq[j][h] = xq[order[j] / k][h], xgs[j] likewise.
__global__ void k_moe_gather_q(const uint8_t *xq, const float *xs, const int *order, int k, int h, int n,
                               uint8_t *xgq, float *xgs)
{
    for (int j = blockIdx.x; j < n; j += gridDim.x) {
        size_t r = (size_t)(order[j] / k);
        const uint4 *src = reinterpret_cast<const uint4 *>(xq + r * h);
        uint4 *dst = reinterpret_cast<uint4 *>(xgq + (size_t)j * h);
        for (int d = threadIdx.x; d < h / 16; d += blockDim.x)
            dst[d] = src[d];
        if (threadIdx.x == 0)
            xgs[j] = xs[r];
    }
}

// The grouped GEMM's tiles (k_moe_gemm, k_moe_gemm_async): every
// expert's group of pairs cut into tiles of bm grouped positions (MOE_BM,
// MOE_BM_NARROW or MOE_BM_BIG by the shape); tile t covers positions
// [tile_j[t], tile_j[t] + bm) of expert tile_e[t] (clipped at the
// group's end), ntiles[0] of them, experts ascending. One block of
// MOE_TILES_THREADS, a thread an expert (E is at most TB_MOE_MAX_EXPERTS):
// its tile count, their exclusive prefix sum over the block (where one
// thread walking every expert took 20 µs a layer on the H100 for
// LLaDA2.0-mini's 256), then its tiles.
#define MOE_BM 64
#define MOE_BN 64
#define MOE_BK 32
#define MOE_BM_NARROW 16
#define MOE_BN_NARROW 128
#define MOE_BM_BIG 128
#define MOE_BN_BIG 128
#define MOE_STAGES 4
// the split over K (k_moe_gemm_async): by the tiles at most
// MOE_SPLIT_AUTO parts, as many as bring a launch to the blocks the chip
// holds at once (by the shape's occupancy), set up to MOE_SPLIT_MAX;
// spans of up to MOE_SPLIT_PAIRS pairs get the parts' buffers
#define MOE_SPLIT_AUTO 4
#define MOE_SPLIT_MAX 8
#define MOE_SPLIT_PAIRS 1024
#define MOE_TILES_THREADS TB_MOE_MAX_EXPERTS
__global__ void __launch_bounds__(MOE_TILES_THREADS)
    k_moe_tiles(const int *off, int E, int bm, int *tile_e, int *tile_j, int *ntiles)
{
    __shared__ int warp_sum[MOE_TILES_THREADS / 32];
    int e = threadIdx.x, lane = e % 32, warp = e / 32;
    int n = e < E ? (off[e + 1] - off[e] + bm - 1) / bm : 0, incl = n;
    for (int o = 1; o < 32; o <<= 1) { // inclusive sum within the warp
        int v = __shfl_up_sync(0xffffffffu, incl, o);
        incl += lane >= o ? v : 0;
    }
    if (lane == 31)
        warp_sum[warp] = incl;
    __syncthreads();
    int before = 0; // tiles of the warps before this one's
    for (int w = 0; w < warp; w++)
        before += warp_sum[w];
    int t = before + incl - n;
    for (int i = 0; i < n; i++)
        tile_e[t + i] = e, tile_j[t + i] = off[e] + i * bm;
    if (e == MOE_TILES_THREADS - 1)
        ntiles[0] = before + incl;
}

// 16 E4M3 codes as 16 bf16 values (exact: every E4M3 value is a bf16)
__device__ __forceinline__ void e4m3x16_to_bf16(uint4 v, uint4 *out2)
{
    const unsigned short *p = reinterpret_cast<const unsigned short *>(&v);
    __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(out2);
    for (int q = 0; q < 8; q++) {
        float2 f = e4m3x2_to_float2(p[q]);
        o[q] = __floats2bfloat162_rn(f.x, f.y);
    }
}

// Grouped GEMM over every expert in one launch, on bf16 tensor cores
// (WMMA 16x16x16, float32 accumulation): Y[j][o] = sum_i x_j[i] W[e][o][i]
// for the grouped positions j of tile blockIdx.y (k_moe_tiles), output
// columns [blockIdx.x MOE_BN, + MOE_BN); x_j as in k_moe_gemv (gather:
// X[order[j] / k], else X[j]). Blocks past the tile count return at once,
// so the grid is sized by moe_max_tiles and the launch needs no host
// wait (a CUDA graph can hold it). Four warps, each a 32 x 32 quarter of
// the 64 x 64 tile; operands staged through shared memory MOE_BK wide;
// in % 8 == 0 (16-byte loads; FP8: in % 16), tails of rows and columns
// zero-filled. FP8 (dtype = fp8): W and X are E4M3 codes, staged as their
// exact bf16 values, and the products scaled at the end by WS[e out + o]
// and XS[x_j's row] (k_moe_gemv_fp8's result, on tensor cores).
template <bool FP8>
__global__ void __launch_bounds__(128)
    k_moe_gemm(const void *__restrict__ Wv, const void *__restrict__ Xv, const float *__restrict__ WS,
               const float *__restrict__ XS, const int *__restrict__ off, const int *__restrict__ order, int k,
               int gather, const int *__restrict__ tile_e, const int *__restrict__ tile_j,
               const int *__restrict__ ntiles, float *__restrict__ Y, int out, int in)
{
    using namespace nvcuda;
    const int LDS = MOE_BK + 8, LDC = MOE_BN + 4; // padded rows (bf16, float)
    const int EB = FP8 ? 1 : 2;                    // bytes an element in global memory
    const int CH = 16 / EB;                        // elements a 16-byte chunk
    const int NCH = MOE_BM * MOE_BK / CH / 128;    // chunks a thread stages per operand
    __shared__ __align__(32) unsigned char smem[MOE_BM * LDC * sizeof(float)];
    bf16 *As = reinterpret_cast<bf16 *>(smem), *Bs = As + MOE_BM * LDS;
    float *Cs = reinterpret_cast<float *>(smem); // after the K loop
    const unsigned char *W = static_cast<const unsigned char *>(Wv), *X = static_cast<const unsigned char *>(Xv);
    int t = blockIdx.y;
    if (t >= ntiles[0])
        return;
    int e = tile_e[t], j0 = tile_j[t], jn = off[e + 1] - j0;
    jn = jn < MOE_BM ? jn : MOE_BM;
    int o0 = blockIdx.x * MOE_BN;
    int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    // this thread's 16-byte chunks of each operand tile (64 rows x MOE_BK / CH chunks)
    const unsigned char *arow[NCH], *brow[NCH];
    int ar[NCH], ac[NCH];
    for (int q = 0; q < NCH; q++) {
        int idx = threadIdx.x + q * 128;
        ar[q] = idx / (MOE_BK / CH), ac[q] = idx % (MOE_BK / CH) * CH;
        int j = j0 + ar[q];
        arow[q] = ar[q] < jn ? X + (size_t)(gather ? order[j] / k : j) * in * EB : NULL;
        int o = o0 + ar[q];
        brow[q] = o < out ? W + ((size_t)e * out + o) * in * EB : NULL;
    }
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            wmma::fill_fragment(acc[a][b], 0.0f);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // the next K step's chunks are loaded into registers while the tensor
    // cores work on this one's (the loads' latency hidden behind the MMAs)
    uint4 va[NCH], vb[NCH];
    auto load_step = [&](int k0) { // this thread's chunks of the K step at k0 (zero past in)
        for (int q = 0; q < NCH; q++) {
            int c = k0 + ac[q];
            va[q] = arow[q] && c < in ? *reinterpret_cast<const uint4 *>(arow[q] + (size_t)c * EB) : zero;
            vb[q] = brow[q] && c < in ? __ldg(reinterpret_cast<const uint4 *>(brow[q] + (size_t)c * EB)) : zero;
        }
    };
    load_step(0);
    for (int k0 = 0; k0 < in; k0 += MOE_BK) {
        for (int q = 0; q < NCH; q++) {
            if (FP8) {
                e4m3x16_to_bf16(va[q], reinterpret_cast<uint4 *>(As + ar[q] * LDS + ac[q]));
                e4m3x16_to_bf16(vb[q], reinterpret_cast<uint4 *>(Bs + ar[q] * LDS + ac[q]));
            } else {
                *reinterpret_cast<uint4 *>(As + ar[q] * LDS + ac[q]) = va[q];
                *reinterpret_cast<uint4 *>(Bs + ar[q] * LDS + ac[q]) = vb[q];
            }
        }
        __syncthreads();
        if (k0 + MOE_BK < in)
            load_step(k0 + MOE_BK);
        for (int kk = 0; kk < MOE_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[2];
            for (int a = 0; a < 2; a++)
                wmma::load_matrix_sync(fa[a], As + (wm * 32 + a * 16) * LDS + kk, LDS);
            for (int b = 0; b < 2; b++) // W's rows are B's columns: col-major K x N
                wmma::load_matrix_sync(fb[b], Bs + (wn * 32 + b * 16) * LDS + kk, LDS);
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++)
                    wmma::mma_sync(acc[a][b], fa[a], fb[b], acc[a][b]);
        }
        __syncthreads();
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            wmma::store_matrix_sync(Cs + (wm * 32 + a * 16) * LDC + wn * 32 + b * 16, acc[a][b], LDC,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < MOE_BM * MOE_BN; i += blockDim.x) {
        int r = i / MOE_BN, c = i % MOE_BN;
        if (r < jn && o0 + c < out) {
            float v = Cs[r * LDC + c];
            if (FP8) {
                int j = j0 + r;
                v *= WS[(size_t)e * out + o0 + c] * XS[gather ? order[j] / k : j];
            }
            Y[(size_t)(j0 + r) * out + o0 + c] = v;
        }
    }
}

// The bf16 grouped GEMM pipelined: k_moe_gemm<false>'s product (each
// output summed over the same K steps of MOE_BK in the same order by the
// same WMMA products, whatever the tile: equal to the bit; test_gpu's
// check_moe_tiles), its operand tiles copied global -> shared by
// cp.async MOE_STAGES - 1 K steps ahead (k_moe_gemm holds one step in
// registers: at 1-4 pairs an expert it streams the weights with one 4 KB
// step in flight a block). Three shapes (gemm_tiles picks):
//   BM 16 x BN 128, 4 warps (1 x 4, each 16 x 32): few pairs an expert
//                  (a batch-1 block of LLaDA2.0-mini: 32 rows' 256 pairs
//                  over 256 experts), where a 64-row tile would be mostly
//                  zero rows: a quarter of the padded MMAs
//   BM 64 x BN 64, 4 warps (2 x 2, each 32 x 32): k_moe_gemm's tiles
//   BM 128 x BN 128, 8 warps (2 x 4, each 64 x 32): many pairs an expert;
//                  half the operand bytes a 64 x 64 tile stages per MMA
// Dynamic shared memory (moe_gemm_smem): MOE_STAGES stages of A [BM][LDS]
// then B [BN][LDS] bf16 (46, 40 and 80 KB), reused for C [BM][BN + 4]
// floats at the end.
// Split over K (gridDim.z > 1; gemm_splits, gpu_tune.h's
// tb_gpu_set_moe_splits): a tile's K steps in S parts, S read here from
// the tile count (the blocks to fill: target), each part's sums through
// part [S][P][out] to the last part to arrive, which adds them in the
// parts' order and writes the epilogue (arrive: a counter a tile and
// column). gridDim.z == 1 is the unsplit form, its bits as before.
template <int BM, int BN, int WARPS_M, int NW>
__host__ __device__ constexpr size_t moe_gemm_smem()
{
    return (size_t)MOE_STAGES * (BM + BN) * (MOE_BK + 8) * sizeof(bf16);
}
template <int BM, int BN, int WARPS_M, int NW, bool SWIGLU>
__global__ void __launch_bounds__(NW * 32)
    k_moe_gemm_async(const bf16 *__restrict__ W, const bf16 *__restrict__ X, const int *__restrict__ off,
                     const int *__restrict__ order, int k, int gather, const int *__restrict__ tile_e,
                     const int *__restrict__ tile_j, const int *__restrict__ ntiles, float *__restrict__ Y,
                     bf16 *__restrict__ act, int out, int in, float *__restrict__ part, unsigned *__restrict__ arrive,
                     int P, int target)
{
    using namespace nvcuda;
    constexpr int T = NW * 32; // threads
    constexpr int WARPS_N = NW / WARPS_M, FM = BM / WARPS_M / 16, FN = BN / WARPS_N / 16;
    constexpr int LDS = MOE_BK + 8, LDC = BN + 4;  // padded rows (bf16, float)
    constexpr int STAGE = (BM + BN) * LDS;          // bf16 a stage
    constexpr int KCH = MOE_BK / 8;                 // 16-byte chunks a row of a K step
    constexpr int ACH = (BM * KCH + T - 1) / T, BCH = BN * KCH / T; // a thread's chunks a stage
    static_assert(BN * KCH % T == 0 && FM >= 1 && FN >= 1 && WARPS_M * WARPS_N == NW, "tile shape");
    static_assert(moe_gemm_smem<BM, BN, WARPS_M, NW>() >= (size_t)BM * LDC * sizeof(float), "C fits");
    extern __shared__ __align__(128) unsigned char moe_gemm_shared[];
    bf16 *smem = reinterpret_cast<bf16 *>(moe_gemm_shared);
    int t = blockIdx.y, nt = ntiles[0];
    if (t >= nt)
        return;
    // split over K: S parts of the K steps, as many as bring the blocks
    // in work to target (at most gridDim.z); the parts past S return
    int S = 1;
    if (gridDim.z > 1) {
        int want = target / (nt * (int)gridDim.x);
        S = want < 1 ? 1 : want < (int)gridDim.z ? want : (int)gridDim.z;
        if ((int)blockIdx.z >= S)
            return;
    }
    int e = tile_e[t], j0 = tile_j[t], jn = off[e + 1] - j0;
    jn = jn < BM ? jn : BM;
    // SWIGLU: the block's BN columns are BN / 2 gate rows and their up
    // rows, its outputs act's columns [o0, o0 + BN / 2) of out / 2
    constexpr int OUTS = SWIGLU ? BN / 2 : BN;
    const int width = SWIGLU ? out / 2 : out; // the outputs a row
    int o0 = blockIdx.x * OUTS;
    int warp = threadIdx.x / 32, wm = warp / WARPS_N, wn = warp % WARPS_N;
    // this thread's chunks: the source row (NULL past the group or the
    // columns) and the offset in a stage
    const bf16 *asrc[ACH], *bsrc[BCH];
    int adst[ACH], bdst[BCH], acol[ACH], bcol[BCH];
    for (int q = 0; q < ACH; q++) {
        int idx = threadIdx.x + q * T, r = idx / KCH;
        acol[q] = idx % KCH * 8, adst[q] = r * LDS + acol[q];
        asrc[q] = idx < BM * KCH && r < jn ? X + (size_t)(gather ? order[j0 + r] / k : j0 + r) * in : NULL;
        if (idx >= BM * KCH)
            adst[q] = -1; // no chunk (BM KCH under T)
    }
    for (int q = 0; q < BCH; q++) {
        int idx = threadIdx.x + q * T, r = idx / KCH;
        bcol[q] = idx % KCH * 8, bdst[q] = BM * LDS + r * LDS + bcol[q];
        int o = o0 + r % OUTS, row = SWIGLU && r >= OUTS ? width + o : o; // W's row for tile column r
        bsrc[q] = o < width ? W + ((size_t)e * out + row) * in : NULL;
    }
    auto load_stage = [&](int s, int k0) { // K step k0's chunks into stage s (zeros past in, jn, out)
        bf16 *st = smem + s * STAGE;
        for (int q = 0; q < ACH; q++)
            if (adst[q] >= 0) {
                int c = k0 + acol[q];
                bool ok = asrc[q] && c < in;
                cp_async16(st + adst[q], ok ? asrc[q] + c : X, ok);
            }
        for (int q = 0; q < BCH; q++) {
            int c = k0 + bcol[q];
            bool ok = bsrc[q] && c < in;
            cp_async16(st + bdst[q], ok ? bsrc[q] + c : W, ok);
        }
    };
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
    for (int a = 0; a < FM; a++)
        for (int b = 0; b < FN; b++)
            wmma::fill_fragment(acc[a][b], 0.0f);
    // this part's K steps [kb, kb + nk) of the nk_all, spread evenly (a
    // part gets none where the parts outnumber the steps: its sums are
    // zeros)
    int nk_all = (in + MOE_BK - 1) / MOE_BK, z = (int)blockIdx.z;
    int kb = z * nk_all / S, nk = (z + 1) * nk_all / S - kb;
    for (int s = 0; s < MOE_STAGES - 1; s++) { // the first stages in flight (a group each, empty past nk)
        if (s < nk)
            load_stage(s, (kb + s) * MOE_BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<MOE_STAGES - 2>(); // this thread's copies of step kt landed
        __syncthreads();                 // everyone's; and step kt - 1's stage is free
        int nx = kt + MOE_STAGES - 1;
        if (nx < nk)
            load_stage(nx % MOE_STAGES, (kb + nx) * MOE_BK);
        cp_async_commit();
        const bf16 *As = smem + (kt % MOE_STAGES) * STAGE, *Bs = As + BM * LDS;
        for (int kk = 0; kk < MOE_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[FN];
            for (int a = 0; a < FM; a++)
                wmma::load_matrix_sync(fa[a], As + (wm * FM * 16 + a * 16) * LDS + kk, LDS);
            for (int b = 0; b < FN; b++) // W's rows are B's columns: col-major K x N
                wmma::load_matrix_sync(fb[b], Bs + (wn * FN * 16 + b * 16) * LDS + kk, LDS);
            for (int a = 0; a < FM; a++)
                for (int b = 0; b < FN; b++)
                    wmma::mma_sync(acc[a][b], fa[a], fb[b], acc[a][b]);
        }
    }
    cp_async_wait<0>();
    __syncthreads(); // every stage read: C takes their place
    float *Cs = reinterpret_cast<float *>(smem);
    for (int a = 0; a < FM; a++)
        for (int b = 0; b < FN; b++)
            wmma::store_matrix_sync(Cs + (wm * FM * 16 + a * 16) * LDC + wn * FN * 16 + b * 16, acc[a][b], LDC,
                                    wmma::mem_row_major);
    __syncthreads();
    if (S == 1) {
        for (int i = threadIdx.x; i < BM * OUTS; i += blockDim.x) {
            int r = i / OUTS, c = i % OUTS;
            if (r >= jn || o0 + c >= width)
                continue;
            if (SWIGLU) { // k_swiglu's arithmetic on the same float sums
                float gt = Cs[r * LDC + c], up = Cs[r * LDC + OUTS + c];
                act[(size_t)(j0 + r) * width + o0 + c] = __float2bfloat16_rn(gt / (1.0f + __expf(-gt)) * up);
            } else
                Y[(size_t)(j0 + r) * out + o0 + c] = Cs[r * LDC + c];
        }
        return;
    }
    // Split: this part's sums into part[z][j][W's row], then the last of
    // the S parts of the tile to arrive adds them in the order z = 0, 1,
    // ... (the same bits whichever arrives last) and writes the outputs;
    // it sets the tile's counter back to zero for the next launch.
    float *mine = part + (size_t)blockIdx.z * P * out;
    for (int i = threadIdx.x; i < BM * BN; i += blockDim.x) {
        int r = i / BN, c = i % BN, o = o0 + c % OUTS, row = SWIGLU && c >= OUTS ? width + o : o;
        if (r < jn && o < width)
            mine[(size_t)(j0 + r) * out + row] = Cs[r * LDC + c];
    }
    __shared__ unsigned arrived;
    if (!last_block_to_arrive(arrive + (size_t)t * gridDim.x + blockIdx.x, (unsigned)S, &arrived))
        return;
    for (int i = threadIdx.x; i < BM * OUTS; i += blockDim.x) {
        int r = i / OUTS, c = i % OUTS;
        if (r >= jn || o0 + c >= width)
            continue;
        size_t at = (size_t)(j0 + r) * out + o0 + c;
        if (SWIGLU) {
            float gt = 0, up = 0;
            for (int z = 0; z < S; z++) // L2 (ld.cg): the other parts were written by other SMs
                gt += __ldcg(part + (size_t)z * P * out + at), up += __ldcg(part + (size_t)z * P * out + at + width);
            act[(size_t)(j0 + r) * width + o0 + c] = __float2bfloat16_rn(gt / (1.0f + __expf(-gt)) * up);
        } else {
            float y = 0;
            for (int z = 0; z < S; z++)
                y += __ldcg(part + (size_t)z * P * out + at);
            Y[at] = y;
        }
    }
}

namespace tbgpu {

// tiles of bm rows P pairs over E experts make at most (a grid's rows)
static int moe_max_tiles(int P, int E, int bm) { return P / bm + (P < E ? P : E); }

int moe_tile_capacity(int P, int E) { return moe_max_tiles(P, E, MOE_BM_NARROW); }

bool moe_grouped_fits(int P, int E) { return moe_max_tiles(P, E, MOE_BM) <= 65535; }

// The grouped GEMM's tile shape for a span of P pairs (bf16; FP8 always
// k_moe_gemm's): g->moe_gemm_tiles if one, else by the pairs a routed
// expert on average (gpu_tune.h); a shape only where its grid rows fit.
static int gemm_tiles(const tb_gpu *g, int fp8, int P, int E)
{
    if (fp8)
        return TB_GPU_MOE_TILES_REGS;
    int s = g->moe_gemm_tiles >= TB_GPU_MOE_TILES_REGS && g->moe_gemm_tiles <= TB_GPU_MOE_TILES_BIG
                ? g->moe_gemm_tiles
            : (long)P <= (long)TB_GPU_MOE_NARROW_PER_EXPERT * E ? TB_GPU_MOE_TILES_NARROW
                                                                : TB_GPU_MOE_TILES_WIDE;
    return s == TB_GPU_MOE_TILES_NARROW && moe_max_tiles(P, E, MOE_BM_NARROW) > 65535 ? TB_GPU_MOE_TILES_WIDE : s;
}

// The grid's depth (the most parts its tiles' K steps split into), for
// cols columns of tiles of bm rows over P pairs: g->moe_splits where set;
// else as many as bring the fewest tiles P pairs can make (all of one
// expert) to the resident blocks the chip holds, at most MOE_SPLIT_AUTO
// (the kernel takes fewer where the tiles are more); at most
// MOE_SPLIT_MAX; 1 where the parts' sums or counters would not fit.
static int gemm_splits(const tb_gpu *g, const moe_tiles &t, int P, int E, int bm, int cols, int out, int resident)
{
    int s = g->moe_splits;
    if (s < 1) {
        long fewest = (long)(P + bm - 1) / bm * cols;
        long want = resident / (fewest > 0 ? fewest : 1);
        s = want < 1 ? 1 : want > MOE_SPLIT_AUTO ? MOE_SPLIT_AUTO : (int)want;
    }
    s = s > MOE_SPLIT_MAX ? MOE_SPLIT_MAX : s;
    if (s > 1 && (!t.part || (size_t)s * P * out > t.part_cap || (size_t)moe_max_tiles(P, E, bm) * cols > t.arrive_cap))
        s = 1;
    return s;
}

// one launch of k_moe_gemm_async of a shape: the grid's columns over out,
// its rows the most tiles of BM rows P pairs can make, its depth the
// parts of the split (act non-NULL: the SwiGLU epilogue, act [P][out /
// 2], Y untouched)
template <int BM, int BN, int WARPS_M, int NW>
static void launch_gemm_async(tb_gpu *g, const void *W, const void *X, const int *off, const int *order, int k,
                              int gather, int P, int E, const moe_tiles &t, float *Y, bf16 *act, int out, int in)
{
    size_t smem = moe_gemm_smem<BM, BN, WARPS_M, NW>();
    // the blocks the kernel's split aims at: as many as the chip holds at
    // once (moe_gemm_prepare's count; forced splits: all of them)
    int resident = g->moe_resident[BM == MOE_BM_NARROW ? 0 : BM == MOE_BM ? 1 : 2][act != NULL];
    int target = g->moe_splits > 1 ? 1 << 30 : resident;
    int cols = act ? (out / 2 + BN / 2 - 1) / (BN / 2) : (out + BN - 1) / BN;
    dim3 grid((unsigned)cols, (unsigned)moe_max_tiles(P, E, BM),
              (unsigned)gemm_splits(g, t, P, E, BM, cols, out, resident));
    g->moe_split_launches += grid.z > 1;
    if (act)
        k_moe_gemm_async<BM, BN, WARPS_M, NW, true><<<grid, NW * 32, smem, g->stream>>>(
            (const bf16 *)W, (const bf16 *)X, off, order, k, gather, t.e, t.j, t.n, NULL, act, out, in, t.part,
            t.arrive, P, target);
    else
        k_moe_gemm_async<BM, BN, WARPS_M, NW, false><<<grid, NW * 32, smem, g->stream>>>(
            (const bf16 *)W, (const bf16 *)X, off, order, k, gather, t.e, t.j, t.n, Y, NULL, out, in, t.part,
            t.arrive, P, target);
}
#define MOE_NARROW_SHAPE MOE_BM_NARROW, MOE_BN_NARROW, 1, 4
#define MOE_WIDE_SHAPE MOE_BM, MOE_BN, 2, 4
#define MOE_BIG_SHAPE MOE_BM_BIG, MOE_BN_BIG, 2, 8

// the blocks of a pipelined shape the chip holds at once (its occupancy
// an SM, at least 1, times the SMs)
template <int BM, int BN, int WARPS_M, int NW, bool SWIGLU>
static int gemm_resident(tb_gpu *g, int *n)
{
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_moe_gemm_async<BM, BN, WARPS_M, NW, SWIGLU>, NW * 32,
                                                     moe_gemm_smem<BM, BN, WARPS_M, NW>()));
    *n = (per_sm > 0 ? per_sm : 1) * g->prop.multiProcessorCount;
    return 0;
}

int moe_gemm_prepare(tb_gpu *g)
{
    // the big shape's 80 KB of shared memory is over the 48 KB a launch
    // gets without asking
    CK(cudaFuncSetAttribute(k_moe_gemm_async<MOE_BIG_SHAPE, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)moe_gemm_smem<MOE_BIG_SHAPE>()));
    CK(cudaFuncSetAttribute(k_moe_gemm_async<MOE_BIG_SHAPE, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)moe_gemm_smem<MOE_BIG_SHAPE>()));
    int (*r)[2] = g->moe_resident;
    return gemm_resident<MOE_NARROW_SHAPE, false>(g, &r[0][0]) || gemm_resident<MOE_NARROW_SHAPE, true>(g, &r[0][1]) ||
                   gemm_resident<MOE_WIDE_SHAPE, false>(g, &r[1][0]) || gemm_resident<MOE_WIDE_SHAPE, true>(g, &r[1][1]) ||
                   gemm_resident<MOE_BIG_SHAPE, false>(g, &r[2][0]) || gemm_resident<MOE_BIG_SHAPE, true>(g, &r[2][1])
               ? -1
               : 0;
}

// moe_gemm_grouped's body; act non-NULL (bf16, a pipelined shape): the
// SwiGLU epilogue
static int grouped(tb_gpu *g, int fp8, const void *W, const void *X, const float *WS, const float *XS, const int *off,
                   const int *order, int k, int gather, int P, int E, const moe_tiles &t, int make_tiles, float *Y,
                   bf16 *act, int out, int in)
{
    int shape = gemm_tiles(g, fp8, P, E);
    int bm = shape == TB_GPU_MOE_TILES_NARROW ? MOE_BM_NARROW : shape == TB_GPU_MOE_TILES_BIG ? MOE_BM_BIG : MOE_BM;
    if (make_tiles) { // the gate-up's call; the down product's (same P, same shape) reuses them
        k_moe_tiles<<<1, MOE_TILES_THREADS, 0, g->stream>>>(off, E, bm, t.e, t.j, t.n);
        LAUNCHED();
    }
    if (shape == TB_GPU_MOE_TILES_NARROW)
        launch_gemm_async<MOE_NARROW_SHAPE>(g, W, X, off, order, k, gather, P, E, t, Y, act, out, in);
    else if (shape == TB_GPU_MOE_TILES_WIDE)
        launch_gemm_async<MOE_WIDE_SHAPE>(g, W, X, off, order, k, gather, P, E, t, Y, act, out, in);
    else if (shape == TB_GPU_MOE_TILES_BIG)
        launch_gemm_async<MOE_BIG_SHAPE>(g, W, X, off, order, k, gather, P, E, t, Y, act, out, in);
    if (shape != TB_GPU_MOE_TILES_REGS) {
        LAUNCHED();
        return 0;
    }
    dim3 grid((unsigned)((out + MOE_BN - 1) / MOE_BN), (unsigned)moe_max_tiles(P, E, MOE_BM));
    if (fp8)
        k_moe_gemm<true><<<grid, 128, 0, g->stream>>>(W, X, WS, XS, off, order, k, gather, t.e, t.j, t.n, Y, out, in);
    else
        k_moe_gemm<false><<<grid, 128, 0, g->stream>>>(W, X, NULL, NULL, off, order, k, gather, t.e, t.j, t.n, Y, out,
                                                       in);
    LAUNCHED();
    return 0;
}

int moe_gemm_grouped(tb_gpu *g, int fp8, const void *W, const void *X, const float *WS, const float *XS,
                     const int *off, const int *order, int k, int gather, int P, int E, const moe_tiles &t,
                     int make_tiles, float *Y, int out, int in)
{
    return grouped(g, fp8, W, X, WS, XS, off, order, k, gather, P, E, t, make_tiles, Y, NULL, out, in);
}

int moe_gemm_gate_up(tb_gpu *g, const bf16 *W, const bf16 *X, const int *off, const int *order, int k, int P, int E,
                     const moe_tiles &t, float *gu, bf16 *act, int mi, int in)
{
    if ((g->fusion & TB_GPU_FUSE_SWIGLU) && gemm_tiles(g, 0, P, E) != TB_GPU_MOE_TILES_REGS)
        return grouped(g, 0, W, X, NULL, NULL, off, order, k, 1, P, E, t, 1, NULL, act, 2 * mi, in);
    if (grouped(g, 0, W, X, NULL, NULL, off, order, k, 1, P, E, t, 1, gu, NULL, 2 * mi, in))
        return -1;
    swiglu_act(g, gu, act, mi, (size_t)P * mi, NULL, NULL);
    LAUNCHED();
    return 0;
}

} // namespace tbgpu

// xg[j][h] = xn[order[j] / k][h] (bf16): the rows of each expert together
// for its GEMM.
__global__ void k_moe_gather(const bf16 *xn, const int *order, int k, int h, int n, bf16 *xg)
{
    for (int j = blockIdx.x; j < n; j += gridDim.x) {
        const bf16 *src = xn + (size_t)(order[j] / k) * h;
        for (int d = threadIdx.x; d < h; d += blockDim.x)
            xg[(size_t)j * h + d] = src[d];
    }
}

// x[r][h] += sum_t w[r k + t] y[pos[r k + t]][h]: one block per row.
// Block (r, c) takes four outputs a thread of row r from d = 4 (c
// blockDim + thread); h % 4 == 0 (moe_check: % 8). Each output's sum in
// t order, as the one-output-a-thread loop it replaces (which at 32 rows,
// 32 blocks each walking a row, took 9-14 µs on the H200 for h 2,048).
#define MOE_COMBINE_THREADS 128
__global__ void __launch_bounds__(MOE_COMBINE_THREADS)
    k_moe_combine(float *x, const float *y, const int *pos, const float *w, int k, int h)
{
    int r = blockIdx.x, d = 4 * (blockIdx.y * MOE_COMBINE_THREADS + (int)threadIdx.x);
    if (d >= h)
        return;
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int t = 0; t < k; t++) {
        float wt = w[r * k + t];
        float4 v = *reinterpret_cast<const float4 *>(y + (size_t)pos[r * k + t] * h + d);
        s.x += wt * v.x, s.y += wt * v.y, s.z += wt * v.z, s.w += wt * v.w;
    }
    float4 *xr = reinterpret_cast<float4 *>(x + (size_t)r * h + d);
    float4 o = *xr;
    o.x += s.x, o.y += s.y, o.z += s.z, o.w += s.w;
    *xr = o;
}

namespace tbgpu {

int moe_check(tb_gpu *g)
{
    const tb_moe_config *m = &g->moe;
    if (m->hidden % 8 || m->expert_inter % 8)
        return fail(g, "%s: the CUDA experts need hidden_size and moe_intermediate_size divisible by 8 (%d, %d)",
                    g->cfg.arch_name, m->hidden, m->expert_inter);
    return 0;
}

// The split's buffers (k_moe_gemm_async) for spans of up to
// MOE_SPLIT_PAIRS of P pairs: the parts' sums of the widest product
// (gate-up 2 mi or down h outputs), a counter a (tile, column) of the
// most tiles (16 rows) over the most columns (64 wide)
static size_t split_part_cap(size_t P, size_t h, size_t mi)
{
    size_t n = P < MOE_SPLIT_PAIRS ? P : MOE_SPLIT_PAIRS, out = 2 * mi > h ? 2 * mi : h;
    return MOE_SPLIT_MAX * n * out;
}
static size_t split_arrive_cap(size_t P, size_t E, size_t h, size_t mi)
{
    size_t n = P < MOE_SPLIT_PAIRS ? P : MOE_SPLIT_PAIRS, out = 2 * mi > h ? 2 * mi : h;
    return (size_t)moe_max_tiles((int)n, (int)E, MOE_BM_NARROW) * ((out + MOE_BN - 1) / MOE_BN);
}

int moe_reserve(tb_gpu *g, int rows)
{
    if (g->cfg.n_experts <= 0)
        return 0;
    if (moe_gemm_prepare(g))
        return -1;
    const tb_moe_config *m = &g->moe;
    size_t R = rows, E = m->n_experts, P = R * m->top_k, h = m->hidden, mi = m->expert_inter;
    if (!moe_grouped_fits((int)P, (int)E))
        return fail(g, "MoE: %zu (row, expert) pairs a forward, more than the grouped GEMM's grid takes", P);
    // the split's buffers (bf16 only: FP8 never splits) unless it is off
    // at this reserve (up to 64 MiB for LLaDA2.0-mini)
    bool split = !g->fp8 && g->moe_splits != 1;
    int rc = dalloc(g, (void **)&g->moe_logits, R * E * sizeof(float)) ||
             dalloc(g, (void **)&g->moe_idx, P * sizeof(int)) || dalloc(g, (void **)&g->moe_w, P * sizeof(float)) ||
             dalloc(g, (void **)&g->moe_off, (2 * E + 1) * sizeof(int)) ||
             dalloc(g, (void **)&g->moe_order, P * sizeof(int)) || dalloc(g, (void **)&g->moe_pos, P * sizeof(int)) ||
             (!g->fp8 && dalloc(g, (void **)&g->moe_xg, P * h * sizeof(bf16))) || // the bf16 cuBLAS path's
             dalloc(g, (void **)&g->moe_gu, P * 2 * mi * sizeof(float)) ||
             dalloc(g, (void **)&g->moe_act, P * mi * sizeof(bf16)) ||
             dalloc(g, (void **)&g->moe_y, P * h * sizeof(float)) ||
             dalloc(g, (void **)&g->moe_touched, sizeof(unsigned long long)) ||
             dalloc(g, (void **)&g->moe_tile_e, (size_t)moe_tile_capacity((int)P, (int)E) * sizeof(int)) ||
             dalloc(g, (void **)&g->moe_tile_j, (size_t)moe_tile_capacity((int)P, (int)E) * sizeof(int)) ||
             dalloc(g, (void **)&g->moe_ntiles, sizeof(int)) ||
             dalloc(g, (void **)&g->moe_count, (moe_columns((int)h) + 1) * sizeof(unsigned)) ||
             (split && (dalloc(g, (void **)&g->moe_part, split_part_cap(P, h, mi) * sizeof(float)) ||
                        dalloc(g, (void **)&g->moe_arrive, split_arrive_cap(P, E, h, mi) * sizeof(unsigned)))) ||
             (g->fp8 && (dalloc(g, (void **)&g->moe_xq, R * h) || dalloc(g, (void **)&g->moe_xs, R * sizeof(float)) ||
                         dalloc(g, (void **)&g->moe_aq, P * mi) || dalloc(g, (void **)&g->moe_as, P * sizeof(float)) ||
                         (g->fp8_gemm && (dalloc(g, (void **)&g->moe_xgq, P * h) || // per-expert FP8 GEMMs'
                                          dalloc(g, (void **)&g->moe_xgs, P * sizeof(float))))));
    if (split)
        g->moe_part_cap = split_part_cap(P, h, mi), g->moe_arrive_cap = split_arrive_cap(P, E, h, mi);
    if (rc == 0 && cudaMallocHost((void **)&g->h_moe_off, (E + 1) * sizeof(int)) != cudaSuccess)
        rc = fail(g, "cannot allocate pinned host memory");
    if (rc == 0 && (cudaMemsetAsync(g->moe_touched, 0, sizeof(unsigned long long), g->stream) != cudaSuccess ||
                    cudaMemsetAsync(g->moe_count, 0, (moe_columns((int)h) + 1) * sizeof(unsigned), g->stream) !=
                        cudaSuccess ||
                    (g->moe_arrive &&
                     cudaMemsetAsync(g->moe_arrive, 0, g->moe_arrive_cap * sizeof(unsigned), g->stream) != cudaSuccess) ||
                    cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "cudaMemsetAsync failed");
    return rc;
}

void moe_free(tb_gpu *g)
{
    void *bufs[] = {g->moe_logits, g->moe_idx, g->moe_w,  g->moe_off, g->moe_order, g->moe_pos,
                    g->moe_xg,     g->moe_gu,  g->moe_act, g->moe_y,  g->moe_touched, g->moe_xq,
                    g->moe_xs,     g->moe_aq,  g->moe_as,  g->moe_xgq, g->moe_xgs, g->moe_tile_e,
                    g->moe_tile_j, g->moe_ntiles, g->moe_count, g->moe_part, g->moe_arrive};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dfree(g, bufs[i]);
    if (g->h_moe_off)
        cudaFreeHost(g->h_moe_off);
    g->moe_logits = g->moe_w = g->moe_gu = g->moe_y = NULL;
    g->moe_idx = g->moe_off = g->moe_order = g->moe_pos = g->h_moe_off = NULL;
    g->moe_xg = g->moe_act = NULL;
    g->moe_touched = NULL;
    g->moe_xq = g->moe_aq = g->moe_xgq = NULL;
    g->moe_xs = g->moe_as = g->moe_xgs = NULL;
    g->moe_tile_e = g->moe_tile_j = g->moe_ntiles = NULL;
    g->moe_count = NULL;
    g->moe_part = NULL;
    g->moe_arrive = NULL;
    g->moe_part_cap = g->moe_arrive_cap = 0;
}

// One expert's FP8 GEMM over its n gathered rows: y[n][out] = xs[r] ws[o]
// (XQ WQ^T), the bare products from gemm_fp8's unscaled route, then
// k_fp8_scale_out in place (a group's scales start at any float, where
// cuBLASLt's scale vectors would want them aligned).
static int expert_fp8(tb_gpu *g, float *y, const uint8_t *xq, const float *xs, const uint8_t *wq, const float *ws,
                      int n, int out, int in)
{
    int deferred = 0;
    if (gemm_fp8(g, y, xq, xs, wq, ws, n, out, in, 0.0f, &deferred))
        return -1;
    if (!deferred)
        return fail(g, "the experts' FP8 GEMM applied its scales itself");
    size_t cnt = (size_t)n * out;
    k_fp8_scale_out<<<(unsigned)((cnt + 255) / 256 < 4096 ? (cnt + 255) / 256 : 4096), 256, 0, g->stream>>>(
        y, xs, ws, y, n, out, 0.0f);
    LAUNCHED();
    return 0;
}

// A span of `rows` rows above moe_gemv_max_rows: its experts by one
// grouped GEMM a projection (k_moe_gemm), else by cuBLAS (or FP8 GEMMs)
// per expert (gpu_tune.h's tb_gpu_set_moe_span_grouped: by the pairs a
// routed expert unless set).
static int span_grouped(const tb_gpu *g, int rows)
{
    if (g->moe_span_grouped >= 0)
        return g->moe_span_grouped;
    return (long)rows * g->moe.top_k <= (long)TB_GPU_MOE_GROUPED_PER_EXPERT * g->moe.n_experts;
}

// dtype = fp8's experts (the file's head says how): into g->moe_y.
// The experts under dtype = fp8 into moe_y, or (*combined set) added into
// x already (the GEMV's COMBINE).
static int moe_experts_fp8(tb_gpu *g, const gpu_layer *G, int rows, int graphable, int *combined)
{
    const tb_moe_config *m = &g->moe;
    int E = m->n_experts, k = m->top_k, h = m->hidden, mi = m->expert_inter, P = rows * k;
    k_fp8_quant_act<<<rows, FP8_QUANT_THREADS, 0, g->stream>>>(g->xn, h, g->moe_xq, g->moe_xs);
    LAUNCHED();
    if (graphable || rows <= g->moe_gemv_max_rows || (!g->fp8_gemm && !span_grouped(g, rows))) {
        if (g->fusion & TB_GPU_FUSE_SWIGLU) { // as the bf16 path's
            dim3 gu_grid((mi + MOE_WARPS - 1) / MOE_WARPS, moe_grid_rows(g, P, E));
            k_moe_gemv_fp8<true, false><<<gu_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->qex_gu, G->sex_gu, g->moe_xq, g->moe_xs, g->moe_off, g->moe_order, k, 1, NULL, g->moe_act, mi, h,
                E, NULL, NULL, NULL, NULL);
            LAUNCHED();
        } else {
            dim3 gu_grid((2 * mi + MOE_TILE - 1) / MOE_TILE, moe_grid_rows(g, P, E));
            k_moe_gemv_fp8<false, false><<<gu_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->qex_gu, G->sex_gu, g->moe_xq, g->moe_xs, g->moe_off, g->moe_order, k, 1, g->moe_gu, NULL, 2 * mi,
                h, E, NULL, NULL, NULL, NULL);
            LAUNCHED();
            k_swiglu<<<blocks_for((size_t)P * mi), 256, 0, g->stream>>>(g->moe_gu, g->moe_act, mi, (size_t)P * mi,
                                                                       NULL, NULL);
            LAUNCHED();
        }
        k_fp8_quant_act<<<P, FP8_QUANT_THREADS, 0, g->stream>>>(g->moe_act, mi, g->moe_aq, g->moe_as);
        LAUNCHED();
        dim3 down_grid((h + MOE_TILE - 1) / MOE_TILE, moe_grid_rows(g, P, E));
        *combined = (g->fusion & TB_GPU_FUSE_MOE_COMBINE) && rows <= TB_GPU_MOE_FUSE_ROWS;
        if (*combined)
            k_moe_gemv_fp8<false, true><<<down_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->qex_down, G->sex_down, g->moe_aq, g->moe_as, g->moe_off, NULL, k, 0, g->moe_y, NULL, h, mi, E,
                g->x, g->moe_pos, g->moe_w, g->moe_count);
        else
            k_moe_gemv_fp8<false, false><<<down_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->qex_down, G->sex_down, g->moe_aq, g->moe_as, g->moe_off, NULL, k, 0, g->moe_y, NULL, h, mi, E,
                NULL, NULL, NULL, NULL);
        LAUNCHED();
        return 0;
    }
    if (span_grouped(g, rows)) { // one grouped GEMM a projection, sized on the device
        moe_tiles t = {g->moe_tile_e, g->moe_tile_j, g->moe_ntiles, NULL, NULL, 0, 0}; // FP8: no split
        if (moe_gemm_grouped(g, 1, G->qex_gu, g->moe_xq, G->sex_gu, g->moe_xs, g->moe_off, g->moe_order, k, 1, P, E,
                             t, 1, g->moe_gu, 2 * mi, h))
            return -1;
        k_swiglu<<<blocks_for((size_t)P * mi), 256, 0, g->stream>>>(g->moe_gu, g->moe_act, mi, (size_t)P * mi, NULL, NULL);
        LAUNCHED();
        k_fp8_quant_act<<<P, FP8_QUANT_THREADS, 0, g->stream>>>(g->moe_act, mi, g->moe_aq, g->moe_as);
        LAUNCHED();
        return moe_gemm_grouped(g, 1, G->qex_down, g->moe_aq, G->sex_down, g->moe_as, g->moe_off, NULL, k, 0, P, E, t,
                                0, g->moe_y, h, mi);
    }
    // the group offsets on the host: one wait per MoE layer of a span
    CK(cudaMemcpyAsync(g->h_moe_off, g->moe_off, (size_t)(E + 1) * sizeof(int), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    k_moe_gather_q<<<P < 65535 ? P : 65535, 128, 0, g->stream>>>(g->moe_xq, g->moe_xs, g->moe_order, k, h, P,
                                                                g->moe_xgq, g->moe_xgs);
    LAUNCHED();
    const int *off = g->h_moe_off;
    for (int e = 0; e < E; e++) {
        int n = off[e + 1] - off[e];
        if (n > 0 && expert_fp8(g, g->moe_gu + (size_t)off[e] * 2 * mi, g->moe_xgq + (size_t)off[e] * h,
                                g->moe_xgs + off[e], G->qex_gu + (size_t)e * 2 * mi * h, G->sex_gu + (size_t)e * 2 * mi,
                                n, 2 * mi, h))
            return -1;
    }
    k_swiglu<<<blocks_for((size_t)P * mi), 256, 0, g->stream>>>(g->moe_gu, g->moe_act, mi, (size_t)P * mi, NULL, NULL);
    LAUNCHED();
    k_fp8_quant_act<<<P, FP8_QUANT_THREADS, 0, g->stream>>>(g->moe_act, mi, g->moe_aq, g->moe_as);
    LAUNCHED();
    for (int e = 0; e < E; e++) {
        int n = off[e + 1] - off[e];
        if (n > 0 && expert_fp8(g, g->moe_y + (size_t)off[e] * h, g->moe_aq + (size_t)off[e] * mi, g->moe_as + off[e],
                                G->qex_down + (size_t)e * h * mi, G->sex_down + (size_t)e * h, n, h, mi))
            return -1;
    }
    return 0;
}

// The fused router's conditions (TB_GPU_FUSE_MOE_ROUTER): few rows, at
// most 256 experts, h % 8 == 0; with the norm (`norm`) its shared memory,
// dynamic and the kernel's own (a few hundred bytes: 1 KB allowed),
// within the 48 KB a launch gets without asking
static bool router_fused(const tb_gpu *g, int rows, bool norm)
{
    const tb_moe_config *m = &g->moe;
    return (g->fusion & TB_GPU_FUSE_MOE_ROUTER) && rows <= TB_GPU_MOE_FUSE_ROWS && m->n_experts <= 256 &&
           m->hidden % 8 == 0 &&
           (!norm || moe_router_smem(rows, m->hidden, m->n_experts, true) + 1024 <= 48 * 1024);
}

// TB_GPU_FUSE_MOE_NORM: one row only (at 4 rows, each block normalizing
// every row, a decode step measured 0.8% slower: gpu_tune.h)
int moe_router_norms(const tb_gpu *g, int rows)
{
    return rows == 1 && (g->fusion & TB_GPU_FUSE_MOE_NORM) && router_fused(g, rows, true);
}

int moe_ffn(tb_gpu *g, int l, int rows, int graphable, const float *norm_w)
{
    const tb_moe_config *m = &g->moe;
    const gpu_layer *G = &g->layers[l];
    int E = m->n_experts, k = m->top_k, h = m->hidden, mi = m->expert_inter, P = rows * k;
    int combined = 0; // the down GEMV added the experts' outputs into x
    float one = 1.0f, zero = 0.0f;
    moe_route_args ra = {E,           k,          m->scoring == TB_MOE_SIGMOID, G->score_bias, m->n_group, m->topk_group,
                         m->group_mask_inf, m->norm_topk, m->routed_scale};
    if (norm_w && !moe_router_norms(g, rows))
        return fail(g, "MoE layer %d: the router cannot apply the norm here", l);
    if (router_fused(g, rows, norm_w != NULL)) {
        size_t smem = moe_router_smem(rows, h, E, norm_w != NULL);
        unsigned blocks = (unsigned)((rows * E + MOE_ROUTER_WARPS - 1) / MOE_ROUTER_WARPS);
        k_moe_router<<<blocks, MOE_ROUTER_WARPS * 32, smem, g->stream>>>(
            G->router, g->xn, rows, h, g->moe_logits, ra, g->moe_idx, g->moe_w, g->moe_off, g->moe_order, g->moe_pos,
            g->moe_touched, g->moe_count + moe_columns(h), g->x, norm_w, (float)g->cfg.rms_eps);
        LAUNCHED();
    } else {
        // the router's logits, float32 (bf16 inputs and weights, as every GEMM)
        CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, E, rows, h, &one, G->router, CUDA_R_16BF, h, g->xn,
                        CUDA_R_16BF, h, &zero, g->moe_logits, CUDA_R_32F, E, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        k_moe_route<<<rows, 32, 0, g->stream>>>(g->moe_logits, ra, g->moe_idx, g->moe_w);
        LAUNCHED();
        k_moe_group<<<1, 1024, 0, g->stream>>>(g->moe_idx, P, E, g->moe_off, g->moe_order, g->moe_pos,
                                               g->moe_touched);
        LAUNCHED();
    }
    if (g->fp8) {
        if (moe_experts_fp8(g, G, rows, graphable, &combined))
            return -1;
    } else if (graphable || rows <= g->moe_gemv_max_rows) {
        if (g->fusion & TB_GPU_FUSE_SWIGLU) { // gate-up with SwiGLU in its epilogue: a warp a (gate, up) pair
            dim3 gu_grid((mi + MOE_WARPS - 1) / MOE_WARPS, moe_grid_rows(g, P, E));
            k_moe_gemv<true, false><<<gu_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->ex_gu, g->xn, g->moe_off, g->moe_order, k, 1, NULL, g->moe_act, mi, h, E, NULL, NULL, NULL, NULL);
            LAUNCHED();
        } else {
            dim3 gu_grid((2 * mi + MOE_WARPS * MOE_ROWS - 1) / (MOE_WARPS * MOE_ROWS), moe_grid_rows(g, P, E));
            k_moe_gemv<false, false><<<gu_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->ex_gu, g->xn, g->moe_off, g->moe_order, k, 1, g->moe_gu, NULL, 2 * mi, h, E, NULL, NULL, NULL,
                NULL);
            LAUNCHED();
            k_swiglu<<<blocks_for((size_t)P * mi), 256, 0, g->stream>>>(g->moe_gu, g->moe_act, mi, (size_t)P * mi,
                                                                       NULL, NULL);
            LAUNCHED();
        }
        dim3 down_grid((h + MOE_TILE - 1) / MOE_TILE, moe_grid_rows(g, P, E));
        combined = (g->fusion & TB_GPU_FUSE_MOE_COMBINE) && rows <= TB_GPU_MOE_FUSE_ROWS;
        if (rows == 1 && (g->fusion & TB_GPU_FUSE_MOE_DOWN1) && k <= MOE_WARPS) { // the row's experts a block
            k_moe_down1<<<(h + MOE_DOWN1_ROWS - 1) / MOE_DOWN1_ROWS, MOE_WARPS * 32, 0, g->stream>>>(
                G->ex_down, g->moe_act, g->moe_idx, g->moe_pos, g->moe_w, k, h, mi, g->x);
            combined = 1;
        } else if (combined)
            k_moe_gemv<false, true><<<down_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->ex_down, g->moe_act, g->moe_off, NULL, k, 0, g->moe_y, NULL, h, mi, E, g->x, g->moe_pos, g->moe_w,
                g->moe_count);
        else
            k_moe_gemv<false, false><<<down_grid, MOE_WARPS * 32, 0, g->stream>>>(
                G->ex_down, g->moe_act, g->moe_off, NULL, k, 0, g->moe_y, NULL, h, mi, E, NULL, NULL, NULL, NULL);
        LAUNCHED();
    } else if (span_grouped(g, rows)) { // one grouped GEMM a projection, sized on the device
        moe_tiles t = {g->moe_tile_e, g->moe_tile_j, g->moe_ntiles, g->moe_part, g->moe_arrive, g->moe_part_cap,
                       g->moe_arrive_cap};
        if (moe_gemm_gate_up(g, G->ex_gu, g->xn, g->moe_off, g->moe_order, k, P, E, t, g->moe_gu, g->moe_act, mi, h))
            return -1;
        if (moe_gemm_grouped(g, 0, G->ex_down, g->moe_act, NULL, NULL, g->moe_off, NULL, k, 0, P, E, t, 0, g->moe_y, h,
                             mi))
            return -1;
    } else {
        // the group offsets on the host: one wait per MoE layer of a span
        CK(cudaMemcpyAsync(g->h_moe_off, g->moe_off, (size_t)(E + 1) * sizeof(int), cudaMemcpyDeviceToHost,
                           g->stream));
        CK(cudaStreamSynchronize(g->stream));
        k_moe_gather<<<P < 65535 ? P : 65535, 256, 0, g->stream>>>(g->xn, g->moe_order, k, h, P, g->moe_xg);
        LAUNCHED();
        const int *off = g->h_moe_off;
        for (int e = 0; e < E; e++) {
            int n = off[e + 1] - off[e];
            if (n == 0)
                continue; // an expert no row chose is never read
            CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, 2 * mi, n, h, &one, G->ex_gu + (size_t)e * 2 * mi * h,
                            CUDA_R_16BF, h, g->moe_xg + (size_t)off[e] * h, CUDA_R_16BF, h, &zero,
                            g->moe_gu + (size_t)off[e] * 2 * mi, CUDA_R_32F, 2 * mi, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
        }
        k_swiglu<<<blocks_for((size_t)P * mi), 256, 0, g->stream>>>(g->moe_gu, g->moe_act, mi, (size_t)P * mi, NULL, NULL);
        LAUNCHED();
        for (int e = 0; e < E; e++) {
            int n = off[e + 1] - off[e];
            if (n == 0)
                continue;
            CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, h, n, mi, &one, G->ex_down + (size_t)e * h * mi,
                            CUDA_R_16BF, mi, g->moe_act + (size_t)off[e] * mi, CUDA_R_16BF, mi, &zero,
                            g->moe_y + (size_t)off[e] * h, CUDA_R_32F, h, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
    }
    if (!combined) {
        dim3 grid((unsigned)rows, (unsigned)((h / 4 + MOE_COMBINE_THREADS - 1) / MOE_COMBINE_THREADS));
        k_moe_combine<<<grid, MOE_COMBINE_THREADS, 0, g->stream>>>(g->x, g->moe_y, g->moe_pos, g->moe_w, k, h);
        LAUNCHED();
    }
    return 0;
}

int take_device_count(tb_gpu *g, unsigned long long *count, unsigned long long *out)
{
    *out = 0;
    CK(cudaMemcpyAsync(out, count, sizeof *out, cudaMemcpyDeviceToHost, g->stream));
    CK(cudaMemsetAsync(count, 0, sizeof *out, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

int moe_take_touched(tb_gpu *g, double *touched)
{
    *touched = 0;
    if (!g->moe_touched)
        return 0;
    unsigned long long t = 0;
    if (take_device_count(g, g->moe_touched, &t))
        return -1;
    *touched = (double)t;
    return 0;
}

} // namespace tbgpu

extern "C" void tb_gpu_set_moe_gemv_rows(tb_gpu *g, int max_rows)
{
    for (int r = 0; r < g->n_ranks; r++) // a tensor-parallel group's ranks (no MoE: tp_split.h refuses it)
        g->ranks[r]->moe_gemv_max_rows = max_rows;
    g->moe_gemv_max_rows = max_rows;
}

extern "C" void tb_gpu_set_moe_span_grouped(tb_gpu *g, int grouped)
{
    for (int r = 0; r < g->n_ranks; r++)
        g->ranks[r]->moe_span_grouped = grouped;
    g->moe_span_grouped = grouped;
}

extern "C" long tb_gpu_moe_split_launches(const tb_gpu *g) { return g->moe_split_launches; }

extern "C" void tb_gpu_set_moe_splits(tb_gpu *g, int splits)
{
    for (int r = 0; r < g->n_ranks; r++)
        g->ranks[r]->moe_splits = splits;
    g->moe_splits = splits;
}

extern "C" void tb_gpu_set_moe_gemm_tiles(tb_gpu *g, int tiles)
{
    for (int r = 0; r < g->n_ranks; r++)
        g->ranks[r]->moe_gemm_tiles = tiles;
    g->moe_gemm_tiles = tiles;
}
