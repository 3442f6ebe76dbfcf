"""serve_hostile.py: hostile clients against a running `tokbench serve`.

Each check waits on events (a socket closed by the server, a log line, a
later request answered); timeouts are hang guards only. Standard library
only; tests/e2e/test_serve_hostile.sh starts the servers and says which
check runs against which.

usage: [TB_API_KEY=KEY] serve_hostile.py CHECK PORT PID LOG
(TB_API_KEY: the server's --api-key-file key, sent with every request)
  limits     (--client-timeout long, --max-connections-per-ip 8): a 9th
             connection from one address is refused while 8 half-sent ones
             are open; other addresses are served meanwhile
  timeout    (--client-timeout 1, --max-connections 8): 8 half-sent
             connections (headers, or a body cut short) are closed by the
             server, after which a request is served
  body       a declared 20 MB body is answered 413 (OpenAI's error shape)
             before it is sent; 16 clients each sending 15 MB of one do not
             grow the server's RSS by 100 MB
  key        401 without or with a wrong key, the key never in the answer
             nor the log; 200 with it; /health open
  slots      (--max-batch 2): two streams dropped mid-way and one never
             read each free their slot (step_leave) before their max_tokens;
             a later request is answered
"""
import json
import os
import socket
import sys
import threading
import time

GUARD = 30  # seconds: a hang guard, never a bound the check relies on
# The server's API key (environment TB_API_KEY), sent with every request
# but those of the key check.
KEY = os.environ.get("TB_API_KEY", "")
AUTH = ("Authorization: Bearer %s\r\n" % KEY).encode() if KEY else b""


def say(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    return ok


def connect(port, src="127.0.0.1", rcvbuf=0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((src, 0))
    s.settimeout(GUARD)
    s.connect(("127.0.0.1", port))
    return s


def read_all(s):
    """Everything until the server closes (or resets) the connection."""
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (ConnectionResetError, BrokenPipeError):
        pass
    return data


def http(port, method, path, body=None, headers=None, src="127.0.0.1"):
    """One request on its own connection: (status, headers text, body bytes);
    status 0 when the server closed without an answer. headers None: the
    key's."""
    s = connect(port, src)
    data = json.dumps(body).encode() if body is not None else b""
    h = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if headers is None:
        headers = {"Authorization": "Bearer " + KEY} if KEY else {}
    for k, v in headers.items():
        h += "%s: %s\r\n" % (k, v)
    if body is not None:
        h += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
    try:
        s.sendall(h.encode() + b"\r\n" + data)
    except (ConnectionResetError, BrokenPipeError):
        pass
    raw = read_all(s)
    s.close()
    if not raw.startswith(b"HTTP/1."):
        return 0, "", raw
    head, _, rest = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():  # de-chunk
        out = b""
        while rest:
            n, _, rest = rest.partition(b"\r\n")
            n = int(n.split(b";")[0], 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        rest = out
    return int(head.split()[1]), head.decode("latin-1"), rest


def answered(port, src="127.0.0.1", max_tokens=4):
    st, _, body = http(port, "POST", "/v1/completions", {"prompt": "hello", "max_tokens": max_tokens}, src=src)
    return st == 200 and "choices" in json.loads(body or b"{}")


def rss_kb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def half_sent(port, src, cut_body=False):
    s = connect(port, src)
    if cut_body:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
    else:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    return s


def closed_by_server(s, deadline):
    """Whether the server closes s (EOF or reset) before the deadline (a
    hang guard), sending nothing but perhaps an error status."""
    try:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        data = read_all(s)
    except socket.timeout:
        return False
    return data == b"" or data.startswith(b"HTTP/1.1 4") or data.startswith(b"HTTP/1.1 5")


def check_limits(port, pid, log, arg):
    held = [half_sent(port, "127.0.0.2") for _ in range(8)]
    ok = say(answered(port, "127.0.0.1"), "another address is served while 8 half-sent connections are open")
    st, _, _ = http(port, "GET", "/health", src="127.0.0.2")
    ok &= say(st == 0, "a 9th connection from the same address is refused (got %s)" % (st or "no answer"))
    for s in held:
        s.close()
    return ok


def check_timeout(port, pid, log, arg):
    held = [half_sent(port, "127.0.0.2", cut_body=i % 2 == 1) for i in range(8)]
    deadline = time.monotonic() + GUARD
    n = sum(closed_by_server(s, deadline) for s in held)
    ok = say(n == 8, "%d of 8 half-sent connections (headers or body cut short) closed by the server" % n)
    for s in held:
        s.close()
    for _ in range(GUARD * 10):  # the server may not have counted the closes yet
        if answered(port):
            return ok & say(True, "a request is served after the half-sent ones were closed")
        time.sleep(0.1)
    return say(False, "no request served after the half-sent connections")


def check_body(port, pid, log, arg):
    s = connect(port)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + AUTH +
              b"Content-Length: 20000000\r\n\r\n")
    try:
        raw = s.recv(65536)
    except (socket.timeout, ConnectionResetError):
        raw = b""
    s.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    ok = say(head.startswith(b"HTTP/1.1 413"), "a declared 20 MB body is answered before it is sent: %r" % head[:40])
    try:
        e = json.loads(body)["error"]
        ok &= say(set(e) >= {"message", "type", "param", "code"} and "16 MiB" in e["message"],
                  "413 in OpenAI's error shape: %s" % e)
    except (ValueError, KeyError, TypeError):
        ok &= say(False, "413 body is not OpenAI's error shape: %r" % body[:200])
    before = rss_kb(pid)
    chunk = b"x" * (1 << 20)
    conns, peak = [], [0]

    def send(i):
        c = connect(port, "127.0.1.%d" % (i + 1))
        conns.append(c)
        try:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Length: 20000000\r\n\r\n")
            for _ in range(15):
                c.sendall(chunk)
        except (ConnectionResetError, BrokenPipeError, socket.timeout):
            pass
    threads = [threading.Thread(target=send, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grown = (rss_kb(pid) - before) / 1024
    for c in conns:
        c.close()
    ok &= say(grown < 100, "16 clients sending 15 MB bodies grew the server's RSS by %.0f MB (ceiling 100)" % grown)
    ok &= say(answered(port), "a request is served after them")
    return ok


def check_key(port, pid, log, arg):
    key = KEY
    ok = say(len(key) > 8, "the server has a key")
    for name, hdr in (("no key", {}), ("a wrong key", {"Authorization": "Bearer " + key[:-1] + "X"}),
                      ("a Basic header", {"Authorization": "Basic " + key})):
        st, head, body = http(port, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, hdr)
        try:
            e = json.loads(body)["error"]
            shape = set(e) >= {"message", "type", "param", "code"} and e["code"] == "invalid_api_key"
        except (ValueError, KeyError, TypeError):
            shape = False
        ok &= say(st == 401 and shape and key.encode() not in body + head.encode(),
                  "%s: 401 in OpenAI's error shape, the key not echoed (%s %r)" % (name, st, body[:120]))
    st, _, body = http(port, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2},
                       {"Authorization": "Bearer " + key})
    ok &= say(st == 200, "the right key: 200 (%s %r)" % (st, body[:120]))
    st, _, _ = http(port, "GET", "/v1/models", headers={"Authorization": "Bearer " + key})
    ok &= say(st == 200, "GET /v1/models with the key: 200")
    st, _, _ = http(port, "GET", "/health", headers={})
    ok &= say(st == 200, "GET /health needs no key")
    ok &= say(key not in open(log).read(), "the key is not in the server's log")
    return ok


def log_lines(log, word):
    return [l for l in open(log).read().splitlines() if word in l]


def wait_log(log, word, n):
    """Whether the log has n lines with word within the hang guard."""
    for _ in range(GUARD * 10):
        if len(log_lines(log, word)) >= n:
            return True
        time.sleep(0.1)
    return False


def check_slots(port, pid, log, arg):
    body = {"prompt": "hello", "max_tokens": 4000, "stream": True}
    data = json.dumps(body).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + AUTH +
           b"Content-Length: %d\r\n\r\n" % len(data)) + data
    # two streams dropped after their first chunk
    for _ in range(2):
        s = connect(port)
        s.sendall(req)
        got = b""
        while b"data: " not in got:
            b = s.recv(4096)
            if not b:
                break
            got += b
        s.close()
    if not say(wait_log(log, "slot is freed", 2), "two streams dropped mid-way free their slots"):
        return False
    ok = say(answered(port), "a request is answered after two streams were dropped mid-way at --max-batch 2")
    # a stream never read, with a small receive buffer
    before = rss_kb(pid)
    s = connect(port, rcvbuf=4096)
    s.sendall(req)
    if not say(wait_log(log, "slot is freed", 3), "a stream never read frees its slot"):
        return False
    grown = (rss_kb(pid) - before) / 1024
    ok &= say(answered(port), "a request is answered while a stream is never read")
    s.close()
    freed = log_lines(log, "slot is freed")
    ok &= say(len(freed) >= 3, "3 slots freed early (step_leave): %s" % freed)
    for l in freed:  # "... freed after N emissions (max_tokens 4000)"
        n = int(l.split("after ")[1].split()[0])
        ok &= say(n < 4000, "left after %d of 4000 tokens: %s" % (n, l.split(": ", 1)[1]))
    ok &= say(any("read nothing" in l for l in freed), "the stream never read was dropped for not reading")
    ok &= say(grown < 100, "the unread stream grew the server's RSS by %.0f MB (ceiling 100)" % grown)
    return ok


def main():
    check, port, pid, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    arg = sys.argv[5] if len(sys.argv) > 5 else None
    fn = {"limits": check_limits, "timeout": check_timeout, "body": check_body, "key": check_key,
          "slots": check_slots}[check]
    sys.exit(0 if fn(port, pid, log, arg) else 1)


if __name__ == "__main__":
    main()
