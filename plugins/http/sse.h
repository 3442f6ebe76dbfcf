/* sse.h — Server-Sent Events read incrementally, and the OpenAI streaming
 * chunk carried in them.
 *
 * tb_sse implements the text/event-stream parsing rules of the WHATWG
 * HTML standard (section 9.2.6) on bytes as they arrive: a read may end
 * anywhere, inside a line, between the CR and LF of a CRLF, inside the
 * leading UTF-8 BOM. Lines end with LF, CR or CRLF; a line starting with
 * ':' is a comment; "field: value" drops one space after the colon; data
 * lines of one event are joined with '\n'; a blank line dispatches the
 * event when it has data. An event whose line and data grow past a bound
 * is an error (a garbage stream cannot exhaust memory).
 *
 * tb_oai_parse interprets one event's data as an OpenAI-compatible
 * /v1/completions or /v1/chat/completions chunk (or a whole non-streamed
 * response body): "[DONE]", a chunk with text and/or usage, a server
 * error object, or something malformed. */
#ifndef TB_HTTP_SSE_H
#define TB_HTTP_SSE_H

#include <stddef.h>
#include <stdint.h>

/* One dispatched event. Pointers are valid during the handler call only;
 * data is NUL-terminated (data_len excludes the NUL). */
typedef struct tb_sse_event {
    const char *type; /* the "event" field; "" when none (= "message") */
    size_t type_len;
    const char *data; /* data lines joined by '\n' */
    size_t data_len;
    const char *id;   /* the last event id seen so far; "" when none */
    size_t id_len;
} tb_sse_event;

/* Called once per event; a nonzero return stops tb_sse_feed. */
typedef int (*tb_sse_handler)(void *user, const tb_sse_event *ev);

typedef struct tb_sse_buf {
    char *s;
    size_t len, cap;
} tb_sse_buf;

typedef struct tb_sse {
    size_t max_event;  /* bound on one line plus one event's data, bytes */
    tb_sse_buf line;   /* the current line when it spans reads */
    tb_sse_buf data;   /* "value\n" per data line of the current event */
    tb_sse_buf type;   /* the event type of the current event */
    tb_sse_buf id;     /* last event id (kept across events) */
    unsigned bom;      /* leading BOM bytes matched so far; 3 = past it */
    int after_cr;      /* the previous byte ended a line with CR */
    int error;         /* sticky TB_SSE_TOO_LARGE or TB_SSE_NO_MEMORY */
    uint64_t events;   /* events dispatched so far */
} tb_sse;

enum {
    TB_SSE_OK = 0,
    TB_SSE_STOPPED = 1,   /* the handler returned nonzero */
    TB_SSE_TOO_LARGE = 2, /* a line or an event exceeded max_event */
    TB_SSE_NO_MEMORY = 3, /* a buffer could not grow */
};

/* max_event_bytes: 0 means 1 MiB. */
void tb_sse_init(tb_sse *p, size_t max_event_bytes);
void tb_sse_free(tb_sse *p);

/* Feed n bytes; calls h for every event completed by them. Returns
 * TB_SSE_OK, TB_SSE_STOPPED, or TB_SSE_TOO_LARGE or TB_SSE_NO_MEMORY (then
 * and after: the parser is dead). */
int tb_sse_feed(tb_sse *p, const char *buf, size_t n, tb_sse_handler h, void *user);

/* End of stream. Returns 1 when bytes of an unfinished line or event were
 * pending (discarded, as the standard says: a truncated stream), else 0. */
int tb_sse_end(tb_sse *p);

/* ------------------------------------------------ OpenAI chunks */

typedef enum tb_oai_kind {
    TB_OAI_CHUNK = 0,     /* a JSON chunk (text and/or usage, maybe none) */
    TB_OAI_DONE = 1,      /* the "[DONE]" sentinel */
    TB_OAI_ERROR = 2,     /* {"error": ...} from the server */
    TB_OAI_MALFORMED = 3, /* not JSON, or not the expected shape */
} tb_oai_kind;

/* A server's per-request speculative decoding counts (SGLang's
 * meta_info: spec_verify_ct, spec_accept_token_num, spec_draft_token_num,
 * spec_accept_length, spec_accept_histogram; docs/PLUGINS.md), where the
 * chunk has them: -1 (n_hist 0) when absent. */
#define TB_OAI_SPEC_HIST 65 /* accepted counts 0 .. TB_SPEC_MAX_DRAFT */
typedef struct tb_oai_spec {
    int64_t verify_ct;     /* verifications */
    int64_t accept_tokens; /* accepted draft tokens */
    int64_t draft_tokens;  /* drafted tokens */
    double accept_length;  /* completion tokens / verify_ct; NaN: absent */
    uint32_t hist[TB_OAI_SPEC_HIST]; /* verifications that accepted j tokens */
    uint32_t n_hist;
} tb_oai_spec;

typedef struct tb_oai_chunk {
    tb_oai_kind kind;
    /* Output text of choices[0]: "text" (completions), "delta.content"
     * and "delta.reasoning_content" (chat stream), "message.content"
     * (chat, not streamed). NULL when the chunk has none; may be "". */
    const char *text;
    size_t text_len;
    int finished;              /* choices[0].finish_reason is set */
    int64_t completion_tokens; /* usage; -1 when absent or null */
    int64_t prompt_tokens;     /* usage; -1 when absent or null */
    tb_oai_spec spec;          /* meta_info's (top level, choices[0] or
                                  usage); verify_ct -1: none */
    char message[600];         /* ERROR: the server's message (whole:
                                  client.c keeps 512 bytes of an error
                                  body); MALFORMED: what is wrong */
    void *json_;               /* internal */
    char *joined_;             /* internal */
} tb_oai_chunk;

/* The largest usage count a chunk may carry: a request's token count is
 * 32 bits and UINT32_MAX means "unknown" (backend.h). A usage count that
 * is not an integer in [0, TB_OAI_MAX_COUNT] makes the chunk MALFORMED,
 * its message naming the value. */
#define TB_OAI_MAX_COUNT (UINT32_MAX - 1u)

/* Parse data[len] (need not be NUL-terminated). Always fills *out; call
 * tb_oai_chunk_free afterwards. */
tb_oai_kind tb_oai_parse(const char *data, size_t len, tb_oai_chunk *out);
void tb_oai_chunk_free(tb_oai_chunk *c);

#endif
