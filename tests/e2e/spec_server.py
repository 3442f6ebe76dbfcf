#!/usr/bin/env python3
"""A stand-in for a speculative-decoding server, for tests/e2e/test_spec.sh.

Standard library only. POST /v1/completions (streamed as SSE with a usage
chunk and [DONE], or one JSON body) answers max_tokens words; the first
path segment picks how it reports speculative decoding:

  /sglang/v1/...     SGLang's per-request meta_info: 4 verifications of
                     4-token drafts accepting 4, 0, 3, 1 (8 of 16;
                     spec_accept_histogram [1, 1, 0, 1, 1]),
                     spec_accept_length 3.0. Streamed: a top-level
                     meta_info in the usage chunk; not streamed: in
                     choices[0].
  /sglang_len/v1/... only spec_verify_ct 4 and spec_accept_length 3.0
                     (an older SGLang): accepted 8, no drafted count
  /bad/v1/...        accepted 17 of 16 drafted: impossible
  /malformed/v1/...  spec_verify_ct "four": not a count
  /vllm/v1/...       nothing per request; GET /metrics serves vLLM's
                     counters, each scrape one more such request's worth
                     (drafts 4, draft tokens 16, accepted 8, per position
                     3, 2, 2, 1), so their growth over any scrapes gives
                     the same ratios

GET /v1/models answers one model; GET /count the /metrics scrapes so far.
usage: spec_server.py --port-file FILE
"""
import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
scrapes = 0
META = {"spec_verify_ct": 4, "spec_accept_token_num": 8, "spec_draft_token_num": 16,
        "spec_accept_rate": 0.5, "spec_accept_length": 3.0, "spec_accept_histogram": [1, 1, 0, 1, 1]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_body(self, code, obj, ctype="application/json"):
        body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        global scrapes
        if self.path == "/count":
            self.send_body(200, str(scrapes), "text/plain")
        elif self.path == "/metrics":
            with lock:
                scrapes += 1
                k = scrapes
            lab = 'engine="0",model_name="m"'
            lines = ["# TYPE vllm:spec_decode_num_drafts counter",
                     f"vllm:spec_decode_num_drafts_total{{{lab}}} {4 * k}",
                     f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {16 * k}",
                     f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {8 * k}"]
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{p}"}} {a * k}'
                      for p, a in enumerate([3, 2, 2, 1])]
            self.send_body(200, "\n".join(lines) + "\n", "text/plain")
        elif self.path.endswith("/models"):
            self.send_body(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        else:
            self.send_body(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        mode = [p for p in self.path.split("/") if p][0]
        n = max(1, int(req.get("max_tokens") or 16))
        usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
        meta = None
        if mode == "sglang":
            meta = dict(META)
        elif mode == "sglang_len":
            meta = {"spec_verify_ct": 4, "spec_accept_length": 3.0}
        elif mode == "bad":
            meta = dict(META, spec_accept_token_num=17)
        elif mode == "malformed":
            meta = dict(META, spec_verify_ct="four")
        words = ["w%d" % (i + 1) for i in range(n)]
        if not req.get("stream"):
            choice = {"index": 0, "text": " ".join(words), "finish_reason": "length"}
            if meta:
                choice["meta_info"] = meta
            self.send_body(200, {"id": "x", "object": "text_completion", "model": "m", "choices": [choice],
                                 "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj):
            data = ("data: " + json.dumps(obj) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        for i, w in enumerate(words):
            event({"id": "x", "object": "text_completion", "model": "m",
                   "choices": [{"index": 0, "text": w if i == 0 else " " + w, "finish_reason": None}]})
        event({"id": "x", "object": "text_completion", "model": "m",
               "choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        last = {"id": "x", "object": "text_completion", "model": "m", "choices": [], "usage": usage}
        if meta:
            last["meta_info"] = meta
        event(last)
        data = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda s, f: threading.Thread(target=srv.shutdown, daemon=True).start())
    with open(args.port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.replace(args.port_file + ".tmp", args.port_file)
    srv.serve_forever(poll_interval=0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
