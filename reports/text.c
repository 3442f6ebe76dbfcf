/* text.c — terminal reports: the session list and one session's results
 * (every case in detail, then the backends side by side). Everything is
 * read back from the database, so `run` and `show` print the same thing. */
#define _GNU_SOURCE
#include "text.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dims.h"
#include "metrics.h"
#include "reader.h"
#include "report_tables.h"
#include "rsession.h"
#include "text_table.h"
#include "util.h"
#include "warnings.h"

int64_t tb_report_resolve_session(sqlite3 *db, const char *spec, char **err)
{
    *err = NULL;
    if (!spec || strcmp(spec, "last") == 0 || strcmp(spec, "--last") == 0) {
        /* The session started last (the first of `sessions`). */
        int64_t id = tb_read_last_session(db);
        if (id < 0)
            *err = tb_xstrdup("the database has no sessions yet (run a suite first: tokbench run SUITE)");
        return id;
    }
    char *end;
    long long v = strtoll(spec, &end, 10);
    /* A number is an id when there is such a session; otherwise the
     * argument may be a uuid prefix of at least 8 characters (shorter
     * ones, "99" say, would match a random uuid one time in 256 and turn
     * a wrong id into somebody else's session). */
    int64_t ids[2], id = -1;
    int n = tb_read_find_session(db, (*end == '\0' && end != spec) ? v : -1, strlen(spec) >= 8 ? spec : NULL, ids);
    if (n > 1)
        *err = tb_xasprintf("session \"%s\" is ambiguous (give more of the uuid)", spec);
    else if (n == 1)
        id = ids[0];
    if (id < 0 && !*err)
        *err = tb_xasprintf("no session \"%s\" (see tokbench sessions)", spec);
    return id;
}

int tb_report_sessions(sqlite3 *db, int limit, FILE *out)
{
    tb_row_session_item *rows;
    size_t n;
    char *err = NULL;
    if (tb_read_session_list(db, limit, &rows, &n, &err) != 0) {
        free(err);
        return -1;
    }
    static const char *const head[] = {"session", "started (UTC)", "suite", "status", "ok", "failed", "skipped",
                                       "host", "gpu", "commit"};
    tb_table *t = tb_table_new(10);
    tb_table_header(t, head);
    for (size_t i = 0; i < n; i++) {
        const tb_row_session_item *r = &rows[i];
        tb_table_cellf(t, "%lld", (long long)r->id);
        tb_table_cell(t, r->started_at);
        tb_table_cell(t, r->suite_name);
        if (r->shard_index >= 0 && r->joined_in >= 0)
            tb_table_cellf(t, "%s, shard %d/%d of #%lld", r->status, r->shard_index, r->shard_count,
                           (long long)r->joined_in);
        else if (r->shard_index >= 0)
            tb_table_cellf(t, "%s, shard %d/%d", r->status, r->shard_index, r->shard_count);
        else if (r->shard_count > 0)
            tb_table_cellf(t, "%s, joins %d shards", r->status, r->shard_count);
        else
            tb_table_cell(t, r->status);
        tb_table_cellf(t, "%lld", (long long)r->n_ok);
        tb_table_cellf(t, "%lld", (long long)r->n_failed);
        tb_table_cellf(t, "%lld", (long long)r->n_skipped);
        tb_table_cell(t, r->hostname);
        tb_table_cell(t, *r->gpu_name ? r->gpu_name : "no GPU");
        tb_table_cell(t, r->git_commit);
    }
    if (n)
        tb_table_print(t, out);
    else
        fprintf(out, "no sessions yet\n");
    tb_table_free(t);
    tb_row_session_items_free(rows, n);
    return 0;
}

/* `text` in lines of at most `width` bytes (0: one line), broken at
 * spaces (a word longer than a line: cut, never inside a character); the
 * lines after the first indented by `indent` spaces. A line wider than
 * the terminal would wrap wherever it falls, mid-number. */
static void print_wrapped_in(FILE *out, const char *text, size_t width, size_t indent)
{
    size_t lead = 0;
    while (*text) {
        size_t n = strlen(text), room = width > lead + 8 ? width - lead : (width ? 8 : 0);
        if (room && n > room) {
            size_t cut = room;
            while (cut > 0 && text[cut] != ' ')
                cut--;
            if (!cut) {
                cut = room;
                while (cut > 1 && ((unsigned char)text[cut] & 0xC0) == 0x80)
                    cut--;
            }
            n = cut;
        }
        size_t shown = n;
        while (shown > 0 && text[shown - 1] == ' ')
            shown--;
        fprintf(out, "%*s%.*s\n", (int)lead, "", (int)shown, text);
        text += n;
        while (*text == ' ')
            text++;
        lead = indent;
    }
}

static void print_wrapped(FILE *out, const char *text, size_t width)
{
    print_wrapped_in(out, text, width, 0);
}

/* A line (no newline in fmt) wrapped to `width`, its continuation lines
 * indented two more than its own leading spaces. */
static void __attribute__((format(printf, 3, 4))) putf(FILE *out, size_t width, const char *fmt, ...)
{
    tb_str b = {0};
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(&b, fmt, ap);
    va_end(ap);
    char *s = tb_str_take(&b);
    print_wrapped_in(out, s, width, strspn(s, " ") + 2);
    free(s);
}

static void print_header(sqlite3 *db, int64_t session, FILE *out, size_t width)
{
    tb_row_session r;
    char *err = NULL;
    if (tb_read_session(db, session, &r, &err) == 0) {
        putf(out, width, "session %lld  %s  suite %s (%s, sha256 %.12s…%s%.12s%s)", (long long)r.id, r.uuid,
                r.suite_name, r.suite_path, r.suite_sha256, *r.config_sha256 ? ", configuration sha256 " : "",
                r.config_sha256, *r.config_sha256 ? "…" : "");
        putf(out, width, "  %s .. %s  status %s  tokbench %s (%s)  warm-up %d, %d repetitions, seed %lld",
                r.started_at, r.finished_at, r.status, r.tokbench_version, r.git_commit, r.warmup, r.repeat,
                (long long)r.seed);
        putf(out, width, "  machine %s: %s (%d CPUs), %.1f GiB RAM, %s, kernel %s", r.hostname, r.cpu_model,
                r.cpu_cores, r.ram_bytes / (1u << 30), r.os, r.kernel);
        if (r.gpu_count > 0)
            putf(out, width, "  GPU %d x %s, driver %s, CUDA driver %s, CUDA build %s", r.gpu_count, r.gpu_name,
                    r.gpu_driver, r.cuda_driver_version, r.cuda_build_version);
        else
            putf(out, width, "  GPU none (%s); CUDA build %s", r.nvml_status, r.cuda_build_version);
        tb_row_session_free(&r);
    }
    free(err);

    tb_row_backend *b;
    size_t n;
    if (tb_read_backends(db, session, &b, &n, &err) != 0) {
        free(err);
        return;
    }
    for (size_t i = 0; i < n; i++)
        /* a server's dtype and device are its own: not reported, not
         * shown (they were "?") */
        putf(out, width, "  backend %s: %s %s, model \"%s\"%s%s%s%s%s; capabilities %s", b[i].label, b[i].plugin,
                b[i].plugin_version, b[i].model, *b[i].dtype ? ", dtype " : "", b[i].dtype,
                *b[i].device ? ", device " : "", b[i].device,
                b[i].random_weights == 1 ? ", RANDOM WEIGHTS (speed only, no quality)" : "", b[i].capabilities);
    tb_row_backends_free(b, n);
}

/* Whether the terminal table has a column for dimension d: a stored one
 * that every case has (required), or that some case of the session
 * applies (used[d]). */
static int dim_shown(const int *used, int d)
{
    return tb_dim_defs[d].column && (tb_dim_defs[d].required || used[d]);
}

/* The dimensions of a summary row as one key (for the side-by-side):
 * the shown ones tab-separated, "" where not applicable. */
static char *dims_key(const tb_row_summary *r, const int *used, int use_opts)
{
    tb_str b = {0};
    for (int d = 0; d < TB_N_DIMS; d++)
        if (dim_shown(used, d)) {
            char v[48];
            char *prompt = d == TB_DIM_PROMPT_TOKENS ? tb_rprompt_text(r->backend_options_json, r->prompt_len_mean)
                                                     : NULL;
            tb_str_appendf(&b, "%s%s", d ? "\t" : "", /* prompt_tokens first: always shown */
                           prompt ? prompt
                           : tb_case_dim_absent(&r->dims, (tb_dim)d) ? ""
                                                                     : tb_case_dim_text(&r->dims, (tb_dim)d, v, sizeof v));
            free(prompt);
        }
    if (use_opts) {
        char *words = tb_roptions_words(r->swept_options);
        tb_str_appendf(&b, "\t%s", words);
        free(words);
    }
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

/* The side-by-side table of backends [b0, b1): the rows' dimensions
 * (head[1..nd]) but those the main table said once, then a column
 * each; rows marked covered are left out. */
static tb_table *side_table(const tb_table *main, const char *const *head, int nd, char **keys, const int *covered,
                            size_t n_keys, char ***cells, char **backends, size_t b0, size_t b1)
{
    int shown = 0; /* the dimensions not said above the main table */
    for (int i = 1; i <= nd; i++)
        shown += !tb_table_hidden(main, i);
    tb_table *s = tb_table_new(shown + (int)(b1 - b0));
    for (int i = 1; i <= nd; i++)
        if (!tb_table_hidden(main, i))
            tb_table_cell(s, head[i]);
    for (size_t b = b0; b < b1; b++)
        tb_table_cell(s, backends[b]);
    for (size_t k = 0; k < n_keys; k++) {
        if (covered[k])
            continue;
        /* the key's fields in order, empty ones included (strtok would
         * skip them and shift the columns after one) */
        const char *f = keys[k];
        for (int d = 0; d < nd; d++) {
            size_t len = f ? strcspn(f, "\t") : 0;
            char *field = tb_xstrndup(f ? f : "", len);
            if (!tb_table_hidden(main, d + 1))
                tb_table_cell(s, *field ? field : "-");
            free(field);
            f = f && f[len] == '\t' ? f + len + 1 : NULL;
        }
        for (size_t b = b0; b < b1; b++)
            tb_table_cell(s, cells[k][b] ? cells[k][b] : "");
    }
    return s;
}

/* The report's table `id` (report_tables.c), printed as text under its
 * title, fitted to width (the case column first left whole); nothing
 * when the session has no such table. */
static void print_rtable(const tb_rsession *rs, const char *id, FILE *out, size_t width)
{
    tb_rtables ts;
    tb_rtables_build(rs, &ts);
    for (size_t i = 0; i < ts.n; i++) {
        const tb_rtable *rt = &ts.v[i];
        if (strcmp(rt->id, id) != 0 || !rt->n_rows)
            continue;
        tb_table *t = tb_table_new((int)rt->n_cols);
        tb_table_header(t, (const char *const *)rt->head);
        for (size_t c = 2; c < rt->n_cols; c++) /* right to left as the width asks */
            tb_table_priority(t, (int)c, (int)c);
        for (size_t k = 0; k < rt->n_rows * rt->n_cols; k++)
            tb_table_cell(t, rt->cells[k][0] ? rt->cells[k] : "-");
        fputc('\n', out);
        putf(out, width, "%s:", rt->title);
        char *left_out = tb_table_fit(t, width);
        tb_table_print(t, out);
        if (left_out)
            putf(out, width, "(left out to fit %zu columns: %s; tokbench report --format html has them)", width,
                 left_out);
        free(left_out);
        tb_table_free(t);
    }
    tb_rtables_free(&ts);
}

int tb_report_show(sqlite3 *db, int64_t session, FILE *out, size_t width)
{
    print_header(db, session, out, width);
    tb_row_summary *rows;
    int any_canvas = 0; /* a canvas case: the note under the table */
    size_t n_rows;
    char *rerr = NULL;
    if (tb_read_summary(db, session, &rows, &n_rows, &rerr) != 0) {
        fprintf(stderr, "tokbench: %s\n", rerr);
        free(rerr);
        return -1;
    }
    /* Which optional columns carry a value in this session. */
    int used[TB_N_DIMS] = {0}, use_opts = 0, use_failed = 0, use_goodput = 0, use_acc = 0, use_ppl = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const tb_row_summary *r = &rows[i];
        for (int d = 0; d < TB_N_DIMS; d++)
            used[d] |= !tb_case_dim_absent(&r->dims, (tb_dim)d);
        use_opts |= strcmp(r->swept_options, "{}") != 0;
        use_failed |= r->failed_requests > 0;
        use_goodput |= isfinite(r->goodput);
        use_acc |= isfinite(r->accuracy);
        use_ppl |= isfinite(r->judge_ppl);
    }
    /* A serving case (one with concurrency or request_rate, a server
     * behind the http plugin, or failed requests) is read by its latency
     * and request rate; an engine case by its tokens/s, NFE and accuracy.
     * The columns' priorities follow (docs/REPORTS.md). */
    int use_serving = used[TB_DIM_CONCURRENCY] || used[TB_DIM_REQUEST_RATE] || use_failed;
    /* the backends (the side-by-side table's columns) */
    char **keys = NULL, **backends = NULL, ***cells = NULL; /* cells[key][backend] */
    size_t n_keys = 0, n_backends = 0;
    tb_row_backend *brows;
    if (tb_read_backends(db, session, &brows, &n_backends, &rerr) == 0) {
        backends = tb_xcalloc(n_backends ? n_backends : 1, sizeof *backends);
        for (size_t b = 0; b < n_backends; b++) {
            backends[b] = tb_xstrdup(brows[b].label);
            use_serving |= strcmp(brows[b].plugin, "http") == 0;
        }
        tb_row_backends_free(brows, n_backends);
    } else {
        free(rerr);
        rerr = NULL;
    }

    /* Each column with its priority for fitting the terminal (0: always
     * shown; higher: left out sooner; tb_table_fit): engine, serving. */
    const char *head[40];
    char *dim_heads[TB_N_DIMS] = {0};
    int prio[40] = {0};
    int nh = 0;
    head[nh++] = "backend";
    for (int d = 0; d < TB_N_DIMS; d++)
        if (dim_shown(used, d))
            head[nh++] = dim_heads[d] = tb_xasprintf("%s%s", tb_dim_defs[d].abbrev, tb_dim_defs[d].unit);
    if (use_opts)
        head[nh++] = "options";
    int nd = nh - 1; /* the dimensions' (and options') columns */
    /* Labels say what they count: "req" = per request, "calls" = the
     * measured calls the per-call figures are medians of. */
    static const struct {
        const char *name;
        int engine, serving;
    } figs[] = {{"status", 0, 0},  {"req tok/s", 2, 4},  {"req tok/s p5", 6, 8}, {"agg tok/s", 0, 6},
                {"decode tok/s", 8, 9}, {"TTFT ms", 3, 1}, {"TPOT ms", 5, 4},     {"E2E ms", 2, 4},
                {"E2E p95", 7, 7},  {"NFE", 1, 10},      {"tok/fwd", 11, 11},    {"CV", 9, 9},
                {"calls", 12, 12},  {"dev MiB", 13, 13}};
    for (size_t i = 0; i < TB_ARRAY_LEN(figs); i++) {
        prio[nh] = use_serving ? figs[i].serving : figs[i].engine;
        head[nh++] = figs[i].name;
    }
    if (use_serving) {
        if (used[TB_DIM_REQUEST_RATE]) { /* beside the offered rate's column */
            prio[nh] = 5;
            head[nh++] = "sent req/s";
        }
        prio[nh] = 1;
        head[nh++] = "req/s";
        prio[nh] = 3;
        head[nh++] = "failed reqs";
        if (use_goodput) {
            prio[nh] = 2;
            head[nh++] = "goodput/s";
        }
        prio[nh] = 3;
        head[nh++] = "TTFT p99";
        prio[nh] = 1;
        head[nh++] = "TPOT p99";
    }
    if (use_acc) { /* two columns: the CI may be left out, the accuracy kept */
        prio[nh] = use_serving ? 3 : 1;
        head[nh++] = "accuracy";
        prio[nh] = use_serving ? 8 : 6;
        head[nh++] = "95% CI";
    }
    if (use_ppl) {
        prio[nh] = use_serving ? 5 : 4;
        head[nh++] = "judge ppl";
    }
    tb_table *t = tb_table_new(nh);
    tb_table_header(t, head);
    for (int i = 0; i < nh; i++)
        tb_table_priority(t, i, prio[i]);

    /* Side-by-side: distinct case keys × backends → aggregate tok/s. */

    for (size_t ri = 0; ri < n_rows; ri++) {
        const tb_row_summary *r = &rows[ri];
        const char *backend = r->backend, *status = r->status;
        /* An ok case with failed requests is marked (tb_case_degraded at
         * the default threshold, 0: any failure). */
        tb_request_tally tally = {.requests = (size_t)r->requests, .failed = (size_t)r->failed_requests};
        if (strcmp(status, "ok") == 0 && tb_case_degraded(&tally, 0))
            status = "degraded";
        tb_table_cell(t, backend);
        for (int d = 0; d < TB_N_DIMS; d++)
            if (dim_shown(used, d)) {
                char v[48];
                char *prompt = d == TB_DIM_PROMPT_TOKENS ? tb_rprompt_text(r->backend_options_json, r->prompt_len_mean)
                                                         : NULL;
                tb_table_cell(t, prompt ? prompt : tb_case_dim_text(&r->dims, (tb_dim)d, v, sizeof v));
                free(prompt);
            }
        if (use_opts) {
            char *words = tb_roptions_words(r->swept_options);
            tb_table_cell(t, *words ? words : "-");
            free(words);
        }
        tb_table_cell(t, status);
        const double tps[] = {r->req_tps_median, r->req_tps_p5, r->aggregate_tps, r->decode_tps};
        for (size_t i = 0; i < TB_ARRAY_LEN(tps); i++) /* tokens/s */
            tb_table_num(t, tps[i], 1);
        const double ms[] = {r->ttft_ms, r->tpot_ms, r->e2e_ms, r->e2e_p95_ms};
        int canvas = tb_case_is_canvas(r->canvas_gap_n > 0 ? (size_t)r->canvas_gap_n : 0);
        any_canvas |= canvas;
        for (size_t i = 0; i < TB_ARRAY_LEN(ms); i++) {
            if (i == 1 && canvas && isfinite(r->canvas_gap_ms)) /* TPOT over a canvas means nothing */
                tb_table_cellf(t, "%.2f" TB_CANVAS_TPOT_MARK, r->canvas_gap_ms);
            else
                tb_table_num(t, ms[i], 2);
        }
        tb_table_num(t, r->nfe, 0);
        tb_table_num(t, r->tokens_per_forward, 2);
        double cv = r->agg_tps_cv;
        if (isfinite(cv))
            tb_table_cellf(t, "%.1f%%%s", cv * 100,
                           tb_noisy(cv, r->calls > 0 ? (size_t)r->calls : 0, r->dims.prompt_tokens == 0) ? "!" : "");
        else
            tb_table_cell(t, "-");
        if (r->calls >= 0)
            tb_table_cellf(t, "%lld", (long long)r->calls);
        else
            tb_table_cell(t, "-");
        tb_table_num(t, r->peak_device_mib, 0);
        if (use_serving) {
            if (used[TB_DIM_REQUEST_RATE])
                tb_table_num(t, r->sent_per_s, 2);
            tb_table_num(t, r->req_per_s, 2);
            if (isfinite(r->error_rate))
                tb_table_cellf(t, "%.1f%% (%lld)", r->error_rate * 100, (long long)r->failed_requests);
            else
                tb_table_cell(t, "-");
            if (use_goodput)
                tb_table_num(t, r->goodput, 2);
            tb_table_num(t, r->ttft_p99_ms, 2);
            tb_table_num(t, r->tpot_p99_ms, 2);
        }
        if (use_acc) {
            if (isfinite(r->accuracy)) {
                tb_table_cellf(t, "%.1f%%", r->accuracy * 100);
                tb_table_cellf(t, "%.0f-%.0f", r->accuracy_ci_lo * 100, r->accuracy_ci_hi * 100);
            } else {
                tb_table_cell(t, "-");
                tb_table_cell(t, "-");
            }
        }
        if (use_ppl)
            tb_table_num(t, r->judge_ppl, 2);

        char *key = dims_key(r, used, use_opts);
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
            double agg = r->aggregate_tps, acc = r->accuracy, ppl = r->judge_ppl;
            if (strcmp(status, "ok") != 0 && strcmp(status, "degraded") != 0) {
                cells[ki][bi] = tb_xstrdup(status);
            } else {
                tb_str c = {0};
                if (isfinite(agg))
                    tb_str_appendf(&c, "%.1f", agg);
                else
                    tb_str_append(&c, "-");
                /* short: "430.6 @99% ppl 3.2" (the side-by-side table
                 * fits the terminal) */
                if (use_acc && isfinite(acc))
                    tb_str_appendf(&c, " @%.0f%%", acc * 100);
                if (use_ppl && isfinite(ppl))
                    tb_str_appendf(&c, " ppl %.1f", ppl);
                if (strcmp(status, "degraded") == 0)
                    tb_str_append(&c, " (degraded)");
                cells[ki][bi] = tb_str_take(&c);
            }
        }
    }
    tb_row_summaries_free(rows, n_rows);
    fprintf(out, "\n");
    /* Too wide: the dimensions (and status) that are the same in every
     * case are said once above it, then columns are left out by the
     * case kind's priorities. */
    free(tb_table_fit(t, 0)); /* the empty columns */
    char *hoisted = width && tb_table_width(t) > width ? tb_table_hoist(t, 1, nd + 1) : NULL;
    char *left_out = tb_table_fit(t, width);
    if (hoisted)
        putf(out, width, "every case: %s", hoisted);
    free(hoisted);
    tb_table_print(t, out);
    if (left_out) {
        char *note = tb_xasprintf("(left out to fit %zu columns: %s. Every column: tokbench show --wide; every "
                                  "figure: tokbench export SESSION --format csv)",
                                  width, left_out);
        print_wrapped(out, note, width);
        free(note);
    }
    free(left_out);
    if (any_canvas)
        print_wrapped(out, TB_CANVAS_TPOT_NOTE, width);

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
        fputc('\n', out);
        putf(out, width, "side by side: aggregate output tokens/s (median over the calls)%s%s",
                use_acc ? " @ accuracy" : "", use_ppl ? ", judge perplexity (lower is better)" : "");
        /* As many backends in a table as fit the width, the rest in more
         * tables of the same rows: a line wider than the terminal wraps,
         * mid-number (at least one backend a table). */
        for (size_t b0 = 0; b0 < n_backends;) {
            size_t b1 = width ? b0 + 1 : n_backends;
            tb_table *s = side_table(t, head, nd, keys, covered, n_keys, cells, backends, b0, b1);
            while (b1 < n_backends) {
                tb_table *wider = side_table(t, head, nd, keys, covered, n_keys, cells, backends, b0, b1 + 1);
                if (tb_table_width(wider) > width) {
                    tb_table_free(wider);
                    break;
                }
                tb_table_free(s);
                s = wider;
                b1++;
            }
            if (b0)
                fputc('\n', out);
            tb_table_print(s, out);
            tb_table_free(s);
            b0 = b1;
        }
    }
    free(covered);
    tb_table_free(t);
    tb_rsession rs;
    char *err = NULL;
    int read_failed = 0;
    if (tb_rsession_load(db, session, &rs, &err) == 0) {
        if (rs.has_spec) /* its own table: the others keep their width */
            print_rtable(&rs, "speculative", out, width);
        print_rtable(&rs, "aup", out, width); /* nothing without accuracy */
        /* the answers of the load searches (docs/METRICS.md) */
        if (rs.n_searches)
            fprintf(out, "\nload searches (runs: the cases above):\n");
        for (size_t i = 0; i < rs.n_searches; i++) {
            const tb_rsearch *x = &rs.searches[i];
            size_t runs = 0;
            for (size_t k = 0; k < rs.n_cases; k++)
                runs += rs.cases[k].search_id == x->id;
            tb_str l = {0};
            tb_str_appendf(&l, "  %s: %s #%lld (case #%d): %s", rs.backends[x->backend].label, x->kind,
                           (long long)x->id, x->ordinal, x->status);
            if (isfinite(x->slo_rate))
                tb_str_appendf(&l, ", slo_max_rate %.2f requests/s", x->slo_rate);
            if (isfinite(x->sync_rate) && isfinite(x->max_rate))
                tb_str_appendf(&l, " (synchronous %.2f, throughput %.2f requests/s)", x->sync_rate, x->max_rate);
            tb_str_appendf(&l, ", %zu runs%s%s", runs, x->error ? ": " : "", x->error ? x->error : "");
            putf(out, width, "%s", l.s);
            tb_str_free(&l);
        }
        tb_warnings w;
        tb_warnings_derive(&rs, &w);
        if (w.n)
            fprintf(out, "\nwarnings:\n");
        for (size_t i = 0; i < w.n; i++)
            putf(out, width, "  %s", w.text[i]);
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
    for (int d = 0; d < TB_N_DIMS; d++)
        free(dim_heads[d]);
    return read_failed ? -1 : 0;
}
