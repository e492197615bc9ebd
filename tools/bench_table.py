#!/usr/bin/env python3
"""Markdown tables from criterion's saved results (target/criterion), for BENCHMARKS.md and notes.

Usage: python3 tools/bench_table.py [target/criterion]
For every group `<kernel>/<B>B-per-elem` and size: the median ns per element of each backend, its
GB/s (B bytes per element moved once), and its share of the same-traffic copy loop ("% roof" =
copy time / kernel time; above 100% means faster than the copy loop, possible when the data is
cache resident).
"""
import json, os, sys
from collections import defaultdict

root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"
rows = defaultdict(dict)  # (kernel, bytes, size) -> backend -> ns/elem
for dirpath, _, files in os.walk(root):
    if "benchmark.json" not in files or not dirpath.endswith("new"):
        continue
    bench = json.load(open(os.path.join(dirpath, "benchmark.json")))
    est = json.load(open(os.path.join(dirpath, "estimates.json")))
    group, backend, size = bench["group_id"], bench["function_id"], bench["value_str"]
    elems = bench["throughput"]["Elements"]
    if group.count("/") != 1:
        continue  # benches/parallel.rs: tools/scaling_table.py
    kernel, per = group.split("/")
    nbytes = int(per.split("B-")[0])
    rows[(kernel, nbytes, size)][backend] = est["median"]["point_estimate"] / elems

order = ["avx512", "avx2", "neon", "portable", "reference"]
def size_key(s):
    return int(s[:-1]) * (1 << 20 if s.endswith("M") else 1 << 10)

for (kernel, nbytes, size) in sorted(rows, key=lambda k: (k[0], size_key(k[2]))):
    r = rows[(kernel, nbytes, size)]
    roof = r.get("copy-roof")
    cells = []
    # Backends in a fixed order, then anything else (the quantizer groups' "e4m3/reference" ...).
    for b in order + sorted(k for k in r if k not in order and k != "copy-roof"):
        if b in r:
            ns = r[b]
            pct = f", {100 * roof / ns:.0f}% roof" if roof else ""
            cells.append(f"{b} {ns:.3f} ns ({nbytes / ns:.1f} GB/s{pct})")
    roof_s = f"{roof:.3f} ns ({nbytes / roof:.1f} GB/s)" if roof else "-"
    print(f"| {kernel} | {size} | {nbytes} | {roof_s} | " + " | ".join(cells) + " |")
