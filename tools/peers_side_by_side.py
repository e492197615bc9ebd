#!/usr/bin/env python3
"""halfstep next to the peers it replaces, in one process: IPEX's split-weight fused optimizer
kernels and PyTorch's fused CPU optimizers (all f32), each timed here (median of 5 batches, ns per
parameter), and halfstep's equivalent step timed right after it by examples/step_timer.rs with the
same schedule. Prints a markdown table with the ratio peer / halfstep (> 1: halfstep is faster).

Needs torch; the IPEX rows also need IPEX (`bash ../shared/bench/setup-peers.sh`: torch 2.8 + IPEX
2.8). Without IPEX only the PyTorch rows run (the 16-core Xeon host has torch but no IPEX).
  cargo build --release --example step_timer
  ~/.cache/halfstep-peers/bin/python tools/peers_side_by_side.py --threads 1 2 --sizes 65536 1048576 67108864 --runs 3
With `--json FILE` the rows are also written to FILE for tools/bench_report.py (peer columns and plot marks).
`--timer PATH` runs another step_timer binary (one built here and carried to another machine).
`--floor PATH` also times a floor binary with step_timer's command line after each row (for `lamb`:
examples/lamb_traffic_floor.rs: the bytes, square roots and divisions any LAMB needs, and nothing else), and adds its column and
peer / floor: where that is under 2, no LAMB on this machine can be twice as fast as the peer.
step_timer inherits the environment: with `STEP_TIMER_PAGE_OFFSETS=64,64,832,1600,3136` halfstep's buffers
lie where its PyTorch package puts them (each state at its own slot in the weight's page; BENCHMARKS.md's history,
"Peers at 64M with halfstep's buffers where its package puts them"); by default one after another.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402

try:
    import intel_extension_for_pytorch  # noqa: E402,F401  (registers torch.ops.torch_ipex)
    HAVE_IPEX = True
except ImportError:
    HAVE_IPEX = False

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMER = os.path.join(ROOT, "target", "release", "examples", "step_timer")


def median_ns_per_param(fn, n):
    reps = max(3, min(200, int(2e8 // n)))
    fn()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t) / reps)
    return statistics.median(times) * 1e9 / n


def peers(n):
    """(halfstep kernel, peer name, peer step) for each row, with the peer's buffers made here."""
    w = torch.randn(n) * 0.02
    g32 = w * 0.05
    rows = ipex_rows(n, w, g32) if HAVE_IPEX else []
    # PyTorch's fused CPU kernels (torch.optim's fused=True), all f32: halfstep's `_f32` rows.
    for kernel in TORCH_F32_ROWS:
        name, step = torch_f32_step(kernel, w.clone(), g32, torch.zeros(n), torch.zeros(n))
        rows.append((kernel, name, step))
    return rows


TORCH_F32_ROWS = ("sgd_f32", "adagrad_f32", "adam_f32", "adamw_f32")


def torch_f32_step(kernel, w, g, s0, s1):
    """(peer name, step) of PyTorch's fused kernel for halfstep's `kernel` row on these f32 buffers,
    with step_timer's hyperparameters: `s0` is the momentum / first moment, `s1` the Adagrad sum /
    second moment."""
    step_t = torch.tensor(1.0)
    if kernel == "sgd_f32":
        return ("torch._fused_sgd_ (f32, momentum)",
                lambda: torch._fused_sgd_([w], [g], [s0], weight_decay=1e-4, momentum=0.9, lr=0.01,
                                          dampening=0.0, nesterov=False, maximize=False, is_first_step=False))
    if kernel == "adagrad_f32":
        return ("torch._fused_adagrad_ (f32)",
                lambda: torch._fused_adagrad_([w], [g], [s1], [step_t], lr=0.01, lr_decay=0.0,
                                              weight_decay=1e-4, eps=1e-10, maximize=False))
    if kernel in ("adam_f32", "adamw_f32"):
        fused = torch._fused_adamw_ if kernel == "adamw_f32" else torch._fused_adam_
        return (f"torch.{fused.__name__} (f32)",
                lambda: fused([w], [g], [s0], [s1], [], [step_t], amsgrad=False, lr=1e-2, beta1=0.9,
                              beta2=0.999, weight_decay=1e-2, eps=1e-8, maximize=False))
    raise ValueError(kernel)


def ipex_rows(n, w, g32):
    """IPEX's split-weight rows: bf16 top + trail weights, bf16 grads, f32 state."""
    ops = torch.ops.torch_ipex
    g16 = g32.bfloat16()

    def split():
        return ops.split_float_bfloat16(w.clone())

    rows = []
    top, trail = split()
    mom = torch.zeros(n)
    rows.append(("sgd", "IPEX sgd_fused_step (split, bf16 grad, momentum)",
                 lambda: ops.sgd_fused_step(top, g16, mom, trail, 0.9, 0.01, 1e-4, 0.0, False)))
    top2, trail2 = split()
    acc = torch.zeros(n)
    rows.append(("adagrad", "IPEX adagrad_fused_step (split, bf16 grad)",
                 lambda: ops.adagrad_fused_step(top2, g16, acc, trail2, 1, 0.01, 1e-4, 0.0, 1e-10)))
    top3, trail3 = split()
    m3, v3 = torch.zeros(n), torch.zeros(n)
    rows.append(("adam", "IPEX adam_fused_step (split, bf16 grad)",
                 lambda: ops.adam_fused_step(top3, m3, v3, torch.zeros(0), g16, trail3, False, 1, 0.9, 0.999,
                                             0.01, 1e-2, 1e-8)))
    top4, trail4 = split()
    m4, v4 = torch.zeros(n), torch.zeros(n)
    rows.append(("lamb", "IPEX lamb_fused_step (split, bf16 grad)",
                 lambda: ops.lamb_fused_step(top4, m4, v4, g16, trail4, 1, 0.9, 0.999, 0.01, 1e-4, 1e-6)))
    return rows


def timed(binary, kernel, n, threads):
    """What a binary with step_timer's command line prints for this row (ns per parameter, or `-`)."""
    out = subprocess.run([binary, kernel, str(n), str(threads)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def ours(timer, kernel, n, threads):
    return float(timed(timer, kernel, n, threads))


def floor(binary, kernel, n, threads):
    """The floor binary's ns per parameter for this row, or None (no binary, or no floor for it)."""
    if not binary:
        return None
    text = timed(binary, kernel, n, threads)
    return None if text == "-" else float(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 16, 1 << 20, 1 << 26])
    ap.add_argument("--runs", type=int, default=1,
                    help="sweep this many times back to back; each cell is the median over the runs")
    ap.add_argument("--kernels", nargs="+",
                    help="only these rows (sgd adagrad adam lamb: IPEX; sgd_f32 adagrad_f32 adam_f32 adamw_f32)")
    ap.add_argument("--timer", default=TIMER, help="the step_timer binary (default: this tree's release build)")
    ap.add_argument("--floor", help="a floor binary with step_timer's command line (prints - for no floor)")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    cells = {}  # (threads, elements, kernel) -> (peer name, [peer ns], [halfstep ns], [floor ns])
    for run in range(a.runs):
        for t in a.threads:
            torch.set_num_threads(t)
            for n in a.sizes:
                for kernel, name, step in peers(n):
                    if a.kernels and kernel not in a.kernels:
                        continue
                    p = median_ns_per_param(step, n)
                    h = ours(a.timer, kernel, n, t)
                    f = floor(a.floor, kernel, n, t)
                    fl = f" floor {f:.3f}" if f is not None else ""
                    print(f"run {run + 1}: {kernel} {n} {t}T peer {p:.3f} halfstep {h:.3f} ({p / h:.2f}x){fl}",
                          file=sys.stderr, flush=True)
                    c = cells.setdefault((t, n, kernel), (name, [], [], []))
                    c[1].append(p)
                    c[2].append(h)
                    if f is not None:
                        c[3].append(f)
    rows = []
    print(f"torch {torch.__version__}, halfstep backend from HALFSTEP_BACKEND or detection, "
          f"median of {a.runs} run(s)\n")
    head = "| kernel | peer | elements | threads | peer ns/param | halfstep ns/param | peer / halfstep |"
    rule = "|---|---|---|---|---|---|---|"
    if a.floor:
        head += " floor ns/param (runs) | peer / floor |"
        rule += "---|---|"
    print(head)
    print(rule)
    for (t, n, kernel), (name, ps, hs, fs) in cells.items():
        p, h = statistics.median(ps), statistics.median(hs)
        line = f"| {kernel} | {name} | {n} | {t} | {p:.3f} | {h:.3f} | {p / h:.2f}x |"
        row = {"kernel": kernel, "peer": name, "elements": n, "threads": t,
               "peer_ns": p, "halfstep_ns": h, "runs": a.runs}
        if a.floor:
            if fs:
                f = statistics.median(fs)
                each = ", ".join(f"{x:.3f}" for x in fs)
                line += f" {f:.3f} ({each}) | {p / f:.2f}x |"
                row["floor_ns"] = f
            else:
                line += " - | - |"
        print(line)
        rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "runs": a.runs, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
