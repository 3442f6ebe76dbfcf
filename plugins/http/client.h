/* client.h — one load of requests against an OpenAI-compatible endpoint,
 * on libcurl's multi interface: K event loops (K threads; the calling
 * thread runs one of them), each a multi handle whose sockets it watches
 * with epoll (curl_multi_socket_action), every transfer of its share
 * multiplexed on it (no thread per request). Closed loop: any loop with a
 * free slot takes the next request (its share of max_inflight is its
 * slots). Open loop: loop j sends requests j, j + K, j + 2K, ... at their
 * times. With one loop, chunks are emitted as they arrive; with several,
 * each request's chunk times (host clock: one clock for all loops) are
 * kept and emitted by the calling thread once the loops have joined
 * (tb_host.emit may be called from that thread only), request by request.
 *
 * Closed loop: at most max_inflight requests in flight, the next sent as
 * soon as one finishes. Open loop: request i is due at start + offsets[i];
 * its latency counts from that scheduled time even when the client sends
 * it late (a slow client cannot hide a slow server), and max_inflight (if
 * not 0) still caps what is in flight. A timerfd wakes the loop at each
 * due time with nanosecond resolution.
 *
 * Streaming responses go through the SSE parser; each chunk that carries
 * text is one emission (host->emit, 1 token: servers stream a token per
 * chunk; the request's total comes from the server's usage). Every
 * failure is classified (backend.h, "error classes").
 *
 * Nothing a server sends is kept without a bound: a body (streamed or
 * not) past max_response_bytes, one SSE event past 1 MiB, or more text
 * chunks than max_chunks fails its request as malformed_stream, and the
 * transfer is aborted at once (a 100 MB answer costs what the bound
 * lets in, not 100 MB, and floods no emissions into the host). */
#ifndef TB_HTTP_CLIENT_H
#define TB_HTTP_CLIENT_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "sse.h"

#include <tokbench/backend.h>

typedef struct tb_http_client tb_http_client;

typedef struct tb_http_target {
    const char *url;                  /* the endpoint's full URL */
    const struct curl_slist *headers; /* every request's headers */
    const char *const *secrets;       /* values no error may show (the
                                         API key, secret headers):
                                         redacted (util/redact.h) */
    size_t n_secrets;
    int stream;                       /* SSE response expected */
    long connect_timeout_ms, timeout_ms;
    size_t max_response_bytes;        /* a larger body (streamed or not)
                                         fails the request; 0: 64 MiB */
    uint32_t max_chunks;              /* a stream with more text chunks
                                         fails the request; 0: no bound */
    uint32_t max_usage_tokens;        /* a usage.completion_tokens above
                                         it fails the request (a server
                                         cannot produce more than it was
                                         allowed); 0: no bound */
    int64_t send_until_ns;            /* host clock: no request but the
                                         first is started at or after it
                                         (a load bounded by a duration;
                                         what is not sent keeps a zero
                                         result); 0: no bound */
    uint32_t first_request;           /* the call's index of bodies[0]:
                                         emissions name request
                                         first_request + i (a multi-turn
                                         load runs the client once per
                                         wave, each on its slice) */
    int no_emit;                      /* nothing reaches tb_host.emit: a
                                         request outside the measurement
                                         (http.c's preflight) */
} tb_http_target;

typedef struct tb_http_result {
    int64_t t_submit_ns; /* scheduled send time (closed loop: the send) */
    int64_t t_sent_ns;   /* when the client really sent it */
    int64_t t_done_ns;   /* response complete, or the failure noticed */
    tb_status status;
    char error[640];     /* "class: ..." when status != TB_OK: the
                            whole message (a server's, up to 512 bytes
                            of its error body) */
    long http_status;    /* 0: no response */
    uint32_t chunks;     /* streamed chunks with text (= emissions) */
    int64_t usage_completion_tokens; /* the server's usage; -1: none */
    int64_t usage_prompt_tokens;
    tb_oai_spec spec;    /* the server's speculative counts (the last
                            chunk that had some); verify_ct -1: none */
    const char *text;    /* output text; owned by the client until the
                            next run */
    size_t text_len;
} tb_http_result;

/* The client's own CPU over the last run (docs/METRICS.md, client_busy):
 * each loop's thread CPU time (CLOCK_THREAD_CPUTIME_ID) plus its time
 * runnable but waiting for a CPU (/proc/thread-self/schedstat, where the
 * kernel keeps it), and the process's CPU time (getrusage), over the
 * load's wall time (its start to the last loop's end). */
typedef struct tb_http_cpu {
    uint32_t loops;         /* loops run */
    int cores;              /* CPUs this process may run on (affinity) */
    int64_t wall_ns;
    int64_t loops_cpu_ns;   /* the loops' threads, summed */
    int64_t process_cpu_ns; /* every thread of the process */
    double busiest_loop;    /* max over loops of (its CPU + its wait for
                               a CPU) / wall, 0..1 */
    double process_share;   /* process CPU / (wall x cores), 0..1 */
} tb_http_cpu;

/* NULL with a message in err when curl cannot start. */
tb_http_client *tb_http_client_new(const tb_host *host, char *err, size_t err_size);
void tb_http_client_free(tb_http_client *c);

/* Send n requests (bodies[i]: request i's JSON) and wait for all of them,
 * on `loops` event loops (0 or 1: one; never more than n, nor than
 * max_inflight when that is set; at most 256).
 * offsets == NULL: closed loop with max_inflight (>= 1) in flight.
 * Returns TB_OK, or TB_ERR_CANCELLED when host->cancelled() stopped it
 * (unfinished requests then say so), or TB_ERR_NO_MEMORY. */
tb_status tb_http_client_run(tb_http_client *c, const tb_http_target *t, uint32_t n, char *const *bodies,
                             const int64_t *offsets, uint32_t max_inflight, uint32_t loops,
                             tb_http_result *results);

/* The last run's CPU figures. */
const tb_http_cpu *tb_http_client_cpu(const tb_http_client *c);

/* Requests loop j sent in the last run. */
uint32_t tb_http_client_loop_sent(const tb_http_client *c, uint32_t j);

/* Requests loop j sent in the last run. */
uint32_t tb_http_client_loop_sent(const tb_http_client *c, uint32_t j);

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int tb_http_usable_cores(void);

/* Largest lateness of a send against its schedule in the last run, ns,
 * among the sends the client was late with on its own (not held). */
int64_t tb_http_client_max_lag(const tb_http_client *c);

/* Open loop with a cap (max_inflight): the sends of the last run that
 * were due while their loop had its cap in flight, so waited for a slot;
 * *max_lag (may be NULL): the largest lateness among them, ns. */
uint32_t tb_http_client_held(const tb_http_client *c, int64_t *max_lag);

/* The error class of a transfer on easy handle e that ended in
 * CURLE_OPERATION_TIMEDOUT: "timeout" when a connection carried it (a new
 * or a reused one: got_response, the request sent, the transfer begun),
 * "connect" when none was made. For the requests and the preflight
 * alike. */
const char *tb_http_timeout_class(CURL *e, int got_response);

#endif
