/* history.h — one metric of one backend across sessions: the same case
 * (equal dimensions and swept options) in every stored session, with the
 * commit, version and machine of each, as text, CSV or a chart. */
#ifndef TB_REPORT_HISTORY_H
#define TB_REPORT_HISTORY_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

#include "stats.h"
#include "svg.h"

typedef struct tb_hpoint {
    int64_t session;
    char *started_at, *commit, *version, *session_status;
    char *host, *hardware, *fingerprint; /* hardware: GPU name, else CPU model */
    char *model, *dtype, *plugin_version;
    char *options_json; /* every option of the backend as it ran */
    char *config_sha256, *config_json; /* the session's resolved
                                          configuration; "" before schema 6 */
    char *case_status; /* "ok", "failed", "skipped" */
    tb_stats st;       /* the metric in that case; n = 0 when not stored */
    /* what load the session measured (tb_rshard_words): a joined
     * session of N shards (-1 of N), a shard not joined in this database
     * (K of N: a share of the load, never compared), else -1, -1 */
    int64_t shard_index, shard_count;
} tb_hpoint;

typedef struct tb_hseries {
    char *key;     /* the case's dimensions, "prompt 32, new 64, batch 1" */
    tb_hpoint *p;  /* by session start time */
    size_t n;
} tb_hseries;

typedef struct tb_history {
    char *backend, *metric, *unit;
    tb_hseries *s; /* one per distinct case, in order of first appearance */
    size_t n;
    char *left_out; /* "#2, #3 (joined in #4)": shard sessions a joined
                       session of this database pools, left out; NULL: none */
} tb_history;

/* Load `metric` of backend `label` over all sessions. filters are
 * "KEY=V1[,V2...]" with KEY a stored dimension (dims.h: prompt_tokens,
 * max_new_tokens, batch, concurrency, request_rate, steps, block_length;
 * value "none" or "-" for not applicable) or a swept option's name. 0; -1 with *err: no
 * such backend or metric (the message lists the known ones), a bad
 * filter, or nothing matching; -2 with *err: the database could not be
 * read (a read error, or a JSON column that does not hold JSON of its
 * kind, tb_store_check_json: the row named), never taken for "nothing
 * matches". */
int tb_history_load(sqlite3 *db, const char *label, const char *metric, char *const *filters, size_t n_filters,
                    tb_history *out, char **err);
void tb_history_free(tb_history *h);

/* Text: one table per case, with the change from the previous session and
 * notes where the machine or the backend's conditions changed. */
void tb_history_print(const tb_history *h, FILE *out);
void tb_history_csv(const tb_history *h, FILE *out);

/* A chart of series[idx[0..n)] over their sessions (x: sessions in time
 * order, labelled by id), median with 95% CI whiskers. NULL when fewer
 * than two sessions have a value. */
tb_chart *tb_history_chart(const tb_history *h, const size_t *idx, size_t n, const char *title);

/* A standalone HTML page with the chart and the table of every series. */
void tb_history_html(const tb_history *h, FILE *out);

#endif
