#!/usr/bin/env python3
"""make_golden.py — golden data that proves tokbench's C engine matches
Hugging Face (tokenizers + transformers).

Run where python3 has torch, transformers (5.x), tokenizers, safetensors and
numpy; no network is needed. Everything is deterministic (fixed seeds, a
corpus embedded below, CPU float32 forwards):

    python3 tools/make_golden.py --out /tmp/g
    tar -C /tmp/g -czf golden.tar.gz .      # unpacked into tests/data/golden/

It writes, under --out:

  VERSIONS.json                      library versions, seeds, the rules below
  tokenizer-llama3.json              byte-level BPE, Llama 3 regex, ignore_merges
  tokenizer-llama3-stringmerges.json the same, merges in the other spelling
                                     ("a b" strings <-> ["a","b"] pairs)
  tokenizer-qwen2.json               byte-level BPE, Qwen2 regex (single digits)
  tokenizer_cases.json               {file name: [case, ...]} where a case is
                                     {"text", "ids", "decoded"} or, for invalid
                                     UTF-8, {"bytes_b64", "replaced_text", "ids",
                                     "decoded"}
  llama-gqa/  llama-tied/  qwen2-bias/
                                     config.json, model.safetensors (or shards +
                                     model.safetensors.index.json),
                                     generation_config.json, tokenizer.json,
                                     expected.json

Rules the C side relies on:

  * ids = Tokenizer.encode(text, add_special_tokens=False).ids and
    decoded = Tokenizer.decode(ids, skip_special_tokens=False).
  * Invalid UTF-8 input: the tokenizers library only takes str, so the
    expected ids are those of bytes.decode("utf-8", errors="replace"): every
    maximal invalid subsequence (the longest prefix of a well-formed sequence,
    or else one byte) becomes one U+FFFD, exactly as Python's decoder does
    (Unicode's "substitution of maximal subparts"). The C tokenizer must do
    the same replacement before pre-tokenizing.
  * Valid texts round-trip exactly: decode(encode(text)) == text (asserted).
  * Logits are model(input_ids).logits in float32 on the CPU, eager
    attention, with the weights as saved (bf16 / f16 upcast to float32 by
    from_pretrained(dtype=torch.float32)). Floats are rounded to 7
    significant digits.
  * greedy.new_ids: 16 tokens, argmax each step, eos disabled (never stops
    early). Computed twice (generate() with a KV cache, and a plain loop of
    full forwards); both are recorded and must agree. greedy.margins is the
    top1 - top2 logit gap at each step (a tiny gap means a float-rounding
    tie, where a C mismatch is not a bug).
"""

import argparse
import base64
import copy
import hashlib
import inspect
import json
import math
import os
import platform
import random
import shutil
import struct
import sys
import traceback

SEED = 20261129

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

VOCAB_TOTAL = 512  # model vocab + added tokens

# Words put into the model vocab by hand after training (ids just after the
# trained ones), the first N_INJECT that are not there already. No merge
# produces them, as with many of Llama 3's tokens: with ignore_merges = true a
# pre-token equal to one of them is that one id; with false, merges decide.
# Training alone gave no word whose ids depend on ignore_merges.
INJECT_WORDS = [" xylophone", " tokbench", "\u65e5\u672c", "Hello", " quick", "!!!", "zebra"]
N_INJECT = 4

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|mdm_mask|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NONSPECIAL = "<tool>"

# ---------------------------------------------------------------- corpus --

BASE_CORPUS = r'''The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.
We'll see what they've done; I'm sure it's fine, and you'd agree they're right. She said: "Don't worry."
Tokenizers split text into pieces; the model predicts the next piece, one at a time, until it reaches the end.
Benchmarks measure throughput in tokens per second, latency in milliseconds, and memory in gigabytes.
In 2024 the cluster served 1,234,567 requests at 99.95% availability; the p99 latency was 183.4 ms.
Prices: $3.50, €12.99, £7 and ¥1200. Dates: 2025-01-31, 1999-12-31T23:59:59Z. Pi is 3.14159265358979.
Version 10.2.1 fixed issue #4521 (see https://example.org/issues/4521?tab=comments#c17).

def fibonacci(n):
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

class Cache:
    def __init__(self, capacity=128):
        self.capacity = capacity
        self.items = {}

    def get(self, key, default=None):
        return self.items.get(key, default)

int main(int argc, char **argv)
{
	int total = 0;
	for (int i = 0; i < argc; i++) {
		total += (int)strlen(argv[i]);
	}
	printf("%d\n", total);
	return 0;
}

{"name": "tokbench", "version": "0.1.0", "tags": ["llm", "benchmark"], "ok": true, "count": 42}
for f in *.json; do jq '.model' "$f" >> out.txt; done && echo "done" || exit 1
SELECT id, name FROM users WHERE age >= 21 ORDER BY name LIMIT 10;

Le café est très bon à Paris; naïve façade, résumé, crème brûlée, déjà vu, Ærøskøbing, São Paulo, Zürich.
Привет, как дела? Всё хорошо, спасибо. Γειά σου κόσμε. Ελληνικά γράμματα.
日本語の文章を少し書きます。東京は大きな都市です。今日は良い天気ですね。
中文的句子也需要一些。我们今天去公园散步，天气很好。北京和上海都是大城市。
한국어 문장도 조금 있습니다. 서울은 큰 도시입니다.
Emoji: 😀 😂 🎉 🚀 ❤️ 👍 🙏 🔥 ✨ and more 😀😀😀 in a row.
Numbers 0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 10000 65536 4294967296.
THE END. the end. The End? THE END!!! ... --- *** ### === +++
'''

VALID_TEXTS = [
    # English prose
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Tokenization is the first step; decoding is the last.",
    "HELLO WORLD IN CAPITALS",
    "mIxEd CaSe wOrDs",
    # contractions, both cases, and curly apostrophes
    "DON'T",
    "we'll",
    "I'm sure they've said it's what you'd do and we're here.",
    "SHE'S GONE, THEY'RE BACK, WE'VE WON, I'LL GO, HE'D KNOW",
    "You'Ve mixed 'S and 'll",
    "can\u2019t won\u2019t it\u2019s",
    "O'Neil's dog's bone",
    "'s 't 're 've 'm 'll 'd",
    "''quoted''",
    # digits
    "1234567",
    "3.14159",
    "2026-11-29",
    "12345678901234567890",
    "1,000,000 and 0.000001 and -42 and +7",
    "abc123def456",
    "\u0661\u0662\u0663\u0664\u0665 Arabic-Indic digits, \u00bd \u00b2 \u2167 \u2460 other numbers",
    # whitespace
    "a  b",
    "a   b    c",
    "\n\n\n",
    "  \n  x",
    "x \n\n y",
    "a\tb\t\tc",
    "line1\r\nline2\r\n",
    "   leading spaces",
    "trailing spaces   ",
    " \t \n ",
    "\u00a0nbsp\u00a0here",
    "\u3000\u5168\u89d2 ideographic space",
    "thin\u2009space and\u2003em space",
    "vertical\x0btab and form\x0cfeed",
    # code
    "def f(x):\n    return x * 2\n\n\nprint(f(21))\n",
    "int main(void)\n{\n\tif (x) {\n\t\treturn 1;\n\t}\n\treturn 0;\n}\n",
    "for (i = 0; i < n; i++) { sum += a[i]; }",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "x=>x**2; y!==z && a||b; p->q; <div class=\"c\"></div>",
    "https://example.com/path/to/page?q=1&r=two#frag",
    "!!!???...;;;:::",
    "-->> <<== }}}\n\n",
    # CJK
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u4e2d\u6587\u6d4b\u8bd5\uff0c\u4f60\u597d\u4e16\u754c\uff01",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    # emoji
    "\U0001F44D",
    "I love it \U0001F600\U0001F600!",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family",
    "\U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8 flags",
    "\U0001F44B\U0001F3FD wave with skin tone",
    "\u2764\ufe0f heart with VS16",
    # accented Latin and other scripts
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 S\u00e3o Paulo, Z\u00fcrich, \u00c5ngstr\u00f6m",
    "e\u0301 combining acute vs \u00e9 precomposed",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\ufffd replacement char in valid text",
    # mixed scripts
    "Hello\u4e16\u754c123abc\U0001F600\u041f\u0440\u0438\u0432\u0435\u0442",
    "GPT-4o\u306f2024\u5e74\u306b\u767a\u8868\u3055\u308c\u305f",
    # special tokens embedded in text (each tokenizer knows only its own)
    "hi<|end_of_text|>there",
    "<|begin_of_text|><|begin_of_text|>",
    "<|begin_of_text|>Hello, world!<|eot_id|>",
    "x <|mdm_mask|> y<|mdm_mask|><|mdm_mask|>z",
    "<|begin_of_text",
    "<|end_of_text|",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|endoftext|>",
    "prefix<|endoftext|>suffix",
    # words put into the vocab by hand (INJECT_WORDS): ignore_merges matters
    "A xylophone, tokbench and Hello from \u65e5\u672c!!! quick zebra",
    # the non-special added token
    "a <tool> b",
    "<tool><tool>call",
    "no<tool>space",
    # edge cases
    "",
    " ",
    "a",
    "\n",
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 8,
    "x" * 1000,
    "ab" * 300,
    " " * 100 + "end",
    "\n" * 50,
]

# Invalid UTF-8: the expected ids are those of bytes.decode("utf-8",
# errors="replace") (see the module docstring).
INVALID_BYTES = [
    b"\xff",
    b"abc\x80def",
    b"\x80\x80\x80",
    b"\xe2\x82",
    b"\xe2\x82abc",
    b"\xf0\x9f\x98",
    b"\xf0\x9f\x98 x",
    b"\xed\xa0\x80",            # UTF-16 surrogate: three replacements
    b"\xc0\xaf",                # overlong: two
    b"\xf4\x90\x80\x80",        # above U+10FFFF: four
    b"\xf5\xff",
    b"hello \xce world",
    b"\xe6\x97\xa5\xe6\x9c",    # one CJK char then a truncated one
    b"caf\xe9 latin-1",
    "\U0001F642".encode() + b"\xa0ok\xfe\xfe",
    b"\xe0\x80\x80 \xe0\xa0",   # overlong 3-byte, then truncated
    b"<|end_of_text|>\xff<|endoftext|>",
]

# ------------------------------------------------------------- utilities --


def log(*a):
    print("[make_golden]", *a, flush=True)


def die(msg):
    print("[make_golden] FATAL:", msg, flush=True)
    sys.exit(1)


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def r7(x):
    x = float(x)
    if not math.isfinite(x):
        die("non-finite value %r" % x)
    return float("%.7g" % x)


def r7_list(t):
    """Tensor / nested list -> nested list of 7-significant-digit floats."""
    if hasattr(t, "tolist"):
        t = t.tolist()
    if isinstance(t, list):
        return [r7_list(v) for v in t]
    return r7(t)


def corpus():
    """The embedded corpus, repeated with variations (case, numbers)."""
    rng = random.Random(SEED)
    chunks = [c for c in BASE_CORPUS.split("\n\n") if c.strip()]
    out = []
    for rep in range(3):
        for c in chunks:
            out.append(c)
            if rep == 1:
                out.append(c.lower())
            elif rep == 2:
                out.append(c.upper())
    for _ in range(150):
        out.append("%d %d.%05d %04d-%02d-%02d %s" % (
            rng.randint(0, 999999), rng.randint(0, 99), rng.randint(0, 99999),
            rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28),
            rng.choice(["ok", "error", "done", "the", "and", "value", "count"])))
    words = BASE_CORPUS.split()
    for _ in range(200):
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
    return out


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

# ------------------------------------------------------------ tokenizers --


def build_tokenizer(pattern, ignore_merges, specials, post):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, \
        processors, trainers

    n_added = len(specials) + 1
    n_train = VOCAB_TOTAL - n_added - N_INJECT
    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n_train, min_frequency=2,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    n_model = tok.get_vocab_size(with_added_tokens=False)
    log("trained BPE: model vocab", n_model, "(asked for %d)" % n_train)
    if n_model != n_train:
        die("trained vocab %d != %d" % (n_model, n_train))

    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    if sorted(vocab.values()) != list(range(len(vocab))):
        die("trained ids are not dense")
    b2u = bytes_to_unicode()
    injected = []
    for w in INJECT_WORDS:
        bl = "".join(b2u[b] for b in w.encode("utf-8"))
        if bl not in vocab and len(injected) < N_INJECT:
            vocab[bl] = len(vocab)
            injected.append(w)
    if len(injected) != N_INJECT:
        die("could inject only %r" % injected)
    log("injected into the vocab:", {w: vocab["".join(b2u[b] for b in w.encode())]
                                     for w in injected})
    tok = Tokenizer.from_str(json.dumps(j))

    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken(NONSPECIAL, special=False, normalized=False)])

    if post == "llama3":
        bos = tok.token_to_id(specials[0])
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="%s $A" % specials[0],
                                          pair="%s $A %s $B" % (specials[0], specials[0]),
                                          special_tokens=[(specials[0], bos)]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    # ignore_merges must be in the file as asked, whatever training did.
    j = json.loads(tok.to_str())
    if j["model"].get("ignore_merges") != ignore_merges:
        log("NOTE: model.ignore_merges was %r after training; setting %r"
            % (j["model"].get("ignore_merges"), ignore_merges))
        j["model"]["ignore_merges"] = ignore_merges
        tok = Tokenizer.from_str(json.dumps(j))
    j = json.loads(tok.to_str())
    assert j["model"]["ignore_merges"] == ignore_merges
    assert j["model"]["byte_fallback"] is False

    vocab = tok.get_vocab(with_added_tokens=False)
    missing = [c for c in bytes_to_unicode().values() if c not in vocab]
    if missing:
        die("byte-level symbols missing from vocab: %r" % missing)
    total = tok.get_vocab_size(with_added_tokens=True)
    ids = sorted(tok.get_vocab(with_added_tokens=True).values())
    if ids != list(range(total)):
        die("ids are not dense 0..%d" % (total - 1))
    log("tokenizer: total vocab", total, "specials",
        {s: tok.token_to_id(s) for s in specials + [NONSPECIAL]})
    return tok, injected


def swap_merges_spelling(tok_json_text):
    j = json.loads(tok_json_text)
    merges = j["model"]["merges"]
    if not merges:
        die("no merges")
    if isinstance(merges[0], list):
        form = "pairs"
        for a, b in merges:
            assert " " not in a and " " not in b
        j["model"]["merges"] = ["%s %s" % (a, b) for a, b in merges]
    else:
        form = "strings"
        j["model"]["merges"] = [m.split(" ", 1) for m in merges]
    return form, j


def ignore_merges_witnesses(tok, limit=8):
    """Vocab words whose ids differ with ignore_merges flipped: cases that
    fail if the C side ignores the flag."""
    from tokenizers import Tokenizer
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = not j["model"]["ignore_merges"]
    alt = Tokenizer.from_str(json.dumps(j))
    u2b = {v: k for k, v in bytes_to_unicode().items()}
    found = []
    n_checked = 0
    for token, _ in sorted(tok.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1]):
        try:
            text = bytes(u2b[c] for c in token).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if len(tok.pre_tokenizer.pre_tokenize_str(text)) != 1:
            continue
        n_checked += 1
        a = tok.encode(text, add_special_tokens=False).ids
        b = alt.encode(text, add_special_tokens=False).ids
        if a != b:
            found.append((text, a, b))
    log("ignore_merges=%r: %d single-piece vocab words checked, %d encode differently with "
        "the flag flipped" % (not j["model"]["ignore_merges"], n_checked, len(found)))
    for t, a, b in found[:limit]:
        log("   %r: as is %r, flipped %r" % (t, a, b))
    return [t for t, _, _ in found[:limit]]


def make_cases(tok, texts, invalid):
    cases = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        dec = tok.decode(ids, skip_special_tokens=False)
        if dec != t:
            die("round trip failed for %r: ids %r decode to %r" % (t, ids, dec))
        cases.append({"text": t, "ids": ids, "decoded": dec})
    for bs in invalid:
        t = bs.decode("utf-8", errors="replace")
        ids = tok.encode(t, add_special_tokens=False).ids
        dec = tok.decode(ids, skip_special_tokens=False)
        if dec != t:
            die("round trip failed for replaced %r" % t)
        cases.append({"bytes_b64": base64.b64encode(bs).decode("ascii"), "replaced_text": t,
                      "ids": ids, "decoded": dec})
    return cases


def do_tokenizers(out):
    from tokenizers import Tokenizer
    toks = {}
    log("--- tokenizer-llama3")
    injected = {}
    toks["tokenizer-llama3.json"], injected["tokenizer-llama3.json"] = build_tokenizer(
        LLAMA3_PATTERN, True, LLAMA3_SPECIALS, "llama3")
    log("--- tokenizer-qwen2")
    toks["tokenizer-qwen2.json"], injected["tokenizer-qwen2.json"] = build_tokenizer(
        QWEN2_PATTERN, False, QWEN2_SPECIALS, "qwen2")

    for name, tok in toks.items():
        tok.save(os.path.join(out, name))  # as the library saves it (pretty)
    # reload from disk: the cases must come from the files as written
    toks = {name: Tokenizer.from_file(os.path.join(out, name)) for name in toks}

    raw = open(os.path.join(out, "tokenizer-llama3.json"), encoding="utf-8").read()
    form, swapped = swap_merges_spelling(raw)
    log("library saved merges as", form, "-> stringmerges file uses the other spelling")
    sm_name = "tokenizer-llama3-stringmerges.json"
    write_json(os.path.join(out, sm_name), swapped)
    toks[sm_name] = Tokenizer.from_file(os.path.join(out, sm_name))

    witnesses = ignore_merges_witnesses(toks["tokenizer-llama3.json"])
    witnesses += [w for w in ignore_merges_witnesses(toks["tokenizer-qwen2.json"])
                  if w not in witnesses]
    if len(witnesses) < 3:
        die("too few ignore_merges witnesses: %r" % witnesses)
    texts = list(VALID_TEXTS)
    texts += [w for w in witnesses if w not in texts]
    texts += ["".join(witnesses), "The%s's%s, %s" % tuple(witnesses[:3])]
    # sanity: no valid text has a surrogate
    for t in texts:
        t.encode("utf-8")

    all_cases = {}
    for name, tok in toks.items():
        all_cases[name] = make_cases(tok, texts, INVALID_BYTES)
        log(name, ": %d cases, %d ids in all" % (len(all_cases[name]),
                                                sum(len(c["ids"]) for c in all_cases[name])))
    if all_cases[sm_name] != all_cases["tokenizer-llama3.json"]:
        die("the string-merges tokenizer encodes differently")
    log("stringmerges file encodes identically")
    write_json(os.path.join(out, "tokenizer_cases.json"), all_cases)

    # a few things worth seeing in the log
    tj = json.loads(raw)
    log("llama3 model keys:", sorted(tj["model"].keys()))
    log("llama3 added_tokens[0]:", json.dumps(tj["added_tokens"][0]))
    log("llama3 added_tokens[-1]:", json.dumps(tj["added_tokens"][-1]))
    log("llama3 pre_tokenizer:", json.dumps(tj["pre_tokenizer"]))
    log("llama3 merges[:3]:", json.dumps(tj["model"]["merges"][:3], ensure_ascii=False))
    for c in all_cases["tokenizer-llama3.json"][:3]:
        log("case", json.dumps(c, ensure_ascii=False))
    return toks, {"merges_saved_as": form, "ignore_merges_witnesses": witnesses,
                  "injected_vocab_words": injected,
                  "n_cases": {k: len(v) for k, v in all_cases.items()}}

# ---------------------------------------------------------------- models --


def init_weights(model, seed):
    """Seeded, deterministic init. Linear weights and embeddings: normal with
    std 1/sqrt(fan_in) (not 0.02: with 0.02 attention is ~uniform and the
    logits ~flat, so RoPE / mask / GQA bugs would move the logits by < 1e-3);
    RMSNorm weights 1 + 0.1*randn; biases 0.1*randn."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            elif p.dim() == 3:  # fused experts [E][out][in] (transformers 5's MoE layout)
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[2]))
            else:
                die("unexpected parameter %s %s" % (name, tuple(p.shape)))


def call_save_pretrained(model, d, max_shard_size=None):
    params = inspect.signature(model.save_pretrained).parameters
    kw = {}
    if "safe_serialization" in params:
        kw["safe_serialization"] = True
    if max_shard_size is not None:
        kw["max_shard_size"] = max_shard_size
    log("save_pretrained(%s, %r)" % (d, kw))
    model.save_pretrained(d, **kw)


def manual_shard(d, n_shards=2):
    """Fallback if save_pretrained would not shard something this small:
    split model.safetensors ourselves, in the library's layout."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    names = sorted(sd)
    per = (len(names) + n_shards - 1) // n_shards
    wmap = {}
    total = 0
    for i in range(n_shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, n_shards)
        part = {k: sd[k].contiguous() for k in names[i * per:(i + 1) * per]}
        save_file(part, os.path.join(d, fn), metadata={"format": "pt"})
        for k, v in part.items():
            wmap[k] = fn
            total += v.numel() * v.element_size()
    os.remove(path)
    write_json(os.path.join(d, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": wmap})


def per_expert_layout(d):
    """Published Qwen3-MoE checkpoints name every expert's projections
    (model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight). Where this
    transformers saved its fused in-memory layout instead (experts.gate_up_proj
    [E][2I][D], experts.down_proj [E][D][I]), rewrite the file as published;
    the reload below checks transformers reads it back to the same weights."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    fused = [k for k in sd if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj")]
    if not fused:
        log("experts saved per expert, as published")
        return
    log("NOTE: experts saved fused (%d tensors); rewriting per expert" % len(fused))
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out["%s%d.gate_proj.weight" % (base, e)] = v[e, :inter].contiguous()
                out["%s%d.up_proj.weight" % (base, e)] = v[e, inter:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out["%s%d.down_proj.weight" % (base, e)] = v[e].contiguous()
        else:
            out[k] = v
    save_file(out, path, metadata={"format": "pt"})


def load_f32(cls, d):
    import torch
    try:
        m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()
    for n, p in m.named_parameters():
        if p.dtype != torch.float32:
            die("reloaded %s is %s" % (n, p.dtype))
    return m


def greedy(model, prompt, n_new=16):
    import torch
    # 1. a plain loop of full forwards: pure argmax
    seq = list(prompt)
    margins = []
    with torch.no_grad():
        for _ in range(n_new):
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
            top = torch.topk(logits, 2)
            seq.append(int(top.indices[0]))
            margins.append(r7(top.values[0] - top.values[1]))
    loop_ids = seq[len(prompt):]
    # 2. generate(), eos disabled so it never stops early
    gen_ids = None
    try:
        gc = copy.deepcopy(model.generation_config)
        gc.eos_token_id = None
        gc.do_sample = False
        gc.num_beams = 1
        gc.max_new_tokens = n_new
        gc.min_new_tokens = n_new
        gc.pad_token_id = 0
        model.generation_config = gc
        t = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(input_ids=t, attention_mask=torch.ones_like(t),
                                 generation_config=gc)
        if hasattr(out, "sequences"):
            out = out.sequences
        gen_ids = out[0, len(prompt):].tolist()
    except Exception:
        log("generate() FAILED (the loop's ids are still recorded):")
        traceback.print_exc()
    if gen_ids is not None and gen_ids != loop_ids:
        log("WARNING: generate() %r != argmax loop %r (margins %r)" % (gen_ids, loop_ids,
                                                                          margins))
    return {"prompt_ids": list(prompt),
            "new_ids": gen_ids if gen_ids is not None else loop_ids,
            "new_ids_argmax_loop": loop_ids,
            "generate_matches_loop": gen_ids == loop_ids,
            "margins": margins}


def default_inv_freq(theta, dim):
    import torch
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def build_model(spec, tok, out, versions):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    name = spec["name"]
    log("=== model", name)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    cfg_kw = dict(spec["config"])
    cfg_kw["vocab_size"] = vocab
    if spec["arch"] == "llama":
        cfg_cls, model_cls = LlamaConfig, LlamaForCausalLM
    elif spec["arch"] == "qwen3_moe":
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
        cfg_cls, model_cls = Qwen3MoeConfig, Qwen3MoeForCausalLM
    else:
        cfg_cls, model_cls = Qwen2Config, Qwen2ForCausalLM
    cfg = cfg_cls(**cfg_kw)
    torch.manual_seed(spec["seed"])
    model = model_cls(cfg)
    init_weights(model, spec["seed"])
    model.eval()

    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16,
             "float32": torch.float32}[spec["dtype"]]
    model = model.to(dtype)
    call_save_pretrained(model, d, spec.get("max_shard_size"))
    files = sorted(os.listdir(d))
    log("saved:", files)
    if spec.get("max_shard_size"):
        if "model.safetensors.index.json" not in files:
            log("NOTE: save_pretrained did not shard; sharding by hand")
            manual_shard(d)
        idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        shards = sorted(set(idx["weight_map"].values()))
        if len(shards) < 2:
            die("only %d shard(s)" % len(shards))
        log("shards:", shards)
    if spec["arch"] == "qwen3_moe":
        per_expert_layout(d)
    shutil.copyfile(os.path.join(out, spec["tokenizer"]), os.path.join(d, "tokenizer.json"))

    # what is in the files
    st_files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    tensors = {}
    for f in st_files:
        h = safetensors_header(os.path.join(d, f))
        for k, v in h.items():
            if k != "__metadata__":
                tensors[k] = (v["dtype"], v["shape"], f)
    for k in sorted(tensors):
        log("   %-50s %s %s %s" % (k, *tensors[k]))
    saved_dtypes = sorted(set(v[0] for v in tensors.values()))
    cfg_json = json.load(open(os.path.join(d, "config.json")))
    log("config.json:", json.dumps(cfg_json, sort_keys=True))

    # reload as float32 and run on the CPU
    m = load_f32(model_cls, d)
    if cfg_kw.get("tie_word_embeddings"):
        if m.lm_head.weight.data_ptr() != m.model.embed_tokens.weight.data_ptr():
            die("lm_head is not tied after reload")
        if any(k.startswith("lm_head") for k in tensors):
            log("NOTE: lm_head.weight is saved although tied")
    # the weights are what was saved, exactly
    sd = m.state_dict()
    with torch.no_grad():
        for k, p in model.state_dict().items():
            if k in sd and not torch.equal(sd[k], p.float()):
                die("reloaded %s differs from the saved weights" % k)

    if spec["name"].startswith("qwen2"):
        if cfg_json.get("use_sliding_window") is not False or cfg_json.get("sliding_window"):
            die("sliding window in effect: %r / %r" % (cfg_json.get("use_sliding_window"),
                                                        cfg_json.get("sliding_window")))
    if cfg_json.get("vocab_size") != vocab:
        die("config vocab_size %r != tokenizer %d" % (cfg_json.get("vocab_size"), vocab))

    rot = m.model.rotary_emb
    if hasattr(rot, "inv_freq"):
        inv = rot.inv_freq.float()
    else:
        log("NOTE: rotary_emb has no inv_freq; computing it with ROPE_INIT_FUNCTIONS")
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        rtype = cfg_kw["rope_parameters"]["rope_type"]
        inv = ROPE_INIT_FUNCTIONS[rtype](m.config, "cpu")[0].float()
    theta = cfg_kw["rope_parameters"]["rope_theta"]
    dflt = default_inv_freq(theta, cfg_json.get("head_dim") or
                            cfg_kw["hidden_size"] // cfg_kw["num_attention_heads"])
    changed = int((~torch.isclose(inv, dflt, rtol=1e-6, atol=0)).sum())
    log("rope inv_freq:", [r7(v) for v in inv], "changed vs default: %d of %d"
        % (changed, inv.numel()), "attention_scaling", getattr(rot, "attention_scaling", None))
    if spec.get("expect_rope_changed") and changed == 0:
        die("llama3 rope scaling changed no frequency")
    if not spec.get("expect_rope_changed") and changed != 0:
        die("rope frequencies changed without scaling")

    ids = spec["input_ids"]
    ids2 = spec["batch_input_ids"]
    captured = {}

    def hook(_mod, _inp, output):
        captured["layer0"] = (output[0] if isinstance(output, (tuple, list)) else output).detach()

    handle = m.model.layers[0].register_forward_hook(hook)
    with torch.no_grad():
        o1 = m(input_ids=torch.tensor([ids]), output_hidden_states=True)
    handle.remove()
    with torch.no_grad():
        o2 = m(input_ids=torch.tensor([ids2]))
    hs = getattr(o1, "hidden_states", None)
    if hs is None:
        log("NOTE: output_hidden_states gave nothing; layer 0 from a forward hook")
        layer0 = captured["layer0"][0].float()
        emb = m.model.embed_tokens(torch.tensor([ids]))[0].float().detach()
    else:
        layer0 = hs[1][0].float()
        emb = hs[0][0].float()
        if not torch.equal(layer0, captured["layer0"][0].float()):
            log("WARNING: hidden_states[1] != layer 0's output (hook)")
    logits = o1.logits[0].float()
    exp = {
        "model": name,
        "architecture": model_cls.__name__,
        "dtype_saved": spec["dtype"],
        "safetensors_dtypes": saved_dtypes,
        "compute": "float32, CPU, attn_implementation=eager, weights as saved upcast to float32",
        "input_ids": ids,
        "input_text": tok.decode(ids, skip_special_tokens=False),
        "logits": r7_list(logits),
        "argmax": logits.argmax(-1).tolist(),
        "batch_input_ids": ids2,
        "batch_logits": r7_list(o2.logits[0].float()),
        "rope_inv_freq": r7_list(inv),
        "greedy": greedy(m, ids),
        "hidden_states_note": "hidden_states[i] = HF output_hidden_states: [0] embeddings, "
                              "[i] after layer i-1, the last one after the final norm",
    }
    if spec.get("dump_layer0"):
        exp["hidden_after_layer0"] = r7_list(layer0)
        exp["embeddings"] = r7_list(emb)
    write_json(os.path.join(d, "expected.json"), exp, compact=True)
    g = exp["greedy"]
    log("greedy new_ids:", g["new_ids"], "generate==loop:", g["generate_matches_loop"],
        "min margin:", min(g["margins"]))
    log("logits[0][:5]:", exp["logits"][0][:5], "std %.4f" % float(logits.std()))

    size = folder_size(d)
    for f in sorted(os.listdir(d)):
        log("   %-40s %8d" % (f, os.path.getsize(os.path.join(d, f))))
    log("%s: %d bytes" % (name, size))
    if size >= 1024 * 1024:
        die("%s is over 1 MB" % name)
    return {"files": sorted(os.listdir(d)), "bytes": size, "safetensors_dtypes": saved_dtypes,
            "generate_matches_loop": g["generate_matches_loop"]}


def model_specs(toks):
    l3 = toks["tokenizer-llama3.json"]
    q2 = toks["tokenizer-qwen2.json"]
    bos = l3.token_to_id("<|begin_of_text|>")
    l3_eos = [l3.token_to_id("<|end_of_text|>"), l3.token_to_id("<|eot_id|>")]
    s1 = "The quick brown fox jumps over the lazy dog, and then it sleeps."
    s2 = "Hello, world! 123"

    def enc(t, s):
        return t.encode(s, add_special_tokens=False).ids

    l3_ids = ([bos] + enc(l3, s1))[:12]
    l3_ids2 = ([bos] + enc(l3, s2))[:7]
    q2_ids = enc(q2, s1)[:12]
    q2_ids2 = enc(q2, s2)[:7]
    assert len(l3_ids) == 12 and len(q2_ids) == 12 and len(l3_ids2) == 7 and len(q2_ids2) == 7
    return [
        {"name": "llama-gqa", "arch": "llama", "dtype": "bfloat16", "seed": SEED + 1,
         "tokenizer": "tokenizer-llama3.json", "expect_rope_changed": True, "dump_layer0": True,
         "input_ids": l3_ids, "batch_input_ids": l3_ids2,
         "config": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        rms_norm_eps=1e-5, max_position_embeddings=256,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                         "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 64},
                        tie_word_embeddings=False, bos_token_id=bos, eos_token_id=l3_eos)},
        {"name": "llama-tied", "arch": "llama", "dtype": "float32", "seed": SEED + 2,
         "tokenizer": "tokenizer-llama3.json",
         "input_ids": l3_ids, "batch_input_ids": l3_ids2,
         "config": dict(hidden_size=48, intermediate_size=128, num_hidden_layers=3,
                        num_attention_heads=6, num_key_value_heads=6,
                        rms_norm_eps=1e-6, max_position_embeddings=128,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                        tie_word_embeddings=True, bos_token_id=bos,
                        eos_token_id=l3.token_to_id("<|end_of_text|>"))},
        {"name": "qwen3-moe", "arch": "qwen3_moe", "dtype": "bfloat16", "seed": SEED + 4,
         "tokenizer": "tokenizer-qwen2.json",
         "input_ids": q2_ids, "batch_input_ids": q2_ids2,
         "config": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                        rms_norm_eps=1e-6, max_position_embeddings=256,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        use_sliding_window=False, tie_word_embeddings=False,
                        bos_token_id=None, eos_token_id=q2.token_to_id("<|im_end|>"))},
        {"name": "qwen2-bias", "arch": "qwen2", "dtype": "float16", "seed": SEED + 3,
         "tokenizer": "tokenizer-qwen2.json", "max_shard_size": "100KB",
         "input_ids": q2_ids, "batch_input_ids": q2_ids2,
         "config": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=1,
                        rms_norm_eps=1e-6, max_position_embeddings=256,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        use_sliding_window=False, tie_word_embeddings=False,
                        bos_token_id=None, eos_token_id=q2.token_to_id("<|im_end|>"))},
    ]


def versions():
    v = {"python": platform.python_version(), "platform": platform.platform()}
    for mod in ("torch", "transformers", "tokenizers", "safetensors", "numpy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            v[mod] = "unavailable: %s" % e
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=None,
                    help="build only these models (the tokenizers are always made; copy back what you need)")
    args = ap.parse_args()
    out = args.out
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    v = versions()
    log("versions:", json.dumps(v))
    import torch
    torch.manual_seed(SEED)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    random.seed(SEED)

    toks, tok_info = do_tokenizers(out)
    models = {}
    for spec in model_specs(toks):
        if args.only is not None and spec["name"] not in args.only:
            continue
        models[spec["name"]] = build_model(spec, toks[spec["tokenizer"]], out, v)

    script = open(os.path.abspath(__file__), "rb").read()
    write_json(os.path.join(out, "VERSIONS.json"), {
        "versions": v,
        "seed": SEED,
        "script": "tools/make_golden.py",
        "script_sha256": hashlib.sha256(script).hexdigest(),
        "tokenizers": tok_info,
        "models": models,
        "rules": {
            "ids": "Tokenizer.encode(text, add_special_tokens=False).ids",
            "decoded": "Tokenizer.decode(ids, skip_special_tokens=False)",
            "invalid_utf8": "ids of bytes.decode('utf-8', errors='replace'): each maximal "
                            "invalid subsequence becomes one U+FFFD, as Python's decoder does",
            "logits": "float32 on CPU, eager attention, saved weights upcast to float32; "
                      "floats rounded to 7 significant digits",
            "greedy": "argmax, eos disabled, 16 new tokens; margins = top1 - top2 per step",
        },
    })
    log("DONE")


if __name__ == "__main__":
    main()
