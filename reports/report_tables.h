/* report_tables.h — the tables of a session report, built once from the model
 * (model.h) as cells of text, so the Markdown and HTML reports show the
 * same figures with the same rounding. */
#ifndef TB_REPORT_TABLES_H
#define TB_REPORT_TABLES_H

#include <stddef.h>

#include "rsession.h"

typedef struct tb_rtable {
    const char *id;    /* "side-by-side", "throughput", "latency", "work", "speculative",
                          "quality", "aup", "statistics" */
    const char *title;
    char *note;        /* how to read it; may be "" */
    size_t n_cols, n_rows;
    char **head;       /* n_cols */
    char **cells;      /* n_rows × n_cols, row-major */
    int *numeric;      /* per column: right-align */
} tb_rtable;

typedef struct tb_rtables {
    tb_rtable *v;
    size_t n;
} tb_rtables;

void tb_rtables_build(const tb_rsession *s, tb_rtables *out);
void tb_rtables_free(tb_rtables *t);

#endif
