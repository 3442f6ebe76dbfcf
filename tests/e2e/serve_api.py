#!/usr/bin/env python3
"""serve_api.py: what `tokbench serve` answers, checked over HTTP with the
standard library only (tests/test_serve.sh starts the servers).

usage: serve_api.py AR_PORT LLADA_PORT NULL_PORT CHATML_PORT LLAMA3_PORT TINY_PORT TASKS_JSONL TEXT_JSONL

TINY_PORT serves models/tiny-llama-random (random weights, a BOS before
every prompt, special tokens in its tokenizer).

Prints "ok: ..." / "FAIL: ..." lines; exits 1 on any failure."""
import json
import re
import sys
import urllib.error
import urllib.request

EOS = "<|endoftext|>"
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg)


def ok(msg):
    print("ok: " + msg)


def check(cond, msg):
    if cond:
        ok(msg)
    else:
        fail(msg)
    return cond


def post(port, path, body):
    """(status, decoded JSON) of a non-streamed request."""
    req = urllib.request.Request("http://127.0.0.1:%d/v1/%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def stream(port, path, body):
    """The chunks of a streamed request (the JSON of each data: line)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request("http://127.0.0.1:%d/v1/%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    chunks = []
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r.read().decode().split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def metric(port, name):
    """A counter of the server's /metrics (its one sample)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=300) as r:
        for line in r.read().decode().split("\n"):
            if line.startswith(name + "{"):
                return float(line.split()[-1])
    return None


def text_of(resp, chat):
    c = resp["choices"][0]
    return c["message"]["content"] if chat else c["text"]


def streamed(chunks, chat):
    """(text, finish_reason, usage, deltas) of a stream."""
    deltas, finish, usage = [], None, None
    for c in chunks:
        if c.get("usage"):
            usage = c["usage"]
        for ch in c.get("choices", []):
            t = ch.get("delta", {}).get("content") if chat else ch.get("text")
            if t:
                deltas.append(t)
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    return "".join(deltas), finish, usage, deltas


def ask(port, prompt, chat, **kw):
    if chat:
        return post(port, "chat/completions", dict(messages=[{"role": "user", "content": prompt}], **kw))
    return post(port, "completions", dict(prompt=prompt, **kw))


def ask_stream(port, prompt, chat, **kw):
    if chat:
        return stream(port, "chat/completions", dict(messages=[{"role": "user", "content": prompt}], **kw))
    return stream(port, "completions", dict(prompt=prompt, **kw))


def answers(port, name, items, answers_ar=None):
    """1, 7: the answer text, its usage and finish reason, streamed or
    not, on both endpoints. Returns {prompt: (text, completion_tokens)}."""
    got = {}
    bad = []
    for it in items:
        for chat in (0, 1):
            st, r = ask(port, it["prompt"], chat, max_tokens=16)
            if st != 200:
                bad.append("%s: HTTP %d %s" % (it["prompt"], st, r))
                continue
            text, fin, use = text_of(r, chat), r["choices"][0]["finish_reason"], r["usage"]
            stext, sfin, suse, deltas = streamed(ask_stream(port, it["prompt"], chat, max_tokens=16), chat)
            where = "%s %s %r" % (name, "chat" if chat else "completions", it["prompt"])
            if EOS in text or any(EOS in d for d in deltas):
                bad.append("%s: the EOS text in the answer: %r / %r" % (where, text, deltas))
            if (stext, sfin, suse) != (text, fin, use):
                bad.append("%s: streamed %r %s %s, not %r %s %s" % (where, stext, sfin, suse, text, fin, use))
            n = use["completion_tokens"]
            if fin != "stop" or not 0 < n < 16:
                bad.append("%s: finish_reason %s, completion_tokens %d for %r (an answer that ends)" %
                           (where, fin, n, text))
            if use["total_tokens"] != use["prompt_tokens"] + n:
                bad.append("%s: total_tokens" % where)
            got[it["prompt"]] = (text, n)
    check(not bad, "%s: %d answers, streamed and not, on both endpoints: no EOS text, finish_reason stop, "
          "usage the answer's tokens%s" % (name, len(got), "".join("\n   " + b for b in bad[:8])))
    return got


def main():
    ar, llada, null, chatml, llama3, tiny = (int(a) for a in sys.argv[1:7])
    tasks = [json.loads(line) for line in open(sys.argv[7])]
    texts = [json.loads(line) for line in open(sys.argv[8])]
    # answers that end within 16 tokens: a few of each task kind
    items = []
    for tag in ("add", "sort", "copy", "lookup", "pair"):
        items += [t for t in tasks if tag in t["tags"]][:2]

    # ---------------------------------------------------- 1, 7: answers
    got_ar = answers(ar, "ar", items)
    got_ll = answers(llada, "llada", items)
    # the count is the answer's tokens: the AR model's count of the same text
    same = [(p, got_ar[p][1], got_ll[p][1]) for p in got_ar if p in got_ll and got_ar[p][0] == got_ll[p][0]]
    check(same and all(a == b for _, a, b in same),
          "llada: completion_tokens = the AR count of the same answer text (%d items; not the canvas)" % len(same))
    # AR: the count is exact: max_tokens = that count gives the same text, cut by length
    bad = []
    for p, (text, n) in list(got_ar.items())[:4]:
        st, r = ask(ar, p, 0, max_tokens=n)
        if st != 200 or r["choices"][0]["text"] != text or r["choices"][0]["finish_reason"] != "length" \
                or r["usage"]["completion_tokens"] != n:
            bad.append("%r max_tokens %d: %s" % (p, n, r))
        st, r = ask(ar, p, 0, max_tokens=n - 1)
        if st != 200 or not text.startswith(r["choices"][0]["text"]) or r["choices"][0]["finish_reason"] != "length":
            bad.append("%r max_tokens %d: %s" % (p, n - 1, r))
    check(not bad, "ar: max_tokens = completion_tokens gives the same answer, finish_reason length"
          + "".join("\n   " + b for b in bad))
    # diffusion: max_tokens not a multiple of block_length (16): the canvas rounds up
    bad = []
    for mt in (1, 3, 8, 17, 40):
        for chat in (0, 1):
            st, r = ask(llada, items[0]["prompt"], chat, max_tokens=mt)
            n = r.get("usage", {}).get("completion_tokens", -1)
            if st != 200 or not 0 < n <= mt or (n == mt) != (r["choices"][0]["finish_reason"] == "length"):
                bad.append("max_tokens %d: %d %s" % (mt, st, r))
    check(not bad, "llada: max_tokens 1, 3, 8, 17, 40 with block_length 16: 200, at most max_tokens tokens"
          + "".join("\n   " + b for b in bad))
    t16 = got_ll[items[0]["prompt"]][0]
    st, r = ask(llada, items[0]["prompt"], 0, max_tokens=2)
    check(st == 200 and r["choices"][0]["text"] == t16[:len(r["choices"][0]["text"])] and
          r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 2,
          "llada: max_tokens 2 returns 2 tokens of the answer, finish_reason length: %s" % r.get("choices"))

    # ---------------------------------------------------- 8: stop
    p, (text, n) = next((p, v) for p, v in got_ar.items() if len(v[0].strip()) >= 3)
    cut = text.strip()[1:3]  # two characters inside the answer: a stop sequence over tokens
    want = text[:text.index(cut)]
    for chat in (0, 1):
        st, r = ask(ar, p, chat, max_tokens=16, stop=[cut, "never seen"])
        check(st == 200 and text_of(r, chat) == want and r["choices"][0]["finish_reason"] == "stop" and
              0 < r["usage"]["completion_tokens"] < n,
              "stop %r on %r (%s): %r, finish_reason stop, fewer tokens: %s" %
              (cut, text, "chat" if chat else "completions", want, r.get("usage")))
        stext, sfin, suse, deltas = streamed(ask_stream(ar, p, chat, max_tokens=16, stop=cut), chat)
        check(stext == want and sfin == "stop" and suse == r["usage"],
              "stop streamed: %r (deltas %r), nothing of the stop sequence sent" % (stext, deltas))
    # A NUL in a stop string: cJSON would cut it there (an early stop, or
    # "\u0000" read as empty), so it is refused, naming the NUL and stop.
    for chat in (0, 1):
        for stop in ("t\u0000ZZZ", "\u0000", [cut, "a\u0000"]):
            st, r = ask(ar, p, chat, max_tokens=16, stop=stop)
            e = r.get("error") or {}
            check(st == 400 and e.get("param") == "stop" and "U+0000 (NUL)" in e.get("message", ""),
                  "stop %r (%s): 400 naming stop and the NUL: %s" % (stop, "chat" if chat else "completions",
                                                                      e.get("message", r)))

    # ---------------------------------------------------- 8: temperature, seed
    opening = texts[0]["prompt"]
    greedy = ask(ar, opening, 0, max_tokens=24)[1]["choices"][0]["text"]
    st, r = ask(ar, opening, 0, max_tokens=24, temperature=0)
    check(st == 200 and r["choices"][0]["text"] == greedy, "temperature 0 = greedy")
    outs = {}
    for seed in (1, 2, 3, 4, 5, 1):
        st, r = ask(ar, opening, 0, max_tokens=24, temperature=2.0, seed=seed)
        if st != 200:
            fail("temperature 2, seed %d: %s" % (seed, r))
            continue
        outs.setdefault(seed, []).append(r["choices"][0]["text"])
    check(len(set(outs.get(1, []))) == 1, "seed 1 twice at temperature 2: the same answer %r" % outs.get(1))
    check(len({v[0] for v in outs.values()} | {greedy}) > 2,
          "temperature 2 samples: seeds 1-5 give different answers, not the greedy one: %r" % outs)
    for chat in (0, 1):
        a = ask(ar, opening, chat, max_tokens=24, temperature=2.0, seed=9)[1]
        b = ask(ar, opening, chat, max_tokens=24, temperature=2.0, seed=9)[1]
        check(text_of(a, chat) == text_of(b, chat), "seed 9 repeats on %s" % ("chat" if chat else "completions"))
    st, r = ask(null, "hello", 0, max_tokens=4, temperature=0)
    check(st == 200, "null backend (no sampling): temperature 0 accepted")
    for field, value in (("temperature", 0.7), ("top_p", 0.5), ("top_k", 5)):
        st, r = ask(null, "hello", 0, max_tokens=4, **{field: value})
        check(st == 400 and r["error"]["param"] == field and field in r["error"]["message"],
              "null backend: %s %s refused, 400 naming it: %s" % (field, value, r.get("error", {}).get("message")))
    st, r = ask(ar, opening, 0, max_tokens=4, top_p=0.9, top_k=40, temperature=0.5, seed=3)
    check(st == 200, "ar: top_p, top_k, temperature, seed accepted (its options)")

    # ---------------------------------------------------- 8: refused fields
    refusals = [("n", 2), ("logprobs", 1), ("best_of", 2), ("echo", True), ("presence_penalty", 0.5),
                ("frequency_penalty", 1), ("logit_bias", {"5": 10}), ("suffix", "x"), ("repetition_penalty", 1.1),
                ("min_p", 0.1), ("top_k", 1.5), ("response_format", {"type": "json_object"}), ("tools", []), ("temperature", 101),
                ("top_p", 0), ("stop", ["a", "b", "c", "d", "e"]), ("max_tokens", 0)]
    bad = []
    for chat in (0, 1):
        for field, value in refusals + ([("logprobs", True), ("top_logprobs", 2)] if chat else []):
            st, r = ask(ar, "1+1=", chat, **{field: value})
            if st != 400 or r["error"]["param"] != field or field not in r["error"]["message"]:
                bad.append("%s %s %r: %d %s" % ("chat" if chat else "completions", field, value, st, r))
    check(not bad, "%d fields refused with 400 naming the field" % (2 * len(refusals) + 2)
          + "".join("\n   " + b for b in bad))
    st, r = ask(ar, "1+1=", 1, max_tokens=4, logprobs=False, n=1, presence_penalty=0, user="u")
    check(st == 200, "neutral values accepted (logprobs false, n 1, presence_penalty 0, user)")
    st, r = post(ar, "chat/completions", {"messages": [{"role": "tool", "content": "x"}]})
    check(st == 400 and r["error"]["param"] == "messages[0].role", "role tool refused: %s" % r["error"])

    # ---------------------------------------------------- 8: model
    st, r = ask(ar, "1+1=", 0, model="gpt-4o")
    check(st == 404 and r["error"]["code"] == "model_not_found" and r["error"]["param"] == "model",
          "unknown model: 404 model_not_found: %s" % r.get("error"))
    st, r = ask(ar, "1+1=", 1, model="gpt-4o")
    check(st == 404 and r["error"]["code"] == "model_not_found", "unknown model on chat: 404")
    st, r = ask(ar, "1+1=", 0, model="ar-small", max_tokens=2)
    check(st == 200 and r["model"] == "ar-small", "the served label is the model's name")

    # ---------------------------------------------------- 3: context length
    long_prompt = "1+" * 100 + "1="
    st, r = ask(ar, long_prompt, 0, max_tokens=1)
    P = r["usage"]["prompt_tokens"]
    st, r = ask(ar, long_prompt, 0, max_tokens=256 - P)
    check(st == 200, "prompt %d + max_tokens %d = 256, the context: served" % (P, 256 - P))
    for chat in (0, 1):
        for mt in (256 - P + 1, 1000000):
            if mt == 1000000 and failures:
                break  # the check is not there: a million tokens would run (and fill the memory)
            st, r = ask(ar, long_prompt, chat, max_tokens=mt)
            check(st == 400 and "context is 256 tokens" in r["error"]["message"] and "max_tokens %d" % mt in
                  r["error"]["message"], "prompt %d + max_tokens %d: 400 before any work: %s" %
                  (P, mt, r.get("error", {}).get("message")))
    st, r = ask(llada, "1+1=", 0, max_tokens=250)
    check(st == 400 and "as a canvas of 256" in r["error"]["message"],
          "llada: the rounded canvas counts: %s" % r.get("error", {}).get("message"))

    # ---------------------------------------------------- 8: chat templates
    conv = [{"role": "system", "content": " Answer with a number. "}, {"role": "user", "content": "93+45="}]

    def prompt_tokens(port, chat_body=None, prompt=None):
        if chat_body is not None:
            st, r = post(port, "chat/completions", dict(messages=chat_body, max_tokens=1))
        else:
            st, r = post(port, "completions", dict(prompt=prompt, max_tokens=1))
        return r["usage"]["prompt_tokens"] if st == 200 else (st, r)

    chatml_sys = ("<|im_start|>system\n Answer with a number. <|im_end|>\n<|im_start|>user\n93+45=<|im_end|>\n"
                  "<|im_start|>assistant\n")
    chatml_default = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n93+45=<|im_end|>"
                      "\n<|im_start|>assistant\n")
    got, want, plain = prompt_tokens(chatml, conv), prompt_tokens(chatml, prompt=chatml_sys), \
        prompt_tokens(chatml, prompt=" Answer with a number. \n93+45=")
    check(got == want and got != plain, "ChatML: a system message's prompt_tokens %s = the template's text %s "
          "(the contents joined: %s)" % (got, want, plain))
    got, want = prompt_tokens(chatml, conv[1:]), prompt_tokens(chatml, prompt=chatml_default)
    check(got == want, "ChatML: no system message: the template's default one: %s = %s" % (got, want))
    llama = ("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
             "Today Date: 26 Jul 2024\n\nAnswer with a number.<|eot_id|><|start_header_id|>user<|end_header_id|>"
             "\n\n93+45=<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    got, want = prompt_tokens(llama3, conv), prompt_tokens(llama3, prompt=llama)
    check(got == want, "Llama-3.1: prompt_tokens %s = the template's text %s" % (got, want))
    st, r = post(ar, "chat/completions", {"messages": conv})
    check(st == 400 and r["error"]["param"] == "messages" and "no chat template" in r["error"]["message"],
          "no template: a system message refused, not joined: %s" % r.get("error"))
    got, want = prompt_tokens(ar, conv[1:]), prompt_tokens(ar, prompt="93+45=")
    check(got == want, "no template: one user message is the prompt: %s = %s" % (got, want))

    # ---------------------------------------------------- usage.prompt_tokens: every token read, BOS included
    # The context check counts the prompt as the backend reads it ("prompt
    # N + BOS" where the backend puts a BOS before it); usage.prompt_tokens
    # and vllm:prompt_tokens_total count the same tokens, as vLLM does.
    bos = {}
    for name, port in (("tiny-llama-random", tiny), ("ar-small", ar)):
        st, r = ask(port, "hello world", 0, max_tokens=1000000)
        m = re.search(r"\(prompt (\d+)( \+ BOS)? \+ max_tokens", (r.get("error") or {}).get("message", ""))
        if not check(st == 400 and m, "%s: the context check's count: %s" % (name, r)):
            continue
        bos[name] = bool(m.group(2))
        read = int(m.group(1)) + bos[name]
        before = metric(port, "vllm:prompt_tokens_total")
        st, r = ask(port, "hello world", 0, max_tokens=2)
        after = metric(port, "vllm:prompt_tokens_total")
        check(st == 200 and r["usage"]["prompt_tokens"] == read and after - before == read,
              "%s: usage.prompt_tokens %s and vllm:prompt_tokens_total +%s = the tokens the context check counts, %s"
              " (%s)" % (name, r.get("usage", {}).get("prompt_tokens"), after - before, read, m.group(0)))
    check(bos == {"tiny-llama-random": True, "ar-small": False},
          "a BOS before tiny-llama-random's prompts, none before ar-small's: %s" % bos)

    # ---------------------------------------------------- special tokens' text skipped
    # tiny-llama-random's greedy answer to "hello world" holds
    # <|begin_of_text|> (an added token marked special) within 16 tokens:
    # its text is left out, streamed or not (vLLM's skip_special_tokens),
    # a stop sequence matches the text returned only, and
    # usage.completion_tokens still counts every token generated.
    specials = ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|mdm_mask|>")
    for chat in (0, 1):
        where = "tiny-llama-random, %s" % ("chat" if chat else "completions")
        st, r = ask(tiny, "hello world", chat, max_tokens=16)
        if not check(st == 200, "%s: answered: %s" % (where, r)):
            continue
        text, use = text_of(r, chat), r["usage"]
        stext, sfin, suse, deltas = streamed(ask_stream(tiny, "hello world", chat, max_tokens=16), chat)
        check(not any(s in text for s in specials) and use["completion_tokens"] == 16 and
              r["choices"][0]["finish_reason"] == "length",
              "%s: no special-token text in %r, completion_tokens %d (every token)" %
              (where, text, use["completion_tokens"]))
        check(stext == text and suse == use and not any(s in d for d in deltas for s in specials),
              "%s: streamed the same text, no special-token text in a delta: %r" % (where, deltas))
        st, r = ask(tiny, "hello world", chat, max_tokens=16, stop="<|begin_of_text|>")
        check(st == 200 and text_of(r, chat) == text and r["choices"][0]["finish_reason"] == "length",
              "%s: stop <|begin_of_text|> never matches (not in the text returned): %s" %
              (where, r["choices"][0] if st == 200 else r))

    print("%d failures" % failures if failures else "all serve API checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
