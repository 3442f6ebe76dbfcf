#!/usr/bin/env bash
# End to end: faults survived, each costing only its own case (issue 9,
# "Hardening"). The real `tokbench run` on the suites in tests/data/suites/
# faults-*.ini, into real SQLite files queried with sqlite3:
#   1. faulty backends (the null plugin): SIGSEGV, abort(), a hang, memory
#      leaked without bound, an event flood (endless and finite);
#   2. faulty OpenAI-compatible servers (tests/fault_server.py) measured by
#      the http backend: connection reset (mid-stream and before the
#      response), a stream that stalls on an open socket, HTTP 500 and 429,
#      garbage (in the stream, in the events, instead of HTTP), a 100 MB
#      body (streamed, not streamed, one 100 MB event), a usage count past
#      32 bits, past what the request allows or below the chunks of text
#      (2, 0); a stream that ends after its finish_reason without [DONE]
#      (ok) and one that ends with neither (dropped);
#   3. a model file truncated while the backend process has it mapped.
# Each asserts: the faulty case failed (or its requests failed with the
# right class) with a clear reason in the database, the healthy cases before
# and after it completed, and every case ended by its own cause (only the
# hang by case_timeout): events, never wall-clock bounds.
# docs/RELIABILITY.md (part 3) describes every fault and what it costs.
#
# usage: test_faults.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init faults "$@"
suites="$src/tests/data/suites"
need_sqlite3
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"
# A bus error in a worker must stay a signal under ASan, as SIGSEGV does
# (tests/meson.build sets handle_segv=0 for the same reason).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_sigbus=0:handle_abort=0"
# Under ASan freed memory waits in a quarantine (256 MiB): resident sizes
# say nothing about what a process keeps, so they are not checked there.
asan=0
grep -q __asan_init "$tb" && asan=1

# case_of DB LABEL [N]: "status|error" of backend LABEL's Nth case (from 0)
case_of() {
    q "$1" "select c.status || '|' || coalesce(c.error, '') from bench_case c join backend b on b.id = c.backend_id where b.label = '$2' order by c.ordinal limit 1 offset ${3:-0}"
}
# expect_case DB LABEL N GLOB WHAT: backend LABEL's Nth case matches GLOB
expect_case() {
    local got
    got=$(case_of "$1" "$2" "$3")
    # shellcheck disable=SC2053
    if [[ "$got" == $4 ]]; then pass "$5: ${got:0:110}"; else fail "$5: got '$got', expected '$4'"; fi
}

# The watcher: starts the runner (the command after --), follows its backend
# processes (its children) and
#   limit=MIB        caps each one's address space at MIB above its size
#                    when first seen (what the runner would do with a
#                    memory limit: docs/RELIABILITY.md (part 3));
#   backstop=MIB     caps the runner's own address space (inherited by its
#                    children) from the start: the bound should the limit
#                    above come late (not under ASan, whose shadow memory
#                    takes terabytes of address space);
#   truncate=PATH:N  truncates PATH to N bytes the moment a child has it
#                    mapped (the child is stopped for the truncation, so
#                    the moment cannot pass unnoticed);
# and logs what it did, the runner's wall time and its peak RSS (VmHWM);
# exits with the runner's status. It starts the runner itself so that it
# is watching before the first backend process exists.
cat >"$tmp/watch.py" <<'EOF'
import os, resource, signal, subprocess, sys, time
log = open(sys.argv[1], "a", buffering=1)
sep = sys.argv.index("--")
limit_mb = trunc = backstop = None
for a in sys.argv[2:sep]:
    k, v = a.split("=", 1)
    if k == "limit":
        limit_mb = int(v)
    elif k == "backstop":
        backstop = int(v) << 20
    elif k == "truncate":
        p, n = v.rsplit(":", 1)
        trunc = (p, int(n))
def children(pid):
    kids = set()
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                kids.update(int(x) for x in f.read().split())
        return kids
    except OSError:
        pass
    for d in os.listdir("/proc"):  # no children files: scan parents
        try:
            with open("/proc/%s/stat" % d) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.add(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return kids
def status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0
seen, hwm, t0 = set(), 0, time.monotonic()
def cap():
    if backstop:
        resource.setrlimit(resource.RLIMIT_AS, (backstop, backstop))
proc = subprocess.Popen(sys.argv[sep + 1:], preexec_fn=cap)
runner = proc.pid
while proc.poll() is None:
    try:
        hwm = max(hwm, status(runner, "VmHWM"))
    except OSError:
        pass
    for c in children(runner):
        try:
            if limit_mb is not None and c not in seen:
                seen.add(c)
                lim = status(c, "VmSize") + (limit_mb << 20)
                resource.prlimit(c, resource.RLIMIT_AS, (lim, lim))
                log.write("%.3f limited %d to %d MiB of address space\n" % (time.monotonic() - t0, c, lim >> 20))
            if trunc:
                with open("/proc/%d/maps" % c) as f:
                    mapped = trunc[0] in f.read()
                if mapped:
                    os.kill(c, signal.SIGSTOP)
                    os.truncate(trunc[0], trunc[1])
                    os.kill(c, signal.SIGCONT)
                    log.write("%.3f truncated %s to %d bytes while %d had it mapped\n"
                              % (time.monotonic() - t0, trunc[0], trunc[1], c))
                    trunc = None
        except (OSError, ValueError):
            pass  # gone already
    time.sleep(0.001)
log.write("%.3f runner exited (%d) after %.2f s; runner peak RSS %d MiB\n"
          % (time.monotonic() - t0, proc.returncode, time.monotonic() - t0, hwm >> 20))
sys.exit(proc.returncode if proc.returncode >= 0 else 128 - proc.returncode)
EOF

# watched_run NAME SUITE WATCH_ARGS...: run the suite under the watcher;
# sets $rc and $elapsed (the runner's wall time), output in
# $tmp/NAME.{out,err,watch}
watched_run() {
    local name=$1 suite=$2
    shift 2
    "$python" "$tmp/watch.py" "$tmp/$name.watch" "$@" -- "$tb" run "$suite" --db "$tmp/$name.db" \
        >"$tmp/$name.out" 2>"$tmp/$name.err"
    rc=$?
    elapsed=$(sed -n 's/.* after \([0-9.]*\) s;.*/\1/p' "$tmp/$name.watch")
    elapsed=${elapsed:-999}
}
runner_peak_mib() { sed -n 's/.*runner peak RSS \([0-9]*\) MiB/\1/p' "$1"; }

# ------------------------------------------------------------------ 1
# Faulty backends. Every backend process gets a 128 MiB address-space
# budget (the suite's memory_limit): the leak runs into it.
case_timeout=4
backstop=
[ $asan = 1 ] || backstop=backstop=2048
watched_run plugin "$suites/faults-plugin.ini" $backstop
db="$tmp/plugin.db"
[ $rc = 1 ] || { fail "plugin faults: exit $rc, expected 1 (some cases failed)"; cat "$tmp/plugin.err"; }
[ "$(q "$db" "select status from session")" = completed ] || fail "plugin faults: session not completed"
expect_case "$db" before 0 "ok|" "healthy case before the faults"
expect_case "$db" segv 0 "failed|backend process crashed: killed by signal 11 (*Segmentation fault)*" "SIGSEGV"
expect_case "$db" abort 0 "failed|backend process crashed: killed by signal 6 (*Aborted)*" "abort()"
expect_case "$db" hang 0 "failed|timed out: the case did not finish within case_timeout ($case_timeout s); backend process killed" "hang"
expect_case "$db" leak 0 "ok|" "leak: the healthy case on the same process"
expect_case "$db" leak 1 "failed|backend process crashed: killed by signal 6 (*Aborted)*" "leak stopped by the memory limit"
grep -q "leak_mb: out of memory after leaking [0-9]* MiB; aborting" "$tmp/plugin.err" \
    || fail "leak: no out-of-memory message from the plugin: $(grep -i leak "$tmp/plugin.err" | head -3)"
# (the memory limit, not case_timeout, stopped it: the abort above is its cause)
case "$(case_of "$db" leak 1)" in *case_timeout*) fail "leak: case_timeout stopped it, not the memory limit";; esac
# the endless flood: failed, whatever stopped it, and the runner survived
case "$(case_of "$db" flood)" in failed\|*) pass "endless flood: its case failed: $(case_of "$db" flood | cut -c1-100)";;
    *) fail "endless flood: $(case_of "$db" flood)";; esac
case "$(case_of "$db" flood)" in *flood*) pass "endless flood: the reason names the flood";;
    *) fail "endless flood: the reason should name the flood, is '$(case_of "$db" flood | cut -d'|' -f2)'";; esac
case "$(case_of "$db" flood_finite)" in failed\|*flood*) pass "finite flood failed with the reason";;
    *) fail "finite flood (20,000 emissions per token) should fail as a flood, is '$(case_of "$db" flood_finite)'";; esac
expect_case "$db" after 0 "ok|" "healthy case after the faults"
[ "$(q "$db" "select count(*) from sample s join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label in ('before', 'after') and s.warmup = 0")" = 4 ] \
    || fail "plugin faults: healthy cases lack their samples"
peak=$(runner_peak_mib "$tmp/plugin.watch")
[ -n "$peak" ] && [ "$peak" -lt 1024 ] && pass "plugin faults: runner peak RSS $peak MiB" || fail "plugin faults: runner peak RSS ${peak:-?} MiB"
# the run ended by its own causes: only the hang needed case_timeout
# (events, not a wall-clock bound: a loaded machine must not fail this)
n_ct=$(q "$db" "select count(*) from bench_case where error like '%case_timeout%'")
[ "$n_ct" = 1 ] && pass "plugin faults: one case (the hang) ended by case_timeout; the run took $elapsed s" \
    || fail "plugin faults: $n_ct cases ended by case_timeout, expected 1 (the hang)"

# ------------------------------------------------------------------ 2
# Faulty servers, through the http backend.
if [ -f "$build/plugins/http/http.so" ]; then
    if start_server fault "$python" "$src/tests/e2e/fault_server.py" --quiet; then
        export TB_FAULT_PORT=$port
        watched_run http "$suites/faults-http.ini"
        db="$tmp/http.db"
        [ $rc = 1 ] || { fail "http faults: exit $rc (expected 1: cases with failed requests)"; cat "$tmp/http.err"; }
        # every case ran to its end; those whose every request failed are failed, with the reason
        [ "$(q "$db" "select count(*) from summary where requests > 0 and (failed_requests = requests) = (status = 'failed') and (status = 'ok' or error like 'every request failed: % of %')")" = 21 ] \
            || fail "http faults: case statuses: $(q "$db" "select backend, status, requests, failed_requests, error from summary")"
        # requests_of LABEL: "N status class" per (status, class) of the
        # measured requests, ';'-joined
        requests_of() {
            q "$db" "select count(*) || ' ' || st || ' ' || cls from (select r.status as st, coalesce(substr(r.error, 1, instr(r.error, ':') - 1), '') as cls from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1' and s.warmup = 0) group by st, cls order by 1" | tr '\n' ';'
        }
        # expect_requests LABEL CLASS PHRASE[|PHRASE...]: all 4 requests
        # failed as CLASS, each error containing one of the PHRASEs
        expect_requests() {
            local got n like
            got=$(requests_of "$1")
            like=$(echo "$3" | awk -F'|' '{ for (i = 1; i <= NF; i++) printf "%sr.error like '"'"'%%%s%%'"'"'", (i > 1 ? " or " : ""), $i }')
            n=$(q "$db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1' and ($like)")
            if [ "$got" = "4 failed $2;" ] && [ "$n" = 4 ]; then
                pass "$1: 4 of 4 requests failed as $2 ($3)"
            else
                fail "$1: requests '$got', $n with '$3', expected 4 failed as $2: $(q "$db" "select group_concat(distinct r.error) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1'")"
            fi
        }
        healthy() {
            [ "$(requests_of "$1")" = "4 ok ;" ] && [ "$(q "$db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label = '$1' and r.output_tokens = 6 and r.ttft_ns > 0")" = 4 ] \
                && pass "$1: 4 of 4 requests ok" || fail "$1: requests '$(requests_of "$1")'"
        }
        healthy before
        # A reset reaches curl as ECONNRESET on a read (or on a write: EPIPE,
        # "Broken pipe", when the peer is gone first), or, when the kernel
        # has already handed curl the end of the stream, as an empty or cut
        # reply, or a stream ended without [DONE], or curl's poll reporting
        # the socket's error before any read ("select/poll returned error"):
        # which one is a race, the class is not (CI runs under ASan met the
        # last two)
        drop_forms="reset by peer|Broken pipe|Failure when|Empty reply|transfer closed|the stream ended|select/poll returned error"
        expect_requests reset dropped "$drop_forms"
        expect_requests reset_early dropped "$drop_forms"
        expect_requests stall timeout "Operation timed out"
        expect_requests stall_nostream timeout "Operation timed out"
        expect_requests http500 http_5xx "HTTP 500: scripted fault"
        expect_requests http429 http_429 "HTTP 429: scripted fault"
        expect_requests garbage malformed_stream "without one SSE event"
        expect_requests garbage_sse malformed_stream "JSON"
        expect_requests garbage_http malformed_stream "not an HTTP response"
        expect_requests big malformed_stream "larger than max_response_mb (8 MiB)"
        expect_requests big_nostream malformed_stream "larger than max_response_mb (64 MiB)"
        expect_requests big_event malformed_stream "SSE event larger than 1024 KiB"
        # a usage count is never cut to 32 bits (2^32 + 6 would pass as 6)
        # nor believed past what the request allows; the error names it
        expect_requests huge_usage malformed_stream "usage.completion_tokens 4294967302 is not a token count"
        expect_requests huge_usage_nostream malformed_stream "usage.completion_tokens 4294967302 is not a token count"
        expect_requests over_usage malformed_stream "usage.completion_tokens 3000000000 is more than the request allows"
        # fewer tokens than chunks of text: a count the stream contradicts
        expect_requests under_usage malformed_stream "usage.completion_tokens 2 is fewer than the 6 chunks with text"
        expect_requests zero_usage malformed_stream "usage.completion_tokens 0 is fewer than the 6 chunks with text"
        # a finish_reason ends a stream whole without [DONE]; neither: dropped
        healthy no_done
        expect_requests no_end dropped "the stream ended without [DONE] or a finish_reason"
        usage_out="select r.output_tokens from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id where b.label like '%_usage%' and (r.output_tokens < 0 or r.output_tokens > 6)"
        [ "$(q "$db" "select count(*) from ($usage_out)")" = 0 ] \
            || fail "http faults: a usage count out of range was stored: $(q "$db" "$usage_out limit 3")"
        healthy after
        # the reasons are stored as valid UTF-8 text, whatever the server sent
        [ "$(q "$db" "select count(*) from request where error is not null and error <> cast(cast(error as blob) as text)")" = 0 ] || fail "http faults: an error is not text"
        [ "$(q "$db" "select count(*) from request where error glob '*[^ -~]*'")" = 0 ] \
            || fail "http faults: errors carry raw server bytes: $(q "$db" "select error from request where error glob '*[^ -~]*' limit 1")"
        # the stalls end by their request timeout (the "timeout" class above),
        # not by case_timeout
        for b in stall stall_nostream; do
            case "$(case_of "$db" "$b")" in
                *case_timeout*) fail "$b: ended by case_timeout, not by the request timeout";;
                *) pass "$b: ended by its request timeout, not case_timeout";;
            esac
        done
        # the 100 MB bodies were not buffered whole: the backend process stays
        # far below 2 x 100 MB (non-streamed: up to the 64 MiB bound per request)
        rss=$(q "$db" "select group_concat(b.label || '=' || (c.host_peak_rss_bytes >> 20), ' ') from bench_case c join backend b on b.id = c.backend_id where b.label like 'big%'")
        if [ $asan = 1 ]; then
            pass "100 MB bodies: backend peak RSS MiB $rss (not checked under ASan)"
        elif [ "$(q "$db" "select count(*) from bench_case c join backend b on b.id = c.backend_id where b.label like 'big%' and c.host_peak_rss_bytes < (case b.label when 'big_nostream' then 190 else 100 end) * 1048576 + (select min(host_peak_rss_bytes) from bench_case)")" = 3 ]; then
            pass "100 MB bodies bounded: backend peak RSS MiB $rss"
        else
            fail "100 MB bodies: backend peak RSS MiB $rss"
        fi
        [ "$(q "$db" "select count(*) from bench_case where error like '%case_timeout%'")" = 0 ] \
            && pass "http faults: no case needed case_timeout (the run took $elapsed s)" \
            || fail "http faults: a case ended by case_timeout: $(q "$db" "select error from bench_case where error like '%case_timeout%' limit 1")"
        kill "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
    fi
else
    echo "skip: http plugin not built (libcurl missing)"
fi

# ------------------------------------------------------------------ 3
# A model file truncated while mapped. The shipped tiny model loads in a
# millisecond; a model of the same architecture with a 200,000-wide MLP
# (153 MB, sparse: it costs no disk) loads for long enough to cut the file
# in the middle of the load, when the worker has it mapped.
if [ -f "$build/plugins/ar/ar.so" ]; then
    export TB_FAULT_TINY="$tmp/tiny-llama-random" TB_FAULT_BIG="$tmp/wide-llama-random"
    cp -r "$src/models/tiny-llama-random" "$TB_FAULT_TINY"
    header_end=$("$python" - "$TB_FAULT_TINY" "$TB_FAULT_BIG" 200000 <<'EOF'
import json, os, shutil, struct, sys
src, dst, inter = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst)
for f in ("tokenizer.json", "generation_config.json"):
    shutil.copy(os.path.join(src, f), dst)
cfg = json.load(open(os.path.join(src, "config.json")))
old, cfg["intermediate_size"] = cfg["intermediate_size"], inter
json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
with open(os.path.join(src, "model.safetensors"), "rb") as f:
    hdr = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
out, off = {"__metadata__": hdr.get("__metadata__", {})}, 0
for name in sorted(k for k in hdr if k != "__metadata__"):
    t = hdr[name]
    shape = [inter if d == old else d for d in t["shape"]]
    size = {"BF16": 2, "F16": 2, "F32": 4}[t["dtype"]]
    for d in shape:
        size *= d
    out[name] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [off, off + size]}
    off += size
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + off)  # sparse: the weights read as zeros
print(8 + len(h))
EOF
)
    target="$TB_FAULT_BIG/model.safetensors"
    watched_run model "$suites/faults-model.ini" "truncate=$target:$header_end"
    db="$tmp/model.db"
    grep -q "truncated" "$tmp/model.watch" && pass "model: model.safetensors truncated $(sed -n 's/^\([0-9.]*\) truncated.*/\1/p' "$tmp/model.watch") s into the run, while a backend process had it mapped" \
        || fail "model: the load ended before the file could be truncated: $(cat "$tmp/model.watch")"
    [ $rc = 1 ] || { fail "model: exit $rc, expected 1 (some cases failed)"; cat "$tmp/model.err"; }
    [ "$(q "$db" "select status from session")" = completed ] || fail "model: session not completed"
    expect_case "$db" before 0 "ok|" "model: healthy case before (1)"
    expect_case "$db" before 1 "ok|" "model: healthy case before (2)"
    expect_case "$db" truncated 0 "failed|backend process crashed: killed by signal 7 (*Bus error)*" "model truncated while mapped: SIGBUS"
    expect_case "$db" truncated 1 "failed|*model.safetensors*" "model: the next case fails cleanly on the short file"
    expect_case "$db" after 0 "ok|" "model: healthy case after (1)"
    expect_case "$db" after 1 "ok|" "model: healthy case after (2)"
    [ "$(q "$db" "select count(*) from bench_case where error like '%case_timeout%'")" = 0 ] \
        && pass "model: no case needed case_timeout (the run took $elapsed s)" \
        || fail "model: a case ended by case_timeout"
else
    fail "model: no ar plugin at $build/plugins/ar/ar.so (every build has one)"
fi

tb_finish
