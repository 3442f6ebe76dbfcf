/* worker_client.h — the parent's side of the worker protocol (wire.h), the
 * one place that drives a backend's worker process for `run` (cases),
 * the judge pass and `serve` (live batches).
 *
 * A client owns one worker at a time: start() forks it and waits for its
 * probe, then requests go out and answers come back under the deadlines
 * of the suite (load_timeout for probe() and create(), case_timeout for
 * what follows a load). Every way an exchange can end is a tb_wc_result;
 * whenever it is not TB_WC_OK or TB_WC_REFUSED the worker is gone
 * (killed, or reaped after it died) and the next start() makes a fresh
 * one. `why` strings are malloc'd, say what happened in words a user
 * reads, and belong to the caller. */
#ifndef TB_WORKER_CLIENT_H
#define TB_WORKER_CLIENT_H

#include <stdint.h>

#include "plan.h"
#include "wire.h"
#include "worker_proc.h"

/* After a stop is asked (Ctrl-C, SIGTERM, QUIT), how long a worker may
 * take to finish before it is killed. */
#define TB_WORKER_GRACE_NS (5LL * 1000000000LL)

typedef enum tb_wc_result {
    TB_WC_OK = 0,      /* the expected answer came; in *frame when there is one */
    TB_WC_REFUSED,     /* the backend answered with a failure status (probe:
                          cannot run here; load: create() failed; case: the
                          worker's CASE_ERROR); the worker is still running,
                          except after a refused probe */
    TB_WC_TIMEOUT,     /* the deadline passed; the worker was killed */
    TB_WC_INTERRUPTED, /* *interrupted became nonzero; the worker is still
                          running (tb_wc_cancel() or tb_wc_kill() next) */
    TB_WC_DIED,        /* the worker ended (pipe closed, or it could not be
                          written to); reaped, why says how it ended */
    TB_WC_PROTOCOL     /* a message out of turn or malformed; killed */
} tb_wc_result;

typedef struct tb_worker_client {
    const tb_plan *plan;
    size_t backend;            /* plan->backends[backend] */
    volatile int *interrupted; /* may be NULL */
    tb_worker_proc proc;
    tb_wire_reader rd;
    int64_t load_timeout_ns, case_timeout_ns;
} tb_worker_client;

/* A client for plan->backends[backend], with no worker yet. */
void tb_wc_init(tb_worker_client *wc, const tb_plan *plan, size_t backend, volatile int *interrupted);

/* Relay the stderr of the workers this client starts from now on through
 * on_log(ctx, line), one line at a time, whenever the client waits for
 * them (and the last lines when one ends), instead of letting them write
 * to the terminal themselves: `run` prints them without breaking its
 * progress bar (progress.h). */
void tb_wc_set_log(tb_worker_client *wc, void (*on_log)(void *ctx, const char *line), void *ctx);
/* Stops the worker (tb_wc_stop) and frees the client's buffers. */
void tb_wc_free(tb_worker_client *wc);

/* Is a worker running? */
int tb_wc_running(const tb_worker_client *wc);

/* Fork a worker and wait for its probe() within load_timeout. REFUSED:
 * the backend cannot run on this host (why: its reason; worker gone). */
tb_wc_result tb_wc_start(tb_worker_client *wc, char **why);

/* Send one request (TB_MSG_CASE, CASE_LOAD, LOAD, JUDGE, GENERATE,
 * STEP_OPEN, STEP; wire.h). DIED when the worker cannot be written to. */
tb_wc_result tb_wc_send(tb_worker_client *wc, uint32_t type, const void *payload, size_t len, char **why);

/* Wait for the LOADED answer to a CASE, CASE_LOAD, LOAD or JUDGE request
 * within load_timeout. OK: *reused tells whether the context was kept, and
 * *info (may be NULL; malloc'd, NULL when reused) is the backend's
 * describe() JSON. REFUSED: create() failed, why is its message. */
tb_wc_result tb_wc_await_loaded(tb_worker_client *wc, int *reused, char **info, char **why);

/* Wait, within case_timeout of `since_ns`, for the next frame of a
 * request already loaded. OK: *frame is one of the `n_expected` types
 * (valid until the next call). A CASE_ERROR frame is REFUSED with its
 * message; any other type is PROTOCOL. */
tb_wc_result tb_wc_await(tb_worker_client *wc, int64_t since_ns, const uint32_t *expected, size_t n_expected,
                         tb_wire_frame *frame, char **why);

/* After INTERRUPTED: SIGTERM the worker (its plugin's cancelled() turns
 * true) and give it TB_WORKER_GRACE_NS to send the frame of type `type`.
 * OK: it came, in *frame, and the worker still runs; otherwise the
 * worker is killed and the result is INTERRUPTED. */
tb_wc_result tb_wc_cancel(tb_worker_client *wc, uint32_t type, tb_wire_frame *frame);

/* Ask the worker to quit (destroy() runs), wait TB_WORKER_GRACE_NS for it,
 * then kill it. Nothing when none runs. */
void tb_wc_stop(tb_worker_client *wc);

/* SIGKILL and reap; nothing when none runs. */
void tb_wc_kill(tb_worker_client *wc);

#endif
