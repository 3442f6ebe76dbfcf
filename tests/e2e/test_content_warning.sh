#!/usr/bin/env bash
# End-to-end: the warning for a content-dependent sampler on random-token
# prompts (docs/METRICS.md, "Content-dependent samplers"). The diffusion
# plugin's describe() lists its content-dependent samplers; the store keeps
# it; `run` and `show` warn for sdar_dynamic on synthetic prompts, not for
# sdar_static beside it, and not for sdar_dynamic on a prompt set's text.
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
tb_finish
