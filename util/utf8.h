/* utf8.h — UTF-8 text as the prompt-set loader and the scorers read it:
 * decoding one character, checking a whole string, and quoting a piece of
 * user text for a one-line error message.
 *
 * Valid UTF-8 here is RFC 3629's: shortest forms only, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF. */
#ifndef TB_UTF8_H
#define TB_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"
#include "utf8_valid.h" /* tb_utf8_decode, tb_utf8_valid */

/* Longest excerpt of user text quoted in a message, in bytes. */
#define TB_EXCERPT_MAX 40


/* Appends s[0..n) to b in double quotes, at most `max` bytes of it (cut
 * at a character boundary, then "..."): '"' and '\\' get a backslash,
 * control bytes, DEL and invalid UTF-8 become \xNN, so that a message
 * quoting it stays one readable line. */
void tb_utf8_append_quoted(tb_str *b, const char *s, size_t n, size_t max);

/* Appends s[0..n) to b as it is, but for control bytes (tab and, with
 * keep_newlines, '\n' aside), DEL and invalid UTF-8, which become \xNN:
 * a message that echoes a user's text cannot drive the terminal (ESC,
 * BEL) or start a line of its own. */
void tb_utf8_append_printable(tb_str *b, const char *s, size_t n, int keep_newlines);

/* What invalid UTF-8 in a plugin's text becomes (run/worker.c: errors,
 * describe(), last_error(), log lines): U+FFFD, the replacement
 * character, for each byte of a bad sequence -- valid inside a JSON
 * string, as \xNN is not. */
#define TB_UTF8_REPLACEMENT "\xef\xbf\xbd"

/* Copies s[0..n) (n bytes at most: stops at a NUL before) into dst[cap]
 * (cap >= 1) as valid UTF-8: each byte of an invalid sequence becomes
 * U+FFFD; cut at a character boundary to fit; always NUL-terminated.
 * Returns the bytes written (without the NUL). */
size_t tb_utf8_copy_valid(char *dst, size_t cap, const char *s, size_t n);

/* The same into a tb_str (appended), without a cut. */
void tb_utf8_append_valid(tb_str *b, const char *s, size_t n);

#endif
