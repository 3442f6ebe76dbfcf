/* stats.h — summary statistics over repeated measurements.
 *
 * One definition of each statistic tokbench reports (docs/METRICS.md):
 * median, p5, p95, mean, sample stdev, CV, min, max, and a bootstrap 95%
 * confidence interval of the median. */
#ifndef TB_STATS_H
#define TB_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_stats {
    size_t n;       /* samples used (NaN samples are dropped) */
    double median;  /* = tb_percentile(50) */
    double p5;      /* 5th percentile */
    double p95;     /* 95th percentile */
    double p90, p99; /* 90th and 99th percentiles (latency tails) */
    double mean;
    double stdev;   /* sample standard deviation (n - 1); 0 when n == 1 */
    double cv;      /* stdev / |mean|; NaN when mean == 0 */
    double min, max;
    double ci_lo;   /* bootstrap 95% CI of the median (percentile method) */
    double ci_hi;
} tb_stats;

/* Resamples drawn for the bootstrap CI. */
#define TB_BOOTSTRAP_RESAMPLES 1000

/* Percentile p (0..100) of `sorted` (ascending, n >= 1): linear
 * interpolation between closest ranks, rank = p/100 * (n - 1) — the same
 * as numpy.percentile's default ("linear"). */
double tb_percentile_sorted(const double *sorted, size_t n, double p);

/* Median of x[0..n) (n >= 1, no NaN) by quickselect, O(n) on average;
 * reorders x. Same value as tb_percentile_sorted(sorted x, n, 50). The
 * bootstrap uses the same selection; public so tests can check it against
 * a sort. */
double tb_median_select(double *x, size_t n);

/* Summarize x[0..n). The input is not modified. NaN samples are ignored.
 * With no usable sample, out->n = 0 and every other field is NaN.
 * The bootstrap uses a deterministic PRNG seeded with `seed`, so the same
 * samples and seed give the same interval. Cannot fail: memory comes
 * from util.h's allocators, which abort when there is none. */
void tb_stats_compute(const double *x, size_t n, uint64_t seed, tb_stats *out);

/* The same; with_ci == 0 skips the bootstrap (ci_lo, ci_hi stay NaN).
 * Used for pooled samples that are not independent (inter-token
 * latencies within a request), where a bootstrap CI would mislead and is
 * the dominant cost. */
void tb_stats_compute_ci(const double *x, size_t n, uint64_t seed, int with_ci, tb_stats *out);

#endif
