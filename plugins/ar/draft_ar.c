/* draft_ar.c — drafter.h's ar drafter: classic draft-model speculation. A
 * small autoregressive model sharing the target's vocabulary runs on its
 * own engine (the target's device) with its own KV cache, slot for slot.
 *
 * Its cache follows the verified sequence one token behind: before a
 * proposal, slot b holds the first n[b] - 2 verified tokens, so the
 * proposal's first forward feeds the last two ([n - 2], [n - 1]) and
 * reads d_1 off the last row; k - 1 decode steps then feed d_1 .. d_{k-1}.
 * Feeding two keeps every proposal one shape whether the last
 * verification accepted every draft (d_k was never fed) or not. A slot's
 * first proposal prefills its whole verified sequence instead. commit()
 * rolls the cache back to n - 2 again. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drafter.h"
#include "spec.h"

typedef struct draft_ar {
    tb_loaded ld;
    tb_engine eng;
    int seqs, len, k;  /* reserved */
    int V;
    int *fresh;        /* [seqs] 1: the slot's cache is empty (its first proposal prefills) */
    int *rows_slots;   /* [seqs] one forward's slots */
    int32_t *tokens;   /* [seqs][len] one forward's tokens */
    int32_t *next;     /* [seqs] argmax of each slot's last row */
    float *logits;     /* [seqs][vocab] */
    float *scratch;    /* [2 vocab] sampling */
    char error[512];
} draft_ar;

static void set_err(draft_ar *d, const char *what)
{
    snprintf(d->error, sizeof d->error, "drafter %s: %s", d->ld.model.name, what);
}

static void dar_free(void *ctx)
{
    draft_ar *d = ctx;
    if (!d)
        return;
    tb_engine_close(&d->eng);
    tb_loaded_free(&d->ld);
    free(d->fresh);
    free(d->rows_slots);
    free(d->tokens);
    free(d->next);
    free(d->logits);
    free(d->scratch);
    free(d);
}

static int dar_reserve(void *ctx, int seqs, int len, int prompt, int k)
{
    draft_ar *d = ctx;
    const tb_engine_iface *e = d->eng.iface;
    /* a first proposal prefills each slot's prompt and first token, all
     * slots in one forward at most; later ones 2 rows, then 1, per slot */
    int rows = seqs * (prompt + 1);
    if (e->reserve(d->eng.ctx, seqs, len, rows > 2 * seqs ? rows : 2 * seqs, d->error, sizeof d->error) != 0)
        return -1;
    if (seqs > d->seqs || len > d->len) {
        int s = seqs > d->seqs ? seqs : d->seqs, l = len > d->len ? len : d->len;
        free(d->fresh);
        free(d->rows_slots);
        free(d->tokens);
        free(d->next);
        free(d->logits);
        d->fresh = calloc((size_t)s, sizeof *d->fresh);
        d->rows_slots = calloc((size_t)s, sizeof *d->rows_slots);
        d->tokens = malloc((size_t)s * (size_t)l * sizeof *d->tokens);
        d->next = malloc((size_t)s * sizeof *d->next);
        d->logits = malloc((size_t)s * (size_t)d->V * sizeof *d->logits);
        d->seqs = d->len = 0;
        if (!d->fresh || !d->rows_slots || !d->tokens || !d->next || !d->logits) {
            set_err(d, "out of memory");
            return -1;
        }
        d->seqs = s, d->len = l;
    }
    d->k = k;
    return 0;
}

static void dar_set_threads(void *ctx, int n)
{
    draft_ar *d = ctx;
    d->eng.iface->set_threads(d->eng.ctx, n);
}

static void dar_reset(void *ctx)
{
    draft_ar *d = ctx;
    for (int i = 0; i < d->seqs; i++)
        d->fresh[i] = 1;
    d->eng.iface->set_padding(d->eng.ctx, NULL, 0);
}

/* Each of B slots' draft token j from its row of d->next / d->logits. */
static void pick(draft_ar *d, int B, int j, int k, const tb_sampling *smp, uint64_t *rng, const int *which,
                 int32_t *draft, float *q)
{
    for (int i = 0; i < B; i++) {
        int b = which ? which[i] : i;
        int32_t t;
        if (smp->temperature > 0) {
            /* drawn from q itself: the rejection rule needs d ~ q exactly */
            float *qj = q + ((size_t)b * k + j) * d->V;
            tb_sample_dist(d->logits + (size_t)i * d->V, d->V, smp, qj, d->scratch);
            t = ar_spec_draw(qj, d->V, &rng[b]);
        } else {
            t = d->next[i];
        }
        draft[(size_t)b * k + j] = t;
    }
}

static int dar_propose(void *ctx, const int *slots, int B, const int32_t *const *seq, const int *n, int k,
                       const tb_sampling *smp, uint64_t *rng, int32_t *draft, float *q)
{
    draft_ar *d = ctx;
    const tb_engine_iface *e = d->eng.iface;
    void *ec = d->eng.ctx;
    float *logits = smp->temperature > 0 ? d->logits : NULL;
    int *idx = malloc((size_t)B * sizeof *idx);
    if (!idx) {
        set_err(d, "out of memory");
        return -1;
    }
    /* step 1: fresh slots prefill their verified tokens, grouped by length
     * (prefill_slots takes one length); the others feed their last two */
    int *done = calloc((size_t)B, sizeof *done);
    if (!done) {
        free(idx);
        set_err(d, "out of memory");
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < B && rc == 0; i++) {
        if (done[i])
            continue;
        int fresh = d->fresh[slots[i]], L = fresh ? n[i] : 2, m = 0;
        for (int j = i; j < B; j++) {
            if (done[j] || d->fresh[slots[j]] != fresh || (fresh && n[j] != L))
                continue;
            memcpy(d->tokens + (size_t)m * L, seq[j] + (n[j] - L), (size_t)L * sizeof(int32_t));
            d->rows_slots[m] = slots[j];
            idx[m++] = j;
            done[j] = 1;
        }
        if (fresh) {
            rc = e->prefill_slots(ec, d->tokens, d->rows_slots, m, L, d->next, logits);
        } else {
            /* logits of both rows come back when sampling: the second row's are wanted */
            int32_t *am = malloc((size_t)m * 2 * sizeof *am);
            float *lg = logits ? malloc((size_t)m * 2 * d->V * sizeof *lg) : NULL;
            if (!am || (logits && !lg)) {
                free(am);
                free(lg);
                free(idx);
                free(done);
                set_err(d, "out of memory");
                return -1;
            }
            rc = e->verify_slots(ec, d->tokens, d->rows_slots, m, 2, logits ? NULL : am, lg);
            for (int r = 0; r < m && rc == 0; r++) {
                d->next[r] = am[2 * r + 1];
                if (lg)
                    memcpy(d->logits + (size_t)r * d->V, lg + ((size_t)2 * r + 1) * d->V, (size_t)d->V * sizeof(float));
            }
            free(am);
            free(lg);
        }
        if (rc == 0) {
            pick(d, m, 0, k, smp, rng, idx, draft, q);
            for (int r = 0; r < m; r++)
                d->fresh[d->rows_slots[r]] = 0;
        }
    }
    free(done);
    /* steps 2 .. k: one decode step of every slot, d_{j} fed for d_{j+1} */
    for (int j = 1; j < k && rc == 0; j++) {
        for (int i = 0; i < B; i++) {
            d->next[i] = draft[(size_t)i * k + j - 1];
            idx[i] = i;
        }
        rc = e->decode_slots(ec, slots, B, d->next, logits);
        if (rc == 0)
            pick(d, B, j, k, smp, rng, idx, draft, q);
    }
    free(idx);
    if (rc && !d->error[0])
        set_err(d, e->error(ec));
    return rc;
}

static int dar_commit(void *ctx, const int *slots, int B, const int *n)
{
    draft_ar *d = ctx;
    const tb_engine_iface *e = d->eng.iface;
    for (int b = 0; b < B; b++)
        if (!d->fresh[slots[b]] && e->truncate_slot(d->eng.ctx, slots[b], n[b] - 2) != 0) {
            set_err(d, e->error(d->eng.ctx));
            return -1;
        }
    return 0;
}

static const char *dar_model_name(void *ctx)
{
    return ((draft_ar *)ctx)->ld.model.name;
}

static int dar_default_len(void *ctx)
{
    (void)ctx;
    return 4;
}

static int64_t dar_memory_peak(void *ctx)
{
    return tb_loaded_memory_peak(&((draft_ar *)ctx)->ld);
}

static void dar_memory_start(void *ctx)
{
    tb_loaded_memory_start(&((draft_ar *)ctx)->ld);
}

static void dar_take_work(void *ctx, double *flops, double *bytes)
{
    tb_loaded_take_work(&((draft_ar *)ctx)->ld, flops, bytes);
}

static const char *dar_error(void *ctx)
{
    return ((draft_ar *)ctx)->error;
}

static const ar_drafter_ops dar_ops = {
    .kind = "ar",
    .reserve = dar_reserve,
    .set_threads = dar_set_threads,
    .reset = dar_reset,
    .propose = dar_propose,
    .commit = dar_commit,
    .model_name = dar_model_name,
    .default_len = dar_default_len,
    .memory_peak = dar_memory_peak,
    .memory_start = dar_memory_start,
    .take_work = dar_take_work,
    .error = dar_error,
    .free = dar_free,
};

/* Whether a and b share one vocabulary: the same size, and where both
 * have a tokenizer, every id standing for the same bytes (compared before
 * decode's lossy UTF-8 cleanup, which maps the partial characters of
 * different byte-level tokens alike). 0, or -1 with the first difference
 * in err. */
static int same_vocabulary(const tb_loaded *a, const tb_loaded *b, char *err, size_t err_size)
{
    if (a->model.cfg.vocab_size != b->model.cfg.vocab_size) {
        snprintf(err, err_size, "a vocabulary of %d tokens; the target's has %d (a drafter must share it)",
                 b->model.cfg.vocab_size, a->model.cfg.vocab_size);
        return -1;
    }
    if (!a->tok || !b->tok)
        return 0;
    size_t n = tb_tokenizer_vocab_size(a->tok);
    if (n != tb_tokenizer_vocab_size(b->tok)) {
        snprintf(err, err_size, "a tokenizer of %zu tokens; the target's has %zu (a drafter must share it)",
                 tb_tokenizer_vocab_size(b->tok), n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t la = 0, lb = 0;
        const char *ta = tb_tokenizer_id_bytes(a->tok, (int32_t)i, &la);
        const char *tb = tb_tokenizer_id_bytes(b->tok, (int32_t)i, &lb);
        if (!ta != !tb || la != lb || (ta && memcmp(ta, tb, la) != 0)) {
            snprintf(err, err_size, "token %zu differs from the target's (a drafter must share its vocabulary)", i);
            return -1;
        }
    }
    return 0;
}

int ar_drafter_open_ar(ar_drafter *dr, const char *spec, const tb_loaded *target, int on_gpu, int fp8,
                       uint64_t preset_seed, int threads, char *err, size_t err_size)
{
    draft_ar *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_size, "drafter: out of memory");
        return -1;
    }
    char why[400];
    tb_status st = tb_load(spec, 0, on_gpu, fp8, preset_seed, 0, &d->ld, why, sizeof why);
    if (st != TB_OK) {
        snprintf(err, err_size, "draft_model = %s: %s", spec, why);
        dar_free(d);
        return -1;
    }
    if (same_vocabulary(target, &d->ld, why, sizeof why) != 0) {
        snprintf(err, err_size, "draft_model = %s: %s", spec, why);
        dar_free(d);
        return -1;
    }
    d->V = d->ld.model.cfg.vocab_size;
    d->scratch = malloc(2 * (size_t)d->V * sizeof *d->scratch);
    if (!d->scratch || tb_engine_open(&d->eng, &d->ld, threads) != 0) {
        snprintf(err, err_size, "draft_model = %s: out of memory", spec);
        dar_free(d);
        return -1;
    }
    if (!d->eng.iface->verify_slots || !d->eng.iface->truncate_slot) {
        snprintf(err, err_size, "draft_model = %s: this engine has no verify_slots/truncate_slot", spec);
        dar_free(d);
        return -1;
    }
    dr->ops = &dar_ops;
    dr->ctx = d;
    return 0;
}
