"""fp32 halfstep optimizers against torch.optim, weight by weight (README.md, "From PyTorch").

Run from the checkout: `python tools/torch_agreement.py` (the installed package, else python/).
"""

import os
import sys

import torch

try:
    import halfstep
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import halfstep

N = 1 << 16


def run(cls, kw, steps):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(N))
    opt = cls([p], **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        p.grad = torch.randn(N, generator=g) * 0.1
        opt.step()
    return p.detach()


def ulps(a, b):
    """|a - b| in units in the last place (on the monotone integer line of f32 patterns)."""
    def line(x):
        i = x.view(torch.int32).long()
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)
    return (line(a) - line(b)).abs()


def main():
    torch.set_num_threads(1)
    cases = [("AdamW", torch.optim.AdamW, halfstep.AdamW, dict(lr=1e-3, weight_decay=0.01)),
             ("Adam", torch.optim.Adam, halfstep.Adam, dict(lr=1e-3)),
             ("Adagrad", torch.optim.Adagrad, halfstep.Adagrad, dict(lr=1e-2)),
             ("SGD momentum", torch.optim.SGD, halfstep.SGD, dict(lr=1e-2, momentum=0.9)),
             ("SGD nesterov wd", torch.optim.SGD, halfstep.SGD,
              dict(lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-4)),
             ("SGD", torch.optim.SGD, halfstep.SGD, dict(lr=1e-2))]
    print(f"| optimizer | steps | bit-identical | within 1 ulp | within 4 ulps | max abs difference |")
    print("|---|---|---|---|---|---|")
    for name, theirs, ours, kw in cases:
        for steps in (1, 10, 100):
            a, b = run(theirs, kw, steps), run(ours, kw, steps)
            u = ulps(a, b)
            pct = [float((u <= k).float().mean()) * 100 for k in (0, 1, 4)]
            print(f"| {name} | {steps} | {pct[0]:.1f}% | {pct[1]:.1f}% | {pct[2]:.1f}% | "
                  f"{float((a - b).abs().max()):.2e} |")


if __name__ == "__main__":
    main()
