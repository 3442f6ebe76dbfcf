/* export.h — one session as CSV (the summary view's rows) or JSON
 * (everything: session, machine, backends, cases with their metrics,
 * samples and requests with every emission). */
#ifndef TB_REPORT_EXPORT_H
#define TB_REPORT_EXPORT_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

int tb_export_csv(sqlite3 *db, int64_t session, FILE *out);
int tb_export_json(sqlite3 *db, int64_t session, FILE *out);

#endif
