#!/usr/bin/env python3
"""make_block_golden.py — golden data for tokbench's block-diffusion samplers
(plugins/diffusion/block_sampler.c) and the engine's Qwen3 block (QK-norm),
block-causal mask and exact KV cache.

Run where python3 has torch and transformers (the GPU machine); no network,
CPU only, float32, one thread, fixed seeds:

    CUDA_VISIBLE_DEVICES="" python3 tools/make_block_golden.py --out /tmp/g

It writes, under --out (unpacked into tests/data/golden/block-diffusion/):

  sdar-tiny/     config.json as SDAR publishes it (architectures
                 SDARForCausalLM, model_type sdar, Qwen3 keys, block_size,
                 mask_token_id), model.safetensors (transformers' Qwen3
                 names, self_attn.q_norm / k_norm included)
  fast-dllm-v2-tiny/  config.json as Fast_dLLM_v2_7B publishes it
                 (Fast_dLLM_QwenForCausalLM, model_type Fast_dLLM_Qwen,
                 bd_size, layer_types; no mask_token_id: its generate()
                 defaults to 151665, so the tiny model names one),
                 model.safetensors (Qwen2 names, q/k/v biases)
  expected.json  per model: "forward" (logits of a block-causal prefill and
                 of a block over the cache, against the whole-sequence
                 forward) and "cases": every sampler run with the canvas
                 after every change, the forwards counted
  VERSIONS.json  library versions, seeds, sources, the rules

Sources transcribed (read with fetch, not from memory):
  SDAR        github.com/JetAstra/SDAR generate.py @ c2041a8
              (block_diffusion_generate, get_num_transfer_tokens; remasking
              low_confidence_static / low_confidence_dynamic); model from
              training/model/SDAR-8B-Chat/modeling_sdar.py (Qwen3 attention:
              q_norm/k_norm on the head views before RoPE; store_kv appends
              the block's post-RoPE keys to the DynamicCache, otherwise the
              block attends to cat(cache, block))
  Fast-dLLM v2  v2/generation_functions.py (Fast_dLLM_QwenForCausalLM.
              batch_sample; a public copy of github.com/NVlabs/Fast-dLLM's v2
              folder) and the Hugging Face modeling.py of
              Efficient-Large-Model/Fast_dLLM_v2_7B (eval_block_diff_mask:
              block_q >= block_kv; use_block_cache: the block's K/V kept and
              a sub-block's written at replace_position; the logits shift
              cat(logits[:, :1], logits[:, :-1]))

tokbench's rules where they differ from upstream (block_sampler.h, also in
VERSIONS.json "rules"), applied here exactly as there:
  * temperature 0: x0 = argmax, confidence = softmax probability of x0 in
    float64 (SDAR's sampler would divide by a zero temperature) over the
    whole vocabulary, the mask token included as upstream's; no case here
    proposes the mask token (checked: tools/make_sampler_traces.py has the
    cases that do);
  * the canvas is prompt + gen_length rounded up to a whole block (SDAR's
    total_length; Fast-dLLM v2's batch_sample decodes gen_length // block
    blocks from the prompt's block, fewer positions when the prompt ends
    inside a block);
  * a step commits only masked positions (the cases are chosen so that
    upstream's top-k never reaches a confidence of -inf);
  * no store forward after the last block; EOS: a request whose finished
    block (or Fast-dLLM's next token) holds an EOS stops, its later
    positions set to that EOS id; Fast-dLLM v2's block cache is reset per
    block (batch_sample does; the older generate() did not).
"""

import argparse
import json
import math
import os
import sys

VOCAB = 256
SEED = 1234


def log(*a):
    print(*a, file=sys.stderr, flush=True)


CHECKS = []


def check(name, ok, **info):
    CHECKS.append(dict(name=name, ok=bool(ok), **info))
    log(("ok   " if ok else "FAIL ") + name, json.dumps(info)[:300])


# ----------------------------------------------------------------- models

def rms_norm(x, w, eps):
    import torch
    x = x.float()
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, positions, theta):
    import torch
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    h = hd // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return x * emb.cos() + rot * emb.sin()


def init_weights(c, seed):
    """Peaky random weights: the logits spread widely, so confidences are
    far apart and the samplers' choices are not decided by rounding."""
    import torch
    g = torch.Generator().manual_seed(seed)
    d, H, KV, hd, I = c["hidden"], c["heads"], c["kv"], c["head_dim"], c["inter"]

    def rnd(*shape, std):
        return torch.randn(*shape, generator=g) * std

    W = {"embed": rnd(VOCAB, d, std=1.0), "lm_head": rnd(VOCAB, d, std=0.6),
         "final_norm": 1 + rnd(d, std=0.1)}
    for i in range(c["layers"]):
        p = "l%d." % i
        W[p + "attn_norm"] = 1 + rnd(d, std=0.1)
        W[p + "mlp_norm"] = 1 + rnd(d, std=0.1)
        W[p + "q"] = rnd(H * hd, d, std=0.2)
        W[p + "k"] = rnd(KV * hd, d, std=0.2)
        W[p + "v"] = rnd(KV * hd, d, std=0.2)
        W[p + "o"] = rnd(d, H * hd, std=0.1)
        W[p + "gate"] = rnd(I, d, std=0.15)
        W[p + "up"] = rnd(I, d, std=0.15)
        W[p + "down"] = rnd(d, I, std=0.1)
        if c["qkv_bias"]:
            W[p + "q_b"] = rnd(H * hd, std=0.1)
            W[p + "k_b"] = rnd(KV * hd, std=0.1)
            W[p + "v_b"] = rnd(KV * hd, std=0.1)
        if c["qk_norm"]:
            W[p + "q_norm"] = 1 + rnd(hd, std=0.1)
            W[p + "k_norm"] = 1 + rnd(hd, std=0.1)
    return W


def layer_qkv(W, c, i, x, positions):
    """q [H, T, hd], k, v [KV, T, hd] of layer i (post-RoPE q and k)."""
    import torch.nn.functional as F
    p = "l%d." % i
    T = x.shape[0]
    H, KV, hd = c["heads"], c["kv"], c["head_dim"]
    h = rms_norm(x, W[p + "attn_norm"], c["eps"])
    q = F.linear(h, W[p + "q"], W.get(p + "q_b")).view(T, H, hd)
    k = F.linear(h, W[p + "k"], W.get(p + "k_b")).view(T, KV, hd)
    v = F.linear(h, W[p + "v"], W.get(p + "v_b")).view(T, KV, hd)
    if c["qk_norm"]:  # Qwen3 / SDAR: on the head views, before RoPE
        q = rms_norm(q, W[p + "q_norm"], c["eps"])
        k = rms_norm(k, W[p + "k_norm"], c["eps"])
    q = rope(q.transpose(0, 1), positions, c["theta"])
    k = rope(k.transpose(0, 1), positions, c["theta"])
    return q, k, v.transpose(0, 1)


def layer_rest(W, c, i, x, q, k, v, allowed):
    """Attention of q over keys k, v (allowed [T, S] bool or None), then the
    MLP; returns the new residual stream."""
    import torch
    import torch.nn.functional as F
    p = "l%d." % i
    H, KV, hd = c["heads"], c["kv"], c["head_dim"]
    T = x.shape[0]
    k = k.repeat_interleave(H // KV, dim=0)
    v = v.repeat_interleave(H // KV, dim=0)
    att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
    if allowed is not None:
        att = att.masked_fill(~allowed[None], float("-inf"))
    att = torch.softmax(att.float(), dim=-1)
    o = torch.matmul(att, v).transpose(0, 1).reshape(T, H * hd)
    x = x + F.linear(o, W[p + "o"])
    h = rms_norm(x, W[p + "mlp_norm"], c["eps"])
    return x + F.linear(F.silu(F.linear(h, W[p + "gate"])) * F.linear(h, W[p + "up"]), W[p + "down"])


def head(W, c, x):
    import torch.nn.functional as F
    return F.linear(rms_norm(x, W["final_norm"], c["eps"]), W["lm_head"])


def full_forward(W, c, ids, mask):
    """Whole-sequence forward of ids [T] from position 0; mask 'causal',
    'block' (block-causal with c['block']) or None."""
    import torch
    T = len(ids)
    pos = torch.arange(T)
    x = W["embed"][torch.tensor(ids)]
    qi, ki = pos[:, None], pos[None, :]
    allowed = None
    if mask == "causal":
        allowed = ki <= qi
    elif mask == "block":
        allowed = (ki // c["block"]) <= (qi // c["block"])
    for i in range(c["layers"]):
        q, k, v = layer_qkv(W, c, i, x, pos)
        x = layer_rest(W, c, i, x, q, k, v, allowed)
    return head(W, c, x)


class SdarModel:
    """SDAR's forward with its DynamicCache: store_kv appends the span's
    post-RoPE keys and values; otherwise the span attends to cat(cache,
    span) and the cache is left alone."""

    def __init__(self, W, c):
        self.W, self.c = W, c
        self.forwards = 0

    def __call__(self, ids, positions, allowed, past, store):
        import torch
        self.forwards += 1
        W, c = self.W, self.c
        x = W["embed"][ids]
        for i in range(c["layers"]):
            q, k, v = layer_qkv(W, c, i, x, positions)
            if past[i] is not None:
                k = torch.cat((past[i][0], k), dim=1)
                v = torch.cat((past[i][1], v), dim=1)
            if store:
                past[i] = (k, v)
            x = layer_rest(W, c, i, x, q, k, v, allowed)
        return head(W, c, x)


class FastModel:
    """Fast-dLLM v2's forward (eval): past_key_values (a DynamicCache, updated
    when update_past_key_values) and the block cache of use_block_cache
    (built by a whole-block forward, a sub-block's K/V written at
    replace_position); positions count from the cache's length (+ the
    replace position); mask eval_block_diff_mask unless the block cache
    is in use (then none)."""

    def __init__(self, W, c):
        self.W, self.c = W, c
        self.forwards = 0

    def __call__(self, ids, past, update_past, use_block_cache=False, block_cache=None, replace_position=None):
        import torch
        self.forwards += 1
        W, c = self.W, self.c
        n = len(ids)
        past_len = past[0][0].shape[1] if past[0] is not None else 0
        start = past_len + (replace_position or 0) if use_block_cache else past_len
        positions = torch.arange(start, start + n)
        allowed = None
        if not (use_block_cache and block_cache is not None and block_cache[0] is not None):
            qi = (torch.arange(n) + past_len)[:, None]
            ki = torch.arange(past_len + n)[None, :]
            allowed = (qi // c["block"]) >= (ki // c["block"])
        x = W["embed"][torch.as_tensor(ids)]
        for i in range(c["layers"]):
            q, k, v = layer_qkv(W, c, i, x, positions)
            if use_block_cache:
                if block_cache[i] is None:
                    block_cache[i] = (k.clone(), v.clone())
                else:
                    bk, bv = block_cache[i]
                    bk[:, replace_position:replace_position + n] = k
                    bv[:, replace_position:replace_position + n] = v
                    k, v = bk, bv
            if past[i] is not None:
                if update_past:
                    past[i] = (torch.cat((past[i][0], k), dim=1), torch.cat((past[i][1], v), dim=1))
                    k, v = past[i]
                else:
                    k = torch.cat((past[i][0], k), dim=1)
                    v = torch.cat((past[i][1], v), dim=1)
            elif update_past:
                past[i] = (k, v)
            x = layer_rest(W, c, i, x, q, k, v, allowed)
        return head(W, c, x)


# ------------------------------------------------------------- samplers

MASK_OF_PICK = [None]


def pick(logits):
    """temperature 0: argmax and its float64 softmax probability over the
    whole vocabulary, the mask token included (upstream's)."""
    import torch
    p = torch.softmax(logits.double(), dim=-1)
    x0 = logits.argmax(dim=-1)
    assert not bool((x0 == MASK_OF_PICK[0]).any()), "a case proposes the mask token"
    return x0, p.gather(-1, x0[..., None])[..., 0]


def transfer_schedule(block_length, steps):
    base, rem = block_length // steps, block_length % steps
    return [base + (1 if i < rem else 0) for i in range(steps)]


class Rec:
    def __init__(self):
        self.canvases = []
        self.gaps = []

    def snap(self, x):
        self.canvases.append([int(t) for t in x])


def eos_stop(x, s0, s1, P, G, eos):
    """tokbench rule: an EOS in the finished block's output positions stops
    the request; its positions after the block become that EOS list's first."""
    for i in range(max(s0, P), min(s1, G)):
        if int(x[i]) in eos:
            x[s1:] = eos[0]
            return True
    return False


def sdar_generate(model, prompt, mask_id, gen_length, block_length, steps, strategy, threshold, eos, rec):
    """SDAR block_diffusion_generate, batch 1, temperature 0."""
    import torch
    c = model.c
    P = len(prompt)
    num_blocks = (P + gen_length + block_length - 1) // block_length
    L = num_blocks * block_length
    G = P + gen_length
    block_mask = torch.tril(torch.ones(num_blocks, num_blocks, dtype=torch.bool))
    bd_mask = block_mask.repeat_interleave(block_length, 0).repeat_interleave(block_length, 1)
    positions = torch.arange(L)
    x = torch.full((L,), mask_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt)
    past = [None] * c["layers"]
    prefill_blocks = P // block_length
    prefill_length = prefill_blocks * block_length
    if prefill_length > 0:
        model(x[:prefill_length], positions[:prefill_length], bd_mask[:prefill_length, :prefill_length], past, True)
    sched = transfer_schedule(block_length, steps)
    for nb in range(prefill_blocks, num_blocks):
        s0, s1 = nb * block_length, (nb + 1) * block_length
        cur = x[s0:s1].clone()
        att = bd_mask[s0:s1, :s1]
        stopped = False
        for step in range(steps + 1):
            mask_index = cur == mask_id
            if mask_index.sum() == 0:
                x[s0:s1] = cur
                stopped = eos_stop(x, s0, s1, P, G, eos)
                if s1 < L and not stopped:  # tokbench: no store after the last block
                    model(cur, positions[s0:s1], att, past, True)
                break
            logits = model(cur, positions[s0:s1], att, past, False)
            x0, x0_p = pick(logits)
            conf = torch.where(mask_index, x0_p, torch.tensor(-math.inf, dtype=torch.float64))
            k = sched[step]
            assert k <= int(mask_index.sum()), "a step's count exceeds the masks left"
            transfer = torch.zeros_like(mask_index)
            if strategy == "low_confidence_dynamic" and int((conf > threshold).sum()) >= k:
                transfer = conf > threshold
            else:
                order = sorted(range(len(conf)), key=lambda i: (-float(conf[i]), i))
                vals = [float(conf[i]) for i in order]
                if k < len(vals) and vals[k] > -math.inf:
                    rec.gaps.append(vals[k - 1] - vals[k])
                for i in order[:k]:
                    transfer[i] = True
            if strategy == "low_confidence_dynamic":
                near = [abs(float(v) - threshold) for v in conf if v > -math.inf]
                rec.gaps.extend(near)
            cur[transfer] = x0[transfer]
            x[s0:s1] = cur
            rec.snap(x)
        if stopped:
            break
    return x


def fast_generate(model, prompt, mask_id, gen_length, block_size, small_block_size, threshold, use_block_cache,
                  eos, rec):
    """Fast-dLLM v2 batch_sample, batch 1, temperature 0, on a fixed canvas
    (positions not yet reached hold mask_id)."""
    import torch
    c = model.c
    P = len(prompt)
    G = P + gen_length
    L = (G + block_size - 1) // block_size * block_size
    x = torch.full((L,), mask_id, dtype=torch.long)
    x[:P] = torch.tensor(prompt)
    past = [None] * c["layers"]
    if P >= block_size:  # upstream: min_len > block_size (P == block_size skips the prompt: not a case here)
        logits = model(x[:P // block_size * block_size], past, True)
        if P % block_size == 0:
            x[P] = int(pick(logits[-1:])[0][0])  # argmax (no case here proposes the mask token)
            stopped = eos_stop(x, P, P + 1, P, G, eos)
            rec.snap(x)
            if stopped:
                return x
    num_small = block_size // small_block_size
    for b0 in range(P // block_size * block_size, G, block_size):
        b1 = b0 + block_size
        block_cache = None
        while True:
            blk = x[b0:b1]
            if int((blk == mask_id).sum()) == 0:
                if eos_stop(x, b0, b1, P, G, eos):
                    return x
                if b1 >= L:  # tokbench: no store after the last block
                    return x
                logits = model(x[b0:b1], past, True)
                x[b1] = int(pick(logits[-1:])[0][0])
                stopped = eos_stop(x, b1, b1 + 1, P, G, eos)
                rec.snap(x)
                if stopped:
                    return x
                break
            for sb in range(num_small):
                s0, s1 = sb * small_block_size, (sb + 1) * small_block_size
                while True:
                    mask_idx = x[b0:b1] == mask_id
                    if int(mask_idx[s0:s1].sum()) == 0:
                        break
                    if use_block_cache:
                        if block_cache is None or int(x[b0 + s0]) == mask_id:
                            block_cache = [None] * c["layers"]
                            logits = model(x[b0:b1], past, False, True, block_cache)
                            logits = torch.cat([logits[:1], logits[:-1]], dim=0)[s0:s1]
                        else:
                            logits = model(x[b0 + s0:b0 + s1], past, False, True, block_cache, s0)
                            logits = torch.cat([logits[:1], logits[:-1]], dim=0)
                    else:
                        logits = model(x[b0:b1], past, False)
                        logits = torch.cat([logits[:1], logits[:-1]], dim=0)[s0:s1]
                    x1, p1 = pick(logits)
                    x1_p = torch.where(mask_idx[s0:s1], p1, torch.tensor(-math.inf, dtype=torch.float64))
                    unmask = x1_p > threshold
                    unmask[int(x1_p.argmax())] = True
                    unmask = unmask & mask_idx[s0:s1]
                    rec.gaps.extend(abs(float(v) - threshold) for v in x1_p if v > -math.inf)
                    seg = x[b0 + s0:b0 + s1]
                    seg[unmask] = x1[unmask]
                    x[b0 + s0:b0 + s1] = seg
                    rec.snap(x)
    return x


# ------------------------------------------------------------ the folders

def state_dict(W, c):
    sd = {"model.embed_tokens.weight": W["embed"], "model.norm.weight": W["final_norm"],
          "lm_head.weight": W["lm_head"]}
    names = {"attn_norm": "input_layernorm.weight", "mlp_norm": "post_attention_layernorm.weight",
             "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
             "o": "self_attn.o_proj.weight", "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
             "down": "mlp.down_proj.weight", "q_b": "self_attn.q_proj.bias", "k_b": "self_attn.k_proj.bias",
             "v_b": "self_attn.v_proj.bias", "q_norm": "self_attn.q_norm.weight",
             "k_norm": "self_attn.k_norm.weight"}
    for key, t in W.items():
        if key[0] == "l" and key[1].isdigit():
            i, n = key[1:].split(".", 1)
            sd["model.layers.%s.%s" % (i, names[n])] = t
    return {k: v.contiguous() for k, v in sd.items()}


def config_json(c, arch):
    common = {"hidden_act": "silu", "hidden_size": c["hidden"], "intermediate_size": c["inter"],
              "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
              "num_key_value_heads": c["kv"], "rms_norm_eps": c["eps"], "rope_theta": c["theta"],
              "rope_scaling": None, "max_position_embeddings": 512, "tie_word_embeddings": False,
              "torch_dtype": "float32", "vocab_size": VOCAB, "use_sliding_window": False,
              "sliding_window": None, "bos_token_id": c["bos"], "eos_token_id": c["eos"]}
    if arch == "sdar":
        return dict(common, architectures=["SDARForCausalLM"], model_type="sdar", head_dim=c["head_dim"],
                    attention_bias=False, block_size=c["block"], mask_token_id=c["mask"],
                    auto_map={"AutoConfig": "configuration_sdar.SDARConfig",
                              "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"})
    return dict(common, architectures=["Fast_dLLM_QwenForCausalLM"], model_type="Fast_dLLM_Qwen",
                bd_size=c["block"], layer_types=["full_attention"] * c["layers"], max_window_layers=c["layers"],
                mask_token_id=c["mask"],
                auto_map={"AutoConfig": "configuration.Fast_dLLM_QwenConfig",
                          "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"})


def hf_check(W, c, arch):
    """With a causal mask our forward must equal transformers' Qwen3 (SDAR's
    block) or Qwen2 (Fast-dLLM v2's) for the same weights."""
    import torch
    import transformers
    kw = dict(vocab_size=VOCAB, hidden_size=c["hidden"], intermediate_size=c["inter"],
              num_hidden_layers=c["layers"], num_attention_heads=c["heads"], num_key_value_heads=c["kv"],
              rms_norm_eps=c["eps"], max_position_embeddings=512, tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": c["theta"]})
    if arch == "sdar":
        cfg_cls, cls = transformers.Qwen3Config, transformers.Qwen3ForCausalLM
        kw.update(head_dim=c["head_dim"], attention_bias=False)
    else:
        cfg_cls, cls = transformers.Qwen2Config, transformers.Qwen2ForCausalLM
    try:
        cfg = cfg_cls(**kw)
    except TypeError:  # transformers < 5: rope_theta
        kw.pop("rope_parameters")
        cfg = cfg_cls(**kw, rope_theta=c["theta"])
    try:
        cfg._attn_implementation = "eager"
    except Exception:  # noqa: BLE001
        pass
    m = cls(cfg).float().eval()
    res = m.load_state_dict(state_dict(W, c), strict=False)
    missing = [k for k in res.missing_keys if "rotary" not in k]
    ids = list(range(3, 3 + 2 * c["block"] + 3))
    with torch.no_grad():
        ref = m(input_ids=torch.tensor([ids])).logits[0].float()
        ours = full_forward(W, c, ids, "causal")
    diff = float((ref - ours).abs().max())
    check("%s_vs_transformers_%s" % (arch, cls.__name__), not missing and not res.unexpected_keys and diff < 1e-4,
          max_abs_diff=diff, missing=missing, unexpected=list(res.unexpected_keys),
          transformers=transformers.__version__)


def forward_case(W, c, model_cls):
    """Block-causal prefill of 2 whole blocks, then the third block over the
    cache: equal to the block-masked whole-sequence forward (the exact KV
    cache), and the prefill's logits as they are."""
    import torch
    bs = c["block"]
    ids = [(7 * i + 5) % (VOCAB - 8) for i in range(3 * bs)]
    whole = full_forward(W, c, ids, "block")
    if model_cls is SdarModel:
        m = SdarModel(W, c)
        past = [None] * c["layers"]
        pos = torch.arange(3 * bs)
        allowed = (pos[:, None] // bs) >= (pos[None, :] // bs)
        pre = m(torch.tensor(ids[:2 * bs]), pos[:2 * bs], allowed[:2 * bs, :2 * bs], past, True)
        blk = m(torch.tensor(ids[2 * bs:]), pos[2 * bs:], allowed[2 * bs:], past, False)
    else:
        m = FastModel(W, c)
        past = [None] * c["layers"]
        pre = m(ids[:2 * bs], past, True)
        blk = m(ids[2 * bs:], past, False)
    got = torch.cat([pre, blk], dim=0)
    diff = float((got - whole).abs().max())
    check("%s_cache_equals_block_mask" % c["name"], diff < 1e-4, max_abs_diff=diff)
    causal = full_forward(W, c, ids, "causal")
    check("%s_block_mask_matters" % c["name"], float((causal[0] - whole[0]).abs().max()) > 1e-3)
    return {"input_ids": ids, "block": bs, "logits": [[round(float(v), 6) for v in row] for row in whole]}


def build(out, c, cases):
    import torch
    from safetensors.torch import save_file
    d = os.path.join(out, c["name"])
    os.makedirs(d, exist_ok=True)
    W = init_weights(c, SEED + (1 if c["arch"] == "fast" else 0))
    arch = c["arch"]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(c, arch), f, indent=2)
    save_file(state_dict(W, c), os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    torch.set_num_threads(1)
    MASK_OF_PICK[0] = c["mask"]
    hf_check(W, c, arch)
    fwd = forward_case(W, c, SdarModel if arch == "sdar" else FastModel)
    runs = []
    for case in cases:
        rec = Rec()
        model = SdarModel(W, c) if arch == "sdar" else FastModel(W, c)
        prompt = [(11 * i + 3 + case.get("prompt_seed", 0)) % (VOCAB - 8) for i in range(case["prompt_len"])]
        eos = case.get("eos")
        if eos == "auto":  # a token the model makes in its second block: the EOS case stops there
            probe = Rec()
            pm = SdarModel(W, c) if arch == "sdar" else FastModel(W, c)
            xs = run_case(pm, c, case, prompt, [], probe)
            P, bs = case["prompt_len"], case["block_length"]
            second = (P // bs + 1) * bs
            eos = [int(xs[second + 1])]
        eos = eos or []
        x = run_case(model, c, case, prompt, eos, rec)
        r = dict(case)
        r.update(prompt=prompt, eos=eos, mask_id=c["mask"], canvases=rec.canvases, forwards=model.forwards,
                 final=[int(t) for t in x], min_gap=min(rec.gaps) if rec.gaps else None)
        log("%s %s: %d canvases, %d forwards, min gap %s" % (c["name"], case["name"], len(rec.canvases),
                                                            model.forwards, r["min_gap"]))
        check("%s_%s_gap" % (c["name"], case["name"]), r["min_gap"] is None or r["min_gap"] > 1e-5,
              min_gap=r["min_gap"])
        runs.append(r)
    return {"forward": fwd, "cases": runs}


def run_case(model, c, case, prompt, eos, rec):
    if c["arch"] == "sdar":
        return sdar_generate(model, prompt, c["mask"], case["gen_length"], case["block_length"], case["steps"],
                             case["remasking"], case.get("threshold", 0.0), eos, rec)
    return fast_generate(model, prompt, c["mask"], case["gen_length"], case["block_length"], case["sub_block"],
                         case["threshold"], case["cache"] == "dual", eos, rec)


SDAR = {"name": "sdar-tiny", "arch": "sdar", "hidden": 64, "inter": 128, "layers": 2, "heads": 4, "kv": 2,
        "head_dim": 32, "eps": 1e-6, "theta": 1000000.0, "block": 4, "mask": 250, "bos": 1, "eos": 2,
        "qk_norm": True, "qkv_bias": False}
FAST = {"name": "fast-dllm-v2-tiny", "arch": "fast", "hidden": 64, "inter": 128, "layers": 2, "heads": 4, "kv": 2,
        "head_dim": 16, "eps": 1e-6, "theta": 1000000.0, "block": 8, "mask": 250, "bos": 1, "eos": 2,
        "qk_norm": False, "qkv_bias": True}

SDAR_CASES = [
    # steps == block_length: one token a step, also in the prompt-tail block
    {"name": "static_s4_p6", "remasking": "low_confidence_static", "prompt_len": 6, "gen_length": 16,
     "block_length": 4, "steps": 4},
    {"name": "static_s2_p8", "remasking": "low_confidence_static", "prompt_len": 8, "gen_length": 16,
     "block_length": 4, "steps": 2},
    {"name": "dynamic_t05_p6", "remasking": "low_confidence_dynamic", "prompt_len": 6, "gen_length": 16,
     "block_length": 4, "steps": 4, "threshold": 0.5},
    {"name": "dynamic_t09_b8_p8", "remasking": "low_confidence_dynamic", "prompt_len": 8, "gen_length": 24,
     "block_length": 8, "steps": 8, "threshold": 0.9},
    {"name": "dynamic_t05_p3", "remasking": "low_confidence_dynamic", "prompt_len": 3, "gen_length": 10,
     "block_length": 4, "steps": 4, "threshold": 0.5},
    {"name": "eos_static_p8", "remasking": "low_confidence_static", "prompt_len": 8, "gen_length": 24,
     "block_length": 4, "steps": 4, "eos": "auto"},
]
FAST_CASES = [
    {"name": "t09_nocache_p12", "prompt_len": 12, "gen_length": 24, "block_length": 8, "sub_block": 4,
     "threshold": 0.9, "cache": "none"},
    {"name": "t09_dual_p12", "prompt_len": 12, "gen_length": 24, "block_length": 8, "sub_block": 4,
     "threshold": 0.9, "cache": "dual"},
    {"name": "t05_dual_p16", "prompt_len": 16, "gen_length": 24, "block_length": 8, "sub_block": 2,
     "threshold": 0.5, "cache": "dual"},
    {"name": "t07_nocache_p5", "prompt_len": 5, "gen_length": 16, "block_length": 8, "sub_block": 8,
     "threshold": 0.7, "cache": "none"},
    {"name": "eos_dual_p16", "prompt_len": 16, "gen_length": 32, "block_length": 8, "sub_block": 4,
     "threshold": 0.9, "cache": "dual", "eos": "auto"},
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import transformers
    os.makedirs(a.out, exist_ok=True)
    expected = {"sdar": build(a.out, SDAR, SDAR_CASES), "fast_dllm_v2": build(a.out, FAST, FAST_CASES)}
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "seed": SEED,
                "python": sys.version.split()[0], "checks": CHECKS,
                "rules": __doc__[__doc__.index("tokbench's rules"):].strip()}
    with open(os.path.join(a.out, "VERSIONS.json"), "w") as f:
        json.dump(versions, f, indent=1)
    bad = [ch["name"] for ch in CHECKS if not ch["ok"]]
    if bad:
        log("FAILED checks: " + ", ".join(bad))
        return 1
    log("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
