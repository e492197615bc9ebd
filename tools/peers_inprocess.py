#!/usr/bin/env python3
"""halfstep and PyTorch's fused CPU optimizers alternated in one process, on torch tensors.

tools/peers_side_by_side.py times halfstep in a separate process right after each peer; on a shared
host whose speed drifts by tens of percent from one second to the next, that puts the drift into the
ratio. Here one Python process owns both sides' buffers (torch tensors) and alternates a batch of
peer steps with a batch of halfstep steps (through the C ABI, ctypes, arguments built once)
`--alternations` times. Each side's figure is the median of its batches;
the ratio is the median of the per-alternation ratios peer / halfstep (> 1: halfstep is faster).
Rows are the all-f32 ones PyTorch has: sgd_f32 (momentum), adagrad_f32, adam_f32, adamw_f32.

  cargo build --release --features capi
  python tools/peers_inprocess.py --threads 1 2 --sizes 65536 1048576 67108864 [--lib PATH] [--json FILE]

Where the buffers lie changes both sides' speed: on Sapphire Rapids, buffers 64 bytes past a multiple
of 1 MiB apart (consecutive tensors from glibc's heap) made both steps 2-3x slower (BENCHMARKS.md's history). By
default every buffer starts a page after the end of the one before, each side on its own weights and
states (`--alloc arena`); `--alloc arena --gap 64` reproduces the heap's layout, `--alloc torch` lets
torch place each tensor, `--page-offsets` places each buffer in a page, `--show-offsets` prints them.

halfstep's teams have the calling thread in them (hs_threads_calling_thread), as OpenMP's team has
its master; OpenMP reads its thread count at start-up, so with more than one count above 1 each count
runs in a process of its own (its own table; `--json FILE` then writes FILE.<threads>). `--grains` times one
halfstep row per grain of that pool (hs_threads_set_grain), all against the same peer batches.

halfstep's overhead per call through ctypes (printed: ~3 us on a Zen 1 VM, against ~0.2 us for the
same call from Rust) is counted in its figures, as PyTorch's dispatch is in the peer's.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import halfstep as hs  # noqa: E402  (the ctypes structs and the loaded library)
from peers_side_by_side import torch_f32_step  # noqa: E402  (the peer rows, written once)


def ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def f32(t):
    return hs.Buffer(hs.HS_F32, 0, ptr(t), None)


NONE = hs.Buffer(hs.HS_F32, 0, None, None)


class Row:
    """One update: the peer's step and halfstep's step on buffers of their own."""

    def __init__(self, kernel, n, pool, swap=False, layout=("arena", 4096)):
        lib = hs.library()
        w = torch.randn(n) * 0.02
        self.kernel, self.n, self.pool = kernel, n, pool
        # Step 2, not 1: step 1 of SGD with momentum only copies the gradient into the buffer,
        # and the peer's row is a later step (is_first_step=False).
        self.ctx = hs.StepContext(1, 2, hs.HS_REPLICA_IDENTICAL)
        self.ctx_ref = ctypes.byref(self.ctx)
        how = layout[0]
        if how == "arena":
            # The seven buffers (shared grads; each side's weights and two states) back to back in
            # one allocation, each `gap` bytes after the end of the one before, from a page
            # boundary. A gap of 64 is what consecutive tensors under 32 MiB get from glibc's heap.
            gap = layout[1]
            stride = (4 * n + gap) // 4
            buf = torch.empty(7 * stride + 1024)
            first = (4096 - buf.data_ptr() % 4096) % 4096 // 4
            slots = iter(range(7))

            def at(t, k):
                start = first + next(slots) * stride
                return buf[start:start + n].copy_(t)
        elif how == "page":
            # Each buffer in an allocation of its own, at a chosen byte offset within a 4 KiB page
            # (weights, grads, state 0, state 1), the same on both sides.
            def at(t, k):
                buf = torch.empty(n + 2048)
                start = ((4096 - buf.data_ptr() % 4096) % 4096 + layout[1][k]) // 4
                return buf[start:start + n].copy_(t)
        elif how == "numpy":
            # numpy's allocator (malloc: 16 bytes past a page for large arrays), shared with torch.
            import numpy as np

            def at(t, k):
                return torch.from_numpy(t.numpy().copy())
        else:
            # torch's allocator, tensor after tensor, wherever it puts them.
            def at(t, k):
                return t.clone()
        zeros = torch.zeros(n)
        self.g = at(w * 0.05, 1)
        self.hw = at(w, 0)
        self.hs_states = [at(zeros, 2), at(zeros, 3)]
        states = [NONE, NONE, NONE]
        pw, s = at(w, 0), [at(zeros, 2), at(zeros, 3)]
        # Byte offsets within a page of each side's weights, grads and states.
        self.offsets = [[t.data_ptr() % 4096 for t in ts] for ts in
                        ([pw, self.g] + s, [self.hw, self.g] + self.hs_states)]
        if swap:
            # Each side steps the buffers allocated for the other: an effect of where the buffers
            # landed then moves to the other side, an effect of the code stays.
            self.hw, pw = pw, self.hw
            self.hs_states, s = s, self.hs_states
        g = self.g
        self.peer_name, self.peer = torch_f32_step(kernel, pw, g, s[0], s[1])
        # halfstep's row with step_timer's hyperparameters (the peer's above).
        if kernel == "sgd_f32":
            cfg, fn = hs.SgdConfig(0.01, 0.9, 0.0, 1e-4, 0, 0), lib.hs_sgd_step
            states[0] = f32(self.hs_states[0])
        elif kernel == "adagrad_f32":
            cfg, fn = hs.AdagradConfig(0.01, 0.0, 1e-4, 1e-10, 0.0, 0), lib.hs_adagrad_step
            states[0] = f32(self.hs_states[1])
        elif kernel in ("adam_f32", "adamw_f32"):
            decoupled = kernel == "adamw_f32"
            cfg, fn = hs.AdamConfig(1e-2, 0.9, 0.999, 1e-8, 1e-2, int(decoupled), 0, 0), lib.hs_adam_step
            states[0], states[1] = f32(self.hs_states[0]), f32(self.hs_states[1])
        else:
            raise ValueError(kernel)
        self.cfg = cfg
        self.arr = (hs.Tensor * 1)(hs.Tensor(n, f32(self.hw), f32(g), (hs.Buffer * 3)(*states), 0, 0))
        # Arguments built once and the step number fixed (every step does the same work): the
        # call is one ctypes call, its overhead printed by `call_overhead`.
        cfg_ref, ctx_ref, arr = ctypes.byref(cfg), self.ctx_ref, self.arr
        hs._check(fn(cfg_ref, ctx_ref, arr, 1, pool), kernel)
        # The step on a handle: `pool`, or another grain of the same pool (`--grains`).
        self.ours_on = lambda other: (lambda: fn(cfg_ref, ctx_ref, arr, 1, other))
        self.ours = self.ours_on(pool)


def batch(fn, reps):
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def call_overhead(pool):
    """us per halfstep call through ctypes on a 16-element SGD step (the kernel itself: ~0.1 us)."""
    r = Row("sgd_f32", 16, pool)
    return min(batch(r.ours, 20000) for _ in range(5)) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 16, 1 << 20, 1 << 26])
    ap.add_argument("--kernels", nargs="+", default=["sgd_f32", "adagrad_f32", "adam_f32", "adamw_f32"])
    ap.add_argument("--alternations", type=int, default=7)
    ap.add_argument("--lib", help="libhalfstep.so (default: $HALFSTEP_LIB or target/release)")
    ap.add_argument("--swap", action="store_true", help="each side steps the buffers allocated for the other")
    ap.add_argument("--alloc", choices=["arena", "torch", "numpy"], default="arena",
                    help="where both sides' buffers lie: arena (default), one allocation, --gap bytes "
                         "between buffers; torch, a tensor each, wherever torch's allocator puts it; numpy")
    ap.add_argument("--gap", type=int, default=4096, metavar="BYTES",
                    help="--alloc arena: bytes from the end of one buffer to the next (a multiple of 64)")
    ap.add_argument("--page-offsets", metavar="W,G,S0,S1",
                    help="instead of --alloc: a buffer each, the weights, grads and states at these byte "
                         "offsets within a 4 KiB page")
    ap.add_argument("--show-offsets", action="store_true",
                    help="print each row's buffers' byte offsets within a page (peer; halfstep)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--grains", type=int, nargs="+", metavar="ELEMENTS",
                    help="on more than one thread, one halfstep row per grain (hs_threads_set_grain), "
                         "each on its own handle to the same pool, all alternated with the same peer "
                         "batches (default: the pool's own grain)")
    a = ap.parse_args()
    if a.lib:
        os.environ["HALFSTEP_LIB"] = a.lib
    if a.page_offsets:
        place = [int(x) for x in a.page_offsets.split(",")]
        if len(place) != 4 or any(x % 64 or not 0 <= x < 4096 for x in place):
            ap.error("--page-offsets: four multiples of 64 below 4096")
        layout = ("page", place)
    else:
        if a.gap % 64 or a.gap < 0:
            ap.error("--gap: a multiple of 64")
        layout = (a.alloc, a.gap)
    pooled = [t for t in a.threads if t > 1]
    if len(pooled) > 1:
        # OpenMP's team keeps the size it started with: one process per thread count above 1, each
        # with its own table.
        for t in a.threads:
            args = [x for x in sys.argv[1:]]
            i = args.index("--threads")
            j = i + 1
            while j < len(args) and not args[j].startswith("--"):
                j += 1
            args[i:j] = ["--threads", str(t)]
            if a.json:
                k = args.index("--json")
                args[k + 1] = f"{a.json}.{t}"
            subprocess.run([sys.executable, os.path.abspath(__file__)] + args, check=True)
        return
    lib = hs.library()
    one = lib.hs_threads_new(1)
    overhead = call_overhead(ctypes.c_void_p(one))
    lib.hs_threads_free(ctypes.c_void_p(one))
    print(f"torch {torch.__version__}, halfstep {lib.hs_version().decode()} backend {lib.hs_backend().decode()}, "
          f"{a.alternations} alternations; halfstep's ctypes call: {overhead:.2f} us on a 16-element step, "
          "counted in its figures\n")
    print("| kernel | peer | elements | threads | peer ns/param | halfstep ns/param | peer / halfstep "
          "(median of ratios; min–max) |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for t in a.threads:
        torch.set_num_threads(t)
        pool = lib.hs_threads_new(1) if t == 1 else lib.hs_threads_calling_thread(t)
        if not pool:
            raise SystemExit(f"hs_threads: {lib.hs_last_error().decode()}")
        grains = [(None, pool)]
        if t > 1 and a.grains:
            grains = []
            for g in a.grains:
                h = lib.hs_threads_calling_thread(t)
                hs._check(lib.hs_threads_set_grain(ctypes.c_void_p(h), g), "hs_threads_set_grain")
                grains.append((g, h))
        for n in a.sizes:
            reps = max(3, min(200, int(2e8 // n)))
            for kernel in a.kernels:
                r = Row(kernel, n, ctypes.c_void_p(pool), a.swap, layout)
                ours = [r.ours_on(ctypes.c_void_p(h)) for _, h in grains]
                r.peer()
                for f in ours:
                    f()
                ps, hs_ = [], [[] for _ in grains]
                for _ in range(a.alternations):
                    ps.append(batch(r.peer, reps) * 1e9 / n)
                    for f, times in zip(ours, hs_):
                        times.append(batch(f, reps) * 1e9 / n)
                p = statistics.median(ps)
                for (g, _), times in zip(grains, hs_):
                    ratios = sorted(p_ / h_ for p_, h_ in zip(ps, times))
                    h = statistics.median(times)
                    name = kernel if g is None else f"{kernel} grain {g}"
                    print(f"| {name} | {r.peer_name} | {n} | {t} | {p:.3f} | {h:.3f} | "
                          f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}–{ratios[-1]:.2f}) |"
                          + (f" page offsets {r.offsets[0]}; {r.offsets[1]}" if a.show_offsets else ""),
                          flush=True)
                    rows.append({"kernel": kernel, "grain": g, "peer": r.peer_name, "elements": n, "threads": t,
                                 "peer_ns": p, "halfstep_ns": h, "ratios": ratios})
                del r
        for _, h in grains:
            if h != pool:
                lib.hs_threads_free(ctypes.c_void_p(h))
        lib.hs_threads_free(ctypes.c_void_p(pool))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "alternations": a.alternations, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
