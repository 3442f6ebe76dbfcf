#!/usr/bin/env bash
# End to end, many machines on loopback (docs/METRICS.md, "Sharded runs"):
#   1. one load run whole, and the same load split in 4 shards, each a
#      process of its own with its own database, started by the Slurm
#      script of examples/ with a faked job-array environment and one
#      common --start-at;
#   2. `tokbench db merge` of the 4 databases joins them into one session:
#      per repetition the same requests and tokens as the whole run, the
#      pooled percentiles (TTFT, E2E, ITL) computed from the union of the
#      shards' requests, the aggregate tokens/s over the union window on
#      the wall clock, the concurrency summed, the clock offsets kept;
#      merging again joins nothing twice; 3 of 4 shards are not joined;
#   3. errors: --shard without --start-at, K >= N, a backend with no load
#      to split, requests fewer than shards;
#   4. the Kubernetes Indexed Job manifest parsed and checked against the
#      shard flags (index, count, start time), its suite planned sharded;
#   5. tokbench serve --reuse-port: a second server on the port, not
#      without the flag.
# No wall-clock bounds: counts and equalities only.
#
# usage: test_shard.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init shard "$@"
need_sqlite3
[ -f "$build/plugins/http/http.so" ] || { echo "SKIP: http plugin not built (libcurl missing)"; exit 77; }
"$tb" serve --help >/dev/null 2>&1 || { echo "SKIP: no tokbench serve"; exit 77; }
export TOKBENCH_PLUGIN_PATH="$build/plugins"

# ---------------------------------------------------------------- a server
cat >"$tmp/server.ini" <<'EOT'
[suite]
name = served
[backend null]
plugin = null
prefill_us = 500
step_us = 1000
EOT
start_server server "$tb" serve --backend null "$tmp/server.ini" --port 0 --max-batch 64 --reuse-port || exit 1

cat >"$tmp/load.ini" <<EOT
[suite]
name = sharded-load
warmup = 1
repeat = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 24
concurrency = 8
requests = 32
[backend client]
plugin = http
url = http://127.0.0.1:$port
loops = 2
EOT

# ---------------------------------------------------------------- 1. whole and in 4 shards
"$tb" run "$tmp/load.ini" --db "$tmp/whole.db" >"$tmp/whole.out" 2>"$tmp/whole.err" \
    || { cat "$tmp/whole.err"; fail "the whole run"; }
start_at=$(date -u -d '+2 seconds' +%Y-%m-%dT%H:%M:%SZ)
for k in 0 1 2 3; do
    SLURM_ARRAY_TASK_ID=$k SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_MIN=0 START_AT=$start_at TOKBENCH="$tb" \
        bash "$src/examples/slurm/tokbench-shards.sbatch" "$tmp/load.ini" "$tmp/out" \
        >"$tmp/shard$k.out" 2>"$tmp/shard$k.err" &
    spids[$k]=$!
done
for k in 0 1 2 3; do
    wait "${spids[$k]}" || { cat "$tmp/shard$k.err"; fail "shard $k"; }
done
for k in 0 1 2 3; do
    r=$(q "$tmp/out/shard-$k.db" "select shard_index || '/' || shard_count || ' ' || start_at || ' ' ||
        (select concurrency || ' ' || (select n_requests from sample where case_id = c.id and repetition = 1)
         from bench_case c) from session")
    want_conc=2
    want_req=8
    [ "$r" = "$k/4 ${start_at%Z}.000Z $want_conc $want_req" ] && pass "shard $k stored as $r" \
        || fail "shard $k: got '$r', want '$k/4 ${start_at%Z}.000Z $want_conc $want_req'"
done
# the shards' seeds and prompts differ (each shard its own share of the load)
seeds=$(for k in 0 1 2 3; do q "$tmp/out/shard-$k.db" "select seed from session"; done | sort -u | wc -l)
[ "$seeds" = 4 ] && pass "4 shards, 4 seeds" || fail "shards' seeds: $seeds distinct"

# ---------------------------------------------------------------- 2. the join
"$tb" db merge "$tmp/out/shard-0.db" "$tmp/out/shard-1.db" "$tmp/out/shard-2.db" --db "$tmp/three.db" \
    >"$tmp/three.out" 2>"$tmp/three.err" || fail "merge of 3 shards"
grep -q "not joined: .*shards missing: 3 (shards completed: 0,1,2)" "$tmp/three.err" \
    && [ "$(q "$tmp/three.db" "select count(*) from session where shard_count is not null and shard_index is null")" = 0 ] \
    && pass "3 of 4 shards: not joined, said why" || { cat "$tmp/three.err"; fail "3 of 4 shards"; }
"$tb" db merge "$tmp/out/shard-3.db" --db "$tmp/three.db" >"$tmp/four.out" 2>&1 \
    && grep -q "shards: 1 run joined now" "$tmp/four.out" && pass "the 4th shard completes the run" \
    || { cat "$tmp/four.out"; fail "the 4th shard"; }
"$tb" db merge "$tmp"/out/shard-*.db --db "$tmp/m.db" >"$tmp/merge.out" 2>"$tmp/merge.err" \
    || { cat "$tmp/merge.err"; fail "db merge"; }
grep -q "shards: 1 run joined now, 0 joined before" "$tmp/merge.out" && pass "joined" || { cat "$tmp/merge.out"; fail "not joined"; }
"$tb" db merge "$tmp/out/shard-0.db" --db "$tmp/m.db" >"$tmp/again.out" 2>&1
grep -q "shards: 0 runs joined now, 1 joined before" "$tmp/again.out" \
    && [ "$(q "$tmp/m.db" "select count(*) from session")" = 5 ] && pass "merging again joins nothing twice" \
    || { cat "$tmp/again.out"; fail "merge again"; }
J=$(q "$tmp/m.db" "select id from session where shard_index is null and shard_count = 4")
[ -n "$J" ] || { fail "no joined session"; exit 1; }
# `last` is the joined session, not a shard; `sessions` marks both (issue 39 item 5)
"$tb" show last --db "$tmp/m.db" >"$tmp/last.out" 2>&1
head -1 "$tmp/last.out" | grep -q "^session $J " && pass "show last: the joined session" \
    || fail "show last after the merge: $(head -1 "$tmp/last.out"), the joined session is $J"
"$tb" sessions --db "$tmp/m.db" >"$tmp/sessions.out" 2>&1
[ "$(grep -c "shard [0-3]/4 of #$J" "$tmp/sessions.out")" = 4 ] && [ "$(grep -c "joins 4 shards" "$tmp/sessions.out")" = 1 ] \
    && pass "sessions marks the shards and the join" || fail "sessions: $(cat "$tmp/sessions.out")"
"$tb" report "$J" --format md --db "$tmp/m.db" >"$tmp/show.out" 2>&1 && grep -q "4 shards joined by db merge" "$tmp/show.out" \
    && pass "the joined session's report names its shards" || fail "report $J: $(grep -i shard "$tmp/show.out")"
# (into a file, not a pipe: grep -q leaving early would cut the writer off
# with SIGPIPE, which pipefail reports as a failure when the report is long)
"$tb" report "$(q "$tmp/m.db" "select id from session where shard_index = 2")" --format md --db "$tmp/m.db" \
    >"$tmp/s2.md" 2>&1
grep -q "shard 2 of 4 (0-based), started at" "$tmp/s2.md" && pass "a shard's report says which" \
    || fail "shard 2's report: $(grep -i shard "$tmp/s2.md" | head -3)"

# per repetition: the same requests and tokens as the whole run
whole=$(q "$tmp/whole.db" "select group_concat(repetition || ':' || n_requests || ':' || output_tokens, ' ') from
    (select * from sample order by repetition)")
joined=$(q "$tmp/m.db" "select group_concat(repetition || ':' || n_requests || ':' || output_tokens, ' ') from
    (select s.* from sample s join bench_case c on c.id = s.case_id where c.session_id = $J order by repetition)")
[ "$whole" = "$joined" ] && pass "requests and tokens per repetition equal the whole run's ($joined)" \
    || fail "per repetition: whole '$whole', joined '$joined'"
[ "$(q "$tmp/m.db" "select concurrency from bench_case where session_id = $J")" = \
  "$(q "$tmp/whole.db" "select concurrency from bench_case")" ] && pass "concurrency summed to the whole run's" \
    || fail "joined concurrency"
[ "$(q "$tmp/m.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c
      on c.id = s.case_id where c.session_id = $J")" = "$(q "$tmp/whole.db" "select count(*) from request")" ] \
    && pass "request rows: as many as the whole run's" || fail "request rows"

# pooled statistics, recomputed here from the shards' own rows
python3 - "$tmp/m.db" "$J" <<'EOF' || fail "pooled statistics"
import json, math, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); J = int(sys.argv[2])
def pct(xs, p):  # core/stats.c's rule: linear between order statistics
    xs = sorted(xs); r = p / 100 * (len(xs) - 1); lo = int(r)
    return xs[-1] if lo >= len(xs) - 1 else xs[lo] + (xs[lo + 1] - xs[lo]) * (r - lo)
shards = [r[0] for r in db.execute("select id from session where shard_index is not null order by shard_index")]
assert len(shards) == 4, shards
rows = db.execute(f"""select r.ttft_ns, r.e2e_ns, r.emissions_json from request r join sample s on s.id = r.sample_id
    join bench_case c on c.id = s.case_id where c.session_id in ({','.join(map(str, shards))})
    and s.warmup = 0 and r.status = 'ok'""").fetchall()
ttft = [r[0] * 1e-6 for r in rows]; e2e = [r[1] * 1e-6 for r in rows]
itl = [b[0] - a[0] for r in rows for a, b in zip(json.loads(r[2]), json.loads(r[2])[1:])]
def metric(name):
    return db.execute(f"select n, median, p95, p99 from metric m join bench_case c on c.id = m.case_id "
                      f"where c.session_id = {J} and m.name = '{name}'").fetchone()
bad = 0
for name, xs in (("ttft_ms", ttft), ("e2e_ms", e2e), ("itl_ms", itl)):
    n, med, p95, p99 = metric(name)
    want = (len(xs), pct(xs, 50), pct(xs, 95), pct(xs, 99))
    if n != want[0] or any(abs(g - w) > 1e-9 * max(1, abs(w)) for g, w in zip((med, p95, p99), want[1:])):
        print(f"FAIL: {name}: stored {(n, med, p95, p99)}, from the union {want}"); bad += 1
    else:
        print(f"ok: {name} pooled over {n} values of 4 shards (median {med:.3f}, p99 {p99:.3f})")
# aggregate tokens/s per repetition: tokens / (last done - first submit)
# over every shard's requests, each host's times on the wall clock
for rep in range(1, 4):
    ev = []
    for sid in shards:
        off = db.execute(f"select clock_offset_ns from session where id = {sid}").fetchone()[0]
        for start, sub, e2e_ns, out, st in db.execute(f"""select s.start_ns, r.submit_offset_ns, r.e2e_ns,
                r.output_tokens, r.status from request r join sample s on s.id = r.sample_id join bench_case c
                on c.id = s.case_id where c.session_id = {sid} and s.repetition = {rep}"""):
            ev.append((start + off + sub, start + off + sub + e2e_ns, out if st == 'ok' else 0))
    wall = max(e[1] for e in ev) - min(e[0] for e in ev)
    want = sum(e[2] for e in ev) / (wall * 1e-9)
    got, gwall = db.execute(f"""select aggregate_tps, wall_ns from sample s join bench_case c on c.id = s.case_id
        where c.session_id = {J} and s.repetition = {rep}""").fetchone()
    if abs(got - want) > 1e-9 * want or gwall != wall:
        print(f"FAIL: repetition {rep}: aggregate {got} over {gwall} ns, from the union {want} over {wall}"); bad += 1
print("ok: aggregate tokens/s of every repetition over the union window" if not bad else "")
# the clock offsets: every shard's, relative to shard 0's
offs = db.execute(f"select shard_index, hostname, offset_to_first_ns from shard where session_id = {J}"
                  " order by shard_index").fetchall()
if len(offs) != 4 or offs[0][2] != 0 or any(abs(o[2]) > 10**9 for o in offs):
    print(f"FAIL: shard table {offs}"); bad += 1
else:
    print(f"ok: clock offsets recorded ({[o[2] for o in offs]} ns from shard 0's, one host)")
sys.exit(1 if bad else 0)
EOF

# ---------------------------------------------------------------- 3. errors
"$tb" run "$tmp/load.ini" --shard 0/4 --db "$tmp/e.db" >/dev/null 2>"$tmp/e1.err"
[ $? = 2 ] && grep -q "needs --start-at" "$tmp/e1.err" && pass "--shard without --start-at refused" \
    || fail "--shard without --start-at: $(cat "$tmp/e1.err")"
"$tb" run "$tmp/load.ini" --shard 4/4 --start-at @0 --db "$tmp/e.db" >/dev/null 2>"$tmp/e2.err"
[ $? = 2 ] && grep -q "0 <= K < N" "$tmp/e2.err" && pass "--shard 4/4 refused" || fail "--shard 4/4: $(cat "$tmp/e2.err")"
"$tb" run "$tmp/load.ini" --shard 0/2 --start-at 2026-13-01T00:00:00Z --db "$tmp/e.db" >/dev/null 2>"$tmp/e3.err"
[ $? = 2 ] && grep -q "expected a UTC time" "$tmp/e3.err" && pass "a bad --start-at refused" \
    || fail "bad --start-at: $(cat "$tmp/e3.err")"
"$tb" run "$tmp/load.ini" --shard 0/64 --start-at @0 --dry-run >/dev/null 2>"$tmp/e4.err"
[ $? = 2 ] && grep -q "requests 32 cannot be split over 64 shards" "$tmp/e4.err" && pass "fewer requests than shards refused" \
    || fail "requests < shards: $(cat "$tmp/e4.err")"
cat >"$tmp/batch.ini" <<'EOT'
[suite]
name = batch
[backend engine]
plugin = null
EOT
"$tb" run "$tmp/batch.ini" --shard 0/2 --start-at @0 --dry-run >/dev/null 2>"$tmp/e5.err"
[ $? = 2 ] && grep -q "serves no load to split" "$tmp/e5.err" && pass "a batch backend cannot be sharded" \
    || fail "batch backend sharded: $(cat "$tmp/e5.err")"
"$tb" run "$tmp/load.ini" --shard 1/4 --start-at @0 --dry-run >"$tmp/dry.out" 2>&1 \
    && grep -q "requests=8" "$tmp/dry.out" && pass "--dry-run shows the shard's share" || fail "dry run: $(cat "$tmp/dry.out")"

# ---------------------------------------------------------------- 4. the Kubernetes manifest
python3 - "$src/examples/kubernetes/tokbench-shards.yaml" "$tmp/k8s-suite.ini" <<'EOF' || fail "Kubernetes manifest"
import re, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
job = next(d for d in docs if d["kind"] == "Job")
cm = next(d for d in docs if d["kind"] == "ConfigMap")
spec = job["spec"]
assert spec["completionMode"] == "Indexed", spec
n = spec["completions"]
assert spec["parallelism"] == n, "every shard runs at once"
c = spec["template"]["spec"]["containers"][0]
cmd = c["command"]
assert cmd[:2] == ["tokbench", "run"], cmd
assert cmd[cmd.index("--shard") + 1] == f"$(JOB_COMPLETION_INDEX)/{n}", cmd
assert cmd[cmd.index("--start-at") + 1] == "$(START_AT)", cmd
assert "$(JOB_COMPLETION_INDEX)" in cmd[cmd.index("--db") + 1], "one database per shard"
env = {e["name"]: e for e in c["env"]}
assert "START_AT" in env and "JOB_COMPLETION_INDEX" in env, env
assert "job-completion-index" in env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
suite_path = cmd[2]
mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
vols = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
assert vols[mounts[suite_path.rsplit("/", 1)[0]]]["configMap"]["name"] == cm["metadata"]["name"]
open(sys.argv[2], "w").write(cm["data"][suite_path.rsplit("/", 1)[1]])
print(f"ok: Kubernetes Indexed Job: {n} pods, --shard $(JOB_COMPLETION_INDEX)/{n}, --start-at $(START_AT)")
EOF
n=$(python3 -c "import yaml,sys; print(next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d['kind'] == 'Job')['spec']['completions'])" "$src/examples/kubernetes/tokbench-shards.yaml")
for k in $(seq 0 $((n - 1))); do
    "$tb" run "$tmp/k8s-suite.ini" --shard "$k/$n" --start-at 2026-12-01T19:00:00Z --dry-run >"$tmp/k8s$k.out" 2>&1 \
        || fail "the manifest's suite, shard $k/$n: $(cat "$tmp/k8s$k.out")"
done
pass "the manifest's suite plans as $n shards"

# ---------------------------------------------------------------- 5. --reuse-port
"$tb" serve --backend null "$tmp/server.ini" --port "$port" --reuse-port >"$tmp/second.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do grep -q "listening\|cannot listen" "$tmp/second.log" && break; sleep 0.05; done
grep -q "listening on http://127.0.0.1:$port" "$tmp/second.log" && pass "a second server shares the port (--reuse-port)" \
    || fail "--reuse-port: $(cat "$tmp/second.log")"
"$tb" serve --backend null "$tmp/server.ini" --port "$port" >"$tmp/third.log" 2>&1
grep -q "cannot listen" "$tmp/third.log" && pass "without --reuse-port the port is refused" \
    || fail "no --reuse-port: $(cat "$tmp/third.log")"

tb_finish
