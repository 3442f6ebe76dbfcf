/* gpu_tune.h — the CUDA engine's pieces for tests and benchmarks
 * (tests/gpu): a seeded model, each part of the forward alone on host data
 * (attention, the products, the FP8 codes), the tensor-parallel group's
 * per-rank figures, and the knobs the measurements behind the defaults
 * turn (decode fusion, attention splits, GEMV variants, the MoE and FP8
 * routes). No backend includes it: gpu.h is what they run. */
#ifndef TB_ENGINE_GPU_TUNE_H
#define TB_ENGINE_GPU_TUNE_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tb_gpu_create_dtype's bf16 model (fp8 = 0). */
int tb_gpu_create(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed, char *err,
                  size_t err_size);
/* Tests: layer l's projection `which` (0 QKV, 1 output, 2 gate-up, 3
 * down) of a dtype = fp8 context, its codes into q[rows][in] and its row
 * scales into scale[rows] (host); -1 when the context is not fp8. */
int tb_gpu_fp8_weights(tb_gpu *g, int l, int which, uint8_t *q, float *scale);
/* The batch-1 FP8 GEMV's variants: 0..4 on the CUDA cores (rows per warp
 * x loads in flight: 4x4, 2x8, 1x8, 2x4, 1x16), which all round alike; 5,
 * 6 and 7 on the tensor cores (warps a block x steps in flight: 8x2, 8x4,
 * 16x2),
 * which sum in another order and so round apart from 0..4 (tested within
 * the FP8 tensor-core GEMM's bound of the CPU's, 2e-3 of the sum of
 * |terms|, where 0..4 are held to 1e-4; an input wider than 46 KiB runs 3).
 * At load a dtype = fp8 model as large as tb_gpu_force_gemv_variant's
 * comment says times each on each projection's shape and keeps the
 * fastest per shape (tb_gpu_bench_gemv_fp8; a tensor-core one only when
 * 3% faster than the fastest of 0..4, and the process's first pick for a
 * shape on a device holds for every later context, as the bf16 GEMV's
 * split-K ones); shapes not timed take TB_GPU_FP8_GEMV_DEFAULT (2x4). The
 * environment's TB_GPU_FP8_GEMV, or this (tests run each against the
 * CPU), forces one for every shape; a variant out of range: back to per
 * shape. */
#define TB_GPU_FP8_GEMV_VARIANTS 8
#define TB_GPU_FP8_GEMV_ROUNDING_ALIKE 5 /* variants 0 .. this - 1 sum in one order */
#define TB_GPU_FP8_GEMV_DEFAULT 3
void tb_gpu_set_fp8_gemv(tb_gpu *g, int variant);
/* dtype = fp8 above one row: on (the default where the device and
 * cuBLASLt have it; TB_GPU_FP8_GEMM=0 at creation says off), FP8
 * tensor-core GEMMs over the E4M3 inputs and weights; off, both
 * dequantized to bf16 for the bf16 GEMM (the same products). Drops the
 * reserved buffers (tb_gpu_reserve again). -1 when the context is not
 * fp8 or has no FP8 GEMM. */
int tb_gpu_set_fp8_gemm(tb_gpu *g, int on);
/* Tests: projection `which` (0..3: qkv, o, gate-up, down) of layer l of
 * a dtype = fp8 context applied to x[rows][in] (host float32, rounded to
 * bf16 as the device holds activations): y[rows][out] = (or, accumulate,
 * +=) the product. rows within the reserved rows; 1 is the GEMV. With
 * deferred (and not accumulate), through the route QKV and gate-up take
 * in the forward (the bare FP8 products, whose scales the next kernel
 * applies: here k_fp8_scale_out). */
int tb_gpu_fp8_product(tb_gpu *g, int l, int which, const float *x, int rows, float *y, int accumulate,
                       int deferred);

/* Tests: the attention of a span alone, on host data rounded to bf16 as
 * the device holds it. q [B][n][n_heads][head_dim] are the span's rows at
 * positions pos0 ..; k, v [B][n_attend][n_kv_heads][head_dim] go into
 * cache slots 0 .. B - 1 of layer 0 (positions 0 .. n_attend - 1); the
 * padding is tb_gpu_set_padding's; causal as tb_gpu_logits. out [B][n]
 * [n_heads][head_dim]. fused 1: the one-kernel path (gpu_attn_span.cu;
 * -1 where the model's head_dim has none), 0: batched GEMMs around the
 * softmax kernel. Writes the cache and the forward's buffers. */
int tb_gpu_span_attention(tb_gpu *g, const float *q, const float *k, const float *v, int B, int pos0, int n,
                          int n_attend, int causal, int fused, float *out);
/* Tests: decode attention alone, one row per sequence at position
 * n_attend - 1 over keys [pad, n_attend) (the padding tb_gpu_set_padding
 * gave), k and v as tb_gpu_span_attention's; q, out [B][n_heads]
 * [head_dim]. kernel 0: a block per query head, 1: the same split over
 * the keys (as the forward chooses the splits, or as
 * tb_gpu_set_attn_splits says), 2: a block per K/V head's query group,
 * 3: the same split over the keys as 1 (2 and 3: -1 where this model's
 * head_dim or group has no such kernel). */
int tb_gpu_decode_attention(tb_gpu *g, const float *q, const float *k, const float *v, int B, int n_attend,
                            int kernel, float *out);

/* CUDA devices on this host (0 when none or on error). */
int tb_gpu_device_count(void);
/* Rank r's peak device memory (tb_gpu_peak_bytes's count on its device). */
size_t tb_gpu_rank_peak_bytes(const tb_gpu *g, int rank);
/* A group's in-place all-reduce of count floats, all ranks at once: the
 * median time of iters calls (CUDA events on rank 0's stream), µs; -1 for
 * an ordinary context. */
int tb_gpu_tp_time_allreduce(tb_gpu *g, size_t count, int iters, double *us);

/* Mixture of experts: spans of more than max_rows rows run their experts
 * as GEMMs (below); up to it, and in every decode step (CUDA graphs), the
 * grouped GEMV that reads the expert ids on the device. Default
 * TB_GPU_MOE_GEMV_ROWS, or the environment's TB_GPU_MOE_GEMV_ROWS (a
 * positive count, for measurements); tests and measurements set both
 * ways. Measured on the H100 (docs/PERFORMANCE.md, 2026-12-07): at 32
 * rows (LLaDA2.0-mini's block) the grouped GEMM 736 tok/s against the
 * GEMV's 529; at 128 (a Qwen3-30B-A3B prefill) 14.1 ms against 57.2. */
#define TB_GPU_MOE_GEMV_ROWS 16
void tb_gpu_set_moe_gemv_rows(tb_gpu *g, int max_rows);
/* Those longer spans' experts: 0, cuBLAS per expert over its gathered
 * rows (the host reads the group sizes: one wait a layer); 1, one grouped
 * tensor-core GEMM over all experts a projection (gpu_moe.cu's
 * k_moe_gemm: no host wait); -1 (the default), the grouped GEMM where the
 * span's (row, expert) pairs are at most TB_GPU_MOE_GROUPED_PER_EXPERT a
 * routed expert on average, else cuBLAS per expert (whose GEMMs are then
 * large). At load TB_GPU_MOE_SPAN=grouped or =cublas sets 1 or 0.
 * Measured on the H100 (2026-12-07), grouped against cuBLAS: 8 pairs an
 * expert (Qwen3-30B-A3B, 128 rows) 14.1 against 23.3 ms; 32 (LLaDA2.0-mini
 * at batch 32, Qwen3 at 512 rows) 2.3x and 1.8x faster; 48 (LLaDA-MoE-7B-A1B,
 * 384 rows) 3,963 against 4,708 tok/s; 256 (Qwen3, 4,096 rows) 160.1
 * against 144.6 ms. With the pipelined GEMM (H100, #s29, one call:
 * bench_moe qwen3-30b-a3b) grouped against cuBLAS at 8 / 32 / 256 pairs
 * an expert: 12.36 / 27.31 / 138.39 ms (124.88 with the 128-row tiles)
 * against 31.91 / 87.93 / 205.44 and 177.54 (two processes); the rule
 * stays until LLaDA-MoE-7B-A1B's spans (48 and 128 pairs an expert,
 * where cuBLAS was ahead: #moe-diffusion) are measured again. */
#define TB_GPU_MOE_GROUPED_PER_EXPERT 32
void tb_gpu_set_moe_span_grouped(tb_gpu *g, int grouped);
/* The grouped GEMM's tiles (bf16 weights; FP8 always REGS):
 * REGS, 64 x 64 tiles with one K step of loads held in registers (the
 * first form, kept for measurements); WIDE, the same tiles pipelined
 * (cp.async, several K steps in flight); NARROW, pipelined 16 x 128
 * tiles, for spans of few pairs an expert (a 64-row tile of 1-4 pairs
 * is mostly padding); BIG, pipelined 128 x 128 tiles of 8 warps, for
 * spans of many pairs an expert (not in the default: faster only where
 * cuBLAS per expert takes the span by default). -1 (the default; any
 * value not a form): NARROW where the span's pairs are at most
 * TB_GPU_MOE_NARROW_PER_EXPERT a routed expert on average, else WIDE.
 * All four give the same sums, to the bit. At load
 * TB_GPU_MOE_TILES=regs, wide, narrow or big sets one. Measured on the H200
 * (docs/PERFORMANCE.md #s27, one call, two runs each), LLaDA2.0-mini
 * block 32, batch 1 (256 pairs over 256 experts) regs / wide / narrow:
 * 838 and 846 / 893 and 888 / 976 and 980 tok/s; batch 32 regs / wide:
 * 7,237 and 7,243 / 8,006 and 8,064. Qwen3-30B-A3B prefill of 1 / 4 / 32
 * x 128 rows (8 pairs an expert and up) regs / wide: 12.94 / 30.19 /
 * 155.37 against 11.28 / 25.94 / 137.42 ms. On the H100 (#s29, one
 * call), wide / big: Qwen3-30B-A3B prefill of 1 / 4 / 32 x 128 rows (8,
 * 32, 256 pairs an expert) 12.19 / 27.29 / 138.14 against 13.58 / 29.71
 * / 124.88 ms; LLaDA2.0-mini batch 32 (32 pairs an expert on average)
 * 7,898 against 7,659 tok/s. */
#define TB_GPU_MOE_TILES_REGS 0
#define TB_GPU_MOE_TILES_WIDE 1
#define TB_GPU_MOE_TILES_NARROW 2
#define TB_GPU_MOE_TILES_BIG 3
#define TB_GPU_MOE_NARROW_PER_EXPERT 4
void tb_gpu_set_moe_gemm_tiles(tb_gpu *g, int tiles);
/* The pipelined grouped GEMM's split over K (bf16): where a launch's
 * tiles are too few to fill the chip (a batch-1 block of LLaDA2.0-mini:
 * its 32 rows route to about 8-16 experts, 16-32 tiles of 16 rows by 8
 * columns, one block of 4 warps an SM streaming the weights), each tile's
 * K steps go to up to 4 blocks, as many as bring the launch to the blocks
 * the chip holds at once (the shape's occupancy; the count of tiles read
 * on the device: no host wait); the parts' float sums meet in a buffer,
 * and the last part to arrive adds them in a fixed order and writes the
 * outputs. The same bits run after run, but not the unsplit sums' bits
 * (the float additions' order differs), and a row's bits then depend on
 * how the span's other rows route (their tiles set the parts), as a
 * cuBLAS GEMM's depend on its rows. -1: so, by the tiles; 1: never; 2-8:
 * every launch in that many parts (tests, measurements); the parts'
 * buffers are allocated by tb_gpu_reserve where it is not 1 then, and
 * without them no launch splits. TB_GPU_MOE_SPLIT=off (or 1), 2-8 or
 * auto at load. The default is 1
 * (never) until it is measured on a GPU (session 30 had none:
 * tests/gpu/run_moe_split.sh is the measurement, test_gpu's
 * check_moe_tiles its test, neither run yet). */
#define TB_GPU_MOE_SPLIT_DEFAULT 1
void tb_gpu_set_moe_splits(tb_gpu *g, int splits);
/* The grouped GEMM's launches so far whose grid held more than one part
 * (the split's test: a forced split that fell back to one part would
 * pass for the unsplit form; forced, every such launch splits; by the
 * tiles the device may still take one part). */
long tb_gpu_moe_split_launches(const tb_gpu *g);

/* Decode fusion for one-row forwards (batch-1 decode), a mask of
 * TB_GPU_FUSE_*: SWIGLU computes SwiGLU inside the gate-up GEMV (no
 * k_swiglu, no float [2I] round trip; dtype = fp8's FP8 GEMV too; and the
 * MoE experts' grouped GEMV wherever that runs, bf16: any decode batch,
 * spans up to tb_gpu_set_moe_gemv_rows; and longer spans' pipelined
 * grouped GEMM, bf16, in its epilogue); SPLIT_ATTN splits decode attention
 * over the keys when (sequence, head) pairs alone would leave the chip
 * idle (any batch; tb_gpu_set_attn_splits) where the kernel by query
 * group does not run (batch 1, or a model without it: gpu_forward.cu's
 * attn_decode); NORM has the last block of
 * each GEMV that writes the residual (o, down) compute the next RMSNorm
 * (no k_rmsnorm but layer 0's; not under tensor parallelism or with MoE
 * layers); MOE_COMBINE has the experts' grouped down GEMV add their
 * weighted outputs into the residual itself (its last block per column,
 * k_moe_combine's sums: no k_moe_combine launch; where the grouped GEMV
 * runs, as SWIGLU's, up to TB_GPU_MOE_FUSE_ROWS rows); MOE_ROUTER
 * computes the router's logits, its choice and the grouping in one kernel
 * where a forward has at most TB_GPU_MOE_FUSE_ROWS rows and 256 experts (gpu_moe.cu's
 * k_moe_router: no cuBLAS call, no k_moe_route, no k_moe_group; the
 * logits' sums in another order than cuBLAS's); GROUP_ATTN has SPLIT_ATTN's
 * split run by query group (one block up to 4 heads of one K/V head and
 * part of the keys, each key and value read once for those heads, in one
 * round; a group of 8 is two blocks, each reading them: gpu_forward.cu's
 * attn_decode) where the model's group and head_dim have that kernel,
 * else per head; ATTN_POST has that split kernel by query group, at
 * batch 1, also do k_qkv_post's work for its own heads (bias, QK-norm,
 * RoPE, the new key and value into the cache: no k_qkv_post launch; the
 * same values, tested to the bit); MOE_NORM has the fused router, at
 * batch 1, make the MLP's RMSNorm of its row itself (no k_rmsnorm launch
 * before it; its sum of squares in another order; at batch 4, where each
 * of its blocks normalizes every row, it measured 0.8% slower); MOE_DOWN1
 * has batch 1's experts' down product and combine run a block per 16
 * outputs over all the row's experts (gpu_moe.cu's k_moe_down1: the same
 * sums, no arrival count). MOE_COMBINE and MOE_ROUTER are bits 8 and 16,
 * GROUP_ATTN 32, since 2026-12-07, ATTN_POST 128 and MOE_NORM 256 since
 * session 25 (64 was session 24's L2 prefetch, removed), MOE_DOWN1 512
 * since session 26, so masks written before, 3 and 7, leave them out. (Until 2026-12-02 NORM staged the norm inside every block of
 * the GEMV after it: 16% slower on the H200, docs/PERFORMANCE.md.) pdl:
 * the decode graph's batch-1 kernels are programmatic dependent launches
 * (each may start while the one before drains; its GEMV prefetches its
 * first weights meanwhile). 0/0 is the unfused path; tests compare each
 * with the CPU. Defaults: TB_GPU_FUSE_DEFAULT and TB_GPU_PDL_DEFAULT
 * (docs/PERFORMANCE.md has the measurements behind them), or the
 * environment's TB_GPU_FUSION (a mask) and TB_GPU_PDL (0/1). */
#define TB_GPU_FUSE_SWIGLU 1
#define TB_GPU_FUSE_SPLIT_ATTN 2
#define TB_GPU_FUSE_NORM 4
#define TB_GPU_FUSE_MOE_COMBINE 8
#define TB_GPU_FUSE_MOE_ROUTER 16
#define TB_GPU_FUSE_GROUP_ATTN 32
/* (64: session 24's L2 prefetch, measured slower and removed: not reused) */
#define TB_GPU_FUSE_ATTN_POST 128
#define TB_GPU_FUSE_MOE_NORM 256
#define TB_GPU_FUSE_MOE_DOWN1 512
#define TB_GPU_FUSE_ALL (63 | TB_GPU_FUSE_ATTN_POST | TB_GPU_FUSE_MOE_NORM | TB_GPU_FUSE_MOE_DOWN1) /* every bit above */
/* MOE_COMBINE and MOE_ROUTER act on forwards of at most this many rows:
 * on the H100 (docs/PERFORMANCE.md, 2026-12-07, bench_moe qwen3-30b-a3b
 * decode, TB_GPU_FUSION 27 against 3 in one call) the two made a decode
 * step faster at batch 1, 2 and 4 (+7%, +5%, +2%) and slower at 8 and 16
 * (-1.4%, -0.7%): their last blocks' serial work grows with the rows. */
#define TB_GPU_MOE_FUSE_ROWS 4
/* ATTN_POST and MOE_NORM in the default since session 25 (one H200 call,
 * docs/PERFORMANCE.md #fusions-s25): Llama-3-8B batch 1 +1.2% bf16,
 * +1.9% fp8; Qwen3-30B-A3B batch 1 +2.9% with both. MOE_DOWN1 since
 * session 26 (one H100 call, #s26): Qwen3-30B-A3B batch 1 4.196 / 4.214
 * against 4.063 / 4.038 ms a step (+3.8%), batch 4 and 32 unchanged */
#define TB_GPU_FUSE_DEFAULT                                                                                         \
    (TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_SPLIT_ATTN | TB_GPU_FUSE_MOE_COMBINE | TB_GPU_FUSE_MOE_ROUTER |                \
     TB_GPU_FUSE_GROUP_ATTN | TB_GPU_FUSE_ATTN_POST | TB_GPU_FUSE_MOE_NORM | TB_GPU_FUSE_MOE_DOWN1)
#define TB_GPU_PDL_DEFAULT 0
/* Tests: y[rows][out] (+ y when accumulate) = x[rows][in] W[out][in]^T as
 * the forward's products run (W and x rounded to bf16; the batch-1 GEMV at
 * one row, else cuBLAS), on host data. */
int tb_gpu_product(tb_gpu *g, const float *w, const float *x, int rows, int out, int in, float *y, int accumulate);
void tb_gpu_set_decode_fusion(tb_gpu *g, int fusion, int pdl);

/* Split decode attention (TB_GPU_FUSE_SPLIT_ATTN): splits of each
 * (sequence, head)'s keys, 1 .. 16 (1: one block per pair, the split
 * kernel's shape; at any batch), or 0: from batch 2 the kernel by query
 * group where the model has one (gpu_forward.cu's attn_decode), else
 * (batch 1, or no such kernel) as many splits as give 4 blocks a SM when
 * the pairs alone would not (under TB_GPU_FUSE_SPLIT_ATTN; without it the
 * group kernel where there is one), else the one-block-per-pair kernel. Default 0, or the environment's
 * TB_GPU_ATT_SPLITS; tests and measurements set others. */
void tb_gpu_set_attn_splits(tb_gpu *g, int splits);

/* Batch-1 GEMV variants (rows per warp, loads in flight, split-K):
 * TB_GPU_GEMV_VARIANTS of them. At load a model whose layer has 2^24
 * or more feed-forward weights (intermediate x hidden, or a MoE layer's
 * experts' together; about 1B parameters and up) times each on each of
 * its weight shapes and keeps the fastest per shape (a split-K one only when
 * 3% faster; the process's first pick for a shape on a device holds for
 * every later context, gpu_ceilings.cu); this forces one variant for
 * every GEMV (-1: back to per shape), so tests can compare each with the
 * CPU. */
#define TB_GPU_GEMV_VARIANTS 7
void tb_gpu_force_gemv_variant(tb_gpu *g, int variant);

/* Time the batch-1 GEMV variants on a random W[out][in] (bf16) and keep
 * one for this shape in this context (the fastest, with the rules of
 * tb_gpu_force_gemv_variant's comment); returns the fastest variant's
 * GB/s of weight reads (gbs: each variant's, 0 for one not run), or -1. */
double tb_gpu_bench_gemv(tb_gpu *g, int out, int in, double gbs[TB_GPU_GEMV_VARIANTS]);
/* The same for the FP8 GEMV's variants on random E4M3 codes of W[out][in]
 * (tb_gpu_set_fp8_gemv's comment): keeps the fastest for this shape;
 * returns its GB/s of code bytes read (gbs: each variant's), or -1. */
double tb_gpu_bench_gemv_fp8(tb_gpu *g, int out, int in, double gbs[TB_GPU_FP8_GEMV_VARIANTS]);
/* How many copies of a weight matrix of `bytes` both timings cycle, so
 * their reads come from DRAM and not from L2 (their transient memory). */
int tb_gpu_timing_copies(const tb_gpu *g, size_t bytes);
#ifdef __cplusplus
}
#endif

#endif
