/* dgemma_cuda.c — see dgemma_cuda.h. */
#include "dgemma_cuda.h"

static int encode(void *ctx, const int32_t *tokens, int n)
{
    return tb_gpu_dgemma_encode(ctx, tokens, n, NULL);
}

static int denoise(void *ctx, const int32_t *canvas, const float *sc, float *logits)
{
    return tb_gpu_dgemma_denoise(ctx, canvas, sc, 0, logits);
}

static int denoise_decide(void *ctx, const int32_t *canvas, int use_sc, float temperature, uint64_t seed, uint64_t n0,
                          int32_t *sampled, int32_t *argmax, float *entropy)
{
    return tb_gpu_dgemma_denoise(ctx, canvas, NULL, use_sc, NULL) ||
                   tb_gpu_dgemma_decide(ctx, temperature, seed, n0, sampled, argmax, entropy)
               ? -1
               : 0;
}

tb_dg_engine tb_dg_cuda_engine(tb_gpu_dgemma *d, const tb_dgemma_config *cfg)
{
    return (tb_dg_engine){.ctx = d, .vocab = cfg->vocab, .canvas = cfg->canvas, .encode = encode,
                          .denoise = denoise, .denoise_decide = denoise_decide};
}
