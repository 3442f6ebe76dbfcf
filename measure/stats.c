/* stats.c — see stats.h. Definitions are documented in docs/METRICS.md
 * ("Statistics over repetitions"). */
#define _POSIX_C_SOURCE 200809L
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- PRNG: xoshiro256** (Blackman & Vigna), state filled by splitmix64 so
 * that any 64-bit seed, including 0, gives a nonzero, well-mixed state. */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* ---- ordering helpers. Callers have dropped NaN, so < is a total order. */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void swap_d(double *a, double *b)
{
    double t = *a;
    *a = *b;
    *b = t;
}

static void insertion_sort(double *a, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        double v = a[i];
        size_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

/* nth_element: reorder a[0..n) (n >= 1) so that a[k] holds the k-th
 * smallest (0-based) value, a[0..k) <= a[k] <= a(k..n). Hoare partition
 * around a median-of-three pivot, O(n) on average. A step budget of about
 * 2*log2(n) falls back to qsort on the remaining range, so crafted inputs
 * cannot make it quadratic. */
static void select_kth(double *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1; /* inclusive bounds of the range holding k */
    int budget = 8;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;

    while (hi > lo) {
        size_t len = hi - lo + 1;
        if (len <= 16) {
            insertion_sort(a + lo, len);
            return;
        }
        if (budget-- == 0) {
            qsort(a + lo, len, sizeof *a, cmp_double);
            return;
        }
        /* Order a[lo] <= a[mid] <= a[hi]; the ends then stop the scans
         * below (sentinels), so i and j never leave [lo, hi]. */
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo])
            swap_d(&a[mid], &a[lo]);
        if (a[hi] < a[lo])
            swap_d(&a[hi], &a[lo]);
        if (a[hi] < a[mid])
            swap_d(&a[hi], &a[mid]);
        double piv = a[mid];

        size_t i = lo, j = hi;
        for (;;) {
            do
                i++;
            while (a[i] < piv);
            do
                j--;
            while (a[j] > piv);
            if (i >= j)
                break;
            swap_d(&a[i], &a[j]);
        }
        /* Now a[lo..j] <= piv <= a[j+1..hi], with lo <= j < hi, so both
         * sides are strictly smaller than [lo, hi]. */
        if (k <= j)
            hi = j;
        else
            lo = j + 1;
    }
}

/* Value at fraction t (0..1) between a <= b, computed as numpy's _lerp does
 * (from the nearer end, so the result stays within [a, b]). a == b returns
 * a, which keeps equal infinities from turning into NaN. */
static double lerp(double a, double b, double t)
{
    if (a == b)
        return a;
    double d = b - a;
    return t < 0.5 ? a + d * t : b - d * (1.0 - t);
}

double tb_percentile_sorted(const double *sorted, size_t n, double p)
{
    if (n == 0 || isnan(p))
        return NAN;
    if (p < 0)
        p = 0;
    if (p > 100)
        p = 100;
    double rank = p / 100.0 * (double)(n - 1); /* 0 .. n-1 */
    size_t lo = (size_t)rank;                  /* floor: rank >= 0 */
    if (lo >= n - 1)
        return sorted[n - 1];
    return lerp(sorted[lo], sorted[lo + 1], rank - (double)lo);
}

/* Median of a multiset whose two middle order statistics (one, for odd
 * size) are the j-th (and (j-1)-th) smallest of a[0..m). Reorders a. */
static double median_at(double *a, size_t m, size_t j, int even)
{
    select_kth(a, m, j);
    if (!even)
        return a[j];
    /* The lower middle is the largest of a[0..j) (j >= 1), all <= a[j].
     * Same arithmetic as tb_percentile_sorted(.., 50): t = 0.5. */
    double below = a[0];
    for (size_t i = 1; i < j; i++)
        if (a[i] > below)
            below = a[i];
    return lerp(below, a[j], 0.5);
}

double tb_median_select(double *x, size_t n)
{
    if (n == 0)
        return NAN;
    return median_at(x, n, n / 2, n % 2 == 0);
}

/* Sum with Neumaier compensation: repetition counts are small, but pooled
 * inter-token latencies can reach ~1e5 samples. */
static double sum_compensated(const double *x, size_t n)
{
    double s = 0, c = 0;
    for (size_t i = 0; i < n; i++) {
        double t = s + x[i];
        if (fabs(s) >= fabs(x[i]))
            c += (s - t) + x[i];
        else
            c += (x[i] - t) + s;
        s = t;
    }
    return s + c;
}

/* Uniform index in [0, n): high 32 bits * n / 2^32 (multiply-shift, no
 * division). Its bias, at most n / 2^32 relative, is far below bootstrap
 * noise. The modulo branch is only for n >= 2^32. */
static size_t rand_index(rng *r, size_t n)
{
    uint64_t x = rng_next(r);
    if ((uint64_t)n <= UINT32_MAX)
        return (size_t)(((x >> 32) * (uint64_t)n) >> 32);
    return (size_t)(x % (uint64_t)n);
}

/* Median of one resample of size n drawn with replacement from
 * sorted[0..n); consumes exactly n draws from r. buf holds n doubles.
 *
 * Equivalent to filling buf with the n draws and running quickselect, but
 * a full quickselect over 1e5 values per resample is too slow (branch
 * mispredictions, ~1 ms each). Because the draws are indices into a sorted
 * array, index order is value order, and the resample median's index lies
 * near k = n/2 (sd about sqrt(n)/2). So one pass counts the draws below a
 * window [lo, hi] around k and gathers only the draws inside it (branch
 * free); quickselect then runs on that small window. If the needed order
 * statistics fall outside it (a few percent of resamples), the draws are
 * replayed from the saved state with a 4x wider window, so the result is
 * exactly the full-quickselect median. */
static double resample_median(const double *sorted, size_t n, rng *r,
                              double *buf)
{
    size_t k = n / 2;
    int even = n % 2 == 0;
    size_t first = even ? k - 1 : k; /* lowest order statistic needed */
    size_t w = (size_t)sqrt((double)n) + 8; /* half-width, about 2 sd */
    rng start = *r;
    for (;;) {
        size_t lo = first > w ? first - w : 0;
        size_t hi = n - 1 - k > w ? k + w : n - 1;
        size_t below = 0, cnt = 0;
        *r = start;
        for (size_t i = 0; i < n; i++) {
            size_t idx = rand_index(r, n);
            below += idx < lo;
            buf[cnt] = sorted[idx];          /* cnt <= i < n */
            cnt += idx - lo <= hi - lo;      /* unsigned: idx < lo fails */
        }
        if (below <= first && k < below + cnt)
            return median_at(buf, cnt, k - below, even);
        /* Terminates: once the window is all of [0, n), below = 0 and
         * cnt = n, which always passes the test above. */
        w *= 4;
    }
}

/* Bootstrap percentile interval of the median of sorted[0..n):
 * TB_BOOTSTRAP_RESAMPLES resamples of size n with replacement, each one's
 * median, then the 2.5th and 97.5th percentiles of those medians. Draws
 * index the sorted copy, so the result depends only on the multiset of
 * samples and the seed, not on their input order. buf holds n doubles,
 * meds TB_BOOTSTRAP_RESAMPLES doubles. */
static void bootstrap_median_ci(const double *sorted, size_t n, uint64_t seed,
                                double *buf, double *meds, double *lo,
                                double *hi)
{
    rng r;
    rng_seed(&r, seed);
    for (size_t b = 0; b < TB_BOOTSTRAP_RESAMPLES; b++)
        meds[b] = resample_median(sorted, n, &r, buf);
    qsort(meds, TB_BOOTSTRAP_RESAMPLES, sizeof *meds, cmp_double);
    *lo = tb_percentile_sorted(meds, TB_BOOTSTRAP_RESAMPLES, 2.5);
    *hi = tb_percentile_sorted(meds, TB_BOOTSTRAP_RESAMPLES, 97.5);
}

void tb_stats_compute(const double *x, size_t n, uint64_t seed, tb_stats *out)
{
    tb_stats_compute_ci(x, n, seed, 1, out);
}

void tb_stats_compute_ci(const double *x, size_t n, uint64_t seed, int with_ci, tb_stats *out)
{
    /* Start from the empty result: no usable sample leaves it so. */
    out->n = 0;
    out->median = out->p5 = out->p95 = out->p90 = out->p99 = NAN;
    out->mean = out->stdev = out->cv = NAN;
    out->min = out->max = NAN;
    out->ci_lo = out->ci_hi = NAN;

    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i]))
            m++;
    if (m == 0)
        return;

    double *s = tb_xmalloc(m * sizeof *s);                         /* sorted usable samples */
    double *buf = tb_xmalloc((with_ci ? m : 1) * sizeof *buf);     /* one bootstrap resample */
    double *meds = tb_xmalloc((with_ci ? TB_BOOTSTRAP_RESAMPLES : 1) * sizeof *meds);
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i]))
            s[j++] = x[i];
    qsort(s, m, sizeof *s, cmp_double);

    double min = s[0], max = s[m - 1];
    /* Clamp: rounding can put the mean of near-equal values just outside
     * [min, max]; constant samples then give mean == the constant and
     * stdev exactly 0. */
    double mean = sum_compensated(s, m) / (double)m;
    if (mean < min)
        mean = min;
    if (mean > max)
        mean = max;

    double stdev = 0;
    if (m > 1) {
        /* Two-pass with the correction term (Chan et al.): the second sum
         * removes the rounding error left in mean. */
        double ss = 0, sd = 0;
        for (size_t i = 0; i < m; i++) {
            double d = s[i] - mean;
            ss += d * d;
            sd += d;
        }
        double var = (ss - sd * sd / (double)m) / (double)(m - 1);
        stdev = var > 0 ? sqrt(var) : 0;
    }

    out->n = m;
    out->median = tb_percentile_sorted(s, m, 50);
    out->p5 = tb_percentile_sorted(s, m, 5);
    out->p95 = tb_percentile_sorted(s, m, 95);
    out->p90 = tb_percentile_sorted(s, m, 90);
    out->p99 = tb_percentile_sorted(s, m, 99);
    out->mean = mean;
    out->stdev = stdev;
    out->cv = mean == 0 ? NAN : stdev / fabs(mean);
    out->min = min;
    out->max = max;
    if (with_ci)
        bootstrap_median_ci(s, m, seed, buf, meds, &out->ci_lo, &out->ci_hi);

    free(s);
    free(buf);
    free(meds);
}
