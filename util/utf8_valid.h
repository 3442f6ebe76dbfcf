/* utf8_valid.h — UTF-8 validity (RFC 3629's: shortest forms only, no
 * surrogates, nothing above U+10FFFF), the one definition for the runner
 * (utf8.h includes it) and the plugins alike: part of tokbench-util,
 * nothing here aborts. */
#ifndef TB_UTF8_VALID_H
#define TB_UTF8_VALID_H

#include <stddef.h>
#include <stdint.h>

/* Decodes the sequence at s[0..n) (n >= 1): its length in bytes (1-4) and
 * *cp, or 0 when it is not valid UTF-8 (or is cut off by n). */
size_t tb_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Whether s[0..n) is valid UTF-8; when not, *bad (if bad is not NULL) is
 * the byte offset of the first bad sequence. */
int tb_utf8_valid(const char *s, size_t n, size_t *bad);

#endif
