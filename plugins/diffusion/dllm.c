/* dllm.c — see dllm.h. */
#include "dllm.h"

const tb_choice tb_dllm_sampler_choices[] = TB_CHOICES_TABLE(TB_DLLM_SAMPLER_LIST);
const tb_choice tb_dllm_cache_choices[] = TB_CHOICES_TABLE(TB_DLLM_CACHE_LIST);

int tb_dllm_is_block_sampler(tb_dllm_sampler s)
{
    return s == TB_DLLM_SDAR_STATIC || s == TB_DLLM_SDAR_DYNAMIC || s == TB_DLLM_FAST_DLLM_V2;
}

int tb_dllm_canvas_length(const tb_dllm_params *p, int prompt_len)
{
    int L = prompt_len + p->gen_length;
    if (tb_dllm_is_block_sampler(p->sampler) && p->block_length > 0)
        L = (L + p->block_length - 1) / p->block_length * p->block_length;
    return L;
}

void tb_dllm_llada_schedule(int n, int S, int *out)
{
    for (int i = 0; i < S; i++)
        out[i] = n / S + (i < n % S);
}

