/* block_sampler.c — see block_sampler.h. */
#define _GNU_SOURCE
#include "block_sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tb_dllm_block_validate(const tb_dllm_params *p, char *why, size_t n)
{
    const char *name = tb_choice_name(tb_dllm_sampler_choices, p->sampler);
    if (p->gen_length < 1) {
        snprintf(why, n, "gen_length (max_new_tokens) must be >= 1");
        return -1;
    }
    if (p->block_length < 1) {
        snprintf(why, n, "%s needs block_length >= 1", name);
        return -1;
    }
    if (p->sampler != TB_DLLM_FAST_DLLM_V2 && (p->steps < 1 || p->steps > p->block_length)) {
        snprintf(why, n, "%s: steps %d (denoising steps per block) must be in [1, block_length %d]", name, p->steps,
                 p->block_length);
        return -1;
    }
    if (p->sampler != TB_DLLM_SDAR_STATIC && !(p->threshold > 0 && p->threshold <= 1)) {
        snprintf(why, n, "threshold %g is outside (0, 1]", p->threshold);
        return -1;
    }
    int sb = p->sub_block > 0 ? p->sub_block : p->block_length;
    if (p->sampler == TB_DLLM_FAST_DLLM_V2 && p->gen_length < p->block_length) {
        snprintf(why, n,
                 "fast_dllm_v2 decodes max_new_tokens / block_length whole blocks (as its generate() does): "
                 "max_new_tokens %d is less than block_length %d",
                 p->gen_length, p->block_length);
        return -1;
    }
    if (p->sampler == TB_DLLM_FAST_DLLM_V2 && p->block_length % sb != 0) {
        snprintf(why, n, "block_length %d is not a multiple of sub_block %d", p->block_length, sb);
        return -1;
    }
    if (p->cache == TB_DLLM_CACHE_PREFIX || (p->cache == TB_DLLM_CACHE_DUAL && p->sampler != TB_DLLM_FAST_DLLM_V2)) {
        snprintf(why, n, "%s keeps the exact cache of finished blocks itself; cache = %s is not one of its options%s",
                 name, tb_choice_name(tb_dllm_cache_choices, p->cache),
                 p->sampler == TB_DLLM_FAST_DLLM_V2 ? " (none, or dual: the sub-block cache)" : " (none)");
        return -1;
    }
    if (p->cfg_scale > 0 || p->temperature != 0) {
        snprintf(why, n, "%s runs at temperature 0 without classifier-free guidance (as its golden tests check)",
                 name);
        return -1;
    }
    return 0;
}

typedef struct brun {
    const tb_dllm_engine *e;
    const tb_dllm_params *p;
    const tb_dllm_hooks *h;
    tb_dllm_stats *stats;
    tb_dllm_pick_spec spec;
    int32_t *canvas;
    int B, L, bs;
    int *P, *G;         /* [B]: where each canvas's prompt ends, and where
                           its output ends (positions past it are not
                           output) */
    int *E;             /* [B]: the end of its last block (Fast-dLLM v2:
                           G - 1, the next token after it; SDAR: G) */
    int *first_new;     /* [B]: Fast-dLLM v2: the block's first position
                           that was a mask when the block began */
    int *active;        /* [B]: 1 while the request decodes */
    /* the canvas in progress (tb_dllm_hooks.on_canvas), [B]: its steps,
     * positions its step forwards ran, whether the request decodes the
     * block, and the output position its last canvas reached */
    int *cv_steps, *cv_on, *cv_done;
    int64_t *cv_pos;
    int *rows;          /* [B]: the canvases of one forward */
    int32_t *x0;        /* [B][L] */
    double *conf;       /* [B][L] */
    unsigned char *chosen; /* [L]: the positions one step commits */
    uint64_t rng;
    char *why;
    size_t why_size;
} brun;

static int is_eos(const brun *r, int32_t t)
{
    for (int i = 0; i < r->p->n_eos; i++)
        if (r->p->eos_ids[i] == t)
            return 1;
    return 0;
}

static int32_t *row_of(const brun *r, int b)
{
    return r->canvas + (size_t)b * r->L;
}

/* The active canvases with a mask in [s0, s1) into r->rows (all active
 * ones when s0 == s1). Returns their count. */
static int select_rows(brun *r, int s0, int s1)
{
    int n = 0;
    for (int b = 0; b < r->B; b++) {
        if (!r->active[b])
            continue;
        int want = s0 == s1;
        for (int i = s0; i < s1 && !want; i++)
            want = row_of(r, b)[i] == r->p->mask_id;
        if (want)
            r->rows[n++] = b;
    }
    return n;
}

static int forward(brun *r, int n_rows, int pos0, int n, int n_attend, int mask_block, int pick0, int npick,
                   int shifted, int denoise)
{
    r->stats->forwards++;
    if (denoise && r->stats->request_steps)
        for (int i = 0; i < n_rows; i++)
            r->stats->request_steps[r->rows[i]]++;
    for (int i = 0; i < n_rows && denoise; i++) {
        r->cv_steps[r->rows[i]]++;
        r->cv_pos[r->rows[i]] += n;
    }
    if (r->e->forward_rows(r->e->ctx, r->canvas, r->L, r->rows, n_rows, pos0, n, n_attend, mask_block, pick0, npick,
                           shifted, &r->spec, &r->rng, r->x0, r->conf) != 0) {
        snprintf(r->why, r->why_size, "forward failed (positions %d..%d of %d, %d canvases)", pos0, pos0 + n, r->L,
                 n_rows);
        return -1;
    }
    return 0;
}

/* Commit x at position i of canvas b; output positions are emitted. A
 * proposed mask token leaves the position masked (upstream writes it). */
static void commit(brun *r, int b, int i, int32_t x, int *emitted)
{
    row_of(r, b)[i] = x;
    if (x != r->p->mask_id && i >= r->P[b] && i < r->G[b])
        (*emitted)++;
}

static void emit(brun *r, int b, int n)
{
    if (n > 0 && r->h && r->h->on_commit)
        r->h->on_commit(r->h->ctx, b, n);
}

/* After a canvas change: the hook, and cancellation. */
static int snapshot(brun *r)
{
    if (r->h && r->h->on_step)
        r->h->on_step(r->h->ctx, r->stats->steps, r->canvas, r->B, r->L);
    return r->h && r->h->cancelled && r->h->cancelled(r->h->ctx) ? 1 : 0;
}

/* The masked positions of [s0, s1) of canvas b (x0/conf of row k of the
 * last forward, span starting at pos0) committed: the `want` most
 * confident (ties: the lower position), or with thr >= 0 every one above
 * thr when they are at least `want` (SDAR dynamic), or (want < 0) every one
 * above thr and always the most confident (Fast-dLLM v2). The positions are
 * chosen first, then written: a chosen position whose proposal is the mask
 * token stays masked, as upstream's. Returns the tokens written that are
 * not the mask. */
static int commit_span(brun *r, int k, int b, int pos0, int n, int s0, int s1, int want, double thr)
{
    const int32_t *x0 = r->x0 + (size_t)k * n;
    const double *conf = r->conf + (size_t)k * n;
    int32_t *x = row_of(r, b), mask = r->p->mask_id;
    unsigned char *chosen = r->chosen;
    int emitted = 0, above = 0, written = 0;
    memset(chosen + s0, 0, (size_t)(s1 - s0));
    if (thr >= 0)
        for (int i = s0; i < s1; i++)
            above += x[i] == mask && conf[i - pos0] > thr;
    if (want < 0 || (thr >= 0 && above >= want)) {
        int best = -1;
        for (int i = s0; i < s1; i++)
            if (x[i] == mask && (best < 0 || conf[i - pos0] > conf[best - pos0]))
                best = i;
        for (int i = s0; i < s1; i++)
            chosen[i] = x[i] == mask && (i == best || conf[i - pos0] > thr);
    } else {
        for (int j = 0; j < want; j++) { /* selection: want is at most the block */
            int best = -1;
            for (int i = s0; i < s1; i++)
                if (x[i] == mask && !chosen[i] && (best < 0 || conf[i - pos0] > conf[best - pos0]))
                    best = i;
            if (best < 0)
                break;
            chosen[best] = 1;
        }
    }
    for (int i = s0; i < s1; i++)
        if (chosen[i]) {
            commit(r, b, i, x0[i - pos0], &emitted);
            written += x0[i - pos0] != mask;
        }
    emit(r, b, emitted);
    return written;
}

/* A request whose block [s0, s1) (or next token) holds an EOS stops:
 * its positions after s1 become the first EOS id. */
static void eos_stop(brun *r, int b, int s0, int s1)
{
    int32_t *x = row_of(r, b);
    for (int i = s0 > r->P[b] ? s0 : r->P[b]; i < s1 && i < r->G[b]; i++)
        if (is_eos(r, x[i])) {
            r->active[b] = 0;
            if (r->stats->request_tokens)
                r->stats->request_tokens[b] = (s1 < r->G[b] ? s1 : r->G[b]) - r->P[b];
            for (int j = s1; j < r->L; j++)
                x[j] = r->p->eos_ids[0];
            return;
        }
}

/* Fast-dLLM v2's stop (its generate(), before every forward of a block
 * and before the block's commit forward): a request whose block holds a
 * committed EOS with no mask before it, from the block's first new
 * position, leaves: no further forward runs it, and its output ends right
 * after that EOS. */
static void fd2_stops(brun *r, int bs, int be)
{
    for (int b = 0; b < r->B; b++) {
        if (!r->active[b])
            continue;
        const int32_t *x = row_of(r, b);
        int i = r->first_new[b] > bs ? r->first_new[b] : bs;
        while (i < be && x[i] != r->p->mask_id && !is_eos(r, x[i]))
            i++;
        if (i < be && is_eos(r, x[i])) {
            r->active[b] = 0;
            if (r->stats->request_tokens)
                r->stats->request_tokens[b] = i + 1 - r->P[b];
        }
    }
}

/* One block of every active canvas, [bs, be). Returns 0, -1, or 1 when
 * cancelled. */
static int decode_block(brun *r, int bs, int be, const int *sched)
{
    const tb_dllm_params *p = r->p;
    /* a block of a canvas's prompt alone (prompts end unevenly) is not
     * one it decodes */
    int n_decoding = select_rows(r, bs, be);
    for (int k = 0; k < n_decoding && r->stats->request_blocks; k++)
        r->stats->request_blocks[r->rows[k]]++;
    for (int k = 0; k < n_decoding; k++)
        r->cv_on[r->rows[k]] = 1;
    if (p->sampler != TB_DLLM_FAST_DLLM_V2) {
        for (int step = 0;; step++) {
            int n_rows = select_rows(r, bs, be);
            if (n_rows == 0)
                break;
            /* past the schedule (it sums to the block, so only when a
             * proposed mask token left a position masked): upstream's
             * loop fails there (its count list has no such step); this
             * one takes every mask left, the mask token not proposed */
            int past = step >= p->steps;
            r->spec.suppress1 = past ? p->mask_id + 1 : 0;
            r->stats->mask_fallbacks += past;
            int fail = forward(r, n_rows, bs, r->bs, be, 0, 0, r->bs, 0, 1);
            r->spec.suppress1 = 0;
            if (fail)
                return -1;
            int want = past ? r->bs : sched[step];
            for (int k = 0; k < n_rows; k++)
                commit_span(r, k, r->rows[k], bs, r->bs, bs, be, want,
                            p->sampler == TB_DLLM_SDAR_DYNAMIC ? p->threshold : -1);
            r->stats->steps++;
            int rc = snapshot(r);
            if (rc)
                return rc;
        }
        return 0;
    }
    int sb = p->sub_block > 0 ? p->sub_block : p->block_length, built = 0;
    for (int b = 0; b < r->B; b++) { /* the block's first new position */
        int i = bs;
        while (i < be && row_of(r, b)[i] != p->mask_id)
            i++;
        r->first_new[b] = i;
    }
    for (int s0 = bs; s0 < be; s0 += sb) {
        int s1 = s0 + sb, stalled = 0;
        for (;;) {
            fd2_stops(r, bs, be);
            int n_rows = select_rows(r, s0, s1);
            if (n_rows == 0)
                break;
            int first_masked = 0;
            for (int k = 0; k < n_rows; k++)
                first_masked |= row_of(r, r->rows[k])[s0] == p->mask_id;
            int whole = p->cache != TB_DLLM_CACHE_DUAL || !built || first_masked;
            int pos0 = whole ? bs : s0, n = whole ? r->bs : sb;
            /* after a step that wrote only mask tokens into some canvas
             * (its proposals were the mask), upstream's loop would run
             * the same forward forever; this one runs it once more
             * without proposing the mask token */
            r->spec.suppress1 = stalled ? p->mask_id + 1 : 0;
            r->stats->mask_fallbacks += stalled;
            int fail = forward(r, n_rows, pos0, n, be, 0, s0 - pos0, sb, 1, 1);
            r->spec.suppress1 = 0;
            if (fail)
                return -1;
            built = 1;
            stalled = 0;
            for (int k = 0; k < n_rows; k++)
                stalled |= commit_span(r, k, r->rows[k], pos0, n, s0, s1, -1, p->threshold) == 0;
            r->stats->steps++;
            int rc = snapshot(r);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* After block [bs, be): EOS stops and requests whose output ends in it
 * are done; then the store forward. SDAR (upstream's loop): of every
 * request that decoded the block, its last and its EOS block included
 * (skip_final_store: only of those still decoding). Fast-dLLM v2: of the
 * requests still decoding, and it commits their next token at be (a
 * canvas whose prompt goes past be has none to commit). */
static int store_block(brun *r, int bs, int be)
{
    int next = r->p->sampler == TB_DLLM_FAST_DLLM_V2, every = !next && !r->p->skip_final_store;
    int n_rows = every ? select_rows(r, 0, 0) : 0; /* r->rows: kept for the forward */
    if (next)
        fd2_stops(r, bs, be); /* its last block too gets a commit forward */
    for (int b = 0; b < r->B && !next; b++) {
        if (r->active[b])
            eos_stop(r, b, bs, be);
        if (be >= r->G[b])
            r->active[b] = 0;
    }
    if (!every)
        n_rows = select_rows(r, 0, 0);
    if (n_rows == 0)
        return 0;
    if (forward(r, n_rows, bs, be - bs, be, 0, be - bs - 1, next, 0, 0))
        return -1;
    if (!next)
        return 0;
    for (int k = 0; k < n_rows; k++) {
        int b = r->rows[k], emitted = 0;
        if (row_of(r, b)[be] != r->p->mask_id)
            continue;
        commit(r, b, be, r->x0[(size_t)k * (be - bs) + be - bs - 1], &emitted);
        emit(r, b, emitted);
        eos_stop(r, b, be, be + 1);
        if (be >= r->E[b]) /* its last block: the output ends at that token */
            r->active[b] = 0;
    }
    return snapshot(r);
}

/* After block [bs, be) and its store: each request that decoded it has
 * a canvas, the block. Its tokens: the output positions from where its
 * last canvas ended through be (Fast-dLLM v2: be too, when the commit
 * forward filled it), cut at the request's output end. */
static void canvases_done(brun *r, int bs, int be)
{
    (void)bs;
    for (int b = 0; b < r->B; b++) {
        if (!r->cv_on[b])
            continue;
        int out_end = r->stats->request_tokens ? r->P[b] + r->stats->request_tokens[b] : r->G[b];
        int cover = be + (r->p->sampler == TB_DLLM_FAST_DLLM_V2 && be < r->L && row_of(r, b)[be] != r->p->mask_id);
        int end = cover < out_end ? cover : out_end, from = r->cv_done[b] > r->P[b] ? r->cv_done[b] : r->P[b];
        int committed = end > from ? end - from : 0;
        if (end > r->cv_done[b])
            r->cv_done[b] = end;
        if (r->h && r->h->on_canvas)
            r->h->on_canvas(r->h->ctx, b, r->cv_steps[b], committed, r->cv_pos[b]);
        r->cv_on[b] = r->cv_steps[b] = 0;
        r->cv_pos[b] = 0;
    }
}

int tb_dllm_block_generate(const tb_dllm_engine *e, const tb_dllm_params *p, int32_t *canvas, int B, int prompt_len,
                           uint64_t seed, const tb_dllm_hooks *h, tb_dllm_stats *stats, char *why, size_t why_size)
{
    if (!e->forward_rows) {
        snprintf(why, why_size, "this engine has no block-diffusion forward");
        return -1;
    }
    brun r = {.e = e, .p = p, .h = h, .stats = stats, .canvas = canvas, .B = B,
              .L = tb_dllm_canvas_length(p, prompt_len), .bs = p->block_length, .rng = seed ^ 0x5DEECE66DULL,
              .why = why, .why_size = why_size};
    /* the mask token is in the softmax and may be proposed, as upstream's
     * (it is kept out only where upstream's loop would fail or not end) */
    r.spec = (tb_dllm_pick_spec){.conf = TB_DLLM_CONF_LLADA_PROB};
    r.active = malloc((size_t)B * sizeof(int));
    r.rows = malloc((size_t)B * sizeof(int));
    r.P = malloc((size_t)B * sizeof(int));
    r.G = malloc((size_t)B * sizeof(int));
    r.E = malloc((size_t)B * sizeof(int));
    r.first_new = malloc((size_t)B * sizeof(int));
    r.cv_steps = calloc((size_t)B, sizeof(int));
    r.cv_on = calloc((size_t)B, sizeof(int));
    r.cv_done = calloc((size_t)B, sizeof(int));
    r.cv_pos = calloc((size_t)B, sizeof(int64_t));
    r.x0 = malloc((size_t)B * r.L * sizeof(int32_t));
    r.conf = malloc((size_t)B * r.L * sizeof(double));
    r.chosen = malloc((size_t)r.L);
    int *sched = malloc((size_t)(p->steps > 0 ? p->steps : 1) * sizeof(int));
    int rc = 0;
    if (!r.active || !r.rows || !r.P || !r.G || !r.E || !r.first_new || !r.cv_steps || !r.cv_on || !r.cv_done || !r.cv_pos || !r.x0 || !r.conf || !r.chosen || !sched) {
        snprintf(why, why_size, "out of memory for %d canvases of %d positions", B, r.L);
        rc = -1;
    }
    if (rc == 0 && p->sampler != TB_DLLM_FAST_DLLM_V2)
        tb_dllm_llada_schedule(r.bs, p->steps, sched);
    int k0 = prompt_len / r.bs, G = 0; /* k0: the whole blocks of every canvas's prompt */
    for (int b = 0; b < B && rc == 0; b++) {
        r.active[b] = 1;
        r.P[b] = p->prompt_end ? p->prompt_end[b] : prompt_len;
        /* SDAR returns its whole last block (upstream's loop returns the
         * canvas); Fast-dLLM v2 (its generate()) decodes gen_length /
         * block_length blocks from the one holding P, and the commit
         * forward of the last one adds one token after it */
        if (p->sampler != TB_DLLM_FAST_DLLM_V2) {
            r.G[b] = r.E[b] = (r.P[b] + p->gen_length + r.bs - 1) / r.bs * r.bs;
        } else {
            r.E[b] = (r.P[b] / r.bs + p->gen_length / r.bs) * r.bs;
            r.G[b] = r.E[b] + 1;
        }
        if (r.P[b] < 0 || r.P[b] > prompt_len) {
            snprintf(why, why_size, "canvas %d: prompt end %d outside [0, %d]", b, r.P[b], prompt_len);
            rc = -1;
        }
        k0 = r.P[b] / r.bs < k0 ? r.P[b] / r.bs : k0;
        G = r.E[b] > G ? r.E[b] : G; /* the blocks end at the last E */
        if (stats->request_tokens)
            stats->request_tokens[b] = r.G[b] - r.P[b];
    }
    /* prefill: the prompts' whole blocks, block-causal; Fast-dLLM v2's
     * next token for the canvases whose prompt ends there */
    if (rc == 0 && k0 > 0) {
        int n_rows = select_rows(&r, 0, 0), n = k0 * r.bs, next = 0;
        for (int k = 0; k < n_rows && p->sampler == TB_DLLM_FAST_DLLM_V2; k++)
            next |= r.P[r.rows[k]] == n;
        rc = forward(&r, n_rows, 0, n, n, r.bs, n - 1, next, 0, 0);
        for (int k = 0; k < n_rows && rc == 0 && next; k++) {
            int b = r.rows[k], emitted = 0;
            if (r.P[b] != n)
                continue;
            commit(&r, b, n, r.x0[(size_t)k * n + n - 1], &emitted);
            emit(&r, b, emitted);
            eos_stop(&r, b, n, n + 1);
        }
        if (rc == 0 && next)
            rc = snapshot(&r);
    }
    if (rc == 0 && h && h->on_prefill)
        h->on_prefill(h->ctx);
    for (int bs = k0 * r.bs; bs < G && rc == 0; bs += r.bs) {
        if (select_rows(&r, 0, 0) == 0)
            break;
        stats->blocks++;
        rc = decode_block(&r, bs, bs + r.bs, sched);
        if (rc == 0)
            rc = store_block(&r, bs, bs + r.bs);
        if (rc == 0)
            canvases_done(&r, bs, bs + r.bs);
    }
    free(r.active);
    free(r.rows);
    free(r.P);
    free(r.G);
    free(r.E);
    free(r.first_new);
    free(r.cv_steps);
    free(r.cv_on);
    free(r.cv_done);
    free(r.cv_pos);
    free(r.x0);
    free(r.conf);
    free(r.chosen);
    free(sched);
    return rc;
}
