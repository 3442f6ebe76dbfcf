/* test_dgemma_gpu.c — DiffusionGemma on the GPU (cuda/gpu_dgemma.h, the
 * sampler's device binding diffusion/dgemma_cuda.h) against the CPU
 * (cpu/dgemma_forward.h, golden-tested against transformers in
 * tests/engine/test_dgemma_golden.c). Exit 77 (skip) without a CUDA device.
 * The argument: tests/data/golden-dgemma (its model/ is used when present).
 *
 * Both paths run the same weights: the CPU model's are rounded to bf16
 * first, as the GPU stores them. The GPU keeps bf16 activations at GEMM
 * inputs (float32 accumulation and residual), so values agree to bf16
 * precision: relative RMS within REL_TOL (below: the numbers behind it),
 * each pass compared with the CPU replaying the GPU's routing (a near-tie
 * of the router may flip under bf16). Checked, on tiny-diffusiongemma and
 * the golden model:
 *   - the encoder pass's final-norm output and the logits it gives (a
 *     prompt longer than the window and than the canvas: chunked, windowed);
 *   - the canvas pass's logits: first step, with self-conditioning from the
 *     host, with the z the device's own decide left, and after more tokens
 *     were encoded;
 *   - the device's decide (argmax, Gumbel draw from the shared noise
 *     stream, entropy) against tb_dg_decide's on the CPU's logits;
 *   - the cache is the canvas pass's to read only: a canvas pass between
 *     two encodes changes nothing after it (bit for bit), and the cached
 *     length stays;
 *   - whole generate() runs, CPU engine against the device engine, step by
 *     step (canvas read, sampled, argmax, acceptance, stop). A near-tie is
 *     a step where the two part only where the CPU's own margin is within
 *     the bound: an argmax whose CPU top-1/top-2 z gap is below it, a draw
 *     whose CPU log-ratio gap (z - log q) is below it, an acceptance that
 *     differs while every entropy agrees within the bound, a stop that
 *     differs while the mean entropy is within the bound of the confidence
 *     threshold. The comparison ends there, reported; a difference beyond
 *     that fails.
 * And the preset at the published shape (diffusiongemma-26b-a4b, random
 * bf16 weights made on the device, ~50 GB) loads, encodes a prompt of 300
 * tokens (two chunks) and runs one canvas step: its weights' bytes, the
 * roofline's FLOPs of the canvas pass against its active parameters,
 * finite softcapped logits, ids and entropies in range. Skipped, saying
 * so, when the device has less free memory than it needs.
 *
 * dtype = fp8 (gpu_dgemma.h's tb_gpu_dgemma_create_dtype): the same passes
 * on tiny-diffusiongemma rounded by tb_dgemma_round_fp8, against the CPU's
 * FP8 twin (cpu/dgemma_forward.h's fp8_act), with the bounds below: on the
 * FP8 GEMM (canvas 8: products of at most 64 rows, gemm_fp8's unscaled
 * route and k_fp8_scale_out), with the canvas widened to 96 (its
 * outer-vector route), and with TB_GPU_FP8_GEMM=0 (the dense projections'
 * both sides dequantized to bf16; the experts, on every route, one grouped
 * GEMM a projection over their codes, float products); the generate() runs stay bf16's (FP8's roundings part the two
 * runs at the first step on this model's small logits: see the bounds), a
 * GPU-only FP8 generate() runs to its end. The published shape under fp8:
 * its E4M3 weights' bytes held (about half of bf16's), the roofline's bytes
 * a weight one, the FP8 GEMM's ceiling, the same FLOPs, values in range. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "dgemma_cpu.h"
#include "dgemma_cuda.h"
#include "dgemma_forward.h"
#include "dgemma_model.h"
#include "dgemma_sampler.h"
#include "gpu.h"
#include "gpu_dgemma.h"
#include "safetensors.h"

/* Bounds, from an emulation of the GPU's bf16 roundings on the CPU (a copy
 * of cpu/dgemma_forward.c rounding where gpu_dgemma.cu stores bf16: GEMM
 * inputs, q/k/v, P, the expert path, the soft probabilities), run against
 * the exact CPU on this file's tiny inputs, the routes the same in both:
 *   relative RMS ||gpu - cpu|| / ||cpu||, preset seed 3 (this test's):
 *   encoder output 0.0174, canvas logits 0.0158, self-conditioned 0.0213,
 *   after more tokens 0.0158; the worst of 54 seeds (of 1-300) whose
 *   routes did not flip: 0.041, 0.028, 0.039, 0.034. REL_TOL: 5e-2.
 *   (Max-abs is printed, not bounded: 0.067 on the encoder output of
 *   seed 3, 0.165 on seed 4, with |cpu| up to ~4: the norms amplify.)
 *   Routing probabilities: max |gpu - cpu| 2.2e-4 on seed 3 (median of
 *   those seeds 3.2e-4). Where the GPU's top-k set differs from the CPU's,
 *   the CPU's own margin p_k - p_(k+1) must be within ROUTE_TIE = 1e-3.
 * The tiny router is near uniform (margins ~1e-3, the smallest of a pass
 * 1e-7 .. 3e-4 over seeds 1-300, 246 of 300 seeds flip a set somewhere), so
 * no seed keeps every margin above the noise: each pass is compared with
 * the CPU replaying the GPU's sets (route_force) instead. */
#define REL_TOL 5e-2
#define ROUTE_TIE 1e-3
/* dtype = fp8: the same emulation with the CPU's FP8 path (tb_dgemma_round_fp8,
 * fp8_act) under the GPU's bf16 roundings (and its experts' float FP8
 * products) against the CPU's FP8 path alone, routes replayed, tiny preset,
 * seeds 1-300. The two round each projection's input to E4M3 from values
 * that differ at bf16's level, and wherever that moves a value across the
 * middle of two E4M3 values they round it a whole E4M3 step (1/16) apart
 * (docs/PERFORMANCE.md saw the same on the dense engine): relative RMS
 * encoder output / canvas logits / self-conditioned, seed 3 (this test's)
 * 0.119 / 0.159 / 0.141; over the 300 seeds median 0.110 / 0.115 / 0.116,
 * 99th percentile 0.21 / 0.27 / 0.24, worst 0.21 / 0.37 / 0.26; the
 * dequantizing route (then with bf16 expert products; float since the
 * experts' grouped GEMM, 2026-12-07) worst 0.23 / 0.33 / 0.27; canvas
 * 96, seeds 1-60, worst 0.21 / 0.22 / 0.21. REL_TOL_FP8: 0.4, above the worst
 * (a wrong scale, row or expert is a power of two off: far beyond it).
 * Routing probabilities: max |gpu - cpu| median 1.8e-3, worst 9.0e-3; where
 * the sets differ the CPU's own margin was at most 5.6e-3 (2.4e-3 on seed 3
 * of the dequantizing route). ROUTE_TIE_FP8: 1e-2. */
#define REL_TOL_FP8 0.4
#define ROUTE_TIE_FP8 1e-2
/* the bounds in force: bf16's, or fp8's for the fp8 sections */
static double rel_tol = REL_TOL, route_tie = ROUTE_TIE;
/* generate(): runs compared step by step must agree on this many steps
 * before they part at an argmax near-tie, on one of up to
 * GENERATE_SEEDS seeds (a near-tie of the Gumbel-perturbed scores within
 * the window may come at the first steps of a seed: on the tiny model,
 * whose logits span 0.4 and err by 0.01, seeds 11 and 12 part at step 1
 * on the H100) */
#define MIN_STEPS 2
#define GENERATE_SEEDS 6

static void round_model(tb_dgemma_model *m)
{
    for (size_t i = 0; i < m->arena_floats; i++)
        m->arena[i] = tb_bf16_to_f32(tb_f32_to_bf16(m->arena[i]));
    /* the RoPE tables and the scale as the loader derives them (not weights) */
    tb_dgemma_derive(&m->cfg, m->inv_freq_sliding, m->inv_freq_full, &m->embed_scale);
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m || d != d ? (d != d ? INFINITY : d) : m;
    }
    return m;
}

static double rel_rms(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return r > 0 ? sqrt(d / r) : INFINITY;
}

/* the largest max-abs difference close_to saw on logits (the decide windows' base) */
static double logit_err;

/* gpu within REL_TOL of cpu by relative RMS; prints max-abs too */
static int close_to(const char *name, const char *what, const float *gpu, const float *cpu, size_t n)
{
    double ref = max_abs(cpu, n), diff = max_diff(gpu, cpu, n), rr = rel_rms(gpu, cpu, n);
    if (strstr(what, "logits") && diff > logit_err)
        logit_err = diff;
    fprintf(stderr, "%s: %s: relative RMS %.4f (bound %.2g); max |cpu| %.3f, max diff %.3g\n", name, what, rr,
            rel_tol, ref, diff);
    return rr <= rel_tol;
}

/* The GPU's last pass's routes replayed on the CPU: set after a GPU pass,
 * before the CPU's; checked after it: the two part only at the CPU's near-ties. */
static int32_t *route_log;
static size_t route_cap;
static void replay(tb_dgemma_state *st, tb_gpu_dgemma *d)
{
    st->route_force = route_log, st->route_force_n = tb_gpu_dgemma_routes_logged(d);
}
static int routes_ok(const char *name, const char *what, const tb_dgemma_state *st)
{
    fprintf(stderr, "%s: %s: routing margin %.2e; the GPU chose otherwise in %d rows, the largest CPU margin "
            "there %.2e (bound %.0e)\n", name, what, st->route_gap, st->route_replaced, st->route_replaced_gap,
            route_tie);
    return st->route_replaced_gap <= route_tie;
}

/* softcap(hidden . embed^T): the logits an encoder row would give */
static void head(const tb_dgemma_model *m, const float *hidden, int n, float *logits)
{
    const tb_dgemma_config *c = &m->cfg;
    for (int r = 0; r < n; r++)
        for (int v = 0; v < c->vocab; v++) {
            double s = 0;
            for (int i = 0; i < c->hidden; i++)
                s += (double)hidden[(size_t)r * c->hidden + i] * m->embed[(size_t)v * c->hidden + i];
            logits[(size_t)r * c->vocab + v] = c->softcap > 0 ? (float)(tanh(s / c->softcap) * c->softcap) : (float)s;
        }
}

static void ids(int32_t *t, int n, int V, unsigned salt)
{
    for (int i = 0; i < n; i++)
        t[i] = 3 + (int32_t)((i * 37u + salt * 101u + 7u) % (unsigned)(V - 3));
}

/* ------------------------------------------------------------ passes */

static void passes(const char *name, const tb_dgemma_model *m)
{
    const tb_dgemma_config *c = &m->cfg;
    int C = c->canvas, V = c->vocab, H = c->hidden, W = c->sliding_window;
    int P = W + C + 3, more = 5, ctx = P + more + 8; /* longer than the window and than a chunk */
    char err[512];
    tb_gpu_dgemma *d = NULL;
    tb_dgemma_state st;
    if (tb_gpu_dgemma_create_dtype(&d, NULL, m, 0, m->fp8, err, sizeof err) || tb_gpu_dgemma_reserve(d, ctx)) {
        fprintf(stderr, "%s: %s\n", name, d ? tb_gpu_dgemma_error(d) : err);
        CHECK(0);
        tb_gpu_dgemma_free(d);
        return;
    }
    CHECK(tb_dgemma_state_init(&st, m, ctx, C, err, sizeof err) == 0);
    CHECK(st.fp8_act == m->fp8); /* the CPU's FP8 twin under an FP8 model */
    if (m->fp8) { /* which GEMM runs the products: the FP8 one where the device has it, unless turned off */
        const char *gemm = tb_gpu_gemm_dtype(tb_gpu_dgemma_gpu(d)), *env = getenv("TB_GPU_FP8_GEMM");
        struct cudaDeviceProp prop;
        int cc = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.major * 10 + prop.minor : 0;
        fprintf(stderr, "%s: products on the %s GEMM (compute capability %d)\n", name, gemm, cc);
        CHECK(strcmp(gemm, (env && strcmp(env, "0") == 0) || cc < 89 ? "bf16" : "fp8") == 0);
    }
    route_cap = (size_t)c->n_layers * (size_t)(P + more) * (size_t)c->top_k;
    route_log = malloc(route_cap * sizeof *route_log);
    int32_t *route_more = malloc(route_cap * sizeof *route_more);
    if (!route_log || !route_more) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    tb_gpu_dgemma_log_routes(d, route_log, route_cap);
    size_t cv = (size_t)C * V;
    int32_t *prompt = malloc((size_t)(P + more) * sizeof *prompt), *c1 = malloc((size_t)C * sizeof *c1);
    int32_t *c2 = malloc((size_t)C * sizeof *c2);
    float *hc = malloc((size_t)P * H * sizeof *hc), *hg = malloc((size_t)P * H * sizeof *hg);
    float *lc = malloc((size_t)P * V * sizeof *lc), *lg = malloc((size_t)P * V * sizeof *lg);
    float *dc = malloc(cv * sizeof *dc), *dg = malloc(cv * sizeof *dg), *z = malloc(cv * sizeof *z);
    float *da = malloc(cv * sizeof *da), *db = malloc(cv * sizeof *db);
    if (!prompt || !c1 || !c2 || !hc || !hg || !lc || !lg || !dc || !dg || !z || !da || !db) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    ids(prompt, P + more, V, 1);
    if (c->bos_id >= 0)
        prompt[0] = c->bos_id;
    ids(c1, C, V, 2);
    ids(c2, C, V, 3);

    /* the encoder pass */
    CHECK(tb_gpu_dgemma_encode(d, prompt, P, hg) == 0);
    CHECK(tb_gpu_dgemma_len(d) == P);
    replay(&st, d);
    CHECK(tb_dgemma_encode(&st, prompt, P, hc) == 0);
    CHECK(routes_ok(name, "encoder pass", &st));
    CHECK(close_to(name, "encoder final-norm output", hg, hc, (size_t)P * H));
    head(m, hc, P, lc);
    head(m, hg, P, lg);
    CHECK(close_to(name, "encoder logits", lg, lc, (size_t)P * V));

    /* the canvas pass: no signal; then self-conditioning from the host */
    CHECK(tb_gpu_dgemma_denoise(d, c1, NULL, 0, dg) == 0);
    replay(&st, d);
    CHECK(tb_dgemma_denoise(&st, c1, C, NULL, dc) == 0);
    CHECK(routes_ok(name, "canvas pass", &st));
    CHECK(close_to(name, "canvas logits, first step", dg, dc, cv));
    for (size_t i = 0; i < cv; i++)
        z[i] = dc[i] / 0.7f;
    CHECK(tb_gpu_dgemma_denoise(d, c1, z, 0, dg) == 0);
    replay(&st, d);
    CHECK(tb_dgemma_denoise(&st, c1, C, z, dc) == 0);
    CHECK(routes_ok(name, "self-conditioned canvas pass", &st));
    CHECK(close_to(name, "canvas logits, self-conditioned", dg, dc, cv));

    /* the device's decide on its logits against tb_dg_decide on the CPU's */
    tb_dg_params p;
    tb_dg_params_default(&p);
    float T = tb_dg_temperature(&p, p.max_steps);
    uint64_t seed = 77, n0 = 1234;
    float *q = malloc(cv * sizeof *q), *ec = malloc((size_t)C * sizeof *ec), *eg = malloc((size_t)C * sizeof *eg);
    int32_t *w = malloc((size_t)C * 8 * sizeof *w);
    unsigned char *acc = malloc((size_t)C);
    int *order = malloc((size_t)C * sizeof *order);
    if (!q || !ec || !eg || !w || !acc || !order) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    int32_t *sc_ = w, *ac = w + C, *sg = w + 2 * C, *ag = w + 3 * C, *renoise = w + 4 * C, *next = w + 5 * C;
    tb_dg_rng r;
    tb_dg_rng_seed(&r, seed);
    r.n = n0;
    tb_dg_rng_exp(&r, q, cv);
    for (int i = 0; i < C; i++)
        renoise[i] = 0;
    memcpy(z, dc, cv * sizeof *z); /* tb_dg_decide turns it into z in place */
    double mean;
    tb_dg_decide(&p, C, V, p.max_steps, z, q, c1, renoise, sc_, ac, acc, ec, next, &mean, order);
    CHECK(tb_gpu_dgemma_decide(d, T, seed, n0, sg, ag, eg) == 0);
    int parted = 0, ties = 0;
    /* the near-tie window: 3 x the largest logit error measured above, in z = l / T */
    double ztol = 3 * logit_err / T;
    fprintf(stderr, "%s: decide's near-tie window %.3g (3 x max logit diff %.3g / T %.3g)\n", name, ztol, logit_err,
            (double)T);
    for (int i = 0; i < C; i++) {
        const float *zi = z + (size_t)i * V, *qi = q + (size_t)i * V;
        /* CPU margins: top-1/top-2 of z, and of z - log q (the draw) */
        double z1 = -INFINITY, z2 = -INFINITY, g1 = -INFINITY, g2 = -INFINITY;
        for (int v = 0; v < V; v++) {
            double a = zi[v], b = zi[v] - log((double)qi[v]);
            if (a > z1)
                z2 = z1, z1 = a;
            else if (a > z2)
                z2 = a;
            if (b > g1)
                g2 = g1, g1 = b;
            else if (b > g2)
                g2 = b;
        }
        if (ag[i] != ac[i] || sg[i] != sc_[i]) {
            int tie = (ag[i] == ac[i] || z1 - z2 <= ztol) && (sg[i] == sc_[i] || g1 - g2 <= ztol);
            ties += tie;
            parted += !tie;
        }
        if (!(fabs((double)eg[i] - ec[i]) <= ztol))
            parted++;
    }
    fprintf(stderr, "%s: decide on the device: %d of %d positions part at near-ties, %d beyond\n", name, ties, C,
            parted);
    CHECK(parted == 0);
    CHECK(tb_gpu_dgemma_decide(d, T, seed, n0, sg, ag, eg) == -1); /* decided already: z is no logits */
    /* with the device's own z as the signal, against the CPU's z */
    CHECK(tb_gpu_dgemma_denoise(d, c1, NULL, 1, dg) == 0);
    replay(&st, d);
    CHECK(tb_dgemma_denoise(&st, c1, C, z, dc) == 0);
    CHECK(routes_ok(name, "canvas pass self-conditioned on the device's z", &st));
    CHECK(close_to(name, "canvas logits, self-conditioned on the device's z", dg, dc, cv));
    CHECK(tb_gpu_dgemma_denoise(d, c1, NULL, 1, dg) == -1); /* that z is gone: the pass overwrote it */

    /* the cache: a canvas pass between two encodes changes nothing after it */
    tb_gpu_dgemma_reset(d);
    CHECK(tb_gpu_dgemma_encode(d, prompt, P, NULL) == 0);
    CHECK(tb_gpu_dgemma_decide(d, T, seed, n0, sg, ag, eg) == -1); /* no canvas pass since the encode */
    CHECK(tb_gpu_dgemma_denoise(d, c2, NULL, 0, NULL) == 0);
    CHECK(tb_gpu_dgemma_len(d) == P);
    CHECK(tb_gpu_dgemma_encode(d, prompt + P, more, NULL) == 0);
    CHECK(tb_gpu_dgemma_denoise(d, c1, NULL, 0, da) == 0);
    tb_gpu_dgemma_reset(d);
    CHECK(tb_gpu_dgemma_encode(d, prompt, P, NULL) == 0);
    CHECK(tb_gpu_dgemma_encode(d, prompt + P, more, NULL) == 0);
    size_t n_more = tb_gpu_dgemma_routes_logged(d);
    memcpy(route_more, route_log, n_more * sizeof *route_more);
    CHECK(tb_gpu_dgemma_denoise(d, c1, NULL, 0, db) == 0);
    CHECK(memcmp(da, db, cv * sizeof *da) == 0);
    fprintf(stderr, "%s: a canvas pass between encodes left the cache as it was: %s\n", name,
            memcmp(da, db, cv * sizeof *da) == 0 ? "yes" : "NO");
    /* and after those tokens, against the CPU (its cache: the prompt) */
    st.route_force = route_more, st.route_force_n = n_more;
    CHECK(tb_dgemma_encode(&st, prompt + P, more, NULL) == 0);
    CHECK(routes_ok(name, "encoder pass of more tokens", &st));
    replay(&st, d);
    CHECK(tb_dgemma_denoise(&st, c1, C, NULL, dc) == 0);
    CHECK(routes_ok(name, "canvas pass after them", &st));
    CHECK(close_to(name, "canvas logits after more encoded tokens", db, dc, cv));
    tb_gpu_dgemma_log_routes(d, NULL, 0);
    st.route_force = NULL;
    /* refusals: a cache overflow, an id outside the vocabulary */
    CHECK(tb_gpu_dgemma_encode(d, prompt, ctx, NULL) == -1);
    c2[3] = V;
    CHECK(tb_gpu_dgemma_denoise(d, c2, NULL, 0, NULL) == -1);

    tb_dgemma_state_free(&st);
    tb_gpu_dgemma_free(d);
    free(prompt), free(c1), free(c2), free(hc), free(hg), free(lc), free(lg), free(dc), free(dg), free(z);
    free(da), free(db), free(q), free(ec), free(eg), free(w), free(acc), free(order);
    free(route_log), free(route_more);
    route_log = NULL;
}

/* ------------------------------------------------------------ generate */

typedef struct rec {
    int C, V, cap, n;
    int32_t *input, *sampled, *argmax, *next; /* [cap][C] */
    unsigned char *accept;                    /* [cap][C] */
    float *entropy;                           /* [cap][C] */
    double *mean;                             /* [cap] */
    int *stop, *canvas, *step;                /* [cap] */
    float *z;                                 /* [cap][C][V] (CPU only) */
    uint64_t *n0;                             /* [cap]: the stream's index of the step's first Exp(1) value */
    uint64_t drawn;                           /* stream values drawn so far */
    double *gap;                              /* [cap]: the CPU's smallest routing margin up to the step */
    const tb_dgemma_state *st;                /* the CPU's (NULL: the GPU's run) */
    double pend;                              /* that margin so far */
} rec;

/* the CPU engine, its passes' routing margins recorded into the rec */
typedef struct gap_engine {
    tb_dg_engine in;
    rec *r;
} gap_engine;
static int ge_encode(void *ctx, const int32_t *t, int n)
{
    gap_engine *g = ctx;
    int rc = g->in.encode(g->in.ctx, t, n);
    g->r->pend = fmin(g->r->pend, g->r->st->route_gap);
    return rc;
}
static int ge_denoise(void *ctx, const int32_t *canvas, const float *sc, float *logits)
{
    gap_engine *g = ctx;
    int rc = g->in.denoise(g->in.ctx, canvas, sc, logits);
    g->r->pend = fmin(g->r->pend, g->r->st->route_gap);
    return rc;
}

static int rec_init(rec *r, int C, int V, int cap, int keep_z)
{
    memset(r, 0, sizeof *r);
    r->C = C, r->V = V, r->cap = cap;
    size_t n = (size_t)cap * C;
    r->input = malloc(n * 4 * sizeof(int32_t));
    r->accept = malloc(n);
    r->entropy = malloc(n * sizeof(float));
    r->mean = malloc((size_t)cap * sizeof(double));
    r->stop = malloc((size_t)cap * 3 * sizeof(int));
    r->n0 = malloc((size_t)cap * sizeof(uint64_t));
    r->z = keep_z ? malloc(n * V * sizeof(float)) : NULL;
    r->gap = malloc((size_t)cap * sizeof(double));
    r->pend = 1;
    if (!r->input || !r->accept || !r->entropy || !r->mean || !r->stop || !r->n0 || (keep_z && !r->z) || !r->gap)
        return -1;
    r->sampled = r->input + n, r->argmax = r->input + 2 * n, r->next = r->input + 3 * n;
    r->canvas = r->stop + cap, r->step = r->stop + 2 * cap;
    return 0;
}

static void rec_free(rec *r)
{
    free(r->input), free(r->accept), free(r->entropy), free(r->mean), free(r->stop), free(r->n0), free(r->z), free(r->gap);
}

static void on_step(void *ctx, const tb_dg_step *s)
{
    rec *r = ctx;
    int C = r->C;
    if (s->step == 0)
        r->drawn += (uint64_t)C; /* the canvas's ids */
    if (r->n >= r->cap)
        return;
    size_t o = (size_t)r->n * C;
    memcpy(r->input + o, s->input, (size_t)C * sizeof(int32_t));
    memcpy(r->sampled + o, s->sampled, (size_t)C * sizeof(int32_t));
    memcpy(r->argmax + o, s->argmax, (size_t)C * sizeof(int32_t));
    memcpy(r->next + o, s->next, (size_t)C * sizeof(int32_t));
    memcpy(r->accept + o, s->accept, (size_t)C);
    memcpy(r->entropy + o, s->entropy, (size_t)C * sizeof(float));
    if (r->z && s->logits)
        memcpy(r->z + o * r->V, s->logits, (size_t)C * r->V * sizeof(float));
    r->mean[r->n] = s->mean_entropy;
    r->stop[r->n] = s->stop;
    r->canvas[r->n] = s->canvas;
    r->step[r->n] = s->step;
    r->n0[r->n] = r->drawn;
    r->gap[r->n] = r->pend; /* since the run's start: a flip in an encode stays in the cache */
    r->drawn += (uint64_t)C * r->V + (uint64_t)C; /* the step's Exp(1) values, then its ids */
    r->n++;
}

/* Step t of the CPU run against the GPU's: 0 equal, 1 parted at a
 * near-tie (reported), -1 parted beyond one. */
static int compare_step(const char *name, const tb_dg_params *p, const rec *a, const rec *b, int t, uint64_t seed,
                        double tol)
{
    int C = a->C, V = a->V;
    size_t o = (size_t)t * C;
    if (memcmp(a->input + o, b->input + o, (size_t)C * sizeof(int32_t)) != 0) {
        fprintf(stderr, "%s: step %d reads different canvases with no difference before\n", name, t);
        return -1;
    }
    const float *z = a->z + o * V;
    float *q = malloc((size_t)V * sizeof *q);
    if (!q)
        return -1;
    int beyond = 0, tied = 0, entropies_close = 1;
    for (int i = 0; i < C; i++)
        if (!(fabs((double)a->entropy[o + i] - b->entropy[o + i]) <= tol)) {
            entropies_close = 0;
            beyond++;
            fprintf(stderr, "%s: step %d position %d: entropy %.6g (cpu) vs %.6g\n", name, t, i, a->entropy[o + i],
                    b->entropy[o + i]);
        }
    for (int i = 0; i < C; i++) {
        int am = a->argmax[o + i] != b->argmax[o + i], sm = a->sampled[o + i] != b->sampled[o + i];
        if (!am && !sm)
            continue;
        const float *zi = z + (size_t)i * V;
        tb_dg_rng r;
        tb_dg_rng_seed(&r, seed);
        r.n = a->n0[t] + (uint64_t)i * V;
        tb_dg_rng_exp(&r, q, (size_t)V);
        double z1 = -INFINITY, z2 = -INFINITY, g1 = -INFINITY, g2 = -INFINITY;
        for (int v = 0; v < V; v++) {
            double x = zi[v], y = zi[v] - log((double)q[v]);
            if (x > z1)
                z2 = z1, z1 = x;
            else if (x > z2)
                z2 = x;
            if (y > g1)
                g2 = g1, g1 = y;
            else if (y > g2)
                g2 = y;
        }
        if ((am && z1 - z2 > tol) || (sm && g1 - g2 > tol)) {
            beyond++;
            fprintf(stderr, "%s: step %d position %d: argmax %d/%d (cpu margin %.3g), sampled %d/%d (cpu margin %.3g), "
                    "bound %.3g\n", name, t, i, a->argmax[o + i], b->argmax[o + i], z1 - z2, a->sampled[o + i],
                    b->sampled[o + i], g1 - g2, tol);
        } else {
            tied++;
        }
    }
    free(q);
    /* acceptance: a function of the entropies; apart only where they agree within the bound */
    int acc = memcmp(a->accept + o, b->accept + o, (size_t)C) != 0;
    if (acc && entropies_close)
        tied++;
    /* the stop: near the confidence threshold, or following an argmax that parted */
    int stop = a->stop[t] != b->stop[t];
    if (stop && (fabs(a->mean[t] - p->confidence) <= tol || tied))
        tied++;
    else if (stop)
        beyond++;
    if (beyond && a->gap[t] <= ROUTE_TIE) { /* the GPU's routes are not replayed here: a near-tie there */
        fprintf(stderr, "%s: canvas %d step %d: the runs part after a routing near-tie (CPU margin %.2e so far, "
                "bound %.0e); compared up to here\n", name, a->canvas[t], a->step[t], a->gap[t],
                (double)ROUTE_TIE);
        return 2;
    }
    if (beyond)
        return -1;
    if (tied) {
        fprintf(stderr, "%s: canvas %d step %d: the runs part at a near-tie (%d positions or decisions within the "
                "bound %.3g); compared up to here\n", name, a->canvas[t], a->step[t], tied, tol);
        return 1;
    }
    return memcmp(a->next + o, b->next + o, (size_t)C * sizeof(int32_t)) == 0 ? 0 : -1;
}

/* Returns the steps compared equal before the runs part at an argmax
 * near-tie (every step when they do not: then they must be the same) */
static int generate_runs(const char *name, const tb_dgemma_model *m, uint64_t seed, int max_steps)
{
    const tb_dgemma_config *c = &m->cfg;
    int C = c->canvas, V = c->vocab, P = c->sliding_window + 3, canvases = 2;
    char err[512];
    tb_dg_params p;
    tb_dg_params_default(&p);
    p.max_steps = max_steps;
    p.max_new_tokens = canvases * C;
    p.eos_ids = c->eos, p.n_eos = c->n_eos, p.pad_id = c->pad_id >= 0 ? c->pad_id : 0;
    int ctx = P + canvases * C;
    tb_gpu_dgemma *d = NULL;
    tb_dgemma_state st;
    if (tb_gpu_dgemma_create(&d, NULL, m, 0, err, sizeof err) || tb_gpu_dgemma_reserve(d, ctx) ||
        tb_dgemma_state_init(&st, m, ctx, C, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", name, d ? tb_gpu_dgemma_error(d) : err);
        CHECK(0);
        tb_gpu_dgemma_free(d);
        return 0;
    }
    int32_t *prompt = malloc((size_t)P * sizeof *prompt);
    int n_max = tb_dg_max_output(&p, C);
    int32_t *oc = malloc((size_t)n_max * sizeof *oc), *og = malloc((size_t)n_max * sizeof *og);
    rec a, b;
    if (!prompt || !oc || !og || rec_init(&a, C, V, canvases * max_steps, 1) || rec_init(&b, C, V, canvases * max_steps, 0)) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    ids(prompt, P, V, 5);
    if (c->bos_id >= 0)
        prompt[0] = c->bos_id;
    a.st = &st;
    gap_engine ge = {.in = tb_dg_cpu_engine(&st), .r = &a};
    tb_dg_engine ec = ge.in, eg = tb_dg_cuda_engine(d, c);
    ec.ctx = &ge, ec.encode = ge_encode, ec.denoise = ge_denoise;
    CHECK(eg.denoise_decide != NULL); /* the device decides */
    tb_dg_hooks ha = {.ctx = &a, .on_step = on_step}, hb = {.ctx = &b, .on_step = on_step};
    tb_dg_stats sa, sb;
    int na = 0, nb = 0;
    CHECK(tb_dg_generate(&ec, &p, prompt, P, seed, NULL, &ha, oc, &na, &sa, err, sizeof err) == 0);
    CHECK(tb_dg_generate(&eg, &p, prompt, P, seed, NULL, &hb, og, &nb, &sb, err, sizeof err) == 0);
    /* the near-tie window: 3 x the largest logit error passes() measured, at the lowest temperature */
    double Tmin = INFINITY;
    for (int s = 1; s <= max_steps; s++)
        Tmin = fmin(Tmin, tb_dg_temperature(&p, s));
    double tol = 3 * logit_err / Tmin;
    int t = 0, verdict = 0;
    for (; t < a.n && t < b.n && verdict == 0; t++)
        verdict = compare_step(name, &p, &a, &b, t, seed, tol);
    CHECK(verdict >= 0);
    /* (a routing near-tie may come at any step: it counts as covered) */
    int covered = verdict == 1 ? t - 1 : a.n;
    if (verdict == 0) { /* no near-tie: the runs are the same */
        CHECK(a.n == b.n);
        CHECK(na == nb && memcmp(oc, og, (size_t)na * sizeof *oc) == 0);
        CHECK(sa.steps == sb.steps && sa.canvases == sb.canvases && sa.committed == sb.committed);
    }
    fprintf(stderr, "%s: generate(), seed %llu, %d steps at most a canvas: CPU %d steps, GPU %d; %d compared (window "
            "%.3g), %s\n", name, (unsigned long long)seed, max_steps, a.n, b.n, t, tol,
            verdict == 0 ? "equal" : verdict == 1 ? "ended at a near-tie" : verdict == 2 ? "ended at a routing near-tie"
                                                                                            : "PARTED beyond the bound");
    rec_free(&a), rec_free(&b);
    free(prompt), free(oc), free(og);
    tb_dgemma_state_free(&st);
    tb_gpu_dgemma_free(d);
    return covered;
}

/* generate_runs on seed, seed + 1000, ... until one compares MIN_STEPS
 * steps equal before an argmax near-tie parts the runs (or none does),
 * GENERATE_SEEDS at most */
static void generate_covered(const char *name, const tb_dgemma_model *m, uint64_t seed, int max_steps)
{
    int best = 0;
    for (int i = 0; i < GENERATE_SEEDS && best < MIN_STEPS; i++) {
        int n = generate_runs(name, m, seed + 1000 * (uint64_t)i, max_steps);
        best = n > best ? n : best;
    }
    fprintf(stderr, "%s: generate(), %d steps at most a canvas: the longest comparison before a near-tie %d steps "
            "(%d needed)\n", name, max_steps, best, MIN_STEPS);
    CHECK(best >= MIN_STEPS);
}

/* dtype = fp8: generate() on the device alone (its passes are compared
 * above), two canvases to their end: ids in the vocabulary, the steps
 * within the cap */
static void generate_fp8(const char *name, const tb_dgemma_model *m)
{
    const tb_dgemma_config *c = &m->cfg;
    int C = c->canvas, V = c->vocab, P = c->sliding_window + 3;
    char err[512];
    tb_dg_params p;
    tb_dg_params_default(&p);
    p.max_steps = 12;
    p.max_new_tokens = 2 * C;
    p.eos_ids = c->eos, p.n_eos = 0, p.pad_id = c->pad_id >= 0 ? c->pad_id : 0;
    tb_gpu_dgemma *d = NULL;
    if (tb_gpu_dgemma_create_dtype(&d, NULL, m, 0, 1, err, sizeof err) || tb_gpu_dgemma_reserve(d, P + 2 * C)) {
        fprintf(stderr, "%s: %s\n", name, d ? tb_gpu_dgemma_error(d) : err);
        CHECK(0);
        tb_gpu_dgemma_free(d);
        return;
    }
    int32_t *prompt = malloc((size_t)P * sizeof *prompt), *out = malloc((size_t)2 * C * sizeof *out);
    if (!prompt || !out) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    ids(prompt, P, V, 5);
    tb_dg_engine e = tb_dg_cuda_engine(d, c);
    tb_dg_stats st;
    int n = 0, bad = 0;
    CHECK(tb_dg_generate(&e, &p, prompt, P, 11, NULL, NULL, out, &n, &st, err, sizeof err) == 0);
    for (int i = 0; i < n; i++)
        bad += out[i] < 0 || out[i] >= V;
    CHECK(n == 2 * C && bad == 0 && st.canvases == 2 && st.steps >= 2 && st.steps <= 2 * p.max_steps);
    fprintf(stderr, "%s: generate() on the device: %d tokens, %d canvases, %d steps\n", name, n, st.canvases,
            st.steps);
    free(prompt), free(out);
    tb_gpu_dgemma_free(d);
}

/* ------------------------------------------------------------ the published shape */

/* Bytes of a dtype = fp8 model's weights on the device: its projections one
 * a weight and a float scale an output row; the embedding, the router, the
 * norms and scales bf16 or float as in bf16 (counted 2 a parameter) */
static double fp8_weight_bytes(const tb_dgemma_config *c)
{
    double H = c->hidden, I = c->inter, E = c->n_experts, mi = c->moe_inter, proj = 3.0 * I * H, rows = 2.0 * I + H;
    for (int l = 0; l < c->n_layers; l++) {
        double hd = c->full[l] ? c->hd_full : c->hd_sliding, kvd = hd * (c->full[l] ? c->kv_full : c->kv_sliding);
        double nv = c->full[l] ? 1 : 2, q = (double)c->n_heads * hd;
        proj += H * (2 * q + nv * kvd + 3 * I) + E * 3 * mi * H;
        rows += q + nv * kvd + H + 2 * I + H + E * (2 * mi + H);
    }
    return proj + 4 * rows + 2.0 * ((double)tb_dgemma_n_params(c) - proj);
}

/* the bf16 run's canvas pass bytes (the fp8 run's are about half) */
static double bf16_pass_bytes;

static void published_shape(int fp8)
{
    const char *name = fp8 ? "diffusiongemma-26b-a4b fp8" : "diffusiongemma-26b-a4b";
    tb_dgemma_config cfg;
    char err[512];
    CHECK(tb_dgemma_preset_config("diffusiongemma-26b-a4b", &cfg, err, sizeof err) == 0);
    double weights = fp8 ? fp8_weight_bytes(&cfg) : 2.0 * (double)tb_dgemma_n_params(&cfg);
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    if ((double)free_b < weights + 8e9) {
        fprintf(stderr, "%s: skipped: %.1f GB free, %.1f GB of weights\n", name, free_b / 1e9, weights / 1e9);
        return;
    }
    tb_gpu_dgemma *d = NULL;
    if (tb_gpu_dgemma_create_dtype(&d, &cfg, NULL, 1, fp8, err, sizeof err) || tb_gpu_dgemma_reserve(d, 1024)) {
        fprintf(stderr, "%s: %s\n", name, d ? tb_gpu_dgemma_error(d) : err);
        CHECK(0);
        tb_gpu_dgemma_free(d);
        return;
    }
    tb_gpu *g = tb_gpu_dgemma_gpu(d);
    double held = (double)tb_gpu_bytes(g);
    fprintf(stderr, "%s on %s: %.2f GB held (%.2f GB of %s weights)\n", name, tb_gpu_device_name(g), held / 1e9,
            weights / 1e9, fp8 ? "E4M3 (bf16 embedding and router)" : "bf16");
    CHECK(held >= weights);
    if (fp8) { /* the bf16 copies freed as quantized: about half of bf16's held, and the FP8 GEMM's ceiling */
        CHECK(held < 0.6 * 2.0 * (double)tb_dgemma_n_params(&cfg));
        CHECK(strcmp(tb_gpu_gemm_dtype(g), "fp8") == 0);
        double pf = 0, pb = 0;
        CHECK(tb_gpu_measure_ceilings(g, &pf, &pb) == 0);
        fprintf(stderr, "%s: products on the %s GEMM, its ceiling %.0f TFLOP/s, %.2f TB/s\n", name,
                tb_gpu_gemm_dtype(g), pf / 1e12, pb / 1e12);
    }
    int C = cfg.canvas, V = cfg.vocab, P = 300;
    int32_t *prompt = malloc((size_t)P * sizeof *prompt), *canvas = malloc((size_t)C * 3 * sizeof *canvas);
    float *ent = malloc((size_t)C * sizeof *ent), *logits = malloc((size_t)C * V * sizeof *logits);
    if (!prompt || !canvas || !ent || !logits) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    ids(prompt, P, V, 9);
    prompt[0] = cfg.bos_id;
    ids(canvas, C, V, 10);
    CHECK(tb_gpu_dgemma_encode(d, prompt, P, NULL) == 0);
    double f, by, reads, rows;
    tb_gpu_dgemma_take_work(d, &f, &by, &reads, &rows);
    CHECK(tb_gpu_dgemma_denoise(d, canvas, NULL, 0, NULL) == 0);
    tb_gpu_dgemma_take_work(d, &f, &by, &reads, &rows);
    double active = 2.0 * C * (double)tb_dgemma_n_active(&cfg);
    fprintf(stderr, "%s: one canvas pass: %.1f GFLOP (2 C x active parameters: %.1f), %.2f GB, %.1f experts a MoE "
            "layer call, %.0f rows through them\n", name, f / 1e9, active / 1e9, by / 1e9,
            reads / cfg.n_layers, rows);
    CHECK(f > 0.8 * active && f < 1.5 * active);
    CHECK(by > 0 && by < 1.1 * weights); /* at most every weight, the KV cache read beside */
    CHECK(rows == (double)C * cfg.n_layers);
    if (!fp8)
        bf16_pass_bytes = by;
    else if (bf16_pass_bytes > 0) { /* one byte a projection weight: about half (the embedding stays bf16) */
        fprintf(stderr, "%s: the canvas pass's bytes %.3f of bf16's\n", name, by / bf16_pass_bytes);
        CHECK(by < 0.6 * bf16_pass_bytes && by > 0.4 * bf16_pass_bytes);
    }
    int32_t *sampled = canvas + C, *argmax = canvas + 2 * C;
    CHECK(tb_gpu_dgemma_decide(d, 0.8f, 5, 0, sampled, argmax, ent) == 0);
    int bad = 0;
    for (int i = 0; i < C; i++)
        bad += sampled[i] < 0 || sampled[i] >= V || argmax[i] < 0 || argmax[i] >= V || !(ent[i] >= 0) ||
               !(ent[i] <= log((double)V) + 1e-3);
    CHECK(bad == 0);
    CHECK(tb_gpu_dgemma_denoise(d, canvas, NULL, 1, logits) == 0);
    for (size_t i = 0; i < (size_t)C * V; i++)
        bad += !(fabsf(logits[i]) <= (float)cfg.softcap);
    CHECK(bad == 0);
    fprintf(stderr, "%s: encode %d, canvas pass, decide, self-conditioned canvas pass: %s; peak %.2f GB\n", name, P,
            bad ? "BAD values" : "finite, in range", (double)tb_gpu_peak_bytes(g) / 1e9);
    free(prompt), free(canvas), free(ent), free(logits);
    tb_gpu_dgemma_free(d);
}

int main(int argc, char **argv)
{
    char why[256];
    if (tb_gpu_probe(why, sizeof why) != 0) {
        fprintf(stderr, "skipped: %s\n", why);
        return 77;
    }
    char err[512];
    tb_dgemma_model m;
    CHECK(tb_dgemma_preset("tiny-diffusiongemma", 3, &m, err, sizeof err) == 0);
    round_model(&m);
    passes("tiny-diffusiongemma", &m);
    generate_covered("tiny-diffusiongemma", &m, 11, 12);
    generate_covered("tiny-diffusiongemma", &m, 12, 48);
    tb_dgemma_free(&m);
    if (argc > 1) {
        char dir[4096];
        struct stat sb;
        snprintf(dir, sizeof dir, "%s/model", argv[1]);
        if (stat(dir, &sb) == 0) {
            CHECK(tb_dgemma_load(dir, &m, err, sizeof err) == 0);
            round_model(&m);
            passes("golden-dgemma", &m);
            generate_covered("golden-dgemma", &m, 11, 12);
            tb_dgemma_free(&m);
        } else {
            fprintf(stderr, "golden-dgemma: no %s (tools/make_dgemma_golden.py makes it)\n", dir);
        }
    }
    /* dtype = fp8 against the CPU's FP8 twin, fp8's bounds (and its own logit error for decide's window) */
    rel_tol = REL_TOL_FP8, route_tie = ROUTE_TIE_FP8, logit_err = 0;
    CHECK(tb_dgemma_preset("tiny-diffusiongemma", 3, &m, err, sizeof err) == 0);
    round_model(&m);
    tb_dgemma_round_fp8(&m); /* bf16 values rounded to E4M3: the device's codes are these */
    passes("tiny-diffusiongemma fp8", &m);
    setenv("TB_GPU_FP8_GEMM", "0", 1);
    passes("tiny-diffusiongemma fp8 dequantized to bf16", &m);
    unsetenv("TB_GPU_FP8_GEMM");
    generate_fp8("tiny-diffusiongemma fp8", &m);
    m.cfg.canvas = 96; /* products of more than 64 rows: the FP8 GEMM's outer-vector route */
    passes("tiny-diffusiongemma fp8 canvas 96", &m);
    tb_dgemma_free(&m);
    published_shape(0);
    published_shape(1);
    return check_done();
}
