/* test_moe.c — the MoE layer (plugins/engine/cpu/moe.c): the routers of the
 * published families on hand-worked cases, the expert products against a
 * dense loop-by-loop reference, and that a call reads only the experts its
 * rows chose (the others are poisoned with NaN). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../plugins/engine/cpu/moe.h"
#include "check.h"

static double sig(double v) { return 1.0 / (1.0 + exp(-v)); }
static float logit_of(double s) { return (float)log(s / (1.0 - s)); }

static void routing_cases(void)
{
    char err[256];
    int idx[8];
    float w[8];

    /* Qwen3-MoE: softmax over all, top-2, renormalised */
    tb_moe_config q = {.hidden = 4, .n_experts = 4, .top_k = 2, .expert_inter = 4, .scoring = TB_MOE_SOFTMAX,
                       .norm_topk = 1, .n_group = 1, .topk_group = 1, .routed_scale = 1.0f};
    CHECK(tb_moe_config_check(&q, err, sizeof err) == 0);
    const float l1[4] = {1, 3, 2, 0};
    tb_moe_route(&q, l1, NULL, 1, idx, w);
    CHECK(idx[0] == 1 && idx[1] == 2);
    CHECK_NEAR(w[0], 1 / (1 + exp(-1.0)), 1e-6);
    CHECK_NEAR(w[1], exp(-1.0) / (1 + exp(-1.0)), 1e-6);
    /* ... and without renormalising: the softmax probabilities themselves */
    q.norm_topk = 0;
    tb_moe_route(&q, l1, NULL, 1, idx, w);
    double Z = exp(-2.0) + 1 + exp(-1.0) + exp(-3.0);
    CHECK_NEAR(w[0], 1 / Z, 1e-6);
    CHECK_NEAR(w[1], exp(-1.0) / Z, 1e-6);
    /* ties go to the lower index */
    const float flat[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    tb_moe_route(&q, flat, NULL, 1, idx, w);
    CHECK(idx[0] == 0 && idx[1] == 1);

    /* DeepSeek-V3 / Bailing-V2: sigmoid scores, the bias moves the choice
     * but not the weights, renormalised, times the scaling factor */
    tb_moe_config d = {.hidden = 4, .n_experts = 4, .top_k = 2, .expert_inter = 4, .scoring = TB_MOE_SIGMOID,
                       .norm_topk = 1, .n_group = 1, .topk_group = 1, .routed_scale = 2.5f};
    const float l2[4] = {0, 0.5f, 1, -1}, bias[4] = {0.5f, 0, -0.4f, 0};
    tb_moe_route(&d, l2, bias, 1, idx, w);
    CHECK(idx[0] == 0 && idx[1] == 1); /* choice 1.0, 0.62, 0.33, 0.27: the bias demoted expert 2 */
    double s0 = sig(0), s1 = sig(0.5);
    CHECK_NEAR(w[0], 2.5 * s0 / (s0 + s1), 1e-6);
    CHECK_NEAR(w[1], 2.5 * s1 / (s0 + s1), 1e-6);
    tb_moe_route(&d, l2, NULL, 1, idx, w); /* without the bias: the best two scores */
    CHECK(idx[0] == 2 && idx[1] == 1);

    /* group-limited choice: 8 experts in 4 groups of 2, 2 groups allowed.
     * Expert 0 has the best score but its group's two best sum to 1.0,
     * under groups 1 (1.2) and 2 (1.1): it may not be chosen. */
    tb_moe_config g = d;
    g.n_experts = 8, g.n_group = 4, g.topk_group = 2, g.routed_scale = 1.0f;
    CHECK(tb_moe_config_check(&g, err, sizeof err) == 0);
    const double sc[8] = {0.95, 0.05, 0.6, 0.6, 0.55, 0.55, 0.1, 0.1};
    float l3[8];
    for (int e = 0; e < 8; e++)
        l3[e] = logit_of(sc[e]);
    tb_moe_route(&g, l3, NULL, 1, idx, w);
    CHECK(idx[0] == 2 && idx[1] == 3);
    CHECK_NEAR(w[0], 0.5, 1e-6);
    /* a masked expert scores 0 for the choice (the published masked_fill
     * 0.0): with a bias pushing every allowed choice below 0, masked
     * experts win (an -inf mask would pick 2 and 3) */
    /* choices -0.5 -0.5 | -0.1 -0.1 | -0.2 -0.2 | -0.9 -0.9: groups 1 and 2 win */
    const float neg[8] = {-1.45f, -0.55f, -0.7f, -0.7f, -0.75f, -0.75f, -1.0f, -1.0f};
    tb_moe_route(&g, l3, neg, 1, idx, w);
    CHECK(idx[0] == 0 && idx[1] == 1);
    /* LLaDA 2.x masks them to -inf (group_mask_inf): the same bias picks
     * within groups 1 and 2 (choices -0.1 -0.1 there) */
    g.group_mask_inf = 1;
    tb_moe_route(&g, l3, neg, 1, idx, w);
    CHECK(idx[0] == 2 && idx[1] == 3);
    g.group_mask_inf = 0;
    g.n_group = 1, g.topk_group = 1; /* ungrouped: expert 0 wins */
    tb_moe_route(&g, l3, NULL, 1, idx, w);
    CHECK(idx[0] == 0 && idx[1] == 2);

    /* rows are routed independently */
    float two[8] = {1, 3, 2, 0, 0, 0, 9, 1};
    q.norm_topk = 1;
    tb_moe_route(&q, two, NULL, 2, idx, w);
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 2 && idx[3] == 3);

    /* bad configs name the field */
    tb_moe_config bad = q;
    bad.top_k = 5;
    CHECK(tb_moe_config_check(&bad, err, sizeof err) != 0 && strstr(err, "num_experts_per_tok"));
    bad = g, bad.n_group = 3;
    CHECK(tb_moe_config_check(&bad, err, sizeof err) != 0 && strstr(err, "n_group"));
    bad = g, bad.n_group = 4, bad.topk_group = 1, bad.top_k = 3; /* one group of 2 cannot give 3 */
    CHECK(tb_moe_config_check(&bad, err, sizeof err) != 0 && strstr(err, "topk_group"));
    bad = q, bad.routed_scale = NAN;
    CHECK(tb_moe_config_check(&bad, err, sizeof err) != 0 && strstr(err, "routed_scaling_factor"));
    bad = q, bad.n_experts = TB_MOE_MAX_EXPERTS + 1;
    CHECK(tb_moe_config_check(&bad, err, sizeof err) != 0 && strstr(err, "num_experts"));
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *rand_vec(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

/* y[D] += weight * down(silu(gate x) * up x): one expert, plain loops, doubles */
static void dense_expert(const float *gu, const float *down, int D, int In, const float *x, double weight, double *y)
{
    double *a = malloc(sizeof(double) * In);
    for (int i = 0; i < In; i++) {
        double g = 0, u = 0;
        for (int d = 0; d < D; d++) {
            g += (double)gu[(size_t)i * D + d] * x[d];
            u += (double)gu[(size_t)(In + i) * D + d] * x[d];
        }
        a[i] = g / (1 + exp(-g)) * u;
    }
    for (int d = 0; d < D; d++) {
        double s = 0;
        for (int i = 0; i < In; i++)
            s += (double)down[(size_t)d * In + i] * a[i];
        y[d] += weight * s;
    }
    free(a);
}

/* the layer against the reference, then poisoned: one family's config */
static void forward_case(const char *name, tb_moe_config c, int rows)
{
    char err[256];
    int D = c.hidden, E = c.n_experts, In = c.expert_inter, S = c.shared_inter, k = c.top_k;
    tb_moe_weights wt = {0};
    float *router = rand_vec((size_t)E * D, 1.0f), *gu = rand_vec((size_t)E * 2 * In * D, 0.3f);
    float *down = rand_vec((size_t)E * D * In, 0.3f), *bias = rand_vec((size_t)E, 0.2f);
    float *sgu = S ? rand_vec((size_t)2 * S * D, 0.3f) : NULL, *sdown = S ? rand_vec((size_t)D * S, 0.3f) : NULL;
    float *sg = rand_vec((size_t)D, 0.5f), *x = rand_vec((size_t)rows * D, 1.0f);
    wt.router = router, wt.gate_up = gu, wt.down = down, wt.shared_gate_up = sgu, wt.shared_down = sdown;
    wt.score_bias = c.scoring == TB_MOE_SIGMOID ? bias : NULL;
    wt.shared_gate_w = c.shared_gate ? sg : NULL;
    tb_moe_scratch s;
    CHECK(tb_moe_scratch_init(&s, &c, rows, err, sizeof err) == 0);
    float *y = malloc(sizeof(float) * rows * D), *y2 = malloc(sizeof(float) * rows * D);
    int touched = -1;
    CHECK(tb_moe_forward(&c, &wt, &s, x, rows, y, &touched) == 0);

    /* reference: the router logits and experts by loops in double, the
     * choice from tb_moe_route (checked above) on those logits */
    float *lg = malloc(sizeof(float) * rows * E);
    int *idx = malloc(sizeof(int) * rows * k);
    float *w = malloc(sizeof(float) * rows * k);
    for (int r = 0; r < rows; r++)
        for (int e = 0; e < E; e++) {
            double a = 0;
            for (int d = 0; d < D; d++)
                a += (double)router[(size_t)e * D + d] * x[(size_t)r * D + d];
            lg[(size_t)r * E + e] = (float)a;
        }
    tb_moe_route(&c, lg, wt.score_bias, rows, idx, w);
    double maxdiff = 0;
    for (int r = 0; r < rows; r++) {
        double ref[64] = {0};
        const float *xr = x + (size_t)r * D;
        for (int t = 0; t < k; t++) {
            int e = idx[r * k + t];
            dense_expert(gu + (size_t)e * 2 * In * D, down + (size_t)e * D * In, D, In, xr, w[r * k + t], ref);
        }
        if (S) {
            double sh[64] = {0}, gate = 1;
            dense_expert(sgu, sdown, D, S, xr, 1.0, sh);
            if (c.shared_gate) {
                double a = 0;
                for (int d = 0; d < D; d++)
                    a += (double)sg[d] * xr[d];
                gate = sig(a);
            }
            for (int d = 0; d < D; d++)
                ref[d] += gate * sh[d];
        }
        for (int d = 0; d < D; d++) {
            double diff = fabs(ref[d] - y[(size_t)r * D + d]);
            maxdiff = diff > maxdiff ? diff : maxdiff;
        }
    }
    if (maxdiff > 1e-4)
        fprintf(stderr, "%s: max difference from the dense reference %g\n", name, maxdiff);
    CHECK(maxdiff <= 1e-4);
    /* the router's narrowest margin (tb_moe_scratch.min_gap, what
     * tests/gpu/ allows a routing difference by): the k-th choice's logit
     * minus the best unchosen one, the least over the rows, from the
     * logits the layer computed (s.logits: float32, as lg up to rounding) */
    if (c.scoring == TB_MOE_SOFTMAX) {
        double want = INFINITY;
        for (int r = 0; r < rows; r++) {
            const float *l = s.logits + (size_t)r * E;
            double other = -INFINITY;
            for (int e = 0; e < E; e++) {
                int chosen = 0;
                for (int t = 0; t < k; t++)
                    chosen |= s.idx[r * k + t] == e;
                other = !chosen && l[e] > other ? l[e] : other;
            }
            double gap = l[s.idx[r * k + k - 1]] - other;
            want = gap < want ? gap : want;
            CHECK(gap >= 0); /* the choice is the k best */
        }
        CHECK(s.min_gap == (float)want);
    }
    unsigned char seen[TB_MOE_MAX_EXPERTS];
    CHECK(touched == tb_moe_touched(idx, rows, k, E, seen));
    if (rows == 1)
        CHECK(touched == k);

    /* only the chosen experts are read: poison every other one */
    for (int e = 0; e < E; e++) {
        if (seen[e])
            continue;
        for (size_t i = 0; i < (size_t)2 * In * D; i++)
            gu[(size_t)e * 2 * In * D + i] = NAN;
        for (size_t i = 0; i < (size_t)D * In; i++)
            down[(size_t)e * D * In + i] = NAN;
    }
    CHECK(tb_moe_forward(&c, &wt, &s, x, rows, y2, NULL) == 0);
    int same = 1;
    for (int i = 0; i < rows * D; i++)
        same = same && y2[i] == y[i];
    CHECK(same);
    CHECK(tb_moe_forward(&c, &wt, &s, x, rows + 1, y2, NULL) == -1); /* past the scratch */

    free(router), free(gu), free(down), free(bias), free(sgu), free(sdown), free(sg), free(x);
    free(y), free(y2), free(lg), free(idx), free(w);
    tb_moe_scratch_free(&s);
}

int main(void)
{
    routing_cases();
    tb_moe_config qwen3 = {.hidden = 16, .n_experts = 8, .top_k = 2, .expert_inter = 12, .scoring = TB_MOE_SOFTMAX,
                           .norm_topk = 1, .n_group = 1, .topk_group = 1, .routed_scale = 1.0f};
    forward_case("qwen3-moe batch 1", qwen3, 1);
    forward_case("qwen3-moe 7 rows", qwen3, 7);
    tb_moe_config qwen2 = qwen3;
    qwen2.norm_topk = 0, qwen2.shared_inter = 20, qwen2.shared_gate = 1, qwen2.top_k = 3;
    forward_case("qwen2-moe (gated shared expert)", qwen2, 5);
    tb_moe_config bailing = {.hidden = 16, .n_experts = 16, .top_k = 4, .expert_inter = 8, .shared_inter = 8,
                             .scoring = TB_MOE_SIGMOID, .norm_topk = 1, .n_group = 4, .topk_group = 2,
                             .routed_scale = 2.5f};
    forward_case("bailing-v2 batch 1", bailing, 1);
    forward_case("bailing-v2 9 rows", bailing, 9);

    /* the margin by hand: logits 3, 1, 2.5, 0.5 with top 2 choose 0 and
     * 2; the best unchosen is 1: margin 2.5 - 1 = 1.5; a second row
     * 0, 0.25, 0, 0 chooses 1 and 0 (ties to the lower index) with margin
     * 0; the least over rows and calls is kept */
    {
        char err[128];
        tb_moe_config c4 = {.hidden = 8, .n_experts = 4, .top_k = 2, .expert_inter = 8, .scoring = TB_MOE_SOFTMAX,
                            .norm_topk = 1, .n_group = 1, .topk_group = 1, .routed_scale = 1.0f};
        tb_moe_scratch s4;
        CHECK(tb_moe_scratch_init(&s4, &c4, 2, err, sizeof err) == 0);
        CHECK(isinf(s4.min_gap) && s4.min_gap > 0);
        float router[4 * 8] = {0}, x[2 * 8] = {0}, gu[4 * 16 * 8] = {0}, down[4 * 8 * 8] = {0}, y[2 * 8];
        const float l0[4] = {3, 1, 2.5f, 0.5f}, l1[4] = {0, 0.25f, 0, 0};
        for (int e = 0; e < 4; e++)
            router[e * 8 + e] = 1; /* logit e = x[e] */
        memcpy(x, l0, sizeof l0);
        tb_moe_weights w4 = {.router = router, .gate_up = gu, .down = down};
        CHECK(tb_moe_forward(&c4, &w4, &s4, x, 1, y, NULL) == 0);
        CHECK(s4.min_gap == 1.5f);
        memcpy(x + 8, l1, sizeof l1);
        CHECK(tb_moe_forward(&c4, &w4, &s4, x, 2, y, NULL) == 0);
        CHECK(s4.min_gap == 0.0f);
        tb_moe_scratch_free(&s4);
    }
    /* a sigmoid router's margin (LLaDA 2.x), by hand: scores 0.95 0.05 |
     * 0.62 0.6 | 0.55 0.5 | 0.1 0.1, top 2 from the best 2 of 4 groups:
     * group scores 1.0, 1.22, 1.05, 0.2 keep groups 1 and 2 with a margin
     * 1.05 - 1.0, a logit change of at least 2 x 0.05 = 0.1 to move; the
     * experts 2, 3 against the best one left in the groups (0.55): 4 x
     * 0.05 = 0.2. The least: 0.1 */
    {
        char err[128];
        tb_moe_config c5 = {.hidden = 8, .n_experts = 8, .top_k = 2, .expert_inter = 8, .scoring = TB_MOE_SIGMOID,
                            .norm_topk = 1, .n_group = 4, .topk_group = 2, .group_mask_inf = 1,
                            .routed_scale = 2.5f};
        tb_moe_scratch s5;
        CHECK(tb_moe_scratch_init(&s5, &c5, 1, err, sizeof err) == 0);
        float router[8 * 8] = {0}, x[8], gu[8 * 16 * 8] = {0}, down[8 * 8 * 8] = {0}, y[8];
        const double sc[8] = {0.95, 0.05, 0.62, 0.6, 0.55, 0.5, 0.1, 0.1};
        for (int e = 0; e < 8; e++)
            router[e * 8 + e] = 1, x[e] = logit_of(sc[e]);
        tb_moe_weights w5 = {.router = router, .gate_up = gu, .down = down};
        CHECK(tb_moe_forward(&c5, &w5, &s5, x, 1, y, NULL) == 0);
        CHECK(s5.idx[0] == 2 && s5.idx[1] == 3);
        CHECK_NEAR(s5.min_gap, 0.1, 1e-5);
        tb_moe_scratch_free(&s5);
    }

    /* active bytes: the router, the touched experts, the shared ones */
    CHECK_NEAR(tb_moe_active_bytes(&bailing, 4, 2.0), 2.0 * (16 * 16 + 4 * 3 * 16 * 8 + 3 * 16 * 8), 1e-9);
    CHECK_NEAR(tb_moe_active_bytes(&qwen2, 8, 1.0), 8 * 16 + 8 * 3 * 16 * 12 + 3 * 16 * 20 + 16, 1e-9);
    return check_done();
}
