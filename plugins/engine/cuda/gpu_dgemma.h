/* gpu_dgemma.h — DiffusionGemma's two passes on an NVIDIA GPU (the CPU
 * twin: cpu/dgemma_forward.h, which says what they compute, in
 * transformers' order; tests/gpu/test_dgemma_gpu.c compares the two).
 *
 * Weights are bf16 on the device (uploaded from a host model, rounded; or
 * seeded random weights made on the device for a preset too large for the
 * host), products are the engine's cuBLAS GEMMs (bf16 inputs, float32
 * accumulation), the residual stream is float32, and the rest is this
 * file's own kernels: norms (with and without weight, per head), RoPE,
 * GeGLU, the router (gpu_moe.cu's route and grouping, then per-expert
 * GEMMs over each expert's rows), attention as two batched GEMMs around a
 * masked softmax, the softcapped LM head and self-conditioning. Under
 * dtype = fp8 (tb_gpu_dgemma_create_dtype) the projections are E4M3.
 *
 * The KV cache holds, per layer, its own head size and KV heads (sliding
 * layers: head_dim x num_key_value_heads; full layers: global_head_dim x
 * num_global_key_value_heads), bf16, [max_ctx + canvas][kv hd]. A canvas
 * pass writes its own keys and values after the cached positions (slots
 * [len, len + C)), where the next encode overwrites them: the cached
 * positions [0, len) are never written by it, and the keys a canvas row
 * sees are then one contiguous range (the last W - 1 cached positions or
 * all of them, then the canvas).
 *
 * The sampler's per-position work can run here too (tb_gpu_dgemma_decide):
 * z = l / T, argmax, entropy and the Gumbel-max draw with Exp(1) noise from
 * dgemma_sampler.h's counter-based stream (value n computed from its index,
 * so the draws equal the host's for the same seed), leaving z on the device
 * as the next step's self-conditioning input. Only [C] ids and entropies
 * come back. Built only with CUDA (TB_HAVE_CUDA); every function returns -1
 * with the reason (tb_gpu_dgemma_error) on any CUDA or cuBLAS failure. */
#ifndef TB_ENGINE_GPU_DGEMMA_H
#define TB_ENGINE_GPU_DGEMMA_H

#include <stddef.h>
#include <stdint.h>

#include "dgemma_model.h"
#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tb_gpu_dgemma tb_gpu_dgemma;

/* The device model: from cpu (its weights rounded to bf16; cfg unused), or
 * with cpu NULL seeded random weights for cfg made on the device (weights
 * uniform in +-0.035, norms and scales 1 +- 0.2, as tb_dgemma_preset's
 * ranges; not the same values). -1 with the reason in err. */
int tb_gpu_dgemma_create(tb_gpu_dgemma **out, const tb_dgemma_config *cfg, const tb_dgemma_model *cpu, uint64_t seed,
                         char *err, size_t err_size);
/* dtype = fp8 when fp8 (fp8.h, W8A8): every projection (all but the
 * router; dgemma_model.h's tb_dgemma_round_fp8 says which) as E4M3 codes
 * with a float scale per output row, quantized on the device from the
 * bf16 weights (cpu's, best rounded by tb_dgemma_round_fp8 first so the
 * codes are the CPU twin's; or the preset's random ones), layer by layer,
 * each bf16 copy freed at once (the published shape's preset holds about
 * 27 GB). Each projection's input is quantized per row on the fly: one
 * row through the FP8 GEMV, more through cuBLASLt's FP8 GEMM, or where
 * the device or cuBLAS has none (or TB_GPU_FP8_GEMM=0) both sides
 * dequantized to bf16 for the bf16 GEMMs; the experts, either way, in one
 * grouped GEMM a projection over their codes (gpu_moe.cu's k_moe_gemm:
 * the E4M3 values exact in bf16 on tensor cores). The embedding, LM head,
 * router, norms and attention stay bf16/float. -1 before anything is made
 * on the device for a shape the FP8 kernels cannot take
 * (tb_dgemma_check_fp8_gpu). The FLOP/s ceiling is then the FP8 GEMM's
 * (tb_gpu_gemm_dtype "fp8"). */
int tb_gpu_dgemma_create_dtype(tb_gpu_dgemma **out, const tb_dgemma_config *cfg, const tb_dgemma_model *cpu,
                               uint64_t seed, int fp8, char *err, size_t err_size);
void tb_gpu_dgemma_free(tb_gpu_dgemma *d);

/* Room for max_ctx cached positions (the canvas's own slots come on top).
 * Reallocates (and forgets the cache) when more is asked than held. */
int tb_gpu_dgemma_reserve(tb_gpu_dgemma *d, int max_ctx);
/* Forget the cache. */
void tb_gpu_dgemma_reset(tb_gpu_dgemma *d);
/* Cached positions. */
int tb_gpu_dgemma_len(const tb_gpu_dgemma *d);
/* Test-only: each later encode or denoise call writes the top-k sets its
 * router chose into log (host, cap ids; NULL: stop), in the order the
 * CPU's replay reads them (dgemma_forward.h's route_force: [chunk][layer]
 * [rows][top_k]); a pass that would write more fails. routes_logged: the
 * last call's count. */
void tb_gpu_dgemma_log_routes(tb_gpu_dgemma *d, int32_t *log, size_t cap);
size_t tb_gpu_dgemma_routes_logged(const tb_gpu_dgemma *d);

/* The causal pass over n host tokens at [len, len + n) (in chunks of the
 * canvas length); the cache grows by n. hidden (host [n][H], NULL: not
 * wanted) gets the final norm's output, as the CPU's. */
int tb_gpu_dgemma_encode(tb_gpu_dgemma *d, const int32_t *tokens, int n, float *hidden);

/* The canvas pass over the canvas_length host ids `canvas`, the cache
 * unchanged. Self-conditioning input: sc (host [C][V], the previous step's
 * z) when given; else, when use_device_sc, the z the last
 * tb_gpu_dgemma_decide left on the device; else none (a first step).
 * The softcapped logits stay on the device; logits (host [C][V]) gets a
 * copy when not NULL. */
int tb_gpu_dgemma_denoise(tb_gpu_dgemma *d, const int32_t *canvas, const float *sc, int use_device_sc, float *logits);

/* The step's per-position work over the logits the last denoise left
 * (-1 when none are left: no denoise since the last encode, reset,
 * reserve or decide; dgemma_sampler.h's tb_dg_decide before its
 * acceptance): z = l / T in
 * place, argmax[C] (first of equal maxima), entropy[C] (nats, float64
 * sums), sampled[C] = argmax_v softmax(z)_v / q_v with q[i][v] the Exp(1)
 * value n0 + i V + v of tb_dg_rng's stream seeded with seed. */
int tb_gpu_dgemma_decide(tb_gpu_dgemma *d, float temperature, uint64_t seed, uint64_t n0, int32_t *sampled,
                         int32_t *argmax, float *entropy);

/* The roofline's work of the passes since the last call (docs/METRICS.md:
 * every dense product's bf16 weights once a pass (fp8: a projection's one
 * byte a weight and 4 an output row's scale) and 2 rows x out x in FLOPs; attention 4 rows x heads x keys x head_dim FLOPs and its K/V
 * read and written; the routed experts as active bytes, the distinct
 * experts each MoE layer call read; the LM head, and self-conditioning's
 * [C x V] x [V x H] product and MLP), then zeroed. expert_reads: those
 * distinct experts summed over the MoE layer calls; moe_rows: the rows
 * through them (NULL: not wanted). */
void tb_gpu_dgemma_take_work(tb_gpu_dgemma *d, double *flops, double *bytes, double *expert_reads, double *moe_rows);

/* The engine context underneath: its device name, memory counters
 * (tb_gpu_bytes, tb_gpu_peak_bytes, tb_gpu_reset_peak) and ceilings
 * (tb_gpu_measure_ceilings). */
tb_gpu *tb_gpu_dgemma_gpu(tb_gpu_dgemma *d);
const char *tb_gpu_dgemma_error(const tb_gpu_dgemma *d);

#ifdef __cplusplus
}
#endif

#endif
