# parts.sh — sourced by the tests/gpu/run_*.sh scripts, which run several
# parts in one device call (tests, suites, peers) and go on past a failed
# one: each part's exit status is recorded, and parts_exit ends the script
# with 1 when any part failed or skipped (77: a GPU test that found no
# device, or missing data; on the GPU machine every part must run), so a
# failure is never reported as a pass.
failed_parts=()

# part_status NAME STATUS: print "NAME exit STATUS" and record it
part_status() {
    echo "$1 exit $2"
    case $2 in 0) ;; 77) failed_parts+=("$1 (skipped)") ;; *) failed_parts+=("$1 ($2)") ;; esac
}

# parts_exit: the script's end
parts_exit() {
    if [ ${#failed_parts[@]} -gt 0 ]; then
        echo "FAILED: ${failed_parts[*]}"
        exit 1
    fi
    echo "every part exited 0"
    exit 0
}
