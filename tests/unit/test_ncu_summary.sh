#!/usr/bin/env bash
# tools/ncu_summary.py (tests/gpu/profile.sh's tables) on made-up ncu raw
# CSVs: kernels grouped by name (template arguments and parameters
# dropped) and grid, times summed in µs, the units row skipped, DRAM
# columns optional, and a file with no kernel rows refused by name.
set -euo pipefail
src=${2:-$(dirname "$0")/../..}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat >"$tmp/time.csv" <<'EOT'
==PROF== Connected to process 1 (bench_tp)
"ID","Kernel Name","launch__grid_size","gpu__time_duration.sum"
"","","","nsecond"
"0","void k_gemv<2, 4, false, 1, false>(const __nv_bfloat16 *, float *)","512","14,272"
"1","k_rmsnorm(const float *, int, int)","1","5,312"
"2","void k_gemv<2, 4, false, 1, false>(const __nv_bfloat16 *, float *)","512","37,024"
"3","void k_gemv<2, 4, true, 1, false>(const __nv_bfloat16 *, float *)","3,584","58,080"
EOT
out=$(python3 "$src/tools/ncu_summary.py" "$tmp/time.csv")
echo "$out"
grep -Eq '^k_gemv grid 512 +2 +51\.3 ' <<<"$out" || fail "the two 512-block GEMVs: 2 launches, 51.3 us"
grep -Eq '^k_gemv grid 3,584 +1 +58\.1 ' <<<"$out" || fail "the 3,584-block GEMV apart"
grep -Eq '^k_rmsnorm grid 1 +1 +5\.3 ' <<<"$out" || fail "k_rmsnorm"
grep -Eq '^all +4 +114\.7 ' <<<"$out" || fail "the sum: 4 launches, 114.7 us"
[ "$(echo "$out" | sed -n 2p | cut -c1-6)" = "k_gemv" ] || fail "largest time first"
# with DRAM bytes: GB/s = bytes / ns
cat >"$tmp/bytes.csv" <<'EOT'
"ID","Kernel Name","launch__grid_size","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"
"","","","byte","byte","nsecond"
"0","k_gemv(const __nv_bfloat16 *)","768","50,000,000","0","16,000"
EOT
out=$(python3 "$src/tools/ncu_summary.py" "$tmp/bytes.csv")
echo "$out"
grep -Eq '^k_gemv grid 768 +1 +16\.0 .* 50\.0 .* 3125$' <<<"$out" || fail "50 MB in 16 us = 3125 GB/s"
# nothing profiled: a clear refusal, not a traceback
printf '==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n' >"$tmp/none.csv"
if python3 "$src/tools/ncu_summary.py" "$tmp/none.csv" >"$tmp/none.out" 2>&1; then
    fail "an empty profile accepted"
fi
grep -q "none.csv: no kernel rows" "$tmp/none.out" || fail "refusal names the file: $(cat "$tmp/none.out")"
grep -q Traceback "$tmp/none.out" && fail "traceback on an empty profile"
echo "ncu_summary: ok"
