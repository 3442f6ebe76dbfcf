/* warnings.c — see warnings.h. */
#define _GNU_SOURCE
#include "warnings.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util.h"

static void add(tb_warnings *w, char *text /* taken */)
{
    w->text = tb_xrealloc(w->text, (w->n + 1) * sizeof *w->text);
    w->text[w->n++] = text;
}

void tb_warnings_free(tb_warnings *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->text[i]);
    free(w->text);
    w->text = NULL;
    w->n = 0;
}

int tb_noisy(double agg_cv, size_t n, int prompt_set)
{
    return n > 1 && isfinite(agg_cv) && agg_cv > TB_NOISE_CV && !prompt_set;
}

int tb_case_noisy(const tb_rsession *s, const tb_rcase *c)
{
    const tb_stats *agg = tb_rcase_metric(c, "agg_tps");
    return agg && tb_noisy(agg->cv, agg->n, s->has_prompt_set);
}

/* "3 of 40 requests failed (connect 2, http_5xx 1)", from the case's
 * request counts and its errors_CLASS rows (one value per repetition). */
static char *failed_requests(const tb_rcase *c)
{
    tb_str b = {0};
    tb_str_appendf(&b, "degraded: %d of %d requests failed", c->failed_requests, c->requests);
    const char *sep = " (";
    for (size_t k = 0; k < tb_n_error_classes; k++) {
        char name[64];
        snprintf(name, sizeof name, "errors_%s", tb_error_classes[k]);
        const tb_stats *st = tb_rcase_metric(c, name);
        long long total = st && st->n && isfinite(st->mean) ? llround(st->mean * (double)st->n) : 0;
        if (total > 0) {
            tb_str_appendf(&b, "%s%s %lld", sep, tb_error_classes[k], total);
            sep = ", ";
        }
    }
    if (strcmp(sep, ", ") == 0)
        tb_str_append(&b, ")");
    return tb_str_take(&b);
}

/* Do cases a and b differ in exactly one dimension or one swept option?
 * Then 1, with that difference in words appended to *what ("threshold
 * 0.9 vs 0.5", "steps 8 vs 2"). */
static int one_difference(const tb_rcase *a, const tb_rcase *b, tb_str *what)
{
    int n = 0;
    tb_str d = {0};
    for (int k = 0; k < TB_N_DIMS; k++) {
        if (tb_case_dim(&a->dims, (tb_dim)k) == tb_case_dim(&b->dims, (tb_dim)k))
            continue;
        char va[48], vb[48];
        tb_str_appendf(&d, "%s %s vs %s", tb_dim_defs[k].word, tb_case_dim_text(&a->dims, (tb_dim)k, va, sizeof va),
                       tb_case_dim_text(&b->dims, (tb_dim)k, vb, sizeof vb));
        n++;
    }
    if (n <= 1 && strcmp(a->options_json, b->options_json) != 0) {
        int k = tb_rjson_diff(a->options_json, b->options_json, "", "", " vs ", "", &d);
        n += k > 0 ? k : 2; /* not JSON objects: no telling what differs */
    }
    if (n == 1) { /* "threshold: 0.9 vs 0.5" from the JSON diff: no colon */
        char *colon = strstr(d.s, ": ");
        if (colon && !strchr(colon + 2, ':'))
            memmove(colon, colon + 1, strlen(colon + 1) + 1);
        tb_str_append(what, d.s);
    }
    tb_str_free(&d);
    return n == 1;
}

/* A speculative case: one with acceptance or drafting figures. */
static int is_speculative(const tb_rcase *c)
{
    const tb_stats *l = tb_rcase_metric(c, "acceptance_length"), *d = tb_rcase_metric(c, "draft_time_share");
    return (l && l->n) || (d && d->n);
}

/* Two cases of one backend that differ in one swept dimension or option,
 * where the one with more forwards per output token is the faster beyond
 * the noise (TB_NFE_MARGIN, warnings.h). */
static void contradictions(const tb_rsession *s, tb_warnings *w)
{
    for (size_t i = 0; i < s->n_cases; i++)
        for (size_t j = i + 1; j < s->n_cases; j++) {
            const tb_rcase *a = &s->cases[i], *b = &s->cases[j];
            if (a->backend != b->backend || strcmp(a->status, "ok") != 0 || strcmp(b->status, "ok") != 0)
                continue;
            /* Speculative decoding counts the target's forwards only: a
             * longer draft cuts them and may still be slower (the drafter's
             * own forwards are the price), which is no contradiction. */
            if (is_speculative(a) || is_speculative(b))
                continue;
            /* the mean over the calls, not the median: over a prompt set the
             * calls' values are few and discrete, and two cases whose
             * forwards differ often have the same median */
            const tb_stats *fa = tb_rcase_metric(a, "tokens_per_forward"), *fb = tb_rcase_metric(b, "tokens_per_forward");
            const tb_stats *ta = tb_rcase_metric(a, "agg_tps"), *tb = tb_rcase_metric(b, "agg_tps");
            double tpf_a = fa && fa->n ? fa->mean : NAN, tpf_b = fb && fb->n ? fb->mean : NAN;
            if (!(tpf_a > 0) || !(tpf_b > 0) || !ta || !tb || !ta->n || !tb->n || !isfinite(ta->median) ||
                !isfinite(tb->median))
                continue;
            if (tpf_a > tpf_b) { /* a: the one with more forwards per token */
                const tb_rcase *c = a;
                a = b;
                b = c;
                double t = tpf_a;
                tpf_a = tpf_b;
                tpf_b = t;
                const tb_stats *u = ta;
                ta = tb;
                tb = u;
            }
            if (!(tpf_b > tpf_a * (1 + TB_NFE_MARGIN)))
                continue;
            int by_ci = ta->n > 1 && tb->n > 1 && isfinite(ta->ci_lo) && isfinite(ta->ci_hi) && isfinite(tb->ci_lo) &&
                        isfinite(tb->ci_hi);
            if (!(by_ci ? ta->ci_lo > tb->ci_hi : ta->median > tb->median * (1 + TB_NOISE_CV)))
                continue;
            tb_str what = {0};
            if (!one_difference(a, b, &what)) {
                tb_str_free(&what);
                continue;
            }
            char *dims = tb_rcase_dims(s, a);
            add(w, tb_xasprintf("%s [%s]: %s: more forwards per output token (%.2f vs %.2f tokens/forward) yet "
                                "faster (%.1f vs %.1f tok/s aggregate, %s): the reverse of what more forwards "
                                "mean; check the machine (other load, clocks, thermals) and rerun before trusting "
                                "either",
                                s->backends[a->backend].label, dims, what.s, tpf_a, tpf_b, ta->median, tb->median,
                                by_ci ? "95% intervals apart" : "no intervals: more than the noise margin apart"));
            free(dims);
            tb_str_free(&what);
        }
}

/* The http backend's `turns` of case c: swept, else the backend's; 1 when
 * neither says. */
static int case_turns(const tb_rsession *s, const tb_rcase *c)
{
    const char *from[2] = {c->options_json, s->backends[c->backend].options_json};
    for (int k = 0; k < 2; k++) {
        cJSON *o = from[k] ? cJSON_Parse(from[k]) : NULL;
        const cJSON *t = cJSON_GetObjectItem(o, "turns");
        int turns = cJSON_IsNumber(t) ? t->valueint : cJSON_IsString(t) ? atoi(t->valuestring) : 0;
        cJSON_Delete(o);
        if (turns > 0)
            return turns;
    }
    return 1;
}

/* Did case c run a content-dependent sampler on random-token prompts?
 * The sampler: the case's swept `sampler`, else its backend's; content-
 * dependent when the backend's describe() lists it under
 * content_dependent_samplers (the plugin owns that fact). Random tokens:
 * synthetic prompts (prompt_tokens > 0), neither a prompt set nor a
 * dataset. Returns the sampler's name (malloc'd) or NULL. */
static char *random_prompts_sampler(const tb_rsession *s, const tb_rcase *c)
{
    const tb_rbackend *b = &s->backends[c->backend];
    if (strcmp(c->status, "ok") != 0 || c->dims.prompt_tokens == 0 || !b->info_json || !*b->info_json)
        return NULL;
    char *prompt = tb_rcase_prompt(s, c); /* a dataset's prompts: not random */
    int dataset = prompt != NULL;
    free(prompt);
    if (dataset)
        return NULL;
    cJSON *info = cJSON_Parse(b->info_json);
    const cJSON *list = cJSON_GetObjectItem(info, "content_dependent_samplers");
    char *found = NULL;
    const char *from[2] = {c->options_json, b->options_json};
    for (int k = 0; k < 2 && cJSON_IsArray(list) && !found; k++) {
        cJSON *o = from[k] ? cJSON_Parse(from[k]) : NULL;
        const cJSON *v = cJSON_GetObjectItem(o, "sampler");
        int named = cJSON_IsString(v); /* the case's sampler, when swept, is the one it ran */
        for (const cJSON *e = named ? list->child : NULL; e && !found; e = e->next)
            if (cJSON_IsString(e) && strcmp(e->valuestring, v->valuestring) == 0)
                found = tb_xstrdup(v->valuestring);
        cJSON_Delete(o);
        if (named)
            break;
    }
    cJSON_Delete(info);
    return found;
}

void tb_warnings_derive(const tb_rsession *s, tb_warnings *w)
{
    memset(w, 0, sizeof *w);
    if (strcmp(s->status, "completed") != 0)
        add(w, tb_xasprintf("the session is %s: some cases may be missing", s->status));
    for (size_t b = 0; b < s->n_backends; b++)
        if (s->backends[b].random_weights == 1)
            add(w, tb_xasprintf("%s: random weights: the figures measure speed only; outputs and any quality "
                                "score mean nothing", s->backends[b].label));
    /* The articles: fp32/fp16/bf16/int8 figures are not comparable. */
    for (size_t b = 1; b < s->n_backends; b++)
        if (*s->backends[b].dtype && *s->backends[0].dtype && strcmp(s->backends[b].dtype, s->backends[0].dtype)) {
            add(w, tb_xasprintf("backends run different dtypes (%s: %s, %s: %s): their speeds are not comparable",
                                s->backends[0].label, s->backends[0].dtype, s->backends[b].label,
                                s->backends[b].dtype));
            break;
        }
    if (s->warmup == 0)
        add(w, tb_xstrdup("no warm-up run: the first repetition includes initialisation and compilation"));
    /* measured calls of the smallest case that ran (a prompt-set pass is many) */
    size_t fewest = SIZE_MAX;
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_stats *a = tb_rcase_metric(&s->cases[i], "agg_tps");
        if (a && strcmp(s->cases[i].status, "ok") == 0 && a->n < fewest)
            fewest = a->n;
    }
    if (fewest < 10)
        add(w, tb_xasprintf("%zu measured calls in the smallest case: fewer than the 10 the articles ask for; "
                            "medians and p95 rest on few runs", fewest));
    if (s->has_prompt_set)
        add(w, tb_xstrdup("prompt set: every call runs different items, whose answers differ in length, so the "
                          "spread of per-call figures (CV) reflects the items as well as noise; no noise warnings"));
    /* per backend and TB_MISMATCH_*: requests, and cases with any; and
     * the requests held to their text's re-count, their counts and
     * re-counts summed */
    int(*mismatch)[TB_N_COUNT_MISMATCHES] = tb_xcalloc(s->n_backends + 1, sizeof *mismatch);
    int(*mismatch_cases)[TB_N_COUNT_MISMATCHES] = tb_xcalloc(s->n_backends + 1, sizeof *mismatch_cases);
    int64_t(*text)[3] = tb_xcalloc(s->n_backends + 1, sizeof *text);
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        const char *label = s->backends[c->backend].label;
        char *dims = tb_rcase_dims(s, c);
        if (strcmp(c->status, "ok") != 0)
            add(w, tb_xasprintf("%s %s [%s]: %s", label, c->status, dims, *c->error ? c->error : "(no reason)"));
        int failed_warned = strcmp(c->status, "ok") != 0;
        if (tb_case_noisy(s, c))
            add(w, tb_xasprintf("%s [%s]: noisy, aggregate tok/s CV %.1f%% > %.0f%%: check the environment "
                                "(other load, clocks, thermals) first",
                                label, dims, tb_rcase_metric(c, "agg_tps")->cv * 100, TB_NOISE_CV * 100));
        if (c->failed_requests && strcmp(c->status, "ok") == 0) {
            char *f = failed_requests(c);
            add(w, tb_xasprintf("%s [%s]: %s", label, dims, f));
            free(f);
            failed_warned = 1;
        }
        /* what each class of failure said, once: the server's own words
         * (a failed case's reason quotes its first already) */
        char *firsts = failed_warned ? tb_first_errors_text((const char *const *)c->first_error, 16,
                                                            strcmp(c->status, "ok") != 0 ? c->error : NULL)
                                     : NULL;
        for (char *line = firsts, *next; line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            add(w, tb_xasprintf("%s [%s]: %s", label, dims, line));
        }
        free(firsts);
        if (c->scrapes_failed > 0)
            add(w, tb_xasprintf("%s [%s]: telemetry: %lld of %lld scrapes of the metrics_url failed (first: %s): "
                                "the server's series are missing or partial for this case",
                                label, dims, (long long)c->scrapes_failed, (long long)c->scrapes,
                                c->scrape_error ? c->scrape_error : "no reason stored"));
        if (c->telemetry_unmatched)
            add(w, tb_xasprintf("%s [%s]: telemetry: metrics = %s matched no sample in any scrape of the "
                                "metrics_url: no points stored for it (a misspelt name, or one the server does not "
                                "serve)",
                                label, dims, c->telemetry_unmatched));
        /* Saturation is a ceiling on figures that were measured: a case
         * whose requests all failed (nothing listening: each fails at
         * once, and the loop spins) measured none. */
        const tb_stats *busy = tb_rcase_metric(c, "client_busy");
        if (strcmp(c->status, "ok") == 0 && busy && busy->n && isfinite(busy->median) &&
            busy->median >= TB_CLIENT_SATURATED_PCT)
            add(w, tb_xasprintf("%s [%s]: the client was saturated (client_busy %.0f%% >= %.0f%%): the figures "
                                "are the client's own ceiling, not the server's; give it more loops or cores "
                                "(loops = K, --shard K/N on more machines)",
                                label, dims, busy->median, TB_CLIENT_SATURATED_PCT));
        const tb_stats *sent = tb_rcase_metric(c, "sent_rate");
        double offered = c->dims.request_rate;
        /* An open loop under a concurrency cap: its requests spent on
         * average req/s x mean E2E in flight or waiting for a slot (over
         * each call's window, Little's law); more than the cap means some
         * waited: the sends went out later than sent_rate's schedule, whose
         * own spread is then beside the point (no warning of it). */
        const tb_stats *rps = tb_rcase_metric(c, "req_throughput"), *e2e = tb_rcase_metric(c, "e2e_ms");
        double in_system = rps && e2e && rps->n && e2e->n ? rps->median * e2e->mean * 1e-3 : NAN;
        int cap_held = offered > 0 && c->dims.concurrency > 0 && isfinite(in_system) &&
                       in_system > c->dims.concurrency * (1 + TB_SENT_RATE_TOL);
        if (cap_held)
            add(w, tb_xasprintf("%s [%s]: the concurrency cap held the load back: it achieved %.2f requests/s of "
                                "the offered %.2f (req/s), with at most %u in flight and on average %.1f in "
                                "flight or waiting for a slot; its sends went out later than scheduled, so "
                                "sent_rate (%.2f) is the schedule's rate, not the one sent, and its latencies count "
                                "the wait (docs/METRICS.md, \"Serving: HTTP endpoints and request loads\")",
                                label, dims, rps->median, offered, c->dims.concurrency, in_system,
                                sent && sent->n ? sent->median : NAN));
        /* (a multi-turn load's waves pause for their answers, which its
         * sent rate counts: no rate to hold it to) */
        /* A joined run whose shards' windows of a call lay apart
         * (shard.window_lag_ns, the join's measure): its rates are of a
         * load never sent at once; the schedule's spread is beside the
         * point then (no warning of it). */
        const tb_stats *wall = tb_rcase_metric(c, "wall_ms");
        int apart = s->shard_index < 0 && s->shard_count > 1 && s->shard_window_lag_ns > 0 && wall && wall->n &&
                    isfinite(wall->median) && s->shard_window_lag_ns * 1e-6 >= TB_SHARD_APART * wall->median;
        if (apart)
            add(w, tb_xasprintf("%s [%s]: joined from %lld shards whose windows lay up to %.1f ms apart (%.0f%% of "
                                "a call's median %.1f ms): its aggregate, request and sent rates are of a load "
                                "never sent at once, below the suite's (docs/METRICS.md, \"How simultaneous the "
                                "shards were\")",
                                label, dims, (long long)s->shard_count, s->shard_window_lag_ns * 1e-6,
                                100 * s->shard_window_lag_ns * 1e-6 / wall->median, wall->median));
        if (offered > 0 && !cap_held && !apart && sent && sent->n && isfinite(sent->median) &&
            fabs(sent->median / offered - 1) > TB_SENT_RATE_TOL && case_turns(s, c) == 1)
            add(w, tb_xasprintf("%s [%s]: the load was scheduled at %.2f requests/s, %.1f%% %s the offered %.2f "
                                "(sent_rate, median of %zu calls of %.0f requests): so few random arrivals did not "
                                "average out, and its figures describe the rate scheduled; give it more requests or "
                                "open_loop_duration (docs/METRICS.md, \"The length of an open-loop load\")",
                                label, dims, sent->median, 100 * fabs(sent->median / offered - 1),
                                sent->median > offered ? "above" : "below", offered, sent->n,
                                (double)c->requests / (double)sent->n));
        if (c->varying_outputs)
            add(w, tb_xasprintf("%s [%s]: %d prompt(s) produced different outputs in different repetitions "
                                "with the same seed: the speed measured is not of the same work",
                                label, dims, c->varying_outputs));
        char *adaptive = random_prompts_sampler(s, c);
        if (adaptive)
            add(w, tb_xasprintf("%s [%s]: sampler %s commits (or stops) as the model's confidence allows, but its "
                                "prompts were random tokens, which no model is confident about: the speed measured "
                                "is the slow worst case, not the speed on text; give it text prompts ([prompts] "
                                "file = data/text.jsonl, as suites/gpu-8b-text.ini does; docs/METRICS.md, "
                                "\"Content-dependent samplers\")",
                                label, dims, adaptive));
        free(adaptive);
        for (int k = 0; k < TB_N_COUNT_MISMATCHES; k++)
            if (c->count_mismatches[k]) {
                mismatch[c->backend][k] += c->count_mismatches[k];
                mismatch_cases[c->backend][k]++;
            }
        text[c->backend][0] += c->text_requests;
        text[c->backend][1] += c->text_count;
        text[c->backend][2] += c->text_recount;
        free(dims);
    }
    contradictions(s, w);
    /* What each failed check means, by TB_MISMATCH_*. Ids are what the count
     * counts: a difference is the count's own, warned of at once. A text's
     * re-count is the tokenizer's own split of it, which a model's tokens,
     * a server's tokenizer or a cut character may not match, request by
     * request, in either direction: a hint, warned of where the backend's
     * counts in all stray from their re-counts by more than
     * TB_COUNT_TEXT_MARGIN. */
    static const char *const mismatch_text[TB_N_COUNT_MISMATCHES] = {
        [TB_MISMATCH_OVER_IDS] = "count more output tokens than the output ids the backend returned: its "
                                 "tokens/s counts tokens it never returned",
        [TB_MISMATCH_UNDER_IDS] = "count fewer output tokens than the output ids the backend returned: its "
                                  "tokens/s leaves out tokens it generated",
        [TB_MISMATCH_OVER_TEXT] = "count more output tokens than their text re-tokenizes to: the count may hold "
                                  "tokens that are not in the text (tokens/s inflated), or the model's tokens are "
                                  "not the tokenizer's own split of the text, or the backend counts with another "
                                  "tokenizer",
        [TB_MISMATCH_UNDER_TEXT] = "count fewer output tokens than their text re-tokenizes to: the count may leave "
                                   "out tokens of the text (tokens/s understated), or the text holds pieces of "
                                   "characters (re-tokenized byte by byte), or the backend counts with another "
                                   "tokenizer",
    };
    for (size_t b = 0; b < s->n_backends; b++) {
        for (int k = TB_MISMATCH_OVER_IDS; k <= TB_MISMATCH_UNDER_IDS; k++)
            if (mismatch[b][k])
                add(w, tb_xasprintf("%s: %d requests in %d cases %s (docs/METRICS.md, \"Output-length check\")",
                                    s->backends[b].label, mismatch[b][k], mismatch_cases[b][k], mismatch_text[k]));
        double counted = (double)text[b][1], recounted = (double)text[b][2];
        if (!(recounted > 0) || fabs(counted - recounted) <= TB_COUNT_TEXT_MARGIN * recounted)
            continue;
        int k = counted > recounted ? TB_MISMATCH_OVER_TEXT : TB_MISMATCH_UNDER_TEXT;
        add(w, tb_xasprintf("%s: %lld requests returned text alone and %s: %.0f tokens counted in all "
                            "against %.0f re-counted (%+.1f%%; %d requests differ: %d above, %d below) "
                            "(docs/METRICS.md, \"Output-length check\")",
                            s->backends[b].label, (long long)text[b][0], mismatch_text[k], counted, recounted,
                            100 * (counted / recounted - 1),
                            mismatch[b][TB_MISMATCH_OVER_TEXT] + mismatch[b][TB_MISMATCH_UNDER_TEXT],
                            mismatch[b][TB_MISMATCH_OVER_TEXT], mismatch[b][TB_MISMATCH_UNDER_TEXT]));
    }
    free(mismatch);
    free(mismatch_cases);
    free(text);
}
