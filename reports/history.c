/* history.c — see history.h. */
#define _GNU_SOURCE
#include "history.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "html_page.h"
#include "metrics.h"
#include "rsession.h"
#include "reader.h"
#include "store.h"
#include "text_table.h"
#include "util.h"

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
    int found = tb_read_backend_exists(db, label, err);
    if (found < 0)
        return -2;
    if (!found) {
        char *known = tb_read_backend_labels(db);
        *err = tb_xasprintf("no backend \"%s\" in any session (known: %s)", label, *known ? known : "none");
        free(known);
        return -1;
    }
    found = tb_read_metric_unit(db, label, metric, &out->unit, err);
    if (found < 0)
        return -2;
    if (!found) {
        char *known = tb_read_metric_names(db, label);
        *err = tb_xasprintf("backend \"%s\" has no metric \"%s\" (known: %s)", label, metric,
                            *known ? known : "none: no case of it ran");
        free(known);
        return -1;
    }

    tb_row_history *rows;
    size_t n;
    int rc = tb_read_history(db, label, metric, filters, n_filters, &rows, &n, err);
    if (rc != 0) {
        tb_history_free(out);
        return rc;
    }
    tb_str left = {0};
    for (size_t r = 0; r < n; r++) {
        tb_row_history *h = &rows[r];
        /* A shard's own session whose run a joined session here pools:
         * its load is in that session's figures; said once a session. */
        if (h->shard_index >= 0 && h->joined_in >= 0) {
            char *one = tb_xasprintf("#%lld (joined in #%lld)", (long long)h->session, (long long)h->joined_in);
            if (!left.len || !strstr(left.s, one))
                tb_str_appendf(&left, "%s%s", left.len ? ", " : "", one);
            free(one);
            continue;
        }
        /* The case's key, built as the report builds it. */
        tb_rcase k = {.dims = h->dims, .options_json = h->options_json};
        char *prompt = tb_rprompt_text(h->backend_options_json, h->prompt_len_mean);
        char *key = tb_rcase_key_prompt(&k, prompt);
        free(prompt);
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
        s->p[s->n++] = (tb_hpoint){
            .session = h->session,
            .started_at = h->started_at,
            .commit = h->commit,
            .version = h->version,
            .session_status = h->session_status,
            .host = h->host,
            .hardware = h->hardware,
            .fingerprint = h->fingerprint,
            .model = h->model,
            .dtype = h->dtype,
            .plugin_version = h->plugin_version,
            .case_status = h->case_status,
            .options_json = h->backend_options_json,
            .config_sha256 = h->config_sha256,
            .config_json = h->config_json,
            .st = h->st,
            .shard_index = h->shard_index,
            .shard_count = h->shard_count,
        };
        free(h->options_json);
        memset(h, 0, sizeof *h); /* its strings taken */
    }
    tb_row_history_free(rows, n);
    out->left_out = left.len ? tb_str_take(&left) : NULL;
    tb_str_free(&left);
    if (out->n == 0) {
        *err = tb_xasprintf("no case of backend \"%s\" matches the filters", label);
        tb_history_free(out);
        return -1;
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
    free(h->left_out);
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
    char wa[64], wb[64];
    if (strcmp(tb_rshard_words(prev->shard_index, prev->shard_count, wa, sizeof wa),
               tb_rshard_words(p->shard_index, p->shard_count, wb, sizeof wb)) != 0)
        tb_str_appendf(&b, "shards %s -> %s", wa, wb);
    if (strcmp(prev->fingerprint, p->fingerprint) != 0)
        tb_str_appendf(&b, "%smachine %s (%s) -> %s (%s)", b.len ? "; " : "", prev->host, prev->hardware, p->host,
                       p->hardware);
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

/* The status column: the case's, with what load a sharded session
 * measured ("ok, 2 shards joined", "ok, shard 1 of 2"). */
static char *status_text(const tb_hpoint *p)
{
    char w[64];
    if (p->shard_count <= 0)
        return tb_xstrdup(p->case_status);
    return tb_xasprintf("%s, %s", p->case_status, tb_rshard_words(p->shard_index, p->shard_count, w, sizeof w));
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
            char *status = status_text(p);
            tb_table_cell(t, status);
            free(status);
            tb_table_cellf(t, "%zu", p->st.n);
            tb_table_num(t, p->st.median, 2);
            tb_table_num(t, p->st.p5, 2);
            tb_table_num(t, p->st.p95, 2);
            if (isfinite(p->st.ci_lo))
                tb_table_cellf(t, "[%.2f, %.2f]", p->st.ci_lo, p->st.ci_hi);
            else
                tb_table_cell(t, "-");
            int share = p->shard_index >= 0; /* a shard's own session: a share of the load */
            if (!share && prev && isfinite(prev->st.median) && isfinite(p->st.median) && prev->st.median != 0) {
                double pct = (p->st.median / prev->st.median - 1) * 100;
                int better = dir == TB_BETTER_HIGHER ? pct > 0 : pct < 0;
                tb_table_cellf(t, "%+.1f%%%s", pct,
                               fabs(pct) < 0.05 || dir == TB_BETTER_NONE ? "" : better ? " better" : " worse");
            } else {
                tb_table_cell(t, "-");
            }
            if (share) {
                char w[64];
                tb_str_appendf(&notes, "  session %lld: %s, not joined here: its share of the load, compared with "
                                       "no session\n",
                               (long long)p->session, tb_rshard_words(p->shard_index, p->shard_count, w, sizeof w));
            } else if (prev) {
                char *c = changes(prev, p);
                if (c)
                    tb_str_appendf(&notes, "  session %lld: %s: not comparable with the session before\n",
                                   (long long)p->session, c);
                free(c);
            }
            if (isfinite(p->st.median) && !share)
                prev = p;
        }
        tb_table_print(t, out);
        tb_table_free(t);
        if (notes.len)
            fprintf(out, "notes:\n%s", notes.s);
        tb_str_free(&notes);
    }
    if (h->left_out)
        fprintf(out, "\nleft out: shard sessions %s, whose load the joined session's figures pool\n", h->left_out);
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
          "dtype,plugin_version,status,n,median,p5,p95,mean,stdev,cv,min,max,ci_lo,ci_hi,shards\r\n", out);
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
            char w[64];
            fputc(',', out);
            csv_field(out, tb_rshard_words(p->shard_index, p->shard_count, w, sizeof w));
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
            char *status = status_text(p);
            const char *cells[] = {p->started_at, p->commit, p->version, p->host, p->hardware, status};
            for (size_t j = 0; j < TB_ARRAY_LEN(cells); j++) {
                if (j)
                    fputs("</td><td>", out);
                tb_xml_escape(out, cells[j]);
            }
            free(status);
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
