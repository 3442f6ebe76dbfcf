/* folder.h — what a Hugging Face model folder says beyond config.json, read
 * as transformers reads it: the stop ids, the token a prompt starts with,
 * and a diffusion model's mask token. tb_load (backend_common.h) applies
 * it to every folder it loads, after config.json and tokenizer.json.
 *
 * Stop ids (cfg->eos_ids): generation_config.json's eos_token_id (an id or
 *   a list) when the folder has that file, replacing config.json's, as
 *   transformers' generate() stops at model.generation_config's ids alone;
 *   a generation_config.json without one leaves none.
 * The prompt's BOS (cfg->prompt_bos): with a tokenizer.json, what the
 *   tokenizer adds before a text. When tokenizer_config.json's
 *   tokenizer_class is a Llama one (LlamaTokenizer[Fast],
 *   CodeLlamaTokenizer[Fast]: transformers 4 rebuilds their template from
 *   it; transformers 5 does so for any class setting add_bos_token),
 *   its add_bos_token (absent: true) decides, the token its bos_token names
 *   (absent: "<s>"; null: none) being the BOS; otherwise the tokenizer.json
 *   post_processor's template does (tokenizer.h's
 *   tb_tokenizer_template_bos). config.json's bos_token_id plays no part.
 *   Without a tokenizer.json: tb_config_default_bos (config.h).
 * The mask token (diffusion models, cfg->mask_id): config.json's
 *   mask_token_id; else tokenizer_config.json's mask_token; else the
 *   family's published token in tokenizer.json (tb_folder_mask_name);
 *   else the family's generate() default (tb_config_default_mask); else
 *   none (-1): the diffusion backend then needs its mask_id option.
 *
 * Every id must lie inside the model's vocabulary (config.json's). */
#ifndef TB_ENGINE_FOLDER_H
#define TB_ENGINE_FOLDER_H

#include <stddef.h>

#include "config.h"
#include "tokenizer.h"

/* Apply dir's generation_config.json and tokenizer_config.json, and tok
 * (dir's tokenizer.json, NULL when it has none), to cfg (parsed from dir's
 * config.json). A missing file is no error. 0, or -1 with "DIR/FILE: field
 * NAME: what is wrong" in err. */
int tb_folder_read(const char *dir, const tb_tokenizer *tok, tb_model_config *cfg, char *err, size_t err_size);

/* The mask token's name in the family's published tokenizer: LLaDA
 * "<|mdm_mask|>", SDAR "<|MASK|>", Fast-dLLM v2 "|<MASK>|"; NULL for the
 * others. */
const char *tb_folder_mask_name(tb_arch arch);

/* The message for a diffusion model of folder dir left without a mask
 * token: where it looked, and the option that sets one. */
void tb_folder_no_mask(const char *dir, const tb_model_config *cfg, char *err, size_t err_size);

#endif
