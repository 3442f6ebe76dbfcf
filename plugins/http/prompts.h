/* prompts.h — synthetic prompts of an exact token length for a server.
 *
 * With the server's tokenizer.json, a prompt is a seeded sequence of
 * vocabulary words of the form " word" (a space, ASCII letters) that each
 * encode to exactly one id on their own; byte-level pre-tokenizers split
 * text at those spaces, so P such words encode to exactly P tokens (checked
 * and, for odd vocabularies, corrected by re-encoding). Without a
 * tokenizer, prompts are P common English words that are one token in the
 * usual BPE vocabularies: the length is then approximate, and the server's
 * usage.prompt_tokens says by how much. */
#ifndef TB_HTTP_PROMPTS_H
#define TB_HTTP_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef struct tb_prompt_vocab tb_prompt_vocab;

/* The candidate words of `tok` (NULL: the built-in word list). NULL when
 * out of memory. */
tb_prompt_vocab *tb_prompt_vocab_new(const tb_tokenizer *tok);
void tb_prompt_vocab_free(tb_prompt_vocab *v);
/* How many candidate words it has. */
size_t tb_prompt_vocab_size(const tb_prompt_vocab *v);

/* A prompt of `tokens` tokens drawn from `seed` (malloc'd UTF-8). With a
 * tokenizer, *counted is its length as that tokenizer encodes it (equal
 * to `tokens` unless the vocabulary made that impossible); without, the
 * number of words. */
char *tb_prompt_synth(const tb_prompt_vocab *v, uint32_t tokens, uint64_t seed, int64_t *counted);

#endif
