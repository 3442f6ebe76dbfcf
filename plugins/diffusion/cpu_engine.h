/* cpu_engine.h — the samplers' forward (dllm.h) on the engine's CPU
 * implementation (engine.h: its span forwards, logits on the host): a
 * bidirectional span forward over the KV cache, plus Dream's shift of the
 * logits (position i predicted from i - 1), and the picks on the host
 * (pick.c). Shared by the diffusion plugin and the golden tests. */
#ifndef TB_DIFFUSION_CPU_ENGINE_H
#define TB_DIFFUSION_CPU_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "dllm.h"
#include "engine.h"
#include "model.h"

typedef struct tb_dllm_cpu {
    const tb_model *m;
    tb_engine *eng;   /* the engine it runs on: own, or the plugin's */
    tb_engine own;    /* tb_dllm_cpu_init's */
    int shifted;      /* Dream */
    int cap_seqs, cap_len;
    int threads;
    int32_t *rows;    /* [seqs][len]: the span's tokens */
    float *scratch;   /* [seqs][len][vocab]: the span's logits */
    float *prob;      /* [vocab]: Dream's probabilities of one row */
    /* why the last forward failed, when it was this binding's (its
     * buffers); the engine's reason is the engine's error() */
    char error[256];
} tb_dllm_cpu;

/* Bind to a model on an engine of its own (the tests; no allocation
 * yet), or to `eng`, a CPU engine of m that the caller reserves, pads and
 * frees (the plugin: tb_engine_open). */
void tb_dllm_cpu_init(tb_dllm_cpu *e, const tb_model *m, int threads);
void tb_dllm_cpu_bind(tb_dllm_cpu *e, const tb_model *m, tb_engine *eng);
/* Room for `seqs` canvases of `len` positions: the engine's cache (its own
 * engine only) and the span buffers (a bound engine's grow as its
 * forwards need them); 0 or -1 with err. */
int tb_dllm_cpu_reserve(tb_dllm_cpu *e, int seqs, int len, char *err, size_t err_size);
void tb_dllm_cpu_free(tb_dllm_cpu *e);
/* The span's logits of `rows` canvases into e->scratch ([rows][n][vocab],
 * shifted for Dream). 0 or -1. */
int tb_dllm_cpu_logits(tb_dllm_cpu *e, const int32_t *canvas, int rows, int L, int pos0, int n, int n_attend);
/* The engine table for tb_dllm_generate. */
tb_dllm_engine tb_dllm_cpu_engine(tb_dllm_cpu *e);

#endif
