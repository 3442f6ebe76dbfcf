/* arrivals.c — see arrivals.h. */
#define _GNU_SOURCE /* M_PI */
#include "arrivals.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void tb_arrival_rng_seed(tb_arrival_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t tb_arrival_rng_next(tb_arrival_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tb_arrival_uniform(tb_arrival_rng *r)
{
    /* 53 random bits, shifted off zero: (0, 1) */
    return ((double)(tb_arrival_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double normal(tb_arrival_rng *r)
{
    double u1 = tb_arrival_uniform(r), u2 = tb_arrival_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double tb_arrival_gamma(tb_arrival_rng *r, double shape)
{
    if (shape < 1.0) {
        double u = tb_arrival_uniform(r);
        return tb_arrival_gamma(r, shape + 1.0) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = tb_arrival_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

uint64_t tb_arrivals_seed(uint64_t case_seed, uint32_t repetition, int warmup, double rate, uint32_t turn)
{
    uint64_t bits;
    memcpy(&bits, &rate, sizeof bits);
    uint64_t x = case_seed ^ 0xA77A77A77ull, h = splitmix64(&x);
    const uint64_t parts[] = {repetition, warmup ? 1u : 2u, bits, turn};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        x = h ^ parts[i];
        h = splitmix64(&x);
    }
    return h;
}

void tb_arrivals_schedule(uint64_t seed, double rate, double burstiness, uint32_t n, int64_t *offsets)
{
    tb_arrival_rng r;
    tb_arrival_rng_seed(&r, seed ^ 0x5DEECE66DULL);
    double t = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i > 0 && rate > 0) /* mean shape * scale = 1 / rate */
            t += tb_arrival_gamma(&r, burstiness) / (rate * burstiness) * 1e9;
        /* the suite refuses rates whose schedule passes int64 (TB_RATE_MIN);
         * a cast past it is undefined, so the last offsets saturate */
        offsets[i] = t < 9.0e18 ? (int64_t)t : (int64_t)9.0e18;
    }
}
