/* spec_check.h — what the speculative-decoding tests share
 * (tests/engine/test_spec.c on the CPU, tests/gpu/test_ar_spec_gpu.c on
 * CUDA): the ar plugin driven through its ABI (its sources linked in,
 * plugin_host.h's host), the checks on tb_spec_counts, the chi-square of
 * sampled outputs and the target's exact joint of three sampled tokens.
 *
 * Header-only, static inline (a test need not use every helper): each
 * test includes it once, after check.h, plugin_host.h and the engine's
 * headers. */
#ifndef TB_TEST_SPEC_CHECK_H
#define TB_TEST_SPEC_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "check.h"
#include "engine.h"
#include "plugin_host.h"
#include "sampling.h"

#define MAX_OPTS 32
#define MAX_R 16
#define MAX_N 64
#define NSET(a) (sizeof (a) / sizeof *(a))

/* ---- the plugin through its ABI */

typedef struct run {
    tb_status st;
    uint32_t n_out[MAX_R];
    int32_t ids[MAX_R][MAX_N];
    tb_spec_counts spec[MAX_R];
    uint32_t emitted[MAX_R];
    int64_t forwards, draft_ns;
    double flops, bytes; /* the roofline's work (the GPU reports it) */
    char error[512];
} run;

static inline void *open_ctx(const char *model, const test_option *set, size_t n_set, char *err, size_t err_size,
                      tb_status *st_out)
{
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value v[MAX_OPTS];
    uint32_t n = test_options(ops, set, n_set, v, MAX_OPTS);
    void *ctx = NULL;
    tb_status st = ops->create(&test_host, model, v, n, &ctx, err, err_size);
    if (st_out)
        *st_out = st;
    return st == TB_OK ? ctx : NULL;
}

/* generate() of R text prompts (texts NULL: synthetic prompts of 16
 * tokens, for presets, which have no tokenizer), N new tokens; options as
 * set. */
static inline void generate(void *ctx, const char *const *texts, uint32_t R, uint32_t N, uint64_t seed,
                            const test_option *set, size_t n_set, run *out)
{
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value v[MAX_OPTS];
    uint32_t n = test_options(ops, set, n_set, v, MAX_OPTS);
    tb_request_result rr[MAX_R];
    tb_spec_counts sc[MAX_R];
    memset(rr, 0, sizeof rr);
    memset(sc, 0, sizeof sc);
    for (uint32_t r = 0; r < R; r++)
        rr[r].n_answer_tokens = TB_UNKNOWN_COUNT;
    tb_request rq = {.struct_size = sizeof rq, .n_requests = R, .max_new_tokens = N, .batch = R, .seed = seed,
                     .prompt_text = texts, .prompt_tokens = texts ? 0 : 16, .options = v, .n_options = n};
    tb_result res = {.struct_size = sizeof res, .n_requests = R, .requests = rr, .spec = sc};
    memset(test_emitted, 0, sizeof test_emitted);
    memset(out, 0, sizeof *out);
    out->st = ops->generate(ctx, &rq, &res);
    snprintf(out->error, sizeof out->error, "%s", ops->last_error(ctx));
    for (uint32_t r = 0; r < R; r++) {
        out->n_out[r] = rr[r].n_output_ids < MAX_N ? rr[r].n_output_ids : MAX_N;
        if (rr[r].output_ids)
            memcpy(out->ids[r], rr[r].output_ids, out->n_out[r] * sizeof(int32_t));
        out->spec[r] = sc[r];
        out->emitted[r] = test_emitted[r];
    }
    out->forwards = res.forward_passes;
    out->draft_ns = res.draft_ns;
    out->flops = res.flops;
    out->bytes = res.bytes;
}

/* The counts of one request hang together; exact: nothing was cut. */
static inline void check_counts(const run *g, uint32_t r, int k, int exact)
{
    const tb_spec_counts *s = &g->spec[r];
    CHECK(g->emitted[r] == g->n_out[r]); /* one emission per token */
    CHECK(s->verifications > 0 || g->n_out[r] <= 1);
    CHECK(s->drafted == (uint32_t)k * s->verifications);
    CHECK(s->draft_len == (s->verifications ? (uint32_t)k : 0));
    uint32_t sum_acc = 0, sum_dr = 0;
    for (int i = 0; i < TB_SPEC_MAX_DRAFT; i++) {
        sum_acc += s->accepted_at[i];
        sum_dr += s->drafted_at[i];
        CHECK(s->accepted_at[i] <= s->drafted_at[i]);
        if (i > 0)
            CHECK(s->accepted_at[i] <= s->accepted_at[i - 1]);
        CHECK(s->drafted_at[i] == (i < k ? s->verifications : 0));
    }
    CHECK(sum_acc == s->accepted);
    CHECK(sum_dr == s->drafted);
    uint32_t made = s->accepted + s->verifications + 1; /* the prefill's token, then accepted + bonus each */
    if (exact)
        CHECK(made == g->n_out[r]);
    else
        CHECK(made >= g->n_out[r] && made <= g->n_out[r] + (uint32_t)k);
}

static inline int same_ids(const run *a, const run *b, uint32_t R, const char *what)
{
    int same = 1;
    for (uint32_t r = 0; r < R; r++) {
        int eq = a->n_out[r] == b->n_out[r] && memcmp(a->ids[r], b->ids[r], a->n_out[r] * sizeof(int32_t)) == 0;
        if (!eq) {
            fprintf(stderr, "%s: request %u differs (%u vs %u tokens):", what, r, a->n_out[r], b->n_out[r]);
            for (uint32_t i = 0; i < a->n_out[r] && i < b->n_out[r]; i++)
                fprintf(stderr, " %d/%d", a->ids[r][i], b->ids[r][i]);
            fprintf(stderr, "\n");
        }
        same &= eq;
    }
    return same;
}

/* Pearson's chi-square of counts against exact probabilities, the cells
 * expected fewer than 5 times pooled into one (so that a rare cell's
 * single hit does not dominate); *dof its degrees of freedom. A count in a
 * cell of probability 0 makes it infinite. */
static inline double chi_square(const double *count, const double *prob, int cells, double n, int *dof)
{
    double x = 0, pool_n = 0, pool_e = 0;
    int bins = 0;
    for (int c = 0; c < cells; c++) {
        if (prob[c] <= 0) {
            if (count[c] > 0)
                return INFINITY;
            continue;
        }
        double e = n * prob[c];
        if (e < 5) {
            pool_n += count[c];
            pool_e += e;
            continue;
        }
        x += (count[c] - e) * (count[c] - e) / e;
        bins++;
    }
    if (pool_e > 0) {
        x += (pool_n - pool_e) * (pool_n - pool_e) / pool_e;
        bins++;
    }
    if (dof)
        *dof = bins - 1;
    return x;
}

/* Far past chance for dof degrees of freedom (about 7 standard deviations
 * above the mean: p < 1e-7 at these sizes), yet far below what a wrong
 * rule gives at these sample counts. */
static inline double chi_limit(int dof)
{
    return dof + 7 * sqrt(2.0 * dof) + 10;
}

/* The target's exact joint of its first three sampled tokens after
 * `text` (top_k 3: 27 cells), through the engine and sampling.h's rule;
 * cells[c] = its three ids. */
static inline int exact_joint(const char *model, int diffusion, int on_gpu, const char *text, const tb_sampling *smp,
                       double *prob, int32_t (*cells)[3])
{
    tb_loaded ld;
    char err[512];
    CHECK(tb_load(model, diffusion, on_gpu, 0, 0, 0, &ld, err, sizeof err) == TB_OK);
    int V = ld.model.cfg.vocab_size;
    int32_t **ids = NULL;
    int64_t *lens = NULL;
    size_t P;
    CHECK(tb_tokenize_prompts(&ld, &text, 1, &ids, &lens, &P, err, sizeof err) == TB_OK);
    tb_engine eng;
    CHECK(tb_engine_open(&eng, &ld, 1) == 0);
    const tb_engine_iface *e = eng.iface;
    CHECK(e->reserve(eng.ctx, 1, (int)P + 3, (int)P + 3, err, sizeof err) == 0);
    CHECK(e->set_padding(eng.ctx, NULL, 0) == 0);
    int32_t *seq = calloc(P + 3, sizeof *seq);
    float *logits = malloc((P + 3) * (size_t)V * sizeof *logits), *scratch = malloc(2 * (size_t)V * sizeof *scratch);
    float *d0 = malloc((size_t)V * sizeof *d0), *d1 = malloc((size_t)V * sizeof *d1),
          *d2 = malloc((size_t)V * sizeof *d2);
    memcpy(seq, ids[0], P * sizeof *seq);
    int n = 0;
    /* logits_all appends to what the engine holds: forgotten before each */
    CHECK(e->logits_all(eng.ctx, seq, (int)P, logits) == 0);
    tb_sample_dist(logits + (P - 1) * V, V, smp, d0, scratch);
    for (int a = 0; a < V; a++) {
        if (d0[a] <= 0)
            continue;
        seq[P] = a;
        CHECK(e->set_padding(eng.ctx, NULL, 0) == 0);
        CHECK(e->logits_all(eng.ctx, seq, (int)P + 1, logits) == 0);
        tb_sample_dist(logits + P * V, V, smp, d1, scratch);
        for (int b = 0; b < V; b++) {
            if (d1[b] <= 0)
                continue;
            seq[P + 1] = b;
            CHECK(e->set_padding(eng.ctx, NULL, 0) == 0);
            CHECK(e->logits_all(eng.ctx, seq, (int)P + 2, logits) == 0);
            tb_sample_dist(logits + (P + 1) * V, V, smp, d2, scratch);
            for (int c = 0; c < V; c++) {
                if (d2[c] <= 0 || n >= 27)
                    continue;
                prob[n] = (double)d0[a] * d1[b] * d2[c];
                cells[n][0] = a, cells[n][1] = b, cells[n][2] = c;
                n++;
            }
        }
    }
    free(seq);
    free(logits);
    free(scratch);
    free(d0);
    free(d1);
    free(d2);
    tb_free_prompts(ids, lens, 1);
    tb_engine_close(&eng);
    tb_loaded_free(&ld);
    return n;
}

/* 250 calls of 16 requests of `text`, three tokens each, sampled
 * (temperature 1, top_k 3, draft_len 2) on `device` with `drafter`: 1
 * when the joint of the three tokens passes the chi-square against the
 * target's exact joint (exact_joint); the drafts accepted and drafted. */
static inline int sampled_case(const char *device, const char *model, int diffusion, const char *drafter,
                        const char *draft_model, const char *text, uint64_t *acc, uint64_t *drafted)
{
    tb_sampling smp = {1.0, 3, 1};
    double prob[27];
    int32_t cells[27][3];
    char err[512] = "";
    *acc = *drafted = 0;
    int n_cells = exact_joint(model, diffusion, strcmp(device, "cuda") == 0, text, &smp, prob, cells);
    CHECK(n_cells == 27);
    test_option set[] = {{"device", device}, {"threads", "1"}, {"drafter", drafter}, {"draft_model", draft_model}};
    void *ctx = open_ctx(model, set, NSET(set), err, sizeof err, NULL);
    if (!ctx) {
        fprintf(stderr, "create: %s\n", err);
        return 0;
    }
    test_option s[] = {{"device", device},    {"threads", "1"}, {"drafter", drafter}, {"draft_model", draft_model},
                       {"draft_len", "2"},   {"temperature", "1"}, {"top_k", "3"}};
    const char *texts[MAX_R];
    for (int r = 0; r < MAX_R; r++)
        texts[r] = text;
    double count[27] = {0}, n = 0, outside = 0;
    static run got;
    for (uint64_t seed = 1; seed <= 250; seed++) {
        generate(ctx, texts, MAX_R, 3, seed, s, NSET(s), &got);
        CHECK(got.st == TB_OK);
        for (int r = 0; r < MAX_R; r++) {
            int c = 0;
            while (c < n_cells && memcmp(cells[c], got.ids[r], sizeof cells[c]) != 0)
                c++;
            if (c < n_cells)
                count[c]++;
            else
                outside++;
            n++;
            *acc += got.spec[r].accepted;
            *drafted += got.spec[r].drafted;
        }
    }
    int dof = 0;
    double x = outside > 0 ? INFINITY : chi_square(count, prob, n_cells, n, &dof);
    fprintf(stderr,
            "sampled on %s, drafter %s %s for %s: chi-square %.1f (%d dof, limit %.1f) over %.0f runs, %llu "
            "of %llu drafts accepted\n",
            device, drafter, draft_model, model, x, dof, chi_limit(dof), n, (unsigned long long)*acc,
            (unsigned long long)*drafted);
    tokbench_backend_entry()->destroy(ctx);
    return x < chi_limit(dof);
}

#endif
