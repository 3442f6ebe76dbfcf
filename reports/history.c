/* history.c — see history.h. */
#define _GNU_SOURCE
#include "history.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "html_page.h"
#include "metrics.h"
#include "rsession.h"
#include "store.h"
#include "text_table.h"
#include "util.h"

static char *dup_col(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return tb_xstrdup(t ? (const char *)t : "");
}

static double num_col(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

/* Every distinct value of a query's first column, comma-separated. */
static char *list_of(sqlite3 *db, const char *sql, const char *arg)
{
    tb_str b = {0};
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
        if (arg)
            sqlite3_bind_text(q, 1, arg, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(q) == SQLITE_ROW)
            tb_str_appendf(&b, "%s%s", b.len ? ", " : "", sqlite3_column_text(q, 0));
    }
    sqlite3_finalize(q);
    return tb_str_take(&b);
}

static const char *const dim_columns[] = {"prompt_tokens", "max_new_tokens", "batch",       "concurrency",
                                          "steps",         "block_length",   "request_rate"};

/* Append " AND ..." for one "KEY=V1,V2" filter; values are bound later in
 * order (collected in *vals). -1 with *err on a malformed filter. */
static int add_filter(tb_str *sql, const char *f, char ***vals, size_t *n_vals, char **err)
{
    const char *eq = strchr(f, '=');
    if (!eq || eq == f || !eq[1]) {
        *err = tb_xasprintf("filter \"%s\": expected KEY=VALUE[,VALUE...]", f);
        return -1;
    }
    char *key = tb_xstrndup(f, (size_t)(eq - f));
    for (char *k = key; *k; k++)
        if (!isalnum((unsigned char)*k) && *k != '_' && *k != '-') {
            *err = tb_xasprintf("filter \"%s\": \"%s\" is not a dimension or option name", f, key);
            free(key);
            return -1;
        }
    const char *col = NULL;
    for (size_t i = 0; i < TB_ARRAY_LEN(dim_columns); i++)
        if (strcmp(key, dim_columns[i]) == 0)
            col = dim_columns[i];
    char *expr = col ? tb_xasprintf("c.%s", col) : tb_xasprintf("json_extract(c.options_json, '$.\"%s\"')", key);
    free(key);
    tb_str_appendf(sql, " AND (0");
    char *copy = tb_xstrdup(eq + 1), *save = NULL;
    for (char *v = strtok_r(copy, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
        v = tb_trim(v);
        if (strcmp(v, "none") == 0 || strcmp(v, "-") == 0) {
            tb_str_appendf(sql, " OR %s IS NULL", expr);
            continue;
        }
        /* Compare as text, so "8" matches 8 and "greedy" matches a string. */
        tb_str_appendf(sql, " OR CAST(%s AS TEXT) = ?", expr);
        *vals = tb_xrealloc(*vals, (*n_vals + 1) * sizeof **vals);
        (*vals)[(*n_vals)++] = tb_xstrdup(v);
    }
    free(copy);
    free(expr);
    tb_str_append(sql, ")");
    return 0;
}

/* One row (1), none (0), or -1 with *err: a read error is no answer. */
static int step_one(sqlite3 *db, sqlite3_stmt *q, const char *what, char **err)
{
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        return rc == SQLITE_ROW;
    *err = tb_rdb_error(db, -1, what);
    return -1;
}

int tb_history_load(sqlite3 *db, const char *label, const char *metric, char *const *filters, size_t n_filters,
                    tb_history *out, char **err)
{
    memset(out, 0, sizeof *out);
    *err = NULL;
    /* Every session's rows are read: what they parse must parse. */
    char *bad = NULL;
    if (tb_store_check_json(db, -1, 0, &bad) != 0) {
        *err = tb_xasprintf("reading the sessions: %s", bad);
        free(bad);
        return -2;
    }
    sqlite3_stmt *q;
    int found = -1;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM backend WHERE label = ? LIMIT 1", -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, label, -1, SQLITE_TRANSIENT);
        found = step_one(db, q, "the backends", err);
    } else {
        *err = tb_rdb_error(db, -1, "the backends");
    }
    sqlite3_finalize(q);
    if (found < 0)
        return -2;
    if (!found) {
        char *known = list_of(db, "SELECT DISTINCT label FROM backend ORDER BY label", NULL);
        *err = tb_xasprintf("no backend \"%s\" in any session (known: %s)", label, *known ? known : "none");
        free(known);
        return -1;
    }
    found = -1;
    if (sqlite3_prepare_v2(db,
                           "SELECT unit FROM metric m JOIN bench_case c ON c.id = m.case_id JOIN backend b"
                           " ON b.id = c.backend_id WHERE b.label = ? AND m.name = ? LIMIT 1",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, label, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(q, 2, metric, -1, SQLITE_TRANSIENT);
        found = step_one(db, q, "the metrics", err);
        if (found > 0)
            out->unit = dup_col(q, 0);
    } else {
        *err = tb_rdb_error(db, -1, "the metrics");
    }
    sqlite3_finalize(q);
    if (found < 0)
        return -2;
    if (!found) {
        char *known = list_of(db,
                              "SELECT DISTINCT m.name FROM metric m JOIN bench_case c ON c.id = m.case_id"
                              " JOIN backend b ON b.id = c.backend_id WHERE b.label = ? ORDER BY m.name",
                              label);
        *err = tb_xasprintf("backend \"%s\" has no metric \"%s\" (known: %s)", label, metric,
                            *known ? known : "none: no case of it ran");
        free(known);
        return -1;
    }

    tb_str sql = {0};
    tb_str_append(&sql,
                  "SELECT s.id, s.started_at, s.git_commit, s.tokbench_version, s.status, m.hostname,"
                  " coalesce(m.gpu_name, m.cpu_model), m.fingerprint, b.model,"
                  " coalesce(json_extract(b.info_json, '$.dtype'), ''), b.plugin_version, c.status,"
                  " c.prompt_tokens, c.max_new_tokens, c.batch, c.concurrency, c.steps, c.block_length,"
                  " c.request_rate, c.options_json,"
                  " mt.n, mt.median, mt.p5, mt.p95, mt.mean, mt.stdev, mt.cv, mt.min, mt.max, mt.ci_lo, mt.ci_hi,"
                  " b.options_json, s.config_sha256, s.config_json"
                  " FROM bench_case c JOIN backend b ON b.id = c.backend_id JOIN session s ON s.id = c.session_id"
                  " JOIN machine m ON m.id = s.machine_id"
                  " LEFT JOIN metric mt ON mt.case_id = c.id AND mt.name = ?2"
                  " WHERE b.label = ?1");
    char **vals = NULL;
    size_t n_vals = 0;
    int rc = 0;
    for (size_t i = 0; i < n_filters && rc == 0; i++)
        rc = add_filter(&sql, filters[i], &vals, &n_vals, err);
    tb_str_append(&sql, " ORDER BY s.started_at, s.id, c.ordinal");
    if (rc == 0 && sqlite3_prepare_v2(db, sql.s, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_rdb_error(db, -1, "the history");
        rc = -2;
    }
    if (rc == 0) {
        sqlite3_bind_text(q, 1, label, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(q, 2, metric, -1, SQLITE_TRANSIENT);
        for (size_t i = 0; i < n_vals; i++)
            sqlite3_bind_text(q, 3 + (int)i, vals[i], -1, SQLITE_TRANSIENT);
        int step;
        while ((step = sqlite3_step(q)) == SQLITE_ROW) {
            /* The case's key, built as the report builds it. */
            char *opts = dup_col(q, 19);
            tb_rcase k = {.prompt_tokens = sqlite3_column_int(q, 12), .max_new_tokens = sqlite3_column_int(q, 13),
                          .batch = sqlite3_column_int(q, 14),
                          .concurrency = sqlite3_column_type(q, 15) == SQLITE_NULL ? -1 : sqlite3_column_int(q, 15),
                          .steps = sqlite3_column_type(q, 16) == SQLITE_NULL ? -1 : sqlite3_column_int(q, 16),
                          .block_length = sqlite3_column_type(q, 17) == SQLITE_NULL ? -1 : sqlite3_column_int(q, 17),
                          .request_rate = num_col(q, 18), .options_json = opts};
            char *key = tb_rcase_key(&k, 0);
            free(opts);
            size_t si = 0;
            while (si < out->n && strcmp(out->s[si].key, key) != 0)
                si++;
            if (si == out->n) {
                out->s = tb_xrealloc(out->s, (out->n + 1) * sizeof *out->s);
                out->s[out->n++] = (tb_hseries){.key = key};
            } else {
                free(key);
            }
            tb_hseries *s = &out->s[si];
            s->p = tb_xrealloc(s->p, (s->n + 1) * sizeof *s->p);
            tb_hpoint *p = &s->p[s->n++];
            p->session = sqlite3_column_int64(q, 0);
            p->started_at = dup_col(q, 1);
            p->commit = dup_col(q, 2);
            p->version = dup_col(q, 3);
            p->session_status = dup_col(q, 4);
            p->host = dup_col(q, 5);
            p->hardware = dup_col(q, 6);
            p->fingerprint = dup_col(q, 7);
            p->model = dup_col(q, 8);
            p->dtype = dup_col(q, 9);
            p->plugin_version = dup_col(q, 10);
            p->case_status = dup_col(q, 11);
            p->options_json = dup_col(q, 31);
            p->config_sha256 = dup_col(q, 32);
            p->config_json = dup_col(q, 33);
            p->st = (tb_stats){.n = sqlite3_column_type(q, 20) == SQLITE_NULL ? 0 : (size_t)sqlite3_column_int64(q, 20),
                               .median = num_col(q, 21), .p5 = num_col(q, 22), .p95 = num_col(q, 23),
                               .mean = num_col(q, 24), .stdev = num_col(q, 25), .cv = num_col(q, 26),
                               .min = num_col(q, 27), .max = num_col(q, 28), .ci_lo = num_col(q, 29),
                               .ci_hi = num_col(q, 30)};
        }
        if (step != SQLITE_DONE) { /* an error, not the end of the cases */
            char *what = tb_xasprintf("the cases of backend \"%s\"", label);
            *err = tb_rdb_error(db, -1, what);
            free(what);
            rc = -2;
        }
        sqlite3_finalize(q);
        if (rc == 0 && out->n == 0) {
            *err = tb_xasprintf("no case of backend \"%s\" matches the filters", label);
            rc = -1;
        }
    }
    for (size_t i = 0; i < n_vals; i++)
        free(vals[i]);
    free(vals);
    tb_str_free(&sql);
    if (rc != 0) {
        tb_history_free(out);
        return rc;
    }
    out->backend = tb_xstrdup(label);
    out->metric = tb_xstrdup(metric);
    return 0;
}

void tb_history_free(tb_history *h)
{
    for (size_t i = 0; i < h->n; i++) {
        tb_hseries *s = &h->s[i];
        for (size_t k = 0; k < s->n; k++) {
            tb_hpoint *p = &s->p[k];
            free(p->started_at);
            free(p->commit);
            free(p->version);
            free(p->session_status);
            free(p->host);
            free(p->hardware);
            free(p->fingerprint);
            free(p->model);
            free(p->dtype);
            free(p->plugin_version);
            free(p->case_status);
            free(p->options_json);
            free(p->config_sha256);
            free(p->config_json);
        }
        free(s->p);
        free(s->key);
    }
    free(h->s);
    free(h->backend);
    free(h->metric);
    free(h->unit);
    memset(h, 0, sizeof *h);
}

/* The registry's direction (metrics.h); a metric it does not know (a
 * score another tool stored) is taken as higher-is-better. */
static tb_metric_better direction(const char *metric)
{
    const tb_metric_def *d = tb_metric_find(metric);
    return d ? d->better : TB_BETTER_HIGHER;
}

/* What the metric's n counts ("calls", "requests"; the registry's), the
 * column's name; "n" for a metric the registry does not know. */
static const char *samples_of(const char *metric)
{
    const tb_metric_def *d = tb_metric_find(metric);
    return d ? d->samples : "n";
}

/* "; KEY A -> B" for each key the objects at `path` of two sessions'
 * configurations differ in (nothing when a side has none). */
static void config_changes(const tb_hpoint *prev, const tb_hpoint *p, const char *const *path, size_t depth,
                           const char *prefix, tb_str *b)
{
    char *x = tb_rjson_part(prev->config_json, path, depth), *y = tb_rjson_part(p->config_json, path, depth);
    if (x && y)
        tb_rjson_diff(x, y, "; ", prefix, " -> ", "", b);
    free(x);
    free(y);
}

/* What changed between two points of a series, as a note (NULL: nothing):
 * the machine, what the backend loaded, each of its options, and the
 * suite's settings when the resolved configurations differ. */
static char *changes(const tb_hpoint *prev, const tb_hpoint *p)
{
    tb_str b = {0};
    if (strcmp(prev->fingerprint, p->fingerprint) != 0)
        tb_str_appendf(&b, "machine %s (%s) -> %s (%s)", prev->host, prev->hardware, p->host, p->hardware);
    if (strcmp(prev->model, p->model) != 0)
        tb_str_appendf(&b, "%smodel %s -> %s", b.len ? "; " : "", prev->model, p->model);
    if (strcmp(prev->dtype, p->dtype) != 0)
        tb_str_appendf(&b, "%sdtype %s -> %s", b.len ? "; " : "", prev->dtype, p->dtype);
    if (strcmp(prev->plugin_version, p->plugin_version) != 0)
        tb_str_appendf(&b, "%splugin %s -> %s", b.len ? "; " : "", prev->plugin_version, p->plugin_version);
    /* Each entry below starts with "; ": appended, then the first cut. */
    size_t at = b.len;
    tb_rjson_diff(prev->options_json, p->options_json, "; ", "option ", " -> ", "", &b);
    if (*prev->config_sha256 && *p->config_sha256 && strcmp(prev->config_sha256, p->config_sha256) != 0) {
        static const char *const suite[] = {"suite"}, *const prompts[] = {"prompts"};
        config_changes(prev, p, suite, 1, "suite ", &b);
        config_changes(prev, p, prompts, 1, "prompt set ", &b);
    }
    if (at == 0 && b.len > 2) { /* nothing before: drop the leading "; " */
        memmove(b.s, b.s + 2, b.len - 1);
        b.len -= 2;
    }
    if (!b.len)
        return NULL;
    return tb_str_take(&b);
}

void tb_history_print(const tb_history *h, FILE *out)
{
    tb_metric_better dir = direction(h->metric);
    for (size_t i = 0; i < h->n; i++) {
        const tb_hseries *s = &h->s[i];
        fprintf(out, "%s%s (%s) of backend %s, case %s: %zu session%s\n", i ? "\n" : "", h->metric, h->unit,
                h->backend, s->key, s->n, s->n == 1 ? "" : "s");
        /* n says what it counts: calls or requests (the registry's) */
        const char *head[] = {"session", "started (UTC)", "commit", "version", "host", "hardware",
                              "status", samples_of(h->metric), "median", "p5", "p95", "95% CI of median",
                              "change"};
        tb_table *t = tb_table_new(13);
        tb_table_header(t, head);
        tb_str notes = {0};
        const tb_hpoint *prev = NULL;
        for (size_t k = 0; k < s->n; k++) {
            const tb_hpoint *p = &s->p[k];
            tb_table_cellf(t, "%lld", (long long)p->session);
            tb_table_cell(t, p->started_at);
            tb_table_cell(t, p->commit);
            tb_table_cell(t, p->version);
            tb_table_cell(t, p->host);
            tb_table_cell(t, p->hardware);
            tb_table_cell(t, p->case_status);
            tb_table_cellf(t, "%zu", p->st.n);
            tb_table_num(t, p->st.median, 2);
            tb_table_num(t, p->st.p5, 2);
            tb_table_num(t, p->st.p95, 2);
            if (isfinite(p->st.ci_lo))
                tb_table_cellf(t, "[%.2f, %.2f]", p->st.ci_lo, p->st.ci_hi);
            else
                tb_table_cell(t, "-");
            if (prev && isfinite(prev->st.median) && isfinite(p->st.median) && prev->st.median != 0) {
                double pct = (p->st.median / prev->st.median - 1) * 100;
                int better = dir == TB_BETTER_HIGHER ? pct > 0 : pct < 0;
                tb_table_cellf(t, "%+.1f%%%s", pct,
                               fabs(pct) < 0.05 || dir == TB_BETTER_NONE ? "" : better ? " better" : " worse");
            } else {
                tb_table_cell(t, "-");
            }
            if (prev) {
                char *c = changes(prev, p);
                if (c)
                    tb_str_appendf(&notes, "  session %lld: %s: not comparable with the session before\n",
                                   (long long)p->session, c);
                free(c);
            }
            if (isfinite(p->st.median))
                prev = p;
        }
        tb_table_print(t, out);
        tb_table_free(t);
        if (notes.len)
            fprintf(out, "notes:\n%s", notes.s);
        tb_str_free(&notes);
    }
}

static void csv_field(FILE *out, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

void tb_history_csv(const tb_history *h, FILE *out)
{
    fputs("backend,case,metric,unit,session,started_at,commit,version,host,hardware,machine_fingerprint,model,"
          "dtype,plugin_version,status,n,median,p5,p95,mean,stdev,cv,min,max,ci_lo,ci_hi\r\n", out);
    for (size_t i = 0; i < h->n; i++)
        for (size_t k = 0; k < h->s[i].n; k++) {
            const tb_hpoint *p = &h->s[i].p[k];
            const char *text[] = {h->backend, h->s[i].key, h->metric, h->unit};
            for (size_t j = 0; j < TB_ARRAY_LEN(text); j++) {
                csv_field(out, text[j]);
                fputc(',', out);
            }
            fprintf(out, "%lld,", (long long)p->session);
            const char *more[] = {p->started_at, p->commit, p->version, p->host, p->hardware, p->fingerprint,
                                  p->model, p->dtype, p->plugin_version, p->case_status};
            for (size_t j = 0; j < TB_ARRAY_LEN(more); j++) {
                csv_field(out, more[j]);
                fputc(',', out);
            }
            fprintf(out, "%zu", p->st.n);
            const double v[] = {p->st.median, p->st.p5, p->st.p95, p->st.mean, p->st.stdev,
                                p->st.cv,     p->st.min, p->st.max, p->st.ci_lo, p->st.ci_hi};
            for (size_t j = 0; j < TB_ARRAY_LEN(v); j++) {
                if (isfinite(v[j]))
                    fprintf(out, ",%.17g", v[j]);
                else
                    fputc(',', out);
            }
            fputs("\r\n", out);
        }
}

tb_chart *tb_history_chart(const tb_history *h, const size_t *idx, size_t n, const char *title)
{
    /* x: every session of the chosen series in time order. Ids are not
     * (a merged database appends older sessions), so sort the union of
     * sessions by (start time, id). */
    typedef struct {
        const char *started;
        int64_t id;
    } sess;
    sess *u = NULL;
    size_t nu = 0;
    for (size_t j = 0; j < n; j++) {
        const tb_hseries *s = &h->s[idx[j]];
        for (size_t k = 0; k < s->n; k++) {
            size_t i = 0;
            while (i < nu && u[i].id != s->p[k].session)
                i++;
            if (i == nu) {
                u = tb_xrealloc(u, (nu + 1) * sizeof *u);
                u[nu++] = (sess){s->p[k].started_at, s->p[k].session};
            }
        }
    }
    /* Insertion sort by (start, id): a few dozen sessions. */
    for (size_t i = 1; i < nu; i++) {
        sess v = u[i];
        size_t k = i;
        while (k > 0 && (strcmp(u[k - 1].started, v.started) > 0 ||
                         (strcmp(u[k - 1].started, v.started) == 0 && u[k - 1].id > v.id))) {
            u[k] = u[k - 1];
            k--;
        }
        u[k] = v;
    }
    size_t with_value = 0;
    for (size_t j = 0; j < n; j++) {
        size_t c = 0;
        for (size_t k = 0; k < h->s[idx[j]].n; k++)
            c += isfinite(h->s[idx[j]].p[k].st.median);
        if (c > with_value)
            with_value = c;
    }
    if (with_value < 2) {
        free(u);
        return NULL;
    }
    char *ylabel = tb_xasprintf("%s (%s), median", h->metric, h->unit);
    tb_chart *c = tb_chart_new(title, "session (time order)", ylabel);
    free(ylabel);
    double *xs = tb_xmalloc(nu * sizeof *xs);
    char **labels = tb_xmalloc(nu * sizeof *labels);
    for (size_t i = 0; i < nu; i++) {
        xs[i] = (double)i;
        labels[i] = tb_xasprintf("#%lld", (long long)u[i].id);
    }
    tb_chart_x_ticks(c, xs, (const char *const *)labels, nu);
    for (size_t j = 0; j < n; j++) {
        const tb_hseries *s = &h->s[idx[j]];
        int sid = tb_chart_series(c, s->key, TB_SERIES_LINE);
        for (size_t k = 0; k < s->n; k++) {
            size_t x = 0;
            while (x < nu && u[x].id != s->p[k].session)
                x++;
            tb_chart_point_err(c, sid, (double)x, s->p[k].st.median, s->p[k].st.ci_lo, s->p[k].st.ci_hi);
        }
    }
    for (size_t i = 0; i < nu; i++)
        free(labels[i]);
    free(labels);
    free(xs);
    free(u);
    return c;
}

void tb_history_html(const tb_history *h, FILE *out)
{
    char *title = tb_xasprintf("tokbench history: %s of %s", h->metric, h->backend);
    tb_html_begin(out, title);
    fputs("<h1>", out);
    tb_xml_escape(out, title);
    fputs("</h1>\n", out);
    for (size_t i = 0; i < h->n; i++) {
        char *t = tb_xasprintf("%s: %s", h->backend, h->s[i].key);
        tb_chart *c = tb_history_chart(h, &i, 1, t);
        fputs("<section>\n<h2>", out);
        tb_xml_escape(out, t);
        fputs("</h2>\n", out);
        if (c) {
            fputs("<figure class=\"chart\" data-kind=\"history\">\n", out);
            tb_chart_write(c, out);
            fputs("</figure>\n", out);
        } else {
            fputs("<p>Fewer than two sessions have a value: no chart.</p>\n", out);
        }
        tb_chart_free(c);
        free(t);
        fputs("<table>\n<tr><th>session</th><th>started (UTC)</th><th>commit</th><th>version</th><th>host</th>"
              "<th>hardware</th><th>status</th><th>", out);
        tb_xml_escape(out, samples_of(h->metric));
        fputs("</th><th>median</th><th>p5</th><th>p95</th>"
              "<th>95% CI</th></tr>\n", out);
        for (size_t k = 0; k < h->s[i].n; k++) {
            const tb_hpoint *p = &h->s[i].p[k];
            char a[32], b[32], c2[32], d[32], e[32];
            fprintf(out, "<tr><td>%lld</td><td>", (long long)p->session);
            const char *cells[] = {p->started_at, p->commit, p->version, p->host, p->hardware, p->case_status};
            for (size_t j = 0; j < TB_ARRAY_LEN(cells); j++) {
                if (j)
                    fputs("</td><td>", out);
                tb_xml_escape(out, cells[j]);
            }
            fprintf(out, "</td><td class=\"num\">%zu</td><td class=\"num\">%s</td><td class=\"num\">%s</td>"
                         "<td class=\"num\">%s</td><td class=\"num\">%s – %s</td></tr>\n",
                    p->st.n, tb_rfmt(a, sizeof a, p->st.median, 2), tb_rfmt(b, sizeof b, p->st.p5, 2),
                    tb_rfmt(c2, sizeof c2, p->st.p95, 2), tb_rfmt(d, sizeof d, p->st.ci_lo, 2),
                    tb_rfmt(e, sizeof e, p->st.ci_hi, 2));
        }
        fputs("</table>\n</section>\n", out);
    }
    tb_html_end(out);
    free(title);
}
