/* aup.h — accuracy under parallelism (AUP, d3LLM), the one score per
 * backend and condition that says "faster at what quality"
 * (docs/METRICS.md, "Accuracy under parallelism"). A figure of a session,
 * not of a case: computed here from the cases as rsession.h holds them,
 * and shown by the tables (report_tables.c), `show` and the JSON export. */
#ifndef TB_REPORT_AUP_H
#define TB_REPORT_AUP_H

#include <stddef.h>

#include "rsession.h"

/* The published constants: W's penalty alpha, and how far (points of
 * accuracy, %) below the first point's a point may be and still count. */
#define TB_AUP_ALPHA 3.0
#define TB_AUP_DROP 5.0

/* One point of a curve: parallelism rho (tokens per forward) and
 * accuracy y in % (0..100). */
typedef struct tb_aup_point {
    double rho, y;
    int ordinal; /* the case it came from (0: none) */
    int used;    /* set by tb_aup(): kept by the y_1 - TB_AUP_DROP rule */
} tb_aup_point;

/* W(y) = min(exp(-alpha (1 - y / y_max)), 1); 1 when y_max <= 0 (every
 * accuracy is then 0, and so is every term it weighs). */
double tb_aup_weight(double y, double y_max);

/* AUP of the n points p (sorted here by rho, ties in their given order;
 * each point's `used` set) against y_max, the best accuracy on the task:
 * rho_1 y_1 + sum over the kept points i >= 2 of
 * (rho_i - rho_{i-1}) (y_i W(y_i) + y_{i-1} W(y_{i-1})) / 2. NaN when
 * n is 0. Points must have rho > 0 and finite y (tb_aup_session keeps
 * only those). */
double tb_aup(tb_aup_point *p, size_t n, double y_max);

/* One curve of a session: a backend under one condition (the case's
 * dimensions but steps, and without its swept options: those are the
 * lever the curve sweeps). y_max spans every backend's cases on the same
 * task: the condition but block length (an AR engine has none). */
typedef struct tb_aup_row {
    size_t backend;    /* index into tb_rsession.backends */
    char *condition;   /* "prompt set, new 16, batch 1" (tb_rcase_key) */
    tb_aup_point *pts; /* sorted by rho */
    size_t n_pts;
    char *task;        /* the condition without block length, a diffusion
                          backend's own dimension: y_max's scope */
    double y_max;      /* best accuracy (%) of any backend's case on the task */
    double aup;
} tb_aup_row;

typedef struct tb_aup_rows {
    tb_aup_row *v;
    size_t n;
} tb_aup_rows;

/* The curves of session s, in the order of their first case: a point per
 * ok case with an `accuracy` and a `tokens_per_forward` > 0 (medians).
 * None (n = 0) when no case has both. */
void tb_aup_session(const tb_rsession *s, tb_aup_rows *out);
void tb_aup_rows_free(tb_aup_rows *r);

/* "1.00: 62.5%, 2.00: 60.0%, (4.00: 40.0% dropped)": a row's points for
 * people. malloc'd. */
char *tb_aup_points_text(const tb_aup_row *r);

#endif
