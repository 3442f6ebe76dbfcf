/* dgemma_sampler.h — DiffusionGemma's sampler (transformers'
 * DiffusionGemmaGenerationMixin.generate with EntropyBoundSampler,
 * LinearTemperatureScheduleLogitsProcessor and
 * StableAndConfidentStoppingCriteria; generation_diffusion_gemma.py),
 * batch 1, driven by any engine through two callbacks (encode, denoise).
 *
 * A request: encode the prompt; then canvases of C = canvas_length tokens,
 * ceil(max_new_tokens / C) at most. Each canvas starts as C uniform random
 * ids over the whole vocabulary; then for s = max_steps .. 1 (steps
 * remaining):
 *   logits l = denoise(canvas, sc)           softcapped, [C][V]
 *   T = t_min + (t_max - t_min) s / max_steps (float32, as the processor's
 *       tensor arithmetic), z = l / T
 *   sampled = argmax_v softmax(z)_v / q_v, q ~ Exp(1) [C][V] (what
 *       torch.multinomial's one-sample path does: Gumbel-max)
 *   argmax = argmax_v z_v (first of equal maxima)
 *   entropy of softmax(z) per position (nats); positions sorted by it,
 *       ascending; rank r accepted iff the sum of the entropies before it
 *       <= entropy_bound (rank 0 always)
 *   next canvas: sampled where accepted, a fresh uniform random id elsewhere
 *   stop iff the argmax canvas equals each of the last `stability` steps'
 *       (none before the first step) and mean entropy < confidence, or
 *       after max_steps steps
 *   sc = z (the next step's self-conditioning input)
 * then commit the last argmax canvas; if it holds an EOS id, every token
 * after the first EOS becomes pad and the request ends; else the
 * committed canvas is encoded (the cache grows by C) and the next canvas
 * starts.
 *
 * Noise, in transformers' order: per canvas C ids; per step C x V Exp(1)
 * draws, then C ids. By default from tb_dg_rng, a counter-based stream
 * seeded per request (value n = splitmix64's n-th output from state
 * seed); tools/make_dgemma_golden.py feeds transformers the same stream
 * by replacing torch.randint and torch.multinomial, so a golden run and
 * ours draw the same numbers. tb_dg_noise injects any other source. */
#ifndef TB_DIFFUSION_DGEMMA_SAMPLER_H
#define TB_DIFFUSION_DGEMMA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_dg_params {
    int max_steps;            /* max_denoising_steps (48) */
    double t_min, t_max;      /* 0.4, 0.8 */
    double entropy_bound;     /* 0.1 */
    int stability;            /* stability_threshold (1); 0: always stable */
    double confidence;        /* confidence_threshold (0.005) */
    int max_new_tokens;       /* 256: canvases = ceil(max_new_tokens / C) */
    const int32_t *eos_ids;   /* generation_config's eos_token_id */
    int n_eos;
    int32_t pad_id;           /* 0 */
} tb_dg_params;

/* generation_config.json's (and the class's) defaults; eos none. */
void tb_dg_params_default(tb_dg_params *p);
/* 0, or -1 with the reason naming the parameter. */
int tb_dg_params_check(const tb_dg_params *p, char *why, size_t why_size);
/* T at s steps remaining (1 <= s <= max_steps), float32 as transformers. */
float tb_dg_temperature(const tb_dg_params *p, int s);

typedef struct tb_dg_rng {
    uint64_t seed, n; /* value n of the stream: splitmix64(seed + (n + 1) golden) */
} tb_dg_rng;
void tb_dg_rng_seed(tb_dg_rng *r, uint64_t seed);
uint64_t tb_dg_rng_next(tb_dg_rng *r);
/* ids: value % vocab; exp: -log(u), u = ((value >> 11) + 0.5) 2^-53, in
 * double, then float. */
void tb_dg_rng_ids(tb_dg_rng *r, int32_t *out, int n, int vocab);
void tb_dg_rng_exp(tb_dg_rng *r, float *out, size_t n);

/* A noise source; NULL members: the request's tb_dg_rng. */
typedef struct tb_dg_noise {
    void *ctx;
    void (*ids)(void *ctx, int32_t *out, int n, int vocab);
    void (*exp)(void *ctx, float *out, size_t n);
} tb_dg_noise;

/* One step's decisions (pure: the tests drive it with hand-made logits).
 * logits [C][V]: in, the softcapped logits; out, z = l / T. q [C][V]:
 * Exp(1) noise; input [C]: the canvas the step read; renoise [C]: fresh
 * ids. Out: sampled, argmax, next [C]; accept [C] (1: kept); entropy [C]
 * (nats, at T); *mean_entropy. order [C]: scratch. */
void tb_dg_decide(const tb_dg_params *p, int C, int V, int remaining, float *logits, const float *q,
                  const int32_t *input, const int32_t *renoise, int32_t *sampled, int32_t *argmax,
                  unsigned char *accept, float *entropy, int32_t *next, double *mean_entropy, int *order);
/* The step's host decisions from its per-position results (the tail of
 * tb_dg_decide; an engine that computes sampled and entropy on its device
 * hands them here): *mean_entropy, accept[C], next[C]. */
void tb_dg_settle(const tb_dg_params *p, int C, const float *entropy, const int32_t *sampled, const int32_t *renoise,
                  unsigned char *accept, int32_t *next, double *mean_entropy, int *order);
/* Entropy-bound acceptance alone: accept[C] from entropy[C]. */
void tb_dg_accept(double bound, const float *entropy, int C, unsigned char *accept, int *order);

/* What a step hook sees; arrays [C]. */
typedef struct tb_dg_step {
    int canvas;        /* 0-based canvas of the request */
    int step;          /* 0-based step of the canvas */
    int remaining;     /* s */
    float temperature;
    const int32_t *input, *sampled, *argmax, *next;
    const unsigned char *accept;
    const float *entropy;
    double mean_entropy;
    int stable, confident, stop;
    const float *logits; /* [C][V], z = l / T; NULL when the engine decided on its device */
} tb_dg_step;

typedef struct tb_dg_engine {
    void *ctx;
    int vocab, canvas;
    /* the causal pass over n tokens appended to the cache */
    int (*encode)(void *ctx, const int32_t *tokens, int n);
    /* the canvas pass over `canvas` tokens after the cache, sc [C][V] or
     * NULL; logits [C][V] softcapped */
    int (*denoise)(void *ctx, const int32_t *canvas, const float *sc, float *logits);
    /* optional (NULL: the host decides over denoise's logits): the canvas
     * pass and the step's per-position work on the engine's device, as
     * tb_dg_decide computes it before its acceptance: z = l / T (kept
     * there: with use_sc the next call's self-conditioning input),
     * argmax, entropy, and sampled with the Exp(1) values n0 .. n0 + C V - 1
     * of tb_dg_rng's stream seeded with seed (position i, id v: n0 + i V
     * + v). Only [C] arrays come back. Used unless tb_dg_generate's noise
     * draws the Exp(1) values itself. */
    int (*denoise_decide)(void *ctx, const int32_t *canvas, int use_sc, float temperature, uint64_t seed, uint64_t n0,
                          int32_t *sampled, int32_t *argmax, float *entropy);
} tb_dg_engine;

typedef struct tb_dg_hooks {
    void *ctx;
    void (*on_step)(void *ctx, const tb_dg_step *s);
    /* canvas k committed: tokens [C] as output (pads after an EOS), n_valid
     * of them not pad, after `steps` denoising steps */
    void (*on_commit)(void *ctx, int canvas, const int32_t *tokens, int n_valid, int steps);
    void (*on_prefill)(void *ctx);
    int (*cancelled)(void *ctx);
} tb_dg_hooks;

typedef struct tb_dg_stats {
    int canvases;      /* committed */
    int steps;         /* denoising forwards (decoder passes) */
    int encodes;       /* encoder forwards: the prompt, then each committed canvas but the last */
    int committed;     /* output tokens that are not pad */
    int eos;           /* 1: ended at an EOS */
} tb_dg_stats;

/* The output's room: ceil(max_new_tokens / C) C tokens. */
int tb_dg_max_output(const tb_dg_params *p, int C);

/* One request. out gets the committed canvases (*n_out = canvases x C).
 * 0, or -1 with the reason (an engine failure, cancelled, bad params). */
int tb_dg_generate(const tb_dg_engine *e, const tb_dg_params *p, const int32_t *prompt, int P, uint64_t seed,
                   const tb_dg_noise *noise, const tb_dg_hooks *h, int32_t *out, int *n_out, tb_dg_stats *stats,
                   char *why, size_t why_size);

#endif
