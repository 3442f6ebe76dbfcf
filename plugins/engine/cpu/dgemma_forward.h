/* dgemma_forward.h — DiffusionGemma's two passes on the CPU (float32,
 * OpenBLAS), in the order of transformers' modeling_diffusion_gemma.py
 * (tools/dgemma_reference.py transcribes it; tests/engine/
 * test_dgemma_golden.c checks both against transformers' outputs).
 *
 * One set of weights, two passes over one KV cache of `len` positions:
 *   encode   the causal pass (prefill; committing a finished canvas):
 *            tokens at positions [len, len + n) are embedded (x sqrt(H)),
 *            their keys and values appended to the cache (image_token_id
 *            embedded as pad, as transformers' encoder does without pixels); a sliding layer's
 *            query at i sees keys j with i - j < W, a full layer's every j
 *            <= i. Its own outputs are not needed (hidden: optional).
 *   denoise  the bidirectional canvas pass: C canvas tokens at positions
 *            [len, len + C), read-only over the cache. A sliding layer's
 *            canvas rows all see the same keys: the last W - 1 cached
 *            positions (what transformers' DynamicSlidingWindowLayer holds)
 *            and the whole canvas; a full layer's the whole cache and the
 *            canvas. The input is RMSNorm_noweight(embed x sqrt(H) + s) with
 *            s the self-conditioning MLP over the soft embedding of the
 *            previous step's temperature-scaled logits (0 without them).
 *            Output: softcapped logits [C][V].
 * Per layer (both passes): attention (q/k per-head RMSNorm with weight then
 * RoPE, rotate-half; V from v_proj, or in full layers the raw k_proj
 * output, then a weightless RMSNorm; score scale 1), post-attention norm,
 * residual; then from the residual r: the shared GeGLU MLP over
 * pre_feedforward_layernorm(r), the experts over pre_feedforward_layernorm_2
 * (r) routed from r itself, each branch normed, summed, normed, added to r;
 * the whole residual times layer_scalar (the encoder pass's or the decoder
 * pass's).
 * dtype = fp8 (dgemma_model.h's tb_dgemma_round_fp8, fp8_act below): the
 * projections multiply E4M3 weights by E4M3 inputs; this is the reference
 * the GPU's FP8 path is tested against. */
#ifndef TB_ENGINE_DGEMMA_FORWARD_H
#define TB_ENGINE_DGEMMA_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "dgemma_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tb_dgemma_state {
    const tb_dgemma_model *m;
    int max_ctx;        /* cache room, positions */
    int max_rows;       /* rows of one forward: >= canvas_length */
    int len;            /* cached positions */
    float **k, **v;     /* [n_layers] -> [max_ctx][kv_l hd_l]: k after k_norm and RoPE, v after v_norm */
    float *x, *xn, *r;  /* [max_rows][H] */
    float *q;           /* [max_rows][nh hd_max] */
    float *kn, *vn;     /* [max_rows][kv_max hd_max]: the rows' own k, v (denoise: not cached) */
    float *att;         /* [max_rows][nh hd_max] */
    float *gu;          /* [max_rows][2 max(I, mi)] */
    float *h1, *h2;     /* [max_rows][H] */
    float *scores;      /* [max_ctx + max_rows] */
    float *soft;        /* [max_rows][V]: self-conditioning probabilities */
    float *router;      /* [max_rows][E] */
    int *idx;           /* [max_rows][top_k] */
    float *w;           /* [max_rows][top_k] */
    float *y;           /* [H]: one expert's output */
    size_t bytes;
    /* dtype = fp8 (set from m->fp8 at init; tb_dgemma_round_fp8 rounded
     * the projections' weights): each projection's input rows are rounded
     * to bf16, then to their E4M3 form (fp8.h: one power-of-two scale a
     * row) before the product, as the device's FP8 kernels read them (the
     * dense AR path's rule, cpu_forward.c). Not the router's input, nor
     * the LM head's or the soft embedding's. */
    int fp8_act;
    /* The router's margin, for tests that compare another engine's passes
     * (whose rounding may flip a near-tie): the last encode or denoise
     * call's smallest p_k - p_(k+1) over its rows and layers, p sorted
     * routing probabilities, k = top_k (1 where top_k = n_experts). */
    double route_gap;
    /* Test-only replay: route_force non-NULL makes each pass use these
     * top-k sets, in the order the pass routes them ([chunk][layer][rows]
     * [top_k]: the order tb_gpu_dgemma's route log has), not its own; a
     * pass needs exactly route_force_n = n_layers x n x top_k ids (else -1).
     * route_replaced counts the rows whose given set differs from its own;
     * route_replaced_gap is the largest own margin among them (0: none). */
    const int32_t *route_force;
    size_t route_force_n, route_force_at;
    int route_replaced;
    double route_replaced_gap;
} tb_dgemma_state;

/* Room for max_ctx cached positions and forwards of up to max_rows rows
 * (>= the canvas). 0, or -1 with err. */
int tb_dgemma_state_init(tb_dgemma_state *st, const tb_dgemma_model *m, int max_ctx, int max_rows, char *err,
                         size_t err_size);
void tb_dgemma_state_free(tb_dgemma_state *st);
/* Forget the cache. */
void tb_dgemma_reset(tb_dgemma_state *st);

/* The causal pass over n tokens at positions [len, len + n) (any n: the
 * rows go in chunks of max_rows); the cache grows by n. hidden (NULL: not
 * wanted) gets [n][H], the final norm's output. -1 when the cache has no
 * room or an id is outside the vocabulary. */
int tb_dgemma_encode(tb_dgemma_state *st, const int32_t *tokens, int n, float *hidden);

/* The canvas pass over C = n tokens at [len, len + n) (n <= max_rows),
 * the cache unchanged. sc: the previous step's temperature-scaled logits
 * [n][V] (a bf16 model rounds them to bf16 first, as transformers' cast
 * to the embedding dtype does), or NULL (first step: no signal). logits
 * gets [n][V], softcapped. -1 as above. */
int tb_dgemma_denoise(tb_dgemma_state *st, const int32_t *canvas, int n, const float *sc, float *logits);

#ifdef __cplusplus
}
#endif

#endif
