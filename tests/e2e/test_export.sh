#!/usr/bin/env bash
# test_export.sh BUILD_DIR SOURCE_DIR
#
# Issue 39 item 10: `export --format csv --requests` (one row per stored
# request, every row as many fields as the header) and `export --format
# aiperf|vllm` (AIPerf's profile_export_aiperf.json and vLLM's `bench
# serve --save-result` field names: parse, and carry the numbers of
# `export --format json` for every mapped field), on a small null-plugin
# suite of two cases; and (issue 41) a diffusion backend's canvas figures
# in csv --requests, json and the summary csv.
set -euo pipefail
build=${1:?usage: test_export.sh BUILD_DIR SOURCE_DIR}
tb=$build/tokbench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokbench-export.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$tmp/s.ini" <<'SUITE'
[suite]
name = export
warmup = 1
repeat = 3
seed = 7
[matrix]
prompt_tokens = 16
max_new_tokens = 8
batch = 1, 3
[backend a]
plugin = null
steps = none
SUITE
"$tb" run "$tmp/s.ini" --db "$tmp/t.db" >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "run: exit $?"; }

"$tb" export last --db "$tmp/t.db" --format csv --requests -o "$tmp/req.csv" || fail "export csv --requests"
"$tb" export last --db "$tmp/t.db" --format json -o "$tmp/all.json" || fail "export json"
"$tb" export last --db "$tmp/t.db" --format vllm -o "$tmp/vllm.json" || fail "export vllm"
"$tb" export last --db "$tmp/t.db" --format aiperf -o "$tmp/aiperf.json" || fail "export aiperf"
"$tb" export last --db "$tmp/t.db" --format vllm --case 2 -o "$tmp/vllm2.json" || fail "export vllm --case 2"
"$tb" export last --db "$tmp/t.db" --format aiperf --case 1 -o "$tmp/aiperf1.json" || fail "export aiperf --case 1"

python3 - "$tmp" <<'PY' || fail "the exports disagree (above)"
import csv, json, math, sqlite3, sys
tmp = sys.argv[1]
db = sqlite3.connect(f"{tmp}/t.db")
stored = db.execute("SELECT count(*) FROM request").fetchone()[0]
rows = list(csv.reader(open(f"{tmp}/req.csv", newline="")))
head, body = rows[0], rows[1:]
assert len(body) == stored and stored > 0, f"{len(body)} CSV rows, {stored} stored requests"
for r in body:
    assert len(r) == len(head), f"a row of {len(r)} fields, header {len(head)}: {r}"
    for k in ("ttft_ns", "e2e_ns", "output_tokens", "repetition", "case"):
        v = r[head.index(k)]
        if v: float(v)
# the measured requests of case 2, by ttft, against the JSON export
case2 = [r for r in body if r[head.index("case")] == "2" and r[head.index("warmup")] == "0"]
doc = json.load(open(f"{tmp}/all.json"))
ttfts = sorted(int(q["ttft_ns"]) for c in doc["cases"] if c["ordinal"] == 2
               for s in c["samples"] if not s["warmup"] for q in s["requests"])
assert sorted(int(r[head.index("ttft_ns")]) for r in case2) == ttfts, "case 2's ttft_ns differ from the JSON's"

metrics = {c["ordinal"]: c["metrics"] for c in doc["cases"]}
vllm, aiperf = json.load(open(f"{tmp}/vllm.json")), json.load(open(f"{tmp}/aiperf.json"))
assert isinstance(vllm, list) and len(vllm) == len(doc["cases"]) == 2, "one vLLM document per case"
checked = 0
def same(a, b, what):
    # the same stored double; SQLite's JSON writes 15 significant digits
    global checked
    assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-13), f"{what}: export {a}, json {b}"
    checked += 1
for v, a in zip(vllm, aiperf):
    case = v["tokbench"]["case"]
    assert a["tokbench"]["case"] == case
    m = metrics[case]
    for x, name in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_ms"), ("e2el", "e2e_ms")):
        if name not in m:
            continue
        same(v[f"mean_{x}_ms"], m[name]["mean"], f"case {case} mean_{x}_ms")
        same(v[f"median_{x}_ms"], m[name]["median"], f"case {case} median_{x}_ms")
        same(v[f"p99_{x}_ms"], m[name]["p99"], f"case {case} p99_{x}_ms")
    same(v["request_throughput"], m["req_throughput"]["median"], "request_throughput")
    same(v["output_throughput"], m["agg_tps"]["median"], "output_throughput")
    reqs = [q for c in doc["cases"] if c["ordinal"] == case for s in c["samples"] if not s["warmup"]
            for q in s["requests"]]
    same(v["completed"], sum(q["status"] == "ok" for q in reqs), "completed")
    same(v["failed"], sum(q["status"] != "ok" for q in reqs), "failed")
    for tag, name in (("time_to_first_token", "ttft_ms"), ("inter_token_latency", "tpot_ms"),
                      ("request_latency", "e2e_ms")):
        if name not in m:
            continue
        assert a[tag]["unit"] == "ms"
        same(a[tag]["avg"], m[name]["mean"], f"{tag}.avg")
        for p, k in (("p50", "median"), ("p90", "p90"), ("p99", "p99"), ("min", "min"), ("max", "max")):
            same(a[tag][p], m[name][k], f"{tag}.{p}")
    same(a["request_throughput"]["avg"], m["req_throughput"]["median"], "aiperf request_throughput")
    assert a["request_throughput"]["unit"] == "requests/sec"
    same(a["output_token_throughput"]["avg"], m["agg_tps"]["median"], "aiperf output_token_throughput")
    same(a["request_count"]["avg"], v["completed"], "aiperf request_count")
assert json.load(open(f"{tmp}/vllm2.json")) == vllm[1], "--case 2 is not the array's second document"
assert json.load(open(f"{tmp}/aiperf1.json")) == aiperf[0], "--case 1 is not the array's first document"
assert checked >= 40, f"only {checked} fields compared"
print(f"{len(body)} request rows; {checked} mapped fields equal to the JSON export's")
PY

# Issue 41: a diffusion backend's canvas figures in the exports: per
# request in csv --requests and json (the kept canvases as canvas_list),
# per case in the summary csv and json's metrics, each equal to the
# stored row; no JSON object with a key twice.
src=${2:?usage: test_export.sh BUILD_DIR SOURCE_DIR}
cat >"$tmp/d.ini" <<SUITE
[suite]
name = export-canvas
warmup = 0
repeat = 2
seed = 7
[matrix]
prompt_tokens = 8
max_new_tokens = 16
batch = 2
[backend llada]
plugin = diffusion
model = $src/models/small-llada
sampler = low_confidence
block_length = 4
steps = 8
threads = 1
SUITE
TOKBENCH_PLUGIN_PATH="$build/plugins" "$tb" run "$tmp/d.ini" --db "$tmp/d.db" >"$tmp/d.log" 2>&1 \
    || { cat "$tmp/d.log"; fail "diffusion run: exit $?"; }
"$tb" export last --db "$tmp/d.db" --format csv --requests -o "$tmp/dreq.csv" || fail "export csv --requests (diffusion)"
"$tb" export last --db "$tmp/d.db" --format csv -o "$tmp/dcase.csv" || fail "export csv (diffusion)"
"$tb" export last --db "$tmp/d.db" --format json -o "$tmp/d.json" || fail "export json (diffusion)"
python3 - "$tmp" <<'PY' || fail "the canvas figures in the exports (above)"
import csv, json, math, sqlite3, sys
tmp = sys.argv[1]
db = sqlite3.connect(f"{tmp}/d.db")
cols = ("canvases", "canvas_steps", "canvas_committed", "canvas_positions", "tokens_per_chunk", "chunk_gap_ms", "bursty")
stored = db.execute(f"SELECT {', '.join('r.' + c for c in cols)}, r.canvases_json FROM request r JOIN sample sa"
                    " ON sa.id = r.sample_id ORDER BY sa.repetition, r.idx").fetchall()
assert len(stored) == 4 and all(r[0] == 4 for r in stored), stored  # 16 tokens in blocks of 4
rows = list(csv.DictReader(open(f"{tmp}/dreq.csv", newline="")))
assert len(rows) == len(stored)
for r, s in zip(rows, stored):
    for c, v in zip(cols, s):
        # (CSV: the text SQLite gives a REAL, 15 significant digits)
        assert math.isclose(float(r[c]), float(v), rel_tol=1e-13), f"csv {c}: {r[c]}, stored {v}"
def no_twice(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key twice in a JSON object: {keys}"
    return dict(pairs)
doc = json.load(open(f"{tmp}/d.json"), object_pairs_hook=no_twice)
reqs = [q for c in doc["cases"] for sa in c["samples"] for q in sa["requests"]]
assert len(reqs) == len(stored)
for q, s in zip(reqs, stored):
    for c, v in zip(cols, s):
        assert q[c] == v or math.isclose(q[c], v, rel_tol=1e-13), f"json {c}: {q[c]}, stored {v}"
    assert q["canvas_list"] == json.loads(s[-1]) and len(q["canvas_list"]) == q["canvases"], q
    assert sum(k[1] for k in q["canvas_list"]) == q["output_tokens"], q
m = doc["cases"][0]["metrics"]
summary = list(csv.DictReader(open(f"{tmp}/dcase.csv", newline="")))
assert len(summary) == 1
for name in ("steps_per_canvas", "committed_per_step", "canvas_gap_ms", "positions_per_token", "tokens_per_chunk"):
    assert m[name]["n"] > 0 and math.isclose(float(summary[0][name]), m[name]["median"], rel_tol=1e-13), f"{name}: {summary[0][name]} vs {m[name]}"
assert m["positions_per_token"]["n"] == 1 and m["steps_per_canvas"]["n"] == 16, m["steps_per_canvas"]
print("canvas figures: csv --requests, json (canvas_list) and the summary csv agree with the store")
PY

rc=0; "$tb" export last --db "$tmp/t.db" --format vllm --case 9 >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 1 ] && grep -q "no case 9" "$tmp/e" || fail "--case 9: exit $rc, $(cat "$tmp/e")"
rc=0; "$tb" export last --db "$tmp/t.db" --format json --requests >"$tmp/o" 2>"$tmp/e" || rc=$?
[ $rc = 2 ] && grep -q -- "--requests goes with --format csv" "$tmp/e" || fail "json --requests: exit $rc, $(cat "$tmp/e")"
echo "PASS: export csv --requests, aiperf and vllm"
