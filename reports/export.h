/* export.h — one session as CSV (the summary view's rows, or with
 * `requests` one row per request) or JSON
 * (everything: session, machine, backends, cases with their metrics,
 * samples and requests with every emission). */
#ifndef TB_REPORT_EXPORT_H
#define TB_REPORT_EXPORT_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

/* 0, or -1 with *err (malloc'd) and nothing written: a JSON column of
 * the session that does not hold JSON of its kind (the row named), or
 * any read error. */
int tb_export_csv(sqlite3 *db, int64_t session, int requests, FILE *out, char **err);
int tb_export_json(sqlite3 *db, int64_t session, FILE *out, char **err);

/* `tool` "aiperf" or "vllm": each case's figures under the field names
 * of AIPerf's profile_export_aiperf.json or vLLM's `bench serve
 * --save-result` file (export.c says which, from where): a JSON array
 * of one document per case, or (case_ordinal > 0) that case's document
 * alone; no such case is an error. */
int tb_export_tool(sqlite3 *db, int64_t session, const char *tool, int case_ordinal, FILE *out, char **err);

#endif
