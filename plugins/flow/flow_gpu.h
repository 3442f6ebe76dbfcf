/* flow_gpu.h — the flow model and its samplers on an NVIDIA GPU (CUDA,
 * cuBLAS): bf16 weights, cuBLAS GEMMs with float32 accumulation, a float32
 * state; the whole sampler on the device (z, x_sc and x0 never leave it;
 * only the final tokens come back). The CPU path (flow_cpu.c,
 * flow_sampler.c) is its reference (tests/gpu/test_gpu.c).
 *
 * Built only with CUDA (TB_HAVE_CUDA); functions return -1 with a message
 * (tb_flow_gpu_error) on any CUDA or cuBLAS failure, out of memory
 * included. */
#ifndef TB_FLOW_GPU_H
#define TB_FLOW_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "flow_model.h"
#include "flow_sampler.h"

typedef struct tb_flow_gpu tb_flow_gpu;

/* From a CPU model (its weights rounded to bf16), or, with cpu == NULL,
 * preset `preset` (flow_model.h's names) with seeded random weights made
 * on the device (an 8B-class preset never exists on the host). */
int tb_flow_gpu_create(tb_flow_gpu **out, const tb_flow_model *cpu, const char *preset, uint64_t seed, char *err,
                       size_t err_size);
void tb_flow_gpu_free(tb_flow_gpu *g);
const tb_flow_config *tb_flow_gpu_config(const tb_flow_gpu *g);
int64_t tb_flow_gpu_params(const tb_flow_gpu *g);
const char *tb_flow_gpu_device_name(const tb_flow_gpu *g);
const char *tb_flow_gpu_error(const tb_flow_gpu *g);

/* Tests: the device's starting noise, B streams of n numbers from
 * states[B] (host), into out[B][n] (host). */
int tb_flow_gpu_noise(tb_flow_gpu *g, const uint64_t *states, int B, size_t n, float *out);

/* Tests: each block's attention by the engine's one-kernel span attention
 * (fused 1: the default where head_dim is 16, 32, 64 or 128, and not
 * TB_GPU_SPAN_ATTN=0 at creation; a call whose prompt rows attend to the
 * prompt only runs the other path, whose mask it lacks) or by two batched
 * GEMMs around a row softmax (0). Both round alike to bf16, not bit for
 * bit. -1 (the message in tb_flow_gpu_error) where the one kernel cannot
 * run. */
int tb_flow_gpu_set_fused_attention(tb_flow_gpu *g, int fused);

/* The device's roofline ceilings (the engine's measurement, gpu.h's
 * tb_gpu_device_ceilings: bf16 GEMM FLOP/s and copy bytes/s); 0, or -1
 * with the reason in tb_flow_gpu_error. */
int tb_flow_gpu_ceilings(tb_flow_gpu *g, double *peak_flops, double *peak_bytes_per_s);

/* tb_flow_sample on the device: the same arguments and meaning
 * (flow_sampler.h), but for the starting noise: noise (host [B][L][D]),
 * or, with noise NULL, made on the device from each canvas's stream
 * state noise_states[b] (host [B]) as tb_flow_gaussian would make it on
 * the host (one of the two; the plugin gives the states: no noise is made
 * on the host or copied to the device). final_logits (host [B][L][V], may be NULL): the last
 * forward's logits, for tests. Device memory: the most it held,
 * *peak_bytes (may be NULL). The forwards' work by count (each may be
 * NULL): *flops, the products' and attention's FLOPs; *bytes, each
 * product's bf16 weight matrix once plus each block's K and V written
 * and read once (the engine's roofline terms, docs/METRICS.md). */
int tb_flow_gpu_sample(tb_flow_gpu *g, const tb_flow_params *p, int32_t *tokens, const int *pad, int B, int L,
                       int gen0, const float *noise, const uint64_t *noise_states, int *forwards,
                       tb_flow_progress progress, void *progress_ctx,
                       float *final_logits, int64_t *peak_bytes, double *flops, double *bytes);

#ifdef __cplusplus
}
#endif

#endif
