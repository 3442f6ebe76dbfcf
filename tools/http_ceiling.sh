#!/usr/bin/env bash
# The HTTP client's own ceiling: streamed tokens/s that plugins/http can
# time against the null backend (no delays) served by `tokbench serve` on
# loopback, the client on some cores and the servers on the others. A
# benchmark, not a test (nothing to pass or fail; meson does not run it):
# docs/PERFORMANCE.md quotes what it prints.
#
# usage: tools/http_ceiling.sh BUILD_DIR [SERVE_EXE] [CONCURRENCIES] [TOKENS]
#   CONCURRENCIES  e.g. "1, 16, 64, 256" (default)
#   TOKENS         output tokens per request (default 512)
# environment:
#   LOOPS=LIST         the client's event loops, a matrix list ("1, 4"; default 1)
#   CLIENT_CORES=C     the client (tokbench run and its worker) on cores 0..C-1 (default 1)
#   SERVERS=S          S `tokbench serve` processes on one port (--reuse-port),
#                      all on cores C..N-1 (default 1)
#   REPEAT=R           measured calls per case (default 5)
#   CEILING_OUT=DIR    copy the database and logs there
set -uo pipefail
build=$1
serve_exe=${2:-}
conc=${3:-"1, 16, 64, 256"}
tokens=${4:-512}
loops=${LOOPS:-1}
client_cores=${CLIENT_CORES:-1}
servers=${SERVERS:-1}
repeat=${REPEAT:-5}
tb="$build/tokbench"
if "$tb" serve --help >/dev/null 2>&1; then serve=("$tb" serve); else serve=("$serve_exe"); fi
export TOKBENCH_PLUGIN_PATH="$build/plugins"
cores=$(nproc)
[ "$cores" -gt "$client_cores" ] || { echo "needs more than $client_cores cores"; exit 77; }
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT

cat >"$tmp/server.ini" <<EOT
[suite]
name = null-served
[backend null]
plugin = null
prefill_us = 0
step_us = 0
EOT
server_set="$client_cores-$((cores - 1))"
client_set="0-$((client_cores - 1))"
# the first server picks a free port; the others share it (SO_REUSEPORT)
reuse=()
[ "$servers" -gt 1 ] && reuse=(--reuse-port)
taskset -c "$server_set" "${serve[@]}" --backend null "$tmp/server.ini" --port 0 --port-file "$tmp/port" \
    --max-batch 256 "${reuse[@]}" >"$tmp/server1.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/port")
for s in $(seq 2 "$servers"); do
    taskset -c "$server_set" "${serve[@]}" --backend null "$tmp/server.ini" --port "$port" --max-batch 256 \
        --reuse-port >"$tmp/server$s.log" 2>&1 &
    pids+=($!)
done
for s in $(seq 2 "$servers"); do
    for _ in $(seq 1 100); do grep -q listening "$tmp/server$s.log" && break; sleep 0.1; done
done
cat >"$tmp/client.ini" <<EOT
[suite]
name = http-ceiling
warmup = 1
repeat = $repeat
[matrix]
prompt_tokens = 8
max_new_tokens = $tokens
concurrency = $conc
loops = $loops
[backend client]
plugin = http
url = http://127.0.0.1:$port
EOT
# CPU of the servers and their backend processes (children), clock ticks
server_ticks() {
    local t=0 p c
    for p in "${pids[@]}"; do
        for c in $p $(pgrep -P "$p"); do
            t=$((t + $(awk '{print $14 + $15}' /proc/$c/stat 2>/dev/null || echo 0)))
        done
    done
    echo $t
}
s0=$(server_ticks)
start=$(date +%s.%N)
TOKBENCH_DEBUG=1 taskset -c "$client_set" "$tb" run "$tmp/client.ini" --db "$tmp/c.db" \
    >"$tmp/run.out" 2>"$tmp/run.err" || { cat "$tmp/run.err"; exit 1; }
c_wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
s1=$(server_ticks)
[ -n "${CEILING_OUT:-}" ] && cp "$tmp/c.db" "$tmp/run.err" "$tmp/run.out" "$CEILING_OUT/"
hz=$(getconf CLK_TCK)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores;" \
    "client on cores $client_set, $servers server(s) on $server_set"
# per call: "client: N requests, C chunks, K loops, X s loop CPU in W s (busiest loop B%, process P of N cores, U us per chunk)"
echo "client (per measured call, median per case): loops, loop CPU per chunk, busiest loop, process cores used"
grep -o 'client: .*' "$tmp/run.err" | tr -d '(,%' | awk '{ print $2, $6, $23, $17, $19 }' \
    | awk -v per=$((repeat + 1)) '{ k = int((NR - 1) / per); if ((NR - 1) % per == 0) next;
        n[k]++; u[k, n[k]] = $3; b[k, n[k]] = $4; p[k, n[k]] = $5; r[k] = $1; l[k] = $2 }
        END { for (k in n) { asort_u(k) } }
        function asort_u(k,   i, j, t, m) {
            for (i = 1; i <= n[k]; i++) for (j = i + 1; j <= n[k]; j++) if (u[k, j] < u[k, i]) { t = u[k, i]; u[k, i] = u[k, j]; u[k, j] = t }
            m = int((n[k] + 1) / 2)
            printf "  case %d: %5d requests/call, %3d loops: %5.2f us CPU per chunk (%.0f tokens/s per busy core), busiest loop %s%%, process %s cores\n",
                k + 1, r[k], l[k], u[k, m], 1e6 / u[k, m], b[k, m], p[k, m] }' | sort -k2,2n
echo "servers and their backend processes: $(awk -v a=$((s1 - s0)) -v hz="$hz" -v w="$c_wall" 'BEGIN { printf "%.2f cores", a / hz / w }') over the run"
query="select c.concurrency as conc, json_extract(c.options_json, '\$.loops') as loops, sa.n_requests as requests,
  round((select median from metric where case_id = c.id and name = 'agg_tps')) as stream_tok_s,
  round((select p5 from metric where case_id = c.id and name = 'agg_tps')) as p5_tok_s,
  round((select median from metric where case_id = c.id and name = 'client_busy')) as client_busy,
  round((select median from metric where case_id = c.id and name = 'ttft_ms'), 2) as ttft_ms,
  (select median from metric where case_id = c.id and name = 'error_rate') as errors
from bench_case c join sample sa on sa.case_id = c.id and sa.repetition = 1 order by c.ordinal"
if command -v sqlite3 >/dev/null; then
    sqlite3 -batch -header -column "$tmp/c.db" "$query"
else # python's sqlite3 where the CLI is missing
    python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1]).execute(sys.argv[2])
print("  ".join(d[0] for d in c.description))
for r in c: print("  ".join(str(v) for v in r))' "$tmp/c.db" "$query"
fi
