/* sampling.h — choosing the next token from logits: greedy (argmax, first
 * maximum as torch.argmax) or sampling with temperature, top-k and top-p in
 * the order transformers applies them, from our own seeded generator. */
#ifndef TB_ENGINE_SAMPLING_H
#define TB_ENGINE_SAMPLING_H

#include <stdint.h>

typedef struct tb_sampling {
    double temperature; /* 0: greedy */
    int top_k;          /* 0: off */
    double top_p;       /* 1: off */
} tb_sampling;

/* Index of the first maximum of x[0..n). */
int32_t tb_argmax(const float *x, int n);

/* The next token. scratch must hold 2 n floats. *rng is advanced. */
int32_t tb_sample(const float *logits, int n, const tb_sampling *s, uint64_t *rng, float *scratch);

/* The distribution tb_sample draws from, as probabilities probs[n]: zero
 * outside the top-k / top-p candidates, the rest renormalised to sum 1;
 * temperature 0: all mass on the argmax. For speculative decoding's
 * rejection rule (plugins/ar/spec.c), which needs p and q whole. scratch
 * must hold 2 n floats; probs may not alias it. */
void tb_sample_dist(const float *logits, int n, const tb_sampling *s, float *probs, float *scratch);

/* A uniform double in [0, 1) from a splitmix64 stream. */
double tb_rng_uniform(uint64_t *rng);

#endif
