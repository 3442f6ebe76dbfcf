/* test_warnings.c — reports/warnings.c, the one place every warning is
 * computed, on sessions built by hand: each rule fires when it should
 * and stays quiet when it should not (a warning on every run hides the
 * real ones). */
#define _POSIX_C_SOURCE 200809L
#include "warnings.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "metrics.h"
#include "util.h"

static tb_rmetric metric(const char *name, size_t n, double mean, double cv)
{
    tb_rmetric m = {.name = (char *)name, .unit = (char *)""};
    m.st = (tb_stats){.n = n, .median = mean, .mean = mean, .cv = cv, .p5 = NAN, .p95 = NAN};
    return m;
}

/* One backend, one ok case with agg_tps of n repetitions and CV cv. */
typedef struct fixture {
    tb_rsession s;
    tb_rbackend b;
    tb_rcase c;
    tb_rmetric m[4];
} fixture;

static void fixture_init(fixture *f, size_t n, double cv)
{
    memset(f, 0, sizeof *f);
    f->b = (tb_rbackend){.label = (char *)"eng", .dtype = (char *)"bf16", .device = (char *)"", .random_weights = 0};
    f->m[0] = metric("agg_tps", n, 100, cv);
    f->c = (tb_rcase){.ordinal = 1, .dims = {.prompt_tokens = 32, .max_new_tokens = 16, .batch = 1},
                      .options_json = (char *)"{}",
                      .status = (char *)"ok", .error = (char *)"", .metrics = f->m, .n_metrics = 1,
                      .requests = (int)n, .peak_device_mib = NAN, .host_rss_mib = NAN,
                      .energy_j_per_token = NAN};
    f->s = (tb_rsession){.status = (char *)"completed", .repeat = (int)n, .warmup = 1, .backends = &f->b,
                         .n_backends = 1, .cases = &f->c, .n_cases = 1};
}

/* How many warnings contain `needle`. */
static int count(const tb_warnings *w, const char *needle)
{
    int k = 0;
    for (size_t i = 0; i < w->n; i++)
        k += strstr(w->text[i], needle) != NULL;
    return k;
}

static void test_quiet(void)
{
    fixture f;
    fixture_init(&f, 10, 0.02);
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    for (size_t i = 0; i < w.n; i++)
        fprintf(stderr, "unexpected warning: %s\n", w.text[i]);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
}

static void test_noise(void)
{
    fixture f;
    fixture_init(&f, 10, 0.187);
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "noisy, aggregate tok/s CV 18.7% > 10%") == 1);
    CHECK(tb_case_noisy(&f.s, &f.c));
    tb_warnings_free(&w);
    /* a prompt set: the calls run different items, their CV is no noise */
    f.s.has_prompt_set = 1;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "noisy") == 0);
    CHECK(count(&w, "prompt set: every call runs different items") == 1);
    CHECK(!tb_case_noisy(&f.s, &f.c));
    tb_warnings_free(&w);
    /* one repetition has no spread */
    CHECK(!tb_noisy(0.5, 1, 0));
    CHECK(tb_noisy(0.11, 2, 0) && !tb_noisy(0.10, 2, 0) && !tb_noisy(NAN, 5, 0));
}

static void test_failed_requests(void)
{
    fixture f;
    fixture_init(&f, 10, 0.02);
    f.c.requests = 40;
    f.c.failed_requests = 3;
    f.m[1] = metric("errors_connect", 10, 0.2, 0); /* 2 in 10 calls */
    f.m[2] = metric("errors_http_5xx", 10, 0.1, 0);
    f.c.n_metrics = 3;
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "eng [prompt 32, new 16, batch 1]: degraded: 3 of 40 requests failed (connect 2, http_5xx 1)") == 1);
    tb_warnings_free(&w);
}

/* The client's saturation (docs/METRICS.md, client_busy): the rule at
 * its threshold, quiet below it and without the figure. */
static void test_client_saturated(void)
{
    fixture f;
    fixture_init(&f, 10, 0.02);
    f.m[1] = metric("client_busy", 10, 97, 0);
    f.c.n_metrics = 2;
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "eng [prompt 32, new 16, batch 1]: the client was saturated (client_busy 97% >= 90%)") == 1);
    tb_warnings_free(&w);
    f.m[1] = metric("client_busy", 10, TB_CLIENT_SATURATED_PCT, 0);
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "the client was saturated") == 1);
    tb_warnings_free(&w);
    f.m[1] = metric("client_busy", 10, 89.9, 0);
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
    f.m[1] = metric("client_busy", 0, NAN, NAN); /* not measured */
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
    /* issue 39: every request failed at once (nothing listening): the
     * loop spun, and there are no figures for it to cap */
    f.m[1] = metric("client_busy", 10, 98, 0);
    f.c.status = (char *)"failed";
    f.c.error = (char *)"every request failed: 32 of 32 (connect 32); first: connect: refused";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "saturated") == 0);
    CHECK(count(&w, "eng failed [prompt 32, new 16, batch 1]: every request failed") == 1);
    tb_warnings_free(&w);
}

/* Issue 39: each error class's first message, whole, once per case (a
 * failed case's reason quotes its first: not repeated); failed
 * telemetry scrapes. */
static void test_first_errors(void)
{
    fixture f;
    fixture_init(&f, 10, 0.02);
    f.c.requests = 32;
    f.c.failed_requests = 16;
    char long_msg[400];
    snprintf(long_msg, sizeof long_msg, "http_4xx: HTTP 400: %0300d (END)", 0);
    f.c.first_error[tb_error_class("http_4xx: x")] = long_msg;
    f.c.first_error[tb_error_class("connect: x")] = (char *)"connect: refused";
    f.c.scrapes = 8;
    f.c.scrapes_failed = 8;
    f.c.scrape_error = (char *)"HTTP 404";
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    char want[420];
    snprintf(want, sizeof want, "eng [prompt 32, new 16, batch 1]: first http_4xx failure: HTTP 400: %0300d (END)", 0);
    CHECK(count(&w, want) == 1);
    CHECK(count(&w, "eng [prompt 32, new 16, batch 1]: first connect failure: refused") == 1);
    CHECK(count(&w, "eng [prompt 32, new 16, batch 1]: telemetry: 8 of 8 scrapes of the metrics_url failed (first: "
                    "HTTP 404)") == 1);
    tb_warnings_free(&w);
    /* a failed case: the class its reason quotes is not said again */
    f.c.status = (char *)"failed";
    f.c.error = (char *)"every request failed: 32 of 32 (connect 16, http_4xx 16); first: connect: refused";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "first connect failure") == 0);
    CHECK(count(&w, "first http_4xx failure: HTTP 400: ") == 1);
    tb_warnings_free(&w);
    f.c.first_error[tb_error_class("http_4xx: x")] = NULL;
    f.c.first_error[tb_error_class("connect: x")] = NULL;
}

/* The rate an open loop sent (docs/METRICS.md, sent_rate): the rule
 * past 5% either way, quiet within it, without the figure and for a
 * closed loop. */
static void test_sent_rate(void)
{
    fixture f;
    fixture_init(&f, 10, 0.02);
    f.c.dims.request_rate = 26.12;
    f.c.requests = 320;
    f.m[1] = metric("sent_rate", 10, 30.03, 0);
    f.c.n_metrics = 2;
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "eng [prompt 32, new 16, batch 1, rate 26.12/s]: the load was scheduled at 30.03 requests/s, 15.0% above "
                    "the offered 26.12 (sent_rate, median of 10 calls of 32 requests)") == 1);
    tb_warnings_free(&w);
    static const struct {
        double sent;
        int warns;
    } at[] = {{26.12 * 0.94, 1}, {26.12 * 0.951, 0}, {26.12 * 1.049, 0}, {26.12 * 1.051, 1}, {26.12, 0}};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        f.m[1] = metric("sent_rate", 10, at[i].sent, 0);
        tb_warnings_derive(&f.s, &w);
        CHECK(count(&w, "the load was scheduled at") == at[i].warns);
        CHECK(count(&w, at[i].sent < 26.12 ? "below the offered" : "above the offered") == at[i].warns);
        tb_warnings_free(&w);
    }
    f.m[1] = metric("sent_rate", 0, NAN, NAN); /* a call of one request */
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
    f.m[1] = metric("sent_rate", 10, 30.03, 0);
    /* a multi-turn load (the http backend's turns, swept or the
     * backend's): its waves' pauses are in its span, no warning */
    char *opts = f.c.options_json, *bopts = f.b.options_json;
    f.c.options_json = (char *)"{\"turns\":\"3\"}";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "the load was scheduled at") == 0);
    tb_warnings_free(&w);
    f.c.options_json = opts;
    f.b.options_json = (char *)"{\"turns\":2,\"stream\":true}";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "the load was scheduled at") == 0);
    tb_warnings_free(&w);
    f.b.options_json = (char *)"{\"turns\":1}";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "the load was scheduled at") == 1);
    tb_warnings_free(&w);
    f.b.options_json = bopts;
    f.c.dims.request_rate = 0; /* no offered rate */
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
}

/* An open loop under a concurrency cap (docs/METRICS.md, "Serving: HTTP
 * endpoints and request loads"): requests/s x mean E2E (the requests in
 * flight or waiting, on average) past the cap says the cap held the
 * sends: that warning, naming the achieved rate and sent_rate as the
 * schedule's, and no warning that the schedule's rate was sent. */
static void test_cap_held(void)
{
    fixture f;
    fixture_init(&f, 1, 0.02);
    f.c.dims.request_rate = 100;
    f.c.dims.concurrency = 1;
    f.c.requests = 20;
    f.m[1] = metric("sent_rate", 1, 109.07, 0);
    f.m[2] = metric("req_throughput", 1, 10.87, 0);
    f.m[3] = metric("e2e_ms", 20, 900, 0);
    f.c.n_metrics = 4;
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "eng [prompt 32, new 16, batch 1, concurrency 1, rate 100/s]: the concurrency cap held the load "
                    "back: it achieved 10.87 requests/s of the offered 100.00 (req/s), with at most 1 in flight and "
                    "on average 9.8 in flight or waiting for a slot; its sends went out later than scheduled, so "
                    "sent_rate (109.07) is the schedule's rate, not the one sent") == 1);
    CHECK(count(&w, "the load was scheduled at") == 0);
    tb_warnings_free(&w);
    /* a cap of 10 held it too (9.8 / 10 is within 5%: not said) */
    static const struct {
        unsigned cap;
        double e2e;
        int held;
    } at[] = {{10, 900, 0}, {9, 900, 1}, {1, 96, 0}, {1, 97, 1}, {0, 900, 0}};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        f.c.dims.concurrency = at[i].cap;
        f.m[3] = metric("e2e_ms", 20, at[i].e2e, 0);
        tb_warnings_derive(&f.s, &w);
        CHECK(count(&w, "the concurrency cap held the load back") == at[i].held);
        CHECK(count(&w, "the load was scheduled at 109.07 requests/s") == !at[i].held); /* 9.1% above */
        tb_warnings_free(&w);
    }
    f.c.dims.request_rate = 0; /* a closed loop is held by its concurrency by definition */
    f.c.dims.concurrency = 1;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "the concurrency cap held") == 0);
    tb_warnings_free(&w);
}

/* A result that contradicts the others (docs/METRICS.md, "Contradicting
 * results"): two cases of a backend that differ in one swept dimension or
 * option, the one with more forwards per token faster beyond the noise;
 * the sdar thresholds (363.8 against 245.8 tok/s). */
typedef struct pair_fixture {
    tb_rsession s;
    tb_rbackend b[2];
    tb_rcase c[2];
    tb_rmetric m[2][2];
} pair_fixture;

static void pair_init(pair_fixture *f, double tpf0, double tps0, double tpf1, double tps1, size_t n)
{
    memset(f, 0, sizeof *f);
    f->b[0] = (tb_rbackend){.label = (char *)"sdar", .dtype = (char *)"", .device = (char *)""};
    f->b[1] = (tb_rbackend){.label = (char *)"other", .dtype = (char *)"", .device = (char *)""};
    const double tpf[2] = {tpf0, tpf1}, tps[2] = {tps0, tps1};
    static const char *const opts[2] = {"{\"threshold\":\"0.9\"}", "{\"threshold\":\"0.5\"}"};
    for (int k = 0; k < 2; k++) {
        f->m[k][0] = metric("agg_tps", n, tps[k], 0.02);
        f->m[k][0].st.ci_lo = n > 1 ? tps[k] * 0.97 : tps[k];
        f->m[k][0].st.ci_hi = n > 1 ? tps[k] * 1.03 : tps[k];
        f->m[k][1] = metric("tokens_per_forward", n, tpf[k], 0);
        f->c[k] = (tb_rcase){.ordinal = k + 1, .dims = {.prompt_tokens = 32, .max_new_tokens = 16, .batch = 1, .steps = 4},
                             .options_json = (char *)opts[k], .status = (char *)"ok", .error = (char *)"",
                             .metrics = f->m[k], .n_metrics = 2, .requests = (int)n, .peak_device_mib = NAN,
                             .host_rss_mib = NAN, .energy_j_per_token = NAN};
    }
    f->s = (tb_rsession){.status = (char *)"completed", .repeat = (int)n, .warmup = 1, .backends = f->b,
                         .n_backends = 2, .cases = f->c, .n_cases = 2};
}

static int contradictions_of(pair_fixture *f)
{
    tb_warnings w;
    tb_warnings_derive(&f->s, &w);
    int k = count(&w, "yet faster");
    tb_warnings_free(&w);
    return k;
}

static void test_contradiction(void)
{
    pair_fixture f;
    pair_init(&f, 1.30, 363.8, 2.50, 245.8, 10);
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "sdar [prompt 32, new 16, batch 1, steps 4, threshold 0.9]: threshold 0.9 vs 0.5: more "
                    "forwards per output token (1.30 vs 2.50 tokens/forward) yet faster (363.8 vs 245.8 tok/s "
                    "aggregate, 95% intervals apart): the reverse of what more forwards mean") == 1);
    CHECK(w.n == 1);
    tb_warnings_free(&w);
    /* the same pair in the other order: the same finding */
    pair_init(&f, 2.50, 245.8, 1.30, 363.8, 10);
    CHECK(contradictions_of(&f) == 1);
    /* more forwards, slower: as it should be */
    pair_init(&f, 1.30, 245.8, 2.50, 363.8, 10);
    CHECK(contradictions_of(&f) == 0);
    /* faster, but the intervals overlap: noise */
    pair_init(&f, 1.30, 250.0, 2.50, 245.8, 10);
    CHECK(contradictions_of(&f) == 0);
    /* forwards per token within 5%: no ordering to contradict */
    pair_init(&f, 2.40, 363.8, 2.50, 245.8, 10);
    CHECK(contradictions_of(&f) == 0);
    pair_init(&f, 2.30, 363.8, 2.50, 245.8, 10);
    CHECK(contradictions_of(&f) == 1);
    /* over a prompt set the calls' medians tie (1.5 and 1.5): the means
     * (1.46, 1.57) order them */
    pair_init(&f, 1.46, 363.8, 1.57, 245.8, 10);
    f.m[0][1].st.median = f.m[1][1].st.median = 1.5;
    CHECK(contradictions_of(&f) == 1);
    /* one repetition (no intervals): faster by more than the 10% margin */
    pair_init(&f, 1.30, 363.8, 2.50, 245.8, 1);
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "(363.8 vs 245.8 tok/s aggregate, no intervals: more than the noise margin apart)") == 1);
    tb_warnings_free(&w);
    pair_init(&f, 1.30, 245.8 * 1.099, 2.50, 245.8, 1);
    CHECK(contradictions_of(&f) == 0);
    /* differing in two things, or in different backends: not one lever */
    pair_init(&f, 1.30, 363.8, 2.50, 245.8, 10);
    f.c[1].dims.steps = 8;
    CHECK(contradictions_of(&f) == 0);
    pair_init(&f, 1.30, 363.8, 2.50, 245.8, 10);
    f.c[1].backend = 1;
    CHECK(contradictions_of(&f) == 0);
    /* a swept dimension: steps 8 vs 2, the 8 faster */
    pair_init(&f, 2.0, 363.8, 8.0, 245.8, 10);
    f.c[0].options_json = f.c[1].options_json = (char *)"{}";
    f.c[0].dims.steps = 8;
    f.c[1].dims.steps = 2;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "sdar [prompt 32, new 16, batch 1, steps 8]: steps 8 vs 2: more forwards per output token") == 1);
    tb_warnings_free(&w);
    /* a failed case, or no forward counts (an http backend): nothing */
    pair_init(&f, 1.30, 363.8, 2.50, 245.8, 10);
    f.c[1].status = (char *)"failed";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "yet faster") == 0);
    tb_warnings_free(&w);
    pair_init(&f, NAN, 363.8, NAN, 245.8, 10);
    CHECK(contradictions_of(&f) == 0);
    /* speculative cases (draft_len 3 vs 7): forwards count the target's
     * only, and the longer draft may cost more than it saves: nothing */
    pair_init(&f, 1.30, 363.8, 2.50, 245.8, 10);
    tb_rmetric spec[2][3];
    for (int k = 0; k < 2; k++) {
        spec[k][0] = f.m[k][0];
        spec[k][1] = f.m[k][1];
        spec[k][2] = metric("acceptance_length", 1, 3.0, 0);
        f.c[k].metrics = spec[k];
        f.c[k].n_metrics = 3;
    }
    CHECK(contradictions_of(&f) == 0);
    f.c[0].n_metrics = f.c[1].n_metrics = 2; /* the same pair, not speculative: found */
    CHECK(contradictions_of(&f) == 1);
}

static void test_other_rules(void)
{
    fixture f;
    fixture_init(&f, 10, 0.02);
    f.c.varying_outputs = 2;
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "2 prompt(s) produced different outputs in different repetitions") == 1);
    tb_warnings_free(&w);

    fixture_init(&f, 3, 0.02);
    f.s.warmup = 0;
    f.s.status = (char *)"interrupted";
    f.c.status = (char *)"failed";
    f.c.error = (char *)"backend process crashed";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "the session is interrupted") == 1);
    CHECK(count(&w, "no warm-up run") == 1);
    CHECK(count(&w, "eng failed [prompt 32, new 16, batch 1]: backend process crashed") == 1);
    CHECK(count(&w, "measured calls in the smallest case") == 0); /* a failed case has no calls to count */
    tb_warnings_free(&w);
}

/* The output-length check (docs/METRICS.md, "Output-length check"): a
 * line for each side of the ids' check that failed, which says which and
 * what it means in its direction; random weights change nothing (a
 * backend's ids are held to their number, whatever tokens they are). The
 * text's check warns only where the backend's counts in all stray from
 * their re-counts by more than TB_COUNT_TEXT_MARGIN, on the side of the
 * sums: a line naming the sums and the requests on each side. */
static void test_count_mismatch(void)
{
    static const char *const said[TB_N_COUNT_MISMATCHES] = {
        [TB_MISMATCH_OVER_IDS] = "count more output tokens than the output ids the backend returned: its "
                                 "tokens/s counts tokens it never returned",
        [TB_MISMATCH_UNDER_IDS] = "count fewer output tokens than the output ids the backend returned: its "
                                  "tokens/s leaves out tokens it generated",
        [TB_MISMATCH_OVER_TEXT] = "count more output tokens than their text re-tokenizes to: the count may hold "
                                  "tokens that are not in the text (tokens/s inflated)",
        [TB_MISMATCH_UNDER_TEXT] = "count fewer output tokens than their text re-tokenizes to: the count may leave "
                                   "out tokens of the text (tokens/s understated)",
    };
    for (int random = 0; random <= 1; random++)
        for (int k = 0; k < TB_N_COUNT_MISMATCHES; k++) {
            fixture f;
            fixture_init(&f, 10, 0.02);
            f.b.random_weights = random;
            f.c.count_mismatches[k] = 5;
            int text = k == TB_MISMATCH_OVER_TEXT || k == TB_MISMATCH_UNDER_TEXT;
            if (text) /* 100 requests of text, 1,600 tokens counted against 1,500 re-counted, or the reverse */
                f.c.text_requests = 100, f.c.text_count = k == TB_MISMATCH_OVER_TEXT ? 1600 : 1500,
                f.c.text_recount = k == TB_MISMATCH_OVER_TEXT ? 1500 : 1600;
            tb_warnings w;
            tb_warnings_derive(&f.s, &w);
            char *want = text ? tb_xasprintf("eng: 100 requests returned text alone and %s", said[k])
                              : tb_xasprintf("eng: 5 requests in 1 cases %s", said[k]);
            CHECK(w.n == (size_t)(1 + random) && count(&w, want) == 1); /* + random weights' own */
            CHECK(count(&w, "docs/METRICS.md, \"Output-length check\"") == 1);
            CHECK(count(&w, k == TB_MISMATCH_OVER_TEXT ? "understated" : "inflated") == 0);
            if (text)
                CHECK(count(&w, k == TB_MISMATCH_OVER_TEXT
                                    ? "1600 tokens counted in all against 1500 re-counted (+6.7%; 5 requests "
                                      "differ: 5 above, 0 below)"
                                    : "1500 tokens counted in all against 1600 re-counted (-6.2%; 5 requests "
                                      "differ: 0 above, 5 below)") == 1);
            CHECK(count(&w, "round trip") == 0);
            free(want);
            tb_warnings_free(&w);
        }
    /* requests of text that differ, their sums within 2% (the quick
     * suite's served llada-small: 2,958 against 2,938): no finding; at
     * 2% exactly none, past it one */
    static const int64_t counted[4] = {2958, 1632, 1633, 1568}, expect[4] = {0, 0, 1, 0};
    static const int64_t recounted[4] = {2938, 1600, 1600, 1600};
    for (int t = 0; t < 4; t++) {
        fixture f;
        fixture_init(&f, 10, 0.02);
        f.c.count_mismatches[TB_MISMATCH_OVER_TEXT] = 16;
        f.c.count_mismatches[TB_MISMATCH_UNDER_TEXT] = 2;
        f.c.text_requests = 256, f.c.text_count = counted[t], f.c.text_recount = recounted[t];
        tb_warnings w;
        tb_warnings_derive(&f.s, &w);
        CHECK(count(&w, "returned text alone") == expect[t]);
        CHECK(w.n == (size_t)expect[t]);
        tb_warnings_free(&w);
    }
    /* two cases of one backend, each side: a line each, summed */
    fixture f;
    fixture_init(&f, 10, 0.02);
    tb_rcase two[2] = {f.c, f.c};
    two[1].ordinal = 2;
    two[0].count_mismatches[TB_MISMATCH_OVER_IDS] = 3;
    two[1].count_mismatches[TB_MISMATCH_OVER_IDS] = 4;
    two[1].count_mismatches[TB_MISMATCH_UNDER_TEXT] = 1;
    two[0].text_requests = 10, two[0].text_count = 100, two[0].text_recount = 100;
    two[1].text_requests = 10, two[1].text_count = 98, two[1].text_recount = 100; /* -1% in all */
    f.s.cases = two;
    f.s.n_cases = 2;
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 1);
    CHECK(count(&w, "eng: 7 requests in 2 cases count more output tokens than the output ids") == 1);
    two[1].text_count = 95; /* -2.5% in all */
    tb_warnings_free(&w);
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 2);
    CHECK(count(&w, "eng: 20 requests returned text alone and count fewer output tokens than their text") == 1);
    CHECK(count(&w, "195 tokens counted in all against 200 re-counted (-2.5%; 1 requests differ: 0 above, 1 below)") ==
          1);
    tb_warnings_free(&w);
}

/* A content-dependent sampler (the backend's describe() lists it) on
 * random-token prompts: the warning names the case and the fix; quiet on
 * a prompt set (prompt_tokens 0), on a fixed-schedule sampler, without
 * the list, and when the case's swept sampler is another. */
static void test_random_prompts(void)
{
    fixture f;
    fixture_init(&f, 10, 0.02);
    f.b.info_json = (char *)"{\"content_dependent_samplers\":[\"threshold\",\"sdar_dynamic\"]}";
    f.b.options_json = (char *)"{\"sampler\":\"sdar_dynamic\",\"threshold\":0.9}";
    tb_warnings w;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "eng [prompt 32, new 16, batch 1]: sampler sdar_dynamic commits (or stops) as the model's "
                    "confidence allows, but its prompts were random tokens") == 1);
    CHECK(count(&w, "give it text prompts ([prompts] file = data/text.jsonl") == 1);
    CHECK(w.n == 1);
    tb_warnings_free(&w);
    f.c.dims.prompt_tokens = 0; /* a prompt set's text */
    f.s.has_prompt_set = 1;
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "random tokens") == 0);
    tb_warnings_free(&w);
    f.c.dims.prompt_tokens = 32;
    f.s.has_prompt_set = 0;
    f.b.options_json = (char *)"{\"sampler\":\"low_confidence\"}"; /* a fixed schedule */
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
    f.c.options_json = (char *)"{\"sampler\":\"threshold\"}"; /* swept: the case's wins */
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "sampler threshold commits") == 1);
    tb_warnings_free(&w);
    f.b.options_json = (char *)"{\"sampler\":\"threshold\"}";
    f.c.options_json = (char *)"{\"sampler\":\"low_confidence\"}";
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
    f.c.options_json = (char *)"{}";
    f.b.info_json = (char *)"{\"model_name\":\"x\"}"; /* a plugin that lists none */
    tb_warnings_derive(&f.s, &w);
    CHECK(w.n == 0);
    tb_warnings_free(&w);
    f.b.info_json = (char *)"{\"content_dependent_samplers\":[\"threshold\"]}";
    f.c.status = (char *)"failed"; /* nothing measured */
    f.c.error = (char *)"boom";
    tb_warnings_derive(&f.s, &w);
    CHECK(count(&w, "random tokens") == 0);
    tb_warnings_free(&w);
}

int main(void)
{
    test_quiet();
    test_noise();
    test_failed_requests();
    test_client_saturated();
    test_first_errors();
    test_sent_rate();
    test_cap_held();
    test_contradiction();
    test_other_rules();
    test_count_mismatch();
    test_random_prompts();
    return check_done();
}
