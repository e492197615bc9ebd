//! Optimizer steps: tensor descriptors and configs, group steps converted in stack batches of
//! [`HS_BATCH`], and LAMB's workspace.

use super::*;

/// Tensors converted per batch on the stack by a group step.
pub const HS_BATCH: usize = 32;

/// One buffer: `kind` (`HS_F32`, `HS_BF16`, `HS_SPLIT` for weights), `rounding` (bf16 only),
/// `data` (f32 or 16-bit elements; NULL for an absent optional state), `trail` (split only).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hs_buffer {
    /// `HS_F32`, `HS_BF16` or `HS_SPLIT`.
    pub kind: u32,
    /// `HS_NEAREST_EVEN`, `HS_STOCHASTIC` or `HS_TOWARD_ZERO` (bf16 stores).
    pub rounding: u32,
    /// Element 0.
    pub data: *mut c_void,
    /// Split weights: the trails.
    pub trail: *mut u16,
}

/// One tensor of a group step. `state` by optimizer: SGD `{momentum}`, Adagrad `{sum}`, Adam
/// `{exp_avg, exp_avg_sq, max_exp_avg_sq}`, LAMB `{exp_avg, exp_avg_sq}`; unused ones NULL.
/// No two buffers of a step may share a byte, across all its tensors and with the descriptor
/// array itself (`HS_INVALID_ARGUMENT`).
///
/// Placement (speed only, never the bits): start each state buffer (and the trails) at its own
/// multiple of 768 bytes past its weights' offset within a 4 KiB page, as the PyTorch package
/// does (the k-th at k * 768), and from 4 MiB on also k whole pages into a buffer k pages
/// longer. Buffers a few cache lines apart modulo 1 MiB, or at the same offset in a page on AMD
/// Zen, contend for the same cache sets; large buffers of one size mapped one after another lie
/// at equal distances, which slowed bf16-state steps at 64M elements on Zen 4 (docs/DESIGN.md,
/// "PyTorch package").
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hs_tensor {
    /// Elements in every buffer.
    pub len: usize,
    /// Weights, updated in place.
    pub weights: hs_buffer,
    /// Gradients (read only).
    pub grads: hs_buffer,
    /// Optimizer state buffers.
    pub state: [hs_buffer; 3],
    /// Stream id (< 2^28).
    pub stream_id: u32,
    /// Global index of element 0.
    pub index_base: u64,
}

/// `torch.optim.SGD`'s hyperparameters (booleans as 0/1).
/// Fields as in [`crate::SgdConfig`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct hs_sgd_config {
    pub lr: f32,
    pub momentum: f32,
    pub dampening: f32,
    pub weight_decay: f32,
    pub nesterov: u8,
    pub maximize: u8,
}

/// `torch.optim.Adagrad`'s hyperparameters.
/// Fields as in [`crate::AdagradConfig`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct hs_adagrad_config {
    pub lr: f32,
    pub lr_decay: f32,
    pub weight_decay: f32,
    pub eps: f32,
    pub initial_accumulator_value: f32,
    pub maximize: u8,
}

/// `torch.optim.Adam` / `AdamW` hyperparameters (`decoupled_weight_decay` = 1 for AdamW).
/// Fields as in [`crate::AdamConfig`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct hs_adam_config {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub decoupled_weight_decay: u8,
    pub amsgrad: u8,
    pub maximize: u8,
}

/// LAMB hyperparameters; `max_trust_ratio` <= 0 means no clamp.
/// Fields as in [`crate::LambConfig`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub struct hs_lamb_config {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub max_trust_ratio: f32,
}

/// LAMB's reusable scratch (opaque): `hs_lamb_workspace_new`.
pub struct hs_lamb_workspace(LambWorkspace);

/// Bytes per element of a buffer kind.
pub(super) fn width(kind: u32) -> usize {
    if kind == HS_F32 { 4 } else { 2 }
}

/// The regions of tensor `i`'s buffers, checked as [`region`], appended to `out` (absent
/// optional states add nothing; the kinds are checked later, by [`FromC::tensor`]).
pub(super) fn tensor_regions(t: &hs_tensor, i: usize, out: &mut Vec<Region>) -> Result<(), Fail> {
    let name = |buffer| Name {
        tensor: Some(i),
        buffer,
    };
    let mut add = |p: *const c_void, kind: u32, buffer: &'static str| -> Result<(), Fail> {
        let r = if width(kind) == 4 {
            region(p.cast::<f32>(), t.len, name(buffer))?
        } else {
            region(p.cast::<u16>(), t.len, name(buffer))?
        };
        out.push(r);
        Ok(())
    };
    add(t.weights.data, t.weights.kind, "weights")?;
    if t.weights.kind == HS_SPLIT {
        add(t.weights.trail.cast(), HS_BF16, "trail")?;
    }
    add(t.grads.data, t.grads.kind, "grads")?;
    for (s, buffer) in t.state.iter().zip(["state[0]", "state[1]", "state[2]"]) {
        if !s.data.is_null() {
            add(s.data, s.kind, buffer)?;
        }
    }
    Ok(())
}

thread_local! {
    /// A group step's buffer regions, kept between calls so that a step allocates only when a
    /// larger group than any before arrives on the thread.
    pub(super) static REGIONS: RefCell<Vec<Region>> = const { RefCell::new(Vec::new()) };
}

/// Every buffer of a group step and the descriptor array itself: lengths, pointers, and no two
/// sharing a byte (the descriptors are read again between batches, so no weight may overlap them).
pub(super) fn check_group(descs: &[hs_tensor], own: Region) -> Result<(), Fail> {
    REGIONS.with(|cell| {
        let mut regions = cell.borrow_mut();
        regions.clear();
        regions.push(own);
        for (i, d) in descs.iter().enumerate() {
            tensor_regions(d, i, &mut regions)?;
        }
        disjoint(&mut regions)
    })
}

pub(super) unsafe fn weights<'a>(b: &hs_buffer, len: usize) -> Result<Weights<'a>, Fail> {
    unsafe {
        match b.kind {
            HS_F32 => {
                check_ptr(b.data.cast::<f32>(), len, "weights")?;
                Ok(Weights::F32(slice_mut(b.data.cast(), len)))
            }
            HS_BF16 => {
                check_ptr(b.data.cast::<bf16>(), len, "weights")?;
                Ok(Weights::Bf16(
                    slice_mut(b.data.cast(), len),
                    rounding(b.rounding)?,
                ))
            }
            HS_SPLIT => {
                check_ptr(b.data.cast::<bf16>(), len, "weights")?;
                check_ptr(b.trail, len, "trail")?;
                Ok(Weights::Split {
                    top: slice_mut(b.data.cast(), len),
                    trail: slice_mut(b.trail, len),
                })
            }
            k => Err(invalid(format!("unknown weights kind {k}"))),
        }
    }
}

pub(super) unsafe fn grads<'a>(b: &hs_buffer, len: usize) -> Result<Grads<'a>, Fail> {
    unsafe {
        match b.kind {
            HS_F32 => {
                check_ptr(b.data.cast::<f32>(), len, "grads")?;
                Ok(Grads::F32(slice(b.data.cast(), len)))
            }
            HS_BF16 => {
                check_ptr(b.data.cast::<bf16>(), len, "grads")?;
                Ok(Grads::Bf16(slice(b.data.cast(), len)))
            }
            k => Err(invalid(format!("unknown grads kind {k}"))),
        }
    }
}

/// A state buffer; `None` when `data` is NULL (absent).
pub(super) unsafe fn state<'a>(
    b: &hs_buffer,
    len: usize,
    name: &'static str,
) -> Result<Option<State<'a>>, Fail> {
    if b.data.is_null() {
        return Ok(None);
    }
    unsafe {
        match b.kind {
            HS_F32 => {
                check_ptr(b.data.cast::<f32>(), len, name)?;
                Ok(Some(State::F32(slice_mut(b.data.cast(), len))))
            }
            HS_BF16 => {
                check_ptr(b.data.cast::<bf16>(), len, name)?;
                Ok(Some(State::Bf16(
                    slice_mut(b.data.cast(), len),
                    rounding(b.rounding)?,
                )))
            }
            k => Err(invalid(format!("unknown {name} kind {k}"))),
        }
    }
}

/// A state buffer the optimizer cannot do without: present, or `StateMismatch`.
pub(super) unsafe fn required_state<'a>(
    b: &hs_buffer,
    len: usize,
    name: &'static str,
) -> Result<State<'a>, Fail> {
    match unsafe { state(b, len, name)? } {
        Some(s) => Ok(s),
        None => Err(Fail::from(Error::StateMismatch {
            buffer: name,
            required: true,
        })),
    }
}

/// How one optimizer's tensors are built from descriptors.
pub(super) trait FromC: Step {
    unsafe fn tensor<'a>(t: &hs_tensor) -> Result<Self::Tensor<'a>, Fail>;
}

pub(super) fn stream(t: &hs_tensor) -> TensorStream {
    stream_of(t.stream_id, t.index_base)
}

pub(super) fn stream_of(id: u32, index_base: u64) -> TensorStream {
    TensorStream { id, index_base }
}

impl FromC for SgdConfig {
    unsafe fn tensor<'a>(t: &hs_tensor) -> Result<SgdTensor<'a>, Fail> {
        unsafe {
            Ok(SgdTensor {
                weights: weights(&t.weights, t.len)?,
                grads: grads(&t.grads, t.len)?,
                momentum: state(&t.state[0], t.len, "momentum")?,
                stream: stream(t),
            })
        }
    }
}

impl FromC for AdagradConfig {
    unsafe fn tensor<'a>(t: &hs_tensor) -> Result<AdagradTensor<'a>, Fail> {
        unsafe {
            Ok(AdagradTensor {
                weights: weights(&t.weights, t.len)?,
                grads: grads(&t.grads, t.len)?,
                sum: required_state(&t.state[0], t.len, "sum")?,
                stream: stream(t),
            })
        }
    }
}

impl FromC for AdamConfig {
    unsafe fn tensor<'a>(t: &hs_tensor) -> Result<AdamTensor<'a>, Fail> {
        unsafe {
            Ok(AdamTensor {
                weights: weights(&t.weights, t.len)?,
                grads: grads(&t.grads, t.len)?,
                exp_avg: required_state(&t.state[0], t.len, "exp_avg")?,
                exp_avg_sq: required_state(&t.state[1], t.len, "exp_avg_sq")?,
                max_exp_avg_sq: state(&t.state[2], t.len, "max_exp_avg_sq")?,
                stream: stream(t),
            })
        }
    }
}

impl FromC for LambConfig {
    unsafe fn tensor<'a>(t: &hs_tensor) -> Result<LambTensor<'a>, Fail> {
        unsafe {
            Ok(LambTensor {
                weights: weights(&t.weights, t.len)?,
                grads: grads(&t.grads, t.len)?,
                exp_avg: required_state(&t.state[0], t.len, "exp_avg")?,
                exp_avg_sq: required_state(&t.state[1], t.len, "exp_avg_sq")?,
                stream: stream(t),
            })
        }
    }
}

/// The group step every optimizer entry point runs: all descriptors checked (pointers, overlap,
/// then the Rust checks) before any tensor is stepped; then stepped in stack batches.
pub(super) unsafe fn group_step<C: FromC>(
    config: &C,
    ctx: *const hs_step_context,
    tensors: *mut hs_tensor,
    count: usize,
    threads: *const hs_threads,
    ws: &mut C::Workspace,
) -> Result<(), Fail> {
    let ctx = context(ctx)?;
    let own = region(tensors.cast_const(), count, arg("tensors"))?;
    let descs = unsafe { slice(tensors, count) };
    let threads = match unsafe { threads.as_ref() } {
        Some(t) => &t.0,
        None => &Threads::global(),
    };
    let engine = engine()?;
    config.validate()?;
    check_group(descs, own)?;
    for d in descs {
        let t = unsafe { C::tensor(d)? };
        config.check_tensor(&t)?;
    }
    // Every check passed for every tensor: a batch fails only on a bug.
    for chunk in descs.chunks(HS_BATCH) {
        let mut batch: ArrayVec<C::Tensor<'_>, HS_BATCH> = ArrayVec::new();
        for d in chunk {
            batch.push(unsafe { C::tensor(d)? });
        }
        C::reserve(ws, &batch);
        engine.step_group(config, &ctx, &mut batch, ws, threads)?;
    }
    Ok(())
}

pub(super) fn nonzero(b: u8) -> bool {
    b != 0
}

/// One SGD step over `count` tensors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_sgd_step(
    config: *const hs_sgd_config,
    ctx: *const hs_step_context,
    tensors: *mut hs_tensor,
    count: usize,
    threads: *const hs_threads,
) -> hs_status {
    guard(|| {
        let c = unsafe { required_ref(config, "config")? };
        let cfg = SgdConfig {
            lr: c.lr,
            momentum: c.momentum,
            dampening: c.dampening,
            weight_decay: c.weight_decay,
            nesterov: nonzero(c.nesterov),
            maximize: nonzero(c.maximize),
        };
        unsafe { group_step(&cfg, ctx, tensors, count, threads, &mut ()) }
    })
}

/// One Adagrad step over `count` tensors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_adagrad_step(
    config: *const hs_adagrad_config,
    ctx: *const hs_step_context,
    tensors: *mut hs_tensor,
    count: usize,
    threads: *const hs_threads,
) -> hs_status {
    guard(|| {
        let c = unsafe { required_ref(config, "config")? };
        let cfg = AdagradConfig {
            lr: c.lr,
            lr_decay: c.lr_decay,
            weight_decay: c.weight_decay,
            eps: c.eps,
            initial_accumulator_value: c.initial_accumulator_value,
            maximize: nonzero(c.maximize),
        };
        unsafe { group_step(&cfg, ctx, tensors, count, threads, &mut ()) }
    })
}

/// One Adam / AdamW step over `count` tensors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_adam_step(
    config: *const hs_adam_config,
    ctx: *const hs_step_context,
    tensors: *mut hs_tensor,
    count: usize,
    threads: *const hs_threads,
) -> hs_status {
    guard(|| {
        let c = unsafe { required_ref(config, "config")? };
        let cfg = AdamConfig {
            lr: c.lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: c.weight_decay,
            decoupled_weight_decay: nonzero(c.decoupled_weight_decay),
            amsgrad: nonzero(c.amsgrad),
            maximize: nonzero(c.maximize),
        };
        unsafe { group_step(&cfg, ctx, tensors, count, threads, &mut ()) }
    })
}

/// One LAMB step over `count` tensors (trust ratio per tensor), with the caller's workspace.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_lamb_step(
    config: *const hs_lamb_config,
    ctx: *const hs_step_context,
    tensors: *mut hs_tensor,
    count: usize,
    threads: *const hs_threads,
    workspace: *mut hs_lamb_workspace,
) -> hs_status {
    guard(|| {
        let c = unsafe { required_ref(config, "config")? };
        let ws = unsafe { required_mut(workspace, "workspace")? };
        let cfg = LambConfig {
            lr: c.lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: c.weight_decay,
            max_trust_ratio: (c.max_trust_ratio > 0.0 || c.max_trust_ratio.is_nan())
                .then_some(c.max_trust_ratio),
        };
        unsafe { group_step(&cfg, ctx, tensors, count, threads, &mut ws.0) }
    })
}

/// A new, empty LAMB workspace (grows on the first step of a larger group). Free with
/// `hs_lamb_workspace_free`.
#[unsafe(no_mangle)]
pub extern "C" fn hs_lamb_workspace_new() -> *mut hs_lamb_workspace {
    guard_new(|| Ok(hs_lamb_workspace(LambWorkspace::default())))
}

/// Frees a workspace (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_lamb_workspace_free(workspace: *mut hs_lamb_workspace) {
    if !workspace.is_null() {
        drop(unsafe { Box::from_raw(workspace) });
    }
}
