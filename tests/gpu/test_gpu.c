/* test_gpu.c — the CUDA path against the CPU path (the reference), on the
 * golden tiny models (random weights, so every kernel sees ordinary random
 * data). Exit 77 (skip) without a CUDA device.
 *
 * Both paths run the same weights: the CPU model's weights are rounded to
 * bf16 first, as the GPU stores them. The GPU keeps bf16 activations at
 * GEMM inputs (float32 accumulation and residual stream), so logits agree
 * to bf16 precision: max |gpu - cpu| <= GPU_TOL * max(1, max |cpu|),
 * GPU_TOL = 2e-2. Greedy continuations (prefill, then the CUDA-graph decode
 * step) must equal the CPU's wherever the CPU's top-1/top-2 logit margin
 * exceeds that bound; a step below it is reported, not failed.
 *
 * Mixture of experts: a router picks top_k experts by its logits, and a
 * row whose k-th and (k+1)-th logits are closer than bf16 rounding may
 * be routed differently on the two paths, which changes that row's output
 * by a whole expert (and the keys and values it leaves in the cache). The
 * CPU records its router's narrowest margin (tb_moe_scratch.min_gap); a
 * step beyond the bound after a margin below ROUTE_TOL (router logits, 10x
 * the difference bf16 makes to them here) ends the comparison as a
 * reported near-tie, like a near-tie of the greedy token. Beyond the
 * bound with every margin wider fails.
 *
 * dtype = fp8 (fp8.h): every projection's input is rounded to E4M3, a
 * step of 1/16 of the value, from the bf16 activation. The two paths'
 * activations differ at bf16's level (0.4%), and wherever that moves a
 * value across the middle of two E4M3 values the paths round it a whole
 * step apart: their logits part by about as much as FP8 moves them from
 * float32 (6-8% of the largest on these 2-layer models, measured on the
 * H200). The forwards are compared at FP8_TOL (12%), which still catches
 * a wrong weight, scale or wiring; the numerics are pinned product by
 * product (check_fp8_products: 1e-4 of the sum of |terms|, 2e-3 on FP8
 * tensor cores). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "cpu_forward.h"
#include "energy.h"
#include "flow_cpu.h"
#include "flow_gpu.h"
#include "flow_sampler.h"
#include "gpu_tune.h"
#include "model.h"
#include "fp8.h"
#include "pick.h"
#include "safetensors.h"
#include "sampling.h"
#include "util.h"

#define BF16_TOL 2e-2
#define FP8_TOL 0.12
#define GPU_TOL (fp8_mode ? FP8_TOL : BF16_TOL) /* fp8_mode: below */
#define ROUTE_TOL 2e-2

static char root[4096];
/* dtype = fp8 for the pairs load_pair makes: the CPU model rounded by
 * tb_model_round_fp8, the device's made with tb_gpu_create_dtype(fp8) */
static int fp8_mode;
static int fp8_gemv = TB_GPU_FP8_GEMV_DEFAULT; /* tb_gpu_set_fp8_gemv's variant in check_ar_with */
/* check_ar_with's bf16 GEMV variant (-1: per shape) and attention splits (0: auto) */
static int gemv_forced = -1, att_splits = 0;
/* > 0: load_pair gives the model this many rotated dims a head (partial
 * rotary), so k_qkv_post's path for an odd number of pairs runs */
static int rope_dim_set;

static void round_to_bf16(tb_model *m)
{
    for (size_t i = 0; i < m->arena_floats; i++)
        m->arena[i] = tb_bf16_to_f32(tb_f32_to_bf16(m->arena[i]));
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

static void margin(const float *x, int V, int32_t *best, double *gap)
{
    int b = tb_argmax(x, V);
    float second = -INFINITY;
    for (int v = 0; v < V; v++)
        if (v != b && x[v] > second)
            second = x[v];
    *best = b;
    *gap = x[b] - second;
}

/* tests/data/<sub>/<name> (or preset:NAME) loaded with its weights rounded to bf16 (as the
 * GPU stores them) into *m, and its device copy: 0, or -1 after a failed
 * check (nothing to free). */
static int load_pair(const char *sub, const char *name, tb_model *m, tb_gpu **g)
{
    char dir[8192], err[512];
    snprintf(dir, sizeof dir, "%s/%s/%s", root, sub, name);
    *g = NULL;
    /* "preset:NAME": the preset's seeded random weights instead */
    int rc = strncmp(name, "preset:", 7) == 0 ? tb_model_preset(name + 7, 5, m, err, sizeof err)
                                               : tb_model_load(dir, m, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        return -1;
    }
    if (fp8_mode && tb_model_round_fp8(m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        tb_model_free(m);
        return -1;
    }
    round_to_bf16(m); /* after fp8: an E4M3 value times a power of two is a bf16 already */
    if (rope_dim_set > 0) {
        m->cfg.rope_dim = rope_dim_set;
        tb_rope_inv_freq(&m->cfg, m->rope_inv_freq);
    }
    if (tb_gpu_create_dtype(g, &m->cfg, m, 0, fp8_mode, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        tb_model_free(m);
        return -1;
    }
    return 0;
}

/* dtype = fp8: the device's codes and scales of every projection equal
 * the CPU quantizer's of the same weights (fp8.h; the GPU quantizes the
 * bf16 copy of what tb_model_round_fp8 rounded). */
static void check_fp8_codes(const char *name)
{
    tb_model m;
    tb_gpu *g;
    fp8_mode = 1;
    int rc = load_pair("golden", name, &m, &g);
    fp8_mode = 0;
    if (rc != 0)
        return;
    const tb_model_config *c = &m.cfg;
    size_t h = c->hidden_size, I = c->intermediate_size, nq = (size_t)c->n_heads * c->head_dim;
    size_t qkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    int same = 1;
    for (int l = 0; l < c->n_layers; l++) {
        const tb_layer *L = &m.layers[l];
        const float *w[4] = {L->wqkv, L->wo, L->w_gate_up, L->w_down};
        size_t rows[4] = {qkv, h, 2 * I, h}, in[4] = {h, nq, h, I};
        for (int k = 0; k < 4; k++) {
            size_t n = rows[k] * in[k];
            uint8_t *gq = malloc(n), *cq = malloc(n);
            float *gs = malloc(rows[k] * sizeof(float)), *cs = malloc(rows[k] * sizeof(float));
            CHECK(tb_gpu_fp8_weights(g, l, k, gq, gs) == 0);
            tb_fp8_quantize_rows(w[k], rows[k], in[k], cq, cs);
            same &= memcmp(gq, cq, n) == 0 && memcmp(gs, cs, rows[k] * sizeof(float)) == 0;
            free(gq), free(cq), free(gs), free(cs);
        }
    }
    fprintf(stderr, "%s: fp8 codes and scales on the device equal the CPU's: %s\n", name, same ? "yes" : "no");
    CHECK(same);
    /* the roofline's bytes (docs/METRICS.md): one forward at fp8 counts
     * the projections at one byte a weight plus 4 a row scale, the rest as
     * at bf16 */
    tb_gpu *gb = NULL;
    char err0[512];
    if (tb_gpu_create(&gb, &m.cfg, &m, 0, err0, sizeof err0) == 0) {
        int32_t toks[8] = {1, 5, 9, 13, 17, 21, 25, 29};
        float *lg = malloc((size_t)8 * c->vocab_size * sizeof(float));
        double fl[2], by[2];
        tb_gpu *both[2] = {gb, g};
        for (int k = 0; k < 2; k++) {
            CHECK(tb_gpu_reserve(both[k], 1, 8, 8, err0, sizeof err0) == 0);
            tb_gpu_take_work(both[k], &fl[k], &by[k], NULL, NULL);
            CHECK(tb_gpu_logits(both[k], toks, 1, 0, 8, 8, 1, lg) == 0);
            tb_gpu_take_work(both[k], &fl[k], &by[k], NULL, NULL);
        }
        double weights = (double)c->n_layers * (qkv * h + h * nq + 3 * I * h);
        double want = weights - 4.0 * c->n_layers * (qkv + 2 * h + 2 * I);
        fprintf(stderr, "%s: roofline bytes bf16 %.0f, fp8 %.0f (fewer by %.0f, want %.0f)\n", name, by[0], by[1],
                by[0] - by[1], want);
        CHECK(by[0] - by[1] == want && fl[0] == fl[1]);
        free(lg);
        tb_gpu_free(gb);
    } else {
        fprintf(stderr, "%s: %s\n", name, err0);
        CHECK(0);
    }
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* One product of check_fp8_products: projection k of layer l over
 * `rows` random rows, fresh (acc 0), accumulating (1) or deferred (2),
 * against the CPU's rounding in double; returns the worst error over the
 * allowed (tol_rel of the sum of |terms|), -1 where the device failed;
 * *unrounded: raised to the worst, over this product's outputs, of the
 * same product over unrounded inputs (a running maximum of the caller's). */
static double fp8_product_error(const char *name, tb_gpu *g, const float *W, int l, int k, int rows, int out,
                                int in, int acc, double tol_rel, uint64_t *rng, double *unrounded)
{
    size_t nx = (size_t)rows * in, ny = (size_t)rows * out;
    float *x = malloc(nx * sizeof(float)), *xr = malloc(nx * sizeof(float));
    float *y = malloc(ny * sizeof(float)), *y0 = malloc(ny * sizeof(float));
    double worst = 0;
    for (size_t i = 0; i < nx; i++) { /* a wide range: some rows' maxima far above the rest */
        double u = tb_rng_uniform(rng) - 0.5;
        x[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(u * (i % 97 == 0 ? 40.0 : 1.0) * (1 + (int)(i / in) % 3))));
    }
    memcpy(xr, x, nx * sizeof(float));
    tb_fp8_round_rows(xr, (size_t)rows, (size_t)in);
    for (size_t i = 0; i < ny; i++)
        y0[i] = y[i] = acc == 1 ? (float)(tb_rng_uniform(rng) - 0.5) : 0.0f;
    if (tb_gpu_fp8_product(g, l, k, x, rows, y, acc == 1, acc == 2) != 0) {
        fprintf(stderr, "%s: %s\n", name, tb_gpu_error(g));
        worst = -1;
    } else {
        for (int r = 0; r < rows; r++)
            for (int o = 0; o < out; o++) {
                double dot = 0, raw = 0, mag = 0;
                for (int i = 0; i < in; i++) {
                    double w = W[(size_t)o * in + i];
                    dot += (double)xr[(size_t)r * in + i] * w;
                    raw += (double)x[(size_t)r * in + i] * w;
                    mag += fabs((double)xr[(size_t)r * in + i] * w);
                }
                double got = y[(size_t)r * out + o] - (acc == 1 ? y0[(size_t)r * out + o] : 0.0);
                double tol = tol_rel * mag + 1e-6;
                worst = fmax(worst, fabs(got - dot) / tol);
                *unrounded = fmax(*unrounded, fabs(raw - dot) / tol);
            }
    }
    free(x), free(xr), free(y), free(y0);
    return worst;
}

/* check_fp8_products' sweep: every projection of every layer of m over
 * each of n_rows row counts and acc modes 0 .. n_acc - 1
 * (fp8_product_error's), allowed tol_one at one row and tol_rows above;
 * raises *worst and *unrounded, counts *checked. */
static void fp8_products_sweep(const char *name, tb_gpu *g, const tb_model *m, const int *row_counts, int n_rows,
                               int n_acc, double tol_one, double tol_rows, uint64_t *rng, double *worst,
                               double *unrounded, int *checked)
{
    const tb_model_config *c = &m->cfg;
    int h = c->hidden_size, I = c->intermediate_size, nq = c->n_heads * c->head_dim;
    int qkv = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        const tb_layer *L = &m->layers[l];
        const float *W[4] = {L->wqkv, L->wo, L->w_gate_up, L->w_down};
        int outs[4] = {qkv, h, 2 * I, h}, ins[4] = {h, nq, h, I};
        for (int k = 0; k < 4; k++)
            for (int ri = 0; ri < n_rows; ri++)
                for (int acc = 0; acc < n_acc; acc++) {
                    int rows = row_counts[ri];
                    double e = fp8_product_error(name, g, W[k], l, k, rows, outs[k], ins[k], acc,
                                                 rows > 1 ? tol_rows : tol_one, rng, unrounded);
                    CHECK(e >= 0);
                    if (e >= 0) {
                        *worst = fmax(*worst, e);
                        (*checked)++;
                    }
                }
    }
}

/* dtype = fp8's products (fp8.h: E4M3 weights and inputs, one
 * power-of-two scale per weight row and per input row), each projection
 * of each layer over 1 (the GEMV), 2, 17, 64 and 100 rows, with the FP8
 * tensor-core GEMM and with the bf16 path, fresh, accumulating and with
 * the scales deferred, against
 * the CPU's: the input rounded to bf16 (as the device holds it), then to
 * its E4M3 form by tb_fp8_round_rows, times the rounded weights, in
 * double. The error allowed is 1e-4 of the sum of |terms| per output
 * (2e-3 on FP8 tensor-core GEMMs); the same product over unrounded inputs
 * must miss it tenfold (else nothing here sees whether the device
 * quantized its input). Then the GEMV's tensor-core variants, each
 * forced, at one row, within the tensor-core GEMMs' 2e-3 (each mma sums
 * 32 products at the tensor core's precision; the worst is printed). */
static void check_fp8_products(const char *name)
{
    tb_model m;
    tb_gpu *g;
    char err[512];
    fp8_mode = 1;
    int rc = load_pair("golden", name, &m, &g);
    fp8_mode = 0;
    if (rc != 0)
        return;
    const tb_model_config *c = &m.cfg;
    /* 1: the GEMV; fresh or accumulating, 2-64 the FP8 GEMM without scale
     * vectors and the scaling kernel, 100 with them; deferred (QKV's and
     * gate-up's route in the forward) the bare products at any size, the
     * scales applied after (gpu_gemm_fp8.cu) */
    const int row_counts[5] = {1, 2, 17, 64, 100};
    uint64_t rng = 23;
    int gemm_modes = tb_gpu_set_fp8_gemm(g, 1) == 0 ? 2 : 1; /* 1: the device has no FP8 GEMM */
    fprintf(stderr, "%s: FP8 GEMM on this device: %s\n", name, gemm_modes == 2 ? "yes" : "no");
    for (int mode = 0; mode < gemm_modes; mode++) {
        int gemm = gemm_modes == 2 && mode == 0;
        CHECK(tb_gpu_set_fp8_gemm(g, gemm) == 0);
        CHECK(tb_gpu_reserve(g, 1, 128, 100, err, sizeof err) == 0);
        double worst = 0, unrounded = 0;
        int checked = 0;
        /* fresh, accumulating, deferred (fresh); FP8 tensor-core GEMMs sum
         * each K chunk at reduced precision (cuBLASLt measured: 1e-4 of the
         * sum of |terms| at K = 64, 1e-5 at 4,096) */
        fp8_products_sweep(name, g, &m, row_counts, 5, 3, 1e-4, gemm ? 2e-3 : 1e-4, &rng, &worst, &unrounded,
                           &checked);
        fprintf(stderr,
                "%s: fp8 products (%s), %d checked: worst error %.3f of the allowed; unrounded inputs would "
                "miss by %.1f\n",
                name, gemm ? "FP8 GEMM" : "bf16 GEMM", checked, worst, unrounded);
        CHECK(checked == c->n_layers * 4 * 5 * 3 && worst <= 1.0 && unrounded > 10.0);
    }
    for (int v = TB_GPU_FP8_GEMV_ROUNDING_ALIKE; v < TB_GPU_FP8_GEMV_VARIANTS; v++) {
        tb_gpu_set_fp8_gemv(g, v);
        double worst = 0, unrounded = 0;
        int checked = 0;
        const int one_row[1] = {1}; /* the GEMV: fresh, accumulating */
        fp8_products_sweep(name, g, &m, one_row, 1, 2, 2e-3, 2e-3, &rng, &worst, &unrounded, &checked);
        fprintf(stderr, "%s: fp8 GEMV variant %d (tensor cores), %d checked: worst error %.3f of the allowed; "
                "unrounded inputs would miss by %.1f\n", name, v, checked, worst, unrounded);
        CHECK(checked == c->n_layers * 4 * 2 && worst <= 1.0 && unrounded > 10.0);
    }
    tb_gpu_set_fp8_gemv(g, -1);
    /* the roofline's FLOP/s ceiling is that of the context's products
     * (docs/METRICS.md): the FP8 GEMM's where spans run on it */
    CHECK(tb_gpu_set_fp8_gemm(g, gemm_modes == 2) == 0);
    CHECK(strcmp(tb_gpu_gemm_dtype(g), gemm_modes == 2 ? "fp8" : "bf16") == 0);
    tb_gpu *gb = NULL;
    if (gemm_modes == 2 && tb_gpu_create(&gb, &m.cfg, &m, 0, err, sizeof err) == 0) {
        double f8 = 0, fb = 0, bw;
        CHECK(strcmp(tb_gpu_gemm_dtype(gb), "bf16") == 0);
        CHECK(tb_gpu_measure_ceilings(g, &f8, &bw) == 0 && tb_gpu_measure_ceilings(gb, &fb, &bw) == 0);
        fprintf(stderr, "%s: FLOP/s ceilings: FP8 GEMM %.0f TFLOP/s, bf16 %.0f\n", name, f8 / 1e12, fb / 1e12);
        CHECK(f8 > 1.2 * fb);
        tb_gpu_free(gb);
    }
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* pad1: left padding of sequence 1 (0 = none): its first pad1 prompt
 * positions are filler, masked on both paths; only real positions are
 * compared. */
/* B (1 or 2) sequences; fusion (a mask of TB_GPU_FUSE_*), pdl:
 * tb_gpu_set_decode_fusion's (batch 1 takes the fused GEMVs, both batches
 * the split decode attention, when asked) */
static void check_ar_with(const char *name, int pad1, int B, int fusion, int pdl)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (load_pair("golden", name, &m, &g) != 0)
        return;
    tb_gpu_set_decode_fusion(g, fusion, pdl);
    tb_gpu_set_fp8_gemv(g, fp8_gemv);
    tb_gpu_force_gemv_variant(g, gemv_forced);
    tb_gpu_set_attn_splits(g, att_splits);
    fprintf(stderr, "%s: batch %d, pad %d, decode fusion mask %d, PDL %s%s, fp8 GEMV %d, GEMV %d, splits %d\n", name, B,
            pad1, fusion, pdl ? "on" : "off", fp8_mode ? ", dtype fp8" : "", fp8_gemv, gemv_forced, att_splits);
    int V = m.cfg.vocab_size, P = 12, N = 24;
    CHECK(tb_gpu_reserve(g, B, P + N, B * P, err, sizeof err) == 0);
    int pad[2] = {0, pad1};
    CHECK(tb_gpu_set_padding(g, pad, B) == 0);
    int32_t prompt[2 * 12];
    uint64_t rng = 7;
    for (int i = 0; i < B * P; i++)
        prompt[i] = (int32_t)(tb_rng_uniform(&rng) * 500);

    /* all-position logits of the prompts, causal */
    float *gl = malloc((size_t)B * P * V * sizeof(float)), *cl = malloc((size_t)B * P * V * sizeof(float));
    CHECK(tb_gpu_logits(g, prompt, B, 0, P, P, 1, gl) == 0);
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, B, P + N, B * P, 1, err, sizeof err) == 0);
    tb_cpu_set_padding(&st, pad, B);
    CHECK(tb_cpu_forward(&st, prompt, B, P, 1, 1, cl) == 0);
    double ref = max_abs(cl, (size_t)B * P * V), diff = 0;
    for (size_t i = 0; i < (size_t)B * P * V; i++) {
        if ((int)(i / V % P) < pad[i / V / P])
            continue; /* a filler position: nothing reads its logits */
        diff = fabs(gl[i] - cl[i]) > diff || isnan(gl[i]) ? (isnan(gl[i]) ? INFINITY : fabs(gl[i] - cl[i])) : diff;
    }
    int moe = m.cfg.n_experts > 0, within = diff <= GPU_TOL * (ref > 1 ? ref : 1);
    fprintf(stderr, "%s%s: causal logits, max |cpu| %.3f, max diff %.3g (bound %.3g)%s\n", name,
            pad1 ? " (seq 1 left-padded)" : "", ref, diff, GPU_TOL * (ref > 1 ? ref : 1),
            !within && moe && st.moe.min_gap < ROUTE_TOL ? " beyond the bound after a routing near-tie" : "");
    CHECK(within || (moe && st.moe.min_gap < ROUTE_TOL));

    /* greedy: GPU prefill + graph decode against CPU step by step */
    int32_t gnext[2], cnext[2];
    float *last = malloc((size_t)B * V * sizeof(float)), *glast = malloc((size_t)B * V * sizeof(float));
    tb_cpu_state_reset(&st);
    tb_cpu_set_padding(&st, pad, B); /* reset cleared it */
    CHECK(tb_gpu_prefill(g, prompt, B, P, gnext, glast) == 0);
    st.moe.min_gap = INFINITY; /* from here: the margins of the forwards compared */
    CHECK(tb_cpu_forward(&st, prompt, B, P, 1, 0, last) == 0);
    int agree = 0, close_calls = 0, diverged = 0, route_tie = 0;
    double step_diff = 0; /* every step's logits (the decode mask included) against the CPU's */
    for (int step = 0; step < N && !diverged; step++) {
        double d = 0;
        for (size_t i = 0; i < (size_t)B * V; i++)
            d = fabs(glast[i] - last[i]) > d || isnan(glast[i]) ? (isnan(glast[i]) ? INFINITY : fabs(glast[i] - last[i]))
                                                                : d;
        if (moe && st.moe.min_gap < ROUTE_TOL && d > GPU_TOL * (ref > 1 ? ref : 1)) {
            fprintf(stderr, "%s: step %d: logits differ by %.3g after a router margin of %.3g: a routing near-tie\n",
                    name, step, d, st.moe.min_gap);
            route_tie = 1;
            break;
        }
        step_diff = d > step_diff ? d : step_diff;
        for (int b = 0; b < B; b++) {
            double gap;
            margin(last + (size_t)b * V, V, &cnext[b], &gap);
            if (gnext[b] == cnext[b])
                agree++;
            else if (gap <= GPU_TOL * (ref > 1 ? ref : 1) || (moe && st.moe.min_gap < ROUTE_TOL))
                close_calls++, diverged = 1;
            else {
                fprintf(stderr, "%s: step %d seq %d: gpu %d, cpu %d (cpu margin %.4f)\n", name, step, b, gnext[b],
                        cnext[b], gap);
                CHECK(0);
                diverged = 1;
            }
        }
        if (diverged || step + 1 == N)
            break;
        CHECK(tb_gpu_decode(g, gnext, B, glast) == 0);
        CHECK(tb_cpu_forward(&st, cnext, B, 1, 1, 0, last) == 0);
    }
    fprintf(stderr, "%s%s: logits of every step until then, max diff %.3g\n", name, pad1 ? " (padded)" : "",
            step_diff);
    CHECK(step_diff <= GPU_TOL * (ref > 1 ? ref : 1));
    fprintf(stderr, "%s%s: greedy %d of %d tokens identical%s%s\n", name, pad1 ? " (padded)" : "", agree, B * N,
            close_calls ? " (stopped at a near-tie within the bf16 bound)" : "",
            route_tie ? " (stopped at a routing near-tie)" : "");
    if (moe)
        fprintf(stderr, "%s: the CPU router's narrowest margin over the steps compared: %.3g\n", name,
                st.moe.min_gap);
    CHECK(agree > 0);
    free(gl);
    free(cl);
    free(last);
    free(glast);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

static void check_ar(const char *name, int pad1) { check_ar_with(name, pad1, 2, TB_GPU_FUSE_DEFAULT, TB_GPU_PDL_DEFAULT); }

/* Continuous batching: slots at their own lengths. Three sequences join a
 * running batch at different steps (prefill into a slot, then decode
 * steps over the slots running); the GPU's logits of every prefill and
 * step against the CPU's tb_cpu_forward_slots, both fed the CPU's greedy
 * tokens (so a near-tie cannot make the paths part). */
static void check_ar_slots(const char *name, int fusion)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (load_pair("golden", name, &m, &g) != 0)
        return;
    tb_gpu_set_decode_fusion(g, fusion, 0);
    fprintf(stderr, "%s: continuous batching, decode fusion mask %d\n", name, fusion);
    enum { S = 3, LEN = 48, STEPS = 16 };
    int V = m.cfg.vocab_size;
    /* the last two join together with prompts of one length: one
     * prefill for both */
    const int P[S] = {12, 7, 7}, join_at[S] = {0, 3, 3};
    int32_t prompt[S][12];
    uint64_t rng = 11;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < 12; i++)
            prompt[s][i] = (int32_t)(tb_rng_uniform(&rng) * 500);
    CHECK(tb_gpu_reserve(g, S, LEN, LEN, err, sizeof err) == 0);
    CHECK(tb_gpu_set_padding(g, NULL, 0) == 0);
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, S, LEN, LEN, 1, err, sizeof err) == 0);
    tb_cpu_state_reset(&st);
    float *cl = malloc((size_t)S * V * sizeof(float)), *gl = malloc((size_t)S * V * sizeof(float));
    int32_t next[S] = {0}, gtok[S];
    int running[S] = {0}, slots[S];
    double worst = 0, ref = 1;
    int moe = m.cfg.n_experts > 0, route_tie = -1;
    for (int step = 0; step < STEPS; step++) {
        double sw = 0; /* this step's */
        /* decode the slots running before this step */
        int k = 0;
        for (int s = 0; s < S; s++)
            if (running[s])
                slots[k] = s, gtok[k] = next[s], k++;
        int32_t ctok[S];
        memcpy(ctok, gtok, sizeof ctok);
        if (k) {
            CHECK(tb_gpu_decode_slots(g, slots, k, gtok, gl) == 0);
            CHECK(tb_cpu_forward_slots(&st, ctok, slots, k, 1, cl) == 0);
            for (int r = 0; r < k; r++) {
                ref = fmax(ref, max_abs(cl + (size_t)r * V, V));
                for (int v = 0; v < V; v++) {
                    double d = fabs(gl[(size_t)r * V + v] - cl[(size_t)r * V + v]);
                    sw = isnan(d) ? INFINITY : fmax(sw, d);
                }
                next[slots[r]] = tb_argmax(cl + (size_t)r * V, V);
            }
        }
        /* then the joins of this step: on the GPU one prefill for those
         * of one prompt length; on the CPU each alone */
        int js[S], nj = 0;
        int32_t jt[S * 12], first[S];
        for (int s = 0; s < S; s++)
            if (join_at[s] == step) {
                memcpy(jt + (size_t)nj * P[s], prompt[s], (size_t)P[s] * sizeof(int32_t));
                js[nj++] = s;
            }
        if (nj)
            CHECK(tb_gpu_prefill_slots(g, jt, nj, P[js[0]], js, first, gl) == 0);
        for (int j = 0; j < nj; j++) {
            int s = js[j];
            tb_cpu_slot_reset(&st, s);
            CHECK(tb_cpu_forward_slots(&st, prompt[s], &s, 1, P[s], cl) == 0);
            for (int v = 0; v < V; v++)
                sw = fmax(sw, isnan(gl[(size_t)j * V + v]) ? INFINITY : fabs(gl[(size_t)j * V + v] - cl[v]));
            next[s] = tb_argmax(cl, V);
            running[s] = 1;
        }
        if (moe && st.moe.min_gap < ROUTE_TOL && sw > GPU_TOL * ref) { /* see check_ar */
            route_tie = step;
            break;
        }
        worst = fmax(worst, sw);
    }
    if (route_tie >= 0)
        fprintf(stderr, "%s: continuous batching stopped at step %d: a routing near-tie (router margin %.3g)\n", name,
                route_tie, st.moe.min_gap);
    else if (moe)
        fprintf(stderr, "%s: continuous batching: the CPU router's narrowest margin %.3g\n", name, st.moe.min_gap);
    fprintf(stderr, "%s: continuous batching, 3 slots joining at steps 0/3/3: max logit diff %.3g (bound %.3g)\n",
            name, worst, GPU_TOL * ref);
    CHECK(worst <= GPU_TOL * ref);
    free(cl);
    free(gl);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* The flow backend's device path (plugins/flow/flow_gpu.cu) against its CPU
 * path on the golden tiny model (tests/data/golden/flow-tiny): both
 * samplers from the same starting noise, two canvases (one left-padded),
 * euler and heun, prompts clean and noised, the prompt rows at the
 * canvas's level and (the model read as "prompt_gamma": "min") at the
 * schedule's lowest, then also with "prompt_attention": "prompt" (prompt
 * rows attending to the prompt only): the final logits within the bf16
 * bound and every token whose CPU margin is clear. */
static int flow_cpu_forward(void *ctx, const float *z, const float *x_sc, const double *gamma, const int *pad, int B,
                            int L, int gen0, float *logits)
{
    return tb_flow_cpu_forward(ctx, z, x_sc, gamma, pad, B, L, gen0, logits);
}

static void flow_cpu_x0(void *ctx, float *logits, size_t rows, float *x0)
{
    tb_flow_cpu *st = ctx;
    tb_flow_cpu_x0(st->m, logits, rows, x0);
}

static int flow_keep_forward(void *ctx, const float *z, const float *x_sc, const double *gamma, const int *pad, int B,
                             int L, int gen0, float *logits);
static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fabs(a[i] - b[i]) > d || isnan(a[i] - b[i]) ? (isnan(a[i] - b[i]) ? INFINITY : fabs(a[i] - b[i])) : d;
    return d;
}

static float *flow_last;
static size_t flow_last_n;
static int flow_keep_forward(void *ctx, const float *z, const float *x_sc, const double *gamma, const int *pad, int B,
                             int L, int gen0, float *logits)
{
    int rc = flow_cpu_forward(ctx, z, x_sc, gamma, pad, B, L, gen0, logits);
    memcpy(flow_last, logits, flow_last_n * sizeof(float));
    return rc;
}

/* A flow check's inputs: m's weights rounded to bf16 as the GPU holds them
 * (not RoPE's frequencies, the arena's last head_dim / 2 floats: the GPU
 * keeps them in float32), B x L random tokens into tok0 and the starting
 * noise [B][L][D] (returned, malloc'd), each from its seed. */
static float *flow_inputs(tb_flow_model *m, int B, int L, uint64_t tok_seed, uint64_t noise_seed, int32_t *tok0)
{
    for (size_t i = 0; i + (size_t)m->cfg.head_dim / 2 < m->arena_floats; i++)
        m->arena[i] = tb_bf16_to_f32(tb_f32_to_bf16(m->arena[i]));
    for (int i = 0; i < B * L; i++)
        tok0[i] = (int32_t)(tb_rng_uniform(&tok_seed) * (m->cfg.vocab - 1));
    size_t n = (size_t)B * L * m->cfg.hidden;
    float *noise = malloc(n * sizeof(float));
    tb_flow_gaussian(&noise_seed, noise, n);
    return noise;
}

/* A flow sample's final logits glog against the CPU's (flow_last): the
 * largest difference over every real row (*diff), and of the generated
 * rows whose CPU margin exceeds bound (*clear) those whose GPU token (gt)
 * equals the CPU's (ct) (*same). */
static void flow_against_cpu(const float *glog, const int32_t *gt, const int32_t *ct, const int *pad, int B, int L,
                             int V, int gen0, double bound, double *diff, int *clear, int *same)
{
    *diff = 0, *clear = 0, *same = 0;
    for (int b = 0; b < B; b++)
        for (int i = pad[b]; i < L; i++) {
            const float *c = flow_last + ((size_t)b * L + i) * V;
            for (int v = 0; v < V; v++) {
                double d = fabs(glog[((size_t)b * L + i) * V + v] - c[v]);
                *diff = isnan(d) ? INFINITY : d > *diff ? d : *diff;
            }
            int32_t best;
            double gap;
            margin(c, V, &best, &gap);
            if (i >= gen0 && gap > bound) {
                (*clear)++;
                *same += gt[b * L + i] == ct[b * L + i];
            }
        }
}

static void check_flow(void)
{
    char dir[8192], err[512];
    snprintf(dir, sizeof dir, "%s/golden/flow-tiny", root);
    tb_flow_model m;
    if (tb_flow_model_load(dir, &m, err, sizeof err) != 0) {
        fprintf(stderr, "flow-tiny: %s\n", err);
        CHECK(0);
        return;
    }
    tb_flow_gpu *g = NULL;
    if (tb_flow_gpu_create(&g, &m, NULL, 0, err, sizeof err) != 0) {
        fprintf(stderr, "flow-tiny on the GPU: %s\n", err);
        CHECK(0);
        tb_flow_model_free(&m);
        return;
    }
    enum { B = 2, L = 14, GEN0 = 6 };
    int D = m.cfg.hidden, V = m.cfg.vocab, pad[B] = {0, 2};
    int32_t tok0[B * L];
    float *noise = flow_inputs(&m, B, L, 5, 77, tok0);
    tb_flow_cpu st;
    CHECK(tb_flow_cpu_init(&st, &m, B, L, 1, err, sizeof err) == 0);
    flow_last_n = (size_t)B * L * V;
    flow_last = malloc(flow_last_n * sizeof(float));
    float *glog = malloc(flow_last_n * sizeof(float));
    tb_flow_engine e = {.ctx = &st, .forward = flow_keep_forward, .x0 = flow_cpu_x0};
    for (int pm = 0; pm < 3; pm++) {
        if (pm) { /* the same weights read with prompt_gamma min (and, pm 2, prompt_attention prompt): a
                   * device copy made with the flags */
            m.cfg.prompt_gamma_min = 1;
            m.cfg.prompt_attends_prompt = pm == 2;
            tb_flow_gpu_free(g);
            g = NULL;
            if (tb_flow_gpu_create(&g, &m, NULL, 0, err, sizeof err) != 0) {
                fprintf(stderr, "flow-tiny (prompt_gamma min) on the GPU: %s\n", err);
                CHECK(0);
                break;
            }
        }
    for (int solver = 0; solver < 2; solver++)
        for (int mode = 0; mode < 2; mode++) {
            tb_flow_params p = {.steps = 4, .solver = solver ? TB_FLOW_HEUN : TB_FLOW_EULER,
                                .prompt = mode ? TB_FLOW_PROMPT_NOISED : TB_FLOW_PROMPT_CLEAN};
            int32_t ct[B * L], gt[B * L];
            memcpy(ct, tok0, sizeof ct);
            memcpy(gt, tok0, sizeof gt);
            int cf = 0, gf = 0;
            int64_t peak = 0;
            double flops = 0, bytes = 0;
            CHECK(tb_flow_sample(&m, &e, &p, ct, pad, B, L, GEN0, noise, &cf, NULL, NULL) == 0);
            int rc = tb_flow_gpu_sample(g, &p, gt, pad, B, L, GEN0, noise, NULL, &gf, NULL, NULL, glog, &peak, &flops,
                                        &bytes);
            if (rc)
                fprintf(stderr, "flow gpu: %s\n", tb_flow_gpu_error(g));
            CHECK(rc == 0 && cf == gf && peak > 0 && flops > 0);
            if (rc == 0) { /* the roofline's bytes (docs/METRICS.md), by flow_gpu.h's definition */
                const tb_flow_config *fc = &m.cfg;
                double Dd = D, C = fc->cond_dim, F = fc->mlp_dim, R = (double)B * L;
                double w = (fc->self_conditioning ? 2 * Dd * Dd : 0) +
                           fc->n_blocks * (6 * Dd * C + 3 * Dd * Dd + Dd * Dd + 2 * F * Dd) + 2 * Dd * C + V * Dd +
                           (fc->use_bias ? (fc->prompt_gamma_min ? 2.0 * B : 1.0) * V * Dd : 0);
                /* weight elements a forward's products read (the skip term: per canvas and level when prompt rows
                 * have their own) */
                double want = gf * (2 * w + fc->n_blocks * 8 * R * Dd) + (gf - 1) * 2.0 * V * Dd; /* + readouts' E */
                if (fabs(bytes - want) > 1e-9 * want)
                    fprintf(stderr, "flow gpu bytes %.0f, want %.0f\n", bytes, want);
                CHECK(fabs(bytes - want) <= 1e-9 * want);
            }
            double ref = max_abs(flow_last, flow_last_n), diff;
            int clear, same;
            flow_against_cpu(glog, gt, ct, pad, B, L, V, GEN0, 4 * GPU_TOL * (ref > 1 ? ref : 1), &diff, &clear,
                             &same);
            fprintf(stderr, "flow-tiny %s %s%s 4 steps: %d forwards, final logits max diff %.3g (|cpu| %.2f, bound %.3g), "
                            "tokens %d of %d clear ones\n",
                    solver ? "heun" : "euler", mode ? "noised" : "clean",
                    pm == 2 ? " prompt_gamma=min prompt_attention=prompt" : pm ? " prompt_gamma=min" : "", gf, diff, ref,
                    4 * GPU_TOL * (ref > 1 ? ref : 1), same, clear);
            CHECK(diff <= 4 * GPU_TOL * (ref > 1 ? ref : 1));
            CHECK(same == clear);
        }
    }
    /* the starting noise made on the device (the plugin's path) is the
     * host's tb_flow_gaussian stream, canvas by canvas (3 canvases of an
     * odd length too: the last number a lone cosine) */
    {
        enum { NB = 3 };
        const size_t nn[2] = {(size_t)L * D, 1001};
        uint64_t states[NB];
        for (int b = 0; b < NB; b++)
            states[b] = tb_flow_noise_state(77, (uint32_t)b);
        for (int k = 0; k < 2; k++) {
            float *dev = malloc(NB * nn[k] * sizeof(float)), *host = malloc(NB * nn[k] * sizeof(float));
            int nrc = g ? tb_flow_gpu_noise(g, states, NB, nn[k], dev) : -1;
            double worst = nrc == 0 ? 0 : INFINITY;
            size_t differ = 0;
            for (int b = 0; nrc == 0 && b < NB; b++) {
                uint64_t s = states[b];
                tb_flow_gaussian(&s, host + b * nn[k], nn[k]);
            }
            for (size_t i = 0; nrc == 0 && i < NB * nn[k]; i++) {
                double d = fabs((double)dev[i] - host[i]);
                worst = isnan(d) ? INFINITY : d > worst ? d : worst;
                differ += dev[i] != host[i];
            }
            fprintf(stderr, "flow-tiny: device noise, %d x %zu: %zu differ from the host's, worst %.3g\n", NB, nn[k],
                    differ, worst);
            CHECK(nrc == 0 && worst <= 1e-6 && differ <= NB * nn[k] / 1000);
            free(dev), free(host);
        }
        /* and a sample from it equals the sample from the host's noise */
        tb_flow_params p = {.steps = 4, .solver = TB_FLOW_EULER, .prompt = TB_FLOW_PROMPT_NOISED};
        float *hn = malloc((size_t)B * L * D * sizeof(float)), *l1 = malloc(flow_last_n * sizeof(float)),
              *l2 = malloc(flow_last_n * sizeof(float));
        for (int b = 0; b < B; b++) {
            uint64_t s = states[b];
            tb_flow_gaussian(&s, hn + (size_t)b * L * D, (size_t)L * D);
        }
        int32_t t1[B * L], t2[B * L];
        memcpy(t1, tok0, sizeof t1);
        memcpy(t2, tok0, sizeof t2);
        int f1 = 0, f2 = 0;
        int src = g ? tb_flow_gpu_sample(g, &p, t1, pad, B, L, GEN0, hn, NULL, &f1, NULL, NULL, l1, NULL, NULL, NULL) |
                          tb_flow_gpu_sample(g, &p, t2, pad, B, L, GEN0, NULL, states, &f2, NULL, NULL, l2, NULL, NULL,
                                             NULL)
                    : -1;
        double d = src == 0 ? max_diff(l1, l2, flow_last_n) : INFINITY;
        fprintf(stderr, "flow-tiny: a sample from the device's noise against the host's: logits max diff %.3g, "
                        "tokens %s\n", d, src == 0 && memcmp(t1, t2, sizeof t1) == 0 ? "equal" : "different");
        CHECK(src == 0 && f1 == f2 && d <= 1e-3 && memcmp(t1, t2, sizeof t1) == 0);
        CHECK(g && tb_flow_gpu_sample(g, &p, t1, pad, B, L, GEN0, NULL, NULL, &f1, NULL, NULL, NULL, NULL, NULL,
                                      NULL) != 0); /* neither: refused */
        free(hn), free(l1), free(l2);
    }
    /* the roofline's ceilings on the flow backend's own context: the
     * engine's measurement (docs/METRICS.md), so plausible H200-class or
     * smaller figures, never 0 */
    double pf = 0, pb = 0;
    int crc = g ? tb_flow_gpu_ceilings(g, &pf, &pb) : -1;
    fprintf(stderr, "flow-tiny: ceilings %.0f TFLOP/s bf16, %.2f TB/s (%s)\n", pf / 1e12, pb / 1e12,
            crc == 0 ? "ok" : g ? tb_flow_gpu_error(g) : "no context");
    CHECK(crc == 0 && pf > 1e12 && pf < 1e16 && pb > 1e10 && pb < 1e14);
    free(noise);
    free(flow_last);
    free(glog);
    tb_flow_cpu_free(&st);
    tb_flow_gpu_free(g);
    tb_flow_model_free(&m);
}

/* The flow backend's attention by the engine's one-kernel span attention
 * (tb_flow_gpu_set_fused_attention; the golden flow-tiny's head_dim, 8,
 * has none, so check_flow runs the batched path): the flow-tiny preset
 * (head_dim 16), two canvases of 80 rows (two query blocks, two key
 * tiles; one canvas left-padded), each path against the CPU (final
 * logits within the bf16 bound, every clear token equal) and against
 * each other; then the model read with "prompt_attention": "prompt",
 * whose calls with a prompt take the batched path although the fused
 * one is on (its mask). */
static void check_flow_fused(void)
{
    char err[512];
    tb_flow_model m;
    if (tb_flow_model_preset("flow-tiny", 3, &m, err, sizeof err) != 0) {
        fprintf(stderr, "flow-tiny preset: %s\n", err);
        CHECK(0);
        return;
    }
    enum { B = 2, L = 80, GEN0 = 6 };
    int V = m.cfg.vocab, pad[B] = {0, 3};
    int32_t tok0[B * L];
    float *noise = flow_inputs(&m, B, L, 11, 78, tok0);
    tb_flow_cpu st;
    CHECK(tb_flow_cpu_init(&st, &m, B, L, 1, err, sizeof err) == 0);
    flow_last_n = (size_t)B * L * V;
    flow_last = malloc(flow_last_n * sizeof(float));
    float *glog[2] = {malloc(flow_last_n * sizeof(float)), malloc(flow_last_n * sizeof(float))};
    tb_flow_engine e = {.ctx = &st, .forward = flow_keep_forward, .x0 = flow_cpu_x0};
    for (int pm = 0; pm < 2; pm++) {
        m.cfg.prompt_gamma_min = pm, m.cfg.prompt_attends_prompt = pm;
        tb_flow_gpu *g = NULL;
        if (tb_flow_gpu_create(&g, &m, NULL, 0, err, sizeof err) != 0) {
            fprintf(stderr, "flow-tiny preset on the GPU: %s\n", err);
            CHECK(0);
            break;
        }
        tb_flow_params p = {.steps = 4, .solver = TB_FLOW_EULER, .prompt = TB_FLOW_PROMPT_NOISED};
        int32_t ct[B * L];
        memcpy(ct, tok0, sizeof ct);
        int cf = 0;
        CHECK(tb_flow_sample(&m, &e, &p, ct, pad, B, L, GEN0, noise, &cf, NULL, NULL) == 0);
        double ref = max_abs(flow_last, flow_last_n), bound = 4 * GPU_TOL * (ref > 1 ? ref : 1);
        for (int fused = 1; fused >= 0; fused--) {
            int32_t gt[B * L];
            memcpy(gt, tok0, sizeof gt);
            int gf = 0;
            int rc = tb_flow_gpu_set_fused_attention(g, fused);
            if (rc == 0)
                rc = tb_flow_gpu_sample(g, &p, gt, pad, B, L, GEN0, noise, NULL, &gf, NULL, NULL, glog[fused], NULL,
                                        NULL, NULL);
            if (rc)
                fprintf(stderr, "flow-tiny preset, fused %d: %s\n", fused, tb_flow_gpu_error(g));
            CHECK(rc == 0 && gf == cf);
            double diff;
            int clear, same;
            flow_against_cpu(glog[fused], gt, ct, pad, B, L, V, GEN0, bound, &diff, &clear, &same);
            fprintf(stderr, "flow-tiny preset (head_dim %d)%s, attention %s: final logits max diff %.3g (bound %.3g), "
                            "tokens %d of %d clear ones\n",
                    m.cfg.head_dim, pm ? " prompt_attention=prompt" : "", fused ? "in one kernel" : "batched", diff,
                    bound, same, clear);
            CHECK(diff <= bound && same == clear);
        }
        double both = max_diff(glog[0], glog[1], flow_last_n);
        fprintf(stderr, "flow-tiny preset%s: the two attention paths' final logits max diff %.3g\n",
                pm ? " prompt_attention=prompt" : "", both);
        CHECK(both <= bound);
        if (pm) /* a prompt limited to itself: both calls took the batched path, the same bits */
            CHECK(both == 0);
        tb_flow_gpu_free(g);
    }
    free(noise);
    free(flow_last);
    flow_last = NULL;
    free(glog[0]), free(glog[1]);
    tb_flow_cpu_free(&st);
    tb_flow_model_free(&m);
}

/* A MoE model's comparison beyond the bound after a CPU routing margin
 * below ROUTE_TOL ends as a reported near-tie (see the top); 1 then. */
static int route_near_tie(const char *name, const tb_model *m, const tb_cpu_state *st, int beyond)
{
    if (!beyond || m->cfg.n_experts <= 0 || !(st->moe.min_gap < ROUTE_TOL))
        return 0;
    fprintf(stderr, "%s: beyond the bound after a routing near-tie (CPU router margin %.3g): comparison ended\n", name,
            st->moe.min_gap);
    return 1;
}

/* Span attention's row softmax (kernels_softmax.cu's softmax_span) at every
 * width it is specialised for: a row's keys in registers up to 128, 256,
 * 512 and 1024, and the block kernel beyond; bidirectional spans against
 * the CPU's logits. */
static void check_span_widths(const char *name)
{
    static const int widths[] = {100, 200, 400, 1000, 1100};
    enum { LMAX = 1100 };
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (load_pair("golden-diffusion", name, &m, &g) != 0)
        return;
    int V = m.cfg.vocab_size;
    CHECK(tb_gpu_reserve(g, 1, LMAX, LMAX, err, sizeof err) == 0);
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, 1, LMAX, LMAX, 1, err, sizeof err) == 0);
    int32_t *canvas = malloc(LMAX * sizeof *canvas);
    float *gl = malloc((size_t)LMAX * V * sizeof(float)), *cl = malloc((size_t)LMAX * V * sizeof(float));
    CHECK(canvas && gl && cl);
    uint64_t rng = 11;
    for (int i = 0; i < LMAX; i++)
        canvas[i] = i % 4 == 1 ? m.cfg.mask_id : (int32_t)(tb_rng_uniform(&rng) * 500);
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        int L = widths[k];
        CHECK(tb_gpu_logits(g, canvas, 1, 0, L, L, 0, gl) == 0);
        CHECK(tb_cpu_forward_at(&st, canvas, 1, 0, L, L, cl) == 0);
        double ref = max_abs(cl, (size_t)L * V), diff = 0;
        for (size_t i = 0; i < (size_t)L * V; i++)
            diff = fabs(gl[i] - cl[i]) > diff ? fabs(gl[i] - cl[i]) : diff;
        fprintf(stderr, "%s: bidirectional span of %d keys, max |cpu| %.3f, max diff %.3g (bound %.3g)\n", name, L,
                ref, diff, GPU_TOL * (ref > 1 ? ref : 1));
        CHECK(diff <= GPU_TOL * (ref > 1 ? ref : 1));
    }
    free(canvas);
    free(gl);
    free(cl);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* The reference of the attention checks: one query row qr [hd] over keys
 * [lo, vis) whose rows k, v are kvd floats apart (the K/V head's offset
 * included), softmax(q . k / sqrt(hd)) V in double; the largest |difference|
 * from got [hd] (NaN if got has one). p: scratch for vis scores. */
static double attention_diff(const float *qr, const float *k, const float *v, int kvd, int hd, int lo, int vis,
                             const float *got, double *p)
{
    double mx = -INFINITY, sum = 0, diff = 0;
    for (int j = lo; j < vis; j++) {
        double d = 0;
        for (int e = 0; e < hd; e++)
            d += (double)qr[e] * k[(size_t)j * kvd + e];
        p[j] = d / sqrt((double)hd);
        mx = p[j] > mx ? p[j] : mx;
    }
    for (int j = lo; j < vis; j++)
        sum += p[j] = exp(p[j] - mx);
    for (int e = 0; e < hd; e++) {
        double o = 0;
        for (int j = lo; j < vis; j++)
            o += p[j] / sum * v[(size_t)j * kvd + e];
        double d = fabs(o - got[e]);
        diff = d > diff || isnan(d) ? d : diff;
    }
    return diff;
}

/* The spans check_span_masks and check_attention_kernel run through one
 * state in turn (two sequences, the second padded by 70): a causal prefill
 * of 150, a causal chunk of 40 over 190 keys, a bidirectional span inside
 * them, a block-causal forward (blocks of 8) of all 190. */
static const struct span_step {
    int pos0, n, n_attend, causal;
} span_steps[4] = {{0, 150, 150, 1}, {150, 40, 190, 1}, {64, 50, 190, 0}, {0, 190, 190, 8}};

/* Span attention's masks over several key tiles and query blocks (the
 * fused kernel takes 64 of each, gpu_attn_span.cu): two sequences, the
 * second left-padded across a tile boundary, through one state in turn:
 * a causal prefill of 150 positions, a causal chunk of 40 after it over
 * the cache, a bidirectional span in the middle over all 190 (keys after
 * the span from the cache), and a block-causal (blocks of 8) forward of
 * all 190; each against the CPU's logits (real rows). */
static void check_span_masks(const char *sub, const char *name)
{
    enum { B = 2, LEN = 192, NSTEP = 4 };
    const struct span_step *steps = span_steps;
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (load_pair(sub, name, &m, &g) != 0)
        return;
    int V = m.cfg.vocab_size, pad[B] = {0, 70}, slots[B] = {0, 1};
    tb_cpu_state st;
    CHECK(tb_gpu_reserve(g, B, LEN, B * LEN, err, sizeof err) == 0);
    CHECK(tb_gpu_set_padding(g, pad, B) == 0);
    CHECK(tb_cpu_state_init(&st, &m, B, LEN, B * LEN, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_set_padding(&st, pad, B) == 0);
    int32_t *tok = malloc((size_t)B * LEN * sizeof *tok);
    float *gl = malloc((size_t)B * LEN * V * sizeof(float)), *cl = malloc((size_t)B * LEN * V * sizeof(float));
    CHECK(tok && gl && cl);
    uint64_t rng = 23;
    for (int k = 0; k < NSTEP; k++) {
        int pos0 = steps[k].pos0, n = steps[k].n;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < n; i++)
                tok[b * n + i] = pos0 + i < pad[b] ? 0 : (int32_t)(tb_rng_uniform(&rng) * (V < 500 ? V : 500));
        CHECK(tb_gpu_logits(g, tok, B, pos0, n, steps[k].n_attend, steps[k].causal, gl) == 0);
        CHECK(tb_cpu_forward_rows(&st, tok, slots, B, pos0, n, steps[k].n_attend, steps[k].causal, 0, n, cl) == 0);
        double ref = 0, diff = 0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < n; i++) {
                if (pos0 + i < pad[b])
                    continue;
                for (int v = 0; v < V; v++) {
                    size_t j = ((size_t)b * n + i) * V + v;
                    ref = fabs(cl[j]) > ref ? fabs(cl[j]) : ref;
                    diff = fabs(gl[j] - cl[j]) > diff ? fabs(gl[j] - cl[j]) : diff;
                }
            }
        double bound = GPU_TOL * (ref > 1 ? ref : 1);
        fprintf(stderr, "%s: span [%d, %d) over %d keys, mask %d, seq 1 padded by %d: max |cpu| %.3f, max diff %.3g "
                "(bound %.3g)\n", name, pos0, pos0 + n, steps[k].n_attend, steps[k].causal, pad[1], ref, diff, bound);
        if (route_near_tie(name, &m, &st, diff > bound))
            break;
        CHECK(diff <= bound);
    }
    free(tok);
    free(gl);
    free(cl);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* Span attention alone (tb_gpu_span_attention) at the 8B models' head_dim
 * 128 and at 64, 4 query heads to a K/V head, against a double-precision
 * reference of softmax_row's masks: both paths (one kernel, batched
 * GEMMs), and for head_dim 128 each block shape of gpu_attn_span.cu
 * (TB_GPU_SPAN_ATTN_SHAPE). Inputs uniform in [-2, 2] (scores of a few
 * units: peaked rows), rounded to bf16 as the device holds them; the
 * outputs differ from the reference by the rounding of P and of the
 * output to bf16 (under 2^-7 of the largest |v| a key; bound 2e-2). Four
 * steps as check_span_masks: causal 150, a causal chunk of 40 over 190
 * keys, a bidirectional span inside them, block-causal 8; sequence 1
 * padded by 70 (across a tile). */
static void check_attention_kernel(int hd, int shape)
{
    enum { B = 2, LEN = 192, NSTEP = 4 };
    const struct span_step *steps = span_steps;
    char err[512], shape_s[16];
    tb_model_config cfg;
    if (tb_preset_config("tiny-llama", &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
        return;
    }
    cfg.head_dim = hd, cfg.n_heads = 8, cfg.n_kv_heads = 2, cfg.rope_dim = 0;
    snprintf(shape_s, sizeof shape_s, "%d", shape);
    setenv("TB_GPU_SPAN_ATTN_SHAPE", shape_s, 1);
    tb_gpu *g = NULL;
    int rc = tb_gpu_create(&g, &cfg, NULL, 3, err, sizeof err);
    unsetenv("TB_GPU_SPAN_ATTN_SHAPE");
    if (rc != 0) {
        fprintf(stderr, "attention kernel: %s\n", err);
        CHECK(0);
        return;
    }
    int nh = cfg.n_heads, nkv = cfg.n_kv_heads, group = nh / nkv, pad[B] = {0, 70};
    CHECK(tb_gpu_reserve(g, B, LEN, B * LEN, err, sizeof err) == 0);
    CHECK(tb_gpu_set_padding(g, pad, B) == 0);
    size_t nq = (size_t)B * LEN * nh * hd, nk = (size_t)B * LEN * nkv * hd;
    float *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float)), *v = malloc(nk * sizeof(float));
    float *out = malloc(nq * sizeof(float));
    double *p = malloc(LEN * sizeof(double));
    CHECK(q && k && v && out && p);
    uint64_t rng = 41 + hd + shape;
    for (int st = 0; st < NSTEP && q && k && v && out && p; st++) {
        int pos0 = steps[st].pos0, n = steps[st].n, na = steps[st].n_attend, causal = steps[st].causal;
        /* bf16 values, so the reference sees what the device holds */
        for (size_t i = 0; i < (size_t)B * n * nh * hd; i++)
            q[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(4 * tb_rng_uniform(&rng) - 2)));
        for (size_t i = 0; i < (size_t)B * na * nkv * hd; i++) {
            k[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(4 * tb_rng_uniform(&rng) - 2)));
            v[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(4 * tb_rng_uniform(&rng) - 2)));
        }
        for (int fused = 1; fused >= 0; fused--) {
            if (shape > 0 && !fused)
                continue; /* the batched path has no shapes */
            CHECK(tb_gpu_span_attention(g, q, k, v, B, pos0, n, na, causal, fused, out) == 0);
            double diff = 0;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < n; t++)
                    for (int h = 0; h < nh; h++) {
                        int pos = pos0 + t, vis = na, lo = pos >= pad[b] ? pad[b] : 0;
                        if (causal > 0)
                            vis = (pos / causal + 1) * causal < na ? (pos / causal + 1) * causal : na;
                        size_t kv0 = ((size_t)b * na * nkv + h / group) * hd;
                        double d = attention_diff(q + (((size_t)b * n + t) * nh + h) * hd, k + kv0, v + kv0,
                                                  nkv * hd, hd, lo, vis, out + (((size_t)b * n + t) * nh + h) * hd, p);
                        diff = d > diff || isnan(d) ? d : diff;
                    }
            fprintf(stderr, "attention, head_dim %d, %s (shape %d): [%d, %d) over %d keys, mask %d: max diff %.3g "
                    "(bound 2e-2)\n", hd, fused ? "one kernel" : "batched GEMMs", shape, pos0, pos0 + n, na, causal,
                    diff);
            CHECK(diff <= 2e-2);
        }
    }
    free(q), free(k), free(v), free(out), free(p);
    tb_gpu_free(g);
}

/* Decode attention alone (tb_gpu_decode_attention): each of its kernels
 * (a block per head or per K/V head's group, each whole or split over the
 * keys: 16 splits here, some of them all padding) at
 * head_dim hd with `group` query heads per K/V head (8: the group kernels
 * take it as two blocks of 4), three sequences (the
 * second left-padded by 70, the third by 3) at several lengths, against a
 * double-precision softmax over keys [pad, position]; inputs uniform in
 * [-2, 2] as bf16. */
static void check_decode_attention(int hd, int group)
{
    enum { B = 3, LEN = 320 };
    const int lengths[4] = {71, 130, 257, LEN};
    char err[512];
    tb_model_config cfg;
    if (tb_preset_config("tiny-llama", &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
        return;
    }
    cfg.head_dim = hd, cfg.n_heads = 8, cfg.n_kv_heads = 8 / group, cfg.rope_dim = 0;
    tb_gpu *g = NULL;
    if (tb_gpu_create(&g, &cfg, NULL, 3, err, sizeof err) != 0) {
        fprintf(stderr, "decode attention: %s\n", err);
        CHECK(0);
        return;
    }
    int nh = cfg.n_heads, nkv = cfg.n_kv_heads, pad[B] = {0, 70, 3};
    CHECK(tb_gpu_reserve(g, B, LEN, B, err, sizeof err) == 0);
    CHECK(tb_gpu_set_padding(g, pad, B) == 0);
    size_t nq = (size_t)B * nh * hd, nk = (size_t)B * LEN * nkv * hd;
    float *q = malloc(nq * sizeof(float)), *k = malloc(nk * sizeof(float)), *v = malloc(nk * sizeof(float));
    float *out = malloc(nq * sizeof(float));
    double *p = malloc(LEN * sizeof(double));
    CHECK(q && k && v && out && p);
    uint64_t rng = 53 + hd + group;
    for (int li = 0; li < 4 && q && k && v && out && p; li++) {
        int na = lengths[li];
        for (size_t i = 0; i < nq; i++)
            q[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(4 * tb_rng_uniform(&rng) - 2)));
        for (size_t i = 0; i < (size_t)B * na * nkv * hd; i++) {
            k[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(4 * tb_rng_uniform(&rng) - 2)));
            v[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(4 * tb_rng_uniform(&rng) - 2)));
        }
        for (int kernel = 0; kernel < 4; kernel++) {
            if (tb_gpu_decode_attention(g, q, k, v, B, na, kernel, out) != 0) {
                fprintf(stderr, "decode attention: %s\n", tb_gpu_error(g));
                CHECK(0);
                continue;
            }
            double diff = 0;
            for (int b = 0; b < B; b++)
                for (int h = 0; h < nh; h++) {
                    size_t kv0 = ((size_t)b * na * nkv + h / group) * hd;
                    double d = attention_diff(q + ((size_t)b * nh + h) * hd, k + kv0, v + kv0, nkv * hd, hd, pad[b],
                                              na, out + ((size_t)b * nh + h) * hd, p);
                    diff = d > diff || isnan(d) ? d : diff;
                }
            fprintf(stderr, "decode attention, head_dim %d, %d heads a K/V head, kernel %d, %d keys: max diff %.3g "
                            "(bound 2e-2)\n", hd, group, kernel, na, diff);
            CHECK(diff <= 2e-2);
        }
    }
    free(q), free(k), free(v), free(out), free(p);
    tb_gpu_free(g);
}

/* The products as the forward runs them (tb_gpu_product: matmul_t) at 1-9
 * rows (the batch-1 GEMV in its variant for the shape, then cuBLAS),
 * written and accumulated, on an odd output width (a warp's tail rows)
 * and a Llama-3-8B-wide input, against a double-precision sum of the
 * bf16-rounded operands; the bound is 1e-4 of the sum of |products|
 * (float sums over 4,096 terms). */
static void check_products(void)
{
    tb_model m;
    tb_gpu *g;
    if (load_pair("golden", "llama-gqa", &m, &g) != 0)
        return;
    const int shapes[2][2] = {{257, 136}, {72, 4096}};
    double worst = 0;
    int checked = 0;
    uint64_t rng = 31;
    for (int sh = 0; sh < 2; sh++) {
        int out = shapes[sh][0], in = shapes[sh][1];
        float *w = malloc((size_t)out * in * sizeof(float)), *x = malloc((size_t)9 * in * sizeof(float));
        float *y0 = malloc((size_t)9 * out * sizeof(float)), *y = malloc((size_t)9 * out * sizeof(float));
        for (size_t i = 0; i < (size_t)out * in; i++)
            w[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(2 * tb_rng_uniform(&rng) - 1)));
        for (size_t i = 0; i < (size_t)9 * in; i++)
            x[i] = tb_bf16_to_f32(tb_f32_to_bf16((float)(2 * tb_rng_uniform(&rng) - 1)));
        for (size_t i = 0; i < (size_t)9 * out; i++)
            y0[i] = (float)(4 * tb_rng_uniform(&rng) - 2);
        for (int rows = 1; rows <= 9; rows++)
            for (int acc = 0; acc < 2; acc++) {
                memcpy(y, y0, (size_t)rows * out * sizeof(float));
                int rc = tb_gpu_product(g, w, x, rows, out, in, y, acc);
                CHECK(rc == 0);
                for (int r = 0; rc == 0 && r < rows; r++)
                    for (int o = 0; o < out; o++) {
                        double ref = acc ? y0[(size_t)r * out + o] : 0, mag = fabs(ref);
                        for (int k = 0; k < in; k++) {
                            double p = (double)w[(size_t)o * in + k] * x[(size_t)r * in + k];
                            ref += p, mag += fabs(p);
                        }
                        double e = fabs(y[(size_t)r * out + o] - ref) / (1e-4 * mag + 1e-30);
                        worst = isnan(e) ? INFINITY : e > worst ? e : worst;
                        checked++;
                    }
            }
        free(w), free(x), free(y0), free(y);
    }
    fprintf(stderr, "products at 1-9 rows (GEMV, cuBLAS): %d outputs, worst error %.3g of the bound\n", checked,
            worst);
    CHECK(checked == 2 * 45 * (257 + 72) && worst <= 1.0);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* Every span attention check (also TB_TEST_GPU_ONLY=span's run): the
 * softmax widths, the masks through golden models of head_dim 16 and 32,
 * and the kernel alone at 128 (each block shape) and 64. */
static void check_span_attention(void)
{
    check_span_widths("llada-tiny");
    check_span_masks("golden", "llama-gqa");
    check_span_masks("golden-diffusion", "llada-tiny");
    check_span_masks("golden/block-diffusion", "sdar-tiny");
    for (int shape = 0; shape < 4; shape++)
        check_attention_kernel(128, shape);
    check_attention_kernel(64, 0);
}

/* Diffusion: one bidirectional forward + pick against the CPU's logits. */
static void check_diffusion(const char *name, int shifted)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (load_pair("golden-diffusion", name, &m, &g) != 0)
        return;
    int V = m.cfg.vocab_size, L = 40;
    CHECK(tb_gpu_reserve(g, 1, L, L, err, sizeof err) == 0);
    int32_t canvas[40];
    uint64_t rng = 3;
    for (int i = 0; i < L; i++)
        canvas[i] = i < 8 || i % 3 == 0 ? (int32_t)(tb_rng_uniform(&rng) * 500) : m.cfg.mask_id;
    float *gl = malloc((size_t)L * V * sizeof(float)), *cl = malloc((size_t)L * V * sizeof(float));
    CHECK(tb_gpu_logits(g, canvas, 1, 0, L, L, 0, gl) == 0);
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, 1, L, L, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_forward_at(&st, canvas, 1, 0, L, L, cl) == 0);
    double ref = max_abs(cl, (size_t)L * V), diff = 0;
    for (size_t i = 0; i < (size_t)L * V; i++)
        diff = fabs(gl[i] - cl[i]) > diff ? fabs(gl[i] - cl[i]) : diff;
    fprintf(stderr, "%s: bidirectional logits, max |cpu| %.3f, max diff %.3g\n", name, ref, diff);
    if (route_near_tie(name, &m, &st, diff > GPU_TOL * (ref > 1 ? ref : 1)))
        goto done;
    CHECK(diff <= GPU_TOL * (ref > 1 ? ref : 1));
    /* picks: argmax where the CPU's margin is clear, confidence close */
    int32_t x0[40];
    double conf[40];
    for (int kind = 0; kind < 4; kind++) {
        CHECK(tb_gpu_forward_pick(g, canvas, 1, 1, L, 0, L, L, 0, L, kind, 0, shifted, x0, conf) == 0);
        int same = 0, clear = 0;
        double worst = 0;
        for (int i = 0; i < L; i++) {
            const float *row = cl + (size_t)(shifted && i > 0 ? i - 1 : i) * V;
            int32_t best;
            double gap;
            margin(row, V, &best, &gap);
            if (gap > GPU_TOL * (ref > 1 ? ref : 1)) {
                clear++;
                same += x0[i] == best;
            }
            /* the CPU confidence of the same kind, from the CPU logits */
            double mx = row[best], z = 0, h = 0, second = -INFINITY;
            for (int v = 0; v < V; v++)
                z += exp(row[v] - mx);
            for (int v = 0; v < V; v++) {
                double p = exp(row[v] - mx) / z;
                h += p * log(p + 1e-10);
                if (v != best && row[v] > second)
                    second = row[v];
            }
            double want = kind <= 1 ? 1 / z : kind == 2 ? (1 - exp(second - mx)) / z : h;
            /* a margin is a difference of near-equal probabilities: bound it
             * by the top probability instead */
            double scale = kind == 2 ? 1 / z : fabs(want);
            double rel = fabs(conf[i] - want) / (scale > 1e-12 ? scale : 1e-12);
            worst = rel > worst ? rel : worst;
        }
        fprintf(stderr, "%s: pick kind %d: argmax %d of %d clear positions identical, worst confidence rel. diff %.3g\n",
                name, kind, same, clear, worst);
        CHECK(same == clear);
        CHECK(worst <= (fp8_mode ? 0.25 : 0.1)); /* bf16 logits move a softmax probability by a few percent, fp8's
                                                    by several times that */
    }
    /* a pick range (the LM head on those rows only) gives the same picks
     * as the whole span */
    int32_t x0r[40];
    double confr[40];
    CHECK(tb_gpu_forward_pick(g, canvas, 1, 1, L, 0, L, L, 0, L, 0, 0, shifted, x0, conf) == 0);
    CHECK(tb_gpu_forward_pick(g, canvas, 1, 1, L, 0, L, L, 8, L - 8, 0, 0, shifted, x0r, confr) == 0);
    int same_range = 1;
    for (int i = 8; i < L; i++)
        same_range &= x0r[i] == x0[i] && fabs(confr[i] - conf[i]) <= 1e-3 * conf[i];
    fprintf(stderr, "%s: pick range [8, %d) matches the full span: %s\n", name, L, same_range ? "yes" : "no");
    CHECK(same_range);
done:
    free(gl);
    free(cl);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* Diffusion with left padding: two canvases, the second with pad
 * filler positions in front, bidirectional; logits at real positions and
 * the clear argmax picks against the CPU with the same padding. */
static void check_diffusion_padded(const char *name, int pad1)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (load_pair("golden-diffusion", name, &m, &g) != 0)
        return;
    enum { B = 2, L = 32 };
    int V = m.cfg.vocab_size, pad[B] = {0, pad1};
    CHECK(tb_gpu_reserve(g, B, L, B * L, err, sizeof err) == 0);
    CHECK(tb_gpu_set_padding(g, pad, B) == 0);
    int32_t canvas[B * L];
    uint64_t rng = 5;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
            canvas[b * L + i] = i < pad[b]                   ? 0 /* filler */
                                : i < 12 || i % 4 == 0 ? (int32_t)(tb_rng_uniform(&rng) * 500)
                                                       : m.cfg.mask_id;
    float *gl = malloc((size_t)B * L * V * sizeof(float)), *cl = malloc((size_t)B * L * V * sizeof(float));
    CHECK(tb_gpu_logits(g, canvas, B, 0, L, L, 0, gl) == 0);
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, B, L, B * L, 1, err, sizeof err) == 0);
    tb_cpu_set_padding(&st, pad, B);
    CHECK(tb_cpu_forward_at(&st, canvas, B, 0, L, L, cl) == 0);
    double ref = max_abs(cl, (size_t)B * L * V), diff = 0;
    for (int b = 0; b < B; b++)
        for (int i = pad[b]; i < L; i++)
            for (int v = 0; v < V; v++) {
                size_t k = ((size_t)b * L + i) * V + v;
                diff = fabs(gl[k] - cl[k]) > diff ? fabs(gl[k] - cl[k]) : diff;
            }
    double bound = GPU_TOL * (ref > 1 ? ref : 1);
    fprintf(stderr, "%s (seq 1 left-padded by %d): bidirectional logits, max |cpu| %.3f, max diff %.3g\n", name, pad1,
            ref, diff);
    if (route_near_tie(name, &m, &st, diff > bound))
        goto done;
    CHECK(diff <= bound);
    int32_t x0[B * L];
    double conf[B * L];
    CHECK(tb_gpu_forward_pick(g, canvas, B, B, L, 0, L, L, 0, L, 0, 0, 0, x0, conf) == 0);
    int same = 0, clear = 0;
    for (int b = 0; b < B; b++)
        for (int i = pad[b]; i < L; i++) {
            int32_t best;
            double gap;
            margin(cl + ((size_t)b * L + i) * V, V, &best, &gap);
            if (gap > bound) {
                clear++;
                same += x0[b * L + i] == best;
            }
        }
    fprintf(stderr, "%s (padded): argmax %d of %d clear positions identical\n", name, same, clear);
    CHECK(clear > 0 && same == clear);
done:
    free(gl);
    free(cl);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* Diffusion sampling on the GPU (temperature > 0): the pick rows' logits
 * come to the host (tb_gpu_forward_logits, shifted for Dream) and go
 * through the CPU's pick with the same random stream. The logits must
 * match the CPU's within the bf16 bound, and the sampled tokens must match
 * the CPU's wherever the Gumbel-perturbed top-1/top-2 gap on the CPU is
 * clear of the difference the bf16 logits can make. */
static void check_diffusion_sampling(const char *name, int shifted)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (load_pair("golden-diffusion", name, &m, &g) != 0)
        return;
    enum { L = 40, PICK0 = 8, NPICK = 24 };
    int V = m.cfg.vocab_size;
    CHECK(tb_gpu_reserve(g, 1, L, L, err, sizeof err) == 0);
    CHECK(tb_gpu_set_padding(g, NULL, 0) == 0);
    int32_t canvas[L];
    uint64_t rng = 9;
    for (int i = 0; i < L; i++)
        canvas[i] = i < 8 || i % 5 == 0 ? (int32_t)(tb_rng_uniform(&rng) * 500) : m.cfg.mask_id;
    float *gl = malloc((size_t)NPICK * V * sizeof(float)), *cl = malloc((size_t)L * V * sizeof(float));
    CHECK(tb_gpu_forward_logits(g, canvas, 1, L, 0, L, L, PICK0, NPICK, shifted, gl) == 0);
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, 1, L, L, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_forward_at(&st, canvas, 1, 0, L, L, cl) == 0);
    double ref = max_abs(cl, (size_t)L * V), diff = 0, bound = GPU_TOL * (ref > 1 ? ref : 1);
    for (int i = PICK0; i < PICK0 + NPICK; i++) {
        const float *c = cl + (size_t)(shifted && i > 0 ? i - 1 : i) * V, *q = gl + (size_t)(i - PICK0) * V;
        for (int v = 0; v < V; v++)
            diff = fabs(c[v] - q[v]) > diff ? fabs(c[v] - q[v]) : diff;
    }
    fprintf(stderr, "%s: pick-row logits to the host%s, max diff %.3g (bound %.3g)\n", name,
            shifted ? " (shifted)" : "", diff, bound);
    float *scratch = malloc((size_t)V * sizeof(float));
    if (route_near_tie(name, &m, &st, diff > bound))
        goto done;
    CHECK(diff <= bound);
    /* T = 1 Gumbel-max (LLaDA's rule) from the same stream on both */
    tb_dllm_pick_spec spec = {.conf = TB_DLLM_CONF_LLADA_PROB, .temperature = 1.0};
    uint64_t rg = 77, rc = 77;
    int same = 0, clear = 0;
    for (int i = PICK0; i < PICK0 + NPICK; i++) {
        const float *c = cl + (size_t)(shifted && i > 0 ? i - 1 : i) * V, *q = gl + (size_t)(i - PICK0) * V;
        int32_t xg, xc;
        double cg, cc;
        uint64_t before = rc;
        tb_dllm_pick_row(q, V, &spec, &rg, scratch, &xg, &cg);
        tb_dllm_pick_row(c, V, &spec, &rc, scratch, &xc, &cc);
        /* the CPU's perturbed scores for this draw: log of exp(l) / (-log u)^T */
        uint64_t r2 = before;
        double best = -INFINITY, second = -INFINITY;
        for (int v = 0; v < V; v++) {
            double s = (double)c[v] - log(-log(tb_dllm_uniform(&r2)));
            if (s > best)
                second = best, best = s;
            else if (s > second)
                second = s;
        }
        if (best - second > 2 * bound) {
            clear++;
            same += xg == xc;
        }
    }
    fprintf(stderr, "%s: sampled at T = 1, %d of %d clear draws identical to the CPU's\n", name, same, clear);
    CHECK(clear > 0 && same == clear);
done:
    free(scratch);
    free(gl);
    free(cl);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* The picks a run's description keeps (gpu.h's tb_gpu_gemv_picks) after
 * the two calibrations of a 4096 x 1024 weight: each in the syntax
 * TB_GPU_GEMV_PICKS takes, the variant the GEMV runs, a forced one shown
 * as forced, and a buffer too small for a shape left empty. */
static void check_gemv_picks(tb_gpu *g)
{
    char buf[256];
    int o = 0, i = 0, v = -1, used = 0;
    CHECK(tb_gpu_gemv_picks(g, 0, buf, sizeof buf) == 1);
    CHECK(sscanf(buf, "%dx%d=%d%n", &o, &i, &v, &used) == 3 && buf[used] == '\0');
    CHECK(o == 4096 && i == 1024 && v >= 0 && v < TB_GPU_GEMV_VARIANTS);
    CHECK(tb_gpu_gemv_picks(g, 1, buf, sizeof buf) == 1);
    v = -1;
    CHECK(sscanf(buf, "4096x1024=%d%n", &v, &used) == 1 && buf[used] == '\0');
    CHECK(v >= 0 && v < TB_GPU_FP8_GEMV_VARIANTS);
    tb_gpu_force_gemv_variant(g, 2);
    CHECK(tb_gpu_gemv_picks(g, 0, buf, sizeof buf) == 1 && strcmp(buf, "4096x1024=2") == 0);
    tb_gpu_force_gemv_variant(g, -1);
    CHECK(tb_gpu_gemv_picks(g, 0, buf, 11) == 0 && buf[0] == '\0'); /* "4096x1024=V" needs 12 */
    CHECK(tb_gpu_gemv_picks(g, 0, buf, 12) == 1);
}

/* The device-memory count (gpu.h): what the context holds now, and the
 * high-water mark since the last reset, transient buffers included. */
static void check_memory(void)
{
    tb_model_config cfg;
    char err[512];
    tb_gpu *g = NULL;
    if (tb_preset_config("tiny-llama", &cfg, err, sizeof err) != 0 ||
        tb_gpu_create(&g, &cfg, NULL, 1, err, sizeof err) != 0) {
        fprintf(stderr, "memory: %s\n", err);
        CHECK(0);
        return;
    }
    size_t weights = tb_gpu_bytes(g); /* and cuBLAS's 64 MiB workspace */
    CHECK(weights > ((size_t)64 << 20));
    CHECK(tb_gpu_peak_bytes(g) >= weights);
    tb_gpu_reset_peak(g);
    CHECK(tb_gpu_peak_bytes(g) == weights);
    /* K and V of 2 sequences x 64 positions, every layer, bf16 */
    size_t kv = (size_t)2 * cfg.n_layers * 2 * 64 * cfg.n_kv_heads * cfg.head_dim * 2;
    CHECK(tb_gpu_reserve(g, 2, 64, 128, err, sizeof err) == 0);
    size_t small = tb_gpu_bytes(g) - weights;
    CHECK(small > kv);
    CHECK(tb_gpu_peak_bytes(g) == weights + small);
    /* twice the sequences and rows: every buffer doubles but the decode
     * position (one int); the old buffers are freed first, so the context
     * holds the new ones only, and the peak is the new total */
    CHECK(tb_gpu_reserve(g, 4, 64, 256, err, sizeof err) == 0);
    size_t big = tb_gpu_bytes(g) - weights;
    CHECK(big == 2 * small - sizeof(int));
    CHECK(tb_gpu_peak_bytes(g) == weights + big);
    /* transient: the GEMV calibration's copies of W (enough to pass L2),
     * x and y are in the peak, not in what is held after */
    tb_gpu_reset_peak(g);
    double gbs[TB_GPU_GEMV_VARIANTS];
    CHECK(tb_gpu_bench_gemv(g, 4096, 1024, gbs) > 0);
    int copies = tb_gpu_timing_copies(g, (size_t)4096 * 1024 * 2);
    CHECK(copies > 1 && (size_t)copies * 4096 * 1024 * 2 > ((size_t)256 << 20));
    size_t gemv = (size_t)copies * 4096 * 1024 * 2 + 1024 * 2 + 4096 * 4;
    CHECK(tb_gpu_bytes(g) == weights + big);
    CHECK(tb_gpu_peak_bytes(g) == weights + big + gemv);
    /* the FP8 GEMV's calibration likewise (codes, scales, x, y), every
     * variant timed */
    tb_gpu_reset_peak(g);
    double gbs8[TB_GPU_FP8_GEMV_VARIANTS];
    CHECK(tb_gpu_bench_gemv_fp8(g, 4096, 1024, gbs8) > 0);
    for (int v = 0; v < TB_GPU_FP8_GEMV_VARIANTS; v++)
        CHECK(gbs8[v] > 0);
    size_t gemv8 = (size_t)tb_gpu_timing_copies(g, (size_t)4096 * 1024) * 4096 * 1024 + 4096 * 4 + 1024 * 2 + 4096 * 4;
    CHECK(tb_gpu_bytes(g) == weights + big);
    CHECK(tb_gpu_peak_bytes(g) == weights + big + gemv8);
    check_gemv_picks(g);
    /* the ceilings: 2 x 1 GiB copies and an 8192^2 float32 product */
    tb_gpu_reset_peak(g);
    double flops, bps;
    CHECK(tb_gpu_measure_ceilings(g, &flops, &bps) == 0);
    CHECK(tb_gpu_bytes(g) == weights + big);
    CHECK(tb_gpu_peak_bytes(g) == weights + big + ((size_t)2 << 30) + (size_t)8192 * 8192 * 4);
    fprintf(stderr, "memory: weights + workspace %.1f MiB, buffers %.2f -> %.2f MiB, gemv transient %.1f MiB\n",
            weights / 1048576.0, small / 1048576.0, big / 1048576.0, gemv / 1048576.0);
    tb_gpu_free(g);
}


/* A preset with random weights (rounded to bf16; fp8_mode: to FP8) on both paths. */
/* preset_pair: the routed experts' rows scaled by powers of two that
 * differ from row to row and expert to expert, 2^((e + o) % 5 - 2), so
 * that under dtype = fp8 each has its own E4M3 scale (the preset's random
 * rows all get one: a kernel reading another row's or expert's scale
 * would pass) */
static int vary_expert_scales;

static int preset_pair(const char *name, tb_model *m, tb_gpu **g)
{
    char err[512];
    *g = NULL;
    if (tb_model_preset(name, 5, m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        return -1;
    }
    for (int l = 0; vary_expert_scales && l < m->cfg.n_layers; l++) {
        tb_layer *L = &m->layers[l];
        size_t E = m->cfg.n_experts, h = m->cfg.hidden_size, mi = m->cfg.moe_intermediate_size;
        if (!L->experts_gate_up)
            continue;
        for (size_t e = 0; e < E; e++) {
            for (size_t o = 0; o < 2 * mi; o++)
                for (size_t i = 0; i < h; i++)
                    L->experts_gate_up[(e * 2 * mi + o) * h + i] *= ldexpf(1.0f, (int)((e + o) % 5) - 2);
            for (size_t o = 0; o < h; o++)
                for (size_t i = 0; i < mi; i++)
                    L->experts_down[(e * h + o) * mi + i] *= ldexpf(1.0f, (int)((e + o) % 5) - 2);
        }
    }
    if (fp8_mode && tb_model_round_fp8(m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        tb_model_free(m);
        return -1;
    }
    round_to_bf16(m); /* after fp8: an E4M3 value times a power of two is a bf16 already */
    if (tb_gpu_create_dtype(g, &m->cfg, m, 0, fp8_mode, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        tb_model_free(m);
        return -1;
    }
    return 0;
}



/* Qwen3 (QK-norm) causal, and block diffusion (LLaDA 2.x's MoE too): a block-causal prefill of
 * two canvases, then a block over the exact cache with the canvases in
 * swapped cache order (the rows' slots), picks shifted or not. */
static void check_block(const char *name, int shifted)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (preset_pair(name, &m, &g) != 0)
        return;
    int V = m.cfg.vocab_size, B = 2, bs = 4, P = 16, L = 24;
    CHECK(tb_gpu_reserve(g, B, L, B * L, err, sizeof err) == 0);
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, B, L, B * L, 1, err, sizeof err) == 0);
    int32_t canvas[2 * 24];
    uint64_t rng = 11;
    for (int i = 0; i < B * L; i++)
        canvas[i] = i % L < P || i % 3 == 0 ? (int32_t)(tb_rng_uniform(&rng) * (V - 8)) : (int32_t)(V - 2);
    int32_t pre[2 * 16];
    for (int b = 0; b < B; b++)
        memcpy(pre + b * P, canvas + b * L, P * sizeof(int32_t));
    float *gl = malloc((size_t)B * P * V * sizeof(float)), *cl = malloc((size_t)B * P * V * sizeof(float));
    for (int mask = 1; mask <= bs; mask += bs - 1) { /* causal, then block-causal (the cache kept) */
        int slots[2] = {0, 1};
        CHECK(tb_gpu_logits(g, pre, B, 0, P, P, mask, gl) == 0);
        CHECK(tb_cpu_forward_rows(&st, pre, slots, B, 0, P, P, mask, 0, P, cl) == 0);
        double ref = max_abs(cl, (size_t)B * P * V), diff = max_diff(gl, cl, (size_t)B * P * V);
        fprintf(stderr, "%s: %s prefill logits, max |cpu| %.3f, max diff %.3g\n", name,
                mask == 1 ? "causal" : "block-causal", ref, diff);
        int beyond = diff > GPU_TOL * (ref > 1 ? ref : 1);
        CHECK(!beyond || route_near_tie(name, &m, &st, beyond)); /* MoE (tiny-llada2): a reported routing near-tie */
    }
    /* the block [16, 20) of canvases {1, 0} over the cache */
    int rows[2] = {1, 0};
    int32_t x0[2 * 4];
    double conf[2 * 4], cconf[2 * 4];
    CHECK(tb_gpu_forward_pick_rows(g, canvas, L, rows, B, P, bs, P + bs, 0, 0, bs, 0, shifted, -1, x0, conf) == 0);
    int32_t blk[2 * 4];
    for (int b = 0; b < B; b++)
        memcpy(blk + b * bs, canvas + rows[b] * L + P, bs * sizeof(int32_t));
    CHECK(tb_cpu_forward_rows(&st, blk, rows, B, P, bs, P + bs, 0, 0, bs, cl) == 0);
    double ref = max_abs(cl, (size_t)B * bs * V);
    int same = 0, clear = 0;
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < bs; i++) {
            const float *row = cl + ((size_t)b * bs + (shifted && i > 0 ? i - 1 : i)) * V;
            int32_t best;
            double gap;
            margin(row, V, &best, &gap);
            double z = 0;
            for (int v = 0; v < V; v++)
                z += exp((double)row[v] - row[best]);
            cconf[b * bs + i] = 1 / z;
            if (gap > GPU_TOL * (ref > 1 ? ref : 1)) {
                clear++;
                same += x0[b * bs + i] == best;
            }
            double rel = fabs(conf[b * bs + i] - cconf[b * bs + i]) / cconf[b * bs + i];
            worst = rel > worst ? rel : worst;
        }
    fprintf(stderr, "%s: block over the cache (slots swapped, %s): argmax %d of %d clear identical, worst "
            "confidence rel. diff %.3g\n", name, shifted ? "shifted" : "unshifted", same, clear, worst);
    CHECK(same == clear);
    CHECK(worst <= 0.1);
    /* a cache store (no picks: the last layer stops after its K/V,
     * gpu_forward.cu's last_layer_rows) leaves the cache as a forward
     * with picks does: the next block's picks over it are the same bits */
    int32_t nx[2][2 * 4];
    double nc[2][2 * 4];
    for (int k = 0; k < 2; k++) {
        CHECK(tb_gpu_forward_pick_rows(g, canvas, L, rows, B, P, bs, P + bs, 0, 0, k ? 0 : bs, 0, shifted, -1, x0,
                                       conf) == 0);
        CHECK(tb_gpu_forward_pick_rows(g, canvas, L, rows, B, P + bs, bs, P + 2 * bs, 0, 0, bs, 0, shifted, -1, nx[k],
                                       nc[k]) == 0);
    }
    int stored_same = memcmp(nx[0], nx[1], sizeof nx[0]) == 0 && memcmp(nc[0], nc[1], sizeof nc[0]) == 0;
    fprintf(stderr, "%s: the next block over a cache stored without picks: %s\n", name,
            stored_same ? "identical" : "different");
    CHECK(stored_same);
    free(gl);
    free(cl);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* The last layer on the head's rows only (gpu_forward.cu's
 * last_layer_rows; TB_GPU_TRIM_LAST=0 runs every row through it): the
 * pick rows' logits as without it, and the roofline's count (docs/
 * METRICS.md) short by the cut rows' attention, output projection and
 * feed-forward; a cache store's bytes short by those weights and the last
 * layer's key and value reads. */
static void check_trim_last(const char *name, int shifted)
{
    char err[512];
    tb_model m;
    tb_gpu *g[2] = {NULL, NULL}; /* trimmed, every row */
    if (load_pair("golden-diffusion", name, &m, &g[0]) != 0)
        return;
    setenv("TB_GPU_TRIM_LAST", "0", 1);
    int rc = tb_gpu_create(&g[1], &m.cfg, &m, 0, err, sizeof err);
    unsetenv("TB_GPU_TRIM_LAST");
    if (rc != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        tb_gpu_free(g[0]);
        tb_model_free(&m);
        return;
    }
    const tb_model_config *c = &m.cfg;
    enum { L = 40, PICK0 = 8, NPICK = 24, B = 2 };
    int V = c->vocab_size;
    int32_t canvas[B * L];
    uint64_t rng = 21;
    for (int i = 0; i < B * L; i++)
        canvas[i] = i % L < 8 || i % 3 == 0 ? (int32_t)(tb_rng_uniform(&rng) * 500) : c->mask_id;
    float *lg[2];
    double fl[2], by[2], sfl[2], sby[2];
    for (int k = 0; k < 2; k++) {
        lg[k] = malloc((size_t)B * NPICK * V * sizeof(float));
        CHECK(tb_gpu_reserve(g[k], B, L, B * L, err, sizeof err) == 0);
        tb_gpu_take_work(g[k], &fl[k], &by[k], NULL, NULL);
        CHECK(tb_gpu_forward_logits(g[k], canvas, B, L, 0, L, L, PICK0, NPICK, shifted, lg[k]) == 0);
        tb_gpu_take_work(g[k], &fl[k], &by[k], NULL, NULL);
        int rows[B] = {0, 1};
        int32_t x0[B * 8];
        double conf[B * 8];
        CHECK(tb_gpu_forward_pick_rows(g[k], canvas, L, rows, B, 0, 8, 8, 0, 0, 0, 0, 0, -1, x0, conf) == 0);
        tb_gpu_take_work(g[k], &sfl[k], &sby[k], NULL, NULL);
    }
    double ref = max_abs(lg[1], (size_t)B * NPICK * V), diff = max_diff(lg[0], lg[1], (size_t)B * NPICK * V);
    double h = c->hidden_size, nq = (double)c->n_heads * c->head_dim, I = c->intermediate_size;
    double kvd = (double)c->n_kv_heads * c->head_dim, o_ffn = h * nq + 3 * I * h;
    /* the head's rows: the picks, and for a shifted model (Dream) the row before */
    double cut = (double)B * (L - NPICK - (shifted ? 1 : 0)), want = 2 * cut * o_ffn + 4 * cut * c->n_heads * (double)L * c->head_dim;
    double scut = (double)B * 8, swant = 2 * scut * o_ffn + 4 * scut * c->n_heads * 8.0 * c->head_dim;
    double sbytes = 2 * o_ffn + 2 * 2.0 * B * 8 * kvd;
    fprintf(stderr,
            "%s: last layer on the %d pick rows of %d%s: logits max diff %.3g against every row (|logit| %.2f); "
            "FLOPs fewer by %.0f (want %.0f), bytes by %.0f (want 0); cache store FLOPs fewer by %.0f (want %.0f), "
            "bytes by %.0f (want %.0f)\n",
            name, NPICK, L, shifted ? " (shifted)" : "", diff, ref, fl[1] - fl[0], want, by[1] - by[0], sfl[1] - sfl[0], swant, sby[1] - sby[0],
            sbytes);
    CHECK(diff <= GPU_TOL * (ref > 1 ? ref : 1));
    CHECK(fl[1] - fl[0] == want && by[1] == by[0]);
    CHECK(sfl[1] - sfl[0] == swant && sby[1] - sby[0] == sbytes);
    for (int k = 0; k < 2; k++) {
        free(lg[k]);
        tb_gpu_free(g[k]);
    }
    tb_model_free(&m);
}

/* Mixture of experts (gpu_moe.cu) on tiny-qwen3-moe (8 experts, top 2,
 * both layers sparse): span logits over 2 x 16 rows by both expert paths
 * (the grouped GEMV that decode's graphs replay, and cuBLAS per expert)
 * against the CPU; the roofline's count of what a batch-1 step reads
 * (top_k distinct experts in each MoE layer, and the active bytes
 * tb_moe_active_bytes_sum gives); and the experts that row chose are all
 * a one-row forward reads: the other experts of the last MoE layer
 * poisoned with NaN (after the CPU found which it chose) leave the GPU's
 * logits finite and equal to the CPU's. */
static void check_moe(int fp8)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    int saved_mode = fp8_mode; /* restored on return: the caller's block may be an fp8 one */
    fp8_mode = fp8;            /* dtype = fp8: both sides' experts E4M3 (GPU_TOL follows) */
    vary_expert_scales = fp8;  /* each expert's rows their own scales (preset_pair) */
    int rc = preset_pair("tiny-qwen3-moe", &m, &g);
    vary_expert_scales = 0;
    if (rc != 0) {
        fp8_mode = saved_mode;
        return;
    }
    const tb_model_config *c = &m.cfg;
    int V = c->vocab_size, B = 2, n = 16, k = c->n_experts_per_tok, Lm = 0;
    for (int l = 0; l < c->n_layers; l++)
        Lm += tb_config_layer_is_moe(c, l);
    CHECK(Lm == 2);
    CHECK(tb_gpu_reserve(g, B, 2 * n, B * n, err, sizeof err) == 0);
    int32_t tok[2 * 16];
    uint64_t rng = 17;
    for (int i = 0; i < B * n; i++)
        tok[i] = (int32_t)(tb_rng_uniform(&rng) * V);
    float *gl = malloc((size_t)B * n * V * sizeof(float)), *cl = malloc((size_t)B * n * V * sizeof(float));
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, B, 2 * n, B * n, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_forward(&st, tok, B, n, 1, 1, cl) == 0);
    double ref = max_abs(cl, (size_t)B * n * V);
    /* all spans by the GEMV; all by cuBLAS per expert (fp8: FP8 GEMMs per
     * expert); all by the grouped tensor-core GEMM */
    const int gemv_rows[3] = {B * n, 0, 0};
    const char *path[3] = {"the grouped GEMV", "cuBLAS per expert", "the grouped GEMM"};
    float *grouped = malloc((size_t)B * n * V * sizeof(float));
    for (int p = 0; p < 3; p++) {
        tb_gpu_set_moe_gemv_rows(g, gemv_rows[p]);
        tb_gpu_set_moe_span_grouped(g, p == 2);
        CHECK(tb_gpu_logits(g, tok, B, 0, n, n, 1, gl) == 0);
        double diff = max_diff(gl, cl, (size_t)B * n * V);
        fprintf(stderr, "tiny-qwen3-moe%s: %d-row span by %s: max |cpu| %.3f, max diff %.3g (bound %.3g)\n",
                fp8 ? " fp8" : "", B * n, path[p], ref, diff, GPU_TOL * (ref > 1 ? ref : 1));
        CHECK(diff <= GPU_TOL * (ref > 1 ? ref : 1));
        if (p == 2 && grouped)
            memcpy(grouped, gl, (size_t)B * n * V * sizeof(float));
    }
    /* the default (-1) picks by the span: 32 rows of top_k pairs over
     * n_experts experts are at most TB_GPU_MOE_GROUPED_PER_EXPERT an
     * expert, so the grouped GEMM's logits, to the bit */
    CHECK(B * n * k <= TB_GPU_MOE_GROUPED_PER_EXPERT * c->n_experts);
    tb_gpu_set_moe_gemv_rows(g, 0);
    tb_gpu_set_moe_span_grouped(g, -1);
    CHECK(tb_gpu_logits(g, tok, B, 0, n, n, 1, gl) == 0);
    CHECK(grouped && memcmp(gl, grouped, (size_t)B * n * V * sizeof(float)) == 0);
    fprintf(stderr, "tiny-qwen3-moe%s: %d-row span by the default choice: %s\n", fp8 ? " fp8" : "", B * n,
            grouped && memcmp(gl, grouped, (size_t)B * n * V * sizeof(float)) == 0 ? "the grouped GEMM's logits"
                                                                                   : "differs from the grouped GEMM");
    free(grouped);
    tb_gpu_set_moe_gemv_rows(g, TB_GPU_MOE_GEMV_ROWS);
    tb_gpu_set_moe_span_grouped(g, -1);
    /* batch 1: prefill 4 tokens, then one graph decode step: each MoE
     * layer reads exactly top_k distinct experts */
    double f, b, reads, rows;
    int32_t next[1];
    tb_gpu_take_work(g, &f, &b, &reads, &rows);
    CHECK(tb_gpu_prefill(g, tok, 1, 4, next, NULL) == 0);
    tb_gpu_take_work(g, &f, &b, &reads, &rows);
    /* the last layer (sparse) takes only the head's row past its QKV
     * (gpu_forward.cu's last_layer_rows): 4 rows a MoE layer, 1 in it */
    CHECK(tb_config_layer_is_moe(c, c->n_layers - 1) && rows == 4.0 * Lm - 3);
    CHECK(reads >= (double)k * Lm && reads <= (double)(4 * k < c->n_experts ? 4 * k : c->n_experts) * (Lm - 1) + k);
    CHECK(tb_gpu_decode(g, next, 1, NULL) == 0);
    tb_gpu_take_work(g, &f, &b, &reads, &rows);
    fprintf(stderr, "tiny-qwen3-moe: a batch-1 decode step read %.0f experts in %d MoE layers (%.0f rows)\n", reads,
            Lm, rows);
    CHECK(reads == (double)k * Lm && rows == Lm);
    {
        /* its bytes: the dense model's count, less the dense FFN a MoE
         * layer does not have, plus the active bytes */
        tb_moe_config mc;
        tb_model_moe_config(c, &mc);
        double h = c->hidden_size, kvd = (double)c->n_kv_heads * c->head_dim, nq = (double)c->n_heads * c->head_dim;
        double attn = (nq + 2 * kvd) * h + h * nq, L = c->n_layers;
        /* fp8: the attention projections' codes and row scales, the
         * experts' as tb_moe_active_bytes_fp8 defines them */
        double proj = fp8 ? attn * L + 4.0 * L * (nq + 2 * kvd + h) : 2 * attn * L;
        double expect = proj + 2.0 * V * h + 2 * L * (2.0 * 5 * kvd + 2 * kvd) + 2 * h +
                        (fp8 ? tb_moe_active_bytes_fp8(&mc, Lm, reads) : tb_moe_active_bytes_sum(&mc, Lm, reads, 2.0));
        fprintf(stderr, "tiny-qwen3-moe%s: decode step bytes %.0f, expected %.0f\n", fp8 ? " fp8" : "", b, expect);
        CHECK(fabs(b - expect) <= 1e-9 * expect);
    }
    tb_gpu_free(g);
    if (fp8) { /* the poisoning below writes NaN into float weights, which E4M3 codes cannot hold */
        free(gl);
        free(cl);
        tb_cpu_state_free(&st);
        tb_model_free(&m);
        fp8_mode = saved_mode;
        return;
    }

    /* poison: the CPU's choice for one row at the last MoE layer (its
     * scratch holds the last layer's routes) */
    tb_cpu_state_reset(&st);
    CHECK(tb_cpu_forward(&st, tok, 1, 1, 1, 1, cl) == 0);
    int last = -1;
    for (int l = 0; l < c->n_layers; l++)
        if (tb_config_layer_is_moe(c, l))
            last = l;
    unsigned char chosen[TB_MOE_MAX_EXPERTS] = {0};
    for (int t = 0; t < k; t++)
        chosen[st.moe.idx[t]] = 1;
    size_t h = c->hidden_size, mi = c->moe_intermediate_size;
    int poisoned = 0;
    for (int e = 0; e < c->n_experts; e++) {
        if (chosen[e])
            continue;
        poisoned++;
        for (size_t i = 0; i < 2 * mi * h; i++)
            m.layers[last].experts_gate_up[(size_t)e * 2 * mi * h + i] = NAN;
        for (size_t i = 0; i < h * mi; i++)
            m.layers[last].experts_down[(size_t)e * h * mi + i] = NAN;
    }
    CHECK(poisoned == c->n_experts - k);
    tb_cpu_state_reset(&st);
    CHECK(tb_cpu_forward(&st, tok, 1, 1, 1, 1, cl) == 0); /* the CPU reads only its choice too */
    if (tb_gpu_create(&g, c, &m, 0, err, sizeof err) != 0) {
        fprintf(stderr, "tiny-qwen3-moe: %s\n", err);
        CHECK(0);
    } else {
        CHECK(tb_gpu_reserve(g, 1, 4, 4, err, sizeof err) == 0);
        for (int p = 0; p < 3; p++) {
            tb_gpu_set_moe_gemv_rows(g, p ? 0 : 1);
            tb_gpu_set_moe_span_grouped(g, p == 2);
            CHECK(tb_gpu_logits(g, tok, 1, 0, 1, 1, 1, gl) == 0);
            double diff = max_diff(gl, cl, (size_t)V), r1 = max_abs(cl, V);
            fprintf(stderr, "tiny-qwen3-moe: %d unchosen experts NaN, one row by %s: max diff %.3g\n", poisoned,
                    p == 2 ? "the grouped GEMM" : p ? "cuBLAS" : "the GEMV", diff);
            CHECK(diff <= GPU_TOL * (r1 > 1 ? r1 : 1));
        }
        tb_gpu_free(g);
    }
    free(gl);
    free(cl);
    tb_cpu_state_free(&st);
    tb_model_free(&m);
    fp8_mode = saved_mode;
}

/* A kernel's launches in a kernel profile's table, or -1 when absent. */
static long kprof_launches(const char *table, const char *kernel)
{
    char want[96];
    snprintf(want, sizeof want, "\t%s\n", kernel);
    const char *at = strstr(table, want);
    if (!at)
        return -1;
    while (at > table && at[-1] != '\n')
        at--;
    double share, total;
    long launches;
    return sscanf(at, "%lf\t%lf\t%ld", &share, &total, &launches) == 3 ? launches : -1;
}

/* The kernel profile's table written at path (TB_GPU_KERNEL_PROFILE), or
 * NULL; the buffer is static. */
static const char *kprof_table(const char *path)
{
    static char table[1 << 16];
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(table, 1, sizeof table - 1, f);
    table[n] = 0;
    fclose(f);
    return table;
}

/* The grouped GEMM's four tile forms (gpu_tune.h's TB_GPU_MOE_TILES_*:
 * 64-row tiles with a K step's loads in registers, the same tiles
 * pipelined by cp.async, 16-row and 128-row tiles pipelined) over one
 * span of n rows: each output summed over the same K steps in the same
 * order by the same tensor-core products, whatever the tile, so logits
 * equal to the bit, and
 * within the bound of the CPU's; the default's pick among them too.
 * The pipelined forms run the gate-up's SwiGLU in their epilogue (a
 * tile's columns half gates, half their ups), and again without it
 * (k_swiglu): equal to the bit; the kernel profile counts the launches.
 * tiny-qwen3-moe-wide: hidden 200 (a K step's tail), experts of 1,056
 * (2,112 gate-up columns: a partial column tile of the 16- and 128-row
 * shapes, 64 columns wide, and of their epilogue's 32 gate-up pairs a
 * block; the down product 33 K steps), 8 of 8 chosen, so 32 rows give every expert
 * 32 pairs (two 16-row tiles); tiny-qwen3-moe at 16 rows: 32 pairs over
 * 8 experts (the narrow tiles by default), its hidden 64 fewer K steps
 * than the pipeline's depth. */
static void check_moe_tiles(const char *preset, int n)
{
    char err[512], path[128];
    tb_model m;
    tb_gpu *g;
    /* the kernels launched, counted by the kernel profile (written when
     * the context is freed) */
    snprintf(path, sizeof path, "/tmp/tb-kprof-tiles-%d.tsv", (int)getpid());
    unlink(path);
    setenv("TB_GPU_KERNEL_PROFILE", path, 1);
    int rc = preset_pair(preset, &m, &g);
    unsetenv("TB_GPU_KERNEL_PROFILE");
    if (rc != 0)
        return;
    tb_gpu_set_decode_fusion(g, TB_GPU_FUSE_DEFAULT, TB_GPU_PDL_DEFAULT); /* whatever TB_GPU_FUSION says */
    int V = m.cfg.vocab_size;
    tb_gpu_set_moe_splits(g, -1); /* the reserve allocates the split's buffers */
    CHECK(tb_gpu_reserve(g, 1, n, n, err, sizeof err) == 0);
    int32_t *tok = malloc(sizeof(int32_t) * n);
    uint64_t rng = 29;
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)(tb_rng_uniform(&rng) * V);
    float *cl = malloc((size_t)n * V * sizeof(float)), *lg[5];
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &m, 1, n, n, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_forward(&st, tok, 1, n, 1, 1, cl) == 0);
    double ref = max_abs(cl, (size_t)n * V), bound = GPU_TOL * (ref > 1 ? ref : 1);
    const char *form[5] = {"64-row tiles, loads in registers", "64-row tiles pipelined", "16-row tiles pipelined",
                           "128-row tiles pipelined", "the default's pick"};
    tb_gpu_set_moe_gemv_rows(g, 0);
    tb_gpu_set_moe_span_grouped(g, 1);
    tb_gpu_set_moe_splits(g, 1); /* unsplit: the split's forms below */
    for (int s = 0; s < 5; s++) {
        lg[s] = malloc((size_t)n * V * sizeof(float));
        tb_gpu_set_moe_gemm_tiles(g, s < 4 ? s : -1);
        CHECK(tb_gpu_logits(g, tok, 1, 0, n, n, 1, lg[s]) == 0);
        double diff = max_diff(lg[s], cl, (size_t)n * V);
        int same = memcmp(lg[s], lg[0], (size_t)n * V * sizeof(float)) == 0;
        fprintf(stderr, "%s: %d-row span by the grouped GEMM, %s: max diff %.3g (bound %.3g), %s\n", preset, n,
                form[s], diff, bound, same ? "equal to the first form's to the bit" : "differs from the first form's");
        CHECK(diff <= bound && same);
    }
    /* the pipelined forms above ran the gate-up's SwiGLU in its epilogue
     * (the first form has none); without the fusion, through k_swiglu */
    tb_gpu_set_decode_fusion(g, TB_GPU_FUSE_DEFAULT & ~TB_GPU_FUSE_SWIGLU, TB_GPU_PDL_DEFAULT);
    for (int s = 1; s < 4; s++) {
        tb_gpu_set_moe_gemm_tiles(g, s);
        CHECK(tb_gpu_logits(g, tok, 1, 0, n, n, 1, lg[4]) == 0);
        int same = memcmp(lg[4], lg[0], (size_t)n * V * sizeof(float)) == 0;
        fprintf(stderr, "%s: %d-row span by the grouped GEMM, %s, SwiGLU by k_swiglu: %s\n", preset, n, form[s],
                same ? "equal to the first form's to the bit" : "differs from the first form's");
        CHECK(same);
    }
    /* The split over K (gpu_tune.h's tb_gpu_set_moe_splits): each
     * pipelined form with its K steps in 2, 3 and 8 parts (parts past the
     * last step included: 7 K steps in 8 parts, tiny-qwen3-moe's 2 in 3
     * and 8), the SwiGLU in
     * the last part's epilogue, and the 16-row form in 3 parts without it;
     * then the default's pick by the tiles. The parts' sums meet in
     * another order than the unsplit form's, so not its bits: within the
     * bound of the CPU's and of the first form's, the same bits twice (a
     * counter left short of zero would lose a tile's outputs in the
     * second), and every forced launch split (the context's count). */
    int spans = 8, swiglu_spans = 4;
    for (int v = 0; v < 11; v++) {
        static const int part_counts[3] = {2, 3, 8};
        int s = v < 9 ? 1 + v / 3 : v == 9 ? TB_GPU_MOE_TILES_NARROW : -1;
        int parts = v < 9 ? part_counts[v % 3] : v == 9 ? 3 : -1;
        int fused = v != 9;
        tb_gpu_set_decode_fusion(g, fused ? TB_GPU_FUSE_DEFAULT : TB_GPU_FUSE_DEFAULT & ~TB_GPU_FUSE_SWIGLU,
                                 TB_GPU_PDL_DEFAULT);
        tb_gpu_set_moe_gemm_tiles(g, s);
        tb_gpu_set_moe_splits(g, parts);
        long before = tb_gpu_moe_split_launches(g);
        CHECK(tb_gpu_logits(g, tok, 1, 0, n, n, 1, lg[1]) == 0);
        long split = tb_gpu_moe_split_launches(g) - before;
        CHECK(tb_gpu_logits(g, tok, 1, 0, n, n, 1, lg[2]) == 0);
        spans += 2, swiglu_spans += fused ? 0 : 2;
        double diff = max_diff(lg[1], cl, (size_t)n * V), first = max_diff(lg[1], lg[0], (size_t)n * V);
        int again = memcmp(lg[1], lg[2], (size_t)n * V * sizeof(float)) == 0;
        char what[96];
        if (parts > 0)
            snprintf(what, sizeof what, "%s in %d parts%s", form[s], parts, fused ? "" : ", SwiGLU by k_swiglu");
        else
            snprintf(what, sizeof what, "the default's tiles, split by the tiles");
        fprintf(stderr,
                "%s: %d-row span by the grouped GEMM, %s: max diff %.3g (bound %.3g), %.3g from the first form's; "
                "%ld launches split; the same bits again: %s\n",
                preset, n, what, diff, bound, first, split, again ? "yes" : "no");
        /* forced: both products of every layer split */
        CHECK(diff <= bound && first <= bound && again && (parts < 0 || split == 2L * m.cfg.n_layers));
    }
    tb_gpu_set_moe_splits(g, TB_GPU_MOE_SPLIT_DEFAULT);
    int layers = m.cfg.n_layers; /* every one a MoE layer (these presets) */
    for (int s = 0; s < 5; s++)
        free(lg[s]);
    free(cl);
    free(tok);
    tb_cpu_state_free(&st);
    tb_gpu_free(g);
    tb_model_free(&m);
    /* the span forwards: each MoE layer's route, grouping and tiles once
     * (k_moe_route, k_moe_group, k_moe_tiles: the down product reuses
     * the gate-up's tiles); k_swiglu only where the epilogue did not run
     * (the first form, the three runs without the fusion, the split's
     * two) */
    const char *table = kprof_table(path);
    CHECK(table != NULL);
    if (table) {
        long sw = kprof_launches(table, "k_swiglu"), route = kprof_launches(table, "k_moe_route"),
             group = kprof_launches(table, "k_moe_group"), tiles = kprof_launches(table, "k_moe_tiles");
        fprintf(stderr,
                "%s: launches over the %d spans: k_swiglu %ld (want %d); k_moe_route %ld, k_moe_group %ld, "
                "k_moe_tiles %ld (want %d each)\n",
                preset, spans, sw, swiglu_spans * layers, route, group, tiles, spans * layers);
        CHECK(sw == swiglu_spans * layers && route == spans * layers && group == spans * layers &&
              tiles == spans * layers);
    }
    unlink(path);
}

/* The GPU against transformers' own logits (tests/data/golden/NAME,
 * expected.json: float32 on the CPU from the bf16 checkpoint), within the
 * GPU's bf16 bound. */
static void check_golden(const char *name)
{
    char dir[4200], path[4300], err[512];
    snprintf(dir, sizeof dir, "%s/golden/%s", root, name);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *text = tb_read_file(path, NULL);
    cJSON *exp = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(exp != NULL);
    tb_model m;
    tb_gpu *g;
    if (!exp || load_pair("golden", name, &m, &g) != 0) {
        cJSON_Delete(exp);
        return;
    }
    const cJSON *ids = cJSON_GetObjectItem(exp, "input_ids"), *want = cJSON_GetObjectItem(exp, "logits");
    int n = cJSON_GetArraySize(ids), V = m.cfg.vocab_size;
    int32_t tok[64];
    CHECK(n > 0 && n <= 64 && cJSON_GetArraySize(want) == n);
    for (int i = 0; i < n && i < 64; i++)
        tok[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valueint;
    CHECK(tb_gpu_reserve(g, 1, n, n, err, sizeof err) == 0);
    float *gl = malloc((size_t)n * V * sizeof(float));
    CHECK(tb_gpu_logits(g, tok, 1, 0, n, n, 1, gl) == 0);
    double ref = 0, diff = 0;
    int same = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *row = cJSON_GetArrayItem(want, i);
        CHECK(cJSON_GetArraySize(row) == V);
        int best = 0;
        for (int v = 0; v < V; v++) {
            double w = cJSON_GetArrayItem(row, v)->valuedouble, d = fabs(gl[(size_t)i * V + v] - w);
            ref = fmax(ref, fabs(w));
            diff = isnan(d) ? INFINITY : fmax(diff, d);
            if (w > cJSON_GetArrayItem(row, best)->valuedouble)
                best = v;
        }
        same += tb_argmax(gl + (size_t)i * V, V) == best;
    }
    fprintf(stderr, "%s: GPU against transformers' logits over %d positions: max |hf| %.3f, max diff %.3g (bound "
            "%.3g), argmax %d of %d equal\n", name, n, ref, diff, GPU_TOL * (ref > 1 ? ref : 1), same, n);
    CHECK(diff <= GPU_TOL * (ref > 1 ? ref : 1));
    free(gl);
    cJSON_Delete(exp);
    tb_gpu_free(g);
    tb_model_free(&m);
}

/* The MoE router at the published expert counts (LLaDA2.0-mini's 256 in
 * 8 groups, sigmoid scores with a choice bias): block diffusion against
 * the CPU with k_moe_router (forwards of up to TB_GPU_MOE_FUSE_ROWS rows:
 * the 8-row blocks of two sequences; the 32-row prefill by cuBLAS) and
 * again with cuBLAS, k_moe_route and k_moe_group throughout (TB_GPU_FUSION
 * without TB_GPU_FUSE_MOE_ROUTER). */
static void check_router(const char *name)
{
    char mask[16];
    check_block(name, 0);
    snprintf(mask, sizeof mask, "%d", TB_GPU_FUSE_DEFAULT & ~TB_GPU_FUSE_MOE_ROUTER);
    setenv("TB_GPU_FUSION", mask, 1);
    check_block(name, 0);
    unsetenv("TB_GPU_FUSION");
}

/* The decode logits of B sequences (1 or 2) of a context (fp8_mode's
 * dtype; fusion mask, FP8 GEMV variant, -1: per shape; the bf16 GEMV's
 * variant 0, so that no split-K rounding enters): prefill P tokens, then
 * N steps fed fixed tokens (not greedy: every run reads the same inputs).
 * Returns the logits [N][B][*V] (malloc'd) or NULL. */
static float *decode_logits(const char *name, int B, int fusion, int variant, int P, int N, int *V)
{
    char err[512];
    tb_model m;
    tb_gpu *g;
    if (B < 1 || B > 2 || P + N > 32 || load_pair("golden", name, &m, &g) != 0)
        return NULL;
    tb_gpu_set_decode_fusion(g, fusion, 0);
    tb_gpu_set_fp8_gemv(g, variant);
    tb_gpu_force_gemv_variant(g, 0);
    tb_gpu_set_attn_splits(g, att_splits);
    *V = m.cfg.vocab_size;
    float *out = malloc((size_t)N * B * *V * sizeof(float));
    int rc = out ? tb_gpu_reserve(g, B, P + N, B * P, err, sizeof err) : -1;
    int32_t prompt[2 * 32], step[2 * 32], next[2]; /* step[s][b]: sequence b's token at step s */
    uint64_t rng = 11;
    for (int i = 0; i < B * P; i++)
        prompt[i] = (int32_t)(tb_rng_uniform(&rng) * 500);
    for (int i = 0; i < B * N; i++)
        step[i] = (int32_t)(tb_rng_uniform(&rng) * 500);
    if (rc == 0)
        rc = tb_gpu_prefill(g, prompt, B, P, next, NULL);
    for (int s = 0; s < N && rc == 0; s++)
        rc = tb_gpu_decode(g, &step[s * B], B, out + (size_t)s * B * *V);
    tb_gpu_free(g);
    tb_model_free(&m);
    if (rc != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* The FP8 GEMV's claims, GPU against GPU: variants 0-4 round alike, and
 * each variant's SwiGLU epilogue computes what k_swiglu does (decode
 * logits equal to the bit: variants 0-4 to variant 0 unfused, with and
 * without it; a tensor-core variant (5-7: another order of the sum) to
 * itself unfused, and that within FP8_TOL of variant 0: as the CPU path,
 * an input's E4M3 rounding may move a step, check_fp8_products bounds
 * its sums); the fused RMSNorm within BF16_TOL of the largest logit (its
 * sum in another order may move an input's bf16 rounding by an ulp, and
 * that its E4M3 rounding by a step; a norm skipped moves the logits by
 * more than the largest). */
static void check_fp8_exact(const char *name)
{
    enum { P = 6, N = 8 };
    int V = 0;
    fp8_mode = 1;
    float *base = decode_logits(name, 1, 0, 0, P, N, &V);
    CHECK(base != NULL);
    for (int v = 0; v < TB_GPU_FP8_GEMV_VARIANTS && base; v++) {
        int alike = v < TB_GPU_FP8_GEMV_ROUNDING_ALIKE;
        float *own = alike ? base : decode_logits(name, 1, 0, v, P, N, &V);
        CHECK(own != NULL);
        if (!own)
            continue;
        size_t n = (size_t)N * V;
        double ref = max_abs(base, n);
        if (!alike) {
            double diff = 0;
            for (size_t i = 0; i < n; i++)
                diff = isnan(own[i]) ? INFINITY : fmax(diff, fabs(own[i] - base[i]));
            fprintf(stderr, "%s fp8 decode, variant %d (tensor cores) unfused against variant 0: max diff %.3g of "
                    "max |logit| %.3f\n", name, v, diff, ref);
            CHECK(diff <= FP8_TOL * (ref > 1 ? ref : 1));
        }
        for (int f = alike ? 0 : 1; f < 3; f++) {
            int mask = (int[]){0, TB_GPU_FUSE_SWIGLU, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_NORM}[f];
            float *other = decode_logits(name, 1, mask, v, P, N, &V);
            CHECK(other != NULL);
            if (!other)
                continue;
            double diff = 0;
            for (size_t i = 0; i < n; i++)
                diff = isnan(other[i]) ? INFINITY : fmax(diff, fabs(other[i] - own[i]));
            int exact = memcmp(own, other, n * sizeof(float)) == 0;
            fprintf(stderr, "%s fp8 decode, variant %d, fusion mask %d: %s (max diff %.3g of max |logit| %.3f)\n",
                    name, v, mask, exact ? (alike ? "identical to variant 0 unfused" : "identical to unfused")
                                         : "differs", diff, ref);
            if (mask & TB_GPU_FUSE_NORM)
                CHECK(diff <= BF16_TOL * (ref > 1 ? ref : 1));
            else
                CHECK(exact);
            free(other);
        }
        if (own != base)
            free(own);
    }
    free(base);
    fp8_mode = 0;
}

/* MoE decode (fp8_mode's dtype): the gate-up GEMV's SwiGLU epilogue
 * computes what k_swiglu does (TB_GPU_FUSE_SWIGLU), the down GEMV's
 * combine what k_moe_combine does (TB_GPU_FUSE_MOE_COMBINE): logits equal
 * to the bit, each alone and both, at batch 1 and 2 (two rows' pairs may
 * share an expert: block rows of the compact grid with none, which still
 * count). */
static void check_moe_fusions_exact(const char *name)
{
    enum { P = 6, N = 8 };
    /* the last: batch 1's down product and combine by k_moe_down1 (bf16;
     * batch 2 and fp8 keep k_moe_gemv's) */
    int masks[4] = {TB_GPU_FUSE_SWIGLU, TB_GPU_FUSE_MOE_COMBINE, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_MOE_COMBINE,
                    TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_MOE_COMBINE | TB_GPU_FUSE_MOE_DOWN1};
    fprintf(stderr, "-- %s: the MoE epilogues fused against not%s --\n", name, fp8_mode ? ", dtype fp8" : "");
    for (int B = 1; B <= 2; B++) {
        int V = 0;
        float *base = decode_logits(name, B, 0, -1, P, N, &V);
        CHECK(base != NULL);
        for (int i = 0; i < 4 && base; i++) {
            float *fused = decode_logits(name, B, masks[i], -1, P, N, &V);
            CHECK(fused != NULL);
            if (fused) {
                int exact = memcmp(base, fused, (size_t)N * B * V * sizeof(float)) == 0;
                fprintf(stderr, "%s decode, batch %d, fusion mask %d against 0: %s\n", name, B, masks[i],
                        exact ? "identical" : "differs");
                CHECK(exact);
            }
            free(fused);
        }
        free(base);
    }
}

/* TB_GPU_FUSE_ATTN_POST (fp8_mode's dtype): the batch-1 decode's
 * attention kernel computes its query heads and the new key and value as
 * k_qkv_post does (qkv_head, the same code), so the logits equal the
 * default's without it to the bit, and the cache it writes serves every later step
 * (N steps). Models: QKV bias (qwen2-bias, 4 heads a K/V head), QK-norm
 * (qwen3-moe, 2; tiny-qwen3-g8, 8: two blocks a K/V head, the second
 * of which reads the new row from its own copy), a plain group of 2
 * (llama-gqa); with 1, 2 and 16 parts of the keys (the new row in the
 * one part; parts of no key). */
static void check_attn_post_exact(void)
{
    enum { P = 6, N = 8 };
    const char *names[] = {"llama-gqa", "qwen2-bias", "qwen3-moe", "preset:tiny-qwen3-g8"};
    fprintf(stderr, "-- the QKV epilogue in the decode attention against k_qkv_post%s --\n",
            fp8_mode ? ", dtype fp8" : "");
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 4; s++) {
            att_splits = (int[]){0, 1, 2, 16}[s];
            int V = 0;
            float *base = decode_logits(names[i], 1, TB_GPU_FUSE_DEFAULT & ~TB_GPU_FUSE_ATTN_POST, -1, P, N, &V);
            float *post = decode_logits(names[i], 1, TB_GPU_FUSE_DEFAULT | TB_GPU_FUSE_ATTN_POST, -1, P, N, &V);
            CHECK(base && post);
            int exact = base && post && memcmp(base, post, (size_t)N * V * sizeof(float)) == 0;
            fprintf(stderr, "%s decode, splits %d: %s\n", names[i], att_splits, exact ? "identical" : "differs");
            CHECK(exact);
            free(base);
            free(post);
        }
    att_splits = 0;
}

/* TB_GPU_FUSE_ATTN_POST's checks: the fused decode against the CPU
 * (batch 1 with and without PDL, continuous batching, the group of 8),
 * then against the default to the bit, bf16 and fp8 */
static void check_attn_post(void)
{
    const int post = TB_GPU_FUSE_DEFAULT | TB_GPU_FUSE_ATTN_POST;
    check_ar_with("llama-gqa", 0, 1, post, 0);
    check_ar_with("llama-gqa", 0, 1, post, 1);
    check_ar_with("qwen2-bias", 0, 1, post, 1);
    check_ar_with("preset:tiny-qwen3-g8", 0, 1, post, 0);
    check_ar_with("qwen3-moe", 0, 1, post, 0);
    check_ar_slots("qwen2-bias", post);
    rope_dim_set = 6; /* 3 pairs a head: qkv_head's one-pair-a-lane path */
    check_ar_with("llama-gqa", 0, 1, post, 0);
    rope_dim_set = 0;
    check_attn_post_exact();
    fp8_mode = 1;
    check_ar_with("llama-gqa", 0, 1, post, 0);
    check_attn_post_exact();
    fp8_mode = 0;
}

/* TB_GPU_FUSE_MOE_NORM: the fused router makes the MLP's RMSNorm of
 * its row itself at batch 1 (k_rmsnorm's arithmetic, the sum of squares
 * in another order, so against the CPU as every forward): Qwen3-MoE
 * decode at batch 1, and at 2 (left padding) where k_rmsnorm stays;
 * LLaDA 2.x's blocks (sigmoid router with groups and bias; 256 experts;
 * the shared expert), whose spans keep k_rmsnorm; bf16 and fp8. With and
 * without MOE_DOWN1 (bf16; in the default), also on tiny-qwen3-moe-wide
 * (hidden 200, experts 1,056 wide, 8 of 8 chosen: every bound of
 * k_moe_down1 and the router) */
static void check_moe_norm(void)
{
    const int f = TB_GPU_FUSE_DEFAULT | TB_GPU_FUSE_MOE_NORM;
    char mask[16];
    snprintf(mask, sizeof mask, "%d", f);
    for (fp8_mode = 0; fp8_mode <= 1; fp8_mode++) {
        check_ar_with("qwen3-moe", 0, 1, f, 0);
        if (!fp8_mode) { /* without k_moe_down1 (in the default; bf16 only); the wide one's 200 is no FP8 GEMV's width */
            check_ar_with("qwen3-moe", 0, 1, f & ~TB_GPU_FUSE_MOE_DOWN1, 0);
            check_ar_with("preset:tiny-qwen3-moe-wide", 0, 1, f & ~TB_GPU_FUSE_MOE_DOWN1, 0);
            check_ar_with("preset:tiny-qwen3-moe-wide", 0, 1, f, 0);
        }
        check_ar_with("qwen3-moe", 3, 2, f, 0);
        setenv("TB_GPU_FUSION", mask, 1);
        check_block("tiny-llada2", 0);
        check_block("tiny-llada2-wide", 0);
        unsetenv("TB_GPU_FUSION");
    }
    fp8_mode = 0;
}

/* dtype = fp8 (issue 20) on the dense models (also TB_TEST_GPU_ONLY=fp8's
 * run): the device's codes equal the CPU's; then each product against the
 * CPU's; then the forwards against the CPU's FP8 path (round_fp8): batch
 * 1 reads the codes with the FP8 GEMV (decode; fused as each mask says),
 * prefill and batch 2 with the FP8 GEMM. Leaves fp8_mode 0. */
static void check_fp8_dense(void)
{
    fprintf(stderr, "-- dtype fp8 --\n");
    check_fp8_codes("llama-gqa");
    check_fp8_codes("qwen2-bias");
    check_fp8_products("llama-gqa");
    check_fp8_products("qwen2-bias");
    fp8_mode = 1;
    check_ar_with("llama-gqa", 0, 1, TB_GPU_FUSE_DEFAULT, TB_GPU_PDL_DEFAULT);
    check_ar_with("llama-gqa", 0, 1, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_SPLIT_ATTN | TB_GPU_FUSE_NORM, 1);
    check_ar("llama-gqa", 0);
    check_ar("qwen2-bias", 3);
    check_ar_with("llama-tied", 0, 1, 0, 0);
    /* the other FP8 GEMV shapes, batch 1, alone and with both fusions
     * (a one-row shape's SwiGLU takes its two-row form) */
    for (fp8_gemv = 0; fp8_gemv < TB_GPU_FP8_GEMV_VARIANTS; fp8_gemv++)
        if (fp8_gemv != TB_GPU_FP8_GEMV_DEFAULT) {
            check_ar_with("llama-gqa", 0, 1, 0, 0);
            check_ar_with("llama-gqa", 0, 1, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_NORM, 0);
        }
    fp8_gemv = TB_GPU_FP8_GEMV_DEFAULT;
    check_ar_slots("llama-gqa", TB_GPU_FUSE_DEFAULT);
    check_diffusion("llada-tiny", 0);
    check_diffusion("dream-tiny", 1);
    check_diffusion_padded("llada-tiny", 7);
    check_block("tiny-sdar", 0);
    fp8_mode = 0;
    check_fp8_exact("llama-gqa");
    check_fp8_exact("qwen2-bias");
}

/* TB_GPU_KERNEL_PROFILE (gpu_kprof.h): the table of a tiny model's
 * prefill and N graph-replayed decode steps counts each kernel launch:
 * k_incr runs once a decode step (only in the decode graph), k_argmax
 * once a step and once after the prefill; nothing of the load's
 * calibration or of the ceilings' measurement (its k_init_uniform);
 * busy time within the span. Two contexts at once write one
 * table when the second ends. */

static void check_kernel_profile(void)
{
    char path[128], err[256];
    snprintf(path, sizeof path, "/tmp/tb-kprof-%d.tsv", (int)getpid());
    unlink(path);
    setenv("TB_GPU_KERNEL_PROFILE", path, 1);
    tb_model_config cfg;
    tb_gpu *g = NULL, *h = NULL;
    enum { N = 7, P = 5 };
    int32_t toks[P] = {1, 2, 3, 4, 5}, next[1];
    CHECK(tb_preset_config("tiny-llama", &cfg, err, sizeof err) == 0);
    CHECK(tb_gpu_create(&g, &cfg, NULL, 1, err, sizeof err) == 0);
    CHECK(tb_gpu_create(&h, &cfg, NULL, 2, err, sizeof err) == 0);
    if (!g || !h) {
        tb_gpu_free(g), tb_gpu_free(h);
        unsetenv("TB_GPU_KERNEL_PROFILE");
        return;
    }
    CHECK(tb_gpu_reserve(g, 1, P + N + 1, P, err, sizeof err) == 0);
    CHECK(tb_gpu_prefill(g, toks, 1, P, next, NULL) == 0);
    double peak_flops = 0, peak_bytes = 0; /* its kernels (k_init_uniform, a GEMM) are left out */
    CHECK(tb_gpu_measure_ceilings(g, &peak_flops, &peak_bytes) == 0);
    for (int i = 0; i < N; i++)
        CHECK(tb_gpu_decode(g, next, 1, NULL) == 0);
    tb_gpu_free(g);
    struct stat st;
    CHECK(stat(path, &st) != 0); /* h still runs: no table yet */
    tb_gpu_free(h);
    const char *table = kprof_table(path);
    CHECK(table != NULL);
    if (table) {
        long incr = kprof_launches(table, "k_incr"), argmax = kprof_launches(table, "k_argmax");
        fprintf(stderr, "kernel profile: k_incr %ld launches (want %d), k_argmax %ld (want %d)\n", incr, N, argmax,
                N + 1);
        CHECK(incr == N);
        CHECK(argmax == N + 1);
        CHECK(strstr(table, "\tk_init_uniform") == NULL); /* the ceilings' measurement */
        /* the second line: "# L launches, B ms of kernel time over a span of S ms ..." */
        double busy = 0, span = 0;
        long all = 0;
        const char *hdr = strstr(table, "\n# ");
        CHECK(hdr && sscanf(hdr, "\n# %ld launches, %lf ms of kernel time over a span of %lf ms", &all, &busy,
                            &span) == 3);
        CHECK(all >= incr + argmax);
        CHECK(busy > 0 && busy <= span);
        CHECK(strstr(table, "tiny-llama") != NULL || strstr(table, "LlamaForCausalLM") != NULL);
    }
    unlink(path);
    unsetenv("TB_GPU_KERNEL_PROFILE");
}

int main(void)
{
    char why[256];
    if (tb_gpu_probe(why, sizeof why) != 0) {
        fprintf(stderr, "skip: %s\n", why);
        return 77;
    }
    const char *src = getenv("TB_SOURCE_ROOT");
    snprintf(root, sizeof root, "%s/tests/data", src ? src : ".");
    /* TB_TEST_GPU_ONLY=span: the span attention checks alone (a planted
     * bug's run, a kernel's iteration) */
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "span") == 0) {
        check_span_attention();
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "flow") == 0) { /* the flow backend */
        check_flow();
        check_flow_fused();
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "kprof") == 0) {
        check_kernel_profile();
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "decode") == 0) {
        check_decode_attention(128, 4);
        check_decode_attention(64, 2);
        check_decode_attention(128, 8);
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "post") == 0) { /* TB_GPU_FUSE_ATTN_POST */
        check_attn_post();
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "moenorm") == 0) { /* TB_GPU_FUSE_MOE_NORM */
        check_moe_norm();
        check_moe_fusions_exact("qwen3-moe");
        check_moe_fusions_exact("preset:tiny-qwen3-moe-wide");
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "fp8") == 0) { /* dense models under dtype = fp8 */
        check_fp8_dense();
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "moe-fp8") == 0) { /* MoE under dtype = fp8 */
        check_moe(1);
        fp8_mode = 1;
        check_moe_fusions_exact("qwen3-moe");
        check_ar("qwen3-moe", 0);
        check_ar("qwen3-moe", 3);
        check_block("tiny-llada2", 0);
        setenv("TB_GPU_FP8_GEMM", "0", 1);
        check_ar("qwen3-moe", 3);
        check_block("tiny-llada2", 0);
        unsetenv("TB_GPU_FP8_GEMM");
        fp8_mode = 0;
        return check_done();
    }
    if (getenv("TB_TEST_GPU_ONLY") && strcmp(getenv("TB_TEST_GPU_ONLY"), "moe") == 0) { /* MoE against the CPU and HF */
        check_ar("qwen3-moe", 0);
        check_ar("qwen3-moe", 3);
        check_golden("qwen3-moe");
        check_diffusion("llada-moe-tiny", 0);
        check_block("tiny-llada2", 0);
        check_router("tiny-llada2-wide");
        check_moe(0); /* the three expert paths, the roofline's count, the poisoned experts */
        check_moe_tiles("tiny-qwen3-moe-wide", 32);
        check_moe_tiles("tiny-qwen3-moe", 16);
        check_ar_with("qwen3-moe", 0, 1, 0, 0);
        check_moe_fusions_exact("qwen3-moe");
        return check_done();
    }
    /* the batch-1 GEMV against the bandwidth it is bound by (a
     * Llama-3-8B gate-up matrix: 28672 x 4096 bf16 = 235 MB) */
    {
        tb_model_config cfg;
        char err[256];
        if (tb_preset_config("tiny-llama", &cfg, err, sizeof err) == 0) {
            tb_gpu *g = NULL;
            if (tb_gpu_create(&g, &cfg, NULL, 1, err, sizeof err) == 0) {
                double gbs[TB_GPU_GEMV_VARIANTS];
                /* Llama-3-8B's shapes: qkv, o, gate-up, down */
                int shapes[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
                double best = 0;
                for (int i = 0; i < 4; i++) {
                    best = tb_gpu_bench_gemv(g, shapes[i][0], shapes[i][1], gbs);
                    fprintf(stderr, "gemv %dx%d bf16: variants", shapes[i][0], shapes[i][1]);
                    for (int v = 0; v < TB_GPU_GEMV_VARIANTS; v++)
                        fprintf(stderr, " %.0f", gbs[v]);
                    fprintf(stderr, " GB/s, best %.0f\n", best);
                    CHECK(best > 0);
                }
                CHECK(best > 0);
                /* The energy meter: GEMVs for 12 counter periods (~1.2 s on
                 * the H200); the average power it implies must be a power
                 * this card can draw (idle ~70-100 W, limit 700 W). */
                char bus[32], why[200] = "";
                tb_energy *e = tb_gpu_pci_bus_id(g, bus, sizeof bus) == 0 ? tb_energy_open(bus, why, sizeof why) : NULL;
                if (!e) {
                    fprintf(stderr, "energy: no meter (%s)\n", why);
                } else {
                    struct timespec a, b;
                    clock_gettime(CLOCK_MONOTONIC, &a);
                    int64_t e0 = tb_energy_read_mj(e), ns = 0;
                    while (ns < (int64_t)(12 * TB_ENERGY_MIN_PERIODS / 10.0 * tb_energy_period_ms(e) * 1e6)) {
                        tb_gpu_bench_gemv(g, 28672, 4096, gbs);
                        clock_gettime(CLOCK_MONOTONIC, &b);
                        ns = (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
                    }
                    int64_t mj = tb_energy_of_call(e, e0, tb_energy_read_mj(e), ns);
                    double watts = mj / 1e3 / (ns / 1e9);
                    fprintf(stderr, "energy: counter period %.1f ms; %lld mJ over %.3f s of GEMVs = %.0f W\n",
                            tb_energy_period_ms(e), (long long)mj, ns / 1e9, watts);
                    CHECK(mj > 0 && watts > 30 && watts < 1000);
                    tb_energy_close(e);
                }
                tb_gpu_free(g);
            }
        }
    }
    check_memory();
    check_ar("llama-gqa", 0);
    /* batch 1: the fused GEMVs (RMSNorm, SwiGLU), split attention, PDL;
     * and the unfused kernels they replace */
    const int all = TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_SPLIT_ATTN | TB_GPU_FUSE_NORM;
    check_ar_with("llama-gqa", 0, 1, TB_GPU_FUSE_DEFAULT, TB_GPU_PDL_DEFAULT);
    check_ar_with("llama-gqa", 0, 1, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_SPLIT_ATTN, 1);
    check_ar_with("llama-gqa", 0, 2, TB_GPU_FUSE_SPLIT_ATTN, 1);
    check_ar_with("llama-gqa", 0, 1, all, 1);
    check_ar_with("llama-gqa", 0, 1, all, 0);
    check_ar_with("llama-gqa", 0, 1, 0, 0);
    check_ar_with("llama-gqa", 0, 2, 0, 0);
    /* every bf16 GEMV variant at batch 1 (split-K among them), fused
     * (gate-up keeps a non-split shape), unfused (gate-up split too), and
     * with the norm in the residual GEMVs' last block (split-K or not) */
    for (gemv_forced = 0; gemv_forced < TB_GPU_GEMV_VARIANTS; gemv_forced++) {
        check_ar_with("llama-gqa", 0, 1, TB_GPU_FUSE_DEFAULT, 0);
        check_ar_with("llama-gqa", 0, 1, all, 0);
        if (gemv_forced >= 4)
            check_ar_with("llama-gqa", 0, 1, 0, 0);
    }
    gemv_forced = -1;
    /* split decode attention with 1, 2 and 16 splits: one block per
     * pair (no combine), and splits holding padding only (l = 0) */
    for (int i = 0; i < 3; i++) {
        att_splits = (int[]){1, 2, 16}[i];
        check_ar_with("llama-gqa", 0, 1, TB_GPU_FUSE_SPLIT_ATTN, 0);
        check_ar_with("llama-gqa", 5, 2, TB_GPU_FUSE_SPLIT_ATTN, 0);
    }
    att_splits = 0;
    check_ar_with("qwen2-bias", 0, 1, all, 1);
    check_ar_with("llama-tied", 0, 1, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_SPLIT_ATTN, 1);
    check_ar_with("qwen3-moe", 0, 1, all, 1);
    check_ar("llama-tied", 0);
    check_ar("qwen2-bias", 0);
    check_ar("llama-gqa", 5); /* left padding: masked keys, shifted RoPE */
    check_ar("qwen2-bias", 3);
    rope_dim_set = 6; /* 3 pairs a head: k_qkv_post's one-pair-a-lane path */
    check_ar("llama-gqa", 3);
    rope_dim_set = 0;
    check_ar_slots("llama-gqa", TB_GPU_FUSE_DEFAULT);
    check_ar_slots("qwen2-bias", TB_GPU_FUSE_DEFAULT);
    /* decode attention's kernels alone at the head dims the group kernel
     * is built for; then by query group (k_attn_decode_gqa: 2 and 4 heads
     * per K/V head) in forwards, without the split kernel: slots, padding */
    check_decode_attention(128, 4);
    check_decode_attention(64, 2);
    check_decode_attention(256, 4);
    check_decode_attention(16, 4);
    check_decode_attention(32, 2);
    check_decode_attention(128, 8); /* two blocks of 4 a K/V head (Qwen3-30B-A3B's group) */
    check_products();
    check_ar_slots("llama-gqa", 0);
    check_ar_slots("qwen2-bias", 0);
    check_ar_with("qwen2-bias", 0, 2, 0, 0);
    check_ar_with("llama-gqa", 5, 2, 0, 0);
    check_ar_with("qwen2-bias", 3, 2, TB_GPU_FUSE_SWIGLU, 0);
    check_flow();
    check_flow_fused();
    check_diffusion("llada-tiny", 0);
    check_diffusion("dream-tiny", 1);
    check_diffusion_padded("llada-tiny", 7);
    check_diffusion_sampling("llada-tiny", 0);
    check_diffusion_sampling("dream-tiny", 1);
    check_trim_last("llada-tiny", 0);
    check_trim_last("dream-tiny", 1);
    check_kernel_profile();
    check_span_attention();
    /* the same spans by batched GEMMs around the softmax kernel (head_dim
     * the fused kernel lacks, or TB_GPU_SPAN_ATTN=0); then also with the
     * QKV and gate-up products as float (TB_GPU_BF16_OUT=0); then those
     * with the one-kernel attention */
    setenv("TB_GPU_SPAN_ATTN", "0", 1);
    check_span_widths("llada-tiny");
    check_span_masks("golden", "llama-gqa");
    check_span_masks("golden/block-diffusion", "sdar-tiny");
    check_ar("llama-gqa", 5);
    check_diffusion_padded("llada-tiny", 7);
    check_block("tiny-sdar", 0);
    setenv("TB_GPU_BF16_OUT", "0", 1);
    check_ar("llama-gqa", 5);
    check_diffusion_padded("llada-tiny", 7);
    unsetenv("TB_GPU_SPAN_ATTN");
    check_span_masks("golden", "llama-gqa");
    check_block("tiny-sdar", 0);
    unsetenv("TB_GPU_BF16_OUT");
    /* LLaDA-MoE (issue 22): the published-code golden model and the preset */
    check_diffusion("llada-moe-tiny", 0);
    check_diffusion_padded("llada-moe-tiny", 5);
    check_diffusion_sampling("llada-moe-tiny", 0);
    check_diffusion("preset:tiny-llada-moe", 0);
    check_diffusion_padded("preset:tiny-llada-moe", 7);
    check_block("tiny-qwen3", 0);
    check_block("tiny-sdar", 0);
    check_block("tiny-fast-dllm-v2", 1);
    /* LLaDA 2.x (issue 22): partial rotary, the sigmoid router with its
     * expert bias and groups, the shared expert */
    check_block("tiny-llada2", 0);
    check_diffusion("preset:tiny-llada2", 0);
    check_router("tiny-llada2-wide");
    /* mixture of experts (issue 22) */
    check_ar("qwen3-moe", 0);
    check_ar("qwen3-moe", 3);
    check_ar_slots("qwen3-moe", TB_GPU_FUSE_DEFAULT);
    check_golden("qwen3-moe");
    check_moe(0);
    check_moe_tiles("tiny-qwen3-moe-wide", 32); /* the grouped GEMM's tile forms, to the bit */
    check_moe_tiles("tiny-qwen3-moe", 16);
    check_ar_with("qwen3-moe", 0, 1, 0, 0);
    check_moe_fusions_exact("qwen3-moe");
    check_attn_post();
    check_moe_norm();
    check_moe_fusions_exact("preset:tiny-qwen3-moe-wide"); /* every bound of the batch-1 MoE kernels */
    check_fp8_dense();
    fp8_mode = 1;
    /* mixture of experts (the experts' and shared experts' codes; the
     * router bf16): both expert paths, the roofline's bytes; forwards
     * against the CPU; LLaDA 2.x's shared experts and dense first layer */
    check_moe(1);
    check_moe_fusions_exact("qwen3-moe");
    check_ar("qwen3-moe", 0);
    check_ar("qwen3-moe", 3);
    check_block("tiny-llada2", 0);
    /* spans through the bf16 GEMM over dequantized codes (a device
     * without FP8 GEMMs, or TB_GPU_FP8_GEMM=0; the experts then by the
     * FP8 GEMV at any length) */
    setenv("TB_GPU_FP8_GEMM", "0", 1);
    check_ar("qwen2-bias", 3);
    check_ar("qwen3-moe", 3);
    check_block("tiny-llada2", 0);
    check_diffusion("llada-tiny", 0);
    unsetenv("TB_GPU_FP8_GEMM");
    fp8_mode = 0;
    return check_done();
}
