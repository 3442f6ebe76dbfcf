/* test_quality.c — quality.c against hand counts and closed forms: the
 * Wilson interval, accuracy over repeated passes (n = distinct items),
 * per-tag tallies, warm-up / fill-up requests left out, and the text
 * statistics' NaN for short answers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "metrics.h"
#include "quality.h"

static tb_prompt item(char *prompt, char *answer, char **tags, int n_tags)
{
    return (tb_prompt){.prompt = prompt, .answer = answer, .tags = tags, .n_tags = n_tags, .scorer = -1, .line = 1};
}

static const tb_metric_record *find(const tb_metric_record *m, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(m[i].name, name) == 0)
            return &m[i];
    return NULL;
}

int main(void)
{
    /* Wilson score interval, z = 1.959964: 5 of 10 -> [0.2366, 0.7634];
     * 0 of 2 -> [0, 0.6576]; 9 of 10 -> [0.5958, 0.9821] (textbook). */
    tb_stats st;
    tb_proportion_stats(0.5, 10, &st);
    CHECK_NEAR(st.median, 0.5, 1e-15);
    CHECK_NEAR(st.mean, 0.5, 1e-15);
    CHECK_NEAR(st.ci_lo, 0.2366, 1e-4);
    CHECK_NEAR(st.ci_hi, 0.7634, 1e-4);
    CHECK(st.n == 10);
    tb_proportion_stats(0.0, 2, &st);
    CHECK_NEAR(st.ci_lo, 0.0, 1e-15);
    CHECK_NEAR(st.ci_hi, 0.6576, 1e-4);
    tb_proportion_stats(0.9, 10, &st);
    CHECK_NEAR(st.ci_lo, 0.5958, 1e-4);
    CHECK_NEAR(st.ci_hi, 0.9821, 1e-4);
    tb_proportion_stats(0.3, 0, &st);
    CHECK(st.n == 0 && isnan(st.median) && isnan(st.ci_lo));

    /* A set of 4 items: 3 graded (tags add, add, sort), 1 free text. */
    char *t_add[] = {"add"}, *t_sort[] = {"sort"}, *t_text[] = {"text"};
    tb_prompt items[4] = {
        item("1+1=", "2", t_add, 1),
        item("2+2=", "4", t_add, 1),
        item("sort 3 1 =", "1 3", t_sort, 1),
        item("Once upon a time", NULL, t_text, 1),
    };
    tb_suite suite = {0};
    suite.prompts.repetition_n = 2;
    suite.prompts.distinct_n = 1;
    tb_plan plan = {0};
    plan.suite = &suite;
    plan.prompts.items = items;
    plan.prompts.n = 4;
    plan.n_prompts = 4;
    plan.scorer = TB_SCORER_EXACT;

    tb_quality_acc *q = tb_quality_new(&plan);
    double s[TB_N_SCORES];
    /* pass 1: item 0 right, item 1 wrong, item 2 right, item 3 free text */
    tb_quality_score(q, 0, " 2 ", 1, s);
    CHECK(s[TB_SCORE_CORRECT] == 1.0);
    CHECK(isnan(s[TB_SCORE_REPETITION])); /* one word < n = 2 */
    tb_quality_score(q, 1, "5", 1, s);
    CHECK(s[TB_SCORE_CORRECT] == 0.0);
    tb_quality_score(q, 2, "1 3", 1, s);
    CHECK(s[TB_SCORE_CORRECT] == 1.0);
    CHECK_NEAR(s[TB_SCORE_REPETITION], 0.0, 1e-15);
    tb_quality_score(q, 3, "the cat the cat the", 1, s);
    CHECK(isnan(s[TB_SCORE_CORRECT]));
    /* bigrams: the cat, cat the, the cat, cat the = 4, distinct 2 */
    CHECK_NEAR(s[TB_SCORE_REPETITION], 0.5, 1e-15);
    /* distinct-1: 5 words, 2 distinct */
    CHECK_NEAR(s[TB_SCORE_DISTINCT], 0.4, 1e-15);
    /* pass 2: item 1 now right (same items: n stays 3) */
    tb_quality_score(q, 0, "2", 1, s);
    tb_quality_score(q, 1, "4", 1, s);
    tb_quality_score(q, 2, "1 3", 1, s);
    /* not counted: a warm-up or fill-up request, wrong */
    tb_quality_score(q, 1, "wrong", 0, s);
    CHECK(s[TB_SCORE_CORRECT] == 0.0); /* graded, but not in the metrics */

    tb_metric_record *m = NULL;
    size_t n = 0;
    tb_quality_metrics(q, 1, &m, &n);
    const tb_metric_record *acc = find(m, n, "accuracy");
    CHECK(acc != NULL);
    if (acc) {
        CHECK_NEAR(acc->st.median, 5.0 / 6.0, 1e-15); /* 5 right of 6 graded */
        CHECK(acc->st.n == 3);                       /* distinct items */
    }
    const tb_metric_record *add = find(m, n, "accuracy_add");
    CHECK(add && fabs(add->st.median - 0.75) < 1e-15 && add->st.n == 2);
    const tb_metric_record *srt = find(m, n, "accuracy_sort");
    CHECK(srt && srt->st.median == 1.0 && srt->st.n == 1);
    CHECK(find(m, n, "accuracy_text") == NULL); /* no graded item */
    const tb_metric_record *rep = find(m, n, "repetition");
    /* counted repetition values: item 2 twice (0), item 3 once (0.5);
     * single-word answers are NaN and dropped: median of {0, 0, 0.5} */
    CHECK(rep && rep->st.n == 3 && rep->st.median == 0.0);
    /* every row a registry metric, with the registry's unit */
    for (size_t i = 0; i < n; i++) {
        const tb_metric_def *d = tb_metric_find(m[i].name);
        CHECK(d && m[i].unit && strcmp(m[i].unit, d->unit) == 0);
    }
    for (size_t i = 0; i < n; i++)
        free(m[i].name_buf);
    free(m);
    tb_quality_free(q);
    return check_done();
}
