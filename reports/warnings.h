/* warnings.h — every warning tokbench prints about a stored session,
 * computed in one place from what the store holds (rsession.h's
 * tb_rsession). `run` (at its end), `show` and `report` print exactly
 * these; docs/METRICS.md and docs/REPORTS.md define each rule. */
#ifndef TB_REPORT_WARNINGS_H
#define TB_REPORT_WARNINGS_H

#include <stddef.h>

#include "rsession.h"

/* The CV of agg_tps over repetitions above which a case is noisy. */
#define TB_NOISE_CV 0.10

/* An open-loop case whose median sent_rate differs from its offered
 * request_rate by more than this fraction gets a warning
 * (docs/METRICS.md, sent_rate): its figures describe another load. */
#define TB_SENT_RATE_TOL 0.05

/* A joined (sharded) session whose shards' windows of a call lay apart by
 * this share of a case's median wall time or more gets a warning
 * (docs/METRICS.md, "How simultaneous the shards were"): the 10% by
 * which `db merge` names a lagging shard. */
#define TB_SHARD_APART 0.10

/* A backend whose counts are held to their text's re-count (text alone
 * returned: a server's usage) gets a warning where, summed over its
 * measured requests, they stray from the re-counts by more than this
 * fraction (docs/METRICS.md, "Output-length check"): its tokens/s by
 * more than 2%. A request's own difference is no finding: the trained
 * small models' honest outputs differ in 1-8% of requests, and by up to
 * 0.7% in all. */
#define TB_COUNT_TEXT_MARGIN 0.02

/* Two cases of a backend that differ in one swept dimension or option,
 * where the one that runs more forwards per output token (1 / the mean
 * of tokens_per_forward over its calls, by more than this fraction) is the faster in
 * aggregate tokens/s beyond the noise (their 95% intervals apart; without
 * intervals, by more than TB_NOISE_CV), contradict each other: a warning
 * (docs/METRICS.md, "Contradicting results"). */
#define TB_NFE_MARGIN 0.05

typedef struct tb_warnings {
    char **text; /* plain text, one finding each */
    size_t n;
} tb_warnings;

/* The warnings of session s, in a fixed order: session-wide first, then
 * per case in ordinal order, then per pair of cases (in ordinal order of
 * the first, then the second), then per backend. */
void tb_warnings_derive(const tb_rsession *s, tb_warnings *out);
void tb_warnings_free(tb_warnings *w);

/* Does case c get the noise warning? (CV of agg_tps over more than one
 * repetition above TB_NOISE_CV, and the calls ran the same work: not a
 * prompt set, whose calls run different items.) Tables mark such cases. */
int tb_case_noisy(const tb_rsession *s, const tb_rcase *c);

/* The same rule from the figures: the CV of agg_tps, its number of
 * repetitions, and whether the session ran a prompt set. */
int tb_noisy(double agg_cv, size_t n, int prompt_set);

#endif
