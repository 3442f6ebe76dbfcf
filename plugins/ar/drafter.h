/* drafter.h — what proposes the draft tokens of speculative decoding
 * (spec.h's loop verifies them on the target): one interface, one
 * implementation per kind of drafter.
 *
 *   ar      a small autoregressive model sharing the target's vocabulary,
 *           on its own engine and KV cache (draft_ar.c): k greedy or
 *           sampled decode steps;
 *   self    the target itself, a block-diffusion model (SDAR's layout)
 *           that also runs causally (draft_self.c): one bidirectional
 *           forward over [last token, mask x k] in the target's own cache;
 *   dflash  a DFlash drafter conditioned on the target's hidden states
 *           (draft_dflash.c): its context cache follows the target's
 *           verified positions' features (engine.h's captured); one
 *           forward over [last token, mask x k].
 *
 * A slot is one request's sequence, the same slot number in the target's
 * engine and the drafter's. seq[b] holds slot slots[b]'s n[b] verified
 * tokens (prompt, then output); the last one, at position n[b] - 1, is not
 * yet in the target's cache (the next verification feeds it first). */
#ifndef TB_AR_DRAFTER_H
#define TB_AR_DRAFTER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend_common.h"
#include "engine.h"
#include "sampling.h"

typedef struct ar_drafter_ops {
    const char *kind; /* "ar", "self", "dflash" */
    /* Room for `seqs` slots of `len` positions, prompts of at most
     * `prompt` tokens and drafts of k tokens, on top of what the target's
     * engine reserved (the self drafter shares it). 0, or -1 with
     * error(). */
    int (*reserve)(void *ctx, int seqs, int len, int prompt, int k);
    /* CPU threads from now on (n > 0), as the target's engine. */
    void (*set_threads)(void *ctx, int n);
    /* A new call: every slot forgotten. */
    void (*reset)(void *ctx);
    /* Optional (NULL: not wanted): after each of the target's prefills,
     * prompts of P tokens into slots[B] (spec.c prefills those of one
     * length together); the target's engine still holds that call's
     * capture. */
    int (*prefilled)(void *ctx, const int *slots, int B, int P);
    /* k draft tokens for each of B slots into draft [B][k]. Greedy
     * (smp->temperature 0): each the drafter's argmax, q unused. Sampled:
     * each drawn from the drafter's distribution under smp's rules (the
     * same temperature, top-k and top-p as the target's), that
     * distribution into q [B][k][vocab], rng[b] slot b's generator. */
    int (*propose)(void *ctx, const int *slots, int B, const int32_t *const *seq, const int *n, int k,
                   const tb_sampling *smp, uint64_t *rng, int32_t *draft, float *q);
    /* After the verification: slot slots[b] now holds n[b] verified
     * tokens (the accepted drafts and the target's bonus appended); the
     * drafter rolls back what of its own cache the rejected drafts wrote.
     * slots[] is the verification's, in its order, and the target's engine
     * still holds its capture (only truncate_slot ran since). */
    int (*commit)(void *ctx, const int *slots, int B, const int *n);
    /* For describe(): the draft model's name ("" for self). */
    const char *(*model_name)(void *ctx);
    /* The draft length this drafter is made for when draft_len = 0. */
    int (*default_len)(void *ctx);
    /* The most device memory the drafter held during the call, bytes (its
     * own model and cache; 0 when it shares the target's, -1 on the CPU). */
    int64_t (*memory_peak)(void *ctx);
    void (*memory_start)(void *ctx);
    /* The device work of the drafter's own forwards since the last call
     * (the roofline's FLOPs and bytes, docs/METRICS.md), then zeroed; 0
     * and 0 where it has none of its own: on the CPU, and the self
     * drafter, whose forwards the target's engine counts. */
    void (*take_work)(void *ctx, double *flops, double *bytes);
    const char *(*error)(void *ctx);
    void (*free)(void *ctx);
} ar_drafter_ops;

typedef struct ar_drafter {
    const ar_drafter_ops *ops;
    void *ctx;
} ar_drafter;

/* The ar drafter: `spec` a model folder or preset:NAME, loaded onto the
 * target's device (on_gpu, the target's fp8 and preset_seed), refused
 * unless it shares the target's vocabulary (its size, and every token's
 * bytes where both have a tokenizer.json). 0, or -1 with err. */
int ar_drafter_open_ar(ar_drafter *d, const char *spec, const tb_loaded *target, int on_gpu, int fp8,
                       uint64_t preset_seed, int threads, char *err, size_t err_size);
/* The self drafter on the target's own engine and weights: the target
 * must be block diffusion in SDAR's layout with a mask token. */
int ar_drafter_open_self(ar_drafter *d, const tb_loaded *target, tb_engine *eng, char *err, size_t err_size);
/* The DFlash drafter (draft_dflash.c): `spec` a DFlash drafter folder
 * (tb_dflash_load) or preset:NAME (tb_dflash_preset, seeded by
 * preset_seed; on a GPU target made on the device), checked against the
 * target (vocabulary, hidden size, num_target_layers, target_layer_ids),
 * on the target's device. It asks the target's engine eng to capture its
 * target_layer_ids (set_capture). 0, or -1 with err. */
int ar_drafter_open_dflash(ar_drafter *d, const char *spec, const tb_loaded *target, tb_engine *eng,
                           uint64_t preset_seed, char *err, size_t err_size);

static inline void ar_drafter_close(ar_drafter *d)
{
    if (d->ops)
        d->ops->free(d->ctx);
    d->ops = NULL;
    d->ctx = NULL;
}

#endif
