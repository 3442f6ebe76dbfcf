/* cpu_engine.c — see cpu_engine.h. */
#include "cpu_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tb_dllm_cpu_init(tb_dllm_cpu *e, const tb_model *m, int threads)
{
    memset(e, 0, sizeof *e);
    e->m = m;
    e->shifted = m->cfg.arch == TB_ARCH_DREAM; /* Fast-dLLM v2 shifts in its sampler's calls */
    e->threads = threads;
}

void tb_dllm_cpu_bind(tb_dllm_cpu *e, const tb_model *m, tb_engine *eng)
{
    tb_dllm_cpu_init(e, m, 0);
    e->eng = eng;
}

/* The span buffers for `seqs` canvases of `len` positions (grown only). */
static int reserve_buffers(tb_dllm_cpu *e, int seqs, int len, char *err, size_t err_size)
{
    if (seqs <= e->cap_seqs && len <= e->cap_len)
        return 0;
    seqs = seqs > e->cap_seqs ? seqs : e->cap_seqs;
    len = len > e->cap_len ? len : e->cap_len;
    free(e->rows);
    free(e->scratch);
    size_t V = (size_t)e->m->cfg.vocab_size;
    e->rows = malloc((size_t)seqs * len * sizeof(int32_t));
    e->scratch = malloc((size_t)seqs * len * V * sizeof(float));
    free(e->prob);
    e->prob = malloc(V * sizeof(float));
    e->cap_seqs = e->cap_len = 0;
    if (!e->rows || !e->scratch || !e->prob) {
        snprintf(err, err_size, "out of memory for %d canvases of %d positions", seqs, len);
        return -1;
    }
    e->cap_seqs = seqs, e->cap_len = len;
    return 0;
}

int tb_dllm_cpu_reserve(tb_dllm_cpu *e, int seqs, int len, char *err, size_t err_size)
{
    if (!e->eng) { /* an engine of its own */
        if (tb_engine_open_cpu(&e->own, e->m, e->threads) != 0) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        e->eng = &e->own;
    }
    if (seqs <= e->cap_seqs && len <= e->cap_len)
        return 0;
    int s = seqs > e->cap_seqs ? seqs : e->cap_seqs, l = len > e->cap_len ? len : e->cap_len;
    if (e->eng == &e->own && e->own.iface->reserve(e->own.ctx, s, l, s * l, err, err_size) != 0)
        return -1;
    return reserve_buffers(e, s, l, err, err_size);
}

void tb_dllm_cpu_free(tb_dllm_cpu *e)
{
    tb_engine_close(&e->own);
    if (e->eng == &e->own)
        e->eng = NULL;
    free(e->rows);
    free(e->scratch);
    free(e->prob);
    e->rows = NULL;
    e->scratch = NULL;
    e->prob = NULL;
    e->cap_seqs = e->cap_len = 0;
}

int tb_dllm_cpu_logits(tb_dllm_cpu *e, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend)
{
    int V = e->m->cfg.vocab_size;
    if (e->shifted && pos0 != 0)
        return -1; /* a shifted model's span would need position pos0 - 1 */
    if (reserve_buffers(e, rows, L, e->error, sizeof e->error) != 0)
        return -1;
    for (int b = 0; b < rows; b++)
        memcpy(e->rows + (size_t)b * n, canvas + (size_t)b * L + pos0, (size_t)n * sizeof(int32_t));
    if (e->eng->iface->forward_span(e->eng->ctx, e->rows, rows, pos0, n, n_attend, e->scratch) != 0) {
        snprintf(e->error, sizeof e->error, "%s", e->eng->iface->error(e->eng->ctx));
        return -1;
    }
    if (e->shifted) /* logits[i] = out[i - 1], logits[0] = out[0] */
        for (int b = 0; b < rows; b++) {
            float *l = e->scratch + (size_t)b * n * V;
            memmove(l + V, l, (size_t)(n - 1) * V * sizeof(float));
        }
    return 0;
}

static int forward_pick(void *ctx, const int32_t *canvas, int B, int L, int pos0, int n, int n_attend, int pick0,
                        int npick, const tb_dllm_pick_spec *spec, uint64_t *rng, int32_t *x0, double *conf)
{
    tb_dllm_cpu *e = ctx;
    int V = e->m->cfg.vocab_size, rows = spec->cfg_scale > 0 ? 2 * B : B;
    if (tb_dllm_cpu_logits(e, canvas, rows, L, pos0, n, n_attend) != 0)
        return -1;
    if (spec->cfg_scale > 0) { /* conditional rows become u + (s + 1)(c - u) */
        size_t half = (size_t)B * n * V;
        float s = (float)spec->cfg_scale;
        for (size_t i = 0; i < half; i++) {
            float c = e->scratch[i], u = e->scratch[half + i];
            e->scratch[i] = u + (s + 1) * (c - u);
        }
    }
    for (int b = 0; b < B; b++)
        for (int i = pick0; i < pick0 + npick; i++) {
            size_t r = (size_t)b * n + i;
            tb_dllm_pick_row(e->scratch + r * V, V, spec, rng, e->prob, &x0[r], &conf[r]);
        }
    return 0;
}

static int forward_rows(void *ctx, const int32_t *canvas, int L, const int *rows, int n_rows, int pos0, int n,
                        int n_attend, int mask_block, int pick0, int npick, int shifted, const tb_dllm_pick_spec *spec,
                        uint64_t *rng, int32_t *x0, double *conf)
{
    tb_dllm_cpu *e = ctx;
    int V = e->m->cfg.vocab_size;
    if (pick0 < 0 || npick < 0 || pick0 + npick > n || reserve_buffers(e, n_rows, L, e->error, sizeof e->error) != 0)
        return -1;
    for (int b = 0; b < n_rows; b++)
        memcpy(e->rows + (size_t)b * n, canvas + (size_t)rows[b] * L + pos0, (size_t)n * sizeof(int32_t));
    /* the head rows: the picks', and for shifted logits the row before */
    int r0 = shifted && pick0 > 0 ? pick0 - 1 : pick0, nr = npick ? pick0 + npick - r0 : 0;
    if (e->eng->iface->forward_span_rows(e->eng->ctx, e->rows, rows, n_rows, pos0, n, n_attend, mask_block, r0, nr,
                                         e->scratch) != 0) {
        snprintf(e->error, sizeof e->error, "%s", e->eng->iface->error(e->eng->ctx));
        return -1;
    }
    for (int b = 0; b < n_rows; b++)
        for (int i = pick0; i < pick0 + npick; i++) {
            int src = (shifted && i > 0 ? i - 1 : i) - r0;
            tb_dllm_pick_row(e->scratch + ((size_t)b * nr + src) * V, V, spec, rng, e->prob, &x0[(size_t)b * n + i],
                             &conf[(size_t)b * n + i]);
        }
    return 0;
}

tb_dllm_engine tb_dllm_cpu_engine(tb_dllm_cpu *e)
{
    return (tb_dllm_engine){
        .ctx = e, .vocab = e->m->cfg.vocab_size, .forward_pick = forward_pick, .forward_rows = forward_rows};
}
