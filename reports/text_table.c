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
    int *priority; /* [n_cols]: 0 = always shown */
    int *hidden;   /* [n_cols] */
};

tb_table *tb_table_new(int n_cols)
{
    tb_table *t = tb_xcalloc(1, sizeof *t);
    t->n_cols = n_cols;
    t->priority = tb_xcalloc((size_t)n_cols + 1, sizeof *t->priority);
    t->hidden = tb_xcalloc((size_t)n_cols + 1, sizeof *t->hidden);
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

void tb_table_priority(tb_table *t, int col, int priority)
{
    if (col >= 0 && col < t->n_cols)
        t->priority[col] = priority;
}

/* Each column's width (its widest cell). */
static size_t *col_widths(const tb_table *t)
{
    size_t *w = tb_xcalloc((size_t)t->n_cols, sizeof *w);
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t c = i % (size_t)t->n_cols, l = width(t->cells[i]);
        if (l > w[c])
            w[c] = l;
    }
    return w;
}

size_t tb_table_width(const tb_table *t)
{
    size_t *w = col_widths(t), total = 0, shown = 0;
    for (int c = 0; c < t->n_cols; c++)
        if (!t->hidden[c]) {
            total += w[c];
            shown++;
        }
    free(w);
    return total + (shown ? 2 * (shown - 1) : 0);
}

static int empty_cell(const char *s)
{
    return !*s || strcmp(s, "-") == 0;
}

char *tb_table_fit(tb_table *t, size_t max_width)
{
    size_t n_rows = t->n_cells / (size_t)t->n_cols;
    for (int c = 0; c < t->n_cols; c++) {
        if (!t->priority[c] || n_rows < 2)
            continue;
        int empty = 1;
        for (size_t r = 1; r < n_rows && empty; r++)
            empty = empty_cell(t->cells[r * (size_t)t->n_cols + (size_t)c]);
        t->hidden[c] |= empty;
    }
    while (max_width && tb_table_width(t) > max_width) {
        int worst = -1;
        for (int c = 0; c < t->n_cols; c++)
            if (!t->hidden[c] && t->priority[c] && (worst < 0 || t->priority[c] >= t->priority[worst]))
                worst = c;
        if (worst < 0)
            break; /* what is left is always shown */
        t->hidden[worst] = 2; /* for width: named */
    }
    tb_str dropped = {0};
    for (int c = 0; c < t->n_cols; c++)
        if (t->hidden[c] == 2)
            tb_str_appendf(&dropped, "%s%s", dropped.len ? ", " : "", t->cells[c]);
    return dropped.len ? tb_str_take(&dropped) : NULL;
}

char *tb_table_hoist(tb_table *t, int first, int last)
{
    size_t n_rows = t->n_cells / (size_t)t->n_cols;
    tb_str said = {0};
    for (int c = first < 0 ? 0 : first; c <= last && c < t->n_cols && n_rows > 2; c++) {
        if (t->hidden[c])
            continue;
        const char *v = t->cells[(size_t)t->n_cols + (size_t)c];
        int same = 1;
        for (size_t r = 2; r < n_rows && same; r++)
            same = strcmp(t->cells[r * (size_t)t->n_cols + (size_t)c], v) == 0;
        if (!same)
            continue;
        t->hidden[c] = 3; /* said once, not left out */
        tb_str_appendf(&said, "%s%s %s", said.len ? ", " : "", t->cells[c], v);
    }
    return said.len ? tb_str_take(&said) : NULL;
}

int tb_table_hidden(const tb_table *t, int col)
{
    return col >= 0 && col < t->n_cols && t->hidden[col];
}

void tb_table_print(const tb_table *t, FILE *out)
{
    size_t *w = col_widths(t);
    int last = t->n_cols - 1; /* the last column shown: no padding after it */
    while (last > 0 && t->hidden[last])
        last--;
    for (size_t i = 0; i < t->n_cells; i++) {
        size_t c = i % (size_t)t->n_cols;
        const char *s = t->cells[i];
        if (!t->hidden[c]) {
            size_t pad = w[c] - width(s);
            int right = i >= (size_t)t->n_cols && numeric(s);
            if (right)
                fprintf(out, "%*s%s", (int)pad, "", s);
            else
                fprintf(out, "%s%*s", s, (int)c == last ? 0 : (int)pad, "");
            fputs((int)c >= last ? "\n" : "  ", out);
        }
        if (i + 1 == (size_t)t->n_cols) { /* rule under the header */
            for (int k = 0; k < t->n_cols; k++) {
                if (t->hidden[k])
                    continue;
                for (size_t j = 0; j < w[k]; j++)
                    fputc('-', out);
                fputs(k >= last ? "\n" : "  ", out);
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
    free(t->priority);
    free(t->hidden);
    free(t);
}
