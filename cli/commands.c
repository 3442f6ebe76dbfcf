/* commands.c — what each command does, once its options are parsed
 * (cli_parse): one function per command. Results go to stdout, progress
 * and errors to stderr. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "compare.h"
#include "export.h"
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
#include "output.h"
#include "telemetry.h"
#include "store.h"
#include "suite.h"
#include "tb_config.h"
#include "text.h"
#include "util.h"

/* The width `show` (and `run`'s report) fit the case table to: --width
 * N; no limit with --wide or when stdout is not a terminal (a pipe or a
 * file keeps every column); else $COLUMNS, else the terminal's width,
 * else 80. */
static size_t table_width(const cli_args *c)
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
static void end_session(tb_store *st, const char *db, int64_t session, const char *status, const char *error)
{
    char *err = NULL;
    if ((error ? tb_store_session_fail(st, session, error, &err) : tb_store_session_end(st, session, status, &err)) !=
        0) {
        fprintf(stderr, "tokbench: %s: %s\n", db, err);
        free(err);
    }
}

/* --start-at's announcement, once the wait's signal handlers are in
 * place (a signal seen after it ends the session cleanly). */
typedef struct start_note {
    const cli_args *c;
    const char *text;
} start_note;

static void announce_start(void *ctx)
{
    const start_note *sn = ctx;
    if (sn->c->shard_n)
        fprintf(stderr, "tokbench: shard %u/%u starts at %s\n", sn->c->shard_k, sn->c->shard_n, sn->text);
    else
        fprintf(stderr, "tokbench: starts at %s\n", sn->text);
}

static int is_regular(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Is this tokbench the one of its build tree (not an installed copy)? */
static int running_from_build(void)
{
    char exe[PATH_MAX], build[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || !realpath(TB_BUILD_DIR, build))
        return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    return strcmp(exe, build) == 0;
}

/* `tokbench run quick`: a name that is no file, without '/' and ".ini",
 * is a suite of $TOKBENCH_DATA_DIR/suites, of the source tree (from the
 * build tree only), then of the installed suites
 * (TB_DATA_INSTALL_DIR/suites). The path found (malloc'd), or NULL: the
 * argument is the suite's path as given. */
static char *find_suite(const char *arg)
{
    size_t n = strlen(arg);
    if (!n || strchr(arg, '/') || (n >= 4 && strcmp(arg + n - 4, ".ini") == 0) || is_regular(arg))
        return NULL;
    const char *env = getenv("TOKBENCH_DATA_DIR");
    char *dirs[3] = {NULL, NULL, NULL};
    size_t k = 0;
    if (env && *env)
        dirs[k++] = tb_xasprintf("%s/suites", env);
    if (running_from_build())
        dirs[k++] = tb_xstrdup(TB_SOURCE_SUITES_DIR);
    dirs[k++] = tb_xasprintf("%s/suites", TB_DATA_INSTALL_DIR);
    char *found = NULL;
    for (size_t i = 0; i < k; i++) {
        char *p = tb_xasprintf("%s/%s.ini", dirs[i], arg);
        if (!found && is_regular(p))
            found = p;
        else
            free(p);
        free(dirs[i]);
    }
    return found;
}

int cmd_run(const cli_command *cmd, const cli_args *c, const char *cmdline)
{
    if (c->n_pos != 1) {
        cli_usage(cmd, stderr);
        return 2;
    }
    /* Every error of the suite at once, so that one run lists all there
     * is to fix: what does not parse, then what the plan finds in what
     * did (plugins, options, the plugins' own checks, the prompt set,
     * missing files), then cases too large to measure. */
    if (c->shard_n && c->start_at < 0) {
        fprintf(stderr, "tokbench: --shard needs --start-at TIME: the shards start together, and the time names "
                        "the run they belong to\n");
        return 2;
    }
    tb_suite suite;
    char *err = NULL;
    tb_str errors = {0};
    char *named = find_suite(c->pos[0]);
    int parsed = tb_suite_parse(named ? named : c->pos[0], &suite, &err);
    free(named);
    if (parsed != 0)
        tb_str_append(&errors, err);
    free(err);
    if (c->shard_n)
        suite.seed = tb_shard_seed(suite.seed, c->shard_k);
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
    if (planned && c->shard_n && tb_shard_apply(&plan, c->shard_k, c->shard_n, &err) != 0)
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
        return 2;
    }
    if (tb_plan_filter(&plan, c->filters.v, c->filters.n, &err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        tb_plan_free(&plan);
        tb_suite_free(&suite);
        return 2;
    }
    if (c->dry_run) {
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
    size_t n_secrets;
    const char **secrets = tb_plan_secrets(&plan, &n_secrets);
    if (n_secrets) /* this process and its children hold them: no core dump */
        prctl(PR_SET_DUMPABLE, 0);
    tb_store *st = open_store(c->db, 0);
    if (!st)
        goto out;
    tb_store_set_secrets(st, secrets, n_secrets); /* what it stores is redacted with them */
    tb_machine_info mi;
    tb_machine_info_collect(&mi);
    int64_t machine = tb_store_machine(st, &mi, &err);
    tb_plan_redact_suite_text(&plan); /* secrets written into the suite stay out of the database */
    tb_session_info si = {.machine_id = machine, .suite = &suite, .command_line = cmdline,
                          .config_json = plan.config_json, .config_sha256 = plan.config_sha256};
    int64_t session = machine >= 0 ? tb_store_session_begin(st, &si, &err) : -1;
    if (session < 0) {
        fprintf(stderr, "tokbench: %s: cannot record the session: %s\n", c->db, err);
        free(err);
        goto out;
    }
    int64_t *backend_ids = tb_xcalloc(plan.n_backends, sizeof *backend_ids);
    for (size_t i = 0; i < plan.n_backends; i++) {
        backend_ids[i] = tb_store_backend(st, session, &plan.backends[i], &err);
        if (backend_ids[i] < 0) { /* its cases could not be stored either */
            fprintf(stderr, "tokbench: %s: cannot record the session: %s\n", c->db, err);
            free(err);
            free(backend_ids);
            end_session(st, c->db, session, "failed", NULL);
            goto out;
        }
    }
    /* The run goes on without the items: its figures do not need them. */
    if (tb_store_prompts(st, session, &plan, &err) != 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c->db, err);
        free(err);
    }
    fprintf(stderr, "tokbench: session %lld: suite %s, %zu cases, database %s\n", (long long)session, suite.name,
            plan.n_cases, c->db);
    for (size_t i = 0; i < plan.n_backends; i++)
        for (size_t k = 0; k < plan.backends[i].n_notes; k++)
            fprintf(stderr, "note: %s: %s\n", plan.backends[i].sb->label, plan.backends[i].notes[k]);

    /* The session's clock (and a shard's share): every sample's times are
     * this host's monotonic clock; the offset makes them wall-clock
     * times, on which the shards of a run are joined. */
    char start_text[32] = "";
    tb_session_shard sh = {.shard_index = c->shard_k, .shard_count = c->shard_n, .start_late_ns = -1};
    if (c->start_at >= 0) {
        tb_shard_format_time(c->start_at, start_text);
        sh.start_at = start_text;
        /* the shard's identity from the start: a shard interrupted while
         * it waits is still a shard of its run (how late it began: once
         * it has) */
        sh.clock_offset_ns = tb_shard_clock_offset();
        if (tb_store_session_shard(st, session, &sh, &err) != 0) {
            fprintf(stderr, "tokbench: %s: %s\n", c->db, err);
            free(err);
            err = NULL;
        }
        start_note sn = {c, start_text};
        /* SIGINT/SIGTERM while waiting: the session ends interrupted */
        if (tb_runner_wait_start(c->start_at, announce_start, &sn, &sh.start_late_ns)) {
            free(backend_ids);
            end_session(st, c->db, session, "interrupted", NULL);
            fprintf(stderr, "tokbench: session %lld interrupted before its start time; no case ran; stored in %s\n",
                    (long long)session, c->db);
            rc = 130;
            goto out;
        }
    }
    sh.clock_offset_ns = tb_shard_clock_offset();
    if (tb_store_session_shard(st, session, &sh, &err) != 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c->db, err);
        free(err);
        err = NULL;
    }

    tb_run_summary sum;
    tb_run_outcome outcome = tb_runner_run(&plan, st, session, backend_ids, c->max_error_rate, &sum);
    free(backend_ids);
    /* a store failure: the session says so, and the counts are of
     * stored cases only (a refused case is counted apart) */
    end_session(st, c->db, session,
                outcome == TB_RUN_COMPLETED     ? "completed"
                : outcome == TB_RUN_INTERRUPTED ? "interrupted"
                                                : "failed",
                outcome == TB_RUN_STORE_FAILED ? sum.store_error : NULL);
    tb_report_show(tb_store_db(st), session, stdout, table_width(c));
    fflush(stdout); /* the report before the last line, also when both go to one file */
    char degraded[96] = "", unstored[64] = "";
    if (sum.degraded)
        snprintf(degraded, sizeof degraded, " (%zu degraded: failed requests over --max-error-rate %g)", sum.degraded,
                 c->max_error_rate);
    if (sum.unstored)
        snprintf(unstored, sizeof unstored, ", %zu not stored", sum.unstored);
    fprintf(stderr, "tokbench: session %lld %s: %zu ok%s, %zu failed, %zu skipped%s; stored in %s\n",
            (long long)session,
            outcome == TB_RUN_COMPLETED ? "completed" : outcome == TB_RUN_INTERRUPTED ? "interrupted" : "failed",
            sum.ok, degraded, sum.failed, sum.skipped, unstored, c->db);
    if (sum.store_error)
        fprintf(stderr, "tokbench: %s: the run stopped: %s\n", c->db, sum.store_error);
    free(sum.store_error);
    rc = outcome == TB_RUN_INTERRUPTED           ? 130
         : outcome == TB_RUN_STORE_FAILED          ? 1
         : sum.failed || sum.degraded ? 1
                                                   : 0;
out:
    tb_store_close(st);
    free(secrets);
    tb_plan_free(&plan);
    tb_suite_free(&suite);
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

int cmd_plugins(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    if (c->n_pos > 1) {
        cli_usage(cmd, stderr);
        return 2;
    }
    if (c->n_pos == 0) {
        char **paths;
        size_t n = tb_plugin_scan(&paths);
        if (!n)
            printf("no plugins found (searched $TOKBENCH_PLUGIN_PATH, the build tree, %s)\n", TB_PLUGIN_INSTALL_DIR);
        else
            printf("plugins:\n");
        for (size_t i = 0; i < n; i++) {
            tb_plugin p;
            char *err = NULL;
            if (tb_plugin_open(paths[i], c->load_timeout, "--load-timeout", TB_PLUGIN_PROBE, &p, &err) != 0) {
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
    if (tb_plugin_open(c->pos[0], c->load_timeout, "--load-timeout", TB_PLUGIN_PROBE, &p, &err) != 0) {
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

int cmd_sessions(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)cmd, (void)command_line;
    tb_store *st = open_store(c->db, 1);
    if (!st)
        return 1;
    int rc = tb_report_sessions(tb_store_db(st), (int)c->limit, stdout) == 0 ? 0 : 1;
    tb_store_close(st);
    return rc;
}

int cmd_show(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    if (c->n_pos > 1) {
        cli_usage(cmd, stderr);
        return 2;
    }
    tb_store *st = open_store(c->db, 1);
    if (!st)
        return 1;
    char *err = NULL;
    int64_t id = tb_report_resolve_session(tb_store_db(st), c->n_pos ? c->pos[0] : NULL, &err);
    int rc = 1;
    if (id < 0) { /* no such session: bad input, as report's and compare's */
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        rc = 2;
    } else {
        rc = tb_report_show(tb_store_db(st), id, stdout, table_width(c)) == 0 ? 0 : 1;
    }
    tb_store_close(st);
    return rc;
}

/* c->format is csv, json, aiperf or vllm (cli_parse). */
int cmd_export(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    if (c->n_pos != 1) {
        cli_usage(cmd, stderr);
        return 2;
    }
    if ((c->requests && strcmp(c->format, "csv") != 0) ||
        (c->case_ordinal && strcmp(c->format, "aiperf") != 0 && strcmp(c->format, "vllm") != 0)) {
        fprintf(stderr, "tokbench: export: %s goes with --format %s\n", c->requests ? "--requests" : "--case",
                c->requests ? "csv" : "aiperf or vllm");
        return 2;
    }
    tb_store *st = open_store(c->db, 1);
    if (!st)
        return 1;
    char *err = NULL;
    int rc = 1;
    int64_t id = tb_report_resolve_session(tb_store_db(st), c->pos[0], &err);
    if (id < 0) { /* no such session: bad input, as report's and compare's */
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        tb_store_close(st);
        return 2;
    }
    cli_output out;
    if (cli_output_open(&out, c->output) == 0) {
        sqlite3 *db = tb_store_db(st);
        if (!strcmp(c->format, "csv"))
            rc = tb_export_csv(db, id, c->requests, out.f, &err) == 0 ? 0 : 1;
        else if (!strcmp(c->format, "json"))
            rc = tb_export_json(db, id, out.f, &err) == 0 ? 0 : 1;
        else
            rc = tb_export_tool(db, id, c->format, (int)c->case_ordinal, out.f, &err) == 0 ? 0 : 1;
        if (err) {
            fprintf(stderr, "tokbench: %s: %s\n", c->db, err);
            free(err);
        }
        rc = cli_output_close(&out, rc);
    }
    tb_store_close(st);
    return rc;
}

/* c->format is md, html, csv or json (cli_parse). */
int cmd_report(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    const char *fmt = c->format;
    if (c->n_pos > 1 || (c->last && c->n_pos)) {
        cli_usage(cmd, stderr);
        return 2;
    }
    tb_store *st = open_store(c->db, 1);
    if (!st)
        return 1;
    char *err = NULL;
    int64_t id = tb_report_resolve_session(tb_store_db(st), c->n_pos ? c->pos[0] : NULL, &err);
    if (id < 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c->db, err);
        free(err);
        tb_store_close(st);
        return 2;
    }
    cli_output out;
    int rc = 1;
    if (cli_output_open(&out, c->output) == 0) {
        sqlite3 *db = tb_store_db(st);
        if (!strcmp(fmt, "csv"))
            rc = tb_export_csv(db, id, 0, out.f, &err) == 0 ? 0 : 1;
        else if (!strcmp(fmt, "json"))
            rc = tb_export_json(db, id, out.f, &err) == 0 ? 0 : 1;
        else if ((!strcmp(fmt, "md") ? tb_report_markdown : tb_report_html)(db, id, out.f, &err) == 0)
            rc = 0;
        if (err) {
            fprintf(stderr, "tokbench: %s\n", err);
            free(err);
        }
        rc = cli_output_close(&out, rc);
        if (rc == 0 && out.path)
            fprintf(stderr, "tokbench: session %lld: %s report written to %s\n", (long long)id, fmt, c->output);
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

/* c->backends has 0 or 2 labels (cli_parse). */
int cmd_compare(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    int rc = 2;
    tb_store *st = NULL;
    char **metrics = NULL, *metric_block = NULL;
    size_t n_metrics = 0;
    if ((c->backends.n == 0 && c->n_pos != 2) || (c->backends.n == 2 && c->n_pos < 1) || c->n_pos > 2) {
        cli_usage(cmd, stderr);
        goto out;
    }
    if (c->metric)
        metrics = split_commas(c->metric, &n_metrics, &metric_block);
    if (c->metric && !n_metrics) {
        fprintf(stderr, "tokbench: --metric: expected a list of metric names\n");
        goto out;
    }
    st = open_store(c->db, 1);
    if (!st) {
        rc = 1;
        goto out;
    }
    char *err = NULL;
    int64_t a = tb_report_resolve_session(tb_store_db(st), c->pos[0], &err), b = a;
    if (a >= 0 && c->n_pos == 2)
        b = tb_report_resolve_session(tb_store_db(st), c->pos[1], &err);
    if (a < 0 || b < 0) {
        fprintf(stderr, "tokbench: %s: %s\n", c->db, err);
        free(err);
        goto out;
    }
    tb_compare_opts o = {.a = a, .b = b, .metrics = metrics, .n_metrics = n_metrics, .alpha = c->alpha,
                         .fail_pct = c->fail_pct, .fail_acc_pp = c->fail_acc_pp, .fail_err_rate = c->fail_err_rate,
                         .fail_p99_ttft_pct = c->fail_p99_ttft_pct};
    if (c->backends.n == 2) {
        o.backend_a = c->backends.v[0];
        o.backend_b = c->backends.v[1];
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
    return rc;
}

/* c->backend is given, c->format is text, csv or html (cli_parse). */
int cmd_history(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    const char *fmt = c->format;
    int rc = 2;
    tb_store *st = NULL;
    if (c->n_pos) {
        cli_usage(cmd, stderr);
        goto out;
    }
    st = open_store(c->db, 1);
    if (!st) {
        rc = 1;
        goto out;
    }
    tb_history h;
    char *err = NULL;
    int hrc = tb_history_load(tb_store_db(st), c->backend, c->metric, c->filters.v, c->filters.n, &h, &err);
    if (hrc != 0) {
        fprintf(stderr, "tokbench: history: %s: %s\n", c->db, err);
        free(err);
        if (hrc == -2) /* the database, not the question */
            rc = 1;
        goto out;
    }
    cli_output out;
    rc = 1;
    if (cli_output_open(&out, c->output) == 0) {
        if (!strcmp(fmt, "text"))
            tb_history_print(&h, out.f);
        else if (!strcmp(fmt, "csv"))
            tb_history_csv(&h, out.f);
        else
            tb_history_html(&h, out.f);
        rc = cli_output_close(&out, 0);
    }
    tb_history_free(&h);
out:
    tb_store_close(st);
    return rc;
}

int cmd_db_merge(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)cmd, (void)command_line;
    tb_store *st = open_store(c->db, 0);
    if (!st)
        return 1;
    char *err = NULL;
    int rc = 0;
    for (int i = 0; rc == 0 && i < c->n_pos; i++) {
        tb_merge_result r;
        if (tb_merge(tb_store_db(st), c->pos[i], &r, &err) != 0) {
            fprintf(stderr, "tokbench: db merge: %s\n", err);
            free(err);
            err = NULL;
            rc = 1;
        } else {
            printf("merged %s into %s: %zu session%s imported (%zu cases, %zu samples, %zu requests; %zu rows), "
                   "%zu already present, %zu completed; machines: %zu new, %zu known\n",
                   c->pos[i], c->db, r.sessions_new, r.sessions_new == 1 ? "" : "s", r.cases, r.samples, r.requests,
                   r.rows, r.sessions_known, r.sessions_completed, r.machines_new, r.machines_known);
            if (r.running)
                fprintf(stderr, "tokbench: db merge: %s: not merged, still being written by a run on this machine: "
                                "%s; merge again once it has ended\n", c->pos[i], r.running);
            tb_merge_result_free(&r);
        }
    }
    tb_shard_join_result j;
    if (rc == 0 && tb_shard_join(st, &j, &err) != 0) {
        fprintf(stderr, "tokbench: db merge: %s\n", err);
        free(err);
        rc = 1;
    } else if (rc == 0) {
        if (j.joined || j.known || j.waiting)
            printf("shards: %zu run%s joined now, %zu joined before%s%s\n", j.joined, j.joined == 1 ? "" : "s",
                   j.known, j.joined_uuids ? "; new sessions: " : "", j.joined_uuids ? j.joined_uuids : "");
        if (j.notes)
            for (char *line = j.notes, *nl; line; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                fprintf(stderr, "tokbench: db merge: %.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
            }
        if (j.warnings)
            for (char *line = j.warnings, *nl; line; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                fprintf(stderr, "tokbench: db merge: warning: %.*s\n", nl ? (int)(nl - line) : (int)strlen(line),
                        line);
            }
        if (j.waiting)
            fprintf(stderr, "tokbench: db merge: not joined: %s\n", j.waiting);
        tb_shard_join_result_free(&j);
    }
    tb_store_close(st);
    return rc;
}

int cmd_serve(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    struct in_addr addr;
    if (c->n_pos != 1) {
        fprintf(stderr, "tokbench serve: expected one SUITE\n\n");
        cli_usage(cmd, stderr);
        return 2;
    }
    if (inet_pton(AF_INET, c->host, &addr) != 1) {
        fprintf(stderr, "tokbench serve: --host %s: expected an IPv4 address such as 127.0.0.1\n", c->host);
        return 2;
    }
    tb_serve_options o = {.suite = c->pos[0], .backend = c->backend, .host = c->host, .port = (uint16_t)c->port,
                          .max_batch = (uint32_t)c->max_batch, .port_file = c->port_file,
                          .static_batching = strcmp(c->batching, "static") == 0, .reuse_port = c->reuse_port,
                          .client_timeout = (unsigned)c->client_timeout,
                          .max_connections = (unsigned)c->max_connections,
                          .max_connections_per_ip = (unsigned)c->max_connections_per_ip,
                          .api_key = c->api_key, .api_key_file = c->api_key_file};
    return tb_serve_main(&o);
}

