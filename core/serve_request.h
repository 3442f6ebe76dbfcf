/* serve_request.h — the body of a POST to `tokbench serve` (serve.h):
 * /v1/completions or /v1/chat/completions, parsed into what the server
 * needs. A function of the bytes alone (no server, no libmicrohttpd), so
 * tests/fuzz/fuzz_serve_request.c drives exactly the server's parser.
 *
 *   completions  {"prompt": "..." | ["..."], ...}
 *   chat         {"messages": [{"content": "..." | [{"text": "..."}, ...]}, ...], ...}
 *   both         "max_tokens" (else "max_completion_tokens"): an integer in
 *                [1, 1000000], 16 when absent or null; "n": 1 only;
 *                "stream": true; "stream_options": {"include_usage": true}
 *
 * Other fields (model, temperature, ...) are ignored. */
#ifndef TB_SERVE_REQUEST_H
#define TB_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_serve_request {
    char *prompt;        /* malloc'd; chat: the messages' contents, one per line (no chat template) */
    uint32_t max_tokens; /* [1, 1000000] */
    int stream, include_usage;
} tb_serve_request;

/* Parse body[n] (need not be NUL-terminated): NULL and *r filled (free
 * r->prompt), or what is wrong, for a 400 response, and *r zeroed. The
 * body must be one JSON object, with nothing but whitespace after it. */
const char *tb_serve_request_parse(const char *body, size_t n, int chat, tb_serve_request *r);

#endif
