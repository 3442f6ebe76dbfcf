#!/usr/bin/env python3
"""The PyTorch peer of the diffusion rows of suites/gpu-8b.ini: LLaDA's
low_confidence sampler (generate.py: blocks, per-block transfer schedule,
float64 softmax confidence, top-k commits) over a LLaDA-8B-shaped model
(LLaMA blocks, bidirectional attention through SDPA, random bf16 weights),
prompt 128, gen 256, block 32, a batch of B canvases (each its own top-k
per step). Prints aggregate tokens/s per step count and batch.

usage: python3 tools/peer_llada.py [--steps 8,64] [--batches 1] [--runs 3]"""
import argparse, statistics, time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", default="8,64")
ap.add_argument("--batches", default="1")
ap.add_argument("--runs", type=int, default=3)
args = ap.parse_args()

D, H, LAYERS, FF, V, MASK = 4096, 32, 32, 12288, 126464, 126336
HD = D // H
torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16


def w(*shape):
    return (torch.randn(*shape, device=dev, dtype=dt) * 0.02)


emb, head = w(V, D), w(V, D)
layers = [dict(wqkv=w(3 * D, D), wo=w(D, D), wgu=w(2 * FF, D), wd=w(D, FF)) for _ in range(LAYERS)]
inv = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float32) / HD))


def rms(x):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt)


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


@torch.no_grad()
def forward(ids):
    B, L = ids.shape
    ang = torch.arange(L, device=dev, dtype=torch.float32)[:, None] * inv[None]
    cos = torch.cat((ang.cos(), ang.cos()), -1).to(dt)
    sin = torch.cat((ang.sin(), ang.sin()), -1).to(dt)
    x = emb[ids]
    for p in layers:
        q, k, v = (rms(x) @ p["wqkv"].T).split(D, -1)
        q, k, v = (t.view(B, L, H, HD).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=False)
        x = x + a.transpose(1, 2).reshape(B, L, D) @ p["wo"].T
        g, u = (rms(x) @ p["wgu"].T).split(FF, -1)
        x = x + (F.silu(g) * u) @ p["wd"].T
    return rms(x) @ head.T


@torch.no_grad()
def generate(prompt, steps, gen=256, block=32):
    B = prompt.shape[0]
    x = torch.full((B, prompt.shape[1] + gen), MASK, dtype=torch.long, device=dev)
    x[:, : prompt.shape[1]] = prompt
    nb = gen // block
    per = steps // nb
    for k in range(nb):
        s0 = prompt.shape[1] + k * block
        n = int((x[0, s0: s0 + block] == MASK).sum())  # the same for every canvas
        sched = [n // per + (i < n % per) for i in range(per)]
        for i in range(per):
            mask = x == MASK
            logits = forward(x)
            x0 = logits.argmax(-1)
            p = F.softmax(logits.double(), -1).gather(-1, x0[..., None]).squeeze(-1)
            p[:, s0 + block:] = -float("inf")
            conf = torch.where(mask, p, torch.tensor(-float("inf"), device=dev, dtype=p.dtype))
            idx = conf.topk(sched[i], dim=-1).indices
            x.scatter_(1, idx, x0.gather(1, idx))
    return x


for b in [int(v) for v in args.batches.split(",")]:
    prompt = torch.randint(0, 126000, (b, 128), device=dev)
    for s in [int(v) for v in args.steps.split(",")]:
        rates = []
        for r in range(args.runs + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            generate(prompt, s)
            torch.cuda.synchronize()
            if r:
                rates.append(b * 256 / (time.perf_counter() - t0))
        print(f"peer pytorch-llada llada-8b steps {s} batch {b}: {statistics.median(rates):.1f} tok/s "
              f"(runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
