/* strmem.c — see strmem.h. */
#define _POSIX_C_SOURCE 200809L
#include "strmem.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void *tb_realloc_array(void *p, size_t n, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, bytes ? bytes : 1);
}

char *tb_strndup(const char *s, size_t n)
{
    if (n == SIZE_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

struct tb_strpool_block {
    struct tb_strpool_block *next;
    char data[];
};

enum { STRPOOL_BLOCK = 64 << 10 };

char *tb_strpool_dup(tb_strpool *p, const char *s, size_t n)
{
    if (n >= SIZE_MAX - sizeof(struct tb_strpool_block) - STRPOOL_BLOCK) {
        errno = ENOMEM;
        return NULL;
    }
    char *dst;
    if (p->head && p->cap - p->used > n) {
        dst = p->head->data + p->used;
        p->used += n + 1;
    } else {
        size_t cap = n + 1 > STRPOOL_BLOCK ? n + 1 : STRPOOL_BLOCK;
        struct tb_strpool_block *b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        dst = b->data;
        if (cap > STRPOOL_BLOCK && p->head) {
            /* a long string's own block, behind the one being filled */
            b->next = p->head->next;
            p->head->next = b;
        } else {
            b->next = p->head;
            p->head = b;
            p->used = n + 1;
            p->cap = cap;
        }
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
    return dst;
}

void tb_strpool_free(tb_strpool *p)
{
    for (struct tb_strpool_block *b = p->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    *p = (tb_strpool){0};
}

char *tb_vasprintf(const char *fmt, va_list ap)
{
    tb_str b = {0};
    tb_str_try_vappendf(&b, fmt, ap);
    return tb_str_try_take(&b);
}

char *tb_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = tb_vasprintf(fmt, ap);
    va_end(ap);
    return s;
}

/* Room for `extra` more bytes and the NUL; -1 (b->failed set) if none. */
static int str_reserve(tb_str *b, size_t extra)
{
    if (b->failed)
        return -1;
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || __builtin_add_overflow(need, 1, &need))
        goto fail;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        if (__builtin_mul_overflow(cap, 2, &cap))
            goto fail;
    char *s = realloc(b->s, cap);
    if (!s)
        goto fail;
    b->s = s;
    b->cap = cap;
    return 0;
fail:
    b->failed = true;
    errno = ENOMEM;
    return -1;
}

int tb_str_try_appendn(tb_str *b, const char *s, size_t n)
{
    if (str_reserve(b, n) != 0)
        return -1;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

int tb_str_try_append(tb_str *b, const char *s)
{
    return tb_str_try_appendn(b, s, strlen(s));
}

/* gcc 12 with -fsanitize=undefined reports a spurious "null format string"
 * for vsnprintf(NULL, 0, ...) here (-Wformat-truncation). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
int tb_str_try_vappendf(tb_str *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) /* an encoding error: nothing appended, as before */
        return b->failed ? -1 : 0;
    if (str_reserve(b, (size_t)n) != 0)
        return -1;
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}
#pragma GCC diagnostic pop

int tb_str_try_appendf(tb_str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tb_str_try_vappendf(b, fmt, ap);
    va_end(ap);
    return rc;
}

char *tb_str_try_take(tb_str *b)
{
    char *s = NULL;
    if (!b->failed)
        s = b->s ? b->s : tb_strndup("", 0);
    else
        free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->failed = false;
    return s;
}

void tb_str_free(tb_str *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

int64_t tb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* errno for a file that is not a regular one. */
static int not_regular(mode_t m)
{
    return S_ISDIR(m) ? EISDIR : S_ISCHR(m) || S_ISBLK(m) ? ENODEV : ESPIPE;
}

char *tb_read_file_max(const char *path, size_t max, size_t *len)
{
    /* stat first: a FIFO or device is refused before any open (opening a
     * FIFO for reading blocks until a writer comes); then open without
     * blocking and check again what was opened, in case it was swapped. */
    struct stat st;
    if (stat(path, &st) != 0)
        return NULL;
    if (!S_ISREG(st.st_mode)) {
        errno = not_regular(st.st_mode);
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    int e = 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (fstat(fd, &st) != 0) {
        e = errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        e = not_regular(st.st_mode);
        goto out;
    }
    if ((uintmax_t)st.st_size > max) {
        e = EFBIG;
        goto out;
    }
    /* st_size is a hint (0 for /proc files, and a file may grow): read to
     * the end, never past max + 1 bytes. Room for the NUL and one byte
     * more, so a file of its size ends without growing the buffer. */
    cap = (size_t)st.st_size + 2 < 4096 ? 4096 : (size_t)st.st_size + 2;
    for (;;) {
        if (n + 1 >= cap) {
            size_t want = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
            char *nb = realloc(buf, want);
            if (!nb) {
                e = ENOMEM;
                goto out;
            }
            buf = nb, cap = want;
        } else if (!buf && !(buf = malloc(cap))) {
            e = ENOMEM;
            goto out;
        }
        size_t room = cap - 1 - n;
        if (room > max - n + 1)
            room = max - n + 1; /* one byte past max tells it is too large */
        ssize_t got = read(fd, buf + n, room);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            e = EIO;
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > max) {
            e = EFBIG;
            goto out;
        }
    }
    buf[n] = '\0';
out:
    close(fd);
    if (e) {
        free(buf);
        errno = e;
        return NULL;
    }
    if (len)
        *len = n;
    return buf;
}

char *tb_read_file(const char *path, size_t *len)
{
    return tb_read_file_max(path, SIZE_MAX - 1, len);
}

const char *tb_read_file_why(int err, size_t max, const char *what, char *buf, size_t size)
{
    if (err == EFBIG) {
        if (max % (1u << 30) == 0)
            snprintf(buf, size, "larger than the limit of %zu GiB for %s", max >> 30, what);
        else if (max % (1u << 20) == 0)
            snprintf(buf, size, "larger than the limit of %zu MiB for %s", max >> 20, what);
        else
            snprintf(buf, size, "larger than the limit of %zu bytes for %s", max, what);
    } else if (err == EISDIR) {
        snprintf(buf, size, "a folder, not a regular file (expected %s)", what);
    } else if (err == ENODEV) {
        snprintf(buf, size, "a device, not a regular file (expected %s)", what);
    } else if (err == ESPIPE) {
        snprintf(buf, size, "a FIFO or socket, not a regular file (expected %s)", what);
    } else if (err == ENOMEM) {
        snprintf(buf, size, "out of memory");
    } else {
        snprintf(buf, size, "%s", strerror(err));
    }
    return buf;
}

char *tb_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

void tb_strlcpy(char *dst, const char *src, size_t size)
{
    if (size == 0)
        return;
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}
