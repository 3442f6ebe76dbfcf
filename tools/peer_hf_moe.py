#!/usr/bin/env python3
"""The Hugging Face transformers peer for suites/gpu-moe.ini: a
Qwen3-30B-A3B-shaped Qwen3MoeForCausalLM (48 layers, 128 experts, top 8)
with random bf16 weights made on the GPU, greedy generate of exactly 256 new
tokens after a 128-token prompt, batch 1 and 32, transformers' default
attention and experts implementation. Prints one line per batch: aggregate
output tokens/s (median of runs, after one warm-up run).

usage: python3 tools/peer_hf_moe.py [--batches 1,32] [--runs 2]"""
import argparse, statistics, time

import torch
import transformers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,32")
ap.add_argument("--runs", type=int, default=2)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--new", type=int, default=256)
args = ap.parse_args()

cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                     num_attention_heads=32, num_key_value_heads=4, head_dim=128, rms_norm_eps=1e-6,
                     max_position_embeddings=40960, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                     num_experts=128, num_experts_per_tok=8,
                     moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                     tie_word_embeddings=False)
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)  # made in bf16: 30.5 B parameters, 61 GB
with torch.device("cuda"):
    model = Qwen3MoeForCausalLM(cfg).eval()
print(f"peer hf-moe: transformers {transformers.__version__}, torch {torch.__version__}, "
      f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters", flush=True)
for b in [int(x) for x in args.batches.split(",")]:
    ids = torch.randint(0, 151000, (b, args.prompt), device="cuda")
    rates = []
    for r in range(args.runs + 1):  # the first run is a warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                                 min_new_tokens=args.new, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        assert out.shape[1] == args.prompt + args.new
        if r:
            rates.append(b * args.new / dt)
    print(f"peer hf-generate qwen3-30b-a3b batch {b}: {statistics.median(rates):.1f} tok/s aggregate "
          f"(runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
