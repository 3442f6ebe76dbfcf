/* redact.h — the one owner of redaction (issue 38, item 4): given the
 * secret values a run holds (TB_OPTF_SECRET options' values, a plugin's
 * API key) and a text, every occurrence of each secret and every URL's
 * credentials (scheme://USER:PASS@host) become "(secret)". Applied where
 * errors enter the store, where logs and errors are printed, where reports
 * render and where the suite text is stored; the http plugin applies it
 * to its own messages, with the key and secret headers it sends. Part of
 * tokbench-util: nothing here aborts.
 *
 * A secret shorter than TB_REDACT_MIN bytes is not searched for (it would
 * match all over a text; it is still never stored as an option's value).
 * A text cut in the middle of a secret (a message cut to its buffer) ends
 * with a prefix of it: a trailing prefix of TB_REDACT_MIN bytes or more
 * is redacted too. */
#ifndef TB_REDACT_H
#define TB_REDACT_H

#include <stddef.h>

#define TB_REDACTED "(secret)"
#define TB_REDACT_MIN 4

/* A malloc'd copy of text, redacted; NULL when out of memory (or text is
 * NULL). */
char *tb_redact(const char *text, const char *const *secrets, size_t n);

/* Redact buf (a NUL-terminated text in size bytes) in place, cut to size.
 * When out of memory the text is replaced by "(redacted: out of memory)":
 * never left unredacted. */
void tb_redact_buf(char *buf, size_t size, const char *const *secrets, size_t n);

#endif
