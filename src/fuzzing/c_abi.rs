//! The C ABI's optimizer steps (feature `capi`): descriptors decoded from the input — storage kinds
//! and roundings (unknown ones too), NULL, misaligned and overlapping pointers (into another
//! buffer or the descriptor array), lengths, stream ids, index bases, contexts, hyperparameters
//! and flags, threads and LAMB's workspace — over one arena of bytes, called once per backend
//! (`hs_force_backend`). Each call must return a status other than `HS_PANIC`; a refused call must
//! leave every byte of the arena and the descriptors as they were and say why in `hs_last_error`
//! (an accepted one leaves it empty); every backend must return the reference's status and bytes.

// The entry points under test take raw pointers.
#![allow(unsafe_code)]

use super::*;
use crate::capi::*;
use rand_core::{Rng, SeedableRng};
use std::ffi::{CStr, CString, c_void};
use std::sync::Mutex;

/// Most tensors in a case's group.
const MAX_TENSORS: usize = 4;
/// Most elements per tensor: four of them outgrow a team's smallest grain (2048), so some groups
/// are cut into pieces.
const MAX_LEN: usize = 600;
/// Bytes each buffer's region of the arena spans beyond its f32 elements, so a pointer moved
/// off its alignment or a few words into another buffer ([`Ptr`]) still has its elements inside
/// the arena.
const PAD: usize = 64;
/// Buffers per tensor: weights, trail, grads, three states.
const BUFFERS: usize = 6;

/// The entry point and its config.
#[derive(Clone, Copy, Debug)]
enum Op {
    Sgd(hs_sgd_config),
    Adagrad(hs_adagrad_config),
    Adam(hs_adam_config),
    Lamb(hs_lamb_config),
}

/// Where a descriptor's pointer goes.
#[derive(Clone, Copy, Debug)]
enum Ptr {
    /// Its own region of the arena.
    Own,
    /// NULL.
    Null,
    /// Its own region, `k` bytes on (1..=3: misaligned for f32, and for 16-bit when odd).
    Shifted(usize),
    /// The region of buffer `b` of tensor `t`, `k` 4-byte words in (a shared byte with it).
    Into { t: usize, b: usize, k: usize },
    /// The descriptor array.
    Descriptors,
}

/// One tensor's descriptor: per buffer (weights, trail, grads, three states) a kind, a rounding
/// and a pointer.
#[derive(Clone, Copy, Debug)]
struct Desc {
    len: usize,
    kinds: [u32; BUFFERS],
    roundings: [u32; BUFFERS],
    ptrs: [Ptr; BUFFERS],
    stream_id: u32,
    index_base: u64,
}

/// Where the step runs: NULL (rayon's global pool), the calling thread alone, or a team of 2 with
/// the smallest grain.
#[derive(Clone, Copy, Debug)]
enum Where {
    Global,
    CallingThread,
    Team,
}

/// One decoded call.
#[derive(Clone, Debug)]
struct CCase {
    op: Op,
    descs: Vec<Desc>,
    /// The call's `count` (at most the descriptors' number; 0 with NULL descriptors too).
    count: usize,
    /// NULL in place of the config, the context, the descriptors, LAMB's workspace.
    null: [bool; 4],
    ctx: hs_step_context,
    threads: Where,
    seed: u64,
}

fn kind(u: &mut Unstructured<'_>, usual: &[u32]) -> AResult<u32> {
    Ok(match u.int_in_range(0u8..=15)? {
        0 => u32::arbitrary(u)?,
        1 => [HS_F32, HS_BF16, HS_SPLIT, 3][u.choose_index(4)?],
        _ => usual[u.choose_index(usual.len())?],
    })
}

fn ptr(u: &mut Unstructured<'_>, tensors: usize) -> AResult<Ptr> {
    Ok(match u.int_in_range(0u8..=40)? {
        0 => Ptr::Null,
        1 => Ptr::Shifted(u.int_in_range(1usize..=3)?),
        2 => Ptr::Into {
            t: u.choose_index(tensors)?,
            b: u.choose_index(BUFFERS)?,
            k: u.int_in_range(0usize..=8)?,
        },
        3 => Ptr::Descriptors,
        _ => Ptr::Own,
    })
}

fn flag(u: &mut Unstructured<'_>) -> AResult<u8> {
    Ok(if u.ratio(1, 16)? {
        u8::arbitrary(u)?
    } else {
        u8::from(bool::arbitrary(u)?)
    })
}

fn op(u: &mut Unstructured<'_>) -> AResult<Op> {
    // The Rust API's configs, decoded as the optimizer targets decode them.
    Ok(match u.int_in_range(0u8..=3)? {
        0 => {
            let OptimizerStep::Sgd(c, _) = sgd_step(u)? else {
                unreachable!()
            };
            Op::Sgd(hs_sgd_config {
                lr: c.lr,
                momentum: c.momentum,
                dampening: c.dampening,
                weight_decay: c.weight_decay,
                nesterov: flag(u)?,
                maximize: flag(u)?,
            })
        }
        1 => {
            let OptimizerStep::Adagrad(c) = adagrad_step(u)? else {
                unreachable!()
            };
            Op::Adagrad(hs_adagrad_config {
                lr: c.lr,
                lr_decay: c.lr_decay,
                weight_decay: c.weight_decay,
                eps: c.eps,
                initial_accumulator_value: c.initial_accumulator_value,
                maximize: flag(u)?,
            })
        }
        2 => {
            let OptimizerStep::Adam(c, _) = adam_step(u)? else {
                unreachable!()
            };
            Op::Adam(hs_adam_config {
                lr: c.lr,
                beta1: c.beta1,
                beta2: c.beta2,
                eps: c.eps,
                weight_decay: c.weight_decay,
                decoupled_weight_decay: flag(u)?,
                amsgrad: flag(u)?,
                maximize: flag(u)?,
            })
        }
        _ => {
            let OptimizerStep::Lamb(c) = lamb_step(u)? else {
                unreachable!()
            };
            Op::Lamb(hs_lamb_config {
                lr: c.lr,
                beta1: c.beta1,
                beta2: c.beta2,
                eps: c.eps,
                weight_decay: c.weight_decay,
                // <= 0 (or -0) for none, as C callers pass it.
                max_trust_ratio: c.max_trust_ratio.unwrap_or(if bool::arbitrary(u)? {
                    0.0
                } else {
                    -1.0
                }),
            })
        }
    })
}

/// The states a valid call passes for `op`.
fn states(op: &Op) -> [bool; 3] {
    match op {
        Op::Sgd(c) => [c.momentum != 0.0, false, false],
        Op::Adagrad(_) => [true, false, false],
        Op::Adam(c) => [true, true, c.amsgrad != 0],
        Op::Lamb(_) => [true, true, false],
    }
}

fn c_case(u: &mut Unstructured<'_>) -> AResult<CCase> {
    let op = op(u)?;
    let n = u.int_in_range(0usize..=MAX_TENSORS)?;
    let mut present = states(&op);
    if u.ratio(1, 8)? {
        let i = u.choose_index(3)?;
        present[i] = !present[i];
    }
    let mut descs = Vec::with_capacity(n);
    for _ in 0..n {
        let len = match u.int_in_range(0u8..=7)? {
            0 => 0,
            1 => u.int_in_range(1usize..=40)?,
            _ => u.int_in_range(1usize..=MAX_LEN)?,
        };
        let w = kind(u, &[HS_F32, HS_SPLIT, HS_BF16])?;
        let s = kind(u, &[HS_F32, HS_BF16])?;
        let rounding = |u: &mut Unstructured<'_>| -> AResult<u32> {
            Ok(if u.ratio(1, 16)? {
                u32::arbitrary(u)?
            } else {
                u.int_in_range(HS_NEAREST_EVEN..=HS_TOWARD_ZERO)?
            })
        };
        let mut kinds = [w, HS_BF16, kind(u, &[HS_F32, HS_BF16])?, s, s, s];
        if u.ratio(1, 4)? {
            // States of different kinds.
            for k in &mut kinds[3..] {
                *k = kind(u, &[HS_F32, HS_BF16])?;
            }
        }
        let mut roundings = [HS_NEAREST_EVEN; BUFFERS];
        for r in &mut roundings {
            *r = rounding(u)?;
        }
        let mut ptrs = [Ptr::Own; BUFFERS];
        for (b, p) in ptrs.iter_mut().enumerate() {
            *p = ptr(u, n)?;
            if b >= 3 && !present[b - 3] && !matches!(*p, Ptr::Into { .. }) {
                *p = Ptr::Null;
            }
        }
        let TensorStream { id, index_base } = stream(u, len)?;
        descs.push(Desc {
            len,
            kinds,
            roundings,
            ptrs,
            stream_id: id,
            index_base,
        });
    }
    let count = if u.ratio(1, 16)? {
        u.int_in_range(0usize..=n)?
    } else {
        n
    };
    // config, context, descriptors, LAMB's workspace: NULL rarely.
    let mut null = [false; 4];
    for x in &mut null {
        // (Input run out reads as a ratio's success: as given then.)
        *x = !u.ratio(39, 40)?;
    }
    let step = step(u)?;
    let replica = match u.int_in_range(0u8..=5)? {
        0 => u32::arbitrary(u)?,
        1 => 65534,
        2 => 65535,
        3 => u32::from(u8::arbitrary(u)?),
        _ => HS_REPLICA_IDENTICAL,
    };
    let threads = [Where::Global, Where::CallingThread, Where::Team][u.choose_index(3)?];
    Ok(CCase {
        op,
        descs,
        count,
        null,
        ctx: hs_step_context {
            seed: u64::arbitrary(u)?,
            step,
            replica,
        },
        threads,
        seed: u64::arbitrary(u)?,
    })
}

/// The arena's values: mostly ordinary numbers, some specials and raw bits (the crate's Philox
/// generator from the case's seed, so a case's bytes stay few however long its tensors).
fn fill(arena: &mut [u32], seed: u64) {
    let mut r = crate::PhiloxRng::seed_from_u64(seed);
    for x in arena {
        let z = r.next_u64();
        *x = match z % 8 {
            0 => SPECIALS[(z >> 8) as usize % SPECIALS.len()],
            1 => (z >> 32) as u32,
            // 2^-20 .. 2^11, either sign.
            _ => ((z >> 32) as u32 & 0x807F_FFFF) | ((107 + (z >> 3) as u32 % 32) << 23),
        };
    }
}

/// One call's outcome: status, `hs_last_error`, the arena's words after it, and whether it left
/// the arena and the descriptors as they were.
struct Outcome {
    status: hs_status,
    message: String,
    arena: Vec<u32>,
    arena_kept: bool,
    descs_kept: bool,
}

/// The descriptors' fields (not their padding bytes), to see that a call left them alone.
fn fields(descs: &[hs_tensor]) -> Vec<u64> {
    let mut out = Vec::new();
    for d in descs {
        out.extend([d.len as u64, u64::from(d.stream_id), d.index_base]);
        for b in [&d.weights, &d.grads, &d.state[0], &d.state[1], &d.state[2]] {
            out.extend([u64::from(b.kind), u64::from(b.rounding)]);
            out.extend([b.data.addr() as u64, b.trail.addr() as u64]);
        }
    }
    out
}

/// `p`, or NULL where the case says so.
fn or_null<T>(null: bool, p: &T) -> *const T {
    if null { std::ptr::null() } else { p }
}

/// Runs the case once on the backend in force, on a fresh arena and descriptors.
fn call(c: &CCase) -> Outcome {
    // Each buffer's region: MAX_LEN f32 elements and the pad, in words.
    let region = (MAX_LEN * 4 + PAD) / 4;
    let mut arena = vec![0u32; c.descs.len() * BUFFERS * region];
    fill(&mut arena, c.seed);
    let before = arena.clone();
    let base = arena.as_mut_ptr();
    let mut descs: Vec<hs_tensor> = Vec::with_capacity(c.descs.len());
    let descs_at = descs.as_mut_ptr();
    // Inside the arena: `t < descs.len()`, `b < BUFFERS`, and a shift or `k` short of the pad.
    let at = |t: usize, b: usize| base.wrapping_add((t * BUFFERS + b) * region);
    for (t, d) in c.descs.iter().enumerate() {
        let p = |b: usize| -> *mut c_void {
            match d.ptrs[b] {
                Ptr::Own => at(t, b).cast(),
                Ptr::Null => std::ptr::null_mut(),
                Ptr::Shifted(k) => at(t, b).cast::<u8>().wrapping_add(k).cast(),
                Ptr::Into { t, b, k } => at(t, b).wrapping_add(k).cast(),
                Ptr::Descriptors => descs_at.cast(),
            }
        };
        let buffer = |b: usize, data: *mut c_void, trail: *mut u16| hs_buffer {
            kind: d.kinds[b],
            rounding: d.roundings[b],
            data,
            trail,
        };
        let none = std::ptr::null_mut();
        descs.push(hs_tensor {
            len: d.len,
            weights: buffer(0, p(0), p(1).cast()),
            grads: buffer(2, p(2), none),
            state: [
                buffer(3, p(3), none),
                buffer(4, p(4), none),
                buffer(5, p(5), none),
            ],
            stream_id: d.stream_id,
            index_base: d.index_base,
        });
    }
    let descs_before = fields(&descs);
    let threads = match c.threads {
        Where::Global => std::ptr::null_mut(),
        Where::CallingThread => hs_threads_new(1),
        Where::Team => {
            let t = hs_threads_calling_thread(2);
            assert_eq!(unsafe { hs_threads_set_grain(t, 1) }, hs_status::HS_OK);
            t
        }
    };
    let workspace = if c.null[3] {
        std::ptr::null_mut()
    } else {
        hs_lamb_workspace_new()
    };
    let ctx = or_null(c.null[1], &c.ctx);
    let tensors = if c.null[2] {
        std::ptr::null_mut()
    } else {
        descs.as_mut_ptr()
    };
    let (n, no_config) = (c.count, c.null[0]);
    let status = unsafe {
        match &c.op {
            Op::Sgd(k) => hs_sgd_step(or_null(no_config, k), ctx, tensors, n, threads),
            Op::Adagrad(k) => hs_adagrad_step(or_null(no_config, k), ctx, tensors, n, threads),
            Op::Adam(k) => hs_adam_step(or_null(no_config, k), ctx, tensors, n, threads),
            Op::Lamb(k) => hs_lamb_step(or_null(no_config, k), ctx, tensors, n, threads, workspace),
        }
    };
    let message = unsafe { CStr::from_ptr(hs_last_error()) }
        .to_string_lossy()
        .into_owned();
    unsafe {
        hs_lamb_workspace_free(workspace);
        hs_threads_free(threads);
    }
    Outcome {
        status,
        message,
        arena_kept: arena == before,
        descs_kept: fields(&descs) == descs_before,
        arena,
    }
}

/// One call at a time: `hs_force_backend` is the process's.
static FORCING: Mutex<()> = Mutex::new(());

pub(super) fn c_abi(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let c = c_case(u)?;
    let _one = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let mut outcomes = Vec::new();
    for b in Backend::available() {
        let name = CString::new(b.name()).expect("backend names hold no NUL");
        assert_eq!(unsafe { hs_force_backend(name.as_ptr()) }, hs_status::HS_OK);
        outcomes.push((b, call(&c)));
    }
    assert_eq!(
        unsafe { hs_force_backend(c"auto".as_ptr()) },
        hs_status::HS_OK
    );
    Ok(judge(&c, &outcomes))
}

fn judge(c: &CCase, outcomes: &[(Backend, Outcome)]) -> Result<(), String> {
    let (_, want) = outcomes
        .iter()
        .find(|(b, _)| *b == Backend::Reference)
        .expect("the reference is always available");
    // Of several overlaps the message names the first by address; the descriptor array's place
    // beside the arena's differs between calls.
    let same_order = !c
        .descs
        .iter()
        .flat_map(|d| d.ptrs)
        .any(|p| matches!(p, Ptr::Descriptors));
    for (b, o) in outcomes {
        let b = b.name();
        if o.status == hs_status::HS_PANIC {
            return Err(format!("{b}: HS_PANIC: {}\ncase: {c:#?}", o.message));
        }
        if (o.status == hs_status::HS_OK) != o.message.is_empty() {
            return Err(format!(
                "{b}: {:?} with hs_last_error {:?}\ncase: {c:#?}",
                o.status, o.message
            ));
        }
        if !o.descs_kept || (o.status != hs_status::HS_OK && !o.arena_kept) {
            return Err(format!(
                "{b}: {:?} ({}), and the call wrote to {}\ncase: {c:#?}",
                o.status,
                o.message,
                if o.descs_kept {
                    "its buffers"
                } else {
                    "the descriptors"
                }
            ));
        }
        if o.status != want.status || (same_order && o.message != want.message) {
            return Err(format!(
                "{b}: {:?} ({:?}), reference {:?} ({:?})\ncase: {c:#?}",
                o.status, o.message, want.status, want.message
            ));
        }
        if let Some(i) = o.arena.iter().zip(&want.arena).position(|(x, y)| x != y) {
            return Err(format!(
                "{b}: arena word {i} is {:#010x}, reference {:#010x}\ncase: {c:#?}",
                o.arena[i], want.arena[i]
            ));
        }
    }
    Ok(())
}
