#!/usr/bin/env bash
# db merge and the readers against input that is damaged, unfinished or
# not what it should be (issue 16, items 1-3; docs/RELIABILITY.md,
# "Merging and reading back"):
#   1. a source with a damaged page: the merge fails, nothing written; the
#      repaired file then merges whole;
#   2. a source whose run is still writing it: its session is not merged
#      (said on stderr) and a merge after the run has it whole; a copy
#      merged unfinished (from another machine: another boot) is
#      completed by a later merge of the finished file;
#   3. a row of invalid JSON: merge refuses it, naming the row; taken in
#      anyway (an older tokbench, a hand edit), report, compare, history,
#      export and show fail naming the row, never crash or print nothing.
# Nothing here is timed: the live run is held by a file it waits for.
#
# usage: test_merge.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init merge "$@"
null="$build/plugins/null/null.so"
mis="$build/tests/plugins/misbehave.so"
need_sqlite3
counts() { q "$1" "select (select count(*) from session) || ' ' || (select count(*) from bench_case) || ' ' || (select count(*) from sample) || ' ' || (select count(*) from request) || ' ' || (select count(*) from metric)"; }

# --- 1. a damaged page in the source -----------------------------------
cat >"$tmp/many.ini" <<EOF
[suite]
name = many-requests
warmup = 0
repeat = 3
[matrix]
prompt_tokens = 8, 16
max_new_tokens = 8
batch = 16, 32
[backend a]
plugin = $null
prefill_us = 0
step_us = 0
EOF
"$tb" run "$tmp/many.ini" --db "$tmp/src.db" >/dev/null 2>"$tmp/e" || { fail "run of many.ini"; cat "$tmp/e"; }
cp "$tmp/src.db" "$tmp/good.db"
whole=$(counts "$tmp/src.db")
# a leaf page of the request table past its first ones: the rows before it
# read, the rows after it do not (dbstat: SQLite's page list)
if ! q "$tmp/src.db" "select count(*) from dbstat" >/dev/null 2>&1; then
    echo "SKIP: this sqlite3 lacks the dbstat table"
    exit 77
fi
leaves=$(q "$tmp/src.db" "select count(*) from dbstat where name = 'request' and pagetype = 'leaf'")
[ "$leaves" -ge 4 ] || fail "the request table has only $leaves leaf pages"
page=$(q "$tmp/src.db" "select pageno from dbstat where name = 'request' and pagetype = 'leaf' order by pageno limit 1 offset $((leaves / 2))")
size=$(q "$tmp/src.db" "pragma page_size")
dd if=/dev/zero of="$tmp/src.db" bs="$size" seek=$((page - 1)) count=1 conv=notrunc 2>/dev/null
"$tb" db merge "$tmp/src.db" --db "$tmp/dst.db" >"$tmp/out" 2>"$tmp/e"
rc=$?
[ $rc = 1 ] || fail "merge of a damaged file: exit $rc, not 1: $(cat "$tmp/out" "$tmp/e")"
grep -q 'src.db: the database is damaged: .*(nothing was merged)' "$tmp/e" || fail "damaged file message: $(cat "$tmp/e")"
[ "$(counts "$tmp/dst.db")" = "0 0 0 0 0" ] || fail "a damaged file's merge left rows: $(counts "$tmp/dst.db")"
# repaired (here: the good copy back), it merges whole
cp "$tmp/good.db" "$tmp/src.db"
"$tb" db merge "$tmp/src.db" --db "$tmp/dst.db" >"$tmp/out" 2>"$tmp/e" || fail "merge of the repaired file: $(cat "$tmp/e")"
grep -q '1 session imported' "$tmp/out" || fail "repaired file not imported: $(cat "$tmp/out")"
[ "$(counts "$tmp/dst.db")" = "$whole" ] || fail "repaired file merged partly: $(counts "$tmp/dst.db") of $whole"
pass "a damaged source: refused with nothing written, then merged whole once repaired"

# --- 2. a session its run is still writing -------------------------------
# six cases; the fourth waits for $tmp/go, so the run is alive with three
# cases stored for as long as the test wants
cat >"$tmp/gate.ini" <<EOF
[suite]
name = gated
warmup = 0
repeat = 1
[matrix]
max_new_tokens = 1, 2, 3
[backend m]
plugin = $mis
[backend gate]
plugin = $mis
max_new_tokens = 4, 5, 6
wait_file = $tmp/go
EOF
"$tb" run "$tmp/gate.ini" --db "$tmp/live.db" >/dev/null 2>"$tmp/live.err" &
runner=$!
pids+=("$runner")
stored=0
for _ in $(seq 3000); do # a backstop only: the run stores its m cases at once
    stored=$(q "$tmp/live.db" "select count(*) from bench_case" 2>/dev/null || echo 0)
    [ "${stored:-0}" -ge 3 ] && break
    kill -0 "$runner" 2>/dev/null || break
    sleep 0.1
done
[ "${stored:-0}" -ge 3 ] || fail "the run did not reach its gate (stored: $stored): $(cat "$tmp/live.err")"
kill -0 "$runner" 2>/dev/null || fail "the run ended before its gate"
# the run holds at its gate: a merge now must not freeze its session
"$tb" db merge "$tmp/live.db" --db "$tmp/team.db" >"$tmp/out" 2>"$tmp/e" || fail "merge of a live file: $(cat "$tmp/e")"
grep -q 'not merged, still being written by a run on this machine: session 1 (.*, pid '"$runner"')' "$tmp/e" ||
    fail "live session message: $(cat "$tmp/e")"
[ "$(q "$tmp/team.db" "select count(*) from session")" = 0 ] || fail "a live session was merged"
# a copy of the live file made elsewhere (another boot: its owner cannot
# be asked) is merged as it is, unfinished...
cp "$tmp/live.db" "$tmp/copy.db"
[ -f "$tmp/live.db-wal" ] && cp "$tmp/live.db-wal" "$tmp/copy.db-wal"
q "$tmp/copy.db" "update session set owner_boot_id = 'another-boot'"
"$tb" db merge "$tmp/copy.db" --db "$tmp/team.db" >"$tmp/out" 2>"$tmp/e" || fail "merge of the copy: $(cat "$tmp/e")"
part=$(q "$tmp/team.db" "select count(*) from bench_case")
[ "$part" = "$stored" ] || fail "the copy merged $part cases, not $stored"
touch "$tmp/go"
wait "$runner"
rc=$?
[ $rc = 0 ] || fail "the gated run: exit $rc: $(cat "$tmp/live.err")"
all=$(q "$tmp/live.db" "select count(*) from bench_case")
[ "$all" -gt "$stored" ] || fail "the run stored no case after its gate ($all)"
# ...and completed by the merge of the finished file
"$tb" db merge "$tmp/live.db" --db "$tmp/team.db" >"$tmp/out" 2>"$tmp/e" || fail "merge after the run: $(cat "$tmp/e")"
grep -q '0 sessions imported .* 0 already present, 1 completed' "$tmp/out" || fail "completing merge output: $(cat "$tmp/out")"
[ "$(q "$tmp/team.db" "select count(*) || ' ' || group_concat(status) from session")" = "1 completed" ] ||
    fail "team session: $(q "$tmp/team.db" "select id, status from session")"
[ "$(q "$tmp/team.db" "select count(*) from bench_case")" = "$all" ] || fail "completed session has $(q "$tmp/team.db" "select count(*) from bench_case") of $all cases"
[ "$(q "$tmp/team.db" "pragma foreign_key_check" | wc -l)" = 0 ] || fail "dangling rows after completing"
[ "$(q "$tmp/team.db" "select count(*) from request")" = "$(q "$tmp/live.db" "select count(*) from request")" ] ||
    fail "requests of the completed session differ"
# a merge of a finished file into a fresh database takes it whole; again: nothing
"$tb" db merge "$tmp/live.db" --db "$tmp/team2.db" >/dev/null 2>&1 || fail "merge of the finished file"
[ "$(q "$tmp/team2.db" "select count(*) from bench_case")" = "$all" ] || fail "finished file merged partly"
"$tb" db merge "$tmp/live.db" --db "$tmp/team.db" >"$tmp/out" 2>&1
grep -q '0 sessions imported .* 1 already present, 0 completed' "$tmp/out" || fail "merge of a complete session again: $(cat "$tmp/out")"
pass "a live session: not merged while its run writes it; a copy merged unfinished is completed later"

# --- 3. invalid JSON ------------------------------------------------------
cp "$tmp/good.db" "$tmp/bad.db"
q "$tmp/bad.db" "update backend set info_json = '{\"dtype\": \"bf16\"' where label = 'a'"
bid=$(q "$tmp/bad.db" "select id from backend where label = 'a'")
"$tb" db merge "$tmp/bad.db" --db "$tmp/j.db" >"$tmp/out" 2>"$tmp/e"
[ $? = 1 ] || fail "merge of invalid JSON: not exit 1"
grep -q "bad.db: backend row $bid (\[backend a\] of session 1): info_json is not valid JSON (nothing was merged)" "$tmp/e" ||
    fail "invalid JSON merge message: $(cat "$tmp/e")"
[ "$(counts "$tmp/j.db")" = "0 0 0 0 0" ] || fail "invalid JSON merged"
# one more of each kind: wrong type, and request emissions
cp "$tmp/good.db" "$tmp/bad2.db"
q "$tmp/bad2.db" "update bench_case set options_json = '[1]' where ordinal = 2"
"$tb" db merge "$tmp/bad2.db" --db "$tmp/j.db" 2>"$tmp/e" >/dev/null
grep -q 'case #2 of session 1 (bench_case row [0-9]*): options_json is JSON of type array, not an object' "$tmp/e" ||
    fail "wrong JSON type message: $(cat "$tmp/e")"
cp "$tmp/good.db" "$tmp/bad3.db"
rid=$(q "$tmp/bad3.db" "select max(id) from request")
q "$tmp/bad3.db" "update request set emissions_json = '[[1,' where id = $rid"
"$tb" db merge "$tmp/bad3.db" --db "$tmp/j.db" 2>"$tmp/e" >/dev/null
grep -q "request row $rid (case #[0-9]* of session 1): emissions_json is not valid JSON" "$tmp/e" ||
    fail "invalid emissions message: $(cat "$tmp/e")"
[ "$(counts "$tmp/j.db")" = "0 0 0 0 0" ] || fail "invalid JSON merged"
# every other JSON column of a session's rows
for tc in "machine info_json machine row" "session config_json session" "backend options_json backend row"; do
    set -- $tc
    cp "$tmp/good.db" "$tmp/bad4.db"
    q "$tmp/bad4.db" "update $1 set $2 = '{'"
    "$tb" db merge "$tmp/bad4.db" --db "$tmp/j.db" 2>"$tmp/e" >/dev/null
    grep -q "bad4.db: $3 .*: $2 is not valid JSON (nothing was merged)" "$tmp/e" || fail "$1.$2 not JSON: $(cat "$tmp/e")"
done
[ "$(counts "$tmp/j.db")" = "0 0 0 0 0" ] || fail "invalid JSON merged"
pass "merge refuses invalid JSON, naming the row"

# The readers, on a database that holds such a row (a hand edit, or a
# merge by an older tokbench): a second, good session beside it.
cp "$tmp/good.db" "$tmp/r.db"
"$tb" run "$tmp/many.ini" --db "$tmp/r.db" --filter batch=16 >/dev/null 2>&1 || fail "second session"
q "$tmp/r.db" "update backend set info_json = '{\"dtype\": \"bf16\"' where session_id = 1"
named="backend row $bid (\[backend a\] of session 1): info_json is not valid JSON"
check_reader() { # name, expected exit (non-zero), command...
    local what=$1
    shift
    "$@" >"$tmp/out" 2>"$tmp/e"
    local rc=$?
    if [ $rc = 0 ] || [ $rc -ge 128 ]; then
        fail "$what: exit $rc (0 or a signal): $(head -c 300 "$tmp/e")"
    elif ! grep -q "$named" "$tmp/e"; then
        fail "$what: the row is not named: $(head -c 300 "$tmp/e")"
    fi
}
check_reader "report md" "$tb" report 1 --db "$tmp/r.db"
check_reader "report html" "$tb" report 1 --db "$tmp/r.db" --format html -o "$tmp/r.html"
[ -e "$tmp/r.html" ] && fail "report html left a file"
check_reader "compare" "$tb" compare 1 2 --db "$tmp/r.db"
check_reader "history" "$tb" history --backend a --db "$tmp/r.db"
check_reader "export csv" "$tb" export 1 --format csv --db "$tmp/r.db"
[ -s "$tmp/out" ] && fail "export csv printed something: $(head -c 200 "$tmp/out")"
check_reader "export csv -o" "$tb" export 1 --format csv -o "$tmp/r.csv" --db "$tmp/r.db"
[ -e "$tmp/r.csv" ] && fail "export csv -o left a file"
check_reader "export json" "$tb" export 1 --format json --db "$tmp/r.db"
check_reader "report csv" "$tb" report 1 --format csv --db "$tmp/r.db"
check_reader "show" "$tb" show 1 --db "$tmp/r.db"
# the good session still reads
"$tb" report 2 --db "$tmp/r.db" >/dev/null 2>"$tmp/e" || fail "report of the good session: $(cat "$tmp/e")"
"$tb" export 2 --format csv --db "$tmp/r.db" >"$tmp/out" 2>"$tmp/e" || fail "export of the good session: $(cat "$tmp/e")"
[ "$(wc -l <"$tmp/out")" = 3 ] || fail "export of the good session: $(wc -l <"$tmp/out") lines"
# invalid emissions: read only where they are read (the report's ITL chart, export json)
cp "$tmp/good.db" "$tmp/r3.db"
rid=$(q "$tmp/r3.db" "select max(id) from request")
q "$tmp/r3.db" "update request set emissions_json = '[[1,' where id = $rid"
named="request row $rid (case #[0-9]* of session 1): emissions_json is not valid JSON"
check_reader "report html (emissions)" "$tb" report 1 --db "$tmp/r3.db" --format html
check_reader "export json (emissions)" "$tb" export 1 --format json --db "$tmp/r3.db"
pass "readers: a row of invalid JSON is an error naming it, not a crash or no data"

tb_finish
