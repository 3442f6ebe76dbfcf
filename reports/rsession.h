/* rsession.h — one stored session read back into memory: its conditions,
 * backends, cases with every metric (warnings.h derives the warnings).
 * The common input of the Markdown and HTML reports and their charts, so
 * that both say the same thing. */
#ifndef TB_REPORT_RSESSION_H
#define TB_REPORT_RSESSION_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "dims.h"
#include "reader.h"
#include "stats.h"
#include "strmem.h"

/* A label and its value, in display order. */
typedef struct tb_rkv {
    char *key, *value;
} tb_rkv;

typedef struct tb_rkvs {
    tb_rkv *v;
    size_t n;
} tb_rkvs;

typedef struct tb_rmetric {
    char *name, *unit; /* docs/METRICS.md */
    tb_stats st;       /* fields NaN where the database holds NULL */
} tb_rmetric;

typedef struct tb_rbackend {
    char *label, *plugin, *plugin_version, *model, *capabilities;
    char *options_json;   /* every option's value (backend.options_json) */
    char *info_json;      /* its describe() (backend.info_json); "" when none */
    char *dtype, *device; /* "" when the backend did not say */
    int random_weights;   /* 1 yes, 0 no, -1 not said */
    int has_steps;        /* some case of it has a steps dimension */
    tb_rkvs info;         /* plugin, options, describe(): every field */
} tb_rbackend;

typedef struct tb_rcase {
    int64_t id;
    int ordinal;
    size_t backend; /* index into tb_rsession.backends */
    tb_case dims;   /* its dimensions (dims.h: 0 = not applicable), read
                       by the table; nothing else of tb_case is set */
    char *options_json; /* options swept by the matrix; "{}" when none */
    char *status, *error;
    tb_rmetric *metrics; /* canonical order (docs/METRICS.md), then others */
    size_t n_metrics;
    double peak_device_mib, host_rss_mib; /* NaN: not measured */
    double energy_j_per_token;            /* NaN: no energy counter */
    int count_mismatches[TB_N_COUNT_MISMATCHES]; /* measured requests whose
                                             count failed its check, by
                                             TB_MISMATCH_* (reader.h) */
    int64_t text_requests, text_count, text_recount; /* reader.h's: requests held to
                                                      their text's re-count, and
                                                      the two sums */
    int varying_outputs;                  /* prompts whose output differs
                                             between measured requests
                                             (docs/METRICS.md): grouped by
                                             request.prompt_hash; rows
                                             without one by prompt set
                                             item, else by request slot */
    int requests, failed_requests;        /* of the measured repetitions */
    int64_t search_id;                    /* a load search's run; 0: none */
    char *search_role;                    /* NULL: none */
    int search_pass;                      /* a probe's verdict; -1: none */
    /* each error class's first failed measured request's whole message
     * (tb_error_classes order; NULL: none) */
    char *first_error[16];
    /* the telemetry's scrapes of metrics_url: made (-1: none stored),
     * failed, the first failure's reason (NULL: none) */
    int64_t scrapes, scrapes_failed;
    char *scrape_error;
    char *telemetry_unmatched; /* tb_row_case's */
} tb_rcase;

/* A load search of the session (core/search.h; table search). */
typedef struct tb_rsearch {
    int64_t id;
    size_t backend;    /* index into tb_rsession.backends */
    int ordinal;       /* the suite's case it ran in place of */
    char *kind;        /* "sweep" | "slo" */
    char *status;      /* done, found, above, below, failed, interrupted, running */
    char *limits_json;
    double sync_rate, max_rate, slo_rate; /* NaN: not stored */
    double ttft_p99_ms, tpot_p99_ms, goodput_pct; /* its limits; NaN: none */
    char *error;
} tb_rsearch;

/* A dimension's bit in tb_rsession.dims and in the skip masks below;
 * TB_RDIM_OPTS: the swept options. */
#define TB_RDIM(d) (1u << (d))
#define TB_RDIM_OPTS (1u << TB_N_DIMS)

typedef struct tb_rsession {
    int64_t id;
    char *uuid, *suite_name, *suite_text, *suite_sha256, *started_at, *status, *git_commit, *hostname;
    /* the resolved configuration (core/plan.h) and its sha256; "" in
     * sessions stored before schema 6 */
    char *config_sha256, *config_json;
    int repeat, warmup;
    tb_rkvs session; /* session conditions */
    tb_rkvs machine; /* machine conditions */
    tb_rbackend *backends;
    size_t n_backends;
    tb_rcase *cases; /* by ordinal */
    size_t n_cases;
    unsigned dims;   /* TB_RDIM() of each dimension some case applies,
                        TB_RDIM_OPTS when some case swept options */
    tb_rsearch *searches; /* by id */
    size_t n_searches;
    int has_quality; /* some case has a quality metric */
    int has_spec;    /* some case decoded speculatively (tb_rcase_spec) */
    int has_prompt_set; /* the session ran a [prompts] set */
    /* a shard of a run split over machines (K of N), the session joining
     * them (-1 of N), or neither (-1, -1) */
    int64_t shard_index, shard_count;
    int64_t shard_window_lag_ns; /* joined: tb_row_session's; -1 unknown */
} tb_rsession;

/* Load session `id`. 0, or -1 with *err (malloc'd): no such session, a
 * JSON column that does not hold JSON of its kind (tb_store_check_json:
 * the row named), or any read error (never taken for the end of the
 * rows). */
int tb_rsession_load(sqlite3 *db, int64_t id, tb_rsession *out, char **err);
void tb_rsession_free(tb_rsession *s);

/* The search case c is a run of, or NULL. */
const tb_rsearch *tb_rcase_search(const tb_rsession *s, const tb_rcase *c);

/* Is c an SLO probe cut off by Ctrl-C or SIGTERM, so without a verdict
 * (docs/METRICS.md, "Load searches")? Stored with no search_pass; or, by
 * a tokbench before that rule, failed as the last run of an interrupted
 * search with search_pass 0. */
int tb_rcase_cut_off(const tb_rsession *s, const tb_rcase *c);

/* The status to show: the stored one, or "degraded" for an ok case with
 * failed requests (metrics.h's tb_case_degraded at threshold 0). */
const char *tb_rcase_status(const tb_rcase *c);

/* The statistics of metric `name` of a case, or NULL when not stored. */
const tb_stats *tb_rcase_metric(const tb_rcase *c, const char *name);

/* Median of a metric, NaN when absent. */
double tb_rcase_median(const tb_rcase *c, const char *name);

/* The quality score of a case (metric "quality", else "accuracy"), or
 * NULL. Higher is better. */
const tb_rmetric *tb_rcase_quality(const tb_rcase *c);

/* Did a case decode speculatively: a speculative metric (docs/METRICS.md,
 * "Speculative decoding") with a value? */
int tb_rcase_spec(const tb_rcase *c);

/* The draft positions with an acceptance_at_I value: the largest such I
 * (0: none). */
uint32_t tb_rcase_positions(const tb_rcase *c);

/* The prompt column of a case whose backend sent a dataset's prompts
 * (its `dataset` option, plugins/http), whatever prompt_tokens says:
 * "dataset NAME, mean M" (NAME the file's name; M the measured mean
 * prompt length, metric prompt_len; without it when NaN). NULL when the
 * backend had no dataset: the prompt_tokens dimension stands. malloc'd.
 * The one owner of that text: show, run, compare, history and the
 * Markdown and HTML reports all take it from here. */
char *tb_rprompt_text(const char *backend_options_json, double prompt_len_mean);

/* What load a session measured, in words (the one text compare and
 * history use): "one machine" (count <= 0), "2 shards joined" (index <
 * 0: a joined session, docs/METRICS.md "Sharded runs"), or "shard 1 of 2"
 * (a shard's own session: its share of the load). Into buf. */
const char *tb_rshard_words(int64_t shard_index, int64_t shard_count, char *buf, size_t size);

/* The same for a case of a loaded session. */
char *tb_rcase_prompt(const tb_rsession *s, const tb_rcase *c);

/* "prompt 32, new 64, batch 4, steps 8": the dimensions that vary in the
 * session or are set, for captions and warnings. malloc'd. */
char *tb_rcase_dims(const tb_rsession *s, const tb_rcase *c);

/* The same without the dimensions in `skip` (TB_RDIM() bits,
 * TB_RDIM_OPTS), for grouping: cases with equal keys differ only there. */
char *tb_rcase_key(const tb_rcase *c, unsigned skip);
/* tb_rcase_key(c, 0) with `prompt` (tb_rprompt_text; NULL: none) in
 * place of the prompt_tokens dimension. */
char *tb_rcase_key_prompt(const tb_rcase *c, const char *prompt);

/* Does case a's key equal b's wherever a has a value (a may lack steps,
 * concurrency or block length: an AR backend is the reference for every
 * step count)? */
int tb_rcase_generalizes(const tb_rcase *a, const tb_rcase *b);

/* The side-by-side grid: rows are case keys (without the backend), columns
 * the backends; cell[r * n_backends + b] is the index of backend b's case
 * for row r (its own, or its generalization), or -1. */
typedef struct tb_rgrid {
    size_t n_rows;
    size_t *row_case; /* a case holding the row's key */
    long *cell;
} tb_rgrid;
void tb_rgrid_build(const tb_rsession *s, tb_rgrid *g);
void tb_rgrid_free(tb_rgrid *g);

/* The conditions two JSON objects differ in: nested objects flattened as
 * "outer.inner", values as JSON text (strings bare), a key one side lacks
 * as "(none)". Appends, per differing key in a's order then b's, lead +
 * prefix + key + ": " + A + sep + B + tail to out; returns how many.
 * Either side not a JSON object (an old row's ""): 0. */
int tb_rjson_diff(const char *a, const char *b, const char *lead, const char *prefix, const char *sep,
                  const char *tail, tb_str *out);

/* The object at `path` (depth keys deep) of JSON object `json`, as JSON
 * text (malloc'd): "{}" when it has none; NULL when json is not an
 * object (an old row's ""). */
char *tb_rjson_part(const char *json, const char *const *path, size_t depth);

/* A case's swept options for people: {"threshold":"0.9","steps":4} ->
 * "threshold 0.9, steps 4" (nested objects as "outer.inner v"); "" for
 * "{}". Not an object (an old row's ""): a copy of the text. malloc'd. */
char *tb_roptions_words(const char *options_json);

/* Numbers for people: "-" for NaN, else printf("%.*f"). Returns buf. */
const char *tb_rfmt(char *buf, size_t size, double v, int prec);

#endif
