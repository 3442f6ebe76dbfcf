/* judge.c — see judge.h. */
#define _GNU_SOURCE
#include "judge.h"

#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "util.h"
#include "wire.h"
#include "worker.h"

typedef struct answer {
    int64_t request_id, case_id;
    int32_t prompt_idx;
    int scored;
    char *text;
    size_t pair; /* index of its unique (item, text) pair */
} answer;

static int by_pair(const void *a, const void *b)
{
    const answer *x = *(const answer *const *)a, *y = *(const answer *const *)b;
    if (x->prompt_idx != y->prompt_idx)
        return x->prompt_idx < y->prompt_idx ? -1 : 1;
    return strcmp(x->text, y->text);
}

/* Is item i judged: judge_tags empty, or one of them among its tags? */
static int judged_item(const tb_plan *plan, int i)
{
    const tb_list *want = &plan->suite->prompts.judge_tags;
    if (!want->n)
        return 1;
    if (i < 0 || (size_t)i >= plan->n_prompts)
        return 0;
    const tb_prompt *it = &plan->prompts.items[i];
    for (int t = 0; t < it->n_tags; t++)
        for (size_t k = 0; k < want->n; k++)
            if (strcmp(it->tags[t], want->items[k]) == 0)
                return 1;
    return 0;
}

/* Every ok answer of the session to be judged, in case order. */
static answer *load_answers(const tb_plan *plan, sqlite3 *db, int64_t session, size_t *n_out)
{
    sqlite3_stmt *q;
    answer *a = NULL;
    size_t n = 0, cap = 0;
    *n_out = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT r.id, sa.case_id, r.prompt_idx, r.output_text, r.scored FROM request r"
                           " JOIN sample sa ON r.sample_id = sa.id JOIN bench_case c ON sa.case_id = c.id"
                           " WHERE c.session_id = ? AND r.status = 'ok' AND r.prompt_idx IS NOT NULL"
                           " AND r.output_text IS NOT NULL ORDER BY c.ordinal, r.id",
                           -1, &q, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_int64(q, 1, session);
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (!judged_item(plan, sqlite3_column_int(q, 2)))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            a = tb_xrealloc(a, cap * sizeof *a);
        }
        a[n].request_id = sqlite3_column_int64(q, 0);
        a[n].case_id = sqlite3_column_int64(q, 1);
        a[n].prompt_idx = sqlite3_column_int(q, 2);
        a[n].text = tb_xstrdup((const char *)sqlite3_column_text(q, 3));
        a[n].scored = sqlite3_column_int(q, 4);
        n++;
    }
    sqlite3_finalize(q);
    *n_out = n;
    return a;
}

/* Run the judge's worker over the unique pairs; out[n_pairs]. 0 or -1. */
static int run_worker(const tb_plan *plan, answer **uniq, size_t n_pairs, tb_wire_loglik *out,
                      volatile int *interrupted)
{
    size_t case_idx = SIZE_MAX;
    for (size_t i = 0; i < plan->n_cases && case_idx == SIZE_MAX; i++)
        if (plan->cases[i].backend == plan->judge && !plan->cases[i].skip_reason)
            case_idx = i;
    const char *label = plan->backends[plan->judge].sb->label;
    if (case_idx == SIZE_MAX) {
        fprintf(stderr, "tokbench: judge %s: it has no case to take its load options from (all skipped)\n", label);
        return -1;
    }
    tb_wire_judge h = {.case_index = (uint32_t)case_idx, .n = (uint32_t)n_pairs};
    tb_str msg = {0};
    tb_str_appendn(&msg, (const char *)&h, sizeof h);
    for (size_t i = 0; i < n_pairs; i++) {
        const char *ctx = plan->suite->prompts.judge_context ? plan->prompts.items[uniq[i]->prompt_idx].prompt : "";
        tb_str_appendn(&msg, ctx, strlen(ctx) + 1);
        tb_str_appendn(&msg, uniq[i]->text, strlen(uniq[i]->text) + 1);
    }
    tb_worker_proc w = {0};
    int rc = -1;
    if (tb_worker_spawn(plan, plan->judge, &w) != 0) {
        fprintf(stderr, "tokbench: judge %s: cannot start a backend process\n", label);
        tb_str_free(&msg);
        return -1;
    }
    const tb_suite *s = plan->suite;
    int64_t deadline = tb_now_ns() + (int64_t)(s->load_timeout_s * 1e9);
    uint32_t type;
    char *buf = NULL;
    size_t len;
    int phase = 0; /* 0: probe, 1: loaded, 2: judged */
    if (tb_wire_send(w.to_fd, TB_MSG_JUDGE, msg.s, msg.len) != 0)
        phase = -1;
    while (phase >= 0 && phase < 3) {
        int r = tb_wire_recv(w.from_fd, deadline, interrupted, &type, &buf, &len);
        if (r != 0) {
            char *why = r == 2 ? tb_xstrdup("timed out") : r == 3 ? tb_xstrdup("interrupted") : tb_worker_reap(&w, 0);
            fprintf(stderr, "tokbench: judge %s: %s\n", label, why ? why : "ended");
            free(why);
            break;
        }
        if ((type == TB_MSG_PROBE || type == TB_MSG_LOADED) && len >= sizeof(tb_wire_status)) {
            tb_wire_status st;
            memcpy(&st, buf, sizeof st);
            if (st.status != 0) {
                fprintf(stderr, "tokbench: judge %s: %s\n", label, st.message);
                free(buf);
                break;
            }
            if (type == TB_MSG_LOADED)
                deadline = tb_now_ns() + (int64_t)(s->case_timeout_s * 1e9);
            phase++;
        } else if (type == TB_MSG_JUDGED && len == n_pairs * sizeof *out) {
            memcpy(out, buf, len);
            rc = 0;
            phase = 3;
        } else {
            fprintf(stderr, "tokbench: judge %s: protocol error (message %u)\n", label, type);
            free(buf);
            break;
        }
        free(buf);
    }
    buf = NULL;
    if (w.pid) {
        tb_wire_send(w.to_fd, TB_MSG_QUIT, NULL, 0);
        if (tb_wire_recv(w.from_fd, tb_now_ns() + 5000000000LL, NULL, &type, &buf, &len) == 0)
            free(buf);
        tb_worker_kill(&w);
    }
    tb_str_free(&msg);
    return rc;
}

/* Scores and per-case metrics, in one transaction. */
static int store_scores(sqlite3 *db, const tb_plan *plan, answer *a, size_t n, const tb_wire_loglik *res)
{
    sqlite3_stmt *qs = NULL, *qm = NULL;
    int ok = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK &&
             sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO score (request_id, name, value) VALUES (?,?,?)", -1, &qs,
                                NULL) == SQLITE_OK &&
             sqlite3_prepare_v2(db,
                                "INSERT OR REPLACE INTO metric (case_id, name, unit, n, median, p5, p95, mean, stdev,"
                                " cv, min, max, ci_lo, ci_hi) VALUES (?,'judge_ppl','perplexity',?,?,?,?,?,?,?,?,?,?,?)",
                                -1, &qm, NULL) == SQLITE_OK;
    double *vals = tb_xcalloc(n ? n : 1, sizeof *vals);
    size_t nv = 0;
    for (size_t i = 0; ok && i < n; i++) {
        const tb_wire_loglik *r = &res[a[i].pair];
        if (r->status == 0 && r->n_tokens > 0) {
            double nll = -r->sum_logprob / r->n_tokens, ppl = exp(nll);
            const char *names[2] = {"judge_nll", "judge_ppl"};
            double v[2] = {nll, ppl};
            for (int k = 0; k < 2 && ok; k++) {
                sqlite3_reset(qs);
                sqlite3_bind_int64(qs, 1, a[i].request_id);
                sqlite3_bind_text(qs, 2, names[k], -1, SQLITE_STATIC);
                sqlite3_bind_double(qs, 3, v[k]);
                ok = sqlite3_step(qs) == SQLITE_DONE;
            }
            if (a[i].scored)
                vals[nv++] = ppl;
        }
        /* the case's metric row once its last answer is in */
        if (ok && (i + 1 == n || a[i + 1].case_id != a[i].case_id)) {
            if (nv) {
                tb_stats st;
                tb_stats_compute(vals, nv, plan->suite->seed, &st);
                sqlite3_reset(qm);
                sqlite3_bind_int64(qm, 1, a[i].case_id);
                sqlite3_bind_int64(qm, 2, (int64_t)st.n);
                const double f[] = {st.median, st.p5, st.p95, st.mean, st.stdev, st.cv, st.min, st.max, st.ci_lo, st.ci_hi};
                for (int k = 0; k < 10; k++) {
                    if (isnan(f[k]))
                        sqlite3_bind_null(qm, 3 + k);
                    else
                        sqlite3_bind_double(qm, 3 + k, f[k]);
                }
                ok = sqlite3_step(qm) == SQLITE_DONE;
            }
            nv = 0;
        }
    }
    free(vals);
    if (!ok)
        fprintf(stderr, "tokbench: judge: cannot store the scores: %s\n", sqlite3_errmsg(db));
    sqlite3_finalize(qs);
    sqlite3_finalize(qm);
    sqlite3_exec(db, ok ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    return ok ? 0 : -1;
}

int tb_judge_session(const tb_plan *plan, tb_store *st, int64_t session, volatile int *interrupted)
{
    if (plan->judge == SIZE_MAX || !plan->n_prompts)
        return 0;
    sqlite3 *db = tb_store_db(st);
    size_t n = 0;
    answer *a = load_answers(plan, db, session, &n);
    if (!n) {
        free(a);
        return 0;
    }
    /* unique (item, text) pairs */
    answer **order = tb_xcalloc(n, sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = &a[i];
    qsort(order, n, sizeof *order, by_pair);
    answer **uniq = tb_xcalloc(n, sizeof *uniq);
    size_t n_pairs = 0;
    for (size_t i = 0; i < n; i++) {
        if (!n_pairs || by_pair(&uniq[n_pairs - 1], &order[i]) != 0)
            uniq[n_pairs++] = order[i];
        order[i]->pair = n_pairs - 1;
    }
    fprintf(stderr, "tokbench: judge %s: scoring %zu answers (%zu distinct)\n",
            plan->backends[plan->judge].sb->label, n, n_pairs);
    tb_wire_loglik *res = tb_xcalloc(n_pairs, sizeof *res);
    int rc = run_worker(plan, uniq, n_pairs, res, interrupted);
    if (rc == 0)
        rc = store_scores(db, plan, a, n, res);
    free(res);
    free(uniq);
    free(order);
    for (size_t i = 0; i < n; i++)
        free(a[i].text);
    free(a);
    return rc;
}
