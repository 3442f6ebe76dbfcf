/* arrivals.h — when an open-loop load sends its requests.
 *
 * Inter-arrival gaps are gamma-distributed with shape k = burstiness and
 * mean 1/rate, so the coefficient of variation of the gaps is 1/sqrt(k):
 * k = 1 is a Poisson process (exponential gaps), k < 1 burstier, k > 1
 * more regular, k → ∞ evenly spaced. The same definition as vLLM's
 * benchmark_serving (--burstiness), so figures compare. Deterministic:
 * the same seed gives the same schedule. */
#ifndef TB_HTTP_ARRIVALS_H
#define TB_HTTP_ARRIVALS_H

#include <stdint.h>

/* Small seeded PRNG (xoshiro256**, seeded through splitmix64). */
typedef struct tb_arrival_rng {
    uint64_t s[4];
} tb_arrival_rng;

void tb_arrival_rng_seed(tb_arrival_rng *r, uint64_t seed);
uint64_t tb_arrival_rng_next(tb_arrival_rng *r);
/* Uniform in the open interval (0, 1). */
double tb_arrival_uniform(tb_arrival_rng *r);
/* Gamma(shape, scale 1), shape > 0 (Marsaglia and Tsang; shape < 1 by
 * the u^(1/shape) boost). */
double tb_arrival_gamma(tb_arrival_rng *r, double shape);

/* The seed of one schedule: from the case's seed, the call (its
 * repetition, a warm-up or not), the rate and the wave (a multi-turn
 * load's turn), so that every repetition and every rate of a case draws
 * fresh gaps (not the same draws scaled) and a rerun draws them again.
 * Not tied to unique_prompts: the arrivals are fresh either way. */
uint64_t tb_arrivals_seed(uint64_t case_seed, uint32_t repetition, int warmup, double rate, uint32_t turn);

/* Send times of n requests, ns after the first: offsets[0] = 0, then
 * gamma gaps of mean 1e9/rate. rate <= 0 gives all zeros. */
void tb_arrivals_schedule(uint64_t seed, double rate, double burstiness, uint32_t n, int64_t *offsets);

#endif
