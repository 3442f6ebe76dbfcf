/* text_table.h — a plain-text table: add rows of cells, print aligned.
 * Cells that look numeric are right-aligned, text left-aligned. Columns
 * can be hidden to fit a width (tb_table_fit). */
#ifndef TB_TEXT_TABLE_H
#define TB_TEXT_TABLE_H

#include <stdio.h>

typedef struct tb_table tb_table;

tb_table *tb_table_new(int n_cols);
/* Header cell texts (n_cols of them). */
void tb_table_header(tb_table *t, const char *const *names);
/* Append a cell to the current row; a row is complete after n_cols cells. */
void tb_table_cell(tb_table *t, const char *text);
void tb_table_cellf(tb_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A number with `prec` decimals, or "-" when NaN/unset. */
void tb_table_num(tb_table *t, double v, int prec);
/* Fitting a table to a terminal (tb_table_fit): a column's priority, 0
 * (the default) = always shown; a higher one is left out sooner. */
void tb_table_priority(tb_table *t, int col, int priority);
/* Hide the columns of priority > 0 whose every row is empty ("" or "-"),
 * then, while the table is wider than `width` characters (0: no limit),
 * the column of the highest priority (the rightmost of equals). Returns
 * the header names of the columns hidden for width, ", "-separated
 * (malloc'd), or NULL when none was. */
char *tb_table_fit(tb_table *t, size_t width);
/* Hide the shown columns of [first, last] that hold one value in every
 * row (two rows at least), to be said once above the table. Returns
 * "header value, ..." (malloc'd), or NULL when none was. */
char *tb_table_hoist(tb_table *t, int first, int last);
/* Whether column col is hidden (empty, left out or hoisted). */
int tb_table_hidden(const tb_table *t, int col);
/* Width of the printed table in characters (hidden columns left out). */
size_t tb_table_width(const tb_table *t);
void tb_table_print(const tb_table *t, FILE *out);
void tb_table_free(tb_table *t);

#endif
