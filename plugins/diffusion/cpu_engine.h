/* cpu_engine.h — the samplers' forward (dllm.h) on the CPU engine: a
 * bidirectional span forward over the KV cache, plus Dream's shift of the
 * logits (position i predicted from i - 1). Shared by the diffusion plugin
 * and the golden tests. */
#ifndef TB_DIFFUSION_CPU_ENGINE_H
#define TB_DIFFUSION_CPU_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_forward.h"
#include "model.h"
#include "dllm.h"

typedef struct tb_dllm_cpu {
    const tb_model *m;
    tb_cpu_state st;
    int shifted;      /* Dream */
    int cap_seqs, cap_len;
    int threads;
    int32_t *rows;    /* [seqs][len]: the span's tokens */
    float *scratch;   /* [seqs][len][vocab]: the span's logits */
    float *prob;      /* [vocab]: Dream's probabilities of one row */
} tb_dllm_cpu;

/* Bind to a model (no allocation yet). */
void tb_dllm_cpu_init(tb_dllm_cpu *e, const tb_model *m, int threads);
/* Room for `seqs` canvases of `len` positions; 0 or -1 with err. */
int tb_dllm_cpu_reserve(tb_dllm_cpu *e, int seqs, int len, char *err, size_t err_size);
void tb_dllm_cpu_free(tb_dllm_cpu *e);
/* The span's logits of `rows` canvases into e->scratch ([rows][n][vocab],
 * shifted for Dream). 0 or -1. */
int tb_dllm_cpu_logits(tb_dllm_cpu *e, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend);
/* The engine table for tb_dllm_generate. */
tb_dllm_engine tb_dllm_cpu_engine(tb_dllm_cpu *e);

#endif
