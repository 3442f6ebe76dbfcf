/* plugin_host.h — an in-process host for the tests that link a backend
 * plugin's source in (its tokbench_backend_entry is the plugin's): a
 * monotonic clock, logs dropped, never cancelled, and the tokens emitted
 * counted per request index (test_emitted[], up to TEST_HOST_REQUESTS
 * requests; the test zeroes it). And the plugin's declared options with
 * some of them set by name.
 *
 * Header-only, static: each test includes it once. */
#ifndef TB_TEST_PLUGIN_HOST_H
#define TB_TEST_PLUGIN_HOST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tokbench/backend.h>

const tb_backend_ops *tokbench_backend_entry(void);

#define TEST_HOST_REQUESTS 16
static uint32_t test_emitted[TEST_HOST_REQUESTS];

static int64_t test_host_now(const tb_host *h)
{
    (void)h;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void test_host_log(const tb_host *h, tb_log_level level, const char *fmt, ...)
{
    (void)h, (void)level, (void)fmt;
}

static void test_host_emit(const tb_host *h, uint32_t r, uint32_t n, int64_t t)
{
    (void)h, (void)t;
    if (r < TEST_HOST_REQUESTS)
        test_emitted[r] += n;
}

static int test_host_cancelled(const tb_host *h)
{
    (void)h;
    return 0;
}

static void test_host_emit_output(const tb_host *h, uint32_t r, uint32_t n, int64_t t, const int32_t *ids,
                                  const char *text, size_t len)
{
    (void)ids, (void)text, (void)len;
    test_host_emit(h, r, n, t);
}

static const tb_host test_host = {
    .struct_size = sizeof(tb_host),
    .abi_major = TB_ABI_MAJOR,
    .now_ns = test_host_now,
    .log = test_host_log,
    .emit = test_host_emit,
    .cancelled = test_host_cancelled,
    .emit_output = test_host_emit_output,
};

/* One option set by a test: its declared name, its value as text. */
typedef struct test_option {
    const char *name, *text;
} test_option;

/* v[0..returned): every option ops declares (at most max), at its default
 * unless set[0..n_set) names it; .i and .f read from the text (a bool's
 * .i: 1 for "true" or "1"). */
static uint32_t test_options(const tb_backend_ops *ops, const test_option *set, size_t n_set, tb_option_value *v,
                             uint32_t max)
{
    uint32_t n = ops->n_options < max ? ops->n_options : max;
    for (uint32_t i = 0; i < n; i++) {
        const tb_option_decl *d = &ops->options[i];
        const char *text = d->default_value;
        for (size_t k = 0; k < n_set; k++)
            if (strcmp(d->name, set[k].name) == 0)
                text = set[k].text;
        v[i] = (tb_option_value){.name = d->name, .text = text};
        v[i].i = d->type == TB_OPT_BOOL ? strcmp(text, "true") == 0 || strcmp(text, "1") == 0
                                        : strtoll(text, NULL, 10);
        v[i].f = d->type == TB_OPT_FLOAT ? strtod(text, NULL) : (double)v[i].i;
    }
    return n;
}

#endif
