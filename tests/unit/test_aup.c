/* test_aup.c — reports/aup.c, accuracy under parallelism: the formula on
 * points worked out by hand (e^-0.075 = 0.9277434863, e^-1/3 =
 * 0.7165313106, e^-11/30 = 0.6930406201), and the session's curves: one
 * per backend and condition, the lever (steps, swept options) swept
 * inside a curve, y_max over every backend on the task (the condition
 * but block length). */
#define _POSIX_C_SOURCE 200809L
#include "aup.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void test_weight(void)
{
    CHECK_NEAR(tb_aup_weight(80, 80), 1, 0);
    CHECK_NEAR(tb_aup_weight(90, 80), 1, 0); /* capped at 1 */
    CHECK_NEAR(tb_aup_weight(78, 80), 0.9277434863, 1e-9);
    CHECK_NEAR(tb_aup_weight(0, 80), exp(-3), 1e-15);
    CHECK_NEAR(tb_aup_weight(0, 0), 1, 0); /* no accuracy anywhere */
}

static void test_formula(void)
{
    /* unsorted; (4, 70) is more than 5 points below y_1 = 80: dropped.
     * 1*80 + (2-1)/2 (78 W(78) + 80 W(80)), W(78) = e^-0.075 */
    tb_aup_point p[] = {{.rho = 4, .y = 70, .ordinal = 3}, {.rho = 1, .y = 80, .ordinal = 1},
                        {.rho = 2, .y = 78, .ordinal = 2}};
    CHECK_NEAR(tb_aup(p, 3, 80), 80 + 0.5 * (78 * 0.9277434863 + 80), 1e-8);
    CHECK(p[0].ordinal == 1 && p[1].ordinal == 2 && p[2].ordinal == 3); /* sorted by rho */
    CHECK(p[0].used && p[1].used && !p[2].used);

    /* accuracy that never drops, at y_max: the plain area plus rho_1 y_1:
     * 50 + (1)(100)/2 + (2)(100)/2 */
    tb_aup_point q[] = {{.rho = 1, .y = 50}, {.rho = 2, .y = 50}, {.rho = 4, .y = 50}};
    CHECK_NEAR(tb_aup(q, 3, 50), 200, 1e-12);

    /* a dropped point in the middle: the trapezoid joins its neighbours;
     * y_max 90 from another backend weighs both kept points:
     * 80 + (3-1)/2 (79 e^-11/30 + 80 e^-1/3) */
    tb_aup_point r[] = {{.rho = 1, .y = 80}, {.rho = 2, .y = 70}, {.rho = 3, .y = 79}};
    CHECK_NEAR(tb_aup(r, 3, 90), 80 + 1.0 * (79 * 0.6930406201 + 80 * 0.7165313106), 1e-7);
    CHECK(r[0].used && !r[1].used && r[2].used);

    /* the floor is y_1 - 5 inclusive */
    tb_aup_point e[] = {{.rho = 1, .y = 80}, {.rho = 3, .y = 75}};
    CHECK_NEAR(tb_aup(e, 2, 80), 80 + 1.0 * (75 * exp(-3 * (1 - 75.0 / 80)) + 80), 1e-9);
    CHECK(e[1].used);

    /* one point (an AR engine): rho_1 y_1, unweighted even below y_max */
    tb_aup_point a[] = {{.rho = 0.94, .y = 60}};
    CHECK_NEAR(tb_aup(a, 1, 90), 0.94 * 60, 1e-12);
    CHECK(isnan(tb_aup(a, 0, 90)));
}

/* A case of backend b with steps (0: none), batch, accuracy and tokens
 * per forward (NaN: not stored). */
typedef struct tcase {
    size_t backend;
    uint32_t steps, batch;
    const char *status, *options;
    double acc, tpf;
} tcase;

static void test_session(void)
{
    static const tcase cs[] = {
        {0, 2, 1, "ok", "{}", 0.80, 8},   /* diff, batch 1: 8 tok/fwd at 80% */
        {0, 8, 1, "ok", "{}", 0.90, 2},
        {0, 4, 1, "ok", "{}", 0.88, 4},
        {0, 16, 1, "failed", "{}", 0.99, 1}, /* not ok: no point */
        {0, 4, 8, "ok", "{}", 0.50, 32},  /* batch 8: another condition */
        {1, 0, 1, "ok", "{}", 0.95, 0.9}, /* ar, batch 1: one point, the best accuracy */
        {1, 0, 8, "ok", "{}", NAN, 7.5},  /* no accuracy: no point */
        {2, 0, 1, "ok", "{\"threshold\":\"0.9\"}", 0.70, 1.5}, /* swept options: one curve */
        {2, 0, 1, "ok", "{\"threshold\":\"0.5\"}", 0.69, 3},
    };
    enum { N = sizeof cs / sizeof *cs };
    tb_rbackend b[3] = {{.label = (char *)"diff"}, {.label = (char *)"ar"}, {.label = (char *)"thr"}};
    tb_rcase c[N];
    tb_rmetric m[N][2];
    for (size_t i = 0; i < N; i++) {
        size_t k = 0;
        if (isfinite(cs[i].acc))
            m[i][k++] = (tb_rmetric){.name = (char *)"accuracy", .unit = (char *)"fraction",
                                     .st = {.n = 40, .median = cs[i].acc}};
        m[i][k++] = (tb_rmetric){.name = (char *)"tokens_per_forward", .unit = (char *)"tokens",
                                 .st = {.n = 5, .median = cs[i].tpf}};
        c[i] = (tb_rcase){.ordinal = (int)i + 1, .backend = cs[i].backend,
                          .dims = {.max_new_tokens = 16, .batch = cs[i].batch, .steps = cs[i].steps,
                                   .block_length = cs[i].backend == 0 ? 16 : 0},
                          .options_json = (char *)cs[i].options, .status = (char *)cs[i].status,
                          .error = (char *)"", .metrics = m[i], .n_metrics = k};
    }
    tb_rsession s = {.status = (char *)"completed", .backends = b, .n_backends = 3, .cases = c, .n_cases = N};
    tb_aup_rows a;
    tb_aup_session(&s, &a);
    CHECK(a.n == 4); /* diff b1, diff b8, ar b1, thr b1 */
    if (a.n == 4) {
        const tb_aup_row *d = &a.v[0], *d8 = &a.v[1], *ar = &a.v[2], *thr = &a.v[3];
        CHECK(d->backend == 0 && d->n_pts == 3);
        CHECK_STR(d->condition, "prompt set, new 16, batch 1, block 16");
        CHECK_NEAR(d->y_max, 95, 1e-12); /* the AR's, on the same task (the AR has no block) */
        /* sorted: (2, 90), (4, 88), (8, 80); 80 < 90 - 5: dropped.
         * 2*90 + (4-2)/2 (88 W(88) + 90 W(90)), y_max 95 */
        double w88 = exp(-3 * (1 - 88.0 / 95)), w90 = exp(-3 * (1 - 90.0 / 95));
        CHECK_NEAR(d->aup, 180 + 1.0 * (88 * w88 + 90 * w90), 1e-9);
        CHECK(d->pts[2].used == 0 && d->pts[2].ordinal == 1);
        char *text = tb_aup_points_text(d);
        CHECK_STR(text, "2.00: 90.0%, 4.00: 88.0%, (8.00: 80.0% dropped)");
        free(text);
        CHECK(d8->backend == 0 && d8->n_pts == 1 && d8->y_max == 50); /* the AR's batch 8 has no accuracy */
        CHECK_NEAR(d8->aup, 32 * 50, 1e-9);
        CHECK(ar->backend == 1 && ar->n_pts == 1);
        CHECK_NEAR(ar->aup, 0.9 * 95, 1e-9);
        CHECK(thr->backend == 2 && thr->n_pts == 2);
        CHECK_NEAR(thr->aup, 1.5 * 70 + 0.75 * (69 * exp(-3 * (1 - 69.0 / 95)) + 70 * exp(-3 * (1 - 70.0 / 95))),
                   1e-9);
    }
    tb_aup_rows_free(&a);

    /* no accuracy anywhere: no rows */
    for (size_t i = 0; i < N; i++)
        c[i].status = (char *)"failed";
    tb_aup_session(&s, &a);
    CHECK(a.n == 0);
    tb_aup_rows_free(&a);
}

int main(void)
{
    test_weight();
    test_formula();
    test_session();
    return check_done();
}
