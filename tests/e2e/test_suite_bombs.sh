#!/usr/bin/env bash
# End to end: suites that would exhaust memory or hang the loader (issue 38
# items 1 and 6). The real `tokbench run` (most with --dry-run):
#   1. a 6-line matrix of 8.3e9 cases is refused before any case is
#      built, the count named; two backends under the limit alone but over
#      it together too;
#   2. seven files that include each other: each read once, every other
#      include of it an error (36), at once;
#   3. include, [prompts] file, a model folder's config.json and the http
#      backend's tokenizer at /dev/zero or a FIFO: refused with the
#      reason, --dry-run included (a FIFO used to block for ever, /dev/zero
#      to be read until memory ran out);
#   4. a config.json over its limit (a regular file): the case fails with
#      the limit named, the worker reads no more of it;
#   5. control bytes of a suite are escaped in its errors.
# Every command runs under a 2 GiB address-space limit (the old loader
# reached 14.7 GB; none under ASan) and a generous timeout (a hang guard only: each takes
# well under a second; TB_BOMBS_GUARD_S sets it, to run the test against
# an old build that hangs).
#
# usage: test_suite_bombs.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init suite_bombs "$@"
null="$build/plugins/null/null.so"

# The address-space limit, but for a sanitizer build (ASan reserves
# terabytes of it; its builds run the fixed code only). ldd's output is
# read whole: under pipefail, "ldd | grep -q" fails when grep's early exit
# kills ldd with SIGPIPE, which once set the limit on CI's sanitizer build
vlimit=2097152
case "$(ldd "$tb" 2>/dev/null)" in *libasan*) vlimit=unlimited ;; esac

# tbrun NAME ARGS...: tokbench under the limits; stdout, stderr in
# $tmp/NAME.out/.err, the exit status in rc
tbrun() {
    local name=$1
    shift
    (ulimit -v $vlimit 2>/dev/null; exec timeout -k 5 "${TB_BOMBS_GUARD_S:-120}" "$tb" "$@") >"$tmp/$name.out" 2>"$tmp/$name.err"
    rc=$?
}
# expect NAME STATUS TEXT WHAT: the run ended with STATUS and stderr holds TEXT
expect() {
    if [ "$rc" = "$2" ] && grep -qF -- "$3" "$tmp/$1.err"; then
        pass "$4"
    else
        fail "$4: exit $rc (expected $2), stderr: $(head -c 600 "$tmp/$1.err")"
    fi
}

# ------------------------------------------------------------------ 1
v=$(seq -s, 1 45)
cat >"$tmp/bomb.ini" <<EOF
[suite]
repeat = 1
[matrix]
prompt_tokens = $v
max_new_tokens = $v
batch = $v
steps = $v
[backend n]
plugin = $null
prefill_us = $v
step_us = $v
EOF
for mode in --dry-run ""; do
    tbrun bomb run "$tmp/bomb.ini" --db "$tmp/bomb.db" $mode
    expect bomb 2 "$tmp/bomb.ini:8: backend: [backend n] would have 8303765625 cases (45 prompt_tokens x 45 max_new_tokens x 45 batch x 45 steps x 45 prefill_us x 45 step_us), more than the 100000 a suite may have" \
        "8.3e9 cases refused before they are built, the count named (run ${mode:-without --dry-run})"
done
[ ! -s "$tmp/bomb.db" ] && pass "no database written" || fail "the refused suite wrote a database"

v=$(seq -s, 1 40)
cat >"$tmp/two.ini" <<EOF
[suite]
repeat = 1
[matrix]
max_new_tokens = $v
[backend a]
plugin = $null
step_us = $v
prefill_us = $v
[backend b]
plugin = $null
step_us = $v
prefill_us = $v
EOF
tbrun two run "$tmp/two.ini" --db "$tmp/two.db" --dry-run
expect two 2 "$tmp/two.ini:9: backend: [backend b] would have 64000 cases (40 max_new_tokens x 40 step_us x 40 prefill_us), 128000 in all with the backends before it, more than the 100000 a suite may have" \
    "backends under the limit alone, over it together: refused"

# ------------------------------------------------------------------ 2
for i in 0 1 2 3 4 5 6; do
    { for j in 0 1 2 3 4 5 6; do [ $j = $i ] || echo "include = m$j.ini"; done
      [ $i = 0 ] && printf '[backend n]\nplugin = %s\n' "$null"
      # ~1.1 KB each, as the report's files
      for k in $(seq 1 30); do echo "; padding line $k of a file that includes all the others"; done
    } >"$tmp/m$i.ini"
done
tbrun inc run "$tmp/m0.ini" --db "$tmp/inc.db" --dry-run
expect inc 2 "... and 16 more errors" "seven files including each other: each read once, 36 includes refused"
grep -qF "m0.ini\" includes itself (cycle: $tmp/m0.ini -> $tmp/m1.ini -> $tmp/m0.ini)" "$tmp/inc.err" \
    && pass "a cycle names its chain" || fail "cycle: $(head -c 600 "$tmp/inc.err")"

# ------------------------------------------------------------------ 3
mkfifo "$tmp/fifo"
for target in /dev/zero "$tmp/fifo"; do
    kind=$([ "$target" = /dev/zero ] && echo "a device" || echo "a FIFO or socket")
    printf '[suite]\ninclude = %s\n[backend n]\nplugin = %s\n' "$target" "$null" >"$tmp/inc-odd.ini"
    tbrun inc-odd run "$tmp/inc-odd.ini" --db "$tmp/x.db" --dry-run
    expect inc-odd 2 "$tmp/inc-odd.ini:2: include: cannot read \"$target\": $kind, not a regular file (expected a suite file)" \
        "include = $target refused"
    printf '[prompts]\nfile = %s\n[backend n]\nplugin = %s\n' "$target" "$null" >"$tmp/prompts-odd.ini"
    tbrun prompts-odd run "$tmp/prompts-odd.ini" --db "$tmp/x.db" --dry-run
    expect prompts-odd 2 "$target: $kind, not a regular file (expected a prompt set)" "[prompts] file = $target refused"
    if [ -f "$build/plugins/ar/ar.so" ]; then
        # a model folder whose config.json is the odd file
        rm -rf "$tmp/model"
        mkdir "$tmp/model"
        for f in "$src/models/tiny-llama-random"/*; do ln -s "$f" "$tmp/model/"; done
        ln -sf "$target" "$tmp/model/config.json"
        printf '[suite]\nrepeat = 1\nwarmup = 0\n[backend ar]\nplugin = %s\nmodel = %s\n' \
            "$build/plugins/ar/ar.so" "$tmp/model" >"$tmp/model-odd.ini"
        tbrun model-odd run "$tmp/model-odd.ini" --db "$tmp/x.db" --dry-run
        expect model-odd 2 "model: [backend ar] \"$tmp/model/config.json\" is $([ "$target" = /dev/zero ] && echo "a device" || echo "a FIFO"), not a regular file" \
            "config.json at $target refused by --dry-run"
    fi
    if [ -f "$build/plugins/http/http.so" ]; then
        printf '[suite]\nrepeat = 1\n[backend h]\nplugin = %s\nurl = http://127.0.0.1:9\ntokenizer = %s\n' \
            "$build/plugins/http/http.so" "$target" >"$tmp/tok-odd.ini"
        tbrun tok-odd run "$tmp/tok-odd.ini" --db "$tmp/x.db" --dry-run
        expect tok-odd 2 "tokenizer: [backend h] \"$target\" is $([ "$target" = /dev/zero ] && echo "a device" || echo "a FIFO"), not a regular file" \
            "tokenizer = $target refused by --dry-run"
    fi
done

# ------------------------------------------------------------------ 4
if [ -f "$build/plugins/ar/ar.so" ]; then
    need_sqlite3
    rm -rf "$tmp/model"
    mkdir "$tmp/model"
    for f in "$src/models/tiny-llama-random"/*; do ln -s "$f" "$tmp/model/"; done
    rm "$tmp/model/config.json"
    cp "$src/models/tiny-llama-random/config.json" "$tmp/model/config.json"
    truncate -s 17M "$tmp/model/config.json" # sparse: no disk
    printf '[suite]\nrepeat = 1\nwarmup = 0\n[matrix]\nprompt_tokens = 4\nmax_new_tokens = 2\n[backend ar]\nplugin = %s\nmodel = %s\n' \
        "$build/plugins/ar/ar.so" "$tmp/model" >"$tmp/big-config.ini"
    tbrun big-config run "$tmp/big-config.ini" --db "$tmp/big.db"
    got=$(q "$tmp/big.db" "select status || ' ' || coalesce(error, '') from bench_case")
    case "$got" in
        "failed "*"$tmp/model/config.json: larger than the limit of 16 MiB for a config.json"*)
            pass "a config.json over 16 MiB: the case fails, the limit named";;
        *) fail "big config.json: exit $rc, stored '$got', stderr $(head -c 400 "$tmp/big-config.err")";;
    esac
fi

# ------------------------------------------------------------------ 5
printf '[suite]\nwarmup = \033]0;title\007\033[31mred\n[backend n]\nplugin = %s\n' "$null" >"$tmp/ctl.ini"
tbrun ctl run "$tmp/ctl.ini" --db "$tmp/x.db" --dry-run
expect ctl 2 'ctl.ini:2: control character 0x1b (a suite is text' "control bytes in a suite: an error at their line, none printed"
LC_ALL=C grep -q $'[\033\007]' "$tmp/ctl.err" && fail "raw ESC or BEL on stderr"

tb_finish
