/* sampling.c — see sampling.h. */
#define _GNU_SOURCE
#include "sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t tb_argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

double tb_rng_uniform(uint64_t *rng)
{
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* Descending order of probabilities; ties by index for determinism. */
static int by_prob_desc(const void *a, const void *b, void *keys)
{
    const float *p = keys;
    float pa = p[*(const int32_t *)a], pb = p[*(const int32_t *)b];
    if (pa != pb)
        return pa > pb ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

/* The candidates tb_sample draws from: p[n] the softmax of logits / T,
 * idx[0..keep) the ids kept by top-k then top-p (sorted by probability
 * when either is on, else every id in order). Returns keep. */
static int candidates(const float *logits, int n, const tb_sampling *s, float *p, int32_t *idx)
{
    float mx = logits[tb_argmax(logits, n)];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        p[i] = expf((float)((logits[i] - mx) / s->temperature));
        sum += p[i];
        idx[i] = i;
    }
    for (int i = 0; i < n; i++)
        p[i] = (float)(p[i] / sum);
    int keep = n;
    if (s->top_k > 0 || s->top_p < 1) {
        qsort_r(idx, (size_t)n, sizeof *idx, by_prob_desc, p);
        if (s->top_k > 0 && s->top_k < keep)
            keep = s->top_k;
        if (s->top_p < 1) {
            /* the smallest prefix whose mass reaches top_p (at least one) */
            double cum = 0;
            int k = 0;
            while (k < keep) {
                cum += p[idx[k++]];
                if (cum >= s->top_p)
                    break;
            }
            keep = k;
        }
    }
    return keep;
}

int32_t tb_sample(const float *logits, int n, const tb_sampling *s, uint64_t *rng, float *scratch)
{
    if (s->temperature <= 0)
        return tb_argmax(logits, n);
    float *p = scratch;                      /* probabilities */
    int32_t *idx = (int32_t *)(scratch + n); /* candidate ids, sorted */
    int keep = candidates(logits, n, s, p, idx);
    double mass = 0;
    for (int k = 0; k < keep; k++)
        mass += p[idx[k]];
    double u = tb_rng_uniform(rng) * mass, acc = 0;
    for (int k = 0; k < keep; k++) {
        acc += p[idx[k]];
        if (u < acc)
            return idx[k];
    }
    return idx[keep - 1];
}

void tb_sample_dist(const float *logits, int n, const tb_sampling *s, float *probs, float *scratch)
{
    if (s->temperature <= 0) {
        memset(probs, 0, (size_t)n * sizeof *probs);
        probs[tb_argmax(logits, n)] = 1;
        return;
    }
    float *p = scratch;
    int32_t *idx = (int32_t *)(scratch + n);
    int keep = candidates(logits, n, s, p, idx);
    double mass = 0;
    for (int k = 0; k < keep; k++)
        mass += p[idx[k]];
    memset(probs, 0, (size_t)n * sizeof *probs);
    for (int k = 0; k < keep; k++)
        probs[idx[k]] = (float)(p[idx[k]] / mass);
}
