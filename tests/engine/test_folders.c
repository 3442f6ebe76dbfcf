/* test_folders.c — published model folders load as transformers reads
 * them (plugins/engine/format/folder.h): the Fast-dLLM v2, SDAR and
 * LLaDA-8B-Instruct layouts of tests/data/folders (tools/make_folder_fixtures.py:
 * the published files' keys on tiny weights) through tb_load and through
 * the diffusion backend (plugins/diffusion/diffusion.c linked in): their
 * mask token, stop ids and prompt BOS, describe(), a text prompt
 * generated. Then each rule on its own, on copies of those folders with
 * one file changed: the mask from tokenizer_config.json's mask_token or the
 * family's token, the BOS from the post_processor or a Llama class's
 * add_bos_token, generation_config.json's stop ids, and every refusal.
 *
 *   test_folders FOLDERS_DIR   (tests/data/folders) */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tokbench/backend.h>

#include "backend_common.h"
#include "check.h"
#include "folder.h"
#include "model.h"
#include "plugin_host.h"
#include "strmem.h"

static const char *root;
static char err[1024];

/* ------------------------------------------------ copies with a change */

static char tmp[256];

static void put(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A fresh copy of fixture `name` (its JSON files) in tmp. */
static void copy_fixture(const char *name)
{
    static int n;
    snprintf(tmp, sizeof tmp, "/tmp/tb_folders_%d_%d", (int)getpid(), n++);
    CHECK(mkdir(tmp, 0700) == 0);
    const char *files[] = {"config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s/%s", root, name, files[i]);
        size_t len;
        char *s = tb_read_file(p, &len);
        CHECK(s != NULL);
        if (s)
            put(tmp, files[i], s);
        free(s);
    }
}

static void drop(const char *file)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, file);
    CHECK(unlink(p) == 0);
}

/* Set (value JSON text) or, value NULL, delete key in tmp's file. */
static void edit(const char *file, const char *key, const char *value)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, file);
    size_t len;
    char *s = tb_read_file(p, &len);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    CHECK(j != NULL);
    if (!j)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        CHECK(v != NULL);
        cJSON_AddItemToObject(j, key, v);
    }
    char *out = cJSON_Print(j);
    put(tmp, file, out);
    free(out);
    cJSON_Delete(j);
}

static void cleanup(void)
{
    const char *files[] = {"config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
        unlink(p);
    }
    rmdir(tmp);
}

/* tmp's config.json, tokenizer.json (when there) and tb_folder_read, as
 * tb_load does without the weights. 0 or -1 with err. */
static int read_tmp(tb_model_config *cfg)
{
    char p[512];
    err[0] = '\0';
    snprintf(p, sizeof p, "%s/config.json", tmp);
    if (tb_config_load(p, cfg, err, sizeof err) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/tokenizer.json", tmp);
    tb_tokenizer *tok = NULL;
    if (access(p, F_OK) == 0 && tb_tokenizer_load(p, &tok, err, sizeof err) != 0)
        return -1;
    int rc = tb_folder_read(tmp, tok, cfg, err, sizeof err);
    tb_tokenizer_free(tok);
    if (rc != 0)
        fprintf(stderr, "  (%s)\n", err);
    return rc;
}

/* ------------------------------------------------ the published layouts */

/* The fixtures' ids (tools/make_folder_fixtures.py): Qwen's added tokens
 * end at 255, so <|endoftext|> (151643 published) is 256 - count. */
#define FAST_ENDOFTEXT (256 - 23)
#define SDAR_ENDOFTEXT (256 - 27)

static void check_loaded(const char *name, int32_t mask, const int32_t *eos, int n_eos, int32_t bos)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    tb_loaded l;
    err[0] = '\0';
    tb_status st = tb_load(dir, 1, 0, 0, 1, 0, &l, err, sizeof err);
    if (st != TB_OK)
        fprintf(stderr, "%s: %s\n", name, err);
    CHECK(st == TB_OK);
    if (st != TB_OK)
        return;
    const tb_model_config *c = &l.model.cfg;
    fprintf(stderr, "%s: mask %d, BOS %d, %d stop ids\n", name, c->mask_id, c->prompt_bos, c->n_eos);
    CHECK(l.tok != NULL && c->mask_id == mask && c->mask_is_default == 0 && c->prompt_bos == bos);
    CHECK(c->n_eos == n_eos);
    for (int i = 0; i < n_eos && i < c->n_eos; i++)
        CHECK(c->eos_ids[i] == eos[i]);
    /* a text prompt starts with the BOS, or with its text */
    const char *texts[] = {"Hello world"};
    int32_t **ids = NULL;
    int64_t *lens = NULL;
    size_t longest;
    CHECK(tb_tokenize_prompts(&l, texts, 1, &ids, &lens, &longest, err, sizeof err) == TB_OK);
    int32_t alone[16];
    int64_t n = tb_tokenizer_encode(l.tok, texts[0], strlen(texts[0]), alone, 16);
    CHECK(n > 0 && n < 16);
    if (ids && n > 0 && n < 16) {
        CHECK(lens[0] == n + (bos >= 0));
        CHECK(memcmp(ids[0] + (bos >= 0), alone, (size_t)n * sizeof *alone) == 0);
        CHECK(bos < 0 || ids[0][0] == bos);
    }
    tb_free_prompts(ids, lens, 1);
    /* a synthetic prompt starts with the same BOS, and holds no other */
    int32_t synth[8];
    tb_synth_prompt(c, l.tok, c->mask_id, 7, 0, synth, 8);
    CHECK(bos < 0 || synth[0] == bos);
    for (int i = bos >= 0; i < 8; i++)
        CHECK(synth[i] != c->bos_id && synth[i] != bos && synth[i] != c->mask_id);
    tb_loaded_free(&l);
}

static void test_published_layouts(void)
{
    /* Fast-dLLM v2: no mask_token_id, "|<MASK>|" the last added token;
     * generation_config.json [<|im_end|>, <|endoftext|>]; no BOS though
     * config.json names one */
    int32_t fast_eos[] = {FAST_ENDOFTEXT + 2, FAST_ENDOFTEXT};
    check_loaded("fast-dllm-v2", 255, fast_eos, 2, -1);
    /* SDAR: its mask_token_id; stop ids [<|im_end|>, <|endoftext|>] where
     * config.json has <|endoftext|> alone */
    int32_t sdar_eos[] = {SDAR_ENDOFTEXT + 2, SDAR_ENDOFTEXT};
    check_loaded("sdar", 255, sdar_eos, 2, -1);
    /* LLaDA-8B-Instruct: no bos_token_id, yet its tokenizer's template
     * puts <|startoftext|> first */
    int32_t llada_eos[] = {508};
    check_loaded("llada", 510, llada_eos, 1, 507);

    /* no tokenizer.json (a golden block-diffusion folder): config.json's
     * BOS (1, not an EOS) starts synthetic prompts */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/../golden/block-diffusion/sdar-tiny", root);
    tb_loaded l;
    CHECK(tb_load(dir, 1, 0, 0, 1, 0, &l, err, sizeof err) == TB_OK);
    CHECK(l.tok == NULL && l.model.cfg.prompt_bos == 1 && tb_prompt_bos(&l.model.cfg) == 1);
    int32_t synth[8];
    tb_synth_prompt(&l.model.cfg, NULL, 250, 7, 0, synth, 8);
    CHECK(synth[0] == 1);
    tb_loaded_free(&l);
    /* presets likewise: Llama 3's BOS; none where the BOS is the EOS */
    tb_model_config p;
    CHECK(tb_preset_config("llama-3-8b", &p, err, sizeof err) == 0 && p.prompt_bos == 128000);
    CHECK(tb_preset_config("sdar-8b", &p, err, sizeof err) == 0 && p.bos_id == 151643 && p.prompt_bos == -1);
}

/* The diffusion backend on each layout: create() with its defaults (no
 * mask_id), describe(), one text prompt generated. */
static void test_backend(const char *name, const char *sampler, uint32_t max_new, int32_t mask, int bos)
{
    const tb_backend_ops *ops = tokbench_backend_entry();
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"sampler", sampler}};
    tb_option_value v[32];
    uint32_t nv = test_options(ops, set, 3, v, 32);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    void *ctx = NULL;
    err[0] = '\0';
    tb_status st = ops->create(&test_host, dir, v, nv, &ctx, err, sizeof err);
    if (st != TB_OK)
        fprintf(stderr, "%s: create: %s\n", name, err);
    CHECK(st == TB_OK);
    if (st != TB_OK)
        return;
    cJSON *d = cJSON_Parse(ops->describe(ctx));
    CHECK(d != NULL);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "mask_id");
    CHECK(cJSON_IsNumber(m) && m->valueint == mask);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "prompt_bos")) == bos);
    cJSON_Delete(d);
    const char *prompts[] = {"What is 2+3?"};
    tb_request_result rr[1];
    memset(rr, 0, sizeof rr);
    tb_request rq = {.struct_size = sizeof rq, .n_requests = 1, .max_new_tokens = max_new, .batch = 1,
                     .prompt_text = prompts, .options = v, .n_options = nv};
    tb_result res = {.struct_size = sizeof res, .n_requests = 1, .requests = rr};
    st = ops->generate(ctx, &rq, &res);
    if (st != TB_OK)
        fprintf(stderr, "%s: generate: %s\n", name, ops->last_error(ctx));
    CHECK(st == TB_OK && rr[0].status == TB_OK && rr[0].n_output_tokens > 0);
    ops->destroy(ctx);
}

/* Without a mask token anywhere, create() says where it looked; the
 * mask_id option still serves. */
static void test_no_mask(void)
{
    copy_fixture("fast-dllm-v2");
    edit("tokenizer.json", "added_tokens", "[]");
    char target[600], link_path[512];
    snprintf(target, sizeof target, "%s/fast-dllm-v2/model.safetensors", root);
    char *real = realpath(target, NULL);
    CHECK(real != NULL);
    snprintf(link_path, sizeof link_path, "%s/model.safetensors", tmp);
    CHECK(real && symlink(real, link_path) == 0);
    free(real);
    const tb_backend_ops *ops = tokbench_backend_entry();
    for (int with = 0; with < 2; with++) {
        test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"mask_id", with ? "200" : "-1"}};
        tb_option_value v[32];
        uint32_t nv = test_options(ops, set, 3, v, 32);
        void *ctx = NULL;
        err[0] = '\0';
        tb_status st = ops->create(&test_host, tmp, v, nv, &ctx, err, sizeof err);
        if (with) {
            CHECK(st == TB_OK);
        } else {
            CHECK(st == TB_ERR_MODEL);
            CHECK_CONTAINS(err, "no mask token: config.json has no mask_token_id, tokenizer_config.json no "
                                "mask_token and tokenizer.json no \"|<MASK>|\"");
            CHECK_CONTAINS(err, "mask_id");
        }
        if (ctx)
            ops->destroy(ctx);
    }
    unlink(link_path);
    cleanup();
}

/* ------------------------------------------------ each rule */

static void test_mask_rules(void)
{
    tb_model_config c;
    /* LLaDA without mask_token_id: its "<|mdm_mask|>" */
    copy_fixture("llada");
    edit("config.json", "mask_token_id", NULL);
    CHECK(read_tmp(&c) == 0 && c.mask_id == 510);
    /* config.json first */
    edit("config.json", "mask_token_id", "509");
    CHECK(read_tmp(&c) == 0 && c.mask_id == 509);
    cleanup();

    /* SDAR: tokenizer_config.json's mask_token before the family's name */
    copy_fixture("sdar");
    edit("config.json", "mask_token_id", NULL);
    CHECK(read_tmp(&c) == 0 && c.mask_id == 255);
    edit("tokenizer_config.json", "mask_token", "{\"content\": \"<|fim_pad|>\"}");
    CHECK(read_tmp(&c) == 0 && c.mask_id == SDAR_ENDOFTEXT + 19);
    edit("tokenizer_config.json", "mask_token", NULL);
    CHECK(read_tmp(&c) == 0 && c.mask_id == 255); /* "<|MASK|>" */
    edit("tokenizer_config.json", "mask_token", "\"<|nope|>\"");
    CHECK(read_tmp(&c) == -1);
    CHECK_CONTAINS(err, "tokenizer_config.json: field mask_token: \"<|nope|>\" is not a token of tokenizer.json");
    /* no tokenizer.json: no mask, and no error before the backend's */
    edit("tokenizer_config.json", "mask_token", NULL);
    drop("tokenizer.json");
    CHECK(read_tmp(&c) == 0 && c.mask_id == -1);
    cleanup();

    /* Fast-dLLM v2 at its published vocabulary: generate()'s 151665 when
     * nothing names one; the tokenizer's token before it */
    copy_fixture("fast-dllm-v2");
    edit("config.json", "vocab_size", "152064");
    CHECK(read_tmp(&c) == 0 && c.mask_id == 255 && c.mask_is_default == 0);
    drop("tokenizer.json");
    CHECK(read_tmp(&c) == 0 && c.mask_id == 151665 && c.mask_is_default == 1);
    cleanup();
}

static void test_bos_rules(void)
{
    tb_model_config c;
    copy_fixture("llada");
    /* the post_processor decides: no template, no BOS */
    edit("tokenizer.json", "post_processor",
         "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true}");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == -1);
    /* ... and config.json's bos_token_id plays no part */
    edit("config.json", "bos_token_id", "507");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == -1);
    /* a template alone, outside a Sequence */
    edit("tokenizer.json", "post_processor",
         "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|startoftext|>\", "
         "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": "
         "{\"<|startoftext|>\": {\"id\": \"<|startoftext|>\", \"ids\": [507], \"tokens\": [\"<|startoftext|>\"]}}}");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == 507);
    /* a PreTrainedTokenizerFast's add_bos_token (false here) changes nothing */
    edit("tokenizer_config.json", "add_bos_token", "true");
    edit("tokenizer.json", "post_processor", "null");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == -1);

    /* a Llama class: add_bos_token and bos_token decide, whatever the template */
    edit("tokenizer_config.json", "tokenizer_class", "\"LlamaTokenizerFast\"");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == 507);
    edit("tokenizer_config.json", "add_bos_token", NULL); /* the class's default: true */
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == 507);
    edit("tokenizer_config.json", "bos_token", "{\"__type\": \"AddedToken\", \"content\": \"<|eot_id|>\"}");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == 509);
    edit("tokenizer_config.json", "bos_token", "null");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == -1);
    edit("tokenizer_config.json", "bos_token", NULL); /* the class's default "<s>", not a token here */
    CHECK(read_tmp(&c) == -1);
    CHECK_CONTAINS(err, "tokenizer_config.json: field bos_token: \"<s>\" is not a token of tokenizer.json");
    edit("tokenizer_config.json", "bos_token", "\"<|startoftext|>\"");
    edit("tokenizer_config.json", "add_bos_token", "false");
    edit("tokenizer.json", "post_processor",
         "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|startoftext|>\", "
         "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": "
         "{\"<|startoftext|>\": {\"id\": \"<|startoftext|>\", \"ids\": [507], \"tokens\": [\"<|startoftext|>\"]}}}");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == -1);
    edit("tokenizer_config.json", "add_bos_token", "\"yes\"");
    CHECK(read_tmp(&c) == -1);
    CHECK_CONTAINS(err, "tokenizer_config.json: field add_bos_token: expected true or false, got \"yes\"");
    edit("tokenizer_config.json", "add_bos_token", "true");
    edit("tokenizer_config.json", "add_eos_token", "true");
    CHECK(read_tmp(&c) == -1);
    CHECK_CONTAINS(err, "field add_eos_token: expected false (an EOS after the prompt is not supported)");
    edit("tokenizer_config.json", "add_eos_token", NULL);

    /* no tokenizer.json: config.json's BOS, unless it is an EOS */
    drop("tokenizer.json");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == 507);
    edit("generation_config.json", "eos_token_id", "[508, 507]");
    CHECK(read_tmp(&c) == 0 && c.prompt_bos == -1);
    cleanup();

    /* a template's BOS outside the model's vocabulary */
    copy_fixture("llada");
    edit("config.json", "vocab_size", "500");
    edit("config.json", "embedding_size", "500");
    edit("config.json", "mask_token_id", "1");
    edit("config.json", "eos_token_id", "2");
    edit("generation_config.json", "eos_token_id", "2");
    CHECK(read_tmp(&c) == -1);
    CHECK_CONTAINS(err, "tokenizer.json: post_processor: its template's BOS is token 507, outside the model's "
                        "vocabulary (500, config.json)");
    cleanup();
}

/* The tokenizer.json templates that add what a prompt cannot hold. */
static void test_templates(void)
{
    tb_model_config c;
    static const struct {
        const char *post, *needle;
    } bad[] = {
        {"{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2], \"cls\": [\"<s>\", 0]}",
         "post_processor.type: \"RobertaProcessing\" not supported"},
        {"{\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
         "{\"SpecialToken\": {\"id\": \"<|endoftext|>\", \"type_id\": 0}}], \"special_tokens\": {\"<|endoftext|>\": "
         "{\"id\": \"<|endoftext|>\", \"ids\": [508], \"tokens\": [\"<|endoftext|>\"]}}}",
         "post_processor.single[1]: \"<|endoftext|>\" after the text is not supported"},
        {"{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|startoftext|>\", "
         "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<|startoftext|>\": "
         "{\"id\": \"<|startoftext|>\", \"ids\": [507, 509], \"tokens\": [\"a\", \"b\"]}}}",
         "post_processor.single: 2 tokens before the text; only one (a BOS) is supported"},
        {"{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|x|>\", \"type_id\": 0}}, "
         "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {}}",
         "post_processor.special_tokens: \"<|x|>\" expected"},
        {"{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": \"BertProcessing\"}]}",
         "post_processor.processors[1].type: \"BertProcessing\" not supported"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        copy_fixture("llada");
        edit("tokenizer.json", "post_processor", bad[i].post);
        CHECK(read_tmp(&c) == -1);
        CHECK_CONTAINS(err, "/tokenizer.json: ");
        CHECK_CONTAINS(err, bad[i].needle);
        cleanup();
    }
}

static void test_stop_ids(void)
{
    tb_model_config c;
    copy_fixture("sdar");
    /* without generation_config.json, config.json's */
    drop("generation_config.json");
    CHECK(read_tmp(&c) == 0 && c.n_eos == 1 && c.eos_ids[0] == SDAR_ENDOFTEXT);
    /* with one: its list, or its single id, or none */
    put(tmp, "generation_config.json", "{\"eos_token_id\": 7}");
    CHECK(read_tmp(&c) == 0 && c.n_eos == 1 && c.eos_ids[0] == 7);
    put(tmp, "generation_config.json", "{\"do_sample\": true}");
    CHECK(read_tmp(&c) == 0 && c.n_eos == 0);
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"eos_token_id\": \"<|im_end|>\"}", "got \"<|im_end|>\""},
        {"{\"eos_token_id\": [1, 256]}", "got 256"},
        {"{\"eos_token_id\": []}", "got an array"},
        {"{\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}", "got an array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        put(tmp, "generation_config.json", bad[i].json);
        CHECK(read_tmp(&c) == -1);
        CHECK_CONTAINS(err, "generation_config.json: field eos_token_id: expected a token id in [0, 256) or a list "
                            "of 1 to 8 of them");
        CHECK_CONTAINS(err, bad[i].needle);
    }
    put(tmp, "generation_config.json", "{\"eos_token_id\": 1,}");
    CHECK(read_tmp(&c) == -1);
    CHECK_CONTAINS(err, "generation_config.json: not valid JSON");
    put(tmp, "generation_config.json", "{}");
    put(tmp, "tokenizer_config.json", "[]");
    CHECK(read_tmp(&c) == -1);
    CHECK_CONTAINS(err, "tokenizer_config.json: expected a JSON object");
    cleanup();
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_folders FOLDERS_DIR\n");
        return 2;
    }
    root = argv[1];
    test_published_layouts();
    test_backend("fast-dllm-v2", "fast_dllm_v2", 32, 255, 0);
    test_backend("sdar", "sdar_static", 8, 255, 0);
    test_backend("llada", "low_confidence", 8, 510, 1);
    test_no_mask();
    test_mask_rules();
    test_bos_rules();
    test_templates();
    test_stop_ids();
    return check_done();
}
