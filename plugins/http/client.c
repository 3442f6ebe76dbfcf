/* client.c — see client.h. */
#define _GNU_SOURCE
#include "client.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "sse.h"

#define MAX_BODY ((size_t)64 << 20) /* default bound of a response, bytes */
#define ERR_BODY ((size_t)512)      /* kept of an error response */
#define POLL_MS 50                  /* cancellation is checked this often */

/* One request of the run. */
typedef struct xfer {
    tb_http_client *c;
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
    char errbuf[CURL_ERROR_SIZE];
} xfer;

struct tb_http_client {
    const tb_host *host;
    int has_emit_output;
    CURLM *multi;
    int tfd; /* timerfd: the next open-loop send */
    xfer *x; /* the last run's requests (results point into them) */
    size_t n_x;
    CURL **pool; /* idle easy handles */
    size_t n_pool, cap_pool;
    int64_t max_lag;
};

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
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->res->error, sizeof x->res->error, fmt, ap);
    va_end(ap);
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
    c->multi = curl_multi_init();
    c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!c->multi || c->tfd < 0) {
        snprintf(err, err_size, "cannot start the event loop (curl_multi_init or timerfd_create failed)");
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
    for (size_t i = 0; i < c->n_pool; i++)
        curl_easy_cleanup(c->pool[i]);
    free(c->pool);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    if (c->tfd >= 0)
        close(c->tfd);
    free(c);
}

int64_t tb_http_client_max_lag(const tb_http_client *c)
{
    return c->max_lag;
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
            const tb_host *h = x->c->host;
            if (x->c->has_emit_output)
                h->emit_output(h, x->idx, 1, x->now, NULL, ch.text, ch.text_len);
            else
                h->emit(h, x->idx, 1, x->now);
        }
        if (implausible_usage(x, &ch)) {
            stop = 1;
            break;
        }
        if (ch.completion_tokens >= 0)
            x->res->usage_completion_tokens = ch.completion_tokens;
        if (ch.prompt_tokens >= 0)
            x->res->usage_prompt_tokens = ch.prompt_tokens;
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
        case CURLE_OPERATION_TIMEDOUT: {
            curl_off_t connected = 0;
            curl_easy_getinfo(x->easy, CURLINFO_CONNECT_TIME_T, &connected);
            if (connected == 0)
                fail(x, TB_ERR_TIMEOUT, "connect: %s", why);
            else
                fail(x, TB_ERR_TIMEOUT, "timeout: %s", why);
            return;
        }
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
        char msg[96];
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
        if (!x->done_seen && (pending || !x->finished))
            fail(x, TB_ERR_IO, "dropped: the stream ended %s",
                 pending ? "in the middle of an event" : "without [DONE] or a finish_reason");
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

/* ------------------------------------------------------ the loop */

static CURL *easy_get(tb_http_client *c)
{
    if (c->n_pool)
        return c->pool[--c->n_pool];
    return curl_easy_init();
}

static void easy_put(tb_http_client *c, CURL *e)
{
    if (c->n_pool == c->cap_pool) {
        size_t cap = c->cap_pool ? c->cap_pool * 2 : 16;
        CURL **p = realloc(c->pool, cap * sizeof *p);
        if (!p) {
            curl_easy_cleanup(e);
            return;
        }
        c->pool = p;
        c->cap_pool = cap;
    }
    c->pool[c->n_pool++] = e;
}

static int start(tb_http_client *c, const tb_http_target *t, xfer *x, const char *body, int64_t t_submit)
{
    CURL *e = easy_get(c);
    if (!e)
        return -1;
    curl_easy_reset(e);
    x->easy = e;
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
    x->res->t_sent_ns = c->host->now_ns(c->host);
    if (curl_multi_add_handle(c->multi, e) != CURLM_OK) {
        easy_put(c, e);
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

tb_status tb_http_client_run(tb_http_client *c, const tb_http_target *t, uint32_t n, char *const *bodies,
                             const int64_t *offsets, uint32_t max_inflight, tb_http_result *results)
{
    const tb_host *h = c->host;
    free_xfers(c);
    c->x = calloc(n ? n : 1, sizeof *c->x);
    if (!c->x)
        return TB_ERR_NO_MEMORY;
    c->n_x = n;
    c->max_lag = 0;
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
        x->res->text = "";
    }
    if (!offsets && max_inflight < 1)
        max_inflight = 1;
    uint32_t cap = max_inflight ? max_inflight : UINT32_MAX;
    uint32_t next = 0, inflight = 0, finished = 0, n_send = n;
    int64_t t0 = h->now_ns(h);
    tb_status status = TB_OK;

    while (finished < n) {
        if (h->cancelled(h)) {
            status = TB_ERR_CANCELLED;
            break;
        }
        int64_t now = h->now_ns(h);
        if (next > 0 && t->send_until_ns && now >= t->send_until_ns) {
            if (inflight == 0)
                break; /* a duration ended the load: the rest is not sent */
            n_send = next;
        }
        while (next < n_send && inflight < cap && (!offsets || t0 + offsets[next] <= now)) {
            xfer *x = &c->x[next];
            int64_t due = offsets ? t0 + offsets[next] : now;
            if (start(c, t, x, bodies[next], due) != 0) {
                x->res->t_submit_ns = x->res->t_done_ns = due;
                fail(x, TB_ERR_NO_MEMORY, "cannot start a transfer (out of memory)");
                finished++;
            } else {
                inflight++;
                if (offsets && x->res->t_sent_ns - due > c->max_lag)
                    c->max_lag = x->res->t_sent_ns - due;
            }
            next++;
        }
        int running = 0;
        curl_multi_perform(c->multi, &running);
        int progressed = 0, left;
        CURLMsg *m;
        while ((m = curl_multi_info_read(c->multi, &left))) {
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
            curl_multi_remove_handle(c->multi, e);
            easy_put(c, e);
            x->easy = NULL;
            inflight--;
            finished++;
            progressed = 1;
        }
        if (finished >= n || (finished >= next && next == n_send))
            break;
        if (progressed && next < n_send && !offsets)
            continue; /* closed loop: send the next one now */
        int64_t due = offsets && next < n_send && inflight < cap ? t0 + offsets[next] : 0;
        arm_timer(c->tfd, due);
        struct curl_waitfd wfd = {.fd = c->tfd, .events = CURL_WAIT_POLLIN};
        curl_multi_poll(c->multi, &wfd, 1, POLL_MS, NULL);
        if (wfd.revents) {
            uint64_t ticks;
            if (read(c->tfd, &ticks, sizeof ticks) < 0) {
                /* nothing to drain: a spurious wake-up */
            }
        }
    }
    arm_timer(c->tfd, 0);
    if (status != TB_OK) {
        int64_t now = h->now_ns(h);
        for (uint32_t i = 0; i < n; i++) {
            xfer *x = &c->x[i];
            if (x->easy) {
                curl_multi_remove_handle(c->multi, x->easy);
                easy_put(c, x->easy);
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
