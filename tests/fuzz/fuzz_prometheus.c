/* fuzz_prometheus.c — libFuzzer target for core/telemetry.c's reader of
 * the Prometheus text exposition format (what a server's /metrics sends).
 * Built and run by tests/fuzz/run.sh.
 *
 * The input is a /metrics body, cut into lines as the sampler cuts it.
 * Every line is parsed from a buffer of exactly its length (no NUL after
 * it: a read past the line is a sanitizer error). For every line:
 *   - the answer is 1 (a sample), 0 (nothing to keep) or -1 (malformed,
 *     with a reason);
 *   - a sample's name is a valid metric name, NUL-terminated in its
 *     buffer; its labels are NUL-terminated and each is k="v" with the
 *     value's quotes escaped;
 *   - the same line parsed twice gives the same answer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "telemetry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int valid_name(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == ':'))
            return 0;
    return 1;
}

/* k="v",k2="v2": every quote inside a value escaped */
static int valid_labels(const char *s)
{
    while (*s) {
        const char *eq = strchr(s, '=');
        if (!eq || eq == s || eq[1] != '"')
            return 0;
        const char *p = eq + 2;
        while (*p && *p != '"')
            p += *p == '\\' && p[1] ? 2 : 1;
        if (*p != '"')
            return 0;
        p++;
        if (*p == ',')
            p++;
        else if (*p)
            return 0;
        s = p;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (size_t at = 0; at < size;) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
        char *line = malloc(len ? len : 1);
        if (!line)
            abort();
        memcpy(line, data + at, len);
        at += len + 1;
        tb_prom_sample s, t;
        char why[160] = "", why2[160] = "";
        memset(&s, 0x5a, sizeof s);
        int r = tb_prom_parse_line(line, len, &s, why, sizeof why);
        int r2 = tb_prom_parse_line(line, len, &t, why2, sizeof why2);
        free(line);
        if (r != r2 || r < -1 || r > 1)
            abort();
        if (r == -1 && (!why[0] || !memchr(why, '\0', sizeof why)))
            abort();
        if (r == 1) {
            if (!memchr(s.name, '\0', sizeof s.name) || !memchr(s.labels, '\0', sizeof s.labels))
                abort();
            if (!valid_name(s.name) || !valid_labels(s.labels))
                abort();
            if (strcmp(s.name, t.name) || strcmp(s.labels, t.labels))
                abort();
        }
    }
    return 0;
}
