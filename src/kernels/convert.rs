//! Random-bit fill and the slice conversions (SPEC.md §3.2, §4).
//!
//! Each kernel is a loop over aligned chunks; a partial chunk is staged through zeroed stack
//! buffers and runs the same per-chunk function as a full one.

use super::round::{from_bf16, from_f16, to_bf16, to_f16};
use super::{GroupBits, Stage, chunks, stage_in, stage_out};
use crate::arch::Simd;
use crate::reference::philox::BitsCoord;
use crate::reference::round::Rounding;

/// SPEC.md §3.2: the bits of elements `base .. base + out.len()`.
#[inline(always)]
pub(crate) unsafe fn fill_bits<V: Simd>(coord: &BitsCoord, base: u64, out: &mut [u16]) {
    unsafe {
        let mut rng = GroupBits::<V>::new(*coord);
        let dst = out.as_mut_ptr();
        for c in chunks::<V>(base, out.len()) {
            let r = rng.r16(c.e);
            if c.is_full::<V>() {
                V::store_u16(dst.offset(c.off), r);
            } else {
                let mut st = Stage::new();
                V::store_u16(st.h.as_mut_ptr(), r);
                stage_out(st.h.as_ptr(), dst, &c);
            }
        }
    }
}

/// Which 16-bit format a narrowing kernel writes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Narrow {
    Bf16,
    F16,
}

#[inline(always)]
unsafe fn narrow_chunk<V: Simd>(
    fmt: Narrow,
    s: *const f32,
    d: *mut u16,
    rounding: Rounding,
    r: V::U,
) {
    unsafe {
        let b = V::to_bits(V::load(s));
        let out = match fmt {
            Narrow::Bf16 => to_bf16::<V>(b, rounding, r),
            Narrow::F16 => to_f16::<V>(b, rounding, r),
        };
        V::store_u16(d, out);
    }
}

/// f32 -> bf16 or f16 with `rounding`, random bits from `coord` at global index `base`.
#[inline(always)]
pub(crate) unsafe fn narrow<V: Simd>(
    fmt: Narrow,
    src: &[f32],
    dst: &mut [u16],
    rounding: Rounding,
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        let mut rng = GroupBits::<V>::new(*coord);
        let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
        for c in chunks::<V>(base, src.len()) {
            let r = if rounding == Rounding::Stochastic {
                rng.r16(c.e)
            } else {
                V::splat_u(0)
            };
            if c.is_full::<V>() {
                narrow_chunk::<V>(fmt, sp.offset(c.off), dp.offset(c.off), rounding, r);
            } else {
                let mut st = Stage::new();
                stage_in(sp, st.f.as_mut_ptr(), &c);
                narrow_chunk::<V>(fmt, st.f.as_ptr(), st.h.as_mut_ptr(), rounding, r);
                stage_out(st.h.as_ptr(), dp, &c);
            }
        }
    }
}

#[inline(always)]
unsafe fn widen_chunk<V: Simd>(fmt: Narrow, s: *const u16, d: *mut f32) {
    unsafe {
        let h = V::load_u16(s);
        let out = match fmt {
            Narrow::Bf16 => from_bf16::<V>(h),
            Narrow::F16 => from_f16::<V>(h),
        };
        V::store(d, out);
    }
}

/// bf16 or f16 -> f32 (exact).
#[inline(always)]
pub(crate) unsafe fn widen<V: Simd>(fmt: Narrow, src: &[u16], dst: &mut [f32]) {
    unsafe {
        let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
        for c in chunks::<V>(0, src.len()) {
            if c.is_full::<V>() {
                widen_chunk::<V>(fmt, sp.offset(c.off), dp.offset(c.off));
            } else {
                let mut st = Stage::new();
                stage_in(sp, st.h.as_mut_ptr(), &c);
                widen_chunk::<V>(fmt, st.h.as_ptr(), st.f.as_mut_ptr());
                stage_out(st.f.as_ptr(), dp, &c);
            }
        }
    }
}

#[inline(always)]
unsafe fn split_chunk<V: Simd>(s: *const f32, t: *mut u16, l: *mut u16) {
    unsafe {
        let b = V::to_bits(V::load(s));
        V::store_u16(t, V::shr::<16>(b));
        V::store_u16(l, b);
    }
}

/// f32 -> (top, trail).
#[inline(always)]
pub(crate) unsafe fn split<V: Simd>(src: &[f32], top: &mut [u16], trail: &mut [u16]) {
    unsafe {
        let (sp, tp, lp) = (src.as_ptr(), top.as_mut_ptr(), trail.as_mut_ptr());
        for c in chunks::<V>(0, src.len()) {
            if c.is_full::<V>() {
                split_chunk::<V>(sp.offset(c.off), tp.offset(c.off), lp.offset(c.off));
            } else {
                let mut st = Stage::new();
                stage_in(sp, st.f.as_mut_ptr(), &c);
                split_chunk::<V>(st.f.as_ptr(), st.h.as_mut_ptr(), st.h2.as_mut_ptr());
                stage_out(st.h.as_ptr(), tp, &c);
                stage_out(st.h2.as_ptr(), lp, &c);
            }
        }
    }
}

#[inline(always)]
unsafe fn combine_chunk<V: Simd>(t: *const u16, l: *const u16, d: *mut f32) {
    unsafe {
        let b = V::or_u(V::shl::<16>(V::load_u16(t)), V::load_u16(l));
        V::store(d, V::from_bits(b));
    }
}

/// (top, trail) -> f32.
#[inline(always)]
pub(crate) unsafe fn combine<V: Simd>(top: &[u16], trail: &[u16], dst: &mut [f32]) {
    unsafe {
        let (tp, lp, dp) = (top.as_ptr(), trail.as_ptr(), dst.as_mut_ptr());
        for c in chunks::<V>(0, top.len()) {
            if c.is_full::<V>() {
                combine_chunk::<V>(tp.offset(c.off), lp.offset(c.off), dp.offset(c.off));
            } else {
                let mut st = Stage::new();
                stage_in(tp, st.h.as_mut_ptr(), &c);
                stage_in(lp, st.h2.as_mut_ptr(), &c);
                combine_chunk::<V>(st.h.as_ptr(), st.h2.as_ptr(), st.f.as_mut_ptr());
                stage_out(st.f.as_ptr(), dp, &c);
            }
        }
    }
}
