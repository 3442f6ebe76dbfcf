/* report_tables.c — see report_tables.h. */
#define _GNU_SOURCE
#include "report_tables.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aup.h"
#include "metrics.h"
#include "util.h"
#include "warnings.h"

static tb_rtable *table_new(tb_rtables *ts, const char *id, const char *title, char *note)
{
    ts->v = tb_xrealloc(ts->v, (ts->n + 1) * sizeof *ts->v);
    tb_rtable *t = &ts->v[ts->n++];
    memset(t, 0, sizeof *t);
    t->id = id;
    t->title = title;
    t->note = note;
    return t;
}

/* Whether the session's tables have a column for dimension d: a stored
 * one that every case has, or that some case applies. */
static int dim_shown(const tb_rsession *s, tb_dim d)
{
    return tb_dim_defs[d].column && (tb_dim_defs[d].required || (s->dims & TB_RDIM(d)));
}

static void column(tb_rtable *t, const char *head, int numeric)
{
    t->head = tb_xrealloc(t->head, (t->n_cols + 1) * sizeof *t->head);
    t->numeric = tb_xrealloc(t->numeric, (t->n_cols + 1) * sizeof *t->numeric);
    t->head[t->n_cols] = tb_xstrdup(head);
    t->numeric[t->n_cols] = numeric;
    t->n_cols++;
}

/* Rows are assembled in a small buffer and appended whole. */
typedef struct row {
    char **c;
    size_t n;
} row;

static void put(row *r, char *text /* taken */)
{
    r->c = tb_xrealloc(r->c, (r->n + 1) * sizeof *r->c);
    r->c[r->n++] = text;
}

static void putf_num(row *r, double v, int prec)
{
    char buf[64];
    put(r, tb_xstrdup(tb_rfmt(buf, sizeof buf, v, prec)));
}

static void end_row(tb_rtable *t, row *r)
{
    while (r->n < t->n_cols)
        put(r, tb_xstrdup(""));
    t->cells = tb_xrealloc(t->cells, (t->n_rows + 1) * t->n_cols * sizeof *t->cells);
    memcpy(t->cells + t->n_rows * t->n_cols, r->c, t->n_cols * sizeof *r->c);
    for (size_t i = t->n_cols; i < r->n; i++)
        free(r->c[i]);
    t->n_rows++;
    free(r->c);
    r->c = NULL;
    r->n = 0;
}

static double stat_of(const tb_rcase *c, const char *metric, char which)
{
    const tb_stats *st = tb_rcase_metric(c, metric);
    if (!st)
        return NAN;
    switch (which) {
    case 'm': return st->median;
    case '5': return st->p5;
    case '9': return st->p95;
    case 'c': return st->cv;
    case 'n': return (double)st->n;
    default: return NAN;
    }
}

static void side_by_side(const tb_rsession *s, tb_rtables *ts)
{
    if (s->n_backends < 2)
        return;
    tb_rtable *t = table_new(ts, "side-by-side", "Side by side: aggregate tokens/s",
                             tb_xstrdup("Median over repetitions of all output tokens of a batch / its wall time. "
                                        "A backend without a dimension (an AR engine has no denoising steps) is "
                                        "shown in every row it is the reference for."));
    for (int d = 0; d < TB_N_DIMS; d++)
        if (dim_shown(s, (tb_dim)d)) {
            char *head = tb_xasprintf("%s%s", tb_dim_defs[d].word, tb_dim_defs[d].unit);
            column(t, head, 1);
            free(head);
        }
    if (s->dims & TB_RDIM_OPTS)
        column(t, "options", 0);
    for (size_t b = 0; b < s->n_backends; b++)
        column(t, s->backends[b].label, 1);
    tb_rgrid g;
    tb_rgrid_build(s, &g);
    for (size_t r = 0; r < g.n_rows; r++) {
        const tb_rcase *c = &s->cases[g.row_case[r]];
        row rw = {0};
        for (int d = 0; d < TB_N_DIMS; d++)
            if (dim_shown(s, (tb_dim)d)) {
                char v[48];
                char *prompt = d == TB_DIM_PROMPT_TOKENS ? tb_rcase_prompt(s, c) : NULL;
                put(&rw, prompt ? prompt : tb_xstrdup(tb_case_dim_text(&c->dims, (tb_dim)d, v, sizeof v)));
            }
        if (s->dims & TB_RDIM_OPTS) {
            char *words = tb_roptions_words(c->options_json);
            if (!*words) {
                free(words);
                words = tb_xstrdup("-");
            }
            put(&rw, words);
        }
        for (size_t b = 0; b < s->n_backends; b++) {
            long ci = g.cell[r * s->n_backends + b];
            if (ci < 0) {
                put(&rw, tb_xstrdup(""));
                continue;
            }
            const tb_rcase *bc = &s->cases[ci];
            if (strcmp(bc->status, "ok") != 0)
                put(&rw, tb_xstrdup(bc->status));
            else
                putf_num(&rw, tb_rcase_median(bc, "agg_tps"), 1);
        }
        end_row(t, &rw);
    }
    tb_rgrid_free(&g);
}

static void case_cells(const tb_rsession *s, const tb_rcase *c, row *r)
{
    put(r, tb_xstrdup(s->backends[c->backend].label));
    put(r, tb_rcase_dims(s, c));
}

static void throughput(const tb_rsession *s, tb_rtables *ts)
{
    tb_rtable *t = table_new(
        ts, "throughput", "Throughput (tokens/s)",
        tb_xasprintf("Three meanings, never mixed: per request = one request's output tokens / its E2E time (what "
                     "a user sees), median over the requests; p5 = its 5th percentile, the rate 95%% of requests "
                     "reach (the slow tail); aggregate = all output tokens of a call / its wall time (what the "
                     "machine delivers), median over the calls; decode-only excludes prefill. calls = the measured "
                     "generate() calls (repetitions, or their calls over a prompt set). CV over the calls above "
                     "%.0f%% is flagged noisy (!), except over a prompt set, whose calls run different items.",
                     TB_NOISE_CV * 100));
    static const char *const head[] = {"backend", "case", "status", "calls", "per request", "p5 (slow tail)",
                                       "aggregate", "aggregate 95% CI", "aggregate CV", "decode-only"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 3);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        row r = {0};
        case_cells(s, c, &r);
        put(&r, tb_xstrdup(tb_rcase_status(c)));
        putf_num(&r, stat_of(c, "agg_tps", 'n'), 0);
        putf_num(&r, stat_of(c, "req_tps", 'm'), 1);
        putf_num(&r, stat_of(c, "req_tps", '5'), 1);
        putf_num(&r, stat_of(c, "agg_tps", 'm'), 1);
        const tb_stats *agg = tb_rcase_metric(c, "agg_tps");
        put(&r, agg && isfinite(agg->ci_lo) ? tb_xasprintf("%.1f – %.1f", agg->ci_lo, agg->ci_hi) : tb_xstrdup("-"));
        double cv = stat_of(c, "agg_tps", 'c');
        put(&r, isfinite(cv) ? tb_xasprintf("%.1f%%%s", cv * 100, tb_case_noisy(s, c) ? " !" : "") : tb_xstrdup("-"));
        putf_num(&r, stat_of(c, "decode_tps", 'm'), 1);
        end_row(t, &r);
    }
}

static void latency(const tb_rsession *s, tb_rtables *ts)
{
    tb_rtable *t = table_new(
        ts, "latency", "Latency (ms)",
        tb_xstrdup("TTFT: submit to first emitted token (diffusion: first committed token); TPOT: (E2E - TTFT) / "
                   "(tokens - 1); ITL: gaps between emissions; E2E: submit to the complete answer. p95 = 95th "
                   "percentile (the slow tail of a latency)."));
    static const char *const head[] = {"backend",  "case",     "TTFT",    "TTFT p95", "TPOT",
                                       "ITL",      "ITL p95",  "E2E",     "E2E p95",  "prefill"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 2);
    int canvas = 0;
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        row r = {0};
        case_cells(s, c, &r);
        putf_num(&r, stat_of(c, "ttft_ms", 'm'), 2);
        putf_num(&r, stat_of(c, "ttft_ms", '9'), 2);
        const tb_stats *gap = tb_rcase_metric(c, "canvas_gap_ms");
        if (gap && tb_case_is_canvas(gap->n) && isfinite(gap->median)) { /* TPOT over a canvas means nothing */
            put(&r, tb_xasprintf("%.3f" TB_CANVAS_TPOT_MARK, gap->median));
            canvas = 1;
        } else {
            putf_num(&r, stat_of(c, "tpot_ms", 'm'), 3);
        }
        putf_num(&r, stat_of(c, "itl_ms", 'm'), 3);
        putf_num(&r, stat_of(c, "itl_ms", '9'), 3);
        putf_num(&r, stat_of(c, "e2e_ms", 'm'), 2);
        putf_num(&r, stat_of(c, "e2e_ms", '9'), 2);
        putf_num(&r, stat_of(c, "prefill_ms", 'm'), 2);
        end_row(t, &r);
    }
    if (canvas) { /* the note says what the marked cells hold */
        char *note = tb_xasprintf("%s %s.", t->note, TB_CANVAS_TPOT_NOTE);
        free(t->note);
        t->note = note;
    }
}

static void work(const tb_rsession *s, tb_rtables *ts)
{
    tb_rtable *t = table_new(
        ts, "work", "Work and resources",
        tb_xstrdup("NFE: model forward evaluations per call (median); tokens per forward: output tokens / NFE; "
                   "steps done: denoising steps a request ran; answer tokens: output before the first EOS "
                   "(diffusion canvases); device memory: peak over repetitions; host RSS: the backend process's "
                   "high-water mark; energy: from the GPU's energy counter; roofline: achieved over the machine's "
                   "ceiling; experts/token and active MB/token: a mixture of experts' distinct experts read "
                   "per token and MoE layer, and the device bytes read per output token (docs/METRICS.md). "
                   "\"-\": not measured by this backend."));
    static const char *const head[] = {"backend",        "case",          "NFE",           "tokens/forward",
                                       "steps done",     "answer tokens", "device MiB",    "host RSS MiB",
                                       "energy J/token", "experts/token", "active MB/token", "roofline %"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 2);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        row r = {0};
        case_cells(s, c, &r);
        putf_num(&r, stat_of(c, "forward_passes", 'm'), 0);
        putf_num(&r, stat_of(c, "tokens_per_forward", 'm'), 2);
        putf_num(&r, stat_of(c, "steps_done", 'm'), 0);
        putf_num(&r, stat_of(c, "answer_tokens", 'm'), 0);
        putf_num(&r, c->peak_device_mib, 0);
        putf_num(&r, c->host_rss_mib, 0);
        putf_num(&r, c->energy_j_per_token, 4);
        putf_num(&r, stat_of(c, "experts_per_token", 'm'), 2);
        putf_num(&r, stat_of(c, "active_bytes_per_token", 'm') / 1e6, 1);
        putf_num(&r, stat_of(c, "roofline_pct", 'm'), 1);
        end_row(t, &r);
    }
}

/* "0.75 0.50 0.50 0.25": a case's acceptance at draft positions 1 .. k
 * (pooled over the requests; "-" where a position has none). */
static char *by_position(const tb_rcase *c)
{
    uint32_t k = tb_rcase_positions(c);
    if (!k)
        return tb_xstrdup("-");
    tb_str b = {0};
    for (uint32_t i = 1; i <= k; i++) {
        char name[32];
        snprintf(name, sizeof name, TB_ACCEPTANCE_AT_PREFIX "%u", i);
        const tb_stats *st = tb_rcase_metric(c, name);
        if (st && st->n && isfinite(st->mean))
            tb_str_appendf(&b, "%s%.2f", i > 1 ? " " : "", st->mean);
        else
            tb_str_appendf(&b, "%s-", i > 1 ? " " : "");
    }
    return tb_str_take(&b);
}

/* Speculative decoding (docs/METRICS.md): its own table, of the cases
 * that decoded speculatively only, so that other sessions' tables keep
 * their width. */
static void speculative(const tb_rsession *s, tb_rtables *ts)
{
    if (!s->has_spec)
        return;
    tb_rtable *t = table_new(
        ts, "speculative", "Speculative decoding",
        tb_xstrdup("Acceptance length: tokens a verification yields (accepted draft tokens plus the target's "
                   "bonus token); acceptance rate: accepted / drafted draft tokens; by position: the share of "
                   "verifications that accepted draft position 1, 2, ... (the chart \"acceptance by position\"); "
                   "all three pooled over the case's requests; draft time: the share of the decode phase spent "
                   "drafting; target forwards/token: the target's forwards per output token (docs/METRICS.md)."));
    static const char *const head[] = {"backend",          "case",          "acceptance length",
                                       "acceptance rate", "draft positions", "by position", "draft time share",
                                       "target forwards/token", "tokens/forward", "aggregate tok/s"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 2 && i != 5);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        if (!tb_rcase_spec(c))
            continue;
        row r = {0};
        case_cells(s, c, &r);
        putf_num(&r, stat_of(c, "acceptance_length", 'm'), 2);
        putf_num(&r, stat_of(c, "acceptance_rate", 'm'), 3);
        uint32_t k = tb_rcase_positions(c);
        putf_num(&r, k ? (double)k : NAN, 0);
        put(&r, by_position(c));
        putf_num(&r, stat_of(c, "draft_time_share", 'm'), 3);
        putf_num(&r, stat_of(c, "target_forwards_per_token", 'm'), 3);
        putf_num(&r, stat_of(c, "tokens_per_forward", 'm'), 2);
        putf_num(&r, stat_of(c, "agg_tps", 'm'), 1);
        end_row(t, &r);
    }
}

static void quality(const tb_rsession *s, tb_rtables *ts)
{
    if (!s->has_quality)
        return;
    tb_rtable *t = table_new(ts, "quality", "Quality next to speed",
                             tb_xstrdup("The quality score stored with the same runs (higher is better), next to "
                                        "the speed it was measured at. Accuracy: the fraction of graded items "
                                        "answered correctly, n = items, with its Wilson 95% interval; judge "
                                        "perplexity: median over answers (lower is better)."));
    static const char *const head[] = {"backend", "case", "metric", "unit", "n", "value", "CI low", "CI high",
                                       "judge ppl", "aggregate tok/s"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 4);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        const tb_rmetric *q = tb_rcase_quality(c);
        if (!q)
            continue;
        row r = {0};
        case_cells(s, c, &r);
        put(&r, tb_xstrdup(q->name));
        put(&r, tb_xstrdup(q->unit));
        putf_num(&r, (double)q->st.n, 0);
        putf_num(&r, q->st.median, 3);
        putf_num(&r, q->st.ci_lo, 3);
        putf_num(&r, q->st.ci_hi, 3);
        putf_num(&r, tb_rcase_median(c, "judge_ppl"), 2);
        putf_num(&r, tb_rcase_median(c, "agg_tps"), 1);
        end_row(t, &r);
    }
}

/* Accuracy under parallelism (aup.h, docs/METRICS.md): one score per
 * backend and condition, beside the quality table and the Pareto chart. */
static void aup(const tb_rsession *s, tb_rtables *ts)
{
    tb_aup_rows a;
    tb_aup_session(s, &a);
    if (!a.n)
        return;
    tb_rtable *t = table_new(
        ts, "aup", "Accuracy under parallelism (AUP)",
        tb_xasprintf("One score per backend and condition for \"faster at what quality\" (d3LLM's AUP): the "
                     "area under accuracy (%%) against tokens per forward, over the backend's sweep of steps or "
                     "swept options, each point's accuracy weighted by min(exp(-%g (1 - y / y_max)), 1), points "
                     "more than %g points below the first (fewest tokens per forward) dropped. It starts at the "
                     "first point's tokens per forward x accuracy, so a backend with one point (an AR engine: "
                     "about batch tokens per forward) scores just that. y_max: the best accuracy of any backend "
                     "under the condition, block length aside (docs/METRICS.md).",
                     TB_AUP_ALPHA, TB_AUP_DROP));
    /* the points last: `show` leaves out columns from the right to fit */
    static const char *const head[] = {"backend", "condition", "AUP", "y_max %", "points used",
                                       "points (tokens/forward: accuracy)"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 2 && i <= 4);
    for (size_t i = 0; i < a.n; i++) {
        const tb_aup_row *x = &a.v[i];
        size_t used = 0;
        for (size_t k = 0; k < x->n_pts; k++)
            used += (size_t)x->pts[k].used;
        row r = {0};
        put(&r, tb_xstrdup(s->backends[x->backend].label));
        put(&r, tb_xstrdup(x->condition));
        putf_num(&r, x->aup, 1);
        putf_num(&r, x->y_max, 1);
        put(&r, tb_xasprintf("%zu of %zu", used, x->n_pts));
        put(&r, tb_aup_points_text(x));
        end_row(t, &r);
    }
    tb_aup_rows_free(&a);
}

static void statistics(const tb_rsession *s, tb_rtables *ts)
{
    tb_rtable *t = table_new(ts, "statistics", "Every metric of every case",
                             tb_xstrdup("Statistics over the measured repetitions (warm-ups excluded): one value "
                                        "per repetition, or per request, or per gap for itl_ms (docs/METRICS.md). "
                                        "CI: bootstrap 95% confidence interval of the median."));
    static const char *const head[] = {"backend", "case", "metric", "unit", "n",   "median", "p5",    "p95",
                                       "mean",    "stdev", "CV %",  "min",  "max", "CI low", "CI high"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 4);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        for (size_t k = 0; k < c->n_metrics; k++) {
            const tb_rmetric *m = &c->metrics[k];
            row r = {0};
            case_cells(s, c, &r);
            put(&r, tb_xstrdup(m->name));
            put(&r, tb_xstrdup(m->unit));
            putf_num(&r, (double)m->st.n, 0);
            const double v[] = {m->st.median, m->st.p5, m->st.p95, m->st.mean, m->st.stdev, m->st.cv * 100,
                                m->st.min, m->st.max, m->st.ci_lo, m->st.ci_hi};
            for (size_t j = 0; j < TB_ARRAY_LEN(v); j++)
                putf_num(&r, v[j], j == 5 ? 1 : 4);
            end_row(t, &r);
        }
    }
}

/* Load searches (core/search.h): the answer of each, then its runs, the
 * evidence, each a stored case. */
static void searches(const tb_rsession *s, tb_rtables *ts)
{
    if (!s->n_searches)
        return;
    tb_rtable *t = table_new(
        ts, "searches", "Load searches",
        tb_xstrdup("request_rate = sweep: a synchronous run (one request at a time), a throughput run (every "
                   "request at once), then sweep_rates open-loop rates evenly spaced between their achieved "
                   "requests/s. request_rate = slo: the same two runs, then the highest rate whose probe met the "
                   "limits, by bisection: slo_max_rate (docs/METRICS.md, \"Load searches\"). Status: found (between "
                   "the bounds, or below the synchronous rate, searched down), above (met even at the throughput "
                   "rate), below (not met at any rate tried, down to a quarter of the synchronous rate: why, in "
                   "words), done (a sweep), failed, interrupted."));
    static const char *const head[] = {"backend", "search", "limits", "status", "synchronous req/s",
                                       "throughput req/s", "slo_max_rate req/s", "runs"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head); i++)
        column(t, head[i], i >= 4);
    for (size_t k = 0; k < s->n_searches; k++) {
        const tb_rsearch *x = &s->searches[k];
        row r = {0};
        put(&r, tb_xstrdup(s->backends[x->backend].label));
        put(&r, tb_xasprintf("%s #%lld (case #%d)", x->kind, (long long)x->id, x->ordinal));
        put(&r, tb_xstrdup(x->limits_json));
        put(&r, x->error ? tb_xasprintf("%s: %s", x->status, x->error) : tb_xstrdup(x->status));
        putf_num(&r, x->sync_rate, 2);
        putf_num(&r, x->max_rate, 2);
        putf_num(&r, x->slo_rate, 2);
        size_t runs = 0;
        for (size_t i = 0; i < s->n_cases; i++)
            runs += s->cases[i].search_id == x->id;
        putf_num(&r, (double)runs, 0);
        end_row(t, &r);
    }
    t = table_new(ts, "search-runs", "Load searches: the runs",
                  tb_xstrdup("Every run of a search, an ordinary case of this session: what it offered (concurrency "
                             "or open-loop rate), what its schedule sent (an open loop's requests over the span of "
                             "their sends), what the server achieved, the latency tails the limits apply to, "
                             "the share of requests within the goodput limits, and a probe's verdict."));
    static const char *const head2[] = {"backend",     "search",      "case",           "role",
                                        "concurrency", "offered req/s", "sent req/s",   "achieved req/s",
                                        "TTFT p99 ms", "TPOT p99 ms", "failed requests", "verdict"};
    for (size_t i = 0; i < TB_ARRAY_LEN(head2); i++)
        column(t, head2[i], i >= 4 && i < 11);
    for (size_t k = 0; k < s->n_searches; k++)
        for (size_t i = 0; i < s->n_cases; i++) {
            const tb_rcase *c = &s->cases[i];
            if (c->search_id != s->searches[k].id)
                continue;
            const tb_stats *ttft = tb_rcase_metric(c, "ttft_ms"), *tpot = tb_rcase_metric(c, "tpot_ms");
            row r = {0};
            put(&r, tb_xstrdup(s->backends[c->backend].label));
            put(&r, tb_xasprintf("%s #%lld", s->searches[k].kind, (long long)s->searches[k].id));
            put(&r, tb_xasprintf("#%d", c->ordinal));
            put(&r, tb_xstrdup(c->search_role ? c->search_role : ""));
            putf_num(&r, c->dims.concurrency ? (double)c->dims.concurrency : NAN, 0);
            putf_num(&r, c->dims.request_rate > 0 ? c->dims.request_rate : NAN, 2);
            putf_num(&r, tb_rcase_median(c, "sent_rate"), 2);
            putf_num(&r, tb_rcase_median(c, "req_throughput"), 2);
            putf_num(&r, ttft ? ttft->p99 : NAN, 3);
            putf_num(&r, tpot ? tpot->p99 : NAN, 3);
            putf_num(&r, (double)c->failed_requests, 0);
            put(&r, tb_xstrdup(tb_rcase_cut_off(s, c) ? "interrupted (no verdict)"
                               : c->search_pass == 1                  ? "met"
                               : c->search_pass == 0                  ? "not met"
                                                                      : ""));
            end_row(t, &r);
        }
}

void tb_rtables_build(const tb_rsession *s, tb_rtables *out)
{
    memset(out, 0, sizeof *out);
    side_by_side(s, out);
    searches(s, out);
    throughput(s, out);
    latency(s, out);
    work(s, out);
    speculative(s, out);
    quality(s, out);
    aup(s, out);
    statistics(s, out);
}

void tb_rtables_free(tb_rtables *ts)
{
    for (size_t i = 0; i < ts->n; i++) {
        tb_rtable *t = &ts->v[i];
        for (size_t k = 0; k < t->n_cols; k++)
            free(t->head[k]);
        for (size_t k = 0; k < t->n_rows * t->n_cols; k++)
            free(t->cells[k]);
        free(t->head);
        free(t->cells);
        free(t->numeric);
        free(t->note);
    }
    free(ts->v);
    memset(ts, 0, sizeof *ts);
}
