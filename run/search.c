/* search.c — see search.h. */
#include "search.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util.h"

void tb_search_point_init(tb_search_point *p)
{
    *p = (tb_search_point){.case_id = -1, .req_throughput = NAN, .ttft_p99_ms = NAN, .tpot_p99_ms = NAN,
                           .goodput_pct = NAN, .pass = -1};
}

static const tb_stats *metric(const tb_case_record *rec, const char *name)
{
    for (size_t i = 0; i < rec->n_metrics; i++)
        if (strcmp(rec->metrics[i].name, name) == 0 && rec->metrics[i].st.n)
            return &rec->metrics[i].st;
    return NULL;
}

static int is_probe(const tb_search_ctx *s)
{
    return s->role && strcmp(s->role, "probe") == 0;
}

void tb_search_point_of(const tb_search_ctx *s, const tb_case_record *rec, tb_search_point *p)
{
    const tb_suite *suite = s->plan->suite;
    tb_search_point_init(p);
    const tb_stats *thr = metric(rec, "req_throughput"), *ttft = metric(rec, "ttft_ms"), *tpot = metric(rec, "tpot_ms");
    p->req_throughput = thr ? thr->median : NAN;
    p->ttft_p99_ms = ttft ? ttft->p99 : NAN;
    p->tpot_p99_ms = tpot ? tpot->p99 : NAN;
    size_t good = 0;
    for (size_t i = 0; i < rec->n_samples; i++) {
        const tb_sample_record *smp = &rec->samples[i];
        if (smp->warmup)
            continue;
        for (uint32_t r = 0; r < smp->n_requests; r++) {
            const tb_request_record *q = &smp->requests[r];
            p->measured++;
            if (q->status != 0)
                p->failed++;
            else
                good += tb_request_good(&q->m, suite->goodput_ttft_ms, suite->goodput_tpot_ms);
        }
    }
    if ((suite->goodput_ttft_ms > 0 || suite->goodput_tpot_ms > 0) && p->measured)
        p->goodput_pct = 100.0 * (double)good / (double)p->measured;
    p->ran = p->measured > 0 && strcmp(rec->status ? rec->status : "ok", "ok") == 0;
    p->pass = is_probe(s) ? tb_search_meets(suite, p) : -1;
}

int tb_search_meets(const tb_suite *suite, const tb_search_point *p)
{
    if (!p->ran || p->measured == 0 || p->failed > 0)
        return 0;
    if (suite->slo_ttft_p99_ms > 0 && !(p->ttft_p99_ms <= suite->slo_ttft_p99_ms))
        return 0;
    /* NaN: no request had two tokens, so no TPOT to exceed (as goodput) */
    if (suite->slo_tpot_p99_ms > 0 && p->tpot_p99_ms > suite->slo_tpot_p99_ms)
        return 0;
    if (suite->slo_goodput_pct > 0 && !(p->goodput_pct >= suite->slo_goodput_pct))
        return 0;
    return 1;
}

void tb_search_mark(const tb_search_ctx *s, tb_case_record *rec)
{
    rec->search_id = s->search_id;
    rec->search_role = s->role;
    rec->search_pass = -1;
    if (is_probe(s)) {
        tb_search_point p;
        if (rec->n_samples) {
            tb_search_point_of(s, rec, &p);
        } else { /* failed or skipped: no figures */
            tb_search_point_init(&p);
            p.pass = 0;
        }
        rec->search_pass = p.pass;
    }
}

void tb_search_sweep_rates(double lo, double hi, int k, double *out)
{
    for (int i = 1; i <= k; i++)
        out[i - 1] = lo + (hi - lo) * i / (k + 1);
}

size_t tb_search_max_runs(const tb_suite *suite, const tb_case *c)
{
    if (c->search == TB_SEARCH_SWEEP)
        return 2 + (size_t)suite->sweep_rates;
    if (c->search == TB_SEARCH_SLO)
        return 4 + TB_SEARCH_DOWN_STEPS + (size_t)suite->slo_iterations;
    return 1;
}

char *tb_search_why_not(const tb_suite *suite, const tb_search_point *p)
{
    if (!p->ran)
        return tb_xstrdup("the run failed");
    if (!p->measured)
        return tb_xstrdup("no request was measured");
    tb_str b = {0};
    const char *sep = "";
    if (p->failed) {
        tb_str_appendf(&b, "%zu of %zu requests failed", p->failed, p->measured);
        sep = ", ";
    }
    if (suite->slo_ttft_p99_ms > 0 && !(p->ttft_p99_ms <= suite->slo_ttft_p99_ms)) {
        if (isnan(p->ttft_p99_ms))
            tb_str_appendf(&b, "%sno TTFT", sep);
        else
            tb_str_appendf(&b, "%sTTFT p99 %.2f ms > %g ms", sep, p->ttft_p99_ms, suite->slo_ttft_p99_ms);
        sep = ", ";
    }
    if (suite->slo_tpot_p99_ms > 0 && p->tpot_p99_ms > suite->slo_tpot_p99_ms) {
        tb_str_appendf(&b, "%sTPOT p99 %.2f ms > %g ms", sep, p->tpot_p99_ms, suite->slo_tpot_p99_ms);
        sep = ", ";
    }
    if (suite->slo_goodput_pct > 0 && !(p->goodput_pct >= suite->slo_goodput_pct)) {
        if (isnan(p->goodput_pct))
            tb_str_appendf(&b, "%sno goodput share", sep);
        else
            tb_str_appendf(&b, "%sgoodput %.1f%% < %g%%", sep, p->goodput_pct, suite->slo_goodput_pct);
        sep = ", ";
    }
    if (!b.len)
        tb_str_append(&b, "it met the limits");
    return tb_str_take(&b);
}

/* The limits a search stored: what it looked for. */
static char *limits_json(const tb_suite *suite, int kind)
{
    cJSON *o = cJSON_CreateObject();
    if (kind == TB_SEARCH_SWEEP) {
        cJSON_AddNumberToObject(o, "sweep_rates", suite->sweep_rates);
    } else {
        const struct {
            const char *name;
            double v;
        } lim[] = {{"ttft_p99_ms", suite->slo_ttft_p99_ms},
                   {"tpot_p99_ms", suite->slo_tpot_p99_ms},
                   {"goodput_pct", suite->slo_goodput_pct},
                   {"goodput_ttft_ms", suite->goodput_ttft_ms},
                   {"goodput_tpot_ms", suite->goodput_tpot_ms}};
        for (size_t i = 0; i < sizeof lim / sizeof *lim; i++)
            if (lim[i].v > 0)
                cJSON_AddNumberToObject(o, lim[i].name, lim[i].v);
        cJSON_AddNumberToObject(o, "iterations", suite->slo_iterations);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *out = tb_xstrdup(s ? s : "{}");
    cJSON_free(s);
    return out;
}

typedef struct search_state {
    tb_search_ctx s;
    tb_store *store;
    size_t *next_ordinal;
    tb_search_run_fn run_fn;
    void *ctx;
    int stopped;
} search_state;

/* One run: the template at this concurrency or rate. */
static tb_search_point run(search_state *st, const char *role, uint32_t concurrency, double rate)
{
    tb_case c = *st->s.tmpl;
    c.ordinal = (*st->next_ordinal)++;
    c.search = TB_SEARCH_NONE;
    c.concurrency = concurrency;
    c.request_rate = rate;
    if (rate > 0 && c.requests_default) /* an open loop's length at its rate */
        c.requests = tb_plan_open_loop_requests(st->s.plan->suite, rate);
    st->s.role = role;
    tb_search_point p;
    tb_search_point_init(&p);
    if (!st->stopped && st->run_fn(st->ctx, &c, &st->s, &p) != 0) {
        st->stopped = 1;
        /* A probe cut off (Ctrl-C, SIGTERM) has no figures and no verdict:
         * the search decided nothing on it. The runner stored it failed
         * with the rule's "not met" (tb_search_mark); its verdict is
         * NULL. One that finished after the signal keeps its verdict. */
        if (is_probe(&st->s) && !p.ran && !p.measured) {
            char *why = NULL;
            if (tb_store_search_no_verdict(st->store, st->s.search_id, c.ordinal, &why) != 0)
                fprintf(stderr, "tokbench: %s\n", why); /* the probe stays stored, as failed */
            free(why);
        }
    }
    return p;
}

int tb_search_run(const tb_plan *plan, const tb_case *tmpl, tb_store *store, int64_t session_id, int64_t backend_id,
                  size_t *next_ordinal, tb_search_run_fn run_fn, void *ctx, char **err)
{
    const tb_suite *suite = plan->suite;
    char *limits = limits_json(suite, tmpl->search);
    int64_t id = tb_store_search_begin(store, session_id, backend_id, tmpl->ordinal,
                                       tmpl->search == TB_SEARCH_SWEEP ? "sweep" : "slo", limits, err);
    free(limits);
    if (id < 0)
        return -1;
    search_state st = {.s = {.plan = plan, .tmpl = tmpl, .search_id = id}, .store = store, .next_ordinal = next_ordinal,
                       .run_fn = run_fn, .ctx = ctx};
    tb_search_result res = {.status = "interrupted", .sync_rate = NAN, .max_rate = NAN, .slo_rate = NAN};

    /* the two bounds: one request at a time, every request at once */
    tb_search_point sync = run(&st, "synchronous", 1, 0);
    tb_search_point thr = run(&st, "throughput", tmpl->requests, 0);
    res.sync_rate = sync.req_throughput;
    res.max_rate = thr.req_throughput;
    double lo = fmin(sync.req_throughput, thr.req_throughput), hi = fmax(sync.req_throughput, thr.req_throughput);
    if (st.stopped) {
        /* interrupted: what ran is stored */
    } else if (!sync.ran || !thr.ran || !(lo > 0) || !isfinite(hi)) {
        res.status = "failed";
        res.error = tb_xasprintf("the %s run gave no achieved requests/s: no rates to search",
                                 !sync.ran || !(sync.req_throughput > 0) ? "synchronous" : "throughput");
    } else if (tmpl->search == TB_SEARCH_SWEEP) {
        int k = suite->sweep_rates;
        double *rates = tb_xcalloc((size_t)k, sizeof *rates);
        tb_search_sweep_rates(lo, hi, k, rates);
        for (int i = 0; i < k && !st.stopped; i++)
            run(&st, "rate", 0, rates[i]);
        free(rates);
        if (!st.stopped)
            res.status = "done";
    } else {
        /* the limits at the throughput run's rate, at the synchronous
         * run's (and below it when that misses them), then bisection
         * between the best that met them and the worst that did not */
        tb_search_point top = run(&st, "probe", 0, hi);
        if (!st.stopped && top.pass == 1) {
            res.status = "above";
            res.slo_rate = hi;
        } else if (!st.stopped) {
            tb_search_point bottom = run(&st, "probe", 0, lo);
            double good = lo, bad = hi;
            if (!st.stopped && bottom.pass != 1) {
                /* not met at the synchronous rate either: halve it, up to
                 * TB_SEARCH_DOWN_STEPS times, until a rate meets them */
                tb_search_point low = bottom;
                double rate = lo;
                good = NAN;
                for (int i = 0; i < TB_SEARCH_DOWN_STEPS && !st.stopped && isnan(good); i++) {
                    bad = rate;
                    rate /= 2;
                    low = run(&st, "probe", 0, rate);
                    if (!st.stopped && low.pass == 1)
                        good = rate;
                }
                if (!st.stopped && isnan(good)) {
                    char *why = tb_search_why_not(suite, &low);
                    res.status = "below";
                    /* lo is the lower bound: the synchronous run's rate,
                     * or the throughput run's when that achieved less */
                    res.error = tb_xasprintf("no rate met the limits: the lowest tried, %.2f requests/s (1/%d of "
                                             "the %s %.2f), had %s",
                                             rate, 1 << TB_SEARCH_DOWN_STEPS,
                                             thr.req_throughput < sync.req_throughput ? "throughput" : "synchronous",
                                             lo, why);
                    free(why);
                }
            }
            if (!st.stopped && !isnan(good)) {
                for (int i = 0; i < suite->slo_iterations && !st.stopped; i++) {
                    double mid = (good + bad) / 2;
                    tb_search_point p = run(&st, "probe", 0, mid);
                    if (st.stopped)
                        break;
                    if (p.pass == 1)
                        good = mid;
                    else
                        bad = mid;
                }
                if (!st.stopped) {
                    res.status = "found";
                    res.slo_rate = good;
                }
            }
        }
    }
    int rc = tb_store_search_end(store, id, &res, err);
    free(res.error);
    return rc;
}
