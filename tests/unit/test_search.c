/* test_search.c — core/search.c, the load searches' policy (docs/METRICS.md,
 * "Load searches"), against a scripted server: each run's figures come
 * from a rule of its offered load (no timing), and the search's row goes
 * to a real SQLite store. Checked: the order and loads of the runs (a
 * sweep's rates evenly between the two bounds; an SLO search's probes at
 * the bounds, then each at the midpoint of the best rate that met the
 * limits and the worst that did not), the answer (the highest probed rate
 * that met them) and status (found, above, below, failed, interrupted),
 * the verdict rule (tb_search_meets) and a run's figures from its record
 * (tb_search_point_of: p99s as stored, the goodput share over measured
 * requests, warm-ups left out). */
#define _GNU_SOURCE
#include "search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "metrics.h"
#include "util.h"

/* ------------------------------------------------ the scripted server */

typedef struct run_log {
    char role[16];
    uint32_t concurrency, requests;
    double rate;
    size_t ordinal;
    int pass;
} run_log;

typedef struct fake {
    const tb_suite *suite;
    double sync_rps, max_rps; /* what the two bounds achieve */
    double knee;              /* p99 TTFT is 10 ms below this rate, 500 above */
    int fail_role_sync;       /* the synchronous run fails */
    size_t stop_after;        /* ask the search to stop after this many runs (0: never) */
    int stop_cut;             /* that last run was cut off: no figures (else it finished) */
    tb_store *st;             /* set: each run stored as the runner stores it (a bench_case
                                 row with its search, role and tb_search_mark's verdict) */
    run_log log[64];
    size_t n;
} fake;

static int fake_run(void *ctx, const tb_case *run, const tb_search_ctx *s, tb_search_point *p)
{
    fake *f = ctx;
    tb_search_point_init(p);
    int sync = strcmp(s->role, "synchronous") == 0, thr = strcmp(s->role, "throughput") == 0;
    int cut = f->stop_after && f->n + 1 >= f->stop_after && f->stop_cut;
    if (!(sync && f->fail_role_sync) && !cut) {
        p->ran = 1;
        p->measured = 10;
        p->req_throughput = sync ? f->sync_rps : thr ? f->max_rps : fmin(run->request_rate, f->max_rps);
        double load = sync ? f->sync_rps : thr ? f->max_rps : run->request_rate;
        p->ttft_p99_ms = load < f->knee ? 10 : 500;
        p->tpot_p99_ms = 1;
        p->pass = strcmp(s->role, "probe") == 0 ? tb_search_meets(f->suite, p) : -1;
    }
    if (f->st) { /* as runner.c's finish_case: a cut-off run failed, without samples */
        tb_case_record rec = {.status = cut ? "failed" : "ok"};
        tb_search_mark(s, &rec);
        if (!cut && rec.search_pass >= 0) /* the runner's: from the record's figures */
            rec.search_pass = p->pass;
        sqlite3_stmt *q;
        sqlite3_prepare_v2(tb_store_db(f->st),
                           "INSERT INTO bench_case (session_id, backend_id, ordinal, prompt_tokens, max_new_tokens,"
                           " batch, options_json, status, search_id, search_role, search_pass)"
                           " VALUES (1, 1, ?, 8, 8, 1, '{}', ?, ?, ?, ?)",
                           -1, &q, NULL);
        sqlite3_bind_int64(q, 1, (int64_t)run->ordinal);
        sqlite3_bind_text(q, 2, rec.status, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 3, rec.search_id);
        sqlite3_bind_text(q, 4, rec.search_role, -1, SQLITE_STATIC);
        if (rec.search_pass >= 0)
            sqlite3_bind_int(q, 5, rec.search_pass);
        CHECK(sqlite3_step(q) == SQLITE_DONE);
        sqlite3_finalize(q);
    }
    run_log *l = &f->log[f->n++];
    snprintf(l->role, sizeof l->role, "%s", s->role);
    l->concurrency = run->concurrency;
    l->requests = run->requests;
    l->rate = run->request_rate;
    l->ordinal = run->ordinal;
    l->pass = p->pass;
    return f->stop_after && f->n >= f->stop_after;
}

/* ------------------------------------------------ the store */

static char dir[] = "/tmp/test_search.XXXXXX";

static tb_store *open_store(void)
{
    char *path = tb_xasprintf("%s/s.db", dir), *err = NULL;
    tb_store *st = NULL;
    if (tb_store_open(path, &st, &err) != 0) {
        fprintf(stderr, "test_search: %s\n", err);
        exit(2);
    }
    free(path);
    /* the search rows alone: no session or backend rows behind them */
    sqlite3_exec(tb_store_db(st), "PRAGMA foreign_keys = OFF", NULL, NULL, NULL);
    return st;
}

/* search row `id`: its status, rates (NaN for NULL) and error. */
static void read_search(tb_store *st, int64_t id, char *status, size_t size, double *sync, double *max, double *slo,
                        int *has_error)
{
    sqlite3_stmt *q;
    sqlite3_prepare_v2(tb_store_db(st), "SELECT status, sync_rate, max_rate, slo_rate, error FROM search WHERE id = ?",
                       -1, &q, NULL);
    sqlite3_bind_int64(q, 1, id);
    status[0] = '\0';
    *sync = *max = *slo = NAN;
    if (sqlite3_step(q) == SQLITE_ROW) {
        snprintf(status, size, "%s", (const char *)sqlite3_column_text(q, 0));
        if (sqlite3_column_type(q, 1) != SQLITE_NULL)
            *sync = sqlite3_column_double(q, 1);
        if (sqlite3_column_type(q, 2) != SQLITE_NULL)
            *max = sqlite3_column_double(q, 2);
        if (sqlite3_column_type(q, 3) != SQLITE_NULL)
            *slo = sqlite3_column_double(q, 3);
        *has_error = sqlite3_column_type(q, 4) != SQLITE_NULL;
    }
    sqlite3_finalize(q);
}

static int64_t last_search(tb_store *st)
{
    sqlite3_stmt *q;
    sqlite3_prepare_v2(tb_store_db(st), "SELECT max(id) FROM search", -1, &q, NULL);
    int64_t id = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    return id;
}

static int run_search_of(tb_store *st, tb_suite *suite, int kind, int requests_default, fake *f, size_t *next)
{
    static size_t ordinal = 1; /* one search per suite case */
    tb_case tmpl = {.ordinal = ordinal++, .requests = 32, .requests_default = requests_default, .search = kind,
                    .prompt_tokens = 8, .max_new_tokens = 8};
    tb_plan plan = {.suite = suite};
    f->suite = suite;
    char *err = NULL;
    int rc = tb_search_run(&plan, &tmpl, st, 1, 1, next, fake_run, f, &err);
    if (rc != 0) {
        fprintf(stderr, "test_search: %s\n", err);
        free(err);
    }
    return rc;
}

static int run_search(tb_store *st, tb_suite *suite, int kind, fake *f, size_t *next)
{
    return run_search_of(st, suite, kind, 0, f, next);
}

/* search row `id`'s error, or "" (malloc'd). */
static char *search_error(tb_store *st, int64_t id)
{
    sqlite3_stmt *q;
    sqlite3_prepare_v2(tb_store_db(st), "SELECT coalesce(error, '') FROM search WHERE id = ?", -1, &q, NULL);
    sqlite3_bind_int64(q, 1, id);
    char *e = tb_xstrdup(sqlite3_step(q) == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : "");
    sqlite3_finalize(q);
    return e;
}

/* ------------------------------------------------ tests */

static void test_sweep(tb_store *st)
{
    tb_suite suite = {.sweep_rates = 3};
    fake f = {.sync_rps = 100, .max_rps = 1000, .knee = 1e9};
    size_t next = 20;
    CHECK(run_search(st, &suite, TB_SEARCH_SWEEP, &f, &next) == 0);
    CHECK(f.n == 5);
    CHECK_STR(f.log[0].role, "synchronous");
    CHECK(f.log[0].concurrency == 1 && f.log[0].rate == 0);
    CHECK_STR(f.log[1].role, "throughput");
    CHECK(f.log[1].concurrency == 32 && f.log[1].rate == 0); /* every request of the call at once */
    const double want[] = {325, 550, 775};                   /* 100 + 900 i / 4 */
    for (int i = 0; i < 3; i++) {
        CHECK_STR(f.log[2 + i].role, "rate");
        CHECK(f.log[2 + i].concurrency == 0);
        CHECK_NEAR(f.log[2 + i].rate, want[i], 1e-9);
    }
    for (size_t i = 0; i < f.n; i++)
        CHECK(f.log[i].ordinal == 20 + i);
    CHECK(next == 25);
    char status[32];
    double sync, max, slo;
    int has_error = -1;
    read_search(st, last_search(st), status, sizeof status, &sync, &max, &slo, &has_error);
    CHECK_STR(status, "done");
    CHECK_NEAR(sync, 100, 0);
    CHECK_NEAR(max, 1000, 0);
    CHECK(isnan(slo) && !has_error);
    CHECK(tb_search_max_runs(&suite, &(tb_case){.search = TB_SEARCH_SWEEP}) == 5);
}

/* The probes of an SLO search: the two bounds, then bisection. */
static void test_slo_found(tb_store *st)
{
    tb_suite suite = {.slo_ttft_p99_ms = 100, .slo_iterations = 6};
    fake f = {.sync_rps = 100, .max_rps = 1000, .knee = 640};
    size_t next = 1;
    CHECK(run_search(st, &suite, TB_SEARCH_SLO, &f, &next) == 0);
    CHECK(f.n == 2 + 2 + 6);
    CHECK(f.n + TB_SEARCH_DOWN_STEPS == tb_search_max_runs(&suite, &(tb_case){.search = TB_SEARCH_SLO}));
    CHECK_STR(f.log[2].role, "probe");
    CHECK_NEAR(f.log[2].rate, 1000, 0); /* the throughput run's rate first: not met */
    CHECK(f.log[2].pass == 0);
    CHECK_NEAR(f.log[3].rate, 100, 0); /* then the synchronous one's: met */
    CHECK(f.log[3].pass == 1);
    double good = 100, bad = 1000, best = 100;
    for (size_t i = 4; i < f.n; i++) {
        CHECK_STR(f.log[i].role, "probe");
        CHECK_NEAR(f.log[i].rate, (good + bad) / 2, 1e-9);
        CHECK(f.log[i].pass == (f.log[i].rate < 640));
        if (f.log[i].pass == 1) {
            good = f.log[i].rate;
            best = fmax(best, good);
        } else {
            bad = f.log[i].rate;
        }
    }
    char status[32];
    double sync, max, slo;
    int has_error;
    read_search(st, last_search(st), status, sizeof status, &sync, &max, &slo, &has_error);
    CHECK_STR(status, "found");
    CHECK_NEAR(slo, best, 0); /* the highest probed rate that met the limits */
    CHECK_NEAR(slo, 634.375, 1e-9);
    CHECK(slo < 640 && 640 - slo < 900.0 / 64); /* within the last bracket */
}

static void test_slo_edges(tb_store *st)
{
    char status[32];
    double sync, max, slo;
    int has_error;
    size_t next = 100;
    /* met even at the throughput rate: the answer is that rate, 3 probes in all */
    tb_suite suite = {.slo_ttft_p99_ms = 100, .slo_iterations = 6};
    fake f = {.sync_rps = 100, .max_rps = 1000, .knee = 1e9};
    CHECK(run_search(st, &suite, TB_SEARCH_SLO, &f, &next) == 0);
    CHECK(f.n == 3);
    read_search(st, last_search(st), status, sizeof status, &sync, &max, &slo, &has_error);
    CHECK_STR(status, "above");
    CHECK_NEAR(slo, 1000, 0);
    /* not met even at the synchronous rate, nor at its half or quarter:
     * no answer, and why in words: the lowest rate tried, its figures */
    fake g = {.sync_rps = 100, .max_rps = 1000, .knee = 0};
    CHECK(run_search(st, &suite, TB_SEARCH_SLO, &g, &next) == 0);
    CHECK(g.n == 4 + TB_SEARCH_DOWN_STEPS);
    CHECK_NEAR(g.log[4].rate, 50, 0);
    CHECK_NEAR(g.log[5].rate, 25, 0);
    read_search(st, last_search(st), status, sizeof status, &sync, &max, &slo, &has_error);
    CHECK_STR(status, "below");
    CHECK(isnan(slo) && has_error == 1);
    char *why = search_error(st, last_search(st));
    CHECK_STR(why, "no rate met the limits: the lowest tried, 25.00 requests/s (1/4 of the synchronous 100.00), "
                   "had TTFT p99 500.00 ms > 100 ms");
    free(why);
    /* the throughput run achieved less than the synchronous one: the
     * lower bound, and the one the words name, is the throughput's */
    fake t = {.sync_rps = 100, .max_rps = 80, .knee = 0};
    CHECK(run_search(st, &suite, TB_SEARCH_SLO, &t, &next) == 0);
    CHECK_NEAR(t.log[3].rate, 80, 0);
    why = search_error(st, last_search(st));
    CHECK_STR(why, "no rate met the limits: the lowest tried, 20.00 requests/s (1/4 of the throughput 80.00), "
                   "had TTFT p99 500.00 ms > 100 ms");
    free(why);
    /* a bound that gives no requests/s: failed, with why, nothing more run */
    fake h = {.sync_rps = 100, .max_rps = 1000, .knee = 640, .fail_role_sync = 1};
    CHECK(run_search(st, &suite, TB_SEARCH_SLO, &h, &next) == 0);
    CHECK(h.n == 2);
    read_search(st, last_search(st), status, sizeof status, &sync, &max, &slo, &has_error);
    CHECK_STR(status, "failed");
    CHECK(has_error == 1 && isnan(slo));
    /* stopped (Ctrl-C) after the third run: interrupted, nothing more run */
    fake k = {.sync_rps = 100, .max_rps = 1000, .knee = 640, .stop_after = 3};
    CHECK(run_search(st, &suite, TB_SEARCH_SLO, &k, &next) == 0);
    CHECK(k.n == 3);
    read_search(st, last_search(st), status, sizeof status, &sync, &max, &slo, &has_error);
    CHECK_STR(status, "interrupted");
    CHECK(isnan(slo));
    /* the probe in flight cut off (docs/METRICS.md, "Load searches"): no
     * figures, so no verdict: its stored search_pass is NULL, never 0
     * ("not met"); the probes before it keep theirs. One that finished
     * after the signal keeps its verdict. */
    for (int cut = 1; cut >= 0; cut--) {
        fake c = {.sync_rps = 100, .max_rps = 1000, .knee = 640, .stop_after = 4, .stop_cut = cut, .st = st};
        CHECK(run_search(st, &suite, TB_SEARCH_SLO, &c, &next) == 0);
        CHECK(c.n == 4);
        int64_t id = last_search(st);
        read_search(st, id, status, sizeof status, &sync, &max, &slo, &has_error);
        CHECK_STR(status, "interrupted");
        sqlite3_stmt *q;
        sqlite3_prepare_v2(tb_store_db(st),
                           "SELECT group_concat(coalesce(search_pass, 'null'), ',') FROM (SELECT search_pass"
                           " FROM bench_case WHERE search_id = ? AND search_role = 'probe' ORDER BY ordinal)",
                           -1, &q, NULL);
        sqlite3_bind_int64(q, 1, id);
        CHECK(sqlite3_step(q) == SQLITE_ROW);
        /* the probe at 1000 misses the knee at 640; the one at 100 meets it */
        CHECK_STR((const char *)sqlite3_column_text(q, 0), cut ? "0,null" : "0,1");
        sqlite3_finalize(q);
    }
}

/* Searching down (docs/METRICS.md, "Load searches"): the synchronous
 * rate misses the limits, its half or quarter meets them; the bisection
 * then runs between that rate and the one above it, and the answer is
 * below the synchronous rate. The open-loop probes of a case without
 * `requests` send the open-loop length at their rate; the two bounds
 * keep the closed-loop count. */
static void test_slo_down(tb_store *st)
{
    char status[32];
    double sync, max, slo;
    int has_error;
    size_t next = 200;
    tb_suite suite = {.slo_ttft_p99_ms = 100, .slo_iterations = 6};
    static const struct {
        double knee, first_met;
        size_t runs;
    } at[] = {{60, 50, 2 + 3 + 6}, {30, 25, 2 + 4 + 6}};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        fake f = {.sync_rps = 100, .max_rps = 1000, .knee = at[k].knee};
        CHECK(run_search_of(st, &suite, TB_SEARCH_SLO, 1, &f, &next) == 0);
        CHECK(f.n == at[k].runs);
        CHECK(f.log[0].requests == 32 && f.log[1].requests == 32 && f.log[1].concurrency == 32);
        size_t i = 2;
        CHECK_NEAR(f.log[i++].rate, 1000, 0);
        CHECK_NEAR(f.log[i++].rate, 100, 0);
        double good = NAN, bad = 100;
        for (; i < f.n && isnan(good); i++) {
            CHECK_NEAR(f.log[i].rate, bad / 2, 0);
            if (f.log[i].pass == 1)
                good = f.log[i].rate;
            else
                bad = f.log[i].rate;
        }
        CHECK_NEAR(good, at[k].first_met, 0);
        for (; i < f.n; i++) {
            CHECK_NEAR(f.log[i].rate, (good + bad) / 2, 1e-9);
            if (f.log[i].pass == 1)
                good = f.log[i].rate;
            else
                bad = f.log[i].rate;
        }
        for (i = 2; i < f.n; i++)
            CHECK(f.log[i].requests == tb_plan_open_loop_requests(&suite, f.log[i].rate));
        read_search(st, last_search(st), status, sizeof status, &sync, &max, &slo, &has_error);
        CHECK_STR(status, "found");
        CHECK(!has_error);
        CHECK_NEAR(slo, good, 0);
        CHECK(slo < at[k].knee && at[k].knee - slo < at[k].first_met / 64);
    }
}

/* Why a run misses the limits, in words: every limit it misses with its
 * figure; failures first; nothing to say of a run that met them. */
static void test_why_not(void)
{
    tb_suite suite = {.slo_ttft_p99_ms = 100, .slo_tpot_p99_ms = 12, .slo_goodput_pct = 90};
    tb_search_point p;
    tb_search_point_init(&p);
    char *w = tb_search_why_not(&suite, &p);
    CHECK_STR(w, "the run failed");
    free(w);
    p.ran = 1;
    p.measured = 32;
    p.failed = 2;
    p.ttft_p99_ms = 50;
    p.tpot_p99_ms = 12.33;
    p.goodput_pct = 80;
    w = tb_search_why_not(&suite, &p);
    CHECK_STR(w, "2 of 32 requests failed, TPOT p99 12.33 ms > 12 ms, goodput 80.0% < 90%");
    free(w);
    p.failed = 0;
    p.tpot_p99_ms = 11;
    p.goodput_pct = 95;
    w = tb_search_why_not(&suite, &p);
    CHECK_STR(w, "it met the limits");
    CHECK(tb_search_meets(&suite, &p));
    free(w);
}

static void test_meets(void)
{
    tb_suite s = {.slo_ttft_p99_ms = 100, .slo_tpot_p99_ms = 10, .slo_goodput_pct = 90};
    tb_search_point p;
    tb_search_point_init(&p);
    p.ran = 1;
    p.measured = 10;
    p.ttft_p99_ms = 100; /* at the limit: met */
    p.tpot_p99_ms = 10;
    p.goodput_pct = 90;
    CHECK(tb_search_meets(&s, &p) == 1);
    p.failed = 1; /* a failed request: not met */
    CHECK(tb_search_meets(&s, &p) == 0);
    p.failed = 0;
    p.ttft_p99_ms = 100.001;
    CHECK(tb_search_meets(&s, &p) == 0);
    p.ttft_p99_ms = NAN; /* no TTFT at all: not met */
    CHECK(tb_search_meets(&s, &p) == 0);
    p.ttft_p99_ms = 1;
    p.tpot_p99_ms = NAN; /* one-token answers: no TPOT to exceed */
    CHECK(tb_search_meets(&s, &p) == 1);
    p.goodput_pct = 89.9;
    CHECK(tb_search_meets(&s, &p) == 0);
    p.goodput_pct = 95;
    p.ran = 0;
    CHECK(tb_search_meets(&s, &p) == 0);
    tb_suite none = {0}; /* no limit set: a run that ran meets them */
    p.ran = 1;
    CHECK(tb_search_meets(&none, &p) == 1);
}

/* tb_search_point_of: the stored p99s, the goodput share over measured
 * requests (failed ones count against it, warm-ups are left out). */
static void test_point_of(void)
{
    tb_suite suite = {.goodput_ttft_ms = 50, .slo_goodput_pct = 50};
    tb_plan plan = {.suite = &suite};
    tb_case c = {.requests = 4};
    tb_search_ctx ctx = {.plan = &plan, .tmpl = &c, .search_id = 3, .role = "probe"};
    tb_request_record warm[4], meas[4];
    memset(warm, 0, sizeof warm);
    memset(meas, 0, sizeof meas);
    const int64_t ttft_ms[4] = {10, 40, 60, 20};
    for (int i = 0; i < 4; i++) {
        meas[i].m.ttft_ns = ttft_ms[i] * 1000000;
        meas[i].m.tpot_ns = 1e6;
        warm[i].m.ttft_ns = 1000 * 1000000LL; /* a warm-up over every limit: left out */
    }
    meas[3].status = 7; /* failed */
    tb_sample_record smp[2] = {{.warmup = 1, .n_requests = 4, .requests = warm},
                               {.warmup = 0, .n_requests = 4, .requests = meas}};
    tb_metric_record m[3] = {{.name = "req_throughput", .st = {.n = 1, .median = 12.5}},
                             {.name = "ttft_ms", .st = {.n = 3, .median = 40, .p99 = 59.6}},
                             {.name = "tpot_ms", .st = {.n = 3, .median = 1, .p99 = 1}}};
    tb_case_record rec = {.status = "ok", .samples = smp, .n_samples = 2, .metrics = m, .n_metrics = 3};
    tb_search_point p;
    tb_search_point_of(&ctx, &rec, &p);
    CHECK(p.ran == 1);
    CHECK(p.measured == 4 && p.failed == 1);
    CHECK_NEAR(p.req_throughput, 12.5, 0);
    CHECK_NEAR(p.ttft_p99_ms, 59.6, 0);
    CHECK_NEAR(p.goodput_pct, 50, 1e-12); /* 10 and 40 ms of 4 measured */
    CHECK(p.pass == 0);                   /* a failed request */
    tb_search_mark(&ctx, &rec);
    CHECK(rec.search_id == 3 && strcmp(rec.search_role, "probe") == 0 && rec.search_pass == 0);
    ctx.role = "rate"; /* a sweep's run is not judged */
    tb_search_mark(&ctx, &rec);
    CHECK(rec.search_pass == -1);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    tb_store *st = open_store();
    test_sweep(st);
    test_slo_found(st);
    test_slo_edges(st);
    test_slo_down(st);
    tb_store_close(st);
    test_meets();
    test_why_not();
    test_point_of();
    char *cmd = tb_xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_search: could not remove %s\n", dir);
    free(cmd);
    return check_done();
}
