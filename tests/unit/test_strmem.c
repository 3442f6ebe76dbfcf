/* test_strmem.c — util/strmem.c's string pool: every copy intact and
 * NUL-terminated while the pool lives, however many and however long
 * (a string longer than a block gets a block of its own and the block
 * being filled keeps taking short ones); a freed pool is empty and can be
 * filled again. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "strmem.h"

static void test_pool(void)
{
    tb_strpool p = {0};
    enum { N = 20000 };
    static char *copy[N];
    char key[32];
    /* ~20000 short strings: several 64 KiB blocks */
    for (int i = 0; i < N; i++) {
        int n = snprintf(key, sizeof key, "token-%d", i);
        copy[i] = tb_strpool_dup(&p, key, (size_t)n);
        CHECK(copy[i] != NULL);
    }
    /* one longer than a block, then short ones again */
    size_t big_n = (size_t)200 << 10;
    static char big[(size_t)200 << 10];
    memset(big, 'x', big_n);
    char *big_copy = tb_strpool_dup(&p, big, big_n);
    CHECK(big_copy != NULL && big_copy[big_n] == '\0' && memcmp(big_copy, big, big_n) == 0);
    char *after = tb_strpool_dup(&p, "after", 5);
    CHECK(after != NULL && strcmp(after, "after") == 0);
    /* an embedded NUL is copied, the length is the caller's */
    char *nul = tb_strpool_dup(&p, "a\0b", 3);
    CHECK(nul != NULL && memcmp(nul, "a\0b", 4) == 0);
    char *empty = tb_strpool_dup(&p, "", 0);
    CHECK(empty != NULL && empty[0] == '\0');
    int bad = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "token-%d", i);
        bad += strcmp(copy[i], key) != 0;
    }
    CHECK(bad == 0);
    tb_strpool_free(&p);
    CHECK(p.head == NULL && p.used == 0 && p.cap == 0);
    char *again = tb_strpool_dup(&p, "again", 5);
    CHECK(again != NULL && strcmp(again, "again") == 0);
    tb_strpool_free(&p);
    tb_strpool_free(&p); /* a freed pool frees nothing */
}

int main(void)
{
    test_pool();
    return check_done();
}
