/* draft_self.c — drafter.h's self drafter: self-speculation on a
 * block-diffusion model in SDAR's layout. The target drafts for itself:
 * one bidirectional forward (engine.h's draft_span_slots) over
 * [last verified token, mask x k] at positions n - 1 .. n - 1 + k of the
 * target's own cache, row j predicting the token at position n - 1 + j
 * (unshifted, as SDAR decodes a block); the verification that follows,
 * causal, writes over the same positions. One cache, one set of weights:
 * nothing of its own to roll back. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drafter.h"
#include "spec.h"

typedef struct draft_self {
    const tb_loaded *ld;
    tb_engine *eng;    /* the target's */
    int V;
    int32_t mask_id;
    int block_size;
    int cap_rows;      /* rows of the buffers below */
    int32_t *tokens;   /* [B][k + 1] */
    int32_t *argmax;   /* [B][k + 1] */
    float *logits;     /* [B][k + 1][vocab], sampled only */
    float *scratch;    /* [2 vocab] */
    char error[512];
} draft_self;

static void ds_free(void *ctx)
{
    draft_self *d = ctx;
    if (!d)
        return;
    free(d->tokens);
    free(d->argmax);
    free(d->logits);
    free(d->scratch);
    free(d);
}

static int ds_reserve(void *ctx, int seqs, int len, int prompt, int k)
{
    draft_self *d = ctx;
    (void)len, (void)prompt; /* the target's cache, reserved by the loop with k + 1 rows a slot */
    int rows = seqs * (k + 1);
    if (rows > d->cap_rows) {
        free(d->tokens);
        free(d->argmax);
        free(d->logits);
        d->tokens = malloc((size_t)rows * sizeof *d->tokens);
        d->argmax = malloc((size_t)rows * sizeof *d->argmax);
        d->logits = NULL;
        d->cap_rows = 0;
        if (!d->tokens || !d->argmax) {
            snprintf(d->error, sizeof d->error, "self drafter: out of memory");
            return -1;
        }
        d->cap_rows = rows;
    }
    return 0;
}

static void ds_set_threads(void *ctx, int n)
{
    (void)ctx, (void)n; /* the target's engine: the loop sets them */
}

static void ds_reset(void *ctx)
{
    (void)ctx;
}

static int ds_propose(void *ctx, const int *slots, int B, const int32_t *const *seq, const int *n, int k,
                      const tb_sampling *smp, uint64_t *rng, int32_t *draft, float *q)
{
    draft_self *d = ctx;
    const tb_engine_iface *e = d->eng->iface;
    int w = k + 1;
    for (int b = 0; b < B; b++) {
        d->tokens[(size_t)b * w] = seq[b][n[b] - 1];
        for (int j = 1; j < w; j++)
            d->tokens[(size_t)b * w + j] = d->mask_id;
    }
    int sampled = smp->temperature > 0;
    if (sampled && !d->logits) { /* [cap_rows][vocab], on the first sampled call */
        d->logits = malloc((size_t)d->cap_rows * d->V * sizeof *d->logits);
        if (!d->logits) {
            snprintf(d->error, sizeof d->error, "self drafter: out of memory for the draft's logits");
            return -1;
        }
    }
    if (e->draft_span_slots(d->eng->ctx, d->tokens, slots, B, w, sampled ? NULL : d->argmax,
                            sampled ? d->logits : NULL) != 0) {
        snprintf(d->error, sizeof d->error, "self drafter: %s", e->error(d->eng->ctx));
        return -1;
    }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < k; j++) {
            size_t row = (size_t)b * w + j + 1; /* row j + 1 predicts draft token j */
            if (!sampled) {
                draft[(size_t)b * k + j] = d->argmax[row];
                continue;
            }
            float *qj = q + ((size_t)b * k + j) * d->V;
            tb_sample_dist(d->logits + row * d->V, d->V, smp, qj, d->scratch);
            draft[(size_t)b * k + j] = ar_spec_draw(qj, d->V, &rng[b]);
        }
    return 0;
}

static int ds_commit(void *ctx, const int *slots, int B, const int *n)
{
    (void)ctx, (void)slots, (void)B, (void)n; /* the target's truncation is the drafter's */
    return 0;
}

static const char *ds_model_name(void *ctx)
{
    (void)ctx;
    return "";
}

static int ds_default_len(void *ctx)
{
    draft_self *d = ctx;
    return d->block_size - 1;
}

static int64_t ds_memory_peak(void *ctx)
{
    (void)ctx;
    return 0;
}

static void ds_memory_start(void *ctx)
{
    (void)ctx;
}

static const char *ds_error(void *ctx)
{
    return ((draft_self *)ctx)->error;
}

static void ds_take_work(void *ctx, double *flops, double *bytes)
{
    (void)ctx;
    *flops = *bytes = 0; /* the target's engine ran the draft: its count has it */
}

static const ar_drafter_ops ds_ops = {
    .kind = "self",
    .reserve = ds_reserve,
    .set_threads = ds_set_threads,
    .reset = ds_reset,
    .propose = ds_propose,
    .commit = ds_commit,
    .model_name = ds_model_name,
    .default_len = ds_default_len,
    .memory_peak = ds_memory_peak,
    .memory_start = ds_memory_start,
    .take_work = ds_take_work,
    .error = ds_error,
    .free = ds_free,
};

int ar_drafter_open_self(ar_drafter *dr, const tb_loaded *target, tb_engine *eng, char *err, size_t err_size)
{
    const tb_model_config *cfg = &target->model.cfg;
    if (cfg->arch != TB_ARCH_SDAR || cfg->mask_id < 0) {
        snprintf(err, err_size,
                 "drafter = self: %s is %s%s; self-speculation needs a block-diffusion model in SDAR's layout "
                 "(model_type sdar with a mask_token_id) that also runs causally",
                 target->model.name, cfg->arch_name, cfg->arch == TB_ARCH_SDAR ? " without a mask token" : "");
        return -1;
    }
    if (!eng->iface->draft_span_slots || !eng->iface->verify_slots || !eng->iface->truncate_slot) {
        snprintf(err, err_size, "drafter = self: this engine has no draft_span_slots/verify_slots/truncate_slot");
        return -1;
    }
    draft_self *d = calloc(1, sizeof *d);
    if (d)
        d->scratch = malloc(2 * (size_t)cfg->vocab_size * sizeof *d->scratch);
    if (!d || !d->scratch) {
        ds_free(d);
        snprintf(err, err_size, "drafter = self: out of memory");
        return -1;
    }
    d->ld = target;
    d->eng = eng;
    d->V = cfg->vocab_size;
    d->mask_id = cfg->mask_id;
    d->block_size = cfg->block_size > 1 ? cfg->block_size : 2;
    dr->ops = &ds_ops;
    dr->ctx = d;
    return 0;
}
