/* serve_metrics.c — see serve_metrics.h. */
#include "serve_metrics.h"

#include <stdio.h>
#include <string.h>

static const double step_le[TB_SERVE_STEP_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1,     2.5,  5,     10,   30};

void tb_serve_stats_step(tb_serve_stats *st, double seconds, uint32_t requests)
{
    int i = 0;
    while (i < TB_SERVE_STEP_BUCKETS && seconds > step_le[i])
        i++;
    st->step_bucket[i]++;
    st->step_sum_s += seconds;
    st->step_requests += requests;
}

/* A label value as the format escapes it: backslash, quote, line feed. */
static void label_value(tb_str *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            tb_str_appendf(b, "\\%c", *s);
        else if (*s == '\n')
            tb_str_append(b, "\\n");
        else
            tb_str_appendn(b, s, 1);
    }
}

static void head(tb_str *b, const char *name, const char *type, const char *help)
{
    tb_str_appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{model_name="..."[,extra]} value */
static void sample(tb_str *b, const char *name, const char *model, const char *extra, const char *value)
{
    tb_str_appendf(b, "%s{model_name=\"", name);
    label_value(b, model);
    tb_str_appendf(b, "\"%s%s} %s\n", extra ? "," : "", extra ? extra : "", value);
}

static void sample_u(tb_str *b, const char *name, const char *model, const char *extra, uint64_t v)
{
    char t[32];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sample(b, name, model, extra, t);
}

void tb_serve_metrics_text(const tb_serve_stats *st, const char *model, tb_str *out)
{
    head(out, "vllm:num_requests_running", "gauge", "Requests in the backend (a slot or the running batch).");
    sample_u(out, "vllm:num_requests_running", model, NULL, st->running);
    head(out, "vllm:num_requests_waiting", "gauge", "Requests waiting for a slot or a batch.");
    sample_u(out, "vllm:num_requests_waiting", model, NULL, st->waiting);
    head(out, "tokbench_kv_slots", "gauge", "Slots of the stepped session (0: static batches).");
    sample_u(out, "tokbench_kv_slots", model, NULL, st->slots);
    head(out, "tokbench_kv_slots_used", "gauge", "Slots holding a request (each holds its whole context).");
    sample_u(out, "tokbench_kv_slots_used", model, NULL, st->slots_used);
    head(out, "vllm:prompt_tokens_total", "counter", "Prompt tokens of the requests that ended well.");
    sample_u(out, "vllm:prompt_tokens_total", model, NULL, st->prompt_tokens);
    head(out, "vllm:generation_tokens_total", "counter", "Completion tokens of the requests that ended well.");
    sample_u(out, "vllm:generation_tokens_total", model, NULL, st->generation_tokens);
    head(out, "tokbench_requests_total", "counter", "Requests that ended: ok, failed, or gone (the client left).");
    sample_u(out, "tokbench_requests_total", model, "outcome=\"ok\"", st->ok);
    sample_u(out, "tokbench_requests_total", model, "outcome=\"failed\"", st->failed);
    sample_u(out, "tokbench_requests_total", model, "outcome=\"gone\"", st->gone);
    const char *h = "tokbench_step_duration_seconds";
    head(out, h, "histogram", "One step of the stepped session, sent to answered (continuous batching).");
    uint64_t n = 0;
    char name[64], le[48], v[48];
    snprintf(name, sizeof name, "%s_bucket", h);
    for (int i = 0; i <= TB_SERVE_STEP_BUCKETS; i++) {
        n += st->step_bucket[i];
        if (i < TB_SERVE_STEP_BUCKETS)
            snprintf(le, sizeof le, "le=\"%g\"", step_le[i]);
        else
            snprintf(le, sizeof le, "le=\"+Inf\"");
        sample_u(out, name, model, le, n);
    }
    snprintf(name, sizeof name, "%s_sum", h);
    snprintf(v, sizeof v, "%.9g", st->step_sum_s);
    sample(out, name, model, NULL, v);
    snprintf(name, sizeof name, "%s_count", h);
    sample_u(out, name, model, NULL, n);
    head(out, "tokbench_step_requests_total", "counter",
         "The requests each step carried, summed: over the steps' count, the batch's mean size.");
    sample_u(out, "tokbench_step_requests_total", model, NULL, st->step_requests);
}
