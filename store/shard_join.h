/* shard_join.h — the N shard sessions of one run (`tokbench run --shard
 * K/N --start-at TIME` on N machines, shard.h) joined into one session
 * whose statistics pool every request (docs/METRICS.md, "Sharded runs").
 *
 * The shards of a run are the completed sessions with the same suite
 * text (sha256), start time and shard count; a run is joined once all N
 * are present (one each), by `tokbench db merge`, and never twice (the
 * joined session's uuid is derived from the shards' uuids). The joined
 * session copies shard 0's session, backends and cases (a case's
 * concurrency and request_rate summed over the shards); repetition r of
 * a case pools repetition r of every shard: its requests are every
 * shard's, placed on one clock (each host's monotonic times plus its
 * realtime offset: the hosts' realtime clocks are taken to agree, as NTP
 * keeps them), its window from the first submit to the last completion
 * of any shard, its tokens summed. The case's metric rows are statistics
 * over the pooled figures: per-request ones (TTFT, TPOT, E2E, tokens/s)
 * over every shard's requests, as stored; ITL over every request's gaps
 * (from the stored emissions, kept to the microsecond); per-call ones
 * (aggregate tokens/s, requests/s, error rate, goodput) from the pooled
 * windows. Each shard's host, seed and clock offset are kept in the
 * shard table (migration 9). Written here, in the target's transaction:
 * besides the store and merge.c, the one writer of a database. */
#ifndef TB_SHARD_JOIN_H
#define TB_SHARD_JOIN_H

#include <sqlite3.h>
#include <stddef.h>

typedef struct tb_shard_join_result {
    size_t joined;  /* runs joined now */
    char *joined_uuids; /* their sessions' uuids, space-separated
                           (malloc'd; NULL when none) */
    size_t known;   /* runs joined before */
    char *waiting;  /* runs not (yet) joinable, in words (malloc'd; NULL
                       when none): shards missing or duplicated, shards
                       that differ */
} tb_shard_join_result;

/* Join every complete run of db's shard sessions not joined yet, each in
 * one transaction. 0, or -1 with *err (malloc'd; the run at fault is
 * left unjoined, runs joined before it stay). */
int tb_shard_join(sqlite3 *db, tb_shard_join_result *res, char **err);
void tb_shard_join_result_free(tb_shard_join_result *res);

#endif
