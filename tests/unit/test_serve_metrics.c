/* test_serve_metrics.c — serve/serve_metrics.c: the text `tokbench serve`
 * answers at GET /metrics. Every line is parsed: # HELP and # TYPE lines
 * by their shape (each metric's TYPE before its samples, once), samples
 * by the telemetry sampler's own parser (run/telemetry.c); each family's
 * names and type checked (counters end _total; a histogram's buckets are
 * cumulative, end at le="+Inf" equal to _count, with _sum); vLLM's names
 * where the meaning is the same; the label value escaped. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serve_metrics.h"
#include "telemetry.h"

/* The family a sample belongs to: its name less a histogram's suffix. */
static const char *type_of(char types[][2][128], int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        size_t l = strlen(types[i][0]);
        if (strcmp(name, types[i][0]) == 0)
            return types[i][1];
        if (strncmp(name, types[i][0], l) == 0 && strcmp(types[i][1], "histogram") == 0 &&
            (!strcmp(name + l, "_bucket") || !strcmp(name + l, "_sum") || !strcmp(name + l, "_count")))
            return types[i][1];
    }
    return NULL;
}

static double value_of(const tb_prom_sample *s, int n, const char *name, const char *labels)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0 && strcmp(s[i].labels, labels) == 0)
            return s[i].value;
    return -1;
}

static void test_text(void)
{
    tb_serve_stats st = {.running = 3, .waiting = 2, .slots = 4, .slots_used = 3, .prompt_tokens = 70,
                         .generation_tokens = 48, .ok = 5, .failed = 1, .gone = 2};
    tb_serve_stats_step(&st, 0.0005, 1); /* the first bucket */
    tb_serve_stats_step(&st, 0.02, 32);
    tb_serve_stats_step(&st, 0.02, 0); /* a step that carried none (its requests had ended) */
    tb_serve_stats_step(&st, 1000, 7); /* past every bound: +Inf only */
    tb_str b = {0};
    tb_serve_metrics_text(&st, "ar \"small\"\\x", &b);
    CHECK(b.len > 0 && b.s[b.len - 1] == '\n');

    char types[32][2][128];
    int n_types = 0, n_samples = 0, bad = 0;
    tb_prom_sample samples[64];
    char *save = NULL;
    for (char *line = strtok_r(b.s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[128], rest[256];
        if (strncmp(line, "# HELP ", 7) == 0) {
            CHECK(sscanf(line + 7, "%127s %255[^\n]", name, rest) == 2);
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            char type[64];
            CHECK(sscanf(line + 7, "%127s %63s", name, type) == 2);
            CHECK(!strcmp(type, "gauge") || !strcmp(type, "counter") || !strcmp(type, "histogram"));
            CHECK(type_of(types, n_types, name) == NULL); /* once */
            CHECK(n_types < 32);
            snprintf(types[n_types][0], 128, "%s", name);
            snprintf(types[n_types][1], 128, "%s", type);
            n_types++;
            continue;
        }
        char why[160];
        CHECK(n_samples < 64);
        int r = tb_prom_parse_line(line, strlen(line), &samples[n_samples], why, sizeof why);
        if (r != 1) {
            fprintf(stderr, "not a sample: %s (%s)\n", line, r < 0 ? why : "a comment");
            bad++;
            continue;
        }
        const char *t = type_of(types, n_types, samples[n_samples].name);
        CHECK(t != NULL); /* typed before its samples */
        if (t && !strcmp(t, "counter"))
            CHECK(strlen(samples[n_samples].name) > 6 &&
                  !strcmp(samples[n_samples].name + strlen(samples[n_samples].name) - 6, "_total"));
        CHECK(strncmp(samples[n_samples].labels, "model_name=\"ar \\\"small\\\"\\\\x\"", 28) == 0);
        n_samples++;
    }
    CHECK(bad == 0);
    const char *want[][2] = {{"vllm:num_requests_running", "gauge"},   {"vllm:num_requests_waiting", "gauge"},
                             {"tokbench_kv_slots", "gauge"},           {"tokbench_kv_slots_used", "gauge"},
                             {"vllm:prompt_tokens_total", "counter"},  {"vllm:generation_tokens_total", "counter"},
                             {"tokbench_requests_total", "counter"},   {"tokbench_step_duration_seconds", "histogram"},
                             {"tokbench_step_requests_total", "counter"}};
    CHECK(n_types == (int)(sizeof want / sizeof want[0]));
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *t = type_of(types, n_types, want[i][0]);
        CHECK(t && !strcmp(t, want[i][1]));
    }
    const char *m = "model_name=\"ar \\\"small\\\"\\\\x\"";
    char l[256];
#define V(name, extra) (snprintf(l, sizeof l, "%s%s", m, extra), value_of(samples, n_samples, name, l))
    CHECK(V("vllm:num_requests_running", "") == 3);
    CHECK(V("vllm:num_requests_waiting", "") == 2);
    CHECK(V("tokbench_kv_slots", "") == 4);
    CHECK(V("tokbench_kv_slots_used", "") == 3);
    CHECK(V("vllm:prompt_tokens_total", "") == 70);
    CHECK(V("vllm:generation_tokens_total", "") == 48);
    CHECK(V("tokbench_requests_total", ",outcome=\"ok\"") == 5);
    CHECK(V("tokbench_requests_total", ",outcome=\"failed\"") == 1);
    CHECK(V("tokbench_requests_total", ",outcome=\"gone\"") == 2);
    CHECK(V("tokbench_step_duration_seconds_bucket", ",le=\"0.001\"") == 1);
    CHECK(V("tokbench_step_duration_seconds_bucket", ",le=\"0.01\"") == 1);
    CHECK(V("tokbench_step_duration_seconds_bucket", ",le=\"0.025\"") == 3);
    CHECK(V("tokbench_step_duration_seconds_bucket", ",le=\"30\"") == 3);
    CHECK(V("tokbench_step_duration_seconds_bucket", ",le=\"+Inf\"") == 4);
    CHECK(V("tokbench_step_duration_seconds_count", "") == 4);
    CHECK(V("tokbench_step_requests_total", "") == 40); /* 1 + 32 + 0 + 7 */
    double sum = V("tokbench_step_duration_seconds_sum", "");
    CHECK(sum > 1000.04 && sum < 1000.041);
    /* buckets cumulative, in order */
    double last = -1;
    int n_buckets = 0;
    for (int i = 0; i < n_samples; i++)
        if (!strcmp(samples[i].name, "tokbench_step_duration_seconds_bucket")) {
            CHECK(samples[i].value >= last);
            last = samples[i].value;
            n_buckets++;
        }
    CHECK(n_buckets == TB_SERVE_STEP_BUCKETS + 1);
#undef V
    tb_str_free(&b);
}

int main(void)
{
    test_text();
    return check_done();
}
