#!/usr/bin/env python3
"""make_sampler_traces.py — golden traces of upstream's block-diffusion loops
for tests/engine/test_sampler_trace.c: every forward (kind, query span,
keys attended), the canvas after every denoising step, NFE and the tokens
returned, from our transcriptions of the published loops (tools/upstream/:
sdar_loop.py, SDAR's HF evaluation loop huggingface_bd3.py, which is
greedy with the confidence of the unfiltered softmax, as tokbench's
sdar_static / sdar_dynamic; fastdllm_v2_loop.py, Fast-dLLM v2's
model.generate() at temperature 0 without its block cache) driven by a
fake network that the C test computes bit for bit the same way.

    python3 tools/make_sampler_traces.py sdar > tests/data/golden/sampler-traces/sdar.json
    python3 tools/make_sampler_traces.py fast_dllm_v2 > tests/data/golden/sampler-traces/fast_dllm_v2.json

Standard library only; deterministic.

The fake network: the logit row of query position q, when the keys it
attends hold `ctx` tokens that are not the mask, is a splitmix64 hash h of
(q, ctx): entry i = ((h >> 4i) & 15) / 8 - 1 (exact in float32), the mask
token's (15) included: it has mass in the softmax, as upstream's loops give
it (issue 37 item 3), so confidences and the thresholds' decisions are
upstream's; a peak at token h % 13 of height 1.5 + (h >> 40) % 9, above
every other entry; at the EOS position (when a case has one) the peak is
the EOS token at 12."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream"))
import fastdllm_v2_loop as F  # noqa: E402
import sdar_loop as S  # noqa: E402

V, EOS, MASK = 16, 14, 15
M64 = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fake_row(q, ctx, eos_at, mp=None):
    """mp (a case that proposes the mask token): (position, ctx bound,
    height): the row of that position peaks on the mask token while ctx is
    below the bound."""
    h = splitmix64((q * 0x10001 + ctx * 0x3F1 + 0x5EED) & M64)
    row = [((h >> (4 * i)) & 15) / 8.0 - 1.0 for i in range(V)]
    peak, height = h % 13, 1.5 + (h >> 40) % 9
    if q == eos_at:
        peak, height = EOS, 12.0
    if mp is not None and q == mp[0] and ctx < mp[1]:
        peak, height = MASK, mp[2]
    row[peak] = float(height)
    return row


MAX_FORWARDS = 200


class Repeats(Exception):
    """Upstream's loop ran the same forward over and over (a proposed mask
    token committed, nothing else): it would never end."""


def make_fake(eos_at, mp=None):
    calls = [0]

    def fn(canvas, query_positions, key_positions):
        calls[0] += 1
        if calls[0] > MAX_FORWARDS:
            raise Repeats()
        ctx = sum(1 for p in key_positions if canvas[p] != MASK)
        return [fake_row(q, ctx, eos_at, mp) for q in query_positions]
    return fn


def run_loop(module, recorder, loop, *args, **kw):
    """(tokens, nfe, trace, how upstream's loop failed or None). A loop
    that fails keeps the trace of the forwards it ran: its recorder is
    subclassed here to be found afterwards."""
    made = []
    base = getattr(module, recorder)

    class Kept(base):
        def __init__(self, *a, **k):
            base.__init__(self, *a, **k)
            made.append(self)
    setattr(module, recorder, Kept)
    try:
        toks, nfe, trace = loop(*args, **kw)
        return toks, nfe, trace, None
    except IndexError:  # SDAR: its count list has no entry past the steps
        return None, made[0].nfe, made[0].trace, "IndexError"
    except Repeats:
        # keep the forwards through the first that wrote nothing new: the
        # ones after it are that forward again
        trace = made[0].trace
        for k in range(1, len(trace)):
            if trace[k]["query"] == trace[k - 1]["query"] and trace[k]["canvas_after"] == trace[k - 1]["canvas_after"]:
                trace = trace[:k]
                break
        return None, len(trace), trace, "repeats"
    finally:
        setattr(module, recorder, base)


def case(name, prompt_len, block, steps, gen, threshold, eos_at, mp=None):
    prompt = [(i * 5 + 1) % 13 for i in range(prompt_len)]
    toks, nfe, trace, fails = run_loop(
        S, "_Recorder", S.sdar_opencompass_bd3, make_fake(eos_at, mp), prompt, MASK, gen_length=gen,
        block_length=block, denoising_steps=steps, temperature=1.0, top_k=1, threshold=threshold,
        stopping_criteria_idx=[EOS])
    forwards = [{"kind": t["kind"], "query": t["query"], "keys": t["keys"],
                 "canvas_after": t["canvas_after"] if t["kind"] == "denoise" else None} for t in trace]
    return {"name": name, "sampler": "sdar_dynamic" if threshold < 1.0 else "sdar_static",
            "prompt": prompt, "block_length": block, "steps": steps, "gen_length": gen,
            "threshold": threshold, "eos_at": eos_at, "mask_id": MASK, "eos_id": EOS, "vocab": V,
            "mask_proposed": mp, "upstream_fails": fails, "nfe": nfe, "returned": toks, "forwards": forwards}


def fd2_case(name, prompt_len, block, sub, gen, threshold, eos_at, mp=None):
    prompt = [(i * 5 + 1) % 13 for i in range(prompt_len)]
    toks, nfe, trace, fails = run_loop(
        F, "_Model", F.fastdllm_v2_generate, make_fake(eos_at, mp), prompt, gen, mask_id=MASK,
        threshold=threshold, small_block_size=sub, block_size=block, stop_token=EOS, temperature=0,
        use_block_cache=False)
    forwards = []
    for t in trace:
        keys = t["keys"]
        assert len(keys) == 1 and keys[0][0] == 0, keys  # one span from 0: the cache + the block
        forwards.append({"kind": {"commit": "store"}.get(t["kind"], t["kind"]), "query": t["query"],
                         "keys": keys[0], "canvas_after": t["canvas_after"] if t["kind"] == "denoise" else None})
    return {"name": name, "sampler": "fast_dllm_v2", "prompt": prompt, "block_length": block, "sub_block": sub,
            "gen_length": gen, "threshold": threshold, "eos_at": eos_at, "mask_id": MASK, "eos_id": EOS,
            "vocab": V, "mask_proposed": mp, "upstream_fails": fails, "nfe": nfe, "returned": toks,
            "forwards": forwards}


def sdar_cases():
    cases = []
    for block, steps, gen in ((4, 4, 8), (4, 2, 8), (8, 8, 16)):
        # shorter than a block, a multiple of it, not a multiple (> a block)
        for plen in (block - 1, block, block + block // 2):
            # 0.85: SDAR's default; one of its cases decides differently
            # when the mask token has no mass (issue 37 item 3)
            for thr in (0.6, 0.85, 1.0):
                for eos in (False, True):
                    eos_at = plen + 2 if eos else None
                    name = "b%d_s%d_g%d_p%d_%s%s" % (block, steps, gen, plen,
                                                     "dyn%g" % thr if thr < 1 else "static",
                                                     "_eos%d" % eos_at if eos else "")
                    cases.append(case(name, plen, block, steps, gen, thr, eos_at))
    # the mask token proposed (the row of one position peaks on it while
    # fewer than `ctx` keys are unmasked): committed, it leaves the position
    # masked; where no step count is left upstream's loop fails (IndexError)
    for plen, block, steps, thr, (pos, ctx, height) in (
            (3, 8, 8, 0.6, (4, 5, 12.0)), (4, 4, 4, 0.85, (5, 6, 12.0)), (4, 4, 4, 1.0, (5, 6, 1.2)),
            (4, 4, 4, 1.0, (5, 6, 12.0)), (3, 8, 8, 0.6, (4, 99, 12.0))):
        name = "maskprop_b%d_s%d_p%d_%s_at%d_below%d_h%g" % (block, steps, plen, "dyn%g" % thr if thr < 1 else "static",
                                                          pos, ctx, height)
        cases.append(case(name, plen, block, steps, 2 * block, thr, None, (pos, ctx, height)))
    return cases, ("SDAR evaluation/opencompass/opencompass/models/huggingface_bd3.py "
                   "block_diffusion_generate @ c2041a8 (tools/upstream/sdar_loop.py)")


def fd2_cases():
    """Prompts shorter than a block, past one and not a multiple, a multiple
    past one; not one block exactly: there upstream's generate() runs no
    prefill and never attends the prompt (its `> block_size`), a bug
    tokbench does not reproduce (it prefills the block: one forward more).
    EOS: the row at eos_at peaks on it, so it lands at eos_at + 1 (the
    logits shift); early (no mask before it once committed) and late."""
    cases = []
    for block, sub, gen in ((8, 4, 16), (8, 8, 24), (8, 2, 16)):
        for plen in (3, 12, 16):
            for thr in (0.6, 1.0):
                for eos_at in (None, plen + 1, plen + 9):
                    name = "b%d_sb%d_g%d_p%d_t%s%s" % (block, sub, gen, plen, thr,
                                                       "" if eos_at is None else "_eos%d" % eos_at)
                    cases.append(fd2_case(name, plen, block, sub, gen, thr, eos_at))
    # the mask token proposed (as SDAR's): where nothing else is committed
    # upstream's loop repeats that forward forever
    for plen, thr, (pos, ctx, height) in ((3, 0.6, (4, 5, 12.0)), (12, 0.85, (13, 14, 12.0)), (3, 1.0, (4, 5, 1.2)),
                                          (3, 1.0, (4, 5, 12.0)), (12, 1.0, (13, 14, 12.0)), (3, 0.85, (4, 5, 12.0))):
        name = "maskprop_b8_sb4_g16_p%d_t%g_at%d_below%d_h%g" % (plen, thr, pos, ctx, height)
        cases.append(fd2_case(name, plen, 8, 4, 16, thr, None, (pos, ctx, height)))
    return cases, ("Fast-dLLM v2 Efficient-Large-Model/Fast_dLLM_v2_7B modeling.py generate() "
                   "(tools/upstream/fastdllm_v2_loop.py)")


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "sdar"
    cases, loop = {"sdar": sdar_cases, "fast_dllm_v2": fd2_cases}[which]()
    json.dump({"made_by": "tools/make_sampler_traces.py " + which, "loop": loop, "cases": cases}, sys.stdout,
              separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
