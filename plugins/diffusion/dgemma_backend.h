/* dgemma_backend.h — DiffusionGemma inside the diffusion backend:
 * diffusion.c hands a model it claims (preset:diffusiongemma-26b-a4b,
 * preset:tiny-diffusiongemma, or a folder whose config.json is
 * DiffusionGemma's) to this file, which loads it on the CPU and runs one
 * request per call with the entropy-bound sampler (dgemma_sampler.h) over
 * the CPU passes (cpu/dgemma_forward.h), or with device = cuda over the
 * GPU's (cuda/gpu_dgemma.h: bf16 weights, the sampler's per-position work
 * on the device; a preset too large for host float32 made there with
 * random weights). dtype = fp8 (W8A8, fp8.h) on both: the projections'
 * weights and inputs E4M3 with per-row scales (dgemma_model.h's
 * tb_dgemma_round_fp8 says which; router, embedding and LM head as auto).
 * Each committed canvas is one emission of its non-pad tokens. Not yet:
 * tensor parallelism, batches of more than one request (refused, saying
 * so). */
#ifndef TB_DIFFUSION_DGEMMA_BACKEND_H
#define TB_DIFFUSION_DGEMMA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <tokbench/backend.h>

#include "tokenizer.h"

typedef struct tb_dg_backend tb_dg_backend;

/* 1 when spec names a DiffusionGemma preset or a folder holding its
 * config.json, 0 when not, -1 when out of memory deciding. */
int tb_dg_backend_claims(const char *spec);

/* Load spec (on the GPU when on_gpu; dtype = fp8 when fp8, on the GPU
 * refused for a shape its FP8 kernels cannot take, before any upload:
 * tb_dgemma_check_fp8_gpu; tp > 1 refused). *tok gets the folder's
 * tokenizer.json when tokbench reads it (else NULL: synthetic prompts
 * only; the reason is logged); the caller owns it. */
tb_status tb_dg_backend_create(const tb_host *host, const char *spec, int on_gpu, int fp8, int tp,
                               uint64_t preset_seed, int threads, tb_tokenizer **tok, tb_dg_backend **out, char *err,
                               size_t err_size);
void tb_dg_backend_free(tb_dg_backend *b);
/* describe()'s JSON (owned by b). */
const char *tb_dg_backend_describe(const tb_dg_backend *b);

/* One generate() call: req's one request (synthetic prompt from req->seed
 * or its text through tok), max_new_tokens, steps (0: the model's 48) as
 * the step cap, EOS unless ignore_eos. */
tb_status tb_dg_backend_generate(tb_dg_backend *b, const tb_host *host, const tb_tokenizer *tok, const tb_request *req,
                                 int ignore_eos, int threads, tb_result *res, char *err, size_t err_size);

#endif
