/* test_store.c — core/store.c against real SQLite files in a temporary
 * folder: creation and migration, refusal of newer and non-database files,
 * a whole session written through the API and read back with SQL (NULLs
 * for unknowns, the summary view), failed writes rolled back, and two
 * processes writing one file at once.
 *
 * Environment (set by tests/meson.build): TB_NULL_PLUGIN = null.so (a
 * backend row needs an opened plugin), TB_SOURCE_ROOT (to count store/schema/
 * migrations independently of the embedded list). */
#define _GNU_SOURCE
#include "dims.h"
#include "metrics.h"
#include "plan.h"
#include "reader.h"
#include "shard_join.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tb_config.h"
#include "util.h"

static char tmp_root[PATH_MAX];
static const char *null_path;

#define NO_VALUE INT64_MIN /* q_int: NULL or no row */

static void die(const char *what)
{
    fprintf(stderr, "test_store: %s: %s\n", what, strerror(errno));
    exit(2);
}

static char *tmp_path(const char *name)
{
    return tb_xasprintf("%s/%s", tmp_root, name);
}

/* ------------------------------------------------------ SQL helpers */

/* First column of the first row of a printf-formatted query, as an
 * integer; NO_VALUE for NULL, no row, or an error. */
static int64_t q_int(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *q = NULL;
    int64_t v = NO_VALUE;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fprintf(stderr, "  q_int: %s\n  in: %s\n", sqlite3_errmsg(db), sql);
    else if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_free(sql);
    return v;
}

/* As q_int, as a double; NaN for NULL/no row/error. */
static double q_real(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *q = NULL;
    double v = NAN;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fprintf(stderr, "  q_real: %s\n  in: %s\n", sqlite3_errmsg(db), sql);
    else if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        v = sqlite3_column_double(q, 0);
    sqlite3_finalize(q);
    sqlite3_free(sql);
    return v;
}

/* As q_int, as text (malloc'd); NULL for NULL/no row/error. */
static char *q_text(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *q = NULL;
    char *v = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fprintf(stderr, "  q_text: %s\n  in: %s\n", sqlite3_errmsg(db), sql);
    else if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        v = tb_xstrdup((const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    sqlite3_free(sql);
    return v;
}

/* 1 when the first column of the first row is NULL (a row must exist). */
static int q_is_null(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *q = NULL;
    int v = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fprintf(stderr, "  q_is_null: %s\n  in: %s\n", sqlite3_errmsg(db), sql);
    else if (sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_type(q, 0) == SQLITE_NULL;
    sqlite3_finalize(q);
    sqlite3_free(sql);
    return v;
}

#define CHECK_TEXT(db, want, ...)                                             \
    do {                                                                      \
        char *t_ = q_text((db), __VA_ARGS__);                                 \
        CHECK_STR(t_, (want));                                                \
        free(t_);                                                             \
    } while (0)

static sqlite3 *raw_open(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        fprintf(stderr, "test_store: %s: %s\n", path, db ? sqlite3_errmsg(db) : "?");
        exit(2);
    }
    return db;
}

static void raw_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "test_store: SQL failed: %s\n  in: %s\n", msg, sql);
        exit(2);
    }
}

static char *read_all(const char *path, size_t *len)
{
    char *s = tb_read_file(path, len);
    if (!s)
        die(path);
    return s;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Migrations in store/schema/ counted from the source tree: schema.sql is 1, then
 * migrations/NNNN_*.sql must be numbered 0002, 0003, ... without gaps. */
static int count_migration_files(void)
{
    const char *root = getenv("TB_SOURCE_ROOT");
    if (!root)
        return -1;
    char *dir = tb_xasprintf("%s/store/schema/migrations", root);
    DIR *d = opendir(dir);
    free(dir);
    if (!d)
        return -1;
    int seen[1000] = {0}, n = 0, max = 1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int num = 0;
        size_t l = strlen(e->d_name);
        if (l > 9 && sscanf(e->d_name, "%4d_", &num) == 1 && strcmp(e->d_name + l - 4, ".sql") == 0 && num > 1 &&
            num < 1000) {
            seen[num]++;
            n++;
            if (num > max)
                max = num;
        }
    }
    closedir(d);
    for (int i = 2; i <= max; i++)
        if (seen[i] != 1)
            return -1; /* a gap or a duplicate number */
    return n + 1;
}

/* ----------------------------------------------------- record fixtures */

static void fill_machine(tb_machine_info *m, const char *fingerprint)
{
    memset(m, 0, sizeof *m);
    tb_strlcpy(m->hostname, "testhost", sizeof m->hostname);
    tb_strlcpy(m->cpu_model, "Test CPU 9000", sizeof m->cpu_model);
    m->cpu_cores = 16;
    m->ram_bytes = UINT64_C(137438953472); /* 128 GiB */
    tb_strlcpy(m->os, "TestOS 1", sizeof m->os);
    tb_strlcpy(m->kernel, "6.1.0-test", sizeof m->kernel);
    tb_strlcpy(m->arch, "x86_64", sizeof m->arch);
    m->gpu_count = 1;
    tb_strlcpy(m->gpus[0].name, "Test GPU", sizeof m->gpus[0].name);
    tb_strlcpy(m->gpus[0].uuid, "GPU-0000", sizeof m->gpus[0].uuid);
    tb_strlcpy(m->gpus[0].compute_capability, "9.0", sizeof m->gpus[0].compute_capability);
    m->gpus[0].memory_bytes = UINT64_C(150754820096);
    tb_strlcpy(m->gpu_driver, "570.1", sizeof m->gpu_driver);
    tb_strlcpy(m->cuda_driver_version, "12.8", sizeof m->cuda_driver_version);
    tb_strlcpy(m->nvml_status, "ok", sizeof m->nvml_status);
    tb_strlcpy(m->fingerprint, fingerprint, sizeof m->fingerprint);
}

#define SUITE_TEXT "[suite]\nname = unit\n"
/* sha256sum of SUITE_TEXT, computed outside this program. */
#define SUITE_SHA "f8915ccd6d5a982f9fd1f1ea69b5bf45a1892ab52e7ef57563b2a18fbd084d0b"

static tb_suite test_suite = {
    .path = "/suites/unit.ini",
    .name = "unit",
    .warmup = 1,
    .repeat = 1,
    .seed = 42,
    .text = SUITE_TEXT,
};

static tb_suite_backend test_sb = {.label = "nullb", .plugin = "null", .model = "preset:none"};

static void fill_case(tb_case *c, size_t ordinal)
{
    memset(c, 0, sizeof *c);
    c->ordinal = ordinal;
    c->prompt_tokens = 16;
    c->max_new_tokens = 3;
    c->batch = 2;
    c->swept_json = "{}";
}

/* A small valid case: one measured sample of one request, one metric.
 * Returns tb_store_case's result. */
static int64_t write_small_case(tb_store *st, int64_t session, int64_t backend, size_t ordinal, char **err)
{
    tb_case c;
    fill_case(&c, ordinal);
    c.batch = 1;
    const int64_t em[] = {3000, 4000, 6000};
    tb_request_record rq = {.status = 0, .n_out = 3, .recount = 3, .output_ids = 3,
                            .emissions_json = "[[2,1],[3,1],[5,1]]"};
    tb_request_metrics_compute(1000, 0, 3, em, 3, &rq.m);
    tb_sample_record s = {.repetition = 0, .n_requests = 1, .prefill_ns = 100, .decode_ns = 4900,
                          .forward_passes = 3, .peak_device_bytes = -1, .energy_mj = -1, .recount_tokens = 3,
                          .n_emissions = 3, .runner_ns = 10, .requests = &rq};
    const uint32_t n_out = 3;
    const int ok = 1;
    tb_rep_metrics_compute(&rq.m, &n_out, &ok, 1, s.prefill_ns, s.forward_passes, &s.m);
    tb_metric_record mr = {.name = "agg_tps", .unit = "tokens/s",
                           .st = {.n = 1, .median = s.m.aggregate_tps, .p5 = s.m.aggregate_tps,
                                  .p95 = s.m.aggregate_tps, .mean = s.m.aggregate_tps, .stdev = 0, .cv = 0,
                                  .min = s.m.aggregate_tps, .max = s.m.aggregate_tps,
                                  .ci_lo = s.m.aggregate_tps, .ci_hi = s.m.aggregate_tps}};
    tb_case_record rec = {.session_id = session, .backend_id = backend, .c = &c, .status = "ok",
                          .started_at = "2025-01-01T00:00:00.000Z", .finished_at = "2025-01-01T00:00:01.000Z",
                          .case_wall_ns = 5000, .host_peak_rss = 1 << 20, .samples = &s, .n_samples = 1,
                          .metrics = &mr, .n_metrics = 1};
    return tb_store_case(st, &rec, err);
}

/* Machine + session + backend in `st`; the plugin stays open in *pb. */
static int setup_session(tb_store *st, tb_plan_backend *pb, int64_t *machine, int64_t *session, int64_t *backend)
{
    tb_machine_info mi;
    fill_machine(&mi, "fp-session");
    char *err = NULL;
    *machine = tb_store_machine(st, &mi, &err);
    tb_session_info si = {.machine_id = *machine, .suite = &test_suite, .command_line = "tokbench run unit.ini",
                          .config_json = "{\"suite\":{\"seed\":\"1\"}}", .config_sha256 = "c0ffee"};
    *session = *machine >= 0 ? tb_store_session_begin(st, &si, &err) : -1;
    memset(pb, 0, sizeof *pb);
    pb->sb = &test_sb;
    pb->options_json = "{\"step_us\":\"200\"}";
    if (*session < 0) {
        fprintf(stderr, "test_store: %s\n", err);
        free(err);
        return -1;
    }
    if (tb_plugin_open(null_path, 60, NULL, 0, &pb->plugin, &err) != 0) {
        fprintf(stderr, "test_store: cannot open the null plugin: %s\n", err);
        free(err);
        return -1;
    }
    *backend = tb_store_backend(st, *session, pb, &err);
    if (*backend < 0) {
        fprintf(stderr, "test_store: %s\n", err);
        free(err);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- tests */

static const char *const tables[] = {"machine", "session", "backend", "bench_case", "sample", "request", "metric"};

static void test_fresh(void)
{
    int want_version = count_migration_files();
    CHECK(want_version >= 2);
    CHECK(tb_store_schema_version() == want_version);

    char *path = tmp_path("fresh.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        fprintf(stderr, "  %s\n", err);
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    CHECK(q_int(db, "PRAGMA user_version") == tb_store_schema_version());
    for (size_t i = 0; i < TB_ARRAY_LEN(tables); i++)
        CHECK(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = %Q", tables[i]) == 1);
    CHECK(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name = 'summary'") == 1);
    CHECK(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN"
                    " ('case_by_session', 'sample_by_case', 'request_by_sample')") == 3);
    for (size_t i = 0; i < TB_ARRAY_LEN(tables); i++)
        CHECK(q_int(db, "SELECT count(*) FROM %s", tables[i]) == 0);
    CHECK(q_int(db, "SELECT count(*) FROM summary") == 0); /* the view runs */
    CHECK_TEXT(db, "wal", "PRAGMA journal_mode");
    CHECK(q_int(db, "PRAGMA foreign_keys") == 1);
    /* no busy_timeout: the store's own busy handler waits (tb_store_set_lock_wait) */
    CHECK_TEXT(db, "ok", "PRAGMA integrity_check");
    tb_store_close(st);
    tb_store_close(NULL); /* harmless */
    free(path);
}

static void test_reopen(void)
{
    char *path = tmp_path("reopen.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    CHECK(tb_store_notice(st) == NULL); /* nothing to say about a new file */
    tb_machine_info mi;
    fill_machine(&mi, "fp-reopen");
    int64_t id = tb_store_machine(st, &mi, &err);
    CHECK(id > 0 && err == NULL);
    int64_t objects = q_int(tb_store_db(st), "SELECT count(*) FROM sqlite_master");
    char *schema = q_text(tb_store_db(st), "SELECT group_concat(sql, ';') FROM sqlite_master");
    tb_store_close(st);

    st = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (st) {
        sqlite3 *db = tb_store_db(st);
        CHECK(q_int(db, "PRAGMA user_version") == tb_store_schema_version());
        CHECK(q_int(db, "SELECT count(*) FROM sqlite_master") == objects); /* nothing applied twice */
        char *again = q_text(db, "SELECT group_concat(sql, ';') FROM sqlite_master");
        CHECK(again && schema && strcmp(again, schema) == 0);
        free(again);
        CHECK(q_int(db, "SELECT count(*) FROM machine") == 1); /* the data stays */
        CHECK(tb_store_machine(st, &mi, &err) == id);
        CHECK(q_int(db, "SELECT count(*) FROM machine") == 1);
        tb_store_close(st);
    } else {
        fprintf(stderr, "  %s\n", err);
        free(err);
    }
    free(schema);
    free(path);
}

static void test_migration_path(void)
{
    char *path = tmp_path("old.db");
    sqlite3 *db = raw_open(path);
    char *err = NULL;

    /* Target 0 on an empty file: nothing to do. */
    CHECK(tb_store_migrate(db, 0, &err) == 0);
    CHECK(q_int(db, "PRAGMA user_version") == 0);
    CHECK(q_int(db, "SELECT count(*) FROM sqlite_master") == 0);

    /* Schema version 1 only: the tables, not the summary view. */
    CHECK(tb_store_migrate(db, 1, &err) == 0);
    CHECK(q_int(db, "PRAGMA user_version") == 1);
    CHECK(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'bench_case'") == 1);
    CHECK(q_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'summary'") == 0);
    CHECK(tb_store_migrate(db, 1, &err) == 0); /* again: a no-op */
    CHECK(q_int(db, "PRAGMA user_version") == 1);

    /* Data written by a version-1 tokbench. */
    raw_exec(db, "INSERT INTO machine (id, fingerprint, hostname, cpu_model, cpu_cores, ram_bytes, os, kernel, arch,"
                 " gpu_count, nvml_status, info_json) VALUES (7, 'fp-old', 'oldhost', 'Old CPU', 4, 1024, 'OldOS',"
                 " '5.0', 'x86_64', 0, 'no NVML', '{}');"
                 "INSERT INTO session (id, uuid, machine_id, suite_name, suite_path, suite_sha256, suite_text,"
                 " tokbench_version, git_commit, compiler, cuda_build_version, command_line, started_at, status,"
                 " warmup, repeat, seed) VALUES (3, 'u-old', 7, 'oldsuite', '/old.ini', 'x', 'text', '0.0.1', 'abc',"
                 " 'gcc', 'none', 'tokbench run', '2024-01-01T00:00:00.000Z', 'completed', 0, 1, 0);"
                 "INSERT INTO backend (id, session_id, label, plugin, plugin_path, plugin_version, abi_major,"
                 " capabilities, model, options_json) VALUES (5, 3, 'oldb', 'null', '/null.so', '0.9', 1, 'batch',"
                 " 'm', '{}');"
                 "INSERT INTO bench_case (id, session_id, backend_id, ordinal, prompt_tokens, max_new_tokens, batch,"
                 " options_json, status) VALUES (11, 3, 5, 1, 32, 8, 1, '{}', 'ok');");
    sqlite3_close(db);

    tb_store *st = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        fprintf(stderr, "  %s\n", err);
        free(err);
        free(path);
        return;
    }
    db = tb_store_db(st);
    CHECK(q_int(db, "PRAGMA user_version") == tb_store_schema_version());
    CHECK(q_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name = 'summary'") == 1);
    CHECK_TEXT(db, "oldhost", "SELECT hostname FROM machine WHERE id = 7");
    CHECK_TEXT(db, "oldsuite", "SELECT suite_name FROM session WHERE id = 3");
    CHECK(q_int(db, "SELECT count(*) FROM summary") == 1);
    CHECK_TEXT(db, "oldb", "SELECT backend FROM summary");
    CHECK_TEXT(db, "null 0.9", "SELECT plugin FROM summary");
    CHECK_TEXT(db, "none", "SELECT gpu FROM summary");
    CHECK(q_int(db, "SELECT session FROM summary") == 3);
    CHECK(q_int(db, "SELECT prompt_tokens FROM summary") == 32);
    CHECK(q_is_null(db, "SELECT req_tps_median FROM summary"));
    CHECK(q_int(db, "SELECT count_mismatches FROM summary") == 0);
    /* `SELECT *` works: every column of the view resolves. */
    sqlite3_stmt *q = NULL;
    CHECK(sqlite3_prepare_v2(db, "SELECT * FROM summary", -1, &q, NULL) == SQLITE_OK);
    CHECK(q && sqlite3_step(q) == SQLITE_ROW);
    CHECK(q && sqlite3_column_count(q) >= 30);
    sqlite3_finalize(q);
    tb_store_close(st);
    free(path);
}

/* Migration 18 (docs/METRICS.md, "Output-length check"): a request
 * flagged before it was flagged by the old rule, a re-count that
 * differed, whatever the backend returned: it keeps its flag as the text
 * check's verdict, its ids unknown (NULL); the others stay held. */
static void test_migration_output_ids(void)
{
    char *path = tmp_path("v17.db");
    sqlite3 *db = raw_open(path);
    char *err = NULL;
    CHECK(tb_store_migrate(db, 17, &err) == 0);
    raw_exec(db, "INSERT INTO machine (id, fingerprint, hostname, cpu_model, cpu_cores, ram_bytes, os, kernel, arch,"
                 " gpu_count, nvml_status, info_json) VALUES (1, 'fp', 'h', 'c', 1, 1, 'o', 'k', 'a', 0, 'n', '{}');"
                 "INSERT INTO session (id, uuid, machine_id, suite_name, suite_path, suite_sha256, suite_text,"
                 " tokbench_version, git_commit, compiler, cuda_build_version, command_line, started_at, status,"
                 " warmup, repeat, seed) VALUES (1, 'u17', 1, 's', '/s.ini', 'x', 't', '0.1.0', 'abc', 'gcc', 'none',"
                 " 'tokbench run', '2026-01-01T00:00:00.000Z', 'completed', 0, 1, 0);"
                 "INSERT INTO backend (id, session_id, label, plugin, plugin_path, plugin_version, abi_major,"
                 " capabilities, model, options_json) VALUES (1, 1, 'b', 'diffusion', '/d.so', '1', 1, 'tokenizer',"
                 " 'm', '{}');"
                 "INSERT INTO bench_case (id, session_id, backend_id, ordinal, prompt_tokens, max_new_tokens, batch,"
                 " options_json, status) VALUES (1, 1, 1, 1, 32, 16, 2, '{}', 'ok');"
                 "INSERT INTO sample (id, case_id, repetition, warmup, n_requests, wall_ns, output_tokens,"
                 " recount_tokens, n_emissions, runner_ns) VALUES (1, 1, 0, 0, 2, 1000, 32, 30, 2, 1);"
                 "INSERT INTO request (sample_id, idx, status, submit_offset_ns, requested_tokens, output_tokens,"
                 " recount_tokens, count_mismatch, emissions_json) VALUES (1, 0, 'ok', 0, 16, 16, 14, 1, '[]'),"
                 " (1, 1, 'ok', 0, 16, 16, 16, 0, '[]');");
    sqlite3_close(db);
    tb_store *st = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        fprintf(stderr, "  %s\n", err);
        free(err);
        free(path);
        return;
    }
    db = tb_store_db(st);
    CHECK(q_int(db, "SELECT count_mismatch FROM request WHERE idx = 0") == TB_COUNT_NOT_TEXT);
    CHECK(q_int(db, "SELECT count_mismatch FROM request WHERE idx = 1") == TB_COUNT_HELD);
    CHECK(q_int(db, "SELECT count(*) FROM request WHERE output_ids IS NULL") == 2);
    CHECK(q_int(db, "SELECT count_mismatches FROM summary") == 1);
    tb_store_close(st);
    free(path);
}

static void test_newer_refused(void)
{
    char *path = tmp_path("newer.db");
    sqlite3 *db = raw_open(path);
    char *sql = sqlite3_mprintf("CREATE TABLE future (x); INSERT INTO future VALUES (1); PRAGMA user_version = %d",
                                tb_store_schema_version() + 1);
    raw_exec(db, sql);
    sqlite3_free(sql);
    char *err = NULL;
    /* Through the raw migrate call... */
    CHECK(tb_store_migrate(db, tb_store_schema_version(), &err) == -1);
    CHECK_CONTAINS(err, "newer");
    free(err);
    err = NULL;
    sqlite3_close(db);

    size_t len0, len1;
    char *before = read_all(path, &len0);
    /* ...and through open. */
    static char poison_;
    tb_store *st = (tb_store *)&poison_; /* tb_store_open must reset it to NULL */
    CHECK(tb_store_open(path, &st, &err) == -1);
    CHECK(st == NULL);
    CHECK_CONTAINS(err, "newer");
    CHECK_CONTAINS(err, path);
    char *vers = tb_xasprintf("version %d", tb_store_schema_version() + 1);
    CHECK_CONTAINS(err, vers);
    free(vers);
    free(err);

    /* Not modified: same bytes (journal mode included: switching to WAL
     * rewrites the header), no WAL file left, same user_version. */
    char *after = read_all(path, &len1);
    CHECK(len0 == len1 && memcmp(before, after, len0) == 0);
    char *wal = tb_xasprintf("%s-wal", path);
    CHECK(!exists(wal));
    free(wal);
    db = raw_open(path);
    CHECK(q_int(db, "PRAGMA user_version") == tb_store_schema_version() + 1);
    CHECK_TEXT(db, "delete", "PRAGMA journal_mode");
    CHECK(q_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'machine'") == 0);
    sqlite3_close(db);
    free(before);
    free(after);
    free(path);
}

static void test_not_a_database(void)
{
    char *path = tmp_path("garbage.db");
    FILE *f = fopen(path, "w");
    if (!f)
        die(path);
    for (int i = 0; i < 1024; i++)
        fputs("garbage!", f);
    fclose(f);
    size_t len0, len1;
    char *before = read_all(path, &len0);

    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == -1);
    CHECK(st == NULL);
    CHECK_CONTAINS(err, path);
    CHECK_CONTAINS(err, "not a database");
    free(err);
    char *after = read_all(path, &len1);
    CHECK(len0 == len1 && memcmp(before, after, len0) == 0);
    free(before);
    free(after);
    free(path);

    /* A folder that does not exist. */
    path = tmp_path("no/such/dir/x.db");
    err = NULL;
    CHECK(tb_store_open(path, &st, &err) == -1);
    CHECK(st == NULL);
    CHECK_CONTAINS(err, path);
    CHECK_CONTAINS(err, "does not exist");
    free(err);
    free(path);

    /* An empty file is an empty database: it gets the schema. */
    path = tmp_path("empty.db");
    f = fopen(path, "w");
    if (!f)
        die(path);
    fclose(f);
    err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (st) {
        CHECK(q_int(tb_store_db(st), "PRAGMA user_version") == tb_store_schema_version());
        tb_store_close(st);
    } else {
        free(err);
    }
    free(path);
}

static void test_machine(void)
{
    char *path = tmp_path("machine.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_machine_info a, b;
    fill_machine(&a, "fp-a");
    int64_t ida = tb_store_machine(st, &a, &err);
    CHECK(ida > 0);
    /* Same fingerprint, other details (a later hostname change, say):
     * still the same row, first record kept. */
    tb_strlcpy(a.hostname, "renamed", sizeof a.hostname);
    CHECK(tb_store_machine(st, &a, &err) == ida);
    fill_machine(&b, "fp-b");
    b.gpu_count = 0;
    b.cuda_driver_version[0] = '\0';
    b.gpu_driver[0] = '\0';
    tb_strlcpy(b.nvml_status, "libnvidia-ml.so.1 not found", sizeof b.nvml_status);
    int64_t idb = tb_store_machine(st, &b, &err);
    CHECK(idb > 0 && idb != ida);
    CHECK(q_int(db, "SELECT count(*) FROM machine") == 2);

    CHECK_TEXT(db, "testhost", "SELECT hostname FROM machine WHERE id = %lld", (long long)ida);
    CHECK_TEXT(db, "Test CPU 9000", "SELECT cpu_model FROM machine WHERE id = %lld", (long long)ida);
    CHECK(q_int(db, "SELECT cpu_cores FROM machine WHERE id = %lld", (long long)ida) == 16);
    CHECK(q_int(db, "SELECT ram_bytes FROM machine WHERE id = %lld", (long long)ida) == INT64_C(137438953472));
    CHECK(q_int(db, "SELECT gpu_count FROM machine WHERE id = %lld", (long long)ida) == 1);
    CHECK_TEXT(db, "Test GPU", "SELECT gpu_name FROM machine WHERE id = %lld", (long long)ida);
    CHECK(q_int(db, "SELECT gpu_memory_bytes FROM machine WHERE id = %lld", (long long)ida) ==
          INT64_C(150754820096));
    CHECK_TEXT(db, "570.1", "SELECT gpu_driver FROM machine WHERE id = %lld", (long long)ida);
    CHECK_TEXT(db, "12.8", "SELECT cuda_driver_version FROM machine WHERE id = %lld", (long long)ida);
    CHECK_TEXT(db, "9.0", "SELECT compute_capability FROM machine WHERE id = %lld", (long long)ida);
    CHECK(q_int(db, "SELECT json_valid(info_json) FROM machine WHERE id = %lld", (long long)ida) == 1);
    CHECK_TEXT(db, "Test GPU", "SELECT json_extract(info_json, '$.gpus[0].name') FROM machine WHERE id = %lld",
               (long long)ida);
    /* No GPU: NULLs, not empty strings or zeros. */
    CHECK(q_is_null(db, "SELECT gpu_name FROM machine WHERE id = %lld", (long long)idb));
    CHECK(q_is_null(db, "SELECT gpu_memory_bytes FROM machine WHERE id = %lld", (long long)idb));
    CHECK(q_is_null(db, "SELECT gpu_driver FROM machine WHERE id = %lld", (long long)idb));
    CHECK(q_is_null(db, "SELECT cuda_driver_version FROM machine WHERE id = %lld", (long long)idb));
    CHECK(q_is_null(db, "SELECT compute_capability FROM machine WHERE id = %lld", (long long)idb));
    CHECK_TEXT(db, "libnvidia-ml.so.1 not found", "SELECT nvml_status FROM machine WHERE id = %lld",
               (long long)idb);
    tb_store_close(st);
    free(path);
}

/* The worked example of test_metrics.c, through the store. */
static void test_full_session(void)
{
    char *path = tmp_path("session.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        fprintf(stderr, "  %s\n", err);
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, session, backend;
    int ok = setup_session(st, &pb, &machine, &session, &backend);
    CHECK(ok == 0);
    if (ok != 0) {
        tb_plugin_close(&pb.plugin);
        tb_store_close(st);
        free(path);
        return;
    }

    /* session row */
    CHECK(q_int(db, "SELECT machine_id FROM session WHERE id = %lld", (long long)session) == machine);
    CHECK_TEXT(db, "running", "SELECT status FROM session WHERE id = %lld", (long long)session);
    CHECK(q_is_null(db, "SELECT finished_at FROM session WHERE id = %lld", (long long)session));
    CHECK_TEXT(db, "unit", "SELECT suite_name FROM session WHERE id = %lld", (long long)session);
    CHECK_TEXT(db, "/suites/unit.ini", "SELECT suite_path FROM session WHERE id = %lld", (long long)session);
    CHECK_TEXT(db, SUITE_TEXT, "SELECT suite_text FROM session WHERE id = %lld", (long long)session);
    CHECK_TEXT(db, SUITE_SHA, "SELECT suite_sha256 FROM session WHERE id = %lld", (long long)session);
    CHECK_TEXT(db, TB_VERSION, "SELECT tokbench_version FROM session WHERE id = %lld", (long long)session);
    CHECK_TEXT(db, TB_CUDA_BUILD_VERSION, "SELECT cuda_build_version FROM session WHERE id = %lld",
               (long long)session);
    CHECK_TEXT(db, "tokbench run unit.ini", "SELECT command_line FROM session WHERE id = %lld", (long long)session);
    CHECK(q_int(db, "SELECT warmup FROM session WHERE id = %lld", (long long)session) == 1);
    CHECK(q_int(db, "SELECT repeat FROM session WHERE id = %lld", (long long)session) == 1);
    CHECK(q_int(db, "SELECT seed FROM session WHERE id = %lld", (long long)session) == 42);
    /* a version-4 UUID: 8-4-4-4-12 hex, version nibble 4, variant 8..b */
    CHECK(q_int(db, "SELECT length(uuid) = 36 AND substr(uuid, 15, 1) = '4' AND substr(uuid, 20, 1) IN"
                    " ('8','9','a','b') AND uuid GLOB '[0-9a-f]*-*-*-*-*' FROM session WHERE id = %lld",
                (long long)session) == 1);
    CHECK(q_int(db, "SELECT started_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*Z' FROM session"
                    " WHERE id = %lld", (long long)session) == 1);
    /* the resolved configuration beside the text's hash */
    CHECK_TEXT(db, "c0ffee", "SELECT config_sha256 FROM session WHERE id = %lld", (long long)session);
    CHECK_TEXT(db, "{\"suite\":{\"seed\":\"1\"}}", "SELECT config_json FROM session WHERE id = %lld",
               (long long)session);
    /* A second session gets another UUID. */
    tb_session_info si2 = {.machine_id = machine, .suite = &test_suite, .command_line = "again"};
    int64_t session2 = tb_store_session_begin(st, &si2, &err);
    CHECK(session2 > session);
    CHECK(q_is_null(db, "SELECT config_sha256 FROM session WHERE id = %lld", (long long)session2)); /* not given */
    CHECK(q_int(db, "SELECT count(DISTINCT uuid) FROM session") == 2);

    /* backend row */
    CHECK_TEXT(db, "nullb", "SELECT label FROM backend WHERE id = %lld", (long long)backend);
    CHECK_TEXT(db, "null", "SELECT plugin FROM backend WHERE id = %lld", (long long)backend);
    CHECK_TEXT(db, null_path, "SELECT plugin_path FROM backend WHERE id = %lld", (long long)backend);
    CHECK_TEXT(db, "1.0.0", "SELECT plugin_version FROM backend WHERE id = %lld", (long long)backend);
    CHECK(q_int(db, "SELECT abi_major FROM backend WHERE id = %lld", (long long)backend) == TB_ABI_MAJOR);
    CHECK_TEXT(db, "batch,steps,streaming,tokenizer", "SELECT capabilities FROM backend WHERE id = %lld",
               (long long)backend);
    CHECK_TEXT(db, "preset:none", "SELECT model FROM backend WHERE id = %lld", (long long)backend);
    CHECK_TEXT(db, "{\"step_us\":\"200\"}", "SELECT options_json FROM backend WHERE id = %lld", (long long)backend);
    CHECK(q_is_null(db, "SELECT info_json FROM backend WHERE id = %lld", (long long)backend));
    /* describe() text: invalid JSON is kept, wrapped; valid JSON normalized */
    CHECK(tb_store_backend_info(st, backend, "not json {", &err) == 0);
    CHECK_TEXT(db, "not json {", "SELECT json_extract(info_json, '$.invalid_describe') FROM backend WHERE id = %lld",
               (long long)backend);
    CHECK(tb_store_backend_info(st, backend, "{ \"dtype\" : \"f32\", \"device\":\"cpu\", \"random_weights\":true }",
                                &err) == 0);
    CHECK(err == NULL);
    CHECK_TEXT(db, "{\"dtype\":\"f32\",\"device\":\"cpu\",\"random_weights\":true}",
               "SELECT info_json FROM backend WHERE id = %lld", (long long)backend);
    CHECK(tb_store_backend_info(st, 999999, "{}", &err) == -1);
    CHECK_STR(err, "storing the description (describe()) of backend row 999999 failed: no such backend");
    free(err);
    err = NULL;

    /* ---- case 1: one warm-up and one measured sample of two requests */
    tb_case c1;
    fill_case(&c1, 1);
    tb_request_record w[2] = {0}, r[2] = {0};
    tb_sample_record s[2] = {0};
    const int64_t em[] = {3000, 4000, 6000};
    /* warm-up: both ok, text alone; request 0 re-counted 9 of 3 (a
     * mismatch, but in a warm-up), request 1 re-counted 3 of 3 (none) */
    tb_request_metrics_compute(1000, 0, 3, em, 3, &w[0].m);
    tb_request_metrics_compute(1000, 0, 3, em, 3, &w[1].m);
    w[0].n_out = 3, w[0].recount = 9, w[0].output_ids = -1, w[0].count_mismatch = TB_COUNT_NOT_TEXT;
    w[1].n_out = 3, w[1].recount = 3, w[1].output_ids = -1;
    s[0] = (tb_sample_record){.repetition = 0, .warmup = 1, .n_requests = 2, .prefill_ns = 1000, .decode_ns = 2000,
                              .forward_passes = 3, .peak_device_bytes = INT64_C(5) << 30, .energy_mj = 42,
                              .recount_tokens = 12, .n_emissions = 6, .runner_ns = 100, .requests = w};
    {
        const uint32_t n_out[] = {3, 3};
        const int okr[] = {1, 1};
        tb_rep_metrics_compute((tb_request_metrics[]){w[0].m, w[1].m}, n_out, okr, 2, 1000, 3, &s[0].m);
    }
    /* measured: request 0 = submit 1000, tokens at 3000/4000/6000,
     * 3 counted of 2 ids returned (a mismatch), re-counted 4; request 1
     * failed after 1 token, non-streaming, no ids */
    tb_request_metrics_compute(1000, 0, 3, em, 3, &r[0].m);
    r[0].n_out = 3, r[0].recount = 4, r[0].output_ids = 2, r[0].count_mismatch = TB_COUNT_NOT_IDS;
    r[0].output_hash = 0xabc, r[0].emissions_json = "[[2,1],[3,1],[5,1]]";
    r[0].prompt_hash = 0xfedcba9876543210ull;
    tb_request_metrics_compute(1500, 2500, 1, NULL, 0, &r[1].m);
    r[1].status = 1 /* TB_ERR */, r[1].error = "boom", r[1].submit_offset_ns = 500;
    r[1].n_out = 1, r[1].recount = -1, r[1].output_ids = -1, r[1].steps_done = 5;
    s[1] = (tb_sample_record){.repetition = 1, .warmup = 0, .n_requests = 2, .prefill_ns = -1, .decode_ns = 3000,
                              .forward_passes = 0, .peak_device_bytes = 2 << 20, .energy_mj = -1,
                              .recount_tokens = -1, .n_emissions = 3, .runner_ns = 200, .requests = r};
    {
        const uint32_t n_out[] = {3, 1};
        const int okr[] = {1, 0};
        /* wall 6000 - 1000 = 5000; 3 tokens (request 1 failed) */
        tb_rep_metrics_compute((tb_request_metrics[]){r[0].m, r[1].m}, n_out, okr, 2, -1, 0, &s[1].m);
    }
    CHECK(s[1].m.wall_ns == 5000 && s[1].m.output_tokens == 3);
    tb_metric_record mets[] = {
        {"req_tps", "tokens/s", {.n = 3, .median = 600000, .p5 = 500000, .p95 = 700000, .mean = 600000,
                                 .stdev = 100000, .cv = NAN, .min = 500000, .max = 700000, .ci_lo = 550000,
                                 .ci_hi = 650000}, NULL},
        {"agg_tps", "tokens/s", {.n = 1, .median = 1e6, .p5 = 1e6, .p95 = 1e6, .mean = 1e6, .stdev = 0,
                                 .cv = 0.05, .min = 1e6, .max = 1e6, .ci_lo = 1e6, .ci_hi = 1e6}, NULL},
        {"e2e_ms", "ms", {.n = 2, .median = 5, .p5 = 4.1, .p95 = 6, .mean = 5, .stdev = 1, .cv = 0.2,
                          .min = 4, .max = 6, .ci_lo = INFINITY, .ci_hi = -INFINITY}, NULL},
        /* nothing measured: not stored at all */
        {"ttft_ms", "ms", {.n = 0, .median = NAN, .p5 = NAN, .p95 = NAN, .mean = NAN, .stdev = NAN, .cv = NAN,
                           .min = NAN, .max = NAN, .ci_lo = NAN, .ci_hi = NAN}, NULL},
    };
    tb_case_record rec1 = {.session_id = session, .backend_id = backend, .c = &c1, .status = "ok",
                           .started_at = "2025-01-01T00:00:00.000Z", .finished_at = "2025-01-01T00:00:02.000Z",
                           .case_wall_ns = 123456789, .host_peak_rss = 3 << 20, .samples = s, .n_samples = 2,
                           .metrics = mets, .n_metrics = TB_ARRAY_LEN(mets)};
    err = NULL;
    int64_t case1 = tb_store_case(st, &rec1, &err);
    CHECK(case1 > 0);
    CHECK(err == NULL);
    if (err) {
        fprintf(stderr, "  %s\n", err);
        free(err);
    }

    /* ---- case 2: skipped, nothing run; dimensions that apply */
    tb_case c2;
    fill_case(&c2, 2);
    c2.batch = 4, c2.concurrency = 2, c2.steps = 8, c2.block_length = 4, c2.request_rate = 1.5;
    c2.swept_json = "{\"jitter\":\"0.1\"}";
    tb_case_record rec2 = {.session_id = session, .backend_id = backend, .c = &c2, .status = "skipped",
                           .error = "needs batch", .case_wall_ns = -1, .host_peak_rss = -1};
    err = NULL;
    int64_t case2 = tb_store_case(st, &rec2, &err);
    CHECK(case2 > case1);
    free(err);

    CHECK(tb_store_session_end(st, session, "completed", &err) == 0);
    CHECK_TEXT(db, "completed", "SELECT status FROM session WHERE id = %lld", (long long)session);
    CHECK(q_int(db, "SELECT finished_at >= started_at FROM session WHERE id = %lld", (long long)session) == 1);
    CHECK_TEXT(db, "running", "SELECT status FROM session WHERE id = %lld", (long long)session2); /* untouched */

    /* bench_case rows */
    long long k1 = (long long)case1, k2 = (long long)case2;
    CHECK(q_int(db, "SELECT session_id FROM bench_case WHERE id = %lld", k1) == session);
    CHECK(q_int(db, "SELECT backend_id FROM bench_case WHERE id = %lld", k1) == backend);
    CHECK(q_int(db, "SELECT ordinal FROM bench_case WHERE id = %lld", k1) == 1);
    CHECK(q_int(db, "SELECT prompt_tokens FROM bench_case WHERE id = %lld", k1) == 16);
    CHECK(q_int(db, "SELECT max_new_tokens FROM bench_case WHERE id = %lld", k1) == 3);
    CHECK(q_int(db, "SELECT batch FROM bench_case WHERE id = %lld", k1) == 2);
    CHECK(q_is_null(db, "SELECT concurrency FROM bench_case WHERE id = %lld", k1)); /* 0: not applicable */
    CHECK(q_is_null(db, "SELECT steps FROM bench_case WHERE id = %lld", k1));
    CHECK(q_is_null(db, "SELECT block_length FROM bench_case WHERE id = %lld", k1));
    CHECK(q_is_null(db, "SELECT request_rate FROM bench_case WHERE id = %lld", k1));
    CHECK_TEXT(db, "{}", "SELECT options_json FROM bench_case WHERE id = %lld", k1);
    CHECK_TEXT(db, "ok", "SELECT status FROM bench_case WHERE id = %lld", k1);
    CHECK(q_is_null(db, "SELECT error FROM bench_case WHERE id = %lld", k1));
    CHECK_TEXT(db, "2025-01-01T00:00:02.000Z", "SELECT finished_at FROM bench_case WHERE id = %lld", k1);
    CHECK(q_int(db, "SELECT case_wall_ns FROM bench_case WHERE id = %lld", k1) == 123456789);
    CHECK(q_int(db, "SELECT host_peak_rss_bytes FROM bench_case WHERE id = %lld", k1) == 3 << 20);
    CHECK(q_int(db, "SELECT concurrency FROM bench_case WHERE id = %lld", k2) == 2);
    CHECK(q_int(db, "SELECT steps FROM bench_case WHERE id = %lld", k2) == 8);
    CHECK(q_int(db, "SELECT block_length FROM bench_case WHERE id = %lld", k2) == 4);
    CHECK(q_real(db, "SELECT request_rate FROM bench_case WHERE id = %lld", k2) == 1.5);
    CHECK_TEXT(db, "skipped", "SELECT status FROM bench_case WHERE id = %lld", k2);
    CHECK_TEXT(db, "needs batch", "SELECT error FROM bench_case WHERE id = %lld", k2);
    CHECK(q_is_null(db, "SELECT case_wall_ns FROM bench_case WHERE id = %lld", k2));
    CHECK(q_is_null(db, "SELECT host_peak_rss_bytes FROM bench_case WHERE id = %lld", k2));
    CHECK(q_is_null(db, "SELECT started_at FROM bench_case WHERE id = %lld", k2));

    /* sample rows */
    CHECK(q_int(db, "SELECT count(*) FROM sample WHERE case_id = %lld", k1) == 2);
    CHECK(q_int(db, "SELECT count(*) FROM sample WHERE case_id = %lld", k2) == 0);
#define SW(col) "SELECT " col " FROM sample WHERE case_id = %lld AND repetition = 0", k1
#define SM(col) "SELECT " col " FROM sample WHERE case_id = %lld AND repetition = 1", k1
    CHECK(q_int(db, SW("warmup")) == 1);
    CHECK(q_int(db, SW("prefill_ns")) == 1000);
    CHECK(q_int(db, SW("forward_passes")) == 3);
    CHECK(q_int(db, SW("peak_device_bytes")) == INT64_C(5) << 30);
    CHECK(q_int(db, SW("energy_mj")) == 42);
    CHECK(q_int(db, SW("recount_tokens")) == 12);
    CHECK(q_int(db, SW("output_tokens")) == 6);
    CHECK(q_real(db, SW("tokens_per_forward")) == 2); /* 6 / 3 */
    CHECK(q_int(db, SM("warmup")) == 0);
    CHECK(q_int(db, SM("n_requests")) == 2);
    CHECK(q_int(db, SM("wall_ns")) == 5000);
    CHECK(q_is_null(db, SM("prefill_ns")));        /* -1: unknown */
    CHECK(q_int(db, SM("decode_ns")) == 3000);
    CHECK(q_int(db, SM("output_tokens")) == 3);
    CHECK(q_is_null(db, SM("recount_tokens")));    /* -1 */
    CHECK_NEAR(q_real(db, SM("aggregate_tps")), 600000, 1e-6); /* 3 / 5e-6 */
    CHECK(q_is_null(db, SM("decode_tps")));        /* NaN: prefill unknown */
    CHECK(q_is_null(db, SM("forward_passes")));    /* 0: not reported */
    CHECK(q_is_null(db, SM("tokens_per_forward"))); /* NaN */
    CHECK(q_int(db, SM("peak_device_bytes")) == 2 << 20);
    CHECK(q_is_null(db, SM("energy_mj")));         /* -1 */
    CHECK(q_int(db, SM("n_emissions")) == 3);
    CHECK(q_int(db, SM("runner_ns")) == 200);
#undef SW
#undef SM

    /* request rows of the measured sample */
#define RQ(col, idx)                                                                                             \
    "SELECT r." col " FROM request r JOIN sample s ON r.sample_id = s.id WHERE s.case_id = %lld AND"             \
    " s.repetition = 1 AND r.idx = " #idx, k1
    CHECK_TEXT(db, "ok", RQ("status", 0));
    CHECK(q_is_null(db, RQ("error", 0)));
    CHECK(q_int(db, RQ("submit_offset_ns", 0)) == 0);
    CHECK(q_int(db, RQ("ttft_ns", 0)) == 2000);
    CHECK(q_int(db, RQ("e2e_ns", 0)) == 5000);
    CHECK(q_real(db, RQ("tpot_ns", 0)) == 1500);
    CHECK_NEAR(q_real(db, RQ("tps", 0)), 600000, 1e-6);
    CHECK(q_int(db, RQ("requested_tokens", 0)) == 3);
    CHECK(q_int(db, RQ("output_tokens", 0)) == 3);
    CHECK(q_int(db, RQ("recount_tokens", 0)) == 4);
    CHECK(q_int(db, RQ("output_ids", 0)) == 2);
    CHECK(q_int(db, RQ("count_mismatch", 0)) == TB_COUNT_NOT_IDS); /* as decided (tb_count_mismatch) */
    CHECK(q_is_null(db, RQ("steps_done", 0)));      /* 0: not a diffusion request */
    CHECK_TEXT(db, "0000000000000abc", RQ("output_hash", 0));
    CHECK_TEXT(db, "fedcba9876543210", RQ("prompt_hash", 0));
    CHECK_TEXT(db, "[[2,1],[3,1],[5,1]]", RQ("emissions_json", 0));
    CHECK_TEXT(db, "failed", RQ("status", 1));
    CHECK_TEXT(db, "boom", RQ("error", 1));
    CHECK(q_int(db, RQ("submit_offset_ns", 1)) == 500);
    CHECK(q_int(db, RQ("ttft_ns", 1)) == 1000);
    CHECK(q_int(db, RQ("e2e_ns", 1)) == 1000);
    CHECK(q_is_null(db, RQ("tpot_ns", 1)));         /* NaN: one token */
    CHECK_NEAR(q_real(db, RQ("tps", 1)), 1e6, 1e-6);
    CHECK(q_is_null(db, RQ("recount_tokens", 1)));  /* -1 */
    CHECK(q_is_null(db, RQ("output_ids", 1)));      /* -1: none */
    CHECK(q_int(db, RQ("count_mismatch", 1)) == 0);
    CHECK(q_int(db, RQ("steps_done", 1)) == 5);
    CHECK(q_is_null(db, RQ("output_hash", 1)));     /* 0: no hash */
    CHECK(q_is_null(db, RQ("prompt_hash", 1)));     /* 0: unknown */
    CHECK_TEXT(db, "[]", RQ("emissions_json", 1));
#undef RQ
    CHECK(q_int(db, "SELECT sum(r.count_mismatch) FROM request r JOIN sample s ON r.sample_id = s.id"
                    " WHERE s.case_id = %lld AND s.warmup = 1", k1) == TB_COUNT_NOT_TEXT); /* and one held */

    /* metric rows: n == 0 is not stored; NaN and infinities are NULL */
    CHECK(q_int(db, "SELECT count(*) FROM metric WHERE case_id = %lld", k1) == 3);
    CHECK(q_int(db, "SELECT count(*) FROM metric WHERE case_id = %lld AND name = 'ttft_ms'", k1) == 0);
    CHECK_TEXT(db, "tokens/s", "SELECT unit FROM metric WHERE case_id = %lld AND name = 'req_tps'", k1);
    CHECK(q_int(db, "SELECT n FROM metric WHERE case_id = %lld AND name = 'req_tps'", k1) == 3);
    CHECK(q_real(db, "SELECT p95 FROM metric WHERE case_id = %lld AND name = 'req_tps'", k1) == 700000);
    CHECK(q_real(db, "SELECT stdev FROM metric WHERE case_id = %lld AND name = 'req_tps'", k1) == 100000);
    CHECK(q_real(db, "SELECT ci_lo FROM metric WHERE case_id = %lld AND name = 'req_tps'", k1) == 550000);
    CHECK(q_is_null(db, "SELECT cv FROM metric WHERE case_id = %lld AND name = 'req_tps'", k1));
    CHECK(q_is_null(db, "SELECT ci_lo FROM metric WHERE case_id = %lld AND name = 'e2e_ms'", k1));
    CHECK(q_is_null(db, "SELECT ci_hi FROM metric WHERE case_id = %lld AND name = 'e2e_ms'", k1));
    CHECK(q_real(db, "SELECT p5 FROM metric WHERE case_id = %lld AND name = 'e2e_ms'", k1) == 4.1);

    /* the summary view */
    CHECK(q_int(db, "SELECT count(*) FROM summary WHERE session = %lld", (long long)session) == 2);
    /* Rows come ORDER BY session, ordinal: offset 0 is case 1. */
#define SV(col, ord)                                                                                              \
    "SELECT " col " FROM (SELECT * FROM summary WHERE session = %lld) LIMIT 1 OFFSET " #ord, (long long)session
    CHECK_TEXT(db, "unit", SV("suite", 0));
    CHECK_TEXT(db, "nullb", SV("backend", 0));
    CHECK_TEXT(db, "preset:none", SV("model", 0));
    CHECK_TEXT(db, "null 1.0.0", SV("plugin", 0));
    CHECK_TEXT(db, "f32", SV("dtype", 0));
    CHECK_TEXT(db, "yes", SV("random_weights", 0));
    CHECK_TEXT(db, "cpu", SV("device", 0));
    CHECK_TEXT(db, "Test GPU", SV("gpu", 0));
    CHECK(q_int(db, SV("gpus", 0)) == 1);
    CHECK_TEXT(db, "12.8", SV("cuda_driver", 0));
    CHECK_TEXT(db, TB_CUDA_BUILD_VERSION, SV("cuda_build", 0));
    CHECK_TEXT(db, "Test CPU 9000", SV("cpu", 0));
    CHECK(q_int(db, SV("prompt_tokens", 0)) == 16);
    CHECK(q_int(db, SV("max_new_tokens", 0)) == 3);
    CHECK(q_int(db, SV("batch", 0)) == 2);
    CHECK(q_is_null(db, SV("concurrency", 0)));
    CHECK(q_is_null(db, SV("steps", 0)));
    CHECK_TEXT(db, "ok", SV("status", 0));
    CHECK(q_int(db, SV("calls", 0)) == 1);               /* n of agg_tps */
    CHECK(q_real(db, SV("req_tps_median", 0)) == 600000); /* req_tps median */
    CHECK(q_real(db, SV("req_tps_p5", 0)) == 500000);       /* req_tps p5: the slow tail */
    CHECK(q_real(db, SV("aggregate_tps", 0)) == 1e6);
    CHECK(q_is_null(db, SV("decode_tps", 0)));           /* no such metric */
    CHECK(q_is_null(db, SV("ttft_ms", 0)));              /* n == 0: not stored */
    CHECK(q_real(db, SV("e2e_ms", 0)) == 5);
    CHECK(q_real(db, SV("e2e_p95_ms", 0)) == 6);
    CHECK(q_real(db, SV("agg_tps_cv", 0)) == 0.05);
    CHECK(q_real(db, SV("peak_device_mib", 0)) == 2.0);  /* warm-up's 5 GiB excluded */
    CHECK(q_real(db, SV("host_peak_rss_mib", 0)) == 3.0);
    CHECK(q_int(db, SV("count_mismatches", 0)) == 1);    /* measured only */
    CHECK_TEXT(db, "skipped", SV("status", 1));
    CHECK_TEXT(db, "needs batch", SV("error", 1));
    CHECK(q_int(db, SV("steps", 1)) == 8);
    CHECK(q_int(db, SV("concurrency", 1)) == 2);
    CHECK_TEXT(db, "{\"jitter\":\"0.1\"}", SV("swept_options", 1));
    CHECK(q_is_null(db, SV("calls", 1)));
    CHECK(q_is_null(db, SV("req_tps_median", 1)));
    /* migration 7: the names that did not say what they count are gone */
    {
        sqlite3_stmt *old = NULL;
        CHECK(sqlite3_prepare_v2(db, "SELECT runs FROM summary", -1, &old, NULL) != SQLITE_OK);
        sqlite3_finalize(old);
        old = NULL;
        CHECK(sqlite3_prepare_v2(db, "SELECT median_tps FROM summary", -1, &old, NULL) != SQLITE_OK);
        sqlite3_finalize(old);
    }
    CHECK(q_is_null(db, SV("peak_device_mib", 1)));
    CHECK(q_is_null(db, SV("host_peak_rss_mib", 1)));
    CHECK(q_int(db, SV("count_mismatches", 1)) == 0);
#undef SV

    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

static void counts(sqlite3 *db, int64_t out[4])
{
    out[0] = q_int(db, "SELECT count(*) FROM bench_case");
    out[1] = q_int(db, "SELECT count(*) FROM sample");
    out[2] = q_int(db, "SELECT count(*) FROM request");
    out[3] = q_int(db, "SELECT count(*) FROM metric");
}

/* A failed write returns -1 with a reason and leaves nothing behind; the
 * store stays usable (no transaction left open). */
static void test_failures(void)
{
    char *path = tmp_path("fail.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, session, backend;
    CHECK(setup_session(st, &pb, &machine, &session, &backend) == 0);
    int64_t before[4], after[4];
    CHECK(write_small_case(st, session, backend, 1, &err) > 0);
    counts(db, before);
    CHECK(before[0] == 1 && before[1] == 1 && before[2] == 1 && before[3] == 1);

    /* 1. A backend that does not exist: the first insert fails. */
    err = NULL;
    CHECK(write_small_case(st, session, 424242, 2, &err) == -1);
    CHECK_CONTAINS(err, "storing case #2 failed");
    CHECK_CONTAINS(err, "FOREIGN KEY");
    free(err);
    counts(db, after);
    CHECK(memcmp(before, after, sizeof before) == 0);
    CHECK(sqlite3_get_autocommit(db) != 0); /* rolled back, not left open */

    /* 2. A duplicate repetition: the case row and the first sample (and
     * its requests) were written before the failure, and must go. */
    tb_case c;
    fill_case(&c, 3);
    tb_request_record rq[2] = {0};
    const int64_t em[] = {10, 20};
    tb_request_metrics_compute(0, 0, 2, em, 2, &rq[0].m);
    tb_request_metrics_compute(0, 0, 2, em, 2, &rq[1].m);
    rq[0].n_out = rq[1].n_out = 2;
    rq[0].recount = rq[1].recount = -1;
    tb_sample_record s[2] = {
        {.repetition = 0, .n_requests = 2, .prefill_ns = -1, .decode_ns = -1, .peak_device_bytes = -1,
         .energy_mj = -1, .recount_tokens = -1, .requests = rq},
        {.repetition = 0, .n_requests = 2, .prefill_ns = -1, .decode_ns = -1, .peak_device_bytes = -1,
         .energy_mj = -1, .recount_tokens = -1, .requests = rq},
    };
    tb_case_record rec = {.session_id = session, .backend_id = backend, .c = &c, .status = "ok",
                          .case_wall_ns = -1, .host_peak_rss = -1, .samples = s, .n_samples = 2};
    err = NULL;
    CHECK(tb_store_case(st, &rec, &err) == -1);
    CHECK_CONTAINS(err, "UNIQUE");
    free(err);
    counts(db, after);
    CHECK(memcmp(before, after, sizeof before) == 0);

    /* 3. A duplicate metric name: fails at the very last insert. */
    s[1].repetition = 1;
    tb_metric_record m[2] = {{"agg_tps", "tokens/s", {.n = 1, .median = 1}, NULL},
                             {"agg_tps", "tokens/s", {.n = 1, .median = 2}, NULL}};
    rec.metrics = m;
    rec.n_metrics = 2;
    err = NULL;
    CHECK(tb_store_case(st, &rec, &err) == -1);
    CHECK(err != NULL);
    free(err);
    counts(db, after);
    CHECK(memcmp(before, after, sizeof before) == 0);

    /* 4. A status the schema does not allow (CHECK constraint). */
    rec.n_metrics = 1;
    rec.status = "maybe";
    err = NULL;
    CHECK(tb_store_case(st, &rec, &err) == -1);
    CHECK_CONTAINS(err, "CHECK");
    free(err);
    counts(db, after);
    CHECK(memcmp(before, after, sizeof before) == 0);

    /* 5. The same ordinal twice in a session. */
    err = NULL;
    CHECK(write_small_case(st, session, backend, 1, &err) == -1);
    CHECK_CONTAINS(err, "UNIQUE");
    free(err);
    counts(db, after);
    CHECK(memcmp(before, after, sizeof before) == 0);

    /* After all that, the fixed record goes in whole. */
    rec.status = "ok";
    err = NULL;
    int64_t id = tb_store_case(st, &rec, &err);
    CHECK(id > 0);
    free(err);
    counts(db, after);
    CHECK(after[0] == before[0] + 1 && after[1] == before[1] + 2 && after[2] == before[2] + 4 &&
          after[3] == before[3] + 1);

    /* Session and backend errors, each with a message naming the row and
     * SQLite's reason. */
    err = NULL;
    CHECK(tb_store_session_end(st, session, "bogus", &err) == -1); /* CHECK constraint */
    CHECK_CONTAINS(err, "ending session");
    CHECK_CONTAINS(err, "as bogus failed: CHECK constraint failed");
    free(err);
    CHECK_TEXT(db, "running", "SELECT status FROM session WHERE id = %lld", (long long)session);
    CHECK(q_is_null(db, "SELECT finished_at FROM session WHERE id = %lld", (long long)session));
    err = NULL;
    CHECK(tb_store_session_end(st, 987654, "completed", &err) == -1);
    CHECK_STR(err, "ending session 987654 as completed failed: no such session");
    free(err);
    err = NULL;
    CHECK(tb_store_backend(st, session, &pb, &err) == -1); /* label taken in this session */
    CHECK_CONTAINS(err, "storing backend nullb failed: UNIQUE constraint failed");
    free(err);
    err = NULL;
    CHECK(tb_store_backend(st, 987654, &pb, &err) == -1); /* no such session */
    CHECK_CONTAINS(err, "storing backend nullb failed: FOREIGN KEY constraint failed");
    free(err);
    CHECK(q_int(db, "SELECT count(*) FROM backend") == 1);
    tb_session_info si = {.machine_id = 987654, .suite = &test_suite, .command_line = "x"};
    err = NULL;
    CHECK(tb_store_session_begin(st, &si, &err) == -1); /* no such machine */
    CHECK_CONTAINS(err, "storing the session failed: FOREIGN KEY constraint failed");
    free(err);
    CHECK(q_int(db, "SELECT count(*) FROM session") == 1);

    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* ----------------------------------------------------- two processes */

enum { N_EACH = 200 };

/* One writer: 200 machines shared by name with the other writer (the same
 * fingerprints, racing), then 200 cases of its own. Returns failures. */
static int writer(const char *path, int64_t session, int64_t backend, size_t first_ordinal, int go_fd)
{
    tb_store *st = NULL;
    char *err = NULL;
    int fails = 0;
    if (tb_store_open(path, &st, &err) != 0) {
        fprintf(stderr, "  writer %zu: open: %s\n", first_ordinal, err);
        free(err);
        return 1;
    }
    char go;
    if (go_fd >= 0 && read(go_fd, &go, 1) != 1)
        fails++;
    for (int i = 0; i < N_EACH; i++) {
        tb_machine_info mi;
        char fp[32];
        snprintf(fp, sizeof fp, "race-%d", i);
        fill_machine(&mi, fp);
        err = NULL;
        if (tb_store_machine(st, &mi, &err) < 0) {
            if (fails++ < 3)
                fprintf(stderr, "  writer %zu: machine %s: %s\n", first_ordinal, fp, err);
            free(err);
        }
        err = NULL;
        if (write_small_case(st, session, backend, first_ordinal + (size_t)i, &err) < 0) {
            if (fails++ < 3)
                fprintf(stderr, "  writer %zu: case %d: %s\n", first_ordinal, i, err);
            free(err);
        }
    }
    tb_store_close(st);
    return fails;
}

static void test_two_writers(void)
{
    char *path = tmp_path("shared.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    tb_plan_backend pb;
    int64_t machine, session, backend;
    CHECK(setup_session(st, &pb, &machine, &session, &backend) == 0);
    tb_plugin_close(&pb.plugin);
    /* No SQLite connection may cross fork(): close before, reopen after. */
    tb_store_close(st);

    int go[2];
    if (pipe(go) != 0)
        die("pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(go[1]);
        int fails = writer(path, session, backend, 10001, go[0]);
        _exit(fails ? 1 : 0);
    }
    close(go[0]);
    /* Parent: open, then release both writers at once. */
    if (write(go[1], "g", 1) != 1)
        die("write");
    close(go[1]);
    int fails = writer(path, session, backend, 1, -1);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(fails == 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    CHECK(tb_store_open(path, &st, &err) == 0);
    if (st) {
        sqlite3 *db = tb_store_db(st);
        CHECK(q_int(db, "SELECT count(*) FROM bench_case WHERE session_id = %lld", (long long)session) ==
              2 * N_EACH);
        CHECK(q_int(db, "SELECT count(*) FROM bench_case WHERE ordinal BETWEEN 1 AND %d", N_EACH) == N_EACH);
        CHECK(q_int(db, "SELECT count(*) FROM bench_case WHERE ordinal BETWEEN 10001 AND %d", 10000 + N_EACH) ==
              N_EACH);
        CHECK(q_int(db, "SELECT count(*) FROM sample") == 2 * N_EACH);
        CHECK(q_int(db, "SELECT count(*) FROM request") == 2 * N_EACH);
        CHECK(q_int(db, "SELECT count(*) FROM metric") == 2 * N_EACH);
        CHECK(q_int(db, "SELECT count(*) FROM machine WHERE fingerprint LIKE 'race-%%'") == N_EACH);
        CHECK(q_int(db, "SELECT count(*) FROM machine") == N_EACH + 1);
        CHECK_TEXT(db, "ok", "PRAGMA integrity_check");
        tb_store_close(st);
    } else {
        free(err);
    }
    free(path);
}

/* Several processes open one fresh file at the same instant: each must
 * succeed, and the schema must be applied exactly once. */
static void test_concurrent_create(void)
{
    enum { PROCS = 6, ROUNDS = 20 };
    int bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
        char name[64];
        snprintf(name, sizeof name, "race%d.db", round);
        char *path = tmp_path(name);
        int go[2];
        if (pipe(go) != 0)
            die("pipe");
        fflush(NULL);
        pid_t pids[PROCS];
        for (int i = 0; i < PROCS; i++) {
            pids[i] = fork();
            if (pids[i] < 0)
                die("fork");
            if (pids[i] == 0) {
                close(go[1]);
                char c;
                if (read(go[0], &c, 1) != 0) /* EOF when the parent closes */
                    _exit(3);
                tb_store *st = NULL;
                char *err = NULL;
                if (tb_store_open(path, &st, &err) != 0) {
                    fprintf(stderr, "  concurrent open %d/%d: %s\n", round, i, err);
                    _exit(1);
                }
                tb_machine_info mi;
                fill_machine(&mi, "same");
                int rc = tb_store_machine(st, &mi, &err) > 0 ? 0 : 2;
                tb_store_close(st);
                _exit(rc);
            }
        }
        close(go[0]);
        close(go[1]); /* release them all */
        for (int i = 0; i < PROCS; i++) {
            int status = 0;
            waitpid(pids[i], &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                bad++;
        }
        sqlite3 *db = raw_open(path);
        if (q_int(db, "PRAGMA user_version") != tb_store_schema_version() ||
            q_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'summary'") != 1 ||
            q_int(db, "SELECT count(*) FROM machine") != 1)
            bad++;
        sqlite3_close(db);
        free(path);
    }
    CHECK(bad == 0);
}

/* A session whose process is gone is marked interrupted by the next open,
 * which says so through tb_store_notice (the store prints nothing); the
 * open after that has nothing to say. */
static void test_stale_notice(void)
{
    char *path = tmp_path("stale.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        fprintf(stderr, "  %s\n", err);
        free(err);
        free(path);
        return;
    }
    tb_machine_info mi;
    fill_machine(&mi, "fp-stale");
    int64_t machine = tb_store_machine(st, &mi, &err);
    tb_session_info si = {.machine_id = machine, .suite = &test_suite, .command_line = "x"};
    int64_t session = machine > 0 ? tb_store_session_begin(st, &si, &err) : -1;
    CHECK(session > 0);
    /* A child that has exited and been reaped: its pid is nobody's now. */
    pid_t dead = fork();
    if (dead < 0)
        die("fork");
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    char *sql = sqlite3_mprintf("UPDATE session SET owner_pid = %d WHERE id = %lld", (int)dead, (long long)session);
    CHECK(sqlite3_exec(tb_store_db(st), sql, NULL, NULL, NULL) == SQLITE_OK);
    CHECK(sqlite3_changes(tb_store_db(st)) == 1);
    sqlite3_free(sql);
    tb_store_close(st);

    CHECK(tb_store_open(path, &st, &err) == 0);
    if (st) {
        char *want = tb_xasprintf("%s: session %lld marked interrupted: left running by a process that is gone"
                                  " (killed, or the machine restarted)",
                                  path, (long long)session);
        CHECK_STR(tb_store_notice(st), want);
        free(want);
        CHECK_TEXT(tb_store_db(st), "interrupted", "SELECT status FROM session WHERE id = %lld", (long long)session);
        tb_store_close(st);
    }
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (st) {
        CHECK(tb_store_notice(st) == NULL);
        tb_store_close(st);
    }
    free(path);
}

/* The dimension table (dims.h) and the statistics table (store.h) are
 * the only lists of their columns: every dimension that has a column is
 * written by tb_store_case and read back by the reader (reader.h) from
 * the table alone, NULL when not applicable, and so is every statistic
 * of a metric row. A dimension or statistic added only to its table
 * round-trips here. */
static void test_table_round_trip(void)
{
    char *path = tmp_path("dims.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        fprintf(stderr, "  %s\n", err);
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, session, backend;
    int ok = setup_session(st, &pb, &machine, &session, &backend);
    CHECK(ok == 0);
    if (ok != 0) {
        tb_plugin_close(&pb.plugin);
        tb_store_close(st);
        free(path);
        return;
    }
    /* per dimension d: case 2d+1 with it set to its own value, case 2d+2
     * with it not applicable (when it may be) */
    tb_case want[2 * TB_N_DIMS];
    int64_t ids[2 * TB_N_DIMS];
    size_t n = 0;
    for (int d = 0; d < TB_N_DIMS; d++) {
        if (!tb_dim_defs[d].column)
            continue;
        for (int absent = 0; absent < 2; absent++) {
            if (absent && (!tb_dim_defs[d].zero || strcmp(tb_dim_defs[d].zero, "-") != 0))
                continue;
            tb_case *c = &want[n];
            fill_case(c, n + 1);
            /* every optional dimension set, so that a column read into
             * another's field shows */
            for (int o = 0; o < TB_N_DIMS; o++)
                if (tb_dim_defs[o].column)
                    tb_case_dim_set(c, (tb_dim)o, tb_dim_defs[o].is_rate ? 0.25 + o : 10 + o);
            tb_case_dim_set(c, (tb_dim)d, absent ? 0 : tb_dim_defs[d].is_rate ? 7.5 : 77);
            tb_case_record rec = {.session_id = session, .backend_id = backend, .c = c, .status = "skipped",
                                  .case_wall_ns = -1, .host_peak_rss = -1};
            err = NULL;
            ids[n] = tb_store_case(st, &rec, &err);
            CHECK(ids[n] > 0);
            free(err);
            /* the column itself, by the table's name for it */
            char *sql = tb_xasprintf("SELECT %s FROM bench_case WHERE id = %lld", tb_dim_defs[d].column,
                                     (long long)ids[n]);
            if (absent)
                CHECK(q_is_null(db, "%s", sql));
            else
                CHECK(q_real(db, "%s", sql) == tb_case_dim(c, (tb_dim)d));
            free(sql);
            n++;
        }
    }
    tb_row_case *rows = NULL;
    size_t n_rows = 0;
    err = NULL;
    CHECK(tb_read_cases(db, session, &rows, &n_rows, &err) == 0);
    free(err);
    CHECK(n_rows == n);
    for (size_t i = 0; i < n && i < n_rows; i++) {
        CHECK(rows[i].id == ids[i]);
        for (int d = 0; d < TB_N_DIMS; d++)
            if (tb_dim_defs[d].column) {
                CHECK(tb_case_dim(&rows[i].dims, (tb_dim)d) == tb_case_dim(&want[i], (tb_dim)d));
                CHECK(tb_case_dim_absent(&rows[i].dims, (tb_dim)d) == tb_case_dim_absent(&want[i], (tb_dim)d));
            }
    }
    tb_row_cases_free(rows, n_rows);

    /* every statistic column: a metric row with a distinct value in each */
    tb_metric_record m = {"agg_tps", "tokens/s", {.n = 3}, NULL};
    for (size_t k = 0; k < tb_n_stat_columns; k++) {
        double v = 1.5 + (double)k;
        memcpy((char *)&m.st + tb_stat_columns[k].offset, &v, sizeof v);
    }
    tb_case c;
    fill_case(&c, n + 1);
    tb_case_record rec = {.session_id = session, .backend_id = backend, .c = &c, .status = "ok",
                          .case_wall_ns = -1, .host_peak_rss = -1, .metrics = &m, .n_metrics = 1};
    err = NULL;
    int64_t id = tb_store_case(st, &rec, &err);
    CHECK(id > 0);
    free(err);
    tb_row_metric *ms = NULL;
    size_t n_ms = 0;
    err = NULL;
    CHECK(tb_read_metrics(db, session, &ms, &n_ms, &err) == 0);
    free(err);
    CHECK(n_ms == 1);
    if (n_ms == 1) {
        CHECK(ms[0].case_id == id && ms[0].st.n == 3);
        for (size_t k = 0; k < tb_n_stat_columns; k++) {
            double got, put;
            memcpy(&got, (const char *)&ms[0].st + tb_stat_columns[k].offset, sizeof got);
            memcpy(&put, (const char *)&m.st + tb_stat_columns[k].offset, sizeof put);
            CHECK(got == put);
            char *sql = tb_xasprintf("SELECT %s FROM metric WHERE case_id = %lld", tb_stat_columns[k].column,
                                     (long long)id);
            CHECK(q_real(db, "%s", sql) == put);
            free(sql);
        }
    }
    tb_row_metrics_free(ms, n_ms);
    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* The writers nest in a transaction the caller holds (store.h): each is
 * then a savepoint, whose failure undoes only itself, and the caller's
 * rollback undoes every write of it; without one, each commits its own
 * (a second connection sees it). */
static void test_nested_writes(void)
{
    char *path = tmp_path("nested.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    sqlite3 *other = NULL;
    CHECK(sqlite3_open_v2(path, &other, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    tb_plan_backend pb;
    int64_t machine, session, backend;
    CHECK(setup_session(st, &pb, &machine, &session, &backend) == 0);
    CHECK(write_small_case(st, session, backend, 1, &err) > 0);
    CHECK(q_int(other, "SELECT count(*) FROM bench_case") == 1); /* committed on its own */
    int64_t before[4], after[4];
    counts(db, before);

    tb_store_txn outer, inner;
    CHECK(tb_store_txn_begin(st, &outer, &err) == 0 && !outer.nested);
    CHECK(write_small_case(st, session, backend, 2, &err) > 0);
    CHECK(sqlite3_get_autocommit(db) == 0); /* the caller's, still open */
    CHECK(q_int(other, "SELECT count(*) FROM bench_case") == 1); /* not durable yet */
    /* a failing write inside: only its own rows go */
    err = NULL;
    CHECK(write_small_case(st, session, 424242, 3, &err) == -1);
    CHECK_CONTAINS(err, "FOREIGN KEY");
    free(err);
    err = NULL;
    CHECK(sqlite3_get_autocommit(db) == 0);
    CHECK(q_int(db, "SELECT count(*) FROM bench_case WHERE ordinal = 2") == 1);
    /* a nested transaction rolled back: case 4 goes, case 2 stays */
    CHECK(tb_store_txn_begin(st, &inner, &err) == 0 && inner.nested);
    CHECK(write_small_case(st, session, backend, 4, &err) > 0);
    CHECK(tb_store_txn_end(st, &inner, 0, NULL) == -1);
    CHECK(q_int(db, "SELECT count(*) FROM bench_case WHERE ordinal = 4") == 0);
    CHECK(q_int(db, "SELECT count(*) FROM bench_case WHERE ordinal = 2") == 1);
    CHECK(sqlite3_get_autocommit(db) == 0);
    /* the caller's rollback: nothing of it stays */
    CHECK(tb_store_txn_end(st, &outer, 0, NULL) == -1);
    CHECK(sqlite3_get_autocommit(db) != 0);
    counts(db, after);
    CHECK(memcmp(before, after, sizeof before) == 0);

    /* committed: every write of it, at once */
    CHECK(tb_store_txn_begin(st, &outer, &err) == 0 && !outer.nested);
    CHECK(write_small_case(st, session, backend, 5, &err) > 0);
    CHECK(write_small_case(st, session, backend, 6, &err) > 0);
    CHECK(q_int(other, "SELECT count(*) FROM bench_case") == 1);
    CHECK(tb_store_txn_end(st, &outer, 1, &err) == 0);
    CHECK(sqlite3_get_autocommit(db) != 0);
    CHECK(q_int(other, "SELECT count(*) FROM bench_case") == 3);

    sqlite3_close(other);
    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* The reader's sample sources sample as the registry says: a metric
 * counted in calls reads a value per sample (sa.), one counted in
 * requests a value per request (r.); and a case's request figures are
 * read one per request. */
static void test_sample_sources(void)
{
    for (size_t i = 0; i < tb_n_sample_sources; i++) {
        const tb_sample_source *src = &tb_sample_sources[i];
        const tb_metric_def *def = tb_metric_find(src->name);
        CHECK(def != NULL);
        if (!def)
            continue;
        int calls = strcmp(def->samples, "calls") == 0, requests = strcmp(def->samples, "requests") == 0;
        CHECK(calls || requests);
        if (calls && strncmp(src->expr, "sa.", 3) != 0)
            fprintf(stderr, "  %s: counted in calls, read from %s\n", src->name, src->expr);
        if (requests && strncmp(src->expr, "r.", 2) != 0)
            fprintf(stderr, "  %s: counted in requests, read from %s\n", src->name, src->expr);
        CHECK(!calls || strncmp(src->expr, "sa.", 3) == 0);
        CHECK(!requests || strncmp(src->expr, "r.", 2) == 0);
    }
    char *path = tmp_path("sources.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    tb_plan_backend pb;
    int64_t machine, session, backend;
    CHECK(setup_session(st, &pb, &machine, &session, &backend) == 0);
    /* two requests in one sample: two ttft values, one agg_tps */
    tb_case c;
    fill_case(&c, 1);
    tb_request_record rq[2] = {0};
    const int64_t em[] = {10, 20};
    tb_request_metrics_compute(0, 0, 2, em, 2, &rq[0].m);
    tb_request_metrics_compute(0, 0, 2, em, 2, &rq[1].m);
    rq[0].n_out = rq[1].n_out = 2;
    rq[0].recount = rq[1].recount = -1;
    tb_sample_record s = {.repetition = 0, .n_requests = 2, .prefill_ns = -1, .decode_ns = -1,
                          .peak_device_bytes = -1, .energy_mj = -1, .recount_tokens = -1, .requests = rq};
    s.m.aggregate_tps = 7;
    tb_case_record rec = {.session_id = session, .backend_id = backend, .c = &c, .status = "ok",
                          .case_wall_ns = -1, .host_peak_rss = -1, .samples = &s, .n_samples = 1};
    int64_t case_id = tb_store_case(st, &rec, &err);
    CHECK(case_id > 0);
    const char *names[2] = {"ttft_ms", "agg_tps"};
    const size_t want[2] = {2, 1};
    for (int k = 0; k < 2; k++) {
        const tb_sample_source *src = NULL;
        for (size_t i = 0; i < tb_n_sample_sources; i++)
            if (strcmp(tb_sample_sources[i].name, names[k]) == 0)
                src = &tb_sample_sources[i];
        CHECK(src != NULL);
        double *v = NULL;
        size_t n = 0;
        CHECK(src && tb_read_case_samples(tb_store_db(st), session, case_id, src, &v, &n, &err) == 0);
        CHECK(n == want[k]);
        free(v);
    }
    /* a source the registry does not sample by calls or requests */
    const tb_sample_source bad = {"itl_ms", "r.tpot_ns"};
    double *v = NULL;
    size_t n = 0;
    CHECK(tb_read_case_samples(tb_store_db(st), session, case_id, &bad, &v, &n, &err) == -1);
    CHECK_CONTAINS(err, "itl_ms");
    free(err);
    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* A shard join is all or nothing (shard_join.h): a run whose second
 * case cannot be pooled (shard 1 stored no sample of it) leaves no joined
 * session, shard rows or cases, though its first case was written; once
 * it can be, the run is joined whole, completed, and only once. */
static void test_join_all_or_nothing(void)
{
    char *path = tmp_path("join.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, session[2], backend[2], bare = 0;
    CHECK(setup_session(st, &pb, &machine, &session[0], &backend[0]) == 0);
    tb_session_info si = {.machine_id = machine, .suite = &test_suite, .command_line = "tokbench run --shard 1/2"};
    session[1] = tb_store_session_begin(st, &si, &err);
    CHECK(session[1] > 0);
    backend[1] = tb_store_backend(st, session[1], &pb, &err);
    CHECK(backend[1] > 0);
    for (uint32_t k = 0; k < 2; k++) {
        tb_session_shard sh = {.shard_index = k, .shard_count = 2, .start_at = "2025-01-01T00:00:00.000Z"};
        CHECK(tb_store_session_shard(st, session[k], &sh, &err) == 0);
        CHECK(write_small_case(st, session[k], backend[k], 1, &err) > 0);
        if (k == 0) {
            CHECK(write_small_case(st, session[k], backend[k], 2, &err) > 0);
        } else { /* case #2 as shard 0's, without its sample */
            tb_case c;
            fill_case(&c, 2);
            c.batch = 1;
            tb_case_record rec = {.session_id = session[k], .backend_id = backend[k], .c = &c, .status = "ok",
                                  .case_wall_ns = -1, .host_peak_rss = -1};
            bare = tb_store_case(st, &rec, &err);
            CHECK(bare > 0);
        }
        CHECK(tb_store_session_end(st, session[k], "completed", &err) == 0);
    }
    int64_t before[4], after[4];
    counts(db, before);

    tb_shard_join_result res;
    err = NULL;
    CHECK(tb_shard_join(st, &res, &err) == -1);
    CHECK_CONTAINS(err, "shard 1 has no repetition 0");
    free(err);
    err = NULL;
    CHECK(sqlite3_get_autocommit(db) != 0);
    CHECK(q_int(db, "SELECT count(*) FROM session") == 2);
    CHECK(q_int(db, "SELECT count(*) FROM shard") == 0);
    CHECK(q_int(db, "SELECT count(*) FROM backend") == 2);
    counts(db, after);
    CHECK(memcmp(before, after, sizeof before) == 0);
    tb_shard_join_result_free(&res);

    /* shard 1's case #2 with its sample: joined whole */
    char *sql = sqlite3_mprintf("DELETE FROM bench_case WHERE id = %lld", (long long)bare);
    CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_free(sql);
    CHECK(write_small_case(st, session[1], backend[1], 2, &err) > 0);
    /* shard 1's requests: case #1's 3 counted of 2 ids, case #2's text
     * alone re-counted to 4; the join holds each count to what the shard
     * stored it returned (tb_count_mismatch), not to the shard's verdict */
    sql = sqlite3_mprintf("UPDATE request SET output_ids = CASE c.ordinal WHEN 1 THEN 2 END, recount_tokens ="
                          " CASE c.ordinal WHEN 1 THEN 3 ELSE 4 END FROM sample sa JOIN bench_case c ON c.id ="
                          " sa.case_id WHERE sa.id = request.sample_id AND c.session_id = %lld",
                          (long long)session[1]);
    CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_free(sql);
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 1 && res.known == 0);
    tb_shard_join_result_free(&res);
#define JOINED(ordinal, cond)                                                                                    \
    "SELECT count(*) FROM request r JOIN sample sa ON sa.id = r.sample_id JOIN bench_case c ON c.id ="         \
    " sa.case_id JOIN session s ON s.id = c.session_id WHERE s.shard_index IS NULL AND c.ordinal = " #ordinal \
    " AND " cond
    CHECK(q_int(db, JOINED(1, "r.output_ids = 3 AND r.count_mismatch = 0")) == 1);
    CHECK(q_int(db, JOINED(1, "r.output_ids = 2 AND r.count_mismatch = 1")) == 1);
    CHECK(q_int(db, JOINED(2, "r.output_ids = 3 AND r.count_mismatch = 0")) == 1);
    CHECK(q_int(db, JOINED(2, "r.output_ids IS NULL AND r.recount_tokens = 4 AND r.count_mismatch = 2")) == 1);
#undef JOINED
    CHECK(q_int(db, "SELECT count(*) FROM session WHERE shard_count = 2 AND shard_index IS NULL AND status ="
                    " 'completed'") == 1);
    CHECK(q_int(db, "SELECT count(*) FROM shard") == 2);
    CHECK(q_int(db, "SELECT count(*) FROM backend") == 3);
    CHECK(q_int(db, "SELECT count(*) FROM bench_case c JOIN session s ON s.id = c.session_id WHERE s.shard_index"
                    " IS NULL") == 2);
    /* each joined case pools both shards' requests */
    CHECK(q_int(db, "SELECT min(n) FROM (SELECT count(r.id) AS n FROM request r JOIN sample sa ON sa.id ="
                    " r.sample_id JOIN bench_case c ON c.id = sa.case_id JOIN session s ON s.id = c.session_id"
                    " WHERE s.shard_index IS NULL GROUP BY c.id)") == 2);
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 0 && res.known == 1);
    tb_shard_join_result_free(&res);

    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* A case of one measured request that reports canvases (issue 41) and
 * streams in bursts, as shard k stores it: shard 0 four canvases of 16
 * tokens (4 steps, 128 positions each), a chunk each, 10 ms apart;
 * shard 1 258 canvases of one token (1 step, 2 positions; the last two
 * past TB_CANVAS_MAX, counted in the totals only) in two chunks of 129. */
static int64_t write_canvas_case(tb_store *st, int64_t session, int64_t backend, int k, char **err)
{
    tb_case c;
    fill_case(&c, 1);
    c.batch = 1;
    const uint32_t n_can = k ? 258 : 4, per = k ? 1 : 16, steps = k ? 1 : 4, pos = k ? 2 : 128;
    const uint32_t n_out = n_can * per;
    const int64_t submit = 1000000, em0[] = {submit + 2000000, submit + 12000000, submit + 22000000,
                                             submit + 32000000};
    const int64_t em1[] = {submit + 10000000, submit + 30000000};
    tb_str js = {0};
    tb_str_append(&js, "[");
    for (uint32_t i = 0; i < n_can && i < TB_CANVAS_MAX; i++) /* ms since submit */
        tb_str_appendf(&js, "%s[%u,%u,%u,%.3f]", i ? "," : "", steps, per, pos, k ? 0.1 * i : 2.0 + 10.0 * i);
    tb_str_append(&js, "]");
    tb_request_record rq = {.status = 0, .n_out = n_out, .recount = (int32_t)n_out, .steps_done = n_can * steps,
                            .emissions_json = k ? "[[10,129],[30,129]]" : "[[2,16],[12,16],[22,16],[32,16]]",
                            .canvases = n_can, .canvas_steps = n_can * steps, .canvas_committed = n_out,
                            .canvas_positions = (int64_t)n_can * pos, .canvases_json = js.s,
                            .tokens_per_chunk = k ? 129 : 16, .chunk_gap_ms = k ? 20 : 10, .bursty = 1};
    tb_request_metrics_compute(submit, 0, n_out, k ? em1 : em0, k ? 2 : 4, &rq.m);
    tb_sample_record s = {.repetition = 0, .n_requests = 1, .prefill_ns = -1, .decode_ns = -1,
                          .forward_passes = n_can * steps, .peak_device_bytes = -1, .energy_mj = -1,
                          .recount_tokens = n_out, .n_emissions = k ? 2 : 4, .runner_ns = 10, .start_ns = submit,
                          .requests = &rq};
    const int ok = 1;
    tb_rep_metrics_compute(&rq.m, &n_out, &ok, 1, s.prefill_ns, s.forward_passes, &s.m);
    tb_case_record rec = {.session_id = session, .backend_id = backend, .c = &c, .status = "ok",
                          .started_at = "2025-01-01T00:00:00.000Z", .finished_at = "2025-01-01T00:00:01.000Z",
                          .case_wall_ns = 50000000, .host_peak_rss = 1 << 20, .samples = &s, .n_samples = 1};
    int64_t id = tb_store_case(st, &rec, err);
    tb_str_free(&js);
    return id;
}

/* Issue 41: a shard join carries the canvas figures. The joined request
 * rows keep each shard's canvases (the kept ones and those past the cap)
 * and the stream's chunks; the joined case's canvas metrics pool both
 * shards' canvases and chunks, as one machine's run would. */
static void test_join_canvas(void)
{
    char *path = tmp_path("join_canvas.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, session[2], backend[2];
    CHECK(setup_session(st, &pb, &machine, &session[0], &backend[0]) == 0);
    tb_session_info si = {.machine_id = machine, .suite = &test_suite, .command_line = "tokbench run --shard 1/2"};
    session[1] = tb_store_session_begin(st, &si, &err);
    CHECK(session[1] > 0);
    backend[1] = tb_store_backend(st, session[1], &pb, &err);
    CHECK(backend[1] > 0);
    for (int k = 0; k < 2; k++) {
        tb_session_shard sh = {.shard_index = (uint32_t)k, .shard_count = 2, .start_at = "2025-01-01T00:00:00.000Z"};
        CHECK(tb_store_session_shard(st, session[k], &sh, &err) == 0);
        CHECK(write_canvas_case(st, session[k], backend[k], k, &err) > 0);
        CHECK(tb_store_session_end(st, session[k], "completed", &err) == 0);
    }
    tb_shard_join_result res;
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 1);
    tb_shard_join_result_free(&res);
    int64_t J = q_int(db, "SELECT id FROM session WHERE shard_index IS NULL AND shard_count = 2");
    CHECK(J > 0);
#define JOINED_REQ " FROM request r JOIN sample sa ON sa.id = r.sample_id JOIN bench_case c ON c.id = sa.case_id" \
                   " WHERE c.session_id = %lld"
    /* the request rows: each shard's canvases, those past the cap too */
    CHECK(q_int(db, "SELECT count(*)" JOINED_REQ, (long long)J) == 2);
    char *got = q_text(db, "SELECT group_concat(canvases || '/' || canvas_steps || '/' || canvas_committed || '/' ||"
                           " canvas_positions || '/' || json_array_length(canvases_json), ' ') FROM (SELECT r.*"
                           JOINED_REQ " ORDER BY r.canvases)",
                       (long long)J);
    CHECK(got && strcmp(got, "4/16/64/512/4 258/258/258/516/256") == 0);
    if (got && strcmp(got, "4/16/64/512/4 258/258/258/516/256") != 0)
        fprintf(stderr, "  joined canvases: %s\n", got);
    free(got);
    /* the commit times as stored: ms since the request's submit */
    CHECK(q_real(db, "SELECT json_extract(canvases_json, '$[3][3]')" JOINED_REQ " AND r.canvases = 4",
                 (long long)J) == 32.0);
    got = q_text(db, "SELECT group_concat(tokens_per_chunk || '/' || chunk_gap_ms || '/' || bursty, ' ') FROM"
                     " (SELECT r.*" JOINED_REQ " ORDER BY r.tokens_per_chunk)",
                 (long long)J);
    CHECK(got && strcmp(got, "16.0/10.0/1 129.0/20.0/1") == 0);
    if (got && strcmp(got, "16.0/10.0/1 129.0/20.0/1") != 0)
        fprintf(stderr, "  joined chunks: %s\n", got);
    free(got);
    /* the joined case's metrics pool both shards' canvases and chunks:
     * 4 + 256 kept canvases, 3 + 255 gaps, (512 + 516) / (64 + 258)
     * positions a token, 4 + 2 chunks */
#define JOINED_METRIC(stat, name)                                                                             \
    "SELECT m." stat " FROM metric m JOIN bench_case c ON c.id = m.case_id WHERE c.session_id = %lld AND m.name = '" \
    name "'", (long long)J
    CHECK(q_int(db, JOINED_METRIC("n", "steps_per_canvas")) == 260);
    CHECK(q_int(db, JOINED_METRIC("n", "committed_per_step")) == 260);
    CHECK(q_int(db, JOINED_METRIC("n", "canvas_gap_ms")) == 258);
    CHECK(q_real(db, JOINED_METRIC("max", "canvas_gap_ms")) == 10.0);
    CHECK(q_int(db, JOINED_METRIC("n", "positions_per_token")) == 1);
    CHECK(fabs(q_real(db, JOINED_METRIC("median", "positions_per_token")) - 1028.0 / 322.0) < 1e-12);
    CHECK(q_int(db, JOINED_METRIC("n", "tokens_per_chunk")) == 6);
    CHECK(q_real(db, JOINED_METRIC("max", "tokens_per_chunk")) == 129.0);
    /* and the summary view's columns (the per-case CSV) */
    CHECK(q_real(db, "SELECT positions_per_token FROM summary WHERE session = %lld", (long long)J) ==
          q_real(db, JOINED_METRIC("median", "positions_per_token")));
    CHECK(q_real(db, "SELECT steps_per_canvas FROM summary WHERE session = %lld", (long long)J) == 1.0);
#undef JOINED_METRIC
#undef JOINED_REQ
    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* A shard session of `start`: index k of n (stored as given, however
 * wrong: a database may hold what no run wrote), with case #1, completed. */
static int64_t bogus_shard(tb_store *st, int64_t machine, tb_plan_backend *pb, int64_t k, int64_t n, const char *start)
{
    char *err = NULL;
    tb_session_info si = {.machine_id = machine, .suite = &test_suite, .command_line = "tokbench run --shard"};
    int64_t session = tb_store_session_begin(st, &si, &err);
    CHECK(session > 0);
    int64_t backend = tb_store_backend(st, session, pb, &err);
    CHECK(backend > 0);
    tb_session_shard sh = {.shard_index = 0, .shard_count = 2, .start_at = start};
    CHECK(tb_store_session_shard(st, session, &sh, &err) == 0);
    char *sql = sqlite3_mprintf("UPDATE session SET shard_index = %lld, shard_count = %lld WHERE id = %lld",
                                (long long)k, (long long)n, (long long)session);
    CHECK(sqlite3_exec(tb_store_db(st), sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_free(sql);
    CHECK(write_small_case(st, session, backend, 1, &err) > 0);
    CHECK(tb_store_session_end(st, session, "completed", &err) == 0);
    free(err);
    return session;
}

/* Issue 38 item 12: a join checks the stored indexes and counts. Shards
 * 0 and 7 of 2, -1 and 1 of 2, or 0 of 1 alone are no run: nothing is
 * joined and the merge says why; shard 0 with the genuine shard 1 is
 * joined, once. */
static void test_join_indexes(void)
{
    char *path = tmp_path("join_idx.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, s0, b0;
    CHECK(setup_session(st, &pb, &machine, &s0, &b0) == 0);
    CHECK(sqlite3_exec(db, "DELETE FROM session", NULL, NULL, NULL) == SQLITE_OK);
    const char *t1 = "2025-01-01T00:00:00.000Z", *t2 = "2025-01-02T00:00:00.000Z", *t3 = "2025-01-03T00:00:00.000Z";
    bogus_shard(st, machine, &pb, 0, 2, t1);
    int64_t seven = bogus_shard(st, machine, &pb, 7, 2, t1);
    bogus_shard(st, machine, &pb, -1, 2, t2);
    bogus_shard(st, machine, &pb, 1, 2, t2);
    bogus_shard(st, machine, &pb, 0, 1, t3);

    tb_shard_join_result res;
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 0 && res.known == 0);
    CHECK_CONTAINS(res.waiting, "2025-01-01T00:00:00.000Z (2 shards): a shard index outside 0..N-1 (shards present:");
    CHECK_CONTAINS(res.waiting, "2025-01-02T00:00:00.000Z (2 shards): a shard index outside 0..N-1");
    CHECK_CONTAINS(res.waiting, "2025-01-03T00:00:00.000Z (1 shards): not a sharded run");
    tb_shard_join_result_free(&res);
    CHECK(q_int(db, "SELECT count(*) FROM session WHERE shard_index IS NULL") == 0);
    CHECK(q_int(db, "SELECT count(*) FROM shard") == 0);

    /* the bogus shard gone and the genuine one there: joined, once */
    char *sql = sqlite3_mprintf("DELETE FROM session WHERE id = %lld", (long long)seven);
    CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_free(sql);
    bogus_shard(st, machine, &pb, 1, 2, t1);
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 1 && res.known == 0);
    tb_shard_join_result_free(&res);
    CHECK(q_int(db, "SELECT count(*) FROM shard s JOIN session j ON j.id = s.session_id WHERE j.start_at ="
                    " '2025-01-01T00:00:00.000Z'") == 2);
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 0 && res.known == 1);
    tb_shard_join_result_free(&res);

    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* Audit H item 5: of each shard index the join takes the newest
 * completed session. Shard 1 interrupted, with shard 0 completed: not
 * joined, shard 1 named interrupted (not missing); shard 1 run again
 * twice into the database: joined from the newest copy of shard 1 (its
 * uuid in the shard table), the older copies and the interrupted one
 * still stored, and the merge says which copy it took. */
static void test_join_copies(void)
{
    char *path = tmp_path("join_copies.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, s0, b0;
    CHECK(setup_session(st, &pb, &machine, &s0, &b0) == 0);
    CHECK(sqlite3_exec(db, "DELETE FROM session", NULL, NULL, NULL) == SQLITE_OK);
    const char *t = "2025-02-01T00:00:00.000Z";
    bogus_shard(st, machine, &pb, 0, 2, t);
    int64_t cut = bogus_shard(st, machine, &pb, 1, 2, t);
    char *sql = sqlite3_mprintf("UPDATE session SET status = 'interrupted' WHERE id = %lld", (long long)cut);
    CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_free(sql);
    tb_shard_join_result res;
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 0);
    char *cut_uuid = q_text(db, "SELECT uuid FROM session WHERE id = %lld", (long long)cut);
    char *want = tb_xasprintf("(2 shards): shard 1 interrupted (session %s) (shards completed: 0)", cut_uuid);
    CHECK_CONTAINS(res.waiting, want);
    CHECK(res.waiting && !strstr(res.waiting, "missing"));
    free(want);
    tb_shard_join_result_free(&res);

    int64_t older = bogus_shard(st, machine, &pb, 1, 2, t);
    int64_t newer = bogus_shard(st, machine, &pb, 1, 2, t);
    CHECK(older > 0 && newer > older);
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 1 && !res.waiting);
    char *new_uuid = q_text(db, "SELECT uuid FROM session WHERE id = %lld", (long long)newer);
    want = tb_xasprintf("shard 1: took its newest completed session, %s (started ", new_uuid);
    CHECK_CONTAINS(res.notes, want);
    CHECK_CONTAINS(res.notes, "1 older copy stored, not joined");
    free(want);
    tb_shard_join_result_free(&res);
    char *taken = q_text(db, "SELECT source_uuid FROM shard WHERE shard_index = 1");
    CHECK(taken && new_uuid && strcmp(taken, new_uuid) == 0);
    CHECK(q_int(db, "SELECT count(*) FROM session WHERE shard_index = 1") == 3);
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 0 && res.known == 1 && !res.notes);
    tb_shard_join_result_free(&res);
    free(taken);
    free(new_uuid);
    free(cut_uuid);
    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

/* Audit H item 4: the join measures how far apart the shards' windows of
 * each joined measured call were. Two runs of 2 shards, one request each
 * (submit 1 us into its call, done 6 us later): run A's shards start
 * their calls together (no warning, lags 0); run B's shard 1 starts its
 * call 3 us after shard 0's (windows [1, 7] and [4, 10] us: 33% of the
 * joined 9 us covered by both): the merge warns, naming shard 1, its lag
 * and how late it started, and stores each shard's lag. */
static void test_join_windows(void)
{
    char *path = tmp_path("join_windows.db");
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    tb_plan_backend pb;
    int64_t machine, s0, b0;
    CHECK(setup_session(st, &pb, &machine, &s0, &b0) == 0);
    CHECK(sqlite3_exec(db, "DELETE FROM session", NULL, NULL, NULL) == SQLITE_OK);
    const char *ta = "2025-03-01T00:00:00.000Z", *tb = "2025-03-02T00:00:00.000Z";
    int64_t a0 = bogus_shard(st, machine, &pb, 0, 2, ta), a1 = bogus_shard(st, machine, &pb, 1, 2, ta);
    int64_t b0s = bogus_shard(st, machine, &pb, 0, 2, tb), b1s = bogus_shard(st, machine, &pb, 1, 2, tb);
    const int64_t start[4][2] = {{a0, 0}, {a1, 0}, {b0s, 0}, {b1s, 3000}};
    for (int i = 0; i < 4; i++) {
        char *sql = sqlite3_mprintf("UPDATE sample SET start_ns = %lld WHERE case_id IN (SELECT id FROM bench_case"
                                    " WHERE session_id = %lld); UPDATE request SET submit_offset_ns = 1000, e2e_ns ="
                                    " 6000 WHERE sample_id IN (SELECT s.id FROM sample s JOIN bench_case c ON c.id ="
                                    " s.case_id WHERE c.session_id = %lld); UPDATE session SET start_late_ns = %lld"
                                    " WHERE id = %lld", (long long)start[i][1], (long long)start[i][0],
                                    (long long)start[i][0], (long long)(i == 3 ? 2500000 : 0),
                                    (long long)start[i][0]);
        CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_free(sql);
    }
    tb_shard_join_result res;
    CHECK(tb_shard_join(st, &res, &err) == 0);
    CHECK(res.joined == 2);
    CHECK_CONTAINS(res.warnings, "starting at 2025-03-02T00:00:00.000Z (2 shards): the shards' measured calls were "
                                 "not simultaneous (case #1, repetition 0: every shard's window covered 33% of the "
                                 "joined window): shard 1 began up to 0.0 ms (33% of a joined window) after the "
                                 "first shard's window (it started 2.5 ms after --start-at);");
    CHECK(res.warnings && !strstr(res.warnings, "2025-03-01") && !strstr(res.warnings, "shard 0 began"));
    tb_shard_join_result_free(&res);
    char *lags_b = q_text(db, "SELECT group_concat(window_lag_ns, ' ') FROM (SELECT h.window_lag_ns FROM shard h JOIN"
                              " session j ON j.id = h.session_id WHERE j.start_at = '2025-03-02T00:00:00.000Z' ORDER"
                              " BY h.shard_index)");
    char *lags_a = q_text(db, "SELECT group_concat(window_lag_ns, ' ') FROM (SELECT h.window_lag_ns FROM shard h JOIN"
                              " session j ON j.id = h.session_id WHERE j.start_at = '2025-03-01T00:00:00.000Z' ORDER"
                              " BY h.shard_index)");
    CHECK(lags_b && strcmp(lags_b, "0 3000") == 0);
    CHECK(lags_a && strcmp(lags_a, "0 0") == 0);
    free(lags_a);
    free(lags_b);
    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    free(path);
}

int main(void)
{
    null_path = getenv("TB_NULL_PLUGIN");
    if (!null_path || !getenv("TB_SOURCE_ROOT")) {
        fprintf(stderr, "test_store: TB_NULL_PLUGIN and TB_SOURCE_ROOT must be set (run through meson test)\n");
        return 1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/tb_store_test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_root))
        die("mkdtemp");
    unsetenv("TOKBENCH_DB");

    test_fresh();
    test_reopen();
    test_stale_notice();
    test_migration_path();
    test_migration_output_ids();
    test_newer_refused();
    test_not_a_database();
    test_machine();
    test_full_session();
    test_table_round_trip();
    test_failures();
    test_nested_writes();
    test_sample_sources();
    test_join_all_or_nothing();
    test_join_indexes();
    test_join_copies();
    test_join_windows();
    test_join_canvas();
    test_two_writers();
    test_concurrent_create();

    char *cmd = tb_xasprintf("rm -rf '%s'", tmp_root);
    if (system(cmd) != 0)
        fprintf(stderr, "test_store: could not remove %s\n", tmp_root);
    free(cmd);
    return check_done();
}
