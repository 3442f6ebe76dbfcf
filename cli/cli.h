/* cli.h — the tokbench command line as data: one table of commands and
 * one of options (options.c), from which the parser (parse.c) builds
 * getopt_long's tables and fills cli_args, and the help (help.c) prints
 * every usage text and docs/CLI.md. A command's code (commands.c) reads
 * the options it declared from cli_args. */
#ifndef TB_CLI_H
#define TB_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The values of a repeatable option, in command-line order: pointers
 * into argv. */
typedef struct cli_list {
    char **v;
    size_t n;
} cli_list;

/* What the command line said, every option of every command: a command
 * sets the fields of the options it takes, the rest keep their zeroes.
 * A number option without a default that was not given reads 0 (an
 * integer) or NaN (a double). */
typedef struct cli_args {
    const char *db;             /* --db, else $TOKBENCH_DB, else ./tokbench.db */
    int dry_run;                /* run */
    cli_list filters;           /* run, history: KEY=V1[,V2...] each */
    long limit;                 /* sessions: the newest N; 0: all */
    const char *format;         /* one of the command's --format choices; NULL: not given */
    const char *output;         /* -o FILE */
    int last;                   /* report --last */
    const char *backend;        /* history, serve: a backend's label */
    cli_list backends;          /* compare --backends X Y: 0 or 2 labels */
    const char *metric;         /* compare: M[,M...]; history: one name */
    double alpha;               /* compare: significance level */
    double fail_pct;            /* compare's gates; NaN: off */
    double fail_acc_pp;
    double fail_err_rate;
    double fail_p99_ttft_pct;
    double max_error_rate;      /* run: a fraction in [0, 1] */
    uint32_t shard_k, shard_n;  /* run --shard K/N; n 0: not sharded */
    int64_t start_at;           /* run --start-at, realtime ns; -1: none */
    const char *start_at_text;
    long port;                  /* serve: [0, 65535] */
    const char *host;           /* serve: not yet checked to be an address */
    long max_batch;             /* serve: [1, 65536]; 0 when not given */
    const char *batching;       /* serve: "continuous" or "static" */
    const char *port_file;      /* serve */
    int reuse_port;             /* serve */
    long client_timeout;        /* serve: seconds, [1, 3600] */
    long max_connections;       /* serve: [1, 65536] */
    long max_connections_per_ip; /* serve: [0, 65536]; 0: no limit */
    const char *api_key;        /* serve: never printed */
    const char *api_key_file;   /* serve */
    double load_timeout;        /* plugins: seconds, > 0 */
    int wide;                   /* show, run: --wide */
    long width;                 /* show, run: --width N; 0 when not given */
    int markdown;               /* help --markdown */
    struct {                    /* bench: checked by cli/bench.c, which writes the suite */
        const char *url, *model, *plugin, *tokenizer, *dataset;
        const char *concurrency, *request_rate, *batch, *steps; /* N[,N...] as typed */
        const char *input_len, *output_len, *api_key_env;
        cli_list headers;       /* --header K:V each */
        cli_list slo;           /* --slo each, merged by bench.c */
        double duration;        /* NaN: not given */
        long repeat, requests;  /* requests 0: not given */
        int print_suite;
    } bench;
    int requests;               /* export --requests: a row per request */
    long case_ordinal;          /* export --case N; 0: every case */
    char **pos;                 /* the positional arguments */
    int n_pos;
} cli_args;

/* How an option sets its field of cli_args. */
typedef enum cli_kind {
    CLI_FLAG,   /* int, set to 1; takes no argument */
    CLI_STRING, /* const char *, the argument */
    CLI_INT,    /* long, an integer within lo, hi */
    CLI_DOUBLE, /* double, a finite number within lo, hi (open_lo, open_hi) */
    CLI_LIST,   /* cli_list, the argument appended; n_args values when > 1 */
    CLI_CHOICE, /* const char *, the choice named (an alias: the choice it stands for) */
    CLI_CALL,   /* call(): options whose text means more than one field */
    CLI_HELP,   /* print the command's usage to stdout, exit 0 */
} cli_kind;

/* One value of an option with a fixed set. */
typedef struct cli_choice {
    const char *name;
    const char *help;     /* one line; NULL for an alias */
    const char *alias_of; /* another choice's name, or NULL */
} cli_choice;

/* The commands, as bits of cli_option.commands. */
enum {
    CLI_RUN = 1 << 0,
    CLI_PLUGINS = 1 << 1,
    CLI_SESSIONS = 1 << 2,
    CLI_SHOW = 1 << 3,
    CLI_REPORT = 1 << 4,
    CLI_COMPARE = 1 << 5,
    CLI_HISTORY = 1 << 6,
    CLI_EXPORT = 1 << 7,
    CLI_DB = 1 << 8,
    CLI_SERVE = 1 << 9,
    CLI_VERSION = 1 << 10,
    CLI_HELP_CMD = 1 << 11,
    CLI_BENCH = 1 << 12,
};

/* One option of one or more commands. Two rows may share a long name
 * when they mean different things to different commands (--format);
 * within a command, names and letters are unique (cli_table_check). */
typedef struct cli_option {
    const char *name;  /* long name, without "--" */
    char letter;       /* short option, or 0 */
    const char *arg;   /* the argument's name in help ("FILE"); NULL: none, or the choices */
    const char *help;  /* one paragraph; help.c wraps it */
    unsigned commands; /* CLI_* bits: the commands that take it */
    cli_kind kind;
    size_t field;      /* offsetof(cli_args, ...) */
    const char *def;   /* default, parsed as the argument is, and shown; NULL: none */
    int required;      /* the command refuses to run without it */
    double lo, hi;     /* CLI_INT, CLI_DOUBLE: the range (hi INFINITY: none) */
    int open_lo, open_hi;
    const char *what;  /* CLI_INT, CLI_DOUBLE: what the number is ("a port"); CLI_LIST: what its n_args values are */
    unsigned n_args;   /* CLI_LIST: values each use takes ("--backends X Y": 2); 0 or 1: one */
    const cli_choice *choices; /* CLI_CHOICE: NULL-named row last */
    /* CLI_CALL: text is the argument, or NULL before parsing to set what
     * "not given" means; 0, or -1 with *err (allocated) saying why. */
    int (*call)(cli_args *a, const char *text, char **err);
} cli_option;

/* One form of a command's positional arguments. */
typedef struct cli_form {
    const char *args; /* "A B" */
    const char *what; /* one line, or NULL where the command has one form */
} cli_form;

typedef struct cli_command {
    const char *name;
    const char *sub;       /* the word that must follow name ("db merge"), or NULL */
    unsigned bit;          /* CLI_*: which options are its own */
    const cli_form *forms; /* NULL-args row last; the first is the main usage's */
    const char *summary;   /* one line in the main usage */
    const char *about;     /* paragraphs ("\n\n" between), or NULL */
    const char *epilog;    /* after the options: exit status */
    /* Why this build cannot run it, or NULL; asked before --help, so
     * that scripts can ask --help whether the command is there. */
    const char *(*unavailable)(void);
    /* The command, its options parsed; command_line: the whole of it,
     * as typed (getopt permutes argv). Returns the exit status. */
    int (*run)(const struct cli_command *cmd, const cli_args *args, const char *command_line);
} cli_command;

/* The tables (options.c): rows in the order help lists them, each ending
 * with a NULL-named row. */
extern const cli_option cli_options[];
extern const cli_command cli_commands[];
/* The main usage's first paragraphs, and its last (a format: its %s is
 * where plugins are installed). */
extern const char cli_about[];
extern const char cli_about_end[];

/* The command named `name`, or NULL (options.c). */
const cli_command *cli_command_find(const char *name);

/* Parse argv (argv[0] the command's name) with cmd's options into *a:
 * defaults first, then each option; exits 0 after --help, 2 with a
 * message on stderr on a bad option or a missing required one. Free
 * with cli_args_free. */
void cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *a);
void cli_args_free(cli_args *a);

/* Usage texts (help.c): the main one, and one command's. */
void cli_usage_main(FILE *out);
void cli_usage(const cli_command *cmd, FILE *out);
/* docs/CLI.md: the main usage and every command's, as Markdown. */
void cli_markdown(FILE *out);

/* Queries of the table (options.c), for the parser and the usage texts
 * alike. Whether cmd takes option o. */
int cli_takes(const cli_command *cmd, const cli_option *o);
/* An option's argument as help names it: arg, else the choices ("csv|json"),
 * else "" (allocated). */
char *cli_arg_name(const cli_option *o);
/* The choices that are no alias, joined: ("csv|json" with "|", "|"; "md,
 * html, csv or json" with ", ", " or "); allocated. */
char *cli_choices_text(const cli_option *o, const char *comma, const char *last_sep);

/* The table's own consistency (a name or letter twice in a command, a
 * choice option without choices, ...): NULL, or why (static text). */
const char *cli_table_check(void);

/* The commands (commands.c, main.c): cli_command.run. */
int cmd_run(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_bench(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_plugins(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_sessions(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_show(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_report(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_compare(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_history(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_export(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_db_merge(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_serve(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_version(const cli_command *cmd, const cli_args *args, const char *command_line);
int cmd_help(const cli_command *cmd, const cli_args *args, const char *command_line);

#endif
