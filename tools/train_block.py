#!/usr/bin/env python3
"""train_block.py — trains models/small-sdar, a block-diffusion LM in SDAR's
published layout (SDARForCausalLM: Qwen3 blocks with QK-norm, block_size,
mask_token_id), on the data, tokenizer, batches and token budget of the
shipped small AR and LLaDA models (tools/train_small.py: same text, same task
pool, same batch shapes, same optimizer and schedule), so that its accuracy
and speed at several thresholds sit beside theirs in the default suite.

On the GPU machine, with train-data/ carried (tools/train_small.sh makes it):

    python3 tools/train_block.py --data train-data --out OUT

writes OUT/small-sdar/{config.json, model.safetensors (bf16), tokenizer.json
(models/small-llama's), TRAINING.md}, OUT/block_summary.json and
OUT/sdar.json (the golden data of tests/test_small_models.c's SDAR part:
tests/data/golden-small/sdar.json).

Objective (block diffusion, as SDAR and BD3-LM train): a sequence is cut into
blocks of --block tokens counted from its own start (a text window's first
token, a task example's first prompt token); every block of every text row
and task example draws its own t ~ U(0, 1), p = (1 - 1e-3) t + 1e-3, and its
maskable tokens (a task example's 16-token answer region, every text token)
are replaced by the mask token with probability p. The network reads the
noisy copy and the clean copy side by side (2 x 256 positions, both at the
sequence's own positions): a noisy block attends to itself (bidirectionally)
and to the clean copy's earlier blocks; a clean block attends to the clean
copy's blocks up to its own (block-causal: what the exact KV cache holds at
inference). Loss: sum over masked noisy tokens of CE / p, over the maskable
tokens (LLaDA's weighting, per block).

Sampling is tokbench's (plugins/diffusion/block_sampler.c): the prompt's
whole blocks prefilled, then block by block SDAR's low-confidence remasking,
static (steps per block) or dynamic (every token above a threshold, at least
the static count), greedy, the mask token never proposed, EOS stops the
request after the block that holds it.
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_small as ts  # noqa: E402  (the data, the batches, the optimizer)

MASK = "<|mdm_mask|>"
HID, LAYERS, HEADS, HEAD_DIM, INTER, EPS, THETA = 256, 4, 4, 64, 704, 1e-6, 10000.0


def build(torch):
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            h = x.float()
            return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), -1)

    class Layer(nn.Module):
        """Qwen3's decoder layer (QK-norm on the head views, before RoPE)."""

        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(HID)
            self.q_proj = nn.Linear(HID, HEADS * HEAD_DIM, bias=False)
            self.k_proj = nn.Linear(HID, HEADS * HEAD_DIM, bias=False)
            self.v_proj = nn.Linear(HID, HEADS * HEAD_DIM, bias=False)
            self.o_proj = nn.Linear(HEADS * HEAD_DIM, HID, bias=False)
            self.q_norm = RMSNorm(HEAD_DIM)
            self.k_norm = RMSNorm(HEAD_DIM)
            self.post_attention_layernorm = RMSNorm(HID)
            self.gate_proj = nn.Linear(HID, INTER, bias=False)
            self.up_proj = nn.Linear(HID, INTER, bias=False)
            self.down_proj = nn.Linear(INTER, HID, bias=False)

        def forward(self, x, cos, sin, mask):
            B, T, _ = x.shape
            h = self.input_layernorm(x)
            q = self.q_norm(self.q_proj(h).view(B, T, HEADS, HEAD_DIM)).transpose(1, 2)
            k = self.k_norm(self.k_proj(h).view(B, T, HEADS, HEAD_DIM)).transpose(1, 2)
            v = self.v_proj(h).view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
            c, s = cos.to(q.dtype), sin.to(q.dtype)
            q, k = q * c + rot(q) * s, k * c + rot(k) * s
            o = F.scaled_dot_product_attention(q, k.to(v.dtype), v, attn_mask=mask)
            x = x + self.o_proj(o.transpose(1, 2).reshape(B, T, HEADS * HEAD_DIM))
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(ts.VOCAB, HID)
            self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])
            self.norm = RMSNorm(HID)
            self.lm_head = nn.Linear(HID, ts.VOCAB, bias=False)
            inv = 1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
            self.register_buffer("inv_freq", inv, persistent=False)

        def init_weights(self, seed):  # as train_small's models: N(0, 0.02), residual outputs scaled
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if "norm" in name:
                        p.fill_(1.0)
                    else:
                        s = 0.02 / math.sqrt(2 * LAYERS) if name.endswith(("o_proj.weight", "down_proj.weight")) \
                            else 0.02
                        p.copy_(torch.randn(p.shape, generator=g) * s)

        def forward(self, ids, pos, mask):
            """ids, pos [B, T]; mask [B, 1, T, T] bool (True: attend);
            logits [B, T, V] float32."""
            ang = pos.float()[..., None] * self.inv_freq
            emb = torch.cat((ang, ang), -1)[:, None]
            cos, sin = emb.cos(), emb.sin()
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = layer(x, cos, sin, mask)
            return self.lm_head(self.norm(x)).float()

        def hf_state(self):
            """transformers' Qwen3 tensor names (SDAR publishes these)."""
            out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight,
                   "lm_head.weight": self.lm_head.weight}
            for i, L in enumerate(self.layers):
                p = "model.layers.%d." % i
                out.update({p + "input_layernorm.weight": L.input_layernorm.weight,
                            p + "post_attention_layernorm.weight": L.post_attention_layernorm.weight,
                            p + "self_attn.q_proj.weight": L.q_proj.weight,
                            p + "self_attn.k_proj.weight": L.k_proj.weight,
                            p + "self_attn.v_proj.weight": L.v_proj.weight,
                            p + "self_attn.o_proj.weight": L.o_proj.weight,
                            p + "self_attn.q_norm.weight": L.q_norm.weight,
                            p + "self_attn.k_norm.weight": L.k_norm.weight,
                            p + "mlp.gate_proj.weight": L.gate_proj.weight,
                            p + "mlp.up_proj.weight": L.up_proj.weight,
                            p + "mlp.down_proj.weight": L.down_proj.weight})
            return out

    return Model


def local_positions(torch, seg):
    """Each position's offset from its segment's first position [B, T]."""
    B, T = seg.shape
    ar = torch.arange(T, device=seg.device).expand(B, T)
    start = torch.ones_like(seg, dtype=torch.bool)
    start[:, 1:] = seg[:, 1:] != seg[:, :-1]
    first = torch.where(start, ar, torch.zeros_like(ar)).cummax(1).values
    return ar - first


def block_loss(torch, model, ids, seg, dm, mask_id, gen, bs, eps=1e-3):
    """The objective of the module docstring."""
    import torch.nn.functional as F
    B, T = ids.shape
    lpos = local_positions(torch, seg)
    blk = lpos // bs
    nb = T // bs + 1
    t = torch.rand(B, ts.MAX_SEGS * nb, device=ids.device, generator=gen)
    p = ((1 - eps) * t + eps).gather(1, seg * nb + blk)
    masked = (torch.rand(B, T, device=ids.device, generator=gen) < p) & dm
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    # [noisy | clean]: query i, key j over 2T
    seg2, blk2 = torch.cat([seg, seg], 1), torch.cat([blk, blk], 1)
    half = torch.cat([torch.zeros(T, dtype=torch.bool, device=ids.device),
                      torch.ones(T, dtype=torch.bool, device=ids.device)])
    same = seg2[:, :, None] == seg2[:, None, :]
    bq, bk = blk2[:, :, None], blk2[:, None, :]
    hq, hk = half[None, :, None], half[None, None, :]
    allow = same & (((~hq) & (~hk) & (bk == bq)) | ((~hq) & hk & (bk < bq)) | (hq & hk & (bk <= bq)))
    logits = model(torch.cat([noisy, ids], 1), torch.cat([lpos, lpos], 1), allow[:, None])[:, :T]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1), reduction="none").view(B, T)
    return (ce * masked.float() / p).sum() / dm.sum()


def schedule(n, S):
    """tb_dllm_llada_schedule: n tokens over S steps, the remainder first."""
    return [n // S + (i < n % S) for i in range(S)]


def block_forward(torch, model, canvas, upto, bs):
    """Logits [upto, V] (float64) of canvas[:upto] under the block-causal
    mask: the exact cache of the earlier blocks, recomputed."""
    dev = model.inv_freq.device
    x = torch.tensor([canvas[:upto]], device=dev)
    pos = torch.arange(upto, device=dev)
    allow = (pos[None, :] // bs) <= (pos[:, None] // bs)
    return model(x, pos[None], allow[None, None])[0].double()


def sdar_generate(torch, model, prompt, gen_len, bs, steps, threshold, mask_id, eos, trace=None):
    """tokbench's block sampler (block_sampler.c) on one canvas: returns the
    final canvas and the forwards run (prefill and store forwards counted,
    as the engine counts them). threshold None: static."""
    P = len(prompt)
    G = P + gen_len
    L = (G + bs - 1) // bs * bs
    x = list(prompt) + [mask_id] * (L - P)
    sched = schedule(bs, steps)
    forwards = 1 if P // bs > 0 else 0  # the prompt's whole blocks
    for b0 in range(P // bs * bs, G, bs):
        b1 = b0 + bs
        step = 0
        while any(x[i] == mask_id for i in range(b0, b1)):
            lg = block_forward(torch, model, x, b1, bs)[b0:b1]
            forwards += 1
            lg[:, mask_id] = -math.inf
            pr = torch.softmax(lg, -1)
            conf, x0 = pr.max(-1)
            conf, x0 = conf.tolist(), x0.tolist()
            masked = [i for i in range(b0, b1) if x[i] == mask_id]
            want = sched[step] if step < steps else bs
            order = sorted(masked, key=lambda i: (-conf[i - b0], i))
            if threshold is not None and sum(conf[i - b0] > threshold for i in masked) >= want:
                pick = [i for i in masked if i == order[0] or conf[i - b0] > threshold]
            else:
                pick = order[:want]
            for i in pick:
                x[i] = x0[i - b0]
            step += 1
            if trace is not None:
                trace.append(list(x))
        if any(x[i] == eos for i in range(max(b0, P), min(b1, G))):
            x[b1:] = [eos] * (L - b1)
            return x, forwards
        if b1 < L:
            forwards += 1  # the store forward of the finished block
    return x, forwards


def main():
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="train-data")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", default=ts.REPO)
    ap.add_argument("--seed", type=int, default=ts.SEED)
    ap.add_argument("--steps", type=int, default=7200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--block", type=int, default=4, help="block_size (SDAR's published models use 4)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--task-pool-rows", type=int, default=160000)
    ap.add_argument("--time-budget", type=float, default=600, help="seconds of training at most")
    ap.add_argument("--eval-items", type=int, default=32, help="held-out items per task")
    ap.add_argument("--log-every", type=int, default=250)
    args = ap.parse_args()
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = args.device
    torch.manual_seed(args.seed)
    t_start = time.time()
    tok = Tokenizer.from_file(os.path.join(args.repo, "models", "small-llama", "tokenizer.json"))
    eos, mask_id = tok.token_to_id(ts.EOS), tok.token_to_id(MASK)
    if eos is None or mask_id is None:
        ts.die("the tokenizer lacks %s or %s" % (ts.EOS, MASK))
    docs = ts.read_text(args.data)
    train_docs, held_docs = ts.split_text(docs)
    stream = ts.build_text_stream(tok, train_docs, eos)
    pool = ts.build_task_pool(tok, args.task_pool_rows, args.seq, eos, args.seed)[:4]
    batches = ts.Batches(stream, pool, args.batch, args.seq, args.seed + 5, dev)
    Model = build(torch)
    model = Model()
    model.init_weights(args.seed + 3)
    model = model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    ts.log("block model: %d parameters; text stream %d tokens" % (n_params, len(stream)))
    opt = ts.make_optimizer(model, args)
    gen = torch.Generator(device=dev).manual_seed(args.seed + 31)
    losses, buf, t0 = [], [], time.time()
    steps_run = 0
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = ts.lr_at(step, args)
        ids, seg, ar, dm = batches.next()
        with ts.amp_ctx(dev == "cuda"):
            loss = block_loss(torch, model, ids, seg, dm, mask_id, gen, args.block)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        buf.append(loss.detach())
        steps_run = step + 1
        if steps_run % args.log_every == 0:
            vals = torch.stack(buf).float().cpu().tolist()
            buf = []
            losses.extend(vals)
            ts.log("block step %d/%d loss %.4f elapsed %.0fs" % (steps_run, args.steps, sum(vals) / len(vals),
                                                                time.time() - t0))
        if time.time() - t0 > args.time_budget:
            ts.log("time budget reached at step %d" % steps_run)
            break
    if buf:
        losses.extend(torch.stack(buf).float().cpu().tolist())
    wall = time.time() - t0
    model.eval()

    # export: bf16 weights in SDAR's (transformers Qwen3) names
    out = os.path.join(args.out, "small-sdar")
    os.makedirs(out, exist_ok=True)
    hf = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in model.hf_state().items()}
    save_file(hf, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["SDARForCausalLM"], "model_type": "sdar", "hidden_act": "silu", "hidden_size": HID,
           "intermediate_size": INTER, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
           "num_key_value_heads": HEADS, "head_dim": HEAD_DIM, "rms_norm_eps": EPS, "rope_theta": THETA,
           "rope_scaling": None, "max_position_embeddings": args.seq, "tie_word_embeddings": False,
           "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
           "vocab_size": ts.VOCAB, "bos_token_id": None, "eos_token_id": eos, "pad_token_id": eos,
           "mask_token_id": mask_id, "block_size": args.block, "torch_dtype": "bfloat16",
           "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig",
                        "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"}}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    tok.save(os.path.join(out, "tokenizer.json"))
    # evaluate what was exported (bf16 weights back in float32), float32 math
    model = model.float()
    with torch.no_grad():
        for k, p in model.hf_state().items():
            p.copy_(hf[k].float())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    items = []
    for t in ts.TASKS:
        items += ts.heldout_items(t, args.eval_items)
    configs = [("static", s, None) for s in (1, 2, 4)] + [("dynamic", 4, th) for th in (0.9, 0.7, 0.5)]
    acc, tpf = {}, {}
    with torch.no_grad():
        for kind, s, th in configs:
            name = "%s steps %d" % (kind, s) if th is None else "%s threshold %.1f" % (kind, th)
            right = {t: 0 for t in ts.TASKS}
            n_fw = n_tok = 0
            for it in items:
                ids = tok.encode(it["prompt"], add_special_tokens=False).ids
                canvas, fw = sdar_generate(torch, model, ids, ts.GEN_LEN, args.block, s, th, mask_id, eos)
                outt = canvas[len(ids):len(ids) + ts.GEN_LEN]
                if eos in outt:
                    outt = outt[:outt.index(eos)]
                n_fw += fw
                n_tok += len(outt) + 1
                right[it["tags"][0]] += int(ts.grade(it, tok.decode(outt).strip()))
            acc[name] = {t: right[t] / args.eval_items for t in ts.TASKS}
            tpf[name] = n_tok / n_fw
            ts.log("%s: %s; %.2f answer tokens per forward" % (name, json.dumps(acc[name]), tpf[name]))
        # golden data of tests/test_small_models.c (SDAR part)
        gold = {"rules": "tools/train_block.py: float32 on the %s, the bf16 weights as saved upcast to float32; "
                         "forward: logits of prompt + masks (to a whole block past the prompt) under the "
                         "block-causal mask; generate: sdar_generate (tokbench's block sampler), the final canvas"
                         % dev, "eos_id": eos, "mask_id": mask_id, "block": args.block, "forward": [],
                "generate": []}
        for prompt in ("a=3 b=7 c=1 d=4 ; b?", "pair kqz fwbl =", "37+58="):
            ids = tok.encode(prompt, add_special_tokens=False).ids
            L = (len(ids) + args.block - 1) // args.block * args.block + args.block
            canvas = ids + [mask_id] * (L - len(ids))
            lg = block_forward(torch, model, canvas, L, args.block)
            gold["forward"].append({"prompt": prompt, "input_ids": canvas,
                                    "logits": [ts.r7_list(r) for r in lg.float().cpu()]})
        for prompt, s, th in (("a=3 b=7 c=1 d=4 ; b?", 4, None), ("pair kqz fwbl =", 2, None),
                              ("37+58=", 4, 0.9), ("In the beginning", 4, None)):
            ids = tok.encode(prompt, add_special_tokens=False).ids
            canvas, fw = sdar_generate(torch, model, ids, ts.GEN_LEN, args.block, s, th, mask_id, eos)
            gold["generate"].append({"prompt": prompt, "ids": ids, "gen_length": ts.GEN_LEN, "steps": s,
                                     "threshold": th, "final": canvas, "forwards": fw,
                                     "text": tok.decode(canvas[len(ids):])})
        json.dump(gold, open(os.path.join(args.out, "sdar.json"), "w"))
    tail = losses[-max(1, len(losses) // 20):]
    summary = {"params": n_params, "steps": steps_run, "wall_s": round(wall, 1),
               "tokens": steps_run * args.batch * args.seq, "final_train_loss": round(sum(tail) / len(tail), 4),
               "loss_curve": [[i + 1, round(losses[i], 4)] for i in
                              sorted(set(range(0, len(losses), max(1, len(losses) // 20))) | {len(losses) - 1})],
               "accuracy_tasks_jsonl": acc, "answer_tokens_per_forward": tpf,
               "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
               "torch": torch.__version__, "total_s": round(time.time() - t_start, 1), "config": cfg,
               "recipe": {k: getattr(args, k) for k in ("lr", "steps", "batch", "seq", "block", "seed")}}
    json.dump(summary, open(os.path.join(args.out, "block_summary.json"), "w"), indent=1)
    ts.log("done: %s" % json.dumps({k: summary[k] for k in ("steps", "wall_s", "final_train_loss")}))
    np.random.seed(0)


if __name__ == "__main__":
    main()
