#!/usr/bin/env python3
"""make_sampler_traces.py — golden traces of upstream's block-diffusion loops
for tests/engine/test_sampler_trace.c: every forward (kind, query span,
keys attended), the canvas after every denoising step, NFE and the tokens
returned, from our transcriptions of the published loops (tools/upstream/:
sdar_loop.py, SDAR's HF evaluation loop huggingface_bd3.py, which is
greedy with the confidence of the unfiltered softmax, as tokbench's
sdar_static / sdar_dynamic) driven by a fake network that the C test
computes bit for bit the same way.

    python3 tools/make_sampler_traces.py > tests/data/golden/sampler-traces/sdar.json

Standard library only; deterministic.

The fake network: the logit row of query position q, when the keys it
attends hold `ctx` tokens that are not the mask, is a splitmix64 hash h of
(q, ctx): entry i = ((h >> 4i) & 15) / 8 - 1 (exact in float32), the mask
token's entry -inf (no mass: tokbench's block samplers drop the mask token
from the softmax, upstream keeps it — issue 37 item 3 — so these traces
test the loop, not that rule), a peak at token h % 13 of height 1.5 + (h >>
40) % 9, above every other entry; at the EOS position (when a case has one)
the peak is the EOS token at 12."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream"))
import sdar_loop as S  # noqa: E402

V, EOS, MASK = 16, 14, 15
M64 = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fake_row(q, ctx, eos_at):
    h = splitmix64((q * 0x10001 + ctx * 0x3F1 + 0x5EED) & M64)
    row = [((h >> (4 * i)) & 15) / 8.0 - 1.0 for i in range(V)]
    row[MASK] = -math.inf
    peak, height = h % 13, 1.5 + (h >> 40) % 9
    if q == eos_at:
        peak, height = EOS, 12.0
    row[peak] = float(height)
    return row


def make_fake(eos_at):
    def fn(canvas, query_positions, key_positions):
        ctx = sum(1 for p in key_positions if canvas[p] != MASK)
        return [fake_row(q, ctx, eos_at) for q in query_positions]
    return fn


def case(name, prompt_len, block, steps, gen, threshold, eos_at):
    prompt = [(i * 5 + 1) % 13 for i in range(prompt_len)]
    toks, nfe, trace = S.sdar_opencompass_bd3(
        make_fake(eos_at), prompt, MASK, gen_length=gen, block_length=block, denoising_steps=steps,
        temperature=1.0, top_k=1, threshold=threshold, stopping_criteria_idx=[EOS])
    # the smallest distance of a confidence from the threshold: a test of
    # decisions, not of rounding (recomputed from the rows the loop saw)
    forwards = [{"kind": t["kind"], "query": t["query"], "keys": t["keys"],
                 "canvas_after": t["canvas_after"] if t["kind"] == "denoise" else None} for t in trace]
    return {"name": name, "sampler": "sdar_dynamic" if threshold < 1.0 else "sdar_static",
            "prompt": prompt, "block_length": block, "steps": steps, "gen_length": gen,
            "threshold": threshold, "eos_at": eos_at, "mask_id": MASK, "eos_id": EOS, "vocab": V,
            "nfe": nfe, "returned": toks, "forwards": forwards}


def main():
    cases = []
    for block, steps, gen in ((4, 4, 8), (4, 2, 8), (8, 8, 16)):
        # shorter than a block, a multiple of it, not a multiple (> a block)
        for plen in (block - 1, block, block + block // 2):
            for thr in (0.6, 1.0):
                for eos in (False, True):
                    eos_at = plen + 2 if eos else None
                    name = "b%d_s%d_g%d_p%d_%s%s" % (block, steps, gen, plen, "dyn" if thr < 1 else "static",
                                                     "_eos%d" % eos_at if eos else "")
                    cases.append(case(name, plen, block, steps, gen, thr, eos_at))
    json.dump({"made_by": "tools/make_sampler_traces.py",
               "loop": "SDAR evaluation/opencompass/opencompass/models/huggingface_bd3.py "
                       "block_diffusion_generate @ c2041a8 (tools/upstream/sdar_loop.py)",
               "cases": cases}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
