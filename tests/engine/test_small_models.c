/* test_small_models.c — the trained small models shipped in models/
 * (models/small-llama, models/small-llada, made by tools/train_small.py)
 * through the engine, against tests/data/golden-small/expected.json, which
 * the same script computed with the tokenizers library, transformers'
 * LlamaForCausalLM and the LLaDA reference forward of
 * tools/make_diffusion_golden.py (float32 on the CPU, the bf16 weights as
 * saved upcast to float32):
 *
 *   - our tokenizer gives the library's ids for every prompt;
 *   - Llama: the logits of the prompt's last 4 positions, then 12 greedy
 *     tokens through the KV cache (EOS does not stop them);
 *   - LLaDA: the bidirectional logits of every position of prompt + 8 mask
 *     tokens, and a low-confidence generation (gen 16, one block) whose
 *     final canvas must equal the reference's.
 *   - SDAR (models/small-sdar, tools/train_block.py, against
 *     tests/data/golden-small/sdar.json, which that script computed with
 *     its own PyTorch Qwen3 forward): the block-causal logits of prompt +
 *     masks (the prompt's blocks prefilled, the last block over their exact
 *     cache), and sdar_static / sdar_dynamic generations whose final
 *     canvases and forward counts must equal the reference sampler's.
 *
 * Logits must agree within LOGIT_TOL x max |logit|. Both sides upcast the
 * same bf16 weights and compute in float32, so the measured error is far
 * below that (it is printed). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_engine.h"
#include "cpu_forward.h"
#include "model.h"
#include "generate.h"
#include "sampler.h"
#include "sampling.h"
#include "tokenizer.h"
#include "util.h"

#define LOGIT_TOL 2e-3
#define GREEDY_N 12
#define N_MASKS 8

static char src_root[4096];

static int32_t *int_array(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int i = 0; i < *n; i++)
        v[i] = (int32_t)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

/* Tokenize `prompt` with our tokenizer and compare with the golden ids;
 * returns the golden ids (so later checks run on the reference input). */
static int32_t *check_ids(const tb_tokenizer *tok, const char *name, const cJSON *c, int *n)
{
    const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt"));
    int32_t *want = int_array(cJSON_GetObjectItem(c, "ids"), n);
    CHECK(prompt != NULL);
    if (!prompt || !tok)
        return want;
    int32_t got[512];
    int64_t k = tb_tokenizer_encode(tok, prompt, strlen(prompt), got, 512);
    int same = k == *n;
    for (int i = 0; same && i < *n; i++)
        same = got[i] == want[i];
    if (!same)
        fprintf(stderr, "%s: \"%s\": %lld ids, not the tokenizers library's %d\n", name, prompt, (long long)k, *n);
    CHECK(same);
    return want;
}

/* max |ours - theirs| over rows[r] (golden) vs logits + r * V; *max_ref
 * gets max |theirs| over the same values. */
static double row_diff(const float *logits, int V, const cJSON *row, double *max_ref)
{
    double diff = 0;
    CHECK(cJSON_GetArraySize(row) == V);
    for (int v = 0; v < V && v < cJSON_GetArraySize(row); v++) {
        double r = cJSON_GetArrayItem(row, v)->valuedouble, d = fabs(r - logits[v]);
        if (fabs(r) > *max_ref)
            *max_ref = fabs(r);
        if (d > diff || isnan(d))
            diff = isnan(d) ? INFINITY : d;
    }
    return diff;
}

static double worst_rel; /* over every comparison, for the report line */

static void check_tol(const char *what, double diff, double max_ref)
{
    double rel = diff / (max_ref > 0 ? max_ref : 1);
    fprintf(stderr, "%s: max |logit| %.4f, max diff %.3g (%.3g of max; tolerance %.0e)\n", what, max_ref, diff, rel,
            LOGIT_TOL);
    if (rel > worst_rel || isnan(rel))
        worst_rel = isnan(rel) ? INFINITY : rel;
    CHECK(rel <= LOGIT_TOL);
}

static int load(const char *dir_name, tb_model *m, tb_tokenizer **tok)
{
    char dir[4200], path[4300], err[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", src_root, dir_name);
    int rc = tb_model_load(dir, m, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", dir, err);
    CHECK(rc == 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    *tok = NULL;
    if (tb_tokenizer_load(path, tok, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
    }
    if (rc == 0)
        CHECK(m->cfg.random_weights == 0);
    return rc;
}

static void check_llama(const cJSON *cases, int32_t eos)
{
    tb_model m;
    tb_tokenizer *tok;
    if (load("small-llama", &m, &tok) != 0) {
        tb_tokenizer_free(tok);
        return;
    }
    CHECK(m.cfg.arch == TB_ARCH_LLAMA);
    CHECK(m.cfg.n_eos == 1 && m.cfg.eos_ids[0] == eos);
    int V = m.cfg.vocab_size;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        char name[96];
        snprintf(name, sizeof name, "small-llama \"%s\"",
                 cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt")));
        int n, ng, np;
        int32_t *ids = check_ids(tok, name, c, &n);
        int32_t *want = int_array(cJSON_GetObjectItem(c, "greedy_new_ids"), &ng);
        int32_t *pos = int_array(cJSON_GetObjectItem(c, "positions"), &np);
        const cJSON *rows = cJSON_GetObjectItem(c, "logits");
        CHECK(ng == GREEDY_N && np == cJSON_GetArraySize(rows));

        tb_cpu_state st;
        char err[512];
        int ok = tb_cpu_state_init(&st, &m, 1, n + ng, n, 1, err, sizeof err) == 0;
        CHECK(ok);
        if (!ok) {
            fprintf(stderr, "%s: %s\n", name, err);
        } else {
            float *logits = malloc((size_t)n * V * sizeof(float));
            CHECK(tb_cpu_forward(&st, ids, 1, n, 1, 1, logits) == 0);
            double diff = 0, max_ref = 0;
            for (int k = 0; k < np; k++) {
                CHECK(pos[k] >= 0 && pos[k] < n);
                if (pos[k] >= 0 && pos[k] < n) {
                    double d = row_diff(logits + (size_t)pos[k] * V, V, cJSON_GetArrayItem(rows, k), &max_ref);
                    diff = d > diff || isnan(d) ? d : diff;
                }
            }
            check_tol(name, diff, max_ref);

            /* greedy through the KV cache, from the prompt's last logits */
            int32_t next = tb_argmax(logits + (size_t)(n - 1) * V, V);
            int same = 1;
            for (int i = 0; i < ng && same; i++) {
                if (next != want[i]) {
                    fprintf(stderr, "%s: greedy token %d: got %d, transformers %d\n", name, i, next, want[i]);
                    same = 0;
                    break;
                }
                if (i + 1 < ng) {
                    CHECK(tb_cpu_forward(&st, &next, 1, 1, 1, 0, logits) == 0);
                    next = tb_argmax(logits, V);
                }
            }
            CHECK(same);
            free(logits);
            tb_cpu_state_free(&st);
        }
        free(ids);
        free(want);
        free(pos);
    }
    tb_tokenizer_free(tok);
    tb_model_free(&m);
}

static void check_llada(const cJSON *g, int32_t eos, int32_t mask_id)
{
    tb_model m;
    tb_tokenizer *tok;
    if (load("small-llada", &m, &tok) != 0) {
        tb_tokenizer_free(tok);
        return;
    }
    CHECK(m.cfg.arch == TB_ARCH_LLADA);
    CHECK(m.cfg.mask_id == mask_id);
    CHECK(m.cfg.n_eos == 1 && m.cfg.eos_ids[0] == eos);
    if (tok)
        CHECK(tb_tokenizer_token_id(tok, "<|mdm_mask|>") == mask_id);
    int V = m.cfg.vocab_size;
    char err[512];
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "forward"))
    {
        char name[96];
        snprintf(name, sizeof name, "small-llada \"%s\" + %d masks",
                 cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt")), N_MASKS);
        int n, L;
        int32_t *ids = check_ids(tok, name, c, &n);
        int32_t *canvas = int_array(cJSON_GetObjectItem(c, "canvas"), &L);
        CHECK(L == n + N_MASKS);
        for (int i = 0; i < L; i++)
            CHECK(canvas[i] == (i < n ? ids[i] : mask_id));
        const cJSON *rows = cJSON_GetObjectItem(c, "logits");
        CHECK(cJSON_GetArraySize(rows) == L);
        tb_dllm_cpu e;
        tb_dllm_cpu_init(&e, &m, 1);
        int ok = tb_dllm_cpu_reserve(&e, 1, L, err, sizeof err) == 0 &&
                 tb_dllm_cpu_logits(&e, canvas, 1, L, 0, L, L) == 0;
        CHECK(ok);
        if (ok) {
            double diff = 0, max_ref = 0;
            for (int t = 0; t < L && t < cJSON_GetArraySize(rows); t++) {
                double d = row_diff(e.scratch + (size_t)t * V, V, cJSON_GetArrayItem(rows, t), &max_ref);
                diff = d > diff || isnan(d) ? d : diff;
            }
            check_tol(name, diff, max_ref);
        }
        tb_dllm_cpu_free(&e);
        free(ids);
        free(canvas);
    }

    /* one low-confidence generation: the final canvas */
    const cJSON *gen = cJSON_GetObjectItem(g, "generate");
    int n, L;
    int32_t *ids = check_ids(tok, "small-llada generate", gen, &n);
    int32_t *final = int_array(cJSON_GetObjectItem(gen, "final"), &L);
    tb_dllm_params p = {.sampler = TB_DLLM_LOW_CONFIDENCE,
                        .gen_length = cJSON_GetObjectItem(gen, "gen_length")->valueint,
                        .block_length = cJSON_GetObjectItem(gen, "block_length")->valueint,
                        .steps = cJSON_GetObjectItem(gen, "steps")->valueint,
                        .temperature = 0,
                        .top_p = 1,
                        .eps = 1e-3,
                        .mask_id = mask_id};
    CHECK(L == n + p.gen_length);
    int32_t *canvas = malloc((size_t)L * sizeof *canvas);
    for (int i = 0; i < L; i++)
        canvas[i] = i < n ? ids[i] : mask_id;
    tb_dllm_cpu e;
    tb_dllm_cpu_init(&e, &m, 1);
    CHECK(tb_dllm_cpu_reserve(&e, 1, L, err, sizeof err) == 0);
    tb_dllm_engine eng = tb_dllm_cpu_engine(&e);
    tb_dllm_stats st;
    int rc = tb_dllm_generate(&eng, &p, canvas, 1, n, 0, NULL, &st, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "small-llada generate: %s\n", err);
    CHECK(rc == 0);
    CHECK(st.steps == p.steps);
    int same = 1;
    for (int i = 0; i < L; i++)
        if (canvas[i] != final[i]) {
            fprintf(stderr, "small-llada generate: position %d: got %d, reference %d\n", i, canvas[i], final[i]);
            same = 0;
            break;
        }
    CHECK(same);
    if (tok && same) {
        char text[256];
        tb_tokenizer_decode(tok, canvas + n, (size_t)p.gen_length, text, sizeof text);
        fprintf(stderr, "small-llada generate: \"%s\" -> \"%s\"\n",
                cJSON_GetStringValue(cJSON_GetObjectItem(gen, "prompt")), text);
    }
    free(canvas);
    free(ids);
    free(final);
    tb_dllm_cpu_free(&e);
    tb_tokenizer_free(tok);
    tb_model_free(&m);
}

static void check_sdar(const cJSON *g)
{
    tb_model m;
    tb_tokenizer *tok;
    if (load("small-sdar", &m, &tok) != 0) {
        tb_tokenizer_free(tok);
        return;
    }
    int32_t mask_id = (int32_t)cJSON_GetObjectItem(g, "mask_id")->valuedouble;
    int32_t eos = (int32_t)cJSON_GetObjectItem(g, "eos_id")->valuedouble;
    int bs = cJSON_GetObjectItem(g, "block")->valueint, V = m.cfg.vocab_size;
    CHECK(m.cfg.arch == TB_ARCH_SDAR && m.cfg.qk_norm);
    CHECK(m.cfg.mask_id == mask_id && m.cfg.block_size == bs);
    CHECK(m.cfg.n_eos == 1 && m.cfg.eos_ids[0] == eos);
    char err[512];
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "forward"))
    {
        char name[96];
        snprintf(name, sizeof name, "small-sdar \"%s\" + masks, block-causal",
                 cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt")));
        int T, slot = 0;
        int32_t *ids = int_array(cJSON_GetObjectItem(c, "input_ids"), &T);
        const cJSON *rows = cJSON_GetObjectItem(c, "logits");
        CHECK(T % bs == 0 && T > bs && cJSON_GetArraySize(rows) == T);
        tb_cpu_state st;
        int ok = tb_cpu_state_init(&st, &m, 1, T, T, 1, err, sizeof err) == 0;
        CHECK(ok);
        if (ok) {
            float *logits = malloc((size_t)T * V * sizeof(float));
            /* the first T - bs positions block-causal, the last block over their cache */
            CHECK(tb_cpu_forward_rows(&st, ids, &slot, 1, 0, T - bs, T - bs, bs, 0, T - bs, logits) == 0);
            CHECK(tb_cpu_forward_rows(&st, ids + T - bs, &slot, 1, T - bs, bs, T, 0, 0, bs,
                                      logits + (size_t)(T - bs) * V) == 0);
            double diff = 0, max_ref = 0;
            for (int t = 0; t < T && t < cJSON_GetArraySize(rows); t++) {
                double d = row_diff(logits + (size_t)t * V, V, cJSON_GetArrayItem(rows, t), &max_ref);
                diff = d > diff || isnan(d) ? d : diff;
            }
            check_tol(name, diff, max_ref);
            free(logits);
            tb_cpu_state_free(&st);
        }
        free(ids);
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "generate"))
    {
        const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt"));
        const cJSON *th = cJSON_GetObjectItem(c, "threshold");
        int n, L;
        int32_t *ids = check_ids(tok, "small-sdar generate", c, &n);
        int32_t *final = int_array(cJSON_GetObjectItem(c, "final"), &L);
        tb_dllm_params p = {.sampler = cJSON_IsNumber(th) ? TB_DLLM_SDAR_DYNAMIC : TB_DLLM_SDAR_STATIC,
                            .gen_length = cJSON_GetObjectItem(c, "gen_length")->valueint,
                            .block_length = bs,
                            .steps = cJSON_GetObjectItem(c, "steps")->valueint,
                            .threshold = cJSON_IsNumber(th) ? th->valuedouble : 0,
                            .top_p = 1,
                            .eps = 1e-3,
                            .mask_id = mask_id,
                            .eos_ids = m.cfg.eos_ids,
                            .n_eos = m.cfg.n_eos,
                            /* the reference's rule: no store after the last
                             * block (the default runs it, as SDAR's loop) */
                            .skip_final_store = 1};
        CHECK(L == tb_dllm_canvas_length(&p, n));
        int32_t *canvas = malloc((size_t)L * sizeof *canvas);
        for (int i = 0; i < L; i++)
            canvas[i] = i < n ? ids[i] : mask_id;
        tb_dllm_cpu e;
        tb_dllm_cpu_init(&e, &m, 1);
        CHECK(tb_dllm_cpu_reserve(&e, 1, L, err, sizeof err) == 0);
        tb_dllm_engine eng = tb_dllm_cpu_engine(&e);
        tb_dllm_stats st = {0};
        int rc = tb_dllm_generate(&eng, &p, canvas, 1, n, 0, NULL, &st, err, sizeof err);
        if (rc != 0)
            fprintf(stderr, "small-sdar generate: %s\n", err);
        CHECK(rc == 0);
        int same = 1;
        for (int i = 0; i < L && same; i++)
            if (canvas[i] != final[i]) {
                fprintf(stderr, "small-sdar \"%s\": position %d: got %d, reference %d\n", prompt, i, canvas[i],
                        final[i]);
                same = 0;
            }
        CHECK(same);
        CHECK(st.forwards == cJSON_GetObjectItem(c, "forwards")->valueint);
        if (tok && same) {
            char text[256];
            tb_tokenizer_decode(tok, canvas + n, (size_t)p.gen_length, text, sizeof text);
            fprintf(stderr, "small-sdar %s %d steps%s: \"%s\" -> \"%s\", %d forwards\n",
                    tb_choice_name(tb_dllm_sampler_choices, p.sampler), p.steps, cJSON_IsNumber(th) ? ", threshold" : "", prompt,
                    text, st.forwards);
        }
        free(canvas);
        free(ids);
        free(final);
        tb_dllm_cpu_free(&e);
    }
    tb_tokenizer_free(tok);
    tb_model_free(&m);
}

/* tests/data/golden-small/NAME parsed, or NULL (a failed check). */
static cJSON *read_golden(const char *name)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/tests/data/golden-small/%s", src_root, name);
    char *text = tb_read_file(path, NULL);
    CHECK(text != NULL);
    if (!text) {
        fprintf(stderr, "%s missing\n", path);
        return NULL;
    }
    cJSON *all = cJSON_Parse(text);
    free(text);
    CHECK(all != NULL);
    return all;
}

int main(void)
{
    const char *src = getenv("TB_SOURCE_ROOT");
    snprintf(src_root, sizeof src_root, "%s", src ? src : ".");
    cJSON *all = read_golden("expected.json"), *sdar = read_golden("sdar.json");
    if (sdar)
        check_sdar(sdar);
    cJSON_Delete(sdar);
    if (!all)
        return check_done();
    int32_t eos = (int32_t)cJSON_GetObjectItem(all, "eos_id")->valuedouble;
    int32_t mask_id = (int32_t)cJSON_GetObjectItem(all, "mask_id")->valuedouble;
    check_llama(cJSON_GetObjectItem(all, "llama"), eos);
    check_llada(cJSON_GetObjectItem(all, "llada"), eos, mask_id);
    fprintf(stderr, "worst logit error: %.3g of max |logit|\n", worst_rel);
    cJSON_Delete(all);
    return check_done();
}
