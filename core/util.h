/* util.h — small helpers shared by the core: allocation that aborts on
 * exhaustion (the runner cannot do anything useful without memory), a
 * growable string, the monotonic clock, sha256, file reading. */
#ifndef TB_UTIL_H
#define TB_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define TB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

void *tb_xmalloc(size_t n);
void *tb_xcalloc(size_t n, size_t size);
void *tb_xrealloc(void *p, size_t n);
char *tb_xstrdup(const char *s);
char *tb_xstrndup(const char *s, size_t n);
char *tb_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Growable NUL-terminated string. Zero-initialize to start. */
typedef struct tb_str {
    char *s;
    size_t len, cap;
} tb_str;

void tb_str_append(tb_str *b, const char *s);
void tb_str_appendn(tb_str *b, const char *s, size_t n);
void tb_str_appendf(tb_str *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tb_str_vappendf(tb_str *b, const char *fmt, va_list ap);
/* Detach the buffer (never NULL; "" when empty); b is reset. */
char *tb_str_take(tb_str *b);
void tb_str_free(tb_str *b);

/* CLOCK_MONOTONIC in ns. */
int64_t tb_now_ns(void);
/* Wall clock as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into buf[32]. */
void tb_utc_timestamp(char buf[32]);

/* SHA-256 of data as 64 lowercase hex digits + NUL. */
void tb_sha256_hex(const void *data, size_t n, char out[65]);

/* Read a whole file; returns malloc'd NUL-terminated text (length in *len
 * if len != NULL) or NULL with errno set. */
char *tb_read_file(const char *path, size_t *len);

/* Trim ASCII whitespace in place; returns s advanced past leading space. */
char *tb_trim(char *s);

/* Copy src into dst[size], truncating, always NUL-terminated. */
void tb_strlcpy(char *dst, const char *src, size_t size);

#endif
