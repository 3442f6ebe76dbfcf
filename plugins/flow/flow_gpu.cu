// flow_gpu.cu — see flow_gpu.h. The network in flow_cpu.c's order; the
// sampler in flow_sampler.c's. Layouts row-major: weights [out][in], so a
// product is y[rows][out] = x[rows][in] W^T (cuBLAS: W^T x in column-major).
#include "flow_gpu.h"
#include "cuda_check.cuh"  // CK, CB, LAUNCHED: failures as statuses (fail() below)
#include "gpu.h"            // the engine's ceiling measurement
#include "gpu_kprof.h"      // TB_GPU_KERNEL_PROFILE's kernel table
#include "gpu_kernels.cuh"  // the engine's kernels it reuses: k_init_uniform, k_f32_to_bf16, k_softmax, k_argmax,
                            // and its one-kernel span attention (tbgpu::attn_span_rows)

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fblock {
    float *norm1, *norm2, *b_up, *b_down, *ada_b; // float32
    bf16 *wqkv, *wo, *w_up, *w_down, *ada_w;      // bf16
};

struct tb_flow_gpu {
    tb_flow_config cfg;
    int64_t n_params;
    cudaDeviceProp prop;
    int kprof; // TB_GPU_KERNEL_PROFILE (gpu_kprof.h): this context is in the kernel table
    int span_fused; // attention by the engine's one-kernel path (tb_flow_gpu_set_fused_attention)
    cublasHandle_t blas;
    cudaStream_t stream;
    void *ws;
    // weights
    bf16 *E, *w_out, *sc_w, *fada_w;
    float *b_out, *norm_f, *fada_b, *inv_freq;
    fblock *blocks;
    float *t_w1, *t_b1, *t_w2, *t_b2; // host: the time condition is computed there
    // the call's buffers (grown on demand)
    int cap_rows, cap_B, cap_L;
    float *z, *xsc, *x0, *y2, *e1, *noise, *x, *y, *qkv, *logits, *scores, *mod, *cond;
    bf16 *zb, *xb, *h, *q, *k, *v, *o, *att, *u, *probs, *pr, *condb;
    int32_t *tok, *out_tok;
    int *pad;
    uint64_t *noise_states; // [cap_B] each canvas's noise stream (tb_flow_noise_state)
    size_t held, peak;
    size_t buf_bytes; // of the call's buffers (reserve), given back by free_buffers
    double flops, bytes; // the call's work, by count (tb_flow_gpu_sample)
    char error[512];
};

static int fail(tb_flow_gpu *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    return -1;
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

// Every device block through these, counted (held now, most held).
static int dalloc(tb_flow_gpu *g, void **p, size_t bytes)
{
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return fail(g, "out of device memory: %zu bytes (%s)", bytes, cudaGetErrorString(e));
    }
    g->held += bytes;
    g->peak = g->held > g->peak ? g->held : g->peak;
    return 0;
}

// ------------------------------------------------------------- kernels

// The sum (max) of v over the block (blockDim a multiple of 32, at most
// 1024); red: __shared__ float[32], free again on return.
static __device__ float block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < (int)blockDim.x / 32; i++)
        t += red[i];
    __syncthreads();
    return t;
}

static __device__ float block_max(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float t = red[0];
    for (int i = 1; i < (int)blockDim.x / 32; i++)
        t = fmaxf(t, red[i]);
    __syncthreads();
    return t;
}

// The modulation row of row r: 0, the canvas's level, or 1, the prompt
// level for the first gp positions of each canvas (gp 0: none).
__device__ __forceinline__ int mod_row(size_t r, int L, int gp)
{
    return (int)(r % L) < gp ? 1 : 0;
}

// y[r] = LN(x[r]) w (1 + scale) + shift, shift/scale of row r's level
// at mod + mod_row(r) * mstride + off_shift / off_scale; bf16 out. A
// block a row. Where D % 4 == 0 and D <= 4 LN_CHUNKS blockDim, the row
// is read once into registers (16-byte loads; every preset's D), else
// three times (the second and third from L1/L2).
#define LN_CHUNKS 4
__global__ void k_ln_mod(const float *x, const float *w, const float *mod, int mstride, int off_shift, int off_scale,
                         int L, int gp, int D, float eps, bf16 *y)
{
    __shared__ float red[32];
    int r = blockIdx.x;
    const float *xr = x + (size_t)r * D;
    const float *m = mod + (size_t)mod_row(r, L, gp) * mstride;
    int n4 = D / 4;
    if (D % 4 == 0 && n4 <= LN_CHUNKS * (int)blockDim.x) {
        float4 v[LN_CHUNKS];
        float s = 0;
#pragma unroll
        for (int c = 0; c < LN_CHUNKS; c++) {
            int i = threadIdx.x + c * blockDim.x;
            v[c] = i < n4 ? reinterpret_cast<const float4 *>(xr)[i] : make_float4(0, 0, 0, 0);
            s += v[c].x + v[c].y + v[c].z + v[c].w;
        }
        float mean = block_sum(s, red) / D, q = 0;
#pragma unroll
        for (int c = 0; c < LN_CHUNKS; c++)
            if (threadIdx.x + c * blockDim.x < n4) {
                float a = v[c].x - mean, b = v[c].y - mean, d = v[c].z - mean, e = v[c].w - mean;
                q += a * a + b * b + d * d + e * e;
            }
        float inv = rsqrtf(block_sum(q, red) / D + eps);
#pragma unroll
        for (int c = 0; c < LN_CHUNKS; c++) {
            int i = threadIdx.x + c * blockDim.x;
            if (i >= n4)
                continue;
            float4 wv = reinterpret_cast<const float4 *>(w)[i];
            float4 sc = reinterpret_cast<const float4 *>(m + off_scale)[i];
            float4 sh = reinterpret_cast<const float4 *>(m + off_shift)[i];
            __nv_bfloat162 lo = __floats2bfloat162_rn((v[c].x - mean) * inv * wv.x * (1.0f + sc.x) + sh.x,
                                                      (v[c].y - mean) * inv * wv.y * (1.0f + sc.y) + sh.y);
            __nv_bfloat162 hi = __floats2bfloat162_rn((v[c].z - mean) * inv * wv.z * (1.0f + sc.z) + sh.z,
                                                      (v[c].w - mean) * inv * wv.w * (1.0f + sc.w) + sh.w);
            uint2 o;
            o.x = *reinterpret_cast<unsigned *>(&lo);
            o.y = *reinterpret_cast<unsigned *>(&hi);
            reinterpret_cast<uint2 *>(y + (size_t)r * D)[i] = o;
        }
        return;
    }
    float s = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        s += xr[i];
    float mean = block_sum(s, red) / D;
    float v = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        v += (xr[i] - mean) * (xr[i] - mean);
    float inv = rsqrtf(block_sum(v, red) / D + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        y[(size_t)r * D + i] = __float2bfloat16((xr[i] - mean) * inv * w[i] * (1.0f + m[off_scale + i]) + m[off_shift + i]);
}

// qkv [rows][3D] -> q, k, v bf16, RoPE (rotate-half) on q, k from each
// canvas's first real position; by_head: [B][H][L][hd] (the batched GEMMs'
// operands), else [B][L][H][hd] (the one-kernel attention's).
__global__ void k_rope_split(const float *qkv, const float *inv_freq, const int *pad, int L, int H, int hd,
                             int by_head, bf16 *q, bf16 *k, bf16 *v)
{
    int r = blockIdx.x, h = blockIdx.y, b = r / L, t = r % L, D = H * hd, half = hd / 2;
    int pos = t >= pad[b] ? t - pad[b] : 0;
    const float *src = qkv + (size_t)r * 3 * D + (size_t)h * hd;
    size_t at = by_head ? (((size_t)b * H + h) * L + t) * hd : ((size_t)r * H + h) * hd;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float ang = (float)pos * inv_freq[i], cs = cosf(ang), sn = sinf(ang);
        float a = src[i], c = src[i + half];
        q[at + i] = __float2bfloat16(a * cs - c * sn);
        q[at + i + half] = __float2bfloat16(c * cs + a * sn);
        a = src[D + i], c = src[D + i + half];
        k[at + i] = __float2bfloat16(a * cs - c * sn);
        k[at + i + half] = __float2bfloat16(c * cs + a * sn);
        v[at + i] = __float2bfloat16(src[2 * D + i]);
        v[at + i + half] = __float2bfloat16(src[2 * D + i + half]);
    }
}

// o [B][H][L][hd] -> att [B][L][H hd]
__global__ void k_merge_heads(const bf16 *o, int L, int H, int hd, bf16 *att)
{
    int r = blockIdx.x, h = blockIdx.y, b = r / L, t = r % L;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        att[(size_t)r * H * hd + (size_t)h * hd + i] = o[(((size_t)b * H + h) * L + t) * hd + i];
}

// x[r] += g (y[r] + bias), g of row r's level at mod + mod_row(r) * mstride + off
// (n = rows x D); four a thread where D % 4 == 0 (16-byte loads and
// stores, the same arithmetic: launch over n / 4 threads then)
__global__ void k_gate_add(float *x, const float *y, const float *bias, const float *mod, int mstride, int off, int L,
                           int gp, int D, size_t n)
{
    if (D % 4 == 0) {
        const float4 zero = make_float4(0, 0, 0, 0);
        for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n / 4; e += (size_t)gridDim.x * blockDim.x) {
            size_t r = e * 4 / D;
            int i = (int)(e * 4 % D);
            float4 g = *reinterpret_cast<const float4 *>(mod + (size_t)mod_row(r, L, gp) * mstride + off + i);
            float4 b = bias ? *reinterpret_cast<const float4 *>(bias + i) : zero;
            float4 yv = reinterpret_cast<const float4 *>(y)[e], xv = reinterpret_cast<float4 *>(x)[e];
            xv.x += g.x * (yv.x + b.x), xv.y += g.y * (yv.y + b.y), xv.z += g.z * (yv.z + b.z), xv.w += g.w * (yv.w + b.w);
            reinterpret_cast<float4 *>(x)[e] = xv;
        }
        return;
    }
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / D;
        int i = (int)(e % D);
        x[e] += mod[(size_t)mod_row(r, L, gp) * mstride + off + i] * (y[e] + (bias ? bias[i] : 0.0f));
    }
}

__device__ __forceinline__ float gelu_tanh(float v)
{
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

// u = gelu_tanh(u + b) -> bf16 (n = rows x F); four a thread where
// F % 4 == 0 (launch over n / 4 threads then)
__global__ void k_bias_gelu(const float *u, const float *b, int F, size_t n, bf16 *out)
{
    if (F % 4 == 0) {
        for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n / 4; e += (size_t)gridDim.x * blockDim.x) {
            float4 v = reinterpret_cast<const float4 *>(u)[e];
            float4 bv = *reinterpret_cast<const float4 *>(b + e * 4 % F);
            __nv_bfloat162 lo = __floats2bfloat162_rn(gelu_tanh(v.x + bv.x), gelu_tanh(v.y + bv.y));
            __nv_bfloat162 hi = __floats2bfloat162_rn(gelu_tanh(v.z + bv.z), gelu_tanh(v.w + bv.w));
            uint2 o;
            o.x = *reinterpret_cast<unsigned *>(&lo);
            o.y = *reinterpret_cast<unsigned *>(&hi);
            reinterpret_cast<uint2 *>(out)[e] = o;
        }
        return;
    }
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        out[e] = __float2bfloat16(gelu_tanh(u[e] + b[e % F]));
}

__global__ void k_add_rowbias(float *x, const float *b, int n_cols, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        x[e] += b[e % n_cols];
}

// probs[r] = softmax(logits[r]) in bf16 (float accumulation)
// Scores S [B * H][L][L]: a prompt row's keys from gen0 on get -inf (a
// prompt_attention "prompt" model: the prompt attends to itself only; the
// softmax after it then weighs them 0). A block per (canvas, head, row < gen0).
__global__ void k_mask_prompt_rows(float *scores, int L, int gen0)
{
    float *row = scores + (size_t)blockIdx.x * L * L + (size_t)blockIdx.y * L;
    for (int j = gen0 + threadIdx.x; j < L; j += blockDim.x)
        row[j] = -INFINITY;
}

__global__ void k_softmax_rows(const float *logits, int V, bf16 *probs)
{
    __shared__ float red[32];
    const float *x = logits + (size_t)blockIdx.x * V;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, x[v]);
    mx = block_max(mx, red);
    float s = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        s += __expf(x[v] - mx);
    float inv = 1.0f / block_sum(s, red);
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        probs[(size_t)blockIdx.x * V + v] = __float2bfloat16(__expf(x[v] - mx) * inv);
}

// E's rows to length sqrt(D)
__global__ void k_norm_rows(bf16 *E, int D)
{
    __shared__ float red[32];
    bf16 *e = E + (size_t)blockIdx.x * D;
    float s = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float v = __bfloat162float(e[i]);
        s += v * v;
    }
    float tot = block_sum(s, red);
    float k = tot > 0 ? sqrtf((float)D / tot) : 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        e[i] = __float2bfloat16(__bfloat162float(e[i]) * k);
}

__global__ void k_fill(float *p, float v, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        p[e] = v;
}

__global__ void k_init_f32(float *p, size_t n, uint64_t seed, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        p[i] = a * (2.0f * (float)(z >> 40) / 16777216.0f - 1.0f);
    }
}

// The prompt rows of z and x_sc (flow_sampler.c's set_prompt).
__global__ void k_set_prompt(float *z, float *xsc, const int32_t *tok, const int *pad, const bf16 *E,
                             const float *noise, int L, int gen0, int D, float a, float s, int noised)
{
    int r = blockIdx.x, b = r / L, t = r % L;
    if (t >= gen0)
        return;
    size_t at = (size_t)r * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        if (t < pad[b]) {
            z[at + i] = 0;
            xsc[at + i] = 0;
            continue;
        }
        float e = __bfloat162float(E[(size_t)tok[r] * D + i]);
        z[at + i] = noised ? a * e + s * noise[at + i] : e;
        xsc[at + i] = e;
    }
}

__global__ void k_euler(float *z, const float *x0, size_t n, float as, float ratio, float at)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        z[e] = as * x0[e] + ratio * (z[e] - at * x0[e]);
}

__global__ void k_heun1(const float *z, const float *x0, float *e1, float *y2, size_t n, float at, float rt, float rs,
                        float as)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        float y = z[e] / at;
        e1[e] = (y - x0[e]) / rt;
        y2[e] = as * (y + (rs - rt) * e1[e]);
    }
}

__global__ void k_heun2(float *z, const float *y2, const float *x0, const float *e1, size_t n, float at, float as,
                        float rt, float rs)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        float y = z[e] / at, e2 = (y2[e] / as - x0[e]) / rs;
        z[e] = as * (y + (rs - rt) * (e1[e] + e2) / 2);
    }
}

// tb_flow_gaussian (flow_sampler.c) on the device: canvas blockIdx.y's n
// numbers from stream state st[blockIdx.y], pair i from the splitmix64
// outputs 2i + 1 and 2i + 2 (output k mixes state + k golden: no chain),
// in double as the host computes them (log, sqrt, cos, sin, then rounded
// to float: equal to the host's but where the two libraries' last double
// bits differ across a float rounding boundary)
__global__ void k_gaussian(float *x, const uint64_t *st, size_t n)
{
    const uint64_t golden = 0x9E3779B97F4A7C15ULL;
    float *xb = x + blockIdx.y * n;
    uint64_t s0 = st[blockIdx.y];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; 2 * i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t w[2];
        for (int k = 0; k < 2; k++) {
            uint64_t z = s0 + golden * (2 * i + 1 + k);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            w[k] = z ^ (z >> 31);
        }
        double u1 = ((double)(w[0] >> 11) + 1) / 9007199254740993.0, u2 = (double)(w[1] >> 11) / 9007199254740992.0;
        double r = sqrt(-2 * log(u1)), a = 2 * 3.14159265358979323846 * u2;
        xb[2 * i] = (float)(r * cos(a));
        if (2 * i + 1 < n)
            xb[2 * i + 1] = (float)(r * sin(a));
    }
}

// ------------------------------------------------------------- host side

// y[rows][out] (beta)= alpha x[rows][in] W[out][in]^T, x with row stride ldx,
// W with row stride ldw.
static int gemm_nt(tb_flow_gpu *g, float *y, const bf16 *x, int ldx, const bf16 *W, int ldw, int rows, int out, int in,
                   float alpha, float beta)
{
    CB(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, W, CUDA_R_16BF, ldw, x, CUDA_R_16BF, ldx,
                    &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    g->flops += 2.0 * rows * out * in;
    g->bytes += 2.0 * out * in; // W, bf16, read once
    return 0;
}

static int upload(tb_flow_gpu *g, bf16 **dst, const float *src, size_t n)
{
    float *stage;
    if (dalloc(g, (void **)dst, n * sizeof(bf16)) || dalloc(g, (void **)&stage, n * sizeof(float)))
        return -1;
    CK(cudaMemcpyAsync(stage, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    k_f32_to_bf16<<<grid_for(n), 256, 0, g->stream>>>(stage, *dst, n);
    LAUNCHED();
    CK(cudaStreamSynchronize(g->stream));
    cudaFree(stage);
    g->held -= n * sizeof(float);
    return 0;
}

static int upload_f32(tb_flow_gpu *g, float **dst, const float *src, size_t n)
{
    if (dalloc(g, (void **)dst, n * sizeof(float)))
        return -1;
    CK(cudaMemcpyAsync(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    return 0;
}

static int rand_bf16(tb_flow_gpu *g, bf16 **dst, size_t n, uint64_t *seed, float a)
{
    if (dalloc(g, (void **)dst, n * sizeof(bf16)))
        return -1;
    k_init_uniform<<<grid_for(n), 256, 0, g->stream>>>(*dst, n, (*seed += 0x9E3779B97F4A7C15ULL), a);
    LAUNCHED();
    return 0;
}

static int rand_f32(tb_flow_gpu *g, float **dst, size_t n, uint64_t *seed, float a, float base)
{
    if (dalloc(g, (void **)dst, n * sizeof(float)))
        return -1;
    if (a == 0) {
        k_fill<<<grid_for(n), 256, 0, g->stream>>>(*dst, base, n);
    } else {
        k_init_f32<<<grid_for(n), 256, 0, g->stream>>>(*dst, n, (*seed += 0x9E3779B97F4A7C15ULL), a);
    }
    LAUNCHED();
    return 0;
}

// The preset's shapes (flow_model.c's presets) without its host arena.
static int preset_config(const char *name, tb_flow_config *c, tb_flow_gpu *g)
{
    tb_flow_model tiny;
    char err[256];
    // the config of a preset is cheap to get from the CPU preset only when
    // its arena is small; the shapes are repeated here for the large ones
    memset(c, 0, sizeof *c);
    if (strcmp(name, "flow-8b") == 0 || strcmp(name, "langflow-owt") == 0) {
        int big = strcmp(name, "flow-8b") == 0;
        c->vocab = big ? 128256 : 50257;
        c->hidden = big ? 4096 : 768;
        c->cond_dim = big ? 256 : 128;
        c->n_blocks = big ? 32 : 12;
        c->n_heads = big ? 32 : 12;
        c->model_length = big ? 2048 : 1024;
        snprintf(c->arch_name, sizeof c->arch_name, "LangFlow");
        c->head_dim = c->hidden / c->n_heads;
        c->mlp_dim = 4 * c->hidden;
        c->freq_dim = 256;
        c->time_max_period = 10000, c->rope_theta = 10000, c->norm_eps = 1e-5, c->t_eps = 1e-5;
        c->self_conditioning = c->use_bias = c->normalized_embedding = 1;
        c->gumbel_loc = 4.5, c->gumbel_scale = 2.0, c->gumbel_cutoff = 1e-3;
        c->eos_token_id = -1;
        c->random_weights = 1;
        return 0;
    }
    if (tb_flow_model_preset(name, 1, &tiny, err, sizeof err) != 0)
        return fail(g, "%s", err);
    *c = tiny.cfg;
    tb_flow_model_free(&tiny);
    return 0;
}

extern "C" int tb_flow_gpu_create(tb_flow_gpu **out, const tb_flow_model *cpu, const char *preset, uint64_t seed,
                                  char *err, size_t err_size)
{
    kprof_paused loading; // a load is not in TB_GPU_KERNEL_PROFILE's table
    *out = NULL;
    tb_flow_gpu *g = (tb_flow_gpu *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_size, "out of host memory");
        return -1;
    }
    int rc = 0;
    if (cudaGetDeviceProperties(&g->prop, 0) != cudaSuccess || cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
        (void)cudaGetLastError();
        snprintf(err, err_size, "no usable CUDA device");
        free(g);
        return -1;
    }
    cublasSetStream(g->blas, g->stream);
    rc = dalloc(g, &g->ws, 64u << 20);
    if (rc == 0)
        cublasSetWorkspace(g->blas, g->ws, 64u << 20);
    if (rc == 0 && cpu)
        g->cfg = cpu->cfg;
    else if (rc == 0)
        rc = preset_config(preset, &g->cfg, g);
    const tb_flow_config *c = &g->cfg;
    size_t D = c->hidden, V = c->vocab, C = c->cond_dim, F = c->mlp_dim, Fq = c->freq_dim;
    // the one-kernel attention where the engine has it for this head_dim
    // (TB_GPU_SPAN_ATTN=0: the batched GEMMs, as the engine's own spans)
    const char *span_env = getenv("TB_GPU_SPAN_ATTN");
    g->span_fused = rc == 0 && !(span_env && atoi(span_env) == 0) &&
                    tbgpu::attn_span_rows_ready(c->head_dim, g->prop.sharedMemPerBlockOptin) == cudaSuccess;
    g->blocks = rc == 0 ? (fblock *)calloc(c->n_blocks, sizeof *g->blocks) : NULL;
    g->t_w1 = (float *)malloc(C * Fq * sizeof(float));
    g->t_b1 = (float *)malloc(C * sizeof(float));
    g->t_w2 = (float *)malloc(C * C * sizeof(float));
    g->t_b2 = (float *)malloc(C * sizeof(float));
    float *invf = (float *)malloc((size_t)c->head_dim / 2 * sizeof(float) + 1);
    if (rc == 0 && (!g->blocks || !g->t_w1 || !g->t_b1 || !g->t_w2 || !g->t_b2 || !invf))
        rc = fail(g, "out of host memory");
    for (int i = 0; rc == 0 && i < c->head_dim / 2; i++)
        invf[i] = (float)(1.0 / pow(c->rope_theta, (double)(2 * i) / c->head_dim));
    if (rc == 0)
        rc = upload_f32(g, &g->inv_freq, invf, (size_t)c->head_dim / 2);
    free(invf);
    if (rc == 0 && cpu) {
        memcpy(g->t_w1, cpu->t_w1, C * Fq * sizeof(float));
        memcpy(g->t_b1, cpu->t_b1, C * sizeof(float));
        memcpy(g->t_w2, cpu->t_w2, C * C * sizeof(float));
        memcpy(g->t_b2, cpu->t_b2, C * sizeof(float));
        rc = upload(g, &g->E, cpu->embed, V * D) || upload(g, &g->w_out, cpu->w_out, V * D) ||
             upload_f32(g, &g->b_out, cpu->b_out, V) || upload_f32(g, &g->norm_f, cpu->norm_f, D) ||
             upload(g, &g->fada_w, cpu->fada_w, 2 * D * C) || upload_f32(g, &g->fada_b, cpu->fada_b, 2 * D) ||
             (c->self_conditioning && upload(g, &g->sc_w, cpu->sc_w, D * 2 * D));
        for (int l = 0; rc == 0 && l < c->n_blocks; l++) {
            const tb_flow_block *s = &cpu->blocks[l];
            fblock *b = &g->blocks[l];
            rc = upload_f32(g, &b->norm1, s->norm1, D) || upload_f32(g, &b->norm2, s->norm2, D) ||
                 upload(g, &b->wqkv, s->wqkv, 3 * D * D) || upload(g, &b->wo, s->wo, D * D) ||
                 upload(g, &b->w_up, s->w_up, F * D) || upload_f32(g, &b->b_up, s->b_up, F) ||
                 upload(g, &b->w_down, s->w_down, D * F) || upload_f32(g, &b->b_down, s->b_down, D) ||
                 upload(g, &b->ada_w, s->ada_w, 6 * D * C) || upload_f32(g, &b->ada_b, s->ada_b, 6 * D);
        }
        g->n_params = cpu->n_params;
    } else if (rc == 0) {
        // random weights as flow_model.c's presets scale them, made here
        uint64_t s = seed ^ 0x5DEECE66DULL, hs = s;
        float kd = 1.0f / sqrtf((float)D), kf = 1.0f / sqrtf((float)F), kc = 1.0f / sqrtf((float)C);
        for (size_t i = 0; i < C * Fq; i++)
            g->t_w1[i] = (float)((double)((hs = hs * 6364136223846793005ULL + 1) >> 11) / 9007199254740992.0 * 2 - 1) /
                         sqrtf((float)Fq);
        for (size_t i = 0; i < C * C; i++)
            g->t_w2[i] = (float)((double)((hs = hs * 6364136223846793005ULL + 1) >> 11) / 9007199254740992.0 * 2 - 1) * kc;
        for (size_t i = 0; i < C; i++)
            g->t_b1[i] = g->t_b2[i] = 0;
        rc = rand_bf16(g, &g->E, V * D, &s, 1.0f) || rand_bf16(g, &g->w_out, V * D, &s, kd) ||
             rand_f32(g, &g->b_out, V, &s, 0.1f, 0) || rand_f32(g, &g->norm_f, D, &s, 0, 1.0f) ||
             rand_bf16(g, &g->fada_w, 2 * D * C, &s, 0.1f * kc) || rand_f32(g, &g->fada_b, 2 * D, &s, 0.1f, 0) ||
             rand_bf16(g, &g->sc_w, D * 2 * D, &s, 0.1f * kd);
        for (int l = 0; rc == 0 && l < c->n_blocks; l++) {
            fblock *b = &g->blocks[l];
            rc = rand_f32(g, &b->norm1, D, &s, 0, 1.0f) || rand_f32(g, &b->norm2, D, &s, 0, 1.0f) ||
                 rand_bf16(g, &b->wqkv, 3 * D * D, &s, kd) || rand_bf16(g, &b->wo, D * D, &s, kd) ||
                 rand_bf16(g, &b->w_up, F * D, &s, kd) || rand_f32(g, &b->b_up, F, &s, 0.1f, 0) ||
                 rand_bf16(g, &b->w_down, D * F, &s, kf) || rand_f32(g, &b->b_down, D, &s, 0.1f, 0) ||
                 rand_bf16(g, &b->ada_w, 6 * D * C, &s, 0.1f * kc) || rand_f32(g, &b->ada_b, 6 * D, &s, 0.1f, 0);
        }
        if (rc == 0) {
            k_norm_rows<<<(unsigned)V, 256, 0, g->stream>>>(g->E, (int)D);
            if (cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(g->stream) != cudaSuccess)
                rc = fail(g, "random weights: %s", cudaGetErrorString(cudaGetLastError()));
        }
        g->n_params = (int64_t)(V * D * 2 + V + C * Fq + C * C + 2 * C + D * 2 * D + D + 2 * D * C + 2 * D +
                                (size_t)c->n_blocks * (2 * D + 4 * D * D + 2 * F * D + F + D + 6 * D * C + 6 * D));
    }
    if (rc != 0) {
        snprintf(err, err_size, "%s", g->error);
        tb_flow_gpu_free(g);
        return -1;
    }
    char what[384];
    snprintf(what, sizeof what, "%.60s on %.256s", g->cfg.arch_name, g->prop.name);
    g->kprof = tb_gpu_kprof_begin(what);
    *out = g;
    return 0;
}

static void free_buffers(tb_flow_gpu *g)
{
    void *bufs[] = {g->z, g->xsc, g->x0, g->y2, g->e1, g->noise, g->x, g->y, g->qkv, g->logits, g->scores, g->mod,
                    g->cond, g->zb, g->xb, g->h, g->q, g->k, g->v, g->o, g->att, g->u, g->probs, g->pr, g->condb,
                    g->tok, g->out_tok, g->pad, g->noise_states};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            cudaFree(bufs[i]);
    g->z = g->xsc = g->x0 = g->y2 = g->e1 = g->noise = g->x = g->y = g->qkv = g->logits = g->scores = g->mod = NULL;
    g->cond = NULL;
    g->zb = g->xb = g->h = g->q = g->k = g->v = g->o = g->att = g->u = g->probs = g->pr = g->condb = NULL;
    g->tok = g->out_tok = NULL;
    g->pad = NULL;
    g->noise_states = NULL;
    g->cap_rows = g->cap_B = g->cap_L = 0;
    g->held -= g->buf_bytes;
    g->buf_bytes = 0;
}

extern "C" void tb_flow_gpu_free(tb_flow_gpu *g)
{
    if (!g)
        return;
    if (g->kprof)
        tb_gpu_kprof_end();
    free_buffers(g);
    // weights: the process ends soon after (a worker), but a test creates
    // several contexts: free what was allocated
    void *w[] = {g->E, g->w_out, g->sc_w, g->fada_w, g->b_out, g->norm_f, g->fada_b, g->inv_freq, g->ws};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (w[i])
            cudaFree(w[i]);
    for (int l = 0; g->blocks && l < g->cfg.n_blocks; l++) {
        fblock *b = &g->blocks[l];
        void *p[] = {b->norm1, b->norm2, b->b_up, b->b_down, b->ada_b, b->wqkv, b->wo, b->w_up, b->w_down, b->ada_w};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            if (p[i])
                cudaFree(p[i]);
    }
    free(g->blocks);
    free(g->t_w1);
    free(g->t_b1);
    free(g->t_w2);
    free(g->t_b2);
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g);
}

extern "C" const tb_flow_config *tb_flow_gpu_config(const tb_flow_gpu *g) { return &g->cfg; }
extern "C" int64_t tb_flow_gpu_params(const tb_flow_gpu *g) { return g->n_params; }
extern "C" const char *tb_flow_gpu_device_name(const tb_flow_gpu *g) { return g->prop.name; }
extern "C" const char *tb_flow_gpu_error(const tb_flow_gpu *g) { return g->error; }

extern "C" int tb_flow_gpu_noise(tb_flow_gpu *g, const uint64_t *states, int B, size_t n, float *out)
{
    float *x = NULL;
    uint64_t *st = NULL;
    int rc = -1;
    if (B < 1 || B > 65535 || cudaMalloc((void **)&x, (size_t)B * n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&st, (size_t)B * sizeof(uint64_t)) != cudaSuccess) {
        (void)cudaGetLastError();
        fail(g, "flow noise: no room for %d x %zu", B, n);
    } else if (cudaMemcpyAsync(st, states, (size_t)B * sizeof(uint64_t), cudaMemcpyHostToDevice, g->stream) !=
               cudaSuccess) { // (on g's stream: the legacy one would not order it before the kernel)
        fail(g, "flow noise: upload: %s", cudaGetErrorString(cudaGetLastError()));
    } else {
        k_gaussian<<<dim3(grid_for(n / 2 + 1), (unsigned)B), 256, 0, g->stream>>>(x, st, n);
        if (cudaGetLastError() != cudaSuccess ||
            cudaMemcpyAsync(out, x, (size_t)B * n * sizeof(float), cudaMemcpyDeviceToHost, g->stream) != cudaSuccess ||
            cudaStreamSynchronize(g->stream) != cudaSuccess)
            fail(g, "flow noise: %s", cudaGetErrorString(cudaGetLastError()));
        else
            rc = 0;
    }
    cudaFree(x);
    cudaFree(st);
    return rc;
}

extern "C" int tb_flow_gpu_set_fused_attention(tb_flow_gpu *g, int fused)
{
    if (fused && tbgpu::attn_span_rows_ready(g->cfg.head_dim, g->prop.sharedMemPerBlockOptin) != cudaSuccess)
        return fail(g, "no one-kernel attention for head_dim %d on this device", g->cfg.head_dim);
    if ((fused != 0) != (g->span_fused != 0))
        free_buffers(g); // the batched path's buffers come and go with it (reserve)
    g->span_fused = fused != 0;
    return 0;
}

extern "C" int tb_flow_gpu_ceilings(tb_flow_gpu *g, double *peak_flops, double *peak_bytes_per_s)
{
    return tb_gpu_device_ceilings(g->stream, g->blas, peak_flops, peak_bytes_per_s, g->error, sizeof g->error);
}

static int reserve(tb_flow_gpu *g, int B, int L)
{
    if (B <= g->cap_B && L <= g->cap_L)
        return 0;
    free_buffers(g);
    size_t before = g->held;
    const tb_flow_config *c = &g->cfg;
    size_t R = (size_t)B * L, D = c->hidden, V = c->vocab, F = c->mlp_dim, H = c->n_heads;
    size_t fl = sizeof(float), hb = sizeof(bf16);
    // the batched attention's scores, probabilities and per-head output:
    // only where that path may run (forward's `fused` false)
    bool batched = !g->span_fused || c->prompt_attends_prompt;
    int rc = dalloc(g, (void **)&g->z, R * D * fl) || dalloc(g, (void **)&g->xsc, R * D * fl) ||
             dalloc(g, (void **)&g->x0, R * D * fl) || dalloc(g, (void **)&g->y2, R * D * fl) ||
             dalloc(g, (void **)&g->e1, R * D * fl) || dalloc(g, (void **)&g->noise, R * D * fl) ||
             dalloc(g, (void **)&g->x, R * D * fl) || dalloc(g, (void **)&g->y, R * (F > 3 * D ? F : 3 * D) * fl) ||
             dalloc(g, (void **)&g->qkv, R * 3 * D * fl) || dalloc(g, (void **)&g->logits, R * V * fl) ||
             (batched && dalloc(g, (void **)&g->scores, (size_t)B * H * L * L * fl)) ||
             dalloc(g, (void **)&g->mod, 2 * 6 * D * fl) || dalloc(g, (void **)&g->cond, 2 * (size_t)c->cond_dim * fl) ||
             dalloc(g, (void **)&g->zb, R * D * hb) || dalloc(g, (void **)&g->xb, R * D * hb) ||
             dalloc(g, (void **)&g->h, R * D * hb) || dalloc(g, (void **)&g->q, R * D * hb) ||
             dalloc(g, (void **)&g->k, R * D * hb) || dalloc(g, (void **)&g->v, R * D * hb) ||
             (batched && dalloc(g, (void **)&g->o, R * D * hb)) || dalloc(g, (void **)&g->att, R * D * hb) ||
             dalloc(g, (void **)&g->u, R * F * hb) || dalloc(g, (void **)&g->probs, R * V * hb) ||
             (batched && dalloc(g, (void **)&g->pr, (size_t)B * H * L * L * hb)) ||
             dalloc(g, (void **)&g->condb, 2 * (size_t)c->cond_dim * hb) ||
             dalloc(g, (void **)&g->tok, R * sizeof(int32_t)) || dalloc(g, (void **)&g->out_tok, R * sizeof(int32_t)) ||
             dalloc(g, (void **)&g->pad, (size_t)B * sizeof(int)) ||
             dalloc(g, (void **)&g->noise_states, (size_t)B * sizeof(uint64_t));
    g->buf_bytes = g->held - before;
    if (rc) {
        free_buffers(g);
        return -1;
    }
    g->cap_B = B, g->cap_L = L, g->cap_rows = (int)R;
    return 0;
}

// The time condition of noise level gamma into host cond[C] (flow_cpu.c).
static void time_cond(const tb_flow_gpu *g, double gamma, float *cond)
{
    const tb_flow_config *c = &g->cfg;
    int half = c->freq_dim / 2, C = c->cond_dim;
    float tf[65536], hb[4096];
    for (int k = 0; k < half; k++) {
        float w = (float)exp(-log(c->time_max_period) * k / half), a = (float)gamma * w;
        tf[k] = cosf(a);
        tf[half + k] = sinf(a);
    }
    for (int o = 0; o < C; o++) {
        float s = g->t_b1[o];
        for (int i = 0; i < c->freq_dim; i++)
            s += g->t_w1[(size_t)o * c->freq_dim + i] * tf[i];
        hb[o] = s / (1.0f + expf(-s));
    }
    for (int o = 0; o < C; o++) {
        float s = g->t_b2[o];
        for (int i = 0; i < C; i++)
            s += g->t_w2[(size_t)o * C + i] * hb[i];
        cond[o] = s / (1.0f + expf(-s));
    }
}

// alpha / sigma^2 of level gamma: the skip term's scale
static float skip_scale(double gamma)
{
    double sp = gamma < 0 ? log1p(exp(gamma)) - gamma : log1p(exp(-gamma)); // softplus(-gamma)
    return (float)exp((sp - gamma) / 2);
}

// logits (g->logits) of f(zz, gamma, g->xsc) for B canvases of L rows;
// positions [0, gen0) are the prompt (at the schedule's lowest level when
// the model says prompt_gamma min: flow_cpu.h).
static int forward(tb_flow_gpu *g, const float *zz, double gamma, int B, int L, int gen0)
{
    const tb_flow_config *c = &g->cfg;
    int D = c->hidden, C = c->cond_dim, V = c->vocab, F = c->mlp_dim, H = c->n_heads, hd = c->head_dim;
    int R = B * L;
    size_t n = (size_t)R * D;
    // the conditions, the same for every canvas (one gamma a step): row 0
    // at gamma, row 1 (when prompt rows have their own level) at gamma_min
    int gp = c->prompt_gamma_min ? gen0 : 0, nc = gp > 0 ? 2 : 1;
    double gmin = tb_flow_gamma_min(c);
    static float condh[2 * 4096];
    time_cond(g, gamma, condh);
    if (nc == 2)
        time_cond(g, gmin, condh + C);
    CK(cudaMemcpyAsync(g->cond, condh, (size_t)nc * C * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    CK(cudaStreamSynchronize(g->stream)); // condh is reused by the next call
    k_f32_to_bf16<<<grid_for((size_t)nc * C), 256, 0, g->stream>>>(g->cond, g->condb, (size_t)nc * C);
    k_f32_to_bf16<<<grid_for(n), 256, 0, g->stream>>>(zz, g->zb, n);
    k_f32_to_bf16<<<grid_for(n), 256, 0, g->stream>>>(g->xsc, g->xb, n);
    LAUNCHED();
    // x = z + W_sc [z ; x_sc]
    CK(cudaMemcpyAsync(g->x, zz, n * sizeof(float), cudaMemcpyDeviceToDevice, g->stream));
    if (c->self_conditioning &&
        (gemm_nt(g, g->x, g->zb, D, g->sc_w, 2 * D, R, D, D, 1, 1) ||
         gemm_nt(g, g->x, g->xb, D, g->sc_w + D, 2 * D, R, D, D, 1, 1)))
        return -1;
    float alpha = 1.0f / sqrtf((float)hd), one = 1.0f, zero = 0.0f;
    // the one-kernel attention, unless prompt rows see only the prompt
    // (a mask it does not have)
    bool fused = g->span_fused && !(c->prompt_attends_prompt && gen0 > 0);
    for (int l = 0; l < c->n_blocks; l++) {
        fblock *bl = &g->blocks[l];
        // modulation [nc][6D] = cond W_ada^T + b_ada
        if (gemm_nt(g, g->mod, g->condb, C, bl->ada_w, C, nc, 6 * D, C, 1, 0))
            return -1;
        k_add_rowbias<<<grid_for((size_t)nc * 6 * D), 256, 0, g->stream>>>(g->mod, bl->ada_b, 6 * D, (size_t)nc * 6 * D);
        k_ln_mod<<<R, 256, 0, g->stream>>>(g->x, bl->norm1, g->mod, 6 * D, 0, D, L, gp, D, (float)c->norm_eps, g->h);
        LAUNCHED();
        if (gemm_nt(g, g->qkv, g->h, D, bl->wqkv, D, R, 3 * D, D, 1, 0))
            return -1;
        if (fused) { // softmax(Q K^T / sqrt(hd)) V in one kernel, straight into att [R][D]
            k_rope_split<<<dim3(R, H), 64, 0, g->stream>>>(g->qkv, g->inv_freq, g->pad, L, H, hd, 0, g->q, g->k, g->v);
            LAUNCHED();
            CK(tbgpu::attn_span_rows(g->stream, g->q, g->k, g->v, g->att, B, L, L, 0, 0, g->pad, 0, H, H, L, hd));
        } else {
            k_rope_split<<<dim3(R, H), 64, 0, g->stream>>>(g->qkv, g->inv_freq, g->pad, L, H, hd, 1, g->q, g->k, g->v);
            LAUNCHED();
            // S = Q K^T / sqrt(hd) per (canvas, head): column-major K^T Q
            long long sq = (long long)L * hd, ss = (long long)L * L;
            CB(cublasGemmStridedBatchedEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, L, L, hd, &alpha, g->k, CUDA_R_16BF, hd,
                                          sq, g->q, CUDA_R_16BF, hd, sq, &zero, g->scores, CUDA_R_32F, L, ss, B * H,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            if (c->prompt_attends_prompt && gen0 > 0) {
                k_mask_prompt_rows<<<dim3((unsigned)(B * H), (unsigned)gen0), 128, 0, g->stream>>>(g->scores, L, gen0);
                LAUNCHED();
            }
            k_softmax<<<(unsigned)((size_t)B * H * L), 256, 0, g->stream>>>(g->scores, g->pr, L, L, 0, 0, g->pad, H);
            LAUNCHED();
            // O = P V
            CB(cublasGemmStridedBatchedEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, L, L, &one, g->v, CUDA_R_16BF, hd,
                                          sq, g->pr, CUDA_R_16BF, L, ss, &zero, g->o, CUDA_R_16BF, hd, sq, B * H,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            k_merge_heads<<<dim3(R, H), 64, 0, g->stream>>>(g->o, L, H, hd, g->att);
            LAUNCHED();
        }
        g->flops += 4.0 * B * H * (double)L * L * hd;
        g->bytes += 2.0 * 2 * 2 * (double)R * D; // K and V (bf16), written by k_rope_split, read here
        if (gemm_nt(g, g->y, g->att, D, bl->wo, D, R, D, D, 1, 0))
            return -1;
        k_gate_add<<<grid_for(D % 4 ? n : n / 4), 256, 0, g->stream>>>(g->x, g->y, NULL, g->mod, 6 * D, 2 * D, L, gp, D,
                                                                      n);
        k_ln_mod<<<R, 256, 0, g->stream>>>(g->x, bl->norm2, g->mod, 6 * D, 3 * D, 4 * D, L, gp, D, (float)c->norm_eps,
                                           g->h);
        LAUNCHED();
        if (gemm_nt(g, g->y, g->h, D, bl->w_up, D, R, F, D, 1, 0))
            return -1;
        k_bias_gelu<<<grid_for((size_t)R * F / (F % 4 ? 1 : 4)), 256, 0, g->stream>>>(g->y, bl->b_up, F, (size_t)R * F,
                                                                                     g->u);
        LAUNCHED();
        if (gemm_nt(g, g->y, g->u, F, bl->w_down, F, R, D, F, 1, 0))
            return -1;
        k_gate_add<<<grid_for(D % 4 ? n : n / 4), 256, 0, g->stream>>>(g->x, g->y, bl->b_down, g->mod, 6 * D, 5 * D, L,
                                                                      gp, D, n);
        LAUNCHED();
    }
    // output layer
    if (gemm_nt(g, g->mod, g->condb, C, g->fada_w, C, nc, 2 * D, C, 1, 0))
        return -1;
    k_add_rowbias<<<grid_for((size_t)nc * 2 * D), 256, 0, g->stream>>>(g->mod, g->fada_b, 2 * D, (size_t)nc * 2 * D);
    k_ln_mod<<<R, 256, 0, g->stream>>>(g->x, g->norm_f, g->mod, 2 * D, 0, D, L, gp, D, (float)c->norm_eps, g->h);
    LAUNCHED();
    if (gemm_nt(g, g->logits, g->h, D, g->w_out, D, R, V, D, 1, 0))
        return -1;
    k_add_rowbias<<<grid_for((size_t)R * V), 256, 0, g->stream>>>(g->logits, g->b_out, V, (size_t)R * V);
    LAUNCHED();
    if (c->use_bias && gp == 0) { // + (alpha / sigma^2) z E^T
        if (gemm_nt(g, g->logits, g->zb, D, g->E, D, R, V, D, skip_scale(gamma), 1))
            return -1;
    } else if (c->use_bias) // each canvas: its prompt rows at gamma_min, the rest at gamma
        for (int b = 0; b < B; b++)
            if (gemm_nt(g, g->logits + (size_t)b * L * V, g->zb + (size_t)b * L * D, D, g->E, D, gp, V, D,
                        skip_scale(gmin), 1) ||
                gemm_nt(g, g->logits + ((size_t)b * L + gp) * V, g->zb + ((size_t)b * L + gp) * D, D, g->E, D, L - gp,
                        V, D, skip_scale(gamma), 1))
                return -1;
    return 0;
}

// x0 = softmax(logits) E
static int readout(tb_flow_gpu *g, int R)
{
    const tb_flow_config *c = &g->cfg;
    int D = c->hidden, V = c->vocab;
    k_softmax_rows<<<R, 1024, 0, g->stream>>>(g->logits, V, g->probs);
    LAUNCHED();
    float one = 1.0f, zero = 0.0f;
    CB(cublasGemmEx(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, D, R, V, &one, g->E, CUDA_R_16BF, D, g->probs, CUDA_R_16BF, V,
                    &zero, g->x0, CUDA_R_32F, D, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    g->flops += 2.0 * R * V * D;
    g->bytes += 2.0 * V * D; // E, bf16
    return 0;
}

static int set_prompt(tb_flow_gpu *g, const tb_flow_params *p, float *zz, double gamma, int R, int L, int gen0)
{
    double a = sqrt(1 / (1 + exp(gamma))), s = sqrt(1 / (1 + exp(-gamma)));
    k_set_prompt<<<R, 256, 0, g->stream>>>(zz, g->xsc, g->tok, g->pad, g->E, g->noise, L, gen0, g->cfg.hidden, (float)a,
                                           (float)s, p->prompt == TB_FLOW_PROMPT_NOISED);
    LAUNCHED();
    return 0;
}

extern "C" int tb_flow_gpu_sample(tb_flow_gpu *g, const tb_flow_params *p, int32_t *tokens, const int *pad, int B,
                                  int L, int gen0, const float *noise, const uint64_t *noise_states, int *forwards,
                                  tb_flow_progress progress,
                                  void *progress_ctx, float *final_logits, int64_t *peak_bytes, double *flops,
                                  double *bytes)
{
    const tb_flow_config *c = &g->cfg;
    int N = p->steps, D = c->hidden, V = c->vocab;
    *forwards = 0;
    g->flops = g->bytes = 0;
    g->peak = g->held;
    if (N < 1 || gen0 < 0 || gen0 >= L || B < 1 || B > 65535)
        return fail(g, "flow sample: steps %d, canvas %d from %d, batch %d", N, L, gen0, B);
    if (!noise == !noise_states)
        return fail(g, "flow sample: give the noise or its stream states, one of them");
    if (reserve(g, B, L))
        return -1;
    size_t R = (size_t)B * L, n = R * D;
    int *padz = (int *)calloc((size_t)B, sizeof(int));
    double *gs = (double *)malloc((size_t)N * sizeof(double));
    if (!padz || !gs) {
        free(padz);
        free(gs);
        return fail(g, "out of host memory");
    }
    tb_flow_schedule(c, N, gs);
    int rc = 0;
#define TRY(x)                                                                                                     \
    do {                                                                                                           \
        if (rc == 0 && (x))                                                                                        \
            rc = -1;                                                                                               \
    } while (0)
    TRY(cudaMemcpyAsync(g->tok, tokens, R * sizeof(int32_t), cudaMemcpyHostToDevice, g->stream) != cudaSuccess);
    TRY(cudaMemcpyAsync(g->pad, pad ? pad : padz, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, g->stream) !=
        cudaSuccess);
    if (noise) {
        TRY(cudaMemcpyAsync(g->noise, noise, n * sizeof(float), cudaMemcpyHostToDevice, g->stream) != cudaSuccess);
    } else {
        TRY(cudaMemcpyAsync(g->noise_states, noise_states, (size_t)B * sizeof(uint64_t), cudaMemcpyHostToDevice,
                            g->stream) != cudaSuccess);
        k_gaussian<<<dim3(grid_for((size_t)L * D / 2), (unsigned)B), 256, 0, g->stream>>>(g->noise, g->noise_states,
                                                                                          (size_t)L * D);
        TRY(cudaGetLastError() != cudaSuccess);
    }
    TRY(cudaMemcpyAsync(g->z, g->noise, n * sizeof(float), cudaMemcpyDeviceToDevice, g->stream) != cudaSuccess);
    TRY(cudaMemsetAsync(g->xsc, 0, n * sizeof(float), g->stream) != cudaSuccess);
    if (rc)
        fail(g, "upload: %s", cudaGetErrorString(cudaGetLastError()));
#define FORWARD(zz, gamma)                                                                                         \
    do {                                                                                                           \
        TRY(forward(g, zz, gamma, B, L, gen0));                                                                          \
        if (rc == 0) {                                                                                             \
            ++*forwards;                                                                                           \
            if (progress && progress(progress_ctx, *forwards - 1) != 0)                                            \
                rc = fail(g, "stopped after %d forwards", *forwards);                                             \
        }                                                                                                          \
    } while (0)
    for (int i = 0; rc == 0 && i + 1 < N; i++) {
        double t = gs[i], s = gs[i + 1];
        double at = sqrt(1 / (1 + exp(t))), st = sqrt(1 / (1 + exp(-t)));
        double as = sqrt(1 / (1 + exp(s))), ss = sqrt(1 / (1 + exp(-s)));
        TRY(set_prompt(g, p, g->z, t, (int)R, L, gen0));
        FORWARD(g->z, t);
        TRY(readout(g, (int)R));
        if (rc)
            break;
        if (p->solver == TB_FLOW_EULER) {
            k_euler<<<grid_for(n), 256, 0, g->stream>>>(g->z, g->x0, n, (float)as, (float)(ss / st), (float)at);
            TRY(cudaMemcpyAsync(g->xsc, g->x0, n * sizeof(float), cudaMemcpyDeviceToDevice, g->stream) != cudaSuccess);
            continue;
        }
        double rt = st / at, rs = ss / as;
        k_heun1<<<grid_for(n), 256, 0, g->stream>>>(g->z, g->x0, g->e1, g->y2, n, (float)at, (float)rt, (float)rs,
                                                    (float)as);
        TRY(cudaMemcpyAsync(g->xsc, g->x0, n * sizeof(float), cudaMemcpyDeviceToDevice, g->stream) != cudaSuccess);
        TRY(set_prompt(g, p, g->y2, s, (int)R, L, gen0));
        FORWARD(g->y2, s);
        TRY(readout(g, (int)R));
        if (rc)
            break;
        k_heun2<<<grid_for(n), 256, 0, g->stream>>>(g->z, g->y2, g->x0, g->e1, n, (float)at, (float)as, (float)rt,
                                                    (float)rs);
        TRY(cudaMemcpyAsync(g->xsc, g->x0, n * sizeof(float), cudaMemcpyDeviceToDevice, g->stream) != cudaSuccess);
    }
    if (rc == 0) {
        TRY(set_prompt(g, p, g->z, gs[N - 1], (int)R, L, gen0));
        FORWARD(g->z, gs[N - 1]);
    }
#undef FORWARD
    if (rc == 0) {
        k_argmax<<<(unsigned)R, 1024, 0, g->stream>>>(g->logits, V, V, g->out_tok);
        int32_t *out = (int32_t *)malloc(R * sizeof(int32_t));
        TRY(!out);
        TRY(cudaMemcpyAsync(out, g->out_tok, R * sizeof(int32_t), cudaMemcpyDeviceToHost, g->stream) != cudaSuccess);
        if (final_logits)
            TRY(cudaMemcpyAsync(final_logits, g->logits, R * V * sizeof(float), cudaMemcpyDeviceToHost, g->stream) !=
                cudaSuccess);
        TRY(cudaStreamSynchronize(g->stream) != cudaSuccess);
        if (rc == 0)
            for (int b = 0; b < B; b++)
                for (int i = gen0; i < L; i++)
                    tokens[(size_t)b * L + i] = out[(size_t)b * L + i];
        else if (!g->error[0])
            fail(g, "sampling: %s", cudaGetErrorString(cudaGetLastError()));
        free(out);
    }
#undef TRY
    free(padz);
    free(gs);
    if (peak_bytes)
        *peak_bytes = (int64_t)g->peak;
    if (flops)
        *flops = g->flops;
    if (bytes)
        *bytes = g->bytes;
    return rc;
}
