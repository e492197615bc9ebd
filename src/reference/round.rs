//! Narrowing f32 to bf16 and f16 (nearest-even, stochastic, toward zero) and widening back.
//! SPEC.md §4 states these rules in words; this is the same rule in code.
//!
//! Everything works on bit patterns, so the result never depends on MXCSR/FPCR or on how a
//! platform treats subnormals.

/// How a value is narrowed to a 16-bit format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// IEEE round-to-nearest, ties to even; subnormals kept.
    NearestEven,
    /// Stochastic rounding driven by 16 random bits per element (SPEC.md §4.2).
    Stochastic,
    /// Round toward zero (plain truncation of the magnitude).
    TowardZero,
}

/// How one magnitude is rounded by [`round_magnitude`]; `Stochastic` carries the element's random bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Nearest, ties to even.
    NearestEven,
    /// Away from zero iff `floor(frac * 2^16) + r >= 2^16`.
    Stochastic(u16),
    /// Toward zero.
    TowardZero,
}

impl Mode {
    /// The mode for `rounding`, with `r` as the random bits when it is stochastic.
    #[inline]
    pub fn new(rounding: Rounding, r: u16) -> Mode {
        match rounding {
            Rounding::NearestEven => Mode::NearestEven,
            Rounding::Stochastic => Mode::Stochastic(r),
            Rounding::TowardZero => Mode::TowardZero,
        }
    }
}

/// The canonical NaN that optimizer outputs are normalised to (SPEC.md §5.3).
pub const CANONICAL_NAN_F32: u32 = 0x7FC0_0000;

/// Rounds a finite non-negative f32 (bit pattern `a`, sign bit clear) to a binary format with
/// `man` explicit mantissa bits and minimum normal exponent `emin`, with gradual underflow.
///
/// Returns the magnitude encoding `(biased_exponent << man) | mantissa` with the exponent field
/// unbounded above: the caller decides what overflow means for its format. A round-up that
/// carries out of the mantissa moves to the next binade (or from subnormal to normal) by itself.
pub fn round_magnitude(a: u32, man: u32, emin: i32, mode: Mode) -> u64 {
    debug_assert!(a < 0x7F80_0000, "finite magnitudes only");
    let biased = (a >> 23) as i32;
    let fraction = u64::from(a & 0x007F_FFFF);
    // value = sig * 2^(e - 23), with the implicit bit made explicit for normal inputs.
    let (sig, e) = if biased == 0 {
        (fraction, -126)
    } else {
        (fraction | 0x0080_0000, biased - 127)
    };
    // The target's quantum at this magnitude is 2^(max(e, emin) - man); `shift` drops the bits below it.
    // sig < 2^24, so every shift >= 40 gives the same answer as 40 (q = 0, rem = sig, frac16 = 0).
    let shift = (23 - man as i32 + (emin - e).max(0)).min(40) as u32;
    debug_assert!(shift >= 1);
    let q = sig >> shift;
    let rem = sig & ((1u64 << shift) - 1);
    let up = match mode {
        Mode::NearestEven => {
            let half = 1u64 << (shift - 1);
            rem > half || (rem == half && q & 1 == 1)
        }
        Mode::Stochastic(r) => {
            // The first 16 bits of the fraction below the quantum, as an integer in [0, 2^16).
            let frac16 = if shift >= 16 {
                rem >> (shift - 16)
            } else {
                rem << (16 - shift)
            };
            frac16 + u64::from(r) >= 1 << 16
        }
        Mode::TowardZero => false,
    };
    // For normal results q includes the implicit bit, so adding it to (e - emin) << man gives the
    // biased exponent field; subnormal results have exponent field 0.
    let exp_base = (e.max(emin) - emin) as u64;
    (exp_base << man) + q + u64::from(up)
}

// ---------------------------------------------------------------------------------------------
// bf16

/// The bf16 NaN for an f32 NaN: sign and top 7 payload bits kept, quiet bit set.
#[inline]
fn bf16_nan(bits: u32) -> u16 {
    ((bits >> 16) | 0x0040) as u16
}

#[inline]
fn is_nan_bits(bits: u32) -> bool {
    bits & 0x7FFF_FFFF > 0x7F80_0000
}

/// f32 -> bf16, round to nearest even. Subnormals are kept (unlike `VCVTNEPS2BF16`); overflow
/// gives ±Inf; NaN stays NaN with its sign and top payload bits, quieted.
pub fn f32_to_bf16_nearest(x: f32) -> u16 {
    let b = x.to_bits();
    if is_nan_bits(b) {
        return bf16_nan(b);
    }
    let lsb = (b >> 16) & 1;
    // Cannot overflow u32: the largest non-NaN pattern is 0xFF80_0000.
    ((b + 0x7FFF + lsb) >> 16) as u16
}

/// f32 -> bf16, stochastic: add the 16 random bits `r` to the low half and truncate.
///
/// For a finite `x` exactly `x.to_bits() & 0xFFFF` of the 65536 values of `r` round away from
/// zero, so the expected result is `x` exactly. Overflow past the largest bf16 gives ±Inf, as
/// nearest-even does; NaN is handled first (adding to a NaN's pattern could make it Inf or flip
/// its sign).
pub fn f32_to_bf16_stochastic(x: f32, r: u16) -> u16 {
    let b = x.to_bits();
    if is_nan_bits(b) {
        return bf16_nan(b);
    }
    ((b + u32::from(r)) >> 16) as u16
}

/// f32 -> bf16, toward zero. NaN is quieted as in the other modes (truncating `0x7F80_0001`
/// would give Inf).
pub fn f32_to_bf16_toward_zero(x: f32) -> u16 {
    let b = x.to_bits();
    if is_nan_bits(b) {
        return bf16_nan(b);
    }
    (b >> 16) as u16
}

/// f32 -> bf16 in the given mode.
#[inline]
pub fn f32_to_bf16(x: f32, mode: Mode) -> u16 {
    match mode {
        Mode::NearestEven => f32_to_bf16_nearest(x),
        Mode::Stochastic(r) => f32_to_bf16_stochastic(x, r),
        Mode::TowardZero => f32_to_bf16_toward_zero(x),
    }
}

/// bf16 -> f32: exact (the bf16 bits become the top half).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

// ---------------------------------------------------------------------------------------------
// f16 (IEEE binary16: 5 exponent bits, 10 mantissa bits, emin = -14)

/// f16's explicit mantissa bits.
pub const F16_MAN: u32 = 10;
/// f16's minimum normal exponent.
pub const F16_EMIN: i32 = -14;
const F16_INF: u16 = 0x7C00;

/// f32 -> f16 in the given mode, with gradual underflow: in stochastic mode the random bits sit
/// under the f16 quantum in the subnormal range too (2^-24 there). Overflow gives ±Inf (toward
/// zero: ±65504, as IEEE round-toward-zero does); NaN
/// becomes `sign | 0x7E00 | payload >> 13` (quiet, sign and top payload kept, as F16C does).
pub fn f32_to_f16(x: f32, mode: Mode) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7FFF_FFFF;
    if a > 0x7F80_0000 {
        return sign | 0x7E00 | ((a >> 13) & 0x03FF) as u16;
    }
    if a == 0x7F80_0000 {
        return sign | F16_INF;
    }
    let mag = round_magnitude(a, F16_MAN, F16_EMIN, mode);
    let limit = match mode {
        Mode::TowardZero => F16_INF - 1,
        _ => F16_INF,
    };
    sign | mag.min(u64::from(limit)) as u16
}

/// f16 -> f32: exact.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x03FF);
    let bits = match exp {
        // ±0 and subnormals: man * 2^-24 (exact in f32), then the sign bit.
        0 => sign | ((man as f32) * f32::from_bits(0x3380_0000)).to_bits(),
        // Inf and NaN: payload moved to the top of the f32 mantissa.
        0x1F => sign | 0x7F80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Replaces any NaN by the canonical quiet NaN `0x7FC0_0000` (SPEC.md §5.3).
#[inline]
pub fn canonicalize_nan(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(CANONICAL_NAN_F32)
    } else {
        x
    }
}
