/* utf8.c — see utf8.h. */
#include "utf8.h"

#include <string.h>

void tb_utf8_append_quoted(tb_str *b, const char *s, size_t n, size_t max)
{
    const unsigned char *u = (const unsigned char *)s;
    tb_str_append(b, "\"");
    size_t i = 0;
    while (i < n) {
        if (i >= max) {
            tb_str_append(b, "...");
            break;
        }
        uint32_t cp;
        size_t l = tb_utf8_decode(u + i, n - i, &cp);
        if (!l) {
            tb_str_appendf(b, "\\x%02x", u[i]);
            i++;
        } else if (cp == '"' || cp == '\\') {
            tb_str_appendf(b, "\\%c", (char)cp);
            i++;
        } else if (cp < 0x20 || cp == 0x7f) {
            tb_str_appendf(b, "\\x%02x", (unsigned)cp);
            i++;
        } else {
            tb_str_appendn(b, s + i, l);
            i += l;
        }
    }
    tb_str_append(b, "\"");
}

void tb_utf8_append_printable(tb_str *b, const char *s, size_t n, int keep_newlines)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* s[run, i) is still to append as it is */
    while (i < n) {
        uint32_t cp;
        size_t l = tb_utf8_decode(u + i, n - i, &cp);
        if (l && (cp >= 0x20 || cp == '\t' || (keep_newlines && cp == '\n')) && cp != 0x7f) {
            i += l;
            continue;
        }
        tb_str_appendn(b, s + run, i - run);
        tb_str_appendf(b, "\\x%02x", u[i]);
        run = ++i;
    }
    tb_str_appendn(b, s + run, n - run);
}

size_t tb_utf8_copy_valid(char *dst, size_t cap, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n && u[i]) {
        uint32_t cp;
        size_t l = tb_utf8_decode(u + i, n - i, &cp);
        const char *piece = l ? s + i : TB_UTF8_REPLACEMENT;
        size_t pl = l ? l : sizeof TB_UTF8_REPLACEMENT - 1;
        if (o + pl > cap - 1)
            break;
        memcpy(dst + o, piece, pl);
        o += pl;
        i += l ? l : 1;
    }
    dst[o] = '\0';
    return o;
}

void tb_utf8_append_valid(tb_str *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && u[i]) {
        uint32_t cp;
        size_t l = tb_utf8_decode(u + i, n - i, &cp);
        if (l)
            tb_str_appendn(b, s + i, l);
        else
            tb_str_append(b, TB_UTF8_REPLACEMENT);
        i += l ? l : 1;
    }
}
