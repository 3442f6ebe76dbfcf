/* generate.h — a masked-diffusion generation by sampler kind: the block
 * samplers (block_sampler.h) or those over the whole canvas (sampler.h).
 * Above both, so they need not know each other. */
#ifndef TB_DIFFUSION_GENERATE_H
#define TB_DIFFUSION_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "dllm.h"

/* Check a parameter set against a prompt length. 0, or -1 with the reason
 * ("gen_length 100 is not a multiple of block_length 32"). */
int tb_dllm_validate(const tb_dllm_params *p, char *why, size_t why_size);

/* Run the sampler on canvas [B][tb_dllm_canvas_length] (prompts filled,
 * the rest mask_id). Returns 0, -1 on a forward failure (why set), or 1
 * when cancelled. */
int tb_dllm_generate(const tb_dllm_engine *e, const tb_dllm_params *p, int32_t *canvas, int B, int prompt_len,
                     uint64_t seed, const tb_dllm_hooks *h, tb_dllm_stats *stats, char *why, size_t why_size);

#endif
