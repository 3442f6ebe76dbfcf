/* url.c — see url.h. */
#include "url.h"

#include <stdio.h>
#include <string.h>

int tb_url_check(const char *url, int *credentials, char *why, size_t size)
{
    if (credentials)
        *credentials = 0;
    const char *p;
    if (strncmp(url, "http://", 7) == 0)
        p = url + 7;
    else if (strncmp(url, "https://", 8) == 0)
        p = url + 8;
    else {
        snprintf(why, size, "expected http://HOST[:PORT][/PATH] or https://...");
        return -1;
    }
    for (const char *q = url; *q; q++)
        if ((unsigned char)*q <= 0x20 || *q == 0x7f) {
            snprintf(why, size, "a space or control character: not a URL");
            return -1;
        }
    /* A query or fragment would come before the endpoint's path the
     * plugin appends ("/?x=1" + "/v1/completions"). */
    const char *qf = strpbrk(p, "?#");
    if (qf) {
        snprintf(why, size, "a %s (\"%c...\") is not taken: /v1/completions or /v1/chat/completions is appended to "
                            "the URL, so it must end with the host, the port or a path",
                 *qf == '?' ? "query" : "fragment", *qf);
        return -1;
    }
    size_t alen = strcspn(p, "/");
    const char *at = NULL;
    for (const char *q = p; q < p + alen; q++)
        if (*q == '@')
            at = q;
    if (at) {
        if (credentials)
            *credentials = 1;
        p = at + 1;
        alen = strcspn(p, "/");
    }
    const char *end = p + alen, *host_end;
    if (*p == '[') { /* an IPv6 address */
        const char *close = memchr(p, ']', alen);
        if (!close || close == p + 1 || strspn(p + 1, "0123456789abcdefABCDEF:.") != (size_t)(close - p - 1)) {
            snprintf(why, size, "expected an IPv6 host as [ADDRESS] (hex digits, ':' and '.')");
            return -1;
        }
        host_end = close + 1;
        if (host_end < end && *host_end != ':') {
            snprintf(why, size, "expected ':PORT' or a path after the IPv6 host's ']'");
            return -1;
        }
    } else {
        host_end = memchr(p, ':', alen);
        if (!host_end)
            host_end = end;
        if (host_end == p) {
            snprintf(why, size, "no host (expected http://HOST[:PORT][/PATH])");
            return -1;
        }
        for (const char *q = p; q < host_end; q++)
            if (!((unsigned char)*q >= 0x80 || strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_~%",
                                                        *q))) {
                snprintf(why, size, "the host has a '%c' (letters, digits, '.', '-', '_', '~' and %%-escapes)", *q);
                return -1;
            }
    }
    if (host_end < end) { /* ":PORT" */
        const char *d = host_end + 1;
        size_t nd = (size_t)(end - d);
        long port = 0;
        int digits = nd > 0 && nd <= 5 && strspn(d, "0123456789") >= nd;
        for (size_t i = 0; digits && i < nd; i++)
            port = port * 10 + (d[i] - '0');
        if (!digits || port < 1 || port > 65535) {
            if (strchr(url, '@')) /* a password with a '/' ends the authority early: never quoted */
                snprintf(why, size, "the port: expected a number in 1..65535");
            else
                snprintf(why, size, "the port \"%.*s\": expected a number in 1..65535", nd > 8 ? 8 : (int)nd, d);
            return -1;
        }
    }
    return 0;
}
