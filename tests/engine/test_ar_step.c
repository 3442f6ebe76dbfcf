/* test_ar_step.c — the ar backend's stepped sessions (backend.h: step_*),
 * what `tokbench serve` batches continuously with, on the trained small
 * model (CPU, one thread):
 *
 *   - a request joins a running batch at the next step and leaves at its
 *     end: a short request that joins after a long one has started ends
 *     first, after exactly its own tokens' steps (counted, not timed);
 *   - every request's tokens are those it gets alone through generate()
 *     (greedy): its own positions in its own slot, whatever the others
 *     hold; a freed slot is reused by the next request;
 *   - emissions name the request's slot, one per token;
 *   - refusals: a prompt that does not fit, a busy slot, generate() while
 *     a session is open; step_leave frees a slot at once;
 *   - a preset served with a tokenizer (the tokenizer option): the
 *     tiny-llama preset (512 ids) given tests/data/bytes-tokenizer (259):
 *     text prompts, and every token chosen, greedy, sampled and stepped,
 *     among the tokenizer's ids (without the option its greedy choices go
 *     past them); refused with a model folder's own tokenizer, a
 *     tokenizer larger than the vocabulary, a drafter. On the CPU, and on
 *     the GPU too where this build has CUDA and finds one.
 *
 *   test_ar_step MODEL_DIR BYTES_TOKENIZER_DIR
 *
 * Built with plugins/ar/ar.c linked in (tokbench_backend_entry is its). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tokbench/backend.h>

#include "check.h"
#include "engine_options.h"
#include "plugin_host.h"
#include "strmem.h"

#define MAX_SLOTS 4 /* the sessions' slots (<= TEST_HOST_REQUESTS: emissions are counted per slot) */

/* ---- options: declared defaults, some set */

#define MAX_OPTS 32
static uint32_t options(const tb_backend_ops *ops, const char *ignore_eos, tb_option_value *v)
{
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"ignore_eos", ignore_eos}};
    return test_options(ops, set, sizeof set / sizeof *set, v, MAX_OPTS);
}

/* ---- the requests */

typedef struct req {
    const char *prompt;
    uint32_t max_new;
    const char *ignore_eos;
    int32_t want[64]; /* generate()'s tokens, alone */
    uint32_t n_want;
    int32_t got[64];
    uint32_t n_got;
    int ended;
    uint32_t end_step; /* the session step it ended in */
} req;

static void alone(const tb_backend_ops *ops, void *ctx, req *q)
{
    tb_option_value v[MAX_OPTS];
    uint32_t n = options(ops, q->ignore_eos, v);
    const char *texts[1] = {q->prompt};
    tb_request_result rr = {.n_answer_tokens = TB_UNKNOWN_COUNT};
    tb_request rq = {.struct_size = sizeof rq, .n_requests = 1, .max_new_tokens = q->max_new, .batch = 1,
                     .seed = 7, .prompt_text = texts, .options = v, .n_options = n};
    tb_result res = {.struct_size = sizeof res, .n_requests = 1, .requests = &rr};
    tb_status st = ops->generate(ctx, &rq, &res);
    CHECK(st == TB_OK);
    q->n_want = rr.n_output_ids < 64 ? rr.n_output_ids : 64;
    memcpy(q->want, rr.output_ids, q->n_want * sizeof(int32_t));
}

static void join(const tb_backend_ops *ops, void *ctx, uint32_t slot, req *q)
{
    tb_option_value v[MAX_OPTS];
    uint32_t n = options(ops, q->ignore_eos, v);
    tb_step_join j = {.struct_size = sizeof j, .max_new_tokens = q->max_new, .prompt_text = q->prompt, .seed = 7,
                      .options = v, .n_options = n};
    char why[128] = "";
    tb_status st = ops->step_join(ctx, slot, &j, why, sizeof why);
    if (st != TB_OK)
        fprintf(stderr, "join: %s\n", why);
    CHECK(st == TB_OK);
    test_emitted[slot] = 0;
}

/* One step; records the requests that ended. */
static void step(const tb_backend_ops *ops, void *ctx, req **in_slot, uint32_t n_step)
{
    tb_step_end ends[MAX_SLOTS];
    uint32_t n_ends = 99;
    CHECK(ops->step(ctx, ends, &n_ends) == TB_OK);
    CHECK(n_ends <= MAX_SLOTS);
    for (uint32_t e = 0; e < n_ends && e < MAX_SLOTS; e++) {
        req *q = in_slot[ends[e].slot];
        CHECK(q != NULL && ends[e].status == TB_OK);
        if (!q)
            continue;
        q->n_got = ends[e].n_output_ids < 64 ? ends[e].n_output_ids : 64;
        memcpy(q->got, ends[e].output_ids, q->n_got * sizeof(int32_t));
        CHECK(ends[e].n_output_tokens == ends[e].n_output_ids);
        CHECK(test_emitted[ends[e].slot] == ends[e].n_output_tokens); /* one emission per token, naming the slot */
        q->ended = 1;
        q->end_step = n_step;
        in_slot[ends[e].slot] = NULL;
    }
}

/* ---- a preset served with a tokenizer */

/* Request r's ids of a generate() of 4 requests x 48 tokens: the largest
 * id into *max_id; with text, each answer detokenizes. */
static void preset_generate(const tb_backend_ops *ops, void *ctx, const tb_option_value *v, uint32_t n, int text,
                            int32_t *max_id)
{
    const char *texts[4] = {"the cat sat", "x", "add 12 34 =", "hello world, again"};
    tb_request_result rr[4] = {{0}};
    tb_request rq = {.struct_size = sizeof rq, .n_requests = 4, .max_new_tokens = 48, .batch = 4, .seed = 3,
                     .prompt_text = text ? texts : NULL, .prompt_tokens = text ? 0 : 8, .options = v,
                     .n_options = n};
    tb_result res = {.struct_size = sizeof res, .n_requests = 4, .requests = rr};
    CHECK(ops->generate(ctx, &rq, &res) == TB_OK);
    *max_id = -1;
    for (int r = 0; r < 4; r++) {
        CHECK(rr[r].n_output_ids == 48);
        for (uint32_t i = 0; i < rr[r].n_output_ids; i++)
            *max_id = rr[r].output_ids[i] > *max_id ? rr[r].output_ids[i] : *max_id;
        char out[1024];
        if (text)
            CHECK(ops->detokenize(ctx, rr[r].output_ids, rr[r].n_output_ids, out, sizeof out) >= 0);
    }
}

static void preset_tokenizer(const tb_backend_ops *ops, const char *device, const char *tok, const char *small_llama)
{
    enum { TOK_IDS = 259 }; /* tests/data/bytes-tokenizer's */
    tb_option_value v[MAX_OPTS];
    void *ctx = NULL;
    char err[512] = "";
    int32_t max_id;
    /* without the option: the preset's own ids, past the tokenizer's */
    test_option plain[] = {{"device", device}, {"threads", "1"}, {"ignore_eos", "true"}};
    uint32_t n = test_options(ops, plain, sizeof plain / sizeof *plain, v, MAX_OPTS);
    CHECK(ops->create(&test_host, "preset:tiny-llama", v, n, &ctx, err, sizeof err) == TB_OK);
    if (ctx) {
        preset_generate(ops, ctx, v, n, 0, &max_id);
        CHECK(max_id >= TOK_IDS);
        ops->destroy(ctx);
        ctx = NULL;
    }
    /* with it: text in, every choice among its ids */
    test_option set[] = {{"device", device}, {"threads", "1"}, {"ignore_eos", "true"}, {"tokenizer", tok}};
    n = test_options(ops, set, sizeof set / sizeof *set, v, MAX_OPTS);
    if (ops->create(&test_host, "preset:tiny-llama", v, n, &ctx, err, sizeof err) != TB_OK) {
        fprintf(stderr, "create on %s with tokenizer = %s: %s\n", device, tok, err);
        CHECK(0);
        return;
    }
    CHECK(strstr(ops->describe(ctx), "\"chosen_among_ids\":259") != NULL);
    preset_generate(ops, ctx, v, n, 1, &max_id);
    CHECK(max_id >= 0 && max_id < TOK_IDS);
    test_option hot[] = {{"device", device}, {"threads", "1"}, {"ignore_eos", "true"}, {"tokenizer", tok},
                         {"temperature", "2"}};
    uint32_t n_hot = test_options(ops, hot, sizeof hot / sizeof *hot, v, MAX_OPTS);
    preset_generate(ops, ctx, v, n_hot, 1, &max_id); /* sampled, hot: the whole range in play */
    CHECK(max_id >= 0 && max_id < TOK_IDS);
    /* stepped, as tokbench serve runs it */
    n = test_options(ops, set, sizeof set / sizeof *set, v, MAX_OPTS);
    tb_request shape = {.struct_size = sizeof shape, .n_requests = 2, .max_new_tokens = 48, .batch = 2, .options = v,
                        .n_options = n};
    CHECK(ops->step_open(ctx, &shape, 2) == TB_OK);
    req a = {.prompt = "the cat sat", .max_new = 40, .ignore_eos = "true"};
    req b = {.prompt = "add 12 34 =", .max_new = 24, .ignore_eos = "true"};
    req *in_slot[MAX_SLOTS] = {&a, &b};
    join(ops, ctx, 0, &a);
    join(ops, ctx, 1, &b);
    for (uint32_t k = 1; (in_slot[0] || in_slot[1]) && k < 100; k++)
        step(ops, ctx, in_slot, k);
    CHECK(a.ended && b.ended && a.n_got == 40 && b.n_got == 24);
    int outside = 0;
    for (uint32_t i = 0; i < a.n_got; i++)
        outside += a.got[i] >= TOK_IDS;
    for (uint32_t i = 0; i < b.n_got; i++)
        outside += b.got[i] >= TOK_IDS;
    CHECK(outside == 0);
    ops->step_close(ctx);
    ops->destroy(ctx);
    ctx = NULL;
    /* refusals: a model folder's own tokenizer, more ids than the model
     * has, a drafter (validate, at suite load) */
    CHECK(ops->create(&test_host, small_llama, v, n, &ctx, err, sizeof err) == TB_ERR_INVALID && !ctx &&
          strstr(err, "of its own"));
    char big[1200];
    snprintf(big, sizeof big, "%s/tokenizer.json", small_llama); /* 1,024 ids > tiny-llama's 512 */
    test_option too_big[] = {{"device", "cpu"}, {"threads", "1"}, {"tokenizer", big}};
    uint32_t n_big = test_options(ops, too_big, sizeof too_big / sizeof *too_big, v, MAX_OPTS);
    CHECK(ops->create(&test_host, "preset:tiny-llama", v, n_big, &ctx, err, sizeof err) == TB_ERR_INVALID && !ctx &&
          strstr(err, "more than the model's vocabulary of 512"));
    /* a vocabulary with a gap: "\xc4\x8c" (a byte token) moved from id 200 to 300 */
    char gap_dir[] = "/tmp/test_ar_step.XXXXXX", gap[1200], src_tok[1200];
    CHECK(mkdtemp(gap_dir) != NULL);
    snprintf(src_tok, sizeof src_tok, "%s/tokenizer.json", tok);
    snprintf(gap, sizeof gap, "%s/tokenizer.json", gap_dir);
    size_t len = 0;
    char *text = tb_read_file(src_tok, &len);
    char *at = text ? strstr(text, "\"\xc4\x8c\": 200,") : NULL;
    CHECK(at != NULL);
    if (at) {
        memcpy(at + 6, "300", 3); /* past the quote, two bytes, the quote, ": " */
        FILE *f = fopen(gap, "wb");
        CHECK(f && fwrite(text, 1, len, f) == len && fclose(f) == 0);
        test_option gapped[] = {{"device", "cpu"}, {"threads", "1"}, {"tokenizer", gap}};
        uint32_t n_gap = test_options(ops, gapped, sizeof gapped / sizeof *gapped, v, MAX_OPTS);
        CHECK(ops->create(&test_host, "preset:tiny-llama", v, n_gap, &ctx, err, sizeof err) == TB_ERR_INVALID &&
              !ctx && strstr(err, "id 200 of its 301 has no token"));
    }
    free(text);
    unlink(gap);
    rmdir(gap_dir);
    test_option drafted[] = {{"tokenizer", tok}, {"drafter", "ar"}, {"draft_model", "preset:tiny-llama"}};
    uint32_t n_dr = test_options(ops, drafted, sizeof drafted / sizeof *drafted, v, MAX_OPTS);
    tb_request rq = {.struct_size = sizeof rq, .n_requests = 1, .max_new_tokens = 4, .batch = 1, .options = v,
                     .n_options = n_dr};
    CHECK(ops->validate(&rq, err, sizeof err) == TB_ERR_UNSUPPORTED && strstr(err, "not with a drafter"));
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_ar_step MODEL_DIR BYTES_TOKENIZER_DIR\n");
        return 2;
    }
    const tb_backend_ops *ops = tokbench_backend_entry();
    CHECK(TB_STRUCT_HAS(ops, tb_backend_ops, step_close) && ops->step_open && ops->step);
    tb_option_value v[MAX_OPTS];
    uint32_t n = options(ops, "false", v);
    void *ctx = NULL;
    char err[512] = "";
    if (ops->create(&test_host, argv[1], v, n, &ctx, err, sizeof err) != TB_OK) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }

    /* A long request (past its EOS), a short one, and two more that wait
     * for a free slot; references from generate() alone. */
    req long_q = {.prompt = "add 12 34 =", .max_new = 40, .ignore_eos = "true"};
    req short_q = {.prompt = "copy abc =", .max_new = 4, .ignore_eos = "true"};
    req third = {.prompt = "sort 3 1 2 =", .max_new = 12, .ignore_eos = "false"};
    req fourth = {.prompt = "lookup b in a:1 b:2 =", .max_new = 12, .ignore_eos = "false"};
    req *all[] = {&long_q, &short_q, &third, &fourth};
    for (size_t i = 0; i < 4; i++)
        alone(ops, ctx, all[i]);

    tb_request shape = {.struct_size = sizeof shape, .n_requests = 2, .max_new_tokens = 64, .batch = 2,
                        .options = v, .n_options = n};
    CHECK(ops->step_open(ctx, &shape, 2) == TB_OK);
    {
        /* generate() while the session holds the caches: refused */
        const char *texts[1] = {"x"};
        tb_request_result rr = {0};
        tb_request rq = {.struct_size = sizeof rq, .n_requests = 1, .max_new_tokens = 2, .batch = 1,
                         .prompt_text = texts, .options = v, .n_options = n};
        tb_result res = {.struct_size = sizeof res, .n_requests = 1, .requests = &rr};
        CHECK(ops->generate(ctx, &rq, &res) == TB_ERR_UNSUPPORTED);
    }
    req *in_slot[MAX_SLOTS] = {0};
    uint32_t steps = 0;
    join(ops, ctx, 0, &long_q);
    in_slot[0] = &long_q;
    for (int i = 0; i < 3; i++)
        step(ops, ctx, in_slot, ++steps);
    CHECK(!long_q.ended);
    {
        /* a busy slot, a prompt beyond the model's 256 positions */
        tb_step_join j = {.struct_size = sizeof j, .max_new_tokens = 4, .prompt_text = "x", .options = v,
                          .n_options = n};
        char why[128] = "";
        CHECK(ops->step_join(ctx, 0, &j, why, sizeof why) == TB_ERR_INVALID);
        char long_prompt[1024] = "";
        for (int i = 0; i < 40; i++)
            strcat(long_prompt, "add 1 2 = ");
        j.max_new_tokens = 60;
        j.prompt_text = long_prompt;
        CHECK(ops->step_join(ctx, 1, &j, why, sizeof why) == TB_ERR_INVALID);
        CHECK(strstr(why, "positions") != NULL);
        j.max_new_tokens = 65; /* beyond the session's 64 */
        j.prompt_text = "x";
        CHECK(ops->step_join(ctx, 1, &j, why, sizeof why) == TB_ERR_INVALID);
    }
    /* the short one joins the running batch: its first token at the next
     * step, its 4th three steps later, while the long one runs on */
    join(ops, ctx, 1, &short_q);
    in_slot[1] = &short_q;
    uint32_t joined_at = steps + 1;
    while (!short_q.ended && steps < 100)
        step(ops, ctx, in_slot, ++steps);
    CHECK(short_q.ended && short_q.end_step == joined_at + 3);
    CHECK(!long_q.ended);
    /* its slot is reused: the others one after another */
    join(ops, ctx, 1, &third);
    in_slot[1] = &third;
    while (in_slot[1] && steps < 200)
        step(ops, ctx, in_slot, ++steps);
    join(ops, ctx, 1, &fourth);
    in_slot[1] = &fourth;
    while ((in_slot[0] || in_slot[1]) && steps < 300)
        step(ops, ctx, in_slot, ++steps);
    for (size_t i = 0; i < 4; i++) {
        req *q = all[i];
        CHECK(q->ended);
        CHECK(q->n_got == q->n_want);
        int same = q->n_got == q->n_want && memcmp(q->got, q->want, q->n_got * sizeof(int32_t)) == 0;
        if (!same)
            fprintf(stderr, "request %zu (%s): %u tokens stepped, %u alone, or other ids\n", i, q->prompt, q->n_got,
                    q->n_want);
        CHECK(same);
    }
    CHECK(long_q.end_step == long_q.max_new); /* ignore_eos: its whole limit, one token per step */
    CHECK(long_q.end_step > short_q.end_step);

    /* two joins of one prompt length in one step: one prefill for both
     * (as on the GPU), each its answer alone */
    req fifth = third, sixth = third;
    fifth.ended = sixth.ended = 0;
    join(ops, ctx, 0, &fifth);
    join(ops, ctx, 1, &sixth);
    in_slot[0] = &fifth, in_slot[1] = &sixth;
    while ((in_slot[0] || in_slot[1]) && steps < 400)
        step(ops, ctx, in_slot, ++steps);
    CHECK(fifth.ended && sixth.ended && fifth.n_got == third.n_want && sixth.n_got == third.n_want);
    CHECK(memcmp(fifth.got, third.want, third.n_want * sizeof(int32_t)) == 0);
    CHECK(memcmp(sixth.got, third.want, third.n_want * sizeof(int32_t)) == 0);

    /* step_leave frees a slot at once; nothing more is reported for it */
    join(ops, ctx, 0, &third);
    in_slot[0] = &third;
    third.ended = 0;
    step(ops, ctx, in_slot, ++steps);
    ops->step_leave(ctx, 0);
    in_slot[0] = NULL;
    tb_step_end ends[MAX_SLOTS];
    uint32_t n_ends = 99;
    CHECK(ops->step(ctx, ends, &n_ends) == TB_OK && n_ends == 0);
    join(ops, ctx, 0, &short_q); /* the slot is free again */
    ops->step_close(ctx);

    /* closed: generate() works again, with the same answers */
    req again = third;
    alone(ops, ctx, &again);
    CHECK(again.n_want == third.n_want && memcmp(again.want, third.want, third.n_want * sizeof(int32_t)) == 0);
    ops->destroy(ctx);

    preset_tokenizer(ops, "cpu", argv[2], argv[1]);
    /* and the device's argmax, where this build has CUDA and a GPU */
    if (tb_device_wants_gpu("auto"))
        preset_tokenizer(ops, "cuda", argv[2], argv[1]);
    return check_done();
}
