#!/usr/bin/env bash
# End to end: the http backend classes a timeout by what happened on the
# wire (issue 38, item 14). A request that times out on a reused
# keep-alive connection (whose connect time curl reports as 0) is a
# `timeout`, never a `connect` failure; one whose connection never opened
# (a listener whose backlog is full: the SYN is dropped) stays `connect`.
# The server is tests/e2e/hostile_server.py: per connection it answers the
# first request and stalls each later one, before any byte
# (/reused_stall) or after 2 chunks (/reused_stall_mid). The preflight
# (plugins/http/http.c) classes the same way, by the same function: a
# listener that accepts and never answers is "timeout" there too.
#
# usage: test_http_classes.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init http_classes "$@"
need_sqlite3
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: no http plugin (built without libcurl)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

start_server hostile "$python" "$src/tests/e2e/hostile_server.py" --quiet || tb_finish
hport=$port
# A listener that never accepts, its backlog filled: a connect to it hangs.
cat >"$tmp/backlog.py" <<'PY'
import os, select, signal, socket, sys
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(0)
port = l.getsockname()[1]
fill = []
while True:  # connect until one hangs: the queue is full
    c = socket.socket()
    c.setblocking(False)
    try:
        c.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    fill.append(c)
    if not select.select([], [c], [], 1)[1]:
        break
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write("%d\n" % port)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
signal.sigwait([signal.SIGTERM])
PY
start_server backlog "$python" "$tmp/backlog.py" || tb_finish
bport=$port

cat >"$tmp/classes.ini" <<EOT
[suite]
name = http-classes
warmup = 0
repeat = 1
case_timeout = 120   ; a backstop: each request ends by its own timeout
[matrix]
prompt_tokens = 8
max_new_tokens = 6
requests = 2
concurrency = 1      ; the second request reuses the first's connection
[backend reused]
plugin = http
preflight = false    ; the second request must be the connection's second
url = http://127.0.0.1:$hport/reused_stall/v1
timeout = 3
[backend reused_mid]
plugin = http
preflight = false    ; the second request must be the connection's second
url = http://127.0.0.1:$hport/reused_stall_mid/v1
timeout = 3
[backend no_connect]
plugin = http
preflight = false    ; each request's own connect failure
url = http://127.0.0.1:$bport/v1
connect_timeout = 1
timeout = 3
EOT
"$tb" run "$tmp/classes.ini" --db "$tmp/c.db" >"$tmp/c.out" 2>"$tmp/c.err"
rc=$?
[ $rc = 1 ] || fail "expected exit 1 (cases with failed requests), got $rc: $(tail -5 "$tmp/c.err")"
# errors_of LABEL: the requests' "status|error", in order
errors_of() {
    q "$tmp/c.db" "select r.status || '|' || coalesce(r.error, '') from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1' order by r.idx"
}
for b in reused reused_mid; do
    got=$(errors_of $b | tr '\n' ';')
    case "$got" in
        "ok|;failed|timeout: Operation timed out"*";") pass "$b: the first request ok, the second on the reused connection a timeout: $got";;
        *) fail "$b: expected ok then 'timeout: ...', got '$got'";;
    esac
done
got=$(errors_of no_connect | tr '\n' ';')
case "$got" in
    "failed|connect: "*";failed|connect: "*";") pass "no_connect: both requests failed as connect: ${got:0:120}";;
    *) fail "no_connect: expected two 'connect: ...' failures, got '$got'";;
esac
[ "$(q "$tmp/c.db" "select count(*) from bench_case where error like '%case_timeout%'")" = 0 ] \
    || fail "a case ended by case_timeout, not its requests' timeouts"

# The preflight classes as the requests do: a listener that accepts and
# never answers is a timeout there too (it said "connect"), one whose
# connection never opens stays connect; under preflight = false the same
# listener's requests are timeouts.
cat >"$tmp/silent.py" <<'PY'
import os, signal, socket, sys, threading
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(64)
with open(sys.argv[2] + ".tmp", "w") as f:  # --port-file FILE
    f.write("%d\n" % l.getsockname()[1])
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
held = []
def serve():  # accept, read, never write
    while True:
        c, _ = l.accept()
        held.append(c)
threading.Thread(target=serve, daemon=True).start()
signal.sigwait([signal.SIGTERM])
PY
start_server silent "$python" "$tmp/silent.py" || tb_finish
sport=$port
cat >"$tmp/pre.ini" <<EOT
[suite]
name = http-preflight-classes
warmup = 0
repeat = 1
case_timeout = 120   ; a backstop: each check ends by its own timeout
[matrix]
prompt_tokens = 8
max_new_tokens = 6
requests = 2
concurrency = 1
[backend silent_pre]
plugin = http
url = http://127.0.0.1:$sport/v1
connect_timeout = 1
timeout = 1
[backend silent]
plugin = http
preflight = false
url = http://127.0.0.1:$sport/v1
connect_timeout = 1
timeout = 1
[backend no_connect_pre]
plugin = http
url = http://127.0.0.1:$bport/v1
connect_timeout = 1
timeout = 3
EOT
"$tb" run "$tmp/pre.ini" --db "$tmp/p.db" >"$tmp/p.out" 2>"$tmp/p.err"
case_error() { q "$tmp/p.db" "select c.status || '|' || coalesce(c.error, '') from bench_case c join backend b on b.id = c.backend_id where b.label = '$1'"; }
got=$(case_error silent_pre)
case "$got" in
    "failed|"*"no server answers at http://127.0.0.1:$sport/v1: timeout: Operation timed out"*) pass "silent_pre: the preflight says timeout: ${got:0:140}";;
    *) fail "silent_pre: expected the preflight's 'timeout: Operation timed out', got '$got'";;
esac
got=$(q "$tmp/p.db" "select group_concat(r.status || '|' || substr(r.error, 1, 28), ';') from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = 'silent'")
[ "$got" = "failed|timeout: Operation timed out;failed|timeout: Operation timed out" ] \
    && pass "silent, preflight = false: both requests timeouts" || fail "silent: '$got'"
got=$(case_error no_connect_pre)
case "$got" in
    "failed|"*"no server answers at http://127.0.0.1:$bport/v1: connect: "*) pass "no_connect_pre: the preflight says connect: ${got:0:140}";;
    *) fail "no_connect_pre: expected the preflight's 'connect: ...', got '$got'";;
esac
tb_finish
