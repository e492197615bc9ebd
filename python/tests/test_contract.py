"""What every step checks, and what halfstep's optimizers share with torch.optim.

Each misuse below either raises ValueError naming the parameter before anything is written (the
parameters and states keep their bits) or behaves as torch.optim does.
"""

import copy
import ctypes
import os
import pickle
import re
import sys
import unittest

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

try:  # the installed package, else the checkout's
    import halfstep
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import halfstep

torch.set_num_threads(1)

CHECKOUT = os.path.join(os.path.dirname(__file__), "..", "..")
HEADER = os.path.join(CHECKOUT, "include", "halfstep.h")

# halfstep fuses each update with FMAs (SPEC.md §6) where torch.optim rounds every operation, so
# fp32 parameters drift a few ulps apart per step; after the steps of these tests they agree to
# this absolute tolerance (the parameters are O(0.1-1)).
ATOL = 2e-5


def snapshot(opt, params):
    """Every parameter and state tensor's bits."""
    out = [p.detach().clone() for p in params]
    for st in opt.state.values():
        out += [v.clone() for v in st.values() if isinstance(v, torch.Tensor)]
    return out


def same_bits(a, b):
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape
        and torch.equal(x.view(torch.int16) if x.element_size() == 2 else x,
                        y.view(torch.int16) if y.element_size() == 2 else y) for x, y in zip(a, b))


def stepped(opt, params, grads):
    for p, g in zip(params, grads):
        p.grad = g
    opt.step()


class EveryStepChecks(unittest.TestCase):
    """Changes made after the optimizer was built are caught on the next step, before any write."""

    def refuse(self, opt, params, pattern):
        before = snapshot(opt, params)
        with self.assertRaisesRegex(ValueError, pattern):
            opt.step()
        self.assertTrue(same_bits(before, snapshot(opt, params)), "a refused step wrote")

    def fresh(self, make=halfstep.AdamW, n=4096, **kw):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(n)), torch.nn.Parameter(torch.randn(64, 64))]
        opt = make(params, lr=1e-2, **kw)
        stepped(opt, params, [torch.randn(n), torch.randn(64, 64)])
        return opt, params

    def test_model_changes_dtype(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 4))
        opt = halfstep.AdamW(model.parameters(), lr=1e-2)
        model(torch.randn(8, 32)).square().mean().backward()
        opt.step()
        model.to(torch.bfloat16)
        model(torch.randn(8, 32, dtype=torch.bfloat16)).float().square().mean().backward()
        self.refuse(opt, list(model.parameters()), r"parameter 0 \(\(32, 32\) torch.bfloat16.*needs torch.float32")

    def test_add_param_group_of_another_dtype(self):
        opt, params = self.fresh()
        bf16 = torch.nn.Parameter(torch.randn(1000).bfloat16())
        with self.assertRaisesRegex(ValueError, r"parameter 2 .*torch.bfloat16"):
            opt.add_param_group({"params": [bf16]})
        self.assertEqual(len(opt.param_groups), 1)
        opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(10))]})  # a fitting one is added

    def test_resized_parameter(self):
        for make in (halfstep.AdamW, halfstep.SGD, halfstep.Adagrad, halfstep.LAMB):
            kw = {"momentum": 0.9} if make is halfstep.SGD else {}
            opt, params = self.fresh(make, **kw)
            params[0].data = torch.randn(8192)
            params[0].grad = torch.randn(8192)
            self.refuse(opt, params, r"parameter 0 .*state .* 4096 .*8192|parameter 0 .*needs 8192")

    def test_short_or_retyped_gradient(self):
        opt, params = self.fresh()
        for g in [torch.randn(16), torch.randn(4096, dtype=torch.float64), torch.randn(4096).half(),
                  torch.randn(4, 1024)]:
            params[0].grad = torch.randn(4096)
            params[0].grad.data = g  # `.data` skips torch's own check of the gradient
            self.refuse(opt, params, r"parameter 0 .*has a gradient of")

    def test_channels_last_and_transposed(self):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(3, 8, 3)
        opt = halfstep.SGD(conv.parameters(), lr=0.1)
        conv.to(memory_format=torch.channels_last)
        conv(torch.randn(2, 3, 8, 8)).sum().backward()
        self.refuse(opt, list(conv.parameters()), "parameter 0 .*not contiguous")
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            halfstep.SGD([torch.nn.Parameter(torch.randn(4, 6).t())], lr=0.1)
        opt, params = self.fresh(halfstep.SGD)
        with self.assertRaisesRegex(ValueError, "parameter 2 .*not contiguous"):
            opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(5, 7).t())]})

    def test_retyped_in_place(self):
        # The same memory under another dtype: only the dtype tells the step that something changed.
        opt, params = self.fresh()
        params[0].data = params[0].data.view(torch.bfloat16)[:4096]  # same address and shape
        self.refuse(opt, params, r"parameter 0 .*torch.bfloat16.*needs torch.float32")
        opt, params = self.fresh()
        exp_avg = opt.state[params[1]]["exp_avg"]
        exp_avg.data = exp_avg.data.view(torch.int32)
        self.refuse(opt, params, r"parameter 1 .*state 'exp_avg'")

    def test_step_count_past_float32_range(self):
        opt, params = self.fresh()
        for p in params:
            opt.state[p]["step"].fill_(2 ** 24 - 1)  # in place: the tensor the last step read
        self.refuse(opt, params, r"would take step 16777216")

    def test_sparse_gradient(self):
        emb = torch.nn.Embedding(10, 4, sparse=True)
        opt = halfstep.Adagrad(emb.parameters(), lr=0.1)
        emb(torch.tensor([1, 2])).sum().backward()
        self.refuse(opt, list(emb.parameters()), "sparse gradient")

    def test_buffers_that_share_memory(self):
        opt, params = self.fresh()
        g = torch.randn(4096)
        params[0].grad = g
        params[1].grad = g[:4096].view(64, 64)  # the same memory for two parameters' gradients
        self.refuse(opt, params, "share memory")
        params[1].grad = torch.randn(64, 64)
        params[0].grad = params[0].data  # a gradient that is its own parameter
        self.refuse(opt, params, "share memory")

    def test_state_replaced(self):
        opt, params = self.fresh()
        opt.state[params[1]]["exp_avg"] = torch.zeros(10)
        self.refuse(opt, params, r"parameter 1 .*state 'exp_avg'")
        opt, params = self.fresh()
        opt.state[params[1]]["exp_avg_sq"].data = torch.zeros(10)  # the same tensor object
        self.refuse(opt, params, r"parameter 1 .*state 'exp_avg_sq'")

    def test_gradients_that_share_memory_across_groups(self):
        torch.manual_seed(0)
        a, b = torch.nn.Parameter(torch.randn(4096)), torch.nn.Parameter(torch.randn(4096))
        opt = halfstep.AdamW([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=1e-2)
        for _ in range(2):
            stepped(opt, [a, b], [torch.randn(4096), torch.randn(4096)])
        g = torch.randn(4096)
        a.grad, b.grad = g, g  # one call per group: no single call sees both
        self.refuse(opt, [a, b], "share memory")
        a.grad, b.grad = torch.randn(4096), opt.state[a]["exp_avg"]
        self.refuse(opt, [a, b], "share memory")


class RepeatedSteps(unittest.TestCase):
    """A step whose parameters, states and gradient kinds are those of the step before reuses that
    step's descriptors (the gradients' addresses rewritten) after checking that they still hold."""

    def test_same_bits_as_steps_checked_from_scratch(self):
        for make, kw in [(halfstep.AdamW, dict(weights="split", states="bf16")),
                         (halfstep.SGD, dict(momentum=0.9, weights="bf16")),
                         (halfstep.Adagrad, dict(states="bf16")),
                         (halfstep.LAMB, dict())]:
            runs, checked = [], []
            for from_scratch in (False, True):
                torch.manual_seed(4)
                dtype = torch.float32 if kw.get("weights", "fp32") == "fp32" else torch.bfloat16
                params = [torch.nn.Parameter(torch.randn(n).to(dtype)) for n in (300, 4096, 77)]
                opt = make([{"params": params[:2]}, {"params": params[2:], "lr": 5e-3}], lr=1e-2, **kw)
                count = [0]
                scratch = opt._step_checked
                opt._step_checked = lambda: (count.__setitem__(0, count[0] + 1), scratch())
                for k in range(6):
                    for i, p in enumerate(params):  # new gradients each step, as zero_grad(set_to_none) gives
                        p.grad = None if (k == 3 and i == 2) else torch.randn(p.shape).to(dtype)
                    if from_scratch:
                        opt._plan = None
                    opt.step()
                runs.append(snapshot(opt, params))
                checked.append(count[0])
            self.assertTrue(same_bits(*runs), make.__name__)
            # Checked from scratch: the first step, and the two whose gradients differ in presence from the step before.
            self.assertEqual(checked, [3, 6], make.__name__)


class Hooks(unittest.TestCase):
    def test_step_hooks_and_the_profiler_range(self):
        p = torch.nn.Parameter(torch.randn(8))
        opt = halfstep.SGD([p], lr=0.1)
        seen = []
        handles = [opt.register_step_pre_hook(lambda o, a, k: seen.append("pre")),
                   opt.register_step_post_hook(lambda o, a, k: seen.append("post")),
                   register_optimizer_step_pre_hook(lambda o, a, k: seen.append("global pre")),
                   register_optimizer_step_post_hook(lambda o, a, k: seen.append("global post"))]
        p.grad = torch.ones(8)
        opt.step()
        self.assertEqual(seen, ["global pre", "pre", "post", "global post"])
        for h in handles:
            h.remove()
        # A pre-hook may replace the arguments: here it supplies a closure, whose loss step returns.
        h = opt.register_step_pre_hook(lambda o, a, k: ((o,), {"closure": lambda: 7.0}))
        self.assertEqual(opt.step(), 7.0)
        h.remove()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            opt.step()
        self.assertIn("Optimizer.step#SGD.step", [e.name for e in prof.events()])
        self.assertTrue(getattr(halfstep.SGD.step, "hooked", False))


class Hyperparameters(unittest.TestCase):
    """Checked at construction and in add_param_group, as torch.optim does."""

    def test_bad_values_fail_at_construction(self):
        p = [torch.nn.Parameter(torch.randn(4))]
        for make, kw in [(halfstep.AdamW, dict(lr=-1.0)), (halfstep.AdamW, dict(betas=(1.5, 0.9))),
                         (halfstep.AdamW, dict(eps=-1e-8)), (halfstep.SGD, dict(momentum=-0.5)),
                         (halfstep.SGD, dict(nesterov=True)), (halfstep.Adagrad, dict(lr_decay=-1.0)),
                         (halfstep.LAMB, dict(weight_decay=-0.1)), (halfstep.AdamW, dict(seed=-1)),
                         (halfstep.AdamW, dict(seed=2 ** 64)), (halfstep.AdamW, dict(replica=-1)),
                         (halfstep.AdamW, dict(replica=65535)), (halfstep.AdamW, dict(threads=0))]:
            with self.assertRaises(ValueError, msg=f"{make.__name__} {kw}"):
                make(p, **kw)
        opt = halfstep.AdamW(p)
        with self.assertRaises(ValueError):
            opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(3))], "lr": float("nan")})
        self.assertEqual(len(opt.param_groups), 1)

    def test_torch_switches(self):
        p = [torch.nn.Parameter(torch.randn(4))]
        for make in (halfstep.SGD, halfstep.Adagrad, halfstep.Adam, halfstep.AdamW, halfstep.LAMB):
            make(p, foreach=None, fused=None, differentiable=False)
            make(p, foreach=False, fused=True)
            for bad in (dict(foreach=True), dict(fused=False), dict(differentiable=True)):
                with self.assertRaisesRegex(ValueError, "not supported", msg=f"{make.__name__} {bad}"):
                    make(p, **bad)
        for make in (halfstep.Adam, halfstep.AdamW):
            make(p, capturable=False)
            with self.assertRaisesRegex(ValueError, "capturable"):
                make(p, capturable=True)

    def test_adam_decoupled_weight_decay_is_adamw(self):
        def run(make, **kw):
            torch.manual_seed(1)
            p = torch.nn.Parameter(torch.randn(300))
            opt = make([p], lr=1e-2, weight_decay=0.1, **kw)
            for _ in range(3):
                stepped(opt, [p], [torch.randn(300)])
            return p.detach()

        self.assertTrue(torch.equal(run(halfstep.Adam, decoupled_weight_decay=True), run(halfstep.AdamW)))
        self.assertFalse(torch.equal(run(halfstep.Adam), run(halfstep.AdamW)))

    def test_lamb_maximize_steps_the_negated_gradient(self):
        def run(maximize, sign):
            torch.manual_seed(1)
            p = torch.nn.Parameter(torch.randn(300))
            opt = halfstep.LAMB([p], lr=1e-2, maximize=maximize)
            for _ in range(3):
                g = torch.randn(300)
                stepped(opt, [p], [sign * g])
            return p.detach()

        self.assertTrue(torch.equal(run(True, 1.0), run(False, -1.0)))
        self.assertFalse(torch.equal(run(True, 1.0), run(False, 1.0)))


class PerParameterStep(unittest.TestCase):
    """Each parameter counts its own steps (`state["step"]`), as torch.optim does."""

    def test_late_parameters_match_torch(self):
        for torch_cls, ours, kw in [(torch.optim.AdamW, halfstep.AdamW, dict(lr=1e-2, weight_decay=0.05)),
                                    (torch.optim.Adagrad, halfstep.Adagrad, dict(lr=1e-2, lr_decay=0.01)),
                                    (torch.optim.SGD, halfstep.SGD, dict(lr=1e-2, momentum=0.9))]:
            # torch's Adagrad makes its state in the constructor only: it cannot step an added group.
            can_add = torch_cls is not torch.optim.Adagrad
            results = []
            for cls in (torch_cls, ours):
                torch.manual_seed(3)
                a, late, added = (torch.nn.Parameter(torch.randn(257)) for _ in range(3))
                opt = cls([a, late], **kw)
                for step in range(12):
                    a.grad = torch.randn(257)
                    late.grad = torch.randn(257) if step >= 5 else None  # first gradient at step 6
                    if step == 7 and can_add:
                        opt.add_param_group({"params": [added]})
                    added.grad = torch.randn(257) if step >= 7 and can_add else None
                    opt.step()
                results.append((a.detach().clone(), late.detach().clone(), added.detach().clone()))
                if cls is ours:
                    steps = [int(opt.state[p]["step"]) for p in (a, late, added) if p in opt.state]
                    self.assertEqual(steps, [12, 7, 5] if can_add else [12, 7])
                    self.assertEqual(opt.steps_taken, 12)
            for theirs, mine in zip(*results):
                torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=0, msg=ours.__name__)


class StateDict(unittest.TestCase):
    def test_switch_between_torch_and_halfstep_mid_training(self):
        def grads(k):
            g = torch.Generator().manual_seed(100 + k)
            return [torch.randn(64, 64, generator=g), torch.randn(64, generator=g)]

        for torch_cls, ours, kw in [(torch.optim.AdamW, halfstep.AdamW, dict(lr=1e-2, amsgrad=True)),
                                    (torch.optim.Adam, halfstep.Adam, dict(lr=1e-2, weight_decay=0.01)),
                                    (torch.optim.Adagrad, halfstep.Adagrad, dict(lr=1e-2)),
                                    (torch.optim.SGD, halfstep.SGD, dict(lr=1e-2, momentum=0.9, nesterov=True))]:
            def fresh():
                torch.manual_seed(5)
                return [torch.nn.Parameter(torch.randn(64, 64)), torch.nn.Parameter(torch.randn(64))]

            ref = fresh()
            opt = torch_cls(ref, **kw)
            for k in range(15):
                stepped(opt, ref, grads(k))
            # torch (5 steps) -> halfstep (5 steps) -> torch (5 steps)
            mixed = fresh()
            a = torch_cls(mixed, **kw)
            for k in range(5):
                stepped(a, mixed, grads(k))
            b = ours(mixed, **kw)
            b.load_state_dict(a.state_dict())
            for k in range(5, 10):
                stepped(b, mixed, grads(k))
            sd = b.state_dict()
            self.assertIn("halfstep", sd)
            if torch_cls is not torch.optim.SGD:
                self.assertEqual(float(sd["state"][0]["step"]), 10.0)
            c = torch_cls(mixed, **kw)
            c.load_state_dict(sd)
            for k in range(10, 15):
                stepped(c, mixed, grads(k))
            for x, y in zip(ref, mixed):
                torch.testing.assert_close(y, x, atol=ATOL, rtol=0, msg=ours.__name__)

    def test_saved_tensors_are_compact(self):
        p = torch.nn.Parameter(torch.randn(64, 64))
        opt = halfstep.AdamW([p], weights="fp32")
        stepped(opt, [p], [torch.randn(64, 64)])
        for k, v in opt.state_dict()["state"][0].items():
            self.assertEqual(v.untyped_storage().nbytes(), v.numel() * v.element_size(), k)


class Copies(unittest.TestCase):
    def test_deepcopy_and_pickle_step_as_the_original(self):
        for make, kw in [(halfstep.AdamW, dict(weights="split", states="bf16", seed=77)),
                         (halfstep.LAMB, dict(weights="bf16", seed=78, threads=1))]:
            torch.manual_seed(2)
            params = [torch.nn.Parameter(torch.randn(300).bfloat16())]
            opt = make(params, lr=1e-2, **kw)
            stepped(opt, params, [torch.randn(300).bfloat16()])
            for clone in (copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))):
                other = clone({"opt": opt, "params": params})
                g = torch.randn(300).bfloat16()
                stepped(other["opt"], other["params"], [g])
                self.assertEqual(other["opt"].seed, kw["seed"])
                ref = copy.deepcopy({"opt": opt, "params": params})
                stepped(ref["opt"], ref["params"], [g])
                self.assertTrue(same_bits(snapshot(ref["opt"], ref["params"]),
                                          snapshot(other["opt"], other["params"])))


class Package(unittest.TestCase):
    def test_version_is_the_library_version(self):
        self.assertEqual(halfstep.__version__, halfstep.library().hs_version().decode())

    def test_versions_agree(self):
        pyproject = os.path.join(CHECKOUT, "pyproject.toml")
        if not os.path.exists(pyproject):
            self.skipTest("not in a checkout")
        with open(pyproject) as f:
            self.assertIn(f'version = "{halfstep.__version__}"', f.read())

    def test_readme_example_runs(self):
        """The README's PyTorch example, as written there."""
        readme = os.path.join(CHECKOUT, "README.md")
        if not os.path.exists(readme):
            self.skipTest("not in a checkout")
        with open(readme) as f:
            section = f.read().split("### From PyTorch", 1)[1]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        scope = {}
        exec(compile(code, "README.md", "exec"), scope)
        self.assertEqual(int(scope["opt"].state[scope["model"].weight]["step"]), 1)

    def test_ctypes_structs_match_the_header(self):
        """Each ctypes struct's fields (names, order, C types) are the header's."""
        if not os.path.exists(HEADER):
            self.skipTest(f"no header at {HEADER} (an installed package outside the checkout)")
        with open(HEADER) as f:
            text = f.read()
        ctype = {"uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t,
                 "float": ctypes.c_float, "uint8_t": ctypes.c_uint8, "void *": ctypes.c_void_p,
                 "uint16_t *": ctypes.c_void_p, "hs_buffer": halfstep.Buffer}
        structs = {"hs_buffer": halfstep.Buffer, "hs_tensor": halfstep.Tensor,
                   "hs_step_context": halfstep.StepContext, "hs_sgd_config": halfstep.SgdConfig,
                   "hs_adagrad_config": halfstep.AdagradConfig, "hs_adam_config": halfstep.AdamConfig,
                   "hs_lamb_config": halfstep.LambConfig}
        for cname, cls in structs.items():
            body = re.search(r"typedef struct \{([^{}]*)\} " + cname + ";", text)
            self.assertIsNotNone(body, cname)
            fields = []
            for line in re.sub(r"//[^\n]*", "", body.group(1)).split(";"):
                m = re.match(r"\s*(.+?)\s*\b(\w+)(\[(\d+)\])?\s*$", line)
                if m:
                    fields.append((m.group(2), ctype[m.group(1)], m.group(4) and int(m.group(4))))
            ours = [(name, t._type_, t._length_) if hasattr(t, "_length_") else (name, t, None)
                    for name, t in cls._fields_]
            self.assertEqual(ours, fields, cname)


if __name__ == "__main__":
    unittest.main()
