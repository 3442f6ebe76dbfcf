/* tty_safe.c — see tty_safe.h. */
#define _GNU_SOURCE
#include "tty_safe.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "utf8.h"
#include "util.h"

/* A UTF-8 sequence cut by a write's end waits for the next write: its
 * first bytes (at most 3). */
typedef struct tty_stream {
    char carry[4];
    size_t n_carry;
} tty_stream;

static int write_all(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Bytes at the end of s[0..n) that begin a UTF-8 sequence not complete
 * yet (a lead byte and fewer continuation bytes than it announces): 0-3. */
static size_t cut_tail(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

static int escaped(const char *s, size_t n)
{
    tb_str b = {0};
    tb_str_append(&b, "");
    tb_utf8_append_printable(&b, s, n, 1);
    int rc = write_all(b.s, b.len);
    tb_str_free(&b);
    return rc;
}

static ssize_t tty_write(void *cookie, const char *buf, size_t size)
{
    tty_stream *t = cookie;
    if (size == 0)
        return 0;
    tb_str all = {0};
    tb_str_appendn(&all, t->carry, t->n_carry);
    tb_str_appendn(&all, buf, size);
    size_t keep = cut_tail(all.s, all.len);
    int rc = escaped(all.s, all.len - keep);
    memcpy(t->carry, all.s + all.len - keep, keep);
    t->n_carry = keep;
    tb_str_free(&all);
    return rc == 0 ? (ssize_t)size : -1;
}

static int tty_close(void *cookie)
{
    tty_stream *t = cookie;
    int rc = t->n_carry ? escaped(t->carry, t->n_carry) : 0; /* a sequence never completed: bytes, escaped */
    t->n_carry = 0;
    return rc;
}

void cli_stdout_tty_safe(void)
{
    static tty_stream state;
    if (!isatty(STDOUT_FILENO))
        return;
    fflush(stdout);
    cookie_io_functions_t io = {.write = tty_write, .close = tty_close};
    FILE *f = fopencookie(&state, "w", io);
    if (!f)
        return;
    setvbuf(f, NULL, _IOLBF, BUFSIZ);
    stdout = f;
}
