/* shard_join.c — see shard_join.h. Rows are copied by the columns the
 * target's schema has (so columns a later migration adds travel), with
 * the few that a join changes given as SQL expressions. */
#define _GNU_SOURCE
#include "shard_join.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "stats.h"
#include "util.h"

typedef struct override {
    const char *col;
    char *expr; /* SQL, sqlite3_mprintf'd */
} override;

typedef struct joiner {
    sqlite3 *db;
    char *err;
} joiner;

static int fail_db(joiner *j, const char *what)
{
    if (!j->err)
        j->err = tb_xasprintf("%s: %s", what, sqlite3_errmsg(j->db));
    return -1;
}

static int exec(joiner *j, const char *sql)
{
    char *e = NULL;
    if (sqlite3_exec(j->db, sql, NULL, NULL, &e) != SQLITE_OK) {
        if (!j->err)
            j->err = tb_xasprintf("%s: %s", sql, e ? e : "failed");
        sqlite3_free(e);
        return -1;
    }
    return 0;
}

static sqlite3_stmt *prep(joiner *j, const char *sql)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(j->db, sql, -1, &q, NULL) != SQLITE_OK) {
        fail_db(j, "preparing a query");
        return NULL;
    }
    return q;
}

/* Insert a copy of row src_id of `table` with some columns replaced;
 * the new row's id, or -1. */
static int64_t copy_row(joiner *j, const char *table, int64_t src_id, override *ov, size_t n_ov)
{
    char *sql = sqlite3_mprintf("PRAGMA table_info(%Q)", table);
    sqlite3_stmt *q = prep(j, sql);
    sqlite3_free(sql);
    if (!q)
        return -1;
    tb_str cols = {0}, vals = {0};
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(q, 1);
        if (strcmp(c, "id") == 0)
            continue;
        const char *expr = NULL;
        for (size_t i = 0; i < n_ov; i++)
            if (strcmp(ov[i].col, c) == 0)
                expr = ov[i].expr;
        char *qc = sqlite3_mprintf("\"%w\"", c);
        tb_str_appendf(&cols, "%s%s", cols.len ? "," : "", qc);
        tb_str_appendf(&vals, "%s%s", vals.len ? "," : "", expr ? expr : qc);
        sqlite3_free(qc);
    }
    sqlite3_finalize(q);
    sql = sqlite3_mprintf("INSERT INTO \"%w\" (%s) SELECT %s FROM \"%w\" WHERE id = %lld", table, cols.s, vals.s,
                          table, (long long)src_id);
    tb_str_free(&cols);
    tb_str_free(&vals);
    int rc = exec(j, sql);
    sqlite3_free(sql);
    for (size_t i = 0; i < n_ov; i++) {
        sqlite3_free(ov[i].expr);
        ov[i].expr = NULL;
    }
    if (rc != 0)
        return -1;
    if (sqlite3_changes(j->db) != 1) {
        j->err = tb_xasprintf("copying %s row %lld: not found", table, (long long)src_id);
        return -1;
    }
    return sqlite3_last_insert_rowid(j->db);
}

/* A list of ids "1,2,3" for SQL. */
static char *id_list(const int64_t *ids, size_t n)
{
    tb_str b = {0};
    for (size_t i = 0; i < n; i++)
        tb_str_appendf(&b, "%s%lld", i ? "," : "", (long long)ids[i]);
    return tb_str_take(&b);
}

/* The first column of a query's first row (sql: sqlite3_mprintf'd, freed
 * here); dflt when none or NULL. */
static int64_t q_int(joiner *j, char *sql, int64_t dflt)
{
    sqlite3_stmt *q = prep(j, sql);
    sqlite3_free(sql);
    int64_t v = dflt;
    if (q && sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

/* ------------------------------------------------------ the pooled case */

typedef struct dvec {
    double *v;
    size_t n;
} dvec;

static void push(dvec *d, double x)
{
    d->v = tb_xrealloc(d->v, (d->n + 1) * sizeof *d->v);
    d->v[d->n++] = x;
}

enum { P_REQ_TPS, P_TTFT, P_TPOT, P_E2E, P_ITL, P_STEPS, P_ANSWER, P_AGG, P_WALL, P_REQ_RATE, P_ERR_RATE,
       P_GOODPUT, P_RUNNER, P_CLIENT, P_COUNT };
static const char *const pooled_names[P_COUNT] = {
    "req_tps", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "steps_done", "answer_tokens", "agg_tps", "wall_ms",
    "req_throughput", "error_rate", "goodput", "runner_us", "client_busy",
};

/* Gaps between the emissions of one stored emissions_json. */
static void itl_gaps(const char *json, dvec *out)
{
    cJSON *a = cJSON_Parse(json ? json : "[]"), *e;
    double last = NAN;
    cJSON_ArrayForEach(e, a)
    {
        cJSON *t = cJSON_GetArrayItem(e, 0);
        if (!cJSON_IsNumber(t))
            continue;
        if (!isnan(last))
            push(out, t->valuedouble - last);
        last = t->valuedouble;
    }
    cJSON_Delete(a);
}

typedef struct pooled_case {
    dvec m[P_COUNT];
    dvec *cls; /* [tb_n_error_classes]: failed requests per class per call */
} pooled_case;

/* Pool repetition `rep` of the n shard cases into one sample of case
 * new_case; measured ones add to pc. 0 or -1. */
static int pool_sample(joiner *j, const int64_t *cases, const int64_t *offsets, size_t n, int rep,
                       int64_t new_case, double ttft_lim, double tpot_lim, pooled_case *pc)
{
    int64_t *samples = tb_xcalloc(n, sizeof *samples), *t0 = tb_xcalloc(n, sizeof *t0);
    int warm = 0, rc = -1;
    int64_t runner = 0, emissions = 0, recount = 0, start = INT64_MAX;
    int recount_known = 1;
    double client = NAN;
    for (size_t k = 0; k < n; k++) {
        char *sql = sqlite3_mprintf("SELECT id, warmup, start_ns, runner_ns, n_emissions, recount_tokens, client_busy"
                                    " FROM sample WHERE case_id = %lld AND repetition = %d",
                                    (long long)cases[k], rep);
        sqlite3_stmt *q = prep(j, sql);
        sqlite3_free(sql);
        if (!q)
            goto out;
        if (sqlite3_step(q) != SQLITE_ROW || sqlite3_column_type(q, 2) == SQLITE_NULL) {
            j->err = tb_xasprintf("shard %zu has no repetition %d with a start time", k, rep);
            sqlite3_finalize(q);
            goto out;
        }
        samples[k] = sqlite3_column_int64(q, 0);
        warm |= sqlite3_column_int(q, 1);
        t0[k] = sqlite3_column_int64(q, 2) + offsets[k]; /* realtime */
        if (t0[k] < start)
            start = t0[k];
        if (sqlite3_column_int64(q, 3) > runner)
            runner = sqlite3_column_int64(q, 3);
        emissions += sqlite3_column_int64(q, 4);
        if (sqlite3_column_type(q, 5) == SQLITE_NULL)
            recount_known = 0;
        else
            recount += sqlite3_column_int64(q, 5);
        if (sqlite3_column_type(q, 6) != SQLITE_NULL && !(sqlite3_column_double(q, 6) <= client))
            client = sqlite3_column_double(q, 6); /* the busiest shard's client */
        sqlite3_finalize(q);
    }
    /* the pooled sample, its figures filled in once its requests are in */
    char *sql = sqlite3_mprintf("INSERT INTO sample (case_id, repetition, warmup, n_requests, wall_ns, output_tokens,"
                                " recount_tokens, n_emissions, runner_ns, start_ns, client_busy)"
                                " VALUES (%lld, %d, %d, 0, 0, 0, NULL, %lld, %lld, %lld, NULL)",
                                (long long)new_case, rep, warm, (long long)emissions, (long long)runner,
                                (long long)start);
    int e = exec(j, sql);
    sqlite3_free(sql);
    if (e)
        goto out;
    int64_t sample = sqlite3_last_insert_rowid(j->db);
    tb_request_metrics *rm = NULL;
    uint32_t *n_out = NULL;
    int *ok = NULL;
    size_t nr = 0;
    for (size_t k = 0; k < n; k++) {
        sql = sqlite3_mprintf("SELECT id, status, submit_offset_ns, ttft_ns, e2e_ns, tpot_ns, tps, output_tokens,"
                              " error, steps_done, answer_tokens, emissions_json FROM request WHERE sample_id = %lld"
                              " ORDER BY idx", (long long)samples[k]);
        sqlite3_stmt *q = prep(j, sql);
        sqlite3_free(sql);
        if (!q)
            goto out_req;
        int step;
        while ((step = sqlite3_step(q)) == SQLITE_ROW) {
            rm = tb_xrealloc(rm, (nr + 1) * sizeof *rm);
            n_out = tb_xrealloc(n_out, (nr + 1) * sizeof *n_out);
            ok = tb_xrealloc(ok, (nr + 1) * sizeof *ok);
            int64_t submit = t0[k] + sqlite3_column_int64(q, 2) - start;
            tb_request_metrics *m = &rm[nr];
            m->submit_ns = submit;
            m->ttft_ns = sqlite3_column_int64(q, 3);
            m->e2e_ns = sqlite3_column_int64(q, 4);
            m->done_ns = submit + m->e2e_ns;
            m->tpot_ns = sqlite3_column_type(q, 5) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 5);
            m->tps = sqlite3_column_type(q, 6) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 6);
            n_out[nr] = (uint32_t)sqlite3_column_int64(q, 7);
            ok[nr] = strcmp((const char *)sqlite3_column_text(q, 1), "ok") == 0;
            if (!warm && ok[nr]) { /* the per-request sets, as metrics.c fills them */
                push(&pc->m[P_REQ_TPS], m->tps);
                push(&pc->m[P_TTFT], (double)m->ttft_ns * 1e-6);
                push(&pc->m[P_TPOT], m->tpot_ns * 1e-6);
                push(&pc->m[P_E2E], (double)m->e2e_ns * 1e-6);
                if (sqlite3_column_int64(q, 9) > 0)
                    push(&pc->m[P_STEPS], (double)sqlite3_column_int64(q, 9));
                if (sqlite3_column_type(q, 10) != SQLITE_NULL)
                    push(&pc->m[P_ANSWER], (double)sqlite3_column_int64(q, 10));
                itl_gaps((const char *)sqlite3_column_text(q, 11), &pc->m[P_ITL]);
            }
            override ov[] = {
                {"sample_id", sqlite3_mprintf("%lld", (long long)sample)},
                {"idx", sqlite3_mprintf("%lld", (long long)nr)},
                {"submit_offset_ns", sqlite3_mprintf("%lld", (long long)submit)},
            };
            if (copy_row(j, "request", sqlite3_column_int64(q, 0), ov, 3) < 0) {
                sqlite3_finalize(q);
                goto out_req;
            }
            nr++;
        }
        sqlite3_finalize(q);
        if (step != SQLITE_DONE) {
            fail_db(j, "reading a shard's requests");
            goto out_req;
        }
    }
    {
        tb_rep_metrics rep_m;
        tb_rep_metrics_compute(rm, n_out, ok, nr, -1, 0, &rep_m);
        size_t n_ok = 0, n_good = 0;
        for (size_t r = 0; r < nr; r++)
            if (ok[r]) {
                n_ok++;
                n_good += tb_request_good(&rm[r], ttft_lim, tpot_lim);
            }
        char agg[64];
        snprintf(agg, sizeof agg, isfinite(rep_m.aggregate_tps) ? "%.17g" : "NULL", rep_m.aggregate_tps);
        char busy[64], rec[32];
        snprintf(busy, sizeof busy, isnan(client) ? "NULL" : "%.17g", client);
        snprintf(rec, sizeof rec, recount_known ? "%lld" : "NULL", (long long)recount);
        sql = sqlite3_mprintf("UPDATE sample SET n_requests = %lld, wall_ns = %lld, output_tokens = %lld,"
                              " aggregate_tps = %s, client_busy = %s, recount_tokens = %s WHERE id = %lld",
                              (long long)nr, (long long)rep_m.wall_ns, (long long)rep_m.output_tokens, agg, busy,
                              rec, (long long)sample);
        e = exec(j, sql);
        sqlite3_free(sql);
        if (e)
            goto out_req;
        if (!warm) { /* the per-call sets */
            double wall_s = (double)rep_m.wall_ns * 1e-9;
            push(&pc->m[P_AGG], rep_m.aggregate_tps);
            push(&pc->m[P_WALL], (double)rep_m.wall_ns * 1e-6);
            push(&pc->m[P_REQ_RATE], wall_s > 0 ? (double)n_ok / wall_s : NAN);
            push(&pc->m[P_ERR_RATE], nr ? (double)(nr - n_ok) / (double)nr : NAN);
            if (ttft_lim > 0 || tpot_lim > 0)
                push(&pc->m[P_GOODPUT], wall_s > 0 ? (double)n_good / wall_s : NAN);
            push(&pc->m[P_RUNNER], (double)runner * 1e-3);
            if (!isnan(client))
                push(&pc->m[P_CLIENT], client);
            for (size_t c = 0; c < tb_n_error_classes; c++)
                push(&pc->cls[c], 0);
            for (size_t r = 0; r < nr; r++)
                if (!ok[r]) {
                    char *sqle = sqlite3_mprintf("SELECT error FROM request WHERE sample_id = %lld AND idx = %lld",
                                                 (long long)sample, (long long)r);
                    sqlite3_stmt *qe = prep(j, sqle);
                    sqlite3_free(sqle);
                    if (qe && sqlite3_step(qe) == SQLITE_ROW)
                        pc->cls[tb_error_class((const char *)sqlite3_column_text(qe, 0))].v[pc->cls[0].n - 1] += 1;
                    sqlite3_finalize(qe);
                }
        }
    }
    rc = 0;
out_req:
    free(rm);
    free(n_out);
    free(ok);
out:
    free(samples);
    free(t0);
    return rc;
}

static int insert_metric(joiner *j, int64_t case_id, const char *name, const dvec *d, uint64_t seed, int with_ci)
{
    tb_stats st;
    tb_stats_compute_ci(d->v, d->n, seed, with_ci, &st);
    if (st.n == 0)
        return 0;
    const tb_metric_def *def = tb_metric_find(name);
    sqlite3_stmt *q = prep(j, "INSERT INTO metric (case_id, name, unit, n, median, p5, p95, mean, stdev, cv, min, max,"
                              " ci_lo, ci_hi, p90, p99) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    if (!q)
        return -1;
    sqlite3_bind_int64(q, 1, case_id);
    sqlite3_bind_text(q, 2, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 3, def ? def->unit : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, (int64_t)st.n);
    const double v[] = {st.median, st.p5, st.p95, st.mean, st.stdev, st.cv, st.min, st.max, st.ci_lo, st.ci_hi,
                        st.p90, st.p99};
    for (int k = 0; k < 12; k++)
        if (isfinite(v[k]))
            sqlite3_bind_double(q, 5 + k, v[k]);
    int rc = sqlite3_step(q) == SQLITE_DONE ? 0 : fail_db(j, "storing a pooled metric");
    sqlite3_finalize(q);
    return rc;
}

/* ------------------------------------------------------ one run */

typedef struct shard_row {
    int64_t id;
    char *uuid;
    int64_t clock_offset;
} shard_row;

/* The joined session's uuid: from the shards' uuids (in shard order), so
 * that a run is joined once however often it is merged. */
static void joined_uuid(const shard_row *s, size_t n, char out[40])
{
    tb_str b = {0};
    tb_str_append(&b, "tokbench shard join");
    for (size_t k = 0; k < n; k++)
        tb_str_appendf(&b, " %s", s[k].uuid);
    char hex[65];
    tb_sha256_hex(b.s, b.len, hex);
    tb_str_free(&b);
    snprintf(out, 40, "%.8s-%.4s-5%.3s-%.4s-%.12s", hex, hex + 8, hex + 13, hex + 16, hex + 20);
}

/* Why the shards cannot be joined (malloc'd), or NULL: the same
 * warm-ups, repetitions, backends and cases (dimensions, options). */
static char *mismatch(joiner *j, const shard_row *s, size_t n)
{
    for (size_t k = 1; k < n; k++) {
        char *sql = sqlite3_mprintf(
            "SELECT (SELECT warmup || '/' || repeat FROM session WHERE id = %lld) IS"
            " (SELECT warmup || '/' || repeat FROM session WHERE id = %lld),"
            " (SELECT group_concat(label || plugin || options_json, ';') FROM (SELECT * FROM backend WHERE session_id"
            " = %lld ORDER BY label)) IS (SELECT group_concat(label || plugin || options_json, ';') FROM (SELECT *"
            " FROM backend WHERE session_id = %lld ORDER BY label)),"
            " (SELECT group_concat(c.ordinal || b.label || c.prompt_tokens || '/' || c.max_new_tokens || '/' ||"
            " c.batch || c.options_json, ';') FROM (SELECT * FROM bench_case WHERE session_id = %lld ORDER BY"
            " ordinal) c JOIN backend b ON b.id = c.backend_id) IS (SELECT group_concat(c.ordinal || b.label ||"
            " c.prompt_tokens || '/' || c.max_new_tokens || '/' || c.batch || c.options_json, ';') FROM (SELECT *"
            " FROM bench_case WHERE session_id = %lld ORDER BY ordinal) c JOIN backend b ON b.id = c.backend_id)",
            (long long)s[0].id, (long long)s[k].id, (long long)s[0].id, (long long)s[k].id, (long long)s[0].id,
            (long long)s[k].id);
        sqlite3_stmt *q = prep(j, sql);
        sqlite3_free(sql);
        if (!q)
            return tb_xstrdup("cannot compare the shards");
        char *why = NULL;
        if (sqlite3_step(q) == SQLITE_ROW) {
            if (!sqlite3_column_int(q, 0))
                why = tb_xasprintf("shard %zu ran other warm-ups or repetitions than shard 0", k);
            else if (!sqlite3_column_int(q, 1))
                why = tb_xasprintf("shard %zu has other backends or options than shard 0", k);
            else if (!sqlite3_column_int(q, 2))
                why = tb_xasprintf("shard %zu ran other cases than shard 0", k);
        }
        sqlite3_finalize(q);
        if (why)
            return why;
    }
    return NULL;
}

static int join_run(joiner *j, const shard_row *s, size_t n, const char *uuid, const char *start_at)
{
    int64_t *ids = tb_xcalloc(n, sizeof *ids);
    for (size_t k = 0; k < n; k++)
        ids[k] = s[k].id;
    char *list = id_list(ids, n);
    int rc = -1;
    /* the session: shard 0's, pooling n shards, on the realtime clock */
    override sov[] = {
        {"uuid", sqlite3_mprintf("%Q", uuid)},
        {"command_line", sqlite3_mprintf("%Q", "tokbench db merge: the shards of one run joined")},
        {"started_at", sqlite3_mprintf("(SELECT min(started_at) FROM session WHERE id IN (%s))", list)},
        {"finished_at", sqlite3_mprintf("(SELECT max(finished_at) FROM session WHERE id IN (%s))", list)},
        {"status", sqlite3_mprintf("'completed'")},
        {"shard_index", sqlite3_mprintf("NULL")},
        {"shard_count", sqlite3_mprintf("%lld", (long long)n)},
        {"clock_offset_ns", sqlite3_mprintf("0")},
        {"start_late_ns", sqlite3_mprintf("(SELECT max(start_late_ns) FROM session WHERE id IN (%s))", list)},
        {"owner_boot_id", sqlite3_mprintf("NULL")},
        {"owner_pid_ns", sqlite3_mprintf("NULL")},
        {"owner_pid", sqlite3_mprintf("NULL")},
        {"owner_start_ticks", sqlite3_mprintf("NULL")},
    };
    int64_t session = copy_row(j, "session", s[0].id, sov, sizeof sov / sizeof *sov);
    if (session < 0)
        goto out;
    for (size_t k = 0; k < n; k++) {
        char *sql = sqlite3_mprintf("INSERT INTO shard (session_id, shard_index, source_uuid, hostname, seed,"
                                    " clock_offset_ns, offset_to_first_ns, start_late_ns) SELECT %lld, s.shard_index,"
                                    " s.uuid, m.hostname, s.seed, s.clock_offset_ns, s.clock_offset_ns - %lld,"
                                    " s.start_late_ns FROM session s JOIN machine m ON m.id = s.machine_id WHERE"
                                    " s.id = %lld",
                                    (long long)session, (long long)s[0].clock_offset, (long long)s[k].id);
        int e = exec(j, sql);
        sqlite3_free(sql);
        if (e)
            goto out;
    }
    /* backends by label */
    char *sql = sqlite3_mprintf("SELECT id FROM backend WHERE session_id = %lld ORDER BY id", (long long)s[0].id);
    sqlite3_stmt *qb = prep(j, sql);
    sqlite3_free(sql);
    if (!qb)
        goto out;
    while (sqlite3_step(qb) == SQLITE_ROW) {
        override ov[] = {{"session_id", sqlite3_mprintf("%lld", (long long)session)}};
        if (copy_row(j, "backend", sqlite3_column_int64(qb, 0), ov, 1) < 0) {
            sqlite3_finalize(qb);
            goto out;
        }
    }
    sqlite3_finalize(qb);
    /* the goodput limits the shards ran with (the resolved configuration) */
    double ttft_lim = 0, tpot_lim = 0;
    uint64_t seed = (uint64_t)q_int(j, sqlite3_mprintf("SELECT seed FROM session WHERE id = %lld", (long long)s[0].id),
                                    0);
    {
        sql = sqlite3_mprintf("SELECT config_json FROM session WHERE id = %lld", (long long)s[0].id);
        sqlite3_stmt *q = prep(j, sql);
        sqlite3_free(sql);
        if (q && sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)) {
            cJSON *c = cJSON_Parse((const char *)sqlite3_column_text(q, 0));
            cJSON *su = cJSON_GetObjectItemCaseSensitive(c, "suite");
            cJSON *a = cJSON_GetObjectItemCaseSensitive(su, "goodput_ttft_ms");
            cJSON *b = cJSON_GetObjectItemCaseSensitive(su, "goodput_tpot_ms");
            ttft_lim = cJSON_IsNumber(a) ? a->valuedouble : 0;
            tpot_lim = cJSON_IsNumber(b) ? b->valuedouble : 0;
            cJSON_Delete(c);
        }
        sqlite3_finalize(q);
    }
    /* cases by ordinal */
    sql = sqlite3_mprintf("SELECT c.id, c.ordinal, b.label FROM bench_case c JOIN backend b ON b.id = c.backend_id"
                          " WHERE c.session_id = %lld ORDER BY c.ordinal", (long long)s[0].id);
    sqlite3_stmt *qc = prep(j, sql);
    sqlite3_free(sql);
    if (!qc)
        goto out;
    int step;
    while ((step = sqlite3_step(qc)) == SQLITE_ROW) {
        int64_t ordinal = sqlite3_column_int64(qc, 1);
        const char *label = (const char *)sqlite3_column_text(qc, 2);
        int64_t *cases = tb_xcalloc(n, sizeof *cases);
        int64_t *offsets = tb_xcalloc(n, sizeof *offsets);
        tb_str errors = {0};
        for (size_t k = 0; k < n; k++) {
            offsets[k] = s[k].clock_offset;
            sql = sqlite3_mprintf("SELECT id, status, coalesce(error, '') FROM bench_case WHERE session_id = %lld AND"
                                  " ordinal = %lld", (long long)s[k].id, (long long)ordinal);
            sqlite3_stmt *q = prep(j, sql);
            sqlite3_free(sql);
            if (q && sqlite3_step(q) == SQLITE_ROW) {
                cases[k] = sqlite3_column_int64(q, 0);
                if (strcmp((const char *)sqlite3_column_text(q, 1), "ok") != 0)
                    tb_str_appendf(&errors, "%sshard %zu %s: %s", errors.len ? "; " : "", k,
                                   (const char *)sqlite3_column_text(q, 1), (const char *)sqlite3_column_text(q, 2));
            }
            sqlite3_finalize(q);
        }
        char *clist = id_list(cases, n);
        override ov[] = {
            {"session_id", sqlite3_mprintf("%lld", (long long)session)},
            {"backend_id", sqlite3_mprintf("(SELECT id FROM backend WHERE session_id = %lld AND label = %Q)",
                                           (long long)session, label)},
            {"concurrency", sqlite3_mprintf("(SELECT sum(concurrency) FROM bench_case WHERE id IN (%s))", clist)},
            {"request_rate", sqlite3_mprintf("(SELECT sum(request_rate) FROM bench_case WHERE id IN (%s))", clist)},
            {"status", errors.len ? sqlite3_mprintf("'failed'") : sqlite3_mprintf("status")},
            {"error", errors.len ? sqlite3_mprintf("%Q", errors.s) : sqlite3_mprintf("error")},
            {"started_at", sqlite3_mprintf("(SELECT min(started_at) FROM bench_case WHERE id IN (%s))", clist)},
            {"finished_at", sqlite3_mprintf("(SELECT max(finished_at) FROM bench_case WHERE id IN (%s))", clist)},
            {"case_wall_ns", sqlite3_mprintf("(SELECT max(case_wall_ns) FROM bench_case WHERE id IN (%s))", clist)},
            {"host_peak_rss_bytes",
             sqlite3_mprintf("(SELECT max(host_peak_rss_bytes) FROM bench_case WHERE id IN (%s))", clist)},
        };
        int64_t new_case = copy_row(j, "bench_case", cases[0], ov, sizeof ov / sizeof *ov);
        int ok = new_case >= 0;
        for (size_t k = 0; ok && k < n; k++)
            if (!cases[k]) {
                j->err = tb_xasprintf("shard %zu has no case #%lld", k, (long long)ordinal);
                ok = 0;
            }
        if (ok && !errors.len) {
            pooled_case pc = {0};
            pc.cls = tb_xcalloc(tb_n_error_classes, sizeof *pc.cls);
            int reps = (int)q_int(j, sqlite3_mprintf("SELECT count(*) FROM sample WHERE case_id = %lld",
                                                     (long long)cases[0]), 0);
            for (int r = 0; ok && r < reps; r++)
                ok = pool_sample(j, cases, offsets, n, r, new_case, ttft_lim, tpot_lim, &pc) == 0;
            for (int m = 0; m < P_COUNT; m++) {
                if (ok)
                    ok = insert_metric(j, new_case, pooled_names[m], &pc.m[m], seed, m != P_ITL) == 0;
                free(pc.m[m].v);
            }
            for (size_t c = 0; c < tb_n_error_classes; c++) {
                double any = 0;
                for (size_t i = 0; i < pc.cls[c].n; i++)
                    any += pc.cls[c].v[i];
                if (ok && any > 0) {
                    char name[64];
                    snprintf(name, sizeof name, "errors_%s", tb_error_classes[c]);
                    ok = insert_metric(j, new_case, name, &pc.cls[c], seed, 1) == 0;
                }
                free(pc.cls[c].v);
            }
            free(pc.cls);
        }
        free(clist);
        free(cases);
        free(offsets);
        tb_str_free(&errors);
        if (!ok) {
            sqlite3_finalize(qc);
            goto out;
        }
    }
    sqlite3_finalize(qc);
    if (step != SQLITE_DONE) {
        fail_db(j, "reading the cases of shard 0");
        goto out;
    }
    (void)start_at;
    rc = 0;
out:
    free(list);
    free(ids);
    return rc;
}

int tb_shard_join(sqlite3 *db, tb_shard_join_result *res, char **err)
{
    memset(res, 0, sizeof *res);
    joiner j = {.db = db};
    tb_str waiting = {0}, joined = {0};
    /* the runs: completed shard sessions by suite, start time, shard count */
    sqlite3_stmt *g = prep(&j, "SELECT suite_sha256, start_at, shard_count, count(*), count(DISTINCT shard_index),"
                               " group_concat(shard_index) FROM session WHERE shard_index IS NOT NULL AND status ="
                               " 'completed' AND start_at IS NOT NULL GROUP BY suite_sha256, start_at, shard_count"
                               " ORDER BY start_at");
    if (!g) {
        *err = j.err;
        return -1;
    }
    int rc = 0, step;
    while (rc == 0 && (step = sqlite3_step(g)) == SQLITE_ROW) {
        const char *sha = (const char *)sqlite3_column_text(g, 0);
        const char *start_at = (const char *)sqlite3_column_text(g, 1);
        int64_t n = sqlite3_column_int64(g, 2), have = sqlite3_column_int64(g, 3),
                distinct = sqlite3_column_int64(g, 4);
        char *what = tb_xasprintf("the run of %.12s starting at %s (%lld shards)", sha, start_at, (long long)n);
        if (distinct < n || have > n) {
            tb_str_appendf(&waiting, "%s%s: %s (shards present: %s)", waiting.len ? "; " : "", what,
                           have > distinct ? "a shard present twice" : "shards missing",
                           (const char *)sqlite3_column_text(g, 5));
            free(what);
            continue;
        }
        shard_row *s = tb_xcalloc((size_t)n, sizeof *s);
        char *sql = sqlite3_mprintf("SELECT id, uuid, coalesce(clock_offset_ns, 0) FROM session WHERE suite_sha256 ="
                                    " %Q AND start_at = %Q AND shard_count = %lld AND shard_index IS NOT NULL AND"
                                    " status = 'completed' ORDER BY shard_index", sha, start_at, (long long)n);
        sqlite3_stmt *q = prep(&j, sql);
        sqlite3_free(sql);
        for (int64_t k = 0; q && k < n && sqlite3_step(q) == SQLITE_ROW; k++) {
            s[k].id = sqlite3_column_int64(q, 0);
            s[k].uuid = tb_xstrdup((const char *)sqlite3_column_text(q, 1));
            s[k].clock_offset = sqlite3_column_int64(q, 2);
        }
        sqlite3_finalize(q);
        char uuid[40];
        joined_uuid(s, (size_t)n, uuid);
        char *known_sql = sqlite3_mprintf("SELECT count(*) FROM session WHERE uuid = %Q", uuid);
        int64_t known = q_int(&j, known_sql, 0);
        char *why = known ? NULL : mismatch(&j, s, (size_t)n);
        if (known) {
            res->known++;
        } else if (why) {
            tb_str_appendf(&waiting, "%s%s: %s", waiting.len ? "; " : "", what, why);
        } else if (exec(&j, "SAVEPOINT shard_join") != 0 || join_run(&j, s, (size_t)n, uuid, start_at) != 0) {
            exec(&j, "ROLLBACK TO shard_join");
            exec(&j, "RELEASE shard_join");
            char *e = tb_xasprintf("joining %s: %s", what, j.err ? j.err : "failed");
            free(j.err);
            j.err = e;
            rc = -1;
        } else if (exec(&j, "RELEASE shard_join") != 0) {
            rc = -1;
        } else {
            res->joined++;
            tb_str_appendf(&joined, "%s%s", joined.len ? " " : "", uuid);
        }
        free(why);
        free(what);
        for (int64_t k = 0; k < n; k++)
            free(s[k].uuid);
        free(s);
    }
    sqlite3_finalize(g);
    res->waiting = waiting.len ? tb_str_take(&waiting) : NULL;
    res->joined_uuids = joined.len ? tb_str_take(&joined) : NULL;
    tb_str_free(&waiting);
    tb_str_free(&joined);
    if (rc != 0) {
        *err = j.err;
        return -1;
    }
    return 0;
}

void tb_shard_join_result_free(tb_shard_join_result *res)
{
    free(res->waiting);
    free(res->joined_uuids);
    res->waiting = res->joined_uuids = NULL;
}
