#!/usr/bin/env python3
"""A/B two builds of the criterion kernel bench, alternating them run by run so that both see the
same machine state, and print each row's median over the runs (criterion's median estimate, read
from its estimates.json by bench_report.load, as in the benchmark tables).

    tools/ab_kernels.py OLD_BIN NEW_BIN REGEX [RUNS]

Build the binaries with `cargo bench --bench kernels --no-run` before and after a change and copy
target/release/deps/kernels-<hash> away each time. HALFSTEP_BENCH_SIZES / _THREADS as for the bench
(default here: 64K and 64M on one thread).

    tools/ab_kernels.py --per-row OLD_BIN NEW_BIN KERNEL[,KERNEL...] [RUNS]

Per row instead: each kernel's row (one size, from HALFSTEP_BENCH_SIZES, default 64K; one thread;
backend AB_BACKEND, default avx2) timed by short criterion runs of the two builds back to back,
in turn first, RUNS times; prints the median and the fastest run of each. On a host whose speed
drifts over minutes this keeps the two builds' runs of a row seconds apart; read the fastest runs
where the medians of rows that did not change move too.
"""
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import label_of, load  # noqa: E402


def per_row():
    import re
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    bins = {"old": sys.argv[2], "new": sys.argv[3]}
    rows = sys.argv[4].split(",")
    runs = int(sys.argv[5]) if len(sys.argv) == 6 else 8
    n = int(os.environ.get("HALFSTEP_BENCH_SIZES", "65536").split(",")[0])
    backend = os.environ.get("AB_BACKEND", "avx2")
    env = dict(os.environ, HALFSTEP_BENCH_SIZES=str(n), HALFSTEP_BENCH_THREADS="1")
    time_re = re.compile(r"time:\s+\[\S+ \S+ ([\d.]+) (\S+) ")
    unit = {"ns": 1, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
    ns = {}
    for run in range(runs):
        for row in rows:
            order = list(bins.items()) if run % 2 == 0 else list(bins.items())[::-1]
            for tag, binary in order:
                out = subprocess.run([binary, "--bench", f"^{row}/[^/]*/{backend}/{label_of(n)}x1T$",
                                      "--noplot", "--measurement-time", "1", "--warm-up-time", "0.3",
                                      "--sample-size", "20"], env=env, capture_output=True, text=True,
                                     check=True).stdout
                m = time_re.search(out)
                if m:
                    ns.setdefault((row, tag), []).append(float(m.group(1)) * unit[m.group(2)] / n)
    print(f"| kernel ({backend}, {label_of(n)}, 1 thread) | old: median (fastest) | new: median (fastest) "
          "| new / old, medians | new / old, fastest |")
    print("|---|---|---|---|---|")
    for row in rows:
        o, w = ns.get((row, "old"), [float("nan")]), ns.get((row, "new"), [float("nan")])
        mo, mw = statistics.median(o), statistics.median(w)
        print(f"| {row} | {mo:.3f} ({min(o):.3f}) | {mw:.3f} ({min(w):.3f}) | {mw / mo:.2f} | "
              f"{min(w) / min(o):.2f} |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--per-row":
        return per_row()
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    bins = {"old": sys.argv[1], "new": sys.argv[2]}
    regex, runs = sys.argv[3], int(sys.argv[4]) if len(sys.argv) == 5 else 5
    env = dict(os.environ)
    env.setdefault("HALFSTEP_BENCH_SIZES", "65536,67108864")
    env.setdefault("HALFSTEP_BENCH_THREADS", "1")
    ns = {}  # (kernel, n, t, backend, tag) -> [ns/elem per run]
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            for tag, binary in bins.items():
                home = os.path.join(tmp, f"{tag}-{run}")  # one criterion dir per run: no baseline mixing
                subprocess.run([binary, "--bench", regex, "--noplot"], check=True,
                               env=dict(env, CRITERION_HOME=home), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                for kernel, k in load(home).items():
                    for (n, t), cell in k["cells"].items():
                        for backend, v in cell.items():
                            ns.setdefault((kernel, n, t, backend, tag), []).append(v)
            # The table so far after every round, so that a run cut short by a time limit still
            # reports (the last table printed is the result).
            print(f"after {run + 1} of {runs} runs:")
            print("| kernel | backend | size | threads | old ns/elem | new ns/elem | new / old |")
            print("|---|---|---|---|---|---|---|")
            for kernel, n, t, backend in sorted({key[:4] for key in ns}):
                o = statistics.median(ns.get((kernel, n, t, backend, "old"), [float("nan")]))
                w = statistics.median(ns.get((kernel, n, t, backend, "new"), [float("nan")]))
                print(f"| {kernel} | {backend} | {label_of(n)} | {t} | {o:.3f} | {w:.3f} | {w / o:.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
