/* sampler.c — see sampler.h. Transcribed from the algorithms' published
 * descriptions (LLaDA's generate, Fast-dLLM's threshold and caches, Dream's
 * _sample); tests/test_diffusion.c checks every step against a PyTorch
 * reference (tools/make_diffusion_golden.py). */
#define _GNU_SOURCE
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int llada_family(tb_dllm_sampler s)
{
    return s == TB_DLLM_LOW_CONFIDENCE || s == TB_DLLM_RANDOM || s == TB_DLLM_THRESHOLD;
}

int tb_dllm_bidir_validate(const tb_dllm_params *p, char *why, size_t n)
{
    if (p->gen_length < 1) {
        snprintf(why, n, "gen_length (max_new_tokens) must be >= 1");
        return -1;
    }
    if (p->steps < 1) {
        snprintf(why, n, "steps must be >= 1");
        return -1;
    }
    if (llada_family(p->sampler)) {
        /* a top_k they would ignore is refused, not dropped (a request to
         * serve, or a suite, would read as honoured) */
        if (p->top_k > 0) {
            snprintf(why, n, "top_k %d: the LLaDA samplers pick by argmax (Gumbel noise with a temperature) and have "
                             "no top-k; Dream's algorithms do", p->top_k);
            return -1;
        }
        if (p->block_length < 1 || p->gen_length % p->block_length != 0) {
            snprintf(why, n, "gen_length %d is not a multiple of block_length %d", p->gen_length, p->block_length);
            return -1;
        }
        int blocks = p->gen_length / p->block_length;
        /* upstream's schedule gives each step of a block block_length /
         * steps-per-block tokens: past one a step, steps commit nothing
         * (and the schedule alone holds steps ints per canvas) */
        if (p->sampler != TB_DLLM_THRESHOLD && p->steps > p->gen_length) {
            snprintf(why, n, "steps %d exceeds gen_length %d (max_new_tokens): a step commits at least one token",
                     p->steps, p->gen_length);
            return -1;
        }
        if (p->sampler != TB_DLLM_THRESHOLD && p->steps % blocks != 0) {
            snprintf(why, n, "steps %d is not a multiple of the block count %d (gen_length %d / block_length %d)",
                     p->steps, blocks, p->gen_length, p->block_length);
            return -1;
        }
    } else {
        if (p->block_length != p->gen_length) {
            snprintf(why, n, "sampler %s has no blocks: block_length must equal gen_length (or be left unset)",
                     tb_choice_name(tb_dllm_sampler_choices, p->sampler));
            return -1;
        }
        if (p->cache != TB_DLLM_CACHE_NONE) {
            snprintf(why, n, "cache = %s needs a LLaDA-family sampler (low_confidence, random, threshold)",
                     tb_choice_name(tb_dllm_cache_choices, p->cache));
            return -1;
        }
        if (p->steps > p->gen_length) {
            snprintf(why, n, "steps %d exceeds gen_length %d", p->steps, p->gen_length);
            return -1;
        }
    }
    if (p->sampler == TB_DLLM_THRESHOLD && !(p->threshold > 0 && p->threshold <= 1)) {
        snprintf(why, n, "threshold %g is outside (0, 1]", p->threshold);
        return -1;
    }
    if (p->cfg_scale > 0 && (!llada_family(p->sampler) || p->cache != TB_DLLM_CACHE_NONE)) {
        snprintf(why, n, "cfg_scale > 0 needs a LLaDA-family sampler without cache");
        return -1;
    }
    if (p->temperature < 0 || p->eps <= 0 || p->eps >= 1) {
        snprintf(why, n, "temperature must be >= 0 and eps in (0, 1)");
        return -1;
    }
    return 0;
}

/* torch.linspace(1, eps, points) in float32, element i: the first half
 * counts up from start, the second half down from end. */
static float linspace_f32(float start, float end, int points, int i)
{
    float step = (end - start) / (float)(points - 1);
    return i < points / 2 ? start + step * (float)i : end - step * (float)(points - 1 - i);
}

int tb_dllm_dream_transfer(int n, int i, int steps, double eps)
{
    if (i >= steps - 1)
        return n;
    float t = linspace_f32(1.0f, (float)eps, steps + 1, i), s = linspace_f32(1.0f, (float)eps, steps + 1, i + 1);
    float frac = 1.0f - s / t;
    return (int)((float)n * frac);
}

/* Indices of the k largest conf[] among candidates (conf = -inf excluded),
 * ties broken by the lower index. Returns how many were chosen. used[n]:
 * scratch. */
static int top_k_indices(const double *conf, int n, int k, int *out, char *used)
{
    int chosen = 0;
    if (n <= 0)
        return 0;
    memset(used, 0, (size_t)n);
    for (; chosen < k; chosen++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!used[i] && conf[i] > -INFINITY && (best < 0 || conf[i] > conf[best]))
                best = i;
        if (best < 0)
            break;
        used[best] = 1;
        out[chosen] = best;
    }
    return chosen;
}

/* ------------------------------------------------------------ driver */

typedef struct run {
    const tb_dllm_engine *e;
    const tb_dllm_params *p;
    const tb_dllm_hooks *h;
    tb_dllm_pick_spec spec;
    int32_t *canvas;
    int B, L, P, V;
    int32_t *x0;   /* [B][n]: the engine's proposals for the span run last */
    double *conf;  /* [B][n] */
    double *cand;  /* [L]: one request's confidences, -inf = not a candidate */
    int *pick;     /* [L] */
    char *used;    /* [L]: scratch of the position pickers */
    double *w;     /* [L]: sample_k_indices' weights */
    int32_t *cfg_canvas; /* [2B][L] */
    /* the canvas in progress (tb_dllm_hooks.on_canvas): the batch's step
     * forwards and the rows each ran per request (every request runs
     * every forward here), and the tokens each request committed ([B]) */
    int cv_steps;
    int64_t cv_pos;
    int *cv_commit;
    uint64_t rng;
    tb_dllm_stats *stats;
    char *why;
    size_t why_size;
} run;

static int do_forward(run *r, int pos0, int n, int n_attend, int pick0, int npick)
{
    r->stats->forwards++;
    r->cv_steps++;
    r->cv_pos += (int64_t)n * (r->p->cfg_scale > 0 ? 2 : 1);
    const int32_t *canvas = r->canvas;
    if (r->p->cfg_scale > 0) {
        /* the canvases, then the same with their prompts masked */
        int B = r->B, L = r->L;
        memcpy(r->cfg_canvas, r->canvas, (size_t)B * L * sizeof(int32_t));
        memcpy(r->cfg_canvas + (size_t)B * L, r->canvas, (size_t)B * L * sizeof(int32_t));
        for (int b = 0; b < B; b++)
            for (int i = 0; i < r->P; i++)
                r->cfg_canvas[(size_t)(B + b) * L + i] = r->p->mask_id;
        canvas = r->cfg_canvas;
    }
    if (r->e->forward_pick(r->e->ctx, canvas, r->B, r->L, pos0, n, n_attend, pick0, npick, &r->spec, &r->rng, r->x0,
                           r->conf) != 0) {
        snprintf(r->why, r->why_size, "forward failed (positions %d..%d of %d, batch %d)", pos0, pos0 + n, r->L, r->B);
        return -1;
    }
    return 0;
}

/* One LLaDA-family step over the logits of span [pos0, pos0 + n): for every
 * request, commit among masked positions of [bs, be) either want[b] tokens
 * or (threshold) every confident one plus the best. */
static void llada_commit(run *r, int pos0, int n, int bs, int be, const int *want)
{
    const tb_dllm_params *p = r->p;
    int L = r->L;
    double *cand = r->cand;
    for (int b = 0; b < r->B; b++) {
        int32_t *x = r->canvas + (size_t)b * L;
        const int32_t *x0 = r->x0 + (size_t)b * n; /* index: position - pos0 */
        const double *conf = r->conf + (size_t)b * n;
        int masked = 0;
        for (int i = 0; i < L; i++) {
            cand[i] = -INFINITY;
            if (i < bs || i >= be || x[i] != p->mask_id)
                continue;
            cand[i] = p->sampler == TB_DLLM_RANDOM ? tb_dllm_uniform(&r->rng) : conf[i - pos0];
            masked++;
        }
        int k = p->sampler == TB_DLLM_THRESHOLD ? masked : want[b];
        int got = top_k_indices(cand, L, k, r->pick, r->used);
        int committed = 0;
        for (int j = 0; j < got; j++) {
            if (p->sampler == TB_DLLM_THRESHOLD && j > 0 && cand[r->pick[j]] < p->threshold)
                continue; /* the best one always goes in */
            x[r->pick[j]] = x0[r->pick[j] - pos0];
            committed++;
        }
        r->cv_commit[b] += committed;
        if (committed && r->h && r->h->on_commit)
            r->h->on_commit(r->h->ctx, b, committed);
    }
}

/* Every request's canvas in progress is committed. */
static void canvas_done(run *r)
{
    for (int b = 0; b < r->B; b++) {
        if (r->h && r->h->on_canvas)
            r->h->on_canvas(r->h->ctx, b, r->cv_steps, r->cv_commit[b], r->cv_pos);
        r->cv_commit[b] = 0;
    }
    r->cv_steps = 0;
    r->cv_pos = 0;
}

static int block_has_mask(const run *r, int bs, int be)
{
    for (int b = 0; b < r->B; b++)
        for (int i = bs; i < be; i++)
            if (r->canvas[(size_t)b * r->L + i] == r->p->mask_id)
                return 1;
    return 0;
}

static int step_done(run *r)
{
    r->stats->steps++;
    if (r->h && r->h->on_step)
        r->h->on_step(r->h->ctx, r->stats->steps, r->canvas, r->B, r->L);
    return r->h && r->h->cancelled && r->h->cancelled(r->h->ctx) ? 1 : 0;
}

/* Dream with alg_temp > 0: k distinct positions drawn without
 * replacement with probability softmax(conf / alg_temp) over the
 * candidates (conf = -inf excluded), as torch.multinomial does. w[n] and
 * used[n]: scratch. */
static int sample_k_indices(const double *conf, int n, int k, double temp, uint64_t *rng, int *out, double *w,
                            char *used)
{
    double mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (conf[i] > mx)
            mx = conf[i];
    if (mx == -INFINITY)
        return 0;
    double total;
    for (int i = 0; i < n; i++)
        w[i] = conf[i] > -INFINITY ? exp((conf[i] - mx) / temp) : 0;
    memset(used, 0, (size_t)n);
    int chosen = 0;
    for (; chosen < k; chosen++) {
        int pick = -1;
        total = 0; /* re-summed: subtracting would leave rounding behind */
        for (int i = 0; i < n; i++)
            total += w[i];
        if (total > 0) {
            double u = tb_dllm_uniform(rng) * total, acc = 0;
            for (int i = 0; i < n; i++)
                if (w[i] > 0) {
                    pick = i; /* the last candidate catches rounding */
                    acc += w[i];
                    if (u < acc)
                        break;
                }
        } else { /* weights underflowed: the most confident left */
            for (int i = 0; i < n; i++)
                if (!used[i] && conf[i] > -INFINITY && (pick < 0 || conf[i] > conf[pick]))
                    pick = i;
        }
        if (pick < 0)
            break;
        out[chosen] = pick;
        used[pick] = 1;
        w[pick] = 0;
    }
    return chosen;
}

/* Fixed schedule without cache (LLaDA's generate): exactly S forwards of
 * the whole canvas per block. Threshold without cache (Fast-dLLM): whole-
 * canvas forwards until the block has no mask. With a cache (Fast-dLLM):
 * one whole-canvas forward, then block + suffix (prefix cache) or the
 * block alone (dual cache) until the block has no mask — none when the
 * first forward completed it (the newer upstream checks for masks before
 * the cached forward; the first release ran one that committed nothing). */
static int run_llada(run *r)
{
    const tb_dllm_params *p = r->p;
    int blocks = p->gen_length / p->block_length;
    int S = p->sampler == TB_DLLM_THRESHOLD ? 0 : p->steps / blocks;
    int *sched = calloc((size_t)r->B * (S > 0 ? S : 1), sizeof(int)), *want = calloc((size_t)r->B, sizeof(int));
    int rc = 0;
    if (!sched || !want) {
        snprintf(r->why, r->why_size, "out of memory for the schedules of %d canvases", r->B);
        rc = -1;
    }
    for (int k = 0; k < blocks && rc == 0; k++) {
        int bs = r->P + k * p->block_length, be = bs + p->block_length;
        for (int b = 0; b < r->B && S > 0; b++) {
            int n = 0;
            for (int i = bs; i < be; i++)
                n += r->canvas[(size_t)b * r->L + i] == p->mask_id;
            tb_dllm_llada_schedule(n, S, sched + (size_t)b * S);
        }
        for (int i = 0; rc == 0; i++) {
            for (int b = 0; b < r->B; b++)
                want[b] = S > 0 && i < S ? sched[(size_t)b * S + i] : 0;
            int pos0 = 0, n = r->L;
            if (i > 0 && p->cache == TB_DLLM_CACHE_PREFIX)
                pos0 = bs, n = r->L - bs;
            else if (i > 0 && p->cache == TB_DLLM_CACHE_DUAL)
                pos0 = bs, n = p->block_length;
            if (do_forward(r, pos0, n, r->L, bs - pos0, be - bs) != 0) {
                rc = -1;
                break;
            }
            llada_commit(r, pos0, n, bs, be, want);
            rc = step_done(r);
            if (p->cache == TB_DLLM_CACHE_NONE && S > 0) {
                if (i + 1 == S)
                    break;
            } else if (!block_has_mask(r, bs, be)) {
                /* with a cache too: a block that its first (whole-canvas)
                 * forward completed gets no cached forward that would
                 * commit nothing (docs/METRICS.md, forward_passes) */
                break;
            }
        }
        if (rc == 0)
            canvas_done(r);
    }
    free(sched);
    free(want);
    return rc;
}

static int run_dream(run *r)
{
    const tb_dllm_params *p = r->p;
    int L = r->L, rc = 0;
    for (int i = 0; i < p->steps && rc == 0; i++) {
        if (do_forward(r, 0, L, L, r->P, L - r->P) != 0)
            return -1;
        for (int b = 0; b < r->B; b++) {
            int32_t *x = r->canvas + (size_t)b * L;
            const int32_t *x0 = r->x0 + (size_t)b * L;
            double *cand = r->cand;
            int masked = 0;
            for (int j = 0; j < L; j++)
                masked += x[j] == p->mask_id;
            int committed = 0;
            if (p->sampler == TB_DLLM_ORIGIN) {
                float t = linspace_f32(1.0f, (float)p->eps, p->steps + 1, i);
                float s = linspace_f32(1.0f, (float)p->eps, p->steps + 1, i + 1);
                double p_transfer = i < p->steps - 1 ? 1.0 - (double)(s / t) : 1.0;
                for (int j = 0; j < L; j++)
                    if (x[j] == p->mask_id && tb_dllm_uniform(&r->rng) < p_transfer) {
                        x[j] = x0[j];
                        committed++;
                    }
            } else {
                for (int j = 0; j < L; j++)
                    cand[j] = x[j] == p->mask_id ? r->conf[(size_t)b * L + j] : -INFINITY;
                int k = tb_dllm_dream_transfer(masked, i, p->steps, p->eps);
                int got = p->alg_temp > 0 ? sample_k_indices(cand, L, k, p->alg_temp, &r->rng, r->pick, r->w, r->used)
                                          : top_k_indices(cand, L, k, r->pick, r->used);
                for (int j = 0; j < got; j++)
                    x[r->pick[j]] = x0[r->pick[j]];
                committed = got;
            }
            r->cv_commit[b] += committed;
            if (committed && r->h && r->h->on_commit)
                r->h->on_commit(r->h->ctx, b, committed);
        }
        rc = step_done(r);
    }
    if (rc == 0) /* one canvas: the whole generation */
        canvas_done(r);
    return rc;
}

int tb_dllm_bidir_generate(const tb_dllm_engine *e, const tb_dllm_params *p, int32_t *canvas, int B, int prompt_len,
                           uint64_t seed, const tb_dllm_hooks *h, tb_dllm_stats *stats, char *why, size_t why_size)
{
    run r = {.e = e, .p = p, .h = h, .canvas = canvas, .B = B, .L = prompt_len + p->gen_length, .P = prompt_len,
             .V = e->vocab, .rng = seed ^ 0x5DEECE66DULL, .stats = stats, .why = why, .why_size = why_size};
    r.spec = (tb_dllm_pick_spec){
        .conf = llada_family(p->sampler)              ? TB_DLLM_CONF_LLADA_PROB
                : p->sampler == TB_DLLM_TOPK_MARGIN ? TB_DLLM_CONF_DREAM_MARGIN
                : p->sampler == TB_DLLM_ENTROPY     ? TB_DLLM_CONF_DREAM_ENTROPY
                                                    : TB_DLLM_CONF_DREAM_PROB,
        .temperature = p->temperature,
        .top_k = llada_family(p->sampler) ? 0 : p->top_k,
        .cfg_scale = p->cfg_scale,
    };
    int cfg = p->cfg_scale > 0 ? 2 : 1;
    r.x0 = malloc((size_t)B * r.L * sizeof(int32_t));
    r.conf = malloc((size_t)B * r.L * sizeof(double));
    r.cand = malloc((size_t)r.L * sizeof(double));
    r.pick = malloc((size_t)r.L * sizeof(int));
    r.used = malloc((size_t)r.L);
    r.w = malloc((size_t)r.L * sizeof(double));
    r.cfg_canvas = cfg > 1 ? malloc((size_t)2 * B * r.L * sizeof(int32_t)) : NULL;
    r.cv_commit = calloc((size_t)B, sizeof(int));
    int rc;
    if (!r.x0 || !r.conf || !r.cand || !r.pick || !r.used || !r.w || !r.cv_commit || (cfg > 1 && !r.cfg_canvas)) {
        snprintf(why, why_size, "out of memory for %d canvases of %d positions", cfg * B, r.L);
        rc = -1;
    } else {
        rc = llada_family(p->sampler) ? run_llada(&r) : run_dream(&r);
    }
    free(r.x0);
    free(r.conf);
    free(r.cand);
    free(r.pick);
    free(r.used);
    free(r.w);
    free(r.cfg_canvas);
    free(r.cv_commit);
    return rc;
}
