/* record.h — a finished case as the runner hands it to the store: its
 * samples (one per generate() call), their requests, and the case's
 * statistics per metric. Built by metrics.c (tb_case_metrics) and
 * quality.c, written by store.c; nothing here knows SQL or the wire. */
#ifndef TB_RECORD_H
#define TB_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "stats.h"

struct tb_case; /* plan.h */

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
    uint32_t steps_done;
    uint32_t answer_tokens;  /* TB_UNKNOWN_COUNT: not reported */
    uint64_t output_hash;
    char *emissions_json;    /* [[ms since submit, tokens], ...] */
    int32_t prompt_idx;      /* item of the prompt set; -1: synthetic */
    int scored;              /* counted in the case's quality metrics */
    char *output_text;       /* the answer text (prompt sets), or NULL */
    double scores[TB_N_SCORES]; /* NaN: not applicable */
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
    tb_request_record *requests;
} tb_sample_record;

typedef struct tb_metric_record {
    const char *name; /* docs/METRICS.md */
    const char *unit;
    tb_stats st;
    char *name_buf;   /* when the name is built (accuracy_TAG): owned */
} tb_metric_record;

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
} tb_case_record;

/* Append a metric row; returns it (name and unit borrowed). */
tb_metric_record *tb_case_record_add_metric(tb_case_record *rec, const char *name, const char *unit);

/* Free what a record owns (samples, requests, metric rows) and zero
 * those fields; the borrowed strings and the case stay. */
void tb_case_record_free(tb_case_record *rec);

#endif
