/* rsession.c — see rsession.h. Everything is read with a few queries. */
#define _GNU_SOURCE
#include "rsession.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "store.h"
#include "util.h"

static void kv_add(tb_rkvs *k, const char *key, char *value /* taken */)
{
    k->v = tb_xrealloc(k->v, (k->n + 1) * sizeof *k->v);
    k->v[k->n++] = (tb_rkv){tb_xstrdup(key), value};
}

static void kvs_free(tb_rkvs *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->v[i].key);
        free(k->v[i].value);
    }
    free(k->v);
}


/* ------------------------------------------------------ JSON diff */

/* A value as a person reads it: strings bare, the rest as JSON. */
static char *json_text(const cJSON *v)
{
    if (!v)
        return tb_xstrdup("(none)");
    if (cJSON_IsString(v))
        return tb_xstrdup(v->valuestring);
    char *t = cJSON_PrintUnformatted(v);
    char *r = tb_xstrdup(t ? t : "?");
    free(t);
    return r;
}

typedef struct diff_ctx {
    const char *lead, *prefix, *sep, *tail;
    tb_str *out;
    int n;
} diff_ctx;

/* Keys of a (then those only b has) whose values differ; `at` is the
 * flattened path so far. */
static void diff_objects(const cJSON *a, const cJSON *b, const char *at, diff_ctx *d)
{
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *from = pass ? b : a, *other = pass ? a : b, *it;
        cJSON_ArrayForEach(it, from)
        {
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(other, it->string);
            if (pass && o)
                continue; /* compared in the first pass */
            char *key = *at ? tb_xasprintf("%s.%s", at, it->string) : tb_xstrdup(it->string);
            const cJSON *va = pass ? o : it, *vb = pass ? it : o;
            if (cJSON_IsObject(va) && cJSON_IsObject(vb)) {
                diff_objects(va, vb, key, d);
            } else if (!va || !vb || !cJSON_Compare(va, vb, 1)) {
                char *ta = json_text(va), *tb = json_text(vb);
                tb_str_appendf(d->out, "%s%s%s: %s%s%s%s", d->lead, d->prefix, key, ta, d->sep, tb, d->tail);
                free(ta);
                free(tb);
                d->n++;
            }
            free(key);
        }
    }
}

int tb_rjson_diff(const char *a, const char *b, const char *lead, const char *prefix, const char *sep,
                  const char *tail, tb_str *out)
{
    cJSON *ja = a ? cJSON_Parse(a) : NULL, *jb = b ? cJSON_Parse(b) : NULL;
    diff_ctx d = {lead, prefix, sep, tail, out, 0};
    if (cJSON_IsObject(ja) && cJSON_IsObject(jb))
        diff_objects(ja, jb, "", &d);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return d.n;
}

char *tb_rjson_part(const char *json, const char *const *path, size_t depth)
{
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return NULL;
    }
    const cJSON *o = j;
    for (size_t i = 0; o && i < depth; i++)
        o = cJSON_GetObjectItemCaseSensitive(o, path[i]);
    char *t = cJSON_IsObject(o) ? cJSON_PrintUnformatted(o) : NULL;
    char *r = tb_xstrdup(t ? t : "{}");
    free(t);
    cJSON_Delete(j);
    return r;
}

const char *tb_rfmt(char *buf, size_t size, double v, int prec)
{
    if (!isfinite(v))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.*f", prec, v);
    return buf;
}

/* ---------------------------------------------------------- session */

/* A shard of a run split over machines, or the session joining them
 * (migration 8): which, and on what clocks. Nothing for other sessions. */
static void shard_conditions(const tb_row_session *r, tb_rkvs *k)
{
    if (r->shard_count < 0)
        return;
    const char *at = *r->start_at ? r->start_at : "?";
    if (r->shard_index < 0)
        kv_add(k, "shards", tb_xasprintf("%lld shards joined by db merge, started at %s; hosts and clock offsets "
                                         "from shard 0: %s", (long long)r->shard_count, at,
                                         *r->shard_hosts ? r->shard_hosts : "?"));
    else
        kv_add(k, "shards", tb_xasprintf("shard %lld of %lld (0-based), started at %s, %.1f ms late",
                                         (long long)r->shard_index, (long long)r->shard_count, at,
                                         (double)r->start_late_ns * 1e-6));
}

static int load_session(sqlite3 *db, int64_t id, tb_rsession *s, char **err)
{
    tb_row_session r;
    int rc = tb_read_session(db, id, &r, err);
    if (rc != 0) {
        if (rc > 0)
            *err = tb_xasprintf("no session %lld (see tokbench sessions)", (long long)id);
        return -1;
    }
    s->id = id;
    s->uuid = tb_xstrdup(r.uuid);
    s->suite_name = tb_xstrdup(r.suite_name);
    s->suite_sha256 = tb_xstrdup(r.suite_sha256);
    s->suite_text = tb_xstrdup(r.suite_text);
    s->git_commit = tb_xstrdup(r.git_commit);
    s->started_at = tb_xstrdup(r.started_at);
    s->status = tb_xstrdup(r.status);
    s->warmup = r.warmup;
    s->repeat = r.repeat;
    s->hostname = tb_xstrdup(r.hostname);
    s->has_prompt_set = r.prompt_set_path != NULL;
    s->config_sha256 = tb_xstrdup(r.config_sha256);
    s->config_json = tb_xstrdup(r.config_json);
    s->shard_index = r.shard_index;
    s->shard_count = r.shard_count;
    s->shard_window_lag_ns = r.shard_window_lag_ns;

    tb_rkvs *k = &s->session;
    kv_add(k, "session", tb_xasprintf("%lld (%s)", (long long)id, s->uuid));
    kv_add(k, "suite", tb_xasprintf("%s (%s)", s->suite_name, r.suite_path));
    kv_add(k, "suite sha256", tb_xstrdup(r.suite_sha256)); /* of the text as written */
    /* of what it resolved to: options and matrix after includes and ${ENV} */
    kv_add(k, "configuration sha256",
           tb_xstrdup(*s->config_sha256 ? s->config_sha256 : "(not recorded: a session before schema 6)"));
    kv_add(k, "status", tb_xstrdup(r.status));
    kv_add(k, "started (UTC)", tb_xstrdup(r.started_at));
    kv_add(k, "finished (UTC)", tb_xstrdup(*r.finished_at ? r.finished_at : "(not finished)"));
    kv_add(k, "tokbench", tb_xasprintf("%s (commit %s)", r.tokbench_version, s->git_commit));
    kv_add(k, "compiler", tb_xstrdup(r.compiler));
    kv_add(k, "CUDA toolkit (build)", tb_xstrdup(r.cuda_build_version));
    kv_add(k, "command line", tb_xstrdup(r.command_line));
    kv_add(k, "runs", tb_xasprintf("%d warm-up (excluded), %d measured%s, seed %lld", s->warmup, s->repeat,
                                   s->has_prompt_set ? " (passes over the prompt set)" : "", (long long)r.seed));
    if (s->has_prompt_set)
        kv_add(k, "prompt set", tb_xasprintf("%s (sha256 %s)", r.prompt_set_path,
                                             r.prompt_set_sha256 ? r.prompt_set_sha256 : "?"));
    shard_conditions(&r, k);

    k = &s->machine;
    kv_add(k, "host", tb_xstrdup(r.hostname));
    kv_add(k, "CPU", tb_xasprintf("%s (%d logical CPUs)", r.cpu_model, r.cpu_cores));
    kv_add(k, "RAM", tb_xasprintf("%.1f GiB", r.ram_bytes / (1u << 30)));
    kv_add(k, "OS", tb_xasprintf("%s, kernel %s, %s", r.os, r.kernel, r.arch));
    if (r.gpu_count > 0) {
        kv_add(k, "GPU", tb_xasprintf("%d × %s, %.1f GiB, compute capability %s", r.gpu_count,
                                      *r.gpu_name ? r.gpu_name : "none", r.gpu_memory_bytes / (1u << 30),
                                      *r.compute_capability ? r.compute_capability : "-"));
        kv_add(k, "GPU driver", tb_xasprintf("%s (CUDA driver %s)", *r.gpu_driver ? r.gpu_driver : "-",
                                             *r.cuda_driver_version ? r.cuda_driver_version : "-"));
    } else {
        kv_add(k, "GPU", tb_xasprintf("none (%s)", r.nvml_status));
    }
    /* its first 16 characters (a merged or hand-made one may be shorter) */
    kv_add(k, "fingerprint", tb_xasprintf("%.16s", r.fingerprint));
    tb_row_session_free(&r);
    return 0;
}

/* ---------------------------------------------------------- backends */

/* One "key: value" per field of a JSON object, values as JSON text.
 * 0, or -1 (the caller says what it was reading). */
static int json_fields(sqlite3 *db, const char *json, const char *prefix, tb_rkvs *k)
{
    tb_row_field *f;
    size_t n;
    char *err = NULL;
    if (tb_read_json_fields(db, json, &f, &n, &err) != 0) {
        free(err);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char *key = tb_xasprintf("%s%s", prefix, f[i].key);
        kv_add(k, key, tb_xstrdup(f[i].value));
        free(key);
    }
    tb_row_fields_free(f, n);
    return 0;
}

static int load_backends(sqlite3 *db, tb_rsession *s, char **err)
{
    tb_row_backend *rows;
    size_t n;
    if (tb_read_backends(db, s->id, &rows, &n, err) != 0)
        return -1;
    int fields = 0;
    for (size_t i = 0; i < n && fields == 0; i++) {
        const tb_row_backend *r = &rows[i];
        s->backends = tb_xrealloc(s->backends, (s->n_backends + 1) * sizeof *s->backends);
        tb_rbackend *b = &s->backends[s->n_backends++];
        memset(b, 0, sizeof *b);
        b->label = tb_xstrdup(r->label);
        b->plugin = tb_xstrdup(r->plugin);
        b->plugin_version = tb_xstrdup(r->plugin_version);
        b->model = tb_xstrdup(r->model);
        b->capabilities = tb_xstrdup(r->capabilities);
        b->options_json = tb_xstrdup(r->options_json);
        b->info_json = tb_xstrdup(r->info_json ? r->info_json : "");
        b->dtype = tb_xstrdup(r->dtype);
        b->device = tb_xstrdup(r->device);
        b->random_weights = r->random_weights;
        kv_add(&b->info, "plugin", tb_xasprintf("%s %s (ABI %d, %s)", b->plugin, b->plugin_version, r->abi_major,
                                                r->plugin_path));
        kv_add(&b->info, "model", tb_xstrdup(b->model));
        kv_add(&b->info, "dtype", tb_xstrdup(*b->dtype ? b->dtype : "(not reported)"));
        kv_add(&b->info, "device", tb_xstrdup(*b->device ? b->device : "(not reported)"));
        kv_add(&b->info, "random weights",
               tb_xstrdup(b->random_weights == 1   ? "YES: speed only, the outputs mean nothing"
                          : b->random_weights == 0 ? "no"
                                                   : "(not reported)"));
        kv_add(&b->info, "capabilities", tb_xstrdup(b->capabilities));
        fields = json_fields(db, r->options_json, "option ", &b->info);
        if (fields == 0)
            fields = json_fields(db, r->info_json, "", &b->info);
    }
    tb_row_backends_free(rows, n);
    if (fields != 0) {
        char *what = tb_xasprintf("the backends of session %lld", (long long)s->id);
        *err = tb_read_error(db, s->id, what);
        free(what);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------- cases */

/* Display order: the registry's (metrics.h), then the rest. */
static int metric_rank(const char *name)
{
    const tb_metric_def *d = tb_metric_find(name);
    return d ? (int)(d - tb_metric_defs) : (int)tb_n_metric_defs;
}

static int cmp_metric(const void *a, const void *b)
{
    const tb_rmetric *x = a, *y = b;
    int rx = metric_rank(x->name), ry = metric_rank(y->name);
    if (rx != ry)
        return rx - ry;
    /* draft positions in number order: acceptance_at_2 before _10 */
    size_t p = strlen(TB_ACCEPTANCE_AT_PREFIX), lx = strlen(x->name), ly = strlen(y->name);
    if (lx != ly && strncmp(x->name, TB_ACCEPTANCE_AT_PREFIX, p) == 0 &&
        strncmp(y->name, TB_ACCEPTANCE_AT_PREFIX, p) == 0)
        return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Index of backend `label` in s, or s->n_backends. */
static size_t backend_index(const tb_rsession *s, const char *label)
{
    size_t bi = 0;
    while (bi < s->n_backends && strcmp(s->backends[bi].label, label) != 0)
        bi++;
    return bi;
}

/* The session's load searches, with their limits from limits_json. */
static int load_searches(sqlite3 *db, tb_rsession *s, char **err)
{
    tb_row_search *rows;
    size_t n;
    if (tb_read_searches(db, s->id, &rows, &n, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const tb_row_search *r = &rows[i];
        size_t bi = backend_index(s, r->backend);
        if (bi == s->n_backends)
            continue; /* the join found it: cannot happen */
        s->searches = tb_xrealloc(s->searches, (s->n_searches + 1) * sizeof *s->searches);
        s->searches[s->n_searches++] = (tb_rsearch){
            .id = r->id,
            .backend = bi,
            .ordinal = r->ordinal,
            .kind = tb_xstrdup(r->kind),
            .status = tb_xstrdup(r->status),
            .limits_json = tb_xstrdup(r->limits_json),
            .sync_rate = r->sync_rate,
            .max_rate = r->max_rate,
            .slo_rate = r->slo_rate,
            .ttft_p99_ms = r->ttft_p99_ms,
            .tpot_p99_ms = r->tpot_p99_ms,
            .goodput_pct = r->goodput_pct,
            .error = r->error ? tb_xstrdup(r->error) : NULL,
        };
    }
    tb_row_searches_free(rows, n);
    return 0;
}

static int load_cases(sqlite3 *db, tb_rsession *s, char **err)
{
    tb_row_case *rows;
    size_t n;
    if (tb_read_cases(db, s->id, &rows, &n, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        tb_row_case *r = &rows[i];
        size_t bi = backend_index(s, r->backend);
        if (bi == s->n_backends) { /* the join found it: cannot happen, but never index past the backends */
            *err = tb_xasprintf("reading the cases of session %lld: case #%d names backend %s, which the session "
                                "does not have", (long long)s->id, r->ordinal, r->backend);
            tb_row_cases_free(rows, n);
            return -1;
        }
        s->cases = tb_xrealloc(s->cases, (s->n_cases + 1) * sizeof *s->cases);
        tb_rcase *c = &s->cases[s->n_cases++];
        *c = (tb_rcase){
            .id = r->id,
            .ordinal = r->ordinal,
            .backend = bi,
            .dims = r->dims,
            .options_json = r->options_json,
            .status = r->status,
            .error = r->error,
            .peak_device_mib = r->peak_device_mib,
            .host_rss_mib = r->host_rss_mib,
            .energy_j_per_token = r->energy_j_per_token,
            .varying_outputs = r->varying_outputs,
            .text_requests = r->text_requests,
            .text_count = r->text_count,
            .text_recount = r->text_recount,
            .requests = r->requests,
            .failed_requests = r->failed_requests,
            .search_id = r->search_id,
            .search_role = r->search_role,
            .search_pass = r->search_pass,
            .scrapes = r->scrapes,
            .scrapes_failed = r->scrapes_failed,
            .scrape_error = r->scrape_error,
            .telemetry_unmatched = r->telemetry_unmatched,
        };
        memcpy(c->count_mismatches, r->count_mismatches, sizeof c->count_mismatches);
        r->options_json = r->status = r->error = r->search_role = r->scrape_error = NULL; /* taken */
        r->telemetry_unmatched = NULL;
        for (int d = 0; d < TB_N_DIMS; d++)
            if (tb_dim_defs[d].column && !tb_case_dim_absent(&c->dims, (tb_dim)d))
                s->dims |= TB_RDIM(d);
        if (strcmp(c->options_json, "{}") != 0)
            s->dims |= TB_RDIM_OPTS;
        if (!tb_case_dim_absent(&c->dims, TB_DIM_STEPS))
            s->backends[c->backend].has_steps = 1;
    }
    tb_row_cases_free(rows, n);

    tb_row_request_error *es;
    if (tb_read_first_errors(db, s->id, &es, &n, err) != 0)
        return -1;
    for (size_t k = 0; k < n; k++) { /* few: at most a row per class per case */
        size_t ci = 0;
        while (ci < s->n_cases && s->cases[ci].id != es[k].case_id)
            ci++;
        if (ci == s->n_cases)
            continue;
        size_t cls = tb_error_class(es[k].error);
        if (!s->cases[ci].first_error[cls]) { /* unknown words are all "other": the first */
            s->cases[ci].first_error[cls] = es[k].error;
            es[k].error = NULL; /* taken */
        }
    }
    tb_row_request_errors_free(es, n);

    tb_row_metric *ms;
    if (tb_read_metrics(db, s->id, &ms, &n, err) != 0)
        return -1;
    size_t ci = 0;
    for (size_t k = 0; k < n; k++) {
        while (ci < s->n_cases && s->cases[ci].id != ms[k].case_id)
            ci++;
        if (ci == s->n_cases)
            break; /* ordered like the cases: cannot happen */
        tb_rcase *c = &s->cases[ci];
        c->metrics = tb_xrealloc(c->metrics, (c->n_metrics + 1) * sizeof *c->metrics);
        c->metrics[c->n_metrics++] = (tb_rmetric){ms[k].name, ms[k].unit, ms[k].st};
        ms[k].name = ms[k].unit = NULL; /* taken */
    }
    tb_row_metrics_free(ms, n);
    for (size_t i = 0; i < s->n_cases; i++) {
        tb_rcase *c = &s->cases[i];
        if (c->n_metrics)
            qsort(c->metrics, c->n_metrics, sizeof *c->metrics, cmp_metric);
        if (tb_rcase_quality(c))
            s->has_quality = 1;
        if (tb_rcase_spec(c))
            s->has_spec = 1;
    }
    return 0;
}

int tb_rsession_load(sqlite3 *db, int64_t id, tb_rsession *out, char **err)
{
    memset(out, 0, sizeof *out);
    *err = NULL;
    /* What a reader parses must parse: a row of invalid JSON (merged
     * from elsewhere, written by hand) is an error naming it, never
     * silently no data. Requests' emissions are checked when read. */
    char *bad = NULL;
    if (tb_store_check_json(db, id, 0, &bad) != 0) {
        *err = tb_xasprintf("session %lld: %s", (long long)id, bad);
        free(bad);
        return -1;
    }
    if (load_session(db, id, out, err) != 0 || load_backends(db, out, err) != 0 || load_cases(db, out, err) != 0 ||
        load_searches(db, out, err) != 0) {
        tb_rsession_free(out);
        return -1;
    }
    return 0;
}

const tb_rsearch *tb_rcase_search(const tb_rsession *s, const tb_rcase *c)
{
    for (size_t i = 0; c->search_id && i < s->n_searches; i++)
        if (s->searches[i].id == c->search_id)
            return &s->searches[i];
    return NULL;
}

void tb_rsession_free(tb_rsession *s)
{
    for (size_t i = 0; i < s->n_searches; i++) {
        free(s->searches[i].kind);
        free(s->searches[i].status);
        free(s->searches[i].limits_json);
        free(s->searches[i].error);
    }
    free(s->searches);
    free(s->uuid);
    free(s->suite_name);
    free(s->suite_text);
    free(s->suite_sha256);
    free(s->config_sha256);
    free(s->config_json);
    free(s->started_at);
    free(s->status);
    free(s->git_commit);
    free(s->hostname);
    kvs_free(&s->session);
    kvs_free(&s->machine);
    for (size_t i = 0; i < s->n_backends; i++) {
        tb_rbackend *b = &s->backends[i];
        free(b->label);
        free(b->plugin);
        free(b->plugin_version);
        free(b->model);
        free(b->capabilities);
        free(b->options_json);
        free(b->info_json);
        free(b->dtype);
        free(b->device);
        kvs_free(&b->info);
    }
    free(s->backends);
    for (size_t i = 0; i < s->n_cases; i++) {
        tb_rcase *c = &s->cases[i];
        free(c->options_json);
        free(c->status);
        free(c->error);
        free(c->search_role);
        free(c->scrape_error);
        free(c->telemetry_unmatched);
        for (size_t k = 0; k < 16; k++)
            free(c->first_error[k]);
        for (size_t k = 0; k < c->n_metrics; k++) {
            free(c->metrics[k].name);
            free(c->metrics[k].unit);
        }
        free(c->metrics);
    }
    free(s->cases);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------- queries */

int tb_rcase_cut_off(const tb_rsession *s, const tb_rcase *c)
{
    const tb_rsearch *x = tb_rcase_search(s, c);
    if (!x || !c->search_role || strcmp(c->search_role, "probe") != 0)
        return 0;
    if (c->search_pass < 0)
        return 1;
    if (strcmp(x->status, "interrupted") != 0 || strcmp(c->status, "failed") != 0)
        return 0;
    for (size_t i = 0; i < s->n_cases; i++) /* its search's last run? */
        if (s->cases[i].search_id == c->search_id && s->cases[i].ordinal > c->ordinal)
            return 0;
    return 1;
}

const tb_stats *tb_rcase_metric(const tb_rcase *c, const char *name)
{
    for (size_t i = 0; i < c->n_metrics; i++)
        if (strcmp(c->metrics[i].name, name) == 0)
            return &c->metrics[i].st;
    return NULL;
}

const char *tb_rcase_status(const tb_rcase *c)
{
    tb_request_tally t = {.requests = (size_t)c->requests, .failed = (size_t)c->failed_requests};
    return strcmp(c->status, "ok") == 0 && tb_case_degraded(&t, 0) ? "degraded" : c->status;
}

double tb_rcase_median(const tb_rcase *c, const char *name)
{
    const tb_stats *st = tb_rcase_metric(c, name);
    return st ? st->median : NAN;
}

int tb_rcase_spec(const tb_rcase *c)
{
    static const char *const names[] = {"acceptance_length", "acceptance_rate", "draft_time_share",
                                        TB_ACCEPTANCE_AT_PREFIX "1"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const tb_stats *st = tb_rcase_metric(c, names[i]);
        if (st && st->n)
            return 1;
    }
    return 0;
}

uint32_t tb_rcase_positions(const tb_rcase *c)
{
    uint32_t k = 0;
    for (uint32_t i = 1; i <= TB_SPEC_MAX_DRAFT; i++) {
        char name[32];
        snprintf(name, sizeof name, TB_ACCEPTANCE_AT_PREFIX "%u", i);
        const tb_stats *st = tb_rcase_metric(c, name);
        if (st && st->n)
            k = i;
    }
    return k;
}

const tb_rmetric *tb_rcase_quality(const tb_rcase *c)
{
    static const char *const names[] = {"quality", "accuracy"};
    for (size_t k = 0; k < TB_ARRAY_LEN(names); k++)
        for (size_t i = 0; i < c->n_metrics; i++)
            if (strcmp(c->metrics[i].name, names[k]) == 0 && isfinite(c->metrics[i].st.median))
                return &c->metrics[i];
    return NULL;
}

static void words_append(tb_str *b, const cJSON *o, const char *outer)
{
    for (const cJSON *v = o->child; v; v = v->next) {
        char *name = outer ? tb_xasprintf("%s.%s", outer, v->string) : tb_xstrdup(v->string);
        if (cJSON_IsObject(v)) {
            words_append(b, v, name);
        } else {
            char *text = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);
            tb_str_appendf(b, "%s%s %s", b->len ? ", " : "", name, text ? text : v->valuestring);
            cJSON_free(text);
        }
        free(name);
    }
}

char *tb_roptions_words(const char *options_json)
{
    cJSON *o = cJSON_Parse(options_json ? options_json : "");
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return tb_xstrdup(options_json ? options_json : "");
    }
    tb_str b = {0};
    words_append(&b, o, NULL);
    cJSON_Delete(o);
    return tb_str_take(&b);
}

const char *tb_rshard_words(int64_t shard_index, int64_t shard_count, char *buf, size_t size)
{
    if (shard_count <= 0)
        snprintf(buf, size, "one machine");
    else if (shard_index < 0)
        snprintf(buf, size, "%lld shards joined", (long long)shard_count);
    else
        snprintf(buf, size, "shard %lld of %lld", (long long)shard_index, (long long)shard_count);
    return buf;
}

char *tb_rprompt_text(const char *backend_options_json, double prompt_len_mean)
{
    cJSON *o = cJSON_Parse(backend_options_json ? backend_options_json : "");
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(o, "dataset");
    char *text = NULL;
    if (cJSON_IsString(ds) && *ds->valuestring) {
        const char *slash = strrchr(ds->valuestring, '/');
        const char *name = slash && slash[1] ? slash + 1 : ds->valuestring;
        text = isfinite(prompt_len_mean) ? tb_xasprintf("dataset %s, mean %.0f", name, prompt_len_mean)
                                         : tb_xasprintf("dataset %s", name);
    }
    cJSON_Delete(o);
    return text;
}

char *tb_rcase_prompt(const tb_rsession *s, const tb_rcase *c)
{
    const tb_stats *st = tb_rcase_metric(c, "prompt_len");
    return tb_rprompt_text(s->backends[c->backend].options_json, st && st->n ? st->mean : NAN);
}

/* prompt: the prompt column's text in place of the prompt_tokens
 * dimension (tb_rprompt_text), or NULL. */
static void dims_append_prompt(tb_str *b, const tb_rcase *c, unsigned skip, const char *prompt)
{
    if (prompt && !(skip & TB_RDIM(TB_DIM_PROMPT_TOKENS))) {
        tb_str_appendf(b, "%s%s", b->len ? ", " : "", prompt);
        skip |= TB_RDIM(TB_DIM_PROMPT_TOKENS);
    }
    tb_case_label_dims(b, &c->dims, skip & (TB_RDIM_OPTS - 1), TB_LABEL_WORDS);
    char *words = skip & TB_RDIM_OPTS ? NULL : tb_roptions_words(c->options_json);
    if (words && *words)
        tb_str_appendf(b, "%s%s", b->len ? ", " : "", words);
    free(words);
}

char *tb_rcase_dims(const tb_rsession *s, const tb_rcase *c)
{
    tb_str b = {0};
    char *prompt = tb_rcase_prompt(s, c);
    dims_append_prompt(&b, c, 0, prompt);
    free(prompt);
    return tb_str_take(&b);
}

char *tb_rcase_key(const tb_rcase *c, unsigned skip)
{
    tb_str b = {0};
    dims_append_prompt(&b, c, skip, NULL);
    return tb_str_take(&b);
}

char *tb_rcase_key_prompt(const tb_rcase *c, const char *prompt)
{
    tb_str b = {0};
    dims_append_prompt(&b, c, 0, prompt);
    return tb_str_take(&b);
}

int tb_rcase_generalizes(const tb_rcase *a, const tb_rcase *b)
{
    return strcmp(a->options_json, b->options_json) == 0 && tb_case_dims_generalize(&a->dims, &b->dims);
}

/* ---------------------------------------------------------- grid */

void tb_rgrid_build(const tb_rsession *s, tb_rgrid *g)
{
    memset(g, 0, sizeof *g);
    size_t nb = s->n_backends ? s->n_backends : 1;
    g->row_case = tb_xcalloc(s->n_cases + 1, sizeof *g->row_case);
    g->cell = tb_xcalloc((s->n_cases + 1) * nb, sizeof *g->cell);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        /* A key that generalizes another (an AR case without steps) is not
         * a row of its own: its figure is the reference in those rows. */
        int covered = 0;
        for (size_t k = 0; k < s->n_cases && !covered; k++)
            covered = k != i && tb_rcase_generalizes(c, &s->cases[k]) && !tb_rcase_generalizes(&s->cases[k], c);
        if (covered)
            continue;
        size_t r = 0;
        while (r < g->n_rows && !tb_rcase_generalizes(&s->cases[g->row_case[r]], c))
            r++;
        if (r == g->n_rows) {
            g->row_case[g->n_rows] = i;
            for (size_t b = 0; b < nb; b++)
                g->cell[g->n_rows * nb + b] = -1;
            g->n_rows++;
        }
    }
    for (size_t r = 0; r < g->n_rows; r++) {
        const tb_rcase *row = &s->cases[g->row_case[r]];
        for (size_t i = 0; i < s->n_cases; i++) {
            const tb_rcase *c = &s->cases[i];
            long *cell = &g->cell[r * nb + c->backend];
            int exact = tb_rcase_generalizes(c, row) && tb_rcase_generalizes(row, c);
            if (exact || (*cell < 0 && tb_rcase_generalizes(c, row)))
                *cell = (long)i;
        }
    }
}

void tb_rgrid_free(tb_rgrid *g)
{
    free(g->row_case);
    free(g->cell);
    memset(g, 0, sizeof *g);
}
