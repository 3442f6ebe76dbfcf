#!/usr/bin/env python3
"""dgemma_reference.py — tokbench's own PyTorch transcription of DiffusionGemma
(google/diffusiongemma-26B-A4B-it; transformers' DiffusionGemmaForBlockDiffusion):
both passes and the entropy-bound sampler, written from the published code
(transformers src/transformers/models/diffusion_gemma/: modeling_, generation_,
configuration_diffusion_gemma.py; modeling_rope_utils.py's proportional RoPE;
cache_utils.py's DynamicSlidingWindowLayer), float32, batch 1. It is what
plugins/engine/cpu/dgemma_forward.c and plugins/diffusion/dgemma_sampler.c
compute, step for step; tools/make_dgemma_golden.py checks it against
transformers itself before writing golden data.

Layout (published names; the text weights live once under model.decoder.):
  embed_tokens [V][H] (also the LM head), norm [H],
  self_conditioning.{pre_norm [H], gate_proj, up_proj [I][H], down_proj [H][I]}
  layers.N.{input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
    post_feedforward_layernorm_1, pre_feedforward_layernorm_2,
    post_feedforward_layernorm_2, post_feedforward_layernorm}.weight [H]
  layers.N.self_attn.{q_proj [nh hd][H], k_proj [kv hd][H], v_proj (sliding
    layers only), o_proj [H][nh hd], q_norm, k_norm [hd]}
  layers.N.mlp.{gate_proj, up_proj, down_proj}; layers.N.router.{proj.weight
    [E][H], scale [H], per_expert_scale [E]}; layers.N.experts.{gate_up_proj
    [E][2 mi][H], down_proj [E][H][mi]}; layers.N.layer_scalar [1]
  model.encoder.language_model.layers.N.layer_scalar [1] (the encoder pass's)

The noise stream (shared with the C sampler and the golden run): value n of a
request's stream is splitmix64's n-th output from state `seed`; ids are value %
vocab, Exp(1) draws are -log(((value >> 11) + 0.5) 2^-53) in float64, then
float32.
"""

import json
import math
import os

import numpy as np
import torch

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class Stream:
    """The counter-based noise stream (dgemma_sampler.h tb_dg_rng)."""

    def __init__(self, seed):
        self.seed = np.uint64(seed)
        self.n = 0

    def values(self, count):
        with np.errstate(over="ignore"):
            k = np.arange(self.n + 1, self.n + 1 + count, dtype=np.uint64)
            z = self.seed + k * GOLDEN
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        self.n += count
        return z

    def ids(self, count, vocab):
        return (self.values(count) % np.uint64(vocab)).astype(np.int64)

    def exp(self, count):
        u = ((self.values(count) >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53
        return (-np.log(u)).astype(np.float32)


def load_folder(folder):
    """config.json (root, text_config) and the tensors as float32."""
    from safetensors.torch import load_file
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    t = load_file(os.path.join(folder, "model.safetensors"))
    return cfg, {k: v.float() for k, v in t.items()}


class DGemma:
    def __init__(self, cfg, t):
        tc = cfg["text_config"]
        self.tc = tc
        self.t = t
        self.V, self.H = tc["vocab_size"], tc["hidden_size"]
        self.L, self.nh = tc["num_hidden_layers"], tc["num_attention_heads"]
        self.eps = tc.get("rms_norm_eps", 1e-6)
        self.W = tc["sliding_window"]
        self.C = cfg["canvas_length"]
        self.K = tc["top_k_experts"]
        self.cap = tc.get("final_logit_softcapping", 30.0)
        types = list(tc["layer_types"])
        types[-1] = "full_attention"  # forced by DiffusionGemmaTextConfig
        self.full = [x == "full_attention" for x in types]
        self.hd = [tc["global_head_dim"] if f else tc["head_dim"] for f in self.full]
        gkv = tc.get("num_global_key_value_heads") or tc["num_key_value_heads"]
        self.kv = [gkv if f else tc["num_key_value_heads"] for f in self.full]
        rp = tc["rope_parameters"]
        hs, hf = tc["head_dim"], tc["global_head_dim"]
        ths = rp["sliding_attention"]["rope_theta"]
        self.inv_s = 1.0 / (ths ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
        f = rp["full_attention"]
        angles = int(f.get("partial_rotary_factor", 1.0) * hf // 2)
        rot = 1.0 / (f["rope_theta"] ** (torch.arange(0, 2 * angles, 2, dtype=torch.int64).float() / hf))
        self.inv_f = torch.cat([rot, torch.zeros(hf // 2 - angles)]) / f.get("factor", 1.0)
        self.scale = torch.tensor(self.H ** 0.5, dtype=torch.float32)
        self.image_id = cfg.get("image_token_id", 258880)
        self.pad = tc.get("pad_token_id", 0)
        self.reset()

    # ------------------------------------------------------------ pieces
    def w(self, name):
        return self.t["model.decoder." + name]

    def rms(self, x, w=None):
        y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        return y * w if w is not None else y

    @staticmethod
    def rope(x, pos, inv):  # x [n][heads][hd], rotate-half
        ang = pos.float()[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], -1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    @staticmethod
    def gelu(x):
        return torch.nn.functional.gelu(x, approximate="tanh")

    def mlp(self, x, gate, up, down):
        return (self.gelu(x @ gate.T) * (x @ up.T)) @ down.T

    def reset(self):
        self.k = [torch.zeros(0, self.kv[l], self.hd[l]) for l in range(self.L)]
        self.v = [torch.zeros(0, self.kv[l], self.hd[l]) for l in range(self.L)]

    @property
    def length(self):
        return self.k[0].shape[0]

    def moe(self, p, r):
        E = self.w(p + "router.proj.weight").shape[0]
        z = self.rms(r) * self.w(p + "router.scale") * (self.H ** -0.5)
        probs = torch.softmax(z @ self.w(p + "router.proj.weight").T, -1, dtype=torch.float32)
        tw, ti = torch.topk(probs, self.K, -1)
        tw = tw / tw.sum(-1, keepdim=True)
        tw = tw * self.w(p + "router.per_expert_scale")[ti]
        x = self.rms(r, self.w(p + "pre_feedforward_layernorm_2.weight"))
        out = torch.zeros_like(r)
        gu, dn = self.w(p + "experts.gate_up_proj"), self.w(p + "experts.down_proj")
        mi = dn.shape[-1]
        for e in range(E):
            rows, slot = torch.where(ti == e)
            if rows.numel() == 0:
                continue
            h = x[rows] @ gu[e].T
            y = (self.gelu(h[:, :mi]) * h[:, mi:]) @ dn[e].T
            out.index_add_(0, rows, y * tw[rows, slot, None])
        return out

    def layer(self, l, x, pos, mode, symmetric=False):
        """One layer. mode "encode": append K/V, causal (sliding: i - j < W);
        "denoise": the cache read-only (sliding: its last W - 1 positions) plus
        the rows' own K/V, bidirectional. symmetric: the per-row window |i - j|
        < W instead (vLLM #49202's bug; only to show the golden data tell them apart)."""
        p = f"layers.{l}."
        hd, kv, n = self.hd[l], self.kv[l], x.shape[0]
        inv = self.inv_f if self.full[l] else self.inv_s
        h = self.rms(x, self.w(p + "input_layernorm.weight"))
        q = (h @ self.w(p + "self_attn.q_proj.weight").T).view(n, self.nh, hd)
        k = (h @ self.w(p + "self_attn.k_proj.weight").T).view(n, kv, hd)
        v = k if self.full[l] else (h @ self.w(p + "self_attn.v_proj.weight").T).view(n, kv, hd)
        q = self.rope(self.rms(q, self.w(p + "self_attn.q_norm.weight")), pos, inv)
        k = self.rope(self.rms(k, self.w(p + "self_attn.k_norm.weight")), pos, inv)
        v = self.rms(v)
        length = self.length
        if mode == "encode":
            self.k[l] = torch.cat([self.k[l], k])
            self.v[l] = torch.cat([self.v[l], v])
            keys, vals = self.k[l], self.v[l]
            kpos = torch.arange(keys.shape[0])
            allowed = kpos[None, :] <= pos[:, None]
            if not self.full[l]:
                allowed &= (pos[:, None] - kpos[None, :]) < self.W
        else:
            lo = 0 if self.full[l] or symmetric else max(0, length - (self.W - 1))
            keys = torch.cat([self.k[l][lo:], k])
            vals = torch.cat([self.v[l][lo:], v])
            kpos = torch.cat([torch.arange(lo, length), pos])
            allowed = torch.ones(n, keys.shape[0], dtype=torch.bool)
            if symmetric and not self.full[l]:
                allowed = (pos[:, None] - kpos[None, :]).abs() < self.W
        g = self.nh // kv
        kk = keys.repeat_interleave(g, 1)  # [m][nh][hd]
        vv = vals.repeat_interleave(g, 1)
        s = torch.einsum("nhd,mhd->hnm", q, kk)  # score scale 1
        s = s.masked_fill(~allowed[None], float("-inf"))
        a = torch.softmax(s, -1, dtype=torch.float32)
        o = torch.einsum("hnm,mhd->nhd", a, vv).reshape(n, self.nh * hd)
        o = self.rms(o @ self.w(p + "self_attn.o_proj.weight").T, self.w(p + "post_attention_layernorm.weight"))
        r = x + o
        h1 = self.mlp(self.rms(r, self.w(p + "pre_feedforward_layernorm.weight")), self.w(p + "mlp.gate_proj.weight"),
                      self.w(p + "mlp.up_proj.weight"), self.w(p + "mlp.down_proj.weight"))
        h1 = self.rms(h1, self.w(p + "post_feedforward_layernorm_1.weight"))
        h2 = self.rms(self.moe(p, r), self.w(p + "post_feedforward_layernorm_2.weight"))
        out = r + self.rms(h1 + h2, self.w(p + "post_feedforward_layernorm.weight"))
        scalar = (self.t[f"model.encoder.language_model.layers.{l}.layer_scalar"] if mode == "encode"
                  else self.w(p + "layer_scalar"))
        return out * scalar

    # ------------------------------------------------------------ passes
    @torch.no_grad()
    def encode(self, tokens):
        """The causal pass over tokens after the cache; returns the final-norm output."""
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        pos = torch.arange(self.length, self.length + tokens.numel())
        # DiffusionGemmaEncoderModel: image placeholders become pad (no pixels here)
        tokens = torch.where(tokens == self.image_id, torch.full_like(tokens, self.pad), tokens)
        x = self.w("embed_tokens.weight")[tokens] * self.scale
        for l in range(self.L):
            x = self.layer(l, x, pos, "encode")
        return self.rms(x, self.w("norm.weight"))

    @torch.no_grad()
    def denoise(self, canvas, sc=None, symmetric=False):
        """The canvas pass; sc: the previous step's temperature-scaled logits or None."""
        canvas = torch.as_tensor(canvas, dtype=torch.long)
        pos = torch.arange(self.length, self.length + canvas.numel())
        emb = self.w("embed_tokens.weight")
        x = emb[canvas] * self.scale
        if sc is not None:
            soft = torch.softmax(torch.as_tensor(sc), -1, dtype=torch.float32) @ emb * self.scale
            x = x + self.mlp(self.rms(soft, self.w("self_conditioning.pre_norm.weight")),
                             self.w("self_conditioning.gate_proj.weight"), self.w("self_conditioning.up_proj.weight"),
                             self.w("self_conditioning.down_proj.weight"))
        x = self.rms(x)  # post_norm, no weight; also on the first step
        for l in range(self.L):
            x = self.layer(l, x, pos, "denoise", symmetric)
        logits = self.rms(x, self.w("norm.weight")) @ emb.T
        if self.cap:
            logits = torch.tanh(logits / self.cap) * self.cap
        return logits


# ---------------------------------------------------------------- sampler

def temperature(s, max_steps=48, t_min=0.4, t_max=0.8):
    """LinearTemperatureScheduleLogitsProcessor with cur_step an int32 tensor: float32."""
    frac = torch.tensor(s, dtype=torch.int32) / max_steps
    return t_min + (t_max - t_min) * frac


def entropy(z):
    """torch.distributions.Categorical(logits=z).entropy(), per row."""
    return torch.distributions.Categorical(logits=z).entropy()


def accept_mask(ent, bound):
    srt, idx = torch.sort(ent, stable=True)
    keep = (torch.cumsum(srt, -1) - srt) <= bound
    return torch.zeros_like(keep).scatter(-1, idx, keep)


def generate(model, prompt, seed, max_new_tokens, max_steps=48, t_min=0.4, t_max=0.8, bound=0.1, stability=1,
             confidence=0.005, eos=(), pad=0):
    """generate() at batch 1 over `model` (DGemma), noise from Stream(seed).
    Returns (output ids, per-step records)."""
    st = Stream(seed)
    model.reset()
    model.encode(prompt)
    C, V = model.C, model.V
    out, trace = [], []
    n_canvases = math.ceil(max_new_tokens / C)
    committed = None
    for k in range(n_canvases):
        if k > 0:
            model.encode(committed)
        canvas = torch.as_tensor(st.ids(C, V))
        hist = [torch.full((C,), -1, dtype=torch.long) for _ in range(stability)]
        sc, argmax = None, canvas
        for s in range(max_steps, 0, -1):
            raw = model.denoise(canvas, sc)
            T = temperature(s, max_steps, t_min, t_max)
            z = raw / T
            probs = torch.softmax(z, -1, dtype=torch.float32)
            q = torch.from_numpy(st.exp(C * V)).view(C, V)
            sampled = torch.argmax(probs / q, -1)
            renoise = torch.as_tensor(st.ids(C, V))
            argmax = torch.argmax(z, -1)
            ent = entropy(z)
            acc = accept_mask(ent, bound)
            nxt = torch.where(acc, sampled, renoise)
            stable = all(bool((h == argmax).all()) for h in hist)
            hist = hist[1:] + [argmax] if stability else hist
            conf = bool(ent.mean() < confidence)
            stop = (stable and conf) or s == 1
            trace.append({"canvas": k, "remaining": s, "input": canvas.tolist(), "sampled": sampled.tolist(),
                          "argmax": argmax.tolist(), "accept": acc.int().tolist(), "next": nxt.tolist(),
                          "stop": int(stop)})
            canvas, sc = nxt, z
            if stable and conf:
                break
        committed = argmax.clone()
        o = committed.clone()
        hit = torch.isin(o, torch.tensor(list(eos), dtype=torch.long)) if eos else torch.zeros(C, dtype=torch.bool)
        if hit.any():
            first = int(torch.nonzero(hit)[0])
            o[first + 1:] = pad
        out += o.tolist()
        if hit.any():
            break
    return out, trace
