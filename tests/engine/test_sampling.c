/* test_sampling.c — greedy and sampled token choice (plugins/engine). */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "sampling.h"

static void test_argmax_first_maximum(void)
{
    const float x[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    CHECK(tb_argmax(x, 5) == 1); /* torch.argmax returns the first maximum */
    const float y[] = {-3.0f};
    CHECK(tb_argmax(y, 1) == 0);
}

static void test_greedy_when_temperature_zero(void)
{
    const float x[] = {0.1f, 0.2f, 3.0f, 0.3f};
    float scratch[8];
    uint64_t rng = 1;
    tb_sampling s = {0, 0, 1};
    for (int i = 0; i < 10; i++)
        CHECK(tb_sample(x, 4, &s, &rng, scratch) == 2);
    CHECK(rng == 1); /* greedy draws nothing */
}

static void test_top_k_one_is_greedy(void)
{
    const float x[] = {0.1f, 1.5f, 1.4f, 0.3f};
    float scratch[8];
    uint64_t rng = 7;
    tb_sampling s = {1.0, 1, 1};
    for (int i = 0; i < 200; i++)
        CHECK(tb_sample(x, 4, &s, &rng, scratch) == 1);
}

static void test_top_p_keeps_smallest_prefix(void)
{
    /* probabilities 0.5, 0.3, 0.2 (logits = log p): top_p 0.7 keeps the
     * first two (0.5 < 0.7 <= 0.8), never the third */
    const float x[] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    float scratch[6];
    uint64_t rng = 3;
    tb_sampling s = {1.0, 0, 0.7};
    int counts[3] = {0};
    for (int i = 0; i < 20000; i++)
        counts[tb_sample(x, 3, &s, &rng, scratch)]++;
    CHECK(counts[2] == 0);
    /* renormalized 0.5/0.8 = 0.625: within 2% at 20000 draws */
    CHECK_NEAR(counts[0] / 20000.0, 0.625, 0.02);
}

static void test_temperature_matches_softmax(void)
{
    /* T = 2: p_i ∝ exp(l_i / 2); with l = (0, 2, 4): exp(0), e, e^2 */
    const float x[] = {0.0f, 2.0f, 4.0f};
    double w[3] = {1.0, exp(1.0), exp(2.0)}, z = w[0] + w[1] + w[2];
    float scratch[6];
    uint64_t rng = 11;
    tb_sampling s = {2.0, 0, 1};
    int counts[3] = {0};
    const int n = 50000;
    for (int i = 0; i < n; i++)
        counts[tb_sample(x, 3, &s, &rng, scratch)]++;
    for (int k = 0; k < 3; k++)
        CHECK_NEAR(counts[k] / (double)n, w[k] / z, 0.01);
}

static void test_same_seed_same_tokens(void)
{
    float x[64], scratch[128];
    for (int i = 0; i < 64; i++)
        x[i] = (float)sin(i * 0.7);
    tb_sampling s = {0.8, 20, 0.9};
    uint64_t a = 42, b = 42, c = 43;
    int same = 1, differs = 0;
    for (int i = 0; i < 100; i++) {
        int32_t ta = tb_sample(x, 64, &s, &a, scratch), tb = tb_sample(x, 64, &s, &b, scratch);
        int32_t tc = tb_sample(x, 64, &s, &c, scratch);
        same &= ta == tb;
        differs |= ta != tc;
    }
    CHECK(same);
    CHECK(differs);
}

int main(void)
{
    test_argmax_first_maximum();
    test_greedy_when_temperature_zero();
    test_top_k_one_is_greedy();
    test_top_p_keeps_smallest_prefix();
    test_temperature_matches_softmax();
    test_same_seed_same_tokens();
    return check_done();
}
