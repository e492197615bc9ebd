"""halfstep as DeepSpeed's CPU optimizer under ZeRO stage 2 with the optimizer offloaded, on
DeepSpeed's CPU accelerator (gloo): DeepSpeed hands halfstep.AdamW its fp32 partitions and steps
them through `engine.step()`, each partition with random bits of its own, and a run resumed from
DeepSpeed's checkpoint continues bit for bit. Skipped where DeepSpeed is not installed (CI
installs it).
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    os.environ["DS_ACCELERATOR"] = "cpu"
    states, port, mode, checkpoints, seed = sys.argv[1:6]
    for k, v in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK="0", LOCAL_RANK="0",
                     WORLD_SIZE="1").items():
        os.environ[k] = v
    import torch, deepspeed
    import halfstep
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
    # Two groups, as DeepSpeed users make them (weights decayed, biases not): ZeRO steps each
    # group's partition with `param_groups` set to that group alone.
    decayed = [p for p in model.parameters() if p.dim() > 1]
    kept = [p for p in model.parameters() if p.dim() <= 1]
    opt = halfstep.AdamW([{"params": decayed, "weight_decay": 0.01}, {"params": kept, "weight_decay": 0.0}],
                         lr=1e-2, states=states, seed=int(seed))
    config = {"train_micro_batch_size_per_gpu": 16, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
              "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              "steps_per_print": 10**9}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 64, generator=g), torch.randn(16, 8, generator=g)
    # "run": 20 steps, with DeepSpeed's checkpoint saved after the 10th; "resume": that
    # checkpoint loaded, then steps 11 to 20.
    if mode == "resume":
        engine.load_checkpoint(checkpoints, tag="step10")
    losses = []
    for i in range(10 if mode == "resume" else 20):
        loss = torch.nn.functional.mse_loss(engine(x.to(torch.bfloat16)).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        if mode == "run" and i == 9:
            engine.save_checkpoint(checkpoints, tag="step10")
    inner = engine.optimizer.optimizer
    # The fp32 master weights and every state tensor, as bits.
    digest = hashlib.sha256()
    for group in inner.param_groups:
        for p in group["params"]:
            digest.update(p.detach().float().numpy().tobytes())
            for k, v in sorted(inner.state[p].items()):
                if torch.is_tensor(v):
                    digest.update(k.encode() + v.detach().float().numpy().tobytes())
    steps = sorted({int(st["step"]) for st in inner.state.values()})
    print("RESULT " + json.dumps({"optimizer": type(inner).__module__ + "." + type(inner).__name__,
                                  "losses": losses, "steps": steps, "seed": inner.seed,
                                  "streams": sorted(inner._streams.values()),
                                  "digest": digest.hexdigest(),
                                  "params": [str(p.dtype) for g in inner.param_groups for p in g["params"]]}))
""")


@unittest.skipUnless(importlib.util.find_spec("deepspeed"), "DeepSpeed is not installed")
class ZeroOffload(unittest.TestCase):
    def run_script(self, states, port, mode, checkpoints, seed):
        # DeepSpeed builds its shared-memory collective op on first use with ninja, which the
        # virtualenv's bin holds.
        path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        out = subprocess.run([sys.executable, "-c", SCRIPT, states, port, mode, checkpoints, str(seed)],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PATH": path, "PYTHONWARNINGS": "ignore"})
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        self.assertEqual(out.returncode, 0, out.stdout[-3000:] + out.stderr[-3000:])
        self.assertTrue(lines, out.stdout[-3000:])
        return json.loads(lines[-1][len("RESULT "):])

    def test_zero_stage2_offload_steps_with_halfstep_and_resumes_bit_for_bit(self):
        for states, port in (("fp32", 29541), ("bf16", 29542)):
            with tempfile.TemporaryDirectory() as checkpoints:
                r = self.run_script(states, str(port), "run", checkpoints, 1)
                self.assertEqual(r["optimizer"], "halfstep.AdamW")
                # DeepSpeed steps fp32 master partitions, one per group; every one of them took all 20
                # steps, with a stream id of its own (the same id for both would round both with the
                # same bits).
                self.assertEqual(r["params"], ["torch.float32"] * 2)
                self.assertEqual(r["steps"], [20])
                self.assertEqual(r["streams"], [0, 1])
                self.assertLess(r["losses"][-1], 0.1 * r["losses"][0], f"{states}: {r['losses']}")
                # Resumed from the 10th step's checkpoint by an optimizer built with another seed: the
                # checkpoint brings back the seed and the steps, and steps 11 to 20 give the same
                # losses, weights and states, bit for bit (the bf16 states' random bits included).
                q = self.run_script(states, str(port + 10), "resume", checkpoints, 2)
                self.assertEqual(q["seed"], 1)
                self.assertEqual(q["steps"], [20])
                self.assertEqual(q["streams"], [0, 1])
                self.assertEqual(q["losses"], r["losses"][10:], states)
                self.assertEqual(q["digest"], r["digest"], states)


if __name__ == "__main__":
    unittest.main()
