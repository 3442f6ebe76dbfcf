/* test_canvas_records.c — issue 41: the samplers over the whole canvas
 * (sampler.h: LLaDA's semi-autoregressive blocks, low_confidence, random
 * and threshold with Fast-dLLM's caches; Dream's algorithms, one block)
 * report canvases (tb_dllm_hooks.on_canvas) that add up, as
 * test_sampler_trace.c checks for the block samplers: per request, its
 * committed tokens to its output (gen_length), its steps to the batch's
 * steps (the request's steps_done, diffusion.c), and over the batch the
 * positions to the rows the forwards ran (n rows a request a forward,
 * twice with classifier-free guidance), counted by a fake engine. The
 * canvases: one per block (LLaDA family), one in all (Dream), each with a
 * step at least, in order; a fixed schedule's canvases take steps /
 * blocks steps each. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "generate.h"
#include "pick.h"

#define MAX_B 4
#define MASK 1
#define MAX_CANVAS 64

/* A fake network: deterministic proposals (never the mask) and
 * confidences from a hash of the forward, request and position; counts
 * the rows it ran. */
typedef struct fake {
    int forwards;
    int64_t rows; /* sum over forwards of n x canvases run (2B with CFG) */
} fake;

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int fake_pick(void *ctx, const int32_t *canvas, int B, int L, int pos0, int n, int n_attend, int pick0,
                     int npick, const tb_dllm_pick_spec *spec, uint64_t *rng, int32_t *x0, double *conf)
{
    (void)canvas, (void)L, (void)n_attend, (void)rng;
    fake *f = ctx;
    f->forwards++;
    f->rows += (int64_t)n * B * (spec->cfg_scale > 0 ? 2 : 1);
    for (int b = 0; b < B; b++)
        for (int i = pick0; i < pick0 + npick; i++) {
            uint64_t h = mix((uint64_t)f->forwards * 1000003u + (uint64_t)b * 1009u + (uint64_t)(pos0 + i));
            x0[(size_t)b * n + i] = 2 + (int32_t)(h % 50);
            conf[(size_t)b * n + i] = (double)(h >> 11) * 0x1.0p-53; /* [0, 1) */
        }
    return 0;
}

typedef struct records {
    int n[MAX_B], steps[MAX_B], committed[MAX_B], bad[MAX_B];
    int64_t positions[MAX_B];
    int first_steps; /* the first canvas's steps (request 0) */
} records;

static void on_canvas(void *ctx, int b, int steps, int committed, int64_t positions)
{
    records *r = ctx;
    if (b < 0 || b >= MAX_B)
        return;
    if (steps < 1 || committed < 0 || positions < steps)
        r->bad[b]++;
    if (b == 0 && r->n[0] == 0)
        r->first_steps = steps;
    r->n[b]++, r->steps[b] += steps, r->committed[b] += committed, r->positions[b] += positions;
}

typedef struct tcase {
    const char *name;
    tb_dllm_sampler sampler;
    int gen, block, steps;
    double threshold, cfg;
    tb_dllm_cache cache;
    int B;
} tcase;

static void check_one(const tcase *t)
{
    const int P = 5;
    tb_dllm_params p = {.sampler = t->sampler, .gen_length = t->gen, .block_length = t->block, .steps = t->steps,
                        .threshold = t->threshold, .cache = t->cache, .cfg_scale = t->cfg, .temperature = 0,
                        .top_p = 1, .eps = 1e-3, .mask_id = MASK};
    int L = tb_dllm_canvas_length(&p, P);
    CHECK(L <= MAX_CANVAS);
    int32_t canvas[MAX_B * MAX_CANVAS];
    for (int b = 0; b < t->B; b++)
        for (int i = 0; i < L; i++)
            canvas[b * L + i] = i < P ? 10 + i + b : MASK;
    fake f = {0};
    tb_dllm_engine e = {.ctx = &f, .vocab = 64, .forward_pick = fake_pick};
    records r = {0};
    tb_dllm_hooks h = {.ctx = &r, .on_canvas = on_canvas};
    tb_dllm_stats st = {0};
    char why[256] = "";
    int rc = tb_dllm_generate(&e, &p, canvas, t->B, P, 7, &h, &st, why, sizeof why);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", t->name, why);
    CHECK(rc == 0);
    int blocks = t->sampler == TB_DLLM_LOW_CONFIDENCE || t->sampler == TB_DLLM_RANDOM ||
                         t->sampler == TB_DLLM_THRESHOLD
                     ? t->gen / t->block
                     : 1;
    int64_t pos = 0;
    int ok = 1;
    for (int b = 0; b < t->B; b++) {
        pos += r.positions[b];
        ok &= r.n[b] == blocks && r.committed[b] == t->gen && r.steps[b] == st.steps && !r.bad[b];
        ok &= r.positions[b] == r.positions[0]; /* every request runs every forward */
    }
    ok &= pos == f.rows && st.forwards == f.forwards;
    /* a fixed schedule: steps / blocks a canvas */
    if (t->sampler != TB_DLLM_THRESHOLD)
        ok &= r.first_steps == t->steps / blocks;
    if (!ok) {
        fprintf(stderr, "%s: request 0: %d canvases (want %d), %d steps (the batch ran %d), %d tokens (want %d), "
                        "%lld positions; all requests %lld positions, the forwards ran %lld rows; %d impossible\n",
                t->name, r.n[0], blocks, r.steps[0], st.steps, r.committed[0], t->gen, (long long)r.positions[0],
                (long long)pos, (long long)f.rows, r.bad[0]);
        CHECK(0);
    }
}

int main(void)
{
    static const tcase cases[] = {
        /* LLaDA's semi-autoregressive blocks: a fixed schedule */
        {"low_confidence 16/4, 8 steps", TB_DLLM_LOW_CONFIDENCE, 16, 4, 8, 0, 0, TB_DLLM_CACHE_NONE, 2},
        {"low_confidence 16/16, 16 steps", TB_DLLM_LOW_CONFIDENCE, 16, 16, 16, 0, 0, TB_DLLM_CACHE_NONE, 1},
        {"low_confidence 16/8, 4 steps, cfg 1.5", TB_DLLM_LOW_CONFIDENCE, 16, 8, 4, 0, 1.5, TB_DLLM_CACHE_NONE, 3},
        {"random 16/8, 8 steps", TB_DLLM_RANDOM, 16, 8, 8, 0, 0, TB_DLLM_CACHE_NONE, 2},
        /* Fast-dLLM's threshold: steps vary by canvas; its caches */
        {"threshold 0.7 16/4", TB_DLLM_THRESHOLD, 16, 4, 16, 0.7, 0, TB_DLLM_CACHE_NONE, 2},
        {"threshold 0.9 16/4 prefix cache", TB_DLLM_THRESHOLD, 16, 4, 16, 0.9, 0, TB_DLLM_CACHE_PREFIX, 2},
        {"threshold 0.5 16/8 dual cache", TB_DLLM_THRESHOLD, 16, 8, 16, 0.5, 0, TB_DLLM_CACHE_DUAL, 4},
        /* Dream's algorithms: the whole generation one canvas */
        {"origin 16, 8 steps", TB_DLLM_ORIGIN, 16, 16, 8, 0, 0, TB_DLLM_CACHE_NONE, 2},
        {"maskgit_plus 16, 8 steps", TB_DLLM_MASKGIT_PLUS, 16, 16, 8, 0, 0, TB_DLLM_CACHE_NONE, 2},
        {"topk_margin 12, 5 steps", TB_DLLM_TOPK_MARGIN, 12, 12, 5, 0, 0, TB_DLLM_CACHE_NONE, 1},
        {"entropy 16, 16 steps", TB_DLLM_ENTROPY, 16, 16, 16, 0, 0, TB_DLLM_CACHE_NONE, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_one(&cases[i]);
    return check_done();
}
