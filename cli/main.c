/* main.c — the tokbench command line: find the command in the table
 * (options.c) and hand it its arguments. The commands themselves are
 * commands.c's; help and version are here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "git_version.h"
#include "store.h"
#include "tty_safe.h"
#include "tb_config.h"
#include "util.h"

#include <tokbench/backend.h>

int cmd_version(const cli_command *cmd, const cli_args *args, const char *command_line)
{
    (void)cmd, (void)args, (void)command_line;
    printf("tokbench %s (%s), %s build, gcc %s, CUDA build %s, schema %d, plugin ABI %d\n", TB_VERSION,
           TB_GIT_COMMIT, TB_BUILD_TYPE, __VERSION__, TB_CUDA_BUILD_VERSION, tb_store_schema_version(),
           TB_ABI_MAJOR);
    return 0;
}

/* `tokbench help [COMMAND] [--markdown]`, `tokbench --help`, `-h`. */
int cmd_help(const cli_command *cmd, const cli_args *c, const char *command_line)
{
    (void)command_line;
    const cli_command *of = c->n_pos == 1 ? cli_command_find(c->pos[0]) : NULL;
    if (c->n_pos > 1 || (c->n_pos == 1 && (!of || c->markdown))) {
        if (c->n_pos == 1 && !of)
            fprintf(stderr, "tokbench: unknown command \"%s\"\n\n", c->pos[0]);
        cli_usage(cmd, stderr);
        return 2;
    }
    if (c->markdown)
        cli_markdown(stdout);
    else if (of)
        cli_usage(of, stdout);
    else
        cli_usage_main(stdout);
    return 0;
}

static char *join_args(int argc, char **argv)
{
    tb_str b = {0};
    for (int i = 0; i < argc; i++)
        tb_str_appendf(&b, "%s%s", i ? " " : "", argv[i]);
    return tb_str_take(&b);
}

int main(int argc, char **argv)
{
    cli_stdout_tty_safe(); /* before anything is printed */
    const char *bad_table = cli_table_check();
    if (bad_table) { /* a mistake in options.c, which every test run meets */
        fprintf(stderr, "%s\n", bad_table);
        return 70;
    }
    if (argc < 2) {
        cli_usage_main(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--version"))
        name = "version";
    if (!strcmp(name, "--help") || !strcmp(name, "-h"))
        name = "help";
    const cli_command *cmd = cli_command_find(name);
    if (!cmd) {
        fprintf(stderr, "tokbench: unknown command \"%s\"\n\n", name);
        cli_usage_main(stderr);
        return 2;
    }
    const char *why = cmd->unavailable ? cmd->unavailable() : NULL;
    if (why) {
        fprintf(stderr, "tokbench %s: %s\n", cmd->name, why);
        return 1;
    }
    int sub_argc = argc - 1; /* sub_argv[0]: the command's name, as getopt wants */
    char **sub_argv = argv + 1;
    if (cmd->sub) { /* "db merge": the word, or --help for the usage */
        int help = sub_argc >= 2 && (!strcmp(sub_argv[1], "--help") || !strcmp(sub_argv[1], "-h"));
        if (sub_argc < 2 || (strcmp(sub_argv[1], cmd->sub) != 0 && !help)) {
            if (sub_argc >= 2)
                fprintf(stderr, "tokbench: %s: unknown subcommand \"%s\"\n", cmd->name, sub_argv[1]);
            cli_usage(cmd, stderr);
            return 2;
        }
        if (help) {
            cli_usage(cmd, stdout);
            return 0;
        }
        sub_argc--;
        sub_argv++;
    }
    /* Joined before parsing: getopt permutes argv, and the stored command
     * line should read as typed. */
    char *command_line = join_args(argc, argv);
    cli_args args;
    cli_parse(cmd, sub_argc, sub_argv, &args);
    int rc = cmd->run(cmd, &args, command_line);
    cli_args_free(&args);
    free(command_line);
    return rc;
}
