//! The scalar reference: the specification in code. Plain, obviously-correct Rust, one element
//! at a time, no SIMD and no cleverness. Every backend is tested bit for bit against it, and
//! `docs/SPEC.md` states the same rules in words.
//!
//! - [`ars`]: the ARS-5 generator (AES rounds) and [`bits`], the element -> random-bits layout.
//! - [`philox`]: Philox4x32-10, for the sequential generator.
//! - [`round`]: f32 -> bf16 / f16 (nearest-even, stochastic, toward zero) and back.
//! - [`split`]: the Split-SGD top/trail layout.
//! - [`quant`]: fp8 (E4M3, E5M2), fp4 (E2M1), E8M0 scales, NVFP4 and MXFP4 blocks.
//! - [`norm`]: the canonical sum-of-squares reduction.
//! - [`sgd`], [`adagrad`], [`adam`], [`lamb`]: one element's update and the loop over a tensor,
//!   written once for every storage kind (the loads and stores in `storage.rs` do the format work).
//! - [`powi`]: the binary exponentiation of the bias corrections (SPEC.md §6.1), as written there;
//!   the optimizers' constants use `optim::powi_f64`, which gives its bits without a branch.

pub mod adagrad;
pub mod adam;
pub mod ars;
pub mod bits;
pub mod lamb;
pub mod norm;
pub mod philox;
pub mod quant;
pub mod round;
pub mod sgd;
pub mod split;
mod storage;

/// `base^t` by SPEC.md §6.1's binary exponentiation, in f64, as written there.
pub fn powi(base: f64, mut t: u32) -> f64 {
    let mut result = 1.0f64;
    let mut b = base;
    while t > 0 {
        if t & 1 == 1 {
            result *= b;
        }
        b *= b;
        t >>= 1;
    }
    result
}
