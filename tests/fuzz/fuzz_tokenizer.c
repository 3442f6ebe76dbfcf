/* fuzz_tokenizer.c — libFuzzer target for the BPE encoder
 * (tb_tokenizer_encode) on any bytes. Built and run by tests/fuzz/run.sh.
 *
 * The first tokenizer comes from $TB_FUZZ_TOKENIZER (default: the golden
 * Llama 3 one under $TB_SOURCE_ROOT, default "."). It must be byte-level
 * with no lstrip/rstrip added tokens and no normalizer, so that these hold
 * for every input:
 *   - encode never fails, and gives the same count and prefix at any cap;
 *   - decode(encode(x)) is x with invalid UTF-8 replaced by U+FFFD per
 *     maximal subpart (checked against the small decoder below).
 * The second, $TB_FUZZ_TOKENIZER2 (default: the golden Qwen2 one), has the
 * NFC normalizer and its own split pattern; NFC may change the text, so
 * for it: encode never fails, the same count and prefix at any cap, every
 * id decodes, and ASCII input (which NFC leaves alone) round-trips. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "util.h"

static tb_tokenizer *tok, *tok2;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tb_tokenizer *load(const char *env, const char *dflt_name)
{
    const char *path = getenv(env);
    char *dflt = NULL;
    if (!path || !*path) {
        const char *root = getenv("TB_SOURCE_ROOT");
        dflt = tb_xasprintf("%s/tests/data/golden/%s", root && *root ? root : ".", dflt_name);
        path = dflt;
    }
    char err[512];
    tb_tokenizer *t;
    if (tb_tokenizer_load(path, &t, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        exit(2);
    }
    free(dflt);
    return t;
}

static void free_tokenizers(void)
{
    tb_tokenizer_free(tok);
    tb_tokenizer_free(tok2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = load("TB_FUZZ_TOKENIZER", "tokenizer-llama3.json");
    tok2 = load("TB_FUZZ_TOKENIZER2", "tokenizer-qwen2.json");
    atexit(free_tokenizers);
    return 0;
}

/* Expected decode: the input with each maximal subpart of an ill-formed
 * sequence replaced by U+FFFD, written from Unicode table 3-7 as the set
 * of allowed (lead, second byte) ranges. */
static size_t replace_invalid(const uint8_t *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t len = b < 0x80 ? 1 : (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3
                                  : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
        uint8_t lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        uint8_t hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
        size_t good = len ? 1 : 0;
        while (good && good < len && i + good < n) {
            uint8_t c = s[i + good];
            if (good == 1 ? c < lo || c > hi : c < 0x80 || c > 0xBF)
                break;
            good++;
        }
        if (len && good == len) {
            memcpy(out + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += good ? good : 1;
        }
    }
    return k;
}

/* The second tokenizer: NFC may recompose, so no exact round trip. */
static void check_nfc(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t cap = 3 * size + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    int64_t n = tb_tokenizer_encode(tok2, text, size, ids, cap);
    if (n < 0 || (size_t)n > 3 * size) {
        fprintf(stderr, "encode (NFC) returned %lld for %zu bytes\n", (long long)n, size);
        abort();
    }
    size_t half = (size_t)n / 2;
    int32_t *part = malloc((half + 1) * sizeof *part);
    part[half] = -12345;
    if (tb_tokenizer_encode(tok2, text, size, part, half) != n ||
        memcmp(part, ids, half * sizeof *ids) != 0 || part[half] != -12345)
        abort();
    int64_t dn = tb_tokenizer_decode(tok2, ids, (size_t)n, NULL, 0);
    if (dn < 0)
        abort();
    char *got = malloc((size_t)dn + 1);
    if (tb_tokenizer_decode(tok2, ids, (size_t)n, got, (size_t)dn + 1) != dn)
        abort();
    int ascii = 1;
    for (size_t i = 0; i < size && ascii; i++)
        ascii = data[i] < 0x80;
    if (ascii && ((size_t)dn != size || memcmp(got, data, size) != 0)) {
        fprintf(stderr, "round trip (NFC, ASCII): %lld bytes back, want %zu\n", (long long)dn,
                size);
        abort();
    }
    free(got);
    free(part);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_nfc(data, size);
    const char *text = (const char *)data;
    size_t cap = 3 * size + 8; /* each invalid byte can become 3 tokens */
    int32_t *ids = malloc(cap * sizeof *ids);
    int64_t n = tb_tokenizer_encode(tok, text, size, ids, cap);
    if (n < 0 || (size_t)n > 3 * size) {
        fprintf(stderr, "encode returned %lld for %zu bytes\n", (long long)n, size);
        abort();
    }
    size_t half = (size_t)n / 2;
    int32_t *part = malloc((half + 1) * sizeof *part);
    part[half] = -12345;
    if (tb_tokenizer_encode(tok, text, size, part, half) != n ||
        memcmp(part, ids, half * sizeof *ids) != 0 || part[half] != -12345)
        abort();

    char *want = malloc(3 * size + 1);
    size_t want_len = replace_invalid(data, size, want);
    int64_t dn = tb_tokenizer_decode(tok, ids, (size_t)n, NULL, 0);
    char *got = malloc((size_t)(dn < 0 ? 0 : dn) + 1);
    if (dn != (int64_t)want_len ||
        tb_tokenizer_decode(tok, ids, (size_t)n, got, (size_t)dn + 1) != dn ||
        memcmp(got, want, want_len) != 0) {
        fprintf(stderr, "round trip: %lld bytes back, want %zu\n", (long long)dn, want_len);
        abort();
    }
    free(got);
    free(want);
    free(part);
    free(ids);
    return 0;
}
