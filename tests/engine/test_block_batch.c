/* test_block_batch.c — a block-diffusion batch gives every request what it
 * gets alone: the diffusion backend (plugins/diffusion/diffusion.c linked
 * in) on the trained small SDAR model (CPU, one thread), prompts whose
 * lengths differ modulo the block (4), left-padded by whole blocks so that
 * each canvas's block grid starts at its own first token
 * (diffusion.c: fill_canvases). Checked per request: the output ids, the
 * output and answer token counts, the emissions (one per output token,
 * naming the request), and the blocks decoded (tb_result.blocks_done:
 * those from the one holding its first output position through the one that ends
 * its output), for sdar_static and sdar_dynamic. With ignore_eos = true
 * no request stops at an EOS: each decodes, and outputs, every block
 * through its 16th position (SDAR returns its whole last block).
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
#include "plugin_host.h"

#define N_PROMPTS 6
#define MAX_OPTS 32
static uint32_t options(const tb_backend_ops *ops, const char *sampler, tb_option_value *v)
{
    test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"sampler", sampler}, {"threshold", "0.7"}};
    return test_options(ops, set, sizeof set / sizeof *set, v, MAX_OPTS);
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
    memset(test_emitted, 0, sizeof test_emitted);
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
        o->n_emitted = test_emitted[i];
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
        if (ops->create(&test_host, argv[1], v, nv, &ctx, err, sizeof err) != TB_OK) {
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
    /* ignore_eos: no request stops at its EOS block; each decodes the
     * blocks through its 16th position, where without it some stop */
    for (int ignore = 0; ignore < 2; ignore++) {
        test_option set[] = {{"device", "cpu"}, {"threads", "1"}, {"sampler", "sdar_dynamic"}, {"threshold", "0.7"},
                             {"ignore_eos", ignore ? "true" : "false"}};
        tb_option_value v[MAX_OPTS];
        uint32_t nv = test_options(ops, set, sizeof set / sizeof *set, v, MAX_OPTS);
        void *ctx = NULL;
        char err[512] = "";
        if (ops->create(&test_host, argv[1], v, nv, &ctx, err, sizeof err) != TB_OK) {
            fprintf(stderr, "create: %s\n", err);
            return 1;
        }
        out batch[N_PROMPTS];
        run(ops, ctx, v, nv, prompts, N_PROMPTS, batch);
        int short_ = 0;
        for (int i = 0; i < N_PROMPTS; i++) {
            int32_t ids[64];
            int64_t p = ops->tokenize(ctx, prompts[i], ids, 64);
            /* the blocks through position p + 16, all of them output */
            uint32_t full = (uint32_t)((p + 16 + 3) / 4 - p / 4), tokens = (uint32_t)((p + 16 + 3) / 4 * 4 - p);
            short_ += batch[i].n_out < tokens;
            if (ignore) {
                if (batch[i].n_out != tokens || batch[i].blocks != full)
                    fprintf(stderr, "ignore_eos \"%s\": %u tokens in %u blocks, want %u in %u\n", prompts[i],
                            batch[i].n_out, batch[i].blocks, tokens, full);
                CHECK(batch[i].n_out == tokens && batch[i].blocks == full && batch[i].n_emitted == tokens);
            }
        }
        if (!ignore)
            CHECK(short_ > 0); /* the case above shows something only if some request stops early */
        ops->destroy(ctx);
    }
    return check_done();
}
