#!/usr/bin/env bash
# End-to-end: the warning for a content-dependent sampler on random-token
# prompts (docs/METRICS.md, "Content-dependent samplers"). The diffusion
# plugin's describe() lists its content-dependent samplers; the store keeps
# it; `run` and `show` warn for sdar_dynamic on synthetic prompts, not for
# sdar_static beside it, and not for sdar_dynamic on a prompt set's text;
# presets run text prompts (the GPU text suites), a tokenizer-less folder
# is refused.
#
# usage: test_content_warning.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init content_warning "$@"
need_sqlite3

backend() {
    cat <<EOT
[backend sdar]
plugin = diffusion
model = $src/models/small-sdar
sampler = sdar_dynamic, sdar_static
threshold = 0.9
steps = 4
device = cpu
threads = 1
EOT
}
{
    printf '[suite]\nname = cw\nwarmup = 0\nrepeat = 1\n[matrix]\nprompt_tokens = 8\nmax_new_tokens = 8\n'
    backend
} >"$tmp/random.ini"
{
    printf '[suite]\nname = cw-text\nwarmup = 0\nrepeat = 1\n[matrix]\nmax_new_tokens = 8\n'
    printf '[prompts]\nfile = %s/suites/data/text.jsonl\nlimit = 2\n' "$src"
    backend
} >"$tmp/text.ini"

"$tb" run "$tmp/random.ini" --db "$tmp/r.db" >"$tmp/r.out" 2>"$tmp/r.err" || fail "random run: $(tail -3 "$tmp/r.err")"
list=$(q "$tmp/r.db" "select json_extract(info_json, '\$.content_dependent_samplers') from backend")
[ "$list" = '["threshold","sdar_dynamic","fast_dllm_v2","entropy_bound"]' ] && pass "describe() lists the samplers" ||
    fail "stored content_dependent_samplers: $list"
"$tb" show last --db "$tmp/r.db" >"$tmp/show.out" 2>&1 || fail "show"
for f in r.out show.out; do
    n=$(grep -c "sampler sdar_dynamic commits (or stops) as the model's confidence allows, but its prompts were random tokens" "$tmp/$f")
    [ "$n" = 1 ] && pass "$f: warned once, for sdar_dynamic" || fail "$f: $n warnings for sdar_dynamic"
    grep -q "sampler sdar_static commits" "$tmp/$f" && fail "$f: warned for sdar_static (a fixed schedule)"
done

"$tb" run "$tmp/text.ini" --db "$tmp/t.db" >"$tmp/t.out" 2>"$tmp/t.err" || fail "text run: $(tail -3 "$tmp/t.err")"
grep -q "random tokens" "$tmp/t.out" && fail "warned on text prompts" || pass "quiet on text prompts"

# The GPU text suites run presets (random weights, no tokenizer.json): a
# preset takes a text's bytes as its tokens (tb_preset_byte_token), the
# diffusion and the ar plugin alike; a model folder without a tokenizer
# is still refused, by name.
{
    printf '[suite]\nname = cw-preset\nwarmup = 0\nrepeat = 1\n[matrix]\nmax_new_tokens = 8\n'
    printf '[prompts]\nfile = %s/suites/data/text.jsonl\nlimit = 2\n' "$src"
    printf '[backend llada2]\nplugin = diffusion\nmodel = preset:tiny-llada2\nsampler = sdar_dynamic\n'
    printf 'threshold = 0.9\nblock_length = 4\nsteps = 4\ndevice = cpu\nthreads = 1\n'
    printf '[backend llama]\nplugin = ar\nmodel = preset:tiny-llama\ndevice = cpu\nthreads = 1\n'
    printf '[backend folder]\nplugin = ar\nmodel = %s/tests/data/golden-dflash/target\ndevice = cpu\nthreads = 1\n' "$src"
} >"$tmp/preset.ini"
"$tb" run "$tmp/preset.ini" --db "$tmp/p.db" >"$tmp/p.out" 2>"$tmp/p.err"
st=$(q "$tmp/p.db" "select group_concat(b.label || ' ' || c.status, ', ') from bench_case c join backend b on b.id = c.backend_id")
[ "$st" = "llada2 ok, llama ok, folder failed" ] && pass "text prompts: presets run, a folder without a tokenizer fails" ||
    fail "text prompts on presets: $st ($(grep -E 'failed' "$tmp/p.err" | head -3))"
n=$(q "$tmp/p.db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
                   where c.status = 'ok' and r.status = 'ok' and r.output_tokens > 0")
[ "$n" = 4 ] && pass "each preset answered both prompts" || fail "ok requests with output on presets: $n, want 4"
grep -q "folder.*text prompts need a tokenizer.json; this model has none" "$tmp/p.err" &&
    pass "the folder's refusal names the missing tokenizer" || fail "no refusal for the folder: $(grep folder "$tmp/p.err" | head -2)"
tb_finish
