#!/usr/bin/env bash
# `tokbench serve` under hostile clients (issue 38, items 3, 9 and 15),
# on the trained small Llama with 4,096 positions (its weights; RoPE takes
# any position), so that a request may ask for 4,000 tokens:
#   item 3: half-sent connections refused past --max-connections-per-ip
#     and closed after --client-timeout; a declared 20 MB body answered
#     413 before it is read, bodies in flight not buffered; --api-key-file
#     (401s, the key never echoed nor logged, keys with control bytes
#     refused, a warning on a non-loopback address); streams dropped
#     mid-way or never read free their slots (serve_hostile.py);
#   item 9: --max-batch 65536 refused before listening, the memory its
#     KV cache needs and the machine's named;
#   item 15: "backend unavailable" logged whole.
# Events only (closed sockets, log lines, answers); timeouts are guards.
#
# usage: test_serve_hostile.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init serve_hostile "$@"
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
[ -f "$build/plugins/ar/ar.so" ] || { echo "SKIP: no engine plugins in this build"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
hostile="$src/tests/e2e/serve_hostile.py"

mkdir -p "$tmp/long"
for f in generation_config.json model.safetensors tokenizer.json; do
    ln -s "$src/models/small-llama/$f" "$tmp/long/$f"
done
python3 - "$src/models/small-llama/config.json" "$tmp/long/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 4096
json.dump(c, open(sys.argv[2], "w"))
EOF
cat >"$tmp/s.ini" <<EOF
[suite]
name = serve-hostile
seed = 1
[matrix]
max_new_tokens = 16
[backend ar]
plugin = ar
model = $tmp/long
ignore_eos = true
threads = 1
EOF

# hostile NAME CHECK [ARG]: serve_hostile.py CHECK against server NAME
hostile() {
    local name=$1 check=$2
    shift 2
    if python3 "$hostile" "$check" "${PORT[$name]}" "${PID[$name]}" "$tmp/$name.log" "$@" >"$tmp/$check.out" 2>&1; then
        pass "$check: $(grep -c '^ok:' "$tmp/$check.out") checks"
    else
        cat "$tmp/$check.out"
        fail "$check: $(grep -c '^FAIL' "$tmp/$check.out") checks failed"
        tail -5 "$tmp/$name.log"
    fi
}

# Every server starts at once (a start is seconds on a loaded machine).
# timeout serves $tmp/gone, which loses config.json for item 15.
mkdir -p "$tmp/gone"
for f in config.json generation_config.json model.safetensors tokenizer.json; do ln -s "$tmp/long/$f" "$tmp/gone/$f"; done
sed "s#model = $tmp/long#model = $tmp/gone#" "$tmp/s.ini" >"$tmp/gone.ini"
printf 'sk-test-%s\n' "$RANDOM$RANDOM" >"$tmp/key"
declare -A PORT PID
serve() { # NAME SUITE OPTIONS...
    local name=$1 suite=$2
    shift 2
    "$tb" serve --backend ar "$suite" --port 0 --port-file "$tmp/$name.port" "$@" >"$tmp/$name.log" 2>&1 &
    PID[$name]=$!
    pids+=($!)
}
serve main "$tmp/s.ini" --client-timeout 600 --max-connections-per-ip 8 --max-batch 2 \
    --api-key-file "$tmp/key" --host 0.0.0.0
serve timeout "$tmp/gone.ini" --client-timeout 1 --max-connections 8
# item 9: 65,536 slots of 4,096 positions, 2.2 TB of KV cache
"$tb" serve --backend ar "$tmp/s.ini" --port 0 --max-batch 65536 --port-file "$tmp/big.port" >"$tmp/big.log" 2>&1 &
big_pid=$!
for s in main timeout; do
    PORT[$s]=$(wait_port "$tmp/$s.port" "${PID[$s]}")
    [ -n "${PORT[$s]}" ] || { fail "server $s did not start: $(tail -5 "$tmp/$s.log")"; tb_finish; }
done

# ------------------------------------------------------------ item 3
export TB_API_KEY=$(cat "$tmp/key")
hostile main limits
hostile main body
hostile main key
hostile main slots
TB_API_KEY= hostile timeout timeout
grep -q "warning: 0.0.0.0 is not a loopback address" "$tmp/main.log" \
    && pass "a non-loopback bind is warned about" || fail "no warning for --host 0.0.0.0: $(grep -i warn "$tmp/main.log")"
grep -q "warning" "$tmp/timeout.log" && fail "a loopback bind warned: $(grep warning "$tmp/timeout.log")"
for bad in 'a\tb' 'a\033b' '' 'a b'; do
    printf "$bad\n" >"$tmp/bad.key"
    out=$(timeout 20 "$tb" serve --backend ar "$tmp/s.ini" --port 0 --api-key-file "$tmp/bad.key" 2>&1) # a guard: the old server listened
    rc=$?
    [ $rc = 2 ] && grep -q "api-key-file $tmp/bad.key: the key" <<<"$out" \
        && pass "key file $(printf %q "$bad") refused: ${out##*: }" || fail "key $(printf %q "$bad"): exit $rc: $out"
done

# ------------------------------------------------------------ item 9
big=$(wait_port "$tmp/big.port" $big_pid) # listening is the old behaviour
[ -n "$big" ] && kill $big_pid
wait $big_pid
rc=$?
if [ $rc = 2 ] && [ ! -s "$tmp/big.port" ] && grep -q -- "--max-batch 65536: backend ar cannot hold 65536 requests in flight: .*more than this machine" "$tmp/big.log"; then
    pass "--max-batch 65536 refused before listening: $(grep -o "need.*" "$tmp/big.log")"
else
    fail "--max-batch 65536: exit $rc, port file "$(cat "$tmp/big.port" 2>/dev/null)": $(tail -2 "$tmp/big.log")"
fi

# ------------------------------------------------------------ item 15
# The worker killed and its model gone: the next requests cannot restart it.
rm "$tmp/gone/config.json"
for w in $(cat /proc/"${PID[timeout]}"/task/*/children 2>/dev/null); do kill -KILL "$w"; done
for _ in 1 2 3; do
    curl -s "http://127.0.0.1:${PORT[timeout]}/v1/completions" -d '{"prompt": "hi", "max_tokens": 2}' >"$tmp/gone.out" 2>&1
    grep -q "backend unavailable" "$tmp/gone.out" && break
done
grep -q "backend unavailable" "$tmp/gone.out" || fail "no 'backend unavailable' answer: $(cat "$tmp/gone.out")"
if grep -q "^tokbench serve: backend unavailable: " "$tmp/timeout.log"; then
    pass "logged whole: $(grep -m1 'backend unavailable' "$tmp/timeout.log" | cut -c1-80)"
else
    fail "the log line: $(grep -i 'unavailable' "$tmp/timeout.log")"
fi

tb_finish
