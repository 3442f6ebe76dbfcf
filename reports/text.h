/* text.h — terminal reports read back from the database. */
#ifndef TB_REPORT_TEXT_H
#define TB_REPORT_TEXT_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

/* "last" (or NULL: the session started last, as `sessions` lists it
 * first), a session id, or a uuid prefix → session id; -1 with *err
 * (malloc'd) when there is no such session. */
int64_t tb_report_resolve_session(sqlite3 *db, const char *spec, char **err);

/* Sessions, newest first: by start time, then id (a merge appends
 * older sessions with higher ids). limit <= 0: all. */
int tb_report_sessions(sqlite3 *db, int limit, FILE *out);

/* One session: conditions, every case, backends side by side, warnings.
 * The case table leaves out the figure columns no case has a value in,
 * and, to fit `width` characters (0: no limit), the least important
 * ones, saying which below it. */
int tb_report_show(sqlite3 *db, int64_t session, FILE *out, size_t width);

#endif
