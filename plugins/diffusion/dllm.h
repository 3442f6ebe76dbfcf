/* dllm.h — what masked-diffusion samplers share (sampler.h: LLaDA,
 * Fast-dLLM, Dream; block_sampler.h: SDAR, Fast-dLLM v2; generate.h picks
 * one by kind): the samplers and caches by name, the parameters, the
 * engine a sampler drives, the hooks and counts, and the helpers both
 * kinds use. Below both sampler files, so neither calls the other. */
#ifndef TB_DIFFUSION_DLLM_H
#define TB_DIFFUSION_DLLM_H

#include <stddef.h>
#include <stdint.h>

#include "engine_options.h"
#include "pick.h"

/* The samplers, one row each (engine_options.h's choice lists): the enum,
 * the `sampler` option's choices and the name lookup all come from it. */
#define TB_DLLM_SAMPLER_LIST(X, SEP)                                                                            \
    X(TB_DLLM_LOW_CONFIDENCE, "low_confidence") SEP X(TB_DLLM_RANDOM, "random")                                 \
    SEP X(TB_DLLM_THRESHOLD, "threshold") SEP X(TB_DLLM_ORIGIN, "origin")                                       \
    SEP X(TB_DLLM_MASKGIT_PLUS, "maskgit_plus") SEP X(TB_DLLM_TOPK_MARGIN, "topk_margin")                       \
    SEP X(TB_DLLM_ENTROPY, "entropy")                                                                           \
    SEP X(TB_DLLM_SDAR_STATIC, "sdar_static")   /* SDAR low_confidence_static */                                \
    SEP X(TB_DLLM_SDAR_DYNAMIC, "sdar_dynamic") /* SDAR low_confidence_dynamic */                               \
    SEP X(TB_DLLM_FAST_DLLM_V2, "fast_dllm_v2") /* Fast-dLLM v2: threshold per sub-block */                        \
    SEP X(TB_DLLM_ENTROPY_BOUND, "entropy_bound") /* DiffusionGemma (dgemma_sampler.h) */
typedef enum tb_dllm_sampler { TB_CHOICES_ENUM(TB_DLLM_SAMPLER_LIST) } tb_dllm_sampler;

/* Fast-dLLM's KV caches (sampler.h) */
#define TB_DLLM_CACHE_LIST(X, SEP)                                                                              \
    X(TB_DLLM_CACHE_NONE, "none") SEP X(TB_DLLM_CACHE_PREFIX, "prefix") SEP X(TB_DLLM_CACHE_DUAL, "dual")
typedef enum tb_dllm_cache { TB_CHOICES_ENUM(TB_DLLM_CACHE_LIST) } tb_dllm_cache;

/* name <-> value of each list, for the options and for messages */
extern const tb_choice tb_dllm_sampler_choices[];
extern const tb_choice tb_dllm_cache_choices[];

typedef struct tb_dllm_params {
    tb_dllm_sampler sampler;
    int gen_length;     /* generated positions per request */
    int block_length;   /* LLaDA family; gen_length = one block */
    int steps;          /* total steps (LLaDA: over all blocks) */
    double threshold;   /* threshold sampler, in (0, 1] */
    tb_dllm_cache cache;
    double cfg_scale;   /* 0: off */
    double temperature; /* 0: deterministic */
    double top_p;       /* Dream algorithms; 1: off */
    int top_k;          /* Dream algorithms; 0: off */
    double alg_temp;    /* Dream: 0 = top-k choice, > 0 = sampled choice */
    double eps;         /* Dream's final timestep (1e-3) */
    int32_t mask_id;
    /* block samplers */
    int sub_block;      /* fast_dllm_v2: sub-block size; 0 = block_length */
    int skip_final_store; /* sdar_*: 1 = no store forward after the last
                             block or after a request's EOS block (less
                             work than upstream's loop, which runs both) */
    const int32_t *eos_ids; /* EOS early stop: a request whose finished
                               block holds one of these stops there */
    int n_eos;
    /* [B] or NULL (every canvas's prompt ends at prompt_len): where each
     * canvas's prompt ends. Block samplers only: text prompts of a batch
     * are left-padded by whole blocks, so that every canvas's block grid
     * starts at its first token, as the model was trained; their prompts
     * then end in the last block before prompt_len, each at its own place */
    const int *prompt_end;
} tb_dllm_params;

/* What the sampler needs from an engine. forward_pick() runs the model on
 * positions [pos0, pos0 + n) of each canvas ([rows][L] ids; rows = B, or
 * 2B with classifier-free guidance, the last B unconditional), their keys
 * and values replacing the cache's, attention over [0, n_attend) (the rest
 * from the cache), logits shifted for models that predict position i from
 * i - 1 (Dream), and returns for span rows [pick0, pick0 + npick) of each
 * canvas the proposed token and its confidence (pick.h), in x0/conf laid
 * out [B][n] (rows outside the range are left alone: the LM head and the
 * pick run only where the sampler can commit). Returns 0 or -1. */
typedef struct tb_dllm_engine {
    void *ctx;
    int vocab;
    int (*forward_pick)(void *ctx, const int32_t *canvas, int B, int L, int pos0, int n, int n_attend,
                        int pick0, int npick, const tb_dllm_pick_spec *spec, uint64_t *rng, int32_t *x0,
                        double *conf);
    /* Block samplers (block_sampler.h): canvases rows[n_rows] (distinct;
     * canvas r's cache is the engine's sequence r), positions [pos0, pos0 +
     * n) attending to [0, n_attend) under mask_block (0 bidirectional, k
     * > 1 block-causal from position 0), their keys and values written to
     * the cache; picks of span rows [pick0, pick0 + npick) into x0/conf
     * laid out [n_rows][n] (shifted: a row reads the output of the row
     * before it, the span's first row its own). npick 0: no LM head. NULL
     * in engines without it. */
    int (*forward_rows)(void *ctx, const int32_t *canvas, int L, const int *rows, int n_rows, int pos0, int n,
                        int n_attend, int mask_block, int pick0, int npick, int shifted,
                        const tb_dllm_pick_spec *spec, uint64_t *rng, int32_t *x0, double *conf);
} tb_dllm_engine;

typedef struct tb_dllm_hooks {
    void *ctx;
    /* request b got n_tokens committed in this step (n_tokens > 0). */
    void (*on_commit)(void *ctx, int b, int n_tokens);
    /* after every step, the canvases (tests compare them with goldens) */
    void (*on_step)(void *ctx, int step, const int32_t *canvas, int B, int L);
    int (*cancelled)(void *ctx);
    /* block samplers: the prompt's prefill forward has returned (called
     * once, before any denoising; also when the prompt has no whole block) */
    void (*on_prefill)(void *ctx);
    /* request b's canvas (a block; the whole generation of a one-block
     * sampler) is committed: its denoising steps, the output tokens it
     * finalised, the positions its step forwards evaluated for b
     * (backend.h's tb_canvas). In commit order; the canvases' steps sum
     * to the request's steps_done, their tokens to its output tokens. */
    void (*on_canvas)(void *ctx, int b, int steps, int committed, int64_t positions);
} tb_dllm_hooks;

typedef struct tb_dllm_stats {
    int steps;    /* denoising steps run (the batch moves together) */
    int forwards; /* forward() calls (CFG runs 2B canvases per call) */
    int blocks;   /* block samplers: blocks decoded (the most of any request) */
    /* block samplers: denoising forwards run with the mask token kept from
     * the proposals, where upstream's loop, the mask token proposed, would
     * fail (SDAR) or repeat one forward forever (Fast-dLLM v2) */
    int mask_fallbacks;
    /* Block samplers, when not NULL ([B], the caller's): the denoising
     * forwards each request took part in, and the blocks it decoded.
     * Kept across tb_dllm_generate's reset of the counts above. */
    int *request_steps;
    int *request_blocks;
    /* [B] or NULL: the output positions each request decoded (gen_length,
     * or through the block where it stopped at an EOS) */
    int *request_tokens;
} tb_dllm_stats;

/* The canvas length of a request: prompt_len + gen_length, for the block
 * samplers rounded up to a whole block (those positions are decoded as
 * the block needs, and not output). */
int tb_dllm_canvas_length(const tb_dllm_params *p, int prompt_len);
/* Whether s is a block sampler (block_sampler.h). */
int tb_dllm_is_block_sampler(tb_dllm_sampler s);

/* Whether s's work depends on the content: how many positions a forward
 * commits (or when it stops) follows the model's confidence (threshold,
 * sdar_dynamic, fast_dllm_v2), not a fixed schedule. Its speed on
 * random-token prompts, which a model is never confident about, is the
 * slow worst case (docs/METRICS.md, "Content-dependent samplers");
 * describe() lists these samplers. */
int tb_dllm_content_dependent(tb_dllm_sampler s);

/* The transfer counts of one LLaDA block: n masked positions over S steps,
 * out[i] = n / S + (i < n % S). */
void tb_dllm_llada_schedule(int n, int S, int *out);

#endif
