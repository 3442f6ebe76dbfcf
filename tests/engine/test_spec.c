/* test_spec.c — the ar backend's speculative decoding (plugins/ar/spec.h,
 * drafter.h) on the CPU, one thread:
 *
 *   - lossless: at temperature 0 every output equals the target's greedy
 *     output alone, token for token: the ar drafter against plain ar's
 *     generate() (tiny-llama-random drafted by a second tiny random llama
 *     of the same vocabulary, tests/data/golden/llama-tied: every draft
 *     rejected; small-llama by the trained small-llama-draft: some), and
 *     self-speculation (small-sdar, small-sdar-self) against the engine's
 *     own causal greedy decode of the same weights; batch 1 and batch 4 of
 *     ragged text prompts; draft_len 1, 3, 8;
 *   - the counts add up: one emission per output token; drafted = k x
 *     verifications; accepted_at non-increasing and summing to accepted;
 *     accepted + verifications + 1 = output tokens when nothing is cut
 *     (and at most k more when the limit cut the last verification);
 *   - a drafter equal to the target (small-llama for itself) accepts
 *     every draft; forced_acceptance accepts exactly min(a, k);
 *   - sampled: the rejection rule's output is distributed as the target's
 *     own sampling (chi-square over the joint of the first three tokens,
 *     fixed seeds: deterministic), on a synthetic Markov target and
 *     drafter and end to end on the tiny models; planted wrong rules
 *     (accept always; resample from p instead of max(0, p - q)) fail it;
 *   - refusals: another vocabulary (of another size; of the same size
 *     with two byte tokens swapped, which decode alike), self on a plain llama, dflash
 *     without a loadable drafter, ar without a draft_model, self with one, a draft model that
 *     does not load, stepped sessions with a drafter.
 *
 *   test_spec MODELS_DIR GOLDEN_DIR
 *
 * Built with plugins/ar's sources linked in (tokbench_backend_entry is
 * the ar plugin's). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "check.h"
#include "engine.h"
#include "plugin_host.h"
#include "sampling.h"
#include "spec.h"
#include "spec_check.h"
#include "strmem.h"

static const char *models, *golden;

static void path_of(char *out, size_t size, const char *dir, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
}

static const char *ragged[4] = {"the cat sat on the mat", "x", "a much longer prompt about many things, told slowly",
                                "hello world"};

/* ---- lossless: the ar drafter against plain ar */

static const char *tasks[4] = {"add 12 34 =", "copy abc =", "sort 3 1 2 =", "lookup b in a:1 b:2 ="};

/* target drafted by draft over prompts[4]; prefills: the prefill forwards
 * a batch of the four takes (their distinct lengths), 0: not known */
static void test_ar_drafter_lossless(const char *target, const char *draft, const char *const *prompts, int prefills)
{
    char err[512] = "";
    test_option plain_set[] = {{"device", "cpu"}, {"threads", "1"}};
    test_option spec_set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", draft}};
    void *plain = open_ctx(target, plain_set, 2, err, sizeof err, NULL);
    void *spec = open_ctx(target, spec_set, NSET(spec_set), err, sizeof err, NULL);
    if (!plain || !spec) {
        fprintf(stderr, "create: %s\n", err);
        CHECK(0);
        return;
    }
    const uint32_t N = 40;
    static run want1[4], want4, got;
    for (uint32_t r = 0; r < 4; r++) /* each prompt alone */
        generate(plain, &prompts[r], 1, N, 1, plain_set, 2, &want1[r]);
    generate(plain, prompts, 4, N, 1, plain_set, 2, &want4);
    CHECK(want4.st == TB_OK);
    /* plain ar's batch (left padding) and its prompts alone agree: the reference */
    for (uint32_t r = 0; r < 4; r++)
        CHECK(want1[r].n_out[0] == N && memcmp(want1[r].ids[0], want4.ids[r], N * sizeof(int32_t)) == 0);
    const char *ks[] = {"1", "3", "8"};
    uint64_t acc_total = 0, dr_total = 0;
    for (size_t i = 0; i < 3; i++) {
        test_option s[] = {
            {"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", draft}, {"draft_len", ks[i]}};
        int k = atoi(ks[i]);
        for (uint32_t r = 0; r < 4; r++) {
            generate(spec, &prompts[r], 1, N, 1, s, NSET(s), &got);
            CHECK(got.st == TB_OK);
            if (got.st != TB_OK)
                fprintf(stderr, "generate: %s\n", got.error);
            CHECK(same_ids(&got, &want1[r], 1, "ar drafter, batch 1"));
            check_counts(&got, 0, k, 0);
            CHECK(got.forwards == 1 + (int64_t)got.spec[0].verifications);
        }
        generate(spec, prompts, 4, N, 1, s, NSET(s), &got);
        CHECK(got.st == TB_OK);
        CHECK(same_ids(&got, &want4, 4, "ar drafter, batch 4"));
        /* ragged prompts: one prefill forward per distinct length */
        uint32_t most = 0;
        for (uint32_t r = 0; r < 4; r++) {
            check_counts(&got, r, k, 0);
            most = got.spec[r].verifications > most ? got.spec[r].verifications : most;
            acc_total += got.spec[r].accepted;
            dr_total += got.spec[r].drafted;
        }
        if (prefills)
            CHECK(got.forwards == prefills + (int64_t)most);
        else
            CHECK(got.forwards >= 1 + (int64_t)most && got.forwards <= 4 + (int64_t)most);
        CHECK(got.draft_ns > 0);
    }
    fprintf(stderr, "ar drafter %s for %s: %llu of %llu drafts accepted over k = 1, 3, 8 (batch 4)\n", draft, target,
            (unsigned long long)acc_total, (unsigned long long)dr_total);
    const tb_backend_ops *ops = tokbench_backend_entry();
    ops->destroy(plain);
    ops->destroy(spec);
}

/* ---- the engine's own greedy decode of one prompt (the reference for
 * self-speculation, whose model plain ar does not load) */

static void engine_greedy(const char *model, const char *text, uint32_t N, int32_t *out)
{
    tb_loaded ld;
    char err[512];
    if (tb_load(model, 1, 0, 0, 0, 0, &ld, err, sizeof err) != TB_OK) {
        fprintf(stderr, "load: %s\n", err);
        CHECK(0);
        return;
    }
    int32_t **ids = NULL;
    int64_t *lens = NULL;
    size_t P;
    CHECK(tb_tokenize_prompts(&ld, &text, 1, &ids, &lens, &P, err, sizeof err) == TB_OK);
    tb_engine eng;
    CHECK(tb_engine_open(&eng, &ld, 1) == 0);
    const tb_engine_iface *e = eng.iface;
    CHECK(e->reserve(eng.ctx, 1, (int)(P + N), (int)P, err, sizeof err) == 0);
    CHECK(e->set_padding(eng.ctx, NULL, 0) == 0);
    int32_t next;
    CHECK(e->prefill(eng.ctx, ids[0], 1, (int)P, &next, NULL) == 0);
    out[0] = next;
    for (uint32_t i = 1; i < N; i++) {
        CHECK(e->decode(eng.ctx, &next, 1, NULL) == 0);
        out[i] = next;
    }
    tb_free_prompts(ids, lens, 1);
    tb_engine_close(&eng);
    tb_loaded_free(&ld);
}

static void test_self_lossless(const char *name)
{
    char model[1024], err[512] = "";
    path_of(model, sizeof model, models, name);
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "self"}};
    void *ctx = open_ctx(model, set, NSET(set), err, sizeof err, NULL);
    if (!ctx) {
        fprintf(stderr, "create: %s\n", err);
        CHECK(0);
        return;
    }
    const char *const *prompts = tasks;
    const uint32_t N = 32;
    static run want;
    memset(&want, 0, sizeof want);
    for (uint32_t r = 0; r < 4; r++) {
        engine_greedy(model, prompts[r], N, want.ids[r]);
        want.n_out[r] = N;
    }
    const char *ks[] = {"0", "1", "3", "8"}; /* 0: the model's block size - 1 */
    static run got;
    uint64_t acc = 0, drafted = 0;
    for (size_t i = 0; i < 4; i++) {
        test_option s[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "self"}, {"draft_len", ks[i]}};
        int k = i == 0 ? 3 : atoi(ks[i]); /* the models' block_size is 4 */
        for (uint32_t r = 0; r < 4; r++) {
            generate(ctx, &prompts[r], 1, N, 1, s, NSET(s), &got);
            CHECK(got.st == TB_OK);
            if (got.st != TB_OK)
                fprintf(stderr, "generate: %s\n", got.error);
            run one = want;
            memcpy(one.ids[0], want.ids[r], sizeof one.ids[0]);
            one.n_out[0] = N;
            CHECK(same_ids(&got, &one, 1, "self, batch 1"));
            check_counts(&got, 0, k, 0);
        }
        generate(ctx, prompts, 4, N, 1, s, NSET(s), &got);
        CHECK(got.st == TB_OK);
        CHECK(same_ids(&got, &want, 4, "self, batch 4"));
        for (uint32_t r = 0; r < 4; r++) {
            check_counts(&got, r, k, 0);
            acc += got.spec[r].accepted;
            drafted += got.spec[r].drafted;
        }
    }
    fprintf(stderr, "self-speculation on %s: %llu of %llu drafts accepted\n", name, (unsigned long long)acc,
            (unsigned long long)drafted);
    CHECK(acc > 0 && acc < drafted);
    tokbench_backend_entry()->destroy(ctx);
}

/* ---- a drafter equal to the target; forced acceptance */

static void test_equal_and_forced(void)
{
    char model[1024], draft[1100], err[512] = "";
    path_of(model, sizeof model, models, "small-llama");
    snprintf(draft, sizeof draft, "%s", model);
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", draft}};
    void *ctx = open_ctx(model, set, NSET(set), err, sizeof err, NULL);
    test_option fset[] = {
        {"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", draft}, {"forced_acceptance", "2"}};
    void *forced = open_ctx(model, fset, NSET(fset), err, sizeof err, NULL);
    if (!ctx || !forced) {
        fprintf(stderr, "create: %s\n", err);
        CHECK(0);
        return;
    }
    const char *const *prompts = tasks;
    static run got, want;
    /* plain ar on the trained model: the reference (every draft accepted:
     * the loop's other extreme from the tiny random pair's) */
    test_option plain_set[] = {{"device", "cpu"}, {"threads", "1"}};
    void *plain = open_ctx(model, plain_set, 2, err, sizeof err, NULL);
    CHECK(plain != NULL);
    if (plain) {
        generate(plain, prompts, 4, 29, 1, plain_set, 2, &want);
        tokbench_backend_entry()->destroy(plain);
    }
    /* k = 3: each verification yields 4 tokens; N = 1 + 4 x 7: nothing cut */
    test_option s[] = {
        {"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", draft}, {"draft_len", "3"}};
    generate(ctx, prompts, 4, 29, 1, s, NSET(s), &got);
    CHECK(got.st == TB_OK);
    CHECK(same_ids(&got, &want, 4, "small-llama drafting for itself"));
    for (uint32_t r = 0; r < 4; r++) {
        CHECK(got.n_out[r] == 29);
        CHECK(got.spec[r].verifications == 7);
        CHECK(got.spec[r].accepted == got.spec[r].drafted); /* every draft */
        check_counts(&got, r, 3, 1);
    }
    /* EOS ends a request (ignore_eos = false) inside a verification's
     * accepted tokens, as plain ar ends it */
    test_option pe[] = {{"device", "cpu"}, {"threads", "1"}, {"ignore_eos", "false"}};
    test_option se[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", draft},
                        {"draft_len", "3"}, {"ignore_eos", "false"}};
    plain = open_ctx(model, plain_set, 2, err, sizeof err, NULL);
    CHECK(plain != NULL);
    if (plain) {
        generate(plain, prompts, 4, 60, 1, pe, NSET(pe), &want);
        tokbench_backend_entry()->destroy(plain);
    }
    generate(ctx, prompts, 4, 60, 1, se, NSET(se), &got);
    CHECK(got.st == TB_OK);
    CHECK(same_ids(&got, &want, 4, "ignore_eos = false"));
    for (uint32_t r = 0; r < 4; r++) {
        CHECK(got.n_out[r] < 60 && got.n_out[r] > 0 && got.ids[r][got.n_out[r] - 1] == 1022); /* stopped at its EOS */
        check_counts(&got, r, 3, 0);
    }
    /* forced_acceptance 2 with k = 5: each verification accepts exactly 2,
     * yields 3; N = 1 + 3 x 6 */
    test_option fs[] = {{"device", "cpu"},      {"threads", "1"},           {"drafter", "ar"},
                        {"draft_model", draft}, {"forced_acceptance", "2"}, {"draft_len", "5"}};
    generate(forced, prompts, 4, 19, 1, fs, NSET(fs), &got);
    CHECK(got.st == TB_OK);
    for (uint32_t r = 0; r < 4; r++) {
        CHECK(got.n_out[r] == 19);
        CHECK(got.spec[r].verifications == 6 && got.spec[r].accepted == 12);
        CHECK(got.spec[r].accepted_at[0] == 6 && got.spec[r].accepted_at[1] == 6 && got.spec[r].accepted_at[2] == 0);
        check_counts(&got, r, 5, 1);
    }
    /* forced above k: min(a, k) */
    test_option f1[] = {{"device", "cpu"},      {"threads", "1"},           {"drafter", "ar"},
                        {"draft_model", draft}, {"forced_acceptance", "2"}, {"draft_len", "1"}};
    generate(forced, prompts, 1, 9, 1, f1, NSET(f1), &got);
    CHECK(got.st == TB_OK && got.spec[0].verifications == 4 && got.spec[0].accepted == 4);
    check_counts(&got, 0, 1, 1);
    const tb_backend_ops *ops = tokbench_backend_entry();
    const char *d = ops->describe(forced);
    CHECK(d && strstr(d, "\"forced_acceptance\":2") && strstr(d, "not the target's"));
    ops->destroy(ctx);
    ops->destroy(forced);
}

/* ---- sampled: the rule on a synthetic Markov chain */

#define SV 4 /* the synthetic vocabulary */

/* p(x | prev) and q(x | prev): rows of fixed tables, q partly off p's
 * support (token 3 is never the target's after 0) */
static const float P_TAB[SV][SV] = {
    {0.5f, 0.3f, 0.2f, 0.0f}, {0.1f, 0.1f, 0.4f, 0.4f}, {0.25f, 0.25f, 0.25f, 0.25f}, {0.7f, 0.0f, 0.1f, 0.2f}};
static const float Q_TAB[SV][SV] = {
    {0.2f, 0.2f, 0.2f, 0.4f}, {0.4f, 0.4f, 0.1f, 0.1f}, {0.1f, 0.6f, 0.2f, 0.1f}, {0.25f, 0.25f, 0.25f, 0.25f}};

typedef int (*accept_fn)(const int32_t *d, const float *p, const float *q, int k, int V, int forced, uint64_t *rng,
                         float *resid, int32_t *bonus);

/* planted wrong rules */
static int accept_always(const int32_t *d, const float *p, const float *q, int k, int V, int forced, uint64_t *rng,
                         float *resid, int32_t *bonus)
{
    (void)d, (void)q, (void)forced, (void)resid;
    *bonus = ar_spec_draw(p + (size_t)k * V, V, rng);
    return k;
}

static int resample_from_p(const int32_t *d, const float *p, const float *q, int k, int V, int forced, uint64_t *rng,
                           float *resid, int32_t *bonus)
{
    (void)forced, (void)resid;
    for (int i = 0; i < k; i++) {
        const float *pi = p + (size_t)i * V, *qi = q + (size_t)i * V;
        if (tb_rng_uniform(rng) * qi[d[i]] < pi[d[i]])
            continue;
        *bonus = ar_spec_draw(pi, V, rng); /* wrong: p, not max(0, p - q) */
        return i;
    }
    *bonus = ar_spec_draw(p + (size_t)k * V, V, rng);
    return k;
}

/* The joint of the first three output tokens after token 0, by the
 * speculative loop with rule `fn` and draft length k, over `n` runs:
 * chi-square against the target's own chain. */
static double markov_chi2(accept_fn fn, int k, int n)
{
    double count[SV * SV * SV] = {0}, prob[SV * SV * SV];
    for (int a = 0; a < SV; a++)
        for (int b = 0; b < SV; b++)
            for (int c = 0; c < SV; c++)
                prob[(a * SV + b) * SV + c] = (double)P_TAB[0][a] * P_TAB[a][b] * P_TAB[b][c];
    uint64_t rng = 20261206;
    float p[(TB_SPEC_MAX_DRAFT + 1) * SV], q[TB_SPEC_MAX_DRAFT * SV], resid[SV];
    int32_t d[TB_SPEC_MAX_DRAFT];
    for (int it = 0; it < n; it++) {
        int32_t out[3 + TB_SPEC_MAX_DRAFT + 1];
        int n_out = 0, prev = 0;
        while (n_out < 3) {
            int x = prev;
            for (int i = 0; i < k; i++) { /* d_i ~ q(. | d_{i-1}) */
                memcpy(q + i * SV, Q_TAB[x], sizeof Q_TAB[x]);
                d[i] = ar_spec_draw(q + i * SV, SV, &rng);
                x = d[i];
            }
            memcpy(p, P_TAB[prev], sizeof P_TAB[prev]); /* p rows at [prev, d_1 .. d_k] */
            for (int i = 0; i < k; i++)
                memcpy(p + (i + 1) * SV, P_TAB[d[i]], sizeof P_TAB[d[i]]);
            int32_t bonus;
            int acc = fn(d, p, q, k, SV, 0, &rng, resid, &bonus);
            for (int i = 0; i < acc; i++)
                out[n_out++] = d[i];
            out[n_out++] = bonus;
            prev = bonus;
        }
        count[(out[0] * SV + out[1]) * SV + out[2]]++;
    }
    return chi_square(count, prob, SV * SV * SV, n, NULL);
}

static void test_rule_in_distribution(void)
{
    /* fixed seeds: the figures are the same every run */
    const int n = 40000;
    for (int k = 1; k <= 3; k++) {
        double good = markov_chi2(ar_spec_accept_sampled, k, n); /* 63 dof at most */
        double always = markov_chi2(accept_always, k, n), from_p = markov_chi2(resample_from_p, k, n);
        fprintf(stderr, "rule, k = %d: chi-square %.1f (accept always %.1f, resample from p %.1f)\n", k, good,
                always, from_p);
        CHECK(good < chi_limit(63));
        CHECK(always > 1000);
        CHECK(from_p > 300);
    }
    /* greedy rule, forced */
    int32_t d[4] = {5, 6, 7, 8}, t[5] = {5, 6, 9, 8, 1}, bonus;
    CHECK(ar_spec_accept_greedy(d, t, 4, 0, &bonus) == 2 && bonus == 9);
    CHECK(ar_spec_accept_greedy(d, t, 4, 3, &bonus) == 3 && bonus == 8);
    CHECK(ar_spec_accept_greedy(d, t, 4, 9, &bonus) == 4 && bonus == 1);
    int32_t t2[5] = {1, 6, 7, 8, 2};
    CHECK(ar_spec_accept_greedy(d, t2, 4, 0, &bonus) == 0 && bonus == 1);
}

/* ---- sampled end to end on the tiny models */

static void test_sampled_end_to_end(void)
{
    char tiny[1024], sdar[1024], tied[1100];
    path_of(tiny, sizeof tiny, models, "tiny-llama-random");
    path_of(sdar, sizeof sdar, models, "small-sdar");
    snprintf(tied, sizeof tied, "%s/llama-tied", golden);
    /* three paths of the rule: every draft rejected (tiny random llamas
     * whose top 3 never meet: the residual max(0, p - q)), every draft
     * accepted (the target for itself, p = q), and both (self-speculation
     * on the trained small-sdar) */
    uint64_t acc, drafted;
    CHECK(sampled_case("cpu", tiny, 0, "ar", tied, "the cat", &acc, &drafted));
    CHECK(acc == 0 && drafted > 0);
    CHECK(sampled_case("cpu", tiny, 0, "ar", tiny, "the cat", &acc, &drafted));
    CHECK(acc == drafted && drafted > 0);
    CHECK(sampled_case("cpu", sdar, 1, "self", "", "add 12 34 =", &acc, &drafted));
    CHECK(acc > 100 && acc < drafted - 100); /* each path many times */
}

/* ---- refusals */

/* A copy of small-llama-draft (links to its files) whose tokenizer has
 * the ids of the byte tokens 0x80 and 0x81 ("Ģ" and "ģ" in ByteLevel's
 * alphabet) swapped: decoded alone, each is an invalid UTF-8 byte that
 * decode turns into U+FFFD, so only a comparison of the ids' bytes finds
 * the difference. Written under dir (a mkdtemp folder); 0 or -1. */
static int swapped_byte_tokens(const char *dir)
{
    char src[1024], from[1200], to[1200];
    path_of(src, sizeof src, models, "small-llama-draft");
    const char *links[] = {"config.json", "model.safetensors", "generation_config.json"};
    for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
        snprintf(from, sizeof from, "%s/%s", src, links[i]);
        snprintf(to, sizeof to, "%s/%s", dir, links[i]);
        if (symlink(from, to) != 0)
            return -1;
    }
    snprintf(from, sizeof from, "%s/tokenizer.json", src);
    size_t len = 0;
    char *text = tb_read_file(from, &len);
    char *a = text ? strstr(text, "\"\xc4\xa2\": 222") : NULL; /* "Ģ": 222 */
    char *b = text ? strstr(text, "\"\xc4\xa3\": 223") : NULL; /* "ģ": 223 */
    if (!a || !b) {
        free(text);
        return -1;
    }
    memcpy(a + 6, "223", 3); /* past the quote, two bytes, the quote, ": " */
    memcpy(b + 6, "222", 3);
    snprintf(to, sizeof to, "%s/tokenizer.json", dir);
    FILE *f = fopen(to, "wb");
    int ok = f && fwrite(text, 1, len, f) == len;
    ok &= f && fclose(f) == 0;
    free(text);
    return ok ? 0 : -1;
}

static void test_refusals(void)
{
    char tiny[1024], small[1024], err[512] = "";
    path_of(tiny, sizeof tiny, models, "tiny-llama-random");
    path_of(small, sizeof small, models, "small-llama");
    tb_status st;
    test_option v1[] = {{"device", "cpu"}, {"drafter", "ar"}, {"draft_model", small}};
    CHECK(open_ctx(tiny, v1, NSET(v1), err, sizeof err, &st) == NULL && strstr(err, "vocabulary"));
    /* the same size, two byte tokens swapped */
    char swapped[] = "/tmp/test_spec.XXXXXX";
    CHECK(mkdtemp(swapped) != NULL && swapped_byte_tokens(swapped) == 0);
    char small_target[1024];
    path_of(small_target, sizeof small_target, models, "small-llama");
    test_option vs[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", swapped}};
    CHECK(open_ctx(small_target, vs, NSET(vs), err, sizeof err, &st) == NULL && strstr(err, "token 222 differs"));
    const char *names[] = {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[1100];
        snprintf(p, sizeof p, "%s/%s", swapped, names[i]);
        unlink(p);
    }
    rmdir(swapped);
    test_option v2[] = {{"device", "cpu"}, {"drafter", "self"}};
    CHECK(open_ctx(tiny, v2, NSET(v2), err, sizeof err, &st) == NULL && strstr(err, "SDAR"));
    test_option v3[] = {{"device", "cpu"}, {"drafter", "dflash"}, {"draft_model", "somewhere"}};
    CHECK(open_ctx(tiny, v3, NSET(v3), err, sizeof err, &st) == NULL && st == TB_ERR_MODEL &&
          strstr(err, "draft_model = somewhere")); /* test_spec_dflash has dflash's own */
    test_option v4[] = {{"device", "cpu"}, {"drafter", "ar"}};
    CHECK(open_ctx(tiny, v4, NSET(v4), err, sizeof err, &st) == NULL && st == TB_ERR_INVALID &&
          strstr(err, "needs draft_model"));
    test_option v5[] = {{"device", "cpu"}, {"drafter", "self"}, {"draft_model", small}};
    CHECK(open_ctx(tiny, v5, NSET(v5), err, sizeof err, &st) == NULL && st == TB_ERR_INVALID &&
          strstr(err, "drafts with the target itself"));
    test_option v6[] = {{"device", "cpu"}, {"drafter", "ar"}, {"draft_model", "/no/such/folder"}};
    CHECK(open_ctx(tiny, v6, NSET(v6), err, sizeof err, &st) == NULL && strstr(err, "draft_model = /no/such/folder"));
    /* validate(): at suite load */
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value v[MAX_OPTS];
    test_option dr[] = {{"drafter", "ar"}};
    uint32_t n = test_options(ops, dr, NSET(dr), v, MAX_OPTS);
    tb_request rq = {.struct_size = sizeof rq, .n_requests = 1, .max_new_tokens = 4, .batch = 1, .options = v,
                     .n_options = n};
    char why[256] = "";
    CHECK(ops->validate(&rq, why, sizeof why) == TB_ERR_INVALID && strstr(why, "draft_model"));
    test_option good[] = {{"drafter", "ar"}, {"draft_model", "preset:llama-3.2-1b"}, {"forced_acceptance", "3"}};
    rq.n_options = test_options(ops, good, NSET(good), v, MAX_OPTS);
    CHECK(ops->validate(&rq, why, sizeof why) == TB_OK);
    /* none ignores draft_model and forced_acceptance: `drafter = none, ar` sweeps */
    test_option sweep[] = {{"drafter", "none"}, {"draft_model", small}, {"forced_acceptance", "3"}};
    rq.n_options = test_options(ops, sweep, NSET(sweep), v, MAX_OPTS);
    CHECK(ops->validate(&rq, why, sizeof why) == TB_OK);
    /* a stepped session with a drafter */
    test_option ok[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "ar"}, {"draft_model", small}};
    void *ctx = open_ctx(small, ok, NSET(ok), err, sizeof err, NULL);
    CHECK(ctx != NULL);
    if (ctx) {
        n = test_options(ops, ok, NSET(ok), v, MAX_OPTS);
        tb_request shape = {.struct_size = sizeof shape, .n_requests = 1, .max_new_tokens = 8, .batch = 1,
                            .options = v, .n_options = n};
        CHECK(ops->step_open(ctx, &shape, 2) == TB_ERR_UNSUPPORTED && strstr(ops->last_error(ctx), "drafter"));
        ops->destroy(ctx);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_spec MODELS_DIR GOLDEN_DIR\n");
        return 2;
    }
    models = argv[1];
    golden = argv[2];
    test_rule_in_distribution();
    test_refusals();
    char tiny[1024], tied[1100], small[1024], draft[1024];
    path_of(tiny, sizeof tiny, models, "tiny-llama-random");
    snprintf(tied, sizeof tied, "%s/llama-tied", golden);
    path_of(small, sizeof small, models, "small-llama");
    path_of(draft, sizeof draft, models, "small-llama-draft");
    test_ar_drafter_lossless(tiny, tied, ragged, 4); /* every draft rejected */
    test_ar_drafter_lossless(small, draft, tasks, 0); /* the trained drafter: some */
    test_self_lossless("small-sdar");
    test_self_lossless("small-sdar-self");
    test_equal_and_forced();
    test_sampled_end_to_end();
    return check_done();
}
