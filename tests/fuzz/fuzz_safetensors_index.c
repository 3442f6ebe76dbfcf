/* fuzz_safetensors_index.c — libFuzzer target for a sharded checkpoint:
 * tb_weights_open on a folder whose model.safetensors.index.json is the
 * input up to its first NUL byte; the bytes after that NUL (if any) are
 * the shard fuzz.safetensors, read through mmap as in a real load. Two
 * valid shards are always there: a.safetensors (tensors "x", "y") and
 * b.safetensors ("z"), and a truncated one, bad.safetensors.
 *
 * For every input: either an error that names the index or a shard, with
 * nothing returned, or weights whose every tensor can be found by name,
 * has the shape it says, and can be read to its last byte (a tensor
 * pointing past its mapping would fault here). */
#include "fuzz_common.h"

#include "safetensors.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *dir, *index_path, *shard_path;

/* A .safetensors file: the header JSON, padded with spaces to 8 bytes,
 * then n_data bytes of the pattern. */
static void write_shard(const char *name, const char *header, size_t n_data, size_t truncate_to)
{
    size_t h = strlen(header), pad = (8 - h % 8) % 8, total = 8 + h + pad + n_data;
    unsigned char *b = tb_xmalloc(total);
    uint64_t hl = h + pad;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + 8, header, h);
    memset(b + 8 + h, ' ', pad);
    for (size_t i = 0; i < n_data; i++)
        b[8 + h + pad + i] = (unsigned char)(i * 37 + 11);
    char *path = tb_xasprintf("%s/%s", dir, name);
    fuzz_write(path, b, truncate_to && truncate_to < total ? truncate_to : total);
    free(path);
    free(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    dir = tb_xstrdup(fuzz_tmpdir("index"));
    index_path = tb_xasprintf("%s/model.safetensors.index.json", dir);
    shard_path = tb_xasprintf("%s/fuzz.safetensors", dir);
    write_shard("a.safetensors",
                "{\"__metadata__\":{\"format\":\"pt\"},"
                "\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                "\"y\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}",
                32, 0);
    write_shard("b.safetensors", "{\"z\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6,
                0);
    write_shard("bad.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}",
                32, 40);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    size_t n = fuzz_split(data, size, part, len, 2);
    fuzz_write(index_path, part[0], len[0]);
    if (n > 1)
        fuzz_write(shard_path, part[1], len[1]);
    else
        unlink(shard_path);

    tb_weights *w = NULL;
    char err[512];
    err[0] = '\0';
    if (tb_weights_open(dir, &w, err, sizeof err) != 0) {
        if (w || strncmp(err, dir, strlen(dir)) != 0) {
            fprintf(stderr, "fuzz_safetensors_index: bad error: \"%s\"\n", err);
            abort();
        }
        return 0;
    }
    float buf[256];
    for (size_t i = 0; i < tb_weights_count(w); i++) {
        const tb_tensor *t = tb_weights_at(w, i);
        if (tb_weights_find(w, t->name) != t || t->ndim < 0 || t->ndim > TB_MAX_DIMS ||
            t->n_bytes != (size_t)t->n_elements * tb_dtype_size(t->dtype) ||
            tb_weights_expect(w, t->name, t->ndim, t->shape, err, sizeof err) != 0 ||
            strncmp(t->file, dir, strlen(dir)) != 0)
            abort();
        size_t es = tb_dtype_size(t->dtype);
        for (int64_t k = 0; k < t->n_elements; k += 256) {
            size_t m = (size_t)(t->n_elements - k < 256 ? t->n_elements - k : 256);
            tb_to_f32(t->dtype, (const uint8_t *)t->data + (size_t)k * es, buf, m);
        }
    }
    tb_weights_close(w);
    return 0;
}
