/* merge.h — `tokbench db merge`: import another database's sessions, so a
 * team keeps one history.
 *
 * A session is identified by its uuid: one already present is skipped
 * (merging twice equals merging once). A machine is identified by its
 * fingerprint: an imported session points at the existing row when there
 * is one. Every other row is copied with its ids remapped (backend, case,
 * sample, request, metric, and any table a later migration adds that
 * hangs off a session through foreign keys), all in one transaction: a
 * failure leaves the target as it was. The other database is opened read
 * only; an older one is migrated in a copy in memory first; a newer one is
 * refused. */
#ifndef TB_MERGE_H
#define TB_MERGE_H

#include <sqlite3.h>
#include <stddef.h>

typedef struct tb_merge_result {
    size_t sessions_new, sessions_known; /* imported; already present */
    size_t machines_new, machines_known; /* of the imported sessions */
    size_t rows;                         /* every row inserted */
    size_t cases, samples, requests;
} tb_merge_result;

/* Merge the database at `other_path` into `target` (an open, migrated
 * tokbench database). 0, or -1 with *err (malloc'd) naming the file. */
int tb_merge(sqlite3 *target, const char *other_path, tb_merge_result *res, char **err);

#endif
