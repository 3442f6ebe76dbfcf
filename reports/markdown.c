/* markdown.c — see markdown.h. */
#define _GNU_SOURCE
#include "markdown.h"

#include <string.h>

#include "rsession.h"
#include "warnings.h"
#include "report_tables.h"
#include "util.h"

void tb_md_escape(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '\n':
        case '\r': fputc(' ', out); break;
        case '\\': case '`': case '*': case '_': case '[': case ']': case '|': case '#': case '~':
            fputc('\\', out);
            fputc(*s, out);
            break;
        default: fputc(*s, out);
        }
    }
}

static void kv_table(FILE *out, const tb_rkvs *k)
{
    fputs("| | |\n|---|---|\n", out);
    for (size_t i = 0; i < k->n; i++) {
        fputs("| ", out);
        tb_md_escape(out, k->v[i].key);
        fputs(" | ", out);
        tb_md_escape(out, k->v[i].value);
        fputs(" |\n", out);
    }
    fputc('\n', out);
}

static void table(FILE *out, const tb_rtable *t)
{
    fputs("## ", out);
    tb_md_escape(out, t->title);
    fputs("\n\n|", out);
    for (size_t c = 0; c < t->n_cols; c++) {
        fputc(' ', out);
        tb_md_escape(out, t->head[c]);
        fputs(" |", out);
    }
    fputs("\n|", out);
    for (size_t c = 0; c < t->n_cols; c++)
        fputs(t->numeric[c] ? "---:|" : "---|", out);
    fputc('\n', out);
    for (size_t r = 0; r < t->n_rows; r++) {
        fputc('|', out);
        for (size_t c = 0; c < t->n_cols; c++) {
            fputc(' ', out);
            tb_md_escape(out, t->cells[r * t->n_cols + c]);
            fputs(" |", out);
        }
        fputc('\n', out);
    }
    if (t->note && *t->note) {
        fputs("\n", out);
        tb_md_escape(out, t->note);
        fputc('\n', out);
    }
    fputc('\n', out);
}

/* A code fence longer than any run of backticks in the text. */
static void fenced(FILE *out, const char *text)
{
    size_t longest = 0, run = 0;
    for (const char *p = text; *p; p++) {
        run = *p == '`' ? run + 1 : 0;
        if (run > longest)
            longest = run;
    }
    size_t n = longest >= 3 ? longest + 1 : 3;
    for (size_t i = 0; i < n; i++)
        fputc('`', out);
    fputs("ini\n", out);
    fputs(text, out);
    if (*text && text[strlen(text) - 1] != '\n')
        fputc('\n', out);
    for (size_t i = 0; i < n; i++)
        fputc('`', out);
    fputs("\n", out);
}

int tb_report_markdown(sqlite3 *db, int64_t session, FILE *out, char **err)
{
    tb_rsession s;
    if (tb_rsession_load(db, session, &s, err) != 0)
        return -1;
    tb_warnings w;
    tb_warnings_derive(&s, &w);
    tb_rtables ts;
    tb_rtables_build(&s, &ts);

    fputs("# tokbench report: ", out);
    tb_md_escape(out, s.suite_name);
    fprintf(out, ", session %lld\n\n", (long long)s.id);
    tb_md_escape(out, s.started_at);
    fputs(" · ", out);
    tb_md_escape(out, s.hostname);
    fputs(" · status ", out);
    tb_md_escape(out, s.status);
    fputs(" · suite sha256 ", out);
    tb_md_escape(out, s.suite_sha256);
    fputs("\n\n", out);
    for (size_t b = 0; b < s.n_backends; b++)
        if (s.backends[b].random_weights == 1) {
            fputs("**RANDOM WEIGHTS**: ", out);
            tb_md_escape(out, s.backends[b].label);
            fputs(": speed only; outputs and quality mean nothing.\n\n", out);
        }
    fputs("## Warnings\n\n", out);
    for (size_t i = 0; i < w.n; i++) {
        fputs("- ", out);
        tb_md_escape(out, w.text[i]);
        fputc('\n', out);
    }
    fputs(w.n ? "\n" : "None.\n\n", out);
    for (size_t i = 0; i < ts.n; i++)
        table(out, &ts.v[i]);

    fputs("## Conditions\n\n### Session\n\n", out);
    kv_table(out, &s.session);
    fputs("### Machine\n\n", out);
    kv_table(out, &s.machine);
    for (size_t b = 0; b < s.n_backends; b++) {
        fputs("### Backend ", out);
        tb_md_escape(out, s.backends[b].label);
        fputs("\n\n", out);
        kv_table(out, &s.backends[b].info);
    }
    fputs("### Suite\n\n", out);
    fenced(out, s.suite_text);
    fputs("\nCharts: `tokbench report --format html`. Definitions: docs/METRICS.md, docs/REPORTS.md.\n", out);
    tb_rtables_free(&ts);
    tb_warnings_free(&w);
    tb_rsession_free(&s);
    return 0;
}
