#!/usr/bin/env python3
"""fault_server.py's healthy server that takes a database's write lock.

The first POST whose max_tokens is --lock-on takes SQLite's write lock on
--db (BEGIN IMMEDIATE, as another tokbench would) before it answers, so
the run that sent it finds the database locked when it stores that case.
It says "locked" on stdout once it holds the lock; SIGUSR1 releases it
(ROLLBACK) and it says "released".

usage: lock_server.py --db FILE --lock-on N [--port-file FILE]
"""

import argparse
import os
import signal
import sqlite3
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_server  # noqa: E402

state = {"conn": None, "done": False}
guard = threading.Lock()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--lock-on", type=int, required=True)
    ap.add_argument("--port-file")
    args = ap.parse_args()

    class Handler(fault_server.Handler):
        quiet = True

        def serve_fault(self, fault, chat, req):
            with guard:
                if not state["done"] and int(req.get("max_tokens") or 0) == args.lock_on:
                    state["done"] = True
                    conn = sqlite3.connect(args.db, timeout=60, isolation_level=None, check_same_thread=False)
                    conn.execute("BEGIN IMMEDIATE")
                    state["conn"] = conn
                    print("locked", flush=True)
            super().serve_fault(fault, chat, req)

    def release(signum, frame):
        with guard:
            if state["conn"] is not None:
                state["conn"].execute("ROLLBACK")
                state["conn"].close()
                state["conn"] = None
                print("released", flush=True)

    signal.signal(signal.SIGUSR1, release)
    fault_server.Handler = Handler
    sys.argv = [sys.argv[0], "--quiet"] + (["--port-file", args.port_file] if args.port_file else [])
    return fault_server.main()


if __name__ == "__main__":
    sys.exit(main())
