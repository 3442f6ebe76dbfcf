/* flow_cpu.c — see flow_cpu.h. Plain loops and sgemm, in the order the
 * PyTorch reference (tools/flow_reference.py) computes. */
#define _GNU_SOURCE
#include "flow_cpu.h"
#include "flow_sampler.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tb_flow_cpu_init(tb_flow_cpu *st, const tb_flow_model *m, int max_seqs, int max_len, int n_threads, char *err,
                     size_t err_size)
{
    memset(st, 0, sizeof *st);
    const tb_flow_config *c = &m->cfg;
    st->m = m;
    st->max_seqs = max_seqs;
    st->max_len = max_len;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    openblas_set_num_threads(n_threads);
    size_t R = (size_t)max_seqs * max_len, D = (size_t)c->hidden;
    size_t sizes[] = {R * D, R * D, R * 3 * D, R * D, R * (size_t)c->mlp_dim, R * 2 * D, (size_t)max_len * max_len,
                      2 * (size_t)max_seqs * c->cond_dim, 2 * (size_t)max_seqs * 6 * D, (size_t)c->freq_dim};
    float **ptrs[] = {&st->x, &st->h, &st->qkv, &st->att, &st->up, &st->cat, &st->scores, &st->cond, &st->mod, &st->tf};
    int ok = max_seqs >= 1 && max_len >= 1;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *ptrs[i] = ok ? malloc(sizes[i] * sizeof(float) + 1) : NULL;
        ok = ok && *ptrs[i];
        st->bytes += sizes[i] * sizeof(float);
    }
    if (!ok) {
        snprintf(err, err_size, "out of memory: the flow forward's buffers need %.2f GB (%d canvases x %d positions)",
                 (double)st->bytes / 1e9, max_seqs, max_len);
        tb_flow_cpu_free(st);
        return -1;
    }
    return 0;
}

void tb_flow_cpu_free(tb_flow_cpu *st)
{
    float *bufs[] = {st->x, st->h, st->qkv, st->att, st->up, st->cat, st->scores, st->cond, st->mod, st->tf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(st, 0, sizeof *st);
}

static float silu(float v)
{
    return v / (1.0f + expf(-v));
}

static float gelu_tanh(float v)
{
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

/* C[rows][out] (+)= A[rows][in] W[out][in]^T */
static void matmul_t(float *c, const float *a, const float *w, int rows, int out, int in, float beta)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, a, in, w, in, beta, c, out);
}

/* y = LN(x) w (1 + scale) + shift over L rows of width D: LayerNorm
 * without bias (mean and variance in float32), then the modulation. */
static void ln_mod(float *y, const float *x, const float *w, const float *shift, const float *scale, int L, int D,
                   double eps)
{
    for (int r = 0; r < L; r++) {
        const float *xr = x + (size_t)r * D;
        float *yr = y + (size_t)r * D;
        float mean = 0, var = 0;
        for (int i = 0; i < D; i++)
            mean += xr[i];
        mean /= (float)D;
        for (int i = 0; i < D; i++)
            var += (xr[i] - mean) * (xr[i] - mean);
        var /= (float)D;
        float inv = 1.0f / sqrtf(var + (float)eps);
        for (int i = 0; i < D; i++)
            yr[i] = ((xr[i] - mean) * inv * w[i]) * (1.0f + scale[i]) + shift[i];
    }
}

/* The conditioning vector of noise level gamma: cond[C]. */
static void time_cond(tb_flow_cpu *st, double gamma, float *cond)
{
    const tb_flow_model *m = st->m;
    const tb_flow_config *c = &m->cfg;
    int half = c->freq_dim / 2, C = c->cond_dim;
    for (int k = 0; k < half; k++) {
        float w = (float)exp(-log(c->time_max_period) * k / half);
        float a = (float)gamma * w;
        st->tf[k] = cosf(a);
        st->tf[half + k] = sinf(a);
    }
    float hb[4096]; /* C <= 4096: checked at load */
    for (int o = 0; o < C; o++) {
        float s = m->t_b1[o];
        for (int i = 0; i < c->freq_dim; i++)
            s += m->t_w1[(size_t)o * c->freq_dim + i] * st->tf[i];
        hb[o] = silu(s);
    }
    for (int o = 0; o < C; o++) {
        float s = m->t_b2[o];
        for (int i = 0; i < C; i++)
            s += m->t_w2[(size_t)o * C + i] * hb[i];
        cond[o] = silu(s);
    }
}

/* out[n] = W[n][C] cond + b */
static void modulation(const float *w, const float *b, const float *cond, int n, int C, float *out)
{
    for (int o = 0; o < n; o++) {
        float s = b[o];
        for (int i = 0; i < C; i++)
            s += w[(size_t)o * C + i] * cond[i];
        out[o] = s;
    }
}

/* Half-split rotary embedding of one head vector at position pos. */
static void rope(float *v, int hd, int pos, const float *inv_freq)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float angle = (float)pos * inv_freq[i];
        float cs = cosf(angle), sn = sinf(angle), a = v[i], b = v[i + half];
        v[i] = a * cs - b * sn;
        v[i + half] = b * cs + a * sn;
    }
}

/* alpha / sigma^2 of level g: the skip term's scale */
static float skip_scale(double g)
{
    double sp = g < 0 ? log1p(exp(g)) - g : log1p(exp(-g)); /* softplus(-gamma) */
    return (float)exp((sp - g) / 2);
}

int tb_flow_cpu_forward(tb_flow_cpu *st, const float *z, const float *x_sc, const double *gamma, const int *pad,
                        int B, int L, int gen0, float *logits)
{
    const tb_flow_model *m = st->m;
    const tb_flow_config *c = &m->cfg;
    if (B < 1 || L < 1 || B > st->max_seqs || L > st->max_len || gen0 < 0 || gen0 > L)
        return -1;
    int D = c->hidden, C = c->cond_dim, F = c->mlp_dim, V = c->vocab, H = c->n_heads, hd = c->head_dim;
    int R = B * L;
    /* conditions: cond[b] at canvas b's level, cond[B + b] at the prompt
     * level; row r takes the second when its position is before gp */
    int gp = c->prompt_gamma_min ? gen0 : 0, nc = gp > 0 ? 2 * B : B;
    double gmin = tb_flow_gamma_min(c);
#define MODROW(r) ((r) % L < gp ? B + (r) / L : (r) / L)
    for (int b = 0; b < B; b++)
        time_cond(st, gamma[b], st->cond + (size_t)b * C);
    for (int b = B; b < nc; b++)
        time_cond(st, gmin, st->cond + (size_t)b * C);
    /* input: x = z + W_sc [z ; x_sc] */
    memcpy(st->x, z, (size_t)R * D * sizeof(float));
    if (c->self_conditioning) {
        for (int r = 0; r < R; r++) {
            memcpy(st->cat + (size_t)r * 2 * D, z + (size_t)r * D, (size_t)D * sizeof(float));
            if (x_sc)
                memcpy(st->cat + (size_t)r * 2 * D + D, x_sc + (size_t)r * D, (size_t)D * sizeof(float));
            else
                memset(st->cat + (size_t)r * 2 * D + D, 0, (size_t)D * sizeof(float));
        }
        matmul_t(st->x, st->cat, m->sc_w, R, D, 2 * D, 1.0f);
    }
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < c->n_blocks; l++) {
        const tb_flow_block *blk = &m->blocks[l];
        for (int b = 0; b < nc; b++)
            modulation(blk->ada_w, blk->ada_b, st->cond + (size_t)b * C, 6 * D, C, st->mod + (size_t)b * 6 * D);
        /* attention */
        for (int r = 0; r < R; r++) {
            const float *mb = st->mod + (size_t)MODROW(r) * 6 * D;
            ln_mod(st->h + (size_t)r * D, st->x + (size_t)r * D, blk->norm1, mb, mb + D, 1, D, c->norm_eps);
        }
        matmul_t(st->qkv, st->h, blk->wqkv, R, 3 * D, D, 0.0f);
        for (int r = 0; r < R; r++) {
            float *q = st->qkv + (size_t)r * 3 * D;
            int p = pad ? pad[r / L] : 0, pos = r % L >= p ? r % L - p : 0; /* RoPE from the first real position */
            for (int hh = 0; hh < H; hh++) {
                rope(q + hh * hd, hd, pos, m->inv_freq);
                rope(q + D + hh * hd, hd, pos, m->inv_freq);
            }
        }
        for (int b = 0; b < B; b++)
            for (int hh = 0; hh < H; hh++) {
                const float *q = st->qkv + (size_t)b * L * 3 * D + (size_t)hh * hd;
                float *s = st->scores;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, hd, scale, q, 3 * D, q + D, 3 * D, 0.0f,
                            s, L);
                int lo = pad && pad[b] < L ? pad[b] : 0; /* keys [0, lo): left padding, masked */
                for (int t = 0; t < L; t++) {
                    /* keys [lo, hi): a prompt row of a prompt_attention
                     * "prompt" model stops at the prompt's end */
                    int hi = c->prompt_attends_prompt && t < gen0 && gen0 > lo ? gen0 : L;
                    float *row = s + (size_t)t * L, mx = -INFINITY, sum = 0;
                    for (int j = lo; j < hi; j++)
                        mx = row[j] > mx ? row[j] : mx;
                    for (int j = lo; j < hi; j++) {
                        row[j] = expf(row[j] - mx);
                        sum += row[j];
                    }
                    for (int j = 0; j < lo; j++)
                        row[j] = 0.0f;
                    for (int j = lo; j < hi; j++)
                        row[j] /= sum;
                    for (int j = hi; j < L; j++)
                        row[j] = 0.0f;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, hd, L, 1.0f, s, L, q + 2 * D, 3 * D, 0.0f,
                            st->att + (size_t)b * L * D + (size_t)hh * hd, D);
            }
        /* x += g1 * W_o att (W_o att into h first: the gate scales it) */
        matmul_t(st->h, st->att, blk->wo, R, D, D, 0.0f);
        for (int r = 0; r < R; r++) {
            const float *g1 = st->mod + (size_t)MODROW(r) * 6 * D + 2 * D;
            for (int i = 0; i < D; i++)
                st->x[(size_t)r * D + i] += g1[i] * st->h[(size_t)r * D + i];
        }
        /* MLP */
        for (int r = 0; r < R; r++) {
            const float *mb = st->mod + (size_t)MODROW(r) * 6 * D;
            ln_mod(st->h + (size_t)r * D, st->x + (size_t)r * D, blk->norm2, mb + 3 * D, mb + 4 * D, 1, D,
                   c->norm_eps);
        }
        matmul_t(st->up, st->h, blk->w_up, R, F, D, 0.0f);
        for (int r = 0; r < R; r++)
            for (int i = 0; i < F; i++)
                st->up[(size_t)r * F + i] = gelu_tanh(st->up[(size_t)r * F + i] + blk->b_up[i]);
        matmul_t(st->h, st->up, blk->w_down, R, D, F, 0.0f);
        for (int r = 0; r < R; r++) {
            const float *g2 = st->mod + (size_t)MODROW(r) * 6 * D + 5 * D;
            for (int i = 0; i < D; i++)
                st->x[(size_t)r * D + i] += g2[i] * (st->h[(size_t)r * D + i] + blk->b_down[i]);
        }
    }
    /* output layer: (shift, scale) of each condition in its mod row */
    for (int b = 0; b < nc; b++)
        modulation(m->fada_w, m->fada_b, st->cond + (size_t)b * C, 2 * D, C, st->mod + (size_t)b * 6 * D);
    for (int r = 0; r < R; r++) {
        const float *mb = st->mod + (size_t)MODROW(r) * 6 * D;
        ln_mod(st->h + (size_t)r * D, st->x + (size_t)r * D, m->norm_f, mb, mb + D, 1, D, c->norm_eps);
    }
#undef MODROW
    matmul_t(logits, st->h, m->w_out, R, V, D, 0.0f);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            logits[(size_t)r * V + v] += m->b_out[v];
    if (c->use_bias) /* the skip term: (alpha / sigma^2) z E^T, each row at its own level */
        for (int b = 0; b < B; b++) {
            if (gp > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, gp, V, D, skip_scale(gmin), z + (size_t)b * L * D,
                            D, m->embed, D, 1.0f, logits + (size_t)b * L * V, V);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L - gp, V, D, skip_scale(gamma[b]),
                        z + ((size_t)b * L + gp) * D, D, m->embed, D, 1.0f, logits + ((size_t)b * L + gp) * V, V);
        }
    return 0;
}

void tb_flow_cpu_x0(const tb_flow_model *m, float *logits, size_t rows, float *x0)
{
    int V = m->cfg.vocab, D = m->cfg.hidden;
    for (size_t r = 0; r < rows; r++) {
        float *l = logits + r * V;
        double mx = l[0], z = 0;
        for (int v = 1; v < V; v++)
            mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < V; v++)
            z += exp((double)l[v] - mx);
        for (int v = 0; v < V; v++)
            l[v] = (float)(exp((double)l[v] - mx) / z);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, D, V, 1.0f, logits, V, m->embed, D, 0.0f, x0, D);
}
