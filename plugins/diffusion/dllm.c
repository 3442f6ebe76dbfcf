/* dllm.c — see dllm.h. */
#include "dllm.h"

const tb_choice tb_dllm_sampler_choices[] = TB_CHOICES_TABLE(TB_DLLM_SAMPLER_LIST);
const tb_choice tb_dllm_cache_choices[] = TB_CHOICES_TABLE(TB_DLLM_CACHE_LIST);

int tb_dllm_is_block_sampler(tb_dllm_sampler s)
{
    return s == TB_DLLM_SDAR_STATIC || s == TB_DLLM_SDAR_DYNAMIC || s == TB_DLLM_FAST_DLLM_V2;
}

int tb_dllm_content_dependent(tb_dllm_sampler s)
{
    /* entropy_bound: DiffusionGemma's canvas stops when its argmax is
     * stable and its mean entropy low, which random tokens never reach */
    return s == TB_DLLM_THRESHOLD || s == TB_DLLM_SDAR_DYNAMIC || s == TB_DLLM_FAST_DLLM_V2 ||
           s == TB_DLLM_ENTROPY_BOUND;
}

int tb_dllm_canvas_length(const tb_dllm_params *p, int prompt_len)
{
    int L = prompt_len + p->gen_length, bl = p->block_length;
    /* Fast-dLLM v2: gen_length / bl blocks from the prompt's, and the
     * token its last commit forward adds (block_sampler.h) */
    if (p->sampler == TB_DLLM_FAST_DLLM_V2 && bl > 0)
        return (prompt_len / bl + p->gen_length / bl) * bl + 1;
    if (tb_dllm_is_block_sampler(p->sampler) && bl > 0)
        L = (L + bl - 1) / bl * bl;
    return L;
}

void tb_dllm_llada_schedule(int n, int S, int *out)
{
    for (int i = 0; i < S; i++)
        out[i] = n / S + (i < n % S);
}

