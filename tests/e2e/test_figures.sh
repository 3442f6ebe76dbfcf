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
#      reason; a sane case beside them is ok.
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
bad_figure = none, tokens, e2e, ttft, submit, prefill
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
expect 4 "sent before the call" "$f sent at -3599999.* ms of a call of * ms"
expect 5 "prefill_ns -5" "failed impossible figure at repetition 1: prefill_ns = -5 (a call of * ns); case failed"
# no request of the failed cases stored as ok, no figure of theirs kept
n=$(q "$tmp/fig.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
    where c.ordinal > (select min(ordinal) from bench_case) and r.status = 'ok'")
[ "$n" = 0 ] && pass "no request with an impossible figure stored as ok" || fail "$n requests with impossible figures stored as ok"

tb_finish
