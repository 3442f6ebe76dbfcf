#!/usr/bin/env python3
"""make_diffusion_golden.py — golden data that proves tokbench's diffusion-LLM
backend (LLaDA and Dream masked-diffusion samplers) matches the public
reference sampling code.

Run where python3 has torch (and, for the sanity check against transformers'
Llama / Qwen2, transformers and safetensors); no network is needed. No
trust_remote_code model code exists here, so the two model forwards are
written below in plain PyTorch and checked against transformers (causal mask
on: they must equal LlamaForCausalLM / Qwen2ForCausalLM logits for the same
weights). Everything is deterministic: fixed seeds, float32 on the CPU, one
thread, temperature 0:

    CUDA_VISIBLE_DEVICES="" python3 tools/make_diffusion_golden.py --out /tmp/g
    tar -C /tmp/g -czf g.tar.gz .     # unpacked into tests/data/golden-diffusion/

It writes, under --out:

  llada-tiny/   config.json (LLaDA's OLMo-style keys), model.safetensors
                (LLaDA's names: model.transformer.wte.weight, ...blocks.{i}.
                q_proj / k_proj / v_proj / attn_out / ff_proj (gate) / up_proj /
                ff_out (down) / attn_norm / ff_norm, ln_f, ff_out = LM head),
                tokenizer.json (tests/data/golden/tokenizer-llama3.json)
  dream-tiny/   config.json (DreamModel), model.safetensors (Qwen2 names),
                tokenizer.json (the same tokenizer)
  expected.json {"llada": {...}, "dream": {...}}: per model a "forward"
                (bidirectional logits of a 24-token canvas; Dream's after the
                shift) and "cases": every sampler run, with the canvas after
                every step
  VERSIONS.json library versions, seeds, the sources transcribed, the rules

Sources transcribed (read with the search tool's fetch, not from memory):

  LLaDA   github.com/ML-GSAI/LLaDA (GSAI-ML/LLaDA redirects there)
          generate.py @ b7e6c3565f194352da44b38dd12b6970597309f3
          add_gumbel_noise, get_num_transfer_tokens, generate (cfg_scale,
          remasking low_confidence; attention_mask None, logits_eos_inf and
          confidence_eos_eot_inf False)
  Fast-dLLM github.com/NVlabs/Fast-dLLM
          llada/generate.py @ 24cc59e75f20a6384bae8c905965bb090b96388e
          generate, generate_with_prefix_cache, generate_with_dual_cache,
          get_transfer_index (threshold); the cache semantics from
          llada/model/modeling_llada.py at the same commit (LLaDABlock.
          attention: pre-RoPE K/V cached, concatenated (prefix) or scattered
          in place at replace_position (dual), RoPE then applied to all keys
          at positions 0..key_len-1 and to the queries at their true
          positions)
  Dream   generation_utils.py of Dream-org/Dream-v0-Instruct-7B lives on the
          Hugging Face hub, not in github.com/HKUNLP/Dream (@ a1b4472a4654,
          demos only) nor github.com/DreamLM/Dream (@ fac0a7f2664b, same).
          Transcribed from the copy in github.com/NVlabs/Fast-dLLM
          dream/model/generation_utils.py @ 24cc59e75f20a6384bae8c905965bb090b96388e
          (sample_tokens; DreamGenerationMixin._sample, branches origin /
          maskgit_plus / topk_margin / entropy, which that copy keeps as in the
          hub file; its extra confidence_threshold branch is not used), checked
          against a second public copy marked "Copied from
          https://huggingface.co/Dream-org/Dream-v0-Instruct-7B/blob/main/
          generation_utils.py" (identical maskgit_plus / topk_margin / entropy
          code). Model semantics from Fast-dLLM dream/model/modeling_dream.py
          (Qwen2 blocks, is_causal=False, no mask when attention_mask "full").

Rules the C side relies on (all also in VERSIONS.json "rules"):

  * Temperature 0 everywhere: x0 = argmax of the logits, ties in the vocab to
    the lower id (torch.argmax returns the first maximum).
  * LLaDA generate: confidence = softmax(logits) in float32 (the logits'
    dtype); Fast-dLLM get_transfer_index: softmax in float64.
  * topk over the confidence: ties at the cut-off are reported per case
    ("ties"); the C side breaks ties by lower index. cut_gap = the k-th minus
    the (k+1)-th largest confidence (null when k = 0 or nothing is left).
  * Floats are rounded to 7 significant digits, except Dream's schedule
    values (timesteps, num_mask_token, 1 - s/t, the product), which are the
    exact float32 values written as Python floats.
"""

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import struct
import sys
import traceback

SEED = 20261206
LLADA_SEED = SEED + 1
DREAM_SEED = SEED + 2

MASK_ID = 510   # "<|mdm_mask|>" in tokenizer-llama3.json
EOS_ID = 508    # "<|end_of_text|>"
BOS_ID = 507    # "<|begin_of_text|>"
VOCAB = 512

PROMPT = [507, 72, 301, 15, 444, 129, 260, 33]          # 8 tokens, batch 1
FORWARD_IDS = PROMPT + [510, 510, 88, 510, 510, 510, 401, 510,
                        510, 5, 510, 510, 510, 510, 510, 510]   # 24-token canvas

LLADA_CFG = dict(d_model=64, n_heads=4, n_kv_heads=4, n_layers=2, mlp_hidden_size=160,
                 rope_theta=500000.0, rms_norm_eps=1e-5, qkv_bias=False)
DREAM_CFG = dict(d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, mlp_hidden_size=128,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, qkv_bias=True)

LLADA_SCHEDULES = [  # (gen_length, block_length, steps, cfg_scale)
    (32, 32, 8, 0.0), (32, 8, 8, 0.0), (32, 8, 16, 0.0), (32, 16, 32, 0.0),
    (32, 32, 5, 0.0),     # remainder: 32 masks / 5 steps = 7,7,6,6,6
    (32, 16, 6, 0.0),     # 2 blocks of 3 steps: 16 = 6,5,5
    (32, 8, 8, 1.0),      # classifier-free guidance
    (32, 8, 32, 0.0),     # = Fast-dLLM's generate without threshold, up to the softmax dtype
]
# Fast-dLLM: None = the fixed schedule (get_num_transfer_tokens), else the
# confidence threshold. 0.9 is the paper's value; with these small random
# models it commits one token per step. The others are set from what the
# models' confidences are (see the log: "confidences"), so that several
# tokens commit in some steps.
FAST_THRESHOLDS = [None, 0.9, 0.036, 0.032]
FAST_GEN, FAST_BLOCK, FAST_STEPS = 32, 8, 32
DREAM_ALGS = ["maskgit_plus", "topk_margin", "entropy"]
DREAM_STEPS = [8, 32]
DREAM_GEN = 32
DREAM_EPS = 1e-3

SOURCES = {
    "llada_generate": {"repo": "ML-GSAI/LLaDA", "path": "generate.py",
                       "commit": "b7e6c3565f194352da44b38dd12b6970597309f3",
                       "functions": ["add_gumbel_noise", "get_num_transfer_tokens", "generate"]},
    "fastdllm_llada": {"repo": "NVlabs/Fast-dLLM", "path": "llada/generate.py",
                       "commit": "24cc59e75f20a6384bae8c905965bb090b96388e",
                       "functions": ["generate", "generate_with_prefix_cache",
                                     "generate_with_dual_cache", "get_transfer_index"]},
    "fastdllm_llada_model": {"repo": "NVlabs/Fast-dLLM", "path": "llada/model/modeling_llada.py",
                             "commit": "24cc59e75f20a6384bae8c905965bb090b96388e",
                             "functions": ["RotaryEmbedding", "LLaDABlock.attention",
                                           "LLaDALlamaBlock.forward"]},
    "dream_sample": {"repo": "NVlabs/Fast-dLLM", "path": "dream/model/generation_utils.py",
                     "commit": "24cc59e75f20a6384bae8c905965bb090b96388e",
                     "functions": ["sample_tokens", "DreamGenerationMixin._sample"],
                     "note": "a copy ('Modified from Dream repos') of generation_utils.py of the "
                             "hub repo Dream-org/Dream-v0-Instruct-7B; HKUNLP/Dream @ a1b4472a4654 "
                             "and DreamLM/Dream @ fac0a7f2664b hold no generation_utils.py"},
    "dream_model": {"repo": "NVlabs/Fast-dLLM", "path": "dream/model/modeling_dream.py",
                    "commit": "24cc59e75f20a6384bae8c905965bb090b96388e"},
}


def log(*a):
    print("[make_diffusion_golden]", *a, flush=True)


def die(msg):
    print("[make_diffusion_golden] FATAL:", msg, flush=True)
    sys.exit(1)


CHECKS = {}      # name -> {"ok": bool, ...}; any failure makes the exit status 1
WARNINGS = []


def check(name, ok, **info):
    CHECKS[name] = dict(ok=bool(ok), **info)
    log("CHECK %-40s %s %s" % (name, "ok" if ok else "FAILED", json.dumps(info)))


def warn(msg):
    WARNINGS.append(msg)
    log("WARNING:", msg)


def r7(x):
    x = float(x)
    if not math.isfinite(x):
        die("non-finite value %r" % x)
    return float("%.7g" % x)


def r7n(x):
    """r7, but None / -inf pass as None."""
    if x is None:
        return None
    x = float(x)
    return r7(x) if math.isfinite(x) else None


def r7_list(t):
    if hasattr(t, "tolist"):
        t = t.tolist()
    if isinstance(t, list):
        return [r7_list(v) for v in t]
    return r7(t)


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def folder_size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def save_safetensors(tensors, path):
    """safetensors.torch.save_file where installed; else the same format by
    hand (8-byte header length, JSON header, raw little-endian data)."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        log("NOTE: no safetensors module; writing the format by hand")
        header, blobs, off = {}, [], 0
        for k in sorted(tensors):
            b = tensors[k].contiguous().numpy().astype("<f4").tobytes()
            header[k] = {"dtype": "F32", "shape": list(tensors[k].shape),
                         "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        header["__metadata__"] = {"format": "pt"}
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
        return
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata={"format": "pt"})

# ------------------------------------------------------------ the models --
#
# One functional forward for both: LLaMA / Qwen2 block, pre-norm, RMSNorm in
# float32 (x * rsqrt(mean(x^2) + eps) * w), half-split RoPE (rotate_half =
# cat(-x2, x1); inv_freq = 1 / theta^(arange(0, d, 2) / d); angles = pos *
# inv_freq in float32), SwiGLU down(silu(gate(x)) * up(x)), no attention mask
# (bidirectional) unless causal=True (only for the check against transformers).
# K/V caches hold pre-RoPE keys as LLaDA's modeling_llada.py does; RoPE is
# applied to every key at its position on every forward.


def layer_names(i):
    return ["l%d.attn_norm" % i, "l%d.q" % i, "l%d.q_b" % i, "l%d.k" % i, "l%d.k_b" % i,
            "l%d.v" % i, "l%d.v_b" % i, "l%d.o" % i, "l%d.ffn_norm" % i, "l%d.gate" % i,
            "l%d.up" % i, "l%d.down" % i]


def init_weights(c, seed):
    """Seeded: matrices (and the embedding) normal with std 1/sqrt(fan_in),
    norms 1 + 0.1*randn, biases 0.1*randn, drawn in a fixed order."""
    import torch
    g = torch.Generator().manual_seed(seed)
    d, H, KV, F_ = c["d_model"], c["n_heads"], c["n_kv_heads"], c["mlp_hidden_size"]
    hd = d // H
    shapes = [("embed", (VOCAB, d))]
    for i in range(c["n_layers"]):
        shapes += [("l%d.attn_norm" % i, (d,)), ("l%d.q" % i, (H * hd, d)),
                   ("l%d.k" % i, (KV * hd, d)), ("l%d.v" % i, (KV * hd, d))]
        if c["qkv_bias"]:
            shapes += [("l%d.q_b" % i, (H * hd,)), ("l%d.k_b" % i, (KV * hd,)),
                       ("l%d.v_b" % i, (KV * hd,))]
        shapes += [("l%d.o" % i, (d, H * hd)), ("l%d.ffn_norm" % i, (d,)),
                   ("l%d.gate" % i, (F_, d)), ("l%d.up" % i, (F_, d)), ("l%d.down" % i, (d, F_))]
    shapes += [("final_norm", (d,)), ("lm_head", (VOCAB, d))]
    W = {}
    for name, shape in shapes:
        if name.endswith("norm"):
            W[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif name.endswith("_b"):
            W[name] = 0.1 * torch.randn(shape, generator=g)
        else:
            W[name] = torch.randn(shape, generator=g) / math.sqrt(shape[1])
    return W


def rms_norm(x, w, eps):
    import torch
    x = x.float()
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rope_cos_sin(positions, hd, theta):
    import torch
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    import torch
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(W, c, ids, pos0=0, past=None, replace=None, causal=False):
    """ids [B, T] at positions pos0..pos0+T-1. past: per layer (K, V) pre-RoPE
    [B, KV, S, hd]. replace None: prefix cache, keys = cat(past, new) (pos0 must
    equal S). replace (a, b): dual cache, new K/V overwrite past[:, :, a:b]
    (a = pos0, b = pos0 + T). Returns (logits [B, T, V], per-layer pre-RoPE
    (K, V) of all key positions)."""
    import torch
    import torch.nn.functional as F
    B, T = ids.shape
    d, H, KV = c["d_model"], c["n_heads"], c["n_kv_heads"]
    hd = d // H
    eps = c["rms_norm_eps"]
    x = W["embed"][ids]
    kv_all = []
    for i in range(c["n_layers"]):
        h = rms_norm(x, W["l%d.attn_norm" % i], eps)
        q = F.linear(h, W["l%d.q" % i], W.get("l%d.q_b" % i))
        k = F.linear(h, W["l%d.k" % i], W.get("l%d.k_b" % i))
        v = F.linear(h, W["l%d.v" % i], W.get("l%d.v_b" % i))
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, KV, hd).transpose(1, 2)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        if past is not None:
            pk, pv = past[i]
            if replace is None:
                assert pk.shape[2] == pos0
                k = torch.cat((pk, k), dim=2)
                v = torch.cat((pv, v), dim=2)
            else:
                a, b = replace
                assert a == pos0 and b == pos0 + T
                pk, pv = pk.clone(), pv.clone()
                pk[:, :, a:b] = k
                pv[:, :, a:b] = v
                k, v = pk, pv
        kv_all.append((k, v))
        S = k.shape[2]
        qc, qs = rope_cos_sin(torch.arange(pos0, pos0 + T), hd, c["rope_theta"])
        kc, ks = rope_cos_sin(torch.arange(S), hd, c["rope_theta"])
        q = q * qc + rotate_half(q) * qs
        k = k * kc + rotate_half(k) * ks
        if KV != H:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
        if causal:
            qpos = torch.arange(pos0, pos0 + T)[:, None]
            kpos = torch.arange(S)[None, :]
            att = att.masked_fill(kpos > qpos, float("-inf"))
        att = torch.softmax(att.float(), dim=-1)
        o = torch.matmul(att, v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + F.linear(o, W["l%d.o" % i])
        h = rms_norm(x, W["l%d.ffn_norm" % i], eps)
        x = x + F.linear(F.silu(F.linear(h, W["l%d.gate" % i])) * F.linear(h, W["l%d.up" % i]),
                         W["l%d.down" % i])
    x = rms_norm(x, W["final_norm"], eps)
    return F.linear(x, W["lm_head"]), kv_all


def llada_state_dict(W, c):
    sd = {"model.transformer.wte.weight": W["embed"],
          "model.transformer.ln_f.weight": W["final_norm"],
          "model.transformer.ff_out.weight": W["lm_head"]}
    m = {"attn_norm": "attn_norm", "q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "attn_out",
         "ffn_norm": "ff_norm", "gate": "ff_proj", "up": "up_proj", "down": "ff_out"}
    for i in range(c["n_layers"]):
        for a, b in m.items():
            sd["model.transformer.blocks.%d.%s.weight" % (i, b)] = W["l%d.%s" % (i, a)]
    return sd


def hf_state_dict(W, c):
    """Llama / Qwen2 names (Dream's layout is Qwen2's)."""
    sd = {"model.embed_tokens.weight": W["embed"], "model.norm.weight": W["final_norm"],
          "lm_head.weight": W["lm_head"]}
    m = {"attn_norm": "input_layernorm.weight", "q": "self_attn.q_proj.weight",
         "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
         "o": "self_attn.o_proj.weight", "ffn_norm": "post_attention_layernorm.weight",
         "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight",
         "down": "mlp.down_proj.weight", "q_b": "self_attn.q_proj.bias",
         "k_b": "self_attn.k_proj.bias", "v_b": "self_attn.v_proj.bias"}
    for i in range(c["n_layers"]):
        for a, b in m.items():
            if "l%d.%s" % (i, a) in W:
                sd["model.layers.%d.%s" % (i, b)] = W["l%d.%s" % (i, a)]
    return sd


def llada_config_json(c):
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada",
        "d_model": c["d_model"], "n_heads": c["n_heads"], "n_kv_heads": c["n_kv_heads"],
        "n_layers": c["n_layers"], "mlp_hidden_size": c["mlp_hidden_size"],
        "vocab_size": VOCAB, "embedding_size": VOCAB, "rope_theta": c["rope_theta"],
        "rms_norm_eps": c["rms_norm_eps"], "mask_token_id": MASK_ID, "eos_token_id": EOS_ID,
        "pad_token_id": EOS_ID, "bos_token_id": BOS_ID, "max_sequence_length": 128,
        "weight_tying": False, "block_type": "llama", "activation_type": "silu",
        "layer_norm_type": "rms", "rope": True, "alibi": False, "include_bias": False,
        "include_qkv_bias": False, "attention_layer_norm": False, "input_emb_norm": False,
        "scale_logits": False, "rope_full_precision": True, "multi_query_attention": None,
        "torch_dtype": "float32", "use_cache": False,
    }


def dream_config_json(c):
    return {
        "architectures": ["DreamModel"], "model_type": "Dream",
        "hidden_size": c["d_model"], "intermediate_size": c["mlp_hidden_size"],
        "num_hidden_layers": c["n_layers"], "num_attention_heads": c["n_heads"],
        "num_key_value_heads": c["n_kv_heads"], "hidden_act": "silu",
        "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"], "rope_scaling": None,
        "vocab_size": VOCAB, "mask_token_id": MASK_ID, "eos_token_id": EOS_ID,
        "bos_token_id": BOS_ID, "pad_token_id": EOS_ID, "tie_word_embeddings": False,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": c["n_layers"],
        "max_position_embeddings": 128, "attention_dropout": 0.0, "initializer_range": 0.02,
        "torch_dtype": "float32", "use_cache": False,
    }


def hf_check(W, c, arch):
    """Causal mask on, our forward must equal transformers' for the same
    weights (the forward then only differs from the reference models by the
    mask)."""
    import torch
    try:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    except Exception as e:  # noqa: BLE001
        check("%s_vs_transformers" % arch, False, error="transformers unavailable: %s" % e)
        return
    kw = dict(vocab_size=VOCAB, hidden_size=c["d_model"], intermediate_size=c["mlp_hidden_size"],
              num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"],
              num_key_value_heads=c["n_kv_heads"], rms_norm_eps=c["rms_norm_eps"],
              max_position_embeddings=128, tie_word_embeddings=False,
              rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]})
    if arch == "llada":
        cfg_cls, cls = LlamaConfig, LlamaForCausalLM
        kw.update(attention_bias=False, mlp_bias=False)
    else:
        cfg_cls, cls = Qwen2Config, Qwen2ForCausalLM
        kw.update(use_sliding_window=False)
    try:
        cfg = cfg_cls(**kw, attn_implementation="eager")
    except Exception:  # noqa: BLE001
        cfg = cfg_cls(**kw)
    try:
        cfg._attn_implementation = "eager"
    except Exception:  # noqa: BLE001
        pass
    torch.manual_seed(0)
    m = cls(cfg).float().eval()
    res = m.load_state_dict(hf_state_dict(W, c), strict=False)
    missing = [k for k in res.missing_keys if "rotary" not in k]
    if missing or res.unexpected_keys:
        check("%s_vs_transformers" % arch, False, missing=missing,
              unexpected=list(res.unexpected_keys))
        return
    log("%s: transformers %s, %s, attn %s" % (arch, transformers.__version__, cls.__name__,
                                              getattr(m.config, "_attn_implementation", "?")))
    ids = torch.tensor([FORWARD_IDS])
    with torch.no_grad():
        ref = m(input_ids=ids).logits.float()
        ours = forward(W, c, ids, causal=True)[0]
        bidi = forward(W, c, ids)[0]
    diff = float((ref - ours).abs().max())
    check("%s_vs_transformers" % arch, diff < 1e-5, model=cls.__name__, max_abs_diff=diff,
          logit_std=float(ref.std()))
    # the mask must matter (even the last position differs: from layer 2 on
    # it reads the other positions' bidirectional states)
    check("%s_bidirectional_differs" % arch,
          float((bidi[0, 0] - ours[0, 0]).abs().max()) > 1e-3,
          first_pos_diff=float((bidi[0, 0] - ours[0, 0]).abs().max()),
          last_pos_diff=float((bidi[0, -1] - ours[0, -1]).abs().max()))


def cache_self_check(W, c, arch):
    """A prefix / dual cache built from the same canvas must give the full
    forward's logits (bidirectional, so this holds only for a fresh cache)."""
    import torch
    ids = torch.tensor([FORWARD_IDS])
    L = ids.shape[1]
    with torch.no_grad():
        full, kv = forward(W, c, ids)
        a, b = 12, 20
        pre = [(k[:, :, :a], v[:, :, :a]) for k, v in kv]
        lp, _ = forward(W, c, ids[:, a:], pos0=a, past=pre)
        ld, _ = forward(W, c, ids[:, a:b], pos0=a, past=kv, replace=(a, b))
    d1 = float((lp - full[:, a:]).abs().max())
    d2 = float((ld - full[:, a:b]).abs().max())
    check("%s_fresh_cache_equals_full" % arch, d1 < 1e-5 and d2 < 1e-5, prefix=d1, dual=d2,
          L=L)


class Model:
    """model(x) -> logits, like the reference code's model(x).logits; counts
    forwards and the kinds of forward the cache variants make."""

    def __init__(self, W, c, shift=False):
        self.W, self.c, self.shift = W, c, shift
        self.calls = []

    def __call__(self, x, pos0=0, past=None, replace=None):
        import torch
        with torch.no_grad():
            logits, kv = forward(self.W, self.c, x, pos0=pos0, past=past, replace=replace)
        kind = "full" if past is None else ("prefix" if replace is None else "dual")
        self.calls.append({"kind": kind, "start": pos0, "end": pos0 + x.shape[1],
                           "rows": int(x.shape[0])})
        if self.shift:  # Dream: logits = cat([logits[:, :1], logits[:, :-1]], dim=1)
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits, kv

# ----------------------------------------------------------- the recorder --


class Recorder:
    """What each step did: the canvas after it, how many tokens it committed
    (and where), the forward it made, the topk cut-off gap."""

    def __init__(self, model, prompt_len):
        self.model = model
        self.P = prompt_len
        self.steps = []
        self.pending = {}
        self.ties = []

    def note_topk(self, confidence_row, k, threshold=None):
        """confidence_row: 1-D tensor given to torch.topk; k: its k."""
        import torch
        k = int(k)
        vals = torch.sort(confidence_row.double(), descending=True).values
        gap = None
        if 0 < k < vals.numel() and math.isfinite(float(vals[k])):
            gap = float(vals[k - 1] - vals[k])
            if gap == 0.0:
                self.ties.append(len(self.steps))
                warn("topk tie at the cut-off (step %d, k=%d, value %r)"
                     % (len(self.steps), k, float(vals[k])))
        self.pending["topk_k"] = k
        self.pending["cut_gap"] = gap
        # the top-2 gap decides the one token a threshold step always commits
        if vals.numel() > 1 and math.isfinite(float(vals[1])):
            self.pending["top_gap"] = float(vals[0] - vals[1])
        if threshold is not None:
            fin = vals[torch.isfinite(vals)]
            self.pending["threshold_margin"] = (float((fin[1:] - threshold).abs().min())
                                                if fin.numel() > 1 else None)
            self.pending["max_confidence"] = float(fin[0]) if fin.numel() else None

    def note(self, **kw):
        self.pending.update(kw)

    def step(self, x_before, x_after, logits_rows, block, i, row_offset=0):
        """logits_rows: the logits used for x0 ([T, V], T positions starting at
        row_offset in the canvas) to measure the argmax margin of what was
        committed."""
        import torch
        before, after = x_before[0].tolist(), x_after[0].tolist()
        pos = [j for j in range(len(after)) if before[j] != after[j]]
        changed_from_mask = all(before[j] == MASK_ID for j in pos)
        if not changed_from_mask:
            die("a committed position was not a mask")
        margin = None
        if pos and logits_rows is not None:
            top = torch.topk(logits_rows[[j - row_offset for j in pos]].double(), 2, dim=-1).values
            margin = float((top[:, 0] - top[:, 1]).min())
        rec = {"block": block, "step_in_block": i, "forward": self.model.calls[-1],
               "committed": len(pos), "positions": [j - self.P for j in pos],
               "min_argmax_margin": r7n(margin)}
        for k, v in self.pending.items():
            rec[k] = v if isinstance(v, (int, str)) or v is None else r7n(v)
        rec["canvas"] = after
        self.steps.append(rec)
        self.pending = {}

    def summary(self):
        def mins(key):
            v = [s[key] for s in self.steps if s.get(key) is not None]
            return min(v) if v else None
        return {"steps_taken": len(self.steps), "nfe": len(self.model.calls),
                "forward_rows": sum(c["rows"] for c in self.model.calls),
                "committed_per_step": [s["committed"] for s in self.steps],
                "multi_commit_steps": sum(1 for s in self.steps if s["committed"] > 1),
                "ties": bool(self.ties), "tie_steps": self.ties,
                "min_cut_gap": mins("cut_gap"), "min_argmax_margin": mins("min_argmax_margin"),
                "min_threshold_margin": mins("threshold_margin"),
                "min_top_gap": mins("top_gap")}

# ------------------------------------- LLaDA: ML-GSAI/LLaDA generate.py --
# Transcribed from generate.py @ b7e6c3565f194352da44b38dd12b6970597309f3.
# Changes: model(x).logits -> model(x)[0]; recording calls (rec.*); batch 1;
# attention_mask None; logits_eos_inf / confidence_eos_eot_inf False (their
# code is left out); -np.inf -> float('-inf').


def add_gumbel_noise(logits, temperature):
    import torch
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    noise = torch.rand_like(logits, dtype=torch.float64)
    gumbel_noise = (- torch.log(noise)) ** temperature
    return logits.exp() / gumbel_noise


def get_num_transfer_tokens(mask_index, steps):
    import torch
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num_transfer_tokens = torch.zeros(mask_num.size(0), steps, device=mask_index.device,
                                      dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num_transfer_tokens[i, :remainder[i]] += 1
    return num_transfer_tokens


def llada_generate(model, prompt, rec, steps=128, gen_length=128, block_length=128,
                   temperature=0., cfg_scale=0., remasking='low_confidence', mask_id=MASK_ID):
    import torch
    import torch.nn.functional as F
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt.clone()
    prompt_index = (x != mask_id)
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    schedules = []
    for num_block in range(num_blocks):
        block_mask_index = (x[:, prompt.shape[1] + num_block * block_length: prompt.shape[1] + (num_block + 1) * block_length:] == mask_id)
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        schedules.append(num_transfer_tokens[0].tolist())
        for i in range(steps):
            x_before = x.clone()
            mask_index = (x == mask_id)
            if cfg_scale > 0.:
                un_x = x.clone()
                un_x[prompt_index] = mask_id
                x_ = torch.cat([x, un_x], dim=0)
                logits = model(x_)[0]
                logits, un_logits = torch.chunk(logits, 2, dim=0)
                logits = un_logits + (cfg_scale + 1) * (logits - un_logits)
            else:
                logits = model(x)[0]
            logits_with_noise = add_gumbel_noise(logits, temperature=temperature)
            x0 = torch.argmax(logits_with_noise, dim=-1)  # b, l
            if remasking == 'low_confidence':
                p = F.softmax(logits, dim=-1)
                x0_p = torch.squeeze(
                    torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)  # b, l
            elif remasking == 'random':
                x0_p = torch.rand((x0.shape[0], x0.shape[1]), device=x0.device)
            else:
                raise NotImplementedError(remasking)
            x0_p[:, prompt.shape[1] + (num_block + 1) * block_length:] = float('-inf')
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.full_like(x0_p, float('-inf')))
            transfer_index = torch.zeros_like(x0, dtype=torch.bool, device=x0.device)
            for j in range(confidence.shape[0]):
                rec.note_topk(confidence[j], num_transfer_tokens[j, i])
                _, select_index = torch.topk(confidence[j], k=int(num_transfer_tokens[j, i]))
                transfer_index[j, select_index] = True
            x[transfer_index] = x0[transfer_index]
            rec.step(x_before, x, logits[0], num_block, i)
    return x, schedules

# -------------------------------- Fast-dLLM: NVlabs/Fast-dLLM llada/generate.py --
# Transcribed from llada/generate.py @ 24cc59e75f20a6384bae8c905965bb090b96388e.
# Changes: model(x, ...).logits -> model(...)[0]; use_cache=True /
# past_key_values -> our forward's (pos0, past, replace) (the semantics of
# modeling_llada.py: the prefix cache is the full forward's pre-RoPE K/V
# sliced [:, :, :current_block_start]; the dual cache is the full forward's
# K/V with the block's positions overwritten by each block forward); the
# duplicated, unused argmax in generate_with_prefix_cache is kept; recording.


def fast_get_transfer_index(logits, temperature, remasking, mask_index, x, num_transfer_tokens,
                            threshold=None, rec=None):
    import torch
    import torch.nn.functional as F
    logits_with_noise = add_gumbel_noise(logits, temperature=temperature)
    x0 = torch.argmax(logits_with_noise, dim=-1)  # b, l
    if remasking == 'low_confidence':
        p = F.softmax(logits.to(torch.float64), dim=-1)
        x0_p = torch.squeeze(
            torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)  # b, l
    elif remasking == 'random':
        x0_p = torch.rand((x0.shape[0], x0.shape[1]), device=x0.device)
    else:
        raise NotImplementedError(remasking)
    x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, x0_p, torch.full_like(x0_p, float('-inf')))
    transfer_index = torch.zeros_like(x0, dtype=torch.bool, device=x0.device)
    if threshold is not None:
        num_transfer_tokens = mask_index.sum(dim=1, keepdim=True)
    for j in range(confidence.shape[0]):
        if rec is not None:
            rec.note_topk(confidence[j], num_transfer_tokens[j], threshold)
        _, select_index = torch.topk(confidence[j], k=int(num_transfer_tokens[j]))
        transfer_index[j, select_index] = True
        if threshold is not None:
            for k in range(1, int(num_transfer_tokens[j])):
                if confidence[j, select_index[k]] < threshold:
                    transfer_index[j, select_index[k]] = False
    return x0, transfer_index


def fast_generate(model, prompt, rec, steps=128, gen_length=128, block_length=128, temperature=0.,
                  remasking='low_confidence', mask_id=MASK_ID, threshold=None):
    import torch
    x = torch.full((1, prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt.clone()
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    nfe = 0
    for num_block in range(num_blocks):
        block_mask_index = (x[:, prompt.shape[1] + num_block * block_length: prompt.shape[1] + (num_block + 1) * block_length] == mask_id)
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        i = 0
        while True:
            x_before = x.clone()
            nfe += 1
            mask_index = (x == mask_id)
            logits = model(x)[0]
            mask_index[:, prompt.shape[1] + (num_block + 1) * block_length:] = 0
            x0, transfer_index = fast_get_transfer_index(logits, temperature, remasking, mask_index, x, num_transfer_tokens[:, i] if threshold is None else None, threshold, rec=rec)
            x[transfer_index] = x0[transfer_index]
            rec.step(x_before, x, logits[0], num_block, i)
            i += 1
            if (x[:, prompt.shape[1] + num_block * block_length: prompt.shape[1] + (num_block + 1) * block_length] == mask_id).sum() == 0:
                break
    return x, nfe


def fast_generate_with_prefix_cache(model, prompt, rec, steps=128, gen_length=128,
                                    block_length=128, temperature=0., remasking='low_confidence',
                                    mask_id=MASK_ID, threshold=None):
    import torch
    x = torch.full((1, prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt.clone()
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    nfe = 0
    for num_block in range(num_blocks):
        current_block_start = prompt.shape[1] + num_block * block_length
        current_block_end = current_block_start + block_length
        block_mask_index = (x[:, current_block_start:current_block_end] == mask_id)
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)

        x_before = x.clone()
        logits, past_key_values = model(x)              # output = model(x, use_cache=True)
        mask_index = (x == mask_id)
        mask_index[:, current_block_end:] = 0
        x0, transfer_index = fast_get_transfer_index(logits, temperature, remasking, mask_index, x, num_transfer_tokens[:, 0] if threshold is None else None, threshold, rec=rec)
        x[transfer_index] = x0[transfer_index]
        rec.step(x_before, x, logits[0], num_block, 0)

        new_past_key_values = []
        for i in range(len(past_key_values)):
            new_past_key_values.append(())
            for j in range(len(past_key_values[i])):
                new_past_key_values[i] += (past_key_values[i][j][:, :, :current_block_start],)
        past_key_values = new_past_key_values
        nfe += 1

        i = 1
        while True:
            # the newer upstream checks for masks before the cached forward:
            # a block the first forward completed gets none (the first
            # release ran one that committed nothing; tokbench skips it)
            if (x[:, current_block_start:current_block_end] == mask_id).sum() == 0:
                break
            x_before = x.clone()
            nfe += 1
            mask_index = (x[:, current_block_start:] == mask_id)
            mask_index[:, block_length:] = 0
            logits = model(x[:, current_block_start:], pos0=current_block_start,
                           past=past_key_values)[0]
            logits_with_noise = add_gumbel_noise(logits, temperature=temperature)
            x0 = torch.argmax(logits_with_noise, dim=-1)  # b, l  (unused, as in the source)
            x0, transfer_index = fast_get_transfer_index(logits, temperature, remasking, mask_index,
                                                         x[:, current_block_start:], num_transfer_tokens[:, i] if threshold is None else None, threshold, rec=rec)
            x[:, current_block_start:][transfer_index] = x0[transfer_index]
            rec.step(x_before, x, logits[0], num_block, i, row_offset=current_block_start)
            if (x[:, current_block_start:current_block_end] == mask_id).sum() == 0:
                break
            i += 1
    return x, nfe


def fast_generate_with_dual_cache(model, prompt, rec, steps=128, gen_length=128,
                                  block_length=128, temperature=0., remasking='low_confidence',
                                  mask_id=MASK_ID, threshold=None):
    import torch
    x = torch.full((1, prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt.clone()
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    nfe = 0
    for num_block in range(num_blocks):
        current_block_start = prompt.shape[1] + num_block * block_length
        current_block_end = current_block_start + block_length
        block_mask_index = (x[:, current_block_start:current_block_end] == mask_id)
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)

        # cache init and update
        x_before = x.clone()
        logits, past_key_values = model(x)              # output = model(x, use_cache=True)
        mask_index = (x == mask_id)
        mask_index[:, current_block_end:] = 0
        x0, transfer_index = fast_get_transfer_index(logits, temperature, remasking, mask_index, x, num_transfer_tokens[:, 0] if threshold is None else None, threshold, rec=rec)
        x[transfer_index] = x0[transfer_index]
        rec.step(x_before, x, logits[0], num_block, 0)
        nfe += 1

        i = 1
        replace_position = torch.zeros_like(x, dtype=torch.bool)
        replace_position[:, current_block_start:current_block_end] = 1
        replace_indices = replace_position.nonzero(as_tuple=True)[1]
        replace = (int(replace_indices.min()), int(replace_indices.max()) + 1)
        while True:
            if (x[:, current_block_start:current_block_end] == mask_id).sum() == 0:
                break  # as in the prefix cache: no cached forward that commits nothing
            x_before = x.clone()
            nfe += 1
            mask_index = (x[:, current_block_start:current_block_end] == mask_id)
            # the source overwrites past_key_values in place; every block
            # forward overwrites the same positions, so a copy is the same
            logits, past_key_values = model(x[:, current_block_start:current_block_end],
                                            pos0=current_block_start, past=past_key_values,
                                            replace=replace)
            x0, transfer_index = fast_get_transfer_index(logits, temperature, remasking, mask_index,
                                                         x[:, current_block_start:current_block_end], num_transfer_tokens[:, i] if threshold is None else None, threshold, rec=rec)
            x[:, current_block_start:current_block_end][transfer_index] = x0[transfer_index]
            rec.step(x_before, x, logits[0], num_block, i, row_offset=current_block_start)
            if (x[:, current_block_start:current_block_end] == mask_id).sum() == 0:
                break
            i += 1
    return x, nfe

# ---------------------------------------- Dream: generation_utils.py _sample --
# Transcribed from NVlabs/Fast-dLLM dream/model/generation_utils.py @ 24cc59e7
# (the hub file's code for these branches). Changes: self(x, attention_mask,
# tok_idx).logits -> model(x)[0] (attention_mask "full", tok_idx None: no
# padding); hooks are identities; top_p / top_k None; alg_temp None; the
# confidence_threshold branch (Fast-dLLM's addition) left out; recording.


def sample_tokens(logits, temperature=0.0, top_p=None, top_k=None, margin_confidence=False,
                  neg_entropy=False):
    import torch
    if temperature > 0:
        logits = logits / temperature
    assert top_p is None and top_k is None
    probs = torch.softmax(logits, dim=-1)
    if temperature > 0:
        raise NotImplementedError("temperature > 0 is random; not in the golden")
    else:
        confidence, x0 = probs.max(dim=-1)
    if margin_confidence:
        sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)
        # Extract top1 and top2 probabilities
        top1_probs = sorted_probs[:, 0]
        top2_probs = sorted_probs[:, 1]
        # Calculate confidence as top1 - top2
        confidence = top1_probs - top2_probs
    if neg_entropy:
        epsilon = 1e-10
        log_probs = torch.log(probs + epsilon)
        confidence = torch.sum(probs * log_probs, dim=-1)
    return confidence, x0


def dream_sample(model, input_ids, rec, max_length, mask_token_id=MASK_ID, steps=512,
                 eps=1e-3, alg='origin', alg_temp=None, temperature=0.0, top_p=None, top_k=None):
    import torch
    import torch.nn.functional as F
    x = F.pad(input_ids, (0, max_length - input_ids.shape[1]), value=mask_token_id)
    timesteps = torch.linspace(1, eps, steps + 1, device=x.device)
    schedule = []
    i = 0
    while i < steps:
        x_before = x.clone()
        mask_index = (x == mask_token_id)
        logits = model(x)[0]     # shifted: cat([logits[:, :1], logits[:, :-1]], dim=1)
        mask_logits = logits[mask_index]
        t = timesteps[i]
        s = timesteps[i + 1]
        if alg == 'origin':
            raise NotImplementedError("origin draws torch.rand even at temperature 0")
        else:
            if alg == 'maskgit_plus':
                confidence, x0 = sample_tokens(mask_logits, temperature=temperature, top_p=top_p, top_k=top_k)
            elif alg == 'topk_margin':
                confidence, x0 = sample_tokens(mask_logits, temperature=temperature, top_p=top_p, top_k=top_k, margin_confidence=True)
            elif alg == 'entropy':
                confidence, x0 = sample_tokens(mask_logits, temperature, top_p=top_p, top_k=top_k, neg_entropy=True)
            else:
                raise RuntimeError(f"Unknown alg: {alg}")
            num_mask_token = mask_index.sum() / mask_index.shape[0]
            number_transfer_tokens = int(num_mask_token * (1 - s / t)) if i < steps - 1 else int(num_mask_token)
            schedule.append({"i": i, "t": float(t), "s": float(s), "t_hex": float(t).hex(),
                             "s_hex": float(s).hex(), "num_mask_token": float(num_mask_token),
                             "num_mask_token_dtype": str(num_mask_token.dtype),
                             "one_minus_s_over_t": float(1 - s / t),
                             "product": float(num_mask_token * (1 - s / t)),
                             "product_dtype": str((num_mask_token * (1 - s / t)).dtype),
                             "number_transfer_tokens": number_transfer_tokens,
                             "last_step_takes_all": i == steps - 1})
            full_confidence = torch.full_like(x, -torch.inf, device=x.device, dtype=logits.dtype)
            full_confidence[mask_index] = confidence
            rec.note(number_transfer_tokens=number_transfer_tokens)
            if number_transfer_tokens > 0:
                if alg_temp is None or alg_temp == 0:
                    rec.note_topk(full_confidence[0], number_transfer_tokens)
                    _, transfer_index = torch.topk(full_confidence, number_transfer_tokens)
                else:
                    full_confidence = full_confidence / alg_temp
                    full_confidence = F.softmax(full_confidence, dim=-1)
                    transfer_index = torch.multinomial(full_confidence, num_samples=number_transfer_tokens)
                x_ = torch.zeros_like(x, device=x.device, dtype=torch.long) + mask_token_id
                x_[mask_index] = x0.clone()
                row_indices = torch.arange(x.size(0), device=x.device).unsqueeze(1).expand_as(transfer_index)
                x[row_indices, transfer_index] = x_[row_indices, transfer_index]
        rec.step(x_before, x, logits[0], 0, i)
        i += 1
    return x, timesteps, schedule


def linspace_scalar_f32(start, end, n):
    """torch's linspace formula done element by element in float32 (the
    CUDA kernel's, and the CPU kernel's scalar path): step = (end - start) /
    (n - 1); i < n/2: start + step*i, else end - step*(n - 1 - i)."""
    import numpy as np
    f = np.float32
    s, e = f(start), f(end)
    step = f(f(e - s) / f(n - 1))
    out = []
    for i in range(n):
        out.append(float(f(s + f(step * f(i)))) if i < n // 2
                   else float(f(e - f(step * f(n - 1 - i)))))
    return out


def dream_schedule_f32(n_mask, timesteps):
    """number_transfer_tokens for a canvas of n_mask masks that would take
    the maximum each step: used to compare schedules only."""
    import numpy as np
    f = np.float32
    return [int(f(f(n) * f(f(1) - f(f(s) / f(t))))) for n, t, s in
            [(n_mask, timesteps[i], timesteps[i + 1]) for i in range(len(timesteps) - 1)]]

def linspace_sweep(max_steps=256, max_masks=256, eps=DREAM_EPS):
    """How often torch.linspace (here, this CPU) differs from the scalar
    float32 formula, and how often that changes int(n * (1 - s/t)) for
    n = 1..max_masks masks, over steps = 1..max_steps."""
    import numpy as np
    import torch
    f = np.float32
    n = np.arange(1, max_masks + 1, dtype=np.float32)
    ts_diff, sched_diff, examples = 0, 0, []
    for steps in range(1, max_steps + 1):
        a = torch.linspace(1, eps, steps + 1).numpy()
        b = np.array(linspace_scalar_f32(1, eps, steps + 1), dtype=np.float32)
        if not np.array_equal(a, b):
            ts_diff += 1
        for i in range(steps - 1):
            ka = np.floor(n * (f(1) - a[i + 1] / a[i])).astype(np.int64)
            kb = np.floor(n * (f(1) - b[i + 1] / b[i])).astype(np.int64)
            bad = np.nonzero(ka != kb)[0]
            sched_diff += len(bad)
            for j in bad[:1]:
                if len(examples) < 10:
                    examples.append({"steps": steps, "i": i, "n": int(n[j]),
                                     "torch": int(ka[j]), "scalar": int(kb[j])})
    return {"max_steps": max_steps, "max_masks": max_masks,
            "step_counts_whose_linspace_differs": ts_diff,
            "schedule_entries_that_differ": sched_diff, "examples": examples}

# ------------------------------------------------------------- the driver --


def run_case(name, fn, W, c, shift, params, **kw):
    import torch
    model = Model(W, c, shift=shift)
    rec = Recorder(model, len(PROMPT))
    prompt = torch.tensor([PROMPT])
    out = fn(model, prompt, rec, **kw)
    x = out[0]
    case = dict(params)
    case["name"] = name
    case["prompt_ids"] = list(PROMPT)
    case.update(rec.summary())
    if fn is llada_generate:
        case["transfer_schedule_per_block"] = out[1]
    elif fn is not dream_sample:
        if out[1] != case["nfe"]:
            die("%s: the source's nfe %d != forwards counted %d" % (name, out[1], case["nfe"]))
    case["final"] = x[0].tolist()
    if MASK_ID in case["final"]:
        die("%s: masks left in the final canvas" % name)
    case["per_step"] = rec.steps
    log("%-40s steps %3d nfe %3d commits %s min_cut_gap %s%s" % (
        name, case["steps_taken"], case["nfe"], case["committed_per_step"], case["min_cut_gap"],
        "  TIE" if case["ties"] else ""))
    return case, out


def llada_cases(W, c):
    cases = {}
    for gen, block, steps, cfg in LLADA_SCHEDULES:
        name = "llada_g%d_b%d_s%d%s" % (gen, block, steps, "_cfg%g" % cfg if cfg else "")
        params = {"sampler": "llada_generate", "source": SOURCES["llada_generate"],
                  "remasking": "low_confidence", "softmax_dtype": "float32",
                  "gen_length": gen, "block_length": block, "steps": steps, "threshold": None,
                  "cache": "none", "cfg_scale": cfg, "temperature": 0.0, "mask_id": MASK_ID}
        cases[name], _ = run_case(name, llada_generate, W, c, False, params, steps=steps,
                                  gen_length=gen, block_length=block, cfg_scale=cfg)
    fns = {"none": fast_generate, "prefix": fast_generate_with_prefix_cache,
           "dual": fast_generate_with_dual_cache}
    samplers = {"none": "fastdllm_generate", "prefix": "fastdllm_generate_with_prefix_cache",
                "dual": "fastdllm_generate_with_dual_cache"}
    for cache, fn in fns.items():
        for th in FAST_THRESHOLDS:
            name = "fast_%s_g%d_b%d_%s" % (cache, FAST_GEN, FAST_BLOCK,
                                           "s%d" % FAST_STEPS if th is None else "th%g" % th)
            params = {"sampler": samplers[cache], "source": SOURCES["fastdllm_llada"],
                      "remasking": "low_confidence", "softmax_dtype": "float64",
                      "gen_length": FAST_GEN, "block_length": FAST_BLOCK, "steps": FAST_STEPS,
                      "threshold": th, "cache": cache, "cfg_scale": 0.0, "temperature": 0.0,
                      "mask_id": MASK_ID}
            cases[name], _ = run_case(name, fn, W, c, False, params, steps=FAST_STEPS,
                                      gen_length=FAST_GEN, block_length=FAST_BLOCK, threshold=th)
    a = cases["llada_g32_b8_s32"]["final"]
    b = cases["fast_none_g32_b8_s32"]["final"]
    if a != b:
        warn("LLaDA generate (float32 softmax) and Fast-dLLM generate (float64) differ")
    log("LLaDA generate == Fast-dLLM generate (no threshold, no cache):", a == b)
    return cases


def dream_cases(W, c):
    import torch
    cases = {}
    for alg in DREAM_ALGS:
        for steps in DREAM_STEPS:
            name = "dream_%s_g%d_s%d" % (alg, DREAM_GEN, steps)
            params = {"sampler": "dream_sample", "source": SOURCES["dream_sample"], "alg": alg,
                      "gen_length": DREAM_GEN, "block_length": None, "steps": steps, "eps": DREAM_EPS,
                      "threshold": None, "cache": "none", "cfg_scale": 0.0, "temperature": 0.0,
                      "alg_temp": None, "top_p": None, "top_k": None, "mask_id": MASK_ID,
                      "max_length": len(PROMPT) + DREAM_GEN}
            case, out = run_case(name, dream_sample, W, c, True, params,
                                 max_length=len(PROMPT) + DREAM_GEN, steps=steps, eps=DREAM_EPS,
                                 alg=alg)
            _, timesteps, schedule = out
            ts = [float(v) for v in timesteps]
            scalar = linspace_scalar_f32(1, DREAM_EPS, steps + 1)
            case["timesteps"] = ts
            case["timesteps_hex"] = [v.hex() for v in ts]
            case["timesteps_dtype"] = str(timesteps.dtype)
            case["timesteps_scalar_formula"] = scalar
            case["timesteps_match_scalar_formula"] = ts == scalar
            if ts != scalar:
                warn("%s: torch.linspace differs from the scalar float32 formula at %s" % (
                    name, [i for i in range(len(ts)) if ts[i] != scalar[i]]))
            case["number_transfer_tokens"] = [e["number_transfer_tokens"] for e in schedule]
            case["schedule"] = schedule
            # the same schedule from the scalar-formula timesteps
            n = DREAM_GEN
            alt = []
            for e in schedule:
                import numpy as np
                f = np.float32
                i = e["i"]
                if i < steps - 1:
                    alt.append(int(f(f(e["num_mask_token"]) * f(f(1) - f(f(scalar[i + 1]) / f(scalar[i]))))))
                else:
                    alt.append(int(e["num_mask_token"]))
            case["number_transfer_tokens_from_scalar_formula"] = alt
            if alt != case["number_transfer_tokens"]:
                warn("%s: schedule from the scalar linspace differs: %s vs %s" % (
                    name, alt, case["number_transfer_tokens"]))
            # and our own float32 emulation of the torch arithmetic must agree
            emu = []
            for e in schedule:
                import numpy as np
                f = np.float32
                i = e["i"]
                emu.append(int(f(f(e["num_mask_token"]) * f(f(1) - f(f(ts[i + 1]) / f(ts[i])))))
                           if i < steps - 1 else int(e["num_mask_token"]))
            check(name + "_schedule_f32_emulation", emu == case["number_transfer_tokens"],
                  emu=emu, torch=case["number_transfer_tokens"])
            cases[name] = case
    return cases


def confidences_seen(W, c, shift):
    """The float64 softmax confidence of the argmax at the masks of the first
    block after the first forward (to pick thresholds)."""
    import torch
    x = torch.tensor([PROMPT + [MASK_ID] * FAST_GEN])
    with torch.no_grad():
        logits = forward(W, c, x)[0]
    if shift:
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    p = torch.softmax(logits.double(), -1).max(-1).values[0, len(PROMPT):]
    return [r7(v) for v in p.tolist()]


def build(arch, out, tok_src):
    import torch
    c = LLADA_CFG if arch == "llada" else DREAM_CFG
    W = init_weights(c, LLADA_SEED if arch == "llada" else DREAM_SEED)
    d = os.path.join(out, "%s-tiny" % arch)
    os.makedirs(d)
    sd = llada_state_dict(W, c) if arch == "llada" else hf_state_dict(W, c)
    save_safetensors(sd, os.path.join(d, "model.safetensors"))
    write_json(os.path.join(d, "config.json"),
               llada_config_json(c) if arch == "llada" else dream_config_json(c))
    shutil.copyfile(tok_src, os.path.join(d, "tokenizer.json"))
    hdr = safetensors_header(os.path.join(d, "model.safetensors"))
    for k in sorted(hdr):
        if k != "__metadata__":
            log("   %-50s %s %s" % (k, hdr[k]["dtype"], hdr[k]["shape"]))
    try:
        from safetensors.torch import load_file
        back = load_file(os.path.join(d, "model.safetensors"))
        check("%s_safetensors_roundtrip" % arch,
              sorted(back) == sorted(sd) and all(torch.equal(back[k], sd[k]) for k in sd))
    except ImportError:
        log("NOTE: no safetensors module; round trip not checked")

    try:
        hf_check(W, c, arch)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        check("%s_vs_transformers" % arch, False, error=repr(e))
    cache_self_check(W, c, arch)
    shift = arch == "dream"
    with torch.no_grad():
        logits = forward(W, c, torch.tensor([FORWARD_IDS]))[0]
    if shift:
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    fwd = {"input_ids": list(FORWARD_IDS), "logits": r7_list(logits[0]),
           "argmax": logits[0].argmax(-1).tolist(),
           "note": ("bidirectional (no mask), float32, CPU" +
                    ("; shifted: row i is the model's row i-1, row 0 its row 0" if shift else ""))}
    conf = confidences_seen(W, c, shift)
    log("%s confidences (first forward, block masks): %s" % (arch, conf))
    log("%s logits std %.4f" % (arch, float(logits.std())))
    cases = llada_cases(W, c) if arch == "llada" else dream_cases(W, c)
    return {"model": "%s-tiny" % arch, "config": os.path.basename(d) + "/config.json",
            "mask_token_id": MASK_ID, "eos_token_id": EOS_ID, "forward": fwd,
            "first_forward_confidences": conf, "cases": cases}, d


def versions():
    v = {"python": platform.python_version(), "platform": platform.platform()}
    for mod in ("torch", "transformers", "safetensors", "numpy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            v[mod] = "unavailable: %s" % e
    try:
        import torch
        v["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception as e:  # noqa: BLE001
        v["torch_cpu_capability"] = "unavailable: %s" % e
    return v


RULES = {
    "forward": "float32 on the CPU, one thread; bidirectional attention (no mask); pre-RoPE "
               "K/V cached; logits rounded to 7 significant digits; Dream's logits shifted: "
               "logits = cat([logits[:, :1], logits[:, :-1]], dim=1)",
    "canvas": "per_step[i].canvas = the whole sequence (prompt + generation) after step i; "
              "positions = indices into the generation (0 = first generated position)",
    "llada_generate": "steps // num_blocks steps per block, each one forward of the whole "
                      "canvas (batch 2 with cfg_scale > 0: [x, x with the prompt masked]; "
                      "logits = un + (cfg+1)*(cond - un)); k = get_num_transfer_tokens: "
                      "base = masks_in_block // steps_per_block, the first (masks % steps) "
                      "steps one more; confidence = float32 softmax prob of the argmax, only at "
                      "masks up to the current block's end; topk(k); nfe = steps",
    "fastdllm_generate": "like llada_generate but confidence in float64 and a while loop "
                         "that ends when the block has no mask; threshold: k = masks in the "
                         "block, commit the top-1 always, the others if confidence >= "
                         "threshold (dropped if < threshold); one forward per step",
    "fastdllm_prefix_cache": "per block: one full forward (commits step 0 of the block, "
                             "keeps pre-RoPE K/V of positions < block_start), then forwards of "
                             "x[block_start:] (the block and everything after it, positions "
                             "block_start..L-1) attending to the cached prefix + themselves; "
                             "the prefix cache is never refreshed within the block",
    "fastdllm_dual_cache": "per block: one full forward (commits step 0, caches K/V of all "
                           "positions), then forwards of x[block_start:block_end] only: their "
                           "K/V overwrite the cache at the block's positions, queries at "
                           "positions block_start..block_end-1 attend to all L keys; prefix "
                           "and suffix K/V stay those of the block's full forward",
    "nfe": "nfe = model forwards (a cfg forward of batch 2 counts once; forward_rows counts "
           "rows); steps_taken = entries in per_step (one per forward in every sampler here)",
    "dream_sample": "steps forwards; timesteps = torch.linspace(1, eps, steps+1) float32; at "
                    "step i < steps-1: k = int(float32(num_masks) * (1 - s/t)) all float32 "
                    "(t = timesteps[i], s = timesteps[i+1]), truncated; last step k = all "
                    "masks; k = 0 commits nothing (the forward still counts); confidence "
                    "maskgit_plus = max prob, topk_margin = top1 - top2 prob, entropy = "
                    "sum(p * log(p + 1e-10)) (float32, higher = more confident); topk(k) over "
                    "the masked positions",
    "dream_origin": "not in the golden: alg 'origin' draws torch.rand for every mask each "
                    "step even at temperature 0 (transfer if rand < 1 - s/t)",
    "ties": "a case's ties = true when a topk had equal k-th and (k+1)-th confidences",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "golden",
        "tokenizer-llama3.json"))
    args = ap.parse_args()
    out = args.out
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    v = versions()
    log("versions:", json.dumps(v))
    import torch
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    tok = json.load(open(args.tokenizer, encoding="utf-8"))
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    if (added.get("<|mdm_mask|>"), added.get("<|end_of_text|>"),
            added.get("<|begin_of_text|>")) != (MASK_ID, EOS_ID, BOS_ID):
        die("tokenizer ids differ from MASK_ID / EOS_ID / BOS_ID: %r" % added)
    if any(t >= BOS_ID for t in PROMPT[1:]):
        die("prompt holds a special id")

    expected, models = {}, {}
    for arch in ("llada", "dream"):
        log("=== model", arch)
        try:
            expected[arch], d = build(arch, out, args.tokenizer)
        except SystemExit:
            raise
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            die("%s failed" % arch)
        models[arch + "-tiny"] = {"files": sorted(os.listdir(d)), "bytes": folder_size(d)}
    expected["rules"] = RULES
    sweep = linspace_sweep()
    log("linspace sweep:", json.dumps(sweep))
    write_json(os.path.join(out, "expected.json"), expected, compact=True)

    # what the C side gets to see
    tied = [n for a in ("llada", "dream") for n, cs in expected[a]["cases"].items() if cs["ties"]]
    multi = {n: cs["multi_commit_steps"] for n, cs in expected["llada"]["cases"].items()
             if cs["threshold"] is not None}
    log("threshold cases, steps committing > 1 token:", json.dumps(multi))
    check("some_threshold_case_multi_commits",
          any(v > 0 for n, v in multi.items() if "th0.9" not in n), multi=multi)
    script = open(os.path.abspath(__file__), "rb").read()
    write_json(os.path.join(out, "VERSIONS.json"), {
        "versions": v,
        "seeds": {"torch.manual_seed": SEED, "llada_weights": LLADA_SEED,
                  "dream_weights": DREAM_SEED},
        "script": "tools/make_diffusion_golden.py",
        "script_sha256": hashlib.sha256(script).hexdigest(),
        "sources": SOURCES,
        "models": models,
        "model_configs": {"llada": LLADA_CFG, "dream": DREAM_CFG},
        "init": "matrices and embeddings normal std 1/sqrt(fan_in), norms 1 + 0.1 randn, "
                "biases 0.1 randn, in a fixed order from torch.Generator().manual_seed(seed)",
        "tokenizer": "tests/data/golden/tokenizer-llama3.json (copied as tokenizer.json)",
        "checks": CHECKS,
        "warnings": WARNINGS,
        "cases_with_ties": tied,
        "dream_linspace_sweep": sweep,
        "rules": RULES,
    })
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    for r, _, fs in sorted(os.walk(out)):
        for f in sorted(fs):
            log("   %-50s %9d" % (os.path.relpath(os.path.join(r, f), out),
                                  os.path.getsize(os.path.join(r, f))))
    log("total %d bytes" % total)
    if total >= 2 * 1024 * 1024:
        warn("output is over 2 MB")
    failed = [k for k, c in CHECKS.items() if not c["ok"]]
    if failed:
        log("FAILED CHECKS:", failed)
        sys.exit(1)
    log("DONE")


if __name__ == "__main__":
    main()
