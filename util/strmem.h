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

/* A pool of string copies that live until the pool is freed, carved from
 * blocks of 64 KiB (a longer string gets a block of its own): a table of
 * many short strings (a tokenizer's vocabulary) costs a few allocations,
 * not one a string. Zero-initialize to start. */
typedef struct tb_strpool {
    struct tb_strpool_block *head; /* the block being filled; a list */
    size_t used, cap;              /* bytes of head's data */
} tb_strpool;

/* A copy of s[0, n) plus a NUL in the pool, or NULL (errno ENOMEM, the
 * pool as it was). */
char *tb_strpool_dup(tb_strpool *p, const char *s, size_t n);
/* Free every copy; p is reset. */
void tb_strpool_free(tb_strpool *p);

/* CLOCK_MONOTONIC in ns. */
int64_t tb_now_ns(void);

/* Read a whole regular file of at most `max` bytes: malloc'd
 * NUL-terminated text (length in *len if len != NULL), or NULL with errno
 * set: EFBIG when it holds more than max bytes; EISDIR (a folder), ENODEV
 * (a device) or ESPIPE (a FIFO or socket) when it is not a regular file,
 * refused before it is opened for reading, so a FIFO cannot block; ENOMEM
 * when out of memory, EIO on a read error, else open's. Every read of a
 * file tokbench is given goes through it, with its kind's limit below. */
char *tb_read_file_max(const char *path, size_t max, size_t *len);
/* tb_read_file_max without a size limit: files tokbench trusts (its own
 * test data, /proc). */
char *tb_read_file(const char *path, size_t *len);
/* Why tb_read_file_max failed (its errno), in words for a message that
 * names the file: "not a regular file (a FIFO or socket)", "larger than
 * the limit of 1 MiB for a suite file", or strerror's. `what` names the
 * kind of file ("a suite file"). Written into buf, which is returned. */
const char *tb_read_file_why(int err, size_t max, const char *what, char *buf, size_t size);

/* The limits of tb_read_file_max by kind of file: far above any real one,
 * far below what would exhaust memory. */
#define TB_READ_MAX_SUITE ((size_t)1 << 20)       /* a suite INI file */
#define TB_READ_MAX_PROMPTS ((size_t)256 << 20)   /* a [prompts] JSONL set */
#define TB_READ_MAX_CONFIG ((size_t)16 << 20)     /* a model's config.json and its other small JSON files */
#define TB_READ_MAX_TOKENIZER ((size_t)256 << 20) /* tokenizer.json */

/* Trim ASCII whitespace in place; returns s advanced past leading space. */
char *tb_trim(char *s);

/* Copy src into dst[size], truncating, always NUL-terminated. */
void tb_strlcpy(char *dst, const char *src, size_t size);

#endif
