#!/usr/bin/env python3
"""train_flow.py — trains models/small-flow, a continuous (embedding-space)
diffusion LM in the LangFlow layout (plugins/flow/flow_model.h), on the
data, tokenizer, batches and token budget of the shipped small AR and
LLaDA models (tools/train_small.py: same text, same task pool, same batch
shapes, same optimizer and schedule), so that its accuracy at 1-16 steps
sits beside theirs in the default suite.

On the GPU machine, with train-data/ carried (tools/train_small.sh makes it):

    python3 tools/train_flow.py --data train-data --out OUT --prompt-gamma min --gumbel-loc 4

(the shipped model's recipe; the defaults are the first model's)

writes OUT/small-flow/{config.json, model.safetensors (bf16), tokenizer.json
(models/small-llama's), TRAINING.md} and OUT/flow_summary.json.

Objective (per text row, and per task example of a packed row, one noise
level): q ~ U(t_eps, 1 - t_eps), gamma = loc - scale ln(-ln q) clamped as
the sampler clamps it; z = alpha(gamma) E[x] + sigma(gamma) eps on the
positions to generate -- a task example's 16-token answer region, a text
row's tokens after a clean prefix of random length (0 to half the row) --
and z = E[x] (clean) elsewhere; with probability 1/2 a first pass without
gradients gives x0_hat = softmax(logits) E, fed back as the
self-condition on the noised positions (clean ones get E[x]); loss = mean
cross-entropy of the logits against x on the noised positions. The
network conditions each position on its own segment's gamma (adaLN per
token); at sampling every position of a canvas shares one -- except, with
--prompt-gamma min (config.json "prompt_gamma": "min"), the clean
positions, conditioned on the schedule's lowest level in training and at
sampling.

--diag 'A:flags|B:flags' trains recipes one after another on one copy of
the data (short diagnostics: --tasks-only 1, --eval-tasks, --eval-steps)
and writes OUT/flow_diag.json; --full-flags then trains the best of them
(lookup and pair at the most steps, lookup at the fewest) with those flags.
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

CFG = {"model_type": "LangFlow", "vocab_size": ts.VOCAB, "hidden_size": 256, "cond_dim": 128, "n_blocks": 4,
       "n_heads": 4, "model_length": 256, "mlp_ratio": 3, "freq_embed_dim": 256,
       "use_normalized_embedding": True, "embedding_norm_method": "layernorm", "self_conditioning": True,
       "use_bias": True, "gumbel_loc": 0.0, "gumbel_scale": 3.0, "gumbel_cutoff": 1e-3, "t_eps": 1e-5,
       "norm_eps": 1e-5, "rope_theta": 10000.0, "time_max_period": 10000.0, "prompt_gamma": "canvas",
       "prompt_attention": "full"}


def build(torch):
    import torch.nn as nn
    import torch.nn.functional as F
    D, C, V, H = CFG["hidden_size"], CFG["cond_dim"], CFG["vocab_size"], CFG["n_heads"]
    Fm, hd = CFG["mlp_ratio"] * D, D // H

    class LN(nn.Module):  # LayerNorm without bias
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(D))

        def forward(self, x):
            return F.layer_norm(x.float(), (D,), eps=CFG["norm_eps"]) * self.weight

    class VocabEmbed(nn.Module):
        def __init__(self, init_std):
            super().__init__()
            # only the direction is used (normed()): the raw scale sets how far
            # an Adam step of a fixed size turns it
            self.embedding = nn.Parameter(torch.randn(V, D) * init_std)

        def normed(self):
            e = self.embedding.float()
            return e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12) * math.sqrt(D)

    class SigmaMap(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(CFG["freq_embed_dim"], C), nn.SiLU(), nn.Linear(C, C))

        def forward(self, g):  # g [..] -> cond [.., C]
            half = CFG["freq_embed_dim"] // 2
            k = torch.arange(half, device=g.device, dtype=torch.float64)
            w = torch.exp(-math.log(CFG["time_max_period"]) * k / half).float()
            a = g.float()[..., None] * w
            return F.silu(self.mlp(torch.cat([torch.cos(a), torch.sin(a)], -1)))

    def rope(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = LN(), LN()
            self.attn_qkv = nn.Linear(D, 3 * D, bias=False)
            self.attn_out = nn.Linear(D, D, bias=False)
            self.mlp = nn.Sequential(nn.Linear(D, Fm), nn.GELU(approximate="tanh"), nn.Linear(Fm, D))
            self.adaLN_modulation = nn.Linear(C, 6 * D)

        def forward(self, x, cond, cos, sin, mask):
            B, T, _ = x.shape
            sh1, sc1, g1, sh2, sc2, g2 = self.adaLN_modulation(cond).chunk(6, -1)
            h = (self.norm1(x) * (1 + sc1) + sh1).to(x.dtype)
            q, k, v = self.attn_qkv(h).view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)
            q, k = rope(q, cos, sin).to(v.dtype), rope(k, cos, sin).to(v.dtype)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(B, T, D)
            x = x + g1 * self.attn_out(o)
            h = (self.norm2(x) * (1 + sc2) + sh2).to(x.dtype)
            return x + g2 * self.mlp(h)

    class OutputLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_final = LN()
            self.adaLN_modulation = nn.Linear(C, 2 * D)
            self.linear = nn.Linear(D, V)

        def forward(self, x, cond):
            sh, sc = self.adaLN_modulation(cond).chunk(2, -1)
            return self.linear((self.norm_final(x) * (1 + sc) + sh).to(x.dtype))

    class Backbone(nn.Module):
        def __init__(self, emb_init_std):
            super().__init__()
            self.vocab_embed = VocabEmbed(emb_init_std)
            self.sigma_map = SigmaMap()
            self.self_cond_proj = nn.Linear(2 * D, D, bias=False)
            self.blocks = nn.ModuleList([Block() for _ in range(CFG["n_blocks"])])
            self.output_layer = OutputLayer()
            inv = 1.0 / (CFG["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, z, gamma, xsc, seg=None, clean=None):
            """z, xsc [B, T, D]; gamma [B, T] (per position); logits [B, T, V] (float32).
            seg [B, T]: attention stays inside a segment; clean [B, T] (with
            "prompt_attention": "prompt"): a clean position attends to clean
            positions only, so no noise reaches the prompt's states."""
            B, T, _ = z.shape
            pos = torch.arange(T, device=z.device).float()
            ang = pos[:, None] * self.inv_freq[None, :]
            emb = torch.cat((ang, ang), -1)
            cos, sin = emb.cos(), emb.sin()
            mask = None if seg is None else (seg[:, :, None] == seg[:, None, :])
            if clean is not None and CFG["prompt_attention"] == "prompt":
                seen = ~(clean[:, :, None] & ~clean[:, None, :])
                mask = seen if mask is None else mask & seen
            mask = None if mask is None else mask[:, None]
            cond = self.sigma_map(gamma)
            x = z + self.self_cond_proj(torch.cat([z, xsc], -1))
            for blk in self.blocks:
                x = blk(x, cond, cos, sin, mask)
            logits = self.output_layer(x, cond).float()
            k = torch.exp((F.softplus(-gamma.float()) - gamma.float()) / 2)  # alpha / sigma^2
            return logits + k[..., None] * (z.float() @ self.vocab_embed.normed().T)

    class Model(nn.Module):
        def __init__(self, zero_init=False, emb_init_std=0.02):
            super().__init__()
            self.backbone = Backbone(emb_init_std)
            if zero_init:  # DiT's adaLN-zero: every block starts as the identity, the readout as the skip term
                for m in [b.adaLN_modulation for b in self.backbone.blocks] + [
                        self.backbone.output_layer.adaLN_modulation, self.backbone.output_layer.linear]:
                    nn.init.zeros_(m.weight)
                    nn.init.zeros_(m.bias)

    return Model


def gamma_of(q):
    return CFG["gumbel_loc"] - CFG["gumbel_scale"] * math.log(-math.log(q))


def gamma_min():
    """The schedule's lowest (cleanest) noise level: the level of clean
    positions when CFG["prompt_gamma"] is "min"."""
    return CFG["gumbel_loc"] - CFG["gumbel_scale"] * math.log(-math.log(CFG["gumbel_cutoff"]))


def clamp_gamma(g):
    lo = CFG["gumbel_loc"] - CFG["gumbel_scale"] * math.log(-math.log(CFG["gumbel_cutoff"]))
    hi = CFG["gumbel_loc"] - CFG["gumbel_scale"] * math.log(CFG["gumbel_cutoff"])
    return g.clamp(lo, hi)


def schedule(N):
    e = CFG["t_eps"]
    lo = CFG["gumbel_loc"] - CFG["gumbel_scale"] * math.log(-math.log(CFG["gumbel_cutoff"]))
    hi = CFG["gumbel_loc"] - CFG["gumbel_scale"] * math.log(CFG["gumbel_cutoff"])
    out = []
    for i in range(N):
        q = 1 - e if N == 1 else (1 - e) + (e - (1 - e)) * i / (N - 1)
        out.append(min(max(gamma_of(q), lo), hi))
    return out


def flow_loss(torch, model, ids, seg, dm, gen, text_rows, sc_prob=0.5, token_gamma_prob=0.0):
    """The objective of the module docstring; dm: the task rows' answer
    regions (text rows: all True). token_gamma_prob: the share of segments
    whose noised positions each draw their own level (the network is
    conditioned per position), so it also learns a position's posterior
    from neighbours less noisy than itself."""
    import torch.nn.functional as F
    bb = model.backbone
    B, T = ids.shape
    E = bb.vocab_embed.normed()
    e = E[ids]
    e_t = CFG["t_eps"]
    q = e_t + (1 - 2 * e_t) * torch.rand(B, ts.MAX_SEGS, device=ids.device, generator=gen)
    g = clamp_gamma(CFG["gumbel_loc"] - CFG["gumbel_scale"] * torch.log(-torch.log(q))).gather(1, seg)
    if token_gamma_prob > 0:
        qt = e_t + (1 - 2 * e_t) * torch.rand(B, T, device=ids.device, generator=gen)
        gt = clamp_gamma(CFG["gumbel_loc"] - CFG["gumbel_scale"] * torch.log(-torch.log(qt)))
        own = (torch.rand(B, ts.MAX_SEGS, device=ids.device, generator=gen) < token_gamma_prob).gather(1, seg)
        g = torch.where(own, gt, g)
    noised = dm.clone()
    # text rows: a clean prefix of random length, the rest noised
    plen = torch.randint(0, T // 2 + 1, (B, 1), device=ids.device, generator=gen)
    tr = torch.arange(B, device=ids.device)[:, None] < text_rows
    noised = torch.where(tr, torch.arange(T, device=ids.device)[None, :] >= plen, noised)
    a = torch.sqrt(torch.sigmoid(-g))[..., None]
    s = torch.sqrt(torch.sigmoid(g))[..., None]
    eps = torch.randn(B, T, E.shape[1], device=ids.device, generator=gen)
    nm = noised[..., None]
    if CFG["prompt_gamma"] == "min":  # clean positions conditioned on the clean level, not their segment's
        g = torch.where(noised, g, torch.full_like(g, gamma_min()))
    z = torch.where(nm, a * e + s * eps, e)
    xsc = torch.where(nm, torch.zeros_like(e), e)
    use_sc = torch.rand((), device=ids.device, generator=gen) < sc_prob
    if bool(use_sc):
        with torch.no_grad():
            p = torch.softmax(bb(z, g, xsc, seg, ~noised), -1)
            xsc = torch.where(nm, p @ E, e)
    logits = bb(z, g, xsc.detach(), seg, ~noised)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1), reduction="none").view(B, T)
    w = noised.float()
    return (ce * w).sum() / w.sum()


def sample(torch, model, prompt_ids, n_gen, steps, device):
    """Euler (the published step), prompt clean: tokens of one canvas."""
    bb = model.backbone
    E = bb.vocab_embed.normed()
    P = len(prompt_ids)
    L = P + n_gen
    gs = schedule(steps)
    g_ = torch.Generator(device=device).manual_seed(1234)
    z = torch.randn(1, L, E.shape[1], device=device, generator=g_)
    xsc = torch.zeros_like(z)
    pe = E[torch.tensor(prompt_ids, device=device)]
    clean = (torch.arange(L, device=device) < P)[None, :]
    al = lambda g: math.sqrt(1 / (1 + math.exp(g)))
    si = lambda g: math.sqrt(1 / (1 + math.exp(-g)))
    for i in range(steps):
        z[0, :P] = pe
        xsc[0, :P] = pe
        gam = torch.full((1, L), gs[i], device=device)
        if CFG["prompt_gamma"] == "min":
            gam[0, :P] = gamma_min()
        logits = bb(z, gam, xsc, None, clean)
        if i == steps - 1:
            return logits[0, P:].argmax(-1).tolist()
        x0 = torch.softmax(logits, -1) @ E
        t, s = gs[i], gs[i + 1]
        z = al(s) * x0 + si(s) / si(t) * (z - al(t) * x0)
        xsc = x0


def parser():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="train-data")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", default=ts.REPO)
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
    ap.add_argument("--time-budget", type=float, default=420, help="seconds of training at most")
    ap.add_argument("--log-every", type=int, default=250)
    ap.add_argument("--zero-init", action="store_true", help="adaLN-zero initialisation (DiT)")
    ap.add_argument("--gumbel-loc", type=float, default=0.0,
                    help="the noise schedule's location: larger trains (and samples) more at high noise")
    ap.add_argument("--self-cond-prob", type=float, default=0.5)
    ap.add_argument("--emb-init-std", type=float, default=0.02,
                    help="the raw embedding's initial scale (it is used normalised: a larger one turns slower)")
    ap.add_argument("--emb-decay", type=int, default=1, help="0: no weight decay on the embedding")
    ap.add_argument("--token-gamma-prob", type=float, default=0.0,
                    help="share of segments whose noised positions draw a level each")
    ap.add_argument("--prompt-gamma", choices=("canvas", "min"), default="canvas",
                    help="the noise level clean (prompt) positions are conditioned on: their canvas's (segment's) "
                         "or the schedule's lowest")
    ap.add_argument("--prompt-attention", choices=("full", "prompt"), default="full",
                    help="prompt: clean (prompt) positions attend to clean positions only")
    ap.add_argument("--tasks-only", type=int, default=0, help="1: every row a task row (diagnostics)")
    ap.add_argument("--eval-tasks", default=",".join(ts.TASKS))
    ap.add_argument("--eval-steps", default="1,2,4,8,16")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--diag", default="",
                    help="variants 'name:flags|name:flags' trained one after another on the same data "
                         "(with the base flags), then --full-flags on top of the best one's")
    ap.add_argument("--full-flags", default=None, help="after --diag: flags of the full run of the best variant")
    return ap


def load_data(args, torch):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.repo, "models", "small-llama", "tokenizer.json"))
    eos = tok.token_to_id(ts.EOS)
    docs = ts.read_text(args.data)
    train_docs, held_docs = ts.split_text(docs)
    stream = ts.build_text_stream(tok, train_docs, eos)
    pool = ts.build_task_pool(tok, args.task_pool_rows, args.seq, eos, args.seed)[:4]
    return tok, eos, stream, pool


def run_variant(args, torch, tok, eos, stream, pool, tag=""):
    """Trains one recipe, exports it (unless --no-export) and evaluates it
    on the held-out task items; returns the summary."""
    from safetensors.torch import save_file
    CFG["gumbel_loc"] = args.gumbel_loc
    CFG["prompt_gamma"] = args.prompt_gamma
    CFG["prompt_attention"] = args.prompt_attention
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = args.device
    torch.manual_seed(args.seed)
    batches = ts.Batches(stream, pool, args.batch, args.seq, args.seed + 5, dev)
    if args.tasks_only:
        batches.n_text = 0
    Model = build(torch)
    model = Model(zero_init=args.zero_init, emb_init_std=args.emb_init_std).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    ts.log("%sflow model: %d parameters; text stream %d tokens; recipe %s" % (tag, n_params, len(stream), vars(args)))
    opt = ts.make_optimizer(model, args, () if args.emb_decay else ("backbone.vocab_embed.embedding",))
    gen = torch.Generator(device=dev).manual_seed(args.seed + 29)
    losses, buf, gnorm, t0 = [], [], [], time.time()
    steps_run = 0
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = ts.lr_at(step, args)
        ids, seg, ar, dm = batches.next()
        with ts.amp_ctx(dev == "cuda"):
            loss = flow_loss(torch, model, ids, seg, dm, gen, batches.n_text, args.self_cond_prob,
                             args.token_gamma_prob)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm.append(torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip).detach())
        opt.step()
        buf.append(loss.detach())
        steps_run = step + 1
        if steps_run % args.log_every == 0:
            vals = torch.stack(buf).float().cpu().tolist()
            buf = []
            losses.extend(vals)
            gn = torch.stack(gnorm).float().cpu()
            gnorm = []
            ts.log("%sflow step %d/%d loss %.4f grad norm (before the clip) median %.3f elapsed %.0fs"
                   % (tag, steps_run, args.steps, sum(vals) / len(vals), gn.median().item(), time.time() - t0))
        if time.time() - t0 > args.time_budget:
            ts.log("%stime budget reached at step %d" % (tag, steps_run))
            break
    if buf:
        losses.extend(torch.stack(buf).float().cpu().tolist())
    wall = time.time() - t0
    model.eval()

    # export: bf16 weights in LangFlow's names, the schedule as scalars
    sd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in model.state_dict().items()}
    cfg = dict(CFG, eos_token_id=eos)
    if not args.no_export:
        out = os.path.join(args.out, "small-flow")
        os.makedirs(out, exist_ok=True)
        st = dict(sd)
        st["proposal.loc"] = torch.tensor(CFG["gumbel_loc"], dtype=torch.float32)
        st["proposal.scale"] = torch.tensor(CFG["gumbel_scale"], dtype=torch.float32)
        save_file(st, os.path.join(out, "model.safetensors"))
        json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
        tok.save(os.path.join(out, "tokenizer.json"))
    # evaluate what was exported (bf16 weights back in float32)
    with torch.no_grad():
        for k, p in model.state_dict().items():
            p.copy_(sd[k].float())
    tasks = args.eval_tasks.split(",")
    items = []
    for t in tasks:
        items += ts.heldout_items(t, 32)
    acc, outs = {}, {}
    with torch.no_grad():
        for steps in [int(x) for x in args.eval_steps.split(",")]:
            right = {t: 0 for t in tasks}
            outs[steps] = []
            for it in items:
                ids = tok.encode(it["prompt"], add_special_tokens=False).ids
                outt = sample(torch, model, ids, ts.GEN_LEN, steps, dev)
                if eos in outt:
                    outt = outt[:outt.index(eos)]
                text = tok.decode(outt).strip()
                right[it["tags"][0]] += int(ts.grade(it, text))
                outs[steps].append(text)
            acc[steps] = {t: right[t] / 32 for t in tasks}
            ts.log("%ssteps %d: %s" % (tag, steps, json.dumps(acc[steps])))
    tail = losses[-max(1, len(losses) // 20):]
    return {"params": n_params, "steps": steps_run, "wall_s": round(wall, 1),
            "tokens": steps_run * args.batch * args.seq, "final_train_loss": round(sum(tail) / len(tail), 4),
            "loss_curve": [[i + 1, round(losses[i], 4)] for i in
                           sorted(set(range(0, len(losses), max(1, len(losses) // 20))) | {len(losses) - 1})],
            "accuracy_tasks_jsonl": acc, "outputs": outs,
            "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
            "torch": torch.__version__, "config": cfg,
            "recipe": {k: getattr(args, k) for k in ("lr", "zero_init", "gumbel_loc", "self_cond_prob", "steps",
                                                     "prompt_gamma", "tasks_only", "batch", "task_pool_rows",
                                                     "emb_init_std", "emb_decay", "token_gamma_prob",
                                                     "prompt_attention")}}


def diag_score(S):
    """lookup and pair at the most steps evaluated, plus lookup at the fewest:
    the recipe that learns the tasks that need the prompt read twice."""
    acc = S["accuracy_tasks_jsonl"]
    lo, hi = min(acc), max(acc)
    return acc[hi].get("lookup", 0) + acc[hi].get("pair", 0) + acc[lo].get("lookup", 0)


def main():
    import torch
    ap = parser()
    args = ap.parse_args()
    t_start = time.time()
    tok, eos, stream, pool = load_data(args, torch)
    ts.log("data ready in %.0fs" % (time.time() - t_start))
    os.makedirs(args.out, exist_ok=True)
    if not args.diag:
        summary = run_variant(args, torch, tok, eos, stream, pool)
        summary["total_s"] = round(time.time() - t_start, 1)
        json.dump(summary, open(os.path.join(args.out, "flow_summary.json"), "w"), indent=1)
        ts.log("done: %s" % json.dumps({k: summary[k] for k in ("steps", "wall_s", "final_train_loss")}))
        return
    base = sys.argv[1:]
    results = {}
    for spec in args.diag.split("|"):
        name, _, flags = spec.partition(":")
        va = ap.parse_args(base + flags.split() + ["--no-export"])
        results[name] = run_variant(va, torch, tok, eos, stream, pool, tag="[%s] " % name)
        results[name]["flags"] = flags
        json.dump(results, open(os.path.join(args.out, "flow_diag.json"), "w"), indent=1)
    best = max(results, key=lambda n: diag_score(results[n]))
    ts.log("diag scores: %s; best %s" % ({n: round(diag_score(r), 3) for n, r in results.items()}, best))
    if args.full_flags is not None:
        fa = ap.parse_args(base + results[best]["flags"].split() + args.full_flags.split() + ["--diag", ""])
        summary = run_variant(fa, torch, tok, eos, stream, pool, tag="[full %s] " % best)
        summary["total_s"] = round(time.time() - t_start, 1)
        summary["diag_best"] = best
        json.dump(summary, open(os.path.join(args.out, "flow_summary.json"), "w"), indent=1)
        ts.log("done: %s" % json.dumps({k: summary[k] for k in ("steps", "wall_s", "final_train_loss")}))


if __name__ == "__main__":
    main()
