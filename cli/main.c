/* main.c — the tokbench command line: dispatch to one function per
 * command. Results go to stdout, progress and errors to stderr. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "compare.h"
#include "export.h"
#include "git_version.h"
#include "history.h"
#include "html.h"
#include "hwinfo.h"
#include "markdown.h"
#include "merge.h"
#include "plan.h"
#include "runner.h"
#include "serve.h"
#include "shard.h"
#include "shard_join.h"
#include "telemetry.h"
#include "store.h"
#include "suite.h"
#include "tb_config.h"
#include "text.h"
#include "util.h"

static const char usage_main[] =
    "usage: tokbench COMMAND [ARGS]\n"
    "\n"
    "Reproducible, comparable LLM inference benchmarks.\n"
    "\n"
    "commands:\n"
    "  run SUITE          run a suite, store every case, print the results\n"
    "  plugins [NAME]     list backend plugins, or one plugin's options\n"
    "  sessions           stored sessions, newest first\n"
    "  show [SESSION]     one session's cases, backends side by side (default: last)\n"
    "  report [SESSION]   one session as Markdown, HTML (with charts), CSV or JSON\n"
    "  compare A B        two sessions (or two backends) case by case, with a\n"
    "                     significance test and a verdict per row\n"
    "  history            one metric of one backend across sessions\n"
    "  export SESSION     one session as CSV or JSON (= report --format csv|json)\n"
    "  db merge OTHER.db  import another database's sessions\n"
    "  serve              one backend of a suite as an OpenAI-compatible endpoint\n"
    "  version            version, commit and build\n"
    "\n"
    "Every command takes --help. The database is --db FILE, else $TOKBENCH_DB,\n"
    "else ./tokbench.db. Plugins are searched in $TOKBENCH_PLUGIN_PATH, the build\n"
    "tree and " TB_PLUGIN_INSTALL_DIR ".\n";

static const char usage_run[] =
    "usage: tokbench run SUITE [--db FILE] [--dry-run] [--filter KEY=V1[,V2...]]...\n"
    "                    [--max-error-rate X] [--shard K/N --start-at TIME]\n"
    "\n"
    "Expand SUITE (an INI file) into cases, run each backend in a process of\n"
    "its own, store every case in the database as it finishes, and print the\n"
    "results with the backends side by side.\n"
    "\n"
    "  --db FILE       database (default $TOKBENCH_DB or ./tokbench.db)\n"
    "  --dry-run       print the expanded cases and exit; runs nothing\n"
    "  --filter K=V    keep cases whose K (backend, a dimension such as batch,\n"
    "                  or a backend option) is one of the values; repeatable\n"
    "  --max-error-rate X  a case whose failed requests are more than the\n"
    "                  fraction X of its requests is degraded (default 0: any\n"
    "                  failed request); a case whose every request failed is failed\n"
    "  --shard K/N     run shard K (0-based) of N of every case's load: its share\n"
    "                  of the requests and of the concurrency, request_rate / N,\n"
    "                  a seed of its own; on N machines (examples/: a Kubernetes\n"
    "                  Indexed Job, a Slurm job array), then `db merge` joins the\n"
    "                  N sessions into one (serving backends only)\n"
    "  --start-at TIME start the cases at TIME (UTC, 2026-12-01T19:00:00Z, or\n"
    "                  @UNIX_SECONDS): the N shards start together (required\n"
    "                  with --shard; it names the run the shards belong to)\n"
    "\n"
    "Exit status: 0 when every case ran ok (not degraded) or was skipped, 1 when\n"
    "a case failed or is degraded, 2 on bad input, 130 when interrupted.\n";

static const char usage_plugins[] =
    "usage: tokbench plugins [NAME|PATH] [--load-timeout SECONDS]\n"
    "\n"
    "Without NAME: every plugin found, with its version, capabilities and\n"
    "whether it can run on this host. With NAME: its options.\n"
    "Each plugin is loaded and probed in a process of its own, which must\n"
    "answer within --load-timeout (default 60 s).\n";

static const char usage_sessions[] = "usage: tokbench sessions [--db FILE] [--limit N]\n";
static const char usage_show[] =
    "usage: tokbench show [SESSION|last] [--wide | --width N] [--db FILE]\n"
    "\n"
    "SESSION is an id from `tokbench sessions` or a uuid prefix (8 characters or more).\n"
    "The case table fits the terminal: columns no case has a value in are left\n"
    "out, then, when it is still too wide, the least important ones (a line\n"
    "below the table names them). Its width is $COLUMNS, else the terminal's;\n"
    "output that is not a terminal (a pipe, a file) is never narrowed.\n"
    "  --wide      every column, whatever the width\n"
    "  --width N   fit N characters, terminal or not\n";
static const char usage_export[] =
    "usage: tokbench export SESSION --format csv|json [-o FILE] [--db FILE]\n"
    "\n"
    "csv: the summary view's rows for the session. json: everything stored:\n"
    "session, machine, backends, cases, metrics, samples, requests, emissions.\n";

static const char usage_report[] =
    "usage: tokbench report [SESSION|last|--last] [--format md|html|csv|json] [-o FILE] [--db FILE]\n"
    "\n"
    "One session (default: the last) for people to read:\n"
    "  md    Markdown (default): conditions, warnings, every table\n"
    "  html  one self-contained file: the same plus SVG charts (tokens/s vs steps,\n"
    "        latency and throughput vs batch, quality vs speed when scored,\n"
    "        inter-token latency, history across sessions)\n"
    "  csv   the summary view's rows;  json: everything stored\n"
    "SESSION is an id from `tokbench sessions` or a uuid prefix (8 characters or more). docs/REPORTS.md\n"
    "describes every part. Exit status: 0 written, 1 error, 2 bad input.\n";

static const char usage_compare[] =
    "usage: tokbench compare A B [options]            two sessions, backends by label\n"
    "       tokbench compare A --backends X Y [options]  two backends of session A\n"
    "       tokbench compare A B --backends X Y          backend X of A vs Y of B\n"
    "\n"
    "A is the baseline, B the candidate (ids, uuid prefixes or \"last\"). Cases\n"
    "match by dimensions and swept options; a backend without a dimension (AR:\n"
    "no steps) matches every value of it. Per matching case and metric: medians,\n"
    "B/A, a two-sided Mann-Whitney U test on the raw samples (per repetition for\n"
    "agg_tps, per request for req_tps and latencies) and a verdict: faster,\n"
    "slower, or no significant change.\n"
    "\n"
    "  --metric M[,M...]      metrics (default agg_tps,req_tps,ttft_ms,e2e_ms); known:\n"
    "                         agg_tps, decode_tps, wall_ms, tokens_per_forward,\n"
    "                         req_tps, ttft_ms, tpot_ms, e2e_ms\n"
    "  --alpha P              significance level (default 0.05)\n"
    "  --fail-if-slower PCT   exit 1 when a row is significantly slower by more\n"
    "                         than PCT percent, or a case ran in A and failed in B\n"
    "  --fail-if-accuracy-drops PP  exit 1 when a case's accuracy is lower in B\n"
    "                         by more than PP percentage points\n"
    "  --fail-if-error-rate-above X exit 1 when a case of B failed more than the\n"
    "                         fraction X of its requests\n"
    "  --fail-if-p99-ttft-above PCT exit 1 when a case's p99 TTFT is higher in B\n"
    "                         by more than PCT percent\n"
    "                         (with any of these gates, a case failed or degraded\n"
    "                         in B only is a regression too)\n"
    "  --db FILE              database\n"
    "\n"
    "Exit status: 0 no regression past a gate (always 0 without a --fail-if\n"
    "option), 1 regression, 2 bad input or nothing to compare.\n";

static const char usage_history[] =
    "usage: tokbench history --backend LABEL [--metric NAME] [--filter KEY=V[,V...]]...\n"
    "                        [--format text|csv|html] [-o FILE] [--db FILE]\n"
    "\n"
    "One metric (default agg_tps) of one backend, case by case, across every\n"
    "stored session: commit, version, machine, median, p5, p95, CI, and the\n"
    "change from the session before; notes where the machine, model, dtype or\n"
    "plugin changed. KEY: prompt_tokens, max_new_tokens, batch, concurrency,\n"
    "steps, block_length, request_rate (value none: not applicable), or a swept\n"
    "option. html: a page with a chart per case.\n"
    "Exit status: 0 printed, 1 error, 2 bad input or nothing matching.\n";

static const char usage_db[] =
    "usage: tokbench db merge [OTHER.db...] [--db FILE]\n"
    "\n"
    "merge: import each OTHER.db's sessions into the database (created if\n"
    "missing): sessions by uuid (one already present is skipped, so merging\n"
    "twice is merging once), machines by fingerprint, every row remapped, each\n"
    "file in one transaction. OTHER.db is only read; an older schema is migrated\n"
    "in memory, a newer one refused. Then the shards of a run (`run --shard K/N\n"
    "--start-at TIME`) whose N sessions are all in the database are joined into\n"
    "one session that pools every request (docs/METRICS.md, \"Sharded runs\");\n"
    "without OTHER.db, only that. Exit status: 0 merged, 1 error, 2 bad input.\n";

static const char usage_serve[] =
    "usage: tokbench serve --backend LABEL SUITE [--port N] [--host ADDR] [--max-batch N]\n"
    "                      [--batching continuous|static]\n"
    "\n"
    "Serve backend LABEL of SUITE as an OpenAI-compatible endpoint:\n"
    "POST /v1/completions and /v1/chat/completions (streamed or not), GET /v1/models,\n"
    "GET /health. The backend runs with the options of its first case in SUITE.\n"
    "A request's temperature, top_p, top_k, seed and stop are honoured; a field\n"
    "serve cannot honour (n > 1, logprobs, an unknown one) is refused with 400\n"
    "naming it, an unknown model with 404. Chat requests get the model folder's\n"
    "chat template (Llama-3 or ChatML). See docs/PLUGINS.md.\n"
    "\n"
    "  --backend LABEL  the [backend LABEL] section to serve (required)\n"
    "  --port N         TCP port (default 8000; 0 picks a free one)\n"
    "  --host ADDR      IPv4 address to listen on (default 127.0.0.1)\n"
    "  --max-batch N    most requests in flight in the backend (default 16 when\n"
    "                   it batches, else 1)\n"
    "  --batching MODE  continuous (default): a request joins the running batch at\n"
    "                   the next step and leaves at its end (backends with step\n"
    "                   ops: ar); static: batches run to their end, requests\n"
    "                   arriving meanwhile wait (every backend; the fallback)\n"
    "  --port-file F    write the port to F once listening (for scripts)\n"
    "  --reuse-port     let other servers listen on the same port (SO_REUSEPORT):\n"
    "                   the kernel spreads connections across them, each with its\n"
    "                   own backend process (docs/PERFORMANCE.md)\n"
    "\n"
    "Stops on SIGINT or SIGTERM (exit 0). Exit 1 when the backend cannot load,\n"
    "2 on bad input.\n";

enum { OPT_DB = 1000, OPT_WIDE, OPT_WIDTH, OPT_DRY_RUN, OPT_FILTER, OPT_LIMIT, OPT_FORMAT, OPT_LAST, OPT_BACKEND, OPT_BACKENDS,
       OPT_METRIC, OPT_ALPHA, OPT_FAIL_SLOWER, OPT_FAIL_ACC, OPT_FAIL_ERR_RATE, OPT_FAIL_P99_TTFT, OPT_MAX_ERROR_RATE, OPT_PORT, OPT_HOST, OPT_MAX_BATCH, OPT_PORT_FILE, OPT_BATCHING, OPT_REUSE_PORT, OPT_SHARD, OPT_START_AT,
       OPT_LOAD_TIMEOUT };

/* The options of every command but serve: each accepts them all and uses
 * its own. */
static const struct option common_opts[] = {
    {"db", required_argument, NULL, OPT_DB},
    {"dry-run", no_argument, NULL, OPT_DRY_RUN},
    {"filter", required_argument, NULL, OPT_FILTER},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"output", required_argument, NULL, 'o'},
    {"last", no_argument, NULL, OPT_LAST},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"backends", required_argument, NULL, OPT_BACKENDS},
    {"metric", required_argument, NULL, OPT_METRIC},
    {"alpha", required_argument, NULL, OPT_ALPHA},
    {"fail-if-slower", required_argument, NULL, OPT_FAIL_SLOWER},
    {"max-error-rate", required_argument, NULL, OPT_MAX_ERROR_RATE},
    {"shard", required_argument, NULL, OPT_SHARD},
    {"start-at", required_argument, NULL, OPT_START_AT},
    {"fail-if-accuracy-drops", required_argument, NULL, OPT_FAIL_ACC},
    {"fail-if-error-rate-above", required_argument, NULL, OPT_FAIL_ERR_RATE},
    {"fail-if-p99-ttft-above", required_argument, NULL, OPT_FAIL_P99_TTFT},
    {"wide", no_argument, NULL, OPT_WIDE},
    {"width", required_argument, NULL, OPT_WIDTH},
    {"load-timeout", required_argument, NULL, OPT_LOAD_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {0, 0, 0, 0},
};

/* serve's, and only those: it has no database, and its options mean
 * nothing to the others. */
static const struct option serve_opts[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"port", required_argument, NULL, OPT_PORT},
    {"host", required_argument, NULL, OPT_HOST},
    {"max-batch", required_argument, NULL, OPT_MAX_BATCH},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"batching", required_argument, NULL, OPT_BATCHING},
    {"reuse-port", no_argument, NULL, OPT_REUSE_PORT},
    {"help", no_argument, NULL, 'h'},
    {0, 0, 0, 0},
};

/* Parse options common to the commands; returns positional args left. */
typedef struct cli {
    const char *db;
    int dry_run;
    char **filters;
    size_t n_filters;
    int limit;
    const char *format;
    const char *output;
    int last;
    const char *backend;
    const char *backends[2];
    int n_backends;
    const char *metric;
    double alpha;
    double fail_pct;
    double fail_acc_pp, fail_err_rate, fail_p99_ttft_pct; /* compare's gates; NaN: off */
    double max_error_rate; /* run: a fraction in [0, 1] */
    uint32_t shard_k, shard_n; /* run --shard K/N; n 0: not sharded */
    int64_t start_at;          /* run --start-at, realtime ns; -1: none */
    const char *start_at_text;
    long port;             /* serve: [0, 65535] */
    const char *host;      /* serve: not yet checked to be an address */
    long max_batch;        /* serve: [1, 65536]; 0 when not given */
    double load_timeout;   /* plugins: seconds, > 0 */
    const char *port_file; /* serve */
    int reuse_port;        /* serve */
    int static_batching;   /* serve: --batching static */
    int wide;              /* show: --wide */
    long width;            /* show: --width N; 0 when not given */
    char **pos;
    int n_pos;
} cli;

/* A number option, or exit 2 naming it. */
static double number_arg(const char *opt, const char *v, const char *usage)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d)) {
        fprintf(stderr, "tokbench: %s %s: expected a number\n%s", opt, v, usage);
        exit(2);
    }
    return d;
}

/* An integer option in [lo, hi], or exit 2 naming it and what it takes
 * ("a port"); argv0 is the command, as in getopt's own messages. */
static long range_arg(const char *argv0, const char *opt, const char *v, long lo, long hi, const char *what)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v || n < lo || n > hi) {
        fprintf(stderr, "tokbench %s: %s %s: expected %s in [%ld, %ld]\n", argv0, opt, v, what, lo, hi);
        exit(2);
    }
    return n;
}

/* Parse argv with one command's options (long ones in opts, short ones
 * in shortopts, getopt's syntax). */
static int parse_opts(int argc, char **argv, const char *usage, const struct option *opts, const char *shortopts,
                      cli *c)
{
    memset(c, 0, sizeof *c);
    c->db = tb_store_default_path();
    c->alpha = 0.05;
    c->fail_pct = c->fail_acc_pp = c->fail_err_rate = c->fail_p99_ttft_pct = NAN;
    c->port = 8000;
    c->host = "127.0.0.1";
    c->load_timeout = 60;
    c->start_at = -1;
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
        switch (ch) {
        case OPT_DB:
            c->db = optarg;
            break;
        case OPT_DRY_RUN:
            c->dry_run = 1;
            break;
        case OPT_FILTER:
            c->filters = tb_xrealloc(c->filters, (c->n_filters + 1) * sizeof(char *));
            c->filters[c->n_filters++] = optarg;
            break;
        case OPT_LIMIT:
            c->limit = atoi(optarg);
            break;
        case OPT_FORMAT:
            c->format = optarg;
            break;
        case 'o':
            c->output = optarg;
            break;
        case OPT_LAST:
            c->last = 1;
            break;
        case OPT_BACKEND:
            c->backend = optarg;
            break;
        case OPT_BACKENDS: /* "--backends X Y" arrives as two of these */
            if (c->n_backends == 2) {
                fprintf(stderr, "tokbench: --backends takes two labels\n%s", usage);
                exit(2);
            }
            c->backends[c->n_backends++] = optarg;
            break;
        case OPT_METRIC:
            c->metric = optarg;
            break;
        case OPT_ALPHA:
            c->alpha = number_arg("--alpha", optarg, usage);
            if (!(c->alpha > 0 && c->alpha < 1)) {
                fprintf(stderr, "tokbench: --alpha %s: expected a level between 0 and 1\n", optarg);
                exit(2);
            }
            break;
        case OPT_FAIL_SLOWER:
            c->fail_pct = number_arg("--fail-if-slower", optarg, usage);
            if (c->fail_pct < 0) {
                fprintf(stderr, "tokbench: --fail-if-slower %s: expected a percentage >= 0\n", optarg);
                exit(2);
            }
            break;
        case OPT_FAIL_ACC:
            c->fail_acc_pp = number_arg("--fail-if-accuracy-drops", optarg, usage);
            if (!(c->fail_acc_pp >= 0 && c->fail_acc_pp <= 100)) {
                fprintf(stderr, "tokbench: --fail-if-accuracy-drops %s: expected percentage points in [0, 100]\n",
                        optarg);
                exit(2);
            }
            break;
        case OPT_FAIL_ERR_RATE:
            c->fail_err_rate = number_arg("--fail-if-error-rate-above", optarg, usage);
            if (!(c->fail_err_rate >= 0 && c->fail_err_rate <= 1)) {
                fprintf(stderr, "tokbench: --fail-if-error-rate-above %s: expected a fraction between 0 and 1\n",
                        optarg);
                exit(2);
            }
            break;
        case OPT_FAIL_P99_TTFT:
            c->fail_p99_ttft_pct = number_arg("--fail-if-p99-ttft-above", optarg, usage);
            if (c->fail_p99_ttft_pct < 0) {
                fprintf(stderr, "tokbench: --fail-if-p99-ttft-above %s: expected a percentage >= 0\n", optarg);
                exit(2);
            }
            break;
        case OPT_SHARD: {
            char *e = NULL;
            if (tb_shard_parse(optarg, &c->shard_k, &c->shard_n, &e) != 0) {
                fprintf(stderr, "%s: %s\n", argv[0], e);
                exit(2);
            }
            break;
        }
        case OPT_START_AT: {
            char *e = NULL;
            if (tb_shard_parse_time(optarg, &c->start_at, &e) != 0) {
                fprintf(stderr, "%s: %s\n", argv[0], e);
                exit(2);
            }
            c->start_at_text = optarg;
            break;
        }
        case OPT_MAX_ERROR_RATE:
            c->max_error_rate = number_arg("--max-error-rate", optarg, usage);
            if (!(c->max_error_rate >= 0 && c->max_error_rate <= 1)) {
                fprintf(stderr, "tokbench: --max-error-rate %s: expected a fraction between 0 and 1\n", optarg);
                exit(2);
            }
            break;
        case OPT_PORT:
            c->port = range_arg(argv[0], "--port", optarg, 0, 65535, "a port");
            break;
        case OPT_HOST:
            c->host = optarg;
            break;
        case OPT_MAX_BATCH:
            c->max_batch = range_arg(argv[0], "--max-batch", optarg, 1, 65536, "an integer");
            break;
        case OPT_PORT_FILE:
            c->port_file = optarg;
            break;
        case OPT_REUSE_PORT:
            c->reuse_port = 1;
            break;
        case OPT_BATCHING:
            if (strcmp(optarg, "static") != 0 && strcmp(optarg, "continuous") != 0) {
                fprintf(stderr, "%s: --batching %s: expected continuous or static\n", argv[0], optarg);
                exit(2);
            }
            c->static_batching = strcmp(optarg, "static") == 0;
            break;
        case OPT_WIDE:
            c->wide = 1;
            break;
        case OPT_WIDTH:
            c->width = range_arg(argv[0], "--width", optarg, 20, 100000, "a width in characters");
            break;
        case OPT_LOAD_TIMEOUT:
            c->load_timeout = number_arg("--load-timeout", optarg, usage);
            if (!(c->load_timeout > 0 && c->load_timeout <= 86400)) {
                fprintf(stderr, "tokbench: --load-timeout %s: expected seconds in (0, 86400]\n", optarg);
                exit(2);
            }
            break;
        case 'h':
            fputs(usage, stdout);
            exit(0);
        default:
            fputs(usage, stderr);
            exit(2);
        }
    }
    c->pos = argv + optind;
    c->n_pos = argc - optind;
    return 0;
}

/* The common options (common_opts, -h, -o FILE). */
static int parse(int argc, char **argv, const char *usage, cli *c)
{
    return parse_opts(argc, argv, usage, common_opts, "ho:", c);
}

/* The width `show` (and `run`'s report) fit the case table to: --width
 * N; no limit with --wide or when stdout is not a terminal (a pipe or a
 * file keeps every column); else $COLUMNS, else the terminal's width,
 * else 80. */
static size_t table_width(const cli *c)
{
    if (c->wide)
        return 0;
    if (c->width > 0)
        return (size_t)c->width;
    if (!isatty(STDOUT_FILENO))
        return 0;
    const char *env = getenv("COLUMNS");
    char *end;
    long n = env ? strtol(env, &end, 10) : 0;
    if (env && *env && !*end && n >= 20 && n <= 100000)
        return (size_t)n;
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

/* The database of a command: `run` and `db merge` write it (and create
 * it when missing); the others only read it and never create one. */
static tb_store *open_store(const char *path, int reader)
{
    tb_store *st;
    char *err = NULL;
    if ((reader ? tb_store_open_reader : tb_store_open)(path, &st, &err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        return NULL;
    }
    if (tb_store_notice(st))
        fprintf(stderr, "tokbench: %s\n", tb_store_notice(st));
    return st;
}

/* End the session; a failure is said but changes no exit status: the
 * cases are stored, and the next open of the database marks a session
 * left 'running' by a process that is gone. */
static void end_session(tb_store *st, const char *db, int64_t session, const char *status)
{
    char *err = NULL;
    if (tb_store_session_end(st, session, status, &err) != 0) {
        fprintf(stderr, "tokbench: %s: %s\n", db, err);
        free(err);
    }
}

static char *join_args(int argc, char **argv)
{
    tb_str b = {0};
    for (int i = 0; i < argc; i++)
        tb_str_appendf(&b, "%s%s", i ? " " : "", argv[i]);
    return tb_str_take(&b);
}

static int run_suite(int argc, char **argv, const char *cmdline)
{
    cli c;
    parse(argc, argv, usage_run, &c);
    if (c.n_pos != 1) {
        fputs(usage_run, stderr);
        free(c.filters);
        return 2;
    }
    /* Every error of the suite at once, so that one run lists all there
     * is to fix: what does not parse, then what the plan finds in what
     * did (plugins, options, the plugins' own checks, the prompt set,
     * missing files), then cases too large to measure. */
    if (c.shard_n && c.start_at < 0) {
        fprintf(stderr, "tokbench: --shard needs --start-at TIME: the shards start together, and the time names "
                        "the run they belong to\n");
        free(c.filters);
        return 2;
    }
    tb_suite suite;
    char *err = NULL;
    tb_str errors = {0};
    if (tb_suite_parse(c.pos[0], &suite, &err) != 0)
        tb_str_append(&errors, err);
    free(err);
    if (c.shard_n)
        suite.seed = tb_shard_seed(suite.seed, c.shard_k);
    err = NULL;
    tb_telemetry_config tc;
    if (tb_telemetry_config_parse(&suite, &tc, &err) != 0)
        tb_str_append(&errors, err);
    free(err);
    err = NULL;
    tb_telemetry_config_free(&tc);
    tb_plan plan;
    int planned = tb_plan_build(&suite, &plan, &err) == 0;
    if (!planned)
        tb_str_append(&errors, err);
    free(err);
    err = NULL;
    if (planned && c.shard_n && tb_shard_apply(&plan, c.shard_k, c.shard_n, &err) != 0)
        tb_str_append(&errors, err);
    free(err);
    err = NULL;
    /* every case of the suite, --filter or not: an absurd one is an error
     * in the suite (and a --dry-run says so) */
    if (planned && tb_plan_check_sizes(&plan, &err) != 0)
        tb_str_append(&errors, err);
    free(err);
    err = NULL;
    if (errors.len) {
        fprintf(stderr, "tokbench: suite errors:\n%s", errors.s);
        tb_str_free(&errors);
        if (planned)
            tb_plan_free(&plan);
        tb_suite_free(&suite);
        free(c.filters);
        return 2;
    }
    if (tb_plan_filter(&plan, c.filters, c.n_filters, &err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        tb_plan_free(&plan);
        tb_suite_free(&suite);
        free(c.filters);
        return 2;
    }
    free(c.filters);
    if (c.dry_run) {
        tb_plan_print(&plan, stdout);
        tb_plan_free(&plan);
        tb_suite_free(&suite);
        return 0;
    }
    if (plan.n_cases == 0) {
        fprintf(stderr, "tokbench: no case to run (check --filter)\n");
        tb_plan_free(&plan);
        tb_suite_free(&suite);
        return 2;
    }
    int rc = 1;
    tb_store *st = open_store(c.db, 0);
    if (!st)
        goto out;
    tb_machine_info mi;
    tb_machine_info_collect(&mi);
    int64_t machine = tb_store_machine(st, &mi, &err);
    tb_plan_redact_suite_text(&plan); /* secrets written into the suite stay out of the database */
    tb_session_info si = {.machine_id = machine, .suite = &suite, .command_line = cmdline,
                          .config_json = plan.config_json, .config_sha256 = plan.config_sha256};
    int64_t session = machine >= 0 ? tb_store_session_begin(st, &si, &err) : -1;
    if (session < 0) {
        fprintf(stderr, "tokbench: %s: cannot record the session: %s\n", c.db, err);
        free(err);
        goto out;
    }
    int64_t *backend_ids = tb_xcalloc(plan.n_backends, sizeof *backend_ids);
    for (size_t i = 0; i < plan.n_backends; i++) {
        backend_ids[i] = tb_store_backend(st, session, &plan.backends[i], &err);
        if (backend_ids[i] < 0) { /* its cases could not be stored either */
            fprintf(stderr, "tokbench: %s: cannot record the session: %s\n", c.db, err);
            free(err);
            free(backend_ids);
            end_session(st, c.db, session, "failed");
            goto out;
        }
    }
    /* The run goes on without the items: its figures do not need them. */
    if (tb_store_prompts(st, session, &plan, &err) != 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c.db, err);
        free(err);
    }
    fprintf(stderr, "tokbench: session %lld: suite %s, %zu cases, database %s\n", (long long)session, suite.name,
            plan.n_cases, c.db);
    for (size_t i = 0; i < plan.n_backends; i++)
        for (size_t k = 0; k < plan.backends[i].n_notes; k++)
            fprintf(stderr, "note: %s: %s\n", plan.backends[i].sb->label, plan.backends[i].notes[k]);

    /* The session's clock (and a shard's share): every sample's times are
     * this host's monotonic clock; the offset makes them wall-clock
     * times, on which the shards of a run are joined. */
    char start_text[32] = "";
    tb_session_shard sh = {.shard_index = c.shard_k, .shard_count = c.shard_n};
    if (c.start_at >= 0) {
        tb_shard_format_time(c.start_at, start_text);
        sh.start_at = start_text;
        if (c.shard_n)
            fprintf(stderr, "tokbench: shard %u/%u starts at %s\n", c.shard_k, c.shard_n, start_text);
        else
            fprintf(stderr, "tokbench: starts at %s\n", start_text);
    }
    sh.start_late_ns = c.start_at >= 0 ? tb_shard_wait(c.start_at) : 0;
    sh.clock_offset_ns = tb_shard_clock_offset();
    if (tb_store_session_shard(st, session, &sh, &err) != 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c.db, err);
        free(err);
        err = NULL;
    }

    tb_run_summary sum;
    tb_run_outcome outcome = tb_runner_run(&plan, st, session, backend_ids, c.max_error_rate, &sum);
    free(backend_ids);
    end_session(st, c.db, session, outcome == TB_RUN_COMPLETED ? "completed"
                                   : outcome == TB_RUN_INTERRUPTED ? "interrupted" : "failed");
    tb_report_show(tb_store_db(st), session, stdout, table_width(&c));
    fflush(stdout); /* the report before the last line, also when both go to one file */
    char degraded[96] = "";
    if (sum.degraded)
        snprintf(degraded, sizeof degraded, " (%zu degraded: failed requests over --max-error-rate %g)", sum.degraded,
                 c.max_error_rate);
    fprintf(stderr, "tokbench: session %lld %s: %zu ok%s, %zu failed, %zu skipped; stored in %s\n", (long long)session,
            outcome == TB_RUN_COMPLETED ? "completed" : outcome == TB_RUN_INTERRUPTED ? "interrupted" : "failed",
            sum.ok, degraded, sum.failed, sum.skipped, c.db);
    rc = outcome == TB_RUN_INTERRUPTED           ? 130
         : outcome == TB_RUN_STORE_FAILED          ? 1
         : sum.failed || sum.degraded ? 1
                                                   : 0;
out:
    tb_store_close(st);
    tb_plan_free(&plan);
    tb_suite_free(&suite);
    return rc;
}

static int cmd_run(int argc, char **argv, int full_argc, char **full_argv)
{
    /* Joined before parsing: getopt permutes argv, and the stored command
     * line should read as typed. */
    char *cmdline = join_args(full_argc, full_argv);
    int rc = run_suite(argc, argv, cmdline);
    free(cmdline);
    return rc;
}

/* One plugin of the listing: what its loading process said, probe()
 * included (a plugin's code never runs in this process). */
static void print_plugin(const tb_plugin *p)
{
    const tb_backend_ops *o = p->ops;
    char *caps = tb_caps_string(o->capabilities);
    int ok = p->probe_status == TB_OK;
    printf("  %-12s %-10s %s\n", o->name, o->version, o->description ? o->description : "");
    printf("  %-12s capabilities: %s\n", "", caps);
    printf("  %-12s runs here: %s%s%s%s\n", "", ok ? "yes" : "no", ok ? "" : " (",
           ok ? "" : (p->probe_why && p->probe_why[0] ? p->probe_why : "probe failed"), ok ? "" : ")");
    printf("  %-12s %s\n", "", p->path);
    free(caps);
}

static int cmd_plugins(int argc, char **argv)
{
    cli c;
    parse(argc, argv, usage_plugins, &c);
    if (c.n_pos > 1) {
        fputs(usage_plugins, stderr);
        return 2;
    }
    if (c.n_pos == 0) {
        char **paths;
        size_t n = tb_plugin_scan(&paths);
        if (!n)
            printf("no plugins found (searched $TOKBENCH_PLUGIN_PATH, the build tree, %s)\n", TB_PLUGIN_INSTALL_DIR);
        else
            printf("plugins:\n");
        for (size_t i = 0; i < n; i++) {
            tb_plugin p;
            char *err = NULL;
            if (tb_plugin_open(paths[i], c.load_timeout, "--load-timeout", TB_PLUGIN_PROBE, &p, &err) != 0) {
                printf("  %-12s %s\n", "(invalid)", err);
                free(err);
            } else {
                print_plugin(&p);
                tb_plugin_close(&p);
            }
            free(paths[i]);
        }
        free(paths);
        return 0;
    }
    tb_plugin p;
    char *err = NULL;
    if (tb_plugin_open(c.pos[0], c.load_timeout, "--load-timeout", TB_PLUGIN_PROBE, &p, &err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        return 1;
    }
    print_plugin(&p);
    printf("\noptions (set them in the plugin's [backend LABEL] section; list values are swept):\n");
    for (uint32_t i = 0; i < p.ops->n_options; i++) {
        const tb_option_decl *d = &p.ops->options[i];
        char *type = tb_option_describe_type(d);
        printf("  %-20s %s, default %s%s\n      %s\n", d->name, type, d->default_value,
               (d->flags & TB_OPTF_LOAD) ? " (load-time: a change reloads the backend)" : "",
               d->help ? d->help : "");
        free(type);
    }
    if (!p.ops->n_options)
        printf("  (none)\n");
    tb_plugin_close(&p);
    return 0;
}

static int cmd_sessions(int argc, char **argv)
{
    cli c;
    parse(argc, argv, usage_sessions, &c);
    tb_store *st = open_store(c.db, 1);
    if (!st)
        return 1;
    int rc = tb_report_sessions(tb_store_db(st), c.limit, stdout) == 0 ? 0 : 1;
    tb_store_close(st);
    return rc;
}

static int cmd_show(int argc, char **argv)
{
    cli c;
    parse(argc, argv, usage_show, &c);
    if (c.n_pos > 1) {
        fputs(usage_show, stderr);
        return 2;
    }
    tb_store *st = open_store(c.db, 1);
    if (!st)
        return 1;
    char *err = NULL;
    int64_t id = tb_report_resolve_session(tb_store_db(st), c.n_pos ? c.pos[0] : NULL, &err);
    int rc = 1;
    if (id < 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
    } else {
        rc = tb_report_show(tb_store_db(st), id, stdout, table_width(&c)) == 0 ? 0 : 1;
    }
    tb_store_close(st);
    return rc;
}

static int cmd_export(int argc, char **argv)
{
    cli c;
    parse(argc, argv, usage_export, &c);
    if (c.n_pos != 1 || !c.format || (strcmp(c.format, "csv") && strcmp(c.format, "json"))) {
        if (c.format && strcmp(c.format, "csv") && strcmp(c.format, "json"))
            fprintf(stderr, "tokbench: --format %s: expected csv or json\n", c.format);
        fputs(usage_export, stderr);
        return 2;
    }
    tb_store *st = open_store(c.db, 1);
    if (!st)
        return 1;
    char *err = NULL;
    int rc = 1;
    int64_t id = tb_report_resolve_session(tb_store_db(st), c.pos[0], &err);
    if (id < 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        tb_store_close(st);
        return 1;
    }
    FILE *out = c.output ? fopen(c.output, "w") : stdout;
    if (!out) {
        fprintf(stderr, "tokbench: %s: cannot write: %m\n", c.output);
    } else {
        rc = (strcmp(c.format, "csv") == 0 ? tb_export_csv : tb_export_json)(tb_store_db(st), id, out, &err) == 0
                 ? 0
                 : 1;
        if (err) {
            fprintf(stderr, "tokbench: %s: %s\n", c.db, err);
            free(err);
        }
        if (out != stdout && fclose(out) != 0) {
            fprintf(stderr, "tokbench: %s: write failed: %m\n", c.output);
            rc = 1;
        }
        if (out != stdout && rc != 0)
            remove(c.output); /* no file that looks like an export */
    }
    tb_store_close(st);
    return rc;
}

/* -o FILE, else stdout. NULL after printing why. */
static FILE *open_output(const char *path)
{
    if (!path || strcmp(path, "-") == 0)
        return stdout;
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "tokbench: %s: cannot write: %m\n", path);
    return f;
}

/* Close -o FILE; a failed write removes the partial file. Returns rc, or 1
 * when closing failed. */
static int close_output(FILE *f, const char *path, int rc)
{
    if (f == stdout) {
        if (fflush(stdout) != 0) {
            fprintf(stderr, "tokbench: write to stdout failed: %m\n");
            return 1;
        }
        return rc;
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "tokbench: %s: write failed: %m\n", path);
        rc = 1;
    }
    if (rc != 0)
        remove(path);
    return rc;
}

static int cmd_report(int argc, char **argv)
{
    cli c;
    parse(argc, argv, usage_report, &c);
    free(c.filters);
    const char *fmt = c.format ? c.format : "md";
    if (strcmp(fmt, "markdown") == 0)
        fmt = "md";
    if (c.n_pos > 1 || (c.last && c.n_pos)) {
        fputs(usage_report, stderr);
        return 2;
    }
    if (strcmp(fmt, "md") && strcmp(fmt, "html") && strcmp(fmt, "csv") && strcmp(fmt, "json")) {
        fprintf(stderr, "tokbench: --format %s: expected md, html, csv or json\n", fmt);
        return 2;
    }
    tb_store *st = open_store(c.db, 1);
    if (!st)
        return 1;
    char *err = NULL;
    int64_t id = tb_report_resolve_session(tb_store_db(st), c.n_pos ? c.pos[0] : NULL, &err);
    if (id < 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c.db, err);
        free(err);
        tb_store_close(st);
        return 2;
    }
    FILE *out = open_output(c.output);
    int rc = 1;
    if (out) {
        sqlite3 *db = tb_store_db(st);
        if (!strcmp(fmt, "csv"))
            rc = tb_export_csv(db, id, out, &err) == 0 ? 0 : 1;
        else if (!strcmp(fmt, "json"))
            rc = tb_export_json(db, id, out, &err) == 0 ? 0 : 1;
        else if ((!strcmp(fmt, "md") ? tb_report_markdown : tb_report_html)(db, id, out, &err) == 0)
            rc = 0;
        if (err) {
            fprintf(stderr, "tokbench: %s\n", err);
            free(err);
        }
        rc = close_output(out, c.output, rc);
        if (rc == 0 && out != stdout)
            fprintf(stderr, "tokbench: session %lld: %s report written to %s\n", (long long)id, fmt, c.output);
    }
    tb_store_close(st);
    return rc;
}

/* "a, b,c" -> {"a", "b", "c"}: pointers into *block (free both). */
static char **split_commas(const char *s, size_t *n, char **block)
{
    char *copy = *block = tb_xstrdup(s), *save = NULL;
    char **v = NULL;
    *n = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        v = tb_xrealloc(v, (*n + 1) * sizeof *v);
        v[(*n)++] = tb_trim(t);
    }
    return v;
}

static int cmd_compare(int argc, char **argv)
{
    /* "--backends X Y" -> "--backends X --backends Y" for getopt. */
    char **args = tb_xcalloc((size_t)argc * 2 + 1, sizeof *args);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        args[n++] = argv[i];
        if (strcmp(argv[i], "--backends") == 0 && i + 2 < argc && argv[i + 2][0] != '-') {
            args[n++] = argv[++i];
            args[n++] = "--backends";
            args[n++] = argv[++i];
        }
    }
    cli c;
    parse(n, args, usage_compare, &c);
    free(c.filters);
    int rc = 2;
    tb_store *st = NULL;
    char **metrics = NULL, *metric_block = NULL;
    size_t n_metrics = 0;
    if (c.n_backends == 1 || (c.n_backends == 0 && c.n_pos != 2) || (c.n_backends == 2 && c.n_pos < 1) ||
        c.n_pos > 2) {
        if (c.n_backends == 1)
            fprintf(stderr, "tokbench: --backends takes two labels: --backends X Y\n");
        fputs(usage_compare, stderr);
        goto out;
    }
    if (c.metric)
        metrics = split_commas(c.metric, &n_metrics, &metric_block);
    if (c.metric && !n_metrics) {
        fprintf(stderr, "tokbench: --metric: expected a list of metric names\n");
        goto out;
    }
    st = open_store(c.db, 1);
    if (!st) {
        rc = 1;
        goto out;
    }
    char *err = NULL;
    int64_t a = tb_report_resolve_session(tb_store_db(st), c.pos[0], &err), b = a;
    if (a >= 0 && c.n_pos == 2)
        b = tb_report_resolve_session(tb_store_db(st), c.pos[1], &err);
    if (a < 0 || b < 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c.db, err);
        free(err);
        goto out;
    }
    tb_compare_opts o = {.a = a, .b = b, .metrics = metrics, .n_metrics = n_metrics, .alpha = c.alpha,
                         .fail_pct = c.fail_pct, .fail_acc_pp = c.fail_acc_pp, .fail_err_rate = c.fail_err_rate,
                         .fail_p99_ttft_pct = c.fail_p99_ttft_pct};
    if (c.n_backends == 2) {
        o.backend_a = c.backends[0];
        o.backend_b = c.backends[1];
    }
    tb_compare_result res;
    if (tb_compare_run(tb_store_db(st), &o, stdout, &res, &err) != 0) {
        fprintf(stderr, "tokbench: compare: %s\n", err);
        free(err);
        goto out;
    }
    rc = tb_compare_gated(&o) && res.regressions ? 1 : 0;
out:
    free(metrics);
    free(metric_block);
    tb_store_close(st);
    free(args);
    return rc;
}

static int cmd_history(int argc, char **argv)
{
    cli c;
    parse(argc, argv, usage_history, &c);
    const char *fmt = c.format ? c.format : "text";
    int rc = 2;
    tb_store *st = NULL;
    if (!c.backend || c.n_pos) {
        if (!c.backend)
            fprintf(stderr, "tokbench: history: --backend LABEL is required\n");
        fputs(usage_history, stderr);
        goto out;
    }
    if (strcmp(fmt, "text") && strcmp(fmt, "csv") && strcmp(fmt, "html")) {
        fprintf(stderr, "tokbench: --format %s: expected text, csv or html\n", fmt);
        goto out;
    }
    st = open_store(c.db, 1);
    if (!st) {
        rc = 1;
        goto out;
    }
    tb_history h;
    char *err = NULL;
    int hrc = tb_history_load(tb_store_db(st), c.backend, c.metric ? c.metric : "agg_tps", c.filters, c.n_filters,
                              &h, &err);
    if (hrc != 0) {
        fprintf(stderr, "tokbench: history: %s: %s\n", c.db, err);
        free(err);
        if (hrc == -2) /* the database, not the question */
            rc = 1;
        goto out;
    }
    FILE *f = open_output(c.output);
    rc = 1;
    if (f) {
        if (!strcmp(fmt, "text"))
            tb_history_print(&h, f);
        else if (!strcmp(fmt, "csv"))
            tb_history_csv(&h, f);
        else
            tb_history_html(&h, f);
        rc = close_output(f, c.output, 0);
    }
    tb_history_free(&h);
out:
    tb_store_close(st);
    free(c.filters);
    return rc;
}

static int cmd_db(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "merge") && strcmp(argv[1], "--help") && strcmp(argv[1], "-h"))) {
        if (argc >= 2)
            fprintf(stderr, "tokbench: db: unknown subcommand \"%s\"\n", argv[1]);
        fputs(usage_db, stderr);
        return 2;
    }
    if (strcmp(argv[1], "merge") != 0) { /* --help */
        fputs(usage_db, stdout);
        return 0;
    }
    cli c;
    parse(argc - 1, argv + 1, usage_db, &c);
    free(c.filters);
    tb_store *st = open_store(c.db, 0);
    if (!st)
        return 1;
    char *err = NULL;
    int rc = 0;
    for (int i = 0; rc == 0 && i < c.n_pos; i++) {
        tb_merge_result r;
        if (tb_merge(tb_store_db(st), c.pos[i], &r, &err) != 0) {
            fprintf(stderr, "tokbench: db merge: %s\n", err);
            free(err);
            err = NULL;
            rc = 1;
        } else {
            printf("merged %s into %s: %zu session%s imported (%zu cases, %zu samples, %zu requests; %zu rows), "
                   "%zu already present, %zu completed; machines: %zu new, %zu known\n",
                   c.pos[i], c.db, r.sessions_new, r.sessions_new == 1 ? "" : "s", r.cases, r.samples, r.requests,
                   r.rows, r.sessions_known, r.sessions_completed, r.machines_new, r.machines_known);
            if (r.running)
                fprintf(stderr, "tokbench: db merge: %s: not merged, still being written by a run on this machine: "
                                "%s; merge again once it has ended\n", c.pos[i], r.running);
            tb_merge_result_free(&r);
        }
    }
    tb_shard_join_result j;
    if (rc == 0 && tb_shard_join(tb_store_db(st), &j, &err) != 0) {
        fprintf(stderr, "tokbench: db merge: %s\n", err);
        free(err);
        rc = 1;
    } else if (rc == 0) {
        if (j.joined || j.known || j.waiting)
            printf("shards: %zu run%s joined now, %zu joined before%s%s\n", j.joined, j.joined == 1 ? "" : "s",
                   j.known, j.joined_uuids ? "; new sessions: " : "", j.joined_uuids ? j.joined_uuids : "");
        if (j.waiting)
            fprintf(stderr, "tokbench: db merge: not joined: %s\n", j.waiting);
        tb_shard_join_result_free(&j);
    }
    tb_store_close(st);
    return rc;
}

static int cmd_serve(int argc, char **argv)
{
    const char *why = tb_serve_unavailable(); /* before --help: scripts ask it whether serve exists */
    if (why) {
        fprintf(stderr, "tokbench serve: %s\n", why);
        return 1;
    }
    cli c;
    parse_opts(argc, argv, usage_serve, serve_opts, "h", &c);
    if (!c.backend || c.n_pos != 1) {
        fprintf(stderr, "tokbench serve: %s\n\n%s", !c.backend ? "--backend LABEL is required" : "expected one SUITE",
                usage_serve);
        return 2;
    }
    struct in_addr a;
    if (inet_pton(AF_INET, c.host, &a) != 1) {
        fprintf(stderr, "tokbench serve: --host %s: expected an IPv4 address such as 127.0.0.1\n", c.host);
        return 2;
    }
    tb_serve_options o = {.suite = c.pos[0], .backend = c.backend, .host = c.host, .port = (uint16_t)c.port,
                          .max_batch = (uint32_t)c.max_batch, .port_file = c.port_file,
                          .static_batching = c.static_batching, .reuse_port = c.reuse_port};
    return tb_serve_main(&o);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    int sub_argc = argc - 1;
    char **sub_argv = argv + 1;
    if (!strcmp(cmd, "run"))
        return cmd_run(sub_argc, sub_argv, argc, argv);
    if (!strcmp(cmd, "plugins"))
        return cmd_plugins(sub_argc, sub_argv);
    if (!strcmp(cmd, "sessions"))
        return cmd_sessions(sub_argc, sub_argv);
    if (!strcmp(cmd, "show"))
        return cmd_show(sub_argc, sub_argv);
    if (!strcmp(cmd, "export"))
        return cmd_export(sub_argc, sub_argv);
    if (!strcmp(cmd, "report"))
        return cmd_report(sub_argc, sub_argv);
    if (!strcmp(cmd, "compare"))
        return cmd_compare(sub_argc, sub_argv);
    if (!strcmp(cmd, "history"))
        return cmd_history(sub_argc, sub_argv);
    if (!strcmp(cmd, "db"))
        return cmd_db(sub_argc, sub_argv);
    if (!strcmp(cmd, "serve"))
        return cmd_serve(sub_argc, sub_argv);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("tokbench %s (%s), %s build, gcc %s, CUDA build %s, schema %d, plugin ABI %d\n", TB_VERSION,
               TB_GIT_COMMIT, TB_BUILD_TYPE, __VERSION__, TB_CUDA_BUILD_VERSION, tb_store_schema_version(),
               TB_ABI_MAJOR);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        fputs(usage_main, stdout);
        return 0;
    }
    fprintf(stderr, "tokbench: unknown command \"%s\"\n\n%s", cmd, usage_main);
    return 2;
}
