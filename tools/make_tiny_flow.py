#!/usr/bin/env python3
"""make_tiny_flow.py — models/tiny-flow-random: a LangFlow network
(plugins/flow/flow_model.h) of random weights with small-flow's layout,
tokenizer and schedule but tiny dimensions (hidden 32, 2 blocks, 2 heads,
32 positions: about 90 k parameters, 180 kB), for tests that load a flow
model many times (tests/engine: oom_flow loads it once per allocation, as
oom_ar loads tiny-llama-random). Its text is noise; nothing scores it.

    python3 tools/make_tiny_flow.py models/small-flow models/tiny-flow-random

Deterministic (seed 20261206): the same files on every run. Only the
standard library: weights N(0, 0.02^2) rounded to bf16 (nearest even),
biases and norms as a fresh network has them (0 and 1), the schedule's
proposal.loc / proposal.scale (float32 scalars) copied from the source."""
import json
import random
import shutil
import struct
import sys
from pathlib import Path

HIDDEN, COND, FREQ, BLOCKS, HEADS, LENGTH, MLP_RATIO = 32, 16, 32, 2, 2, 32, 2


def bf16(x):
    """float -> bf16 bits, round to nearest even (finite inputs)."""
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_tiny_flow.py SOURCE_MODEL OUT_DIR")
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = json.loads((src / "config.json").read_text())
    vocab = cfg["vocab_size"]
    cfg.update(hidden_size=HIDDEN, cond_dim=COND, freq_embed_dim=FREQ, n_blocks=BLOCKS, n_heads=HEADS,
               model_length=LENGTH, mlp_ratio=MLP_RATIO)
    with open(src / "model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        schedule = {}
        for name in ("proposal.loc", "proposal.scale"):
            t = header[name]
            f.seek(base + t["data_offsets"][0])
            schedule[name] = f.read(t["data_offsets"][1] - t["data_offsets"][0])

    H, C, M = HIDDEN, COND, MLP_RATIO * HIDDEN
    shapes = {}  # name -> (shape, init: "w" random, "0" zeros, "1" ones)
    for b in range(BLOCKS):
        p = f"backbone.blocks.{b}."
        shapes.update({p + "adaLN_modulation.weight": ([6 * H, C], "w"), p + "adaLN_modulation.bias": ([6 * H], "0"),
                       p + "attn_qkv.weight": ([3 * H, H], "w"), p + "attn_out.weight": ([H, H], "w"),
                       p + "mlp.0.weight": ([M, H], "w"), p + "mlp.0.bias": ([M], "0"),
                       p + "mlp.2.weight": ([H, M], "w"), p + "mlp.2.bias": ([H], "0"),
                       p + "norm1.weight": ([H], "1"), p + "norm2.weight": ([H], "1")})
    p = "backbone.output_layer."
    shapes.update({p + "adaLN_modulation.weight": ([2 * H, C], "w"), p + "adaLN_modulation.bias": ([2 * H], "0"),
                   p + "linear.weight": ([vocab, H], "w"), p + "linear.bias": ([vocab], "0"),
                   p + "norm_final.weight": ([H], "1"),
                   "backbone.self_cond_proj.weight": ([H, 2 * H], "w"),
                   "backbone.sigma_map.mlp.0.weight": ([C, FREQ], "w"), "backbone.sigma_map.mlp.0.bias": ([C], "0"),
                   "backbone.sigma_map.mlp.2.weight": ([C, C], "w"), "backbone.sigma_map.mlp.2.bias": ([C], "0"),
                   "backbone.vocab_embed.embedding": ([vocab, H], "w")})

    rng = random.Random(20261206)
    blobs, head, off = [], {}, 0
    for name in sorted(shapes):
        shape, init = shapes[name]
        count = 1
        for d in shape:
            count *= d
        if init == "w":
            vals = [bf16(rng.gauss(0.0, 0.02)) for _ in range(count)]
        else:
            vals = [bf16(float(init))] * count
        data = struct.pack(f"<{count}H", *vals)
        head[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    for name, data in schedule.items():
        head[name] = {"dtype": "F32", "shape": [], "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    head["__metadata__"] = {"format": "pt", "made_by": "tools/make_tiny_flow.py"}
    hj = json.dumps(head, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    shutil.copyfile(src / "tokenizer.json", out / "tokenizer.json")


if __name__ == "__main__":
    main()
