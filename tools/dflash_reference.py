#!/usr/bin/env python3
"""dflash_reference.py — tokbench's PyTorch transcription of the DFlash
drafter (z-lab, arXiv 2602.06036, "Block diffusion for flash speculative
decoding"): a few Qwen3-style layers that draft a block of tokens in one
forward, conditioned on hidden states of the target model.

Written from the published modelling code (github.com/z-lab/dflash
dflash/model.py and dflash/model_mlx.py @ 44947fb; the same semantics in
SGLang's python/sglang/srt/models/dflash.py) and the published configs
(Hugging Face z-lab/*-DFlash*, e.g. Qwen3-8B-DFlash-b16; SpecForge's
configs/qwen3-32b-dflash.json). Own code, not a copy.

API (import it: sys.path.insert(0, "tools"); import dflash_reference as dr)
---------------------------------------------------------------------------
  cfg = dr.make_config(target_cfg, n_layers=1, target_layer_ids=[...],
                       block_size=16, mask_token_id=...)
        -> a config.json dict in the published layout (below); the drafter's
           widths copy the target's (hidden, heads, head_dim, vocab).
  d = dr.DFlashDrafter(cfg)              nn.Module; float32 by default
  d.bind(embed_weight, lm_head_weight)   the TARGET's [vocab][hidden]
        embedding and LM head, held as plain (unregistered) tensors: the
        drafter shares them and never trains them; state_dict() holds only
        the drafter's own published tensors. Plain attributes do not follow
        .to(device): bind after moving the module.
  feats = dr.target_features(hidden_states, d.target_layer_ids)
        hidden_states: transformers' output_hidden_states tuple (index 0 is
        the embeddings, index i+1 the output of decoder layer i) -> raw
        features [B, T, n_feat * hidden] (concatenated in target_layer_ids
        order). Layer i's output is the residual stream after layer i,
        before the final norm (upstream never picks the last layer, whose
        hidden_states entry transformers replaces with the normed one).
  logits = d(target_features, block_ids, positions, cache=None,
             attn_mask=None)
        target_features [B, C, n_feat*hidden]: RAW concatenated target
                   hidden states of C context positions (the drafter applies
                   fc and hidden_norm itself); C may be 0
        block_ids  [B, L] long: the block, row 0 the anchor (the last
                   verified token, whose target features are not known yet),
                   rows 1.. the mask token during inference
        positions  [B, C + L] (or [C + L]) long: RoPE positions of the C
                   context rows, then of the L block rows
        cache      a DraftCache or None. With one: the keys/values it holds
                   are prepended to the context's, and the context's (never
                   the block's) are appended to it. Upstream runs with one.
        attn_mask  None: every block row sees every key (cache, context and
                   the whole block: no causal mask anywhere). Training may
                   pass a bool [B, L, K] (or broadcastable) with K = cached
                   + C + L keys, True = may attend.
        -> logits [B, L, vocab] float32 of every block row (the target's LM
           head after the drafter's final norm). Row 0 is the anchor's and
           is not a draft; rows 1..L-1 are; greedy draft = argmax.
  d.draft(cache, new_features, anchor, start) -> (draft [B, L-1], logits)
        one upstream step: new_features [B, C, n_feat*hidden] are the
        verified positions [start - C, start) not yet in the cache, the
        block is anchor + L-1 mask tokens at positions [start, start + L).
  cache.crop(n)  keep the first n positions (rollback).
  dr.build_tiny(out_dir, target_cfg, **make_config args, seed=...)
        writes out_dir/config.json + out_dir/model.safetensors of a random
        drafter in the published names, float32; returns the module.
  dr.build_tiny_target(out_dir, arch="llama"|"qwen3", ...) writes a tiny
        random transformers target (LlamaForCausalLM / Qwen3ForCausalLM)
        and returns it (needs transformers).

Training note (not upstream code, which is unpublished): DFlash trains on
blocks whose anchor is a real token of the sequence, the other rows masked,
the block seeing the target features of every position before the anchor
(the context) and the whole block bidirectionally; the loss is on rows
1..L-1 against the true next tokens. Many blocks of one sequence fit one
forward: block_ids [B, n*L] (the blocks side by side), positions = the C
context positions then each block's own [a_j, a_j + L), and attn_mask
[B, n*L, C + n*L] letting block j's rows see context rows < a_j and its own
L rows only. Target layers: upstream's default spread needs a target of at
least 5 layers (and never picks the last, whose transformers hidden state
is the normed one); for a shallower target (models/small-llama: 4 layers)
pass target_layer_ids explicitly, e.g. [0, 1, 2]. The engine (config.c)
refuses a drafter without target_layer_ids whose target is shallower.

Published layout
----------------
config.json (keys the drafter reads; a Qwen3 config plus DFlash's):
  architectures        ["DFlashDraftModel"]; model_type "qwen3";
                       auto_map {"AutoModel": "dflash.DFlashDraftModel"}
  hidden_size, intermediate_size, num_hidden_layers (drafter layers, e.g.
  1..10), num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps,
  rope_theta (or rope_parameters.rope_theta), rope_scaling (null in every
  published one), max_position_embeddings, vocab_size (the target's),
  attention_bias (false), hidden_act "silu", tie_word_embeddings false,
  layer_types ["full_attention", ...] (one per drafter layer;
  "sliding_attention" with sliding_window exists upstream, not here)
  block_size           16 (the drafted block, anchor included)
  num_target_layers    the target's layer count
  dflash_config        {"mask_token_id": id, "target_layer_ids": [ids]}
                       0-based target decoder layers whose outputs are
                       concatenated; absent: upstream's default spread
                       (default_target_layer_ids below: one id per drafter
                       layer between layer 1 and n_target - 3)
model.safetensors names (no "model." prefix, no embedding, no LM head):
  fc.weight                         [hidden][n_feat * hidden]
  hidden_norm.weight                [hidden]
  layers.{i}.input_layernorm.weight [hidden]
  layers.{i}.self_attn.q_proj.weight [n_heads*head_dim][hidden]
  layers.{i}.self_attn.k_proj.weight [n_kv*head_dim][hidden]
  layers.{i}.self_attn.v_proj.weight [n_kv*head_dim][hidden]
  layers.{i}.self_attn.o_proj.weight [hidden][n_heads*head_dim]
  layers.{i}.self_attn.q_norm.weight [head_dim]
  layers.{i}.self_attn.k_norm.weight [head_dim]
  layers.{i}.post_attention_layernorm.weight [hidden]
  layers.{i}.mlp.gate_proj.weight   [intermediate][hidden]
  layers.{i}.mlp.up_proj.weight     [intermediate][hidden]
  layers.{i}.mlp.down_proj.weight   [hidden][intermediate]
  norm.weight                       [hidden]
  (biases *.bias on q/k/v/o only when attention_bias is true)

The forward
-----------
  ctx = hidden_norm(fc(features))           [C, hidden], once per call; the
        same ctx feeds every layer (it is not updated by the layers and is
        NOT passed through input_layernorm)
  h   = target.embed(block_ids)              the "noise embedding", unscaled
  each layer:
    x   = input_layernorm(h)
    q   = q_norm(q_proj(x)) per head, RoPE at the block positions
    k   = k_norm(k_proj(cat(ctx, x))) per head, RoPE at context then block
          positions; v = v_proj(cat(ctx, x)) (no norm)
          (each layer projects ctx with its own k_proj/v_proj: per layer the
          context positions get their own K/V, cacheable)
    att = softmax(q k^T / sqrt(head_dim)) v over [cache, ctx, block] keys,
          no mask (GQA: query head j reads kv head j // (n_heads / n_kv))
    h   = h + o_proj(att);  h = h + down(silu(gate(y)) * up(y)),
          y = post_attention_layernorm(h)
  logits = target.lm_head(norm(h))
RMSNorm: w * x / sqrt(mean(x^2) + eps), in float32. RoPE: rotate-half
(pairs i, i + head_dim/2), inv_freq = theta^(-2i/head_dim) (llama3
scaling applied when rope_scaling says so, as transformers does).

Upstream's loop (dflash_generate): the cache holds the context K/V of
every verified position; a draft call passes the verified positions not
yet cached (after prefill: the whole prompt; after a verification: the
accepted tokens and the anchor, whose target features the verification
produced) and the block [anchor, mask x (L-1)] at [start, start + L), then
crops the cache to `start` (drops the block's K/V). Positions are absolute
(context at its own positions, the block right after).
"""

import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

ARCH = "DFlashDraftModel"


# ------------------------------------------------------------------ config

def default_target_layer_ids(n_target_layers, n_draft_layers):
    """Upstream's default when dflash_config has no target_layer_ids."""
    if n_draft_layers == 1:
        return [n_target_layers // 2]
    lo, hi = 1, n_target_layers - 3
    return [int(round(lo + i * (hi - lo) / (n_draft_layers - 1))) for i in range(n_draft_layers)]


def _get(cfg, key, default=None):
    return cfg[key] if key in cfg and cfg[key] is not None else default


def rope_theta_of(cfg):
    rp = cfg.get("rope_parameters") or {}
    return float(_get(cfg, "rope_theta", rp.get("rope_theta", 10000.0)))


def rope_scaling_of(cfg):
    rs = cfg.get("rope_scaling")
    if rs is None:
        rp = cfg.get("rope_parameters") or {}
        if rp.get("rope_type", "default") not in ("default", None):
            rs = rp
    if rs is not None and rs.get("rope_type", rs.get("type", "default")) == "default":
        rs = None
    return rs


def make_config(target_cfg, n_layers=1, target_layer_ids=None, block_size=16, mask_token_id=None,
                intermediate_size=None, rms_norm_eps=None):
    """A drafter config.json dict in the published layout for a target
    config dict (Llama or Qwen3 keys). Heads, head_dim, hidden, vocab and
    rope follow the target (upstream's drafters do)."""
    H = target_cfg["hidden_size"]
    nh = target_cfg["num_attention_heads"]
    n_target = target_cfg["num_hidden_layers"]
    if target_layer_ids is None:
        target_layer_ids = default_target_layer_ids(n_target, n_layers)
    if mask_token_id is None:
        raise ValueError("make_config: mask_token_id is required")
    cfg = {
        "architectures": [ARCH],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "block_size": int(block_size),
        "dflash_config": {"mask_token_id": int(mask_token_id),
                          "target_layer_ids": [int(i) for i in target_layer_ids]},
        "dtype": "float32",
        "head_dim": int(target_cfg.get("head_dim") or H // nh),
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": int(intermediate_size or target_cfg["intermediate_size"]),
        "layer_types": ["full_attention"] * n_layers,
        "max_position_embeddings": int(target_cfg.get("max_position_embeddings", 4096)),
        "max_window_layers": n_layers,
        "model_type": "qwen3",
        "num_attention_heads": nh,
        "num_hidden_layers": int(n_layers),
        "num_key_value_heads": int(target_cfg.get("num_key_value_heads") or nh),
        "num_target_layers": n_target,
        "rms_norm_eps": float(rms_norm_eps or target_cfg.get("rms_norm_eps", 1e-6)),
        "rope_scaling": rope_scaling_of(target_cfg),
        "rope_theta": rope_theta_of(target_cfg),
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": int(target_cfg["vocab_size"]),
    }
    return cfg


def rope_inv_freq(cfg):
    """[head_dim/2] inverse frequencies; llama3 scaling as transformers."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    theta = rope_theta_of(cfg)
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float32) / hd))
    rs = rope_scaling_of(cfg)
    if rs is None:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope scaling {kind!r} is not transcribed")
    factor = rs["factor"]
    lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    lo_wl, hi_wl = old / lo, old / hi
    wl = 2 * math.pi / inv
    out = torch.where(wl > lo_wl, inv / factor, inv)
    smooth = (old / wl - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wl < hi_wl) & ~(wl > lo_wl)
    return torch.where(medium, smoothed, out)


# ------------------------------------------------------------------ pieces

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rotate(x, cos, sin):
    """x [B, heads, T, hd]; cos/sin [B, T, hd]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rot = torch.cat((-x2, x1), dim=-1)
    return x * cos.unsqueeze(1) + rot * sin.unsqueeze(1)


class DraftCache:
    """Per drafter layer: keys (post k_norm, post RoPE) and values of the
    context positions, [B, n_kv, T, head_dim]."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers

    def length(self):
        return 0 if self.k[0] is None else self.k[0].shape[2]

    def crop(self, n):
        for i in range(len(self.k)):
            if self.k[i] is not None:
                self.k[i] = self.k[i][:, :, :n]
                self.v[i] = self.v[i][:, :, :n]


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or H // self.nh
        bias = bool(cfg.get("attention_bias", False))
        eps = cfg["rms_norm_eps"]
        self.q_proj = nn.Linear(H, self.nh * self.hd, bias=bias)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=bias)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=bias)
        self.q_norm = RMSNorm(self.hd, eps)
        self.k_norm = RMSNorm(self.hd, eps)

    def forward(self, x, ctx, cos, sin, layer, cache, attn_mask):
        B, L, _ = x.shape
        C = ctx.shape[1]
        kv_in = torch.cat([ctx, x], dim=1)                        # [B, C+L, H]
        q = self.q_norm(self.q_proj(x).view(B, L, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(kv_in).view(B, C + L, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(kv_in).view(B, C + L, self.nkv, self.hd).transpose(1, 2)
        q = rotate(q, cos[:, C:], sin[:, C:])
        k = rotate(k, cos, sin)
        if cache is not None:
            if cache.k[layer] is not None:
                k = torch.cat([cache.k[layer], k], dim=2)
                v = torch.cat([cache.v[layer], v], dim=2)
            n_keep = k.shape[2] - L                                # cache + context
            cache.k[layer] = k[:, :, :n_keep]
            cache.v[layer] = v[:, :, :n_keep]
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = torch.matmul(q, k.transpose(2, 3)) * (self.hd ** -0.5)  # [B, nh, L, K]
        if attn_mask is not None:
            m = attn_mask if attn_mask.dim() == 4 else attn_mask.unsqueeze(1)
            s = s.masked_fill(~m, float("-inf"))
        p = torch.softmax(s.float(), dim=-1).to(q.dtype)
        o = torch.matmul(p, v).transpose(1, 2).reshape(B, L, self.nh * self.hd)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.mlp = MLP(cfg)

    def forward(self, h, ctx, cos, sin, layer, cache, attn_mask):
        h = h + self.self_attn(self.input_layernorm(h), ctx, cos, sin, layer, cache, attn_mask)
        return h + self.mlp(self.post_attention_layernorm(h))


def check_config(cfg):
    """Refuse what this transcription does not compute."""
    if ARCH not in (cfg.get("architectures") or []):
        raise ValueError(f"config: architectures must hold {ARCH}")
    dc = cfg.get("dflash_config") or {}
    if dc.get("mask_token_id") is None:
        raise ValueError("config: dflash_config.mask_token_id missing")
    for t in cfg.get("layer_types") or []:
        if t != "full_attention":
            raise ValueError(f"config: layer type {t!r} (sliding window) is not transcribed")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError("config: hidden_act must be silu")


class DFlashDrafter(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        check_config(cfg)
        self.cfg = cfg
        H = cfg["hidden_size"]
        n = cfg["num_hidden_layers"]
        dc = cfg["dflash_config"]
        self.target_layer_ids = list(dc.get("target_layer_ids") or
                                     default_target_layer_ids(cfg["num_target_layers"], n))
        self.block_size = int(cfg["block_size"])
        self.mask_token_id = int(dc["mask_token_id"])
        self.fc = nn.Linear(len(self.target_layer_ids) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, cfg["rms_norm_eps"])
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(n)])
        self.norm = RMSNorm(H, cfg["rms_norm_eps"])
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)
        self.embed_weight = None
        self.lm_head_weight = None

    def bind(self, embed_weight, lm_head_weight):
        self.embed_weight = embed_weight.detach()
        self.lm_head_weight = lm_head_weight.detach()
        return self

    def new_cache(self):
        return DraftCache(len(self.layers))

    def rope(self, positions):
        ang = positions.to(torch.float32).unsqueeze(-1) * self.inv_freq   # [B, T, hd/2]
        emb = torch.cat([ang, ang], dim=-1)
        return emb.cos(), emb.sin()

    def hidden(self, target_features, block_ids, positions, cache=None, attn_mask=None):
        """The final-normed hidden states of the block rows [B, L, hidden]."""
        if self.embed_weight is None:
            raise RuntimeError("DFlashDrafter: bind(embed, lm_head) first")
        B, L = block_ids.shape
        if positions.dim() == 1:
            positions = positions.unsqueeze(0).expand(B, -1)
        C = target_features.shape[1]
        if positions.shape[1] != C + L:
            raise ValueError(f"positions: {positions.shape[1]} columns, expected C + L = {C + L}")
        ctx = self.hidden_norm(self.fc(target_features))
        h = F.embedding(block_ids, self.embed_weight).to(ctx.dtype)
        cos, sin = self.rope(positions)
        for i, layer in enumerate(self.layers):
            h = layer(h, ctx, cos, sin, i, cache, attn_mask)
        return self.norm(h)

    def forward(self, target_features, block_ids, positions, cache=None, attn_mask=None):
        h = self.hidden(target_features, block_ids, positions, cache, attn_mask)
        return F.linear(h, self.lm_head_weight.to(h.dtype))

    @torch.no_grad()
    def draft(self, cache, new_features, anchor, start, block_size=None):
        """One upstream drafting step; anchor [B] long; returns
        (greedy draft [B, L-1], logits [B, L, vocab])."""
        L = block_size or self.block_size
        B = anchor.shape[0]
        C = new_features.shape[1]
        if cache.length() != start - C:
            raise ValueError(f"draft: cache holds {cache.length()} positions, features start at {start - C}")
        block = torch.full((B, L), self.mask_token_id, dtype=torch.long, device=anchor.device)
        block[:, 0] = anchor
        pos = torch.arange(start - C, start + L, device=anchor.device)
        logits = self.forward(new_features, block, pos, cache=cache)
        cache.crop(start)
        return logits[:, 1:].argmax(-1), logits


# ------------------------------------------------------------------ target side

def target_features(hidden_states, layer_ids):
    """transformers' output_hidden_states -> raw drafter features."""
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


# ------------------------------------------------------------------ tiny builds

def save_drafter(d, out_dir):
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(d.cfg, f, indent=2, sort_keys=True)
    sd = {k: v.detach().to(torch.float32).contiguous() for k, v in d.state_dict().items()}
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})


def load_drafter(path):
    from safetensors.torch import load_file
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    d = DFlashDrafter(cfg)
    sd = load_file(os.path.join(path, "model.safetensors"))
    missing, extra = d.load_state_dict(sd, strict=False)
    if missing or extra:
        raise ValueError(f"{path}: missing tensors {missing}, unexpected {extra}")
    return d


def randomize(module, seed, std=0.05):
    """Deterministic random weights; norms near 1 so that they matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))
    return module


def build_tiny(out_dir, target_cfg, seed=0, std=0.05, **kw):
    d = randomize(DFlashDrafter(make_config(target_cfg, **kw)), seed, std)
    if out_dir:
        save_drafter(d, out_dir)
    return d


def build_tiny_target(out_dir, arch="llama", vocab=256, hidden=64, layers=6, heads=4, kv_heads=2,
                      head_dim=None, intermediate=160, seed=1, std=0.05, rope_theta=10000.0):
    """A tiny random transformers target, float32, saved in its own names."""
    import transformers
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                  head_dim=head_dim or hidden // heads, max_position_embeddings=512, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, bos_token_id=None,
                  eos_token_id=vocab - 2, pad_token_id=vocab - 2)
    # transformers 5 names rope settings rope_parameters; 4.x rope_theta
    if int(transformers.__version__.split(".")[0]) >= 5:
        common["rope_parameters"] = {"rope_type": "default", "rope_theta": float(rope_theta)}
    else:
        common["rope_theta"] = float(rope_theta)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common)
        model = transformers.LlamaForCausalLM(cfg)
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(**common)
        model = transformers.Qwen3ForCausalLM(cfg)
    else:
        raise ValueError(arch)
    model = model.float().eval()
    randomize(model, seed, std)
    if out_dir:
        model.save_pretrained(out_dir)  # safetensors by default (4.x and 5.x)
    return model
