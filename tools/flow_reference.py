#!/usr/bin/env python3
"""flow_reference.py — a PyTorch reference of tokbench's `flow` backend: the
LangFlow-layout network (plugins/flow/flow_model.h) and its Euler and Heun
samplers (plugins/flow/flow_sampler.h), written from those definitions in
float64-free float32 PyTorch, so that the C engine can be held to it.

  python3 tools/flow_reference.py golden OUTDIR

makes a tiny random model in LangFlow's tensor names (OUTDIR/config.json,
OUTDIR/model.safetensors) and OUTDIR/golden.json: the noise schedule, one
forward's logits for a given state (two canvases, one left-padded), and the
samplers' final logits and tokens at several step counts, solvers and
prompt modes, from given starting noise. tests/test_flow.c checks the C
engine against it. Needs torch and safetensors (the GPU machine has both).
"""
import json
import math
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

torch.set_default_dtype(torch.float32)


class Cfg:
    def __init__(self, d):
        self.vocab = d["vocab_size"]
        self.D = d["hidden_size"]
        self.C = d["cond_dim"]
        self.blocks = d["n_blocks"]
        self.heads = d["n_heads"]
        self.hd = self.D // self.heads
        self.F = d.get("mlp_ratio", 4) * self.D
        self.freq = d.get("freq_embed_dim", 256)
        self.max_period = d.get("time_max_period", 10000.0)
        self.theta = d.get("rope_theta", 10000.0)
        self.eps = d.get("norm_eps", 1e-5)
        self.t_eps = d.get("t_eps", 1e-5)
        self.self_cond = d["self_conditioning"]
        self.use_bias = d["use_bias"]
        self.loc = d["gumbel_loc"]
        self.scale = d["gumbel_scale"]
        self.cutoff = d["gumbel_cutoff"]
        self.prompt_min = d.get("prompt_gamma", "canvas") == "min"
        self.prompt_only = d.get("prompt_attention", "full") == "prompt"


def gamma_min(c):
    return c.loc - c.scale * math.log(-math.log(c.cutoff))


def schedule(c, N):
    lo = c.loc - c.scale * math.log(-math.log(c.cutoff))
    hi = c.loc - c.scale * math.log(c.cutoff)
    out = []
    for i in range(N):
        q = 1 - c.t_eps if N == 1 else (1 - c.t_eps) + (c.t_eps - (1 - c.t_eps)) * i / (N - 1)
        g = c.loc - c.scale * math.log(-math.log(q))
        out.append(min(max(g, lo), hi))
    return out


def alpha(g):
    return math.sqrt(1 / (1 + math.exp(g)))  # sqrt(sigmoid(-g))


def sigma(g):
    return math.sqrt(1 / (1 + math.exp(-g)))  # sqrt(sigmoid(g))


def silu(x):
    return x * torch.sigmoid(x)


def time_cond(c, W, g):
    half = c.freq // 2
    k = torch.arange(half, dtype=torch.float64)
    w = torch.exp(-math.log(c.max_period) * k / half).float()
    a = torch.tensor(g, dtype=torch.float32) * w
    tf = torch.cat([torch.cos(a), torch.sin(a)])
    h = silu(W["backbone.sigma_map.mlp.0.weight"] @ tf + W["backbone.sigma_map.mlp.0.bias"])
    return silu(W["backbone.sigma_map.mlp.2.weight"] @ h + W["backbone.sigma_map.mlp.2.bias"])


def ln_mod(x, w, shift, scale, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return ((x - mean) / torch.sqrt(var + eps) * w) * (1 + scale) + shift


def rope(v, pos, c):
    # v [L, heads, hd]; rotate-half at positions pos [L]
    inv = torch.tensor([1.0 / c.theta ** (2 * i / c.hd) for i in range(c.hd // 2)], dtype=torch.float32)
    ang = pos.float()[:, None] * inv[None, :]
    cs, sn = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = v[..., : c.hd // 2], v[..., c.hd // 2:]
    return torch.cat([a * cs - b * sn, b * cs + a * sn], -1)


def forward(c, W, E, z, xsc, gammas, pads, gen0=0):
    """logits [B, L, V] of f(z, gamma, x_sc) with left padding pads[b];
    positions before gen0 at the schedule's lowest level when the model's
    prompt_gamma is "min" (every row its own level: cond and modulations
    per row)."""
    B, L, D = z.shape
    out = []
    for b in range(B):
        gp = gen0 if c.prompt_min else 0
        grow = torch.tensor([gamma_min(c) if i < gp else gammas[b] for i in range(L)], dtype=torch.float64)
        cond = torch.stack([time_cond(c, W, float(g)) for g in grow])  # [L, C]
        x = z[b].clone()
        if c.self_cond:
            x = x + torch.cat([z[b], xsc[b]], -1) @ W["backbone.self_cond_proj.weight"].T
        p = pads[b]
        pos = torch.clamp(torch.arange(L) - p, min=0)
        keymask = torch.arange(L) < p
        for i in range(c.blocks):
            pre = "backbone.blocks.%d." % i
            m = cond @ W[pre + "adaLN_modulation.weight"].T + W[pre + "adaLN_modulation.bias"]
            sh1, sc1, g1, sh2, sc2, g2 = m.split(D, -1)
            h = ln_mod(x, W[pre + "norm1.weight"], sh1, sc1, c.eps)
            qkv = h @ W[pre + "attn_qkv.weight"].T
            q, k, v = qkv.split(D, -1)
            q = rope(q.view(L, c.heads, c.hd), pos, c)
            k = rope(k.view(L, c.heads, c.hd), pos, c)
            v = v.view(L, c.heads, c.hd)
            s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(c.hd)
            s = s.masked_fill(keymask[None, None, :], float("-inf"))
            if c.prompt_only:  # rows before gen0 see no key at or after it
                s = s.masked_fill(((torch.arange(L) < gen0)[:, None] & (torch.arange(L) >= gen0)[None, :])[None],
                                  float("-inf"))
            a = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v).reshape(L, D)
            x = x + g1 * (a @ W[pre + "attn_out.weight"].T)
            h = ln_mod(x, W[pre + "norm2.weight"], sh2, sc2, c.eps)
            u = F.gelu(h @ W[pre + "mlp.0.weight"].T + W[pre + "mlp.0.bias"], approximate="tanh")
            x = x + g2 * (u @ W[pre + "mlp.2.weight"].T + W[pre + "mlp.2.bias"])
        fm = cond @ W["backbone.output_layer.adaLN_modulation.weight"].T + W["backbone.output_layer.adaLN_modulation.bias"]
        shf, scf = fm.split(D, -1)
        h = ln_mod(x, W["backbone.output_layer.norm_final.weight"], shf, scf, c.eps)
        logits = h @ W["backbone.output_layer.linear.weight"].T + W["backbone.output_layer.linear.bias"]
        if c.use_bias:
            k = torch.tensor([math.exp((math.log1p(math.exp(-g)) - g) / 2) for g in grow.tolist()],
                             dtype=torch.float32)  # alpha / sigma^2 of each row's level
            logits = logits + k[:, None] * (z[b] @ E.T)
        out.append(logits)
    return torch.stack(out)


def x0_of(logits, E):
    p = torch.softmax(logits.double(), -1).float()
    return p @ E


def set_prompt(tokens, pads, gen0, noise, g, z, xsc, E, mode):
    B, L, D = z.shape
    a, s = alpha(g), sigma(g)
    for b in range(B):
        for i in range(gen0):
            if i < pads[b]:
                z[b, i] = 0
                xsc[b, i] = 0
                continue
            e = E[tokens[b][i]]
            z[b, i] = e if mode == "clean" else a * e + s * noise[b, i]
            xsc[b, i] = e


def sample(c, W, E, tokens, pads, gen0, noise, N, solver, mode):
    B, L, D = noise.shape
    gs = schedule(c, N)
    z = noise.clone()
    xsc = torch.zeros_like(z)
    fw = lambda zz, g: forward(c, W, E, zz, xsc, [g] * B, pads, gen0)
    forwards = 0
    for i in range(N - 1):
        t, s = gs[i], gs[i + 1]
        at, st, as_, ss = alpha(t), sigma(t), alpha(s), sigma(s)
        set_prompt(tokens, pads, gen0, noise, t, z, xsc, E, mode)
        x0 = x0_of(fw(z, t), E)
        forwards += 1
        if solver == "euler":
            z = as_ * x0 + ss / st * (z - at * x0)
            xsc = x0.clone()
            continue
        rt, rs = st / at, ss / as_
        y = z / at
        e1 = (y - x0) / rt
        y2 = as_ * (y + (rs - rt) * e1)
        xsc = x0.clone()
        set_prompt(tokens, pads, gen0, noise, s, y2, xsc, E, mode)
        x0b = x0_of(fw(y2, s), E)
        forwards += 1
        e2 = (y2 / as_ - x0b) / rs
        z = as_ * (y + (rs - rt) * (e1 + e2) / 2)
        xsc = x0b.clone()
    set_prompt(tokens, pads, gen0, noise, gs[N - 1], z, xsc, E, mode)
    logits = fw(z, gs[N - 1])
    forwards += 1
    return logits, logits[:, gen0:].argmax(-1), forwards


def golden(outdir):
    import os
    os.makedirs(outdir, exist_ok=True)
    cfgd = {"model_type": "LangFlow", "vocab_size": 48, "hidden_size": 32, "cond_dim": 16, "n_blocks": 2,
            "n_heads": 4, "model_length": 32, "mlp_ratio": 4, "freq_embed_dim": 32, "use_normalized_embedding": True,
            "embedding_norm_method": "layernorm", "self_conditioning": True, "use_bias": True,
            "gumbel_loc": 4.0, "gumbel_scale": 1.5, "gumbel_cutoff": 1e-3, "eos_token_id": 47}
    c = Cfg(cfgd)
    g = torch.Generator().manual_seed(20261201)
    r = lambda *shape, k=1.0: (torch.rand(*shape, generator=g) * 2 - 1) * k
    D, C, V, Fm = c.D, c.C, c.vocab, c.F
    W = {"backbone.vocab_embed.embedding": r(V, D),
         "backbone.sigma_map.mlp.0.weight": r(C, c.freq, k=0.3), "backbone.sigma_map.mlp.0.bias": r(C, k=0.1),
         "backbone.sigma_map.mlp.2.weight": r(C, C, k=0.3), "backbone.sigma_map.mlp.2.bias": r(C, k=0.1),
         "backbone.self_cond_proj.weight": r(D, 2 * D, k=0.1),
         "backbone.output_layer.norm_final.weight": 1 + r(D, k=0.1),
         "backbone.output_layer.adaLN_modulation.weight": r(2 * D, C, k=0.2),
         "backbone.output_layer.adaLN_modulation.bias": r(2 * D, k=0.1),
         "backbone.output_layer.linear.weight": r(V, D, k=0.3), "backbone.output_layer.linear.bias": r(V, k=0.1),
         "backbone.rotary_emb.inv_freq": torch.tensor([1.0 / 10000 ** (2 * i / c.hd) for i in range(c.hd // 2)]),
         "proposal.loc": torch.tensor(cfgd["gumbel_loc"]), "proposal.scale": torch.tensor(cfgd["gumbel_scale"])}
    for i in range(c.blocks):
        pre = "backbone.blocks.%d." % i
        W.update({pre + "norm1.weight": 1 + r(D, k=0.1), pre + "norm2.weight": 1 + r(D, k=0.1),
                  pre + "attn_qkv.weight": r(3 * D, D, k=0.3), pre + "attn_out.weight": r(D, D, k=0.3),
                  pre + "mlp.0.weight": r(Fm, D, k=0.3), pre + "mlp.0.bias": r(Fm, k=0.1),
                  pre + "mlp.2.weight": r(D, Fm, k=0.15), pre + "mlp.2.bias": r(D, k=0.1),
                  pre + "adaLN_modulation.weight": r(6 * D, C, k=0.3), pre + "adaLN_modulation.bias": r(6 * D, k=0.2)})
    save_file({k: v.contiguous() for k, v in W.items()}, outdir + "/model.safetensors")
    json.dump(cfgd, open(outdir + "/config.json", "w"), indent=1)
    E = W["backbone.vocab_embed.embedding"]
    E = E / E.norm(dim=-1, keepdim=True) * math.sqrt(D)
    B, L, gen0 = 2, 14, 6
    pads = [0, 2]
    tokens = [[int(t) for t in torch.randint(0, V - 1, (L,), generator=g)] for _ in range(B)]
    for b in range(B):
        for i in range(pads[b]):
            tokens[b][i] = 0
        for i in range(gen0, L):
            tokens[b][i] = 0
    noise = torch.randn(B, L, D, generator=g)
    # one forward at a given state
    zf = torch.randn(B, L, D, generator=g)
    xf = torch.randn(B, L, D, generator=g) * 0.5
    gam = [1.3, -0.7]
    lf = forward(c, W, E, zf, xf, gam, pads)
    x0f = x0_of(lf, E)
    flat = lambda t: [float(v) for v in t.reshape(-1)]
    gold = {"B": B, "L": L, "gen0": gen0, "pads": pads, "tokens": tokens, "noise": flat(noise),
            "schedules": {str(n): schedule(c, n) for n in (1, 2, 4, 7)},
            "forward": {"z": flat(zf), "x_sc": flat(xf), "gamma": gam, "logits": flat(lf), "x0": flat(x0f)},
            "samples": []}
    def case(N, solver, mode):
        """one sampler run from the starting noise, as the C test reads it"""
        logits, toks, fwd = sample(c, W, E, tokens, pads, gen0, noise, N, solver, mode)
        top2 = logits[:, gen0:].topk(2, -1).values
        return {"steps": N, "solver": solver, "prompt": mode, "forwards": fwd,
                "tokens": [[int(t) for t in row] for row in toks],
                "margin": flat(top2[..., 0] - top2[..., 1]), "logits": flat(logits)}

    gold["samples"] = [case(N, solver, mode) for N in (1, 2, 4, 8) for solver in ("euler", "heun")
                       for mode in ("clean", "noised")]
    # the same model read as "prompt_gamma": "min" (tests set the flag in
    # memory): prompt rows at the schedule's lowest level
    c.prompt_min = True
    gold["prompt_min"] = {"forward_logits": flat(forward(c, W, E, zf, xf, gam, pads, gen0)),
                          "samples": [case(N, solver, "clean") for N in (1, 4) for solver in ("euler", "heun")]}
    # ... and with "prompt_attention": "prompt" too (a model trained with
    # train_flow.py --prompt-attention prompt): the prompt's rows attend to
    # the prompt only
    c.prompt_only = True
    gold["prompt_attention"] = {"forward_logits": flat(forward(c, W, E, zf, xf, gam, pads, gen0)),
                                "samples": [case(N, solver, "clean") for N in (1, 4) for solver in ("euler", "heun")]}
    c.prompt_only = False
    c.prompt_min = False
    json.dump(gold, open(outdir + "/golden.json", "w"))
    print("wrote", outdir, "with", len(gold["samples"]), "sampler cases")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "golden":
        golden(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
