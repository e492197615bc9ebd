"""halfstep as DeepSpeed's CPU optimizer: ZeRO stage 2 with the optimizer offloaded to the CPU.

DeepSpeed keeps the fp32 master weights and optimizer states on the CPU and calls the client
optimizer's `step()` on them; with `"zero_force_ds_cpu_optimizer": false` that optimizer can be
halfstep's. `states="bf16"` halves the optimizer states' memory (stochastic rounding keeps them
unbiased).

    pip install . deepspeed
    python python/examples/zero_offload.py [--states fp32|bf16] [--steps 20]

Needs a CUDA GPU (ZeRO-Offload moves the optimizer off the GPU) and DeepSpeed. It trains a small
GPT-style model on random tokens and prints the loss and the time of `engine.step()` per step.
"""

import argparse
import os
import time

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29512")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import halfstep  # noqa: E402

# The DeepSpeed configuration: ZeRO stage 2, optimizer states and step on the CPU, and a client
# optimizer that is not DeepSpeed's own.
CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 2,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "contiguous_gradients": True,
    },
    "zero_allow_untested_optimizer": True,
    "zero_force_ds_cpu_optimizer": False,
    "steps_per_print": 10**9,
}


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, d, layers, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        mask = torch.triu(torch.ones(t, t, device=idx.device, dtype=torch.bool), 1)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=512)
    a = ap.parse_args()

    import deepspeed

    vocab, ctx = 8192, 256
    torch.manual_seed(0)
    model = GPT(vocab, ctx, a.d, a.layers, heads=8)
    # The parameters DeepSpeed hands the optimizer are fp32 CPU partitions: weights="fp32".
    opt = halfstep.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, states=a.states, seed=1)
    engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=CONFIG)
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, vocab, (16, ctx + 1), generator=gen)
    for step in range(a.steps):
        batch = data[torch.randint(0, 16, (CONFIG["train_micro_batch_size_per_gpu"],), generator=gen)]
        batch = batch.to(engine.device)
        logits = engine(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, vocab), batch[:, 1:].reshape(-1))
        engine.backward(loss)
        torch.cuda.synchronize()
        t = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        print(f"step {step:3d}  loss {loss.item():.4f}  engine.step() {1e3 * (time.perf_counter() - t):.1f} ms")


if __name__ == "__main__":
    main()
