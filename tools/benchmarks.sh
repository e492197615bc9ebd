#!/usr/bin/env bash
# Regenerates the tables and plots in docs/bench/: the criterion kernel matrix
# (every backend, 4K..64M, 1 and 2 threads, copy-loop roofs), the peers side by side when their
# environment exists (bash ../shared/bench/setup-peers.sh), then tools/bench_report.py.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench kernels
rm -f target/peers.json
peers_python="$HOME/.cache/halfstep-peers/bin/python"
if [ -x "$peers_python" ]; then
  cargo build --release --example step_timer
  "$peers_python" tools/peers_side_by_side.py --threads 1 2 \
    --sizes 4096 65536 1048576 16777216 67108864 --runs 3 --json target/peers.json
else
  echo "no peers' environment at $peers_python: the report has no peer columns" >&2
fi
python3 tools/bench_report.py
