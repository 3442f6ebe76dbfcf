/* json_options.h — the http backend's options whose values are JSON text
 * from the suite file (plugins/http/http.c): `extra_json`, merged into
 * every request body, and `headers`/`secret_headers`, sent as request
 * header lines. http.c checks them at load (so a bad value fails there,
 * with the suite's file:line) and uses them through these same functions;
 * they depend on the text alone, so tests/fuzz/fuzz_http_options.c drives
 * exactly the plugin's code. */
#ifndef TB_HTTP_JSON_OPTIONS_H
#define TB_HTTP_JSON_OPTIONS_H

#include <cjson/cJSON.h>

/* extra_json: the object text holds (cJSON_Delete it), or NULL when text
 * is not one JSON object with nothing but whitespace after it. */
cJSON *tb_http_extra_json(const char *text);

/* Put each member of extra (an object from tb_http_extra_json) into the
 * request body, replacing a field of the same name: the suite's fields
 * win. With duplicate names in extra, the last one wins. 0, or -1 when
 * out of memory (body then lacks some of them). */
int tb_http_extra_merge(cJSON *body, const cJSON *extra);

/* headers, secret_headers: text is a JSON object of strings (nothing but
 * whitespace after it), each name an HTTP token (RFC 9110: letters,
 * digits and !#$%&'*+-.^_`|~) and each value free of control characters
 * but tab, so that no value can end its line or start another header.
 * Returns the number of header lines "Name: value" and sets *lines to a
 * malloc'd array of malloc'd lines (0 and NULL for ""), or -1 (and NULL)
 * when text is not such an object or memory runs out. */
int tb_http_header_lines(const char *text, char ***lines);

/* Is s a valid HTTP field value (no control character but tab)? What an
 * API key must be before it goes into the Authorization header. */
int tb_http_field_value_ok(const char *s);

/* Free what tb_http_header_lines returned, wiping each line first
 * (the values of secret_headers live in them). */
void tb_http_header_lines_free(char **lines, int n);

#endif
