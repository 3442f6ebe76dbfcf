#!/usr/bin/env python3
"""make_dflash_golden.py — golden data for tokbench's DFlash drafter
(plugins/engine/cpu/dflash.c, tests/engine/test_dflash.c): a tiny random
target and drafter, and what tools/dflash_reference.py (the transcription
of z-lab/dflash's modelling code) computes with them.

Run where python3 has torch, transformers and safetensors (the GPU
machine); CPU only, float32, one thread, fixed seeds, no network:

    CUDA_VISIBLE_DEVICES="" python3 tools/make_dflash_golden.py --out tests/data/golden-dflash

It writes, under --out (about 1.5 MB):

  target/      a LlamaForCausalLM (transformers' own save_pretrained:
               config.json, model.safetensors): vocab 256, hidden 64,
               5 layers, 4 heads, 2 KV heads, head_dim 16
  drafter/     config.json in DFlash's published layout (architectures
               DFlashDraftModel, model_type qwen3, block_size 8,
               dflash_config {mask_token_id 255, target_layer_ids [0, 1, 3]},
               num_target_layers 5), model.safetensors in its published
               names (fc, hidden_norm, layers.N.*, norm): 2 layers, so that
               the feature count (3) differs from the layer count
  expected.json
    tokens      the prompt and the target's greedy continuation: T ids
    n_prompt    P
    features    [T][3 x 64]: the target's hidden states at layers 0, 1, 3
                (transformers' output_hidden_states[id + 1]) of every
                position, concatenated in target_layer_ids order, raw (the
                drafter's fc and hidden_norm not applied)
    steps       drafting steps of upstream's loop over one cache: each
                {"start": s, "ctx0": c}: the features of positions [c, s)
                are appended to the drafter's cache (c = the previous
                step's start; 0 first), the block is tokens[s] (the anchor)
                then block_size - 1 mask ids at positions [s, s + 8);
                "logits" [8][256] of every block row, "draft" [7] (argmax
                of rows 1..7)
    fresh       one step without a cache (the context given whole): equal
                to the cached step with the same start (checked here too)
  VERSIONS.json library versions, seeds, sources

The steps advance by 1, 3 and 5 positions, so the cache grows by one row
and by several, as after verifications that accept 0, 2 and 4 drafts.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dflash_reference as dr  # noqa: E402

SEED_TARGET = 11
SEED_DRAFTER = 12
N_PROMPT = 12
N_GEN = 18
BLOCK = 8
LAYER_IDS = [0, 1, 3]
STARTS = [12, 13, 16, 21]  # advances of 1, 3 and 5 positions


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rounded(t):
    return [round(float(x), 7) for x in t.reshape(-1).tolist()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    out = args.out
    os.makedirs(out, exist_ok=True)

    target = dr.build_tiny_target(os.path.join(out, "target"), arch="llama", vocab=256, hidden=64, layers=5,
                                  heads=4, kv_heads=2, intermediate=128, seed=SEED_TARGET, std=0.08)
    tcfg = json.load(open(os.path.join(out, "target", "config.json")))
    drafter = dr.build_tiny(os.path.join(out, "drafter"), tcfg, seed=SEED_DRAFTER, std=0.08, n_layers=2,
                            target_layer_ids=LAYER_IDS, block_size=BLOCK, mask_token_id=255,
                            intermediate_size=96)
    # what was written is what is checked: reload both
    drafter = dr.load_drafter(os.path.join(out, "drafter"))
    drafter.bind(target.model.embed_tokens.weight, target.lm_head.weight)
    drafter.eval()

    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, 250, (N_PROMPT,), generator=g).tolist()
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(N_GEN):  # greedy, whole sequence each time (no cache to trust)
            o = target(torch.tensor([tokens]))
            tokens.append(int(o.logits[0, -1].argmax()))
        o = target(torch.tensor([tokens]), output_hidden_states=True)
        feats = dr.target_features(o.hidden_states, LAYER_IDS)[0]          # [T, 3H]
        # the same states from forward hooks on the decoder layers
        seen = {}
        hooks = [target.model.layers[i].register_forward_hook(
            lambda m, a, r, i=i: seen.__setitem__(i, (r[0] if isinstance(r, tuple) else r)[0]))
            for i in LAYER_IDS]
        target(torch.tensor([tokens]))
        for h in hooks:
            h.remove()
        hooked = torch.cat([seen[i] for i in LAYER_IDS], dim=-1)
        # upstream reads hidden_states[id + 1]; the definition is layer id's
        # output: the golden holds the hooked one, and says whether they agree
        hs_match = bool(torch.equal(hooked, feats))
        if not hs_match:
            log("WARNING: output_hidden_states[id + 1] differs from layer id's output; the golden keeps the latter")
        feats = hooked

        T = len(tokens)
        assert STARTS[-1] + BLOCK <= T + 1
        cache = drafter.new_cache()
        steps = []
        c0 = 0
        for s in STARTS:
            new = feats[c0:s].unsqueeze(0)
            draft, logits = drafter.draft(cache, new, torch.tensor([tokens[s]]), s)
            assert cache.length() == s
            steps.append({"start": s, "ctx0": c0, "logits": rounded(logits[0]),
                          "draft": draft[0].tolist()})
            log(f"step start {s}: draft {draft[0].tolist()} (target: {tokens[s + 1:s + BLOCK]})")
            c0 = s
        # the same last step without a cache: every context row at once
        s = STARTS[-1]
        block = torch.full((1, BLOCK), 255, dtype=torch.long)
        block[0, 0] = tokens[s]
        fresh = drafter(feats[:s].unsqueeze(0), block, torch.arange(0, s + BLOCK))
        diff = (fresh[0] - torch.tensor(steps[-1]["logits"]).view(BLOCK, -1)).abs().max().item()
        log(f"fresh vs cached: max |diff| {diff:.3g}")
        assert diff < 1e-4
        # a mask that lets every row see everything changes nothing
        full = torch.ones(1, BLOCK, s + BLOCK, dtype=torch.bool)
        masked = drafter(feats[:s].unsqueeze(0), block, torch.arange(0, s + BLOCK), attn_mask=full)
        assert torch.allclose(masked, fresh, atol=1e-6)

    exp = {
        "target": "target", "drafter": "drafter", "block_size": BLOCK, "mask_token_id": 255,
        "target_layer_ids": LAYER_IDS, "tokens": tokens, "n_prompt": N_PROMPT,
        "features": rounded(feats), "feature_width": feats.shape[1], "steps": steps,
        "fresh": {"start": s, "logits": rounded(fresh[0]), "draft": fresh[0, 1:].argmax(-1).tolist()},
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f, separators=(",", ":"))
    import safetensors
    import transformers
    with open(os.path.join(out, "VERSIONS.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "safetensors": safetensors.__version__,
                   "seeds": {"target": SEED_TARGET, "drafter": SEED_DRAFTER, "prompt": 5},
                   "sources": ["github.com/z-lab/dflash dflash/model.py @ 44947fb (DFlashDraftModel, "
                               "Qwen3DFlashAttention, dflash_generate)",
                               "github.com/z-lab/dflash dflash/model_mlx.py @ 44947fb",
                               "sgl-project/sglang python/sglang/srt/models/dflash.py",
                               "Hugging Face z-lab DFlash drafter config.json layout "
                               "(dflash_config.target_layer_ids, mask_token_id; block_size; num_target_layers)"],
                   "hidden_states_match_layer_outputs": hs_match,
                   "reference": "tools/dflash_reference.py"}, f, indent=2)
    total = 0
    for root, _, files in os.walk(out):
        for n in files:
            total += os.path.getsize(os.path.join(root, n))
    log(f"wrote {out}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
