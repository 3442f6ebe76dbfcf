#!/usr/bin/env bash
# `tokbench serve`'s continuous batching with two steps in flight
# (serve/serve_batch.c), against tests/plugins/stepper.so, a backend with
# step ops whose answers follow from their prompts alone:
#   1. 16 concurrent requests, streamed and not, of different lengths,
#      beside two streams whose clients leave after two chunks: every
#      answer is its own prompt's (a token handed to the request of
#      another slot, or a slot refilled while the step before still ran
#      for the request that left it, would show), and a request after
#      them is answered;
#   2. slow steps, two slots held by streams whose clients leave while four
#      streamed requests wait: the left slots are refilled in a later STEP
#      than the one that leaves them, and every stream is its prompt's;
#   3. large answers (over the pipe's 64 KiB) ending while a request with
#      an 80 KB prompt waits: every answer comes (a STEP joining it, sent
#      while the worker wrote such an answer, deadlocked both processes);
#   4. the backend's 5th step fails under a request that needs 30 (a
#      second STEP queued behind it): it fails with a 5xx, the server
#      reads past the queued step's answer, opens a new session, and the
#      requests after it are answered.
#
# usage: test_serve_steps.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init serve_steps "$@"
tb_kill_signal=KILL # a deadlocked server (the crossing case, were it broken) ignores SIGTERM
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
stepper="$build/tests/plugins/stepper.so"
[ -f "$stepper" ] || { echo "FAIL: $stepper not built"; exit 1; }

cat >"$tmp/s.ini" <<EOT
[suite]
name = serve-steps
[matrix]
max_new_tokens = 16
[backend s]
plugin = $stepper
[backend slow]
plugin = $stepper
step_us = 500
[backend big]
plugin = $stepper
step_us = 5000
token_bytes = 1000
[backend fails]
plugin = $stepper
fail_at_step = 5
EOT
start_server s "$tb" serve --backend s "$tmp/s.ini" --port 0 --max-batch 4 && ps=$port
start_server slow "$tb" serve --backend slow "$tmp/s.ini" --port 0 --max-batch 2 && pw=$port
start_server big "$tb" serve --backend big "$tmp/s.ini" --port 0 --max-batch 11 && pb=$port
start_server fails "$tb" serve --backend fails "$tmp/s.ini" --port 0 --max-batch 4 && pf=$port
grep -q "continuous batching" "$tmp/s.log" || fail "not served continuously: $(grep -i batch "$tmp/s.log")"

# serve_steps.py's MODE against the server on PORT (BACKEND): pass with
# MESSAGE, else fail with the client's output (no server: start_server
# has failed the test)
steps_case() {
    local port=$1 mode=$2 backend=$3 message=$4 out
    [ -n "$port" ] || return 0 # start_server failed it already
    if out=$(python3 "$src/tests/e2e/serve_steps.py" "$port" "$mode" "$backend" 2>&1); then
        pass "$message"
    else
        fail "$mode: $out"
    fi
}
steps_case "${ps:-}" answers s "16 concurrent requests and 2 that left: every answer its own prompt's"
steps_case "${pw:-}" refill slow "two slots left by their clients, refilled: every stream its own prompt's"
[ -z "${pw:-}" ] || grep -q "its slot is freed" "$tmp/slow.log" ||
    fail "no client was seen leaving: $(tail -5 "$tmp/slow.log")"
steps_case "${pb:-}" crossing big "answers over the pipe's size crossing a long prompt's join: every answer comes"
steps_case "${pf:-}" failing fails "a failed step: its request fails with a 5xx, the next session answers"
[ -z "${pf:-}" ] || grep -q "step() failed" "$tmp/fails.log" ||
    fail "the failed step is not in the server's log: $(tail -5 "$tmp/fails.log")"
tb_finish
