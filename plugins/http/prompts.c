/* prompts.c — see prompts.h. */
#include "prompts.h"

#include <stdlib.h>
#include <string.h>

#include "arrivals.h"

/* One token each in GPT-2, Llama 3, Qwen2 and similar BPE vocabularies. */
static const char *const common_words[] = {
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " was", " with",
    " be", " by", " on", " not", " he", " this", " are", " or", " his", " from", " at", " which",
    " but", " have", " an", " they", " you", " were", " her", " she", " there", " been", " one",
    " all", " we", " their", " has", " would", " when", " if", " so", " no", " will", " more",
    " can", " out", " up", " about", " said", " time", " people", " new", " first", " two",
    " like", " make", " good", " world", " day", " way", " year", " work", " life", " part",
};
#define N_COMMON (sizeof common_words / sizeof *common_words)

struct tb_prompt_vocab {
    const tb_tokenizer *tok; /* NULL: common_words */
    int32_t *ids;            /* candidate ids (tokenizer mode) */
    size_t n;
    int clean;               /* candidates are " letters" words */
};

static int is_word(const char *s, int64_t n)
{
    if (n < 2 || s[0] != ' ')
        return 0;
    for (int64_t i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

/* Ids whose text encodes back to that one id; `words`: only " letters".
 * How many, or -1 when out of memory. */
static int64_t collect(tb_prompt_vocab *v, int words)
{
    size_t V = tb_tokenizer_vocab_size(v->tok), n = 0;
    char text[256];
    for (size_t id = 0; id < V; id++) {
        int32_t i32 = (int32_t)id, back[2];
        int64_t len = tb_tokenizer_decode(v->tok, &i32, 1, text, sizeof text);
        if (len == TB_TOKENIZER_NO_MEMORY)
            return -1;
        if (len <= 0 || len >= (int64_t)sizeof text || strlen(text) != (size_t)len)
            continue;
        if (words ? !is_word(text, len) : strchr(text, '<') != NULL) /* '<': keep off special-looking text */
            continue;
        int64_t k = tb_tokenizer_encode(v->tok, text, (size_t)len, back, 2);
        if (k == TB_TOKENIZER_NO_MEMORY)
            return -1;
        if (k != 1 || back[0] != i32)
            continue;
        v->ids[n++] = i32;
    }
    return (int64_t)n;
}

tb_prompt_vocab *tb_prompt_vocab_new(const tb_tokenizer *tok)
{
    tb_prompt_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->tok = tok;
    if (!tok) {
        v->n = N_COMMON;
        return v;
    }
    v->ids = malloc((tb_tokenizer_vocab_size(tok) + 1) * sizeof *v->ids);
    if (!v->ids) {
        free(v);
        return NULL;
    }
    int64_t n = collect(v, 1);
    v->clean = n >= 8;
    if (n >= 0 && !v->clean)
        n = collect(v, 0);
    if (n < 0) {
        tb_prompt_vocab_free(v);
        return NULL;
    }
    v->n = (size_t)n;
    return v;
}

void tb_prompt_vocab_free(tb_prompt_vocab *v)
{
    if (!v)
        return;
    free(v->ids);
    free(v);
}

size_t tb_prompt_vocab_size(const tb_prompt_vocab *v)
{
    return v ? v->n : 0;
}

static char *decode_all(const tb_tokenizer *tok, const int32_t *ids, size_t n)
{
    int64_t need = tb_tokenizer_decode(tok, ids, n, NULL, 0);
    if (need < 0)
        return NULL;
    char *s = malloc((size_t)need + 1);
    if (s && tb_tokenizer_decode(tok, ids, n, s, (size_t)need + 1) != need) {
        free(s);
        s = NULL;
    }
    return s;
}

char *tb_prompt_synth(const tb_prompt_vocab *v, uint32_t tokens, uint64_t seed, int64_t *counted)
{
    tb_arrival_rng r;
    tb_arrival_rng_seed(&r, seed);
    *counted = 0;
    if (!v->tok || v->n == 0) {
        size_t cap = (size_t)tokens * 9 + 1, len = 0;
        char *s = malloc(cap);
        if (!s)
            return NULL;
        for (uint32_t i = 0; i < tokens; i++) {
            const char *w = common_words[tb_arrival_rng_next(&r) % N_COMMON];
            size_t wl = strlen(w);
            memcpy(s + len, w, wl);
            len += wl;
        }
        s[len] = '\0';
        *counted = tokens;
        return s;
    }
    /* Draw, then correct the length by re-encoding (a no-op for clean
     * vocabularies: their words never merge across the spaces). */
    size_t cap = (size_t)tokens + 64, n = tokens;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return NULL;
    for (size_t i = 0; i < n; i++)
        ids[i] = v->ids[tb_arrival_rng_next(&r) % v->n];
    char *best = NULL;
    int64_t best_err = INT64_MAX;
    for (int round = 0; round < 16; round++) {
        char *text = decode_all(v->tok, ids, n);
        if (!text)
            break;
        int64_t got = tb_tokenizer_encode(v->tok, text, strlen(text), NULL, 0);
        int64_t err = got > (int64_t)tokens ? got - tokens : (int64_t)tokens - got;
        if (got >= 0 && err < best_err) {
            free(best);
            best = text;
            best_err = err;
            *counted = got;
        } else {
            free(text);
        }
        if (got < 0 || got == (int64_t)tokens)
            break;
        if (got > (int64_t)tokens) {
            size_t drop = (size_t)(got - tokens);
            n = n > drop ? n - drop : 1;
        } else {
            size_t add = (size_t)((int64_t)tokens - got);
            if (n + add > cap)
                break;
            for (size_t i = 0; i < add; i++)
                ids[n++] = v->ids[tb_arrival_rng_next(&r) % v->n];
        }
    }
    free(ids);
    if (!best && tokens == 0) {
        best = calloc(1, 1);
        *counted = 0;
    }
    return best;
}
