/* dims.c — see dims.h. */
#include "dims.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

#define COUNT(field) offsetof(tb_case, field), 0
#define RATE(field) offsetof(tb_case, field), 1

#define SERVING (TB_CAP_CONCURRENCY | TB_CAP_REQUEST_RATE)

const tb_dim_def tb_dim_defs[TB_N_DIMS] = {
    [TB_DIM_PROMPT_TOKENS] = {"prompt_tokens", "prompt_tokens", COUNT(prompt_tokens), "prompt", "prompt", "", "set",
                              0, 1, 0, NULL},
    [TB_DIM_MAX_NEW_TOKENS] = {"max_new_tokens", "max_new_tokens", COUNT(max_new_tokens), "new", "new", "", NULL, 1,
                               1, 0, NULL},
    [TB_DIM_BATCH] = {"batch", "batch", COUNT(batch), "batch", "batch", "", NULL, 1, 1, 0, NULL},
    [TB_DIM_CONCURRENCY] = {"concurrency", "concurrency", COUNT(concurrency), "concurrency", "conc", "", "-", 1, 0,
                            TB_CAP_CONCURRENCY, "concurrency"},
    [TB_DIM_REQUEST_RATE] = {"request_rate", "request_rate", RATE(request_rate), "rate", "rate", "/s", "-", 0, 0,
                             TB_CAP_REQUEST_RATE, "request_rate"},
    [TB_DIM_STEPS] = {"steps", "steps", COUNT(steps), "steps", "steps", "", "-", 1, 0, TB_CAP_STEPS, "steps"},
    [TB_DIM_BLOCK_LENGTH] = {"block_length", "block_length", COUNT(block_length), "block", "block", "", "-", 1, 0,
                             TB_CAP_BLOCKS, "blocks"},
    /* either bit will do; not stored: a serving case's requests per call
     * follow from its concurrency (tb_plan_default_requests) or its rate
     * (tb_plan_open_loop_requests) unless swept */
    [TB_DIM_REQUESTS] = {"requests", NULL, COUNT(requests), "requests", "requests", "", NULL, 1, 0, SERVING,
                         "concurrency or request_rate"},
};

double tb_case_dim(const tb_case *c, tb_dim d)
{
    const char *p = (const char *)c + tb_dim_defs[d].offset;
    if (tb_dim_defs[d].is_rate) {
        double v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

void tb_case_dim_set(tb_case *c, tb_dim d, double v)
{
    char *p = (char *)c + tb_dim_defs[d].offset;
    if (tb_dim_defs[d].is_rate) {
        memcpy(p, &v, sizeof v);
    } else {
        uint32_t u = (uint32_t)v;
        memcpy(p, &u, sizeof u);
    }
}

int tb_case_dim_absent(const tb_case *c, tb_dim d)
{
    const char *z = tb_dim_defs[d].zero;
    return z && strcmp(z, "-") == 0 && !(tb_case_dim(c, d) > 0);
}

const char *tb_case_dim_text(const tb_case *c, tb_dim d, char *buf, size_t size)
{
    double v = tb_case_dim(c, d);
    if (v == 0 && tb_dim_defs[d].zero)
        snprintf(buf, size, "%s", tb_dim_defs[d].zero);
    else if (tb_dim_defs[d].is_rate)
        snprintf(buf, size, "%g", v);
    else
        snprintf(buf, size, "%u", (unsigned)v);
    return buf;
}

void tb_case_label_dims(tb_str *out, const tb_case *c, uint32_t skip, tb_label_style style)
{
    const char *sep = style == TB_LABEL_KEYS ? " " : ", ";
    for (int d = 0; d < TB_N_DIMS; d++) {
        const tb_dim_def *def = &tb_dim_defs[d];
        if ((skip & (1u << d)) || (!def->column && style != TB_LABEL_KEYS))
            continue;
        const char *lead = out->len ? sep : "";
        if (d == TB_DIM_REQUEST_RATE && c->search != TB_SEARCH_NONE) {
            tb_str_appendf(out, "%s%s%s%s", lead, style == TB_LABEL_KEYS ? def->name : def->word,
                           style == TB_LABEL_KEYS ? "=" : " ", c->search == TB_SEARCH_SWEEP ? "sweep" : "slo");
            continue;
        }
        if (tb_case_dim_absent(c, (tb_dim)d))
            continue;
        char v[48];
        tb_case_dim_text(c, (tb_dim)d, v, sizeof v);
        if (style == TB_LABEL_KEYS)
            tb_str_appendf(out, "%s%s=%s", lead, def->name, tb_case_dim(c, (tb_dim)d) == 0 ? "0" : v);
        else if (tb_case_dim(c, (tb_dim)d) == 0) /* prompt set */
            tb_str_appendf(out, "%s%s %s", lead, def->word, v);
        else
            tb_str_appendf(out, "%s%s %s%s", lead, def->word, v, def->unit);
    }
}

int tb_case_dims_generalize(const tb_case *a, const tb_case *b)
{
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column && !tb_case_dim_absent(a, (tb_dim)d) &&
            tb_case_dim(a, (tb_dim)d) != tb_case_dim(b, (tb_dim)d))
            return 0;
    return 1;
}
