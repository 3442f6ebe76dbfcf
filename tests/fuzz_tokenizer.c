/* fuzz_tokenizer.c — libFuzzer target for tb_tokenizer_encode on any bytes.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iplugins/engine -Icore \
 *       tests/fuzz_tokenizer.c plugins/engine/tokenizer.c core/util.c \
 *       -lcjson -lpcre2-8 -lutf8proc -lcrypto -o fuzz_tokenizer
 *   TB_FUZZ_TOKENIZER=tests/data/golden/tokenizer-llama3.json ./fuzz_tokenizer -max_total_time=60
 *
 * The tokenizer comes from $TB_FUZZ_TOKENIZER (default: the golden Llama 3
 * one under $TB_SOURCE_ROOT, default "."). It must be byte-level with no
 * lstrip/rstrip added tokens and no normalizer, so that these hold for every
 * input:
 *   - encode never fails, and gives the same count and prefix at any cap;
 *   - decode(encode(x)) is x with invalid UTF-8 replaced by U+FFFD per
 *     maximal subpart (checked against the small decoder below). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "util.h"

static tb_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("TB_FUZZ_TOKENIZER");
    char *dflt = NULL;
    if (!path || !*path) {
        const char *root = getenv("TB_SOURCE_ROOT");
        dflt = tb_xasprintf("%s/tests/data/golden/tokenizer-llama3.json",
                            root && *root ? root : ".");
        path = dflt;
    }
    char err[512];
    if (tb_tokenizer_load(path, &tok, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        exit(2);
    }
    free(dflt);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
