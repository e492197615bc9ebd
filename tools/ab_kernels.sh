#!/bin/bash
# A/B two builds of the criterion kernel bench, alternating them run by run so that both see the
# same machine state, and print each row's median (µs) over the runs.
#
#   tools/ab_kernels.sh OLD_BIN NEW_BIN REGEX [RUNS]
#
# Build the binaries with `cargo bench --bench kernels --no-run` before and after a change and copy
# target/release/deps/kernels-<hash> away each time. HALFSTEP_BENCH_SIZES / _THREADS as for the bench
# (default here: 64K and 64M on one thread).
set -euo pipefail
old=$1 new=$2 regex=$3 runs=${4:-5}
export HALFSTEP_BENCH_SIZES=${HALFSTEP_BENCH_SIZES:-65536,67108864}
export HALFSTEP_BENCH_THREADS=${HALFSTEP_BENCH_THREADS:-1}
for _ in $(seq "$runs"); do
  for tag in old new; do
    bin=$old; [ "$tag" = new ] && bin=$new
    "$bin" --bench "$regex" --noplot 2>&1 | awk -v b="$tag" '
      /^[a-z_0-9]+\//{name=$1}
      /time:/{ if ($0 ~ /\[/ && $0 !~ /%/) { sub(/.*\[/, ""); print b, name, $3, $4 } }'
  done
done | python3 -c '
import collections, statistics, sys
unit = {"ns": 1e-3, "µs": 1.0, "us": 1.0, "ms": 1e3, "s": 1e6}
runs = collections.defaultdict(list)
for line in sys.stdin:
    tag, name, value, u = line.split()
    runs[name, tag].append(float(value) * unit[u])
print("| kernel | old µs | new µs | new / old |")
print("|---|---|---|---|")
for name in sorted({n for n, _ in runs}):
    o, n = statistics.median(runs[name, "old"]), statistics.median(runs[name, "new"])
    print(f"| {name} | {o:.2f} | {n:.2f} | {n / o:.2f} |")
'
