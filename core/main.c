/* main.c — the tokbench command line: dispatch to one function per
 * command. Results go to stdout, progress and errors to stderr. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "git_version.h"
#include "hwinfo.h"
#include "plan.h"
#include "runner.h"
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
    "  export SESSION     one session as CSV or JSON\n"
    "  version            version, commit and build\n"
    "\n"
    "Every command takes --help. The database is --db FILE, else $TOKBENCH_DB,\n"
    "else ./tokbench.db. Plugins are searched in $TOKBENCH_PLUGIN_PATH, the build\n"
    "tree and " TB_PLUGIN_INSTALL_DIR ".\n";

static const char usage_run[] =
    "usage: tokbench run SUITE [--db FILE] [--dry-run] [--filter KEY=V1[,V2...]]...\n"
    "\n"
    "Expand SUITE (an INI file) into cases, run each backend in a process of\n"
    "its own, store every case in the database as it finishes, and print the\n"
    "results with the backends side by side.\n"
    "\n"
    "  --db FILE       database (default $TOKBENCH_DB or ./tokbench.db)\n"
    "  --dry-run       print the expanded cases and exit; runs nothing\n"
    "  --filter K=V    keep cases whose K (backend, a dimension such as batch,\n"
    "                  or a backend option) is one of the values; repeatable\n"
    "\n"
    "Exit status: 0 when every case ran ok or was skipped, 1 when a case failed,\n"
    "2 on bad input, 130 when interrupted.\n";

static const char usage_plugins[] =
    "usage: tokbench plugins [NAME|PATH]\n"
    "\n"
    "Without NAME: every plugin found, with its version, capabilities and\n"
    "whether it can run on this host. With NAME: its options.\n";

static const char usage_sessions[] = "usage: tokbench sessions [--db FILE] [--limit N]\n";
static const char usage_show[] =
    "usage: tokbench show [SESSION|last] [--db FILE]\n"
    "\n"
    "SESSION is an id from `tokbench sessions` or a uuid prefix.\n";
static const char usage_export[] =
    "usage: tokbench export SESSION --format csv|json [-o FILE] [--db FILE]\n"
    "\n"
    "csv: the summary view's rows for the session. json: everything stored:\n"
    "session, machine, backends, cases, metrics, samples, requests, emissions.\n";

enum { OPT_DB = 1000, OPT_DRY_RUN, OPT_FILTER, OPT_LIMIT, OPT_FORMAT };

/* Parse options common to the commands; returns positional args left. */
typedef struct cli {
    const char *db;
    int dry_run;
    char **filters;
    size_t n_filters;
    int limit;
    const char *format;
    const char *output;
    char **pos;
    int n_pos;
} cli;

static int parse(int argc, char **argv, const char *usage, cli *c)
{
    static const struct option opts[] = {
        {"db", required_argument, NULL, OPT_DB},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"filter", required_argument, NULL, OPT_FILTER},
        {"limit", required_argument, NULL, OPT_LIMIT},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    memset(c, 0, sizeof *c);
    c->db = tb_store_default_path();
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
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

static tb_store *open_store(const char *path)
{
    tb_store *st;
    char *err = NULL;
    if (tb_store_open(path, &st, &err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        return NULL;
    }
    return st;
}

static char *join_args(int argc, char **argv)
{
    tb_str b = {0};
    for (int i = 0; i < argc; i++)
        tb_str_appendf(&b, "%s%s", i ? " " : "", argv[i]);
    return tb_str_take(&b);
}

static int cmd_run(int argc, char **argv, int full_argc, char **full_argv)
{
    cli c;
    parse(argc, argv, usage_run, &c);
    if (c.n_pos != 1) {
        fputs(usage_run, stderr);
        free(c.filters);
        return 2;
    }
    tb_suite suite;
    char *err = NULL;
    if (tb_suite_load(c.pos[0], &suite, &err) != 0) {
        fprintf(stderr, "tokbench: suite errors:\n%s", err);
        free(err);
        free(c.filters);
        return 2;
    }
    tb_plan plan;
    if (tb_plan_build(&suite, &plan, &err) != 0) {
        fprintf(stderr, "tokbench: suite errors:\n%s", err);
        free(err);
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
    tb_store *st = open_store(c.db);
    if (!st)
        goto out;
    tb_machine_info mi;
    tb_machine_info_collect(&mi);
    int64_t machine = tb_store_machine(st, &mi);
    char *cmdline = join_args(full_argc, full_argv);
    tb_session_info si = {.machine_id = machine, .suite = &suite, .command_line = cmdline};
    int64_t session = machine >= 0 ? tb_store_session_begin(st, &si) : -1;
    free(cmdline);
    if (session < 0) {
        fprintf(stderr, "tokbench: %s: cannot record the session: %s\n", c.db, sqlite3_errmsg(tb_store_db(st)));
        goto out;
    }
    int64_t *backend_ids = tb_xcalloc(plan.n_backends, sizeof *backend_ids);
    for (size_t i = 0; i < plan.n_backends; i++)
        backend_ids[i] = tb_store_backend(st, session, &plan.backends[i]);
    fprintf(stderr, "tokbench: session %lld: suite %s, %zu cases, database %s\n", (long long)session, suite.name,
            plan.n_cases, c.db);
    for (size_t i = 0; i < plan.n_backends; i++)
        for (size_t k = 0; k < plan.backends[i].n_notes; k++)
            fprintf(stderr, "note: %s: %s\n", plan.backends[i].sb->label, plan.backends[i].notes[k]);

    tb_run_summary sum;
    tb_run_outcome outcome = tb_runner_run(&plan, st, session, backend_ids, &sum);
    free(backend_ids);
    tb_store_session_end(st, session, outcome == TB_RUN_COMPLETED ? "completed"
                                      : outcome == TB_RUN_INTERRUPTED ? "interrupted" : "failed");
    tb_report_show(tb_store_db(st), session, stdout);
    fprintf(stderr, "tokbench: session %lld %s: %zu ok, %zu failed, %zu skipped; stored in %s\n", (long long)session,
            outcome == TB_RUN_COMPLETED ? "completed" : outcome == TB_RUN_INTERRUPTED ? "interrupted" : "failed",
            sum.ok, sum.failed, sum.skipped, c.db);
    rc = outcome == TB_RUN_INTERRUPTED ? 130 : outcome == TB_RUN_STORE_FAILED ? 1 : sum.failed ? 1 : 0;
out:
    tb_store_close(st);
    tb_plan_free(&plan);
    tb_suite_free(&suite);
    return rc;
}

/* Probe in a child: a plugin's probe may initialize a GPU runtime, which
 * must not happen in a process that later forks workers. Here it does not
 * matter (we exit after listing), so probe directly. */
static void print_plugin_line(const char *path)
{
    tb_plugin p;
    char *err = NULL;
    if (tb_plugin_open(path, &p, &err) != 0) {
        printf("  %-12s %s\n", "(invalid)", err);
        free(err);
        return;
    }
    const tb_backend_ops *o = p.ops;
    char why[512] = "";
    tb_status ps = o->probe ? o->probe(why, sizeof why) : TB_OK;
    char *caps = tb_caps_string(o->capabilities);
    printf("  %-12s %-10s %s\n", o->name, o->version, o->description ? o->description : "");
    printf("  %-12s capabilities: %s\n", "", caps);
    printf("  %-12s runs here: %s%s%s\n", "", ps == TB_OK ? "yes" : "no", ps == TB_OK ? "" : " (",
           ps == TB_OK ? "" : (why[0] ? why : "probe failed"));
    if (ps != TB_OK)
        printf(")\n");
    printf("  %-12s %s\n", "", p.path);
    free(caps);
    tb_plugin_close(&p);
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
            print_plugin_line(paths[i]);
            free(paths[i]);
        }
        free(paths);
        return 0;
    }
    tb_plugin p;
    char *err = NULL;
    if (tb_plugin_open(c.pos[0], &p, &err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
        return 1;
    }
    print_plugin_line(p.path);
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
    tb_store *st = open_store(c.db);
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
    tb_store *st = open_store(c.db);
    if (!st)
        return 1;
    char *err = NULL;
    int64_t id = tb_report_resolve_session(tb_store_db(st), c.n_pos ? c.pos[0] : NULL, &err);
    int rc = 1;
    if (id < 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        free(err);
    } else {
        rc = tb_report_show(tb_store_db(st), id, stdout) == 0 ? 0 : 1;
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
    tb_store *st = open_store(c.db);
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
        rc = (strcmp(c.format, "csv") == 0 ? tb_export_csv : tb_export_json)(tb_store_db(st), id, out) == 0 ? 0 : 1;
        if (out != stdout && fclose(out) != 0) {
            fprintf(stderr, "tokbench: %s: write failed: %m\n", c.output);
            rc = 1;
        }
    }
    tb_store_close(st);
    return rc;
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
