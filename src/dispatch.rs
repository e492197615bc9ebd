//! Backend selection: detect once, cache the kernel table, allow forcing one backend through
//! `HALFSTEP_BACKEND` or through [`Engine::new`] (so tests and benchmarks can run any available
//! backend without touching a global). A forced backend that is unknown or unavailable is an
//! error, never a silent fallback.

#![allow(unsafe_code)]

use crate::cpu::{ALL_BACKENDS, Backend};
use crate::error::{Error, Result};
use crate::kernels::optim::StepLen;
use crate::reference::adagrad::AdagradConsts;
use crate::reference::adam::AdamConsts;
use crate::reference::bits::BitsCoord;
use crate::reference::lamb::LambConsts;
use crate::reference::quant::{Fp4Scaling, Fp8};
use crate::reference::round::Rounding;
use crate::reference::sgd::SgdConsts;
use crate::rng::StepContext;
use crate::tensors::{AdagradTensor, AdamTensor, LambTensor, SgdTensor};
use std::sync::OnceLock;

impl Backend {
    /// Parses a backend name (as [`Backend::name`] gives).
    pub fn from_name(name: &str) -> Result<Backend> {
        ALL_BACKENDS
            .into_iter()
            .find(|b| b.name() == name.trim().to_ascii_lowercase())
            .ok_or_else(|| Error::UnknownBackend {
                name: name.to_string(),
            })
    }

    fn kernels(self) -> Option<&'static Kernels> {
        if !self.is_available() {
            return None;
        }
        match self {
            Backend::Reference => Some(&reference::TABLE),
            Backend::Portable => Some(&portable::TABLE),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => Some(&avx2::TABLE),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512 => Some(&avx512::TABLE),
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => Some(&neon::TABLE),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

/// (scaling, src, packed, scales, rounding, RNG coordinates, index base).
type QuantizeFp4 = fn(Fp4Scaling, &[f32], &mut [u8], &mut [u8], Rounding, &BitsCoord, u64);

/// LAMB pass 1: (constants, context, tensor piece, block sums out, where to keep each element's
/// direction u for pass 2, if anywhere, the whole step's length).
type LambPass1 = fn(
    &LambConsts,
    &StepContext,
    &mut LambTensor<'_>,
    &mut [[f64; 2]],
    Option<&mut [f32]>,
    StepLen,
);

/// LAMB pass 2: (constants, context, tensor piece, lr × trust ratio, the directions pass 1 kept,
/// else u is recomputed from the stored moments, the whole step's length).
type LambPass2 = fn(&LambConsts, &StepContext, &mut LambTensor<'_>, f32, Option<&[f32]>, StepLen);

/// One implementation of every kernel. The callers have validated everything; these only compute.
/// The optimizer steps' last argument is the length of the whole step the call is a piece of
/// ([`Engine::for_step`]): it decides only where some CPUs prefetch, never a bit.
pub(crate) struct Kernels {
    pub fill_bits: fn(&BitsCoord, u64, &mut [u16]),
    pub f32_to_bf16: fn(&[f32], &mut [u16], Rounding, &BitsCoord, u64),
    pub f32_to_f16: fn(&[f32], &mut [u16], Rounding, &BitsCoord, u64),
    pub bf16_to_f32: fn(&[u16], &mut [f32]),
    pub f16_to_f32: fn(&[u16], &mut [f32]),
    pub split: fn(&[f32], &mut [u16], &mut [u16]),
    pub combine: fn(&[u16], &[u16], &mut [f32]),
    pub sgd: fn(&SgdConsts, &StepContext, &mut SgdTensor<'_>, StepLen),
    pub adagrad: fn(&AdagradConsts, &StepContext, &mut AdagradTensor<'_>, StepLen),
    pub adam: fn(&AdamConsts, &StepContext, &mut AdamTensor<'_>, StepLen),
    pub lamb_pass1: LambPass1,
    pub lamb_pass2: LambPass2,
    pub f32_to_fp8: fn(Fp8, &[f32], &mut [u8], Rounding, &BitsCoord, u64),
    pub fp8_to_f32: fn(Fp8, &[u8], &mut [f32]),
    pub amax_bits: fn(&[f32]) -> u32,
    pub quantize_fp4: QuantizeFp4,
    pub dequantize_fp4: fn(Fp4Scaling, &[u8], &[u8], &mut [f32]),
}

/// A chosen backend; every operation of the crate is available on it. Cheap to copy.
#[derive(Clone, Copy)]
pub struct Engine {
    backend: Backend,
    pub(crate) k: &'static Kernels,
    /// The length of the group step this engine's optimizer kernels run pieces of
    /// ([`Engine::for_step`]); 0 otherwise.
    step_len: StepLen,
}

impl core::fmt::Debug for Engine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.backend)
            .finish()
    }
}

impl PartialEq for Engine {
    fn eq(&self, other: &Engine) -> bool {
        self.backend == other.backend
    }
}

/// The environment variable that forces a backend for the process.
pub const BACKEND_ENV: &str = "HALFSTEP_BACKEND";

impl Engine {
    /// An engine on `backend`; fails if this CPU cannot run it.
    pub fn new(backend: Backend) -> Result<Engine> {
        backend
            .kernels()
            .map(|k| Engine {
                backend,
                k,
                step_len: StepLen(0),
            })
            .ok_or(Error::BackendUnavailable { backend })
    }

    /// The process-wide engine: `HALFSTEP_BACKEND` if set (an unknown or unavailable value is an
    /// error on every call), otherwise the fastest available backend. Decided once.
    pub fn global() -> Result<Engine> {
        static GLOBAL: OnceLock<Result<Engine>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Engine::from_setting(std::env::var(BACKEND_ENV).ok().as_deref()))
            .clone()
    }

    /// The engine a `HALFSTEP_BACKEND` value selects: unset, empty or `auto` detects the fastest
    /// backend; a backend name selects it if this CPU can run it; anything else is an error.
    pub fn from_setting(value: Option<&str>) -> Result<Engine> {
        match value.map(str::trim) {
            None | Some("") | Some("auto") => Engine::new(Backend::detect()),
            Some(name) => Engine::new(Backend::from_name(name)?),
        }
    }

    /// The backend this engine runs.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// This engine, for the pieces of a group step of `elements` in all.
    pub(crate) fn for_step(self, elements: usize) -> Engine {
        Engine {
            step_len: StepLen(elements),
            ..self
        }
    }

    /// The length of the step this engine runs pieces of ([`Engine::for_step`]).
    pub(crate) fn step_len(&self) -> StepLen {
        self.step_len
    }
}

/// The reference as a kernel table.
mod reference {
    use super::*;
    use crate::reference::{bits, quant, round, split};

    fn narrow(
        src: &[f32],
        dst: &mut [u16],
        r: Rounding,
        c: &BitsCoord,
        base: u64,
        f: fn(f32, round::Mode) -> u16,
    ) {
        for (i, (d, &x)) in dst.iter_mut().zip(src).enumerate() {
            *d = f(x, mode(r, c, base, i));
        }
    }

    pub(crate) static TABLE: Kernels = Kernels {
        fill_bits: |c, base, out| {
            out.iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = bits::element_bits(c, base + i as u64))
        },
        f32_to_bf16: |s, d, r, c, b| narrow(s, d, r, c, b, round::f32_to_bf16),
        f32_to_f16: |s, d, r, c, b| narrow(s, d, r, c, b, round::f32_to_f16),
        bf16_to_f32: |s, d| {
            d.iter_mut()
                .zip(s)
                .for_each(|(d, &h)| *d = round::bf16_to_f32(h))
        },
        f16_to_f32: |s, d| {
            d.iter_mut()
                .zip(s)
                .for_each(|(d, &h)| *d = round::f16_to_f32(h))
        },
        split: |s, t, l| {
            for ((t, l), &x) in t.iter_mut().zip(l.iter_mut()).zip(s) {
                let (top, trail) = split::split_one(x);
                (*t, *l) = (top.to_bits(), trail);
            }
        },
        combine: |t, l, d| {
            for ((d, &t), &l) in d.iter_mut().zip(t).zip(l) {
                *d = split::combine_one(half::bf16::from_bits(t), l);
            }
        },
        sgd: |c, x, t, _| crate::reference::sgd::step(c, x, t),
        adagrad: |c, x, t, _| crate::reference::adagrad::step(c, x, t),
        adam: |c, x, t, _| crate::reference::adam::step(c, x, t),
        // The reference recomputes u in pass 2 (SPEC.md §6.5); a kept direction is the same
        // value, so it is neither written nor read here.
        lamb_pass1: |c, x, t, o, _kept, _| crate::reference::lamb::pass1_blocks(c, x, t, o),
        lamb_pass2: |c, x, t, r, _kept, _| crate::reference::lamb::pass2(c, x, t, r),
        f32_to_fp8: |f, s, d, r, c, base| {
            for (i, (d, &x)) in d.iter_mut().zip(s).enumerate() {
                *d = quant::f32_to(f.format(), x, mode(r, c, base, i));
            }
        },
        fp8_to_f32: |f, s, d| {
            d.iter_mut()
                .zip(s)
                .for_each(|(d, &c)| *d = quant::to_f32(f.format(), c))
        },
        amax_bits: quant::amax_bits,
        quantize_fp4: |f, s, p, sc, r, c, base| match f {
            Fp4Scaling::Nv { tensor_scale } => {
                quant::quantize_nvfp4(s, tensor_scale, p, sc, |i| mode(r, c, base, i))
            }
            Fp4Scaling::Mx => quant::quantize_mxfp4(s, p, sc, |i| mode(r, c, base, i)),
        },
        dequantize_fp4: |f, p, sc, d| match f {
            Fp4Scaling::Nv { tensor_scale } => quant::dequantize_nvfp4(p, sc, tensor_scale, d),
            Fp4Scaling::Mx => quant::dequantize_mxfp4(p, sc, d),
        },
    };

    /// Element `i`'s rounding mode (its random bits only when stochastic).
    fn mode(r: Rounding, c: &BitsCoord, base: u64, i: usize) -> round::Mode {
        let bits = if r == Rounding::Stochastic {
            bits::element_bits(c, base + i as u64)
        } else {
            0
        };
        round::Mode::new(r, bits)
    }
}

/// Instantiates every generic kernel for one lane type inside entry points compiled with the
/// backend's target features, and collects them in a table.
macro_rules! simd_backend {
    ($module:ident, $V:ty $(, $features:literal)?) => {
        mod $module {
            use super::*;
            use crate::kernels;

            // The portable backend calls its random-bit fill out of line, the SIMD backends inline
            // it in their loops and call it for the chunks a loop leaves alone (see
            // `kernels::BitsFill`).
            $(#[target_feature(enable = $features)])?
            #[inline(never)]
            unsafe fn bits_fill<const WORDS: bool>(
                bits: &mut kernels::GroupBits<$V, WORDS>,
                group: u64,
            ) {
                unsafe { bits.fill(group) }
            }
            // Every backend calls its block fill (see `kernels::RoundingBits`).
            $(#[target_feature(enable = $features)])?
            #[inline(never)]
            unsafe fn block_fill(
                b: *mut kernels::BitsBlock<$V>,
                base: u64,
                from: usize,
                n: usize,
                first: bool,
            ) {
                unsafe { kernels::bits::fill_block::<$V>(b, base, from, n, first) }
            }
            impl kernels::BitsFill for $V {
                #[inline(always)]
                unsafe fn fill_block(
                    b: *mut kernels::BitsBlock<$V>,
                    base: u64,
                    from: usize,
                    n: usize,
                    first: bool,
                ) {
                    unsafe { block_fill(b, base, from, n, first) }
                }
                #[inline(always)]
                unsafe fn fill_span<const WORDS: bool>(
                    bits: &mut kernels::GroupBits<$V, WORDS>,
                    group: u64,
                ) {
                    const OUT_OF_LINE: bool = true $(&& $features.is_empty())?;
                    unsafe {
                        if OUT_OF_LINE {
                            bits_fill(bits, group)
                        } else {
                            bits.fill(group)
                        }
                    }
                }
                #[inline(always)]
                unsafe fn fill_span_out_of_line<const WORDS: bool>(
                    bits: &mut kernels::GroupBits<$V, WORDS>,
                    group: u64,
                ) {
                    unsafe { bits_fill(bits, group) }
                }
            }

            // The entry points in one module per kernel family: rustc gives each module's code a
            // codegen unit of its own, so LLVM optimises a backend's families in parallel (in one
            // module, a backend was one unit, the longest of the build).
            mod convert {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn fill_bits(c: &BitsCoord, base: u64, out: &mut [u16]) {
                    unsafe { kernels::bits::fill_bits::<$V>(c, base, out) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn f32_to_bf16(s: &[f32], d: &mut [u16], r: Rounding, c: &BitsCoord, b: u64) {
                    unsafe { kernels::convert::narrow::<$V>(kernels::convert::Narrow::Bf16, s, d, r, c, b) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn f32_to_f16(s: &[f32], d: &mut [u16], r: Rounding, c: &BitsCoord, b: u64) {
                    unsafe { kernels::convert::narrow::<$V>(kernels::convert::Narrow::F16, s, d, r, c, b) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn bf16_to_f32(s: &[u16], d: &mut [f32]) {
                    unsafe { kernels::convert::widen::<$V>(kernels::convert::Narrow::Bf16, s, d) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn f16_to_f32(s: &[u16], d: &mut [f32]) {
                    unsafe { kernels::convert::widen::<$V>(kernels::convert::Narrow::F16, s, d) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn split(s: &[f32], t: &mut [u16], l: &mut [u16]) {
                    unsafe { kernels::convert::split::<$V>(s, t, l) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn combine(t: &[u16], l: &[u16], d: &mut [f32]) {
                    unsafe { kernels::convert::combine::<$V>(t, l, d) }
                }
            }
            use convert::*;

            mod sgd_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn sgd(c: &SgdConsts, x: &StepContext, t: &mut SgdTensor<'_>, n: StepLen) {
                    unsafe { kernels::optim::sgd::<$V>(c, x, t, n) }
                }
            }
            use sgd_step::*;

            mod adagrad_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn adagrad(c: &AdagradConsts, x: &StepContext, t: &mut AdagradTensor<'_>, n: StepLen) {
                    unsafe { kernels::optim::adagrad::<$V>(c, x, t, n) }
                }
            }
            use adagrad_step::*;

            mod adam_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn adam(c: &AdamConsts, x: &StepContext, t: &mut AdamTensor<'_>, n: StepLen) {
                    unsafe { kernels::optim::adam::<$V, { kernels::optim::adam_entry::PLAIN }>(c, x, t, n) }
                }
            }
            use adam_step::*;

            // AMSGrad's layouts (`kernels::optim::adam_entry`, why), in units of their own.
            mod amsgrad_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn amsgrad_fp32(c: &AdamConsts, x: &StepContext, t: &mut AdamTensor<'_>, n: StepLen) {
                    unsafe { kernels::optim::adam::<$V, { kernels::optim::adam_entry::AMSGRAD_FP32 }>(c, x, t, n) }
                }
            }
            mod amsgrad_sr_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn amsgrad_sr(c: &AdamConsts, x: &StepContext, t: &mut AdamTensor<'_>, n: StepLen) {
                    unsafe { kernels::optim::adam::<$V, { kernels::optim::adam_entry::AMSGRAD_SR }>(c, x, t, n) }
                }
            }
            use amsgrad_sr_step::*;
            use amsgrad_step::*;

            mod lamb_pass1_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass1(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, o: &mut [[f64; 2]], n: StepLen) {
                    unsafe { kernels::optim::lamb_pass1::<$V, false>(c, x, t, o, None, n) }
                }
                // With and without kept directions as separate functions, so that neither loop's
                // register allocation pays for the other's (one spill in the AVX2 loop otherwise).
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass1_keep(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, o: &mut [[f64; 2]], k: &mut [f32], n: StepLen) {
                    unsafe { kernels::optim::lamb_pass1::<$V, false>(c, x, t, o, Some(k), n) }
                }
            }
            use lamb_pass1_step::*;

            mod lamb_pass2_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass2(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, r: f32, n: StepLen) {
                    unsafe { kernels::optim::lamb_pass2::<$V, false>(c, x, t, r, None, n) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass2_kept(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, r: f32, k: &[f32], n: StepLen) {
                    unsafe { kernels::optim::lamb_pass2::<$V, false>(c, x, t, r, Some(k), n) }
                }
            }
            use lamb_pass2_step::*;

            // LAMB's memory-saving layouts (`kernels::optim::lamb_pass1`, why), in units of their own.
            mod lamb_pass1_sr_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass1_sr(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, o: &mut [[f64; 2]], n: StepLen) {
                    unsafe { kernels::optim::lamb_pass1::<$V, true>(c, x, t, o, None, n) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass1_keep_sr(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, o: &mut [[f64; 2]], k: &mut [f32], n: StepLen) {
                    unsafe { kernels::optim::lamb_pass1::<$V, true>(c, x, t, o, Some(k), n) }
                }
            }
            use lamb_pass1_sr_step::*;

            mod lamb_pass2_sr_step {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass2_sr(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, r: f32, n: StepLen) {
                    unsafe { kernels::optim::lamb_pass2::<$V, true>(c, x, t, r, None, n) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn lamb_pass2_kept_sr(c: &LambConsts, x: &StepContext, t: &mut LambTensor<'_>, r: f32, k: &[f32], n: StepLen) {
                    unsafe { kernels::optim::lamb_pass2::<$V, true>(c, x, t, r, Some(k), n) }
                }
            }
            use lamb_pass2_sr_step::*;

            mod quant {
                use super::*;

                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn f32_to_fp8(f: Fp8, s: &[f32], d: &mut [u8], r: Rounding, c: &BitsCoord, b: u64) {
                    unsafe { kernels::quant::f32_to_fp8::<$V>(f, s, d, r, c, b) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn fp8_to_f32(f: Fp8, s: &[u8], d: &mut [f32]) {
                    unsafe { kernels::quant::fp8_to_f32::<$V>(f, s, d) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn amax_bits(s: &[f32]) -> u32 {
                    unsafe { kernels::quant::amax_bits::<$V>(s) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn quantize_fp4(f: Fp4Scaling, s: &[f32], p: &mut [u8], sc: &mut [u8], r: Rounding, c: &BitsCoord, b: u64) {
                    unsafe { kernels::quant::quantize_fp4::<$V>(f, s, p, sc, r, c, b) }
                }
                $(#[target_feature(enable = $features)])?
                pub(super) unsafe fn dequantize_fp4(f: Fp4Scaling, p: &[u8], sc: &[u8], d: &mut [f32]) {
                    unsafe { kernels::quant::dequantize_fp4::<$V>(f, p, sc, d) }
                }
            }
            use quant::*;

            // SAFETY (every entry): `Backend::kernels` hands this table out only after
            // `Backend::is_available` confirmed the CPU has the target features.
            pub(crate) static TABLE: Kernels = Kernels {
                fill_bits: |c, b, o| unsafe { fill_bits(c, b, o) },
                f32_to_bf16: |s, d, r, c, b| unsafe { f32_to_bf16(s, d, r, c, b) },
                f32_to_f16: |s, d, r, c, b| unsafe { f32_to_f16(s, d, r, c, b) },
                bf16_to_f32: |s, d| unsafe { bf16_to_f32(s, d) },
                f16_to_f32: |s, d| unsafe { f16_to_f32(s, d) },
                split: |s, t, l| unsafe { split(s, t, l) },
                combine: |t, l, d| unsafe { combine(t, l, d) },
                sgd: |c, x, t, n| unsafe { sgd(c, x, t, n) },
                adagrad: |c, x, t, n| unsafe { adagrad(c, x, t, n) },
                // AMSGrad's entry points only where layouts are compiled, as LAMB's below.
                adam: |c, x, t, n| {
                    if const { <$V as crate::arch::Simd>::COMPILED_LAYOUTS } && t.max_exp_avg_sq.is_some() {
                        if !t.in_fp32_peers_layout() {
                            return unsafe { amsgrad_sr(c, x, t, n) };
                        }
                        if const { !<$V as crate::arch::Simd>::AMSGRAD_FP32_WITH_ADAM } {
                            return unsafe { amsgrad_fp32(c, x, t, n) };
                        }
                    }
                    unsafe { adam(c, x, t, n) }
                },
                // LAMB's stochastic entry points only where layouts are compiled (elsewhere both
                // entry points would run the same run-time access, compiled twice).
                lamb_pass1: |c, x, t, o, k, n| {
                    if const { <$V as crate::arch::Simd>::COMPILED_LAYOUTS } && t.has_bf16() {
                        return match k {
                            Some(k) => unsafe { lamb_pass1_keep_sr(c, x, t, o, k, n) },
                            None => unsafe { lamb_pass1_sr(c, x, t, o, n) },
                        };
                    }
                    match k {
                        Some(k) => unsafe { lamb_pass1_keep(c, x, t, o, k, n) },
                        None => unsafe { lamb_pass1(c, x, t, o, n) },
                    }
                },
                lamb_pass2: |c, x, t, r, k, n| {
                    if const { <$V as crate::arch::Simd>::COMPILED_LAYOUTS } {
                        match k {
                            Some(k) if t.has_bf16_weights() => return unsafe { lamb_pass2_kept_sr(c, x, t, r, k, n) },
                            None if t.has_bf16() => return unsafe { lamb_pass2_sr(c, x, t, r, n) },
                            _ => {}
                        }
                    }
                    match k {
                        Some(k) => unsafe { lamb_pass2_kept(c, x, t, r, k, n) },
                        None => unsafe { lamb_pass2(c, x, t, r, n) },
                    }
                },
                f32_to_fp8: |f, s, d, r, c, b| unsafe { f32_to_fp8(f, s, d, r, c, b) },
                fp8_to_f32: |f, s, d| unsafe { fp8_to_f32(f, s, d) },
                amax_bits: |s| unsafe { amax_bits(s) },
                quantize_fp4: |f, s, p, sc, r, c, b| unsafe { quantize_fp4(f, s, p, sc, r, c, b) },
                dequantize_fp4: |f, p, sc, d| unsafe { dequantize_fp4(f, p, sc, d) },
            };
        }
    };
}

simd_backend!(portable, crate::arch::portable::Portable);
#[cfg(target_arch = "x86_64")]
simd_backend!(avx2, crate::arch::x86_64::avx2::Avx2, "avx2,fma,f16c,aes");
#[cfg(target_arch = "x86_64")]
simd_backend!(
    avx512,
    crate::arch::x86_64::avx512::Avx512,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,aes,vaes"
);
#[cfg(target_arch = "aarch64")]
simd_backend!(neon, crate::arch::aarch64::neon::Neon, "neon,aes");
