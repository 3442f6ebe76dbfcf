/* serve_batch.h — the dispatcher of `tokbench serve` and what the files
 * of the server share: the server's context and its requests. Nothing
 * outside serve/ includes it (serve.h is the public side).
 *
 * The files, each calling only those below it:
 *
 *   serve.c         the command: suite, plan and case, the server's
 *                   context, signals, start and stop (tb_serve_main); it
 *                   hands the dispatcher the HTTP side's events
 *   serve_http.c    the libmicrohttpd side: routes, replies and errors,
 *                   the OpenAI JSON of answers, SSE chunks and streaming
 *                   (serve_http.h); it queues requests here
 *   serve_batch.c   the dispatcher: the request queue, batches, the
 *                   worker process that runs them (worker_client.h); it
 *                   tells each request's progress through tb_sreq_events
 *                   and keeps tb_server.stats (GET /metrics)
 *   serve_metrics.c those figures as Prometheus text (a leaf: no server)
 *
 * Threads: libmicrohttpd runs a thread per connection; each parses its
 * request, queues it, and waits on the request's condition variable. The
 * main thread is the dispatcher: it forms batches, talks to the worker
 * process over the wire (wire.h), and turns its live emissions into SSE
 * bytes that the connection threads hand to libmicrohttpd. One mutex,
 * tb_server.mu, guards the queue and every request's progress. */
#ifndef TB_SERVE_BATCH_H
#define TB_SERVE_BATCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "serve_chat.h"
#include "serve_metrics.h"
#include "serve_request.h"
#include "util.h"
#include "wire.h"
#include "worker_client.h"

/* How a failed request ends for its client (serve.h): an HTTP status (or
 * an error event once streaming), a dropped connection, garbage. */
typedef enum tb_sreq_fail {
    TB_SREQ_FAIL_NONE,
    TB_SREQ_FAIL_STATUS,
    TB_SREQ_FAIL_DROP,
    TB_SREQ_FAIL_GARBAGE
} tb_sreq_fail;

/* One HTTP request being served. */
typedef struct tb_sreq {
    struct tb_sreq *next; /* queue link */
    int refs;             /* the connection and the dispatcher */
    pthread_cond_t cv;    /* progress below changed */
    /* the request, fixed once queued */
    char *prompt; /* chat: rendered with the model's template */
    uint32_t max_tokens;
    int chat, stream, include_usage;
    char *stop[TB_SERVE_MAX_STOP];
    uint32_t n_stop;
    int has_seed;  /* a seeded request runs in a batch of its own */
    uint64_t seed;
    uint32_t set;  /* TB_GEN_*: the sampling options it sets */
    double temperature, top_p;
    uint32_t top_k;
    char id[48]; /* "cmpl-N" or "chatcmpl-N" */
    long created; /* Unix time, seconds */
    /* progress, under tb_server.mu */
    int started; /* an emission arrived (the response may begin) */
    int done;
    int running; /* in the backend (a slot or the running batch), counted in
                    stats.running until it ends */
    tb_sreq_fail fail;
    int http_status; /* TB_SREQ_FAIL_STATUS */
    char error[256];
    tb_str text; /* output text so far */
    tb_str out;  /* SSE bytes not yet handed out */
    size_t out_pos;
    uint32_t completion_tokens;
    int64_t prompt_tokens;
    uint32_t finish; /* TB_FINISH_* */
    uint32_t n_emits; /* emissions so far (the dispatcher's count) */
    /* The client is gone (its connection closed, timed out, or it read
     * nothing while TB_SERVE_MAX_PENDING bytes waited): the dispatcher
     * ends the request at its next step (step_leave) or drops it from
     * the queue; gone_why says which, for the log. */
    int gone;
    const char *gone_why;
} tb_sreq;

/* SSE bytes a streamed request may have waiting for its client before
 * the client counts as not reading and is dropped. */
#define TB_SERVE_MAX_PENDING ((size_t)64 << 10)

typedef struct tb_server tb_server;

/* What the dispatcher learns of a request, told to the side that answers
 * its client (serve_http.c's tb_serve_http_events), each under s->mu:
 * they update r and append its SSE bytes to r->out when it streams;
 * waking the connection (r->cv) is the dispatcher's. */
typedef struct tb_sreq_events {
    /* An emission: the response may begin; text[n] (n may be 0) is output. */
    void (*emitted)(const tb_server *s, tb_sreq *r, const char *text, size_t n);
    /* The request failed with `error`, "class: message" (backend.h's
     * classes pick what the client sees) or a bare message (500). */
    void (*failed)(const tb_server *s, tb_sreq *r, const char *error);
    /* The request ended well: q is its answer, text[q->text_len] the
     * whole answer text (what was not streamed yet is sent now). */
    void (*finished)(const tb_server *s, tb_sreq *r, const tb_wire_gen_req *q, const char *text);
} tb_sreq_events;

/* The server's one context: libmicrohttpd's callbacks get it through
 * their closure pointers, the dispatcher as its argument. */
struct tb_server {
    /* fixed while serving */
    tb_plan *plan;
    uint32_t case_index; /* plan->cases[case_index]: the options served */
    const char *label;   /* the backend's label: every answer's "model",
                            the one model name a request may give */
    const tb_backend_ops *ops; /* the plugin: its options, capabilities */
    tb_chat_template chat; /* the model folder's chat template */
    uint32_t max_batch;  /* most requests per generate() call (static) or in
                            a stepped session (continuous), >= 1 */
    int continuous;      /* batching: continuous (iteration-level) when the
                            backend has step ops, else static */
    volatile int *stop;  /* nonzero after SIGINT/SIGTERM (serve.c) */
    int reuse_port;      /* listen with SO_REUSEPORT */
    unsigned client_timeout; /* seconds a client may send or read nothing */
    unsigned max_connections, max_connections_per_ip; /* 0: no per-IP limit */
    const char *api_key; /* NULL, or what `Authorization: Bearer` must say */
    int session_open;    /* the stepped session was opened before listening */
    const tb_sreq_events *events; /* the HTTP side's: set before the
                                     first request is queued */
    /* the dispatcher's own */
    tb_worker_client wc;
    uint64_t batches; /* batches sent; added to the suite's seed */
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t queue_cv; /* a request was queued */
    tb_sreq *head, *tail;    /* requests waiting for a batch, oldest first */
    int stopping;            /* the dispatcher has ended: queue nothing more */
    uint64_t next_id;        /* the last response id's number */
    tb_serve_stats stats;    /* GET /metrics (serve_metrics.h): kept by the
                                dispatcher; `waiting` is counted at the scrape */
};

/* Drop one reference; the last frees r. Under s->mu. */
void tb_sreq_release(tb_sreq *r);
/* Queue r for a batch and wake the dispatcher. Under s->mu, not stopping. */
void tb_serve_enqueue(tb_server *s, tb_sreq *r);
/* Fork the worker, probe, load the served case. 0, or -1 with *why
 * (malloc'd). */
int tb_serve_start_worker(tb_server *s, char **why);
/* Open the stepped session (continuous batching) of s->max_batch slots on
 * a running (or newly started) worker: 1 opened, 0 the backend has no
 * step ops, -1 failed (*why, malloc'd). */
int tb_serve_open_session(tb_server *s, char **why);
/* Mark r's client gone (why: for the log) and wake the dispatcher. Under
 * s->mu. */
void tb_serve_client_gone(tb_server *s, tb_sreq *r, const char *why);
/* The dispatcher's loop: batches until *s->stop, each run to its end. */
void tb_serve_dispatch(tb_server *s);
/* After the dispatcher: stop queueing, wake and let go of the requests
 * still waiting (their connections hold their own references). */
void tb_serve_drain(tb_server *s);

#endif
