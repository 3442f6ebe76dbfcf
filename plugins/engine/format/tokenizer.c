/* tokenizer.c — see tokenizer.h.
 *
 * encode() follows the tokenizers library step by step (the parts the
 * Llama 3 / Qwen2 / GPT-2 files use):
 *
 *   1. Invalid UTF-8 becomes U+FFFD, one per maximal subpart (utf8_clean):
 *      the rule of Python's bytes.decode("utf-8", errors="replace") and
 *      Rust's String::from_utf8_lossy, which is how the golden data was made.
 *   2. Added tokens whose "normalized" is false are split out of the raw
 *      text (leftmost-longest, like the library's aho-corasick), then each
 *      gap is normalized (NFC, the only normalizer supported) and the
 *      normalized added tokens are split out of it.
 *   3. Each remaining gap runs through the pre-tokenizer steps: Split
 *      (regex or literal, "Isolated": matches and gaps both become pieces)
 *      and ByteLevel (prefix space, the GPT-2 split, bytes to characters).
 *   4. Each piece goes through BPE: the whole piece when ignore_merges and
 *      it is in the vocabulary, else one symbol per character, merged by
 *      rank, leftmost first among equal ranks: the library's priority-queue
 *      algorithm (Word::merge_all) for long words (merge_heap), a plain
 *      scan for short ones (merge_small); both give the library's result,
 *      also for merge tables with several pairs per token (tiktoken
 *      conversions such as Llama 3's).
 *
 * Regexes run under PCRE2 (UTF, UCP, JIT when available). The library uses
 * Oniguruma with Ruby syntax; the differences that matter are patched when
 * a pattern is compiled (rewrite_pattern): \s becomes the Unicode
 * White_Space set (PCRE2's \s also takes U+180E), and ^ $ are line anchors.
 */
#define _POSIX_C_SOURCE 200809L
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "strmem.h"

/* ---- UTF-8 */

/* Bytes in the sequence a lead byte starts (1 for anything not a lead). */
static size_t utf8_seq_len(unsigned char b)
{
    return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* Code point at s (valid UTF-8); its length in *len. */
static uint32_t utf8_decode(const char *s, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) {
        *len = 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *len = 2;
        return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0) {
        *len = 3;
        return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    }
    *len = 4;
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
           (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

/* Start of the character ending just before s + i (valid UTF-8, i > 0). */
static size_t utf8_prev(const char *s, size_t i)
{
    do
        i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

static size_t utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the well-formed sequence at s[0, n), or 0 with the length of
 * its maximal subpart (the longest prefix of a well-formed sequence, at
 * least 1) in *bad. Well-formed is Unicode table 3-7: C2..DF 80..BF;
 * E0 A0..BF 80..BF; E1..EC,EE..EF 80..BF x2; ED 80..9F 80..BF;
 * F0 90..BF 80..BF x2; F1..F3 80..BF x3; F4 80..8F 80..BF x2. */
static size_t utf8_valid_at(const unsigned char *s, size_t n, size_t *bad)
{
    unsigned char b = s[0];
    if (b < 0x80)
        return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (b >= 0xC2 && b <= 0xDF)
        need = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t k = 1; k < need; k++) {
        bool ok = k < n && (k == 1 ? s[k] >= lo && s[k] <= hi : s[k] >= 0x80 && s[k] <= 0xBF);
        if (!ok) {
            *bad = k;
            return 0;
        }
    }
    return need;
}

static bool utf8_is_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad, k = utf8_valid_at(u + i, n - i, &bad);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

/* Append s[0, n) to b with each maximal subpart of an ill-formed sequence
 * replaced by U+FFFD (EF BF BD): "\xff" -> 1, "\xe2\x82" (truncated) -> 1,
 * "\xc0\xaf" (overlong) -> 2, "\xed\xa0\x80" (surrogate) -> 3,
 * "\xf0\x80\x80" -> 3. 0, or -1 when out of memory. */
static int utf8_clean(tb_str *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0; /* start of the pending well-formed run */
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad, k = utf8_valid_at(u + i, n - i, &bad);
        if (k) {
            i += k;
            continue;
        }
        tb_str_try_appendn(b, s + run, i - run);
        tb_str_try_appendn(b, "\xEF\xBF\xBD", 3);
        i += bad;
        run = i;
    }
    return tb_str_try_appendn(b, s + run, n - run); /* fails if any append did */
}

/* Unicode White_Space: what \s means to the library's regexes (Rust regex,
 * Oniguruma) and char::is_whitespace. */
static bool is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

#define WHITE_SPACE_CLASS \
    "\\t\\n\\x0b\\f\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}" \
    "\\x{202f}\\x{205f}\\x{3000}"

/* ---- the byte-level alphabet (GPT-2's bytes_to_unicode): printable
 * bytes 0x21..0x7E, 0xA1..0xAC, 0xAE..0xFF stand for themselves; the other
 * 68 bytes, in order, get U+0100.. */

#define BYTE_CHAR_LIMIT 0x144 /* every byte-level character is below it */

typedef struct byte_map {
    char utf8[256][2];           /* byte -> its character, UTF-8 */
    uint8_t len[256];            /* 1 or 2 */
    int16_t byte_of[BYTE_CHAR_LIMIT]; /* character -> byte, or -1 */
} byte_map;

static void byte_map_init(byte_map *m)
{
    int next = 256;
    for (int i = 0; i < BYTE_CHAR_LIMIT; i++)
        m->byte_of[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = self ? (uint32_t)b : (uint32_t)next++;
        char tmp[4];
        m->len[b] = (uint8_t)utf8_encode(cp, tmp);
        memcpy(m->utf8[b], tmp, m->len[b]);
        m->byte_of[cp] = (int16_t)b;
    }
}

/* ---- hash tables, open addressing, power-of-two capacity, load <= 1/2 */

static uint64_t hash_mix(uint64_t h)
{
    h ^= h >> 31;
    h *= UINT64_C(0x7fb5d329728ea185);
    h ^= h >> 27;
    h *= UINT64_C(0x81dadef4bc2dd44d);
    h ^= h >> 33;
    return h;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a, then mixed */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return hash_mix(h ^ n);
}

/* String -> int32. Keys are owned copies. */
typedef struct strmap_slot {
    char *key; /* NULL: empty */
    uint32_t len;
    uint32_t hash;
    int32_t val;
} strmap_slot;

typedef struct strmap {
    strmap_slot *slots;
    size_t mask, n;
    tb_strpool keys; /* the slots' keys */
} strmap;

/* 0, or -1 (m untouched) when out of memory. */
static int strmap_init(strmap *m, size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2)
        cap *= 2;
    strmap_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    m->slots = slots;
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

static strmap_slot *strmap_slot_for(const strmap *m, const char *k, size_t n, uint64_t h)
{
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        strmap_slot *s = &m->slots[i];
        if (!s->key || (s->hash == (uint32_t)h && s->len == n && memcmp(s->key, k, n) == 0))
            return s;
    }
}

static int32_t strmap_get(const strmap *m, const char *k, size_t n)
{
    if (!m->slots)
        return -1;
    strmap_slot *s = strmap_slot_for(m, k, n, hash_bytes(k, n));
    return s->key ? s->val : -1;
}

/* Insert, or replace the value; 0, or -1 (m unchanged) when out of
 * memory. */
static int strmap_put(strmap *m, const char *k, size_t n, int32_t val)
{
    if ((m->n + 1) * 2 > m->mask + 1) {
        strmap old = *m;
        if (strmap_init(m, 2 * (old.n + 1)) != 0)
            return -1;
        for (size_t i = 0; i <= old.mask; i++) {
            strmap_slot *o = &old.slots[i];
            if (o->key)
                *strmap_slot_for(m, o->key, o->len, hash_bytes(o->key, o->len)) = *o;
        }
        m->n = old.n;
        free(old.slots);
    }
    uint64_t h = hash_bytes(k, n);
    strmap_slot *s = strmap_slot_for(m, k, n, h);
    if (!s->key) {
        if (!(s->key = tb_strpool_dup(&m->keys, k, n)))
            return -1;
        s->len = (uint32_t)n;
        s->hash = (uint32_t)h;
        m->n++;
    }
    s->val = val;
    return 0;
}

static void strmap_free(strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    tb_strpool_free(&m->keys);
}

/* (left id, right id) -> (rank, merged id): the merge table. */
typedef struct pair_slot {
    uint64_t key; /* (left << 32 | right) + 1; 0: empty */
    uint32_t rank;
    int32_t id;
} pair_slot;

typedef struct pairmap {
    pair_slot *slots;
    size_t mask;
} pairmap;

static uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static const pair_slot *pairmap_get(const pairmap *m, int32_t a, int32_t b)
{
    uint64_t k = pair_key(a, b);
    for (size_t i = hash_mix(k) & m->mask;; i = (i + 1) & m->mask) {
        const pair_slot *s = &m->slots[i];
        if (s->key == k)
            return s;
        if (!s->key)
            return NULL;
    }
}

/* Sized once for n merges; a repeated pair takes the later rank, as the
 * library's HashMap collect does. */
static void pairmap_put(pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t k = pair_key(a, b);
    for (size_t i = hash_mix(k) & m->mask;; i = (i + 1) & m->mask) {
        pair_slot *s = &m->slots[i];
        if (!s->key || s->key == k) {
            s->key = k;
            s->rank = rank;
            s->id = id;
            return;
        }
    }
}

/* ---- added tokens: a byte trie for leftmost-longest matching */

typedef struct added_token {
    char *content;
    size_t len;
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
} added_token;

typedef struct trie_node {
    int32_t child, sibling; /* -1: none */
    int32_t token;          /* index into added[], or -1 */
    unsigned char byte;
} trie_node;

typedef struct trie {
    trie_node *nodes;
    size_t n, cap;
    int32_t root[256]; /* first byte -> node, or -1 */
    bool empty;
} trie;

static void trie_init(trie *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < 256; i++)
        t->root[i] = -1;
    t->empty = true;
}

/* The new node's index, or -1 when out of memory. */
static int32_t trie_new_node(trie *t, unsigned char byte)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        trie_node *nodes = tb_realloc_array(t->nodes, cap, sizeof *nodes);
        if (!nodes)
            return -1;
        t->nodes = nodes;
        t->cap = cap;
    }
    t->nodes[t->n] = (trie_node){.child = -1, .sibling = -1, .token = -1, .byte = byte};
    return (int32_t)t->n++;
}

/* The first of equal contents keeps the slot (the library builds its
 * automaton from the list in order and reports the first pattern).
 * 0, or -1 when out of memory. */
static int trie_insert(trie *t, const char *s, size_t n, int32_t token)
{
    int32_t node = -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t cur = i == 0 ? t->root[b] : t->nodes[node].child, last = -1;
        while (cur >= 0 && t->nodes[cur].byte != b) {
            last = cur;
            cur = t->nodes[cur].sibling;
        }
        if (cur < 0) {
            if ((cur = trie_new_node(t, b)) < 0)
                return -1;
            if (i == 0)
                t->root[b] = cur;
            else if (last >= 0)
                t->nodes[last].sibling = cur;
            else
                t->nodes[node].child = cur;
        }
        node = cur;
    }
    if (t->nodes[node].token < 0)
        t->nodes[node].token = token;
    t->empty = false;
    return 0;
}

/* Longest token starting at s[0, n): its length, token index in *token;
 * 0 when none. */
static size_t trie_longest(const trie *t, const char *s, size_t n, int32_t *token)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t best = 0;
    int32_t node = t->root[u[0]];
    for (size_t i = 1; node >= 0; i++) {
        if (t->nodes[node].token >= 0) {
            best = i;
            *token = t->nodes[node].token;
        }
        if (i == n)
            break;
        node = t->nodes[node].child;
        while (node >= 0 && t->nodes[node].byte != u[i])
            node = t->nodes[node].sibling;
    }
    return best;
}

/* ---- the tokenizer */

typedef enum step_kind {
    STEP_SPLIT,        /* regex; matches and gaps both go on */
    STEP_PREFIX_SPACE, /* ByteLevel add_prefix_space: " " unless it starts with one */
    STEP_BYTES,        /* ByteLevel: each byte to its character */
} step_kind;

typedef struct pretok_step {
    step_kind kind;
    pcre2_code *re; /* STEP_SPLIT */
} pretok_step;

#define CHAR_ID_LIMIT 0x400 /* char_id covers code points below this */

struct tb_tokenizer {
    strmap vocab;  /* model vocabulary: token text -> id */
    strmap added_by_content;
    pairmap merges;
    bool ignore_merges;
    int32_t unk_id; /* -1: a character outside the vocabulary is an error */
    bool fuse_unk;
    int32_t char_id[CHAR_ID_LIMIT]; /* id of the one-character token, or -1 */

    added_token *added;
    size_t n_added;
    trie trie_raw;  /* added tokens with normalized false */
    trie trie_norm; /* with normalized true: matched after normalization */
    bool nfc;
    pcre2_code *word_char; /* Rust regex's \w, for single_word */

    pretok_step *steps;
    size_t n_steps;

    byte_map bytes;
    size_t vocab_size;    /* max id + 1 */
    int32_t template_bos; /* what the post_processor puts before a text, -1: nothing */
    char **id_bytes;      /* [vocab_size] what decode writes for the id, or NULL */
    uint32_t *id_len;     /* [vocab_size] */
    tb_strpool id_text;   /* id_bytes' strings */
};

static int load_fail(char *err, size_t err_size, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int load_fail(char *err, size_t err_size, const char *path, const char *fmt, ...)
{
    if (err && err_size) {
        int k = snprintf(err, err_size, "%s: ", path);
        if (k >= 0 && (size_t)k < err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + k, err_size - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

#define FAIL(...) load_fail(err, err_size, path, __VA_ARGS__)

/* Rewrite a pattern for PCRE2 so that it means what it means to
 * Oniguruma: \s and \S as White_Space (inside a class \S stays PCRE2's).
 * NULL when out of memory. */
static char *rewrite_pattern(const char *p)
{
    tb_str o = {0};
    bool in_class = false;
    for (size_t i = 0; p[i];) {
        char c = p[i];
        if (c == '\\' && p[i + 1]) {
            char d = p[i + 1];
            if (d == 'Q') { /* literal up to \E */
                const char *e = strstr(p + i + 2, "\\E");
                size_t end = e ? (size_t)(e - p) + 2 : strlen(p);
                tb_str_try_appendn(&o, p + i, end - i);
                i = end;
                continue;
            }
            if (d == 's')
                tb_str_try_append(&o, in_class ? WHITE_SPACE_CLASS : "[" WHITE_SPACE_CLASS "]");
            else if (d == 'S' && !in_class)
                tb_str_try_append(&o, "[^" WHITE_SPACE_CLASS "]");
            else
                tb_str_try_appendn(&o, p + i, 2);
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            tb_str_try_appendn(&o, p + i++, 1);
            if (p[i] == '^')
                tb_str_try_appendn(&o, p + i++, 1);
            if (p[i] == ']') /* a leading ] is literal */
                tb_str_try_appendn(&o, p + i++, 1);
            continue;
        }
        if (in_class && c == '[' && p[i + 1] == ':') { /* [:alpha:] */
            const char *e = strstr(p + i + 2, ":]");
            size_t end = e ? (size_t)(e - p) + 2 : i + 2;
            tb_str_try_appendn(&o, p + i, end - i);
            i = end;
            continue;
        }
        if (in_class && c == ']')
            in_class = false;
        tb_str_try_appendn(&o, p + i++, 1);
    }
    return tb_str_try_take(&o);
}

/* Compile a regex (literal when literal) the way the library's Split and
 * ByteLevel use it; NULL with a message in msg on error. */
static pcre2_code *compile_regex(const char *pattern, size_t len, bool literal, char *msg,
                                 size_t msg_size)
{
    char *rewritten = NULL;
    /* The pattern comes from the file: PCRE2 checks its UTF-8 (unchecked,
     * invalid UTF-8 crashes pcre2_compile), and \C, which could split a
     * character and hand the next step invalid UTF-8, is refused. */
    uint32_t opts = PCRE2_UTF;
    if (literal)
        opts |= PCRE2_LITERAL; /* which takes no UCP */
    else {
        opts |= PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
        rewritten = rewrite_pattern(pattern);
        if (!rewritten) {
            snprintf(msg, msg_size, "out of memory");
            return NULL;
        }
        pattern = rewritten;
        len = strlen(rewritten);
        opts |= PCRE2_MULTILINE; /* Ruby syntax: ^ and $ are line anchors */
    }
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &off, NULL);
    free(rewritten);
    if (!re && code == PCRE2_ERROR_HEAP_FAILED) {
        snprintf(msg, msg_size, "out of memory (PCRE2)");
        return NULL;
    }
    if (!re) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(code, buf, sizeof buf);
        snprintf(msg, msg_size, "%s (PCRE2, at offset %zu)", (const char *)buf, (size_t)off);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter when JIT is absent */
    return re;
}

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* JSON helpers: each returns false when the member is present but of the
 * wrong kind; a missing member gives the default. */
static bool json_bool(const cJSON *obj, const char *key, bool dflt, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return true;
    }
    if (!cJSON_IsBool(v))
        return false;
    *out = cJSON_IsTrue(v);
    return true;
}

#define MAX_ID ((1 << 24) - 1) /* ids index dense tables: keep them sane */

static bool json_id(const cJSON *v, int32_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= MAX_ID) || d != (double)(int64_t)d)
        return false;
    *out = (int32_t)d;
    return true;
}

static const char *json_type(const cJSON *obj)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* 0, or -1 when out of memory (re is freed then). */
static int add_step(tb_tokenizer *t, step_kind kind, pcre2_code *re)
{
    pretok_step *steps = tb_realloc_array(t->steps, t->n_steps + 1, sizeof *steps);
    if (!steps) {
        pcre2_code_free(re);
        return -1;
    }
    t->steps = steps;
    t->steps[t->n_steps++] = (pretok_step){.kind = kind, .re = re};
    return 0;
}

/* One pre-tokenizer (at JSON path where) into steps. */
static int load_pretok(tb_tokenizer *t, const cJSON *pt, const char *where, const char *path,
                       char *err, size_t err_size)
{
    if (!cJSON_IsObject(pt))
        return FAIL("%s: expected an object", where);
    const char *type = json_type(pt);
    if (!type)
        return FAIL("%s.type: missing", where);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list))
            return FAIL("%s.pretokenizers: expected an array", where);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", where, i);
            if (load_pretok(t, e, sub, path, err, err_size) < 0)
                return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        bool prefix, use_regex;
        if (!json_bool(pt, "add_prefix_space", true, &prefix))
            return FAIL("%s.add_prefix_space: expected a boolean", where);
        if (!json_bool(pt, "use_regex", true, &use_regex))
            return FAIL("%s.use_regex: expected a boolean", where);
        if (prefix && add_step(t, STEP_PREFIX_SPACE, NULL) != 0)
            return FAIL("out of memory");
        if (use_regex) {
            char msg[300];
            pcre2_code *re = compile_regex(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, msg,
                                           sizeof msg);
            if (!re)
                return FAIL("%s: GPT-2 pattern: %s", where, msg);
            if (add_step(t, STEP_SPLIT, re) != 0)
                return FAIL("out of memory");
        }
        if (add_step(t, STEP_BYTES, NULL) != 0)
            return FAIL("out of memory");
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        if (!cJSON_IsString(beh))
            return FAIL("%s.behavior: expected a string", where);
        if (strcmp(beh->valuestring, "Isolated") != 0)
            return FAIL("%s.behavior: \"%s\" not supported (only \"Isolated\")", where,
                        beh->valuestring);
        bool invert;
        if (!json_bool(pt, "invert", false, &invert))
            return FAIL("%s.invert: expected a boolean", where);
        if (invert)
            return FAIL("%s.invert: true not supported", where);
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *src = cJSON_IsString(rx) ? rx : cJSON_IsString(lit) ? lit : NULL;
        if (!src)
            return FAIL("%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}", where);
        char msg[300];
        pcre2_code *re = compile_regex(src->valuestring, strlen(src->valuestring), src == lit,
                                       msg, sizeof msg);
        if (!re)
            return FAIL("%s.pattern.%s: %s", where, src == lit ? "String" : "Regex", msg);
        if (add_step(t, STEP_SPLIT, re) != 0)
            return FAIL("out of memory");
        return 0;
    }
    return FAIL("%s.type: \"%s\" not supported (ByteLevel, Split, Sequence)", where, type);
}

static int load_normalizer(tb_tokenizer *t, const cJSON *n, const char *where, const char *path,
                           char *err, size_t err_size)
{
    if (!n || cJSON_IsNull(n))
        return 0;
    const char *type = json_type(n);
    if (!type)
        return FAIL("%s.type: missing", where);
    if (strcmp(type, "NFC") == 0) {
        t->nfc = true;
        return 0;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list))
            return FAIL("%s.normalizers: expected an array", where);
        int i = 0, count = cJSON_GetArraySize(list);
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            if (count > 1) /* order against other normalizers would matter */
                return FAIL("%s.normalizers: only a sequence of at most one normalizer is "
                            "supported", where);
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", where, i);
            if (load_normalizer(t, e, sub, path, err, err_size) < 0)
                return -1;
        }
        return 0;
    }
    return FAIL("%s.type: \"%s\" not supported (null or NFC)", where, type);
}

/* Split "a b" (at the first space, as the library's splitn(2, ' ')) or
 * ["a", "b"]; false when neither. */
static bool merge_parts(const cJSON *m, const char **a, size_t *alen, const char **b,
                        size_t *blen)
{
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp)
            return false;
        *a = s;
        *alen = (size_t)(sp - s);
        *b = sp + 1;
        *blen = strlen(sp + 1);
        return true;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring;
        *alen = strlen(*a);
        *b = m->child->next->valuestring;
        *blen = strlen(*b);
        return true;
    }
    return false;
}

static int load_model(tb_tokenizer *t, const cJSON *model, const char *path, char *err,
                      size_t err_size)
{
    if (!cJSON_IsObject(model))
        return FAIL("model: missing");
    const char *type = json_type(model);
    if (!type)
        return FAIL("model.type: missing");
    if (strcmp(type, "BPE") != 0)
        return FAIL("model.type: \"%s\" not supported (only BPE)", type);

    bool byte_fallback;
    if (!json_bool(model, "byte_fallback", false, &byte_fallback))
        return FAIL("model.byte_fallback: expected a boolean");
    if (byte_fallback)
        return FAIL("model.byte_fallback: true not supported");
    if (!json_bool(model, "ignore_merges", false, &t->ignore_merges))
        return FAIL("model.ignore_merges: expected a boolean");
    if (!json_bool(model, "fuse_unk", false, &t->fuse_unk))
        return FAIL("model.fuse_unk: expected a boolean");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < TB_ARRAY_LEN(affixes); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return FAIL("model.%s: not supported (must be null)", affixes[i]);
    }
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) &&
        !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return FAIL("model.dropout: not supported (must be null)");

    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return FAIL("model.vocab: expected an object");
    if (strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab)) != 0)
        return FAIL("out of memory");
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id;
        if (!json_id(e, &id))
            return FAIL("model.vocab[\"%s\"]: expected an id (integer 0..%d)", e->string,
                        MAX_ID);
        if (strmap_put(&t->vocab, e->string, strlen(e->string), id) != 0)
            return FAIL("out of memory");
        if ((size_t)id + 1 > t->vocab_size)
            t->vocab_size = (size_t)id + 1;
        size_t clen;
        if (e->string[0] && utf8_is_valid(e->string, strlen(e->string))) {
            uint32_t cp = utf8_decode(e->string, &clen);
            if (!e->string[clen] && cp < CHAR_ID_LIMIT)
                t->char_id[cp] = id;
        }
    }

    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    t->unk_id = -1;
    if (unk && !cJSON_IsNull(unk)) {
        if (!cJSON_IsString(unk))
            return FAIL("model.unk_token: expected a string or null");
        t->unk_id = strmap_get(&t->vocab, unk->valuestring, strlen(unk->valuestring));
        if (t->unk_id < 0)
            return FAIL("model.unk_token: \"%s\" not in the vocabulary", unk->valuestring);
    }

    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
        return FAIL("model.merges: expected an array");
    size_t n_merges = merges ? (size_t)cJSON_GetArraySize(merges) : 0, cap = 16;
    while (cap < n_merges * 2)
        cap *= 2;
    if (!(t->merges.slots = calloc(cap, sizeof *t->merges.slots)))
        return FAIL("out of memory");
    t->merges.mask = cap - 1;
    tb_str joined = {0};
    uint32_t rank = 0;
    for (const cJSON *m = merges ? merges->child : NULL; m; m = m->next, rank++) {
        const char *a, *b;
        size_t alen, blen;
        if (!merge_parts(m, &a, &alen, &b, &blen)) {
            tb_str_free(&joined);
            return FAIL("model.merges[%u]: expected \"a b\" or [\"a\",\"b\"]", rank);
        }
        int32_t ia = strmap_get(&t->vocab, a, alen), ib = strmap_get(&t->vocab, b, blen);
        joined.len = 0;
        tb_str_try_appendn(&joined, a, alen);
        if (tb_str_try_appendn(&joined, b, blen) != 0) { /* fails if either did */
            tb_str_free(&joined);
            return FAIL("out of memory");
        }
        int32_t ij = strmap_get(&t->vocab, joined.s, joined.len);
        if (ia < 0 || ib < 0 || ij < 0) {
            int k = ia < 0 ? (int)alen : ib < 0 ? (int)blen : (int)joined.len;
            const char *s = ia < 0 ? a : ib < 0 ? b : joined.s;
            int rc = FAIL("model.merges[%u]: \"%.*s\" not in the vocabulary", rank, k, s);
            tb_str_free(&joined);
            return rc;
        }
        pairmap_put(&t->merges, ia, ib, rank, ij);
    }
    tb_str_free(&joined);
    return 0;
}

static int load_added(tb_tokenizer *t, const cJSON *list, const char *path, char *err,
                      size_t err_size)
{
    if (!list || cJSON_IsNull(list))
        return 0;
    if (!cJSON_IsArray(list))
        return FAIL("added_tokens: expected an array");
    t->added = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *t->added);
    if (!t->added || strmap_init(&t->added_by_content, (size_t)cJSON_GetArraySize(list)) != 0)
        return FAIL("out of memory");
    int i = 0;
    bool single_word = false;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        added_token a = {0};
        if (!cJSON_IsObject(e) || !cJSON_IsString(content) ||
            !json_id(cJSON_GetObjectItemCaseSensitive(e, "id"), &a.id))
            return FAIL("added_tokens[%d]: expected {\"id\": integer 0..%d, \"content\": "
                        "string, ...}", i, MAX_ID);
        if (!json_bool(e, "special", false, &a.special) ||
            !json_bool(e, "single_word", false, &a.single_word) ||
            !json_bool(e, "lstrip", false, &a.lstrip) ||
            !json_bool(e, "rstrip", false, &a.rstrip) ||
            !json_bool(e, "normalized", !a.special, &a.normalized))
            return FAIL("added_tokens[%d]: special, single_word, lstrip, rstrip and normalized "
                        "must be booleans", i);
        a.len = strlen(content->valuestring);
        if (!utf8_is_valid(content->valuestring, a.len))
            return FAIL("added_tokens[%d].content: not UTF-8", i);
        if ((size_t)a.id + 1 > t->vocab_size)
            t->vocab_size = (size_t)a.id + 1;
        if (a.len == 0) /* the library skips empty contents */
            continue;
        if (!(a.content = tb_strndup(content->valuestring, a.len)))
            return FAIL("out of memory");
        single_word |= a.single_word;
        if (strmap_get(&t->added_by_content, a.content, a.len) < 0 &&
            strmap_put(&t->added_by_content, a.content, a.len, a.id) != 0) {
            free(a.content);
            return FAIL("out of memory");
        }
        t->added[t->n_added++] = a;
    }
    /* The library's pattern order: special tokens first, then the others. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < t->n_added; k++) {
            added_token *a = &t->added[k];
            if (a->special == (pass == 0) &&
                trie_insert(a->normalized ? &t->trie_norm : &t->trie_raw, a->content, a->len,
                            (int32_t)k) != 0)
                return FAIL("out of memory");
        }
    if (single_word) { /* Rust regex's Unicode \w */
        static const char W[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200c}\\x{200d}]";
        char msg[300];
        t->word_char = compile_regex(W, sizeof W - 1, false, msg, sizeof msg);
        if (!t->word_char)
            return FAIL("single_word: %s", msg);
    }
    return 0;
}

static int load_decoder(tb_tokenizer *t, const cJSON *d, const char *path, char *err,
                        size_t err_size)
{
    if (!d || cJSON_IsNull(d))
        return FAIL("decoder: missing (only ByteLevel is supported)");
    const char *type = json_type(d);
    if (!type || strcmp(type, "ByteLevel") != 0)
        return FAIL("decoder.type: \"%s\" not supported (only ByteLevel)", type ? type : "");

    /* What decode writes for each id: added contents win over the vocab, as
     * in the library's id_to_token; a token is turned back into bytes when
     * all its characters are byte-level ones, else copied as it is. */
    size_t slots = t->vocab_size ? t->vocab_size : 1; /* calloc(0) may be NULL */
    t->id_bytes = calloc(slots, sizeof *t->id_bytes);
    t->id_len = calloc(slots, sizeof *t->id_len);
    if (!t->id_bytes || !t->id_len)
        return FAIL("out of memory");
    tb_str b = {0};
    for (size_t pass = 0; pass < 2; pass++) {
        size_t n = pass == 0 ? t->vocab.mask + 1 : t->n_added;
        for (size_t i = 0; i < n; i++) {
            const char *s;
            size_t len;
            int32_t id;
            if (pass == 0) {
                const strmap_slot *sl = &t->vocab.slots[i];
                if (!sl->key)
                    continue;
                s = sl->key, len = sl->len, id = sl->val;
                if (t->id_bytes[id])
                    continue; /* the first of two tokens with one id */
            } else {
                s = t->added[i].content, len = t->added[i].len, id = t->added[i].id;
            }
            b.len = 0;
            bool mapped = utf8_is_valid(s, len);
            for (size_t j = 0; mapped && j < len;) {
                size_t cl;
                uint32_t cp = utf8_decode(s + j, &cl);
                if (cp >= BYTE_CHAR_LIMIT || t->bytes.byte_of[cp] < 0)
                    mapped = false;
                else {
                    char c = (char)t->bytes.byte_of[cp];
                    tb_str_try_appendn(&b, &c, 1);
                }
                j += cl;
            }
            if (!mapped) {
                b.len = 0;
                tb_str_try_appendn(&b, s, len);
            }
            if (b.failed || !(t->id_bytes[id] = tb_strpool_dup(&t->id_text, b.s ? b.s : "", b.len))) {
                tb_str_free(&b);
                return FAIL("out of memory");
            }
            t->id_len[id] = (uint32_t)b.len;
        }
    }
    tb_str_free(&b);
    return 0;
}

/* post_processor's TemplateProcessing (at JSON path where): its "single"
 * template may put one token before the text ($A) and nothing after it;
 * the id is the template's own ("special_tokens"[NAME].ids). */
static int load_template(tb_tokenizer *t, const cJSON *tp, const char *where, const char *path, char *err,
                         size_t err_size)
{
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(tp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(tp, "special_tokens");
    if (!cJSON_IsArray(single))
        return FAIL("%s.single: expected an array", where);
    bool text = false;
    int before = 0, i = 0;
    for (const cJSON *e = single->child; e; e = e->next, i++) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp ? sp : sq, "id");
        if (!cJSON_IsObject(e) || !!sp == !!sq || !cJSON_IsString(name))
            return FAIL("%s.single[%d]: expected {\"SpecialToken\": {\"id\": NAME}} or "
                        "{\"Sequence\": {\"id\": \"A\"}}", where, i);
        if (sq) {
            if (strcmp(name->valuestring, "A") != 0 || text)
                return FAIL("%s.single[%d]: expected the text once, as \"A\"", where, i);
            text = true;
            continue;
        }
        if (text)
            return FAIL("%s.single[%d]: \"%.40s\" after the text is not supported (only a token before it, "
                        "a BOS)", where, i, name->valuestring);
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tok, "ids");
        if (!cJSON_IsArray(ids))
            return FAIL("%s.special_tokens: \"%.40s\" expected, with its \"ids\"", where, name->valuestring);
        for (const cJSON *id = ids->child; id; id = id->next, before++)
            if (!json_id(id, &t->template_bos))
                return FAIL("%s.special_tokens[\"%.40s\"].ids: expected integers 0..%d", where,
                            name->valuestring, MAX_ID);
    }
    if (!text)
        return FAIL("%s.single: the text (\"A\") is missing", where);
    if (before > 1)
        return FAIL("%s.single: %d tokens before the text; only one (a BOS) is supported", where, before);
    if (before == 0)
        t->template_bos = -1;
    return 0;
}

/* post_processor: ByteLevel (offsets only), TemplateProcessing, or a
 * Sequence of them holding one template at most. */
static int load_post(tb_tokenizer *t, const cJSON *pp, const char *where, int depth, const char *path,
                     char *err, size_t err_size)
{
    if (!pp || cJSON_IsNull(pp))
        return 0;
    const char *type = json_type(pp);
    if (type && strcmp(type, "ByteLevel") == 0)
        return 0;
    if (type && strcmp(type, "TemplateProcessing") == 0) {
        if (t->template_bos != -2)
            return FAIL("%s: a second TemplateProcessing is not supported", where);
        return load_template(t, pp, where, path, err, err_size);
    }
    if (type && strcmp(type, "Sequence") == 0 && depth == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        if (!cJSON_IsArray(list))
            return FAIL("%s.processors: expected an array", where);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char w[64];
            snprintf(w, sizeof w, "%s.processors[%d]", where, i);
            if (load_post(t, e, w, depth + 1, path, err, err_size) != 0)
                return -1;
        }
        return 0;
    }
    return FAIL("%s.type: \"%.40s\" not supported (ByteLevel, TemplateProcessing, or a Sequence of them)", where,
                type ? type : "");
}

int tb_tokenizer_load(const char *path, tb_tokenizer **out, char *err, size_t err_size)
{
    *out = NULL;
    size_t len;
    char *text = tb_read_file_max(path, TB_READ_MAX_TOKENIZER, &len);
    if (!text) {
        char why[160];
        return FAIL("%s", tb_read_file_why(errno, TB_READ_MAX_TOKENIZER, "a tokenizer.json", why, sizeof why));
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t at = end ? (size_t)(end - text) : 0;
    free(text);
    if (!root)
        return FAIL("not valid JSON (near byte %zu)", at);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return FAIL("expected a JSON object");
    }

    tb_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return FAIL("out of memory");
    }
    byte_map_init(&t->bytes);
    for (size_t i = 0; i < CHAR_ID_LIMIT; i++)
        t->char_id[i] = -1;
    trie_init(&t->trie_raw);
    trie_init(&t->trie_norm);

    int rc = load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), path, err, err_size);
    if (rc == 0)
        rc = load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), path, err,
                        err_size);
    if (rc == 0)
        rc = load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
                             "normalizer", path, err, err_size);
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (rc == 0 && pt && !cJSON_IsNull(pt))
        rc = load_pretok(t, pt, "pre_tokenizer", path, err, err_size);
    t->template_bos = -2; /* no template seen yet */
    if (rc == 0)
        rc = load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "post_processor", 0, path,
                       err, err_size);
    if (t->template_bos == -2)
        t->template_bos = -1;
    if (rc == 0)
        rc = load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), path, err,
                          err_size);
    cJSON_Delete(root);
    if (rc < 0) {
        tb_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tb_tokenizer_free(tb_tokenizer *t)
{
    if (!t)
        return;
    strmap_free(&t->vocab);
    strmap_free(&t->added_by_content);
    free(t->merges.slots);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t->trie_raw.nodes);
    free(t->trie_norm.nodes);
    pcre2_code_free(t->word_char);
    for (size_t i = 0; i < t->n_steps; i++)
        pcre2_code_free(t->steps[i].re);
    free(t->steps);
    free(t->id_bytes);
    tb_strpool_free(&t->id_text);
    free(t->id_len);
    free(t);
}

size_t tb_tokenizer_vocab_size(const tb_tokenizer *t)
{
    return t->vocab_size;
}

int tb_tokenizer_is_special(const tb_tokenizer *t, int32_t id)
{
    for (size_t i = 0; i < t->n_added; i++) /* a few, or a few hundred */
        if (t->added[i].id == id)
            return t->added[i].special;
    return 0;
}

int32_t tb_tokenizer_template_bos(const tb_tokenizer *t)
{
    return t->template_bos;
}

int32_t tb_tokenizer_token_id(const tb_tokenizer *t, const char *token)
{
    size_t n = strlen(token);
    int32_t id = strmap_get(&t->added_by_content, token, n);
    return id >= 0 ? id : strmap_get(&t->vocab, token, n);
}

/* ---- encode */

typedef struct symbol {
    int32_t id;
    int32_t prev, next; /* neighbours, -1 at the ends */
    bool gone;          /* merged into its left neighbour */
} symbol;

typedef struct merge_cand {
    uint32_t rank;
    uint32_t pos; /* the left symbol */
    int32_t id;   /* the merged token */
} merge_cand;

typedef struct step_buf {
    char *p;
    size_t cap;
} step_buf;

/* Room for n bytes; NULL when out of memory. */
static char *step_buf_reserve(step_buf *b, size_t n)
{
    if (n > b->cap) {
        size_t cap = n > 2 * b->cap ? n : 2 * b->cap;
        char *p = realloc(b->p, cap);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    return b->p;
}

typedef struct encoder {
    const tb_tokenizer *t;
    int32_t *ids;
    size_t cap;
    int64_t n;
    bool failed;
    bool oom; /* failed for want of memory */
    pcre2_match_data *md;
    step_buf *bufs; /* [n_steps]: the text one step hands on */
    symbol *syms;
    size_t syms_cap;
    merge_cand *heap;
    size_t heap_cap;
} encoder;

static void out_of_memory(encoder *e)
{
    e->failed = e->oom = true;
}

static void emit(encoder *e, int32_t id)
{
    if ((size_t)e->n < e->cap)
        e->ids[e->n] = id;
    e->n++;
}

static bool cand_less(const merge_cand *a, const merge_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(encoder *e, size_t *n, merge_cand c)
{
    if (*n == e->heap_cap) {
        size_t cap = e->heap_cap ? e->heap_cap * 2 : 64;
        merge_cand *heap = tb_realloc_array(e->heap, cap, sizeof *heap);
        if (!heap) {
            out_of_memory(e);
            return;
        }
        e->heap = heap;
        e->heap_cap = cap;
    }
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

static merge_cand heap_pop(encoder *e, size_t *n)
{
    merge_cand top = e->heap[0], last = e->heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(&e->heap[c + 1], &e->heap[c]))
            c++;
        if (!cand_less(&e->heap[c], &last))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (*n)
        e->heap[i] = last;
    return top;
}

static void push_pair(encoder *e, size_t *hn, size_t pos)
{
    const symbol *s = e->syms;
    const pair_slot *m = pairmap_get(&e->t->merges, s[pos].id, s[s[pos].next].id);
    if (m)
        heap_push(e, hn, (merge_cand){.rank = m->rank, .pos = (uint32_t)pos, .id = m->id});
}

/* The library's Word::merge_all: a heap of (rank, position) candidates;
 * an entry is stale when its pair has changed since it was pushed, which
 * the library detects by the merged id alone (a pair can only change by
 * its symbols growing, so the merged id cannot match by accident). */
static void merge_heap(encoder *e, symbol *sym, size_t ns)
{
    const tb_tokenizer *t = e->t;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        push_pair(e, &hn, i);
    while (hn && !e->failed) {
        merge_cand top = heap_pop(e, &hn);
        symbol *l = &sym[top.pos];
        if (l->gone || l->next < 0)
            continue;
        symbol *r = &sym[l->next];
        const pair_slot *m = pairmap_get(&t->merges, l->id, r->id);
        if (!m || m->id != top.id)
            continue;
        l->id = top.id;
        r->gone = true;
        l->next = r->next;
        if (l->next >= 0)
            sym[l->next].prev = (int32_t)top.pos;
        if (l->prev >= 0)
            push_pair(e, &hn, (size_t)l->prev);
        if (l->next >= 0)
            push_pair(e, &hn, top.pos);
    }
    if (e->failed)
        return;
    for (size_t i = 0; i < ns; i++)
        if (!sym[i].gone)
            emit(e, sym[i].id);
}

#ifndef SMALL_WORD
#define SMALL_WORD 64 /* symbols; up to this many, merge_small (-D for tests) */
#endif

/* The same result as merge_heap for short words, cheaper: repeatedly
 * merge the adjacent pair of lowest rank, leftmost on ties (which is the
 * order the heap pops valid entries in), over a compact array. */
static void merge_small(encoder *e, const symbol *sym, size_t ns)
{
    const pairmap *pm = &e->t->merges;
    int32_t id[SMALL_WORD], to[SMALL_WORD];
    uint32_t rank[SMALL_WORD]; /* of the pair (i, i + 1); UINT32_MAX: none */
    for (size_t i = 0; i < ns; i++)
        id[i] = sym[i].id;
    for (size_t i = 0; i + 1 < ns; i++) {
        const pair_slot *m = pairmap_get(pm, id[i], id[i + 1]);
        rank[i] = m ? m->rank : UINT32_MAX;
        to[i] = m ? m->id : -1;
    }
    while (ns > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < ns; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == UINT32_MAX)
            break;
        id[best] = to[best];
        ns--;
        size_t tail = ns - best - 1; /* symbols after the merged one */
        memmove(id + best + 1, id + best + 2, tail * sizeof *id);
        if (tail > 1) {
            memmove(rank + best + 1, rank + best + 2, (tail - 1) * sizeof *rank);
            memmove(to + best + 1, to + best + 2, (tail - 1) * sizeof *to);
        }
        for (size_t i = best ? best - 1 : 0; i <= best && i + 1 < ns; i++) {
            const pair_slot *m = pairmap_get(pm, id[i], id[i + 1]);
            rank[i] = m ? m->rank : UINT32_MAX;
            to[i] = m ? m->id : -1;
        }
    }
    for (size_t i = 0; i < ns; i++)
        emit(e, id[i]);
}

/* BPE over one pre-token s[0, n) (valid UTF-8, n > 0). */
static void bpe(encoder *e, const char *s, size_t n)
{
    const tb_tokenizer *t = e->t;
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->vocab, s, n);
        if (id >= 0) {
            emit(e, id);
            return;
        }
    }
    if (n > e->syms_cap) { /* at most one symbol per byte */
        size_t cap = n > 2 * e->syms_cap ? n : 2 * e->syms_cap;
        symbol *syms = tb_realloc_array(e->syms, cap, sizeof *syms);
        if (!syms) {
            out_of_memory(e);
            return;
        }
        e->syms = syms;
        e->syms_cap = cap;
    }
    symbol *sym = e->syms;
    size_t ns = 0;
    bool unk_pending = false; /* the last symbol is an unknown run (fuse_unk) */
    for (size_t i = 0; i < n;) {
        size_t cl;
        uint32_t cp = utf8_decode(s + i, &cl);
        int32_t id = cp < CHAR_ID_LIMIT ? t->char_id[cp] : strmap_get(&t->vocab, s + i, cl);
        i += cl;
        if (id < 0) {
            if (t->unk_id < 0) {
                e->failed = true; /* the library would drop it silently */
                return;
            }
            if (unk_pending && t->fuse_unk)
                continue;
            id = t->unk_id;
            unk_pending = true;
        } else
            unk_pending = false;
        sym[ns] = (symbol){.id = id, .prev = (int32_t)ns - 1, .next = (int32_t)ns + 1};
        ns++;
    }
    sym[ns - 1].next = -1;
    if (ns <= SMALL_WORD)
        merge_small(e, sym, ns);
    else
        merge_heap(e, sym, ns);
}

static void pretok(encoder *e, size_t step, const char *s, size_t n);

/* Feed every non-empty match of re in s[0, n), and every non-empty gap
 * between matches, to the next step in order. The match loop is the onig
 * crate's find_iter: an empty match right where the last match ended is
 * skipped by stepping one character. */
static void split_isolated(encoder *e, const pcre2_code *re, size_t next, const char *s, size_t n)
{
    size_t prev = 0, from = 0, last_end = 0;
    bool any = false;
    while (from <= n && !e->failed) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                             e->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            if (rc == PCRE2_ERROR_NOMEMORY)
                out_of_memory(e);
            e->failed = true;
            return;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me && any && last_end == me) {
            from += from < n ? utf8_seq_len((unsigned char)s[from]) : 1;
            continue;
        }
        from = last_end = me;
        any = true;
        if (ms > prev)
            pretok(e, next, s + prev, ms - prev);
        if (me > ms)
            pretok(e, next, s + ms, me - ms);
        if (me > prev)
            prev = me;
    }
    if (prev < n)
        pretok(e, next, s + prev, n - prev);
}

/* Run pre-tokenizer step `step` on s[0, n); past the last, BPE. */
static void pretok(encoder *e, size_t step, const char *s, size_t n)
{
    const tb_tokenizer *t = e->t;
    if (n == 0 || e->failed)
        return;
    if (step == t->n_steps) {
        bpe(e, s, n);
        return;
    }
    const pretok_step *st = &t->steps[step];
    step_buf *buf = &e->bufs[step];
    char *o;
    size_t k = 0;
    switch (st->kind) {
    case STEP_SPLIT:
        split_isolated(e, st->re, step + 1, s, n);
        return;
    case STEP_PREFIX_SPACE:
        if (s[0] == ' ')
            break;
        if (!(o = step_buf_reserve(buf, n + 1))) {
            out_of_memory(e);
            return;
        }
        o[0] = ' ';
        memcpy(o + 1, s, n);
        pretok(e, step + 1, o, n + 1);
        return;
    case STEP_BYTES:
        if (!(o = step_buf_reserve(buf, 2 * n))) {
            out_of_memory(e);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            unsigned char b = (unsigned char)s[i];
            o[k] = t->bytes.utf8[b][0];
            o[k + 1] = t->bytes.utf8[b][1];
            k += t->bytes.len[b];
        }
        pretok(e, step + 1, o, k);
        return;
    }
    pretok(e, step + 1, s, n);
}

/* The character at s (valid UTF-8) is a word character (\w). */
static bool is_word_char(const encoder *e, const char *s)
{
    size_t cl;
    (void)utf8_decode(s, &cl);
    return pcre2_match(e->t->word_char, (PCRE2_SPTR)s, cl, 0,
                       PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, e->md, NULL) >= 0;
}

static void split_added(encoder *e, int level, const char *s, size_t n);

/* A gap left by split_added at level: after level 0 (the raw text), the
 * normalizer runs and the normalized added tokens are split out; after
 * level 1, the pre-tokenizer. */
static void added_gap(encoder *e, int level, const char *s, size_t n)
{
    const tb_tokenizer *t = e->t;
    if (n == 0 || e->failed)
        return;
    if (level == 1) {
        pretok(e, 0, s, n);
        return;
    }
    bool plain = true; /* below U+0300 (lead bytes < 0xCC) NFC changes nothing */
    for (size_t i = 0; t->nfc && i < n && plain; i++)
        plain = (unsigned char)s[i] < 0xCC;
    if (plain) {
        split_added(e, 1, s, n);
        return;
    }
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (k == UTF8PROC_ERROR_NOMEM)
        out_of_memory(e);
    else if (k < 0)
        e->failed = true;
    else
        split_added(e, 1, (const char *)nfc, (size_t)k);
    free(nfc);
}

/* Split the added tokens of one level (0: normalized false, on the raw
 * text; 1: normalized true, on the normalized text) out of s[0, n), as the
 * library's AddedVocabulary::find_matches does: leftmost-longest matches,
 * single_word checks, lstrip / rstrip widening the match over White_Space
 * (lstrip never past the previous match). */
static void split_added(encoder *e, int level, const char *s, size_t n)
{
    const tb_tokenizer *t = e->t;
    const trie *tr = level == 0 ? &t->trie_raw : &t->trie_norm;
    if (tr->empty) {
        added_gap(e, level, s, n);
        return;
    }
    size_t start_offset = 0;
    for (size_t i = 0; i < n && !e->failed;) {
        int32_t k = -1;
        size_t len = tr->root[(unsigned char)s[i]] >= 0 ? trie_longest(tr, s + i, n - i, &k) : 0;
        if (!len) {
            i++;
            continue;
        }
        const added_token *a = &t->added[k];
        size_t start = i, stop = i + len;
        i = stop; /* the automaton resumes at the match end, kept or not */
        if (a->single_word) {
            bool start_ok = start == 0 || !is_word_char(e, s + utf8_prev(s, start));
            bool stop_ok = stop == n || !is_word_char(e, s + stop);
            if (!start_ok || !stop_ok)
                continue;
        }
        if (a->lstrip) {
            size_t ns = start, cl;
            while (ns > 0 && is_white_space(utf8_decode(s + utf8_prev(s, ns), &cl)))
                ns = utf8_prev(s, ns);
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            size_t cl;
            while (stop < n && is_white_space(utf8_decode(s + stop, &cl)))
                stop += cl;
        }
        if (start > start_offset)
            added_gap(e, level, s + start_offset, start - start_offset);
        emit(e, a->id);
        start_offset = stop;
    }
    if (start_offset < n)
        added_gap(e, level, s + start_offset, n - start_offset);
}

int64_t tb_tokenizer_encode(const tb_tokenizer *t, const char *text, size_t len, int32_t *ids,
                            size_t cap)
{
    encoder e = {.t = t, .ids = ids, .cap = cap};
    tb_str clean = {0};
    if (!utf8_is_valid(text, len)) {
        if (utf8_clean(&clean, text, len) != 0) {
            tb_str_free(&clean);
            return TB_TOKENIZER_NO_MEMORY;
        }
        text = clean.s;
        len = clean.len;
    }
    e.md = pcre2_match_data_create(1, NULL);
    e.bufs = calloc(t->n_steps + 1, sizeof *e.bufs);
    if (!e.md || !e.bufs)
        out_of_memory(&e);
    else
        split_added(&e, 0, text, len);
    for (size_t i = 0; e.bufs && i <= t->n_steps; i++)
        free(e.bufs[i].p);
    free(e.bufs);
    free(e.syms);
    free(e.heap);
    pcre2_match_data_free(e.md);
    tb_str_free(&clean);
    if (e.failed)
        return e.oom ? TB_TOKENIZER_NO_MEMORY : -1;
    return e.n;
}

/* ---- decode */

const char *tb_tokenizer_id_bytes(const tb_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= t->vocab_size || !t->id_bytes[id])
        return NULL;
    *len = t->id_len[id];
    return t->id_bytes[id];
}

int64_t tb_tokenizer_decode(const tb_tokenizer *t, const int32_t *ids, size_t n, char *out,
                            size_t cap)
{
    tb_str raw = {0}, clean = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->vocab_size || !t->id_bytes[id]) {
            tb_str_free(&raw);
            return -1;
        }
        tb_str_try_appendn(&raw, t->id_bytes[id], t->id_len[id]);
    }
    /* The decoder ends in String::from_utf8_lossy. */
    if (raw.failed || utf8_clean(&clean, raw.s ? raw.s : "", raw.len) != 0) {
        tb_str_free(&raw);
        tb_str_free(&clean);
        return TB_TOKENIZER_NO_MEMORY;
    }
    size_t len = clean.len;
    if (cap > 0) {
        size_t k = len < cap - 1 ? len : cap - 1;
        if (k)
            memcpy(out, clean.s, k);
        out[k] = '\0';
    }
    tb_str_free(&raw);
    tb_str_free(&clean);
    return (int64_t)len;
}
