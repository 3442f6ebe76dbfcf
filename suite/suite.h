/* suite.h — declarative benchmark suites (INI, parsed with inih).
 *
 *   [suite]                 name, description, warmup, repeat, seed,
 *                           case_timeout, load_timeout (seconds),
 *                           memory_limit (MiB per backend process),
 *                           models_dir (models must resolve inside it),
 *                           goodput_ttft_ms, goodput_tpot_ms (limits a
 *                           request must meet to count as goodput),
 *                           sweep_rates, slo_ttft_p99_ms, slo_tpot_p99_ms,
 *                           slo_goodput_pct, slo_iterations (load
 *                           searches: core/search.h)
 *   [matrix]                list-valued dimensions (prompt_tokens,
 *                           max_new_tokens, batch, concurrency, steps,
 *                           block_length, request_rate, requests) and
 *                           option sweeps
 *   [prompts]               file (JSONL prompt set), limit, scorer,
 *                           repetition_n, distinct_n, judge (a backend
 *                           label), judge_context (prompt | none),
 *                           judge_tags (judge only items with these tags)
 *   [backend LABEL]         plugin, model, the plugin's options, and
 *                           per-backend overrides of matrix dimensions
 *                           ("steps = none": this backend does not get
 *                           that dimension)
 *   [telemetry]             metrics_url, period, metrics, nvml, timeout
 *                           (core/telemetry.h checks them)
 *   include = other.ini     anywhere; path relative to the including file;
 *                           each file is read once (a second include of
 *                           it is an error, a cycle names its chain), a
 *                           regular file of at most 1 MiB
 *   ${VAR}, ${VAR:-dflt}    environment expansion in every value; a
 *                           default is expanded too (${A:-${B}})
 *
 * Errors escape the suite's control bytes (\xNN): they are printed.
 *
 * This module only parses and checks what it can without plugins: syntax,
 * known sections and keys, value types of the suite and the dimensions.
 * Plugin options are checked against the plugin's declarations in plan.c.
 * Every error names file:line, the key and what was expected. */
#ifndef TB_SUITE_H
#define TB_SUITE_H

#include <stddef.h>
#include <stdint.h>

/* Core matrix dimensions, in the order cases are expanded. */
typedef enum tb_dim {
    TB_DIM_PROMPT_TOKENS,
    TB_DIM_MAX_NEW_TOKENS,
    TB_DIM_BATCH,
    TB_DIM_CONCURRENCY,
    TB_DIM_REQUEST_RATE,
    TB_DIM_STEPS,
    TB_DIM_BLOCK_LENGTH,
    /* Requests per generate() call of a serving backend (one with
     * TB_CAP_CONCURRENCY or TB_CAP_REQUEST_RATE); other backends run
     * `batch` requests per call. */
    TB_DIM_REQUESTS,
    TB_N_DIMS
} tb_dim;

const char *tb_dim_name(tb_dim d);

/* request_rate = sweep | slo: a load search (core/search.h), kept in the
 * dimension's values as these negative sentinels. */
#define TB_RATE_SWEEP (-1.0)
#define TB_RATE_SLO (-2.0)
/* The least request_rate, requests/s: an open loop's schedule is int64
 * nanoseconds, and a few thousand gaps of 1/rate s must fit in it
 * (1,601 requests at 1e-6/s span 1.6e18 ns of 9.2e18). Below it a rate
 * would overflow the schedule (every request sent at once). */
#define TB_RATE_MIN 1e-6
/* TB_N_DIMS when `name` is not a dimension. */
tb_dim tb_dim_from_name(const char *name);

/* Where a value was written. */
typedef struct tb_loc {
    const char *file; /* owned by the suite's file list */
    int line;
} tb_loc;

/* A list value as written: items split on commas and trimmed. */
typedef struct tb_list {
    char **items;
    size_t n;
    char *raw; /* the whole value after ${} expansion */
    double *num; /* dimensions only: items parsed, checked */
    int none;    /* a backend's dimension written as "none": not applied */
    tb_loc loc;
} tb_list;

/* key = value in a backend section or an option sweep in [matrix]. */
typedef struct tb_setting {
    char *key;
    tb_list value;
} tb_setting;

typedef struct tb_suite_backend {
    char *label;
    char *plugin; /* name or path */
    char *model;  /* "" when not given */
    tb_loc loc;   /* the section header */
    tb_loc plugin_loc;
    tb_loc model_loc;
    tb_list dims[TB_N_DIMS]; /* overrides; n == 0: use the matrix */
    tb_setting *settings;    /* plugin options as written */
    size_t n_settings;
} tb_suite_backend;

/* [prompts]: prompts and expected answers from a JSONL file
 * (core/prompt_set.h) instead of synthetic prompts, with scores next to
 * the speed figures. */
typedef struct tb_suite_prompts {
    char *file;          /* NULL: no [prompts] section; relative to the suite */
    tb_loc loc;          /* the section header */
    tb_loc file_loc;
    int limit;           /* the first `limit` items; 0 = all */
    char *scorer;        /* scorer of items with an answer (default exact) */
    tb_loc scorer_loc;
    int repetition_n;    /* n of the repetition score (default 4) */
    int distinct_n;      /* n of distinct-n (default 2) */
    char *judge;         /* label of the backend that scores outputs
                            (TB_CAP_LOGLIK), NULL: no judge */
    tb_loc judge_loc;
    int judge_context;   /* 1: ln p(output | prompt); 0: ln p(output) */
    tb_list judge_tags;  /* judge only items with one of these tags;
                            n == 0: every item */
} tb_suite_prompts;

typedef struct tb_suite {
    char *path;
    char *name;
    char *description;
    int warmup;            /* warm-up calls per case, excluded */
    int repeat;            /* measured repetitions per case */
    tb_loc repeat_loc;     /* where repeat was set; line 0: the default */
    uint64_t seed;
    char *models_dir;      /* when set: model paths must resolve (symbolic
                              links followed) inside it; NULL: anywhere */
    tb_loc models_dir_loc;
    double case_timeout_s; /* one whole case, warm-ups included */
    double load_timeout_s; /* create(): model load */
    double memory_limit_mb; /* address space a backend process may add
                               to what it has when it starts, MiB
                               (RLIMIT_AS); 0 = no limit */
    /* Goodput limits, ms; 0 = no limit. A successful request counts
     * towards goodput when its TTFT and its TPOT are within them. */
    double goodput_ttft_ms, goodput_tpot_ms;
    /* Load searches (request_rate = sweep | slo; core/search.h): the
     * rates a sweep runs between its synchronous and throughput runs,
     * the SLO's limits (0: none) and the bisection's probes. */
    int sweep_rates;              /* default 5 */
    double slo_ttft_p99_ms, slo_tpot_p99_ms, slo_goodput_pct;
    int slo_iterations;           /* default 6 */
    /* An open-loop load without `requests` (tb_plan_open_loop_requests):
     * rate x this many seconds of requests; 0: the default length. */
    double open_loop_duration_s;
    tb_loc slo_loc;               /* the last slo_ key; line 0: none */
    tb_list dims[TB_N_DIMS];   /* [matrix]; n == 0: not swept */
    tb_setting *sweeps;        /* [matrix] keys that are not dimensions */
    size_t n_sweeps;
    tb_suite_backend *backends;
    size_t n_backends;
    tb_suite_prompts prompts;
    /* [telemetry]: its keys as written, checked by core/telemetry.c */
    int has_telemetry;
    tb_setting *telemetry;
    size_t n_telemetry;
    char **files;  /* every file read, main first (owns tb_loc.file) */
    size_t n_files;
    char *text;    /* every file's text, for hashing and storing */
} tb_suite;

/* Parse `path`. On failure returns -1 and a malloc'd message in *err
 * (one line per problem, each "file:line: key: what was expected"). */
int tb_suite_load(const char *path, tb_suite *suite, char **err);
/* tb_suite_load that keeps what it could read when there are errors: -1
 * with every error in *err and the suite holding the keys that parsed
 * (a key in error is left unset, a backend may have no plugin), so that
 * tb_plan_build can report its errors too, all in one pass. The caller
 * frees the suite either way. */
int tb_suite_parse(const char *path, tb_suite *suite, char **err);
void tb_suite_free(tb_suite *suite);

/* Parse one list item of a dimension; returns 0 or -1 with *err set. */
int tb_dim_parse_value(tb_dim d, const char *text, double *out, char **err);

#endif
