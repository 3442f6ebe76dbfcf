/* util.c — see util.h. */
#define _GNU_SOURCE
#include "util.h"

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
    char *p = tb_strndup(s, n);
    if (!p)
        out_of_memory(n + 1);
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

void tb_str_appendn(tb_str *b, const char *s, size_t n)
{
    if (tb_str_try_appendn(b, s, n) != 0)
        out_of_memory(b->len + n + 1);
}

void tb_str_append(tb_str *b, const char *s)
{
    tb_str_appendn(b, s, strlen(s));
}

void tb_str_vappendf(tb_str *b, const char *fmt, va_list ap)
{
    if (tb_str_try_vappendf(b, fmt, ap) != 0)
        out_of_memory(b->len);
}

void tb_str_appendf(tb_str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tb_str_vappendf(b, fmt, ap);
    va_end(ap);
}

char *tb_str_take(tb_str *b)
{
    size_t len = b->len;
    char *s = tb_str_try_take(b);
    if (!s)
        out_of_memory(len + 1);
    return s;
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

char *tb_xredact(const char *text, const char *const *secrets, size_t n)
{
    if (!text)
        return NULL;
    char *r = tb_redact(text, secrets, n);
    if (!r)
        out_of_memory(strlen(text));
    return r;
}
