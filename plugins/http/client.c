/* client.c — see client.h. */
#define _GNU_SOURCE
#include "client.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "redact.h"
#include "sse.h"
#include "strmem.h"

#define MAX_BODY ((size_t)64 << 20) /* default bound of a response, bytes */
#define ERR_BODY ((size_t)512)      /* kept of an error response */
#define POLL_MS 50                  /* cancellation is checked this often */
#define MAX_LOOPS 256

typedef struct loop loop;

/* One request of the run. */
typedef struct xfer {
    tb_http_client *c;
    loop *lp;      /* the event loop that runs it */
    CURL *easy;
    uint32_t idx;
    tb_http_result *res;
    int stream;
    tb_sse sse;
    int mode;      /* 0: status not seen yet; 1: 2xx; 2: an error status */
    int done_seen; /* "[DONE]" arrived */
    int finished;  /* a chunk had a finish_reason */
    int failed;    /* a callback classified the failure already */
    size_t bytes;  /* body bytes received so far */
    size_t max_bytes;    /* the bound on them */
    uint32_t max_chunks; /* bound on text chunks; 0: none */
    uint32_t max_usage;  /* bound on usage.completion_tokens; 0: none */
    int64_t now;   /* host clock of the read being parsed */
    tb_sse_buf body; /* non-streamed body, or an error body */
    tb_sse_buf text; /* output text */
    /* With several loops, the chunks' times [n_em] (host clock, ns),
     * emitted by the calling thread once the loops have joined
     * (tb_host.emit may be called from that thread only). */
    int64_t *em_t;
    uint32_t *em_n; /* [n_em]: each chunk's tokens */
    uint32_t n_em, cap_em;
    /* Tokens per chunk (docs/METRICS.md, tokens_per_chunk): while every
     * chunk with text has carried a cumulative usage.completion_tokens
     * (vLLM's and SGLang's stream_options.continuous_usage_stats), a
     * chunk's tokens are its growth over usage_at, the last one seen;
     * once one came without it (usage_gap), 1 a chunk. */
    int64_t usage_at;
    int usage_gap;
    char errbuf[CURL_ERROR_SIZE];
} xfer;

/* One event loop: a thread of its own (the calling thread's when there is
 * one), a multi handle whose sockets it watches with epoll
 * (curl_multi_socket_action), a timerfd for its open-loop sends, its own
 * idle easy handles (so their connections stay with it). */
struct loop {
    tb_http_client *c;
    uint32_t id;
    CURLM *multi;
    int epfd, tfd;
    int64_t curl_due; /* host clock when curl wants its timeout; -1: none */
    CURL **pool;      /* idle easy handles */
    size_t n_pool, cap_pool;
    uint32_t cap, inflight; /* requests this loop may keep in flight; 0: no cap */
    uint32_t next_own;      /* open loop: its next request is id + next_own * K */
    int64_t max_lag;        /* of sends the client was late with on its own */
    int64_t max_held_lag;   /* of sends that waited for a slot under the cap */
    uint32_t held;          /* sends that waited for a slot */
    int64_t freed_ns;       /* when a slot last freed with the cap in flight */
    int64_t cpu_ns, end_ns; /* its thread's CPU time over the run; when it ended */
    int64_t runqueue_ns;    /* its thread's time runnable but not running */
    uint32_t sent;          /* requests it sent in the last run */
    tb_status status;
    pthread_t thread;
    int started;
};

struct tb_http_client {
    const tb_host *host;
    int has_emit_output;
    loop **loops; /* [n_loops], made on first use, kept across runs (each
                     loop stays where it is: curl holds its address) */
    uint32_t n_loops;
    xfer *x; /* the last run's requests (results point into them) */
    size_t n_x;
    int64_t max_lag, max_held_lag;
    uint32_t held;
    tb_http_cpu cpu;
    /* the run in progress, read by every loop */
    const tb_http_target *t;
    char *const *bodies;
    const int64_t *offsets;
    uint32_t n, k;     /* requests; loops in use */
    int64_t t0;        /* the load's start, host clock */
    int defer;         /* emissions wait for the join (k > 1) */
    _Atomic uint32_t next; /* closed loop: the next request to send */
    _Atomic int stop;      /* closed loop: the target's send_until_ns has
                              passed: no loop takes another request */
};

static int loops_reserve(tb_http_client *c, uint32_t k);
static void loop_free(loop *lp);

static int buf_add(tb_sse_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p)
            return -1;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

/* Errors quote what the server sent, which may be anything: keep valid
 * UTF-8, turn control characters and invalid bytes (a sequence cut by
 * the quote's length too) into '?', so the stored reason is text. */
static void make_printable(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        if (*p < 0x20 || *p == 0x7f) {
            *p++ = '?';
            continue;
        }
        if (*p < 0x80) {
            p++;
            continue;
        }
        size_t n = *p >= 0xc2 && *p <= 0xdf ? 2 : *p >= 0xe0 && *p <= 0xef ? 3 : *p >= 0xf0 && *p <= 0xf4 ? 4 : 0;
        size_t k = 1;
        while (k < n && (p[k] & 0xc0) == 0x80)
            k++;
        if (n == 0 || k < n) {
            *p++ = '?';
            continue;
        }
        p += n;
    }
}

static void fail(xfer *x, tb_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(xfer *x, tb_status st, const char *fmt, ...)
{
    if (x->failed)
        return; /* the first cause is the one that counts */
    x->failed = 1;
    x->res->status = st;
    /* whole, then redacted, then cut: a server that echoes the key (a
     * 401 saying "Bearer sk-...") never gets it into the error */
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const tb_http_target *t = x->lp && x->lp->c ? x->lp->c->t : NULL;
    tb_redact_buf(msg, sizeof msg, t ? t->secrets : NULL, t ? t->n_secrets : 0);
    tb_strlcpy(x->res->error, msg, sizeof x->res->error);
    make_printable(x->res->error);
}

tb_http_client *tb_http_client_new(const tb_host *host, char *err, size_t err_size)
{
    static int global_ok;
    if (!global_ok) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            snprintf(err, err_size, "curl_global_init failed");
            return NULL;
        }
        global_ok = 1;
    }
    tb_http_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    c->host = host;
    c->has_emit_output = TB_STRUCT_HAS(host, tb_host, emit_output) && host->emit_output;
    int r = loops_reserve(c, 1);
    if (r != 0) {
        snprintf(err, err_size, r == -2 ? "out of memory"
                                        : "cannot start the event loop (curl_multi_init, epoll or timerfd failed)");
        tb_http_client_free(c);
        return NULL;
    }
    return c;
}

static void free_xfers(tb_http_client *c)
{
    for (size_t i = 0; i < c->n_x; i++) {
        tb_sse_free(&c->x[i].sse);
        free(c->x[i].body.s);
        free(c->x[i].text.s);
        free(c->x[i].em_t);
        free(c->x[i].em_n);
    }
    free(c->x);
    c->x = NULL;
    c->n_x = 0;
}

void tb_http_client_free(tb_http_client *c)
{
    if (!c)
        return;
    free_xfers(c);
    for (uint32_t i = 0; i < c->n_loops; i++) {
        loop_free(c->loops[i]);
        free(c->loops[i]);
    }
    free(c->loops);
    free(c);
}

int64_t tb_http_client_max_lag(const tb_http_client *c)
{
    return c->max_lag;
}

uint32_t tb_http_client_held(const tb_http_client *c, int64_t *max_lag)
{
    if (max_lag)
        *max_lag = c->max_held_lag;
    return c->held;
}

const tb_http_cpu *tb_http_client_cpu(const tb_http_client *c)
{
    return &c->cpu;
}

uint32_t tb_http_client_loop_sent(const tb_http_client *c, uint32_t j)
{
    return j < c->cpu.loops ? c->loops[j]->sent : 0;
}

/* ------------------------------------------------------ callbacks */

/* A chunk's usage count above what the request allows fails it as
 * malformed_stream, naming the value; 1 when it did. */
static int implausible_usage(xfer *x, const tb_oai_chunk *ch)
{
    if (!x->max_usage || ch->completion_tokens <= (int64_t)x->max_usage)
        return 0;
    fail(x, TB_ERR_IO, "malformed_stream: usage.completion_tokens %lld is more than the request allows "
         "(4 x max_tokens + 16 = %u)", (long long)ch->completion_tokens, x->max_usage);
    return 1;
}

static int on_event(void *user, const tb_sse_event *ev)
{
    xfer *x = user;
    if (x->done_seen)
        return 0; /* nothing after [DONE] counts */
    if (ev->type_len == 5 && memcmp(ev->type, "error", 5) == 0) {
        fail(x, TB_ERR_IO, "server_error: error event: %.80s", ev->data);
        return 1;
    }
    tb_oai_chunk ch;
    int stop = 0;
    switch (tb_oai_parse(ev->data, ev->data_len, &ch)) {
    case TB_OAI_DONE:
        x->done_seen = 1;
        break;
    case TB_OAI_CHUNK:
        if (implausible_usage(x, &ch)) { /* before its count is used */
            stop = 1;
            break;
        }
        if (ch.text && ch.text_len) {
            if (buf_add(&x->text, ch.text, ch.text_len) != 0) {
                fail(x, TB_ERR_NO_MEMORY, "out of memory for the output text");
                stop = 1;
                break;
            }
            if (x->max_chunks && x->res->chunks >= x->max_chunks) {
                /* a server that streams far more chunks than the tokens
                 * asked for would flood the host with emissions */
                fail(x, TB_ERR_IO, "malformed_stream: more than %u chunks with text (4 x max_tokens + 16)",
                     x->max_chunks);
                stop = 1;
                break;
            }
            x->res->chunks++;
            uint32_t n_tok = 1;
            if (ch.completion_tokens < 0)
                x->usage_gap = 1;
            else if (!x->usage_gap && ch.completion_tokens > x->usage_at)
                n_tok = (uint32_t)(ch.completion_tokens - x->usage_at); /* <= max_usage: checked above */
            const tb_host *h = x->c->host;
            if (x->c->t->no_emit) {
                /* a request outside the measurement (the preflight) */
            } else if (x->c->defer) {
                if (x->n_em == x->cap_em) {
                    uint32_t cap = x->cap_em ? 2 * x->cap_em : 64;
                    int64_t *p = realloc(x->em_t, cap * sizeof *p);
                    if (p)
                        x->em_t = p;
                    uint32_t *pn = p ? realloc(x->em_n, cap * sizeof *pn) : NULL;
                    if (!pn) {
                        fail(x, TB_ERR_NO_MEMORY, "out of memory for the chunks' times");
                        stop = 1;
                        break;
                    }
                    x->em_n = pn;
                    x->cap_em = cap;
                }
                x->em_n[x->n_em] = n_tok;
                x->em_t[x->n_em++] = x->now;
            } else if (x->c->has_emit_output)
                h->emit_output(h, x->c->t->first_request + x->idx, n_tok, x->now, NULL, ch.text, ch.text_len);
            else
                h->emit(h, x->c->t->first_request + x->idx, n_tok, x->now);
        }
        if (ch.completion_tokens >= 0)
            x->res->usage_completion_tokens = x->usage_at = ch.completion_tokens;
        if (ch.prompt_tokens >= 0)
            x->res->usage_prompt_tokens = ch.prompt_tokens;
        if (ch.spec.verify_ct >= 0)
            x->res->spec = ch.spec;
        x->finished |= ch.finished;
        break;
    case TB_OAI_ERROR:
        fail(x, TB_ERR_IO, "server_error: %s", ch.message);
        stop = 1;
        break;
    case TB_OAI_MALFORMED:
        fail(x, TB_ERR_IO, "malformed_stream: %s: \"%.40s\"", ch.message, ev->data);
        stop = 1;
        break;
    }
    tb_oai_chunk_free(&ch);
    return stop;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *user)
{
    xfer *x = user;
    size_t n = size * nmemb;
    if (x->mode == 0) {
        long code = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        x->res->http_status = code;
        x->mode = code >= 200 && code < 300 ? 1 : 2;
    }
    if (x->mode == 2) { /* keep the start of an error body for the message */
        size_t room = ERR_BODY > x->body.len ? ERR_BODY - x->body.len : 0;
        if (room && buf_add(&x->body, ptr, n < room ? n : room) != 0) {
            fail(x, TB_ERR_NO_MEMORY, "out of memory for the response body");
            return 0;
        }
        return n;
    }
    /* Every body is bounded, streamed or not: a server that answers with
     * 100 MB (or never stops) costs this request, not the process. */
    if (n > x->max_bytes - x->bytes) {
        fail(x, TB_ERR_IO, "malformed_stream: response larger than max_response_mb (%.4g MiB)",
             (double)x->max_bytes / (1 << 20));
        return 0; /* aborts the transfer */
    }
    x->bytes += n;
    if (!x->stream) {
        if (buf_add(&x->body, ptr, n) == 0)
            return n;
        fail(x, TB_ERR_NO_MEMORY, "out of memory for the response body");
        return 0; /* aborts the transfer */
    }
    x->now = x->c->host->now_ns(x->c->host);
    int rc = tb_sse_feed(&x->sse, ptr, n, on_event, x);
    if (rc == TB_SSE_TOO_LARGE)
        fail(x, TB_ERR_IO, "malformed_stream: an SSE event larger than %zu KiB", x->sse.max_event >> 10);
    else if (rc == TB_SSE_NO_MEMORY)
        fail(x, TB_ERR_NO_MEMORY, "out of memory for the event stream");
    return rc == TB_SSE_OK ? n : 0; /* 0 aborts the transfer */
}

/* ------------------------------------------------------ classification */

/* The server's message from an error body: JSON error.message, else the
 * body's start. */
static void error_message(const xfer *x, char *out, size_t size)
{
    const char *b = x->body.s ? x->body.s : "";
    tb_oai_chunk ch;
    const char *m = tb_oai_parse(b, x->body.len, &ch) == TB_OAI_ERROR ? ch.message : b;
    size_t n = strcspn(m, "\r\n");
    if (n >= size)
        n = size - 1;
    memcpy(out, m, n);
    out[n] = '\0';
    tb_oai_chunk_free(&ch);
}

const char *tb_http_timeout_class(CURL *e, int got_response)
{
    /* connect only when no connection carried the request: a reused
     * keep-alive connection has a connect time of 0, so what happened on
     * the wire decides (a response begun, the request sent, the
     * transfer begun). */
    curl_off_t connect_t = 0, pretransfer_t = 0;
    long request_size = 0;
    curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &connect_t);
    curl_easy_getinfo(e, CURLINFO_PRETRANSFER_TIME_T, &pretransfer_t);
    curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &request_size);
    return got_response || connect_t > 0 || pretransfer_t > 0 || request_size > 0 ? "timeout" : "connect";
}

static void classify(xfer *x, CURLcode rc)
{
    tb_http_result *r = x->res;
    if (x->failed)
        return;
    const char *why = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
    if (rc != CURLE_OK) {
        switch (rc) {
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_SSL_CONNECT_ERROR:
            fail(x, TB_ERR_IO, "connect: %s", why);
            return;
        case CURLE_OPERATION_TIMEDOUT:
            fail(x, TB_ERR_TIMEOUT, "%s: %s", tb_http_timeout_class(x->easy, x->bytes > 0 || x->mode != 0), why);
            return;
        case CURLE_UNSUPPORTED_PROTOCOL: /* "Received HTTP/0.9": not HTTP at all */
        case CURLE_WEIRD_SERVER_REPLY:
            fail(x, TB_ERR_IO, "malformed_stream: not an HTTP response: %s", why);
            return;
        case CURLE_PARTIAL_FILE:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_GOT_NOTHING:
            fail(x, TB_ERR_IO, "dropped: %s", why);
            return;
        default:
            fail(x, TB_ERR_IO, "curl error %d: %s", (int)rc, why);
            return;
        }
    }
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    r->http_status = code;
    if (code < 200 || code >= 300) {
        char msg[ERR_BODY + 1]; /* whole: fail() redacts before it cuts */
        error_message(x, msg, sizeof msg);
        const char *cls = code == 429 ? "http_429: " : code >= 500 && code < 600 ? "http_5xx: "
                                                   : code >= 400 && code < 500   ? "http_4xx: "
                                                                                 : "";
        fail(x, TB_ERR_IO, "%sHTTP %ld: %s", cls, code, msg);
        return;
    }
    if (x->stream) {
        int pending = tb_sse_end(&x->sse);
        char *type = NULL;
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &type);
        if (!x->done_seen && type && strncasecmp(type, "text/event-stream", 17) != 0) {
            fail(x, TB_ERR_IO, "malformed_stream: a %s response to a streamed request", type);
            return;
        }
        if (!x->done_seen && x->sse.events == 0 && x->bytes > 0) {
            /* bytes, but not one event in them: garbage, not a cut stream */
            fail(x, TB_ERR_IO, "malformed_stream: %zu bytes of response without one SSE event", x->bytes);
            return;
        }
        /* Without [DONE], a finish_reason is the end: it comes on the
         * answer's last chunk, and the body ended cleanly (a cut one is
         * curl's error above), so the answer is whole. */
        if (!x->done_seen && (pending || !x->finished)) {
            fail(x, TB_ERR_IO, "dropped: the stream ended %s",
                 pending ? "in the middle of an event" : "without [DONE] or a finish_reason");
            return;
        }
        /* Each chunk with text carries one token at least: fewer tokens
         * than such chunks is a count that contradicts the stream. */
        if (r->usage_completion_tokens >= 0 && r->usage_completion_tokens < (int64_t)r->chunks)
            fail(x, TB_ERR_IO,
                 "malformed_stream: usage.completion_tokens %lld is fewer than the %u chunks with text (each carries "
                 "one token at least)",
                 (long long)r->usage_completion_tokens, r->chunks);
        return;
    }
    tb_oai_chunk ch;
    switch (tb_oai_parse(x->body.s ? x->body.s : "", x->body.len, &ch)) {
    case TB_OAI_CHUNK:
        if (ch.text && ch.text_len && buf_add(&x->text, ch.text, ch.text_len) != 0)
            fail(x, TB_ERR_NO_MEMORY, "out of memory for the output text");
        if (implausible_usage(x, &ch))
            break;
        r->usage_completion_tokens = ch.completion_tokens;
        r->usage_prompt_tokens = ch.prompt_tokens;
        r->spec = ch.spec;
        if (!ch.text && !x->failed)
            fail(x, TB_ERR_IO, "malformed_stream: a response without choices[0] text");
        break;
    case TB_OAI_ERROR:
        fail(x, TB_ERR_IO, "server_error: %s", ch.message);
        break;
    case TB_OAI_DONE:
        fail(x, TB_ERR_IO, "malformed_stream: a bare [DONE] as the response");
        break;
    case TB_OAI_MALFORMED:
        fail(x, TB_ERR_IO, "malformed_stream: %s: \"%.40s\"", ch.message, x->body.s ? x->body.s : "");
        break;
    }
    tb_oai_chunk_free(&ch);
}

/* ------------------------------------------------------ the loops */

static CURL *easy_get(loop *lp)
{
    if (lp->n_pool)
        return lp->pool[--lp->n_pool];
    return curl_easy_init();
}

static void easy_put(loop *lp, CURL *e)
{
    if (lp->n_pool == lp->cap_pool) {
        size_t cap = lp->cap_pool ? lp->cap_pool * 2 : 16;
        CURL **p = realloc(lp->pool, cap * sizeof *p);
        if (!p) {
            curl_easy_cleanup(e);
            return;
        }
        lp->pool = p;
        lp->cap_pool = cap;
    }
    lp->pool[lp->n_pool++] = e;
}

/* curl's CURLMOPT_SOCKETFUNCTION: watch (or stop watching) socket s. A
 * socket's assigned pointer says it is in the epoll set already. */
static int on_socket(CURL *e, curl_socket_t s, int what, void *user, void *socketp)
{
    (void)e;
    loop *lp = user;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(lp->epfd, EPOLL_CTL_DEL, s, NULL); /* may be closed already */
        curl_multi_assign(lp->multi, s, NULL);
        return 0;
    }
    struct epoll_event ev = {.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u),
                             .data.fd = s};
    if (epoll_ctl(lp->epfd, socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s, &ev) != 0)
        return -1; /* curl fails the transfer */
    if (!socketp)
        curl_multi_assign(lp->multi, s, lp);
    return 0;
}

/* curl's CURLMOPT_TIMERFUNCTION: when to call it with CURL_SOCKET_TIMEOUT. */
static int on_timer(CURLM *m, long timeout_ms, void *user)
{
    (void)m;
    loop *lp = user;
    lp->curl_due = timeout_ms < 0 ? -1 : lp->c->host->now_ns(lp->c->host) + (int64_t)timeout_ms * 1000000;
    return 0;
}

static void loop_free(loop *lp)
{
    for (size_t i = 0; i < lp->n_pool; i++)
        curl_easy_cleanup(lp->pool[i]);
    free(lp->pool);
    lp->pool = NULL;
    lp->n_pool = lp->cap_pool = 0;
    if (lp->multi)
        curl_multi_cleanup(lp->multi);
    lp->multi = NULL;
    if (lp->epfd >= 0)
        close(lp->epfd);
    if (lp->tfd >= 0)
        close(lp->tfd);
    lp->epfd = lp->tfd = -1;
}

/* Loops 0..k-1 ready; -1 when one cannot be made (those made stay), -2
 * when memory for one ran out. */
static int loops_reserve(tb_http_client *c, uint32_t k)
{
    if (k <= c->n_loops)
        return 0;
    loop **p = realloc(c->loops, k * sizeof *p);
    if (!p)
        return -2;
    c->loops = p;
    for (uint32_t i = c->n_loops; i < k; i++) {
        loop *lp = calloc(1, sizeof *lp);
        if (!lp)
            return -2;
        lp->c = c;
        lp->id = i;
        lp->multi = curl_multi_init();
        lp->epfd = epoll_create1(EPOLL_CLOEXEC);
        lp->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = lp->tfd};
        if (!lp->multi || lp->epfd < 0 || lp->tfd < 0 || epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->tfd, &ev) != 0) {
            loop_free(lp);
            free(lp);
            return -1;
        }
        c->loops[i] = lp;
        curl_multi_setopt(lp->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
        curl_multi_setopt(lp->multi, CURLMOPT_SOCKETDATA, lp);
        curl_multi_setopt(lp->multi, CURLMOPT_TIMERFUNCTION, on_timer);
        curl_multi_setopt(lp->multi, CURLMOPT_TIMERDATA, lp);
        c->n_loops = i + 1;
    }
    return 0;
}

static int start(loop *lp, xfer *x, const char *body, int64_t t_submit)
{
    const tb_http_target *t = lp->c->t;
    CURL *e = easy_get(lp);
    if (!e)
        return -1;
    curl_easy_reset(e);
    x->easy = e;
    x->lp = lp;
    curl_easy_setopt(e, CURLOPT_URL, t->url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, t->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, t->timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    x->res->t_submit_ns = t_submit;
    x->res->t_sent_ns = lp->c->host->now_ns(lp->c->host);
    if (curl_multi_add_handle(lp->multi, e) != CURLM_OK) {
        easy_put(lp, e);
        x->easy = NULL;
        return -1;
    }
    return 0;
}

static void arm_timer(int tfd, int64_t at_ns)
{
    struct itimerspec its = {0};
    if (at_ns > 0) {
        its.it_value.tv_sec = at_ns / 1000000000LL;
        its.it_value.tv_nsec = at_ns % 1000000000LL;
    }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* The next request this loop may send, or n: closed loop, the shared
 * counter (any loop with a free slot takes the next request); open loop,
 * its own share (requests id, id + K, id + 2K, ...: the schedule is
 * sorted, so each share is too). peek: look without taking. */
static uint32_t next_request(loop *lp, int peek)
{
    tb_http_client *c = lp->c;
    if (!c->offsets) {
        if (peek)
            return atomic_load(&c->next) < c->n ? 0 : c->n;
        uint32_t i = atomic_fetch_add(&c->next, 1);
        return i < c->n ? i : c->n;
    }
    uint64_t i = lp->id + (uint64_t)lp->next_own * c->k;
    if (i >= c->n)
        return c->n;
    if (!peek)
        lp->next_own++;
    return (uint32_t)i;
}

/* Send what is due now. */
static void send_due(loop *lp)
{
    tb_http_client *c = lp->c;
    const tb_host *h = c->host;
    int64_t now = h->now_ns(h);
    while (!lp->cap || lp->inflight < lp->cap) {
        /* a load bounded by a duration (closed loop; an open loop's
         * schedule is cut by the caller): no request but the first starts
         * at or after send_until_ns; the requests not taken stay unsent */
        if (!c->offsets && c->t->send_until_ns && now >= c->t->send_until_ns && atomic_load(&c->next) > 0) {
            atomic_store(&c->stop, 1);
            return;
        }
        uint32_t i = next_request(lp, 1);
        if (i >= c->n || (c->offsets && c->t0 + c->offsets[i] > now))
            return;
        i = next_request(lp, 0);
        if (i >= c->n)
            return; /* another loop took the last one */
        xfer *x = &c->x[i];
        int64_t due = c->offsets ? c->t0 + c->offsets[i] : now;
        x->lp = lp;
        if (start(lp, x, c->bodies[i], due) != 0) {
            x->res->t_submit_ns = x->res->t_done_ns = due;
            fail(x, TB_ERR_NO_MEMORY, "cannot start a transfer (out of memory)");
            continue;
        }
        lp->inflight++;
        lp->sent++;
        /* Held: the loop was full when it came due, and a slot freed
         * after that (requests go in order: it waited for that slot). */
        int64_t late = x->res->t_sent_ns - due;
        if (c->offsets && lp->cap && lp->freed_ns > due) {
            lp->held++;
            if (late > lp->max_held_lag)
                lp->max_held_lag = late;
        } else if (c->offsets && late > lp->max_lag) {
            lp->max_lag = late;
        }
    }
}

/* Collect the transfers curl finished. */
static void reap(loop *lp)
{
    const tb_host *h = lp->c->host;
    int left;
    CURLMsg *m;
    while ((m = curl_multi_info_read(lp->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *e = m->easy_handle;
        CURLcode rc = m->data.result;
        char *priv = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
        xfer *x = (xfer *)(void *)priv;
        x->res->t_done_ns = h->now_ns(h);
        classify(x, rc);
        if (!x->failed)
            x->res->status = TB_OK;
        x->res->text = x->text.s ? x->text.s : "";
        x->res->text_len = x->text.len;
        curl_multi_remove_handle(lp->multi, e);
        easy_put(lp, e);
        x->easy = NULL;
        if (lp->cap && lp->inflight == lp->cap)
            lp->freed_ns = x->res->t_done_ns;
        lp->inflight--;
    }
}

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* This thread's time waiting for a CPU while runnable (the kernel's
 * schedstat, ns); -1 when the kernel does not keep it. */
static int64_t thread_runqueue_ns(void)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "re");
    if (!f)
        return -1;
    unsigned long long run, wait;
    int ok = fscanf(f, "%llu %llu", &run, &wait) == 2;
    fclose(f);
    return ok ? (int64_t)wait : -1;
}

/* One loop until its share is done or the host cancels. */
static void *loop_run(void *arg)
{
    loop *lp = arg;
    tb_http_client *c = lp->c;
    const tb_host *h = c->host;
    int64_t cpu0 = thread_cpu_ns(), rq0 = thread_runqueue_ns();
    lp->status = TB_OK;
    lp->sent = 0;
    for (;;) {
        if (h->cancelled(h)) {
            lp->status = TB_ERR_CANCELLED;
            break;
        }
        send_due(lp);
        if (lp->inflight == 0 && (next_request(lp, 1) >= c->n || atomic_load(&c->stop)))
            break;
        int64_t now = h->now_ns(h);
        int running;
        if (lp->curl_due >= 0 && lp->curl_due <= now) {
            lp->curl_due = -1; /* the call may set it again */
            curl_multi_socket_action(lp->multi, CURL_SOCKET_TIMEOUT, 0, &running);
            reap(lp);
            continue;
        }
        /* An open-loop send due later wakes the loop through its timerfd,
         * to the nanosecond; curl's own timeouts need no more than ms. */
        uint32_t i = next_request(lp, 1);
        int64_t due = c->offsets && i < c->n && (!lp->cap || lp->inflight < lp->cap) ? c->t0 + c->offsets[i] : 0;
        arm_timer(lp->tfd, due);
        int wait_ms = POLL_MS;
        if (lp->curl_due >= 0) {
            int64_t ms = (lp->curl_due - now + 999999) / 1000000;
            wait_ms = ms < wait_ms ? (int)ms : wait_ms;
        }
        struct epoll_event ev[64];
        int k = epoll_wait(lp->epfd, ev, 64, wait_ms);
        for (int j = 0; j < k; j++) {
            if (ev[j].data.fd == lp->tfd) {
                uint64_t ticks;
                if (read(lp->tfd, &ticks, sizeof ticks) < 0) {
                    /* nothing to drain: a spurious wake-up */
                }
                continue;
            }
            int flags = (ev[j].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                        (ev[j].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                        (ev[j].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(lp->multi, ev[j].data.fd, flags, &running);
        }
        reap(lp);
    }
    arm_timer(lp->tfd, 0);
    lp->cpu_ns = thread_cpu_ns() - cpu0;
    int64_t rq1 = rq0 >= 0 ? thread_runqueue_ns() : -1;
    lp->runqueue_ns = rq1 >= rq0 ? rq1 - rq0 : 0;
    lp->end_ns = h->now_ns(h);
    return NULL;
}

/* Process CPU time (every thread's, the finished ones' included), ns. */
static int64_t process_cpu_ns(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
           ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

int tb_http_usable_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

tb_status tb_http_client_run(tb_http_client *c, const tb_http_target *t, uint32_t n, char *const *bodies,
                             const int64_t *offsets, uint32_t max_inflight, uint32_t loops,
                             tb_http_result *results)
{
    const tb_host *h = c->host;
    free_xfers(c);
    memset(&c->cpu, 0, sizeof c->cpu);
    c->max_lag = c->max_held_lag = 0;
    c->held = 0;
    c->x = calloc(n ? n : 1, sizeof *c->x);
    if (!c->x)
        return TB_ERR_NO_MEMORY;
    c->n_x = n;
    for (uint32_t i = 0; i < n; i++) {
        xfer *x = &c->x[i];
        x->c = c;
        x->idx = i;
        x->res = &results[i];
        x->stream = t->stream;
        x->max_bytes = t->max_response_bytes ? t->max_response_bytes : MAX_BODY;
        x->max_chunks = t->max_chunks;
        x->max_usage = t->max_usage_tokens;
        tb_sse_init(&x->sse, 0);
        memset(x->res, 0, sizeof *x->res);
        x->res->usage_completion_tokens = x->res->usage_prompt_tokens = -1;
        x->res->spec.verify_ct = x->res->spec.accept_tokens = x->res->spec.draft_tokens = -1;
        x->res->text = "";
    }
    if (!offsets && max_inflight < 1)
        max_inflight = 1;
    /* K loops, never more than the requests, nor (closed loop) than the
     * requests in flight; each loop holds its share of max_inflight. */
    uint32_t k = loops ? loops : 1;
    if (k > MAX_LOOPS)
        k = MAX_LOOPS;
    if (k > n)
        k = n ? n : 1;
    if (max_inflight && k > max_inflight)
        k = max_inflight;
    if (loops_reserve(c, k) != 0)
        return TB_ERR_NO_MEMORY;
    c->t = t;
    c->bodies = bodies;
    c->offsets = offsets;
    c->n = n;
    c->k = k;
    c->defer = k > 1;
    atomic_store(&c->next, 0);
    atomic_store(&c->stop, 0);
    for (uint32_t j = 0; j < k; j++) {
        loop *lp = c->loops[j];
        lp->cap = max_inflight ? max_inflight / k + (j < max_inflight % k) : 0;
        lp->inflight = 0;
        lp->next_own = 0;
        lp->max_lag = lp->max_held_lag = 0;
        lp->held = 0;
        lp->freed_ns = INT64_MIN;
        lp->curl_due = -1;
        lp->started = 0;
    }
    int64_t pcpu0 = process_cpu_ns();
    c->t0 = h->now_ns(h);
    /* Loops 1.. on threads of their own, loop 0 on this one. A thread
     * that cannot start leaves its share to the others (closed loop) or
     * is run here after loop 0 (open loop: late, and its lag says so). */
    for (uint32_t j = 1; j < k; j++)
        c->loops[j]->started = pthread_create(&c->loops[j]->thread, NULL, loop_run, c->loops[j]) == 0;
    loop_run(c->loops[0]);
    tb_status status = c->loops[0]->status;
    for (uint32_t j = 1; j < k; j++) {
        loop *lp = c->loops[j];
        if (lp->started)
            pthread_join(lp->thread, NULL);
        else
            loop_run(lp);
        if (lp->status != TB_OK)
            status = lp->status;
    }
    int64_t wall = 0;
    for (uint32_t j = 0; j < k; j++) {
        loop *lp = c->loops[j];
        if (lp->max_lag > c->max_lag)
            c->max_lag = lp->max_lag;
        if (lp->max_held_lag > c->max_held_lag)
            c->max_held_lag = lp->max_held_lag;
        c->held += lp->held;
        if (lp->end_ns - c->t0 > wall)
            wall = lp->end_ns - c->t0;
    }
    /* The client's own CPU (docs/METRICS.md, client_busy). */
    c->cpu.loops = k;
    c->cpu.wall_ns = wall;
    c->cpu.process_cpu_ns = process_cpu_ns() - pcpu0;
    c->cpu.cores = tb_http_usable_cores();
    for (uint32_t j = 0; j < k; j++) {
        c->cpu.loops_cpu_ns += c->loops[j]->cpu_ns;
        /* a loop wants a CPU while it runs and while it waits for one */
        double busy = wall > 0 ? (double)(c->loops[j]->cpu_ns + c->loops[j]->runqueue_ns) / (double)wall : 0;
        if (busy > c->cpu.busiest_loop)
            c->cpu.busiest_loop = busy;
    }
    c->cpu.process_share = wall > 0 ? (double)c->cpu.process_cpu_ns / ((double)wall * c->cpu.cores) : 0;
    if (c->defer && !t->no_emit) /* one timeline: every request's chunks, by the one clock */
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t e = 0; e < c->x[i].n_em; e++)
                h->emit(h, t->first_request + i, c->x[i].em_n[e], c->x[i].em_t[e]);
    if (status != TB_OK) {
        int64_t now = h->now_ns(h);
        for (uint32_t i = 0; i < n; i++) {
            xfer *x = &c->x[i];
            if (x->easy) {
                curl_multi_remove_handle(x->lp->multi, x->easy);
                easy_put(x->lp, x->easy);
                x->easy = NULL;
            } else if (x->res->t_done_ns) {
                continue; /* finished before the stop */
            }
            if (!x->res->t_submit_ns)
                x->res->t_submit_ns = now;
            x->res->t_done_ns = now;
            fail(x, TB_ERR_CANCELLED, "cancelled before the response completed");
            x->res->text = x->text.s ? x->text.s : "";
            x->res->text_len = x->text.len;
        }
    }
    return status;
}
