//! Differential checks for the fuzzers and the corpus replay (feature `fuzzing`).
//!
//! [`check`] decodes one case from arbitrary bytes — lengths, start offsets, index bases,
//! storage kinds, values with special-value masks, seeds, steps, streams, replicas and
//! hyperparameters, extreme and invalid ones included — runs the reference and every available
//! backend on it, and reports any difference in output bits or in accept/reject as an `Err`
//! holding a reproducer description. `fuzz/` wraps it in cargo-fuzz targets; `tests/fuzz_corpus.rs`
//! replays the committed corpus with it on stable.

use crate::rng::Purpose;
use crate::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Backend, Engine, Grads, LambConfig,
    LambTensor, Replica, Rounding, SgdConfig, SgdTensor, State, Step, StepContext, TensorStream,
    Threads, Weights, bf16, f16,
};
use arbitrary::{Arbitrary, Result as AResult, Unstructured};
use core::fmt::Debug;
use rayon_core::ThreadPool;
use std::sync::{Arc, OnceLock};

#[cfg(feature = "capi")]
mod c_abi;
mod conversions;
mod optimizers;

use conversions::{convert, element_bits, quant};
pub use optimizers::*;

/// A kernel family with its own fuzz target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Element-indexed random bits.
    ElementBits,
    /// f32 <-> bf16 / f16 in every rounding mode, split and combine.
    Convert,
    /// SGD.
    Sgd,
    /// Adagrad.
    Adagrad,
    /// Adam / AdamW.
    Adam,
    /// LAMB.
    Lamb,
    /// A group of tensors (any optimizer) stepped in one call on rayon pools and teams of several
    /// sizes.
    Group,
    /// fp8 E4M3 / E5M2 and NVFP4 / MXFP4 quantization and dequantization.
    Quant,
    /// The C ABI's optimizer steps with hostile descriptors (feature `capi`).
    #[cfg(feature = "capi")]
    CAbi,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target::ElementBits,
    Target::Convert,
    Target::Sgd,
    Target::Adagrad,
    Target::Adam,
    Target::Lamb,
    Target::Group,
    Target::Quant,
    #[cfg(feature = "capi")]
    Target::CAbi,
];

impl Target {
    /// The cargo-fuzz target and corpus directory name.
    pub fn name(self) -> &'static str {
        match self {
            Target::ElementBits => "element_bits",
            Target::Convert => "convert",
            Target::Sgd => "sgd",
            Target::Adagrad => "adagrad",
            Target::Adam => "adam",
            Target::Lamb => "lamb",
            Target::Group => "group",
            Target::Quant => "quant",
            #[cfg(feature = "capi")]
            Target::CAbi => "c_abi",
        }
    }
}

/// Decodes `data` as a case for `target` and compares every available backend with the reference.
pub fn check(target: Target, data: &[u8]) -> Result<(), String> {
    let mut u = Unstructured::new(data);
    // Running out of bytes is not a failure: the decoders fall back to defaults.
    let r = match target {
        Target::ElementBits => element_bits(&mut u),
        Target::Convert => convert(&mut u),
        Target::Sgd => sgd(&mut u),
        Target::Adagrad => adagrad(&mut u),
        Target::Adam => adam(&mut u),
        Target::Lamb => lamb(&mut u),
        Target::Group => group(&mut u),
        Target::Quant => quant(&mut u),
        #[cfg(feature = "capi")]
        Target::CAbi => c_abi::c_abi(&mut u),
    };
    match r {
        Ok(r) => r,
        Err(_) => Ok(()),
    }
}

/// f32 patterns every kernel must get right: NaNs with payloads in the high and the low half,
/// infinities, zeros, subnormals, the largest finite values, bf16 and f16 rounding ties, values
/// whose rounding crosses a binade, and the f16 range limits. The fuzzers' decoder draws from them,
/// and the agreement suite mixes them into every input.
pub const SPECIALS: [u32; 32] = [
    0x7FC0_0000,
    0xFFC0_0001,
    0x7FA0_0000,
    0x7F80_0001,
    0x7F80_FFFF,
    0xFF80_0001,
    0x7FFF_FFFF,
    0xFFFF_8000, // NaN (the last two carry out of the sign if rounded as numbers)
    0x7F80_0000,
    0xFF80_0000,
    0x0000_0000,
    0x8000_0000, // ±Inf, ±0
    0x0000_0001,
    0x807F_FFFF,
    0x0040_0000,
    0x0080_0000, // subnormals, smallest normal
    0x7F7F_FFFF,
    0xFF7F_FFFF,
    0x7F7F_8000, // max finite, bf16 overflow tie
    0x3F80_8000,
    0x3F81_8000,
    0x3F80_1000,
    0xBF80_3000, // bf16 and f16 ties
    0x3F7F_FFFF,
    0x3FFF_8001,
    0xBF7F_FFFF, // binade crossings
    0x477F_E000,
    0x477F_F000,
    0x3880_0000,
    0x3380_0000,
    0x3300_0000,
    0x3340_0000, // f16 limits, f16 subnormal ties
];

fn value(u: &mut Unstructured<'_>) -> AResult<f32> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => f32::from_bits(u32::arbitrary(u)?),
        1 => f32::from_bits(SPECIALS[u.choose_index(SPECIALS.len())?]),
        _ => {
            // An ordinary value: magnitude 2^-40 .. 2^20, either sign.
            let e = i32::from(u.int_in_range(0u8..=60)?) - 40;
            let m = 1.0 + (u32::arbitrary(u)? >> 9) as f32 / (1u32 << 23) as f32;
            let s = if bool::arbitrary(u)? { -1.0 } else { 1.0 };
            // 2^e from bits: exact everywhere (`powi` is perturbed under Miri).
            s * m * crate::reference::quant::pow2(e)
        }
    })
}

fn values(u: &mut Unstructured<'_>, n: usize) -> AResult<Vec<f32>> {
    (0..n).map(|_| value(u)).collect()
}

/// A hyperparameter: usually one of `typical`, sometimes an extreme or invalid pattern.
fn hyper(u: &mut Unstructured<'_>, typical: &[f32]) -> AResult<f32> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => f32::from_bits(u32::arbitrary(u)?),
        1 => [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            1e-30,
            3e38,
            f32::INFINITY,
            f32::NAN,
            0.999_999,
        ][u.choose_index(10)?],
        _ => typical[u.choose_index(typical.len())?],
    })
}

/// Everything a case shares: the slice length, its start offset into the buffers (alignment),
/// and the RNG coordinates.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Elements in the slice.
    pub len: usize,
    /// Elements before the slice in each buffer.
    pub off: usize,
    /// Seed, step and replica.
    pub ctx: StepContext,
    /// Tensor id and index base.
    pub stream: TensorStream,
}

fn case(u: &mut Unstructured<'_>, max_len: usize) -> AResult<Case> {
    let len = u.int_in_range(0usize..=max_len)?;
    let off = u.int_in_range(0usize..=15)?;
    let step = step(u)?;
    let replica = match u.int_in_range(0u8..=3)? {
        0 => Replica::Differing(u16::arbitrary(u)?),
        1 => Replica::Differing(u16::MAX),
        _ => Replica::Identical,
    };
    let stream = stream(u, len)?;
    Ok(Case {
        len,
        off,
        ctx: StepContext {
            seed: u64::arbitrary(u)?,
            step,
            replica,
        },
        stream,
    })
}

/// A step number: 0 and `u32::MAX` among them.
fn step(u: &mut Unstructured<'_>) -> AResult<u32> {
    Ok(match u.int_in_range(0u8..=5)? {
        0 => 0,
        1 => u32::MAX,
        2 => u32::arbitrary(u)?,
        k => u32::from(k) - 2,
    })
}

/// A tensor id (sometimes past 2^28) and an index base for `len` elements (sometimes running
/// past 2^51).
fn stream(u: &mut Unstructured<'_>, len: usize) -> AResult<TensorStream> {
    let id = if u.ratio(1, 16)? {
        u32::arbitrary(u)?
    } else {
        u32::arbitrary(u)? & ((1 << 28) - 1)
    };
    let limit = 1u64 << 51;
    let index_base = match u.int_in_range(0u8..=6)? {
        0 => limit - len as u64,
        1 => limit - len as u64 + 1,
        2 => u64::arbitrary(u)?,
        3 => u64::arbitrary(u)? % limit,
        k => [0, 1, 127, 2047][usize::from(k - 3)],
    };
    Ok(TensorStream { id, index_base })
}

/// Every engine to compare with the reference.
fn backends() -> Vec<Engine> {
    Backend::available()
        .into_iter()
        .filter(|&b| b != Backend::Reference)
        .filter_map(|b| Engine::new(b).ok())
        .collect()
}

fn reference() -> Engine {
    Engine::new(Backend::Reference).expect("the reference is always available")
}

/// Runs `run` on the reference and every backend, each on a fresh copy of `data`, and compares
/// the results and the bit patterns of every buffer (`bits`).
fn compare<D: Clone, R: PartialEq + Debug>(
    case: &dyn Debug,
    data: &D,
    bits: impl Fn(&D) -> Vec<u32>,
    run: impl Fn(Engine, &mut D) -> R,
) -> Result<(), String> {
    let mut want_data = data.clone();
    let want = run(reference(), &mut want_data);
    let want_bits = bits(&want_data);
    for e in backends() {
        let mut d = data.clone();
        let got = run(e, &mut d);
        if got != want {
            return Err(format!(
                "{}: result {got:?}, reference {want:?}\ncase: {case:#?}",
                e.backend()
            ));
        }
        let got_bits = bits(&d);
        if let Some(i) = got_bits.iter().zip(&want_bits).position(|(a, b)| a != b) {
            return Err(format!(
                "{}: output word {i} is {:#010x}, reference {:#010x}\ncase: {case:#?}",
                e.backend(),
                got_bits[i],
                want_bits[i]
            ));
        }
    }
    Ok(())
}

/// Checks of private invariants, for `tests/internals.rs` (and Miri): each panics on a failure.
/// They live here rather than in `#[cfg(test)]` modules so that `cargo test` compiles the library
/// once, not a second time as its own test harness.
pub mod internals {
    /// The vector ARS fill's span caches, as words and split into chunks, against the reference
    /// on every backend.
    pub fn random_bit_fill() {
        crate::kernels::bits::checks::fill_matches_the_reference_on_every_backend();
    }

    /// The even/odd forms of a pair of chunks against their definition on every backend.
    pub fn even_odd_forms() {
        crate::kernels::bits::checks::even_odd_forms_on_every_backend();
    }

    /// Each backend's square root off the divider against its `sqrt`, on every f32 with the sign
    /// clear and a sample of the rest.
    pub fn square_roots() {
        crate::kernels::bits::checks::square_roots_on_every_backend();
    }

    /// `HALFSTEP_PREFETCH` values, `auto`'s choice by CPU, the step pieces each choice
    /// prefetches, and how that rule sees each storage layout.
    pub fn prefetch_setting() {
        crate::cpu::checks::prefetch_setting_reads_on_off_auto();
        crate::cpu::checks::prefetch_auto_follows_the_cpu();
        crate::cpu::checks::step_pieces_by_setting();
        crate::kernels::optim::checks::layouts_step_buffers();
    }

    /// `HALFSTEP_ROOTS` and `HALFSTEP_BITS` values: each one's two words, and `auto` by CPU.
    pub fn intel_choices() {
        crate::cpu::checks::intel_choices_read_their_words();
    }

    /// How many LAMB norm blocks a piece of a tensor touches.
    pub fn block_counts() {
        crate::parallel::checks::block_counts();
    }

    /// A team hands every piece of a step to exactly one member, and passes panics back.
    pub fn team_hand_out() {
        crate::team::checks::every_item_once_and_panics_reach_the_caller();
    }

    /// A team's members take pieces of one tensor at once, each element of each buffer once.
    pub fn team_pieces() {
        crate::optim::checks::members_take_pieces_of_one_tensor_at_once();
    }

    /// The same on an OpenMP runtime's threads (a stand-in with libgomp's entry points).
    pub fn openmp_hand_out() {
        crate::team::checks::openmp_every_item_once_and_panics_reach_the_caller();
    }

    /// A stand-in for an OpenMP runtime, with libgomp's entry points: each region starts its
    /// threads afresh and numbers them `0..n`, the caller as 0; its own count is 3.
    pub fn openmp_stand_in() -> crate::OpenMp {
        crate::team::checks::stand_in()
    }
}
