/* test_telemetry.c — core/telemetry.c's pure parts: the Prometheus text
 * exposition format line by line (samples, labels with escapes, special
 * values, timestamps, comments; every malformed shape refused with a
 * reason, names and labels past their bounds refused, never cut), the
 * default filter (histogram buckets left out) and an explicit one, and
 * [telemetry] keys checked with file:line. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "suite.h"
#include "telemetry.h"

static int parse(const char *line, tb_prom_sample *s, char *why)
{
    return tb_prom_parse_line(line, strlen(line), s, why, 160);
}

static void test_samples(void)
{
    tb_prom_sample s;
    char why[160];
    CHECK(parse("vllm:num_requests_running 3", &s, why) == 1);
    CHECK_STR(s.name, "vllm:num_requests_running");
    CHECK_STR(s.labels, "");
    CHECK(s.value == 3);
    CHECK(parse("  http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000", &s, why) == 1);
    CHECK_STR(s.name, "http_requests_total");
    CHECK_STR(s.labels, "method=\"post\",code=\"200\"");
    CHECK(s.value == 1027);
    /* spaces inside the braces and a trailing comma, CRLF */
    CHECK(parse("m{ a = \"x\" , b=\"y\", } 1.5e3\r", &s, why) == 1);
    CHECK_STR(s.labels, "a=\"x\",b=\"y\"");
    CHECK(s.value == 1500);
    /* escapes stay escaped in the canonical form */
    CHECK(parse("m{path=\"C:\\\\dir\\\\\",msg=\"say \\\"hi\\\"\\n\"} 0", &s, why) == 1);
    CHECK_STR(s.labels, "path=\"C:\\\\dir\\\\\",msg=\"say \\\"hi\\\"\\n\"");
    CHECK(parse("m +Inf", &s, why) == 1 && isinf(s.value) && s.value > 0);
    CHECK(parse("m -Inf", &s, why) == 1 && isinf(s.value) && s.value < 0);
    CHECK(parse("m NaN", &s, why) == 1 && isnan(s.value));
    CHECK(parse("m{} -0.25", &s, why) == 1 && s.value == -0.25);
    /* nothing to keep */
    CHECK(parse("", &s, why) == 0);
    CHECK(parse("   ", &s, why) == 0);
    CHECK(parse("# HELP m help text", &s, why) == 0);
    CHECK(parse("# TYPE m gauge", &s, why) == 0);
    CHECK(parse("# EOF", &s, why) == 0);
}

static void test_malformed(void)
{
    tb_prom_sample s;
    char why[160];
    static const struct {
        const char *line, *why;
    } bad[] = {
        {"m", "expected a space and a value"},
        {"m ", "is not a number"},
        {"m abc", "is not a number"},
        {"m Infinity", "is not a number"}, /* strtod's spelling, not the format's */
        {"m nan", "is not a number"},
        {"m 0x10", "is not a number"},
        {"m 1 2 3", "unexpected text after the value"},
        {"m 1 x", "unexpected text after the value"},
        {"m 1 -", "unexpected text after the value"},
        {"9m 1", "expected a metric name"},
        {"{a=\"b\"} 1", "expected a metric name"},
        {"m{a=b} 1", "expected label=\"value\""},
        {"m{a=\"b} 1", "without its closing quote"},
        {"m{a=\"b\\x\"} 1", "bad escape"},
        {"m{a=\"b\" c=\"d\"} 1", "expected , or }"},
        {"m{=\"b\"} 1", "expected label=\"value\""},
        {"m{a=\"b\"}1", "expected a space and a value"},
        {"m{a=\"\x01\"} 1", "control character"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        int r = parse(bad[i].line, &s, why);
        CHECK(r == -1);
        if (r != -1 || !strstr(why, bad[i].why))
            fprintf(stderr, "line \"%s\": got %d \"%s\", want -1 \"%s\"\n", bad[i].line, r, why, bad[i].why);
    }
    /* bounds: a name or labels past the buffers are refused, not cut */
    char line[4096];
    memset(line, 'a', 300);
    strcpy(line + 300, " 1");
    CHECK(parse(line, &s, why) == -1 && strstr(why, "metric name longer"));
    strcpy(line, "m{a=\"");
    memset(line + 5, 'x', 2000);
    strcpy(line + 2005, "\"} 1");
    CHECK(parse(line, &s, why) == -1 && strstr(why, "labels longer"));
    /* only len bytes are read: a line cut inside its value */
    CHECK(tb_prom_parse_line("m 12345", 4, &s, why, sizeof why) == 1 && s.value == 12);
    CHECK(tb_prom_parse_line("m{a=\"b\"} 1", 6, &s, why, sizeof why) == -1);
}

static void test_filter(void)
{
    tb_telemetry_config all = {0};
    CHECK(tb_telemetry_keep(&all, "vllm:num_requests_running"));
    CHECK(tb_telemetry_keep(&all, "vllm:e2e_request_latency_seconds_sum"));
    CHECK(tb_telemetry_keep(&all, "vllm:e2e_request_latency_seconds_count"));
    CHECK(!tb_telemetry_keep(&all, "vllm:e2e_request_latency_seconds_bucket"));
    char *names[] = {"a", "vllm:gpu_cache_usage_perc"};
    tb_telemetry_config some = {.metrics = names, .n_metrics = 2};
    CHECK(tb_telemetry_keep(&some, "vllm:gpu_cache_usage_perc"));
    CHECK(tb_telemetry_keep(&some, "a"));
    CHECK(!tb_telemetry_keep(&some, "ab"));
    CHECK(!tb_telemetry_keep(&some, "vllm:num_requests_running"));
}

/* A suite with this [telemetry] text; its config or error. */
static int config(const char *telemetry, tb_telemetry_config *cfg, char **err)
{
    char path[] = "/tmp/tb_telemetry_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "[suite]\nname = t\n[backend a]\nplugin = null\n[telemetry]\n%s", telemetry);
    fclose(f);
    tb_suite s;
    char *e = NULL;
    int rc = -1;
    *err = NULL;
    if (tb_suite_load(path, &s, &e) != 0) {
        *err = e;
    } else {
        rc = tb_telemetry_config_parse(&s, cfg, err);
        tb_suite_free(&s);
    }
    unlink(path);
    return rc;
}

static void test_config(void)
{
    tb_telemetry_config c;
    char *err;
    CHECK(config("metrics_url = http://h:8000/metrics\nperiod = 0.5\nmetrics = a, b:c\nnvml = off\ntimeout = 3\n",
                 &c, &err) == 0);
#ifdef TB_HAVE_CURL
    CHECK(c.enabled && c.metrics_url && strcmp(c.metrics_url, "http://h:8000/metrics") == 0);
#endif
    CHECK(c.period_s == 0.5 && c.timeout_s == 3 && c.nvml == 0 && c.n_metrics == 2);
    CHECK(c.n_metrics == 2 && strcmp(c.metrics[1], "b:c") == 0);
    tb_telemetry_config_free(&c);
    CHECK(config("nvml = off\n", &c, &err) == 0 && !c.enabled); /* nothing to sample */
    tb_telemetry_config_free(&c);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"period = 0\n", ":6: period: expected seconds between samples, 0.05 to 3600, got \"0\""},
        {"period = soon\n", ":6: period: expected seconds"},
        {"timeout = -1\n", ":6: timeout: expected seconds one scrape may take"},
        {"nvml = yes\n", ":6: nvml: expected auto"},
        {"metrics = a b\n", ":6: metrics: \"a b\" is not a Prometheus metric name"},
        {"metrics = 1a\n", "is not a Prometheus metric name"},
        {"colour = red\n", ":6: colour: unknown key in [telemetry]"},
#ifdef TB_HAVE_CURL
        {"metrics_url = ftp://h/metrics\n", ":6: metrics_url: expected http://HOST[:PORT]/PATH"},
#endif
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = config(bad[i].text, &c, &err);
        CHECK(rc == -1 && err && strstr(err, bad[i].want));
        if (rc != -1 || !err || !strstr(err, bad[i].want))
            fprintf(stderr, "[telemetry] %s: got \"%s\", want \"%s\"\n", bad[i].text, err ? err : "(ok)", bad[i].want);
        free(err);
    }
}

int main(void)
{
    test_samples();
    test_malformed();
    test_filter();
    test_config();
    return check_done();
}
