//! SPEC.md §4 on vectors: the same integer rules as `crate::reference::round`, lane-wise.

use crate::arch::Simd;
use crate::reference::round::Rounding;

/// f32 bits -> bf16 bits (in the low half of each lane) with `rounding`; `r` is used only when
/// stochastic. NaN lanes keep their top half with the quiet bit set.
///
/// Two forms of the same bits. Where a select is one instruction (AVX-512's merge-masked `vpord`,
/// NEON's `bsl`) the quieted top half is blended over NaN lanes. Elsewhere NaN lanes take no
/// increment and the quiet bit is or-ed in (`vpandn`, `vpand`, `vpor` on AVX2), which spares AVX2
/// a blend (`vpblendvb`, three uops on Intel) and the portable backend a select; with a one-
/// instruction select that form costs nearest-even one instruction more (AVX-512: +4% at 64K on
/// Zen 4; NEON: 10 vector instructions instead of 9).
#[inline(always)]
pub(crate) unsafe fn to_bf16<V: Simd>(b: V::U, rounding: Rounding, r: V::U) -> V::U {
    unsafe {
        let nan = V::is_nan_bits(b);
        let increment = bf16_increment::<V>(b, rounding, r);
        if V::CHEAP_SELECT {
            let quieted = V::or_u(V::shr::<16>(b), V::splat_u(0x40));
            V::select_u(nan, quieted, V::shr::<16>(V::add_u(b, increment)))
        } else {
            let quiet = V::keep_u(nan, V::splat_u(0x40));
            V::or_u(V::shr::<16>(V::add_u(b, V::clear_u(nan, increment))), quiet)
        }
    }
}

/// What [`to_bf16`] and [`to_bf16_high`] add to the f32 bits `b` before keeping the top half:
/// `0x7FFF` plus the kept lsb (nearest-even), the random bits `r` (stochastic), or nothing.
#[inline(always)]
unsafe fn bf16_increment<V: Simd>(b: V::U, rounding: Rounding, r: V::U) -> V::U {
    unsafe {
        match rounding {
            Rounding::NearestEven => {
                let lsb = V::and_u(V::shr::<16>(b), V::splat_u(1));
                V::add_u(V::splat_u(0x7FFF), lsb)
            }
            Rounding::Stochastic => r,
            Rounding::TowardZero => V::splat_u(0),
        }
    }
}

/// f32 bits -> bf16 bits in the **high** half of each lane (the low half is left over), the same
/// bits as [`to_bf16`] in every lane that is not NaN or is the canonical NaN `0x7FC0_0000` (the
/// increment, at most `0xFFFF`, leaves its top half `0x7FC0` as it is, which [`to_bf16`] also
/// gives it). Other NaN lanes are the caller's: the optimizers' stores hold only the canonical NaN
/// (SPEC.md §5); the conversions take [`to_bf16`] for a chunk with a NaN in it. Four to six vector
/// instructions fewer than [`to_bf16`] and the shift a store of its low halves takes.
#[inline(always)]
pub(crate) unsafe fn to_bf16_high<V: Simd>(b: V::U, rounding: Rounding, r: V::U) -> V::U {
    unsafe { V::add_u(b, bf16_increment::<V>(b, rounding, r)) }
}

/// SPEC.md §4.3's general rule on vectors: the magnitude code of `a` (finite magnitude bits) in a
/// format with `MAN` mantissa bits and minimum normal exponent `emin`, exponent field unbounded
/// above (as `crate::reference::round::round_magnitude`) up to `sat`: a magnitude at or above the
/// f32 bits `sat` (infinities and NaNs too) gives `sat`'s code, which the caller must clamp
/// (`sat`'s code lies above the format's largest finite one).
///
/// The same results as the spec's formula, computed in two ranges with constant shifts only (the
/// formula's shift depends on the exponent: four variable shifts per vector, several uops each on
/// AMD's AVX2 before Zen 2 and on NEON):
/// - `a >= 2^emin` (target normal): `n = a - (emin - 1 + 127) << 23` is the code times
///   `2^(23 - MAN)` plus the bits under the quantum, so the rounding is integer work on `n`;
/// - `a < 2^emin` (target subnormal or zero): the value scaled in f32 by a power of two (exact,
///   the default environment keeping subnormal inputs, SPEC.md §1), then converted or rounded.
#[inline(always)]
pub(crate) unsafe fn round_magnitude<V: Simd, const MAN: i32>(
    a: V::U,
    emin: i32,
    sat: u32,
    rounding: Rounding,
    r: V::U,
) -> V::U {
    unsafe {
        let s = V::splat_u;
        let base = (23 - MAN) as u32; // bits under the quantum in the normal range
        let emin_bits = ((emin + 127) as u32) << 23;
        let n = V::sub_u(V::min_i32(a, s(sat)), s(emin_bits - (1 << 23)));
        let tiny = V::gt_i32(s(emin_bits), a);
        let v = V::from_bits(a);
        match rounding {
            Rounding::NearestEven => {
                // n + half - 1 + lsb carries past the quantum exactly when the rule rounds up.
                let lsb = V::and_u(shr_n::<V>(n, base), s(1));
                let half_m1 = (1u32 << (base - 1)) - 1;
                let normal = shr_n::<V>(V::add_u(V::add_u(n, s(half_m1)), lsb), base);
                // v + 2^(emin - MAN + 23) has ulp 2^(emin - MAN), the quantum: the (nearest-even)
                // addition rounds v to it, and the sum's low bits are the code.
                let m = crate::reference::quant::pow2(emin - MAN + 23);
                let sum = V::to_bits(V::add(v, V::splat(m)));
                V::select_u(tiny, V::sub_u(sum, s(m.to_bits())), normal)
            }
            Rounding::Stochastic | Rounding::TowardZero => {
                // (q << 16) + frac16 in the spec's terms; adding r16 carries into q exactly when
                // the rule rounds up (toward zero: nothing added).
                let normal = if base >= 16 {
                    shr_n::<V>(n, base - 16)
                } else {
                    shl_n::<V>(n, 16 - base)
                };
                let t = V::select_u(tiny, fixed16_below_emin::<V, MAN>(a, emin), normal);
                if rounding == Rounding::Stochastic {
                    V::shr::<16>(V::add_u(t, r))
                } else {
                    V::shr::<16>(t)
                }
            }
        }
    }
}

/// `(q << 16) + frac16` of SPEC.md §4.3 for magnitudes `a < 2^emin` (the target's subnormal range,
/// quantum `2^(emin - MAN)`): the value times `2^(MAN + 16 - emin)`, exact in f32 (the default
/// environment keeps subnormal inputs, SPEC.md §1), truncated to an integer.
#[inline(always)]
unsafe fn fixed16_below_emin<V: Simd, const MAN: i32>(a: V::U, emin: i32) -> V::U {
    unsafe {
        let scale = crate::reference::quant::pow2(MAN + 16 - emin);
        V::f32_to_u32_trunc(V::mul(V::from_bits(a), V::splat(scale)))
    }
}

/// f16's minimum normal exponent (SPEC.md §4.3's `emin`; `man` is 10).
const F16_EMIN: i32 = -14;

/// `a >> count` with the count a constant after inlining (LLVM then emits an immediate shift).
#[inline(always)]
unsafe fn shr_n<V: Simd>(a: V::U, count: u32) -> V::U {
    unsafe { V::shr_var(a, V::splat_u(count)) }
}

/// `a << count`, as [`shr_n`].
#[inline(always)]
unsafe fn shl_n<V: Simd>(a: V::U, count: u32) -> V::U {
    unsafe { V::shl_var(a, V::splat_u(count)) }
}

/// f32 bits -> f16 bits by the general rule of SPEC.md §4.3.
#[inline(always)]
pub(crate) unsafe fn to_f16<V: Simd>(b: V::U, rounding: Rounding, r: V::U) -> V::U {
    unsafe {
        let s = V::splat_u;
        let sign = V::and_u(V::shr::<16>(b), s(0x8000));
        let a = V::and_u(b, s(0x7FFF_FFFF));
        if V::F16_HW {
            return match rounding {
                Rounding::Stochastic => to_f16_stochastic_hw::<V>(b, a, sign, r),
                _ => V::f32_to_f16_hw(V::from_bits(b), rounding == Rounding::TowardZero),
            };
        }
        // 2^16: code 0x7C00, above every finite f16.
        let mag = round_magnitude::<V, 10>(a, F16_EMIN, 0x4780_0000, rounding, r);
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

/// f32 bits -> f16 bits, stochastic (SPEC.md §4.3), through the hardware converter. In f16's
/// normal range (`a >= 2^-14`) the rule's shift is 13, so `(rem << 3) + r16 >= 2^16` exactly
/// when `rem + (r16 >> 3) >= 2^13` (2^16 is a multiple of 8): adding `r16 >> 3` to the f32
/// pattern carries into the kept bits (and on into the exponent) exactly when the rule rounds
/// up. With the 13 low bits then cleared, the value is one f16 holds, which nearest-even
/// conversion keeps, or at least 2^16, which it takes to ±Inf as the rule's clamp does (±Inf
/// itself: the addition stays under bit 13). NaN lanes go to the converter as they are (it
/// quiets them as the rule does); lanes under 2^-14 take the integer rule of
/// [`round_magnitude`]'s subnormal range. About half the vector instructions of the integer
/// rule in all ranges. `a` is `b`'s magnitude, `sign` its f16 sign.
#[inline(always)]
unsafe fn to_f16_stochastic_hw<V: Simd>(b: V::U, a: V::U, sign: V::U, r: V::U) -> V::U {
    unsafe {
        let s = V::splat_u;
        let kept = V::and_u(V::add_u(b, V::shr::<3>(r)), s(0xFFFF_E000));
        let normal = V::f32_to_f16_hw(V::from_bits(V::select_u(V::is_nan_bits(b), b, kept)), false);
        let tiny = V::gt_i32(s(((F16_EMIN + 127) as u32) << 23), a);
        let fixed = fixed16_below_emin::<V, 10>(a, F16_EMIN);
        let sub = V::or_u(sign, V::shr::<16>(V::add_u(fixed, r)));
        V::select_u(tiny, sub, normal)
    }
}

/// [`to_f16`] of `b` stored as `LANES` u16 at `p`. Where the backend has a converter
/// ([`Simd::F16_HW`]), nearest-even and toward zero are the converter's store. So is stochastic
/// rounding where no lane of the chunk is one [`f16_stochastic_needs_rule`] names (nearly every
/// chunk of real data): `b + (r16 >> 3)` converted toward zero is the rule's result from 2^-14
/// up to 65504 ([`to_f16_stochastic_hw`]: the same carry, the same 13 bits dropped; the sum
/// stays below 2^16, where the rule's overflow to infinity begins) and below 2^-40 (`a * 2^40
/// < 1`: `fixed16_below_emin` is 0, and the rule gives ±0). A test and a branch in place of the
/// NaN and subnormal lanes [`to_f16`] computes and selects, and no widening of the converter's
/// result and narrowing for the store; a chunk with such a lane takes [`to_f16`] after the test.
#[inline(always)]
pub(crate) unsafe fn store_f16<V: Simd>(p: *mut u16, b: V::U, rounding: Rounding, r: V::U) {
    unsafe {
        if V::F16_HW {
            match rounding {
                Rounding::Stochastic => {
                    let a = V::and_u(b, V::splat_u(0x7FFF_FFFF));
                    if !V::any(f16_stochastic_needs_rule::<V>(a)) {
                        let sum = V::add_u(b, V::shr::<3>(r));
                        return V::store_f16_hw(p, V::from_bits(sum), true);
                    }
                }
                _ => return V::store_f16_hw(p, V::from_bits(b), rounding == Rounding::TowardZero),
            }
        }
        V::store_u16(p, to_f16::<V>(b, rounding, r))
    }
}

/// The lanes [`store_f16`] leaves to [`to_f16`]: NaN, infinity and magnitudes `a` from 65504 up,
/// and `a` in `[2^-40, 2^-14)` (`2^(emin - 10 - 16)`: below it `a * 2^40 < 1`). `a - 2^-40`'s
/// pattern, shifted right by 23, is the binade counted from 2^-40: below 26 exactly for
/// `[2^-40, 2^-14)`, and far above it below 2^-40, where the subtraction wraps.
#[inline(always)]
unsafe fn f16_stochastic_needs_rule<V: Simd>(a: V::U) -> V::M {
    const BINADES: i32 = 10 + 16;
    const FROM: u32 = ((F16_EMIN - BINADES + 127) as u32) << 23;
    const F16_MAX: u32 = 65504.0f32.to_bits();
    unsafe {
        let s = V::splat_u;
        let binade = V::shr::<23>(V::sub_u(a, s(FROM)));
        V::mask_or(
            V::gt_i32(s(BINADES as u32), binade),
            V::gt_i32(a, s(F16_MAX - 1)),
        )
    }
}

/// A low-bit format's constants for the vector rules (SPEC.md §4.5), taken from
/// `crate::reference::quant::Format` so that both read the same numbers.
#[derive(Clone, Copy)]
pub(crate) struct Small {
    pub emin: i32,
    /// Magnitude code of the largest finite value.
    pub max: u32,
    /// f32 bits of the power of two just above the largest finite value: the [`round_magnitude`] cap.
    pub sat: u32,
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
            // The largest finite value lies in [2^e, 2^(e + 1)), e = field - 1 + emin.
            sat: ((((f.max as u32) >> f.man) as i32 + f.emin + 127) as u32) << 23,
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
        let sign = V::and_u(shr_n::<V>(b, 31 - f.sign_pos), s(f.sign));
        let a = V::and_u(b, s(0x7FFF_FFFF));
        let mag = round_magnitude::<V, MAN>(a, f.emin, f.sat, rounding, r);
        let finite = V::or_u(sign, V::min_i32(mag, s(f.max)));
        let inf = V::or_u(sign, s(f.inf));
        let nan = if f.nan_keeps_sign {
            V::or_u(sign, s(f.nan))
        } else {
            s(f.nan)
        };
        // Without an infinity code, infinity saturates, as `finite` already does (`sat`).
        let out = if f.inf == f.max {
            finite
        } else {
            V::select_u(V::eq_u(a, s(0x7F80_0000)), inf, finite)
        };
        V::select_u(V::gt_i32(a, s(0x7F80_0000)), nan, out)
    }
}

/// A low-bit format's code (low bits of each lane) -> f32, exact; NaN codes give the quiet NaN
/// `0x7FC00000` with the code's sign (as `crate::reference::quant::to_f32`).
#[inline(always)]
pub(crate) unsafe fn from_small<V: Simd, const MAN: i32>(f: &Small, c: V::U) -> V::F {
    unsafe {
        let s = V::splat_u;
        let sign = shl_n::<V>(V::and_u(c, s(f.sign)), 31 - f.sign_pos);
        let m = V::and_u(c, s(f.sign - 1));
        let exp = V::shr::<MAN>(m);
        let frac = V::and_u(m, s((1 << MAN) - 1));
        // Normal: exponent field exp - 1 + emin + 127, fraction bits under f32's 23.
        let normal = V::or_u(
            V::shl::<23>(V::add_u(exp, s((f.emin + 126) as u32))),
            shl_n::<V>(frac, (23 - MAN) as u32),
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
