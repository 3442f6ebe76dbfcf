/* pick.h — what a diffusion step needs from the logits of one position:
 * the proposed token x0 and its confidence. Computed by the engine (CPU
 * here, a kernel on the GPU) so that only [rows] x0/confidence pairs, not
 * [rows][vocab] logits, reach the sampler.
 *
 *   LLaDA family: x0 = argmax (Gumbel-max in float64 when T > 0);
 *                 confidence = softmax probability of x0 in float64.
 *   Dream:        probabilities in float32 after temperature and top-k;
 *                 x0 = argmax (a draw when T > 0); confidence = p(x0),
 *                 top-1 minus top-2, or sum p log(p + 1e-10).
 * With classifier-free guidance the logits are first combined as
 * u + (cfg + 1)(c - u), c from the canvas, u from its unconditional twin. */
#ifndef TB_DIFFUSION_PICK_H
#define TB_DIFFUSION_PICK_H

#include <stdint.h>

typedef enum tb_dllm_conf {
    TB_DLLM_CONF_LLADA_PROB,   /* float64 softmax of the argmax */
    TB_DLLM_CONF_DREAM_PROB,   /* float32 probability of x0 */
    TB_DLLM_CONF_DREAM_MARGIN, /* top-1 minus top-2 probability */
    TB_DLLM_CONF_DREAM_ENTROPY /* sum p log(p + 1e-10) (negative entropy) */
} tb_dllm_conf;

typedef struct tb_dllm_pick_spec {
    tb_dllm_conf conf;
    double temperature; /* 0: argmax */
    int top_k;          /* Dream: 0 = off */
    double cfg_scale;   /* > 0: the canvas holds 2B rows, the last B unconditional */
    /* LLaDA family: 1 + the id of a token never proposed, its logit taken
     * as -inf (block samplers: the mask token, only where upstream's loop
     * would fail or not end: block_sampler.h); 0 = none */
    int32_t suppress1;
} tb_dllm_pick_spec;

/* One position: logits[V] → x0, confidence. scratch holds V floats; rng is
 * drawn from only when temperature > 0. */
void tb_dllm_pick_row(const float *logits, int V, const tb_dllm_pick_spec *s, uint64_t *rng, float *scratch,
                      int32_t *x0, double *conf);

/* A uniform double in (0, 1) from a splitmix64 stream. */
double tb_dllm_uniform(uint64_t *rng);

#endif
