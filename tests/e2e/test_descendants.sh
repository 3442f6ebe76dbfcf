#!/usr/bin/env bash
# End to end: what a plugin forks ends with its worker (issue 38 item 5).
# The test plugin tests/plugins/misbehave.c, generate_fault =
#   fork        forks a child that lingers (SIGTERM ignored) with a
#               lingering child of its own, and a child that crashes;
#               then generates: the case is ok;
#   fork_crash  the same, then the worker itself crashes (SIGSEGV) while
#               its lingering children hold its pipes open: the case is
#               stored with the crash, at once, not as a case_timeout.
# The lingerers write their pids to a file before generate() goes on;
# after the run none of them may be alive (kill -0 fails, or a zombie
# waiting for init). Waits on events: the run's end, each process's end
# (a hang guard of 30 s each, for the kernel to deliver SIGKILL).
#
# usage: test_descendants.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init descendants "$@"
mis="$build/tests/plugins/misbehave.so"
need_sqlite3
pidf="$tmp/pids"

# whatever survived (the old behaviour): killed, so that nothing is left
on_exit() {
    local p
    [ -f "$pidf" ] && while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$pidf"
}

# alive PID: the process exists and is not a zombie
alive() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

cat >"$tmp/fork.ini" <<EOF
[suite]
repeat = 1
warmup = 0
case_timeout = 20   ; a hang guard: the crash is seen when it happens
[matrix]
prompt_tokens = 4
max_new_tokens = 4
batch = 1
[backend fork]
plugin = $mis
generate_fault = fork, fork_crash
pid_file = $pidf
EOF
"$tb" run "$tmp/fork.ini" --db "$tmp/fork.db" >"$tmp/fork.out" 2>"$tmp/fork.err"
rc=$?
[ $rc = 1 ] && pass "run: exit 1 (a case failed)" || fail "run: exit $rc, expected 1: $(cat "$tmp/fork.err")"

got=$(q "$tmp/fork.db" "select status || ' ' || coalesce(error, '') from bench_case order by ordinal" | tr '\n' ';')
case "$got" in
    "ok ;failed backend process crashed: killed by signal 11 (SIGSEGV"*) pass "fork ok; fork_crash stored as the worker's crash";;
    *) fail "stored cases: '$got'";;
esac
case "$got" in *"timed out"*) fail "the crash was stored as a timeout: '$got'";; esac

n=$(wc -l <"$pidf" 2>/dev/null || echo 0)
[ "$n" = 4 ] && pass "4 lingering descendants were started" || fail "$n lingering descendants on file, expected 4"
left=0
while read -r p; do
    for _ in $(seq 600); do alive "$p" || break; sleep 0.05; done
    if alive "$p"; then
        left=$((left + 1))
        fail "descendant $p outlived the run (parent $(awk '{print $4}' "/proc/$p/stat" 2>/dev/null))"
    fi
done <"$pidf"
[ $left = 0 ] && pass "no descendant outlived the run"

tb_finish
