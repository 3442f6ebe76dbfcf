/* test_text_table.c — the terminal table's fitting (reports/text_table.c):
 * empty figure columns left out silently, then the highest priority
 * first (the rightmost of equals) until the table fits, never a column
 * of priority 0; what was left out for width named in table order; the
 * columns of one value said once (tb_table_hoist). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "text_table.h"

/* The table printed into a string (malloc'd). */
static char *print(const tb_table *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tb_table_print(t, f);
    fclose(f);
    return buf;
}

/* The longest line of s, in characters (ASCII here). */
static size_t longest_line(const char *s)
{
    size_t best = 0;
    while (*s) {
        size_t n = strcspn(s, "\n");
        if (n > best)
            best = n;
        s += n + (s[n] == '\n');
    }
    return best;
}

/* key(0) wide(3) empty(5) mid(3) tail(1): widths 3, 10, 5, 3, 4 */
static tb_table *make(void)
{
    static const char *const head[] = {"key", "wide", "empty", "mid", "tail"};
    tb_table *t = tb_table_new(5);
    tb_table_header(t, head);
    static const int prio[] = {0, 3, 5, 3, 1};
    for (int i = 0; i < 5; i++)
        tb_table_priority(t, i, prio[i]);
    for (int r = 0; r < 2; r++) {
        tb_table_cell(t, r ? "b" : "a");
        tb_table_cell(t, "1234567890");
        tb_table_cell(t, r ? "" : "-");
        tb_table_num(t, 1.5, 1);
        tb_table_cell(t, "x");
    }
    return t;
}

static void test_empty_columns_hidden_silently(void)
{
    tb_table *t = make();
    CHECK(tb_table_width(t) == 3 + 10 + 5 + 3 + 4 + 2 * 4);
    char *left = tb_table_fit(t, 0); /* no limit: only the empty column goes */
    CHECK(left == NULL);
    char *out = print(t);
    CHECK(strstr(out, "empty") == NULL);
    CHECK_CONTAINS(out, "key  wide        mid  tail\n");
    CHECK_CONTAINS(out, "---  ----------  ---  ----\n");
    CHECK_CONTAINS(out, "a    1234567890  1.5  x\n"); /* no padding after the last column */
    CHECK(tb_table_width(t) == longest_line(out));
    free(out);
    tb_table_free(t);
}

static void test_fit_by_priority(void)
{
    /* 3+10+3+4 + 6 = 26 without the empty column; at 21 the highest
     * priority goes first: wide and mid tie at 3, the rightmost (mid)
     * first, which leaves 3+10+4 + 4 = 21 */
    tb_table *t = make();
    char *left = tb_table_fit(t, 21);
    CHECK_STR(left, "mid");
    char *out = print(t);
    CHECK(longest_line(out) == 21);
    CHECK_CONTAINS(out, "wide");
    CHECK(strstr(out, "mid") == NULL);
    free(out);
    free(left);
    tb_table_free(t);

    /* at 10: mid, then wide; tail (1) fits with key; named in table order */
    t = make();
    left = tb_table_fit(t, 10);
    CHECK_STR(left, "wide, mid");
    out = print(t);
    CHECK(longest_line(out) <= 10);
    CHECK_CONTAINS(out, "key  tail\n");
    free(out);
    free(left);
    tb_table_free(t);

    /* narrower than what must stay: priority 0 is never left out */
    t = make();
    left = tb_table_fit(t, 2);
    CHECK_STR(left, "wide, mid, tail");
    out = print(t);
    CHECK_CONTAINS(out, "key\n---\na\nb\n");
    free(out);
    free(left);
    tb_table_free(t);
}

/* A column of priority 0 stays even when empty (the case's dimensions). */
static void test_priority_zero_kept_when_empty(void)
{
    static const char *const head[] = {"dim", "fig"};
    tb_table *t = tb_table_new(2);
    tb_table_header(t, head);
    tb_table_priority(t, 1, 1);
    tb_table_cell(t, "-");
    tb_table_cell(t, "-");
    char *left = tb_table_fit(t, 0);
    CHECK(left == NULL);
    char *out = print(t);
    CHECK_STR(out, "dim\n---\n  -\n"); /* "-" aligns as a number */
    free(out);
    tb_table_free(t);
}

/* The columns of one value in every row, said once (issue 39 item 8):
 * hidden, not named as left out; a column that differs stays. */
static void test_hoist(void)
{
    tb_table *t = make(); /* wide "1234567890" and mid 1.5 and tail x in both rows */
    char *said = tb_table_hoist(t, 0, 3);
    CHECK(said != NULL);
    CHECK_STR(said ? said : "", "wide 1234567890, mid 1.5"); /* key differs (a, b); empty is "-", "" */
    free(said);
    CHECK(!tb_table_hidden(t, 0) && tb_table_hidden(t, 1) && tb_table_hidden(t, 3) && !tb_table_hidden(t, 4));
    char *left = tb_table_fit(t, 0);
    CHECK(left == NULL); /* hoisted columns are not "left out" */
    char *out = print(t);
    CHECK_CONTAINS(out, "key  tail\n");
    free(out);
    tb_table_free(t);
    /* one row: nothing to say once */
    static const char *const head[] = {"a", "b"};
    t = tb_table_new(2);
    tb_table_header(t, head);
    tb_table_cell(t, "1");
    tb_table_cell(t, "2");
    CHECK(tb_table_hoist(t, 0, 1) == NULL);
    tb_table_free(t);
}

int main(void)
{
    test_hoist();
    test_empty_columns_hidden_silently();
    test_fit_by_priority();
    test_priority_zero_kept_when_empty();
    return check_done();
}
