#!/usr/bin/env bash
# End to end: a hung telemetry endpoint delays neither a case nor Ctrl-C
# (issue 38, item 10). The suite scrapes tests/e2e/hostile_server.py's
# /hang_metrics, which accepts each scrape, reads it and never answers,
# with the longest scrape timeout allowed (600 s): a scrape that held up
# the case's end would hold the run for 10 minutes.
#   1. two cases of the null backend run to the end, ok, and the run says
#      that no scrape was answered;
#   2. SIGINT while a scrape is held (the server counted it) and a case
#      runs: the run ends interrupted (exit 130), the session marked so.
# Events only: the run's exit and output; `timeout` is a hang guard far
# above what the runs take (seconds) and far below the scrape timeout.
#
# usage: test_telemetry_hang.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init telemetry_hang "$@"
need_sqlite3
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
guard=120 # seconds: a hang guard only

start_server hostile "$python" "$src/tests/e2e/hostile_server.py" --quiet || tb_finish
url="http://127.0.0.1:$port/hang_metrics"
held() { curl -s "http://127.0.0.1:$port/stats" | "$python" -c 'import json, sys; print(json.load(sys.stdin)["hang_metrics"])'; }

# ---------------------------------------------------------------- 1. cases
cat >"$tmp/a.ini" <<EOT
[suite]
name = telemetry-hang
warmup = 0
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 16, 32
[backend n]
plugin = null
step_us = 2000
[telemetry]
metrics_url = $url
period = 0.05
timeout = 600
nvml = off
EOT
timeout -k 5 $guard "$tb" run "$tmp/a.ini" --db "$tmp/a.db" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
if [ $rc = 124 ] || [ $rc = 137 ]; then
    fail "the run hung past the ${guard} s guard: a scrape held up a case"
elif [ $rc = 0 ]; then
    pass "the run ended by itself (exit 0)"
else
    fail "exit $rc: $(tail -5 "$tmp/a.err")"
fi
[ "$(q "$tmp/a.db" "select count(*) from bench_case where status = 'ok'")" = 2 ] \
    && pass "both cases ok" || fail "cases: $(q "$tmp/a.db" "select status, error from bench_case")"
n=$(held)
# a scrape held is one in flight at its case's end (it would answer in 600 s)
[ "${n:-0}" -ge 1 ] && pass "the endpoint held $n scrapes, each in flight at its case's end" \
    || fail "the endpoint held no scrape: nothing was tested"
grep -q "telemetry: no scrape of $url answered while the case ran" "$tmp/a.err" \
    && pass "the run says no scrape was answered" || fail "no note of the unanswered scrapes: $(grep telemetry "$tmp/a.err")"

# ---------------------------------------------------------------- 2. SIGINT
sed -e 's/^max_new_tokens = .*/max_new_tokens = 1000/' -e 's/^step_us = .*/step_us = 1000000/' \
    -e 's/^repeat = .*/repeat = 1/' "$tmp/a.ini" >"$tmp/b.ini" # one call of 1,000 s
before=$(held)
timeout -k 5 $guard "$tb" run "$tmp/b.ini" --db "$tmp/b.db" >"$tmp/b.out" 2>"$tmp/b.err" &
runner=$!
pids+=("$runner")
# wait for the case's first scrape to be held (an event), then Ctrl-C
until [ "$(held)" -gt "$before" ] || ! kill -0 $runner 2>/dev/null; do sleep 0.1; done
# the timeout wrapper forwards nothing: signal the runner itself
tbpid=$(pgrep -P $runner -x tokbench | head -1)
[ -n "$tbpid" ] && kill -INT "$tbpid"
wait $runner
rc=$?
if [ $rc = 124 ] || [ $rc = 137 ]; then
    fail "SIGINT: the run hung past the ${guard} s guard (a scrape held up the signal)"
elif [ $rc = 130 ]; then
    pass "SIGINT during a held scrape: exit 130"
else
    fail "SIGINT: exit $rc, expected 130: $(tail -5 "$tmp/b.err")"
fi
[ "$(q "$tmp/b.db" "select status from session")" = interrupted ] && pass "the session is marked interrupted" \
    || fail "session status: $(q "$tmp/b.db" "select status from session")"
tb_finish
