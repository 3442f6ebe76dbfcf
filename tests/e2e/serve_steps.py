"""serve_steps.py: continuous batching with two steps in flight hands
every token to its own request (tests/e2e/test_serve_steps.sh starts the
servers; the backend is tests/plugins/stepper.c, whose answer to a prompt
is known: token i is 'a' + (sum of the prompt's bytes + i) % 26).

usage: serve_steps.py PORT MODE MODEL
  MODE answers: 16 requests of different prompts and max_tokens at once,
       streamed and not; two streams left after 2 chunks by their
       clients; every finished answer is its prompt's
  MODE refill: slow steps, 2 slots: two streams hold both slots and
       their clients leave after 2 chunks while 4 streamed requests wait:
       the slots they left are refilled, and every stream gets its own
       prompt's answer (a slot refilled in the STEP that leaves it would
       hand the step before's token of the request that left to the
       request that joined)
  MODE crossing: large answers (token_bytes = 1000) ending one a step
       while a request with an 80 KB prompt waits for a slot: every answer
       comes (a STEP of that join sent while the worker writes a STEPPED
       larger than the pipe deadlocked the two processes)
  MODE failing: the backend's 5th step fails (fail_at_step = 5): the
       first request, which needs 30 steps, fails with a 5xx; requests
       after it are answered (the server opened a new session)
Standard library only.
"""
import http.client
import json
import sys
import threading
import time


MODEL = "s"  # the served backend's label (argv[3])


def want(prompt, n, width=1):
    s = sum(prompt.encode())
    return "".join(chr(ord("a") + (s + i) % 26) * width for i in range(n))


def post(port, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        r.read()
        c.close()
        return r.status, None
    if not body.get("stream"):
        j = json.loads(r.read())
        c.close()
        return 200, j["choices"][0]["text"]
    text = ""
    for line in r:
        line = line.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            for ch in json.loads(line[6:]).get("choices", []):
                text += ch.get("text", "")
    c.close()
    return 200, text


def leave_early(port, prompt, max_tokens=400, holding=None, go=None):
    """A stream whose client reads two chunks and goes (after `go` is
    set, when given; `holding` is released once it has its two chunks)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    got = 0
    for line in r:
        if line.startswith(b"data: "):
            got += 1
            if got == 2:
                break
    if holding:
        holding.release()
        go.wait()
    c.sock.close()
    c.close()


def answers(port):
    bodies = []
    for i in range(16):
        b = {"model": MODEL, "prompt": "prompt %d %s" % (i, "x" * (i % 5)), "max_tokens": 3 + (i * 7) % 40}
        if i % 2:
            b["stream"] = True
        bodies.append(b)
    got = [None] * len(bodies)

    def one(k):
        got[k] = post(port, bodies[k])
    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(bodies))]
    threads += [threading.Thread(target=leave_early, args=(port, "gone %d" % k)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [(b["prompt"], g) for b, g in zip(bodies, got) if g != (200, want(b["prompt"], b["max_tokens"]))]
    for p, g in bad:
        print("wrong answer to %r: %r" % (p, g))
    # and after the clients that left: a request alone
    after = post(port, {"model": MODEL, "prompt": "after", "max_tokens": 9})
    if after != (200, want("after", 9)):
        print("wrong answer after the clients left: %r" % (after,))
        bad.append(after)
    return not bad


def refill(port):
    # both slots held by streams that will leave; the four requests queue
    # behind them; then the two clients go, so the server frees their slots
    # with requests waiting (the 0.3 s lets the four reach the queue: were
    # they late, the slots would be refilled later and nothing would be
    # wrong, only this path not taken)
    holding, go = threading.Semaphore(0), threading.Event()
    leavers = [threading.Thread(target=leave_early, args=(port, "gone %d" % k, 4000, holding, go)) for k in range(2)]
    for t in leavers:
        t.start()
    holding.acquire()
    holding.acquire()
    bodies = [{"model": MODEL, "prompt": "wait %d" % k, "max_tokens": 20, "stream": True} for k in range(4)]
    got = [None] * 4

    def one(k):
        got[k] = post(port, bodies[k])
    threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    go.set()
    for t in leavers + threads:
        t.join()
    bad = [(b["prompt"], g) for b, g in zip(bodies, got) if g != (200, want(b["prompt"], 20))]
    for p, g in bad:
        print("wrong answer to %r after a refill: %r" % (p, g))
    return not bad


def crossing(port):
    bodies = [{"model": MODEL, "prompt": "big %d" % k, "max_tokens": 95 + k} for k in range(11)]
    bodies.append({"model": MODEL, "prompt": "c" * 80000, "max_tokens": 5})
    got = [None] * len(bodies)

    def one(k):
        try:
            got[k] = post(port, bodies[k], timeout=240)  # a hang guard (meson stops the test at 300 s)
        except OSError as e:  # a deadlocked server answers nothing
            got[k] = ("no answer", str(e))
    threads = [threading.Thread(target=one, args=(k,)) for k in range(11)]
    for t in threads:
        t.start()
    time.sleep(0.15)  # the 11 hold every slot (~0.5 s of 5 ms steps); the long prompt waits
    threads.append(threading.Thread(target=one, args=(11,)))
    threads[-1].start()
    for t in threads:
        t.join()
    bad = [(b["prompt"][:12], str(g)[:80]) for b, g in zip(bodies, got)
           if g != (200, want(b["prompt"], b["max_tokens"], 1000))]
    for p, g in bad:
        print("request %r: %s" % (p, g))
    return not bad


def failing(port):
    ok = True
    first = post(port, {"model": MODEL, "prompt": "first", "max_tokens": 30})
    if first[0] < 500:
        print("the request whose session failed at step 5: %r" % (first,))
        ok = False
    got = [None] * 3

    def one(k):
        got[k] = post(port, {"model": MODEL, "prompt": "f%d" % k, "max_tokens": 12})
    threads = [threading.Thread(target=one, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):
        if got[k] != (200, want("f%d" % k, 12)):
            print("a request after the failed session: %r" % (got[k],))
            ok = False
    return ok


def main():
    global MODEL
    port, mode, MODEL = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    ok = {"answers": answers, "refill": refill, "crossing": crossing, "failing": failing}[mode](port)
    print("ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
