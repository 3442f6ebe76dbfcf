/* options.c — the tokbench command line, declared once: every command
 * (its forms, what it does, its exit status) and every option (which
 * commands take it, its argument, help, default, range or choices, and
 * the field of cli_args it sets). The parser, every usage text and
 * docs/CLI.md are made from these rows; adding an option is adding a
 * row here and reading its field in the command. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cli.h"
#include "serve.h"
#include "shard.h"
#include "store.h"
#include "util.h"

#define FIELD(f) offsetof(cli_args, f)

/* --db: the store says where the database is by default (the
 * environment, else the current folder). */
static int db_arg(cli_args *a, const char *text, char **err)
{
    (void)err;
    a->db = text ? text : tb_store_default_path();
    return 0;
}

static int shard_arg(cli_args *a, const char *text, char **err)
{
    if (!text) {
        a->shard_k = a->shard_n = 0;
        return 0;
    }
    return tb_shard_parse(text, &a->shard_k, &a->shard_n, err);
}

static int start_at_arg(cli_args *a, const char *text, char **err)
{
    a->start_at = -1;
    a->start_at_text = text;
    return text ? tb_shard_parse_time(text, &a->start_at, err) : 0;
}

static const cli_choice report_formats[] = {
    {"md", "Markdown: conditions, warnings, every table", NULL},
    {"html", "one self-contained file: the same plus SVG charts (tokens/s vs steps, latency and throughput vs "
             "batch, quality vs speed when scored, inter-token latency, history across sessions)", NULL},
    {"csv", "the summary view's rows", NULL},
    {"json", "everything stored", NULL},
    {"markdown", NULL, "md"},
    {NULL, NULL, NULL},
};

static const cli_choice export_formats[] = {
    {"csv", "the summary view's rows for the session", NULL},
    {"json", "everything stored: session, machine, backends, cases, metrics, samples, requests, emissions", NULL},
    {"aiperf", "each case as AIPerf's profile_export_aiperf.json: the metrics both define alike", NULL},
    {"vllm", "each case as vLLM's `bench serve --save-result` JSON: the metrics both define alike", NULL},
    {NULL, NULL, NULL},
};

static const cli_choice history_formats[] = {
    {"text", "a table per case", NULL},
    {"csv", "one row per case and session", NULL},
    {"html", "a page with a chart per case", NULL},
    {NULL, NULL, NULL},
};

static const cli_choice batching_modes[] = {
    {"continuous", "a request joins the running batch at the next step and leaves at its end (backends with step "
                   "ops: ar)", NULL},
    {"static", "batches run to their end, requests arriving meanwhile wait (every backend; the fallback)", NULL},
    {NULL, NULL, NULL},
};

static const cli_choice bench_plugins[] = {
    {"ar", "autoregressive: Llama, Qwen2, Qwen3, Qwen3-MoE", NULL},
    {"diffusion", "masked and block diffusion: LLaDA, LLaDA-MoE, Dream, SDAR, Fast-dLLM v2, LLaDA 2.x", NULL},
    {"flow", "continuous diffusion, LangFlow layout", NULL},
    {NULL, NULL, NULL},
};

/* The commands that read a database. */
#define DB_READERS (CLI_SESSIONS | CLI_SHOW | CLI_REPORT | CLI_COMPARE | CLI_HISTORY | CLI_EXPORT)

const cli_option cli_options[] = {
    {.name = "db", .arg = "FILE", .commands = CLI_RUN | CLI_BENCH | CLI_DB | DB_READERS, .kind = CLI_CALL, .call = db_arg,
     .help = "the database (default $TOKBENCH_DB, else ./tokbench.db); run and db merge create it when missing, "
             "the others only read it"},

    /* run */
    {.name = "dry-run", .commands = CLI_RUN, .kind = CLI_FLAG, .field = FIELD(dry_run),
     .help = "print the expanded cases and exit; runs nothing"},
    {.name = "filter", .arg = "KEY=V1[,V2...]", .commands = CLI_RUN, .kind = CLI_LIST, .field = FIELD(filters),
     .help = "keep the cases whose KEY (backend, a dimension such as batch, or a backend option) is one of the "
             "values (with --shard, the suite's values, not the shard's share)"},
    {.name = "max-error-rate", .arg = "X", .commands = CLI_RUN | CLI_BENCH, .kind = CLI_DOUBLE, .field = FIELD(max_error_rate),
     .def = "0", .lo = 0, .hi = 1, .what = "a fraction",
     .help = "exit 1 when a case's failed requests are more than the fraction X of its requests (0: any failed "
             "request); a case with a failed request is shown degraded whatever X, one whose every request failed "
             "is failed"},
    {.name = "shard", .arg = "K/N", .commands = CLI_RUN, .kind = CLI_CALL, .call = shard_arg,
     .help = "run shard K (0-based) of N of every case's load: its share of the requests and of the concurrency, "
             "request_rate / N, a seed of its own; on N machines (examples/: a Kubernetes Indexed Job, a Slurm job "
             "array), then `db merge` joins the N sessions into one (serving backends only; N >= 2; no load search: "
             "request_rate = sweep | slo is refused)"},
    {.name = "start-at", .arg = "TIME", .commands = CLI_RUN, .kind = CLI_CALL, .call = start_at_arg,
     .help = "start the cases at TIME (UTC, 2026-12-01T19:00:00Z, or @UNIX_SECONDS): the N shards' first calls "
             "start together, later ones at each shard's pace (db merge says how far apart they ran; required with "
             "--shard; it names the run the shards belong to)"},

    /* bench: cli/bench.c checks each value and writes it into the suite */
    {.name = "url", .arg = "URL", .commands = CLI_BENCH, .kind = CLI_STRING, .field = FIELD(bench.url),
     .help = "an OpenAI-compatible server, http[s]://HOST[:PORT][/PATH] (/v1/completions is appended: no query or "
             "fragment; a port in 1..65535): the suite's backend is plugins/http. A password (USER:PASS@) is refused: "
             "the suite file would keep it; use --api-key-env, or a suite of your own with url = "
             "http://USER:${VAR}@HOST"},
    {.name = "model", .arg = "NAME|FOLDER|preset:NAME", .commands = CLI_BENCH, .kind = CLI_STRING,
     .field = FIELD(bench.model),
     .help = "with --url: the model name each request sends (model_name). Without --url: the engine's model, a "
             "Hugging Face folder or preset:NAME (random weights)"},
    {.name = "plugin", .commands = CLI_BENCH, .kind = CLI_CHOICE, .field = FIELD(bench.plugin),
     .choices = bench_plugins,
     .help = "the engine plugin (without --url). Default: from the folder's config.json (a Llama or Qwen family: ar; "
             "LLaDA, Dream, SDAR, Fast-dLLM v2, LLaDA 2.x: diffusion; LangFlow: flow); required with a preset or an "
             "unknown family"},
    {.name = "tokenizer", .arg = "FILE", .commands = CLI_BENCH, .kind = CLI_STRING, .field = FIELD(bench.tokenizer),
     .help = "with --url: the model's tokenizer.json, for exact prompt lengths and output token counts"},
    {.name = "concurrency", .arg = "N[,N...]", .commands = CLI_BENCH, .kind = CLI_STRING,
     .field = FIELD(bench.concurrency),
     .help = "with --url: closed loops of N requests in flight, one case each (default 1,8,32 when --request-rate "
             "is not given)"},
    {.name = "request-rate", .arg = "sweep|slo|R[,R...]", .commands = CLI_BENCH, .kind = CLI_STRING,
     .field = FIELD(bench.request_rate),
     .help = "with --url: open loops at R requests/s (with --concurrency: at most N in flight), or a load search: "
             "sweep maps latency against rate, slo finds the highest rate within --slo (the default when --slo is "
             "given)"},
    {.name = "input-len", .arg = "N[,N...]|DIST:MEAN:SD[:MIN:MAX]", .commands = CLI_BENCH, .kind = CLI_STRING,
     .field = FIELD(bench.input_len),
     .help = "prompt tokens (default 512): lengths, one case each, or with --url a distribution, DIST uniform, "
             "normal or lognormal with mean MEAN and standard deviation SD, clipped to MIN..MAX"},
    {.name = "output-len", .arg = "N[,N...]|DIST:MEAN:SD[:MIN:MAX]", .commands = CLI_BENCH, .kind = CLI_STRING,
     .field = FIELD(bench.output_len),
     .help = "output tokens (default 128), as --input-len; a distribution's MAX is at most 4 x MEAN"},
    {.name = "dataset", .arg = "FILE", .commands = CLI_BENCH, .kind = CLI_STRING, .field = FIELD(bench.dataset),
     .help = "with --url: the prompts from a local JSONL file of conversations (ShareGPT or OpenAI chat); output "
             "lengths from its answers with --tokenizer and without --output-len, else from --output-len"},
    {.name = "duration", .arg = "SECONDS", .commands = CLI_BENCH, .kind = CLI_DOUBLE, .field = FIELD(bench.duration),
     .lo = 0, .open_lo = 1, .hi = 604800, .what = "seconds",
     .help = "with --request-rate: each open-loop load lasts this long (open_loop_duration; default 1,601 "
             "requests); not with --requests, which sizes every load"},
    {.name = "slo", .arg = "ttft_p99=MS[,tpot_p99=MS]", .commands = CLI_BENCH, .kind = CLI_LIST,
     .field = FIELD(bench.slo),
     .help = "with --url: the limits of the slo search (slo_ttft_p99_ms, slo_tpot_p99_ms), in milliseconds; "
             "repeated, the limits add up (a limit given twice is refused)"},
    {.name = "header", .arg = "NAME:VALUE", .commands = CLI_BENCH, .kind = CLI_LIST, .field = FIELD(bench.headers),
     .help = "with --url: a request header; stored with the run and its command line, so no secrets: use "
             "--api-key-env"},
    {.name = "api-key-env", .arg = "VAR", .commands = CLI_BENCH, .kind = CLI_STRING,
     .field = FIELD(bench.api_key_env),
     .help = "with --url: the environment variable holding the API key, sent as Bearer, never stored"},
    {.name = "batch", .arg = "N[,N...]", .commands = CLI_BENCH, .kind = CLI_STRING, .field = FIELD(bench.batch),
     .help = "without --url: the engine's batch sizes, one case each (default 1)"},
    {.name = "steps", .arg = "N[,N...]", .commands = CLI_BENCH, .kind = CLI_STRING, .field = FIELD(bench.steps),
     .help = "diffusion and flow: denoising steps, one case each (required with flow; diffusion's default: one "
             "token a step)"},
    {.name = "requests", .arg = "N", .commands = CLI_BENCH, .kind = CLI_INT, .field = FIELD(bench.requests), .lo = 1,
     .hi = 1000000000, .what = "a count",
     .help = "with --url: requests per load (default max(32, 4 x concurrency); an open loop: --duration's, else "
             "1,601)"},
    {.name = "repeat", .arg = "N", .commands = CLI_BENCH, .kind = CLI_INT, .field = FIELD(bench.repeat), .def = "3",
     .lo = 1, .hi = 1000, .what = "a count", .help = "measured repetitions of each case, after one warm-up"},
    {.name = "print-suite", .commands = CLI_BENCH, .kind = CLI_FLAG, .field = FIELD(bench.print_suite),
     .help = "print the suite and exit; runs nothing (keep it, edit it, `tokbench run` it)"},

    /* the case table of show and run */
    {.name = "wide", .commands = CLI_SHOW | CLI_RUN | CLI_BENCH, .kind = CLI_FLAG, .field = FIELD(wide),
     .help = "the case table with every column, whatever the width"},
    {.name = "width", .arg = "N", .commands = CLI_SHOW | CLI_RUN | CLI_BENCH, .kind = CLI_INT, .field = FIELD(width), .lo = 20,
     .hi = 100000, .what = "a width in characters",
     .help = "fit the case table to N characters, terminal or not"},

    /* plugins */
    {.name = "load-timeout", .arg = "SECONDS", .commands = CLI_PLUGINS, .kind = CLI_DOUBLE,
     .field = FIELD(load_timeout), .def = "60", .lo = 0, .open_lo = 1, .hi = 86400, .what = "seconds",
     .help = "each plugin is loaded and probed in a process of its own, which must answer within this time"},

    /* sessions */
    {.name = "limit", .arg = "N", .commands = CLI_SESSIONS, .kind = CLI_INT, .field = FIELD(limit), .def = "0",
     .lo = 0, .hi = 2147483647, .what = "a count", .help = "the N newest sessions only; 0: all"},

    /* history */
    {.name = "backend", .arg = "LABEL", .commands = CLI_HISTORY, .kind = CLI_STRING, .field = FIELD(backend),
     .required = 1, .help = "the backend's label"},
    {.name = "metric", .arg = "NAME", .commands = CLI_HISTORY, .kind = CLI_STRING, .field = FIELD(metric),
     .def = "agg_tps", .help = "the metric"},
    {.name = "filter", .arg = "KEY=V[,V...]", .commands = CLI_HISTORY, .kind = CLI_LIST, .field = FIELD(filters),
     .help = "keep the cases whose KEY is one of the values. KEY: prompt_tokens, max_new_tokens, batch, "
             "concurrency, steps, block_length, request_rate (value none: not applicable), or a swept option"},

    /* report, export, history */
    {.name = "last", .commands = CLI_REPORT, .kind = CLI_FLAG, .field = FIELD(last),
     .help = "the last session (as SESSION last, the default)"},
    {.name = "format", .commands = CLI_REPORT, .kind = CLI_CHOICE, .field = FIELD(format), .def = "md",
     .choices = report_formats, .help = "what to write"},
    {.name = "format", .commands = CLI_EXPORT, .kind = CLI_CHOICE, .field = FIELD(format), .required = 1,
     .choices = export_formats, .help = "what to write"},
    {.name = "format", .commands = CLI_HISTORY, .kind = CLI_CHOICE, .field = FIELD(format), .def = "text",
     .choices = history_formats, .help = "what to write"},
    {.name = "requests", .commands = CLI_EXPORT, .kind = CLI_FLAG, .field = FIELD(requests),
     .help = "with --format csv: one row per stored request (warm-ups too, column warmup), not per case"},
    {.name = "case", .arg = "N", .commands = CLI_EXPORT, .kind = CLI_INT, .field = FIELD(case_ordinal), .def = "0",
     .lo = 0, .hi = 2147483647, .what = "a case number",
     .help = "with --format aiperf|vllm: case N's document alone (one tool run's file), not an array of every "
             "case's"},
    {.name = "output", .letter = 'o', .arg = "FILE", .commands = CLI_REPORT | CLI_EXPORT | CLI_HISTORY,
     .kind = CLI_STRING, .field = FIELD(output),
     .help = "write to FILE instead of stdout; a failed write leaves no FILE"},

    /* compare */
    {.name = "backends", .arg = "X Y", .commands = CLI_COMPARE, .kind = CLI_LIST, .field = FIELD(backends),
     .n_args = 2, .what = "labels",
     .help = "compare backend X (of A) with backend Y (of B, else of A) instead of the backends of the same label"},
    {.name = "metric", .arg = "M[,M...]", .commands = CLI_COMPARE, .kind = CLI_STRING, .field = FIELD(metric),
     .help = "metrics (default agg_tps,req_tps,ttft_ms,e2e_ms); known: agg_tps, decode_tps, wall_ms, "
             "tokens_per_forward, req_tps, ttft_ms, tpot_ms, e2e_ms"},
    {.name = "alpha", .arg = "P", .commands = CLI_COMPARE, .kind = CLI_DOUBLE, .field = FIELD(alpha), .def = "0.05",
     .lo = 0, .hi = 1, .open_lo = 1, .open_hi = 1, .what = "a level", .help = "significance level"},
    {.name = "fail-if-slower", .arg = "PCT", .commands = CLI_COMPARE, .kind = CLI_DOUBLE, .field = FIELD(fail_pct),
     .lo = 0, .hi = INFINITY, .what = "a percentage",
     .help = "exit 1 when a row is significantly slower by more than PCT percent, or a case ran in A and failed "
             "in B"},
    {.name = "fail-if-accuracy-drops", .arg = "PP", .commands = CLI_COMPARE, .kind = CLI_DOUBLE,
     .field = FIELD(fail_acc_pp), .lo = 0, .hi = 100, .what = "percentage points",
     .help = "exit 1 when a case's accuracy is lower in B by more than PP percentage points"},
    {.name = "fail-if-error-rate-above", .arg = "X", .commands = CLI_COMPARE, .kind = CLI_DOUBLE,
     .field = FIELD(fail_err_rate), .lo = 0, .hi = 1, .what = "a fraction",
     .help = "exit 1 when a case of B failed more than the fraction X of its requests"},
    {.name = "fail-if-p99-ttft-above", .arg = "PCT", .commands = CLI_COMPARE, .kind = CLI_DOUBLE,
     .field = FIELD(fail_p99_ttft_pct), .lo = 0, .hi = INFINITY, .what = "a percentage",
     .help = "exit 1 when a case's p99 TTFT is higher in B by more than PCT percent"},

    /* serve */
    {.name = "backend", .arg = "LABEL", .commands = CLI_SERVE, .kind = CLI_STRING, .field = FIELD(backend),
     .required = 1, .help = "the [backend LABEL] section to serve"},
    {.name = "port", .arg = "N", .commands = CLI_SERVE, .kind = CLI_INT, .field = FIELD(port), .def = "8000",
     .lo = 0, .hi = 65535, .what = "a port", .help = "TCP port (0 picks a free one)"},
    {.name = "host", .arg = "ADDR", .commands = CLI_SERVE, .kind = CLI_STRING, .field = FIELD(host),
     .def = "127.0.0.1", .help = "IPv4 address to listen on"},
    {.name = "max-batch", .arg = "N", .commands = CLI_SERVE, .kind = CLI_INT, .field = FIELD(max_batch), .lo = 1,
     .hi = 65536, .what = "an integer",
     .help = "most requests in flight in the backend (default 16 when it batches, else 1)"},
    {.name = "batching", .arg = "MODE", .commands = CLI_SERVE, .kind = CLI_CHOICE, .field = FIELD(batching),
     .def = "continuous", .choices = batching_modes, .help = "how requests share the backend"},
    {.name = "port-file", .arg = "F", .commands = CLI_SERVE, .kind = CLI_STRING, .field = FIELD(port_file),
     .help = "write the port to F once listening (for scripts)"},
    {.name = "reuse-port", .commands = CLI_SERVE, .kind = CLI_FLAG, .field = FIELD(reuse_port),
     .help = "let other servers listen on the same port (SO_REUSEPORT): the kernel spreads connections across "
             "them, each with its own backend process (docs/PERFORMANCE.md)"},
    {.name = "client-timeout", .arg = "S", .commands = CLI_SERVE, .kind = CLI_INT, .field = FIELD(client_timeout),
     .def = "30", .lo = 1, .hi = 3600, .what = "seconds",
     .help = "close a connection whose client sends or reads nothing for S seconds (half-sent requests, a stream "
             "nobody reads); the time the backend takes does not count"},
    {.name = "max-connections", .arg = "N", .commands = CLI_SERVE, .kind = CLI_INT, .field = FIELD(max_connections),
     .def = "4096", .lo = 1, .hi = 65536, .what = "an integer",
     .help = "most connections open at once; more are refused"},
    {.name = "max-connections-per-ip", .arg = "N", .commands = CLI_SERVE, .kind = CLI_INT,
     .field = FIELD(max_connections_per_ip), .def = "0", .lo = 0, .hi = 65536, .what = "an integer",
     .help = "most connections open at once from one client address, so that one client cannot take them all (0, "
             "the default: no limit, as a load generator opens every connection from one address)"},
    {.name = "api-key", .arg = "KEY", .commands = CLI_SERVE, .kind = CLI_STRING, .field = FIELD(api_key),
     .help = "answer only requests with `Authorization: Bearer KEY` (401 otherwise; GET /health stays open). A "
             "command line is visible to other users of the machine: prefer --api-key-file"},
    {.name = "api-key-file", .arg = "F", .commands = CLI_SERVE, .kind = CLI_STRING, .field = FIELD(api_key_file),
     .help = "as --api-key, the key read from file F (one line)"},

    /* help */
    {.name = "markdown", .commands = CLI_HELP_CMD, .kind = CLI_FLAG, .field = FIELD(markdown),
     .help = "every command's help as Markdown (docs/CLI.md)"},

    {.name = "help", .letter = 'h', .commands = ~0u, .kind = CLI_HELP, .help = "this text"},
    {.name = NULL},
};

static const cli_form one_form_suite[] = {{"SUITE", NULL}, {NULL, NULL}};
static const cli_form one_form_none[] = {{"", NULL}, {NULL, NULL}};
static const cli_form one_form_session[] = {{"[SESSION|last]", NULL}, {NULL, NULL}};

const char cli_about[] = "Reproducible, comparable LLM inference benchmarks.";
/* %s: where plugins are installed */
const char cli_about_end[] = "Every command takes --help. The database is --db FILE, else $TOKBENCH_DB, else "
                             "./tokbench.db. Plugins are searched in $TOKBENCH_PLUGIN_PATH, the build tree and %s.";

const cli_command cli_commands[] = {
    {.name = "run", .bit = CLI_RUN, .forms = one_form_suite, .run = cmd_run,
     .summary = "run a suite, store every case, print the results",
     .about = "Expand SUITE (an INI file) into cases, run each backend in a process of its own, store every case "
              "in the database as it finishes, and print the results with the backends side by side. SUITE "
              "may be a name without '/' or .ini (`tokbench run quick`): the file NAME.ini of $TOKBENCH_DATA_DIR/"
              "suites, of the source tree's suites/ (from the build tree), then of the installed suites.",
     .epilog = "Exit status: 0 when every case ran ok (not degraded) or was skipped, 1 when a case failed or is "
               "degraded, 2 on bad input, 130 when interrupted."},
    {.name = "bench", .bit = CLI_BENCH, .run = cmd_bench,
     .forms = (const cli_form[]){{"--url URL", "a server (plugins/http)"},
                                 {"--model FOLDER|preset:NAME", "tokbench's own engine (--plugin ar|diffusion|flow)"},
                                 {NULL, NULL}},
     .summary = "benchmark a server or a model in one command: the suite made from options",
     .about = "Write the suite the options describe (an ordinary INI suite: --print-suite prints it and runs "
              "nothing), then run it as `tokbench run` does, stored like any run with the suite's text. The suite "
              "is written next to the database (bench-TIME.ini; `tokbench run` runs it again). Each value is "
              "checked, and refused with the option named when it is not what the option takes or could not be "
              "written into the suite as it is (a control character such as a newline, ';', \"${\", '[' or ']' but in a URL's IPv6 host, a space at "
              "either end, a line too long for a suite).",
     .epilog = "Exit status: as run's; 2 on a bad option."},
    {.name = "plugins", .bit = CLI_PLUGINS, .forms = (const cli_form[]){{"[NAME|PATH]", NULL}, {NULL, NULL}},
     .run = cmd_plugins, .summary = "list backend plugins, or one plugin's options",
     .about = "Without NAME: every plugin found, with its version, capabilities and whether it can run on this "
              "host. With NAME: its options."},
    {.name = "sessions", .bit = CLI_SESSIONS, .forms = one_form_none, .run = cmd_sessions,
     .summary = "stored sessions, newest first"},
    {.name = "show", .bit = CLI_SHOW, .forms = one_form_session, .run = cmd_show,
     .summary = "one session's cases, backends side by side (default: last)",
     .about = "SESSION is an id from `tokbench sessions` or a uuid prefix (8 characters or more).\n\nThe case "
              "table fits the terminal: columns no case has a value in are left out, then, when it is still too "
              "wide, the least important ones (a line below the table names them). Its width is $COLUMNS, else "
              "the terminal's; output that is not a terminal (a pipe, a file) is never narrowed."},
    {.name = "report", .bit = CLI_REPORT, .forms = one_form_session, .run = cmd_report,
     .summary = "one session as Markdown, HTML (with charts), CSV or JSON",
     .about = "One session (default: the last) for people to read. SESSION is an id from `tokbench sessions` or "
              "a uuid prefix (8 characters or more). docs/REPORTS.md describes every part.",
     .epilog = "Exit status: 0 written, 1 error, 2 bad input."},
    {.name = "compare", .bit = CLI_COMPARE, .run = cmd_compare,
     .forms = (const cli_form[]){{"A B", "two sessions, backends by label"},
                                 {"A --backends X Y", "two backends of session A"},
                                 {"A B --backends X Y", "backend X of A vs Y of B"},
                                 {NULL, NULL}},
     .summary = "two sessions (or two backends) case by case, with a significance test and a verdict per row",
     .about = "A is the baseline, B the candidate (ids, uuid prefixes or \"last\"). Cases match by dimensions and "
              "swept options; a backend without a dimension (AR: no steps) matches every value of it. Per "
              "matching case and metric: medians, B/A, a two-sided Mann-Whitney U test on the raw samples (per "
              "repetition for agg_tps, per request for req_tps and latencies) and a verdict: faster, slower, or "
              "no significant change.",
     .epilog = "With any --fail-if option, a case failed or degraded in B only is a regression too.\n\nExit status: "
               "0 no regression past a gate (always 0 without a --fail-if option), 1 regression, 2 bad input or "
               "nothing to compare."},
    {.name = "history", .bit = CLI_HISTORY, .forms = one_form_none, .run = cmd_history,
     .summary = "one metric of one backend across sessions",
     .about = "One metric of one backend, case by case, across every stored session: commit, version, machine, "
              "median, p5, p95, CI, and the change from the session before; notes where the machine, model, "
              "dtype or plugin changed.",
     .epilog = "Exit status: 0 printed, 1 error, 2 bad input or nothing matching."},
    {.name = "export", .bit = CLI_EXPORT, .forms = (const cli_form[]){{"SESSION", NULL}, {NULL, NULL}},
     .run = cmd_export, .summary = "one session as CSV (per case or per request), JSON, or AIPerf's or vLLM's result files"},
    {.name = "db", .sub = "merge", .bit = CLI_DB, .forms = (const cli_form[]){{"[OTHER.db...]", NULL}, {NULL, NULL}},
     .run = cmd_db_merge, .summary = "import other databases' sessions; join the shards of a run",
     .about = "Import each OTHER.db's sessions into the database (created if missing): sessions by uuid "
              "(one already present is skipped, so merging twice is merging once), machines by fingerprint, "
              "every row remapped, each file in one transaction. OTHER.db is only read; an older schema is "
              "migrated in memory, a newer one refused. Then the shards of a run (`run --shard K/N --start-at "
              "TIME`) each of whose N shards has a completed session in the database are joined into one session "
              "that pools every request (of a shard stored more than once, its newest completed session, said; an "
              "interrupted shard named; shards whose calls were not simultaneous warned of: docs/METRICS.md, "
              "\"Sharded runs\"); without OTHER.db, only that.",
     .epilog = "Exit status: 0 merged, 1 error, 2 bad input."},
    {.name = "serve", .bit = CLI_SERVE, .forms = one_form_suite, .run = cmd_serve, .unavailable = tb_serve_unavailable,
     .summary = "one backend of a suite as an OpenAI-compatible endpoint",
     .about = "Serve backend LABEL of SUITE as an OpenAI-compatible endpoint: POST /v1/completions and "
              "/v1/chat/completions (streamed or not), GET /v1/models, GET /health, and GET /metrics (Prometheus "
              "text: requests running and waiting, KV slots, tokens, step time; open under --api-key, as /health). "
              "The backend runs with the options of its first case in SUITE. A request's seed and stop are "
              "honoured, and its temperature, top_p and top_k where the backend has that option (ar; diffusion: "
              "top_k under Dream algorithms only); a field serve cannot honour (n > 1, logprobs, top_k on a "
              "backend without it, an unknown one) is refused with 400 naming it, an unknown model with 404. Chat requests get the model folder's chat template (Llama-3 or "
              "ChatML). See docs/PLUGINS.md.",
     .epilog = "Stops on SIGINT or SIGTERM (exit 0). Exit 1 when the backend cannot load, 2 on bad input."},
    {.name = "version", .bit = CLI_VERSION, .forms = one_form_none, .run = cmd_version,
     .summary = "version, commit and build"},
    {.name = "help", .bit = CLI_HELP_CMD, .forms = (const cli_form[]){{"[COMMAND]", NULL}, {NULL, NULL}},
     .run = cmd_help, .summary = "this text, or COMMAND's (= COMMAND --help)"},
    {.name = NULL},
};

/* ---------------------------------------------- queries of the table */

int cli_takes(const cli_command *cmd, const cli_option *o)
{
    return (o->commands & cmd->bit) != 0;
}

const cli_command *cli_command_find(const char *name)
{
    for (const cli_command *c = cli_commands; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

/* "csv or json", "md, html, csv or json": the choices that are no alias
 * (allocated). */
char *cli_choices_text(const cli_option *o, const char *comma, const char *last_sep)
{
    tb_str b = {0};
    size_t n = 0, k = 0;
    for (const cli_choice *c = o->choices; c->name; c++)
        n += !c->alias_of;
    for (const cli_choice *c = o->choices; c->name; c++) {
        if (c->alias_of)
            continue;
        k++; /* the k-th of n */
        tb_str_appendf(&b, "%s%s", k == 1 ? "" : k == n ? last_sep : comma, c->name);
    }
    return tb_str_take(&b);
}

char *cli_arg_name(const cli_option *o)
{
    if (o->arg)
        return tb_xstrdup(o->arg);
    if (o->kind == CLI_CHOICE)
        return cli_choices_text(o, "|", "|");
    return tb_xstrdup("");
}
