/* flow_sampler.c — see flow_sampler.h. */
#define _GNU_SOURCE
#include "flow_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const tb_choice tb_flow_solver_choices[] = TB_CHOICES_TABLE(TB_FLOW_SOLVER_LIST);
const tb_choice tb_flow_prompt_choices[] = TB_CHOICES_TABLE(TB_FLOW_PROMPT_LIST);

static double sigmoid(double x)
{
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

double tb_flow_alpha(double gamma)
{
    return sqrt(sigmoid(-gamma));
}

double tb_flow_sigma(double gamma)
{
    return sqrt(sigmoid(gamma));
}

double tb_flow_gamma_min(const tb_flow_config *c)
{
    return c->gumbel_loc - c->gumbel_scale * log(-log(c->gumbel_cutoff));
}

void tb_flow_schedule(const tb_flow_config *c, int N, double *gamma)
{
    double lo = tb_flow_gamma_min(c);
    double hi = c->gumbel_loc - c->gumbel_scale * log(c->gumbel_cutoff);
    for (int i = 0; i < N; i++) {
        double q = N == 1 ? 1 - c->t_eps : (1 - c->t_eps) + (c->t_eps - (1 - c->t_eps)) * i / (N - 1);
        double g = c->gumbel_loc - c->gumbel_scale * log(-log(q));
        gamma[i] = g < lo ? lo : g > hi ? hi : g;
    }
}

uint64_t tb_flow_noise_state(uint64_t seed, uint32_t r) { return seed ^ (0x9E3779B97F4A7C15ULL * (r + 1)); }

void tb_flow_gaussian(uint64_t *state, float *x, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        uint64_t a, b;
        uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        a = z ^ (z >> 31);
        z = (*state += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        b = z ^ (z >> 31);
        double u1 = ((double)(a >> 11) + 1) / 9007199254740993.0, u2 = (double)(b >> 11) / 9007199254740992.0;
        double r = sqrt(-2 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
}

/* The sampler's buffers. */
typedef struct work {
    float *z, *xsc, *x0, *logits, *y2, *e1;
    double *g;
} work;

/* Prompt rows of z and x_sc before a forward at noise level g. */
static void set_prompt(const tb_flow_model *m, const tb_flow_params *p, const int32_t *tokens, const int *pad,
                       int B, int L, int gen0, const float *noise, double g, float *z, float *xsc)
{
    int D = m->cfg.hidden;
    double a = tb_flow_alpha(g), s = tb_flow_sigma(g);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < gen0; i++) {
            size_t row = (size_t)b * L + i;
            float *zr = z + row * D, *xr = xsc + row * D;
            if (i < (pad ? pad[b] : 0)) { /* filler: masked, any value */
                memset(zr, 0, (size_t)D * sizeof(float));
                memset(xr, 0, (size_t)D * sizeof(float));
                continue;
            }
            const float *e = m->embed + (size_t)tokens[row] * D, *xi = noise + row * D;
            for (int d = 0; d < D; d++) {
                zr[d] = p->prompt == TB_FLOW_PROMPT_CLEAN ? e[d] : (float)(a * e[d] + s * xi[d]);
                xr[d] = e[d];
            }
        }
}

int tb_flow_sample(const tb_flow_model *m, const tb_flow_engine *e, const tb_flow_params *p, int32_t *tokens,
                   const int *pad, int B, int L, int gen0, const float *noise, int *forwards, tb_flow_progress progress,
                   void *progress_ctx)
{
    int D = m->cfg.hidden, V = m->cfg.vocab, N = p->steps;
    size_t R = (size_t)B * L, n = R * D;
    *forwards = 0;
    if (N < 1 || gen0 < 0 || gen0 >= L)
        return -1;
    work w = {0};
    w.z = malloc(n * sizeof(float));
    w.xsc = calloc(n, sizeof(float));
    w.x0 = malloc(n * sizeof(float));
    w.y2 = malloc(n * sizeof(float));
    w.e1 = malloc(n * sizeof(float));
    w.logits = malloc(R * (size_t)V * sizeof(float));
    w.g = malloc((size_t)N * sizeof(double));
    double *gb = malloc((size_t)B * sizeof(double));
    int rc = -1;
    if (!w.z || !w.xsc || !w.x0 || !w.y2 || !w.e1 || !w.logits || !w.g || !gb)
        goto out;
    tb_flow_schedule(&m->cfg, N, w.g);
    memcpy(w.z, noise, n * sizeof(float));
#define FORWARD(zz, gamma)                                                                                           \
    do {                                                                                                             \
        for (int b_ = 0; b_ < B; b_++)                                                                               \
            gb[b_] = (gamma);                                                                                        \
        if (e->forward(e->ctx, zz, w.xsc, gb, pad, B, L, gen0, w.logits) != 0) /* x_sc: 0 at first */              \
            goto out;                                                                                                \
        ++*forwards;                                                                                                 \
        if (progress && progress(progress_ctx, *forwards - 1) != 0)                                                  \
            goto out;                                                                                                \
    } while (0)
    for (int i = 0; i + 1 < N; i++) {
        double t = w.g[i], s = w.g[i + 1];
        double at = tb_flow_alpha(t), st = tb_flow_sigma(t), as = tb_flow_alpha(s), ss = tb_flow_sigma(s);
        set_prompt(m, p, tokens, pad, B, L, gen0, noise, t, w.z, w.xsc);
        FORWARD(w.z, t);
        e->x0(e->ctx, w.logits, R, w.x0);
        if (p->solver == TB_FLOW_EULER) {
            for (size_t k = 0; k < n; k++)
                w.z[k] = (float)(as * w.x0[k] + ss / st * (w.z[k] - at * w.x0[k]));
            memcpy(w.xsc, w.x0, n * sizeof(float));
            continue;
        }
        /* Heun: the second forward at s from the Euler point, with x0 as
         * its self-condition */
        double rt = st / at, rs = ss / as;
        for (size_t k = 0; k < n; k++) {
            double y = w.z[k] / at;
            w.e1[k] = (float)((y - w.x0[k]) / rt);
            w.y2[k] = (float)(as * (y + (rs - rt) * w.e1[k])); /* z at s */
        }
        memcpy(w.xsc, w.x0, n * sizeof(float));
        set_prompt(m, p, tokens, pad, B, L, gen0, noise, s, w.y2, w.xsc);
        FORWARD(w.y2, s);
        e->x0(e->ctx, w.logits, R, w.x0); /* x0' */
        for (size_t k = 0; k < n; k++) {
            double y = w.z[k] / at, e2 = (w.y2[k] / as - w.x0[k]) / rs;
            w.z[k] = (float)(as * (y + (rs - rt) * (w.e1[k] + e2) / 2));
        }
        memcpy(w.xsc, w.x0, n * sizeof(float));
    }
    set_prompt(m, p, tokens, pad, B, L, gen0, noise, w.g[N - 1], w.z, w.xsc);
    FORWARD(w.z, w.g[N - 1]);
#undef FORWARD
    for (int b = 0; b < B; b++)
        for (int i = gen0; i < L; i++) {
            const float *l = w.logits + ((size_t)b * L + i) * V;
            int32_t best = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[best])
                    best = v;
            tokens[(size_t)b * L + i] = best;
        }
    rc = 0;
out:
    free(w.z);
    free(w.xsc);
    free(w.x0);
    free(w.y2);
    free(w.e1);
    free(w.logits);
    free(w.g);
    free(gb);
    return rc;
}
