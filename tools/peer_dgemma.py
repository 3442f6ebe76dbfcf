#!/usr/bin/env python3
"""The PyTorch peer of suites/gpu-dgemma.ini: transformers' own
DiffusionGemmaForBlockDiffusion (5.17) built from the published config
(google/diffusiongemma-26B-A4B-it's text_config, as tokbench's preset
diffusiongemma-26b-a4b) with random bf16 weights on the GPU, driven by its
own generate() (EntropyBoundSampler, the linear temperature schedule,
StableAndConfidentStoppingCriteria), batch 1.

Same prompts as the suite: the first --limit openings of
suites/data/text.jsonl, as the ids tokbench feeds a preset that has no
tokenizer (plugins/diffusion/dgemma_backend.c): BOS (2), then 3 + each
UTF-8 byte of the text. Same lengths (max_new_tokens 32 and 256) and step
caps (max_denoising_steps 48 and 16). EOS as the model's ([1, 106, 50]).

Prints, per (max_new_tokens, steps): tokens/s (output tokens over the
wall time of generate(), the median over --runs passes of the prompts after
one warm-up pass), the output tokens (up to the first EOS), canvases and
denoising steps per canvas.

usage: python3 tools/peer_dgemma.py [--limit 4] [--runs 3] [--lengths 32,256] [--steps 48,16]"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

ap = argparse.ArgumentParser()
ap.add_argument("--limit", type=int, default=4)
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--lengths", default="32,256")
ap.add_argument("--steps", default="48,16")
ap.add_argument("--prompts", default=os.path.join(ROOT, "suites", "data", "text.jsonl"))
args = ap.parse_args()

V = 262144
FULL = {5, 11, 17, 23, 29}
# the published text_config (plugins/engine/format/dgemma_model.c's preset)
TEXT = {
    "model_type": "diffusion_gemma_text",
    "vocab_size": V, "hidden_size": 2816, "intermediate_size": 2112, "num_hidden_layers": 30,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
    "global_head_dim": 512, "num_global_key_value_heads": 2,
    "layer_types": ["full_attention" if i in FULL else "sliding_attention" for i in range(30)],
    "sliding_window": 1024,
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                           "rope_theta": 1000000.0}},
    "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704,
    "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "final_logit_softcapping": 30.0,
    "max_position_embeddings": 262144, "use_bidirectional_attention": "vision", "attention_bias": False,
    "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1, "tie_word_embeddings": True, "dtype": "bfloat16",
}
# a small Gemma-4 vision tower, only where transformers insists on one (text prompts never reach it)
VISION = {"model_type": "gemma4_vision", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 2, "head_dim": 16, "patch_size": 8, "pooling_kernel_size": 2,
          "position_embedding_size": 64}
EOS = [1, 106, 50]


def root_config(vision):
    d = {"architectures": ["DiffusionGemmaForBlockDiffusion"], "model_type": "diffusion_gemma",
         "canvas_length": 256, "tie_word_embeddings": True, "eos_token_id": EOS,
         "image_token_id": 258880, "boi_token_id": 255999, "eoi_token_id": 258882,
         "text_config": dict(TEXT), "dtype": "bfloat16"}
    if vision is not None:
        d["vision_config"] = dict(vision)
    return d


class MetaMatrices:
    """While constructing: every parameter of two or more dimensions is
    registered on the meta device (no memory, and every init of it, torch's
    or transformers', does nothing), the vectors (norms) and buffers (rotary
    tables) stay real on the host. Constructing with the init run took
    longer than session 22's 220 s on the host (serial draws of 25 G
    values)."""

    def __enter__(self):
        self.orig = orig = torch.nn.Module.register_parameter

        def register(mod, name, param):
            if param is not None and param.dim() >= 2 and not param.is_meta:
                param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
            orig(mod, name, param)

        torch.nn.Module.register_parameter = register
        return self

    def __exit__(self, *exc):
        torch.nn.Module.register_parameter = self.orig
        return False


class MetaFactories(torch.overrides.TorchFunctionMode):
    """While constructing: a tensor factory (empty, zeros, randn, ...)
    asked for a tensor of two or more dimensions and at least 2^20 values
    makes it on the meta device, so a module that draws its matrices in its
    constructor (a stack of experts made by torch.randn, say) draws nothing;
    MetaMatrices then registers it as it is."""

    FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.randn, torch.rand, torch.full}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self.FACTORIES:
            if "size" in kwargs:
                dims = kwargs["size"]
            elif func is torch.full or (len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size))):
                dims = args[0] if args else ()
            else:
                dims = args
            try:
                shape = [int(d) for d in dims]
            except (TypeError, ValueError):
                shape = []
            n = 1
            for d in shape:
                n *= d
            if len(shape) >= 2 and n >= 1 << 20:
                kwargs["device"] = "meta"
        return func(*args, **kwargs)


def materialize_on_card(model):
    """Each meta parameter becomes one uninitialized tensor on the card,
    a parameter shared by two modules (the tied text weights) one tensor
    for both; then the rest (vectors, buffers) moves there. Returns how
    many tensors were made."""
    made = {}
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None and p.is_meta:
                q = made.get(id(p))
                if q is None:
                    q = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device="cuda"),
                                           requires_grad=p.requires_grad)
                    made[id(p)] = q
                mod._parameters[name] = q
    model.to("cuda")
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError(f"still on the meta device: {left[:3]}")
    return len(made)


def fill_on_card(model, std):
    """Random weights on the GPU: every matrix (embeddings, projections,
    the experts' 3-D stacks) N(0, std) from a fixed seed; vectors keep their
    constructor's values, and any that came out non-finite (memory never
    written) are set to zero. Returns (matrices, vectors, vectors zeroed)."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    seen, mats, vecs, zeroed = set(), 0, 0, 0
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.data_ptr() in seen:
                continue
            seen.add(p.data_ptr())
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=gen)
                mats += 1
            else:
                vecs += 1
                if not torch.isfinite(p).all():
                    p.zero_()
                    zeroed += 1
        for _, b in model.named_buffers():  # rotary tables etc. are computed, not random; only check them
            if b.is_floating_point() and not torch.isfinite(b).all():
                raise SystemExit("peer: FAILED: a buffer is not finite after the build")
    return mats, vecs, zeroed


def build(tf):
    # transformers 5.17 wants a vision_config (make_dgemma_golden.py
    # settled it), so that way first. The encoder's text weights are the
    # decoder's (tied objects: 84 / 0 in the golden data's VERSIONS.json),
    # but tied only after both are built: about 100 GB at the peak on the
    # card, which an 80 GB H100 does not hold (session 21). So the matrices
    # are constructed on the meta device (MetaMatrices), tied, made on the
    # card once each (materialize_on_card) and drawn there (fill_on_card).
    # A failed try keeps only its message: the exception's frames would
    # hold the half-built model.
    last = None
    for vision in (VISION, None):
        for attn in ("sdpa", "eager"):
            model = None
            try:
                cfg = tf.DiffusionGemmaConfig.from_dict(json.loads(json.dumps(root_config(vision))))
                t0 = time.perf_counter()
                with torch.device("cpu"), MetaMatrices(), MetaFactories():
                    model = tf.DiffusionGemmaForBlockDiffusion._from_config(cfg, attn_implementation=attn,
                                                                             dtype=torch.bfloat16)
                model.tie_weights()
                t1 = time.perf_counter()
                n_made = materialize_on_card(model)
                model.tie_weights()
                std = getattr(cfg.text_config, "initializer_range", None) or 0.02
                mats, vecs, zeroed = fill_on_card(model, std)
                torch.cuda.synchronize()
                print(f"peer: built with vision_config={'small' if vision else None}, attention {attn}: "
                      f"constructed {t1 - t0:.0f} s, {n_made} matrices made, drawn and the rest moved on the card "
                      f"{time.perf_counter() - t1:.0f} s ({mats} matrices N(0, {std}), {vecs} vectors as "
                      f"constructed, {zeroed} of them zeroed)", flush=True)
                try:  # a diagnostic: the build stands without it
                    dec = dict(model.model.decoder.named_parameters())
                    enc = model.model.encoder.language_model.named_parameters()
                    pairs = [(n, p) for n, p in enc if n in dec]
                    shared = sum(p.data_ptr() == dec[n].data_ptr() for n, p in pairs)
                    print(f"peer: encoder text weights shared with the decoder's: {shared} of {len(pairs)}",
                          flush=True)
                except Exception as e:  # noqa: BLE001
                    print(f"peer: tie check skipped: {type(e).__name__}: {e}"[:300], flush=True)
                return model.eval()
            except Exception as e:  # noqa: BLE001 - report, try the next way
                last = f"{type(e).__name__}: {e}"[:400]
                print(f"peer: building (vision {vision is not None}, {attn}) failed: {last}", flush=True)
            model = None
            gc.collect()
            torch.cuda.empty_cache()
    raise SystemExit(f"peer: FAILED: could not build DiffusionGemmaForBlockDiffusion: {last}")


def prompt_ids(text):
    return [2] + [3 + b for b in text.encode("utf-8")]


def main():
    import transformers as tf
    import importlib
    gen = None
    for name in ("transformers.models.diffusion_gemma.generation_diffusion_gemma",
                 "transformers.models.diffusion_gemma.modeling_diffusion_gemma"):
        try:
            mod = importlib.import_module(name)
            if hasattr(mod, "EntropyBoundSampler"):
                gen = mod
                break
        except ImportError:
            pass
    prompts = []
    with open(args.prompts) as f:
        for line in f:
            if line.strip():
                prompts.append(json.loads(line)["prompt"])
    prompts = prompts[:args.limit]
    print(f"peer: torch {torch.__version__}, transformers {tf.__version__}, {torch.cuda.get_device_name(0)}",
          flush=True)
    model = build(tf)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"peer: {n_params / 1e9:.2f} G parameters on the GPU, {torch.cuda.memory_allocated() / 1e9:.1f} GB",
          flush=True)
    # steps: count the sampler's accept calls (one a denoising step) where it can be found
    counter = {"steps": 0}
    if gen is not None:
        S = gen.EntropyBoundSampler
        orig = S.accept_canvas

        def accept(self, *a, **k):
            counter["steps"] += 1
            return orig(self, *a, **k)

        S.accept_canvas = accept
    else:
        print("peer: EntropyBoundSampler not found: steps per canvas not counted", flush=True)

    def one(ids, max_new, steps):
        x = torch.tensor([ids], device="cuda")
        counter["steps"] = 0
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=x, max_new_tokens=max_new, max_denoising_steps=steps, pad_token_id=0,
                                 eos_token_id=EOS)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        seq = (out if isinstance(out, torch.Tensor) else out.sequences)[0, len(ids):].tolist()
        n = len(seq)
        for i, t in enumerate(seq):  # the answer: through the first EOS
            if t in EOS:
                n = i + 1
                break
        # canvases committed: up to ceil(max_new / 256), fewer after an EOS
        canvases = min(-(-max_new // 256), (n - 1) // 256 + 1) if n else 1
        return wall, n, canvases, counter["steps"]

    for max_new in [int(v) for v in args.lengths.split(",")]:
        for steps in [int(v) for v in args.steps.split(",")]:
            for p in prompts[:1]:  # warm-up
                one(prompt_ids(p), max_new, steps)
            tps, pps, outs, cans, stp = [], [], [], [], []
            for _ in range(args.runs):
                for p in prompts:
                    wall, n, canvases, s = one(prompt_ids(p), max_new, steps)
                    tps.append(n / wall)
                    pps.append(canvases * 256 / wall)
                    outs.append(n)
                    cans.append(canvases)
                    stp.append(s / canvases)
            # tok/s over the answer (through the first EOS), and over the
            # committed canvases' positions (what tokbench's output tokens count)
            print(f"peer dgemma-26b-a4b transformers generate() max_new_tokens={max_new} max_steps={steps} batch=1: "
                  f"{statistics.median(tps):.1f} tok/s answer, {statistics.median(pps):.1f} tok/s canvas positions "
                  f"(medians of {len(tps)}), answer tokens {statistics.median(outs):.0f}, canvases "
                  f"{statistics.median(cans):.0f}, steps/canvas {statistics.median(stp):.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
