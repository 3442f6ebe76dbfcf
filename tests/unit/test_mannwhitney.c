/* test_mannwhitney.c — core/mannwhitney.c against values computed
 * independently: by hand, by scipy 1.10.1 (scipy.stats.mannwhitneyu,
 * alternative="two-sided"; the calls are in the comments), and by brute
 * force enumeration of every split of the pooled samples (with pair
 * counting, not ranks), which checks the exact test with ties. */
#include "mannwhitney.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static tb_mwu run(const double *x, size_t n1, const double *y, size_t n2, tb_mwu_method m)
{
    tb_mwu r;
    CHECK(tb_mwu_test(x, n1, y, n2, m, &r) == 0);
    CHECK(r.u1 + r.u2 == (double)(n1 * n2));
    return r;
}

/* U of x by pair counting: the definition, no ranks. */
static double u_pairs(const double *v, const int *in_x, size_t n)
{
    double u = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (in_x[i] && !in_x[j])
                u += v[i] > v[j] ? 1 : v[i] == v[j] ? 0.5 : 0;
    return u;
}

/* Exact two-sided p by enumerating all C(n, n1) splits (n <= 20). */
static double brute_p(const double *x, size_t n1, const double *y, size_t n2)
{
    size_t n = n1 + n2;
    double v[20];
    int in_x[20];
    for (size_t i = 0; i < n; i++) {
        v[i] = i < n1 ? x[i] : y[i - n1];
        in_x[i] = i < n1;
    }
    double mu = (double)n1 * (double)n2 / 2, dev = fabs(u_pairs(v, in_x, n) - mu);
    double hit = 0, all = 0;
    for (uint32_t mask = 0; mask < (1u << n); mask++) {
        if ((size_t)__builtin_popcount(mask) != n1)
            continue;
        for (size_t i = 0; i < n; i++)
            in_x[i] = (mask >> i) & 1;
        all++;
        /* U values are multiples of 0.5: the comparison is exact. */
        if (fabs(u_pairs(v, in_x, n) - mu) >= dev)
            hit++;
    }
    return hit / all;
}

static void test_by_hand(void)
{
    /* x entirely below y: U1 = 0. Of the C(6,3) = 20 splits, only this
     * one and its mirror are as extreme: p = 2/20. */
    const double x[] = {1, 2, 3}, y[] = {4, 5, 6};
    tb_mwu r = run(x, 3, y, 3, TB_MWU_EXACT);
    CHECK(r.u1 == 0 && r.u2 == 9);
    CHECK(r.exact && !r.ties);
    CHECK_NEAR(r.p, 0.1, 1e-15);
    CHECK_NEAR(tb_mwu_min_p(3, 3), 0.1, 1e-15);
    /* Swapping the sides swaps U and keeps p. */
    tb_mwu s = run(y, 3, x, 3, TB_MWU_EXACT);
    CHECK(s.u1 == 9 && s.u2 == 0);
    CHECK_NEAR(s.p, r.p, 1e-15);
    /* 5 against 5 fully separated: 2 / C(10,5) = 2/252. */
    CHECK_NEAR(tb_mwu_min_p(5, 5), 2.0 / 252, 1e-15);
    CHECK_NEAR(tb_mwu_min_p(1, 1), 1, 0);
    CHECK_NEAR(tb_mwu_min_p(0, 4), 1, 0);
}

static void test_scipy_exact(void)
{
    /* mannwhitneyu([1,2,3,4,5], [6,7,8,9,10], method="exact")
     *   -> U1 = 0, p = 0.0079365079365079361 (= 2/252) */
    const double a[] = {1, 2, 3, 4, 5}, b[] = {6, 7, 8, 9, 10};
    tb_mwu r = run(a, 5, b, 5, TB_MWU_AUTO);
    CHECK(r.exact && r.u1 == 0);
    CHECK_NEAR(r.p, 0.0079365079365079361, 1e-15);
    /* mannwhitneyu([19,22,16,29,24], [20,11,17,12], method="exact")
     *   -> U1 = 17, p = 0.1111111111111111 */
    const double c[] = {19, 22, 16, 29, 24}, d[] = {20, 11, 17, 12};
    r = run(c, 5, d, 4, TB_MWU_AUTO);
    CHECK(r.u1 == 17 && r.u2 == 3);
    CHECK_NEAR(r.p, 0.1111111111111111, 1e-14);
    /* mannwhitneyu([1.5,2.5,...,7.5], [2,3,...,8], method="exact")
     *   -> U1 = 21, p = 0.71037296037296049 */
    const double e[] = {1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5}, f[] = {2, 3, 4, 5, 6, 7, 8};
    r = run(e, 7, f, 7, TB_MWU_AUTO);
    CHECK(r.u1 == 21);
    CHECK_NEAR(r.p, 0.71037296037296049, 1e-14);
    /* tokens/s of 5 runs each, B clearly faster:
     * mannwhitneyu([10.1,10.3,9.8,10.0,10.2], [10.6,10.4,10.9,10.7,10.5],
     *   method="exact") -> U1 = 0, p = 0.0079365079365079361 */
    const double g[] = {10.1, 10.3, 9.8, 10.0, 10.2}, h[] = {10.6, 10.4, 10.9, 10.7, 10.5};
    r = run(g, 5, h, 5, TB_MWU_AUTO);
    CHECK(r.u1 == 0);
    CHECK_NEAR(r.p, 0.0079365079365079361, 1e-15);
}

static void test_scipy_normal(void)
{
    /* method="asymptotic" (tie-corrected sigma, continuity 0.5): */
    const double a[] = {1, 2, 3}, b[] = {4, 5, 6};
    CHECK_NEAR(run(a, 3, b, 3, TB_MWU_NORMAL).p, 0.08085559837005224, 1e-13);
    const double c[] = {1, 2, 3, 4, 5}, d[] = {6, 7, 8, 9, 10};
    CHECK_NEAR(run(c, 5, d, 5, TB_MWU_NORMAL).p, 0.012185780355344813, 1e-13);
    /* With ties: ([3,1,4,1,5,9,2,6], [5,3,5,8,9,7,9,3]) -> U1 = 17,
     * p = 0.12415307686326289 */
    const double e[] = {3, 1, 4, 1, 5, 9, 2, 6}, f[] = {5, 3, 5, 8, 9, 7, 9, 3};
    tb_mwu r = run(e, 8, f, 8, TB_MWU_NORMAL);
    CHECK(r.u1 == 17 && r.ties && !r.exact);
    CHECK_NEAR(r.p, 0.12415307686326289, 1e-13);
    /* All equal: no evidence either way (scipy: p = 1). */
    const double g[] = {1, 1, 1};
    CHECK_NEAR(run(g, 3, g, 3, TB_MWU_NORMAL).p, 1, 0);
    CHECK_NEAR(run(g, 3, g, 3, TB_MWU_EXACT).p, 1, 0);
    /* 40 vs 45 samples (numpy default_rng(7), rounded to 0.1, many ties):
     * asymptotic U1 = 345, p = 1.0470812185736839e-06. Also what AUTO
     * picks at this size. */
    static const double big_a[] = {100.0, 101.5, 98.6, 95.5, 97.7, 95.0, 100.3, 106.7, 97.5, 96.9, 102.4, 101.8,
                                   100.5, 95.3, 99.9, 103.5, 93.3, 97.7, 90.5, 93.6, 90.8, 98.8, 93.7, 101.4,
                                   100.8, 99.1, 87.4, 97.3, 99.8, 100.6, 92.3, 97.6, 95.1, 96.0, 105.3, 96.0,
                                   99.8, 104.4, 97.1, 99.4};
    static const double big_b[] = {103.6, 103.3, 96.9, 103.4, 109.8, 95.3, 107.3, 103.6, 99.8, 113.0, 106.8, 97.0,
                                   103.4, 105.9, 102.1, 106.4, 102.7, 106.3, 110.2, 99.6, 104.0, 100.7, 103.6,
                                   97.1, 100.1, 102.0, 107.5, 108.7, 96.4, 99.0, 106.2, 93.0, 100.7, 102.5, 109.3,
                                   106.4, 101.4, 101.2, 101.7, 110.6, 100.9, 101.5, 104.8, 102.4, 102.0};
    r = run(big_a, LEN(big_a), big_b, LEN(big_b), TB_MWU_AUTO);
    CHECK(!r.exact && r.u1 == 345);
    CHECK_NEAR(r.p, 1.0470812185736839e-06, 1e-17);
}

/* The exact test with ties against enumeration of every split. */
static void test_exact_vs_enumeration(void)
{
    const double e[] = {3, 1, 4, 1, 5, 9, 2, 6}, f[] = {5, 3, 5, 8, 9, 7, 9, 3};
    tb_mwu r = run(e, 8, f, 8, TB_MWU_EXACT);
    CHECK(r.exact && r.ties);
    CHECK_NEAR(r.p, brute_p(e, 8, f, 8), 1e-12);
    /* Random small samples on a coarse grid, so ties are common. */
    uint64_t s = 12345;
    for (int t = 0; t < 200; t++) {
        double x[10], y[10];
        s = s * 6364136223846793005u + 1442695040888963407u;
        size_t n1 = 1 + (s >> 33) % 9, n2 = 1 + (s >> 45) % 9;
        if (n1 + n2 > 16)
            n2 = 16 - n1;
        for (size_t i = 0; i < n1 + n2; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            double v = (double)((s >> 40) % 7) + (i < n1 ? 0 : (double)(t % 3));
            if (i < n1)
                x[i] = v;
            else
                y[i - n1] = v;
        }
        tb_mwu got = run(x, n1, y, n2, TB_MWU_EXACT);
        double want = brute_p(x, n1, y, n2);
        if (fabs(got.p - want) > 1e-12)
            fprintf(stderr, "case %d: n1 %zu n2 %zu: p %.17g, enumeration %.17g\n", t, n1, n2, got.p, want);
        CHECK_NEAR(got.p, want, 1e-12);
        CHECK(got.p > 0 && got.p <= 1);
    }
}

static void test_edges(void)
{
    tb_mwu r;
    const double x[] = {1, NAN, 2}, none[] = {NAN};
    CHECK(tb_mwu_test(x, 3, none, 1, TB_MWU_AUTO, &r) == -1);
    CHECK(isnan(r.p) && r.n1 == 2 && r.n2 == 0);
    CHECK(tb_mwu_test(x, 0, x, 3, TB_MWU_AUTO, &r) == -1);
    /* NaN samples are dropped, not ranked. */
    const double y[] = {5, 6, NAN, 7};
    CHECK(tb_mwu_test(x, 3, y, 4, TB_MWU_AUTO, &r) == 0);
    CHECK(r.n1 == 2 && r.n2 == 3 && r.u1 == 0);
    CHECK_NEAR(r.p, 2.0 / 10, 1e-15); /* C(5,2) = 10 */
    /* The largest exact size: 30 vs 30 separated gives 2 / C(60,30). */
    double a[30], b[30];
    for (int i = 0; i < 30; i++) {
        a[i] = i;
        b[i] = 100 + i;
    }
    CHECK(tb_mwu_test(a, 30, b, 30, TB_MWU_AUTO, &r) == 0);
    CHECK(r.exact);
    CHECK_NEAR(r.p / tb_mwu_min_p(30, 30), 1, 1e-9);
    CHECK_NEAR(tb_mwu_min_p(30, 30), 2 / 1.1826458156486142e17, 1e-30);
}

int main(void)
{
    test_by_hand();
    test_scipy_exact();
    test_scipy_normal();
    test_exact_vs_enumeration();
    test_edges();
    return check_done();
}
