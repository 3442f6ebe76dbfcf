/* worker.c — the backend's side of a run, in a process of its own: the
 * fork that starts it and the loop of tb_worker_main, which answers each
 * request through one table of the messages it reads.
 *
 * The runner forks one worker per backend; the worker owns the plugin's
 * context (and with it any CUDA context), runs cases on request and sends
 * back raw timings. It computes no metric: the runner derives every
 * figure from these raw events, the same way for every backend. The
 * plugin calls back through the host table (worker_host.c).
 *
 * `tokbench serve` uses the same process in live mode (worker_serve.c): it
 * asks for one batch of prompts at a time, and every emission is sent at
 * once, with the text it adds, so that the server can stream it.
 *
 * The top of the worker's files (worker_state.h lists them): it calls
 * them all, none of them calls it. */
#define _GNU_SOURCE
#include "worker.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "utf8.h"
#include "util.h"
#include "wire.h"
#include "worker_host.h"
#include "worker_serve.h"
#include "worker_state.h"

/* Emissions one generate() call may make: 4 per output token per
 * request, plus slack. A sane backend makes at most one per token
 * (plugins/http fails a stream with more than 4 x max_tokens + 16 text
 * chunks); past this bound it floods the event sink, and the buffer, the
 * result message, the runner's decoding and the stored emissions would
 * grow without bound. */
#define EMIT_PER_TOKEN 4
#define EMIT_SLACK 1024

static void send_status(tb_worker *w, uint32_t type, int32_t status, int reused, int64_t load_ns,
                        const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void send_status(tb_worker *w, uint32_t type, int32_t status, int reused, int64_t load_ns,
                        const char *extra, const char *fmt, ...)
{
    tb_wire_status st = {.status = status, .reused = reused, .load_ns = load_ns};
    char raw[sizeof st.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* plugin text (last_error(), probe's why, describe()) made valid
     * UTF-8 here, where it enters: the store and reports bind it as is */
    tb_utf8_copy_valid(st.message, sizeof st.message, raw, sizeof raw);
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&st, sizeof st);
    if (extra)
        tb_utf8_append_valid(&b, extra, strlen(extra));
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

/* detokenize → tokenize: the output length as the tokenizer counts it
 * (stored; the count's check when the backend returned text alone:
 * tb_count_mismatch). -1 when the backend has no tokenizer or a call
 * fails. */
static int32_t recount(tb_worker *w, const tb_request_result *r)
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
static int ensure_context(tb_worker *w, const tb_case *c)
{
    if (w->ctx && w->ctx_load_key && strcmp(w->ctx_load_key, c->load_key) == 0) {
        send_status(w, TB_MSG_LOADED, TB_OK, 1, 0, NULL, "reused");
        return 0;
    }
    if (w->ctx) {
        tb_worker_serve_step_close(w); /* a session lives in the context */
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
    err[sizeof err - 1] = '\0'; /* the plugin's buffer: it may not have ended it */
    if (s != TB_OK || !w->ctx) {
        if (!err[0] && w->ctx)
            tb_strlcpy(err, w->ops->last_error(w->ctx), sizeof err);
        if (w->ctx) {
            w->ops->destroy(w->ctx);
            w->ctx = NULL;
        }
        send_status(w, TB_MSG_LOADED, s == TB_OK ? TB_ERR : (int32_t)s, 0, load_ns, NULL,
                    "create() failed (%s): %s", tb_status_name(s == TB_OK ? TB_ERR : s),
                    err[0] ? err : "no message");
        return -1;
    }
    const char *desc = w->ops->describe ? w->ops->describe(w->ctx) : NULL;
    /* read no further than the limit: a longer one fails the load */
    if (desc && strnlen(desc, TB_DESCRIBE_MAX + 1) > TB_DESCRIBE_MAX) {
        w->ops->destroy(w->ctx);
        w->ctx = NULL;
        send_status(w, TB_MSG_LOADED, TB_ERR, 0, load_ns, NULL,
                    "describe() returned more than %u bytes (TB_DESCRIBE_MAX, backend.h); the load failed",
                    (unsigned)TB_DESCRIBE_MAX);
        return -1;
    }
    w->ctx_load_key = tb_xstrdup(c->load_key);
    send_status(w, TB_MSG_LOADED, TB_OK, 0, load_ns, desc ? desc : "", "loaded");
    return 0;
}

/* The emissions one call of case c may make before it is a flood:
 * EMIT_PER_TOKEN per output token per request plus slack, and never more
 * than one message to the runner can carry. */
static size_t emission_limit(uint32_t n_req, uint32_t max_new_tokens)
{
    const uint64_t frame_events = TB_WIRE_MAX_FRAME / sizeof(tb_emission);
    uint64_t per_token = (uint64_t)n_req * ((uint64_t)max_new_tokens + 4);
    if (per_token > frame_events)
        return (size_t)frame_events;
    uint64_t lim = EMIT_PER_TOKEN * per_token + EMIT_SLACK;
    return (size_t)(lim < frame_events ? lim : frame_events);
}

/* Output positions past max_tokens that a block-decoding backend
 * (TB_CAP_BLOCKS) may report when the case sets no block_length: its
 * canvas is rounded up to a whole block of the model's own size, which
 * the host does not know. No published block is near it. */
#define BLOCK_SLACK 4096

/* The tokens a prompt may have past the most its text or the case makes
 * of it: what an engine or a server's count adds (a BOS token, a
 * tokenizer's dummy prefix). */
#define PROMPT_SLACK 16
/* The longest prompt a backend that draws its own workload may report
 * (tb_result.prompt_tokens): its dataset holds at most 1 GiB of text
 * (docs/METRICS.md, "Serving workloads"), at most a token a byte, and a
 * conversation's history adds its answers: twice that. */
#define PROMPT_MAX (UINT32_C(1) << 31)

/* The most tokens request i's prompt can have had (tb_result.prompt_tokens,
 * backend.h): a text the host gave (a prompt set's item) at most one a
 * byte -- a tokenizer makes no token of less than a byte and tokenize()
 * adds no special token --, a synthetic prompt exactly the case's
 * prompt_tokens (tb_request), each with PROMPT_SLACK; a serving backend
 * that draws its own lengths (a distribution, a dataset, a conversation's
 * history: only they set their own submit times too) PROMPT_MAX. */
static uint64_t prompt_bound(uint32_t caps, const char *text, uint32_t prompt_tokens)
{
    if (text)
        return (uint64_t)strlen(text) + PROMPT_SLACK;
    if (caps & (TB_CAP_CONCURRENCY | TB_CAP_REQUEST_RATE))
        return PROMPT_MAX;
    return (uint64_t)prompt_tokens + PROMPT_SLACK;
}

/* A failed request's counts that no backend can have, dropped (0: not
 * reported): steps and blocks without their capability, more blocks
 * than output tokens, a prompt past p_max. */
static void drop_impossible(tb_raw_request *q, uint32_t caps, uint64_t p_max)
{
    if (!(caps & TB_CAP_STEPS))
        q->steps_done = 0;
    if (!(caps & TB_CAP_BLOCKS) || q->blocks_done > q->n_output_tokens)
        q->blocks_done = 0;
    if (q->prompt_tokens > p_max)
        q->prompt_tokens = 0;
}

/* ms from t_call to t, for messages (in double: the plugin's t may be
 * anything, and an int64 difference could overflow) */
static double ms_of(int64_t t, int64_t t_call)
{
    return ((double)t - (double)t_call) * 1e-6;
}

/* The one check of what a plugin reports of a call (include/tokbench/
 * backend.h's promises), before anything is derived from it: a figure
 * no backend can measure fails its request (status TB_ERR, the reason in
 * its error) so that it is never stored as a measurement. Requests
 * wr[0..n) as resolved from tb_request_result (t_submit_ns never 0),
 * the call's emissions em->ev, the host's clock around generate():
 * [t_call, t_ret]. Counts: at most 4 x what the request asked for
 * (max_tokens, a block backend's rounded up to a whole block) + 16; a
 * max_tokens within the 4 x max_new_tokens the case's buffers hold; an
 * answer within its output; the tokens its emissions carry within its
 * output (every shipped backend emits each output token once at most:
 * ar, flow, null one emission per token or canvas, diffusion each
 * committed position once, http a chunk's usage delta or 1, and it fails
 * a usage below its chunks); steps_done only from a TB_CAP_STEPS
 * backend, blocks_done only from a TB_CAP_BLOCKS one and within its
 * output (a block holds an output position at least); a prompt within
 * prompt_bound() (ptext: the call's prompt texts, or NULL). Times: every one inside the call and in
 * order (submit <= each emission <= done; each canvas committed within
 * [submit, done], done being the request's done time, else its last
 * emission where they are timings, else the call's return: the done
 * docs/METRICS.md derives). A request failed here keeps
 * no figure of its own: its times become the call's, its emissions are
 * dropped, its ids are not read. canvas: NULL (not a canvas model), or
 * the requests' canvases [n] (wr[i].has_canvas says which have any). bad[n],
 * last_em[n], emitted[n]: scratch. A failed request's figures that no
 * backend can have (steps, blocks without their capability, a prompt
 * past its bound) are dropped (0: not reported). */
static void check_figures(const tb_case *c, uint32_t caps, uint32_t max_new_tokens, const char *const *ptext,
                          tb_raw_request *wr, uint32_t n, tb_canvas_counts *canvas, tb_request_result *rr,
                          tb_emit_buf *em, unsigned char *bad, int64_t *last_em, uint64_t *emitted, int64_t t_call,
                          int64_t t_ret)
{
    uint64_t slack = !(caps & TB_CAP_BLOCKS) ? 0 : c->block_length ? c->block_length - 1 : BLOCK_SLACK;
    const double call_ms = ms_of(t_ret, t_call);
    memset(bad, 0, n);
    memset(last_em, 0, n * sizeof *last_em);
    memset(emitted, 0, n * sizeof *emitted);
    for (size_t e = 0; e < em->n; e++) {
        const tb_emission *x = &em->ev[e];
        if (x->request >= n)
            continue;
        emitted[x->request] += x->n_tokens;
        /* without streaming its emissions are no timings: done is the call's return */
        if ((caps & TB_CAP_STREAMING) && x->t_ns > last_em[x->request])
            last_em[x->request] = x->t_ns;
    }
    for (uint32_t i = 0; i < n; i++) {
        tb_raw_request *q = &wr[i];
        uint64_t p_max = prompt_bound(caps, ptext ? ptext[i] : NULL, c->prompt_tokens);
        int times_ok = q->t_submit_ns >= t_call && q->t_submit_ns <= t_ret &&
                       (!q->t_done_ns || (q->t_done_ns >= q->t_submit_ns && q->t_done_ns <= t_ret));
        /* where its canvases' commits may lie: up to its done (an emission
         * past it fails below on its own) */
        int64_t done = q->t_done_ns ? q->t_done_ns : last_em[i] ? last_em[i] : t_ret;
        if (q->status != TB_OK) { /* failed already: only its figures made sane (2: no new reason) */
            char ignored[120];
            drop_impossible(q, caps, p_max);
            if (tb_spec_check(&q->spec, ignored, sizeof ignored))
                memset(&q->spec, 0, sizeof q->spec);
            if (q->has_canvas && (!times_ok || tb_canvas_check(&canvas[i], q->n_output_tokens, q->steps_done,
                                                               q->t_submit_ns, done, ignored, sizeof ignored)))
                q->has_canvas = 0;
            bad[i] = times_ok ? 0 : 2;
            continue;
        }
        /* as many tokens as emissions may come (a server's usage counted
         * in streamed chunks: plugins/http's own bound, and the flood's) */
        uint64_t bound = EMIT_PER_TOKEN * ((uint64_t)q->max_tokens + slack) + 16;
        char why[160] = ""; /* one line of numbers: well inside q->error */
        char spec_why[120];
        if ((uint64_t)q->max_tokens > 4 * (uint64_t)max_new_tokens) /* what the case's buffers hold */
            snprintf(why, sizeof why, "max_tokens %u over 4 x max_new_tokens %u", q->max_tokens, max_new_tokens);
        else if (q->n_output_tokens > bound)
            snprintf(why, sizeof why, "%u output tokens for max_tokens %u (at most %llu)", q->n_output_tokens,
                     q->max_tokens, (unsigned long long)bound);
        else if (rr[i].output_ids && rr[i].n_output_ids > bound)
            snprintf(why, sizeof why, "%u output ids for max_tokens %u (at most %llu)", rr[i].n_output_ids,
                     q->max_tokens, (unsigned long long)bound);
        else if (q->answer_tokens != TB_UNKNOWN_COUNT && q->answer_tokens > q->n_output_tokens)
            snprintf(why, sizeof why, "an answer of %u tokens in %u output tokens", q->answer_tokens,
                     q->n_output_tokens);
        else if (emitted[i] > q->n_output_tokens)
            snprintf(why, sizeof why, "%llu tokens emitted for %u output tokens", (unsigned long long)emitted[i],
                     q->n_output_tokens);
        else if (q->steps_done && !(caps & TB_CAP_STEPS))
            snprintf(why, sizeof why, "steps_done %u from a backend without TB_CAP_STEPS", q->steps_done);
        else if (q->blocks_done && !(caps & TB_CAP_BLOCKS))
            snprintf(why, sizeof why, "blocks_done %u from a backend without TB_CAP_BLOCKS", q->blocks_done);
        else if (q->blocks_done > q->n_output_tokens)
            snprintf(why, sizeof why, "blocks_done %u for %u output tokens (a block holds one at least)",
                     q->blocks_done, q->n_output_tokens);
        else if (q->prompt_tokens > p_max)
            snprintf(why, sizeof why, "prompt_tokens %u for a prompt of at most %llu (%s)", q->prompt_tokens,
                     (unsigned long long)p_max,
                     ptext && ptext[i] ? "tokens: one a byte of its text, + 16"
                     : p_max == PROMPT_MAX ? "tokens: 1 GiB of text, twice" : "the case's prompt_tokens + 16");
        else if (q->t_submit_ns < t_call || q->t_submit_ns > t_ret)
            snprintf(why, sizeof why, "sent at %+.3f ms of a call of %.3f ms", ms_of(q->t_submit_ns, t_call),
                     call_ms);
        else if (!times_ok)
            snprintf(why, sizeof why, "done at %+.3f ms of a call of %.3f ms (sent at %+.3f ms)",
                     ms_of(q->t_done_ns, t_call), call_ms, ms_of(q->t_submit_ns, t_call));
        else if (tb_spec_check(&q->spec, spec_why, sizeof spec_why))
            snprintf(why, sizeof why, "speculative counts: %s", spec_why);
        else if (q->has_canvas && tb_canvas_check(&canvas[i], q->n_output_tokens, q->steps_done, q->t_submit_ns,
                                                  done, spec_why, sizeof spec_why))
            snprintf(why, sizeof why, "canvases: %s", spec_why);
        if (why[0]) {
            bad[i] = 1;
            snprintf(q->error, sizeof q->error, "impossible figure: %s", why);
            drop_impossible(q, caps, p_max);
        }
    }
    for (size_t e = 0; e < em->n; e++) {
        const tb_emission *x = &em->ev[e];
        uint32_t i = x->request;
        if (i >= n || bad[i])
            continue;
        const tb_raw_request *q = &wr[i];
        if (x->t_ns < q->t_submit_ns || x->t_ns > (q->t_done_ns ? q->t_done_ns : t_ret)) {
            bad[i] = q->status == TB_OK ? 1 : 2;
            if (bad[i] == 1)
                snprintf(wr[i].error, sizeof wr[i].error,
                     "impossible figure: tokens emitted at %+.3f ms of a call of %.3f ms (sent at %+.3f ms%s)",
                     ms_of(x->t_ns, t_call), call_ms, ms_of(q->t_submit_ns, t_call),
                     q->t_done_ns ? ", done before" : "");
        }
    }
    int any = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!bad[i])
            continue;
        any = 1;
        wr[i].t_submit_ns = t_call;
        wr[i].t_done_ns = t_ret;
        memset(&wr[i].spec, 0, sizeof wr[i].spec); /* no figure of its own */
        wr[i].has_canvas = 0;
        if (bad[i] == 2)
            continue;
        wr[i].status = rr[i].status = TB_ERR; /* its outputs are not graded either */
        rr[i].output_ids = NULL;
        rr[i].n_output_ids = 0;
    }
    if (any) {
        size_t kept = 0;
        for (size_t e = 0; e < em->n; e++)
            if (em->ev[e].request >= n || !bad[em->ev[e].request])
                em->ev[kept++] = em->ev[e];
        em->n = kept;
    }
}

/* The most client_busy (backend.h: 0..1) a call may report: 1, and the
 * rounding of the two clocks it divides (thread CPU and the kernel's run
 * delay over the monotonic wall); stored as at most 1. */
#define CLIENT_BUSY_MAX 1.01

/* A call's own figures that no backend can measure (phase times outside
 * the call, negative counts, a non-finite roofline, a client busier
 * than its CPU): NULL, or why. */
static const char *impossible_call(const tb_result *res, int64_t elapsed, char *why, size_t n)
{
    const char *name = NULL;
    int64_t v = 0;
    if (res->prefill_ns != -1 && (res->prefill_ns < 0 || res->prefill_ns > elapsed))
        name = "prefill_ns", v = res->prefill_ns;
    else if (res->decode_ns != -1 && (res->decode_ns < 0 || res->decode_ns > elapsed))
        name = "decode_ns", v = res->decode_ns;
    else if (res->forward_passes < 0)
        name = "forward_passes", v = res->forward_passes;
    else if (res->peak_device_bytes < -1)
        name = "peak_device_bytes", v = res->peak_device_bytes;
    else if (res->energy_mj < -1)
        name = "energy_mj", v = res->energy_mj;
    else if (res->draft_ns < 0 || res->draft_ns > elapsed ||
             (res->decode_ns > 0 && res->draft_ns > res->decode_ns))
        name = "draft_ns", v = res->draft_ns;
    if (name) {
        snprintf(why, n, "%s = %lld (a call of %lld ns)", name, (long long)v, (long long)elapsed);
        return why;
    }
    if (!(res->client_busy >= 0 && res->client_busy <= CLIENT_BUSY_MAX)) {
        snprintf(why, n, "client_busy = %g (backend.h: 0..1)", res->client_busy);
        return why;
    }
    const double roof[] = {res->flops, res->bytes, res->peak_flops, res->peak_bytes_per_s};
    const char *const roof_name[] = {"flops", "bytes", "peak_flops", "peak_bytes_per_s"};
    for (int k = 0; k < 4; k++)
        if (!(roof[k] >= 0 && isfinite(roof[k]))) {
            snprintf(why, n, "%s = %g", roof_name[k], roof[k]);
            return why;
        }
    return NULL;
}

/* What prompt request i of a call was given (tb_result.prompt_hash in
 * backend.h): the backend's own hash when it gave one, else a hash of the
 * prompt set's text, else of what the ABI makes a synthetic prompt of:
 * the seed, the request's index and prompt_tokens. Never 0. */
static uint64_t prompt_hash(uint64_t reported, const char *text, uint64_t seed, uint32_t i, uint32_t prompt_tokens)
{
    uint64_t h = reported;
    if (!h && text) {
        h = fnv1a(1469598103934665603ULL, "text", 4);
        h = fnv1a(h, text, strlen(text));
    } else if (!h) {
        uint64_t key[3] = {seed, i, prompt_tokens};
        h = fnv1a(fnv1a(1469598103934665603ULL, "synthetic", 9), key, sizeof key);
    }
    return h ? h : 1;
}

/* The buffers of one case, sized before its first call. */
/* Forget the whole messages of the last call (tb_host.request_error). */
static void clear_errors(tb_emit_buf *b)
{
    for (uint32_t i = 0; b->errors && i < b->n_requests; i++)
        free(b->errors[i]);
    free(b->errors);
    b->errors = NULL;
}

typedef struct case_bufs {
    const char **ptext;      /* prompt set texts of the call's requests */
    int32_t *pidx;           /* their items; -1: synthetic */
    uint32_t *scored;
    uint64_t *phash;         /* tb_result.prompt_hash */
    uint32_t *ptok, *mtok;   /* tb_result.prompt_tokens, max_tokens */
    uint32_t *blocks;        /* tb_result.blocks_done */
    tb_spec_counts *spec;    /* tb_result.spec */
    tb_canvas_counts *canvas; /* tb_result.canvas */
    unsigned char *bad;      /* check_figures' scratch */
    int64_t *last_em;        /* check_figures' scratch */
    uint64_t *emitted;       /* check_figures' scratch */
    tb_request_result *rr;   /* what the plugin fills */
    tb_raw_request *wr;      /* what goes to the runner */
    tb_str texts, out;
} case_bufs;

static void case_bufs_free(case_bufs *b)
{
    free(b->ptext);
    free(b->pidx);
    free(b->scored);
    free(b->phash);
    free(b->ptok);
    free(b->mtok);
    free(b->blocks);
    free(b->spec);
    free(b->canvas);
    free(b->bad);
    free(b->last_em);
    free(b->emitted);
    free(b->rr);
    free(b->wr);
    tb_str_free(&b->texts);
    tb_str_free(&b->out);
}

static void run_case(tb_worker *w, const tb_case *c)
{
    if (ensure_context(w, c) != 0)
        return;
    const tb_suite *s = w->plan->suite;
    const tb_plan *plan = w->plan;
    uint32_t n_req = c->requests ? c->requests : c->batch;
    /* With a prompt set, a repetition is one pass over it. */
    uint32_t per_pass = tb_plan_calls_per_pass(plan, c);
    int n_calls = s->warmup + s->repeat * (int)per_pass;
    tb_wire_case hdr = {.n_calls = (uint32_t)n_calls};

    /* The case's buffers, sized before any call (the plan bounds them:
     * tb_case_result_bytes); a machine without that much memory fails the
     * case, it does not abort this process. */
    case_bufs b = {
        .ptext = plan->n_prompts ? calloc(n_req, sizeof *b.ptext) : NULL,
        .pidx = calloc(n_req, sizeof *b.pidx),
        .scored = calloc(n_req, sizeof *b.scored),
        .phash = calloc(n_req, sizeof *b.phash),
        .ptok = calloc(n_req, sizeof *b.ptok),
        .mtok = calloc(n_req, sizeof *b.mtok),
        .blocks = calloc(n_req, sizeof *b.blocks),
        .spec = calloc(n_req, sizeof *b.spec),
        /* a canvas model's records (~6 KB a request): TB_CAP_STEPS only */
        .canvas = w->ops->capabilities & TB_CAP_STEPS ? calloc(n_req, sizeof *b.canvas) : NULL,
        .bad = calloc(n_req, 1),
        .last_em = calloc(n_req, sizeof *b.last_em),
        .emitted = calloc(n_req, sizeof *b.emitted),
        .rr = calloc(n_req, sizeof *b.rr),
        .wr = calloc(n_req, sizeof *b.wr),
    };
    size_t want = (size_t)n_req * ((size_t)tb_case_emissions(plan, c) + 4);
    w->em.limit = emission_limit(n_req, c->max_new_tokens);
    if (want > w->em.limit)
        want = w->em.limit;
    if (w->em.cap < want) {
        tb_emission *ev = tb_realloc_array(w->em.ev, want, sizeof *ev);
        if (ev) {
            w->em.ev = ev;
            w->em.cap = want;
        }
    }
    w->em.n_requests = n_req;
    if ((plan->n_prompts && !b.ptext) || !b.pidx || !b.scored || !b.phash || !b.ptok || !b.mtok || !b.blocks || !b.spec || (!b.canvas && (w->ops->capabilities & TB_CAP_STEPS)) || !b.bad || !b.last_em || !b.emitted || !b.rr || !b.wr || w->em.cap < want ||
        tb_str_try_appendn(&b.out, (const char *)&hdr, sizeof hdr) != 0) {
        send_status(w, TB_MSG_CASE_ERROR, TB_ERR_NO_MEMORY, 0, 0, NULL,
                    "out of memory for the case's buffers: %u requests, %zu emissions (%zu bytes)", n_req, want,
                    want * sizeof(tb_emission));
        goto done;
    }

    for (int call = 0; call < n_calls; call++) {
        int64_t t_setup = tb_now_ns();
        int warm = call < s->warmup;
        for (uint32_t i = 0; i < n_req; i++) {
            b.pidx[i] = -1;
            b.scored[i] = 0;
            if (!b.ptext)
                continue;
            /* warm-ups: the first prompts; pass k, call j: prompts j*n_req.. */
            size_t at = warm ? (size_t)call * n_req + i
                             : (size_t)((call - s->warmup) % (int)per_pass) * n_req + i;
            b.scored[i] = !warm && at < plan->n_prompts;
            b.pidx[i] = (int32_t)(at % plan->n_prompts);
            b.ptext[i] = plan->prompts.items[b.pidx[i]].prompt;
        }
        tb_request req = tb_case_request(plan, c);
        req.n_requests = n_req;
        req.seed = s->seed;
        req.repetition = (uint32_t)(warm ? call : call - s->warmup);
        req.is_warmup = (uint32_t)warm;
        req.prompt_text = b.ptext;
        memset(b.rr, 0, n_req * sizeof *b.rr);
        memset(b.phash, 0, n_req * sizeof *b.phash);
        memset(b.ptok, 0, n_req * sizeof *b.ptok);
        memset(b.mtok, 0, n_req * sizeof *b.mtok);
        memset(b.blocks, 0, n_req * sizeof *b.blocks);
        memset(b.spec, 0, n_req * sizeof *b.spec);
        if (b.canvas)
            memset(b.canvas, 0, n_req * sizeof *b.canvas);
        for (uint32_t i = 0; i < n_req; i++)
            b.rr[i].n_answer_tokens = TB_UNKNOWN_COUNT;
        tb_result res = {.struct_size = sizeof res, .n_requests = n_req, .requests = b.rr,
                         .prefill_ns = -1, .decode_ns = -1, .forward_passes = 0,
                         .peak_device_bytes = -1, .energy_mj = -1, .prompt_hash = b.phash,
                         .prompt_tokens = b.ptok, .max_tokens = b.mtok, .blocks_done = b.blocks,
                         .spec = b.spec, .draft_ns = 0, .canvas = b.canvas};
        w->em.n = 0;
        w->em.dropped = 0;
        w->em.flood = 0;
        w->em.nomem = 0;

        clear_errors(&w->em);
        int64_t t_call = tb_now_ns();
        tb_status st = w->ops->generate(w->ctx, &req, &res);
        int64_t t_ret = tb_now_ns();
        w->em.flood_stop = 0;

        if (w->em.nomem) { /* emissions were dropped: not a measurement */
            send_status(w, TB_MSG_CASE_ERROR, TB_ERR_NO_MEMORY, 0, 0, NULL,
                        "out of memory at %s %d: the emission buffer could not grow past %zu events; case failed",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, w->em.cap);
            goto done;
        }
        if (w->em.flood) { /* whatever generate() returned: not a measurement */
            send_status(w, TB_MSG_CASE_ERROR, TB_ERR, 0, 0, NULL,
                        "event flood at %s %d: the backend emitted over %zu events for %u requests of %u "
                        "tokens (%llu more dropped); case failed",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, w->em.limit, n_req,
                        c->max_new_tokens, (unsigned long long)w->em.flood);
            goto done;
        }
        if (st != TB_OK) {
            const char *e = w->ops->last_error(w->ctx);
            send_status(w, TB_MSG_CASE_ERROR, st, 0, 0, NULL, "generate() failed at %s %d (%s): %s",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, tb_status_name(st),
                        e && *e ? e : "no message");
            goto done;
        }
        if (w->em.dropped)
            w->host.log(&w->host, TB_LOG_WARN, "%u emissions named a request out of range; dropped",
                        w->em.dropped);
        /* A load a duration ended: the requests never sent are not part
         * of the call (nor any emission of theirs). */
        if (res.n_unsent >= n_req) {
            send_status(w, TB_MSG_CASE_ERROR, TB_ERR, 0, 0, NULL,
                        "the backend said %u of %u requests were not sent at %s %d (at least one must be); case "
                        "failed", res.n_unsent, n_req, warm ? "warm-up" : "repetition", (int)req.repetition + 1);
            goto done;
        }
        char call_why[256];
        if (impossible_call(&res, t_ret - t_call, call_why, sizeof call_why)) {
            send_status(w, TB_MSG_CASE_ERROR, TB_ERR, 0, 0, NULL, "impossible figure at %s %d: %s; case failed",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, call_why);
            goto done;
        }
        uint32_t n_call = n_req - res.n_unsent;
        const int serving = (w->ops->capabilities & (TB_CAP_CONCURRENCY | TB_CAP_REQUEST_RATE)) != 0;
        if (res.n_unsent) {
            size_t kept = 0;
            for (size_t e = 0; e < w->em.n; e++)
                if (w->em.ev[e].request < n_call)
                    w->em.ev[kept++] = w->em.ev[e];
            w->em.n = kept;
        }
        for (uint32_t i = 0; i < n_call; i++) {
            tb_request_result *r = &b.rr[i];
            tb_raw_request *q = &b.wr[i];
            memset(q, 0, sizeof *q);
            /* backend.h: a batch backend's requests are sent when the call
             * starts, which the host knows best; only a serving backend
             * (a schedule of its own) says when each was sent */
            q->t_submit_ns = serving && r->t_submit_ns ? r->t_submit_ns : t_call;
            q->t_done_ns = r->t_done_ns;
            q->status = r->status;
            q->n_output_tokens = r->n_output_tokens;
            q->steps_done = r->steps_done;
            q->blocks_done = b.blocks[i];
            q->spec = b.spec[i];
            q->has_canvas = b.canvas && (b.canvas[i].n || b.canvas[i].n_past);
            q->answer_tokens = r->n_answer_tokens;
            q->prompt_hash = prompt_hash(b.phash[i], b.ptext ? b.ptext[i] : NULL, req.seed, i, req.prompt_tokens);
            /* A failure always says something: the status's name at least. */
            const char *whole = r->status != TB_OK && w->em.errors ? w->em.errors[i] : NULL;
            /* the plugin's error[128] may lack its NUL: read within it;
             * its text made valid UTF-8 (send_status) */
            if (whole)
                tb_utf8_copy_valid(q->error, sizeof q->error, whole, strlen(whole));
            else if (r->status == TB_OK || r->error[0])
                tb_utf8_copy_valid(q->error, sizeof q->error, r->error, sizeof r->error);
            else
                tb_strlcpy(q->error, tb_status_name(r->status), sizeof q->error);
            q->prompt_idx = b.pidx[i];
            q->scored = b.scored[i];
            q->prompt_tokens = b.ptok[i];
            q->max_tokens = b.mtok[i] ? b.mtok[i] : req.max_new_tokens;
        }
        /* before anything reads the outputs the counts describe */
        check_figures(c, w->ops->capabilities, req.max_new_tokens, b.ptext, b.wr, n_call, b.canvas, b.rr, &w->em, b.bad,
                      b.last_em, b.emitted, t_call, t_ret);
        for (uint32_t i = 0; i < n_call; i++) {
            tb_request_result *r = &b.rr[i];
            tb_raw_request *q = &b.wr[i];
            q->recount = r->status == TB_OK ? recount(w, r) : -1;
            /* what its count is held to (tb_count_mismatch): the ids it
             * returned, else the re-count of its text */
            q->has_ids = r->output_ids != NULL;
            q->n_ids = r->output_ids ? r->n_output_ids : 0;
            if (r->output_ids)
                q->output_hash = fnv1a(1469598103934665603ULL, r->output_ids,
                                       r->n_output_ids * sizeof(int32_t));
            else if (r->output_text)
                q->output_hash = fnv1a(1469598103934665603ULL, r->output_text, strlen(r->output_text));
            if (b.ptext) { /* the answer text, for the scorers */
                size_t before = b.texts.len;
                tb_worker_answer_text(w, r, &b.texts);
                q->text_len = (uint32_t)(b.texts.len - before);
            }
        }
        tb_raw_call wc = {
            .is_warmup = (uint32_t)warm,
            .n_requests = n_call,
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
            .client_busy = res.client_busy < 1 ? res.client_busy : 1, /* within CLIENT_BUSY_MAX */
            .expert_reads = res.expert_reads > 0 && res.moe_tokens > 0 ? res.expert_reads : 0,
            .moe_tokens = res.expert_reads > 0 && res.moe_tokens > 0 ? res.moe_tokens : 0,
            .draft_ns = res.draft_ns,
        };
        wc.runner_ns = (t_call - t_setup) + (tb_now_ns() - t_ret);
        /* The whole case is one message: past TB_WIRE_MAX_FRAME the runner
         * would refuse it (the plan's estimate counts one emission per
         * token and no texts; this call brought more). */
        size_t add = sizeof wc + n_call * sizeof *b.wr + w->em.n * sizeof *w->em.ev + b.texts.len;
        for (uint32_t i = 0; i < n_call; i++)
            add += b.wr[i].has_canvas ? TB_CANVAS_WIRE_BYTES(b.canvas[i].n) : 0;
        const char *why = NULL;
        if (add > TB_WIRE_MAX_FRAME - b.out.len)
            why = "more than the 1 GiB a message from the backend process may carry";
        else if (tb_str_try_appendn(&b.out, (const char *)&wc, sizeof wc) != 0 ||
                 tb_str_try_appendn(&b.out, (const char *)b.wr, n_call * sizeof *b.wr) != 0 ||
                 tb_str_try_appendn(&b.out, (const char *)w->em.ev, w->em.n * sizeof *w->em.ev) != 0)
            why = "out of memory";
        /* then the canvas records (tb_wire_decode_result's order) */
        for (uint32_t i = 0; !why && i < n_call; i++)
            if (b.wr[i].has_canvas &&
                tb_str_try_appendn(&b.out, (const char *)&b.canvas[i], TB_CANVAS_WIRE_BYTES(b.canvas[i].n)) != 0)
                why = "out of memory";
        if (!why && b.texts.len && tb_str_try_appendn(&b.out, b.texts.s, b.texts.len) != 0)
            why = "out of memory";
        if (why) {
            send_status(w, TB_MSG_CASE_ERROR, why[0] == 'o' ? TB_ERR_NO_MEMORY : TB_ERR, 0, 0, NULL,
                        "the measurements up to %s %d (%zu bytes: %u requests, %zu emissions, %zu bytes of text "
                        "in this call) are %s; case failed",
                        warm ? "warm-up" : "repetition", (int)req.repetition + 1, b.out.len + add, n_req, w->em.n,
                        b.texts.len, why);
            goto done;
        }
        b.texts.len = 0;
        /* the runner's progress: between calls, outside the timed region
         * and runner_us; a runner gone is found by the RESULT's send */
        tb_wire_progress pr = {.calls_done = (uint32_t)call + 1, .n_calls = (uint32_t)n_calls};
        tb_wire_send(w->fd_out, TB_MSG_PROGRESS, &pr, sizeof pr);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        ((tb_wire_case *)b.out.s)->host_peak_rss = (int64_t)ru.ru_maxrss * 1024;
    if (tb_wire_send(w->fd_out, TB_MSG_RESULT, b.out.s, b.out.len) != 0)
        _exit(3);
done:
    clear_errors(&w->em); /* sized for this case's n_requests */
    case_bufs_free(&b);
}

/* JUDGE: load the judge's context, then loglik() of every pair;
 * answered by LOADED, then JUDGED. */
static void judge_pairs(tb_worker *w, const char *buf, size_t len)
{
    tb_wire_judge h; /* len >= sizeof h: the message table checked it */
    memcpy(&h, buf, sizeof h);
    if (!TB_STRUCT_HAS(w->ops, tb_backend_ops, loglik) || !w->ops->loglik) {
        send_status(w, TB_MSG_LOADED, TB_ERR_UNSUPPORTED, 0, 0, NULL, "plugin %s has no loglik()", w->ops->name);
        return;
    }
    const tb_case *c = h.case_index < w->plan->n_cases ? &w->plan->cases[h.case_index]
                       : h.case_index == TB_WIRE_JUDGE_LOAD && w->plan->has_judge_load ? &w->plan->judge_load
                                                                                       : NULL;
    if (!c) {
        send_status(w, TB_MSG_LOADED, TB_ERR_INVALID, 0, 0, NULL, "no case %u", h.case_index);
        return;
    }
    if (ensure_context(w, c) != 0)
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
        if (tb_worker_cancel_requested()) {
            out[i].status = TB_ERR_CANCELLED;
            continue;
        }
        double sum = 0;
        uint32_t n = 0;
        out[i].status = w->ops->loglik(w->ctx, ctx_text, cont, &sum, &n);
        out[i].sum_logprob = sum;
        out[i].n_tokens = n;
        if (out[i].status != TB_OK)
            w->host.log(&w->host, TB_LOG_WARN, "loglik failed on pair %u: %s", i, w->ops->last_error(w->ctx));
    }
    if (tb_wire_send(w->fd_out, TB_MSG_JUDGED, out, (size_t)h.n * sizeof *out) != 0)
        _exit(3);
    free(out);
}

/* CASE: uint32 index into plan->cases. */
static void on_case(tb_worker *w, const char *buf, size_t len)
{
    (void)len;
    uint32_t idx;
    memcpy(&idx, buf, sizeof idx);
    if (idx < w->plan->n_cases)
        run_case(w, &w->plan->cases[idx]);
    else
        send_status(w, TB_MSG_CASE_ERROR, TB_ERR_INVALID, 0, 0, NULL, "no case %u", idx);
}

/* CASE_LOAD: one run of a load search, the case with its concurrency and
 * request rate replaced. */
static void on_case_load(tb_worker *w, const char *buf, size_t len)
{
    (void)len;
    tb_wire_case_load cl;
    memcpy(&cl, buf, sizeof cl);
    if (cl.index >= w->plan->n_cases) {
        send_status(w, TB_MSG_CASE_ERROR, TB_ERR_INVALID, 0, 0, NULL, "no case %u", cl.index);
        return;
    }
    tb_case run = w->plan->cases[cl.index];
    run.concurrency = cl.concurrency;
    run.request_rate = cl.request_rate;
    run.search = TB_SEARCH_NONE;
    run_case(w, &run);
}

/* LOAD: uint32 case index; the context of that case, answered by LOADED. */
static void on_load(tb_worker *w, const char *buf, size_t len)
{
    (void)len;
    uint32_t idx;
    memcpy(&idx, buf, sizeof idx);
    if (idx < w->plan->n_cases)
        ensure_context(w, &w->plan->cases[idx]);
    else
        send_status(w, TB_MSG_LOADED, TB_ERR_INVALID, 0, 0, NULL, "no case %u", idx);
}

/* One request the worker answers (wire.h): its payload's size in bytes,
 * exactly, or at least when the payload is a header and what follows it
 * (at_least; the handler reads the rest and answers a malformed rest),
 * and its handler, which may trust that size. handle NULL: the loop
 * ends. A frame of another type or another size is refused: said on
 * stderr (the runner relays it), and the worker ends, as the client
 * kills a worker whose answer it cannot read (worker_client.h). */
typedef struct worker_msg {
    uint32_t type;
    const char *name; /* for that message */
    size_t size;
    int at_least;
    void (*handle)(tb_worker *w, const char *payload, size_t len);
} worker_msg;

static const worker_msg messages[] = {
    {TB_MSG_CASE, "CASE", sizeof(uint32_t), 0, on_case},
    {TB_MSG_CASE_LOAD, "CASE_LOAD", sizeof(tb_wire_case_load), 0, on_case_load},
    {TB_MSG_LOAD, "LOAD", sizeof(uint32_t), 0, on_load},
    {TB_MSG_JUDGE, "JUDGE", sizeof(tb_wire_judge), 1, judge_pairs},
    {TB_MSG_GENERATE, "GENERATE", sizeof(tb_wire_gen), 1, tb_worker_serve_generate},
    {TB_MSG_STEP_OPEN, "STEP_OPEN", sizeof(tb_wire_step_open), 0, tb_worker_serve_step_open},
    {TB_MSG_STEP, "STEP", sizeof(tb_wire_step), 1, tb_worker_serve_step},
    {TB_MSG_QUIT, "QUIT", 0, 0, NULL},
};

static const worker_msg *find_msg(uint32_t type)
{
    for (size_t i = 0; i < sizeof messages / sizeof *messages; i++)
        if (messages[i].type == type)
            return &messages[i];
    return NULL;
}

void tb_worker_main(const tb_plan *plan, size_t backend, int fd_in, int fd_out)
{
    /* The process first: memory limit, stdout onto stderr, signals. The
     * worker's stderr is its log (plugins log there too): a limit not set
     * is said there, and the cases run without it, as before. */
    char *err = NULL;
    if (tb_worker_child_setup(plan->suite->memory_limit_mb, &err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
    }

    tb_worker w = {.plan = plan, .pb = &plan->backends[backend], .fd_out = fd_out};
    tb_worker_host_init(&w);
    /* Secrets (issue 38, item 4): a worker holding any (its plugin
     * declares secret options, or the plan has secret values, copied in
     * at the fork) writes no core dump, and its log lines are redacted. */
    w.secrets = tb_plan_secrets(plan, &w.n_secrets);
    int secret_opts = 0;
    for (uint32_t i = 0; w.pb->plugin.ops && i < w.pb->plugin.ops->n_options; i++)
        secret_opts |= (w.pb->plugin.ops->options[i].flags & TB_OPTF_SECRET) != 0;
    if (secret_opts || w.n_secrets)
        prctl(PR_SET_DUMPABLE, 0);

    /* The plugin is loaded here, never in the runner (which has only its
     * table's data): the table must be the one the plan was made with. */
    char why[512] = "";
    if (tb_plugin_load(w.pb->plugin.path, w.pb->sb->plugin, &w.ops, &err) != 0 ||
        tb_plugin_same(&w.pb->plugin, w.ops, &err) != 0) {
        send_status(&w, TB_MSG_PROBE, TB_ERR, 0, 0, NULL, "%s", err);
        free(err);
        tb_worker_child_exit();
    }
    tb_status ps = w.ops->probe ? w.ops->probe(why, sizeof why) : TB_OK;
    send_status(&w, TB_MSG_PROBE, ps, 0, 0, NULL, "%s", why[0] ? why : tb_status_name(ps));
    if (ps != TB_OK)
        _exit(0);

    tb_wire_reader rd;
    tb_wire_reader_init(&rd, fd_in);
    tb_wire_frame f;
    while (tb_wire_read(&rd, 0, NULL, &f) == TB_WIRE_FRAME) {
        const worker_msg *m = find_msg(f.type);
        if (!m) {
            fprintf(stderr, "tokbench: the backend process got a message of unknown type %u; it ends\n", f.type);
            break;
        }
        if (m->at_least ? f.len < m->size : f.len != m->size) {
            fprintf(stderr, "tokbench: the backend process got a %s message of %zu bytes (expected %s%zu); it ends\n",
                    m->name, f.len, m->at_least ? "at least " : "", m->size);
            break;
        }
        if (!m->handle)
            break; /* QUIT */
        m->handle(&w, f.payload, f.len);
    }
    tb_wire_reader_free(&rd);
    tb_worker_serve_step_close(&w);
    if (w.ctx)
        w.ops->destroy(w.ctx);
    free(w.scratch);
    free(w.kept);
    free(w.secrets);
    tb_worker_child_exit();
}

/* ------------------------------------------------------ the fork */

typedef struct spawn_arg {
    const tb_plan *plan;
    size_t backend;
} spawn_arg;

static void worker_child(void *arg, int fd_in, int fd_out)
{
    const spawn_arg *a = arg;
    tb_worker_main(a->plan, a->backend, fd_in, fd_out);
}

int tb_worker_spawn(const tb_plan *plan, size_t backend, tb_worker_proc *w)
{
    spawn_arg a = {plan, backend}; /* the child's copy of this frame lives on */
    return tb_proc_spawn(w, worker_child, &a);
}
