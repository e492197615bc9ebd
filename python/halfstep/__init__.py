"""halfstep for PyTorch: torch.optim optimizers backed by halfstep's C ABI (ctypes, no compiler).

    import halfstep
    opt = halfstep.AdamW(model.parameters(), lr=1e-3, weights="bf16", states="fp32", seed=42)

Storage (`weights`): "fp32" (parameters are float32), "split" (parameters are the bf16 tops of
fp32 master weights; the 16-bit trails live in the optimizer state), "bf16" (bf16 parameters,
stochastic rounding by default, `rounding="nearest"` for round-to-nearest-even). Optimizer states:
"fp32" or "bf16" (stochastic). Gradients are read in the parameters' dtype.

The random bits are a function of (seed, step, parameter index, element): replicas that use the
same seed and `replica=None` stay bit-identical; `replica=r` gives replica r its own bits.

Threads (`threads`, never a change in the bits): None runs each step on rayon's global pool, to
which the stepping thread hands the work and waits; an int n gives the stepping thread its own pool
of n threads, itself one of them (`hs_threads_calling_thread`, made on the first step and kept for
the thread's life), which saves the hand-off (8-17 us per parameter group per step on a 2-core VM, ~28 us on 16 cores);
1 keeps every step on the stepping thread.

The shared library is found through $HALFSTEP_LIB, else ../target/release/libhalfstep.so relative to
this package (build it with `cargo build --release --features capi`).
"""

import array
import ctypes
import os

import torch

__all__ = ["SGD", "Adagrad", "AdamW", "Adam", "LAMB", "library", "round_to_bf16"]

# --- the C ABI (include/halfstep.h) ---------------------------------------------------------------

HS_F32, HS_BF16, HS_SPLIT = 0, 1, 2
HS_NEAREST_EVEN, HS_STOCHASTIC, HS_TOWARD_ZERO = 0, 1, 2
HS_REPLICA_IDENTICAL = 0xFFFFFFFF
STATUS = [
    "HS_OK", "HS_NULL_POINTER", "HS_MISALIGNED", "HS_LENGTH_MISMATCH", "HS_INVALID_HYPERPARAMETER",
    "HS_OUT_OF_RANGE", "HS_STATE_MISMATCH", "HS_INVALID_ARGUMENT", "HS_BACKEND_UNAVAILABLE", "HS_PANIC",
]


class Buffer(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("rounding", ctypes.c_uint32),
                ("data", ctypes.c_void_p), ("trail", ctypes.c_void_p)]


class Tensor(ctypes.Structure):
    _fields_ = [("len", ctypes.c_size_t), ("weights", Buffer), ("grads", Buffer),
                ("state", Buffer * 3), ("stream_id", ctypes.c_uint32), ("index_base", ctypes.c_uint64)]


class StepContext(ctypes.Structure):
    _fields_ = [("seed", ctypes.c_uint64), ("step", ctypes.c_uint32), ("replica", ctypes.c_uint32)]


class SgdConfig(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("momentum", ctypes.c_float), ("dampening", ctypes.c_float),
                ("weight_decay", ctypes.c_float), ("nesterov", ctypes.c_uint8), ("maximize", ctypes.c_uint8)]


class AdagradConfig(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("lr_decay", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("eps", ctypes.c_float), ("initial_accumulator_value", ctypes.c_float),
                ("maximize", ctypes.c_uint8)]


class AdamConfig(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("decoupled_weight_decay", ctypes.c_uint8), ("amsgrad", ctypes.c_uint8),
                ("maximize", ctypes.c_uint8)]


class LambConfig(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float), ("max_trust_ratio", ctypes.c_float)]


# A group's descriptors are built each step as one array of 64-bit words laid out as `hs_tensor`s: a
# step cost 10-15 us per parameter with a ctypes struct per buffer, ~5 us with these words (BENCHMARKS.md,
# "Per-parameter cost of the PyTorch package"). Word indices come from the ctypes layout above; an
# `hs_buffer` is (kind | rounding << 32, data, trail); index_base stays 0.
assert ctypes.sizeof(Buffer) == 24 and ctypes.sizeof(Tensor) % 8 == 0
_WORDS = ctypes.sizeof(Tensor) // 8
_LEN, _W, _G, _S, _STREAM = (getattr(Tensor, f).offset // 8 for f in ("len", "weights", "grads", "state", "stream_id"))
assert Tensor.stream_id.offset % 8 == 0

_lib = None


def library():
    """The loaded shared library (loaded on first use)."""
    global _lib
    if _lib is None:
        path = os.environ.get("HALFSTEP_LIB") or os.path.join(
            os.path.dirname(__file__), "..", "..", "target", "release", "libhalfstep.so")
        lib = ctypes.CDLL(os.path.abspath(path))
        P = ctypes.POINTER
        for name, cfg in [("hs_sgd_step", SgdConfig), ("hs_adagrad_step", AdagradConfig),
                          ("hs_adam_step", AdamConfig)]:
            f = getattr(lib, name)
            f.argtypes = [P(cfg), P(StepContext), P(Tensor), ctypes.c_size_t, ctypes.c_void_p]
            f.restype = ctypes.c_int
        lib.hs_lamb_step.argtypes = [P(LambConfig), P(StepContext), P(Tensor), ctypes.c_size_t,
                                     ctypes.c_void_p, ctypes.c_void_p]
        lib.hs_lamb_step.restype = ctypes.c_int
        lib.hs_lamb_workspace_new.restype = ctypes.c_void_p
        lib.hs_lamb_workspace_free.argtypes = [ctypes.c_void_p]
        lib.hs_threads_new.argtypes = [ctypes.c_uint32]
        lib.hs_threads_new.restype = ctypes.c_void_p
        lib.hs_threads_calling_thread.argtypes = [ctypes.c_uint32]
        lib.hs_threads_calling_thread.restype = ctypes.c_void_p
        lib.hs_threads_free.argtypes = [ctypes.c_void_p]
        lib.hs_threads_set_grain.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.hs_threads_set_grain.restype = ctypes.c_int
        lib.hs_threads_grain.argtypes = [ctypes.c_void_p]
        lib.hs_threads_grain.restype = ctypes.c_size_t
        lib.hs_last_error.restype = ctypes.c_char_p
        lib.hs_backend.restype = ctypes.c_char_p
        lib.hs_version.restype = ctypes.c_char_p
        lib.hs_f32_to_16.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint8,
                                     ctypes.c_uint32, P(StepContext), ctypes.c_uint32, ctypes.c_uint64]
        lib.hs_f32_to_16.restype = ctypes.c_int
        _lib = lib
    return _lib


def _check(status, what):
    if status != 0:
        msg = library().hs_last_error().decode(errors="replace")
        name = STATUS[status] if 0 <= status < len(STATUS) else str(status)
        raise ValueError(f"halfstep {what}: {name}: {msg}")


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def round_to_bf16(x, seed, step, stream=0, replica=None, stochastic=True):
    """A bf16 copy of float32 `x`, rounded stochastically with the bits of (seed, step, stream,
    element, replica) - e.g. activations in a forward pass - or to nearest-even."""
    x = x.detach().contiguous().float()
    out = torch.empty(x.shape, dtype=torch.bfloat16)
    ctx = StepContext(seed, step, HS_REPLICA_IDENTICAL if replica is None else replica)
    _check(library().hs_f32_to_16(_ptr(x), _ptr(out), x.numel(), 0,
                                  HS_STOCHASTIC if stochastic else HS_NEAREST_EVEN,
                                  ctypes.byref(ctx), stream, 0), "f32_to_bf16")
    return out


# --- torch.optim.Optimizer subclasses --------------------------------------------------------------

_PAGE = 4096

# Where in a page each state starts: `_SLOTS[name] * _SLOT_BYTES` past its parameter's offset there.
_SLOT_BYTES = 768
_SLOTS = {"momentum_buffer": 1, "sum": 1, "exp_avg": 1, "exp_avg_sq": 2, "max_exp_avg_sq": 3, "trail": 4}


def _state_like(p, fill, dtype, name):
    """A new tensor of `p`'s shape and `dtype`, filled with `fill` (a number, or a tensor to copy),
    whose data starts `_SLOTS[name] * _SLOT_BYTES` bytes past `p`'s offset within a 4 KiB page
    (a view into an allocation one page longer).

    Why a chosen offset: tensors allocated one after another from glibc's heap (every one under
    32 MiB, once the process has freed a large one) lie their size plus 64 bytes apart. Where that
    size is a multiple of 1 MiB, a step's load from one buffer comes a chunk or a few after a store to
    another at the same address modulo 1 MiB, and on Intel's Sapphire Rapids both halfstep's step
    and PyTorch's own ran 2-3x slower (BENCHMARKS.md, "Buffers 64 bytes past a multiple of 1 MiB").
    Why a different offset per state: AMD Zen's L1 holds one line per set and "µtag" (a hash of
    address bits 12-27), and buffers allocated one after another (mmap's, above 32 MiB) often lie at
    distances that hash to zero, so a state and its weight (or two states) at the same offset in a
    page evicted each other along much of a step (BENCHMARKS.md, "AMD's µtag" and "The PyTorch
    package's states in L1 sets of their own": Adam's two moments at 16M elements, 7-17% of the step).
    768 bytes apart, the buffers of one element size that a parameter's step walks side by side sit
    in different L1 sets, 12 cache lines or more apart modulo 4 KiB (on Sapphire Rapids as fast as
    whole pages apart)."""
    n = p.numel()
    pad = _PAGE // torch.empty((), dtype=dtype).element_size()
    buf = torch.empty(n + pad, dtype=dtype)
    want = p.data_ptr() + _SLOTS[name] * _SLOT_BYTES
    start = (want - buf.data_ptr()) % _PAGE // buf.element_size()
    t = buf[start:start + n].view(p.shape)
    if isinstance(fill, torch.Tensor):
        t.copy_(fill.reshape(p.shape))
    else:
        t.fill_(fill)
    return t


_WEIGHTS = {"fp32": torch.float32, "split": torch.bfloat16, "bf16": torch.bfloat16}
_STATES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class _Halfstep(torch.optim.Optimizer):
    """Shared machinery: one C call per parameter group per step, every parameter a tensor of the
    group with its own stream id (its index among all parameters)."""

    _state_names = ()

    def __init__(self, params, defaults, weights, states, rounding, seed, replica, threads):
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be None or an int >= 1, not {threads!r}")
        self._threads_wanted, self._threads = threads, None
        if weights not in _WEIGHTS:
            raise ValueError(f"weights must be one of {sorted(_WEIGHTS)}, not {weights!r}")
        if states not in _STATES:
            raise ValueError(f"states must be one of {sorted(_STATES)}, not {states!r}")
        if rounding not in ("stochastic", "nearest"):
            raise ValueError(f"rounding must be 'stochastic' or 'nearest', not {rounding!r}")
        super().__init__(params, defaults)
        self.weights, self.states_kind = weights, states
        self.rounding = HS_STOCHASTIC if rounding == "stochastic" else HS_NEAREST_EVEN
        self.seed, self.replica, self.steps_taken = int(seed), replica, 0
        want = _WEIGHTS[weights]
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype != want or not p.is_contiguous() or p.device.type != "cpu":
                    raise ValueError(f"weights={weights!r} needs contiguous CPU {want} parameters, "
                                     f"got {p.dtype} on {p.device}")
        self._workspace = None

    # state_dict: torch's per-parameter state (trails, moments) plus our RNG state.
    def state_dict(self):
        sd = super().state_dict()
        sd["halfstep"] = {"seed": self.seed, "steps_taken": self.steps_taken, "weights": self.weights,
                          "states": self.states_kind}
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        hs = state_dict.pop("halfstep")
        if (hs["weights"], hs["states"]) != (self.weights, self.states_kind):
            raise ValueError("state_dict was saved with other storage kinds")
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        # torch casts floating state to the parameter's dtype on load; ours keeps its own dtypes
        # (fp32 moments next to bf16 weights, int16 trails): restore them as saved.
        params = [p for g in self.param_groups for p in g["params"]]
        for index, st in saved.items():
            p = params[index]
            self.state[p] = {k: _state_like(p, v, v.dtype, k) for k, v in st.items()}
        self.seed, self.steps_taken = hs["seed"], hs["steps_taken"]

    def _buffers(self, p):
        """The state tensors of `p` (created zero on first use), and its trail for split weights."""
        st = self.state[p]
        if not st:
            for name, init in self._state_names:
                st[name] = _state_like(p, init(self), _STATES[self.states_kind], name)
            if self.weights == "split":
                st["trail"] = _state_like(p, 0, torch.int16, "trail")
        return st

    def _words(self, group, p, g, stream):
        """`p`'s `hs_tensor` as 64-bit words (see _WORDS)."""
        st = self._buffers(p)
        d = [0] * _WORDS
        d[_LEN] = p.numel()
        if self.weights == "split":
            d[_W], d[_W + 1], d[_W + 2] = HS_SPLIT, p.data_ptr(), st["trail"].data_ptr()
        elif self.weights == "bf16":
            d[_W], d[_W + 1] = HS_BF16 | self.rounding << 32, p.data_ptr()
        else:
            d[_W], d[_W + 1] = HS_F32 | HS_STOCHASTIC << 32, p.data_ptr()
        d[_G] = (HS_F32 if g.dtype == torch.float32 else HS_BF16) | HS_STOCHASTIC << 32
        d[_G + 1] = g.data_ptr()
        k = _S
        for t in [st[name] for name, _ in self._state_names] + self._extra_states(group, p, st):
            d[k] = (HS_F32 if t.dtype == torch.float32 else HS_BF16) | HS_STOCHASTIC << 32
            d[k + 1] = t.data_ptr()
            k += 3
        d[_STREAM] = stream
        return d

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.steps_taken += 1
        ctx = StepContext(self.seed, self.steps_taken,
                          HS_REPLICA_IDENTICAL if self.replica is None else int(self.replica))
        stream = 0
        for group in self.param_groups:
            words, n, keep = [], 0, []
            for p in group["params"]:
                stream += 1
                if p.grad is None:
                    continue
                g = p.grad
                if not g.is_contiguous():
                    g = g.contiguous()
                    keep.append(g)
                words += self._words(group, p, g, stream - 1)
                n += 1
            if n:
                arr = array.array("Q", words)
                descs = ctypes.cast(arr.buffer_info()[0], ctypes.POINTER(Tensor))
                self._call(group, ctypes.byref(ctx), descs, n)
        return loss

    def _extra_states(self, group, p, st):
        """State tensors after `_state_names` that `group`'s options add (AMSGrad's maximum)."""
        return []

    def _pool(self):
        """The `hs_threads *` steps run on (None: the global pool), made on the first step."""
        if self._threads_wanted is None:
            return None
        if not self._threads:
            n = self._threads_wanted
            lib = library()
            self._threads = lib.hs_threads_new(1) if n == 1 else lib.hs_threads_calling_thread(n)
            if not self._threads:
                raise ValueError(f"halfstep threads={n}: {lib.hs_last_error().decode(errors='replace')}")
        return self._threads

    def __del__(self):
        if getattr(self, "_workspace", None):
            library().hs_lamb_workspace_free(self._workspace)
        if getattr(self, "_threads", None):
            library().hs_threads_free(self._threads)


class SGD(_Halfstep):
    """`torch.optim.SGD` (momentum, dampening, nesterov, weight decay, maximize)."""

    _state_names = (("momentum_buffer", lambda self: 0.0),)

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False, *, weights="fp32", states="fp32", rounding="stochastic", seed=0,
                 replica=None, threads=None):
        if momentum == 0.0:
            self._state_names = ()
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize),
                         weights, states, rounding, seed, replica, threads)

    def _call(self, g, ctx, arr, n):
        cfg = SgdConfig(g["lr"], g["momentum"], g["dampening"], g["weight_decay"], g["nesterov"], g["maximize"])
        _check(library().hs_sgd_step(ctypes.byref(cfg), ctx, arr, n, self._pool()), "sgd step")


class Adagrad(_Halfstep):
    """`torch.optim.Adagrad`."""

    _state_names = (("sum", lambda self: self.defaults["initial_accumulator_value"]),)

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, maximize=False, *, weights="fp32", states="fp32", rounding="stochastic", seed=0,
                 replica=None, threads=None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize),
                         weights, states, rounding, seed, replica, threads)

    def _call(self, g, ctx, arr, n):
        cfg = AdagradConfig(g["lr"], g["lr_decay"], g["weight_decay"], g["eps"],
                            g["initial_accumulator_value"], g["maximize"])
        _check(library().hs_adagrad_step(ctypes.byref(cfg), ctx, arr, n, self._pool()), "adagrad step")


class AdamW(_Halfstep):
    """`torch.optim.AdamW` (`decoupled=False` gives `torch.optim.Adam`'s L2 decay)."""

    _state_names = (("exp_avg", lambda self: 0.0), ("exp_avg_sq", lambda self: 0.0))
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 maximize=False, *, weights="fp32", states="fp32", rounding="stochastic", seed=0, replica=None,
                 threads=None):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize),
                         weights, states, rounding, seed, replica, threads)

    def _extra_states(self, group, p, st):
        if not group["amsgrad"]:
            return []
        if "max_exp_avg_sq" not in st:
            st["max_exp_avg_sq"] = _state_like(p, 0, st["exp_avg_sq"].dtype, "max_exp_avg_sq")
        return [st["max_exp_avg_sq"]]

    def _call(self, g, ctx, arr, n):
        cfg = AdamConfig(g["lr"], g["betas"][0], g["betas"][1], g["eps"], g["weight_decay"],
                         self._decoupled, g["amsgrad"], g["maximize"])
        _check(library().hs_adam_step(ctypes.byref(cfg), ctx, arr, n, self._pool()), "adam step")


class Adam(AdamW):
    """`torch.optim.Adam` (L2 weight decay added to the gradient)."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **kw):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **kw)


class LAMB(_Halfstep):
    """LAMB (NVLAMB, as IPEX's fused LAMB): Adam direction + decoupled decay, trust ratio per tensor."""

    _state_names = (("exp_avg", lambda self: 0.0), ("exp_avg_sq", lambda self: 0.0))

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 max_trust_ratio=None, *, weights="fp32", states="fp32", rounding="stochastic", seed=0,
                 replica=None, threads=None):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      max_trust_ratio=max_trust_ratio),
                         weights, states, rounding, seed, replica, threads)

    def _call(self, g, ctx, arr, n):
        if not self._workspace:
            self._workspace = library().hs_lamb_workspace_new()
        cfg = LambConfig(g["lr"], g["betas"][0], g["betas"][1], g["eps"], g["weight_decay"],
                         g["max_trust_ratio"] or 0.0)
        _check(library().hs_lamb_step(ctypes.byref(cfg), ctx, arr, n, self._pool(), self._workspace), "lamb step")
