#!/usr/bin/env python3
"""The PyTorch peer of suites/gpu-spec.ini's DFlash rows: DFlash's
speculative loop (our transcription of upstream's dflash_generate: target
prefill with hidden states, then per round one drafter forward over
[anchor, mask x 15] and one target forward over that block, the target's
KV cache cropped to the accepted length) at Llama-3-8B's shape with random
bf16 weights, batch 1 as upstream runs it.

With random weights the drafts are never accepted, so, as tokbench's
`forced_acceptance` option does, each round accepts exactly --accept draft
tokens whatever the target says (the bonus token after them is the
target's): the figure is the cost of drafting and verifying at that
acceptance length (accept + 1 tokens per round), not a real speed-up.
Prints the target alone (transformers' generate, greedy) and one line
per acceptance: output tokens/s (prompt and drafting included, as
tokbench's output rate), median of runs.

usage: python3 tools/peer_spec.py [--accept 0,3,7,15] [--runs 3]"""
import argparse, os, statistics, sys, time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import dflash_reference as dr  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--accept", default="0,3,7,15")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--new", type=int, default=256)
ap.add_argument("--draft-layers", type=int, default=5)
ap.add_argument("--block", type=int, default=16)
args = ap.parse_args()

tcfg = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, max_position_embeddings=8192,
            rope_theta=500000.0, tie_word_embeddings=False)
torch.manual_seed(0)
with torch.device("cuda"):
    target = LlamaForCausalLM(LlamaConfig(**tcfg)).to(torch.bfloat16).eval()
dcfg = dr.make_config(dict(tcfg, head_dim=128), n_layers=args.draft_layers, block_size=args.block,
                      mask_token_id=128255)
drafter = dr.DFlashDrafter(dcfg).to(device="cuda", dtype=torch.bfloat16).eval()
drafter.bind(target.model.embed_tokens.weight, target.lm_head.weight)
layer_ids = drafter.target_layer_ids
L = args.block


@torch.inference_mode()
def generate(ids, n_new, accept):
    """One request: n_new output tokens; rounds accept min(accept, L-1)
    draft tokens plus the target's bonus token."""
    out = target(ids, use_cache=True, output_hidden_states=True)
    past = out.past_key_values
    feats = dr.target_features(out.hidden_states, layer_ids)
    anchor = out.logits[:, -1:].argmax(-1)
    cache = dr.DraftCache(len(drafter.layers))
    start = ids.shape[1]
    made = 1  # the prefill's token
    rounds = 0
    while made < n_new:
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):  # the reference mixes float32 RoPE in
            draft, _ = drafter.draft(cache, feats, anchor, start)
        block = torch.cat([anchor, draft], dim=1)  # [1, L]
        pos = torch.arange(start, start + L, device=ids.device).unsqueeze(0)
        v = target(block, past_key_values=past, position_ids=pos, use_cache=True, output_hidden_states=True)
        post = v.logits.argmax(-1)  # [1, L]: the target's token after each row
        a = min(accept, L - 1)
        past.crop(start + a + 1)
        feats = dr.target_features(v.hidden_states, layer_ids)[:, :a + 1]
        anchor = post[:, a:a + 1]
        start += a + 1
        made += a + 1
        rounds += 1
    return rounds


ids = torch.randint(0, 128000, (1, args.prompt), device="cuda")
# the same target alone (transformers' generate, greedy): the AR row
rates = []
for r in range(args.runs + 1):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                          min_new_tokens=args.new, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    if r:
        rates.append(args.new / (time.perf_counter() - t0))
print(f"peer hf-generate llama-3-8b batch 1 (no drafter): {statistics.median(rates):.1f} tok/s "
      f"(runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
print(f"peer dflash: target llama-3-8b shape, drafter {args.draft_layers} layers, block {L}, target layers "
      f"{layer_ids}", flush=True)
for a in [int(x) for x in args.accept.split(",")]:
    rates = []
    for r in range(args.runs + 1):  # the first run is a warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        rounds = generate(ids, args.new, a)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if r:
            rates.append(args.new / dt)
    print(f"peer dflash llama-3-8b batch 1 forced acceptance {a}: {statistics.median(rates):.1f} tok/s "
          f"({rounds} verifications; runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
