/* util.h — the runner's helpers on top of util/strmem.h (strings and
 * memory, shared with the plugins): allocation that aborts on exhaustion
 * (the runner cannot do anything useful without memory; a plugin must
 * never abort, so plugins use strmem.h's checked calls instead), the
 * aborting tb_str appends, wall-clock timestamps, sha256. */
#ifndef TB_UTIL_H
#define TB_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "redact.h"
#include "strmem.h"

void *tb_xmalloc(size_t n);
void *tb_xcalloc(size_t n, size_t size);
void *tb_xrealloc(void *p, size_t n);
char *tb_xstrdup(const char *s);
char *tb_xstrndup(const char *s, size_t n);
char *tb_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* tb_str (strmem.h) appends that abort when out of memory. */
void tb_str_append(tb_str *b, const char *s);
void tb_str_appendn(tb_str *b, const char *s, size_t n);
void tb_str_appendf(tb_str *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tb_str_vappendf(tb_str *b, const char *fmt, va_list ap);
/* Detach the buffer (never NULL; "" when empty); b is reset. */
char *tb_str_take(tb_str *b);

/* tb_redact (redact.h) that aborts when out of memory; NULL for NULL. */
char *tb_xredact(const char *text, const char *const *secrets, size_t n);

/* Wall clock as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into buf[32]. */
void tb_utc_timestamp(char buf[32]);

/* SHA-256 of data as 64 lowercase hex digits + NUL. */
void tb_sha256_hex(const void *data, size_t n, char out[65]);

#endif
