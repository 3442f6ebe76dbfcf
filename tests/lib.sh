# tests/lib.sh: the preamble every end-to-end script shares (tests/e2e/).
# Sourced, never run:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
#   tb_init NAME "$@"           # BUILD_DIR SOURCE_DIR [more, the script's]
#   ...checks: fail "why", pass "what"...
#   tb_finish
#
# tb_init sets build and src (absolute), tb (the tokbench executable),
# tmp (a fresh folder under the build folder, removed on exit unless KEEP
# is set: other tests may clean /tmp while a test runs) and failures. The
# exit trap runs the script's on_exit function if it has one, stops what
# the script started (every pid in pids: SIGTERM, or tb_kill_signal) and
# waits for it, then removes tmp.

failures=0
pids=()
tb_kill_signal=TERM

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
# q DB SQL: one query's rows, no header
q() { sqlite3 -batch -noheader "$1" "$2"; }

tb_init() {
    tb_paths "$@"
    tb_tmp "$1"
}

# tb_paths NAME BUILD_DIR SOURCE_DIR [more...]: build, src and tb only
# (shell builtins only: a test may run itself without a PATH)
tb_paths() {
    local name=$1
    shift
    [ $# -ge 2 ] || { echo "usage: test_$name.sh BUILD_DIR SOURCE_DIR" >&2; exit 2; }
    build=$(cd "$1" 2>/dev/null && pwd) || { echo "test_$name.sh: no folder $1" >&2; exit 2; }
    src=$(cd "$2" 2>/dev/null && pwd) || { echo "test_$name.sh: no folder $2" >&2; exit 2; }
    tb="$build/tokbench"
}

# tb_tmp NAME: tmp, and the exit trap
tb_tmp() {
    tmp=$(mktemp -d "$build/test-$1.XXXXXX") || { echo "test_$1.sh: no temp folder" >&2; exit 2; }
    tmp=$(cd "$tmp" && pwd)
    trap _tb_exit EXIT
}

_tb_exit() {
    [ "$(type -t on_exit)" = function ] && on_exit
    local p
    for p in "${pids[@]}"; do kill -"$tb_kill_signal" "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    if [ -n "${KEEP:-}" ]; then
        echo "kept $tmp"
    else
        chmod -R u+w "$tmp" 2>/dev/null # a test may leave a read-only file
        rm -rf "$tmp"
    fi
}

# need_sqlite3: skip (exit 77) without the sqlite3 shell that q uses
need_sqlite3() { command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 not installed"; exit 77; }; }

# wait_port FILE PID: prints the port a server wrote to FILE (its
# --port-file) once it listens, or nothing when PID exited first. No time
# bound of its own: meson's timeout is the backstop for a server that
# neither listens nor exits.
wait_port() {
    until [ -s "$1" ]; do
        kill -0 "$2" 2>/dev/null || break
        sleep 0.05
    done
    cat "$1" 2>/dev/null
}

# start_server NAME COMMAND...: COMMAND (a server taking --port-file) in
# the background, its output in $tmp/NAME.log, its port file
# $tmp/NAME.port; sets server_pid (also added to pids) and port. When it
# exits before listening: a failure with its log, port empty, status 1.
start_server() {
    local name=$1
    shift
    rm -f "$tmp/$name.port"
    "$@" --port-file "$tmp/$name.port" >"$tmp/$name.log" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    port=$(wait_port "$tmp/$name.port" "$server_pid")
    [ -n "$port" ] && return 0
    fail "server $name did not start: $(tail -20 "$tmp/$name.log")"
    return 1
}

# tb_finish: the verdict, the script's last line: exit 1 on any failure
tb_finish() {
    if [ "$failures" -gt 0 ]; then
        echo "$failures failure(s)"
        exit 1
    fi
    echo "PASS"
    exit 0
}
