/* tokenizer.h — Hugging Face tokenizer.json, byte-level BPE (the Llama 3 /
 * Qwen2 / GPT-2 family): vocab; merges written as "a b" strings or
 * ["a", "b"] pairs; ignore_merges; added and special tokens split out
 * before pre-tokenization; Split pre-tokenizers (regex run with PCRE2,
 * UTF-8, JIT) and ByteLevel; the byte-to-unicode map; decode; and what the
 * post_processor adds to a text (one token before it at most: a BOS).
 *
 * encode() must equal tokenizers' Tokenizer.encode(text,
 * add_special_tokens=False).ids on any input, invalid UTF-8 included
 * (tests/data/tokenizer golden files). */
#ifndef TB_ENGINE_TOKENIZER_H
#define TB_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_tokenizer tb_tokenizer;

/* Load; 0 or -1 with "PATH: what is wrong" in err ("PATH: out of memory"
 * when an allocation failed). */
int tb_tokenizer_load(const char *path, tb_tokenizer **out, char *err, size_t err_size);
void tb_tokenizer_free(tb_tokenizer *t);

/* What encode and decode return when out of memory. */
#define TB_TOKENIZER_NO_MEMORY (-2)

/* Encode len bytes of text into ids[cap]; returns the token count (may
 * exceed cap: nothing past cap is written), -1 on internal failure (a
 * character outside the vocabulary without an unk token, a regex error),
 * or TB_TOKENIZER_NO_MEMORY. */
int64_t tb_tokenizer_encode(const tb_tokenizer *t, const char *text, size_t len, int32_t *ids,
                            size_t cap);
/* Decode ids into out[cap] (NUL-terminated when cap > 0; skips nothing:
 * special tokens decode to their text); returns the byte length without
 * the NUL (may be >= cap), -1 for an id outside the vocabulary, or
 * TB_TOKENIZER_NO_MEMORY. */
int64_t tb_tokenizer_decode(const tb_tokenizer *t, const int32_t *ids, size_t n, char *out,
                            size_t cap);

size_t tb_tokenizer_vocab_size(const tb_tokenizer *t); /* max id + 1 */
/* Whether id is an added token marked "special" (BOS, EOS, a mask, a
 * template's markers): what skip_special_tokens leaves out of a text. */
int tb_tokenizer_is_special(const tb_tokenizer *t, int32_t id);
/* The bytes one id stands for (what decode joins before its lossy UTF-8
 * cleanup: a byte-level token may be part of a character, so two ids that
 * decode alike can differ here): *len bytes, NUL-terminated; NULL for an
 * id outside the vocabulary. Allocates nothing. */
const char *tb_tokenizer_id_bytes(const tb_tokenizer *t, int32_t id, size_t *len);
/* The token the post_processor puts before a single text (a
 * TemplateProcessing whose "single" template is [SpecialToken, $A], alone
 * or in a Sequence; its id as the template's special_tokens give it), or
 * -1 when it adds nothing (none, ByteLevel, a template of $A alone).
 * Loading refuses other processors and templates that add more (a token
 * after the text, two before it). encode() never adds it. */
int32_t tb_tokenizer_template_bos(const tb_tokenizer *t);
/* id of a token string (vocab or added), or -1. */
int32_t tb_tokenizer_token_id(const tb_tokenizer *t, const char *token);

#endif
