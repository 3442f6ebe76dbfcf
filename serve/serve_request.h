/* serve_request.h — the body of a POST to `tokbench serve` (serve.h):
 * /v1/completions or /v1/chat/completions, parsed into what the server
 * needs. A function of the bytes alone (no server, no libmicrohttpd), so
 * tests/fuzz/fuzz_serve_request.c drives exactly the server's parser.
 *
 * Every field is either used, accepted at a value that asks for nothing
 * the server does not do anyway, or refused with the field's name: no
 * field is silently ignored. null is the same as absent, everywhere.
 *
 *   completions  "prompt": a string, or an array of one string
 *   chat         "messages": a non-empty array of objects with "role"
 *                (system, user or assistant) and "content" (a string, or
 *                an array of {"type": "text", "text": ...} parts); "name"
 *                is allowed and, as in the chat templates, not rendered
 *   both, used   "model": a string (the server checks it); "max_tokens"
 *                (else "max_completion_tokens"): an integer in [1, 1000000],
 *                16 when absent; "stream": a boolean; "stream_options":
 *                {"include_usage": a boolean}; "stop": a non-empty string
 *                without U+0000 or an array of at most 4 of them; "seed":
 *                an integer;
 *                "temperature": a number in [0, 100]; "top_p": a number in
 *                (0, 1]; "top_k": an integer in [-1, 1000000000], -1 or
 *                0 off (vLLM's convention);
 *                "n": 1; "user": a string (nothing to do with the answer)
 *   both, only   "logprobs" false (completions: absent), "top_logprobs" 0,
 *   at neutral   "echo" false, "best_of" 1, "suffix" "",
 *   values       "presence_penalty" 0, "frequency_penalty" 0,
 *                "logit_bias" {}
 *   anything else is refused. Whether the backend can honour
 *   temperature, top_p and top_k is the server's check (serve_http.c). */
#ifndef TB_SERVE_REQUEST_H
#define TB_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#define TB_SERVE_MAX_STOP 4

/* One chat message. */
typedef struct tb_chat_msg {
    char *role;    /* "system", "user" or "assistant" */
    char *content; /* its text (parts concatenated) */
} tb_chat_msg;

typedef struct tb_serve_request {
    char *prompt;           /* completions: malloc'd; chat: NULL */
    tb_chat_msg *messages;  /* chat: n_messages >= 1; completions: NULL */
    size_t n_messages;
    char *model;            /* NULL when absent */
    uint32_t max_tokens;    /* [1, 1000000] */
    int stream, include_usage;
    char *stop[TB_SERVE_MAX_STOP]; /* non-empty strings */
    uint32_t n_stop;
    int has_seed;
    uint64_t seed;          /* the integer as two's complement */
    int has_temperature, has_top_p, has_top_k;
    double temperature, top_p;
    uint32_t top_k;         /* 0: off (-1 in the request) */
} tb_serve_request;

/* What is wrong with a body, for a 400 response. */
typedef struct tb_serve_error {
    char message[256];
    char param[64]; /* the field named ("messages[2].role"), "" for the body itself */
} tb_serve_error;

/* Parse body[n] (need not be NUL-terminated): 0 and *r filled (free with
 * tb_serve_request_free), or -1 with *e filled and *r zeroed. The body
 * must be one JSON object, with nothing but whitespace after it. */
int tb_serve_request_parse(const char *body, size_t n, int chat, tb_serve_request *r, tb_serve_error *e);
void tb_serve_request_free(tb_serve_request *r);

#endif
