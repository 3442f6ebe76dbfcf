/* test_metrics.c — core/metrics.c against values worked out by hand, and
 * against a second, deliberately naive implementation (sort the emission
 * times, take the first and the last) on random inputs. */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Relative tolerance for rates: 3 / (5000 * 1e-9) need not be exactly
 * 600000 in doubles, but it is within a few ulps. */
#define RTOL 1e-12
#define CHECK_REL(got, want) CHECK_NEAR((got), (want), fabs((double)(want)) * RTOL)

/* A result struct full of a bit pattern no computation produces, so a
 * field the code forgets to write cannot pass by being 0. */
static void poison(void *p, size_t n)
{
    memset(p, 0x5a, n);
}

/* ------------------------------------------------------ per request */

/* The worked example: submit 1000 ns, tokens at 3000, 4000, 6000 ns. */
static void test_request_basic(void)
{
    const int64_t em[] = {3000, 4000, 6000};
    tb_request_metrics m;
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 0, 3, em, 3, &m);
    CHECK(m.submit_ns == 1000);
    CHECK(m.done_ns == 6000);  /* done unknown (0): the last emission */
    CHECK(m.ttft_ns == 2000);  /* 3000 - 1000 */
    CHECK(m.e2e_ns == 5000);   /* 6000 - 1000 */
    CHECK(m.tpot_ns == 1500);  /* (5000 - 2000) / (3 - 1), exact */
    CHECK_REL(m.tps, 600000);  /* 3 / 5e-6 s */

    /* Reported done equal to the last emission: same figures. */
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 6000, 3, em, 3, &m);
    CHECK(m.done_ns == 6000);
    CHECK(m.e2e_ns == 5000);
    CHECK(m.tpot_ns == 1500);
    CHECK_REL(m.tps, 600000);
}

/* Emissions arriving out of order give the same figures as in order. */
static void test_request_unordered(void)
{
    const int64_t em[] = {4000, 6000, 3000};
    tb_request_metrics m;
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 0, 3, em, 3, &m);
    CHECK(m.ttft_ns == 2000); /* min is the last element, not the first */
    CHECK(m.done_ns == 6000); /* max is in the middle */
    CHECK(m.e2e_ns == 5000);
    CHECK(m.tpot_ns == 1500);
    CHECK_REL(m.tps, 600000);

    /* The largest first, the smallest last. */
    const int64_t em2[] = {6000, 4000, 3000};
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 0, 3, em2, 3, &m);
    CHECK(m.ttft_ns == 2000);
    CHECK(m.e2e_ns == 5000);
}

/* Completion reported after the last emission: E2E runs to done. */
static void test_request_done_later(void)
{
    const int64_t em[] = {3000, 4000, 6000};
    tb_request_metrics m;
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 7000, 3, em, 3, &m);
    CHECK(m.done_ns == 7000);
    CHECK(m.ttft_ns == 2000);
    CHECK(m.e2e_ns == 6000);  /* 7000 - 1000 */
    CHECK(m.tpot_ns == 2000); /* (6000 - 2000) / 2 */
    CHECK_REL(m.tps, 500000); /* 3 / 6e-6 */

    /* Completion reported before the last emission (clock skew in a
     * plugin): the emission wins, done = max(done, last). */
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 5000, 3, em, 3, &m);
    CHECK(m.done_ns == 6000);
    CHECK(m.e2e_ns == 5000);
    CHECK(m.tpot_ns == 1500);
}

/* No emissions (a non-streaming backend): everything arrives at done. */
static void test_request_no_emissions(void)
{
    tb_request_metrics m;
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 6000, 4, NULL, 0, &m);
    CHECK(m.done_ns == 6000);
    CHECK(m.ttft_ns == 5000); /* TTFT = E2E */
    CHECK(m.e2e_ns == 5000);
    CHECK(m.tpot_ns == 0);    /* (5000 - 5000) / 3 */
    CHECK_REL(m.tps, 800000); /* 4 / 5e-6 */
}

/* One output token: no inter-token time. */
static void test_request_single_token(void)
{
    const int64_t em[] = {1000};
    tb_request_metrics m;
    poison(&m, sizeof m);
    tb_request_metrics_compute(0, 0, 1, em, 1, &m);
    CHECK(m.ttft_ns == 1000);
    CHECK(m.e2e_ns == 1000);
    CHECK(isnan(m.tpot_ns)); /* (E2E - TTFT) / 0 is not a time */
    CHECK_REL(m.tps, 1e6);   /* 1 / 1e-6 */

    /* Zero tokens: TPOT NaN, rate 0. */
    poison(&m, sizeof m);
    tb_request_metrics_compute(0, 2000, 0, NULL, 0, &m);
    CHECK(isnan(m.tpot_ns));
    CHECK(m.tps == 0);
    CHECK(m.e2e_ns == 2000);
}

/* E2E of zero: no rate (not an infinity, not a division trap). */
static void test_request_zero_e2e(void)
{
    tb_request_metrics m;
    poison(&m, sizeof m);
    tb_request_metrics_compute(5000, 5000, 2, NULL, 0, &m);
    CHECK(m.ttft_ns == 0);
    CHECK(m.e2e_ns == 0);
    CHECK(m.tpot_ns == 0); /* (0 - 0) / 1 */
    CHECK(isnan(m.tps));

    /* An emission at the submit instant, done unknown: also E2E 0. */
    const int64_t em[] = {7000, 7000};
    poison(&m, sizeof m);
    tb_request_metrics_compute(7000, 0, 2, em, 2, &m);
    CHECK(m.e2e_ns == 0);
    CHECK(isnan(m.tps));
}

/* ---------------------------------------------------- per repetition */

/* Three requests with staggered submit and done times; the earliest
 * submit is request 1 and the latest done is request 0, so neither end of
 * the window sits at an end of the array. */
static void test_rep_basic(void)
{
    tb_request_metrics r[3];
    memset(r, 0, sizeof r);
    r[0].submit_ns = 1500, r[0].done_ns = 11000;
    r[1].submit_ns = 1000, r[1].done_ns = 8000;
    r[2].submit_ns = 2000, r[2].done_ns = 9000;
    const uint32_t n_out[] = {4, 5, 6};
    const int ok[] = {1, 1, 1};
    tb_rep_metrics m;
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 3, 2000, 5, &m);
    CHECK(m.wall_ns == 10000);           /* 11000 - 1000 */
    CHECK(m.output_tokens == 15);        /* 4 + 5 + 6 */
    CHECK_REL(m.aggregate_tps, 1.5e6);   /* 15 / 1e-5 s */
    CHECK_REL(m.decode_tps, 1.875e6);    /* 15 / (10000 - 2000) ns = 15 / 8e-6 */
    CHECK(m.tokens_per_forward == 3);    /* 15 / 5 */

    /* Request 2 failed: its 6 tokens do not count (the window still
     * spans the requests that define it: 1 and 0). */
    const int ok2[] = {1, 1, 0};
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok2, 3, 2000, 5, &m);
    CHECK(m.wall_ns == 10000);
    CHECK(m.output_tokens == 9);       /* 4 + 5 */
    CHECK_REL(m.aggregate_tps, 9e5);   /* 9 / 1e-5 */
    CHECK_REL(m.decode_tps, 1.125e6);  /* 9 / 8e-6 */
    CHECK(m.tokens_per_forward == 1.8); /* 9 / 5 */

    /* Every request failed: no tokens, rate 0 (not NaN: the wall ran). */
    const int none_ok[] = {0, 0, 0};
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, none_ok, 3, 2000, 5, &m);
    CHECK(m.output_tokens == 0);
    CHECK(m.aggregate_tps == 0);
    CHECK(m.tokens_per_forward == 0);
}

/* The roofline: worked by hand. An H200-like device, 800 TFLOP/s and
 * 4.28 TB/s. */
static void test_roofline(void)
{
    /* Memory-bound: an 8B bf16 decode step reads 16.06 GB and does
     * 16 GFLOP: the memory time 16.06e9 / 4.28e12 = 3.752 ms dominates;
     * at 5.44 ms per step that is 68.98%. */
    CHECK_REL(tb_roofline_pct(16e9, 16.06e9, 800e12, 4.28e12, 5440000), 100.0 * (16.06e9 / 4.28e12) / 5.44e-3);
    /* Compute-bound: 6.2 TFLOP over 16.1 GB in 13.0 ms: 7.75 ms of compute
     * against 3.76 ms of memory: 59.6%. */
    CHECK_REL(tb_roofline_pct(6.2e12, 16.1e9, 800e12, 4.28e12, 13000000), 100.0 * (6.2e12 / 800e12) / 13e-3);
    /* Exactly at the roofline: 100%. */
    CHECK_REL(tb_roofline_pct(8e11, 1e9, 800e12, 4.28e12, 1000000), 100.0);
    /* Any missing figure: NaN, never 0. */
    CHECK(isnan(tb_roofline_pct(0, 1e9, 800e12, 4.28e12, 1000000)));
    CHECK(isnan(tb_roofline_pct(1e9, 0, 800e12, 4.28e12, 1000000)));
    CHECK(isnan(tb_roofline_pct(1e9, 1e9, 0, 4.28e12, 1000000)));
    CHECK(isnan(tb_roofline_pct(1e9, 1e9, 800e12, -1, 1000000)));
    CHECK(isnan(tb_roofline_pct(1e9, 1e9, 800e12, 4.28e12, 0)));
    CHECK(isnan(tb_roofline_pct(NAN, 1e9, 800e12, 4.28e12, 1000000)));
    CHECK(isnan(tb_roofline_pct(INFINITY, 1e9, 800e12, 4.28e12, 1000000)));
    CHECK(isnan(tb_roofline_pct(1e9, 1e9, INFINITY, 4.28e12, 1000000)));
}

static void test_rep_unknowns(void)
{
    tb_request_metrics r[1];
    memset(r, 0, sizeof r);
    r[0].submit_ns = 1000, r[0].done_ns = 5000; /* wall 4000 */
    const uint32_t n_out[] = {8};
    const int ok[] = {1};
    tb_rep_metrics m;

    /* Prefill unknown (-1): no decode rate. */
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, -1, 4, &m);
    CHECK(m.wall_ns == 4000);
    CHECK_REL(m.aggregate_tps, 2e6); /* 8 / 4e-6 */
    CHECK(isnan(m.decode_tps));
    CHECK(m.tokens_per_forward == 2);

    /* Prefill equal to, then longer than, the wall: no decode time left. */
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, 4000, 4, &m);
    CHECK(isnan(m.decode_tps));
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, 4001, 4, &m);
    CHECK(isnan(m.decode_tps));
    /* One ns short of the wall: 8 tokens / 1 ns. */
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, 3999, 4, &m);
    CHECK_REL(m.decode_tps, 8e9);
    /* Prefill 0 is a measurement: decode rate = aggregate rate. */
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, 0, 4, &m);
    CHECK_REL(m.decode_tps, 2e6);

    /* No forward passes reported: no tokens per forward. */
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, 1000, 0, &m);
    CHECK(isnan(m.tokens_per_forward));
    CHECK_REL(m.decode_tps, 8.0 / 3e-6); /* 8 / (4000 - 1000) ns */
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, 1000, -1, &m);
    CHECK(isnan(m.tokens_per_forward));

    /* A zero-length window: no rates at all. */
    r[0].done_ns = 1000;
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 1, 0, 4, &m);
    CHECK(m.wall_ns == 0);
    CHECK(m.output_tokens == 8);
    CHECK(isnan(m.aggregate_tps));
    CHECK(isnan(m.decode_tps));
    CHECK(m.tokens_per_forward == 2);
}

/* From tb_request_metrics_compute to tb_rep_metrics_compute, as the
 * runner chains them: done times resolved from emissions feed the wall. */
static void test_chain(void)
{
    tb_request_metrics r[2];
    const int64_t em0[] = {3000, 4000, 6000};
    const int64_t em1[] = {2500, 9000};
    tb_request_metrics_compute(1000, 0, 3, em0, 3, &r[0]);
    tb_request_metrics_compute(2000, 0, 2, em1, 2, &r[1]); /* done 9000 */
    const uint32_t n_out[] = {3, 2};
    const int ok[] = {1, 1};
    tb_rep_metrics m;
    poison(&m, sizeof m);
    tb_rep_metrics_compute(r, n_out, ok, 2, 500, 2, &m);
    CHECK(m.wall_ns == 8000);           /* 9000 - 1000 */
    CHECK(m.output_tokens == 5);
    CHECK_REL(m.aggregate_tps, 625000); /* 5 / 8e-6 */
    CHECK_REL(m.decode_tps, 5 / 7.5e-6);
    CHECK(m.tokens_per_forward == 2.5);
}

/* ----------------------------------- independent cross-check (random) */

static uint64_t rng_state = UINT64_C(0x9e3779b97f4a7c15);

static uint64_t rng_next(void) /* splitmix64 */
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static int64_t rng_range(int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The definitions of docs/METRICS.md written out plainly: sort the
 * emission times; the first is the first token, the last (or a later
 * reported done) the end. Rates as tokens * 1e9 / ns. */
typedef struct ref_req {
    int64_t done, ttft, e2e;
    double tpot, tps;
} ref_req;

static ref_req ref_request(int64_t submit, int64_t done, uint32_t n_out, const int64_t *em, size_t n)
{
    ref_req r;
    int64_t first, last;
    if (n == 0) {
        first = last = done;
    } else {
        int64_t *s = malloc(n * sizeof *s);
        if (!s)
            abort();
        memcpy(s, em, n * sizeof *s);
        qsort(s, n, sizeof *s, cmp_i64);
        first = s[0];
        last = s[n - 1];
        free(s);
    }
    r.done = last;
    if (done > r.done)
        r.done = done;
    r.ttft = first - submit;
    r.e2e = r.done - submit;
    r.tpot = n_out > 1 ? (double)(r.e2e - r.ttft) / (n_out - 1.0) : NAN;
    r.tps = r.e2e > 0 ? (double)n_out * 1e9 / (double)r.e2e : NAN;
    return r;
}

/* Same-or-both-NaN within a relative tolerance. */
static int close_or_nan(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return fabs(a - b) <= fabs(b) * 1e-12;
}

static void test_random_requests(void)
{
    enum { ROUNDS = 5000, MAXEM = 40 };
    int bad = 0;
    for (int k = 0; k < ROUNDS; k++) {
        int64_t em[MAXEM];
        size_t n = (size_t)rng_range(0, MAXEM);
        int64_t submit = rng_range(0, 1000000);
        for (size_t i = 0; i < n; i++)
            em[i] = submit + rng_range(0, 5000000); /* any order */
        /* done: unknown, before the emissions end, or after them */
        int64_t done;
        switch (rng_range(0, 2)) {
        case 0: done = 0; break;
        case 1: done = submit + rng_range(0, 2000000); break;
        default: done = submit + rng_range(0, 9000000); break;
        }
        if (n == 0 && done == 0)
            done = submit + rng_range(0, 100); /* a non-streaming request has a done */
        uint32_t n_out = (uint32_t)rng_range(0, 64);
        int64_t em_copy[MAXEM];
        memcpy(em_copy, em, sizeof em);

        tb_request_metrics m;
        poison(&m, sizeof m);
        tb_request_metrics_compute(submit, done, n_out, em, n, &m);
        ref_req r = ref_request(submit, done, n_out, em, n);
        int ok = m.submit_ns == submit && m.done_ns == r.done && m.ttft_ns == r.ttft &&
                 m.e2e_ns == r.e2e && close_or_nan(m.tpot_ns, r.tpot) && close_or_nan(m.tps, r.tps) &&
                 memcmp(em, em_copy, n * sizeof *em) == 0; /* input untouched */
        if (!ok && bad++ < 5)
            fprintf(stderr, "random request %d: n_em %zu submit %lld done %lld n_out %u: got ttft %lld e2e %lld "
                            "tpot %g tps %g, want ttft %lld e2e %lld tpot %g tps %g\n",
                    k, n, (long long)submit, (long long)done, n_out, (long long)m.ttft_ns,
                    (long long)m.e2e_ns, m.tpot_ns, m.tps, (long long)r.ttft, (long long)r.e2e, r.tpot, r.tps);
    }
    CHECK(bad == 0);
}

static void test_random_reps(void)
{
    enum { ROUNDS = 2000, MAXREQ = 16 };
    int bad = 0;
    for (int k = 0; k < ROUNDS; k++) {
        size_t n = (size_t)rng_range(1, MAXREQ);
        tb_request_metrics r[MAXREQ];
        uint32_t n_out[MAXREQ];
        int ok[MAXREQ];
        for (size_t i = 0; i < n; i++) {
            r[i].submit_ns = rng_range(0, 1000000);
            r[i].done_ns = r[i].submit_ns + rng_range(0, 3000000);
            n_out[i] = (uint32_t)rng_range(0, 128);
            ok[i] = rng_range(0, 4) != 0;
        }
        int64_t prefill = rng_range(-1, 2000000);
        int64_t fwd = rng_range(0, 50);

        /* Reference: sort submits and dones separately, take the ends. */
        int64_t subs[MAXREQ], dones[MAXREQ];
        uint64_t tok = 0;
        for (size_t i = 0; i < n; i++) {
            subs[i] = r[i].submit_ns;
            dones[i] = r[i].done_ns;
            if (ok[i])
                tok += n_out[i];
        }
        qsort(subs, n, sizeof *subs, cmp_i64);
        qsort(dones, n, sizeof *dones, cmp_i64);
        int64_t wall = dones[n - 1] - subs[0];
        double agg = wall > 0 ? (double)tok * 1e9 / (double)wall : NAN;
        double dec = prefill >= 0 && wall - prefill > 0 ? (double)tok * 1e9 / (double)(wall - prefill) : NAN;
        double tpf = fwd > 0 ? (double)tok / (double)fwd : NAN;

        tb_rep_metrics m;
        poison(&m, sizeof m);
        tb_rep_metrics_compute(r, n_out, ok, n, prefill, fwd, &m);
        int good = m.wall_ns == wall && m.output_tokens == tok && close_or_nan(m.aggregate_tps, agg) &&
                   close_or_nan(m.decode_tps, dec) && close_or_nan(m.tokens_per_forward, tpf);
        if (!good && bad++ < 5)
            fprintf(stderr, "random rep %d: got wall %lld tok %llu agg %g dec %g tpf %g, want %lld %llu %g %g %g\n",
                    k, (long long)m.wall_ns, (unsigned long long)m.output_tokens, m.aggregate_tps, m.decode_tps,
                    m.tokens_per_forward, (long long)wall, (unsigned long long)tok, agg, dec, tpf);
    }
    CHECK(bad == 0);
}

int main(void)
{
    test_request_basic();
    test_request_unordered();
    test_request_done_later();
    test_request_no_emissions();
    test_request_single_token();
    test_request_zero_e2e();
    test_rep_basic();
    test_rep_unknowns();
    test_roofline();
    test_chain();
    test_random_requests();
    test_random_reps();
    return check_done();
}
