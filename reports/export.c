/* export.c — see export.h. JSON is assembled by SQLite's JSON functions,
 * so the export is exactly what the tables hold. */
#define _GNU_SOURCE
#include "export.h"

#include <stdlib.h>
#include <string.h>

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

int tb_export_csv(sqlite3 *db, int64_t session, FILE *out, char **err)
{
    if (check_session(db, session, 0, err) != 0)
        return -1;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT * FROM summary WHERE session = ?", -1, &q, NULL) != SQLITE_OK) {
        *err = tb_rdb_error(db, session, "the summary view");
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    /* Whole before a byte is written: a read error halfway must not
     * leave a CSV that looks complete. */
    tb_str b = {0};
    int n = sqlite3_column_count(q);
    for (int i = 0; i < n; i++) {
        csv_field(&b, sqlite3_column_name(q, i));
        tb_str_append(&b, i + 1 < n ? "," : "\r\n");
    }
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        for (int i = 0; i < n; i++) {
            csv_field(&b, (const char *)sqlite3_column_text(q, i));
            tb_str_append(&b, i + 1 < n ? "," : "\r\n");
        }
    if (rc != SQLITE_DONE) {
        char *what = tb_xasprintf("the cases of session %lld", (long long)session);
        *err = tb_rdb_error(db, session, what);
        free(what);
    }
    sqlite3_finalize(q);
    if (rc == SQLITE_DONE)
        fwrite(b.s, 1, b.len, out);
    tb_str_free(&b);
    return rc == SQLITE_DONE ? 0 : -1;
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
    " 'cases', (SELECT json_group_array(json_object('ordinal', c.ordinal, 'backend', b.label,"
    "   'prompt_tokens', c.prompt_tokens, 'max_new_tokens', c.max_new_tokens, 'batch', c.batch,"
    "   'concurrency', c.concurrency, 'steps', c.steps, 'block_length', c.block_length,"
    "   'request_rate', c.request_rate, 'options', json(c.options_json), 'status', c.status, 'error', c.error,"
    "   'started_at', c.started_at, 'finished_at', c.finished_at, 'case_wall_ns', c.case_wall_ns,"
    "   'host_peak_rss_bytes', c.host_peak_rss_bytes, 'search_id', c.search_id, 'search_role', c.search_role,"
    "   'search_pass', c.search_pass,"
    "   'metrics', (SELECT json_group_object(name, json_object('unit', unit, 'n', n, 'median', median, 'p5', p5,"
    "       'p95', p95, 'mean', mean, 'stdev', stdev, 'cv', cv, 'min', min, 'max', max, 'ci_lo', ci_lo,"
    "       'ci_hi', ci_hi, 'p90', p90, 'p99', p99)) FROM metric WHERE case_id = c.id),"
    "   'samples', (SELECT json_group_array(json_object('repetition', sa.repetition, 'warmup', sa.warmup,"
    "       'n_requests', sa.n_requests, 'wall_ns', sa.wall_ns, 'prefill_ns', sa.prefill_ns,"
    "       'decode_ns', sa.decode_ns, 'output_tokens', sa.output_tokens, 'recount_tokens', sa.recount_tokens,"
    "       'aggregate_tps', sa.aggregate_tps, 'decode_tps', sa.decode_tps, 'forward_passes', sa.forward_passes,"
    "       'tokens_per_forward', sa.tokens_per_forward, 'peak_device_bytes', sa.peak_device_bytes,"
    "       'energy_mj', sa.energy_mj, 'n_emissions', sa.n_emissions, 'runner_ns', sa.runner_ns,"
    "       'requests', (SELECT json_group_array(json_object('idx', r.idx, 'status', r.status, 'error', r.error,"
    "           'submit_offset_ns', r.submit_offset_ns, 'ttft_ns', r.ttft_ns, 'e2e_ns', r.e2e_ns,"
    "           'tpot_ns', r.tpot_ns, 'tps', r.tps, 'requested_tokens', r.requested_tokens,"
    "           'output_tokens', r.output_tokens, 'recount_tokens', r.recount_tokens,"
    "           'count_mismatch', r.count_mismatch, 'steps_done', r.steps_done, 'answer_tokens', r.answer_tokens, 'output_hash', r.output_hash,"
    "           'prompt_hash', r.prompt_hash, 'prompt_tokens', r.prompt_tokens,"
    "           'emissions', json(r.emissions_json)))"
    "         FROM (SELECT * FROM request WHERE sample_id = sa.id ORDER BY idx) r)))"
    "     FROM (SELECT * FROM sample WHERE case_id = c.id ORDER BY repetition) sa)))"
    "   FROM (SELECT * FROM bench_case WHERE session_id = ?1 ORDER BY ordinal) c"
    "   JOIN backend b ON b.id = c.backend_id))";

int tb_export_json(sqlite3 *db, int64_t session, FILE *out, char **err)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, json_sql, -1, &q, NULL) != SQLITE_OK) {
        *err = tb_rdb_error(db, session, "the session");
        return -1;
    }
    sqlite3_bind_int64(q, 1, session);
    int rc = -1;
    if (sqlite3_step(q) == SQLITE_ROW) {
        fputs((const char *)sqlite3_column_text(q, 0), out);
        fputc('\n', out);
        rc = 0;
    } else { /* json() of a column that is not JSON fails the whole query: name the row */
        char *what = tb_xasprintf("session %lld", (long long)session);
        *err = tb_rdb_error(db, session, what);
        free(what);
    }
    sqlite3_finalize(q);
    return rc;
}
