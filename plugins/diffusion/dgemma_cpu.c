/* dgemma_cpu.c — see dgemma_cpu.h. */
#include "dgemma_cpu.h"

static int encode(void *ctx, const int32_t *tokens, int n)
{
    return tb_dgemma_encode(ctx, tokens, n, NULL);
}

static int denoise(void *ctx, const int32_t *canvas, const float *sc, float *logits)
{
    tb_dgemma_state *st = ctx;
    return tb_dgemma_denoise(st, canvas, st->m->cfg.canvas, sc, logits);
}

tb_dg_engine tb_dg_cpu_engine(tb_dgemma_state *st)
{
    return (tb_dg_engine){.ctx = st, .vocab = st->m->cfg.vocab, .canvas = st->m->cfg.canvas, .encode = encode,
                          .denoise = denoise};
}
