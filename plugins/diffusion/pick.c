/* pick.c — see pick.h. The CPU reference of the GPU pick kernel. */
#include "pick.h"

#include <math.h>
#include <string.h>

double tb_dllm_uniform(uint64_t *rng)
{
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * 0x1.0p-53; /* (0, 1): log() is finite */
}

/* LLaDA: x0 = argmax(logits), or Gumbel-max argmax(exp(l) / (-log u)^T)
 * in float64; confidence = softmax probability of x0 in float64. */
static void llada_pick(const float *logits, int V, const tb_dllm_pick_spec *s, uint64_t *rng, int32_t *x0,
                       double *conf)
{
    int best = -1, never = s->suppress1 - 1; /* never: -1 = none */
    if (s->temperature > 0) {
        double bv = -1;
        for (int v = 0; v < V; v++) {
            double g = exp((double)logits[v]) / pow(-log(tb_dllm_uniform(rng)), s->temperature);
            if (v != never && g > bv)
                bv = g, best = v;
        }
    } else {
        for (int v = 0; v < V; v++)
            if (v != never && (best < 0 || logits[v] > logits[best]))
                best = v;
    }
    *x0 = best;
    double mx = logits[best];
    for (int v = 0; v < V; v++)
        if (v != never && logits[v] > mx)
            mx = logits[v];
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += v != never ? exp((double)logits[v] - mx) : 0.0;
    *conf = exp((double)logits[best] - mx) / sum;
}

/* Dream's sample_tokens: float32 probabilities after temperature and
 * top-k; x0 = argmax (T = 0) or a draw; confidence by kind. */
static void dream_pick(const float *logits, int V, const tb_dllm_pick_spec *s, uint64_t *rng, float *prob,
                       int32_t *x0, double *conf)
{
    float T = s->temperature > 0 ? (float)s->temperature : 1.0f;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) {
        prob[v] = logits[v] / T;
        mx = prob[v] > mx ? prob[v] : mx;
    }
    float sum = 0;
    for (int v = 0; v < V; v++) {
        prob[v] = expf(prob[v] - mx);
        sum += prob[v];
    }
    for (int v = 0; v < V; v++)
        prob[v] /= sum;
    if (s->top_k > 0 && s->top_k < V) {
        /* the k-th largest probability; keep those at least as large */
        float kth = 0;
        for (int k = 0, last = -1; k < s->top_k; k++) {
            int b = -1;
            for (int v = 0; v < V; v++)
                if ((last < 0 || prob[v] < prob[last] || (prob[v] == prob[last] && v > last)) &&
                    (b < 0 || prob[v] > prob[b]))
                    b = v;
            last = b;
            kth = prob[b];
        }
        float z = 0;
        for (int v = 0; v < V; v++) {
            if (prob[v] < kth)
                prob[v] = 0;
            z += prob[v];
        }
        for (int v = 0; v < V; v++)
            prob[v] /= z;
    }
    int best = 0;
    for (int v = 1; v < V; v++)
        if (prob[v] > prob[best])
            best = v;
    if (s->temperature > 0) {
        double u = tb_dllm_uniform(rng), acc = 0;
        best = V - 1;
        for (int v = 0; v < V; v++) {
            acc += prob[v];
            if (u < acc) {
                best = v;
                break;
            }
        }
    }
    *x0 = best;
    if (s->conf == TB_DLLM_CONF_DREAM_MARGIN) {
        float a = -1, b = -1;
        for (int v = 0; v < V; v++) {
            if (prob[v] > a)
                b = a, a = prob[v];
            else if (prob[v] > b)
                b = prob[v];
        }
        *conf = (double)(a - b);
    } else if (s->conf == TB_DLLM_CONF_DREAM_ENTROPY) {
        float h = 0;
        for (int v = 0; v < V; v++)
            h += prob[v] * logf(prob[v] + 1e-10f);
        *conf = h;
    } else {
        *conf = prob[best];
    }
}

void tb_dllm_pick_row(const float *logits, int V, const tb_dllm_pick_spec *s, uint64_t *rng, float *scratch,
                      int32_t *x0, double *conf)
{
    if (s->conf == TB_DLLM_CONF_LLADA_PROB)
        llada_pick(logits, V, s, rng, x0, conf);
    else
        dream_pick(logits, V, s, rng, scratch, x0, conf);
}
