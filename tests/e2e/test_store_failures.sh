#!/usr/bin/env bash
# Issue 38 item 2: a case the database refuses is never printed or
# counted ok, and the run says what happened.
#   1. another process holds the write lock while a case is stored
#      (tests/e2e/lock_server.py takes it when the case's request comes,
#      so the store must meet it): the run waits, says so, and stores
#      every case once the lock is released (the old 10 s busy timeout
#      lost the case and printed it ok).
#   2. the database's filesystem fills (a 2 MiB tmpfs in a private mount
#      namespace, `unshare -rm`; skipped where that is not allowed): the
#      run stops, the session ends 'failed' with the reason in
#      session.error, and the ok count printed is the count stored.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init store_failures "$@"
need_sqlite3
python=$(command -v python3) || { echo "SKIP: python3 not installed"; exit 77; }

# --- 1. a lock held while a case is stored
if [ -f "$build/plugins/http/http.so" ]; then
    db="$tmp/lock.db"
    if start_server lock "$python" "$src/tests/e2e/lock_server.py" --db "$db" --lock-on 8; then
        cat >"$tmp/lock.ini" <<INI
[suite]
name = lock
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 8
max_new_tokens = 4, 8, 16
[backend srv]
plugin = http
url = http://127.0.0.1:$port/v1
INI
        "$tb" run "$tmp/lock.ini" --db "$db" >"$tmp/lock.out" 2>&1 &
        run_pid=$!
        # the run waits for the lock and says so; then it is released
        until grep -q 'locked by another process' "$tmp/lock.out"; do
            kill -0 $run_pid 2>/dev/null || break
            sleep 0.1
        done
        grep -q '^locked' "$tmp/lock.log" || fail "lock: the server never took the lock: $(cat "$tmp/lock.log")"
        kill -USR1 "$server_pid"
        wait $run_pid
        rc=$?
        grep -q 'waiting up to 60 s to store the case' "$tmp/lock.out" ||
            fail "lock: the run did not wait for the lock: $(cat "$tmp/lock.out")"
        [ $rc = 0 ] || fail "lock: exit $rc: $(cat "$tmp/lock.out")"
        [ "$(q "$db" "select count(*) from bench_case where status = 'ok'")" = 3 ] ||
            fail "lock: $(q "$db" "select count(*) from bench_case") cases stored, expected 3"
        [ "$(q "$db" "select status from session")" = completed ] ||
            fail "lock: session $(q "$db" "select status from session")"
        [ "$(grep -c '^\[[0-9]/3\] ok ' "$tmp/lock.out")" = 3 ] && grep -q ': 3 ok, 0 failed' "$tmp/lock.out" ||
            fail "lock: output: $(cat "$tmp/lock.out")"
        ! grep -q 'cannot start a transaction' "$tmp/lock.out" || fail "lock: a store failed: $(cat "$tmp/lock.out")"
        [ $failures = 0 ] && pass "a write lock held while a case is stored is waited out, said, and every case stored"
    fi
else
    echo "note: no http plugin: the lock is not checked"
fi

# --- 2. the database's filesystem fills up
cat >"$tmp/full.ini" <<INI
[suite]
name = full
warmup = 0
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 2000, 2001, 2002, 2003, 2004, 2005, 2006, 2007, 2008, 2009, 2010, 2011, 2012, 2013, 2014, 2015
batch = 16
[backend n]
plugin = null
step_us = 0
prefill_us = 0
INI
mkdir "$tmp/mnt"
# inside: a 2 MiB tmpfs at $tmp/mnt, the run's database on it
cat >"$tmp/full.sh" <<SH
mount -t tmpfs -o size=2m tokbench-full "$tmp/mnt" || exit 77
"$tb" run "$tmp/full.ini" --db "$tmp/mnt/full.db" >"$tmp/full.out" 2>&1
echo \$? >"$tmp/full.rc"
cp "$tmp/mnt/full.db" "$tmp/full.db"
[ -f "$tmp/mnt/full.db-wal" ] && cp "$tmp/mnt/full.db-wal" "$tmp/full.db-wal"
exit 0
SH
if unshare -rm true 2>/dev/null && unshare -rm bash "$tmp/full.sh" && [ -f "$tmp/full.rc" ]; then
    db="$tmp/full.db"
    rc=$(cat "$tmp/full.rc")
    stored=$(q "$db" "select count(*) from bench_case where status = 'ok'")
    printed=$(grep -c '^\[[0-9]*/16\] ok ' "$tmp/full.out")
    [ "$rc" = 1 ] || fail "full: exit $rc (expected 1)"
    grep -q 'database or disk is full' "$tmp/full.out" || fail "full: no 'full' said: $(tail -5 "$tmp/full.out")"
    [ "$stored" -lt 16 ] || fail "full: all 16 cases stored: the filesystem never filled"
    [ "$printed" = "$stored" ] || fail "full: $printed cases printed ok, $stored stored: $(cat "$tmp/full.out")"
    grep -q "session [0-9]* failed: $stored ok, 0 failed, 0 skipped, 1 not stored" "$tmp/full.out" ||
        fail "full: summary: $(tail -3 "$tmp/full.out")"
    # the run stopped at the refused case: nothing after it ran
    [ "$(grep -c '^\[' "$tmp/full.out")" = $((stored + 1)) ] || fail "full: cases after the refused one: $(cat "$tmp/full.out")"
    [ "$(q "$db" "select status from session")" = failed ] || fail "full: session $(q "$db" "select status from session")"
    q "$db" "select error from session" | grep -q "could not be stored: .*database or disk is full" ||
        fail "full: session.error: $(q "$db" "select error from session")"
    [ $failures = 0 ] && pass "a full filesystem: the run stops, $stored cases stored and printed ok, the session failed with the reason"
else
    echo "note: no private tmpfs (unshare -rm): the full filesystem is not checked"
fi
tb_finish
