/* gpu.h — the transformer forward pass on an NVIDIA GPU (CUDA, cuBLAS).
 *
 * Weights are bfloat16 on the device (fused QKV and gate-up, as on the
 * CPU); GEMMs are cuBLAS bf16 x bf16 with float32 accumulation; the
 * residual stream is float32; everything else is our own kernels
 * (embedding, RMSNorm, RoPE + KV-cache write, SwiGLU, attention: batched
 * GEMMs for prefill and bidirectional spans, a single-query kernel for
 * decode; argmax and diffusion confidences), so only chosen tokens and
 * confidences come back to the host. Batch-1 products use our own GEMV
 * (cuBLAS leaves bandwidth unused there). The AR decode step is captured
 * once per batch size as a CUDA graph and replayed. Mixture-of-experts
 * layers (Qwen3-MoE) run as gpu_moe.cu says: the router on the device,
 * then only the experts the rows chose.
 *
 * What the engine's backends run (engine_cuda.c behind tb_engine,
 * diffusion's cuda_engine.c, the shared load and describe code); the
 * pieces that tests and benchmarks drive alone, and the knobs they turn,
 * are in gpu_tune.h. Built only with CUDA (TB_HAVE_CUDA); the functions
 * return -1 with a message on any CUDA/cuBLAS failure, out of memory
 * included. */
#ifndef TB_ENGINE_GPU_H
#define TB_ENGINE_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "config.h"
#include "model.h"

typedef struct tb_gpu tb_gpu;

/* Whether a CUDA device is usable; the reason when not. */
int tb_gpu_probe(char *why, size_t why_size);

/* Build the device model: from a CPU model (weights rounded to bf16), or,
 * when cpu == NULL, seeded random weights for cfg made on the device;
 * with dtype = fp8 when fp8 (fp8.h): each layer's QKV, output,
 * gate-up and down projections (a MoE layer's experts and shared experts
 * too; not its router) are quantized on the device (from the bf16
 * weights, fp8.h's rule: a CPU model already rounded by tb_model_round_fp8
 * gives back its own codes) and held as E4M3 codes + per-row scales only.
 * Each projection's input is quantized per row too (W8A8, fp8.h): batch-1
 * products with an FP8 GEMV (float32 accumulation), larger spans with
 * FP8 tensor-core GEMMs (gpu_gemm_fp8.cu), or where the device has none
 * both sides dequantized to bf16 (exact) for the bf16 GEMM; the experts
 * as gpu_moe.cu says. Refuses shapes its kernels cannot take
 * (tb_config_check_fp8). */
int tb_gpu_create_dtype(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed, int fp8,
                        char *err, size_t err_size);
void tb_gpu_free(tb_gpu *g);
/* The greedy argmax chooses among ids [0, n) of the vocabulary only
 * (backend_common.h's pick_vocab: a preset given a smaller tokenizer); n
 * in [1, vocab_size]. Before the first forward (a captured CUDA graph
 * keeps the range it was captured with). */
void tb_gpu_set_pick_vocab(tb_gpu *g, int n);

/* Tensor parallelism over devices 0 .. tp - 1 of this host (gpu_tp.cu,
 * tp_split.h's split; NCCL loaded at run time): a group context whose entry
 * points below run on every rank, one thread each, and return rank 0's
 * results. From a CPU model each rank gets its shard; with cpu == NULL each
 * rank draws random weights for its shard's shapes (rank 0 with seed, so tp
 * = 1 equals tb_gpu_create's model when cfg's embedding is untied). tp = 1
 * runs the same path over one device. -1 with the reason: tp above the
 * device count, a split tp_split.h refuses, no NCCL. Memory (tb_gpu_bytes,
 * tb_gpu_peak_bytes) is summed over the ranks; the roofline's work and
 * ceilings too (ceilings: rank 0's device's times tp). */
int tb_gpu_create_tp(tb_gpu **out, const tb_model_config *cfg, const tb_model *cpu, uint64_t seed, int tp, char *err,
                     size_t err_size);
/* A group's rank count; 0 for an ordinary context. */
int tb_gpu_tp_size(const tb_gpu *g);

/* Room for `seqs` sequences of `len` positions (KV cache, activations);
 * `rows` = the most tokens one forward handles. */
int tb_gpu_reserve(tb_gpu *g, int seqs, int len, int rows, char *err, size_t err_size);

/* Left padding: sequence i's first pad[i] positions are filler, masked
 * as keys for its real positions, and its RoPE positions start after them
 * (as tb_cpu_set_padding). n <= the reserved seqs; the rest get 0; pad ==
 * NULL clears. Holds until set again; tb_gpu_reserve's reallocation
 * clears it. */
int tb_gpu_set_padding(tb_gpu *g, const int *pad, int n);

/* Device memory of this context, bytes: every block it allocates goes
 * through one wrapper, which counts the bytes requested from cudaMalloc —
 * weights, KV cache, activation buffers, batched-GEMM pointer arrays,
 * cuBLAS's workspace (set once, so cuBLAS allocates none of its own), and
 * the transient buffers freed again: the staging of an upload, the
 * ceiling and GEMV measurements. Not counted: the CUDA context, cuBLAS's
 * handle and anything else a library allocates for itself, CUDA graphs,
 * the allocator's rounding, pinned host memory.
 * tb_gpu_bytes: held now; tb_gpu_peak_bytes: the most held at any moment
 * since tb_gpu_reset_peak (or since create). */
size_t tb_gpu_bytes(const tb_gpu *g);
size_t tb_gpu_peak_bytes(const tb_gpu *g);
void tb_gpu_reset_peak(tb_gpu *g);
/* The device's name ("NVIDIA H200"). */
const char *tb_gpu_device_name(const tb_gpu *g);
/* The device's PCI bus id ("0000:18:00.0"), for NVML; 0 or -1. */
int tb_gpu_pci_bus_id(const tb_gpu *g, char *buf, int len);

/* Autoregressive: prefill [B][P] prompts (cache reset), greedy next token
 * per sequence into next[B]; then each decode step feeds next[] back and
 * overwrites it (CUDA graph). logits_out (host [B][vocab]) may be NULL;
 * when given, the last step's logits are copied there (sampling on the
 * host). */
int tb_gpu_prefill(tb_gpu *g, const int32_t *tokens, int B, int P, int32_t *next, float *logits_out);
int tb_gpu_decode(tb_gpu *g, int32_t *next, int B, float *logits_out);

/* Continuous batching (a server's stepped sessions): cache sequences are
 * slots, each at its own length. tb_gpu_prefill_slots: B prompts of P
 * tokens (tokens[B][P]) into distinct slots slots[B] from position 0
 * (what they held is forgotten); each one's next token (greedy) into
 * next[B], logits_out (host [B][vocab]) as above.
 * tb_gpu_decode_slots: one step for B distinct slots: row b feeds next[b]
 * at the end of slot slots[b]; next[] is overwritten with each greedy
 * token (CUDA graph per B). Padding must be clear (tb_gpu_set_padding
 * with NULL). */
int tb_gpu_prefill_slots(tb_gpu *g, const int32_t *tokens, int B, int P, const int *slots, int32_t *next,
                         float *logits_out);
int tb_gpu_decode_slots(tb_gpu *g, const int *slots, int B, int32_t *next, float *logits_out);

/* Speculative decoding (engine.h's verify_slots, draft_span_slots,
 * truncate_slot, set_capture, captured; the slots of prefill_slots and
 * decode_slots): tokens [B][n] of B distinct slots, each at its own
 * length len_b (ragged), row b * n + i at position len_b + i.
 * tb_gpu_verify_slots: causal (a row sees its slot's prefix and its own
 * span up to itself); each slot's length grows by n; captures (below).
 * tb_gpu_draft_slots: the span sees the prefix and all of itself
 * (bidirectional); keys and values written, lengths unchanged; no capture.
 * argmax [B][n] (chosen on the device; only the ids come back) and logits
 * (host [B][n][vocab], copied only when given), each NULL when not wanted.
 * Padding must be clear. Not under tensor parallelism.
 * tb_gpu_truncate_slot: the slot keeps its first len positions (len <= its
 * length); nothing reads what was after before it is written again.
 * tb_gpu_set_capture: from now on tb_gpu_prefill_slots and
 * tb_gpu_verify_slots keep every row's residual stream after decoder
 * layers layers[n] (0-based; before the final norm), float32 on the device
 * [rows][n][hidden]; n 0 turns it off (at most TB_GPU_MAX_CAPTURE).
 * tb_gpu_captured: the last capturing call's states (a device pointer,
 * complete when that call returned) and *rows; NULL and 0 when none. */
int tb_gpu_verify_slots(tb_gpu *g, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                        float *logits);
int tb_gpu_draft_slots(tb_gpu *g, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                       float *logits);
int tb_gpu_truncate_slot(tb_gpu *g, int slot, int len);
int tb_gpu_set_capture(tb_gpu *g, const int *layers, int n);
const float *tb_gpu_captured(const tb_gpu *g, int *rows);

/* Diffusion: run positions [pos0, pos0 + n) of `rows` canvases ([rows][L]
 * host ids), attending to [0, n_attend), and for the first B rows return
 * per position the argmax token and its confidence (kind: 0 LLaDA float64
 * softmax probability, 1 Dream probability, 2 Dream top-1 minus top-2,
 * 3 Dream sum p log(p + 1e-10)); cfg_scale > 0 combines row b with row
 * B + b first. shifted: Dream's logits[i] = out[i - 1] (needs pos0 == 0).
 * Only span rows [pick0, pick0 + npick) get logits and picks (x0/conf are
 * [B][n]; the other rows are left alone). */
int tb_gpu_forward_pick(tb_gpu *g, const int32_t *canvas, int rows, int B, int L, int pos0, int n, int n_attend,
                        int pick0, int npick, int kind, double cfg_scale, int shifted, int32_t *x0, double *conf);

/* Block diffusion (as tb_cpu_forward_rows): canvases rows[n_rows]
 * (distinct; canvas r is cache sequence r) of the host canvas [..][L],
 * positions [pos0, pos0 + n) attending to [0, n_attend) under mask_block
 * (0 bidirectional, 1 causal, k > 1 block-causal), their keys and values
 * written to the cache; then for span rows [pick0, pick0 + npick) the
 * argmax and its confidence (kind as tb_gpu_forward_pick; shifted: a row
 * reads the output of the row before, the span's first its own) into
 * x0/conf laid out [n_rows][n]; token `never` (>= 0) is never picked
 * (its logit counts as -inf), -1 = none. npick 0: no LM head (a cache
 * store). */
int tb_gpu_forward_pick_rows(tb_gpu *g, const int32_t *canvas, int L, const int *rows, int n_rows, int pos0, int n,
                             int n_attend, int mask_block, int pick0, int npick, int kind, int shifted, int32_t never,
                             int32_t *x0, double *conf);

/* Roofline: the FLOPs and device-memory bytes of the forwards run since
 * the last call (by count: GEMMs, attention, LM head; bf16 weights, K/V),
 * then reset. A MoE layer's bytes are its active bytes: the router and
 * the distinct experts its rows chose (counted on the device), as
 * tb_moe_active_bytes_sum defines them. expert_reads (NULL: not wanted):
 * those distinct experts summed over the MoE layer calls; moe_rows: the
 * rows (tokens) through MoE layers, summed over the layers (0 and 0 for a
 * dense model). */
void tb_gpu_take_work(tb_gpu *g, double *flops, double *bytes, double *expert_reads, double *moe_rows);

/* The device's ceilings, measured once per context (best of 5: a 1 GiB
 * device copy, read + write bytes/s; an 8192^3 GEMM of the context's
 * products, FLOP/s: bf16 cuBLAS, or under dtype = fp8 with FP8 GEMMs our
 * FP8 GEMM); 0 or -1 (no room for the 2.25 GiB of transient buffers). */
int tb_gpu_measure_ceilings(tb_gpu *g, double *peak_flops, double *peak_bytes_per_s);
/* The same bf16 ceilings of the current CUDA device for a backend with a
 * CUDA context of its own (the flow backend): measured on `stream` (a
 * cudaStream_t) with cuBLAS handle `blas` (a cublasHandle_t), its 2.25 GiB
 * of transient buffers freed on return. 0, or -1 with the reason in err. */
int tb_gpu_device_ceilings(void *stream, void *blas, double *peak_flops, double *peak_bytes_per_s, char *err,
                           size_t err_size);
/* Which GEMM that FLOP/s ceiling is: "bf16" or "fp8". */
const char *tb_gpu_gemm_dtype(const tb_gpu *g);
/* The batch-1 GEMV variant each weight shape timed at load runs, as
 * "OUTxIN=V,..." (the syntax TB_GPU_GEMV_PICKS and TB_GPU_FP8_PICKS take,
 * so a run can be repeated with the same kernels): the bf16 GEMV's (fp8 0)
 * or the FP8 GEMV's (fp8 1); a variant forced by TB_GPU_GEMV_VARIANT
 * shows as that variant on every shape (under TB_GPU_FP8_GEMV the FP8
 * shapes are not timed, so none is listed). The picks are
 * timed per process (two processes may pick apart: gpu_ceilings.cu), so a
 * run's description keeps them. Returns the shapes written; "" and 0 when
 * none was timed (a small model); truncated at a shape's boundary. */
int tb_gpu_gemv_picks(const tb_gpu *g, int fp8, char *buf, size_t size);

/* Diffusion, sampling on the host: the same forward as
 * tb_gpu_forward_pick over `rows` canvases, but the logits of span rows
 * [pick0, pick0 + npick) come back (host [rows][npick][vocab], already
 * shifted for Dream). */
int tb_gpu_forward_logits(tb_gpu *g, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend,
                          int pick0, int npick, int shifted, float *logits);

/* All-position logits (host [B][n][vocab]) of a span: the engine's
 * scoring (logits_all) and the tests. */
int tb_gpu_logits(tb_gpu *g, const int32_t *tokens, int B, int pos0, int n, int n_attend, int causal,
                  float *logits);

const char *tb_gpu_error(const tb_gpu *g);

#ifdef __cplusplus
}
#endif

#endif
