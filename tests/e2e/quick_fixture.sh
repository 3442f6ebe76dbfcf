#!/usr/bin/env bash
# The quick.ini fixture: suites/quick.ini (the default suite, the README's
# first command: the trained small models, 324 s alone on the 2 cores
# of 2026-12-07's development VM) run once per
# `meson test` that selects it (the suites quick and slow: ./dev.sh test
# and CI; the default `meson test` leaves it and its readers out) for
# every test that checks its results (test_run.sh, test_report.sh,
# test_report_browser.sh, test_tables.sh, test_spec_quick.sh), not once
# in each.
#
#   quick_fixture.sh run BUILD_DIR SOURCE_DIR
#
# The meson test quick_fixture (tests/e2e/meson.build: first by priority).
# Runs the suite into BUILD_DIR/tests/quick-fixture/quick.db and keeps its
# stdout (quick.out), stderr (quick.err), exit status (quick.rc), the
# prompts it ran (prompts.jsonl), and the sha256 of every input
# (inputs.sha256: tokbench, the ar, diffusion and flow plugins, the suite,
# its prompt set, the four models). quick.db is put in place only when the
# run exited 0; the test fails otherwise.
#
# With TB_QUICK_EVERY=N (N > 1: the sanitizer build, tests/meson.build)
# it runs every Nth prompt of the set instead (every task and the text,
# every case and code path of the suite, a tenth of the work: the whole
# set took ~12-20 min under ASan on 2 cores). The consumers check what
# holds for any prompt set there, and the figures' claims (accuracy,
# perplexity against the docs), which need the whole set, in the normal
# build: the same numbers, without the sanitizer's slowdown.
#
#   quick_fixture.sh check BUILD_DIR SOURCE_DIR
#
# For a consumer: first waits for a fixture of this build that is still
# running (`meson test` starts the fixture first, beside the other tests,
# and its consumers last: the process is there by the time they ask);
# then prints the path of quick.db and exits 0 when the fixture ran,
# succeeded and its inputs are those of this build; else prints why (the
# run's status and the end of its stderr; or that it never ran; or which
# input changed since) and exits 1. A consumer fails then, it never skips;
# `meson test run` alone (the fixture not selected) uses the last one
# while it is current.
set -uo pipefail

usage() { echo "usage: quick_fixture.sh run|check BUILD_DIR SOURCE_DIR" >&2; exit 2; }
[ $# = 3 ] || usage
mode=$1
build=$(cd "$2" 2>/dev/null && pwd) || { echo "quick_fixture.sh: no folder $2"; exit 2; }
src=$(cd "$3" 2>/dev/null && pwd) || { echo "quick_fixture.sh: no folder $3"; exit 2; }
dir=$build/tests/quick-fixture
suite=$src/suites/quick.ini
# 1: every prompt of quick.jsonl; N: every Nth (a sanitizer build:
# TB_QUICK_EVERY in tests/meson.build's environment)
every=${TB_QUICK_EVERY:-1}

# Every input of the run, one path a line. The models and the prompt set
# are the ones quick.ini names (checked by the run itself: a missing one
# fails it, and so fails this list's sha256sum).
inputs() {
    printf '%s\n' "$build/tokbench" "$build/plugins/ar/ar.so" "$build/plugins/diffusion/diffusion.so" \
        "$build/plugins/flow/flow.so" "$suite" "$src/suites/data/quick.jsonl"
    find "$src/models/small-llama" "$src/models/small-llada" "$src/models/small-flow" "$src/models/small-sdar" -type f | sort
}

# wait_for_run: until no `quick_fixture.sh run` of this build is running.
# Found in the process table, not through a file it writes: meson spawns
# the fixture before its consumers, so it is there however soon they ask.
wait_for_run() {
    local f pid cmd
    for f in /proc/[0-9]*/cmdline; do
        pid=${f#/proc/}
        pid=${pid%/cmdline}
        mapfile -d '' cmd 2>/dev/null <"$f" || continue
        # bash .../quick_fixture.sh run BUILD_DIR SOURCE_DIR
        [ "${#cmd[@]}" -ge 5 ] && [ "${cmd[1]##*/}" = quick_fixture.sh ] && [ "${cmd[2]}" = run ] || continue
        [ "$(cd "${cmd[3]}" 2>/dev/null && pwd)" = "$build" ] || continue
        # the process's end is the event; meson's timeout is the backstop
        # (a zombie has ended: meson reaps it when it gets to it)
        while [ -e "/proc/$pid" ] && [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)" != Z ]; do
            sleep 0.5
        done
    done
}

case $mode in
run)
    rm -rf "$dir"
    mkdir -p "$dir" || exit 1
    inputs | xargs -d '\n' sha256sum >"$dir/inputs.sha256" || { echo "FAIL: an input is missing"; exit 1; }
    echo "$every" >"$dir/every"
    # quick.ini as it is but for three things, in a copy beside the
    # prompts: its relative paths made absolute, its prompt file ours
    # (every Nth prompt of the set, each task's and the text's, where
    # every > 1), and one thread a backend (threads = 1): meson test runs
    # the fixture beside another test on a 2-core machine, where
    # OpenBLAS's idle workers spin on sched_yield against that test (the
    # flow rows took 2.5x as long as on one thread: 69 s against 27 on
    # one loaded core). The figures the consumers check do not depend on
    # the thread count (sgemm does not split the sum over K).
    if [ "$every" = 1 ]; then
        cp "$src/suites/data/quick.jsonl" "$dir/prompts.jsonl"
    else
        awk -v n="$every" '(NR - 1) % n == 0' "$src/suites/data/quick.jsonl" >"$dir/prompts.jsonl"
    fi
    run_suite=$dir/quick-run.ini
    # (model = and draft_model = lines: every model path the suite names)
    sed -e "s|^\(draft_\)\{0,1\}model = \.\./models/|\1model = $src/models/|" \
        -e "s|^file = data/quick\.jsonl|file = $dir/prompts.jsonl|" \
        -e "s/^threads = 0\( \|$\)/threads = 1\1/" "$suite" >"$run_suite"
    want=$(grep -c "^\(draft_\)\{0,1\}model = \.\./models/\|^file = data/quick\.jsonl\|^threads = 0\( \|$\)" "$suite")
    [ "$want" -ge 5 ] && [ "$(grep -c "^\(draft_\)\{0,1\}model = $src/models/\|^file = $dir/prompts.jsonl\|^threads = 1\( \|$\)" "$run_suite")" = "$want" ] \
        && [ "$(grep -c "^threads" "$run_suite")" = "$(grep -c "^threads = 1\( \|$\)" "$run_suite")" ] \
        || { echo "FAIL: quick.ini's model, prompt or threads lines changed: $run_suite"; exit 1; }
    "$build/tokbench" run "$run_suite" --db "$dir/quick.db.partial" >"$dir/quick.out" 2>"$dir/quick.err"
    rc=$?
    echo "$rc" >"$dir/quick.rc"
    cat "$dir/quick.out"
    if [ "$rc" != 0 ]; then
        echo "FAIL: tokbench run $suite exited $rc; its stderr ends:"
        tail -n 30 "$dir/quick.err"
        exit 1
    fi
    if [ -e "$dir/quick.db.partial-wal" ]; then
        echo "FAIL: the run exited 0 but left a write-ahead log behind"
        exit 1
    fi
    mv "$dir/quick.db.partial" "$dir/quick.db" || exit 1
    echo "quick.ini fixture: $dir/quick.db"
    ;;
check)
    wait_for_run
    if [ ! -s "$dir/quick.db" ]; then
        if [ -f "$dir/quick.rc" ]; then
            echo "the quick.ini fixture failed: tokbench run exited $(cat "$dir/quick.rc"); its stderr ends:"
            tail -n 30 "$dir/quick.err" 2>/dev/null | sed 's/^/    /'
        else
            echo "the quick.ini fixture never ran in $build (meson test quick_fixture)"
        fi
        exit 1
    fi
    if ! changed=$(cd / && sha256sum --check --quiet "$dir/inputs.sha256" 2>&1) \
        || [ "$(inputs)" != "$(cut -c67- "$dir/inputs.sha256")" ]; then
        echo "the quick.ini fixture is stale, its inputs changed since it ran (meson test quick_fixture): ${changed:-the list of model files}"
        exit 1
    fi
    if [ "$(cat "$dir/every" 2>/dev/null)" != "$every" ]; then
        echo "the quick.ini fixture ran every $(cat "$dir/every" 2>/dev/null) prompts, this build wants every $every (meson test quick_fixture)"
        exit 1
    fi
    echo "$dir/quick.db"
    ;;
*) usage ;;
esac
