/* strmem.h — strings and memory for every part of tokbench, the runner and
 * the plugins alike (the tokbench-util library). Nothing here aborts: an
 * allocation that fails returns NULL or -1 with errno = ENOMEM and leaves
 * its inputs as they were, so a plugin can report TB_ERR_NO_MEMORY (a
 * plugin must never abort, docs/PLUGINS.md).
 *
 * The runner's aborting wrappers (tb_xmalloc, tb_str_append, ...) and what
 * only the runner needs (sha256, wall-clock timestamps) are in core/util.h. */
#ifndef TB_STRMEM_H
#define TB_STRMEM_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* realloc(p, n * size) with the product checked: NULL (p untouched, errno
 * ENOMEM) on overflow or exhaustion. n * size == 0 gives a 1-byte block. */
void *tb_realloc_array(void *p, size_t n, size_t size);
/* A copy of s[0, n) plus a NUL, or NULL. */
char *tb_strndup(const char *s, size_t n);
/* printf into a new string, or NULL. */
char *tb_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *tb_vasprintf(const char *fmt, va_list ap);

/* Growable NUL-terminated string. Zero-initialize to start.
 *
 * An append that cannot allocate returns -1, leaves the text as it was and
 * sets `failed`; once failed, every later append fails too, so a sequence
 * of appends can be checked once, at the end (b.failed, or a NULL from
 * tb_str_try_take). */
typedef struct tb_str {
    char *s; /* NULL until the first append */
    size_t len, cap;
    bool failed;
} tb_str;

int tb_str_try_appendn(tb_str *b, const char *s, size_t n);
int tb_str_try_append(tb_str *b, const char *s);
int tb_str_try_appendf(tb_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tb_str_try_vappendf(tb_str *b, const char *fmt, va_list ap);
/* Detach the text ("" when empty); b is reset. NULL when an append failed
 * (the text is freed) or "" cannot be allocated. */
char *tb_str_try_take(tb_str *b);
void tb_str_free(tb_str *b);

/* CLOCK_MONOTONIC in ns. */
int64_t tb_now_ns(void);

/* Read a whole file: malloc'd NUL-terminated text (length in *len if len
 * != NULL), or NULL with errno set (ENOMEM when out of memory, EIO on a
 * read error, else fopen's). */
char *tb_read_file(const char *path, size_t *len);

/* Trim ASCII whitespace in place; returns s advanced past leading space. */
char *tb_trim(char *s);

/* Copy src into dst[size], truncating, always NUL-terminated. */
void tb_strlcpy(char *dst, const char *src, size_t size);

#endif
