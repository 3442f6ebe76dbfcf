/* worker.c — the backend's side of a run, in a process of its own.
 *
 * The runner forks one worker per backend; the worker owns the plugin's
 * context (and with it, later, any CUDA context), runs cases on request and
 * sends back raw timings. It computes no metric: the runner derives every
 * figure from these raw events, the same way for every backend. */
#define _GNU_SOURCE
#include "worker.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util.h"
#include "wire.h"

static volatile sig_atomic_t cancel_flag;

static void on_signal(int sig)
{
    (void)sig;
    cancel_flag = 1;
}

/* The emission buffer of the call in flight: appended to by host->emit. */
typedef struct emit_buf {
    tb_emission *ev;
    size_t n, cap;
    uint32_t n_requests;
    uint32_t dropped; /* emissions naming a request out of range */
} emit_buf;

typedef struct worker {
    const tb_plan *plan;
    const tb_plan_backend *pb;
    const tb_backend_ops *ops;
    tb_host host;
    emit_buf em;
    void *ctx;
    char *ctx_load_key; /* load key of ctx; NULL: none */
    int fd_out;
} worker;

static int64_t host_now(const tb_host *h)
{
    (void)h;
    return tb_now_ns();
}

static void host_log(const tb_host *h, tb_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    worker *w = h->host_data;
    if (level > TB_LOG_INFO && !getenv("TOKBENCH_DEBUG"))
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%s] %s: %s\n", w->pb->sb->label, names[level <= 3 ? level : 3], line);
}

static void host_emit(const tb_host *h, uint32_t request, uint32_t n_tokens, int64_t t_ns)
{
    emit_buf *b = &((worker *)h->host_data)->em;
    if (request >= b->n_requests) {
        b->dropped++;
        return;
    }
    if (b->n == b->cap) { /* rare: the buffer is sized for the case */
        b->cap = b->cap ? b->cap * 2 : 1024;
        b->ev = tb_xrealloc(b->ev, b->cap * sizeof *b->ev);
    }
    b->ev[b->n++] = (tb_emission){t_ns, request, n_tokens};
}

static int host_cancelled(const tb_host *h)
{
    (void)h;
    return cancel_flag != 0;
}

static const char *status_name(tb_status s)
{
    switch (s) {
    case TB_OK: return "ok";
    case TB_ERR: return "error";
    case TB_ERR_INVALID: return "invalid";
    case TB_ERR_UNSUPPORTED: return "unsupported";
    case TB_ERR_NO_MEMORY: return "out of memory";
    case TB_ERR_IO: return "I/O error";
    case TB_ERR_MODEL: return "model error";
    case TB_ERR_CANCELLED: return "cancelled";
    case TB_ERR_TIMEOUT: return "timeout";
    }
    return "unknown status";
}

const char *tb_status_name(int s)
{
    return status_name((tb_status)s);
}

static void send_status(worker *w, uint32_t type, int32_t status, int reused, int64_t load_ns,
                        const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void send_status(worker *w, uint32_t type, int32_t status, int reused, int64_t load_ns,
                        const char *extra, const char *fmt, ...)
{
    tb_wire_status st = {.status = status, .reused = reused, .load_ns = load_ns};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st.message, sizeof st.message, fmt, ap);
    va_end(ap);
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&st, sizeof st);
    if (extra)
        tb_str_append(&b, extra);
    if (tb_wire_send(w->fd_out, type, b.s, b.len) != 0)
        _exit(3); /* the runner is gone */
    tb_str_free(&b);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* detokenize → tokenize: the output length as the tokenizer counts it.
 * -1 when the backend has no tokenizer or a call fails. */
static int32_t recount(worker *w, const tb_request_result *r)
{
    if (!(w->ops->capabilities & TB_CAP_TOKENIZER))
        return -1;
    char *text = NULL;
    const char *t = r->output_text;
    if (!t) {
        if (!r->output_ids)
            return -1;
        int64_t need = w->ops->detokenize(w->ctx, r->output_ids, r->n_output_ids, NULL, 0);
        if (need < 0)
            return -1;
        text = tb_xmalloc((size_t)need + 1);
        if (w->ops->detokenize(w->ctx, r->output_ids, r->n_output_ids, text, (size_t)need + 1) != need) {
            free(text);
            return -1;
        }
        t = text;
    }
    int64_t n = w->ops->tokenize(w->ctx, t, NULL, 0);
    free(text);
    return n < 0 || n > INT32_MAX ? -1 : (int32_t)n;
}

/* Make sure ctx is loaded for case c; reports TB_MSG_LOADED either way.
 * Returns 0 when ready. */
static int ensure_context(worker *w, const tb_case *c)
{
    if (w->ctx && w->ctx_load_key && strcmp(w->ctx_load_key, c->load_key) == 0) {
        send_status(w, TB_MSG_LOADED, TB_OK, 1, 0, NULL, "reused");
        return 0;
    }
    if (w->ctx) {
        w->ops->destroy(w->ctx);
        w->ctx = NULL;
        free(w->ctx_load_key);
        w->ctx_load_key = NULL;
    }
    char err[1024] = "";
    int64_t t0 = tb_now_ns();
    tb_status s = w->ops->create(&w->host, w->pb->sb->model, c->options, c->n_options, &w->ctx, err,
                                 sizeof err);
    int64_t load_ns = tb_now_ns() - t0;
    if (s != TB_OK || !w->ctx) {
        if (!err[0] && w->ctx)
            tb_strlcpy(err, w->ops->last_error(w->ctx), sizeof err);
        if (w->ctx) {
            w->ops->destroy(w->ctx);
            w->ctx = NULL;
        }
        send_status(w, TB_MSG_LOADED, s == TB_OK ? TB_ERR : (int32_t)s, 0, load_ns, NULL,
                    "create() failed (%s): %s", status_name(s == TB_OK ? TB_ERR : s),
                    err[0] ? err : "no message");
        return -1;
    }
    w->ctx_load_key = tb_xstrdup(c->load_key);
    const char *desc = w->ops->describe ? w->ops->describe(w->ctx) : NULL;
    send_status(w, TB_MSG_LOADED, TB_OK, 0, load_ns, desc ? desc : "", "loaded");
    return 0;
}

static void run_case(worker *w, const tb_case *c)
{
    if (ensure_context(w, c) != 0)
        return;
    const tb_suite *s = w->plan->suite;
    uint32_t n_req = c->batch;
    int n_calls = s->warmup + s->repeat;

    tb_str out = {0};
    tb_wire_case hdr = {.n_calls = (uint32_t)n_calls};
    tb_str_appendn(&out, (const char *)&hdr, sizeof hdr);

    tb_request_result *rr = tb_xcalloc(n_req, sizeof *rr);
    tb_wire_request *wr = tb_xcalloc(n_req, sizeof *wr);
    size_t want = (size_t)n_req * ((size_t)c->max_new_tokens + 4);
    if (w->em.cap < want) {
        w->em.cap = want;
        w->em.ev = tb_xrealloc(w->em.ev, want * sizeof *w->em.ev);
    }
    w->em.n_requests = n_req;

    for (int call = 0; call < n_calls; call++) {
        int64_t t_setup = tb_now_ns();
        int warm = call < s->warmup;
        tb_request req = {
            .struct_size = sizeof req,
            .n_requests = n_req,
            .prompt_tokens = c->prompt_tokens,
            .max_new_tokens = c->max_new_tokens,
            .batch = c->batch,
            .concurrency = c->concurrency,
            .steps = c->steps,
            .block_length = c->block_length,
            .request_rate = c->request_rate,
            .seed = s->seed,
            .repetition = (uint32_t)(warm ? call : call - s->warmup),
            .is_warmup = (uint32_t)warm,
            .prompt_text = NULL,
            .options = c->options,
            .n_options = c->n_options,
        };
        memset(rr, 0, n_req * sizeof *rr);
        for (uint32_t i = 0; i < n_req; i++)
            rr[i].n_answer_tokens = TB_UNKNOWN_COUNT;
        tb_result res = {.struct_size = sizeof res, .n_requests = n_req, .requests = rr,
                         .prefill_ns = -1, .decode_ns = -1, .forward_passes = 0,
                         .peak_device_bytes = -1, .energy_mj = -1};
        w->em.n = 0;
        w->em.dropped = 0;

        int64_t t_call = tb_now_ns();
        tb_status st = w->ops->generate(w->ctx, &req, &res);
        int64_t t_ret = tb_now_ns();

        if (st != TB_OK) {
            const char *e = w->ops->last_error(w->ctx);
            send_status(w, TB_MSG_CASE_ERROR, st, 0, 0, NULL, "generate() failed at %s %d (%s): %s",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, status_name(st),
                        e && *e ? e : "no message");
            free(rr);
            free(wr);
            tb_str_free(&out);
            return;
        }
        if (w->em.dropped)
            host_log(&w->host, TB_LOG_WARN, "%u emissions named a request out of range; dropped",
                     w->em.dropped);
        for (uint32_t i = 0; i < n_req; i++) {
            tb_request_result *r = &rr[i];
            tb_wire_request *q = &wr[i];
            memset(q, 0, sizeof *q);
            q->t_submit_ns = r->t_submit_ns ? r->t_submit_ns : t_call;
            q->t_done_ns = r->t_done_ns;
            q->status = r->status;
            q->n_output_tokens = r->n_output_tokens;
            q->steps_done = r->steps_done;
            q->answer_tokens = r->n_answer_tokens;
            q->recount = r->status == TB_OK ? recount(w, r) : -1;
            if (r->output_ids)
                q->output_hash = fnv1a(1469598103934665603ULL, r->output_ids,
                                       r->n_output_ids * sizeof(int32_t));
            else if (r->output_text)
                q->output_hash = fnv1a(1469598103934665603ULL, r->output_text, strlen(r->output_text));
            tb_strlcpy(q->error, r->error, sizeof q->error);
        }
        tb_wire_call wc = {
            .is_warmup = (uint32_t)warm,
            .n_requests = n_req,
            .n_emissions = (uint32_t)w->em.n,
            .t_call_ns = t_call,
            .t_return_ns = t_ret,
            .prefill_ns = res.prefill_ns,
            .decode_ns = res.decode_ns,
            .forward_passes = res.forward_passes,
            .peak_device_bytes = res.peak_device_bytes,
            .energy_mj = res.energy_mj,
        };
        wc.runner_ns = (t_call - t_setup) + (tb_now_ns() - t_ret);
        tb_str_appendn(&out, (const char *)&wc, sizeof wc);
        tb_str_appendn(&out, (const char *)wr, n_req * sizeof *wr);
        tb_str_appendn(&out, (const char *)w->em.ev, w->em.n * sizeof *w->em.ev);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        ((tb_wire_case *)out.s)->host_peak_rss = (int64_t)ru.ru_maxrss * 1024;
    if (tb_wire_send(w->fd_out, TB_MSG_RESULT, out.s, out.len) != 0)
        _exit(3);
    tb_str_free(&out);
    free(rr);
    free(wr);
}

void tb_worker_main(const tb_plan *plan, size_t backend, int fd_in, int fd_out)
{
    /* Plugins must not write to stdout (the runner's results): point it
     * at stderr. Ctrl-C and SIGTERM ask the plugin to stop. */
    dup2(2, 1);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    worker w = {.plan = plan, .pb = &plan->backends[backend], .fd_out = fd_out};
    w.ops = w.pb->plugin.ops;
    w.host = (tb_host){
        .struct_size = sizeof(tb_host),
        .abi_major = TB_ABI_MAJOR,
        .now_ns = host_now,
        .log = host_log,
        .emit = host_emit,
        .cancelled = host_cancelled,
        .host_data = &w,
    };

    char why[512] = "";
    tb_status ps = w.ops->probe ? w.ops->probe(why, sizeof why) : TB_OK;
    send_status(&w, TB_MSG_PROBE, ps, 0, 0, NULL, "%s", why[0] ? why : status_name(ps));
    if (ps != TB_OK)
        _exit(0);

    for (;;) {
        uint32_t type;
        char *buf;
        size_t len;
        if (tb_wire_recv(fd_in, 0, NULL, &type, &buf, &len) != 0)
            break;
        if (type == TB_MSG_CASE && len == sizeof(uint32_t)) {
            uint32_t idx;
            memcpy(&idx, buf, sizeof idx);
            free(buf);
            if (idx < plan->n_cases)
                run_case(&w, &plan->cases[idx]);
            continue;
        }
        free(buf);
        break; /* TB_MSG_QUIT or anything unexpected */
    }
    if (w.ctx)
        w.ops->destroy(w.ctx);
    /* _exit: the runner's atexit handlers and stdio buffers are not ours. */
    _exit(0);
}
