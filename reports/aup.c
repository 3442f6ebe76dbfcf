/* aup.c — see aup.h. The definition transcribes the d3LLM blog post
 * ("AUP: when Accuracy Meets Parallelism in Diffusion Language Models",
 * hao-ai-lab, 2025-12) and its AUP_leaderboard/aup_utils.py; where
 * tokbench differs, docs/METRICS.md says so. */
#define _GNU_SOURCE
#include "aup.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

double tb_aup_weight(double y, double y_max)
{
    if (!(y_max > 0))
        return 1;
    double w = exp(-TB_AUP_ALPHA * (1 - y / y_max));
    return w < 1 ? w : 1;
}

double tb_aup(tb_aup_point *p, size_t n, double y_max)
{
    if (!n)
        return NAN;
    /* insertion sort by rho: stable, and curves have a handful of points */
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && p[k - 1].rho > p[k].rho; k--) {
            tb_aup_point t = p[k];
            p[k] = p[k - 1];
            p[k - 1] = t;
        }
    double floor = p[0].y - TB_AUP_DROP;
    double aup = p[0].rho * p[0].y; /* the first point, unweighted */
    p[0].used = 1;
    size_t prev = 0;
    for (size_t i = 1; i < n; i++) {
        p[i].used = p[i].y >= floor;
        if (!p[i].used)
            continue;
        aup += 0.5 * (p[i].rho - p[prev].rho) *
               (p[i].y * tb_aup_weight(p[i].y, y_max) + p[prev].y * tb_aup_weight(p[prev].y, y_max));
        prev = i;
    }
    return aup;
}

/* A case's point: its median accuracy in % and tokens per forward; 0
 * when it has none (not ok, or either figure missing). */
static int case_point(const tb_rcase *c, tb_aup_point *pt)
{
    if (strcmp(c->status, "ok") != 0)
        return 0;
    double acc = tb_rcase_median(c, "accuracy"), rho = tb_rcase_median(c, "tokens_per_forward");
    if (!isfinite(acc) || !isfinite(rho) || !(rho > 0))
        return 0;
    *pt = (tb_aup_point){.rho = rho, .y = 100 * acc, .ordinal = c->ordinal};
    return 1;
}

/* The lever a curve sweeps: steps and the backend's swept options. */
#define LEVER (TB_RDIM(TB_DIM_STEPS) | TB_RDIM_OPTS)

void tb_aup_session(const tb_rsession *s, tb_aup_rows *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        tb_aup_point pt;
        if (!case_point(c, &pt))
            continue;
        char *cond = tb_rcase_key(c, LEVER);
        size_t r = 0;
        while (r < out->n && !(out->v[r].backend == c->backend && strcmp(out->v[r].condition, cond) == 0))
            r++;
        if (r == out->n) {
            out->v = tb_xrealloc(out->v, (out->n + 1) * sizeof *out->v);
            out->v[out->n++] = (tb_aup_row){.backend = c->backend, .condition = cond,
                                            .task = tb_rcase_key(c, LEVER | TB_RDIM(TB_DIM_BLOCK_LENGTH)),
                                            .y_max = -INFINITY};
            cond = NULL;
        }
        free(cond);
        tb_aup_row *row = &out->v[r];
        row->pts = tb_xrealloc(row->pts, (row->n_pts + 1) * sizeof *row->pts);
        row->pts[row->n_pts++] = pt;
    }
    /* y_max: the best accuracy on the task, of any backend */
    for (size_t r = 0; r < out->n; r++)
        for (size_t q = 0; q < out->n; q++)
            if (strcmp(out->v[r].task, out->v[q].task) == 0)
                for (size_t k = 0; k < out->v[q].n_pts; k++)
                    if (out->v[q].pts[k].y > out->v[r].y_max)
                        out->v[r].y_max = out->v[q].pts[k].y;
    for (size_t r = 0; r < out->n; r++)
        out->v[r].aup = tb_aup(out->v[r].pts, out->v[r].n_pts, out->v[r].y_max);
}

void tb_aup_rows_free(tb_aup_rows *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].condition);
        free(r->v[i].task);
        free(r->v[i].pts);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

char *tb_aup_points_text(const tb_aup_row *r)
{
    tb_str b = {0};
    for (size_t i = 0; i < r->n_pts; i++)
        tb_str_appendf(&b, "%s%s%.2f: %.1f%%%s", i ? ", " : "", r->pts[i].used ? "" : "(", r->pts[i].rho,
                       r->pts[i].y, r->pts[i].used ? "" : " dropped)");
    return tb_str_take(&b);
}
