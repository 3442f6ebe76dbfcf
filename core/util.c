/* util.c — see util.h. */
#define _GNU_SOURCE
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void out_of_memory(size_t n)
{
    fprintf(stderr, "tokbench: out of memory (allocating %zu bytes)\n", n);
    abort();
}

void *tb_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

void *tb_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        out_of_memory(n * size);
    return p;
}

void *tb_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory(n);
    return q;
}

char *tb_xstrdup(const char *s)
{
    return tb_xstrndup(s, strlen(s));
}

char *tb_xstrndup(const char *s, size_t n)
{
    char *p = tb_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *tb_xasprintf(const char *fmt, ...)
{
    tb_str b = {0};
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(&b, fmt, ap);
    va_end(ap);
    return tb_str_take(&b);
}

static void str_reserve(tb_str *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    b->s = tb_xrealloc(b->s, cap);
    b->cap = cap;
}

void tb_str_appendn(tb_str *b, const char *s, size_t n)
{
    str_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void tb_str_append(tb_str *b, const char *s)
{
    tb_str_appendn(b, s, strlen(s));
}

/* gcc 12 with -fsanitize=undefined reports a spurious "null format string"
 * for vsnprintf(NULL, 0, ...) here (-Wformat-truncation). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
void tb_str_vappendf(tb_str *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return;
    str_reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

#pragma GCC diagnostic pop

void tb_str_appendf(tb_str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(b, fmt, ap);
    va_end(ap);
}

char *tb_str_take(tb_str *b)
{
    char *s = b->s ? b->s : tb_xstrdup("");
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

void tb_str_free(tb_str *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

int64_t tb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void tb_utc_timestamp(char buf[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, 32 - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

void tb_sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (!EVP_Digest(data, n, md, &md_len, EVP_sha256(), NULL) || md_len != 32) {
        memset(out, '0', 64);
        out[64] = '\0';
        return;
    }
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

char *tb_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    tb_str b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        tb_str_appendn(&b, chunk, n);
    int err = ferror(f);
    fclose(f);
    if (err) {
        tb_str_free(&b);
        errno = EIO;
        return NULL;
    }
    if (len)
        *len = b.len;
    return tb_str_take(&b);
}

char *tb_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

void tb_strlcpy(char *dst, const char *src, size_t size)
{
    if (size == 0)
        return;
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}
