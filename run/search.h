/* search.h — load searches: a case written with `request_rate = sweep`
 * or `request_rate = slo` is run as a series of ordinary cases, each
 * stored as one (bench_case, with search_id and search_role), chosen
 * from the figures of those before it (docs/METRICS.md, "Load
 * searches"):
 *
 *   sweep  a synchronous run (concurrency 1), a throughput run (every
 *          request at once: concurrency = requests), then sweep_rates
 *          open-loop rates evenly spaced strictly between the two runs'
 *          achieved requests/s.
 *   slo    the same two runs, then the open-loop rate at the throughput
 *          run's requests/s and at the synchronous run's; when that
 *          misses the limits too, the synchronous rate halved, up to
 *          TB_SEARCH_DOWN_STEPS times, until one meets them; then
 *          bisection between the highest rate that met the limits and
 *          the lowest that did not, slo_iterations probes. The answer,
 *          slo_max_rate, is the highest probed rate that met them
 *          (search.slo_rate); when none did, search.error says so in
 *          words, with the lowest rate tried and its figures.
 *
 * A run meets the limits (tb_search_meets) when every measured request
 * succeeded and its p99 TTFT, p99 TPOT and goodput share are within the
 * suite's slo_ttft_p99_ms, slo_tpot_p99_ms and slo_goodput_pct (those
 * set). The policy lives here; running a case is the runner's (a
 * callback), storing the search's row the store's. */
#ifndef TB_SEARCH_H
#define TB_SEARCH_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "record.h"
#include "store.h"

/* The figures of one run that a search decides on. */
typedef struct tb_search_point {
    int ran;               /* 0: the run failed (no figures) */
    int64_t case_id;       /* its stored row; -1: not stored */
    double req_throughput; /* median achieved requests/s over its calls */
    double ttft_p99_ms, tpot_p99_ms; /* over its measured requests; NaN: none */
    double goodput_pct;    /* measured requests within the goodput limits,
                              % of those measured; NaN without a limit */
    size_t measured, failed; /* measured requests, and failed ones */
    int pass;              /* tb_search_meets (slo probes); -1: not judged */
} tb_search_point;

void tb_search_point_init(tb_search_point *p);

/* The search in flight, as the runner hands it back with each run. */
typedef struct tb_search_ctx {
    const tb_plan *plan;
    const tb_case *tmpl;   /* the plan's case written with sweep | slo */
    int64_t search_id;
    const char *role;      /* of the run in flight: "synchronous",
                              "throughput", "rate" (a sweep's), "probe"
                              (an slo search's) */
} tb_search_ctx;

/* The figures of a run's record (its metrics and requests). */
void tb_search_point_of(const tb_search_ctx *s, const tb_case_record *rec, tb_search_point *p);

/* Does run p meet the suite's limits? (The definition, once.) */
int tb_search_meets(const tb_suite *suite, const tb_search_point *p);

/* Set a run's record fields: its search, role and verdict (a probe's
 * pass, from the record's figures). */
void tb_search_mark(const tb_search_ctx *s, tb_case_record *rec);

/* The sweep's k rates strictly between lo and hi: lo + (hi - lo) i/(k+1),
 * i = 1..k. */
void tb_search_sweep_rates(double lo, double hi, int k, double *out);

/* An SLO search whose synchronous rate misses the limits probes that
 * rate halved, up to this many times, before it says no rate met them. */
#define TB_SEARCH_DOWN_STEPS 2

/* Why run p misses the suite's limits, in words (malloc'd): each limit
 * it misses with its figure against the limit, "TPOT p99 12.33 ms > 12
 * ms, 2 of 32 requests failed"; "the run failed" without figures. */
char *tb_search_why_not(const tb_suite *suite, const tb_search_point *p);

/* The most runs search case c makes (the progress bar's count). */
size_t tb_search_max_runs(const tb_suite *suite, const tb_case *c);

/* The runner's side: run `run` (a copy of s->tmpl with its ordinal,
 * concurrency and request_rate set) as s->role and store it; its figures
 * in *p. Nonzero: stop the search (interrupted, the store failed). */
typedef int (*tb_search_run_fn)(void *ctx, const tb_case *run, const tb_search_ctx *s, tb_search_point *p);

/* Run search case tmpl: its row in `search`, its runs through run_fn
 * (ordinals from *next_ordinal on), the answer stored at its end. 0, or
 * -1 with *err when the search's row could not be stored. */
int tb_search_run(const tb_plan *plan, const tb_case *tmpl, tb_store *store, int64_t session_id, int64_t backend_id,
                  size_t *next_ordinal, tb_search_run_fn run_fn, void *ctx, char **err);

#endif
