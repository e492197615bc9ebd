//! Random-bit fill and the slice conversions (SPEC.md §3.2, §4).

use super::round::{from_bf16, from_f16, to_bf16, to_f16};
use super::{Chunk, GroupBits, Stage, for_each_chunk, stage_in, stage_out};
use crate::arch::Simd;
use crate::reference::philox::BitsCoord;
use crate::reference::round::Rounding;

/// Runs `body(src_ptr, dst_ptr, chunk)` on every chunk, staging partial ones: `body` reads
/// `LANES` elements at `src_ptr` and writes `LANES` at `dst_ptr`.
#[inline(always)]
unsafe fn map_chunks<V: Simd, S: Copy + Default, D: Copy + Default>(
    src: *const S,
    dst: *mut D,
    base: u64,
    n: usize,
    mut body: impl FnMut(*const S, *mut D, &Chunk),
) {
    unsafe {
        for_each_chunk::<V>(base, n, |c| {
            if c.is_full::<V>() {
                body(src.offset(c.off), dst.offset(c.off), &c);
            } else {
                let mut s = [S::default(); crate::arch::MAX_LANES];
                let mut d = [D::default(); crate::arch::MAX_LANES];
                stage_in(src, s.as_mut_ptr(), &c);
                body(s.as_ptr(), d.as_mut_ptr(), &c);
                stage_out(d.as_ptr(), dst, &c);
            }
        });
    }
}

/// SPEC.md §3.2: the bits of elements `base .. base + out.len()`.
#[inline(always)]
pub(crate) unsafe fn fill_bits<V: Simd>(coord: &BitsCoord, base: u64, out: &mut [u16]) {
    unsafe {
        let mut rng = GroupBits::<V>::new(*coord);
        let dst = out.as_mut_ptr();
        for_each_chunk::<V>(base, out.len(), |c| {
            let r = rng.r16(c.e);
            if c.is_full::<V>() {
                V::store_u16(dst.offset(c.off), r);
            } else {
                let mut st = Stage::new();
                V::store_u16(st.h.as_mut_ptr(), r);
                stage_out(st.h.as_ptr(), dst, &c);
            }
        });
    }
}

#[inline(always)]
pub(crate) unsafe fn f32_to_bf16<V: Simd>(
    src: &[f32],
    dst: &mut [u16],
    rounding: Rounding,
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        let mut rng = GroupBits::<V>::new(*coord);
        map_chunks::<V, f32, u16>(
            src.as_ptr(),
            dst.as_mut_ptr(),
            base,
            src.len(),
            |s, d, c| {
                let r = if rounding == Rounding::Stochastic {
                    rng.r16(c.e)
                } else {
                    V::splat_u(0)
                };
                V::store_u16(d, to_bf16::<V>(V::to_bits(V::load(s)), rounding, r));
            },
        );
    }
}

#[inline(always)]
pub(crate) unsafe fn f32_to_f16<V: Simd>(
    src: &[f32],
    dst: &mut [u16],
    rounding: Rounding,
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        let mut rng = GroupBits::<V>::new(*coord);
        map_chunks::<V, f32, u16>(
            src.as_ptr(),
            dst.as_mut_ptr(),
            base,
            src.len(),
            |s, d, c| {
                let r = if rounding == Rounding::Stochastic {
                    rng.r16(c.e)
                } else {
                    V::splat_u(0)
                };
                V::store_u16(d, to_f16::<V>(V::to_bits(V::load(s)), rounding, r));
            },
        );
    }
}

#[inline(always)]
pub(crate) unsafe fn bf16_to_f32<V: Simd>(src: &[u16], dst: &mut [f32]) {
    unsafe {
        map_chunks::<V, u16, f32>(src.as_ptr(), dst.as_mut_ptr(), 0, src.len(), |s, d, _| {
            V::store(d, from_bf16::<V>(V::load_u16(s)));
        });
    }
}

#[inline(always)]
pub(crate) unsafe fn f16_to_f32<V: Simd>(src: &[u16], dst: &mut [f32]) {
    unsafe {
        map_chunks::<V, u16, f32>(src.as_ptr(), dst.as_mut_ptr(), 0, src.len(), |s, d, _| {
            V::store(d, from_f16::<V>(V::load_u16(s)));
        });
    }
}

/// f32 -> (top, trail). `trail` is written through a second staged pointer.
#[inline(always)]
pub(crate) unsafe fn split<V: Simd>(src: &[f32], top: &mut [u16], trail: &mut [u16]) {
    unsafe {
        let trail_p = trail.as_mut_ptr();
        for_each_chunk::<V>(0, src.len(), |c| {
            let run = |s: *const f32, t: *mut u16, l: *mut u16| {
                let b = V::to_bits(V::load(s));
                V::store_u16(t, V::shr::<16>(b));
                V::store_u16(l, b);
            };
            if c.is_full::<V>() {
                run(
                    src.as_ptr().offset(c.off),
                    top.as_mut_ptr().offset(c.off),
                    trail_p.offset(c.off),
                );
            } else {
                let mut st = Stage::new();
                stage_in(src.as_ptr(), st.f.as_mut_ptr(), &c);
                run(st.f.as_ptr(), st.h.as_mut_ptr(), st.h2.as_mut_ptr());
                stage_out(st.h.as_ptr(), top.as_mut_ptr(), &c);
                stage_out(st.h2.as_ptr(), trail_p, &c);
            }
        });
    }
}

/// (top, trail) -> f32.
#[inline(always)]
pub(crate) unsafe fn combine<V: Simd>(top: &[u16], trail: &[u16], dst: &mut [f32]) {
    unsafe {
        for_each_chunk::<V>(0, top.len(), |c| {
            let run = |t: *const u16, l: *const u16, d: *mut f32| {
                let b = V::or_u(V::shl::<16>(V::load_u16(t)), V::load_u16(l));
                V::store(d, V::from_bits(b));
            };
            if c.is_full::<V>() {
                run(
                    top.as_ptr().offset(c.off),
                    trail.as_ptr().offset(c.off),
                    dst.as_mut_ptr().offset(c.off),
                );
            } else {
                let mut st = Stage::new();
                stage_in(top.as_ptr(), st.h.as_mut_ptr(), &c);
                stage_in(trail.as_ptr(), st.h2.as_mut_ptr(), &c);
                run(st.h.as_ptr(), st.h2.as_ptr(), st.f.as_mut_ptr());
                stage_out(st.f.as_ptr(), dst.as_mut_ptr(), &c);
            }
        });
    }
}
