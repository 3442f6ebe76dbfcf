#!/usr/bin/env bash
# What `run --shard K/N --start-at TIME` refuses before anything runs, and
# what it stores from the start (audit H; docs/METRICS.md, "Sharded
# runs"). Plans only (--dry-run) and runs that stop while they wait for
# their start: no server, nothing sent.
#   1. a load search (request_rate = sweep | slo) refused, naming the
#      case and the dimension, by run and by --dry-run, no session stored;
#   2. --filter matches the suite's values, not the shard's share: one
#      command line selects the same case on every shard;
#   3. a multi-turn share that is not a whole number of sessions refused
#      on every shard (also those whose own share would pass);
#   6. a shard interrupted while it waits for --start-at is stored as the
#      shard it is (index, count, start time; no start_late_ns yet);
#   7. --shard K/1 refused (N >= 2);
#   8. --start-at dates that do not exist refused;
#   9. a shard's seed: one number in --dry-run, the database, show and
#      report, and one a suite takes back (seed =).
# No wall-clock bounds: counts and equalities only.
#
# usage: test_shard_checks.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init shard_checks "$@"
need_sqlite3
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

# a port nothing listens on: nothing here sends a request
suite() { # NAME MATRIX-LINES [BACKEND-LINES]
    printf '[suite]\nname = %s\nseed = 5\n[matrix]\nprompt_tokens = 8\nmax_new_tokens = 4\n%s\n[backend client]\nplugin = http\nurl = http://127.0.0.1:9\n%s\n' \
        "$1" "$2" "${3:-}" >"$tmp/$1.ini"
}

# ---------------------------------------------------------------- 1. a load search
suite sweep $'requests = 60\nrequest_rate = sweep'
suite slo $'requests = 60\nrequest_rate = 4, slo'
sed -i 's/^seed = 5$/seed = 5\nslo_ttft_p99_ms = 50/' "$tmp/slo.ini"
for s in sweep slo; do
    "$tb" run "$tmp/$s.ini" --shard 0/2 --start-at @0 --dry-run >/dev/null 2>"$tmp/$s.dry.err"
    rc=$?
    [ $rc = 2 ] && grep -q "case #[0-9]* (client .*request_rate=$s.*): request_rate = $s is a load search, which cannot be split" \
        "$tmp/$s.dry.err" && pass "--dry-run: request_rate = $s refused with --shard, naming the case" \
        || fail "--dry-run of a sharded $s (rc $rc): $(cat "$tmp/$s.dry.err")"
    "$tb" run "$tmp/$s.ini" --shard 1/2 --start-at @0 --db "$tmp/$s.db" >/dev/null 2>"$tmp/$s.run.err"
    rc=$?
    [ $rc = 2 ] && grep -q "request_rate = $s is a load search" "$tmp/$s.run.err" && [ ! -e "$tmp/$s.db" ] \
        && pass "run: request_rate = $s refused with --shard before anything ran (no database)" \
        || fail "run of a sharded $s (rc $rc, db $(ls "$tmp/$s.db" 2>&1)): $(cat "$tmp/$s.run.err")"
done
# the same suites whole: a search is fine
for s in sweep slo; do
    "$tb" run "$tmp/$s.ini" --dry-run >/dev/null 2>"$tmp/$s.whole.err" && pass "the $s unsharded plans" \
        || fail "the $s unsharded: $(cat "$tmp/$s.whole.err")"
done

# ---------------------------------------------------------------- 2. --filter on the suite's values
suite filt $'concurrency = 5, 64, 256\nrequests = 256\nrequest_rate = 10, 20'
# case: concurrency x request_rate; shard K's share of each differs
for spec in "concurrency=64:4" "concurrency=5:3" "request_rate=10:4" "requests=256:4"; do
    f=${spec%:*}
    n=${spec#*:}
    want=$("$tb" run "$tmp/filt.ini" --dry-run --filter "$f" | grep -o '^  #[0-9]*' | tr -d ' ' | tr '\n' ' ')
    [ -n "$want" ] || fail "--filter $f: nothing unsharded"
    for k in $(seq 0 $((n - 1))); do
        got=$("$tb" run "$tmp/filt.ini" --shard "$k/$n" --start-at @0 --dry-run --filter "$f" 2>"$tmp/f.err" \
            | grep -o '^  #[0-9]*' | tr -d ' ' | tr '\n' ' ')
        [ "$got" = "$want" ] || fail "--filter $f, shard $k/$n: cases '$got', unsharded '$want' ($(cat "$tmp/f.err"))"
    done
    pass "--filter $f over $n shards: the suite's cases $want on every shard"
done
# and the shard's share is what runs
"$tb" run "$tmp/filt.ini" --shard 1/4 --start-at @0 --dry-run --filter concurrency=64 --filter request_rate=10 \
    >"$tmp/f64.out" 2>&1
grep -q "concurrency=16 request_rate=2.5 requests=64" "$tmp/f64.out" && pass "the case kept runs the shard's share" \
    || fail "shard 1/4 of concurrency=64: $(cat "$tmp/f64.out")"

# ---------------------------------------------------------------- 3. multi-turn shares
# 10 requests of 2-turn sessions over 3 shards: 4, 3, 3; shard 0's 4 would
# pass alone, but the run could never complete: every shard refuses
suite turns $'concurrency = 3\nrequests = 10' 'turns = 2'
for k in 0 1 2; do
    "$tb" run "$tmp/turns.ini" --shard "$k/3" --start-at @0 --dry-run >/dev/null 2>"$tmp/t$k.err"
    rc=$?
    [ $rc = 2 ] && grep -q "a shard's share of a case is refused by its plugin" "$tmp/t$k.err" \
        && grep -q "requests=3: turns = 2: the requests of a call (3) must be a whole number of sessions of 2 turns" \
            "$tmp/t$k.err" && pass "turns = 2, 10 requests, shard $k/3: refused before anything runs" \
        || fail "turns shard $k/3 (rc $rc): $(cat "$tmp/t$k.err")"
done
"$tb" run "$tmp/turns.ini" --shard 0/3 --start-at @0 --db "$tmp/turns.db" >/dev/null 2>&1
[ $? = 2 ] && [ ! -e "$tmp/turns.db" ] && pass "turns: run refused, no session" || fail "turns: run not refused"
# 12 requests over 3 shards: 4 each, whole sessions
sed 's/requests = 10/requests = 12/' "$tmp/turns.ini" >"$tmp/turns12.ini"
"$tb" run "$tmp/turns12.ini" --shard 2/3 --start-at @0 --dry-run >"$tmp/t12.out" 2>&1 \
    && grep -q "requests=4" "$tmp/t12.out" && pass "turns = 2, 12 requests over 3 shards: planned" \
    || fail "turns 12/3: $(cat "$tmp/t12.out")"

# ---------------------------------------------------------------- 7. N = 1
"$tb" run "$tmp/filt.ini" --shard 0/1 --start-at @0 --dry-run >/dev/null 2>"$tmp/n1.err"
[ $? = 2 ] && grep -q "expected N >= 2 shards" "$tmp/n1.err" && pass "--shard 0/1 refused (N >= 2)" \
    || fail "--shard 0/1: $(cat "$tmp/n1.err")"

# ---------------------------------------------------------------- 8. dates that do not exist
for d in 2026-02-30T00:00:00Z 2026-04-31T12:00:00Z 2025-02-29T00:00:00Z 2026-06-31T00:00:00+00:00; do
    "$tb" run "$tmp/filt.ini" --shard 0/2 --start-at "$d" --dry-run >/dev/null 2>"$tmp/d.err"
    [ $? = 2 ] && grep -q -- "--start-at $d: no such time" "$tmp/d.err" && pass "--start-at $d refused" \
        || fail "--start-at $d: $(cat "$tmp/d.err")"
done
for d in 2028-02-29T00:00:00Z 2026-04-30T23:59:59.5Z 2026-12-31T23:59:59Z; do
    "$tb" run "$tmp/filt.ini" --shard 0/2 --start-at "$d" --dry-run >/dev/null 2>"$tmp/d.err" \
        && pass "--start-at $d accepted" || fail "--start-at $d: $(cat "$tmp/d.err")"
done

# ---------------------------------------------------------------- 6. interrupted while waiting
suite wait $'concurrency = 2\nrequests = 4'
"$tb" run "$tmp/wait.ini" --shard 1/2 --start-at 2261-12-31T23:59:59Z --db "$tmp/wait.db" \
    >"$tmp/wait.out" 2>"$tmp/wait.err" &
wpid=$!
pids+=($wpid)
until grep -q "shard 1/2 starts at" "$tmp/wait.err"; do
    kill -0 $wpid 2>/dev/null || break
    sleep 0.05
done
kill -INT $wpid
wait $wpid
rc=$?
r=$(q "$tmp/wait.db" "select status || ' ' || shard_index || '/' || shard_count || ' ' || start_at || ' ' ||
    coalesce(start_late_ns, 'null') || ' ' || (clock_offset_ns is not null) from session")
[ $rc = 130 ] && [ "$r" = "interrupted 1/2 2261-12-31T23:59:59.000Z null 1" ] \
    && pass "a shard interrupted while it waits keeps its identity ($r)" \
    || fail "interrupted while waiting (rc $rc): '$r'; $(cat "$tmp/wait.err")"

# ---------------------------------------------------------------- 9. the seed
seed=$("$tb" run "$tmp/wait.ini" --shard 1/2 --start-at 2261-12-31T23:59:59Z --dry-run | sed -n 's/.*, seed \([0-9]*\)$/\1/p')
stored=$(q "$tmp/wait.db" "select seed from session")
"$tb" show last --db "$tmp/wait.db" >"$tmp/show.out" 2>&1
"$tb" report last --format md --db "$tmp/wait.db" >"$tmp/report.md" 2>&1
cfg=$(q "$tmp/wait.db" "select json_extract(config_json, '$.suite.seed') from session")
if [ -n "$seed" ] && [ "$seed" != 5 ] && [ "$stored" = "$seed" ] && [ "$cfg" = "$seed" ] \
    && grep -q "seed $seed\b" "$tmp/show.out" && grep -q "seed $seed\b" "$tmp/report.md"; then
    pass "shard 1's seed is one number: $seed in --dry-run, session, config, show and report"
else
    fail "shard seed: dry-run '$seed', stored '$stored', config '$cfg', show: $(grep -o 'seed -*[0-9]*' "$tmp/show.out"), report: $(grep -o 'seed -*[0-9]*' "$tmp/report.md")"
fi
sed "s/^seed = 5$/seed = $seed/" "$tmp/wait.ini" >"$tmp/seed.ini"
"$tb" run "$tmp/seed.ini" --dry-run 2>"$tmp/seed.err" | grep -q ", seed $seed$" \
    && pass "a suite takes the shard's seed back (seed = $seed)" || fail "seed = $seed: $(cat "$tmp/seed.err")"

tb_finish
