#!/usr/bin/env bash
# End to end: the readers of sharded runs (docs/REPORTS.md, "tokbench
# compare" and "tokbench history"; docs/METRICS.md, "Sharded runs"). One
# load of `tokbench serve` (null backend) run on one machine, in 2 shards
# and in 4 shards (each joined by db merge), and 2 of 4 shards of another
# run that is never joined, all in one database:
#   1. compare: the shard count is a condition that differs ("shards: 2
#      shards joined vs one machine", "2 shards joined vs 4 shards
#      joined"), and none is said where both are one machine;
#   2. history: joined sessions marked ("ok, 2 shards joined"), the shard
#      sessions they pool left out and named once, a change of the shard
#      count noted as not comparable, a shard's own session not joined
#      here marked ("ok, shard 0 of 4") and compared with no session (no
#      change, a note), the CSV's shards column.
#
# usage: test_shard_readers.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init shard_readers "$@"
need_sqlite3
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve (libmicrohttpd missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

printf '[suite]\nname = srv\n[backend n]\nplugin = null\nprefill_us = 0\nstep_us = 100\n' >"$tmp/srv.ini"
start_server srv "$tb" serve --backend n "$tmp/srv.ini" --port 0 --max-batch 64 --reuse-port || exit 1
cat >"$tmp/load.ini" <<EOT
[suite]
name = sharded
warmup = 0
repeat = 2
[matrix]
prompt_tokens = 8
max_new_tokens = 6
concurrency = 4
requests = 8
[backend client]
plugin = http
url = http://127.0.0.1:$port
EOT

# shards N AT K...: shards K of N starting at AT, at once, each its database
shards() {
    local n=$1 at=$2 k
    shift 2
    local sp=()
    for k in "$@"; do
        "$tb" run "$tmp/load.ini" --shard "$k/$n" --start-at "$at" --db "$tmp/s$n-$at-$k.db" >"$tmp/s$n-$k.out" 2>&1 &
        sp+=($!)
    done
    for k in "${sp[@]}"; do wait "$k" || fail "a shard of $n (start $at): exit $?"; done
}
"$tb" run "$tmp/load.ini" --db "$tmp/whole.db" >"$tmp/whole.out" 2>&1 || fail "the whole run: $(tail -3 "$tmp/whole.out")"
shards 2 @0 0 1
shards 4 @0 0 1 2 3
shards 4 @1 0 1 # never joined: shards 2 and 3 never ran
db="$tmp/m.db"
"$tb" db merge "$tmp/whole.db" "$tmp"/s*.db --db "$db" >"$tmp/merge.out" 2>&1 || fail "db merge: $(cat "$tmp/merge.out")"
"$tb" run "$tmp/load.ini" --db "$db" >"$tmp/whole2.out" 2>&1 || fail "the second whole run"
W=$(q "$db" "select min(id) from session where shard_count is null")
W2=$(q "$db" "select max(id) from session where shard_count is null")
J2=$(q "$db" "select id from session where shard_index is null and shard_count = 2")
J4=$(q "$db" "select id from session where shard_index is null and shard_count = 4")
[ -n "$W" ] && [ -n "$J2" ] && [ -n "$J4" ] && [ "$W" != "$W2" ] || fail "sessions: whole $W, $W2, joined $J2, $J4: $(cat "$tmp/merge.out")"

# ---------------------------------------------------------------- 1. compare
cmp_conditions() { "$tb" compare "$1" "$2" --metric agg_tps --db "$db" 2>&1 | sed -n '/^conditions that differ:/,/^$/p'; }
grep -qx "  shards: 2 shards joined vs one machine (the load sent from other clients: not a like-for-like run)" <<<"$(cmp_conditions "$J2" "$W")" \
    || fail "compare joined vs whole: $(cmp_conditions "$J2" "$W")"
grep -qx "  shards: 2 shards joined vs 4 shards joined (the load sent from other clients: not a like-for-like run)" <<<"$(cmp_conditions "$J2" "$J4")" \
    || fail "compare 2 vs 4 shards: $(cmp_conditions "$J2" "$J4")"
grep -q "shards:" <<<"$(cmp_conditions "$W" "$W2")" && fail "compare of two whole runs names shards: $(cmp_conditions "$W" "$W2")"
pass "compare: the shard count among the conditions that differ"

# ---------------------------------------------------------------- 2. history
"$tb" history --backend client --db "$db" >"$tmp/h.out" 2>&1 || fail "history: $(cat "$tmp/h.out")"
row() { grep -E "^ *$1  " "$tmp/h.out"; }
row "$W" | grep -qE "  ok  +2 " || fail "history: the whole run's row: $(row "$W")"
row "$J2" | grep -q "  ok, 2 shards joined  " || fail "history: the 2-shard join's row: $(row "$J2")"
row "$J4" | grep -q "  ok, 4 shards joined  " || fail "history: the 4-shard join's row: $(row "$J4")"
joined=$(q "$db" "select group_concat(s.id, ' ') from session s where s.uuid in (select source_uuid from shard)")
[ "$(wc -w <<<"$joined")" = 6 ] || fail "the joined shard sessions: $joined"
for s in $joined; do
    row "$s" >/dev/null && fail "history lists the joined shard session $s: $(row "$s")"
    grep -q "^left out: shard sessions .*#$s (joined in #" "$tmp/h.out" || fail "history: shard session $s not named as left out"
done
grep -qE "^  session $J2: shards one machine -> 2 shards joined: not comparable with the session before$" "$tmp/h.out" \
    || fail "history: no note of the shard count: $(sed -n '/^notes/,$p' "$tmp/h.out")"
grep -qE "^  session $J4: shards 2 shards joined -> 4 shards joined" "$tmp/h.out" || fail "history: no note 2 -> 4 shards"
# the shards of the run never joined: concurrency 1 each, marked, no change
for k in 0 1; do
    s=$(q "$db" "select id from session where shard_index = $k and shard_count = 4 and uuid not in (select source_uuid from shard)")
    row "$s" | grep -qE "  ok, shard $k of 4  .* -$" || fail "history: the unjoined shard $k (session $s): $(row "$s")"
    grep -q "^  session $s: shard $k of 4, not joined here: its share of the load, compared with no session$" "$tmp/h.out" \
        || fail "history: no note for the unjoined shard $k"
done
"$tb" history --backend client --db "$db" --format csv >"$tmp/h.csv" || fail "history csv"
head -1 "$tmp/h.csv" | grep -q ',ci_lo,ci_hi,shards' || fail "history csv header: $(head -1 "$tmp/h.csv")"
[ "$(grep -c ',2 shards joined' "$tmp/h.csv")" = 1 ] && [ "$(grep -c ',one machine' "$tmp/h.csv")" = 2 ] \
    && [ "$(grep -c ',shard [01] of 4' "$tmp/h.csv")" = 2 ] || fail "history csv shards column: $(cat "$tmp/h.csv")"
pass "history: joins marked, their shards left out and named, the shard count's change noted, unjoined shards marked and not compared"

# 3. show warns of a joined session whose shards' windows lay apart (the
# join's stored measure, shard.window_lag_ns, set in copies: 0, no
# warning; a lag far past 10% of a call, the warning; the shards' own lag
# here is whatever the machine's load made it)
cp "$db" "$tmp/nolag.db"
q "$tmp/nolag.db" "update shard set window_lag_ns = 0 where session_id = $J2"
"$tb" show "$J2" --db "$tmp/nolag.db" >"$tmp/j2.out" 2>&1
grep -q "whose windows lay up to" "$tmp/j2.out" && fail "show: a lag warning for shards stored simultaneous"
cp "$db" "$tmp/lag.db"
q "$tmp/lag.db" "update shard set window_lag_ns = 5000000000 where session_id = $J2 and shard_index = 1"
"$tb" show "$J2" --db "$tmp/lag.db" >"$tmp/lag.out" 2>&1
grep -q "client \[.*\]: joined from 2 shards whose windows lay up to 5000.0 ms apart" "$tmp/lag.out" \
    && pass "show: a joined session whose shards lay apart is said to be one" \
    || fail "show: no warning of shards apart: $(grep -A30 '^warnings' "$tmp/lag.out")"
tb_finish
