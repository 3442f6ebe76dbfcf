/* engine_cpu.c — engine.h's CPU implementation: cpu_forward.h's float32
 * forward; token choices by tb_argmax on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_forward.h"
#include "engine.h"
#include "sampling.h"

typedef struct cpu_engine {
    const tb_model *m;
    tb_cpu_state st; /* allocated by reserve (st.m set then) */
    int threads;
    float *scratch;  /* [st.max_seqs][vocab]: logits of a greedy choice */
    float *span;     /* [span_rows][vocab]: a speculative call's logits when
                        the caller wants only the argmax (grown on demand) */
    size_t span_rows;
    int *capture, n_capture; /* set_capture's layers, kept across reserves */
    int pick;                /* the greedy choice's ids: [0, pick) */
    char error[256];
} cpu_engine;

static int vocab(const cpu_engine *c)
{
    return c->m->cfg.vocab_size;
}

static int cpu_reserve(void *ctx, int seqs, int len, int rows, char *err, size_t err_size)
{
    cpu_engine *c = ctx;
    tb_cpu_state *st = &c->st;
    if (st->m && seqs <= st->max_seqs && len <= st->max_len && rows <= st->max_rows)
        return 0;
    /* grow every dimension to the most asked so far */
    if (st->m) {
        seqs = seqs > st->max_seqs ? seqs : st->max_seqs;
        len = len > st->max_len ? len : st->max_len;
        rows = rows > st->max_rows ? rows : st->max_rows;
    }
    tb_cpu_state_free(st);
    memset(st, 0, sizeof *st);
    free(c->scratch);
    c->scratch = malloc((size_t)seqs * (size_t)vocab(c) * sizeof(float));
    if (!c->scratch) {
        snprintf(err, err_size, "out of memory for the logits of %d sequences", seqs);
        return -1;
    }
    if (tb_cpu_state_init(st, c->m, seqs, len, rows, c->threads, err, err_size) != 0) {
        tb_cpu_state_free(st);
        memset(st, 0, sizeof *st);
        return -1;
    }
    if (c->n_capture > 0 && tb_cpu_set_capture(st, c->capture, c->n_capture) != 0) {
        snprintf(err, err_size, "out of memory for the hidden states of %d layers x %d rows", c->n_capture, rows);
        return -1;
    }
    return 0;
}

static void cpu_set_threads(void *ctx, int n)
{
    cpu_engine *c = ctx;
    if (n > 0 && c->st.m)
        tb_cpu_set_threads(&c->st, n);
}

static int cpu_set_padding(void *ctx, const int *pad, int n)
{
    cpu_engine *c = ctx;
    tb_cpu_state_reset(&c->st);
    if (pad && tb_cpu_set_padding(&c->st, pad, n) != 0) {
        snprintf(c->error, sizeof c->error, "padding of %d sequences, more than the %d reserved", n, c->st.max_seqs);
        return -1;
    }
    return 0;
}

/* The caller's logits, or the greedy tokens of B rows of the scratch. */
static float *out_of(cpu_engine *c, float *logits)
{
    return logits ? logits : c->scratch;
}
static void pick_greedy(cpu_engine *c, const float *logits, int B, int32_t *next)
{
    if (logits)
        return;
    int V = vocab(c);
    for (int b = 0; b < B; b++)
        next[b] = tb_argmax(c->scratch + (size_t)b * V, c->pick);
}

static int cpu_prefill(void *ctx, const int32_t *tokens, int B, int P, int32_t *next, float *logits)
{
    cpu_engine *c = ctx;
    if (tb_cpu_forward(&c->st, tokens, B, P, 1, 0, out_of(c, logits)) != 0) {
        snprintf(c->error, sizeof c->error, "forward failed (batch %d x %d tokens)", B, P);
        return -1;
    }
    pick_greedy(c, logits, B, next);
    return 0;
}

static int cpu_decode(void *ctx, int32_t *next, int B, float *logits)
{
    cpu_engine *c = ctx;
    if (tb_cpu_forward(&c->st, next, B, 1, 1, 0, out_of(c, logits)) != 0) {
        snprintf(c->error, sizeof c->error, "forward failed at a decode step of %d sequences", B);
        return -1;
    }
    pick_greedy(c, logits, B, next);
    return 0;
}

static int cpu_prefill_slots(void *ctx, const int32_t *tokens, const int *slots, int B, int P, int32_t *next,
                             float *logits)
{
    cpu_engine *c = ctx;
    for (int b = 0; b < B; b++)
        tb_cpu_slot_reset(&c->st, slots[b]);
    if (tb_cpu_forward_ragged(&c->st, tokens, slots, B, P, 1, 1, 0, 1, out_of(c, logits)) != 0) {
        snprintf(c->error, sizeof c->error, "prefill of %d x %d tokens failed", B, P);
        return -1;
    }
    pick_greedy(c, logits, B, next);
    return 0;
}

static int cpu_decode_slots(void *ctx, const int *slots, int B, int32_t *next, float *logits)
{
    cpu_engine *c = ctx;
    if (tb_cpu_forward_slots(&c->st, next, slots, B, 1, out_of(c, logits)) != 0) {
        snprintf(c->error, sizeof c->error, "decode step of %d requests failed", B);
        return -1;
    }
    pick_greedy(c, logits, B, next);
    return 0;
}

static int cpu_logits_all(void *ctx, const int32_t *tokens, int n, float *logits)
{
    cpu_engine *c = ctx;
    if (tb_cpu_forward(&c->st, tokens, 1, n, 1, 1, logits) != 0) {
        snprintf(c->error, sizeof c->error, "forward failed over %d tokens", n);
        return -1;
    }
    return 0;
}

static int cpu_forward_span(void *ctx, const int32_t *tokens, int B, int pos0, int n, int n_attend, float *logits)
{
    cpu_engine *c = ctx;
    if (tb_cpu_forward_at(&c->st, tokens, B, pos0, n, n_attend, logits) != 0) {
        snprintf(c->error, sizeof c->error, "forward failed (%d spans of %d tokens at %d)", B, n, pos0);
        return -1;
    }
    return 0;
}

static int cpu_forward_span_rows(void *ctx, const int32_t *tokens, const int *slots, int B, int pos0, int n,
                                 int n_attend, int mask_block, int head_row0, int head_rows, float *logits)
{
    cpu_engine *c = ctx;
    if (tb_cpu_forward_rows(&c->st, tokens, slots, B, pos0, n, n_attend, mask_block, head_row0, head_rows, logits) !=
        0) {
        snprintf(c->error, sizeof c->error, "forward failed (%d spans of %d tokens at %d)", B, n, pos0);
        return -1;
    }
    return 0;
}

/* verify_slots and draft_span_slots: every row's logits into the
 * caller's buffer or the span scratch, then every row's argmax. */
static int cpu_spec_call(cpu_engine *c, const char *what, const int32_t *tokens, const int *slots, int B, int n,
                         int causal, int32_t *argmax, float *logits)
{
    tb_cpu_state *st = &c->st;
    if (!st->m || B < 1 || n < 1 || B > st->max_seqs || (long)B * n > st->max_rows) {
        snprintf(c->error, sizeof c->error, "%s of %d x %d tokens: more than the %d sequences x %d rows reserved",
                 what, B, n, st->max_seqs, st->max_rows);
        return -1;
    }
    size_t rows = (size_t)B * (size_t)n, V = (size_t)vocab(c);
    float *out = logits;
    if (!out && argmax) {
        if (c->span_rows < rows) {
            free(c->span);
            c->span_rows = 0;
            c->span = malloc(rows * V * sizeof(float));
            if (!c->span) {
                snprintf(c->error, sizeof c->error, "out of memory for the logits of %zu rows", rows);
                return -1;
            }
            c->span_rows = rows;
        }
        out = c->span;
    }
    /* verification: causal, grows, captures; a draft span: none of these */
    if (tb_cpu_forward_ragged(st, tokens, slots, B, n, causal, causal, 1, causal, out) != 0) {
        snprintf(c->error, sizeof c->error,
                 "%s of %d x %d tokens failed (slots out of range, repeated, or past the %d positions reserved)",
                 what, B, n, st->max_len);
        return -1;
    }
    for (size_t r = 0; argmax && r < rows; r++)
        argmax[r] = tb_argmax(out + r * V, c->pick);
    return 0;
}

static int cpu_verify_slots(void *ctx, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                            float *logits)
{
    return cpu_spec_call(ctx, "verification", tokens, slots, B, n, 1, argmax, logits);
}

static int cpu_draft_span_slots(void *ctx, const int32_t *tokens, const int *slots, int B, int n, int32_t *argmax,
                                float *logits)
{
    return cpu_spec_call(ctx, "draft span", tokens, slots, B, n, 0, argmax, logits);
}

static int cpu_truncate_slot(void *ctx, int slot, int len)
{
    cpu_engine *c = ctx;
    if (!c->st.m || tb_cpu_slot_truncate(&c->st, slot, len) != 0) {
        snprintf(c->error, sizeof c->error, "truncate of slot %d to %d positions: no such slot, or it holds fewer",
                 slot, len);
        return -1;
    }
    return 0;
}

static int cpu_set_capture(void *ctx, const int *layers, int n_layers)
{
    cpu_engine *c = ctx;
    for (int j = 0; j < n_layers; j++)
        if (layers[j] < 0 || layers[j] >= c->m->cfg.n_layers) {
            snprintf(c->error, sizeof c->error, "capture of layer %d: the model has layers 0 .. %d", layers[j],
                     c->m->cfg.n_layers - 1);
            return -1;
        }
    free(c->capture);
    c->capture = NULL;
    c->n_capture = 0;
    if (n_layers > 0) {
        c->capture = malloc((size_t)n_layers * sizeof(int));
        if (!c->capture) {
            snprintf(c->error, sizeof c->error, "out of memory for a capture of %d layers", n_layers);
            return -1;
        }
        memcpy(c->capture, layers, (size_t)n_layers * sizeof(int));
        c->n_capture = n_layers;
    }
    if (c->st.m && tb_cpu_set_capture(&c->st, layers, n_layers) != 0) {
        free(c->capture);
        c->capture = NULL;
        c->n_capture = 0;
        snprintf(c->error, sizeof c->error, "out of memory for the hidden states of %d layers x %d rows", n_layers,
                 c->st.max_rows);
        return -1;
    }
    return 0;
}

static const float *cpu_captured(void *ctx, int *rows)
{
    cpu_engine *c = ctx;
    int on = c->st.m && c->st.n_capture > 0 && c->st.capture_rows > 0;
    *rows = on ? c->st.capture_rows : 0;
    return on ? c->st.capture : NULL;
}

static void cpu_work_start(void *ctx)
{
    cpu_engine *c = ctx;
    c->st.expert_reads = c->st.moe_rows = 0;
}

/* The CPU measures no FLOPs, bytes or ceilings; MoE: what its expert
 * layers read. */
static void cpu_work_report(void *ctx, tb_result *res)
{
    cpu_engine *c = ctx;
    if (TB_STRUCT_HAS(res, tb_result, moe_tokens)) {
        res->expert_reads = c->st.expert_reads;
        res->moe_tokens = c->st.moe_rows;
    }
}

static const char *cpu_device_name(void *ctx)
{
    (void)ctx;
    return "cpu";
}

static int cpu_tensor_parallel(void *ctx)
{
    (void)ctx;
    return 0;
}

static const char *cpu_kernels(void *ctx)
{
    (void)ctx;
    return NULL;
}

static const char *cpu_error(void *ctx)
{
    return ((cpu_engine *)ctx)->error;
}

static void cpu_free(void *ctx)
{
    cpu_engine *c = ctx;
    if (!c)
        return;
    tb_cpu_state_free(&c->st);
    free(c->scratch);
    free(c->span);
    free(c->capture);
    free(c);
}

static const tb_engine_iface cpu_iface = {
    .reserve = cpu_reserve,
    .set_threads = cpu_set_threads,
    .set_padding = cpu_set_padding,
    .prefill = cpu_prefill,
    .decode = cpu_decode,
    .prefill_slots = cpu_prefill_slots,
    .decode_slots = cpu_decode_slots,
    .logits_all = cpu_logits_all,
    .forward_span = cpu_forward_span,
    .forward_span_rows = cpu_forward_span_rows,
    .verify_slots = cpu_verify_slots,
    .truncate_slot = cpu_truncate_slot,
    .draft_span_slots = cpu_draft_span_slots,
    .set_capture = cpu_set_capture,
    .captured = cpu_captured,
    .work_start = cpu_work_start,
    .work_report = cpu_work_report,
    .device_name = cpu_device_name,
    .tensor_parallel = cpu_tensor_parallel,
    .kernels = cpu_kernels,
    .error = cpu_error,
    .free = cpu_free,
};

int tb_engine_open_cpu(tb_engine *e, const tb_model *m, int threads)
{
    cpu_engine *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->m = m;
    c->threads = threads;
    c->pick = m->cfg.vocab_size;
    e->iface = &cpu_iface;
    e->ctx = c;
    return 0;
}

void tb_engine_cpu_pick_vocab(tb_engine *e, int n)
{
    cpu_engine *c = e->iface == &cpu_iface ? e->ctx : NULL;
    if (c)
        c->pick = n > 0 && n <= vocab(c) ? n : vocab(c);
}

tb_cpu_state *tb_engine_cpu_state(const tb_engine *e)
{
    return e->iface == &cpu_iface && ((cpu_engine *)e->ctx)->st.m ? &((cpu_engine *)e->ctx)->st : NULL;
}
