/* test_spec_engine.c — the CPU engine's speculative decoding operations
 * (engine.h: verify_slots, truncate_slot, draft_span_slots, set_capture,
 * captured) against the operations they stand for, on each model folder
 * given (tiny-llama-random: Llama; small-sdar: the Qwen3 layout SDAR uses).
 *
 * Three slots of unequal lengths (ragged, not the first slots). Engines
 * fed the same calls hold bit-identical caches (one thread: OpenBLAS's
 * order fixed), so "exact" below is memcmp:
 *   - verify_slots of n tokens equals n decode_slots steps: logits within
 *     LOGIT_TOL (both float32; only the GEMMs' row counts differ), argmax
 *     equal where the top two logits are apart; the lengths grow by n and
 *     decode_slots continues from them;
 *   - truncate then the same call again gives the first call's outputs
 *     exactly; the positions after a cut are never read: two histories
 *     that differ only past it give bit-identical outputs after it;
 *   - draft_span_slots equals tb_cpu_forward_rows with mask_block 0 at
 *     each slot's length, leaves the lengths alone, and a verification
 *     after it equals one without it, exactly;
 *   - the capture equals tb_cpu_forward_hidden's residual stream after
 *     those layers, over the slot's whole history from position 0. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_forward.h"
#include "engine.h"
#include "model.h"
#include "sampling.h"
#include "util.h"

#define LOGIT_TOL 2e-5
#define B 3
#define MAX_N 8
#define MAX_LEN 96

static const int slots[B] = {3, 0, 2}; /* distinct, out of order, slot 1 idle */
static const int prompt_len[B] = {5, 11, 2};

typedef struct hist {
    int32_t tok[B][MAX_LEN]; /* each slot's tokens from position 0 */
    int len[B];
} hist;

static uint64_t rng = 12345;
static int32_t rand_token(int V)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int32_t)((rng >> 33) % (uint64_t)V);
}

static tb_engine open_engine(tb_model *m)
{
    tb_engine e;
    char err[256];
    CHECK(tb_engine_open_cpu(&e, m, 1) == 0);
    CHECK(e.iface->reserve(e.ctx, 4, MAX_LEN, B * MAX_N + 16, err, sizeof err) == 0);
    CHECK(e.iface->set_padding(e.ctx, NULL, 0) == 0);
    return e;
}

/* The prompts, one prefill_slots call each (unequal lengths). */
static void prefill(tb_engine *e, hist *h)
{
    for (int b = 0; b < B; b++) {
        int32_t next;
        CHECK(e->iface->prefill_slots(e->ctx, h->tok[b], &slots[b], 1, prompt_len[b], &next, NULL) == 0);
    }
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Whether row's first maximum stands clear of every other logit by gap. */
static int clear_top(const float *row, int V, double gap)
{
    int top = tb_argmax(row, V);
    for (int v = 0; v < V; v++)
        if (v != top && row[top] - row[v] < gap)
            return 0;
    return 1;
}

static void check_close(const char *what, const float *got, const float *want, size_t n)
{
    double diff = 0, tol = LOGIT_TOL * fmax(1.0, max_abs(want, n));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        diff = d > diff || isnan(d) ? (isnan(d) ? INFINITY : d) : diff;
    }
    fprintf(stderr, "  %s: max diff %.3g (tol %.3g)\n", what, diff, tol);
    CHECK(diff <= tol);
}

/* Residual stream after layer l of one sequence's first n tokens. */
static void hidden_ref(tb_model *m, const int32_t *tok, int n, int l, float *out)
{
    tb_cpu_state st;
    char err[256];
    CHECK(tb_cpu_state_init(&st, m, 1, MAX_LEN, MAX_LEN, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_forward_hidden(&st, tok, 1, n, 1, l + 1) == 0);
    memcpy(out, st.x, (size_t)n * m->cfg.hidden_size * sizeof(float));
    tb_cpu_state_free(&st);
}

static void test_model(const char *dir)
{
    tb_model m;
    char err[512];
    if (tb_model_load(dir, &m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", dir, err);
        CHECK(0);
        return;
    }
    fprintf(stderr, "%s\n", dir);
    int V = m.cfg.vocab_size, H = m.cfg.hidden_size, NL = m.cfg.n_layers;
    hist h = {0};
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < prompt_len[b]; i++)
            h.tok[b][i] = rand_token(V);
        h.len[b] = prompt_len[b];
    }
    /* a: verifies; d: decode steps; c: a's twin (same calls) */
    tb_engine a = open_engine(&m), d = open_engine(&m), c = open_engine(&m);
    int layers[3] = {NL - 1, 0, NL / 2}; /* any order; the last layer too */
    CHECK(a.iface->set_capture(a.ctx, layers, 3) == 0);
    prefill(&a, &h);
    prefill(&d, &h);
    prefill(&c, &h);

    /* capture of the last prefill (slot slots[B - 1], prompt_len rows) */
    int rows = -1;
    const float *cap = a.iface->captured(a.ctx, &rows);
    CHECK(cap && rows == prompt_len[B - 1]);
    float *ref = tb_xmalloc((size_t)MAX_LEN * H * sizeof(float));
    for (int j = 0; cap && j < 3; j++) {
        hidden_ref(&m, h.tok[B - 1], prompt_len[B - 1], layers[j], ref);
        float *got = tb_xmalloc((size_t)rows * H * sizeof(float));
        for (int r = 0; r < rows; r++)
            memcpy(got + (size_t)r * H, cap + ((size_t)r * 3 + j) * H, (size_t)H * sizeof(float));
        check_close("prefill capture", got, ref, (size_t)rows * H);
        free(got);
    }

    /* verify_slots of n tokens = n decode_slots steps */
    const int n = 6;
    int32_t x[B * MAX_N], am[B * MAX_N]; /* [B][n] */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            x[b * n + i] = rand_token(V);
    float *lv = tb_xmalloc((size_t)B * MAX_N * V * sizeof(float));
    float *ld = tb_xmalloc((size_t)B * MAX_N * V * sizeof(float));
    float *step = tb_xmalloc((size_t)B * V * sizeof(float));
    CHECK(a.iface->verify_slots(a.ctx, x, slots, B, n, am, lv) == 0);
    int32_t am2[B * MAX_N];
    CHECK(c.iface->verify_slots(c.ctx, x, slots, B, n, am2, NULL) == 0); /* argmax alone */
    CHECK(memcmp(am, am2, sizeof(int32_t) * B * n) == 0);
    for (int i = 0; i < n; i++) {
        int32_t next[B];
        for (int b = 0; b < B; b++)
            next[b] = x[b * n + i];
        CHECK(d.iface->decode_slots(d.ctx, slots, B, next, step) == 0);
        for (int b = 0; b < B; b++)
            memcpy(ld + ((size_t)b * n + i) * V, step + (size_t)b * V, (size_t)V * sizeof(float));
    }
    check_close("verify vs decode steps", lv, ld, (size_t)B * n * V);
    int clear = 0;
    for (int r = 0; r < B * n; r++) {
        CHECK(am[r] == tb_argmax(lv + (size_t)r * V, V));
        if (clear_top(ld + (size_t)r * V, V, 1e-3)) {
            clear++;
            CHECK(am[r] == tb_argmax(ld + (size_t)r * V, V));
        }
    }
    CHECK(clear >= B * n / 2);
    for (int b = 0; b < B; b++) {
        memcpy(&h.tok[b][h.len[b]], x + b * n, (size_t)n * sizeof(int32_t));
        h.len[b] += n;
    }
    /* capture of the verification: [B][n] rows, against the whole history */
    cap = a.iface->captured(a.ctx, &rows);
    CHECK(cap && rows == B * n);
    for (int j = 0; cap && j < 3; j++)
        for (int b = 0; b < B; b++) {
            hidden_ref(&m, h.tok[b], h.len[b], layers[j], ref);
            float *got = tb_xmalloc((size_t)n * H * sizeof(float));
            for (int i = 0; i < n; i++)
                memcpy(got + (size_t)i * H, cap + (((size_t)b * n + i) * 3 + j) * H, (size_t)H * sizeof(float));
            check_close("verify capture", got, ref + (size_t)(h.len[b] - n) * H, (size_t)n * H);
            free(got);
        }
    /* decode_slots continues from the grown lengths */
    {
        int32_t na[B], nd[B];
        for (int b = 0; b < B; b++)
            na[b] = nd[b] = rand_token(V);
        float *sa = tb_xmalloc((size_t)B * V * sizeof(float));
        CHECK(a.iface->decode_slots(a.ctx, slots, B, na, sa) == 0);
        CHECK(d.iface->decode_slots(d.ctx, slots, B, nd, step) == 0);
        CHECK(c.iface->decode_slots(c.ctx, slots, B, nd, NULL) == 0);
        check_close("decode after verify", sa, step, (size_t)B * V);
        for (int b = 0; b < B; b++) {
            h.tok[b][h.len[b]++] = na[b];
        }
        free(sa);
    }
    /* The capture is off for decode_slots: still the verification's. */
    CHECK(a.iface->captured(a.ctx, &rows) == cap && rows == B * n);

    /* truncate: a and c verify blocks that differ only past each slot's
     * cut (keep[b] of n), roll back to the cut, verify y: bit-identical,
     * and twice over on a (rollback, same call again). */
    const int keep[B] = {2, 0, 5};
    const int m2 = 4;
    int32_t xc[B * MAX_N], y[B * MAX_N]; /* [B][n], [B][m2] */
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < n; i++) {
            x[b * n + i] = rand_token(V);
            xc[b * n + i] = i < keep[b] ? x[b * n + i] : rand_token(V);
        }
        for (int i = 0; i < m2; i++)
            y[b * m2 + i] = rand_token(V);
    }
    CHECK(a.iface->verify_slots(a.ctx, x, slots, B, n, am, NULL) == 0);
    CHECK(c.iface->verify_slots(c.ctx, xc, slots, B, n, am2, NULL) == 0);
    for (int b = 0; b < B; b++) {
        CHECK(a.iface->truncate_slot(a.ctx, slots[b], h.len[b] + keep[b]) == 0);
        CHECK(c.iface->truncate_slot(c.ctx, slots[b], h.len[b] + keep[b]) == 0);
    }
    float *l1 = tb_xmalloc((size_t)B * MAX_N * V * sizeof(float));
    float *l2 = tb_xmalloc((size_t)B * MAX_N * V * sizeof(float));
    int32_t a1[B * MAX_N], a2[B * MAX_N];
    CHECK(a.iface->verify_slots(a.ctx, y, slots, B, m2, a1, l1) == 0);
    CHECK(c.iface->verify_slots(c.ctx, y, slots, B, m2, a2, l2) == 0);
    CHECK(memcmp(l1, l2, (size_t)B * m2 * V * sizeof(float)) == 0);
    CHECK(memcmp(a1, a2, sizeof(int32_t) * B * m2) == 0);
    for (int b = 0; b < B; b++)
        CHECK(a.iface->truncate_slot(a.ctx, slots[b], h.len[b] + keep[b]) == 0);
    CHECK(a.iface->verify_slots(a.ctx, y, slots, B, m2, a2, l2) == 0);
    CHECK(memcmp(l1, l2, (size_t)B * m2 * V * sizeof(float)) == 0);
    CHECK(memcmp(a1, a2, sizeof(int32_t) * B * m2) == 0);
    for (int b = 0; b < B; b++) {
        memcpy(&h.tok[b][h.len[b]], x + b * n, (size_t)keep[b] * sizeof(int32_t));
        memcpy(&h.tok[b][h.len[b] + keep[b]], y + b * m2, (size_t)m2 * sizeof(int32_t));
        h.len[b] += keep[b] + m2;
    }
    /* a's verification of y against the history (keep[b] of x, then y)
     * decoded step by step on a fresh engine: the rollback's cache is
     * what decode_slots would have left */
    {
        tb_engine f = open_engine(&m);
        int P = h.len[0] - m2;
        for (int b = 0; b < B; b++) { /* the history up to y, one prefill each */
            int32_t next;
            P = h.len[b] - m2;
            CHECK(f.iface->prefill_slots(f.ctx, h.tok[b], &slots[b], 1, P, &next, NULL) == 0);
        }
        for (int i = 0; i < m2; i++) {
            int32_t next[B];
            for (int b = 0; b < B; b++)
                next[b] = y[b * m2 + i];
            CHECK(f.iface->decode_slots(f.ctx, slots, B, next, step) == 0);
            for (int b = 0; b < B; b++)
                memcpy(ld + ((size_t)b * m2 + i) * V, step + (size_t)b * V, (size_t)V * sizeof(float));
        }
        check_close("verify after truncate vs decode of the kept history", l1, ld, (size_t)B * m2 * V);
        tb_engine_close(&f);
    }

    /* draft_span_slots = tb_cpu_forward_rows (mask_block 0) at each slot's
     * length; lengths unchanged; a verification after it equals c's
     * without it, exactly (c is a's twin again: same truncations) */
    int32_t z[B * MAX_N];
    const int nd = 5;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < nd; i++)
            z[b * nd + i] = rand_token(V);
    CHECK(a.iface->draft_span_slots(a.ctx, z, slots, B, nd, am, lv) == 0);
    for (int r = 0; r < B * nd; r++)
        CHECK(am[r] == tb_argmax(lv + (size_t)r * V, V));
    tb_cpu_state *st = tb_engine_cpu_state(&a);
    CHECK(st != NULL);
    for (int b = 0; st && b < B; b++) {
        CHECK(st->seq_len[slots[b]] == h.len[b]);
        float *lr = tb_xmalloc((size_t)nd * V * sizeof(float));
        CHECK(tb_cpu_forward_rows(st, z + b * nd, &slots[b], 1, h.len[b], nd, h.len[b] + nd, 0, 0, nd, lr) == 0);
        check_close("draft span vs forward_rows", lv + (size_t)b * nd * V, lr, (size_t)nd * V);
        free(lr);
    }
    /* a row's draft sees the rows after it (bidirectional): not causal */
    for (int b = 0; b < B; b++) {
        float *lr = tb_xmalloc((size_t)nd * V * sizeof(float));
        CHECK(tb_cpu_forward_rows(st, z + b * nd, &slots[b], 1, h.len[b], nd, h.len[b] + nd, 1, 0, nd, lr) == 0);
        CHECK(memcmp(lr, lv + (size_t)b * nd * V, (size_t)V * sizeof(float)) != 0);
        free(lr);
    }
    CHECK(a.iface->verify_slots(a.ctx, x, slots, B, n, a1, l1) == 0);
    CHECK(c.iface->verify_slots(c.ctx, x, slots, B, n, a2, l2) == 0);
    CHECK(memcmp(l1, l2, (size_t)B * n * V * sizeof(float)) == 0);
    CHECK(memcmp(a1, a2, sizeof(int32_t) * B * n) == 0);

    /* bad calls: named errors, nothing done */
    int dup[B] = {0, 2, 0};
    CHECK(a.iface->verify_slots(a.ctx, x, dup, B, n, am, NULL) == -1);
    CHECK(strstr(a.iface->error(a.ctx), "verification") != NULL);
    CHECK(a.iface->truncate_slot(a.ctx, slots[0], h.len[0] + n + 1) == -1);
    CHECK(a.iface->truncate_slot(a.ctx, 9, 0) == -1);
    CHECK(a.iface->truncate_slot(a.ctx, slots[0], -1) == -1);
    CHECK(a.iface->verify_slots(a.ctx, x, slots, B, MAX_LEN, am, NULL) == -1);
    int bad_layer = NL;
    CHECK(a.iface->set_capture(a.ctx, &bad_layer, 1) == -1);
    CHECK(strstr(a.iface->error(a.ctx), "layer") != NULL);
    CHECK(a.iface->set_capture(a.ctx, NULL, 0) == 0);
    CHECK(a.iface->captured(a.ctx, &rows) == NULL && rows == 0);

    free(ref);
    free(lv);
    free(ld);
    free(step);
    free(l1);
    free(l2);
    tb_engine_close(&a);
    tb_engine_close(&c);
    tb_engine_close(&d);
    tb_model_free(&m);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        test_model(argv[i]);
    CHECK(argc > 1);
    return check_done();
}
