/* test_safetensors.c — plugins/engine/format/safetensors.c on files this test
 * writes: a valid file, a sharded folder, and every way a file or index
 * can lie, each of which must give an error naming the file and tensor
 * (run it under ASan: none may crash). Also the dtype conversions against
 * hand values and, for f16, against an independent formula on all 65536
 * inputs. */
#define _GNU_SOURCE
#include "safetensors.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/tb_test_st_XXXXXX";
static char err[1024];

static const char *at(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_raw(const char *name, const void *bytes, size_t len)
{
    FILE *f = fopen(at(name), "wb");
    if (!f || fwrite(bytes, 1, len, f) != len) {
        perror(at(name));
        exit(2);
    }
    fclose(f);
}

/* A .safetensors file: 8-byte LE header length, header, data. pad: spaces
 * after the JSON, as writers add to align the data. */
static void write_st(const char *name, const char *header, size_t pad, const void *data,
                     size_t dlen)
{
    size_t hlen = strlen(header) + pad, len = 8 + hlen + dlen;
    unsigned char *b = malloc(len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, header, strlen(header));
    memset(b + 8 + strlen(header), ' ', pad);
    if (dlen)
        memcpy(b + 8 + hlen, data, dlen);
    write_raw(name, b, len);
    free(b);
}

/* Opening `name` must fail; the error names the file and each needle. */
#define CHECK_FAIL(name, needle, needle2)                                        \
    do {                                                                         \
        tb_weights *w_ = (tb_weights *)1;                                        \
        err[0] = '\0';                                                           \
        CHECK(tb_weights_open_file(at(name), &w_, err, sizeof err) == -1);       \
        CHECK(w_ == NULL);                                                       \
        CHECK_CONTAINS(err, at(name));                                           \
        CHECK_CONTAINS(err, needle);                                             \
        CHECK_CONTAINS(err, needle2);                                            \
    } while (0)

/* tensors in the valid file: bf16 [2, 3], f32 [2], f16 [4], f32 scalar,
 * f32 [0] (empty), and metadata */
static const char good_header[] =
    "{\"__metadata__\": {\"format\": \"pt\"},"
    " \"w.bf16\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]},"
    " \"w.f32\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]},"
    " \"w.f16\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [20, 28]},"
    " \"w.scalar\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [28, 32]},"
    " \"w.empty\": {\"dtype\": \"F32\", \"shape\": [3, 0], \"data_offsets\": [32, 32]}}";

static void good_data(unsigned char d[32])
{
    const uint16_t bf[6] = {0x3F80, 0xC000, 0x0000, 0x4040, 0xBF80, 0x7F80}; /* 1 -2 0 3 -1 inf */
    const float f32[2] = {0.5f, -1.25f};
    const uint16_t f16[4] = {0x3C00, 0x0001, 0x7C00, 0xC000}; /* 1 2^-24 inf -2 */
    const float sc = 42.0f;
    memcpy(d, bf, 12);
    memcpy(d + 12, f32, 8);
    memcpy(d + 20, f16, 8);
    memcpy(d + 28, &sc, 4);
}

static void check_good(const tb_weights *w, const char *file)
{
    CHECK(tb_weights_count(w) == 5);
    /* name order */
    CHECK_STR(tb_weights_at(w, 0)->name, "w.bf16");
    CHECK_STR(tb_weights_at(w, 4)->name, "w.scalar");
    CHECK(tb_weights_at(w, 5) == NULL);
    CHECK(tb_weights_find(w, "__metadata__") == NULL);
    CHECK(tb_weights_find(w, "w.nope") == NULL);
    CHECK(tb_weights_find(w, "") == NULL);

    const tb_tensor *t = tb_weights_find(w, "w.bf16");
    CHECK(t && t->dtype == TB_DT_BF16 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    CHECK(t && t->n_elements == 6 && t->n_bytes == 12);
    CHECK(t && strcmp(t->file, file) == 0);
    if (t) {
        float f[6];
        tb_to_f32(t->dtype, t->data, f, 6);
        CHECK(f[0] == 1 && f[1] == -2 && f[2] == 0 && f[3] == 3 && f[4] == -1 && isinf(f[5]));
    }
    t = tb_weights_find(w, "w.f32");
    CHECK(t && t->dtype == TB_DT_F32 && t->n_elements == 2 && t->n_bytes == 8);
    if (t) {
        float f[2];
        tb_to_f32(t->dtype, t->data, f, 2);
        CHECK(f[0] == 0.5f && f[1] == -1.25f);
    }
    t = tb_weights_find(w, "w.f16");
    CHECK(t && t->dtype == TB_DT_F16 && t->n_elements == 4 && t->n_bytes == 8);
    if (t) {
        float f[4];
        tb_to_f32(t->dtype, t->data, f, 4);
        CHECK(f[0] == 1 && f[1] == 0x1p-24f && isinf(f[2]) && f[2] > 0 && f[3] == -2);
    }
    t = tb_weights_find(w, "w.scalar");
    CHECK(t && t->ndim == 0 && t->n_elements == 1 && t->n_bytes == 4);
    t = tb_weights_find(w, "w.empty");
    CHECK(t && t->ndim == 2 && t->n_elements == 0 && t->n_bytes == 0);

    int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    CHECK(tb_weights_expect(w, "w.bf16", 2, s23, err, sizeof err) == 0);
    CHECK(tb_weights_expect(w, "w.bf16", 2, s32, err, sizeof err) == -1);
    CHECK_CONTAINS(err, file);
    CHECK_CONTAINS(err, "tensor w.bf16: shape [2, 3], expected [3, 2]");
    CHECK(tb_weights_expect(w, "w.bf16", 1, s23, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "shape [2, 3], expected [2]");
    CHECK(tb_weights_expect(w, "w.scalar", 0, NULL, err, sizeof err) == 0);
    CHECK(tb_weights_expect(w, "w.missing", 2, s23, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "tensor w.missing: not found");
}

static void test_valid(void)
{
    unsigned char d[32];
    good_data(d);
    /* pad 3: data starts unaligned (8 + hlen odd), which readers must bear */
    write_st("good.safetensors", good_header, 3, d, sizeof d);
    tb_weights *w = NULL;
    CHECK(tb_weights_open_file(at("good.safetensors"), &w, err, sizeof err) == 0);
    if (w) {
        check_good(w, at("good.safetensors"));
        tb_weights_close(w);
    }

    /* the same through the in-memory entry point */
    size_t hlen = strlen(good_header), len = 8 + hlen + sizeof d;
    unsigned char *b = malloc(len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, good_header, hlen);
    memcpy(b + 8 + hlen, d, sizeof d);
    w = NULL;
    CHECK(tb_weights_open_memory(b, len, "mem", &w, err, sizeof err) == 0);
    if (w) {
        check_good(w, "mem");
        tb_weights_close(w);
    }
    free(b);

    /* an empty header is a valid, empty file */
    write_st("empty.safetensors", "{}", 0, NULL, 0);
    CHECK(tb_weights_open_file(at("empty.safetensors"), &w, err, sizeof err) == 0);
    if (w) {
        CHECK(tb_weights_count(w) == 0);
        CHECK(tb_weights_find(w, "x") == NULL);
        tb_weights_close(w);
    }
    tb_weights_close(NULL);
}

static void test_malformed(void)
{
    unsigned char d[64] = {0};

    write_raw("short.safetensors", "\x02\0\0\0\0", 5);
    CHECK_FAIL("short.safetensors", "5 bytes, too short", "8-byte header");
    write_raw("zero.safetensors", "", 0);
    CHECK_FAIL("zero.safetensors", "0 bytes", "too short");

    /* header length 1000, file 8 + 10 bytes */
    write_raw("hlen.safetensors", "\xe8\x03\0\0\0\0\0\0{}        ", 18);
    CHECK_FAIL("hlen.safetensors", "header length 1000 runs past", "18 bytes");
    write_raw("hlen2.safetensors", "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
    CHECK_FAIL("hlen2.safetensors", "header length 18446744073709551615", "runs past");

    /* over the header limit: a sparse 101 MB file */
    {
        int fd = open(at("huge.safetensors"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
        uint64_t h = 100u * 1000 * 1000 + 1;
        unsigned char b[8];
        for (int i = 0; i < 8; i++)
            b[i] = (unsigned char)(h >> (8 * i));
        CHECK(fd >= 0 && write(fd, b, 8) == 8 && ftruncate(fd, 101 * 1000 * 1000) == 0);
        close(fd);
        CHECK_FAIL("huge.safetensors", "header length 100000001", "limit");
    }

    write_st("notjson.safetensors", "{\"a\": {\"dtype\": ", 0, NULL, 0);
    CHECK_FAIL("notjson.safetensors", "header is not valid JSON", "of 16");
    write_st("array.safetensors", "[1, 2]", 0, NULL, 0);
    CHECK_FAIL("array.safetensors", "header is not a JSON object", "");
    write_st("trail.safetensors", "{} x", 0, NULL, 0);
    CHECK_FAIL("trail.safetensors", "bytes after its JSON", "byte 3");
    /* JSON running past the header into the data must not be read */
    write_st("cut.safetensors", "{\"a\": 1", 0, "}", 1);
    CHECK_FAIL("cut.safetensors", "not valid JSON", "");

    write_st("dtype.safetensors",
             "{\"ok\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
             " \"w.int\": {\"dtype\": \"I8\", \"shape\": [4], \"data_offsets\": [4, 8]}}",
             0, d, 8);
    CHECK_FAIL("dtype.safetensors", "tensor w.int: dtype I8 is not supported", "BF16");
    write_st("dtype2.safetensors",
             "{\"w.x\": {\"dtype\": 3, \"shape\": [1], \"data_offsets\": [0, 4]}}", 0, d, 4);
    CHECK_FAIL("dtype2.safetensors", "tensor w.x: dtype: expected a string", "a number");

    /* truncated: the header promises 64 bytes, the file has 16 */
    write_st("trunc.safetensors",
             "{\"w.big\": {\"dtype\": \"F32\", \"shape\": [16], \"data_offsets\": [0, 64]}}", 0,
             d, 16);
    CHECK_FAIL("trunc.safetensors", "tensor w.big: data_offsets [0, 64] run past the data",
               "16 bytes");

    write_st("size.safetensors",
             "{\"w.size\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}}",
             0, d, 24);
    CHECK_FAIL("size.safetensors", "tensor w.size: data_offsets span 24 bytes",
               "6 x BF16 elements need 12");

    write_st("overlap.safetensors",
             "{\"w.a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
             " \"w.b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}",
             0, d, 24);
    CHECK_FAIL("overlap.safetensors", "tensor w.b: bytes [8, 24) overlap tensor w.a [0, 16)",
               "");
    /* a big one listed last still covers a small one inside it */
    write_st("overlap2.safetensors",
             "{\"w.small\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [20, 24]},"
             " \"w.mid\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [40, 44]},"
             " \"w.big\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [8, 40]}}",
             0, d, 44);
    CHECK_FAIL("overlap2.safetensors", "tensor w.small", "overlap tensor w.big");
    /* adjacent and empty tensors do not overlap */
    write_st("adjacent.safetensors",
             "{\"w.a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
             " \"w.e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
             " \"w.b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
             0, d, 16);
    tb_weights *w = NULL;
    CHECK(tb_weights_open_file(at("adjacent.safetensors"), &w, err, sizeof err) == 0);
    tb_weights_close(w);

    write_st("neg.safetensors",
             "{\"w.neg\": {\"dtype\": \"F32\", \"shape\": [2, -2], \"data_offsets\": [0, 16]}}",
             0, d, 16);
    CHECK_FAIL("neg.safetensors", "tensor w.neg: shape[1] is -2", "expected an integer >= 0");
    write_st("frac.safetensors",
             "{\"w.frac\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 0,
             d, 4);
    CHECK_FAIL("frac.safetensors", "tensor w.frac: shape[0] is 1.5", "");
    write_st("dimstr.safetensors",
             "{\"w.s\": {\"dtype\": \"F32\", \"shape\": [\"4\"], \"data_offsets\": [0, 16]}}", 0,
             d, 16);
    CHECK_FAIL("dimstr.safetensors", "tensor w.s: shape[0]: expected an integer", "a string");
    write_st("dims.safetensors",
             "{\"w.5d\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 1],"
             " \"data_offsets\": [0, 4]}}",
             0, d, 4);
    CHECK_FAIL("dims.safetensors", "tensor w.5d: shape has 5 dims", "at most 4");
    write_st("noshape.safetensors", "{\"w.ns\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}",
             0, d, 4);
    CHECK_FAIL("noshape.safetensors", "tensor w.ns: shape: expected an array", "nothing");
    /* 2^31 x 2^31 x 2^31 x 4 elements overflow int64 */
    write_st("ovf.safetensors",
             "{\"w.ovf\": {\"dtype\": \"F32\", \"shape\": [2147483648, 2147483648, 2147483648,"
             " 4], \"data_offsets\": [0, 4]}}",
             0, d, 4);
    CHECK_FAIL("ovf.safetensors", "tensor w.ovf: shape has too many elements", "");
    /* fits int64 elements, overflows bytes */
    write_st("ovf2.safetensors",
             "{\"w.ovf\": {\"dtype\": \"F32\", \"shape\": [4503599627370496, 1024],"
             " \"data_offsets\": [0, 4]}}",
             0, d, 4);
    CHECK_FAIL("ovf2.safetensors", "tensor w.ovf: shape has too many elements", "");
    write_st("huge_dim.safetensors",
             "{\"w.h\": {\"dtype\": \"F32\", \"shape\": [1e30], \"data_offsets\": [0, 4]}}", 0,
             d, 4);
    CHECK_FAIL("huge_dim.safetensors", "tensor w.h: shape[0] is 1e+30", "");

    write_st("order.safetensors",
             "{\"w.o\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 0, d,
             8);
    CHECK_FAIL("order.safetensors", "tensor w.o: data_offsets [8, 4]: begin after end", "");
    write_st("offs.safetensors",
             "{\"w.o\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 0, d, 8);
    CHECK_FAIL("offs.safetensors", "tensor w.o: data_offsets: expected [begin, end]", "");
    write_st("offs2.safetensors",
             "{\"w.o\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 0, d,
             8);
    CHECK_FAIL("offs2.safetensors", "tensor w.o: data_offsets: expected integers >= 0", "");
    write_st("entry.safetensors", "{\"w.e\": [1, 2]}", 0, NULL, 0);
    CHECK_FAIL("entry.safetensors", "tensor w.e: expected an object", "an array");
    write_st("dup.safetensors",
             "{\"w.d\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
             " \"w.d\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
             0, d, 8);
    CHECK_FAIL("dup.safetensors", "tensor w.d: appears twice", "");

    CHECK_FAIL("absent.safetensors", "No such file", "");
    CHECK(tb_weights_open_file(dir, &w, err, sizeof err) == -1); /* a folder */
    CHECK_CONTAINS(err, dir);
    CHECK_CONTAINS(err, "not a regular file");

    /* in memory: short and empty buffers */
    CHECK(tb_weights_open_memory("", 0, "m0", &w, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "m0: 0 bytes");
    /* errors into a zero-size or tiny buffer */
    CHECK(tb_weights_open_memory("", 0, "m0", &w, NULL, 0) == -1);
    char small[6];
    CHECK(tb_weights_open_memory("", 0, "m0", &w, small, sizeof small) == -1);
    CHECK(strlen(small) == 5);
}

static void make_folder(const char *name)
{
    char *p = strdup(at(name));
    CHECK(mkdir(p, 0755) == 0);
    free(p);
}

static void test_sharded(void)
{
    unsigned char d[32];
    good_data(d);
    make_folder("sharded");
    write_st("sharded/model-00001-of-00002.safetensors",
             "{\"__metadata__\": {\"format\": \"pt\"},"
             " \"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]},"
             " \"c\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]}}",
             5, d, 20);
    write_st("sharded/model-00002-of-00002.safetensors",
             "{\"b\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [0, 8]}}", 0, d + 20,
             8);
    const char *index =
        "{\"metadata\": {\"total_size\": 40}, \"weight_map\": {"
        " \"a\": \"model-00001-of-00002.safetensors\","
        " \"b\": \"model-00002-of-00002.safetensors\","
        " \"c\": \"model-00001-of-00002.safetensors\"}}";
    write_raw("sharded/model.safetensors.index.json", index, strlen(index));
    tb_weights *w = NULL;
    CHECK(tb_weights_open(at("sharded"), &w, err, sizeof err) == 0);
    if (w) {
        CHECK(tb_weights_count(w) == 3);
        const tb_tensor *a = tb_weights_find(w, "a"), *b = tb_weights_find(w, "b"),
                        *c = tb_weights_find(w, "c");
        CHECK(a && b && c);
        if (a && b && c) {
            CHECK_STR(a->file, at("sharded/model-00001-of-00002.safetensors"));
            CHECK_STR(b->file, at("sharded/model-00002-of-00002.safetensors"));
            CHECK(a->file == c->file); /* the shard was opened once */
            float f[4];
            tb_to_f32(b->dtype, b->data, f, 4);
            CHECK(f[0] == 1 && f[3] == -2);
            tb_to_f32(c->dtype, c->data, f, 2);
            CHECK(f[0] == 0.5f && f[1] == -1.25f);
        }
        int64_t s[1] = {5};
        CHECK(tb_weights_expect(w, "zz", 1, s, err, sizeof err) == -1);
        CHECK_CONTAINS(err, at("sharded"));
        CHECK_CONTAINS(err, "tensor zz: not found");
        tb_weights_close(w);
    }

    /* a folder with one model.safetensors */
    make_folder("single");
    write_st("single/model.safetensors", good_header, 0, d, sizeof d);
    CHECK(tb_weights_open(at("single"), &w, err, sizeof err) == 0);
    if (w) {
        check_good(w, at("single/model.safetensors"));
        tb_weights_close(w);
    }

    /* a folder with neither */
    make_folder("none");
    CHECK(tb_weights_open(at("none"), &w, err, sizeof err) == -1 && w == NULL);
    CHECK_CONTAINS(err, at("none/model.safetensors"));
    CHECK_CONTAINS(err, "No such file");

    /* each broken index: the error names the index or shard and the tensor */
    struct {
        const char *index, *needle, *needle2, *needle3;
    } bad[] = {
        {"{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
         " \"x\": \"model-00003-of-00002.safetensors\"}}",
         "model-00003-of-00002.safetensors: No such file", "shard of tensor x",
         "model.safetensors.index.json"},
        {"{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
         " \"ghost\": \"model-00002-of-00002.safetensors\"}}",
         "model.safetensors.index.json: tensor ghost: not in its shard",
         "model-00002-of-00002.safetensors", ""},
        {"{\"weight_map\": {\"b\": \"model-00001-of-00002.safetensors\","
         " \"a\": \"model-00002-of-00002.safetensors\"}}",
         "model.safetensors.index.json: tensor b: not in its shard",
         "model-00001-of-00002.safetensors (found in", "model-00002-of-00002.safetensors)"},
        {"{\"weight_map\": {\"a\": \"../sharded/model-00001-of-00002.safetensors\"}}",
         "model.safetensors.index.json: tensor a: expected a shard file name",
         "../sharded", ""},
        {"{\"weight_map\": {\"a\": \"/etc/passwd\"}}", "tensor a: expected a shard file name",
         "", ""},
        {"{\"weight_map\": {\"a\": 1}}", "tensor a: expected a shard file name", "a number", ""},
        {"{\"weight_map\": {}}", "model.safetensors.index.json: weight_map: expected", "", ""},
        {"{\"metadata\": {}}", "model.safetensors.index.json: weight_map", "", ""},
        {"{\"weight_map\": ", "model.safetensors.index.json: not valid JSON", "", ""},
    };
    make_folder("bad");
    write_st("bad/model-00001-of-00002.safetensors",
             "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}}", 0, d,
             12);
    write_st("bad/model-00002-of-00002.safetensors",
             "{\"b\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [0, 8]}}", 0, d, 8);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_raw("bad/model.safetensors.index.json", bad[i].index, strlen(bad[i].index));
        w = (tb_weights *)1;
        err[0] = '\0';
        CHECK(tb_weights_open(at("bad"), &w, err, sizeof err) == -1);
        CHECK(w == NULL);
        CHECK_CONTAINS(err, at("bad/"));
        CHECK_CONTAINS(err, bad[i].needle);
        CHECK_CONTAINS(err, bad[i].needle2);
        CHECK_CONTAINS(err, bad[i].needle3);
    }

    /* the same tensor in two shards */
    write_st("bad/model-00002-of-00002.safetensors",
             "{\"a\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [0, 8]}}", 0, d, 8);
    const char *twice = "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                        " \"b\": \"model-00002-of-00002.safetensors\"}}";
    write_raw("bad/model.safetensors.index.json", twice, strlen(twice));
    CHECK(tb_weights_open(at("bad"), &w, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "tensor a: appears twice");
    CHECK_CONTAINS(err, "model-00001-of-00002.safetensors");
    CHECK_CONTAINS(err, "model-00002-of-00002.safetensors");

    /* a broken shard: its own error, then which tensor wanted it */
    write_raw("bad/model-00002-of-00002.safetensors", "\x01\0", 2);
    CHECK(tb_weights_open(at("bad"), &w, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "model-00002-of-00002.safetensors: 2 bytes, too short");
    CHECK_CONTAINS(err, "shard of tensor b");
}

/* f16 by the IEEE 754 formula, independent of the bit tricks */
static float f16_reference(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v;
    if (exp == 31)
        v = mant ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(mant, -24);
    else
        v = ldexp(1024 + mant, exp - 25);
    return (float)(sign ? -v : v);
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_conversions(void)
{
    CHECK(tb_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(tb_bf16_to_f32(0xC000) == -2.0f);
    CHECK(tb_bf16_to_f32(0x0000) == 0.0f);
    CHECK(isinf(tb_bf16_to_f32(0x7F80)) && tb_bf16_to_f32(0xFF80) < 0);
    CHECK(isnan(tb_bf16_to_f32(0x7FC0)));
    CHECK(tb_bf16_to_f32(0x0001) == 0x1p-133f); /* bf16 subnormal */

    CHECK(tb_f16_to_f32(0x3C00) == 1.0f);
    CHECK(tb_f16_to_f32(0xC000) == -2.0f);
    CHECK(tb_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(tb_f16_to_f32(0x8001) == -0x1p-24f);
    CHECK(tb_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    CHECK(tb_f16_to_f32(0x0400) == 0x1p-14f);
    CHECK(tb_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(isinf(tb_f16_to_f32(0x7C00)) && tb_f16_to_f32(0x7C00) > 0);
    CHECK(isinf(tb_f16_to_f32(0xFC00)) && tb_f16_to_f32(0xFC00) < 0);
    CHECK(isnan(tb_f16_to_f32(0x7E00)) && isnan(tb_f16_to_f32(0x7C01)));
    CHECK(tb_f16_to_f32(0x8000) == 0 && signbit(tb_f16_to_f32(0x8000)));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = tb_f16_to_f32((uint16_t)h), want = f16_reference((uint16_t)h);
        if (isnan(want) ? !isnan(got) : (got != want || signbit(got) != signbit(want)))
            bad++;
    }
    CHECK(bad == 0);

    CHECK(tb_f32_to_bf16(1.0f) == 0x3F80);
    CHECK(tb_f32_to_bf16(-2.0f) == 0xC000);
    CHECK(tb_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(tb_f32_to_bf16(from_bits(0x3F808000)) == 0x3F80); /* tie, even below */
    CHECK(tb_f32_to_bf16(from_bits(0x3F818000)) == 0x3F82); /* tie, even above */
    CHECK(tb_f32_to_bf16(from_bits(0x3F808001)) == 0x3F81); /* above the tie */
    CHECK(tb_f32_to_bf16(from_bits(0x3F807FFF)) == 0x3F80); /* below the tie */
    CHECK(tb_f32_to_bf16(from_bits(0xBF818000)) == 0xBF82); /* sign does not matter */
    CHECK(tb_f32_to_bf16(INFINITY) == 0x7F80);
    CHECK(tb_f32_to_bf16(-INFINITY) == 0xFF80);
    CHECK(tb_f32_to_bf16(from_bits(0x7F7FFFFF)) == 0x7F80); /* FLT_MAX rounds to inf */
    CHECK(tb_f32_to_bf16(from_bits(0x00008000)) == 0x0000); /* subnormal tie to even 0 */
    /* NaN stays NaN, even with its payload only in the dropped bits */
    uint16_t n1 = tb_f32_to_bf16(from_bits(0x7F800001)), n2 = tb_f32_to_bf16(from_bits(0xFFFFFFFF));
    CHECK((n1 & 0x7F80) == 0x7F80 && (n1 & 0x7F) != 0);
    CHECK((n2 & 0x7F80) == 0x7F80 && (n2 & 0x7F) != 0 && (n2 & 0x8000));
    CHECK(isnan(tb_bf16_to_f32(tb_f32_to_bf16(NAN))));
    /* every non-NaN bf16 survives the round trip */
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7F80) == 0x7F80 && (h & 0x7F))
            continue;
        if (tb_f32_to_bf16(tb_bf16_to_f32((uint16_t)h)) != h)
            bad++;
    }
    CHECK(bad == 0);

    /* unaligned sources */
    unsigned char buf[1 + 3 * 4];
    float src[3] = {1.5f, -3.0f, 1e-3f}, dst[3];
    memcpy(buf + 1, src, sizeof src);
    tb_to_f32(TB_DT_F32, buf + 1, dst, 3);
    CHECK(dst[0] == 1.5f && dst[1] == -3.0f && dst[2] == 1e-3f);
    const uint16_t h16[3] = {0x3C00, 0x3800, 0xC400}; /* 1, 0.5, -4 */
    memcpy(buf + 1, h16, sizeof h16);
    tb_to_f32(TB_DT_F16, buf + 1, dst, 3);
    CHECK(dst[0] == 1 && dst[1] == 0.5f && dst[2] == -4);
    const uint16_t b16[3] = {0x3F80, 0x3F00, 0xC080}; /* 1, 0.5, -4 */
    memcpy(buf + 1, b16, sizeof b16);
    tb_to_f32(TB_DT_BF16, buf + 1, dst, 3);
    CHECK(dst[0] == 1 && dst[1] == 0.5f && dst[2] == -4);

    CHECK(tb_dtype_size(TB_DT_F32) == 4 && tb_dtype_size(TB_DT_F16) == 2 &&
          tb_dtype_size(TB_DT_BF16) == 2);
    CHECK_STR(tb_dtype_name(TB_DT_BF16), "BF16");
    CHECK_STR(tb_dtype_name(TB_DT_F16), "F16");
    CHECK_STR(tb_dtype_name(TB_DT_F32), "F32");
}

static void remove_tree(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "test_safetensors: could not remove %s\n", path);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_valid();
    test_malformed();
    test_sharded();
    test_conversions();
    remove_tree(dir);
    return check_done();
}
