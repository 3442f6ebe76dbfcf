/* sampler.h — the masked-diffusion samplers that attend over the whole
 * canvas (LLaDA, Fast-dLLM, Dream) on a canvas of token ids, written once
 * and driven by any engine through a forward callback (dllm.h).
 *
 * The canvas of request b is prompt + gen_length positions, the generated
 * part starting as mask_id. Samplers:
 *   low_confidence, random  LLaDA: gen_length in blocks of block_length,
 *       steps / n_blocks steps per block, step i of a block commits
 *       n / S + (i < n % S) of its n masked positions: those with the highest
 *       confidence (softmax probability of the argmax, in float64) or a
 *       random score; committed tokens are never re-masked.
 *   threshold  Fast-dLLM: per block, commit every masked position of the
 *       block whose confidence >= threshold, and always the most confident
 *       one; steps are then an outcome.
 *   origin, maskgit_plus, topk_margin, entropy  Dream: the whole generated
 *       span at once, timesteps linspace(1, eps, steps + 1) in float32, step
 *       i commits int(n_mask (1 - s/t)) positions (all at the last step),
 *       chosen by max probability, top-1 minus top-2 margin, or negative
 *       entropy; origin commits each masked position with probability
 *       1 - s/t.
 * Caches (LLaDA-family samplers, Fast-dLLM): prefix — each block's first
 * forward runs the whole canvas, later steps run block + suffix over the
 * cached prefix keys/values; dual — later steps run the block alone over
 * cached prefix and suffix. Temperature > 0: Gumbel-max in float64 as LLaDA
 * does (logits.exp() / (-log u)^T), or sampling for the Dream algorithms.
 * Classifier-free guidance (cfg_scale > 0, LLaDA family, no cache): logits
 * = u + (cfg + 1)(c - u) with u from the canvas with its prompt masked.
 * Block diffusion (block_sampler.c: SDAR, Fast-dLLM v2): sdar_static,
 * sdar_dynamic, fast_dllm_v2 — blocks of block_length positions from
 * position 0, causal across blocks, decoded one after another over the
 * exact KV cache of the blocks before (see block_sampler.h). */
#ifndef TB_DIFFUSION_SAMPLER_H
#define TB_DIFFUSION_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "dllm.h"

/* Check a parameter set of one of these samplers (not a block sampler). 0,
 * or -1 with the reason ("gen_length 100 is not a multiple of
 * block_length 32"). */
int tb_dllm_bidir_validate(const tb_dllm_params *p, char *why, size_t why_size);

/* As tb_dllm_generate (generate.h), for one of these samplers (validated);
 * canvas [B][prompt_len + gen_length]. */
int tb_dllm_bidir_generate(const tb_dllm_engine *e, const tb_dllm_params *p, int32_t *canvas, int B, int prompt_len,
                           uint64_t seed, const tb_dllm_hooks *h, tb_dllm_stats *stats, char *why, size_t why_size);

/* Dream's count for step i of `steps`, n masked positions: float32
 * int(n * (1 - s / t)), t, s = linspace(1, eps, steps + 1)[i], [i + 1];
 * all n at the last step. */
int tb_dllm_dream_transfer(int n, int i, int steps, double eps);

#endif
