/* shard.h — one run's load split over machines: `tokbench run --shard K/N
 * --start-at TIME` runs shard K (0-based) of N of every case, starting at
 * a wall-clock time the N machines share (docs/METRICS.md, "Sharded
 * runs"). The orchestrator (a Kubernetes Indexed Job, a Slurm job array:
 * examples/) starts the N processes; `tokbench db merge` joins their
 * sessions (shard_join.h). */
#ifndef TB_SHARD_H
#define TB_SHARD_H

#include <stdint.h>

#include "plan.h"

/* "K/N" with 0 <= K < N <= 65536 and N >= 2 (one shard is no run to
 * join). 0, or -1 with *err (malloc'd). */
int tb_shard_parse(const char *text, uint32_t *k, uint32_t *n, char **err);

/* A wall-clock time: UTC ISO 8601 ("2026-12-01T19:00:00Z", seconds may
 * have a fraction, "Z" or "+00:00"), or "@SECONDS" since the Unix epoch
 * (a fraction allowed): CLOCK_REALTIME ns. Both forms accept the same
 * range, 1970-01-01T00:00:00Z to 2261-12-31T23:59:59Z (its ns fit an
 * int64); a date or time that does not exist (2026-02-30, 25:00) is
 * refused. 0, or -1 with *err. */
int tb_shard_parse_time(const char *text, int64_t *ns, char **err);

/* ns of CLOCK_REALTIME as "2026-12-01T19:00:00.000Z" (out: 32 bytes). */
void tb_shard_format_time(int64_t ns, char *out);

/* The seed shard k runs with: the suite's for k = 0, another for each
 * other shard (so the shards' prompts and open-loop arrival schedules
 * differ, as the requests of one load do): (seed + k x
 * 0x9E3779B97F4A7C15) mod 2^63, so that it is a seed a suite takes
 * (0 .. 2^63 - 1) and one number wherever it is shown. */
uint64_t tb_shard_seed(uint64_t seed, uint32_t k);

/* Shard k of n of every case to run: requests per call and concurrency
 * split as evenly as integers go (shard k gets floor(x / n), plus one
 * when k < x mod n), request_rate divided by n; the suite's values stay
 * in the case (tb_case.suite_*, which --filter matches). Only a serving
 * backend's cases have a load to split; a case of another backend, a
 * load search (request_rate = sweep | slo: each shard would search on
 * its own), or one whose requests or concurrency are fewer than n (a
 * shard would get none), is an error naming the case; so is a share of
 * any shard (not only k's) that the plugin's validate() refuses (turns =
 * 3 and 4 requests). Nothing is changed on an error. 0, or -1 with *err
 * (every case at fault). */
int tb_shard_apply(tb_plan *plan, uint32_t k, uint32_t n, char **err);

/* Sleep until CLOCK_REALTIME reaches at_ns (at once when it has passed);
 * how late the return is after at_ns, ns (>= 0), or -1 when *stop was
 * set (by a signal handler: the signal ends the sleep). */
int64_t tb_shard_wait(int64_t at_ns, volatile int *stop);

/* CLOCK_REALTIME - CLOCK_MONOTONIC now, ns: adding it to a host
 * monotonic time gives that host's wall-clock time. */
int64_t tb_shard_clock_offset(void);

#endif
