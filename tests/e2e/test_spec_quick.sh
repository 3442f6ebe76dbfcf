#!/usr/bin/env bash
# The speculative rows of the default suite (suites/quick.ini, issue 40),
# read from the quick.ini fixture:
#   1. lossless: each speculative row's outputs are its target's plain
#      greedy outputs, prompt for prompt (ar-small-draft and
#      ar-small-dflash against ar-small; sdar-self's drafter = self
#      against its drafter = none), at batch 1 and 8;
#   2. their acceptance is what tools/spec_eval.py measured in Python when
#      the drafters were trained (each models/*/TRAINING.md's "all (176)"
#      row at each of the suite's draft lengths (ar-small-dflash sweeps
#      3, 7, 15): the verifications exactly, the
#      acceptance length to its two decimals): tokbench counts what
#      upstream's loop counts. Over the whole prompt set only: the
#      sanitizer build's fixture samples every 11th prompt, and then this
#      part says so and checks the counts' consistency alone.
# Counts and texts only: nothing here depends on timing.
set -uo pipefail
build=$1
src=$2
fails=0
pass() { echo "ok: $*"; }
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
q() { sqlite3 -batch -noheader "$1" "$2"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fixture=$(bash "$src/tests/e2e/quick_fixture.sh" check "$build" "$src") || {
    echo "FAIL: the quick.ini fixture: $fixture"
    exit 1
}
cp "$fixture" "$tmp/q.db"
db=$tmp/q.db

# each measured request's output text, keyed by prompt, of one case
outputs() { # backend batch [drafter] [draft_len, where swept]
    local extra=""
    [ -n "${3:-}" ] && extra="and json_extract(c.options_json, '\$.drafter') = '$3'"
    [ -n "${4:-}" ] && extra="$extra and json_extract(c.options_json, '\$.draft_len') = '$4'"
    q "$db" "select r.prompt_idx || char(9) || coalesce(r.output_text, '') from request r
        join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
        join backend b on b.id = c.backend_id
        where b.label = '$1' and c.batch = $2 and s.warmup = 0 and r.status = 'ok' $extra
        order by r.prompt_idx"
}

# --- 1. lossless
for batch in 1 8; do
    outputs ar-small $batch >"$tmp/ar.$batch"
    n=$(wc -l <"$tmp/ar.$batch")
    [ "$n" -gt 0 ] || fail "ar-small batch $batch: no outputs"
    # ar-small-dflash sweeps its draft length: each case against ar-small
    for be in "ar-small-draft" "ar-small-dflash 3" "ar-small-dflash 7" "ar-small-dflash 15"; do
        set -- $be
        outputs "$1" $batch "" "${2:-}" >"$tmp/spec.$batch"
        if [ "$(wc -l <"$tmp/spec.$batch")" = "$n" ] && cmp -s "$tmp/ar.$batch" "$tmp/spec.$batch"; then
            pass "$be batch $batch: $n outputs, each ar-small's"
        else
            fail "$be batch $batch: outputs differ from ar-small's: $(diff "$tmp/ar.$batch" "$tmp/spec.$batch" | head -4)"
        fi
    done
    outputs sdar-self $batch none >"$tmp/none.$batch"
    outputs sdar-self $batch self >"$tmp/self.$batch"
    if [ -s "$tmp/none.$batch" ] && cmp -s "$tmp/none.$batch" "$tmp/self.$batch"; then
        pass "sdar-self batch $batch: self-speculation's $(wc -l <"$tmp/self.$batch") outputs are its plain AR's"
    else
        fail "sdar-self batch $batch: self differs from none: $(diff "$tmp/none.$batch" "$tmp/self.$batch" | head -4)"
    fi
done

# --- 2. acceptance against the Python measurement
# case sums over the measured good requests at batch 1: verifications, accepted
sums() { # backend draft_len
    q "$db" "select sum(r.spec_verifications) || ' ' || sum(r.spec_accepted) || ' ' || count(*) from request r
        join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id
        join backend b on b.id = c.backend_id
        where b.label = '$1' and c.batch = 1 and s.warmup = 0 and r.status = 'ok' and r.spec_draft_len = $2"
}
n_prompts=$(wc -l <"$src/suites/data/quick.jsonl")
for spec in "ar-small-draft 3 small-llama-draft" "ar-small-dflash 3 small-llama-dflash" \
    "ar-small-dflash 7 small-llama-dflash" "ar-small-dflash 15 small-llama-dflash" "sdar-self 7 small-sdar-self"; do
    set -- $spec
    read -r verif acc n <<<"$(sums "$1" "$2")"
    [ -n "$verif" ] && [ "$verif" -gt 0 ] || {
        fail "$1: no speculative counts stored"
        continue
    }
    # the acceptance length is (accepted + verifications) / verifications
    len=$(awk -v a="$acc" -v v="$verif" 'BEGIN { printf "%.2f", (a + v) / v }')
    stored=$(q "$db" "select printf('%.2f', m.median) from metric m join bench_case c on c.id = m.case_id
        join backend b on b.id = c.backend_id where b.label = '$1' and c.batch = 1
        and m.name = 'acceptance_length' and coalesce(json_extract(c.options_json, '\$.drafter'), '') != 'none'
        and coalesce(json_extract(c.options_json, '\$.draft_len'), '$2') = '$2'")
    [ "$stored" = "$len" ] && pass "$1: the case's acceptance_length $stored pools its requests" \
        || fail "$1: case acceptance_length $stored, its requests pool to $len"
    if [ "$n" != "$n_prompts" ]; then
        pass "$1: $n of $n_prompts prompts in this build's fixture: the Python comparison needs all (skipped)"
        continue
    fi
    row=$(grep -E "^\| $2 \| all \($n_prompts\) \|" "$src/models/$3/TRAINING.md")
    py_verif=$(awk -F'|' '{gsub(/ /, "", $4); print $4}' <<<"$row")
    py_len=$(awk -F'|' '{gsub(/ /, "", $5); print $5}' <<<"$row")
    [ -n "$py_verif" ] || {
        fail "$1: models/$3/TRAINING.md has no 'all ($n_prompts)' row at k = $2"
        continue
    }
    [ "$verif" = "$py_verif" ] && [ "$len" = "$py_len" ] \
        && pass "$1: $verif verifications, acceptance length $len: tools/spec_eval.py's (models/$3/TRAINING.md)" \
        || fail "$1: tokbench $verif verifications, length $len; Python (models/$3/TRAINING.md) $py_verif, $py_len"
done

[ $fails = 0 ] || exit 1
