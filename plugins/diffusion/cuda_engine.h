/* cuda_engine.h — the samplers' forward (dllm.h's tb_dllm_engine) on the
 * CUDA engine (gpu.h), the twin of cpu_engine.h: at temperature 0 the
 * picks are made on the device (kernels_pick.cu) and only tokens and
 * confidences come back; when sampling, the pick rows' logits come to the
 * host and go through the CPU path's own pick (pick.c) with the same
 * random stream, so the GPU samples exactly as the CPU does from its
 * logits. CUDA builds only. */
#ifndef TB_DIFFUSION_CUDA_ENGINE_H
#define TB_DIFFUSION_CUDA_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "dllm.h"

struct tb_gpu;

typedef struct tb_dllm_cuda {
    struct tb_gpu *g;
    int vocab;
    int shifted;           /* Dream: position i is predicted from i - 1 */
    float *host_logits;    /* sampling on the host: [rows][npick][vocab] */
    size_t host_logits_cap;
    float *host_prob;      /* [vocab]: tb_dllm_pick_row's scratch */
    /* why the last forward failed (the sampler's message says only
     * where), "" when it did not */
    char error[256];
} tb_dllm_cuda;

/* Bind to a device model of `vocab` tokens (no allocation yet). */
void tb_dllm_cuda_init(tb_dllm_cuda *e, struct tb_gpu *g, int vocab, int shifted);
void tb_dllm_cuda_free(tb_dllm_cuda *e);
/* The engine table for tb_dllm_generate. */
tb_dllm_engine tb_dllm_cuda_engine(tb_dllm_cuda *e);

#endif
