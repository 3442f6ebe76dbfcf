#!/usr/bin/env python3
"""A faulty OpenAI-compatible server for the HTTP backend's fault tests.

Standard library only. It speaks enough of POST /v1/completions and
POST /v1/chat/completions (streamed as SSE with a usage chunk and [DONE],
or one JSON body) for plugins/http, and misbehaves on request: the first
path segment picks the fault, so a suite points each backend at its own
base URL, e.g. url = http://127.0.0.1:PORT/stall/v1.

  /v1/...               a healthy server: max_tokens chunks "w1 w2 ...",
                        finish_reason "length", usage, [DONE]
  /ok/v1/...            the same
  /reset/v1/...         2 chunks, then the connection is reset (RST)
  /reset_early/v1/...   reset before any response byte
  /stall/v1/...         2 chunks, then nothing: the socket stays open until
                        the client gives up (its timeout)
  /http500/v1/...       HTTP 500 with an OpenAI error object
  /http429/v1/...       HTTP 429 (Retry-After: 1) with an error object
  /garbage/v1/...       200 text/event-stream, then random bytes
  /garbage_sse/v1/...   200 text/event-stream, "data:" events of random bytes
  /garbage_http/v1/...  random bytes instead of an HTTP response
  /big/v1/...           a 100 MB body: streamed, chunks of 256 KiB of text
                        each; not streamed, one JSON response of 100 MB
  /big_event/v1/...     streamed: one 100 MB SSE event (a data line that
                        never ends)
  /huge_usage/v1/...    healthy, but usage.completion_tokens is 2^32 + the
                        true count (a 32-bit count would wrap to the truth)
  /over_usage/v1/...    healthy, but usage.completion_tokens is 3e9 (fits
                        32 bits unsigned; far more than max_tokens allows)
  /under_usage/v1/...   healthy, but usage.completion_tokens is 2: fewer
                        than the chunks that carried text
  /zero_usage/v1/...    healthy, but usage.completion_tokens is 0
  /no_done/v1/...       healthy, but the stream ends after its finish_reason
                        and usage chunks, without [DONE]
  /no_end/v1/...        the text chunks and usage, then the stream ends:
                        neither a finish_reason nor [DONE]
  /no_template/v1/...   a chat endpoint without a chat template: a request
                        of one message is healthy; one of more (a second
                        turn) gets HTTP 400 with a long JSON message that
                        ends in "(END)"

GET /stats answers {"requests": N, "by_fault": {...}, "sent_bytes": N}.

usage: fault_server.py [--port N] [--port-file FILE] [--quiet]
Port 0 (the default) picks a free port; --port-file receives it once the
server listens. SIGTERM or SIGINT stops it.
"""

import argparse
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = {"ok", "reset", "reset_early", "stall", "http500", "http429", "garbage",
          "garbage_sse", "garbage_http", "big", "big_event", "huge_usage", "over_usage", "no_template",
          "under_usage", "zero_usage", "no_done", "no_end"}
NO_TEMPLATE = ("As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat "
               "template if the tokenizer does not define one. This server was started without --chat-template, "
               "and the model's tokenizer_config.json has none: a conversation of more than one message cannot "
               "be rendered (END)")
BIG_BYTES = 100 * 1000 * 1000
PIECE = 256 * 1024

stopping = threading.Event()
stats_lock = threading.Lock()  # never held while sending
stats = {"requests": 0, "by_fault": {}, "sent_bytes": 0, "client_gone": 0}


def count(fault, sent=0, gone=0):
    with stats_lock:
        if fault:
            stats["requests"] += 1
            stats["by_fault"][fault] = stats["by_fault"].get(fault, 0) + 1
        stats["sent_bytes"] += sent
        stats["client_gone"] += gone


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fault_server/1"
    quiet = False

    def log_message(self, fmt, *args):
        if not self.quiet:
            sys.stderr.write("fault_server: " + (fmt % args) + "\n")

    # ------------------------------------------------------------ plumbing

    def send_chunk(self, data):
        """One piece of a chunked body."""
        if isinstance(data, str):
            data = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
        count(None, sent=len(data))

    def end_chunks(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def send_json(self, code, obj, extra_headers=()):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        count(None, sent=len(body))

    def reset(self):
        """Close with RST: SO_LINGER on, zero timeout."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def wait_for_client_to_leave(self):
        """Send nothing; return when the client closes (or we stop)."""
        sock = self.connection
        while not stopping.is_set():
            r, _, _ = select.select([sock], [], [], 0.2)
            if r:
                try:
                    if not sock.recv(65536):
                        break
                except OSError:
                    break
        count(None, gone=1)
        self.close_connection = True

    # ------------------------------------------------------------ the API

    def chunk_obj(self, chat, text=None, finish=None, usage=None):
        if chat:
            choice = {"index": 0, "delta": {} if text is None else {"content": text}, "finish_reason": finish}
            obj = {"id": "chatcmpl-f", "object": "chat.completion.chunk", "model": "fault", "choices": [choice]}
        else:
            choice = {"index": 0, "text": "" if text is None else text, "finish_reason": finish}
            obj = {"id": "cmpl-f", "object": "text_completion", "model": "fault", "choices": [choice]}
        if usage is not None:
            obj["choices"] = []
            obj["usage"] = usage
        return obj

    def event(self, obj):
        return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"

    def do_GET(self):
        if self.path == "/stats":
            with stats_lock:
                snap = json.loads(json.dumps(stats))
            self.send_json(200, snap)
        elif self.path.endswith("/health") or self.path == "/":
            self.send_json(200, {"status": "ok"})
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = [p for p in self.path.split("/") if p]
        fault = "ok"
        if parts and parts[0] in FAULTS:
            fault = parts.pop(0)
        if parts[:1] != ["v1"] or parts[1:] not in (["completions"], ["chat", "completions"]):
            self.send_json(404, {"error": {"message": "no such endpoint: " + self.path, "type": "invalid_request_error"}})
            return
        chat = parts[1] == "chat"
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            self.send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
            return
        count(fault)
        try:
            self.serve_fault(fault, chat, req)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            count(None, gone=1)  # the client gave up (its cap or timeout)
            self.close_connection = True

    def serve_fault(self, fault, chat, req):
        stream = bool(req.get("stream"))
        n = max(1, int(req.get("max_tokens") or 16))
        prompt_tokens = 8
        words = ["w%d" % (i + 1) for i in range(n)]
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        if fault == "huge_usage":
            usage["completion_tokens"] = 2 ** 32 + n
        elif fault == "over_usage":
            usage["completion_tokens"] = 3000000000
        elif fault == "under_usage":
            usage["completion_tokens"] = 2
        elif fault == "zero_usage":
            usage["completion_tokens"] = 0
        rng = random.Random(len(raw_key(req)))

        if fault == "no_template" and chat and len(req.get("messages") or []) > 1:
            self.send_json(400, {"error": {"message": NO_TEMPLATE, "type": "BadRequestError", "code": 400}})
            return
        if fault == "http500":
            self.send_json(500, {"error": {"message": "scripted fault: internal server error", "type": "server_error"}})
            return
        if fault == "http429":
            self.send_json(429, {"error": {"message": "scripted fault: rate limit reached", "type": "rate_limit_error"}},
                           [("Retry-After", "1")])
            return
        if fault == "reset_early":
            self.reset()
            return
        if fault == "garbage_http":
            junk = bytes(rng.getrandbits(8) for _ in range(4096))
            self.wfile.write(b"\x00\xffNOT-HTTP " + junk)
            self.wfile.flush()
            self.close_connection = True
            return

        if not stream:
            if fault == "big":
                # one JSON object, 100 MB, sent in pieces
                head = b'{"id":"cmpl-f","object":"text_completion","choices":[{"index":0,"text":"'
                tail = b'","finish_reason":"length"}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(BIG_BYTES))
                self.end_headers()
                self.wfile.write(head)
                left = BIG_BYTES - len(head) - len(tail)
                piece = b"x" * PIECE
                while left > 0:
                    k = min(left, PIECE)
                    self.wfile.write(piece[:k])
                    count(None, sent=k)
                    left -= k
                self.wfile.write(tail)
                self.wfile.flush()
                return
            if fault in ("garbage", "garbage_sse"):
                junk = bytes(rng.getrandbits(8) for _ in range(4096))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(junk)))
                self.end_headers()
                self.wfile.write(junk)
                self.wfile.flush()
                return
            if fault in ("reset", "stall"):
                # half a response: the headers promise more than comes
                body = b'{"id":"cmpl-f","choices":[{"index":0,"te'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "4096")
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                if fault == "reset":
                    self.reset()
                else:
                    self.wait_for_client_to_leave()
                return
            text = " ".join(words)
            if chat:
                obj = {"id": "chatcmpl-f", "object": "chat.completion", "model": "fault",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "length"}], "usage": usage}
            else:
                obj = {"id": "cmpl-f", "object": "text_completion", "model": "fault",
                       "choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": usage}
            self.send_json(200, obj)
            return

        self.start_stream()
        if fault == "garbage":
            for _ in range(16):
                self.send_chunk(bytes(rng.getrandbits(8) for _ in range(4096)))
            self.end_chunks()
            return
        if fault == "garbage_sse":
            junk = bytes(rng.choice(b"{}[]:,\"\\abcdefXYZ0123456789 \x01\xfe") for _ in range(200))
            self.send_chunk(b"data: " + junk + b"\n\n")
            self.end_chunks()
            return
        if fault == "big":
            text = "x" * PIECE
            left, i = BIG_BYTES, 0
            while left > 0 and not stopping.is_set():
                ev = self.event(self.chunk_obj(chat, text if i else " " + text))
                self.send_chunk(ev)
                left -= len(ev)
                i += 1
            self.send_chunk(self.event(self.chunk_obj(chat, None, "length")))
            self.send_chunk("data: [DONE]\n\n")
            self.end_chunks()
            return
        if fault == "big_event":
            self.send_chunk("data: ")
            piece = b"x" * PIECE
            left = BIG_BYTES
            while left > 0 and not stopping.is_set():
                self.send_chunk(piece)
                left -= PIECE
            self.send_chunk("\n\n")
            self.end_chunks()
            return

        # ok, reset, stall: tokens one chunk each
        for i, w in enumerate(words):
            if fault in ("reset", "stall") and i == 2:
                if fault == "reset":
                    self.reset()
                else:
                    self.wait_for_client_to_leave()
                return
            self.send_chunk(self.event(self.chunk_obj(chat, w if i == 0 else " " + w)))
        if fault != "no_end":
            self.send_chunk(self.event(self.chunk_obj(chat, None, "length")))
        if (req.get("stream_options") or {}).get("include_usage"):
            self.send_chunk(self.event(self.chunk_obj(chat, usage=usage)))
        if fault not in ("no_done", "no_end"):
            self.send_chunk("data: [DONE]\n\n")
        self.end_chunks()


def raw_key(req):
    """A stable seed per request content (random bytes differ by prompt)."""
    return json.dumps(req.get("prompt") or req.get("messages") or "", sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    Handler.quiet = args.quiet
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True

    def stop(signum, frame):
        stopping.set()
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    port = srv.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    print("fault_server: listening on 127.0.0.1:%d" % port, file=sys.stderr, flush=True)
    try:
        srv.serve_forever(poll_interval=0.1)
    finally:
        stopping.set()
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
