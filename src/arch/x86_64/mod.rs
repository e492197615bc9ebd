//! x86_64 lane primitives.

pub(crate) mod avx2;
pub(crate) mod avx512;

use std::sync::atomic::{AtomicU8, Ordering};

/// Whether the AVX2 backend runs its AES rounds as 256-bit `VAESENC`: 0 undecided, 1 no, 2 yes.
static VAES_ROUNDS: AtomicU8 = AtomicU8::new(0);

/// Whether the AVX2 backend's bulk random-bit fill runs its AES rounds on VAES: when the CPU has it, unless
/// `HALFSTEP_VAES=off` (for testing the 128-bit path on a CPU that has both). The bits are the
/// same either way.
pub(crate) fn vaes_rounds() -> bool {
    match VAES_ROUNDS.load(Ordering::Relaxed) {
        0 => {
            let on = std::is_x86_feature_detected!("vaes")
                && std::env::var_os("HALFSTEP_VAES").is_none_or(|v| v != "off");
            VAES_ROUNDS.store(1 + u8::from(on), Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Overrides [`vaes_rounds`] (`None`: back to detection), for the tests of both paths.
#[cfg(feature = "fuzzing")]
pub(crate) fn set_vaes_rounds(on: Option<bool>) {
    let v = match on {
        None => 0,
        Some(on) => 1 + u8::from(on && std::is_x86_feature_detected!("vaes")),
    };
    VAES_ROUNDS.store(v, Ordering::Relaxed);
}
