//! SPEC.md §4 on vectors: the same integer rules as `crate::reference::round`, lane-wise.

use crate::arch::Simd;
use crate::reference::round::Rounding;

/// Lanes holding an f32 NaN pattern.
#[inline(always)]
unsafe fn nan_bits<V: Simd>(b: V::U) -> V::M {
    unsafe {
        V::gt_i32(
            V::and_u(b, V::splat_u(0x7FFF_FFFF)),
            V::splat_u(0x7F80_0000),
        )
    }
}

/// f32 bits -> bf16 bits (in the low half of each lane) with `rounding`; `r` is used only when
/// stochastic.
#[inline(always)]
pub(crate) unsafe fn to_bf16<V: Simd>(b: V::U, rounding: Rounding, r: V::U) -> V::U {
    unsafe {
        let hi = V::shr::<16>(b);
        let rounded = match rounding {
            Rounding::NearestEven => {
                let lsb = V::and_u(hi, V::splat_u(1));
                V::shr::<16>(V::add_u(V::add_u(b, V::splat_u(0x7FFF)), lsb))
            }
            Rounding::Stochastic => V::shr::<16>(V::add_u(b, r)),
            Rounding::TowardZero => hi,
        };
        V::select_u(nan_bits::<V>(b), V::or_u(hi, V::splat_u(0x40)), rounded)
    }
}

/// bf16 bits (low half of each lane) -> f32.
#[inline(always)]
pub(crate) unsafe fn from_bf16<V: Simd>(h: V::U) -> V::F {
    unsafe { V::from_bits(V::shl::<16>(h)) }
}

/// SPEC.md §4.3's general rule on vectors: the magnitude code of `a` (finite magnitude bits) in a
/// format with `MAN` mantissa bits and minimum normal exponent `emin`, exponent field unbounded
/// above (as `crate::reference::round::round_magnitude`).
#[inline(always)]
pub(crate) unsafe fn round_magnitude<V: Simd, const MAN: i32>(
    a: V::U,
    emin: i32,
    rounding: Rounding,
    r: V::U,
) -> V::U {
    unsafe {
        let s = V::splat_u;
        let emin_biased = (emin + 127) as u32;
        let exp = V::shr::<23>(a);
        let sig = V::or_u(
            V::and_u(a, s(0x007F_FFFF)),
            V::select_u(V::eq_u(exp, s(0)), s(0), s(0x0080_0000)),
        );
        // With e = max(E, 1) - 127: bits under the quantum = (23 - MAN) + max(0, emin - e).
        let e1 = V::max_i32(exp, s(1));
        let extra = V::max_i32(V::sub_u(s(emin_biased), e1), s(0));
        let base = (23 - MAN) as u32;
        let (q, up) = match rounding {
            Rounding::NearestEven => {
                // Any shift >= 25 gives q = 0 and rem < half, so 25 is a safe cap.
                let shift = V::min_i32(V::add_u(extra, s(base)), s(25));
                let q = V::shr_var(sig, shift);
                let rem = V::sub_u(sig, V::shl_var(q, shift));
                let half_m1 = V::sub_u(V::shl_var(s(1), V::sub_u(shift, s(1))), s(1));
                // rem + half - 1 + lsb >= 2^shift  <=>  round up (ties to even).
                let t = V::add_u(V::add_u(rem, half_m1), V::and_u(q, s(1)));
                (q, V::shr_var(t, shift))
            }
            Rounding::Stochastic => {
                let shift = V::min_i32(V::add_u(extra, s(base)), s(40));
                let q = V::shr_var(sig, shift);
                let rem = V::sub_u(sig, V::shl_var(q, shift));
                let down = V::shr_var(rem, V::sub_u(shift, s(16)));
                let frac16 = if base >= 16 {
                    down
                } else {
                    let upshift = V::shl_var(rem, V::sub_u(s(16), shift));
                    V::select_u(V::gt_i32(shift, s(15)), down, upshift)
                };
                (q, V::shr::<16>(V::add_u(frac16, r)))
            }
            Rounding::TowardZero => {
                let shift = V::min_i32(V::add_u(extra, s(base)), s(40));
                (V::shr_var(sig, shift), s(0))
            }
        };
        let exp_base = V::sub_u(V::max_i32(e1, s(emin_biased)), s(emin_biased));
        V::add_u(V::add_u(V::shl::<MAN>(exp_base), q), up)
    }
}

/// f32 bits -> f16 bits by the general rule of SPEC.md §4.3.
#[inline(always)]
pub(crate) unsafe fn to_f16<V: Simd>(b: V::U, rounding: Rounding, r: V::U) -> V::U {
    unsafe {
        if rounding != Rounding::Stochastic
            && let Some(h) = V::f32_to_f16_hw(V::from_bits(b), rounding == Rounding::TowardZero)
        {
            return h;
        }
        let s = V::splat_u;
        let sign = V::and_u(V::shr::<16>(b), s(0x8000));
        let a = V::and_u(b, s(0x7FFF_FFFF));
        let mag = round_magnitude::<V, 10>(a, -14, rounding, r);
        let limit = if rounding == Rounding::TowardZero {
            0x7BFF
        } else {
            0x7C00
        };
        let finite = V::or_u(sign, V::min_i32(mag, s(limit)));
        let inf = V::or_u(sign, s(0x7C00));
        let nan = V::or_u(
            V::or_u(sign, s(0x7E00)),
            V::and_u(V::shr::<13>(a), s(0x03FF)),
        );
        let out = V::select_u(V::eq_u(a, s(0x7F80_0000)), inf, finite);
        V::select_u(V::gt_i32(a, s(0x7F80_0000)), nan, out)
    }
}

/// A low-bit format's constants for the vector rules (SPEC.md §4.5), taken from
/// `crate::reference::quant::Format` so that both read the same numbers.
#[derive(Clone, Copy)]
pub(crate) struct Small {
    pub emin: i32,
    /// Magnitude code of the largest finite value.
    pub max: u32,
    /// The sign bit and its position.
    pub sign: u32,
    pub sign_pos: u32,
    /// What NaN encodes to (magnitude code), and whether it keeps the sign.
    pub nan: u32,
    pub nan_keeps_sign: bool,
    /// What infinity encodes to (magnitude code).
    pub inf: u32,
    /// Decoding: magnitude codes `>= nan_from` are NaN, `== inf_code` infinity (256: none).
    pub nan_from: u32,
    pub inf_code: u32,
}

impl Small {
    pub const fn of(f: crate::reference::quant::Format) -> Small {
        let (nan, nan_keeps_sign, nan_from) = match (f.nan, f.inf) {
            (Some(n), Some(i)) => (n as u32, true, i as u32 + 1),
            (Some(n), None) => (n as u32, true, n as u32),
            (None, _) => (0, false, 256),
        };
        Small {
            emin: f.emin,
            max: f.max as u32,
            sign: f.sign as u32,
            sign_pos: f.sign.trailing_zeros(),
            nan,
            nan_keeps_sign,
            inf: match f.inf {
                Some(i) => i as u32,
                None => f.max as u32,
            },
            nan_from,
            inf_code: match f.inf {
                Some(i) => i as u32,
                None => 256,
            },
        }
    }
}

/// f32 bits -> a low-bit format's code (SPEC.md §4.5): saturating in every mode.
#[inline(always)]
pub(crate) unsafe fn to_small<V: Simd, const MAN: i32>(
    f: &Small,
    b: V::U,
    rounding: Rounding,
    r: V::U,
) -> V::U {
    unsafe {
        let s = V::splat_u;
        let sign = V::and_u(V::shr_var(b, s(31 - f.sign_pos)), s(f.sign));
        let a = V::and_u(b, s(0x7FFF_FFFF));
        let mag = round_magnitude::<V, MAN>(a, f.emin, rounding, r);
        let finite = V::or_u(sign, V::min_i32(mag, s(f.max)));
        let inf = V::or_u(sign, s(f.inf));
        let nan = if f.nan_keeps_sign {
            V::or_u(sign, s(f.nan))
        } else {
            s(f.nan)
        };
        let out = V::select_u(V::eq_u(a, s(0x7F80_0000)), inf, finite);
        V::select_u(V::gt_i32(a, s(0x7F80_0000)), nan, out)
    }
}

/// A low-bit format's code (low bits of each lane) -> f32, exact; NaN codes give the quiet NaN
/// `0x7FC00000` with the code's sign (as `crate::reference::quant::to_f32`).
#[inline(always)]
pub(crate) unsafe fn from_small<V: Simd, const MAN: i32>(f: &Small, c: V::U) -> V::F {
    unsafe {
        let s = V::splat_u;
        let sign = V::shl_var(V::and_u(c, s(f.sign)), s(31 - f.sign_pos));
        let m = V::and_u(c, s(f.sign - 1));
        let exp = V::shr::<MAN>(m);
        let frac = V::and_u(m, s((1 << MAN) - 1));
        // Normal: exponent field exp - 1 + emin + 127, fraction bits under f32's 23.
        let normal = V::or_u(
            V::shl::<23>(V::add_u(exp, s((f.emin + 126) as u32))),
            V::shl_var(frac, s((23 - MAN) as u32)),
        );
        // Subnormal: frac * 2^(emin - MAN), exact.
        let unit = crate::reference::quant::pow2(f.emin - MAN);
        let tiny = V::to_bits(V::mul(V::u32_to_f32(frac), V::splat(unit)));
        let mag = V::select_u(V::eq_u(exp, s(0)), tiny, normal);
        let mag = V::select_u(V::eq_u(m, s(f.inf_code)), s(0x7F80_0000), mag);
        let mag = V::select_u(V::gt_i32(m, s(f.nan_from - 1)), s(0x7FC0_0000), mag);
        V::from_bits(V::or_u(sign, mag))
    }
}

/// f16 bits (low half of each lane) -> f32, exact (SPEC.md §4.4).
#[inline(always)]
pub(crate) unsafe fn from_f16<V: Simd>(h: V::U) -> V::F {
    unsafe {
        let s = V::splat_u;
        let sign = V::shl::<16>(V::and_u(h, s(0x8000)));
        let exp = V::and_u(V::shr::<10>(h), s(0x1F));
        let man = V::and_u(h, s(0x03FF));
        let man13 = V::shl::<13>(man);
        let normal = V::or_u(sign, V::or_u(V::shl::<23>(V::add_u(exp, s(112))), man13));
        let special = V::or_u(sign, V::or_u(s(0x7F80_0000), man13));
        let tiny = V::mul(V::u32_to_f32(man), V::from_bits(s(0x3380_0000)));
        let subnormal = V::or_u(sign, V::to_bits(tiny));
        let out = V::select_u(V::eq_u(exp, s(0x1F)), special, normal);
        V::from_bits(V::select_u(V::eq_u(exp, s(0)), subnormal, out))
    }
}

/// Replaces NaN lanes by the canonical NaN (SPEC.md §5).
#[inline(always)]
pub(crate) unsafe fn canonicalize<V: Simd>(x: V::F) -> V::F {
    unsafe {
        V::select(
            V::is_nan(x),
            V::from_bits(V::splat_u(crate::reference::round::CANONICAL_NAN_F32)),
            x,
        )
    }
}
