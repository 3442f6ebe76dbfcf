/* charts.c — see charts.h. Each chart groups cases that differ only in
 * the dimension on its x axis; small multiples rather than one crowded
 * chart. */
#define _GNU_SOURCE
#include "charts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "history.h"
#include "metrics.h"
#include "util.h"

/* Charts of one kind beyond this many are left out (the tables have
 * every figure); a suite sweeping many prompt lengths would otherwise
 * make a report of hundreds of charts. */
#define MAX_GROUPS 12
/* Values spanning more than this ratio get a log y axis, so the slow
 * curves are not flattened against zero by the fast ones. */
#define WIDE 30
/* Curves in one history chart: the palette's colours (svg.h), so no two
 * of a chart share one; more cases make more charts. */
#define HISTORY_SERIES TB_SVG_COLOURS
/* CDF points drawn per curve. */
#define CDF_POINTS 200

static void add(tb_rcharts *out, const char *kind, tb_chart *chart, char *caption)
{
    if (!chart || tb_chart_points(chart) == 0) {
        tb_chart_free(chart);
        free(caption);
        return;
    }
    out->v = tb_xrealloc(out->v, (out->n + 1) * sizeof *out->v);
    out->v[out->n++] = (tb_rchart){kind, caption, chart};
}

void tb_rcharts_free(tb_rcharts *c)
{
    for (size_t i = 0; i < c->n; i++) {
        tb_chart_free(c->v[i].chart);
        free(c->v[i].caption);
    }
    free(c->v);
    memset(c, 0, sizeof *c);
}

static int ok_case(const tb_rcase *c)
{
    return strcmp(c->status, "ok") == 0;
}

/* Distinct keys (case dims without `skip`) of the cases passing `keep`, in
 * order of first appearance. */
typedef struct keys {
    char **k;
    size_t n;
} keys;

static void keys_collect(const tb_rsession *s, unsigned skip, int (*keep)(const tb_rsession *, const tb_rcase *),
                         keys *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < s->n_cases; i++) {
        if (!keep(s, &s->cases[i]))
            continue;
        char *k = tb_rcase_key(&s->cases[i], skip);
        size_t j = 0;
        while (j < out->n && strcmp(out->k[j], k) != 0)
            j++;
        if (j < out->n) {
            free(k);
            continue;
        }
        out->k = tb_xrealloc(out->k, (out->n + 1) * sizeof *out->k);
        out->k[out->n++] = k;
    }
}

static void keys_free(keys *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->k[i]);
    free(k->k);
}

static int has_key(const tb_rcase *c, unsigned skip, const char *key)
{
    char *k = tb_rcase_key(c, skip);
    int eq = strcmp(k, key) == 0;
    free(k);
    return eq;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Distinct values, sorted, for x ticks. */
static size_t distinct(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || v[m - 1] != v[i])
            v[m++] = v[i];
    return m;
}

/* Does backend b run more than one block length in this session? */
static int block_varies(const tb_rsession *s, size_t b)
{
    long first = -1;
    for (size_t i = 0; i < s->n_cases; i++)
        if (s->cases[i].backend == b) {
            if (first == -1)
                first = (long)s->cases[i].dims.block_length;
            else if ((long)s->cases[i].dims.block_length != first)
                return 1;
        }
    return 0;
}

/* What the charts of one metric draw as curves rather than as charts of
 * their own: a swept lever (steps, block length, options) or load (rate,
 * concurrency). A chart per value would be a row of one-curve charts. */
#define SWEPT                                                                                                   \
    (TB_RDIM(TB_DIM_STEPS) | TB_RDIM(TB_DIM_BLOCK_LENGTH) | TB_RDIM(TB_DIM_REQUEST_RATE) |                      \
     TB_RDIM(TB_DIM_CONCURRENCY) | TB_RDIM_OPTS)

/* A curve's name within a chart whose group leaves out the dimensions in
 * `shown`: the backend, then the case's values of those (block length
 * only where the backend sweeps it) and, with TB_RDIM_OPTS, its swept
 * options ("sdar-small, steps 4, threshold 0.9"). */
static char *curve_label(const tb_rsession *s, const tb_rcase *c, unsigned shown)
{
    tb_str b = {0};
    tb_str_append(&b, s->backends[c->backend].label);
    if (!block_varies(s, c->backend))
        shown &= ~TB_RDIM(TB_DIM_BLOCK_LENGTH);
    tb_case_label_dims(&b, &c->dims, ~shown & ~TB_RDIM_OPTS, TB_LABEL_WORDS);
    char *o = shown & TB_RDIM_OPTS ? tb_roptions_words(c->options_json) : NULL;
    if (o && *o)
        tb_str_appendf(&b, ", %s", o);
    free(o);
    return tb_str_take(&b);
}

/* The curves of the batch and rate charts: backend, steps, block length
 * and (batch) swept options. */
static char *curve_name(const tb_rsession *s, const tb_rcase *c)
{
    return curve_label(s, c, TB_RDIM(TB_DIM_STEPS) | TB_RDIM(TB_DIM_BLOCK_LENGTH) | TB_RDIM_OPTS);
}

/* ------------------------------------------------------- tok/s vs steps */

static int keep_steps(const tb_rsession *s, const tb_rcase *c)
{
    (void)s;
    return c->dims.steps > 0 && ok_case(c);
}

static void steps_charts(const tb_rsession *s, tb_rcharts *out)
{
    /* A group: everything but steps and swept options; a curve per
     * backend and options (llada at each step count; sdar's thresholds
     * as curves, not charts). */
    const unsigned gskip = TB_RDIM(TB_DIM_STEPS) | TB_RDIM_OPTS;
    keys g;
    keys_collect(s, gskip, keep_steps, &g);
    size_t made = 0;
    for (size_t gi = 0; gi < g.n && made < MAX_GROUPS; gi++) {
        char *title = tb_xasprintf("tokens/s vs steps: %s", g.k[gi]);
        tb_chart *ch = tb_chart_new(title, "denoising steps", "aggregate tokens/s (median, 95% CI)");
        free(title);
        tb_chart_log(ch, 1, 0);
        tb_chart_auto_log_y(ch, WIDE);
        double *xt = tb_xmalloc((s->n_cases + 1) * sizeof *xt);
        size_t nxt = 0;
        const tb_rcase *any = NULL;
        size_t *idx = tb_xmalloc((s->n_cases + 1) * sizeof *idx);
        unsigned char *done = tb_xcalloc(s->n_cases + 1, 1);
        for (size_t first = 0; first < s->n_cases; first++) {
            const tb_rcase *f = &s->cases[first];
            if (done[first] || !s->backends[f->backend].has_steps || !keep_steps(s, f) || !has_key(f, gskip, g.k[gi]))
                continue;
            /* the curve of f's backend and options; cases come in suite
             * order, drawn by steps */
            size_t n = 0;
            for (size_t i = first; i < s->n_cases; i++) {
                const tb_rcase *c = &s->cases[i];
                if (c->backend == f->backend && strcmp(c->options_json, f->options_json) == 0 && keep_steps(s, c) &&
                    has_key(c, gskip, g.k[gi]) && tb_rcase_metric(c, "agg_tps")) {
                    idx[n++] = i;
                    done[i] = 1;
                }
            }
            for (size_t i = 1; i < n; i++)
                for (size_t k = i; k > 0 && s->cases[idx[k - 1]].dims.steps > s->cases[idx[k]].dims.steps; k--) {
                    size_t t = idx[k];
                    idx[k] = idx[k - 1];
                    idx[k - 1] = t;
                }
            if (n < 2) /* one step count (a block sampler at its one setting): no curve against steps */
                continue;
            char *name = curve_label(s, f, TB_RDIM_OPTS);
            int sid = tb_chart_series(ch, name, TB_SERIES_LINE);
            free(name);
            for (size_t i = 0; i < n; i++) {
                const tb_rcase *c = &s->cases[idx[i]];
                const tb_stats *agg = tb_rcase_metric(c, "agg_tps");
                tb_chart_point_err(ch, sid, c->dims.steps, agg->median, agg->ci_lo, agg->ci_hi);
                xt[nxt++] = c->dims.steps;
                any = c;
            }
        }
        free(idx);
        free(done);
        /* Backends without steps (autoregressive) at the same other
         * dimensions: one horizontal reference each. */
        for (size_t i = 0; any && i < s->n_cases; i++) {
            const tb_rcase *c = &s->cases[i];
            if (c->dims.steps > 0 || !ok_case(c) || !tb_case_dims_generalize(&c->dims, &any->dims))
                continue;
            double agg = tb_rcase_median(c, "agg_tps");
            if (!isfinite(agg))
                continue;
            char *label = curve_label(s, c, TB_RDIM_OPTS);
            char *name = tb_xasprintf("%s (no steps: reference)", label);
            tb_chart_point(ch, tb_chart_series(ch, name, TB_SERIES_HLINE), 0, agg);
            free(name);
            free(label);
        }
        nxt = distinct(xt, nxt);
        if (nxt < 2) { /* no curve: nothing to draw against steps */
            free(xt);
            tb_chart_free(ch);
            continue;
        }
        tb_chart_x_ticks(ch, xt, NULL, nxt);
        free(xt);
        add(out, "steps", ch,
            tb_xasprintf("Each diffusion backend's aggregate tokens/s (median over repetitions, whiskers: "
                         "bootstrap 95%% CI) at each step count, a curve per backend and swept option; dashed: "
                         "backends without steps at the same prompt, output length and batch. %s.",
                         g.k[gi]));
        made++;
    }
    keys_free(&g);
}

/* ------------------------------------------ latency and tok/s vs batch */

static int batch_x_is_conc(const tb_rsession *s)
{
    return (s->dims & TB_RDIM(TB_DIM_CONCURRENCY)) != 0;
}

static double batch_x(const tb_rsession *s, const tb_rcase *c)
{
    return batch_x_is_conc(s) ? (c->dims.concurrency ? c->dims.concurrency : NAN) : c->dims.batch;
}

static int keep_ok(const tb_rsession *s, const tb_rcase *c)
{
    (void)s;
    return ok_case(c);
}

static void batch_charts(const tb_rsession *s, tb_rcharts *out)
{
    int conc = batch_x_is_conc(s);
    unsigned xskip = conc ? TB_RDIM(TB_DIM_CONCURRENCY) : TB_RDIM(TB_DIM_BATCH);
    /* Group: everything but batch, steps, block length and swept
     * options; a curve per backend, step count and options. */
    unsigned gskip = xskip | TB_RDIM(TB_DIM_STEPS) | TB_RDIM(TB_DIM_BLOCK_LENGTH) | TB_RDIM_OPTS;
    keys g;
    keys_collect(s, gskip, keep_ok, &g);
    const char *xname = conc ? "concurrency" : "batch size";
    size_t made = 0;
    for (size_t gi = 0; gi < g.n && made < MAX_GROUPS; gi++) {
        keys ser; /* series keys within the group: backend + steps */
        memset(&ser, 0, sizeof ser);
        size_t n_x = 0;
        double *xs = tb_xmalloc((s->n_cases + 1) * sizeof *xs);
        for (size_t i = 0; i < s->n_cases; i++) {
            const tb_rcase *c = &s->cases[i];
            if (!ok_case(c) || !has_key(c, gskip, g.k[gi]) || !isfinite(batch_x(s, c)))
                continue;
            xs[n_x++] = batch_x(s, c);
            char *name = curve_name(s, c);
            size_t j = 0;
            while (j < ser.n && strcmp(ser.k[j], name) != 0)
                j++;
            if (j == ser.n) {
                ser.k = tb_xrealloc(ser.k, (ser.n + 1) * sizeof *ser.k);
                ser.k[ser.n++] = name;
            } else {
                free(name);
            }
        }
        n_x = distinct(xs, n_x);
        if (n_x < 2) { /* one batch size: nothing to draw a curve through */
            free(xs);
            keys_free(&ser);
            continue;
        }
        char *t_lat = tb_xasprintf("E2E latency vs %s: %s", xname, g.k[gi]);
        char *t_thr = tb_xasprintf("aggregate tokens/s vs %s: %s", xname, g.k[gi]);
        tb_chart *lat = tb_chart_new(t_lat, xname, "E2E latency, ms (median, whisker to p95)");
        tb_chart *thr = tb_chart_new(t_thr, xname, "aggregate tokens/s (median, 95% CI)");
        free(t_lat);
        free(t_thr);
        tb_chart_log(lat, 1, 0);
        tb_chart_log(thr, 1, 0);
        tb_chart_auto_log_y(lat, WIDE);
        tb_chart_auto_log_y(thr, WIDE);
        tb_chart_x_ticks(lat, xs, NULL, n_x);
        tb_chart_x_ticks(thr, xs, NULL, n_x);
        for (size_t j = 0; j < ser.n; j++) {
            int sl = tb_chart_series(lat, ser.k[j], TB_SERIES_LINE);
            int st = tb_chart_series(thr, ser.k[j], TB_SERIES_LINE);
            for (size_t x = 0; x < n_x; x++)
                for (size_t i = 0; i < s->n_cases; i++) {
                    const tb_rcase *c = &s->cases[i];
                    if (!ok_case(c) || batch_x(s, c) != xs[x] || !has_key(c, gskip, g.k[gi]))
                        continue;
                    char *name = curve_name(s, c);
                    int mine = strcmp(name, ser.k[j]) == 0;
                    free(name);
                    if (!mine)
                        continue;
                    const tb_stats *e2e = tb_rcase_metric(c, "e2e_ms"), *agg = tb_rcase_metric(c, "agg_tps");
                    if (e2e)
                        tb_chart_point_err(lat, sl, xs[x], e2e->median, e2e->median, e2e->p95);
                    if (agg)
                        tb_chart_point_err(thr, st, xs[x], agg->median, agg->ci_lo, agg->ci_hi);
                }
        }
        add(out, "latency", lat,
            tb_xasprintf("What one user waits for: end-to-end latency of a request (median; whisker up to the "
                         "95th percentile) as the %s grows. %s.", xname, g.k[gi]));
        add(out, "throughput", thr,
            tb_xasprintf("What the machine delivers to all users: aggregate tokens/s (median; whiskers: 95%% "
                         "CI) at the same points. %s.", g.k[gi]));
        made++;
        free(xs);
        keys_free(&ser);
    }
    keys_free(&g);
}

/* ------------------------------------- serving: latency vs request rate */

static int keep_rate(const tb_rsession *s, const tb_rcase *c)
{
    (void)s;
    return c->dims.request_rate > 0 && ok_case(c);
}

/* The stored statistic a series draws (never recomputed here). */
static double pct_of(const tb_stats *st, int pct)
{
    return pct == 50 ? st->median : pct == 90 ? st->p90 : st->p99;
}

/* A point with its value on hover: "SERIES: rate R/s, V UNIT". */
static void rate_point(tb_chart *ch, int sid, const char *series, double rate, double v, const char *unit)
{
    char *tip = tb_xasprintf("%s: rate %g/s, %.6g %s", series, rate, v, unit);
    tb_chart_point_tip(ch, sid, rate, v, tip);
    free(tip);
}

/* A curve of a rate chart: the backend (and steps), and for the runs of
 * a load search which one (a sweep's rates and an SLO search's probes
 * of one backend are two curves, not one). */
static char *rate_curve_name(const tb_rsession *s, const tb_rcase *c)
{
    char *name = curve_name(s, c);
    const tb_rsearch *x = tb_rcase_search(s, c);
    if (!x)
        return name;
    char *full = tb_xasprintf("%s, %s #%lld", name, strcmp(x->kind, "slo") == 0 ? "SLO search" : "sweep",
                              (long long)x->id);
    free(name);
    return full;
}

/* The x ticks of a rate chart: every rate, or 6 of them spread over the
 * sorted list when there are more (a bisection's probes crowd). */
static void rate_ticks(tb_chart *ch, const double *xs, size_t n)
{
    enum { MAX_TICKS = 6 };
    if (n <= MAX_TICKS) {
        tb_chart_x_ticks(ch, xs, NULL, n);
        return;
    }
    double t[MAX_TICKS];
    for (size_t i = 0; i < MAX_TICKS; i++)
        t[i] = xs[i * (n - 1) / (MAX_TICKS - 1)];
    tb_chart_x_ticks(ch, t, NULL, MAX_TICKS);
}

/* The found limit of every SLO search with runs in group `key`: a
 * vertical line at slo_max_rate on each of the group's charts, and on
 * the TTFT or TPOT chart (metric) the search's p99 limit as a horizontal
 * one. */
static void mark_searches(const tb_rsession *s, const char *key, tb_chart *ch, const char *metric)
{
    for (size_t k = 0; k < s->n_searches; k++) {
        const tb_rsearch *x = &s->searches[k];
        if (strcmp(x->kind, "slo") != 0)
            continue;
        int in_group = 0;
        for (size_t i = 0; i < s->n_cases && !in_group; i++)
            in_group = s->cases[i].search_id == x->id && keep_rate(s, &s->cases[i]) &&
                       has_key(&s->cases[i], TB_RDIM(TB_DIM_REQUEST_RATE), key);
        if (!in_group)
            continue;
        const char *b = s->backends[x->backend].label;
        if (isfinite(x->slo_rate)) {
            char *name = tb_xasprintf("%s SLO limit: %.4g requests/s (%s)", b, x->slo_rate, x->status);
            int sid = tb_chart_series(ch, name, TB_SERIES_VLINE);
            tb_chart_point_tip(ch, sid, x->slo_rate, 0, name); /* y: not drawn */
            free(name);
        }
        double lim = metric && strcmp(metric, "ttft_ms") == 0   ? x->ttft_p99_ms
                     : metric && strcmp(metric, "tpot_ms") == 0 ? x->tpot_p99_ms
                                                                : NAN;
        if (isfinite(lim)) {
            char *name = tb_xasprintf("%s SLO: p99 %s <= %g ms", b, strcmp(metric, "ttft_ms") == 0 ? "TTFT" : "TPOT",
                                      lim);
            int sid = tb_chart_series(ch, name, TB_SERIES_HLINE);
            tb_chart_point(ch, sid, x->slo_rate > 0 ? x->slo_rate : 1, lim);
            free(name);
        }
    }
}

/* The cases of group `key` (everything but the rate) on curve `curve`
 * (backend and steps), in order of rate. */
static size_t rate_curve(const tb_rsession *s, const char *key, const char *curve, size_t *idx)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        if (!keep_rate(s, c) || !has_key(c, TB_RDIM(TB_DIM_REQUEST_RATE), key))
            continue;
        char *name = rate_curve_name(s, c);
        int mine = strcmp(name, curve) == 0;
        free(name);
        if (mine)
            idx[n++] = i;
    }
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && s->cases[idx[k - 1]].dims.request_rate > s->cases[idx[k]].dims.request_rate; k--) {
            size_t t = idx[k];
            idx[k] = idx[k - 1];
            idx[k - 1] = t;
        }
    return n;
}

/* For each group of cases that differ only in request_rate (an open-loop
 * sweep, at least two rates): TTFT, TPOT and E2E p50/p90/p99 against the
 * offered rate (kind "rate"), and the achieved requests/s and goodput
 * against it (kind "goodput"). Every value is a stored one: the metric
 * table's median, p90 and p99 of the registry's metrics, the medians of
 * req_throughput and goodput. */
static void rate_charts(const tb_rsession *s, tb_rcharts *out)
{
    static const struct {
        const char *metric, *name;
    } lat[] = {{"ttft_ms", "TTFT"}, {"tpot_ms", "TPOT"}, {"e2e_ms", "E2E"}};
    static const int pcts[] = {50, 90, 99};
    keys g;
    keys_collect(s, TB_RDIM(TB_DIM_REQUEST_RATE), keep_rate, &g);
    size_t made = 0;
    size_t *idx = tb_xmalloc((s->n_cases + 1) * sizeof *idx);
    for (size_t gi = 0; gi < g.n && made < MAX_GROUPS; gi++) {
        keys ser; /* curves within the group: backend + steps */
        memset(&ser, 0, sizeof ser);
        double *xs = tb_xmalloc((s->n_cases + 1) * sizeof *xs);
        size_t n_x = 0;
        for (size_t i = 0; i < s->n_cases; i++) {
            const tb_rcase *c = &s->cases[i];
            if (!keep_rate(s, c) || !has_key(c, TB_RDIM(TB_DIM_REQUEST_RATE), g.k[gi]))
                continue;
            xs[n_x++] = c->dims.request_rate;
            char *name = rate_curve_name(s, c);
            size_t j = 0;
            while (j < ser.n && strcmp(ser.k[j], name) != 0)
                j++;
            if (j == ser.n) {
                ser.k = tb_xrealloc(ser.k, (ser.n + 1) * sizeof *ser.k);
                ser.k[ser.n++] = name;
            } else {
                free(name);
            }
        }
        n_x = distinct(xs, n_x);
        if (n_x < 2) { /* one rate: no sweep to draw */
            free(xs);
            keys_free(&ser);
            continue;
        }
        for (size_t m = 0; m < TB_ARRAY_LEN(lat); m++) {
            const tb_metric_def *def = tb_metric_find(lat[m].metric);
            char *title = tb_xasprintf("%s vs request rate: %s", lat[m].name, g.k[gi]);
            char *ylabel = tb_xasprintf("%s, %s (p50, p90, p99)", lat[m].name, def->unit);
            tb_chart *ch = tb_chart_new(title, "offered request rate, requests/s", ylabel);
            free(title);
            free(ylabel);
            tb_chart_log(ch, 1, 0);
            tb_chart_auto_log_y(ch, WIDE);
            rate_ticks(ch, xs, n_x);
            for (size_t j = 0; j < ser.n; j++) {
                size_t n = rate_curve(s, g.k[gi], ser.k[j], idx);
                for (size_t p = 0; p < TB_ARRAY_LEN(pcts); p++) {
                    char *name = tb_xasprintf("%s p%d", ser.k[j], pcts[p]);
                    int sid = -1;
                    for (size_t k = 0; k < n; k++) {
                        const tb_rcase *c = &s->cases[idx[k]];
                        const tb_stats *st = tb_rcase_metric(c, lat[m].metric);
                        double v = st ? pct_of(st, pcts[p]) : NAN;
                        if (!isfinite(v)) /* not stored (p90/p99 before schema 6; TPOT of 1 token) */
                            continue;
                        if (sid < 0)
                            sid = tb_chart_series(ch, name, TB_SERIES_LINE);
                        rate_point(ch, sid, name, c->dims.request_rate, v, def->unit);
                    }
                    free(name);
                }
            }
            mark_searches(s, g.k[gi], ch, lat[m].metric);
            add(out, "rate", ch,
                tb_xasprintf("%s of the measured requests at each offered request rate (open loop): median, 90th "
                             "and 99th percentile as stored; hover over a point for its value. A tail that turns "
                             "up marks the rate the server stops keeping up with. %s.",
                             lat[m].name, g.k[gi]));
        }
        /* What the server achieved against what was offered. */
        const tb_metric_def *rq = tb_metric_find("req_throughput");
        char *title = tb_xasprintf("achieved requests/s vs request rate: %s", g.k[gi]);
        tb_chart *ch = tb_chart_new(title, "offered request rate, requests/s", "requests/s (median)");
        free(title);
        tb_chart_log(ch, 1, 0);
        tb_chart_auto_log_y(ch, WIDE);
        rate_ticks(ch, xs, n_x);
        for (size_t j = 0; j < ser.n; j++) {
            size_t n = rate_curve(s, g.k[gi], ser.k[j], idx);
            static const struct {
                const char *metric, *what;
            } fig[] = {{"sent_rate", "sent"}, {"req_throughput", "achieved"}, {"goodput", "goodput"}};
            for (size_t f = 0; f < TB_ARRAY_LEN(fig); f++) {
                char *name = tb_xasprintf("%s %s", ser.k[j], fig[f].what);
                int sid = -1;
                for (size_t k = 0; k < n; k++) {
                    const tb_rcase *c = &s->cases[idx[k]];
                    double v = tb_rcase_median(c, fig[f].metric);
                    if (!isfinite(v)) /* goodput: only with the suite's limits; sent:
                                         stored since schema 12 */
                        continue;
                    if (sid < 0)
                        sid = tb_chart_series(ch, name, TB_SERIES_LINE);
                    rate_point(ch, sid, name, c->dims.request_rate, v, rq->unit);
                }
                free(name);
            }
        }
        if (tb_chart_points(ch)) { /* the diagonal: achieved = offered */
            int sid = tb_chart_series(ch, "offered", TB_SERIES_LINE);
            for (size_t x = 0; x < n_x; x++)
                tb_chart_point(ch, sid, xs[x], xs[x]);
            mark_searches(s, g.k[gi], ch, NULL);
        }
        add(out, "goodput", ch,
            tb_xasprintf("Requests/s the load sent (median over repetitions of its requests over the span of "
                         "their scheduled sends), the server completed (successful requests / window) and goodput (those within the suite's goodput_ttft_ms and goodput_tpot_ms; "
                         "drawn only when a limit is set) at each offered rate; the \"offered\" line is the rate "
                         "itself, which achieved requests/s falls below when the server saturates, and sent "
                         "requests/s stays near when the load is long enough. %s.",
                         g.k[gi]));
        made++;
        free(xs);
        keys_free(&ser);
    }
    free(idx);
    keys_free(&g);
}

/* ------------------------------------------------------- quality Pareto */

static void pareto_chart(const tb_rsession *s, tb_rcharts *out)
{
    if (!s->has_quality)
        return;
    const char *qname = NULL, *qunit = NULL;
    /* px/py: the plotted cases (ok, with a quality score and a speed);
     * at[i]: case i's index in them, or -1. */
    size_t n = 0;
    double *px = tb_xmalloc((s->n_cases + 1) * sizeof *px), *py = tb_xmalloc((s->n_cases + 1) * sizeof *py);
    long *at = tb_xmalloc((s->n_cases + 1) * sizeof *at);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rmetric *q = tb_rcase_quality(&s->cases[i]);
        double x = tb_rcase_median(&s->cases[i], "agg_tps");
        at[i] = -1;
        if (!q || !isfinite(x) || !ok_case(&s->cases[i]))
            continue;
        qname = q->name;
        qunit = q->unit;
        px[n] = x;
        py[n] = q->st.median;
        at[i] = (long)n++;
    }
    if (!n) {
        free(px);
        free(py);
        free(at);
        return;
    }
    /* The front: points no other point beats on both axes. Fastest first,
     * a point is on it when it beats the quality of every faster point. */
    size_t *ord = tb_xmalloc(n * sizeof *ord);
    for (size_t i = 0; i < n; i++)
        ord[i] = i;
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && px[ord[k - 1]] < px[ord[k]]; k--) {
            size_t t = ord[k];
            ord[k] = ord[k - 1];
            ord[k - 1] = t;
        }
    size_t *on = tb_xmalloc(n * sizeof *on), n_on = 0;
    unsigned char *is_on = tb_xcalloc(n, 1);
    double best = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (py[ord[i]] > best) {
            best = py[ord[i]];
            on[n_on++] = ord[i];
            is_on[ord[i]] = 1;
        }

    char *ylabel = strcmp(qname, "accuracy") == 0
                       ? tb_xstrdup("accuracy (fraction of items correct; higher is better)")
                       : tb_xasprintf("%s (%s, median; higher is better)", qname, qunit);
    tb_chart *ch = tb_chart_new("quality vs aggregate tokens/s (Pareto front)", "aggregate tokens/s", ylabel);
    free(ylabel);
    /* a fraction from 0: a zoomed axis would make a few items look like a gap */
    tb_chart_y_from_zero(ch, strcmp(qname, "accuracy") == 0);
    /* Every point names its case on hover; only the front's points carry a
     * visible label (labels of a dozen close points would overprint). */
    for (size_t b = 0; b < s->n_backends; b++) {
        int sid = -1;
        for (size_t i = 0; i < s->n_cases; i++) {
            const tb_rcase *c = &s->cases[i];
            if (c->backend != b || at[i] < 0)
                continue;
            if (sid < 0)
                sid = tb_chart_series(ch, s->backends[b].label, TB_SERIES_POINTS);
            char *key = tb_rcase_key(c, TB_RDIM(TB_DIM_PROMPT_TOKENS) | TB_RDIM(TB_DIM_MAX_NEW_TOKENS));
            if (is_on[at[i]])
                tb_chart_point_label(ch, sid, px[at[i]], py[at[i]], key);
            else
                tb_chart_point_tip(ch, sid, px[at[i]], py[at[i]], key);
            free(key);
        }
    }
    int front = tb_chart_series(ch, "Pareto front", TB_SERIES_STEP);
    for (size_t i = n_on; i-- > 0;) /* drawn slowest to fastest */
        tb_chart_point(ch, front, px[on[i]], py[on[i]]);
    free(is_on);
    free(on);
    free(ord);
    free(px);
    free(py);
    free(at);
    add(out, "pareto", ch,
        tb_xstrdup("Who is faster at the same quality: each case's quality score against its aggregate tokens/s; "
                   "the staircase joins the cases that no other case beats on both (labelled; hover over any "
                   "point for its case)."));
}

/* ------------------------------------------- acceptance by position */

/* Speculative decoding (docs/METRICS.md): x the draft position 1 .. k,
 * y the share of verifications that accepted it (acceptance_at_I, mean
 * over requests), one curve per speculative case; as many curves a
 * chart as the palette has colours, then another chart. Each point
 * names its case, position and share on hover. */
static void acceptance_charts(const tb_rsession *s, tb_rcharts *out)
{
    if (!s->has_spec)
        return;
    tb_chart *ch = NULL;
    size_t curves = 0, charts = 0;
    uint32_t most = 0;
    for (size_t i = 0; i <= s->n_cases && charts < MAX_GROUPS; i++) {
        const tb_rcase *c = i < s->n_cases ? &s->cases[i] : NULL;
        uint32_t k = c && ok_case(c) ? tb_rcase_positions(c) : 0;
        if (ch && (!c || (k && curves == TB_SVG_COLOURS))) { /* the chart is full, or the cases are done */
            double *ticks = tb_xmalloc(most * sizeof *ticks);
            size_t n_ticks = 0;
            for (uint32_t p = 1; p <= most; p += most > 16 ? (most + 7) / 8 : 1)
                ticks[n_ticks++] = p;
            tb_chart_x_ticks(ch, ticks, NULL, n_ticks);
            free(ticks);
            add(out, "acceptance", ch,
                tb_xstrdup("Acceptance by position: the share of verifications that accepted draft position 1, "
                           "2, ... (pooled over the requests). Acceptance can only fall along a draft: a position is "
                           "accepted only when every one before it was."));
            ch = NULL;
            curves = 0;
            most = 0;
            charts++;
        }
        if (!k)
            continue;
        if (!ch) {
            ch = tb_chart_new("acceptance by draft position", "draft position",
                              "share accepted (acceptance_at_I, pooled over the requests)");
            tb_chart_y_range(ch, 0, 1);
        }
        char *name = curve_label(s, c, ~0u);
        int sid = tb_chart_series(ch, name, TB_SERIES_LINE);
        for (uint32_t p = 1; p <= k; p++) {
            char metric[32];
            snprintf(metric, sizeof metric, TB_ACCEPTANCE_AT_PREFIX "%u", p);
            const tb_stats *st = tb_rcase_metric(c, metric);
            if (!st || !st->n || !isfinite(st->mean))
                continue;
            char *tip = tb_xasprintf("%s: position %u, %.3f accepted (%zu requests)", name, p, st->mean, st->n);
            tb_chart_point_tip(ch, sid, p, st->mean, tip);
            free(tip);
        }
        free(name);
        if (k > most)
            most = k;
        curves++;
    }
    tb_chart_free(ch); /* more than MAX_GROUPS charts: the tables have the rest */
}

/* ------------------------------------------------- canvas models */

static int keep_canvas(const tb_rsession *s, const tb_rcase *c)
{
    (void)s;
    const tb_stats *k = tb_rcase_metric(c, "committed_per_step");
    return ok_case(c) && k && k->n && isfinite(k->median) && isfinite(tb_rcase_median(c, "steps_per_canvas"));
}

/* Canvas models (docs/METRICS.md, "Canvas models"): per group of cases
 * that differ only in a swept setting (steps, block length, options), x
 * the median denoising steps a canvas took (steps_per_canvas), y the
 * median committed tokens per step (committed_per_step; its p5 and p95
 * over the canvases on hover); one point per case, a line per diffusion
 * backend through its cases by x. Each point names its case on hover. */
static void canvas_charts(const tb_rsession *s, tb_rcharts *out)
{
    keys g;
    keys_collect(s, SWEPT, keep_canvas, &g);
    for (size_t gi = 0; gi < g.n && gi < MAX_GROUPS; gi++) {
        char *title = tb_xasprintf("committed tokens per step: %s", g.k[gi]);
        tb_chart *ch = tb_chart_new(title, "denoising steps per canvas (median)",
                                    "committed tokens per step (median over canvases)");
        free(title);
        tb_chart_log(ch, 1, 0);
        size_t *idx = tb_xmalloc((s->n_cases + 1) * sizeof *idx);
        for (size_t b = 0; b < s->n_backends; b++) {
            /* the backend's cases, by steps a canvas: its line */
            size_t n = 0;
            for (size_t i = 0; i < s->n_cases; i++)
                if (s->cases[i].backend == b && keep_canvas(s, &s->cases[i]) && has_key(&s->cases[i], SWEPT, g.k[gi]))
                    idx[n++] = i;
            for (size_t i = 1; i < n; i++)
                for (size_t k = i; k > 0 && tb_rcase_median(&s->cases[idx[k - 1]], "steps_per_canvas") >
                                                tb_rcase_median(&s->cases[idx[k]], "steps_per_canvas");
                     k--) {
                    size_t t = idx[k];
                    idx[k] = idx[k - 1];
                    idx[k - 1] = t;
                }
            int sid = n ? tb_chart_series(ch, s->backends[b].label, TB_SERIES_LINE) : -1;
            for (size_t j = 0; j < n; j++) {
                const tb_rcase *c = &s->cases[idx[j]];
                const tb_stats *k = tb_rcase_metric(c, "committed_per_step");
                double x = tb_rcase_median(c, "steps_per_canvas");
                char *name = curve_label(s, c, SWEPT);
                char *tip = tb_xasprintf("%s: %.3g steps a canvas, %.3g tokens committed a step (p5 %.3g, p95 "
                                         "%.3g; %zu canvases)",
                                         name, x, k->median, k->p5, k->p95, k->n);
                tb_chart_point_tip(ch, sid, x, k->median, tip);
                free(tip);
                free(name);
            }
        }
        free(idx);
        add(out, "canvas", ch,
            tb_xasprintf("How a diffusion sampler spends its steps: each case's median denoising steps a canvas "
                         "took (x) and tokens committed a step (y), a line per backend through its cases; hover "
                         "over a point for its case and the spread over its canvases (p5, p95). Up and left: fewer "
                         "forwards a token. %s.",
                         g.k[gi]));
    }
    keys_free(&g);
}

/* ------------------------------------------------------- ITL CDF */

/* Emission times are stored in ms with 3 decimals (measure/metrics.c):
 * a gap of at most 1 µs is zero at that resolution (several emissions
 * at one reading: a burst of stream chunks). A log axis cannot place it;
 * the CDF starts at their share instead, and the chart says so. */
#define ITL_ZERO_MS 0.0015

static int itl_charts(sqlite3 *db, const tb_rsession *s, tb_rcharts *out, char **err)
{
    keys g;
    keys_collect(s, SWEPT, keep_ok, &g);
    for (size_t gi = 0; gi < g.n && gi < MAX_GROUPS; gi++) {
        char *title = tb_xasprintf("inter-token latency (CDF): %s", g.k[gi]);
        tb_chart *ch = tb_chart_new(title, "gap between emissions, ms", "fraction of gaps ≤ x");
        free(title);
        tb_chart_log(ch, 1, 0);
        tb_chart_y_range(ch, 0, 1);
        tb_str zeros = {0}; /* "sweep, rate 20/s 53%; ..." */
        for (size_t i = 0; i < s->n_cases; i++) {
            const tb_rcase *c = &s->cases[i];
            if (!ok_case(c) || !has_key(c, SWEPT, g.k[gi]))
                continue;
            double *gaps;
            size_t n;
            if (tb_read_itl(db, s->id, c->id, &gaps, &n, err) != 0) {
                tb_chart_free(ch);
                tb_str_free(&zeros);
                keys_free(&g);
                return -1;
            }
            if (n == 0) {
                free(gaps);
                continue;
            }
            char *name = curve_label(s, c, SWEPT);
            int sid = tb_chart_series(ch, name, TB_SERIES_STEP);
            size_t first = 0; /* gaps sorted: the zeros first */
            while (first < n && gaps[first] < ITL_ZERO_MS)
                first++;
            if (first)
                tb_str_appendf(&zeros, "%s%s %.0f%%", zeros.len ? "; " : "", name, 100.0 * (double)first / (double)n);
            free(name);
            size_t m = n - first < CDF_POINTS ? n - first : CDF_POINTS;
            if (m > 0)
                tb_chart_point(ch, sid, gaps[first], (double)first / (double)n);
            for (size_t k = 0; k < m; k++) {
                size_t j = first + (m > 1 ? k * (n - 1 - first) / (m - 1) : 0);
                tb_chart_point(ch, sid, gaps[j], (double)(j + 1) / (double)n);
            }
            free(gaps);
        }
        if (zeros.len) {
            char *note = tb_xasprintf("Gaps of at most 1 µs (zero at the stored resolution) cannot sit on the log "
                                      "axis: left out, each curve starts at their share (%s).",
                                      zeros.s);
            tb_chart_note(ch, note);
            free(note);
        }
        tb_str_free(&zeros);
        add(out, "itl", ch,
            tb_xasprintf("Cumulative distribution of the gaps between consecutive emissions of a request (all "
                         "measured requests pooled), a curve per backend and swept setting. AR emits once per "
                         "decode step; diffusion once per denoising step that commits tokens, so fewer, larger "
                         "gaps. %s.",
                         g.k[gi]));
    }
    keys_free(&g);
    return 0;
}

/* ------------------------------------------------------- telemetry */

#define MAX_TELEMETRY_CHARTS 24 /* in a report; more are named in the last caption */

/* The metric a series belongs to: the name without its labels (vLLM's
 * "vllm:num_requests_running{model_name=...}"), or NVML's reading
 * without the GPU ("gpu0:power_w" -> "power_w"). */
static char *metric_of(const tb_row_series *s)
{
    if (strcmp(s->source, "nvml") == 0) {
        const char *c = strchr(s->name, ':');
        return tb_xasprintf("GPU %s", c ? c + 1 : s->name);
    }
    return tb_xstrndup(s->name, strcspn(s->name, "{"));
}

/* A case within its telemetry group: the values of its swept dimensions
 * and options ("rate 20/s", "steps 8, threshold 0.9"); "" when none. */
static char *swept_words(const tb_rsession *s, const tb_rcase *c)
{
    char *full = curve_label(s, c, SWEPT);
    const char *label = s->backends[c->backend].label;
    char *w = tb_xstrdup(full + strlen(label) + (full[strlen(label)] == ',' ? 2 : 0));
    free(full);
    return w;
}

/* Per backend and group of cases that differ only in a swept setting
 * (SWEPT), one chart per metric: a curve per case and series (label set,
 * GPU), each over its case's time. */
static int telemetry_charts(sqlite3 *db, const tb_rsession *s, tb_rcharts *out, char **err)
{
    enum { PER_CHART = 2 * TB_SVG_COLOURS }; /* a chart stays legible */
    size_t drawn = 0, left = 0;
    size_t *members = tb_xmalloc((s->n_cases + 1) * sizeof *members);
    tb_row_telemetry *tel = tb_xcalloc(s->n_cases + 1, sizeof *tel);
    unsigned char *grouped = tb_xcalloc(s->n_cases + 1, 1);
    int rc = 0;
    for (size_t first = 0; first < s->n_cases && rc == 0; first++) {
        if (grouped[first])
            continue;
        const tb_rcase *f = &s->cases[first];
        char *key = tb_rcase_key(f, SWEPT);
        size_t n = 0;
        for (size_t i = first; i < s->n_cases && rc == 0; i++) {
            const tb_rcase *c = &s->cases[i];
            if (grouped[i] || c->backend != f->backend || !has_key(c, SWEPT, key))
                continue;
            grouped[i] = 1;
            if (tb_read_telemetry(db, s->id, c->id, &tel[n], err) != 0)
                rc = -1;
            else
                members[n++] = i;
        }
        /* the metrics in order of first appearance; done[m][a]: series a
         * of member m charted */
        unsigned char **done = tb_xcalloc(n + 1, sizeof *done);
        for (size_t m = 0; m < n; m++)
            done[m] = tb_xcalloc(tel[m].n + 1, 1);
        for (size_t m0 = 0; m0 < n && rc == 0; m0++)
            for (size_t a = 0; a < tel[m0].n; a++) {
                if (done[m0][a])
                    continue;
                char *metric = metric_of(&tel[m0].s[a]);
                const char *source = tel[m0].s[a].source;
                tb_chart *ch = NULL;
                if (drawn < MAX_TELEMETRY_CHARTS) {
                    char *title = tb_xasprintf("%s: %s [%s]", metric, s->backends[f->backend].label, key);
                    ch = tb_chart_new(title, "seconds since the case's backend was ready", metric);
                    free(title);
                }
                size_t n_series = 0;
                for (size_t m = m0; m < n; m++) {
                    char *words = n > 1 ? swept_words(s, &s->cases[members[m]]) : tb_xstrdup("");
                    for (size_t b = m == m0 ? a : 0; b < tel[m].n; b++) {
                        const tb_row_series *ts = &tel[m].s[b];
                        char *mb = metric_of(ts);
                        int same = strcmp(mb, metric) == 0;
                        free(mb);
                        if (!same || done[m][b])
                            continue;
                        done[m][b] = 1;
                        if (!ch || n_series++ >= PER_CHART)
                            continue;
                        const char *label = strchr(ts->name, '{');
                        const char *sname = strcmp(ts->source, "nvml") == 0 ? ts->name : label ? label : ts->name;
                        /* a series without labels is the metric itself: the case names it */
                        char *name = !*words ? tb_xstrdup(sname)
                                     : sname == ts->name && strcmp(ts->source, "nvml") != 0
                                         ? tb_xstrdup(words)
                                         : tb_xasprintf("%s: %s", words, sname);
                        int sid = tb_chart_series(ch, name, TB_SERIES_LINE);
                        free(name);
                        for (size_t k = 0; k < ts->n; k++)
                            if (isfinite(ts->v[k]))
                                tb_chart_point(ch, sid, ts->t_s[k], ts->v[k]);
                    }
                    free(words);
                }
                if (!ch) {
                    left++;
                    free(metric);
                    continue;
                }
                char more[48] = "";
                if (n_series > PER_CHART)
                    snprintf(more, sizeof more, ", the first %d drawn", PER_CHART);
                add(out, "telemetry", ch,
                    tb_xasprintf("%s sampled while the case%s ran (source: %s), %zu series%s; the sampler starts "
                                 "when the backend is ready and the warm-ups begin.%s",
                                 metric, n > 1 ? "s" : "", source, n_series, more,
                                 n > 1 ? " A curve per case: the cases differ only in the setting named." : ""));
                drawn++;
                free(metric);
            }
        for (size_t m = 0; m < n; m++) {
            free(done[m]);
            tb_row_telemetry_free(&tel[m]);
        }
        free(done);
        free(key);
    }
    free(grouped);
    free(tel);
    free(members);
    if (rc != 0)
        return -1;
    if (left && out->n && strcmp(out->v[out->n - 1].kind, "telemetry") == 0) {
        char *c = tb_xasprintf("%s (%zu more telemetry charts not drawn: the series are in the database, table "
                               "telemetry_series)", out->v[out->n - 1].caption, left);
        free(out->v[out->n - 1].caption);
        out->v[out->n - 1].caption = c;
    }
    return 0;
}

/* ------------------------------------------------------- history */

static int history_charts(sqlite3 *db, const tb_rsession *s, tb_rcharts *out, char **err)
{
    for (size_t b = 0; b < s->n_backends; b++) {
        tb_history h;
        int rc = tb_history_load(db, s->backends[b].label, "agg_tps", NULL, 0, &h, err);
        if (rc == -2)
            return -1; /* the database could not be read */
        if (rc != 0) { /* nothing to chart */
            free(*err);
            *err = NULL;
            continue;
        }
        /* Series of this session's cases that other sessions also ran:
         * every one, HISTORY_SERIES to a chart (each its own colour), up
         * to MAX_GROUPS charts; a caption says what is left out. */
        size_t *idx = tb_xmalloc((h.n + 1) * sizeof *idx), n = 0;
        for (size_t i = 0; i < h.n; i++) {
            int here = 0, valued = 0;
            for (size_t k = 0; k < h.s[i].n; k++) {
                here |= h.s[i].p[k].session == s->id;
                valued += isfinite(h.s[i].p[k].st.median);
            }
            if (here && valued >= 2)
                idx[n++] = i;
        }
        size_t n_charts = (n + HISTORY_SERIES - 1) / HISTORY_SERIES;
        size_t drawn = n_charts > MAX_GROUPS ? MAX_GROUPS * HISTORY_SERIES : n;
        for (size_t first = 0; first < drawn; first += HISTORY_SERIES) {
            size_t k = drawn - first < HISTORY_SERIES ? drawn - first : HISTORY_SERIES;
            char *title = n > HISTORY_SERIES
                              ? tb_xasprintf("history of %s: aggregate tokens/s across sessions (cases %zu-%zu of %zu)",
                                             s->backends[b].label, first + 1, first + k, n)
                              : tb_xasprintf("history of %s: aggregate tokens/s across sessions", s->backends[b].label);
            tb_chart *ch = tb_history_chart(&h, idx + first, k, title);
            free(title);
            char *more = drawn < n && first + k == drawn
                             ? tb_xasprintf(" %zu more cases are not drawn here; `tokbench history --backend %s "
                                            "--format html` draws each.",
                                            n - drawn, s->backends[b].label)
                             : tb_xstrdup("");
            add(out, "history", ch,
                tb_xasprintf("The same cases of %s in every session stored in this database (median, 95%% CI); "
                             "`tokbench history --backend %s` prints the commits and machines.%s",
                             s->backends[b].label, s->backends[b].label, more));
            free(more);
        }
        free(idx);
        tb_history_free(&h);
    }
    return 0;
}

int tb_charts_session(sqlite3 *db, const tb_rsession *s, tb_rcharts *out, char **err)
{
    memset(out, 0, sizeof *out);
    steps_charts(s, out);
    batch_charts(s, out);
    rate_charts(s, out);
    pareto_chart(s, out);
    acceptance_charts(s, out);
    canvas_charts(s, out);
    if (itl_charts(db, s, out, err) != 0 || telemetry_charts(db, s, out, err) != 0 ||
        history_charts(db, s, out, err) != 0) {
        tb_rcharts_free(out);
        return -1;
    }
    return 0;
}
