"""halfstep as DeepSpeed's CPU optimizer under ZeRO stage 2 with the optimizer offloaded, on
DeepSpeed's CPU accelerator (gloo): DeepSpeed hands halfstep.AdamW its fp32 partitions and steps
them through `engine.step()`. Skipped where DeepSpeed is not installed (CI installs it).
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import unittest

SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["DS_ACCELERATOR"] = "cpu"
    for k, v in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", LOCAL_RANK="0",
                     WORLD_SIZE="1").items():
        os.environ[k] = v
    import torch, deepspeed
    import halfstep
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
    opt = halfstep.AdamW(model.parameters(), lr=1e-2, states=sys.argv[1], seed=1)
    config = {"train_micro_batch_size_per_gpu": 16, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
              "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              "steps_per_print": 10**9}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 64, generator=g), torch.randn(16, 8, generator=g)
    losses = []
    for _ in range(20):
        loss = torch.nn.functional.mse_loss(engine(x.to(torch.bfloat16)).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    inner = engine.optimizer.optimizer
    steps = sorted({int(st["step"]) for st in inner.state.values()})
    print("RESULT " + json.dumps({"optimizer": type(inner).__module__ + "." + type(inner).__name__,
                                  "losses": losses, "steps": steps,
                                  "params": [str(p.dtype) for g in inner.param_groups for p in g["params"]]}))
""")


@unittest.skipUnless(importlib.util.find_spec("deepspeed"), "DeepSpeed is not installed")
class ZeroOffload(unittest.TestCase):
    def test_zero_stage2_offload_steps_with_halfstep(self):
        for states, port in (("fp32", "29541"), ("bf16", "29542")):
            # DeepSpeed builds its shared-memory collective op on first use with ninja, which the
            # virtualenv's bin holds.
            path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
            out = subprocess.run([sys.executable, "-c", SCRIPT, states, port], capture_output=True, text=True,
                                 timeout=600, env={**os.environ, "PATH": path, "PYTHONWARNINGS": "ignore"})
            lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            self.assertEqual(out.returncode, 0, out.stdout[-3000:] + out.stderr[-3000:])
            self.assertTrue(lines, out.stdout[-3000:])
            r = json.loads(lines[-1][len("RESULT "):])
            self.assertEqual(r["optimizer"], "halfstep.AdamW")
            # DeepSpeed steps fp32 master partitions; every one of them took all 20 steps.
            self.assertEqual(set(r["params"]), {"torch.float32"})
            self.assertEqual(r["steps"], [20])
            self.assertLess(r["losses"][-1], 0.1 * r["losses"][0], f"{states}: {r['losses']}")


if __name__ == "__main__":
    unittest.main()
