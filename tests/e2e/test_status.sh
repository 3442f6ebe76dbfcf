#!/usr/bin/env bash
# Case status rules (docs/METRICS.md, "Case status"), end to end:
#  - a case whose every request fails is `failed`, with the reason, its
#    samples still stored; `run` exits 1 (a dead server included);
#  - a case with some failed requests is `ok` but degraded: marked in
#    show's table and warnings, and `run` exits 1 unless the failed share
#    is within --max-error-rate;
#  - `compare --fail-if-slower` counts a newly degraded case as a
#    regression.
#
# usage: test_status.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init status "$@"
null="$build/plugins/null/null.so"
need_sqlite3

suite() { # $1: extra lines of the backend section
    printf '[suite]\nwarmup = 1\nrepeat = 3\n[matrix]\nprompt_tokens = 8\nmax_new_tokens = 4\nbatch = 4\n[backend b]\nplugin = %s\n%b\n' "$null" "$1"
}

# 1. Every request fails: failed, exit 1, the samples kept.
suite 'fault = http_500\nfault_every = 1' >"$tmp/all.ini"
"$tb" run "$tmp/all.ini" --db "$tmp/s.db" >"$tmp/all.out" 2>"$tmp/all.err"
rc=$?
[ $rc = 1 ] || fail "all requests failed: exit $rc, expected 1"
[ "$(q "$tmp/s.db" "select status || '|' || error from bench_case")" = "failed|every request failed: 12 of 12 (http_5xx 12); first: http_5xx: scripted fault (HTTP 500)" ] \
    || fail "all requests failed: case $(q "$tmp/s.db" "select status || '|' || error from bench_case")"
[ "$(q "$tmp/s.db" "select count(*) from request")" = 16 ] || fail "the failed case's requests were not kept"
grep -q "^  b failed \[.*\]: every request failed: 12 of 12" "$tmp/all.out" || fail "no warning for the failed case"
pass "every request failed: case failed, exit 1, samples kept"

# 2. Half fail: ok but degraded; exit 1 by default, 0 within --max-error-rate.
suite 'fault = http_429\nfault_every = 2' >"$tmp/half.ini"
"$tb" run "$tmp/half.ini" --db "$tmp/h.db" >"$tmp/half.out" 2>"$tmp/half.err"
rc=$?
[ $rc = 1 ] || fail "half failed: exit $rc, expected 1 (degraded at the default --max-error-rate 0)"
[ "$(q "$tmp/h.db" "select status from bench_case")" = ok ] || fail "half failed: not ok"
grep -q "^b .* degraded " "$tmp/half.out" || fail "half failed: no degraded mark in the table: $(head -20 "$tmp/half.out")"
grep -q "^  b \[.*\]: degraded: 6 of 12 requests failed (http_429 6)$" "$tmp/half.out" || fail "half failed: no degraded warning"
grep -q "1 degraded" "$tmp/half.err" || fail "half failed: the last line does not say degraded"
"$tb" run "$tmp/half.ini" --db "$tmp/h.db" --max-error-rate 0.5 >"$tmp/half5.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "half failed within --max-error-rate 0.5: exit $rc, expected 0"
# the rate decides the exit status only: the case is shown degraded all the same (CLI.md)
grep -q "^b .* degraded " "$tmp/half5.out" || fail "half failed within --max-error-rate 0.5: not shown degraded"
"$tb" run "$tmp/half.ini" --db "$tmp/h.db" --max-error-rate 0.4 >/dev/null 2>&1
rc=$?
[ $rc = 1 ] || fail "half failed over --max-error-rate 0.4: exit $rc, expected 1"
"$tb" run "$tmp/half.ini" --db "$tmp/h.db" --max-error-rate 2 >/dev/null 2>"$tmp/bad.err"
rc=$?
[ $rc = 2 ] && grep -q -- "--max-error-rate 2: expected a fraction" "$tmp/bad.err" || fail "bad --max-error-rate: exit $rc"
pass "some requests failed: degraded, --max-error-rate"

# 3. compare: a clean session A against a degraded B is a regression.
suite '' >"$tmp/clean.ini"
"$tb" run "$tmp/clean.ini" --db "$tmp/c.db" >/dev/null 2>&1 || fail "clean run failed"
suite 'fault = http_429\nfault_every = 2' >"$tmp/half.ini"
"$tb" run "$tmp/half.ini" --db "$tmp/c.db" >/dev/null 2>&1
"$tb" compare 1 2 --db "$tmp/c.db" --fail-if-slower 1000 >"$tmp/cmp.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "compare clean vs degraded: exit $rc, expected 1: $(tail -5 "$tmp/cmp.out")"
grep -q "degraded in B: 6 of 12 requests failed" "$tmp/cmp.out" || fail "compare does not say degraded"
"$tb" compare 2 1 --db "$tmp/c.db" --fail-if-slower 1000 >/dev/null 2>&1
rc=$?
[ $rc = 0 ] || fail "compare degraded vs clean: exit $rc, expected 0"
# the error-rate gate sets how many failures B may have (6 of 12 = 0.5)
"$tb" compare 1 2 --db "$tmp/c.db" --fail-if-error-rate-above 0.6 >/dev/null 2>&1
rc=$?
[ $rc = 0 ] || fail "compare --fail-if-error-rate-above 0.6 with B at 0.5: exit $rc, expected 0"
"$tb" compare 1 2 --db "$tmp/c.db" --fail-if-error-rate-above 0.4 >"$tmp/cmp.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "error rate 0.5 in B (6 of 12 requests), above 0.4" "$tmp/cmp.out" \
    || fail "compare --fail-if-error-rate-above 0.4 with B at 0.5: exit $rc: $(tail -4 "$tmp/cmp.out")"
pass "compare: newly degraded is a regression; --fail-if-error-rate-above"

# 3b. Accuracy gate: the stored accuracy of A and B (0.9 and 0.8).
cp "$tmp/c.db" "$tmp/acc.db"
q "$tmp/acc.db" "insert into metric (case_id, name, unit, n, median, mean) select c.id, 'accuracy', 'fraction', 100, case c.session_id when 1 then 0.9 else 0.8 end, 0 from bench_case c"
"$tb" compare 1 2 --db "$tmp/acc.db" --fail-if-accuracy-drops 15 --fail-if-error-rate-above 1 >/dev/null 2>&1
rc=$?
[ $rc = 0 ] || fail "accuracy 90% -> 80% with --fail-if-accuracy-drops 15: exit $rc, expected 0"
"$tb" compare 1 2 --db "$tmp/acc.db" --fail-if-accuracy-drops 5 --fail-if-error-rate-above 1 >"$tmp/acc.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "accuracy 90.0% -> 80.0% (-10.0 points, more than 5)" "$tmp/acc.out" \
    || fail "accuracy 90% -> 80% with --fail-if-accuracy-drops 5: exit $rc: $(tail -4 "$tmp/acc.out")"
pass "compare --fail-if-accuracy-drops"

# 3c. p99 TTFT gate: B's prefill 200x A's (p99 of 12 requests is about their
# largest: a stall of the loaded machine in A's run must reach 130 ms to hide it)
suite 'prefill_us = 1000' >"$tmp/fast.ini"
suite 'prefill_us = 200000' >"$tmp/slow.ini"
"$tb" run "$tmp/fast.ini" --db "$tmp/t.db" >/dev/null 2>&1 || fail "fast run"
"$tb" run "$tmp/slow.ini" --db "$tmp/t.db" >/dev/null 2>&1 || fail "slow run"
"$tb" compare 1 2 --db "$tmp/t.db" --fail-if-p99-ttft-above 50 >"$tmp/ttft.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "p99 TTFT .* ms -> .* ms (+.*%, more than 50%)" "$tmp/ttft.out" \
    || fail "p99 TTFT 200x with --fail-if-p99-ttft-above 50: exit $rc: $(tail -4 "$tmp/ttft.out")"
"$tb" compare 2 1 --db "$tmp/t.db" --fail-if-p99-ttft-above 50 >/dev/null 2>&1
rc=$?
[ $rc = 0 ] || fail "p99 TTFT lower in B: exit $rc, expected 0"
"$tb" compare 1 2 --db "$tmp/t.db" --fail-if-p99-ttft-above -1 >/dev/null 2>&1
[ $? = 2 ] || fail "a negative --fail-if-p99-ttft-above is bad input"
pass "compare --fail-if-p99-ttft-above"

# 4. A dead server, its check skipped (preflight = false: test_failures.sh
# has the check): every request 'connect', the case failed, exit 1.
http="$build/plugins/http/http.so"
if [ -f "$http" ]; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    printf '[suite]\nwarmup = 0\nrepeat = 2\n[matrix]\nprompt_tokens = 8\nmax_new_tokens = 4\nconcurrency = 2\n[backend dead]\nplugin = %s\npreflight = false\nurl = http://127.0.0.1:%s\nrequests = 4\ntimeout = 5\n' "$http" "$port" >"$tmp/dead.ini"
    "$tb" run "$tmp/dead.ini" --db "$tmp/d.db" >"$tmp/dead.out" 2>"$tmp/dead.err"
    rc=$?
    [ $rc = 1 ] || fail "dead server: exit $rc, expected 1"
    case "$(q "$tmp/d.db" "select status || '|' || error from bench_case")" in
    "failed|every request failed: 8 of 8 (connect 8)"*) pass "dead server: case failed, exit 1" ;;
    *) fail "dead server: $(q "$tmp/d.db" "select status || '|' || error from bench_case") $(tail -3 "$tmp/dead.err")" ;;
    esac
fi

tb_finish
