/* test_tp.c — tensor parallelism on the GPU (gpu.h's tb_gpu_create_tp,
 * gpu_tp.cu) against the one-device path. Exit 77 (skip) without a CUDA
 * device or without NCCL (this build's, or libnccl.so.2 at run time).
 *
 *   tp = 1 through NCCL (one rank: the residual kept on rank 0, the
 *   all-reduces over one device, the head whole) must equal the ordinary
 *   context bit for bit: logits of spans, prefill and the CUDA-graph decode
 *   steps (greedy tokens and logits, with and without the batch-1 fused
 *   GEMVs), the diffusion picks and confidences; from a CPU model and from
 *   a preset's random weights.
 *   tp = N > 1 (when the host has N devices): the same within the bf16
 *   bound of test_gpu.c (GPU_TOL: the row-parallel sums add in another
 *   order), greedy tokens equal where tp = 1's top-1/top-2 margin exceeds
 *   the bound; otherwise a line says which tp was not run.
 *   The refusals: tp above the device count, a split tp_split.h refuses. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu_tune.h"
#include "model.h"
#include "safetensors.h"
#include "sampling.h"
#include "util.h"

#define GPU_TOL 2e-2

static char root[4096];
static int n_devices;

static void round_to_bf16(tb_model *m)
{
    for (size_t i = 0; i < m->arena_floats; i++)
        m->arena[i] = tb_bf16_to_f32(tb_f32_to_bf16(m->arena[i]));
}

/* tp 0: an ordinary context; else a group of tp ranks. NULL after a
 * failed check. */
static tb_gpu *make(const tb_model_config *cfg, const tb_model *m, int tp)
{
    char err[512];
    tb_gpu *g = NULL;
    int rc = tp == 0 ? tb_gpu_create(&g, cfg, m, 7, err, sizeof err)
                     : tb_gpu_create_tp(&g, cfg, m, 7, tp, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "tp %d: %s\n", tp, err);
        CHECK(0);
        return NULL;
    }
    CHECK(tb_gpu_tp_size(g) == tp);
    return g;
}

/* |a - b| within the bound (exact: bit for bit) over n floats */
static int close_enough(const float *a, const float *b, size_t n, int exact, double *diff_out)
{
    if (exact) {
        *diff_out = memcmp(a, b, n * sizeof(float)) == 0 ? 0 : INFINITY;
        return *diff_out == 0;
    }
    double ref = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        ref = fabs(a[i]) > ref ? fabs(a[i]) : ref;
        diff = fabs(a[i] - b[i]) > diff ? fabs(a[i] - b[i]) : diff;
    }
    *diff_out = diff;
    return diff <= GPU_TOL * (ref > 1 ? ref : 1);
}

/* max(1, max |x|) over a logits row: the scale of the bound */
static double max1(const float *x, int V)
{
    double m = 1;
    for (int v = 0; v < V; v++)
        m = fabs(x[v]) > m ? fabs(x[v]) : m;
    return m;
}

/* the top-1/top-2 margin of a logits row */
static double gap_of(const float *x, int V)
{
    int b = tb_argmax(x, V);
    float second = -INFINITY;
    for (int v = 0; v < V; v++)
        if (v != b && x[v] > second)
            second = x[v];
    return x[b] - second;
}

/* a (the reference) against b: autoregressive spans, prefill and decode */
static void compare_ar(const char *what, tb_gpu *a, tb_gpu *b, const tb_model_config *c, int exact, int B,
                       int fusion, int pdl)
{
    char err[512];
    int V = c->vocab_size, P = 12, N = 12;
    tb_gpu *g[2] = {a, b};
    int32_t prompt[2 * 12], next[2][2];
    float *lg[2];
    uint64_t rng = 11;
    for (int i = 0; i < B * P; i++)
        prompt[i] = (int32_t)(tb_rng_uniform(&rng) * (V - 8));
    for (int k = 0; k < 2; k++) {
        CHECK(tb_gpu_reserve(g[k], B, P + N + 1, B * P, err, sizeof err) == 0);
        tb_gpu_set_decode_fusion(g[k], fusion, pdl);
        lg[k] = malloc((size_t)B * P * V * sizeof(float));
        CHECK(tb_gpu_logits(g[k], prompt, B, 0, P, P, 1, lg[k]) == 0);
    }
    double diff;
    int ok = close_enough(lg[0], lg[1], (size_t)B * P * V, exact, &diff);
    fprintf(stderr, "%s: causal span logits, B %d: max diff %.3g (%s)\n", what, B, diff, exact ? "exact" : "bound");
    CHECK(ok);
    int steps_same = 1, clear = 0, logits_ok = 1;
    double worst = 0;
    for (int s = 0; s <= N; s++) {
        for (int k = 0; k < 2; k++) {
            int rc = s == 0 ? tb_gpu_prefill(g[k], prompt, B, P, next[k], lg[k]) : tb_gpu_decode(g[k], next[k], B, lg[k]);
            CHECK(rc == 0);
            if (rc)
                fprintf(stderr, "%s\n", tb_gpu_error(g[k]));
        }
        logits_ok &= close_enough(lg[0], lg[1], (size_t)B * V, exact, &diff);
        worst = diff > worst ? diff : worst;
        for (int r = 0; r < B; r++) {
            if (exact || gap_of(lg[0] + (size_t)r * V, V) > GPU_TOL * max1(lg[0] + (size_t)r * V, V)) {
                clear++;
                steps_same &= next[0][r] == next[1][r];
            }
            next[1][r] = next[0][r]; /* both continue from the reference's token */
        }
    }
    fprintf(stderr, "%s: prefill + %d graph decode steps, B %d, fusion %d, PDL %d: max logit diff %.3g, %d clear "
            "greedy tokens %s\n", what, N, B, fusion, pdl, worst, clear, steps_same ? "equal" : "DIFFER");
    CHECK(logits_ok);
    CHECK(steps_same);
    CHECK(clear > 0);
    free(lg[0]);
    free(lg[1]);
}

/* a against b: a diffusion canvas's picks (every confidence kind) */
static void compare_diffusion(const char *what, tb_gpu *a, tb_gpu *b, const tb_model_config *c, int exact)
{
    char err[512];
    enum { L = 40 };
    int V = c->vocab_size;
    int32_t canvas[L], x0[2][L];
    double conf[2][L];
    uint64_t rng = 3;
    for (int i = 0; i < L; i++)
        canvas[i] = i < 8 || i % 3 == 0 ? (int32_t)(tb_rng_uniform(&rng) * (V - 16)) : c->mask_id;
    tb_gpu *g[2] = {a, b};
    for (int k = 0; k < 2; k++)
        CHECK(tb_gpu_reserve(g[k], 1, L, L, err, sizeof err) == 0);
    for (int kind = 0; kind < 4; kind++) {
        for (int k = 0; k < 2; k++)
            CHECK(tb_gpu_forward_pick(g[k], canvas, 1, 1, L, 0, L, L, 0, L, kind, 0, 0, x0[k], conf[k]) == 0);
        int same = 0;
        double worst = 0;
        for (int i = 0; i < L; i++) {
            same += x0[0][i] == x0[1][i];
            worst = fabs(conf[0][i] - conf[1][i]) > worst ? fabs(conf[0][i] - conf[1][i]) : worst;
        }
        fprintf(stderr, "%s: diffusion picks, kind %d: %d of %d tokens equal, max confidence diff %.3g\n", what, kind,
                same, L, worst);
        if (exact) {
            CHECK(same == L);
            CHECK(memcmp(conf[0], conf[1], sizeof conf[0]) == 0);
        } else {
            CHECK(same >= L * 9 / 10); /* near-ties may flip; most must not */
            CHECK(worst < (kind == 3 ? 0.5 : 0.1));
        }
    }
}

static int load(const char *sub, const char *name, tb_model *m)
{
    char dir[8192], err[512];
    snprintf(dir, sizeof dir, "%s/%s/%s", root, sub, name);
    if (tb_model_load(dir, m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        return -1;
    }
    round_to_bf16(m);
    return 0;
}

/* tp = 1 through NCCL against the ordinary context (exact), then tp = 2
 * and 4 against tp = 1 where the host has the devices. */
static void check_model(const char *sub, const char *name, int diffusion)
{
    tb_model m;
    if (load(sub, name, &m) != 0)
        return;
    tb_gpu *plain = make(&m.cfg, &m, 0), *one = make(&m.cfg, &m, 1);
    if (plain && one) {
        char what[160];
        snprintf(what, sizeof what, "%s tp 1 (NCCL) vs one device", name);
        if (diffusion) {
            compare_diffusion(what, plain, one, &m.cfg, 1);
        } else {
            compare_ar(what, plain, one, &m.cfg, 1, 2, 0, 0);
            compare_ar(what, plain, one, &m.cfg, 1, 1, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_SPLIT_ATTN, 1);
        }
        for (int tp = 2; tp <= 4; tp *= 2) {
            if (tp > n_devices) {
                fprintf(stderr, "%s: tp %d not run: this host has %d CUDA device%s\n", name, tp, n_devices,
                        n_devices == 1 ? "" : "s");
                continue;
            }
            tb_gpu *many = make(&m.cfg, &m, tp);
            if (!many)
                continue;
            snprintf(what, sizeof what, "%s tp %d vs tp 1", name, tp);
            if (diffusion) {
                compare_diffusion(what, one, many, &m.cfg, 0);
            } else {
                compare_ar(what, one, many, &m.cfg, 0, 2, 0, 0);
                compare_ar(what, one, many, &m.cfg, 0, 1, TB_GPU_FUSE_SWIGLU | TB_GPU_FUSE_SPLIT_ATTN, 1);
            }
            tb_gpu_free(many);
        }
    }
    tb_gpu_free(plain);
    tb_gpu_free(one);
    tb_model_free(&m);
}

int main(void)
{
    char why[512];
    if (tb_gpu_probe(why, sizeof why) != 0) {
        fprintf(stderr, "skip: %s\n", why);
        return 77;
    }
    const char *src = getenv("TB_SOURCE_ROOT");
    snprintf(root, sizeof root, "%s/tests/data", src ? src : ".");
    tb_model_config cfg;
    CHECK(tb_preset_config("tiny-llama", &cfg, why, sizeof why) == 0);
    tb_gpu *g = NULL;
    /* can this build and host run the NCCL path at all? */
    if (tb_gpu_create_tp(&g, &cfg, NULL, 1, 1, why, sizeof why) != 0) {
        if (strstr(why, "NCCL")) {
            fprintf(stderr, "skip: %s\n", why);
            return 77;
        }
        fprintf(stderr, "tp 1: %s\n", why);
        CHECK(0);
        return check_done();
    }
    tb_gpu_free(g);
    n_devices = tb_gpu_device_count();
    fprintf(stderr, "%d CUDA device%s\n", n_devices, n_devices == 1 ? "" : "s");
    /* refusals, with the reason */
    {
        int over = 1; /* the smallest tp above the device count that tp_split.h accepts */
        while (over <= n_devices || cfg.n_heads % over || cfg.intermediate_size % over)
            over *= 2;
        if (over <= cfg.n_heads) {
            CHECK(tb_gpu_create_tp(&g, &cfg, NULL, 1, over, why, sizeof why) != 0);
            fprintf(stderr, "tp %d: %s\n", over, why);
            CHECK(strstr(why, "CUDA device") != NULL);
        }
        CHECK(tb_gpu_create_tp(&g, &cfg, NULL, 1, 3, why, sizeof why) != 0);
        fprintf(stderr, "tp 3: %s\n", why);
        CHECK(strstr(why, "does not divide") != NULL);
        CHECK(tb_gpu_create_tp(&g, &cfg, NULL, 1, 0, why, sizeof why) != 0);
        CHECK(g == NULL);
    }
    /* a preset's random weights: tp = 1 draws the ordinary context's */
    {
        cfg.tie_word_embeddings = 0;
        tb_gpu *plain = make(&cfg, NULL, 0), *one = make(&cfg, NULL, 1);
        if (plain && one)
            compare_ar("preset tiny-llama (random, untied) tp 1 vs one device", plain, one, &cfg, 1, 2, 0, 0);
        tb_gpu_free(plain);
        tb_gpu_free(one);
    }
    check_model("golden", "llama-gqa", 0);
    check_model("golden", "qwen2-bias", 0);
    check_model("golden-diffusion", "llada-tiny", 1);
    return check_done();
}
