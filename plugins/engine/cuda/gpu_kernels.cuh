// gpu_kernels.cuh — the engine's CUDA kernels (kernels_*.cu), for the
// host code that launches them. What each computes, its grid and its
// layouts are said at its definition; the CPU path (cpu_forward.c) is the
// reference of every one (tests/gpu/).
#ifndef TB_ENGINE_GPU_KERNELS_CUH
#define TB_ENGINE_GPU_KERNELS_CUH

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// Warps of k_attn_decode's blocks (its launch bounds).
#define ATT_WARPS 16
// Split decode attention: warps per block, and the most splits of one
// (sequence, head)'s keys (the partials buffer's size).
#define ATT_SPLIT_WARPS 4
#define ATT_MAX_SPLIT 16
// k_qkv_post: heads per block (a warp each)
#define QKV_POST_WARPS 8
// k_pick_part: the most blocks one picked row is split over
#define PICK_MAX_CHUNKS 64

__global__ void k_init_uniform(bf16 *p, size_t n, uint64_t seed, float a);
__global__ void k_f32_to_bf16(const float *src, bf16 *dst, size_t n);
__global__ void k_embed(const int32_t *tok, const bf16 *emb, float *x, int h);
__global__ void k_rmsnorm(const float *x, int n, int r0, int nr, const float *w, bf16 *y, int h, float eps);
__global__ void __launch_bounds__(QKV_POST_WARPS * 32)
    k_qkv_post(const void *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,
               const float *inv_freq, int n_new, int pos0, const int *d_pos, const int *row_slot, const int *row_pos,
               const int *pad, bf16 *kc, bf16 *vc, int len, bf16 *q_out, int nh, int nkv, int hd, int rd,
               const float *sx, const float *sw);
// qkv: a float product (k_qkv_post) or a bf16 one (k_qkv_post_bf16: gemm_bf16_out's)
__global__ void __launch_bounds__(QKV_POST_WARPS * 32)
    k_qkv_post_bf16(const void *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,
                    const float *inv_freq, int n_new, int pos0, const int *d_pos, const int *row_slot,
                    const int *row_pos, const int *pad, bf16 *kc, bf16 *vc, int len, bf16 *q_out, int nh, int nkv,
                    int hd, int rd, const float *sx, const float *sw);
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attn_decode(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv, int hd,
                  const int *d_pos, int n_keys_fixed, const int *row_slot, const int *row_pos, const int *pad,
                  float scale);
__global__ void __launch_bounds__(ATT_SPLIT_WARPS * 32)
    k_attn_decode_split(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv, int hd,
                        const int *d_pos, const int *row_slot, const int *row_pos, const int *pad, float scale,
                        float *part, unsigned *count);
// k_attn_decode by query group (k_attn_decode_gqa): the kernel for G
// query heads a block (2 or 4, of one K/V head: G divides nh / nkv) and
// head_dim hd (16 .. 256, a power of two), NULL where there is none; its
// arguments (q, kc, vc, out, len, nh, nkv, d_pos, row_slot, row_pos, pad,
// scale) as k_attn_decode's; grid (sequences, nh / G), ATTG_WARPS warps,
// no dynamic shared memory. split: the same over S even parts of the
// keys, grid (sequences, nh / G, S <= ATT_MAX_SPLIT), with
// k_attn_decode_split's partials (part) and counters (count); the whole
// kernel ignores both. attn_decode_heads_a_block: the G for a group of
// `group` query heads a K/V head (4 where 4 divides it, else 2 where 2
// does, else 0: none).
#define ATTG_WARPS 8
typedef void (*attn_gqa_kernel)(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh, int nkv,
                                const int *d_pos, const int *row_slot, const int *row_pos, const int *pad, float scale,
                                float *part, unsigned *count);
attn_gqa_kernel attn_decode_gqa_kernel(int G, int hd, bool split);
// The split kernel that also does k_qkv_post's work for its heads
// (batch-1 decode, TB_GPU_FUSE_ATTN_POST; kernels_attn_decode.cu): the
// same arguments (q unread), then the one row's QKV product and what
// k_qkv_post applies to it, and the layer's cache for the new row.
struct qkv_post_args {
    const float *qkv;                    // [nh + 2 nkv][hd]: the batch-1 GEMV's product, float
    const float *bias, *q_norm, *k_norm; // NULL: none (k_qkv_post's)
    const float *inv_freq;               // [rd / 2]: RoPE's
    float eps;                           // the QK-norm's
    int rd;                              // the rotated dims of a head
    bf16 *kc, *vc;                       // the layer's cache (as kc, vc)
};
typedef void (*attn_gqa_post_kernel)(const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int len, int nh,
                                     int nkv, const int *d_pos, const int *row_slot, const int *row_pos,
                                     const int *pad, float scale, float *part, unsigned *count,
                                     const qkv_post_args pa);
attn_gqa_post_kernel attn_decode_gqa_post_kernel(int G, int hd);
inline int attn_decode_heads_a_block(int group) { return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 0; }
__global__ void k_softmax(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad, int nh);
__global__ void k_softmax_slots(const float *sc, bf16 *p, int n, int n_keys, int pos0, int causal, const int *pad,
                                const int *row_slot, int nh);
__global__ void k_swiglu(const float *gu, bf16 *act, int inter, size_t n, const float *sx, const float *sw);
__global__ void k_argmax(const float *logits, int stride, int V, int32_t *out);
__global__ void k_incr(int *p);
__global__ void k_fp8_quantize_rows(const bf16 *w, int in, uint8_t *q, float *scale);
#define FP8_QUANT_THREADS 512
// dtype = fp8's accumulating products (o, down) of at most this many rows:
// FP8 GEMM without scale vectors, then k_fp8_scale_out (gpu_gemm_fp8.cu
// says why)
#define FP8_SCALAR_ROWS 64
__global__ void k_fp8_scale_out(const float *t, const float *sx, const float *sw, float *y, int rows, int out,
                                float beta);
__global__ void k_fp8_quant_act(const bf16 *x, int in, uint8_t *q, float *scale);
__global__ void k_fp8_dequant(const uint8_t *q, const float *scale, int in, size_t n, bf16 *out);
__global__ void k_pick(const float *logits, int V, int npick, int nr, int off, int shifted, size_t uncond_offset,
                       float cfg, int kind, int never, int32_t *x0, double *conf);
// k_pick's LLaDA kind split over blocks: one chunk's partial
struct pick_part {
    double sum; // sum of exp(logit - mx) over the chunk, float64
    float mx;   // the chunk's largest logit
    int idx;    // its first index
};
__global__ void k_pick_part(const float *logits, int V, int npick, int nr, int off, int shifted,
                            size_t uncond_offset, float cfg, int never, pick_part *part);
__global__ void k_pick_combine(const pick_part *part, int n_picks, int chunks, int32_t *x0, double *conf);

struct tb_gpu;
namespace tbgpu {
// Attention of spans in one kernel, for a caller without a tb_gpu (the
// flow backend): gpu_attn_span.cu's k_attn_span (online softmax, tensor
// cores; its masks are k_softmax's) with its default shape. q, out
// [B][n][nh][hd] bf16; kc, vc [seqs][len][nkv][hd] bf16, span b's keys
// those of sequence slot0 + b, [0, n_attend); pad[slot0 + b] its padding;
// pos0 and causal as k_softmax's. hd 16, 32, 64 or 128.
// attn_span_rows_ready(hd, the device's opt-in shared memory a block)
// sets the kernel's shared memory for the current device once, before
// the first launch; an error where hd has no kernel or the device too
// little shared memory (the caller keeps its own path then).
cudaError_t attn_span_rows_ready(int hd, size_t smem_optin);
cudaError_t attn_span_rows(cudaStream_t s, const bf16 *q, const bf16 *kc, const bf16 *vc, bf16 *out, int B, int n,
                           int n_attend, int pos0, int causal, const int *pad, int slot0, int nh, int nkv, int len,
                           int hd);
// The batch-1 product y[out] (+)= W[out][in] x[in] with GEMV variant
// `variant` (0 .. TB_GPU_GEMV_VARIANTS - 1, gpu.h) on g's stream;
// gemv_variant_for gives the one tb_gpu_bench_gemv found fastest for the
// shape (or the one a test forced).
void gemv(tb_gpu *g, const bf16 *w, const bf16 *x, float *y, int out, int in, float beta, int variant);
int gemv_variant_for(const tb_gpu *g, int out, int in);
// The fused batch-1 GEMV (k_gemv's SWIGLU and NORM_OUT): input x (bf16);
// output y (float, y = beta y + W x), or with act set act[i] =
// bf16(silu(gate_i) up_i) for the out pairs of rows (i, out + i) of W
// [2 out][in]; with xn set (and act not), also xn = bf16(RMSNorm of the
// whole y with weights nw, eps) for the next projection. pdl: a
// programmatic dependent launch (graphs of the decode step). The variant
// is gemv_variant_for's (a split-K one becomes variant 2 under SWIGLU).
// Under dtype = fp8 (q set, w NULL): W's E4M3 codes q and row scales s,
// by the FP8 GEMV (fp8_variant_for's variant) with the same fusions.
struct gemv_args {
    const bf16 *w, *x;
    float *y;
    bf16 *act, *xn;
    const float *nw;
    float eps;
    int out, in;
    float beta;
    const uint8_t *q;
    const float *s;
};
void gemv_fused(tb_gpu *g, const gemv_args &a, int pdl);
void gemv_fp8_fused(tb_gpu *g, const gemv_args &a, int pdl);
// dtype = fp8: y[out] (+)= scale[o] (Q[out][in] x[in]) with Q the E4M3
// codes of W (fp8.h), at batch 1 (in % 16 == 0), by FP8 GEMV variant
// `variant` (0 .. TB_GPU_FP8_GEMV_VARIANTS - 1) or, -1, the shape's
// (fp8_variant_for: the forced one, else the fastest timed, else the default)
void gemv_fp8(tb_gpu *g, const uint8_t *q, const float *scale, const bf16 *x, float *y, int out, int in,
              float beta, int variant = -1);
int fp8_variant_for(const tb_gpu *g, int out, int in);
// The span's row softmax (k_softmax_slots' contract) over n_rows =
// sequences x heads x n rows of n_keys scores: a warp per row with the
// row in registers when n_keys <= 1024, else k_softmax_slots.
void softmax_span(tb_gpu *g, const float *sc, bf16 *p, size_t n_rows, int n, int n_keys, int pos0, int causal,
                  const int *pad, const int *row_slot, int nh);
// act[r][i] = silu(gate) up over n = rows x inter elements (k_swiglu),
// four a thread when inter % 4 == 0; gate and up first times sx[r] sw[col]
// where sw is given (dtype = fp8's deferred scales).
void swiglu_act(tb_gpu *g, const float *gu, bf16 *act, int inter, size_t n, const float *sx, const float *sw);
// the same over gate and up as bf16 (the bf16 path's spans, no scales)
void swiglu_act(tb_gpu *g, const bf16 *gu, bf16 *act, int inter, size_t n);
// The picks (k_pick's arguments) for n_picks = B x npick rows: kind 0
// (LLaDA) split over several blocks a row (k_pick_part, k_pick_combine,
// partials in g->pick_part), the other kinds k_pick.
void pick(tb_gpu *g, const float *logits, int V, int n_picks, int npick, int nr, int off, int shifted,
          size_t uncond_offset, float cfg, int kind, int never, int32_t *x0, double *conf);
} // namespace tbgpu

#endif
