/* test_dflash.c — DFlash's drafter (plugins/engine/cpu/dflash.h).
 *
 * Without arguments: the published config layout (config.c; the default
 * target-layer spread against the ids of published configs), its refusals
 * naming the field, and the drafter's cache on presets (tiny-llama with
 * tiny-dflash): appends in pieces and in chunks equal one append, a
 * rollback restores the draft, a batch of slots equals each slot alone,
 * calls that do not fit are refused.
 *
 * With the golden folder (tests/data/golden-dflash, made on the GPU
 * machine by tools/make_dflash_golden.py) as argument: the engine loads
 * the target and the drafter in their published layouts; the target's
 * hidden states at the drafter's target layers (tb_cpu_forward_hidden)
 * equal the golden features; each drafting step of upstream's loop, over
 * one cache, gives the golden logits within LOGIT_TOL and the same draft;
 * so does the step with the whole context at once. Exits 77 (skipped)
 * while the folder is absent. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "cpu_forward.h"
#include "dflash.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#define LOGIT_TOL 1e-4
#define FEAT_TOL 1e-4
#define SAME_TOL 1e-5 /* one computation split differently (GEMM row blocking) */

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        d = isnan(e) ? INFINITY : e > d ? e : d;
    }
    return d;
}

/* ------------------------------------------------------------ config */

/* The keys of a published drafter config (SpecForge's qwen3-32b-dflash.json
 * and z-lab's Hugging Face configs), with a small vocabulary; %s is the
 * dflash_config object, %d num_hidden_layers, %s layer_types. */
static int parse(const char *dflash_config, int n_layers, const char *extra, tb_model_config *cfg, char *err,
                 size_t err_size)
{
    char json[4096];
    snprintf(json, sizeof json,
             "{\"architectures\": [\"DFlashDraftModel\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
             " \"auto_map\": {\"AutoModel\": \"dflash.DFlashDraftModel\"}, \"block_size\": 16,"
             " \"bos_token_id\": 1, \"eos_token_id\": 2, \"dflash_config\": %s, \"dtype\": \"bfloat16\","
             " \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 512, \"intermediate_size\": 1024,"
             " \"max_position_embeddings\": 40960, \"max_window_layers\": %d, \"model_type\": \"qwen3\","
             " \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"num_hidden_layers\": %d,"
             " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000, \"rope_scaling\": null, \"sliding_window\": null,"
             " \"use_sliding_window\": false, \"tie_word_embeddings\": false, \"use_cache\": true,"
             " \"vocab_size\": 1000%s}",
             dflash_config, n_layers, n_layers, extra);
    return tb_config_parse(json, "drafter/config.json", cfg, err, err_size);
}

static void check_ids(int n_target, int n_layers, const int *want, int n_want)
{
    char dc[64], extra[64], err[512];
    snprintf(dc, sizeof dc, "{\"mask_token_id\": 999}");
    snprintf(extra, sizeof extra, ", \"num_target_layers\": %d", n_target);
    tb_model_config cfg;
    int rc = parse(dc, n_layers, extra, &cfg, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    CHECK(cfg.n_target_ids == n_want);
    for (int i = 0; i < n_want && i < cfg.n_target_ids; i++)
        CHECK(cfg.target_layer_ids[i] == want[i]);
}

static void check_refused(const char *dc, int n_layers, const char *extra, const char *field)
{
    tb_model_config cfg;
    char err[512];
    CHECK(parse(dc, n_layers, extra, &cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "drafter/config.json");
    CHECK_CONTAINS(err, field);
}

static void test_config(void)
{
    tb_model_config cfg;
    char err[512];
    int rc = parse("{\"mask_token_id\": 999, \"target_layer_ids\": [1, 8, 14]}", 3,
                   ", \"num_target_layers\": 64, \"layer_types\": [\"full_attention\", \"full_attention\","
                   " \"full_attention\"]",
                   &cfg, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    CHECK(cfg.arch == TB_ARCH_DFLASH);
    CHECK_STR(cfg.arch_name, "DFlashDraftModel");
    CHECK(cfg.block_size == 16 && cfg.mask_id == 999 && cfg.n_target_layers == 64);
    CHECK(cfg.n_target_ids == 3 && cfg.target_layer_ids[0] == 1 && cfg.target_layer_ids[2] == 14);
    CHECK(cfg.qk_norm == 1 && cfg.head_dim == 128 && !cfg.qkv_bias && cfg.n_kv_heads == 2);
    CHECK(!tb_arch_is_diffusion(cfg.arch));

    /* upstream's default spread, against published configs' lists: SpecForge
     * qwen3-32b (64 target layers, 10 drafter layers), longcat (28, 5),
     * and 64 target layers with 5 drafter layers */
    check_ids(64, 10, (const int[]){1, 8, 14, 21, 28, 34, 41, 48, 54, 61}, 10);
    check_ids(28, 5, (const int[]){1, 7, 13, 19, 25}, 5);
    check_ids(64, 5, (const int[]){1, 16, 31, 46, 61}, 5);
    check_ids(36, 1, (const int[]){18}, 1);

    check_refused("null", 1, ", \"num_target_layers\": 36", "field dflash_config:");
    check_refused("{\"target_layer_ids\": [1]}", 1, "", "dflash_config.mask_token_id");
    check_refused("{\"mask_token_id\": 1000, \"target_layer_ids\": [1]}", 1, "", "dflash_config.mask_token_id");
    check_refused("{\"mask_token_id\": 5, \"target_layer_ids\": [1, 36]}", 1, ", \"num_target_layers\": 36",
                  "dflash_config.target_layer_ids");
    check_refused("{\"mask_token_id\": 5, \"target_layer_ids\": []}", 1, "", "dflash_config.target_layer_ids");
    check_refused("{\"mask_token_id\": 5}", 1, "", "num_target_layers");
    check_refused("{\"mask_token_id\": 5, \"target_layer_ids\": [1]}", 1, ", \"layer_types\": [\"sliding_attention\"]",
                  "layer_types");
    check_refused("{\"mask_token_id\": 5, \"mask_token_id\": 6}", 1, "", "dflash_config.mask_token_id");
    check_refused("{\"mask_token_id\": 5}", 1, ", \"num_target_layers\": 36, \"block_size\": 1", "block_size");
}

/* ------------------------------------------------------------ presets */

static void fill(float *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 4.0f;
    }
}

static void test_presets(void)
{
    tb_model t, d;
    char err[512];
    CHECK(tb_model_preset("tiny-llama", 7, &t, err, sizeof err) == 0);
    CHECK(tb_dflash_preset("tiny-dflash", 8, &d, err, sizeof err) == 0);
    CHECK(tb_dflash_preset("tiny-llama", 8, &(tb_model){0}, err, sizeof err) == -1);
    CHECK(tb_model_preset("tiny-dflash", 8, &(tb_model){0}, err, sizeof err) == -1);
    CHECK(tb_dflash_check_target(&d.cfg, &t.cfg, err, sizeof err) == 0);
    tb_model_config bad = t.cfg;
    bad.vocab_size = 500;
    CHECK(tb_dflash_check_target(&d.cfg, &bad, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "vocab_size");
    bad = t.cfg, bad.n_layers = 3;
    CHECK(tb_dflash_check_target(&d.cfg, &bad, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "num_target_layers");
    bad = t.cfg, bad.hidden_size = 32;
    CHECK(tb_dflash_check_target(&d.cfg, &bad, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "hidden_size");

    int F = 2 * 64, V = 512, Lb = d.cfg.block_size, N = 300;
    float *feat = malloc((size_t)N * F * sizeof(float));
    fill(feat, (size_t)N * F, 3);
    tb_dflash_state a, b;
    CHECK(tb_dflash_init(&a, &d, &t, 2, 600, err, sizeof err) == 0);
    CHECK(tb_dflash_init(&b, &d, &t, 2, 600, err, sizeof err) == 0);
    float *la = malloc((size_t)2 * Lb * V * sizeof(float)), *lb = malloc((size_t)2 * Lb * V * sizeof(float));
    int32_t da[2 * 16], db[2 * 16], anchors[2] = {17, 301};
    int s0 = 0, s1 = 1;

    /* one append of 20 rows == 7 + 1 + 12 */
    CHECK(tb_dflash_append(&a, 0, feat, 20) == 0);
    CHECK(tb_dflash_append(&b, 0, feat, 7) == 0);
    CHECK(tb_dflash_append(&b, 0, feat + 7 * F, 1) == 0);
    CHECK(tb_dflash_append(&b, 0, feat + 8 * F, 12) == 0);
    CHECK(tb_dflash_ctx_len(&b, 0) == 20);
    CHECK(tb_dflash_draft(&a, &s0, 1, anchors, Lb, la, da) == 0);
    CHECK(tb_dflash_draft(&b, &s0, 1, anchors, Lb, lb, db) == 0);
    CHECK(max_diff(la, lb, (size_t)Lb * V) <= SAME_TOL);
    /* the drafts are the argmax of rows 1 .. L - 1 */
    for (int r = 1; r < Lb; r++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            best = la[(size_t)r * V + v] > la[(size_t)r * V + best] ? v : best;
        CHECK(da[r - 1] == best);
    }
    /* the block's rows see each other: a different anchor changes every row */
    int32_t other = 18;
    CHECK(tb_dflash_draft(&b, &s0, 1, &other, Lb, lb, NULL) == 0);
    for (int r = 1; r < Lb; r++)
        CHECK(max_diff(la + (size_t)r * V, lb + (size_t)r * V, (size_t)V) > 1e-6);
    /* one context row more changes the logits; a rollback restores them exactly */
    CHECK(tb_dflash_append(&a, 0, feat + 20 * F, 5) == 0);
    CHECK(tb_dflash_draft(&a, &s0, 1, anchors, Lb, lb, NULL) == 0);
    CHECK(max_diff(la, lb, (size_t)Lb * V) > 1e-6);
    CHECK(tb_dflash_rollback(&a, 0, 26) == -1);
    CHECK(tb_dflash_rollback(&a, 0, 20) == 0);
    CHECK(tb_dflash_draft(&a, &s0, 1, anchors, Lb, lb, db) == 0);
    CHECK(max_diff(la, lb, (size_t)Lb * V) == 0);
    CHECK(memcmp(da, db, (size_t)(Lb - 1) * sizeof *da) == 0);
    /* a shorter block: its rows are the first rows of a block of that length */
    CHECK(tb_dflash_draft(&a, &s0, 1, anchors, 4, lb, NULL) == 0);

    /* a batch of two slots == each alone; slot 1 holds 300 rows (chunks of 256) */
    CHECK(tb_dflash_append(&a, 1, feat, N) == 0);
    int slots[2] = {0, 1};
    CHECK(tb_dflash_draft(&a, slots, 2, anchors, Lb, la, da) == 0);
    CHECK(tb_dflash_draft(&a, &s1, 1, anchors + 1, Lb, lb + (size_t)Lb * V, db + Lb - 1) == 0);
    CHECK(tb_dflash_draft(&a, &s0, 1, anchors, Lb, lb, db) == 0);
    CHECK(max_diff(la, lb, (size_t)2 * Lb * V) <= SAME_TOL);
    CHECK(tb_dflash_append(&b, 1, feat, 150) == 0 && tb_dflash_append(&b, 1, feat + 150 * F, 150) == 0);
    CHECK(tb_dflash_draft(&b, &s1, 1, anchors + 1, Lb, lb, NULL) == 0);
    CHECK(max_diff(la + (size_t)Lb * V, lb, (size_t)Lb * V) <= SAME_TOL);

    /* refused */
    CHECK(tb_dflash_append(&a, 1, feat, 301) == -1); /* past max_ctx */
    CHECK(tb_dflash_append(&a, 2, feat, 1) == -1);
    CHECK(tb_dflash_draft(&a, &s0, 1, anchors, Lb + 1, la, NULL) == -1);
    CHECK(tb_dflash_draft(&a, &s0, 1, anchors, 1, la, NULL) == -1);
    int dup[2] = {1, 1};
    CHECK(tb_dflash_draft(&a, dup, 2, anchors, Lb, la, NULL) == -1);
    int32_t bad_tok = V;
    CHECK(tb_dflash_draft(&a, &s0, 1, &bad_tok, Lb, la, NULL) == -1);

    tb_dflash_free(&a);
    tb_dflash_free(&b);
    free(feat);
    free(la);
    free(lb);
    tb_model_free(&t);
    tb_model_free(&d);
}

/* ------------------------------------------------------------ golden */

/* A flat JSON array of numbers into dst (n of them); -1 when the count differs. */
static int read_floats(const cJSON *arr, float *dst, size_t n)
{
    size_t i = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next) {
        if (i == n || !cJSON_IsNumber(e))
            return -1;
        dst[i++] = (float)e->valuedouble;
    }
    return i == n ? 0 : -1;
}

static int read_ints(const cJSON *arr, int32_t *dst, int n)
{
    int i = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next) {
        if (i == n || !cJSON_IsNumber(e))
            return -1;
        dst[i++] = e->valueint;
    }
    return i == n ? 0 : -1;
}

/* The golden drafter's weights under a config.json changed by `edit`, in a
 * temporary folder: tb_dflash_load's message must name `want`. */
static void check_broken(const char *drafter_dir, void (*edit)(cJSON *), const char *want)
{
    char tmp[] = "/tmp/tb_dflash_XXXXXX", path[8192], src[8192], err[512];
    if (!mkdtemp(tmp)) {
        CHECK(0);
        return;
    }
    snprintf(path, sizeof path, "%s/config.json", drafter_dir);
    char *text = tb_read_file(path, NULL);
    cJSON *cfg = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(cfg != NULL);
    if (cfg) {
        edit(cfg);
        char *out = cJSON_Print(cfg);
        snprintf(path, sizeof path, "%s/config.json", tmp);
        FILE *f = fopen(path, "w");
        CHECK(f && out && fputs(out, f) >= 0);
        if (f)
            fclose(f);
        free(out);
        cJSON_Delete(cfg);
        snprintf(src, sizeof src, "%s/model.safetensors", drafter_dir);
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        if (src[0] != '/') { /* a relative folder: the link from tmp needs the absolute path */
            char *abs = realpath(src, NULL);
            snprintf(src, sizeof src, "%s", abs ? abs : "");
            free(abs);
        }
        CHECK(symlink(src, path) == 0);
        tb_model m;
        snprintf(path, sizeof path, "%s", tmp);
        CHECK(tb_dflash_load(path, &m, err, sizeof err) == -1);
        CHECK_CONTAINS(err, want);
        fprintf(stderr, "refused as expected: %s\n", err);
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        unlink(path);
        snprintf(path, sizeof path, "%s/config.json", tmp);
        unlink(path);
    }
    rmdir(tmp);
}

static void two_ids(cJSON *cfg)
{
    cJSON *dc = cJSON_GetObjectItem(cfg, "dflash_config");
    cJSON_ReplaceItemInObject(dc, "target_layer_ids", cJSON_CreateIntArray((const int[]){0, 1}, 2));
}

static void no_dflash_config(cJSON *cfg)
{
    cJSON_DeleteItemFromObject(cfg, "dflash_config");
}

static void wider_mlp(cJSON *cfg)
{
    cJSON_ReplaceItemInObject(cfg, "intermediate_size", cJSON_CreateNumber(100));
}

static void check_broken_drafter(const char *drafter_dir)
{
    check_broken(drafter_dir, two_ids, "fc.weight: shape");
    check_broken(drafter_dir, no_dflash_config, "config.json: field dflash_config");
    check_broken(drafter_dir, wider_mlp, "mlp.gate_proj.weight: shape");
}

static int test_golden(const char *dir)
{
    char path[8192], err[512];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "skip: %s absent (make it with tools/make_dflash_golden.py on the GPU machine)\n", path);
        return 77;
    }
    char *text = tb_read_file(path, NULL);
    cJSON *all = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(all != NULL);
    if (!all)
        return check_done();

    tb_model t, d, tmp;
    snprintf(path, sizeof path, "%s/target", dir);
    int rc = tb_model_load(path, &t, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    CHECK(tb_dflash_load(path, &tmp, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "DFlashDraftModel");
    snprintf(path, sizeof path, "%s/drafter", dir);
    int rc2 = tb_dflash_load(path, &d, err, sizeof err);
    if (rc2)
        fprintf(stderr, "%s\n", err);
    CHECK(rc2 == 0);
    CHECK(tb_model_load(path, &tmp, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "DFlash drafter");
    if (rc || rc2) {
        cJSON_Delete(all);
        return check_done();
    }
    check_broken_drafter(path);
    const tb_model_config *dc = &d.cfg;
    const cJSON *ids = cJSON_GetObjectItem(all, "target_layer_ids");
    CHECK(dc->arch == TB_ARCH_DFLASH && dc->block_size == cJSON_GetObjectItem(all, "block_size")->valueint);
    CHECK(dc->mask_id == cJSON_GetObjectItem(all, "mask_token_id")->valueint);
    CHECK(dc->n_target_ids == cJSON_GetArraySize(ids));

    int T = cJSON_GetArraySize(cJSON_GetObjectItem(all, "tokens")), H = t.cfg.hidden_size, V = t.cfg.vocab_size;
    int F = dc->n_target_ids * H, Lb = dc->block_size;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    float *feat = malloc((size_t)T * F * sizeof(float));
    CHECK(read_ints(cJSON_GetObjectItem(all, "tokens"), tok, T) == 0);
    CHECK(read_floats(cJSON_GetObjectItem(all, "features"), feat, (size_t)T * F) == 0);

    /* the capture path: the target's residual stream after layer id */
    tb_cpu_state st;
    CHECK(tb_cpu_state_init(&st, &t, 1, T, T, 1, err, sizeof err) == 0);
    double fd = 0;
    for (int i = 0; i < dc->n_target_ids; i++) {
        tb_cpu_state_reset(&st);
        CHECK(tb_cpu_forward_hidden(&st, tok, 1, T, 1, dc->target_layer_ids[i] + 1) == 0);
        for (int p = 0; p < T; p++) {
            double e = max_diff(st.x + (size_t)p * H, feat + (size_t)p * F + (size_t)i * H, (size_t)H);
            fd = e > fd ? e : fd;
        }
    }
    fprintf(stderr, "target features: max |diff| %.3g\n", fd);
    CHECK(fd <= FEAT_TOL);
    tb_cpu_state_free(&st);

    /* upstream's loop over one cache */
    tb_dflash_state ds;
    CHECK(tb_dflash_init(&ds, &d, &t, 1, T, err, sizeof err) == 0);
    float *want = malloc((size_t)Lb * V * sizeof(float)), *got = malloc((size_t)Lb * V * sizeof(float));
    int32_t wdraft[64], gdraft[64];
    int slot = 0, n_steps = 0;
    for (const cJSON *s = cJSON_GetObjectItem(all, "steps")->child; s; s = s->next, n_steps++) {
        int start = cJSON_GetObjectItem(s, "start")->valueint, c0 = cJSON_GetObjectItem(s, "ctx0")->valueint;
        CHECK(tb_dflash_ctx_len(&ds, 0) == c0);
        CHECK(tb_dflash_append(&ds, 0, feat + (size_t)c0 * F, start - c0) == 0);
        CHECK(read_floats(cJSON_GetObjectItem(s, "logits"), want, (size_t)Lb * V) == 0);
        CHECK(read_ints(cJSON_GetObjectItem(s, "draft"), wdraft, Lb - 1) == 0);
        CHECK(tb_dflash_draft(&ds, &slot, 1, &tok[start], Lb, got, gdraft) == 0);
        double e = max_diff(got, want, (size_t)Lb * V);
        fprintf(stderr, "step at %d (context from %d): max |logit diff| %.3g\n", start, c0, e);
        CHECK(e <= LOGIT_TOL);
        CHECK(memcmp(gdraft, wdraft, (size_t)(Lb - 1) * sizeof *gdraft) == 0);
    }
    CHECK(n_steps >= 3);
    /* the whole context at once (a fresh cache) */
    const cJSON *fr = cJSON_GetObjectItem(all, "fresh");
    int start = cJSON_GetObjectItem(fr, "start")->valueint;
    CHECK(tb_dflash_rollback(&ds, 0, 0) == 0);
    CHECK(tb_dflash_append(&ds, 0, feat, start) == 0);
    CHECK(read_floats(cJSON_GetObjectItem(fr, "logits"), want, (size_t)Lb * V) == 0);
    CHECK(read_ints(cJSON_GetObjectItem(fr, "draft"), wdraft, Lb - 1) == 0);
    CHECK(tb_dflash_draft(&ds, &slot, 1, &tok[start], Lb, got, gdraft) == 0);
    CHECK(max_diff(got, want, (size_t)Lb * V) <= LOGIT_TOL);
    CHECK(memcmp(gdraft, wdraft, (size_t)(Lb - 1) * sizeof *gdraft) == 0);

    tb_dflash_free(&ds);
    free(want);
    free(got);
    free(tok);
    free(feat);
    tb_model_free(&t);
    tb_model_free(&d);
    cJSON_Delete(all);
    return check_done();
}

/* ------------------------------------------------------------ trained */

/* The trained drafter of models/small-llama (tools/train_spec.py) in the
 * engine, a smoke test: upstream's greedy loop over the target's own
 * greedy text (the target's greedy continuation of each prompt stands in
 * for its verification); the mean accepted length a verification
 * (accepted drafts + 1) at least MIN_ACCEPT. Its power is low: this
 * drafter's acceptance moves little when its features are wired wrong
 * (measured: 1.69 right, 1.61 with context keys rotated one position off,
 * 1.71 with the feature layers reversed; 1.19, failing, without any
 * context: TB_DFLASH_NO_CONTEXT=1), so the wiring is the golden test's to
 * hold; this one holds that the trained drafter loads and uses its
 * context in the engine. */
#define MIN_ACCEPT 1.5
static int test_trained(const char *target_dir, const char *drafter_dir)
{
    static const char *prompts[] = {
        "The capital of France is",
        "Once upon a time, there was a little girl who",
        "Question: What is 12 plus 7?\nAnswer:",
        "def add(a, b):\n    return",
    };
    char err[512], path[8192];
    tb_model t, d;
    tb_tokenizer *tok = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", target_dir);
    int rc = tb_model_load(target_dir, &t, err, sizeof err);
    if (rc == 0 && (rc = tb_dflash_load(drafter_dir, &d, err, sizeof err)) != 0)
        tb_model_free(&t);
    if (rc == 0 && (rc = tb_tokenizer_load(path, &tok, err, sizeof err)) != 0) {
        tb_model_free(&t);
        tb_model_free(&d);
    }
    if (rc) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
        return check_done();
    }
    CHECK(tb_dflash_check_target(&d.cfg, &t.cfg, err, sizeof err) == 0);
    int no_context = getenv("TB_DFLASH_NO_CONTEXT") && atoi(getenv("TB_DFLASH_NO_CONTEXT"));
    enum { MAXP = 64, GEN = 48, T = MAXP + GEN };
    int H = t.cfg.hidden_size, V = t.cfg.vocab_size, n_ids = d.cfg.n_target_ids, F = n_ids * H;
    int Lb = d.cfg.block_size;
    tb_cpu_state st;
    tb_dflash_state ds;
    CHECK(tb_cpu_state_init(&st, &t, 1, T, T, 1, err, sizeof err) == 0);
    CHECK(tb_dflash_init(&ds, &d, &t, 1, T, err, sizeof err) == 0);
    float *logits = malloc((size_t)V * sizeof(float)), *feat = malloc((size_t)T * F * sizeof(float));
    int32_t seq[T], draft[64];
    long verifications = 0, accepted = 0;
    for (size_t p = 0; p < sizeof prompts / sizeof prompts[0]; p++) {
        int P = (int)tb_tokenizer_encode(tok, prompts[p], strlen(prompts[p]), seq, MAXP);
        CHECK(P > 0 && P <= MAXP);
        if (P <= 0 || P > MAXP)
            continue;
        /* the target's greedy text */
        tb_cpu_state_reset(&st);
        CHECK(tb_cpu_forward(&st, seq, 1, P, 1, 0, logits) == 0);
        for (int i = 0; i < GEN; i++) {
            int best = 0;
            for (int v = 1; v < V; v++)
                best = logits[v] > logits[best] ? v : best;
            seq[P + i] = best;
            if (i + 1 < GEN)
                CHECK(tb_cpu_forward(&st, &seq[P + i], 1, 1, 1, 0, logits) == 0);
        }
        /* its features at the drafter's layers, every position */
        int n = P + GEN;
        for (int k = 0; k < n_ids; k++) {
            tb_cpu_state_reset(&st);
            CHECK(tb_cpu_forward_hidden(&st, seq, 1, n, 1, d.cfg.target_layer_ids[k] + 1) == 0);
            for (int r = 0; r < n; r++)
                memcpy(feat + (size_t)r * F + (size_t)k * H, st.x + (size_t)r * H, (size_t)H * sizeof(float));
        }
        /* upstream's loop: anchor at start, drafts checked against the text */
        int slot = 0, start = P, held = 0;
        CHECK(tb_dflash_rollback(&ds, 0, 0) == 0);
        while (start + Lb <= n) {
            if (!no_context) {
                CHECK(tb_dflash_append(&ds, 0, feat + (size_t)held * F, start - held) == 0);
                held = start;
            }
            CHECK(tb_dflash_draft(&ds, &slot, 1, &seq[start], Lb, NULL, draft) == 0);
            int a = 0;
            while (a < Lb - 1 && draft[a] == seq[start + 1 + a])
                a++;
            verifications++;
            accepted += a + 1;
            start += a + 1;
        }
    }
    double mean = verifications ? (double)accepted / verifications : 0;
    fprintf(stderr, "trained drafter: %ld verifications, mean accepted length %.2f (bound %.2f)%s\n", verifications,
            mean, MIN_ACCEPT, no_context ? ", no context" : "");
    CHECK(mean >= MIN_ACCEPT);
    free(logits);
    free(feat);
    tb_dflash_free(&ds);
    tb_cpu_state_free(&st);
    tb_tokenizer_free(tok);
    tb_model_free(&t);
    tb_model_free(&d);
    return check_done();
}

int main(int argc, char **argv)
{
    if (argc > 2)
        return test_trained(argv[1], argv[2]);
    if (argc > 1)
        return test_golden(argv[1]);
    test_config();
    test_presets();
    return check_done();
}
