#!/usr/bin/env bash
# Measures tokbench's own overhead with suites/overhead.ini (null backend,
# zero delays) and prints, per case: emissions per call, the cost of one
# emission (generate() wall / emissions: host->emit plus the null plugin's
# loop), the runner's time around each call in the worker, and the
# runner's per-case cost outside the calls (process round trip, metrics,
# statistics, one SQLite transaction).
# usage: tools/overhead.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
db=$(mktemp -u /tmp/tokbench-overhead.XXXXXX.db)
trap 'rm -f "$db" "$db-wal" "$db-shm"' EXIT
"$build/tokbench" run suites/overhead.ini --db "$db" >/dev/null
sqlite3 -header -column "$db" "
SELECT c.max_new_tokens AS new, c.batch,
       avg(s.n_emissions) AS emissions_per_call,
       round(avg(1.0 * s.wall_ns / s.n_emissions), 1) AS ns_per_emission,
       round(avg(s.runner_ns) / 1000.0, 1) AS runner_us_per_call,
       round((c.case_wall_ns - (SELECT sum(wall_ns) FROM sample WHERE case_id = c.id)) / 1e6, 2)
           AS case_overhead_ms
FROM bench_case c JOIN sample s ON s.case_id = c.id AND s.warmup = 0
GROUP BY c.id ORDER BY c.ordinal"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
