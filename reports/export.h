/* export.h — one session as CSV (the summary view's rows) or JSON
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
int tb_export_csv(sqlite3 *db, int64_t session, FILE *out, char **err);
int tb_export_json(sqlite3 *db, int64_t session, FILE *out, char **err);

#endif
