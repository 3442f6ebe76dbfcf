/* redact.c — see redact.h. */
#include "redact.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmem.h"

/* The end of a URL's authority starting at s (after "://"). */
static size_t authority_len(const char *s)
{
    return strcspn(s, "/?#\\ \t\r\n\"'<>`");
}

/* Length of the longest secret at s, 0: none. */
static size_t secret_at(const char *s, const char *const *secrets, size_t n)
{
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        const char *k = secrets[i];
        if (!k || k[0] != s[0])
            continue;
        size_t len = strlen(k);
        if (len >= TB_REDACT_MIN && len > best && strncmp(s, k, len) == 0)
            best = len;
    }
    return best;
}

/* Is s (left bytes to its end) a prefix of a secret, TB_REDACT_MIN bytes
 * or more? */
static int cut_secret(const char *s, size_t left, const char *const *secrets, size_t n)
{
    if (left < TB_REDACT_MIN)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (secrets[i] && strlen(secrets[i]) > left && strncmp(secrets[i], s, left) == 0)
            return 1;
    return 0;
}

char *tb_redact(const char *text, const char *const *secrets, size_t n)
{
    if (!text)
        return NULL;
    size_t total = strlen(text), longest = 0;
    for (size_t i = 0; i < n; i++)
        if (secrets[i] && strlen(secrets[i]) > longest)
            longest = strlen(secrets[i]);
    tb_str out = {0};
    const char *p = text, *run = text; /* run: bytes kept as they are, not yet copied */
    while (*p) {
        size_t k, left = total - (size_t)(p - text);
        if (p[0] == ':' && p[1] == '/' && p[2] == '/') { /* scheme://USER[:PASS]@host */
            size_t a = authority_len(p + 3);
            const char *at = NULL;
            for (const char *q = p + 3; q < p + 3 + a; q++)
                if (*q == '@')
                    at = q;
            if (at && at > p + 3) {
                tb_str_try_appendn(&out, run, (size_t)(p - run));
                tb_str_try_append(&out, "://" TB_REDACTED);
                p = run = at;
                continue;
            }
            p += 3;
        } else if ((k = secret_at(p, secrets, n)) > 0) {
            tb_str_try_appendn(&out, run, (size_t)(p - run));
            tb_str_try_append(&out, TB_REDACTED);
            p = run = p + k;
        } else if (left < longest && cut_secret(p, left, secrets, n)) {
            tb_str_try_appendn(&out, run, (size_t)(p - run));
            tb_str_try_append(&out, TB_REDACTED);
            p = run = text + total;
        } else {
            p++;
        }
    }
    tb_str_try_appendn(&out, run, (size_t)(p - run));
    return tb_str_try_take(&out);
}

void tb_redact_buf(char *buf, size_t size, const char *const *secrets, size_t n)
{
    if (!buf || !size)
        return;
    char *r = tb_redact(buf, secrets, n);
    tb_strlcpy(buf, r ? r : "(redacted: out of memory)", size);
    free(r);
}
