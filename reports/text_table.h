/* text_table.h — a plain-text table: add rows of cells, print aligned.
 * Cells that look numeric are right-aligned, text left-aligned. */
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
void tb_table_print(const tb_table *t, FILE *out);
void tb_table_free(tb_table *t);

#endif
