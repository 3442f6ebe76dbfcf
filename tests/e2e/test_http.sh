#!/usr/bin/env bash
# End to end: `tokbench serve` on loopback, benchmarked through plugins/http
# with the real CLI into real SQLite files.
#   1. the CPU engine (tests/data/suites/serve-ar.ini's ar-tiny) served and measured at
#      several concurrencies and at a Poisson rate: every row stored;
#   2. the null backend served with each fault (HTTP 500, 429, a stalled
#      stream, a dropped connection, garbage chunks) plus a refused
#      connection: each case completes, its requests fail with their class,
#      and nothing hangs;
#   3. streaming through the server (every token a chunk), the API key
#      kept out of the database, clean shutdown (the ITL measured against
#      the null step is a timing: test_http_timing.sh, suite timing);
#   4. the varying-output warning: requests of one prompt only (unique
#      prompts never warn; one prompt answered differently does).
#
# usage: test_http.sh BUILD_DIR SOURCE_DIR [SERVE_EXE]
# SERVE_EXE (optional) replaces `tokbench serve`, e.g. to test another build.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init http "$@"
serve_exe=${3:-}
need_sqlite3
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
if "$tb" serve --help >/dev/null 2>&1; then
    serve=("$tb" serve)
elif [ -n "$serve_exe" ] && [ -x "$serve_exe" ]; then
    serve=("$serve_exe")
else
    echo "SKIP: no tokbench serve"; exit 77
fi
export TOKBENCH_PLUGIN_PATH="$build/plugins"

# serve_backend NAME SUITE LABEL [ARGS...]: serve in the background on a
# free port; sets $port and pid_NAME.
serve_backend() {
    local name=$1 suite=$2 label=$3
    shift 3
    start_server "$name" "${serve[@]}" --backend "$label" "$suite" --port 0 "$@"
    eval "pid_$name=$server_pid"
}

tokenizer="$src/models/tiny-llama-random/tokenizer.json"

# ------------------------------------------------------------------ 0
# requests per call: serving backends get the dimension (default
# max(32, 4 x concurrency)); batch backends keep `batch` and a note
printf '[suite]\n[matrix]\nconcurrency = 1, 16\nrequests = 8\n[backend h]\nplugin = http\n[backend h2]\nplugin = http\nrequests = none\n[backend n]\nplugin = null\n' >"$tmp/dry.ini"
"$tb" run "$tmp/dry.ini" --dry-run >"$tmp/dry.out" 2>&1 || fail "dry run: $(cat "$tmp/dry.out")"
for want in "#2    prompt_tokens=128 max_new_tokens=128 batch=1 concurrency=16 requests=8" \
            "#3    prompt_tokens=128 max_new_tokens=128 batch=1 concurrency=1 requests=32" \
            "#4    prompt_tokens=128 max_new_tokens=128 batch=1 concurrency=16 requests=64" \
            "note: requests = 8 not applied: plugin null has no concurrency or request_rate capability" \
            "#5    prompt_tokens=128 max_new_tokens=128 batch=1"; do
    grep -qF -- "$want" "$tmp/dry.out" || fail "dry run lacks: $want"
done
# into a file: grep -q ends at its match, and a writer with more to say
# would get SIGPIPE (pipefail)
"$tb" plugins http >"$tmp/plugins-http.out" && grep -q "burstiness" "$tmp/plugins-http.out" \
    || fail "tokbench plugins http does not list its options"

# ------------------------------------------------------------------ 1
serve_backend ar "$src/tests/data/suites/serve-ar.ini" ar-tiny --max-batch 8
ar_port=$port
cat >"$tmp/engine.ini" <<EOF
[suite]
name = http-engine
warmup = 1
repeat = 3
seed = 3
case_timeout = 120
goodput_ttft_ms = 10000   ; every request qualifies: goodput = req_throughput

[matrix]
prompt_tokens = 16
max_new_tokens = 8
requests = 8

[backend closed]
plugin = http
url = http://127.0.0.1:$ar_port
tokenizer = $tokenizer
concurrency = 1, 2, 4

[backend poisson]
plugin = http
url = http://127.0.0.1:$ar_port/v1
endpoint = chat
tokenizer = $tokenizer
request_rate = 20
EOF
if timeout 300 "$tb" run "$tmp/engine.ini" --db "$tmp/engine.db" >"$tmp/engine.out" 2>"$tmp/engine.err"; then
    pass "engine over HTTP: suite ran"
else
    fail "engine over HTTP: exit $?"; cat "$tmp/engine.err"
fi
[ "$(q "$tmp/engine.db" "select count(*) from summary where status = 'ok'")" = 4 ] \
    || fail "engine: expected 4 ok cases: $(q "$tmp/engine.db" "select backend, status, error from summary")"
# a server's dtype and device are not reported: not shown as "?" (issue 39 item 7)
grep -q '^  backend closed: http .*; capabilities' "$tmp/engine.out" && ! grep -q 'dtype ?\|device ?' "$tmp/engine.out" \
    || fail "engine: the http backend's header line: $(grep '^  backend closed' "$tmp/engine.out")"
[ "$(q "$tmp/engine.db" "select group_concat(concurrency) from summary where backend = 'closed' order by concurrency")" = "1,2,4" ] \
    || fail "engine: concurrencies not stored"
[ "$(q "$tmp/engine.db" "select request_rate from bench_case c join backend b on b.id = c.backend_id where b.label = 'poisson'")" = 20.0 ] \
    || fail "engine: request rate not stored"
# every request of every call stored: 4 cases x (1 warm-up + 3) x 8
[ "$(q "$tmp/engine.db" "select count(*) from request")" = 128 ] || fail "engine: $(q "$tmp/engine.db" "select count(*) from request") requests stored, expected 128"
[ "$(q "$tmp/engine.db" "select count(*) from request where status = 'ok' and output_tokens = 8 and recount_tokens is not null and ttft_ns > 0 and e2e_ns >= ttft_ns")" = 128 ] \
    || fail "engine: requests lack usage counts, re-counts or timings: $(q "$tmp/engine.db" "select status, error, output_tokens, recount_tokens from request limit 3")"
# text alone, no ids: the usage count is held to the text's re-count
# (docs/METRICS.md, "Output tokens, twice" and "Output-length check")
[ "$(q "$tmp/engine.db" "select count(*) from request where output_ids is not null or count_mismatch <> (case when recount_tokens <> output_tokens then 2 else 0 end)")" = 0 ] \
    || fail "engine: the usage count not held to the re-count: $(q "$tmp/engine.db" "select output_tokens, output_ids, recount_tokens, count_mismatch from request limit 3")"
[ "$(q "$tmp/engine.db" "select count(*) from metric where name = 'error_rate' and median = 0 and n = 3")" = 4 ] || fail "engine: error_rate"
[ "$(q "$tmp/engine.db" "select count(*) from metric where name = 'req_throughput' and median > 0")" = 4 ] || fail "engine: req_throughput"
[ "$(q "$tmp/engine.db" "select count(*) from metric g join metric t on t.case_id = g.case_id and t.name = 'req_throughput' where g.name = 'goodput' and g.n = 3 and g.median = t.median")" = 4 ] \
    || fail "engine: goodput with a lax limit should equal req_throughput"
# open loop: submits follow the schedule (spread over time, not at once)
spread=$(q "$tmp/engine.db" "select max(r.submit_offset_ns) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'poisson' and s.warmup = 0")
[ "${spread:-0}" -gt 50000000 ] || fail "engine: Poisson submits span only ${spread} ns"
pass "engine over HTTP: $(q "$tmp/engine.db" "select group_concat(backend || '@' || coalesce(concurrency, 'rate') || '=' || round(aggregate_tps, 1), ' ') from summary") tok/s"
# unique_prompts (the default): a new prompt for every request of every
# repetition, each stored with its own prompt hash, so a greedy engine's
# outputs differ between repetitions without a varying-output warning
[ "$(q "$tmp/engine.db" "select count(*) from (select s.case_id from request r join sample s on s.id = r.sample_id where s.warmup = 0 group by s.case_id having count(distinct r.prompt_hash) = 24 and count(r.prompt_hash) = 24)")" = 4 ] \
    || fail "engine: every measured request should have its own prompt hash"
if grep -q "produced different outputs" "$tmp/engine.out"; then
    fail "engine: unique prompts warned of varying outputs: $(grep "produced different outputs" "$tmp/engine.out")"
else
    pass "engine: unique prompts, no varying-output warning"
fi

# ------------------------------------------------------------------ 2
null="$build/plugins/null/null.so"
cat >"$tmp/faults-server.ini" <<EOF
[suite]
name = fault-servers
case_timeout = 60
[backend http500]
plugin = $null
step_us = 1000
fault = http_500
[backend http429]
plugin = $null
step_us = 1000
fault = http_429
[backend drop]
plugin = $null
step_us = 1000
fault = drop
fault_after = 2
[backend garbage]
plugin = $null
step_us = 1000
fault = garbage
fault_after = 2
[backend stall]
plugin = $null
step_us = 1000
fault = stall
fault_after = 2
fault_stall_us = 1500000
[backend timing]
plugin = $null
prefill_us = 2000
step_us = 5000
EOF
declare -A fport
for f in http500 http429 drop garbage stall timing; do
    serve_backend "$f" "$tmp/faults-server.ini" "$f"
    fport[$f]=$port
done
# a port with nobody listening: take a free one from a short-lived server
serve_backend gone "$tmp/faults-server.ini" timing
gone_port=$port
kill "$pid_gone"; wait "$pid_gone" 2>/dev/null

export TB_TEST_API_KEY="sk-test-secret-4b1d"
{
    cat <<EOF
[suite]
name = http-faults
warmup = 0
repeat = 2
case_timeout = 60
goodput_tpot_ms = 1   ; the 5 ms steps of 'keyed' miss it
[matrix]
prompt_tokens = 8
max_new_tokens = 6
requests = 4
concurrency = 2
EOF
    for f in http500 http429 drop garbage stall; do
        printf '[backend %s]\nplugin = http\npreflight = false\nurl = http://127.0.0.1:%s\ntimeout = 0.5\n' "$f" "${fport[$f]}"
    done
    printf '[backend refused]\nplugin = http\npreflight = false\nurl = http://127.0.0.1:%s\n' "$gone_port"
    printf '[backend nostream]\nplugin = http\npreflight = false\nurl = http://127.0.0.1:%s\nstream = false\n' "${fport[http429]}"
    printf '[backend keyed]\nplugin = http\nurl = http://127.0.0.1:%s\napi_key_env = TB_TEST_API_KEY\n' "${fport[timing]}"
    printf '[backend direct]\nplugin = %s\nconcurrency = none\nrequests = none\nbatch = 4\nfault = http_429\nfault_every = 2\n' "$null"
} >"$tmp/faults.ini"
timeout 300 "$tb" run "$tmp/faults.ini" --db "$tmp/f.db" >"$tmp/f.out" 2>"$tmp/f.err"
rc=$?
# Cases with failed requests: every request failed -> the case is failed
# (with the reason); some failed -> ok but degraded; either way exit 1.
[ $rc = 1 ] || { fail "fault suite exit $rc (expected 1: failed and degraded cases)"; cat "$tmp/f.err"; }
[ "$(q "$tmp/f.db" "select count(*) from bench_case where error like '%case_timeout%'")" = 0 ] \
    || fail "faults: a case ended by case_timeout, not by its requests' own timeouts"
[ "$(q "$tmp/f.db" "select count(*) from summary where requests > 0 and (failed_requests = requests) = (status = 'failed') and (status = 'ok' or error like 'every request failed: % of %')")" = 9 ] \
    || fail "faults: a case whose every request failed must be failed, and only those: $(q "$tmp/f.db" "select backend, status, requests, failed_requests, error from summary")"
[ "$(q "$tmp/f.db" "select status from summary where backend = 'direct'")" = ok ] || fail "faults: direct (half failed) is not ok"
grep -q "^  direct \[.*\]: degraded: 4 of 8 requests failed (http_429 4)$" "$tmp/f.out" || fail "faults: direct not marked degraded"
# class_of LABEL: "n class" for the measured requests of that backend
class_of() {
    q "$tmp/f.db" "select count(*) || ' ' || cls from (select substr(r.error, 1, instr(r.error, ':') - 1) as cls from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1' and r.status = 'failed') group by cls order by count(*) desc"
}
expect_class() { # LABEL COUNT CLASS
    local got
    got=$(class_of "$1" | tr '\n' ';')
    [ "$got" = "$2 $3;" ] && pass "$1: $2 requests failed as $3" || fail "$1: failed requests by class: '$got', expected '$2 $3'"
}
expect_class http500 8 http_5xx
expect_class http429 8 http_429
expect_class drop 8 dropped
expect_class garbage 8 malformed_stream
expect_class stall 8 timeout
expect_class refused 8 connect
expect_class nostream 8 http_429
expect_class direct 4 http_429
[ "$(q "$tmp/f.db" "select count(*) from metric where name = 'errors_http_429' and median = 4")" = 2 ] \
    || fail "faults: errors_http_429 metric: $(q "$tmp/f.db" "select case_id, median from metric where name = 'errors_http_429'")"
[ "$(q "$tmp/f.db" "select round(median, 2) from metric m join bench_case c on c.id = m.case_id join backend b on b.id = c.backend_id where b.label = 'direct' and m.name = 'error_rate'")" = 0.5 ] \
    || fail "faults: direct error_rate"
grep -q "^  http500 failed \[.*\]: every request failed: 8 of 8 (http_5xx 8); first: http_5xx: HTTP 500" "$tmp/f.out" \
    || fail "faults: no failed-requests warning: $(grep -h -A12 '^warnings:' "$tmp/f.out" | head -12)"
grep -q 'HTTP 500' <(q "$tmp/f.db" "select error from request where error like 'http_5xx%' limit 1") || fail "faults: HTTP status not in the error"

# ------------------------------------------------------------------ 3
# the keyed backend against a healthy server: every token a chunk; the key
# never reaches the database
[ "$(q "$tmp/f.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'keyed' and r.status = 'ok' and json_array_length(r.emissions_json) = 6")" = 8 ] \
    && pass "streaming: every request streamed its 6 tokens as 6 chunks" || fail "timing: every request should stream 6 chunks"
if grep -aq "$TB_TEST_API_KEY" "$tmp/f.db" "$tmp/f.db-wal" "$tmp/f.out" "$tmp/f.err" 2>/dev/null; then
    fail "the API key reached the database or the logs"
else
    pass "API key kept out of the database and logs"
fi
[ "$(q "$tmp/f.db" "select json_extract(info_json, '\$.api_key_env') from backend where label = 'keyed'")" = TB_TEST_API_KEY ] \
    || fail "describe() lacks the key's variable name"
# goodput (goodput_tpot_ms = 1), recomputed from the stored requests: per
# measured call, its ok requests with a TPOT within 1 ms (or none: one
# token) over its wall; the metric is the median of the 2 calls (their
# mean). The 5 ms steps put the requests over the limit, but not always
# all of them: a client held off the CPU can read a stream in one burst,
# with a TPOT near 0. So: calls|requests over the limit|metric = recount.
gp=$(q "$tmp/f.db" "with per as (
    select (select count(*) from request r where r.sample_id = s.id and r.status = 'ok' and (r.tpot_ns is null or r.tpot_ns <= 1e6))
             / (s.wall_ns * 1e-9) as g,
           (select count(*) from request r where r.sample_id = s.id and r.status = 'ok' and r.tpot_ns > 1e6) as over
    from sample s join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id
    where b.label = 'keyed' and s.warmup = 0)
  select (select count(*) from per) || '|' || (select sum(over) > 0 from per) || '|' ||
         (select abs(m.median - (select avg(g) from per)) <= 1e-9 * (1 + m.median) from metric m
          join bench_case c on c.id = m.case_id join backend b on b.id = c.backend_id where b.label = 'keyed' and m.name = 'goodput')")
[ "$gp" = "2|1|1" ] && pass "goodput: only requests within the TPOT limit count" \
    || fail "goodput: requests over the TPOT limit must not count (calls|some over the limit|metric = recount: $gp; goodput $(q "$tmp/f.db" "select m.median from metric m join bench_case c on c.id = m.case_id join backend b on b.id = c.backend_id where b.label = 'keyed' and m.name = 'goodput'"))"
printf '[suite]\ngoodput_ttft_ms = soon\n[backend h]\nplugin = http\n' >"$tmp/badgp.ini"
"$tb" run "$tmp/badgp.ini" --dry-run >/dev/null 2>"$tmp/badgp.err"
grep -q "badgp.ini:2: goodput_ttft_ms: expected a limit in milliseconds > 0" "$tmp/badgp.err" || fail "bad goodput limit: $(cat "$tmp/badgp.err")"

# bad input is refused at suite load with file:line
printf '[suite]\n[backend h]\nplugin = http\nextra_json = [1]\n' >"$tmp/bad.ini"
"$tb" run "$tmp/bad.ini" --db "$tmp/bad.db" >/dev/null 2>"$tmp/bad.err"
[ $? = 2 ] && grep -q "bad.ini:2: backend: .*extra_json: expected a JSON object" "$tmp/bad.err" \
    || fail "bad extra_json: $(cat "$tmp/bad.err")"
# a url the endpoint's path cannot follow is refused at load, naming url
# (util/url.c): the plugin would POST /?x=1/v1/completions, or fail later
# with curl's words
while IFS='|' read -r url want; do
    printf '[suite]\n[backend h]\nplugin = http\nurl = %s\n' "$url" >"$tmp/badurl.ini"
    "$tb" run "$tmp/badurl.ini" --dry-run >/dev/null 2>"$tmp/badurl.err"
    rc=$?
    [ $rc = 2 ] && grep -qF "badurl.ini:2: backend: [backend h] " "$tmp/badurl.err" && grep -qF -- "$want" "$tmp/badurl.err" \
        || fail "url $url: exit $rc, expected 2 and '$want': $(cat "$tmp/badurl.err")"
done <<'EOT'
http://h:1?x=1|url "http://h:1?x=1": a query ("?...") is not taken
http://h:1/#frag|url "http://h:1/#frag": a fragment ("#...") is not taken
http://|url "http://": no host
http://:80/v1|url "http://:80/v1": no host
http://h:99999|url "http://h:99999": the port "99999": expected a number in 1..65535
http://h:0|the port "0": expected a number in 1..65535
http://h:/v1|the port "": expected a number
http://h:8x|the port "8x": expected a number
http://[zz]:1|expected an IPv6 host as [ADDRESS]
http://h^x:1|the host has a '^'
ftp://h|expected http://HOST[:PORT][/PATH]
http://bob:pw99x@h:1?q|url "http://(secret)@h:1?q": a query
EOT
grep -q pw99x "$tmp/badurl.err" && fail "a refused url's password quoted: $(cat "$tmp/badurl.err")"
# a shared prefix needs both its count and its length: either alone is
# refused (prefix_tokens alone would be ignored)
while IFS='|' read -r opt want; do
    printf '[suite]\n[backend h]\nplugin = http\n%s\n' "$opt" >"$tmp/prefix.ini"
    "$tb" run "$tmp/prefix.ini" --dry-run >/dev/null 2>"$tmp/prefix.err"
    rc=$?
    [ $rc = 2 ] && grep -qF -- "$want" "$tmp/prefix.err" || fail "$opt: exit $rc, expected 2 and '$want': $(cat "$tmp/prefix.err")"
done <<'EOT'
prefix_groups = 2|prefix_groups = 2: set prefix_tokens, the shared system prompt's length
prefix_tokens = 64|prefix_tokens = 64: set prefix_groups = N, the shared prefixes' count
EOT
for url in 'http://[::1]:8000/v1' 'https://u:p@example.com:443/base/' 'http://h'; do
    printf '[suite]\n[backend h]\nplugin = http\nurl = %s\n' "$url" >"$tmp/goodurl.ini"
    "$tb" run "$tmp/goodurl.ini" --dry-run >/dev/null 2>"$tmp/goodurl.err" || fail "url $url refused: $(cat "$tmp/goodurl.err")"
done
"${serve[@]}" --backend nope "$tmp/faults-server.ini" --port 0 >/dev/null 2>"$tmp/nope.err"
[ $? = 2 ] && grep -q "no \[backend nope\]" "$tmp/nope.err" || fail "serve of a missing backend: $(cat "$tmp/nope.err")"

# ------------------------------------------------------------------ 4
# The varying-output check compares requests of the same prompt only. The
# served null backend answers each batch with new ids (serve seeds every
# batch anew): with unique prompts nothing is compared; with one prompt
# per slot in every repetition, each of the 4 prompts varies.
cat >"$tmp/vary.ini" <<EOF
[suite]
name = http-vary
warmup = 0
repeat = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 4
requests = 4
concurrency = 2
[backend unique]
plugin = http
url = http://127.0.0.1:${fport[timing]}
[backend same]
plugin = http
url = http://127.0.0.1:${fport[timing]}
unique_prompts = false
EOF
timeout 120 "$tb" run "$tmp/vary.ini" --db "$tmp/vary.db" >"$tmp/vary.out" 2>"$tmp/vary.err" || fail "vary suite: exit $?: $(cat "$tmp/vary.err")"
grep -q "^  unique \[.*produced different outputs" "$tmp/vary.out" && fail "vary: unique prompts warned: $(grep 'produced different' "$tmp/vary.out")"
grep -q "^  same \[.*\]: 4 prompt(s) produced different outputs in different repetitions with the same seed" "$tmp/vary.out" \
    && pass "vary: one prompt, different outputs: warned; unique prompts: not" \
    || fail "vary: expected a warning for 'same' only: $(grep -A8 '^warnings:' "$tmp/vary.out")"
[ "$(q "$tmp/vary.db" "select group_concat(b.label || '=' || n, ' ') from (select c.backend_id, count(distinct r.prompt_hash) as n from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id group by c.backend_id) x join backend b on b.id = x.backend_id")" = "unique=12 same=4" ] \
    || fail "vary: prompt hashes: $(q "$tmp/vary.db" "select b.label, r.prompt_hash from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id")"

# SIGTERM stops a server cleanly, exit 0
kill -TERM "$pid_timing"
for _ in $(seq 1 100); do kill -0 "$pid_timing" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid_timing" 2>/dev/null; then
    fail "server still running 10 s after SIGTERM"
else
    wait "$pid_timing"
    rc=$?
    [ $rc = 0 ] && pass "server stopped on SIGTERM" || fail "server exit $rc after SIGTERM"
fi

tb_finish
