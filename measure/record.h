/* record.h — a finished case as the runner hands it to the store: its
 * samples (one per generate() call), their requests, and the case's
 * statistics per metric. Built by metrics.c (tb_case_metrics, whose
 * docs/METRICS.md defines every field) and quality.c, written by store.c;
 * nothing here knows SQL or the wire. */
#ifndef TB_RECORD_H
#define TB_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "stats.h"
#include "tokbench/backend.h"

struct tb_case; /* plan.h */

/* The figures of one request (metrics.c computes them; all ns). */
typedef struct tb_request_metrics {
    int64_t submit_ns; /* as given */
    int64_t done_ns;   /* max(reported done, last emission) */
    int64_t ttft_ns;   /* first emission - submit */
    int64_t e2e_ns;    /* done - submit */
    double tpot_ns;    /* (e2e - ttft) / (n_out - 1); NaN when n_out < 2 */
    double tps;        /* n_out / e2e, tokens/s; NaN when e2e <= 0 */
} tb_request_metrics;

/* The figures of one repetition (one generate() call). */
typedef struct tb_rep_metrics {
    int64_t wall_ns;           /* last done - first submit */
    uint64_t output_tokens;    /* sum of n_out over successful requests */
    double aggregate_tps;      /* output_tokens / wall */
    double decode_tps;         /* output_tokens / (wall - prefill); NaN when
                                  prefill is unknown (< 0) or >= wall */
    double tokens_per_forward; /* output_tokens / forward_passes; NaN if 0 */
} tb_rep_metrics;

/* Per-request quality scores, stored in the score table under these names
 * (quality.c computes them). */
enum { TB_SCORE_CORRECT, TB_SCORE_REPETITION, TB_SCORE_DISTINCT, TB_N_SCORES };
extern const char *const tb_score_names[TB_N_SCORES];

/* One request of one sample, metrics already derived. */
typedef struct tb_request_record {
    int status;              /* tb_status */
    char *error;             /* NULL when ok */
    int64_t submit_offset_ns; /* since the call's first submit */
    tb_request_metrics m;
    uint32_t n_out;          /* engine's count */
    int32_t recount;         /* -1: not re-counted */
    int64_t output_ids;      /* ids the backend returned; -1: none (text only) */
    int count_mismatch;      /* the output-length check's verdict:
                                TB_COUNT_* (tb_count_mismatch) */
    uint32_t steps_done;
    uint32_t blocks_done;    /* 0: not reported */
    uint32_t answer_tokens;  /* TB_UNKNOWN_COUNT: not reported */
    uint64_t output_hash;
    uint64_t prompt_hash;    /* which prompt it was given (worker.c); 0: unknown */
    char *emissions_json;    /* [[ms since submit, tokens], ...] */
    int32_t prompt_idx;      /* item of the prompt set; -1: synthetic */
    int scored;              /* counted in the case's quality metrics */
    uint32_t prompt_tokens;  /* as sent (tb_result.prompt_tokens); 0: unknown */
    uint32_t max_tokens;     /* output tokens asked for */
    char *output_text;       /* the answer text (prompt sets), or NULL */
    double scores[TB_N_SCORES]; /* NaN: not applicable */
    tb_spec_counts spec;     /* drafting and verification counts; all 0:
                                not speculative (docs/METRICS.md) */
    /* canvas models (docs/METRICS.md, "Canvas models"): the request's
     * canvases in total (0: none reported) and each one kept, as
     * [[steps, committed, positions, ms since submit], ...] (NULL: none) */
    int64_t canvases, canvas_steps, canvas_committed, canvas_positions;
    char *canvases_json;
    /* its stream: median tokens per chunk and median gap between chunks
     * (ms; NaN: fewer than 2 chunks, or not streamed), canvas-bursty 0/1 */
    double tokens_per_chunk, chunk_gap_ms;
    int bursty;
} tb_request_record;

typedef struct tb_sample_record {
    uint32_t repetition;     /* 0-based over warm-ups then measured */
    int warmup;
    uint32_t n_requests;
    tb_rep_metrics m;
    int64_t prefill_ns, decode_ns, forward_passes; /* -1, -1, 0: not reported */
    int64_t peak_device_bytes, energy_mj;          /* -1: unknown or not claimed */
    int64_t recount_tokens;  /* -1: none */
    uint32_t n_emissions;
    int64_t runner_ns;
    int64_t start_ns;        /* the call's first submit, host monotonic ns */
    double client_busy;      /* tb_result.client_busy, 0..1; 0: not reported */
    int64_t draft_ns;        /* tb_result.draft_ns; 0: not speculative */
    tb_request_record *requests;
} tb_sample_record;

typedef struct tb_metric_record {
    const char *name; /* docs/METRICS.md */
    const char *unit;
    tb_stats st;
    char *name_buf;   /* when the name is built (accuracy_TAG): owned */
} tb_metric_record;

/* A time series sampled while the case ran (core/telemetry.h). */
typedef struct tb_telemetry_series {
    char *source; /* the scraped URL, or "nvml" */
    char *name;   /* metric{labels}, or gpuN:reading */
} tb_telemetry_series;
typedef struct tb_telemetry_point {
    uint32_t series; /* index into tseries */
    int64_t t_ns;    /* since the sampler started */
    double value;
} tb_telemetry_point;

typedef struct tb_case_record {
    int64_t session_id, backend_id;
    const struct tb_case *c;
    const char *status;      /* "ok", "failed", "skipped" */
    const char *error;
    const char *started_at, *finished_at;
    int64_t case_wall_ns;    /* -1: not run */
    int64_t host_peak_rss;   /* -1: unknown */
    tb_sample_record *samples;
    size_t n_samples;
    tb_metric_record *metrics;
    size_t n_metrics;
    /* a run of a load search (core/search.h): 0 when not */
    int64_t search_id;
    const char *search_role; /* "synchronous", "throughput", "rate", "probe" */
    int search_pass;         /* a probe: 1 met the limits, 0 not; -1: not judged */
    tb_telemetry_series *tseries;
    size_t n_tseries;
    tb_telemetry_point *tpoints;
    size_t n_tpoints;
    /* scrapes of the telemetry's metrics_url (run/telemetry.h): made,
     * failed, the first failure's reason (owned; NULL: none); scrapes 0:
     * none made (nothing stored) */
    int64_t scrapes, scrapes_failed;
    char *scrape_error;
} tb_case_record;

/* Append a metric row; returns it (name and unit borrowed). */
tb_metric_record *tb_case_record_add_metric(tb_case_record *rec, const char *name, const char *unit);

/* Free what a record owns (samples, requests, metric rows) and zero
 * those fields; the borrowed strings and the case stay. */
void tb_case_record_free(tb_case_record *rec);

#endif
