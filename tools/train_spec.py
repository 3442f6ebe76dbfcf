#!/usr/bin/env python3
"""train_spec.py — trains the three drafters of issue 40 on the data,
tokenizer, batches and optimizer of the shipped small models
(tools/train_small.py; models/small-llama/TRAINING.md has the data rules),
and measures their acceptance with tools/spec_eval.py:

  draft   models/small-llama-draft: a small autoregressive Llama drafter for
          models/small-llama (hidden 128, 2 layers, 2 heads of 64), trained
          exactly like small-llama (same batches in the same order, same
          next-token objective, same optimizer and schedule)
  self    models/small-sdar-self: SDAR's layout (as models/small-sdar), one
          set of weights trained on three objectives at once: next-token AR
          on the clean sequence under causal attention, self-drafting
          (anchor + k masks over the causal prefix), and SDAR's block
          diffusion
  dflash  models/small-llama-dflash: a DFlash drafter (tools/dflash_reference.py,
          the published layout) for models/small-llama, trained on the
          frozen target's hidden states

One command each, on the GPU machine (torch, tokenizers, safetensors,
transformers; no network), with train-data/kjv.txt and train-data/brown.txt
(tools/train_small.sh makes them):

    python3 tools/train_spec.py MODEL --data train-data --out OUT [--smoke]

writes OUT/<folder>/ (config.json, model.safetensors bf16, tokenizer.json
= models/small-llama's, TRAINING.md written from the run's own figures) and
OUT/<folder>.summary.json. --smoke: a few steps on a small slice, every
check run, output under OUT/smoke/ (a minute or so): shapes, finite losses,
gradients, the training forward against the inference path the acceptance
is measured with, the export reloaded. tools/train_spec.sh runs all three.

Checks in every run (a failure stops it with a message): the training
forward of a block equals the drafting path of spec_eval's measurement on
the same tokens (float32; so the objective trains what is measured); the
exported folder reloads to the same logits (transformers for the Llama
drafter, dflash_reference.load_drafter for DFlash, the published names for
SDAR); models/small-llama loads to the golden greedy output of
tests/data/golden-small/expected.json; speculative outputs equal the
target's greedy ones (spec_eval.measure).
"""

import argparse
import json
import math
import os
import platform
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import spec_eval as se  # noqa: E402
import train_small as ts  # noqa: E402

# the AR drafter: ~15% of small-llama's multiply-adds per token (the LM head,
# 128 x 1024, is a third of them)
DRAFT_CFG = dict(hidden=128, layers=2, heads=2, kv_heads=2, head_dim=64, inter=352, eps=1e-5,
                 theta=10000.0, max_pos=256, vocab=ts.VOCAB)
FOLDER = {"draft": "small-llama-draft", "self": "small-sdar-self", "dflash": "small-llama-dflash"}


def log(*a):
    print("[train_spec %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def die(msg):
    print("[train_spec] FATAL:", msg, flush=True)
    sys.exit(1)


def rel_err(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


# ------------------------------------------------------------------ setup --


def setup(args):
    """Device, seeds, tokenizer, text stream, task pool, batches, the eval
    prompts; smoke shrinks what is slow."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer
    if args.smoke:
        args.steps, args.batch, args.task_pool_rows = args.smoke_steps, 8, 600
        args.warmup, args.log_every, args.eval_per_task, args.eval_text = 5, 5, 2, 2
        args.val_windows = 4
        args.lossless_tolerance = 0.5       # barely trained models: near-ties are likelier
        args.out = os.path.join(args.out, "smoke")
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device != "cuda" and not args.smoke:
        log("WARNING: no GPU; a full run on the CPU takes hours")
    torch.manual_seed(args.seed)
    np.random.seed(args.seed % (2 ** 32))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tok_path = os.path.join(args.repo, "models", "small-llama", "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    eos, mask_id = tok.token_to_id(ts.EOS), tok.token_to_id(ts.MASK)
    if eos is None or mask_id is None or tok.get_vocab_size() != ts.VOCAB:
        die("%s: not small-llama's tokenizer (EOS %r, mask %r, vocab %d)"
            % (tok_path, eos, mask_id, tok.get_vocab_size()))
    docs = ts.read_text(args.data)
    train_docs, held_docs = ts.split_text(docs)
    stream = ts.build_text_stream(tok, train_docs, eos)
    val_stream = ts.build_text_stream(tok, held_docs, eos)
    pool = ts.build_task_pool(tok, args.task_pool_rows, args.seq, eos, args.seed)[:4]
    log("text stream %d tokens, held-out %d, task pool %d rows"
        % (len(stream), len(val_stream), len(pool[0])))
    # the eval prompts: suites/data/quick.jsonl (the default suite's)
    items = ts.read_jsonl(os.path.join(args.repo, "suites", "data", "quick.jsonl"))
    tasks = [it for it in items if it["tags"][0] in ts.TASKS]
    text = [it for it in items if it["tags"][0] not in ts.TASKS]
    if len(tasks) != 160 or len(text) != 16:
        die("suites/data/quick.jsonl: %d task items, %d text (want 160, 16)" % (len(tasks), len(text)))
    if args.eval_per_task < 32:
        tasks = [it for t in ts.TASKS for it in [x for x in tasks if x["tags"][0] == t][:args.eval_per_task]]
    text = text[:args.eval_text]
    X = {"tok": tok, "eos": eos, "mask_id": mask_id, "stream": stream, "val_stream": val_stream,
         "pool": pool, "tasks": tasks, "text": text, "dev": args.device,
         "device_name": torch.cuda.get_device_name(0) if args.device == "cuda" else
         (platform.processor() or "CPU"),
         "versions": ts.versions(), "kjv_sha256": ts.sha256_file(os.path.join(args.data, "kjv.txt")),
         "brown_sha256": ts.sha256_file(os.path.join(args.data, "brown.txt"))}
    X["batches"] = lambda: ts.Batches(stream, pool, args.batch, args.seq, args.seed + 5, args.device)
    X["prompts"] = [tok.encode(it["prompt"], add_special_tokens=False).ids for it in tasks + text]
    X["groups"] = ["tasks"] * len(tasks) + ["text"] * len(text)
    return X


def load_small_llama(args, X):
    """models/small-llama in train_small.py's Model (float32, frozen),
    checked against the golden greedy tokens of tests/test_small_models.c."""
    import torch
    Model = ts.build_model_classes()
    m = Model(ts.MODEL_CFG, causal=True)
    # transformers' name -> train_small's W name
    names = ts.mdg().hf_state_dict({k: k for k in m.to_W()}, {"n_layers": ts.MODEL_CFG["layers"]})
    st = ts.load_st(os.path.join(args.repo, "models", "small-llama", "model.safetensors"))
    if sorted(st) != sorted(names):
        die("models/small-llama: tensor names %r" % sorted(set(st) ^ set(names)))
    m.load_W({names[k]: v.float() for k, v in st.items()})
    m = m.float().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    # on the CPU, as the golden data was made
    gold = json.load(open(os.path.join(args.repo, "tests", "data", "golden-small", "expected.json")))
    with torch.no_grad():
        for g in gold["llama"]:
            s = list(g["ids"])
            for _ in range(len(g["greedy_new_ids"])):
                s.append(int(m(torch.tensor([s]))[0, -1].argmax()))
            if s[len(g["ids"]):] != g["greedy_new_ids"]:
                die("small-llama as loaded: greedy %r != golden %r for %r"
                    % (s[len(g["ids"]):], g["greedy_new_ids"], g["prompt"]))
    log("models/small-llama loaded; its golden greedy outputs reproduced")
    return m.to(X["dev"])


def causal_next_fn(logits_fn, dev):
    """spec_eval's target_next over a model's causal logits."""
    import torch

    def f(ids):
        with torch.no_grad():
            return logits_fn(torch.tensor([ids], device=dev))[0].float().argmax(-1).tolist()
    return f


# --------------------------------------------------------------- training --


def train_loop(name, model, loss_fn, args, X):
    """AdamW on model's parameters with train_small's schedule; loss_fn(batch,
    gen) -> (loss, {part: tensor}). After 40 steps the seconds per step are
    measured: when args.steps would overrun args.time_budget, fewer steps
    are run (the schedule follows the new count) and the record says so."""
    import torch
    dev = args.device
    opt = ts.make_optimizer(model, args)
    batches = X["batches"]()
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed + 17)
    planned = args.steps
    losses, parts, buf, pbuf = [], {}, [], {}
    t0 = time.time()
    t10 = None
    model.train()
    step = 0
    while step < args.steps:
        for g in opt.param_groups:
            g["lr"] = ts.lr_at(step, args)
        batch = batches.next()
        with ts.amp_ctx(dev == "cuda"):
            loss, part = loss_fn(batch, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            nog = [n for n, p in model.named_parameters() if p.requires_grad and
                   (p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0)]
            if nog:
                die("%s: no or non-finite gradient at step 1 for %s" % (name, nog[:6]))
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        buf.append(loss.detach())
        for k, v in part.items():
            pbuf.setdefault(k, []).append(v.detach())
        step += 1
        if step == 10:
            if dev == "cuda":
                torch.cuda.synchronize()
            t10 = time.time()
        if step == 40 and args.time_budget > 0:
            if dev == "cuda":
                torch.cuda.synchronize()
            per = (time.time() - t10) / 30
            log("%s: %.4f s/step -> %d steps need %.0f s" % (name, per, args.steps, per * args.steps))
            if per * args.steps > args.time_budget:
                args.steps = max(100, int(args.time_budget / per) // 100 * 100)
                log("WARNING: %s: over the time budget of %.0f s: %d steps instead of %d"
                    % (name, args.time_budget, args.steps, planned))
        if step % args.log_every == 0 or step == args.steps:
            vals = torch.stack(buf).float().cpu().tolist()
            buf = []
            if not all(math.isfinite(v) for v in vals):
                die("%s: non-finite loss near step %d: %r" % (name, step, vals[-5:]))
            losses.extend(vals)
            pm = {}
            for k, v in pbuf.items():
                pm[k] = sum(torch.stack(v).float().cpu().tolist()) / len(v)
                parts.setdefault(k, []).append([step, round(pm[k], 4)])
            pbuf = {}
            log("%s step %d/%d loss %.4f (%s) lr %.2e elapsed %.0fs"
                % (name, step, args.steps, sum(vals) / len(vals),
                   ", ".join("%s %.3f" % kv for kv in sorted(pm.items())), ts.lr_at(step - 1, args),
                   time.time() - t0))
    if dev == "cuda":
        torch.cuda.synchronize()
    wall = time.time() - t0
    model.eval()
    if args.smoke and len(losses) >= 10 and sum(losses[-5:]) >= sum(losses[:5]):
        die("%s: the loss did not fall in the smoke run: first %r, last %r" % (name, losses[:5], losses[-5:]))
    tail = losses[-max(1, len(losses) // 20):]
    idx = sorted(set(range(0, len(losses), max(1, len(losses) // 20))) | {len(losses) - 1})
    return {"steps": step, "planned_steps": planned, "wall_s": round(wall, 1),
            "tokens": step * args.batch * args.seq,
            "tokens_per_s": round(step * args.batch * args.seq / wall),
            "final_train_loss": round(sum(tail) / len(tail), 4),
            "loss_curve": [[i + 1, round(losses[i], 4)] for i in idx],
            "parts_curve": parts}


def val_ce(logits_fn, val_stream, T, dev, max_windows, batch=64):
    """Held-out text: next-token CE (nats/token) of a causal model."""
    import torch
    import torch.nn.functional as F
    n = min(len(val_stream) // T, max_windows)
    x = torch.as_tensor(val_stream[:n * T], dtype=torch.long, device=dev).view(n, T)
    tot = cnt = 0.0
    with torch.no_grad():
        for i in range(0, n, batch):
            ids = x[i:i + batch]
            lg = logits_fn(ids)[:, :-1].float()
            tot += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), ids[:, 1:].reshape(-1),
                                         reduction="sum"))
            cnt += ids[:, 1:].numel()
    return {"ar_ce": round(tot / cnt, 4), "tokens": int(n * T)}


def task_accuracy(items, outs, tok, eos):
    """{task: share right} for generated token lists (EOS cut)."""
    right, n = {}, {}
    for it, o in zip(items, outs):
        t = it["tags"][0]
        n[t] = n.get(t, 0) + 1
        right[t] = right.get(t, 0) + int(ts.grade(it, ts.answer_text(tok, list(o), eos)))
    acc = {t: right[t] / n[t] for t in n}
    acc["all"] = sum(right.values()) / max(1, sum(n.values()))
    return acc, n


def sample_anchors(valid, n, gen):
    """n anchor positions per row drawn uniformly among valid ones (without
    replacement) -> (anchors [B, n] long, keep [B, n] bool: False where the
    row had fewer than n)."""
    import torch
    r = torch.rand(valid.shape, device=valid.device, generator=gen)
    r = r.masked_fill(~valid, 2.0)
    idx = r.argsort(dim=1)[:, :n]
    keep = r.gather(1, idx) < 1.5
    return torch.where(keep, idx, torch.zeros_like(idx)), keep


def anchor_valid(ar, seg):
    """[B, T] bool: position L may anchor a block: L + 1 is a next-token
    target of the same sequence (text, or a task example up to its EOS)."""
    import torch
    v = torch.zeros_like(ar)
    v[:, :-1] = ar[:, 1:] & (seg[:, 1:] == seg[:, :-1])
    return v


def block_labels(ids, ar, seg, anchors, keep, width):
    """Labels [B, N, width] (row j: the token at anchor + j) and their
    weights: row >= 1, inside the row, a next-token target of the anchor's
    sequence, block kept."""
    import torch
    B, T = ids.shape
    j = torch.arange(width, device=ids.device)
    li = anchors[:, :, None] + j                              # [B, N, W]
    inside = li < T
    safe = li.clamp(max=T - 1).view(B, -1)
    lab = ids.gather(1, safe).view(li.shape)
    ok = ar.gather(1, safe).view(li.shape) & \
        (seg.gather(1, safe).view(li.shape) == seg.gather(1, anchors)[:, :, None])
    w = keep[:, :, None] & inside & ok & (j > 0)
    return lab, w


def save_bf16(sd, path):
    import torch
    from safetensors.torch import save_file
    t = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in sd.items()}
    save_file(t, path, metadata={"format": "pt"})
    return t


def copy_tokenizer(args, d):
    shutil.copyfile(os.path.join(args.repo, "models", "small-llama", "tokenizer.json"),
                    os.path.join(d, "tokenizer.json"))


def write_out(args, X, mode, d, S, md):
    with open(os.path.join(d, "TRAINING.md"), "w", encoding="utf-8") as f:
        f.write(md)
    ts.write_json(os.path.join(args.out, FOLDER[mode] + ".summary.json"), S)
    log("%s: %s" % (d, ", ".join("%s %d" % (f, os.path.getsize(os.path.join(d, f)))
                                 for f in sorted(os.listdir(d)))))


def common_summary(args, X, rec):
    return {"args": {k: v for k, v in vars(args).items() if k != "func"},
            "versions": X["versions"], "device_name": X["device_name"], "train": rec,
            "data": {"text_tokens": int(len(X["stream"])), "val_tokens": int(len(X["val_stream"])),
                     "task_pool_rows": int(len(X["pool"][0])), "kjv_sha256": X["kjv_sha256"],
                     "brown_sha256": X["brown_sha256"]}}


# ------------------------------------------------------------ AR drafter --


def cmd_draft(args):
    import torch
    X = setup(args)
    dev = X["dev"]
    target = load_small_llama(args, X)
    Model = ts.build_model_classes()
    model = Model(DRAFT_CFG, causal=True)
    model.init_weights(args.seed)
    model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log("AR drafter: %d parameters" % n_params)

    def loss_fn(batch, gen):
        ids, seg, ar, dm = batch
        loss = ts.ar_loss(model, ids, seg, ar)
        return loss, {"ar": loss}

    rec = train_loop("draft", model, loss_fn, args, X)
    # export: small-llama's config with the drafter's sizes, transformers' names
    d = os.path.join(args.out, FOLDER["draft"])
    os.makedirs(d, exist_ok=True)
    tpl = json.load(open(os.path.join(args.repo, "models", "small-llama", "config.json")))
    c = DRAFT_CFG
    tpl.update({"hidden_size": c["hidden"], "intermediate_size": c["inter"],
                "num_attention_heads": c["heads"], "num_hidden_layers": c["layers"],
                "num_key_value_heads": c["kv_heads"], "head_dim": c["head_dim"]})
    ts.write_json(os.path.join(d, "config.json"), tpl)
    shutil.copyfile(os.path.join(args.repo, "models", "small-llama", "generation_config.json"),
                    os.path.join(d, "generation_config.json"))
    copy_tokenizer(args, d)
    W = model.to_W()
    saved = save_bf16(ts.mdg().hf_state_dict(W, {"n_layers": c["layers"]}), os.path.join(d, "model.safetensors"))
    model.load_W({k: v.to(torch.bfloat16).float() for k, v in W.items()})   # what was shipped
    model.float().eval()
    # the folder through transformers == our forward
    from transformers import LlamaForCausalLM
    try:
        hf = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        hf = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    hf = hf.to(dev).eval()
    errs = []
    with torch.no_grad():
        for p in X["prompts"][:3] + [X["val_stream"][:200].tolist()]:
            x = torch.tensor([p], device=dev)
            errs.append(rel_err(model(x), hf(input_ids=x).logits))
    if max(errs) > 1e-4:
        die("AR drafter export: transformers' logits differ by %g" % max(errs))
    log("AR drafter export reloads through transformers (max rel err %.2e, %d tensors)"
        % (max(errs), len(saved)))

    # evaluation: the drafter alone (greedy tasks, held-out text), then speculation
    ev = eval_ar_alone(args, X, model)
    tnext = causal_next_fn(target, dev)

    def draft(s, k):
        out = []
        with torch.no_grad():
            x = torch.tensor([s], device=dev)
            for _ in range(k):
                t = model(x)[0, -1].float().argmax()
                out.append(int(t))
                x = torch.cat([x, t.view(1, 1)], dim=1)
        return out

    spec, ref = se.measure(tnext, draft, X["prompts"], args.ks or [3, 7], ts.GEN_LEN, X["eos"],
                           X["groups"], tolerance=args.lossless_tolerance)
    tacc, tn = task_accuracy(X["tasks"], ref[:len(X["tasks"])], X["tok"], X["eos"])
    for k in sorted(spec):
        log("k=%d: %s" % (k, json.dumps(spec[k]["all"])))
    S = common_summary(args, X, rec)
    S.update({"n_params": n_params, "drafter": ev, "spec": spec, "target_accuracy": tacc,
              "n_per_task": tn, "export_rel_err": max(errs)})
    write_out(args, X, "draft", d, S, md_draft(args, S))


def eval_ar_alone(args, X, model):
    """A causal model on its own: greedy task accuracy, held-out text CE."""
    outs = ts.ar_greedy(model, X["prompts"][:len(X["tasks"])], ts.GEN_LEN, X["eos"], X["dev"])
    acc, n = task_accuracy(X["tasks"], outs, X["tok"], X["eos"])
    val = val_ce(model, X["val_stream"], args.seq, X["dev"], args.val_windows)
    log("alone: accuracy %s; held-out text CE %.4f" % (json.dumps(acc), val["ar_ce"]))
    return {"accuracy": acc, "n": n, "val": val}


# ------------------------------------------------------- self-speculation --


def self_inputs(torch, ids, seg, ar, dm, args, gen, mask_id):
    """One batch of the self-speculative objective (see md_self): the joint
    input [clean T | noisy T | N draft blocks of W], its positions, mask
    and the loss weights."""
    import train_block as tb
    B, T = ids.shape
    dev = ids.device
    bs, N, W, eps = args.block, args.anchors, args.draft_width, 1e-3
    lpos = tb.local_positions(torch, seg)
    blk = lpos // bs
    causal_row = torch.rand(B, device=dev, generator=gen) >= args.bc_frac          # [B]
    # SDAR's noisy copy: per block t ~ U(0,1), p = (1-eps) t + eps
    nb = T // bs + 1
    t = torch.rand(B, ts.MAX_SEGS * nb, device=dev, generator=gen)
    p = ((1 - eps) * t + eps).gather(1, seg * nb + blk)
    masked = (torch.rand(B, T, device=dev, generator=gen) < p) & dm
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    # draft blocks: anchors on causal rows, k = 3 or 7 (width 4 or 8 of W)
    valid = anchor_valid(ar, seg) & causal_row[:, None]
    anchors, keep = sample_anchors(valid, N, gen)
    width = torch.where(torch.rand(B, N, device=dev, generator=gen) < 0.5,
                        torch.full((B, N), 4, device=dev, dtype=torch.long),
                        torch.full((B, N), W, device=dev, dtype=torch.long))
    return joint(torch, ids, seg, lpos, blk, causal_row, noisy, anchors, keep, width, W, mask_id), \
        {"masked": masked, "p": p, "causal_row": causal_row, "anchors": anchors, "keep": keep,
         "width": width}


def joint(torch, ids, seg, lpos, blk, causal_row, noisy, anchors, keep, width, W, mask_id):
    """(input ids [B, 2T + N W], positions, mask [B, 1, Q, Q] bool).
    clean rows: causal (causal_row) or block-causal, clean keys only;
    noisy rows: own block of the noisy copy + the clean copy's earlier blocks;
    draft rows of block b (anchor L, width w): clean keys < L of L's
    sequence + the block's first w rows; rows >= w (padding) see themselves."""
    B, T = ids.shape
    N = anchors.shape[1]
    dev = ids.device
    Q = 2 * T + N * W
    d_ids = torch.full((B, N, W), mask_id, dtype=torch.long, device=dev)
    d_ids[:, :, 0] = torch.where(keep, ids.gather(1, anchors), torch.full_like(anchors, mask_id))
    r = torch.arange(W, device=dev)
    d_pos = lpos.gather(1, anchors)[:, :, None] + r                       # [B, N, W]
    x = torch.cat([ids, noisy, d_ids.view(B, -1)], 1)
    pos = torch.cat([lpos, lpos, d_pos.view(B, -1)], 1)
    m = torch.zeros(B, Q, Q, dtype=torch.bool, device=dev)
    same = seg[:, :, None] == seg[:, None, :]
    ti = torch.arange(T, device=dev)
    causal = (ti[None, :] <= ti[:, None])[None]
    bq, bk = blk[:, :, None], blk[:, None, :]
    m[:, :T, :T] = same & torch.where(causal_row[:, None, None], causal, bk <= bq)
    m[:, T:2 * T, :T] = same & (bk < bq)
    m[:, T:2 * T, T:2 * T] = same & (bk == bq)
    # draft rows
    aq = anchors.repeat_interleave(W, dim=1)                              # [B, N W]
    sq = seg.gather(1, anchors).repeat_interleave(W, dim=1)
    kq = keep.repeat_interleave(W, dim=1)
    m[:, 2 * T:, :T] = kq[:, :, None] & (seg[:, None, :] == sq[:, :, None]) & (ti[None, None, :] < aq[:, :, None])
    bid = torch.arange(N * W, device=dev) // W
    row = torch.arange(N * W, device=dev) % W
    wq = width.repeat_interleave(W, dim=1)                                # [B, N W]
    sameb = (bid[:, None] == bid[None, :])[None]
    live_q = row[None, :] < wq                                            # [B, N W]
    m[:, 2 * T:, 2 * T:] = sameb & ((live_q[:, :, None] & (row[None, None, :] < wq[:, :, None])) |
                                    (row[:, None] == row[None, :])[None])
    return x, pos, m[:, None]


def self_loss(torch, model, batch, args, gen, mask_id):
    import torch.nn.functional as F
    ids, seg, ar, dm = batch
    B, T = ids.shape
    (x, pos, m), aux = self_inputs(torch, ids, seg, ar, dm, args, gen, mask_id)
    logits = model(x, pos, m)                                             # [B, Q, V] float32
    V = logits.shape[-1]
    W = args.draft_width
    # AR: clean copy, causal rows
    wa = (ar[:, 1:] & aux["causal_row"][:, None]).float()
    ce = F.cross_entropy(logits[:, :T - 1].reshape(-1, V), ids[:, 1:].reshape(-1),
                         reduction="none").view(B, T - 1)
    l_ar = (ce * wa).sum() / wa.sum().clamp_min(1)
    # block diffusion: noisy copy (SDAR's weighting)
    ce = F.cross_entropy(logits[:, T:2 * T].reshape(-1, V), ids.reshape(-1),
                         reduction="none").view(B, T)
    l_bd = (ce * aux["masked"].float() / aux["p"]).sum() / dm.sum().clamp_min(1)
    # self-drafting: rows 1..w-1 of each block
    lab, w = block_labels(ids, ar, seg, aux["anchors"], aux["keep"], W)
    w = w & (torch.arange(W, device=ids.device)[None, None, :] < aux["width"][:, :, None])
    ce = F.cross_entropy(logits[:, 2 * T:].reshape(-1, V), lab.reshape(-1),
                         reduction="none").view(lab.shape)
    wf = w.float()
    l_dr = (ce * wf).sum() / wf.sum().clamp_min(1)
    return l_ar + l_bd + l_dr, {"ar": l_ar, "diffusion": l_bd, "draft": l_dr}


def self_causal_logits(torch, model, ids):
    """ids [B, n] -> causal logits [B, n, V]."""
    n = ids.shape[1]
    pos = torch.arange(n, device=ids.device)
    allow = pos[None, :] <= pos[:, None]
    return model(ids, pos[None].expand(ids.shape[0], n), allow[None, None])


def self_draft_logits(torch, model, s, k, mask_id):
    """The drafting forward of spec_eval's measurement: S[:-1] causal (the
    prefix's cache), the block [S[-1], mask x k] at L = len(S) - 1 seeing
    the prefix and itself -> logits [k + 1, V] of the block rows."""
    dev = model.inv_freq.device
    L = len(s) - 1
    n = L + 1 + k
    x = torch.tensor([list(s) + [mask_id] * k], device=dev)
    i = torch.arange(n, device=dev)
    q, kk = i[:, None], i[None, :]
    allow = torch.where(q < L, kk <= q, (kk < L) | (kk >= L))
    return model(x, i[None], allow[None, None])[0, L:]


def cmd_self(args):
    import torch
    import train_block as tb
    X = setup(args)
    dev, mask_id, eos = X["dev"], X["mask_id"], X["eos"]
    tpl = json.load(open(os.path.join(args.repo, "models", "small-sdar", "config.json")))
    want = {"hidden_size": tb.HID, "num_hidden_layers": tb.LAYERS, "num_attention_heads": tb.HEADS,
            "head_dim": tb.HEAD_DIM, "intermediate_size": tb.INTER, "rms_norm_eps": tb.EPS,
            "mask_token_id": mask_id, "eos_token_id": eos, "block_size": args.block}
    bad = {k: (tpl.get(k), v) for k, v in want.items() if tpl.get(k) != v}
    if bad:
        die("models/small-sdar/config.json vs train_block.py's model: %r" % bad)
    Model = tb.build(torch)
    model = Model()
    model.init_weights(args.seed + 3)          # small-sdar's initial weights
    model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log("self-speculative SDAR model: %d parameters" % n_params)
    check_self(torch, model, X, args, "initial weights")

    def loss_fn(batch, gen):
        return self_loss(torch, model, batch, args, gen, mask_id)

    rec = train_loop("self", model, loss_fn, args, X)
    d = os.path.join(args.out, FOLDER["self"])
    os.makedirs(d, exist_ok=True)
    saved = save_bf16(model.hf_state(), os.path.join(d, "model.safetensors"))
    ts.write_json(os.path.join(d, "config.json"), tpl)
    copy_tokenizer(args, d)
    model = model.float()
    st = ts.load_st(os.path.join(d, "model.safetensors"))
    if sorted(st) != sorted(model.hf_state()):
        die("self export: tensor names differ")
    with torch.no_grad():
        for k, p in model.hf_state().items():
            p.copy_(st[k].float())                  # evaluate what was shipped
    model.eval()
    log("self export: %d tensors in transformers' Qwen3 names" % len(saved))
    check_self(torch, model, X, args, "exported weights")

    def tlog(ids):
        return self_causal_logits(torch, model, ids)

    tnext = causal_next_fn(tlog, dev)

    def draft(s, k):
        with torch.no_grad():
            return self_draft_logits(torch, model, s, k, mask_id)[1:].argmax(-1).tolist()

    spec, ref = se.measure(tnext, draft, X["prompts"], args.ks or [3, 7], ts.GEN_LEN, eos, X["groups"],
                           tolerance=args.lossless_tolerance)
    for k in sorted(spec):
        log("k=%d: %s" % (k, json.dumps(spec[k]["all"])))
    ar_acc, n = task_accuracy(X["tasks"], ref[:len(X["tasks"])], X["tok"], eos)
    val = val_ce(tlog, X["val_stream"], args.seq, dev, args.val_windows)
    # the diffusion backend's block sampler (train_block.sdar_generate = tokbench's)
    bd = {}
    with torch.no_grad():
        for name, steps, th in (("static steps 4", 4, None), ("dynamic threshold 0.9", 4, 0.9)):
            outs, n_fw, n_tok = [], 0, 0
            for p in X["prompts"][:len(X["tasks"])]:
                canvas, fw = tb.sdar_generate(torch, model, p, ts.GEN_LEN, args.block, steps, th,
                                              mask_id, eos)
                o = canvas[len(p):len(p) + ts.GEN_LEN]
                if eos in o:
                    o = o[:o.index(eos)]
                outs.append(o)
                n_fw += fw
                n_tok += len(o) + 1
            acc, _ = task_accuracy(X["tasks"], outs, X["tok"], eos)
            bd[name] = {"accuracy": acc, "answer_tokens_per_forward": round(n_tok / max(1, n_fw), 4)}
            log("block sampler %s: %s" % (name, json.dumps(bd[name])))
    log("AR greedy accuracy %s; held-out text CE %.4f" % (json.dumps(ar_acc), val["ar_ce"]))
    S = common_summary(args, X, rec)
    S.update({"n_params": n_params, "spec": spec, "ar_accuracy": ar_acc, "n_per_task": n, "val": val,
              "block_sampler": bd, "config": tpl})
    write_out(args, X, "self", d, S, md_self(args, S))


def check_self(torch, model, X, args, what):
    """The training forward (joint) on one text row with one anchor per
    width equals the measured paths: clean rows = causal logits, draft rows
    = self_draft_logits (float32)."""
    was = model.training
    model.eval()
    b = X["batches"]().next()
    ids, seg = b[0][:1], b[1][:1]                      # a text row: one segment
    T = ids.shape[1]
    dev = ids.device
    L = T // 2
    W = args.draft_width
    anchors = torch.tensor([[L, L + 10]], device=dev)
    keep = torch.tensor([[True, True]], device=dev)
    width = torch.tensor([[W, 4]], device=dev)
    lpos = torch.arange(T, device=dev)[None]
    blk = lpos // args.block
    with torch.no_grad():
        x, pos, m = joint(torch, ids, seg, lpos, blk, torch.tensor([True], device=dev), ids.clone(),
                          anchors, keep, width, W, X["mask_id"])
        lg = model(x, pos, m)[0]
        e1 = rel_err(lg[:T], self_causal_logits(torch, model, ids)[0])
        s = ids[0, :L + 1].tolist()
        e2 = rel_err(lg[2 * T:2 * T + W], self_draft_logits(torch, model, s, W - 1, X["mask_id"]))
        s = ids[0, :L + 11].tolist()
        e3 = rel_err(lg[2 * T + W:2 * T + W + 4], self_draft_logits(torch, model, s, 3, X["mask_id"]))
    if max(e1, e2, e3) > 1e-4:
        die("self (%s): the training forward differs from the measured paths: clean %.3g, "
            "draft k=%d %.3g, k=3 %.3g" % (what, e1, W - 1, e2, e3))
    log("self (%s): training forward == measured paths (rel err %.1e %.1e %.1e)" % (what, e1, e2, e3))
    model.train(was)


# ----------------------------------------------------------------- DFlash --


def target_states(torch, tgt, ids, seg, layer_ids):
    """Raw drafter features [B, T, len(layer_ids) x hidden] of small-llama
    (dflash_reference.target_features over transformers' hidden_states
    numbering: index 0 the embeddings, i + 1 layer i's output); seg: packed
    rows' segments (None: one sequence, causal)."""
    B, T = ids.shape
    pos = torch.arange(T, device=ids.device, dtype=torch.float32)
    ang = pos[:, None] * tgt.inv_freq[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = None
    if seg is not None:
        same = seg[:, :, None] == seg[:, None, :]
        mask = (same & torch.ones(T, T, dtype=torch.bool, device=ids.device).tril())[:, None]
    x = tgt.embed(ids)
    hs = [x]
    for layer in tgt.layers:
        x = layer(x, cos, sin, mask, True)
        hs.append(x)
    import dflash_reference as dr
    return dr.target_features(hs, layer_ids)


def dflash_forward(torch, tgt, d, ids, seg, anchors, keep, bs, mask_id):
    """Training forward: N blocks per row [anchor, mask x (bs-1)] at
    positions anchor.., each seeing the target features of its sequence's
    positions < anchor and its whole block -> logits [B, N, bs, V]."""
    B, T = ids.shape
    N = anchors.shape[1]
    dev = ids.device
    with torch.no_grad():
        feats = target_states(torch, tgt, ids, seg, d.target_layer_ids)
    blk = torch.full((B, N, bs), mask_id, dtype=torch.long, device=dev)
    blk[:, :, 0] = torch.where(keep, ids.gather(1, anchors), torch.full_like(anchors, mask_id))
    r = torch.arange(bs, device=dev)
    pos = torch.cat([torch.arange(T, device=dev)[None].expand(B, T),
                     (anchors[:, :, None] + r).view(B, -1)], 1)
    aq = anchors.repeat_interleave(bs, dim=1)
    sq = seg.gather(1, anchors).repeat_interleave(bs, dim=1)
    kq = keep.repeat_interleave(bs, dim=1)
    ti = torch.arange(T, device=dev)
    ctx = kq[:, :, None] & (seg[:, None, :] == sq[:, :, None]) & (ti[None, None, :] < aq[:, :, None])
    bid = torch.arange(N * bs, device=dev) // bs
    own = (bid[:, None] == bid[None, :])[None].expand(B, -1, -1)
    m = torch.cat([ctx, own], dim=2)                                       # [B, N bs, T + N bs]
    logits = d(feats, blk.view(B, -1), pos, attn_mask=m)
    return logits.view(B, N, bs, -1)


def dflash_draft_logits(torch, tgt, d, s, k, mask_id):
    """The measured drafting path (upstream's step without a cache):
    features of S[:-1], block [S[-1], mask x k] at L = len(S) - 1, no mask
    -> logits [k + 1, V]."""
    dev = tgt.inv_freq.device
    L = len(s) - 1
    feats = target_states(torch, tgt, torch.tensor([list(s[:-1])], device=dev), None,
                             d.target_layer_ids)
    blk = torch.tensor([[s[-1]] + [mask_id] * k], device=dev)
    pos = torch.arange(L + 1 + k, device=dev)
    return d(feats, blk, pos)[0]


def cmd_dflash(args):
    import torch
    import torch.nn.functional as F
    import dflash_reference as dr
    X = setup(args)
    dev, mask_id, eos = X["dev"], X["mask_id"], X["eos"]
    tgt = load_small_llama(args, X)
    tcfg = json.load(open(os.path.join(args.repo, "models", "small-llama", "config.json")))
    layer_ids = [int(v) for v in args.target_layers.split(",")]
    cfg = dr.make_config(tcfg, n_layers=args.dflash_layers, target_layer_ids=layer_ids,
                         block_size=args.dflash_block, mask_token_id=mask_id, rms_norm_eps=1e-6)
    cfg["dtype"] = "bfloat16"
    cfg["eos_token_id"] = eos
    cfg["bos_token_id"] = None
    d = dr.DFlashDrafter(cfg)
    init_drafter(torch, d, args.seed + 7)
    d = d.to(dev)
    d.bind(tgt.embed.weight, tgt.lm_head.weight)
    n_params = sum(p.numel() for p in d.parameters())
    log("DFlash drafter: %d parameters (the target's embedding and LM head shared, frozen); "
        "target layers %r, block %d" % (n_params, d.target_layer_ids, d.block_size))
    check_dflash(torch, tgt, d, X, args, "initial weights")
    bs, gamma = d.block_size, args.gamma
    decay = torch.exp(-(torch.arange(bs, device=dev) - 1).clamp(min=0).float() / gamma)

    def loss_fn(batch, gen):
        ids, seg, ar, dm = batch
        anchors, keep = sample_anchors(anchor_valid(ar, seg), args.dflash_anchors, gen)
        lg = dflash_forward(torch, tgt, d, ids, seg, anchors, keep, bs, mask_id).float()
        lab, w = block_labels(ids, ar, seg, anchors, keep, bs)
        ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), lab.reshape(-1), reduction="none").view(lab.shape)
        wt = w.float() * decay
        loss = (ce * wt).sum() / wt.sum().clamp_min(1e-6)
        with torch.no_grad():
            acc1 = ((lg[:, :, 1].argmax(-1) == lab[:, :, 1]).float() * w[:, :, 1].float()).sum() / \
                w[:, :, 1].float().sum().clamp_min(1)
        return loss, {"dflash": loss, "top1_row1": acc1}

    rec = train_loop("dflash", d, loss_fn, args, X)
    out = os.path.join(args.out, FOLDER["dflash"])
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1, sort_keys=True)
        f.write("\n")
    saved = save_bf16(d.state_dict(), os.path.join(out, "model.safetensors"))
    copy_tokenizer(args, out)
    d = dr.load_drafter(out).float().to(dev).eval()          # what was shipped
    d.bind(tgt.embed.weight, tgt.lm_head.weight)
    log("DFlash export: %d tensors (%s), reloaded by dflash_reference.load_drafter"
        % (len(saved), ", ".join(sorted(saved)[:4]) + ", ..."))
    check_dflash(torch, tgt, d, X, args, "exported weights")
    tnext = causal_next_fn(tgt, dev)

    def draft(s, k):
        with torch.no_grad():
            return dflash_draft_logits(torch, tgt, d, s, k, mask_id)[1:].argmax(-1).tolist()

    ks = args.ks or [bs - 1, 7, 3]
    spec, ref = se.measure(tnext, draft, X["prompts"], ks, ts.GEN_LEN, eos, X["groups"],
                           tolerance=args.lossless_tolerance)
    for k in sorted(spec):
        log("k=%d: %s" % (k, json.dumps(spec[k]["all"])))
    tacc, n = task_accuracy(X["tasks"], ref[:len(X["tasks"])], X["tok"], eos)
    S = common_summary(args, X, rec)
    S.update({"n_params": n_params, "spec": spec, "target_accuracy": tacc, "n_per_task": n,
              "config": cfg})
    write_out(args, X, "dflash", out, S, md_dflash(args, S))


def init_drafter(torch, d, seed):
    """N(0, 0.02), residual outputs / sqrt(2 layers), norms 1 (as the other
    small models)."""
    g = torch.Generator().manual_seed(seed)
    n = len(d.layers)
    with torch.no_grad():
        for name, p in sorted(d.named_parameters()):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                s = 0.02 / math.sqrt(2 * n) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * s)


def check_dflash(torch, tgt, d, X, args, what):
    """Training forward (two blocks of one text row, float32) == the
    measured path, and the target frozen."""
    if any(p.requires_grad for p in tgt.parameters()):
        die("dflash: the target is not frozen")
    was = d.training
    d.eval()
    b = X["batches"]().next()
    ids, seg = b[0][:1], b[1][:1]
    T = ids.shape[1]
    dev = ids.device
    bs = d.block_size
    anchors = torch.tensor([[3, T // 2]], device=dev)
    keep = torch.tensor([[True, True]], device=dev)
    errs = []
    with torch.no_grad():
        lg = dflash_forward(torch, tgt, d, ids, seg, anchors, keep, bs, X["mask_id"])[0]
        for j, L in enumerate(anchors[0].tolist()):
            ref = dflash_draft_logits(torch, tgt, d, ids[0, :L + 1].tolist(), bs - 1, X["mask_id"])
            errs.append(rel_err(lg[j], ref))
        # the cached upstream step (dflash_reference.draft) gives the same block
        L = T // 2
        feats = target_states(torch, tgt, ids[:, :L], None, d.target_layer_ids)
        cache = d.new_cache()
        _, lc = d.draft(cache, feats, ids[:, L], L)
        errs.append(rel_err(lc[0], lg[1]))
    if max(errs) > 1e-4:
        die("dflash (%s): the training forward differs from the measured path: %r" % (what, errs))
    log("dflash (%s): training forward == measured path == cached step (rel err %s)"
        % (what, " ".join("%.1e" % e for e in errs)))
    d.train(was)


# ----------------------------------------------------------------- report --


def pct(x):
    return "%.1f%%" % (100 * x)


def acc_row(name, acc, order=tuple(ts.TASKS) + ("all",)):
    return "| %s | %s |" % (name, " | ".join(pct(acc[t]) if t in acc else "-" for t in order))


def acc_head():
    order = tuple(ts.TASKS) + ("all",)
    return "| model / decoding | %s |\n|---%s|" % (" | ".join(order), "|---" * len(order))


def md_training(S, what):
    a, r = S["args"], S["train"]
    L = ["## Training\n"]
    L.append("- %s" % what)
    L.append("- AdamW lr %g (warmup %d steps, cosine to %g x), betas (%g, %g), weight decay %g "
             "(matrices), grad clip %g: small-llama's optimizer and schedule"
             % (a["lr"], a["warmup"], a["min_lr_frac"], a["beta1"], a["beta2"], a["weight_decay"],
                a["clip"]))
    L.append("- %d steps of %d rows x %d tokens (%d tokens, %.0f M), %.1f s on one %s (%d tokens/s), "
             "torch %s%s" % (r["steps"], a["batch"], a["seq"], r["tokens"], r["tokens"] / 1e6,
                             r["wall_s"], S["device_name"], r["tokens_per_s"],
                             S["versions"].get("torch"),
                             "" if r["steps"] == r["planned_steps"] else
                             " (%d planned: cut to fit the time budget of %.0f s)"
                             % (r["planned_steps"], a["time_budget"])))
    L.append("- final training loss (mean of the last 5%% of steps): %.4f" % r["final_train_loss"])
    L.append("- loss curve (step, loss): " + ", ".join("%d: %.3f" % (s, v) for s, v in r["loss_curve"]))
    if len(r["parts_curve"]) > 1:
        for k, v in sorted(r["parts_curve"].items()):
            pick = [v[i] for i in sorted(set(range(0, len(v), max(1, len(v) // 10))) | {len(v) - 1})]
            L.append("- %s part (step, mean since the last log): %s" % (
                k, ", ".join("%d: %.3f" % (s, x) for s, x in pick)))
    L.append("")
    return L


def md_data(S):
    dt = S["data"]
    return ["## Data\n",
            "models/small-llama's (its TRAINING.md has the rules): the King James Bible and the Brown "
            "corpus (%d training tokens; kjv.txt sha256 %s, brown.txt sha256 %s) and the five synthetic "
            "tasks (a pool of %d packed rows), held-out items never trained on; each batch half text "
            "windows, half task rows, drawn by train_small.py's Batches with small-llama's seed (the same "
            "batches in the same order). Tokenizer: models/small-llama's (EOS 1022, mask 1023).\n"
            % (dt["text_tokens"], dt["kjv_sha256"], dt["brown_sha256"], dt["task_pool_rows"])]


def md_spec(S, target):
    n_t = sum(S["n_per_task"].values())
    diff = sum(v["all"]["not_lossless"] for v in S["spec"].values())
    return ["## Acceptance (Python, tools/spec_eval.py, float32, temperature 0)\n",
            "Greedy speculative decoding against %s on suites/data/quick.jsonl (the default suite's "
            "prompts: %d held-out task items, %d text openings), 16 new tokens at most, stop at EOS. "
            "Each verification: the drafter proposes k tokens, one target forward checks them, the "
            "longest agreeing prefix plus the target's next token is kept (accepted prefix + 1 = "
            "acceptance length). Every output is compared with the target's greedy output: %s. "
            "Per-position "
            "acceptance: the share of verifications that accept draft position i. Target forwards per "
            "token count the prefill.\n" % (target, n_t, S["spec"][sorted(S["spec"])[0]]
                                             .get("text", {"requests": 0})["requests"],
                                             "all equal" if diff == 0 else
                                             "%d outputs over all k differ (float near-ties of the "
                                             "target's argmax on the GPU)" % diff),
            se.table({int(k): v for k, v in S["spec"].items()}) + "\n"]


def md_repro(mode, S):
    smoke = S["args"]["smoke"]
    return ["## Reproduce\n",
            "```sh\nbash tools/train_small.sh        # train-data/, on a machine with apt and npm\n"
            "python3 tools/train_spec.py %s --data train-data --out OUT%s   # on the GPU machine\n"
            "```\n" % (mode, " --smoke" if smoke else ""),
            "OUT/%s is this folder; OUT/%s.summary.json holds every figure above. Libraries: %s.\n"
            % (FOLDER[mode], FOLDER[mode], ", ".join("%s %s" % kv for kv in sorted(S["versions"].items())))]


def smoke_note(S):
    return ["**SMOKE RUN** (%d steps on a slice: the figures below only show that the pipeline "
            "runs; do not ship this folder).\n" % S["train"]["steps"]] if S["args"]["smoke"] else []


def md_draft(args, S):
    c = DRAFT_CFG
    ev = S["drafter"]
    L = ["# small-llama-draft — how it was trained\n"]
    L += smoke_note(S)
    L.append("A small autoregressive drafter for models/small-llama (classic draft-model speculation), "
             "trained by `tools/train_spec.py draft` (seed %d) exactly as small-llama was: the same "
             "batches in the same order, the same objective, optimizer, schedule and token budget; only "
             "the size differs.\n" % S["args"]["seed"])
    L.append("## Model\n")
    L.append("- LlamaForCausalLM (small-llama's config.json with these sizes): hidden %d, %d layers, %d "
             "heads (head_dim %d), %d KV heads, SwiGLU %d, RMSNorm eps 1e-5, RoPE theta 10000, 256 "
             "positions, vocab 1024, untied head; %d parameters, bf16. Per token about 0.53 M "
             "multiply-adds against small-llama's 3.47 M (15%%; the 128 x 1024 LM head is a quarter of "
             "the drafter's).\n" % (c["hidden"], c["layers"], c["heads"], c["head_dim"], c["kv_heads"],
                                    c["inter"], S["n_params"]))
    L += md_data(S)
    L += md_training(S, "objective: next-token cross-entropy on text and on task tokens up to the "
                        "first <|endoftext|> (train_small.py's ar_loss)")
    L.append("## The drafter alone (Python, float32)\n")
    L.append("Greedy, 16 new tokens, stop at EOS, exact match after trimming (pair: either order); "
             "held-out text (%d tokens): next-token cross-entropy %.4f nats/token (small-llama: 3.3085).\n"
             % (ev["val"]["tokens"], ev["val"]["ar_ce"]))
    L.append(acc_head())
    L.append(acc_row("small-llama-draft, greedy (n = %d per task)" % ev["n"].get("add", 0), ev["accuracy"]))
    L.append(acc_row("small-llama, greedy (the target; the speculative output)", S["target_accuracy"]))
    L.append("")
    L += md_spec(S, "models/small-llama")
    L += md_repro("draft", S)
    return "\n".join(L)


def md_self(args, S):
    a = S["args"]
    L = ["# small-sdar-self — how it was trained\n"]
    L += smoke_note(S)
    L.append("A self-speculative model: one set of weights that runs as an AR model (causal attention, "
             "next token), drafts for itself (a block of masks after the last verified token, one "
             "forward), and runs as SDAR block diffusion under the diffusion backend's block sampler. "
             "Trained by `tools/train_spec.py self` (seed %d) on small-llama's data, batches and "
             "optimizer, with small-sdar's steps.\n" % a["seed"])
    L.append("## Model\n")
    L.append("- SDAR's published layout, as models/small-sdar (its config.json, unchanged: "
             "`SDARForCausalLM`, `model_type` sdar, Qwen3 keys, `block_size` %d, `mask_token_id` 1023; "
             "transformers' Qwen3 tensor names): hidden 256, 4 layers, 4 heads (head_dim 64), QK-norm, "
             "SwiGLU 704, RMSNorm eps 1e-6, RoPE theta 10000, vocab 1024; %d parameters, bf16.\n"
             % (a["block"], S["n_params"]))
    L.append("- Three ways to run the same weights: **causal** (attention to positions <= i; the logits "
             "at i predict token i + 1, shifted, as an AR model); **self-drafting** (the block [last "
             "verified token at L, mask x k] at positions L..L+k sees the causal prefix [0, L) — the "
             "cache the causal pass wrote — and itself bidirectionally; row j predicts the token at L + j, "
             "unshifted, SDAR's convention; row 0's output is not used); **block diffusion** (SDAR: "
             "blocks of %d, bidirectional inside, block-causal across).\n" % a["block"])
    L += md_data(S)
    L.append("## Objective\n")
    L.append("Each row of a batch runs one forward over [clean copy (256) | noisy copy (256) | %d draft "
             "blocks of %d rows], one mask, positions counted from each sequence's own start:\n"
             % (a["anchors"], a["draft_width"]))
    L.append("- AR: next-token cross-entropy on the clean copy under causal attention (text, and task "
             "tokens up to the first <|endoftext|>), on the rows whose clean copy is causal (all but a "
             "share %g of the rows, which draw block-causal clean attention instead: see below)."
             % a["bc_frac"])
    L.append("- Self-drafting: %d anchors L per causal row, uniform among the positions whose next token "
             "is a target of the same sequence; per block k = 3 or 7 (drawn 50/50); the block [token at "
             "L, mask x k] attends to the clean copy's positions < L of its sequence (causal keys) and to "
             "itself bidirectionally (padding rows of a k = 3 block are invisible); rows 1..k predict the "
             "tokens at L+1..L+k (unshifted); mean cross-entropy over rows whose token is a target." % a["anchors"])
    L.append("- Block diffusion (SDAR's objective, train_block.py): per block of %d a t ~ U(0, 1), "
             "p = (1 - 1e-3) t + 1e-3, maskable tokens masked with probability p; a noisy block attends "
             "to itself and to the clean copy's earlier blocks; sum of CE / p over masked tokens per "
             "maskable token. The clean copy is causal on most rows (the AR and drafting rows); on a "
             "share %g of the rows it is block-causal (bidirectional inside a block), exactly as "
             "small-sdar trains, so the model has seen both caches: the block sampler's prefill and "
             "store forwards are block-causal." % (a["block"], a["bc_frac"]))
    L.append("- Loss = AR + drafting + diffusion, equal weights. The diffusion part costs the noisy copy "
             "(256 more rows a forward, as small-sdar's own objective); the drafting part %d rows.\n"
             % (a["anchors"] * a["draft_width"]))
    L += md_training(S, "objective: above")
    L.append("## Held-out accuracy (Python, float32)\n")
    L.append("suites/data/tasks.jsonl's items, 16 new tokens, exact match after trimming (pair: either "
             "order). AR greedy is also the self-speculative output (lossless). Block sampler: "
             "train_block.py's sdar_generate (tokbench's block sampler), 4 steps a block. Held-out text "
             "(%d tokens): causal next-token cross-entropy %.4f nats/token (small-llama: 3.3085).\n"
             % (S["val"]["tokens"], S["val"]["ar_ce"]))
    L.append(acc_head())
    L.append(acc_row("AR greedy (causal) (n = %d per task)" % S["n_per_task"].get("add", 0), S["ar_accuracy"]))
    for name, v in sorted(S["block_sampler"].items()):
        L.append(acc_row("block diffusion, %s (%.2f answer tokens / forward)"
                         % (name, v["answer_tokens_per_forward"]), v["accuracy"]))
    L.append("")
    L += md_spec(S, "its own causal pass (self-speculation)")
    L += md_repro("self", S)
    return "\n".join(L)


def md_dflash(args, S):
    a, c = S["args"], S["config"]
    L = ["# small-llama-dflash — how it was trained\n"]
    L += smoke_note(S)
    L.append("A DFlash drafter (z-lab, arXiv 2602.06036) for models/small-llama, trained by "
             "`tools/train_spec.py dflash` (seed %d) on the frozen target's hidden states, on "
             "small-llama's data, batches and optimizer.\n" % a["seed"])
    L.append("## Model\n")
    L.append("- DFlash's published layout (tools/dflash_reference.py: config.json `architectures` "
             "DFlashDraftModel, `model_type` qwen3, `block_size` %d, `dflash_config` {mask_token_id %d, "
             "target_layer_ids %r}, `num_target_layers` %d; tensors fc, hidden_norm, layers.N.*, norm; no "
             "embedding, no LM head: the target's are used): %d Qwen3 layers, hidden %d, %d heads "
             "(head_dim %d), SwiGLU %d, RMSNorm eps %g; %d parameters, bf16."
             % (c["block_size"], c["dflash_config"]["mask_token_id"], c["dflash_config"]["target_layer_ids"],
                c["num_target_layers"], c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"],
                c["head_dim"], c["intermediate_size"], c["rms_norm_eps"], S["n_params"]))
    L.append("- Context: the outputs of small-llama's layers %r (the residual stream after each, before "
             "the final norm) concatenated, through fc and hidden_norm, give every drafter layer its own "
             "context keys and values; the block [last verified token, mask x %d] attends to the context "
             "and to itself, no mask; row j's logits (the target's LM head after the drafter's norm) "
             "draft the token at anchor + j.\n" % (c["dflash_config"]["target_layer_ids"], c["block_size"] - 1))
    L += md_data(S)
    L.append("## Objective (DFlash's recipe)\n")
    L.append("- The target (small-llama, frozen, its packed-row attention) runs on the batch; its "
             "features feed the drafter.")
    L.append("- %d anchors per row, uniform among positions whose next token is a target of the same "
             "sequence; each anchor's block is [token at L, mask x %d] at positions L..L+%d, attending "
             "to the target features of its sequence's positions < L and to its whole block (one "
             "forward holds all blocks of a row)." % (a["dflash_anchors"], c["block_size"] - 1,
                                                      c["block_size"] - 1))
    L.append("- Loss: cross-entropy of rows 1..%d against the tokens at L+1..L+%d (targets of the same "
             "sequence only), weighted by position as DFlash does, w_j = exp(-(j - 1) / gamma) with "
             "gamma %g (SpecForge's published recipe for blocks of 16), normalized by the weights' sum."
             % (c["block_size"] - 1, c["block_size"] - 1, a["gamma"]))
    L.append("- The optimizer is small-llama's (lr %g, not SpecForge's 6e-4 for 8B drafters), so the "
             "budget rule matches the other small models.\n" % a["lr"])
    L += md_training(S, "objective: above")
    L.append("## Target accuracy\n")
    L.append("The speculative output is small-llama's greedy output (checked):\n")
    L.append(acc_head())
    L.append(acc_row("small-llama, greedy (n = %d per task)" % S["n_per_task"].get("add", 0),
                     S["target_accuracy"]))
    L.append("")
    L += md_spec(S, "models/small-llama")
    L.append("k = %d is the trained block (anchor + %d masks); smaller k runs the same drafter on a "
             "shorter block (fewer mask rows), as DFlash's block_size override does.\n"
             % (c["block_size"] - 1, c["block_size"] - 1))
    L += md_repro("dflash", S)
    return "\n".join(L)


# ------------------------------------------------------------------- main --


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=sorted(FOLDER))
    ap.add_argument("--data", default="train-data")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", default=ts.REPO)
    ap.add_argument("--smoke", action="store_true", help="a few steps on a slice, every check")
    ap.add_argument("--smoke-steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=ts.SEED)
    ap.add_argument("--steps", type=int, default=7200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--task-pool-rows", type=int, default=160000)
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds of training at most (fewer steps when the first 40 say so); "
                         "0: off; default per mode: draft 300, self 400, dflash 420")
    ap.add_argument("--log-every", type=int, default=250)
    ap.add_argument("--eval-per-task", type=int, default=32)
    ap.add_argument("--eval-text", type=int, default=16)
    ap.add_argument("--val-windows", type=int, default=1024)
    ap.add_argument("--lossless-tolerance", type=float, default=0.02,
                    help="share of speculative outputs that may differ from the target's greedy "
                         "ones (float near-ties on the GPU; reported) before the run fails")
    ap.add_argument("--ks", type=lambda s: [int(v) for v in s.split(",")], default=None,
                    help="draft lengths to measure (default: 3,7; dflash 15,7,3)")
    # self
    ap.add_argument("--block", type=int, default=4, help="self: SDAR block_size (small-sdar's)")
    ap.add_argument("--anchors", type=int, default=16, help="self: draft blocks per row")
    ap.add_argument("--draft-width", type=int, default=8, help="self: rows of a draft block (k = 7 + 1)")
    ap.add_argument("--bc-frac", type=float, default=0.25,
                    help="self: share of rows whose clean copy is block-causal (SDAR only)")
    # dflash
    ap.add_argument("--dflash-layers", type=int, default=2)
    ap.add_argument("--dflash-block", type=int, default=16)
    ap.add_argument("--dflash-anchors", type=int, default=32, help="dflash: blocks per row")
    ap.add_argument("--target-layers", default="0,1,2", help="dflash: small-llama layers whose outputs feed it")
    ap.add_argument("--gamma", type=float, default=7.0, help="dflash: position decay of the loss")
    return ap


def main():
    args = build_parser().parse_args()
    if args.time_budget is None:
        args.time_budget = {"draft": 300.0, "self": 400.0, "dflash": 460.0}[args.mode]
    t0 = time.time()
    {"draft": cmd_draft, "self": cmd_self, "dflash": cmd_dflash}[args.mode](args)
    log("DONE %s in %.0f s: %s" % (args.mode, time.time() - t0, os.path.join(args.out, FOLDER[args.mode])))


if __name__ == "__main__":
    main()
