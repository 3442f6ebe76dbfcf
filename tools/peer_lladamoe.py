#!/usr/bin/env python3
"""The PyTorch peer of suites/gpu-moe-diffusion.ini: the published LLaDA-MoE
modelling code (LLaDAMoEModelLM of modeling_lladamoe.py, its SDPA attention
and its sparse block as written: a loop over the experts) at
LLaDA-MoE-7B-A1B's shape with random bf16 weights on the GPU, driven by
LLaDA's low_confidence sampler (generate.py: blocks, per-block transfer
schedule, softmax confidence, top-k commits per canvas), prompt 128, gen
256, block 32. Prints tokens/s (all canvases' output tokens / wall time)
per batch and step count.

The modelling code is not in this repository: --modelling names the folder
holding configuration_lladamoe.py and modeling_lladamoe.py (see
tools/make_lladamoe_golden.py, whose transformers-5 stand-ins it uses).

usage: python3 tools/peer_lladamoe.py --modelling DIR [--batch 1,32] [--steps 8,64] [--runs 2]"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_lladamoe_golden as golden  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--modelling", required=True)
ap.add_argument("--batch", default="1,32")
ap.add_argument("--steps", default="8,64")
ap.add_argument("--runs", type=int, default=2)
args = ap.parse_args()

# LLaDA-MoE-7B-A1B-Base's config.json (as preset:llada-moe-7b-a1b)
CONFIG = dict(vocab_size=157184, hidden_size=2048, dense_intermediate_size=8192, expert_intermediate_size=1024,
              shared_expert_intermediate_size=None, num_hidden_layers=16, num_attention_heads=16,
              num_key_value_heads=16, hidden_act="silu", max_position_embeddings=8192, rms_norm_eps=1e-5,
              use_cache=False, pad_token_id=None, eos_token_id=156892, tie_word_embeddings=False,
              rope_theta=50000.0, partial_rotary_factor=1, rope_scaling=None, attention_bias=False,
              attention_dropout=0.0, clip_qkv=None, num_experts_per_tok=8, num_experts=64, norm_topk_prob=False,
              qk_layernorm=True, moe_layer_freq=[1] * 16, moe_router_enable_expert_bias=False,
              moe_router_score_function="softmax", routed_scaling_factor=1, router_num_group=None,
              router_topk_group=None)
MASK = 156895
dev, dt = "cuda", torch.bfloat16

cfg_mod, mdl_mod, ru = golden.import_published(args.modelling)
config = golden.make_config(cfg_mod, CONFIG, "sdpa")
golden.rope_default(ru, config)
torch.manual_seed(0)
torch.set_default_dtype(dt)
with torch.device(dev):
    try:
        model = mdl_mod.LLaDAMoEModelLM(config)
    except Exception:  # noqa: BLE001 (transformers 5 takes a dict here)
        mdl_mod.LLaDAMoEModelLM._tied_weights_keys = {}
        model = mdl_mod.LLaDAMoEModelLM(config)
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


@torch.no_grad()
def generate(prompt, steps, gen=256, block=32):
    B, P = prompt.shape
    x = torch.full((B, P + gen), MASK, dtype=torch.long, device=dev)
    x[:, :P] = prompt
    nb = gen // block
    per = steps // nb
    for k in range(nb):
        s0 = P + k * block
        n = block  # every canvas's block is all masks at its start
        sched = [n // per + (i < n % per) for i in range(per)]
        for i in range(per):
            mask = x == MASK
            logits = model(input_ids=x).logits
            x0 = logits.argmax(-1)
            p = F.softmax(logits.float(), -1).gather(-1, x0[..., None]).squeeze(-1)
            p[:, s0 + block:] = -float("inf")
            conf = torch.where(mask, p, torch.tensor(-float("inf"), device=dev, dtype=p.dtype))
            idx = conf.topk(sched[i], dim=-1).indices
            x.scatter_(1, idx, x0.gather(1, idx))
    return x


for b in [int(v) for v in args.batch.split(",")]:
    prompt = torch.randint(0, 156000, (b, 128), device=dev)
    for s in [int(v) for v in args.steps.split(",")]:
        rates = []
        for r in range(args.runs + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = generate(prompt, s)
            torch.cuda.synchronize()
            if r:
                rates.append(b * 256 / (time.perf_counter() - t0))
        assert not (out == MASK).any()
        print(f"peer pytorch-lladamoe llada-moe-7b-a1b batch {b} steps {s}: {statistics.median(rates):.1f} tok/s "
              f"(runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
