/* cuda_engine.c — see cuda_engine.h. */
#include "cuda_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "pick.h"

void tb_dllm_cuda_init(tb_dllm_cuda *e, struct tb_gpu *g, int vocab, int shifted)
{
    memset(e, 0, sizeof *e);
    e->g = g;
    e->vocab = vocab;
    e->shifted = shifted;
}

void tb_dllm_cuda_free(tb_dllm_cuda *e)
{
    free(e->host_logits);
    free(e->host_prob);
    e->host_logits = NULL;
    e->host_prob = NULL;
    e->host_logits_cap = 0;
}

/* Sampling (temperature, top_k): picked on the host (cuda_engine.h). */
static int forward_pick_host(tb_dllm_cuda *c, const int32_t *canvas, int B, int L, int pos0, int n, int n_attend,
                             int pick0, int npick, const tb_dllm_pick_spec *spec, uint64_t *rng, int32_t *x0,
                             double *conf)
{
    int rows = spec->cfg_scale > 0 ? 2 * B : B;
    size_t V = (size_t)c->vocab, need = (size_t)rows * npick * V;
    if (need > c->host_logits_cap) {
        free(c->host_logits);
        c->host_logits = malloc(need * sizeof(float));
        c->host_logits_cap = c->host_logits ? need : 0;
    }
    if (!c->host_prob)
        c->host_prob = malloc(V * sizeof(float));
    if (!c->host_logits || !c->host_prob) {
        snprintf(c->error, sizeof c->error, "out of memory for %zu logits", need);
        return -1;
    }
    if (tb_gpu_forward_logits(c->g, canvas, rows, L, pos0, n, n_attend, pick0, npick, c->shifted,
                              c->host_logits) != 0) {
        snprintf(c->error, sizeof c->error, "%s", tb_gpu_error(c->g));
        return -1;
    }
    float *lg = c->host_logits;
    if (spec->cfg_scale > 0) { /* conditional rows become u + (s + 1)(c - u), as on the CPU */
        size_t half = (size_t)B * npick * V;
        float s = (float)spec->cfg_scale;
        for (size_t i = 0; i < half; i++)
            lg[i] = lg[half + i] + (s + 1) * (lg[i] - lg[half + i]);
    }
    for (int b = 0; b < B; b++)
        for (int i = pick0; i < pick0 + npick; i++) {
            size_t r = (size_t)b * n + i;
            tb_dllm_pick_row(lg + ((size_t)b * npick + (i - pick0)) * V, (int)V, spec, rng, c->host_prob, &x0[r],
                             &conf[r]);
        }
    return 0;
}

/* At temperature 0 only x0 and the confidences come back (picked on the
 * device). */
static int forward_pick(void *ctx, const int32_t *canvas, int B, int L, int pos0, int n, int n_attend, int pick0,
                        int npick, const tb_dllm_pick_spec *spec, uint64_t *rng, int32_t *x0, double *conf)
{
    tb_dllm_cuda *c = ctx;
    if (spec->temperature > 0 || spec->top_k > 0)
        return forward_pick_host(c, canvas, B, L, pos0, n, n_attend, pick0, npick, spec, rng, x0, conf);
    int rows = spec->cfg_scale > 0 ? 2 * B : B;
    if (tb_gpu_forward_pick(c->g, canvas, rows, B, L, pos0, n, n_attend, pick0, npick, (int)spec->conf,
                            spec->cfg_scale, c->shifted, x0, conf) != 0) {
        snprintf(c->error, sizeof c->error, "%s", tb_gpu_error(c->g));
        return -1;
    }
    return 0;
}

/* Block samplers (temperature 0: picked on the device). */
static int forward_rows(void *ctx, const int32_t *canvas, int L, const int *rows, int n_rows, int pos0, int n,
                        int n_attend, int mask_block, int pick0, int npick, int shifted,
                        const tb_dllm_pick_spec *spec, uint64_t *rng, int32_t *x0, double *conf)
{
    (void)rng;
    tb_dllm_cuda *c = ctx;
    if (tb_gpu_forward_pick_rows(c->g, canvas, L, rows, n_rows, pos0, n, n_attend, mask_block, pick0, npick,
                                 (int)spec->conf, shifted, spec->suppress1 - 1, x0, conf) != 0) {
        snprintf(c->error, sizeof c->error, "%s", tb_gpu_error(c->g));
        return -1;
    }
    return 0;
}

tb_dllm_engine tb_dllm_cuda_engine(tb_dllm_cuda *e)
{
    return (tb_dllm_engine){.ctx = e, .vocab = e->vocab, .forward_pick = forward_pick, .forward_rows = forward_rows};
}
