/* test_utf8.c — core/utf8.c: decoding at each length and each way a
 * sequence can be invalid, the offset of the first bad byte, and the
 * quoting of user text for one-line messages. */
#include "utf8.h"

#include <string.h>

#include "check.h"
#include "util.h"

/* Decodes the string s (its strlen): the length, with *cp. */
static size_t decode(const char *s, uint32_t *cp)
{
    *cp = 0xffffffffu;
    return tb_utf8_decode((const unsigned char *)s, strlen(s), cp);
}

static void test_decode(void)
{
    uint32_t cp;
    CHECK(decode("A", &cp) == 1 && cp == 0x41);
    CHECK(decode("\x7f", &cp) == 1 && cp == 0x7f);
    CHECK(decode("\xc3\xa9", &cp) == 2 && cp == 0xe9);               /* é */
    CHECK(decode("\xe2\x88\x92", &cp) == 3 && cp == 0x2212);         /* minus */
    CHECK(decode("\xf0\x9f\x98\x80", &cp) == 4 && cp == 0x1f600);    /* 😀 */
    CHECK(decode("\xf4\x8f\xbf\xbf", &cp) == 4 && cp == 0x10ffff);   /* the last */
    CHECK(decode("\xc3\xa9z", &cp) == 2 && cp == 0xe9);              /* only one */
    /* Invalid: a stray continuation byte, overlong forms (of '/' and of
     * U+0800's predecessor), a surrogate, past U+10FFFF, a lead byte never
     * used, a continuation missing or cut off by n. */
    CHECK(decode("\x80", &cp) == 0);
    CHECK(decode("\xc0\xaf", &cp) == 0);
    CHECK(decode("\xe0\x9f\xbf", &cp) == 0);
    CHECK(decode("\xed\xa0\x80", &cp) == 0);
    CHECK(decode("\xf4\x90\x80\x80", &cp) == 0);
    CHECK(decode("\xff", &cp) == 0);
    CHECK(decode("\xc3z", &cp) == 0);
    CHECK(tb_utf8_decode((const unsigned char *)"\xe2\x88\x92", 2, &cp) == 0);
}

static void test_valid(void)
{
    size_t bad = 99;
    CHECK(tb_utf8_valid("", 0, &bad) && bad == 99);
    CHECK(tb_utf8_valid("caf\xc3\xa9 \xe2\x9c\x93", 9, NULL));
    CHECK(!tb_utf8_valid("ab\xc3\xa9\xc3", 5, &bad) && bad == 4); /* cut off */
    CHECK(!tb_utf8_valid("ab\xed\xa0\x80z", 6, &bad) && bad == 2); /* surrogate */
    CHECK(!tb_utf8_valid("a\0\xff", 3, NULL));                     /* NUL is valid */
}

static void test_quoted(void)
{
    tb_str b = {0};
    const char s[] = "a\"b\\c\n\x01\x7f\xff\xc3\xa9";
    tb_utf8_append_quoted(&b, s, sizeof s - 1, 100);
    CHECK_STR(b.s, "\"a\\\"b\\\\c\\x0a\\x01\\x7f\\xff\xc3\xa9\"");
    tb_str_free(&b);
    tb_utf8_append_quoted(&b, "abcdef", 6, 3);
    CHECK_STR(b.s, "\"abc...\"");
    tb_str_free(&b);
    /* Cut at a character boundary: "é" is not split, so the excerpt may
     * pass max by the rest of the character. */
    tb_utf8_append_quoted(&b, "a\xc3\xa9" "b", 4, 2);
    CHECK_STR(b.s, "\"a\xc3\xa9...\"");
    tb_str_free(&b);
    tb_utf8_append_quoted(&b, "ab", 2, 2); /* exactly max: no "..." */
    CHECK_STR(b.s, "\"ab\"");
    tb_str_free(&b);
    tb_utf8_append_quoted(&b, "", 0, 2);
    CHECK_STR(b.s, "\"\"");
    tb_str_free(&b);
}

/* A plugin's text made valid (run/worker.c): each byte of a bad sequence
 * one U+FFFD, control bytes kept, never past the field it was given (no
 * NUL read past n), cut whole into dst. */
#define FFFD "\xef\xbf\xbd"
static void test_copy_valid(void)
{
    char d[32];
    CHECK(tb_utf8_copy_valid(d, sizeof d, "caf\xe9 \xff\xfe\n\xc3\xa9", 11) == 16);
    CHECK_STR(d, "caf" FFFD " " FFFD FFFD "\n\xc3\xa9");
    CHECK(tb_utf8_valid(d, strlen(d), NULL));
    /* a field of n bytes without a NUL: nothing after it is read */
    const char field[8] = {'Z', 'Z', 'Z', 'Z', 'Z', 'Z', 'Z', 'Z'};
    tb_utf8_copy_valid(d, sizeof d, field, sizeof field);
    CHECK_STR(d, "ZZZZZZZZ");
    /* stops at a NUL before n */
    tb_utf8_copy_valid(d, sizeof d, "ab\0cd", 5);
    CHECK_STR(d, "ab");
    /* cut at a character boundary: "é" (2 bytes) does not fit in 2 + NUL */
    CHECK(tb_utf8_copy_valid(d, 4, "a\xc3\xa9", 3) == 3);
    CHECK_STR(d, "a\xc3\xa9");
    CHECK(tb_utf8_copy_valid(d, 3, "a\xc3\xa9", 3) == 1);
    CHECK_STR(d, "a");
    CHECK(tb_utf8_copy_valid(d, 3, "a\xff", 2) == 1); /* U+FFFD is 3 bytes */
    CHECK_STR(d, "a");
    /* a sequence cut off by n is invalid too */
    tb_utf8_copy_valid(d, sizeof d, "\xc3\xa9", 1);
    CHECK_STR(d, FFFD);
    tb_str b = {0};
    tb_utf8_append_valid(&b, "x\xff\xc3\xa9y", 5);
    CHECK_STR(b.s, "x" FFFD "\xc3\xa9y");
    tb_str_free(&b);
}

int main(void)
{
    test_decode();
    test_valid();
    test_quoted();
    test_copy_valid();
    return check_done();
}
