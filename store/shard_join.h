/* shard_join.h — the N shard sessions of one run (`tokbench run --shard
 * K/N --start-at TIME` on N machines, shard.h) joined into one session
 * whose statistics pool every request (docs/METRICS.md, "Sharded runs").
 *
 * The shards of a run are the sessions with the same suite text
 * (sha256), start time and shard count; of each shard index the join
 * takes the newest completed session (a shard run again into the same
 * database: the older copies stay stored, not joined, and the join says
 * which it took). A run is joined once every index 0..N-1 has a
 * completed session, by `tokbench db merge`; an index with none is named
 * interrupted (failed, running) when a session of it is stored, else
 * missing. The same sessions are never joined twice (the joined
 * session's uuid is derived from the uuids of the sessions taken). The joined
 * session copies shard 0's session, backends and cases (a case's
 * concurrency and request_rate summed over the shards); repetition r of
 * a case pools repetition r of every shard: its requests are every
 * shard's, placed on one clock (each host's monotonic times plus its
 * realtime offset: the hosts' realtime clocks are taken to agree, as NTP
 * keeps them), its window from the first submit to the last completion
 * of any shard, its tokens summed. The case's samples and metric rows are
 * what tb_case_metrics() (measure/metrics.h) makes of the pooled calls:
 * each request with the figures its shard stored, ITL from the stored
 * emissions (kept to the microsecond), the per-call figures (aggregate
 * tokens/s, requests/s, error rate, goodput) from the pooled windows.
 * Each shard's host, seed and clock offset are kept in the shard table
 * (migration 9).
 *
 * Each run is joined in one transaction (tb_store_txn_begin), written
 * through the store as the runner writes a run: the session (completed,
 * as its shards are), shard and backend rows by the store's row writer,
 * each case by its case writer (tb_store_case, then a savepoint of the
 * join's transaction). A join that fails, or is cut off, leaves no
 * joined session. */
#ifndef TB_SHARD_JOIN_H
#define TB_SHARD_JOIN_H

#include <stddef.h>

#include "store.h"

typedef struct tb_shard_join_result {
    size_t joined;  /* runs joined now */
    char *joined_uuids; /* their sessions' uuids, space-separated
                           (malloc'd; NULL when none) */
    size_t known;   /* runs joined before */
    char *waiting;  /* runs not (yet) joinable, in words (malloc'd; NULL
                       when none): shards missing, interrupted (failed,
                       running), shards that differ */
    char *notes;    /* of the runs joined now, each shard stored more
                       than once completed: which copy was taken, one a
                       line (malloc'd; NULL when none) */
    char *warnings; /* of the runs joined now, those whose shards' measured
                       calls were not simultaneous (the windows joined
                       into one call overlapped less than 90%): which
                       shards lagged, by how much, how late each started,
                       one run a line (malloc'd; NULL when none); each
                       shard's lag is stored (shard.window_lag_ns) */
} tb_shard_join_result;

/* Join every complete run of st's shard sessions not joined yet, each
 * in a transaction of its own (a savepoint, inside one the caller holds:
 * then the caller's commit makes them durable). 0, or -1
 * with *err (malloc'd; the run at fault is left unjoined, runs joined
 * before it stay). */
int tb_shard_join(tb_store *st, tb_shard_join_result *res, char **err);
void tb_shard_join_result_free(tb_shard_join_result *res);

#endif
