/* stepper.c — a valid backend with the five step ops (backend.h:
 * iteration-level batching) and a byte tokenizer, for `tokbench serve`'s
 * continuous batching tests (tests/e2e/test_serve_steps.sh): every answer
 * is known from its prompt alone, whichever slot, step and batch it ran
 * in, so a token handed to the wrong request shows.
 *
 *   the answer: token i (from 0) of a request is the letter
 *   'a' + (s + i) % 26, s the sum of its prompt's bytes; ids are bytes
 *   (tokenize and detokenize map byte <-> id); no EOS: a request runs to
 *   its max_new_tokens;
 *   fail_at_step = N (N > 0): the N-th step() of the process fails
 *   (TB_ERR, as an engine's failure does: the host closes the session);
 *   the count goes on, so the session the host opens next works;
 *   step_us = N: each step() sleeps N µs first (slow steps keep a request
 *   running while a test's client leaves it; nothing is timed);
 *   token_bytes = N: a token's text is its letter N times (detokenize),
 *   so that answers, and the worker's messages that carry them, are
 *   large.
 *
 * generate() (the static path) gives the same answers, one emission a
 * token. */
#define _GNU_SOURCE
#include "stub.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

enum { MAX_NEW = 4096 };

typedef struct slot {
    int active;
    uint32_t sum;           /* the prompt's bytes, summed */
    uint32_t max_new, n;    /* tokens asked for, made */
    int32_t out[MAX_NEW];   /* made so far */
} slot;

typedef struct sctx {
    const tb_host *host;
    int64_t fail_at; /* 0: never */
    int64_t step_us; /* sleep per step() */
    int64_t token_bytes; /* a token's text: its letter this many times */
    int64_t steps;   /* step() calls so far */
    slot *slots;
    uint32_t n_slots;
    int32_t *gen_out; /* generate()'s ids [n_requests][max_new_tokens] */
    char error[128];
} sctx;

static const char *option(const tb_option_value *o, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(o[i].name, name) == 0)
            return o[i].text;
    return NULL;
}

static uint32_t prompt_sum(const char *p)
{
    uint32_t s = 0;
    for (; p && *p; p++)
        s += (unsigned char)*p;
    return s;
}

static int32_t token_at(uint32_t sum, uint32_t i)
{
    return 'a' + (int32_t)((sum + i) % 26);
}

static void emit(const tb_host *h, uint32_t r, const int32_t *id, int64_t now)
{
    if (TB_STRUCT_HAS(h, tb_host, emit_output) && h->emit_output)
        h->emit_output(h, r, 1, now, id, NULL, 0);
    else
        h->emit(h, r, 1, now);
}

static tb_status s_create(const tb_host *host, const char *model, const tb_option_value *options, uint32_t n_options,
                          void **ctx_out, char *err, size_t err_size)
{
    (void)model;
    sctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return TB_ERR_NO_MEMORY;
    }
    c->host = host;
    const char *f = option(options, n_options, "fail_at_step");
    c->fail_at = f ? strtoll(f, NULL, 10) : 0;
    const char *us = option(options, n_options, "step_us");
    c->step_us = us ? strtoll(us, NULL, 10) : 0;
    const char *tbs = option(options, n_options, "token_bytes");
    c->token_bytes = tbs && strtoll(tbs, NULL, 10) > 0 ? strtoll(tbs, NULL, 10) : 1;
    *ctx_out = c;
    return TB_OK;
}

static void s_step_close(void *vctx)
{
    sctx *c = vctx;
    free(c->slots);
    c->slots = NULL;
    c->n_slots = 0;
}

static void s_destroy(void *vctx)
{
    s_step_close(vctx);
    free(((sctx *)vctx)->gen_out);
    free(vctx);
}

static const char *s_last_error(void *vctx)
{
    return ((sctx *)vctx)->error;
}

static tb_status s_generate(void *vctx, const tb_request *req, tb_result *res)
{
    sctx *c = vctx;
    if (c->slots) {
        snprintf(c->error, sizeof c->error, "a stepped session is open");
        return TB_ERR_UNSUPPORTED;
    }
    if (req->max_new_tokens > MAX_NEW) {
        snprintf(c->error, sizeof c->error, "max_new_tokens over %d", MAX_NEW);
        return TB_ERR_INVALID;
    }
    size_t N = req->max_new_tokens ? req->max_new_tokens : 1;
    free(c->gen_out);
    if (!(c->gen_out = calloc((size_t)req->n_requests * N, sizeof *c->gen_out)))
        return TB_ERR_NO_MEMORY;
    for (uint32_t r = 0; r < req->n_requests; r++) {
        uint32_t sum = prompt_sum(req->prompt_text ? req->prompt_text[r] : NULL);
        int32_t *out = c->gen_out + (size_t)r * N;
        for (uint32_t i = 0; i < req->max_new_tokens; i++) {
            out[i] = token_at(sum, i);
            emit(c->host, r, &out[i], c->host->now_ns(c->host));
        }
        tb_request_result *q = &res->requests[r];
        q->status = TB_OK;
        q->n_output_tokens = req->max_new_tokens;
        q->n_answer_tokens = req->max_new_tokens;
        q->output_ids = out;
        q->n_output_ids = req->max_new_tokens;
    }
    res->prefill_ns = res->decode_ns = -1;
    res->forward_passes = req->max_new_tokens;
    res->peak_device_bytes = res->energy_mj = -1;
    return TB_OK;
}

static int64_t s_tokenize(void *vctx, const char *text, int32_t *ids, size_t cap)
{
    (void)vctx;
    size_t n = strlen(text);
    for (size_t i = 0; i < n && i < cap; i++)
        ids[i] = (unsigned char)text[i];
    return (int64_t)n;
}

static int64_t s_detokenize(void *vctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    sctx *c = vctx;
    size_t w = (size_t)c->token_bytes, len = n * w;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 1 || ids[i] > 255) {
            snprintf(c->error, sizeof c->error, "id %d is not a byte", ids[i]);
            return -1;
        }
    for (size_t i = 0; i < len && i + 1 < cap; i++)
        out[i] = (char)ids[i / w];
    if (cap)
        out[len < cap ? len : cap - 1] = '\0';
    return (int64_t)len;
}

static tb_status s_step_open(void *vctx, const tb_request *shape, uint32_t max_slots)
{
    sctx *c = vctx;
    (void)shape;
    s_step_close(c);
    if (!(c->slots = calloc(max_slots, sizeof *c->slots)))
        return TB_ERR_NO_MEMORY;
    c->n_slots = max_slots;
    return TB_OK;
}

static tb_status s_step_join(void *vctx, uint32_t k, const tb_step_join *j, char *why, size_t why_size)
{
    sctx *c = vctx;
    if (k >= c->n_slots || c->slots[k].active) {
        snprintf(why, why_size, "slot %u is busy or out of range", k);
        return TB_ERR_INVALID;
    }
    if (j->max_new_tokens > MAX_NEW) {
        snprintf(why, why_size, "max_new_tokens over %d", MAX_NEW);
        return TB_ERR_INVALID;
    }
    c->slots[k] = (slot){.active = 1, .sum = prompt_sum(j->prompt_text), .max_new = j->max_new_tokens};
    return TB_OK;
}

static tb_status s_step(void *vctx, tb_step_end *ends, uint32_t *n_ends)
{
    sctx *c = vctx;
    *n_ends = 0;
    if (c->fail_at > 0 && ++c->steps == c->fail_at) {
        snprintf(c->error, sizeof c->error, "step %lld failed (fail_at_step)", (long long)c->steps);
        return TB_ERR;
    }
    if (c->fail_at <= 0)
        c->steps++;
    if (c->step_us > 0) {
        struct timespec ts = {c->step_us / 1000000, (c->step_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    int64_t now = c->host->now_ns(c->host);
    for (uint32_t k = 0; k < c->n_slots; k++) {
        slot *s = &c->slots[k];
        if (!s->active)
            continue;
        s->out[s->n] = token_at(s->sum, s->n);
        emit(c->host, k, &s->out[s->n], now);
        if (++s->n < s->max_new)
            continue;
        ends[(*n_ends)++] = (tb_step_end){.slot = k, .status = TB_OK, .n_output_tokens = s->n,
                                          .n_answer_tokens = s->n, .output_ids = s->out, .n_output_ids = s->n,
                                          .t_done_ns = now};
        s->active = 0; /* its ids stay readable until the next step */
    }
    return TB_OK;
}

static void s_step_leave(void *vctx, uint32_t k)
{
    sctx *c = vctx;
    if (k < c->n_slots)
        c->slots[k].active = 0;
}

static const tb_option_decl options[] = {
    {"fail_at_step", TB_OPT_INT, "0", "the process's N-th step() fails (0: none)", NULL, 0, 1e9, TB_OPTF_LOAD},
    {"step_us", TB_OPT_INT, "0", "each step() sleeps this long first, µs", NULL, 0, 1e6, TB_OPTF_LOAD},
    {"token_bytes", TB_OPT_INT, "1", "a token's text: its letter this many times", NULL, 1, 65536, TB_OPTF_LOAD},
};

static const tb_backend_ops ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "stepper",
    .version = "0",
    .description = "test plugin: stepped sessions whose answers follow from their prompts",
    .capabilities = TB_CAP_BATCH | TB_CAP_STREAMING | TB_CAP_TOKENIZER,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = s_create,
    .destroy = s_destroy,
    .generate = s_generate,
    .last_error = s_last_error,
    .tokenize = s_tokenize,
    .detokenize = s_detokenize,
    .step_open = s_step_open,
    .step_join = s_step_join,
    .step = s_step,
    .step_leave = s_step_leave,
    .step_close = s_step_close,
};

STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void);
STUB_EXPORT const tb_backend_ops *tokbench_backend_entry(void)
{
    return &ops;
}
