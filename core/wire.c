/* wire.c — see wire.h. */
#define _GNU_SOURCE
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int tb_wire_send(int fd, uint32_t type, const void *payload, size_t len)
{
    uint32_t hdr[2] = {type, (uint32_t)len};
    if (len > UINT32_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    if (write_all(fd, hdr, sizeof hdr) != 0)
        return -1;
    return len ? write_all(fd, payload, len) : 0;
}

/* Read exactly n bytes with the deadline; same codes as tb_wire_recv. */
static int read_exact(int fd, char *p, size_t n, int64_t deadline_ns, volatile int *interrupted)
{
    while (n) {
        if (interrupted && *interrupted)
            return 3;
        int timeout_ms = -1;
        if (deadline_ns) {
            int64_t left = deadline_ns - tb_now_ns();
            if (left <= 0)
                return 2;
            timeout_ms = (int)(left / 1000000 + 1);
        }
        /* Wake at least every 200 ms to notice interruption. */
        if (interrupted && (timeout_ms < 0 || timeout_ms > 200))
            timeout_ms = 200;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, timeout_ms);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            continue;
        ssize_t got = read(fd, p, n);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        if (got == 0)
            return 1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int tb_wire_recv(int fd, int64_t deadline_ns, volatile int *interrupted, uint32_t *type, char **buf,
                 size_t *len)
{
    uint32_t hdr[2];
    *buf = NULL;
    *len = 0;
    int rc = read_exact(fd, (char *)hdr, sizeof hdr, deadline_ns, interrupted);
    if (rc)
        return rc;
    *type = hdr[0];
    *len = hdr[1];
    *buf = tb_xmalloc(*len + 1);
    rc = read_exact(fd, *buf, *len, deadline_ns, interrupted);
    if (rc) {
        free(*buf);
        *buf = NULL;
        return rc;
    }
    (*buf)[*len] = '\0';
    return 0;
}
