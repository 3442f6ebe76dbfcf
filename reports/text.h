/* text.h — terminal reports read back from the database. */
#ifndef TB_REPORT_TEXT_H
#define TB_REPORT_TEXT_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

/* "last" (or NULL), a session id, or a uuid prefix → session id; -1 with
 * *err (malloc'd) when there is no such session. */
int64_t tb_report_resolve_session(sqlite3 *db, const char *spec, char **err);

/* Sessions, newest first (limit <= 0: all). */
int tb_report_sessions(sqlite3 *db, int limit, FILE *out);

/* One session: conditions, every case, backends side by side, warnings. */
int tb_report_show(sqlite3 *db, int64_t session, FILE *out);

#endif
