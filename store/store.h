/* store.h — the SQLite history: sessions, backends, cases, samples,
 * requests and per-case statistics (store/schema/schema.sql).
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
#include "record.h"

/* plan.h, suite.h: the store reads these, never the other way round. */
typedef struct tb_suite tb_suite;
typedef struct tb_plan tb_plan;
typedef struct tb_plan_backend tb_plan_backend;

typedef struct tb_store tb_store;

/* The default database: $TOKBENCH_DB, else ./tokbench.db. */
const char *tb_store_default_path(void);

/* Schema version this tokbench writes (= number of migrations). */
int tb_store_schema_version(void);

/* Open (creating if needed) and migrate. 0, or -1 with *err malloc'd.
 * Opening also marks 'interrupted' the sessions left 'running' by a
 * process that is gone (docs/RELIABILITY.md). */
int tb_store_open(const char *path, tb_store **out, char **err);
/* Open an existing database for a command that only reads it (sessions,
 * show, report, export, compare, history): never creates one (a missing
 * file is an error naming it). A file this process may write is opened
 * as tb_store_open does (migrated, stale sessions marked); one it may not
 * is opened read-only and never changed: an older schema is then read
 * through a migrated copy in memory, and nothing is marked. 0, or -1 with
 * *err malloc'd. */
int tb_store_open_reader(const char *path, tb_store **out, char **err);
/* What opening did that the user should hear of ("PATH: session 12 marked
 * interrupted: ..."), or NULL: the store prints nothing itself. Valid
 * until tb_store_close. */
const char *tb_store_notice(const tb_store *st);
void tb_store_close(tb_store *st);
sqlite3 *tb_store_db(tb_store *st);

/* Apply migrations up to `target` (tests use this to build old
 * databases). 0, or -1 with *err. */
int tb_store_migrate(sqlite3 *db, int target, char **err);

/* ----------------------------------------------------------- checking */

/* The stored JSON that readers parse, checked: every JSON column (the
 * machine's and session's, backend.options_json and info_json,
 * bench_case.options_json, prompt.tags_json and, with with_requests,
 * request.emissions_json) of session `session`'s rows (of every
 * session when `session` < 0) is NULL or valid JSON of its column's kind
 * (an object; an array for emissions and tags; any value for
 * describe()'s info_json). 0 when all are; -1 with *err naming the
 * first row that is not ("backend row 7 ([backend a] of session 3):
 * info_json is not valid JSON"), or what could not be read. On any
 * connection: db merge checks its source with it, and the readers
 * (reports/) before they trust a session's rows. */
int tb_store_check_json(sqlite3 *db, int64_t session, int with_requests, char **err);

/* Whether the process that owns a session (its owner_* columns,
 * migration 5; NULL columns: boot NULL, pid 0, ticks -1) is running. */
typedef enum tb_owner_state {
    TB_OWNER_GONE,    /* certainly ended: another boot, no such pid, a
                         zombie, a reused pid */
    TB_OWNER_ALIVE,   /* this boot and PID namespace, and its pid runs
                         with the recorded start time */
    TB_OWNER_UNKNOWN  /* cannot be told here (another PID namespace, a
                         hidden pid, no owner recorded) */
} tb_owner_state;
tb_owner_state tb_store_owner_state(const char *boot_id, const char *pid_ns, int64_t pid, int64_t start_ticks);

/* ----------------------------------------------------------- metric rows */

/* The statistics columns of table metric after n (stats.h's tb_stats),
 * one row each, in column order: store.c writes them, the reader
 * (reader.h) reads them and the JSON export names them from this table.
 * A new statistic is a tb_stats field (and its computation), a column
 * (a migration) and a row here. */
typedef struct tb_stat_column {
    const char *column; /* metric.COLUMN, and its JSON export key */
    size_t offset;      /* of its double in tb_stats */
} tb_stat_column;
extern const tb_stat_column tb_stat_columns[];
extern const size_t tb_n_stat_columns;

/* ----------------------------------------------------------- sample and request rows */

/* How a column's value is taken from its record (store.c). */
typedef enum tb_store_col_kind {
    TB_COL_I64,     /* int64_t */
    TB_COL_I64_OPT, /* int64_t; < 0: NULL */
    TB_COL_I64_POS, /* int64_t; <= 0: NULL */
    TB_COL_I32_OPT, /* int32_t; < 0: NULL */
    TB_COL_U32,     /* uint32_t */
    TB_COL_U32_OPT, /* uint32_t; 0: NULL */
    TB_COL_U32_KNOWN, /* uint32_t; TB_UNKNOWN_COUNT: NULL */
    TB_COL_U64,     /* uint64_t */
    TB_COL_INT,     /* int */
    TB_COL_REAL,    /* double; not finite: NULL */
    TB_COL_TEXT,    /* char *; NULL: NULL */
    TB_COL_HASH,    /* uint64_t as 16 hex digits; 0: NULL */
    TB_COL_SPECIAL, /* computed by store.c from the row's context */
} tb_store_col_kind;

/* A column of table sample (a tb_sample_record) or request (a
 * tb_request_record), after its parent's id: store.c writes every row of
 * these tables, and the JSON export (reader.h) carries those with an
 * export key, in this order. A new column is a migration, its record
 * field and what fills it, and a row here. */
typedef struct tb_store_column {
    const char *column;
    tb_store_col_kind kind;
    size_t offset;          /* of its field in the record */
    const char *export_key; /* its key in the JSON export; NULL: not exported */
    int export_json;        /* exported as JSON (json(column)), not text */
} tb_store_column;
extern const tb_store_column tb_sample_columns[], tb_request_columns[];
extern const size_t tb_n_sample_columns, tb_n_request_columns;

/* ----------------------------------------------------------- writing */

/* Each writer returns 0 (or a row id), or -1 with *err malloc'd, naming
 * what it was storing ("storing backend a failed: UNIQUE constraint
 * failed: ...") and with nothing of that write left in the database.
 * A writer of several rows (a case, the prompts, the judge's scores)
 * writes them in a transaction of its own (BEGIN IMMEDIATE ... COMMIT)
 * when the connection has none open, and as a savepoint inside the
 * caller's when it has one (tb_store_txn_begin): then nothing is durable
 * before the caller commits, and the caller's rollback undoes it. */

/* A transaction of several writes, all or nothing (the shard join: a
 * joined session with every case, shard_join.h), nested the same way: a
 * savepoint inside a transaction already open. */
typedef struct tb_store_txn {
    int nested; /* a savepoint of an open transaction */
} tb_store_txn;
/* 0, or -1 with *err malloc'd ("cannot start a transaction: ..."). */
int tb_store_txn_begin(tb_store *st, tb_store_txn *t, char **err);
/* Commit (ok) or roll back (!ok; err may be NULL) what t began. 0 when
 * committed; -1 when rolled back, with *err malloc'd when a commit
 * failed. */
int tb_store_txn_end(tb_store *st, const tb_store_txn *t, int ok, char **err);

/* Row id of the machine (inserted when its fingerprint is new), or -1. */
int64_t tb_store_machine(tb_store *st, const tb_machine_info *m, char **err);

typedef struct tb_session_info {
    int64_t machine_id;
    const tb_suite *suite;
    const char *command_line;
    /* The resolved configuration and its sha256 (tb_plan.config_json,
     * plan.h); NULL: not stored. */
    const char *config_json, *config_sha256;
} tb_session_info;

/* New session in state 'running'; returns its id or -1. */
int64_t tb_store_session_begin(tb_store *st, const tb_session_info *si, char **err);
/* A session's clock and, for a shard of a run split over machines
 * (`run --shard K/N --start-at TIME`), its share (migration 9). */
typedef struct tb_session_shard {
    uint32_t shard_index, shard_count; /* shard_count 0: not a shard */
    const char *start_at;              /* UTC ISO 8601, or NULL */
    int64_t clock_offset_ns;           /* CLOCK_REALTIME - CLOCK_MONOTONIC */
    int64_t start_late_ns;             /* its start after start_at; < 0:
                                          not started yet (NULL) */
} tb_session_shard;
int tb_store_session_shard(tb_store *st, int64_t session, const tb_session_shard *sh, char **err);

/* status: "completed", "interrupted" or "failed". No such session is an
 * error. */
int tb_store_session_end(tb_store *st, int64_t session, const char *status, char **err);

/* End a session 'failed' with why it stopped early (session.error,
 * migration 13): a case the database refused. */
int tb_store_session_fail(tb_store *st, int64_t session, const char *error, char **err);

/* How long each write waits for another process's lock before it fails
 * ("database is locked"): wait_ms (<= 0: the default, 10 s). After 1 s of
 * waiting, on_wait(ctx, wait_ms), if given, hears of it once (until the
 * next call). A writer's transaction takes the lock at its start. */
typedef void (*tb_store_wait_fn)(void *ctx, int64_t wait_ms);
void tb_store_set_lock_wait(tb_store *st, int64_t wait_ms, tb_store_wait_fn on_wait, void *ctx);

/* Backend row for plan backend `pb`; returns its id or -1. */
int64_t tb_store_backend(tb_store *st, int64_t session, const tb_plan_backend *pb, char **err);
/* The prompt set's items (plan->n_prompts of them) and its path and hash,
 * with the session, in one transaction; nothing without a prompt set. */
int tb_store_prompts(tb_store *st, int64_t session, const tb_plan *plan, char **err);
/* A load search (core/search.h): its row, begun with status "running"
 * before its runs (which point at it: tb_case_record.search_id); its
 * id, or -1. limits_json: what it looks for. */
int64_t tb_store_search_begin(tb_store *st, int64_t session, int64_t backend_id, size_t ordinal, const char *kind,
                              const char *limits_json, char **err);
/* How it ended (search.status): "done" (a sweep that ran every rate),
 * "found", "above", "below" (docs/METRICS.md, "Load searches"),
 * "failed" (with error), "interrupted"; rates NaN: unknown. */
typedef struct tb_search_result {
    const char *status;
    double sync_rate, max_rate; /* achieved requests/s of the two bounds */
    double slo_rate;            /* slo_max_rate; NaN: none */
    char *error;
} tb_search_result;
int tb_store_search_end(tb_store *st, int64_t id, const tb_search_result *r, char **err);
/* Probe `ordinal` of search `id` has no verdict (search_pass NULL): it
 * was cut off (Ctrl-C, SIGTERM) before it had figures. 0, or -1 with
 * *err. */
int tb_store_search_no_verdict(tb_store *st, int64_t id, size_t ordinal, char **err);

/* The backend's describe() text (stored as JSON, or wrapped when it is
 * not JSON). No such backend row is an error. */
int tb_store_backend_info(tb_store *st, int64_t backend_id, const char *info_json, char **err);

/* Write the case with its samples, requests and metrics in one
 * transaction. Returns the case id, or -1 with *err (nothing written). */
int64_t tb_store_case(tb_store *st, const tb_case_record *rec, char **err);

/* The run's secret values (tb_plan_secrets; borrowed until the store is
 * closed or they are set again): every free text the store writes from
 * then on (case, request and search errors, output texts, the suite text
 * and its sha256, the command line, telemetry series) is redacted with
 * them by tb_redact (util/redact.h), URL credentials too, also with none. */
void tb_store_set_secrets(tb_store *st, const char *const *secrets, size_t n);

/* ----------------------------------------------------------- copying rows */

/* A writer of rows of one table given its columns by name: how `db
 * merge` (merge.c) copies another database's rows, with their ids
 * remapped, without SQL of its own. On any connection to a migrated
 * database; the caller holds the transaction. */
typedef struct tb_store_rows tb_store_rows;

/* "name" with its quotes doubled: a table or column name in SQL text.
 * malloc'd. */
char *tb_store_quote_ident(const char *name);

/* 0, or -1 with *err (malloc'd: SQLite's message; the table cannot take
 * such rows). */
int tb_store_rows_open(sqlite3 *db, const char *table, char *const *cols, size_t n_cols, tb_store_rows **out,
                       char **err);
/* Column i of the next row: a value as read elsewhere, or an id (a
 * foreign key remapped). */
void tb_store_rows_value(tb_store_rows *w, size_t i, sqlite3_value *v);
void tb_store_rows_id(tb_store_rows *w, size_t i, int64_t id);
/* Insert the row bound (then cleared): its row id, or -1 with *err
 * (malloc'd: SQLite's message). */
int64_t tb_store_rows_insert(tb_store_rows *w, char **err);
void tb_store_rows_close(tb_store_rows *w);

/* Delete session `id` with every row of it (ON DELETE CASCADE). 0, or -1
 * with *err (malloc'd: SQLite's message). */
int tb_store_delete_session(sqlite3 *db, int64_t id, char **err);

/* ----------------------------------------------------------- the judge */

/* A completed answer of a prompt-set request (status ok, with an item
 * and a text). */
typedef struct tb_stored_answer {
    int64_t request_id, case_id;
    int32_t prompt_idx;
    int scored;  /* counted in the case's quality metrics */
    char *text;
} tb_stored_answer;

/* The session's answers in case order, then request id. 0, or -1 with
 * *err (malloc'd): a read error is an error, never the end of the rows. */
int tb_store_answers(tb_store *st, int64_t session, tb_stored_answer **out, size_t *n, char **err);
void tb_stored_answers_free(tb_stored_answer *a, size_t n);

/* One answer's judge scores (nats per token, and exp of it). */
typedef struct tb_judge_score {
    int64_t request_id;
    double nll, ppl;
} tb_judge_score;

/* The judge's scores and, per case, its judge_ppl metric row (replacing
 * one stored before), in one transaction. 0, or -1 with *err (nothing
 * written). */
int tb_store_judge(tb_store *st, const tb_judge_score *scores, size_t n, const int64_t *case_ids,
                   const tb_metric_record *case_metrics, size_t n_cases, char **err);

#endif
