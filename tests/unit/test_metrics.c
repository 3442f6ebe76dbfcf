/* test_metrics.c — measure/metrics.c against values worked out by hand,
 * and against a second, deliberately naive implementation (sort the
 * emission times, take the first and the last) on random inputs; and the
 * registry against what must agree with it: docs/METRICS.md's metric
 * tables and the summary view of a fresh database. */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include <stdio.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include <unistd.h>

#include "check.h"
#include "record.h"
#include "store.h"
#include "tokbench/backend.h"
#include "util.h"

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
    CHECK(isnan(m.tpot_ns));  /* not streamed: no time between tokens seen */
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
    CHECK(isnan(m.tpot_ns)); /* not streamed */
    CHECK(isnan(m.tps));

    /* An emission at the submit instant, done unknown: also E2E 0. */
    const int64_t em[] = {7000, 7000};
    poison(&m, sizeof m);
    tb_request_metrics_compute(7000, 0, 2, em, 2, &m);
    CHECK(m.e2e_ns == 0);
    CHECK(isnan(m.tps));
    CHECK(isnan(m.tpot_ns)); /* both tokens at one instant: not streamed */

    /* One emission of every token, done reported later: still not
     * streamed (no time between tokens was seen) */
    const int64_t one[] = {3000};
    poison(&m, sizeof m);
    tb_request_metrics_compute(1000, 9000, 5, one, 1, &m);
    CHECK(m.ttft_ns == 2000 && m.e2e_ns == 8000);
    CHECK(isnan(m.tpot_ns));
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
    r.tpot = n_out > 1 && n > 1 && last > first ? (double)(r.e2e - r.ttft) / (n_out - 1.0) : NAN;
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

/* ------------------------------------------------------ one case */

/* A case of three calls of two requests (docs/METRICS.md's claims, one
 * check each): call 0 is a warm-up whose every figure differs from the
 * measured ones; call 1 has two good requests; in call 2 request 1 fails
 * with class http_5xx. Good requests: submit at the call's base, one
 * token at +1000, +2000 and +4000 ns (TTFT 1000, E2E 4000, TPOT 1500,
 * gaps 1000 and 2000). The warm-up's tokens come at +50000, +60000,
 * +70000. */
typedef struct fake_case {
    tb_call_view v[3];
    tb_raw_request req[3][2];
    tb_emission em[3][6];
} fake_case;

static void fake_case_build(fake_case *f)
{
    memset(f, 0, sizeof *f);
    for (int k = 0; k < 3; k++) {
        int64_t base = (int64_t)(k + 1) * 1000000000LL;
        tb_raw_call *c = &f->v[k].call;
        c->is_warmup = k == 0;
        c->n_requests = 2;
        c->t_call_ns = base;
        c->t_return_ns = base + 100000;
        c->prefill_ns = -1;
        c->decode_ns = -1;
        c->peak_device_bytes = 123 << 20;
        c->energy_mj = 456;
        c->runner_ns = 7000;
        int64_t at[3] = {1000, 2000, 4000};
        if (k == 0)
            at[0] = 50000, at[1] = 60000, at[2] = 70000;
        uint32_t ne = 0;
        for (uint32_t r = 0; r < 2; r++) {
            tb_raw_request *q = &f->req[k][r];
            q->t_submit_ns = base;
            q->prompt_idx = -1;
            q->recount = 3;
            q->answer_tokens = r == 0 ? 2 : TB_UNKNOWN_COUNT;
            q->steps_done = r == 0 ? 5 : 0;
            if (k == 2 && r == 1) { /* failed: no tokens, done at +3000 */
                q->status = TB_ERR;
                q->t_done_ns = base + 3000;
                snprintf(q->error, sizeof q->error, "http_5xx: HTTP 503");
                continue;
            }
            q->status = TB_OK;
            q->n_output_tokens = 3;
            for (int e = 0; e < 3; e++)
                f->em[k][ne++] = (tb_emission){.t_ns = base + at[e], .request = r, .n_tokens = 1};
        }
        c->n_emissions = ne;
        f->v[k].req = f->req[k];
        f->v[k].em = f->em[k];
    }
}

static const tb_stats *metric_of(const tb_case_record *rec, const char *name)
{
    for (size_t i = 0; i < rec->n_metrics; i++)
        if (strcmp(rec->metrics[i].name, name) == 0)
            return &rec->metrics[i].st;
    return NULL;
}

/* client_busy: a percentage per measured call, warm-ups and calls that
 * did not report it (0) left out. And emissions interleaved across
 * requests are each request's own, in order. */
static void test_case_client_busy(void)
{
    fake_case f;
    fake_case_build(&f);
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    const tb_stats *st;
    CHECK((st = metric_of(&rec, "client_busy")) && st->n == 0);
    char *json_before = strdup(rec.samples[1].requests[1].emissions_json);
    tb_case_record_free(&rec);
    f.v[0].call.client_busy = 0.99; /* warm-up */
    f.v[1].call.client_busy = 0.5;
    f.v[2].call.client_busy = 0.7;
    /* the same emissions of call 1 interleaved across its two requests
     * (r0 e0, r1 e0, r0 e1, ...), as several event loops deliver them */
    tb_emission *em = f.em[1], grouped[6];
    CHECK(f.v[1].call.n_emissions == 6);
    memcpy(grouped, em, sizeof grouped);
    for (int e = 0; e < 3; e++) {
        em[2 * e] = grouped[e];
        em[2 * e + 1] = grouped[3 + e];
    }
    rec = (tb_case_record){0};
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK((st = metric_of(&rec, "client_busy")) && st->n == 2);
    CHECK_REL(st->median, 60.0);
    CHECK_STR(rec.samples[1].requests[1].emissions_json, json_before);
    free(json_before);
    tb_case_record_free(&rec);
}

/* Mixture of experts (docs/METRICS.md): experts_per_token = the call's
 * expert_reads / moe_tokens; active_bytes_per_token = the call's bytes /
 * its output tokens (every request's); per measured call, none when not
 * reported. */
static void test_case_moe(void)
{
    fake_case f;
    fake_case_build(&f);
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    const tb_stats *st;
    CHECK((st = metric_of(&rec, "experts_per_token")) && st->n == 0);
    CHECK((st = metric_of(&rec, "active_bytes_per_token")) && st->n == 0);
    tb_case_record_free(&rec);
    /* call 1: 2 requests x 3 tokens; 48 MoE layers x 6 rows read 8 experts
     * each at one row, so 48 x 6 x 8 reads over 48 x 6 rows: 8 a token.
     * call 2: one request of 3 tokens (the other failed), the experts shared
     * between rows: 96 reads over 48 rows, 2 a token */
    f.v[0].call.expert_reads = 1e9, f.v[0].call.moe_tokens = 1; /* warm-up: left out */
    f.v[1].call.expert_reads = 48 * 6 * 8, f.v[1].call.moe_tokens = 48 * 6;
    f.v[2].call.expert_reads = 96, f.v[2].call.moe_tokens = 48;
    f.v[1].call.bytes = 6 * 7.0e9;
    f.v[2].call.bytes = 3 * 5.0e9;
    rec = (tb_case_record){0};
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK((st = metric_of(&rec, "experts_per_token")) && st->n == 2);
    CHECK(st && st->max == 8 && st->min == 2);
    CHECK((st = metric_of(&rec, "active_bytes_per_token")) && st->n == 2);
    CHECK(st && st->max == 7.0e9 && st->min == 5.0e9);
    tb_case_record_free(&rec);
}

/* Speculative decoding (docs/METRICS.md, "Speculative decoding"): the
 * formulas on hand-worked counts, the bounds, and a case's rows. */
static tb_spec_counts spec_of(uint32_t k, const uint32_t *accepted, uint32_t n_verif)
{
    /* n_verif verifications of k draft tokens, the j-th accepting
     * accepted[j] (a prefix of its draft) */
    tb_spec_counts c = {.draft_len = k};
    for (uint32_t j = 0; j < n_verif; j++) {
        c.verifications++;
        c.drafted += k;
        c.accepted += accepted[j];
        for (uint32_t i = 0; i < k; i++) {
            c.drafted_at[i]++;
            c.accepted_at[i] += i < accepted[j];
        }
    }
    return c;
}

static void test_spec_formulas(void)
{
    /* 4 verifications of 4 drafted, accepting 4, 0, 3, 1: 8 of 16
     * accepted; they yield 5 + 1 + 4 + 2 = 12 tokens, 3 a verification */
    const uint32_t acc[] = {4, 0, 3, 1};
    tb_spec_counts c = spec_of(4, acc, 4);
    CHECK(c.accepted == 8 && c.drafted == 16);
    CHECK_REL(tb_acceptance_length(&c), 3.0);
    CHECK_REL(tb_acceptance_rate(&c), 0.5);
    /* position 1 accepted by 3 of 4 (4, 3, 1), 2 by 2, 3 by 2, 4 by 1 */
    CHECK_REL(tb_acceptance_at(&c, 0), 0.75);
    CHECK_REL(tb_acceptance_at(&c, 1), 0.5);
    CHECK_REL(tb_acceptance_at(&c, 2), 0.5);
    CHECK_REL(tb_acceptance_at(&c, 3), 0.25);
    CHECK(isnan(tb_acceptance_at(&c, 4)) && isnan(tb_acceptance_at(&c, TB_SPEC_MAX_DRAFT + 3)));
    /* none accepted: 1 token a verification (the bonus), rate 0 */
    const uint32_t none[] = {0, 0};
    tb_spec_counts z = spec_of(2, none, 2);
    CHECK_REL(tb_acceptance_length(&z), 1.0);
    CHECK(tb_acceptance_rate(&z) == 0);
    /* not speculative: undefined, not 0 */
    tb_spec_counts zero = {0};
    CHECK(isnan(tb_acceptance_length(&zero)) && isnan(tb_acceptance_rate(&zero)) && !tb_spec_any(&zero));
    /* accepted counts without drafted ones (a server's): a length, no rate */
    tb_spec_counts srv = {.verifications = 10, .accepted = 25};
    CHECK_REL(tb_acceptance_length(&srv), 3.5);
    CHECK(isnan(tb_acceptance_rate(&srv)) && tb_spec_any(&srv));
    CHECK_REL(tb_draft_time_share(250, 1000), 0.25);
    CHECK(isnan(tb_draft_time_share(0, 1000)) && isnan(tb_draft_time_share(10, -1)));
    CHECK_REL(tb_target_forwards_per_token(5, 24), 5.0 / 24);
    CHECK(isnan(tb_target_forwards_per_token(0, 24)) && isnan(tb_target_forwards_per_token(5, 0)));

    /* the bounds: each impossible count named */
    char why[120];
    CHECK(tb_spec_check(&c, why, sizeof why) == NULL);
    CHECK(tb_spec_check(&zero, why, sizeof why) == NULL);
    CHECK(tb_spec_check(&srv, why, sizeof why) == NULL);
    tb_spec_counts b = c;
    b.accepted = 17;
    CHECK(tb_spec_check(&b, why, sizeof why) && strcmp(why, "accepted 17 > drafted 16") == 0);
    b = c;
    b.accepted_at[1] = 4; /* as many as drafted: possible */
    CHECK(tb_spec_check(&b, why, sizeof why) == NULL);
    b.accepted_at[1] = 5;
    CHECK(tb_spec_check(&b, why, sizeof why) && strcmp(why, "accepted_at[1] 5 > drafted_at[1] 4") == 0);
    b = c;
    b.drafted_at[2] = 5, b.accepted_at[2] = 5;
    CHECK(tb_spec_check(&b, why, sizeof why) && strcmp(why, "drafted_at[2] 5 > verifications 4") == 0);
    b = c;
    b.draft_len = TB_SPEC_MAX_DRAFT + 1;
    CHECK(tb_spec_check(&b, why, sizeof why) && strcmp(why, "draft_len 65 > 64") == 0);
    b = c;
    b.draft_len = 3; /* position 4 drafted past it */
    CHECK(tb_spec_check(&b, why, sizeof why) &&
          strcmp(why, "drafted_at[3] 4, accepted_at[3] 1 past draft_len 3") == 0);
    b = (tb_spec_counts){.accepted = 1};
    CHECK(tb_spec_check(&b, why, sizeof why) && strcmp(why, "0 drafted, 1 accepted in 0 verifications") == 0);
}

/* A case's speculative rows: per request over the measured good ones,
 * per call over the measured speculative ones; none in a plain case. */
static void test_case_spec(void)
{
    fake_case f;
    fake_case_build(&f);
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    const tb_stats *st;
    CHECK((st = metric_of(&rec, "acceptance_length")) && st->n == 0);
    CHECK((st = metric_of(&rec, "acceptance_rate")) && st->n == 0);
    CHECK((st = metric_of(&rec, "draft_time_share")) && st->n == 0);
    CHECK((st = metric_of(&rec, "target_forwards_per_token")) && st->n == 0);
    CHECK(metric_of(&rec, "acceptance_at_1") == NULL);
    tb_case_record_free(&rec);

    const uint32_t a40[] = {4, 0, 3, 1}, a2[] = {2, 2, 2}, junk[] = {1, 1};
    f.req[0][0].spec = spec_of(2, junk, 2); /* warm-up: left out */
    f.req[1][0].spec = spec_of(4, a40, 4);  /* length 3, rate 0.5 */
    f.req[1][1].spec = spec_of(3, a2, 3);   /* length 3, rate 2/3, 3 positions */
    f.req[2][0].spec = spec_of(4, a40, 2);  /* 4, 0: length 3, rate 0.5 */
    f.req[2][1].spec = spec_of(4, junk, 2); /* failed: left out */
    f.v[0].call.draft_ns = 90, f.v[0].call.decode_ns = 100;
    f.v[1].call.draft_ns = 100, f.v[1].call.decode_ns = 400;
    f.v[2].call.decode_ns = 400; /* no draft time reported: no share */
    f.v[1].call.forward_passes = 1 + 4; /* 6 tokens */
    f.v[2].call.forward_passes = 1 + 2; /* 3 tokens (its other request failed) */
    rec = (tb_case_record){0};
    tb_case_metrics(f.v, 3, &o, &rec);
    /* pooled over the three measured good requests: 9 verifications, 33
     * drafted, 18 accepted; position 1 drafted 9 times, accepted 3 + 3 +
     * 1; position 4 drafted 4 + 2 times (the 3-token drafts have none),
     * accepted 1 + 1 */
    CHECK((st = metric_of(&rec, "acceptance_length")) && st->n == 1 && st->median == 3);
    CHECK((st = metric_of(&rec, "acceptance_rate")) && st->n == 1);
    CHECK_REL(st->median, 18.0 / 33);
    CHECK((st = metric_of(&rec, "acceptance_at_1")) && st->n == 1);
    CHECK_REL(st->median, 7.0 / 9);
    CHECK((st = metric_of(&rec, "acceptance_at_4")) && st->n == 1);
    CHECK_REL(st->median, 2.0 / 6);
    CHECK(metric_of(&rec, "acceptance_at_5") == NULL);
    CHECK((st = metric_of(&rec, "draft_time_share")) && st->n == 1 && st->median == 0.25);
    CHECK((st = metric_of(&rec, "target_forwards_per_token")) && st->n == 2);
    CHECK_REL(st->max, 1.0);     /* 3 forwards / 3 tokens */
    CHECK_REL(st->min, 5.0 / 6); /* 5 forwards / 6 tokens */
    for (size_t i = 0; i < rec.n_metrics; i++)
        if (strncmp(rec.metrics[i].name, "acceptance_at_", 14) == 0)
            CHECK_STR(rec.metrics[i].unit, "fraction");
    CHECK(rec.samples[1].draft_ns == 100 && rec.samples[1].requests[1].spec.draft_len == 3);
    tb_case_record_free(&rec);
}

/* vLLM's counters (tb_case_spec_counters): their growth over the case's
 * scrapes, summed over label sets, gives the case's figures, one value
 * each; per-request counts win; no counters, nothing. */
static void test_case_spec_counters(void)
{
    tb_case_record rec = {0};
    tb_case_record_add_metric(&rec, "acceptance_length", "tokens");
    tb_case_record_add_metric(&rec, "acceptance_rate", "fraction");
    tb_metric_record *len = &rec.metrics[0], *rate = &rec.metrics[1]; /* the array grows: after the adds */
    tb_case_spec_counters(&rec, 1); /* no telemetry */
    CHECK(len->st.n == 0 && rate->st.n == 0 && rec.n_metrics == 2);
    tb_telemetry_series ts[] = {
        {"u", "vllm:spec_decode_num_drafts_total{engine=\"0\"}"},
        {"u", "vllm:spec_decode_num_drafts_total{engine=\"1\"}"},
        {"u", "vllm:spec_decode_num_draft_tokens_total{engine=\"0\"}"},
        {"u", "vllm:spec_decode_num_accepted_tokens{engine=\"0\"}"}, /* without _total */
        {"u", "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",position=\"0\"}"},
        {"u", "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",position=\"1\"}"},
        {"u", "vllm:spec_decode_num_drafts_totally{engine=\"0\"}"}, /* not a counter of ours */
    };
    /* engine 0: drafts 100 -> 103, engine 1: 50 -> 51 (4 drafts); 16
     * draft tokens; 8 accepted; position 0 accepted 3 times, 1 twice */
    tb_telemetry_point tp[] = {
        {0, 1, 100}, {1, 1, 50}, {2, 1, 400}, {3, 1, 200}, {4, 1, 75}, {5, 1, 50}, {6, 1, 0},
        {0, 2, 101}, {6, 2, 1e6},
        {0, 3, 103}, {1, 3, 51}, {2, 3, 416}, {3, 3, 208}, {4, 3, 78}, {5, 3, 52}, {6, 3, 1e9},
    };
    rec.tseries = ts;
    rec.n_tseries = sizeof ts / sizeof *ts;
    rec.tpoints = tp;
    rec.n_tpoints = sizeof tp / sizeof *tp;
    tb_case_spec_counters(&rec, 1);
    len = &rec.metrics[0], rate = &rec.metrics[1];
    CHECK(len->st.n == 1 && rate->st.n == 1);
    CHECK_REL(len->st.mean, 3.0);  /* (8 + 4) / 4 */
    CHECK_REL(rate->st.mean, 0.5); /* 8 / 16 */
    const tb_stats *st;
    CHECK((st = metric_of(&rec, "acceptance_at_1")) && st->n == 1);
    CHECK_REL(st->mean, 0.75);
    CHECK((st = metric_of(&rec, "acceptance_at_2")) && st->n == 1);
    CHECK_REL(st->mean, 0.5);
    CHECK(metric_of(&rec, "acceptance_at_3") == NULL);
    rec.tseries = NULL, rec.tpoints = NULL, rec.n_tseries = rec.n_tpoints = 0;
    tb_case_record_free(&rec);
}

static void test_case_measured_only(void)
{
    fake_case f;
    fake_case_build(&f);
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK(rec.n_samples == 3);
    CHECK(rec.samples[0].warmup == 1 && rec.samples[1].warmup == 0 && rec.samples[2].warmup == 0);
    /* Warm-ups are stored, and excluded from every statistic: per request
     * (3 good measured requests), per gap (2 each), per call (2 calls). */
    const tb_stats *st;
    CHECK((st = metric_of(&rec, "req_tps")) && st->n == 3 && st->min == st->max);
    CHECK_REL(st->median, 750000); /* 3 tokens / 4000 ns */
    CHECK((st = metric_of(&rec, "ttft_ms")) && st->n == 3 && st->max == 0.001);
    CHECK((st = metric_of(&rec, "tpot_ms")) && st->n == 3 && st->max == 0.0015);
    CHECK((st = metric_of(&rec, "e2e_ms")) && st->n == 3 && st->max == 0.004);
    CHECK((st = metric_of(&rec, "itl_ms")) && st->n == 6 && st->max == 0.002 && st->min == 0.001);
    CHECK(st && isnan(st->ci_lo) && isnan(st->ci_hi)); /* pooled gaps: no bootstrap CI */
    CHECK((st = metric_of(&rec, "steps_done")) && st->n == 2 && st->median == 5); /* 0 = not reported */
    CHECK((st = metric_of(&rec, "answer_tokens")) && st->n == 2 && st->median == 2); /* unknown left out */
    /* Per call: wall = last done - first submit; agg = good tokens / wall. */
    CHECK((st = metric_of(&rec, "wall_ms")) && st->n == 2 && st->min == 0.004 && st->max == 0.004);
    CHECK((st = metric_of(&rec, "agg_tps")) && st->n == 2);
    CHECK_REL(st->max, 1.5e6);  /* 6 tokens / 4000 ns */
    CHECK_REL(st->min, 7.5e5);  /* 3 tokens (the failed request's count nothing) / 4000 ns */
    CHECK(!isnan(st->ci_lo));
    CHECK((st = metric_of(&rec, "runner_us")) && st->n == 2 && st->median == 7);
    /* Not reported: no value, never 0. */
    CHECK((st = metric_of(&rec, "prefill_ms")) && st->n == 0);
    CHECK((st = metric_of(&rec, "decode_tps")) && st->n == 0);
    CHECK((st = metric_of(&rec, "forward_passes")) && st->n == 0);
    CHECK((st = metric_of(&rec, "tokens_per_forward")) && st->n == 0);
    CHECK((st = metric_of(&rec, "roofline_pct")) && st->n == 0);
    /* Serving figures of the measured calls. */
    CHECK((st = metric_of(&rec, "req_throughput")) && st->n == 2);
    CHECK_REL(st->max, 5e5);    /* 2 good / 4000 ns */
    CHECK_REL(st->min, 2.5e5);
    CHECK((st = metric_of(&rec, "error_rate")) && st->n == 2 && st->min == 0 && st->max == 0.5);
    CHECK((st = metric_of(&rec, "goodput")) && st->n == 0); /* no limits set: no values */
    CHECK((st = metric_of(&rec, "errors_http_5xx")) && st->n == 2 && st->min == 0 && st->max == 1);
    CHECK(metric_of(&rec, "errors_connect") == NULL); /* a row only for classes that occurred */
    CHECK(metric_of(&rec, "errors_other") == NULL);
    /* The failed request keeps its error; it counts in no sample set. */
    const tb_request_record *bad = &rec.samples[2].requests[1];
    CHECK(bad->status == TB_ERR && bad->error && strcmp(bad->error, "http_5xx: HTTP 503") == 0);
    CHECK(rec.samples[1].requests[0].error == NULL);
    CHECK_STR(rec.samples[1].requests[0].emissions_json, "[[0.001,1],[0.002,1],[0.004,1]]");
    /* Every row is a registry metric with the registry's unit, and its n
     * counts what the registry says it counts (the labels "median of N
     * calls" / "N requests" read it): 2 measured calls, 3 good requests,
     * 6 gaps; steps_done and answer_tokens only of the requests that
     * report them (2). */
    for (size_t i = 0; i < rec.n_metrics; i++) {
        const tb_metric_def *d = tb_metric_find(rec.metrics[i].name);
        CHECK(d && strcmp(d->unit, rec.metrics[i].unit) == 0);
        if (!d)
            continue;
        size_t want = !strcmp(d->samples, "calls") ? 2 : !strcmp(d->samples, "requests") ? 3
                    : !strcmp(d->samples, "gaps") ? 6 : !strcmp(d->samples, "chunks") ? 9 : 0;
        if (!strcmp(d->name, "steps_done") || !strcmp(d->name, "answer_tokens"))
            want = 2;
        size_t n = rec.metrics[i].st.n;
        if (n != 0 && n != want)
            fprintf(stderr, "metric %s: n %zu, but its samples are %s (%zu)\n", d->name, n, d->samples, want);
        CHECK(n == 0 || n == want);
    }
    tb_case_record_free(&rec);
}

/* The output-length check (docs/METRICS.md, "Output-length check"): a
 * count of returned ids is held to their number, not to how the
 * tokenizer re-counts their text; a count of text alone is held to the
 * text's re-count; a failed request is not checked. The figures of the
 * quick suite's diffusion rows: 16 ids (answer + EOS padding) that
 * re-tokenize to 14..23. */
static void test_count_mismatch(void)
{
    tb_raw_request q = {.status = TB_OK, .n_output_tokens = 16, .has_ids = 1, .n_ids = 16, .recount = 14};
    CHECK(tb_count_mismatch(&q) == TB_COUNT_HELD);
    q.recount = 23; /* byte pieces: more tokens again */
    CHECK(tb_count_mismatch(&q) == TB_COUNT_HELD);
    q.recount = -1; /* no tokenizer: the ids are still counted */
    CHECK(tb_count_mismatch(&q) == TB_COUNT_HELD);
    q.n_output_tokens = 17; /* a token counted that was never returned */
    CHECK(tb_count_mismatch(&q) == TB_COUNT_NOT_IDS);
    q.recount = 17;         /* whatever the text re-counts to */
    CHECK(tb_count_mismatch(&q) == TB_COUNT_NOT_IDS);
    q.n_output_tokens = 15;
    CHECK(tb_count_mismatch(&q) == TB_COUNT_NOT_IDS);
    q.status = TB_ERR; /* failed: in no rate */
    CHECK(tb_count_mismatch(&q) == TB_COUNT_HELD);
    /* text alone (a server's usage): its re-count is the check */
    q = (tb_raw_request){.status = TB_OK, .n_output_tokens = 16, .recount = 16};
    CHECK(tb_count_mismatch(&q) == TB_COUNT_HELD);
    q.recount = 14;
    CHECK(tb_count_mismatch(&q) == TB_COUNT_NOT_TEXT);
    q.recount = 18;
    CHECK(tb_count_mismatch(&q) == TB_COUNT_NOT_TEXT);
    q.recount = -1; /* no tokenizer: nothing to hold it to */
    CHECK(tb_count_mismatch(&q) == TB_COUNT_HELD);

    /* Into the stored record: output_ids (-1: none) and the verdict, for
     * each request of a case; warm-ups alike. */
    fake_case f;
    fake_case_build(&f);
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < 2; r++)
            f.req[k][r].has_ids = 1, f.req[k][r].n_ids = 3, f.req[k][r].recount = 5;
    f.req[1][1].n_ids = 2;                               /* 3 counted of 2 ids */
    f.req[2][0].has_ids = 0, f.req[2][0].n_ids = 0;      /* text: 3 counted, 5 re-counted */
    f.req[0][0].has_ids = 0, f.req[0][0].recount = 3;    /* text: 3 of 3 */
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING | TB_CAP_TOKENIZER, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK(rec.n_samples == 3);
    if (rec.n_samples == 3) {
        const tb_request_record *w = rec.samples[0].requests, *a = rec.samples[1].requests,
                                *b = rec.samples[2].requests;
        CHECK(w[0].output_ids == -1 && w[0].count_mismatch == TB_COUNT_HELD);
        CHECK(w[1].output_ids == 3 && w[1].count_mismatch == TB_COUNT_HELD && w[1].recount == 5);
        CHECK(a[0].output_ids == 3 && a[0].count_mismatch == TB_COUNT_HELD);
        CHECK(a[1].output_ids == 2 && a[1].count_mismatch == TB_COUNT_NOT_IDS);
        CHECK(b[0].output_ids == -1 && b[0].count_mismatch == TB_COUNT_NOT_TEXT && b[0].recount == 5);
        CHECK(b[1].status == TB_ERR && b[1].count_mismatch == TB_COUNT_HELD); /* failed */
    }
    tb_case_record_free(&rec);
}

/* Calls already measured (a join of stored shards): each request's
 * figures are the view's `measured` ones, not recomputed from the
 * emissions; the gaps still come from the emissions, and the call's
 * window from the measured submit and done times. */
static void test_case_measured(void)
{
    fake_case f;
    fake_case_build(&f);
    tb_request_metrics m[3][2];
    for (int k = 0; k < 3; k++) {
        for (int r = 0; r < 2; r++) {
            int64_t submit = f.req[k][r].t_submit_ns;
            /* TTFT 1500 (the emissions say 1000), E2E 8000 */
            m[k][r] = (tb_request_metrics){.submit_ns = submit, .done_ns = submit + 8000, .ttft_ns = 1500,
                                           .e2e_ns = 8000, .tpot_ns = 3250, .tps = 3 / 8e-6};
        }
        f.v[k].measured = m[k];
    }
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    const tb_stats *st;
    CHECK((st = metric_of(&rec, "ttft_ms")) && st->n == 3 && st->min == 0.0015 && st->max == 0.0015);
    CHECK((st = metric_of(&rec, "e2e_ms")) && st->n == 3 && st->max == 0.008);
    CHECK((st = metric_of(&rec, "tpot_ms")) && st->n == 3 && st->max == 0.00325);
    CHECK((st = metric_of(&rec, "itl_ms")) && st->n == 6 && st->min == 0.001 && st->max == 0.002);
    CHECK((st = metric_of(&rec, "wall_ms")) && st->n == 2 && st->max == 0.008);
    CHECK(rec.samples[1].requests[0].m.ttft_ns == 1500 && rec.samples[1].m.wall_ns == 8000);
    CHECK_STR(rec.samples[1].requests[0].emissions_json, "[[0.001,1],[0.002,1],[0.004,1]]");
    tb_case_record_free(&rec);
}

/* Goodput: TTFT <= limit and TPOT <= limit, an unset limit always holds. */
static void test_case_goodput(void)
{
    fake_case f;
    fake_case_build(&f);
    struct {
        double ttft_ms, tpot_ms, want_max; /* the call with 2 good requests */
    } cases[] = {
        {0.002, 0, 5e5},      /* TTFT 0.001 <= 0.002: both good */
        {0.0005, 0, 0},       /* TTFT over the limit */
        {0, 0.001, 0},        /* TPOT 0.0015 > 0.001 */
        {0.002, 0.002, 5e5},  /* both within */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .goodput_ttft_ms = cases[i].ttft_ms,
                                  .goodput_tpot_ms = cases[i].tpot_ms};
        tb_case_record rec = {0};
        tb_case_metrics(f.v, 3, &o, &rec);
        const tb_stats *st = metric_of(&rec, "goodput");
        CHECK(st && st->n == 2);
        if (st)
            CHECK_REL(st->max, cases[i].want_max);
        tb_case_record_free(&rec);
    }
}

/* sent_rate (docs/METRICS.md, "The rate sent"): an open loop's n
 * requests over the span of their submits, (n - 1) / span, per measured
 * call, every request counted (a failed one was sent too), warm-ups left
 * out; none for a closed loop (request_rate 0) or a call of one request
 * or no span. */
static void test_case_sent_rate(void)
{
    tb_request_metrics r[4] = {{.submit_ns = 3000000000LL}, {.submit_ns = 1000000000LL},
                               {.submit_ns = 1500000000LL}, {.submit_ns = 2000000000LL}};
    CHECK_REL(tb_sent_rate(r, 4), 1.5); /* 3 gaps over 2 s, in any order */
    CHECK(isnan(tb_sent_rate(r, 1)));
    r[1].submit_ns = r[0].submit_ns;
    CHECK(isnan(tb_sent_rate(r, 2))); /* no span */
    fake_case f;
    fake_case_build(&f);
    for (int k = 0; k < 3; k++) /* request 1 sent 0.25 s (warm-up: 1 s) after request 0 */
        f.req[k][1].t_submit_ns = f.req[k][0].t_submit_ns + (k == 0 ? 1000000000LL : 250000000LL);
    f.req[2][1].t_submit_ns += 250000000LL; /* call 2 (its request 1 failed): 0.5 s */
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    const tb_stats *st;
    CHECK((st = metric_of(&rec, "sent_rate")) && st->n == 0); /* closed loop */
    tb_case_record_free(&rec);
    o.request_rate = 3;
    rec = (tb_case_record){0};
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK((st = metric_of(&rec, "sent_rate")) && st->n == 2);
    if (st) {
        CHECK_REL(st->min, 2.0);
        CHECK_REL(st->max, 4.0);
    }
    tb_case_record_free(&rec);
}

/* Capabilities: a figure the backend does not claim is unknown (-1,
 * stored NULL); without streaming, emissions are no timings (TTFT = E2E,
 * no gaps). */
static void test_case_capabilities(void)
{
    fake_case f;
    fake_case_build(&f);
    tb_case_record rec = {0};
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING | TB_CAP_DEVICE_MEMORY | TB_CAP_ENERGY};
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK(rec.samples[1].peak_device_bytes == 123 << 20 && rec.samples[1].energy_mj == 456);
    tb_case_record_free(&rec);

    o.capabilities = 0;
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK(rec.samples[1].peak_device_bytes == -1 && rec.samples[1].energy_mj == -1);
    const tb_stats *ttft = metric_of(&rec, "ttft_ms"), *e2e = metric_of(&rec, "e2e_ms");
    /* done unknown and no emissions taken: the request ended when the
     * call returned (+100000 ns) */
    CHECK(ttft && e2e && ttft->n == 3 && e2e->n == 3);
    if (ttft && e2e) {
        CHECK_REL(ttft->median, 0.1);
        CHECK_REL(e2e->median, 0.1);
    }
    const tb_stats *itl = metric_of(&rec, "itl_ms");
    CHECK(itl && itl->n == 0);
    CHECK_STR(rec.samples[1].requests[0].emissions_json, "[]");
    CHECK(rec.samples[1].n_emissions == 0);
    tb_case_record_free(&rec);
}

static void test_registry(void)
{
    const tb_metric_def *d;
    CHECK((d = tb_metric_find("agg_tps")) && d->better == TB_BETTER_HIGHER && strcmp(d->unit, "tokens/s") == 0);
    CHECK((d = tb_metric_find("ttft_ms")) && d->better == TB_BETTER_LOWER);
    CHECK((d = tb_metric_find("forward_passes")) && d->better == TB_BETTER_NONE);
    CHECK((d = tb_metric_find("accuracy_math")) && strcmp(d->name, "accuracy_") == 0);
    CHECK((d = tb_metric_find("errors_dropped")) && d->better == TB_BETTER_LOWER);
    CHECK(tb_metric_find("errors_") == NULL);
    CHECK(tb_metric_find("accuracyx") == NULL);
    CHECK(tb_metric_find("nonsense") == NULL);
    CHECK_STR(tb_error_classes[tb_error_class("http_429: HTTP 429: slow down")], "http_429");
    CHECK_STR(tb_error_classes[tb_error_class("dropped: closed early")], "dropped");
    CHECK_STR(tb_error_classes[tb_error_class("http_4299: x")], "other");
    CHECK_STR(tb_error_classes[tb_error_class("connect refused")], "other");
    CHECK_STR(tb_error_classes[tb_error_class(NULL)], "other");
}

/* ------------------------------------------------------ the registry's
 * agreements: docs/METRICS.md and the summary view */

/* The cells of one markdown table row "| a | b |" (trimmed, in place);
 * how many, at most max. */
static size_t md_cells(char *line, char **cell, size_t max)
{
    size_t n = 0;
    char *p = strchr(line, '|');
    while (p && n < max) {
        char *next = strchr(p + 1, '|');
        if (!next)
            break;
        *next = '\0';
        char *a = p + 1, *b = next;
        while (*a == ' ')
            a++;
        while (b > a && b[-1] == ' ')
            b--;
        *b = '\0';
        cell[n++] = a;
        p = next;
    }
    return n;
}

/* Does a documented name ("errors_CLASS", "ttft_ms") stand for registry
 * entry d: the same name, or d's prefix and an upper-case placeholder? */
static int doc_name_is(const char *doc, const tb_metric_def *d)
{
    size_t n = strlen(d->name);
    if (d->name[n - 1] != '_')
        return strcmp(doc, d->name) == 0;
    if (strncmp(doc, d->name, n) != 0 || !doc[n])
        return 0;
    for (const char *c = doc + n; *c; c++)
        if (*c < 'A' || *c > 'Z')
            return 0;
    return 1;
}

static const char *better_word(tb_metric_better b)
{
    return b == TB_BETTER_HIGHER ? "higher" : b == TB_BETTER_LOWER ? "lower" : "-";
}

/* What one line of the docs must say of registry entry i, for the
 * message of a disagreement. */
static void registry_row(size_t i, char *out, size_t cap)
{
    const tb_metric_def *d = &tb_metric_defs[i];
    size_t n = strlen(d->name);
    snprintf(out, cap, "| `%s%s` | %s | %s | %s | %s%s%s |", d->name,
             d->name[n - 1] != '_'                ? ""
             : strcmp(d->name, "errors_") == 0        ? "CLASS"
             : strcmp(d->name, "acceptance_at_") == 0 ? "I"
                                                      : "TAG",
             d->unit,
             better_word(d->better), d->samples, d->summary ? "`" : "", d->summary ? d->summary : "-",
             d->summary ? "`" : "");
}

/* docs/METRICS.md against the registry: its table "The registry" row for
 * row (name, unit, better, what n counts, summary columns), and in every
 * other table with a unit column each named metric with the registry's
 * unit. Returns the disagreements (0: none). */
static int doc_disagreements(const char *text)
{
    int bad = 0;
    size_t reg_rows = 0;
    int in_registry = 0, unit_table = 0;
    char *copy = tb_xstrdup(text), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] != '|') {
            in_registry = unit_table = 0;
            continue;
        }
        char buf[2048];
        snprintf(buf, sizeof buf, "%s", line);
        char *cell[8];
        size_t nc = md_cells(buf, cell, 8);
        if (nc >= 2 && strcmp(cell[1], "unit") == 0) { /* a header */
            unit_table = 1;
            in_registry = nc == 5 && strcmp(cell[0], "name") == 0 && strcmp(cell[2], "better") == 0;
            continue;
        }
        if (!unit_table || nc < 2 || strncmp(cell[0], "---", 3) == 0)
            continue;
        if (in_registry) {
            char want[512];
            if (reg_rows >= tb_n_metric_defs) {
                fprintf(stderr, "docs/METRICS.md: registry table row past the registry's %zu: %s\n",
                        tb_n_metric_defs, line);
                bad++;
                continue;
            }
            const tb_metric_def *d = &tb_metric_defs[reg_rows];
            registry_row(reg_rows++, want, sizeof want);
            char name[128] = "", summary[512] = "";
            sscanf(cell[0], "`%127[^`]`", name);
            if (sscanf(cell[4], "`%511[^`]`", summary) != 1)
                snprintf(summary, sizeof summary, "%s", cell[4]);
            if (nc != 5 || !doc_name_is(name, d) || strcmp(cell[1], d->unit) != 0 ||
                strcmp(cell[2], better_word(d->better)) != 0 || strcmp(cell[3], d->samples) != 0 ||
                strcmp(summary, d->summary ? d->summary : "-") != 0) {
                fprintf(stderr, "docs/METRICS.md: registry table says\n  %s\nthe registry (measure/metrics.c):\n  %s\n",
                        line, want);
                bad++;
            }
            continue;
        }
        /* another metric table: each `name` of its first cell */
        for (char *p = strchr(cell[0], '`'); p; p = strchr(p, '`')) {
            char *end = strchr(p + 1, '`');
            if (!end)
                break;
            *end = '\0';
            const tb_metric_def *d = tb_metric_find(p + 1);
            if (!d) {
                fprintf(stderr, "docs/METRICS.md: metric `%s` (unit %s) is not in the registry\n", p + 1, cell[1]);
                bad++;
            } else if (strcmp(d->unit, cell[1]) != 0) {
                fprintf(stderr, "docs/METRICS.md: `%s` in %s, the registry's unit is %s\n", p + 1, cell[1], d->unit);
                bad++;
            }
            p = end + 1;
        }
    }
    if (reg_rows != tb_n_metric_defs) {
        fprintf(stderr, "docs/METRICS.md: the registry table has %zu rows, the registry %zu; it should read:\n",
                reg_rows, tb_n_metric_defs);
        for (size_t i = 0; i < tb_n_metric_defs; i++) {
            char want[512];
            registry_row(i, want, sizeof want);
            fprintf(stderr, "%s\n", want);
        }
        bad++;
    }
    free(copy);
    return bad;
}

static void test_registry_docs(void)
{
    const char *root = getenv("TB_SOURCE_ROOT");
    CHECK(root != NULL);
    if (!root)
        return;
    char *path = tb_xasprintf("%s/docs/METRICS.md", root);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (f) {
        tb_str text = {0};
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0)
            tb_str_appendn(&text, buf, got);
        fclose(f);
        CHECK(doc_disagreements(text.s) == 0);
        /* and the check can fail: a unit changed, a row dropped, a
         * metric the registry lacks */
        const char *plants[][2] = {
            {"| `ttft_ms` | ms |", "| `ttft_ms` | s |"},
            {"| `runner_us` | us | lower | calls | - |\n", ""},
            {"| `wall_ms` | ms |", "| `wall_ns` | ms |"},
        };
        for (size_t i = 0; i < sizeof plants / sizeof *plants; i++) {
            char *at = strstr(text.s, plants[i][0]);
            CHECK(at != NULL);
            if (!at)
                continue;
            tb_str planted = {0};
            tb_str_appendn(&planted, text.s, (size_t)(at - text.s));
            tb_str_append(&planted, plants[i][1]);
            tb_str_append(&planted, at + strlen(plants[i][0]));
            fprintf(stderr, "(planted disagreement %zu; the messages below are expected)\n", i);
            CHECK(doc_disagreements(planted.s) > 0);
            tb_str_free(&planted);
        }
        tb_str_free(&text);
    }
    free(path);
}

/* The metric-table columns a summary column may read. */
static const char *const stat_cols[] = {"n", "median", "p5", "p95", "mean", "stdev", "cv", "min", "max",
                                        "ci_lo", "ci_hi", "p90", "p99"};
#define N_STATS (sizeof stat_cols / sizeof *stat_cols)

/* The planted value of registry entry i's STAT k: distinct for every
 * pair, and far from anything the view computes itself. */
static double planted(size_t i, size_t k)
{
    return 1e6 + 100.0 * (double)i + (double)k;
}

/* The summary view of a fresh database against the registry's `summary`
 * fields: with one row per registered metric of planted values, each
 * column the registry names is the planted value of its metric and STAT,
 * and no other column holds a planted value (reads a metric row the
 * registry does not say it reads). Returns the disagreements. */
static int summary_disagreements(sqlite3 *db)
{
    int bad = 0;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "SELECT * FROM summary", -1, &q, NULL) != SQLITE_OK) {
        fprintf(stderr, "summary: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    if (sqlite3_step(q) != SQLITE_ROW) {
        fprintf(stderr, "summary: no row\n");
        sqlite3_finalize(q);
        return 1;
    }
    int ncol = sqlite3_column_count(q);
    size_t declared = 0;
    for (size_t i = 0; i < tb_n_metric_defs; i++) {
        const char *sm = tb_metric_defs[i].summary;
        for (const char *p = sm; p && *p;) {
            char stat[32], col[64];
            int used = 0;
            if (sscanf(p, "%31[^:]:%63s%n", stat, col, &used) != 2) {
                fprintf(stderr, "registry: %s: malformed summary \"%s\"\n", tb_metric_defs[i].name, sm);
                bad++;
                break;
            }
            p += used;
            while (*p == ' ')
                p++;
            declared++;
            size_t k = 0;
            while (k < N_STATS && strcmp(stat_cols[k], stat) != 0)
                k++;
            int c = 0;
            while (c < ncol && strcmp(sqlite3_column_name(q, c), col) != 0)
                c++;
            if (k == N_STATS || c == ncol) {
                fprintf(stderr, "registry: %s: summary %s:%s: %s\n", tb_metric_defs[i].name, stat, col,
                        k == N_STATS ? "no such statistic" : "no such column in the summary view");
                bad++;
            } else if (sqlite3_column_type(q, c) == SQLITE_NULL || sqlite3_column_double(q, c) != planted(i, k)) {
                fprintf(stderr, "summary.%s: %s, but the registry says it is %s's %s (%.0f)\n", col,
                        sqlite3_column_type(q, c) == SQLITE_NULL ? "NULL" : (const char *)sqlite3_column_text(q, c),
                        tb_metric_defs[i].name, stat, planted(i, k));
                bad++;
            }
        }
    }
    CHECK(declared > 0);
    for (int c = 0; c < ncol; c++) {
        if (sqlite3_column_type(q, c) == SQLITE_NULL || sqlite3_column_type(q, c) == SQLITE_TEXT)
            continue;
        double v = sqlite3_column_double(q, c);
        for (size_t i = 0; i < tb_n_metric_defs; i++)
            for (size_t k = 0; k < N_STATS; k++)
                if (v == planted(i, k)) {
                    char want[128];
                    snprintf(want, sizeof want, "%s:%s", stat_cols[k], sqlite3_column_name(q, c));
                    const char *sm = tb_metric_defs[i].summary;
                    const char *at = sm ? strstr(sm, want) : NULL;
                    size_t wl = strlen(want);
                    if (!at || (at != sm && at[-1] != ' ') || (at[wl] && at[wl] != ' ')) {
                        fprintf(stderr, "summary.%s reads %s's %s; the registry's summary of %s does not say so\n",
                                sqlite3_column_name(q, c), tb_metric_defs[i].name, stat_cols[k],
                                tb_metric_defs[i].name);
                        bad++;
                    }
                }
    }
    sqlite3_finalize(q);
    return bad;
}

static int exec_ok(sqlite3 *db, const char *sql)
{
    char *e = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &e);
    if (rc != SQLITE_OK)
        fprintf(stderr, "%s: %s\n", sql, e ? e : "?");
    sqlite3_free(e);
    return rc == SQLITE_OK;
}

static void test_registry_summary(void)
{
    const char *tmp = getenv("TMPDIR");
    char *path = tb_xasprintf("%s/tb_test_metrics_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) {
        free(path);
        return;
    }
    close(fd);
    unlink(path);
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    if (!st) {
        fprintf(stderr, "%s\n", err ? err : "?");
        free(err);
        free(path);
        return;
    }
    sqlite3 *db = tb_store_db(st);
    /* one case of every column the view joins, by hand (the fewest
     * columns each table requires) */
    CHECK(exec_ok(db, "INSERT INTO machine (fingerprint, hostname, cpu_model, cpu_cores, ram_bytes, os, kernel, arch,"
                      " gpu_count, nvml_status, info_json) VALUES ('f', 'h', 'cpu', 1, 1, 'os', 'k', 'a', 0, 'none',"
                      " '{}')"));
    CHECK(exec_ok(db, "INSERT INTO session (uuid, machine_id, suite_name, suite_path, suite_sha256, suite_text,"
                      " tokbench_version, git_commit, compiler, cuda_build_version, command_line, started_at, status,"
                      " warmup, repeat, seed) VALUES ('u', 1, 's', 'p', 'h', 't', 'v', 'g', 'c', '', 'cl', 'now',"
                      " 'completed', 0, 1, 1)"));
    CHECK(exec_ok(db, "INSERT INTO backend (session_id, label, plugin, plugin_path, plugin_version, abi_major,"
                      " capabilities, model, options_json) VALUES (1, 'b', 'null', 'p', '1', 1, '', 'm', '{}')"));
    CHECK(exec_ok(db, "INSERT INTO bench_case (session_id, backend_id, ordinal, prompt_tokens, max_new_tokens, batch,"
                      " options_json, status) VALUES (1, 1, 1, 1, 1, 1, '{}', 'ok')"));
    for (size_t i = 0; i < tb_n_metric_defs; i++) {
        const tb_metric_def *d = &tb_metric_defs[i];
        size_t n = strlen(d->name);
        tb_str sql = {0};
        tb_str_appendf(&sql, "INSERT INTO metric (case_id, name, unit");
        for (size_t k = 0; k < N_STATS; k++)
            tb_str_appendf(&sql, ", %s", stat_cols[k]);
        tb_str_appendf(&sql, ") VALUES (1, '%s%s', '%s'", d->name, d->name[n - 1] == '_' ? "X" : "", d->unit);
        for (size_t k = 0; k < N_STATS; k++)
            tb_str_appendf(&sql, ", %.17g", planted(i, k));
        tb_str_append(&sql, ")");
        CHECK(exec_ok(db, sql.s));
        tb_str_free(&sql);
    }
    CHECK(summary_disagreements(db) == 0);
    /* and the check can fail: a metric stored under another name than
     * the view reads (as after a rename in the registry alone), and a
     * view that reads a metric the registry does not say it shows */
    CHECK(exec_ok(db, "UPDATE metric SET name = 'ttft_new_ms' WHERE name = 'ttft_ms'"));
    fprintf(stderr, "(planted disagreement 0; the messages below are expected)\n");
    CHECK(summary_disagreements(db) > 0);
    CHECK(exec_ok(db, "UPDATE metric SET name = 'ttft_ms' WHERE name = 'ttft_new_ms'"));
    CHECK(exec_ok(db, "CREATE TEMP VIEW summary AS SELECT *, (SELECT median FROM metric WHERE name = 'wall_ms') AS"
                      " wall FROM main.summary"));
    fprintf(stderr, "(planted disagreement 1; the messages below are expected)\n");
    CHECK(summary_disagreements(db) > 0);
    CHECK(exec_ok(db, "DROP VIEW temp.summary"));
    CHECK(summary_disagreements(db) == 0);
    tb_store_close(st);
    unlink(path);
    char *side = tb_xasprintf("%s-wal", path);
    unlink(side);
    free(side);
    side = tb_xasprintf("%s-shm", path);
    unlink(side);
    free(side);
    free(path);
}

/* Canvas models by hand: the bounds, the bursty rule, and a case's rows. */
static void test_canvas(void)
{
    char why[120];
    tb_canvas_counts c = {0};
    CHECK(tb_canvas_check(&c, 0, 0, 0, 100, why, sizeof why) == NULL); /* none: holds */
    tb_canvas_push(&c, 4, 8, 32, 10);
    tb_canvas_push(&c, 2, 8, 16, 30);
    tb_canvas_push(&c, 6, 4, 48, 70);
    CHECK(tb_canvas_check(&c, 20, 12, 0, 100, why, sizeof why) == NULL);
    CHECK(tb_canvas_check(&c, 19, 12, 0, 100, why, sizeof why) && strstr(why, "committed 20 tokens of 19"));
    CHECK(tb_canvas_check(&c, 20, 11, 0, 100, why, sizeof why) && strstr(why, "12 steps of 11"));
    CHECK(tb_canvas_check(&c, 20, 0, 0, 100, why, sizeof why) == NULL); /* steps_done not reported */
    CHECK(tb_canvas_check(&c, 20, 12, 0, 60, why, sizeof why) && strstr(why, "canvas 2: committed"));
    tb_canvas_counts d = c;
    d.at[1].t_done_ns = 5; /* before canvas 0 */
    CHECK(tb_canvas_check(&d, 20, 12, 0, 100, why, sizeof why) && strstr(why, "before the one before"));
    d = c, d.at[0].steps = 0;
    CHECK(tb_canvas_check(&d, 20, 12, 0, 100, why, sizeof why) && strstr(why, "canvas 0: 0 steps"));
    d = c, d.at[0].positions = 3;
    CHECK(tb_canvas_check(&d, 20, 12, 0, 100, why, sizeof why) && strstr(why, "3 positions in 4 steps"));
    d = c, d.n_past = 1;
    CHECK(tb_canvas_check(&d, 20, 12, 0, 100, why, sizeof why) && strstr(why, "past the cap"));
    d = c, d.past.committed = 1;
    CHECK(tb_canvas_check(&d, 20, 12, 0, 100, why, sizeof why) && strstr(why, "none counted"));
    d = c, d.n = TB_CANVAS_MAX + 1;
    CHECK(tb_canvas_check(&d, 20, 12, 0, 100, why, sizeof why) != NULL);
    /* past the cap: counted and summed, the totals whole */
    tb_canvas_counts *big = calloc(1, sizeof *big);
    for (int i = 0; i < TB_CANVAS_MAX + 2; i++)
        tb_canvas_push(big, 1, 2, 3, i);
    tb_canvas_sum t;
    tb_canvas_total(big, &t);
    CHECK(big->n == TB_CANVAS_MAX && big->n_past == 2 && big->past.committed == 4 && big->past.t_done_ns == TB_CANVAS_MAX + 1);
    CHECK(t.canvases == TB_CANVAS_MAX + 2 && t.steps == TB_CANVAS_MAX + 2 && t.committed == 2 * (TB_CANVAS_MAX + 2) &&
          t.positions == 3 * (TB_CANVAS_MAX + 2));
    CHECK(tb_canvas_check(big, 2 * (TB_CANVAS_MAX + 2), 0, 0, 1000, why, sizeof why) == NULL);
    free(big);
    CHECK(tb_committed_per_step(&c.at[0]) == 2.0 && tb_committed_per_step(&c.at[2]) == 4.0 / 6.0);
    CHECK(tb_positions_per_token(96, 20) == 4.8 && isnan(tb_positions_per_token(5, 0)));
    /* bursty: >= 2 chunks and a median of >= 8 tokens */
    double med;
    uint32_t burst[] = {32, 1, 32, 16}, ar[] = {1, 1, 2, 1, 1}, one[] = {64}, edge[] = {8, 7, 9};
    CHECK(tb_stream_bursty(burst, 4, &med) && med == 24);
    CHECK(!tb_stream_bursty(ar, 5, &med) && med == 1);
    CHECK(!tb_stream_bursty(one, 1, &med) && med == 64);
    CHECK(tb_stream_bursty(edge, 3, &med) && med == 8);
    CHECK(tb_case_is_canvas(1) && !tb_case_is_canvas(0));

    /* a case: the fake case's requests get canvases (call k, request 0:
     * two canvases 4 steps/2 tokens at +1000 ns and 1 step/1 token at
     * +4000); positions 10 and 2 */
    fake_case f;
    fake_case_build(&f);
    static tb_canvas_counts kept[3];
    static tb_canvas_counts *per_req[3][2];
    for (int k = 0; k < 3; k++) {
        int64_t base = (int64_t)(k + 1) * 1000000000LL;
        tb_canvas_push(&kept[k], 4, 2, 10, base + 1000);
        tb_canvas_push(&kept[k], 1, 1, 2, base + 4000);
        f.req[k][0].has_canvas = 1;
        per_req[k][0] = &kept[k];
        f.v[k].canvas = per_req[k];
    }
    tb_case_metrics_opts o = {.capabilities = TB_CAP_STREAMING, .seed = 1};
    tb_case_record rec = {0};
    tb_case_metrics(f.v, 3, &o, &rec);
    const tb_stats *st;
    /* 2 measured calls x 2 canvases */
    CHECK((st = metric_of(&rec, "steps_per_canvas")) && st->n == 4 && st->min == 1 && st->max == 4);
    CHECK((st = metric_of(&rec, "committed_per_step")) && st->n == 4 && st->min == 0.5 && st->max == 1);
    CHECK((st = metric_of(&rec, "canvas_gap_ms")) && st->n == 2 && st->median == 0.003 && isnan(st->ci_lo));
    /* pooled: (12 + 12) / (3 + 3), one value */
    CHECK((st = metric_of(&rec, "positions_per_token")) && st->n == 1 && st->median == 4.0);
    /* 1 token a chunk, 9 chunks of the 3 measured good requests */
    CHECK((st = metric_of(&rec, "tokens_per_chunk")) && st->n == 9 && st->median == 1);
    const tb_request_record *q = &rec.samples[1].requests[0];
    CHECK(q->canvases == 2 && q->canvas_steps == 5 && q->canvas_committed == 3 && q->canvas_positions == 12);
    CHECK_STR(q->canvases_json, "[[4,2,10,0.001],[1,1,2,0.004]]");
    CHECK(q->tokens_per_chunk == 1 && q->bursty == 0 && q->chunk_gap_ms == 0.0015);
    CHECK(rec.samples[1].requests[1].canvases == 0 && rec.samples[1].requests[1].canvases_json == NULL);
    tb_case_record_free(&rec);

    /* a bursty stream without records: its chunk gaps are canvas gaps */
    fake_case_build(&f);
    for (int k = 0; k < 3; k++)
        for (uint32_t e = 0; e < f.v[k].call.n_emissions; e++)
            f.em[k][e].n_tokens = 16;
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK((st = metric_of(&rec, "canvas_gap_ms")) && st->n == 6 && st->min == 0.001 && st->max == 0.002);
    CHECK((st = metric_of(&rec, "steps_per_canvas")) && st->n == 0);
    CHECK((st = metric_of(&rec, "positions_per_token")) && st->n == 0);
    CHECK(rec.samples[1].requests[0].bursty == 1 && rec.samples[1].requests[0].tokens_per_chunk == 16);
    tb_case_record_free(&rec);
    /* the plain fake case: no canvas model */
    fake_case_build(&f);
    tb_case_metrics(f.v, 3, &o, &rec);
    CHECK((st = metric_of(&rec, "canvas_gap_ms")) && st->n == 0);
    tb_case_record_free(&rec);
}

int main(void)
{
    test_canvas();
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
    test_case_measured_only();
    test_case_moe();
    test_spec_formulas();
    test_case_spec();
    test_case_spec_counters();
    test_case_client_busy();
    test_case_sent_rate();
    test_case_goodput();
    test_case_capabilities();
    test_case_measured();
    test_count_mismatch();
    test_registry();
    test_registry_docs();
    test_registry_summary();
    return check_done();
}
