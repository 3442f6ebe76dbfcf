/* sampler.h — masked-diffusion samplers over a canvas of token ids, written
 * once and driven by any engine through a forward callback (the CPU path
 * now, the CUDA path later).
 *
 * The canvas of request b is prompt + gen_length positions, the generated
 * part starting as mask_id. Samplers:
 *   low_confidence, random  LLaDA: gen_length in blocks of block_length,
 *       steps / n_blocks steps per block, step i of a block commits
 *       n / S + (i < n % S) of its n masked positions: those with the highest
 *       confidence (softmax probability of the argmax, in float64) or a
 *       random score; committed tokens are never re-masked.
 *   threshold  Fast-dLLM: per block, commit every masked position of the
 *       block whose confidence >= threshold, and always the most confident
 *       one; steps are then an outcome.
 *   origin, maskgit_plus, topk_margin, entropy  Dream: the whole generated
 *       span at once, timesteps linspace(1, eps, steps + 1) in float32, step
 *       i commits int(n_mask (1 - s/t)) positions (all at the last step),
 *       chosen by max probability, top-1 minus top-2 margin, or negative
 *       entropy; origin commits each masked position with probability
 *       1 - s/t.
 * Caches (LLaDA-family samplers, Fast-dLLM): prefix — each block's first
 * forward runs the whole canvas, later steps run block + suffix over the
 * cached prefix keys/values; dual — later steps run the block alone over
 * cached prefix and suffix. Temperature > 0: Gumbel-max in float64 as LLaDA
 * does (logits.exp() / (-log u)^T), or sampling for the Dream algorithms.
 * Classifier-free guidance (cfg_scale > 0, LLaDA family, no cache): logits
 * = u + (cfg + 1)(c - u) with u from the canvas with its prompt masked.
 * Block diffusion (block_sampler.c: SDAR, Fast-dLLM v2): sdar_static,
 * sdar_dynamic, fast_dllm_v2 — blocks of block_length positions from
 * position 0, causal across blocks, decoded one after another over the
 * exact KV cache of the blocks before (see block_sampler.h). */
#ifndef TB_DIFFUSION_SAMPLER_H
#define TB_DIFFUSION_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "pick.h"

typedef enum tb_dllm_sampler {
    TB_DLLM_LOW_CONFIDENCE,
    TB_DLLM_RANDOM,
    TB_DLLM_THRESHOLD,
    TB_DLLM_ORIGIN,
    TB_DLLM_MASKGIT_PLUS,
    TB_DLLM_TOPK_MARGIN,
    TB_DLLM_ENTROPY,
    TB_DLLM_SDAR_STATIC,   /* SDAR low_confidence_static */
    TB_DLLM_SDAR_DYNAMIC,  /* SDAR low_confidence_dynamic */
    TB_DLLM_FAST_DLLM_V2,  /* Fast-dLLM v2: threshold per sub-block */
} tb_dllm_sampler;

typedef enum tb_dllm_cache { TB_DLLM_CACHE_NONE, TB_DLLM_CACHE_PREFIX, TB_DLLM_CACHE_DUAL } tb_dllm_cache;

/* Names as suites write them; NULL-terminated lists for option choices. */
extern const char *const tb_dllm_sampler_names[];
extern const char *const tb_dllm_cache_names[];

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
} tb_dllm_hooks;

typedef struct tb_dllm_stats {
    int steps;    /* denoising steps run (the batch moves together) */
    int forwards; /* forward() calls (CFG runs 2B canvases per call) */
    int blocks;   /* block samplers: blocks decoded (the most of any request) */
    /* Block samplers, when not NULL ([B], the caller's): the denoising
     * forwards each request took part in, and the blocks it decoded.
     * Kept across tb_dllm_generate's reset of the counts above. */
    int *request_steps;
    int *request_blocks;
    /* [B] or NULL: the output positions each request decoded (gen_length,
     * or through the block where it stopped at an EOS) */
    int *request_tokens;
} tb_dllm_stats;

/* Check a parameter set against a prompt length. 0, or -1 with the reason
 * ("gen_length 100 is not a multiple of block_length 32"). */
int tb_dllm_validate(const tb_dllm_params *p, char *why, size_t why_size);

/* The canvas length of a request: prompt_len + gen_length, for the block
 * samplers rounded up to a whole block (those positions are decoded as
 * the block needs, and not output). */
int tb_dllm_canvas_length(const tb_dllm_params *p, int prompt_len);
/* Whether s is a block sampler (block_sampler.h). */
int tb_dllm_is_block_sampler(tb_dllm_sampler s);

/* Run the sampler on canvas [B][tb_dllm_canvas_length] (prompts filled,
 * the rest mask_id). Returns 0, -1 on a forward failure (why set), or 1
 * when cancelled. */
int tb_dllm_generate(const tb_dllm_engine *e, const tb_dllm_params *p, int32_t *canvas, int B, int prompt_len,
                     uint64_t seed, const tb_dllm_hooks *h, tb_dllm_stats *stats, char *why, size_t why_size);

/* The transfer counts of one LLaDA block: n masked positions over S steps,
 * out[i] = n / S + (i < n % S). */
void tb_dllm_llada_schedule(int n, int S, int *out);

/* Dream's count for step i of `steps`, n masked positions: float32
 * int(n * (1 - s / t)), t, s = linspace(1, eps, steps + 1)[i], [i + 1];
 * all n at the last step. */
int tb_dllm_dream_transfer(int n, int i, int steps, double eps);

#endif
