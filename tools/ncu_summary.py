#!/usr/bin/env python3
"""Per-kernel table of an ncu raw CSV (tests/gpu/profile.sh): launches,
time, DRAM bytes read/written and the bandwidth they imply, grouped by
kernel name (templates and arguments dropped) and grid size (which tells
the GEMVs of one layer apart), largest time first.

    python3 tools/ncu_summary.py profile.csv
"""
import collections
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header is None:  # ncu wrote only its messages ("No kernels were profiled")
        sys.exit(f"{path}: no kernel rows (no 'Kernel Name' header): ncu profiled nothing")
    names = rows[header]
    col = {n: i for i, n in enumerate(names)}
    need = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"]
    missing = [n for n in need[:1] + ["Kernel Name"] if n not in col]
    if missing:
        sys.exit(f"{path}: no column {', '.join(missing)}")
    groups = collections.OrderedDict()
    for r in rows[header + 1:]:
        if len(r) != len(names):
            continue
        t, rd, wr = (number(r[col[n]]) if n in col else None for n in need)
        if t is None:  # the units row
            continue
        name = re.sub(r"^void ", "", r[col["Kernel Name"]])
        name = re.sub(r"[<(].*", "", name)
        if "launch__grid_size" in col:
            name += " grid " + r[col["launch__grid_size"]]
        g = groups.setdefault(name, [0, 0.0, 0.0, 0.0])
        g[0] += 1
        g[1] += t
        g[2] += rd or 0
        g[3] += wr or 0
    total = sum(g[1] for g in groups.values())
    print(f"{'kernel':48s} {'launches':>8s} {'time us':>10s} {'share':>6s} {'read MB':>10s} {'write MB':>9s} {'GB/s':>7s}")
    for name, (n, t, rd, wr) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:48]:48s} {n:8d} {t / 1e3:10.1f} {100 * t / total:5.1f}% {rd / 1e6:10.1f} {wr / 1e6:9.2f} "
              f"{(rd + wr) / t if t else 0:7.0f}")
    rd = sum(g[2] for g in groups.values())
    wr = sum(g[3] for g in groups.values())
    print(f"{'all':48s} {sum(g[0] for g in groups.values()):8d} {total / 1e3:10.1f} {'':6s} {rd / 1e6:10.1f} "
          f"{wr / 1e6:9.2f} {(rd + wr) / total if total else 0:7.0f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
