/* serve.h — `tokbench serve --backend LABEL SUITE [--port N]`: one backend
 * of a suite served as an OpenAI-compatible endpoint (libmicrohttpd), so
 * the same engine can be measured in-process and over HTTP (the difference
 * is the serving overhead), and so that plugins/http has a real server to
 * be tested against.
 *
 *   POST /v1/completions        {"prompt": ..., "max_tokens": N, "stream": ...}
 *   POST /v1/chat/completions   {"messages": [...], ...}
 *   GET  /v1/models, GET /health
 *   GET  /metrics                Prometheus text (serve_metrics.h); like
 *                                /health, open under --api-key
 *
 * The backend runs in a worker process, as under `tokbench run` (worker.c),
 * with the options of its first case in the suite; a request's sampling
 * fields (temperature, top_p, top_k) replace that case's option values of
 * those names, its seed the call's seed, and fields serve cannot honour
 * are refused (serve_request.h, docs/PLUGINS.md). Chat requests get the
 * model folder's chat template (serve_chat.h).
 *
 * Batching: continuous (iteration-level) when the backend has step ops
 * (backend.h: the ar backend): up to --max-batch requests in flight, a
 * request joins at the next step and leaves at its EOS, limit or stop
 * sequence, each with its own max_tokens, sampling fields and seed.
 * Otherwise (or with --batching static) static: requests that arrive
 * while a batch runs wait for the next one; a batch takes up to
 * --max-batch waiting requests with the same max_tokens and sampling
 * fields (what generate() can do; a seeded request runs alone). The answer is what the in-process path grades:
 * the output up to its EOS (worker.c), cut at a stop sequence, at most
 * max_tokens tokens. Emissions are streamed as SSE
 * chunks as they happen, with their text when the plugin reports it
 * (tb_host.emit_output); otherwise the text follows when the request ends.
 * Failed requests keep their error class (backend.h): http_429 → 429,
 * http_4xx → 400, timeout → 504, other → 500 when nothing was sent yet (an
 * error event in the stream after that), dropped → the connection is
 * closed mid-response, malformed_stream → a garbage chunk.
 *
 * main.c parses the command line (its usage text is there); this module
 * takes the parsed options. */
#ifndef TB_SERVE_H
#define TB_SERVE_H

#include <stdint.h>

typedef struct tb_serve_options {
    const char *suite;     /* the suite file */
    const char *backend;   /* LABEL of its [backend LABEL] section */
    const char *host;      /* IPv4 address to listen on, dotted ("127.0.0.1") */
    uint16_t port;         /* TCP port; 0 picks a free one */
    uint32_t max_batch;    /* most requests in flight in the backend: per
                              generate() call (static) or in the stepped
                              session (continuous); 0: 16 when the backend
                              batches, else 1 */
    int static_batching;   /* 1: static batches even when the backend can
                              step (--batching static, for comparisons) */
    const char *port_file; /* NULL, or where to write the port once listening */
    int reuse_port;        /* SO_REUSEPORT: other servers may share the port */
    /* Hostile clients (docs/RELIABILITY.md, issue 38 item 3). 0: the default. */
    unsigned client_timeout;  /* seconds a client may send or read nothing (30) */
    unsigned max_connections; /* connections open at once (4096) */
    unsigned max_connections_per_ip; /* from one address; 0: no limit */
    const char *api_key;      /* NULL, or the key every request must bear */
    const char *api_key_file; /* NULL, or a file holding it (one line) */
} tb_serve_options;

/* NULL when this build can serve; else why not, a sentence for the user
 * (built without libmicrohttpd). */
const char *tb_serve_unavailable(void);

/* Serve until SIGINT or SIGTERM. Returns the process exit status: 0 after
 * a clean stop, 1 when the backend cannot start (or this build cannot
 * serve), 2 on bad input (the suite, the backend label, the host). */
int tb_serve_main(const tb_serve_options *o);

#endif
