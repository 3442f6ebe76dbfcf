/* fuzz_tokenizer_json.c — libFuzzer target for tokenizer.json loading
 * (plugins/engine/tokenizer.c: vocab, merges, added tokens, normalizers,
 * pre-tokenizers with their PCRE2 patterns, the decoder) and for encoding
 * with whatever tokenizer that gives.
 *
 * The input up to its first NUL byte is written to tokenizer.json and
 * loaded; the bytes after that NUL (any bytes; a fixed mixed-script
 * sample when there is no NUL) are encoded with it. For every input:
 *   - loading gives a tokenizer or an error naming the file;
 *   - encode gives a count >= 0 (or -1, its documented internal failure:
 *     a pattern PCRE2 gives up on), the same count and prefix at half the
 *     capacity, and never writes past the capacity;
 *   - every id encode gives is inside the vocabulary and decodes. */
#include "fuzz_common.h"

#include "tokenizer.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *json_path;

static const char SAMPLE[] = "Hello, world! It's 2024: tokens/s \xe2\x80\x94 caf\xc3\xa9 "
                             "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e  \t\n<|endoftext|> x\xff\xfe y";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_path = tb_xasprintf("%s/tokenizer.json", fuzz_tmpdir("tokjson"));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    size_t n = fuzz_split(data, size, part, len, 2);
    fuzz_write(json_path, part[0], len[0]);
    const char *text = n > 1 ? (const char *)part[1] : SAMPLE;
    size_t text_len = n > 1 ? len[1] : sizeof SAMPLE - 1;

    tb_tokenizer *tok = NULL;
    char err[512];
    err[0] = '\0';
    if (tb_tokenizer_load(json_path, &tok, err, sizeof err) != 0) {
        if (tok || strncmp(err, json_path, strlen(json_path)) != 0) {
            fprintf(stderr, "fuzz_tokenizer_json: bad error: \"%s\"\n", err);
            abort();
        }
        return 0;
    }
    size_t vocab = tb_tokenizer_vocab_size(tok);
    if (tb_tokenizer_template_bos(tok) < -1) { /* an id (json_id's 0 .. 2^24 - 1) or -1 */
        fprintf(stderr, "fuzz_tokenizer_json: template BOS %d\n", tb_tokenizer_template_bos(tok));
        abort();
    }
    /* Each byte is at most 3 tokens when every byte of U+FFFD is one
     * (byte-level BPE); added tokens only shorten. Allow more: the check
     * below is of the count's consistency, not of a bound. */
    size_t cap = 4 * text_len + 16;
    int32_t *ids = tb_xmalloc((cap + 1) * sizeof *ids);
    ids[cap] = -777;
    int64_t cnt = tb_tokenizer_encode(tok, text, text_len, ids, cap);
    if (cnt < -1 || ids[cap] != -777) {
        fprintf(stderr, "fuzz_tokenizer_json: encode returned %lld\n", (long long)cnt);
        abort();
    }
    if (cnt >= 0) {
        size_t have = (size_t)cnt < cap ? (size_t)cnt : cap;
        for (size_t i = 0; i < have; i++)
            if (ids[i] < 0 || (size_t)ids[i] >= vocab) {
                fprintf(stderr, "fuzz_tokenizer_json: id %d outside the vocabulary (%zu)\n", ids[i],
                        vocab);
                abort();
            }
        size_t half = have / 2;
        int32_t *part_ids = tb_xmalloc((half + 1) * sizeof *part_ids);
        part_ids[half] = -12345;
        if (tb_tokenizer_encode(tok, text, text_len, part_ids, half) != cnt ||
            memcmp(part_ids, ids, half * sizeof *ids) != 0 || part_ids[half] != -12345) {
            fprintf(stderr, "fuzz_tokenizer_json: encode at capacity %zu differs\n", half);
            abort();
        }
        free(part_ids);
        int64_t dn = tb_tokenizer_decode(tok, ids, have, NULL, 0);
        if (dn < 0) {
            fprintf(stderr, "fuzz_tokenizer_json: encode gave an id decode refuses\n");
            abort();
        }
        char *out = tb_xmalloc((size_t)dn + 1);
        if (tb_tokenizer_decode(tok, ids, have, out, (size_t)dn + 1) != dn ||
            out[dn] != '\0')
            abort();
        free(out);
    }
    free(ids);
    tb_tokenizer_free(tok);
    return 0;
}
