/* runner.c — see runner.h. The runner's side of the wire: it spawns
 * workers, enforces deadlines, turns raw timings into records (metrics.h,
 * stats.h) and stores each case as soon as it finishes. */
#define _GNU_SOURCE
#include "runner.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dims.h"
#include "judge.h"
#include "progress.h"
#include "quality.h"
#include "search.h"
#include "shard.h"
#include "stats.h"
#include "telemetry.h"
#include "util.h"
#include "worker_client.h"

static volatile int interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* ------------------------------------------------------ records */

typedef struct case_outcome {
    const char *status; /* "ok", "failed", "skipped" */
    char *error;
    char started_at[32];
    int64_t t_start;
    tb_telemetry *tm; /* sampling while the case runs, or NULL */
} case_outcome;

/* Decode a RESULT payload and derive the case's figures (metrics.c) and,
 * with a prompt set, its grades (quality.c). 0, or -1 with *err when the
 * payload is malformed (nothing in rec then). */
static int build_record(const tb_plan *plan, const tb_case *c, const char *buf, size_t len, tb_case_record *rec,
                        char **err)
{
    tb_call_view *calls;
    size_t n_calls;
    if (tb_wire_decode_result(buf, len, c->requests ? c->requests : c->batch, &calls, &n_calls, &rec->host_peak_rss,
                              err) != 0)
        return -1;
    const tb_suite *suite = plan->suite;
    tb_case_metrics_opts opts = {
        .capabilities = plan->backends[c->backend].plugin.ops->capabilities,
        .goodput_ttft_ms = suite->goodput_ttft_ms,
        .goodput_tpot_ms = suite->goodput_tpot_ms,
        .request_rate = c->request_rate,
        .seed = suite->seed,
        .keep_texts = plan->n_prompts > 0,
    };
    tb_case_metrics(calls, n_calls, &opts, rec);
    tb_wire_result_free(calls, n_calls);
    if (plan->n_prompts) {
        tb_quality_acc *qa = tb_quality_new(plan);
        for (size_t i = 0; i < rec->n_samples; i++)
            for (uint32_t r = 0; r < rec->samples[i].n_requests; r++) {
                tb_request_record *q = &rec->samples[i].requests[r];
                if (q->output_text && q->status == TB_OK)
                    tb_quality_score(qa, q->prompt_idx, q->output_text, q->scored, q->scores);
            }
        tb_quality_metrics(qa, suite->seed, &rec->metrics, &rec->n_metrics);
        tb_quality_free(qa);
    }
    return 0;
}

static const tb_stats *find_metric(const tb_case_record *rec, const char *name)
{
    for (size_t i = 0; i < rec->n_metrics; i++)
        if (strcmp(rec->metrics[i].name, name) == 0)
            return &rec->metrics[i].st;
    return NULL;
}

/* ------------------------------------------------------ the loop */

/* A case's shape for its progress: its calls and requests per call. */
static tb_progress_case case_shape(const tb_plan *plan, const tb_case *c)
{
    return (tb_progress_case){
        .warmup = (uint32_t)plan->suite->warmup,
        .repeat = (uint32_t)plan->suite->repeat,
        .per_pass = tb_plan_calls_per_pass(plan, c),
        .requests = c->requests ? c->requests : c->batch,
    };
}

/* The calls a case makes, warm-ups included. */
static uint64_t case_calls(const tb_plan *plan, const tb_case *c)
{
    tb_progress_case pc = case_shape(plan, c);
    return pc.warmup + (uint64_t)pc.repeat * pc.per_pass;
}

/* A case's expected work, the ETA's unit (progress.h): its calls x
 * requests per call x new tokens x denoising steps (none for AR: a
 * forward a token). A case of 16 steps costs about twice one of 8. */
static uint64_t case_work(const tb_plan *plan, const tb_case *c)
{
    tb_progress_case pc = case_shape(plan, c);
    return case_calls(plan, c) * (pc.requests ? pc.requests : 1) * (c->max_new_tokens ? c->max_new_tokens : 1) *
           (c->steps ? c->steps : 1);
}

/* The case's label in short, for a narrow terminal: the values that
 * tell the plan's cases apart (the dimensions that differ between them;
 * concurrency and rate, where a search's runs differ; the swept options). */
static char *case_tag(const tb_plan *plan, const tb_case *c)
{
    uint32_t skip = 0;
    const tb_plugin *pl = &plan->backends[c->backend].plugin;
    for (int d = 0; d < TB_N_DIMS; d++) {
        int varies = d == TB_DIM_CONCURRENCY || d == TB_DIM_REQUEST_RATE;
        for (size_t i = 1; i < plan->n_cases && !varies; i++)
            varies = tb_case_dim(&plan->cases[i], (tb_dim)d) != tb_case_dim(&plan->cases[0], (tb_dim)d);
        if (!varies || (tb_dim_defs[d].cap && !(pl->ops && (pl->ops->capabilities & tb_dim_defs[d].cap))))
            skip |= 1u << d;
    }
    tb_str b = {0};
    tb_case_label_dims(&b, c, skip, TB_LABEL_KEYS);
    cJSON *sw = cJSON_Parse(c->swept_json);
    cJSON *it;
    cJSON_ArrayForEach(it, sw) tb_str_appendf(&b, "%s%s=%s", b.len ? " " : "", it->string, cJSON_GetStringValue(it));
    cJSON_Delete(sw);
    return b.len ? tb_str_take(&b) : tb_xstrdup("");
}

/* A line a backend process wrote to its stderr (worker_client.h). */
static void relay_log(void *ctx, const char *line)
{
    tb_progress_log(ctx, line);
}

/* A core function's *err, printed without breaking the bar, then freed. */
static void note_error(tb_progress *p, char *err)
{
    char *msg = tb_xasprintf("tokbench: %s", err);
    tb_progress_note(p, msg);
    free(msg);
    free(err);
}

/* The store waits for another process's lock (tb_store_set_lock_wait). */
static void note_lock_wait(void *ctx, int64_t wait_ms)
{
    char msg[160];
    snprintf(msg, sizeof msg, "tokbench: the database is locked by another process; waiting up to %lld s to store "
             "the case", (long long)((wait_ms + 999) / 1000));
    tb_progress_note(ctx, msg);
}

/* The least time a case's store waits for another process's lock. */
#define STORE_WAIT_MIN_MS 60000

typedef struct run_state {
    tb_plan *plan;
    tb_store *store;
    int64_t session_id;
    const int64_t *backend_ids;
    tb_progress progress;
    tb_run_summary *sum;
    double max_error_rate;
    int store_failed;
    size_t next_ordinal; /* of a search's next run (after the plan's) */
    tb_telemetry_config telemetry; /* the suite's [telemetry] */
} run_state;

/* Store a finished case (a search's run: with its search, role and
 * verdict); its row id, or -1. */
static int64_t finish_case(run_state *rs, const tb_case *c, case_outcome *o, tb_case_record *rec,
                           const tb_search_ctx *search)
{
    const tb_plan_backend *pb = &rs->plan->backends[c->backend];
    char finished[32];
    tb_utc_timestamp(finished);
    rec->session_id = rs->session_id;
    rec->backend_id = rs->backend_ids[c->backend];
    rec->c = c;
    rec->status = o->status;
    rec->error = o->error;
    rec->started_at = o->started_at[0] ? o->started_at : NULL;
    rec->finished_at = finished;
    rec->case_wall_ns = o->t_start ? tb_now_ns() - o->t_start : -1;
    if (!o->t_start)
        rec->host_peak_rss = -1;

    if (search)
        tb_search_mark(search, rec);
    char *err = NULL;
    if (o->tm) { /* what was sampled while it ran, stored with it */
        char *note = NULL;
        if (tb_telemetry_stop(o->tm, rec, &note, &err) != 0)
            note_error(&rs->progress, err);
        if (note)
            tb_progress_note(&rs->progress, note);
        free(note);
        err = NULL;
        o->tm = NULL;
        tb_case_spec_counters(rec, rs->plan->suite->seed); /* vLLM's counters, where no request said */
    }
    /* A lock held by another process is waited out for as long as the
     * case took to measure (at least STORE_WAIT_MIN_MS): losing the case
     * would cost that much again. */
    int64_t wait_ms = rec->case_wall_ns > 0 ? rec->case_wall_ns / 1000000 : 0;
    tb_store_set_lock_wait(rs->store, wait_ms > STORE_WAIT_MIN_MS ? wait_ms : STORE_WAIT_MIN_MS, note_lock_wait,
                           &rs->progress);
    int64_t case_id = tb_store_case(rs->store, rec, &err);
    tb_store_set_lock_wait(rs->store, 0, NULL, NULL);

    char *label = tb_case_label(rs->plan, c), *tag = case_tag(rs->plan, c);
    char detail[512] = "";
    if (case_id < 0) {
        /* never counted or printed as what it measured: it is not stored */
        rs->store_failed = 1;
        rs->sum->unstored++;
        snprintf(detail, sizeof detail, "the database refused it: %s", err);
        if (!rs->sum->store_error)
            rs->sum->store_error = tb_xasprintf("case #%zu (%s %s) could not be stored: %s", c->ordinal,
                                                pb->sb->label, label, err);
        free(err);
        tb_progress_done(&rs->progress, pb->sb->label, label, tag, "unstored", detail,
                         c->skip_reason ? 0 : case_work(rs->plan, c));
        free(label);
        free(tag);
        return -1;
    }
    const char *shown = o->status;
    if (strcmp(o->status, "ok") == 0) {
        rs->sum->ok++;
        const tb_stats *agg = find_metric(rec, "agg_tps"), *req = find_metric(rec, "req_tps");
        /* An ok case with failed requests says so first: `degraded`, as
         * show and the reports say it (tb_case_degraded at threshold 0;
         * the classes' first messages follow in the warnings). */
        tb_request_tally t;
        tb_case_request_tally(rec, &t);
        int n = 0;
        if (tb_case_degraded(&t, 0)) {
            shown = "degraded";
            n = snprintf(detail, sizeof detail, "%zu of %zu requests failed (", t.failed, t.requests);
            const char *sep = "";
            for (size_t k = 0; k < tb_n_error_classes && n > 0 && (size_t)n < sizeof detail; k++)
                if (t.per_class[k]) {
                    n += snprintf(detail + n, sizeof detail - (size_t)n, "%s%s %zu", sep, tb_error_classes[k],
                                  t.per_class[k]);
                    sep = ", ";
                }
            if (n > 0 && (size_t)n < sizeof detail)
                n += snprintf(detail + n, sizeof detail - (size_t)n, "); ");
        }
        if (n < 0 || (size_t)n >= sizeof detail)
            n = (int)strlen(detail);
        /* Each median says what it is the median of (the registry's
         * samples: calls, requests). */
        snprintf(detail + n, sizeof detail - (size_t)n,
                 "%.1f tok/s aggregate (median of %zu %s), %.1f tok/s per request (median of %zu %s)",
                 agg ? agg->median : NAN, agg ? agg->n : 0, tb_metric_find("agg_tps")->samples,
                 req ? req->median : NAN, req ? req->n : 0, tb_metric_find("req_tps")->samples);
    } else if (strcmp(o->status, "failed") == 0) {
        rs->sum->failed++;
    } else {
        rs->sum->skipped++;
    }
    tb_progress_done(&rs->progress, pb->sb->label, label, tag, shown,
                     strcmp(o->status, "ok") == 0 ? detail : o->error, c->skip_reason ? 0 : case_work(rs->plan, c));
    free(label);
    free(tag);
    return case_id;
}

static void record_simple(run_state *rs, const tb_case *c, const char *status, char *error, case_outcome *o,
                          const tb_search_ctx *search)
{
    tb_case_record rec = {0};
    case_outcome local = {0};
    if (!o)
        o = &local;
    o->status = status;
    o->error = error;
    finish_case(rs, c, o, &rec, search);
    tb_case_record_free(&rec); /* what the sampler handed over */
    free(error);
}

/* Store the case from a RESULT payload (or failed when it is malformed);
 * a search's run hands its figures back in *point. */
static void record_result(run_state *rs, const tb_case *c, case_outcome *o, const tb_wire_frame *f,
                          const tb_search_ctx *search, tb_search_point *point)
{
    tb_case_record rec = {0};
    char *err = NULL;
    if (build_record(rs->plan, c, f->payload, f->len, &rec, &err) == 0) {
        /* Stored with its samples either way: the failures are data. */
        char *all_failed = tb_case_all_failed(&rec);
        o->status = all_failed ? "failed" : "ok";
        o->error = all_failed;
        int degraded = 0;
        if (!all_failed) {
            tb_request_tally t;
            tb_case_request_tally(&rec, &t);
            degraded = tb_case_degraded(&t, rs->max_error_rate);
        }
        if (point && !all_failed)
            tb_search_point_of(search, &rec, point);
        int64_t id = finish_case(rs, c, o, &rec, search);
        if (id >= 0) /* counted only where stored */
            rs->sum->degraded += degraded;
        if (point)
            point->case_id = id;
        free(all_failed);
    } else {
        o->status = "failed";
        o->error = err;
        finish_case(rs, c, o, &rec, search);
        free(err);
    }
    tb_case_record_free(&rec);
}

/* What the cases of one backend share: its worker, and what failed
 * before (a probe, a load) that decides later cases without running
 * them. */
typedef struct backend_state {
    run_state *rs;
    size_t bi;
    tb_worker_client wc;
    char *probe_error;
    char *failed_load_key, *failed_load_error;
} backend_state;

/* Run case c (plan index idx; with `load`, one run of a search: that
 * case with its concurrency and rate replaced, c the run's own case) and
 * store it. With `search`, the run is part of that search: its figures
 * go back in *point. 0, or 1 when the run was interrupted. */
static int run_one(backend_state *bs, const tb_case *c, uint32_t idx, const tb_wire_case_load *load,
                   const tb_search_ctx *search, tb_search_point *point)
{
    run_state *rs = bs->rs;
    tb_plan *plan = rs->plan;
    size_t bi = bs->bi;
    if (point)
        tb_search_point_init(point);
    if (c->skip_reason) {
        record_simple(rs, c, "skipped", tb_xstrdup(c->skip_reason), NULL, search);
        return 0;
    }
    if (bs->probe_error) {
        record_simple(rs, c, "skipped", tb_xasprintf("cannot run on this host: %s", bs->probe_error), NULL, search);
        return 0;
    }
    if (bs->failed_load_key && strcmp(bs->failed_load_key, c->load_key) == 0) {
        record_simple(rs, c, "failed", tb_xasprintf("model load failed earlier: %s", bs->failed_load_error), NULL,
                      search);
        return 0;
    }

    case_outcome o = {0};
    tb_utc_timestamp(o.started_at);
    o.t_start = tb_now_ns();
    char *label = tb_case_label(plan, c), *tag = case_tag(plan, c);
    tb_progress_case shape = case_shape(plan, c);
    shape.work = case_work(plan, c);
    tb_progress_start(&rs->progress, plan->backends[bi].sb->label, label, tag, &shape);
    free(label);
    free(tag);

    char *why = NULL;
    tb_wc_result r = tb_wc_start(&bs->wc, &why);
    if (r == TB_WC_INTERRUPTED) {
        free(why);
        return 1;
    }
    if (r == TB_WC_REFUSED) {
        bs->probe_error = why;
        record_simple(rs, c, "skipped", tb_xasprintf("cannot run on this host: %s", bs->probe_error), &o, search);
        return 0;
    }
    if (r != TB_WC_OK) {
        record_simple(rs, c, "failed", why, &o, search);
        return 0;
    }

    /* The context (load or reuse), then the case. */
    int reused = 0;
    char *info = NULL;
    r = load ? tb_wc_send(&bs->wc, TB_MSG_CASE_LOAD, load, sizeof *load, &why)
             : tb_wc_send(&bs->wc, TB_MSG_CASE, &idx, sizeof idx, &why);
    if (r == TB_WC_OK)
        r = tb_wc_await_loaded(&bs->wc, &reused, &info, &why);
    if (r == TB_WC_REFUSED) { /* create() failed: later cases of this load fail alike */
        free(bs->failed_load_key);
        free(bs->failed_load_error);
        bs->failed_load_key = tb_xstrdup(c->load_key);
        bs->failed_load_error = tb_xstrdup(why);
    }
    if (r == TB_WC_OK) {
        /* Only the backend's description is lost: the case still runs. */
        char *err = NULL;
        if (info && tb_store_backend_info(rs->store, rs->backend_ids[bi], info, &err) != 0)
            note_error(&rs->progress, err);
        free(info);
        err = NULL;
        o.tm = tb_telemetry_start(&rs->telemetry, &err); /* sampled while the case runs */
        if (err)
            note_error(&rs->progress, err);
        /* the RESULT, after a PROGRESS frame per call */
        static const uint32_t answers[] = {TB_MSG_RESULT, TB_MSG_PROGRESS};
        tb_wire_frame f;
        int64_t since = tb_now_ns();
        while ((r = tb_wc_await(&bs->wc, since, answers, 2, &f, &why)) == TB_WC_OK && f.type == TB_MSG_PROGRESS) {
            tb_wire_progress pr;
            if (f.len == sizeof pr) {
                memcpy(&pr, f.payload, sizeof pr);
                tb_progress_calls(&rs->progress, pr.calls_done);
            }
        }
        if (r == TB_WC_INTERRUPTED && tb_wc_cancel(&bs->wc, TB_MSG_RESULT, &f) == TB_WC_OK) {
            free(why); /* it finished after all */
            why = NULL;
            r = TB_WC_OK;
        }
        if (r == TB_WC_OK) {
            record_result(rs, c, &o, &f, search, point);
            return interrupted;
        }
    }
    if (r == TB_WC_INTERRUPTED)
        tb_wc_kill(&bs->wc);
    record_simple(rs, c, "failed", why, &o, search);
    return r == TB_WC_INTERRUPTED;
}

/* One run of a search (search.h's tb_search_run_fn). */
static int run_search_case(void *ctx, const tb_case *run, const tb_search_ctx *search, tb_search_point *point)
{
    backend_state *bs = ctx;
    const tb_case *tmpl = search->tmpl;
    tb_wire_case_load load = {.index = (uint32_t)(tmpl - bs->rs->plan->cases), .concurrency = run->concurrency,
                              .request_rate = run->request_rate};
    int stop = run_one(bs, run, load.index, &load, search, point);
    return stop || interrupted || bs->rs->store_failed;
}

/* Run the cases of backend bi. */
static void run_backend(run_state *rs, size_t bi)
{
    tb_plan *plan = rs->plan;
    backend_state bs = {.rs = rs, .bi = bi};
    tb_wc_init(&bs.wc, plan, bi, &interrupted);
    tb_wc_set_log(&bs.wc, relay_log, &rs->progress);
    for (size_t ci = 0; ci < plan->n_cases && !interrupted && !rs->store_failed; ci++) {
        tb_case *c = &plan->cases[ci];
        if (c->backend != bi)
            continue;
        if (c->search && !c->skip_reason && !bs.probe_error) { /* core/search.c runs it */
            char *err = NULL;
            if (tb_search_run(plan, c, rs->store, rs->session_id, rs->backend_ids[bi], &rs->next_ordinal,
                              run_search_case, &bs, &err) != 0)
                note_error(&rs->progress, err);
            continue;
        }
        if (run_one(&bs, c, (uint32_t)ci, NULL, NULL, NULL))
            break;
    }
    tb_wc_free(&bs.wc);
    free(bs.probe_error);
    free(bs.failed_load_key);
    free(bs.failed_load_error);
}

int tb_runner_wait_start(int64_t at_ns, void (*ready)(void *ctx), void *ctx, int64_t *late_ns)
{
    /* the run's own handlers: a signal during the wait ends it as one
     * during a case does (the caller marks the session) */
    struct sigaction sa = {0}, old_int, old_term;
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if (ready)
        ready(ctx);
    int64_t late = tb_shard_wait(at_ns, &interrupted);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    *late_ns = late > 0 ? late : 0;
    return late < 0;
}

tb_run_outcome tb_runner_run(tb_plan *plan, tb_store *store, int64_t session_id, const int64_t *backend_ids,
                             double max_error_rate, tb_run_summary *summary)
{
    memset(summary, 0, sizeof *summary);
    struct sigaction sa = {0}, old_int, old_term, old_pipe;
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    struct sigaction ign = {0};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    interrupted = 0;

    run_state rs = {.plan = plan, .store = store, .session_id = session_id, .backend_ids = backend_ids,
                    .sum = summary, .max_error_rate = max_error_rate};
    char *terr = NULL; /* main.c reported the suite's errors before the run */
    if (tb_telemetry_config_parse(plan->suite, &rs.telemetry, &terr) != 0)
        free(terr);
    uint64_t work = 0;
    size_t n_cases = 0; /* a search counts its runs (the most a bisection makes) */
    for (size_t i = 0; i < plan->n_cases; i++) {
        const tb_case *c = &plan->cases[i];
        size_t runs = c->search && !c->skip_reason ? tb_search_max_runs(plan->suite, c) : 1;
        n_cases += runs;
        if (!c->skip_reason)
            work += runs * case_work(plan, c);
        if (c->ordinal >= rs.next_ordinal)
            rs.next_ordinal = c->ordinal + 1;
    }
    tb_progress_init(&rs.progress, n_cases, work);
    size_t n_secrets;
    const char **secrets = tb_plan_secrets(plan, &n_secrets); /* printed lines are redacted with them */
    rs.progress.secrets = secrets;
    rs.progress.n_secrets = n_secrets;
    for (size_t bi = 0; bi < plan->n_backends && !interrupted && !rs.store_failed; bi++)
        run_backend(&rs, bi);
    tb_progress_finish(&rs.progress);
    tb_telemetry_config_free(&rs.telemetry);
    if (plan->judge != SIZE_MAX && !interrupted && !rs.store_failed) {
        char *err = NULL;
        if (tb_judge_session(plan, store, session_id, &interrupted, &rs.progress, &err) != 0)
            note_error(&rs.progress, err);
    }

    free(secrets);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    if (rs.store_failed)
        return TB_RUN_STORE_FAILED;
    return interrupted ? TB_RUN_INTERRUPTED : TB_RUN_COMPLETED;
}
