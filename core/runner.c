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

#include "judge.h"
#include "progress.h"
#include "quality.h"
#include "stats.h"
#include "util.h"
#include "wire.h"
#include "worker.h"

#define GRACE_NS (5LL * 1000000000LL) /* after Ctrl-C, before SIGKILL */

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
} case_outcome;

/* Gather a double sample set. */
typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

static void dvec_push(dvec *d, double x)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->v = tb_xrealloc(d->v, d->cap * sizeof(double));
    }
    d->v[d->n++] = x;
}

enum {
    M_REQ_TPS, M_AGG_TPS, M_DECODE_TPS, M_TTFT, M_TPOT, M_E2E, M_ITL, M_PREFILL, M_DECODE,
    M_WALL, M_NFE, M_TPF, M_STEPS, M_ANSWER, M_RUNNER, M_REQ_RATE, M_ERR_RATE, M_GOODPUT, M_ROOFLINE, M_COUNT
};
static const struct { const char *name, *unit; } metric_defs[M_COUNT] = {
    [M_REQ_TPS] = {"req_tps", "tokens/s"},
    [M_AGG_TPS] = {"agg_tps", "tokens/s"},
    [M_DECODE_TPS] = {"decode_tps", "tokens/s"},
    [M_TTFT] = {"ttft_ms", "ms"},
    [M_TPOT] = {"tpot_ms", "ms"},
    [M_E2E] = {"e2e_ms", "ms"},
    [M_ITL] = {"itl_ms", "ms"},
    [M_PREFILL] = {"prefill_ms", "ms"},
    [M_DECODE] = {"decode_ms", "ms"},
    [M_WALL] = {"wall_ms", "ms"},
    [M_NFE] = {"forward_passes", "count"},
    [M_TPF] = {"tokens_per_forward", "tokens"},
    [M_STEPS] = {"steps_done", "count"},
    [M_ANSWER] = {"answer_tokens", "tokens"},
    [M_RUNNER] = {"runner_us", "us"},
    [M_REQ_RATE] = {"req_throughput", "requests/s"},
    [M_ERR_RATE] = {"error_rate", "fraction"},
    [M_GOODPUT] = {"goodput", "requests/s"},
    [M_ROOFLINE] = {"roofline_pct", "%"},
};

/* Failed requests are counted per error class: the word before ": " at
 * the start of the request's error (backend.h, "error classes"). */
static const char *const error_classes[] = {
    "connect", "timeout", "http_429", "http_4xx", "http_5xx",
    "server_error", "malformed_stream", "dropped", "other",
};
#define N_CLASSES (sizeof error_classes / sizeof *error_classes)
static const char *const class_metric[N_CLASSES] = {
    "errors_connect", "errors_timeout", "errors_http_429", "errors_http_4xx", "errors_http_5xx",
    "errors_server_error", "errors_malformed_stream", "errors_dropped", "errors_other",
};

static size_t error_class(const char *error)
{
    if (error) {
        size_t n = strspn(error, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (n && strncmp(error + n, TB_ERROR_CLASS_SEP, 2) == 0)
            for (size_t k = 0; k + 1 < N_CLASSES; k++)
                if (strlen(error_classes[k]) == n && strncmp(error, error_classes[k], n) == 0)
                    return k;
    }
    return N_CLASSES - 1;
}

/* Decode a RESULT payload into samples and metrics. Returns 0 or -1 with
 * *err when the payload is malformed. */
static int build_record(const tb_plan *plan, const tb_case *c, const char *buf, size_t len,
                        tb_case_record *rec, char **err)
{
    const char *p = buf, *end = buf + len;
#define TAKE(dst, size)                                                                  \
    do {                                                                                 \
        if ((size_t)(end - p) < (size)) {                                                \
            *err = tb_xstrdup("malformed result from the backend process (truncated)"); \
            goto bad;                                                                    \
        }                                                                                \
        memcpy((dst), p, (size));                                                        \
        p += (size);                                                                     \
    } while (0)
    tb_wire_case wc;
    dvec m[M_COUNT] = {{0}};
    dvec cls[N_CLASSES] = {{0}};
    const tb_suite *suite = plan->suite;
    uint32_t want_requests = c->requests ? c->requests : c->batch;
    int64_t *em_t = NULL;
    size_t em_cap = 0;
    tb_quality_acc *qa = plan->n_prompts ? tb_quality_new(plan) : NULL;
    TAKE(&wc, sizeof wc);
    rec->host_peak_rss = wc.host_peak_rss;
    rec->samples = tb_xcalloc(wc.n_calls ? wc.n_calls : 1, sizeof *rec->samples);
    for (uint32_t k = 0; k < wc.n_calls; k++) {
        tb_wire_call call;
        TAKE(&call, sizeof call);
        if (call.n_requests != want_requests) {
            *err = tb_xstrdup("malformed result from the backend process (request count)");
            goto bad;
        }
        tb_wire_request *wr = tb_xcalloc(call.n_requests, sizeof *wr);
        tb_emission *ev = tb_xcalloc(call.n_emissions ? call.n_emissions : 1, sizeof *ev);
        if ((size_t)(end - p) < call.n_requests * sizeof *wr + (size_t)call.n_emissions * sizeof *ev) {
            free(wr);
            free(ev);
            *err = tb_xstrdup("malformed result from the backend process (truncated)");
            goto bad;
        }
        memcpy(wr, p, call.n_requests * sizeof *wr);
        p += call.n_requests * sizeof *wr;
        memcpy(ev, p, call.n_emissions * sizeof *ev);
        p += call.n_emissions * sizeof *ev;
        size_t text_bytes = 0;
        for (uint32_t r = 0; r < call.n_requests; r++)
            text_bytes += wr[r].text_len;
        if ((size_t)(end - p) < text_bytes) {
            free(wr);
            free(ev);
            *err = tb_xstrdup("malformed result from the backend process (truncated texts)");
            goto bad;
        }
        const char *texts = p;
        p += text_bytes;

        tb_sample_record *s = &rec->samples[rec->n_samples++];
        s->repetition = k;
        s->warmup = (int)call.is_warmup;
        s->n_requests = call.n_requests;
        s->prefill_ns = call.prefill_ns;
        s->decode_ns = call.decode_ns;
        s->forward_passes = call.forward_passes;
        s->peak_device_bytes = call.peak_device_bytes;
        s->energy_mj = call.energy_mj;
        s->n_emissions = call.n_emissions;
        s->runner_ns = call.runner_ns;
        s->requests = tb_xcalloc(call.n_requests, sizeof *s->requests);
        s->recount_tokens = 0;

        uint32_t *n_out = tb_xcalloc(call.n_requests, sizeof *n_out);
        int *ok = tb_xcalloc(call.n_requests, sizeof *ok);
        tb_request_metrics *rm = tb_xcalloc(call.n_requests, sizeof *rm);
        int64_t first_submit = INT64_MAX;
        for (uint32_t r = 0; r < call.n_requests; r++)
            if (wr[r].t_submit_ns < first_submit)
                first_submit = wr[r].t_submit_ns;
        for (uint32_t r = 0; r < call.n_requests; r++) {
            /* This request's emission times, in arrival order. */
            size_t ne = 0;
            for (uint32_t e = 0; e < call.n_emissions; e++)
                if (ev[e].request == r) {
                    if (ne == em_cap) {
                        em_cap = em_cap ? 2 * em_cap : 256;
                        em_t = tb_xrealloc(em_t, em_cap * sizeof *em_t);
                    }
                    em_t[ne++] = ev[e].t_ns;
                }
            /* Neither emissions nor a done time: the request ended, at the
             * latest, when generate() returned. */
            int64_t done = wr[r].t_done_ns || ne ? wr[r].t_done_ns : call.t_return_ns;
            tb_request_metrics_compute(wr[r].t_submit_ns, done, wr[r].n_output_tokens, em_t, ne, &rm[r]);
            n_out[r] = wr[r].n_output_tokens;
            ok[r] = wr[r].status == TB_OK;
            tb_request_record *q = &s->requests[r];
            q->status = wr[r].status;
            q->error = wr[r].status == TB_OK ? NULL : tb_xstrdup(wr[r].error[0] ? wr[r].error : tb_status_name(wr[r].status));
            q->submit_offset_ns = wr[r].t_submit_ns - first_submit;
            q->m = rm[r];
            q->n_out = wr[r].n_output_tokens;
            q->recount = wr[r].recount;
            q->steps_done = wr[r].steps_done;
            q->answer_tokens = wr[r].answer_tokens;
            q->output_hash = wr[r].output_hash;
            q->prompt_idx = wr[r].prompt_idx;
            q->scored = wr[r].scored && ok[r];
            for (int k = 0; k < TB_N_SCORES; k++)
                q->scores[k] = NAN;
            if (qa && wr[r].prompt_idx >= 0) {
                q->output_text = tb_xstrndup(texts, wr[r].text_len);
                if (ok[r])
                    tb_quality_score(qa, wr[r].prompt_idx, q->output_text, q->scored, q->scores);
            }
            texts += wr[r].text_len;
            if (q->recount < 0 || s->recount_tokens < 0)
                s->recount_tokens = -1;
            else
                s->recount_tokens += q->recount;
            tb_str js = {0};
            tb_str_append(&js, "[");
            for (uint32_t e = 0; e < call.n_emissions; e++)
                if (ev[e].request == r)
                    tb_str_appendf(&js, "%s[%.3f,%u]", js.len > 1 ? "," : "",
                                   (double)(ev[e].t_ns - wr[r].t_submit_ns) * 1e-6, ev[e].n_tokens);
            tb_str_append(&js, "]");
            q->emissions_json = tb_str_take(&js);

            if (!s->warmup && ok[r]) {
                dvec_push(&m[M_REQ_TPS], rm[r].tps);
                dvec_push(&m[M_TTFT], (double)rm[r].ttft_ns * 1e-6);
                dvec_push(&m[M_TPOT], rm[r].tpot_ns * 1e-6);
                dvec_push(&m[M_E2E], (double)rm[r].e2e_ns * 1e-6);
                if (q->steps_done)
                    dvec_push(&m[M_STEPS], q->steps_done);
                if (q->answer_tokens != TB_UNKNOWN_COUNT)
                    dvec_push(&m[M_ANSWER], q->answer_tokens);
                for (size_t e = 1; e < ne; e++)
                    dvec_push(&m[M_ITL], (double)(em_t[e] - em_t[e - 1]) * 1e-6);
            }
        }
        tb_rep_metrics_compute(rm, n_out, ok, call.n_requests, call.prefill_ns, call.forward_passes, &s->m);
        if (!s->warmup) {
            /* Serving figures: completed and good requests per second of
             * the window, and the failures by class. */
            uint32_t n_ok = 0, n_good = 0, per_class[N_CLASSES] = {0};
            for (uint32_t r = 0; r < call.n_requests; r++) {
                if (!ok[r]) {
                    per_class[error_class(s->requests[r].error)]++;
                    continue;
                }
                n_ok++;
                double ttft_ms = (double)rm[r].ttft_ns * 1e-6, tpot_ms = rm[r].tpot_ns * 1e-6;
                if ((suite->goodput_ttft_ms <= 0 || ttft_ms <= suite->goodput_ttft_ms) &&
                    (suite->goodput_tpot_ms <= 0 || isnan(tpot_ms) || tpot_ms <= suite->goodput_tpot_ms))
                    n_good++;
            }
            double wall_s = (double)s->m.wall_ns * 1e-9;
            dvec_push(&m[M_REQ_RATE], wall_s > 0 ? n_ok / wall_s : NAN);
            dvec_push(&m[M_ERR_RATE], (double)(call.n_requests - n_ok) / call.n_requests);
            if (suite->goodput_ttft_ms > 0 || suite->goodput_tpot_ms > 0)
                dvec_push(&m[M_GOODPUT], wall_s > 0 ? n_good / wall_s : NAN);
            for (size_t k = 0; k < N_CLASSES; k++)
                dvec_push(&cls[k], per_class[k]);
            dvec_push(&m[M_AGG_TPS], s->m.aggregate_tps);
            dvec_push(&m[M_DECODE_TPS], s->m.decode_tps);
            dvec_push(&m[M_WALL], (double)s->m.wall_ns * 1e-6);
            dvec_push(&m[M_RUNNER], (double)s->runner_ns * 1e-3);
            if (call.prefill_ns >= 0)
                dvec_push(&m[M_PREFILL], (double)call.prefill_ns * 1e-6);
            if (call.decode_ns >= 0)
                dvec_push(&m[M_DECODE], (double)call.decode_ns * 1e-6);
            if (call.forward_passes > 0) {
                dvec_push(&m[M_NFE], (double)call.forward_passes);
                dvec_push(&m[M_TPF], s->m.tokens_per_forward);
            }
            double roof = tb_roofline_pct(call.flops, call.bytes, call.peak_flops, call.peak_bytes_per_s,
                                          s->m.wall_ns);
            if (!isnan(roof))
                dvec_push(&m[M_ROOFLINE], roof);
        }
        free(n_out);
        free(ok);
        free(rm);
        free(wr);
        free(ev);
    }
    if (p != end) {
        *err = tb_xstrdup("malformed result from the backend process (trailing bytes)");
        goto bad;
    }
    rec->metrics = tb_xcalloc(M_COUNT + N_CLASSES, sizeof *rec->metrics);
    for (int k = 0; k < M_COUNT; k++) {
        tb_metric_record *mr = &rec->metrics[rec->n_metrics++];
        mr->name = metric_defs[k].name;
        mr->unit = metric_defs[k].unit;
        tb_stats_compute_ci(m[k].v, m[k].n, plan->suite->seed, k != M_ITL, &mr->st);
        free(m[k].v);
    }
    /* A class gets a row only when some repetition had such a failure. */
    for (size_t k = 0; k < N_CLASSES; k++) {
        double any = 0;
        for (size_t i = 0; i < cls[k].n; i++)
            any += cls[k].v[i];
        if (any > 0) {
            tb_metric_record *mr = &rec->metrics[rec->n_metrics++];
            mr->name = class_metric[k];
            mr->unit = "requests";
            tb_stats_compute_ci(cls[k].v, cls[k].n, plan->suite->seed, 1, &mr->st);
        }
        free(cls[k].v);
    }
    if (qa)
        tb_quality_metrics(qa, plan->suite->seed, &rec->metrics, &rec->n_metrics);
    tb_quality_free(qa);
    free(em_t);
    return 0;
bad:
    tb_quality_free(qa);
    for (int k = 0; k < M_COUNT; k++)
        free(m[k].v);
    for (size_t k = 0; k < N_CLASSES; k++)
        free(cls[k].v);
    free(em_t);
    return -1;
#undef TAKE
}

static void free_record(tb_case_record *rec)
{
    for (size_t i = 0; i < rec->n_samples; i++) {
        tb_sample_record *s = &rec->samples[i];
        for (uint32_t r = 0; s->requests && r < s->n_requests; r++) {
            free((char *)s->requests[r].error);
            free(s->requests[r].emissions_json);
            free(s->requests[r].output_text);
        }
        free(s->requests);
    }
    free(rec->samples);
    for (size_t i = 0; i < rec->n_metrics; i++)
        free(rec->metrics[i].name_buf);
    free(rec->metrics);
}

static const tb_stats *find_metric(const tb_case_record *rec, const char *name)
{
    for (size_t i = 0; i < rec->n_metrics; i++)
        if (strcmp(rec->metrics[i].name, name) == 0)
            return &rec->metrics[i].st;
    return NULL;
}

/* ------------------------------------------------------ the loop */

typedef struct run_state {
    tb_plan *plan;
    tb_store *store;
    int64_t session_id;
    const int64_t *backend_ids;
    tb_progress progress;
    tb_run_summary *sum;
    int store_failed;
} run_state;

static void finish_case(run_state *rs, const tb_case *c, case_outcome *o, tb_case_record *rec)
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

    char *err = NULL;
    if (tb_store_case(rs->store, rec, &err) < 0) {
        char *msg = tb_xasprintf("tokbench: %s", err);
        tb_progress_note(&rs->progress, msg);
        free(msg);
        free(err);
        rs->store_failed = 1;
    }

    char *label = tb_case_label(rs->plan, c);
    char detail[512] = "";
    if (strcmp(o->status, "ok") == 0) {
        rs->sum->ok++;
        const tb_stats *agg = find_metric(rec, "agg_tps"), *req = find_metric(rec, "req_tps");
        snprintf(detail, sizeof detail, "%.1f tok/s aggregate, %.1f tok/s per request (median of %zu)",
                 agg ? agg->median : NAN, req ? req->median : NAN, agg ? agg->n : 0);
        if (agg && agg->n > 1 && agg->cv > TB_NOISE_CV) {
            rs->sum->noisy++;
            char *w = tb_xasprintf("warning: %s #%zu: aggregate tok/s varies by CV %.1f%% (> %.0f%%) across repetitions: "
                                   "check the environment (other load, clocks, thermals) before trusting it",
                                   pb->sb->label, c->ordinal, agg->cv * 100, TB_NOISE_CV * 100);
            tb_progress_note(&rs->progress, w);
            free(w);
        }
        size_t mism = 0;
        for (size_t i = 0; i < rec->n_samples; i++)
            for (uint32_t r = 0; r < rec->samples[i].n_requests; r++) {
                const tb_request_record *q = &rec->samples[i].requests[r];
                mism += q->recount >= 0 && (uint32_t)q->recount != q->n_out;
            }
        if (mism) {
            rs->sum->mismatched++;
            char *w = tb_xasprintf("warning: %s #%zu: %zu requests re-count to a different output length than the engine reports",
                                   pb->sb->label, c->ordinal, mism);
            tb_progress_note(&rs->progress, w);
            free(w);
        }
        /* Failed requests of a completed case (serving: refused, dropped,
         * timed out...), by class, over the measured repetitions. */
        size_t failed = 0, total = 0, per_class[N_CLASSES] = {0};
        for (size_t i = 0; i < rec->n_samples; i++) {
            if (rec->samples[i].warmup)
                continue;
            for (uint32_t r = 0; r < rec->samples[i].n_requests; r++) {
                const tb_request_record *q = &rec->samples[i].requests[r];
                total++;
                if (q->status != TB_OK) {
                    failed++;
                    per_class[error_class(q->error)]++;
                }
            }
        }
        if (failed) {
            rs->sum->failed_requests++;
            tb_str w = {0};
            tb_str_appendf(&w, "warning: %s #%zu: %zu of %zu requests failed (", pb->sb->label, c->ordinal, failed,
                           total);
            const char *sep = "";
            for (size_t k = 0; k < N_CLASSES; k++)
                if (per_class[k]) {
                    tb_str_appendf(&w, "%s%s %zu", sep, error_classes[k], per_class[k]);
                    sep = ", ";
                }
            tb_str_append(&w, ")");
            tb_progress_note(&rs->progress, w.s);
            tb_str_free(&w);
        }
    } else if (strcmp(o->status, "failed") == 0) {
        rs->sum->failed++;
    } else {
        rs->sum->skipped++;
    }
    tb_progress_done(&rs->progress, pb->sb->label, label, o->status,
                     strcmp(o->status, "ok") == 0 ? detail : o->error);
    free(label);
}

static void record_simple(run_state *rs, const tb_case *c, const char *status, char *error, case_outcome *o)
{
    tb_case_record rec = {0};
    case_outcome local = {0};
    if (!o)
        o = &local;
    o->status = status;
    o->error = error;
    finish_case(rs, c, o, &rec);
    free(error);
}

/* Run the cases of backend bi. */
static void run_backend(run_state *rs, size_t bi)
{
    tb_plan *plan = rs->plan;
    const tb_suite *s = plan->suite;
    tb_worker_proc w = {0};
    char *probe_error = NULL;
    char *failed_load_key = NULL, *failed_load_error = NULL;
    int64_t load_timeout = (int64_t)(s->load_timeout_s * 1e9), case_timeout = (int64_t)(s->case_timeout_s * 1e9);

    for (size_t ci = 0; ci < plan->n_cases && !interrupted && !rs->store_failed; ci++) {
        tb_case *c = &plan->cases[ci];
        if (c->backend != bi)
            continue;
        if (c->skip_reason) {
            record_simple(rs, c, "skipped", tb_xstrdup(c->skip_reason), NULL);
            continue;
        }
        if (probe_error) {
            record_simple(rs, c, "skipped", tb_xasprintf("cannot run on this host: %s", probe_error), NULL);
            continue;
        }
        if (failed_load_key && strcmp(failed_load_key, c->load_key) == 0) {
            record_simple(rs, c, "failed", tb_xasprintf("model load failed earlier: %s", failed_load_error), NULL);
            continue;
        }

        case_outcome o = {0};
        tb_utc_timestamp(o.started_at);
        o.t_start = tb_now_ns();
        char *label = tb_case_label(plan, c);
        tb_progress_start(&rs->progress, plan->backends[bi].sb->label, label);
        free(label);

        uint32_t type;
        char *buf = NULL;
        size_t len;
        int rc;
        if (!w.pid) {
            if (tb_worker_spawn(plan, bi, &w) != 0) {
                record_simple(rs, c, "failed", tb_xasprintf("cannot start a backend process: %s", strerror(errno)), &o);
                continue;
            }
            rc = tb_wire_recv(w.from_fd, tb_now_ns() + load_timeout, &interrupted, &type, &buf, &len);
            if (rc == 0 && type == TB_MSG_PROBE && len >= sizeof(tb_wire_status)) {
                tb_wire_status st;
                memcpy(&st, buf, sizeof st);
                free(buf);
                if (st.status != TB_OK) {
                    probe_error = tb_xstrdup(st.message);
                    tb_worker_kill(&w);
                    record_simple(rs, c, "skipped", tb_xasprintf("cannot run on this host: %s", probe_error), &o);
                    continue;
                }
            } else {
                free(buf);
                if (rc == 3)
                    break;
                char *why;
                if (rc == 2) {
                    tb_worker_kill(&w);
                    why = tb_xasprintf("probe() did not answer within load_timeout (%.0f s)", s->load_timeout_s);
                } else if (rc == 0) { /* a message, but not the probe answer */
                    tb_worker_kill(&w);
                    why = tb_xasprintf("protocol error: expected the probe answer, got message %u", type);
                } else {
                    why = tb_worker_reap(&w, 0);
                }
                record_simple(rs, c, "failed", why, &o);
                continue;
            }
        }

        uint32_t idx = (uint32_t)ci;
        if (tb_wire_send(w.to_fd, TB_MSG_CASE, &idx, sizeof idx) != 0) {
            kill(w.pid, SIGKILL);
            record_simple(rs, c, "failed", tb_worker_reap(&w, 0), &o);
            continue;
        }
        /* Phase 1: the context (load or reuse), then phase 2: the case. */
        int phase = 1;
        int64_t deadline = tb_now_ns() + load_timeout;
        for (;;) {
            rc = tb_wire_recv(w.from_fd, deadline, &interrupted, &type, &buf, &len);
            if (rc == 3) { /* interrupted: let the plugin stop, then kill */
                kill(w.pid, SIGTERM);
                rc = tb_wire_recv(w.from_fd, tb_now_ns() + GRACE_NS, NULL, &type, &buf, &len);
                if (rc == 0 && type == TB_MSG_RESULT)
                    goto result; /* it finished after all */
                free(buf);
                tb_worker_kill(&w);
                record_simple(rs, c, "failed", tb_xstrdup("interrupted (Ctrl-C or SIGTERM) while running"), &o);
                break;
            }
            if (rc == 2) {
                tb_worker_kill(&w);
                record_simple(rs, c, "failed",
                              phase == 1 ? tb_xasprintf("timed out: create() did not finish within load_timeout (%.0f s); backend process killed", s->load_timeout_s)
                                         : tb_xasprintf("timed out: the case did not finish within case_timeout (%.0f s); backend process killed", s->case_timeout_s),
                              &o);
                break;
            }
            if (rc != 0) { /* EOF or read error: the worker died */
                record_simple(rs, c, "failed", tb_worker_reap(&w, 0), &o);
                break;
            }
            if (type == TB_MSG_LOADED && phase == 1 && len >= sizeof(tb_wire_status)) {
                tb_wire_status st;
                memcpy(&st, buf, sizeof st);
                if (st.status != TB_OK) {
                    free(failed_load_key);
                    free(failed_load_error);
                    failed_load_key = tb_xstrdup(c->load_key);
                    failed_load_error = tb_xstrdup(st.message);
                    free(buf);
                    record_simple(rs, c, "failed", tb_xstrdup(st.message), &o);
                    break;
                }
                if (!st.reused && len > sizeof st)
                    tb_store_backend_info(rs->store, rs->backend_ids[bi], buf + sizeof st);
                free(buf);
                phase = 2;
                deadline = tb_now_ns() + case_timeout;
                continue;
            }
            if (type == TB_MSG_CASE_ERROR && len >= sizeof(tb_wire_status)) {
                tb_wire_status st;
                memcpy(&st, buf, sizeof st);
                free(buf);
                record_simple(rs, c, "failed", tb_xstrdup(st.message), &o);
                break;
            }
            if (type == TB_MSG_RESULT && phase == 2) {
            result:;
                tb_case_record rec = {0};
                char *err = NULL;
                if (build_record(plan, c, buf, len, &rec, &err) == 0) {
                    o.status = "ok";
                    finish_case(rs, c, &o, &rec);
                } else {
                    free_record(&rec);
                    memset(&rec, 0, sizeof rec);
                    o.status = "failed";
                    o.error = err;
                    finish_case(rs, c, &o, &rec);
                    free(err);
                }
                free_record(&rec);
                free(buf);
                break;
            }
            free(buf);
            tb_worker_kill(&w);
            record_simple(rs, c, "failed", tb_xasprintf("protocol error: unexpected message %u from the backend process", type), &o);
            break;
        }
    }
    if (w.pid) {
        tb_wire_send(w.to_fd, TB_MSG_QUIT, NULL, 0);
        /* A plugin's destroy() may take a while; do not wait forever. */
        uint32_t type;
        char *buf;
        size_t len;
        tb_wire_recv(w.from_fd, tb_now_ns() + GRACE_NS, NULL, &type, &buf, &len);
        free(buf);
        tb_worker_kill(&w);
    }
    free(probe_error);
    free(failed_load_key);
    free(failed_load_error);
}

tb_run_outcome tb_runner_run(tb_plan *plan, tb_store *store, int64_t session_id, const int64_t *backend_ids,
                             tb_run_summary *summary)
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
                    .sum = summary};
    tb_progress_init(&rs.progress, plan->n_cases);
    for (size_t bi = 0; bi < plan->n_backends && !interrupted && !rs.store_failed; bi++)
        run_backend(&rs, bi);
    tb_progress_finish(&rs.progress);
    if (plan->judge != SIZE_MAX && !interrupted && !rs.store_failed)
        tb_judge_session(plan, store, session_id, &interrupted);

    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    if (rs.store_failed)
        return TB_RUN_STORE_FAILED;
    return interrupted ? TB_RUN_INTERRUPTED : TB_RUN_COMPLETED;
}
