#!/usr/bin/env python3
"""Training quality of stochastic rounding, run to run: the demo's regression problem and a small
character-level language model, trained with bf16 weights and bf16 optimizer states rounded
stochastically, over several SR seeds, next to fp32. Give it two builds of the library (for
example before and after a change of the random-bit generator) and it reports, per build, the
spread over seeds, so that one build's results can be read against the other's run-to-run spread.

    python3 tools/sr_training_check.py --lib philox=OLD.so --lib ars5=NEW.so --seeds 5 --json out.json

Every run of one task starts from the same initial weights and sees the same batches; only the SR
seed (and the build) changes. Each (build, seed) runs in its own process (the package loads one
library per process). Needs torch; the package is imported from python/ beside this file.

- demo: examples/demo.rs's problem (64 features x 512 samples, targets from bf16 weights in [0.5, 2.5],
  weights starting at 1.0, SGD lr 2e-3 momentum 0.9, 3000 steps), through the PyTorch package, so
  with bf16 gradients: the first step with loss below 1e-4 and the final loss.
- lm: a 2-layer transformer (d 128, 4 heads, context 64) on this repository's own text, AdamW
  lr 2e-3, batch 32, `--lm-steps` steps: validation loss (nats per character) on held-out text;
  with `--amsgrad`, AdamW with `amsgrad=True` (fp32 and bf16 SR alike), whose maximum rounds too.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def corpus():
    """This repository's text, in a fixed order: docs, then Rust sources."""
    paths = [os.path.join(ROOT, p) for p in ("README.md", "docs/SPEC.md", "docs/DESIGN.md", "BENCHMARKS.md")]
    for d, _, files in sorted(os.walk(os.path.join(ROOT, "src"))):
        paths += [os.path.join(d, f) for f in sorted(files) if f.endswith(".rs")]
    data = b"".join(open(p, "rb").read() for p in paths if os.path.exists(p))
    return data


def demo_task(torch, halfstep, mode, seed):
    g = torch.Generator().manual_seed(2024)
    features, samples = 64, 512
    w_true = (0.5 + 2.0 * torch.rand(features, generator=g)).to(torch.bfloat16).float()
    x = (torch.rand(samples, features, generator=g) * 2 - 1) * 1.732
    y = x @ w_true
    dtype = torch.float32 if mode == "fp32" else torch.bfloat16
    w = torch.nn.Parameter(torch.ones(features, dtype=dtype))
    if mode == "fp32":
        opt = torch.optim.SGD([w], lr=2e-3, momentum=0.9)
    else:
        opt = halfstep.SGD([w], lr=2e-3, momentum=0.9, weights="bf16", states="bf16", seed=seed)
    losses = []
    for step in range(3001):
        opt.zero_grad()
        err = x @ w.float() - y
        loss = 0.5 * (err * err).mean()
        losses.append(loss.item())
        if step == 3000:
            break
        loss.backward()
        opt.step()
    below = next((k for k, v in enumerate(losses) if v < 1e-4), None)
    return {"first_below_1e-4": below, "final_loss": losses[-1], "loss_at": {k: losses[k] for k in (100, 300, 1000, 3000)}}


def lm_task(torch, halfstep, mode, seed, steps, amsgrad=False):
    data = torch.frombuffer(bytearray(corpus()), dtype=torch.uint8).long()
    split = int(len(data) * 0.9)
    train, val = data[:split], data[split:]
    ctx, batch, d, heads, layers = 64, 32, 128, 4, 2

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

        def forward(self, h, mask):
            a = self.ln1(h)
            h = h + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
            return h + self.mlp(self.ln2(h))

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = torch.nn.Embedding(256, d)
            self.pos = torch.nn.Parameter(torch.randn(ctx, d) * 0.02)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.ln = torch.nn.LayerNorm(d)
            self.head = torch.nn.Linear(d, 256)

        def forward(self, idx):
            t = idx.shape[1]
            mask = torch.triu(torch.full((t, t), float("-inf"), dtype=self.pos.dtype), 1)
            h = self.tok(idx) + self.pos[:t]
            for b in self.blocks:
                h = b(h, mask)
            return self.head(self.ln(h))

    torch.manual_seed(1)
    dtype = torch.float32 if mode == "fp32" else torch.bfloat16
    model = LM().to(dtype)
    if mode == "fp32":
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01, amsgrad=amsgrad)
    else:
        opt = halfstep.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01, weights="bf16", states="bf16",
                             seed=seed, amsgrad=amsgrad)
    g = torch.Generator().manual_seed(7)

    def batch_of(src, gen):
        i = torch.randint(0, len(src) - ctx - 1, (batch,), generator=gen)
        xb = torch.stack([src[j:j + ctx] for j in i])
        yb = torch.stack([src[j + 1:j + ctx + 1] for j in i])
        return xb, yb

    def val_loss():
        vg = torch.Generator().manual_seed(99)
        with torch.no_grad():
            total = 0.0
            for _ in range(16):
                xb, yb = batch_of(val, vg)
                total += torch.nn.functional.cross_entropy(model(xb).float().reshape(-1, 256), yb.reshape(-1)).item()
        return total / 16

    curve = {}
    for step in range(1, steps + 1):
        xb, yb = batch_of(train, g)
        loss = torch.nn.functional.cross_entropy(model(xb).float().reshape(-1, 256), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in (steps // 4, steps // 2, steps):
            curve[step] = val_loss()
    return {"val_loss": curve[steps], "val_curve": curve}


def one(args):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import halfstep
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = {"demo": demo_task(torch, halfstep, args.mode, args.seed),
           "lm": lm_task(torch, halfstep, args.mode, args.seed, args.lm_steps, args.amsgrad)}
    print(json.dumps(out))


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "never"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return (f"median {statistics.median(values):.4g}, range {min(values):.4g} .. {max(values):.4g} "
            f"(sd {statistics.stdev(values):.2g})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", action="append", default=[], help="NAME=PATH of a libhalfstep.so build")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--lm-steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--amsgrad", action="store_true", help="the LM's AdamW with amsgrad=True")
    ap.add_argument("--json")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="sr", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return one(args)
    if not args.lib:
        sys.exit("give at least one --lib NAME=PATH")

    def run(lib, mode, seed):
        env = dict(os.environ, HALFSTEP_LIB=lib)
        cmd = [sys.executable, __file__, "--one", "--mode", mode, "--seed", str(seed),
               "--lm-steps", str(args.lm_steps), "--threads", str(args.threads)]
        cmd += ["--amsgrad"] if args.amsgrad else []
        return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)

    results = {"fp32": [run(args.lib[0].split("=", 1)[1], "fp32", 0)]}
    for spec in args.lib:
        name, path = spec.split("=", 1)
        results[name] = [run(path, "sr", seed) for seed in range(1, args.seeds + 1)]
        print(f"{name}: {args.seeds} seeds done", file=sys.stderr)
    print(f"{args.seeds} SR seeds per build; fp32 is one run (torch.optim, no rounding)\n")
    print("| build | demo: first step with loss < 1e-4 | demo: loss at step 3000 | LM: validation loss "
          f"after {args.lm_steps} steps (nats/char) |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {spread([r['demo']['first_below_1e-4'] for r in runs])} | "
              f"{spread([r['demo']['final_loss'] for r in runs])} | {spread([r['lm']['val_loss'] for r in runs])} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seeds": args.seeds, "lm_steps": args.lm_steps, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
