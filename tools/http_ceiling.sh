#!/usr/bin/env bash
# The HTTP client's own ceiling: streamed tokens/s that plugins/http can
# time on ONE core against the null backend (no delays) served by
# `tokbench serve` on loopback, with the server on the other cores. A
# benchmark, not a test (nothing to pass or fail; meson does not run it):
# docs/PERFORMANCE.md quotes what it prints.
#
# usage: tools/http_ceiling.sh BUILD_DIR [SERVE_EXE] [CONCURRENCIES] [TOKENS]
#   CONCURRENCIES  e.g. "1, 16, 64, 256" (default)
#   TOKENS         output tokens per request (default 512)
set -uo pipefail
build=$1
serve_exe=${2:-}
conc=${3:-"1, 16, 64, 256"}
tokens=${4:-512}
tb="$build/tokbench"
if "$tb" serve --help >/dev/null 2>&1; then serve=("$tb" serve); else serve=("$serve_exe"); fi
export TOKBENCH_PLUGIN_PATH="$build/plugins"
cores=$(nproc)
[ "$cores" -ge 2 ] || { echo "needs 2 cores"; exit 77; }
tmp=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

cat >"$tmp/server.ini" <<EOT
[suite]
name = null-served
[backend null]
plugin = null
prefill_us = 0
step_us = 0
EOT
# the server everywhere but core 0; the client on core 0 alone
taskset -c 1-$((cores - 1)) "${serve[@]}" --backend null "$tmp/server.ini" --port 0 --port-file "$tmp/port" \
    --max-batch 256 >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/port")
cat >"$tmp/client.ini" <<EOT
[suite]
name = http-ceiling
warmup = 1
repeat = 5
[matrix]
prompt_tokens = 8
max_new_tokens = $tokens
concurrency = $conc
[backend client]
plugin = http
url = http://127.0.0.1:$port
EOT
read -r s_ut s_st < <(awk '{print $14, $15}' /proc/$server/stat)
start=$(date +%s.%N)
TOKBENCH_DEBUG=1 taskset -c 0 "$tb" run "$tmp/client.ini" --db "$tmp/c.db" \
    >"$tmp/run.out" 2>"$tmp/run.err" || { cat "$tmp/run.err"; exit 1; }
c_wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
read -r e_ut e_st < <(awk '{print $14, $15}' /proc/$server/stat)
[ -n "${CEILING_OUT:-}" ] && cp "$tmp/c.db" "$tmp/run.err" "$tmp/run.out" "$CEILING_OUT/"
hz=$(getconf CLK_TCK)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores; client on core 0, server on 1-$((cores - 1))"
# the event loop's own CPU per chunk, measured repetitions of each case
echo "client event loop (CPU per streamed chunk, median per case):"
grep -o 'client: .*' "$tmp/run.err" | awk 'NR % 6 != 1 { gsub(/[(%]/, "", $12); print $2, $12, $16 }' \
    | sort -k1,1n -k3,3n | awk '{ n[$1]++; u[$1, n[$1]] = $3; p[$1, n[$1]] = $2 }
        END { for (k in n) { m = int((n[k] + 1) / 2); printf "  %5d requests/call: %5.2f us CPU per chunk, %3d%% of a core busy\n", k, u[k, m], p[k, m] } }' | sort -n
echo "server front end CPU (its worker not counted): $(awk -v a=$((e_ut + e_st - s_ut - s_st)) -v hz="$hz" -v w="$c_wall" 'BEGIN { printf "%.2f cores", a / hz / w }')"
command -v sqlite3 >/dev/null || { echo "(no sqlite3 here: the figures are in c.db)"; exit 0; }
sqlite3 -batch -header -column "$tmp/c.db" "
select c.concurrency as conc, sa.n_requests as requests,
  round((select median from metric where case_id = c.id and name = 'agg_tps')) as stream_tok_s,
  round((select p5 from metric where case_id = c.id and name = 'agg_tps')) as p5_tok_s,
  round((select median from metric where case_id = c.id and name = 'req_throughput'), 1) as req_s,
  round((select median from metric where case_id = c.id and name = 'itl_ms') * 1000, 1) as itl_us,
  round((select median from metric where case_id = c.id and name = 'ttft_ms'), 2) as ttft_ms,
  (select median from metric where case_id = c.id and name = 'error_rate') as errors
from bench_case c join sample sa on sa.case_id = c.id and sa.repetition = 1 order by c.ordinal"
