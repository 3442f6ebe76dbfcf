/* test_sampler_trace.c — tokbench's block samplers do upstream's work:
 * every forward (prefill, denoising step, cache store: its query span and
 * the keys it attends), the canvas after every step, NFE and the tokens
 * returned, against golden traces of the published loops
 * (tools/make_sampler_traces.py over our transcriptions in tools/upstream/)
 * on the same fake network, computed here bit for bit as there.
 *
 *   test_sampler_trace TRACES_JSON...
 *
 * SDAR (sdar.json): prompts shorter than a block, a whole block, and past
 * a block but not a multiple of it; static and dynamic (threshold)
 * remasking; with and without an EOS stop; blocks of 4 and 8, steps =
 * block and < block. Fast-dLLM v2 (fast_dllm_v2.json, its generate()):
 * prompts shorter than a block, past one and not a multiple, a multiple;
 * sub-blocks of 2, 4 and 8; thresholds 0.6 and 1 (its default: one token a
 * forward); no EOS, an early EOS (no mask before it), a later one. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "generate.h"
#include "pick.h"
#include "sampler.h"
#include "util.h"

enum { V = 16, MAX_FWD = 64, MAX_L = 64 };

/* tools/make_sampler_traces.py's splitmix64 and fake_row */
static uint64_t splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

typedef struct fake {
    int eos_at, mask, eos;
    int mp_at, mp_below;           /* the row at mp_at peaks on the mask token */
    float mp_height;               /* while fewer than mp_below keys are unmasked */
    int n;                         /* forwards run */
    int kind[MAX_FWD];             /* 'p' prefill, 'd' denoise, 's' store */
    int q0[MAX_FWD], q1[MAX_FWD], k1[MAX_FWD];
    int32_t fed[MAX_FWD][MAX_L];   /* the canvas each forward saw */
    int L;
    int64_t step_rows;             /* rows the denoising forwards ran */
} fake;

/* the sampler's canvas records (tb_dllm_hooks.on_canvas), summed */
typedef struct canvases {
    int n, steps, committed;
    int64_t positions;
} canvases;
static void on_canvas(void *ctx, int b, int steps, int committed, int64_t positions)
{
    canvases *c = ctx;
    (void)b;
    c->n++, c->steps += steps, c->committed += committed, c->positions += positions;
}

static void fake_row(const fake *f, int q, int ctx, float *row)
{
    uint64_t h = splitmix64((uint64_t)q * 0x10001 + (uint64_t)ctx * 0x3F1 + 0x5EED);
    for (int i = 0; i < V; i++)
        row[i] = (float)((h >> (4 * i)) & 15) / 8.0f - 1.0f;
    int peak = (int)(h % 13);
    float height = 1.5f + (float)((h >> 40) % 9);
    if (q == f->eos_at)
        peak = f->eos, height = 12.0f;
    if (q == f->mp_at && ctx < f->mp_below)
        peak = f->mask, height = f->mp_height;
    row[peak] = height;
}

static int fake_rows(void *ctx, const int32_t *canvas, int L, const int *rows, int n_rows, int pos0, int n,
                     int n_attend, int mask_block, int pick0, int npick, int shifted, const tb_dllm_pick_spec *spec,
                     uint64_t *rng, int32_t *x0, double *conf)
{
    fake *f = ctx;
    if (n_rows != 1 || rows[0] != 0 || f->n >= MAX_FWD || L > MAX_L)
        return -1;
    int k = f->n++;
    /* a store: no picks, or (Fast-dLLM v2's commit forward) the last row's
     * pick alone, unshifted: the next token */
    int store = npick == 0 || (npick == 1 && pick0 == n - 1 && !shifted && n > 1);
    f->kind[k] = mask_block > 0 ? 'p' : store ? 's' : 'd';
    if (f->kind[k] == 'd')
        f->step_rows += (int64_t)n * n_rows;
    f->q0[k] = pos0, f->q1[k] = pos0 + n, f->k1[k] = n_attend;
    memcpy(f->fed[k], canvas, (size_t)L * sizeof(int32_t));
    f->L = L;
    int c = 0;
    for (int i = 0; i < n_attend; i++)
        c += canvas[i] != f->mask;
    for (int i = pick0; i < pick0 + npick; i++) {
        float row[V], scratch[V];
        /* shifted: row i reads the output at i - 1, the span's first its own */
        fake_row(f, pos0 + (shifted && i > 0 ? i - 1 : i), c, row);
        tb_dllm_pick_row(row, V, spec, rng, scratch, &x0[i], &conf[i]);
    }
    return 0;
}

static int jint(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItem(o, k)->valueint;
}

static int check_case(const cJSON *c)
{
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const cJSON *prompt = cJSON_GetObjectItem(c, "prompt"), *fwds = cJSON_GetObjectItem(c, "forwards");
    const cJSON *ret = cJSON_GetObjectItem(c, "returned"), *eos_at = cJSON_GetObjectItem(c, "eos_at");
    int32_t eos_ids[1] = {jint(c, "eos_id")};
    const char *sampler = cJSON_GetStringValue(cJSON_GetObjectItem(c, "sampler"));
    int fd2 = !strcmp(sampler, "fast_dllm_v2");
    tb_dllm_params p = {.sampler = fd2                              ? TB_DLLM_FAST_DLLM_V2
                                   : !strcmp(sampler, "sdar_dynamic") ? TB_DLLM_SDAR_DYNAMIC
                                                                      : TB_DLLM_SDAR_STATIC,
                        .gen_length = jint(c, "gen_length"), .block_length = jint(c, "block_length"),
                        .steps = fd2 ? 1 : jint(c, "steps"), .sub_block = fd2 ? jint(c, "sub_block") : 0,
                        .threshold = cJSON_GetObjectItem(c, "threshold")->valuedouble,
                        .mask_id = jint(c, "mask_id"), .eos_ids = eos_ids, .n_eos = 1, .top_p = 1, .eps = 1e-3};
    int P = cJSON_GetArraySize(prompt), L = tb_dllm_canvas_length(&p, P);
    fake *f = calloc(1, sizeof *f);
    if (!f || L > MAX_L)
        return -1;
    f->mask = p.mask_id, f->eos = eos_ids[0], f->eos_at = cJSON_IsNumber(eos_at) ? eos_at->valueint : -1;
    const cJSON *mp = cJSON_GetObjectItem(c, "mask_proposed");
    f->mp_at = -1;
    if (cJSON_IsArray(mp))
        f->mp_at = cJSON_GetArrayItem(mp, 0)->valueint, f->mp_below = cJSON_GetArrayItem(mp, 1)->valueint,
        f->mp_height = (float)cJSON_GetArrayItem(mp, 2)->valuedouble;
    /* where upstream's loop fails (IndexError) or repeats a forward
     * forever, its forwards until then are compared, then tokbench's
     * fallback must have run and left no mask in the output */
    const char *fails = cJSON_GetStringValue(cJSON_GetObjectItem(c, "upstream_fails"));
    int32_t canvas[MAX_L];
    for (int i = 0; i < L; i++)
        canvas[i] = i < P ? cJSON_GetArrayItem(prompt, i)->valueint : p.mask_id;
    tb_dllm_engine e = {.ctx = f, .vocab = V, .forward_rows = fake_rows};
    int req_tokens = 0, req_steps = 0, req_blocks = 0;
    tb_dllm_stats st = {.request_tokens = &req_tokens, .request_steps = &req_steps, .request_blocks = &req_blocks};
    char why[256] = "";
    canvases cv = {0};
    tb_dllm_hooks h = {.ctx = &cv, .on_canvas = on_canvas};
    int rc = tb_dllm_generate(&e, &p, canvas, 1, P, 0, &h, &st, why, sizeof why);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", name, why);
    CHECK(rc == 0);
    /* its canvases (the blocks it decoded) add up: tokens to its output,
     * steps to its denoising forwards, positions to the rows those ran */
    if (cv.n != req_blocks || cv.committed != req_tokens || cv.steps != req_steps || cv.positions != f->step_rows) {
        fprintf(stderr, "%s: %d canvases, %d steps, %d tokens, %lld positions; blocks %d, steps %d, tokens %d, "
                        "rows stepped %lld\n", name, cv.n, cv.steps, cv.committed, (long long)cv.positions,
                req_blocks, req_steps, req_tokens, (long long)f->step_rows);
        CHECK(0);
    }
    int bad = 0, want = cJSON_GetArraySize(fwds);
    if (fails ? f->n <= want - !strcmp(fails, "IndexError") || st.mask_fallbacks < 1
              : f->n != want || st.forwards != want || st.mask_fallbacks != 0) {
        fprintf(stderr, "%s: %d forwards (NFE %d, %d without proposing the mask), upstream %d%s%s\n", name, f->n,
                st.forwards, st.mask_fallbacks, want, fails ? " then " : "", fails ? fails : "");
        bad = 1;
    }
    for (int k = 0; k < want && k < f->n && !bad; k++) {
        const cJSON *u = cJSON_GetArrayItem(fwds, k);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(u, "kind"));
        const cJSON *q = cJSON_GetObjectItem(u, "query"), *keys = cJSON_GetObjectItem(u, "keys");
        if (kind[0] != f->kind[k] || cJSON_GetArrayItem(q, 0)->valueint != f->q0[k] ||
            cJSON_GetArrayItem(q, 1)->valueint != f->q1[k] || cJSON_GetArrayItem(keys, 1)->valueint != f->k1[k]) {
            fprintf(stderr, "%s: forward %d: %c [%d, %d) keys [0, %d), upstream %s [%d, %d) keys [0, %d)\n", name, k,
                    f->kind[k], f->q0[k], f->q1[k], f->k1[k], kind, cJSON_GetArrayItem(q, 0)->valueint,
                    cJSON_GetArrayItem(q, 1)->valueint, cJSON_GetArrayItem(keys, 1)->valueint);
            bad = 1;
            break;
        }
        /* a step's canvas: what the next forward saw (the last: the end),
         * through the step's block (an EOS stop sets positions after it) */
        const cJSON *after = cJSON_GetObjectItem(u, "canvas_after");
        if (fails && k == want - 1 && !strcmp(fails, "IndexError"))
            break; /* upstream's last forward: it fails after it, tokbench commits */
        const int32_t *seen = k + 1 < f->n ? f->fed[k + 1] : canvas;
        for (int i = 0; cJSON_IsArray(after) && i < f->q1[k] && !bad; i++)
            if (cJSON_GetArrayItem(after, i)->valueint != seen[i]) {
                fprintf(stderr, "%s: after forward %d, position %d: %d, upstream %d\n", name, k, i, seen[i],
                        cJSON_GetArrayItem(after, i)->valueint);
                bad = 1;
            }
    }
    /* returned: SDAR's canvas through its last unmasked position (an EOS
     * stop leaves the blocks after its block masked), Fast-dLLM v2's
     * tokens (cut after the first EOS), as tokbench's output: the prompt +
     * request_tokens */
    if (fails) {
        for (int i = P; i < P + req_tokens && !bad; i++)
            if (canvas[i] == p.mask_id) {
                fprintf(stderr, "%s: output position %d is still the mask token\n", name, i);
                bad = 1;
            }
        CHECK(!bad);
        if (!bad)
            fprintf(stderr, "%s: upstream's forwards until it %s, then %d without proposing the mask token\n",
                    name, !strcmp(fails, "IndexError") ? "fails" : "repeats one forever", st.mask_fallbacks);
        free(f);
        return bad;
    }
    int n_ret = cJSON_GetArraySize(ret), end = fd2 ? n_ret : 0;
    for (int i = 0; i < n_ret && !fd2; i++)
        if (cJSON_GetArrayItem(ret, i)->valueint != p.mask_id)
            end = i + 1;
    if (P + req_tokens != end) {
        fprintf(stderr, "%s: output ends at %d, upstream's at %d (its canvas %d)\n", name, P + req_tokens, end,
                n_ret);
        bad = 1;
    }
    for (int i = 0; i < end && i < L && !bad; i++)
        if (canvas[i] != cJSON_GetArrayItem(ret, i)->valueint) {
            fprintf(stderr, "%s: returned position %d: %d, upstream %d\n", name, i, canvas[i],
                    cJSON_GetArrayItem(ret, i)->valueint);
            bad = 1;
        }
    CHECK(!bad);
    if (!bad)
        fprintf(stderr, "%s: %d forwards, %d tokens out, as upstream\n", name, st.forwards, req_tokens);
    free(f);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_sampler_trace TRACES_JSON...\n");
        return 2;
    }
    for (int a = 1; a < argc; a++) {
        size_t len = 0;
        char *text = tb_read_file(argv[a], &len);
        cJSON *all = text ? cJSON_Parse(text) : NULL;
        CHECK(all != NULL);
        const cJSON *cases = cJSON_GetObjectItem(all, "cases");
        int n = 0;
        for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next, n++)
            check_case(c);
        CHECK(n >= 36);
        cJSON_Delete(all);
        free(text);
    }
    return check_done();
}
