/* judge.c — see judge.h. */
#define _GNU_SOURCE
#include "judge.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "stats.h"
#include "util.h"
#include "worker_client.h"

typedef struct answer {
    const tb_stored_answer *a;
    size_t pair; /* index of its unique (item, text) pair */
} answer;

static int by_pair(const void *a, const void *b)
{
    const tb_stored_answer *x = (*(const answer *const *)a)->a, *y = (*(const answer *const *)b)->a;
    if (x->prompt_idx != y->prompt_idx)
        return x->prompt_idx < y->prompt_idx ? -1 : 1;
    return strcmp(x->text, y->text);
}

/* Is item i judged: judge_tags empty, or one of them among its tags? */
static int judged_item(const tb_plan *plan, int i)
{
    const tb_list *want = &plan->suite->prompts.judge_tags;
    if (!want->n)
        return 1;
    if (i < 0 || (size_t)i >= plan->n_prompts)
        return 0;
    const tb_prompt *it = &plan->prompts.items[i];
    for (int t = 0; t < it->n_tags; t++)
        for (size_t k = 0; k < want->n; k++)
            if (strcmp(it->tags[t], want->items[k]) == 0)
                return 1;
    return 0;
}

/* Run the judge's worker over the unique pairs; out[n_pairs]. 0 or -1. */
static int run_worker(const tb_plan *plan, answer **uniq, size_t n_pairs, tb_wire_loglik *out,
                      volatile int *interrupted, char **err)
{
    size_t case_idx = SIZE_MAX;
    for (size_t i = 0; i < plan->n_cases && case_idx == SIZE_MAX; i++)
        if (plan->cases[i].backend == plan->judge && !plan->cases[i].skip_reason)
            case_idx = i;
    const char *label = plan->backends[plan->judge].sb->label;
    /* its first case, also when --filter removed it (a kept later case may
     * differ in a load option) */
    if (plan->has_judge_load && (case_idx == SIZE_MAX || plan->judge_load.ordinal < plan->cases[case_idx].ordinal))
        case_idx = TB_WIRE_JUDGE_LOAD;
    if (case_idx == SIZE_MAX) {
        *err = tb_xasprintf("judge %s: it has no case to take its load options from (all skipped)", label);
        return -1;
    }
    tb_wire_judge h = {.case_index = (uint32_t)case_idx, .n = (uint32_t)n_pairs};
    tb_str msg = {0};
    tb_str_appendn(&msg, (const char *)&h, sizeof h);
    for (size_t i = 0; i < n_pairs; i++) {
        const tb_stored_answer *u = uniq[i]->a;
        const char *ctx = plan->suite->prompts.judge_context ? plan->prompts.items[u->prompt_idx].prompt : "";
        tb_str_appendn(&msg, ctx, strlen(ctx) + 1);
        tb_str_appendn(&msg, u->text, strlen(u->text) + 1);
    }
    tb_worker_client wc;
    tb_wc_init(&wc, plan, plan->judge, interrupted);
    char *why = NULL;
    tb_wc_result r = tb_wc_start(&wc, &why);
    if (r == TB_WC_OK)
        r = tb_wc_send(&wc, TB_MSG_JUDGE, msg.s, msg.len, &why);
    int reused;
    if (r == TB_WC_OK)
        r = tb_wc_await_loaded(&wc, &reused, NULL, &why);
    tb_wire_frame f;
    static const uint32_t judged = TB_MSG_JUDGED;
    if (r == TB_WC_OK)
        r = tb_wc_await(&wc, tb_now_ns(), &judged, 1, &f, &why);
    int rc = -1;
    if (r == TB_WC_OK && f.len == n_pairs * sizeof *out) {
        memcpy(out, f.payload, f.len);
        rc = 0;
    } else {
        *err = tb_xasprintf("judge %s: %s", label, r == TB_WC_OK ? "malformed answer from the backend process" : why);
    }
    free(why);
    tb_wc_free(&wc);
    tb_str_free(&msg);
    return rc;
}

/* Per answer its nll and perplexity; per case the judge_ppl statistics
 * over its scored answers; stored in one transaction. 0, or -1 with *err. */
static int store_scores(tb_store *st, const tb_plan *plan, const answer *a, size_t n, const tb_wire_loglik *res,
                        char **err)
{
    tb_judge_score *sc = tb_xcalloc(n ? n : 1, sizeof *sc);
    int64_t *case_ids = tb_xcalloc(n ? n : 1, sizeof *case_ids);
    tb_metric_record *rows = tb_xcalloc(n ? n : 1, sizeof *rows);
    double *vals = tb_xcalloc(n ? n : 1, sizeof *vals);
    size_t n_sc = 0, n_rows = 0, nv = 0;
    for (size_t i = 0; i < n; i++) {
        const tb_wire_loglik *r = &res[a[i].pair];
        if (r->status == 0 && r->n_tokens > 0) {
            double nll = -r->sum_logprob / r->n_tokens;
            sc[n_sc++] = (tb_judge_score){.request_id = a[i].a->request_id, .nll = nll, .ppl = exp(nll)};
            if (a[i].a->scored)
                vals[nv++] = exp(nll);
        }
        /* the case's row once its last answer is in */
        if (i + 1 == n || a[i + 1].a->case_id != a[i].a->case_id) {
            if (nv) {
                case_ids[n_rows] = a[i].a->case_id;
                rows[n_rows] = (tb_metric_record){.name = "judge_ppl", .unit = tb_metric_unit("judge_ppl")};
                tb_stats_compute(vals, nv, plan->suite->seed, &rows[n_rows].st);
                n_rows++;
            }
            nv = 0;
        }
    }
    char *why = NULL;
    int rc = tb_store_judge(st, sc, n_sc, case_ids, rows, n_rows, &why);
    if (rc != 0) {
        *err = tb_xasprintf("judge %s: %s", plan->backends[plan->judge].sb->label, why);
        free(why);
    }
    free(sc);
    free(case_ids);
    free(rows);
    free(vals);
    return rc;
}

int tb_judge_session(const tb_plan *plan, tb_store *st, int64_t session, volatile int *interrupted,
                     tb_progress *progress, char **err)
{
    if (plan->judge == SIZE_MAX || !plan->n_prompts)
        return 0;
    const char *label = plan->backends[plan->judge].sb->label;
    tb_stored_answer *stored;
    size_t n_stored;
    char *why = NULL;
    if (tb_store_answers(st, session, &stored, &n_stored, &why) != 0) {
        *err = tb_xasprintf("judge %s: cannot read the answers: %s", label, why);
        free(why);
        return -1;
    }
    answer *a = tb_xcalloc(n_stored ? n_stored : 1, sizeof *a);
    size_t n = 0;
    for (size_t i = 0; i < n_stored; i++)
        if (judged_item(plan, stored[i].prompt_idx))
            a[n++].a = &stored[i];
    if (!n) {
        free(a);
        tb_stored_answers_free(stored, n_stored);
        return 0;
    }
    /* unique (item, text) pairs */
    answer **order = tb_xcalloc(n, sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = &a[i];
    qsort(order, n, sizeof *order, by_pair);
    answer **uniq = tb_xcalloc(n, sizeof *uniq);
    size_t n_pairs = 0;
    for (size_t i = 0; i < n; i++) {
        if (!n_pairs || by_pair(&uniq[n_pairs - 1], &order[i]) != 0)
            uniq[n_pairs++] = order[i];
        order[i]->pair = n_pairs - 1;
    }
    if (progress) { /* the judge may take a while: say what it does first */
        char *msg = tb_xasprintf("tokbench: judge %s: scoring %zu answers (%zu distinct)", label, n, n_pairs);
        tb_progress_note(progress, msg);
        free(msg);
    }
    tb_wire_loglik *res = tb_xcalloc(n_pairs, sizeof *res);
    int rc = run_worker(plan, uniq, n_pairs, res, interrupted, err);
    if (rc == 0)
        rc = store_scores(st, plan, a, n, res, err);
    free(res);
    free(uniq);
    free(order);
    free(a);
    tb_stored_answers_free(stored, n_stored);
    return rc;
}
