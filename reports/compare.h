/* compare.h — `tokbench compare`: two sessions (a baseline A and a
 * candidate B), or two backends of one session, case by case.
 *
 * Cases match when their dimensions and swept options are equal (and,
 * between sessions, their backend labels). Between two backends a case
 * without a dimension matches every value of it: an AR backend (no steps)
 * is compared with the diffusion backend at each step count. For every
 * matching pair and metric: both medians, their ratio B/A, a two-sided
 * Mann–Whitney U test on the raw samples (per repetition for agg_tps,
 * decode_tps, wall_ms; per request for req_tps, ttft_ms, tpot_ms, e2e_ms)
 * and a verdict: faster, slower (p < alpha, direction by the rank
 * statistic; lower is better for times) or no significant change. */
#ifndef TB_REPORT_COMPARE_H
#define TB_REPORT_COMPARE_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tb_compare_opts {
    int64_t a, b;                      /* sessions; equal when comparing backends */
    const char *backend_a, *backend_b; /* NULL: match backends by label */
    char *const *metrics;              /* NULL: agg_tps, req_tps, ttft_ms, e2e_ms */
    size_t n_metrics;
    double alpha;    /* significance level, e.g. 0.05 */
    double fail_pct; /* a regression is "slower" by more than this %; NaN: none */
    /* Gates beyond speed (NaN: off): accuracy lower in B by more than
     * this many percentage points; B's failed share of requests above
     * this fraction; B's p99 TTFT above A's by more than this %. */
    double fail_acc_pp, fail_err_rate, fail_p99_ttft_pct;
} tb_compare_opts;

/* Is any gate set (then compare's exit status counts regressions)? */
int tb_compare_gated(const tb_compare_opts *o);

typedef struct tb_compare_result {
    size_t pairs;       /* matched case pairs */
    size_t only_a, only_b;
    size_t rows;        /* pairs × metrics */
    size_t faster, slower, same, untested;
    size_t regressions; /* with a gate set: slower beyond fail_pct, failed or
                           degraded in B only, or past another gate */
} tb_compare_result;

/* Print the comparison to `out`. 0, or -1 with *err (bad session, backend
 * or metric, or no matching case). */
int tb_compare_run(sqlite3 *db, const tb_compare_opts *o, FILE *out, tb_compare_result *res, char **err);

/* The metrics compare knows, comma-separated (for --help and errors). */
const char *tb_compare_metrics(void);

#endif
