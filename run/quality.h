/* quality.h — the quality side of a case: each request of a prompt-set
 * suite graded against its item (core/scorers.h), and the per-case metrics
 * (docs/METRICS.md, "Quality"):
 *
 *   accuracy, accuracy_TAG   fraction of scored requests whose answer the
 *                            item's scorer accepts (items with an answer)
 *   repetition               per request: 1 - distinct/total word n-grams
 *   distinct                 per request: distinct/total word n-grams
 *
 * Accuracy is a proportion, not a distribution: its metric row holds the
 * fraction in median and mean, the Wilson score 95% interval in ci_lo and
 * ci_hi, with n = the number of distinct items graded (repeated passes
 * over one item are not independent trials). */
#ifndef TB_QUALITY_H
#define TB_QUALITY_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "record.h"
#include "stats.h"

typedef struct tb_quality_acc tb_quality_acc;

tb_quality_acc *tb_quality_new(const tb_plan *plan);
void tb_quality_free(tb_quality_acc *q);

/* Grade the output `text` of a request on item prompt_idx; out[k] is NaN
 * where score k does not apply (no answer; fewer words than n). Counted
 * (measured, scored) requests enter the case's metrics. */
void tb_quality_score(tb_quality_acc *q, int32_t prompt_idx, const char *text, int counted,
                      double out[TB_N_SCORES]);

/* Append the case's quality metrics to (*arr)[*n] (grown as needed); the
 * names of per-tag rows are malloc'd into the record's name_buf. */
void tb_quality_metrics(tb_quality_acc *q, uint64_t seed, tb_metric_record **arr, size_t *n);

/* The Wilson score interval (95%) of `successes` in `trials`, as a
 * tb_stats (see above). trials == 0: n = 0 and NaN. */
void tb_proportion_stats(double fraction, size_t trials, tb_stats *out);

#endif
