"""halfstep for PyTorch: torch.optim optimizers backed by halfstep's C library (through ctypes).

    pip install .                      # from a checkout: builds the library into the package
    import halfstep
    opt = halfstep.AdamW(model.parameters(), lr=1e-3, weights="split", states="bf16", seed=42)

Each optimizer takes torch.optim's arguments with torch.optim's defaults and meaning, and these of
its own (keyword-only):

- ``weights``: how the parameters are stored. "fp32" (float32 parameters), "split" (the parameters
  are the bfloat16 tops of float32 master weights whose 16-bit trails live in the optimizer state:
  the update is exact in float32, IPEX's Split-SGD layout), "bf16" (bfloat16 parameters, each update
  rounded to bfloat16).
- ``states``: "fp32" or "bf16" (stochastically rounded) optimizer states.
- ``rounding``: "stochastic" (default) or "nearest" (ties to even) for bfloat16 weights.
- ``seed``: the run's seed (0 <= seed < 2**64), saved in ``state_dict()``.
- ``replica``: None (every replica rounds with the same bits, so data-parallel replicas stay
  identical) or 0..65534 (this replica's own bits).
- ``threads``: None (each step runs on as many threads as ``torch.get_num_threads()``) or n >= 1
  (n threads; 1 keeps every step on the stepping thread). The threads are those of the OpenMP
  runtime torch's CPU operators run on, the stepping thread one of them: the threads that are awake
  between torch's operators, which DeepSpeed's and IPEX's CPU optimizers use too. Where torch does
  not run on OpenMP, None steps on halfstep's global thread pool and n on a team of n threads of
  the optimizer's own, whose other threads spin briefly between steps. Threads never change a bit.

The random bits are a function of (seed, the parameter's step, the parameter's stream id, the
element, replica). A parameter's stream id is its index among all the optimizer's parameters at the
first step that meets it, and stays its own from then on (saved in ``state_dict()``): so a caller
that steps one group at a time, as DeepSpeed's ZeRO steps its partitions, still gives every
parameter bits of its own. Each parameter keeps its own step count in ``state["step"]``, as
torch.optim does, for bias correction and the random bits.

Every ``step()`` checks each parameter, gradient and state it passes to the library (dtype, device,
layout, contiguity, element counts, and that no two buffers overlap) before anything is written, and
raises ``ValueError`` naming the parameter where one no longer fits. A step whose parameters and
states are those of the step before repeats these checks against what that step saw, and reuses
its call's arguments with only the gradients' addresses rewritten.

The library is found through $HALFSTEP_LIB, else the one installed in this package, else
``target/release/libhalfstep.so`` of the checkout this file is in (``cargo build --release
--features capi``).
"""

import array
import ctypes
import functools
import glob
import itertools
import os

import torch

__version__ = "0.1.0"

__all__ = ["SGD", "Adagrad", "AdamW", "Adam", "LAMB", "library", "openmp_entry_points", "round_to_bf16",
           "__version__"]

# --- the C ABI (include/halfstep.h; python/tests checks these against it field by field) ---------

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


# A call's descriptors are one array of 64-bit words laid out as `hs_tensor`s, which costs a third
# of building a ctypes struct per buffer. Word indices come from the ctypes layout above; an
# `hs_buffer` is (kind | rounding << 32, data, trail); index_base stays 0.
assert ctypes.sizeof(Buffer) == 24 and ctypes.sizeof(Tensor) % 8 == 0
_WORDS = ctypes.sizeof(Tensor) // 8
_LEN, _W, _G, _S, _STREAM = (getattr(Tensor, f).offset // 8 for f in ("len", "weights", "grads", "state", "stream_id"))
assert Tensor.stream_id.offset % 8 == 0

_lib = None


def _library_path():
    """$HALFSTEP_LIB, else the library built into this package, else the checkout's release build."""
    env = os.environ.get("HALFSTEP_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("_libhalfstep*.so", "_libhalfstep*.dylib", "_libhalfstep*.pyd"):
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    return os.path.join(here, "..", "..", "target", "release", "libhalfstep.so")


def library():
    """The loaded C library (loaded on first use; an optimizer's constructor loads it)."""
    global _lib
    if _lib is None:
        path = _library_path()
        try:
            lib = ctypes.CDLL(os.path.abspath(path))
        except OSError as e:
            raise ImportError(f"halfstep: cannot load the halfstep library at {path} ({e}); install the "
                              "package with `pip install .` or set HALFSTEP_LIB to a libhalfstep.so built "
                              "with `cargo build --release --features capi`") from e
        P = ctypes.POINTER
        for name, cfg in [("hs_sgd_step", SgdConfig), ("hs_adagrad_step", AdagradConfig),
                          ("hs_adam_step", AdamConfig)]:
            f = getattr(lib, name)
            # The config and the context by address (`_Halfstep._config`, `ctypes.addressof`): ctypes
            # converts an int for a `void *` faster than it type-checks a pointer, a third of the call.
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            f.restype = ctypes.c_int
        # The tensors (`hs_tensor *`) are passed as the address of an array of descriptor words.
        lib.hs_lamb_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_void_p, ctypes.c_void_p]
        lib.hs_lamb_step.restype = ctypes.c_int
        lib.hs_lamb_workspace_new.restype = ctypes.c_void_p
        lib.hs_lamb_workspace_free.argtypes = [ctypes.c_void_p]
        lib.hs_threads_new.argtypes = [ctypes.c_uint32]
        lib.hs_threads_new.restype = ctypes.c_void_p
        lib.hs_threads_calling_thread.argtypes = [ctypes.c_uint32]
        lib.hs_threads_calling_thread.restype = ctypes.c_void_p
        lib.hs_threads_openmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32]
        lib.hs_threads_openmp.restype = ctypes.c_void_p
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


_OPENMP_NAMES = ("GOMP_parallel", "omp_get_thread_num", "omp_get_max_threads")
_torch_threads = None


@functools.cache
def openmp_entry_points():
    """The addresses of ``GOMP_parallel``, ``omp_get_thread_num`` and ``omp_get_max_threads`` of
    the OpenMP runtime torch's CPU operators run on, or None where torch does not run on OpenMP
    (``torch.__config__.parallel_info()``) or its library does not link one. Looked up through
    torch's own library, so that they are those of the runtime torch uses even where the process
    has loaded another (a C++ extension built against the system's libgomp)."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    libdir = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "lib")
    for pattern in ("libtorch_cpu.so", "libtorch_cpu.dylib", "libtorch_cpu*.so*"):
        for path in sorted(glob.glob(os.path.join(libdir, pattern))):
            try:
                # Already loaded by torch: the same handle, whose lookups search what it links.
                handle = ctypes.CDLL(path)
                found = tuple(ctypes.cast(getattr(handle, name), ctypes.c_void_p).value for name in _OPENMP_NAMES)
            except (OSError, AttributeError):
                continue
            if all(found):
                return found
    return None


def _torch_pool():
    """The `hs_threads *` on torch's OpenMP runtime (its thread count read at each step), made once
    and shared by every optimizer (the runtime stays loaded with torch); None where there is none."""
    global _torch_threads
    if _torch_threads is None:
        found = openmp_entry_points()
        handle = library().hs_threads_openmp(*found, 0) if found else None
        _torch_threads = handle or False
    return _torch_threads or None


def _check(status, *what):
    if status != 0:
        msg = library().hs_last_error().decode(errors="replace")
        name = STATUS[status] if 0 <= status < len(STATUS) else str(status)
        raise ValueError(f"halfstep {' '.join(what)}: {name}: {msg}")


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def _seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
        raise ValueError(f"seed must be an int in [0, 2**64), not {seed!r}")
    return seed


def _replica(replica):
    if replica is None:
        return HS_REPLICA_IDENTICAL
    if isinstance(replica, bool) or not isinstance(replica, int) or not 0 <= replica <= 65534:
        raise ValueError(f"replica must be None or an int in [0, 65534], not {replica!r}")
    return replica


def round_to_bf16(x, seed, step, stream=0, replica=None, stochastic=True):
    """A bf16 copy of float32 `x`, rounded stochastically with the bits of (seed, step, stream,
    element, replica) - e.g. activations in a forward pass - or to nearest-even."""
    x = x.detach().contiguous().float()
    out = torch.empty(x.shape, dtype=torch.bfloat16)
    ctx = StepContext(_seed(seed), step, _replica(replica))
    _check(library().hs_f32_to_16(_ptr(x), _ptr(out), x.numel(), 0,
                                  HS_STOCHASTIC if stochastic else HS_NEAREST_EVEN,
                                  ctypes.byref(ctx), stream, 0), "f32_to_bf16")
    return out


# --- where states live ------------------------------------------------------------------------------

_PAGE = 4096

# Where in a page each state starts: `_SLOTS[name] * _SLOT_BYTES` past its parameter's offset there.
_SLOT_BYTES = 768
_SLOTS = {"momentum_buffer": 1, "sum": 1, "exp_avg": 1, "exp_avg_sq": 2, "max_exp_avg_sq": 3, "trail": 4}
# From this size on, a state also starts `_SLOTS[name]` pages into its allocation.
_STAGGER_BYTES = 4 << 20


def _state_like(p, fill, dtype, name):
    """A new tensor of `p`'s shape and `dtype`, filled with `fill` (a number, or a tensor to copy),
    whose data starts `_SLOTS[name] * _SLOT_BYTES` bytes past `p`'s offset within a 4 KiB page
    (a view into an allocation one page longer), and from `_STAGGER_BYTES` on also `_SLOTS[name]`
    whole pages further into an allocation that many pages longer still.

    Why: buffers a few cache lines apart modulo 1 MiB (consecutive heap allocations often are) made
    steps 2-3x slower on Sapphire Rapids, and two buffers at the same offset in a page can evict
    each other from AMD Zen's L1 (its "µtag"); 768 bytes apart modulo 4 KiB, neither happens. Large
    states of equal size, mapped one after another, also lie at equal distances, which cost the
    bf16-state steps at 64M elements up to 1.25x on Zen 4; a page more per slot ends it
    (docs/DESIGN.md, "PyTorch package"). `state_dict()` saves compact copies."""
    n = p.numel()
    size = _ELEMENT_BYTES[dtype]
    extra = _SLOTS[name] * _PAGE if n * size >= _STAGGER_BYTES else 0
    buf = torch.empty(n + (_PAGE + extra) // size, dtype=dtype)
    want = p.data_ptr() + _SLOTS[name] * _SLOT_BYTES
    start = ((want - buf.data_ptr()) % _PAGE + extra) // size
    t = buf[start:start + n].view(p.shape)
    if isinstance(fill, torch.Tensor):
        t.copy_(fill.reshape(p.shape))
    else:
        t.fill_(fill)
    return t


_WEIGHTS = {"fp32": torch.float32, "split": torch.bfloat16, "bf16": torch.bfloat16}
_STATES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_GRADS = {torch.float32: HS_F32, torch.bfloat16: HS_BF16}
_ELEMENT_BYTES = {torch.float32: 4, torch.bfloat16: 2, torch.int16: 2}
# torch.optim keeps `state["step"]` as a float32 tensor, exact up to 2**24 steps.
_MAX_STEP = 2 ** 24
# The step counts are read and written in place (a ctypes view of the tensor's float32), which costs a
# tenth of a torch operation per parameter.
_F32 = ctypes.c_float


def _disjoint(ranges):
    """Whether no two of the (start, end) byte ranges overlap."""
    ranges = sorted(ranges)
    return all(b[0] >= a[1] for a, b in zip(ranges, ranges[1:]))


class _Plan:
    """What a checked step keeps for the next ones: per group, each parameter's entry (what the
    check saw, and where its gradient's address sits in the descriptor words) and the call's
    descriptor words; the byte ranges of every buffer but the gradients."""

    __slots__ = ("state", "groups", "ctx", "ctx_address", "fixed", "grads")

    def __init__(self, state, groups, ctx, fixed, grads):
        self.state, self.groups, self.fixed, self.grads = state, groups, fixed, grads
        self.ctx, self.ctx_address = ctx, ctypes.addressof(ctx)

    def overlap_free(self):
        """Whether the gradients at their current addresses overlap nothing."""
        words = [w for _, _, w in self.groups]
        return _disjoint(self.fixed + [(words[k][slot], words[k][slot] + size) for k, slot, size in self.grads])


try:
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
except ImportError:  # a torch that keeps them elsewhere: its own wrapper is used
    _global_optimizer_pre_hooks = _global_optimizer_post_hooks = None


def _hooked(step):
    """torch.optim's wrapper of `step` (its pre- and post-hooks, `_optimizer_step_code`, and the
    "Optimizer.step#Name.step" range for the profiler), opening the profiler's range only while a
    profiler runs: torch.optim's wrapper opens it on every step, which costs more than a small
    step itself (docs/DESIGN.md, "PyTorch package"). torch.optim wraps a `step` only when it is
    not marked `hooked`."""
    if _global_optimizer_pre_hooks is None:
        return step

    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        self = args[0]
        if _profiler_enabled():
            with torch.autograd.profiler.record_function(f"Optimizer.step#{type(self).__name__}.step"):
                return _with_hooks(self, step, args, kwargs)
        return _with_hooks(self, step, args, kwargs)

    wrapper.hooked = True
    return wrapper


_profiler_enabled = torch._C._autograd._profiler_enabled


def _with_hooks(self, step, args, kwargs):
    # The chains only where a hook is registered: building them cost a tenth of a small step.
    if _global_optimizer_pre_hooks or self._optimizer_step_pre_hooks:
        for hook in itertools.chain(_global_optimizer_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if isinstance(result, tuple) and len(result) == 2:
                    args, kwargs = result
                else:
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {result}.")
    out = step(*args, **kwargs)
    self._optimizer_step_code()
    if self._optimizer_step_post_hooks or _global_optimizer_post_hooks:
        for hook in itertools.chain(self._optimizer_step_post_hooks.values(), _global_optimizer_post_hooks.values()):
            hook(self, args, kwargs)
    return out


# torch.optim's implementation switches: the values halfstep honours (its step is one fused kernel
# on the CPU), and why the others are refused.
_SWITCHES = {
    "foreach": ((None, False), "halfstep has no foreach path: each step is one fused call"),
    "fused": ((None, True), "halfstep's step is always fused"),
    "capturable": ((False,), "halfstep steps CPU tensors; CUDA graph capture does not apply"),
    "differentiable": ((False,), "halfstep's step is not differentiable"),
}


def _describe(p):
    return f"{tuple(p.shape)} {p.dtype} on {p.device}"


def _nbytes(t):
    return t.numel() * t.element_size()


class _Halfstep(torch.optim.Optimizer):
    """Shared machinery: per step, every parameter group becomes one C call per distinct parameter
    step count (usually one), each parameter a tensor with its own stream id (`_stream_of`)."""

    # (state name, the group option that makes it present or None, initial value from the group)
    _state_names = ()
    # The options `_state_names` reads: the states of a group are a function of these.
    _layout_keys = ()
    _switches = ("foreach", "fused", "differentiable")

    def __init__(self, params, defaults, weights, states, rounding, seed, replica, threads):
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be None or an int >= 1, not {threads!r}")
        if weights not in _WEIGHTS:
            raise ValueError(f"weights must be one of {sorted(_WEIGHTS)}, not {weights!r}")
        if states not in _STATES:
            raise ValueError(f"states must be one of {sorted(_STATES)}, not {states!r}")
        if rounding not in ("stochastic", "nearest"):
            raise ValueError(f"rounding must be 'stochastic' or 'nearest', not {rounding!r}")
        self._threads_wanted, self._threads, self._workspace = threads, None, None
        self._layouts, self._configs, self._plan = {}, {}, None
        self._streams, self._next_stream = {}, 0
        self.weights, self.states_kind, self.rounding_name = weights, states, rounding
        self.rounding = HS_STOCHASTIC if rounding == "stochastic" else HS_NEAREST_EVEN
        self.seed, self.replica = _seed(seed), replica
        self._replica_word = _replica(replica)
        library()  # a missing library fails here, not at the first step
        super().__init__(params, defaults)  # calls add_param_group, which validates each group

    # --- validation ---------------------------------------------------------------------------

    def _name(self):
        return f"halfstep.{type(self).__name__}"

    def _check_group(self, group):
        """Raises ValueError if `group`'s options are not ones halfstep can step with."""
        for key in self._switches:
            allowed, why = _SWITCHES[key]
            if group.get(key, allowed[0]) not in allowed:
                raise ValueError(f"{self._name()}: {key}={group[key]!r} is not supported ({why}); "
                                 f"use {' or '.join(repr(a) for a in allowed)}")
        # The library's own validation of the hyperparameters: a call with no tensors.
        ctx = StepContext(self.seed, 1, self._replica_word)
        _check(self._call(group, ctypes.addressof(ctx), None, 0), self._label, "hyperparameters")

    def _check_param(self, p, where):
        want = _WEIGHTS[self.weights]
        if p.layout != torch.strided:
            raise ValueError(f"{self._name()}: {where} is a {p.layout} tensor; halfstep steps dense tensors")
        if p.device.type != "cpu":
            raise ValueError(f"{self._name()}: {where} is on {p.device}; halfstep steps CPU tensors")
        if p.dtype != want:
            raise ValueError(f"{self._name()}: {where} is {p.dtype}, but weights={self.weights!r} needs "
                             f"{want} parameters (did the model change dtype after the optimizer was made?)")
        if not p.is_contiguous():
            raise ValueError(f"{self._name()}: {where} ({_describe(p)}, strides {p.stride()}) is not contiguous "
                             "(e.g. channels_last or a transposed view); halfstep steps contiguous parameters")

    def add_param_group(self, param_group):
        """torch.optim's `add_param_group`, with the new group's hyperparameters and parameters
        checked before it is added."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, not {type(param_group).__name__}")
        group = dict(param_group)
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        first = sum(len(g["params"]) for g in self.param_groups)
        for k, p in enumerate(params):
            if isinstance(p, tuple):  # named parameters (torch >= 2.6)
                p = p[1]
            if isinstance(p, torch.Tensor):
                self._check_param(p, f"parameter {first + k} ({_describe(p)})")
        checked = {**self.defaults, **{k: v for k, v in group.items() if k != "params"}}
        self._check_group(checked)
        super().add_param_group(param_group)

    # --- state ----------------------------------------------------------------------------------

    def _expected(self, group):
        """(name, dtype, initial value) of every state a parameter of `group` carries."""
        kind = _STATES[self.states_kind]
        out = [(name, kind, init(group)) for name, present, init in self._state_names
               if present is None or group[present]]
        if self.weights == "split":
            out.append(("trail", torch.int16, 0))
        return out

    def _layout(self, group):
        """`_expected(group)`, and (name, descriptor kind word, bytes per element) of each state
        the C call takes, kept per combination of the options that decide the states."""
        key = tuple(group[k] for k in self._layout_keys)
        cache = self._layouts
        got = cache.get(key)
        if got is None:
            expected = self._expected(group)
            states = [(name, (HS_F32 if dtype == torch.float32 else HS_BF16) | HS_STOCHASTIC << 32,
                       _ELEMENT_BYTES[dtype]) for name, dtype, _ in expected if name != "trail"]
            got = cache[key] = (expected, states)
        return got

    def _state_of(self, p, expected, stream):
        """`p`'s state, made (zero, step 0) on its first step and checked against `p` on every step."""
        st = self.state[p]
        step = st.get("step")
        if not isinstance(step, torch.Tensor) or step.dtype != torch.float32 or step.numel() != 1 \
                or not step.is_cpu or not step.is_contiguous():
            st["step"] = torch.tensor(float(step or 0), dtype=torch.float32)
        n = p.numel()
        for name, dtype, init in expected:
            t = st.get(name)
            if t is None:
                st[name] = _state_like(p, init, dtype, name)
            elif not isinstance(t, torch.Tensor) or t.dtype != dtype or t.numel() != n or not t.is_cpu \
                    or t.layout != torch.strided or not t.is_contiguous():
                got = _describe(t) if isinstance(t, torch.Tensor) else repr(t)
                raise ValueError(f"{self._name()}: {self._where(p, stream)}: its state {name!r} is {got}, but "
                                 f"the parameter needs {n} contiguous {dtype} elements on the CPU (the parameter "
                                 "changed size or the state was replaced after it was made)")
        return st

    def _where(self, p, stream):
        return f"parameter {stream} ({_describe(p)})"

    def _stream_of(self, p):
        """`p`'s stream id: the next one unused when a step first meets `p` (in plain use its index
        among all the parameters), then its own. Where the groups a step sees change, as when
        DeepSpeed's ZeRO sets `param_groups` to one group (or partition) at a time, each parameter
        keeps its id, where an index in the groups of the moment gave every partition id 0, the same
        bits."""
        s = self._streams.get(p)
        if s is None:
            s = self._streams[p] = self._next_stream
            self._next_stream += 1
        return s

    # --- step -----------------------------------------------------------------------------------

    @_hooked
    def step(self, closure=None):
        """One step over every parameter with a gradient. Every check is made for every parameter
        of every group before the first call writes anything."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._step_planned():
            with torch.no_grad():
                self._step_checked()
        return loss

    def _step_checked(self):
        """The step with every check made from scratch; keeps what the next steps need to repeat
        the checks cheaply (`_plan`) when the step has the plan's shape."""
        self._plan = None
        want = _WEIGHTS[self.weights]
        split = self.weights == "split"
        if split:
            wkind = HS_SPLIT
        elif self.weights == "bf16":
            wkind = HS_BF16 | self.rounding << 32
        else:
            wkind = HS_F32 | HS_STOCHASTIC << 32
        strided = torch.strided
        calls, counters, grad_spans, fixed, keep = [], [], [], [], []
        plan_groups, grad_slots, plannable = [], [], True
        for group in self.param_groups:
            expected, states = self._layout(group)
            by_step, entries = {}, []
            for p in group["params"]:
                stream = self._stream_of(p)
                g = p.grad
                if g is None:
                    entries.append((p, None))
                    continue
                if p.layout != strided or p.dtype != want or not p.is_cpu or not p.is_contiguous():
                    self._check_param(p, self._where(p, stream))
                if g.layout != strided:
                    raise ValueError(f"{self._name()}: {self._where(p, stream)} has a sparse gradient; "
                                     "halfstep needs dense ones")
                gkind = _GRADS.get(g.dtype)
                if gkind is None or not g.is_cpu or g.shape != p.shape:
                    raise ValueError(f"{self._name()}: {self._where(p, stream)} has a gradient of {_describe(g)}; "
                                     "halfstep needs the parameter's shape, float32 or bfloat16, on the CPU")
                if not g.is_contiguous():
                    g = g.contiguous()
                    keep.append(g)  # the descriptor holds only its address
                st = self._state_of(p, expected, stream)
                n = p.numel()
                step_t = st["step"]
                counter = step_t.data_ptr()
                view = _F32.from_address(counter)
                step = int(view.value) + 1
                if step >= _MAX_STEP:
                    raise ValueError(f"{self._name()}: {self._where(p, stream)} would take step {step}, past the "
                                     "2**24 that torch.optim's float32 state['step'] counts exactly")
                counters.append((view, step))
                words = by_step.setdefault(step, [])
                checked = tuple((name, st[name], st[name].data_ptr(), dtype, st[name].shape)
                                for name, dtype, _ in expected)
                entry = [p, -1, p.data_ptr(), p.dtype, p.shape, g.dtype, st, step_t, counter, view, checked]
                entries.append(entry)
                if n == 0:
                    continue
                if group.get("maximize") and self._negate_for_maximize:
                    g = torch.neg(g)
                    keep.append(g)
                d = [0] * _WORDS
                d[_LEN] = n
                pp, gp = p.data_ptr(), g.data_ptr()
                d[_W], d[_W + 1], d[_G], d[_G + 1], d[_STREAM] = wkind, pp, gkind | HS_STOCHASTIC << 32, gp, stream
                fixed.append((pp, pp + n * p.element_size()))
                grad_spans.append((gp, gp + n * g.element_size()))
                entry[1] = len(words) + _G + 1
                grad_slots.append((len(plan_groups), entry[1], n * g.element_size()))
                if split:
                    tp = st["trail"].data_ptr()
                    d[_W + 2] = tp
                    fixed.append((tp, tp + 2 * n))
                k = _S
                for name, kind, size in states:
                    sp = st[name].data_ptr()
                    d[k], d[k + 1] = kind, sp
                    fixed.append((sp, sp + size * n))
                    k += 3
                words.extend(d)
            for step, words in by_step.items():
                calls.append((group, step, words))
            plannable = plannable and len(by_step) <= 1
            plan_groups.append((group, entries, array.array("Q", next(iter(by_step.values()), []))))
        if not _disjoint(grad_spans + fixed):
            self._explain_overlap()
        if len(calls) > 1:
            # Each call checks its hyperparameters before writing; with several calls, a later group
            # must not be found invalid after an earlier one was written.
            for group in {id(c[0]): c[0] for c in calls}.values():
                self._check_group(group)
        ctx = StepContext(self.seed, 0, self._replica_word)
        for group, step, words in calls:
            ctx.step = step
            arr = array.array("Q", words)
            status = self._call(group, ctypes.addressof(ctx), arr.buffer_info()[0], len(words) // _WORDS)
            _check(status, self._label, "step")
        for view, step in counters:
            view.value = step
        if plannable and not keep:
            self._plan = _Plan(self.state, plan_groups, ctx, fixed, grad_slots)

    def _step_planned(self):
        """The step through `_plan`, when it still describes every buffer: the parameters, their
        dtypes, shapes, contiguity and addresses, the states' tensors, addresses, element counts and
        dtypes, and the gradients' dtypes, shapes, layout, device and contiguity are compared with
        the last checked step's, and only the gradients' addresses may differ (they are written into
        the kept descriptors). False, with nothing written, when anything else changed or the steps
        of a group's parameters differ: the caller then makes every check from scratch."""
        plan = self._plan
        groups = self.param_groups
        if plan is None or plan.state is not self.state or len(groups) != len(plan.groups):
            return False
        state, strided = self.state, torch.strided
        moved = False
        # One pass: the checks, the gradients' addresses, each group's next step; `calls` the groups
        # with something to step, `counted` the groups whose counters advance.
        calls, counted = [], []
        for group, (planned, entries, words) in zip(groups, plan.groups):
            params = group["params"]
            if group is not planned or len(params) != len(entries):
                return False
            step = None
            for p, e in zip(params, entries):
                g = p.grad
                if p is not e[0] or (g is None) != (e[1] is None):
                    return False
                if g is None:
                    continue
                _, slot, pp, dtype, shape, gdtype, st, step_t, counter, view, checked = e
                if p.data_ptr() != pp or p.dtype is not dtype or p.shape != shape or not p.is_contiguous() \
                        or g.dtype is not gdtype or g.shape != shape or g.layout is not strided or not g.is_cpu \
                        or not g.is_contiguous() or state.get(p) is not st or st.get("step") is not step_t \
                        or step_t.data_ptr() != counter:
                    return False
                for name, t, ptr, tdtype, tshape in checked:
                    if st.get(name) is not t or t.data_ptr() != ptr or t.dtype is not tdtype \
                            or t.shape != tshape or not t.is_contiguous():
                        return False
                s = view.value
                if step is None:
                    step = s
                elif s != step:
                    return False
                if slot >= 0:
                    gp = g.data_ptr()
                    if words[slot] != gp:
                        words[slot], moved = gp, True
            if step is not None:
                step = int(step) + 1
                if step >= _MAX_STEP:
                    return False
                counted.append((entries, step))
                if words:
                    calls.append((group, step, words))
        if len(calls) > 1:
            if moved and not plan.overlap_free():
                return False
            for group, _, _ in calls:
                self._check_group(group)
        ctx, ctx_address = plan.ctx, plan.ctx_address
        for i, (group, step, words) in enumerate(calls):
            ctx.step = step
            address, length = words.buffer_info()
            status = self._call(group, ctx_address, address, length // _WORDS)
            if status != 0:
                if i == 0:
                    return False  # nothing written: the checked step says why
                _check(status, self._label, "step")
        for entries, step in counted:
            for e in entries:
                if e[1] is not None:
                    e[9].value = step
        return True

    # LAMB's C kernel has no maximize: the package steps a negated copy of the gradient.
    _negate_for_maximize = False

    @property
    def steps_taken(self):
        """The most steps any parameter has taken; 0 before the first. Each parameter's own count
        is ``state[p]["step"]``, as in torch.optim (a parameter without a gradient in a step is not
        stepped)."""
        return max((int(s["step"].item()) for s in self.state.values() if "step" in s), default=0)

    def _explain_overlap(self):
        """Raises ValueError naming two buffers of this step that share memory."""
        labelled = []
        for group in self.param_groups:
            names = [name for name, _, _ in self._expected(group)]
            for p in group["params"]:
                stream = self._stream_of(p)
                if p.grad is None or p.numel() == 0:
                    continue
                st = self.state[p]
                for name, t in [("parameter", p), ("gradient", p.grad)] + [(k, st[k]) for k in names]:
                    labelled.append((t.data_ptr(), t.data_ptr() + _nbytes(t), stream, name))
        labelled.sort()
        for a, b in zip(labelled, labelled[1:]):
            if b[0] < a[1]:
                raise ValueError(f"{self._name()}: the {a[3]} of parameter {a[2]} and the {b[3]} of parameter "
                                 f"{b[2]} share memory; every buffer of a step must be its own")
        raise ValueError(f"{self._name()}: two buffers of this step share memory")

    def _config(self, cls, values):
        """The address of the ctypes config struct of `values`, which the cache keeps alive while the
        hyperparameters stay the same (a schedule that changes them every step makes one a step; the
        cache is then emptied)."""
        kept = self._configs.get(values)
        if kept is None:
            if len(self._configs) > 64:
                self._configs.clear()
            cfg = cls(*values)
            kept = self._configs[values] = (ctypes.addressof(cfg), cfg)
        return kept[0]

    def _pool(self):
        """The `hs_threads *` steps run on (None: the global pool), made on the first step: torch's OpenMP
        runtime where torch runs on one, else the global pool (threads=None) or a team of its own."""
        if self._threads_wanted is None:
            return _torch_pool()
        if not self._threads:
            n = self._threads_wanted
            lib = library()
            omp = openmp_entry_points() if n > 1 else None
            if n == 1:
                self._threads = lib.hs_threads_new(1)
            elif omp:
                self._threads = lib.hs_threads_openmp(*omp, n)
            else:
                self._threads = lib.hs_threads_calling_thread(n)
            if not self._threads:
                raise ValueError(f"halfstep threads={n}: {lib.hs_last_error().decode(errors='replace')}")
        return self._threads

    # --- state_dict, copies ---------------------------------------------------------------------

    def state_dict(self):
        """torch.optim's layout (`state[i]["step"]`, `"exp_avg"`, ... with compact tensors, and the
        param groups) plus `"halfstep"`: the seed, the storage kinds and the parameters' stream ids
        (in the param groups' order, None where no step has met the parameter). torch.optim's
        optimizers load it (they ignore the trails of split weights), and this one loads theirs."""
        sd = super().state_dict()
        sd["state"] = {i: {k: (v.clone() if isinstance(v, torch.Tensor) and k != "step" else v)
                           for k, v in st.items()} for i, st in sd["state"].items()}
        streams = [self._streams.get(p) for g in self.param_groups for p in g["params"]]
        sd["halfstep"] = {"seed": self.seed, "weights": self.weights, "states": self.states_kind,
                          "streams": streams, "next_stream": self._next_stream}
        return sd

    def load_state_dict(self, state_dict):
        """Loads a `state_dict()` of this class, or of the torch.optim optimizer it mirrors (the seed
        is then the constructor's; trails of split weights start at zero)."""
        state_dict = dict(state_dict)
        hs = state_dict.pop("halfstep", None) or {}
        kinds = (hs.get("weights", self.weights), hs.get("states", self.states_kind))
        if kinds != (self.weights, self.states_kind):
            raise ValueError(f"{self._name()}: the state_dict was saved with weights={kinds[0]!r}, "
                             f"states={kinds[1]!r}; this optimizer has weights={self.weights!r}, "
                             f"states={self.states_kind!r}")
        for group in state_dict["param_groups"]:
            self._check_group({**self.defaults, **{k: v for k, v in group.items() if k != "params"}})
        streams, next_stream = hs.get("streams"), hs.get("next_stream", 0)
        count = sum(len(g["params"]) for g in state_dict["param_groups"])
        if streams is not None:
            ids = [s for s in streams if s is not None]
            if type(next_stream) is not int or len(streams) != count or len(set(ids)) != len(ids) \
                    or not all(type(s) is int and 0 <= s < next_stream for s in ids):
                raise ValueError(f"{self._name()}: the state_dict's stream ids are not one distinct id below "
                                 f"next_stream per parameter: {streams!r}, next_stream {next_stream!r}")
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        # torch casts floating state to the parameter's dtype on load; ours keeps its own dtypes
        # (fp32 moments next to bf16 weights, int16 trails): restore them from the saved values.
        params = {i: p for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = {id(p): g for g in self.param_groups for p in g["params"]}
        for index, st in saved.items():
            p = params[index]
            expected = {name: dtype for name, dtype, _ in self._expected(groups[id(p)])}
            restored = {}
            for k, v in st.items():
                if k == "step":
                    restored[k] = torch.tensor(float(v), dtype=torch.float32)
                elif isinstance(v, torch.Tensor) and k in expected:
                    if v.numel() != p.numel():
                        raise ValueError(f"{self._name()}: state {k!r} of parameter {index} has {v.numel()} "
                                         f"elements, the parameter {p.numel()}")
                    restored[k] = _state_like(p, v.to(expected[k]), expected[k], k)
                elif v is not None:
                    restored[k] = v
            if "step" not in restored:
                # A halfstep checkpoint from before per-parameter steps, or torch.optim.SGD's (no step):
                # a state that exists has been stepped at least once.
                restored["step"] = torch.tensor(float(hs.get("steps_taken", 1)), dtype=torch.float32)
            self.state[p] = restored
        self.seed = _seed(hs.get("seed", self.seed))
        # The saved ids; from a state_dict without them (torch.optim's, or an older halfstep's), the
        # next step gives each parameter its index, as those did.
        self._streams, self._next_stream = {}, 0
        if streams is not None:
            self._streams = {params[i]: s for i, s in enumerate(streams) if s is not None}
            self._next_stream = next_stream

    def __getstate__(self):
        s = super().__getstate__()
        for k in ("weights", "states_kind", "rounding_name", "rounding", "seed", "replica", "_replica_word",
                  "_threads_wanted", "_streams", "_next_stream"):
            s[k] = getattr(self, k)
        return s

    def __setstate__(self, state):
        # The C handles are per object: a copy (pickle, deepcopy) makes its own on first use, while
        # torch's `load_state_dict`, which calls this on the live optimizer, leaves it its own (set to
        # None, they were never freed).
        live = "_threads" in self.__dict__
        super().__setstate__(state)
        if not live:
            self._threads, self._workspace = None, None
        self._layouts, self._configs, self._plan = {}, {}, None
        if "_streams" not in state:  # pickled before stream ids were kept: indices, as then
            self._streams, self._next_stream = {}, 0
        library()

    def __del__(self):
        lib = _lib
        if lib is None:
            return
        if getattr(self, "_workspace", None):
            lib.hs_lamb_workspace_free(self._workspace)
            self._workspace = None
        if getattr(self, "_threads", None):
            lib.hs_threads_free(self._threads)
            self._threads = None


_COMMON_DOC = """
    halfstep's own arguments (keyword-only): ``weights`` ("fp32", "split", "bf16"), ``states``
    ("fp32", "bf16"), ``rounding`` ("stochastic", "nearest": bf16 weights), ``seed`` (int),
    ``replica`` (None or 0..65534), ``threads`` (None or n >= 1); see the package docstring.
    torch.optim's ``foreach`` (None, False), ``fused`` (None, True), ``differentiable`` (False) and,
    where torch.optim has it, ``capturable`` (False) are accepted with the values listed: halfstep's
    step is always one fused CPU call."""


class SGD(_Halfstep):
    __doc__ = """`torch.optim.SGD`: lr, momentum, dampening, weight_decay, nesterov, maximize.

    State per parameter: ``step`` and, with momentum, ``momentum_buffer``.""" + _COMMON_DOC

    _label = "sgd"
    _state_names = (("momentum_buffer", "momentum", lambda g: 0.0),)
    _layout_keys = ("momentum",)

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 *, maximize=False, foreach=None, differentiable=False, fused=None,
                 weights="fp32", states="fp32", rounding="stochastic", seed=0, replica=None, threads=None):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused),
                         weights, states, rounding, seed, replica, threads)

    def _call(self, g, ctx, arr, n):
        cfg = self._config(SgdConfig, (float(g["lr"]), g["momentum"], g["dampening"], g["weight_decay"],
                                       bool(g["nesterov"]), bool(g["maximize"])))
        return _lib.hs_sgd_step(cfg, ctx, arr, n, self._pool() if n else None)


class Adagrad(_Halfstep):
    __doc__ = """`torch.optim.Adagrad`: lr, lr_decay, weight_decay, initial_accumulator_value, eps, maximize.

    State per parameter: ``step`` and ``sum`` (starting at initial_accumulator_value).""" + _COMMON_DOC

    _label = "adagrad"
    _state_names = (("sum", None, lambda g: g["initial_accumulator_value"]),)
    _layout_keys = ("initial_accumulator_value",)

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None,
                 weights="fp32", states="fp32", rounding="stochastic", seed=0, replica=None, threads=None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused),
                         weights, states, rounding, seed, replica, threads)

    def _call(self, g, ctx, arr, n):
        cfg = self._config(AdagradConfig, (float(g["lr"]), g["lr_decay"], g["weight_decay"], g["eps"],
                                           g["initial_accumulator_value"], bool(g["maximize"])))
        return _lib.hs_adagrad_step(cfg, ctx, arr, n, self._pool() if n else None)


class Adam(_Halfstep):
    __doc__ = """`torch.optim.Adam`: lr, betas, eps, weight_decay (L2, added to the gradient; decoupled
    as AdamW's with decoupled_weight_decay=True), amsgrad, maximize.

    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` and, with amsgrad, ``max_exp_avg_sq``.""" \
        + _COMMON_DOC

    _label = "adam"
    _state_names = (("exp_avg", None, lambda g: 0.0), ("exp_avg_sq", None, lambda g: 0.0),
                    ("max_exp_avg_sq", "amsgrad", lambda g: 0.0))
    _layout_keys = ("amsgrad",)
    _switches = ("foreach", "fused", "capturable", "differentiable")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False, weights="fp32", states="fp32", rounding="stochastic", seed=0,
                 replica=None, threads=None):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay),
                         weights, states, rounding, seed, replica, threads)

    def _call(self, g, ctx, arr, n):
        b1, b2 = g["betas"]
        cfg = self._config(AdamConfig, (float(g["lr"]), float(b1), float(b2), g["eps"], g["weight_decay"],
                                        bool(g["decoupled_weight_decay"]), bool(g["amsgrad"]), bool(g["maximize"])))
        return _lib.hs_adam_step(cfg, ctx, arr, n, self._pool() if n else None)


class AdamW(Adam):
    __doc__ = """`torch.optim.AdamW`: lr, betas, eps, weight_decay (decoupled), amsgrad, maximize.

    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` and, with amsgrad, ``max_exp_avg_sq``.""" \
        + _COMMON_DOC

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 *, maximize=False, foreach=None, capturable=False, differentiable=False, fused=None,
                 weights="fp32", states="fp32", rounding="stochastic", seed=0, replica=None, threads=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         foreach=foreach, maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True, weights=weights, states=states,
                         rounding=rounding, seed=seed, replica=replica, threads=threads)


class LAMB(_Halfstep):
    __doc__ = """LAMB (NVLAMB, as IPEX's fused LAMB): the Adam direction plus decoupled weight decay,
    scaled per parameter by the trust ratio ||p|| / ||update||. Arguments as `torch.optim.AdamW`'s
    (lr, betas, eps, weight_decay, maximize) plus max_trust_ratio (None: unbounded).
    ``maximize`` steps the negated gradient (one gradient-sized copy per parameter per step).

    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq``.""" + _COMMON_DOC

    _label = "lamb"
    _state_names = (("exp_avg", None, lambda g: 0.0), ("exp_avg_sq", None, lambda g: 0.0))

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 max_trust_ratio=None, *, maximize=False, foreach=None, differentiable=False, fused=None,
                 weights="fp32", states="fp32", rounding="stochastic", seed=0, replica=None, threads=None):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      max_trust_ratio=max_trust_ratio, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused),
                         weights, states, rounding, seed, replica, threads)

    _negate_for_maximize = True

    def _call(self, g, ctx, arr, n):
        if not self._workspace:
            self._workspace = library().hs_lamb_workspace_new()
            if not self._workspace:
                raise MemoryError("halfstep: cannot allocate a LAMB workspace")
        b1, b2 = g["betas"]
        mtr = g["max_trust_ratio"]
        if mtr is not None and not mtr > 0:
            raise ValueError(f"halfstep.LAMB: max_trust_ratio must be None or > 0, not {mtr!r}")
        cfg = self._config(LambConfig, (float(g["lr"]), float(b1), float(b2), g["eps"], g["weight_decay"],
                                        0.0 if mtr is None else mtr))
        return _lib.hs_lamb_step(cfg, ctx, arr, n, self._pool() if n else None, self._workspace)
