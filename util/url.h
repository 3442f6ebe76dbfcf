/* url.h — the one check of a server's base URL (`tokbench bench --url`,
 * the http plugin's `url`, docs/PLUGINS.md): what the plugin appends its
 * endpoint path to, so it must end where a path can follow. Part of
 * tokbench-util (the runner and the plugins): nothing here aborts. */
#ifndef TB_URL_H
#define TB_URL_H

#include <stddef.h>

/* 0 when url is http:// or https://, a host (a name, an IPv4 address or
 * an [IPv6] one), an optional port 1..65535 and an optional path, with
 * no query ("?"), no fragment ("#"), no space and no control character;
 * *credentials (may be NULL) says whether it holds USER[:PASS]@ before
 * the host. -1 with why: a reason that quotes no part of the URL (it may
 * hold a password), for the caller to put after the option's name. */
int tb_url_check(const char *url, int *credentials, char *why, size_t size);

#endif
