#!/usr/bin/env python3
"""make_llada2_golden.py — golden data for tokbench's LLaDA 2.x
(LLaDA2MoeModelLM, model_type "llada2_moe") made by the published modelling
code itself.

The modelling code is not in this repository: pass the folder holding the
two published files (configuration_llada2_moe.py, modeling_llada2_moe.py,
as inclusionAI ships them with LLaDA2.0-mini; a public copy:
github.com/yks23/Information-Gain-Sampler dllm/dllm/pipelines/llada2/models/
@ f1cb636fcd5666afa1c16c4cb12944ecb614eaf2) as --modelling. Run where
python3 has torch and transformers (the GPU machine; no network needed), on
the CPU in float32 with one thread:

    CUDA_VISIBLE_DEVICES="" python3 tools/make_llada2_golden.py \\
        --modelling DIR --out tests/data/golden-diffusion

It writes, under --out:

  llada2-tiny/        config.json (the published config's keys), model.safetensors
                      (the model's own state_dict: model.word_embeddings,
                      model.layers.{i}.attention.query_key_value / query_layernorm /
                      key_layernorm / dense, mlp.gate.weight and mlp.gate.expert_bias,
                      mlp.experts.{e}.{gate,up,down}_proj, mlp.shared_experts.*, the
                      dense first layer's mlp.{gate,up,down}_proj, input_layernorm,
                      post_attention_layernorm, model.norm, lm_head), tokenizer.json
  expected-llada2.json  {"llada2": {"forward": logits of a 24-token sequence}}
  VERSIONS-llada2.json  versions, seed, sources, shims applied, checks

The forward is called with attention_mask = None, which the published model
turns into a causal mask (checked here: changing the last token leaves the
other rows' logits unchanged). Its generate() passes a block-causal mask
instead; the mask is the engine's (tests/test_block_diffusion.c checks the
block-causal one), the layer math is what this golden checks: the fused
query_key_value, per-head q/k norms, the partial rotary embedding, the
sigmoid router with expert_bias and group-limited choice, routed scaling,
the shared expert and the dense first layer.

transformers 5 dropped some names the published file imports: where one is
missing a stand-in is installed before the import and listed in VERSIONS
("shims"); on the forward path only the rope default (the standard
inverse-frequency formula over int(head_dim x partial_rotary_factor) dims,
compared with the library's own when that exists) and, if missing, the
causal mask builder (a lower-triangular additive mask).
"""

import argparse
import hashlib
import importlib
import json
import os
import platform
import shutil
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_diffusion_golden as mdg  # noqa: E402

SEED = 20261203
MASK_ID, EOS_ID, BOS_ID = mdg.MASK_ID, mdg.EOS_ID, mdg.BOS_ID

# Three layers, the first dense (first_k_dense_replace 1); GQA (4 heads, 2
# KV heads, head_dim 16, 8 dims rotated); 8 experts in 4 groups, 2 groups
# and 3 experts a token, 1 shared expert, scaling 2.5 (LLaDA2.0-mini's
# rules at a tiny size).
CONFIG = {
    "architectures": ["LLaDA2MoeModelLM"],
    "model_type": "llada2_moe",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "use_qkv_bias": False,
    "use_qk_norm": True,
    "use_bias": False,
    "rms_norm_eps": 1e-06,
    "norm_head": False,
    "tie_word_embeddings": False,
    "embedding_dropout": 0.0,
    "attention_dropout": 0.0,
    "output_dropout": 0.0,
    "initializer_range": 0.02,
    "max_position_embeddings": 4096,
    "rope_theta": 600000,
    "use_cache": False,
    "use_sliding_window": False,
    "rope_scaling": None,
    "pad_token_id": None,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "mask_token_id": MASK_ID,
    "num_experts": 8,
    "num_shared_experts": 1,
    "num_experts_per_tok": 3,
    "n_group": 4,
    "topk_group": 2,
    "routed_scaling_factor": 2.5,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 1,
    "output_router_logits": False,
    "partial_rotary_factor": 0.5,
    "score_function": "sigmoid",
    "norm_topk_prob": True,
    "moe_router_enable_expert_bias": True,
    "torch_dtype": "float32",
}

SHIMS = []
log = mdg.log


def shim(mod, name, value):
    if not hasattr(mod, name):
        setattr(mod, name, value)
        SHIMS.append("%s.%s" % (mod.__name__, name))


def causal_4d(attention_mask, input_shape, inputs_embeds, past_key_values_length, *a, **k):
    """Stand-in for transformers' _prepare_4d_causal_attention_mask when
    the library lacks it: attention_mask None (what this script passes) makes
    the causal mask; a 4D additive mask (what generate() passes: 0 where
    visible, -inf where not) is used as it is."""
    import torch
    if attention_mask is not None:
        assert attention_mask.dim() == 4
        return attention_mask.to(inputs_embeds.dtype)
    b, n = input_shape
    m = torch.full((n, n + past_key_values_length), torch.finfo(inputs_embeds.dtype).min)
    m = torch.triu(m, diagonal=1 + past_key_values_length)
    return m[None, None].expand(b, 1, -1, -1).to(inputs_embeds.dtype)


def import_published(folder):
    import transformers
    import transformers.cache_utils as cu
    import transformers.configuration_utils as cfu
    import transformers.modeling_rope_utils as ru
    import transformers.modeling_utils as mu
    import transformers.pytorch_utils as pu
    import transformers.utils as tu

    keep = lambda *a, **k: (lambda f: f)  # noqa: E731 (docstring decorators)
    for n in ("add_start_docstrings", "add_start_docstrings_to_model_forward", "replace_return_docstrings"):
        shim(tu, n, keep)
    shim(tu, "TransformersKwargs", dict)
    try:
        iu = importlib.import_module("transformers.utils.import_utils")
        shim(iu, "is_torch_fx_available", lambda: False)
    except ImportError:
        pass
    shim(pu, "ALL_LAYERNORM_LAYERS", [])
    shim(pu, "is_torch_greater_or_equal_than_1_13", True)
    for n in ("Cache", "DynamicCache"):
        shim(cu, n, type(n, (), {}))
    shim(cfu, "PretrainedConfig", getattr(cfu, "PreTrainedConfig", None))
    shim(ru, "ROPE_INIT_FUNCTIONS", {})
    shim(ru, "dynamic_rope_update", lambda f: f)
    shim(mu, "ALL_ATTENTION_FUNCTIONS", {})
    try:
        am = importlib.import_module("transformers.modeling_attn_mask_utils")
    except ImportError:
        am = types.ModuleType("transformers.modeling_attn_mask_utils")
        sys.modules[am.__name__] = am
        SHIMS.append(am.__name__)
    shim(am, "_prepare_4d_causal_attention_mask", causal_4d)
    shim(am, "_prepare_4d_causal_attention_mask_for_sdpa", causal_4d)
    try:
        importlib.import_module("transformers.generation.utils")
    except ImportError:
        gm = types.ModuleType("transformers.generation.utils")
        gm.GenerationMixin = type("GenerationMixin", (), {})
        sys.modules[gm.__name__] = gm
        SHIMS.append(gm.__name__)

    pkg = types.ModuleType("llada2_published")
    pkg.__path__ = [os.path.abspath(folder)]
    sys.modules[pkg.__name__] = pkg
    cfg_mod = importlib.import_module("llada2_published.configuration_llada2_moe")
    mdl_mod = importlib.import_module("llada2_published.modeling_llada2_moe")
    log("transformers", transformers.__version__, "shims:", SHIMS)
    return cfg_mod, mdl_mod, ru


def default_inv_freq(config, device=None, seq_len=None, **kw):
    import torch
    base = float(config.rope_theta)
    dim = int(config.head_dim * config.partial_rotary_factor)
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim)), 1.0


def rope_default(ru, config):
    import torch
    want, _ = default_inv_freq(config)
    lib = ru.ROPE_INIT_FUNCTIONS.get("default")
    if lib is not None:
        try:
            got, scale = lib(config, None)
            if got.shape == want.shape and torch.allclose(got.float(), want, rtol=0, atol=0) and float(scale) == 1.0:
                log("rope default: the library's, equal to the standard formula")
                return "library"
            log("rope default: the library's differs (%r); the standard formula used" % (got[:4],))
        except Exception as e:  # noqa: BLE001
            log("rope default: the library's fails on this config (%r); the standard formula used" % e)
    ru.ROPE_INIT_FUNCTIONS["default"] = default_inv_freq
    SHIMS.append("ROPE_INIT_FUNCTIONS['default']")
    return "standard formula"


def build_model(cfg_mod, mdl_mod, ru):
    import torch
    kw = {k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type", "torch_dtype")}
    config = cfg_mod.LLaDA2MoeConfig(**kw)
    for name in ("_attn_implementation", "_attn_implementation_internal"):
        try:
            setattr(config, name, "eager")
        except Exception:  # noqa: BLE001
            pass
    for name, value in (("use_return_dict", True), ("output_attentions", False), ("output_hidden_states", False)):
        if not hasattr(config, name):
            setattr(config, name, value)
            SHIMS.append("config.%s = %r" % (name, value))
    log("config: attention %r" % getattr(config, "_attn_implementation", None))
    rope = rope_default(ru, config)
    try:
        model = mdl_mod.LLaDA2MoeModelLM(config)
    except Exception as e:  # noqa: BLE001 (transformers 5 takes a dict here)
        log("construction failed (%r): _tied_weights_keys as a dict" % e)
        mdl_mod.LLaDA2MoeModelLM._tied_weights_keys = {}
        SHIMS.append("LLaDA2MoeModelLM._tied_weights_keys = {}")
        model = mdl_mod.LLaDA2MoeModelLM(config)
    model = model.float().eval()
    # seeded weights: matrices normal std 1/sqrt(fan_in) (routers 3x, so
    # that routing margins stay far above float32 rounding), norms 1 + 0.1
    # randn, expert_bias 0.05 randn (it moves the choice, not the weights)
    g = torch.Generator().manual_seed(SEED)
    sd = {}
    for name, p in sorted(model.state_dict().items()):
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            v = 1 + 0.1 * torch.randn(p.shape, generator=g)
        elif name.endswith("mlp.gate.expert_bias"):
            v = 0.05 * torch.randn(p.shape, generator=g)
        elif p.dim() == 2:
            std = (3.0 if name.endswith("mlp.gate.weight") else 1.0) / p.shape[1] ** 0.5
            v = torch.randn(p.shape, generator=g) * std
        else:
            mdg.die("unexpected tensor %s %s" % (name, tuple(p.shape)))
        sd[name] = v.float()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        mdg.die("state dict: missing %s, unexpected %s" % (missing, unexpected))
    return model, sd, rope


def route_gaps(model):
    """Hooks on every gate: the narrowest margin of the choice (the k-th
    chosen choice score against the best eligible one left out, and the
    topk_group-th group score against the best group left out)."""
    import torch
    state = {"gap": float("inf")}
    k, G, tg = CONFIG["num_experts_per_tok"], CONFIG["n_group"], CONFIG["topk_group"]

    def hook(mod, _inp, out):
        logits = out[2].float()
        s = torch.sigmoid(logits) + mod.expert_bias
        n, E = s.shape
        gs = s.view(n, G, -1).topk(2, dim=-1)[0].sum(-1)
        gsort = gs.sort(dim=-1, descending=True).values
        state["gap"] = min(state["gap"], float((gsort[:, tg - 1] - gsort[:, tg]).min()))
        gidx = gs.topk(tg, dim=-1)[1]
        mask = torch.zeros_like(gs).scatter_(1, gidx, 1).unsqueeze(-1).expand(n, G, E // G).reshape(n, E)
        ms = s.masked_fill(~mask.bool(), float("-inf")).sort(dim=-1, descending=True).values
        state["gap"] = min(state["gap"], float((ms[:, k - 1] - ms[:, k]).min()))
    for name, mod in model.named_modules():
        if name.endswith("mlp.gate"):
            mod.register_forward_hook(hook)
    return state


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modelling", required=True, help="folder with configuration_llada2_moe.py, modeling_llada2_moe.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                        "data", "golden", "tokenizer-llama3.json"))
    args = ap.parse_args()
    import torch
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    cfg_mod, mdl_mod, ru = import_published(args.modelling)
    model, sd, rope = build_model(cfg_mod, mdl_mod, ru)
    gaps = route_gaps(model)

    d = os.path.join(args.out, "llada2-tiny")
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    mdg.save_safetensors(sd, os.path.join(d, "model.safetensors"))
    mdg.write_json(os.path.join(d, "config.json"), CONFIG)
    shutil.copyfile(args.tokenizer, os.path.join(d, "tokenizer.json"))
    for k in sorted(sd):
        log("   %-50s %s" % (k, list(sd[k].shape)))

    ids = torch.tensor([mdg.FORWARD_IDS])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
        changed = ids.clone()
        changed[0, -1] = (int(changed[0, -1]) + 1) % CONFIG["vocab_size"]
        other = model(input_ids=changed).logits[0]
    n = ids.shape[1]
    # the other rows move by float rounding only (1e-6: the published
    # moe_infer groups the rows by expert, so one changed token changes the
    # order of the sums), the changed row by far more
    before, last = float((other[: n - 1] - logits[: n - 1]).abs().max()), float((other[n - 1] - logits[n - 1]).abs().max())
    mdg.check("causal_mask", before < 1e-5 and last > 1e-2, other_rows=before, changed_row=last)
    log("logits std %.4f, narrowest routing margin %.3g" % (float(logits.std()), gaps["gap"]))
    mdg.check("routing_gaps_clear_of_float32", gaps["gap"] > 1e-5, gap=gaps["gap"])
    fwd = {"input_ids": list(mdg.FORWARD_IDS), "logits": mdg.r7_list(logits), "argmax": logits.argmax(-1).tolist(),
           "mask": "causal",
           "note": "attention_mask None (causal), float32, CPU, the published LLaDA2MoeModelLM"}
    mdg.write_json(os.path.join(args.out, "expected-llada2.json"),
                   {"llada2": {"model": "llada2-tiny", "forward": fwd, "min_routing_gap": gaps["gap"]}}, compact=True)

    def sha(p):
        return hashlib.sha256(open(p, "rb").read()).hexdigest()
    import transformers
    mdg.write_json(os.path.join(args.out, "VERSIONS-llada2.json"), {
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "platform": platform.platform()},
        "seed": SEED,
        "script": "tools/make_llada2_golden.py",
        "script_sha256": sha(os.path.abspath(__file__)),
        "modelling": {"repo": "yks23/Information-Gain-Sampler", "path": "dllm/dllm/pipelines/llada2/models/",
                      "commit": "f1cb636fcd5666afa1c16c4cb12944ecb614eaf2",
                      "modeling_llada2_moe.py_sha256": sha(os.path.join(args.modelling, "modeling_llada2_moe.py")),
                      "configuration_llada2_moe.py_sha256": sha(os.path.join(args.modelling,
                                                                              "configuration_llada2_moe.py"))},
        "shims": SHIMS, "rope_default": rope, "config": CONFIG,
        "init": "matrices normal std 1/sqrt(fan_in) (routers 3/sqrt(fan_in)), norms 1 + 0.1 randn, expert_bias "
                "0.05 randn, in sorted state_dict order from torch.Generator().manual_seed(seed)",
        "min_routing_gap": gaps["gap"],
        "checks": mdg.CHECKS, "warnings": mdg.WARNINGS,
    })
    failed = [k for k, c in mdg.CHECKS.items() if not c["ok"]]
    if failed:
        log("FAILED CHECKS:", failed)
        sys.exit(1)
    log("DONE")


if __name__ == "__main__":
    main()
