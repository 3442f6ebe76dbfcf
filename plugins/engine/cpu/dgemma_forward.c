/* dgemma_forward.c — see dgemma_forward.h. */
#define _GNU_SOURCE
#include "dgemma_forward.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8.h"
#include "safetensors.h"

typedef enum { ENCODE, DENOISE } pass;

/* C[rows][out] = A[rows][in] (row stride lda) . W[out][in]^T */
static void matmul_t(float *c, const float *a, int lda, const float *w, int rows, int out, int in)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, a, lda, w, in, 0.0f, c, out);
}

/* dtype = fp8: a projection's input rows rounded to their E4M3 form
 * (fp8.h's tb_fp8_round_input_rows: from bf16, as the device holds them) */
static void fp8_act(const tb_dgemma_state *st, float *a, int rows, int cols, int ld)
{
    if (st->fp8_act)
        tb_fp8_round_input_rows(a, (size_t)rows, (size_t)cols, (size_t)ld);
}

/* DiffusionGemmaRMSNorm: y = x (mean(x^2) + eps)^-0.5 [* w]; no +1 offset;
 * w NULL: no weight. y may be x. */
static void rms(float *y, const float *x, const float *w, int rows, int n, double eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        float f = (float)pow(ss / n + eps, -0.5);
        for (int i = 0; i < n; i++)
            yr[i] = w ? xr[i] * f * w[i] : xr[i] * f;
    }
}

/* gelu_pytorch_tanh */
static float gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* gu [rows][2 n] (gate, up) -> gu's first n of each row = gelu(gate) up */
static void geglu(float *gu, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        float *g = gu + (size_t)r * 2 * n;
        for (int i = 0; i < n; i++)
            g[i] = gelu_tanh(g[i]) * g[n + i];
    }
}

/* rotate-half RoPE over a head of hd: dims i and i + hd/2 turn by pos x inv_freq[i] */
static void rope(float *v, int hd, int pos, const float *inv_freq)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        float a = (float)pos * inv_freq[i];
        float c = (float)cos((double)a), s = (float)sin((double)a);
        float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
    }
}

static int max_i(int a, int b)
{
    return a > b ? a : b;
}

int tb_dgemma_state_init(tb_dgemma_state *st, const tb_dgemma_model *m, int max_ctx, int max_rows, char *err,
                         size_t err_size)
{
    memset(st, 0, sizeof *st);
    const tb_dgemma_config *c = &m->cfg;
    if (max_rows < c->canvas || max_ctx < 1) {
        snprintf(err, err_size, "DiffusionGemma state: max_rows %d must hold the canvas (%d), max_ctx %d >= 1",
                 max_rows, c->canvas, max_ctx);
        return -1;
    }
    st->m = m, st->max_ctx = max_ctx, st->max_rows = max_rows, st->fp8_act = m->fp8;
    size_t R = (size_t)max_rows, H = (size_t)c->hidden, hd = (size_t)max_i(c->hd_sliding, c->hd_full);
    size_t kvd = (size_t)max_i(c->kv_sliding, c->kv_full) * hd, qd = (size_t)c->n_heads * hd;
    size_t gu = 2 * (size_t)max_i(c->inter, c->moe_inter);
    st->k = calloc((size_t)c->n_layers, sizeof *st->k);
    st->v = calloc((size_t)c->n_layers, sizeof *st->v);
    int ok = st->k && st->v;
    for (int l = 0; ok && l < c->n_layers; l++) {
        size_t w = (size_t)m->layers[l].kv * m->layers[l].hd * (size_t)max_ctx;
        ok = (st->k[l] = malloc(w * sizeof(float))) && (st->v[l] = malloc(w * sizeof(float)));
        st->bytes += 2 * w * sizeof(float);
    }
#define A(p, n) (ok = ok && ((p) = malloc((n) * sizeof *(p))) != NULL, st->bytes += (n) * sizeof *(p))
    A(st->x, R * H);
    A(st->xn, R * H);
    A(st->r, R * H);
    A(st->q, R * qd);
    A(st->kn, R * kvd);
    A(st->vn, R * kvd);
    A(st->att, R * qd);
    A(st->gu, R * gu);
    A(st->h1, R * H);
    A(st->h2, R * H);
    A(st->scores, (size_t)max_ctx + R);
    A(st->soft, R * (size_t)c->vocab);
    A(st->router, R * (size_t)c->n_experts);
    A(st->idx, R * (size_t)c->top_k);
    A(st->w, R * (size_t)c->top_k);
    A(st->y, H);
#undef A
    if (!ok) {
        snprintf(err, err_size, "out of memory: DiffusionGemma state of %d positions (%.1f MB)", max_ctx,
                 (double)st->bytes / 1e6);
        tb_dgemma_state_free(st);
        return -1;
    }
    return 0;
}

void tb_dgemma_state_free(tb_dgemma_state *st)
{
    if (st->m)
        for (int l = 0; l < st->m->cfg.n_layers; l++) {
            if (st->k)
                free(st->k[l]);
            if (st->v)
                free(st->v[l]);
        }
    free(st->k), free(st->v), free(st->x), free(st->xn), free(st->r), free(st->q), free(st->kn), free(st->vn);
    free(st->att), free(st->gu), free(st->h1), free(st->h2), free(st->scores), free(st->soft), free(st->router);
    free(st->idx), free(st->w), free(st->y);
    memset(st, 0, sizeof *st);
}

void tb_dgemma_reset(tb_dgemma_state *st)
{
    st->len = 0;
}

/* Attention of `rows` rows at positions pos0 + i. Keys: ENCODE the cache
 * (rows already written), causal, sliding window W; DENOISE the cache's
 * [lo, len) (lo = len - (W - 1) on a sliding layer) then the rows' own. */
static void attend(tb_dgemma_state *st, int l, int rows, int pos0, pass mode)
{
    const tb_dgemma_config *c = &st->m->cfg;
    const tb_dgemma_layer *L = &st->m->layers[l];
    int hd = L->hd, nh = c->n_heads, kvd = L->kv * hd, group = nh / L->kv, W = c->sliding_window;
    const float *kc = st->k[l], *vc = st->v[l];
    for (int i = 0; i < rows; i++) {
        int pos = pos0 + i;
        int lo, hi; /* cached keys [lo, hi) */
        if (mode == ENCODE) {
            lo = L->full ? 0 : max_i(0, pos - W + 1);
            hi = pos + 1;
        } else {
            lo = L->full ? 0 : max_i(0, st->len - (W - 1));
            hi = st->len;
        }
        int own = mode == DENOISE ? rows : 0;
        for (int h = 0; h < nh; h++) {
            const float *q = st->q + (size_t)i * nh * hd + (size_t)h * hd;
            size_t koff = (size_t)(h / group) * hd;
            float *s = st->scores, mx = -INFINITY;
            int n = 0;
            for (int j = lo; j < hi; j++, n++) {
                const float *k = kc + (size_t)j * kvd + koff;
                float d = 0;
                for (int e = 0; e < hd; e++)
                    d += q[e] * k[e];
                s[n] = d; /* scale 1: the q/k norms stand in for 1/sqrt(d) */
                mx = d > mx ? d : mx;
            }
            for (int j = 0; j < own; j++, n++) {
                const float *k = st->kn + (size_t)j * kvd + koff;
                float d = 0;
                for (int e = 0; e < hd; e++)
                    d += q[e] * k[e];
                s[n] = d;
                mx = d > mx ? d : mx;
            }
            double sum = 0;
            for (int j = 0; j < n; j++)
                sum += (s[j] = expf(s[j] - mx));
            float inv = (float)(1.0 / sum);
            float *o = st->att + (size_t)i * nh * hd + (size_t)h * hd;
            memset(o, 0, (size_t)hd * sizeof *o);
            n = 0;
            for (int j = lo; j < hi; j++, n++) {
                const float *v = vc + (size_t)j * kvd + koff;
                float p = s[n] * inv;
                for (int e = 0; e < hd; e++)
                    o[e] += p * v[e];
            }
            for (int j = 0; j < own; j++, n++) {
                const float *v = st->vn + (size_t)j * kvd + koff;
                float p = s[n] * inv;
                for (int e = 0; e < hd; e++)
                    o[e] += p * v[e];
            }
        }
    }
}

/* DiffusionGemmaTextRouter then DiffusionGemmaTextExperts: from the raw
 * residual r, into st->h2 (before post_feedforward_layernorm_2). */
static void moe(tb_dgemma_state *st, const tb_dgemma_layer *L, int rows)
{
    const tb_dgemma_config *c = &st->m->cfg;
    int H = c->hidden, E = c->n_experts, K = c->top_k, mi = c->moe_inter;
    float root = (float)pow((double)H, -0.5);
    rms(st->xn, st->r, NULL, rows, H, c->rms_eps);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < H; i++)
            st->xn[(size_t)r * H + i] = st->xn[(size_t)r * H + i] * L->router_scale[i] * root;
    matmul_t(st->router, st->xn, H, L->router, rows, E, H);
    for (int r = 0; r < rows; r++) {
        float *p = st->router + (size_t)r * E, mx = -INFINITY;
        for (int e = 0; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        double sum = 0;
        for (int e = 0; e < E; e++)
            sum += (p[e] = expf(p[e] - mx));
        for (int e = 0; e < E; e++)
            p[e] = (float)(p[e] / sum);
        int *idx = st->idx + (size_t)r * K;
        float *w = st->w + (size_t)r * K, tot = 0;
        for (int k = 0; k < K; k++) { /* top-k by probability, ties to the lower index */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++)
                    taken |= idx[j] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            idx[k] = best, w[k] = p[best], tot += p[best];
        }
        /* the margin to the best one left out (none when every expert is taken) */
        float out = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < K; j++)
                taken |= idx[j] == e;
            out = !taken && p[e] > out ? p[e] : out;
        }
        double gap = out >= 0 ? (double)p[idx[K - 1]] - out : 1.0;
        st->route_gap = gap < st->route_gap ? gap : st->route_gap;
        if (st->route_force) { /* replay: the given set, weighted by this pass's probabilities */
            const int32_t *f = st->route_force + st->route_force_at;
            st->route_force_at += (size_t)K;
            int same = 1;
            for (int k = 0; k < K; k++) {
                int in = 0;
                for (int j = 0; j < K; j++)
                    in |= f[k] == idx[j];
                same &= in;
            }
            if (!same) {
                st->route_replaced++;
                st->route_replaced_gap = gap > st->route_replaced_gap ? gap : st->route_replaced_gap;
            }
            tot = 0;
            for (int k = 0; k < K; k++)
                idx[k] = f[k], w[k] = p[f[k]], tot += w[k];
        }
        for (int k = 0; k < K; k++)
            w[k] = w[k] / tot * L->expert_scale[idx[k]];
    }
    rms(st->xn, st->r, L->pre_ffn_norm2, rows, H, c->rms_eps);
    fp8_act(st, st->xn, rows, H, H); /* each row is every one of its experts' input */
    memset(st->h2, 0, (size_t)rows * H * sizeof(float));
    float *gu = st->gu, *y = st->y;
    for (int r = 0; r < rows; r++) {
        /* in ascending expert order, as transformers' loop over hit experts adds them */
        for (int e = 0; e < E; e++)
            for (int k = 0; k < K; k++) {
                if (st->idx[(size_t)r * K + k] != e)
                    continue;
                const float *wgu = L->experts_gate_up + (size_t)e * 2 * mi * H;
                const float *wd = L->experts_down + (size_t)e * H * mi;
                cblas_sgemv(CblasRowMajor, CblasNoTrans, 2 * mi, H, 1.0f, wgu, H, st->xn + (size_t)r * H, 1, 0.0f,
                            gu, 1);
                geglu(gu, 1, mi);
                fp8_act(st, gu, 1, mi, mi);
                cblas_sgemv(CblasRowMajor, CblasNoTrans, H, mi, 1.0f, wd, mi, gu, 1, 0.0f, y, 1);
                float wk = st->w[(size_t)r * K + k];
                for (int i = 0; i < H; i++)
                    st->h2[(size_t)r * H + i] += y[i] * wk;
            }
    }
}

static void layer(tb_dgemma_state *st, int l, int rows, int pos0, pass mode)
{
    const tb_dgemma_config *c = &st->m->cfg;
    const tb_dgemma_layer *L = &st->m->layers[l];
    int H = c->hidden, nh = c->n_heads, hd = L->hd, kvd = L->kv * hd, NI = c->inter;
    double eps = c->rms_eps;
    const float *inv_freq = L->full ? st->m->inv_freq_full : st->m->inv_freq_sliding;

    rms(st->xn, st->x, L->attn_norm, rows, H, eps);
    fp8_act(st, st->xn, rows, H, H);
    matmul_t(st->q, st->xn, H, L->wq, rows, nh * hd, H);
    float *kd = mode == ENCODE ? st->k[l] + (size_t)pos0 * kvd : st->kn;
    float *vd = mode == ENCODE ? st->v[l] + (size_t)pos0 * kvd : st->vn;
    matmul_t(kd, st->xn, H, L->wk, rows, kvd, H);
    if (L->wv)
        matmul_t(vd, st->xn, H, L->wv, rows, kvd, H);
    else /* full layers: V is k_proj's output before k_norm and RoPE */
        memcpy(vd, kd, (size_t)rows * kvd * sizeof(float));
    rms(st->q, st->q, L->q_norm, rows * nh, hd, eps);
    rms(kd, kd, L->k_norm, rows * L->kv, hd, eps);
    rms(vd, vd, NULL, rows * L->kv, hd, eps);
    for (int i = 0; i < rows; i++) {
        for (int h = 0; h < nh; h++)
            rope(st->q + ((size_t)i * nh + h) * hd, hd, pos0 + i, inv_freq);
        for (int h = 0; h < L->kv; h++)
            rope(kd + ((size_t)i * L->kv + h) * hd, hd, pos0 + i, inv_freq);
    }
    attend(st, l, rows, pos0, mode);
    fp8_act(st, st->att, rows, nh * hd, nh * hd);
    matmul_t(st->h1, st->att, nh * hd, L->wo, rows, H, nh * hd);
    rms(st->h1, st->h1, L->post_attn_norm, rows, H, eps);
    for (size_t i = 0; i < (size_t)rows * H; i++)
        st->r[i] = st->x[i] + st->h1[i];

    /* the shared MLP over pre_feedforward_layernorm(r) */
    rms(st->xn, st->r, L->pre_ffn_norm, rows, H, eps);
    fp8_act(st, st->xn, rows, H, H);
    matmul_t(st->gu, st->xn, H, L->gate_up, rows, 2 * NI, H);
    geglu(st->gu, rows, NI);
    fp8_act(st, st->gu, rows, NI, 2 * NI);
    matmul_t(st->h1, st->gu, 2 * NI, L->down, rows, H, NI);
    rms(st->h1, st->h1, L->post_ffn_norm1, rows, H, eps);
    /* the experts, routed from r */
    moe(st, L, rows);
    rms(st->h2, st->h2, L->post_ffn_norm2, rows, H, eps);
    for (size_t i = 0; i < (size_t)rows * H; i++)
        st->h1[i] += st->h2[i];
    rms(st->h1, st->h1, L->post_ffn_norm, rows, H, eps);
    float scalar = mode == ENCODE ? L->scalar_enc : L->scalar_dec;
    for (size_t i = 0; i < (size_t)rows * H; i++)
        st->x[i] = (st->r[i] + st->h1[i]) * scalar;
}

static int check_ids(const tb_dgemma_state *st, const int32_t *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= st->m->cfg.vocab)
            return -1;
    return 0;
}

/* A pass of n rows starts: the router's records restart; a replay must
 * hold exactly the pass's sets, each id an expert. */
static int route_start(tb_dgemma_state *st, int n)
{
    const tb_dgemma_config *c = &st->m->cfg;
    st->route_gap = 1.0, st->route_force_at = 0, st->route_replaced = 0, st->route_replaced_gap = 0;
    if (!st->route_force)
        return 0;
    size_t need = (size_t)c->n_layers * (size_t)n * (size_t)c->top_k;
    if (st->route_force_n != need)
        return -1;
    for (size_t i = 0; i < need; i++)
        if (st->route_force[i] < 0 || st->route_force[i] >= c->n_experts)
            return -1;
    return 0;
}

/* mode ENCODE: the image token is embedded as pad (DiffusionGemmaEncoderModel
 * puts the vision tower's features in those slots; text only here) */
static void embed(tb_dgemma_state *st, const int32_t *t, int n, pass mode)
{
    const tb_dgemma_config *c = &st->m->cfg;
    int H = c->hidden;
    for (int i = 0; i < n; i++) {
        int32_t id = mode == ENCODE && t[i] == c->image_id && c->pad_id >= 0 ? c->pad_id : t[i];
        const float *e = st->m->embed + (size_t)id * H;
        for (int j = 0; j < H; j++)
            st->x[(size_t)i * H + j] = e[j] * st->m->embed_scale;
    }
}

int tb_dgemma_encode(tb_dgemma_state *st, const int32_t *tokens, int n, float *hidden)
{
    const tb_dgemma_config *c = &st->m->cfg;
    if (n < 0 || st->len + n > st->max_ctx || check_ids(st, tokens, n) || route_start(st, n))
        return -1;
    for (int done = 0; done < n;) {
        int rows = n - done < st->max_rows ? n - done : st->max_rows;
        embed(st, tokens + done, rows, ENCODE);
        for (int l = 0; l < c->n_layers; l++)
            layer(st, l, rows, st->len, ENCODE);
        if (hidden)
            rms(hidden + (size_t)done * c->hidden, st->x, st->m->final_norm, rows, c->hidden, c->rms_eps);
        st->len += rows;
        done += rows;
    }
    return 0;
}

static float round_bf16(float f)
{
    return tb_bf16_to_f32(tb_f32_to_bf16(f));
}

/* DiffusionGemmaSelfConditioning's signal into st->h1: the MLP over the
 * soft embedding softmax(sc) . embed x scale. */
static void self_condition(tb_dgemma_state *st, const float *sc, int n)
{
    const tb_dgemma_model *m = st->m;
    const tb_dgemma_config *c = &m->cfg;
    int V = c->vocab, H = c->hidden, NI = c->inter;
    for (int r = 0; r < n; r++) {
        const float *z = sc + (size_t)r * V;
        float *p = st->soft + (size_t)r * V, mx = -INFINITY;
        for (int v = 0; v < V; v++) {
            p[v] = c->bf16 ? round_bf16(z[v]) : z[v]; /* processed_logits.to(embedding dtype) */
            mx = p[v] > mx ? p[v] : mx;
        }
        double sum = 0;
        for (int v = 0; v < V; v++)
            sum += (p[v] = expf(p[v] - mx));
        for (int v = 0; v < V; v++) {
            p[v] = (float)(p[v] / sum);
            if (c->bf16)
                p[v] = round_bf16(p[v]);
        }
    }
    /* soft [n][V] . embed [V][H] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, H, V, 1.0f, st->soft, V, m->embed, H, 0.0f, st->h2, H);
    for (size_t i = 0; i < (size_t)n * H; i++)
        st->h2[i] *= m->embed_scale;
    rms(st->xn, st->h2, m->sc_pre_norm, n, H, c->rms_eps);
    fp8_act(st, st->xn, n, H, H);
    matmul_t(st->gu, st->xn, H, m->sc_gate_up, n, 2 * NI, H);
    geglu(st->gu, n, NI);
    fp8_act(st, st->gu, n, NI, 2 * NI);
    matmul_t(st->h1, st->gu, 2 * NI, m->sc_down, n, H, NI);
}

int tb_dgemma_denoise(tb_dgemma_state *st, const int32_t *canvas, int n, const float *sc, float *logits)
{
    const tb_dgemma_model *m = st->m;
    const tb_dgemma_config *c = &m->cfg;
    int H = c->hidden, V = c->vocab;
    if (n < 1 || n > st->max_rows || check_ids(st, canvas, n) || route_start(st, n))
        return -1;
    embed(st, canvas, n, DENOISE);
    if (sc) {
        self_condition(st, sc, n);
        for (size_t i = 0; i < (size_t)n * H; i++)
            st->x[i] += st->h1[i];
    }
    /* post_norm (no weight) also on the first step, where the signal is 0 */
    rms(st->x, st->x, NULL, n, H, c->rms_eps);
    for (int l = 0; l < c->n_layers; l++)
        layer(st, l, n, st->len, DENOISE);
    rms(st->xn, st->x, m->final_norm, n, H, c->rms_eps);
    matmul_t(logits, st->xn, H, m->embed, n, V, H);
    if (c->softcap > 0) {
        float cap = (float)c->softcap;
        for (size_t i = 0; i < (size_t)n * V; i++)
            logits[i] = tanhf(logits[i] / cap) * cap;
    }
    return 0;
}
