#!/usr/bin/env python3
"""A stand-in for a canvas-bursty server and a token-by-token one, for
tests/e2e/test_canvas.sh (issue 41: tokens per chunk and the bursty rule
through http).

Standard library only. POST /v1/completions, streamed as SSE (with
stream_options.include_usage: a usage chunk and [DONE]), answers
max_tokens words; the first path segment picks how they come:

  /burst/v1/...   a canvas at a time: 16 words a chunk (the last chunk the
                  rest), each chunk carrying the cumulative
                  usage.completion_tokens as vLLM's continuous_usage_stats
                  does; the chunks paced by an event's timeout (30 ms), so
                  each is read on its own
  /token/v1/...   one word a chunk, with the same cumulative usage, paced
                  by 2 ms
  /plain/v1/...   16 words a chunk without usage per chunk (only the final
                  usage chunk): a client cannot tell its tokens per chunk

The pacing only spreads the chunks out; the test checks counts, never a
time. GET /v1/models answers one model.
usage: canvas_server.py --port-file FILE
"""
import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CANVAS = 16


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each chunk goes out when written

    def log_message(self, *a):
        pass

    def send_body(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.endswith("/models"):
            self.send_body(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        else:
            self.send_body(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        mode = [p for p in self.path.split("/") if p][0]
        if mode not in ("burst", "token", "plain") or not req.get("stream"):
            self.send_body(400, {"error": {"message": "streamed /burst, /token or /plain only"}})
            return
        n = max(1, int(req.get("max_tokens") or 16))
        words = ["w%d" % (i + 1) for i in range(n)]
        per = 1 if mode == "token" else CANVAS
        pace = threading.Event()  # never set: its timeout paces the chunks
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj):
            data = ("data: " + json.dumps(obj) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def usage(k):
            return {"prompt_tokens": 8, "completion_tokens": k, "total_tokens": 8 + k}

        for at in range(0, n, per):
            if at:
                pace.wait(0.03 if per > 1 else 0.002)
            text = " ".join(words[at:at + per])
            chunk = {"id": "x", "object": "text_completion", "model": "m",
                     "choices": [{"index": 0, "text": text if at == 0 else " " + text, "finish_reason": None}]}
            if mode != "plain":
                chunk["usage"] = usage(min(n, at + per))
            event(chunk)
        event({"id": "x", "object": "text_completion", "model": "m",
               "choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        event({"id": "x", "object": "text_completion", "model": "m", "choices": [], "usage": usage(n)})
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
