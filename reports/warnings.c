/* warnings.c — see warnings.h. */
#define _GNU_SOURCE
#include "warnings.h"

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
    int *mismatch = tb_xcalloc(s->n_backends + 1, sizeof(int)), *mismatch_cases = tb_xcalloc(s->n_backends + 1, sizeof(int));
    for (size_t i = 0; i < s->n_cases; i++) {
        const tb_rcase *c = &s->cases[i];
        const char *label = s->backends[c->backend].label;
        char *dims = tb_rcase_dims(s, c);
        if (strcmp(c->status, "ok") != 0)
            add(w, tb_xasprintf("%s %s [%s]: %s", label, c->status, dims, *c->error ? c->error : "(no reason)"));
        if (tb_case_noisy(s, c))
            add(w, tb_xasprintf("%s [%s]: noisy, aggregate tok/s CV %.1f%% > %.0f%%: check the environment "
                                "(other load, clocks, thermals) first",
                                label, dims, tb_rcase_metric(c, "agg_tps")->cv * 100, TB_NOISE_CV * 100));
        if (c->failed_requests && strcmp(c->status, "ok") == 0) {
            char *f = failed_requests(c);
            add(w, tb_xasprintf("%s [%s]: %s", label, dims, f));
            free(f);
        }
        const tb_stats *busy = tb_rcase_metric(c, "client_busy");
        if (busy && busy->n && isfinite(busy->median) && busy->median >= TB_CLIENT_SATURATED_PCT)
            add(w, tb_xasprintf("%s [%s]: the client was saturated (client_busy %.0f%% >= %.0f%%): the figures "
                                "are the client's own ceiling, not the server's; give it more loops or cores "
                                "(loops = K, --shard K/N on more machines)",
                                label, dims, busy->median, TB_CLIENT_SATURATED_PCT));
        const tb_stats *sent = tb_rcase_metric(c, "sent_rate");
        double offered = c->dims.request_rate;
        if (offered > 0 && sent && sent->n && isfinite(sent->median) &&
            fabs(sent->median / offered - 1) > TB_SENT_RATE_TOL)
            add(w, tb_xasprintf("%s [%s]: the load sent %.2f requests/s, %.1f%% %s the offered %.2f (sent_rate, "
                                "median of %zu calls of %.0f requests): so few random arrivals did not average "
                                "out, and its figures describe the rate sent; give it more requests or "
                                "open_loop_duration (docs/METRICS.md, \"The length of an open-loop load\")",
                                label, dims, sent->median, 100 * fabs(sent->median / offered - 1),
                                sent->median > offered ? "above" : "below", offered, sent->n,
                                (double)c->requests / (double)sent->n));
        if (c->varying_outputs)
            add(w, tb_xasprintf("%s [%s]: %d prompt(s) produced different outputs in different repetitions "
                                "with the same seed: the speed measured is not of the same work",
                                label, dims, c->varying_outputs));
        if (c->count_mismatches) {
            mismatch[c->backend] += c->count_mismatches;
            mismatch_cases[c->backend]++;
        }
        free(dims);
    }
    for (size_t b = 0; b < s->n_backends; b++)
        if (mismatch[b])
            add(w, tb_xasprintf("%s: %d requests in %d cases re-count (detokenize -> tokenize) to a different "
                                "output length than the engine reports%s",
                                s->backends[b].label, mismatch[b], mismatch_cases[b],
                                s->backends[b].random_weights == 1
                                    ? " (random weights emit arbitrary token sequences, which rarely survive the "
                                      "round trip)"
                                    : ": tokens/s may be inflated; see docs/METRICS.md"));
    free(mismatch);
    free(mismatch_cases);
}
