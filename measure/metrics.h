/* metrics.h — the one definition of every per-request and per-repetition
 * figure (docs/METRICS.md). All inputs are host-clock nanoseconds. */
#ifndef TB_METRICS_H
#define TB_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "record.h"
#include "tokbench/backend.h"

/* One emission event: n_tokens of request `request` available at t_ns. */
typedef struct tb_emission {
    int64_t t_ns;
    uint32_t request;
    uint32_t n_tokens;
} tb_emission;

/* The raw figures of one generate() call as the worker measured them
 * (wire.h's RESULT payload carries them byte for byte). */
typedef struct tb_raw_call {
    uint32_t is_warmup;
    uint32_t n_requests;
    uint32_t n_emissions;
    uint32_t pad;
    int64_t t_call_ns;   /* host clock just before generate() */
    int64_t t_return_ns; /* just after it returned */
    int64_t runner_ns;   /* worker time spent around the call (setup,
                            re-counting), outside generate() */
    int64_t prefill_ns, decode_ns; /* -1: not reported */
    int64_t forward_passes;        /* 0: not reported */
    int64_t peak_device_bytes, energy_mj; /* -1: unknown */
    double flops, bytes, peak_flops, peak_bytes_per_s; /* the roofline; 0: not reported */
    double client_busy;  /* tb_result.client_busy, 0..1; 0: not reported */
    double expert_reads, moe_tokens; /* tb_result's (MoE); 0: not reported */
    int64_t draft_ns;    /* tb_result.draft_ns: the call's drafting time;
                            0: not speculative (or not reported) */
} tb_raw_call;

/* Bytes of a failed request's message kept (its NUL included): the
 * whole of what a plugin says, through tb_host.request_error when it is
 * longer than tb_request_result.error (backend.h); the http backend keeps
 * 512 bytes of a server's error body. */
#define TB_RAW_ERROR_SIZE 768

/* The raw figures of one request of a call. */
typedef struct tb_raw_request {
    int64_t t_submit_ns; /* resolved: 0 from the plugin -> t_call_ns */
    int64_t t_done_ns;   /* as reported (0: unknown) */
    int32_t status;      /* tb_status */
    uint32_t n_output_tokens;
    int32_t recount;     /* detokenize -> tokenize count; -1: no tokenizer */
    uint32_t has_ids;    /* 1: the backend returned output ids, n_ids of
                            them; 0: text only, or nothing */
    uint32_t n_ids;      /* tb_request_result.n_output_ids */
    uint32_t steps_done;
    uint32_t blocks_done; /* tb_result.blocks_done; 0: not reported */
    uint32_t answer_tokens; /* before the first EOS; TB_UNKNOWN_COUNT */
    uint32_t text_len;    /* bytes of output text (prompt sets) */
    uint64_t output_hash; /* FNV-1a of output ids (or text); 0: none */
    uint64_t prompt_hash; /* which prompt (worker.c's rule); never 0 */
    int32_t prompt_idx;   /* item of the prompt set; -1: synthetic */
    uint32_t scored;      /* 1: counts towards scores (not a warm-up or a
                             request that fills up the last batch) */
    uint32_t prompt_tokens; /* the prompt's length as the backend sent it
                               (tb_result.prompt_tokens); 0: unknown */
    uint32_t max_tokens;  /* output tokens it asked for (resolved: the
                             call's max_new_tokens unless the backend
                             said otherwise) */
    char error[TB_RAW_ERROR_SIZE]; /* "class: message" when status is not ok:
                                      the whole message (a server's JSON
                                      message included), up to this */
    tb_spec_counts spec;  /* tb_result.spec[i]; all 0: not speculative
                             (tb_spec_check holds: the worker checked it,
                             the runner's decode checks it again) */
    uint32_t has_canvas;  /* 1: a canvas model's record of this request
                             (tb_result.canvas[i]; tb_canvas_check holds,
                             as for spec) follows the call's emissions on
                             the wire (tb_call_view.canvas[i]); 0: none. A
                             record is ~6 KB, so only canvas models carry
                             one, and only on the wire */
} tb_raw_request;

/* Bytes of a request's canvas record on the wire: tb_canvas_counts up to
 * at[], then its n kept canvases. */
#define TB_CANVAS_WIRE_BYTES(n) (offsetof(tb_canvas_counts, at) + (size_t)(n) * sizeof(tb_canvas))


/* Metrics of one request from its submit time, reported completion time
 * (0: unknown), output token count and emission times em_t[n_em] (in
 * order of arrival). A request without emissions is taken to emit all its
 * tokens at done_ns (a non-streaming backend). */
void tb_request_metrics_compute(int64_t submit_ns, int64_t done_ns, uint32_t n_out,
                                const int64_t *em_t, size_t n_em,
                                tb_request_metrics *out);


/* Metrics of one repetition (one generate() call) from its requests'
 * submit and done times (already resolved by tb_request_metrics_compute),
 * their output counts, and the backend's prefill time and forward passes.
 * ok[i] == 0 excludes request i (failed) from the token count. */
void tb_rep_metrics_compute(const tb_request_metrics *req, const uint32_t *n_out,
                            const int *ok, size_t n, int64_t prefill_ns,
                            int64_t forward_passes, tb_rep_metrics *out);

/* The rate an open-loop call sent (docs/METRICS.md, sent_rate): its n
 * requests' submit times (the scheduled sends) span n - 1 gaps, so
 *     sent_rate = (n - 1) / (last submit - first submit)   requests/s,
 * the reciprocal of the mean gap, which estimates 1 / request_rate
 * without bias. NaN with fewer than 2 requests or no span. */
double tb_sent_rate(const tb_request_metrics *req, size_t n);

/* Does a successful request meet the goodput limits (ms; <= 0: no
 * limit; a TPOT undefined for a one-token answer holds)? The one
 * definition: the goodput metric and the load searches' share. */
int tb_request_good(const tb_request_metrics *m, double goodput_ttft_ms, double goodput_tpot_ms);

/* The output-length check's verdict on a request (docs/METRICS.md,
 * "Output-length check"), stored as request.count_mismatch. */
enum {
    TB_COUNT_HELD = 0,     /* the count held, or there was nothing to check */
    TB_COUNT_NOT_IDS = 1,  /* not the number of output ids returned */
    TB_COUNT_NOT_TEXT = 2, /* not what its text re-tokenizes to */
};

/* The check of a successful request's count (a failed one's is in no
 * rate: held). A backend that returned output ids counts those ids: its
 * count fails when it is not their number, whatever their text
 * re-tokenizes to (a model may emit ids that are not the tokenizer's own
 * split of its text). One that returned text alone (a server's usage) is
 * held to the text's re-count, recount (< 0: not re-counted, nothing to
 * hold it to). The one definition: the worker's calls and a shard join's
 * both come here. */
int tb_count_mismatch(const tb_raw_request *q);

/* Roofline efficiency of one call, percent: the shortest time the device's
 * ceilings allow for the call's work, over the time it took,
 *     100 * max(flops / peak_flops, bytes / peak_bytes_per_s) / wall,
 * which equals achieved FLOP/s over the roofline's attainable FLOP/s at
 * the call's arithmetic intensity flops/bytes. NaN when a figure is
 * missing (<= 0). */
double tb_roofline_pct(double flops, double bytes, double peak_flops, double peak_bytes_per_s,
                       int64_t wall_ns);

/* ------------------------------------------- speculative decoding */

/* Is a request's tb_spec_counts possible (backend.h's promises)? NULL,
 * or why not, written into why[n] ("accepted 9 > drafted 8"). Checked:
 * draft_len <= TB_SPEC_MAX_DRAFT; accepted <= drafted when drafted is
 * reported (a server may give accepted counts without drafted ones);
 * no verification, nothing accepted or drafted; and at every position
 * i: accepted_at[i] <= drafted_at[i] <= verifications, both 0 from
 * draft_len on. All zero (not speculative) holds. */
const char *tb_spec_check(const tb_spec_counts *s, char *why, size_t n);

/* Is the request speculative (some verification, or a count of one)? */
int tb_spec_any(const tb_spec_counts *s);

/* The speculative metrics (docs/METRICS.md); NaN where not defined:
 *   acceptance_length = (accepted + verifications) / verifications
 *       (the mean tokens a verification yields: its accepted draft
 *       tokens plus the target's own bonus token); NaN: no verification
 *   acceptance_rate   = accepted / drafted; NaN: nothing drafted
 *   acceptance_at(i)  = accepted_at[i] / drafted_at[i], i 0-based (the
 *       metric acceptance_at_<i+1>); NaN: position i never drafted
 *   draft_time_share  = draft_ns / decode_ns of a call; NaN: draft_ns or
 *       decode_ns not > 0
 *   target_forwards_per_token = forward_passes / output tokens of a
 *       speculative call (its forward_passes count the target's
 *       forwards: backend.h); NaN: either not > 0 */
double tb_acceptance_length(const tb_spec_counts *s);
double tb_acceptance_rate(const tb_spec_counts *s);
double tb_acceptance_at(const tb_spec_counts *s, uint32_t i);
double tb_draft_time_share(int64_t draft_ns, int64_t decode_ns);
double tb_target_forwards_per_token(int64_t forward_passes, uint64_t output_tokens);

/* ------------------------------------------- canvas models */

/* Is a request's tb_canvas_counts possible (backend.h's promises)? NULL,
 * or why not, into why[n]. Checked: n <= TB_CANVAS_MAX, n_past only once
 * at[] is full and `past` zero without it; every canvas has a step and
 * at least one position a step (past: n_past of each); commit times
 * inside [t_lo, t_hi] and in order; the committed tokens sum to at most
 * n_out, the steps to at most steps_done (when it is reported, > 0).
 * All zero (not a canvas model) holds. */
const char *tb_canvas_check(const tb_canvas_counts *c, uint32_t n_out, uint32_t steps_done, int64_t t_lo,
                            int64_t t_hi, char *why, size_t n);

/* A request's canvases in total (at[] and past): count, steps, committed
 * tokens, positions. */
typedef struct tb_canvas_sum {
    uint64_t canvases, steps, committed, positions;
} tb_canvas_sum;
void tb_canvas_total(const tb_canvas_counts *c, tb_canvas_sum *s);

/* The canvas metrics (docs/METRICS.md); NaN where not defined:
 *   committed_per_step(k) = committed / steps of one canvas
 *   positions_per_token   = sum positions / sum committed (pooled: a case
 *       sums its requests first); NaN: nothing committed */
double tb_committed_per_step(const tb_canvas *k);
double tb_positions_per_token(uint64_t positions, uint64_t committed);

/* A stream is canvas-bursty (docs/METRICS.md, "Canvas models") when it
 * has at least TB_BURST_MIN_CHUNKS chunks (emissions) and the median
 * tokens per chunk is at least TB_BURST_MIN_TOKENS. tok[n]: the tokens of
 * each chunk, in order (not changed). The one rule. */
#define TB_BURST_MIN_CHUNKS 2
#define TB_BURST_MIN_TOKENS 8.0
int tb_stream_bursty(const uint32_t *tok, size_t n, double *median_tokens);

/* Is a case a canvas model, whose TPOT reports must not print as if it
 * were per token (docs/METRICS.md)? Yes when its canvas_gap_ms has
 * samples: canvas records, or canvas-bursty streams. The one rule the
 * tables apply; canvas_gap_n is that metric's n. */
int tb_case_is_canvas(size_t canvas_gap_n);
/* The note under a table whose TPOT cell of a canvas case holds the
 * canvas gap instead, marked TB_CANVAS_TPOT_MARK. */
#define TB_CANVAS_TPOT_MARK "*"
#define TB_CANVAS_TPOT_NOTE                                                                                   \
    "* a canvas model (docs/METRICS.md, \"Canvas models\"): its tokens come a canvas at a time, so TPOT "     \
    "over them is no time a token took; the column shows the median canvas gap (canvas_gap_ms) instead"

/* The per-position metric's name prefix: acceptance_at_1 .. _k. */
#define TB_ACCEPTANCE_AT_PREFIX "acceptance_at_"

/* A client backend whose client_busy (docs/METRICS.md) reaches this
 * percentage in a case's median call was saturated: its figures are its
 * own ceiling, not the server's (reports/warnings.c warns). */
#define TB_CLIENT_SATURATED_PCT 90.0

/* ------------------------------------------------------ the registry */

/* Which way a metric is better: compare's verdicts, history's notes. */
typedef enum tb_metric_better {
    TB_BETTER_NONE = 0,   /* a count or a condition: neither */
    TB_BETTER_HIGHER = 1,
    TB_BETTER_LOWER = -1
} tb_metric_better;

/* One metric the runner stores per case (docs/METRICS.md has each
 * definition; its table "Every stored metric" is this registry, row for
 * row, and tests/unit/test_metrics.c holds the two to agreement). The
 * registry's order is the reports' display order. */
typedef struct tb_metric_def {
    const char *name; /* the metric table's name; ending in '_': a
                         prefix (accuracy_TAG, errors_CLASS) */
    const char *unit; /* the metric table's unit, stored with each row */
    tb_metric_better better;
    const char *samples; /* what its n counts, plural: "calls" (one value
                            per measured call), "requests", "gaps",
                            "items" (accuracy: distinct items graded) */
    const char *summary; /* the `summary` view's columns that read this
                            metric's row, "STAT:COLUMN ..." (STAT a
                            metric-table column: n, median, p90 ...);
                            NULL: none. The view is frozen SQL of a
                            migration: the unit test checks it does this. */
} tb_metric_def;

/* The registry, and a metric by name: the names built from a prefix
 * (accuracy_TAG, errors_CLASS) are found by their prefix's entry
 * (accuracy_, errors_). NULL: not a metric tokbench stores. Iterate
 * tb_metric_defs[0 .. tb_n_metric_defs) for every metric (compare,
 * history, the reports' order). */
extern const tb_metric_def tb_metric_defs[];
extern const size_t tb_n_metric_defs;
const tb_metric_def *tb_metric_find(const char *name);

/* The registry's unit of a stored metric name (a prefix's for a built
 * name): what every writer of a metric row puts beside it. NULL: not a
 * registered name (a bug of the caller). */
const char *tb_metric_unit(const char *name);

/* Error classes of failed requests: the word before ": " at the start of
 * the request's error (backend.h, "error classes"); the last, "other", is
 * every error without a known class. */
extern const char *const tb_error_classes[];
extern const size_t tb_n_error_classes;
size_t tb_error_class(const char *error);

/* A server that reports speculative decoding only as Prometheus counters
 * (vLLM's vllm:spec_decode_num_drafts, _num_draft_tokens,
 * _num_accepted_tokens, _num_accepted_tokens_per_pos{position="i"},
 * each with or without "_total"): when rec has no per-request
 * acceptance_length and its telemetry (rec->tseries) has these counters,
 * their growth over the case gives acceptance_length, acceptance_rate
 * and acceptance_at_(i+1) of the case, one value each (n 1). The
 * counters are the server's: every request it served while the case
 * ran (warm-ups and other clients' included). */
void tb_case_spec_counters(tb_case_record *rec, uint64_t seed);

/* ------------------------------------------------------ one case */

/* The measured (not warm-up) requests of a case: how many, how many
 * failed, and the failures by error class (tb_error_classes order). */
typedef struct tb_request_tally {
    size_t requests, failed;
    size_t per_class[16];
    /* each class's first failed request's message (borrowed from the
     * record; NULL where the class has none) */
    const char *first[16];
} tb_request_tally;
void tb_case_request_tally(const tb_case_record *rec, tb_request_tally *t);

/* The status rule (docs/METRICS.md, "Case status"): a case whose every
 * measured request failed is failed, with this reason (malloc'd, e.g.
 * "every request failed: 8 of 8 (connect 8); first: connect: refused");
 * NULL when some request succeeded or none was measured. */
char *tb_case_all_failed(const tb_case_record *rec);

/* Is a case degraded: some measured request failed, more than the
 * fraction max_error_rate (0: any failure) of them? */
int tb_case_degraded(const tb_request_tally *t, double max_error_rate);

/* "first http_4xx failure: HTTP 400: ...", one line for each class of
 * first[n_classes] (tb_error_classes order) that has a message, each
 * joined by "\n"; `skip`: text that says some already (a failed case's
 * reason names its first): a message found in it is not repeated. malloc'd; NULL
 * when there is none. `run`, `show` and the reports say it alike. */
char *tb_first_errors_text(const char *const *first, size_t n_classes, const char *skip);

/* One decoded call: the raw figures, its requests, emissions and texts. */
typedef struct tb_call_view {
    tb_raw_call call;
    const tb_raw_request *req; /* [call.n_requests] */
    const tb_emission *em;     /* [call.n_emissions], arrival order */
    /* NULL, or [call.n_requests]: each request's canvases, NULL where it
     * has none (req[r].has_canvas 0: not a canvas model) */
    tb_canvas_counts *const *canvas;
    const char *texts;         /* req[r].text_len bytes each, request order */
    /* NULL, or the requests' figures as measured before ([n_requests]): a
     * join of stored shards (shard_join.c) pools each request as stored,
     * since its emissions were kept to the microsecond only. The
     * emissions still give the gaps (itl_ms) and the stored JSON. */
    const tb_request_metrics *measured;
} tb_call_view;

typedef struct tb_case_metrics_opts {
    uint32_t capabilities;   /* the backend's TB_CAP_*: a figure it does
                                not claim is stored unknown (NULL) */
    double goodput_ttft_ms, goodput_tpot_ms; /* <= 0: no limit */
    double request_rate;     /* the offered open-loop rate, requests/s;
                                > 0: the calls are open loops and
                                sent_rate is computed; 0: closed */
    uint64_t seed;           /* of the bootstrap CIs */
    int keep_texts;          /* copy answer texts of prompt-set items */
} tb_case_metrics_opts;

/* The case's samples (one per call, warm-ups flagged), their requests
 * with per-request figures, and one metric row per registry entry of
 * docs/METRICS.md's per-request, per-repetition and serving tables
 * (statistics over the measured calls; warm-ups excluded), plus
 * errors_CLASS rows for the classes that occurred. Appends to rec's
 * samples and metrics (empty before). Pure: no I/O. */
void tb_case_metrics(const tb_call_view *calls, size_t n_calls, const tb_case_metrics_opts *o,
                     tb_case_record *rec);

#endif
