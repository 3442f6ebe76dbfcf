#!/usr/bin/env bash
# Timings compared (suite timing: not in the default `meson test`, nor
# under the sanitizers; run alone by `meson test --suite slow`): two
# sessions of the scripted null backend (tests/data/suites/null-quick.ini,
# the case of batch 1 and prompt 32), the second with the AR-like backend's
# step 50% longer (600 us instead of 400). compare and history must find
# it slower by 20-39% in every one of 5 against 5 repetitions (p 0.00794),
# a regression past a 10% threshold and none past 60%; diffusion-like at 16
# steps about half as fast as AR-like. These are wall-clock figures: a
# machine loaded by other work can miss them, which is why they are kept
# out of the default run; test_report.sh checks the same commands' output
# that does not depend on timing.
#
# usage: test_report_timing.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init report_timing "$@"
need_sqlite3

quick="$src/tests/data/suites/null-quick.ini"
db="$tmp/a.db"
filter=(--filter batch=1 --filter prompt_tokens=32)
"$tb" run "$quick" --db "$db" "${filter[@]}" >/dev/null 2>"$tmp/run1.err" || { fail "null-quick run"; cat "$tmp/run1.err"; }
sed -e 's/^step_us = 400/step_us = 600/' "$quick" >"$tmp/slower.ini"
"$tb" run "$tmp/slower.ini" --db "$db" "${filter[@]}" >/dev/null 2>"$tmp/run2.err" || { fail "slower run"; cat "$tmp/run2.err"; }

# compare: the AR-like backend slower in session 2
"$tb" compare 1 2 --db "$db" --metric agg_tps,e2e_ms --fail-if-slower 10 >"$tmp/c12.out"; rc=$?
[ $rc = 1 ] || fail "compare 1 2 --fail-if-slower 10: exit $rc, expected 1"
grep -qE '^ar-like +prompt 32, new 64, batch 1 +agg_tps +5 +5 .* 0\.[67][0-9]{2} +-[23][0-9]\.[0-9]% +0\.00794 +slower$' "$tmp/c12.out" \
    || fail "compare 1 2: ar-like agg_tps row: $(grep 'ar-like.*agg_tps' "$tmp/c12.out")"
grep -qE '^ar-like .* e2e_ms .* \+[0-9.]+% +0\.00794 +slower$' "$tmp/c12.out" || fail "compare 1 2: e2e not slower"
grep -q '^FAIL: 2 regressions beyond 10%' "$tmp/c12.out" || fail "compare 1 2 summary: $(grep -E 'FAIL|ok:' "$tmp/c12.out")"
"$tb" compare 1 2 --db "$db" --fail-if-slower 60 >/dev/null || fail "a 35% slowdown failed a 60% threshold"
pass "compare: a 50% longer step is a regression past 10%, not past 60%"

# two backends of one session: the null model's diffusion-like at 16
# steps is about half as fast as AR-like
"$tb" compare 1 --backends ar-like diffusion-like --db "$db" --metric agg_tps >"$tmp/cb.out" || fail "compare --backends exit $?"
grep -qE '^ar-like vs diffusion-like +prompt 32, new 64, batch 1, steps 16 +agg_tps .* 0\.5[0-9]{2} .* slower$' "$tmp/cb.out" \
    || fail "compare --backends steps 16 row: $(grep 'steps 16' "$tmp/cb.out" | head -1)"
pass "compare --backends: diffusion-like at 16 steps about half AR-like's tokens/s"

# history: session 2 worse than session 1
"$tb" history --backend ar-like "${filter[@]}" --db "$db" >"$tmp/h.out" || fail "history"
grep -qE '^ +2 .* -[23][0-9]\.[0-9]% worse$' "$tmp/h.out" || fail "history does not show session 2 as worse: $(cat "$tmp/h.out")"
pass "history: the slower session worse"

tb_finish
