#!/usr/bin/env bash
# Crash consistency (docs/RELIABILITY.md): `tokbench run` killed with
# SIGKILL at random moments of a suite, many times, and several tokbench
# processes writing one database at once.
#
#   1. a baseline run (the reference for what a complete case holds);
#   2. TB_CRASH_TRIALS kill trials (seeded by TB_CRASH_SEED, so a failure
#      replays): most into one database that keeps every earlier trial's
#      sessions, every fifth into a fresh file, killed early (creation,
#      migrations, the session's first rows). After each kill: the database
#      passes PRAGMA integrity_check and foreign_key_check; every case
#      whose progress line was printed is stored (at most one more: killed
#      between its commit and its line); the stored cases are the first k
#      of the plan; every stored case has all its rows (as many samples,
#      warm-ups, requests and metrics as the same case of the baseline, and
#      warmup + repeat samples); the killed session is 'running' until the
#      next open (`tokbench sessions`), which marks it 'interrupted' and
#      says so; the orphaned worker exits within 10 s;
#   3. the owner check itself: a live run's session is never marked while
#      another run is killed and the database reopened; synthetic 'running'
#      sessions of a live pid, a reused pid, a zombie, a dead pid, another
#      boot, another PID namespace and an older tokbench (no owner);
#   4. concurrency: 2, 2 and 4 runs into one fresh database at once (they
#      also create and migrate it at once) with `tokbench sessions` reading
#      all along: every run completes with all its rows, distinct sessions,
#      and no reader ever marks a live session.
#
# usage: test_crash.sh BUILD_DIR SOURCE_DIR
# env:   TB_CRASH_TRIALS (default 40), TB_CRASH_SEED (default 9001)
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init crash "$@"
suite="$src/tests/data/suites/crash-null.ini"
need_sqlite3
[ -r /proc/sys/kernel/random/boot_id ] && [ -r /proc/self/stat ] || { echo "SKIP: needs Linux /proc"; exit 77; }

trials=${TB_CRASH_TRIALS:-40}
seed=${TB_CRASH_SEED:-9001}
RANDOM=$seed

# on exit, kill what of ours still runs (jobs -p: this shell's live jobs only)
on_exit() { kill -9 $(jobs -p) 2>/dev/null; }
t0=$EPOCHREALTIME
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# A uniform float in [lo, hi) from the seeded $RANDOM (30 bits).
rand_between() { awk -v r=$((RANDOM * 32768 + RANDOM)) -v lo="$1" -v hi="$2" 'BEGIN { printf "%.3f", lo + (hi - lo) * r / 1073741824 }'; }

# Children of a process (the worker of a run), where the kernel lists them.
children() { cat /proc/"$1"/task/*/children 2>/dev/null | tr -s ' ' '\n' | grep .; }
# Running (not exited, not a zombie).
running() {
    local line
    read -r line 2>/dev/null </proc/"$1"/stat || return 1
    line=${line##*) }
    [ "${line%% *}" != Z ] && [ "${line%% *}" != X ]
}

# --- 1. the baseline: a complete run, its duration T, the plan's size
planned=$("$tb" run "$suite" --dry-run | grep -c '^  #')
base="$tmp/base.db"
ts=$EPOCHREALTIME
"$tb" run "$suite" --db "$base" >/dev/null 2>"$tmp/base.err" || { fail "baseline run exit $?"; cat "$tmp/base.err"; }
T=$(elapsed "$ts")
[ "$(q "$base" "select count(*) from bench_case where status = 'ok'")" = "$planned" ] && [ "$planned" -ge 20 ] \
    || fail "baseline: not $planned ok cases"
[ "$(q "$base" "select status from session")" = completed ] || fail "baseline session not completed"
version=$(q "$base" "pragma user_version")
pass "baseline: $planned cases in $T s, schema version $version"

# "N|M": N stored cases of DB that lack any row a complete case has
# (compared with the same case, by ordinal, of the baseline, and with the
# suite's counts); M sessions with cases that lack a backend row.
incomplete() {
    q "$1" "attach '$base' as b;
      with bc as (
        select c.ordinal,
               (select count(*) from b.sample s where s.case_id = c.id) as ns,
               (select count(*) from b.sample s where s.case_id = c.id and s.warmup) as nw,
               (select count(*) from b.request r join b.sample s on s.id = r.sample_id where s.case_id = c.id) as nr,
               (select count(*) from b.metric m where m.case_id = c.id) as nm
        from b.bench_case c)
      select count(*) from main.bench_case c join main.session se on se.id = c.session_id
        left join bc on bc.ordinal = c.ordinal
      where bc.ordinal is null or c.status <> 'ok' or c.finished_at is null
         or (select count(*) from main.sample s where s.case_id = c.id) <> se.warmup + se.repeat
         or (select count(*) from main.sample s where s.case_id = c.id) <> bc.ns
         or (select count(*) from main.sample s where s.case_id = c.id and s.warmup) <> bc.nw
         or (select count(*) from main.request r join main.sample s on s.id = r.sample_id where s.case_id = c.id) <> bc.nr
         or (select count(*) from main.metric m where m.case_id = c.id) <> bc.nm
         or exists (select 1 from main.sample s where s.case_id = c.id
                    and (s.n_requests <> c.batch or (select count(*) from main.request r where r.sample_id = s.id) <> s.n_requests));
      -- sessions with cases but not every backend row (backends are stored
      -- before the first case)
      select count(*) from main.session s where exists (select 1 from main.bench_case where session_id = s.id)
         and (select count(*) from main.backend where session_id = s.id) <> 2;" | paste -sd'|'
}
sound() { # integrity, foreign keys, complete cases: one sqlite3 call
    local db=$1 what=$2 r
    r=$(q "$db" "select (select group_concat(integrity_check, '; ') from pragma_integrity_check()) || '|' ||
                        (select count(*) from pragma_foreign_key_check()) || '|' ||
                        (select count(*) from sqlite_master where name = 'bench_case')")
    [ "${r%%|*}" = ok ] || fail "$what: integrity_check: ${r%%|*}"
    r=${r#*|}
    [ "${r%%|*}" = 0 ] || fail "$what: foreign_key_check: $(q "$db" "pragma foreign_key_check")"
    # killed before the first migration committed: an empty database
    [ "${r#*|}" = 1 ] || return 0
    r=$(incomplete "$db")
    [ "$r" = "0|0" ] || fail "$what: stored cases lacking rows | sessions with cases lacking backend rows: $r"
}
[ "$(incomplete "$base")" = "0|0" ] || fail "the completeness check rejects the baseline itself"

# --- 2. kill trials
main="$tmp/main.db"
declare -A phase=()
orphan_max=0 orphans=0 windows=0 killed=0
ts=$EPOCHREALTIME
for ((k = 1; k <= trials; k++)); do
    if ((k % 5 == 0)); then
        db="$tmp/fresh-$k.db"
        delay=$(rand_between 0 "$(awk -v t="$T" 'BEGIN { print t * 0.15 }')")
    else
        db=$main
        delay=$(rand_between 0 "$(awk -v t="$T" 'BEGIN { print t * 1.0 }')")
    fi
    before=0
    [ -s "$db" ] && before=$(q "$db" "select count(*) from session" 2>/dev/null)
    before=${before:-0}
    "$tb" run "$suite" --db "$db" >"$tmp/run.out" 2>"$tmp/run.err" &
    pid=$!
    sleep "$delay"
    kids=$(children $pid)
    kill -KILL $pid 2>/dev/null
    { wait $pid; rc=$?; } 2>/dev/null # without bash's "Killed" line
    # The orphaned worker must not outlive its runner for long: it ends
    # with its case (or at once, were it to die with its parent).
    [ $rc = 137 ] || kids="" # it ended on its own: so did its workers
    for kid in $kids; do
        w=$EPOCHREALTIME
        for ((i = 0; i < 1000; i++)); do running "$kid" || break; sleep 0.01; done
        if running "$kid" && grep -qa tokbench /proc/"$kid"/cmdline; then
            fail "trial $k: worker $kid still running 10 s after its runner died"
            kill -9 "$kid" 2>/dev/null
        fi
        orphans=$((orphans + 1))
        orphan_max=$(awk -v m="$orphan_max" -v a="$w" -v b="$EPOCHREALTIME" 'BEGIN { e = b - a; printf "%.3f", (e > m ? e : m) }')
    done
    what="trial $k (seed $seed, kill at $delay s, rc $rc)"
    [ $rc = 137 ] && killed=$((killed + 1))
    if [ $rc != 137 ] && [ $rc != 0 ]; then
        fail "$what: run failed on its own"; cat "$tmp/run.err"
    fi
    if [ ! -e "$db" ]; then
        phase[before-open]=$((${phase[before-open]:-0} + 1))
        continue
    fi
    sound "$db" "$what"
    status="" stored=0 printed=0 sid=""
    # the newest session if this run made one: id|status|cases|cases are 1..k
    r=$(q "$db" "select s.id || '|' || s.status || '|' || count(c.id) || '|' ||
                        (coalesce(min(c.ordinal), 1) = 1 and coalesce(max(c.ordinal), 0) = count(c.id))
                 from session s left join bench_case c on c.session_id = s.id
                 where s.id = (select max(id) from session) and (select count(*) from session) > $before" 2>/dev/null)
    if [ -n "$r" ]; then
        IFS='|' read -r sid status stored prefix <<<"$r"
        printed=$(grep -cE '^\[[0-9]+/[0-9]+\] ' "$tmp/run.err")
        [ "$stored" -ge "$printed" ] && [ "$stored" -le $((printed + 1)) ] \
            || fail "$what: $printed cases reported finished, $stored stored"
        [ "$stored" -gt "$printed" ] && windows=$((windows + 1))
        [ "$prefix" = 1 ] || fail "$what: stored cases are not the first $stored of the plan"
        case "$status" in
            running) ;;
            completed) [ "$stored" = "$planned" ] || fail "$what: completed with $stored cases" ;;
            *) fail "$what: session $sid is '$status' before the next open" ;;
        esac
        [ $rc = 0 ] && [ "$status" != completed ] && fail "$what: exit 0 but session '$status'"
    fi
    # The next open marks it, says so, and leaves nothing running.
    "$tb" sessions --db "$db" >/dev/null 2>"$tmp/open.err" || { fail "$what: sessions exit $?"; cat "$tmp/open.err"; }
    if [ "$status" = running ]; then
        [ "$(q "$db" "select status from session where id = $sid")" = interrupted ] \
            || fail "$what: session $sid not marked interrupted"
        grep -q "session $sid marked interrupted" "$tmp/open.err" || fail "$what: the open did not say it marked $sid"
    elif grep -q 'marked interrupted' "$tmp/open.err"; then
        fail "$what: marked a session that was not running: $(cat "$tmp/open.err")"
    fi
    # killed before the first migration committed: an empty file, which a
    # reader reads as an empty database and leaves as it is (REPORTS.md)
    if [ "$(q "$db" "select count(*) || ' ' || (select user_version from pragma_user_version()) from sqlite_master")" != "0 0" ]; then
        [ "$(q "$db" "select count(*) || ' ' || (select user_version from pragma_user_version()) from session where status = 'running'")" = "0 $version" ] \
            || fail "$what: a session is still running, or the schema is not at version $version after reopening"
    fi
    if [ -z "$sid" ]; then p=no-session
    elif [ "$status" = completed ]; then p=completed
    elif [ "$stored" = 0 ]; then p=no-case
    elif [ "$stored" = "$planned" ]; then p=all-cases
    else p=mid-run
    fi
    phase[$p]=$((${phase[$p]:-0} + 1))
done
summary=""
for p in before-open no-session no-case mid-run all-cases completed; do
    summary+=" $p ${phase[$p]:-0},"
done
n_main=$(q "$main" "select count(*) from session")
n_cases=$(q "$main" "select count(*) from bench_case")
pass "kill trials: $trials (seed $seed) in $(elapsed "$ts") s, $killed killed,${summary%,}; commit-to-line window hit $windows times; $orphans orphaned workers, the slowest exited after $orphan_max s; main database: $n_main sessions, $n_cases complete cases"
[ "$(q "$main" "select count(*) from session where status not in ('interrupted', 'completed')")" = 0 ] || fail "main: sessions neither interrupted nor completed"

# --- 3. a live run is never marked; the owner checks one by one
live="$tmp/live.db"
for round in 1 2 3; do
    "$tb" run "$suite" --db "$live" >/dev/null 2>"$tmp/l.err" &
    lpid=$!
    for ((i = 0; i < 200; i++)); do
        [ -s "$live" ] && [ "$(q "$live" "select count(*) from session where status = 'running'" 2>/dev/null)" = 1 ] && break
        sleep 0.02
    done
    lsid=$(q "$live" "select max(id) from session")
    "$tb" run "$suite" --db "$live" >/dev/null 2>&1 &
    kpid=$!
    sleep "$(rand_between 0.1 "$(awk -v t="$T" 'BEGIN { print t * 0.4 }')")"
    kill -KILL $kpid 2>/dev/null
    { wait $kpid; } 2>/dev/null
    ksid=$(q "$live" "select max(id) from session")
    "$tb" sessions --db "$live" >/dev/null 2>"$tmp/open.err" || fail "live round $round: sessions exit $?"
    if running $lpid; then
        [ "$(q "$live" "select status from session where id = $lsid")" = running ] \
            || fail "live round $round: the live session $lsid was marked"
    else
        echo "note: live round $round: the live run ended before the check"
    fi
    if [ "$ksid" != "$lsid" ]; then
        [ "$(q "$live" "select status from session where id = $ksid")" = interrupted ] \
            || fail "live round $round: killed session $ksid not marked"
    fi
    wait $lpid || fail "live round $round: the live run exit $?"
    [ "$(q "$live" "select status from session where id = $lsid")" = completed ] || fail "live round $round: not completed"
    [ "$(q "$live" "select count(*) from bench_case where session_id = $lsid")" = "$planned" ] || fail "live round $round: cases missing"
done
sound "$live" "live runs"

# Synthetic 'running' sessions, copies of the baseline's with another owner.
syn="$tmp/owners.db"
q "$base" "vacuum into '$syn'"
read -r self_stat </proc/$BASHPID/stat
self_ticks=$(echo "${self_stat##*) }" | awk '{ print $20 }')
boot=$(cat /proc/sys/kernel/random/boot_id)
ns=$(readlink /proc/self/ns/pid)
true &
dead=$!
wait $dead
# A zombie: a child whose parent (here `sleep`, after exec) never reaps it.
(sleep 0 & exec sleep 3) &
zparent=$!
zombie=""
for ((i = 0; i < 100; i++)); do
    zombie=$(children $zparent | head -n1)
    [ -n "$zombie" ] && ! running "$zombie" && [ -r /proc/"$zombie"/stat ] && break
    zombie=""
    sleep 0.01
done
add() { # NAME BOOT NS PID TICKS (SQL literals)
    q "$syn" "insert into session (uuid, machine_id, suite_name, suite_path, suite_sha256, suite_text, tokbench_version,
        git_commit, compiler, cuda_build_version, command_line, started_at, status, warmup, repeat, seed,
        owner_boot_id, owner_pid_ns, owner_pid, owner_start_ticks)
      select lower(hex(randomblob(16))), machine_id, '$1', suite_path, suite_sha256, suite_text, tokbench_version,
        git_commit, compiler, cuda_build_version, command_line, started_at, 'running', warmup, repeat, seed,
        $2, $3, $4, $5 from session where id = 1"
}
add live-pid "'$boot'" "'$ns'" $BASHPID "$self_ticks"
add reused-pid "'$boot'" "'$ns'" $BASHPID $((self_ticks + 1))
add dead-pid "'$boot'" "'$ns'" $dead 1
add other-boot "'00000000-0000-0000-0000-000000000000'" "'$ns'" $BASHPID "$self_ticks"
add other-pid-ns "'$boot'" "'pid:[1]'" $dead 1
add older-tokbench null null null null
if [ -n "$zombie" ]; then
    zticks=$(awk '{ sub(/.*\) /, ""); print $20 }' /proc/"$zombie"/stat)
    add zombie "'$boot'" "'$ns'" "$zombie" "$zticks"
else
    echo "note: no zombie could be made; that check is skipped"
fi
"$tb" sessions --db "$syn" >/dev/null 2>"$tmp/open.err" || fail "owners: sessions exit $?"
got=$(q "$syn" "select group_concat(suite_name || '=' || status, ' ') from (select * from session where id > 1 order by id)")
want="live-pid=running reused-pid=interrupted dead-pid=interrupted other-boot=interrupted other-pid-ns=running older-tokbench=running"
[ -n "$zombie" ] && want+=" zombie=interrupted"
[ "$got" = "$want" ] || fail "owners: got [$got], want [$want]"
"$tb" sessions --db "$syn" >/dev/null 2>"$tmp/open2.err"
grep -q marked "$tmp/open2.err" && fail "owners: a second open marked again: $(cat "$tmp/open2.err")"
kill $zparent 2>/dev/null
wait $zparent 2>/dev/null
pass "owners: live pid kept, reused/dead/zombie pid and another boot marked, another PID namespace and no owner left alone; 3 live runs never marked"

# --- 4. concurrent writers (and readers) on one fresh database
ts=$EPOCHREALTIME
for n in 2 2 4; do
    db="$tmp/conc-$n-$RANDOM.db"
    pids=()
    for ((i = 0; i < n; i++)); do
        "$tb" run "$suite" --db "$db" >/dev/null 2>"$tmp/c$i.err" &
        pids+=($!)
    done
    reads=0 read_fail=0
    while running "${pids[0]}" || running "${pids[$((n - 1))]}"; do
        # a reader never creates the database: it reads once a run made it
        [ -e "$db" ] || { sleep 0.01; continue; }
        "$tb" sessions --db "$db" >/dev/null 2>"$tmp/r.err" || read_fail=$((read_fail + 1))
        grep -q marked "$tmp/r.err" && fail "concurrent $n: a reader marked a live session: $(cat "$tmp/r.err")"
        reads=$((reads + 1))
        sleep 0.05
    done
    for ((i = 0; i < n; i++)); do
        wait "${pids[$i]}" || { fail "concurrent $n: run $i exit $?"; cat "$tmp/c$i.err"; }
        grep -qiE 'locked|busy' "$tmp/c$i.err" && fail "concurrent $n: run $i: $(grep -iE 'locked|busy' "$tmp/c$i.err")"
    done
    [ $read_fail = 0 ] || fail "concurrent $n: $read_fail of $reads reads failed: $(cat "$tmp/r.err")"
    [ "$(q "$db" "select count(distinct id) || ' ' || count(distinct uuid) || ' ' || sum(status = 'completed') from session")" = "$n $n $n" ] \
        || fail "concurrent $n: sessions: $(q "$db" "select id, status from session")"
    [ "$(q "$db" "select count(*) from bench_case where status = 'ok'")" = $((n * planned)) ] \
        || fail "concurrent $n: $(q "$db" "select count(*) from bench_case") cases, want $((n * planned))"
    [ "$(q "$db" "select count(*) from (select session_id from bench_case group by session_id having count(*) = $planned)")" = "$n" ] \
        || fail "concurrent $n: some session lacks cases"
    sound "$db" "concurrent $n"
done
pass "concurrent writers: 2, 2 and 4 runs at once into fresh databases, all complete, distinct sessions, readers never blocked or marking ($(elapsed "$ts") s)"

echo "crash test: $(elapsed "$t0") s in all"
tb_finish
