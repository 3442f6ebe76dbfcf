/* mannwhitney.h — the Mann–Whitney U test (Wilcoxon rank-sum), two-sided.
 *
 * Used by `tokbench compare` on per-repetition (or per-request) samples of
 * two benchmark cases: it asks whether one sample tends to be larger than
 * the other without assuming normal distributions, which timing samples
 * (skewed, with outliers) are not.
 *
 * Definitions (docs/REPORTS.md, "compare"):
 *   ranks: of the pooled samples, ascending, ties get their mean rank;
 *   U1 = R1 - n1 (n1 + 1) / 2, with R1 the rank sum of x
 *      = #{(i,j): x_i > y_j} + 0.5 #{(i,j): x_i == y_j};
 *   U2 = n1 n2 - U1.
 * p-values, two-sided:
 *   exact: the permutation distribution of R1 over all C(n1+n2, n1) ways
 *     to split the pooled ranks (mid-ranks included, so it stays exact with
 *     ties): p = P(|R1 - E R1| >= |r1 - E R1|). Without ties this is
 *     scipy.stats.mannwhitneyu(method="exact").
 *   normal: z = (max(U1, U2) - n1 n2 / 2 - 0.5) / sigma, with the tie
 *     correction sigma^2 = n1 n2 / 12 ((N + 1) - sum(t^3 - t) / (N (N - 1)))
 *     and a continuity correction of 0.5; p = 2 (1 - Phi(z)), at most 1.
 *     This is scipy's method="asymptotic" (use_continuity=True). */
#ifndef TB_MANNWHITNEY_H
#define TB_MANNWHITNEY_H

#include <stddef.h>

typedef enum tb_mwu_method {
    TB_MWU_AUTO = 0, /* exact when n1 + n2 <= TB_MWU_EXACT_MAX, else normal */
    TB_MWU_EXACT,
    TB_MWU_NORMAL,
} tb_mwu_method;

/* Largest pooled size the automatic choice computes exactly: the counting
 * is O(N · n1 · N n1) and a few milliseconds at this size. */
#define TB_MWU_EXACT_MAX 60

typedef struct tb_mwu {
    size_t n1, n2; /* usable samples (NaN dropped) */
    double u1, u2; /* U of x and of y; u1 + u2 = n1 n2 */
    double z;      /* normal approximation's z (NaN when exact) */
    double p;      /* two-sided p-value in [0, 1] */
    int exact;     /* 1: exact permutation distribution */
    int ties;      /* 1: the pooled samples have ties */
} tb_mwu;

/* Test x[0..n1) against y[0..n2). NaN samples are dropped. Returns 0, or
 * -1 when either side has no usable sample (out->p is then NaN). The
 * inputs are not modified. */
int tb_mwu_test(const double *x, size_t n1, const double *y, size_t n2, tb_mwu_method method, tb_mwu *out);

/* The smallest two-sided p-value any data of these sizes can give (exact
 * test, no ties): 2 / C(n1 + n2, n1), at most 1. With 3 runs on each side
 * it is 0.1, so no difference can be significant at 0.05. */
double tb_mwu_min_p(size_t n1, size_t n2);

#endif
