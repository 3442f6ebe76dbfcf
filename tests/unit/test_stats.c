/* test_stats.c — core/stats.c against hand-computed values, a sort-based
 * median, and an independent (slow) re-implementation of the bootstrap. */
#define _POSIX_C_SOURCE 200809L
#include "stats.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define TOL 1e-12

/* ---- test data: xorshift64*, unrelated to the generator under test. */

static uint64_t data_state = UINT64_C(0x2545f4914f6cdd1d);

static uint64_t data_next(void)
{
    data_state ^= data_state >> 12;
    data_state ^= data_state << 25;
    data_state ^= data_state >> 27;
    return data_state * UINT64_C(0x2545f4914f6cdd1d);
}

/* Uniform in [0, 1). */
static double data_uniform(void)
{
    return (double)(data_next() >> 11) * 0x1p-53;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double *copy_of(const double *x, size_t n)
{
    double *c = malloc(n * sizeof *c);
    if (!c) {
        fprintf(stderr, "test_stats: out of memory\n");
        exit(2);
    }
    memcpy(c, x, n * sizeof *c);
    return c;
}

/* Every field NaN except n == 0: the empty result. */
static void check_empty(const tb_stats *s)
{
    CHECK(s->n == 0);
    CHECK(isnan(s->median));
    CHECK(isnan(s->p5));
    CHECK(isnan(s->p95));
    CHECK(isnan(s->mean));
    CHECK(isnan(s->stdev));
    CHECK(isnan(s->cv));
    CHECK(isnan(s->min));
    CHECK(isnan(s->max));
    CHECK(isnan(s->ci_lo));
    CHECK(isnan(s->ci_hi));
}

/* Bitwise-equal results (NaN compares equal to NaN here). */
static int same_stats(const tb_stats *a, const tb_stats *b)
{
    const double *fa[] = {&a->median, &a->p5, &a->p95, &a->mean, &a->stdev,
                          &a->cv, &a->min, &a->max, &a->ci_lo, &a->ci_hi};
    const double *fb[] = {&b->median, &b->p5, &b->p95, &b->mean, &b->stdev,
                          &b->cv, &b->min, &b->max, &b->ci_lo, &b->ci_hi};
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < sizeof fa / sizeof fa[0]; i++)
        if (memcmp(fa[i], fb[i], sizeof(double)) != 0)
            return 0;
    return 1;
}

/* {1,2,3,4}, given unsorted. */
static void test_four(void)
{
    double x[] = {3, 1, 4, 2};
    double orig[] = {3, 1, 4, 2};
    tb_stats s;
    tb_stats_compute(x, 4, 1, &s);
    CHECK(memcmp(x, orig, sizeof x) == 0); /* input not modified */
    CHECK(s.n == 4);
    /* rank = p/100 * (n-1) = p/100 * 3 over sorted {1,2,3,4}. */
    CHECK_NEAR(s.median, 2.5, TOL); /* rank 1.5  -> 2 + 0.5*(3-2) */
    CHECK_NEAR(s.p5, 1.15, TOL);    /* rank 0.15 -> 1 + 0.15*(2-1) */
    CHECK_NEAR(s.p95, 3.85, TOL);   /* rank 2.85 -> 3 + 0.85*(4-3) */
    CHECK_NEAR(s.mean, 2.5, TOL);   /* 10 / 4 */
    /* squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, over n-1 = 3 */
    CHECK_NEAR(s.stdev, sqrt(5.0 / 3.0), TOL);
    CHECK_NEAR(s.cv, sqrt(5.0 / 3.0) / 2.5, TOL); /* 0.5164 */
    CHECK(s.min == 1);
    CHECK(s.max == 4);
    CHECK(s.ci_lo >= 1 && s.ci_lo <= 2.5);
    CHECK(s.ci_hi >= 2.5 && s.ci_hi <= 4);
    CHECK(s.ci_lo < s.ci_hi); /* 4 distinct values: resample medians vary */
}

/* Odd n: {5,1,3} -> sorted {1,3,5}. */
static void test_odd(void)
{
    double x[] = {5, 1, 3};
    tb_stats s;
    tb_stats_compute(x, 3, 1, &s);
    CHECK(s.n == 3);
    /* rank = p/100 * 2 */
    CHECK_NEAR(s.median, 3, TOL); /* rank 1: the middle element */
    CHECK_NEAR(s.p5, 1.2, TOL);   /* rank 0.1 -> 1 + 0.1*(3-1) */
    CHECK_NEAR(s.p95, 4.8, TOL);  /* rank 1.9 -> 3 + 0.9*(5-3) */
    CHECK_NEAR(s.mean, 3, TOL);   /* 9 / 3 */
    CHECK_NEAR(s.stdev, 2, TOL);  /* (4 + 0 + 4) / 2 = 4 -> 2 */
    CHECK_NEAR(s.cv, 2.0 / 3.0, TOL);
    CHECK(s.min == 1 && s.max == 5);
}

static void test_single(void)
{
    double x[] = {7.25};
    tb_stats s;
    tb_stats_compute(x, 1, 99, &s);
    CHECK(s.n == 1);
    CHECK(s.median == 7.25 && s.p5 == 7.25 && s.p95 == 7.25);
    CHECK(s.mean == 7.25 && s.min == 7.25 && s.max == 7.25);
    CHECK(s.stdev == 0); /* defined as 0 for n == 1, not 0/0 */
    CHECK(s.cv == 0);    /* 0 / 7.25 */
    CHECK(s.ci_lo == 7.25 && s.ci_hi == 7.25); /* every resample is {x} */
}

static void test_empty(void)
{
    tb_stats s;
    memset(&s, 0, sizeof s); /* fields must be overwritten, not left 0 */
    tb_stats_compute(NULL, 0, 1, &s);
    check_empty(&s);

    double nans[] = {NAN, NAN, NAN};
    memset(&s, 0, sizeof s);
    tb_stats_compute(nans, 3, 1, &s);
    check_empty(&s);
}

/* NaN samples are dropped: same result as the clean set {1,2,3,4}. */
static void test_nan_dropped(void)
{
    double x[] = {NAN, 4, NAN, 1, 3, 2, NAN};
    double orig[sizeof x / sizeof x[0]];
    memcpy(orig, x, sizeof x);
    double clean[] = {1, 2, 3, 4};
    tb_stats s, c;
    tb_stats_compute(x, 7, 5, &s);
    tb_stats_compute(clean, 4, 5, &c);
    CHECK(memcmp(x, orig, sizeof x) == 0); /* NaNs still in place */
    CHECK(s.n == 4);
    CHECK_NEAR(s.median, 2.5, TOL);
    CHECK_NEAR(s.mean, 2.5, TOL);
    CHECK_NEAR(s.stdev, sqrt(5.0 / 3.0), TOL);
    CHECK(s.min == 1 && s.max == 4);
    CHECK(same_stats(&s, &c)); /* including the bootstrap interval */
}

/* Constant samples: no spread anywhere, even for a value (0.1) that is not
 * exactly representable, so its running sum does not divide back to it. */
static void test_constant(void)
{
    enum { N = 1000 };
    static double x[N];
    for (size_t i = 0; i < N; i++)
        x[i] = 0.1;
    tb_stats s;
    tb_stats_compute(x, N, 3, &s);
    CHECK(s.n == N);
    CHECK(s.median == 0.1 && s.p5 == 0.1 && s.p95 == 0.1);
    CHECK(s.mean == 0.1);
    CHECK(s.stdev == 0);
    CHECK(s.cv == 0);
    CHECK(s.min == 0.1 && s.max == 0.1);
    CHECK(s.ci_lo == 0.1 && s.ci_hi == 0.1);

    /* Even a correctly rounded sum need not divide back: for this c,
     * round(3c) / 3 != c in doubles, yet the mean must be c, stdev 0. */
    const double c = 0x1.5b101c5411d5ap+7; /* 173.53146612851816 */
    double y[] = {c, c, c};
    tb_stats_compute(y, 3, 3, &s);
    CHECK(s.mean == c);
    CHECK(s.stdev == 0);
    CHECK(s.cv == 0);
}

static void test_cv(void)
{
    tb_stats s;
    /* mean 40/8 = 5; squared deviations 9+1+1+1+0+0+4+16 = 32; n-1 = 7 */
    double a[] = {2, 4, 4, 4, 5, 5, 7, 9};
    tb_stats_compute(a, 8, 1, &s);
    CHECK_NEAR(s.mean, 5, TOL);
    CHECK_NEAR(s.stdev, sqrt(32.0 / 7.0), TOL); /* 2.1381 */
    CHECK_NEAR(s.cv, sqrt(32.0 / 7.0) / 5.0, TOL);
    CHECK_NEAR(s.median, 4.5, TOL); /* rank 3.5 over {2,4,4,4,5,5,7,9} */

    /* Negative mean: CV uses |mean|. mean -4, (4+0+4)/2 = 4 -> stdev 2 */
    double b[] = {-2, -4, -6};
    tb_stats_compute(b, 3, 1, &s);
    CHECK_NEAR(s.mean, -4, TOL);
    CHECK_NEAR(s.stdev, 2, TOL);
    CHECK_NEAR(s.cv, 0.5, TOL);

    /* mean 0 -> CV NaN; stdev still sqrt((1+1)/1) */
    double c[] = {-1, 1};
    tb_stats_compute(c, 2, 1, &s);
    CHECK(s.mean == 0);
    CHECK_NEAR(s.stdev, sqrt(2.0), TOL);
    CHECK(isnan(s.cv));
}

static void test_percentile(void)
{
    const double v[] = {10, 20, 30, 40, 50}; /* rank = p/100 * 4 */
    CHECK(tb_percentile_sorted(v, 5, 0) == 10);
    CHECK(tb_percentile_sorted(v, 5, 100) == 50);
    CHECK_NEAR(tb_percentile_sorted(v, 5, 25), 20, TOL);   /* rank 1 */
    CHECK_NEAR(tb_percentile_sorted(v, 5, 10), 14, TOL);   /* rank 0.4 */
    CHECK_NEAR(tb_percentile_sorted(v, 5, 90), 46, TOL);   /* rank 3.6 */
    CHECK_NEAR(tb_percentile_sorted(v, 5, 37.5), 25, TOL); /* rank 1.5 */
    CHECK_NEAR(tb_percentile_sorted(v, 5, 50), 30, TOL);   /* rank 2 */
    /* Outside 0..100: clamped to the ends. */
    CHECK(tb_percentile_sorted(v, 5, -5) == 10);
    CHECK(tb_percentile_sorted(v, 5, 150) == 50);
    CHECK(isnan(tb_percentile_sorted(v, 5, NAN)));
    /* n == 1: every percentile is the sample. */
    CHECK(tb_percentile_sorted(v + 2, 1, 0) == 30);
    CHECK(tb_percentile_sorted(v + 2, 1, 73) == 30);
    CHECK(tb_percentile_sorted(v + 2, 1, 100) == 30);
    /* n == 2 {10,20}: rank = p/100 */
    CHECK_NEAR(tb_percentile_sorted(v, 2, 5), 10.5, TOL);
    CHECK_NEAR(tb_percentile_sorted(v, 2, 95), 19.5, TOL);
    /* Equal infinities stay infinite instead of inf - inf = NaN. */
    const double inf2[] = {INFINITY, INFINITY};
    CHECK(tb_percentile_sorted(inf2, 2, 50) == INFINITY);
}

/* Same samples and seed -> same interval; the input order does not
 * matter; a different seed gives a (slightly) different interval. */
static void test_determinism(void)
{
    enum { N = 1001 };
    static double x[N], y[N];
    for (size_t i = 0; i < N; i++)
        x[i] = data_uniform();
    memcpy(y, x, sizeof x);
    for (size_t i = N - 1; i > 0; i--) { /* Fisher-Yates shuffle of y */
        size_t j = (size_t)(data_next() % (i + 1));
        double t = y[i];
        y[i] = y[j];
        y[j] = t;
    }
    tb_stats a, b, c, d;
    tb_stats_compute(x, N, 1234, &a);
    tb_stats_compute(x, N, 1234, &b);
    tb_stats_compute(y, N, 1234, &c);
    tb_stats_compute(x, N, 1235, &d);
    CHECK(same_stats(&a, &b));
    CHECK(same_stats(&a, &c));
    CHECK(a.ci_lo != d.ci_lo || a.ci_hi != d.ci_hi); /* seed is used */
    CHECK(a.median == d.median && a.mean == d.mean); /* rest is not random */
}

/* The interval contains the sample median and lies within [min, max], for
 * many sizes and shapes (uniform, skewed, tie-heavy). */
static void test_ci_bounds(void)
{
    static double x[400];
    for (size_t n = 2; n <= 400; n += 7) {
        for (int shape = 0; shape < 3; shape++) {
            for (size_t i = 0; i < n; i++) {
                double u = data_uniform();
                x[i] = shape == 0   ? u
                       : shape == 1 ? -log1p(-u) * 50 /* exponential */
                                    : (double)(data_next() % 5);
            }
            tb_stats s;
            tb_stats_compute(x, n, n * 3 + (size_t)shape, &s);
            CHECK(s.min <= s.ci_lo);
            CHECK(s.ci_lo <= s.median);
            CHECK(s.median <= s.ci_hi);
            CHECK(s.ci_hi <= s.max);
        }
    }
}

/* Tiny sets where the resample-median distribution is known exactly, so
 * the interval follows from probability, not from the PRNG stream.
 * {0,1}: medians 0, 0.5, 1 with prob 1/4, 1/2, 1/4 -> 2.5%/97.5% at 0, 1.
 * {0,1,2}: P(median 0) = P(>= 2 zeros) = 3*(1/3)^2*(2/3) + (1/3)^3 = 7/27,
 * likewise 2; so the 2.5% and 97.5% points are 0 and 2. Resampling
 * without replacement would give [0.5, 0.5] and [1, 1]. */
static void test_ci_tiny(void)
{
    double two[] = {1, 0}, three[] = {2, 0, 1};
    tb_stats s;
    tb_stats_compute(two, 2, 42, &s);
    CHECK(s.ci_lo == 0 && s.ci_hi == 1);
    tb_stats_compute(three, 3, 42, &s);
    CHECK(s.ci_lo == 0 && s.ci_hi == 2);
}

/* n = 100001 uniform [0,1): true median 0.5. The median's standard error
 * is 1 / (2 f(m) sqrt(n)) = 1 / (2 * 1 * 316.2) = 0.00158, so a 95%
 * interval is about 3.92 * 0.00158 = 0.0062 wide. */
static void test_large(void)
{
    enum { N = 100001 };
    double *x = malloc(N * sizeof *x);
    if (!x)
        exit(2);
    for (size_t i = 0; i < N; i++)
        x[i] = data_uniform();
    tb_stats s;
    tb_stats_compute(x, N, 2024, &s);
    CHECK(s.n == N);
    CHECK(s.ci_lo < 0.5 && 0.5 < s.ci_hi);
    CHECK(s.ci_lo <= s.median && s.median <= s.ci_hi);
    CHECK(s.ci_hi - s.ci_lo > 0.003);
    CHECK(s.ci_hi - s.ci_lo < 0.012);
    CHECK_NEAR(s.median, 0.5, 0.006);
    CHECK_NEAR(s.mean, 0.5, 0.006);
    CHECK_NEAR(s.stdev, sqrt(1.0 / 12.0), 0.003); /* uniform: 0.2887 */
    CHECK_NEAR(s.p5, 0.05, 0.006);
    CHECK_NEAR(s.p95, 0.95, 0.006);
    free(x);
}

/* tb_median_select against qsort + middle element(s), on many sizes and
 * shapes; the selected array must remain a permutation of the input. */
static void check_select(const double *x, size_t n)
{
    double *sorted = copy_of(x, n), *work = copy_of(x, n);
    qsort(sorted, n, sizeof *sorted, cmp_d);
    double want = n % 2 ? sorted[n / 2]
                        : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    double got = tb_median_select(work, n);
    CHECK_NEAR(got, want, 1e-12 * (1 + fabs(want)));
    /* Same arithmetic as the percentile path, so exactly equal. */
    CHECK(got == tb_percentile_sorted(sorted, n, 50));
    qsort(work, n, sizeof *work, cmp_d);
    CHECK(memcmp(work, sorted, n * sizeof *work) == 0);
    free(sorted);
    free(work);
}

static void test_select(void)
{
    static const size_t big[] = {1000, 1001, 4096, 4097, 100000, 100001};
    size_t sizes[300 + sizeof big / sizeof big[0]];
    size_t ns = 0;
    for (size_t n = 1; n <= 300; n++)
        sizes[ns++] = n;
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        sizes[ns++] = big[i];

    double *x = malloc(100001 * sizeof *x);
    if (!x)
        exit(2);
    for (size_t t = 0; t < ns; t++) {
        size_t n = sizes[t];
        for (int shape = 0; shape < 6; shape++) {
            for (size_t i = 0; i < n; i++) {
                switch (shape) {
                case 0: x[i] = data_uniform() * 2 - 1; break;
                case 1: x[i] = (double)(data_next() % 4); break; /* ties */
                case 2: x[i] = (double)i; break;                  /* sorted */
                case 3: x[i] = (double)(n - i); break;            /* reversed */
                case 4: x[i] = 3.5; break;                        /* constant */
                default: x[i] = (double)(i < n / 2 ? i : n - i); /* organ pipe */
                }
            }
            check_select(x, n);
        }
    }
    free(x);
}

/* ---- reference bootstrap: the documented algorithm written out plainly,
 * with a full sort per resample. PRNG: xoshiro256** seeded by splitmix64;
 * index = (high 32 bits of the draw * n) >> 32; draws index the sorted
 * samples. */

static uint64_t ref_s[4];

static uint64_t ref_splitmix(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t ref_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t ref_next(void)
{
    uint64_t r = ref_rotl(ref_s[1] * 5, 7) * 9, t = ref_s[1] << 17;
    ref_s[2] ^= ref_s[0];
    ref_s[3] ^= ref_s[1];
    ref_s[1] ^= ref_s[2];
    ref_s[0] ^= ref_s[3];
    ref_s[2] ^= t;
    ref_s[3] = ref_rotl(ref_s[3], 45);
    return r;
}

static void ref_bootstrap(const double *x, size_t n, uint64_t seed,
                          double *lo, double *hi)
{
    double *sorted = copy_of(x, n), *buf = copy_of(x, n);
    static double meds[TB_BOOTSTRAP_RESAMPLES];
    qsort(sorted, n, sizeof *sorted, cmp_d);
    for (int i = 0; i < 4; i++)
        ref_s[i] = ref_splitmix(&seed);
    for (size_t b = 0; b < TB_BOOTSTRAP_RESAMPLES; b++) {
        for (size_t i = 0; i < n; i++)
            buf[i] = sorted[((ref_next() >> 32) * (uint64_t)n) >> 32];
        qsort(buf, n, sizeof *buf, cmp_d);
        meds[b] = n % 2 ? buf[n / 2] : (buf[n / 2 - 1] + buf[n / 2]) / 2;
    }
    qsort(meds, TB_BOOTSTRAP_RESAMPLES, sizeof *meds, cmp_d);
    /* 1000 medians: rank 0.025 * 999 = 24.975, 0.975 * 999 = 974.025 */
    *lo = meds[24] + 0.975 * (meds[25] - meds[24]);
    *hi = meds[974] + 0.025 * (meds[975] - meds[974]);
    free(sorted);
    free(buf);
}

static void check_bootstrap_ref(const double *x, size_t n, uint64_t seed)
{
    double lo, hi;
    tb_stats s;
    ref_bootstrap(x, n, seed, &lo, &hi);
    tb_stats_compute(x, n, seed, &s);
    CHECK_NEAR(s.ci_lo, lo, 1e-12 * (1 + fabs(lo)));
    CHECK_NEAR(s.ci_hi, hi, 1e-12 * (1 + fabs(hi)));
}

static void test_bootstrap_reference(void)
{
    static const size_t sizes[] = {1, 2, 3, 4, 5, 37, 200, 1000, 2000, 2001};
    static double x[2001];
    if (TB_BOOTSTRAP_RESAMPLES != 1000) { /* ref_bootstrap's ranks */
        CHECK(TB_BOOTSTRAP_RESAMPLES == 1000);
        return;
    }
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t n = sizes[t];
        for (size_t i = 0; i < n; i++)
            x[i] = data_uniform() * 100;
        check_bootstrap_ref(x, n, 7 + t);
        for (size_t i = 0; i < n; i++) /* tie-heavy, like integer ms */
            x[i] = (double)(data_next() % 9);
        check_bootstrap_ref(x, n, 1000 + t);
    }
}

int main(void)
{
    test_four();
    test_odd();
    test_single();
    test_empty();
    test_nan_dropped();
    test_constant();
    test_cv();
    test_percentile();
    test_determinism();
    test_ci_bounds();
    test_ci_tiny();
    test_large();
    test_select();
    test_bootstrap_reference();
    return check_done();
}
