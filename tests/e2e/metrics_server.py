#!/usr/bin/env python3
"""A stand-in for a model server's Prometheus /metrics endpoint (vLLM's
names), for tests/test_telemetry.sh: every scrape is counted and changes
the gauges, so the series stored can be checked against what was served.

usage: metrics_server.py PORT_FILE [MODE]
  MODE ok (default): the exposition format with comments, labels (one
       with escapes), a histogram, a timestamp, and one malformed line
  MODE huge: a body past tokbench's bound (4 MiB), without end
  MODE slow: each answer after 10 s (past the scrape timeout)
Writes the port it listens on to PORT_FILE; GET /count answers how many
/metrics requests it answered."""
import http.server
import sys
import threading
import time

mode = sys.argv[2] if len(sys.argv) > 2 else "ok"
lock = threading.Lock()
scrapes = 0


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        global scrapes
        if self.path == "/count":
            body = str(scrapes).encode()
        elif self.path == "/metrics":
            with lock:
                scrapes += 1
                k = scrapes
            if mode == "slow":
                time.sleep(10)
            if mode == "huge":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                line = b"vllm:num_requests_running 1\n" * 4096
                try:
                    for _ in range(1000):
                        self.wfile.write(line)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            body = (
                "# HELP vllm:num_requests_running Number of requests running.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="m"}} {k}\n'
                f'vllm:gpu_cache_usage_perc{{model_name="m"}} {k / 1000}\n'
                f'vllm:num_requests_waiting{{model_name="a \\"quoted\\" name"}} 0 1700000000000\n'
                "# TYPE vllm:e2e_request_latency_seconds histogram\n"
                f'vllm:e2e_request_latency_seconds_bucket{{le="0.1"}} {k}\n'
                f'vllm:e2e_request_latency_seconds_bucket{{le="+Inf"}} {k}\n'
                f"vllm:e2e_request_latency_seconds_sum {k * 0.05}\n"
                f"vllm:e2e_request_latency_seconds_count {k}\n"
                "process_open_fds +Inf\n"
                "this is not a sample\n"
                "# EOF\n"
            ).encode()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
srv.serve_forever()
