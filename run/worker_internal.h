/* worker_internal.h — what the files of the worker process share; nothing
 * outside them includes it (worker.h is the public side).
 *
 *   worker.c        the loop: probe, create and re-create the context, run
 *                   a case, judge pairs (tb_worker_main)
 *   worker_host.c   the tb_host table the plugin calls: clock, log,
 *                   emissions into the case's buffer, cancelled()
 *   worker_serve.c  live serving (`tokbench serve`): GENERATE batches,
 *                   each emission sent at once with the text it adds
 *   worker_proc.c   the process (proc.h): spawn, reaping, kill (the
 *                   parent's side), and the child's setup (memory limit,
 *                   stdout, signals) and exit */
#ifndef TB_WORKER_INTERNAL_H
#define TB_WORKER_INTERNAL_H

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
    char *scratch; /* detokenized text */
    size_t scratch_cap;
} tb_worker;

/* worker.c */

/* Decodes ids[n] into w->scratch; returns the length in bytes, or -1. */
int64_t tb_worker_decode_ids(tb_worker *w, const int32_t *ids, size_t n);
/* What a reader sees of request r: its output text, or its ids decoded up
 * to the first EOS (n_answer_tokens), appended to *out. Nothing when the
 * backend gives neither. */
void tb_worker_answer_text(tb_worker *w, const tb_request_result *r, tb_str *out);

/* worker_host.c */

/* Fills w->host: the table the plugin's create() receives. */
void tb_worker_host_init(tb_worker *w);

/* worker_serve.c */

/* An emission in live mode (w->live set): sent at once, with the text it
 * adds when the backend gives text or ids it can detokenize. */
void tb_worker_live_emit(tb_worker *w, uint32_t request, uint32_t n_tokens, int64_t t_ns,
                         const int32_t *ids, const char *text, size_t text_len);
/* Answers one TB_MSG_GENERATE message buf[len] with TB_MSG_EMIT messages
 * and then one TB_MSG_GENERATED. */
void tb_worker_serve_generate(tb_worker *w, const char *buf, size_t len);

/* Stepped sessions (continuous batching): TB_MSG_STEP_OPEN answered by
 * STEP_OPENED; TB_MSG_STEP by EMIT frames and STEPPED; close ends the
 * session (also before the context goes). */
typedef struct tb_step_slot tb_step_slot;
void tb_worker_serve_step_open(tb_worker *w, const char *buf, size_t len);
void tb_worker_serve_step(tb_worker *w, const char *buf, size_t len);
void tb_worker_serve_step_close(tb_worker *w);

/* worker_proc.c */

/* The forked child's process, before anything else: the address-space
 * limit (memory_limit_mb > 0, in MiB), stdout onto stderr, SIGINT and
 * SIGTERM as a cancel request, SIGPIPE ignored. 0, or -1 with *err when
 * the limit could not be set (all the rest is done anyway). */
int tb_worker_child_setup(double memory_limit_mb, char **err);
/* Nonzero once SIGINT or SIGTERM arrived. */
int tb_worker_cancel_requested(void);
/* The child's end: the leak check of sanitizer builds, then _exit(0). */
void tb_worker_child_exit(void) __attribute__((noreturn));

#endif
