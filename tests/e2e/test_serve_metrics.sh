#!/usr/bin/env bash
# End to end: `tokbench serve`'s GET /metrics (docs/PLUGINS.md, "Metrics")
# scraped by tokbench's own telemetry (docs/METRICS.md, "Telemetry"):
#   1. a suite whose http backend loads the served small AR model, with
#      [telemetry] metrics_url = the server's /metrics: the stored series
#      show requests running (> 0) during the load, and generation tokens
#      rising during the load, and by exactly what its requests received:
#      every point of the next case (a null backend: it sends the server
#      nothing) less the value before the run = the sum of the http case's
#      output tokens;
#   2. under --api-key, /metrics (like /health) answers without the key,
#      while the API refuses a request without it (401);
#   3. tokbench_step_requests_total: one request of 8 tokens alone is
#      carried by 8 steps; top_k: `serve --help` says where it is honoured; a request with it
#      is answered by the ar backend and refused with 400 naming the field
#      by the null one (which has no top_k option);
#   5. a client that leaves mid-stream (continuous: ar; static: null):
#      outcome gone +1, prompt and generation tokens unchanged;
#   4. a server stopped after it closed a connection (TIME_WAIT) is
#      restarted on its port at once; a second server on a port in use
#      fails with "Address already in use".
# No wall-clock bounds: counts and values only. The load (32 requests of
# 200 tokens, 4 at a time: 1,600 steps) spans many scrape periods (0.05 s)
# however fast the machine; a busy one only lengthens it.
#
# usage: test_serve_metrics.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init serve_metrics "$@"
need_sqlite3
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
[ -f "$build/plugins/ar/ar.so" ] || { echo "SKIP: no engine plugins in this build"; exit 77; }
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

cat >"$tmp/serve.ini" <<EOF
[suite]
name = serve-metrics
seed = 42
[matrix]
max_new_tokens = 16
[backend ar-small]
plugin = ar
model = $src/models/small-llama
ignore_eos = true
threads = 1
[backend null]
plugin = null
EOF
start_server ar "$tb" serve --backend ar-small "$tmp/serve.ini" --port 0 --max-batch 4 || tb_finish
base="http://127.0.0.1:$port"
metric() { # NAME: its value in one scrape
    curl -sf "$base/metrics" | awk -v n="$1{model_name=\"ar-small\"}" '$1 == n {print $2}'
}

# ---------------------------------------------------------------- 1. telemetry end to end
before=$(metric vllm:generation_tokens_total)
[ "$before" = 0 ] && pass "a fresh server: generation_tokens_total 0" || fail "before: '$before'"
cat >"$tmp/load.ini" <<EOF
[suite]
name = serve-metrics-load
seed = 1
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 8
max_new_tokens = 200
[backend via-http]
plugin = http
url = $base
model_name = ar-small
tokenizer = $src/models/small-llama/tokenizer.json
concurrency = 4
requests = 32
; the check before the load is a real request (one token): off, so the
; server's counters hold the measured requests alone
preflight = false
[backend idle]
plugin = null
step_us = 2000
[telemetry]
metrics_url = $base/metrics
period = 0.05
EOF
"$tb" run "$tmp/load.ini" --db "$tmp/load.db" >"$tmp/load.out" 2>"$tmp/load.err" || { cat "$tmp/load.err"; fail "load run"; }
series() { # NAME BACKEND: its case's points, in time order
    q "$tmp/load.db" "select group_concat(v, ' ') from (select p.value v from telemetry_point p
      join telemetry_series s on s.id = p.series_id join bench_case c on c.id = s.case_id
      join backend b on b.id = c.backend_id
      where s.name = '$1{model_name=\"ar-small\"}' and b.label = '$2' order by p.t_ns)"
}
c1=via-http c2=idle
running=$(series vllm:num_requests_running "$c1")
max_running=$(tr ' ' '\n' <<<"$running" | sort -g | tail -1)
awk -v m="${max_running:-0}" 'BEGIN { exit !(m > 0) }' && pass "running requests stored, up to $max_running during the load" \
    || fail "num_requests_running series of case $c1: '$running'"
gen1=$(series vllm:generation_tokens_total "$c1")
gen2=$(series vllm:generation_tokens_total "$c2")
got1=$(q "$tmp/load.db" "select sum(r.output_tokens) from request r join sample s on s.id = r.sample_id
      join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$c1' and r.status = 'ok'")
n_ok=$(q "$tmp/load.db" "select count(*) from request r join sample s on s.id = r.sample_id
      join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$c1' and r.status = 'ok'")
[ "$n_ok" = 32 ] && [ -n "$got1" ] && [ "$got1" -gt 0 ] && [ -n "$gen2" ] \
    && awk -v b="$before" -v g="$got1" -v pts="$gen2" 'BEGIN { n = split(pts, p, " "); for (i = 1; i <= n; i++) if (p[i] - b != g) exit 1 }' \
    && pass "generation tokens rose by $got1, what case $c1's 32 requests received (every point of case $c2)" \
    || fail "generation_tokens_total: before $before, case $c2's points '$gen2', case $c1 received '$got1' ($n_ok ok); case $c1's series '$gen1'"
awk -v a="$(awk '{print $NF}' <<<"$gen1")" -v b="$(awk '{print $1}' <<<"$gen1")" 'BEGIN { exit !(a > b) }' \
    && pass "generation tokens rising during case $c1" || fail "generation tokens not rising during case $c1: '$gen1'"
after=$(metric vllm:generation_tokens_total)
[ "$after" = "$got1" ] && pass "after the run: $after = what the requests received" || fail "after: $after, requests got $got1"
[ "$(metric vllm:num_requests_running)" = 0 ] && [ "$(metric tokbench_kv_slots)" = 4 ] \
    && [ "$(metric tokbench_kv_slots_used)" = 0 ] && [ "$(metric tokbench_step_duration_seconds_count)" -gt 0 ] \
    && pass "idle: 0 running, 4 slots, none used, steps timed" || fail "idle gauges: $(curl -s "$base/metrics" | grep -v '^#')"

# ---------------------------------------------------------------- 3. top_k (the ar backend)
post() { curl -s -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' "$@"; }
text() { sed 's/.*"text":"\([^"]*\)".*/\1/' "$tmp/body"; }
carried0=$(metric tokbench_step_requests_total) steps0=$(metric tokbench_step_duration_seconds_count)
code=$(post -d '{"prompt":"Once upon a time","max_tokens":8,"top_k":1,"temperature":5,"seed":7}' "$base/v1/completions")
t1=$(text)
# one request alone, 8 tokens (ignore_eos): a step a token carried it, and
# no step carried another (a step after it ended carries none)
carried=$(($(metric tokbench_step_requests_total) - carried0)) steps=$(($(metric tokbench_step_duration_seconds_count) - steps0))
[ "$carried" = 8 ] && [ "$steps" -ge 8 ] \
    && pass "step_requests_total: one request of 8 tokens alone, carried by 8 steps (of $steps)" \
    || fail "step_requests_total rose by $carried over $steps steps for one request of 8 tokens"
[ "$code" = 200 ] && grep -q '"completion_tokens":8' "$tmp/body" && pass "ar: top_k honoured (200)" \
    || fail "ar top_k: $code $(cat "$tmp/body")"
post -d '{"prompt":"Once upon a time","max_tokens":8}' "$base/v1/completions" >/dev/null
t0=$(text)
[ -n "$t0" ] && [ "$t1" = "$t0" ] && pass "ar: top_k 1 at temperature 5 = greedy: the option reached the sampler" \
    || fail "top_k 1 answered '$t1', greedy '$t0'"
code=$(post -d '{"prompt":"x","top_k":1.5}' "$base/v1/completions")
[ "$code" = 400 ] && grep -q '"param":"top_k"' "$tmp/body" && pass "top_k 1.5: 400 naming top_k" || fail "top_k 1.5: $code $(cat "$tmp/body")"
grep -q "top_p and top_k where the backend has that option" <<<"$("$tb" serve --help 2>&1 | tr '\n' ' ' | tr -s ' ')" \
    && pass "serve --help: top_k honoured where the backend has it" || fail "help: $("$tb" serve --help 2>&1 | grep -i top_k)"

# ---------------------------------------------------------------- 2. /metrics under --api-key
start_server null "$tb" serve --backend null "$tmp/serve.ini" --port 0 --api-key sekrit || tb_finish
nb="http://127.0.0.1:$port"
code=$(curl -s -o "$tmp/m" -w '%{http_code}' "$nb/metrics")
[ "$code" = 200 ] && grep -q '^# TYPE vllm:num_requests_running gauge' "$tmp/m" && pass "--api-key: /metrics open (200 without the key)" \
    || fail "/metrics under --api-key: $code"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$nb/v1/models")" = 401 ] && pass "--api-key: the API still needs it" || fail "models without key"
code=$(post -H 'Authorization: Bearer sekrit' -d '{"prompt":"x","top_k":5}' "$nb/v1/completions")
[ "$code" = 400 ] && grep -q '"param":"top_k"' "$tmp/body" && grep -q 'has no top_k option' "$tmp/body" \
    && pass "null: top_k refused with 400 naming it" || fail "null top_k: $code $(cat "$tmp/body")"
code=$(post -H 'Authorization: Bearer sekrit' -d '{"prompt":"x","top_k":-1,"max_tokens":2}' "$nb/v1/completions")
[ "$code" = 200 ] && pass "null: top_k -1 (off) accepted" || fail "null top_k -1: $code $(cat "$tmp/body")"

# ---------------------------------------------------------------- 5. a client that leaves
# A client that reads its stream's first chunk and resets the connection:
# its request ends "gone" and its tokens are not counted (the token
# counters count the requests that ended well), whether the backend steps
# (ar, continuous: it leaves its slot) or runs static batches (null: the
# batch runs on to its end, then the request ends). Waits on the server's
# own counters.
if command -v python3 >/dev/null; then
    mval() { # URL LABEL NAME: its value in one scrape
        curl -sf "$1/metrics" | awk -v n="$3{model_name=\"$2\"}" '$1 == n {print $2}'
    }
    gone() { # URL LABEL: requests ended gone
        curl -sf "$1/metrics" | awk -v n="tokbench_requests_total{model_name=\"$2\",outcome=\"gone\"}" '$1 == n {print $2}'
    }
    for srv in "ar-small $base 200" "null $nb 5000"; do
        read -r label url max <<<"$srv"
        p0=$(mval "$url" "$label" vllm:prompt_tokens_total) g0=$(mval "$url" "$label" vllm:generation_tokens_total)
        gone0=$(gone "$url" "$label")
        python3 - "${url##*:}" "$max" <<'PY' || fail "$label: the leaving client"
import json, socket, struct, sys
body = json.dumps({"prompt": "Once upon a time", "max_tokens": int(sys.argv[2]), "stream": True}).encode()
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\n"
          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
got = b""
while b"data: " not in got:  # the first chunk
    more = s.recv(4096)
    if not more:
        sys.exit("closed before the first chunk: %r" % got[:200])
    got += more
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
s.close()
PY
        # meson's timeout is the backstop
        until [ "$(gone "$url" "$label")" = $((${gone0:-0} + 1)) ]; do sleep 0.05; done
        p1=$(mval "$url" "$label" vllm:prompt_tokens_total) g1=$(mval "$url" "$label" vllm:generation_tokens_total)
        [ -n "$p0" ] && [ "$p1" = "$p0" ] && [ "$g1" = "$g0" ] \
            && pass "$label: a client that left: outcome gone +1, prompt and generation tokens unchanged ($p0, $g0)" \
            || fail "$label: after a client left: prompt tokens $p0 -> $p1, generation tokens $g0 -> $g1"
    done
fi

# ---------------------------------------------------------------- 4. a restart on the same port
# The server closes a connection (Connection: close), so the port has a
# socket in TIME_WAIT (~60 s); stopped, a new server on that port listens
# at once (SO_REUSEADDR), while one beside a running server still fails,
# saying why (no SO_REUSEPORT: two servers never share a port silently).
start_server first "$tb" serve --backend null "$tmp/serve.ini" --port 0 || tb_finish
p1=$port first_pid=$server_pid
# read to the end of the stream before closing: the server's close came first
exec 3<>"/dev/tcp/127.0.0.1/$p1"
printf 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
grep -q '^HTTP/1.1 200' <&3 || fail "health on the first server"
cat <&3 >/dev/null
exec 3<&-
"$tb" serve --backend null "$tmp/serve.ini" --port "$p1" >"$tmp/beside.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "cannot listen on 127.0.0.1:$p1: Address already in use" "$tmp/beside.log" \
    && pass "a second server on a port in use: exit 1, $(tail -1 "$tmp/beside.log")" \
    || fail "a second server on a port in use: exit $rc: $(tail -2 "$tmp/beside.log")"
kill -TERM "$first_pid"
wait "$first_pid"
if command -v ss >/dev/null; then # the case under test: else this proves nothing
    [ -n "$(ss -Htan state time-wait sport = ":$p1")" ] && pass "the port has a connection in TIME_WAIT" \
        || fail "no TIME_WAIT on port $p1: the restart below tests nothing"
fi
start_server again "$tb" serve --backend null "$tmp/serve.ini" --port "$p1" \
    && [ "$port" = "$p1" ] && [ "$(curl -s "http://127.0.0.1:$p1/health")" = ok ] \
    && pass "restarted on port $p1 at once" || fail "restart on port $p1: $(tail -2 "$tmp/again.log")"

tb_finish
