/* text.c — terminal reports: the session list and one session's results
 * (every case in detail, then the backends side by side). Everything is
 * read back from the database, so `run` and `show` print the same thing. */
#define _GNU_SOURCE
#include "text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "rsession.h"
#include "text_table.h"
#include "util.h"
#include "warnings.h"

static const char *col_text(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? (const char *)t : "";
}

static double col_num(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

int64_t tb_report_resolve_session(sqlite3 *db, const char *spec, char **err)
{
    *err = NULL;
    if (!spec || strcmp(spec, "last") == 0 || strcmp(spec, "--last") == 0) {
        sqlite3_stmt *q;
        int64_t id = -1;
        /* The session started last (the first of `sessions`): ids are
         * not in time order once a merge appended older sessions. */
        if (sqlite3_prepare_v2(db, "SELECT id FROM session ORDER BY started_at DESC, id DESC LIMIT 1", -1, &q,
                               NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
            id = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        if (id < 0)
            *err = tb_xstrdup("the database has no sessions yet (run a suite first: tokbench run SUITE)");
        return id;
    }
    char *end;
    long long v = strtoll(spec, &end, 10);
    sqlite3_stmt *q;
    int64_t id = -1;
    /* A number is an id when there is such a session; otherwise the
     * argument may be a uuid prefix of at least 8 characters (shorter
     * ones, "99" say, would match a random uuid one time in 256 and turn
     * a wrong id into somebody else's session). */
    if (sqlite3_prepare_v2(db,
                           "SELECT id FROM session WHERE id = ?1 UNION ALL"
                           " SELECT id FROM session WHERE uuid LIKE ?2 || '%' AND NOT EXISTS"
                           " (SELECT 1 FROM session WHERE id = ?1) ORDER BY id LIMIT 2",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, (*end == '\0' && end != spec) ? v : -1);
        /* too short for a uuid prefix: bind what matches no uuid */
        sqlite3_bind_text(q, 2, strlen(spec) >= 8 ? spec : "-", -1, SQLITE_TRANSIENT);
        int n = 0;
        while (sqlite3_step(q) == SQLITE_ROW) {
            id = sqlite3_column_int64(q, 0);
            n++;
        }
        if (n > 1) {
            *err = tb_xasprintf("session \"%s\" is ambiguous (give more of the uuid)", spec);
            id = -1;
        }
    }
    sqlite3_finalize(q);
    if (id < 0 && !*err)
        *err = tb_xasprintf("no session \"%s\" (see tokbench sessions)", spec);
    return id;
}

int tb_report_sessions(sqlite3 *db, int limit, FILE *out)
{
    sqlite3_stmt *q;
    const char *sql =
        "SELECT s.id, s.started_at, s.suite_name, s.status,"
        " (SELECT count(*) FROM bench_case c WHERE c.session_id = s.id AND c.status = 'ok'),"
        " (SELECT count(*) FROM bench_case c WHERE c.session_id = s.id AND c.status = 'failed'),"
        " (SELECT count(*) FROM bench_case c WHERE c.session_id = s.id AND c.status = 'skipped'),"
        " m.hostname, coalesce(m.gpu_name, 'no GPU'), s.git_commit"
        " FROM session s JOIN machine m ON m.id = s.machine_id ORDER BY s.started_at DESC, s.id DESC LIMIT ?";
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int(q, 1, limit > 0 ? limit : -1);
    static const char *const head[] = {"session", "started (UTC)", "suite", "status", "ok", "failed", "skipped",
                                       "host", "gpu", "commit"};
    tb_table *t = tb_table_new(10);
    tb_table_header(t, head);
    int rows = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        rows++;
        for (int i = 0; i < 10; i++)
            tb_table_cell(t, col_text(q, i));
    }
    sqlite3_finalize(q);
    if (rows)
        tb_table_print(t, out);
    else
        fprintf(out, "no sessions yet\n");
    tb_table_free(t);
    return 0;
}

static void print_header(sqlite3 *db, int64_t session, FILE *out)
{
    sqlite3_stmt *q;
    const char *sql =
        "SELECT s.id, s.uuid, s.suite_name, s.suite_path, s.started_at, coalesce(s.finished_at, ''), s.status,"
        " s.tokbench_version, s.git_commit, s.warmup, s.repeat, s.seed, m.hostname, m.cpu_model, m.cpu_cores,"
        " m.ram_bytes, m.os, m.kernel, m.gpu_count, coalesce(m.gpu_name, ''), coalesce(m.gpu_driver, ''),"
        " coalesce(m.cuda_driver_version, ''), s.cuda_build_version, m.nvml_status, substr(s.suite_sha256, 1, 12),"
        " coalesce(substr(s.config_sha256, 1, 12), '')"
        " FROM session s JOIN machine m ON m.id = s.machine_id WHERE s.id = ?";
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_int64(q, 1, session);
    if (sqlite3_step(q) == SQLITE_ROW) {
        fprintf(out, "session %s  %s  suite %s (%s, sha256 %s…%s%s%s)\n", col_text(q, 0), col_text(q, 1),
                col_text(q, 2), col_text(q, 3), col_text(q, 24), *col_text(q, 25) ? ", configuration sha256 " : "",
                col_text(q, 25), *col_text(q, 25) ? "…" : "");
        fprintf(out, "  %s .. %s  status %s  tokbench %s (%s)  warm-up %s, %s repetitions, seed %s\n",
                col_text(q, 4), col_text(q, 5), col_text(q, 6), col_text(q, 7), col_text(q, 8), col_text(q, 9),
                col_text(q, 10), col_text(q, 11));
        fprintf(out, "  machine %s: %s (%s CPUs), %.1f GiB RAM, %s, kernel %s\n", col_text(q, 12), col_text(q, 13),
                col_text(q, 14), sqlite3_column_double(q, 15) / (1u << 30), col_text(q, 16), col_text(q, 17));
        if (sqlite3_column_int(q, 18) > 0)
            fprintf(out, "  GPU %d x %s, driver %s, CUDA driver %s, CUDA build %s\n", sqlite3_column_int(q, 18),
                    col_text(q, 19), col_text(q, 20), col_text(q, 21), col_text(q, 22));
        else
            fprintf(out, "  GPU none (%s); CUDA build %s\n", col_text(q, 23), col_text(q, 22));
    }
    sqlite3_finalize(q);

    if (sqlite3_prepare_v2(db,
                           "SELECT label, plugin, plugin_version, model, capabilities,"
                           " coalesce(json_extract(info_json, '$.dtype'), '?'),"
                           " coalesce(json_extract(info_json, '$.device'), '?'),"
                           " json_extract(info_json, '$.random_weights')"
                           " FROM backend WHERE session_id = ? ORDER BY id",
                           -1, &q, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_int64(q, 1, session);
    while (sqlite3_step(q) == SQLITE_ROW)
        fprintf(out, "  backend %s: %s %s, model \"%s\", dtype %s, device %s%s; capabilities %s\n", col_text(q, 0),
                col_text(q, 1), col_text(q, 2), col_text(q, 3), col_text(q, 5), col_text(q, 6),
                sqlite3_column_int(q, 7) == 1 ? ", RANDOM WEIGHTS (speed only, no quality)" : "", col_text(q, 4));
    sqlite3_finalize(q);
}

/* `text` in lines of at most `width` characters (0: one line), broken
 * at spaces. */
static void print_wrapped(FILE *out, const char *text, size_t width)
{
    while (*text) {
        size_t n = strlen(text);
        if (width && n > width) {
            size_t cut = width;
            while (cut > 0 && text[cut] != ' ')
                cut--;
            n = cut ? cut : width;
        }
        fprintf(out, "%.*s\n", (int)n, text);
        text += n;
        while (*text == ' ')
            text++;
    }
}

/* Which optional dimension columns carry a value in this session. */
static int column_used(sqlite3 *db, int64_t session, const char *expr)
{
    char *sql = tb_xasprintf("SELECT count(*) FROM summary WHERE session = ? AND %s", expr);
    sqlite3_stmt *q;
    int n = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, session);
        if (sqlite3_step(q) == SQLITE_ROW)
            n = sqlite3_column_int(q, 0);
    }
    sqlite3_finalize(q);
    free(sql);
    return n > 0;
}

/* The dimensions of a summary row as one key (for the side-by-side). */
/* The request rate (column 28) as shown: "5", "0.5"; "" when none. */
static const char *rate_text(sqlite3_stmt *q, char buf[32])
{
    buf[0] = '\0';
    if (sqlite3_column_type(q, 28) != SQLITE_NULL)
        snprintf(buf, 32, "%g", sqlite3_column_double(q, 28));
    return buf;
}

static char *dims_key(sqlite3_stmt *q, int use_conc, int use_steps, int use_block, int use_rate, int use_opts)
{
    tb_str b = {0};
    char rate[32];
    tb_str_appendf(&b, "%s\t%s\t%s", col_text(q, 1), col_text(q, 2), col_text(q, 3));
    if (use_conc)
        tb_str_appendf(&b, "\t%s", col_text(q, 4));
    if (use_steps)
        tb_str_appendf(&b, "\t%s", col_text(q, 5));
    if (use_block)
        tb_str_appendf(&b, "\t%s", col_text(q, 6));
    if (use_rate)
        tb_str_appendf(&b, "\t%s", rate_text(q, rate));
    if (use_opts)
        tb_str_appendf(&b, "\t%s", col_text(q, 7));
    return tb_str_take(&b);
}

/* Tab-separated keys: does `general` equal `specific` wherever `general`
 * has a value, with at least one field empty in `general` only? */
static int key_generalizes(const char *general, const char *specific)
{
    int wider = 0;
    for (;;) {
        size_t lg = strcspn(general, "\t"), ls = strcspn(specific, "\t");
        if (lg == 0 && ls > 0)
            wider = 1;
        else if (lg != ls || strncmp(general, specific, lg) != 0)
            return 0;
        general += lg;
        specific += ls;
        if (!*general || !*specific)
            return wider && !*general && !*specific;
        general++;
        specific++;
    }
}

int tb_report_show(sqlite3 *db, int64_t session, FILE *out, size_t width)
{
    print_header(db, session, out);
    int use_conc = column_used(db, session, "concurrency IS NOT NULL");
    int use_steps = column_used(db, session, "steps IS NOT NULL");
    int use_block = column_used(db, session, "block_length IS NOT NULL");
    int use_opts = column_used(db, session, "swept_options <> '{}'");
    int use_rate = column_used(db, session, "request_rate IS NOT NULL");
    /* Serving figures where requests are served, or some failed. */
    int use_serving = use_conc || use_rate || column_used(db, session, "failed_requests > 0");
    int use_goodput = column_used(db, session, "goodput IS NOT NULL");

    /* Columns 0..7 are the case's identity, then the figures; 28.. the
     * request rate and the serving figures. */
    const char *sql =
        "SELECT backend, CASE WHEN prompt_tokens = 0 THEN 'set' ELSE prompt_tokens END, max_new_tokens, batch,"
        " concurrency, steps, block_length, swept_options,"
        " status, req_tps_median, req_tps_p5, aggregate_tps, decode_tps, ttft_ms, tpot_ms, e2e_ms, e2e_p95_ms, nfe,"
        " tokens_per_forward, agg_tps_cv, calls, count_mismatches, error, peak_device_mib,"
        " accuracy, accuracy_ci_lo, accuracy_ci_hi, judge_ppl,"
        " request_rate, requests, failed_requests, req_per_s, error_rate, goodput, ttft_p99_ms"
        " FROM summary WHERE session = ? ORDER BY rowid";
    int use_acc = column_used(db, session, "accuracy IS NOT NULL");
    int use_ppl = column_used(db, session, "judge_ppl IS NOT NULL");
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        fprintf(stderr, "tokbench: %s\n", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);

    /* Each column with its priority for fitting the terminal (0: always
     * shown; higher: left out sooner; tb_table_fit). */
    const char *head[32];
    int prio[32] = {0};
    int nh = 0;
    head[nh++] = "backend";
    head[nh++] = "prompt";
    head[nh++] = "new";
    head[nh++] = "batch";
    if (use_conc)
        head[nh++] = "conc";
    if (use_steps)
        head[nh++] = "steps";
    if (use_block)
        head[nh++] = "block";
    if (use_rate)
        head[nh++] = "rate/s";
    if (use_opts)
        head[nh++] = "options";
    /* Labels say what they count: "req" = per request, "calls" = the
     * measured calls the per-call figures are medians of. */
    static const struct {
        const char *name;
        int prio;
    } figs[] = {{"status", 0},   {"req tok/s", 2}, {"req tok/s p5", 6}, {"agg tok/s", 0}, {"decode tok/s", 8},
                {"TTFT ms", 3},  {"TPOT ms", 5},   {"E2E ms", 2},       {"E2E p95", 7},   {"NFE", 10},
                {"tok/fwd", 11}, {"CV", 9},        {"calls", 12},       {"dev MiB", 13}};
    for (size_t i = 0; i < TB_ARRAY_LEN(figs); i++) {
        prio[nh] = figs[i].prio;
        head[nh++] = figs[i].name;
    }
    if (use_serving) {
        prio[nh] = 4;
        head[nh++] = "req/s";
        prio[nh] = 1;
        head[nh++] = "failed reqs";
        if (use_goodput) {
            prio[nh] = 6;
            head[nh++] = "goodput/s";
        }
        prio[nh] = 7;
        head[nh++] = "TTFT p99";
    }
    if (use_acc) {
        prio[nh] = 1;
        head[nh++] = "accuracy (95% CI)";
    }
    if (use_ppl) {
        prio[nh] = 4;
        head[nh++] = "judge ppl";
    }
    tb_table *t = tb_table_new(nh);
    tb_table_header(t, head);
    for (int i = 0; i < nh; i++)
        tb_table_priority(t, i, prio[i]);

    /* Side-by-side: distinct case keys × backends → aggregate tok/s. */
    char **keys = NULL, **backends = NULL, ***cells = NULL; /* cells[key][backend] */
    size_t n_keys = 0, n_backends = 0;
    sqlite3_stmt *qb;
    if (sqlite3_prepare_v2(db, "SELECT label FROM backend WHERE session_id = ? ORDER BY id", -1, &qb, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(qb, 1, session);
        while (sqlite3_step(qb) == SQLITE_ROW) {
            backends = tb_xrealloc(backends, (n_backends + 1) * sizeof *backends);
            backends[n_backends++] = tb_xstrdup(col_text(qb, 0));
        }
    }
    sqlite3_finalize(qb);

    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *backend = col_text(q, 0), *status = col_text(q, 8);
        /* An ok case with failed requests is marked (tb_case_degraded at
         * the default threshold, 0: any failure). */
        tb_request_tally tally = {.requests = (size_t)sqlite3_column_int64(q, 29),
                                  .failed = (size_t)sqlite3_column_int64(q, 30)};
        if (strcmp(status, "ok") == 0 && tb_case_degraded(&tally, 0))
            status = "degraded";
        char rate[32];
        tb_table_cell(t, backend);
        for (int i = 1; i <= 3; i++)
            tb_table_cell(t, col_text(q, i));
        if (use_conc)
            tb_table_cell(t, sqlite3_column_type(q, 4) == SQLITE_NULL ? "-" : col_text(q, 4));
        if (use_steps)
            tb_table_cell(t, sqlite3_column_type(q, 5) == SQLITE_NULL ? "-" : col_text(q, 5));
        if (use_block)
            tb_table_cell(t, sqlite3_column_type(q, 6) == SQLITE_NULL ? "-" : col_text(q, 6));
        if (use_rate)
            tb_table_cell(t, *rate_text(q, rate) ? rate : "-");
        if (use_opts)
            tb_table_cell(t, strcmp(col_text(q, 7), "{}") ? col_text(q, 7) : "-");
        tb_table_cell(t, status);
        for (int i = 9; i <= 12; i++) /* tokens/s */
            tb_table_num(t, col_num(q, i), 1);
        for (int i = 13; i <= 16; i++) /* ms */
            tb_table_num(t, col_num(q, i), 2);
        tb_table_num(t, col_num(q, 17), 0);
        tb_table_num(t, col_num(q, 18), 2);
        double cv = col_num(q, 19);
        if (isfinite(cv))
            tb_table_cellf(t, "%.1f%%%s", cv * 100,
                           tb_noisy(cv, (size_t)sqlite3_column_int(q, 20), strcmp(col_text(q, 1), "set") == 0) ? "!" : "");
        else
            tb_table_cell(t, "-");
        tb_table_cell(t, sqlite3_column_type(q, 20) == SQLITE_NULL ? "-" : col_text(q, 20));
        tb_table_num(t, col_num(q, 23), 0);
        if (use_serving) {
            tb_table_num(t, col_num(q, 31), 2);
            double er = col_num(q, 32);
            if (isfinite(er))
                tb_table_cellf(t, "%.1f%% (%d)", er * 100, sqlite3_column_int(q, 30));
            else
                tb_table_cell(t, "-");
            if (use_goodput)
                tb_table_num(t, col_num(q, 33), 2);
            tb_table_num(t, col_num(q, 34), 2);
        }
        if (use_acc) {
            double a = col_num(q, 24);
            if (isfinite(a))
                tb_table_cellf(t, "%.1f%% (%.0f-%.0f)", a * 100, col_num(q, 25) * 100, col_num(q, 26) * 100);
            else
                tb_table_cell(t, "-");
        }
        if (use_ppl)
            tb_table_num(t, col_num(q, 27), 2);

        char *key = dims_key(q, use_conc, use_steps, use_block, use_rate, use_opts);
        size_t ki = 0, bi = 0;
        while (ki < n_keys && strcmp(keys[ki], key) != 0)
            ki++;
        if (ki == n_keys) {
            keys = tb_xrealloc(keys, (n_keys + 1) * sizeof *keys);
            cells = tb_xrealloc(cells, (n_keys + 1) * sizeof *cells);
            keys[n_keys] = tb_xstrdup(key);
            cells[n_keys] = tb_xcalloc(n_backends ? n_backends : 1, sizeof **cells);
            n_keys++;
        }
        free(key);
        while (bi < n_backends && strcmp(backends[bi], backend) != 0)
            bi++;
        if (bi < n_backends && !cells[ki][bi]) {
            double agg = col_num(q, 11), acc = col_num(q, 24), ppl = col_num(q, 27);
            if (strcmp(status, "ok") != 0 && strcmp(status, "degraded") != 0) {
                cells[ki][bi] = tb_xstrdup(status);
            } else {
                tb_str c = {0};
                if (isfinite(agg))
                    tb_str_appendf(&c, "%.1f", agg);
                else
                    tb_str_append(&c, "-");
                if (use_acc && isfinite(acc))
                    tb_str_appendf(&c, " @ %.0f%%", acc * 100);
                if (use_ppl && isfinite(ppl))
                    tb_str_appendf(&c, ", ppl %.1f", ppl);
                if (strcmp(status, "degraded") == 0)
                    tb_str_append(&c, " (degraded)");
                cells[ki][bi] = tb_str_take(&c);
            }
        }
    }
    sqlite3_finalize(q);
    fprintf(out, "\n");
    char *left_out = tb_table_fit(t, width);
    tb_table_print(t, out);
    tb_table_free(t);
    if (left_out) {
        char *note = tb_xasprintf("(left out to fit %zu columns: %s. Every column: tokbench show --wide; every "
                                  "figure: tokbench export SESSION --format csv)",
                                  width, left_out);
        print_wrapped(out, note, width);
        free(note);
    }
    free(left_out);

    /* A backend without a dimension (an AR engine has no steps) is a
     * reference for every value of it: fill its figure into the rows that
     * differ only there, and drop the row it came from. */
    int *covered = tb_xcalloc(n_keys ? n_keys : 1, sizeof(int));
    for (size_t a = 0; a < n_keys; a++)
        for (size_t k = 0; k < n_keys; k++)
            if (k != a && key_generalizes(keys[a], keys[k])) {
                covered[a] = 1;
                for (size_t b = 0; b < n_backends; b++)
                    if (!cells[k][b] && cells[a][b])
                        cells[k][b] = tb_xstrdup(cells[a][b]);
            }

    if (n_backends > 1) {
        const char *sh[32];
        int ns = 0;
        sh[ns++] = "prompt";
        sh[ns++] = "new";
        sh[ns++] = "batch";
        if (use_conc)
            sh[ns++] = "conc";
        if (use_steps)
            sh[ns++] = "steps";
        if (use_block)
            sh[ns++] = "block";
        if (use_rate)
            sh[ns++] = "rate/s";
        if (use_opts)
            sh[ns++] = "options";
        int nd = ns;
        for (size_t b = 0; b < n_backends && ns < 32; b++)
            sh[ns++] = backends[b];
        tb_table *s = tb_table_new(ns);
        tb_table_header(s, sh);
        for (size_t k = 0; k < n_keys; k++) {
            if (covered[k])
                continue;
            char *copy = tb_xstrdup(keys[k]), *save = NULL;
            int d = 0;
            for (char *f = strtok_r(copy, "\t", &save); d < nd; f = strtok_r(NULL, "\t", &save), d++)
                tb_table_cell(s, f && *f && strcmp(f, "{}") ? f : "-");
            free(copy);
            for (size_t b = 0; b < n_backends && (int)(nd + b) < ns; b++)
                tb_table_cell(s, cells[k][b] ? cells[k][b] : "");
        }
        fprintf(out, "\nside by side: aggregate output tokens/s (median over the calls)%s%s\n",
                use_acc ? " @ accuracy" : "", use_ppl ? ", judge perplexity (lower is better)" : "");
        tb_table_print(s, out);
        tb_table_free(s);
    }
    free(covered);
    tb_rsession rs;
    char *err = NULL;
    int read_failed = 0;
    if (tb_rsession_load(db, session, &rs, &err) == 0) {
        /* the answers of the load searches (docs/METRICS.md) */
        if (rs.n_searches)
            fprintf(out, "\nload searches (runs: the cases above):\n");
        for (size_t i = 0; i < rs.n_searches; i++) {
            const tb_rsearch *x = &rs.searches[i];
            size_t runs = 0;
            for (size_t k = 0; k < rs.n_cases; k++)
                runs += rs.cases[k].search_id == x->id;
            fprintf(out, "  %s: %s #%lld (case #%d): %s", rs.backends[x->backend].label, x->kind, (long long)x->id,
                    x->ordinal, x->status);
            if (isfinite(x->slo_rate))
                fprintf(out, ", slo_max_rate %.2f requests/s", x->slo_rate);
            if (isfinite(x->sync_rate) && isfinite(x->max_rate))
                fprintf(out, " (synchronous %.2f, throughput %.2f requests/s)", x->sync_rate, x->max_rate);
            fprintf(out, ", %zu runs%s%s\n", runs, x->error ? ": " : "", x->error ? x->error : "");
        }
        tb_warnings w;
        tb_warnings_derive(&rs, &w);
        if (w.n)
            fprintf(out, "\nwarnings:\n");
        for (size_t i = 0; i < w.n; i++)
            fprintf(out, "  %s\n", w.text[i]);
        tb_warnings_free(&w);
        tb_rsession_free(&rs);
    } else { /* a read or JSON error: said, and the exit status says it too */
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        read_failed = 1;
    }
    /* lines of 79 columns at most: an 80-column terminal */
    fprintf(out, "\nreq tok/s: a request's output tokens / its E2E time, median over the requests;\n"
                 "req tok/s p5: its 5th percentile, the rate 95%% of requests reach (slow tail);\n"
                 "agg tok/s: all output tokens of a call / its wall time, median over the calls\n"
                 "(calls: the measured generate() calls); decode: no prefill. docs/METRICS.md\n");
    for (size_t k = 0; k < n_keys; k++) {
        for (size_t b = 0; b < n_backends; b++)
            free(cells[k][b]);
        free(cells[k]);
        free(keys[k]);
    }
    free(cells);
    free(keys);
    for (size_t b = 0; b < n_backends; b++)
        free(backends[b]);
    free(backends);
    return read_failed ? -1 : 0;
}
