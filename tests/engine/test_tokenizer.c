/* test_tokenizer.c — plugins/engine/format/tokenizer.c: the mechanics on small
 * hand-made tokenizer.json files (byte-level alphabet + a few merges), then
 * every case of the golden files exported from the tokenizers library
 * (tests/data/golden/tokenizer_cases.json under $TB_SOURCE_ROOT, default
 * "."): ids and decoded text must match exactly. */
#define _POSIX_C_SOURCE 200809L
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

/* ---- fixtures */

/* GPT-2's bytes_to_unicode, written out independently of the code under
 * test: byte b's character as UTF-8 into out, returns its length. */
static size_t byte_char(int b, char out[3])
{
    int cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        cp = b;
    else {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = 0;
    return 2;
}

/* Merges of the mini tokenizer, in rank order; the merged token ids are
 * 256 + index. "Ġ" is the space's character. */
static const char *const MERGES[][2] = {
    {"h", "e"},     /* 256 he */
    {"l", "l"},     /* 257 ll */
    {"he", "ll"},   /* 258 hell */
    {"hell", "o"},  /* 259 hello */
    {"Ġ", "w"},     /* 260 Ġw */
    {"o", "r"},     /* 261 or */
    {"Ġw", "or"},   /* 262 Ġwor */
    {"Ġwor", "l"},  /* 263 Ġworl */
    {"Ġworl", "d"}, /* 264 Ġworld */
    {"a", "a"},     /* 265 aa */
    {"b", "c"},     /* 266 bc */
    {"a", "b"},     /* 267 ab */
    {"1", "2"},     /* 268 12 */
    {"3", "4"},     /* 269 34 */
    {"4", "5"},     /* 270 45 */
    {"-", "-"},     /* 271 -- */
    {"a", "\xc3\x82"}, /* 272 aÂ: a + the first byte of U+0085 */
    {"a", "\xc3\xa1"}, /* 273 aá: a + the first byte of U+180E */
};
#define N_MERGES ((int)TB_ARRAY_LEN(MERGES))
enum { ID_HELLO = 259, ID_WORLD = 264, ID_AA = 265, ID_BC = 266, ID_12 = 268, ID_34 = 269,
       ID_45 = 270, ID_DASHES = 271, ID_A_C2 = 272, ID_A_E1 = 273,
       ID_ABC = 274, /* in the vocabulary, made by no merge: ignore_merges */
       ID_END = 300, ID_E = 301, ID_L = 302, ID_R = 303, ID_QR = 304, ID_PQR = 305, ID_SW = 306 };

typedef struct fixture_opts {
    bool pair_merges;      /* ["a","b"] instead of "a b" */
    bool ignore_merges;
    const char *pretok;    /* JSON of the pre_tokenizer; NULL: ByteLevel with the GPT-2 split */
    const char *normalizer; /* JSON, NULL: null */
} fixture_opts;

static void add_token(cJSON *list, int id, const char *content, bool special, bool lstrip,
                      bool rstrip, bool normalized, bool single_word)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddBoolToObject(a, "single_word", single_word);
    cJSON_AddBoolToObject(a, "lstrip", lstrip);
    cJSON_AddBoolToObject(a, "rstrip", rstrip);
    cJSON_AddBoolToObject(a, "normalized", normalized);
    cJSON_AddBoolToObject(a, "special", special);
    cJSON_AddItemToArray(list, a);
}

static cJSON *fixture_json(const fixture_opts *o)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    add_token(added, ID_END, "<|end|>", true, false, false, false, false);
    add_token(added, ID_E, "<|e", true, false, false, false, false);
    add_token(added, ID_L, "<L>", true, true, false, false, false);
    add_token(added, ID_R, "<R>", true, false, true, false, false);
    add_token(added, ID_QR, "qr", false, false, false, false, false);
    add_token(added, ID_PQR, "pqr", false, false, false, true, false);
    add_token(added, ID_SW, "sw", false, false, false, false, true);
    if (o->normalizer)
        cJSON_AddItemToObject(root, "normalizer", cJSON_Parse(o->normalizer));
    else
        cJSON_AddNullToObject(root, "normalizer");
    const char *gpt2 = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                       "\"trim_offsets\":true,\"use_regex\":true}";
    cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse(o->pretok ? o->pretok : gpt2));
    cJSON_AddNullToObject(root, "post_processor");
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse("{\"type\":\"ByteLevel\"}"));

    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddBoolToObject(model, "fuse_unk", false);
    cJSON_AddBoolToObject(model, "byte_fallback", false);
    cJSON_AddBoolToObject(model, "ignore_merges", o->ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    char c[3];
    for (int b = 0; b < 256; b++) {
        byte_char(b, c);
        cJSON_AddNumberToObject(vocab, c, b);
    }
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < N_MERGES; i++) {
        char *joined = tb_xasprintf("%s%s", MERGES[i][0], MERGES[i][1]);
        cJSON_AddNumberToObject(vocab, joined, 256 + i);
        free(joined);
        if (o->pair_merges) {
            cJSON *p = cJSON_CreateArray();
            cJSON_AddItemToArray(p, cJSON_CreateString(MERGES[i][0]));
            cJSON_AddItemToArray(p, cJSON_CreateString(MERGES[i][1]));
            cJSON_AddItemToArray(merges, p);
        } else {
            char *m = tb_xasprintf("%s %s", MERGES[i][0], MERGES[i][1]);
            cJSON_AddItemToArray(merges, cJSON_CreateString(m));
            free(m);
        }
    }
    cJSON_AddNumberToObject(vocab, "abc", ID_ABC);
    return root;
}

static char tmp_path[64];

static void write_text(const char *text)
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/test_tokenizer_XXXXXX");
    int fd = mkstemp(tmp_path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) {
        perror("write");
        exit(2);
    }
    close(fd);
}

/* Load JSON text through a temporary file: 0 or -1 with err set. */
static int load_text(const char *text, tb_tokenizer **t, char *err, size_t err_size)
{
    write_text(text);
    int rc = tb_tokenizer_load(tmp_path, t, err, err_size);
    unlink(tmp_path);
    return rc;
}

static tb_tokenizer *load_fixture(const fixture_opts *o)
{
    cJSON *j = fixture_json(o);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    tb_tokenizer *t = NULL;
    char err[512] = "";
    if (load_text(text, &t, err, sizeof err) < 0) {
        fprintf(stderr, "fixture: %s\n", err);
        exit(2);
    }
    free(text);
    return t;
}

/* encode(text) == want[0, n). */
static int encodes_to(const tb_tokenizer *t, const char *text, size_t len, const int32_t *want,
                      size_t n)
{
    int32_t ids[256];
    int64_t got = tb_tokenizer_encode(t, text, len, ids, TB_ARRAY_LEN(ids));
    if (got != (int64_t)n || memcmp(ids, want, n * sizeof *ids) != 0) {
        fprintf(stderr, "  encode(\"%.*s\") = [", (int)len, text);
        for (int64_t i = 0; i < got && i < 256; i++)
            fprintf(stderr, "%s%d", i ? ", " : "", ids[i]);
        fprintf(stderr, "] (%lld)\n", (long long)got);
        return 0;
    }
    return 1;
}

#define ENC(t, text, ...)                                                          \
    do {                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                     \
        CHECK(encodes_to((t), (text), sizeof(text) - 1, want_, TB_ARRAY_LEN(want_))); \
    } while (0)

/* decode(encode(text)) == want. */
static int round_trips_to(const tb_tokenizer *t, const char *text, size_t len, const char *want,
                          size_t want_len)
{
    int32_t ids[1024];
    int64_t n = tb_tokenizer_encode(t, text, len, ids, TB_ARRAY_LEN(ids));
    char out[4096];
    int64_t k = n < 0 ? -1 : tb_tokenizer_decode(t, ids, (size_t)n, out, sizeof out);
    if (k != (int64_t)want_len || memcmp(out, want, want_len) != 0) {
        fprintf(stderr, "  decode(encode(%zu bytes)) = %lld bytes\n", len, (long long)k);
        return 0;
    }
    return 1;
}

#define ROUND(t, text, want) \
    CHECK(round_trips_to((t), (text), sizeof(text) - 1, (want), sizeof(want) - 1))

/* ---- mechanics */

static void test_bpe(void)
{
    fixture_opts o = {0};
    tb_tokenizer *t = load_fixture(&o);
    ENC(t, "hello world", ID_HELLO, ID_WORLD);
    ENC(t, "hello", ID_HELLO);
    CHECK(tb_tokenizer_encode(t, "", 0, NULL, 0) == 0);
    /* bc (rank 10) before ab (rank 11); the vocabulary's "abc" is not used */
    ENC(t, "abc", 'a', ID_BC);
    /* equal ranks: leftmost first */
    ENC(t, "aaa", ID_AA, 'a');
    ENC(t, "aaaa", ID_AA, ID_AA);
    /* GPT-2 split: digits in one run, so 12|34|5 */
    ENC(t, "12345", ID_12, ID_34, '5');
    ENC(t, "a--b", 'a', ID_DASHES, 'b');
    /* space and newline: "\s+(?!\S)" leaves the last space to the word */
    ENC(t, "a  b\n", 'a', ' ', ' ', 'b', '\n');
    /* bytes above 0x7F go through the byte-level alphabet */
    ENC(t, "\xc3\xa9", 0xC3, 0xA9);

    /* a long word: the heap merges 5000 pairs, leftmost first */
    size_t n = 10001;
    char *aaa = tb_xmalloc(n);
    memset(aaa, 'a', n);
    int32_t *ids = tb_xmalloc(n * sizeof *ids);
    CHECK(tb_tokenizer_encode(t, aaa, n, ids, n) == 5001);
    int ok = 1;
    for (int i = 0; i < 5000; i++)
        ok &= ids[i] == ID_AA;
    CHECK(ok && ids[5000] == 'a');
    free(aaa);
    free(ids);

    /* cap: the count comes back whole, nothing is written past cap */
    int32_t two[2] = {-7, -7};
    CHECK(tb_tokenizer_encode(t, "hello world", 11, two, 1) == 2);
    CHECK(two[0] == ID_HELLO && two[1] == -7);
    CHECK(tb_tokenizer_encode(t, "hello world", 11, NULL, 0) == 2);

    CHECK(tb_tokenizer_vocab_size(t) == ID_SW + 1);
    CHECK(tb_tokenizer_token_id(t, "hello") == ID_HELLO);
    CHECK(tb_tokenizer_token_id(t, "Ġworld") == ID_WORLD);
    CHECK(tb_tokenizer_token_id(t, "<|end|>") == ID_END);
    CHECK(tb_tokenizer_token_id(t, "nope") == -1);
    tb_tokenizer_free(t);
}

static void test_merge_spellings_and_ignore_merges(void)
{
    fixture_opts o = {.pair_merges = true};
    tb_tokenizer *t = load_fixture(&o);
    ENC(t, "hello world", ID_HELLO, ID_WORLD);
    ENC(t, "abc", 'a', ID_BC);
    ENC(t, "12345", ID_12, ID_34, '5');
    tb_tokenizer_free(t);

    o = (fixture_opts){.ignore_merges = true};
    t = load_fixture(&o);
    ENC(t, "abc", ID_ABC);    /* the whole pre-token is in the vocabulary */
    ENC(t, "abcb", 'a', ID_BC, 'b');
    ENC(t, "hello world", ID_HELLO, ID_WORLD);
    tb_tokenizer_free(t);
}

static void test_added_tokens(void)
{
    fixture_opts o = {0};
    tb_tokenizer *t = load_fixture(&o);
    ENC(t, "x<|end|>y", 'x', ID_END, 'y');
    ENC(t, "<|end|><|end|>", ID_END, ID_END);
    /* longest match at a position: <|end|> over <|e */
    ENC(t, "<|ex", ID_E, 'x');
    ENC(t, "<|en", ID_E, 'n');
    /* the gap before a token is pre-tokenized on its own */
    ENC(t, "hello<|end|> world", ID_HELLO, ID_END, ID_WORLD);
    /* lstrip takes the whitespace before, rstrip the whitespace after */
    ENC(t, "a  <L>b", 'a', ID_L, 'b');
    ENC(t, "a \xe3\x80\x80<L>b", 'a', ID_L, 'b'); /* U+3000 is White_Space */
    ENC(t, "<R>  b", ID_R, 'b');
    ENC(t, "a  <R>", 'a', ' ', ' ', ID_R);
    /* lstrip stops at the previous match's end */
    ENC(t, "<R>  <L>", ID_R, ID_L);
    /* normalized false tokens are split out first: "pqr" never gets its chance */
    ENC(t, "pqrs", 'p', ID_QR, 's');
    ENC(t, "pq r", 'p', 'q', ' ', 'r');
    /* single_word */
    ENC(t, "sw", ID_SW);
    ENC(t, "a sw b", 'a', ' ', ID_SW, ' ', 'b');
    ENC(t, "swx", 's', 'w', 'x');
    ENC(t, "xsw", 'x', 's', 'w');
    ENC(t, "\xc3\xa9sw", 0xC3, 0xA9, 's', 'w'); /* é is a word character */
    ENC(t, "-sw-", '-', ID_SW, '-');

    /* decode: special tokens decode to their content */
    int32_t ids[] = {ID_HELLO, ID_END, ID_WORLD};
    char out[64];
    CHECK(tb_tokenizer_decode(t, ids, 3, out, sizeof out) == 18);
    CHECK_STR(out, "hello<|end|> world");
    /* a short buffer: full length back, truncated and terminated */
    CHECK(tb_tokenizer_decode(t, ids, 3, out, 6) == 18);
    CHECK_STR(out, "hello");
    CHECK(tb_tokenizer_decode(t, ids, 3, NULL, 0) == 18);
    int32_t bad[] = {ID_HELLO, 99999};
    CHECK(tb_tokenizer_decode(t, bad, 2, out, sizeof out) == -1);
    int32_t neg[] = {-1};
    CHECK(tb_tokenizer_decode(t, neg, 1, out, sizeof out) == -1);
    /* a lone continuation byte's token decodes lossily */
    int32_t half[] = {0xC3, 'a'};
    CHECK(tb_tokenizer_decode(t, half, 2, out, sizeof out) == 4);
    CHECK_STR(out, "\xef\xbf\xbd" "a");
    ROUND(t, "hello world, <|end|> \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80!\n\t x",
          "hello world, <|end|> \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80!\n\t x");
    tb_tokenizer_free(t);
}

/* Invalid UTF-8 is replaced the way Python's decode(errors="replace")
 * does: one U+FFFD per maximal subpart of an ill-formed sequence. */
static void test_invalid_utf8(void)
{
    fixture_opts o = {0};
    tb_tokenizer *t = load_fixture(&o);
#define FFFD "\xef\xbf\xbd"
    ENC(t, "\xff", 0xEF, 0xBF, 0xBD);
    ROUND(t, "\xff", FFFD);
    ROUND(t, "\xe2\x82", FFFD);                 /* truncated: one */
    ROUND(t, "\xe2\x82z", FFFD "z");
    ROUND(t, "\xc0\xaf", FFFD FFFD);            /* overlong: C0 is never a lead */
    ROUND(t, "\xe0\x80\xaf", FFFD FFFD FFFD);   /* overlong 3-byte: E0 wants A0..BF */
    ROUND(t, "\xed\xa0\x80", FFFD FFFD FFFD);   /* surrogate: ED wants 80..9F */
    ROUND(t, "\xed\x9f\xbf", "\xed\x9f\xbf");   /* U+D7FF is fine */
    ROUND(t, "\xf0\x80\x80\x80", FFFD FFFD FFFD FFFD);
    ROUND(t, "\xf0\x9f\x98", FFFD);              /* truncated 4-byte: one */
    ROUND(t, "\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD); /* above U+10FFFF */
    ROUND(t, "\xf5\x80", FFFD FFFD);
    ROUND(t, "\x80\x80", FFFD FFFD);
    ROUND(t, "a\xe2\x82\xac\xe2\x82" "b\xc3", "a\xe2\x82\xac" FFFD "b" FFFD);
    ROUND(t, "\xe2\x28\xa1", FFFD "(" FFFD);
    ENC(t, "a\0b", 'a', 0, 'b'); /* NUL is an ordinary character */
#undef FFFD
    tb_tokenizer_free(t);
}

static void test_pretokenizers(void)
{
    /* Llama 3's split, then ByteLevel without its own regex: 123|45 */
    fixture_opts o = {
        .pretok = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{"
                  "\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{"
                  "L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
                  "\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":"
                  "\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":"
                  "false}]}"};
    tb_tokenizer *t = load_fixture(&o);
    ENC(t, "12345", ID_12, '3', ID_45);
    ENC(t, "hello world", ID_HELLO, ID_WORLD);
    tb_tokenizer_free(t);

    /* \s and \S mean White_Space: U+0085 is, U+180E (in PCRE2's \s) is not */
    o.pretok = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{"
               "\"Regex\":\"\\\\s+|\\\\S+\"},\"behavior\":\"Isolated\"},{\"type\":"
               "\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
    t = load_fixture(&o);
    ENC(t, "a\xc2\x85" "b", 'a', 0xC2, 0x85, 'b');
    ENC(t, "a\xe1\xa0\x8e" "b", ID_A_E1, 0xA0, 0x8E, 'b');
    tb_tokenizer_free(t);
    o.pretok = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{"
               "\"Regex\":\"[^\\\\s]+|[\\\\s]+\"},\"behavior\":\"Isolated\"},{\"type\":"
               "\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
    t = load_fixture(&o);
    ENC(t, "a\xc2\x85" "b", 'a', 0xC2, 0x85, 'b');
    ENC(t, "a\xe1\xa0\x8e" "b", ID_A_E1, 0xA0, 0x8E, 'b');
    ENC(t, "a\xc2\xa0" "b", 'a', 0xC2, 0xA0, 'b');
    tb_tokenizer_free(t);
    /* the check above can fail: without the split, a + Â merges */
    o.pretok = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}";
    t = load_fixture(&o);
    ENC(t, "a\xc2\x85" "b", ID_A_C2, 0x85, 'b');
    tb_tokenizer_free(t);

    /* a literal split: every "-" alone, so no "--" merge */
    o.pretok = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{"
               "\"String\":\"-\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":"
               "\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
    t = load_fixture(&o);
    ENC(t, "a--b", 'a', '-', '-', 'b');
    ENC(t, "hello world", ID_HELLO, ID_WORLD); /* one piece "helloĠworld": no merge across */
    tb_tokenizer_free(t);

    /* add_prefix_space: every piece between added tokens gets one */
    o.pretok = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}";
    t = load_fixture(&o);
    ENC(t, "hello", ' ', ID_HELLO);
    ENC(t, " hello", ' ', ID_HELLO);
    ENC(t, "hello<|end|>hello", ' ', ID_HELLO, ID_END, ' ', ID_HELLO);
    tb_tokenizer_free(t);

    /* no pre-tokenizer: the whole text is one word (no byte mapping) */
    o.pretok = "null";
    t = load_fixture(&o);
    ENC(t, "hello", ID_HELLO);
    ENC(t, "aaaa", ID_AA, ID_AA);
    tb_tokenizer_free(t);

    /* NFC: e + U+0301 becomes é before the split */
    o = (fixture_opts){.normalizer = "{\"type\":\"NFC\"}"};
    t = load_fixture(&o);
    ENC(t, "e\xcc\x81", 0xC3, 0xA9);
    ENC(t, "<|end|>e\xcc\x81", ID_END, 0xC3, 0xA9);
    tb_tokenizer_free(t);
    o.normalizer = NULL;
    t = load_fixture(&o);
    ENC(t, "e\xcc\x81", 'e', 0xCC, 0x81);
    tb_tokenizer_free(t);
}

/* ---- load errors: each names the file and the JSON path */

static void expect_load_error(const char *json, const char *want)
{
    tb_tokenizer *t = NULL;
    char err[512] = "";
    CHECK(load_text(json, &t, err, sizeof err) == -1);
    CHECK(t == NULL);
    CHECK(strncmp(err, tmp_path, strlen(tmp_path)) == 0);
    CHECK_CONTAINS(err, want);
}

/* The fixture with one member replaced (path: "model.merges" etc.). */
static char *fixture_with(const char *object, const char *key, const char *value_json)
{
    fixture_opts o = {0};
    cJSON *j = fixture_json(&o);
    cJSON *parent = strcmp(object, "") == 0 ? j : cJSON_GetObjectItem(j, object);
    if (value_json)
        cJSON_ReplaceItemInObject(parent, key, cJSON_Parse(value_json));
    else
        cJSON_DeleteItemFromObject(parent, key);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

static void test_load_errors(void)
{
    static const struct {
        const char *object, *key, *value, *want;
    } cases[] = {
        {"", "model", NULL, ": model: missing"},
        {"model", "type", "\"WordPiece\"", "model.type: \"WordPiece\" not supported"},
        {"model", "merges", "[\"h e\", 12]", "model.merges[1]: expected \"a b\" or [\"a\",\"b\"]"},
        {"model", "merges", "[\"he\"]", "model.merges[0]: expected"},
        {"model", "merges", "[[\"h\"]]", "model.merges[0]: expected"},
        {"model", "merges", "[\"h zzz\"]", "model.merges[0]: \"zzz\" not in the vocabulary"},
        {"model", "vocab", "[]", "model.vocab: expected an object"},
        {"model", "vocab", "{\"a\": -1}", "model.vocab[\"a\"]: expected an id"},
        {"model", "byte_fallback", "true", "model.byte_fallback"},
        {"model", "unk_token", "\"<unk>\"", "model.unk_token: \"<unk>\" not in the vocabulary"},
        {"", "pre_tokenizer", "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\"}]}",
         "pre_tokenizer.pretokenizers[0].type: \"Digits\" not supported"},
        {"", "pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                              "\"behavior\":\"Isolated\"}",
         "pre_tokenizer.pattern.Regex: "},
        {"", "pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                              "\"behavior\":\"Removed\"}",
         "pre_tokenizer.behavior: \"Removed\" not supported"},
        {"", "normalizer", "{\"type\":\"NFKC\"}", "normalizer.type: \"NFKC\" not supported"},
        {"", "normalizer", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}]}",
         "normalizer.normalizers[0].type: \"Lowercase\" not supported"},
        {"", "decoder", "{\"type\":\"WordPiece\"}", "decoder.type: \"WordPiece\" not supported"},
        {"", "added_tokens", "[{\"id\": 5}]", "added_tokens[0]: expected"},
    };
    for (size_t i = 0; i < TB_ARRAY_LEN(cases); i++) {
        char *text = fixture_with(cases[i].object, cases[i].key, cases[i].value);
        expect_load_error(text, cases[i].want);
        free(text);
    }
    expect_load_error("{\"model\": ", "not valid JSON");
    expect_load_error("[1, 2]", "expected a JSON object");

    tb_tokenizer *t = NULL;
    char err[512] = "";
    CHECK(tb_tokenizer_load("/nonexistent/tokenizer.json", &t, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "/nonexistent/tokenizer.json: ");

    /* the empty Sequence normalizer is a no-op and loads */
    char *text = fixture_with("", "normalizer", "{\"type\":\"Sequence\",\"normalizers\":[]}");
    CHECK(load_text(text, &t, err, sizeof err) == 0);
    tb_tokenizer_free(t);
    free(text);
}

/* ---- golden cases from the tokenizers library */

static int b64_value(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 (padding optional) into a malloc'd buffer. */
static char *b64_decode(const char *s, size_t *len)
{
    size_t n = strlen(s), k = 0;
    char *out = tb_xmalloc(n * 3 / 4 + 3);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            continue;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[k++] = (char)(acc >> bits & 0xFF);
        }
    }
    *len = k;
    return out;
}

static void test_golden(void)
{
    const char *root = getenv("TB_SOURCE_ROOT");
    if (!root || !*root)
        root = ".";
    char *dir = tb_xasprintf("%s/tests/data/golden", root);
    char *cases_path = tb_xasprintf("%s/tokenizer_cases.json", dir);
    size_t len;
    char *text = tb_read_file(cases_path, &len);
    CHECK(text != NULL);
    if (!text) {
        fprintf(stderr, "test_tokenizer: cannot read %s\n", cases_path);
        free(dir);
        free(cases_path);
        return;
    }
    cJSON *all = cJSON_ParseWithLength(text, len);
    free(text);
    CHECK(cJSON_IsObject(all));
    int files = 0, passed = 0, total = 0;
    for (const cJSON *f = all ? all->child : NULL; f; f = f->next, files++) {
        char *path = tb_xasprintf("%s/%s", dir, f->string);
        tb_tokenizer *t = NULL;
        char err[512] = "";
        int rc = tb_tokenizer_load(path, &t, err, sizeof err);
        CHECK(rc == 0);
        if (rc < 0) {
            fprintf(stderr, "  %s\n", err);
            free(path);
            continue;
        }
        int idx = 0, file_pass = 0;
        for (const cJSON *c = f->child; c; c = c->next, idx++) {
            const cJSON *jt = cJSON_GetObjectItem(c, "text");
            const cJSON *jb = cJSON_GetObjectItem(c, "bytes_b64");
            const cJSON *jids = cJSON_GetObjectItem(c, "ids");
            const cJSON *jdec = cJSON_GetObjectItem(c, "decoded");
            size_t n = 0;
            char *in = cJSON_IsString(jt) ? tb_xstrdup(jt->valuestring)
                       : cJSON_IsString(jb) ? b64_decode(jb->valuestring, &n)
                                            : NULL;
            if (cJSON_IsString(jt))
                n = strlen(in);
            CHECK(in != NULL && cJSON_IsArray(jids));
            if (!in || !cJSON_IsArray(jids)) {
                free(in);
                continue;
            }
            size_t want_n = (size_t)cJSON_GetArraySize(jids);
            int32_t *want = tb_xcalloc(want_n + 1, sizeof *want);
            size_t w = 0;
            for (const cJSON *x = jids->child; x; x = x->next)
                want[w++] = (int32_t)x->valuedouble;
            size_t cap = want_n + 16;
            int32_t *got = tb_xcalloc(cap, sizeof *got);
            int64_t g = tb_tokenizer_encode(t, in, n, got, cap);
            bool ok = g == (int64_t)want_n && memcmp(got, want, want_n * sizeof *got) == 0;
            if (!ok) {
                size_t first = 0;
                while (g >= 0 && first < want_n && first < (size_t)g && got[first] == want[first])
                    first++;
                fprintf(stderr, "  %s case %d (%zu bytes): %lld ids, want %zu; first "
                        "difference at %zu (got %d, want %d)\n", f->string, idx, n,
                        (long long)g, want_n, first,
                        g > 0 && first < (size_t)g && first < cap ? got[first] : -1,
                        first < want_n ? want[first] : -1);
            }
            if (cJSON_IsString(jdec)) {
                int64_t dn = tb_tokenizer_decode(t, want, want_n, NULL, 0);
                char *dec = tb_xmalloc(dn > 0 ? (size_t)dn + 1 : 1);
                tb_tokenizer_decode(t, want, want_n, dec, dn > 0 ? (size_t)dn + 1 : 1);
                bool dok = dn >= 0 && strcmp(dec, jdec->valuestring) == 0;
                if (!dok)
                    fprintf(stderr, "  %s case %d: decoded text differs\n", f->string, idx);
                ok = ok && dok;
                free(dec);
            }
            CHECK(ok);
            file_pass += ok;
            total++;
            free(in);
            free(want);
            free(got);
        }
        fprintf(stderr, "golden %s: %d/%d cases pass\n", f->string, file_pass, idx);
        passed += file_pass;
        tb_tokenizer_free(t);
        free(path);
    }
    fprintf(stderr, "golden: %d files, %d/%d cases pass\n", files, passed, total);
    CHECK(files > 0);
    cJSON_Delete(all);
    free(dir);
    free(cases_path);
}

int main(void)
{
    test_bpe();
    test_merge_spellings_and_ignore_merges();
    test_added_tokens();
    test_invalid_utf8();
    test_pretokenizers();
    test_load_errors();
    test_golden();
    return check_done();
}
