#!/usr/bin/env bash
# Plugin code never runs in tokbench's own process, and no plugin can
# hang it (issue 16, items 4-5; docs/RELIABILITY.md, "Plugins run in
# processes of their own"). The test plugin tests/plugins/misbehave.c
# crashes (SIGSEGV), calls exit(0), hangs, or closes every descriptor and
# hangs, where it is told to:
#   1. at load (its constructor, its entry function) and in validate():
#      `run`, `run --dry-run`, `plugins` and `serve` fail with an error
#      naming the plugin file and the suite line, exit 2 (plugins: 1),
#      nothing stored, nothing hung (load_timeout);
#   2. in probe(), create() and generate(): the case fails with the
#      reason and the run goes on to the next backend;
#   3. a runner asked to stop (SIGTERM) while its backend hangs with its
#      descriptors closed stops;
#   4. `serve` with a backend that closes its descriptors and hangs in
#      generate(): the request gets a 500, the next one too, and SIGTERM
#      stops the server; in create(): serve does not start, exit 1.
# Nothing is timed: `timeout` is only a backstop that turns a hang into a
# failure instead of a stuck test.
#
# usage: test_isolation.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init isolation "$@"
null="$build/plugins/null/null.so"
mis="$build/tests/plugins/misbehave.so"
need_sqlite3
tb_kill_signal=KILL # a runner or server left hanging by a fault
BACKSTOP=${TB_BACKSTOP:-300} # seconds: a hang, not a slow machine

# suite FILE [OPTION LINES...]: a healthy null backend, then the
# misbehaving one (declared at line 9, its plugin at line 10).
suite() {
    local f=$1
    shift
    {
        printf '[suite]\nname = iso\nwarmup = 0\nrepeat = 1\nload_timeout = 3\ncase_timeout = 3\n'
        printf '[matrix]\nmax_new_tokens = 2\n'
        printf '[backend bad]\nplugin = %s\n' "$mis"
        for line in "$@"; do printf '%s\n' "$line"; done
        printf '[backend good]\nplugin = %s\nprefill_us = 0\nstep_us = 0\n' "$null"
    } >"$f"
}

# The faults of parts 1 and 2 are checked side by side, each in a folder
# of its own: most of them wait out a 3 s deadline (load_timeout,
# case_timeout), and one after the other they took a minute.
# in_parallel NAME FUNCTION: FUNCTION NAME DIR in the background (at most 4
# at once), its output in DIR/log.
par_dirs=()
in_parallel() {
    local d="$tmp/par-${1//:/-}"
    mkdir -p "$d"
    par_dirs+=("$d")
    while [ "$(jobs -rp | wc -l)" -ge 4 ]; do wait -n; done
    "$2" "$1" "$d" >"$d/log" 2>&1 &
    pids+=($!)
}
# collect: waits for them all; prints their output in order and counts
# their failures
collect() {
    local d n
    wait
    for d in "${par_dirs[@]}"; do
        cat "$d/log"
        n=$(grep -c '^FAIL: ' "$d/log")
        failures=$((failures + n))
    done
    par_dirs=()
}

# --- 1. at load and in validate(): a suite error, nothing stored ---------
load_fault() { # FAULT DIR: its checks, its files in DIR
    local fault=$1 d=$2
    where=${fault%%:*}
    what=${fault#*:}
    case $what in
    crash) reason='crashed: killed by signal 11 (SIGSEGV' ;;
    exit) reason='exited with status 0' ;;
    hang) reason='did not answer within load_timeout (3 s); killed' ;;
    esac
    if [ "$where" = validate ]; then
        suite "$d/s.ini" "validate_fault = $what"
        env=()
        at="$d/s.ini:9: backend: \[backend bad\] case .*: plugin misbehave ($mis): validate() $reason"
    else
        suite "$d/s.ini"
        env=(TB_MISBEHAVE="$fault")
        at="$d/s.ini:10: plugin: plugin $mis ($mis): loading it .* $reason"
    fi
    rm -f "$d/s.db"
    for mode in run dry-run; do
        args=(run "$d/s.ini" --db "$d/s.db")
        [ $mode = dry-run ] && args+=(--dry-run)
        env "${env[@]}" timeout -k 10 $BACKSTOP "$tb" "${args[@]}" >"$d/out" 2>"$d/e"
        rc=$?
        [ $rc = 2 ] || fail "$fault ($mode): exit $rc, not 2: $(head -c 400 "$d/e")"
        grep -q -- "$at" "$d/e" || fail "$fault ($mode): message: $(head -c 600 "$d/e")"
    done
    [ ! -e "$d/s.db" ] || [ "$(q "$d/s.db" "select count(*) from session")" = 0 ] || fail "$fault: a session was stored"
    if [ "$where" != validate ]; then
        # `plugins` has no suite: its deadline is --load-timeout
        preason=${reason/load_timeout/--load-timeout}
        env "${env[@]}" timeout -k 10 $BACKSTOP "$tb" plugins "$mis" --load-timeout 3 >"$d/out" 2>"$d/e"
        rc=$?
        [ $rc = 1 ] || fail "$fault: plugins PATH: exit $rc, not 1"
        grep -q -- "plugin $mis ($mis): loading it .* $preason" "$d/e" || fail "$fault: plugins PATH: $(head -c 400 "$d/e")"
        # the listing goes on past it
        env "${env[@]}" TOKBENCH_PLUGIN_PATH="$build/tests/plugins" timeout -k 10 $BACKSTOP "$tb" plugins --load-timeout 3 \
            >"$d/out" 2>"$d/e"
        rc=$?
        [ $rc = 0 ] || fail "$fault: plugins: exit $rc"
        grep -q -- "(invalid) .*misbehave.so.*$preason" "$d/out" || fail "$fault: plugins listing: $(grep misbehave "$d/out")"
        grep -q '^  null ' "$d/out" || fail "$fault: plugins listing lacks null"
    fi
    if "$tb" serve --help >/dev/null 2>&1; then
        env "${env[@]}" timeout -k 10 $BACKSTOP "$tb" serve --backend bad "$d/s.ini" --port 0 >"$d/out" 2>"$d/e"
        rc=$?
        [ $rc = 2 ] || fail "$fault: serve: exit $rc, not 2: $(head -c 400 "$d/e")"
        grep -q -- "$at" "$d/e" || fail "$fault: serve: $(head -c 400 "$d/e")"
    fi
}
for fault in constructor:crash constructor:exit constructor:hang entry:crash entry:exit entry:hang \
    validate:crash validate:exit validate:hang; do
    in_parallel "$fault" load_fault
done
collect
pass "a plugin crashing, exiting or hanging at load or in validate(): an error naming it and its suite line"

# --- 2. in probe(), create() and generate(): the case fails, the run goes on
call_fault() { # FAULT DIR: its checks, its files in DIR
    local fault=$1 d=$2
    where=${fault%%:*}
    what=${fault#*:}
    case $what in
    crash) reason='backend process crashed: killed by signal 11 (SIGSEGV' ;;
    exit) reason='backend process crashed: exited with status 0' ;;
    hang) [ $where = generate ] && reason='timed out: the case did not finish within case_timeout (3 s)' ||
        reason='within load_timeout (3 s); backend process killed' ;;
    closefds_hang) # killed at the deadline of what it was doing (3 s: before the 5 s grace)
        [ $where = generate ] && limit=case_timeout || limit=load_timeout
        reason="backend process closed its pipe but did not exit within $limit (3 s); killed" ;;
    esac
    env=()
    if [ $where = probe ]; then
        suite "$d/s.ini"
        env=(TB_MISBEHAVE="$fault")
    else
        suite "$d/s.ini" "${where}_fault = $what"
    fi
    rm -f "$d/s.db"*
    env "${env[@]}" timeout -k 10 $BACKSTOP "$tb" run "$d/s.ini" --db "$d/s.db" >"$d/out" 2>"$d/e"
    rc=$?
    [ $rc = 1 ] || fail "$fault: exit $rc, not 1: $(tail -c 400 "$d/e")"
    got=$(q "$d/s.db" "select b.label || ' ' || c.status || ' ' || coalesce(c.error, '') from bench_case c join backend b on b.id = c.backend_id order by c.ordinal")
    # here-strings, not pipes: under pipefail a grep -q that stops reading
    # early can make the writer's SIGPIPE fail the check (seen once in CI)
    grep -q -- "^bad failed .*$reason" <<<"$got" || fail "$fault: the bad case: $got"
    grep -q '^good ok' <<<"$got" || fail "$fault: the good case after it: $got"
    [ "$(q "$d/s.db" "select status from session")" = completed ] || fail "$fault: session not completed"
}
for fault in probe:crash probe:exit probe:hang create:crash create:exit create:hang create:closefds_hang \
    generate:crash generate:exit generate:hang generate:closefds_hang; do
    in_parallel "$fault" call_fault
done
collect
pass "a plugin crashing, exiting or hanging in probe(), create() or generate(): its case fails, the run goes on"

# --- 3. SIGTERM while the backend hangs with its descriptors closed ------
suite "$tmp/t.ini" "generate_fault = closefds_hang"
sed -i 's/^case_timeout = 3/case_timeout = 3600/' "$tmp/t.ini"
rm -f "$tmp/t.db"*
"$tb" run "$tmp/t.ini" --db "$tmp/t.db" >/dev/null 2>"$tmp/t.err" &
runner=$!
pids+=("$runner")
closed=
for _ in $(seq 3000); do # until the worker holds no descriptor (a backstop only)
    # the run has begun (a plugin's loading process, which may be a zombie
    # with no descriptor either, has ended), and a live child has none
    [ "$(q "$tmp/t.db" "select count(*) from session" 2>/dev/null)" = 1 ] || { sleep 0.1; continue; }
    for w in $(cat /proc/"$runner"/task/*/children 2>/dev/null); do
        state=$(sed 's/.*) //' /proc/"$w"/stat 2>/dev/null | cut -c1)
        [ -n "$state" ] && [ "$state" != Z ] && [ -z "$(ls /proc/"$w"/fd 2>/dev/null)" ] && closed=$w
    done
    [ -n "$closed" ] && break
    kill -0 "$runner" 2>/dev/null || break
    sleep 0.1
done
[ -n "$closed" ] || fail "no worker closed its descriptors: $(cat "$tmp/t.err")"
kill -TERM "$runner"
for _ in $(seq $((BACKSTOP * 10))); do
    kill -0 "$runner" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$runner" 2>/dev/null; then
    fail "SIGTERM did not stop the runner in $BACKSTOP s"
    kill -9 "$runner"
fi
wait "$runner"
rc=$?
[ $rc = 130 ] || fail "SIGTERM: exit $rc, not 130: $(tail -c 300 "$tmp/t.err")"
[ "$(q "$tmp/t.db" "select status from session")" = interrupted ] || fail "SIGTERM: session $(q "$tmp/t.db" "select status from session")"
# stopped at once, not after a grace period: the case says so
grep -q 'interrupted' <<<"$(q "$tmp/t.db" "select error from bench_case where ordinal = 1")" ||
    fail "SIGTERM: the case: $(q "$tmp/t.db" "select error from bench_case")"
kill -0 "$closed" 2>/dev/null && fail "the hung worker $closed outlived its runner"
pass "SIGTERM stops a runner whose backend closed its descriptors and hangs"

# --- 4. serve ---------------------------------------------------------------
if ! "$tb" serve --help >/dev/null 2>&1; then
    echo "SKIP part 4: no tokbench serve (libmicrohttpd missing)"
elif ! command -v curl >/dev/null; then
    echo "SKIP part 4: curl not installed"
else
    suite "$tmp/v.ini" "generate_fault = closefds_hang"
    if start_server v "$tb" serve --backend bad "$tmp/v.ini" --port 0; then
        server=$server_pid
        for i in 1 2; do
            code=$(curl -s -o "$tmp/r$i" -w '%{http_code}' --max-time $BACKSTOP \
                -H 'Content-Type: application/json' -d '{"model":"bad","prompt":"hi","max_tokens":2}' \
                "http://127.0.0.1:$port/v1/completions")
            [ "$code" = 500 ] || fail "serve request $i: HTTP $code, not 500: $(cat "$tmp/r$i")"
            grep -q 'closed its pipe but did not exit within case_timeout (3 s); killed' "$tmp/r$i" ||
                fail "serve request $i: $(cat "$tmp/r$i")"
        done
        kill -TERM "$server"
        for _ in $(seq $((BACKSTOP * 10))); do
            kill -0 "$server" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$server" 2>/dev/null; then
            fail "SIGTERM did not stop serve"
            kill -9 "$server"
        fi
        wait "$server"
        rc=$?
        [ $rc = 0 ] || fail "serve after SIGTERM: exit $rc: $(tail -c 300 "$tmp/v.log")"
    fi
    suite "$tmp/c.ini" "create_fault = closefds_hang"
    timeout -k 10 $BACKSTOP "$tb" serve --backend bad "$tmp/c.ini" --port 0 >"$tmp/out" 2>"$tmp/e"
    rc=$?
    [ $rc = 1 ] || fail "serve, create() closing its descriptors: exit $rc, not 1: $(cat "$tmp/e")"
    grep -q 'backend bad: backend process closed its pipe but did not exit within load_timeout (3 s); killed' "$tmp/e" ||
        fail "serve, create(): $(cat "$tmp/e")"
    pass "serve: a backend that closes its descriptors and hangs costs its requests a 500, and SIGTERM stops it"
fi

tb_finish
