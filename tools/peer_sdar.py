#!/usr/bin/env python3
"""The PyTorch peer of the block-diffusion rows of suites/gpu-block.ini:
SDAR's block_diffusion_generate (generate.py of github.com/JetAstra/SDAR:
prefill of the prompt's whole blocks under the block-causal mask, then per
block: denoising steps over the KV cache of the blocks before (store_kv
False: the block's keys and values are not kept), low_confidence_static
top-k commits of the per-block transfer schedule, then one forward that
stores the finished block's keys and values) at temperature 0 (argmax,
float64 softmax confidence, as tokbench) over an SDAR-8B-shaped model
(Qwen3 blocks: QK-norm, GQA 32/8, head_dim 128, 36 layers, vocab 151936;
random bf16 weights; SDPA attention). The same positions as tokbench: the
canvas is prompt + gen rounded to a block; no store after the last block.
Batch b runs b canvases together (SDAR's per-row top-k).

usage: python3 tools/peer_sdar.py [--steps 4,2] [--batch 1,8] [--runs 3]"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", default="4,2")
ap.add_argument("--batch", default="1,8")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--gen", type=int, default=256)
ap.add_argument("--block", type=int, default=4)
args = ap.parse_args()

D, H, KV, HD, LAYERS, FF, V, MASK = 4096, 32, 8, 128, 36, 12288, 151936, 151669
torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16


def w(*shape):
    return torch.randn(*shape, device=dev, dtype=dt) * 0.02


emb, head = w(V, D), w(V, D)
layers = [dict(wqkv=w((H + 2 * KV) * HD, D), wo=w(D, H * HD), wgu=w(2 * FF, D), wd=w(D, FF),
               qn=torch.ones(HD, device=dev, dtype=dt), kn=torch.ones(HD, device=dev, dtype=dt))
          for _ in range(LAYERS)]
inv = 1.0 / (1000000.0 ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float32) / HD))


def rms(x, wt=None):
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dt)
    return y * wt if wt is not None else y


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


@torch.no_grad()
def forward(ids, pos0, past, store, mask=None, logits=True):
    """ids [B, n] at positions pos0..; past: per layer (K, V) [B, KV, pos0, HD]
    or None; store: keep this span's K/V (SDAR's store_kv)."""
    B, n = ids.shape
    ang = torch.arange(pos0, pos0 + n, device=dev, dtype=torch.float32)[:, None] * inv[None]
    cos = torch.cat((ang.cos(), ang.cos()), -1).to(dt)
    sin = torch.cat((ang.sin(), ang.sin()), -1).to(dt)
    x = emb[ids]
    for i, p in enumerate(layers):
        q, k, v = (rms(x) @ p["wqkv"].T).split([H * HD, KV * HD, KV * HD], -1)
        q = rope(rms(q.view(B, n, H, HD), p["qn"]).transpose(1, 2), cos, sin)
        k = rope(rms(k.view(B, n, KV, HD), p["kn"]).transpose(1, 2), cos, sin)
        v = v.view(B, n, KV, HD).transpose(1, 2)
        if past[i] is not None:
            k = torch.cat((past[i][0], k), 2)
            v = torch.cat((past[i][1], v), 2)
        if store:
            past[i] = (k, v)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(B, n, H * HD) @ p["wo"].T
        g, u = (rms(x) @ p["wgu"].T).split(FF, -1)
        x = x + (F.silu(g) * u) @ p["wd"].T
    return rms(x) @ head.T if logits else None


@torch.no_grad()
def generate(prompt, steps, gen, bs):
    B, P = prompt.shape
    nblocks = (P + gen + bs - 1) // bs
    L = nblocks * bs
    x = torch.full((B, L), MASK, dtype=torch.long, device=dev)
    x[:, :P] = prompt
    past = [None] * LAYERS
    pre = P // bs * bs
    nfe = 0
    if pre:
        blk = torch.arange(pre, device=dev) // bs
        forward(x[:, :pre], 0, past, True, mask=blk[:, None] >= blk[None, :], logits=False)
        nfe += 1
    sched = [bs // steps + (i < bs % steps) for i in range(steps)]
    for nb in range(P // bs, nblocks):
        s0, s1 = nb * bs, (nb + 1) * bs
        cur = x[:, s0:s1].clone()
        for step in range(steps + 1):
            mask_index = cur == MASK
            if int(mask_index.sum()) == 0:
                if s1 < L:
                    forward(cur, s0, past, True, logits=False)
                    nfe += 1
                break
            logits = forward(cur, s0, past, False)
            nfe += 1
            x0 = logits.argmax(-1)
            p = F.softmax(logits.double(), -1).gather(-1, x0[..., None]).squeeze(-1)
            conf = torch.where(mask_index, p, torch.tensor(-float("inf"), device=dev, dtype=p.dtype))
            for j in range(B):
                idx = conf[j].topk(sched[step]).indices
                cur[j, idx] = x0[j, idx]
        x[:, s0:s1] = cur
    return x, nfe


prompt_all = torch.randint(0, 151000, (max(int(b) for b in args.batch.split(",")), args.prompt), device=dev)
for b in [int(v) for v in args.batch.split(",")]:
    for s in [int(v) for v in args.steps.split(",")]:
        rates, nfe = [], 0
        for r in range(args.runs + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            _, nfe = generate(prompt_all[:b], s, args.gen, args.block)
            torch.cuda.synchronize()
            if r:
                rates.append(b * args.gen / (time.perf_counter() - t0))
        print(f"peer pytorch-sdar sdar-8b static block {args.block} steps {s} batch {b}: "
              f"{statistics.median(rates):.1f} tok/s aggregate, {nfe} forwards "
              f"(runs {', '.join(f'{x:.1f}' for x in rates)})", flush=True)
