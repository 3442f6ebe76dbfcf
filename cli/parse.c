/* parse.c — one command's argv into cli_args, by the option table: the
 * getopt_long tables are built from the command's rows, and each row's
 * kind says how its argument sets its field. */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

/* getopt_long's value of a long option without a letter: the row's
 * index past every char. */
#define LONG_ONLY_BASE 256

static int has_arg(const cli_option *o)
{
    return o->kind != CLI_FLAG && o->kind != CLI_HELP;
}

/* A value the option refuses: say why, exit 2 (bad input). */
static _Noreturn void bad_value(const cli_command *cmd, const char *why)
{
    fprintf(stderr, "tokbench %s: %s\n", cmd->name, why);
    exit(2);
}

/* What a number option takes: "a port in [0, 65535]", "a percentage >= 0"
 * (allocated). */
static char *range_text(const cli_option *o)
{
    if (isinf(o->hi))
        return tb_xasprintf("%s %s %.15g", o->what, o->open_lo ? ">" : ">=", o->lo);
    return tb_xasprintf("%s in %c%.15g, %.15g%c", o->what, o->open_lo ? '(' : '[', o->lo, o->hi,
                        o->open_hi ? ')' : ']');
}

static void number_arg(const cli_command *cmd, const cli_option *o, const char *text, void *field)
{
    char *end;
    double d;
    if (o->kind == CLI_INT) {
        long n = strtol(text, &end, 10);
        d = (double)n;
        *(long *)field = n;
    } else {
        d = strtod(text, &end);
        *(double *)field = d;
    }
    int ok = end != text && !*end && isfinite(d) && (o->open_lo ? d > o->lo : d >= o->lo) &&
             (o->open_hi ? d < o->hi : d <= o->hi);
    if (!ok) {
        char *want = range_text(o);
        char *why = tb_xasprintf("--%s %s: expected %s", o->name, text, want);
        free(want);
        bad_value(cmd, why);
    }
}

static void choice_arg(const cli_command *cmd, const cli_option *o, const char *text, const char **field)
{
    for (const cli_choice *c = o->choices; c->name; c++) {
        if (strcmp(text, c->name) != 0)
            continue;
        const char *name = c->alias_of ? c->alias_of : c->name;
        for (const cli_choice *t = o->choices; t->name; t++) /* the table's string, not argv's */
            if (strcmp(t->name, name) == 0)
                *field = t->name;
        return;
    }
    char *want = cli_choices_text(o, ", ", " or ");
    char *why = tb_xasprintf("--%s %s: expected %s", o->name, text, want);
    free(want);
    bad_value(cmd, why);
}

/* One option's argument into its field; NULL: it was not given (set what
 * that means), "" for a flag: it was. */
static void set(const cli_command *cmd, const cli_option *o, const char *text, cli_args *a)
{
    void *field = (char *)a + o->field;
    char *err = NULL;
    switch (o->kind) {
    case CLI_FLAG:
        *(int *)field = text != NULL;
        break;
    case CLI_STRING:
        *(const char **)field = text;
        break;
    case CLI_INT:
    case CLI_DOUBLE:
        if (text)
            number_arg(cmd, o, text, field);
        else if (o->kind == CLI_INT)
            *(long *)field = 0;
        else
            *(double *)field = NAN;
        break;
    case CLI_LIST:
        if (text) {
            cli_list *l = field;
            l->v = tb_xrealloc(l->v, (l->n + 1) * sizeof *l->v);
            l->v[l->n++] = (char *)text;
        }
        break;
    case CLI_CHOICE:
        if (text)
            choice_arg(cmd, o, text, field);
        else
            *(const char **)field = NULL;
        break;
    case CLI_CALL:
        if (o->call(a, text, &err) != 0)
            bad_value(cmd, err);
        break;
    case CLI_HELP:
        break;
    }
}

/* "--backends X Y" -> "--backends X --backends Y", for each option that
 * takes n_args > 1 values: getopt takes one. A use followed by fewer
 * values (or by an option) is left alone for cli_parse to refuse. The
 * result points into argv; free it (not its strings). */
static char **expand_multi(const cli_command *cmd, int argc, char **argv, int *n_out)
{
    /* a use and its n values (n + 1 words) become 2n words: at most twice argv */
    char **out = tb_xcalloc(2 * (size_t)argc + 1, sizeof *out);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        out[n++] = argv[i];
        if (strncmp(argv[i], "--", 2) != 0)
            continue;
        for (const cli_option *o = cli_options; o->name; o++) {
            if (!cli_takes(cmd, o) || o->kind != CLI_LIST || o->n_args < 2 || strcmp(argv[i] + 2, o->name) != 0)
                continue;
            int k = 1;
            while (k <= (int)o->n_args && i + k < argc && argv[i + k][0] != '-')
                k++;
            if (k - 1 != (int)o->n_args)
                break;
            for (unsigned v = 0; v < o->n_args; v++) {
                if (v)
                    out[n++] = argv[i];
                out[n++] = argv[i + 1 + v];
            }
            i += (int)o->n_args;
            break;
        }
    }
    *n_out = n;
    return out;
}

void cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *a)
{
    memset(a, 0, sizeof *a);
    size_t n_rows = 0;
    for (const cli_option *o = cli_options; o->name; o++)
        n_rows++;
    /* long options and "ho:", from the command's rows */
    struct option *longs = tb_xcalloc(n_rows + 1, sizeof *longs);
    char *shorts = tb_xcalloc(2 * n_rows + 1, 1);
    int *seen = tb_xcalloc(n_rows, sizeof *seen);
    size_t n_longs = 0, n_shorts = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const cli_option *o = &cli_options[i];
        if (!cli_takes(cmd, o))
            continue;
        set(cmd, o, o->def, a);
        longs[n_longs++] = (struct option){o->name, has_arg(o) ? required_argument : no_argument, NULL,
                                           o->letter ? o->letter : LONG_ONLY_BASE + (int)i};
        if (o->letter) {
            shorts[n_shorts++] = o->letter;
            if (has_arg(o))
                shorts[n_shorts++] = ':';
        }
    }
    int n_words;
    char **args = expand_multi(cmd, argc, argv, &n_words);
    optind = 1;
    int ch;
    while ((ch = getopt_long(n_words, args, shorts, longs, NULL)) != -1) {
        const cli_option *o = NULL;
        if (ch >= LONG_ONLY_BASE)
            o = &cli_options[ch - LONG_ONLY_BASE];
        else
            for (size_t i = 0; i < n_rows && !o; i++)
                if (cli_options[i].letter == ch && cli_takes(cmd, &cli_options[i]))
                    o = &cli_options[i];
        if (!o) { /* getopt has said what is wrong */
            cli_usage(cmd, stderr);
            exit(2);
        }
        if (o->kind == CLI_HELP) {
            cli_usage(cmd, stdout);
            exit(0);
        }
        seen[o - cli_options]++;
        set(cmd, o, has_arg(o) ? optarg : "", a); /* a flag's "": given */
    }
    for (size_t i = 0; i < n_rows; i++) {
        const cli_option *o = &cli_options[i];
        if (!cli_takes(cmd, o))
            continue;
        if (o->required && !seen[i]) {
            char *arg = cli_arg_name(o);
            fprintf(stderr, "tokbench %s: --%s%s%s is required\n\n", cmd->name, o->name, *arg ? " " : "", arg);
            free(arg);
            cli_usage(cmd, stderr);
            exit(2);
        }
        if (o->kind == CLI_LIST && o->n_args > 1 && seen[i] && seen[i] != (int)o->n_args) {
            fprintf(stderr, "tokbench %s: --%s takes %u %s: --%s %s\n\n", cmd->name, o->name, o->n_args, o->what,
                    o->name, o->arg);
            cli_usage(cmd, stderr);
            exit(2);
        }
    }
    /* argv's positional arguments: getopt moved them to the end of args */
    a->n_pos = n_words - optind;
    a->pos = tb_xcalloc((size_t)a->n_pos + 1, sizeof *a->pos);
    memcpy(a->pos, args + optind, (size_t)a->n_pos * sizeof *a->pos);
    free(args);
    free(longs);
    free(shorts);
    free(seen);
}

const char *cli_table_check(void)
{
    static char why[160];
    for (const cli_command *c = cli_commands; c->name; c++) {
        for (const cli_option *o = cli_options; o->name; o++) {
            if (!cli_takes(c, o))
                continue;
            const char *bad = NULL;
            if (o->kind == CLI_CHOICE && (!o->choices || !o->choices[0].name))
                bad = "a choice option without choices";
            else if ((o->kind == CLI_INT || o->kind == CLI_DOUBLE) && !o->what)
                bad = "a number option that does not say what it is";
            else if (o->kind == CLI_CALL && !o->call)
                bad = "a CLI_CALL option without call()";
            else if (o->kind == CLI_LIST && o->n_args > 1 && (!o->what || !o->arg))
                bad = "a multi-value option without what and arg";
            else if (has_arg(o) && o->kind != CLI_CHOICE && !o->arg)
                bad = "an option with an argument that has no name";
            for (const cli_option *p = cli_options; !bad && p < o; p++) {
                if (!cli_takes(c, p))
                    continue;
                if (strcmp(p->name, o->name) == 0)
                    bad = "declared twice";
                else if (o->letter && p->letter == o->letter)
                    bad = "a letter taken twice";
                else if (p->kind != CLI_CALL && o->kind != CLI_CALL && p->kind != CLI_HELP && p->field == o->field)
                    bad = "a field set by two options";
            }
            if (bad) {
                snprintf(why, sizeof why, "tokbench %s --%s: %s", c->name, o->name, bad);
                return why;
            }
        }
    }
    return NULL;
}

void cli_args_free(cli_args *a)
{
    free(a->filters.v);
    free(a->backends.v);
    free(a->bench.headers.v);
    free(a->bench.slo.v);
    free(a->pos);
    memset(a, 0, sizeof *a);
}
