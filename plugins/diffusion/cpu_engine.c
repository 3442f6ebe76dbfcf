/* cpu_engine.c — see cpu_engine.h. */
#include "cpu_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tb_dllm_cpu_init(tb_dllm_cpu *e, const tb_model *m, int threads)
{
    memset(e, 0, sizeof *e);
    e->m = m;
    e->shifted = m->cfg.arch == TB_ARCH_DREAM;
    e->threads = threads;
}

int tb_dllm_cpu_reserve(tb_dllm_cpu *e, int seqs, int len, char *err, size_t err_size)
{
    if (seqs <= e->cap_seqs && len <= e->cap_len)
        return 0;
    seqs = seqs > e->cap_seqs ? seqs : e->cap_seqs;
    len = len > e->cap_len ? len : e->cap_len;
    tb_cpu_state_free(&e->st);
    free(e->rows);
    free(e->scratch);
    size_t V = (size_t)e->m->cfg.vocab_size;
    e->rows = malloc((size_t)seqs * len * sizeof(int32_t));
    e->scratch = malloc((size_t)seqs * len * V * sizeof(float));
    e->cap_seqs = e->cap_len = 0;
    if (!e->rows || !e->scratch) {
        snprintf(err, err_size, "out of memory for %d canvases of %d positions", seqs, len);
        return -1;
    }
    if (tb_cpu_state_init(&e->st, e->m, seqs, len, seqs * len, e->threads, err, err_size) != 0)
        return -1;
    e->cap_seqs = seqs, e->cap_len = len;
    return 0;
}

void tb_dllm_cpu_free(tb_dllm_cpu *e)
{
    tb_cpu_state_free(&e->st);
    free(e->rows);
    free(e->scratch);
    e->rows = NULL;
    e->scratch = NULL;
    e->cap_seqs = e->cap_len = 0;
}

static int forward(void *ctx, const int32_t *canvas, int B, int L, int pos0, int n, int n_attend, float *logits)
{
    tb_dllm_cpu *e = ctx;
    int V = e->m->cfg.vocab_size;
    if (e->shifted && pos0 != 0)
        return -1; /* a shifted model's span would need position pos0 - 1 */
    if (B > e->cap_seqs || L > e->cap_len)
        return -1;
    for (int b = 0; b < B; b++)
        memcpy(e->rows + (size_t)b * n, canvas + (size_t)b * L + pos0, (size_t)n * sizeof(int32_t));
    float *out = e->shifted ? e->scratch : logits;
    if (tb_cpu_forward_at(&e->st, e->rows, B, pos0, n, n_attend, out) != 0)
        return -1;
    if (e->shifted) /* logits[i] = out[i - 1], logits[0] = out[0] */
        for (int b = 0; b < B; b++) {
            const float *src = out + (size_t)b * n * V;
            float *dst = logits + (size_t)b * n * V;
            memcpy(dst, src, (size_t)V * sizeof(float));
            memcpy(dst + V, src, (size_t)(n - 1) * V * sizeof(float));
        }
    return 0;
}

tb_dllm_engine tb_dllm_cpu_engine(tb_dllm_cpu *e)
{
    return (tb_dllm_engine){.ctx = e, .vocab = e->m->cfg.vocab_size, .forward = forward};
}
