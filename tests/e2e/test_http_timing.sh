#!/usr/bin/env bash
# Streaming timing through `tokbench serve` (suite timing: not in the
# default `meson test`, nor under the sanitizers; run alone by `meson test
# --suite slow`): plugins/http against the null backend served with a
# 2 ms prefill and a 5 ms step. The server sleeps 5 ms a step, so the ITL
# the client measures should be no shorter (median >= 4.5 ms). A wall-clock
# figure all the same: a client held off the CPU reads several chunks in
# one burst, with gaps near 0, so a loaded machine can miss it;
# test_http.sh checks what is counted (every token a chunk).
#
# usage: test_http_timing.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init http_timing "$@"
need_sqlite3
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

printf '[suite]\nname = http-timing-server\n[backend timing]\nplugin = null\nprefill_us = 2000\nstep_us = 5000\n' >"$tmp/server.ini"
start_server timing "$tb" serve --backend timing "$tmp/server.ini" --port 0 || exit 1
cat >"$tmp/timing.ini" <<EOF
[suite]
name = http-timing
warmup = 0
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 6
requests = 4
concurrency = 2
[backend served]
plugin = http
url = http://127.0.0.1:$port
EOF
"$tb" run "$tmp/timing.ini" --db "$tmp/t.db" >"$tmp/t.out" 2>"$tmp/t.err" || { fail "run: exit $?"; cat "$tmp/t.err"; }
[ "$(q "$tmp/t.db" "select count(*) from request r join sample s on s.id = r.sample_id where s.warmup = 0 and r.status = 'ok' and json_array_length(r.emissions_json) = 6")" = 8 ] \
    || fail "every request should stream 6 chunks"
itl=$(q "$tmp/t.db" "select median from metric where name = 'itl_ms'")
awk -v i="$itl" 'BEGIN { exit !(i >= 4.5) }' && pass "ITL through the server $itl ms (step 5 ms)" \
    || fail "ITL $itl ms through the server, below the server's 5 ms step"

tb_finish
