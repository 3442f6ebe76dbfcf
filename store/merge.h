/* merge.h — `tokbench db merge`: import another database's sessions, so a
 * team keeps one history.
 *
 * A session is identified by its uuid: one already present is skipped
 * (merging twice equals merging once), unless the target holds it
 * unfinished ('running' or 'interrupted', by a process that is not
 * running here) and the source has it further along (more cases, or as
 * many and completed): then the target's copy is replaced by the
 * source's, so a session merged while its run went on is completed by a
 * later merge. A session whose run is still writing it (its owner alive
 * on this machine) is not merged: it is named in `running`, for a later
 * merge. The source must read back whole: it must pass SQLite's
 * quick_check and foreign key check, and every JSON column must hold
 * JSON of its kind (tb_store_check_json); a read error anywhere fails
 * the merge. A machine is identified by its
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
    size_t sessions_completed;           /* present unfinished: replaced */
    size_t sessions_running;             /* not merged: their run is alive */
    char *running;                       /* those, in words (malloc'd; NULL
                                            when none) */
    size_t machines_new, machines_known; /* of the imported sessions */
    size_t rows;                         /* every row inserted */
    size_t cases, samples, requests;
} tb_merge_result;

/* Merge the database at `other_path` into `target` (an open, migrated
 * tokbench database). 0, or -1 with *err (malloc'd) naming the file. */
int tb_merge(sqlite3 *target, const char *other_path, tb_merge_result *res, char **err);
void tb_merge_result_free(tb_merge_result *res);

#endif
