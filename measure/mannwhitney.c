/* mannwhitney.c — see mannwhitney.h. */
#include "mannwhitney.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "util.h"

typedef struct pooled {
    double v;
    int group; /* 0: x, 1: y */
} pooled;

static int cmp_pooled(const void *a, const void *b)
{
    double x = ((const pooled *)a)->v, y = ((const pooled *)b)->v;
    return (x > y) - (x < y);
}

/* Number of subsets of `k` of the doubled ranks r2[0..n) whose sum
 * deviates from `center2` by at least `dev2`, over the number of all
 * subsets of k: the exact two-sided p-value. Sums of doubled mid-ranks are
 * integers, so the comparison is exact. counts[j][s] = subsets of size j
 * with sum s (a double: C(60, 30) ~ 1.2e17 needs more than 32 bits, and
 * ratios of counts need no more than double precision). */
static double exact_p(const int64_t *r2, size_t n, size_t k, int64_t center2, int64_t dev2)
{
    int64_t smax = 0;
    for (size_t i = 0; i < n; i++)
        smax += r2[i];
    size_t width = (size_t)smax + 1;
    double *counts = tb_xcalloc((k + 1) * width, sizeof *counts);
    counts[0] = 1;
    int64_t reach = 0; /* largest sum seen so far: bounds the inner loop */
    for (size_t i = 0; i < n; i++) {
        reach += r2[i];
        size_t top = i + 1 < k ? i + 1 : k;
        for (size_t j = top; j >= 1; j--) {
            double *to = counts + j * width, *from = counts + (j - 1) * width;
            for (int64_t s = reach; s >= r2[i]; s--)
                to[s] += from[s - r2[i]];
        }
    }
    double hit = 0, all = 0;
    const double *row = counts + k * width;
    for (int64_t s = 0; s <= smax; s++) {
        all += row[s];
        if (llabs(s - center2) >= dev2)
            hit += row[s];
    }
    free(counts);
    double p = hit / all;
    return p > 1 ? 1 : p;
}

int tb_mwu_test(const double *x, size_t n1_in, const double *y, size_t n2_in, tb_mwu_method method, tb_mwu *out)
{
    *out = (tb_mwu){.u1 = NAN, .u2 = NAN, .z = NAN, .p = NAN};
    pooled *a = tb_xmalloc((n1_in + n2_in + 1) * sizeof *a);
    size_t n = 0, n1 = 0, n2 = 0;
    for (size_t i = 0; i < n1_in; i++)
        if (!isnan(x[i])) {
            a[n++] = (pooled){x[i], 0};
            n1++;
        }
    for (size_t i = 0; i < n2_in; i++)
        if (!isnan(y[i])) {
            a[n++] = (pooled){y[i], 1};
            n2++;
        }
    out->n1 = n1;
    out->n2 = n2;
    if (n1 == 0 || n2 == 0) {
        free(a);
        return -1;
    }
    qsort(a, n, sizeof *a, cmp_pooled);

    /* Doubled mid-ranks: a tie group at sorted positions [i, j) has ranks
     * i+1 .. j, mean (i + 1 + j) / 2, doubled an integer. */
    int64_t *r2 = tb_xmalloc(n * sizeof *r2);
    int64_t w2 = 0;   /* doubled rank sum of x */
    double tie = 0;   /* sum of t^3 - t over tie groups */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && a[j].v == a[i].v)
            j++;
        double t = (double)(j - i);
        tie += t * t * t - t;
        for (size_t k = i; k < j; k++) {
            r2[k] = (int64_t)(i + 1 + j);
            if (a[k].group == 0)
                w2 += r2[k];
        }
        i = j;
    }
    free(a);
    out->ties = tie > 0;
    double dn1 = (double)n1, dn2 = (double)n2, dn = (double)n;
    out->u1 = (double)w2 / 2 - dn1 * (dn1 + 1) / 2;
    out->u2 = dn1 * dn2 - out->u1;

    int exact = method == TB_MWU_EXACT || (method == TB_MWU_AUTO && n <= TB_MWU_EXACT_MAX);
    if (exact) {
        /* Count subsets of the smaller side's size; the deviation of the
         * other side's rank sum from its mean is the same. */
        int64_t center2 = (int64_t)n1 * (int64_t)(n + 1);
        int64_t dev2 = llabs(w2 - center2);
        size_t k = n1 < n2 ? n1 : n2;
        out->p = exact_p(r2, n, k, k == n1 ? center2 : (int64_t)n2 * (int64_t)(n + 1), dev2);
        out->exact = 1;
    } else {
        double mu = dn1 * dn2 / 2;
        double var = dn1 * dn2 / 12 * ((dn + 1) - tie / (dn * (dn - 1)));
        double u = out->u1 > out->u2 ? out->u1 : out->u2;
        if (var <= 0) { /* every sample equal: no evidence of a difference */
            out->z = 0;
            out->p = 1;
        } else {
            out->z = (u - mu - 0.5) / sqrt(var);
            double p = erfc(out->z / sqrt(2.0));
            out->p = p > 1 ? 1 : p;
        }
    }
    free(r2);
    return 0;
}

double tb_mwu_min_p(size_t n1, size_t n2)
{
    if (n1 == 0 || n2 == 0)
        return 1;
    /* C(n1 + n2, k), k = min: a product of k ratios, exact while small. */
    size_t k = n1 < n2 ? n1 : n2, n = n1 + n2;
    double c = 1;
    for (size_t i = 1; i <= k; i++)
        c = c * (double)(n - k + i) / (double)i;
    double p = 2 / c;
    return p > 1 ? 1 : p;
}
