#!/usr/bin/env bash
# Issue 38 item 13: --start-at's two forms accept one range, 1970 to
# 2261-12-31T23:59:59Z, and say so past it (a date after 2262 overflowed
# into "--shard needs --start-at"; @SECONDS stopped at 4e9 s); SIGTERM or
# SIGINT during the wait ends the session 'interrupted' (exit 130), not
# killed with it left 'running'.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init start_at "$@"
need_sqlite3
cat >"$tmp/s.ini" <<'INI'
[suite]
name = startat
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 8
max_new_tokens = 4
[backend n]
plugin = null
INI
# --- the range: the same in both forms
for t in 2263-01-01T00:00:00Z 2262-04-12T00:00:00Z @9214646400 @1e19 @-1 1969-12-31T23:59:59Z; do
    "$tb" run "$tmp/s.ini" --db "$tmp/r.db" --start-at "$t" >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc = 2 ] && grep -q -- "--start-at $t: out of range: a time from 1970-01-01T00:00:00Z (@0) to 2261-12-31T23:59:59Z" "$tmp/err" ||
        fail "--start-at $t: exit $rc: $(cat "$tmp/err")"
done
for t in 2100-01-01T00:00:00Z @4102444800 2261-12-31T23:59:59Z @9214646399.5; do
    "$tb" run "$tmp/s.ini" --db "$tmp/r.db" --start-at "$t" --dry-run >/dev/null 2>"$tmp/err" ||
        fail "--start-at $t refused: $(cat "$tmp/err")"
done
[ -e "$tmp/r.db" ] && fail "a refused --start-at made a database"
[ $failures = 0 ] && pass "--start-at: one range in both forms, refused past it with the range named"

# --- a signal during the wait
for sig in TERM INT; do
    db="$tmp/$sig.db"
    # an hour ahead: only the signal ends the wait
    "$tb" run "$tmp/s.ini" --db "$db" --start-at "@$(( $(date +%s) + 3600 ))" >"$tmp/$sig.out" 2>&1 &
    pid=$!
    until grep -q 'starts at' "$tmp/$sig.out" 2>/dev/null; do
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    kill -$sig $pid
    wait $pid
    rc=$?
    [ $rc = 130 ] || fail "SIG$sig during the wait: exit $rc: $(cat "$tmp/$sig.out")"
    [ "$(q "$db" "select status from session")" = interrupted ] ||
        fail "SIG$sig during the wait: session $(q "$db" "select status from session")"
    [ "$(q "$db" "select count(*) from bench_case")" = 0 ] || fail "SIG$sig during the wait: a case ran"
done
[ $failures = 0 ] && pass "SIGTERM and SIGINT during the wait end the session interrupted (exit 130)"
tb_finish
