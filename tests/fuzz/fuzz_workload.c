/* fuzz_workload.c — libFuzzer target for the http backend's workload files
 * (plugins/http/workload.c): a conversation dataset (tb_dataset_parse) and
 * a length histogram (tb_len_hist_parse), both outside input read from a
 * user's file.
 *
 * The input is the text of either (up to its first NUL). For each parse:
 *   - it answers 0 with a result, or -1 with none and a message that
 *     names the file ("in:" and, past the whole-file checks, a line);
 *   - a dataset: at least one conversation, each with a user turn first,
 *     every turn's user text set, its line within the text's lines and
 *     rising; a histogram: at least one bin, 1 <= lo <= hi, cumulative
 *     weights that never fall and end positive, and draws (clipped to
 *     [1, 2^31]) inside the bins. */
#include "fuzz_common.h" /* first: it defines _GNU_SOURCE */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_workload: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        abort();
    memcpy(text, data, size);
    text[size] = '\0';
    size_t lines = 1;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    char err[512];

    tb_dataset *d = NULL;
    err[0] = '\0';
    int rc = tb_dataset_parse("in", text, &d, err, sizeof err);
    if (rc != 0 && (rc != -1 || d || strncmp(err, "in", 2) != 0))
        fail("a failed dataset parse without its message or with a result");
    if (rc == 0) {
        if (!d || d->n == 0)
            fail("a dataset without a conversation");
        for (size_t i = 0; i < d->n; i++) {
            const tb_conversation *c = &d->conv[i];
            if (c->n_turns == 0 || c->line < 1 || c->line > lines || (i && c->line <= d->conv[i - 1].line))
                fail("a conversation without a turn, or at a wrong line");
            for (size_t t = 0; t < c->n_turns; t++)
                if (!c->turns[t].user)
                    fail("a turn without its user text");
        }
        if (tb_dataset_eligible(d, 1) != d->n)
            fail("a conversation not eligible for one turn");
    }
    tb_dataset_free(d);

    tb_len_hist *h = NULL;
    err[0] = '\0';
    rc = tb_len_hist_parse("in", text, &h, err, sizeof err);
    if (rc != 0 && (rc != -1 || h || strncmp(err, "in", 2) != 0))
        fail("a failed histogram parse without its message or with a result");
    if (rc == 0) {
        if (!h || h->n == 0 || !(h->cum[h->n - 1] > 0))
            fail("a histogram without weight");
        uint32_t lo = UINT32_MAX, hi = 0;
        for (size_t i = 0; i < h->n; i++) {
            if (h->lo[i] < 1 || h->lo[i] > h->hi[i] || (i && h->cum[i] < h->cum[i - 1]))
                fail("a bad bin");
            lo = h->lo[i] < lo ? h->lo[i] : lo;
            hi = h->hi[i] > hi ? h->hi[i] : hi;
        }
        tb_len_dist dist = {.kind = TB_LEN_HISTOGRAM, .min = 1, .max = UINT32_MAX, .hist = h};
        tb_arrival_rng r;
        tb_arrival_rng_seed(&r, size);
        for (int k = 0; k < 64; k++) {
            uint32_t x = tb_len_draw(&dist, &r);
            if (x < lo || x > hi)
                fail("a draw outside the bins");
        }
    }
    tb_len_hist_free(h);
    free(text);
    return 0;
}
