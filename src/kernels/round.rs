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

/// f32 bits -> f16 bits by the general rule of SPEC.md §4.3.
#[inline(always)]
pub(crate) unsafe fn to_f16<V: Simd>(b: V::U, rounding: Rounding, r: V::U) -> V::U {
    unsafe {
        let s = V::splat_u;
        let sign = V::and_u(V::shr::<16>(b), s(0x8000));
        let a = V::and_u(b, s(0x7FFF_FFFF));
        let exp = V::shr::<23>(a);
        let sig = V::or_u(
            V::and_u(a, s(0x007F_FFFF)),
            V::select_u(V::eq_u(exp, s(0)), s(0), s(0x0080_0000)),
        );
        // With e = max(E, 1) - 127: bits under the quantum = 13 + max(0, -14 - e).
        let e1 = V::max_i32(exp, s(1));
        let extra = V::max_i32(V::sub_u(s(113), e1), s(0));
        let (q, up) = match rounding {
            Rounding::NearestEven => {
                // Any shift >= 25 gives q = 0 and rem < half, so 25 is a safe cap.
                let shift = V::min_i32(V::add_u(extra, s(13)), s(25));
                let q = V::shr_var(sig, shift);
                let rem = V::sub_u(sig, V::shl_var(q, shift));
                let half_m1 = V::sub_u(V::shl_var(s(1), V::sub_u(shift, s(1))), s(1));
                // rem + half - 1 + lsb >= 2^shift  <=>  round up (ties to even).
                let t = V::add_u(V::add_u(rem, half_m1), V::and_u(q, s(1)));
                (q, V::shr_var(t, shift))
            }
            Rounding::Stochastic => {
                let shift = V::min_i32(V::add_u(extra, s(13)), s(40));
                let q = V::shr_var(sig, shift);
                let rem = V::sub_u(sig, V::shl_var(q, shift));
                let down = V::shr_var(rem, V::sub_u(shift, s(16)));
                let upshift = V::shl_var(rem, V::sub_u(s(16), shift));
                let frac16 = V::select_u(V::gt_i32(shift, s(15)), down, upshift);
                (q, V::shr::<16>(V::add_u(frac16, r)))
            }
            Rounding::TowardZero => {
                let shift = V::min_i32(V::add_u(extra, s(13)), s(40));
                (V::shr_var(sig, shift), s(0))
            }
        };
        let exp_base = V::sub_u(V::max_i32(e1, s(113)), s(113));
        let mag = V::add_u(V::add_u(V::shl::<10>(exp_base), q), up);
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
