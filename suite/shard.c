/* shard.c — see shard.h. */
#define _GNU_SOURCE
#include "shard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

int tb_shard_parse(const char *text, uint32_t *k, uint32_t *n, char **err)
{
    char *end;
    errno = 0;
    unsigned long a = strtoul(text, &end, 10);
    if (end == text || *end != '/' || text[0] == '-' || errno) {
        *err = tb_xasprintf("--shard %s: expected K/N (shard K of N, 0-based: 0/4 .. 3/4)", text);
        return -1;
    }
    const char *p = end + 1;
    unsigned long b = strtoul(p, &end, 10);
    if (end == p || *end || p[0] == '-' || errno || b > 65536 || a >= b) {
        *err = tb_xasprintf("--shard %s: expected K/N with 0 <= K < N <= 65536 (shard K of N, 0-based)", text);
        return -1;
    }
    if (b < 2) { /* one shard is the whole load: no run to join */
        *err = tb_xasprintf("--shard %s: expected N >= 2 shards (a run of one shard is the whole load, never "
                            "joined: run it without --shard)", text);
        return -1;
    }
    *k = (uint32_t)a;
    *n = (uint32_t)b;
    return 0;
}

/* The last second --start-at accepts, in both forms: 2261-12-31T23:59:59Z,
 * the last whole year whose nanoseconds fit an int64 (they end in April
 * 2262). */
#define LAST_START_S 9214646399LL

int tb_shard_parse_time(const char *text, int64_t *ns, char **err)
{
    const char *want = "expected a UTC time such as 2026-12-01T19:00:00Z (ISO 8601, Z or +00:00) or @SECONDS "
                       "since the Unix epoch";
    const char *range = "out of range: a time from 1970-01-01T00:00:00Z (@0) to 2261-12-31T23:59:59Z "
                        "(@9214646399) is expected";
    int64_t s_whole, frac = 0;
    if (text[0] == '@') {
        char *end;
        errno = 0;
        double s = strtod(text + 1, &end);
        if (end == text + 1 || *end || isnan(s) || (errno && errno != ERANGE)) {
            *err = tb_xasprintf("--start-at %s: %s", text, want);
            return -1;
        }
        /* both forms share one range (the ISO form's) */
        if (!(s >= 0 && s < (double)LAST_START_S + 1)) {
            *err = tb_xasprintf("--start-at %s: %s", text, range);
            return -1;
        }
        s_whole = (int64_t)s;
        frac = (int64_t)((s - (double)s_whole) * 1e9 + 0.5);
    } else {
        struct tm tm = {0};
        const char *p = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
        if (p && *p == '.') {
            int64_t scale = 100000000;
            for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
                frac += scale * (*p - '0');
        }
        if (!p || (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)) {
            *err = tb_xasprintf("--start-at %s: %s", text, want);
            return -1;
        }
        /* a date that does not exist (2026-02-30) is refused, not carried
         * into the next month: the fields must survive the round trip */
        struct tm want_tm = tm;
        errno = 0;
        time_t t = timegm(&tm);
        if (tm.tm_year != want_tm.tm_year || tm.tm_mon != want_tm.tm_mon || tm.tm_mday != want_tm.tm_mday ||
            tm.tm_hour != want_tm.tm_hour || tm.tm_min != want_tm.tm_min || tm.tm_sec != want_tm.tm_sec) {
            *err = tb_xasprintf("--start-at %s: no such time (day %d of month %d, %02d:%02d:%02d): %s", text,
                                want_tm.tm_mday, want_tm.tm_mon + 1, want_tm.tm_hour, want_tm.tm_min, want_tm.tm_sec,
                                want);
            return -1;
        }
        if (t < 0 || t > LAST_START_S || errno == EOVERFLOW) {
            *err = tb_xasprintf("--start-at %s: %s", text, range);
            return -1;
        }
        s_whole = (int64_t)t;
    }
    *ns = s_whole * 1000000000LL + frac; /* at most ~9.2146e18: fits */
    return 0;
}

void tb_shard_format_time(int64_t ns, char *out)
{
    time_t t = (time_t)(ns / 1000000000LL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char s[24];
    strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%s.%03dZ", s, (int)(ns % 1000000000LL / 1000000));
}

uint64_t tb_shard_seed(uint64_t seed, uint32_t k)
{
    /* 63 bits: a seed a suite can take back (seed = 0 .. 2^63 - 1), stored
     * and printed as one number everywhere; k = 0: the suite's own */
    return (seed + (uint64_t)k * 0x9E3779B97F4A7C15ull) & (uint64_t)INT64_MAX;
}

/* shard k's part of x split n ways */
static uint32_t share(uint32_t x, uint32_t k, uint32_t n)
{
    return x / n + (k < x % n);
}

/* Shard k of n of case c (its share), remembering the suite's values. */
static tb_case share_of(const tb_case *c, uint32_t k, uint32_t n)
{
    tb_case s = *c;
    s.shard_count = n;
    s.suite_requests = c->requests;
    s.suite_concurrency = c->concurrency;
    s.suite_request_rate = c->request_rate;
    s.requests = share(c->requests, k, n);
    if (c->concurrency)
        s.concurrency = share(c->concurrency, k, n);
    s.request_rate = c->request_rate / n;
    return s;
}

int tb_shard_apply(tb_plan *plan, uint32_t k, uint32_t n, char **err)
{
    tb_str errs = {0};
    /* every shard's share of every case (at most 3 distinct ones a case:
     * shard 0's, and the first to lose the extra request or the extra
     * slot of concurrency), for the plugin's own check */
    tb_case *shares = NULL;
    size_t n_shares = 0;
    for (size_t i = 0; i < plan->n_cases; i++) {
        tb_case *c = &plan->cases[i];
        if (c->skip_reason)
            continue;
        const tb_plan_backend *pb = &plan->backends[c->backend];
        uint32_t caps = pb->plugin.ops->capabilities;
        char *label = tb_case_label(plan, c);
        if (!(caps & (TB_CAP_CONCURRENCY | TB_CAP_REQUEST_RATE)))
            tb_str_appendf(&errs, "--shard: case #%zu (%s %s): backend %s (plugin %s) serves no load to split "
                           "(only serving backends, with concurrency or request_rate, can be sharded)\n",
                           c->ordinal, pb->sb->label, label, pb->sb->label, pb->plugin.ops->name);
        else if (c->search != TB_SEARCH_NONE)
            tb_str_appendf(&errs, "--shard: case #%zu (%s %s): request_rate = %s is a load search, which cannot be "
                           "split: each shard would search on its own, and their rates would not add up to one load "
                           "(run the search whole, or shard fixed request_rate values)\n",
                           c->ordinal, pb->sb->label, label, c->search == TB_SEARCH_SWEEP ? "sweep" : "slo");
        else if (c->requests < n || (c->concurrency && c->concurrency < n))
            tb_str_appendf(&errs, "--shard: case #%zu (%s %s): %s %u cannot be split over %u shards (each needs "
                           "at least one)\n", c->ordinal, pb->sb->label, label,
                           c->requests < n ? "requests" : "concurrency",
                           c->requests < n ? c->requests : c->concurrency, n);
        else {
            uint32_t firsts[3] = {0, c->requests % n, c->concurrency ? c->concurrency % n : 0};
            for (int f = 0; f < 3; f++) {
                if (firsts[f] >= n || (f && firsts[f] == 0) || (f == 2 && firsts[2] == firsts[1]))
                    continue;
                shares = tb_xrealloc(shares, (n_shares + 1) * sizeof *shares);
                shares[n_shares++] = share_of(c, firsts[f], n);
            }
        }
        free(label);
    }
    if (plan->n_prompts)
        tb_str_appendf(&errs, "--shard: a suite with a prompt set cannot be sharded (its items are graded per "
                       "case; run it whole)\n");
    /* a share the plugin refuses (a multi-turn load's requests that are
     * not a whole number of sessions): refused now, on every shard alike,
     * not when the case runs after the --start-at wait */
    if (!errs.len && n_shares) {
        tb_plan part = *plan;
        part.cases = shares;
        part.n_cases = n_shares;
        char *why = NULL;
        if (tb_plan_validate(&part, &why) != 0)
            tb_str_appendf(&errs, "--shard %u/%u: a shard's share of a case is refused by its plugin (every "
                           "shard's share is checked, so that the %u shards refuse alike):\n%s", k, n, n, why);
        free(why);
    }
    free(shares); /* copies: the cases own what they point to */
    if (errs.len) {
        *err = tb_str_take(&errs);
        return -1;
    }
    for (size_t i = 0; i < plan->n_cases; i++)
        if (!plan->cases[i].skip_reason)
            plan->cases[i] = share_of(&plan->cases[i], k, n);
    return 0;
}

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t tb_shard_wait(int64_t at_ns, volatile int *stop)
{
    struct timespec ts = {.tv_sec = at_ns / 1000000000LL, .tv_nsec = at_ns % 1000000000LL};
    /* a signal handler that sets *stop interrupts the sleep (EINTR) */
    while (!*stop && clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
    if (*stop)
        return -1;
    int64_t late = clock_ns(CLOCK_REALTIME) - at_ns;
    return late > 0 ? late : 0;
}

int64_t tb_shard_clock_offset(void)
{
    /* the monotonic read between two realtime reads: its midpoint */
    int64_t r0 = clock_ns(CLOCK_REALTIME), m = clock_ns(CLOCK_MONOTONIC), r1 = clock_ns(CLOCK_REALTIME);
    return r0 + (r1 - r0) / 2 - m;
}
