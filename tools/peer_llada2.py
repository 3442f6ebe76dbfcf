#!/usr/bin/env python3
"""The PyTorch peer of suites/gpu-llada2.ini: the published LLaDA 2.x
modelling code (LLaDA2MoeModelLM of modeling_llada2_moe.py: SDPA attention,
its sparse block as written, a loop over the experts) at LLaDA2.0-mini's
shape with random bf16 weights on the GPU, driven by its own generate()
(block diffusion: block 32, the block-causal mask, threshold 0.95, steps a
block), prompt 128, gen 256. That generate() decodes one sequence (it
indexes canvas 0), so the peer runs batch 1 only. Prints tokens/s (256 /
wall time) per step count.

The modelling code is not in this repository: --modelling names the folder
holding configuration_llada2_moe.py and modeling_llada2_moe.py (see
tools/make_llada2_golden.py, whose transformers-5 stand-ins it uses).

usage: python3 tools/peer_llada2.py --modelling DIR [--steps 8] [--runs 1]"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llada2_golden as golden  # noqa: E402

import torch  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--modelling", required=True)
ap.add_argument("--steps", default="8")
ap.add_argument("--runs", type=int, default=1)
args = ap.parse_args()

# LLaDA2.0-mini's config.json (as preset:llada2-mini)
CONFIG = dict(vocab_size=157184, hidden_size=2048, intermediate_size=5120, num_hidden_layers=20,
              num_attention_heads=16, num_key_value_heads=4, head_dim=128, hidden_act="silu", use_qkv_bias=False,
              use_qk_norm=True, use_bias=False, rms_norm_eps=1e-6, tie_word_embeddings=False, embedding_dropout=0.0,
              attention_dropout=0.0, output_dropout=0.0, max_position_embeddings=16384, rope_theta=600000,
              use_cache=False, rope_scaling=None, pad_token_id=156892, num_experts=256, num_shared_experts=1,
              num_experts_per_tok=8, n_group=8, topk_group=4, routed_scaling_factor=2.5, moe_intermediate_size=512,
              first_k_dense_replace=1, partial_rotary_factor=0.5)
dev, dt = "cuda", torch.bfloat16

cfg_mod, mdl_mod, ru = golden.import_published(args.modelling)
config = cfg_mod.LLaDA2MoeConfig(**CONFIG)
for name in ("_attn_implementation", "_attn_implementation_internal"):
    try:
        setattr(config, name, "sdpa")
    except Exception:  # noqa: BLE001
        pass
for name, value in (("use_return_dict", True), ("output_attentions", False), ("output_hidden_states", False)):
    if not hasattr(config, name):
        setattr(config, name, value)
golden.rope_default(ru, config)
torch.manual_seed(0)
torch.set_default_dtype(dt)
with torch.device(dev):
    try:
        model = mdl_mod.LLaDA2MoeModelLM(config)
    except Exception:  # noqa: BLE001 (transformers 5 takes a dict here)
        mdl_mod.LLaDA2MoeModelLM._tied_weights_keys = {}
        model = mdl_mod.LLaDA2MoeModelLM(config)
torch.set_default_dtype(torch.float32)
model = model.to(dev, dt).eval()
with torch.no_grad():  # ordinary random values whatever the init did
    for name, p in model.named_parameters():
        if p.dim() == 2:
            p.normal_(0, 0.02)
        else:
            p.fill_(1.0)
n_params = sum(p.numel() for p in model.parameters())
print(f"peer model: {n_params / 1e9:.2f} G parameters, attention {getattr(config, '_attn_implementation', '?')}, "
      f"shims {golden.SHIMS}", flush=True)

prompt = torch.randint(0, 156000, (1, 128), device=dev)
for s in [int(v) for v in args.steps.split(",")]:
    rates = []
    for r in range(args.runs + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(inputs=prompt, temperature=0.0, block_length=32, steps=s, gen_length=256,
                             threshold=0.95, eos_id=-1)  # -1: never an EOS
        torch.cuda.synchronize()
        rate = out.shape[1] / (time.perf_counter() - t0)
        # each run as it ends (a slow peer cut off by a timeout still says how far it got)
        print(f"peer run {'warm-up' if r == 0 else r} steps {s}: {rate:.2f} tok/s", flush=True)
        if r:
            rates.append(rate)
    print(f"peer pytorch-llada2 llada2-mini batch 1 steps {s}: {statistics.median(rates):.1f} tok/s "
          f"({out.shape[1]} tokens; runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
