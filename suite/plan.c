/* plan.c — see plan.h. */
#define _GNU_SOURCE
#include "plan.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dims.h"
#include "utf8.h"
#include "util.h"
#include "wire.h"

/* One axis of the product: a dimension or a swept option. */
typedef struct axis {
    int is_option;
    tb_dim dim;          /* !is_option */
    const double *nums;  /* !is_option: the values */
    uint32_t opt;        /* is_option: index in the declarations */
    tb_option_value *vals; /* is_option: parsed values (owned) */
    size_t n;
} axis;

static void add_note(tb_plan_backend *pb, char *note)
{
    pb->notes = tb_xrealloc(pb->notes, (pb->n_notes + 1) * sizeof(char *));
    pb->notes[pb->n_notes++] = note;
}

static void err_at(tb_str *errs, tb_loc loc, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void err_at(tb_str *errs, tb_loc loc, const char *key, const char *fmt, ...)
{
    tb_str m = {0};
    tb_str_appendf(&m, "%s:%d: %s: ", loc.file, loc.line, key);
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(&m, fmt, ap);
    va_end(ap);
    /* it quotes the suite's and plugins' bytes: escaped (the lines of a
     * prompt set's errors stay lines) */
    tb_utf8_append_printable(errs, m.s, m.len, 1);
    tb_str_free(&m);
    tb_str_append(errs, "\n");
}

static char *known_options(const tb_plugin *pl)
{
    tb_str b = {0};
    for (uint32_t i = 0; i < pl->ops->n_options; i++)
        tb_str_appendf(&b, "%s%s", i ? ", " : "", pl->ops->options[i].name);
    if (!b.len)
        tb_str_append(&b, "none");
    return tb_str_take(&b);
}

/* Parse the items of a setting as values of `decl` (string options are
 * one item: the whole text). Returns the count, or 0 after an error. */
static size_t parse_values(const tb_option_decl *decl, const tb_list *l, tb_option_value **out,
                           tb_str *errs, const char *key)
{
    char *const *items = l->items;
    size_t n = l->n;
    char **split = NULL;
    char *copy = NULL;
    if (decl->type != TB_OPT_STRING && n == 1 && strchr(l->raw, ',')) {
        /* Backend settings arrive unsplit (type unknown at parse time). */
        copy = tb_xstrdup(l->raw);
        n = 0;
        for (char *s = copy;;) {
            char *comma = strchr(s, ',');
            if (comma)
                *comma = '\0';
            split = tb_xrealloc(split, (n + 1) * sizeof(char *));
            split[n++] = tb_trim(s);
            if (!comma)
                break;
            s = comma + 1;
        }
        items = split;
    } else if (decl->type == TB_OPT_STRING) {
        items = &l->raw;
        n = 1;
    }
    *out = tb_xcalloc(n, sizeof(tb_option_value));
    size_t ok = n;
    for (size_t i = 0; i < n; i++) {
        char *why = NULL;
        if (tb_option_parse(decl, items[i], &(*out)[i], &why) != 0) {
            err_at(errs, l->loc, key, "%s", why);
            free(why);
            ok = 0;
            break;
        }
        const char *t = (*out)[i].text;
        if ((decl->flags & TB_OPTF_MODEL) && t[0] && t[0] != '/' && !strchr(t, ':') && l->loc.file &&
            strrchr(l->loc.file, '/')) {
            /* a model path is relative to the suite file that names it */
            const char *slash = strrchr(l->loc.file, '/');
            char *near = tb_xasprintf("%.*s/%s", (int)(slash - l->loc.file), l->loc.file, t);
            free((char *)(*out)[i].text);
            (*out)[i].text = near;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp((*out)[j].text, (*out)[i].text) == 0) {
                err_at(errs, l->loc, key, "value %s is listed twice", items[i]);
                ok = 0;
                break;
            }
        if (!ok)
            break;
    }
    if (!ok) {
        for (size_t i = 0; i < n; i++)
            free((char *)(*out)[i].text);
        free(*out);
        *out = NULL;
    }
    free(split);
    free(copy);
    return ok;
}

/* The dimensions' names, "a, b, c", for messages. malloc'd. */
static char *dim_names_list(const char *sep)
{
    tb_str b = {0};
    for (int d = 0; d < TB_N_DIMS; d++)
        tb_str_appendf(&b, "%s%s", d ? sep : "", tb_dim_defs[d].name);
    return tb_str_take(&b);
}

static const double default_prompt = 128, default_new = 128, default_batch = 1;
static const double no_prompt_tokens = 0; /* text prompts from [prompts] */

#define SERVING_CAPS (TB_CAP_CONCURRENCY | TB_CAP_REQUEST_RATE)

uint32_t tb_plan_default_requests(uint32_t concurrency)
{
    /* Enough waves that ramp-up and drain do not dominate the window. */
    uint64_t n = 4ull * concurrency;
    return n < 32 ? 32 : n > 1000000 ? 1000000 : (uint32_t)n;
}

uint32_t tb_plan_open_loop_requests(const tb_suite *suite, double rate)
{
    double n;
    if (suite->open_loop_duration_s > 0) /* D seconds of gaps: R x D of them */
        n = fmax(2, ceil(rate * suite->open_loop_duration_s) + 1);
    else
        n = fmax(32, fmin(TB_OPEN_LOOP_REQUESTS, ceil(rate * TB_OPEN_LOOP_MAX_S) + 1));
    return !(n <= 1000000) ? 1000000 : (uint32_t)n;
}

/* {"name":"value",...} of the options mask selects (all when NULL); the
 * values of TB_OPTF_SECRET options read "(secret)", and a URL's
 * credentials (user:pass@) in any value too (util/redact.h): this text is
 * stored (backend and case options_json, config_json and its sha256) and
 * printed. vals follow the declarations, as the host passes them. */
static char *values_json(const tb_option_value *vals, uint32_t n, const int *mask, const tb_option_decl *decls)
{
    cJSON *o = cJSON_CreateObject();
    for (uint32_t i = 0; i < n; i++)
        if (!mask || mask[i]) {
            char *shown = decls && (decls[i].flags & TB_OPTF_SECRET) ? tb_xstrdup(TB_REDACTED)
                                                                      : tb_xredact(vals[i].text, NULL, 0);
            cJSON_AddStringToObject(o, vals[i].name, shown);
            free(shown);
        }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *r = tb_xstrdup(s ? s : "{}");
    free(s);
    return r;
}

static int expand_backend(tb_plan *plan, size_t bi, tb_str *errs)
{
    tb_suite *s = plan->suite;
    tb_plan_backend *pb = &plan->backends[bi];
    const tb_suite_backend *sb = pb->sb;
    const tb_backend_ops *ops = pb->plugin.ops;
    uint32_t nopt = ops->n_options;
    size_t errs_before = errs->len;

    /* Base values: defaults, then single values of the backend section. */
    tb_option_value *base = tb_xcalloc(nopt ? nopt : 1, sizeof *base);
    for (uint32_t i = 0; i < nopt; i++) {
        char *why = NULL;
        tb_option_parse(&ops->options[i], ops->options[i].default_value, &base[i], &why);
        free(why); /* defaults were checked at load */
    }
    axis *axes = NULL;
    size_t n_axes = 0;
    int *swept = tb_xcalloc(nopt ? nopt : 1, sizeof(int));
    int *set_by_backend = tb_xcalloc(nopt ? nopt : 1, sizeof(int));

    axis *opt_axes = NULL; /* gathered first, ordered after */
    size_t n_opt_axes = 0;
    for (size_t k = 0; k < sb->n_settings; k++) {
        const tb_setting *st = &sb->settings[k];
        const tb_option_decl *d = tb_plugin_option(&pb->plugin, st->key);
        if (!d) {
            char *known = known_options(&pb->plugin), *dims = dim_names_list(", ");
            err_at(errs, st->value.loc, st->key, "unknown option of plugin %s (its options: %s; or a dimension: %s)",
                   ops->name, known, dims);
            free(known);
            free(dims);
            continue;
        }
        uint32_t oi = (uint32_t)(d - ops->options);
        set_by_backend[oi] = 1;
        tb_option_value *vals = NULL;
        size_t n = parse_values(d, &st->value, &vals, errs, st->key);
        if (!n)
            continue;
        if (n == 1) {
            free((char *)base[oi].text);
            base[oi] = vals[0];
            free(vals);
        } else {
            opt_axes = tb_xrealloc(opt_axes, (n_opt_axes + 1) * sizeof *opt_axes);
            opt_axes[n_opt_axes++] = (axis){.is_option = 1, .opt = oi, .vals = vals, .n = n};
            swept[oi] = 1;
        }
    }
    for (size_t k = 0; k < s->n_sweeps; k++) {
        const tb_setting *st = &s->sweeps[k];
        const tb_option_decl *d = tb_plugin_option(&pb->plugin, st->key);
        if (!d) {
            add_note(pb, tb_xasprintf("%s = %s not applied: plugin %s has no such option", st->key,
                                      st->value.raw, ops->name));
            continue;
        }
        uint32_t oi = (uint32_t)(d - ops->options);
        if (set_by_backend[oi])
            continue; /* the backend's own setting wins */
        tb_option_value *vals = NULL;
        size_t n = parse_values(d, &st->value, &vals, errs, st->key);
        if (!n)
            continue;
        opt_axes = tb_xrealloc(opt_axes, (n_opt_axes + 1) * sizeof *opt_axes);
        opt_axes[n_opt_axes++] = (axis){.is_option = 1, .opt = oi, .vals = vals, .n = n};
        swept[oi] = 1;
    }
    if (errs->len != errs_before)
        goto done;

    /* Order: load-time option sweeps, dimensions, per-case option sweeps. */
    axes = tb_xcalloc(n_opt_axes + TB_N_DIMS, sizeof *axes);
    for (size_t k = 0; k < n_opt_axes; k++)
        if (ops->options[opt_axes[k].opt].flags & TB_OPTF_LOAD)
            axes[n_axes++] = opt_axes[k];
    for (int d = 0; d < TB_N_DIMS; d++) {
        const tb_list *l = sb->dims[d].n ? &sb->dims[d] : &s->dims[d];
        axis a = {.dim = (tb_dim)d};
        if (sb->dims[d].none) {
            if (s->dims[d].n)
                add_note(pb, tb_xasprintf("%s = %s not applied: [backend %s] says %s = none", tb_dim_name((tb_dim)d),
                                          s->dims[d].raw, sb->label, tb_dim_name((tb_dim)d)));
            continue;
        }
        if (l->n) {
            a.nums = l->num;
            a.n = l->n;
        } else if (d == TB_DIM_PROMPT_TOKENS) {
            a.nums = s->prompts.file ? &no_prompt_tokens : &default_prompt, a.n = 1;
        } else if (d == TB_DIM_MAX_NEW_TOKENS) {
            a.nums = &default_new, a.n = 1;
        } else if (d == TB_DIM_BATCH) {
            a.nums = &default_batch, a.n = 1;
        } else {
            continue; /* not swept: 0 = not applicable */
        }
        if (tb_dim_defs[d].cap && !(ops->capabilities & tb_dim_defs[d].cap)) {
            add_note(pb, tb_xasprintf("%s = %s not applied: plugin %s has no %s capability",
                                      tb_dim_name((tb_dim)d), l->raw, ops->name, tb_dim_defs[d].cap_name));
            continue;
        }
        axes[n_axes++] = a;
    }
    for (size_t k = 0; k < n_opt_axes; k++)
        if (!(ops->options[opt_axes[k].opt].flags & TB_OPTF_LOAD))
            axes[n_axes++] = opt_axes[k];

    /* Count before building: a few lists of values multiply into
     * billions of cases (saturating; the suite's total is the limit). */
    uint64_t count = 1;
    for (size_t a = 0; a < n_axes; a++)
        if (__builtin_mul_overflow(count, (uint64_t)axes[a].n, &count))
            count = UINT64_MAX;
    if (count > TB_PLAN_MAX_CASES - plan->n_cases) {
        tb_str why = {0};
        for (size_t a = 0; a < n_axes; a++)
            if (axes[a].n > 1)
                tb_str_appendf(&why, "%s%zu %s", why.len ? " x " : "", axes[a].n,
                               axes[a].is_option ? ops->options[axes[a].opt].name : tb_dim_name(axes[a].dim));
        char total[64] = "";
        if (count != UINT64_MAX && plan->n_cases)
            snprintf(total, sizeof total, ", %zu in all with the backends before it", (size_t)(count + plan->n_cases));
        if (count == UINT64_MAX)
            err_at(errs, sb->loc, "backend", "[backend %s] would have more than 2^64 cases (%s), more than the %d a suite may have",
                   sb->label, why.s ? why.s : "", TB_PLAN_MAX_CASES);
        else
            err_at(errs, sb->loc, "backend", "[backend %s] would have %llu cases (%s)%s, more than the %d a suite may have",
                   sb->label, (unsigned long long)count, why.s ? why.s : "", total, TB_PLAN_MAX_CASES);
        tb_str_free(&why);
        goto done;
    }
    plan->cases = tb_xrealloc(plan->cases, (plan->n_cases + (size_t)count) * sizeof *plan->cases);

    /* Odometer over the axes, last axis fastest. */
    size_t *idx = tb_xcalloc(n_axes + 1, sizeof(size_t));
    int prompts_refused = 0;
    for (;;) {
        tb_case *c = &plan->cases[plan->n_cases];
        memset(c, 0, sizeof *c);
        c->ordinal = ++plan->n_cases;
        c->backend = bi;
        c->n_options = nopt;
        c->options = tb_xcalloc(nopt ? nopt : 1, sizeof(tb_option_value));
        for (uint32_t i = 0; i < nopt; i++) {
            c->options[i] = base[i];
            c->options[i].text = tb_xstrdup(base[i].text);
        }
        for (size_t a = 0; a < n_axes; a++) {
            const axis *ax = &axes[a];
            if (ax->is_option) {
                free((char *)c->options[ax->opt].text);
                c->options[ax->opt] = ax->vals[idx[a]];
                c->options[ax->opt].text = tb_xstrdup(ax->vals[idx[a]].text);
                continue;
            }
            double v = ax->nums[idx[a]];
            if (ax->dim == TB_DIM_REQUEST_RATE) {
                /* a search (core/search.h): its runs set concurrency and rate */
                c->search = v == TB_RATE_SWEEP ? TB_SEARCH_SWEEP : v == TB_RATE_SLO ? TB_SEARCH_SLO : TB_SEARCH_NONE;
                if (c->search)
                    v = 0;
            }
            tb_case_dim_set(c, ax->dim, v);
        }
        if (c->search)
            c->concurrency = 0;
        /* Prompts from an option (a dataset): no prompt length of the
         * case's own, 0 as with a [prompts] set (docs/METRICS.md); a
         * length the suite gives it would be ignored: refused, once. */
        for (uint32_t i = 0; i < nopt; i++)
            if ((ops->options[i].flags & TB_OPTF_PROMPTS) && c->options[i].text && c->options[i].text[0]) {
                const tb_list *pl = sb->dims[TB_DIM_PROMPT_TOKENS].n ? &sb->dims[TB_DIM_PROMPT_TOKENS]
                                                                     : &s->dims[TB_DIM_PROMPT_TOKENS];
                if (pl->n && !prompts_refused++)
                    err_at(errs, pl->loc, "prompt_tokens",
                           "[backend %s] takes its prompts from %s = %s: expected no prompt_tokens for it (give "
                           "the other backends theirs in their own sections, not in [matrix])",
                           sb->label, ops->options[i].name, c->options[i].text);
                c->prompt_tokens = 0;
            }
        if (c->search && !(ops->capabilities & TB_CAP_CONCURRENCY))
            c->skip_reason = tb_xasprintf("request_rate = %s runs a synchronous and a throughput load (concurrency 1 "
                                          "and all requests): plugin %s lacks the concurrency capability",
                                          c->search == TB_SEARCH_SWEEP ? "sweep" : "slo", ops->name);
        if (!(ops->capabilities & SERVING_CAPS))
            c->requests = c->batch;
        else if (!c->requests) {
            c->requests_default = 1;
            c->requests = c->request_rate > 0 ? tb_plan_open_loop_requests(plan->suite, c->request_rate)
                                              : tb_plan_default_requests(c->concurrency);
        }
        c->swept_json = values_json(c->options, nopt, swept, ops->options);
        tb_str key = {0};
        for (uint32_t i = 0; i < nopt; i++)
            if (ops->options[i].flags & TB_OPTF_LOAD)
                tb_str_appendf(&key, "%s=%s;", ops->options[i].name, c->options[i].text);
        c->load_key = tb_str_take(&key);
        if (c->batch > 1 && !(ops->capabilities & TB_CAP_BATCH))
            c->skip_reason = tb_xasprintf("batch %u needs the batch capability, which plugin %s lacks",
                                          c->batch, ops->name);

        size_t a = n_axes;
        while (a > 0) {
            a--;
            if (++idx[a] < axes[a].n)
                break;
            idx[a] = 0;
            if (a == 0) {
                a = SIZE_MAX;
                break;
            }
        }
        if (a == SIZE_MAX || n_axes == 0)
            break;
    }
    free(idx);
    pb->options_json = values_json(base, nopt, NULL, ops->options);

done:
    for (size_t k = 0; k < n_opt_axes; k++) {
        for (size_t j = 0; j < opt_axes[k].n; j++)
            free((char *)opt_axes[k].vals[j].text);
        free(opt_axes[k].vals);
    }
    free(opt_axes);
    free(axes);
    for (uint32_t i = 0; i < nopt; i++)
        free((char *)base[i].text);
    free(base);
    free(swept);
    free(set_by_backend);
    return errs->len == errs_before ? 0 : -1;
}

tb_request tb_case_request(const tb_plan *plan, const tb_case *c)
{
    return (tb_request){
        .struct_size = sizeof(tb_request),
        .n_requests = c->requests,
        .prompt_tokens = c->prompt_tokens,
        .max_new_tokens = c->max_new_tokens,
        .batch = c->batch,
        .concurrency = c->concurrency,
        .steps = c->steps,
        .block_length = c->block_length,
        .request_rate = c->request_rate,
        .seed = plan->suite->seed,
        .options = c->options,
        .n_options = c->n_options,
    };
}

/* A validate() verdict, as the plugin's process sends it. */
typedef struct verdict {
    uint32_t case_index;
    int32_t status;
    char why[512];
} verdict;

typedef struct validate_arg {
    const tb_plan *plan;
    const char *plugin; /* the backends of this `plugin =` */
    const int *skip;    /* [n_backends]: not validated (a file they name is missing) */
} validate_arg;

/* Is case i one whose verdict validate_fn sends? */
static int validated(const tb_plan *plan, size_t i, const char *plugin, const int *skip)
{
    const tb_case *c = &plan->cases[i];
    const char *p = plan->backends[c->backend].sb->plugin;
    return !c->skip_reason && !skip[c->backend] && p && strcmp(p, plugin) == 0;
}

/* In the plugin's process (tb_plugin_call): validate() of every case
 * that runs of the backends that use it, one answer each, in plan
 * order. */
static void validate_fn(const tb_backend_ops *ops, void *argp, int fd)
{
    const validate_arg *a = argp;
    for (size_t i = 0; i < a->plan->n_cases; i++) {
        if (!validated(a->plan, i, a->plugin, a->skip))
            continue;
        tb_request req = tb_case_request(a->plan, &a->plan->cases[i]);
        verdict v = {.case_index = (uint32_t)i};
        v.status = (int32_t)ops->validate(&req, v.why, sizeof v.why);
        v.why[sizeof v.why - 1] = '\0';
        if (tb_plugin_reply(fd, &v, sizeof v) != 0)
            return;
    }
}

/* The plugin's own check of each case's parameter combination (e.g.
 * gen_length a multiple of block_length), at suite load, in a process of
 * the plugin's own (one per plugin that has validate(), for all the
 * backends that use it), each call within load_timeout; not of the
 * backends in skip_backend (a file they name is missing: said once, at
 * its line, by check_files). */
static void validate_cases(tb_plan *plan, tb_str *errs, const int *skip_backend)
{
    size_t reported = 0;
    for (size_t b = 0; b < plan->n_backends && reported < 20; b++) {
        const tb_plan_backend *pb = &plan->backends[b];
        if (!pb->sb->plugin || !pb->plugin.ops) /* the suite's errors say so */
            continue;
        int seen = 0; /* an earlier backend of this plugin validated its cases too */
        for (size_t e = 0; e < b && !seen; e++)
            seen = plan->backends[e].sb->plugin && strcmp(plan->backends[e].sb->plugin, pb->sb->plugin) == 0;
        size_t first = 0;
        while (first < plan->n_cases && !validated(plan, first, pb->sb->plugin, skip_backend))
            first++;
        if (seen || first == plan->n_cases || !(pb->plugin.methods & TB_PLUGIN_HAS_VALIDATE))
            continue;
        validate_arg a = {plan, pb->sb->plugin, skip_backend};
        tb_plugin_answers ans;
        char *why = NULL;
        int rc = tb_plugin_call(pb->plugin.path, pb->sb->plugin, plan->suite->load_timeout_s, "load_timeout",
                                validate_fn, &a, &ans, &why);
        size_t next = first; /* the case whose answer is due */
        for (size_t k = 0; k < ans.n && reported < 20; k++) {
            verdict v;
            memcpy(&v, ans.v[k], ans.len[k] < sizeof v ? ans.len[k] : sizeof v);
            if (ans.len[k] != sizeof v || v.case_index < next ||
                !validated(plan, v.case_index, pb->sb->plugin, skip_backend)) {
                rc = -1;
                free(why);
                why = tb_xstrdup("sent a malformed verdict");
                break;
            }
            next = v.case_index + 1;
            while (next < plan->n_cases && !validated(plan, next, pb->sb->plugin, skip_backend))
                next++;
            if (v.status == TB_OK)
                continue;
            const tb_case *c = &plan->cases[v.case_index];
            const tb_plan_backend *cb = &plan->backends[c->backend];
            char *label = tb_case_label(plan, c);
            err_at(errs, cb->sb->loc, "backend", "[backend %s] case %s: %s", cb->sb->label, label,
                   v.why[0] ? v.why : "rejected by the plugin");
            free(label);
            reported++;
        }
        if (rc != 0 && reported < 20) {
            if (!ans.loaded) { /* it loaded a moment ago: the file changed? */
                err_at(errs, pb->sb->plugin_loc, "plugin", "%s", why);
            } else if (next < plan->n_cases) {
                const tb_case *c = &plan->cases[next];
                const tb_plan_backend *cb = &plan->backends[c->backend];
                char *label = tb_case_label(plan, c);
                err_at(errs, cb->sb->loc, "backend", "[backend %s] case %s: plugin %s (%s): validate() %s",
                       cb->sb->label, label, cb->plugin.ops->name, cb->plugin.path, why);
                free(label);
            } else { /* after the last verdict */
                err_at(errs, pb->sb->loc, "backend", "[backend %s]: plugin %s (%s): validate() %s", pb->sb->label,
                       pb->plugin.ops->name, pb->plugin.path, why);
            }
            reported++;
        }
        free(why);
        tb_plugin_answers_free(&ans);
    }
}

int tb_plan_validate(tb_plan *plan, char **err)
{
    tb_str errs = {0};
    int *none = tb_xcalloc(plan->n_backends ? plan->n_backends : 1, sizeof *none);
    validate_cases(plan, &errs, none);
    free(none);
    *err = errs.len ? tb_str_take(&errs) : NULL;
    tb_str_free(&errs);
    return *err ? -1 : 0;
}

uint32_t tb_case_emissions(const tb_plan *plan, const tb_case *c)
{
    const tb_backend_ops *ops = plan->backends[c->backend].plugin.ops;
    if (!(ops->capabilities & TB_CAP_STREAMING))
        return 1; /* the final emission only */
    /* at most one per token: an AR step, a diffusion step that commits
     * (steps are not a bound: the threshold sampler's are an outcome), a
     * streamed chunk */
    return c->max_new_tokens;
}

/* The most requests a call of c sends: a search's open-loop runs without
 * `requests` send the default open-loop length (with open_loop_duration
 * it follows from rates only the search finds: its runs are checked as
 * they start, by the worker's buffers). */
static uint32_t max_requests(const tb_plan *plan, const tb_case *c)
{
    if (c->search && c->requests_default && !(plan->suite->open_loop_duration_s > 0) &&
        c->requests < TB_OPEN_LOOP_REQUESTS)
        return TB_OPEN_LOOP_REQUESTS;
    return c->requests;
}

/* The most canvas record a request of c can carry: a canvas model's
 * (TB_CAP_STEPS: the host hands tb_result.canvas to those only), else 0. */
static uint64_t canvas_bytes(const tb_plan *plan, const tb_case *c)
{
    return plan->backends[c->backend].plugin.ops->capabilities & TB_CAP_STEPS ? TB_CANVAS_WIRE_BYTES(TB_CANVAS_MAX) : 0;
}

uint64_t tb_case_result_bytes(const tb_plan *plan, const tb_case *c)
{
    const tb_suite *s = plan->suite;
    uint64_t calls = (uint64_t)s->warmup + (uint64_t)s->repeat * tb_plan_calls_per_pass(plan, c);
    return tb_wire_result_bytes(calls, max_requests(plan, c), tb_case_emissions(plan, c), canvas_bytes(plan, c));
}

/* "1.5 GiB" */
static void human_bytes(char *buf, size_t size, uint64_t b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (b == UINT64_MAX) {
        snprintf(buf, size, "more than 16 EiB");
        return;
    }
    double v = (double)b;
    size_t u = 0;
    while (v >= 1024 && u + 1 < TB_ARRAY_LEN(units)) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* The list a backend's dimension d comes from: its own, else [matrix];
 * NULL when neither writes it. */
static const tb_list *dim_written(const tb_plan *plan, const tb_plan_backend *pb, tb_dim d)
{
    if (pb->sb->dims[d].n)
        return &pb->sb->dims[d];
    return plan->suite->dims[d].n && !pb->sb->dims[d].none ? &plan->suite->dims[d] : NULL;
}

/* Cases too large to measure (tb_case_result_bytes, plan.h): an error at
 * the line that made them so: repeat when one call fits, else the larger
 * of max_new_tokens and the requests per call (batch, requests, or the
 * concurrency they default from) as written. */
static void check_sizes(const tb_plan *plan, tb_str *errs)
{
    const tb_suite *s = plan->suite;
    size_t reported = 0;
    for (size_t i = 0; i < plan->n_cases && reported < 20; i++) {
        const tb_case *c = &plan->cases[i];
        if (c->skip_reason)
            continue;
        uint64_t bytes = tb_case_result_bytes(plan, c);
        if (bytes <= TB_WIRE_MAX_FRAME)
            continue;
        const tb_plan_backend *pb = &plan->backends[c->backend];
        uint32_t em = tb_case_emissions(plan, c);
        uint64_t calls = (uint64_t)s->warmup + (uint64_t)s->repeat * tb_plan_calls_per_pass(plan, c);
        tb_loc loc = pb->sb->loc;
        const char *key = "backend";
        if (tb_wire_result_bytes(1, max_requests(plan, c), em, canvas_bytes(plan, c)) <= TB_WIRE_MAX_FRAME &&
            s->repeat_loc.line) {
            loc = s->repeat_loc;
            key = "repeat";
        } else {
            int serving = (pb->plugin.ops->capabilities & SERVING_CAPS) != 0;
            tb_dim rd = !serving                                         ? TB_DIM_BATCH
                        : dim_written(plan, pb, TB_DIM_REQUESTS)         ? TB_DIM_REQUESTS
                                                                         : TB_DIM_CONCURRENCY;
            uint32_t rv = rd == TB_DIM_BATCH ? c->batch : rd == TB_DIM_REQUESTS ? c->requests : c->concurrency;
            const tb_list *ln = dim_written(plan, pb, TB_DIM_MAX_NEW_TOKENS), *lr = dim_written(plan, pb, rd);
            if (ln && (!lr || c->max_new_tokens >= rv)) {
                loc = ln->loc;
                key = "max_new_tokens";
            } else if (lr) {
                loc = lr->loc;
                key = tb_dim_name(rd);
            }
        }
        char *label = tb_case_label(plan, c);
        char need[48], limit[48];
        human_bytes(need, sizeof need, bytes);
        human_bytes(limit, sizeof limit, TB_WIRE_MAX_FRAME);
        err_at(errs, loc, key,
               "[backend %s] case %s: its measurements would need %s in one message from the backend process "
               "(%llu call%s x %u requests x (%zu bytes + %u emissions x %zu bytes)), more than the %s a "
               "message may carry: lower max_new_tokens, the requests per call (batch, requests, concurrency) or "
               "repeat",
               pb->sb->label, label, need, (unsigned long long)calls, calls == 1 ? "" : "s", max_requests(plan, c), sizeof(tb_raw_request), em,
               sizeof(tb_emission), limit);
        free(label);
        reported++;
    }
}

int tb_plan_check_sizes(const tb_plan *plan, char **err)
{
    tb_str errs = {0};
    check_sizes(plan, &errs);
    *err = errs.len ? tb_str_take(&errs) : NULL;
    tb_str_free(&errs);
    return *err ? -1 : 0;
}

/* [prompts]: load and check the set; the judge must be able to score. */
static void load_prompts(tb_plan *plan, tb_str *errs)
{
    const tb_suite_prompts *sp = &plan->suite->prompts;
    if (!sp->file)
        return;
    if (tb_scorer_parse(sp->scorer, &plan->scorer) != 0) {
        err_at(errs, sp->scorer_loc, "scorer", "unknown scorer \"%s\"", sp->scorer);
        return;
    }
    struct stat st;
    if (stat(sp->file, &st) != 0) {
        err_at(errs, sp->file_loc, "file", "\"%s\": %s (expected a JSONL prompt set)", sp->file, strerror(errno));
        return;
    }
    char *msg = NULL;
    if (tb_prompt_set_load(sp->file, &plan->prompts, &msg) != 0 ||
        tb_prompt_set_check(&plan->prompts, plan->scorer, 0, &msg) != 0) {
        err_at(errs, sp->file_loc, "file", "prompt set:\n%s", msg);
        free(msg);
        return;
    }
    plan->n_prompts = plan->prompts.n;
    if (sp->limit > 0 && (size_t)sp->limit < plan->n_prompts)
        plan->n_prompts = (size_t)sp->limit;
    if (sp->judge) {
        for (size_t i = 0; i < plan->n_backends; i++)
            if (strcmp(plan->backends[i].sb->label, sp->judge) == 0)
                plan->judge = i;
        /* no such backend, or its plugin did not open: the suite's errors say so */
        const tb_backend_ops *ops = plan->judge != SIZE_MAX ? plan->backends[plan->judge].plugin.ops : NULL;
        if (!ops)
            return;
        if (!(ops->capabilities & TB_CAP_LOGLIK) || !(plan->backends[plan->judge].plugin.methods & TB_PLUGIN_HAS_LOGLIK))
            err_at(errs, sp->judge_loc, "judge",
                   "[backend %s] (plugin %s) cannot score text (expected a backend with the loglik capability, "
                   "such as plugin ar)",
                   sp->judge, ops->name);
    }
}

/* " (\"P\" exists next to the suite file: ...)" when a relative path
 * missing from the working directory is found beside the file that set
 * it: options are opened from the working directory. */
static char *beside_hint(const char *path, tb_loc loc)
{
    const char *slash = loc.file ? strrchr(loc.file, '/') : NULL;
    if (path[0] == '/' || !slash)
        return tb_xstrdup("");
    char *near = tb_xasprintf("%.*s/%s", (int)(slash - loc.file), loc.file, path);
    char *hint = access(near, F_OK) == 0
                     ? tb_xasprintf(" (a path of an option is opened from the working directory; \"%s\" exists: "
                                    "write that)",
                                    near)
                     : tb_xstrdup("");
    free(near);
    return hint;
}

/* Where an option's value was written: the backend's own setting, else
 * the [matrix] sweep, else (a default) the backend's header. */
static tb_loc option_loc(const tb_plan *plan, const tb_plan_backend *pb, const char *name)
{
    for (size_t k = 0; k < pb->sb->n_settings; k++)
        if (strcmp(pb->sb->settings[k].key, name) == 0)
            return pb->sb->settings[k].value.loc;
    for (size_t k = 0; k < plan->suite->n_sweeps; k++)
        if (strcmp(plan->suite->sweeps[k].key, name) == 0)
            return plan->suite->sweeps[k].value.loc;
    return pb->sb->loc;
}

/* A path a backend will open that is neither a regular file nor a folder
 * (a FIFO, a device, a socket): reading it would block or never end.
 * Its kind in words, or NULL when it is fine. */
static const char *odd_file(const struct stat *st)
{
    return S_ISREG(st->st_mode) || S_ISDIR(st->st_mode) ? NULL
           : S_ISFIFO(st->st_mode)                       ? "a FIFO"
           : S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ? "a device"
           : S_ISSOCK(st->st_mode)                        ? "a socket"
                                                          : "not a regular file";
}

/* A model folder's files (config.json, tokenizer.json, weights), one
 * level, links followed: each must be a regular file or a folder. */
static void check_model_folder(const tb_suite_backend *sb, tb_str *errs, int *missing)
{
    DIR *d = opendir(sb->model);
    if (!d)
        return; /* the worker says why */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        struct stat st;
        const char *kind;
        if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && (kind = odd_file(&st)) != NULL) {
            err_at(errs, sb->model_loc, "model", "[backend %s] \"%s/%s\" is %s, not a regular file", sb->label,
                   sb->model, e->d_name, kind);
            *missing = 1;
        }
    }
    closedir(d);
}

/* Files the backends will open, checked before anything runs (a worker
 * would find them missing only when it loads, after the cases before
 * it): the model of a backend with TB_CAP_MODEL_PATH (unless a NAME:...
 * spec such as preset:NAME), and every value of a TB_OPTF_PATH option
 * or TB_OPTF_MODEL option (but a NAME:... spec).
 * Each must exist and be a regular file or a folder (in a model folder,
 * its files too). */
static void check_files(tb_plan *plan, tb_str *errs, int *missing)
{
    for (size_t i = 0; i < plan->n_backends; i++) {
        const tb_plan_backend *pb = &plan->backends[i];
        const tb_backend_ops *ops = pb->plugin.ops;
        if (!ops)
            continue;
        const tb_suite_backend *sb = pb->sb;
        if (ops->capabilities & TB_CAP_MODEL_PATH) {
            struct stat st;
            int bad = !sb->model[0] || (!strchr(sb->model, ':') && stat(sb->model, &st) != 0);
            if (!sb->model[0])
                err_at(errs, sb->loc, "model",
                       "[backend %s] has no model = (plugin %s loads a model folder or file, or a NAME:... spec "
                       "such as preset:NAME)",
                       sb->label, ops->name);
            else if (bad && !(plan->suite->models_dir && strchr(sb->model, '/'))) /* else the suite said so */
                err_at(errs, sb->model_loc, "model", "\"%s\": %s (plugin %s loads a model folder or file here)",
                       sb->model, strerror(errno), ops->name);
            else if (!bad && !strchr(sb->model, ':') && odd_file(&st)) {
                err_at(errs, sb->model_loc, "model", "[backend %s] \"%s\" is %s, not a regular file or folder",
                       sb->label, sb->model, odd_file(&st));
                bad = 1;
            } else if (!bad && !strchr(sb->model, ':') && S_ISDIR(st.st_mode)) {
                check_model_folder(sb, errs, &bad);
            }
            missing[i] |= bad;
        }
        for (uint32_t o = 0; o < ops->n_options; o++) {
            const tb_option_decl *d = &ops->options[o];
            if (!(d->flags & (TB_OPTF_PATH | TB_OPTF_MODEL)))
                continue;
            /* each distinct value of this backend's cases, once (a few
             * values, many cases: kept in a short list) */
            const char **seen = NULL;
            size_t n_seen = 0;
            for (size_t ci = 0; ci < plan->n_cases; ci++) {
                const tb_case *c = &plan->cases[ci];
                if (c->backend != i || !c->options[o].text[0])
                    continue;
                const char *v = c->options[o].text;
                if ((d->flags & TB_OPTF_MODEL) && strchr(v, ':'))
                    continue; /* a NAME:... spec (preset:NAME): the backend's to resolve */
                size_t k = 0;
                while (k < n_seen && strcmp(seen[k], v) != 0)
                    k++;
                if (k < n_seen)
                    continue;
                seen = tb_xrealloc(seen, (n_seen + 1) * sizeof *seen);
                seen[n_seen++] = v;
                struct stat st;
                tb_loc loc = option_loc(plan, pb, d->name);
                if (stat(v, &st) == 0) {
                    if (odd_file(&st)) {
                        missing[i] = 1;
                        err_at(errs, loc, d->name, "[backend %s] \"%s\" is %s, not a regular file", sb->label, v,
                               odd_file(&st));
                    }
                    continue;
                }
                int e = errno;
                missing[i] = 1;
                char *hint = beside_hint(v, loc);
                err_at(errs, loc, d->name, "[backend %s] \"%s\": %s%s", sb->label, v, strerror(e), hint);
                free(hint);
            }
            free(seen);
        }
    }
}

uint32_t tb_plan_calls_per_pass(const tb_plan *plan, const tb_case *c)
{
    uint32_t per_call = c->requests ? c->requests : c->batch;
    if (!plan->n_prompts || per_call == 0)
        return 1;
    return (uint32_t)((plan->n_prompts + per_call - 1) / per_call);
}

/* Append `v` to the comma-separated list `list` (a string item of obj
 * under `key`) unless it is there already. */
static void add_distinct(cJSON *obj, const char *key, const char *v)
{
    cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        cJSON_AddStringToObject(obj, key, v);
        return;
    }
    const char *cur = cJSON_GetStringValue(it);
    size_t n = strlen(v);
    for (const char *p = cur; p && *p;) {
        const char *e = strstr(p, ", ");
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return;
        p = e ? e + 2 : p + len;
    }
    char *joined = tb_xasprintf("%s, %s", cur, v);
    cJSON_ReplaceItemInObjectCaseSensitive(obj, key, cJSON_CreateString(joined));
    free(joined);
}

static char *config_json(const tb_plan *plan)
{
    const tb_suite *s = plan->suite;
    cJSON *root = cJSON_CreateObject();
    cJSON *su = cJSON_AddObjectToObject(root, "suite");
    cJSON_AddNumberToObject(su, "warmup", s->warmup);
    cJSON_AddNumberToObject(su, "repeat", s->repeat);
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    cJSON_AddStringToObject(su, "seed", seed); /* 64 bits: not a double */
    cJSON_AddNumberToObject(su, "case_timeout", s->case_timeout_s);
    cJSON_AddNumberToObject(su, "load_timeout", s->load_timeout_s);
    cJSON_AddNumberToObject(su, "memory_limit_mb", s->memory_limit_mb);
    cJSON_AddNumberToObject(su, "goodput_ttft_ms", s->goodput_ttft_ms);
    cJSON_AddNumberToObject(su, "goodput_tpot_ms", s->goodput_tpot_ms);
    int searches = 0; /* their settings, where they matter (older configurations' hashes stay) */
    for (size_t i = 0; i < plan->n_cases; i++)
        searches |= plan->cases[i].search != TB_SEARCH_NONE;
    if (searches) {
        cJSON_AddNumberToObject(su, "sweep_rates", s->sweep_rates);
        cJSON_AddNumberToObject(su, "slo_ttft_p99_ms", s->slo_ttft_p99_ms);
        cJSON_AddNumberToObject(su, "slo_tpot_p99_ms", s->slo_tpot_p99_ms);
        cJSON_AddNumberToObject(su, "slo_goodput_pct", s->slo_goodput_pct);
        cJSON_AddNumberToObject(su, "slo_iterations", s->slo_iterations);
    }
    if (plan->n_prompts) {
        const tb_suite_prompts *sp = &s->prompts;
        cJSON *pr = cJSON_AddObjectToObject(root, "prompts");
        cJSON_AddStringToObject(pr, "sha256", plan->prompts.sha256);
        cJSON_AddNumberToObject(pr, "items", (double)plan->n_prompts);
        cJSON_AddStringToObject(pr, "scorer", sp->scorer);
        cJSON_AddNumberToObject(pr, "repetition_n", sp->repetition_n);
        cJSON_AddNumberToObject(pr, "distinct_n", sp->distinct_n);
        if (sp->judge) {
            cJSON_AddStringToObject(pr, "judge", sp->judge);
            cJSON_AddStringToObject(pr, "judge_context", sp->judge_context ? "prompt" : "none");
            cJSON_AddStringToObject(pr, "judge_tags", sp->judge_tags.n ? sp->judge_tags.raw : "");
        }
    }
    cJSON *bs = cJSON_AddObjectToObject(root, "backends");
    for (size_t b = 0; b < plan->n_backends; b++) {
        const tb_plan_backend *pb = &plan->backends[b];
        cJSON *o = cJSON_AddObjectToObject(bs, pb->sb->label);
        cJSON_AddStringToObject(o, "plugin", pb->plugin.ops->name);
        char *real = pb->sb->model[0] && !strchr(pb->sb->model, ':') ? realpath(pb->sb->model, NULL) : NULL;
        cJSON_AddStringToObject(o, "model", real ? real : pb->sb->model);
        free(real);
        cJSON *opts = cJSON_Parse(pb->options_json ? pb->options_json : "{}");
        cJSON_AddItemToObject(o, "options", opts ? opts : cJSON_CreateObject());
        cJSON *m = cJSON_AddObjectToObject(o, "matrix");
        for (size_t i = 0; i < plan->n_cases; i++) {
            const tb_case *c = &plan->cases[i];
            if (c->backend != b)
                continue;
            char v[48];
            for (int d = 0; d < TB_N_DIMS; d++)
                if (!tb_case_dim_absent(c, (tb_dim)d) &&
                    (!tb_dim_defs[d].cap || (pb->plugin.ops->capabilities & tb_dim_defs[d].cap))) {
                    snprintf(v, sizeof v, "%.17g", tb_case_dim(c, (tb_dim)d));
                    add_distinct(m, tb_dim_defs[d].name, v);
                }
            if (c->search)
                add_distinct(m, "request_rate", c->search == TB_SEARCH_SWEEP ? "sweep" : "slo");
            cJSON *sw = cJSON_Parse(c->swept_json), *it;
            cJSON_ArrayForEach(it, sw) add_distinct(m, it->string, cJSON_GetStringValue(it));
            cJSON_Delete(sw);
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "tokbench: out of memory printing the configuration\n");
        abort();
    }
    char *r = tb_xstrdup(text);
    free(text);
    return r;
}

int tb_plan_build(tb_suite *suite, tb_plan *plan, char **err)
{
    memset(plan, 0, sizeof *plan);
    plan->judge = SIZE_MAX;
    plan->suite = suite;
    plan->n_backends = suite->n_backends;
    plan->backends = tb_xcalloc(suite->n_backends ? suite->n_backends : 1, sizeof *plan->backends);
    tb_str errs = {0};
    for (size_t i = 0; i < suite->n_backends; i++) {
        tb_plan_backend *pb = &plan->backends[i];
        pb->sb = &suite->backends[i];
        char *why = NULL;
        if (!pb->sb->plugin) /* the suite's error says so (tb_suite_parse) */
            continue;
        /* one loading per plugin: backends that name the same one share
         * its table (a copy each) */
        size_t same = 0;
        while (same < i && (!plan->backends[same].sb->plugin ||
                            strcmp(plan->backends[same].sb->plugin, pb->sb->plugin) != 0 ||
                            !plan->backends[same].plugin.ops))
            same++;
        if (same < i) {
            tb_plugin_copy(&pb->plugin, &plan->backends[same].plugin);
            continue;
        }
        if (tb_plugin_open(pb->sb->plugin, suite->load_timeout_s, "load_timeout", 0, &pb->plugin, &why) != 0) {
            err_at(&errs, pb->sb->plugin_loc, "plugin", "%s", why);
            free(why);
            continue;
        }
    }
    /* Every error of the suite in one pass: each step checks what the
     * steps before it could make (a backend whose plugin did not open is
     * left out of the later ones). */
    int all_open = 1;
    for (size_t i = 0; i < plan->n_backends; i++)
        all_open &= plan->backends[i].plugin.ops != NULL;
    /* A [matrix] key must be a dimension or some backend's option (of a
     * plugin that opened: it may be the others'). */
    for (size_t k = 0; k < suite->n_sweeps && all_open; k++) {
        int known = 0;
        for (size_t i = 0; i < plan->n_backends; i++)
            if (tb_plugin_option(&plan->backends[i].plugin, suite->sweeps[k].key))
                known = 1;
        if (!known) {
            char *dims = dim_names_list(", ");
            err_at(&errs, suite->sweeps[k].value.loc, suite->sweeps[k].key,
                   "unknown key in [matrix] (expected a dimension — %s — or an option of one of the suite's plugins)",
                   dims);
            free(dims);
        }
    }
    /* Every backend's option errors, not just the first backend's. */
    for (size_t i = 0; i < plan->n_backends; i++)
        if (plan->backends[i].plugin.ops)
            expand_backend(plan, i, &errs);
    int *missing = tb_xcalloc(plan->n_backends + 1, sizeof *missing);
    check_files(plan, &errs, missing);
    validate_cases(plan, &errs, missing);
    free(missing);
    load_prompts(plan, &errs);
    /* A backend without a plugin (a suite with errors, tb_suite_parse)
     * fails the plan too, its error the suite's. */
    if (!errs.len && all_open) {
        plan->config_json = config_json(plan);
        tb_sha256_hex(plan->config_json, strlen(plan->config_json), plan->config_sha256);
    }
    if (errs.len || !all_open) {
        *err = tb_str_take(&errs);
        tb_plan_free(plan);
        return -1;
    }
    *err = NULL;
    return 0;
}

static void case_free(tb_case *c)
{
    for (uint32_t i = 0; i < c->n_options; i++)
        free((char *)c->options[i].text);
    free(c->options);
    free(c->swept_json);
    free(c->load_key);
    free(c->skip_reason);
}

/* Does case c match filter key = one of vals? */
static int case_matches(const tb_plan *plan, const tb_case *c, const char *key, char **vals, size_t nv)
{
    const tb_plan_backend *pb = &plan->backends[c->backend];
    tb_dim d = tb_dim_from_name(key);
    if (strcmp(key, "backend") == 0) {
        for (size_t i = 0; i < nv; i++)
            if (strcmp(pb->sb->label, vals[i]) == 0)
                return 1;
        return 0;
    }
    if (d != TB_N_DIMS) {
        /* a shard's case by the suite's value, not its share */
        double v = !c->shard_count              ? tb_case_dim(c, d)
                   : d == TB_DIM_REQUESTS       ? c->suite_requests
                   : d == TB_DIM_CONCURRENCY    ? c->suite_concurrency
                   : d == TB_DIM_REQUEST_RATE   ? c->suite_request_rate
                                                : tb_case_dim(c, d);
        for (size_t i = 0; i < nv; i++) {
            char *end;
            double w = strtod(vals[i], &end);
            if (end != vals[i] && !*end && w == v)
                return 1;
        }
        return 0;
    }
    const tb_option_decl *decl = tb_plugin_option(&pb->plugin, key);
    if (!decl)
        return 0; /* a backend without that option does not match */
    const char *text = c->options[decl - pb->plugin.ops->options].text;
    for (size_t i = 0; i < nv; i++) {
        /* Compare values normalized as the suite's were ("yes" is "true",
         * "020" is "20"); a value the option cannot take matches as text. */
        tb_option_value v;
        char *why = NULL;
        int match;
        if (tb_option_parse(decl, vals[i], &v, &why) == 0) {
            match = strcmp(v.text, text) == 0;
            free((char *)v.text);
        } else {
            free(why);
            match = strcmp(vals[i], text) == 0;
        }
        if (match)
            return 1;
    }
    return 0;
}

int tb_plan_filter(tb_plan *plan, char *const *filters, size_t n, char **err)
{
    *err = NULL;
    for (size_t f = 0; f < n; f++) {
        char *copy = tb_xstrdup(filters[f]);
        char *eq = strchr(copy, '=');
        if (!eq || eq == copy || !eq[1]) {
            *err = tb_xasprintf("--filter \"%s\": expected KEY=VALUE[,VALUE...]", filters[f]);
            free(copy);
            return -1;
        }
        *eq = '\0';
        char *key = tb_trim(copy);
        int known = strcmp(key, "backend") == 0 || tb_dim_from_name(key) != TB_N_DIMS;
        for (size_t i = 0; i < plan->n_backends && !known; i++)
            if (tb_plugin_option(&plan->backends[i].plugin, key))
                known = 1;
        if (!known) {
            *err = tb_xasprintf("--filter \"%s\": unknown key \"%s\" (expected backend, a dimension or a backend option)",
                                filters[f], key);
            free(copy);
            return -1;
        }
        char **vals = NULL;
        size_t nv = 0;
        for (char *s = eq + 1;;) {
            char *comma = strchr(s, ',');
            if (comma)
                *comma = '\0';
            vals = tb_xrealloc(vals, (nv + 1) * sizeof(char *));
            vals[nv++] = tb_trim(s);
            if (!comma)
                break;
            s = comma + 1;
        }
        size_t kept = 0;
        for (size_t i = 0; i < plan->n_cases; i++) {
            tb_case *c = &plan->cases[i];
            if (case_matches(plan, c, key, vals, nv))
                plan->cases[kept++] = *c;
            else if (c->backend == plan->judge && !c->skip_reason &&
                     (!plan->has_judge_load || c->ordinal < plan->judge_load.ordinal)) {
                /* the judge still needs its first case's load options */
                if (plan->has_judge_load)
                    case_free(&plan->judge_load);
                plan->judge_load = *c;
                plan->has_judge_load = 1;
            } else
                case_free(c);
        }
        plan->n_cases = kept;
        free(vals);
        free(copy);
    }
    return 0;
}

char *tb_case_label(const tb_plan *plan, const tb_case *c)
{
    tb_str b = {0};
    uint32_t skip = 0;
    /* a dimension the backend lacks the capability for is not its own
     * (requests per call of a backend that runs `batch`) */
    const tb_plugin *pl = c->backend < plan->n_backends ? &plan->backends[c->backend].plugin : NULL;
    if (plan->n_prompts && c->prompt_tokens == 0) {
        tb_str_appendf(&b, "prompts=%zu", plan->n_prompts);
        skip |= 1u << TB_DIM_PROMPT_TOKENS;
    }
    for (uint32_t i = 0; pl && pl->ops && i < c->n_options && i < pl->ops->n_options && !c->prompt_tokens; i++)
        if ((pl->ops->options[i].flags & TB_OPTF_PROMPTS) && c->options[i].text && c->options[i].text[0]) {
            tb_str_appendf(&b, "%s%s=%s", b.len ? " " : "", pl->ops->options[i].name, c->options[i].text);
            skip |= 1u << TB_DIM_PROMPT_TOKENS;
        }
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].cap && !(pl && pl->ops && (pl->ops->capabilities & tb_dim_defs[d].cap)))
            skip |= 1u << d;
    tb_case_label_dims(&b, c, skip, TB_LABEL_KEYS);
    cJSON *sw = cJSON_Parse(c->swept_json);
    cJSON *it;
    cJSON_ArrayForEach(it, sw) tb_str_appendf(&b, " %s=%s", it->string, cJSON_GetStringValue(it));
    cJSON_Delete(sw);
    return tb_str_take(&b);
}

void tb_plan_print(const tb_plan *plan, FILE *out)
{
    const tb_suite *s = plan->suite;
    size_t skipped = 0;
    for (size_t i = 0; i < plan->n_cases; i++)
        skipped += plan->cases[i].skip_reason != NULL;
    fprintf(out, "suite %s (%s): %zu cases (%zu to skip), warmup %d, repeat %d, seed %llu\n", s->name,
            s->path, plan->n_cases, skipped, s->warmup, s->repeat, (unsigned long long)s->seed);
    if (plan->n_prompts)
        fprintf(out, "prompts %s: %zu of %zu items (sha256 %.16s), scorer %s, judge %s; a repetition is one pass "
                     "over them\n",
                s->prompts.file, plan->n_prompts, plan->prompts.n, plan->prompts.sha256, tb_scorer_name(plan->scorer),
                plan->judge != SIZE_MAX ? plan->backends[plan->judge].sb->label : "none");
    for (size_t bi = 0; bi < plan->n_backends; bi++) {
        const tb_plan_backend *pb = &plan->backends[bi];
        char *caps = tb_caps_string(pb->plugin.ops->capabilities);
        fprintf(out, "\nbackend %s: plugin %s %s (%s), model \"%s\", capabilities %s\n", pb->sb->label,
                pb->plugin.ops->name, pb->plugin.ops->version, pb->plugin.path, pb->sb->model, caps);
        free(caps);
        fprintf(out, "  options %s\n", pb->options_json ? pb->options_json : "{}");
        for (size_t k = 0; k < pb->n_notes; k++)
            fprintf(out, "  note: %s\n", pb->notes[k]);
        for (size_t i = 0; i < plan->n_cases; i++) {
            const tb_case *c = &plan->cases[i];
            if (c->backend != bi)
                continue;
            char *label = tb_case_label(plan, c);
            fprintf(out, "  #%-4zu %s%s%s%s\n", c->ordinal, label, c->skip_reason ? "  [skip: " : "",
                    c->skip_reason ? c->skip_reason : "", c->skip_reason ? "]" : "");
            free(label);
        }
    }
}

void tb_plan_free(tb_plan *plan)
{
    tb_prompt_set_free(&plan->prompts);
    for (size_t i = 0; i < plan->n_cases; i++)
        case_free(&plan->cases[i]);
    free(plan->cases);
    if (plan->has_judge_load)
        case_free(&plan->judge_load);
    for (size_t i = 0; i < plan->n_backends; i++) {
        tb_plan_backend *pb = &plan->backends[i];
        tb_plugin_close(&pb->plugin);
        for (size_t k = 0; k < pb->n_notes; k++)
            free(pb->notes[k]);
        free(pb->notes);
        free(pb->options_json);
    }
    free(plan->backends);
    free(plan->config_json);
    memset(plan, 0, sizeof *plan);
}

const char **tb_plan_secrets(const tb_plan *plan, size_t *n)
{
    const char **out = NULL;
    *n = 0;
    for (size_t i = 0; i <= plan->n_cases; i++) {
        const tb_case *c = i < plan->n_cases ? &plan->cases[i] : plan->has_judge_load ? &plan->judge_load : NULL;
        if (!c)
            break;
        const tb_backend_ops *ops = plan->backends[c->backend].plugin.ops;
        for (uint32_t k = 0; ops && k < c->n_options && k < ops->n_options; k++) {
            const char *v = c->options[k].text;
            if (!(ops->options[k].flags & TB_OPTF_SECRET) || !v || !*v)
                continue;
            size_t j = 0;
            while (j < *n && strcmp(out[j], v) != 0)
                j++;
            if (j == *n) {
                out = tb_xrealloc(out, (*n + 1) * sizeof *out);
                out[(*n)++] = v;
            }
        }
    }
    return out;
}

/* Is `key` a secret option of some backend's plugin in this plan? */
static int secret_key(const tb_plan *plan, const char *key, size_t len)
{
    for (size_t b = 0; b < plan->n_backends; b++) {
        const tb_backend_ops *ops = plan->backends[b].plugin.ops;
        for (uint32_t i = 0; ops && i < ops->n_options; i++)
            if ((ops->options[i].flags & TB_OPTF_SECRET) && strlen(ops->options[i].name) == len &&
                strncmp(ops->options[i].name, key, len) == 0)
                return 1;
    }
    return 0;
}

void tb_plan_redact_suite_text(tb_plan *plan)
{
    char *text = plan->suite->text;
    if (!text)
        return;
    tb_str out = {0};
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        const char *k = line;
        while (k < line + len && (*k == ' ' || *k == '\t'))
            k++;
        size_t kl = strspn(k, "abcdefghijklmnopqrstuvwxyz0123456789_");
        const char *e = k + kl;
        while (e < line + len && (*e == ' ' || *e == '\t'))
            e++;
        if (kl && e < line + len && (*e == '=' || *e == ':') && secret_key(plan, k, kl)) {
            tb_str_appendn(&out, line, (size_t)(e - line) + 1);
            tb_str_append(&out, " (secret)");
            if (nl)
                tb_str_append(&out, "\n");
        } else {
            tb_str_appendn(&out, line, len);
        }
        line += len;
    }
    free(plan->suite->text);
    plan->suite->text = tb_str_take(&out);
}
