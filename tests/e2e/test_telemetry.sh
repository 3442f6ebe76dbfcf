#!/usr/bin/env bash
# End to end, telemetry (docs/METRICS.md, "Telemetry"): a suite's
# [telemetry] scrapes a stand-in for a model server's Prometheus /metrics
# (tests/metrics_server.py, which counts its answers) while each case runs:
#   1. every answered scrape is one stored point of each kept series, with
#      the value served (the server's counter: 1, 2, ..., k), histogram
#      buckets left out, _sum/_count kept, escaped labels as served,
#      +Inf/NaN stored as NULL, a malformed line skipped and said;
#   2. `metrics =` keeps only the series named;
#   3. a body past 4 MiB and a server past the scrape timeout fail their
#      scrapes, said once, while the case runs to the end;
#   4. NVML: absent here, said once a run; nothing stored for it;
#   5. the HTML report draws one chart per metric; db merge carries the
#      series; bad [telemetry] keys are errors at file:line.
# No wall-clock bounds: counts and values only.
#
# usage: test_telemetry.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init telemetry "$@"
need_sqlite3
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
server() { # MODE NAME: start one, its port in $tmp/NAME.port
    python3 "$src/tests/e2e/metrics_server.py" "$tmp/$2.port" "$1" &
    pids+=($!)
    [ -n "$(wait_port "$tmp/$2.port" $!)" ] || { echo "FAIL: metrics server $2 did not start"; exit 1; }
}
suite() { # FILE URL EXTRA...
    local f=$1 url=$2
    shift 2
    cat >"$f" <<EOT
[suite]
name = telemetry
warmup = 0
repeat = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 16
[backend n]
plugin = null
step_us = 2000
[telemetry]
metrics_url = $url
period = 0.05
$(printf '%s\n' "$@")
EOT
}

# ---------------------------------------------------------------- 1. what is stored
server ok a
url="http://127.0.0.1:$(cat "$tmp/a.port")/metrics"
suite "$tmp/a.ini" "$url"
"$tb" run "$tmp/a.ini" --db "$tmp/a.db" >"$tmp/a.out" 2>"$tmp/a.err" || { cat "$tmp/a.err"; fail "run"; }
k=$(curl -s "http://127.0.0.1:$(cat "$tmp/a.port")/count")
series() { q "$tmp/a.db" "select count(p.t_ns), coalesce(group_concat(p.value, ','), '') from telemetry_series s
    left join telemetry_point p on p.series_id = s.id where s.name = '$1' group by s.id"; }
want=$(seq -s, 1 "$k" | sed 's/\([0-9]*\)/\1.0/g')
got=$(q "$tmp/a.db" "select count(*), group_concat(v, ',') from (select p.value as v from telemetry_series s
    join telemetry_point p on p.series_id = s.id where s.name = 'vllm:num_requests_running{model_name=\"m\"}'
    order by p.t_ns)")
[ "$k" -ge 1 ] && [ "$got" = "$k|$want" ] && pass "$k scrapes answered, $k points stored with the values served" \
    || fail "num_requests_running: server answered $k, stored '$got' (want '$k|$want')"
[ "$(q "$tmp/a.db" "select count(*) from telemetry_series where name like '%_bucket%'")" = 0 ] \
    && pass "histogram buckets left out" || fail "buckets stored"
[ "$(q "$tmp/a.db" "select count(*) from telemetry_series where name in ('vllm:e2e_request_latency_seconds_sum',
      'vllm:e2e_request_latency_seconds_count')")" = 2 ] && pass "_sum and _count kept" || fail "_sum/_count"
[ "$(q "$tmp/a.db" "select count(*) from telemetry_series where name = 'vllm:num_requests_waiting{model_name=\"a \\\"quoted\\\" name\"}'")" = 1 ] \
    && pass "an escaped label value kept as served" || fail "escaped label: $(q "$tmp/a.db" "select name from telemetry_series")"
[ "$(q "$tmp/a.db" "select count(*) from telemetry_point p join telemetry_series s on s.id = p.series_id
      where s.name = 'process_open_fds' and p.value is null")" = "$k" ] && pass "+Inf stored as NULL" || fail "+Inf"
grep -q "telemetry: $k of $k scrapes of $url had lines that are not the exposition format, skipped (first scrape: 1 malformed lines; first: line 12:" "$tmp/a.err" \
    && pass "the malformed line skipped and said" || { grep telemetry "$tmp/a.err"; fail "malformed line note"; }
[ "$(q "$tmp/a.db" "select count(distinct case_id) from telemetry_series")" = 1 ] && pass "series stored with their case" \
    || fail "series per case"

# ---------------------------------------------------------------- 2. metrics =
suite "$tmp/b.ini" "$url" "metrics = vllm:gpu_cache_usage_perc"
"$tb" run "$tmp/b.ini" --db "$tmp/b.db" >/dev/null 2>&1 || fail "run with metrics ="
[ "$(q "$tmp/b.db" "select group_concat(name) from telemetry_series")" = 'vllm:gpu_cache_usage_perc{model_name="m"}' ] \
    && pass "metrics = keeps the series named" || fail "filter: $(q "$tmp/b.db" "select group_concat(name) from telemetry_series")"

# a name that no scrape has (a typo): said by the run, with the close names
# the endpoint offered, stored as a series without points, warned by show
suite "$tmp/t.ini" "$url" "metrics = vllm:gpu_cache_usage_perc, vllm:gpu_cache_usge_perc"
"$tb" run "$tmp/t.ini" --db "$tmp/t.db" >"$tmp/t.out" 2>"$tmp/t.err" || fail "run with a misspelt metric"
grep -q "telemetry: metrics = vllm:gpu_cache_usge_perc matched no sample in the [0-9]* answered scrapes of $url: no points stored for it (close names it offered: vllm:gpu_cache_usage_perc)" "$tmp/t.err" \
    || fail "the run's note on a misspelt metric: $(grep telemetry "$tmp/t.err")"
grep -q "metrics = vllm:gpu_cache_usage_perc matched" "$tmp/t.err" && fail "a metric that matched said to match nothing"
[ "$(q "$tmp/t.db" "select group_concat(name || ':' || (n > 0), ' ') from (select s.name, (select count(*) from telemetry_point p where p.series_id = s.id) n from telemetry_series s order by s.id)")" \
  = 'vllm:gpu_cache_usage_perc{model_name="m"}:1 vllm:gpu_cache_usge_perc:0' ] \
    || fail "stored series: $(q "$tmp/t.db" "select name from telemetry_series")"
for out in "$tmp/t.out" "$tmp/t.show"; do
    [ "$out" = "$tmp/t.show" ] && "$tb" show --db "$tmp/t.db" >"$out" 2>&1
    grep -q "n \[.*\]: telemetry: metrics = vllm:gpu_cache_usge_perc matched no sample in any scrape of the metrics_url: no points stored for it" "$out" \
        || fail "the warning in $(basename "$out"): $(sed -n '/^warnings/,$p' "$out")"
done
pass "metrics = a name no scrape had: said with the close name offered, stored without points, warned at the run's end and by show"
# every name matched (b.db), or no telemetry at all: no such warning
"$tb" show --db "$tmp/b.db" >"$tmp/b.show" 2>&1 || fail "show of b.db"
grep -q "telemetry: metrics =" "$tmp/b.show" && fail "a warning for no unmatched name: $(grep "telemetry:" "$tmp/b.show")"
printf '[suite]\nname = plain\nwarmup = 0\nrepeat = 1\n[matrix]\nmax_new_tokens = 4\n[backend n]\nplugin = null\n' >"$tmp/plain.ini"
"$tb" run "$tmp/plain.ini" --db "$tmp/plain.db" >"$tmp/plain.out" 2>&1 || fail "a run without telemetry: $(tail -3 "$tmp/plain.out")"
"$tb" show --db "$tmp/plain.db" >>"$tmp/plain.out" 2>&1
grep -q "telemetry:" "$tmp/plain.out" && fail "telemetry warned for a run without it: $(grep "telemetry:" "$tmp/plain.out")"
pass "no telemetry warning where every name matched or none was asked for"

# ---------------------------------------------------------------- 3. bounded and timed out
server huge h
suite "$tmp/h.ini" "http://127.0.0.1:$(cat "$tmp/h.port")/metrics"
"$tb" run "$tmp/h.ini" --db "$tmp/h.db" >/dev/null 2>"$tmp/h.err" && grep -q "scrapes of .* failed (first: a response larger than 4 MiB)" "$tmp/h.err" \
    && [ "$(q "$tmp/h.db" "select count(*) from telemetry_series")" = 0 ] \
    && [ "$(q "$tmp/h.db" "select status from bench_case")" = ok ] && pass "a body past 4 MiB: refused, said, the case ran" \
    || { cat "$tmp/h.err"; fail "huge body"; }
server slow s
suite "$tmp/s.ini" "http://127.0.0.1:$(cat "$tmp/s.port")/metrics" "timeout = 0.1"
"$tb" run "$tmp/s.ini" --db "$tmp/s.db" >/dev/null 2>"$tmp/s.err" && grep -q "scrapes of .* failed (first: Timeout was reached)" "$tmp/s.err" \
    && [ "$(q "$tmp/s.db" "select status from bench_case")" = ok ] && pass "a server past the timeout: said, the case ran" \
    || { cat "$tmp/s.err"; fail "slow server"; }
# ---------------------------------------------------------------- 4. NVML
if [ -e /dev/nvidiactl ]; then
    echo "ok: (a GPU machine: NVML's absence not tested here)"
else
    [ "$(grep -c "telemetry: NVML not sampled" "$tmp/a.err")" = 1 ] && [ "$(q "$tmp/a.db" "select count(*) from telemetry_series where source = 'nvml'")" = 0 ] \
        && pass "no NVML here: said once, nothing stored" || fail "NVML note: $(grep -c NVML "$tmp/a.err")"
fi

# ---------------------------------------------------------------- 5. report, merge, errors
"$tb" report --format html -o "$tmp/a.html" --db "$tmp/a.db" >/dev/null 2>&1 || fail "report"
# a metric with no finite value (process_open_fds: +Inf) has nothing to draw
n_metrics=$(q "$tmp/a.db" "select count(distinct substr(s.name, 1, instr(s.name || '{', '{') - 1)) from telemetry_series s
    join telemetry_point p on p.series_id = s.id where p.value is not null")
[ "$(grep -c 'data-kind="telemetry"' "$tmp/a.html")" = "$n_metrics" ] && grep -q '<h3>Telemetry</h3>' "$tmp/a.html" \
    && pass "the report draws $n_metrics telemetry charts" || fail "report charts: $(grep -c 'data-kind="telemetry"' "$tmp/a.html") of $n_metrics"
"$tb" db merge "$tmp/a.db" --db "$tmp/m.db" >/dev/null 2>&1 || fail "merge"
[ "$(q "$tmp/m.db" "select count(*) from telemetry_point")" = "$(q "$tmp/a.db" "select count(*) from telemetry_point")" ] \
    && pass "db merge carries the series" || fail "merge telemetry"
# export --format json (docs/REPORTS.md: everything stored): each case's
# scrape counts and first error, every series with every point, as the
# database holds them; a run whose scrapes failed has its count and reason
for db in a h; do
    "$tb" export --format json last --db "$tmp/$db.db" >"$tmp/$db.json" 2>"$tmp/$db.json.err" || fail "export json $db: $(cat "$tmp/$db.json.err")"
    python3 - "$tmp/$db.db" "$tmp/$db.json" <<'PY' || fail "export json $db: telemetry or scrapes differ from the database"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
doc = json.load(open(sys.argv[2]))
assert doc["cases"], doc
for c in doc["cases"]:
    cid, scrapes, failed, error = db.execute("select id, scrapes, scrapes_failed, scrape_error from bench_case where ordinal = ?", (c["ordinal"],)).fetchone()
    assert (c["scrapes"], c["scrapes_failed"], c["scrape_error"]) == (scrapes, failed, error), (c["scrapes"], c["scrapes_failed"], c["scrape_error"], scrapes, failed, error)
    assert scrapes and scrapes > 0, scrapes
    want = [{"source": src, "name": name, "points": [[t, v] for t, v in db.execute("select t_ns, value from telemetry_point where series_id = ? order by t_ns", (sid,))]}
            for sid, src, name in db.execute("select id, source, name from telemetry_series where case_id = ? order by id", (cid,))]
    # reals as SQLite's JSON writes them: 15 significant digits
    # (docs/REPORTS.md), so 0.15000000000000002 reads back as 0.15
    def same(a, b):
        if isinstance(a, float) or isinstance(b, float):
            return a is not None and b is not None and abs(a - b) <= 1e-14 * max(abs(a), abs(b))
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return a == b
    assert same(c["telemetry"], want), (len(c["telemetry"]), len(want))
print(sum(len(c["telemetry"]) for c in doc["cases"]), "series", file=sys.stderr)
PY
done
python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['cases'][0]; assert c['scrapes_failed'] > 0 and 'larger than 4 MiB' in c['scrape_error'] and c['telemetry'] == [], c" "$tmp/h.json" \
    && python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['cases'][0]; assert len(c['telemetry']) > 3 and any(p[1] is None for s in c['telemetry'] for p in s['points']), c" "$tmp/a.json" \
    && pass "export json: scrapes, their failures and every telemetry point as stored" || fail "export json: telemetry"
printf '[suite]\nname = x\n[backend n]\nplugin = null\n[telemetry]\nperiod = 0\ncolour = red\n' >"$tmp/bad.ini"
"$tb" run "$tmp/bad.ini" --db "$tmp/bad.db" >/dev/null 2>"$tmp/bad.err"
[ $? = 2 ] && grep -q "bad.ini:6: period: expected seconds between samples" "$tmp/bad.err" \
    && grep -q "bad.ini:7: colour: unknown key in \[telemetry\]" "$tmp/bad.err" && pass "bad keys: errors at file:line" \
    || fail "bad keys: $(cat "$tmp/bad.err")"

tb_finish
