#!/usr/bin/env python3
"""Markdown tables from benches/parallel.rs's criterion results, for BENCHMARKS.md and notes.

Usage: python3 tools/scaling_table.py [target/criterion | results.txt ...]
(results.txt: lines "<group>/<function>/<value> <time> <unit>", as printed on a machine where
criterion's files could not be kept: the point estimate criterion prints. With several files,
each a run of the same benchmarks, every time is the median over the runs, and a last column
lists each run's own "scaling vs copy", so the spread between runs is in the table.)
Scaling: per optimizer and workload, one row per thread count: median ns per parameter, GB/s
(B bytes per parameter moved once), the same-traffic copy loop on the same pool (the faster of its plain and
prefetching forms), "% roof" (copy time / kernel time), for the optimizers that divide the same loop with
their square root and division per element and "% floor" (its time / kernel time), the speedup over 1 thread of kernel and copy loop, and their ratio ("scaling
vs copy": 1.0 means the kernel scales exactly as well as the memory allows).
Grain: calling thread vs pool per step size.
"""
import json, os, statistics, sys
from collections import defaultdict

roots = sys.argv[1:] or ["target/criterion"]
scal = defaultdict(dict)  # (opt, bytes, workload) -> threads -> {fn: ns/elem}
runs = []  # with several result files: one such dict per file
grain = defaultdict(dict)  # size -> fn -> ns/elem
UNITS = {"ns": 1, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}

def gpt2_params():
    d, vocab, ctx = 768, 50257, 1024
    return vocab * d + ctx * d + 12 * (d + d + 3 * d * d + 3 * d + d * d + d + d + d + 4 * d * d + 4 * d + 4 * d * d + d) + 2 * d

def elements(workload):
    if workload == "gpt2":
        return gpt2_params()
    return int(workload[:-1]) * (1 << 20 if workload.endswith("M") else 1 << 10)

def results(root):
    if os.path.isfile(root):
        for line in open(root):
            name, t, unit = line.split()
            parts = name.split("/")
            group, fn, val = "/".join(parts[:-2]), parts[-2], parts[-1]
            wl = parts[2]
            yield group, fn, val, float(t) * UNITS[unit] / elements(wl)
        return
    for dirpath, _, files in os.walk(root):
        if "benchmark.json" not in files or not dirpath.endswith("new"):
            continue
        bench = json.load(open(os.path.join(dirpath, "benchmark.json")))
        if "Elements" not in (bench.get("throughput") or {}):
            continue  # benches/kernels.rs results (bytes throughput) share the folder
        est = json.load(open(os.path.join(dirpath, "estimates.json")))
        yield (bench["group_id"], bench["function_id"], bench["value_str"],
               est["median"]["point_estimate"] / bench["throughput"]["Elements"])

samples = defaultdict(list)
for root in roots:
    run = defaultdict(dict)
    for group, fn, val, ns in results(root):
        parts = group.split("/")
        if parts[0] == "grain":
            grain[parts[2]][f"{fn} {val}"] = ns
        elif len(parts) == 3:
            opt, per, wl = parts
            key = (opt, int(per.split("B-")[0]), wl)
            run[key].setdefault(int(val[:-1]), {})[fn] = ns
            samples[(key, int(val[:-1]), fn)].append(ns)
    runs.append(run)
for (key, t, fn), v in samples.items():
    scal[key].setdefault(t, {})[fn] = statistics.median(v)

def wl_key(w):
    return (1, 0) if w == "gpt2" else (0, int(w[:-1]) * (1 << 20 if w.endswith("M") else 1 << 10))

def roof_of(r):
    """The roof: the faster of the copy loops (plain and prefetching) timed on that pool."""
    roofs = [v for f, v in r.items() if f.startswith("copy-roof")]
    return min(roofs) if roofs else None

def kernel_of(r):
    return next((v for f, v in r.items() if not f.startswith(("copy-roof", "divider-floor"))), None)

def floor_of(r):
    """The copy loop with the optimizer's square roots and divisions (optimizers that divide)."""
    return r.get("divider-floor")

def scaling(rows, t):
    """Kernel speedup over the fewest threads divided by the roof's, or None."""
    if t not in rows:
        return None
    base, r = rows[min(rows)], rows[t]
    try:
        return (kernel_of(base) / kernel_of(r)) / (roof_of(base) / roof_of(r))
    except (TypeError, ZeroDivisionError):
        return None

many = len(roots) > 1
if scal:
    print("| optimizer | workload | threads | ns/param | GB/s | copy loop ns/param | % roof | divider floor ns/param | % floor | speedup | copy speedup | scaling vs copy |"
          + (" each run |" if many else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if many else ""))
for (opt, nb, wl) in sorted(scal, key=lambda k: (k[0], wl_key(k[2]))):
    rows = scal[(opt, nb, wl)]
    base = rows.get(min(rows))
    for t in sorted(rows):
        r = rows[t]
        roof, k = roof_of(r), kernel_of(r)
        if k is None:
            continue
        base_k, base_roof = kernel_of(base), roof_of(base)
        speed = base_k / k if base_k else float("nan")
        cspeed = base_roof / roof if roof and base_roof else float("nan")
        print(f"| {opt} | {wl} | {t} | {k:.3f} | {nb / k:.1f} | "
              + (f"{roof:.3f} | {100 * roof / k:.0f}% | " if roof else "- | - | ")
              + (f"{fl:.3f} | {100 * fl / k:.0f}% | " if (fl := floor_of(r)) else "- | - | ")
              + f"{speed:.2f}x | {cspeed:.2f}x | {speed / cspeed:.2f} |"
              + (" " + ", ".join(f"{x:.2f}" if (x := scaling(run[(opt, nb, wl)], t)) else "-"
                                for run in runs) + " |" if many else ""))
if grain:
    print()
    print("| step size | " + " | ".join(sorted(next(iter(grain.values())))) + " |")
    print("|---" * (1 + len(next(iter(grain.values())))) + "|")
    for size in sorted(grain, key=lambda s: int(s[:-1])):
        print(f"| {size} | " + " | ".join(f"{grain[size][f]:.3f} ns" for f in sorted(grain[size])) + " |")
