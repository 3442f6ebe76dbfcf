/* generate.c — see generate.h. */
#include "generate.h"

#include <stdio.h>

#include "block_sampler.h"
#include "sampler.h"

int tb_dllm_validate(const tb_dllm_params *p, char *why, size_t why_size)
{
    if (p->skip_final_store && p->sampler != TB_DLLM_SDAR_STATIC && p->sampler != TB_DLLM_SDAR_DYNAMIC) {
        snprintf(why, why_size, "final_store = false is an option of sdar_static and sdar_dynamic (their store "
                                "forward after the last block); %s has none to skip",
                 tb_choice_name(tb_dllm_sampler_choices, p->sampler));
        return -1;
    }
    if (p->sampler == TB_DLLM_ENTROPY_BOUND) /* DiffusionGemma's: dgemma_sampler.h checks its parameters */
        return 0;
    return tb_dllm_is_block_sampler(p->sampler) ? tb_dllm_block_validate(p, why, why_size)
                                                : tb_dllm_bidir_validate(p, why, why_size);
}

int tb_dllm_generate(const tb_dllm_engine *e, const tb_dllm_params *p, int32_t *canvas, int B, int prompt_len,
                     uint64_t seed, const tb_dllm_hooks *h, tb_dllm_stats *stats, char *why, size_t why_size)
{
    *stats = (tb_dllm_stats){.request_steps = stats->request_steps, .request_blocks = stats->request_blocks,
                             .request_tokens = stats->request_tokens};
    if (tb_dllm_validate(p, why, why_size) != 0)
        return -1;
    if (p->sampler == TB_DLLM_ENTROPY_BOUND) {
        snprintf(why, why_size, "sampler entropy_bound is DiffusionGemma's (uniform renoising, no mask token)");
        return -1;
    }
    return tb_dllm_is_block_sampler(p->sampler)
               ? tb_dllm_block_generate(e, p, canvas, B, prompt_len, seed, h, stats, why, why_size)
               : tb_dllm_bidir_generate(e, p, canvas, B, prompt_len, seed, h, stats, why, why_size);
}
