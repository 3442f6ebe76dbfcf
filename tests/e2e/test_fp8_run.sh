#!/usr/bin/env bash
# End-to-end: `dtype = fp8` through the CLI (docs/ARCHITECTURE.md, fp8.h).
# The ar and diffusion backends load a shipped model with FP8 projection
# weights on the CPU and say so in describe() (stored dtype "fp8"; the
# default stays "f32") and run every case; a mixture-of-experts preset and
# the flow backend (no dtype option) are refused with errors that name
# the reason. (How many outputs FP8 changes is printed, not checked: the
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

# refusals: a MoE model (its experts are not covered), the flow backend (no dtype option)
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
"$tb" run "$tmp/moe.ini" --db "$tmp/moe.db" >"$tmp/moe.out" 2>&1
grep -q "dtype = fp8: Qwen3MoeForCausalLM has mixture-of-experts layers" "$tmp/moe.out" \
    || { fail "MoE + fp8 not refused by name"; cat "$tmp/moe.out"; }
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
