/* test_fp8.c — dtype = fp8 on the CPU path (plugins/engine/cpu/fp8.c, model.c's
 * tb_model_round_fp8): the E4M3 format byte by byte, rounding to the
 * nearest value (ties to even) and saturation, the per-output-channel
 * power-of-two scales, the quantize/dequantize round trip and its error
 * bound against float32, idempotence (the GPU's re-quantization of what
 * the CPU rounded gives the same bytes), and which weights a model rounds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/engine/cpu/cpu_forward.h"
#include "../../plugins/engine/cpu/fp8.h"
#include "../../plugins/engine/format/model.h"
#include "check.h"

static uint64_t rng = 12345;
static double uni(void) /* [0, 1) */
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void format_cases(void)
{
    /* hand-worked values of the format */
    CHECK(tb_e4m3_decode(0x00) == 0.0f);
    CHECK(tb_e4m3_decode(0x01) == ldexpf(1, -9)); /* smallest subnormal */
    CHECK(tb_e4m3_decode(0x07) == 7 * ldexpf(1, -9));
    CHECK(tb_e4m3_decode(0x08) == ldexpf(1, -6)); /* smallest normal */
    CHECK(tb_e4m3_decode(0x38) == 1.0f);
    CHECK(tb_e4m3_decode(0x3C) == 1.5f);
    CHECK(tb_e4m3_decode(0x7E) == 448.0f);
    CHECK(tb_e4m3_decode(0xBC) == -1.5f);
    CHECK(isnan(tb_e4m3_decode(0x7F)) && isnan(tb_e4m3_decode(0xFF)));
    /* every finite byte survives decode -> encode */
    int same = 0;
    for (int c = 0; c < 256; c++)
        if ((c & 0x7F) != 0x7F)
            same += tb_e4m3_encode(tb_e4m3_decode((uint8_t)c)) == c;
    CHECK(same == 254);
    /* ties to even, saturation, tiny values */
    CHECK(tb_e4m3_encode(1.0625f) == 0x38);  /* halfway 1 | 1.125: the even mantissa, 1 */
    CHECK(tb_e4m3_encode(1.1875f) == 0x3A);  /* halfway 1.125 | 1.25: 1.25 */
    CHECK(tb_e4m3_encode(1.07f) == 0x39);
    CHECK(tb_e4m3_encode(460.0f) == 0x7E);
    CHECK(tb_e4m3_encode(1e30f) == 0x7E);
    CHECK(tb_e4m3_encode(-1e30f) == 0xFE);
    CHECK(tb_e4m3_encode(ldexpf(1, -11)) == 0x00); /* a quarter of the smallest subnormal */
    CHECK(tb_e4m3_encode(ldexpf(3, -11)) == 0x01); /* three quarters */
    CHECK(tb_e4m3_encode(15.5f * ldexpf(1, -10)) == 0x08); /* the top subnormal rounds up to 2^-6 */
    CHECK(tb_e4m3_encode(NAN) == 0x00);
    /* every encode is the nearest finite value (ties: the even code) */
    float vals[254];
    int codes[254], nv = 0;
    for (int c = 0; c < 256; c++)
        if ((c & 0x7F) != 0x7F)
            vals[nv] = tb_e4m3_decode((uint8_t)c), codes[nv++] = c;
    int nearest = 0, n = 20000;
    for (int i = 0; i < n; i++) {
        float v = (float)((uni() * 2 - 1) * ldexp(1, (int)(uni() * 20) - 11)); /* 2^-11 .. 2^9 */
        uint8_t got = tb_e4m3_encode(v);
        double best = INFINITY;
        for (int k = 0; k < nv; k++)
            best = fabs(vals[k] - v) < best ? fabs(vals[k] - v) : best;
        double d = fabs(tb_e4m3_decode(got) - v);
        int is_tie = 0;
        for (int k = 0; k < nv; k++)
            is_tie |= codes[k] != got && fabs(vals[k] - v) == d && vals[k] != tb_e4m3_decode(got);
        nearest += fabs(v) >= 448 ? got == (v < 0 ? 0xFE : 0x7E) : d == best && (!is_tie || (got & 1) == 0);
    }
    CHECK(nearest == n);
}

static void scale_cases(void)
{
    CHECK(tb_fp8_scale_exp(448.0f) == 0);
    CHECK(tb_fp8_scale_exp(448.5f) == 1);
    CHECK(tb_fp8_scale_exp(224.0f) == -1);
    CHECK(tb_fp8_scale_exp(1.0f) == -8); /* 1 / 2^-8 = 256 <= 448 < 512 */
    CHECK(tb_fp8_scale_exp(0.0f) == 0);
    CHECK(tb_fp8_scale_exp(INFINITY) == 0);
    /* rows of very different magnitudes: each its own scale */
    enum { R = 6, C = 300 };
    static float w[R * C], dq[R * C], again[R * C];
    static uint8_t q[R * C], q2[R * C];
    float s[R], s2[R];
    const double mag[R] = {1e-4, 0.02, 1, 37, 3e3, 0};
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            w[r * C + c] = (float)(mag[r] * (uni() * 2 - 1));
    w[2 * C + 7] = 448.0f; /* a row whose maximum is exactly 448: scale 1 */
    tb_fp8_quantize_rows(w, R, C, q, s);
    int pow2 = 1, fits = 1;
    for (int r = 0; r < R; r++) {
        int e;
        pow2 &= frexpf(s[r], &e) == 0.5f;
        float amax = 0;
        for (int c = 0; c < C; c++)
            amax = fabsf(w[r * C + c]) > amax ? fabsf(w[r * C + c]) : amax;
        fits &= amax == 0 ? s[r] == 1.0f : amax / s[r] <= 448.0f && amax / s[r] > 224.0f;
    }
    CHECK(pow2);
    CHECK(fits);
    CHECK(s[2] == 1.0f);
    CHECK(s[0] < s[1] && s[1] < s[3] && s[3] < s[4]); /* row 2 holds the 448 */
    /* the round trip: within half an E4M3 step of each weight */
    tb_fp8_dequantize_rows(q, s, R, C, dq);
    int within = 1, changed = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            double x = w[r * C + c], d = fabs(dq[r * C + c] - x);
            within &= d <= fmax(fabs(x) / 16, ldexp(s[r], -10)); /* normal: 2^-4 relative; subnormal: 2^-10 s */
            changed += d > 0;
        }
    CHECK(within);
    CHECK(changed > R * C / 2); /* it did round */
    /* idempotent: the dequantized weights quantize to the same bytes */
    tb_fp8_quantize_rows(dq, R, C, q2, s2);
    CHECK(memcmp(q, q2, sizeof q) == 0 && memcmp(s, s2, sizeof s) == 0);
    /* round_rows in place = dequantize(quantize) */
    memcpy(again, w, sizeof w);
    tb_fp8_round_rows(again, R, C);
    CHECK(memcmp(again, dq, sizeof dq) == 0);
}

/* A product with FP8 weights against float32: its error within the bound
 * the per-weight bound implies (sum |x| |w - q(w)| <= sum |x| |w| / 16). */
static void product_bound(void)
{
    enum { O = 64, I = 256 };
    static float w[O * I], wq[O * I], x[I];
    for (int i = 0; i < O * I; i++)
        w[i] = (float)(0.05 * (uni() * 2 - 1));
    for (int i = 0; i < I; i++)
        x[i] = (float)(uni() * 2 - 1);
    memcpy(wq, w, sizeof w);
    tb_fp8_round_rows(wq, O, I);
    int ok = 1;
    double worst = 0;
    for (int o = 0; o < O; o++) {
        double y = 0, yq = 0, bound = 0;
        for (int i = 0; i < I; i++) {
            y += (double)w[o * I + i] * x[i];
            yq += (double)wq[o * I + i] * x[i];
            bound += fabs((double)w[o * I + i] * x[i]) / 16;
        }
        ok &= fabs(yq - y) <= bound;
        worst = fabs(yq - y) / bound > worst ? fabs(yq - y) / bound : worst;
    }
    CHECK(ok);
    fprintf(stderr, "fp8 product: worst error %.3f of the bound\n", worst);
}

/* tb_model_round_fp8 on a preset: the four projections rounded (each
 * row's values E4M3 x its power of two), embeddings, norms and LM head
 * untouched; the forward still close to float32's; then MoE (moe_case). */
static void moe_case(void);

static void model_cases(void)
{
    char err[256];
    tb_model a, b;
    CHECK(tb_model_preset("tiny-llama", 3, &a, err, sizeof err) == 0);
    CHECK(tb_model_preset("tiny-llama", 3, &b, err, sizeof err) == 0);
    CHECK(tb_model_round_fp8(&b, err, sizeof err) == 0 && b.fp8 == 1);
    const tb_model_config *c = &a.cfg;
    size_t h = c->hidden_size, I = c->intermediate_size, nq = (size_t)c->n_heads * c->head_dim;
    size_t qkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    CHECK(memcmp(a.embed, b.embed, (size_t)c->vocab_size * h * sizeof(float)) == 0);
    CHECK(memcmp(a.lm_head, b.lm_head, (size_t)c->vocab_size * h * sizeof(float)) == 0);
    int norms = 1, rounded = 1, moved = 1;
    for (int l = 0; l < c->n_layers; l++) {
        const tb_layer *A = &a.layers[l], *B = &b.layers[l];
        norms &= memcmp(A->attn_norm, B->attn_norm, h * sizeof(float)) == 0 &&
                 memcmp(A->mlp_norm, B->mlp_norm, h * sizeof(float)) == 0;
        float *const mats[4] = {B->wqkv, B->wo, B->w_gate_up, B->w_down};
        const float *const orig[4] = {A->wqkv, A->wo, A->w_gate_up, A->w_down};
        const size_t rows[4] = {qkv, h, 2 * I, h}, cols[4] = {h, nq, h, I};
        for (int k = 0; k < 4; k++) {
            size_t n = rows[k] * cols[k];
            uint8_t *q = malloc(n);
            float *s = malloc(rows[k] * sizeof(float)), *dq = malloc(n * sizeof(float));
            tb_fp8_quantize_rows(orig[k], rows[k], cols[k], q, s);
            tb_fp8_dequantize_rows(q, s, rows[k], cols[k], dq);
            rounded &= memcmp(dq, mats[k], n * sizeof(float)) == 0;
            moved &= memcmp(orig[k], mats[k], n * sizeof(float)) != 0;
            free(q), free(s), free(dq);
        }
    }
    CHECK(norms);
    CHECK(rounded);
    CHECK(moved);
    /* the forward: close to float32's, not equal */
    tb_cpu_state sa, sb;
    int V = c->vocab_size, P = 6;
    int32_t toks[6] = {1, 17, 99, 250, 3, 42};
    float *la = malloc((size_t)P * V * sizeof(float)), *lb = malloc((size_t)P * V * sizeof(float));
    CHECK(tb_cpu_state_init(&sa, &a, 1, P, P, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_state_init(&sb, &b, 1, P, P, 1, err, sizeof err) == 0);
    CHECK(tb_cpu_forward(&sa, toks, 1, P, 1, 1, la) == 0);
    CHECK(tb_cpu_forward(&sb, toks, 1, P, 1, 1, lb) == 0);
    double ref = 0, diff = 0;
    for (size_t i = 0; i < (size_t)P * V; i++) {
        ref = fabs(la[i]) > ref ? fabs(la[i]) : ref;
        diff = fabs(la[i] - lb[i]) > diff ? fabs(la[i] - lb[i]) : diff;
    }
    fprintf(stderr, "tiny-llama fp8 vs f32 logits: max |f32| %.4f, max diff %.4g\n", ref, diff);
    CHECK(diff > 0 && diff < 0.1 * ref);
    /* the activations: dtype = fp8 rounds each projection's input rows
     * (fp8_act, set from the model at init); the same FP8 weights with
     * float32 inputs give other logits, within the same bound */
    CHECK(sb.fp8_act == 1 && sa.fp8_act == 0);
    tb_cpu_state sw;
    float *lw = malloc((size_t)P * V * sizeof(float));
    CHECK(tb_cpu_state_init(&sw, &b, 1, P, P, 1, err, sizeof err) == 0);
    sw.fp8_act = 0; /* weights only */
    CHECK(tb_cpu_forward(&sw, toks, 1, P, 1, 1, lw) == 0);
    double dw = 0;
    for (size_t i = 0; i < (size_t)P * V; i++)
        dw = fabs(lw[i] - lb[i]) > dw ? fabs(lw[i] - lb[i]) : dw;
    fprintf(stderr, "tiny-llama fp8 weights+activations vs weights only: max diff %.4g\n", dw);
    CHECK(dw > 0 && dw < 0.1 * ref);
    tb_cpu_state_free(&sw);
    free(lw);
    tb_cpu_state_free(&sa);
    tb_cpu_state_free(&sb);
    free(la), free(lb);
    tb_model_free(&a);
    tb_model_free(&b);
    moe_case();
}

/* Rows of w [rows][cols] are fp8.h's rounding of orig's (each row's E4M3
 * values x its power of two), and not all equal to orig. */
static int rounded_from(const float *orig, const float *w, size_t rows, size_t cols)
{
    size_t n = rows * cols;
    uint8_t *q = malloc(n);
    float *s = malloc(rows * sizeof(float)), *dq = malloc(n * sizeof(float));
    tb_fp8_quantize_rows(orig, rows, cols, q, s);
    tb_fp8_dequantize_rows(q, s, rows, cols, dq);
    int ok = memcmp(dq, w, n * sizeof(float)) == 0 && memcmp(orig, w, n * sizeof(float)) != 0;
    free(q), free(s), free(dq);
    return ok;
}

/* A mixture of experts (tiny-qwen3-moe; tiny-llada2: shared experts, a
 * dense first layer): every routed and shared expert's rows rounded, the
 * router untouched; the forward rounds each expert's input rows and its
 * activations (moe.c's fp8_act): close to float32's, and other than the
 * same FP8 weights over float32 inputs. */
static void moe_case(void)
{
    const char *names[2] = {"tiny-qwen3-moe", "tiny-llada2"};
    for (int t = 0; t < 2; t++) {
        char err[256];
        tb_model a, b;
        CHECK(tb_model_preset(names[t], 3, &a, err, sizeof err) == 0);
        CHECK(tb_model_preset(names[t], 3, &b, err, sizeof err) == 0);
        CHECK(tb_model_round_fp8(&b, err, sizeof err) == 0 && b.fp8 == 1);
        const tb_model_config *c = &a.cfg;
        size_t h = c->hidden_size, E = c->n_experts, mi = c->moe_intermediate_size;
        size_t S = (size_t)c->n_shared_experts * mi, I = c->intermediate_size;
        int routers = 1, experts = 1, shared = 1, dense = 1, n_moe = 0, n_shared = 0, n_dense = 0;
        for (int l = 0; l < c->n_layers; l++) {
            const tb_layer *A = &a.layers[l], *B = &b.layers[l];
            if (A->router) {
                n_moe++;
                routers &= memcmp(A->router, B->router, E * h * sizeof(float)) == 0;
                experts &= rounded_from(A->experts_gate_up, B->experts_gate_up, E * 2 * mi, h) &&
                           rounded_from(A->experts_down, B->experts_down, E * h, mi);
                if (A->shared_gate_up) {
                    n_shared++;
                    shared &= rounded_from(A->shared_gate_up, B->shared_gate_up, 2 * S, h) &&
                              rounded_from(A->shared_down, B->shared_down, h, S);
                }
            } else {
                n_dense++;
                dense &= rounded_from(A->w_gate_up, B->w_gate_up, 2 * I, h) && rounded_from(A->w_down, B->w_down, h, I);
            }
        }
        fprintf(stderr, "%s fp8: %d MoE layers (%d with shared experts), %d dense\n", names[t], n_moe, n_shared,
                n_dense);
        CHECK(n_moe > 0 && routers && experts && shared && dense);
        CHECK(t == 0 || (n_shared > 0 && n_dense > 0)); /* tiny-llada2 covers both */
        tb_cpu_state sa, sb, sw;
        int V = c->vocab_size, P = 6;
        int32_t toks[6] = {1, 17, 99, 50, 3, 42};
        float *la = malloc((size_t)P * V * sizeof(float)), *lb = malloc((size_t)P * V * sizeof(float));
        float *lw = malloc((size_t)P * V * sizeof(float));
        CHECK(tb_cpu_state_init(&sa, &a, 1, P, P, 1, err, sizeof err) == 0);
        CHECK(tb_cpu_state_init(&sb, &b, 1, P, P, 1, err, sizeof err) == 0);
        CHECK(tb_cpu_state_init(&sw, &b, 1, P, P, 1, err, sizeof err) == 0);
        CHECK(sb.moe.fp8_act == 1 && sa.moe.fp8_act == 0);
        sw.fp8_act = sw.moe.fp8_act = 0; /* the FP8 weights over float32 inputs */
        CHECK(tb_cpu_forward(&sa, toks, 1, P, 1, 1, la) == 0);
        CHECK(tb_cpu_forward(&sb, toks, 1, P, 1, 1, lb) == 0);
        CHECK(tb_cpu_forward(&sw, toks, 1, P, 1, 1, lw) == 0);
        /* the experts' input rounding alone: weights-only logits with
         * only the attention and dense inputs rounded */
        tb_cpu_state se;
        float *le = malloc((size_t)P * V * sizeof(float));
        CHECK(tb_cpu_state_init(&se, &b, 1, P, P, 1, err, sizeof err) == 0);
        se.moe.fp8_act = 0;
        CHECK(tb_cpu_forward(&se, toks, 1, P, 1, 1, le) == 0);
        double ref = 0, diff = 0, dw = 0, de = 0;
        for (size_t i = 0; i < (size_t)P * V; i++) {
            ref = fabs(la[i]) > ref ? fabs(la[i]) : ref;
            diff = fabs(la[i] - lb[i]) > diff ? fabs(la[i] - lb[i]) : diff;
            dw = fabs(lw[i] - lb[i]) > dw ? fabs(lw[i] - lb[i]) : dw;
            de = fabs(le[i] - lb[i]) > de ? fabs(le[i] - lb[i]) : de;
        }
        fprintf(stderr, "%s fp8 vs f32 logits: max |f32| %.4f, max diff %.4g; weights only %.4g; experts' inputs "
                        "unrounded %.4g\n", names[t], ref, diff, dw, de);
        CHECK(diff > 0 && diff < 0.1 * ref);
        CHECK(dw > 0 && de > 0);
        tb_cpu_state_free(&sa), tb_cpu_state_free(&sb), tb_cpu_state_free(&sw), tb_cpu_state_free(&se);
        free(la), free(lb), free(lw), free(le);
        tb_model_free(&a);
        tb_model_free(&b);
    }
    /* the device's shape rule names the expert width that breaks it */
    tb_model_config cfg;
    char err[256] = "";
    CHECK(tb_preset_config("tiny-qwen3-moe", &cfg, err, sizeof err) == 0);
    CHECK(tb_config_check_fp8(&cfg, err, sizeof err) == 0);
    cfg.moe_intermediate_size = 40;
    CHECK(tb_config_check_fp8(&cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "expert intermediate (40)");
}

int main(void)
{
    format_cases();
    scale_cases();
    product_bound();
    model_cases();
    return check_done();
}
