/* spec.h — speculative decoding in the ar backend (issue 40): a drafter
 * (drafter.h) proposes k tokens per request, the target verifies
 * [last verified token, d_1 .. d_k] in one forward (engine.h's
 * verify_slots) and keeps the longest accepted prefix plus its own next
 * token (the bonus); the rejected positions roll back out of both caches
 * (truncate_slot). Greedy: d_i is accepted while it equals the target's
 * argmax. Sampled: the standard rejection rule (accept d_i with
 * probability min(1, p(d_i) / q(d_i)); on a rejection draw from
 * norm(max(0, p - q)); all accepted: the bonus from p), so the output is
 * distributed exactly as the target's own sampling under the same
 * temperature, top-k and top-p (sampling.h). forced_acceptance replaces
 * the rule with a fixed count, for cost figures on random weights. */
#ifndef TB_AR_SPEC_H
#define TB_AR_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "drafter.h"
#include "engine.h"
#include "sampling.h"

/* One generate() call, speculatively. */
typedef struct ar_spec_call {
    const tb_host *host;
    tb_loaded *ld;           /* the target */
    tb_engine *eng;          /* its engine */
    ar_drafter *drafter;
    uint32_t R;              /* requests */
    const int32_t *prompt;   /* [R][P], request r's tokens after pad[r] fillers */
    size_t P;
    const int *pad;          /* [R] */
    uint32_t N;              /* max_new_tokens */
    int k;                   /* draft tokens per verification, 1 .. TB_SPEC_MAX_DRAFT */
    int forced;              /* > 0: every verification accepts min(forced, k) drafts */
    tb_sampling smp;
    int ignore_eos;
    int threads;             /* > 0: the CPU engines' threads */
    uint64_t seed;
    int32_t *out;            /* [R][N] the generated ids */
} ar_spec_call;

/* Runs the call and fills res as the plain loop does (phase times,
 * forward_passes = the target's prefills and verifications, memory,
 * energy, work, each request's ids and counts), plus res->spec[r] and
 * res->draft_ns where the host has them. TB_OK, or a status with the
 * reason in err. */
tb_status ar_spec_generate(const ar_spec_call *c, tb_result *res, char *err, size_t err_size);

/* Greedy verification of a draft d[k] against the target's argmax of
 * each verified row, t[k + 1] (row i: the token after the prefix and
 * d_1 .. d_i): the accepted count a (d_1 .. d_a equal t_0 .. t_{a-1}),
 * *bonus = t_a. forced > 0: a = min(forced, k) whatever t says. */
int ar_spec_accept_greedy(const int32_t *d, const int32_t *t, int k, int forced, int32_t *bonus);

/* Sampled verification: p [k + 1][V] the target's distributions at the
 * verified rows, q [k][V] the drafter's that d was drawn from; resid [V]
 * scratch. The accepted count, *bonus drawn as the rule says. forced > 0:
 * a = min(forced, k), the bonus drawn from p's row a. */
int ar_spec_accept_sampled(const int32_t *d, const float *p, const float *q, int k, int V, int forced,
                           uint64_t *rng, float *resid, int32_t *bonus);

/* A draw from probabilities p[V] (summing to 1 up to rounding; the mass
 * is taken as it is): a token with p > 0. */
int32_t ar_spec_draw(const float *p, int V, uint64_t *rng);

/* One output token of request r at `now`, through the host: with its id
 * when the host takes them (emit_output; id NULL for the EOS that ends
 * the answer and any token after it), else counted only. ar.c's plain
 * loop and stepped sessions emit through it too. */
void ar_emit_token(const tb_host *h, uint32_t r, const int32_t *id, int64_t now);

#endif
