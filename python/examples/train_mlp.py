"""Train a small MLP with halfstep's PyTorch optimizers: bf16 weights with stochastic rounding,
Split-SGD-style split weights, and plain fp32, next to torch.optim.AdamW.

    cargo build --release --features capi
    HALFSTEP_LIB=target/release/libhalfstep.so python python/examples/train_mlp.py
"""
import os
import sys

import torch

try:  # the installed package, else the checkout's
    import halfstep
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import halfstep

torch.manual_seed(0)
x = torch.randn(1024, 32)
y = torch.sin(x @ torch.randn(32, 1)) + 0.1 * x[:, :1]


def model(dtype):
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).to(dtype)


def run(name, dtype, make, steps=400):
    m = model(dtype)
    opt = make(m.parameters())
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x.to(dtype)).float(), y)
        loss.backward()
        opt.step()
        if step in (1, 50, 100, 200, 400):
            print(f"  {name:<28} step {step:>4}  loss {loss.item():.5f}")


print(f"halfstep {halfstep.library().hs_version().decode()} on backend "
      f"{halfstep.library().hs_backend().decode()}")
run("torch AdamW fp32", torch.float32, lambda p: torch.optim.AdamW(p, lr=3e-3))
run("halfstep AdamW fp32", torch.float32, lambda p: halfstep.AdamW(p, lr=3e-3))
run("halfstep AdamW bf16 SR", torch.bfloat16,
    lambda p: halfstep.AdamW(p, lr=3e-3, weights="bf16", states="bf16", seed=1))
run("halfstep AdamW bf16 nearest", torch.bfloat16,
    lambda p: halfstep.AdamW(p, lr=3e-3, weights="bf16", rounding="nearest", seed=1))
run("halfstep AdamW split", torch.bfloat16, lambda p: halfstep.AdamW(p, lr=3e-3, weights="split", seed=1))
run("halfstep LAMB split", torch.bfloat16, lambda p: halfstep.LAMB(p, lr=1e-2, weights="split", seed=1))
