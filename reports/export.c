/* export.c — see export.h. The rows come from the reader (reader.h);
 * its JSON is assembled by SQLite's JSON functions, so the export is
 * exactly what the tables hold. */
#define _GNU_SOURCE
#include "export.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aup.h"
#include "reader.h"
#include "rsession.h"
#include "store.h"
#include "util.h"

/* RFC 4180: quote when the field holds a comma, quote or line break. */
static void csv_field(tb_str *out, const char *s)
{
    if (!s)
        return;
    if (!strpbrk(s, ",\"\r\n")) {
        tb_str_append(out, s);
        return;
    }
    tb_str_append(out, "\"");
    for (; *s; s++)
        tb_str_appendf(out, *s == '"' ? "\"\"" : "%c", *s);
    tb_str_append(out, "\"");
}

/* What the export parses must parse (tb_store_check_json): a session's
 * row of invalid JSON is an error naming it. */
static int check_session(sqlite3 *db, int64_t session, int with_requests, char **err)
{
    char *bad = NULL;
    if (tb_store_check_json(db, session, with_requests, &bad) == 0)
        return 0;
    *err = tb_xasprintf("export of session %lld: %s", (long long)session, bad);
    free(bad);
    return -1;
}

int tb_export_csv(sqlite3 *db, int64_t session, int requests, FILE *out, char **err)
{
    if (check_session(db, session, 0, err) != 0)
        return -1;
    /* Whole before a byte is written: a read error halfway must not
     * leave a CSV that looks complete. */
    tb_row_table t;
    if ((requests ? tb_read_request_table : tb_read_summary_table)(db, session, &t, err) != 0)
        return -1;
    tb_str b = {0};
    for (size_t i = 0; i < t.n_cols; i++) {
        csv_field(&b, t.names[i]);
        tb_str_append(&b, i + 1 < t.n_cols ? "," : "\r\n");
    }
    for (size_t r = 0; r < t.n_rows; r++)
        for (size_t i = 0; i < t.n_cols; i++) {
            csv_field(&b, t.cells[r * t.n_cols + i]);
            tb_str_append(&b, i + 1 < t.n_cols ? "," : "\r\n");
        }
    fwrite(b.s, 1, b.len, out);
    tb_str_free(&b);
    tb_row_table_free(&t);
    return 0;
}

/* The session's AUP rows (aup.h) as a JSON array: a report-level
 * figure, not a stored row, so the export adds it to what SQLite built. */
static char *aup_json(const tb_rsession *s)
{
    tb_aup_rows a;
    tb_aup_session(s, &a);
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < a.n; i++) {
        const tb_aup_row *x = &a.v[i];
        cJSON *o = cJSON_CreateObject(), *pts = cJSON_CreateArray();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "backend", s->backends[x->backend].label);
        cJSON_AddStringToObject(o, "condition", x->condition);
        cJSON_AddNumberToObject(o, "aup", x->aup);
        cJSON_AddNumberToObject(o, "y_max_pct", x->y_max);
        cJSON_AddItemToObject(o, "points", pts);
        for (size_t k = 0; pts && k < x->n_pts; k++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddItemToArray(pts, p);
            cJSON_AddNumberToObject(p, "case", x->pts[k].ordinal);
            cJSON_AddNumberToObject(p, "tokens_per_forward", x->pts[k].rho);
            cJSON_AddNumberToObject(p, "accuracy_pct", x->pts[k].y);
            cJSON_AddBoolToObject(p, "used", x->pts[k].used);
        }
    }
    tb_aup_rows_free(&a);
    char *text = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return text;
}

int tb_export_json(sqlite3 *db, int64_t session, FILE *out, char **err)
{
    char *json;
    if (tb_read_session_json(db, session, &json, err) != 0)
        return -1;
    tb_rsession s;
    if (tb_rsession_load(db, session, &s, err) != 0) {
        free(json);
        return -1;
    }
    char *aup = aup_json(&s);
    tb_rsession_free(&s);
    size_t n = strlen(json);
    while (n && (json[n - 1] == '\n' || json[n - 1] == ' '))
        n--;
    if (!aup || !n || json[n - 1] != '}') { /* SQLite's json_object() always ends so */
        *err = tb_xasprintf("session %lld: exporting JSON: %s", (long long)session,
                            aup ? "the session's JSON is not an object" : "out of memory");
        free(aup);
        free(json);
        return -1;
    }
    /* "aup": the accuracy-under-parallelism rows (docs/METRICS.md) */
    fwrite(json, 1, n - 1, out);
    fprintf(out, "%s\"aup\":%s}\n", n > 2 ? "," : "", aup);
    free(aup);
    free(json);
    return 0;
}

/* ------------------------------------------------ AIPerf and vLLM's files
 *
 * Each maps the figures both tools define as tokbench does, from the
 * stored metric rows of one case (its measured repetitions), under their
 * field names; docs/REPORTS.md lists what is left out and why. One case
 * is one tool run (one load setting), as either tool writes one file per
 * run: the export is an array of one document per case, or the one
 * document of `--case N`.
 *
 * AIPerf: profile_export_aiperf.json, its fields and JsonMetricResult's
 * keys (unit, avg, p1..p99, min, max, std) from
 * aiperf/common/models/export_models.py of ai-dynamo/aiperf at
 * 0a791e34642bb4d8e315ab09fc5b0f8da48e4bb8; its inter_token_latency is
 * (request_latency - ttft) / (osl - 1)
 * (aiperf/metrics/types/inter_token_latency_metric.py): tokbench's TPOT.
 *
 * vLLM: `vllm bench serve --save-result`, the result dict of
 * vllm/benchmarks/serve.py of vllm-project/vllm at
 * 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1: completed, failed,
 * request_throughput, output_throughput, and mean_/median_/pNN_ X _ms for
 * X in ttft, tpot, itl, e2el. */

typedef struct export_case {
    const tb_row_case *c;
    const tb_row_metric *m; /* its metrics */
    size_t n_m;
} export_case;

static const tb_stats *case_metric(const export_case *x, const char *name)
{
    for (size_t i = 0; i < x->n_m; i++)
        if (strcmp(x->m[i].name, name) == 0 && x->m[i].st.n > 0)
            return &x->m[i].st;
    return NULL;
}

/* A number, or null for NaN (JSON has no NaN). */
static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* Where the document came from: extra keys both tools' readers ignore. */
static cJSON *provenance(int64_t session, const export_case *x)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "session", (double)session);
    cJSON_AddNumberToObject(o, "case", x->c->ordinal);
    cJSON_AddStringToObject(o, "backend", x->c->backend);
    cJSON_AddStringToObject(o, "status", x->c->status);
    const tb_case *d = &x->c->dims;
    cJSON_AddNumberToObject(o, "prompt_tokens", d->prompt_tokens);
    cJSON_AddNumberToObject(o, "max_new_tokens", d->max_new_tokens);
    cJSON_AddNumberToObject(o, "batch", d->batch);
    if (d->concurrency)
        cJSON_AddNumberToObject(o, "concurrency", d->concurrency);
    if (d->request_rate > 0)
        cJSON_AddNumberToObject(o, "request_rate", d->request_rate);
    return o;
}

static void aiperf_metric(cJSON *doc, const char *tag, const char *unit, const tb_stats *st)
{
    if (!st)
        return;
    cJSON *o = cJSON_AddObjectToObject(doc, tag);
    cJSON_AddStringToObject(o, "unit", unit);
    add_num(o, "avg", st->mean);
    add_num(o, "p5", st->p5);
    add_num(o, "p50", st->median);
    add_num(o, "p90", st->p90);
    add_num(o, "p95", st->p95);
    add_num(o, "p99", st->p99);
    add_num(o, "min", st->min);
    add_num(o, "max", st->max);
}

/* A figure AIPerf computes once over its run (avg only): tokbench's
 * median over the case's calls. */
static void aiperf_scalar(cJSON *doc, const char *tag, const char *unit, double v)
{
    if (!isfinite(v))
        return;
    cJSON *o = cJSON_AddObjectToObject(doc, tag);
    cJSON_AddStringToObject(o, "unit", unit);
    cJSON_AddNumberToObject(o, "avg", v);
}

static cJSON *aiperf_doc(int64_t session, const export_case *x)
{
    cJSON *doc = cJSON_CreateObject();
    const tb_stats *rt = case_metric(x, "req_throughput"), *ot = case_metric(x, "agg_tps");
    aiperf_scalar(doc, "request_throughput", "requests/sec", rt ? rt->median : NAN);
    aiperf_metric(doc, "request_latency", "ms", case_metric(x, "e2e_ms"));
    if (x->c->requests >= 0)
        aiperf_scalar(doc, "request_count", "requests", (double)(x->c->requests - x->c->failed_requests));
    if (x->c->failed_requests > 0)
        aiperf_scalar(doc, "error_request_count", "requests", (double)x->c->failed_requests);
    aiperf_metric(doc, "time_to_first_token", "ms", case_metric(x, "ttft_ms"));
    aiperf_metric(doc, "inter_token_latency", "ms", case_metric(x, "tpot_ms"));
    aiperf_scalar(doc, "output_token_throughput", "tokens/sec", ot ? ot->median : NAN);
    aiperf_metric(doc, "input_sequence_length", "tokens", case_metric(x, "prompt_len"));
    cJSON_AddItemToObject(doc, "tokbench", provenance(session, x));
    return doc;
}

static cJSON *vllm_doc(int64_t session, const export_case *x)
{
    cJSON *doc = cJSON_CreateObject();
    if (x->c->requests >= 0) {
        cJSON_AddNumberToObject(doc, "completed", x->c->requests - x->c->failed_requests);
        cJSON_AddNumberToObject(doc, "failed", x->c->failed_requests);
    }
    const tb_stats *rt = case_metric(x, "req_throughput"), *ot = case_metric(x, "agg_tps");
    add_num(doc, "request_throughput", rt ? rt->median : NAN);
    add_num(doc, "output_throughput", ot ? ot->median : NAN);
    static const char *const pairs[][2] = {
        {"ttft", "ttft_ms"}, {"tpot", "tpot_ms"}, {"itl", "itl_ms"}, {"e2el", "e2e_ms"}};
    for (size_t k = 0; k < TB_ARRAY_LEN(pairs); k++) {
        const tb_stats *st = case_metric(x, pairs[k][1]);
        if (!st)
            continue;
        char key[32];
        snprintf(key, sizeof key, "mean_%s_ms", pairs[k][0]);
        add_num(doc, key, st->mean);
        snprintf(key, sizeof key, "median_%s_ms", pairs[k][0]);
        add_num(doc, key, st->median);
        snprintf(key, sizeof key, "p90_%s_ms", pairs[k][0]);
        add_num(doc, key, st->p90);
        snprintf(key, sizeof key, "p99_%s_ms", pairs[k][0]);
        add_num(doc, key, st->p99);
    }
    cJSON_AddItemToObject(doc, "tokbench", provenance(session, x));
    return doc;
}

int tb_export_tool(sqlite3 *db, int64_t session, const char *tool, int case_ordinal, FILE *out, char **err)
{
    if (check_session(db, session, 0, err) != 0)
        return -1;
    tb_row_case *cases = NULL;
    tb_row_metric *metrics = NULL;
    size_t n_cases = 0, n_metrics = 0;
    if (tb_read_cases(db, session, &cases, &n_cases, err) != 0)
        return -1;
    if (tb_read_metrics(db, session, &metrics, &n_metrics, err) != 0) {
        tb_row_cases_free(cases, n_cases);
        return -1;
    }
    cJSON *arr = cJSON_CreateArray(), *one = NULL;
    for (size_t i = 0; i < n_cases; i++) {
        if (case_ordinal > 0 && cases[i].ordinal != case_ordinal)
            continue;
        export_case x = {.c = &cases[i]};
        /* metrics come in case ordinal order: this case's run */
        for (size_t k = 0; k < n_metrics; k++)
            if (metrics[k].case_id == cases[i].id) {
                if (!x.m)
                    x.m = &metrics[k];
                x.n_m++;
            }
        cJSON *doc = strcmp(tool, "aiperf") == 0 ? aiperf_doc(session, &x) : vllm_doc(session, &x);
        if (case_ordinal > 0)
            one = doc;
        else
            cJSON_AddItemToArray(arr, doc);
    }
    tb_row_cases_free(cases, n_cases);
    tb_row_metrics_free(metrics, n_metrics);
    if (case_ordinal > 0) {
        cJSON_Delete(arr);
        if (!one) {
            *err = tb_xasprintf("session %lld has no case %d", (long long)session, case_ordinal);
            return -1;
        }
        arr = one;
    }
    char *text = cJSON_Print(arr);
    cJSON_Delete(arr);
    fputs(text, out);
    fputc('\n', out);
    cJSON_free(text);
    return 0;
}
