#!/usr/bin/env bash
# End-to-end: `dtype = fp8` through the CLI (docs/ARCHITECTURE.md, fp8.h).
# The ar and diffusion backends load a shipped model with FP8 projection
# weights on the CPU and say so in describe() (stored dtype "fp8"; the
# default stays "f32") and run every case; a mixture-of-experts preset
# runs under fp8 too (its experts rounded, its router not) and stores
# dtype "fp8"; the flow backend (no dtype option) is refused with an
# error that names the option. (How many outputs FP8 changes is printed, not checked: the
# quality cost is docs/PERFORMANCE.md's measurement.)
#
# usage: test_fp8_run.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init fp8_run "$@"
need_sqlite3

cat >"$tmp/fp8.ini" <<EOT
[suite]
name = fp8-e2e
warmup = 0
repeat = 1
seed = 3
[matrix]
prompt_tokens = 8
max_new_tokens = 8
batch = 2
[backend ar]
plugin = ar
model = $src/models/small-llama
device = cpu
threads = 1
[backend ar-fp8]
plugin = ar
model = $src/models/small-llama
device = cpu
threads = 1
dtype = fp8
[backend llada-fp8]
plugin = diffusion
model = $src/models/small-llada
device = cpu
threads = 1
dtype = fp8
steps = 4
block_length = 8
EOT
db="$tmp/fp8.db"
"$tb" run "$tmp/fp8.ini" --db "$db" >"$tmp/out" 2>"$tmp/err" || { fail "fp8 suite exit $?"; cat "$tmp/err"; }
[ "$(q "$db" "select count(*) from summary where status = 'ok'")" = 3 ] || fail "cases not ok: $(cat "$tmp/err")"
for b in ar:f32 ar-fp8:fp8 llada-fp8:fp8; do
    got=$(q "$db" "select json_extract(info_json, '\$.dtype') from backend where label = '${b%%:*}'")
    [ "$got" = "${b#*:}" ] || fail "backend ${b%%:*}: dtype '$got', want '${b#*:}'"
done
# the same synthetic prompts (seed) through both AR backends
same=$(q "$db" "select count(*) from request a join sample sa on sa.id = a.sample_id join bench_case ca on ca.id = sa.case_id
  join backend ba on ba.id = ca.backend_id and ba.label = 'ar'
  join request b on b.idx = a.idx join sample sb on sb.id = b.sample_id join bench_case cb on cb.id = sb.case_id
  join backend bb on bb.id = cb.backend_id and bb.label = 'ar-fp8'
  where a.output_hash = b.output_hash")
total=$(q "$db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
  join backend b on b.id = c.backend_id and b.label = 'ar'")
echo "fp8 vs f32: ${same:-?} of ${total:-?} requests generated the same tokens"
[ "${total:-0}" -gt 0 ] || fail "no AR requests stored"

# a MoE model: its experts under fp8 too (format/model.c); every case ok, stored as fp8
cat >"$tmp/moe.ini" <<EOT
[suite]
name = fp8-moe
warmup = 0
repeat = 1
[matrix]
prompt_tokens = 4
max_new_tokens = 2
[backend moe-fp8]
plugin = ar
model = preset:tiny-qwen3-moe
device = cpu
dtype = fp8
EOT
"$tb" run "$tmp/moe.ini" --db "$tmp/moe.db" >"$tmp/moe.out" 2>&1 || { fail "MoE + fp8 did not run"; cat "$tmp/moe.out"; }
moe_dtype=$(q "$tmp/moe.db" "select json_extract(info_json, '\$.dtype') from backend where label = 'moe-fp8'")
[ "$moe_dtype" = fp8 ] || fail "MoE + fp8: stored dtype '$moe_dtype', want fp8"
# the flow backend has no dtype option: refused by name
cat >"$tmp/flow.ini" <<EOT
[suite]
name = fp8-flow
[matrix]
prompt_tokens = 4
max_new_tokens = 2
[backend flow-fp8]
plugin = flow
model = preset:tiny-flow
dtype = fp8
EOT
"$tb" run "$tmp/flow.ini" --db "$tmp/flow.db" >"$tmp/flow.out" 2>&1 && fail "flow + dtype accepted"
grep -qi "dtype" "$tmp/flow.out" || { fail "flow + dtype: the error does not name the option"; cat "$tmp/flow.out"; }
tb_finish
