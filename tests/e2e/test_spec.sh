#!/usr/bin/env bash
# End to end, speculative decoding's metrics (docs/METRICS.md,
# "Speculative decoding"), without a model:
#   1. the null backend's scripted counts (spec_accept = 4,0,3,1, drafts of
#      4: each request 4 verifications, 8 of 16 accepted, 12 tokens) are
#      stored per request (request.spec_*), per call (sample.draft_ns) and
#      per case (acceptance_length 3, acceptance_rate 0.5, acceptance_at_1..4
#      0.75 0.5 0.5 0.25, target_forwards_per_token 5/24); a plain case
#      beside it has none of them (no row, not 0);
#   2. impossible counts (spec_fault) fail their request with the reason;
#   3. the text report has a "Speculative decoding" table of the
#      speculative case only, the main table no new column; the HTML
#      report's chart "acceptance by draft position" has the case's four
#      points; the CSV and JSON exports carry the metrics;
#   4. plugins/http reads SGLang's per-request meta_info (streamed and
#      not), an older SGLang's spec_accept_length alone, refuses
#      impossible and malformed counts, and takes vLLM's /metrics counters
#      (the suite's [telemetry]) as the case's figures.
# Counts and values only: no wall-clock bounds.
#
# usage: test_spec.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init spec "$@"
need_sqlite3
export TOKBENCH_PLUGIN_PATH="$build/plugins"
metric() { # DB BACKEND METRIC: "n|mean" of the case's row, "" when none
    q "$1" "select m.n || '|' || round(m.mean, 6) from metric m join bench_case c on c.id = m.case_id
        join backend b on b.id = c.backend_id where b.label = '$2' and m.name = '$3'"
}

# ---------------------------------------------------------------- 1. null
cat >"$tmp/n.ini" <<EOT
[suite]
name = spec
warmup = 1
repeat = 2
[matrix]
prompt_tokens = 4
max_new_tokens = 12
batch = 2
[backend spec]
plugin = null
step_us = 100
spec_accept = 4,0,3,1
spec_draft = 4
spec_draft_share = 0.25
[backend plain]
plugin = null
step_us = 100
[backend accepted]
plugin = null
spec_accept = 2
spec_fault = accepted
[backend position]
plugin = null
spec_accept = 2
spec_fault = position
[backend draft_len]
plugin = null
spec_accept = 2
spec_fault = draft_len
EOT
"$tb" run "$tmp/n.ini" --db "$tmp/n.db" >"$tmp/n.out" 2>"$tmp/n.err"
[ "$(q "$tmp/n.db" "select count(*) from bench_case where status = 'ok'")" = 5 ] && pass "5 cases ran" \
    || fail "run: $(cat "$tmp/n.err")"
got=$(q "$tmp/n.db" "select group_concat(x, ' ') from (select distinct r.spec_verifications || '/' || r.spec_drafted
    || '/' || r.spec_accepted || '/' || r.spec_draft_len || '/' || r.spec_at || '/' || r.acceptance_length || '/'
    || r.acceptance_rate as x from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
    join backend b on b.id = c.backend_id where b.label = 'spec')")
[ "$got" = "4/16/8/4/[[4,3],[4,2],[4,2],[4,1]]/3.0/0.5" ] && pass "per request: counts, positions, length, rate stored" \
    || fail "spec requests: $got"
[ "$(q "$tmp/n.db" "select count(*) from sample s join bench_case c on c.id = s.case_id join backend b
      on b.id = c.backend_id where b.label = 'spec' and s.draft_ns > 0 and s.draft_ns <= s.decode_ns")" = 3 ] \
    && pass "per call: draft_ns stored, within decode_ns" || fail "draft_ns"
for m in "acceptance_length 1|3.0" "acceptance_rate 1|0.5" "acceptance_at_1 1|0.75" "acceptance_at_2 1|0.5" \
         "acceptance_at_3 1|0.5" "acceptance_at_4 1|0.25" "target_forwards_per_token 2|0.208333"; do
    set -- $m
    [ "$(metric "$tmp/n.db" spec "$1")" = "$2" ] && pass "spec: $1 = $2 (n|mean)" \
        || fail "spec: $1 is '$(metric "$tmp/n.db" spec "$1")', want $2"
done
share=$(q "$tmp/n.db" "select m.n from metric m join bench_case c on c.id = m.case_id join backend b on b.id = c.backend_id
    where b.label = 'spec' and m.name = 'draft_time_share' and abs(m.median - 0.25) < 0.001")
[ "$share" = 2 ] && pass "spec: draft_time_share 0.25 over 2 calls" || fail "draft_time_share: '$share'"
[ "$(q "$tmp/n.db" "select count(*) from metric m join bench_case c on c.id = m.case_id join backend b
      on b.id = c.backend_id where b.label = 'plain' and (m.name like 'acceptance%' or m.name in
      ('draft_time_share', 'target_forwards_per_token'))")" = 0 ] && pass "plain: no speculative row" \
    || fail "plain case has speculative rows"
[ "$(q "$tmp/n.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c
      on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'plain' and (r.spec_verifications
      is not null or r.acceptance_length is not null or s.draft_ns is not null)")" = 0 ] \
    && pass "plain: per-request and per-call columns NULL" || fail "plain: speculative columns not NULL"

# ---------------------------------------------------------------- 2. bounds
for f in "accepted|accepted 17 > drafted 16" "position|accepted_at\[0\] 5 > drafted_at\[0\] 4" \
         "draft_len|draft_len 65 > 64"; do
    b=${f%%|*} want=${f#*|}
    e=$(q "$tmp/n.db" "select r.error from request r join sample s on s.id = r.sample_id join bench_case c
        on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$b' and r.idx = 0 limit 1")
    ok1=$(q "$tmp/n.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c
        on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$b' and r.idx = 1
        and r.status = 'ok' and r.spec_accepted = 8")
    grep -q "^impossible figure: speculative counts: $want" <<<"$e" && [ "$ok1" = 3 ] \
        && pass "$b: request 0 failed ($e), request 1 kept" || fail "$b: '$e', request 1 ok $ok1 of 3"
done

# ---------------------------------------------------------------- 3. reports
"$tb" show --db "$tmp/n.db" 1 >"$tmp/show.txt" 2>&1 || fail "show: $(cat "$tmp/show.txt")"
main=$(grep -m1 '^backend ' "$tmp/show.txt")
[ -n "$main" ] && ! grep -qi "accept\|draft" <<<"$main" && pass "the main table has no speculative column" \
    || fail "the main table's header: $main"
sed -n '/^Speculative decoding:/,/^$/p' "$tmp/show.txt" >"$tmp/spec_table.txt"
grep -q "^spec .* 3\.00 *0\.500 *4 *0\.75 0\.50 0\.50 0\.25 *0\.25[0-9] *0\.208 " "$tmp/spec_table.txt" \
    && pass "text: the Speculative decoding table's row" || fail "text table: $(cat "$tmp/spec_table.txt")"
grep -q "^plain " "$tmp/spec_table.txt" && fail "text: the plain case in the speculative table" \
    || pass "text: only speculative cases in it"
"$tb" report --db "$tmp/n.db" --format markdown 1 >"$tmp/r.md" 2>&1 || fail "markdown report"
grep -q "Speculative decoding" "$tmp/r.md" && pass "markdown: the table" || fail "markdown: no table"
"$tb" report --db "$tmp/n.db" --format html 1 >"$tmp/r.html" 2>&1 || fail "html report"
[ "$(grep -c 'data-kind="acceptance"' "$tmp/r.html")" = 1 ] && pass "html: one acceptance chart" \
    || fail "html: $(grep -c 'data-kind="acceptance"' "$tmp/r.html") acceptance charts"
pts=$(grep -o '<title>spec, [^<]*: position [0-9], [0-9.]* accepted' "$tmp/r.html" | sed 's/.*position //' | tr '\n' ';')
[ "$pts" = "1, 0.750 accepted;2, 0.500 accepted;3, 0.500 accepted;4, 0.250 accepted;" ] \
    && pass "html: the spec curve's points (position, share)" || fail "html points: $pts"
grep -q "<title>plain, [^<]*: position" "$tmp/r.html" && fail "html: a curve for the plain case" \
    || pass "html: no curve for the plain case"
"$tb" export --db "$tmp/n.db" --format csv 1 >"$tmp/e.csv" 2>&1
col=$(head -1 "$tmp/e.csv" | tr ',' '\n' | grep -n '^acceptance_length$' | cut -d: -f1)
[ -n "$col" ] && [ "$(sed -n 2p "$tmp/e.csv" | cut -d, -f"$col")" = "3.0" ] && pass "csv: acceptance_length" \
    || fail "csv: $(head -2 "$tmp/e.csv")"
"$tb" export --db "$tmp/n.db" --format json 1 >"$tmp/e.json" 2>&1
python3 - "$tmp/e.json" <<'PY' && pass "json: case metrics and request counts" || fail "json export"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["cases"][0]
assert c["metrics"]["acceptance_at_4"]["mean"] == 0.25, c["metrics"].keys()
r = c["samples"][1]["requests"][0]
assert r["spec_at"] == [[4, 3], [4, 2], [4, 2], [4, 1]] and r["acceptance_length"] == 3.0, r
assert "acceptance_length" not in d["cases"][1]["metrics"]
PY

# ---------------------------------------------------------------- 4. http
if [ -f "$build/plugins/http/http.so" ] && command -v python3 >/dev/null; then
    start_server spec python3 "$src/tests/e2e/spec_server.py" || tb_finish
    cat >"$tmp/h.ini" <<EOT
[suite]
name = spec-http
warmup = 0
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 12
requests = 2
concurrency = 1
[backend sglang]
plugin = http
url = http://127.0.0.1:$port/sglang/v1
preflight = false
[backend sglang_once]
plugin = http
url = http://127.0.0.1:$port/sglang/v1
preflight = false
stream = false
[backend sglang_len]
plugin = http
url = http://127.0.0.1:$port/sglang_len/v1
preflight = false
[backend bad]
plugin = http
url = http://127.0.0.1:$port/bad/v1
preflight = false
[backend malformed]
plugin = http
url = http://127.0.0.1:$port/malformed/v1
preflight = false
EOT
    "$tb" run "$tmp/h.ini" --db "$tmp/h.db" >"$tmp/h.out" 2>"$tmp/h.err"
    for b in sglang sglang_once; do
        for m in "acceptance_length 1|3.0" "acceptance_rate 1|0.5" "acceptance_at_1 1|0.75" "acceptance_at_2 1|0.5" \
                 "acceptance_at_3 1|0.5" "acceptance_at_4 1|0.25"; do
            set -- $m
            [ "$(metric "$tmp/h.db" $b "$1")" = "$2" ] && pass "http $b: $1 = $2" \
                || fail "http $b: $1 is '$(metric "$tmp/h.db" $b "$1")', want $2 ($(tail -3 "$tmp/h.err"))"
        done
    done
    [ "$(metric "$tmp/h.db" sglang_len acceptance_length)" = "1|3.0" ] && [ -z "$(metric "$tmp/h.db" sglang_len acceptance_rate)" ] \
        && pass "http sglang_len: a length from spec_accept_length, no rate" \
        || fail "sglang_len: '$(metric "$tmp/h.db" sglang_len acceptance_length)' '$(metric "$tmp/h.db" sglang_len acceptance_rate)'"
    e=$(q "$tmp/h.db" "select r.error from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
        join backend b on b.id = c.backend_id where b.label = 'bad' limit 1")
    [ "$e" = "impossible figure: speculative counts: accepted 17 > drafted 16" ] && pass "http bad: the request fails: $e" \
        || fail "http bad: '$e'"
    e=$(q "$tmp/h.db" "select r.error from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
        join backend b on b.id = c.backend_id where b.label = 'malformed' limit 1")
    grep -q '^malformed_stream: .*meta_info.spec_verify_ct "four" is not a count' <<<"$e" \
        && pass "http malformed: named: $e" || fail "http malformed: '$e'"

    cat >"$tmp/v.ini" <<EOT
[suite]
name = spec-vllm
warmup = 0
repeat = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 12
[backend vllm]
plugin = http
url = http://127.0.0.1:$port/vllm/v1
preflight = false
[telemetry]
metrics_url = http://127.0.0.1:$port/metrics
period = 0.05
EOT
    "$tb" run "$tmp/v.ini" --db "$tmp/v.db" >"$tmp/v.out" 2>"$tmp/v.err"
    pts=$(q "$tmp/v.db" "select count(*) from telemetry_point p join telemetry_series s on s.id = p.series_id
        where s.name like 'vllm:spec_decode_num_drafts%'")
    if [ "${pts:-0}" -ge 2 ]; then
        for m in "acceptance_length 1|3.0" "acceptance_rate 1|0.5" "acceptance_at_1 1|0.75" "acceptance_at_2 1|0.5" \
                 "acceptance_at_4 1|0.25"; do
            set -- $m
            [ "$(metric "$tmp/v.db" vllm "$1")" = "$2" ] && pass "http vllm counters: $1 = $2" \
                || fail "vllm counters: $1 is '$(metric "$tmp/v.db" vllm "$1")', want $2"
        done
    else
        echo "note: $pts scrape(s) of /metrics during the vLLM case: its counters' growth not checked"
    fi
else
    echo "note: no http plugin or python3: part 4 skipped"
fi
tb_finish
