#!/usr/bin/env bash
# End to end: the limits of a case (issue 15.3). The real `tokbench run`:
#   1. absurd dimensions (max_new_tokens = 100000000, batch = 100000) are a
#      suite error at plan time, with file:line and the key; nothing runs;
#   2. a case within the plan's limit whose buffers the backend process
#      cannot allocate (memory_limit) fails with the reason; the process
#      does not abort;
#   3. prompt + output beyond the model's positions fails the case before
#      it generates (ar, diffusion), the numbers named; within them it runs.
#
# usage: test_limits.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init limits "$@"
null="$build/plugins/null/null.so"
need_sqlite3

# ------------------------------------------------------------------ 1
cat >"$tmp/absurd.ini" <<EOF
[suite]
repeat = 1
warmup = 0
[matrix]
prompt_tokens = 4
max_new_tokens = 100000000
batch = 100000
[backend n]
plugin = $null
EOF
"$tb" run "$tmp/absurd.ini" --db "$tmp/absurd.db" >"$tmp/absurd.out" 2>"$tmp/absurd.err"
rc=$?
[ $rc = 2 ] && pass "absurd dimensions: exit 2 (suite error)" || fail "absurd dimensions: exit $rc, expected 2: $(cat "$tmp/absurd.err")"
grep -q "^$tmp/absurd.ini:6: max_new_tokens: \[backend n\] case prompt_tokens=4 max_new_tokens=100000000 batch=100000: its measurements would need 145.5 TiB in one message from the backend process .* more than the 1.0 GiB a message may carry" "$tmp/absurd.err" \
    && pass "absurd dimensions: the error names file:line, the key and the sizes" \
    || fail "absurd dimensions: error is: $(cat "$tmp/absurd.err")"
grep -q "SIGABRT\|crashed" "$tmp/absurd.out" "$tmp/absurd.err" && fail "absurd dimensions: a backend process crashed"
[ ! -s "$tmp/absurd.db" ] || [ "$(q "$tmp/absurd.db" "select count(*) from bench_case")" = 0 ] \
    && pass "absurd dimensions: no case ran" || fail "absurd dimensions: cases were stored"

# ------------------------------------------------------------------ 2
cat >"$tmp/mem.ini" <<EOF
[suite]
repeat = 1
warmup = 0
memory_limit = 64   ; MiB: the case's 153 MiB emission buffer does not fit
[matrix]
max_new_tokens = 100000
batch = 100, 1
[backend n]
plugin = $null
step_us = 0
EOF
"$tb" run "$tmp/mem.ini" --db "$tmp/mem.db" >"$tmp/mem.out" 2>"$tmp/mem.err"
got=$(q "$tmp/mem.db" "select c.batch || ' ' || c.status || ' ' || coalesce(c.error, '') from bench_case c order by c.ordinal" | tr '\n' ';')
case "$got" in
    "100 failed out of memory for the case's buffers: 100 requests, 10000400 emissions (160006400 bytes);1 ok ;")
        pass "buffers over memory_limit: the case failed with the reason, the next ran";;
    *) fail "buffers over memory_limit: got '$got'";;
esac

# ------------------------------------------------------------------ 3
if [ -f "$build/plugins/ar/ar.so" ] && [ -f "$build/plugins/diffusion/diffusion.so" ]; then
    # tiny-llama-random holds 256 positions, tiny-llada-random 128
    cat >"$tmp/ctx.ini" <<EOF
[suite]
repeat = 1
warmup = 1
[matrix]
prompt_tokens = 200
max_new_tokens = 56, 57
[backend ar]
plugin = $build/plugins/ar/ar.so
model = $src/models/tiny-llama-random
[backend dllm]
plugin = $build/plugins/diffusion/diffusion.so
model = $src/models/tiny-llada-random
prompt_tokens = 64
max_new_tokens = 64, 65
EOF
    "$tb" run "$tmp/ctx.ini" --db "$tmp/ctx.db" >"$tmp/ctx.out" 2>"$tmp/ctx.err"
    got=$(q "$tmp/ctx.db" "select b.label || ' ' || c.max_new_tokens || ' ' || c.status || ' ' || coalesce(c.error, '') from bench_case c join backend b on b.id = c.backend_id order by c.ordinal")
    want="ar 56 ok 
ar 57 failed generate() failed at warm-up 1 (invalid): prompt_tokens 200 + max_new_tokens 57 = 257 positions, more than the model's 256 (max_position_embeddings)
dllm 64 ok 
dllm 65 failed generate() failed at warm-up 1 (invalid): prompt_tokens 64 + max_new_tokens 65 = 129 positions, more than the model's 128 (max_sequence_length)"
    [ "$got" = "$want" ] && pass "beyond the model's positions: failed before generating, the numbers named" \
        || fail "context length: got
$got"
    # nothing of the refused cases was measured
    [ "$(q "$tmp/ctx.db" "select count(*) from sample s join bench_case c on c.id = s.case_id where c.status = 'failed'")" = 0 ] \
        || fail "context length: the refused cases have samples"
else
    echo "skip: ar/diffusion plugins not built"
fi

tb_finish
