/* flow_cpu.h — the flow model's network on the CPU (float32, OpenBLAS for
 * every product): f(z, gamma, x_sc) -> logits, and the readout x0_hat =
 * softmax(logits) E (flow_model.h has the formulas). The reference for any
 * other engine of it (tests/test_flow.c holds it to the PyTorch one). */
#ifndef TB_FLOW_CPU_H
#define TB_FLOW_CPU_H

#include <stddef.h>

#include "flow_model.h"

typedef struct tb_flow_cpu {
    const tb_flow_model *m;
    int max_seqs, max_len; /* a call: B <= max_seqs canvases of L <= max_len */
    float *x, *h, *qkv, *att, *up, *cat; /* [rows][D | 3D | D | F | 2D] */
    float *scores;                       /* [L][L]: one head's attention */
    float *cond, *mod;                   /* [2B][C], [2B][6D]: canvas levels, then prompt levels */
    float *tf;                           /* [freq_dim] */
    size_t bytes;
} tb_flow_cpu;

/* n_threads <= 0: every online CPU. 0, or -1 with the reason. */
int tb_flow_cpu_init(tb_flow_cpu *st, const tb_flow_model *m, int max_seqs, int max_len, int n_threads, char *err,
                     size_t err_size);
void tb_flow_cpu_free(tb_flow_cpu *st);

/* logits[B][L][V] = f(z, gamma[b], x_sc) for B canvases of L positions:
 * z and x_sc [B][L][D] (x_sc NULL: zeros, the first step; ignored by a
 * model without self-conditioning). pad[B] (NULL: none): canvas b's first
 * pad[b] positions are left padding (prompts of unequal lengths), masked
 * as keys, RoPE counting from the first real position. Positions
 * [0, gen0) of each canvas are its prompt (clean conditions; 0: none): with
 * the config's prompt_gamma_min they are conditioned on the schedule's
 * lowest level (tb_flow_gamma_min), the rest on gamma[b]. Returns 0, or -1
 * when the call does not fit the state. */
int tb_flow_cpu_forward(tb_flow_cpu *st, const float *z, const float *x_sc, const double *gamma, const int *pad,
                        int B, int L, int gen0, float *logits);

/* x0[rows][D] = softmax(logits[rows][V]) E, the softmax in float64 per row
 * (logits is overwritten with the probabilities). */
void tb_flow_cpu_x0(const tb_flow_model *m, float *logits, size_t rows, float *x0);

#endif
