/* help.c — every usage text and docs/CLI.md, made from the command and
 * option tables (options.c): the text for a terminal, wrapped to 79
 * columns; the Markdown unwrapped, one paragraph a line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tb_config.h"
#include "util.h"

#define WIDTH 79
#define HELP_COLUMN 24 /* where an option's help starts */

/* Print text from column col (the caller has printed that much of the
 * line), wrapping at spaces to WIDTH with continuation lines indented
 * to `indent`; "\n\n" starts a new paragraph, at column 0. Ends with a
 * newline. A word longer than the line overflows it. */
static void wrap(FILE *out, const char *text, size_t col, size_t indent)
{
    size_t start_col = col;
    const char *p = text;
    while (*p) {
        if (p[0] == '\n') { /* a paragraph break: "\n\n" */
            fputs("\n\n", out);
            p += p[1] == '\n' ? 2 : 1;
            col = start_col = 0;
            indent = 0;
            continue;
        }
        size_t len = strcspn(p, " \n");
        if (col > start_col && col + 1 + len > WIDTH) {
            fprintf(out, "\n%*s", (int)indent, "");
            col = start_col = indent;
        } else if (col > start_col) {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, len, out);
        col += len;
        p += len;
        while (*p == ' ')
            p++;
    }
    fputc('\n', out);
}

/* "db merge", "run": what follows "tokbench" (allocated). */
static char *title(const cli_command *c)
{
    return tb_xasprintf("%s%s%s", c->name, c->sub ? " " : "", c->sub ? c->sub : "");
}

/* "db merge [OTHER.db...]": the title and the first form's arguments, as
 * the main usage lists the command (allocated). */
static char *headline(const cli_command *c)
{
    char *t = title(c);
    char *s = tb_xasprintf("%s%s%s", t, *c->forms[0].args ? " " : "", c->forms[0].args);
    free(t);
    return s;
}

/* "tokbench compare A B [options]": the required options, the form's
 * arguments, and [options] when there are others. */
static char *synopsis(const cli_command *cmd, const cli_form *f)
{
    tb_str b = {0};
    int optional = 0;
    char *t = title(cmd);
    tb_str_appendf(&b, "tokbench %s", t);
    free(t);
    for (const cli_option *o = cli_options; o->name; o++) {
        if (!cli_takes(cmd, o) || o->kind == CLI_HELP)
            continue;
        if (o->required) {
            char *arg = cli_arg_name(o);
            tb_str_appendf(&b, " --%s%s%s", o->name, *arg ? " " : "", arg);
            free(arg);
        } else {
            optional = 1;
        }
    }
    if (*f->args)
        tb_str_appendf(&b, " %s", f->args);
    if (optional)
        tb_str_append(&b, " [options]");
    return tb_str_take(&b);
}

/* "-o, --output FILE" */
static char *option_left(const cli_option *o)
{
    char *arg = cli_arg_name(o);
    char *s = tb_xasprintf("%s%s--%s%s%s", o->letter ? (char[]){'-', o->letter, 0} : "", o->letter ? ", " : "",
                           o->name, *arg ? " " : "", arg);
    free(arg);
    return s;
}

static int has_choice_help(const cli_option *o)
{
    return o->kind == CLI_CHOICE && o->choices[0].help;
}

/* An option's help with what the table adds: (default X), (repeatable),
 * (required), and a colon before a list of its choices. */
static char *option_help(const cli_option *o, const char *quote)
{
    tb_str b = {0};
    tb_str_append(&b, o->help);
    if (o->def)
        tb_str_appendf(&b, " (default %s%s%s)", quote, o->def, quote);
    if (o->kind == CLI_LIST && o->n_args < 2)
        tb_str_append(&b, " (repeatable)");
    if (o->required)
        tb_str_append(&b, " (required)");
    if (has_choice_help(o))
        tb_str_append(&b, ":");
    return tb_str_take(&b);
}

void cli_usage(const cli_command *cmd, FILE *out)
{
    size_t width = 0; /* of the longest form: their whats line up */
    for (const cli_form *f = cmd->forms; f->args; f++) {
        char *s = synopsis(cmd, f);
        if (strlen(s) > width)
            width = strlen(s);
        free(s);
    }
    for (const cli_form *f = cmd->forms; f->args; f++) {
        char *s = synopsis(cmd, f);
        if (f->what)
            fprintf(out, "%s%-*s  %s\n", f == cmd->forms ? "usage: " : "       ", (int)width, s, f->what);
        else
            fprintf(out, "%s%s\n", f == cmd->forms ? "usage: " : "       ", s);
        free(s);
    }
    if (cmd->about) {
        fputc('\n', out);
        wrap(out, cmd->about, 0, 0);
    }
    int any = 0;
    for (const cli_option *o = cli_options; o->name; o++) {
        if (!cli_takes(cmd, o))
            continue;
        if (!any++)
            fputs("\noptions:\n", out);
        char *left = option_left(o), *help = option_help(o, "");
        int col = fprintf(out, "  %s", left);
        if (col + 2 > HELP_COLUMN) {
            fputc('\n', out);
            col = 0;
        }
        fprintf(out, "%*s", HELP_COLUMN - col, "");
        wrap(out, help, HELP_COLUMN, HELP_COLUMN);
        free(left);
        free(help);
        if (!has_choice_help(o))
            continue;
        size_t w = 0;
        for (const cli_choice *c = o->choices; c->name; c++)
            if (strlen(c->name) > w)
                w = strlen(c->name);
        for (const cli_choice *c = o->choices; c->name; c++) {
            char *what = c->alias_of ? tb_xasprintf("the same as %s", c->alias_of) : tb_xstrdup(c->help);
            int n = fprintf(out, "%*s%-*s  ", HELP_COLUMN + 2, "", (int)w, c->name);
            wrap(out, what, (size_t)n, (size_t)n);
            free(what);
        }
    }
    if (cmd->epilog) {
        fputc('\n', out);
        wrap(out, cmd->epilog, 0, 0);
    }
}

/* The main usage's last paragraph, with where plugins are installed. */
static char *about_end(const char *plugin_dir)
{
    return tb_xasprintf(cli_about_end, plugin_dir);
}

void cli_usage_main(FILE *out)
{
    fprintf(out, "usage: tokbench COMMAND [ARGS]\n\n");
    wrap(out, cli_about, 0, 0);
    fprintf(out, "\ncommands:\n");
    size_t w = 0;
    for (const cli_command *c = cli_commands; c->name; c++) {
        char *left = headline(c);
        if (strlen(left) > w)
            w = strlen(left);
        free(left);
    }
    for (const cli_command *c = cli_commands; c->name; c++) {
        char *left = headline(c);
        int n = fprintf(out, "  %-*s  ", (int)w, left);
        wrap(out, c->summary, (size_t)n, (size_t)n);
        free(left);
    }
    fputc('\n', out);
    char *end = about_end(TB_PLUGIN_INSTALL_DIR);
    wrap(out, end, 0, 0);
    free(end);
}

static void markdown_synopsis_block(const cli_command *cmd, FILE *out)
{
    fputs("```\n", out);
    for (const cli_form *f = cmd->forms; f->args; f++) {
        char *s = synopsis(cmd, f);
        fprintf(out, "%s\n", s);
        free(s);
    }
    fputs("```\n", out);
}

void cli_markdown(FILE *out)
{
    fputs("# The tokbench command line\n\n"
          "<!-- Generated by `tokbench help --markdown` from the tables in cli/options.c: change them, not this "
          "file (tests/unit/test_cli_doc.sh fails when the two differ). -->\n\n",
          out);
    fprintf(out, "%s\n\n", cli_about);
    char *end = about_end("the install's plugin folder (`tokbench help` names it)");
    fprintf(out, "%s\n\n", end);
    free(end);
    for (const cli_command *c = cli_commands; c->name; c++) {
        char *head = headline(c), *t = title(c);
        for (char *p = t; *p; p++) /* GitHub's anchor of the heading: spaces as dashes */
            if (*p == ' ')
                *p = '-';
        fprintf(out, "- [`tokbench %s`](#tokbench-%s): %s\n", head, t, c->summary);
        free(head);
        free(t);
    }
    for (const cli_command *c = cli_commands; c->name; c++) {
        char *t = title(c);
        fprintf(out, "\n## tokbench %s\n\n", t);
        markdown_synopsis_block(c, out);
        for (const cli_form *f = c->forms; f->args; f++)
            if (f->what)
                fprintf(out, "%s- `tokbench %s %s`: %s\n", f == c->forms ? "\n" : "", t, f->args, f->what);
        free(t);
        if (c->about)
            fprintf(out, "\n%s\n", c->about);
        int any = 0;
        for (const cli_option *o = cli_options; o->name; o++) {
            if (!cli_takes(c, o))
                continue;
            if (!any++)
                fputs("\nOptions:\n\n", out);
            char *left = option_left(o), *help = option_help(o, "`");
            fprintf(out, "- `%s`: %s\n", left, help);
            free(left);
            free(help);
            if (!has_choice_help(o))
                continue;
            for (const cli_choice *ch = o->choices; ch->name; ch++) {
                if (ch->alias_of)
                    fprintf(out, "  - `%s`: the same as `%s`\n", ch->name, ch->alias_of);
                else
                    fprintf(out, "  - `%s`: %s\n", ch->name, ch->help);
            }
        }
        if (c->epilog)
            fprintf(out, "\n%s\n", c->epilog);
    }
}
