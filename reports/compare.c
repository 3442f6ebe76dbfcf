/* compare.c — see compare.h. */
#define _GNU_SOURCE
#include "compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mannwhitney.h"
#include "metrics.h"
#include "reader.h"
#include "rsession.h"
#include "stats.h"
#include "text_table.h"
#include "util.h"

static const char *const default_metrics[] = {"agg_tps", "req_tps", "ttft_ms", "e2e_ms"};

const char *tb_compare_metrics(void)
{
    static char names[256]; /* the reader's sample sources, "a, b, ..." */
    if (!names[0])
        for (size_t i = 0, at = 0; i < tb_n_sample_sources && at < sizeof names; i++)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", tb_sample_sources[i].name);
    return names;
}

static const tb_sample_source *find_source(const char *name)
{
    for (size_t i = 0; i < tb_n_sample_sources; i++)
        if (strcmp(tb_sample_sources[i].name, name) == 0)
            return &tb_sample_sources[i];
    return NULL;
}

int tb_compare_gated(const tb_compare_opts *o)
{
    return isfinite(o->fail_pct) || isfinite(o->fail_acc_pp) || isfinite(o->fail_err_rate) ||
           isfinite(o->fail_p99_ttft_pct);
}

/* The gates beyond speed for one pair of ok cases; notes what fails. */
static void quality_gates(const tb_compare_opts *o, const tb_rcase *ca, const tb_rcase *cb, const char *backend,
                          const char *dims, tb_str *notes, tb_compare_result *res)
{
    const tb_stats *acc_a = tb_rcase_metric(ca, "accuracy"), *acc_b = tb_rcase_metric(cb, "accuracy");
    if (isfinite(o->fail_acc_pp) && acc_a && acc_b && isfinite(acc_a->median) && isfinite(acc_b->median)) {
        double drop_pp = (acc_a->median - acc_b->median) * 100;
        if (drop_pp > o->fail_acc_pp) {
            res->regressions++;
            tb_str_appendf(notes, "  %s [%s]: accuracy %.1f%% -> %.1f%% (-%.1f points, more than %.3g)\n", backend,
                           dims, acc_a->median * 100, acc_b->median * 100, drop_pp, o->fail_acc_pp);
        }
    }
    if (isfinite(o->fail_err_rate) && cb->requests > 0) {
        double rate = (double)cb->failed_requests / cb->requests;
        if (rate > o->fail_err_rate) {
            res->regressions++;
            tb_str_appendf(notes, "  %s [%s]: error rate %.3g in B (%d of %d requests), above %.3g\n", backend, dims,
                           rate, cb->failed_requests, cb->requests, o->fail_err_rate);
        }
    }
    const tb_stats *ta = tb_rcase_metric(ca, "ttft_ms"), *tb = tb_rcase_metric(cb, "ttft_ms");
    if (isfinite(o->fail_p99_ttft_pct) && ta && tb && isfinite(ta->p99) && isfinite(tb->p99) && ta->p99 > 0) {
        double up_pct = (tb->p99 / ta->p99 - 1) * 100;
        if (up_pct > o->fail_p99_ttft_pct) {
            res->regressions++;
            tb_str_appendf(notes, "  %s [%s]: p99 TTFT %.3g ms -> %.3g ms (+%.1f%%, more than %.3g%%)\n", backend,
                           dims, ta->p99, tb->p99, up_pct, o->fail_p99_ttft_pct);
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, size_t n)
{
    if (!n)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return tb_percentile_sorted(v, n, 50);
}

static int find_backend(const tb_rsession *s, const char *label, size_t *out)
{
    for (size_t b = 0; b < s->n_backends; b++)
        if (strcmp(s->backends[b].label, label) == 0) {
            *out = b;
            return 0;
        }
    return -1;
}

static char *backend_list(const tb_rsession *s)
{
    tb_str b = {0};
    for (size_t i = 0; i < s->n_backends; i++)
        tb_str_appendf(&b, "%s%s", i ? ", " : "", s->backends[i].label);
    return tb_str_take(&b);
}

/* Lines "IND  KEY: A vs B" for the keys the objects at path_a of json_a
 * and path_b of json_b differ in (nothing when a side has no JSON). */
static void diff_part(const char *json_a, const char *const *path_a, const char *json_b, const char *const *path_b,
                      size_t depth, const char *ind, const char *prefix, tb_str *out)
{
    char *pa = tb_rjson_part(json_a, path_a, depth), *pb = tb_rjson_part(json_b, path_b, depth);
    if (pa && pb)
        tb_rjson_diff(pa, pb, ind, prefix, " vs ", "\n", out);
    free(pa);
    free(pb);
}

/* Conditions of two sessions that make them not comparable, one line
 * each, indented by `ind` (nothing when a is b). */
static void session_differences(const tb_rsession *a, const tb_rsession *b, const char *ind, tb_str *out)
{
    if (a != b) {
        const char *fa = NULL, *fb = NULL;
        for (size_t i = 0; i < a->machine.n; i++)
            if (strcmp(a->machine.v[i].key, "fingerprint") == 0)
                fa = a->machine.v[i].value;
        for (size_t i = 0; i < b->machine.n; i++)
            if (strcmp(b->machine.v[i].key, "fingerprint") == 0)
                fb = b->machine.v[i].value;
        if (fa && fb && strcmp(fa, fb) != 0)
            tb_str_appendf(out, "%smachine: %s vs %s (different hardware or software: not a like-for-like run)\n",
                           ind, a->hostname, b->hostname);
        char wa[64], wb[64];
        tb_rshard_words(a->shard_index, a->shard_count, wa, sizeof wa);
        tb_rshard_words(b->shard_index, b->shard_count, wb, sizeof wb);
        if (strcmp(wa, wb) != 0)
            tb_str_appendf(out, "%sshards: %s vs %s (the load sent from other clients: not a like-for-like run)\n",
                           ind, wa, wb);
        if (strcmp(a->git_commit, b->git_commit) != 0)
            tb_str_appendf(out, "%stokbench commit: %s vs %s\n", ind, a->git_commit, b->git_commit);
        if (strcmp(a->suite_sha256, b->suite_sha256) != 0)
            tb_str_appendf(out, "%ssuite: sha256 %.12s vs %.12s\n", ind, a->suite_sha256, b->suite_sha256);
        /* What the suites resolved to (after includes and ${ENV}): the
         * hash, then the suite's and the prompt set's settings that differ;
         * the backends' below. */
        if (*a->config_sha256 && *b->config_sha256 && strcmp(a->config_sha256, b->config_sha256) != 0) {
            tb_str_appendf(out, "%sconfiguration: sha256 %.12s vs %.12s\n", ind, a->config_sha256,
                           b->config_sha256);
            char *ind2 = tb_xasprintf("%s  ", ind);
            static const char *const suite[] = {"suite"}, *const prompts[] = {"prompts"};
            diff_part(a->config_json, suite, b->config_json, suite, 1, ind2, "suite ", out);
            diff_part(a->config_json, prompts, b->config_json, prompts, 1, ind2, "prompt set ", out);
            free(ind2);
        }
    }
}

/* The same for backend ba of session a and bb of b: what they loaded and
 * ran with, every option that differs, and the values their matrix
 * swept (from each session's configuration; sessions before schema 6
 * have none). */
static void backend_differences(const tb_rsession *a, const tb_rsession *b, const tb_rbackend *ba,
                                const tb_rbackend *bb, const char *ind, tb_str *out)
{
    if (strcmp(ba->model, bb->model) != 0)
        tb_str_appendf(out, "%smodel: %s vs %s\n", ind, ba->model, bb->model);
    if (strcmp(ba->dtype, bb->dtype) != 0)
        tb_str_appendf(out, "%sdtype: %s vs %s (not comparable: one dtype per comparison)\n", ind,
                       *ba->dtype ? ba->dtype : "not reported", *bb->dtype ? bb->dtype : "not reported");
    if (strcmp(ba->plugin, bb->plugin) != 0 || strcmp(ba->plugin_version, bb->plugin_version) != 0)
        tb_str_appendf(out, "%splugin: %s %s vs %s %s\n", ind, ba->plugin, ba->plugin_version, bb->plugin,
                       bb->plugin_version);
    if (strcmp(ba->device, bb->device) != 0)
        tb_str_appendf(out, "%sdevice: %s vs %s\n", ind, ba->device, bb->device);
    if (ba->random_weights != bb->random_weights)
        tb_str_appendf(out, "%srandom weights: %s vs %s\n", ind, ba->random_weights == 1 ? "yes" : "no",
                       bb->random_weights == 1 ? "yes" : "no");
    /* Option by option (every option's value as the backend ran: the
     * suite's, ${ENV} resolved, or the default), for one plugin: two
     * plugins' options are not the same options. */
    if (strcmp(ba->plugin, bb->plugin) != 0)
        return;
    tb_rjson_diff(ba->options_json, bb->options_json, ind, "option ", " vs ", "\n", out);
    const char *const ma[] = {"backends", ba->label, "matrix"}, *const mb[] = {"backends", bb->label, "matrix"};
    diff_part(a->config_json, ma, b->config_json, mb, 3, ind, "matrix ", out);
}

static int same_dims(const tb_rcase *x, const tb_rcase *y)
{
    return tb_rcase_generalizes(x, y) && tb_rcase_generalizes(y, x);
}

int tb_compare_run(sqlite3 *db, const tb_compare_opts *o, FILE *out, tb_compare_result *res, char **err)
{
    memset(res, 0, sizeof *res);
    *err = NULL;
    size_t n_metrics = o->metrics ? o->n_metrics : TB_ARRAY_LEN(default_metrics);
    const tb_sample_source **ms = tb_xcalloc(n_metrics + 1, sizeof *ms);
    for (size_t i = 0; i < n_metrics; i++) {
        const char *name = o->metrics ? o->metrics[i] : default_metrics[i];
        if (!(ms[i] = find_source(name))) {
            *err = tb_xasprintf("--metric %s: not a metric compare knows (%s)", name, tb_compare_metrics());
            free(ms);
            return -1;
        }
    }
    tb_rsession sa, sb_own, *sb = &sb_own;
    if (tb_rsession_load(db, o->a, &sa, err) != 0) {
        free(ms);
        return -1;
    }
    if (o->b == o->a) {
        sb = &sa;
    } else if (tb_rsession_load(db, o->b, &sb_own, err) != 0) {
        tb_rsession_free(&sa);
        free(ms);
        return -1;
    }
    int by_backend = o->backend_a != NULL;
    size_t bia = 0, bib = 0;
    if (by_backend && (find_backend(&sa, o->backend_a, &bia) != 0 || find_backend(sb, o->backend_b, &bib) != 0)) {
        int a_bad = find_backend(&sa, o->backend_a, &bia) != 0;
        const tb_rsession *s = a_bad ? &sa : sb;
        char *known = backend_list(s);
        *err = tb_xasprintf("session %lld has no backend \"%s\" (it has: %s)", (long long)s->id,
                            a_bad ? o->backend_a : o->backend_b, known);
        free(known);
        goto fail;
    }

    /* Pairs: index into sa.cases and sb->cases. */
    size_t *pa = NULL, *pb = NULL, np = 0;
    char *used_b = tb_xcalloc(sb->n_cases + 1, 1);
    for (size_t i = 0; i < sa.n_cases; i++) {
        const tb_rcase *ca = &sa.cases[i];
        if (by_backend && ca->backend != bia)
            continue;
        int matched = 0;
        for (size_t k = 0; k < sb->n_cases; k++) {
            const tb_rcase *cb = &sb->cases[k];
            int ok = by_backend ? cb->backend == bib && (tb_rcase_generalizes(ca, cb) || tb_rcase_generalizes(cb, ca))
                                : strcmp(sa.backends[ca->backend].label, sb->backends[cb->backend].label) == 0 &&
                                      same_dims(ca, cb);
            if (!ok)
                continue;
            pa = tb_xrealloc(pa, (np + 1) * sizeof *pa);
            pb = tb_xrealloc(pb, (np + 1) * sizeof *pb);
            pa[np] = i;
            pb[np] = k;
            np++;
            matched = 1;
            used_b[k] = 1;
        }
        res->only_a += !matched;
    }
    for (size_t k = 0; k < sb->n_cases; k++)
        if (!used_b[k] && (!by_backend || sb->cases[k].backend == bib))
            res->only_b++;
    free(used_b);
    res->pairs = np;
    if (np == 0) {
        *err = by_backend ? tb_xasprintf("no case of %s matches a case of %s (dimensions and swept options differ)",
                                         o->backend_a, o->backend_b)
                          : tb_xasprintf("sessions %lld and %lld have no case in common (same backend label, "
                                         "dimensions and swept options)", (long long)o->a, (long long)o->b);
        free(pa);
        free(pb);
        goto fail;
    }

    /* Header: what is compared with what, and what differs. */
    if (by_backend)
        fprintf(out, "compare: A = backend %s (session %lld), B = backend %s (session %lld)\n", o->backend_a,
                (long long)sa.id, o->backend_b, (long long)sb->id);
    else
        fprintf(out, "compare: A = session %lld (%s, %s, %s, commit %.12s)\n         B = session %lld (%s, %s, %s, "
                     "commit %.12s)\n",
                (long long)sa.id, sa.suite_name, sa.started_at, sa.hostname, sa.git_commit, (long long)sb->id,
                sb->suite_name, sb->started_at, sb->hostname, sb->git_commit);
    tb_str diff = {0};
    session_differences(&sa, sb, "  ", &diff);
    if (by_backend)
        backend_differences(&sa, sb, &sa.backends[bia], &sb->backends[bib], "  ", &diff);
    else
        for (size_t b = 0; b < sa.n_backends; b++) {
            size_t other;
            if (find_backend(sb, sa.backends[b].label, &other) != 0)
                continue;
            tb_str d2 = {0};
            backend_differences(&sa, sb, &sa.backends[b], &sb->backends[other], "    ", &d2);
            if (d2.len)
                tb_str_appendf(&diff, "  backend %s:\n%s", sa.backends[b].label, d2.s);
            tb_str_free(&d2);
        }
    if (diff.len)
        fprintf(out, "conditions that differ:\n%s", diff.s);
    tb_str_free(&diff);
    fprintf(out, "\n");

    static const char *const head[] = {"backend", "case", "metric", "n A", "n B", "median A", "median B",
                                       "B/A", "change", "p", "verdict"};
    tb_table *t = tb_table_new(11);
    tb_table_header(t, head);
    tb_str notes = {0};
    double worst = 0;
    char *worst_row = NULL;
    for (size_t p = 0; p < np; p++) {
        const tb_rcase *ca = &sa.cases[pa[p]], *cb = &sb->cases[pb[p]];
        char *backend = by_backend ? tb_xasprintf("%s vs %s", o->backend_a, o->backend_b)
                                   : tb_xstrdup(sa.backends[ca->backend].label);
        /* The more specific side names the case (the diffusion one). */
        char *dims = tb_rcase_dims(&sa, tb_rcase_generalizes(ca, cb) && !same_dims(ca, cb) ? cb : ca);
        int a_ok = strcmp(ca->status, "ok") == 0, b_ok = strcmp(cb->status, "ok") == 0;
        /* Newly degraded (failed requests in B, none in A): a regression
         * like a newly failed case, whatever the speed of what remains;
         * --fail-if-error-rate-above sets how many failures are tolerated. */
        if (a_ok && b_ok && !isfinite(o->fail_err_rate) && strcmp(tb_rcase_status(cb), "degraded") == 0 &&
            strcmp(tb_rcase_status(ca), "degraded") != 0) {
            res->regressions += tb_compare_gated(o);
            tb_str_appendf(&notes, "  %s [%s]: degraded in B: %d of %d requests failed\n", backend, dims,
                           cb->failed_requests, cb->requests);
        }
        if (a_ok && b_ok)
            quality_gates(o, ca, cb, backend, dims, &notes, res);
        for (size_t m = 0; m < n_metrics; m++) {
            size_t na = 0, nb = 0;
            double *xa = NULL, *xb = NULL;
            if ((a_ok && tb_read_case_samples(db, o->a, ca->id, ms[m], &xa, &na, err) != 0) ||
                (b_ok && tb_read_case_samples(db, o->b, cb->id, ms[m], &xb, &nb, err) != 0)) {
                free(xa);
                free(backend);
                free(dims);
                tb_table_free(t);
                tb_str_free(&notes);
                free(worst_row);
                free(pa);
                free(pb);
                goto fail;
            }
            tb_table_cell(t, backend);
            tb_table_cell(t, dims);
            tb_table_cell(t, ms[m]->name);
            tb_table_cellf(t, "%zu", na);
            tb_table_cellf(t, "%zu", nb);
            res->rows++;
            if (!a_ok || !b_ok) {
                for (int k = 0; k < 5; k++)
                    tb_table_cell(t, "-");
                tb_table_cellf(t, "%s", !a_ok && !b_ok ? "both not ok" : !b_ok ? "B not ok" : "A not ok");
                res->untested++;
                if (a_ok && !b_ok && m == 0) {
                    res->regressions += tb_compare_gated(o);
                    tb_str_appendf(&notes, "  %s [%s]: %s in B: %s\n", backend, dims, cb->status, cb->error);
                }
                free(xa);
                free(xb);
                continue;
            }
            double meda = median_of(xa, na), medb = median_of(xb, nb), ratio = medb / meda;
            tb_table_num(t, meda, 2);
            tb_table_num(t, medb, 2);
            if (isfinite(ratio))
                tb_table_cellf(t, "%.3f", ratio);
            else
                tb_table_cell(t, "-");
            double change = (ratio - 1) * 100;
            if (isfinite(change))
                tb_table_cellf(t, "%+.1f%%", change);
            else
                tb_table_cell(t, "-");
            tb_mwu u;
            if (tb_mwu_test(xa, na, xb, nb, TB_MWU_AUTO, &u) != 0) {
                tb_table_cell(t, "-");
                tb_table_cell(t, "no data");
                res->untested++;
            } else {
                tb_table_cellf(t, "%.3g%s", u.p, u.exact ? "" : "*");
                /* U of A counts pairs where A is larger: B tends larger
                 * when U_B > U_A. */
                int b_larger = u.u2 > u.u1;
                int higher_better = tb_metric_find(ms[m]->name)->better == TB_BETTER_HIGHER;
                int better = higher_better ? b_larger : !b_larger;
                if (u.p < o->alpha) {
                    tb_table_cell(t, better ? "faster" : "slower");
                    if (better) {
                        res->faster++;
                    } else {
                        res->slower++;
                        double slow = higher_better ? -change : change; /* % worse */
                        if (isfinite(o->fail_pct) && slow > o->fail_pct)
                            res->regressions++;
                        if (slow > worst) {
                            worst = slow;
                            free(worst_row);
                            worst_row = tb_xasprintf("%s [%s] %s", backend, dims, ms[m]->name);
                        }
                    }
                } else {
                    int weak = tb_mwu_min_p(u.n1, u.n2) >= o->alpha;
                    tb_table_cell(t, weak ? "no significant change (too few runs)" : "no significant change");
                    res->same++;
                }
            }
            free(xa);
            free(xb);
        }
        free(backend);
        free(dims);
    }
    tb_table_print(t, out);
    tb_table_free(t);
    if (notes.len)
        fprintf(out, "\nfailed, skipped or degraded in B only, or past a gate:\n%s", notes.s);
    tb_str_free(&notes);
    fprintf(out, "\n%zu matching cases", np);
    if (res->only_a || res->only_b)
        fprintf(out, " (%zu only in A, %zu only in B)", res->only_a, res->only_b);
    fprintf(out, "; %zu rows: %zu faster, %zu slower, %zu no significant change, %zu not tested\n", res->rows,
            res->faster, res->slower, res->same, res->untested);
    if (worst_row)
        fprintf(out, "largest significant slowdown: %.1f%% (%s)\n", worst, worst_row);
    if (isfinite(o->fail_pct))
        fprintf(out, "%s: %zu regression%s beyond %.3g%% (significantly slower by more than that, failing or "
                     "degraded in B only, or past a gate)\n",
                res->regressions ? "FAIL" : "ok", res->regressions, res->regressions == 1 ? "" : "s", o->fail_pct);
    else if (tb_compare_gated(o))
        fprintf(out, "%s: %zu regression%s (failing or degraded in B only, or past a gate)\n",
                res->regressions ? "FAIL" : "ok", res->regressions, res->regressions == 1 ? "" : "s");
    fprintf(out, "\nB/A: ratio of medians. p: two-sided Mann–Whitney U test on the raw samples (per repetition "
                 "for agg_tps, per request for req_tps and latencies); exact permutation p, * = normal "
                 "approximation. Verdict at alpha %.3g; for times lower is faster.\n",
            o->alpha);
    free(worst_row);
    free(pa);
    free(pb);
    if (sb != &sa)
        tb_rsession_free(sb);
    tb_rsession_free(&sa);
    free(ms);
    return 0;

fail:
    if (sb != &sa)
        tb_rsession_free(sb);
    tb_rsession_free(&sa);
    free(ms);
    return -1;
}
