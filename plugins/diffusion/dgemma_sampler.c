/* dgemma_sampler.c — see dgemma_sampler.h. */
#define _GNU_SOURCE
#include "dgemma_sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tb_dg_params_default(tb_dg_params *p)
{
    *p = (tb_dg_params){.max_steps = 48, .t_min = 0.4, .t_max = 0.8, .entropy_bound = 0.1, .stability = 1,
                        .confidence = 0.005, .max_new_tokens = 256, .pad_id = 0};
}

int tb_dg_params_check(const tb_dg_params *p, char *why, size_t why_size)
{
    const char *bad = p->max_steps < 1 || p->max_steps > 100000   ? "max_steps must be in [1, 100000]"
                      : !(p->t_min >= 0) || !(p->t_max > p->t_min) ? "t_max must be above t_min >= 0"
                      : !(p->entropy_bound > 0)                     ? "entropy_bound must be > 0"
                      : p->stability < 0 || p->stability > 1000     ? "stability must be in [0, 1000]"
                      : !(p->confidence > 0)                        ? "confidence must be > 0"
                      : p->max_new_tokens < 1                       ? "max_new_tokens must be >= 1"
                      : p->n_eos < 0 || (p->n_eos && !p->eos_ids)   ? "eos_ids: n_eos without ids"
                                                                    : NULL;
    if (bad)
        snprintf(why, why_size, "DiffusionGemma sampler: %s", bad);
    return bad ? -1 : 0;
}

float tb_dg_temperature(const tb_dg_params *p, int s)
{
    /* t_min + ((t_max - t_min) * (cur_step / max_steps)) with cur_step an
     * int32 tensor: the division and the rest in float32 */
    float frac = (float)s / (float)p->max_steps;
    return (float)p->t_min + (float)(p->t_max - p->t_min) * frac;
}

/* ---------------------------------------------------------------- noise */

void tb_dg_rng_seed(tb_dg_rng *r, uint64_t seed)
{
    r->seed = seed, r->n = 0;
}

uint64_t tb_dg_rng_next(tb_dg_rng *r)
{
    uint64_t z = r->seed + (r->n + 1) * 0x9E3779B97F4A7C15ULL;
    r->n++;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void tb_dg_rng_ids(tb_dg_rng *r, int32_t *out, int n, int vocab)
{
    for (int i = 0; i < n; i++)
        out[i] = (int32_t)(tb_dg_rng_next(r) % (uint64_t)vocab);
}

void tb_dg_rng_exp(tb_dg_rng *r, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double u = ((double)(tb_dg_rng_next(r) >> 11) + 0.5) * 0x1p-53;
        out[i] = (float)-log(u);
    }
}

/* ------------------------------------------------------------- a step */

void tb_dg_accept(double bound, const float *entropy, int C, unsigned char *accept, int *order)
{
    /* ascending entropy, equal ones by position (insertion sort: C <= a few hundred) */
    for (int i = 0; i < C; i++) {
        int j = i;
        for (; j > 0 && entropy[order[j - 1]] > entropy[i]; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    /* torch.cumsum accumulates float32 in double on the CPU; then
     * (cumsum - own) <= bound, in float32 */
    double run = 0;
    for (int r = 0; r < C; r++) {
        float e = entropy[order[r]];
        run += e;
        float before = (float)run - e;
        accept[order[r]] = before <= (float)bound;
    }
}

void tb_dg_decide(const tb_dg_params *p, int C, int V, int remaining, float *logits, const float *q,
                  const int32_t *input, const int32_t *renoise, int32_t *sampled, int32_t *argmax,
                  unsigned char *accept, float *entropy, int32_t *next, double *mean_entropy, int *order)
{
    float T = tb_dg_temperature(p, remaining);
    for (int i = 0; i < C; i++) {
        float *z = logits + (size_t)i * V;
        const float *qi = q + (size_t)i * V;
        int am = 0;
        for (int v = 0; v < V; v++) {
            z[v] = z[v] / T;
            if (z[v] > z[am])
                am = v;
        }
        argmax[i] = am;
        /* softmax in float32 for the draw; entropy from log_softmax in double */
        float mx = z[am];
        double sum = 0;
        for (int v = 0; v < V; v++)
            sum += exp((double)z[v] - mx);
        double lse = mx + log(sum);
        float inv = (float)(1.0 / sum);
        double h = 0;
        int best = 0;
        float best_r = -1;
        for (int v = 0; v < V; v++) {
            float pv = expf(z[v] - mx) * inv;
            float ratio = pv / qi[v];
            if (ratio > best_r)
                best_r = ratio, best = v;
            double lp = (double)z[v] - lse;
            h -= exp(lp) * lp;
        }
        sampled[i] = best;
        entropy[i] = (float)h;
    }
    tb_dg_settle(p, C, entropy, sampled, renoise, accept, next, mean_entropy, order);
    (void)input;
}

void tb_dg_settle(const tb_dg_params *p, int C, const float *entropy, const int32_t *sampled, const int32_t *renoise,
                  unsigned char *accept, int32_t *next, double *mean_entropy, int *order)
{
    double total = 0;
    for (int i = 0; i < C; i++)
        total += entropy[i];
    *mean_entropy = total / C;
    tb_dg_accept(p->entropy_bound, entropy, C, accept, order);
    for (int i = 0; i < C; i++)
        next[i] = accept[i] ? sampled[i] : renoise[i];
}

/* ------------------------------------------------------------ a request */

int tb_dg_max_output(const tb_dg_params *p, int C)
{
    return (p->max_new_tokens + C - 1) / C * C;
}

typedef struct draw {
    const tb_dg_noise *noise;
    tb_dg_rng rng;
} draw;

static void draw_ids(draw *d, int32_t *out, int n, int vocab)
{
    if (d->noise && d->noise->ids)
        d->noise->ids(d->noise->ctx, out, n, vocab);
    else
        tb_dg_rng_ids(&d->rng, out, n, vocab);
}

static void draw_exp(draw *d, float *out, size_t n)
{
    if (d->noise && d->noise->exp)
        d->noise->exp(d->noise->ctx, out, n);
    else
        tb_dg_rng_exp(&d->rng, out, n);
}

static int is_eos(const tb_dg_params *p, int32_t t)
{
    for (int e = 0; e < p->n_eos; e++)
        if (p->eos_ids[e] == t)
            return 1;
    return 0;
}

int tb_dg_generate(const tb_dg_engine *e, const tb_dg_params *p, const int32_t *prompt, int P, uint64_t seed,
                   const tb_dg_noise *noise, const tb_dg_hooks *h, int32_t *out, int *n_out, tb_dg_stats *stats,
                   char *why, size_t why_size)
{
    static const tb_dg_hooks none = {0};
    if (!h)
        h = &none;
    *n_out = 0;
    memset(stats, 0, sizeof *stats);
    if (tb_dg_params_check(p, why, why_size))
        return -1;
    int C = e->canvas, V = e->vocab, S = p->stability;
    size_t cv = (size_t)C * V;
    /* the engine's device decides unless another noise source draws the Exp(1) values */
    int on_device = e->denoise_decide && !(noise && noise->exp);
    size_t host_cv = on_device ? 1 : cv; /* the [C][V] buffers: only on the host path */
    float *logits = malloc(host_cv * sizeof *logits), *sc = malloc(host_cv * sizeof *sc);
    float *q = malloc(host_cv * sizeof *q);
    float *entropy = malloc((size_t)C * sizeof *entropy);
    int32_t *ids = malloc((size_t)C * 6 * sizeof *ids);
    int32_t *hist = malloc(((size_t)S + 1) * C * sizeof *hist);
    unsigned char *accept = malloc((size_t)C);
    int *order = malloc((size_t)C * sizeof *order);
    int rc = -1;
    if (!logits || !sc || !q || !entropy || !ids || !hist || !accept || !order) {
        snprintf(why, why_size, "out of memory: DiffusionGemma sampler buffers (%zu floats)", 3 * cv);
        goto done;
    }
    int32_t *canvas = ids, *sampled = ids + C, *argmax = ids + 2 * C, *next = ids + 3 * C, *renoise = ids + 4 * C;
    int32_t *committed = ids + 5 * C;
    draw d = {noise, {0, 0}};
    tb_dg_rng_seed(&d.rng, seed);
    int n_canvases = tb_dg_max_output(p, C) / C;
    if (e->encode(e->ctx, prompt, P)) {
        snprintf(why, why_size, "DiffusionGemma: the prompt's encoder pass failed (%d tokens)", P);
        goto done;
    }
    stats->encodes++;
    if (h->on_prefill)
        h->on_prefill(h->ctx);
    for (int k = 0; k < n_canvases; k++) {
        if (k > 0) { /* the committed canvas joins the cache */
            if (e->encode(e->ctx, committed, C)) {
                snprintf(why, why_size, "DiffusionGemma: the encoder pass of canvas %d failed", k - 1);
                goto done;
            }
            stats->encodes++;
        }
        draw_ids(&d, canvas, C, V);
        for (size_t i = 0; i < (size_t)S * C; i++)
            hist[i] = -1;
        int have_sc = 0, steps = 0;
        for (int s = p->max_steps; s >= 1; s--) {
            if (h->cancelled && h->cancelled(h->ctx)) {
                snprintf(why, why_size, "cancelled");
                goto done;
            }
            double mean;
            if (on_device) { /* the per-position work there; the Exp(1) values are the stream's next cv */
                uint64_t n0 = d.rng.n;
                d.rng.n += cv;
                if (e->denoise_decide(e->ctx, canvas, have_sc, tb_dg_temperature(p, s), d.rng.seed, n0, sampled,
                                      argmax, entropy)) {
                    snprintf(why, why_size, "DiffusionGemma: the canvas pass failed (canvas %d, step %d)", k, steps);
                    goto done;
                }
                steps++, stats->steps++;
                draw_ids(&d, renoise, C, V);
                tb_dg_settle(p, C, entropy, sampled, renoise, accept, next, &mean, order);
            } else {
                if (e->denoise(e->ctx, canvas, have_sc ? sc : NULL, logits)) {
                    snprintf(why, why_size, "DiffusionGemma: the canvas pass failed (canvas %d, step %d)", k, steps);
                    goto done;
                }
                steps++, stats->steps++;
                draw_exp(&d, q, cv);
                draw_ids(&d, renoise, C, V);
                tb_dg_decide(p, C, V, s, logits, q, canvas, renoise, sampled, argmax, accept, entropy, next, &mean,
                             order);
            }
            int stable = 1;
            for (int j = 0; j < S && stable; j++)
                stable = memcmp(hist + (size_t)j * C, argmax, (size_t)C * sizeof *argmax) == 0;
            if (S > 0) { /* roll: drop the oldest, append this step's */
                memmove(hist, hist + C, (size_t)(S - 1) * C * sizeof *hist);
                memcpy(hist + (size_t)(S - 1) * C, argmax, (size_t)C * sizeof *argmax);
            }
            int confident = (float)mean < (float)p->confidence;
            int stop = (stable && confident) || s == 1;
            if (h->on_step) {
                tb_dg_step v = {k, steps - 1, s, tb_dg_temperature(p, s), canvas, sampled, argmax, next, accept,
                                entropy, mean, stable, confident, stop, on_device ? NULL : logits};
                h->on_step(h->ctx, &v);
            }
            memcpy(committed, argmax, (size_t)C * sizeof *argmax);
            memcpy(canvas, next, (size_t)C * sizeof *next);
            if (!on_device) /* (the device keeps its own z) */
                memcpy(sc, logits, cv * sizeof *sc);
            have_sc = 1;
            if (stop)
                break;
        }
        /* commit the argmax canvas; EOS: pad after the first, and stop */
        int32_t *o = out + (size_t)k * C;
        int first_eos = -1, n_valid = 0;
        for (int i = 0; i < C; i++) {
            o[i] = first_eos >= 0 ? p->pad_id : committed[i];
            if (first_eos < 0 && is_eos(p, committed[i]))
                first_eos = i;
            n_valid += o[i] != p->pad_id;
        }
        *n_out += C;
        stats->canvases++;
        stats->committed += n_valid;
        if (h->on_commit)
            h->on_commit(h->ctx, k, o, n_valid, steps);
        if (first_eos >= 0) {
            stats->eos = 1;
            break;
        }
    }
    rc = 0;
done:
    free(logits), free(sc), free(q), free(entropy), free(ids), free(hist), free(accept), free(order);
    return rc;
}
