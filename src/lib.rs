//! # halfstep
//!
//! CPU kernels for low-precision training: fused optimizer steps (SGD, Adagrad, Adam/AdamW,
//! LAMB) over f32, bf16 and Split-SGD (bf16 top + 16-bit trail) weights, with stochastic rounding
//! driven by a counter-based RNG (ARS-5: AES rounds), so the random bits are a pure function of
//! (seed, step, stream, element index).
//!
//! The [`reference`](mod@reference) module is the specification in code; `docs/SPEC.md` states it in words.
//!
//! ```
//! use halfstep::{AdamConfig, AdamTensor, Grads, Optimizer, Rounding, State, TensorStream, Weights};
//! use half::bf16;
//!
//! let mut w = vec![bf16::from_f32(0.5); 4];
//! let grads = [0.1f32, -0.2, 0.3, 0.0];
//! let (mut m, mut v) = (vec![0f32; 4], vec![0f32; 4]);
//! let mut opt = Optimizer::new(AdamConfig::adamw(1e-3), 42)?;
//! opt.step(&mut [AdamTensor {
//!     weights: Weights::Bf16(&mut w, Rounding::Stochastic),
//!     grads: Grads::F32(&grads),
//!     exp_avg: State::F32(&mut m),
//!     exp_avg_sq: State::F32(&mut v),
//!     max_exp_avg_sq: None,
//!     stream: TensorStream::new(0),
//! }])?;
//! assert_eq!(opt.checkpoint().steps_taken, 1);
//! # Ok::<(), halfstep::Error>(())
//! ```

// Unsafe code lives only in `arch` (intrinsics), `kernels` (raw pointers inside the chunk
// driver), `dispatch` (calling target-feature entry points after detection), `cpu` (CPUID),
// `team` (jobs on the sender's stack, run by another thread), `openmp` (the same, on an OpenMP
// runtime's threads) and `capi` (slices from the caller's
// checked pointers).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod arch;
#[cfg(feature = "capi")]
pub mod capi;
pub mod convert;
mod cpu;
mod dispatch;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod kernels;
mod openmp;
pub mod optim;
mod parallel;
pub mod quant;
pub mod reference;
pub mod rng;
mod storage;
mod team;
mod tensors;

pub use cpu::{ALL_BACKENDS, BITS_ENV, Backend, PREFETCH_ENV, ROOTS_ENV, software_prefetch};
pub use dispatch::{BACKEND_ENV, Engine};
pub use error::{Error, Result};
pub use openmp::{OpenMp, ParallelFn};
pub use optim::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Checkpoint, LambConfig, LambTensor,
    LambWorkspace, Optimizer, SgdConfig, SgdTensor, Step, adagrad_step, adam_step, lamb_step,
    sgd_step,
};
pub use parallel::{DEFAULT_GRAIN, SPLIT_ALIGN, Threads, calling_thread_grain};
pub use reference::round::Rounding;
pub use rng::{PhiloxRng, Purpose, Replica, StepContext, TensorStream};
pub use storage::{Grads, State, Weights};

pub use half::{bf16, f16};

// The README's usage example is compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
