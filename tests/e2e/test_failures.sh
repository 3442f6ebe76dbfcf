#!/usr/bin/env bash
# Issue 39 ("the first hour"), items 2, 3 and 4, end to end through the
# http backend and tests/e2e/fault_server.py:
#   2. the server is checked before the load (GET /v1/models, then one
#      1-token request): with nothing listening the case fails with the
#      connection's error in words, no request is measured, and no
#      saturation warning follows; a server that refuses the check fails
#      the case with its answer; preflight = false skips it (and then a
#      case whose every request failed still gets no saturation warning);
#   3. turns = 2 against a chat server without a chat template: half the
#      requests fail; the progress line says `degraded` (on a pty at 80 and
#      120 columns); the first message of the class, whole (past the 128
#      bytes of tb_request_result.error), in run's warnings, show, and the
#      Markdown and HTML reports, and in request.error;
#   4. a [telemetry] metrics_url that answers 404: the scrapes are stored
#      (bench_case.scrapes, scrapes_failed, scrape_error) and warned about
#      in run, show and the reports.
# A server without /v1/models (fault_server.py has none) passes the check.
#
# usage: test_failures.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init failures "$@"
need_sqlite3
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
mark=0
# passed TEXT: pass, when no check failed since the last one
passed() { [ "$failures" = "$mark" ] && pass "$1"; mark=$failures; }
pty() { env -u COLUMNS python3 "$src/tests/e2e/pty_run.py" "$@"; } # COLUMNS OUT COMMAND...

start_server fault python3 "$src/tests/e2e/fault_server.py" --quiet || tb_finish
fport=$port
# a port nothing listens on: bound, then closed
dead=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
head='[suite]\nwarmup = 1\nrepeat = 2\ncase_timeout = 120\n[matrix]\nprompt_tokens = 8\nmax_new_tokens = 4\nconcurrency = 4\nrequests = 16\n'

# ------------------------------------------------------------------ 2
# the check runs once per (url, endpoint, model, stream, extra_json), not
# before every case (README, "A server checked first"): 3 cases of 2
# requests, the last with other extra_json: 2 checks, 6 + 2 POSTs
reqs() { curl -s "http://127.0.0.1:$fport/stats" | python3 -c "import json, sys; print(json.load(sys.stdin)['requests'])"; }
before=$(reqs)
printf '[suite]\nwarmup = 0\nrepeat = 1\n[matrix]\nprompt_tokens = 8\nmax_new_tokens = 4, 2\nrequests = 2\nconcurrency = 1\n[backend a]\nplugin = http\nurl = http://127.0.0.1:%s/v1\n[backend b]\nplugin = http\nurl = http://127.0.0.1:%s/v1\nextra_json = {"x": 1}\nmax_new_tokens = 4\n' "$fport" "$fport" >"$tmp/pf.ini"
"$tb" run "$tmp/pf.ini" --db "$tmp/pf.db" >"$tmp/pf.out" 2>&1 || fail "preflight count: run: $(tail -3 "$tmp/pf.out")"
after=$(reqs)
[ "$((after - before))" = 8 ] || fail "preflight count: $((after - before)) POSTs for 3 cases of 2 requests, expected 8 (2 checks)"
passed "the server check runs once per url, endpoint, model, stream and extra_json"

printf "$head"'[backend dead]\nplugin = http\nurl = http://127.0.0.1:%s/v1\n' "$dead" >"$tmp/dead.ini"
"$tb" run "$tmp/dead.ini" --db "$tmp/dead.db" >"$tmp/dead.out" 2>"$tmp/dead.err"
rc=$?
[ $rc = 1 ] || fail "nothing listening: exit $rc, expected 1"
case "$(q "$tmp/dead.db" "select status || '|' || error from bench_case")" in
"failed|"*"no server answers at http://127.0.0.1:$dead/v1: connect: "*"(preflight = false skips this check)") ;;
*) fail "nothing listening: case $(q "$tmp/dead.db" "select status || '|' || error from bench_case")" ;;
esac
[ "$(q "$tmp/dead.db" "select count(*) from request")" = 0 ] || fail "nothing listening: requests were measured"
grep -q "^\[1/1\] failed  dead .*no server answers at http://127.0.0.1:$dead/v1: connect: " "$tmp/dead.err" \
    || fail "nothing listening: the progress line lacks the reason: $(cat "$tmp/dead.err")"
grep -q "saturated" "$tmp/dead.out" && fail "nothing listening: a saturation warning"
passed "nothing listening: the case fails before the load, with the connection's error"

# the check skipped: every request fails at once; still no saturation warning
printf "$head"'[backend dead]\nplugin = http\npreflight = false\nurl = http://127.0.0.1:%s/v1\n' "$dead" >"$tmp/dead2.ini"
"$tb" run "$tmp/dead2.ini" --db "$tmp/dead2.db" >"$tmp/dead2.out" 2>"$tmp/dead2.err"
case "$(q "$tmp/dead2.db" "select status || '|' || error from bench_case")" in
"failed|every request failed: 32 of 32 (connect 32); first: connect: "*) ;;
*) fail "preflight = false: case $(q "$tmp/dead2.db" "select status || '|' || error from bench_case")" ;;
esac
grep -q "saturated" "$tmp/dead2.out" && fail "preflight = false: a saturation warning on a case that measured nothing"
"$tb" show --db "$tmp/dead2.db" >"$tmp/dead2.show" 2>&1
grep -q "saturated" "$tmp/dead2.show" && fail "preflight = false: show warns of saturation"
passed "preflight = false: every request fails, no saturation warning"

# a server that answers the check with an error: its answer, in words
printf "$head"'[backend busy]\nplugin = http\nurl = http://127.0.0.1:%s/http429/v1\n' "$fport" >"$tmp/busy.ini"
"$tb" run "$tmp/busy.ini" --db "$tmp/busy.db" >"$tmp/busy.out" 2>"$tmp/busy.err"
case "$(q "$tmp/busy.db" "select status || '|' || error from bench_case")" in
"failed|"*"the server at http://127.0.0.1:$fport/http429/v1 failed a 1-token completion request before the load: http_429: HTTP 429: scripted fault: rate limit reached"*) ;;
*) fail "refused check: case $(q "$tmp/busy.db" "select status || '|' || error from bench_case")" ;;
esac
[ "$(q "$tmp/busy.db" "select count(*) from request")" = 0 ] || fail "refused check: requests were measured"
passed "a server that refuses the 1-token request fails the case with its answer"

# ------------------------------------------------------------------ 3, 4
printf "$head"'[backend chat]\nplugin = http\nurl = http://127.0.0.1:%s/no_template/v1\nendpoint = chat\nturns = 2\n[telemetry]\nmetrics_url = http://127.0.0.1:%s/metrics\nperiod = 0.05\nnvml = off\n' "$fport" "$fport" >"$tmp/chat.ini"
end="a conversation of more than one message cannot be rendered (END)"
for cols in 80 120; do
    rm -f "$tmp/chat.db"
    pty "$cols" "$tmp/tty$cols.out" "$tb" run "$tmp/chat.ini" --db "$tmp/chat.db"
    rc=$?
    [ $rc = 1 ] || fail "no chat template, $cols columns: exit $rc, expected 1 (degraded)"
    # (a line wider than the terminal may be cut: the counts at 120 only)
    want="\[1/1\] degraded chat "
    [ "$cols" = 120 ] && want="$want.*16 of 32 requests failed (http_4xx 16)"
    grep -aq "$want" "$tmp/tty$cols.out" \
        || fail "no chat template, $cols columns: the progress line does not say degraded: $(tr '\r' '\n' <"$tmp/tty$cols.out" | grep -a '\[1/1\]')"
    grep -aq "\[1/1\] ok" "$tmp/tty$cols.out" && fail "no chat template, $cols columns: the progress line says ok"
    # the warnings wrap at the terminal's width (continuations indented 4):
    # joined back into one line each
    tr -d '\r' <"$tmp/tty$cols.out" \
        | awk '/^    [^ ]/ && n { prev = prev " " substr($0, 5); next } { if (n) print prev; prev = $0; n = 1 } END { if (n) print prev }' \
        >"$tmp/tty$cols.joined"
    grep -aq "^  chat \[.*\]: first http_4xx failure: HTTP 400: As of transformers v4.44, .*$end" "$tmp/tty$cols.joined" \
        || fail "no chat template, $cols columns: run's warnings lack the whole first message"
    grep -aq "^  chat \[.*\]: telemetry: \([0-9]*\) of \1 scrapes of the metrics_url failed (first: HTTP 404)" "$tmp/tty$cols.joined" \
        || fail "telemetry 404, $cols columns: run's warnings lack the failed scrapes"
done
passed "no chat template: degraded in the progress line at 80 and 120 columns; the first message in run's warnings"

# the whole message stored (tb_request_result.error holds 127 bytes)
[ "$(q "$tmp/chat.db" "select count(*) from request r join sample s on s.id = r.sample_id where not s.warmup and r.error like 'http_4xx: HTTP 400: As of%$end' and length(r.error) > 300")" = 16 ] \
    || fail "request.error is not the whole message: $(q "$tmp/chat.db" "select length(error), error from request where error is not null limit 1")"
[ "$(q "$tmp/chat.db" "select scrapes > 0 and scrapes = scrapes_failed, scrape_error from bench_case")" = "1|HTTP 404" ] \
    || fail "the scrape tally is not stored: $(q "$tmp/chat.db" "select scrapes, scrapes_failed, scrape_error from bench_case")"
passed "the whole message in request.error; the scrape tally in bench_case"

"$tb" show --db "$tmp/chat.db" >"$tmp/show.out" 2>&1 || fail "show: $(tail -3 "$tmp/show.out")"
grep -q "^chat .* degraded " "$tmp/show.out" || fail "show: the case is not degraded in the table"
grep -q "^  chat \[.*\]: first http_4xx failure: HTTP 400: As of transformers v4.44, .*$end" "$tmp/show.out" \
    || fail "show lacks the whole first message"
grep -q "^  chat \[.*\]: telemetry: \([0-9]*\) of \1 scrapes of the metrics_url failed (first: HTTP 404)" "$tmp/show.out" \
    || fail "show lacks the failed scrapes"
"$tb" report --db "$tmp/chat.db" --format markdown -o "$tmp/r.md" 2>"$tmp/r.err" || fail "report md: $(cat "$tmp/r.err")"
grep -q "first http\\\\_4xx failure: HTTP 400: As of transformers v4.44, .*$end" "$tmp/r.md" || fail "the Markdown report lacks the first message"
grep -q "telemetry: [0-9]* of [0-9]* scrapes of the metrics\\\\_url failed (first: HTTP 404)" "$tmp/r.md" \
    || fail "the Markdown report lacks the failed scrapes"
"$tb" report --db "$tmp/chat.db" --format html -o "$tmp/r.html" 2>"$tmp/r.err" || fail "report html: $(cat "$tmp/r.err")"
grep -q "first http_4xx failure: HTTP 400: As of transformers v4.44, .*rendered (END)" "$tmp/r.html" || fail "the HTML report lacks the first message"
grep -q "telemetry: [0-9]* of [0-9]* scrapes of the metrics_url failed (first: HTTP 404)" "$tmp/r.html" \
    || fail "the HTML report lacks the failed scrapes"
passed "show and the Markdown and HTML reports: the first message and the failed scrapes"

tb_finish
