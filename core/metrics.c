/* metrics.c — see metrics.h and docs/METRICS.md. */
#include "metrics.h"

#include <math.h>

void tb_request_metrics_compute(int64_t submit_ns, int64_t done_ns, uint32_t n_out,
                                const int64_t *em_t, size_t n_em, tb_request_metrics *out)
{
    int64_t first = n_em ? em_t[0] : done_ns;
    int64_t last = n_em ? em_t[n_em - 1] : done_ns;
    for (size_t i = 0; i < n_em; i++) { /* do not trust arrival order */
        if (em_t[i] < first)
            first = em_t[i];
        if (em_t[i] > last)
            last = em_t[i];
    }
    int64_t done = done_ns > last ? done_ns : last;
    out->submit_ns = submit_ns;
    out->done_ns = done;
    out->ttft_ns = first - submit_ns;
    out->e2e_ns = done - submit_ns;
    out->tpot_ns = n_out >= 2 ? (double)(out->e2e_ns - out->ttft_ns) / (double)(n_out - 1) : NAN;
    out->tps = out->e2e_ns > 0 ? (double)n_out / ((double)out->e2e_ns * 1e-9) : NAN;
}

void tb_rep_metrics_compute(const tb_request_metrics *req, const uint32_t *n_out, const int *ok,
                            size_t n, int64_t prefill_ns, int64_t forward_passes,
                            tb_rep_metrics *out)
{
    int64_t start = 0, end = 0;
    uint64_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || req[i].submit_ns < start)
            start = req[i].submit_ns;
        if (i == 0 || req[i].done_ns > end)
            end = req[i].done_ns;
        if (ok[i])
            tokens += n_out[i];
    }
    out->wall_ns = end - start;
    out->output_tokens = tokens;
    double wall_s = (double)out->wall_ns * 1e-9;
    out->aggregate_tps = out->wall_ns > 0 ? (double)tokens / wall_s : NAN;
    out->decode_tps = prefill_ns >= 0 && prefill_ns < out->wall_ns
                          ? (double)tokens / ((double)(out->wall_ns - prefill_ns) * 1e-9)
                          : NAN;
    out->tokens_per_forward = forward_passes > 0 ? (double)tokens / (double)forward_passes : NAN;
}

double tb_roofline_pct(double flops, double bytes, double peak_flops, double peak_bytes_per_s, int64_t wall_ns)
{
    if (!(flops > 0) || !(bytes > 0) || !(peak_flops > 0) || !(peak_bytes_per_s > 0) || wall_ns <= 0 ||
        !isfinite(flops) || !isfinite(bytes) || !isfinite(peak_flops) || !isfinite(peak_bytes_per_s))
        return NAN;
    double t_compute = flops / peak_flops, t_memory = bytes / peak_bytes_per_s;
    return 100.0 * (t_compute > t_memory ? t_compute : t_memory) / ((double)wall_ns * 1e-9);
}
