/* safetensors.c — see safetensors.h.
 *
 * Every file is mapped whole and checked once at open, so the engine can
 * then trust each tensor's pointer and size. The tensor table is sorted by
 * name for bsearch; names and paths are separate allocations, so the
 * pointers handed out stay put while the tables grow. */
#define _GNU_SOURCE
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strmem.h"

#define MAX_HEADER (100u * 1000 * 1000) /* bytes; real headers are < 1 MB */
#define MAX_JSON_INT 9007199254740992.0 /* 2^53: above it doubles skip integers */

typedef struct st_file {
    char *path;
    const unsigned char *base; /* the whole file */
    size_t len;
    int mapped; /* munmap at close (else the caller's memory) */
} st_file;

struct tb_weights {
    char *source; /* folder or file: names the checkpoint in errors */
    st_file *files;
    size_t n_files, cap_files;
    tb_tensor *t; /* sorted by name once open */
    size_t n, cap;
};

typedef struct errbuf {
    char *s;
    size_t size;
} errbuf;

static int set_err(errbuf *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int set_err(errbuf *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (e->size)
        vsnprintf(e->s, e->size, fmt, ap);
    va_end(ap);
    return -1;
}

size_t tb_dtype_size(tb_dtype dt)
{
    switch (dt) {
    case TB_DT_F32: return 4;
    case TB_DT_F16: return 2;
    case TB_DT_BF16: return 2;
    }
    return 0;
}

const char *tb_dtype_name(tb_dtype dt)
{
    switch (dt) {
    case TB_DT_F32: return "F32";
    case TB_DT_F16: return "F16";
    case TB_DT_BF16: return "BF16";
    }
    return "?";
}

/* ------------------------------------------------------------ one file */

/* The next file slot, its path copied; NULL when out of memory. */
static st_file *add_file(tb_weights *w, const char *path)
{
    if (w->n_files == w->cap_files) {
        size_t cap = w->cap_files ? 2 * w->cap_files : 4;
        st_file *files = tb_realloc_array(w->files, cap, sizeof *files);
        if (!files)
            return NULL;
        w->files = files;
        w->cap_files = cap;
    }
    char *copy = strdup(path);
    if (!copy)
        return NULL;
    st_file *f = &w->files[w->n_files++];
    memset(f, 0, sizeof *f);
    f->path = copy;
    return f;
}

/* The next tensor slot, its name copied; NULL when out of memory. */
static tb_tensor *add_tensor(tb_weights *w, const char *name, const char *file)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        tb_tensor *t = tb_realloc_array(w->t, cap, sizeof *t);
        if (!t)
            return NULL;
        w->t = t;
        w->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return NULL;
    tb_tensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->file = file;
    return t;
}

/* A JSON number that is an integer in [0, 2^53]; else -1. */
static int64_t json_uint(const cJSON *v)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= MAX_JSON_INT) || d != floor(d))
        return -1;
    return (int64_t)d;
}

static const char *json_kind(const cJSON *v)
{
    if (!v)
        return "nothing";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsBool(v))
        return "a boolean";
    return "null";
}

/* One header entry: dtype, shape, offsets into the data area (dlen bytes
 * after the header). */
static int parse_tensor(tb_weights *w, const st_file *f, const cJSON *e,
                        const unsigned char *data, size_t dlen, errbuf *err)
{
    const char *fn = f->path, *name = e->string;
    if (!cJSON_IsObject(e))
        return set_err(err, "%s: tensor %s: expected an object, got %s", fn, name,
                       json_kind(e));

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt))
        return set_err(err, "%s: tensor %s: dtype: expected a string, got %s", fn, name,
                       json_kind(dt));
    tb_dtype dtype;
    if (strcmp(dt->valuestring, "F32") == 0)
        dtype = TB_DT_F32;
    else if (strcmp(dt->valuestring, "F16") == 0)
        dtype = TB_DT_F16;
    else if (strcmp(dt->valuestring, "BF16") == 0)
        dtype = TB_DT_BF16;
    else
        return set_err(err, "%s: tensor %s: dtype %.32s is not supported (F32, F16, BF16)", fn,
                       name, dt->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(shape))
        return set_err(err, "%s: tensor %s: shape: expected an array, got %s", fn, name,
                       json_kind(shape));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > TB_MAX_DIMS)
        return set_err(err, "%s: tensor %s: shape has %d dims, at most %d supported", fn, name,
                       ndim, TB_MAX_DIMS);
    int64_t dims[TB_MAX_DIMS];
    int64_t n_el = 1;
    int overflow = 0;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        dims[i] = json_uint(d);
        if (dims[i] < 0) {
            if (cJSON_IsNumber(d))
                return set_err(err, "%s: tensor %s: shape[%d] is %.17g, expected an integer >= 0 "
                               "(and <= 2^53)",
                               fn, name, i, d->valuedouble);
            return set_err(err, "%s: tensor %s: shape[%d]: expected an integer >= 0, got %s",
                           fn, name, i, json_kind(d));
        }
        if (__builtin_mul_overflow(n_el, dims[i], &n_el))
            overflow = 1; /* a later 0 dim would not save it: refuse anyway */
    }
    size_t dsize = tb_dtype_size(dtype), n_bytes = 0;
    if (overflow || n_el < 0 || __builtin_mul_overflow((size_t)n_el, dsize, &n_bytes))
        return set_err(err, "%s: tensor %s: shape has too many elements", fn, name);

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return set_err(err, "%s: tensor %s: data_offsets: expected [begin, end], got %s", fn,
                       name, json_kind(off));
    int64_t begin = json_uint(off->child), end = json_uint(off->child->next);
    if (begin < 0 || end < 0)
        return set_err(err, "%s: tensor %s: data_offsets: expected integers >= 0", fn, name);
    if (begin > end)
        return set_err(err, "%s: tensor %s: data_offsets [%lld, %lld]: begin after end", fn,
                       name, (long long)begin, (long long)end);
    if ((uint64_t)end > dlen)
        return set_err(err,
                       "%s: tensor %s: data_offsets [%lld, %lld] run past the data "
                       "(%zu bytes; file truncated?)",
                       fn, name, (long long)begin, (long long)end, dlen);
    if ((uint64_t)(end - begin) != n_bytes)
        return set_err(err,
                       "%s: tensor %s: data_offsets span %lld bytes, but %lld x %s "
                       "elements need %zu",
                       fn, name, (long long)(end - begin), (long long)n_el,
                       tb_dtype_name(dtype), n_bytes);

    tb_tensor *t = add_tensor(w, name, f->path);
    if (!t)
        return set_err(err, "%s: tensor %s: out of memory", fn, name);
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, dims, (size_t)ndim * sizeof dims[0]);
    t->n_elements = n_el;
    t->data = data + begin;
    t->n_bytes = n_bytes;
    return 0;
}

typedef struct span {
    size_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Tensors t[first..n) of one file must not share bytes; empty ones
 * share none. */
static int check_overlaps(const tb_weights *w, size_t first, const unsigned char *data,
                          const char *fn, errbuf *err)
{
    size_t n = w->n - first, m = 0;
    if (n < 2)
        return 0;
    span *s = malloc(n * sizeof *s);
    if (!s)
        return set_err(err, "%s: out of memory checking %zu tensors", fn, n);
    for (size_t i = 0; i < n; i++) {
        const tb_tensor *t = &w->t[first + i];
        if (t->n_bytes == 0)
            continue;
        size_t b = (size_t)((const unsigned char *)t->data - data);
        s[m++] = (span){b, b + t->n_bytes, t->name};
    }
    qsort(s, m, sizeof *s, cmp_span);
    int rc = 0;
    const span *last = NULL; /* the one reaching furthest so far */
    for (size_t i = 0; i < m && !rc; i++) {
        if (last && s[i].begin < last->end)
            rc = set_err(err, "%s: tensor %s: bytes [%zu, %zu) overlap tensor %s [%zu, %zu)",
                         fn, s[i].name, s[i].begin, s[i].end, last->name, last->begin,
                         last->end);
        if (!last || s[i].end > last->end)
            last = &s[i];
    }
    free(s);
    return rc;
}

/* Check file f (its bytes already in f->base) and append its tensors. */
static int parse_file(tb_weights *w, const st_file *f, errbuf *err)
{
    const char *fn = f->path;
    if (f->len < 8)
        return set_err(err, "%s: %zu bytes, too short for the 8-byte header length", fn,
                       f->len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | f->base[i];
    if (hlen > f->len - 8)
        return set_err(err, "%s: header length %llu runs past the end of the file (%zu bytes)",
                       fn, (unsigned long long)hlen, f->len);
    if (hlen > MAX_HEADER)
        return set_err(err, "%s: header length %llu is over the %u-byte limit", fn,
                       (unsigned long long)hlen, MAX_HEADER);

    const char *json = (const char *)f->base + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &end, 0);
    if (!root)
        return set_err(err, "%s: header is not valid JSON (at byte %td of %llu)", fn,
                       end ? end - json : (ptrdiff_t)0, (unsigned long long)hlen);
    /* writers pad the header with spaces to align the data */
    for (const char *p = end; p < json + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return set_err(err, "%s: header has bytes after its JSON (at byte %td)", fn,
                           p - json);
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return set_err(err, "%s: header is not a JSON object", fn);
    }

    const unsigned char *data = f->base + 8 + hlen;
    size_t dlen = f->len - 8 - (size_t)hlen, first = w->n;
    int rc = 0;
    for (const cJSON *e = root->child; e && !rc; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        rc = parse_tensor(w, f, e, data, dlen, err);
    }
    if (!rc)
        rc = check_overlaps(w, first, data, fn, err);
    cJSON_Delete(root);
    return rc;
}

static int map_file(tb_weights *w, const char *path, errbuf *err)
{
    st_file *f = add_file(w, path);
    if (!f)
        return set_err(err, "%s: out of memory", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return set_err(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return set_err(err, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return set_err(err, "%s: not a regular file", path);
    }
    f->len = (size_t)st.st_size;
    if (f->len >= 8) { /* mmap refuses 0 bytes; parse_file reports short files */
        void *p = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return set_err(err, "%s: mmap: %s", path, strerror(e));
        }
        f->base = p;
        f->mapped = 1;
    }
    close(fd);
    return parse_file(w, f, err);
}

/* ------------------------------------------------------------ the table */

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const tb_tensor *)a)->name, ((const tb_tensor *)b)->name);
}

static int cmp_key(const void *key, const void *elem)
{
    return strcmp(key, ((const tb_tensor *)elem)->name);
}

/* Sort by name; a name twice (in one file or two) is ambiguous. */
static int finish(tb_weights *w, errbuf *err)
{
    if (w->n)
        qsort(w->t, w->n, sizeof *w->t, cmp_tensor);
    for (size_t i = 1; i < w->n; i++)
        if (strcmp(w->t[i - 1].name, w->t[i].name) == 0)
            return set_err(err, "%s: tensor %s: appears twice (also in %s)", w->t[i].file,
                           w->t[i].name, w->t[i - 1].file);
    return 0;
}

/* NULL when out of memory. */
static tb_weights *new_weights(const char *source)
{
    tb_weights *w = calloc(1, sizeof *w);
    if (w && !(w->source = strdup(source))) {
        free(w);
        w = NULL;
    }
    return w;
}

void tb_weights_close(tb_weights *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (size_t i = 0; i < w->n_files; i++) {
        if (w->files[i].mapped)
            munmap((void *)w->files[i].base, w->files[i].len);
        free(w->files[i].path);
    }
    free(w->t);
    free(w->files);
    free(w->source);
    free(w);
}

static int done(tb_weights *w, int rc, tb_weights **out)
{
    if (rc) {
        tb_weights_close(w);
        w = NULL;
    }
    *out = w;
    return rc;
}

int tb_weights_open_file(const char *path, tb_weights **out, char *err, size_t err_size)
{
    errbuf e = {err, err_size};
    tb_weights *w = new_weights(path);
    if (!w)
        return done(w, set_err(&e, "%s: out of memory", path), out);
    int rc = map_file(w, path, &e);
    if (!rc)
        rc = finish(w, &e);
    return done(w, rc, out);
}

int tb_weights_open_memory(const void *buf, size_t len, const char *name, tb_weights **out,
                           char *err, size_t err_size)
{
    errbuf e = {err, err_size};
    tb_weights *w = new_weights(name);
    st_file *f = w ? add_file(w, name) : NULL;
    if (!f)
        return done(w, set_err(&e, "%s: out of memory", name), out);
    f->base = buf;
    f->len = len;
    int rc = parse_file(w, f, &e);
    if (!rc)
        rc = finish(w, &e);
    return done(w, rc, out);
}

/* A shard name from the index: a file inside the model folder. */
static int bad_shard_name(const char *s)
{
    if (!*s || *s == '/')
        return 1;
    for (const char *p = s;; p++) { /* p: start of a path component */
        if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || p[2] == '\0'))
            return 1;
        p = strchr(p, '/');
        if (!p)
            return 0;
    }
}

/* model.safetensors.index.json: {"weight_map": {tensor: shard file}}. */
static int open_index(tb_weights *w, const char *dir, const char *index, const char *text,
                      errbuf *err)
{
    cJSON *root = cJSON_Parse(text);
    if (!root)
        return set_err(err, "%s: not valid JSON", index);
    int rc = 0;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map) || !map->child) {
        rc = set_err(err, "%s: weight_map: expected an object naming each tensor's shard",
                     index);
        goto out;
    }
    /* each shard once, in the order the index first names it */
    for (const cJSON *e = map->child; e && !rc; e = e->next) {
        if (!cJSON_IsString(e) || bad_shard_name(e->valuestring)) {
            rc = set_err(err, "%s: tensor %s: expected a shard file name in the folder, got %s",
                         index, e->string, cJSON_IsString(e) ? e->valuestring : json_kind(e));
            break;
        }
        char *path = tb_asprintf("%s/%s", dir, e->valuestring);
        if (!path) {
            rc = set_err(err, "%s: out of memory", index);
            break;
        }
        int seen = 0;
        for (size_t i = 0; i < w->n_files && !seen; i++)
            seen = strcmp(w->files[i].path, path) == 0;
        if (!seen && map_file(w, path, err)) {
            /* say why this shard was wanted */
            size_t len = err->size ? strlen(err->s) : 0;
            if (err->size > len + 1)
                snprintf(err->s + len, err->size - len, " (shard of tensor %s in %s)", e->string,
                         index);
            rc = -1;
        }
        free(path);
    }
    if (!rc)
        rc = finish(w, err);
    /* every tensor in the shard the index names */
    for (const cJSON *e = map->child; e && !rc; e = e->next) {
        const tb_tensor *t = tb_weights_find(w, e->string);
        char *path = tb_asprintf("%s/%s", dir, e->valuestring);
        if (!path)
            rc = set_err(err, "%s: out of memory", index);
        else if (!t)
            rc = set_err(err, "%s: tensor %s: not in its shard %s", index, e->string, path);
        else if (strcmp(t->file, path) != 0)
            rc = set_err(err, "%s: tensor %s: not in its shard %s (found in %s)", index,
                         e->string, path, t->file);
        free(path);
    }
out:
    cJSON_Delete(root);
    return rc;
}

int tb_weights_open(const char *model_dir, tb_weights **out, char *err, size_t err_size)
{
    errbuf e = {err, err_size};
    tb_weights *w = new_weights(model_dir);
    char *index = w ? tb_asprintf("%s/model.safetensors.index.json", model_dir) : NULL;
    if (!index)
        return done(w, set_err(&e, "%s: out of memory", model_dir), out);
    size_t len;
    char *text = tb_read_file_max(index, TB_READ_MAX_CONFIG, &len);
    int rc;
    if (text) {
        rc = strlen(text) != len ? set_err(&e, "%s: not valid JSON (NUL byte)", index)
                                 : open_index(w, model_dir, index, text, &e);
        free(text);
    } else if (errno != ENOENT) {
        char why[160];
        rc = set_err(&e, "%s: %s", index, tb_read_file_why(errno, TB_READ_MAX_CONFIG, "a safetensors index", why, sizeof why));
    } else {
        char *single = tb_asprintf("%s/model.safetensors", model_dir);
        rc = single ? map_file(w, single, &e) : set_err(&e, "%s: out of memory", model_dir);
        if (!rc)
            rc = finish(w, &e);
        free(single);
    }
    free(index);
    return done(w, rc, out);
}

size_t tb_weights_count(const tb_weights *w)
{
    return w->n;
}

const tb_tensor *tb_weights_at(const tb_weights *w, size_t i)
{
    return i < w->n ? &w->t[i] : NULL;
}

const tb_tensor *tb_weights_find(const tb_weights *w, const char *name)
{
    if (!w->n)
        return NULL;
    return bsearch(name, w->t, w->n, sizeof *w->t, cmp_key);
}

static void format_shape(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

int tb_weights_expect(const tb_weights *w, const char *name, int ndim, const int64_t *shape,
                      char *err, size_t err_size)
{
    errbuf e = {err, err_size};
    const tb_tensor *t = tb_weights_find(w, name);
    if (!t)
        return set_err(&e, "%s: tensor %s: not found", w->source, name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) /* shape may be NULL for a scalar */
        same = t->shape[i] == shape[i];
    if (same)
        return 0;
    char got[128], want[128];
    format_shape(got, sizeof got, t->ndim, t->shape);
    format_shape(want, sizeof want, ndim, shape);
    return set_err(&e, "%s: tensor %s: shape %s, expected %s", t->file, name, got, want);
}

/* ------------------------------------------------------------ conversions */

float tb_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float tb_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000 | mant << 13; /* inf, or NaN with its payload */
    } else if (exp != 0) {
        u = sign | (exp + 112) << 23 | mant << 13; /* rebias 15 -> 127 */
    } else if (mant == 0) {
        u = sign;
    } else {
        /* subnormal: mant x 2^-24, exact in float */
        float f = (float)mant * 0x1p-24f;
        memcpy(&u, &f, sizeof u);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t tb_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffff) > 0x7f800000) /* NaN: truncating could make it inf */
        return (uint16_t)(u >> 16 | 0x0040);
    u += 0x7fff + (u >> 16 & 1); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

/* Little-endian hosts only (x86-64, aarch64), as safetensors data is. */
void tb_to_f32(tb_dtype dt, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    switch (dt) {
    case TB_DT_F32:
        memcpy(dst, src, n * sizeof *dst);
        break;
    case TB_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2); /* may be unaligned */
            dst[i] = tb_bf16_to_f32(h);
        }
        break;
    case TB_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = tb_f16_to_f32(h);
        }
        break;
    }
}
