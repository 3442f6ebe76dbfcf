/* test_dgemma_plugin.c — DiffusionGemma through the diffusion backend
 * (diffusion.c hands it to dgemma_backend.c): preset:tiny-diffusiongemma
 * loads, sampler = entropy_bound generates whole canvases with one
 * emission per committed canvas, the same seed gives the same output;
 * refused with the reason: another sampler, a batch of two, device = cuda,
 * entropy_bound on another model. dtype = fp8 loads (the metadata says
 * fp8), generates in range and deterministically, and commits other
 * tokens than float32 on the same seed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_host.h"

static tb_canvas_counts canvases[2]; /* the last call's canvas records */

static tb_status gen(const tb_backend_ops *ops, void *ctx, const tb_option_value *o, uint32_t n, uint32_t B,
                     uint64_t seed, tb_request_result *rr)
{
    memset(rr, 0, 2 * sizeof *rr);
    tb_request req = {.struct_size = sizeof req, .n_requests = B, .prompt_tokens = 12, .max_new_tokens = 16,
                      .batch = B, .steps = 6, .seed = seed, .options = o, .n_options = n};
    memset(canvases, 0, sizeof canvases);
    tb_result res = {.struct_size = sizeof res, .n_requests = B, .requests = rr, .canvas = canvases};
    memset(test_emitted, 0, sizeof test_emitted);
    tb_status st = ops->generate(ctx, &req, &res);
    if (st == TB_OK)
        CHECK(res.forward_passes >= 2 + 2 && res.prefill_ns >= 0 && res.decode_ns > 0);
    return st;
}

int main(void)
{
    const tb_backend_ops *ops = tokbench_backend_entry();
    tb_option_value o[64];
    const test_option eb[] = {{"sampler", "entropy_bound"}};
    uint32_t n = test_options(ops, eb, 1, o, 64);
    void *ctx = NULL;
    char err[512] = "";
    tb_status st = ops->create(&test_host, "preset:tiny-diffusiongemma", o, n, &ctx, err, sizeof err);
    CHECK(st == TB_OK);
    if (st != TB_OK) {
        fprintf(stderr, "create: %s\n", err);
        return check_done();
    }
    CHECK_CONTAINS(ops->describe(ctx), "\"architecture\":\"DiffusionGemmaForBlockDiffusion\"");
    CHECK_CONTAINS(ops->describe(ctx), "\"content_dependent_samplers\":[\"entropy_bound\"]");
    tb_request_result rr[2], r2[2];
    CHECK(gen(ops, ctx, o, n, 1, 7, rr) == TB_OK);
    CHECK(rr[0].status == TB_OK && rr[0].n_output_tokens == 16 && rr[0].n_output_ids == 16);
    CHECK(rr[0].steps_done >= 2 && rr[0].steps_done <= 12);
    int32_t first[16];
    memcpy(first, rr[0].output_ids, sizeof first);
    uint32_t valid = 0;
    for (int i = 0; i < 16; i++) {
        CHECK(first[i] >= 0 && first[i] < 128);
        valid += first[i] != 0;
    }
    CHECK(test_emitted[0] == valid); /* the committed non-pad tokens, canvas by canvas */
    /* the canvas records (backend.h): two whole canvases of 8 (the tiny
     * preset's canvas_length), their steps adding up to steps_done, every
     * step evaluating all 8 positions */
    uint32_t steps = 0, committed = 0;
    CHECK(canvases[0].n == 2 && canvases[0].n_past == 0);
    for (uint32_t k = 0; k < canvases[0].n; k++) {
        const tb_canvas *cv = &canvases[0].at[k];
        CHECK(cv->steps >= 2 && cv->positions == 8ull * cv->steps && cv->committed == 8);
        CHECK(k == 0 || cv->t_done_ns >= canvases[0].at[k - 1].t_done_ns);
        steps += cv->steps, committed += cv->committed;
    }
    CHECK(steps == rr[0].steps_done && committed == rr[0].n_output_tokens);
    CHECK(gen(ops, ctx, o, n, 1, 7, r2) == TB_OK);
    CHECK(memcmp(first, r2[0].output_ids, sizeof first) == 0);
    /* refusals, with the reason */
    CHECK(gen(ops, ctx, o, n, 2, 7, rr) == TB_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ops->last_error(ctx), "batch 1");
    const test_option lc[] = {{"sampler", "low_confidence"}};
    tb_option_value o2[64];
    uint32_t n2 = test_options(ops, lc, 1, o2, 64);
    CHECK(gen(ops, ctx, o2, n2, 1, 7, rr) == TB_ERR_INVALID);
    CHECK_CONTAINS(ops->last_error(ctx), "does not fit DiffusionGemma (it takes entropy_bound)");
    /* another sampler's option set is refused, not dropped */
    const test_option th[] = {{"sampler", "entropy_bound"}, {"threshold", "0.5"}};
    n2 = test_options(ops, th, 2, o2, 64);
    CHECK(gen(ops, ctx, o2, n2, 1, 7, rr) == TB_ERR_INVALID);
    CHECK_CONTAINS(ops->last_error(ctx), "threshold: DiffusionGemma's sampler (entropy_bound) does not use it");
    const test_option tp[] = {{"sampler", "entropy_bound"}, {"temperature", "0.8"}};
    n2 = test_options(ops, tp, 2, o2, 64);
    CHECK(gen(ops, ctx, o2, n2, 1, 7, rr) == TB_ERR_INVALID);
    const test_option fs[] = {{"sampler", "entropy_bound"}, {"final_store", "false"}};
    n2 = test_options(ops, fs, 2, o2, 64);
    CHECK(gen(ops, ctx, o2, n2, 1, 7, rr) == TB_ERR_INVALID);
    CHECK_CONTAINS(ops->describe(ctx), "\"dtype\":\"float32\"");
    ops->destroy(ctx);
    /* dtype = fp8 (the CPU's W8A8 path, cpu/dgemma_forward.h) */
    {
        const test_option f8[] = {{"sampler", "entropy_bound"}, {"dtype", "fp8"}};
        tb_option_value o8[64];
        uint32_t n8 = test_options(ops, f8, 2, o8, 64);
        ctx = NULL;
        st = ops->create(&test_host, "preset:tiny-diffusiongemma", o8, n8, &ctx, err, sizeof err);
        CHECK(st == TB_OK);
        if (st == TB_OK) {
            CHECK_CONTAINS(ops->describe(ctx), "\"dtype\":\"fp8\"");
            CHECK(gen(ops, ctx, o8, n8, 1, 7, rr) == TB_OK);
            CHECK(rr[0].status == TB_OK && rr[0].n_output_tokens == 16);
            int32_t f8out[16];
            memcpy(f8out, rr[0].output_ids, sizeof f8out);
            int in_range = 1;
            for (int i = 0; i < 16; i++)
                in_range &= f8out[i] >= 0 && f8out[i] < 128;
            CHECK(in_range);
            CHECK(memcmp(first, f8out, sizeof first) != 0); /* FP8 moves the logits: other tokens */
            CHECK(gen(ops, ctx, o8, n8, 1, 7, r2) == TB_OK);
            CHECK(memcmp(f8out, r2[0].output_ids, sizeof f8out) == 0);
            ops->destroy(ctx);
        } else {
            fprintf(stderr, "create fp8: %s\n", err);
        }
    }
#ifndef TB_HAVE_CUDA /* a CUDA build runs it on the device (tests/gpu/test_dgemma_gpu.c) */
    const test_option cu[] = {{"sampler", "entropy_bound"}, {"device", "cuda"}};
    n2 = test_options(ops, cu, 2, o2, 64);
    ctx = NULL;
    CHECK(ops->create(&test_host, "preset:tiny-diffusiongemma", o2, n2, &ctx, err, sizeof err) == TB_ERR_UNSUPPORTED);
    CHECK_CONTAINS(err, "device = cuda");
#endif
    /* entropy_bound on a masked-diffusion model */
    CHECK(ops->create(&test_host, "preset:tiny-llada", o, n, &ctx, err, sizeof err) == TB_OK);
    if (ctx) {
        CHECK(gen(ops, ctx, o, n, 1, 7, rr) != TB_OK);
        CHECK_CONTAINS(ops->last_error(ctx), "entropy_bound is DiffusionGemma's");
        ops->destroy(ctx);
    }
    return check_done();
}
