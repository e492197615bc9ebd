//! The Split-SGD layout (SPEC.md §4.4): an f32 held as its high half (a bf16, truncated) and
//! its low half. Splitting and combining are exact inverses on every bit pattern.

use half::bf16;

/// `x` as (top, trail) = (high 16 bits, low 16 bits). The bits are taken as they are, NaN
/// included: a NaN whose payload lies only in the low half has an Inf top (SPEC.md §4.4).
#[inline]
pub fn split_one(x: f32) -> (bf16, u16) {
    let b = x.to_bits();
    (bf16::from_bits((b >> 16) as u16), b as u16)
}

/// The f32 whose bits are `top << 16 | trail`.
#[inline]
pub fn combine_one(top: bf16, trail: u16) -> f32 {
    f32::from_bits(u32::from(top.to_bits()) << 16 | u32::from(trail))
}
