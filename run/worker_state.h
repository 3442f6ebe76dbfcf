/* worker_state.h — the worker process's one state (tb_worker), shared by
 * the worker's files, and what every one of them reads of a plugin's
 * answers: its output ids decoded into text. Nothing outside the worker
 * includes it (worker.h is the public side).
 *
 * The worker's files, each calling only those below it:
 *
 *   worker.c        the loop: the message table, probe, create and
 *                   re-create the context, run a case, judge pairs
 *                   (tb_worker_main), and the fork that starts it
 *   worker_host.c   the tb_host table the plugin calls: clock, log,
 *                   emissions into the case's buffer or, serving, out at
 *                   once (worker_serve.c), cancelled()
 *   worker_serve.c  live serving (`tokbench serve`): GENERATE batches and
 *                   stepped sessions, each emission sent with the text it
 *                   adds
 *   worker_state.c  this header's functions
 *   worker_proc.c   the process (proc.h): reaping and killing (the
 *                   parent's side), the child's setup and exit */
#ifndef TB_WORKER_STATE_H
#define TB_WORKER_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "plan.h"
#include "util.h"

/* The emission buffer of the call in flight: appended to by host->emit. */
typedef struct tb_emit_buf {
    tb_emission *ev;
    size_t n, cap;
    size_t limit;     /* emissions this call may make; more is a flood */
    uint64_t flood;   /* emissions past limit, dropped */
    int nomem;        /* the buffer could not grow: emissions dropped, the
                         plugin asked to stop (flood_stop) */
    uint32_t n_requests;
    uint32_t dropped; /* emissions naming a request out of range */
    /* [n_requests] or NULL: the whole messages a plugin gave through
     * tb_host.request_error in the call in progress (malloc'd each) */
    char **errors;
    /* A flood asked the plugin to stop (host->cancelled() is true); unlike
     * the cancel signal, cleared after the call. */
    int flood_stop;
} tb_emit_buf;

/* Live mode's state of one request (worker_serve.c). */
typedef struct tb_live_req tb_live_req;

/* The worker process's one state. */
typedef struct tb_worker {
    const tb_plan *plan;
    const tb_plan_backend *pb;
    const tb_backend_ops *ops;
    tb_host host; /* host_data: this worker */
    tb_emit_buf em;
    void *ctx;
    char *ctx_load_key; /* load key of ctx; NULL: none */
    int fd_out;
    /* live mode: emissions go out at once (serve); NULL otherwise */
    tb_live_req *live;
    const uint32_t *live_map; /* group index -> index in the batch */
    uint32_t live_n;
    /* a stepped session (serve's continuous batching, worker_serve.c):
     * its requests by slot, live[] and live_map sized n_slots; NULL when
     * none is open */
    struct tb_step_slot *slots;
    uint32_t n_slots;
    uint32_t step_case;
    int64_t step_context;       /* describe()'s context_length (0: not said) */
    int step_bos;               /* and whether a prompt gets a BOS */
    uint32_t *step_map;         /* identity: emissions name slots */
    struct tb_step_end *step_ends; /* [n_slots]: step()'s report */
    tb_str step_out;            /* the step's EMIT frames, sent with STEPPED */
    const char **secrets; /* tb_plan_secrets: log lines are redacted */
    size_t n_secrets;
    char *scratch; /* detokenized text */
    size_t scratch_cap;
    int32_t *kept; /* the ids decoded: special tokens left out */
    size_t kept_cap;
} tb_worker;

/* Decodes ids[n] into w->scratch, the text of special tokens (the
 * backend's is_special) left out, as vLLM's skip_special_tokens; returns
 * the length in bytes, or -1. */
int64_t tb_worker_decode_ids(tb_worker *w, const int32_t *ids, size_t n);
/* What a reader sees of request r: its output text, or its ids decoded up
 * to the first EOS (n_answer_tokens), appended to *out. Nothing when the
 * backend gives neither. */
void tb_worker_answer_text(tb_worker *w, const tb_request_result *r, tb_str *out);

#endif
