/* metrics.h — the one definition of every per-request and per-repetition
 * figure (docs/METRICS.md). All inputs are host-clock nanoseconds. */
#ifndef TB_METRICS_H
#define TB_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* One emission event: n_tokens of request `request` available at t_ns. */
typedef struct tb_emission {
    int64_t t_ns;
    uint32_t request;
    uint32_t n_tokens;
} tb_emission;

typedef struct tb_request_metrics {
    int64_t submit_ns; /* as given */
    int64_t done_ns;   /* max(reported done, last emission) */
    int64_t ttft_ns;   /* first emission - submit */
    int64_t e2e_ns;    /* done - submit */
    double tpot_ns;    /* (e2e - ttft) / (n_out - 1); NaN when n_out < 2 */
    double tps;        /* n_out / e2e, tokens/s; NaN when e2e <= 0 */
} tb_request_metrics;

/* Metrics of one request from its submit time, reported completion time
 * (0: unknown), output token count and emission times em_t[n_em] (in
 * order of arrival). A request without emissions is taken to emit all its
 * tokens at done_ns (a non-streaming backend). */
void tb_request_metrics_compute(int64_t submit_ns, int64_t done_ns, uint32_t n_out,
                                const int64_t *em_t, size_t n_em,
                                tb_request_metrics *out);

typedef struct tb_rep_metrics {
    int64_t wall_ns;           /* last done - first submit */
    uint64_t output_tokens;    /* sum of n_out over successful requests */
    double aggregate_tps;      /* output_tokens / wall */
    double decode_tps;         /* output_tokens / (wall - prefill); NaN when
                                  prefill is unknown (< 0) or >= wall */
    double tokens_per_forward; /* output_tokens / forward_passes; NaN if 0 */
} tb_rep_metrics;

/* Metrics of one repetition (one generate() call) from its requests'
 * submit and done times (already resolved by tb_request_metrics_compute),
 * their output counts, and the backend's prefill time and forward passes.
 * ok[i] == 0 excludes request i (failed) from the token count. */
void tb_rep_metrics_compute(const tb_request_metrics *req, const uint32_t *n_out,
                            const int *ok, size_t n, int64_t prefill_ns,
                            int64_t forward_passes, tb_rep_metrics *out);

/* Roofline efficiency of one call, percent: the shortest time the device's
 * ceilings allow for the call's work, over the time it took,
 *     100 * max(flops / peak_flops, bytes / peak_bytes_per_s) / wall,
 * which equals achieved FLOP/s over the roofline's attainable FLOP/s at
 * the call's arithmetic intensity flops/bytes. NaN when a figure is
 * missing (<= 0). */
double tb_roofline_pct(double flops, double bytes, double peak_flops, double peak_bytes_per_s,
                       int64_t wall_ns);

#endif
