/* test_dflash_gpu.c — DFlash's drafter on the GPU (gpu_dflash.h) against
 * the CPU drafter (dflash.h, itself golden-tested in
 * tests/engine/test_dflash.c). Exit 77 (skip) without a CUDA device.
 *
 * Both run the same bf16-rounded weights of the tiny-llama target and the
 * tiny-dflash drafter (presets), and, when tests/data/golden-dflash exists,
 * of the golden target and drafter. The GPU keeps bf16 activations at
 * GEMM inputs (the features too), so logits agree within BF16_TOL x
 * max(1, max |cpu|); drafts must agree wherever the CPU's top-1/top-2
 * margin exceeds that bound. Checked: a block after one append, after
 * appends in pieces and a rollback, a batch of two slots (one of 300
 * context rows: chunked appends), and features given in device memory
 * equal to the same features from the host. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "dflash.h"
#include "gpu.h"
#include "gpu_dflash.h"
#include "model.h"
#include "safetensors.h"

#define BF16_TOL 2e-2

static void round_to_bf16(tb_model *m)
{
    for (size_t i = 0; i < m->arena_floats; i++)
        m->arena[i] = tb_bf16_to_f32(tb_f32_to_bf16(m->arena[i]));
}

static void fill(float *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 4.0f;
    }
}

/* CPU logits [L][V] of a block against the GPU's drafts [L - 1]: a draft
 * may differ only where the CPU's margin is within tol. */
static int drafts_agree(const float *cpu, int L, int V, const int32_t *gpu, double tol)
{
    int bad = 0;
    for (int r = 1; r < L; r++) {
        const float *row = cpu + (size_t)r * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            best = row[v] > row[best] ? v : best;
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != best && row[v] > second)
                second = row[v];
        if (gpu[r - 1] != best && row[best] - second > tol) {
            fprintf(stderr, "row %d: gpu draft %d, cpu %d (margin %.4g > %.4g)\n", r, gpu[r - 1], best,
                    row[best] - second, tol);
            bad++;
        }
    }
    return bad == 0;
}

static void check_pair(const char *name, tb_model *t, tb_model *d)
{
    char err[512];
    round_to_bf16(t);
    round_to_bf16(d);
    int V = t->cfg.vocab_size, Lb = d->cfg.block_size, F = d->cfg.n_target_ids * d->cfg.hidden_size, N = 300;
    tb_gpu *gt = NULL;
    tb_gpu_dflash *gd = NULL;
    if (tb_gpu_create_dtype(&gt, &t->cfg, t, 0, 0, err, sizeof err) != 0 ||
        tb_gpu_dflash_create(&gd, gt, &t->cfg, NULL, d, 0, 2, 400, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        CHECK(0);
        if (gt)
            tb_gpu_free(gt);
        return;
    }
    tb_dflash_state cs;
    CHECK(tb_dflash_init(&cs, d, t, 2, 400, err, sizeof err) == 0);
    float *feat = malloc((size_t)N * F * sizeof(float));
    fill(feat, (size_t)N * F, 11);
    float *lc = malloc((size_t)2 * Lb * V * sizeof(float)), *lg = malloc((size_t)Lb * V * sizeof(float));
    int32_t dc[2 * 64], dg[2 * 64], anchors[2] = {3, (int32_t)(V / 2)};
    int s0 = 0, slots[2] = {0, 1};

    /* one append, slot 0: logits and drafts */
    CHECK(tb_dflash_append(&cs, 0, feat, 20) == 0);
    CHECK(tb_gpu_dflash_append(gd, 0, feat, 20, 0) == 0);
    CHECK(tb_dflash_draft(&cs, &s0, 1, anchors, Lb, lc, dc) == 0);
    CHECK(tb_gpu_dflash_logits(gd, anchors[0], Lb, lg) == 0);
    CHECK(tb_gpu_dflash_draft(gd, &s0, 1, anchors, Lb, dg, NULL) == 0);
    double ref = 0, diff = 0;
    for (size_t i = 0; i < (size_t)Lb * V; i++) {
        ref = fmax(ref, fabs(lc[i]));
        diff = fmax(diff, isnan(lg[i]) ? INFINITY : fabs(lc[i] - lg[i]));
    }
    double tol = BF16_TOL * (ref > 1 ? ref : 1);
    fprintf(stderr, "%s: block logits max |cpu| %.3g, max |gpu - cpu| %.3g (bound %.3g)\n", name, ref, diff, tol);
    CHECK(diff <= tol);
    CHECK(drafts_agree(lc, Lb, V, dg, tol));
    /* the roofline's work: the appends' and drafts' FLOPs and bytes (at
     * least the LM head's bf16 weights, read by every draft), then none */
    double wf = 0, wb = 0;
    tb_gpu_dflash_take_work(gd, &wf, &wb);
    CHECK(wf > 0 && wb >= 2.0 * V * t->cfg.hidden_size);
    tb_gpu_dflash_take_work(gd, &wf, &wb);
    CHECK(wf == 0 && wb == 0);

    /* pieces, then one more row rolled back: the same drafts */
    CHECK(tb_gpu_dflash_append(gd, 0, feat + 20 * F, 7, 0) == 0 && tb_gpu_dflash_append(gd, 0, feat + 27 * F, 1, 0) == 0);
    CHECK(tb_dflash_append(&cs, 0, feat + 20 * F, 8) == 0);
    CHECK(tb_gpu_dflash_append(gd, 0, feat + 28 * F, 1, 0) == 0 && tb_gpu_dflash_rollback(gd, 0, 28) == 0);
    CHECK(tb_gpu_dflash_ctx_len(gd, 0) == 28);
    CHECK(tb_gpu_dflash_rollback(gd, 0, 29) != 0);

    /* a batch of two slots, slot 1 with 300 rows (chunks of 256) */
    CHECK(tb_dflash_append(&cs, 1, feat, N) == 0);
    CHECK(tb_gpu_dflash_append(gd, 1, feat, N, 0) == 0);
    CHECK(tb_dflash_draft(&cs, slots, 2, anchors, Lb, lc, dc) == 0);
    float *lb = malloc((size_t)2 * Lb * V * sizeof(float));
    CHECK(tb_gpu_dflash_draft(gd, slots, 2, anchors, Lb, dg, lb) == 0);
    CHECK(drafts_agree(lc, Lb, V, dg, tol));
    CHECK(drafts_agree(lc + (size_t)Lb * V, Lb, V, dg + Lb - 1, tol));
    /* the drafted rows' logits (sampling's input): each block's rows 1 .. Lb - 1 */
    double bdiff = 0;
    for (int b = 0; b < 2; b++)
        for (size_t i = V; i < (size_t)Lb * V; i++) {
            size_t at = (size_t)b * Lb * V + i;
            bdiff = fmax(bdiff, isnan(lb[at]) ? INFINITY : fabs(lc[at] - lb[at]));
        }
    fprintf(stderr, "%s: a batch of two blocks' drafted logits, max |gpu - cpu| %.3g (bound %.3g)\n", name, bdiff, tol);
    CHECK(bdiff <= tol);
    free(lb);

    /* the same 300 rows from device memory: the same drafts exactly */
    float *dfeat = NULL;
    int32_t dd[64];
    CHECK(cudaMalloc((void **)&dfeat, (size_t)N * F * sizeof(float)) == cudaSuccess);
    CHECK(cudaMemcpy(dfeat, feat, (size_t)N * F * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(tb_gpu_dflash_rollback(gd, 1, 0) == 0);
    CHECK(tb_gpu_dflash_append(gd, 1, dfeat, N, 1) == 0);
    CHECK(tb_gpu_dflash_draft(gd, slots + 1, 1, anchors + 1, Lb, dd, NULL) == 0);
    CHECK(memcmp(dd, dg + Lb - 1, (size_t)(Lb - 1) * sizeof *dd) == 0);
    cudaFree(dfeat);

    /* refused, with a message */
    CHECK(tb_gpu_dflash_append(gd, 1, feat, 101, 0) != 0);
    CHECK(strlen(tb_gpu_dflash_error(gd)) > 0);
    CHECK(tb_gpu_dflash_draft(gd, slots, 1, anchors, Lb + 1, dg, NULL) != 0);

    free(feat);
    free(lc);
    free(lg);
    tb_dflash_free(&cs);
    tb_gpu_dflash_free(gd);
    tb_gpu_free(gt);
}

int main(void)
{
    char why[256], err[512];
    if (tb_gpu_probe(why, sizeof why) != 0) {
        fprintf(stderr, "skip: %s\n", why);
        return 77;
    }
    tb_model t, d;
    CHECK(tb_model_preset("tiny-llama", 5, &t, err, sizeof err) == 0);
    CHECK(tb_dflash_preset("tiny-dflash", 6, &d, err, sizeof err) == 0);
    check_pair("tiny-dflash", &t, &d);
    tb_model_free(&t);
    tb_model_free(&d);

    const char *src = getenv("TB_SOURCE_ROOT");
    char dir[4096];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/tests/data/golden-dflash/target", src ? src : ".");
    if (stat(dir, &sb) == 0) {
        int rc = tb_model_load(dir, &t, err, sizeof err);
        snprintf(dir, sizeof dir, "%s/tests/data/golden-dflash/drafter", src ? src : ".");
        int rc2 = rc == 0 ? tb_dflash_load(dir, &d, err, sizeof err) : -1;
        if (rc || rc2)
            fprintf(stderr, "golden-dflash: %s\n", err);
        CHECK(rc == 0 && rc2 == 0);
        if (rc == 0 && rc2 == 0) {
            check_pair("golden-dflash", &t, &d);
            tb_model_free(&d);
        }
        if (rc == 0)
            tb_model_free(&t);
    } else {
        fprintf(stderr, "golden-dflash absent: the presets only\n");
    }
    return check_done();
}
