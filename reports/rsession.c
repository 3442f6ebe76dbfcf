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

static char *dup_col(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return tb_xstrdup(t ? (const char *)t : "");
}

static double num_col(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

static int int_col(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? -1 : sqlite3_column_int(q, i);
}

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


char *tb_rdb_error(sqlite3 *db, int64_t session, const char *what)
{
    char *msg = tb_xstrdup(sqlite3_errmsg(db)); /* before the check runs statements of its own */
    char *row = NULL;
    char *r = tb_store_check_json(db, session, 1, &row) != 0 ? tb_xasprintf("reading %s: %s", what, row)
                                                              : tb_xasprintf("reading %s: %s", what, msg);
    free(row);
    free(msg);
    return r;
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
static void shard_conditions(sqlite3 *db, int64_t id, tb_rkvs *k)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT shard_index, shard_count, start_at, start_late_ns,"
                               " (SELECT group_concat(hostname || ' ' || (offset_to_first_ns / 1000) || ' us', ', ')"
                               "  FROM (SELECT * FROM shard WHERE session_id = ?1 ORDER BY shard_index))"
                               " FROM session WHERE id = ?1", -1, &q, NULL) != SQLITE_OK)
        return; /* a database before migration 8 */
    sqlite3_bind_int64(q, 1, id);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 1) != SQLITE_NULL) {
        int64_t n = sqlite3_column_int64(q, 1);
        const char *at = sqlite3_column_text(q, 2) ? (const char *)sqlite3_column_text(q, 2) : "?";
        if (sqlite3_column_type(q, 0) == SQLITE_NULL)
            kv_add(k, "shards", tb_xasprintf("%lld shards joined by db merge, started at %s; hosts and clock offsets "
                                             "from shard 0: %s", (long long)n, at,
                                             sqlite3_column_text(q, 4) ? (const char *)sqlite3_column_text(q, 4) : "?"));
        else
            kv_add(k, "shards", tb_xasprintf("shard %lld of %lld (0-based), started at %s, %.1f ms late",
                                             (long long)sqlite3_column_int64(q, 0), (long long)n, at,
                                             (double)sqlite3_column_int64(q, 3) * 1e-6));
    }
    sqlite3_finalize(q);
}

static int load_session(sqlite3 *db, int64_t id, tb_rsession *s, char **err)
{
    static const char sql[] =
        "SELECT s.uuid, s.suite_name, s.suite_path, s.suite_sha256, s.suite_text, s.tokbench_version,"
        " s.git_commit, s.compiler, s.cuda_build_version, s.command_line, s.started_at,"
        " coalesce(s.finished_at, '(not finished)'), s.status, s.warmup, s.repeat, s.seed,"
        " m.hostname, m.cpu_model, m.cpu_cores, m.ram_bytes, m.os, m.kernel, m.arch, m.gpu_count,"
        " coalesce(m.gpu_name, 'none'), m.gpu_memory_bytes, coalesce(m.gpu_driver, '-'),"
        " coalesce(m.cuda_driver_version, '-'), coalesce(m.compute_capability, '-'), m.nvml_status,"
        " m.fingerprint, s.prompt_set_path, s.prompt_set_sha256, s.config_sha256, s.config_json"
        " FROM session s JOIN machine m ON m.id = s.machine_id WHERE s.id = ?";
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("reading session %lld: %s", (long long)id, sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, id);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        char *what = tb_xasprintf("session %lld", (long long)id);
        *err = rc == SQLITE_DONE ? tb_xasprintf("no session %lld (see tokbench sessions)", (long long)id)
                                 : tb_rdb_error(db, id, what);
        free(what);
        sqlite3_finalize(q);
        return -1;
    }
    s->id = id;
    s->uuid = dup_col(q, 0);
    s->suite_name = dup_col(q, 1);
    s->suite_sha256 = dup_col(q, 3);
    s->suite_text = dup_col(q, 4);
    s->git_commit = dup_col(q, 6);
    s->started_at = dup_col(q, 10);
    s->status = dup_col(q, 12);
    s->warmup = sqlite3_column_int(q, 13);
    s->repeat = sqlite3_column_int(q, 14);
    s->hostname = dup_col(q, 16);
    s->has_prompt_set = sqlite3_column_type(q, 31) != SQLITE_NULL;
    s->config_sha256 = dup_col(q, 33);
    s->config_json = dup_col(q, 34);

    tb_rkvs *k = &s->session;
    kv_add(k, "session", tb_xasprintf("%lld (%s)", (long long)id, s->uuid));
    kv_add(k, "suite", tb_xasprintf("%s (%s)", s->suite_name, sqlite3_column_text(q, 2)));
    kv_add(k, "suite sha256", dup_col(q, 3)); /* of the text as written */
    /* of what it resolved to: options and matrix after includes and ${ENV} */
    kv_add(k, "configuration sha256",
           tb_xstrdup(*s->config_sha256 ? s->config_sha256 : "(not recorded: a session before schema 6)"));
    kv_add(k, "status", dup_col(q, 12));
    kv_add(k, "started (UTC)", dup_col(q, 10));
    kv_add(k, "finished (UTC)", dup_col(q, 11));
    kv_add(k, "tokbench", tb_xasprintf("%s (commit %s)", sqlite3_column_text(q, 5), s->git_commit));
    kv_add(k, "compiler", dup_col(q, 7));
    kv_add(k, "CUDA toolkit (build)", dup_col(q, 8));
    kv_add(k, "command line", dup_col(q, 9));
    kv_add(k, "runs", tb_xasprintf("%d warm-up (excluded), %d measured%s, seed %lld", s->warmup, s->repeat,
                                   s->has_prompt_set ? " (passes over the prompt set)" : "",
                                   (long long)sqlite3_column_int64(q, 15)));
    if (s->has_prompt_set)
        kv_add(k, "prompt set", tb_xasprintf("%s (sha256 %s)", sqlite3_column_text(q, 31),
                                             sqlite3_column_text(q, 32) ? (const char *)sqlite3_column_text(q, 32) : "?"));
    shard_conditions(db, id, k);

    k = &s->machine;
    kv_add(k, "host", dup_col(q, 16));
    kv_add(k, "CPU", tb_xasprintf("%s (%d logical CPUs)", sqlite3_column_text(q, 17), sqlite3_column_int(q, 18)));
    kv_add(k, "RAM", tb_xasprintf("%.1f GiB", sqlite3_column_double(q, 19) / (1u << 30)));
    kv_add(k, "OS", tb_xasprintf("%s, kernel %s, %s", sqlite3_column_text(q, 20), sqlite3_column_text(q, 21),
                                 sqlite3_column_text(q, 22)));
    int gpus = sqlite3_column_int(q, 23);
    if (gpus > 0) {
        kv_add(k, "GPU", tb_xasprintf("%d × %s, %.1f GiB, compute capability %s", gpus, sqlite3_column_text(q, 24),
                                      sqlite3_column_double(q, 25) / (1u << 30), sqlite3_column_text(q, 28)));
        kv_add(k, "GPU driver", tb_xasprintf("%s (CUDA driver %s)", sqlite3_column_text(q, 26),
                                             sqlite3_column_text(q, 27)));
    } else {
        kv_add(k, "GPU", tb_xasprintf("none (%s)", sqlite3_column_text(q, 29)));
    }
    /* its first 16 characters (a merged or hand-made one may be shorter) */
    kv_add(k, "fingerprint", tb_xasprintf("%.16s", sqlite3_column_text(q, 30)));
    sqlite3_finalize(q);
    return 0;
}

/* ---------------------------------------------------------- backends */

/* One "key: value" per field of a JSON object, values as JSON text.
 * 0, or -1 (the caller says what it was reading). */
static int json_fields(sqlite3 *db, const char *json, const char *prefix, tb_rkvs *k)
{
    sqlite3_stmt *q;
    if (!json || !*json)
        return 0;
    if (sqlite3_prepare_v2(db, "SELECT key, CASE type WHEN 'text' THEN value ELSE json_quote(value) END"
                               " FROM json_each(?)", -1, &q, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(q, 1, json, -1, SQLITE_TRANSIENT);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        char *key = tb_xasprintf("%s%s", prefix, sqlite3_column_text(q, 0));
        kv_add(k, key, dup_col(q, 1));
        free(key);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? 0 : -1;
}

static int load_backends(sqlite3 *db, tb_rsession *s, char **err)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT label, plugin, plugin_version, model, capabilities, options_json, info_json,"
                           " coalesce(json_extract(info_json, '$.dtype'), ''),"
                           " coalesce(json_extract(info_json, '$.device'), ''),"
                           " json_extract(info_json, '$.random_weights'), plugin_path, abi_major"
                           " FROM backend WHERE session_id = ? ORDER BY id",
                           -1, &q, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("reading backends: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, s->id);
    int rc, fields = 0;
    while (fields == 0 && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        s->backends = tb_xrealloc(s->backends, (s->n_backends + 1) * sizeof *s->backends);
        tb_rbackend *b = &s->backends[s->n_backends++];
        memset(b, 0, sizeof *b);
        b->label = dup_col(q, 0);
        b->plugin = dup_col(q, 1);
        b->plugin_version = dup_col(q, 2);
        b->model = dup_col(q, 3);
        b->capabilities = dup_col(q, 4);
        b->options_json = dup_col(q, 5);
        b->dtype = dup_col(q, 7);
        b->device = dup_col(q, 8);
        b->random_weights = int_col(q, 9);
        kv_add(&b->info, "plugin", tb_xasprintf("%s %s (ABI %d, %s)", b->plugin, b->plugin_version,
                                                sqlite3_column_int(q, 11), sqlite3_column_text(q, 10)));
        kv_add(&b->info, "model", tb_xstrdup(b->model));
        kv_add(&b->info, "dtype", tb_xstrdup(*b->dtype ? b->dtype : "(not reported)"));
        kv_add(&b->info, "device", tb_xstrdup(*b->device ? b->device : "(not reported)"));
        kv_add(&b->info, "random weights",
               tb_xstrdup(b->random_weights == 1   ? "YES: speed only, the outputs mean nothing"
                          : b->random_weights == 0 ? "no"
                                                   : "(not reported)"));
        kv_add(&b->info, "capabilities", tb_xstrdup(b->capabilities));
        fields = json_fields(db, (const char *)sqlite3_column_text(q, 5), "option ", &b->info);
        if (fields == 0)
            fields = json_fields(db, (const char *)sqlite3_column_text(q, 6), "", &b->info);
    }
    if (fields != 0 || rc != SQLITE_DONE) {
        char *what = tb_xasprintf("the backends of session %lld", (long long)s->id);
        *err = tb_rdb_error(db, s->id, what);
        free(what);
        sqlite3_finalize(q);
        return -1;
    }
    sqlite3_finalize(q);
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
    return rx != ry ? rx - ry : strcmp(x->name, y->name);
}

/* The session's load searches, with their limits from limits_json. */
static int load_searches(sqlite3 *db, tb_rsession *s, char **err)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT x.id, b.label, x.ordinal, x.kind, x.status, x.limits_json, x.sync_rate, x.max_rate,"
                           " x.slo_rate, json_extract(x.limits_json, '$.ttft_p99_ms'),"
                           " json_extract(x.limits_json, '$.tpot_p99_ms'), json_extract(x.limits_json, '$.goodput_pct'),"
                           " x.error FROM search x JOIN backend b ON b.id = x.backend_id WHERE x.session_id = ?"
                           " ORDER BY x.id",
                           -1, &q, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("reading searches: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, s->id);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *label = (const char *)sqlite3_column_text(q, 1);
        size_t bi = 0;
        while (bi < s->n_backends && !(label && strcmp(s->backends[bi].label, label) == 0))
            bi++;
        if (bi == s->n_backends)
            continue; /* the join found it: cannot happen */
        s->searches = tb_xrealloc(s->searches, (s->n_searches + 1) * sizeof *s->searches);
        tb_rsearch *x = &s->searches[s->n_searches++];
        *x = (tb_rsearch){
            .id = sqlite3_column_int64(q, 0),
            .backend = bi,
            .ordinal = sqlite3_column_int(q, 2),
            .kind = dup_col(q, 3),
            .status = dup_col(q, 4),
            .limits_json = dup_col(q, 5),
            .sync_rate = num_col(q, 6),
            .max_rate = num_col(q, 7),
            .slo_rate = num_col(q, 8),
            .ttft_p99_ms = num_col(q, 9),
            .tpot_p99_ms = num_col(q, 10),
            .goodput_pct = num_col(q, 11),
            .error = sqlite3_column_type(q, 12) == SQLITE_NULL ? NULL : dup_col(q, 12),
        };
    }
    if (rc != SQLITE_DONE) {
        char *what = tb_xasprintf("the searches of session %lld", (long long)s->id);
        *err = tb_rdb_error(db, s->id, what);
        free(what);
        sqlite3_finalize(q);
        return -1;
    }
    sqlite3_finalize(q);
    return 0;
}

static int load_cases(sqlite3 *db, tb_rsession *s, char **err)
{
    static const char sql[] =
        "SELECT c.id, c.ordinal, b.label, c.prompt_tokens, c.max_new_tokens, c.batch, c.concurrency, c.steps,"
        " c.block_length, c.request_rate, c.options_json, c.status, coalesce(c.error, ''),"
        " (SELECT max(peak_device_bytes) / 1048576.0 FROM sample WHERE case_id = c.id AND warmup = 0),"
        " c.host_peak_rss_bytes / 1048576.0,"
        " (SELECT sum(energy_mj) / 1000.0 / sum(output_tokens) FROM sample"
        "    WHERE case_id = c.id AND warmup = 0 AND energy_mj IS NOT NULL AND output_tokens > 0),"
        " (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id"
        "    WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.count_mismatch),"
        " (SELECT count(*) FROM (SELECT r.idx FROM request r JOIN sample sa ON sa.id = r.sample_id"
        "    WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.status = 'ok' AND r.output_hash IS NOT NULL"
        "    GROUP BY coalesce(r.prompt_hash, r.prompt_idx, -1 - r.idx) HAVING count(DISTINCT r.output_hash) > 1)),"
        " (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id"
        "    WHERE sa.case_id = c.id AND sa.warmup = 0),"
        " (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id"
        "    WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.status <> 'ok'),"
        " c.search_id, c.search_role, c.search_pass"
        " FROM bench_case c JOIN backend b ON b.id = c.backend_id WHERE c.session_id = ? ORDER BY c.ordinal";
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("reading cases: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, s->id);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *label = (const char *)sqlite3_column_text(q, 2);
        size_t bi = s->n_backends;
        for (size_t b = 0; b < s->n_backends; b++)
            if (label && strcmp(s->backends[b].label, label) == 0)
                bi = b;
        if (bi == s->n_backends) { /* the join found it: cannot happen, but never index past the backends */
            *err = tb_xasprintf("reading the cases of session %lld: case #%d names backend %s, which the session "
                                "does not have", (long long)s->id, sqlite3_column_int(q, 1), label ? label : "NULL");
            sqlite3_finalize(q);
            return -1;
        }
        s->cases = tb_xrealloc(s->cases, (s->n_cases + 1) * sizeof *s->cases);
        tb_rcase *c = &s->cases[s->n_cases++];
        memset(c, 0, sizeof *c);
        c->id = sqlite3_column_int64(q, 0);
        c->ordinal = sqlite3_column_int(q, 1);
        c->backend = bi;
        c->prompt_tokens = sqlite3_column_int(q, 3);
        c->max_new_tokens = sqlite3_column_int(q, 4);
        c->batch = sqlite3_column_int(q, 5);
        c->concurrency = int_col(q, 6);
        c->steps = int_col(q, 7);
        c->block_length = int_col(q, 8);
        c->request_rate = num_col(q, 9);
        c->options_json = dup_col(q, 10);
        c->status = dup_col(q, 11);
        c->error = dup_col(q, 12);
        c->peak_device_mib = num_col(q, 13);
        c->host_rss_mib = num_col(q, 14);
        c->energy_j_per_token = num_col(q, 15);
        c->count_mismatches = sqlite3_column_int(q, 16);
        c->varying_outputs = sqlite3_column_int(q, 17);
        c->requests = sqlite3_column_int(q, 18);
        c->failed_requests = sqlite3_column_int(q, 19);
        c->search_id = sqlite3_column_int64(q, 20);
        c->search_role = sqlite3_column_type(q, 21) == SQLITE_NULL ? NULL : dup_col(q, 21);
        c->search_pass = int_col(q, 22);
        s->dims |= (c->concurrency >= 0 ? TB_RDIM_CONC : 0) | (c->steps >= 0 ? TB_RDIM_STEPS : 0) |
                   (c->block_length >= 0 ? TB_RDIM_BLOCK : 0) | (isfinite(c->request_rate) ? TB_RDIM_RATE : 0) |
                   (strcmp(c->options_json, "{}") != 0 ? TB_RDIM_OPTS : 0);
        if (c->steps >= 0)
            s->backends[c->backend].has_steps = 1;
    }
    if (rc != SQLITE_DONE) {
        char *what = tb_xasprintf("the cases of session %lld", (long long)s->id);
        *err = tb_rdb_error(db, s->id, what);
        free(what);
        sqlite3_finalize(q);
        return -1;
    }
    sqlite3_finalize(q);

    if (sqlite3_prepare_v2(db,
                           "SELECT m.case_id, m.name, m.unit, m.n, m.median, m.p5, m.p95, m.mean, m.stdev, m.cv,"
                           " m.min, m.max, m.ci_lo, m.ci_hi, m.p90, m.p99 FROM metric m"
                           " JOIN bench_case c ON c.id = m.case_id"
                           " WHERE c.session_id = ? ORDER BY c.ordinal",
                           -1, &q, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("reading metrics: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, s->id);
    size_t ci = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t case_id = sqlite3_column_int64(q, 0);
        while (ci < s->n_cases && s->cases[ci].id != case_id)
            ci++;
        if (ci == s->n_cases)
            break; /* ordered like the cases: cannot happen */
        tb_rcase *c = &s->cases[ci];
        c->metrics = tb_xrealloc(c->metrics, (c->n_metrics + 1) * sizeof *c->metrics);
        tb_rmetric *m = &c->metrics[c->n_metrics++];
        m->name = dup_col(q, 1);
        m->unit = dup_col(q, 2);
        m->st = (tb_stats){.n = (size_t)sqlite3_column_int64(q, 3), .median = num_col(q, 4), .p5 = num_col(q, 5),
                           .p95 = num_col(q, 6), .mean = num_col(q, 7), .stdev = num_col(q, 8),
                           .cv = num_col(q, 9), .min = num_col(q, 10), .max = num_col(q, 11),
                           .ci_lo = num_col(q, 12), .ci_hi = num_col(q, 13), .p90 = num_col(q, 14),
                           .p99 = num_col(q, 15)};
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        char *what = tb_xasprintf("the metrics of session %lld", (long long)s->id);
        *err = tb_rdb_error(db, s->id, what);
        free(what);
        sqlite3_finalize(q);
        return -1;
    }
    sqlite3_finalize(q);
    for (size_t i = 0; i < s->n_cases; i++) {
        tb_rcase *c = &s->cases[i];
        if (c->n_metrics)
            qsort(c->metrics, c->n_metrics, sizeof *c->metrics, cmp_metric);
        if (tb_rcase_quality(c))
            s->has_quality = 1;
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

const tb_rmetric *tb_rcase_quality(const tb_rcase *c)
{
    static const char *const names[] = {"quality", "accuracy"};
    for (size_t k = 0; k < TB_ARRAY_LEN(names); k++)
        for (size_t i = 0; i < c->n_metrics; i++)
            if (strcmp(c->metrics[i].name, names[k]) == 0 && isfinite(c->metrics[i].st.median))
                return &c->metrics[i];
    return NULL;
}

static void dims_append(tb_str *b, const tb_rcase *c, unsigned skip)
{
#define SEP (b->len ? ", " : "")
    if (!(skip & TB_RKEY_PROMPT))
        tb_str_appendf(b, c->prompt_tokens ? "%sprompt %d" : "%sprompt set", SEP, c->prompt_tokens);
    if (!(skip & TB_RKEY_NEW))
        tb_str_appendf(b, "%snew %d", SEP, c->max_new_tokens);
    if (!(skip & TB_RKEY_BATCH))
        tb_str_appendf(b, "%sbatch %d", SEP, c->batch);
    if (!(skip & TB_RDIM_CONC) && c->concurrency >= 0)
        tb_str_appendf(b, "%sconcurrency %d", SEP, c->concurrency);
    if (!(skip & TB_RDIM_RATE) && isfinite(c->request_rate))
        tb_str_appendf(b, "%srate %g/s", SEP, c->request_rate);
    if (!(skip & TB_RDIM_STEPS) && c->steps >= 0)
        tb_str_appendf(b, "%ssteps %d", SEP, c->steps);
    if (!(skip & TB_RDIM_BLOCK) && c->block_length >= 0)
        tb_str_appendf(b, "%sblock %d", SEP, c->block_length);
    if (!(skip & TB_RDIM_OPTS) && strcmp(c->options_json, "{}") != 0)
        tb_str_appendf(b, "%s%s", SEP, c->options_json);
#undef SEP
}

char *tb_rcase_dims(const tb_rsession *s, const tb_rcase *c)
{
    (void)s;
    tb_str b = {0};
    dims_append(&b, c, 0);
    return tb_str_take(&b);
}

char *tb_rcase_key(const tb_rcase *c, unsigned skip)
{
    tb_str b = {0};
    dims_append(&b, c, skip);
    return tb_str_take(&b);
}

int tb_rcase_generalizes(const tb_rcase *a, const tb_rcase *b)
{
    if (a->prompt_tokens != b->prompt_tokens || a->max_new_tokens != b->max_new_tokens || a->batch != b->batch ||
        strcmp(a->options_json, b->options_json) != 0)
        return 0;
    if (isfinite(a->request_rate) ? a->request_rate != b->request_rate : 0)
        return 0;
    return (a->concurrency < 0 || a->concurrency == b->concurrency) && (a->steps < 0 || a->steps == b->steps) &&
           (a->block_length < 0 || a->block_length == b->block_length);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int tb_rcase_telemetry(sqlite3 *db, int64_t session, int64_t case_id, tb_rtelemetry *out, char **err)
{
    memset(out, 0, sizeof *out);
    static const char sql[] = "SELECT s.id, s.source, s.name, p.t_ns, p.value FROM telemetry_series s"
                              " JOIN telemetry_point p ON p.series_id = s.id WHERE s.case_id = ?"
                              " ORDER BY s.id, p.t_ns";
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        if (strstr(sqlite3_errmsg(db), "no such table"))
            return 0; /* a database from before telemetry */
        *err = tb_rdb_error(db, session, "the telemetry of a case");
        return -1;
    }
    sqlite3_bind_int64(q, 1, case_id);
    int64_t last = -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        if (id != last) {
            out->s = tb_xrealloc(out->s, (out->n + 1) * sizeof *out->s);
            out->s[out->n++] = (tb_rseries){tb_xstrdup((const char *)sqlite3_column_text(q, 1)),
                                            tb_xstrdup((const char *)sqlite3_column_text(q, 2)), NULL, NULL, 0};
            last = id;
            cap = 0;
        }
        tb_rseries *s = &out->s[out->n - 1];
        if (s->n == cap) {
            cap = cap ? 2 * cap : 64;
            s->t_s = tb_xrealloc(s->t_s, cap * sizeof *s->t_s);
            s->v = tb_xrealloc(s->v, cap * sizeof *s->v);
        }
        s->t_s[s->n] = (double)sqlite3_column_int64(q, 3) * 1e-9;
        s->v[s->n++] = sqlite3_column_type(q, 4) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 4);
    }
    if (rc != SQLITE_DONE) {
        char *what = tb_xasprintf("the telemetry of case id %lld", (long long)case_id);
        *err = tb_rdb_error(db, session, what);
        free(what);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_rtelemetry_free(out);
        return -1;
    }
    return 0;
}

void tb_rtelemetry_free(tb_rtelemetry *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->s[i].source);
        free(t->s[i].name);
        free(t->s[i].t_s);
        free(t->s[i].v);
    }
    free(t->s);
    memset(t, 0, sizeof *t);
}

int tb_rcase_itl(sqlite3 *db, int64_t session, int64_t case_id, double **out, size_t *n, char **err)
{
    /* emissions_json: [[ms since submit, tokens], ...] in order. */
    static const char sql[] =
        "SELECT t - lag(t) OVER (PARTITION BY rid ORDER BY k) FROM ("
        " SELECT r.id AS rid, e.key AS k, json_extract(e.value, '$[0]') AS t"
        " FROM request r JOIN sample sa ON sa.id = r.sample_id, json_each(r.emissions_json) e"
        " WHERE sa.case_id = ? AND sa.warmup = 0 AND r.status = 'ok')";
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_rdb_error(db, session, "the emissions of a case");
        return -1;
    }
    sqlite3_bind_int64(q, 1, case_id);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (sqlite3_column_type(q, 0) == SQLITE_NULL)
            continue; /* the first emission of a request */
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            *out = tb_xrealloc(*out, cap * sizeof **out);
        }
        (*out)[(*n)++] = sqlite3_column_double(q, 0);
    }
    if (rc != SQLITE_DONE) {
        char *what = tb_xasprintf("the emissions of case id %lld", (long long)case_id);
        *err = tb_rdb_error(db, session, what);
        free(what);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        *n = 0;
        return -1;
    }
    if (*n)
        qsort(*out, *n, sizeof **out, cmp_double);
    return 0;
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
