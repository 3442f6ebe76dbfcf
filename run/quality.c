/* quality.c — see quality.h. */
#include "quality.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "prompt_set.h"
#include "scorers.h"
#include "util.h"


typedef struct tally {
    double correct, graded; /* over every counted request */
    unsigned char *seen;    /* [n_prompts]: item graded at least once */
    size_t items;           /* distinct items graded */
} tally;

struct tb_quality_acc {
    const tb_plan *plan;
    tally all;
    char **tags; /* distinct tags of the set, in first-seen order */
    tally *by_tag;
    size_t n_tags;
    double *rep, *dist; /* per counted request (NaN dropped later) */
    size_t n_vals, cap_vals;
};

tb_quality_acc *tb_quality_new(const tb_plan *plan)
{
    tb_quality_acc *q = tb_xcalloc(1, sizeof *q);
    q->plan = plan;
    size_t n = plan->n_prompts ? plan->n_prompts : 1;
    q->all.seen = tb_xcalloc(n, 1);
    for (size_t i = 0; i < plan->n_prompts; i++) {
        const tb_prompt *it = &plan->prompts.items[i];
        for (int t = 0; t < it->n_tags; t++) {
            size_t k = 0;
            while (k < q->n_tags && strcmp(q->tags[k], it->tags[t]) != 0)
                k++;
            if (k < q->n_tags)
                continue;
            q->tags = tb_xrealloc(q->tags, (q->n_tags + 1) * sizeof *q->tags);
            q->by_tag = tb_xrealloc(q->by_tag, (q->n_tags + 1) * sizeof *q->by_tag);
            q->tags[q->n_tags] = it->tags[t];
            q->by_tag[q->n_tags] = (tally){0, 0, tb_xcalloc(n, 1), 0};
            q->n_tags++;
        }
    }
    return q;
}

void tb_quality_free(tb_quality_acc *q)
{
    if (!q)
        return;
    free(q->all.seen);
    for (size_t k = 0; k < q->n_tags; k++)
        free(q->by_tag[k].seen);
    free(q->by_tag);
    free(q->tags);
    free(q->rep);
    free(q->dist);
    free(q);
}

static void tally_add(tally *t, size_t item, int correct)
{
    t->graded += 1;
    t->correct += correct;
    if (!t->seen[item]) {
        t->seen[item] = 1;
        t->items++;
    }
}

void tb_quality_score(tb_quality_acc *q, int32_t prompt_idx, const char *text, int counted,
                      double out[TB_N_SCORES])
{
    const tb_plan *plan = q->plan;
    for (int k = 0; k < TB_N_SCORES; k++)
        out[k] = NAN;
    if (prompt_idx < 0 || (size_t)prompt_idx >= plan->n_prompts)
        return;
    const tb_prompt *it = &plan->prompts.items[prompt_idx];
    text = text ? text : "";
    if (it->answer) {
        /* answers were checked at load, so -1 only on a regex run-time
         * limit: counted as wrong */
        char *why = NULL;
        int r = tb_score_answer(tb_prompt_scorer(it, plan->scorer), text, it->answer, &why);
        free(why);
        out[TB_SCORE_CORRECT] = r == 1 ? 1.0 : 0.0;
    }
    out[TB_SCORE_REPETITION] = tb_score_repetition(text, plan->suite->prompts.repetition_n);
    out[TB_SCORE_DISTINCT] = tb_score_distinct(text, plan->suite->prompts.distinct_n);
    if (!counted)
        return;
    if (!isnan(out[TB_SCORE_CORRECT])) {
        int ok = out[TB_SCORE_CORRECT] == 1.0;
        tally_add(&q->all, (size_t)prompt_idx, ok);
        for (int t = 0; t < it->n_tags; t++)
            for (size_t k = 0; k < q->n_tags; k++)
                if (strcmp(q->tags[k], it->tags[t]) == 0)
                    tally_add(&q->by_tag[k], (size_t)prompt_idx, ok);
    }
    if (q->n_vals == q->cap_vals) {
        q->cap_vals = q->cap_vals ? 2 * q->cap_vals : 64;
        q->rep = tb_xrealloc(q->rep, q->cap_vals * sizeof *q->rep);
        q->dist = tb_xrealloc(q->dist, q->cap_vals * sizeof *q->dist);
    }
    q->rep[q->n_vals] = out[TB_SCORE_REPETITION];
    q->dist[q->n_vals] = out[TB_SCORE_DISTINCT];
    q->n_vals++;
}

void tb_proportion_stats(double p, size_t trials, tb_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n = trials;
    if (trials == 0) {
        out->median = out->p5 = out->p95 = out->p90 = out->p99 = out->mean = out->stdev = out->cv = NAN;
        out->min = out->max = out->ci_lo = out->ci_hi = NAN;
        return;
    }
    const double z = 1.959963984540054; /* 97.5th percentile of N(0, 1) */
    double n = (double)trials, z2 = z * z;
    double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
    double half = z / (1 + z2 / n) * sqrt(p * (1 - p) / n + z2 / (4 * n * n));
    out->median = out->mean = p;
    out->p5 = out->p95 = out->p90 = out->p99 = NAN; /* a proportion has no spread of its own */
    out->min = out->max = NAN;
    out->stdev = sqrt(p * (1 - p));
    out->cv = p > 0 ? out->stdev / p : NAN;
    out->ci_lo = centre - half < 0 ? 0 : centre - half;
    out->ci_hi = centre + half > 1 ? 1 : centre + half;
}

static tb_metric_record *grow(tb_metric_record **arr, size_t *n)
{
    *arr = tb_xrealloc(*arr, (*n + 1) * sizeof **arr);
    tb_metric_record *m = &(*arr)[(*n)++];
    memset(m, 0, sizeof *m);
    return m;
}

void tb_quality_metrics(tb_quality_acc *q, uint64_t seed, tb_metric_record **arr, size_t *n)
{
    if (q->all.graded > 0) {
        tb_metric_record *m = grow(arr, n);
        m->name = "accuracy";
        m->unit = tb_metric_unit(m->name);
        tb_proportion_stats(q->all.correct / q->all.graded, q->all.items, &m->st);
    }
    for (size_t k = 0; k < q->n_tags; k++) {
        if (q->by_tag[k].graded <= 0)
            continue;
        tb_metric_record *m = grow(arr, n);
        m->name_buf = tb_xasprintf("accuracy_%s", q->tags[k]);
        m->name = m->name_buf;
        m->unit = tb_metric_unit(m->name);
        tb_proportion_stats(q->by_tag[k].correct / q->by_tag[k].graded, q->by_tag[k].items, &m->st);
    }
    if (q->n_vals) {
        tb_metric_record *m = grow(arr, n);
        m->name = "repetition";
        m->unit = tb_metric_unit(m->name);
        tb_stats_compute(q->rep, q->n_vals, seed, &m->st);
        m = grow(arr, n);
        m->name = "distinct";
        m->unit = tb_metric_unit(m->name);
        tb_stats_compute(q->dist, q->n_vals, seed, &m->st);
    }
}
_Static_assert(TB_N_SCORES == sizeof(((tb_request_record *)0)->scores) / sizeof(double), "store.h scores[] matches TB_N_SCORES");
