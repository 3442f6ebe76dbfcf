/* test_redact.c — util/redact.c, the one owner of redaction (issue 38,
 * item 4): secrets anywhere in a text, the longest first, a secret cut at
 * the text's end, URL credentials, short values left alone, the in-place
 * form cut to its buffer. */
#include <stdlib.h>

#include "check.h"
#include "redact.h"

static void eq(const char *text, const char *const *secrets, size_t n, const char *want)
{
    char *got = tb_redact(text, secrets, n);
    CHECK_STR(got, want);
    free(got);
}

int main(void)
{
    const char *keys[] = {"sk-ABCDEF", "sk-ABCDEF-LONGER", "abc"};
    eq("", keys, 3, "");
    eq("nothing here", keys, 3, "nothing here");
    eq("Bearer sk-ABCDEF", keys, 3, "Bearer (secret)");
    eq("sk-ABCDEFsk-ABCDEF and sk-ABCDEF.", keys, 3, "(secret)(secret) and (secret).");
    eq("key sk-ABCDEF-LONGER!", keys, 3, "key (secret)!"); /* the longest, not a prefix of it */
    eq("abc is short", keys, 3, "abc is short");          /* under TB_REDACT_MIN: left alone */
    /* a text cut in the middle of a secret */
    eq("HTTP 401: Bearer sk-ABC", keys, 3, "HTTP 401: Bearer (secret)");
    eq("ends in sk-", keys, 3, "ends in sk-"); /* 3 bytes: too short to say */
    /* URL credentials, with secrets or none */
    eq("GET http://user:pa55@host:9/metrics failed", NULL, 0, "GET http://(secret)@host:9/metrics failed");
    eq("https://tok@h/x?a=b@c", NULL, 0, "https://(secret)@h/x?a=b@c"); /* an @ after the path is not */
    eq("\"http://a:b@h\" and http://plain/", NULL, 0, "\"http://(secret)@h\" and http://plain/");
    eq("url = http://u:p@h1 http://v:q@h2/", NULL, 0, "url = http://(secret)@h1 http://(secret)@h2/");
    eq("a://@h", NULL, 0, "a://@h"); /* nothing before the @ */
    eq("odd ://", NULL, 0, "odd ://");
    CHECK(tb_redact(NULL, keys, 3) == NULL);
    /* in place, cut to the buffer */
    char buf[24] = "x sk-ABCDEF-LONGER y";
    tb_redact_buf(buf, sizeof buf, keys, 3);
    CHECK_STR(buf, "x (secret) y");
    char small[12] = "Bearer sk-A";
    tb_redact_buf(small, 10, keys, 3);
    CHECK_STR(small, "Bearer (s");
    return check_done();
}
