/* test_spec.c — the ar backend's speculative decoding (plugins/ar/spec.h,
 * drafter.h) on the CPU, one thread:
 *
 *   - lossless: at temperature 0 every output equals the target's greedy
 *     output alone, token for token: the ar drafter (tiny-llama-random
 *     verified against a second tiny random llama of the same vocabulary,
 *     tests/data/golden/llama-tied) against plain ar's generate(), and
 *     self-speculation (small-sdar) against the engine's own causal greedy
 *     decode of the same weights; batch 1 and batch 4 of ragged text
 *     prompts; draft_len 1, 3, 8;
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
 *   - refusals: another vocabulary, self on a plain llama, dflash (not
 *     yet), a malformed drafter, forced_acceptance without a drafter,
 *     stepped sessions with a drafter.
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

#include <tokbench/backend.h>

#include "backend_common.h"
#include "check.h"
#include "engine.h"
#include "plugin_host.h"
#include "sampling.h"
#include "spec.h"

#define MAX_OPTS 32
#define MAX_R 16
#define MAX_N 64

static const char *models, *golden;

static void path_of(char *out, size_t size, const char *dir, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
}

/* ---- the plugin through its ABI */

typedef struct run {
    tb_status st;
    uint32_t n_out[MAX_R];
    int32_t ids[MAX_R][MAX_N];
    tb_spec_counts spec[MAX_R];
    uint32_t emitted[MAX_R];
    int64_t forwards, draft_ns;
    char error[512];
} run;

static void *open_ctx(const char *model, const test_option *set, size_t n_set, char *err, size_t err_size,
                      tb_status *st_out)
{
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value v[MAX_OPTS];
    uint32_t n = test_options(ops, set, n_set, v, MAX_OPTS);
    void *ctx = NULL;
    tb_status st = ops->create(&test_host, model, v, n, &ctx, err, err_size);
    if (st_out)
        *st_out = st;
    return st == TB_OK ? ctx : NULL;
}

/* generate() of R text prompts, N new tokens; options as set. */
static void generate(void *ctx, const char *const *texts, uint32_t R, uint32_t N, uint64_t seed, const test_option *set,
                     size_t n_set, run *out)
{
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value v[MAX_OPTS];
    uint32_t n = test_options(ops, set, n_set, v, MAX_OPTS);
    tb_request_result rr[MAX_R];
    tb_spec_counts sc[MAX_R];
    memset(rr, 0, sizeof rr);
    memset(sc, 0, sizeof sc);
    for (uint32_t r = 0; r < R; r++)
        rr[r].n_answer_tokens = TB_UNKNOWN_COUNT;
    tb_request rq = {.struct_size = sizeof rq, .n_requests = R, .max_new_tokens = N, .batch = R, .seed = seed,
                     .prompt_text = texts, .options = v, .n_options = n};
    tb_result res = {.struct_size = sizeof res, .n_requests = R, .requests = rr, .spec = sc};
    memset(test_emitted, 0, sizeof test_emitted);
    memset(out, 0, sizeof *out);
    out->st = ops->generate(ctx, &rq, &res);
    snprintf(out->error, sizeof out->error, "%s", ops->last_error(ctx));
    for (uint32_t r = 0; r < R; r++) {
        out->n_out[r] = rr[r].n_output_ids < MAX_N ? rr[r].n_output_ids : MAX_N;
        if (rr[r].output_ids)
            memcpy(out->ids[r], rr[r].output_ids, out->n_out[r] * sizeof(int32_t));
        out->spec[r] = sc[r];
        out->emitted[r] = test_emitted[r];
    }
    out->forwards = res.forward_passes;
    out->draft_ns = res.draft_ns;
}

/* The counts of one request hang together; exact: nothing was cut. */
static void check_counts(const run *g, uint32_t r, int k, int exact)
{
    const tb_spec_counts *s = &g->spec[r];
    CHECK(g->emitted[r] == g->n_out[r]); /* one emission per token */
    CHECK(s->verifications > 0 || g->n_out[r] <= 1);
    CHECK(s->drafted == (uint32_t)k * s->verifications);
    CHECK(s->draft_len == (s->verifications ? (uint32_t)k : 0));
    uint32_t sum_acc = 0, sum_dr = 0;
    for (int i = 0; i < TB_SPEC_MAX_DRAFT; i++) {
        sum_acc += s->accepted_at[i];
        sum_dr += s->drafted_at[i];
        CHECK(s->accepted_at[i] <= s->drafted_at[i]);
        if (i > 0)
            CHECK(s->accepted_at[i] <= s->accepted_at[i - 1]);
        CHECK(s->drafted_at[i] == (i < k ? s->verifications : 0));
    }
    CHECK(sum_acc == s->accepted);
    CHECK(sum_dr == s->drafted);
    uint32_t made = s->accepted + s->verifications + 1; /* the prefill's token, then accepted + bonus each */
    if (exact)
        CHECK(made == g->n_out[r]);
    else
        CHECK(made >= g->n_out[r] && made <= g->n_out[r] + (uint32_t)k);
}

static int same_ids(const run *a, const run *b, uint32_t R, const char *what)
{
    int same = 1;
    for (uint32_t r = 0; r < R; r++) {
        int eq = a->n_out[r] == b->n_out[r] && memcmp(a->ids[r], b->ids[r], a->n_out[r] * sizeof(int32_t)) == 0;
        if (!eq) {
            fprintf(stderr, "%s: request %u differs (%u vs %u tokens):", what, r, a->n_out[r], b->n_out[r]);
            for (uint32_t i = 0; i < a->n_out[r] && i < b->n_out[r]; i++)
                fprintf(stderr, " %d/%d", a->ids[r][i], b->ids[r][i]);
            fprintf(stderr, "\n");
        }
        same &= eq;
    }
    return same;
}

static const char *ragged[4] = {"the cat sat on the mat", "x", "a much longer prompt about many things, told slowly",
                                "hello world"};

/* ---- lossless: the ar drafter against plain ar */

static void test_ar_drafter_lossless(void)
{
    char target[1024], draft[1100], err[512] = "";
    path_of(target, sizeof target, models, "tiny-llama-random");
    snprintf(draft, sizeof draft, "ar:%s/llama-tied", golden);
    test_option plain_set[] = {{"device", "cpu"}, {"threads", "1"}};
    test_option spec_set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", draft}};
    void *plain = open_ctx(target, plain_set, 2, err, sizeof err, NULL);
    void *spec = open_ctx(target, spec_set, 3, err, sizeof err, NULL);
    if (!plain || !spec) {
        fprintf(stderr, "create: %s\n", err);
        CHECK(0);
        return;
    }
    const uint32_t N = 40;
    static run want1[4], want4, got;
    for (uint32_t r = 0; r < 4; r++) /* each prompt alone */
        generate(plain, &ragged[r], 1, N, 1, plain_set, 2, &want1[r]);
    generate(plain, ragged, 4, N, 1, plain_set, 2, &want4);
    CHECK(want4.st == TB_OK);
    /* plain ar's batch (left padding) and its prompts alone agree: the reference */
    for (uint32_t r = 0; r < 4; r++)
        CHECK(want1[r].n_out[0] == N && memcmp(want1[r].ids[0], want4.ids[r], N * sizeof(int32_t)) == 0);
    const char *ks[] = {"1", "3", "8"};
    uint64_t acc_total = 0;
    for (size_t i = 0; i < 3; i++) {
        test_option s[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", draft}, {"draft_len", ks[i]}};
        int k = atoi(ks[i]);
        for (uint32_t r = 0; r < 4; r++) {
            generate(spec, &ragged[r], 1, N, 1, s, 4, &got);
            CHECK(got.st == TB_OK);
            if (got.st != TB_OK)
                fprintf(stderr, "generate: %s\n", got.error);
            CHECK(same_ids(&got, &want1[r], 1, "ar drafter, batch 1"));
            check_counts(&got, 0, k, 0);
            CHECK(got.forwards == 1 + (int64_t)got.spec[0].verifications);
        }
        generate(spec, ragged, 4, N, 1, s, 4, &got);
        CHECK(got.st == TB_OK);
        CHECK(same_ids(&got, &want4, 4, "ar drafter, batch 4"));
        /* ragged prompts: one prefill forward per distinct length (4 here) */
        uint32_t most = 0;
        for (uint32_t r = 0; r < 4; r++) {
            check_counts(&got, r, k, 0);
            most = got.spec[r].verifications > most ? got.spec[r].verifications : most;
            acc_total += got.spec[r].accepted;
        }
        CHECK(got.forwards == 4 + (int64_t)most);
        CHECK(got.draft_ns > 0);
    }
    fprintf(stderr, "ar drafter on tiny random llamas: %llu draft tokens accepted over k = 1, 3, 8\n",
            (unsigned long long)acc_total);
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

static void test_self_lossless(void)
{
    char model[1024], err[512] = "";
    path_of(model, sizeof model, models, "small-sdar");
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", "self"}};
    void *ctx = open_ctx(model, set, 3, err, sizeof err, NULL);
    if (!ctx) {
        fprintf(stderr, "create: %s\n", err);
        CHECK(0);
        return;
    }
    const char *prompts[4] = {"add 12 34 =", "copy abc =", "sort 3 1 2 =", "lookup b in a:1 b:2 ="};
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
        int k = i == 0 ? 3 : atoi(ks[i]); /* small-sdar's block_size is 4 */
        for (uint32_t r = 0; r < 4; r++) {
            generate(ctx, &prompts[r], 1, N, 1, s, 4, &got);
            CHECK(got.st == TB_OK);
            if (got.st != TB_OK)
                fprintf(stderr, "generate: %s\n", got.error);
            run one = want;
            memcpy(one.ids[0], want.ids[r], sizeof one.ids[0]);
            one.n_out[0] = N;
            CHECK(same_ids(&got, &one, 1, "self, batch 1"));
            check_counts(&got, 0, k, 0);
        }
        generate(ctx, prompts, 4, N, 1, s, 4, &got);
        CHECK(got.st == TB_OK);
        CHECK(same_ids(&got, &want, 4, "self, batch 4"));
        for (uint32_t r = 0; r < 4; r++) {
            check_counts(&got, r, k, 0);
            acc += got.spec[r].accepted;
            drafted += got.spec[r].drafted;
        }
    }
    fprintf(stderr, "self-speculation on small-sdar: %llu of %llu drafts accepted\n", (unsigned long long)acc,
            (unsigned long long)drafted);
    tokbench_backend_entry()->destroy(ctx);
}

/* ---- a drafter equal to the target; forced acceptance */

static void test_equal_and_forced(void)
{
    char model[1024], draft[1100], err[512] = "";
    path_of(model, sizeof model, models, "small-llama");
    snprintf(draft, sizeof draft, "ar:%s", model);
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", draft}};
    void *ctx = open_ctx(model, set, 3, err, sizeof err, NULL);
    test_option fset[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", draft}, {"forced_acceptance", "2"}};
    void *forced = open_ctx(model, fset, 4, err, sizeof err, NULL);
    if (!ctx || !forced) {
        fprintf(stderr, "create: %s\n", err);
        CHECK(0);
        return;
    }
    const char *prompts[4] = {"add 12 34 =", "copy abc =", "sort 3 1 2 =", "lookup b in a:1 b:2 ="};
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
    test_option s[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", draft}, {"draft_len", "3"}};
    generate(ctx, prompts, 4, 29, 1, s, 4, &got);
    CHECK(got.st == TB_OK);
    CHECK(same_ids(&got, &want, 4, "small-llama drafting for itself"));
    for (uint32_t r = 0; r < 4; r++) {
        CHECK(got.n_out[r] == 29);
        CHECK(got.spec[r].verifications == 7);
        CHECK(got.spec[r].accepted == got.spec[r].drafted); /* every draft */
        check_counts(&got, r, 3, 1);
    }
    /* forced_acceptance 2 with k = 5: each verification accepts exactly 2,
     * yields 3; N = 1 + 3 x 6 */
    test_option fs[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", draft}, {"forced_acceptance", "2"},
                        {"draft_len", "5"}};
    generate(forced, prompts, 4, 19, 1, fs, 5, &got);
    CHECK(got.st == TB_OK);
    for (uint32_t r = 0; r < 4; r++) {
        CHECK(got.n_out[r] == 19);
        CHECK(got.spec[r].verifications == 6 && got.spec[r].accepted == 12);
        CHECK(got.spec[r].accepted_at[0] == 6 && got.spec[r].accepted_at[1] == 6 && got.spec[r].accepted_at[2] == 0);
        check_counts(&got, r, 5, 1);
    }
    /* forced above k: min(a, k) */
    test_option f1[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", draft}, {"forced_acceptance", "2"},
                        {"draft_len", "1"}};
    generate(forced, prompts, 1, 9, 1, f1, 5, &got);
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

/* Pearson's chi-square of counts against exact probabilities, the cells
 * expected fewer than 5 times pooled into one (so that a rare cell's
 * single hit does not dominate); *dof its degrees of freedom. A count in a
 * cell of probability 0 makes it infinite. */
static double chi_square(const double *count, const double *prob, int cells, double n, int *dof)
{
    double x = 0, pool_n = 0, pool_e = 0;
    int bins = 0;
    for (int c = 0; c < cells; c++) {
        if (prob[c] <= 0) {
            if (count[c] > 0)
                return INFINITY;
            continue;
        }
        double e = n * prob[c];
        if (e < 5) {
            pool_n += count[c];
            pool_e += e;
            continue;
        }
        x += (count[c] - e) * (count[c] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        x += (pool_n - pool_e) * (pool_n - pool_e) / pool_e;
        bins++;
    }
    if (dof)
        *dof = bins - 1;
    return x;
}

/* Far past chance for dof degrees of freedom (about 7 standard deviations
 * above the mean: p < 1e-7 at these sizes), yet far below what a wrong
 * rule gives at these sample counts. */
static double chi_limit(int dof)
{
    return dof + 7 * sqrt(2.0 * dof) + 10;
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

/* The target's exact joint of its first three sampled tokens after
 * `text` (top_k 3: 27 cells), through the engine and sampling.h's rule;
 * cells[c] = its three ids. */
static int exact_joint(const char *model, int diffusion, const char *text, const tb_sampling *smp, double *prob,
                       int32_t (*cells)[3])
{
    tb_loaded ld;
    char err[512];
    CHECK(tb_load(model, diffusion, 0, 0, 0, 0, &ld, err, sizeof err) == TB_OK);
    int V = ld.model.cfg.vocab_size;
    int32_t **ids = NULL;
    int64_t *lens = NULL;
    size_t P;
    CHECK(tb_tokenize_prompts(&ld, &text, 1, &ids, &lens, &P, err, sizeof err) == TB_OK);
    tb_engine eng;
    CHECK(tb_engine_open(&eng, &ld, 1) == 0);
    const tb_engine_iface *e = eng.iface;
    CHECK(e->reserve(eng.ctx, 1, (int)P + 3, (int)P + 3, err, sizeof err) == 0);
    CHECK(e->set_padding(eng.ctx, NULL, 0) == 0);
    int32_t *seq = calloc(P + 3, sizeof *seq);
    float *logits = malloc((P + 3) * (size_t)V * sizeof *logits), *scratch = malloc(2 * (size_t)V * sizeof *scratch);
    float *d0 = malloc((size_t)V * sizeof *d0), *d1 = malloc((size_t)V * sizeof *d1), *d2 = malloc((size_t)V * sizeof *d2);
    memcpy(seq, ids[0], P * sizeof *seq);
    int n = 0;
    /* logits_all appends to what the engine holds: forgotten before each */
    CHECK(e->logits_all(eng.ctx, seq, (int)P, logits) == 0);
    tb_sample_dist(logits + (P - 1) * V, V, smp, d0, scratch);
    for (int a = 0; a < V; a++) {
        if (d0[a] <= 0)
            continue;
        seq[P] = a;
        CHECK(e->set_padding(eng.ctx, NULL, 0) == 0);
        CHECK(e->logits_all(eng.ctx, seq, (int)P + 1, logits) == 0);
        tb_sample_dist(logits + P * V, V, smp, d1, scratch);
        for (int b = 0; b < V; b++) {
            if (d1[b] <= 0)
                continue;
            seq[P + 1] = b;
            CHECK(e->set_padding(eng.ctx, NULL, 0) == 0);
            CHECK(e->logits_all(eng.ctx, seq, (int)P + 2, logits) == 0);
            tb_sample_dist(logits + (P + 1) * V, V, smp, d2, scratch);
            for (int c = 0; c < V; c++) {
                if (d2[c] <= 0 || n >= 27)
                    continue;
                prob[n] = (double)d0[a] * d1[b] * d2[c];
                cells[n][0] = a, cells[n][1] = b, cells[n][2] = c;
                n++;
            }
        }
    }
    free(seq);
    free(logits);
    free(scratch);
    free(d0);
    free(d1);
    free(d2);
    tb_free_prompts(ids, lens, 1);
    tb_engine_close(&eng);
    tb_loaded_free(&ld);
    return n;
}

static void test_sampled_end_to_end(void)
{
    char tiny[1024], sdar[1024], tied[1100], same[1100], err[512] = "";
    path_of(tiny, sizeof tiny, models, "tiny-llama-random");
    path_of(sdar, sizeof sdar, models, "small-sdar");
    snprintf(tied, sizeof tied, "ar:%s/llama-tied", golden);
    snprintf(same, sizeof same, "ar:%s", tiny);
    /* three paths of the rule: every draft rejected (tiny random llamas
     * whose top 3 never meet: the residual max(0, p - q)), every draft
     * accepted (the target for itself, p = q), and both (self-speculation
     * on the trained small-sdar) */
    struct {
        const char *model, *drafter, *text;
        int diffusion, paths; /* 0: none accepted, 1: all, 2: some */
    } cases[3] = {{tiny, tied, "the cat", 0, 0}, {tiny, same, "the cat", 0, 1}, {sdar, "self", "add 12 34 =", 1, 2}};
    tb_sampling smp = {1.0, 3, 1};
    for (int ci = 0; ci < 3; ci++) {
        double prob[27];
        int32_t cells[27][3];
        int n_cells = exact_joint(cases[ci].model, cases[ci].diffusion, cases[ci].text, &smp, prob, cells);
        CHECK(n_cells == 27);
        test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", cases[ci].drafter}};
        void *ctx = open_ctx(cases[ci].model, set, 3, err, sizeof err, NULL);
        if (!ctx) {
            fprintf(stderr, "create: %s\n", err);
            CHECK(0);
            return;
        }
        test_option s[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", cases[ci].drafter}, {"draft_len", "2"},
                           {"temperature", "1"}, {"top_k", "3"}};
        const char *texts[MAX_R];
        for (int r = 0; r < MAX_R; r++)
            texts[r] = cases[ci].text;
        double count[27] = {0}, n = 0, outside = 0;
        uint64_t acc = 0, drafted = 0;
        static run got;
        for (uint64_t seed = 1; seed <= 250; seed++) {
            generate(ctx, texts, MAX_R, 3, seed, s, 6, &got);
            CHECK(got.st == TB_OK);
            for (int r = 0; r < MAX_R; r++) {
                int c = 0;
                while (c < n_cells && memcmp(cells[c], got.ids[r], sizeof cells[c]) != 0)
                    c++;
                if (c < n_cells)
                    count[c]++;
                else
                    outside++;
                n++;
                acc += got.spec[r].accepted;
                drafted += got.spec[r].drafted;
            }
        }
        int dof = 0;
        double x = outside > 0 ? INFINITY : chi_square(count, prob, n_cells, n, &dof);
        fprintf(stderr, "sampled, %s drafting for %s: chi-square %.1f (%d dof, limit %.1f) over %.0f runs, %llu of "
                        "%llu drafts accepted\n",
                cases[ci].drafter, cases[ci].model, x, dof, chi_limit(dof), n, (unsigned long long)acc,
                (unsigned long long)drafted);
        CHECK(x < chi_limit(dof));
        if (cases[ci].paths == 0)
            CHECK(acc == 0 && drafted > 0);
        else if (cases[ci].paths == 1)
            CHECK(acc == drafted && drafted > 0);
        else
            CHECK(acc > 100 && acc < drafted - 100); /* each path many times */
        tokbench_backend_entry()->destroy(ctx);
    }
}

/* ---- refusals */

static void test_refusals(void)
{
    char tiny[1024], small[1024], bad[1100], err[512] = "";
    path_of(tiny, sizeof tiny, models, "tiny-llama-random");
    path_of(small, sizeof small, models, "small-llama");
    snprintf(bad, sizeof bad, "ar:%s", small);
    tb_status st;
    test_option v1[] = {{"device", "cpu"}, {"drafter", bad}};
    CHECK(open_ctx(tiny, v1, 2, err, sizeof err, &st) == NULL && strstr(err, "vocabulary"));
    test_option v2[] = {{"device", "cpu"}, {"drafter", "self"}};
    CHECK(open_ctx(tiny, v2, 2, err, sizeof err, &st) == NULL && strstr(err, "SDAR"));
    test_option v3[] = {{"device", "cpu"}, {"drafter", "dflash:somewhere"}};
    CHECK(open_ctx(tiny, v3, 2, err, sizeof err, &st) == NULL && st == TB_ERR_UNSUPPORTED && strstr(err, "not yet"));
    test_option v4[] = {{"device", "cpu"}, {"drafter", "eagle"}};
    CHECK(open_ctx(tiny, v4, 2, err, sizeof err, &st) == NULL && st == TB_ERR_INVALID && strstr(err, "ar:PATH"));
    test_option v5[] = {{"device", "cpu"}, {"drafter", "ar:"}};
    CHECK(open_ctx(tiny, v5, 2, err, sizeof err, &st) == NULL && st == TB_ERR_INVALID);
    /* validate(): at suite load */
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value v[MAX_OPTS];
    test_option fa[] = {{"forced_acceptance", "2"}};
    uint32_t n = test_options(ops, fa, 1, v, MAX_OPTS);
    tb_request rq = {.struct_size = sizeof rq, .n_requests = 1, .max_new_tokens = 4, .batch = 1, .options = v,
                     .n_options = n};
    char why[256] = "";
    CHECK(ops->validate(&rq, why, sizeof why) == TB_ERR_INVALID && strstr(why, "needs a drafter"));
    test_option dr[] = {{"drafter", "what:ever"}};
    n = test_options(ops, dr, 1, v, MAX_OPTS);
    rq.n_options = n;
    CHECK(ops->validate(&rq, why, sizeof why) == TB_ERR_INVALID && strstr(why, "drafter"));
    /* a stepped session with a drafter */
    char self[1100];
    snprintf(self, sizeof self, "ar:%s", small);
    test_option ok[] = {{"device", "cpu"}, {"threads", "1"}, {"drafter", self}};
    void *ctx = open_ctx(small, ok, 3, err, sizeof err, NULL);
    CHECK(ctx != NULL);
    if (ctx) {
        n = test_options(ops, ok, 3, v, MAX_OPTS);
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
    test_ar_drafter_lossless();
    test_self_lossless();
    test_equal_and_forced();
    test_sampled_end_to_end();
    return check_done();
}
