/* serve_metrics.h — what `tokbench serve` says at GET /metrics: its
 * counters and gauges (kept by the dispatcher, serve_batch.c, under the
 * server's mutex) and their Prometheus text (exposition format 0.0.4).
 * A function of the figures alone (no server, no libmicrohttpd), so
 * tests/unit/test_serve_metrics.c checks exactly the text served.
 *
 * Names: vLLM's where the meaning is the same, so that dashboards and
 * tokbench's telemetry (docs/METRICS.md) read both servers alike; else
 * tokbench_ names. Every sample has the label model_name="LABEL" (the
 * served backend's label, as vLLM labels its model):
 *
 *   vllm:num_requests_running     gauge    requests in the backend (in a
 *                                          slot, or in the static batch
 *                                          that runs), not ended yet
 *   vllm:num_requests_waiting     gauge    requests queued for a slot or batch
 *   tokbench_kv_slots             gauge    the stepped session's slots
 *                                          (--max-batch; 0 with static batches)
 *   tokbench_kv_slots_used        gauge    slots holding a request (each slot
 *                                          holds a request's whole context,
 *                                          unlike vLLM's KV blocks in use:
 *                                          hence not vllm:kv_cache_usage_perc)
 *   vllm:prompt_tokens_total      counter  prompt tokens of requests that ended well
 *   vllm:generation_tokens_total  counter  their completion tokens (usage.completion_tokens)
 *   tokbench_requests_total       counter  requests that ended, by outcome:
 *                                          ok, failed, gone (client left)
 *   tokbench_step_duration_seconds histogram one step of the stepped
 *                                          session, sent to answered (continuous
 *                                          batching; a static batch is one call)
 *   tokbench_step_requests_total  counter  the requests each step carried
 *                                          (in the session during it), summed:
 *                                          over the steps' count, the batch's
 *                                          mean size
 */
#ifndef TB_SERVE_METRICS_H
#define TB_SERVE_METRICS_H

#include <stdint.h>

#include "util.h"

/* Upper bounds of tokbench_step_duration_seconds's buckets, seconds (+Inf
 * after them). */
#define TB_SERVE_STEP_BUCKETS 14

typedef struct tb_serve_stats {
    /* gauges */
    uint32_t running, waiting;
    uint32_t slots, slots_used;
    /* counters */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t ok, failed, gone;
    /* the step histogram: counts per bucket (not cumulative; the last is
     * +Inf), their sum */
    uint64_t step_bucket[TB_SERVE_STEP_BUCKETS + 1];
    double step_sum_s;
    uint64_t step_requests; /* the requests the steps carried, summed */
} tb_serve_stats;

/* Count one step of `seconds` that carried `requests` requests. */
void tb_serve_stats_step(tb_serve_stats *st, double seconds, uint32_t requests);

/* Append st as Prometheus text, every sample labelled model_name=model
 * (escaped as the format says). */
void tb_serve_metrics_text(const tb_serve_stats *st, const char *model, tb_str *out);

#endif
