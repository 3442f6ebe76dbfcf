/* test_gpu_spec.c — speculative decoding's CUDA operations (gpu.h:
 * tb_gpu_verify_slots, tb_gpu_draft_slots, tb_gpu_truncate_slot,
 * tb_gpu_set_capture, tb_gpu_captured; engine_cuda.c passes them through)
 * against the CPU engine's (engine.h; tests/engine/test_spec_engine.c pins
 * those to decode steps and forward_rows). Exit 77 without a device.
 *
 * Both sides run the same weights rounded to bf16; the GPU keeps bf16
 * activations at its products, so logits and hidden states agree to
 * GPU_TOL * max(1, max |cpu|) (test_gpu.c's bound); the device's argmax
 * equals the first maximum of the device's own logits exactly, and the
 * CPU's where the CPU's top-two margin exceeds the bound.
 *
 * Ragged batches: B slots (not 0 .. B - 1) with prompts of unequal
 * lengths, B up to 8, n up to 17 (a DFlash block of 16 plus one), on
 * head_dim 16 (tiny-llama-random) and 64 (small-sdar, the Qwen3 layout),
 * each with the one-kernel span attention and with the batched GEMMs
 * (TB_GPU_SPAN_ATTN=0). On the device itself:
 *   - verify_slots of n tokens = n decode_slots steps (the CUDA graph) of
 *     them after a rollback, within the bound (row counts differ);
 *   - a rollback then the same call again is bit-identical, and so are two
 *     histories that differ only past the cut (both written by a
 *     verification: a decode step's kernels round differently);
 *   - a draft leaves the lengths alone, and decode_slots after it agrees
 *     with the CPU's. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine.h"
#include "gpu.h"
#include "gpu_tune.h"
#include "model.h"
#include "safetensors.h"
#include "sampling.h"
#include "util.h"

#define GPU_TOL 2e-2
#define SEQS 9
#define MAX_B 8
#define MAX_N 17
#define LEN 160
#define ROWS (MAX_B * MAX_N + 8)

static uint64_t rng = 4242;
static int32_t rand_token(int V)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int32_t)((rng >> 33) % (uint64_t)V);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* max |got - want| within GPU_TOL of want's scale; 1 when it holds */
static int close_to(const char *what, const float *got, const float *want, size_t n)
{
    double diff = 0, tol = GPU_TOL * fmax(1.0, max_abs(want, n));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        diff = isnan(d) ? INFINITY : d > diff ? d : diff;
    }
    int ok = diff <= tol;
    if (!ok)
        fprintf(stderr, "  %s: max diff %.3g > tol %.3g\n", what, diff, tol);
    CHECK(ok);
    return ok;
}

/* The device's argmax: its own logits' first maximum, and the CPU's where
 * the CPU's margin is clear of the bound. */
static void check_argmax(const int32_t *am, const float *lg, const float *lc, int rows, int V)
{
    double tol = GPU_TOL * fmax(1.0, max_abs(lc, (size_t)rows * V));
    for (int r = 0; r < rows; r++) {
        const float *g = lg + (size_t)r * V, *c = lc + (size_t)r * V;
        CHECK(am[r] == tb_argmax(g, V));
        int best = tb_argmax(c, V);
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != best && c[v] > second)
                second = c[v];
        if (c[best] - second > 2 * tol)
            CHECK(am[r] == best);
    }
}

static void round_to_bf16(tb_model *m)
{
    for (size_t i = 0; i < m->arena_floats; i++)
        m->arena[i] = tb_bf16_to_f32(tb_f32_to_bf16(m->arena[i]));
}

/* One (B, n) case on a fresh history: prompts into both, then each check. */
static void check_case(tb_model *m, tb_gpu *g, int B, int n)
{
    int V = m->cfg.vocab_size, H = m->cfg.hidden_size, NL = m->cfg.n_layers;
    int slots[MAX_B], len[MAX_B];
    tb_engine c;
    char err[512];
    CHECK(tb_engine_open_cpu(&c, m, 0) == 0);
    CHECK(c.iface->reserve(c.ctx, SEQS, LEN, ROWS, err, sizeof err) == 0);
    CHECK(c.iface->set_padding(c.ctx, NULL, 0) == 0);
    CHECK(tb_gpu_set_padding(g, NULL, 0) == 0);
    int32_t prompt[64];
    for (int b = 0; b < B; b++) {
        slots[b] = (2 * b + 1) % SEQS; /* 1 3 5 7 0 2 4 6: distinct, out of order */
        len[b] = 3 + (7 * b) % 13;     /* ragged */
        for (int i = 0; i < len[b]; i++)
            prompt[i] = rand_token(V);
        int32_t nc, ng;
        CHECK(c.iface->prefill_slots(c.ctx, prompt, &slots[b], 1, len[b], &nc, NULL) == 0);
        CHECK(tb_gpu_prefill_slots(g, prompt, 1, len[b], &slots[b], &ng, NULL) == 0);
    }
    size_t rows = (size_t)B * n;
    int32_t *x = tb_xmalloc(rows * sizeof *x), *y = tb_xmalloc(rows * sizeof *y), *xc = tb_xmalloc(rows * sizeof *xc);
    int32_t *ag = tb_xmalloc(rows * sizeof *ag), *ac = tb_xmalloc(rows * sizeof *ac), *a2 = tb_xmalloc(rows * sizeof *a2);
    float *lg = tb_xmalloc(rows * V * sizeof(float)), *lc = tb_xmalloc(rows * V * sizeof(float));
    float *l2 = tb_xmalloc(rows * V * sizeof(float)), *step = tb_xmalloc((size_t)B * V * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        x[r] = rand_token(V), y[r] = rand_token(V);

    /* verify, with the capture on */
    int layers[3] = {NL / 2, 0, NL - 1};
    CHECK(c.iface->set_capture(c.ctx, layers, 3) == 0);
    CHECK(tb_gpu_set_capture(g, layers, 3) == 0);
    CHECK(tb_gpu_verify_slots(g, x, slots, B, n, ag, lg) == 0);
    CHECK(c.iface->verify_slots(c.ctx, x, slots, B, n, ac, lc) == 0);
    close_to("verify logits", lg, lc, rows * V);
    check_argmax(ag, lg, lc, (int)rows, V);
    int cr = 0, gr = 0;
    const float *cc = c.iface->captured(c.ctx, &cr), *gc = tb_gpu_captured(g, &gr);
    CHECK(cc && gc && cr == (int)rows && gr == (int)rows);
    if (cc && gc && gr == (int)rows) {
        float *hc = tb_xmalloc(rows * 3 * H * sizeof(float));
        CHECK(cudaMemcpy(hc, gc, rows * 3 * H * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
        close_to("captured hidden states", hc, cc, rows * 3 * H);
        free(hc);
    }
    CHECK(tb_gpu_set_capture(g, NULL, 0) == 0);
    CHECK(c.iface->set_capture(c.ctx, NULL, 0) == 0);
    CHECK(tb_gpu_captured(g, &gr) == NULL && gr == 0);

    /* the same tokens as n decode steps (the graph) after a rollback */
    for (int b = 0; b < B; b++)
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b]) == 0);
    for (int i = 0; i < n; i++) {
        int32_t next[MAX_B];
        for (int b = 0; b < B; b++)
            next[b] = x[b * n + i];
        CHECK(tb_gpu_decode_slots(g, slots, B, next, step) == 0);
        for (int b = 0; b < B; b++)
            memcpy(l2 + ((size_t)b * n + i) * V, step + (size_t)b * V, (size_t)V * sizeof(float));
    }
    close_to("verify vs decode steps", lg, l2, rows * V);

    /* rollback exactness: cut at len + keep; Y twice; a twin history.
     * Both histories are written by the same call (a verification of n
     * rows, outputs off): the decode steps above wrote the same tokens'
     * keys and values through other kernels, equal only within the bound,
     * so a history they wrote is not the twin of one a verification
     * wrote. */
    for (int b = 0; b < B; b++)
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b]) == 0);
    CHECK(tb_gpu_verify_slots(g, x, slots, B, n, NULL, NULL) == 0);
    int keep[MAX_B], m2 = n < 4 ? n : 4;
    for (int b = 0; b < B; b++) {
        keep[b] = (b * 3) % (n + 1);
        for (int i = 0; i < n; i++)
            xc[b * n + i] = i < keep[b] ? x[b * n + i] : rand_token(V);
    }
    for (int b = 0; b < B; b++)
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b] + keep[b]) == 0);
    CHECK(tb_gpu_verify_slots(g, y, slots, B, m2, ag, lg) == 0);
    for (int b = 0; b < B; b++)
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b] + keep[b]) == 0);
    CHECK(tb_gpu_verify_slots(g, y, slots, B, m2, a2, l2) == 0);
    CHECK(memcmp(lg, l2, (size_t)B * m2 * V * sizeof(float)) == 0);
    CHECK(memcmp(ag, a2, (size_t)B * m2 * sizeof(int32_t)) == 0);
    for (int b = 0; b < B; b++)
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b]) == 0);
    CHECK(tb_gpu_verify_slots(g, xc, slots, B, n, NULL, NULL) == 0); /* no outputs: the cache only */
    for (int b = 0; b < B; b++)
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b] + keep[b]) == 0);
    CHECK(tb_gpu_verify_slots(g, y, slots, B, m2, a2, l2) == 0);
    CHECK(memcmp(lg, l2, (size_t)B * m2 * V * sizeof(float)) == 0);
    CHECK(memcmp(ag, a2, (size_t)B * m2 * sizeof(int32_t)) == 0);
    /* the CPU from its own rollback */
    for (int b = 0; b < B; b++)
        CHECK(c.iface->truncate_slot(c.ctx, slots[b], len[b] + keep[b]) == 0);
    CHECK(c.iface->verify_slots(c.ctx, y, slots, B, m2, ac, lc) == 0);
    close_to("verify after a rollback", lg, lc, (size_t)B * m2 * V);
    check_argmax(ag, lg, lc, B * m2, V);
    for (int b = 0; b < B; b++)
        len[b] += keep[b] + m2;

    /* draft: against the CPU's; argmax alone the same; lengths unchanged */
    CHECK(tb_gpu_draft_slots(g, x, slots, B, n, ag, lg) == 0);
    CHECK(c.iface->draft_span_slots(c.ctx, x, slots, B, n, ac, lc) == 0);
    close_to("draft logits", lg, lc, rows * V);
    check_argmax(ag, lg, lc, (int)rows, V);
    CHECK(tb_gpu_draft_slots(g, x, slots, B, n, a2, NULL) == 0);
    CHECK(memcmp(ag, a2, rows * sizeof(int32_t)) == 0);
    for (int b = 0; b < B; b++) {
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b] + 1) != 0);
        CHECK(tb_gpu_truncate_slot(g, slots[b], len[b]) == 0);
    }
    /* decode continues where the lengths say, over the draft's leftovers */
    {
        int32_t ng[MAX_B], nc[MAX_B];
        for (int b = 0; b < B; b++)
            ng[b] = nc[b] = rand_token(V);
        CHECK(tb_gpu_decode_slots(g, slots, B, ng, step) == 0);
        CHECK(c.iface->decode_slots(c.ctx, slots, B, nc, lc) == 0);
        close_to("decode after a draft", step, lc, (size_t)B * V);
    }

    /* bad calls */
    int dup[2] = {slots[0], slots[0]};
    CHECK(tb_gpu_verify_slots(g, x, dup, 2, 1, ag, NULL) != 0);
    CHECK(tb_gpu_verify_slots(g, x, slots, B, LEN, ag, NULL) != 0);
    CHECK(tb_gpu_truncate_slot(g, SEQS, 0) != 0);
    int32_t bad_tok[1] = {V};
    CHECK(tb_gpu_verify_slots(g, bad_tok, slots, 1, 1, ag, NULL) != 0);
    int bad = NL;
    CHECK(tb_gpu_set_capture(g, &bad, 1) != 0);

    free(x), free(y), free(xc), free(ag), free(ac), free(a2), free(lg), free(lc), free(l2), free(step);
    tb_engine_close(&c);
}

static void check_model(const char *dir)
{
    tb_model m;
    char err[512];
    if (tb_model_load(dir, &m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", dir, err);
        CHECK(0);
        return;
    }
    round_to_bf16(&m);
    for (int fused = 1; fused >= 0; fused--) {
        setenv("TB_GPU_SPAN_ATTN", fused ? "1" : "0", 1); /* read at create */
        tb_gpu *g = NULL;
        if (tb_gpu_create(&g, &m.cfg, &m, 0, err, sizeof err) != 0 ||
            tb_gpu_reserve(g, SEQS, LEN, ROWS, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", dir, err);
            CHECK(0);
            tb_gpu_free(g);
            continue;
        }
        static const int cases[][2] = {{1, 1}, {1, 17}, {3, 5}, {8, 1}, {8, 17}, {5, 16}};
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            int before = check_failures_;
            check_case(&m, g, cases[k][0], cases[k][1]);
            fprintf(stderr, "%s, %s attention, B %d, n %d: %s\n", dir, fused ? "one-kernel" : "batched-GEMM",
                    cases[k][0], cases[k][1], check_failures_ == before ? "ok" : "FAILED");
        }
        tb_gpu_free(g);
    }
    unsetenv("TB_GPU_SPAN_ATTN");
    tb_model_free(&m);
}

int main(void)
{
    char why[256];
    if (tb_gpu_probe(why, sizeof why) != 0) {
        fprintf(stderr, "skip: %s\n", why);
        return 77;
    }
    const char *src = getenv("TB_SOURCE_ROOT");
    char dir[4096];
    const char *models[] = {"tiny-llama-random", "small-sdar"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(dir, sizeof dir, "%s/models/%s", src ? src : ".", models[i]);
        check_model(dir);
    }
    return check_done();
}
