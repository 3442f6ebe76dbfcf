/* reader.h — the one place that reads stored rows back: every SELECT of
 * sessions, machines, backends, cases, metrics, searches, samples,
 * requests and telemetry that the reports (reports/) make is here, and
 * hands back named row structs. A column is read in one function; a
 * report never holds SQL or a column index.
 *
 * Conventions: strings are malloc'd and never NULL ("" for SQL NULL)
 * unless a field says "NULL: ..."; numbers that may be NULL are NaN
 * (reals) or -1 (counts) as each field says; a case's dimensions are a
 * tb_case (dims.h: 0 = not applicable). Every reader returns 0, or -1
 * with *err malloc'd ("reading WHAT: why", naming the row whose JSON is
 * not JSON of its kind when that is why: tb_read_error): a read error is
 * never taken for the end of the rows. */
#ifndef TB_READER_H
#define TB_READER_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "stats.h"

/* The error of a read of `what` that failed: SQLite's message, or the
 * row of session `session` (every session's when < 0) whose JSON column
 * does not hold JSON of its kind (tb_store_check_json, emissions
 * included). malloc'd. Call it before anything else runs on db. */
char *tb_read_error(sqlite3 *db, int64_t session, const char *what);

/* ------------------------------------------------------------ sessions */

typedef struct tb_row_session {
    int64_t id, seed;
    char *uuid, *suite_name, *suite_path, *suite_sha256, *suite_text;
    char *tokbench_version, *git_commit, *compiler, *cuda_build_version, *command_line;
    char *started_at, *finished_at, *status; /* finished_at "": not finished */
    int warmup, repeat;
    char *prompt_set_path, *prompt_set_sha256; /* NULL: no prompt set */
    char *config_sha256, *config_json;         /* "" before schema 6 */
    /* its machine */
    char *hostname, *cpu_model, *os, *kernel, *arch, *fingerprint, *nvml_status;
    char *gpu_name, *gpu_driver, *cuda_driver_version, *compute_capability; /* "": none */
    int cpu_cores, gpu_count;
    double ram_bytes, gpu_memory_bytes;
    /* a shard of a run split over machines, or the session that joined
     * them (migration 8); shard_count -1: neither (or an older database) */
    int64_t shard_index; /* -1: the joined session */
    int64_t shard_count, start_late_ns;
    /* joined: the largest lag of a shard's window behind the first
     * shard's in a joined call (shard.window_lag_ns, ns); -1 unknown */
    int64_t shard_window_lag_ns;
    char *start_at;    /* "" when not stored */
    char *shard_hosts; /* joined: "host OFFSET us, ..." from shard 0 */
} tb_row_session;

/* Session `id`: 0, 1 when there is no such session, or -1 with *err. */
int tb_read_session(sqlite3 *db, int64_t id, tb_row_session *out, char **err);
void tb_row_session_free(tb_row_session *s);

/* One line of `tokbench sessions`: newest first. */
typedef struct tb_row_session_item {
    int64_t id, n_ok, n_failed, n_skipped;
    char *started_at, *suite_name, *status, *hostname, *git_commit;
    char *gpu_name; /* "": no GPU */
    int shard_index, shard_count; /* a shard: K of N; a join: -1 of N; else -1, 0 */
    int64_t joined_in;            /* a shard pooled here: its joined session; else -1 */
} tb_row_session_item;
/* The `limit` (<= 0: all) sessions started last. */
int tb_read_session_list(sqlite3 *db, int limit, tb_row_session_item **out, size_t *n, char **err);
void tb_row_session_items_free(tb_row_session_item *r, size_t n);

/* The session started last (ids are not in time order once a merge
 * appended older ones), of those that are not shards pooled by a joined
 * session here; -1 when there is none. */
int64_t tb_read_last_session(sqlite3 *db);
/* The sessions whose id is `id`, or (when there is none) whose uuid
 * starts with `uuid_prefix` (NULL: none): up to two, in *ids; how many
 * (2: ambiguous). */
int tb_read_find_session(sqlite3 *db, int64_t id, const char *uuid_prefix, int64_t ids[2]);

/* ------------------------------------------------------------ backends */

typedef struct tb_row_backend {
    int64_t id;
    int abi_major;
    char *label, *plugin, *plugin_path, *plugin_version, *model, *capabilities;
    char *options_json, *info_json;
    char *dtype, *device; /* from info_json; "": not said */
    int random_weights;   /* 1 yes, 0 no, -1 not said */
} tb_row_backend;

/* Session `session`'s backends in the order they were stored. */
int tb_read_backends(sqlite3 *db, int64_t session, tb_row_backend **out, size_t *n, char **err);
void tb_row_backends_free(tb_row_backend *b, size_t n);

/* A JSON object's fields: key, and value as JSON text (strings bare). */
typedef struct tb_row_field {
    char *key, *value;
} tb_row_field;
/* Of `json` ("" or NULL: none). */
int tb_read_json_fields(sqlite3 *db, const char *json, tb_row_field **out, size_t *n, char **err);
void tb_row_fields_free(tb_row_field *f, size_t n);

/* ------------------------------------------------------------ cases */

/* Requests whose count failed the output-length check (docs/METRICS.md,
 * "Output-length check"), by the check (request.count_mismatch,
 * TB_COUNT_*) and the side the count lay on: of the output ids the
 * backend returned (request.output_ids), or of its text's re-count
 * (request.recount_tokens). */
enum {
    TB_MISMATCH_OVER_IDS,   /* more tokens counted than ids returned */
    TB_MISMATCH_UNDER_IDS,  /* fewer */
    TB_MISMATCH_OVER_TEXT,  /* more than the text re-counts to */
    TB_MISMATCH_UNDER_TEXT, /* fewer */
    TB_N_COUNT_MISMATCHES
};

typedef struct tb_row_case {
    int64_t id;
    int ordinal;
    char *backend;       /* its backend's label */
    tb_case dims;        /* the dimensions only (dims.h; 0: not
                            applicable); no options, no label */
    char *options_json;  /* options swept by the matrix; "{}" when none */
    char *status, *error;
    double peak_device_mib, host_rss_mib; /* NaN: not measured */
    double energy_j_per_token;            /* NaN: no energy counter */
    int count_mismatches[TB_N_COUNT_MISMATCHES]; /* measured requests whose
                                             count failed its check, by
                                             TB_MISMATCH_* */
    int64_t text_requests;               /* measured successful requests held
                                            to their text's re-count (no ids
                                            returned, a re-count stored) */
    int64_t text_count, text_recount;    /* their counts and re-counts summed */
    int varying_outputs;                  /* prompts whose output differs between
                                             measured requests (docs/METRICS.md):
                                             by request.prompt_hash, else item,
                                             else slot */
    int requests, failed_requests;        /* of the measured repetitions */
    int64_t search_id;                    /* 0: not a search's run */
    char *search_role;                    /* NULL: none */
    int search_pass;                      /* -1: none */
    int64_t scrapes, scrapes_failed;      /* telemetry scrapes (migration
                                             14); -1: none stored */
    char *scrape_error;                   /* the first failed one's; NULL */
    char *telemetry_unmatched; /* `metrics =` names no scrape had (series
                                  stored without points), "a, b"; NULL */
} tb_row_case;

/* Session `session`'s cases by ordinal. */
int tb_read_cases(sqlite3 *db, int64_t session, tb_row_case **out, size_t *n, char **err);
void tb_row_cases_free(tb_row_case *c, size_t n);

/* A failed measured request's whole message: for each case of the
 * session, the first (by repetition, then request) of each distinct
 * word before its first ": " (its error class, metrics.h). */
typedef struct tb_row_request_error {
    int64_t case_id;
    char *error;
} tb_row_request_error;

/* Those of session `session`, by case id, then first to last. */
int tb_read_first_errors(sqlite3 *db, int64_t session, tb_row_request_error **out, size_t *n, char **err);
void tb_row_request_errors_free(tb_row_request_error *e, size_t n);

typedef struct tb_row_metric {
    int64_t case_id;
    char *name, *unit;
    tb_stats st; /* NaN where NULL */
} tb_row_metric;

/* Every metric row of the session's cases, in case ordinal order. */
int tb_read_metrics(sqlite3 *db, int64_t session, tb_row_metric **out, size_t *n, char **err);
void tb_row_metrics_free(tb_row_metric *m, size_t n);

typedef struct tb_row_search {
    int64_t id;
    char *backend; /* its backend's label */
    int ordinal;
    char *kind, *status, *limits_json;
    double sync_rate, max_rate, slo_rate;         /* NaN: not stored */
    double ttft_p99_ms, tpot_p99_ms, goodput_pct; /* its limits; NaN: none */
    char *error;                                  /* NULL: none */
} tb_row_search;

/* Session `session`'s load searches by id. */
int tb_read_searches(sqlite3 *db, int64_t session, tb_row_search **out, size_t *n, char **err);
void tb_row_searches_free(tb_row_search *x, size_t n);

/* One row of the summary view (a case with its headline figures), for
 * the terminal report: NaN where NULL. */
typedef struct tb_row_summary {
    char *backend;
    tb_case dims;
    char *swept_options, *status, *error;
    double req_tps_median, req_tps_p5, aggregate_tps, decode_tps;
    double ttft_ms, tpot_ms, e2e_ms, e2e_p95_ms, ttft_p99_ms;
    double nfe, tokens_per_forward, agg_tps_cv, peak_device_mib;
    int64_t calls; /* -1: none */
    int64_t count_mismatches, requests, failed_requests;
    double accuracy, accuracy_ci_lo, accuracy_ci_hi, judge_ppl;
    double req_per_s, error_rate, goodput;
    double sent_per_s; /* open loop: the median sent_rate; NaN: none */
    double tpot_p99_ms; /* the p99 of tpot_ms (not in the view); NaN: none */
    double canvas_gap_ms; /* canvas_gap_ms's median (not in the view); NaN: none */
    int64_t canvas_gap_n; /* and its n; 0: none (tb_case_is_canvas) */
    char *backend_options_json; /* every option of its backend */
    double prompt_len_mean;     /* metric prompt_len's mean; NaN: none */
} tb_row_summary;
int tb_read_summary(sqlite3 *db, int64_t session, tb_row_summary **out, size_t *n, char **err);
void tb_row_summaries_free(tb_row_summary *r, size_t n);

/* The summary view as text, every column (its names and SQL text values;
 * NULL cells NULL): cells[row * n_cols + col]. */
typedef struct tb_row_table {
    char **names;
    size_t n_cols, n_rows;
    char **cells;
} tb_row_table;
int tb_read_summary_table(sqlite3 *db, int64_t session, tb_row_table *out, char **err);
void tb_row_table_free(tb_row_table *t);

/* Every request of the session (warm-ups included, column warmup),
 * by case ordinal, repetition and slot: the case, backend, repetition
 * and warmup, then each request column the JSON export carries except
 * the emissions (store.h). Same cells as tb_read_summary_table. */
int tb_read_request_table(sqlite3 *db, int64_t session, tb_row_table *out, char **err);

/* The whole session as one JSON document (session, machine, backends,
 * searches, cases with metrics, samples and requests), malloc'd. */
int tb_read_session_json(sqlite3 *db, int64_t session, char **json, char **err);

/* ------------------------------------------------------------ samples */

/* Where a metric's raw values are: one per measured sample, or one per
 * successful request of the measured samples, as the registry says of
 * the metric (tb_metric_def.samples: "calls" or "requests"). */
typedef struct tb_sample_source {
    const char *name; /* a metric of the registry (metrics.h) */
    const char *expr; /* over sample sa, or request r of sample sa */
} tb_sample_source;
extern const tb_sample_source tb_sample_sources[];
extern const size_t tb_n_sample_sources;

/* Case `case_id`'s values of `src` (NULLs left out), malloc'd. A source
 * whose metric the registry does not sample by calls or requests is an
 * error (a bug here). */
int tb_read_case_samples(sqlite3 *db, int64_t session, int64_t case_id, const tb_sample_source *src, double **out,
                         size_t *n, char **err);

/* Every inter-token gap (ms) of the measured, successful requests of a
 * case (request.emissions_json), sorted ascending. */
int tb_read_itl(sqlite3 *db, int64_t session, int64_t case_id, double **out, size_t *n, char **err);

/* A case's telemetry (migration 10): each series with its points in
 * time order (seconds since the sampler started; NaN: not a finite
 * value); n = 0 without telemetry or before the migration. */
typedef struct tb_row_series {
    char *source, *name;
    double *t_s, *v;
    size_t n;
} tb_row_series;
typedef struct tb_row_telemetry {
    tb_row_series *s;
    size_t n;
} tb_row_telemetry;
int tb_read_telemetry(sqlite3 *db, int64_t session, int64_t case_id, tb_row_telemetry *out, char **err);
void tb_row_telemetry_free(tb_row_telemetry *t);

/* ------------------------------------------------------------ history */

/* Is there a backend `label` in any session? 1, 0, or -1 with *err. */
int tb_read_backend_exists(sqlite3 *db, const char *label, char **err);
/* The distinct backend labels of every session, "a, b", malloc'd. */
char *tb_read_backend_labels(sqlite3 *db);
/* The unit of metric `metric` of backend `label` (*unit malloc'd): 1,
 * 0 when no case of it has that metric, or -1 with *err. */
int tb_read_metric_unit(sqlite3 *db, const char *label, const char *metric, char **unit, char **err);
/* The distinct metric names of backend `label`, "a, b", malloc'd. */
char *tb_read_metric_names(sqlite3 *db, const char *label);

/* One case of backend `label` in some session, with metric `metric`. */
typedef struct tb_row_history {
    int64_t session;
    char *started_at, *commit, *version, *session_status;
    char *host, *hardware, *fingerprint; /* hardware: GPU name, else CPU model */
    char *model, *dtype, *plugin_version, *backend_options_json;
    char *config_sha256, *config_json;
    char *case_status, *options_json;
    tb_case dims;
    tb_stats st; /* n = 0 when the case has no such metric */
    double prompt_len_mean; /* metric prompt_len's mean; NaN: none */
    /* the session: a shard (K of N; joined_in its joined session in this
     * database, else -1), a joined session (-1 of N), neither (-1, -1) */
    int64_t shard_index, shard_count, joined_in;
} tb_row_history;

/* Every case of backend `label` matching every filter "KEY=V1[,V2...]"
 * (KEY a stored dimension, dims.h, value "none" or "-" for not
 * applicable; or a swept option's name), by session start then ordinal.
 * 0; -1 with *err for a malformed filter; -2 with *err: a read error. */
int tb_read_history(sqlite3 *db, const char *label, const char *metric, char *const *filters, size_t n_filters,
                    tb_row_history **out, size_t *n, char **err);
void tb_row_history_free(tb_row_history *h, size_t n);

#endif
