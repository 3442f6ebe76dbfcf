#!/usr/bin/env bash
# Soak (docs/RELIABILITY.md, docs/PERFORMANCE.md): the null backend at the
# highest event rate it has (no delays: every emission as fast as emit()
# and the runner take it) over a long suite, one runner and one worker for
# the whole run, then Ctrl-C.
#
#   - normal build: the runner's and the worker's RSS (/proc/PID/status
#     VmRSS) sampled every 0.5 s must stay flat: the median of the last
#     third within 20% + 8 MiB of the median of the first third; then, where
#     valgrind is installed, a shorter suite under memcheck, runner and
#     worker alike (valgrind sees the worker's _exit), with no byte
#     definitely or indirectly lost and no memory error;
#   - ASan build (LeakSanitizer on: test_env sets detect_leaks=1): the same
#     soak must end without a LeakSanitizer, AddressSanitizer or UBSan
#     report. RSS is only reported there (ASan's quarantine grows it).
#   - both: every stored case is complete; figures (events, rate, RSS at
#     start and end) are printed for docs/PERFORMANCE.md.
#
# usage: test_soak.sh BUILD_DIR SOURCE_DIR
# env:   TB_SOAK_SECONDS (default 60; the documented local run: 600),
#        TB_SOAK_VALGRIND_SECONDS (default 20; 0 skips valgrind)
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init soak "$@"
need_sqlite3
[ -r /proc/self/status ] || { echo "SKIP: needs Linux /proc"; exit 77; }

secs=${TB_SOAK_SECONDS:-60}
vg_secs=${TB_SOAK_VALGRIND_SECONDS:-20}
# on exit, kill what of ours still runs (jobs -p: this shell's live jobs only)
on_exit() { kill -9 $(jobs -p) 2>/dev/null; }

# Sanitized build? (meson's record of -Db_sanitize, else the linked runtime)
sanitize=$(python3 -c 'import json, sys
print([o["value"] for o in json.load(open(sys.argv[1])) if o["name"] == "b_sanitize"][0])' \
    "$build/meson-info/intro-buildoptions.json" 2>/dev/null)
if [ -z "$sanitize" ]; then
    sanitize=none
    grep -q libasan < <(ldd "$tb" 2>/dev/null) && sanitize=address
fi
asan=0
case "$sanitize" in *address*) asan=1 ;; esac

# About 1 MB of database per second per 100k events/s: check the space.
need_mb=$((secs * 15 + 200))
free_mb=$(df -Pm "$tmp" | awk 'NR == 2 { print $4 }')
[ "${free_mb:-0}" -ge "$need_mb" ] || { echo "SKIP: $free_mb MB free in $tmp, the soak needs about $need_mb MB"; exit 77; }

children() { cat /proc/"$1"/task/*/children 2>/dev/null | tr -s ' ' '\n' | grep .; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' /proc/"$1"/status 2>/dev/null; }

# The suite: 2,560 cases of one backend (one worker, one context: every
# option swept here is a per-call one), 64 to 65,536 emissions per call,
# every delay 0. More repetitions for longer soaks, so that it outlasts
# them; a faster machine may finish it first (then it completes).
write_suite() { # FILE REPEAT PROMPT_TOKENS MAX_NEW_TOKENS BATCH
    cat >"$1" <<EOF
[suite]
name = soak
description = the null backend at full event rate: allocation and memory over time
warmup = 1
repeat = $2
seed = 11
case_timeout = 600

[matrix]
prompt_tokens = $3
max_new_tokens = $4
batch = $5

[backend flood]
plugin = null
steps = none
prefill_us = 0
step_us = 0
tokens_per_step = 1, 2
jitter = 0, 0.5
EOF
}
repeat=$((3 * ((secs + 29) / 30)))
write_suite "$tmp/soak.ini" "$repeat" "$(seq -s ', ' 1 40)" "64, 256, 1024, 2048" "1, 4, 16, 32"

# Every stored ok case has warmup + repeat samples with all their requests.
incomplete() {
    q "$1" "select count(*) from bench_case c join session s on s.id = c.session_id where c.status = 'ok' and (
              (select count(*) from sample x where x.case_id = c.id) <> s.warmup + s.repeat
              or exists (select 1 from sample x where x.case_id = c.id and x.n_requests <> c.batch)
              or (select count(*) from request r join sample x on x.id = r.sample_id where x.case_id = c.id)
                 <> (s.warmup + s.repeat) * c.batch
              or not exists (select 1 from metric m where m.case_id = c.id))"
}
sanitizer_reports() { grep -E 'LeakSanitizer|AddressSanitizer|runtime error:' "$1" | head -5; }

# --- the soak
db="$tmp/soak.db"
"$tb" run "$tmp/soak.ini" --db "$db" >"$tmp/soak.out" 2>"$tmp/soak.err" &
pid=$!
t0=$EPOCHREALTIME
end=$(awk -v t="$t0" -v s="$secs" 'BEGIN { printf "%.3f", t + s }')
: >"$tmp/rss"
workers=""
stored=""
while running=$(awk -v n="$EPOCHREALTIME" -v e="$end" 'BEGIN { print (n < e) }') && [ "$running" = 1 ]; do
    r=$(rss_kb $pid)
    [ -n "$r" ] || break # it ended
    w=$(children $pid | head -n1)
    # The plugin's loader and validate() children (plan.c) come and go
    # before the first case; the worker is the child once cases are stored.
    if [ -z "$stored" ] && [ -f "$db" ] && [ "$(q "$db" "select count(*) > 0 from bench_case" 2>/dev/null)" = 1 ]; then
        stored=1
    fi
    [ -n "$stored" ] && [ -n "$w" ] && [[ " $workers " != *" $w "* ]] && workers+=" $w"
    wr=""
    [ -n "$w" ] && wr=$(rss_kb "$w")
    echo "$(awk -v n="$EPOCHREALTIME" -v t="$t0" 'BEGIN { printf "%.2f", n - t }') $r ${wr:-0}" >>"$tmp/rss"
    sleep 0.5
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
took=$(awk -v n="$EPOCHREALTIME" -v t="$t0" 'BEGIN { printf "%.1f", n - t }')
if [ $rc != 130 ] && [ $rc != 0 ]; then
    fail "soak: exit $rc"
    tail -20 "$tmp/soak.err"
fi
rep=$(sanitizer_reports "$tmp/soak.err")
[ -z "$rep" ] || { fail "soak: sanitizer report:"; echo "$rep"; grep -A30 -m1 -E 'LeakSanitizer|AddressSanitizer|runtime error' "$tmp/soak.err"; }
[ "$(q "$db" "select status from session")" = "$([ $rc = 0 ] && echo completed || echo interrupted)" ] \
    || fail "soak: session $(q "$db" "select status from session"), exit $rc"
[ "$(incomplete "$db")" = 0 ] || fail "soak: incomplete cases"
[ "$(q "$db" "select count(*) from bench_case where status <> 'ok'")" -le 1 ] \
    || fail "soak: failed cases: $(q "$db" "select ordinal, error from bench_case where status <> 'ok' limit 3")"
n_workers=$(echo $workers | wc -w)
[ "$n_workers" -le 1 ] || fail "soak: $n_workers workers, expected one for the whole run"
IFS='|' read -r cases calls events tokens gen_s <<<"$(q "$db" "select (select count(*) from bench_case where status = 'ok'),
    count(*), sum(n_emissions), sum(output_tokens), sum(wall_ns) / 1e9 from sample")"
db_mb=$(du -m "$db" | cut -f1)
rate=$(awk -v e="$events" -v t="$took" 'BEGIN { printf "%.0f", e / t }')
gen_rate=$(awk -v e="$events" -v t="$gen_s" 'BEGIN { printf "%.0f", (t > 0 ? e / t : 0) }')
[ "${events:-0}" -gt 0 ] || fail "soak: no events"

# RSS: first and last thirds of the samples, medians in MiB, and the peak.
median() { sort -n | awk '{ v[n++] = $1 } END { printf "%.1f", n ? v[int((n - 1) / 2)] : 0 }'; }
thirds() { # COLUMN -> "first_median last_median max n" (MiB) over the samples where it ran
    awk -v c="$1" '$c > 0 { print $c / 1024 }' "$tmp/rss" >"$tmp/col"
    local n k
    n=$(wc -l <"$tmp/col")
    k=$((n / 3))
    [ $k -ge 1 ] || { echo "0 0 0 $n"; return; }
    echo "$(head -n $k "$tmp/col" | median)" "$(tail -n $k "$tmp/col" | median)" \
        "$(sort -n "$tmp/col" | tail -n1 | awk '{ printf "%.1f", $1 }')" "$n"
}
read -r p_first p_last p_max n_samples <<<"$(thirds 2)"
read -r w_first w_last w_max w_samples <<<"$(thirds 3)"
figures="$took s ($secs planned), $cases cases, $calls generate() calls, $events events ($tokens tokens): $rate events/s end to end (emitted, sent, decoded, stored), $gen_rate events/s inside generate(); database $db_mb MB; RSS MiB first-third median -> last-third median (peak), $n_samples samples: runner $p_first -> $p_last ($p_max), worker $w_first -> $w_last ($w_max)"
flat() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(b <= a * 1.2 + 8) }'; }
if [ $asan = 1 ]; then
    pass "soak under ASan+LSan (no report): $figures"
elif [ "$n_samples" -lt 9 ] || [ "$w_samples" -lt 9 ]; then
    fail "soak: only $n_samples runner and $w_samples worker RSS samples"
else
    flat "$p_first" "$p_last" || fail "soak: runner RSS grows: $p_first -> $p_last MiB"
    flat "$w_first" "$w_last" || fail "soak: worker RSS grows: $w_first -> $w_last MiB"
    pass "soak, flat memory: $figures"
fi

# --- valgrind: runner and worker, a shorter suite (normal build only)
if [ $asan = 1 ]; then
    :
elif [ "$vg_secs" = 0 ]; then
    echo "note: valgrind part off (TB_SOAK_VALGRIND_SECONDS=0)"
elif ! command -v valgrind >/dev/null; then
    echo "note: valgrind not installed; the memcheck part is skipped"
else
    write_suite "$tmp/vg.ini" 2 "1, 2, 3" "64, 512" "1, 8"
    mkdir "$tmp/vg"
    ts=$EPOCHREALTIME
    valgrind --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
        --log-file="$tmp/vg/%p.log" "$tb" run "$tmp/vg.ini" --db "$tmp/vg.db" >/dev/null 2>"$tmp/vg.err" &
    vpid=$!
    for ((i = 0; i < vg_secs * 10; i++)); do
        kill -0 $vpid 2>/dev/null || break
        sleep 0.1
    done
    kill -INT $vpid 2>/dev/null
    wait $vpid
    vrc=$?
    [ $vrc = 0 ] || [ $vrc = 130 ] || fail "valgrind run: exit $vrc"
    n_logs=$(ls "$tmp"/vg/*.log 2>/dev/null | wc -l)
    [ "$n_logs" -ge 2 ] || fail "valgrind: $n_logs process logs, expected the runner's and a worker's"
    bad=$(grep -lE 'definitely lost: [1-9]|indirectly lost: [1-9]|ERROR SUMMARY: [1-9]' "$tmp"/vg/*.log)
    if [ -n "$bad" ]; then
        fail "valgrind: leaks or memory errors"
        for f in $bad; do sed -n '1,80p' "$f"; done
    fi
    vcases=$(q "$tmp/vg.db" "select count(*) from bench_case where status = 'ok'")
    [ "$(incomplete "$tmp/vg.db")" = 0 ] || fail "valgrind run: incomplete cases"
    pass "valgrind memcheck: $n_logs processes (runner, workers), $vcases cases in $(awk -v n="$EPOCHREALTIME" -v t="$ts" 'BEGIN { printf "%.1f", n - t }') s: no leak, no memory error"
fi

tb_finish
