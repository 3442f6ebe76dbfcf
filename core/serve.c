/* serve.c — see serve.h.
 *
 * Threads: libmicrohttpd runs a thread per connection; each parses its
 * request, queues it, and waits on the request's condition variable. The
 * main thread is the dispatcher: it forms batches, talks to the worker
 * process over the wire (wire.h), and turns its live emissions into SSE
 * bytes that the connection threads hand to libmicrohttpd. One mutex
 * guards the queue and every request's progress. */
#define _GNU_SOURCE
#include "serve.h"

#include <stdio.h>

#ifndef TB_HAVE_MHD

int tb_cmd_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tokbench serve: this tokbench was built without libmicrohttpd (install libmicrohttpd-dev "
                    "and rebuild)\n");
    return 1;
}

#else

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plan.h"
#include "serve_request.h"
#include "suite.h"
#include "util.h"
#include "worker_client.h"

#define MAX_BODY ((size_t)16 << 20) /* request body, bytes */

static const char usage[] =
    "usage: tokbench serve --backend LABEL SUITE [--port N] [--host ADDR] [--max-batch N]\n"
    "\n"
    "Serve backend LABEL of SUITE as an OpenAI-compatible endpoint:\n"
    "POST /v1/completions and /v1/chat/completions (streamed or not), GET /v1/models,\n"
    "GET /health. The backend runs with the options of its first case in SUITE.\n"
    "\n"
    "  --backend LABEL  the [backend LABEL] section to serve (required)\n"
    "  --port N         TCP port (default 8000; 0 picks a free one)\n"
    "  --host ADDR      IPv4 address to listen on (default 127.0.0.1)\n"
    "  --max-batch N    most requests per generate() call (default 16 when the\n"
    "                   backend batches, else 1)\n"
    "  --port-file F    write the port to F once listening (for scripts)\n"
    "\n"
    "Stops on SIGINT or SIGTERM (exit 0). Exit 1 when the backend cannot load,\n"
    "2 on bad input.\n";

typedef enum { FAIL_NONE, FAIL_STATUS, FAIL_DROP, FAIL_GARBAGE } fail_mode;

/* One HTTP request being served. */
typedef struct sreq {
    struct sreq *next; /* queue link */
    int refs;          /* the connection and the dispatcher */
    pthread_cond_t cv;
    /* the request, fixed once queued */
    char *prompt;
    uint32_t max_tokens;
    int chat, stream, include_usage;
    char id[48];
    long created;
    /* progress, under server.mu */
    int started;      /* an emission arrived (the response may begin) */
    int done;
    fail_mode fail;
    int http_status;  /* FAIL_STATUS */
    char error[256];
    tb_str text;      /* output text so far */
    tb_str out;       /* SSE bytes not yet handed out */
    size_t out_pos;
    uint32_t completion_tokens;
    int64_t prompt_tokens;
} sreq;

typedef struct server {
    tb_plan *plan;
    size_t backend;
    uint32_t case_index;
    const char *label;
    uint32_t max_batch;
    tb_worker_client wc;
    uint64_t batches;
    pthread_mutex_t mu;
    pthread_cond_t queue_cv;
    sreq *head, *tail;
    int stopping;
} server;

static server S;
static volatile int sig_stop;

static void on_signal(int sig)
{
    (void)sig;
    sig_stop = 1;
}

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

static void chunk_head(tb_str *b, const sreq *r)
{
    tb_str_appendf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", r->id,
                   r->chat ? "chat.completion.chunk" : "text_completion", r->created);
    json_str(b, S.label, strlen(S.label));
}

/* One streamed chunk: text (may be empty) and an optional finish reason. */
static void sse_chunk(sreq *r, const char *text, size_t n, const char *finish, int role)
{
    tb_str *b = &r->out;
    chunk_head(b, r);
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

static void usage_json(tb_str *b, const sreq *r)
{
    tb_str_appendf(b, "\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%u,\"total_tokens\":%lld}",
                   (long long)r->prompt_tokens, r->completion_tokens,
                   (long long)r->prompt_tokens + r->completion_tokens);
}

static const char *finish_reason(const sreq *r)
{
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

/* ------------------------------------------------------ requests */

static void sreq_release(sreq *r) /* under S.mu */
{
    if (--r->refs > 0)
        return;
    pthread_cond_destroy(&r->cv);
    free(r->prompt);
    tb_str_free(&r->text);
    tb_str_free(&r->out);
    free(r);
}

/* The first emission (or a successful end): the stream can begin. */
static void begin(sreq *r)
{
    if (r->started)
        return;
    r->started = 1;
    if (r->stream && r->chat)
        sse_chunk(r, "", 0, NULL, 1);
}

/* An error class picks what the client sees (serve.h). */
static void fail_request(sreq *r, const char *error)
{
    snprintf(r->error, sizeof r->error, "%s", error);
    size_t n = strspn(error, "abcdefghijklmnopqrstuvwxyz0123456789_");
    const char *cls = n && strncmp(error + n, ": ", 2) == 0 ? error : "";
    size_t cl = cls[0] ? n : 0;
#define IS(word) (cl == strlen(word) && strncmp(cls, word, cl) == 0)
    if (IS("dropped")) {
        r->fail = FAIL_DROP;
        return;
    }
    if (IS("malformed_stream")) {
        r->fail = FAIL_GARBAGE;
        if (r->stream) {
            begin(r);
            tb_str_append(&r->out, "data: {\"choices\": [{\"text\": this is not JSON\n\ndata: [DONE]\n\n");
        }
        return;
    }
    int status = IS("http_429") ? 429 : IS("http_4xx") ? 400 : IS("timeout") ? 504 : 500;
    if (cl == 8 && strncmp(cls, "http_", 5) == 0 && cls[5] >= '4' && cls[5] <= '5' && cls[6] >= '0' &&
        cls[6] <= '9' && cls[7] >= '0' && cls[7] <= '9')
        status = atoi(cls + 5); /* http_503: that status */
#undef IS
    r->fail = FAIL_STATUS;
    r->http_status = status;
    if (r->stream && r->started) { /* too late for a status: an error event */
        tb_str_append(&r->out, "data: {\"error\":{\"message\":");
        json_str(&r->out, error, strlen(error));
        tb_str_appendf(&r->out, ",\"type\":\"server_error\",\"code\":%d}}\n\ndata: [DONE]\n\n", status);
    }
}

static void finish_ok(sreq *r, const tb_wire_gen_req *q, const char *text)
{
    /* What the final output adds to what was streamed (all of it when the
     * plugin emitted counts only). */
    size_t have = r->text.len;
    const char *rest = "";
    size_t rest_len = 0;
    if (q->text_len >= have && (have == 0 || memcmp(text, r->text.s, have) == 0)) {
        rest = text + have;
        rest_len = q->text_len - have;
    }
    begin(r);
    if (rest_len) {
        tb_str_appendn(&r->text, rest, rest_len);
        if (r->stream)
            sse_chunk(r, rest, rest_len, NULL, 0);
    }
    r->completion_tokens = q->n_output_tokens;
    r->prompt_tokens = q->prompt_tokens >= 0 ? q->prompt_tokens : count_words(r->prompt);
    if (r->stream) {
        sse_chunk(r, "", 0, finish_reason(r), 0);
        if (r->include_usage) {
            chunk_head(&r->out, r);
            tb_str_append(&r->out, ",\"choices\":[],");
            usage_json(&r->out, r);
            tb_str_append(&r->out, "}\n\n");
        }
        tb_str_append(&r->out, "data: [DONE]\n\n");
    }
}

/* ------------------------------------------------------ HTTP side */

typedef struct conn {
    tb_str body;
    int too_large;
    sreq *r;
} conn;

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

static enum MHD_Result reply_error(struct MHD_Connection *c, int status, const char *type, const char *msg)
{
    tb_str b = {0};
    tb_str_append(&b, "{\"error\":{\"message\":");
    json_str(&b, msg, strlen(msg));
    tb_str_appendf(&b, ",\"type\":\"%s\",\"code\":%d}}", type, status);
    enum MHD_Result r = reply(c, status, "application/json", b.s, b.len);
    tb_str_free(&b);
    return r;
}

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sreq *r = cls;
    pthread_mutex_lock(&S.mu);
    while (r->out_pos == r->out.len && !r->done && !S.stopping)
        pthread_cond_wait(&r->cv, &S.mu);
    ssize_t n;
    if (r->out_pos < r->out.len) {
        size_t k = r->out.len - r->out_pos < max ? r->out.len - r->out_pos : max;
        memcpy(buf, r->out.s + r->out_pos, k);
        r->out_pos += k;
        if (r->out_pos == r->out.len)
            r->out.len = r->out_pos = 0;
        n = (ssize_t)k;
    } else if (S.stopping || r->fail == FAIL_DROP) {
        n = MHD_CONTENT_READER_END_WITH_ERROR; /* closes the connection */
    } else {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&S.mu);
    return n;
}

static enum MHD_Result serve_completion(struct MHD_Connection *c, conn *k, int chat)
{
    static uint64_t next_id;
    tb_serve_request q;
    const char *bad = tb_serve_request_parse(k->body.s ? k->body.s : "", k->body.len, chat, &q);
    if (bad)
        return reply_error(c, 400, "invalid_request_error", bad);
    sreq *r = tb_xcalloc(1, sizeof *r);
    r->prompt = q.prompt;
    r->max_tokens = q.max_tokens;
    r->chat = chat;
    r->stream = q.stream;
    r->include_usage = q.include_usage;
    pthread_cond_init(&r->cv, NULL);
    r->created = (long)time(NULL);
    r->refs = 2; /* this connection, the dispatcher */
    pthread_mutex_lock(&S.mu);
    if (S.stopping) {
        r->refs = 1;
        k->r = r; /* released by on_completed */
        pthread_mutex_unlock(&S.mu);
        return MHD_NO;
    }
    snprintf(r->id, sizeof r->id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)++next_id);
    k->r = r;
    if (S.tail)
        S.tail->next = r;
    else
        S.head = r;
    S.tail = r;
    pthread_cond_signal(&S.queue_cv);
    while (!S.stopping && !r->done && !(r->stream && r->started))
        pthread_cond_wait(&r->cv, &S.mu);
    int stopping = S.stopping, done = r->done, streaming = r->stream && r->started;
    fail_mode fail = r->fail;
    int status = r->http_status;
    char error[256];
    snprintf(error, sizeof error, "%s", r->error);
    tb_str body = {0};
    if (done && !fail && !r->stream) {
        tb_str_appendf(&body, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%ld,\"model\":", r->id,
                       chat ? "chat.completion" : "text_completion", r->created);
        json_str(&body, S.label, strlen(S.label));
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
    pthread_mutex_unlock(&S.mu);

    if (stopping)
        return MHD_NO;
    if (fail == FAIL_DROP && !streaming)
        return MHD_NO; /* close without a response */
    if (fail == FAIL_GARBAGE && !r->stream)
        return reply(c, 200, "application/json", "{\"choices\": [garbage", 21);
    if (fail == FAIL_STATUS && !streaming) {
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
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_stream, r, NULL);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    conn *k = *con_cls;
    if (!k) {
        *con_cls = tb_xcalloc(1, sizeof(conn));
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
    if (get && strcmp(url, "/v1/models") == 0) {
        tb_str b = {0};
        tb_str_append(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
        json_str(&b, S.label, strlen(S.label));
        tb_str_append(&b, ",\"object\":\"model\",\"owned_by\":\"tokbench\"}]}");
        enum MHD_Result r = reply(c, 200, "application/json", b.s, b.len);
        tb_str_free(&b);
        return r;
    }
    if (post && strcmp(url, "/v1/completions") == 0)
        return serve_completion(c, k, 0);
    if (post && strcmp(url, "/v1/chat/completions") == 0)
        return serve_completion(c, k, 1);
    return reply_error(c, 404, "not_found_error", "not found: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    conn *k = *con_cls;
    if (!k)
        return;
    if (k->r) {
        pthread_mutex_lock(&S.mu);
        sreq_release(k->r);
        pthread_mutex_unlock(&S.mu);
    }
    tb_str_free(&k->body);
    free(k);
    *con_cls = NULL;
}

/* ------------------------------------------------------ the backend side */

/* Fork the worker, probe, load the served case. 0, or -1 with *why. */
static int start_worker(char **why)
{
    tb_wc_result r = tb_wc_start(&S.wc, why);
    if (r == TB_WC_REFUSED) {
        char *e = *why;
        *why = tb_xasprintf("cannot run on this host: %s", e);
        free(e);
        return -1;
    }
    int reused;
    char *info = NULL;
    if (r == TB_WC_OK)
        r = tb_wc_send(&S.wc, TB_MSG_LOAD, &S.case_index, sizeof S.case_index, why);
    if (r == TB_WC_OK)
        r = tb_wc_await_loaded(&S.wc, &reused, &info, why);
    if (r != TB_WC_OK) {
        tb_wc_kill(&S.wc);
        return -1;
    }
    if (info && info[0])
        fprintf(stderr, "tokbench serve: loaded %s\n", info);
    free(info);
    return 0;
}

/* Fail every request of the batch not done yet. */
static void fail_rest(sreq **batch, uint32_t k, const char *error)
{
    pthread_mutex_lock(&S.mu);
    for (uint32_t i = 0; i < k; i++) {
        sreq *r = batch[i];
        if (r->done)
            continue;
        fail_request(r, error);
        r->done = 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&S.mu);
}

static void on_emit(sreq **batch, uint32_t k, const char *buf, size_t len)
{
    tb_wire_emit e;
    if (len < sizeof e)
        return;
    memcpy(&e, buf, sizeof e);
    if (e.request >= k || sizeof e + e.text_len > len)
        return;
    sreq *r = batch[e.request];
    pthread_mutex_lock(&S.mu);
    begin(r);
    if (e.text_len) {
        tb_str_appendn(&r->text, buf + sizeof e, e.text_len);
        if (r->stream)
            sse_chunk(r, buf + sizeof e, e.text_len, NULL, 0);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&S.mu);
}

static void on_generated(sreq **batch, uint32_t k, const char *buf, size_t len)
{
    tb_wire_gen_done d;
    if (len < sizeof d) {
        fail_rest(batch, k, "http_5xx: malformed answer from the backend process");
        return;
    }
    memcpy(&d, buf, sizeof d);
    const char *p = buf + sizeof d, *end = buf + len;
    pthread_mutex_lock(&S.mu);
    for (uint32_t i = 0; i < d.n_requests && i < k; i++) {
        tb_wire_gen_req q;
        if ((size_t)(end - p) < sizeof q)
            break;
        memcpy(&q, p, sizeof q);
        p += sizeof q;
        if ((size_t)(end - p) < q.text_len)
            break;
        sreq *r = batch[i];
        if (q.status == TB_OK) {
            finish_ok(r, &q, p);
        } else {
            char msg[200];
            q.error[sizeof q.error - 1] = '\0';
            const char *e = q.error[0] ? q.error : tb_status_name(q.status);
            size_t cl = strspn(e, "abcdefghijklmnopqrstuvwxyz0123456789_");
            /* No class: a request the backend rejects is the client's
             * error (400), anything else the server's (500). */
            int has_class = cl && strncmp(e + cl, ": ", 2) == 0;
            snprintf(msg, sizeof msg, "%s%s",
                     has_class ? "" : q.status == TB_ERR_INVALID || q.status == TB_ERR_UNSUPPORTED ? "http_4xx: "
                                    : q.status == TB_ERR_TIMEOUT                                   ? "timeout: "
                                                                                                   : "http_5xx: ",
                     e);
            fail_request(r, msg);
        }
        p += q.text_len;
        r->done = 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&S.mu);
    fail_rest(batch, k, "http_5xx: the backend process did not answer for this request");
}

/* Run one batch on the worker, streaming its emissions. */
static void run_batch(sreq **batch, uint32_t k)
{
    char *why = NULL;
    if (!tb_wc_running(&S.wc) && start_worker(&why) != 0) {
        char *msg = tb_xasprintf("http_5xx: backend unavailable: %s", why);
        fprintf(stderr, "tokbench serve: %s\n", msg + 11);
        fail_rest(batch, k, msg);
        free(msg);
        free(why);
        return;
    }
    tb_str b = {0};
    tb_wire_gen g = {.case_index = S.case_index, .n_requests = k, .max_new_tokens = batch[0]->max_tokens,
                     .seed = S.plan->suite->seed + S.batches++};
    tb_str_appendn(&b, (const char *)&g, sizeof g);
    for (uint32_t i = 0; i < k; i++)
        tb_str_appendn(&b, batch[i]->prompt, strlen(batch[i]->prompt) + 1);
    tb_wc_result r = tb_wc_send(&S.wc, TB_MSG_GENERATE, b.s, b.len, &why);
    tb_str_free(&b);
    int64_t since = tb_now_ns();
    static const uint32_t answers[] = {TB_MSG_EMIT, TB_MSG_GENERATED};
    tb_wire_frame f;
    while (r == TB_WC_OK) {
        r = tb_wc_await(&S.wc, since, answers, 2, &f, &why);
        if (r == TB_WC_OK && f.type == TB_MSG_EMIT) {
            on_emit(batch, k, f.payload, f.len);
            continue;
        }
        if (r == TB_WC_OK) {
            on_generated(batch, k, f.payload, f.len);
            return;
        }
    }
    if (r == TB_WC_INTERRUPTED) { /* stopping: the batch is not waited for */
        tb_wc_kill(&S.wc);
        fail_rest(batch, k, "http_5xx: the server is stopping");
        free(why);
        return;
    }
    fprintf(stderr, "tokbench serve: %s\n", why);
    char *msg = tb_xasprintf("%s: %s", r == TB_WC_TIMEOUT ? "timeout" : "http_5xx", why);
    fail_rest(batch, k, msg);
    free(msg);
    free(why);
}

static void dispatch(void)
{
    sreq **batch = tb_xcalloc(S.max_batch, sizeof *batch);
    for (;;) {
        pthread_mutex_lock(&S.mu);
        while (!S.head && !sig_stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200000000L; /* look at sig_stop this often */
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&S.queue_cv, &S.mu, &ts);
        }
        if (sig_stop) {
            pthread_mutex_unlock(&S.mu);
            break;
        }
        /* FIFO, the head's max_tokens: one generate() call has one. */
        uint32_t k = 0;
        uint32_t want = S.head->max_tokens;
        sreq **link = &S.head, *last = NULL;
        while (*link && k < S.max_batch) {
            sreq *r = *link;
            if (r->max_tokens == want) {
                *link = r->next;
                r->next = NULL;
                batch[k++] = r;
            } else {
                last = r;
                link = &r->next;
            }
        }
        S.tail = last;
        for (sreq *r = S.head; r; r = r->next)
            S.tail = r;
        pthread_mutex_unlock(&S.mu);

        run_batch(batch, k);
        pthread_mutex_lock(&S.mu);
        for (uint32_t i = 0; i < k; i++)
            sreq_release(batch[i]);
        pthread_mutex_unlock(&S.mu);
    }
    free(batch);
}

/* ------------------------------------------------------ command */

enum { OPT_BACKEND = 1000, OPT_PORT, OPT_HOST, OPT_MAX_BATCH, OPT_PORT_FILE };

int tb_cmd_serve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"port", required_argument, NULL, OPT_PORT},
        {"host", required_argument, NULL, OPT_HOST},
        {"max-batch", required_argument, NULL, OPT_MAX_BATCH},
        {"port-file", required_argument, NULL, OPT_PORT_FILE},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    const char *label = NULL, *host = "127.0.0.1", *port_file = NULL;
    long port = 8000, max_batch = 0;
    char *end;
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case OPT_BACKEND:
            label = optarg;
            break;
        case OPT_PORT:
            port = strtol(optarg, &end, 10);
            if (*end || end == optarg || port < 0 || port > 65535) {
                fprintf(stderr, "tokbench serve: --port %s: expected a port in [0, 65535]\n", optarg);
                return 2;
            }
            break;
        case OPT_HOST:
            host = optarg;
            break;
        case OPT_MAX_BATCH:
            max_batch = strtol(optarg, &end, 10);
            if (*end || end == optarg || max_batch < 1 || max_batch > 65536) {
                fprintf(stderr, "tokbench serve: --max-batch %s: expected an integer in [1, 65536]\n", optarg);
                return 2;
            }
            break;
        case OPT_PORT_FILE:
            port_file = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (!label || optind != argc - 1) {
        fprintf(stderr, "tokbench serve: %s\n\n%s", !label ? "--backend LABEL is required" : "expected one SUITE",
                usage);
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "tokbench serve: --host %s: expected an IPv4 address such as 127.0.0.1\n", host);
        return 2;
    }

    tb_suite suite;
    tb_plan plan;
    char *err = NULL;
    if (tb_suite_load(argv[optind], &suite, &err) != 0) {
        fprintf(stderr, "%s", err);
        free(err);
        return 2;
    }
    if (tb_plan_build(&suite, &plan, &err) != 0) {
        fprintf(stderr, "%s", err);
        free(err);
        tb_suite_free(&suite);
        return 2;
    }
    int rc = 2;
    size_t bi = plan.n_backends;
    for (size_t i = 0; i < plan.n_backends; i++)
        if (strcmp(plan.backends[i].sb->label, label) == 0)
            bi = i;
    size_t ci = plan.n_cases;
    for (size_t i = 0; bi < plan.n_backends && i < plan.n_cases && ci == plan.n_cases; i++)
        if (plan.cases[i].backend == bi && !plan.cases[i].skip_reason)
            ci = i;
    if (bi == plan.n_backends) {
        tb_str known = {0};
        for (size_t i = 0; i < plan.n_backends; i++)
            tb_str_appendf(&known, "%s%s", i ? ", " : "", plan.backends[i].sb->label);
        fprintf(stderr, "tokbench serve: %s: no [backend %s] (it has: %s)\n", suite.path, label,
                known.s ? known.s : "none");
        tb_str_free(&known);
        goto out;
    }
    if (ci == plan.n_cases) {
        fprintf(stderr, "tokbench serve: %s: [backend %s] has no case that can run\n", suite.path, label);
        goto out;
    }
    const tb_backend_ops *ops = plan.backends[bi].plugin.ops;
    memset(&S, 0, sizeof S);
    S.plan = &plan;
    S.backend = bi;
    S.case_index = (uint32_t)ci;
    S.label = label;
    S.max_batch = max_batch ? (uint32_t)max_batch : (ops->capabilities & TB_CAP_BATCH) ? 16 : 1;
    if (!(ops->capabilities & TB_CAP_BATCH) && S.max_batch > 1) {
        fprintf(stderr, "tokbench serve: --max-batch %u: plugin %s does not batch; serving one request at a time\n",
                S.max_batch, ops->name);
        S.max_batch = 1;
    }
    tb_wc_init(&S.wc, &plan, bi, &sig_stop);
    pthread_mutex_init(&S.mu, NULL);
    pthread_cond_init(&S.queue_cv, NULL);
    {
        char *label_s = tb_case_label(&plan, &plan.cases[ci]);
        fprintf(stderr, "tokbench serve: backend %s (plugin %s %s), case #%zu: %s, options %s\n", label, ops->name,
                ops->version, plan.cases[ci].ordinal, label_s, plan.backends[bi].options_json);
        free(label_s);
    }

    struct sigaction sa = {0}, old_int, old_term, old_pipe;
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    struct sigaction ign = {0};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    sig_stop = 0;

    /* The worker first: forked before any thread exists. */
    char *why = NULL;
    if (start_worker(&why) != 0) {
        fprintf(stderr, "tokbench serve: backend %s: %s\n", label, why);
        free(why);
        rc = 1;
        goto restore;
    }
    /* Connection threads inherit a mask without SIGINT/SIGTERM: signals
     * reach the dispatcher, whose waits they interrupt. */
    sigset_t block, old_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL,
        NULL, on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096, MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (!d) {
        fprintf(stderr, "tokbench serve: cannot listen on %s:%ld: %s\n", host, port, strerror(errno));
        tb_wc_kill(&S.wc);
        rc = 1;
        goto restore;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned bound = info ? info->port : (unsigned)port;
    fprintf(stderr, "tokbench serve: listening on http://%s:%u/v1 (max batch %u); Ctrl-C stops\n", host, bound,
            S.max_batch);
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        if (f) {
            fprintf(f, "%u\n", bound);
            fclose(f);
        }
    }

    dispatch();

    fprintf(stderr, "tokbench serve: stopping\n");
    /* Every batch has ended; wake the connections still waiting in the
     * queue (they hold their requests through their conn), then join. */
    pthread_mutex_lock(&S.mu);
    S.stopping = 1;
    while (S.head) {
        sreq *r = S.head;
        S.head = r->next;
        pthread_cond_broadcast(&r->cv);
        sreq_release(r); /* the dispatcher's reference */
    }
    pthread_mutex_unlock(&S.mu);
    MHD_stop_daemon(d);
    tb_wc_stop(&S.wc);
    rc = 0;
restore:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    pthread_cond_destroy(&S.queue_cv);
    pthread_mutex_destroy(&S.mu);
    tb_wc_free(&S.wc);
out:
    tb_plan_free(&plan);
    tb_suite_free(&suite);
    return rc;
}

#endif /* TB_HAVE_MHD */
