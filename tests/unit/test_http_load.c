/* test_http_load.c — plugins/http's load pieces: open-loop arrival
 * schedules (mean rate, the burstiness knob as the gaps' coefficient of
 * variation, determinism) and synthetic prompts of an exact token length
 * under a real tokenizer.json. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrivals.h"
#include "check.h"
#include "prompts.h"
#include "tokenizer.h"

/* Mean and CV of the gaps of a schedule, seconds. */
static void gap_stats(const int64_t *off, uint32_t n, double *mean, double *cv)
{
    double s = 0, s2 = 0;
    for (uint32_t i = 1; i < n; i++) {
        double g = (double)(off[i] - off[i - 1]) * 1e-9;
        s += g;
        s2 += g * g;
    }
    double m = s / (n - 1);
    *mean = m;
    *cv = sqrt(s2 / (n - 1) - m * m) / m;
}

static void test_schedule_moments(void)
{
    enum { N = 200001 };
    int64_t *off = malloc(N * sizeof *off);
    static const double shapes[] = {1.0, 0.25, 4.0, 100.0};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        double b = shapes[k], mean, cv;
        tb_arrivals_schedule(42, 50.0, b, N, off);
        CHECK(off[0] == 0);
        gap_stats(off, N, &mean, &cv);
        /* mean 1/rate; CV 1/sqrt(burstiness); 200k gaps: < 1% off */
        CHECK_NEAR(mean, 1.0 / 50.0, 0.01 / 50.0);
        CHECK_NEAR(cv, 1.0 / sqrt(b), 0.02 / sqrt(b));
        int sorted = 1;
        for (uint32_t i = 1; i < N; i++)
            sorted &= off[i] >= off[i - 1];
        CHECK(sorted);
    }
    free(off);
}

static void test_schedule_deterministic(void)
{
    int64_t a[100], b[100], c[100];
    tb_arrivals_schedule(7, 3.0, 1.0, 100, a);
    tb_arrivals_schedule(7, 3.0, 1.0, 100, b);
    tb_arrivals_schedule(8, 3.0, 1.0, 100, c);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    tb_arrivals_schedule(7, 0, 1.0, 100, a); /* no rate: all at once */
    int zero = 1;
    for (int i = 0; i < 100; i++)
        zero &= a[i] == 0;
    CHECK(zero);
}

/* A rate below the suite's least (TB_RATE_MIN) never wraps the int64
 * schedule into negative offsets (issue 38 item 8: 1e-300 sent every
 * request at once, with latencies of -9.2e15 ms): they saturate, still
 * in order. */
static void test_schedule_tiny_rate(void)
{
    int64_t a[4];
    tb_arrivals_schedule(7, 1e-300, 1.0, 4, a);
    CHECK(a[0] == 0);
    for (int i = 1; i < 4; i++)
        CHECK(a[i] > 0 && a[i] >= a[i - 1]);
    /* at the least rate, 1,601 requests fit without saturating */
    enum { N = 1601 };
    static int64_t b[N];
    tb_arrivals_schedule(7, 1e-6, 1.0, N, b);
    CHECK(b[N - 1] > b[N - 2] && b[N - 1] < (int64_t)9.0e18);
}

/* Fresh arrivals (docs/METRICS.md, "The rate sent"): the seed of a
 * schedule changes with the repetition, the warm-up flag, the rate and
 * the wave, and only with them; the schedules of two rates are not one
 * draw scaled. */
static void test_schedule_seed(void)
{
    uint64_t s0 = tb_arrivals_seed(42, 0, 0, 20.0, 0);
    CHECK(s0 == tb_arrivals_seed(42, 0, 0, 20.0, 0));
    const uint64_t other[] = {tb_arrivals_seed(43, 0, 0, 20.0, 0), tb_arrivals_seed(42, 1, 0, 20.0, 0),
                              tb_arrivals_seed(42, 0, 1, 20.0, 0), tb_arrivals_seed(42, 0, 0, 20.5, 0),
                              tb_arrivals_seed(42, 0, 0, 20.0, 1)};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        CHECK(other[i] != s0);
    enum { N = 64 };
    int64_t a[N], b[N];
    tb_arrivals_schedule(tb_arrivals_seed(42, 0, 0, 10.0, 0), 10.0, 1.0, N, a);
    tb_arrivals_schedule(tb_arrivals_seed(42, 0, 0, 20.0, 0), 20.0, 1.0, N, b);
    int scaled = 0; /* 20/s's send times, doubled, would be 10/s's */
    for (int i = 1; i < N; i++)
        scaled += llabs(a[i] - 2 * b[i]) < 1000;
    CHECK(scaled < 2);
}

/* The spread and bias of the rate a schedule sends (docs/METRICS.md,
 * "The rate sent"), over many seeded schedules of Poisson gaps at R:
 * the mean gap is 1/R; (n - 1) / span reads high by 1/(n - 2), n / span
 * by n / (n - 2); 32 requests send within +-36% of R about 95% of the
 * time, 1,601 within +-5%. */
static double sent_share(uint32_t n, uint32_t schedules, double within, double *mean_gap, double *mean_rate,
                         double *mean_n_rate)
{
    const double R = 50.0;
    int64_t *off = malloc(n * sizeof *off);
    uint32_t in = 0;
    double g = 0, r = 0, rn = 0;
    for (uint32_t k = 0; k < schedules; k++) {
        tb_arrivals_schedule(tb_arrivals_seed(7, k, 0, R, 0), R, 1.0, n, off);
        double span = (double)(off[n - 1] - off[0]) * 1e-9, sent = (n - 1) / span;
        g += span / (n - 1);
        r += sent;
        rn += n / span;
        in += fabs(sent / R - 1) <= within;
    }
    free(off);
    *mean_gap = g / schedules * R; /* in units of 1/R */
    *mean_rate = r / schedules / R;
    *mean_n_rate = rn / schedules / R;
    return (double)in / schedules;
}

static void test_sent_rate_spread(void)
{
    double gap, rate, nrate;
    double in = sent_share(32, 20000, 0.36, &gap, &rate, &nrate);
    CHECK_NEAR(gap, 1.0, 0.005);
    CHECK_NEAR(rate, 31.0 / 30.0, 0.006);
    CHECK_NEAR(nrate, 32.0 / 30.0, 0.006);
    CHECK(in > 0.93 && in < 0.98);
    in = sent_share(1601, 1000, 0.05, &gap, &rate, &nrate);
    CHECK_NEAR(rate, 1600.0 / 1599.0, 0.002);
    CHECK(in > 0.93 && in < 0.97);
    fprintf(stderr, "1,601 Poisson requests: %.1f%% of schedules within 5%% of the rate\n", 100 * in);
    /* the median of 3 repetitions (fresh arrivals each): within 5% in
     * more than 99% of cases */
    enum { N = 1601, TRIPLES = 1000 };
    int64_t *off = malloc(N * sizeof *off);
    uint32_t ok = 0;
    for (uint32_t t = 0; t < TRIPLES; t++) {
        double r[3];
        for (uint32_t k = 0; k < 3; k++) {
            tb_arrivals_schedule(tb_arrivals_seed(11 + t, k, 0, 26.12, 0), 26.12, 1.0, N, off);
            r[k] = (N - 1) / ((double)(off[N - 1] - off[0]) * 1e-9) / 26.12;
        }
        double med = fmax(fmin(r[0], r[1]), fmin(fmax(r[0], r[1]), r[2]));
        ok += fabs(med - 1) <= 0.05;
    }
    free(off);
    CHECK(ok > 0.99 * TRIPLES);
    fprintf(stderr, "the median of 3: %.1f%% within 5%%\n", 100.0 * ok / TRIPLES);
}

static void test_gamma_small_shape(void)
{
    tb_arrival_rng r;
    tb_arrival_rng_seed(&r, 1);
    double s = 0;
    int n = 200000, positive = 1;
    for (int i = 0; i < n; i++) {
        double g = tb_arrival_gamma(&r, 0.1);
        positive &= g >= 0 && isfinite(g);
        s += g;
    }
    CHECK(positive);
    CHECK_NEAR(s / n, 0.1, 0.005); /* mean = shape */
}

static void test_prompts_exact_length(void)
{
    const char *root = getenv("TB_SOURCE_ROOT");
    char *path = NULL;
    if (asprintf(&path, "%s/models/tiny-llama-random/tokenizer.json", root ? root : ".") < 0)
        return;
    tb_tokenizer *tok = NULL;
    char err[256];
    CHECK(tb_tokenizer_load(path, &tok, err, sizeof err) == 0);
    free(path);
    if (!tok)
        return;
    tb_prompt_vocab *v = tb_prompt_vocab_new(tok);
    CHECK(v && tb_prompt_vocab_size(v) >= 8);
    static const uint32_t lens[] = {0, 1, 7, 32, 128, 1000};
    for (size_t i = 0; v && i < sizeof lens / sizeof *lens; i++) {
        for (uint64_t seed = 1; seed <= 5; seed++) {
            int64_t counted = -1;
            char *p = tb_prompt_synth(v, lens[i], seed, &counted);
            CHECK(p != NULL);
            if (!p)
                continue;
            int64_t n = tb_tokenizer_encode(tok, p, strlen(p), NULL, 0);
            if (n != (int64_t)lens[i])
                fprintf(stderr, "prompt of %u tokens (seed %llu) encodes to %lld\n", lens[i],
                        (unsigned long long)seed, (long long)n);
            CHECK(n == (int64_t)lens[i]);
            CHECK(counted == n);
            char *q = tb_prompt_synth(v, lens[i], seed, &counted);
            CHECK(q && strcmp(p, q) == 0); /* same seed, same prompt */
            char *o = tb_prompt_synth(v, lens[i], seed + 100, &counted);
            CHECK(lens[i] < 2 || (o && strcmp(p, o) != 0));
            free(p);
            free(q);
            free(o);
        }
    }
    tb_prompt_vocab_free(v);
    tb_tokenizer_free(tok);

    /* No tokenizer: common words, one per requested token. */
    v = tb_prompt_vocab_new(NULL);
    int64_t counted;
    char *p = tb_prompt_synth(v, 5, 3, &counted);
    int words = 0;
    for (char *s = p; s && *s; s++)
        words += *s == ' ';
    CHECK(words == 5 && counted == 5);
    free(p);
    tb_prompt_vocab_free(v);
}

int main(void)
{
    test_schedule_moments();
    test_schedule_deterministic();
    test_schedule_tiny_rate();
    test_schedule_seed();
    test_sent_rate_spread();
    test_gamma_small_shape();
    test_prompts_exact_length();
    return check_done();
}
