/* block_sampler.h — block diffusion (SDAR, Fast-dLLM v2): attention is
 * causal across blocks and bidirectional inside one, so a finished block
 * has an exact KV cache, as an AR model's tokens do. Transcribed from the
 * published generation code (SDAR's generate.py block_diffusion_generate,
 * Fast-dLLM v2's batch_sample); tests/test_block_diffusion.c checks every
 * canvas against a PyTorch transcription (tools/make_block_golden.py).
 *
 * Blocks are block_length positions counted from position 0, as upstream
 * does. The canvas of a request is prompt P + gen_length positions rounded
 * up to a whole block (SDAR); for fast_dllm_v2 (its generate()) the block
 * holding P and gen_length / block_length blocks after it (gen_length must
 * be at least one block), and one position more for the token its last
 * commit forward adds. Then:
 *   prefill   the prompt's whole blocks in one block-causal forward (keys
 *             and values kept); none when P < block_length.
 *   per block from the one holding position P, over the exact cache of
 *             the blocks before it (attention to [0, block end)):
 *     sdar_static / sdar_dynamic (SDAR's low_confidence_static/_dynamic):
 *             steps = denoising steps per block (1 .. block_length); step s
 *             commits n_s = block_length / steps (+1 for the first
 *             block_length % steps) of the block's masks, the most
 *             confident; dynamic commits instead every mask whose
 *             confidence > threshold when they are at least n_s.
 *     fast_dllm_v2: sub-blocks of sub_block positions in order; each step
 *             commits every mask of the sub-block with confidence >
 *             threshold and always the most confident one; logits shifted
 *             (position i reads the output at i - 1, the span's first its
 *             own, as upstream). cache = none: every step runs the whole
 *             block; cache = dual (upstream's use_block_cache): a step runs
 *             the sub-block alone over the block's cached keys and values,
 *             except the block's first step and a sub-block whose first
 *             position is still masked, which run the whole block.
 *   store     the finished block's forward, its keys and values kept (the
 *             exact cache); for fast_dllm_v2 its last position's argmax is
 *             the next block's first token (and the prefill's, when P is a
 *             whole number of blocks). SDAR, as its loop: after every block,
 *             the last one and a request's EOS block included
 *             (skip_final_store: not those two, tokbench's lighter loop);
 *             fast_dllm_v2 (its commit forward): after every block, the
 *             last included, not for a request that stopped.
 * Output: SDAR returns the whole canvas through its last block (prompt +
 * gen_length rounded up to a whole block, as its loop returns it), or
 * through the block where it stopped at an EOS; fast_dllm_v2 through the
 * token after its last block, or through its first EOS.
 * EOS, fast_dllm_v2 (its generate()): before every forward of a block and
 * before its commit forward, a request whose block holds a committed EOS
 * with no mask before it (from the block's first new position) leaves: no
 * further forward, no commit forward; masks after the EOS stay.
 * Where tokbench departs from upstream: a prompt of exactly one block gets
 * fast_dllm_v2 its prefill (generate() runs none when P == block_length
 * and then never attends the prompt: a bug, not reproduced; one forward
 * more); where upstream's loop, the mask token proposed, would fail or
 * never end, tokbench goes on without proposing it (below).
 * tests/engine/test_sampler_trace.c checks both samplers' forwards,
 * canvases and output against golden traces of upstream's loops
 * (tools/make_sampler_traces.py over tools/upstream/).
 * Confidence (temperature 0 only): the softmax probability of the argmax,
 * in float64, over the whole vocabulary, the mask token included, as
 * upstream's (issue 37 item 3). A proposed mask token is committed as
 * upstream commits it: the position stays masked. Where upstream's loop
 * then breaks, tokbench runs the forward again with the mask token kept
 * from the proposals (tb_dllm_stats.mask_fallbacks counts those forwards,
 * the backend logs a warning): SDAR, masks left after its steps (its count
 * list has no further step: IndexError); Fast-dLLM v2, a step that wrote
 * only mask tokens into a canvas (its next forward is the same one, for
 * ever). Trained models give the mask token next to no mass; the traces'
 * fake network gives it some, and has cases that propose it.
 * A step commits only masked positions: upstream's top-k over
 * confidences of -inf would overwrite prompt or committed tokens when a
 * step's count exceeds the masks left (a prompt-tail block with steps <
 * block_length); the golden cases avoid that case.
 * EOS early stop, SDAR: a request whose finished block (or, fast_dllm_v2,
 * next token) holds an EOS of p->eos_ids stops there: no later block of it
 * is decoded, no forward runs its rows again, and its positions after the
 * block are set to the first EOS id (never denoised, never output). The batch moves block by block;
 * each forward runs only the requests that still have masks in the span
 * (or, for prefill and store, every request still decoding).
 * Counts (tb_dllm_stats): forwards = every forward (prefill, steps, store);
 * steps and request_steps = denoising forwards; blocks and request_blocks =
 * blocks decoded; request_tokens = output positions decoded (through the
 * EOS block of a request that stopped). */
#ifndef TB_DIFFUSION_BLOCK_SAMPLER_H
#define TB_DIFFUSION_BLOCK_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "dllm.h"

/* 0, or -1 with the reason. */
int tb_dllm_block_validate(const tb_dllm_params *p, char *why, size_t why_size);

/* As tb_dllm_generate (generate.h), for a block sampler (validated); canvas [B][L],
 * L = tb_dllm_canvas_length(p, prompt_len). */
int tb_dllm_block_generate(const tb_dllm_engine *e, const tb_dllm_params *p, int32_t *canvas, int B, int prompt_len,
                           uint64_t seed, const tb_dllm_hooks *h, tb_dllm_stats *stats, char *why, size_t why_size);

#endif
