/* reader.c — see reader.h. */
#define _GNU_SOURCE
#include "reader.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dims.h"
#include "metrics.h"
#include "store.h"
#include "util.h"

/* ------------------------------------------------------ columns */

static char *col_str(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return tb_xstrdup(t ? (const char *)t : "");
}

static char *col_str_or_null(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NULL : col_str(q, i);
}

/* A free text as reports render it: URL credentials redacted
 * (util/redact.h), also in a database written before the store redacted
 * them (the secret values themselves are not known here). */
static char *col_free_text(sqlite3_stmt *q, int i)
{
    char *t = col_str(q, i), *r = tb_xredact(t, NULL, 0);
    free(t);
    return r;
}

static double col_num(sqlite3_stmt *q, int i)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

static int col_int_or(sqlite3_stmt *q, int i, int dflt)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? dflt : sqlite3_column_int(q, i);
}

/* ", c.prompt_tokens, c.max_new_tokens, ...": the stored dimensions'
 * columns (dims.h) of table alias `alias`, in the table's order. */
static void dim_columns(tb_str *sql, const char *alias)
{
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column)
            tb_str_appendf(sql, ", %s%s", alias, tb_dim_defs[d].column);
}

/* The dimensions from column `first` on (as dim_columns selected them);
 * returns the next column. NULL: not applicable (0). */
static int dim_values(sqlite3_stmt *q, int first, tb_case *c)
{
    memset(c, 0, sizeof *c);
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column) {
            if (sqlite3_column_type(q, first) != SQLITE_NULL)
                tb_case_dim_set(c, (tb_dim)d, sqlite3_column_double(q, first));
            first++;
        }
    return first;
}

/* Appends one row of `size` bytes to *rows (count *n); returns it zeroed. */
static void *grow(void *rows_ptr, size_t *n, size_t size)
{
    void **rows = rows_ptr;
    *rows = tb_xrealloc(*rows, (*n + 1) * size);
    void *r = (char *)*rows + *n * size;
    memset(r, 0, size);
    (*n)++;
    return r;
}

char *tb_read_error(sqlite3 *db, int64_t session, const char *what)
{
    char *msg = tb_xstrdup(sqlite3_errmsg(db)); /* before the check runs statements of its own */
    char *row = NULL;
    char *r = tb_store_check_json(db, session, 1, &row) != 0 ? tb_xasprintf("reading %s: %s", what, row)
                                                              : tb_xasprintf("reading %s: %s", what, msg);
    free(row);
    free(msg);
    return r;
}

/* The error of a failed step or prepare, "reading FMT...: why". */
static char *read_error(sqlite3 *db, int64_t session, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static char *read_error(sqlite3 *db, int64_t session, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *what = NULL;
    if (vasprintf(&what, fmt, ap) < 0)
        what = NULL;
    va_end(ap);
    char *r = tb_read_error(db, session, what ? what : "?");
    free(what);
    return r;
}

/* ------------------------------------------------------ sessions */

/* The shard columns (migration 8); nothing on an older database. */
static void read_shard(sqlite3 *db, int64_t id, tb_row_session *s)
{
    s->shard_count = -1;
    s->shard_index = -1;
    s->shard_window_lag_ns = -1;
    s->start_at = tb_xstrdup("");
    s->shard_hosts = tb_xstrdup("");
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT shard_index, shard_count, start_at, start_late_ns,"
                               " (SELECT group_concat(hostname || ' ' || (offset_to_first_ns / 1000) || ' us', ', ')"
                               "  FROM (SELECT * FROM shard WHERE session_id = ?1 ORDER BY shard_index)),"
                               " (SELECT max(window_lag_ns) FROM shard WHERE session_id = ?1)"
                               " FROM session WHERE id = ?1", -1, &q, NULL) != SQLITE_OK)
        return; /* a database before migration 8 */
    sqlite3_bind_int64(q, 1, id);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 1) != SQLITE_NULL) {
        s->shard_index = sqlite3_column_type(q, 0) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 0);
        s->shard_count = sqlite3_column_int64(q, 1);
        free(s->start_at);
        s->start_at = col_str(q, 2);
        s->start_late_ns = sqlite3_column_int64(q, 3);
        free(s->shard_hosts);
        s->shard_hosts = col_str(q, 4);
        s->shard_window_lag_ns = sqlite3_column_type(q, 5) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 5);
    }
    sqlite3_finalize(q);
}

int tb_read_session(sqlite3 *db, int64_t id, tb_row_session *s, char **err)
{
    static const char sql[] =
        "SELECT s.uuid, s.suite_name, s.suite_path, s.suite_sha256, s.suite_text, s.tokbench_version,"
        " s.git_commit, s.compiler, s.cuda_build_version, s.command_line, s.started_at, s.finished_at, s.status,"
        " s.warmup, s.repeat, s.seed, m.hostname, m.cpu_model, m.cpu_cores, m.ram_bytes, m.os, m.kernel, m.arch,"
        " m.gpu_count, m.gpu_name, m.gpu_memory_bytes, m.gpu_driver, m.cuda_driver_version, m.compute_capability,"
        " m.nvml_status, m.fingerprint, s.prompt_set_path, s.prompt_set_sha256, s.config_sha256, s.config_json"
        " FROM session s JOIN machine m ON m.id = s.machine_id WHERE s.id = ?";
    memset(s, 0, sizeof *s);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("reading session %lld: %s", (long long)id, sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, id);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        if (rc != SQLITE_DONE)
            *err = read_error(db, id, "session %lld", (long long)id);
        sqlite3_finalize(q);
        return rc == SQLITE_DONE ? 1 : -1;
    }
    int i = 0;
    s->id = id;
    s->uuid = col_str(q, i++);
    s->suite_name = col_str(q, i++);
    s->suite_path = col_str(q, i++);
    s->suite_sha256 = col_str(q, i++);
    s->suite_text = col_free_text(q, i++);
    s->tokbench_version = col_str(q, i++);
    s->git_commit = col_str(q, i++);
    s->compiler = col_str(q, i++);
    s->cuda_build_version = col_str(q, i++);
    s->command_line = col_free_text(q, i++);
    s->started_at = col_str(q, i++);
    s->finished_at = col_str(q, i++);
    s->status = col_str(q, i++);
    s->warmup = sqlite3_column_int(q, i++);
    s->repeat = sqlite3_column_int(q, i++);
    s->seed = sqlite3_column_int64(q, i++);
    s->hostname = col_str(q, i++);
    s->cpu_model = col_str(q, i++);
    s->cpu_cores = sqlite3_column_int(q, i++);
    s->ram_bytes = sqlite3_column_double(q, i++);
    s->os = col_str(q, i++);
    s->kernel = col_str(q, i++);
    s->arch = col_str(q, i++);
    s->gpu_count = sqlite3_column_int(q, i++);
    s->gpu_name = col_str(q, i++);
    s->gpu_memory_bytes = sqlite3_column_double(q, i++);
    s->gpu_driver = col_str(q, i++);
    s->cuda_driver_version = col_str(q, i++);
    s->compute_capability = col_str(q, i++);
    s->nvml_status = col_str(q, i++);
    s->fingerprint = col_str(q, i++);
    s->prompt_set_path = col_str_or_null(q, i++);
    s->prompt_set_sha256 = col_str_or_null(q, i++);
    s->config_sha256 = col_str(q, i++);
    s->config_json = col_str(q, i++);
    sqlite3_finalize(q);
    read_shard(db, id, s);
    return 0;
}

void tb_row_session_free(tb_row_session *s)
{
    char **strs[] = {&s->uuid, &s->suite_name, &s->suite_path, &s->suite_sha256, &s->suite_text,
                     &s->tokbench_version, &s->git_commit, &s->compiler, &s->cuda_build_version, &s->command_line,
                     &s->started_at, &s->finished_at, &s->status, &s->prompt_set_path, &s->prompt_set_sha256,
                     &s->config_sha256, &s->config_json, &s->hostname, &s->cpu_model, &s->os, &s->kernel, &s->arch,
                     &s->fingerprint, &s->nvml_status, &s->gpu_name, &s->gpu_driver, &s->cuda_driver_version,
                     &s->compute_capability, &s->start_at, &s->shard_hosts};
    for (size_t i = 0; i < TB_ARRAY_LEN(strs); i++)
        free(*strs[i]);
    memset(s, 0, sizeof *s);
}

int tb_read_session_list(sqlite3 *db, int limit, tb_row_session_item **out, size_t *n, char **err)
{
    static const char sql[] =
        "SELECT s.id, s.started_at, s.suite_name, s.status,"
        " (SELECT count(*) FROM bench_case c WHERE c.session_id = s.id AND c.status = 'ok'),"
        " (SELECT count(*) FROM bench_case c WHERE c.session_id = s.id AND c.status = 'failed'),"
        " (SELECT count(*) FROM bench_case c WHERE c.session_id = s.id AND c.status = 'skipped'),"
        " m.hostname, m.gpu_name, s.git_commit, s.shard_index, s.shard_count,"
        " (SELECT min(sh.session_id) FROM shard sh WHERE sh.source_uuid = s.uuid)"
        " FROM session s JOIN machine m ON m.id = s.machine_id ORDER BY s.started_at DESC, s.id DESC LIMIT ?";
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        *err = read_error(db, -1, "the sessions");
        return -1;
    }
    sqlite3_bind_int(q, 1, limit > 0 ? limit : -1);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_row_session_item *r = grow(out, n, sizeof *r);
        r->id = sqlite3_column_int64(q, 0);
        r->started_at = col_str(q, 1);
        r->suite_name = col_str(q, 2);
        r->status = col_str(q, 3);
        r->n_ok = sqlite3_column_int64(q, 4);
        r->n_failed = sqlite3_column_int64(q, 5);
        r->n_skipped = sqlite3_column_int64(q, 6);
        r->hostname = col_str(q, 7);
        r->gpu_name = col_str(q, 8);
        r->git_commit = col_str(q, 9);
        r->shard_index = sqlite3_column_type(q, 10) == SQLITE_NULL ? -1 : sqlite3_column_int(q, 10);
        r->shard_count = sqlite3_column_type(q, 11) == SQLITE_NULL ? 0 : sqlite3_column_int(q, 11);
        r->joined_in = sqlite3_column_type(q, 12) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 12);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, -1, "the sessions");
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_session_items_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void tb_row_session_items_free(tb_row_session_item *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(r[i].started_at);
        free(r[i].suite_name);
        free(r[i].status);
        free(r[i].hostname);
        free(r[i].gpu_name);
        free(r[i].git_commit);
    }
    free(r);
}

int64_t tb_read_last_session(sqlite3 *db)
{
    sqlite3_stmt *q;
    int64_t id = -1;
    /* a shard pooled by a joined session here is not one a user made
     * last: the join is (issue 39 item 5) */
    if (sqlite3_prepare_v2(db,
                           "SELECT id FROM session WHERE uuid NOT IN (SELECT source_uuid FROM shard)"
                           " ORDER BY started_at DESC, id DESC LIMIT 1",
                           -1, &q, NULL) ==
            SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        id = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return id;
}

int tb_read_find_session(sqlite3 *db, int64_t id, const char *uuid_prefix, int64_t ids[2])
{
    sqlite3_stmt *q;
    int n = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT id FROM session WHERE id = ?1 UNION ALL"
                           " SELECT id FROM session WHERE uuid LIKE ?2 || '%' AND NOT EXISTS"
                           " (SELECT 1 FROM session WHERE id = ?1) ORDER BY id LIMIT 2",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, id);
        /* no prefix: bind what matches no uuid */
        sqlite3_bind_text(q, 2, uuid_prefix ? uuid_prefix : "-", -1, SQLITE_TRANSIENT);
        while (n < 2 && sqlite3_step(q) == SQLITE_ROW)
            ids[n++] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    return n;
}

/* ------------------------------------------------------ backends */

int tb_read_backends(sqlite3 *db, int64_t session, tb_row_backend **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, label, plugin, plugin_path, plugin_version, abi_major, model, capabilities,"
                           " options_json, info_json, json_extract(info_json, '$.dtype'),"
                           " json_extract(info_json, '$.device'), json_extract(info_json, '$.random_weights')"
                           " FROM backend WHERE session_id = ? ORDER BY id",
                           -1, &q, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("reading backends: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_row_backend *b = grow(out, n, sizeof *b);
        b->id = sqlite3_column_int64(q, 0);
        b->label = col_str(q, 1);
        b->plugin = col_str(q, 2);
        b->plugin_path = col_str(q, 3);
        b->plugin_version = col_str(q, 4);
        b->abi_major = sqlite3_column_int(q, 5);
        b->model = col_str(q, 6);
        b->capabilities = col_str(q, 7);
        b->options_json = col_str(q, 8);
        b->info_json = col_str(q, 9);
        b->dtype = col_str(q, 10);
        b->device = col_str(q, 11);
        b->random_weights = col_int_or(q, 12, -1);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the backends of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_backends_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void tb_row_backends_free(tb_row_backend *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(b[i].label);
        free(b[i].plugin);
        free(b[i].plugin_path);
        free(b[i].plugin_version);
        free(b[i].model);
        free(b[i].capabilities);
        free(b[i].options_json);
        free(b[i].info_json);
        free(b[i].dtype);
        free(b[i].device);
    }
    free(b);
}

int tb_read_json_fields(sqlite3 *db, const char *json, tb_row_field **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
    if (!json || !*json)
        return 0;
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db, "SELECT key, CASE type WHEN 'text' THEN value ELSE json_quote(value) END"
                                    " FROM json_each(?)", -1, &q, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(q, 1, json, -1, SQLITE_TRANSIENT);
        while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
            tb_row_field *f = grow(out, n, sizeof *f);
            f->key = col_str(q, 0);
            f->value = col_str(q, 1);
        }
    }
    if (rc != SQLITE_DONE)
        *err = tb_xasprintf("reading a JSON object: %s", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_fields_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void tb_row_fields_free(tb_row_field *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(f[i].key);
        free(f[i].value);
    }
    free(f);
}

/* ------------------------------------------------------ cases */

/* tb_read_cases's columns of the case's measured requests whose count
 * failed its check, by TB_MISMATCH_*: the verdict's check
 * (tb_count_mismatch), and the side of what it was held to. */
static void count_mismatch_columns(tb_str *sql)
{
    static const struct {
        int verdict;
        const char *side;
    } kinds[TB_N_COUNT_MISMATCHES] = {
        [TB_MISMATCH_OVER_IDS] = {TB_COUNT_NOT_IDS, "r.output_tokens > r.output_ids"},
        [TB_MISMATCH_UNDER_IDS] = {TB_COUNT_NOT_IDS, "r.output_tokens < r.output_ids"},
        [TB_MISMATCH_OVER_TEXT] = {TB_COUNT_NOT_TEXT, "r.output_tokens > r.recount_tokens"},
        [TB_MISMATCH_UNDER_TEXT] = {TB_COUNT_NOT_TEXT, "r.output_tokens < r.recount_tokens"},
    };
    for (int k = 0; k < TB_N_COUNT_MISMATCHES; k++)
        tb_str_appendf(sql,
                       " (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id"
                       "    WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.count_mismatch = %d AND %s),",
                       kinds[k].verdict, kinds[k].side);
}

int tb_read_cases(sqlite3 *db, int64_t session, tb_row_case **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
    tb_str sql = {0};
    tb_str_append(&sql, "SELECT c.id, c.ordinal, b.label");
    dim_columns(&sql, "c.");
    tb_str_append(&sql,
                  ", c.options_json, c.status, c.error,"
                  " (SELECT max(peak_device_bytes) / 1048576.0 FROM sample WHERE case_id = c.id AND warmup = 0),"
                  " c.host_peak_rss_bytes / 1048576.0,"
                  " (SELECT sum(energy_mj) / 1000.0 / sum(output_tokens) FROM sample"
                  "    WHERE case_id = c.id AND warmup = 0 AND energy_mj IS NOT NULL AND output_tokens > 0),");
    count_mismatch_columns(&sql);
    /* the requests held to their text's re-count: how many, their counts
     * and re-counts summed */
    static const char *const held[3] = {"count(*)", "coalesce(sum(r.output_tokens), 0)",
                                        "coalesce(sum(r.recount_tokens), 0)"};
    for (int k = 0; k < 3; k++)
        tb_str_appendf(&sql,
                       " (SELECT %s FROM request r JOIN sample sa ON r.sample_id = sa.id"
                       "    WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.status = 'ok' AND r.output_ids IS NULL"
                       "    AND r.recount_tokens IS NOT NULL),",
                       held[k]);
    tb_str_append(&sql,
                  " (SELECT count(*) FROM (SELECT r.idx FROM request r JOIN sample sa ON sa.id = r.sample_id"
                  "    WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.status = 'ok' AND r.output_hash IS NOT NULL"
                  "    GROUP BY coalesce(r.prompt_hash, r.prompt_idx, -1 - r.idx)"
                  "    HAVING count(DISTINCT r.output_hash) > 1)),"
                  " (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id"
                  "    WHERE sa.case_id = c.id AND sa.warmup = 0),"
                  " (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id"
                  "    WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.status <> 'ok'),"
                  " c.search_id, c.search_role, c.search_pass, c.scrapes, c.scrapes_failed, c.scrape_error,"
                  " (SELECT group_concat(ts.name, ', ') FROM telemetry_series ts WHERE ts.case_id = c.id"
                  "    AND NOT EXISTS (SELECT 1 FROM telemetry_point p WHERE p.series_id = ts.id))"
                  " FROM bench_case c JOIN backend b ON b.id = c.backend_id WHERE c.session_id = ?"
                  " ORDER BY c.ordinal");
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db, sql.s, -1, &q, NULL);
    tb_str_free(&sql);
    if (rc != SQLITE_OK) {
        *err = tb_xasprintf("reading cases: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_row_case *c = grow(out, n, sizeof *c);
        c->id = sqlite3_column_int64(q, 0);
        c->ordinal = sqlite3_column_int(q, 1);
        c->backend = col_str(q, 2);
        int i = dim_values(q, 3, &c->dims);
        c->options_json = col_str(q, i++);
        c->status = col_str(q, i++);
        c->error = col_free_text(q, i++);
        c->peak_device_mib = col_num(q, i++);
        c->host_rss_mib = col_num(q, i++);
        c->energy_j_per_token = col_num(q, i++);
        for (int k = 0; k < TB_N_COUNT_MISMATCHES; k++)
            c->count_mismatches[k] = sqlite3_column_int(q, i++);
        c->text_requests = sqlite3_column_int64(q, i++);
        c->text_count = sqlite3_column_int64(q, i++);
        c->text_recount = sqlite3_column_int64(q, i++);
        c->varying_outputs = sqlite3_column_int(q, i++);
        c->requests = sqlite3_column_int(q, i++);
        c->failed_requests = sqlite3_column_int(q, i++);
        c->search_id = sqlite3_column_int64(q, i++);
        c->search_role = col_str_or_null(q, i++);
        c->search_pass = col_int_or(q, i++, -1);
        c->scrapes = sqlite3_column_type(q, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, i);
        i++;
        c->scrapes_failed = sqlite3_column_type(q, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, i);
        i++;
        c->scrape_error = sqlite3_column_type(q, i) == SQLITE_NULL ? NULL : col_free_text(q, i);
        i++;
        /* NULL: every series had points (or none was asked for) */
        c->telemetry_unmatched = sqlite3_column_type(q, i) == SQLITE_NULL ? NULL : col_free_text(q, i);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the cases of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_cases_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void tb_row_cases_free(tb_row_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(c[i].backend);
        free(c[i].options_json);
        free(c[i].status);
        free(c[i].error);
        free(c[i].search_role);
        free(c[i].scrape_error);
        free(c[i].telemetry_unmatched);
    }
    free(c);
}

int tb_read_first_errors(sqlite3 *db, int64_t session, tb_row_request_error **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
    /* the smallest request id of each (case, word): requests are stored
     * in order, repetition by repetition */
    static const char sql[] =
        "SELECT sa.case_id, r.error FROM request r JOIN sample sa ON sa.id = r.sample_id WHERE r.id IN"
        " (SELECT min(r.id) FROM request r JOIN sample sa ON sa.id = r.sample_id"
        "  JOIN bench_case c ON c.id = sa.case_id"
        "  WHERE c.session_id = ? AND sa.warmup = 0 AND r.status <> 'ok' AND r.error IS NOT NULL"
        "  GROUP BY sa.case_id, CASE WHEN instr(r.error, ': ') > 0 THEN substr(r.error, 1, instr(r.error, ': ') - 1)"
        "  ELSE '' END)"
        " ORDER BY sa.case_id, r.id";
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        *err = read_error(db, session, "the failed requests of session %lld", (long long)session);
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_row_request_error *e = grow(out, n, sizeof *e);
        e->case_id = sqlite3_column_int64(q, 0);
        e->error = col_free_text(q, 1);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the failed requests of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_request_errors_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void tb_row_request_errors_free(tb_row_request_error *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].error);
    free(e);
}

/* ", m.n, m.median, ...": metric table alias `alias`'s n and statistics
 * columns (store.h's tb_stat_columns), as stats_of() reads them. */
static void stat_columns(tb_str *sql, const char *alias)
{
    tb_str_appendf(sql, ", %s.n", alias);
    for (size_t k = 0; k < tb_n_stat_columns; k++)
        tb_str_appendf(sql, ", %s.%s", alias, tb_stat_columns[k].column);
}

/* The statistics from column i on (n, then tb_stat_columns); NaN where
 * NULL, n 0. */
static tb_stats stats_of(sqlite3_stmt *q, int i)
{
    tb_stats st = {.n = sqlite3_column_type(q, i) == SQLITE_NULL ? 0 : (size_t)sqlite3_column_int64(q, i)};
    for (size_t k = 0; k < tb_n_stat_columns; k++) {
        double v = col_num(q, i + 1 + (int)k);
        memcpy((char *)&st + tb_stat_columns[k].offset, &v, sizeof v);
    }
    return st;
}

int tb_read_metrics(sqlite3 *db, int64_t session, tb_row_metric **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
    tb_str sql = {0};
    tb_str_append(&sql, "SELECT m.case_id, m.name, m.unit");
    stat_columns(&sql, "m");
    tb_str_append(&sql, " FROM metric m JOIN bench_case c ON c.id = m.case_id WHERE c.session_id = ?"
                        " ORDER BY c.ordinal");
    sqlite3_stmt *q;
    int prc = sqlite3_prepare_v2(db, sql.s, -1, &q, NULL);
    tb_str_free(&sql);
    if (prc != SQLITE_OK) {
        *err = tb_xasprintf("reading metrics: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_row_metric *m = grow(out, n, sizeof *m);
        m->case_id = sqlite3_column_int64(q, 0);
        m->name = col_str(q, 1);
        m->unit = col_str(q, 2);
        m->st = stats_of(q, 3);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the metrics of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_metrics_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void tb_row_metrics_free(tb_row_metric *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].name);
        free(m[i].unit);
    }
    free(m);
}

int tb_read_searches(sqlite3 *db, int64_t session, tb_row_search **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
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
    sqlite3_bind_int64(q, 1, session);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_row_search *x = grow(out, n, sizeof *x);
        x->id = sqlite3_column_int64(q, 0);
        x->backend = col_str(q, 1);
        x->ordinal = sqlite3_column_int(q, 2);
        x->kind = col_str(q, 3);
        x->status = col_str(q, 4);
        x->limits_json = col_str(q, 5);
        x->sync_rate = col_num(q, 6);
        x->max_rate = col_num(q, 7);
        x->slo_rate = col_num(q, 8);
        x->ttft_p99_ms = col_num(q, 9);
        x->tpot_p99_ms = col_num(q, 10);
        x->goodput_pct = col_num(q, 11);
        x->error = sqlite3_column_type(q, 12) == SQLITE_NULL ? NULL : col_free_text(q, 12);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the searches of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_searches_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

void tb_row_searches_free(tb_row_search *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(x[i].backend);
        free(x[i].kind);
        free(x[i].status);
        free(x[i].limits_json);
        free(x[i].error);
    }
    free(x);
}

/* ------------------------------------------------------ summary */

int tb_read_summary(sqlite3 *db, int64_t session, tb_row_summary **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
    tb_str sql = {0};
    tb_str_append(&sql, "SELECT backend");
    dim_columns(&sql, "");
    tb_str_append(&sql, ", swept_options, status, error, req_tps_median, req_tps_p5, aggregate_tps, decode_tps,"
                        " ttft_ms, tpot_ms, e2e_ms, e2e_p95_ms, ttft_p99_ms, nfe, tokens_per_forward, agg_tps_cv,"
                        " peak_device_mib, calls, count_mismatches, requests, failed_requests, accuracy,"
                        " accuracy_ci_lo, accuracy_ci_hi, judge_ppl, req_per_s, error_rate, goodput,"
                        " sent_per_s,"
                        " (SELECT b.options_json FROM backend b WHERE b.session_id = su.session"
                        "    AND b.label = su.backend),"
                        /* the view has no case id: the case of this backend
                         * with these dimensions and swept options */
                        " (SELECT mt.mean FROM metric mt JOIN bench_case c ON c.id = mt.case_id"
                        "    JOIN backend b ON b.id = c.backend_id WHERE c.session_id = su.session"
                        "    AND b.label = su.backend AND c.options_json IS su.swept_options");
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column)
            tb_str_appendf(&sql, " AND c.%s IS su.%s", tb_dim_defs[d].column, tb_dim_defs[d].column);
    tb_str_append(&sql, " AND mt.name = 'prompt_len' LIMIT 1)"
                        " FROM summary su WHERE session = ? ORDER BY rowid");
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db, sql.s, -1, &q, NULL);
    tb_str_free(&sql);
    if (rc != SQLITE_OK) {
        *err = tb_xstrdup(sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_row_summary *r = grow(out, n, sizeof *r);
        r->backend = col_str(q, 0);
        int i = dim_values(q, 1, &r->dims);
        r->swept_options = col_str(q, i++);
        r->status = col_str(q, i++);
        r->error = col_free_text(q, i++);
        double *nums[] = {&r->req_tps_median, &r->req_tps_p5, &r->aggregate_tps, &r->decode_tps, &r->ttft_ms,
                          &r->tpot_ms, &r->e2e_ms, &r->e2e_p95_ms, &r->ttft_p99_ms, &r->nfe, &r->tokens_per_forward,
                          &r->agg_tps_cv, &r->peak_device_mib};
        for (size_t k = 0; k < TB_ARRAY_LEN(nums); k++)
            *nums[k] = col_num(q, i++);
        r->calls = sqlite3_column_type(q, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, i);
        i++;
        r->count_mismatches = sqlite3_column_int64(q, i++);
        r->requests = sqlite3_column_int64(q, i++);
        r->failed_requests = sqlite3_column_int64(q, i++);
        double *more[] = {&r->accuracy, &r->accuracy_ci_lo, &r->accuracy_ci_hi, &r->judge_ppl, &r->req_per_s,
                          &r->error_rate, &r->goodput, &r->sent_per_s};
        for (size_t k = 0; k < TB_ARRAY_LEN(more); k++)
            *more[k] = col_num(q, i++);
        r->tpot_p99_ms = NAN;
        r->canvas_gap_ms = NAN;
        r->backend_options_json = col_str(q, i++);
        r->prompt_len_mean = col_num(q, i++);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the cases of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_summaries_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -1;
    }
    /* The p99 of TPOT, which the view lacks (a schema change for one
     * column): the cases in the view's order (ordinal), matched by
     * position and backend; none when they differ. */
    if (sqlite3_prepare_v2(db,
                           "SELECT (SELECT p99 FROM metric WHERE case_id = c.id AND name = 'tpot_ms'), b.label,"
                           " (SELECT median FROM metric WHERE case_id = c.id AND name = 'canvas_gap_ms'),"
                           " (SELECT n FROM metric WHERE case_id = c.id AND name = 'canvas_gap_ms')"
                           " FROM bench_case c JOIN backend b ON b.id = c.backend_id"
                           " WHERE c.session_id = ? ORDER BY c.ordinal",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, session);
        size_t k = 0;
        int same = 1;
        double *p99 = tb_xcalloc(*n ? *n : 1, sizeof *p99), *gap = tb_xcalloc(*n ? *n : 1, sizeof *gap);
        int64_t *gap_n = tb_xcalloc(*n ? *n : 1, sizeof *gap_n);
        while (sqlite3_step(q) == SQLITE_ROW && k <= *n) {
            const unsigned char *label = sqlite3_column_text(q, 1);
            if (k < *n) {
                p99[k] = col_num(q, 0);
                gap[k] = col_num(q, 2);
                gap_n[k] = sqlite3_column_int64(q, 3);
                same &= label && strcmp((const char *)label, (*out)[k].backend) == 0;
            }
            k++;
        }
        if (k == *n && same)
            for (k = 0; k < *n; k++)
                (*out)[k].tpot_p99_ms = p99[k], (*out)[k].canvas_gap_ms = gap[k], (*out)[k].canvas_gap_n = gap_n[k];
        free(p99);
        free(gap);
        free(gap_n);
        sqlite3_finalize(q);
    }
    return 0;
}

void tb_row_summaries_free(tb_row_summary *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(r[i].backend);
        free(r[i].swept_options);
        free(r[i].status);
        free(r[i].error);
        free(r[i].backend_options_json);
    }
    free(r);
}

int tb_read_summary_table(sqlite3 *db, int64_t session, tb_row_table *t, char **err)
{
    memset(t, 0, sizeof *t);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT * FROM summary WHERE session = ?", -1, &q, NULL) != SQLITE_OK) {
        *err = tb_read_error(db, session, "the summary view");
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    t->n_cols = (size_t)sqlite3_column_count(q);
    t->names = tb_xcalloc(t->n_cols + 1, sizeof *t->names);
    for (size_t i = 0; i < t->n_cols; i++)
        t->names[i] = tb_xstrdup(sqlite3_column_name(q, (int)i));
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        t->cells = tb_xrealloc(t->cells, (t->n_rows + 1) * (t->n_cols ? t->n_cols : 1) * sizeof *t->cells);
        for (size_t i = 0; i < t->n_cols; i++)
            t->cells[t->n_rows * t->n_cols + i] = col_str_or_null(q, (int)i);
        t->n_rows++;
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the cases of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_table_free(t);
        return -1;
    }
    return 0;
}

void tb_row_table_free(tb_row_table *t)
{
    for (size_t i = 0; i < t->n_cols; i++)
        free(t->names[i]);
    for (size_t i = 0; i < t->n_rows * t->n_cols; i++)
        free(t->cells[i]);
    free(t->names);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

/* Every request of the session, one row each: its case (ordinal,
 * backend), its call (repetition, warm-up), then the request columns the
 * JSON export carries (store.h), less the JSON ones (emissions): the
 * per-request CSV. */
int tb_read_request_table(sqlite3 *db, int64_t session, tb_row_table *t, char **err)
{
    memset(t, 0, sizeof *t);
    tb_str cols = {0};
    for (size_t k = 0; k < tb_n_request_columns; k++)
        if (tb_request_columns[k].export_key && !tb_request_columns[k].export_json)
            tb_str_appendf(&cols, ", r.%s AS %s", tb_request_columns[k].column, tb_request_columns[k].export_key);
    char *sql = tb_xasprintf("SELECT c.ordinal AS \"case\", b.label AS backend, sa.repetition AS repetition,"
                             " sa.warmup AS warmup%s"
                             " FROM request r JOIN sample sa ON sa.id = r.sample_id"
                             " JOIN bench_case c ON c.id = sa.case_id JOIN backend b ON b.id = c.backend_id"
                             " WHERE c.session_id = ? ORDER BY c.ordinal, sa.repetition, r.idx",
                             cols.s ? cols.s : "");
    tb_str_free(&cols);
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
    free(sql);
    if (rc != SQLITE_OK) {
        *err = tb_read_error(db, session, "the requests");
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    t->n_cols = (size_t)sqlite3_column_count(q);
    t->names = tb_xcalloc(t->n_cols + 1, sizeof *t->names);
    for (size_t i = 0; i < t->n_cols; i++)
        t->names[i] = tb_xstrdup(sqlite3_column_name(q, (int)i));
    size_t cap = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (t->n_rows == cap) { /* doubling: a session may hold many requests */
            cap = cap ? 2 * cap : 64;
            t->cells = tb_xrealloc(t->cells, cap * t->n_cols * sizeof *t->cells);
        }
        for (size_t i = 0; i < t->n_cols; i++)
            t->cells[t->n_rows * t->n_cols + i] = col_str_or_null(q, (int)i);
        t->n_rows++;
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the requests of session %lld", (long long)session);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_table_free(t);
        return -1;
    }
    return 0;
}

static const char json_sql[] =
    "SELECT json_object("
    " 'session', (SELECT json_object('id', id, 'uuid', uuid, 'suite', suite_name, 'suite_path', suite_path,"
    "   'suite_sha256', suite_sha256, 'suite_text', suite_text, 'tokbench_version', tokbench_version,"
    "   'git_commit', git_commit, 'compiler', compiler, 'cuda_build_version', cuda_build_version,"
    "   'command_line', command_line, 'started_at', started_at, 'finished_at', finished_at, 'status', status,"
    "   'warmup', warmup, 'repeat', repeat, 'seed', seed, 'config_sha256', config_sha256,"
    "   'config', json(config_json)) FROM session WHERE id = ?1),"
    " 'machine', (SELECT json(m.info_json) FROM machine m JOIN session s ON s.machine_id = m.id WHERE s.id = ?1),"
    " 'backends', (SELECT json_group_array(json_object('label', label, 'plugin', plugin, 'plugin_path', plugin_path,"
    "   'plugin_version', plugin_version, 'abi_major', abi_major, 'capabilities', capabilities, 'model', model,"
    "   'options', json(options_json), 'info', json(info_json))) FROM backend WHERE session_id = ?1),"
    " 'searches', (SELECT json_group_array(json_object('id', x.id, 'backend', b.label, 'ordinal', x.ordinal,"
    "   'kind', x.kind, 'limits', json(x.limits_json), 'status', x.status, 'sync_rate', x.sync_rate,"
    "   'max_rate', x.max_rate, 'slo_max_rate', x.slo_rate, 'error', x.error))"
    "   FROM search x JOIN backend b ON b.id = x.backend_id WHERE x.session_id = ?1),"
    " 'cases', (SELECT json_group_array(json_object('ordinal', c.ordinal, 'backend', b.label%s,"
    "   'options', json(c.options_json), 'status', c.status, 'error', c.error,"
    "   'started_at', c.started_at, 'finished_at', c.finished_at, 'case_wall_ns', c.case_wall_ns,"
    "   'host_peak_rss_bytes', c.host_peak_rss_bytes, 'search_id', c.search_id, 'search_role', c.search_role,"
    "   'search_pass', c.search_pass,"
    "   'scrapes', c.scrapes, 'scrapes_failed', c.scrapes_failed, 'scrape_error', c.scrape_error,"
    "   'telemetry', (SELECT json_group_array(json_object('source', ts.source, 'name', ts.name,"
    "       'points', (SELECT json_group_array(json_array(p.t_ns, p.value))"
    "         FROM (SELECT * FROM telemetry_point WHERE series_id = ts.id ORDER BY t_ns) p)))"
    "     FROM (SELECT * FROM telemetry_series WHERE case_id = c.id ORDER BY id) ts),"
    "   'metrics', (SELECT json_group_object(name, json_object('unit', unit, 'n', n%s)) FROM metric"
    "     WHERE case_id = c.id),"
    "   'samples', (SELECT json_group_array(json_object(%s,"
    "       'requests', (SELECT json_group_array(json_object(%s))"
    "         FROM (SELECT * FROM request WHERE sample_id = sa.id ORDER BY idx) r)))"
    "     FROM (SELECT * FROM sample WHERE case_id = c.id ORDER BY repetition) sa)))"
    "   FROM (SELECT * FROM bench_case WHERE session_id = ?1 ORDER BY ordinal) c"
    "   JOIN backend b ON b.id = c.backend_id))";

/* "'key', alias.column, ..." of the exported columns of a registry. */
static void export_columns(tb_str *out, const char *alias, const tb_store_column *cols, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (cols[k].export_key)
            tb_str_appendf(out, cols[k].export_json ? "%s'%s', json(%s.%s)" : "%s'%s', %s.%s", out->len ? ", " : "",
                           cols[k].export_key, alias, cols[k].column);
}

int tb_read_session_json(sqlite3 *db, int64_t session, char **json, char **err)
{
    /* each case's dimensions by name (dims.h), after its backend */
    tb_str dims = {0};
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column)
            tb_str_appendf(&dims, ", '%s', c.%s", tb_dim_defs[d].name, tb_dim_defs[d].column);
    /* each metric's statistics by column name (store.h) */
    tb_str stats = {0};
    for (size_t k = 0; k < tb_n_stat_columns; k++)
        tb_str_appendf(&stats, ", '%s', %s", tb_stat_columns[k].column, tb_stat_columns[k].column);
    /* each sample's and request's exported columns (store.h) */
    tb_str samples = {0}, requests = {0};
    export_columns(&samples, "sa", tb_sample_columns, tb_n_sample_columns);
    export_columns(&requests, "r", tb_request_columns, tb_n_request_columns);
    char *sql = tb_xasprintf(json_sql, dims.s, stats.s, samples.s, requests.s);
    tb_str_free(&dims);
    tb_str_free(&stats);
    tb_str_free(&samples);
    tb_str_free(&requests);
    *json = NULL;
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
    free(sql);
    if (rc != SQLITE_OK) {
        *err = tb_read_error(db, session, "the session");
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    if (sqlite3_step(q) == SQLITE_ROW)
        *json = col_free_text(q, 0);
    else /* json() of a column that is not JSON fails the whole query: name the row */
        *err = read_error(db, session, "session %lld", (long long)session);
    sqlite3_finalize(q);
    return *json ? 0 : -1;
}

/* ------------------------------------------------------ samples */

const tb_sample_source tb_sample_sources[] = {
    {"agg_tps", "sa.aggregate_tps"},
    {"decode_tps", "sa.decode_tps"},
    {"wall_ms", "sa.wall_ns / 1e6"},
    {"tokens_per_forward", "sa.tokens_per_forward"},
    {"req_tps", "r.tps"},
    {"ttft_ms", "r.ttft_ns / 1e6"},
    {"tpot_ms", "r.tpot_ns / 1e6"},
    {"e2e_ms", "r.e2e_ns / 1e6"},
};
const size_t tb_n_sample_sources = TB_ARRAY_LEN(tb_sample_sources);

/* The first column of every row of q, NULLs left out, appended to *out
 * (*n of them); the last step's code. */
static int doubles_of(sqlite3_stmt *q, double **out, size_t *n)
{
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (sqlite3_column_type(q, 0) == SQLITE_NULL)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            *out = tb_xrealloc(*out, cap * sizeof **out);
        }
        (*out)[(*n)++] = sqlite3_column_double(q, 0);
    }
    return rc;
}

int tb_read_case_samples(sqlite3 *db, int64_t session, int64_t case_id, const tb_sample_source *src, double **out,
                         size_t *n, char **err)
{
    /* one value per call or per request, as the registry counts the
     * metric's n */
    const tb_metric_def *def = tb_metric_find(src->name);
    const char *per = def ? def->samples : "";
    *out = NULL;
    *n = 0;
    if (strcmp(per, "calls") != 0 && strcmp(per, "requests") != 0) {
        *err = tb_xasprintf("internal error: metric %s is not sampled by calls or requests (metrics.c)", src->name);
        return -1;
    }
    char *sql = strcmp(per, "requests") == 0
                    ? tb_xasprintf("SELECT %s FROM request r JOIN sample sa ON sa.id = r.sample_id"
                                   " WHERE sa.case_id = ? AND sa.warmup = 0 AND r.status = 'ok'"
                                   " AND %s IS NOT NULL", src->expr, src->expr)
                    : tb_xasprintf("SELECT %s FROM sample sa WHERE sa.case_id = ? AND sa.warmup = 0"
                                   " AND %s IS NOT NULL", src->expr, src->expr);
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
    free(sql);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, case_id);
        rc = doubles_of(q, out, n);
    }
    if (rc != SQLITE_DONE) {
        *err = read_error(db, session, "the %s samples of case id %lld", src->name, (long long)case_id);
        free(*out);
        *out = NULL;
        *n = 0;
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int tb_read_itl(sqlite3 *db, int64_t session, int64_t case_id, double **out, size_t *n, char **err)
{
    /* emissions_json: [[ms since submit, tokens], ...] in order; the
     * first emission of a request has no gap (NULL, left out). */
    static const char sql[] =
        "SELECT t - lag(t) OVER (PARTITION BY rid ORDER BY k) FROM ("
        " SELECT r.id AS rid, e.key AS k, json_extract(e.value, '$[0]') AS t"
        " FROM request r JOIN sample sa ON sa.id = r.sample_id, json_each(r.emissions_json) e"
        " WHERE sa.case_id = ? AND sa.warmup = 0 AND r.status = 'ok')";
    *out = NULL;
    *n = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_read_error(db, session, "the emissions of a case");
        return -1;
    }
    sqlite3_bind_int64(q, 1, case_id);
    int rc = doubles_of(q, out, n);
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the emissions of case id %lld", (long long)case_id);
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

int tb_read_telemetry(sqlite3 *db, int64_t session, int64_t case_id, tb_row_telemetry *out, char **err)
{
    memset(out, 0, sizeof *out);
    static const char sql[] = "SELECT s.id, s.source, s.name, p.t_ns, p.value FROM telemetry_series s"
                              " JOIN telemetry_point p ON p.series_id = s.id WHERE s.case_id = ?"
                              " ORDER BY s.id, p.t_ns";
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        if (strstr(sqlite3_errmsg(db), "no such table"))
            return 0; /* a database from before telemetry */
        *err = tb_read_error(db, session, "the telemetry of a case");
        return -1;
    }
    sqlite3_bind_int64(q, 1, case_id);
    int64_t last = -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        if (id != last) {
            tb_row_series *s = grow(&out->s, &out->n, sizeof *s);
            s->source = col_str(q, 1);
            s->name = col_str(q, 2);
            last = id;
            cap = 0;
        }
        tb_row_series *s = &out->s[out->n - 1];
        if (s->n == cap) {
            cap = cap ? 2 * cap : 64;
            s->t_s = tb_xrealloc(s->t_s, cap * sizeof *s->t_s);
            s->v = tb_xrealloc(s->v, cap * sizeof *s->v);
        }
        s->t_s[s->n] = (double)sqlite3_column_int64(q, 3) * 1e-9;
        s->v[s->n++] = col_num(q, 4);
    }
    if (rc != SQLITE_DONE)
        *err = read_error(db, session, "the telemetry of case id %lld", (long long)case_id);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        tb_row_telemetry_free(out);
        return -1;
    }
    return 0;
}

void tb_row_telemetry_free(tb_row_telemetry *t)
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

/* ------------------------------------------------------ history */

/* Every value of a query's first column, comma-separated. */
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

char *tb_read_backend_labels(sqlite3 *db)
{
    return list_of(db, "SELECT DISTINCT label FROM backend ORDER BY label", NULL);
}

char *tb_read_metric_names(sqlite3 *db, const char *label)
{
    return list_of(db,
                   "SELECT DISTINCT m.name FROM metric m JOIN bench_case c ON c.id = m.case_id"
                   " JOIN backend b ON b.id = c.backend_id WHERE b.label = ? ORDER BY m.name",
                   label);
}

/* One row (1), none (0), or -1 with *err: a read error is no answer. */
static int step_one(sqlite3 *db, sqlite3_stmt *q, const char *what, char **err)
{
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        return rc == SQLITE_ROW;
    *err = tb_read_error(db, -1, what);
    return -1;
}

int tb_read_backend_exists(sqlite3 *db, const char *label, char **err)
{
    sqlite3_stmt *q;
    int found = -1;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM backend WHERE label = ? LIMIT 1", -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, label, -1, SQLITE_TRANSIENT);
        found = step_one(db, q, "the backends", err);
    } else {
        *err = tb_read_error(db, -1, "the backends");
    }
    sqlite3_finalize(q);
    return found;
}

int tb_read_metric_unit(sqlite3 *db, const char *label, const char *metric, char **unit, char **err)
{
    sqlite3_stmt *q;
    int found = -1;
    *unit = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT unit FROM metric m JOIN bench_case c ON c.id = m.case_id JOIN backend b"
                           " ON b.id = c.backend_id WHERE b.label = ? AND m.name = ? LIMIT 1",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, label, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(q, 2, metric, -1, SQLITE_TRANSIENT);
        found = step_one(db, q, "the metrics", err);
        if (found > 0)
            *unit = col_str(q, 0);
    } else {
        *err = tb_read_error(db, -1, "the metrics");
    }
    sqlite3_finalize(q);
    return found;
}

/* A typed number: the whole text, finite (1), else 0. */
static int typed_number(const char *text, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(text, &end);
    return end != text && !*end && !errno && isfinite(*v);
}

/* SQL tb_filter_eq(STORED, TYPED, DIM): does a history filter's value
 * TYPED match the stored value (docs/REPORTS.md, "tokbench history")?
 * DIM >= 0, a dimension (a number): the typed number equals the stored
 * one exactly, or the stored one as show and history print it
 * (tb_case_dim_text) reads back as the typed number: "40" and "40.0"
 * match a rate of 40, "4.0" a concurrency of 4, "88.5879" a probe at
 * 88.58791234. DIM < 0, an option: text as text, a number stored as a
 * number compared as a number. */
static void filter_eq_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    int type = sqlite3_value_type(argv[0]);
    const char *typed = (const char *)sqlite3_value_text(argv[1]);
    int dim = sqlite3_value_int(argv[2]);
    int eq = 0;
    double want, got;
    if (type == SQLITE_NULL || !typed) {
        eq = 0;
    } else if (type == SQLITE_TEXT || type == SQLITE_BLOB) {
        eq = strcmp((const char *)sqlite3_value_text(argv[0]), typed) == 0;
    } else if (typed_number(typed, &want)) {
        got = sqlite3_value_double(argv[0]);
        eq = got == want;
        if (!eq && dim >= 0 && dim < TB_N_DIMS) {
            tb_case c = {0};
            char text[48];
            double shown;
            tb_case_dim_set(&c, (tb_dim)dim, got);
            eq = typed_number(tb_case_dim_text(&c, (tb_dim)dim, text, sizeof text), &shown) && shown == want;
        }
    }
    sqlite3_result_int(ctx, eq);
}

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
    int dim = -1;
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column && strcmp(key, tb_dim_defs[d].name) == 0) {
            col = tb_dim_defs[d].column;
            dim = d;
        }
    char *expr = col ? tb_xasprintf("c.%s", col) : tb_xasprintf("json_extract(c.options_json, '$.\"%s\"')", key);
    tb_str_appendf(sql, " AND (0");
    char *copy = tb_xstrdup(eq + 1), *save = NULL;
    int rc = 0;
    for (char *v = strtok_r(copy, ",", &save); v && rc == 0; v = strtok_r(NULL, ",", &save)) {
        v = tb_trim(v);
        double num;
        if (strcmp(v, "none") == 0 || strcmp(v, "-") == 0) {
            tb_str_appendf(sql, " OR %s IS NULL", expr);
            continue;
        }
        if (dim >= 0 && !typed_number(v, &num)) {
            *err = tb_xasprintf("filter \"%s\": %s is a number (or none), got \"%s\"", f, key, v);
            rc = -1;
            break;
        }
        /* A dimension as a number, an option's text as text (filter_eq_fn). */
        tb_str_appendf(sql, " OR tb_filter_eq(%s, ?, %d)", expr, dim);
        *vals = tb_xrealloc(*vals, (*n_vals + 1) * sizeof **vals);
        (*vals)[(*n_vals)++] = tb_xstrdup(v);
    }
    free(key);
    free(copy);
    free(expr);
    tb_str_append(sql, ")");
    return rc;
}

/* Is filter f's KEY a dimension, or an option swept for backend `label`
 * (in some case's options): 1; 0 with *err naming the key (a typo matched no case,
 * which read as "no case matches"); -1 on a read error (*err). Its syntax
 * is add_filter's to check. */
static int filter_key_known(sqlite3 *db, const char *label, const char *f, char **err)
{
    const char *eq = strchr(f, '=');
    if (!eq || eq == f)
        return 1;
    char *key = tb_xstrndup(f, (size_t)(eq - f));
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column && strcmp(key, tb_dim_defs[d].name) == 0) {
            free(key);
            return 1;
        }
    sqlite3_stmt *q = NULL;
    int known = -1;
    if (sqlite3_prepare_v2(db, "SELECT EXISTS (SELECT 1 FROM bench_case c JOIN backend b ON b.id = c.backend_id"
                               " WHERE b.label = ?1 AND json_type(c.options_json, '$.\"' || ?2 || '\"') IS NOT NULL)",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, label, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(q, 2, key, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(q) == SQLITE_ROW)
            known = sqlite3_column_int(q, 0);
    }
    sqlite3_finalize(q);
    if (known < 0) {
        *err = tb_read_error(db, -1, "the backend's options");
    } else if (!known) {
        tb_str dims = {0};
        for (int d = 0; d < TB_N_DIMS; d++)
            if (tb_dim_defs[d].column)
                tb_str_appendf(&dims, "%s%s", dims.len ? ", " : "", tb_dim_defs[d].name);
        *err = tb_xasprintf("filter \"%s\": unknown key \"%s\" (expected a dimension — %s — or an option swept for "
                            "backend \"%s\")",
                            f, key, dims.s, label);
        tb_str_free(&dims);
    }
    free(key);
    return known;
}

int tb_read_history(sqlite3 *db, const char *label, const char *metric, char *const *filters, size_t n_filters,
                    tb_row_history **out, size_t *n, char **err)
{
    *out = NULL;
    *n = 0;
    tb_str sql = {0};
    tb_str_append(&sql, "SELECT s.id, s.started_at, s.git_commit, s.tokbench_version, s.status, m.hostname,"
                        " coalesce(m.gpu_name, m.cpu_model), m.fingerprint, b.model,"
                        " coalesce(json_extract(b.info_json, '$.dtype'), ''), b.plugin_version, c.status,"
                        " c.options_json, b.options_json, s.config_sha256, s.config_json");
    stat_columns(&sql, "mt");
    dim_columns(&sql, "c.");
    tb_str_append(&sql, ", (SELECT mean FROM metric WHERE case_id = c.id AND name = 'prompt_len')");
    tb_str_append(&sql, ", coalesce(s.shard_index, -1), coalesce(s.shard_count, -1),"
                        " coalesce((SELECT min(sh.session_id) FROM shard sh WHERE sh.source_uuid = s.uuid), -1)");
    tb_str_append(&sql, " FROM bench_case c JOIN backend b ON b.id = c.backend_id JOIN session s ON s.id = c.session_id"
                        " JOIN machine m ON m.id = s.machine_id"
                        " LEFT JOIN metric mt ON mt.case_id = c.id AND mt.name = ?2"
                        " WHERE b.label = ?1");
    char **vals = NULL;
    size_t n_vals = 0;
    int rc = 0;
    if (n_filters && sqlite3_create_function_v2(db, "tb_filter_eq", 3, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                                filter_eq_fn, NULL, NULL, NULL) != SQLITE_OK) {
        *err = tb_read_error(db, -1, "the history's filters");
        rc = -2;
    }
    for (size_t i = 0; i < n_filters && rc == 0; i++) {
        rc = add_filter(&sql, filters[i], &vals, &n_vals, err);
        int known = rc == 0 ? filter_key_known(db, label, filters[i], err) : 1;
        rc = rc ? rc : known == 1 ? 0 : known == 0 ? -1 : -2;
    }
    tb_str_append(&sql, " ORDER BY s.started_at, s.id, c.ordinal");
    sqlite3_stmt *q = NULL;
    if (rc == 0 && sqlite3_prepare_v2(db, sql.s, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_read_error(db, -1, "the history");
        rc = -2;
    }
    if (rc == 0) {
        sqlite3_bind_text(q, 1, label, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(q, 2, metric, -1, SQLITE_TRANSIENT);
        for (size_t i = 0; i < n_vals; i++)
            sqlite3_bind_text(q, 3 + (int)i, vals[i], -1, SQLITE_TRANSIENT);
        int step;
        while ((step = sqlite3_step(q)) == SQLITE_ROW) {
            tb_row_history *p = grow(out, n, sizeof *p);
            int i = 0;
            p->session = sqlite3_column_int64(q, i++);
            char **strs[] = {&p->started_at, &p->commit, &p->version, &p->session_status, &p->host,
                             &p->hardware, &p->fingerprint, &p->model, &p->dtype, &p->plugin_version,
                             &p->case_status, &p->options_json, &p->backend_options_json, &p->config_sha256,
                             &p->config_json};
            for (size_t k = 0; k < TB_ARRAY_LEN(strs); k++)
                *strs[k] = col_str(q, i++);
            p->st = stats_of(q, i);
            int k = dim_values(q, i + 1 + (int)tb_n_stat_columns, &p->dims);
            p->prompt_len_mean = col_num(q, k);
            p->shard_index = sqlite3_column_int64(q, k + 1);
            p->shard_count = sqlite3_column_int64(q, k + 2);
            p->joined_in = sqlite3_column_int64(q, k + 3);
        }
        if (step != SQLITE_DONE) { /* an error, not the end of the cases */
            *err = read_error(db, -1, "the cases of backend \"%s\"", label);
            rc = -2;
        }
    }
    sqlite3_finalize(q);
    for (size_t i = 0; i < n_vals; i++)
        free(vals[i]);
    free(vals);
    tb_str_free(&sql);
    if (rc != 0) {
        tb_row_history_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

void tb_row_history_free(tb_row_history *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tb_row_history *p = &h[i];
        char *strs[] = {p->started_at, p->commit, p->version, p->session_status, p->host,
                        p->hardware, p->fingerprint, p->model, p->dtype, p->plugin_version,
                        p->case_status, p->options_json, p->backend_options_json, p->config_sha256,
                        p->config_json};
        for (size_t k = 0; k < TB_ARRAY_LEN(strs); k++)
            free(strs[k]);
    }
    free(h);
}
