#!/usr/bin/env python3
"""The Hugging Face transformers peer for suites/gpu-8b.ini: a Llama-3-8B-
shaped LlamaForCausalLM with random bf16 weights on the GPU, greedy
generate of exactly 256 new tokens after a 128-token prompt, batch 1 and 32.
Prints one line per batch: aggregate output tokens/s (median of runs).

usage: python3 tools/peer_hf_generate.py [--batches 1,32] [--runs 3]"""
import argparse, statistics, time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,32")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--new", type=int, default=256)
args = ap.parse_args()

cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, max_position_embeddings=8192,
                  rope_theta=500000.0, tie_word_embeddings=False)
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
for b in [int(x) for x in args.batches.split(",")]:
    ids = torch.randint(0, 128000, (b, args.prompt), device="cuda")
    rates = []
    for r in range(args.runs + 1):  # the first run is a warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new,
                             min_new_tokens=args.new, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        assert out.shape[1] == args.prompt + args.new
        if r:
            rates.append(b * args.new / dt)
    print(f"peer hf-generate llama-3-8b batch {b}: {statistics.median(rates):.1f} tok/s aggregate "
          f"(runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
