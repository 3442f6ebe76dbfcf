/* worker.c — the backend's side of a run, in a process of its own.
 *
 * The runner forks one worker per backend; the worker owns the plugin's
 * context (and with it, later, any CUDA context), runs cases on request and
 * sends back raw timings. It computes no metric: the runner derives every
 * figure from these raw events, the same way for every backend.
 *
 * `tokbench serve` uses the same process in live mode: it asks for one
 * batch of prompts at a time, and every emission is sent at once, with the
 * text it adds, so that the server can stream it. */
#define _GNU_SOURCE
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/prctl.h>

/* LeakSanitizer's check runs at exit(); workers end with _exit. */
#if defined(__SANITIZE_ADDRESS__)
#define TB_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TB_LSAN 1
#endif
#endif
#ifdef TB_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include "util.h"
#include "wire.h"

static volatile sig_atomic_t cancel_flag;
/* An event flood asked the plugin to stop (host->cancelled() is true);
 * unlike cancel_flag, cleared after the call. */
static int flood_stop;

/* Emissions one generate() call may make: 4 per output token per
 * request, plus slack. A sane backend makes at most one per token
 * (plugins/http fails a stream with more than 4 x max_tokens + 16 text
 * chunks); past this bound it floods the event sink, and the buffer, the
 * result message, the runner's decoding and the stored emissions would
 * grow without bound. */
#define EMIT_PER_TOKEN 4
#define EMIT_SLACK 1024

static void on_signal(int sig)
{
    (void)sig;
    cancel_flag = 1;
}

/* The emission buffer of the call in flight: appended to by host->emit. */
typedef struct emit_buf {
    tb_emission *ev;
    size_t n, cap;
    size_t limit;     /* emissions this call may make; more is a flood */
    uint64_t flood;   /* emissions past limit, dropped */
    uint32_t n_requests;
    uint32_t dropped; /* emissions naming a request out of range */
} emit_buf;

/* Live mode (serving): what was streamed of each request so far. */
typedef struct live_req {
    int32_t *ids; /* ids emitted so far (emit_output with ids) */
    size_t n_ids, cap_ids;
    /* Incremental detokenization (as vLLM and TGI do it): the text of
     * ids[prefix_off, read_off) was sent; decoding from prefix_off again
     * gives the new ids the context their spacing depends on. */
    size_t prefix_off, read_off;
    int broken; /* detokenize failed: no more text for this request */
} live_req;

typedef struct worker {
    const tb_plan *plan;
    const tb_plan_backend *pb;
    const tb_backend_ops *ops;
    tb_host host;
    emit_buf em;
    void *ctx;
    char *ctx_load_key; /* load key of ctx; NULL: none */
    int fd_out;
    /* live mode: emissions go out at once (serve); NULL otherwise */
    live_req *live;
    const uint32_t *live_map; /* group index -> index in the batch */
    uint32_t live_n;
    char *scratch; /* detokenized text */
    size_t scratch_cap;
} worker;

static void live_emit(worker *w, uint32_t request, uint32_t n_tokens, int64_t t_ns, const int32_t *ids,
                      const char *text, size_t text_len);

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
    worker *w = h->host_data;
    if (w->live) {
        live_emit(w, request, n_tokens, t_ns, NULL, NULL, 0);
        return;
    }
    emit_buf *b = &w->em;
    if (request >= b->n_requests) {
        b->dropped++;
        return;
    }
    if (b->limit && b->n >= b->limit) { /* a flood: drop, count, ask to stop */
        b->flood++;
        flood_stop = 1;
        return;
    }
    if (b->n == b->cap) { /* rare: the buffer is sized for the case */
        b->cap = b->cap ? b->cap * 2 : 1024;
        if (b->limit && b->cap > b->limit)
            b->cap = b->limit;
        b->ev = tb_xrealloc(b->ev, b->cap * sizeof *b->ev);
    }
    b->ev[b->n++] = (tb_emission){t_ns, request, n_tokens};
}

static void host_emit_output(const tb_host *h, uint32_t request, uint32_t n_tokens, int64_t t_ns,
                             const int32_t *ids, const char *text, size_t text_len)
{
    worker *w = h->host_data;
    if (w->live)
        live_emit(w, request, n_tokens, t_ns, ids, text, text_len);
    else
        host_emit(h, request, n_tokens, t_ns); /* measuring: the count only */
}

static int host_cancelled(const tb_host *h)
{
    (void)h;
    return cancel_flag != 0 || flood_stop;
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

static int64_t decode_ids(worker *w, const int32_t *ids, size_t n);

/* What a reader sees of request r: its output text, or its ids decoded up
 * to the first EOS (n_answer_tokens), appended to *out. Nothing when the
 * backend gives neither. */
static void answer_text(worker *w, const tb_request_result *r, tb_str *out)
{
    if (r->status != TB_OK)
        return;
    if (r->output_text) {
        tb_str_append(out, r->output_text);
        return;
    }
    if (!r->output_ids || !(w->ops->capabilities & TB_CAP_TOKENIZER))
        return;
    size_t n = r->n_output_ids;
    if (r->n_answer_tokens != TB_UNKNOWN_COUNT && r->n_answer_tokens < n)
        n = r->n_answer_tokens;
    int64_t k = n ? decode_ids(w, r->output_ids, n) : 0;
    if (k > 0)
        tb_str_appendn(out, w->scratch, (size_t)k);
}

static void run_case(worker *w, const tb_case *c)
{
    if (ensure_context(w, c) != 0)
        return;
    const tb_suite *s = w->plan->suite;
    const tb_plan *plan = w->plan;
    uint32_t n_req = c->requests ? c->requests : c->batch;
    /* With a prompt set, a repetition is one pass over it. */
    uint32_t per_pass = tb_plan_calls_per_pass(plan, c);
    int n_calls = s->warmup + s->repeat * (int)per_pass;
    const char **ptext = plan->n_prompts ? tb_xcalloc(n_req, sizeof *ptext) : NULL;
    int32_t *pidx = tb_xcalloc(n_req, sizeof *pidx);
    uint32_t *scored = tb_xcalloc(n_req, sizeof *scored);
    tb_str texts = {0};

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
    w->em.limit = EMIT_PER_TOKEN * want + EMIT_SLACK;

    for (int call = 0; call < n_calls; call++) {
        int64_t t_setup = tb_now_ns();
        int warm = call < s->warmup;
        for (uint32_t i = 0; i < n_req; i++) {
            pidx[i] = -1;
            scored[i] = 0;
            if (!ptext)
                continue;
            /* warm-ups: the first prompts; pass k, call j: prompts j*n_req.. */
            size_t at = warm ? (size_t)call * n_req + i
                             : (size_t)((call - s->warmup) % (int)per_pass) * n_req + i;
            scored[i] = !warm && at < plan->n_prompts;
            pidx[i] = (int32_t)(at % plan->n_prompts);
            ptext[i] = plan->prompts.items[pidx[i]].prompt;
        }
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
            .prompt_text = ptext,
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
        w->em.flood = 0;

        int64_t t_call = tb_now_ns();
        tb_status st = w->ops->generate(w->ctx, &req, &res);
        int64_t t_ret = tb_now_ns();
        flood_stop = 0;

        if (w->em.flood) { /* whatever generate() returned: not a measurement */
            send_status(w, TB_MSG_CASE_ERROR, TB_ERR, 0, 0, NULL,
                        "event flood at %s %d: the backend emitted over %zu events for %u requests of %u "
                        "tokens (%llu more dropped); case failed",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, w->em.limit, n_req,
                        c->max_new_tokens, (unsigned long long)w->em.flood);
        } else if (st != TB_OK) {
            const char *e = w->ops->last_error(w->ctx);
            send_status(w, TB_MSG_CASE_ERROR, st, 0, 0, NULL, "generate() failed at %s %d (%s): %s",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, status_name(st),
                        e && *e ? e : "no message");
        }
        if (w->em.flood || st != TB_OK) {
            free(rr);
            free(wr);
            free(ptext);
            free(pidx);
            free(scored);
            tb_str_free(&texts);
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
            /* A failure always says something: the status's name at least. */
            tb_strlcpy(q->error, r->status == TB_OK || r->error[0] ? r->error : tb_status_name(r->status),
                       sizeof q->error);
            q->prompt_idx = pidx[i];
            q->scored = scored[i];
            if (ptext) { /* the answer text, for the scorers */
                size_t before = texts.len;
                answer_text(w, r, &texts);
                q->text_len = (uint32_t)(texts.len - before);
            }
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
            .flops = res.flops,
            .bytes = res.bytes,
            .peak_flops = res.peak_flops,
            .peak_bytes_per_s = res.peak_bytes_per_s,
        };
        wc.runner_ns = (t_call - t_setup) + (tb_now_ns() - t_ret);
        tb_str_appendn(&out, (const char *)&wc, sizeof wc);
        tb_str_appendn(&out, (const char *)wr, n_req * sizeof *wr);
        tb_str_appendn(&out, (const char *)w->em.ev, w->em.n * sizeof *w->em.ev);
        if (texts.len)
            tb_str_appendn(&out, texts.s, texts.len);
        texts.len = 0;
    }
    free(ptext);
    free(pidx);
    free(scored);
    tb_str_free(&texts);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        ((tb_wire_case *)out.s)->host_peak_rss = (int64_t)ru.ru_maxrss * 1024;
    if (tb_wire_send(w->fd_out, TB_MSG_RESULT, out.s, out.len) != 0)
        _exit(3);
    tb_str_free(&out);
    free(rr);
    free(wr);
}

/* ------------------------------------------------------ live mode */

/* Bytes of s[0..n) that can be sent now: not a trailing incomplete UTF-8
 * sequence, nor a trailing U+FFFD (a decoder's stand-in for bytes that
 * the next token may complete). */
static size_t stable_prefix(const char *s, size_t n)
{
    if (n >= 3 && memcmp(s + n - 3, "\xEF\xBF\xBD", 3) == 0)
        return n - 3;
    size_t k = 0; /* continuation bytes at the end */
    while (k < 3 && k < n && ((unsigned char)s[n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k == n)
        return n;
    unsigned char lead = (unsigned char)s[n - 1 - k];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return want > k + 1 ? n - 1 - k : n;
}

/* Decode ids[n] into w->scratch; returns the length or -1. */
static int64_t decode_ids(worker *w, const int32_t *ids, size_t n)
{
    int64_t need = w->ops->detokenize(w->ctx, ids, n, NULL, 0);
    if (need < 0)
        return -1;
    if ((size_t)need + 1 > w->scratch_cap) {
        w->scratch_cap = (size_t)need + 1 + 4096;
        w->scratch = tb_xrealloc(w->scratch, w->scratch_cap);
    }
    if (w->ops->detokenize(w->ctx, ids, n, w->scratch, w->scratch_cap) != need)
        return -1;
    return need;
}

/* An emission in live mode: sent at once with the text it adds. */
static void live_emit(worker *w, uint32_t request, uint32_t n_tokens, int64_t t_ns, const int32_t *ids,
                      const char *text, size_t text_len)
{
    if (request >= w->live_n) {
        w->em.dropped++;
        return;
    }
    live_req *L = &w->live[request];
    tb_wire_emit e = {.request = w->live_map[request], .n_tokens = n_tokens, .t_ns = t_ns};
    const char *delta = NULL;
    if (text) {
        e.has_text = 1;
        delta = text;
        e.text_len = (uint32_t)text_len;
    } else if (ids && n_tokens && (w->ops->capabilities & TB_CAP_TOKENIZER) && !L->broken) {
        if (L->n_ids + n_tokens > L->cap_ids) {
            L->cap_ids = (L->n_ids + n_tokens) * 2;
            L->ids = tb_xrealloc(L->ids, L->cap_ids * sizeof *L->ids);
        }
        memcpy(L->ids + L->n_ids, ids, n_tokens * sizeof *ids);
        L->n_ids += n_tokens;
        int64_t prefix = L->read_off > L->prefix_off
                             ? w->ops->detokenize(w->ctx, L->ids + L->prefix_off, L->read_off - L->prefix_off, NULL, 0)
                             : 0;
        int64_t full = decode_ids(w, L->ids + L->prefix_off, L->n_ids - L->prefix_off);
        if (prefix < 0 || full < 0) {
            L->broken = 1;
        } else {
            e.has_text = 1;
            /* Only whole characters: a token may end inside one. */
            if (full > prefix && stable_prefix(w->scratch, (size_t)full) == (size_t)full) {
                delta = w->scratch + prefix;
                e.text_len = (uint32_t)(full - prefix);
                L->prefix_off = L->read_off;
                L->read_off = L->n_ids;
            }
        }
    }
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&e, sizeof e);
    if (e.text_len)
        tb_str_appendn(&b, delta, e.text_len);
    if (tb_wire_send(w->fd_out, TB_MSG_EMIT, b.s, b.len) != 0)
        _exit(3); /* the server is gone */
    tb_str_free(&b);
}


/* One GENERATE batch: prompts of one token length run as one generate()
 * call (engines batch equal lengths), groups one after another. */
static void serve_generate(worker *w, const char *buf, size_t len)
{
    tb_wire_gen g;
    tb_wire_gen_done done = {0};
    if (len < sizeof g) {
        snprintf(done.message, sizeof done.message, "malformed GENERATE message");
        done.status = TB_ERR_INVALID;
        tb_wire_send(w->fd_out, TB_MSG_GENERATED, &done, sizeof done);
        return;
    }
    memcpy(&g, buf, sizeof g);
    uint32_t n = g.n_requests;
    const char **prompts = tb_xcalloc(n ? n : 1, sizeof *prompts);
    const char *p = buf + sizeof g, *end = buf + len;
    for (uint32_t i = 0; i < n; i++) {
        const char *nul = p < end ? memchr(p, '\0', (size_t)(end - p)) : NULL;
        if (!nul) {
            n = i; /* truncated: answer what is whole */
            break;
        }
        prompts[i] = p;
        p = nul + 1;
    }
    done.n_requests = n;
    tb_wire_gen_req *res = tb_xcalloc(n ? n : 1, sizeof *res);
    tb_str *texts = tb_xcalloc(n ? n : 1, sizeof *texts);
    int64_t *lens = tb_xcalloc(n ? n : 1, sizeof *lens);
    int *taken = tb_xcalloc(n ? n : 1, sizeof *taken);
    const tb_case *c = g.case_index < w->plan->n_cases ? &w->plan->cases[g.case_index] : NULL;
    int tok = (w->ops->capabilities & TB_CAP_TOKENIZER) != 0;
    for (uint32_t i = 0; i < n; i++) {
        lens[i] = tok && w->ctx ? w->ops->tokenize(w->ctx, prompts[i], NULL, 0) : -1;
        res[i].prompt_tokens = lens[i] > INT32_MAX ? -1 : (int32_t)lens[i];
    }
    uint32_t *map = tb_xcalloc(n ? n : 1, sizeof *map);
    const char **gp = tb_xcalloc(n ? n : 1, sizeof *gp);
    tb_request_result *rr = tb_xcalloc(n ? n : 1, sizeof *rr);
    for (uint32_t i = 0; i < n; i++) {
        if (taken[i])
            continue;
        uint32_t k = 0;
        for (uint32_t j = i; j < n; j++)
            if (!taken[j] && lens[j] == lens[i]) {
                taken[j] = 1;
                map[k] = j;
                gp[k++] = prompts[j];
            }
        if (!c || !w->ctx) {
            for (uint32_t q = 0; q < k; q++) {
                res[map[q]].status = TB_ERR;
                snprintf(res[map[q]].error, sizeof res[map[q]].error, "no backend context");
            }
            continue;
        }
        tb_request req = {
            .struct_size = sizeof req,
            .n_requests = k,
            .prompt_tokens = lens[i] > 0 && lens[i] <= UINT32_MAX ? (uint32_t)lens[i] : 0,
            .max_new_tokens = g.max_new_tokens,
            .batch = k,
            .steps = c->steps,
            .block_length = c->block_length,
            .seed = g.seed,
            .prompt_text = gp,
            .options = c->options,
            .n_options = c->n_options,
        };
        memset(rr, 0, k * sizeof *rr);
        for (uint32_t q = 0; q < k; q++)
            rr[q].n_answer_tokens = TB_UNKNOWN_COUNT;
        tb_result out = {.struct_size = sizeof out, .n_requests = k, .requests = rr, .prefill_ns = -1,
                         .decode_ns = -1, .peak_device_bytes = -1, .energy_mj = -1};
        w->live = tb_xcalloc(k, sizeof *w->live);
        w->live_map = map;
        w->live_n = k;
        tb_status st = w->ops->generate(w->ctx, &req, &out);
        const char *le = st != TB_OK ? w->ops->last_error(w->ctx) : NULL;
        for (uint32_t q = 0; q < k; q++) {
            tb_wire_gen_req *o = &res[map[q]];
            o->status = st != TB_OK ? (int32_t)st : (int32_t)rr[q].status;
            o->n_output_tokens = rr[q].n_output_tokens;
            if (st != TB_OK)
                snprintf(o->error, sizeof o->error, "%s", le && *le ? le : tb_status_name(st));
            else if (rr[q].status != TB_OK)
                tb_strlcpy(o->error, rr[q].error[0] ? rr[q].error : tb_status_name(rr[q].status), sizeof o->error);
            if (st == TB_OK)
                answer_text(w, &rr[q], &texts[map[q]]);
            free(w->live[q].ids);
        }
        free(w->live);
        w->live = NULL;
        w->live_n = 0;
        if (st != TB_OK) {
            done.status = st;
            snprintf(done.message, sizeof done.message, "generate() failed (%s): %s", tb_status_name(st),
                     le && *le ? le : "no message");
        }
    }
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&done, sizeof done);
    for (uint32_t i = 0; i < n; i++) {
        res[i].text_len = (uint32_t)texts[i].len;
        tb_str_appendn(&b, (const char *)&res[i], sizeof res[i]);
        if (texts[i].len)
            tb_str_appendn(&b, texts[i].s, texts[i].len);
        tb_str_free(&texts[i]);
    }
    if (tb_wire_send(w->fd_out, TB_MSG_GENERATED, b.s, b.len) != 0)
        _exit(3);
    tb_str_free(&b);
    free(prompts);
    free(res);
    free(texts);
    free(lens);
    free(taken);
    free(map);
    free(gp);
    free(rr);
}

/* JUDGE: load the judge's context, then loglik() of every pair. */
static void judge_pairs(worker *w, const char *buf, size_t len)
{
    tb_wire_judge h;
    if (len < sizeof h) {
        send_status(w, TB_MSG_LOADED, TB_ERR_INVALID, 0, 0, NULL, "malformed JUDGE message");
        return;
    }
    memcpy(&h, buf, sizeof h);
    if (h.case_index >= w->plan->n_cases) {
        send_status(w, TB_MSG_LOADED, TB_ERR_INVALID, 0, 0, NULL, "no case %u", h.case_index);
        return;
    }
    if (ensure_context(w, &w->plan->cases[h.case_index]) != 0)
        return;
    tb_wire_loglik *out = tb_xcalloc(h.n ? h.n : 1, sizeof *out);
    const char *p = buf + sizeof h, *end = buf + len;
    for (uint32_t i = 0; i < h.n; i++) {
        const char *ctx_text = p;
        const char *z = memchr(p, 0, (size_t)(end - p));
        const char *cont = z ? z + 1 : end;
        const char *z2 = cont < end ? memchr(cont, 0, (size_t)(end - cont)) : NULL;
        if (!z || !z2) {
            out[i].status = TB_ERR_INVALID;
            continue;
        }
        p = z2 + 1;
        if (cancel_flag) {
            out[i].status = TB_ERR_CANCELLED;
            continue;
        }
        double sum = 0;
        uint32_t n = 0;
        out[i].status = w->ops->loglik(w->ctx, ctx_text, cont, &sum, &n);
        out[i].sum_logprob = sum;
        out[i].n_tokens = n;
        if (out[i].status != TB_OK)
            host_log(&w->host, TB_LOG_WARN, "loglik failed on pair %u: %s", i, w->ops->last_error(w->ctx));
    }
    if (tb_wire_send(w->fd_out, TB_MSG_JUDGED, out, (size_t)h.n * sizeof *out) != 0)
        _exit(3);
    free(out);
}

/* memory_limit: the address space this process may add to what it has
 * now (RLIMIT_AS, so that it holds in sanitizer builds too, whose
 * reserved shadow memory is already counted). A backend that leaks then
 * fails an allocation (a clean TB_ERR_NO_MEMORY, or its own abort) long
 * before the kernel's OOM killer picks a process, maybe not this one. */
static void apply_memory_limit(double mb)
{
    if (mb <= 0)
        return;
    unsigned long long vm_kib = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %llu kB", &vm_kib) == 1)
            break;
    if (f)
        fclose(f);
    rlim_t lim = (rlim_t)vm_kib * 1024 + (rlim_t)(mb * 1048576.0);
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        fprintf(stderr, "tokbench: memory_limit: setrlimit: %s\n", strerror(errno));
}

void tb_worker_main(const tb_plan *plan, size_t backend, int fd_in, int fd_out)
{
    apply_memory_limit(plan->suite->memory_limit_mb);
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
        .emit_output = host_emit_output,
    };

    char why[512] = "";
    tb_status ps = w.ops->probe ? w.ops->probe(why, sizeof why) : TB_OK;
    send_status(&w, TB_MSG_PROBE, ps, 0, 0, NULL, "%s", why[0] ? why : status_name(ps));
    if (ps != TB_OK)
        _exit(0);

    tb_wire_reader rd;
    tb_wire_reader_init(&rd, fd_in);
    for (;;) {
        tb_wire_frame f;
        if (tb_wire_read(&rd, 0, NULL, &f) != TB_WIRE_FRAME)
            break;
        if ((f.type == TB_MSG_CASE || f.type == TB_MSG_LOAD) && f.len == sizeof(uint32_t)) {
            uint32_t idx;
            memcpy(&idx, f.payload, sizeof idx);
            if (f.type == TB_MSG_CASE) {
                if (idx < plan->n_cases)
                    run_case(&w, &plan->cases[idx]);
            } else if (idx < plan->n_cases) {
                ensure_context(&w, &plan->cases[idx]);
            } else {
                send_status(&w, TB_MSG_LOADED, TB_ERR_INVALID, 0, 0, NULL, "no case %u", idx);
            }
            continue;
        }
        if (f.type == TB_MSG_JUDGE && TB_STRUCT_HAS(w.ops, tb_backend_ops, loglik) && w.ops->loglik) {
            judge_pairs(&w, f.payload, f.len);
            continue;
        }
        if (f.type == TB_MSG_GENERATE) {
            serve_generate(&w, f.payload, f.len);
            continue;
        }
        break; /* TB_MSG_QUIT or anything unexpected */
    }
    tb_wire_reader_free(&rd);
    if (w.ctx)
        w.ops->destroy(w.ctx);
    free(w.scratch);
#ifdef TB_LSAN
    __lsan_do_leak_check(); /* _exit skips LSan's atexit check */
#endif
    /* _exit: the runner's atexit handlers and stdio buffers are not ours. */
    _exit(0);
}

/* ------------------------------------------------------ the parent's side */

int tb_worker_spawn(const tb_plan *plan, size_t backend, tb_worker_proc *w)
{
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(from, O_CLOEXEC) != 0) {
        close(to[0]);
        close(to[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        /* Die with the runner, even a SIGKILLed one: an orphan would keep
         * running (and holding a GPU) with no deadline over it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1); /* it died before prctl */
        /* Keep stdio and the two pipe ends only: a server's sockets must
         * close when the server closes them, not when the worker dies. */
        unsigned lo = (unsigned)(to[0] < from[1] ? to[0] : from[1]);
        unsigned hi = (unsigned)(to[0] < from[1] ? from[1] : to[0]);
        if (lo > 3)
            close_range(3, lo - 1, 0);
        if (hi > lo + 1)
            close_range(lo + 1, hi - 1, 0);
        close_range(hi + 1, ~0u, 0);
        tb_worker_main(plan, backend, to[0], from[1]);
    }
    close(to[0]);
    close(from[1]);
    w->pid = pid;
    w->to_fd = to[1];
    w->from_fd = from[0];
    return 0;
}

char *tb_worker_reap(tb_worker_proc *w, int killed_by_us)
{
    int status = 0;
    struct rusage ru = {0};
    pid_t r;
    do
        r = wait4(w->pid, &status, 0, &ru);
    while (r < 0 && errno == EINTR);
    close(w->to_fd);
    close(w->from_fd);
    w->pid = 0;
    if (killed_by_us)
        return NULL;
    if (r < 0)
        return tb_xasprintf("backend process lost: %s", strerror(errno));
    /* The peak resident size tells a leak (or a memory_limit reached)
     * from a plain bug. */
    long peak_mib = ru.ru_maxrss / 1024;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        return tb_xasprintf("backend process crashed: killed by signal %d (%s%s%s%s)%s; peak RSS %ld MiB", sig,
                            abbrev ? "SIG" : "", abbrev ? abbrev : "", abbrev ? ", " : "", strsignal(sig),
                            sig == SIGKILL ? "; possibly out of memory (the kernel's OOM killer sends SIGKILL)"
                            : sig == SIGBUS ? "; a memory-mapped file (a model?) was truncated, or its storage failed"
                                            : "",
                            peak_mib);
    }
    return tb_xasprintf("backend process crashed: exited with status %d before finishing the case; peak RSS %ld MiB",
                        WEXITSTATUS(status), peak_mib);
}

void tb_worker_kill(tb_worker_proc *w)
{
    if (!w->pid)
        return;
    kill(w->pid, SIGKILL);
    free(tb_worker_reap(w, 1));
}
