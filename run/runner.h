/* runner.h — runs a plan: one worker process per backend (worker.h), a
 * deadline per load and per case, every finished case stored at once.
 *
 * A worker that crashes (signal or unexpected exit), overruns its deadline
 * (killed with SIGKILL) or is killed for memory fails the case in flight
 * with the reason; the next case of that backend gets a fresh worker. Ctrl-C
 * (SIGINT) or SIGTERM stops after the case in flight (5 s grace, then it is
 * killed and recorded as interrupted); finished cases stay stored. */
#ifndef TB_RUNNER_H
#define TB_RUNNER_H

#include "plan.h"
#include "store.h"

typedef enum tb_run_outcome {
    TB_RUN_COMPLETED = 0,   /* every case ran (some may have failed) */
    TB_RUN_INTERRUPTED = 1, /* stopped by a signal */
    TB_RUN_STORE_FAILED = 2 /* the database refused a write */
} tb_run_outcome;

typedef struct tb_run_summary {
    size_t ok, failed, skipped;
    size_t degraded; /* ok cases with more failed requests than max_error_rate */
    size_t unstored; /* cases the database refused (then the run stops) */
    char *store_error; /* the first such refusal, in words (malloc'd), or NULL */
} tb_run_summary;

/* Wait for --start-at (CLOCK_REALTIME at_ns) under the run's signal
 * handlers: ready(ctx), if given, is called once they are in place (to
 * announce the wait). 0 when the time came (*late_ns: how late), 1 when
 * SIGINT or SIGTERM ended the wait. */
int tb_runner_wait_start(int64_t at_ns, void (*ready)(void *ctx), void *ctx, int64_t *late_ns);

/* Run every case of `plan`, storing into session `session_id`;
 * backend_ids[i] is the stored row of plan->backends[i]. A case whose
 * every request failed is failed (tb_case_all_failed); one whose failed
 * requests exceed the fraction max_error_rate is counted degraded. */
tb_run_outcome tb_runner_run(tb_plan *plan, tb_store *store, int64_t session_id,
                             const int64_t *backend_ids, double max_error_rate, tb_run_summary *summary);

#endif
