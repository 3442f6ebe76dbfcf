#!/usr/bin/env python3
"""make_lladamoe_golden.py — golden data for tokbench's LLaDA-MoE
(LLaDAMoEModelLM, model_type "lladamoe") in the diffusion backend, made by
the published modelling code itself.

The modelling code is not in this repository: pass the folder holding the
two published files (configuration_lladamoe.py, modeling_lladamoe.py; e.g.
github.com/ZHZisZZ/dllm-trainer dllm/pipelines/llada/models/ @
25bfd3c1223f42dfea1245f45d247923cd756cb0) as --modelling. Run where python3
has torch and transformers (the GPU machine; no network needed), on the CPU
in float32 with one thread:

    CUDA_VISIBLE_DEVICES="" python3 tools/make_lladamoe_golden.py \\
        --modelling DIR --out tests/data/golden-diffusion

It writes, under --out:

  llada-moe-tiny/     config.json (the published config's keys), model.safetensors
                      (the model's own state_dict: model.embed_tokens, model.layers.
                      {i}.self_attn.{q,k,v,o}_proj / q_norm / k_norm, mlp.gate,
                      mlp.experts.{e}.{gate,up,down}_proj, a dense layer's mlp.
                      {gate,up,down}_proj, input_layernorm, post_attention_layernorm,
                      model.norm, lm_head), tokenizer.json (tokenizer-llama3.json)
  expected-lladamoe.json  {"llada_moe": {"forward": bidirectional logits of a
                      24-token canvas, "cases": LLaDA's low_confidence generate and
                      Fast-dLLM's threshold generate (no cache) run on the model,
                      the canvas after every step}} in the layout of
                      make_diffusion_golden.py's expected.json
  VERSIONS-lladamoe.json  versions, seeds, sources, shims applied, checks

The samplers are make_diffusion_golden.py's transcriptions (imported from it),
called with this model. transformers 5 dropped some names the published
file imports (docstring decorators, flash-attention probes, the rope
"default" entry, ...): where one is missing a stand-in is installed before
the import and listed in VERSIONS ("shims"); none of them is on the forward
path except the rope default, which is the standard inverse-frequency
formula (1 / theta^(arange(0, d, 2) / d)) and is compared with the library's
own when that exists.
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

SEED = 20261202
MASK_ID, EOS_ID, BOS_ID = mdg.MASK_ID, mdg.EOS_ID, mdg.BOS_ID

# Three layers, the middle one dense (moe_layer_freq 0); GQA (4 heads, 2 KV
# heads); 8 experts, 3 a token, weights not renormalised (the block's rule).
CONFIG = {
    "architectures": ["LLaDAMoEModelLM"],
    "model_type": "lladamoe",
    "vocab_size": 512,
    "hidden_size": 64,
    "dense_intermediate_size": 96,
    "expert_intermediate_size": 32,
    "shared_expert_intermediate_size": None,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-05,
    "use_cache": False,
    "pad_token_id": None,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "mask_token_id": MASK_ID,
    "tie_word_embeddings": False,
    "rope_theta": 50000.0,
    "partial_rotary_factor": 1,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "clip_qkv": None,
    "num_experts_per_tok": 3,
    "num_experts": 8,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.01,
    "norm_topk_prob": False,
    "qk_layernorm": True,
    "moe_layer_freq": [1, 0, 1],
    "moe_router_enable_expert_bias": False,
    "moe_router_score_function": "softmax",
    "routed_scaling_factor": 1,
    "router_num_group": None,
    "router_topk_group": None,
    "torch_dtype": "float32",
}

LLADA_SCHEDULES = [  # (gen_length, block_length, steps, cfg_scale)
    (32, 32, 8, 0.0), (32, 8, 8, 0.0), (32, 8, 16, 0.0), (32, 16, 6, 0.0), (32, 8, 8, 1.0),
]
FAST_THRESHOLDS = [None, 0.9]
FAST_GEN, FAST_BLOCK, FAST_STEPS = 32, 8, 32

SHIMS = []
log = mdg.log


def shim(mod, name, value):
    if not hasattr(mod, name):
        setattr(mod, name, value)
        SHIMS.append("%s.%s" % (mod.__name__, name))


def import_published(folder):
    """The published files as package `lladamoe_published`, with stand-ins
    for names transformers 5 no longer has."""
    import transformers
    import transformers.cache_utils as cu
    import transformers.configuration_utils as cfu
    import transformers.modeling_rope_utils as ru
    import transformers.pytorch_utils as pu
    import transformers.utils as tu

    keep = lambda *a, **k: (lambda f: f)  # noqa: E731 (docstring decorators)
    for n in ("add_start_docstrings", "add_start_docstrings_to_model_forward", "replace_return_docstrings"):
        shim(tu, n, keep)
    shim(tu, "is_flash_attn_2_available", lambda: False)
    shim(tu, "is_flash_attn_greater_or_equal_2_10", lambda: False)
    shim(pu, "ALL_LAYERNORM_LAYERS", [])
    for n in ("Cache", "DynamicCache", "StaticCache"):
        shim(cu, n, type(n, (), {}))
    shim(cfu, "PretrainedConfig", getattr(cfu, "PreTrainedConfig", None))
    shim(ru, "rope_config_validation", lambda *a, **k: None)
    shim(ru, "ROPE_INIT_FUNCTIONS", {})
    try:
        am = importlib.import_module("transformers.modeling_attn_mask_utils")
    except ImportError:
        am = types.ModuleType("transformers.modeling_attn_mask_utils")
        sys.modules[am.__name__] = am
        SHIMS.append(am.__name__)
    shim(am, "AttentionMaskConverter", type("AttentionMaskConverter", (), {}))

    pkg = types.ModuleType("lladamoe_published")
    pkg.__path__ = [os.path.abspath(folder)]
    sys.modules[pkg.__name__] = pkg
    cfg_mod = importlib.import_module("lladamoe_published.configuration_lladamoe")
    mdl_mod = importlib.import_module("lladamoe_published.modeling_lladamoe")
    log("transformers", transformers.__version__, "shims:", SHIMS)
    return cfg_mod, mdl_mod, ru


def default_inv_freq(config, device=None, seq_len=None, **kw):
    import torch
    base = float(config.rope_theta)
    dim = int((config.hidden_size // config.num_attention_heads) * config.partial_rotary_factor)
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim)), 1.0


def rope_default(ru, config):
    """Keep the library's "default" rope when it computes this config's
    frequencies; otherwise install the standard formula."""
    import torch
    want, _ = default_inv_freq(config)
    lib = ru.ROPE_INIT_FUNCTIONS.get("default")
    if lib is not None:
        try:
            got, scale = lib(config, None)
            if torch.allclose(got.float(), want, rtol=0, atol=0) and float(scale) == 1.0:
                log("rope default: the library's, equal to the standard formula")
                return "library"
            log("rope default: the library's differs (%r); the standard formula used" % (got[:4],))
        except Exception as e:  # noqa: BLE001
            log("rope default: the library's fails on this config (%r); the standard formula used" % e)
    ru.ROPE_INIT_FUNCTIONS["default"] = default_inv_freq
    SHIMS.append("ROPE_INIT_FUNCTIONS['default']")
    return "standard formula"


def make_config(cfg_mod, kw, attn):
    """LLaDAMoEConfig(**kw) with attention `attn`, and the attributes the
    published forward reads that transformers 5's config may lack."""
    try:
        config = cfg_mod.LLaDAMoEConfig(attn_implementation=attn, **kw)
    except TypeError:
        config = cfg_mod.LLaDAMoEConfig(**kw)
    for name in ("_attn_implementation", "_attn_implementation_internal"):
        try:
            setattr(config, name, attn)
        except Exception:  # noqa: BLE001
            pass
    for name, value in kw.items():  # a key the config class moved elsewhere
        if not hasattr(config, name):
            setattr(config, name, value)
            SHIMS.append("config.%s = %r" % (name, value))
    for name, value in (("use_return_dict", True), ("output_attentions", False), ("output_hidden_states", False)):
        if not hasattr(config, name):
            setattr(config, name, value)
            SHIMS.append("config.%s = %r" % (name, value))
    log("config: attention %r" % getattr(config, "_attn_implementation", None))
    return config


def build_model(cfg_mod, mdl_mod, ru):
    import torch
    kw = {k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type", "torch_dtype")}
    config = make_config(cfg_mod, kw, "eager")
    rope = rope_default(ru, config)
    try:
        model = mdl_mod.LLaDAMoEModelLM(config)
    except Exception as e:  # noqa: BLE001 (transformers 5 takes a dict here)
        log("construction failed (%r): _tied_weights_keys as a dict" % e)
        mdl_mod.LLaDAMoEModelLM._tied_weights_keys = {}
        SHIMS.append("LLaDAMoEModelLM._tied_weights_keys = {}")
        model = mdl_mod.LLaDAMoEModelLM(config)
    model = model.float().eval()
    # seeded weights: matrices normal std 1/sqrt(fan_in) (routers 3x, so
    # that routing margins stay far above float32 rounding), norms 1 + 0.1 randn
    g = torch.Generator().manual_seed(SEED)
    sd = {}
    for name, p in sorted(model.state_dict().items()):
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            v = 1 + 0.1 * torch.randn(p.shape, generator=g)
        elif p.dim() == 2:
            std = (3.0 if name.endswith("mlp.gate.weight") else 1.0) / p.shape[1] ** 0.5
            v = torch.randn(p.shape, generator=g) * std
        else:
            mdg.die("unexpected tensor %s %s" % (name, tuple(p.shape)))
        sd[name] = v.float()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        mdg.die("state dict: missing %s, unexpected %s" % (missing, unexpected))
    log("attention:", getattr(config, "_attn_implementation", "?"))
    return model, sd, rope


class PublishedModel:
    """model(x) -> (logits, None) as make_diffusion_golden's samplers call it;
    counts forwards (full canvas, no cache)."""

    def __init__(self, m):
        self.m = m
        self.calls = []
        self.min_route_gap = float("inf")

    def __call__(self, x, pos0=0, past=None, replace=None):
        import torch
        assert past is None and replace is None and pos0 == 0
        with torch.no_grad():
            logits = self.m(input_ids=x).logits
        self.calls.append({"kind": "full", "start": 0, "end": int(x.shape[1]), "rows": int(x.shape[0])})
        return logits, None


def route_gaps(model):
    """Hooks on every router (mlp.gate): the narrowest gap between the k-th
    and (k+1)-th router probability seen (routing near-ties)."""
    import torch
    state = {"gap": float("inf")}
    k = CONFIG["num_experts_per_tok"]

    def hook(_mod, _inp, out):
        p = torch.softmax(out.float(), dim=-1)
        top = torch.topk(p, k + 1, dim=-1).values
        state["gap"] = min(state["gap"], float((top[:, k - 1] - top[:, k]).min()))
    for name, mod in model.named_modules():
        if name.endswith("mlp.gate"):
            mod.register_forward_hook(hook)
    return state


def run_case(name, fn, model, params, **kw):
    import torch
    pm = PublishedModel(model)
    rec = mdg.Recorder(pm, len(mdg.PROMPT))
    out = fn(pm, torch.tensor([mdg.PROMPT]), rec, **kw)
    case = dict(params)
    case["name"] = name
    case["prompt_ids"] = list(mdg.PROMPT)
    case.update(rec.summary())
    if fn is mdg.llada_generate:
        case["transfer_schedule_per_block"] = out[1]
    elif out[1] != case["nfe"]:
        mdg.die("%s: the source's nfe %d != forwards counted %d" % (name, out[1], case["nfe"]))
    case["final"] = out[0][0].tolist()
    if MASK_ID in case["final"]:
        mdg.die("%s: masks left in the final canvas" % name)
    case["per_step"] = rec.steps
    log("%-32s steps %3d nfe %3d commits %s min_cut_gap %s%s" % (
        name, case["steps_taken"], case["nfe"], case["committed_per_step"], case["min_cut_gap"],
        "  TIE" if case["ties"] else ""))
    return case


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modelling", required=True, help="folder with configuration_lladamoe.py, modeling_lladamoe.py")
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

    d = os.path.join(args.out, "llada-moe-tiny")
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    mdg.save_safetensors(sd, os.path.join(d, "model.safetensors"))
    mdg.write_json(os.path.join(d, "config.json"), CONFIG)
    shutil.copyfile(args.tokenizer, os.path.join(d, "tokenizer.json"))
    for k in sorted(sd):
        log("   %-50s %s" % (k, list(sd[k].shape)))

    # the forward, and the same forward batched with a second canvas (the
    # published block routes each row on its own)
    ids = torch.tensor([mdg.FORWARD_IDS])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
        other = torch.tensor([mdg.FORWARD_IDS[::-1]])
        both = model(input_ids=torch.cat([ids, other])).logits[0]
    mdg.check("batched_row_equals_single", float((both - logits).abs().max()) < 1e-5,
              diff=float((both - logits).abs().max()))
    fwd = {"input_ids": list(mdg.FORWARD_IDS), "logits": mdg.r7_list(logits), "argmax": logits.argmax(-1).tolist(),
           "note": "bidirectional (no mask), float32, CPU, the published LLaDAMoEModelLM"}
    log("logits std %.4f, narrowest routing gap so far %.3g" % (float(logits.std()), gaps["gap"]))

    cases = {}
    for gen, block, steps, cfg in LLADA_SCHEDULES:
        name = "llada_g%d_b%d_s%d%s" % (gen, block, steps, "_cfg%g" % cfg if cfg else "")
        params = {"sampler": "llada_generate", "source": mdg.SOURCES["llada_generate"],
                  "remasking": "low_confidence", "softmax_dtype": "float32", "gen_length": gen,
                  "block_length": block, "steps": steps, "threshold": None, "cache": "none",
                  "cfg_scale": cfg, "temperature": 0.0, "mask_id": MASK_ID}
        cases[name] = run_case(name, mdg.llada_generate, model, params, steps=steps, gen_length=gen,
                               block_length=block, cfg_scale=cfg)
    for th in FAST_THRESHOLDS:
        name = "fast_none_g%d_b%d_%s" % (FAST_GEN, FAST_BLOCK, "s%d" % FAST_STEPS if th is None else "th%g" % th)
        params = {"sampler": "fastdllm_generate", "source": mdg.SOURCES["fastdllm_llada"],
                  "remasking": "low_confidence", "softmax_dtype": "float64", "gen_length": FAST_GEN,
                  "block_length": FAST_BLOCK, "steps": FAST_STEPS, "threshold": th, "cache": "none",
                  "cfg_scale": 0.0, "temperature": 0.0, "mask_id": MASK_ID}
        cases[name] = run_case(name, mdg.fast_generate, model, params, steps=FAST_STEPS, gen_length=FAST_GEN,
                               block_length=FAST_BLOCK, threshold=th)
    log("narrowest routing gap (router probabilities) over every forward: %.3g" % gaps["gap"])
    mdg.check("routing_gaps_clear_of_float32", gaps["gap"] > 1e-5, gap=gaps["gap"])
    expected = {"llada_moe": {"model": "llada-moe-tiny", "config": "llada-moe-tiny/config.json",
                              "mask_token_id": MASK_ID, "eos_token_id": EOS_ID, "forward": fwd,
                              "min_routing_gap": gaps["gap"], "cases": cases}}
    mdg.write_json(os.path.join(args.out, "expected-lladamoe.json"), expected, compact=True)

    def sha(p):
        return hashlib.sha256(open(p, "rb").read()).hexdigest()
    import transformers
    mdg.write_json(os.path.join(args.out, "VERSIONS-lladamoe.json"), {
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "platform": platform.platform()},
        "seed": SEED,
        "script": "tools/make_lladamoe_golden.py",
        "script_sha256": sha(os.path.abspath(__file__)),
        "modelling": {"repo": "ZHZisZZ/dllm-trainer", "path": "dllm/pipelines/llada/models/",
                      "commit": "25bfd3c1223f42dfea1245f45d247923cd756cb0",
                      "modeling_lladamoe.py_sha256": sha(os.path.join(args.modelling, "modeling_lladamoe.py")),
                      "configuration_lladamoe.py_sha256": sha(os.path.join(args.modelling,
                                                                            "configuration_lladamoe.py"))},
        "samplers": {"llada_generate": mdg.SOURCES["llada_generate"], "fastdllm": mdg.SOURCES["fastdllm_llada"],
                     "transcribed_in": "tools/make_diffusion_golden.py"},
        "shims": SHIMS, "rope_default": rope, "config": CONFIG,
        "init": "matrices normal std 1/sqrt(fan_in) (routers 3/sqrt(fan_in)), norms 1 + 0.1 randn, "
                "in sorted state_dict order from torch.Generator().manual_seed(seed)",
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
