#!/usr/bin/env python3
"""Grain sweep on the calling thread's pool: `step_timer` for every optimizer, size and grain, the
runs of one row interleaved, the median of `--reps` runs per cell, printed as a Markdown table
(ns/param; the best cell of a row in bold). `1T` is the step on one thread; a number is the grain
given to a calling-thread pool of `--threads` threads; `default` is that pool's own grain.

    cargo build --release --example step_timer
    python3 tools/grain_sweep.py --threads 2 --reps 15 --sizes 32768 49152 65536 131072 \
        --grains 1T 65536 32768 16384 default
"""
import argparse
import statistics
import subprocess

KERNELS = ["sgd", "adagrad", "adam", "lamb", "adamw_f32"]


def run(binary, kernel, size, threads, grain):
    if grain == "1T":
        args = [binary, kernel, str(size), "1"]
    elif grain == "default":
        args = [binary, kernel, str(size), str(threads)]
    else:
        args = [binary, kernel, str(size), str(threads), grain]
    return float(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/examples/step_timer")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sizes", type=int, nargs="+", required=True)
    ap.add_argument("--grains", nargs="+", default=["1T", "65536", "32768", "16384"])
    ap.add_argument("--kernels", nargs="+", default=KERNELS)
    a = ap.parse_args()
    head = " | ".join("1 thread" if g == "1T" else f"grain {g}" for g in a.grains)
    print(f"| optimizer | size | {head} |")
    print("|---|---|" + "---|" * len(a.grains))
    for k in a.kernels:
        for n in a.sizes:
            runs = {g: [] for g in a.grains}
            for _ in range(a.reps):
                for g in a.grains:
                    runs[g].append(run(a.bin, k, n, a.threads, g))
            med = {g: statistics.median(v) for g, v in runs.items()}
            best = min(med.values())
            cells = " | ".join(
                f"**{med[g]:.3f}**" if med[g] == best else f"{med[g]:.3f}" for g in a.grains
            )
            print(f"| {k} | {n // 1024}K | {cells} |", flush=True)


if __name__ == "__main__":
    main()
