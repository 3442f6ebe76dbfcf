/* plan.h — a suite expanded into cases, with its plugins opened.
 *
 * Per backend, the matrix is a Cartesian product of: swept load-time
 * options (outermost, so a context is rebuilt as rarely as possible), the
 * dimensions in tb_dim order, then swept per-case options (innermost).
 * A backend section's own dimension or option values override [matrix].
 * Values are split on commas, except for string options (taken whole).
 *
 * Capabilities decide what a backend gets: concurrency, request_rate,
 * steps and block_length are not applied to a backend without the matching
 * capability (the reason is kept as a note); batch values above 1 on a
 * backend without TB_CAP_BATCH become skipped cases with the reason.
 *
 * Requests per call: a serving backend (TB_CAP_CONCURRENCY or
 * TB_CAP_REQUEST_RATE) gets the `requests` dimension, by default
 * max(32, 4 x concurrency); any other backend runs `batch` requests per
 * call and `requests` is not applied to it (with a note). */
#ifndef TB_PLAN_H
#define TB_PLAN_H

#include <stdio.h>

#include "plugin.h"
#include "prompt_set.h"
#include "suite.h"

typedef struct tb_plan_backend {
    const tb_suite_backend *sb; /* the suite section */
    tb_plugin plugin;
    char **notes; /* dimensions not applied, and why */
    size_t n_notes;
    char *options_json; /* every option's value for this backend, JSON */
} tb_plan_backend;

/* tb_case.search */
enum { TB_SEARCH_NONE, TB_SEARCH_SWEEP, TB_SEARCH_SLO };

typedef struct tb_case {
    size_t ordinal;  /* 1-based position in the plan */
    size_t backend;  /* index into tb_plan.backends */
    /* The dimensions: each a row of tb_dim_defs (dims.h), which holds
     * its offset here, its column, its words and its absent value (0:
     * not applicable, for those that may be). */
    uint32_t prompt_tokens, max_new_tokens, batch;
    uint32_t concurrency, steps, block_length;
    double request_rate;
    int search;        /* request_rate = sweep | slo: a load search
                          (core/search.h) run in this case's place;
                          TB_SEARCH_NONE otherwise */
    uint32_t requests; /* requests per generate() call (tb_request's
                          n_requests): `batch` unless serving */
    int requests_default; /* the suite gave no `requests`: a serving
                             case's default; a search's open-loop runs
                             take tb_plan_open_loop_requests at their
                             rate */
    tb_option_value *options; /* every declared option, declaration order */
    uint32_t n_options;
    char *swept_json; /* {"name":"value",...}: options the matrix swept */
    char *load_key;   /* values of TB_OPTF_LOAD options: equal keys share
                         one backend context */
    char *skip_reason; /* NULL: run it */
    /* --shard K/N (shard.h) applied: requests, concurrency and
     * request_rate above are this shard's share; the suite's values, which
     * --filter matches (one command line selects the same case on every
     * shard), are kept here. shard_count 0: not split. */
    uint32_t shard_count;
    uint32_t suite_requests, suite_concurrency;
    double suite_request_rate;
} tb_case;

typedef struct tb_plan {
    tb_suite *suite; /* borrowed */
    /* [prompts]: the set (first n_prompts items are used), the scorer of
     * items without their own, and the judge backend (index, or SIZE_MAX). */
    tb_prompt_set prompts;
    size_t n_prompts; /* 0: synthetic prompts */
    tb_scorer scorer;
    size_t judge;
    /* The judge backend's first runnable case when --filter removed it
     * (has_judge_load): kept only for its load options, so that the judge
     * is loaded as in the unfiltered run whatever the filter kept (and
     * filtering the judge out does not drop judge perplexity). Never run
     * as a case. */
    tb_case judge_load;
    int has_judge_load;
    tb_plan_backend *backends;
    size_t n_backends;
    tb_case *cases;
    size_t n_cases;
    /* The resolved configuration (after includes and ${ENV}, before
     * --filter) as canonical JSON, and its sha256: what the suite asks
     * for, where the suite text's sha256 is of the words written (two
     * runs of one text with ${STEP} = 500 and 600 differ here only):
     *   {"suite": {warmup, repeat, seed, timeouts, memory_limit_mb,
     *              goodput limits},
     *    "prompts": {sha256 of the set, items used, scorer, judge...},
     *    "backends": {LABEL: {"plugin": name, "model": resolved path,
     *                         "options": every option's value (secrets
     *                                    "(secret)"),
     *                         "matrix": {dimension or swept option:
     *                                    "v1, v2", ... over its cases}}}}
     * Plugin paths and versions, the suite's name and file paths are
     * not in it (the session stores them apart). */
    char *config_json;
    char config_sha256[65];
} tb_plan;

/* Open every backend's plugin, check its options, expand the matrix,
 * check the files the backends will open. Returns 0, or -1 with a
 * malloc'd message (file:line: key: reason; every error it finds, one a
 * line). The suite may be one tb_suite_parse kept despite errors: what it
 * holds is checked, and a backend without a plugin fails the build with
 * no message of its own (the suite's error says it). */
int tb_plan_build(tb_suite *suite, tb_plan *plan, char **err);

/* Keep only cases matching every filter "KEY=V1[,V2...]", KEY being
 * "backend", a dimension or an option name; a split case (--shard)
 * matches by the suite's requests, concurrency and request_rate, not its
 * share. Ordinals are kept. Returns 0,
 * or -1 with *err for a malformed filter. */
int tb_plan_filter(tb_plan *plan, char *const *filters, size_t n, char **err);

/* Each runnable case's validate() by its plugin (as tb_plan_build does)
 * again: for cases changed after the build (a shard's share, shard.h).
 * 0, or -1 with *err (every case at fault, file:line: key: reason). */
int tb_plan_validate(tb_plan *plan, char **err);

/* Generate calls of one measured pass of case c: 1 with synthetic
 * prompts; with a prompt set, ceil(n_prompts / requests) (the last call is
 * filled up from the start of the set; those requests are not scored). */
uint32_t tb_plan_calls_per_pass(const tb_plan *plan, const tb_case *c);

/* Emissions per request of one call that the worker's buffer is sized
 * for before the call (and the size check below counts): a sane backend
 * makes at most one per output token (TB_CAP_STREAMING), or one in all
 * (without it). */
uint32_t tb_case_emissions(const tb_plan *plan, const tb_case *c);

/* The limit on a case's size (docs/ARCHITECTURE.md, "Process model"): a
 * case's measurements (every call's requests and emissions) come back
 * from the backend process in one message of at most TB_WIRE_MAX_FRAME
 * (1 GiB). tb_plan_check_sizes refuses, with file:line and the key, a
 * case whose result would need more, counted as
 *     calls x requests x (sizeof raw request + emissions x sizeof emission)
 * with calls = warmup + repeat x calls per pass and emissions =
 * tb_case_emissions(): the worker's buffers (the emission buffer, the
 * message) stay under that limit, instead of aborting the backend
 * process on an allocation of terabytes. */
uint64_t tb_case_result_bytes(const tb_plan *plan, const tb_case *c);

/* The size check of every case to run (skipped ones are not), for `run`
 * after tb_plan_build (`serve` measures no case: it is not subject to
 * it). 0, or -1 with a malloc'd message: one "file:line: key: ..." per
 * case too large (20 at most), at the line of max_new_tokens, the
 * requests per call (batch, requests, concurrency) or repeat. */
int tb_plan_check_sizes(const tb_plan *plan, char **err);

/* The most cases a suite may expand into, all backends together: the
 * product of a backend's lists of values (dimensions and swept options)
 * is counted before any case is built, and a suite over it is an error
 * at the backend's line that says how many cases it would have. */
#define TB_PLAN_MAX_CASES 100000

/* Default requests per call of a closed-loop serving case. */
uint32_t tb_plan_default_requests(uint32_t concurrency);

/* The default length of an open-loop load (docs/METRICS.md, "The length
 * of an open-loop load"): 1,601 requests, whose 1,600 Poisson gaps send
 * within 5% of the rate in 95% of calls, but no more than
 * TB_OPEN_LOOP_MAX_S seconds of them at the rate (at least 32). */
#define TB_OPEN_LOOP_REQUESTS 1601
#define TB_OPEN_LOOP_MAX_S 300.0

/* Requests per call of an open-loop load at `rate` (> 0) without
 * `requests`: ceil(rate x open_loop_duration) + 1 (at least 2) when the
 * suite sets open_loop_duration, else the default above; at most
 * 1,000,000. */
uint32_t tb_plan_open_loop_requests(const tb_suite *suite, double rate);

/* "prompt_tokens=128 max_new_tokens=64 batch=1 steps=8 sampler=random"
 * (tb_case_label_dims, then the swept options); serving backends' cases
 * also say requests=N. */
char *tb_case_label(const tb_plan *plan, const tb_case *c);

/* Case c's dimensions and options as a tb_request: what validate() sees
 * (n_requests = the requests per call, the suite's seed, no prompts);
 * the worker sets the call's own fields (seed, repetition, prompts) on
 * top. */
tb_request tb_case_request(const tb_plan *plan, const tb_case *c);

/* The expanded plan, human-readable (what --dry-run prints). */
void tb_plan_print(const tb_plan *plan, FILE *out);

/* Replace, in the suite's text (what a session stores), the value of every
 * line that sets a TB_OPTF_SECRET option of one of the plan's plugins by
 * "(secret)": a key written into a suite never reaches the database. */
void tb_plan_redact_suite_text(tb_plan *plan);

/* The values of the TB_OPTF_SECRET options of the plan's cases (the
 * judge's load case too), each non-empty value once: what tb_redact
 * (util/redact.h) hides in every text the run prints or stores. A
 * malloc'd array of strings borrowed from the plan (NULL when none); *n
 * its length. */
const char **tb_plan_secrets(const tb_plan *plan, size_t *n);

void tb_plan_free(tb_plan *plan);

#endif
