/* moe.c — see moe.h. */
#include "moe.h"
#include "fp8.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tb_moe_config_check(const tb_moe_config *c, char *err, size_t err_size)
{
    const char *why = NULL;
    if (c->hidden < 1)
        why = "hidden_size must be >= 1";
    else if (c->n_experts < 1 || c->n_experts > TB_MOE_MAX_EXPERTS)
        why = "num_experts must be in [1, 1024]";
    else if (c->top_k < 1 || c->top_k > c->n_experts)
        why = "num_experts_per_tok must be in [1, num_experts]";
    else if (c->expert_inter < 1)
        why = "moe_intermediate_size must be >= 1";
    else if (c->shared_inter < 0)
        why = "the shared experts' intermediate size must be >= 0";
    else if (c->n_group < 1 || c->n_experts % c->n_group != 0)
        why = "n_group must be >= 1 and divide num_experts";
    else if (c->topk_group < 1 || c->topk_group > c->n_group)
        why = "topk_group must be in [1, n_group]";
    else if (c->n_group > 1 && (long)c->topk_group * (c->n_experts / c->n_group) < c->top_k)
        why = "topk_group groups hold fewer experts than num_experts_per_tok";
    else if (!(c->routed_scale > 0) || !isfinite(c->routed_scale))
        why = "routed_scaling_factor must be a finite number > 0";
    else if (c->scoring != TB_MOE_SOFTMAX && c->scoring != TB_MOE_SIGMOID)
        why = "scoring_func must be softmax or sigmoid";
    if (why) {
        snprintf(err, err_size, "%s", why);
        return -1;
    }
    return 0;
}

/* The index of the largest of v[0..n) among those with ok[i] (NULL: all),
 * skipping taken[i]; ties to the lower index. -1 when none is left. (NaN
 * never wins a comparison: a NaN score is taken last.) */
static int argmax_left(const float *v, const unsigned char *ok, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if ((ok && !ok[i]) || taken[i])
            continue;
        if (best < 0 || v[i] > v[best])
            best = i;
    }
    return best;
}

/* tb_moe_route, and for a sigmoid router each row's margin in gap[rows]
 * (NULL: not wanted): the least change of a router logit that can change
 * the choice, bounded below from the choice scores (a sigmoid moves by at
 * most a quarter of its logit's change, a group score, two of them, by
 * half): min(4 (k-th choice score - best unchosen eligible one),
 * 2 (topk_group-th group score - best group left out)). */
static void route_rows(const tb_moe_config *c, const float *logits, const float *score_bias, int rows, int *idx,
                       float *w, float *gap)
{
    int E = c->n_experts, k = c->top_k, G = c->n_group, per = E / c->n_group;
    float score[TB_MOE_MAX_EXPERTS], choice[TB_MOE_MAX_EXPERTS], gscore[TB_MOE_MAX_EXPERTS];
    unsigned char ok[TB_MOE_MAX_EXPERTS], taken[TB_MOE_MAX_EXPERTS], gtaken[TB_MOE_MAX_EXPERTS];
    if (E < 1 || E > TB_MOE_MAX_EXPERTS) /* tb_moe_config_check refuses it */
        return;
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * E;
        if (c->scoring == TB_MOE_SOFTMAX) { /* float32 softmax, the sum in double */
            float mx = l[0];
            for (int e = 1; e < E; e++)
                mx = l[e] > mx ? l[e] : mx;
            double z = 0;
            for (int e = 0; e < E; e++)
                z += (score[e] = expf(l[e] - mx));
            for (int e = 0; e < E; e++)
                score[e] = (float)(score[e] / z);
        } else {
            for (int e = 0; e < E; e++)
                score[e] = 1.0f / (1.0f + expf(-l[e]));
        }
        for (int e = 0; e < E; e++)
            choice[e] = score[e] + (score_bias ? score_bias[e] : 0.0f);
        /* group-limited: a group's score is the sum of its two best choice
         * scores; the experts outside the topk_group best groups get a
         * choice score of 0 as DeepSeek-V3's code masks them (masked_fill
         * 0.0: with a negative bias such an expert can still win), or -inf
         * as LLaDA 2.x's does (group_mask_inf) */
        if (G > 1) {
            for (int g = 0; g < G; g++) {
                float b1 = -INFINITY, b2 = -INFINITY;
                for (int j = 0; j < per; j++) {
                    float v = choice[g * per + j];
                    if (v > b1)
                        b2 = b1, b1 = v;
                    else if (v > b2)
                        b2 = v;
                }
                gscore[g] = per >= 2 ? b1 + b2 : b1;
                gtaken[g] = 0;
            }
            memset(ok, 0, (size_t)E);
            float glast = 0;
            for (int t = 0; t < c->topk_group; t++) {
                int g = argmax_left(gscore, NULL, gtaken, G);
                gtaken[g] = 1;
                glast = gscore[g];
                memset(ok + (size_t)g * per, 1, (size_t)per);
            }
            int gout = argmax_left(gscore, NULL, gtaken, G);
            if (gap)
                gap[r] = gout < 0 ? INFINITY : 2 * (glast - gscore[gout]);
            for (int e = 0; e < E; e++)
                if (!ok[e])
                    choice[e] = c->group_mask_inf ? -INFINITY : 0.0f;
        }
        if (gap && G <= 1)
            gap[r] = INFINITY;
        memset(taken, 0, (size_t)E);
        int *ri = idx + (size_t)r * k;
        float *rw = w + (size_t)r * k, sum = 0;
        for (int t = 0; t < k; t++) {
            int e = argmax_left(choice, NULL, taken, E);
            taken[e] = 1;
            ri[t] = e;
            rw[t] = score[e]; /* the unbiased score */
            sum += rw[t];
        }
        if (gap) { /* the best expert left out that the groups allow */
            int out = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (G <= 1 || ok[e]) && (out < 0 || choice[e] > choice[out]))
                    out = e;
            float m = out < 0 ? INFINITY : 4 * (choice[ri[k - 1]] - choice[out]);
            gap[r] = m < gap[r] ? m : gap[r];
        }
        for (int t = 0; t < k; t++) {
            if (c->norm_topk)
                rw[t] /= sum;
            rw[t] *= c->routed_scale;
        }
    }
}

void tb_moe_route(const tb_moe_config *c, const float *logits, const float *score_bias, int rows, int *idx,
                  float *w)
{
    route_rows(c, logits, score_bias, rows, idx, w, NULL);
}

int tb_moe_touched(const int *idx, int rows, int k, int n_experts, unsigned char *seen)
{
    memset(seen, 0, (size_t)n_experts);
    int n = 0;
    for (int i = 0; i < rows * k; i++)
        if (!seen[idx[i]])
            seen[idx[i]] = 1, n++;
    return n;
}

double tb_moe_active_bytes_sum(const tb_moe_config *c, double calls, double touched_sum, double bytes_per_weight)
{
    double D = c->hidden, per_expert = 3.0 * D * c->expert_inter;
    double shared = 3.0 * D * c->shared_inter + (c->shared_gate ? D : 0);
    return bytes_per_weight * (calls * ((double)c->n_experts * D + shared) + touched_sum * per_expert);
}

double tb_moe_active_bytes_fp8(const tb_moe_config *c, double calls, double touched_sum)
{
    double D = c->hidden, mi = c->expert_inter, S = c->shared_inter;
    double per_expert = 3.0 * D * mi + 4.0 * (2 * mi + D); /* codes, then a float scale an output row */
    double shared = S > 0 ? 3.0 * D * S + 4.0 * (2 * S + D) : 0;
    double bf16 = 2.0 * ((double)c->n_experts * D + (c->shared_gate ? D : 0)); /* router, shared gate */
    return calls * (bf16 + shared) + touched_sum * per_expert;
}

double tb_moe_active_bytes(const tb_moe_config *c, int touched, double bytes_per_weight)
{
    return tb_moe_active_bytes_sum(c, 1, touched, bytes_per_weight);
}

int tb_moe_scratch_init(tb_moe_scratch *s, const tb_moe_config *c, int max_rows, char *err, size_t err_size)
{
    memset(s, 0, sizeof *s);
    if (tb_moe_config_check(c, err, err_size) != 0)
        return -1;
    s->max_rows = max_rows;
    s->min_gap = INFINITY;
    size_t R = (size_t)(max_rows > 0 ? max_rows : 1), E = (size_t)c->n_experts, k = (size_t)c->top_k;
    size_t D = (size_t)c->hidden, I2 = 2 * (size_t)(c->expert_inter > c->shared_inter ? c->expert_inter : c->shared_inter);
    s->bytes = sizeof(float) * (R * E + R * k + R * k * D + R * k * I2 + R * k * D) + sizeof(int) * (R * k * 2 + E + 1) + E;
    s->logits = malloc(sizeof(float) * R * E);
    s->idx = malloc(sizeof(int) * R * k);
    s->w = malloc(sizeof(float) * R * k);
    s->order = malloc(sizeof(int) * R * k);
    s->count = malloc(sizeof(int) * (E + 1));
    s->xg = malloc(sizeof(float) * R * k * D);
    s->gu = malloc(sizeof(float) * R * k * I2);
    s->yg = malloc(sizeof(float) * R * k * D);
    s->seen = malloc(E);
    if (!s->logits || !s->idx || !s->w || !s->order || !s->count || !s->xg || !s->gu || !s->yg || !s->seen) {
        snprintf(err, err_size, "out of memory: the MoE layer's scratch needs %.2f MB (%d rows)", (double)s->bytes / 1e6,
                 max_rows);
        tb_moe_scratch_free(s);
        return -1;
    }
    return 0;
}

void tb_moe_scratch_free(tb_moe_scratch *s)
{
    free(s->logits);
    free(s->idx);
    free(s->w);
    free(s->order);
    free(s->count);
    free(s->xg);
    free(s->gu);
    free(s->yg);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

/* dtype = fp8: an expert's input rows rounded to their E4M3 form (fp8.h's
 * tb_fp8_round_input_rows: from bf16, as the device holds them) */
static void fp8_rows(const tb_moe_scratch *s, float *a, int rows, int cols, int ld)
{
    if (s->fp8_act)
        tb_fp8_round_input_rows(a, (size_t)rows, (size_t)cols, (size_t)ld);
}

/* gu[n][2 In] (gate | up, In = the intermediate size) -> gu[n][0..In) = silu(gate) * up, row stride 2 In */
static void swiglu_rows(float *gu, int n, int In)
{
    for (int r = 0; r < n; r++) {
        float *g = gu + (size_t)r * 2 * In;
        for (int i = 0; i < In; i++) {
            float a = g[i];
            g[i] = a / (1.0f + expf(-a)) * g[In + i];
        }
    }
}

int tb_moe_forward(const tb_moe_config *c, const tb_moe_weights *wt, tb_moe_scratch *s, const float *x, int rows,
                   float *y, int *touched)
{
    if (rows < 1 || rows > s->max_rows)
        return -1;
    int D = c->hidden, E = c->n_experts, k = c->top_k, In = c->expert_inter;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, E, D, 1.0f, x, D, wt->router, D, 0.0f, s->logits, E);
    if (c->scoring == TB_MOE_SIGMOID) { /* the margin from the choice scores */
        float *gap = s->yg; /* scratch: rows k D >= rows floats */
        route_rows(c, s->logits, wt->score_bias, rows, s->idx, s->w, gap);
        for (int r = 0; r < rows; r++)
            s->min_gap = gap[r] < s->min_gap ? gap[r] : s->min_gap;
    } else {
        route_rows(c, s->logits, wt->score_bias, rows, s->idx, s->w, NULL);
    }
    for (int r = 0; r < rows && k < E && c->scoring == TB_MOE_SOFTMAX; r++) {
        const float *l = s->logits + (size_t)r * E;
        const int *ri = s->idx + (size_t)r * k;
        float other = -INFINITY;
        for (int e = 0; e < E; e++) {
            int chosen = 0;
            for (int t = 0; t < k && !chosen; t++)
                chosen = ri[t] == e;
            if (!chosen && l[e] > other)
                other = l[e];
        }
        float gap = l[ri[k - 1]] - other;
        if (gap < s->min_gap)
            s->min_gap = gap;
    }
    if (touched)
        *touched = tb_moe_touched(s->idx, rows, k, E, s->seen);
    /* (row, slot) pairs grouped by expert, rows ascending within a group:
     * a counting sort */
    memset(s->count, 0, sizeof(int) * (size_t)(E + 1));
    for (int i = 0; i < rows * k; i++)
        s->count[s->idx[i] + 1]++;
    for (int e = 0; e < E; e++)
        s->count[e + 1] += s->count[e];
    {
        int *next = s->count; /* reused as the fill pointer, restored below */
        for (int i = 0; i < rows * k; i++)
            s->order[next[s->idx[i]]++] = i;
        for (int e = E; e > 0; e--)
            next[e] = next[e - 1];
        next[0] = 0;
    }
    memset(y, 0, sizeof(float) * (size_t)rows * D);
    /* experts in index order, each over its rows (the order the reference
     * modelling code adds them in, so the sums round alike) */
    for (int e = 0; e < E; e++) {
        int n = s->count[e + 1] - s->count[e];
        if (n == 0)
            continue; /* an expert no row chose is never read */
        const int *pairs = s->order + s->count[e];
        for (int j = 0; j < n; j++)
            memcpy(s->xg + (size_t)j * D, x + (size_t)(pairs[j] / k) * D, sizeof(float) * (size_t)D);
        fp8_rows(s, s->xg, n, D, D);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, 2 * In, D, 1.0f, s->xg, D,
                    wt->gate_up + (size_t)e * 2 * In * D, D, 0.0f, s->gu, 2 * In);
        swiglu_rows(s->gu, n, In);
        fp8_rows(s, s->gu, n, In, 2 * In);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, D, In, 1.0f, s->gu, 2 * In,
                    wt->down + (size_t)e * D * In, In, 0.0f, s->yg, D);
        for (int j = 0; j < n; j++) {
            float wj = s->w[pairs[j]];
            float *yr = y + (size_t)(pairs[j] / k) * D;
            const float *g = s->yg + (size_t)j * D;
            for (int d = 0; d < D; d++)
                yr[d] += wj * g[d];
        }
    }
    int S = c->shared_inter;
    if (S > 0) {
        const float *xs = x;
        if (s->fp8_act) { /* the rounded rows in xg (free now: rows k D >= rows D floats) */
            memcpy(s->xg, x, sizeof(float) * (size_t)rows * D);
            fp8_rows(s, s->xg, rows, D, D);
            xs = s->xg;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, 2 * S, D, 1.0f, xs, D, wt->shared_gate_up, D, 0.0f,
                    s->gu, 2 * S);
        swiglu_rows(s->gu, rows, S);
        fp8_rows(s, s->gu, rows, S, 2 * S);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, D, S, 1.0f, s->gu, 2 * S, wt->shared_down, S, 0.0f,
                    s->yg, D);
        for (int r = 0; r < rows; r++) {
            float gate = 1.0f;
            if (c->shared_gate) {
                float a = 0;
                for (int d = 0; d < D; d++)
                    a += wt->shared_gate_w[d] * x[(size_t)r * D + d];
                gate = 1.0f / (1.0f + expf(-a));
            }
            for (int d = 0; d < D; d++)
                y[(size_t)r * D + d] += gate * s->yg[(size_t)r * D + d];
        }
    }
    return 0;
}
