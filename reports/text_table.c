/* text_table.c — see text_table.h. */
#define _GNU_SOURCE
#include "text_table.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct tb_table {
    int n_cols;
    char **cells; /* row-major; the first n_cols are the header */
    size_t n_cells;
};

tb_table *tb_table_new(int n_cols)
{
    tb_table *t = tb_xcalloc(1, sizeof *t);
    t->n_cols = n_cols;
    return t;
}

void tb_table_cell(tb_table *t, const char *text)
{
    t->cells = tb_xrealloc(t->cells, (t->n_cells + 1) * sizeof(char *));
    t->cells[t->n_cells++] = tb_xstrdup(text ? text : "");
}

void tb_table_header(tb_table *t, const char *const *names)
{
    for (int i = 0; i < t->n_cols; i++)
        tb_table_cell(t, names[i]);
}

void tb_table_cellf(tb_table *t, const char *fmt, ...)
{
    tb_str b = {0};
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(&b, fmt, ap);
    va_end(ap);
    char *s = tb_str_take(&b);
    tb_table_cell(t, s);
    free(s);
}

void tb_table_num(tb_table *t, double v, int prec)
{
    if (!isfinite(v))
        tb_table_cell(t, "-");
    else
        tb_table_cellf(t, "%.*f", prec, v);
}

static int numeric(const char *s)
{
    if (!*s || strcmp(s, "-") == 0)
        return 1;
    char *end;
    strtod(s, &end);
    return end != s && (*end == '\0' || *end == '%' || *end == 'x');
}

/* Display width of UTF-8 text: code points, not bytes. */
static size_t width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

void tb_table_print(const tb_table *t, FILE *out)
{
    size_t *w = tb_xcalloc((size_t)t->n_cols, sizeof *w);
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t c = i % (size_t)t->n_cols, l = width(t->cells[i]);
        if (l > w[c])
            w[c] = l;
    }
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t c = i % (size_t)t->n_cols;
        const char *s = t->cells[i];
        size_t pad = w[c] - width(s);
        int right = i >= (size_t)t->n_cols && numeric(s);
        if (right)
            fprintf(out, "%*s%s", (int)pad, "", s);
        else
            fprintf(out, "%s%*s", s, c + 1 == (size_t)t->n_cols ? 0 : (int)pad, "");
        fputs(c + 1 == (size_t)t->n_cols ? "\n" : "  ", out);
        if (i + 1 == (size_t)t->n_cols) { /* rule under the header */
            for (int k = 0; k < t->n_cols; k++) {
                for (size_t j = 0; j < w[k]; j++)
                    fputc('-', out);
                fputs(k + 1 == t->n_cols ? "\n" : "  ", out);
            }
        }
    }
    if (t->n_cells % (size_t)t->n_cols)
        fputc('\n', out);
    free(w);
}

void tb_table_free(tb_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_cells; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}
