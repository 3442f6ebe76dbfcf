/* store.h — the SQLite history: sessions, backends, cases, samples,
 * requests and per-case statistics (db/schema.sql).
 *
 * The schema ships in the binary as migrations (schema.sql is number 1);
 * opening a database applies the missing ones in order, each in its own
 * transaction, and PRAGMA user_version records the last one. A database
 * newer than this tokbench is refused, never modified. WAL mode and a busy
 * timeout let several tokbench processes share one file; each finished case
 * is written in one transaction, so a crash loses at most the case in
 * flight. */
#ifndef TB_STORE_H
#define TB_STORE_H

#include <sqlite3.h>
#include <stdint.h>

#include "hwinfo.h"
#include "metrics.h"
#include "plan.h"
#include "stats.h"

typedef struct tb_store tb_store;

/* The default database: $TOKBENCH_DB, else ./tokbench.db. */
const char *tb_store_default_path(void);

/* Schema version this tokbench writes (= number of migrations). */
int tb_store_schema_version(void);

/* Open (creating if needed) and migrate. 0, or -1 with *err malloc'd. */
int tb_store_open(const char *path, tb_store **out, char **err);
void tb_store_close(tb_store *st);
sqlite3 *tb_store_db(tb_store *st);

/* Apply migrations up to `target` (tests use this to build old
 * databases). 0, or -1 with *err. */
int tb_store_migrate(sqlite3 *db, int target, char **err);

/* ----------------------------------------------------------- writing */

/* Row id of the machine (inserted when its fingerprint is new), or -1. */
int64_t tb_store_machine(tb_store *st, const tb_machine_info *m);

typedef struct tb_session_info {
    int64_t machine_id;
    const tb_suite *suite;
    const char *command_line;
} tb_session_info;

/* New session in state 'running'; returns its id or -1. */
int64_t tb_store_session_begin(tb_store *st, const tb_session_info *si);
/* status: "completed", "interrupted" or "failed". */
int tb_store_session_end(tb_store *st, int64_t session, const char *status);

/* Backend row for plan backend `pb`; returns its id or -1. */
int64_t tb_store_backend(tb_store *st, int64_t session, const tb_plan_backend *pb);
/* The prompt set's items (plan->n_prompts of them) and its path and hash,
 * with the session; nothing without a prompt set. 0 or -1. */
int tb_store_prompts(tb_store *st, int64_t session, const tb_plan *plan);
int tb_store_backend_info(tb_store *st, int64_t backend_id, const char *info_json);

/* One request of one sample, metrics already derived. */
typedef struct tb_request_record {
    int status;              /* tb_status */
    const char *error;       /* NULL when ok */
    int64_t submit_offset_ns;
    tb_request_metrics m;
    uint32_t n_out;          /* engine's count */
    int32_t recount;         /* -1: not re-counted */
    uint32_t steps_done;
    uint32_t answer_tokens;  /* TB_UNKNOWN_COUNT: not reported */
    uint64_t output_hash;
    char *emissions_json;    /* [[ms since submit, tokens], ...] */
    int32_t prompt_idx;      /* item of the prompt set; -1: synthetic */
    int scored;              /* counted in the case's quality metrics */
    char *output_text;       /* the answer text (prompt sets), or NULL */
    double scores[3];        /* quality.h's TB_SCORE_*; NaN: not applicable */
} tb_request_record;

typedef struct tb_sample_record {
    uint32_t repetition;     /* 0-based over warm-ups then measured */
    int warmup;
    uint32_t n_requests;
    tb_rep_metrics m;
    int64_t prefill_ns, decode_ns, forward_passes, peak_device_bytes, energy_mj;
    int64_t recount_tokens;  /* -1: none */
    uint32_t n_emissions;
    int64_t runner_ns;
    tb_request_record *requests;
} tb_sample_record;

typedef struct tb_metric_record {
    const char *name; /* docs/METRICS.md */
    const char *unit;
    tb_stats st;
    char *name_buf;   /* when the name is built (accuracy_TAG): owned */
} tb_metric_record;

typedef struct tb_case_record {
    int64_t session_id, backend_id;
    const tb_case *c;
    const char *status;      /* "ok", "failed", "skipped" */
    const char *error;
    const char *started_at, *finished_at;
    int64_t case_wall_ns;    /* -1: not run */
    int64_t host_peak_rss;   /* -1: unknown */
    tb_sample_record *samples;
    size_t n_samples;
    tb_metric_record *metrics;
    size_t n_metrics;
} tb_case_record;

/* Write the case with its samples, requests and metrics in one
 * transaction. Returns the case id, or -1 (nothing written). */
int64_t tb_store_case(tb_store *st, const tb_case_record *rec, char **err);

#endif
