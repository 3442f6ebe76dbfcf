#!/usr/bin/env python3
"""Hostile servers for issue 38's items 4, 10 and 14, on top of
fault_server.py's healthy OpenAI-compatible server (whose paths it keeps).

  POST /echo_key/v1/...     HTTP 401 whose error message echoes the
                            Authorization header it got (as some APIs do:
                            "Incorrect API key provided: Bearer sk-...")
  POST /reused_stall/v1/... per connection: the first request is answered
                            (healthy, keep-alive), each later one on the
                            same connection gets nothing at all
  POST /reused_stall_mid/v1/...  the same, but the later ones get their
                            headers and 2 chunks, then nothing
  GET  /hang_metrics        accepts, reads the request, never answers (a
                            hung Prometheus endpoint)
  GET  /metrics             a healthy exposition (one gauge), counted
                            ("metrics")
  GET  /stats               fault_server's, plus "x_secret" (requests that
                            carried an X-Secret header: a header injected
                            through a CR/LF in a key), "auth" (requests
                            with an Authorization header) and
                            "hang_metrics" (scrapes held)

usage: hostile_server.py [--port N] [--port-file FILE] [--quiet]
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_server  # noqa: E402
from fault_server import count, stats, stats_lock  # noqa: E402

stats.update({"x_secret": 0, "auth": 0, "hang_metrics": 0, "metrics": 0})


def bump(key):
    with stats_lock:
        stats[key] += 1


class Hostile(fault_server.Handler):
    def setup(self):
        super().setup()
        self.served = 0  # requests answered on this connection

    def do_GET(self):
        if self.path == "/hang_metrics":
            bump("hang_metrics")
            self.wait_for_client_to_leave()
            return
        if self.path == "/metrics":
            bump("metrics")
            body = b"# TYPE up gauge\nup 1\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def do_POST(self):
        if "X-Secret" in self.headers:
            bump("x_secret")
        auth = self.headers.get("Authorization")
        if auth:
            bump("auth")
        parts = [p for p in self.path.split("/") if p]
        fault = parts[0] if parts else ""
        if fault == "echo_key":
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            count("echo_key")
            self.send_json(401, {"error": {"message": "Incorrect API key provided: %s" % auth,
                                           "type": "invalid_request_error"}})
            return
        if fault in ("reused_stall", "reused_stall_mid"):
            self.served += 1
            if self.served > 1:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                count(fault)
                if fault == "reused_stall_mid":
                    self.start_stream()
                    for w in ("w1", " w2"):
                        self.send_chunk(self.event(self.chunk_obj(False, w)))
                self.wait_for_client_to_leave()
                return
            self.path = "/" + "/".join(parts[1:])  # the first: healthy
        super().do_POST()


def main():
    fault_server.Handler = Hostile
    return fault_server.main()


if __name__ == "__main__":
    sys.exit(main())
