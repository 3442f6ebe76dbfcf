/* test_ar_spec_gpu.c — the ar backend's speculative decoding on CUDA
 * (plugins/ar/spec.h, drafter.h over engine_cuda.c's verify_slots,
 * truncate_slot and draft_span_slots). Exit 77 (skip) without a device.
 *
 *   - lossless at temperature 0: every output equals the target's greedy
 *     output alone on the same device (plain ar for the llamas; the
 *     engine's own causal prefill and decode for small-sdar, whose model
 *     plain ar does not load), token for token: the ar drafter (tiny
 *     random llamas: every draft rejected; small-llama for itself: every
 *     draft accepted; small-llama-draft for small-llama: some) and
 *     self-speculation (small-sdar, small-sdar-self: some), batch 1 and
 *     batch 4 of ragged prompts, draft_len 1, 3, 8. The GPU computes
 *     in bf16, and a verification's rows run through other kernels than a
 *     decode step's: where the outputs part, the target's own top-1/top-2
 *     margin at that position (its logits on this device) must be inside
 *     bf16's bound (2e-2 x max(1, max |logit|), as tests/gpu/test_gpu.c):
 *     a near-tie ends that request's comparison, reported; a wider margin
 *     fails;
 *   - the counts add up (as on the CPU); small-llama drafting for itself
 *     accepts at least 90% of its drafts (bf16 near-ties aside, all);
 *     forced_acceptance gives exactly min(a, k);
 *   - sampled: the output's joint of three tokens against the target's
 *     exact joint (chi-square, fixed seeds), on both paths of the rule,
 *     for the AR, self and DFlash drafters;
 *   - the DFlash drafter (draft_dflash.c): small-llama drafted by the
 *     trained small-llama-dflash lossless as above (draft_len 3, 7, 15),
 *     the features handed device to device; the 8B presets (qwen3-8b with
 *     dflash-qwen3-8b, llama-3-8b with dflash-llama-3-8b) under
 *     forced_acceptance, counts exact.
 *
 *   TB_SOURCE_ROOT=$PWD build-gpu/tests/test_ar_spec_gpu
 *
 * Built with plugins/ar's sources linked in. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "check.h"
#include "engine.h"
#include "gpu.h"
#include "plugin_host.h"
#include "sampling.h"
#include "spec_check.h"

#define BF16_TOL 2e-2

static char models[4096], golden[4096];
static int near_ties; /* comparisons a near-tie ended */

/* The target on the device, for its logits at a position. */
typedef struct target {
    tb_loaded ld;
    tb_engine eng;
    int ok;
} target;

static void target_open(target *t, const char *model, int diffusion)
{
    char err[512];
    memset(t, 0, sizeof *t);
    if (tb_load(model, diffusion, 1, 0, 0, 0, &t->ld, err, sizeof err) != TB_OK) {
        fprintf(stderr, "load %s: %s\n", model, err);
        CHECK(0);
        return;
    }
    CHECK(tb_engine_open(&t->eng, &t->ld, 0) == 0);
    t->ok = 1;
}

static void target_close(target *t)
{
    if (!t->ok)
        return;
    tb_engine_close(&t->eng);
    tb_loaded_free(&t->ld);
}

/* The prompt's ids as the plugin makes them (BOS as the model adds it). */
static size_t prompt_ids(target *t, const char *text, int32_t *ids, size_t cap)
{
    int32_t **pi = NULL;
    int64_t *pl = NULL;
    size_t P = 0;
    char err[512];
    CHECK(tb_tokenize_prompts(&t->ld, &text, 1, &pi, &pl, &P, err, sizeof err) == TB_OK);
    P = (size_t)pl[0] < cap ? (size_t)pl[0] : cap;
    memcpy(ids, pi[0], P * sizeof *ids);
    tb_free_prompts(pi, pl, 1);
    return P;
}

/* The target's greedy output alone: prefill, then decode steps. */
static void greedy_alone(target *t, const char *text, uint32_t N, int32_t *out)
{
    int32_t ids[512];
    size_t P = prompt_ids(t, text, ids, 512);
    char err[512];
    const tb_engine_iface *e = t->eng.iface;
    CHECK(e->reserve(t->eng.ctx, 1, (int)(P + N), (int)P, err, sizeof err) == 0);
    CHECK(e->set_padding(t->eng.ctx, NULL, 0) == 0);
    int32_t next = 0;
    CHECK(e->prefill(t->eng.ctx, ids, 1, (int)P, &next, NULL) == 0);
    out[0] = next;
    for (uint32_t i = 1; i < N; i++) {
        CHECK(e->decode(t->eng.ctx, &next, 1, NULL) == 0);
        out[i] = next;
    }
}

/* The target's top-1/top-2 margin and bound before output position i of
 * `text` + ref[0 .. i). 1 when the margin is inside bf16's bound. */
static int near_tie(target *t, const char *text, const int32_t *ref, uint32_t i, double *gap_out, double *bound_out)
{
    int32_t seq[1024];
    size_t P = prompt_ids(t, text, seq, 512);
    memcpy(seq + P, ref, i * sizeof *seq);
    int n = (int)(P + i), V = t->ld.model.cfg.vocab_size;
    float *lg = malloc((size_t)n * V * sizeof *lg);
    char err[512];
    const tb_engine_iface *e = t->eng.iface;
    CHECK(e->reserve(t->eng.ctx, 1, n, n, err, sizeof err) == 0);
    CHECK(e->set_padding(t->eng.ctx, NULL, 0) == 0);
    CHECK(e->logits_all(t->eng.ctx, seq, n, lg) == 0);
    const float *row = lg + (size_t)(n - 1) * V;
    double top1 = -INFINITY, top2 = -INFINITY, mx = 0;
    for (int v = 0; v < V; v++) {
        mx = fabs(row[v]) > mx ? fabs(row[v]) : mx;
        if (row[v] > top1) {
            top2 = top1;
            top1 = row[v];
        } else if (row[v] > top2) {
            top2 = row[v];
        }
    }
    free(lg);
    *gap_out = top1 - top2;
    *bound_out = BF16_TOL * (mx > 1 ? mx : 1);
    return *gap_out <= *bound_out;
}

/* got against the reference, request by request: equal, or parted at a
 * near-tie of the target (reported). */
static void compare(target *t, const char *const *texts, uint32_t R, const run *got, int32_t (*ref)[MAX_N], uint32_t N,
                    const char *what)
{
    for (uint32_t r = 0; r < R; r++) {
        CHECK(got->n_out[r] == N);
        uint32_t i = 0;
        while (i < N && i < got->n_out[r] && got->ids[r][i] == ref[r][i])
            i++;
        if (i >= N)
            continue;
        double gap, bound;
        int tie = near_tie(t, texts[r], ref[r], i, &gap, &bound);
        fprintf(stderr, "%s: request %u parts at token %u (%d vs %d): the target's margin %.4g, bound %.4g%s\n", what,
                r, i, got->ids[r][i], ref[r][i], gap, bound, tie ? ": a near-tie, comparison ended" : "");
        near_ties += tie;
        CHECK(tie);
    }
}

static const char *ragged[4] = {"the cat sat on the mat", "x", "a much longer prompt about many things, told slowly",
                                "hello world"};
static const char *tasks[4] = {"add 12 34 =", "copy abc =", "sort 3 1 2 =", "lookup b in a:1 b:2 ="};

/* Lossless on the device: model with `drafter` (and its draft_model, ""
 * for self, whose model is diffusion), the reference from plain ar (for
 * self: the engine alone). */
static void lossless(const char *model, int diffusion, const char *drafter, const char *draft_model,
                     const char *const *texts, uint32_t N)
{
    char err[512] = "";
    target t;
    target_open(&t, model, diffusion);
    if (!t.ok)
        return;
    static int32_t ref1[4][MAX_N], ref4[4][MAX_N];
    static run got;
    if (diffusion) {
        for (uint32_t r = 0; r < 4; r++)
            greedy_alone(&t, texts[r], N, ref1[r]);
        memcpy(ref4, ref1, sizeof ref1);
    } else {
        test_option ps[] = {{"device", "cuda"}};
        void *plain = open_ctx(model, ps, 1, err, sizeof err, NULL);
        CHECK(plain != NULL);
        if (!plain) {
            fprintf(stderr, "create: %s\n", err);
            target_close(&t);
            return;
        }
        for (uint32_t r = 0; r < 4; r++) {
            generate(plain, &texts[r], 1, N, 1, ps, 1, &got);
            CHECK(got.st == TB_OK);
            memcpy(ref1[r], got.ids[0], sizeof ref1[r]);
        }
        generate(plain, texts, 4, N, 1, ps, 1, &got);
        CHECK(got.st == TB_OK);
        memcpy(ref4, got.ids, sizeof ref4);
        tokbench_backend_entry()->destroy(plain);
    }
    test_option set[] = {{"device", "cuda"}, {"drafter", drafter}, {"draft_model", draft_model}};
    void *ctx = open_ctx(model, set, NSET(set), err, sizeof err, NULL);
    CHECK(ctx != NULL);
    if (!ctx) {
        fprintf(stderr, "create: %s\n", err);
        target_close(&t);
        return;
    }
    /* dflash: its trained block's range (block 16: up to 15) */
    const char *ks_ar[] = {"1", "3", "8"}, *ks_dflash[] = {"3", "7", "15"};
    const char **ks = strcmp(drafter, "dflash") == 0 ? ks_dflash : ks_ar;
    for (size_t i = 0; i < 3; i++) {
        test_option s[] = {
            {"device", "cuda"}, {"drafter", drafter}, {"draft_model", draft_model}, {"draft_len", ks[i]}};
        int k = atoi(ks[i]);
        uint64_t acc = 0, drafted = 0;
        char what[256];
        for (uint32_t r = 0; r < 4; r++) {
            generate(ctx, &texts[r], 1, N, 1, s, NSET(s), &got);
            CHECK(got.st == TB_OK);
            if (got.st != TB_OK)
                fprintf(stderr, "generate: %s\n", got.error);
            snprintf(what, sizeof what, "%s, drafter %s %s, k %d, batch 1", model, drafter, draft_model, k);
            compare(&t, &texts[r], 1, &got, &ref1[r], N, what);
            check_counts(&got, 0, k, 0);
        }
        generate(ctx, texts, 4, N, 1, s, NSET(s), &got);
        CHECK(got.st == TB_OK);
        snprintf(what, sizeof what, "%s, drafter %s %s, k %d, batch 4", model, drafter, draft_model, k);
        compare(&t, texts, 4, &got, ref4, N, what);
        for (uint32_t r = 0; r < 4; r++) {
            check_counts(&got, r, k, 0);
            acc += got.spec[r].accepted;
            drafted += got.spec[r].drafted;
        }
        fprintf(stderr, "%s: %llu of %llu drafts accepted (batch 4)\n", what, (unsigned long long)acc,
                (unsigned long long)drafted);
    }
    tokbench_backend_entry()->destroy(ctx);
    target_close(&t);
}

/* DFlash at the published 8B shapes (random weights made on the device):
 * the cost path of the GPU figures. forced_acceptance fixes what each
 * verification keeps, so the counts are exact. */
static void dflash_presets(void)
{
    const char *pairs[][2] = {{"preset:qwen3-8b", "preset:dflash-qwen3-8b"},
                              {"preset:llama-3-8b", "preset:dflash-llama-3-8b"}};
    for (size_t i = 0; i < 2; i++) {
        char err[512] = "";
        test_option set[] = {{"device", "cuda"},         {"drafter", "dflash"}, {"draft_model", pairs[i][1]},
                             {"forced_acceptance", "6"}, {"draft_len", "15"}};
        void *ctx = open_ctx(pairs[i][0], set, NSET(set), err, sizeof err, NULL);
        CHECK(ctx != NULL);
        if (!ctx) {
            fprintf(stderr, "create %s with %s: %s\n", pairs[i][0], pairs[i][1], err);
            continue;
        }
        static run got;
        generate(ctx, NULL, 4, 36, 1, set, NSET(set), &got); /* a preset has no tokenizer */
        CHECK(got.st == TB_OK);
        if (got.st != TB_OK)
            fprintf(stderr, "generate: %s\n", got.error);
        for (uint32_t r = 0; r < 4; r++) {
            CHECK(got.n_out[r] == 36);
            CHECK(got.spec[r].verifications == 5 && got.spec[r].accepted == 30); /* 1 + 5 x 7 */
            check_counts(&got, r, 15, 1);
        }
        fprintf(stderr, "%s drafted by %s: forced 6 of 15, %lld forwards\n", pairs[i][0], pairs[i][1],
                (long long)got.forwards);
        tokbench_backend_entry()->destroy(ctx);
    }
}

static void equal_and_forced(void)
{
    char model[4200], err[512] = "";
    snprintf(model, sizeof model, "%s/small-llama", models);
    test_option set[] = {{"device", "cuda"}, {"drafter", "ar"}, {"draft_model", model}, {"draft_len", "3"}};
    test_option fset[] = {{"device", "cuda"},
                          {"drafter", "ar"},
                          {"draft_model", model},
                          {"forced_acceptance", "2"},
                          {"draft_len", "5"}};
    void *ctx = open_ctx(model, set, NSET(set), err, sizeof err, NULL);
    void *forced = open_ctx(model, fset, NSET(fset), err, sizeof err, NULL);
    CHECK(ctx && forced);
    if (!ctx || !forced) {
        fprintf(stderr, "create: %s\n", err);
        return;
    }
    static run got;
    generate(ctx, tasks, 4, 29, 1, set, NSET(set), &got);
    CHECK(got.st == TB_OK);
    uint64_t acc = 0, drafted = 0;
    for (uint32_t r = 0; r < 4; r++) {
        check_counts(&got, r, 3, 0);
        acc += got.spec[r].accepted;
        drafted += got.spec[r].drafted;
    }
    fprintf(stderr, "small-llama drafting for itself on the GPU: %llu of %llu drafts accepted\n",
            (unsigned long long)acc, (unsigned long long)drafted);
    CHECK(acc * 10 >= drafted * 9);
    generate(forced, tasks, 4, 19, 1, fset, NSET(fset), &got);
    CHECK(got.st == TB_OK);
    for (uint32_t r = 0; r < 4; r++) {
        CHECK(got.n_out[r] == 19);
        CHECK(got.spec[r].verifications == 6 && got.spec[r].accepted == 12);
        check_counts(&got, r, 5, 1);
    }
    /* the roofline counts the drafter's work: here the drafter is the
     * target's own weights, read in 30 draft steps beside 6 verifications
     * and the prefill, where plain decoding reads them in 19 steps; the
     * target's work alone would be about 7 reads */
    test_option pset[] = {{"device", "cuda"}};
    void *plain = open_ctx(model, pset, NSET(pset), err, sizeof err, NULL);
    CHECK(plain != NULL);
    if (plain) {
        double spec_bytes = got.bytes;
        generate(plain, tasks, 4, 19, 1, pset, NSET(pset), &got);
        CHECK(got.st == TB_OK);
        fprintf(stderr, "roofline bytes: forced speculation %.3g (target and drafter), plain decoding %.3g\n",
                spec_bytes, got.bytes);
        CHECK(got.bytes > 0 && spec_bytes > 1.5 * got.bytes);
        tokbench_backend_entry()->destroy(plain);
    }
    tokbench_backend_entry()->destroy(ctx);
    tokbench_backend_entry()->destroy(forced);
}

int main(void)
{
    char why[256];
    if (tb_gpu_probe(why, sizeof why) != 0) {
        fprintf(stderr, "skip: %s\n", why);
        return 77;
    }
    const char *src = getenv("TB_SOURCE_ROOT");
    snprintf(models, sizeof models, "%s/models", src ? src : ".");
    snprintf(golden, sizeof golden, "%s/tests/data/golden", src ? src : ".");
    char tiny[4200], small[4200], sdar[4200], tied[4300];
    snprintf(tiny, sizeof tiny, "%s/tiny-llama-random", models);
    snprintf(small, sizeof small, "%s/small-llama", models);
    snprintf(sdar, sizeof sdar, "%s/small-sdar", models);
    snprintf(tied, sizeof tied, "%s/llama-tied", golden);
    char draft[4200], sdar_self[4200];
    snprintf(draft, sizeof draft, "%s/small-llama-draft", models);
    snprintf(sdar_self, sizeof sdar_self, "%s/small-sdar-self", models);
    lossless(tiny, 0, "ar", tied, ragged, 40);
    lossless(small, 0, "ar", small, tasks, 40);
    lossless(small, 0, "ar", draft, tasks, 40);
    lossless(sdar, 1, "self", "", tasks, 32);
    lossless(sdar_self, 1, "self", "", tasks, 32);
    /* the DFlash drafter (plugins/ar/draft_dflash.c): the trained pair, the 8B shapes */
    static const char *digits[4] = {"93+45=", "sort 9 7 3 1 =", "copy vmoa =", "f=3 a=5 y=1 o=7 d=3 ; d?"};
    char dflash[4200];
    snprintf(dflash, sizeof dflash, "%s/small-llama-dflash", models);
    lossless(small, 0, "dflash", dflash, digits, 40);
    lossless(small, 0, "dflash", dflash, ragged, 40);
    dflash_presets();
    equal_and_forced();
    uint64_t acc, drafted;
    CHECK(sampled_case("cuda", tiny, 0, "ar", tied, "the cat", &acc, &drafted));
    CHECK(drafted > 0);
    CHECK(sampled_case("cuda", sdar, 1, "self", "", "add 12 34 =", &acc, &drafted));
    CHECK(acc > 100 && acc < drafted - 100);
    /* the DFlash drafter sampled: drawn on the host from its device logits */
    CHECK(sampled_case("cuda", small, 0, "dflash", dflash, "and the", &acc, &drafted));
    CHECK(acc > 100 && acc < drafted - 100);
    fprintf(stderr, "near-ties that ended a comparison: %d\n", near_ties);
    return check_done();
}
