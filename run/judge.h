/* judge.h — generative perplexity: after a prompt-set suite has run, the
 * suite's judge backend (TB_CAP_LOGLIK) scores every stored answer, in a
 * backend process of its own like any case.
 *
 * Per request (score table): judge_nll = -ln p(output | prompt) / tokens
 * (nats per token; "| prompt" only with judge_context = prompt) and
 * judge_ppl = exp(judge_nll). Per case (metric table): judge_ppl over the
 * case's scored requests with answers of at least one token. Identical
 * (item, output) pairs are scored once: greedy outputs repeat across
 * passes and backends. */
#ifndef TB_JUDGE_H
#define TB_JUDGE_H

#include <stdint.h>

#include "plan.h"
#include "progress.h"
#include "store.h"

/* Score the answers of `session`, saying on `progress` (when not NULL) how
 * many before the judge starts. 0; -1 with *err (malloc'd, "judge LABEL:
 * ...") when the judge could not run (the speed and accuracy figures stay
 * as stored). */
int tb_judge_session(const tb_plan *plan, tb_store *st, int64_t session, volatile int *interrupted,
                     tb_progress *progress, char **err);

#endif
