/* folder.c — generation_config.json and tokenizer_config.json; see folder.h. */
#define _GNU_SOURCE
#include "folder.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "strmem.h"

/* A short rendering of a JSON value for "got ..." */
static int fail(const char *path, const char *field, const char *expected, const cJSON *got, char *err,
                size_t err_size)
{
    char g[64];
    tb_json_describe(got, g, sizeof g);
    snprintf(err, err_size, "%s: field %s: expected %s, got %s", path, field, expected, g);
    return -1;
}

/* dir/name parsed, into *out (NULL when the file does not exist); path
 * gets its name. 0, or -1 with err set. */
static int read_json(const char *dir, const char *name, char *path, size_t path_size, cJSON **out, char *err,
                     size_t err_size)
{
    *out = NULL;
    snprintf(path, path_size, "%s/%s", dir, name);
    size_t len;
    char *text = tb_read_file_max(path, TB_READ_MAX_CONFIG, &len);
    if (!text) {
        if (errno == ENOENT)
            return 0;
        char why[160];
        snprintf(err, err_size, "%s: %s", path, tb_read_file_why(errno, TB_READ_MAX_CONFIG, "a model's JSON file", why, sizeof why));
        return -1;
    }
    const char *end = NULL;
    size_t nul = strlen(text);
    cJSON *j = nul == len ? cJSON_ParseWithOpts(text, &end, 1) : NULL; /* cJSON would stop at a NUL */
    size_t at = nul != len ? nul : end ? (size_t)(end - text) : 0;
    free(text);
    if (!j) {
        snprintf(err, err_size, "%s: not valid JSON (at byte %zu)", path, at);
        return -1;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(err, err_size, "%s: expected a JSON object", path);
        return -1;
    }
    *out = j;
    return 0;
}

/* generation_config.json's eos_token_id: an id or a list of 1 to
 * TB_MAX_EOS, each inside the vocabulary; absent or null: none. */
static int read_eos(const char *path, const cJSON *gen, tb_model_config *cfg, char *err, size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id");
    char want[96];
    snprintf(want, sizeof want, "a token id in [0, %d) or a list of 1 to %d of them", cfg->vocab_size, TB_MAX_EOS);
    cfg->n_eos = 0;
    if (!v || cJSON_IsNull(v))
        return 0;
    const cJSON *one = v;
    int count = 1;
    if (cJSON_IsArray(v)) {
        count = cJSON_GetArraySize(v);
        if (count < 1 || count > TB_MAX_EOS)
            return fail(path, "eos_token_id", want, v, err, err_size);
        one = v->child;
    }
    for (int i = 0; i < count; i++, one = one->next) {
        double d = cJSON_IsNumber(one) ? one->valuedouble : -1;
        if (!cJSON_IsNumber(one) || d != floor(d) || d < 0 || d >= cfg->vocab_size)
            return fail(path, "eos_token_id", want, one, err, err_size);
        cfg->eos_ids[i] = (int32_t)d;
    }
    cfg->n_eos = count;
    return 0;
}

/* A token named by tokenizer_config.json's field (a string, or an
 * AddedToken object {"content": ...}): *name, NULL for null. 1 when the
 * field is there, 0 when absent, -1 with err set. */
static int token_field(const char *path, const cJSON *tc, const char *field, const char **name, char *err,
                       size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, field);
    *name = NULL;
    if (!v)
        return 0;
    if (cJSON_IsNull(v))
        return 1;
    const cJSON *s = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : v;
    if (!cJSON_IsString(s))
        return fail(path, field, "a token string, {\"content\": string} or null", v, err, err_size);
    *name = s->valuestring;
    return 1;
}

/* The id of the token tokenizer_config.json's field names, inside the
 * model's vocabulary; -1 with err set. */
static int32_t token_of(const char *path, const char *field, const char *name, const tb_tokenizer *tok,
                        const tb_model_config *cfg, char *err, size_t err_size)
{
    int32_t id = tb_tokenizer_token_id(tok, name);
    if (id < 0)
        snprintf(err, err_size, "%s: field %s: \"%.60s\" is not a token of tokenizer.json", path, field, name);
    else if (id >= cfg->vocab_size)
        snprintf(err, err_size, "%s: field %s: \"%.60s\" is token %d, outside the model's vocabulary (%d, config.json)",
                 path, field, name, id, cfg->vocab_size);
    return id >= 0 && id < cfg->vocab_size ? id : -1;
}

static int is_llama_class(const cJSON *tc)
{
    static const char *const names[] = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                        "CodeLlamaTokenizerFast"};
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(tc, "tokenizer_class");
    for (size_t i = 0; cJSON_IsString(cls) && i < TB_ARRAY_LEN(names); i++)
        if (strcmp(cls->valuestring, names[i]) == 0)
            return 1;
    return 0;
}

/* What the tokenizer puts before a text: a Llama class's add_bos_token
 * and bos_token, else the post_processor's template. */
static int read_bos(const char *path, const cJSON *tc, const tb_tokenizer *tok, tb_model_config *cfg, char *err,
                    size_t err_size)
{
    if (tc && is_llama_class(tc)) {
        int add = 1, add_eos = 0;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
        if (v && !cJSON_IsBool(v))
            return fail(path, "add_bos_token", "true or false", v, err, err_size);
        add = !v || cJSON_IsTrue(v);
        v = cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token");
        if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
            return fail(path, "add_eos_token", "true or false", v, err, err_size);
        add_eos = cJSON_IsTrue(v);
        if (add_eos)
            return fail(path, "add_eos_token", "false (an EOS after the prompt is not supported)", v, err, err_size);
        const char *name;
        int r = token_field(path, tc, "bos_token", &name, err, err_size);
        if (r < 0)
            return -1;
        if (r == 0)
            name = "<s>"; /* the Llama classes' default */
        cfg->prompt_bos = -1;
        if (add && name && (cfg->prompt_bos = token_of(path, "bos_token", name, tok, cfg, err, err_size)) < 0)
            return -1;
        return 0;
    }
    cfg->prompt_bos = tb_tokenizer_template_bos(tok);
    if (cfg->prompt_bos >= cfg->vocab_size) {
        snprintf(err, err_size,
                 "%.*s/tokenizer.json: post_processor: its template's BOS is token %d, outside the model's "
                 "vocabulary (%d, config.json)",
                 (int)(strrchr(path, '/') - path), path, cfg->prompt_bos, cfg->vocab_size);
        return -1;
    }
    return 0;
}

const char *tb_folder_mask_name(tb_arch arch)
{
    switch (arch) {
    case TB_ARCH_LLADA:
        return "<|mdm_mask|>";
    case TB_ARCH_SDAR:
        return "<|MASK|>";
    case TB_ARCH_FAST_DLLM_V2:
        return "|<MASK>|";
    default:
        return NULL;
    }
}

/* A diffusion model's mask when config.json names none: tokenizer_config's
 * mask_token, else the family's token in tokenizer.json. */
static int read_mask(const char *path, const cJSON *tc, const tb_tokenizer *tok, tb_model_config *cfg, char *err,
                     size_t err_size)
{
    if (!tb_arch_is_diffusion(cfg->arch) || (cfg->mask_id >= 0 && !cfg->mask_is_default))
        return 0;
    const char *name = NULL;
    if (tc && token_field(path, tc, "mask_token", &name, err, err_size) < 0)
        return -1;
    int32_t id = -1;
    if (name) {
        if ((id = token_of(path, "mask_token", name, tok, cfg, err, err_size)) < 0)
            return -1;
    } else if ((name = tb_folder_mask_name(cfg->arch)) && (id = tb_tokenizer_token_id(tok, name)) >= 0) {
        if (id >= cfg->vocab_size) {
            snprintf(err, err_size,
                     "%.*s/tokenizer.json: the mask token \"%s\" is token %d, outside the model's vocabulary (%d, "
                     "config.json)",
                     (int)(strrchr(path, '/') - path), path, name, id, cfg->vocab_size);
            return -1;
        }
    }
    if (id >= 0) {
        cfg->mask_id = id;
        cfg->mask_is_default = 0;
    }
    return 0;
}

int tb_folder_read(const char *dir, const tb_tokenizer *tok, tb_model_config *cfg, char *err, size_t err_size)
{
    char path[4096];
    cJSON *j = NULL;
    if (read_json(dir, "generation_config.json", path, sizeof path, &j, err, err_size) != 0)
        return -1;
    int rc = j ? read_eos(path, j, cfg, err, err_size) : 0;
    cJSON_Delete(j);
    if (rc != 0)
        return -1;
    if (!tok) { /* no text prompts: config.json's BOS for synthetic ones */
        cfg->prompt_bos = tb_config_default_bos(cfg);
        return 0;
    }
    if (read_json(dir, "tokenizer_config.json", path, sizeof path, &j, err, err_size) != 0)
        return -1;
    rc = read_bos(path, j, tok, cfg, err, err_size);
    if (rc == 0)
        rc = read_mask(path, j, tok, cfg, err, err_size);
    cJSON_Delete(j);
    return rc;
}

void tb_folder_no_mask(const char *dir, const tb_model_config *cfg, char *err, size_t err_size)
{
    const char *name = tb_folder_mask_name(cfg->arch);
    char tok[96] = "";
    if (name)
        snprintf(tok, sizeof tok, " and tokenizer.json no \"%s\"", name);
    snprintf(err, err_size,
             "%s: no mask token: config.json has no mask_token_id, tokenizer_config.json no mask_token%s (set the "
             "diffusion backend's mask_id)",
             dir, tok);
}
