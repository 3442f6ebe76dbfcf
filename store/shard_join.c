/* shard_join.c — see shard_join.h. The session and backend rows are
 * copied by the columns the target's schema has (so columns a later
 * migration adds travel), with the few that a join changes given as SQL
 * expressions, through the store's row writer (tb_store_rows_*); the
 * cases go through the store's case writer (tb_store_case), their figures
 * through tb_case_metrics. Nothing here writes SQL of its own. */
#define _GNU_SOURCE
#include "shard_join.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "plan.h"
#include "record.h"
#include "store.h"
#include "tokbench/backend.h"
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

static sqlite3_stmt *prep(joiner *j, const char *sql)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(j->db, sql, -1, &q, NULL) != SQLITE_OK) {
        fail_db(j, "preparing a query");
        return NULL;
    }
    return q;
}

/* Insert, through the store's row writer, each row that `sql` (a SELECT,
 * sqlite3_mprintf'd, freed here) returns into `table`, its result columns
 * named as the table's: the id of the last row inserted, 0 when none, or
 * -1. */
static int64_t insert_selected(joiner *j, const char *table, char *sql)
{
    sqlite3_stmt *q = prep(j, sql);
    sqlite3_free(sql);
    if (!q)
        return -1;
    size_t n = (size_t)sqlite3_column_count(q);
    char **cols = tb_xcalloc(n ? n : 1, sizeof *cols);
    for (size_t c = 0; c < n; c++)
        cols[c] = tb_xstrdup(sqlite3_column_name(q, (int)c));
    tb_store_rows *w = NULL;
    char *why = NULL;
    int64_t id = tb_store_rows_open(j->db, table, cols, n, &w, &why) == 0 ? 0 : -1;
    int step = SQLITE_DONE;
    while (id >= 0 && (step = sqlite3_step(q)) == SQLITE_ROW) {
        for (size_t c = 0; c < n; c++)
            tb_store_rows_value(w, c, sqlite3_column_value(q, (int)c));
        id = tb_store_rows_insert(w, &why);
    }
    if (id >= 0 && step != SQLITE_DONE)
        id = fail_db(j, "reading the rows to copy");
    if (why && !j->err)
        j->err = tb_xasprintf("storing a %s row: %s", table, why);
    free(why);
    tb_store_rows_close(w);
    sqlite3_finalize(q);
    for (size_t c = 0; c < n; c++)
        free(cols[c]);
    free(cols);
    return id;
}

/* Insert a copy of row src_id of `table` with some columns replaced
 * (every column of the target's schema but id, so columns a later
 * migration adds travel); the new row's id, or -1. */
static int64_t copy_row(joiner *j, const char *table, int64_t src_id, override *ov, size_t n_ov)
{
    char *sql = sqlite3_mprintf("PRAGMA table_info(%Q)", table);
    sqlite3_stmt *q = prep(j, sql);
    sqlite3_free(sql);
    tb_str vals = {0};
    while (q && sqlite3_step(q) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(q, 1);
        if (strcmp(c, "id") == 0)
            continue;
        const char *expr = NULL;
        for (size_t i = 0; i < n_ov; i++)
            if (strcmp(ov[i].col, c) == 0)
                expr = ov[i].expr;
        char *qc = sqlite3_mprintf("\"%w\"", c);
        tb_str_appendf(&vals, "%s%s AS %s", vals.len ? "," : "", expr ? expr : qc, qc);
        sqlite3_free(qc);
    }
    sqlite3_finalize(q);
    for (size_t i = 0; i < n_ov; i++) {
        sqlite3_free(ov[i].expr);
        ov[i].expr = NULL;
    }
    if (!q)
        return -1;
    int64_t id = insert_selected(j, table, sqlite3_mprintf("SELECT %s FROM \"%w\" WHERE id = %lld", vals.s, table,
                                                           (long long)src_id));
    tb_str_free(&vals);
    if (id == 0) {
        if (!j->err)
            j->err = tb_xasprintf("copying %s row %lld: not found", table, (long long)src_id);
        return -1;
    }
    return id;
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

/* One pooled call being built: repetition r of every shard, its requests
 * on one clock (each host's monotonic times plus its realtime offset). */
typedef struct pooled_call {
    tb_raw_call call;
    tb_raw_request *req;    /* [call.n_requests] */
    tb_request_metrics *rm; /* [call.n_requests]: as each shard stored them */
    tb_emission *em;        /* [call.n_emissions] */
    tb_str texts;           /* req[r].text_len bytes each */
    tb_canvas_counts **canvas; /* [call.n_requests]: NULL, or its canvases */
} pooled_call;

static void pooled_call_free(pooled_call *p)
{
    for (uint32_t r = 0; p->canvas && r < p->call.n_requests; r++)
        free(p->canvas[r]);
    free(p->canvas);
    free(p->req);
    free(p->rm);
    free(p->em);
    tb_str_free(&p->texts);
}

/* A stored request's emissions_json ([[ms since submit, tokens], ...],
 * kept to the microsecond) as request r's emissions on the pooled clock. */
static void add_emissions(pooled_call *p, const char *json, uint32_t r, int64_t submit_ns)
{
    cJSON *a = cJSON_Parse(json ? json : "[]"), *e;
    cJSON_ArrayForEach(e, a)
    {
        cJSON *t = cJSON_GetArrayItem(e, 0), *k = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsNumber(t))
            continue;
        p->em = tb_xrealloc(p->em, (p->call.n_emissions + 1) * sizeof *p->em);
        p->em[p->call.n_emissions++] = (tb_emission){
            .t_ns = submit_ns + llround(t->valuedouble * 1e6),
            .request = r,
            .n_tokens = cJSON_IsNumber(k) && k->valuedouble > 0 ? (uint32_t)k->valuedouble : 0,
        };
    }
    cJSON_Delete(a);
}

static int64_t col_int(sqlite3_stmt *q, int c, int64_t if_null)
{
    return sqlite3_column_type(q, c) == SQLITE_NULL ? if_null : sqlite3_column_int64(q, c);
}

static uint64_t col_hash(sqlite3_stmt *q, int c)
{
    const char *h = (const char *)sqlite3_column_text(q, c);
    return h ? strtoull(h, NULL, 16) : 0;
}

/* A stored request's speculative counts (migration 15) from columns
 * c .. c + 4 (verifications, drafted, accepted, draft_len, spec_at);
 * counts that do not parse or are impossible are dropped (all 0). */
static void spec_read(sqlite3_stmt *q, int c, tb_spec_counts *s)
{
    memset(s, 0, sizeof *s);
    if (sqlite3_column_type(q, c) == SQLITE_NULL)
        return;
    s->verifications = (uint32_t)col_int(q, c, 0);
    s->drafted = (uint32_t)col_int(q, c + 1, 0);
    s->accepted = (uint32_t)col_int(q, c + 2, 0);
    s->draft_len = (uint32_t)col_int(q, c + 3, 0);
    const char *at = (const char *)sqlite3_column_text(q, c + 4);
    uint32_t i = 0;
    for (const char *p = at ? strchr(at, '[') : NULL; p && i < TB_SPEC_MAX_DRAFT;) {
        unsigned d, a;
        int used = 0;
        p = strchr(p + 1, '[');
        if (!p || sscanf(p, "[%u,%u]%n", &d, &a, &used) != 2 || !used)
            break;
        s->drafted_at[i] = d;
        s->accepted_at[i++] = a;
        p += used - 1;
    }
    char why[120];
    if (i != s->draft_len || tb_spec_check(s, why, sizeof why))
        memset(s, 0, sizeof *s);
}

/* A stored request's canvases (migration 16) from columns c .. c + 4
 * (canvases, canvas_steps, canvas_committed, canvas_positions,
 * canvases_json: [[steps, committed, positions, ms since submit], ...])
 * on the pooled clock: the kept ones from the JSON, those past the cap
 * as the totals less the kept ones, committed at the last kept one's time
 * (the store keeps no time of their own). Commit times are clamped into
 * [submit, done] (the JSON keeps microseconds). Figures that do not parse
 * or are impossible are dropped (all 0), as the runner drops them. */
static void canvas_read(sqlite3_stmt *q, int c, int64_t submit, int64_t done, uint32_t n_out, uint32_t steps_done,
                        tb_canvas_counts *k)
{
    memset(k, 0, sizeof *k);
    if (sqlite3_column_type(q, c) == SQLITE_NULL || col_int(q, c, 0) <= 0)
        return;
    cJSON *a = cJSON_Parse((const char *)sqlite3_column_text(q, c + 4)), *e;
    int ok = cJSON_IsArray(a);
    tb_canvas_sum kept = {0};
    cJSON_ArrayForEach(e, a)
    {
        double v[4];
        for (int i = 0; i < 4; i++) {
            cJSON *x = cJSON_GetArrayItem(e, i);
            v[i] = cJSON_IsNumber(x) ? x->valuedouble : -1;
        }
        if (k->n == TB_CANVAS_MAX || v[0] < 0 || v[0] > UINT32_MAX || v[1] < 0 || v[1] > UINT32_MAX || v[2] < 0 ||
            v[2] > 1e18 || !(v[3] >= 0 && v[3] < 1e12)) {
            ok = 0;
            break;
        }
        int64_t t = submit + llround(v[3] * 1e6);
        tb_canvas_push(k, (uint32_t)v[0], (uint32_t)v[1], (uint64_t)v[2], t < submit ? submit : t > done ? done : t);
        kept.steps += (uint32_t)v[0], kept.committed += (uint32_t)v[1], kept.positions += (uint64_t)v[2];
    }
    cJSON_Delete(a);
    int64_t n = col_int(q, c, 0), steps = col_int(q, c + 1, 0), committed = col_int(q, c + 2, 0),
            positions = col_int(q, c + 3, 0);
    if (ok && n > k->n) { /* the ones past the cap, summed */
        if (k->n < TB_CANVAS_MAX || n - k->n > UINT32_MAX || steps < (int64_t)kept.steps ||
            committed < (int64_t)kept.committed || positions < (int64_t)kept.positions) {
            ok = 0;
        } else {
            k->n_past = (uint32_t)(n - k->n);
            k->past = (tb_canvas){.steps = (uint32_t)(steps - (int64_t)kept.steps),
                                  .committed = (uint32_t)(committed - (int64_t)kept.committed),
                                  .positions = (uint64_t)(positions - (int64_t)kept.positions),
                                  .t_done_ns = k->at[k->n - 1].t_done_ns};
        }
    } else if (ok && (n != k->n || steps != (int64_t)kept.steps || committed != (int64_t)kept.committed ||
                      positions != (int64_t)kept.positions)) {
        ok = 0; /* the totals and the kept ones disagree */
    }
    char why[120];
    if (!ok || tb_canvas_check(k, n_out, steps_done, submit, done, why, sizeof why))
        memset(k, 0, sizeof *k);
}

/* Pool repetition `rep` of the n shard cases into *p: the raw call that
 * the figures of tb_case_metrics() come from. 0 or -1. */
static int pool_call(joiner *j, const int64_t *cases, const int64_t *offsets, size_t n, int rep, pooled_call *p)
{
    int64_t *samples = tb_xcalloc(n, sizeof *samples), *t0 = tb_xcalloc(n, sizeof *t0);
    int rc = -1;
    memset(p, 0, sizeof *p);
    p->call.t_call_ns = INT64_MAX;
    p->call.prefill_ns = p->call.decode_ns = -1; /* no one call's phases */
    p->call.peak_device_bytes = p->call.energy_mj = -1;
    double busy = 0;
    for (size_t k = 0; k < n; k++) {
        char *sql = sqlite3_mprintf("SELECT id, warmup, start_ns, runner_ns, client_busy FROM sample WHERE case_id ="
                                    " %lld AND repetition = %d", (long long)cases[k], rep);
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
        p->call.is_warmup |= sqlite3_column_int(q, 1) != 0;
        t0[k] = sqlite3_column_int64(q, 2) + offsets[k]; /* realtime */
        if (t0[k] < p->call.t_call_ns)
            p->call.t_call_ns = t0[k];
        if (sqlite3_column_int64(q, 3) > p->call.runner_ns)
            p->call.runner_ns = sqlite3_column_int64(q, 3);
        /* stored in %; the busiest shard's client */
        if (sqlite3_column_type(q, 4) != SQLITE_NULL && sqlite3_column_double(q, 4) / 100.0 > busy)
            busy = sqlite3_column_double(q, 4) / 100.0;
        sqlite3_finalize(q);
    }
    p->call.client_busy = busy;
    for (size_t k = 0; k < n; k++) {
        char *sql = sqlite3_mprintf("SELECT status, error, submit_offset_ns, ttft_ns, e2e_ns, tpot_ns, tps,"
                                    " requested_tokens, output_tokens, recount_tokens, steps_done, answer_tokens,"
                                    " output_hash, emissions_json, prompt_idx, scored, output_text, prompt_hash,"
                                    " prompt_tokens, blocks_done, spec_verifications, spec_drafted, spec_accepted,"
                                    " spec_draft_len, spec_at, canvases, canvas_steps, canvas_committed, canvas_positions,"
                                    " canvases_json, output_ids FROM request WHERE sample_id = %lld ORDER BY idx",
                                    (long long)samples[k]);
        sqlite3_stmt *q = prep(j, sql);
        sqlite3_free(sql);
        if (!q)
            goto out;
        int step;
        while ((step = sqlite3_step(q)) == SQLITE_ROW) {
            uint32_t r = p->call.n_requests++;
            p->req = tb_xrealloc(p->req, (size_t)p->call.n_requests * sizeof *p->req);
            p->rm = tb_xrealloc(p->rm, (size_t)p->call.n_requests * sizeof *p->rm);
            p->canvas = tb_xrealloc(p->canvas, (size_t)p->call.n_requests * sizeof *p->canvas);
            p->canvas[r] = NULL;
            int64_t submit = t0[k] + sqlite3_column_int64(q, 2);
            tb_request_metrics *m = &p->rm[r];
            *m = (tb_request_metrics){
                .submit_ns = submit,
                .ttft_ns = col_int(q, 3, 0),
                .e2e_ns = col_int(q, 4, 0),
                .tpot_ns = sqlite3_column_type(q, 5) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 5),
                .tps = sqlite3_column_type(q, 6) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 6),
            };
            m->done_ns = submit + m->e2e_ns;
            const char *status = (const char *)sqlite3_column_text(q, 0);
            const char *error = (const char *)sqlite3_column_text(q, 1);
            const char *text = (const char *)sqlite3_column_text(q, 16);
            tb_raw_request *w = &p->req[r];
            *w = (tb_raw_request){
                .t_submit_ns = submit,
                .t_done_ns = m->done_ns,
                .status = status && strcmp(status, "ok") == 0 ? TB_OK : TB_ERR,
                .n_output_tokens = (uint32_t)sqlite3_column_int64(q, 8),
                .recount = (int32_t)col_int(q, 9, -1),
                /* NULL: text alone, or stored before migration 18 */
                .has_ids = sqlite3_column_type(q, 30) != SQLITE_NULL,
                .n_ids = (uint32_t)col_int(q, 30, 0),
                .steps_done = (uint32_t)col_int(q, 10, 0),
                .blocks_done = (uint32_t)col_int(q, 19, 0),
                .answer_tokens = (uint32_t)col_int(q, 11, TB_UNKNOWN_COUNT),
                .text_len = text ? (uint32_t)strlen(text) : 0,
                .output_hash = col_hash(q, 12),
                .prompt_hash = col_hash(q, 17),
                .prompt_idx = (int32_t)col_int(q, 14, -1),
                .scored = (uint32_t)sqlite3_column_int(q, 15),
                .prompt_tokens = (uint32_t)col_int(q, 18, 0),
                .max_tokens = (uint32_t)sqlite3_column_int64(q, 7),
            };
            snprintf(w->error, sizeof w->error, "%s", error ? error : "");
            spec_read(q, 20, &w->spec);
            tb_canvas_counts *cc = tb_xmalloc(sizeof *cc);
            canvas_read(q, 25, submit, m->done_ns, w->n_output_tokens, w->steps_done, cc);
            if (cc->n || cc->n_past) {
                p->canvas[r] = cc;
                w->has_canvas = 1;
            } else {
                free(cc);
            }
            if (text)
                tb_str_append(&p->texts, text);
            add_emissions(p, (const char *)sqlite3_column_text(q, 13), r, submit);
            if (m->done_ns > p->call.t_return_ns)
                p->call.t_return_ns = m->done_ns;
        }
        sqlite3_finalize(q);
        if (step != SQLITE_DONE) {
            fail_db(j, "reading a shard's requests");
            goto out;
        }
    }
    rc = 0;
out:
    free(samples);
    free(t0);
    return rc;
}

/* The joined case's samples and metric rows into rec: repetition r pools
 * repetition r of every shard, and tb_case_metrics() computes every
 * figure from the pooled calls as it does for one machine's. 0 or -1. */
static int pool_case(joiner *j, const int64_t *cases, const int64_t *offsets, size_t n,
                     const tb_case_metrics_opts *o, tb_case_record *rec)
{
    int reps = (int)q_int(j, sqlite3_mprintf("SELECT count(*) FROM sample WHERE case_id = %lld", (long long)cases[0]),
                          0);
    pooled_call *pc = tb_xcalloc(reps > 0 ? (size_t)reps : 1, sizeof *pc);
    tb_call_view *v = tb_xcalloc(reps > 0 ? (size_t)reps : 1, sizeof *v);
    int rc = 0;
    for (int r = 0; rc == 0 && r < reps; r++) {
        rc = pool_call(j, cases, offsets, n, r, &pc[r]);
        v[r] = (tb_call_view){.call = pc[r].call, .req = pc[r].req, .em = pc[r].em,
                              .texts = pc[r].texts.s ? pc[r].texts.s : "", .measured = pc[r].rm,
                              .canvas = pc[r].canvas};
    }
    if (rc == 0)
        tb_case_metrics(v, (size_t)reps, o, rec);
    for (int r = 0; r < reps; r++)
        pooled_call_free(&pc[r]);
    free(pc);
    free(v);
    return rc;
}

/* ------------------------------------------------------ one run */

typedef struct shard_row {
    int64_t id;
    char *uuid;
    int64_t clock_offset;
    char *started; /* session.started_at */
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

/* ------------------------------------------------------ the windows */

/* One shard's window of one measured call: its first submit and last
 * completion on the wall clock. */
typedef struct shard_window {
    int64_t ordinal, rep, start, end;
} shard_window;

/* How far apart the shards' windows of each joined measured call were
 * (from the stored submit and completion times): lag[k] is the most shard
 * k's window began after the earliest shard's (ns), lag_frac[k] the most
 * that was of the joined window; worst_overlap the smallest share of a
 * joined window that every shard's window covered (0: some never
 * overlapped), in case worst_ordinal, repetition worst_rep. */
typedef struct run_windows {
    int64_t *lag;
    double *lag_frac;
    double worst_overlap;
    int64_t worst_ordinal, worst_rep, calls;
} run_windows;

static int measure_windows(joiner *j, const shard_row *s, size_t n, run_windows *w)
{
    shard_window **win = tb_xcalloc(n, sizeof *win);
    size_t *n_win = tb_xcalloc(n, sizeof *n_win);
    w->lag = tb_xcalloc(n, sizeof *w->lag);
    w->lag_frac = tb_xcalloc(n, sizeof *w->lag_frac);
    w->worst_overlap = 1;
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        char *sql = sqlite3_mprintf("SELECT c.ordinal, sa.repetition, sa.start_ns + min(r.submit_offset_ns),"
                                    " sa.start_ns + max(r.submit_offset_ns + coalesce(r.e2e_ns, 0)) FROM sample sa"
                                    " JOIN bench_case c ON c.id = sa.case_id JOIN request r ON r.sample_id = sa.id"
                                    " WHERE c.session_id = %lld AND sa.warmup = 0 AND sa.start_ns IS NOT NULL"
                                    " GROUP BY sa.id ORDER BY c.ordinal, sa.repetition", (long long)s[k].id);
        sqlite3_stmt *q = prep(j, sql);
        sqlite3_free(sql);
        int step = SQLITE_ERROR;
        while (q && (step = sqlite3_step(q)) == SQLITE_ROW) {
            win[k] = tb_xrealloc(win[k], (n_win[k] + 1) * sizeof **win);
            win[k][n_win[k]++] = (shard_window){
                .ordinal = sqlite3_column_int64(q, 0),
                .rep = sqlite3_column_int64(q, 1),
                .start = sqlite3_column_int64(q, 2) + s[k].clock_offset,
                .end = sqlite3_column_int64(q, 3) + s[k].clock_offset,
            };
        }
        sqlite3_finalize(q);
        if (!q || step != SQLITE_DONE)
            rc = fail_db(j, "reading the shards' windows");
    }
    /* the calls every shard ran, matched by case and repetition */
    const shard_window **at = tb_xcalloc(n, sizeof *at);
    for (size_t i = 0; rc == 0 && i < n_win[0]; i++) {
        at[0] = &win[0][i];
        size_t k = 1;
        for (; k < n; k++) {
            at[k] = NULL;
            for (size_t m = 0; m < n_win[k] && !at[k]; m++)
                if (win[k][m].ordinal == at[0]->ordinal && win[k][m].rep == at[0]->rep)
                    at[k] = &win[k][m];
            if (!at[k])
                break;
        }
        if (k < n)
            continue;
        int64_t first = INT64_MAX, last = INT64_MIN, last_start = INT64_MIN, first_end = INT64_MAX;
        for (k = 0; k < n; k++) {
            first = at[k]->start < first ? at[k]->start : first;
            last = at[k]->end > last ? at[k]->end : last;
            last_start = at[k]->start > last_start ? at[k]->start : last_start;
            first_end = at[k]->end < first_end ? at[k]->end : first_end;
        }
        double wall = last > first ? (double)(last - first) : 1;
        double overlap = first_end > last_start ? (double)(first_end - last_start) / wall : 0;
        w->calls++;
        if (overlap < w->worst_overlap) {
            w->worst_overlap = overlap;
            w->worst_ordinal = at[0]->ordinal;
            w->worst_rep = at[0]->rep;
        }
        for (k = 0; k < n; k++) {
            int64_t lag = at[k]->start - first;
            if (lag > w->lag[k])
                w->lag[k] = lag;
            if ((double)lag / wall > w->lag_frac[k])
                w->lag_frac[k] = (double)lag / wall;
        }
    }
    free(at);
    for (size_t k = 0; k < n; k++)
        free(win[k]);
    free(win);
    free(n_win);
    return rc;
}

static void run_windows_free(run_windows *w)
{
    free(w->lag);
    free(w->lag_frac);
    memset(w, 0, sizeof *w);
}

/* The warning of a run whose shards' windows did not coincide (a joined
 * window less than TB_SHARD_MIN_OVERLAP covered by every shard), naming
 * each shard that lagged by TB_SHARD_MAX_LAG of a joined window or more,
 * with how late it started; NULL when they were simultaneous enough. */
#define TB_SHARD_MIN_OVERLAP 0.9
#define TB_SHARD_MAX_LAG 0.1
static char *windows_warning(joiner *j, const shard_row *s, size_t n, const run_windows *w, const char *what)
{
    if (!w->calls || w->worst_overlap >= TB_SHARD_MIN_OVERLAP)
        return NULL;
    tb_str b = {0};
    tb_str_appendf(&b, "%s: the shards' measured calls were not simultaneous (case #%lld, repetition %lld: every "
                   "shard's window covered %.0f%% of the joined window):", what, (long long)w->worst_ordinal,
                   (long long)w->worst_rep, 100 * w->worst_overlap);
    for (size_t k = 0; k < n; k++) {
        if (w->lag_frac[k] < TB_SHARD_MAX_LAG)
            continue;
        int64_t late = q_int(j, sqlite3_mprintf("SELECT start_late_ns FROM session WHERE id = %lld",
                                                (long long)s[k].id), -1);
        tb_str_appendf(&b, " shard %zu began up to %.1f ms (%.0f%% of a joined window) after the first shard's "
                       "window (it started %.1f ms after --start-at);", k, (double)w->lag[k] * 1e-6,
                       100 * w->lag_frac[k], late >= 0 ? (double)late * 1e-6 : NAN);
    }
    tb_str_appendf(&b, " the joined aggregate, request rate and sent rate are of a load never sent at once (below "
                   "the suite's), its latencies of a lighter one (docs/METRICS.md, \"Sharded runs\")");
    return tb_str_take(&b);
}

/* The joined session's own rows: the session (shard 0's, completed as
 * its shards are, pooling n shards, on the realtime clock), its shard
 * rows and its backends (by label). Its id, or -1. */
static int64_t begin_session(joiner *j, const shard_row *s, size_t n, const char *uuid, const run_windows *w)
{
    int64_t *ids = tb_xcalloc(n, sizeof *ids);
    for (size_t k = 0; k < n; k++)
        ids[k] = s[k].id;
    char *list = id_list(ids, n);
    free(ids);
    override sov[] = {
        {"uuid", sqlite3_mprintf("%Q", uuid)},
        {"command_line", sqlite3_mprintf("%Q", "tokbench db merge: the shards of one run joined")},
        {"started_at", sqlite3_mprintf("(SELECT min(started_at) FROM session WHERE id IN (%s))", list)},
        {"finished_at", sqlite3_mprintf("(SELECT max(finished_at) FROM session WHERE id IN (%s))", list)},
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
    /* one shard row each; WITHOUT ROWID: no id to return */
    for (size_t k = 0; session >= 0 && k < n; k++)
        if (insert_selected(j, "shard",
                            sqlite3_mprintf("SELECT %lld AS session_id, s.shard_index, s.uuid AS source_uuid,"
                                            " m.hostname, s.seed, s.clock_offset_ns, s.clock_offset_ns - %lld AS"
                                            " offset_to_first_ns, s.start_late_ns, %lld AS window_lag_ns FROM"
                                            " session s JOIN machine m ON m.id = s.machine_id WHERE s.id = %lld",
                                            (long long)session, (long long)s[0].clock_offset,
                                            (long long)w->lag[k], (long long)s[k].id)) < 0)
            session = -1;
    if (session >= 0) {
        char *sql = sqlite3_mprintf("SELECT id FROM backend WHERE session_id = %lld ORDER BY id", (long long)s[0].id);
        sqlite3_stmt *qb = prep(j, sql);
        sqlite3_free(sql);
        if (!qb)
            session = -1;
        while (qb && session >= 0 && sqlite3_step(qb) == SQLITE_ROW) {
            override ov[] = {{"session_id", sqlite3_mprintf("%lld", (long long)session)}};
            if (copy_row(j, "backend", sqlite3_column_int64(qb, 0), ov, 1) < 0)
                session = -1;
        }
        sqlite3_finalize(qb);
    }
    free(list);
    return session;
}

/* Case #ordinal of the joined session, as the runner hands a finished
 * case to the store: shard 0's dimensions with the shards' concurrency
 * and request rate summed, their times spanned, and (when every shard's
 * case ran) the pooled samples and metrics. Written by tb_store_case().
 * 0 or -1. */
static int join_case(joiner *j, tb_store *st, const shard_row *s, size_t n, int64_t session, int64_t ordinal,
                     const tb_case_metrics_opts *o)
{
    int64_t *cases = tb_xcalloc(n, sizeof *cases);
    int64_t *offsets = tb_xcalloc(n, sizeof *offsets);
    tb_str errors = {0};
    int rc = -1;
    for (size_t k = 0; k < n; k++) {
        offsets[k] = s[k].clock_offset;
        char *sql = sqlite3_mprintf("SELECT id, status, coalesce(error, '') FROM bench_case WHERE session_id = %lld"
                                    " AND ordinal = %lld", (long long)s[k].id, (long long)ordinal);
        sqlite3_stmt *q = prep(j, sql);
        sqlite3_free(sql);
        if (q && sqlite3_step(q) == SQLITE_ROW) {
            cases[k] = sqlite3_column_int64(q, 0);
            if (strcmp((const char *)sqlite3_column_text(q, 1), "ok") != 0)
                tb_str_appendf(&errors, "%sshard %zu %s: %s", errors.len ? "; " : "", k,
                               (const char *)sqlite3_column_text(q, 1), (const char *)sqlite3_column_text(q, 2));
        }
        sqlite3_finalize(q);
        if (!cases[k]) {
            if (!j->err)
                j->err = tb_xasprintf("shard %zu has no case #%lld", k, (long long)ordinal);
            goto out;
        }
    }
    char *clist = id_list(cases, n);
    char *sql = sqlite3_mprintf(
        "SELECT c.prompt_tokens, c.max_new_tokens, c.batch, c.steps, c.block_length, c.options_json, c.status,"
        " c.error, (SELECT id FROM backend WHERE session_id = %lld AND label = b.label),"
        " (SELECT sum(concurrency) FROM bench_case WHERE id IN (%s)),"
        " (SELECT sum(request_rate) FROM bench_case WHERE id IN (%s)),"
        " (SELECT min(started_at) FROM bench_case WHERE id IN (%s)),"
        " (SELECT max(finished_at) FROM bench_case WHERE id IN (%s)),"
        " (SELECT max(case_wall_ns) FROM bench_case WHERE id IN (%s)),"
        " (SELECT max(host_peak_rss_bytes) FROM bench_case WHERE id IN (%s))"
        " FROM bench_case c JOIN backend b ON b.id = c.backend_id WHERE c.id = %lld",
        (long long)session, clist, clist, clist, clist, clist, clist, (long long)cases[0]);
    free(clist);
    sqlite3_stmt *q = prep(j, sql);
    sqlite3_free(sql);
    if (!q)
        goto out;
    if (sqlite3_step(q) != SQLITE_ROW) {
        fail_db(j, "reading shard 0's case");
        sqlite3_finalize(q);
        goto out;
    }
    char *swept = tb_xstrdup((const char *)sqlite3_column_text(q, 5));
    char *status = tb_xstrdup((const char *)sqlite3_column_text(q, 6));
    const char *e = (const char *)sqlite3_column_text(q, 7);
    char *error = errors.len ? tb_xstrdup(errors.s) : e ? tb_xstrdup(e) : NULL;
    const char *t = (const char *)sqlite3_column_text(q, 11);
    char *started = t ? tb_xstrdup(t) : NULL;
    t = (const char *)sqlite3_column_text(q, 12);
    char *finished = t ? tb_xstrdup(t) : NULL;
    tb_case c = {
        .ordinal = (size_t)ordinal,
        .prompt_tokens = (uint32_t)sqlite3_column_int64(q, 0),
        .max_new_tokens = (uint32_t)sqlite3_column_int64(q, 1),
        .batch = (uint32_t)sqlite3_column_int64(q, 2),
        .steps = (uint32_t)col_int(q, 3, 0),
        .block_length = (uint32_t)col_int(q, 4, 0),
        .concurrency = (uint32_t)col_int(q, 9, 0),
        .request_rate = sqlite3_column_type(q, 10) == SQLITE_NULL ? 0 : sqlite3_column_double(q, 10),
        .swept_json = swept,
    };
    tb_case_record rec = {
        .session_id = session,
        .backend_id = col_int(q, 8, 0),
        .c = &c,
        .status = errors.len ? "failed" : status,
        .error = error,
        .started_at = started,
        .finished_at = finished,
        .case_wall_ns = col_int(q, 13, -1),
        .host_peak_rss = col_int(q, 14, -1),
    };
    sqlite3_finalize(q);
    /* a case failed on any shard is failed here, with each shard's reason */
    tb_case_metrics_opts oc = *o; /* the shards' rates summed: the load they sent together */
    oc.request_rate = c.request_rate;
    if (errors.len || pool_case(j, cases, offsets, n, &oc, &rec) == 0) {
        char *why = NULL;
        if (tb_store_case(st, &rec, &why) >= 0)
            rc = 0;
        else if (!j->err)
            j->err = why;
        else
            free(why);
    }
    tb_case_record_free(&rec);
    free(swept);
    free(status);
    free(error);
    free(started);
    free(finished);
out:
    free(cases);
    free(offsets);
    tb_str_free(&errors);
    return rc;
}

/* Join one run's n shards into a new session of the given uuid: its own
 * rows (begin_session), then each case through the store as the runner
 * stores one. In the caller's transaction: a failure is rolled back. */
static int join_run(joiner *j, tb_store *st, const shard_row *s, size_t n, const char *uuid, const run_windows *w)
{
    int64_t session = begin_session(j, s, n, uuid, w);
    if (session < 0)
        return -1;
    /* what tb_case_metrics needs of the run: the goodput limits the shards
     * ran with (the resolved configuration) and the seed of its CIs */
    tb_case_metrics_opts o = {
        /* a stored request's emissions are its timings: a backend that
         * did not stream stored none */
        .capabilities = TB_CAP_STREAMING,
        .seed = (uint64_t)q_int(j, sqlite3_mprintf("SELECT seed FROM session WHERE id = %lld", (long long)s[0].id), 0),
        .keep_texts = 1,
    };
    char *sql = sqlite3_mprintf("SELECT config_json FROM session WHERE id = %lld", (long long)s[0].id);
    sqlite3_stmt *q = prep(j, sql);
    sqlite3_free(sql);
    if (q && sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)) {
        cJSON *c = cJSON_Parse((const char *)sqlite3_column_text(q, 0));
        cJSON *su = cJSON_GetObjectItemCaseSensitive(c, "suite");
        cJSON *a = cJSON_GetObjectItemCaseSensitive(su, "goodput_ttft_ms");
        cJSON *b = cJSON_GetObjectItemCaseSensitive(su, "goodput_tpot_ms");
        o.goodput_ttft_ms = cJSON_IsNumber(a) ? a->valuedouble : 0;
        o.goodput_tpot_ms = cJSON_IsNumber(b) ? b->valuedouble : 0;
        cJSON_Delete(c);
    }
    sqlite3_finalize(q);
    /* the cases by ordinal, read whole before the store writes */
    int64_t *ordinals = NULL;
    size_t n_cases = 0;
    sql = sqlite3_mprintf("SELECT ordinal FROM bench_case WHERE session_id = %lld ORDER BY ordinal",
                          (long long)s[0].id);
    q = prep(j, sql);
    sqlite3_free(sql);
    int step = SQLITE_ERROR;
    while (q && (step = sqlite3_step(q)) == SQLITE_ROW) {
        ordinals = tb_xrealloc(ordinals, (n_cases + 1) * sizeof *ordinals);
        ordinals[n_cases++] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    int rc = q && step == SQLITE_DONE ? 0 : fail_db(j, "reading the cases of shard 0");
    for (size_t i = 0; rc == 0 && i < n_cases; i++)
        rc = join_case(j, st, s, n, session, ordinals[i], &o);
    free(ordinals);
    return rc;
}

/* A run of shard sessions: the sessions (any status) of one suite text,
 * start time and shard count. */
typedef struct run_group {
    char *sha, *start_at, *present;
    int64_t n;
    int64_t outside; /* shards whose index is not in 0..n-1 */
} run_group;

/* The shards of one run to join: for each index 0..n-1 its newest
 * completed session (by start, then id) into s[k]; the older completed
 * copies are left stored, not joined, and *notes says which copy was
 * taken. 0 when every index has one, else 1 with *why (malloc'd): each
 * index with no completed session, named interrupted (or failed, or
 * still running) when a session of it is stored, else missing. -1 on a
 * database error. */
static int pick_shards(joiner *j, const run_group *rg, shard_row *s, char **why, tb_str *notes, const char *what)
{
    int64_t n = rg->n;
    int64_t *copies = tb_xcalloc((size_t)n, sizeof *copies);
    char **other = tb_xcalloc((size_t)n, sizeof *other); /* newest non-completed: "interrupted (session U)" */
    char *sql = sqlite3_mprintf("SELECT shard_index, status, id, uuid, coalesce(clock_offset_ns, 0), started_at FROM"
                                " session WHERE suite_sha256 = %Q AND start_at = %Q AND shard_count = %lld AND"
                                " shard_index IS NOT NULL ORDER BY shard_index, started_at DESC, id DESC",
                                rg->sha, rg->start_at, (long long)n);
    sqlite3_stmt *q = prep(j, sql);
    sqlite3_free(sql);
    int step = SQLITE_ERROR;
    while (q && (step = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t k = sqlite3_column_int64(q, 0);
        const char *status = (const char *)sqlite3_column_text(q, 1);
        const char *uuid = (const char *)sqlite3_column_text(q, 3);
        if (k < 0 || k >= n)
            continue;
        if (strcmp(status, "completed") != 0) {
            if (!other[k])
                other[k] = tb_xasprintf("shard %lld %s (session %s)", (long long)k, status, uuid ? uuid : "?");
            continue;
        }
        if (copies[k]++ == 0) {
            s[k].id = sqlite3_column_int64(q, 2);
            s[k].uuid = tb_xstrdup(uuid ? uuid : "");
            s[k].clock_offset = sqlite3_column_int64(q, 4);
            s[k].started = tb_xstrdup(sqlite3_column_text(q, 5) ? (const char *)sqlite3_column_text(q, 5) : "?");
        }
    }
    sqlite3_finalize(q);
    int rc = 0;
    if (!q || step != SQLITE_DONE) {
        rc = fail_db(j, "reading the shard sessions");
    } else {
        tb_str w = {0}, missing = {0}, done = {0};
        for (int64_t k = 0; k < n; k++) {
            if (copies[k])
                tb_str_appendf(&done, "%s%lld", done.len ? "," : "", (long long)k);
            else if (other[k])
                tb_str_appendf(&w, "%s%s", w.len ? "; " : "", other[k]);
            else
                tb_str_appendf(&missing, "%s%lld", missing.len ? "," : "", (long long)k);
        }
        if (w.len || missing.len) {
            if (missing.len)
                tb_str_appendf(&w, "%sshards missing: %s", w.len ? "; " : "", missing.s);
            tb_str_appendf(&w, " (shards completed: %s)", done.len ? done.s : "none");
            *why = tb_str_take(&w);
            rc = 1;
        } else {
            for (int64_t k = 0; k < n; k++)
                if (copies[k] > 1)
                    tb_str_appendf(notes, "%s%s: shard %lld: took its newest completed session, %s (started %s); "
                                   "%lld older cop%s stored, not joined", notes->len ? "\n" : "", what,
                                   (long long)k, s[k].uuid, s[k].started, (long long)(copies[k] - 1),
                                   copies[k] == 2 ? "y" : "ies");
        }
        tb_str_free(&w);
        tb_str_free(&missing);
        tb_str_free(&done);
    }
    for (int64_t k = 0; k < n; k++)
        free(other[k]);
    free(other);
    free(copies);
    return rc;
}

int tb_shard_join(tb_store *st, tb_shard_join_result *res, char **err)
{
    memset(res, 0, sizeof *res);
    joiner j = {.db = tb_store_db(st)};
    tb_str waiting = {0}, joined = {0}, notes = {0}, warnings = {0};
    /* the runs, read whole before anything is written */
    run_group *runs = NULL;
    size_t n_runs = 0;
    sqlite3_stmt *g = prep(&j, "SELECT suite_sha256, start_at, shard_count, group_concat(DISTINCT shard_index),"
                               " sum(shard_index < 0 OR shard_index >= shard_count) FROM session WHERE shard_index"
                               " IS NOT NULL AND start_at IS NOT NULL GROUP BY suite_sha256, start_at, shard_count"
                               " ORDER BY start_at");
    int rc = g ? 0 : -1, step = SQLITE_DONE;
    while (g && (step = sqlite3_step(g)) == SQLITE_ROW) {
        runs = tb_xrealloc(runs, (n_runs + 1) * sizeof *runs);
        const char *present = (const char *)sqlite3_column_text(g, 3);
        runs[n_runs++] = (run_group){
            .sha = tb_xstrdup((const char *)sqlite3_column_text(g, 0)),
            .start_at = tb_xstrdup((const char *)sqlite3_column_text(g, 1)),
            .present = tb_xstrdup(present ? present : ""),
            .n = sqlite3_column_int64(g, 2),
            .outside = sqlite3_column_int64(g, 4),
        };
    }
    sqlite3_finalize(g);
    if (g && step != SQLITE_DONE)
        rc = fail_db(&j, "reading the shard sessions");
    for (size_t i = 0; rc == 0 && i < n_runs; i++) {
        const run_group *rg = &runs[i];
        int64_t n = rg->n;
        char *what = tb_xasprintf("the run of %.12s starting at %s (%lld shards)", rg->sha, rg->start_at,
                                  (long long)n);
        /* the stored indexes are checked, not trusted: a run is n >= 2
         * shards, indexes 0..n-1 (a database may hold what no run wrote:
         * merged in, or edited) */
        if (n < 2 || rg->outside) {
            tb_str_appendf(&waiting, "%s%s: %s (shards present: %s)", waiting.len ? "; " : "", what,
                           n < 2 ? "not a sharded run (a run has 2 shards or more)"
                                 : "a shard index outside 0..N-1", rg->present);
            free(what);
            continue;
        }
        shard_row *s = tb_xcalloc((size_t)n, sizeof *s);
        tb_str took = {0};
        char *not_yet = NULL;
        int picked = pick_shards(&j, rg, s, &not_yet, &took, what);
        if (picked != 0) {
            if (picked < 0)
                rc = -1;
            else
                tb_str_appendf(&waiting, "%s%s: %s", waiting.len ? "; " : "", what, not_yet);
            free(not_yet);
            tb_str_free(&took);
            free(what);
            goto next;
        }
        char uuid[40];
        joined_uuid(s, (size_t)n, uuid);
        /* each run all or nothing: the joined session with its shard,
         * backend and case rows, or none of them (a join that fails or
         * is cut off leaves nothing to see or to replace) */
        tb_store_txn t;
        char *why = NULL;
        if (tb_store_txn_begin(st, &t, &why) != 0) {
            j.err = tb_xasprintf("joining %s: %s", what, why);
            free(why);
            free(what);
            tb_str_free(&took);
            rc = -1;
            goto next;
        }
        /* joined before: a session of this uuid (a join is written
         * completed, in one transaction, or not at all) */
        int64_t known = q_int(&j, sqlite3_mprintf("SELECT count(*) FROM session WHERE uuid = %Q AND status ="
                                                  " 'completed'", uuid), 0);
        why = known ? NULL : mismatch(&j, s, (size_t)n);
        int ok = 0;
        run_windows win = {0};
        if (known) {
            res->known++;
        } else if (why) {
            tb_str_appendf(&waiting, "%s%s: %s", waiting.len ? "; " : "", what, why);
        } else if (measure_windows(&j, s, (size_t)n, &win) != 0 || join_run(&j, st, s, (size_t)n, uuid, &win) != 0) {
            char *e = tb_xasprintf("joining %s: %s", what, j.err ? j.err : "failed");
            free(j.err);
            j.err = e;
            rc = -1;
        } else {
            ok = 1;
        }
        free(why);
        why = NULL;
        if (tb_store_txn_end(st, &t, ok, ok ? &why : NULL) == 0) {
            res->joined++;
            tb_str_appendf(&joined, "%s%s", joined.len ? " " : "", uuid);
            if (took.len)
                tb_str_appendf(&notes, "%s%s", notes.len ? "\n" : "", took.s);
            char *late = windows_warning(&j, s, (size_t)n, &win, what);
            if (late)
                tb_str_appendf(&warnings, "%s%s", warnings.len ? "\n" : "", late);
            free(late);
        } else if (ok) {
            j.err = tb_xasprintf("joining %s: %s", what, why);
            free(why);
            rc = -1;
        }
        run_windows_free(&win);
        tb_str_free(&took);
        free(what);
    next:
        for (int64_t k = 0; k < n; k++) {
            free(s[k].uuid);
            free(s[k].started);
        }
        free(s);
    }
    for (size_t i = 0; i < n_runs; i++) {
        free(runs[i].sha);
        free(runs[i].start_at);
        free(runs[i].present);
    }
    free(runs);
    res->waiting = waiting.len ? tb_str_take(&waiting) : NULL;
    res->joined_uuids = joined.len ? tb_str_take(&joined) : NULL;
    res->notes = notes.len ? tb_str_take(&notes) : NULL;
    res->warnings = warnings.len ? tb_str_take(&warnings) : NULL;
    tb_str_free(&warnings);
    tb_str_free(&waiting);
    tb_str_free(&joined);
    tb_str_free(&notes);
    if (rc != 0) {
        *err = j.err ? j.err : tb_xstrdup("joining shards failed");
        return -1;
    }
    free(j.err);
    return 0;
}

void tb_shard_join_result_free(tb_shard_join_result *res)
{
    free(res->waiting);
    free(res->joined_uuids);
    free(res->notes);
    free(res->warnings);
    res->waiting = res->joined_uuids = res->notes = res->warnings = NULL;
}
