/* test_block_batch.c — a block-diffusion batch gives every request what it
 * gets alone: the diffusion backend (plugins/diffusion/diffusion.c linked
 * in) on the trained small SDAR model (CPU, one thread), prompts whose
 * lengths differ modulo the block (4), left-padded by whole blocks so that
 * each canvas's block grid starts at its own first token
 * (diffusion.c: fill_canvases). Checked per request: the output ids, the
 * output and answer token counts, the emissions (one per output token,
 * naming the request), and the blocks decoded (tb_result.blocks_done:
 * those from the one holding its first output position through the one that ends
 * its output), for sdar_static and sdar_dynamic.
 *
 *   test_block_batch MODEL_DIR */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tokbench/backend.h>

#include "check.h"

const tb_backend_ops *tokbench_backend_entry(void);

#define N_PROMPTS 6
static uint32_t emitted[N_PROMPTS];

static int64_t host_now(const tb_host *h)
{
    (void)h;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void host_log(const tb_host *h, tb_log_level level, const char *fmt, ...)
{
    (void)h, (void)level, (void)fmt;
}

static void host_emit(const tb_host *h, uint32_t r, uint32_t n, int64_t t)
{
    (void)h, (void)t;
    if (r < N_PROMPTS)
        emitted[r] += n;
}

static int host_cancelled(const tb_host *h)
{
    (void)h;
    return 0;
}

static void host_emit_output(const tb_host *h, uint32_t r, uint32_t n, int64_t t, const int32_t *ids,
                             const char *text, size_t len)
{
    (void)ids, (void)text, (void)len;
    host_emit(h, r, n, t);
}

static const tb_host host = {
    .struct_size = sizeof(tb_host),
    .abi_major = TB_ABI_MAJOR,
    .now_ns = host_now,
    .log = host_log,
    .emit = host_emit,
    .cancelled = host_cancelled,
    .emit_output = host_emit_output,
};

#define MAX_OPTS 32
static uint32_t options(const tb_backend_ops *ops, const char *sampler, tb_option_value *v)
{
    uint32_t n = ops->n_options < MAX_OPTS ? ops->n_options : MAX_OPTS;
    for (uint32_t i = 0; i < n; i++) {
        const tb_option_decl *d = &ops->options[i];
        const char *text = d->default_value;
        if (strcmp(d->name, "device") == 0)
            text = "cpu";
        else if (strcmp(d->name, "threads") == 0)
            text = "1";
        else if (strcmp(d->name, "sampler") == 0)
            text = sampler;
        else if (strcmp(d->name, "threshold") == 0)
            text = "0.7";
        v[i] = (tb_option_value){.name = d->name, .text = text};
        v[i].i = d->type == TB_OPT_BOOL ? strcmp(text, "true") == 0 : strtoll(text, NULL, 10);
        v[i].f = d->type == TB_OPT_FLOAT ? strtod(text, NULL) : (double)v[i].i;
    }
    return n;
}

typedef struct out {
    int32_t ids[64];
    uint32_t n_ids, n_out, n_answer, n_emitted, blocks;
} out;

/* prompts[0..n) in one generate() call; outs[i] what request i got. */
static void run(const tb_backend_ops *ops, void *ctx, tb_option_value *v, uint32_t nv, const char *const *prompts,
                uint32_t n, out *outs)
{
    tb_request_result rr[N_PROMPTS];
    uint32_t blocks[N_PROMPTS] = {0};
    memset(rr, 0, sizeof rr);
    memset(emitted, 0, sizeof emitted);
    tb_request rq = {.struct_size = sizeof rq, .n_requests = n, .max_new_tokens = 16, .batch = n, .steps = 4,
                     .prompt_text = prompts, .options = v, .n_options = nv};
    tb_result res = {.struct_size = sizeof res, .n_requests = n, .requests = rr, .blocks_done = blocks};
    tb_status st = ops->generate(ctx, &rq, &res);
    if (st != TB_OK)
        fprintf(stderr, "generate: %s\n", ops->last_error(ctx));
    CHECK(st == TB_OK);
    for (uint32_t i = 0; i < n; i++) {
        out *o = &outs[i];
        CHECK(rr[i].status == TB_OK && rr[i].n_output_ids <= 64);
        o->n_ids = rr[i].n_output_ids <= 64 ? rr[i].n_output_ids : 64;
        if (rr[i].output_ids)
            memcpy(o->ids, rr[i].output_ids, o->n_ids * sizeof(int32_t));
        o->n_out = rr[i].n_output_tokens;
        o->n_answer = rr[i].n_answer_tokens;
        o->n_emitted = emitted[i];
        o->blocks = blocks[i];
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_block_batch MODEL_DIR\n");
        return 2;
    }
    const tb_backend_ops *ops = tokbench_backend_entry();
    /* 6, 15, 8, 5 and 11 tokens under the small models' tokenizer: they
     * end at every offset inside a block of 4 (checked below) */
    const char *prompts[N_PROMPTS] = {"37+58=", "a=3 b=7 c=1 d=4 ; b?", "sort 5 2 9 =", "12+5=", "In the beginning God created",
                                      "In the beginning God created the"};
    const char *samplers[] = {"sdar_static", "sdar_dynamic"};
    for (int s = 0; s < 2; s++) {
        tb_option_value v[MAX_OPTS];
        uint32_t nv = options(ops, samplers[s], v);
        void *ctx = NULL;
        char err[512] = "";
        if (ops->create(&host, argv[1], v, nv, &ctx, err, sizeof err) != TB_OK) {
            fprintf(stderr, "create: %s\n", err);
            return 1;
        }
        int residues = 0;
        int64_t n_prompt[N_PROMPTS];
        for (int i = 0; i < N_PROMPTS; i++) {
            int32_t ids[64];
            int64_t k = n_prompt[i] = ops->tokenize(ctx, prompts[i], ids, 64);
            CHECK(k > 0);
            residues |= 1 << (k % 4);
            fprintf(stderr, "\"%s\": %lld tokens\n", prompts[i], (long long)k);
        }
        CHECK(residues == 0xF); /* every offset of a prompt's end inside a block */
        out alone[N_PROMPTS], batch[N_PROMPTS];
        for (int i = 0; i < N_PROMPTS; i++)
            run(ops, ctx, v, nv, &prompts[i], 1, &alone[i]);
        run(ops, ctx, v, nv, prompts, N_PROMPTS, batch);
        for (int i = 0; i < N_PROMPTS; i++) {
            const out *a = &alone[i], *b = &batch[i];
            int same = a->n_ids == b->n_ids && memcmp(a->ids, b->ids, a->n_ids * sizeof(int32_t)) == 0;
            char text[256] = "";
            ops->detokenize(ctx, b->ids, b->n_ids, text, sizeof text);
            fprintf(stderr, "%s \"%s\": batch of %d \"%s\" (%u tokens), %s alone\n", samplers[s], prompts[i],
                    N_PROMPTS, text, b->n_out, same ? "as" : "DIFFERENT from");
            CHECK(same);
            CHECK(a->n_out == b->n_out && a->n_answer == b->n_answer);
            CHECK(b->n_emitted == b->n_out && a->n_emitted == a->n_out);
            /* blocks of 4: the one holding the first output position through the
             * one holding its last output position */
            uint32_t want = (uint32_t)((n_prompt[i] + a->n_out + 3) / 4 - n_prompt[i] / 4);
            if (a->blocks != want || b->blocks != want)
                fprintf(stderr, "  blocks decoded: %u alone, %u in the batch, %u expected\n", a->blocks, b->blocks,
                        want);
            CHECK(a->blocks == want && b->blocks == want);
        }
        ops->destroy(ctx);
    }
    return check_done();
}
