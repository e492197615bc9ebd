#!/usr/bin/env python3
"""Where the PyTorch package puts a parameter's states within a page, and what it costs: the package's
step (one parameter, one thread) with its states at their slots (`halfstep._SLOT_BYTES` apart, the
default) against all at the parameter's offset in a page (`--slot-bytes 0`, the package before
2026-11-24), each run in a fresh process, the two alternating.

  cargo build --release --features capi
  python tools/state_placement.py --sizes 8388608 16777216 --kernels adamw_f32 adamw_split --runs 4

Per run: ns/param (median of 9 steps after 2) and the pairs of buffers whose lines share an L1 set
and AMD Zen's µtag (address bits 12-27 folded, "Take A Way", Lipp et al. 2020) along at least 15% of
the tensor. Where the buffers lie depends on the process's address-space randomisation, so the
pairs differ from run to run; taskset the command to pin it. Kernels: adamw, sgd (momentum 0.9),
adagrad, lamb; `_f32` all f32, `_split` split weights with bf16 gradients and f32 states.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UTAG_BITS = [(12, 27), (13, 26), (14, 25), (15, 20), (16, 21), (17, 22), (18, 23), (19, 24)]


def utag(a):
    return sum((((a >> x) ^ (a >> y)) & 1) << k for k, (x, y) in enumerate(UTAG_BITS))


def colliding(a, ea, b, eb, n):
    """The share of element positions (2048 sampled) where a[i] and b[i] share set and µtag."""
    idx = range(0, n, max(1, n // 2048))
    hits = sum((((a + i * ea) >> 6) & 63) == (((b + i * eb) >> 6) & 63) and utag(a + i * ea) == utag(b + i * eb)
               for i in idx)
    return hits / len(idx)


def one(kernel, n, slot_bytes):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import halfstep

    halfstep._SLOT_BYTES = slot_bytes
    torch.set_num_threads(1)
    name, layout = kernel.split("_")
    wd = torch.bfloat16 if layout == "split" else torch.float32
    p = torch.nn.Parameter(torch.randn(n).to(wd))
    p.grad = torch.randn(n).to(wd)
    w = "split" if layout == "split" else "fp32"
    make = {"adamw": lambda: halfstep.AdamW([p], lr=1e-3, weights=w, threads=1),
            "sgd": lambda: halfstep.SGD([p], lr=1e-3, momentum=0.9, weights=w, threads=1),
            "adagrad": lambda: halfstep.Adagrad([p], lr=1e-3, weights=w, threads=1),
            "lamb": lambda: halfstep.LAMB([p], lr=1e-3, weights=w, threads=1)}[name]
    opt = make()
    opt.step()
    opt.step()
    bufs = [("p", p), ("g", p.grad)] + list(opt.state[p].items())
    pairs = []
    for i, (na, ta) in enumerate(bufs):
        for nb, tb in bufs[i + 1:]:
            f = colliding(ta.data_ptr(), ta.element_size(), tb.data_ptr(), tb.element_size(), n)
            if f >= 0.15:
                pairs.append(f"{na}-{nb}:{f:.2f}")
    ts = []
    for _ in range(9):
        t0 = time.perf_counter_ns()
        opt.step()
        ts.append(time.perf_counter_ns() - t0)
    print(f"{statistics.median(ts) / n:.3f} {' '.join(pairs) or '-'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 23, 1 << 24, 1 << 25, 1 << 26])
    ap.add_argument("--kernels", nargs="+", default=["adamw_f32", "sgd_f32", "adagrad_f32", "adamw_split",
                                                     "sgd_split", "lamb_split"])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--slot-bytes", type=int, nargs=2, default=[0, 768], metavar=("A", "B"))
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # kernel n slot_bytes: a single run
    args = ap.parse_args()
    if args.one:
        return one(args.one[0], int(args.one[1]), int(args.one[2]))
    print("| kernel | elements | slot bytes | ns/param per run | median | pairs colliding (≥ 15%), per run |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        for k in args.kernels:
            res = {m: [] for m in args.slot_bytes}
            for _ in range(args.runs):
                for m in args.slot_bytes:
                    out = subprocess.run([sys.executable, __file__, "--one", k, str(n), str(m)], check=True,
                                         capture_output=True, text=True).stdout.split()
                    res[m].append((float(out[0]), " ".join(out[1:])))
            for m in args.slot_bytes:
                ts = [t for t, _ in res[m]]
                print(f"| {k} | {n} | {m} | {', '.join(f'{t:.3f}' for t in ts)} | {statistics.median(ts):.3f} | "
                      f"{'; '.join(c for _, c in res[m])} |", flush=True)


if __name__ == "__main__":
    main()
