/* moe.h — a mixture-of-experts feed-forward layer on the CPU (float32,
 * OpenBLAS): the router, the routed SwiGLU experts and the shared ones, as
 * the published MoE families define them (issue 22):
 *
 *   Qwen3-MoE / Qwen2-MoE   softmax over all experts, top-k, renormalised
 *                           when norm_topk_prob; Qwen2-MoE adds a shared
 *                           expert scaled by sigmoid(w_sg . x)
 *   DeepSeek-V3, LLaDA 2.x  sigmoid scores; the choice uses scores + a
 *   (LLaDA2MoeGate)         per-expert bias, the weights the unbiased
 *                           scores; optional group-limited choice (the
 *                           best topk_group of n_group groups, a group's
 *                           score the sum of its two best; the experts of
 *                           the other groups masked to 0 by DeepSeek-V3,
 *                           to -inf by LLaDA 2.x: group_mask_inf);
 *                           renormalised, times routed_scaling_factor;
 *                           shared experts added unscaled
 *
 * The expert products run per expert over the rows routed to it (a grouped
 * GEMM done one group at a time), so a call reads only the experts some row
 * chose: at batch 1, top_k of n_experts. That is the point of MoE for
 * speed, and tb_moe_touched() counts it for the roofline. */
#ifndef TB_ENGINE_MOE_H
#define TB_ENGINE_MOE_H

#include <stddef.h>

/* Routed experts a layer may have (published configs have <= 384). */
#define TB_MOE_MAX_EXPERTS 1024

typedef enum { TB_MOE_SOFTMAX = 0, TB_MOE_SIGMOID = 1 } tb_moe_scoring;

typedef struct tb_moe_config {
    int hidden;         /* D */
    int n_experts;      /* E: routed experts */
    int top_k;          /* k <= E experts per row */
    int expert_inter;   /* I: one routed expert's intermediate size */
    int shared_inter;   /* the shared experts' intermediate size in all
                           (n_shared x their size); 0: none */
    int shared_gate;    /* 1: shared output x sigmoid(w_sg . x) (Qwen2-MoE) */
    tb_moe_scoring scoring;
    int norm_topk;      /* 1: the k weights renormalised to sum to 1 */
    int n_group;        /* groups of E / n_group experts; 1: no grouping */
    int topk_group;     /* groups a row may choose from (<= n_group) */
    int group_mask_inf; /* 1: experts outside the chosen groups score -inf
                           for the choice (LLaDA 2.x); 0: 0.0 (DeepSeek-V3) */
    float routed_scale; /* routed_scaling_factor (1: none) */
} tb_moe_config;

typedef struct tb_moe_weights {
    const float *router;         /* [E][D] */
    const float *score_bias;     /* [E]: added for the choice only; NULL: none */
    const float *gate_up;        /* [E][2 I][D]: expert e's gate rows, then up rows */
    const float *down;           /* [E][D][I] */
    const float *shared_gate_up; /* [2 shared_inter][D], NULL when shared_inter = 0 */
    const float *shared_down;    /* [D][shared_inter] */
    const float *shared_gate_w;  /* [D] when shared_gate */
} tb_moe_weights;

/* Checks a config's numbers; 0, or -1 with the reason naming the field. */
int tb_moe_config_check(const tb_moe_config *c, char *err, size_t err_size);

/* The router's choice for `rows` rows from their router logits
 * [rows][E]: idx[rows][k] (experts, best first; ties to the lower index)
 * and w[rows][k] (their weights, scaling included). */
void tb_moe_route(const tb_moe_config *c, const float *logits, const float *score_bias, int rows, int *idx,
                  float *w);

/* Distinct experts that idx[rows][k] names; seen[E] (scratch, any content)
 * is left with seen[e] = 1 for the touched ones. */
int tb_moe_touched(const int *idx, int rows, int k, int n_experts, unsigned char *seen);

/* Bytes one call reads of the layer's weights at `bytes_per_weight`, for
 * `touched` distinct experts: the router, those experts, the shared ones. */
double tb_moe_active_bytes(const tb_moe_config *c, int touched, double bytes_per_weight);
/* The same summed over `calls` layer calls that read `touched_sum`
 * distinct experts in all (the one definition; the one above is calls =
 * 1). docs/METRICS.md, "active bytes". */
double tb_moe_active_bytes_sum(const tb_moe_config *c, double calls, double touched_sum, double bytes_per_weight);
/* The same under dtype = fp8 (fp8.h): the experts' and shared experts'
 * weights one byte each plus a float scale an output row; the router
 * (and a shared gate) bf16. */
double tb_moe_active_bytes_fp8(const tb_moe_config *c, double calls, double touched_sum);

/* Scratch for up to max_rows rows. */
typedef struct tb_moe_scratch {
    int max_rows;
    float *logits;  /* [rows][E] */
    int *idx;       /* [rows][k] */
    float *w;       /* [rows][k] */
    int *order;     /* [rows k]: (row, slot) pairs grouped by expert */
    int *count;     /* [E + 1]: start of each expert's group in order */
    float *xg;      /* [rows k][D]: the gathered rows of one expert */
    float *gu;      /* [rows k][2 max(I, shared_inter)] */
    float *yg;      /* [rows k][D] */
    unsigned char *seen; /* [E] */
    size_t bytes;
    /* The router's narrowest margin since the caller last set it (to
     * INFINITY; scratch_init does): over the rows of every forward, the
     * router logit of the k-th choice minus the largest logit of an
     * expert not chosen (+inf when k = E). For a softmax router without a
     * bias that is the choice's log-probability margin: a reduced-
     * precision path (the GPU's bf16) may route a row with a margin near
     * its rounding differently, and tests/gpu/ allows for it. A sigmoid
     * router's margin is a lower bound on the logit change that flips its
     * choice, from the choice scores (moe.c's route_rows). */
    float min_gap;
    /* dtype = fp8 (fp8.h): each expert's input rows and its SwiGLU
     * activations, and the shared experts' likewise, rounded per row to
     * their E4M3 form before the product (the weights were rounded at
     * load: model.h's tb_model_round_fp8); the router reads x unrounded */
    int fp8_act;
} tb_moe_scratch;

int tb_moe_scratch_init(tb_moe_scratch *s, const tb_moe_config *c, int max_rows, char *err, size_t err_size);
void tb_moe_scratch_free(tb_moe_scratch *s);

/* y[rows][D] = MoE(x[rows][D]) (y is overwritten; x is the normalised
 * input, the residual add is the caller's). *touched (NULL: not wanted):
 * the distinct routed experts the call read. Returns 0, or -1 when rows
 * exceeds the scratch. */
int tb_moe_forward(const tb_moe_config *c, const tb_moe_weights *wt, tb_moe_scratch *s, const float *x, int rows,
                   float *y, int *touched);

#endif
