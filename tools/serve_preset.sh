#!/usr/bin/env bash
# A preset in-process and behind `tokbench serve`, same conditions, same
# call (issue 42, item 5: the serving overhead): the ar backend on PRESET
# (random weights at a published shape) with a shipped tokenizer (the ar
# backend's `tokenizer` option: tokens are chosen among its ids only, so
# every output token is text that streams), ignore_eos, prompts of 32
# tokens, 128 out;
#   1. in-process: `tokbench run` at batch 1 and 32;
#   2. through HTTP: `tokbench serve` (continuous batching, --max-batch 32)
#      measured by plugins/http, closed loop: concurrency 1 (a load of 32
#      requests, one after another); concurrency 32 with a load of 32
#      requests (all sent at once: the in-process batch's work, one wave)
#      and of 128 (the http backend's default load, max(32, 4 x 32): each
#      request that ends is followed by the next, which joins a step after
#      its slot freed, and the last wave drains);
# then one row each: output tokens/s, TPOT p50, and HTTP / in-process at
# the same batch or concurrency; last, how full the served batch ran: its
# mean size a step, from the server's /metrics
# (tokbench_step_requests_total over the steps' count) around each client
# run.
#
#   tools/serve_preset.sh BUILD [DEVICE] [PRESET] [TOKENIZER]
#   e.g. tools/serve_preset.sh build-gpu cuda preset:llama-3-8b models/small-llama
#        tools/serve_preset.sh build cpu preset:tiny-llama tests/data/bytes-tokenizer
set -uo pipefail
build=${1:-build}
device=${2:-cpu}
preset=${3:-preset:llama-3-8b}
src=$(cd "$(dirname "$0")/.." && pwd)
tok=${4:-$src/models/small-llama}
case $tok in /*) ;; *) tok=$PWD/$tok ;; esac
tb="$build/tokbench"
export TOKBENCH_PLUGIN_PATH="$build/plugins"
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
backend="plugin = ar
model = $preset
tokenizer = $tok
device = $device
ignore_eos = true"
# the conditions both measurements share (one text, so they cannot drift apart)
repeat=3
same="warmup = 1
repeat = $repeat
case_timeout = 600
[matrix]
prompt_tokens = 32
max_new_tokens = 128"
cat >"$tmp/inproc.ini" <<EOT
[suite]
name = preset-inproc
$same
batch = 1, 32
[backend inproc]
$backend
EOT
cat >"$tmp/server.ini" <<EOT
[suite]
name = preset-served
[backend served]
$backend
EOT
"$tb" run "$tmp/inproc.ini" --db "$tmp/p.db" >"$tmp/inproc.out" 2>"$tmp/inproc.err" \
    || { echo "in-process run failed:"; tail -20 "$tmp/inproc.err"; exit 1; }
"$tb" serve --backend served "$tmp/server.ini" --port 0 --max-batch 32 --port-file "$tmp/port" \
    >"$tmp/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { echo "serve did not start:"; tail -20 "$tmp/serve.log"; exit 1; }
# the server's /metrics: the requests its steps carried, summed, and the
# steps run
counters() {
    python3 - "$1" <<'EOT'
import re, sys, urllib.request
t = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=30).read().decode()
def val(name):
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", t, re.M)
    return m.group(1) if m else "nan"
print(val("tokbench_step_requests_total"), val("tokbench_step_duration_seconds_count"))
EOT
}
port=$(cat "$tmp/port")
fill=""
for run in 1:32 32:32 32:128; do # concurrency:requests; one client run each, so the server's counters part them
    c=${run%%:*} n=${run##*:}
    cat >"$tmp/client-$c-$n.ini" <<EOT
[suite]
name = preset-http
$same
concurrency = $c
requests = $n
[backend http]
plugin = http
url = http://127.0.0.1:$port
model_name = served
tokenizer = $tok/tokenizer.json
EOT
    [ -d "$tok" ] || sed -i "s|^tokenizer = .*|tokenizer = $tok|" "$tmp/client-$c-$n.ini"
    before=$(counters "$port")
    "$tb" run "$tmp/client-$c-$n.ini" --db "$tmp/p.db" >>"$tmp/http.out" 2>>"$tmp/http.err" \
        || { echo "HTTP run failed:"; tail -20 "$tmp/http.err"; exit 1; }
    after=$(counters "$port")
    # the served batch's mean size (in-process: c every step)
    fill="$fill${fill:+, }$c x $n: $(echo "$before $after" | awk '{ s = $4 - $2; if (s > 0) printf "%.2f", ($3 - $1) / s; else printf "n/a" }')"
done
[ -n "${PRESET_OUT:-}" ] && cp "$tmp/p.db" "$tmp/inproc.out" "$tmp/http.out" "$tmp/serve.log" "$PRESET_OUT/"
echo "$preset with $(basename "$tok")'s tokenizer on $device; $(grep -m1 'loaded' "$tmp/serve.log" | cut -c1-120)"
echo "path | batch or concurrency | requests a call | output tok/s | TPOT ms p50 | HTTP / in-process"
python3 - "$tmp/p.db" "$repeat" <<'EOT'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
# requests a call: the case's timed requests over its repetitions
rows = db.execute("""select backend, coalesce(concurrency, batch), requests / ?, aggregate_tps, tpot_ms from summary
                     order by backend = 'http', coalesce(concurrency, batch), requests""",
                  (int(sys.argv[2]),)).fetchall()
inproc = {n: tps for b, n, _, tps, _ in rows if b == 'inproc'}
for b, n, reqs, tps, tpot in rows:
    ratio = f"{tps / inproc[n]:.3f}" if b == 'http' and inproc.get(n) else ""
    print(f"{b} | {n} | {reqs} | {tps:.1f} | {tpot:.3f} | {ratio}")
EOT
echo "served: the batch's mean size a step, by concurrency x requests (the in-process batch holds its size every step): $fill"
