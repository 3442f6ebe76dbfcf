/* serve_http.c — the libmicrohttpd side of `tokbench serve` (serve.h,
 * serve_http.h): routes, replies and errors, the OpenAI JSON of
 * completions and chat completions (usage, finish reasons), and the SSE
 * chunks a streamed answer is made of. Connection threads run here; the
 * dispatcher (serve_batch.c) reports each request's progress through
 * tb_serve_http_events (emitted, failed, finished), which append the
 * bytes the connection then hands out. */
#define _GNU_SOURCE
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "serve_http.h"
#include "serve_request.h"

#define MAX_BODY ((size_t)16 << 20) /* request body, bytes */
/* The kernel's send buffer of a connection, fixed (no autotuning to
 * megabytes): with TB_SERVE_MAX_PENDING, what a client that stops
 * reading can make the server hold. */
#define SEND_BUFFER (64 << 10)

/* ------------------------------------------------------ JSON text */

/* Append s[n] as a JSON string; invalid UTF-8 becomes U+FFFD (JSON carries
 * text, not bytes: random-weight models emit arbitrary bytes). */
static void json_str(tb_str *b, const char *s, size_t n)
{
    tb_str_append(b, "\"");
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            switch (c) {
            case '"': tb_str_append(b, "\\\""); break;
            case '\\': tb_str_append(b, "\\\\"); break;
            case '\n': tb_str_append(b, "\\n"); break;
            case '\r': tb_str_append(b, "\\r"); break;
            case '\t': tb_str_append(b, "\\t"); break;
            default:
                if (c < 0x20)
                    tb_str_appendf(b, "\\u%04x", c);
                else
                    tb_str_appendn(b, (const char *)&c, 1);
            }
            i++;
            continue;
        }
        size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
        int ok = len && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
        if (ok && len == 3) { /* no overlongs, no surrogates */
            unsigned char c1 = (unsigned char)s[i + 1];
            ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
        } else if (ok && len == 4) {
            unsigned char c1 = (unsigned char)s[i + 1];
            ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
        }
        if (ok) {
            tb_str_appendn(b, s + i, len);
            i += len;
        } else {
            tb_str_append(b, "\xEF\xBF\xBD");
            i++;
        }
    }
    tb_str_append(b, "\"");
}

/* A chunk's opening, up to its "model" (the served label). */
static void chunk_head(const tb_server *s, tb_str *b, const tb_sreq *r)
{
    tb_str_appendf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", r->id,
                   r->chat ? "chat.completion.chunk" : "text_completion", r->created);
    json_str(b, s->label, strlen(s->label));
}

/* One streamed chunk: text (may be empty) and an optional finish reason. */
static void sse_chunk(const tb_server *s, tb_sreq *r, const char *text, size_t n, const char *finish, int role)
{
    tb_str *b = &r->out;
    chunk_head(s, b, r);
    if (r->chat) {
        tb_str_append(b, ",\"choices\":[{\"index\":0,\"delta\":{");
        if (role)
            tb_str_append(b, "\"role\":\"assistant\",\"content\":\"\"");
        else if (!finish) {
            tb_str_append(b, "\"content\":");
            json_str(b, text, n);
        }
        tb_str_append(b, "}");
    } else {
        tb_str_append(b, ",\"choices\":[{\"index\":0,\"text\":");
        json_str(b, text, n);
    }
    if (finish)
        tb_str_appendf(b, ",\"logprobs\":null,\"finish_reason\":\"%s\"}]}\n\n", finish);
    else
        tb_str_append(b, ",\"logprobs\":null,\"finish_reason\":null}]}\n\n");
}

static void usage_json(tb_str *b, const tb_sreq *r)
{
    tb_str_appendf(b, "\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%u,\"total_tokens\":%lld}",
                   (long long)r->prompt_tokens, r->completion_tokens,
                   (long long)r->prompt_tokens + r->completion_tokens);
}

static const char *finish_reason(const tb_sreq *r)
{
    if (r->finish == TB_FINISH_STOP || r->finish == TB_FINISH_LENGTH)
        return r->finish == TB_FINISH_STOP ? "stop" : "length";
    return r->completion_tokens >= r->max_tokens ? "length" : "stop";
}

static int64_t count_words(const char *s)
{
    int64_t n = 0;
    int in = 0;
    for (; *s; s++) {
        int space = *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v';
        n += !space && !in;
        in = !space;
    }
    return n;
}

/* ------------------------------------------------------ what the dispatcher learns */

/* The first emission (or a successful end): the stream can begin. */
static void begin(const tb_server *s, tb_sreq *r)
{
    if (r->started)
        return;
    r->started = 1;
    if (r->stream && r->chat)
        sse_chunk(s, r, "", 0, NULL, 1);
}

static void emitted(const tb_server *s, tb_sreq *r, const char *text, size_t n)
{
    if (r->gone)
        return;
    begin(s, r);
    if (n) {
        tb_str_appendn(&r->text, text, n);
        if (r->stream)
            sse_chunk(s, r, text, n, NULL, 0);
    }
    if (r->stream && r->out.len - r->out_pos > TB_SERVE_MAX_PENDING) {
        /* A client that does not read: dropped, not buffered for. The
         * dispatcher ends the request at its next step. */
        r->gone = 1;
        r->gone_why = "the client read nothing while 64 KiB of its stream waited";
        tb_str_free(&r->out);
        r->out_pos = 0;
    }
}

/* An error class picks what the client sees (serve.h). */
static void failed(const tb_server *s, tb_sreq *r, const char *error)
{
    snprintf(r->error, sizeof r->error, "%s", error);
    size_t n = strspn(error, "abcdefghijklmnopqrstuvwxyz0123456789_");
    const char *cls = n && strncmp(error + n, ": ", 2) == 0 ? error : "";
    size_t cl = cls[0] ? n : 0;
#define IS(word) (cl == strlen(word) && strncmp(cls, word, cl) == 0)
    if (IS("dropped")) {
        r->fail = TB_SREQ_FAIL_DROP;
        return;
    }
    if (IS("malformed_stream")) {
        r->fail = TB_SREQ_FAIL_GARBAGE;
        if (r->stream) {
            begin(s, r);
            tb_str_append(&r->out, "data: {\"choices\": [{\"text\": this is not JSON\n\ndata: [DONE]\n\n");
        }
        return;
    }
    int status = IS("http_429") ? 429 : IS("http_4xx") ? 400 : IS("timeout") ? 504 : 500;
    if (cl == 8 && strncmp(cls, "http_", 5) == 0 && cls[5] >= '4' && cls[5] <= '5' && cls[6] >= '0' &&
        cls[6] <= '9' && cls[7] >= '0' && cls[7] <= '9')
        status = atoi(cls + 5); /* http_503: that status */
#undef IS
    r->fail = TB_SREQ_FAIL_STATUS;
    r->http_status = status;
    if (r->stream && r->started) { /* too late for a status: an error event */
        tb_str_append(&r->out, "data: {\"error\":{\"message\":");
        json_str(&r->out, error, strlen(error));
        tb_str_appendf(&r->out, ",\"type\":\"server_error\",\"code\":%d}}\n\ndata: [DONE]\n\n", status);
    }
}

static void finished(const tb_server *s, tb_sreq *r, const tb_wire_gen_req *q, const char *text)
{
    if (r->gone)
        return;
    /* The answer is the worker's final text. Streamed: what it adds to
     * what was sent (all of it when the plugin emitted counts only). */
    size_t have = r->text.len;
    const char *rest = "";
    size_t rest_len = 0;
    if (q->text_len >= have && (have == 0 || memcmp(text, r->text.s, have) == 0)) {
        rest = text + have;
        rest_len = q->text_len - have;
    }
    begin(s, r);
    if (!r->stream) {
        r->text.len = 0;
        tb_str_appendn(&r->text, text, q->text_len);
    } else if (rest_len) {
        tb_str_appendn(&r->text, rest, rest_len);
        sse_chunk(s, r, rest, rest_len, NULL, 0);
    }
    r->completion_tokens = q->completion_tokens;
    r->finish = q->finish;
    r->prompt_tokens = q->prompt_tokens >= 0 ? q->prompt_tokens : count_words(r->prompt);
    if (r->stream) {
        sse_chunk(s, r, "", 0, finish_reason(r), 0);
        if (r->include_usage) {
            chunk_head(s, &r->out, r);
            tb_str_append(&r->out, ",\"choices\":[],");
            usage_json(&r->out, r);
            tb_str_append(&r->out, "}\n\n");
        }
        tb_str_append(&r->out, "data: [DONE]\n\n");
    }
}

const tb_sreq_events tb_serve_http_events = {.emitted = emitted, .failed = failed, .finished = finished};

/* ------------------------------------------------------ HTTP side */

/* One connection's request, libmicrohttpd's per-connection pointer (and
 * the closure of its streamed response). */
typedef struct conn {
    tb_server *s;
    struct MHD_Connection *c;
    tb_str body;
    int too_large;
    tb_sreq *r; /* once queued: the connection's reference */
} conn;

/* While the server, not the client, is slow (the request waits for the
 * backend), the connection's inactivity timeout is off; it is set again
 * before MHD sends or reads. */
static void client_clock(conn *k, int on)
{
    MHD_set_connection_option(k->c, MHD_CONNECTION_OPTION_TIMEOUT, on ? k->s->client_timeout : 0u);
}

/* Whether the client closed its side of the connection (a request waits
 * for its answer: nothing more is expected from it). */
static int client_closed(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *type, const char *body, size_t n)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 429)
        MHD_add_response_header(resp, "Retry-After", "1");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* An OpenAI error object; param: the field at fault or NULL; code: a
 * word ("model_not_found") or NULL for the status. */
static enum MHD_Result reply_error_at(struct MHD_Connection *c, int status, const char *type, const char *msg,
                                      const char *param, const char *code)
{
    tb_str b = {0};
    tb_str_append(&b, "{\"error\":{\"message\":");
    json_str(&b, msg, strlen(msg));
    tb_str_appendf(&b, ",\"type\":\"%s\",\"param\":", type);
    if (param && *param)
        json_str(&b, param, strlen(param));
    else
        tb_str_append(&b, "null");
    if (code)
        tb_str_appendf(&b, ",\"code\":\"%s\"}}", code);
    else
        tb_str_appendf(&b, ",\"code\":%d}}", status);
    enum MHD_Result r = reply(c, status, "application/json", b.s, b.len);
    tb_str_free(&b);
    return r;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, int status, const char *type, const char *msg)
{
    return reply_error_at(c, status, type, msg, NULL, NULL);
}

/* Whether the backend can honour a sampling field: an option of that name
 * (not one that shapes the load), the value within its range; without
 * one, only `neutral` (what it does anyway: a backend that cannot sample
 * is greedy). NULL, or why not in why[]. */
static const char *check_sampling(const tb_server *s, const char *name, double v, double neutral, char *why,
                                  size_t why_size)
{
    const tb_option_decl *d = NULL;
    for (uint32_t i = 0; i < s->ops->n_options && s->ops->options; i++)
        if (strcmp(s->ops->options[i].name, name) == 0)
            d = &s->ops->options[i];
    if (d && (d->type == TB_OPT_FLOAT || d->type == TB_OPT_INT) && !(d->flags & TB_OPTF_LOAD)) {
        if (d->min <= d->max && (v < d->min || v > d->max))
            snprintf(why, why_size, "\"%s\" %g is outside [%g, %g], what backend %s (plugin %s) takes", name, v,
                     d->min, d->max, s->label, s->ops->name);
        else
            return NULL;
        return why;
    }
    if (v == neutral)
        return NULL;
    snprintf(why, why_size, "\"%s\": backend %s (plugin %s) has no %s option it can set per request; only %g", name,
             s->label, s->ops->name, name, neutral);
    return why;
}

/* A streamed response's bytes, as the dispatcher makes them. */
static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    conn *k = cls;
    tb_server *s = k->s;
    tb_sreq *r = k->r;
    pthread_mutex_lock(&s->mu);
    if (r->out_pos == r->out.len && !r->done && !r->gone && !s->stopping) {
        client_clock(k, 0);
        while (r->out_pos == r->out.len && !r->done && !r->gone && !s->stopping)
            pthread_cond_wait(&r->cv, &s->mu);
        client_clock(k, 1);
    }
    ssize_t n;
    if (r->gone) {
        n = MHD_CONTENT_READER_END_WITH_ERROR; /* closes the connection */
    } else if (r->out_pos < r->out.len) {
        size_t k = r->out.len - r->out_pos < max ? r->out.len - r->out_pos : max;
        memcpy(buf, r->out.s + r->out_pos, k);
        r->out_pos += k;
        if (r->out_pos == r->out.len)
            r->out.len = r->out_pos = 0;
        n = (ssize_t)k;
    } else if (s->stopping || r->fail == TB_SREQ_FAIL_DROP) {
        n = MHD_CONTENT_READER_END_WITH_ERROR; /* closes the connection */
    } else {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* POST /v1/completions (chat 0) or /v1/chat/completions (chat 1): queue
 * the request, wait until it ends or starts streaming, answer. */
static enum MHD_Result serve_completion(tb_server *s, struct MHD_Connection *c, conn *k, int chat)
{
    tb_serve_request q;
    tb_serve_error e;
    if (tb_serve_request_parse(k->body.s ? k->body.s : "", k->body.len, chat, &q, &e) != 0)
        return reply_error_at(c, 400, "invalid_request_error", e.message, e.param, NULL);
    char why[512];
    if (q.model && strcmp(q.model, s->label) != 0) {
        snprintf(why, sizeof why, "The model `%.200s` does not exist: this server serves `%s`", q.model, s->label);
        tb_serve_request_free(&q);
        return reply_error_at(c, 404, "invalid_request_error", why, "model", "model_not_found");
    }
    const char *field = NULL, *bad = NULL;
    if (q.has_temperature && (bad = check_sampling(s, "temperature", q.temperature, 0, why, sizeof why)))
        field = "temperature";
    else if (q.has_top_p && (bad = check_sampling(s, "top_p", q.top_p, 1, why, sizeof why)))
        field = "top_p";
    else if (q.has_top_k && (bad = check_sampling(s, "top_k", q.top_k, 0, why, sizeof why)))
        field = "top_k";
    char *prompt = q.prompt;
    q.prompt = NULL;
    if (!bad && chat && !(prompt = tb_chat_render(&s->chat, q.messages, q.n_messages, why, sizeof why))) {
        bad = why;
        field = "messages";
    }
    if (bad) {
        free(prompt);
        tb_serve_request_free(&q);
        return reply_error_at(c, 400, "invalid_request_error", bad, field, NULL);
    }
    tb_sreq *r = tb_xcalloc(1, sizeof *r);
    r->prompt = prompt;
    r->max_tokens = q.max_tokens;
    r->chat = chat;
    r->stream = q.stream;
    r->include_usage = q.include_usage;
    for (uint32_t i = 0; i < q.n_stop; i++) {
        r->stop[i] = q.stop[i];
        q.stop[i] = NULL;
    }
    r->n_stop = q.n_stop;
    q.n_stop = 0;
    r->has_seed = q.has_seed;
    r->seed = q.seed;
    r->set = (q.has_temperature ? TB_GEN_TEMPERATURE : 0) | (q.has_top_p ? TB_GEN_TOP_P : 0) |
             (q.has_top_k ? TB_GEN_TOP_K : 0);
    r->top_k = q.top_k;
    r->temperature = q.temperature;
    r->top_p = q.top_p;
    tb_serve_request_free(&q);
    pthread_cond_init(&r->cv, NULL);
    r->created = (long)time(NULL);
    r->refs = 2; /* this connection, the dispatcher */
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        r->refs = 1;
        k->r = r; /* released by on_completed */
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
    snprintf(r->id, sizeof r->id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)++s->next_id);
    k->r = r;
    tb_serve_enqueue(s, r);
    client_clock(k, 0);
    while (!s->stopping && !r->done && !r->gone && !(r->stream && r->started)) {
        /* woken by progress, or each second to see whether the client left */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        if (pthread_cond_timedwait(&r->cv, &s->mu, &ts) != 0 && client_closed(c))
            tb_serve_client_gone(s, r, "the client closed its connection");
    }
    client_clock(k, 1);
    if (r->gone) { /* nobody to answer */
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
    int stopping = s->stopping, done = r->done, streaming = r->stream && r->started;
    tb_sreq_fail fail = r->fail;
    int status = r->http_status;
    char error[256];
    snprintf(error, sizeof error, "%s", r->error);
    tb_str body = {0};
    if (done && !fail && !r->stream) {
        tb_str_appendf(&body, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", r->id,
                       chat ? "chat.completion" : "text_completion", r->created);
        json_str(&body, s->label, strlen(s->label));
        if (chat) {
            tb_str_append(&body, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
            json_str(&body, r->text.s ? r->text.s : "", r->text.len);
            tb_str_append(&body, "}");
        } else {
            tb_str_append(&body, ",\"choices\":[{\"index\":0,\"text\":");
            json_str(&body, r->text.s ? r->text.s : "", r->text.len);
        }
        tb_str_appendf(&body, ",\"logprobs\":null,\"finish_reason\":\"%s\"}],", finish_reason(r));
        usage_json(&body, r);
        tb_str_append(&body, "}");
    }
    pthread_mutex_unlock(&s->mu);

    if (stopping)
        return MHD_NO;
    if (fail == TB_SREQ_FAIL_DROP && !streaming)
        return MHD_NO; /* close without a response */
    if (fail == TB_SREQ_FAIL_GARBAGE && !r->stream)
        return reply(c, 200, "application/json", "{\"choices\": [garbage", 21);
    if (fail == TB_SREQ_FAIL_STATUS && !streaming) {
        size_t cl = strspn(error, "abcdefghijklmnopqrstuvwxyz0123456789_"); /* the status says the class */
        const char *msg = cl && strncmp(error + cl, ": ", 2) == 0 ? error + cl + 2 : error;
        return reply_error(c, status,
                           status == 429 ? "rate_limit_error" : status < 500 ? "invalid_request_error" : "server_error",
                           msg);
    }
    if (!r->stream) {
        enum MHD_Result ret = reply(c, 200, "application/json", body.s ? body.s : "{}", body.len);
        tb_str_free(&body);
        return ret;
    }
    tb_str_free(&body);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_stream, k, NULL);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* What is wrong with an Authorization header value for s->api_key; NULL
 * when it bears the key. The key is never echoed. */
static const char *check_key(const tb_server *s, const char *auth)
{
    if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
        return "You didn't provide an API key: send it as `Authorization: Bearer KEY`";
    const char *got = auth + 7;
    while (*got == ' ')
        got++;
    size_t n = strlen(got), want = strlen(s->api_key);
    while (n && (got[n - 1] == ' ' || got[n - 1] == '\t'))
        n--;
    unsigned char diff = n != want;
    for (size_t i = 0; i < want; i++) /* the same time for every wrong key of its length */
        diff |= (unsigned char)(s->api_key[i] ^ (i < n ? got[i] : 0));
    return diff ? "Incorrect API key provided" : NULL;
}

static enum MHD_Result reply_401(struct MHD_Connection *c, const char *why)
{
    tb_str b = {0};
    tb_str_append(&b, "{\"error\":{\"message\":");
    json_str(&b, why, strlen(why));
    tb_str_append(&b, ",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"invalid_api_key\"}}");
    struct MHD_Response *resp = MHD_create_response_from_buffer(b.len, b.s, MHD_RESPMEM_MUST_COPY);
    tb_str_free(&b);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, 401, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* GET /metrics: the dispatcher's figures, read at once under its mutex
 * (serve_metrics.h), as Prometheus text. */
static enum MHD_Result serve_metrics(tb_server *s, struct MHD_Connection *c)
{
    pthread_mutex_lock(&s->mu);
    tb_serve_stats st = s->stats;
    st.waiting = 0;
    for (const tb_sreq *r = s->head; r; r = r->next)
        st.waiting++;
    pthread_mutex_unlock(&s->mu);
    tb_str b = {0};
    tb_serve_metrics_text(&st, s->label, &b);
    enum MHD_Result r = reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.s, b.len);
    tb_str_free(&b);
    return r;
}

/* libmicrohttpd's access handler; cls is the server. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    tb_server *s = cls;
    conn *k = *con_cls;
    if (!k) { /* the headers are in, the body (if any) not yet */
        k = tb_xcalloc(1, sizeof *k);
        k->s = s;
        k->c = c;
        *con_cls = k;
        /* /health and /metrics stay open, as vLLM's do: probes and
         * Prometheus scrapers (tokbench's telemetry too) send no key, and
         * neither says more than counts. */
        if (s->api_key && !(strcmp(method, "GET") == 0 && (strcmp(url, "/health") == 0 || strcmp(url, "/metrics") == 0))) {
            const char *why = check_key(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
            if (why)
                return reply_401(c, why);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) { /* refused before a byte of it is read */
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || end == cl || n > MAX_BODY)
                return reply_error(c, 413, "invalid_request_error", "request body larger than 16 MiB");
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (k->body.len + *upload_size > MAX_BODY)
            k->too_large = 1;
        else
            tb_str_appendn(&k->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->too_large)
        return reply_error(c, 413, "invalid_request_error", "request body larger than 16 MiB");
    int post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
    if (get && strcmp(url, "/health") == 0)
        return reply(c, 200, "text/plain", "ok\n", 3);
    if (get && strcmp(url, "/metrics") == 0)
        return serve_metrics(s, c);
    if (get && strcmp(url, "/v1/models") == 0) {
        tb_str b = {0};
        tb_str_append(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
        json_str(&b, s->label, strlen(s->label));
        tb_str_append(&b, ",\"object\":\"model\",\"owned_by\":\"tokbench\"}]}");
        enum MHD_Result r = reply(c, 200, "application/json", b.s, b.len);
        tb_str_free(&b);
        return r;
    }
    if (post && strcmp(url, "/v1/completions") == 0)
        return serve_completion(s, c, k, 0);
    if (post && strcmp(url, "/v1/chat/completions") == 0)
        return serve_completion(s, c, k, 1);
    return reply_error(c, 404, "not_found_error", "not found: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics");
}

/* libmicrohttpd's NOTIFY_COMPLETED: the connection's request is over;
 * cls is the server. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c;
    tb_server *s = cls;
    conn *k = *con_cls;
    if (!k)
        return;
    if (k->r) {
        pthread_mutex_lock(&s->mu);
        /* Ended before its answer: the client closed the connection or
         * stopped reading (MHD's timeout); its slot is freed. */
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN)
            tb_serve_client_gone(s, k->r,
                                 toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED
                                     ? "the client read nothing for --client-timeout"
                                     : "the client closed its connection");
        tb_sreq_release(k->r);
        pthread_mutex_unlock(&s->mu);
    }
    tb_str_free(&k->body);
    free(k);
    *con_cls = NULL;
}

/* ------------------------------------------------------ the daemon */

/* libmicrohttpd's NOTIFY_CONNECTION: a connection opened; its send
 * buffer is fixed at SEND_BUFFER. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    (void)socket_context;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int size = SEND_BUFFER;
    if (ci)
        setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

/* The listening socket is made here, not by libmicrohttpd, so that its
 * options are ours: SO_REUSEADDR always, so that a restarted server binds
 * at once while the connections the last one closed sit in TIME_WAIT
 * (uvicorn and TGI do the same; a port another socket listens on still
 * fails, EADDRINUSE); SO_REUSEPORT only under --reuse-port, where servers
 * share the port on purpose. (MHD_OPTION_LISTENING_ADDRESS_REUSE with 0
 * means "disallow reuse" and set neither.) -1 with errno set. */
static int listen_socket(const struct sockaddr_in *addr, int reuse_port, unsigned *bound)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    int on = 1;
    struct sockaddr_in at;
    socklen_t at_len = sizeof at;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        (reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) ||
        bind(fd, (const struct sockaddr *)addr, sizeof *addr) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)&at, &at_len) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *bound = ntohs(at.sin_port);
    return fd;
}

struct MHD_Daemon *tb_serve_http_start(tb_server *s, const struct sockaddr_in *addr, unsigned *bound)
{
    int fd = listen_socket(addr, s->reuse_port, bound);
    if (fd < 0)
        return NULL;
    /* Connection threads inherit a mask without SIGINT/SIGTERM: signals
     * reach the dispatcher, whose waits they interrupt. */
    sigset_t block, old_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)*bound, NULL,
        NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, s->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->max_connections_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
        s->client_timeout, MHD_OPTION_END);
    int saved = errno; /* for the caller's message */
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    /* fd is MHD's now (MHD_stop_daemon closes it); on a failure the
     * caller exits, so it is left as MHD left it */
    errno = saved;
    return d;
}

void tb_serve_http_stop(struct MHD_Daemon *d)
{
    MHD_stop_daemon(d);
}
