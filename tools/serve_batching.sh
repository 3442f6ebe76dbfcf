#!/usr/bin/env bash
# Continuous against static batching in `tokbench serve`, same model, same
# client, same call: the trained small AR model (models/small-llama, real
# tokenizer, so every token streams as text) served twice -- once with
# --batching continuous (the default), once with --batching static -- and
# measured through plugins/http at each concurrency (closed loop, fixed
# lengths: ignore_eos, prompt 32 tokens, 128 out). Prints one row per
# (batching, concurrency): output tokens/s (aggregate), requests/s, TTFT
# and TPOT medians and p99. docs/PERFORMANCE.md records a run.
#
#   tools/serve_batching.sh BUILD [DEVICE] [CONCURRENCY LIST]
#   e.g. tools/serve_batching.sh build-gpu cuda "1, 8, 32"
set -uo pipefail
build=${1:-build}
device=${2:-cpu}
conc=${3:-"1, 8, 32"}
src=$(cd "$(dirname "$0")/.." && pwd)
tb="$build/tokbench"
export TOKBENCH_PLUGIN_PATH="$build/plugins"
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cores=$(nproc)
cat >"$tmp/server.ini" <<EOT
[suite]
name = served-small
[backend ar-small]
plugin = ar
model = $src/models/small-llama
device = $device
ignore_eos = true
EOT
for mode in continuous static; do
    # the server on every core but 0; the client on core 0
    taskset -c 1-$((cores - 1)) "$tb" serve --backend ar-small "$tmp/server.ini" --port 0 --max-batch 32 \
        --batching $mode --port-file "$tmp/$mode.port" >"$tmp/$mode.log" 2>&1 &
    pids+=($!)
done
for mode in continuous static; do
    for _ in $(seq 1 300); do [ -s "$tmp/$mode.port" ] && break; sleep 0.1; done
    [ -s "$tmp/$mode.port" ] || { echo "serve --batching $mode did not start"; cat "$tmp/$mode.log"; exit 1; }
done
cat >"$tmp/client.ini" <<EOT
[suite]
name = serve-batching
warmup = 1
repeat = 3
case_timeout = 600
[matrix]
prompt_tokens = 32
max_new_tokens = 128
concurrency = $conc
[backend continuous]
plugin = http
url = http://127.0.0.1:$(cat "$tmp/continuous.port")
model_name = ar-small
tokenizer = $src/models/small-llama/tokenizer.json
[backend static]
plugin = http
url = http://127.0.0.1:$(cat "$tmp/static.port")
model_name = ar-small
tokenizer = $src/models/small-llama/tokenizer.json
EOT
taskset -c 0 "$tb" run "$tmp/client.ini" --db "$tmp/b.db" >"$tmp/run.out" 2>"$tmp/run.err" \
    || { cat "$tmp/run.err"; tail -30 "$tmp/run.out"; exit 1; }
[ -n "${BATCHING_OUT:-}" ] && cp "$tmp/b.db" "$tmp/run.out" "$tmp/continuous.log" "$tmp/static.log" "$BATCHING_OUT/"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores; device $device"
grep -h "loaded\|listening" "$tmp/continuous.log" "$tmp/static.log" | cut -c1-160
echo "batching | concurrency | requests/call | output tok/s | req/s | TTFT ms p50 / p99 | TPOT ms p50 / p99 | status"
python3 - "$tmp/b.db" <<'EOT'
import sqlite3, sys
q = """select backend, concurrency, requests / calls, printf('%.0f', aggregate_tps), printf('%.1f', req_per_s),
  printf('%.2f / %.2f', ttft_ms, ttft_p99_ms), printf('%.3f / %.3f', tpot_ms, tpot_p99_ms), status
  from summary order by concurrency, backend"""
for row in sqlite3.connect(sys.argv[1]).execute(q):
    print(" | ".join(str(x) for x in row))
EOT
