/* draft_dflash.c — drafter.h's dflash drafter: a DFlash block-diffusion
 * drafter (engine's cpu/dflash.h, cuda/gpu_dflash.h) conditioned on the
 * target's hidden states at its target_layer_ids, which the target's
 * engine captures for it (engine.h's set_capture / captured).
 *
 * The drafter's context cache follows the verified sequence one token
 * behind, as upstream's loop keeps it: before a proposal, slot b holds the
 * features of positions [0, n[b] - 1); the last verified token (the
 * anchor) is not yet in the target's cache either. prefilled() appends a
 * prompt's P rows. A proposal is one forward over [anchor, mask x k] at
 * positions [n - 1, n + k); nothing of it is kept. After a verification
 * of rows [anchor, d_1 .. d_k] (row b * (k + 1) + i of the target's
 * capture), commit() appends the rows of the positions now verified: the
 * anchor's and the accepted drafts' (n_after - n_before rows, at most
 * k + 1), so the rejected drafts' features never enter and nothing rolls
 * back. CPU targets hand host rows; CUDA targets device rows, appended on
 * the device without a host copy. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dflash.h"
#include "drafter.h"
#include "spec.h"
#ifdef TB_HAVE_CUDA
#include "gpu_dflash.h"
#endif

typedef struct draft_dflash {
    const tb_loaded *target;
    tb_engine *eng;          /* the target's: its capture feeds the context */
    tb_model dm;             /* the drafter (CPU weights; the GPU's from them, or seeded on the device) */
    char name[300];          /* draft_model as given */
    uint64_t seed;
    int on_gpu;
    int reserved;            /* the state exists */
    tb_dflash_state st;      /* CPU */
#ifdef TB_HAVE_CUDA
    struct tb_gpu_dflash *g; /* CUDA */
#endif
    int seqs, len, k;        /* reserved: slots, context positions, draft tokens */
    int V, feat;
    int *base;               /* [seqs] n of the slot at its last proposal */
    int32_t *anchors;        /* [seqs] */
    float *logits;           /* [seqs][block][vocab] a sampled proposal's logits (host) */
    float *scratch;          /* [2 vocab] sampling */
    char error[600];
} draft_dflash;

static void set_err(draft_dflash *d, const char *what)
{
    if (snprintf(d->error, sizeof d->error, "drafter %s: %s", d->name, what) < 0) /* cut when long */
        d->error[0] = '\0';
}

static void state_free(draft_dflash *d)
{
    if (!d->reserved)
        return;
#ifdef TB_HAVE_CUDA
    if (d->on_gpu) {
        tb_gpu_dflash_free(d->g);
        d->g = NULL;
    } else
#endif
        tb_dflash_free(&d->st);
    d->reserved = 0;
}

static void ddf_free(void *ctx)
{
    draft_dflash *d = ctx;
    if (!d)
        return;
    state_free(d);
    if (d->eng && d->eng->iface->set_capture)
        d->eng->iface->set_capture(d->eng->ctx, NULL, 0); /* the target decodes on without capturing */
    tb_model_free(&d->dm);
    free(d->base);
    free(d->anchors);
    free(d->logits);
    free(d->scratch);
    free(d);
}

static int ctx_len(draft_dflash *d, int slot)
{
#ifdef TB_HAVE_CUDA
    if (d->on_gpu)
        return tb_gpu_dflash_ctx_len(d->g, slot);
#endif
    return tb_dflash_ctx_len(&d->st, slot);
}

static int append(draft_dflash *d, int slot, const float *rows, int n)
{
#ifdef TB_HAVE_CUDA
    if (d->on_gpu) {
        if (tb_gpu_dflash_append(d->g, slot, rows, n, 1) != 0) {
            set_err(d, tb_gpu_dflash_error(d->g));
            return -1;
        }
        return 0;
    }
#endif
    if (tb_dflash_append(&d->st, slot, rows, n) != 0) {
        char why[200];
        snprintf(why, sizeof why, "slot %d: %d context positions after %d do not fit the %d reserved", slot, n,
                 tb_dflash_ctx_len(&d->st, slot), d->st.max_ctx);
        set_err(d, why);
        return -1;
    }
    return 0;
}

static int rollback(draft_dflash *d, int slot, int keep)
{
#ifdef TB_HAVE_CUDA
    if (d->on_gpu)
        return tb_gpu_dflash_rollback(d->g, slot, keep);
#endif
    return tb_dflash_rollback(&d->st, slot, keep);
}

static int ddf_reserve(void *ctx, int seqs, int len, int prompt, int k)
{
    draft_dflash *d = ctx;
    (void)prompt;
    const tb_model_config *c = &d->dm.cfg;
    if (k < 1 || k > c->block_size - 1) {
        char why[200];
        snprintf(why, sizeof why, "draft_len %d: this drafter's block of %d drafts 1 .. %d tokens", k, c->block_size,
                 c->block_size - 1);
        set_err(d, why);
        return -1;
    }
    d->k = k;
    if (d->reserved && seqs <= d->seqs && len <= d->len)
        return 0;
    int s = seqs > d->seqs ? seqs : d->seqs, l = len > d->len ? len : d->len;
    state_free(d);
    free(d->base);
    free(d->anchors);
    free(d->logits);
    d->seqs = d->len = 0;
    d->base = calloc((size_t)s, sizeof *d->base);
    d->anchors = malloc((size_t)s * sizeof *d->anchors);
    d->logits = NULL; /* a sampled proposal's, allocated by the first one (greedy drafting needs none) */
    if (!d->base || !d->anchors) {
        set_err(d, "out of memory");
        return -1;
    }
    char why[400];
    int rc;
#ifdef TB_HAVE_CUDA
    if (d->on_gpu)
        rc = tb_gpu_dflash_create(&d->g, d->target->gpu, &d->target->model.cfg, &d->dm.cfg,
                                  d->dm.fc ? &d->dm : NULL, d->seed, s, l, why, sizeof why);
    else
#endif
        rc = tb_dflash_init(&d->st, &d->dm, &d->target->model, s, l, why, sizeof why);
    if (rc != 0) {
        set_err(d, why);
        return -1;
    }
    d->reserved = 1;
    d->seqs = s, d->len = l;
    return 0;
}

static void ddf_set_threads(void *ctx, int n)
{
    (void)ctx, (void)n; /* the CPU drafter's products run on the BLAS's own threads */
}

static void ddf_reset(void *ctx)
{
    draft_dflash *d = ctx;
    for (int i = 0; d->reserved && i < d->seqs; i++)
        rollback(d, i, 0);
}

/* The target's capture: rows [rows][feat] of its last prefill or
 * verification, at least `want` of them. */
static const float *capture(draft_dflash *d, int want)
{
    int rows = 0;
    const float *f = d->eng->iface->captured(d->eng->ctx, &rows);
    if (!f || rows < want) {
        char why[200];
        snprintf(why, sizeof why, "the target's engine captured %d feature rows, expected %d", rows, want);
        set_err(d, why);
        return NULL;
    }
    return f;
}

static int ddf_prefilled(void *ctx, const int *slots, int B, int P)
{
    draft_dflash *d = ctx;
    const float *f = capture(d, B * P);
    if (!f)
        return -1;
    for (int b = 0; b < B; b++) {
        rollback(d, slots[b], 0);
        if (append(d, slots[b], f + (size_t)b * P * d->feat, P) != 0)
            return -1;
    }
    return 0;
}

static int ddf_propose(void *ctx, const int *slots, int B, const int32_t *const *seq, const int *n, int k,
                       const tb_sampling *smp, uint64_t *rng, int32_t *draft, float *q)
{
    draft_dflash *d = ctx;
    d->error[0] = '\0';
    if (k != d->k || B > d->seqs) {
        set_err(d, "a proposal larger than reserved");
        return -1;
    }
    for (int b = 0; b < B; b++) {
        if (ctx_len(d, slots[b]) != n[b] - 1) {
            char why[200];
            snprintf(why, sizeof why, "slot %d holds %d context positions, its sequence %d tokens (expected one "
                     "less): the target's features were not appended", slots[b], ctx_len(d, slots[b]), n[b]);
            set_err(d, why);
            return -1;
        }
        d->anchors[b] = seq[b][n[b] - 1];
        d->base[slots[b]] = n[b];
    }
    const int L = k + 1, V = d->V, sampled = smp->temperature > 0;
    if (sampled && !d->logits &&
        !(d->logits = malloc((size_t)d->seqs * (size_t)d->dm.cfg.block_size * (size_t)V * sizeof *d->logits))) {
        set_err(d, "out of memory");
        return -1;
    }
#ifdef TB_HAVE_CUDA
    if (d->on_gpu) {
        /* the greedy draft is the device's argmax; a sampled one is drawn
         * on the host from the drafted rows' logits, as the CPU's */
        if (tb_gpu_dflash_draft(d->g, slots, B, d->anchors, L, draft, sampled ? d->logits : NULL) != 0) {
            set_err(d, tb_gpu_dflash_error(d->g));
            return -1;
        }
    } else
#endif
        if (tb_dflash_draft(&d->st, slots, B, d->anchors, L, sampled ? d->logits : NULL, sampled ? NULL : draft) != 0) {
        set_err(d, "the draft does not fit what was reserved");
        return -1;
    }
    if (!sampled)
        return 0;
    /* row j + 1 of slot b's block gives d_{j+1}: drawn from q itself, as
     * the rejection rule needs */
    for (int b = 0; b < B; b++)
        for (int j = 0; j < k; j++) {
            float *qj = q + ((size_t)b * k + j) * V;
            tb_sample_dist(d->logits + ((size_t)b * L + j + 1) * V, V, smp, qj, d->scratch);
            draft[(size_t)b * k + j] = ar_spec_draw(qj, V, &rng[b]);
        }
    return 0;
}

static int ddf_commit(void *ctx, const int *slots, int B, const int *n)
{
    draft_dflash *d = ctx;
    const int w = d->k + 1;
    const float *f = capture(d, B * w);
    if (!f)
        return -1;
    for (int b = 0; b < B; b++) {
        int s = slots[b], m = n[b] - d->base[s]; /* the anchor and the accepted drafts */
        if (m < 0 || m > w) {
            set_err(d, "a verification kept more than it verified");
            return -1;
        }
        if (m > 0 && append(d, s, f + (size_t)b * w * d->feat, m) != 0)
            return -1;
    }
    return 0;
}

static const char *ddf_model_name(void *ctx)
{
    return ((draft_dflash *)ctx)->name;
}

static int ddf_default_len(void *ctx)
{
    int b = ((draft_dflash *)ctx)->dm.cfg.block_size - 1;
    return b < TB_SPEC_MAX_DRAFT ? b : TB_SPEC_MAX_DRAFT;
}

static int64_t ddf_memory_peak(void *ctx)
{
    /* the drafter's device memory is held inside the target's context (the
     * target's peak counts it); the CPU has none */
    return ((draft_dflash *)ctx)->on_gpu ? 0 : -1;
}

static void ddf_memory_start(void *ctx)
{
    (void)ctx;
}

static void ddf_take_work(void *ctx, double *flops, double *bytes)
{
    draft_dflash *d = ctx;
    *flops = *bytes = 0;
#ifdef TB_HAVE_CUDA
    if (d->on_gpu && d->reserved)
        tb_gpu_dflash_take_work(d->g, flops, bytes);
#else
    (void)d;
#endif
}

static const char *ddf_error(void *ctx)
{
    return ((draft_dflash *)ctx)->error;
}

static const ar_drafter_ops ddf_ops = {
    .kind = "dflash",
    .reserve = ddf_reserve,
    .set_threads = ddf_set_threads,
    .reset = ddf_reset,
    .prefilled = ddf_prefilled,
    .propose = ddf_propose,
    .commit = ddf_commit,
    .model_name = ddf_model_name,
    .default_len = ddf_default_len,
    .memory_peak = ddf_memory_peak,
    .memory_start = ddf_memory_start,
    .take_work = ddf_take_work,
    .error = ddf_error,
    .free = ddf_free,
};

int ar_drafter_open_dflash(ar_drafter *dr, const char *spec, const tb_loaded *target, tb_engine *eng,
                           uint64_t preset_seed, char *err, size_t err_size)
{
    const int on_gpu = target->gpu != NULL;
#ifndef TB_HAVE_CUDA
    if (on_gpu) {
        snprintf(err, err_size, "draft_model = %s: a GPU target in a build without CUDA", spec);
        return -1;
    }
#endif
    if (!eng->iface->set_capture || !eng->iface->captured) {
        snprintf(err, err_size, "drafter = dflash: the target's engine cannot capture hidden states");
        return -1;
    }
    draft_dflash *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_size, "drafter: out of memory");
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%s", spec);
    d->target = target;
    d->seed = preset_seed;
    d->on_gpu = on_gpu;
    char why[800];
    int rc;
    char where[340];
    if (strncmp(spec, "preset:", 7) == 0) {
        snprintf(where, sizeof where, "the preset's config");
        /* a GPU makes a preset's weights on the device: the config suffices */
        rc = on_gpu ? tb_dflash_preset_config(spec + 7, &d->dm.cfg, why, sizeof why)
                    : tb_dflash_preset(spec + 7, preset_seed, &d->dm, why, sizeof why);
    } else {
        snprintf(where, sizeof where, "%s/config.json", spec);
        rc = tb_dflash_load(spec, &d->dm, why, sizeof why);
    }
    if (rc == 0 && tb_dflash_check_target(&d->dm.cfg, &target->model.cfg, why, sizeof why) != 0) {
        /* why names the field; the file is the drafter's config */
        char w2[800];
        if (snprintf(w2, sizeof w2, "%s, for target %s: %s", where, target->model.name, why) < 0)
            w2[0] = '\0';
        memcpy(why, w2, sizeof why);
        rc = -1;
    }
    if (rc != 0) {
        if (snprintf(err, err_size, "draft_model = %s: %s", spec, why) < 0)
            err[0] = '\0';
        ddf_free(d);
        return -1;
    }
    d->V = d->dm.cfg.vocab_size;
    d->feat = d->dm.cfg.n_target_ids * d->dm.cfg.hidden_size;
    d->scratch = malloc(2 * (size_t)d->V * sizeof *d->scratch);
    if (!d->scratch) {
        snprintf(err, err_size, "draft_model = %s: out of memory", spec);
        ddf_free(d);
        return -1;
    }
    if (eng->iface->set_capture(eng->ctx, d->dm.cfg.target_layer_ids, d->dm.cfg.n_target_ids) != 0) {
        snprintf(err, err_size, "draft_model = %s: %s", spec, eng->iface->error(eng->ctx));
        ddf_free(d);
        return -1;
    }
    d->eng = eng;
    dr->ops = &ddf_ops;
    dr->ctx = d;
    return 0;
}
