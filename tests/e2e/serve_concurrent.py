"""serve_concurrent.py: continuous batching is invisible in the answers.

Requests of different prompts, max_tokens, stop sequences and streaming
sent all at once to `tokbench serve` get the same answers, usage and
finish_reason as the same requests sent one at a time (greedy decoding:
each request's tokens depend on its own prompt only). Standard library
only; tests/test_serve.sh starts the server.

usage: serve_concurrent.py PORT TASKS_JSONL
"""
import json
import sys
import threading
import urllib.request


def post(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        if not body.get("stream"):
            j = json.load(r)
            c = j["choices"][0]
            return c["text"], j["usage"]["completion_tokens"], c["finish_reason"]
        text, usage, finish = "", None, None
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]["completion_tokens"]
            for c in j.get("choices", []):
                text += c.get("text", "")
                finish = c.get("finish_reason") or finish
        return text, usage, finish


def main():
    port = int(sys.argv[1])
    items = [json.loads(l) for l in open(sys.argv[2]) if l.strip()][:24]
    bodies = []
    for i, it in enumerate(items):
        b = {"model": "ar-small", "prompt": it["prompt"], "max_tokens": 2 + (i * 7) % 30, "temperature": 0}
        if i % 3 == 0:
            b["stream"] = True
            b["stream_options"] = {"include_usage": True}
        if i % 5 == 0:
            b["stop"] = [" "]
        bodies.append(b)
    serial = [post(port, b) for b in bodies]
    concurrent = [None] * len(bodies)

    def one(k):
        concurrent[k] = post(port, bodies[k])
    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [(k, serial[k], concurrent[k]) for k in range(len(bodies)) if serial[k] != concurrent[k]]
    for k, s, c in bad:
        print("FAIL: request %d (max_tokens %d): alone %r, concurrent %r" % (k, bodies[k]["max_tokens"], s, c))
    lengths = sorted({s[1] for s in serial})
    print("%d requests, completion lengths %s; %d differ" % (len(bodies), lengths, len(bad)))
    sys.exit(1 if bad or len(lengths) < 3 else 0)


main()
