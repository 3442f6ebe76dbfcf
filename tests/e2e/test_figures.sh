#!/usr/bin/env bash
# End to end: impossible figures are never stored as ok (issue 38 item 8).
#   1. request_rate below TB_RATE_MIN (1e-300: its schedule would pass
#      int64 nanoseconds) is a suite error at its file:line, --dry-run
#      too; the least rate itself is accepted;
#   2. a plugin that reports a figure backend.h rules out (the test plugin
#      tests/plugins/misbehave.c, bad_figure =): 4294967294 output tokens
#      for max_new_tokens 4, an E2E of -9.2e18 ns, a first token 292 years
#      after the call, a request sent before the call, prefill_ns -5: the
#      request (or, for the call's own figure, the case) fails with the
#      reason; a sane case beside them is ok. So do an emission of
#      1,000,000 tokens for 4 output tokens, 0 output tokens after 4
#      emitted, steps_done and blocks_done 4e9 from a backend without
#      TB_CAP_STEPS / TB_CAP_BLOCKS, prompt_tokens 4e9 for a case of 4, and
#      (the case) client_busy 500;
#   3. figures the host sets itself: a batch backend that says its
#      requests were sent at their first token (20 ms into the call) is
#      timed from the call's start (TTFT >= 20 ms), and one that says an
#      hour before the call too (a serving backend's fails, in 2); an emission of 0 tokens
#      at the call's start is no first token (TTFT >= 20 ms, not in the
#      emission list);
#   4. plugin text: an error[128] without its NUL is read within the field
#      (128 'Z', none of the next request's bytes); an error and a
#      describe() that are not UTF-8 are stored with U+FFFD for each bad
#      byte, and `export --format json` parses and the HTML report is
#      UTF-8; a describe() past TB_DESCRIBE_MAX (1 MiB) fails the load
#      with the limit named, one of exactly 1 MiB loads.
# (HTTP streams: a server's usage count past what a request allows is
# tests/e2e/test_faults.sh's /over_usage and /huge_usage.)
#
# usage: test_figures.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init figures "$@"
null="$build/plugins/null/null.so"
mis="$build/tests/plugins/misbehave.so"
need_sqlite3

# ------------------------------------------------------------------ 1
rate_suite() {
    cat <<EOF
[suite]
repeat = 1
warmup = 0
[matrix]
max_new_tokens = 4
requests = 4
request_rate = $1
[backend n]
plugin = $null
EOF
}
rate_suite 1e-300 >"$tmp/rate.ini"
"$tb" run "$tmp/rate.ini" --db "$tmp/rate.db" --dry-run >"$tmp/rate.out" 2>"$tmp/rate.err"
rc=$?
[ $rc = 2 ] && pass "request_rate = 1e-300: exit 2 at --dry-run" || fail "request_rate = 1e-300: exit $rc, expected 2"
grep -q "^$tmp/rate.ini:7: request_rate: .*1e-300 requests/s is below the least, 1e-06 (TB_RATE_MIN" "$tmp/rate.err" \
    && pass "request_rate = 1e-300: the error names file:line, the key and the limit" \
    || fail "request_rate = 1e-300: error is: $(cat "$tmp/rate.err")"
rate_suite 1e-6 >"$tmp/rate_min.ini"
"$tb" run "$tmp/rate_min.ini" --db "$tmp/rate_min.db" --dry-run >"$tmp/rate_min.out" 2>"$tmp/rate_min.err"
rc=$?
[ $rc = 0 ] && pass "request_rate = 1e-6 (the least): accepted" || fail "request_rate = 1e-6: exit $rc: $(cat "$tmp/rate_min.err")"

# ------------------------------------------------------------------ 2
cat >"$tmp/fig.ini" <<EOF
[suite]
repeat = 1
warmup = 0
[matrix]
prompt_tokens = 4
max_new_tokens = 4
batch = 1
[backend m]
plugin = $mis
bad_figure = none, tokens, e2e, ttft, prefill, big_emit, zero_tokens, steps, blocks, prompt, client_busy
EOF
"$tb" run "$tmp/fig.ini" --db "$tmp/fig.db" >"$tmp/fig.out" 2>"$tmp/fig.err"
rc=$?
[ $rc = 1 ] && pass "impossible figures: exit 1 (cases failed)" || fail "impossible figures: exit $rc, expected 1: $(cat "$tmp/fig.err")"
mapfile -t rows < <(q "$tmp/fig.db" "select status || ' ' || coalesce(error, '') from bench_case order by ordinal")
expect() { # N WHAT PATTERN
    case "${rows[$1]:-}" in
        $3) pass "$2: ${rows[$1]}";;
        *) fail "$2: stored '${rows[$1]:-(nothing)}'";;
    esac
}
expect 0 "sane figures" "ok "
f="failed every request failed: 1 of 1 (other 1); first: impossible figure:"
expect 1 "4294967294 output tokens" "$f 4294967294 output tokens for max_tokens 4 (at most 32)"
expect 2 "E2E of -9.2e18 ns" "$f done at -922??????????.??? ms of a call of * ms (sent at +0.000 ms)"
expect 3 "a first token 292 years late" "$f tokens emitted at +92000000000* ms of a call of * ms (sent at +0.000 ms)"
expect 4 "prefill_ns -5" "failed impossible figure at repetition 1: prefill_ns = -5 (a call of * ns); case failed"
expect 5 "an emission of 1,000,000 tokens" "$f 1000004 tokens emitted for 4 output tokens"
expect 6 "0 output tokens, 4 emitted" "$f 4 tokens emitted for 0 output tokens"
expect 7 "steps_done without TB_CAP_STEPS" "$f steps_done 4000000000 from a backend without TB_CAP_STEPS"
expect 8 "blocks_done without TB_CAP_BLOCKS" "$f blocks_done 4000000000 from a backend without TB_CAP_BLOCKS"
expect 9 "prompt_tokens 4e9 for a case of 4" "$f prompt_tokens 4000000000 for a prompt of at most 20 (the case's prompt_tokens + 16)"
expect 10 "client_busy 500" "failed impossible figure at repetition 1: client_busy = 500 (backend.h: 0..1); case failed"
# a serving backend's own submit time (TB_MISBEHAVE=entry:serving: the
# same plugin with TB_CAP_CONCURRENCY), before the call
sed -e 's/^bad_figure = .*/bad_figure = submit/' -e 's/^batch = 1/requests = 1/' "$tmp/fig.ini" >"$tmp/serve.ini"
TB_MISBEHAVE=entry:serving "$tb" run "$tmp/serve.ini" --db "$tmp/serve.db" >"$tmp/serve.out" 2>"$tmp/serve.err"
rows=("$(q "$tmp/serve.db" "select status || ' ' || coalesce(error, '') from bench_case")")
# (an hour before its read of the clock, which may round to -3600000.000)
expect 0 "a serving backend's request sent before the call" "$f sent at -3[56]?????.??? ms of a call of * ms"
# no request of the failed cases stored as ok, no figure of theirs kept
n=$(q "$tmp/fig.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
    where c.ordinal > (select min(ordinal) from bench_case) and r.status = 'ok'")
[ "$n" = 0 ] && pass "no request with an impossible figure stored as ok" || fail "$n requests with impossible figures stored as ok"

# nor a figure of theirs that no backend has
n=$(q "$tmp/fig.db" "select count(*) from request where steps_done is not null or blocks_done is not null
    or prompt_tokens > 20")
[ "$n" = 0 ] && pass "no steps, blocks or prompt figure of theirs stored" || fail "$n requests keep an impossible count"

# ------------------------------------------------------------------ 3
cat >"$tmp/host.ini" <<EOF
[suite]
repeat = 1
warmup = 0
[matrix]
prompt_tokens = 4
max_new_tokens = 4
batch = 2
[backend m]
plugin = $mis
bad_figure = late_submit, zero_emit, submit
EOF
"$tb" run "$tmp/host.ini" --db "$tmp/host.db" >"$tmp/host.out" 2>"$tmp/host.err"
rc=$?
[ $rc = 0 ] && pass "host-set figures: exit 0" || fail "host-set figures: exit $rc: $(cat "$tmp/host.err")"
# TTFT from the call's start: at least the 20 ms the plugin slept before
# its first token (a lower bound that nanosleep() guarantees)
ttft() { # ORDINAL: each request's status and whether TTFT >= 20 ms
    q "$tmp/host.db" "select r.status || ' ' || (r.ttft_ns >= 20000000) from request r join sample s on s.id = r.sample_id
        join bench_case c on c.id = s.case_id where c.ordinal = $1 order by r.idx" | tr '\n' ' '
}
[ "$(ttft 1)" = "ok 1 ok 1 " ] && pass "a batch backend's own submit time: ignored, TTFT from the call's start" \
    || fail "late_submit: requests (status, TTFT >= 20 ms): $(ttft 1)"
[ "$(ttft 2)" = "ok 1 ok 1 " ] && pass "an emission of 0 tokens: no first token" \
    || fail "zero_emit: requests (status, TTFT >= 20 ms): $(ttft 2)"
[ "$(q "$tmp/host.db" "select group_concat(r.status || ' ' || r.submit_offset_ns, ' ') from request r
    join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id where c.ordinal = 3")" = "ok 0 ok 0" ] \
    && pass "a batch backend's submit time an hour before the call: ignored" \
    || fail "submit: $(q "$tmp/host.db" "select status, submit_offset_ns, error from request")"
n=$(q "$tmp/host.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
    where c.ordinal = 2 and (r.emissions_json like '%,0]%' or json_array_length(r.emissions_json) <> 1)")
[ "$n" = 0 ] && pass "an emission of 0 tokens: not in the emission list" \
    || fail "zero_emit: emission lists: $(q "$tmp/host.db" "select emissions_json from request")"

# ------------------------------------------------------------------ 4
cat >"$tmp/text.ini" <<EOF
[suite]
repeat = 1
warmup = 0
[matrix]
prompt_tokens = 4
max_new_tokens = 4
batch = 2
[backend m]
plugin = $mis
describe_fault = none, latin1, big, max
bad_figure = error_nonul, error_latin1
EOF
"$tb" run "$tmp/text.ini" --db "$tmp/text.db" >"$tmp/text.out" 2>"$tmp/text.err"
rc=$?
[ $rc = 1 ] && pass "plugin text: exit 1 (a load failed)" || fail "plugin text: exit $rc: $(cat "$tmp/text.err")"
hex() { od -An -v -tx1 | tr -d ' \n' | tr a-f A-F; }
err_of() { # BAD_FIGURE: request 0's stored error, in hex
    q "$tmp/text.db" "select hex(r.error) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
        where c.options_json like '%\"describe_fault\":\"none\"%' and c.options_json like '%\"$1\"%' and r.idx = 0"
}
want=$(printf 'Z%.0s' $(seq 128) | hex)
[ "$(err_of error_nonul)" = "$want" ] && pass "an error[128] without its NUL: its 128 bytes, nothing after" \
    || fail "error without a NUL stored as $(err_of error_nonul)"
# "other: caf\xe9 \xff\xfe": each bad byte one U+FFFD (EF BF BD)
want=$(printf 'other: caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd' | hex)
[ "$(err_of error_latin1)" = "$want" ] && pass "an error that is not UTF-8: U+FFFD for each bad byte" \
    || fail "latin-1 error stored as $(err_of error_latin1), expected $want"
case "$(q "$tmp/text.db" "select status || ' ' || error from bench_case where options_json like '%\"big\"%' limit 1")" in
    "failed describe() returned more than 1048576 bytes (TB_DESCRIBE_MAX, backend.h); the load failed")
        pass "a describe() over 1 MiB: the load failed, the limit named";;
    *) fail "big describe: $(q "$tmp/text.db" "select status || ' ' || coalesce(error, '') from bench_case where options_json like '%\"big\"%'")";;
esac
n=$(q "$tmp/text.db" "select count(*) from bench_case where options_json like '%\"max\"%' and status = 'ok'")
[ "$n" = 2 ] && pass "a describe() of exactly 1 MiB: loaded" || fail "describe of 1 MiB: $n ok cases of 2"
if "$tb" export 1 --db "$tmp/text.db" --format json >"$tmp/text.json" 2>"$tmp/export.err" &&
    python3 -c 'import json, sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$tmp/text.json"; then
    pass "export --format json of plugin text that was not UTF-8: valid JSON"
else
    fail "export json: $(head -c 300 "$tmp/export.err")"
fi
[ "$(grep -c "caf$(printf '\xef\xbf\xbd')" "$tmp/text.json")" -ge 1 ] && pass "the describe() and error's U+FFFD exported" \
    || fail "no U+FFFD in the export"
# the backend row keeps one describe(): the latin-1 one alone
sed -e 's/^describe_fault = .*/describe_fault = latin1/' -e 's/^bad_figure = .*/bad_figure = none/' "$tmp/text.ini" >"$tmp/desc.ini"
"$tb" run "$tmp/desc.ini" --db "$tmp/desc.db" >"$tmp/desc.out" 2>"$tmp/desc.err"
want=$(printf '{"model_name":"caf\xef\xbf\xbd"}' | hex)
[ "$(q "$tmp/desc.db" "select hex(info_json) from backend")" = "$want" ] \
    && pass "a describe() that is not UTF-8: stored with U+FFFD" \
    || fail "latin-1 describe stored as $(q "$tmp/desc.db" "select hex(info_json) from backend"), expected $want"
if "$tb" report 1 --db "$tmp/text.db" --format html -o "$tmp/text.html" >/dev/null 2>"$tmp/report.err" &&
    python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$tmp/text.html"; then
    pass "the HTML report of plugin text that was not UTF-8: UTF-8"
else
    fail "html report: $(head -c 300 "$tmp/report.err")"
fi

tb_finish
