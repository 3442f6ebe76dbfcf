// gpu.cu — see gpu.h. Layouts mirror cpu_forward.c: row-major
// [rows][features]; weights [out][in] (PyTorch), so y = x W^T. The CPU path
// is the reference of every kernel here (tests/gpu/).
#include "gpu.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

struct gpu_layer {
    float *attn_norm, *mlp_norm; // [h]
    bf16 *wqkv;                  // [(nh + 2 nkv) hd][h]
    float *bqkv;                 // [(nh + 2 nkv) hd] or NULL
    bf16 *wo;                    // [h][nh hd]
    bf16 *wgu;                   // [2 I][h]
    bf16 *wdown;                 // [h][I]
};

// One device allocation made through dalloc.
struct dev_block {
    void *p;
    size_t bytes; // as requested from cudaMalloc
};

struct tb_gpu {
    tb_model_config cfg;
    cudaDeviceProp prop;
    cublasHandle_t blas;
    cudaStream_t stream;
    void *blas_ws;
    // device memory through dalloc/dfree (gpu.h: what is counted): the
    // blocks held, their bytes now, and the most since tb_gpu_reset_peak
    dev_block *blocks;
    size_t n_blocks, cap_blocks;
    size_t bytes_now, bytes_peak;
    bf16 *embed, *lm_head;
    float *final_norm, *inv_freq;
    gpu_layer *layers;
    // capacity
    int seqs, len, rows;
    bf16 *kc, *vc;     // [layers][seqs][len][kvd]
    float *x;          // [rows][h]
    bf16 *xn;          // [rows][h]
    float *qkv;        // [rows][qkvd]
    bf16 *q;           // [rows][nq]
    bf16 *att;         // [rows][nq]
    float *gu;         // [rows][2I]
    bf16 *act;         // [rows][I]
    float *logits;     // [rows][V]
    float *scores;     // [seqs * heads][rows/seqs][len] (batched attention)
    bf16 *probs;       // same shape, bf16
    int32_t *tok;      // [rows] device tokens
    int32_t *out_tok;  // [rows]
    double *out_conf;  // [rows]
    int *d_pos;        // decode position (device)
    int *d_pad;        // [seqs] left-padding positions of each sequence (device; 0 = none)
    void **ptrs;       // batched-GEMM pointer arrays, every layer (device)
    void **hptrs;      // pinned host staging for them
    size_t ptr_cap;
    // decode graph
    cudaGraphExec_t graph;
    int graph_B;
    int pos;           // host copy of the decode position
    int gemv_variant;  // see gemv()
    int32_t *h_tok;    // pinned [rows]
    double *h_conf;    // pinned [rows]
    // roofline: work of the forwards since tb_gpu_take_work, by count
    double work_flops, work_bytes;
    double peak_flops, peak_bytes_per_s; // measured by tb_gpu_measure_ceilings; 0 = not yet
    char error[512];
};

// The work of one forward over B sequences of n new positions attending to
// n_attend keys, with nr rows through the LM head: FLOPs (GEMMs, attention
// scores and P V, the head) and the bytes the device must move (bf16
// weights read once, K/V read for the keys and written for the new rows,
// the embedding rows). Norms, RoPE and activations are left out: they are
// small next to these.
static void account(tb_gpu *g, int B, int n, int n_attend, int nr)
{
    const tb_model_config *c = &g->cfg;
    double h = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nq = nh * hd, kvd = (double)c->n_kv_heads * hd;
    double I = c->intermediate_size, V = c->vocab_size, L = c->n_layers, rows = (double)B * n;
    double per_layer = (nq + 2 * kvd) * h + h * nq + 2 * I * h + I * h; // weight elements
    g->work_flops += 2 * rows * per_layer * L + 4.0 * B * nh * n * n_attend * hd * L + 2.0 * B * nr * h * V;
    g->work_bytes += 2 * (per_layer * L + V * h) + 2 * L * (2.0 * B * n_attend * kvd + 2 * rows * kvd) + 2 * rows * h;
}

static int fail(tb_gpu *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    return -1;
}

#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return fail(g, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
    } while (0)
#define CB(call)                                                                                    \
    do {                                                                                            \
        cublasStatus_t s_ = (call);                                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                            \
            return fail(g, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_);     \
    } while (0)
#define LAUNCHED() CK(cudaGetLastError())

// Every device allocation of the context goes through dalloc and dfree,
// so that bytes_now is what the context holds and bytes_peak its
// high-water mark (the per-call peak device memory).
static int dalloc(tb_gpu *g, void **p, size_t bytes)
{
    *p = NULL;
    if (g->n_blocks == g->cap_blocks) {
        size_t cap = g->cap_blocks ? 2 * g->cap_blocks : 64;
        dev_block *b = (dev_block *)realloc(g->blocks, cap * sizeof *b);
        if (!b)
            return fail(g, "out of host memory");
        g->blocks = b;
        g->cap_blocks = cap;
    }
    size_t n = bytes ? bytes : 16;
    cudaError_t e = cudaMalloc(p, n);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        *p = NULL;
        return fail(g, "out of device memory: %.2f GB more requested, %.2f of %.2f GB free (%s)", bytes / 1e9,
                    free_b / 1e9, total / 1e9, cudaGetErrorString(e));
    }
    g->blocks[g->n_blocks++] = {*p, n};
    g->bytes_now += n;
    if (g->bytes_now > g->bytes_peak)
        g->bytes_peak = g->bytes_now;
    return 0;
}

// Free a block from dalloc (NULL: nothing).
static void dfree(tb_gpu *g, void *p)
{
    if (!p)
        return;
    for (size_t i = g->n_blocks; i-- > 0;)
        if (g->blocks[i].p == p) {
            g->bytes_now -= g->blocks[i].bytes;
            g->blocks[i] = g->blocks[--g->n_blocks];
            break;
        }
    cudaFree(p);
}

static int qkv_dim(const tb_model_config *c) { return (c->n_heads + 2 * c->n_kv_heads) * c->head_dim; }

// ------------------------------------------------------------------ kernels

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

// y[o] = bf16(x[r] / rms(x[r]) * w), one block per output row o: with
// (n, r0, nr) = (1, 0, 1) every row; otherwise rows r0 .. r0 + nr - 1 of
// each sequence of n rows (the LM head's rows).
__global__ void k_rmsnorm(const float *x, int n, int r0, int nr, const float *w, bf16 *y, int h, float eps)
{
    __shared__ float sh[32];
    int o = blockIdx.x;
    const float *xr = x + ((size_t)(o / nr) * n + r0 + o % nr) * h;
    float ss = 0;
    for (int i = threadIdx.x; i < h; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / h + eps);
    for (int i = threadIdx.x; i < h; i += blockDim.x)
        y[(size_t)blockIdx.x * h + i] = __float2bfloat16(w[i] * (xr[i] * inv));
}

// Bias, half-split RoPE on q and k, k/v into the cache, q to bf16. One
// block per (row, head of q, k or v), a thread per pair of dims; positions
// pos0 + (row % n_new), or *d_pos in decode. A left-padded sequence's
// RoPE positions start at its first real token (pos - pad[b]), as on the
// CPU; the cache slot stays pos.
__global__ void k_qkv_post(const float *qkv, const float *bias, const float *inv_freq, int n_new, int pos0,
                           const int *d_pos, const int *pad, bf16 *kc, bf16 *vc, int len, bf16 *q_out, int nh,
                           int nkv, int hd)
{
    int r = blockIdx.x, head = blockIdx.y, b = r / n_new;
    int pos = (d_pos ? *d_pos : pos0) + r % n_new;
    int rpos = pos >= pad[b] ? pos - pad[b] : 0;
    int nq = nh * hd, kvd = nkv * hd, qkvd = nq + 2 * kvd, half = hd / 2;
    const float *v = qkv + (size_t)r * qkvd + (size_t)head * hd;
    const float *bb = bias ? bias + (size_t)head * hd : NULL;
    size_t at = ((size_t)b * len + pos) * kvd;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float a = v[i] + (bb ? bb[i] : 0.0f), c = v[i + half] + (bb ? bb[i + half] : 0.0f);
        if (head < nh + nkv) { /* q or k: rotate */
            float ang = (float)rpos * inv_freq[i];
            float cs = cosf(ang), sn = sinf(ang);
            float ra = a * cs - c * sn, rc = c * cs + a * sn;
            a = ra, c = rc;
        }
        bf16 *dst = head < nh         ? q_out + (size_t)r * nq + (size_t)head * hd
                    : head < nh + nkv ? kc + at + (size_t)(head - nh) * hd
                                      : vc + at + (size_t)(head - nh - nkv) * hd;
        dst[i] = __float2bfloat16(a);
        dst[i + half] = __float2bfloat16(c);
    }
}

// Decode attention: one query per (sequence, head), keys [0, *d_pos] (or
// n_keys_fixed when d_pos is NULL). ATT_WARPS warps: scores with a warp per
// key (lanes over pairs of dims, bf16x2 loads, 4 keys in flight), softmax
// in shared memory, then each warp sums its share of the keys for every dim
// and the warps' partial sums are added. Latency, not bandwidth, is the
// enemy here: at batch 1 there are only heads-many blocks, so each keeps
// many independent loads in flight.
#define ATT_WARPS 16
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attn_decode(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv, int hd,
                  const int *d_pos, int n_keys_fixed, const int *pad, float scale)
{
    extern __shared__ float s[]; // [len] scores, then [ATT_WARPS][hd] partial outputs
    __shared__ float red[32];
    int b = blockIdx.x, h = blockIdx.y, kvh = h / (nh / nkv), kvd = nkv * hd;
    int n_keys = d_pos ? *d_pos + 1 : n_keys_fixed;
    int lo = pad[b]; // keys [0, lo) are left padding: masked (the query is a real token)
    const bf16 *qv = q + ((size_t)b * nh + h) * hd;
    const bf16 *kb = kc + (size_t)b * len * kvd + kvh * hd, *vb = vc + (size_t)b * len * kvd + kvh * hd;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // this lane's dims: pairs 2 lane + 64 k
    float2 qr[4];
    int npairs = 0;
    for (int d = 2 * lane; d < hd && npairs < 4; d += 64)
        qr[npairs++] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(qv + d));
    for (int j0 = warp; j0 < n_keys; j0 += 4 * ATT_WARPS) {
        float dot[4] = {0, 0, 0, 0};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = j0 + u * ATT_WARPS;
            if (j < n_keys) {
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
            int j = j0 + u * ATT_WARPS;
            if (lane == 0 && j < n_keys)
                s[j] = j < lo ? -INFINITY : d * scale;
        }
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n_keys; j += blockDim.x)
        mx = fmaxf(mx, s[j]);
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < ATT_WARPS; w++)
        mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0;
    for (int j = threadIdx.x; j < n_keys; j += blockDim.x) {
        s[j] = __expf(s[j] - mx);
        sum += s[j];
    }
    sum = block_sum(sum, red);
    float inv = 1.0f / sum;
    // partial outputs: warp w over keys w, w + 8, ...; 4 keys in flight
    float2 acc[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    for (int j0 = warp; j0 < n_keys; j0 += 4 * ATT_WARPS) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = j0 + u * ATT_WARPS;
            if (j < n_keys) {
                const bf16 *v = vb + (size_t)j * kvd;
                float pj = s[j];
                for (int p = 0; p < npairs; p++) {
                    float2 vv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(v + 2 * lane + 64 * p));
                    acc[p].x += pj * vv.x;
                    acc[p].y += pj * vv.y;
                }
            }
        }
    }
    float *part = s + len; // [ATT_WARPS][hd]
    for (int p = 0; p < npairs; p++) {
        part[warp * hd + 2 * lane + 64 * p] = acc[p].x;
        part[warp * hd + 2 * lane + 64 * p + 1] = acc[p].y;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0;
        for (int w = 0; w < ATT_WARPS; w++)
            o += part[w * hd + d];
        out[((size_t)b * nh + h) * hd + d] = __float2bfloat16(o * inv);
    }
}

// Row softmax of scores [sequence][head][n][n_keys] into bf16
// probabilities; causal rows see keys up to their own position pos0 + t.
// Keys [0, pad[b]) are left padding, masked for real rows (a padding row
// attends as usual; nothing reads it), as on the CPU.
__global__ void k_softmax(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad, int nh)
{
    __shared__ float red[32];
    size_t row = blockIdx.x;
    int t = (int)(row % n), visible = causal ? pos0 + t + 1 : n_keys;
    int b = (int)(row / ((size_t)n * nh)), lo = pos0 + t >= pad[b] ? pad[b] : 0;
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

// act[r][i] = silu(gate[r][i]) up[r][i]: a thread per element, so one row
// (decode) still spreads over the whole chip.
__global__ void k_swiglu(const float *gu, bf16 *act, int inter, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / inter, i = e % inter;
        float g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
        act[e] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
    }
}

// Batch-1 product y[out] (+)= W[out][in] x[in]: each warp computes
// GEMV_ROWS rows, lanes stride over 16-byte chunks (8 bf16) of the rows
// and of x (x is small and stays in L1/L2), so every lane keeps
// GEMV_ROWS x unroll independent 16-byte loads of W in flight. No shared
// memory, no block-wide barrier: the weights stream at memory speed.
#define GEMV_WARPS 4
template <int GEMV_ROWS, int UNROLL>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv(const bf16 *__restrict__ w, const bf16 *__restrict__ x, float *__restrict__ y, int out, int in, float beta)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row0 = (blockIdx.x * GEMV_WARPS + warp) * GEMV_ROWS;
    if (row0 >= out)
        return;
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    const uint4 *wr[GEMV_ROWS];
    float acc[GEMV_ROWS];
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++) {
        int row = row0 + r < out ? row0 + r : out - 1; // a tail row recomputes the last one
        wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)row * in);
        acc[r] = 0;
    }
    int chunks = in / 8;
#pragma unroll UNROLL
    for (int c = lane; c < chunks; c += 32) {
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
    for (int r = 0; r < GEMV_ROWS; r++) {
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffff, v, o);
        if (lane == 0 && row0 + r < out)
            y[row0 + r] = beta != 0.0f ? y[row0 + r] * beta + v : v;
    }
}

// First maximum of each row (torch.argmax), into out[row].
__global__ void k_argmax(const float *logits, int V, int32_t *out)
{
    __shared__ float bv[1024];
    __shared__ int bi[1024];
    const float *x = logits + (size_t)blockIdx.x * V;
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
    if (threadIdx.x == 0)
        out[blockIdx.x] = bi[0];
}

__global__ void k_incr(int *p) { *p += 1; }

// Diffusion pick for position r of [B][n]. Its logits come from row r, or
// (shifted, Dream) from the previous position of the same sequence; with
// cfg they are combined on the fly with the unconditional row
// uncond_offset floats further. Kinds as in gpu.h.
struct pick_row {
    const float *c, *u;
    float cfg;
    __device__ float operator[](int v) const { return cfg > 0 ? u[v] + (cfg + 1.0f) * (c[v] - u[v]) : c[v]; }
};

__global__ void k_pick(const float *logits, int V, int npick, int nr, int off, int shifted, size_t uncond_offset,
                       float cfg, int kind, int32_t *x0, double *conf)
{
    __shared__ float bv[256];
    __shared__ int bi[256];
    __shared__ double ds[256];
    int b = blockIdx.x / npick, i = blockIdx.x % npick, li = off + i; // li: row within the nr computed
    size_t src = (size_t)b * nr + (shifted && li > 0 ? li - 1 : li);
    pick_row x = {logits + src * V, logits + src * V + uncond_offset, cfg};
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

// ------------------------------------------------------------ host side

static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256 > 65535 ? 65535 : (n + 255) / 256); }

extern "C" int tb_gpu_probe(char *why, size_t why_size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, why_size, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        return -1;
    }
    return 0;
}

static int upload_bf16(tb_gpu *g, bf16 **dst, const float *src, size_t n, float *stage)
{
    if (dalloc(g, (void **)dst, n * sizeof(bf16)))
        return -1;
    // stage f32 on the device, convert there. The copy goes on our stream:
    // a pageable cudaMemcpy may return before its DMA lands, and our
    // non-blocking stream would not wait for it.
    CK(cudaMemcpyAsync(stage, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    k_f32_to_bf16<<<blocks_for(n), 256, 0, g->stream>>>(stage, *dst, n);
    LAUNCHED();
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int upload_f32(tb_gpu *g, float **dst, const float *src, size_t n)
{
    if (dalloc(g, (void **)dst, n * sizeof(float)))
        return -1;
    CK(cudaMemcpyAsync(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int random_bf16(tb_gpu *g, bf16 **dst, size_t n, uint64_t *seed)
{
    if (dalloc(g, (void **)dst, n * sizeof(bf16)))
        return -1;
    *seed += 0x632BE59BD9B4E019ULL;
    k_init_uniform<<<4096, 256, 0, g->stream>>>(*dst, n, *seed, 0.02f * 1.7320508f);
    LAUNCHED();
    return 0;
}

static int const_f32(tb_gpu *g, float **dst, size_t n, float v)
{
    float *h = (float *)malloc(n * sizeof(float));
    if (!h)
        return fail(g, "out of host memory");
    for (size_t i = 0; i < n; i++)
        h[i] = v;
    int rc = upload_f32(g, dst, h, n);
    free(h);
    return rc;
}

extern "C" double tb_gpu_bench_gemv(tb_gpu *g, int out, int in, double gbs[4]);

extern "C" int tb_gpu_create(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed,
                             char *err, size_t err_size)
{
    *out = NULL;
    tb_gpu *g = (tb_gpu *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    g->cfg = *cfg;
    const tb_model_config *c = &g->cfg;
    size_t h = c->hidden_size, V = c->vocab_size, I = c->intermediate_size;
    size_t rows = qkv_dim(c), nq = (size_t)c->n_heads * c->head_dim;
    int rc = 0;
    float *stage = NULL;
#define TRY(x)          \
    do {                \
        if ((x) != 0) { \
            rc = -1;    \
            goto done;  \
        }               \
    } while (0)
    if (cudaSetDevice(0) != cudaSuccess || cudaGetDeviceProperties(&g->prop, 0) != cudaSuccess) {
        fail(g, "no usable CUDA device");
        rc = -1;
        goto done;
    }
    if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
        fail(g, "cannot create a CUDA stream or cuBLAS handle");
        rc = -1;
        goto done;
    }
    cublasSetStream(g->blas, g->stream);
    // decode attention keeps its scores in shared memory: above 48 KB a
    // kernel must opt in
    if (c->head_dim % 2 || c->head_dim > 256) {
        fail(g, "head_dim %d: the CUDA attention kernels need an even head_dim <= 256", c->head_dim);
        rc = -1;
        goto done;
    }
    if (cudaFuncSetAttribute(k_attn_decode, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)g->prop.sharedMemPerBlockOptin - 1024) != cudaSuccess) { // minus its static part
        fail(g, "cannot raise the kernels' shared memory limits");
        rc = -1;
        goto done;
    }
    // a fixed workspace so cuBLAS never allocates inside graph capture
    TRY(dalloc(g, &g->blas_ws, 64u << 20));
    cublasSetWorkspace(g->blas, g->blas_ws, 64u << 20);
    cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH);
    g->layers = (gpu_layer *)calloc((size_t)c->n_layers, sizeof *g->layers);
    if (!g->layers) {
        fail(g, "out of host memory");
        rc = -1;
        goto done;
    }
    if (cpu) {
        size_t biggest = V * h > I * 2 * h ? V * h : I * 2 * h;
        if (rows * h > biggest)
            biggest = rows * h;
        TRY(dalloc(g, (void **)&stage, biggest * sizeof(float)));
        TRY(upload_bf16(g, &g->embed, cpu->embed, V * h, stage));
        if (c->tie_word_embeddings)
            g->lm_head = g->embed;
        else
            TRY(upload_bf16(g, &g->lm_head, cpu->lm_head, V * h, stage));
        TRY(upload_f32(g, &g->final_norm, cpu->final_norm, h));
        for (int l = 0; l < c->n_layers; l++) {
            const tb_layer *L = &cpu->layers[l];
            gpu_layer *G = &g->layers[l];
            TRY(upload_f32(g, &G->attn_norm, L->attn_norm, h));
            TRY(upload_f32(g, &G->mlp_norm, L->mlp_norm, h));
            TRY(upload_bf16(g, &G->wqkv, L->wqkv, rows * h, stage));
            if (L->bqkv)
                TRY(upload_f32(g, &G->bqkv, L->bqkv, rows));
            TRY(upload_bf16(g, &G->wo, L->wo, h * nq, stage));
            TRY(upload_bf16(g, &G->wgu, L->w_gate_up, 2 * I * h, stage));
            TRY(upload_bf16(g, &G->wdown, L->w_down, h * I, stage));
        }
        TRY(upload_f32(g, &g->inv_freq, cpu->rope_inv_freq, (size_t)c->head_dim / 2));
    } else {
        uint64_t s = seed ^ 0x746F6B62656E6368ULL;
        TRY(random_bf16(g, &g->embed, V * h, &s));
        if (c->tie_word_embeddings)
            g->lm_head = g->embed;
        else
            TRY(random_bf16(g, &g->lm_head, V * h, &s));
        TRY(const_f32(g, &g->final_norm, h, 1.0f));
        for (int l = 0; l < c->n_layers; l++) {
            gpu_layer *G = &g->layers[l];
            TRY(const_f32(g, &G->attn_norm, h, 1.0f));
            TRY(const_f32(g, &G->mlp_norm, h, 1.0f));
            TRY(random_bf16(g, &G->wqkv, rows * h, &s));
            if (c->qkv_bias)
                TRY(const_f32(g, &G->bqkv, rows, 0.01f));
            TRY(random_bf16(g, &G->wo, h * nq, &s));
            TRY(random_bf16(g, &G->wgu, 2 * I * h, &s));
            TRY(random_bf16(g, &G->wdown, h * I, &s));
        }
        float *inv = (float *)malloc((size_t)c->head_dim / 2 * sizeof(float));
        if (!inv) {
            fail(g, "out of host memory");
            rc = -1;
            goto done;
        }
        tb_rope_inv_freq(c, inv);
        rc = upload_f32(g, &g->inv_freq, inv, (size_t)c->head_dim / 2);
        free(inv);
        TRY(rc);
    }
    if (cudaStreamSynchronize(g->stream) != cudaSuccess) {
        fail(g, "weight initialization failed: %s", cudaGetErrorString(cudaGetLastError()));
        rc = -1;
    }
    if (rc == 0 && (size_t)c->intermediate_size * c->hidden_size >= (1u << 24)) {
        /* pick the fastest batch-1 GEMV for this device on the model's
         * own gate-up shape (a fraction of a second at load) */
        double gbs[4];
        if (tb_gpu_bench_gemv(g, 2 * c->intermediate_size, c->hidden_size, gbs) < 0) {
            fail(g, "GEMV calibration failed");
            rc = -1;
        }
    }
done:
#undef TRY
    dfree(g, stage); // transient: in bytes_peak, no longer in bytes_now
    if (rc != 0) {
        snprintf(err, err_size, "%s", g->error);
        tb_gpu_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

static void free_buffers(tb_gpu *g)
{
    void *bufs[] = {g->kc, g->vc, g->x, g->xn, g->qkv, g->q, g->att, g->gu, g->act, g->logits, g->scores,
                    g->probs, g->tok, g->out_tok, g->out_conf, g->d_pos, g->d_pad, g->ptrs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dfree(g, bufs[i]);
    if (g->h_tok)
        cudaFreeHost(g->h_tok);
    if (g->h_conf)
        cudaFreeHost(g->h_conf);
    if (g->hptrs)
        cudaFreeHost(g->hptrs);
    if (g->graph)
        cudaGraphExecDestroy(g->graph);
    g->kc = g->vc = NULL;
    g->x = NULL;
    g->xn = g->q = g->att = g->act = g->probs = NULL;
    g->qkv = g->gu = g->logits = g->scores = NULL;
    g->tok = g->out_tok = NULL;
    g->out_conf = NULL;
    g->d_pos = NULL;
    g->d_pad = NULL;
    g->ptrs = NULL;
    g->hptrs = NULL;
    g->h_tok = NULL;
    g->h_conf = NULL;
    g->graph = NULL;
    g->graph_B = 0;
    g->seqs = g->len = g->rows = 0;
}

extern "C" void tb_gpu_free(tb_gpu *g)
{
    if (!g)
        return;
    free_buffers(g);
    if (g->layers) {
        for (int l = 0; l < g->cfg.n_layers; l++) {
            gpu_layer *G = &g->layers[l];
            void *p[] = {G->attn_norm, G->mlp_norm, G->wqkv, G->bqkv, G->wo, G->wgu, G->wdown};
            for (int i = 0; i < 7; i++)
                dfree(g, p[i]);
        }
        free(g->layers);
    }
    if (g->lm_head != g->embed)
        dfree(g, g->lm_head);
    dfree(g, g->embed);
    dfree(g, g->final_norm);
    dfree(g, g->inv_freq);
    dfree(g, g->blas_ws);
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g->blocks);
    free(g);
}

extern "C" int tb_gpu_reserve(tb_gpu *g, int seqs, int len, int rows, char *err, size_t err_size)
{
    if (seqs <= g->seqs && len <= g->len && rows <= g->rows)
        return 0;
    free_buffers(g);
    const tb_model_config *c = &g->cfg;
    size_t h = c->hidden_size, kvd = (size_t)c->n_kv_heads * c->head_dim, nq = (size_t)c->n_heads * c->head_dim;
    size_t R = rows, I = c->intermediate_size, V = c->vocab_size;
    size_t per_seq_rows = (rows + seqs - 1) / seqs;
    size_t score = (size_t)seqs * c->n_heads * per_seq_rows * len;
    int rc = dalloc(g, (void **)&g->kc, (size_t)c->n_layers * seqs * len * kvd * sizeof(bf16)) ||
             dalloc(g, (void **)&g->vc, (size_t)c->n_layers * seqs * len * kvd * sizeof(bf16)) ||
             dalloc(g, (void **)&g->x, R * h * sizeof(float)) || dalloc(g, (void **)&g->xn, R * h * sizeof(bf16)) ||
             dalloc(g, (void **)&g->qkv, R * qkv_dim(c) * sizeof(float)) ||
             dalloc(g, (void **)&g->q, R * nq * sizeof(bf16)) || dalloc(g, (void **)&g->att, R * nq * sizeof(bf16)) ||
             dalloc(g, (void **)&g->gu, R * 2 * I * sizeof(float)) ||
             dalloc(g, (void **)&g->act, R * I * sizeof(bf16)) ||
             dalloc(g, (void **)&g->logits, R * V * sizeof(float)) ||
             dalloc(g, (void **)&g->scores, score * sizeof(float)) ||
             dalloc(g, (void **)&g->probs, score * sizeof(bf16)) || dalloc(g, (void **)&g->tok, R * sizeof(int32_t)) ||
             dalloc(g, (void **)&g->out_tok, R * sizeof(int32_t)) ||
             dalloc(g, (void **)&g->out_conf, R * sizeof(double)) || dalloc(g, (void **)&g->d_pos, sizeof(int)) ||
             dalloc(g, (void **)&g->d_pad, (size_t)seqs * sizeof(int));
    // on our stream: the legacy default stream would not be ordered before
    // a padding upload on our non-blocking one
    if (rc == 0 && (cudaMemsetAsync(g->d_pad, 0, (size_t)seqs * sizeof(int), g->stream) != cudaSuccess ||
                    cudaStreamSynchronize(g->stream) != cudaSuccess))
        rc = fail(g, "cudaMemsetAsync failed");
    if (rc == 0) {
        /* 6 arrays per (sequence, head) per layer: filled for all layers at
         * once and copied asynchronously from pinned memory, so the host
         * never waits on the device inside a forward */
        g->ptr_cap = (size_t)6 * c->n_layers * seqs * c->n_heads;
        rc = dalloc(g, (void **)&g->ptrs, g->ptr_cap * sizeof(void *));
        if (rc == 0 && (cudaMallocHost((void **)&g->hptrs, g->ptr_cap * sizeof(void *)) != cudaSuccess ||
                        cudaMallocHost((void **)&g->h_tok, R * sizeof(int32_t)) != cudaSuccess ||
                        cudaMallocHost((void **)&g->h_conf, R * sizeof(double)) != cudaSuccess))
            rc = fail(g, "cannot allocate pinned host memory");
    }
    if (rc != 0) {
        snprintf(err, err_size, "%s", g->error);
        free_buffers(g);
        return -1;
    }
    g->seqs = seqs, g->len = len, g->rows = rows;
    return 0;
}

extern "C" int tb_gpu_set_padding(tb_gpu *g, const int *pad, int n)
{
    if (n < 0 || n > g->seqs)
        return fail(g, "padding for %d sequences; %d reserved", n, g->seqs);
    int *h = (int *)calloc(g->seqs > 0 ? g->seqs : 1, sizeof(int));
    if (!h)
        return fail(g, "out of host memory");
    for (int i = 0; i < n && pad; i++)
        h[i] = pad[i] > 0 ? pad[i] : 0;
    // pageable source: returns once staged, so h may be freed; ordered
    // before every later kernel on the stream
    cudaError_t e = cudaMemcpyAsync(g->d_pad, h, (size_t)g->seqs * sizeof(int), cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->stream);
    free(h);
    return e == cudaSuccess ? 0 : fail(g, "padding upload: %s", cudaGetErrorString(e));
}

extern "C" int tb_gpu_pci_bus_id(const tb_gpu *g, char *buf, int len)
{
    (void)g; // the context's device is the current one (tb_gpu_create)
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetPCIBusId(buf, len, dev) == cudaSuccess ? 0 : -1;
}

extern "C" size_t tb_gpu_bytes(const tb_gpu *g) { return g->bytes_now; }
extern "C" size_t tb_gpu_peak_bytes(const tb_gpu *g) { return g->bytes_peak; }
extern "C" void tb_gpu_reset_peak(tb_gpu *g) { g->bytes_peak = g->bytes_now; }
extern "C" const char *tb_gpu_device_name(const tb_gpu *g) { return g->prop.name; }
extern "C" const char *tb_gpu_error(const tb_gpu *g) { return g->error; }

// The GEMV variants (rows per warp, loads in flight per lane); the
// fastest on this device is chosen by tb_gpu_bench_gemv (tests/gpu).
static void gemv(tb_gpu *g, const bf16 *w, const bf16 *x, float *y, int out, int in, float beta, int variant)
{
    switch (variant) {
    case 1:
        k_gemv<4, 4><<<(out + 4 * GEMV_WARPS - 1) / (4 * GEMV_WARPS), GEMV_WARPS * 32, 0, g->stream>>>(w, x, y, out,
                                                                                                     in, beta);
        break;
    case 2:
        k_gemv<2, 8><<<(out + 2 * GEMV_WARPS - 1) / (2 * GEMV_WARPS), GEMV_WARPS * 32, 0, g->stream>>>(w, x, y, out,
                                                                                                     in, beta);
        break;
    case 3:
        k_gemv<1, 8><<<(out + GEMV_WARPS - 1) / GEMV_WARPS, GEMV_WARPS * 32, 0, g->stream>>>(w, x, y, out, in, beta);
        break;
    default:
        k_gemv<2, 4><<<(out + 2 * GEMV_WARPS - 1) / (2 * GEMV_WARPS), GEMV_WARPS * 32, 0, g->stream>>>(w, x, y, out,
                                                                                                     in, beta);
    }
}

// y[rows][out] (+)= x[rows][in] W[out][in]^T; y float32, x and W bf16.
static int linear(tb_gpu *g, float *y, const bf16 *x, const bf16 *w, int rows, int out, int in, float beta)
{
    if (rows == 1 && in % 8 == 0) {
        gemv(g, w, x, y, out, in, beta, g->gemv_variant);
        LAUNCHED();
        return 0;
    }
    float alpha = 1.0f;
    CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in,
                    &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

// Attention of a span with batched GEMMs: S = Q K^T / sqrt(hd), softmax,
// O = P V, for every (sequence, head).
static int attn_span(tb_gpu *g, int l, int B, int pos0, int n, int n_attend, int causal)
{
    const tb_model_config *c = &g->cfg;
    int nh = c->n_heads, hd = c->head_dim, kvd = c->n_kv_heads * hd, nq = nh * hd, group = nh / c->n_kv_heads;
    int batch = B * nh;
    size_t layer_off = (size_t)l * g->seqs * g->len * kvd;
    void **hp = g->hptrs + (size_t)6 * batch * l;
    void **dp = g->ptrs + (size_t)6 * batch * l;
    const void **A1 = (const void **)hp, **B1 = (const void **)hp + batch;
    void **C1 = hp + 2 * batch;
    const void **A2 = (const void **)hp + 3 * batch, **B2 = (const void **)hp + 4 * batch;
    void **C2 = hp + 5 * batch;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            int i = b * nh + h, kvh = h / group;
            const bf16 *kb = g->kc + layer_off + (size_t)b * g->len * kvd + kvh * hd;
            const bf16 *vb = g->vc + layer_off + (size_t)b * g->len * kvd + kvh * hd;
            A1[i] = kb;
            B1[i] = g->q + (size_t)b * n * nq + h * hd;
            C1[i] = g->scores + (size_t)i * n * n_attend;
            A2[i] = vb;
            B2[i] = g->probs + (size_t)i * n * n_attend;
            C2[i] = g->att + (size_t)b * n * nq + h * hd;
        }
    CK(cudaMemcpyAsync(dp, hp, (size_t)6 * batch * sizeof(void *), cudaMemcpyHostToDevice, g->stream));
    float alpha = 1.0f / sqrtf((float)hd), zero = 0.0f, one = 1.0f;
    // S[n][n_attend] = Q[n][hd] K[n_attend][hd]^T (column-major: K^T Q)
    CB(cublasGemmBatchedEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, n_attend, n, hd, &alpha, (const void **)dp,
                           CUDA_R_16BF, kvd, (const void **)(dp + batch), CUDA_R_16BF, nq, &zero, dp + 2 * batch,
                           CUDA_R_32F, n_attend, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    k_softmax<<<(unsigned)((size_t)batch * n), 256, 0, g->stream>>>(g->scores, g->probs, n, n_attend, pos0, causal,
                                                                    g->d_pad, nh);
    LAUNCHED();
    // O[n][hd] = P[n][n_attend] V[n_attend][hd]
    CB(cublasGemmBatchedEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, n, n_attend, &one,
                           (const void **)(dp + 3 * batch), CUDA_R_16BF, kvd, (const void **)(dp + 4 * batch),
                           CUDA_R_16BF, n_attend, &zero, dp + 5 * batch,
                           CUDA_R_16BF, nq, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

// The layers for B x n rows at positions [pos0, pos0 + n) (decode: d_pos).
static int layers(tb_gpu *g, int B, int pos0, int n, int n_attend, int causal, int decode)
{
    const tb_model_config *c = &g->cfg;
    int rows = B * n, h = c->hidden_size, nq = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    int I = c->intermediate_size, qd = qkv_dim(c);
    k_embed<<<rows, 256, 0, g->stream>>>(g->tok, g->embed, g->x, h);
    LAUNCHED();
    for (int l = 0; l < c->n_layers; l++) {
        gpu_layer *G = &g->layers[l];
        size_t layer_off = (size_t)l * g->seqs * g->len * kvd;
        k_rmsnorm<<<rows, 1024, 0, g->stream>>>(g->x, 1, 0, 1, G->attn_norm, g->xn, h, (float)c->rms_eps);
        LAUNCHED();
        if (linear(g, g->qkv, g->xn, G->wqkv, rows, qd, h, 0.0f))
            return -1;
        dim3 post_grid(rows, c->n_heads + 2 * c->n_kv_heads);
        k_qkv_post<<<post_grid, 64, 0, g->stream>>>(g->qkv, G->bqkv, g->inv_freq, n, pos0, decode ? g->d_pos : NULL,
                                                 g->d_pad, g->kc + layer_off, g->vc + layer_off, g->len, g->q, c->n_heads,
                                                 c->n_kv_heads, c->head_dim);
        LAUNCHED();
        if (decode) {
            dim3 grid(B, c->n_heads);
            k_attn_decode<<<grid, ATT_WARPS * 32, (g->len + ATT_WARPS * c->head_dim) * sizeof(float), g->stream>>>(
                g->q, g->kc + layer_off, g->vc + layer_off, g->att, g->len, c->n_heads, c->n_kv_heads, c->head_dim,
                g->d_pos, 0, g->d_pad, 1.0f / sqrtf((float)c->head_dim));
            LAUNCHED();
        } else if (attn_span(g, l, B, pos0, n, n_attend, causal)) {
            return -1;
        }
        if (linear(g, g->x, g->att, G->wo, rows, h, nq, 1.0f))
            return -1;
        k_rmsnorm<<<rows, 1024, 0, g->stream>>>(g->x, 1, 0, 1, G->mlp_norm, g->xn, h, (float)c->rms_eps);
        LAUNCHED();
        if (linear(g, g->gu, g->xn, G->wgu, rows, 2 * I, h, 0.0f))
            return -1;
        k_swiglu<<<blocks_for((size_t)rows * I), 256, 0, g->stream>>>(g->gu, g->act, I, (size_t)rows * I);
        LAUNCHED();
        if (linear(g, g->x, g->act, G->wdown, rows, h, I, 1.0f))
            return -1;
    }
    return 0;
}

// Final norm + LM head over rows r0 .. r0 + nr - 1 of each sequence:
// logits [B][nr][vocab].
static int head(tb_gpu *g, int B, int n, int r0, int nr)
{
    const tb_model_config *c = &g->cfg;
    int h = c->hidden_size;
    k_rmsnorm<<<B * nr, 1024, 0, g->stream>>>(g->x, n, r0, nr, g->final_norm, g->xn, h, (float)c->rms_eps);
    LAUNCHED();
    return linear(g, g->logits, g->xn, g->lm_head, B * nr, c->vocab_size, h, 0.0f);
}

static int fetch_next(tb_gpu *g, int B, int32_t *next, float *logits_out)
{
    k_argmax<<<B, 1024, 0, g->stream>>>(g->logits, g->cfg.vocab_size, g->out_tok);
    LAUNCHED();
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, B * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    if (logits_out)
        CK(cudaMemcpyAsync(logits_out, g->logits, (size_t)B * g->cfg.vocab_size * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    memcpy(next, g->h_tok, B * sizeof(int32_t));
    return 0;
}

extern "C" int tb_gpu_prefill(tb_gpu *g, const int32_t *tokens, int B, int P, int32_t *next, float *logits_out)
{
    if (B > g->seqs || B * P > g->rows || P >= g->len)
        return fail(g, "prefill of %d x %d does not fit the reserved %d x %d", B, P, g->seqs, g->len);
    CK(cudaMemcpyAsync(g->tok, tokens, (size_t)B * P * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    if (layers(g, B, 0, P, P, 1, 0) || head(g, B, P, P - 1, 1))
        return -1;
    account(g, B, P, P, 1);
    g->pos = P;
    CK(cudaMemcpyAsync(g->d_pos, &g->pos, sizeof(int), cudaMemcpyHostToDevice, g->stream));
    return fetch_next(g, B, next, logits_out);
}

// One decode step as a graph: tokens in g->tok at position *d_pos; argmax
// into g->tok (fed back) and g->out_tok; *d_pos incremented.
static int capture_decode(tb_gpu *g, int B)
{
    if (g->graph) {
        cudaGraphExecDestroy(g->graph);
        g->graph = NULL;
    }
    cudaGraph_t graph;
    CK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal));
    int rc = layers(g, B, 0, 1, 0, 1, 1) || head(g, B, 1, 0, 1);
    if (rc == 0) {
        k_argmax<<<B, 1024, 0, g->stream>>>(g->logits, g->cfg.vocab_size, g->out_tok);
        cudaMemcpyAsync(g->tok, g->out_tok, B * sizeof(int32_t), cudaMemcpyDeviceToDevice, g->stream);
        k_incr<<<1, 1, 0, g->stream>>>(g->d_pos);
    }
    cudaError_t e = cudaStreamEndCapture(g->stream, &graph);
    if (rc != 0 || e != cudaSuccess)
        (void)cudaGetLastError(); // a failed capture must not poison the next call
    if (rc != 0)
        return -1;
    if (e != cudaSuccess)
        return fail(g, "decode graph capture failed: %s", cudaGetErrorString(e));
    CK(cudaGraphInstantiate(&g->graph, graph, 0));
    cudaGraphDestroy(graph);
    g->graph_B = B;
    return 0;
}

extern "C" int tb_gpu_decode(tb_gpu *g, int32_t *next, int B, float *logits_out)
{
    if (g->pos >= g->len)
        return fail(g, "decode past the reserved %d positions", g->len);
    memcpy(g->h_tok, next, B * sizeof(int32_t));
    CK(cudaMemcpyAsync(g->tok, g->h_tok, B * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    if (g->graph_B != B && capture_decode(g, B))
        return -1;
    CK(cudaGraphLaunch(g->graph, g->stream));
    account(g, B, 1, g->pos + 1, 1);
    g->pos++;
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, B * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    if (logits_out)
        CK(cudaMemcpyAsync(logits_out, g->logits, (size_t)B * g->cfg.vocab_size * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    memcpy(next, g->h_tok, B * sizeof(int32_t));
    return 0;
}

static int span(tb_gpu *g, const int32_t *tokens, int B, int pos0, int n, int n_attend, int causal, int r0, int nr)
{
    if (B > g->seqs || B * n > g->rows || n_attend > g->len || pos0 + n > g->len)
        return fail(g, "span of %d x %d (attending %d) does not fit the reserved %d x %d", B, n, n_attend, g->seqs,
                    g->len);
    CK(cudaMemcpyAsync(g->tok, tokens, (size_t)B * n * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream));
    if (layers(g, B, pos0, n, n_attend, causal, 0) || head(g, B, n, r0, nr))
        return -1;
    account(g, B, n, n_attend, nr);
    return 0;
}

extern "C" void tb_gpu_take_work(tb_gpu *g, double *flops, double *bytes)
{
    *flops = g->work_flops;
    *bytes = g->work_bytes;
    g->work_flops = g->work_bytes = 0;
}

// The ceilings, measured the way DEVICE.md's figures are: the best of 5
// device-to-device copies of 1 GiB (bytes read + written per second), and
// the best of 5 cuBLAS GEMMs of 8192^3, bf16 inputs, float32 accumulation
// and output as our own GEMMs. Transient buffers: 2 GiB + 256 MiB.
extern "C" int tb_gpu_measure_ceilings(tb_gpu *g, double *peak_flops, double *peak_bytes_per_s)
{
    if (g->peak_flops > 0) {
        *peak_flops = g->peak_flops, *peak_bytes_per_s = g->peak_bytes_per_s;
        return 0;
    }
    const size_t copy = (size_t)1 << 30;
    const int M = 8192;
    void *a = NULL, *b = NULL, *c = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = -1;
    float best_copy = 1e30f, best_gemm = 1e30f;
    if (dalloc(g, &a, copy) || dalloc(g, &b, copy) || dalloc(g, &c, (size_t)M * M * sizeof(float)) ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        (void)cudaGetLastError();
        fail(g, "no room to measure the ceilings");
        goto out;
    }
    // random operands: zeros would let the tensor cores run cooler and faster
    k_init_uniform<<<4096, 256, 0, g->stream>>>((bf16 *)a, copy / sizeof(bf16), 11, 1.0f);
    k_init_uniform<<<4096, 256, 0, g->stream>>>((bf16 *)b, copy / sizeof(bf16), 12, 1.0f);
    for (int i = 0; i < 6; i++) { // the first of each is a warm-up
        float ms = 0;
        cudaEventRecord(e0, g->stream);
        cudaMemcpyAsync(b, a, copy, cudaMemcpyDeviceToDevice, g->stream);
        cudaEventRecord(e1, g->stream);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms < best_copy)
            best_copy = ms;
    }
    for (int i = 0; i < 6; i++) {
        float ms = 0, alpha = 1, beta = 0;
        cudaEventRecord(e0, g->stream);
        if (cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, M, M, M, &alpha, a, CUDA_R_16BF, M, b, CUDA_R_16BF, M,
                         &beta, c, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            fail(g, "cuBLAS failed measuring the FLOP/s ceiling");
            goto out;
        }
        cudaEventRecord(e1, g->stream);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (i > 0 && ms < best_gemm)
            best_gemm = ms;
    }
    if (cudaGetLastError() != cudaSuccess || !(best_copy > 0) || !(best_gemm > 0)) {
        fail(g, "measuring the ceilings failed");
        goto out;
    }
    g->peak_bytes_per_s = 2.0 * copy / (best_copy * 1e-3);
    g->peak_flops = 2.0 * M * M * (double)M / (best_gemm * 1e-3);
    *peak_flops = g->peak_flops, *peak_bytes_per_s = g->peak_bytes_per_s;
    rc = 0;
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    dfree(g, a);
    dfree(g, b);
    dfree(g, c);
    return rc;
}

extern "C" int tb_gpu_logits(tb_gpu *g, const int32_t *tokens, int B, int pos0, int n, int n_attend, int causal,
                             float *logits)
{
    if (span(g, tokens, B, pos0, n, n_attend, causal, 0, n))
        return -1;
    CK(cudaMemcpyAsync(logits, g->logits, (size_t)B * n * g->cfg.vocab_size * sizeof(float), cudaMemcpyDeviceToHost,
                       g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

// The diffusion forward both pick paths share: positions [pos0, pos0 + n)
// of `rows` canvases ([rows][L] host ids) through the layers, and the LM
// head on the rows the picks read: [pick0, pick0 + npick), and for a
// shifted model (Dream: position i reads the output of i - 1) the row
// before. Those head rows are [*r0, *r0 + *nr) in g->logits.
static int canvas_span(tb_gpu *g, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend, int pick0,
                       int npick, int shifted, int *r0, int *nr)
{
    if (shifted && pos0 != 0)
        return fail(g, "shifted logits need the span to start at 0");
    int32_t *tokens = (int32_t *)malloc((size_t)rows * n * sizeof(int32_t));
    if (!tokens)
        return fail(g, "out of host memory");
    for (int b = 0; b < rows; b++)
        memcpy(tokens + (size_t)b * n, canvas + (size_t)b * L + pos0, (size_t)n * sizeof(int32_t));
    *r0 = shifted && pick0 > 0 ? pick0 - 1 : pick0;
    *nr = pick0 + npick - *r0;
    int rc = span(g, tokens, rows, pos0, n, n_attend, 0, *r0, *nr);
    free(tokens);
    return rc;
}

extern "C" int tb_gpu_forward_pick(tb_gpu *g, const int32_t *canvas, int rows, int B, int L, int pos0, int n,
                                   int n_attend, int pick0, int npick, int kind, double cfg_scale, int shifted,
                                   int32_t *x0, double *conf)
{
    int r0, nr;
    if (canvas_span(g, canvas, rows, L, pos0, n, n_attend, pick0, npick, shifted, &r0, &nr))
        return -1;
    size_t V = g->cfg.vocab_size;
    k_pick<<<B * npick, 256, 0, g->stream>>>(g->logits, (int)V, npick, nr, pick0 - r0, shifted, (size_t)B * nr * V,
                                             (float)cfg_scale, kind, g->out_tok, g->out_conf);
    LAUNCHED();
    CK(cudaMemcpyAsync(g->h_tok, g->out_tok, (size_t)B * npick * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaMemcpyAsync(g->h_conf, g->out_conf, (size_t)B * npick * sizeof(double), cudaMemcpyDeviceToHost,
                       g->stream));
    CK(cudaStreamSynchronize(g->stream));
    for (int b = 0; b < B; b++) {
        memcpy(x0 + (size_t)b * n + pick0, g->h_tok + (size_t)b * npick, npick * sizeof(int32_t));
        memcpy(conf + (size_t)b * n + pick0, g->h_conf + (size_t)b * npick, npick * sizeof(double));
    }
    return 0;
}

extern "C" int tb_gpu_forward_logits(tb_gpu *g, const int32_t *canvas, int rows, int L, int pos0, int n,
                                     int n_attend, int pick0, int npick, int shifted, float *logits)
{
    int r0, nr;
    if (canvas_span(g, canvas, rows, L, pos0, n, n_attend, pick0, npick, shifted, &r0, &nr))
        return -1;
    size_t V = g->cfg.vocab_size;
    for (int b = 0; b < rows; b++)
        for (int i = pick0; i < pick0 + npick; i++) {
            // the head row holding position i's logits: i, or i - 1 when
            // shifted (position 0 reads its own)
            int src = (shifted && i > 0 ? i - 1 : i) - r0;
            CK(cudaMemcpyAsync(logits + ((size_t)b * npick + (i - pick0)) * V, g->logits + ((size_t)b * nr + src) * V,
                               V * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
        }
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

// Time every GEMV variant on W[out][in] (random bf16, several copies so
// the reads come from DRAM, not L2) and keep the fastest; returns its
// GB/s of weights read. Writes each variant's GB/s into gbs[4].
extern "C" double tb_gpu_bench_gemv(tb_gpu *g, int out, int in, double gbs[4])
{
    const int copies = 8;
    size_t n = (size_t)out * in;
    bf16 *w = NULL, *x = NULL;
    float *y = NULL;
    if (dalloc(g, (void **)&w, copies * n * sizeof(bf16)) || dalloc(g, (void **)&x, in * sizeof(bf16)) ||
        dalloc(g, (void **)&y, out * sizeof(float))) {
        dfree(g, w);
        dfree(g, x);
        return -1;
    }
    k_init_uniform<<<4096, 256, 0, g->stream>>>(w, copies * n, 1, 0.03f);
    k_init_uniform<<<64, 256, 0, g->stream>>>(x, in, 2, 1.0f);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    double best = 0;
    for (int v = 0; v < 4; v++) {
        for (int i = 0; i < copies; i++) // warm-up
            gemv(g, w + (size_t)i * n, x, y, out, in, 0, v);
        cudaEventRecord(a, g->stream);
        const int iters = 64;
        for (int i = 0; i < iters; i++)
            gemv(g, w + (size_t)(i % copies) * n, x, y, out, in, 0, v);
        cudaEventRecord(b, g->stream);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        gbs[v] = (double)iters * n * sizeof(bf16) / (ms * 1e-3) / 1e9;
        if (gbs[v] > best) {
            best = gbs[v];
            g->gemv_variant = v;
        }
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    dfree(g, w);
    dfree(g, x);
    dfree(g, y);
    return cudaGetLastError() == cudaSuccess ? best : -1;
}
