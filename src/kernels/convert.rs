//! The slice conversions (SPEC.md §4): f32 to and from bf16 and f16, Split-SGD split and combine.
//!
//! Each kernel is a [`ChunkBody`]: `full` works in place, `partial` stages the chunk through
//! zeroed stack buffers and runs the same per-chunk function.

use super::Simd;
use super::round::{from_f16, store_f16, to_bf16, to_bf16_high};
use super::{
    BitsBlock, Chunk, ChunkBody, RoundingBits, Stage, conversion_full_run, run_chunks,
    run_conversion, stage_in, stage_out,
};
use crate::reference::bits::BitsCoord;
use crate::reference::round::Rounding;

/// Which 16-bit format a conversion reads or writes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Narrow {
    Bf16,
    F16,
}

struct NarrowK<V: Simd> {
    fmt: Narrow,
    rounding: Rounding,
    rng: RoundingBits<V>,
    src: *const f32,
    dst: *mut u16,
}

impl<V: Simd> NarrowK<V> {
    #[inline(always)]
    unsafe fn chunk(&mut self, s: *const f32, d: *mut u16, e: u64) {
        unsafe {
            let r = self.rng.for_rounding::<false>(self.rounding, e);
            self.chunk_with(s, d, r)
        }
    }

    /// The chunk at `s` rounded with the random bits `r` (low halves).
    #[inline(always)]
    unsafe fn chunk_with(&self, s: *const f32, d: *mut u16, r: V::U) {
        unsafe {
            let b = V::to_bits(V::load(s));
            match self.fmt {
                // A chunk without NaN (nearly all) skips `to_bf16`'s NaN lanes: one compare and
                // a branch instead of four to five vector instructions.
                Narrow::Bf16 if !V::any(V::is_nan_bits(b)) => {
                    V::store_u16_high(d, to_bf16_high::<V>(b, self.rounding, r))
                }
                Narrow::Bf16 => V::store_u16(d, to_bf16::<V>(b, self.rounding, r)),
                Narrow::F16 => store_f16::<V>(d, b, self.rounding, r),
            }
        }
    }

    /// The chunks at `s` and `s + 16` rounded with the bits `lo` and `hi`. For bf16, one NaN test
    /// for both (x86: one compare and one branch where each chunk took its own).
    #[inline(always)]
    unsafe fn pair_with(&self, s: *const f32, d: *mut u16, lo: V::U, hi: V::U) {
        unsafe {
            if self.fmt == Narrow::Bf16 {
                let (a, b) = (V::load(s), V::load(s.add(16)));
                if !V::any(V::is_nan2(a, b)) {
                    let a = to_bf16_high::<V>(V::to_bits(a), self.rounding, lo);
                    let b = to_bf16_high::<V>(V::to_bits(b), self.rounding, hi);
                    if V::PAIRED_U16 && V::LANES == 16 {
                        // The two chunks are adjacent: one line, one permute (AVX-512).
                        V::store_u16_high_pair(d, [a, b]);
                    } else {
                        V::store_u16_high(d, a);
                        V::store_u16_high(d.add(16), b);
                    }
                    return;
                }
            }
            self.chunk_with(s, d, lo);
            self.chunk_with(s.add(16), d.add(16), hi);
        }
    }

    /// The four 8-lane chunks of a group at `s` ([`super::RoundsChunks::round_group`]: the words
    /// `w`, `mask` their low halves). For bf16, one NaN test for all four, and each two adjacent
    /// chunks written by one [`crate::arch::Simd::store_u16_high_pair`] (AVX2: one 256-bit store
    /// where each chunk took a 128-bit one and a shuffle more).
    #[inline(always)]
    unsafe fn group_with(&self, s: *const f32, d: *mut u16, w: [V::U; 2], mask: V::U) {
        unsafe {
            let l = V::LANES;
            if self.fmt == Narrow::Bf16 {
                let (a, b) = (V::load(s), V::load(s.add(l)));
                let (c, e) = (V::load(s.add(16)), V::load(s.add(16 + l)));
                if !V::any(V::mask_or(V::is_nan2(a, b), V::is_nan2(c, e))) {
                    let rd = self.rounding;
                    let a = to_bf16_high::<V>(V::to_bits(a), rd, V::and_u(w[0], mask));
                    let b = to_bf16_high::<V>(V::to_bits(b), rd, V::and_u(w[1], mask));
                    let c = to_bf16_high::<V>(V::to_bits(c), rd, V::shr::<16>(w[0]));
                    let e = to_bf16_high::<V>(V::to_bits(e), rd, V::shr::<16>(w[1]));
                    V::store_u16_high_pair(d, [a, b]);
                    V::store_u16_high_pair(d.add(16), [c, e]);
                    return;
                }
            }
            for (k, w) in w.into_iter().enumerate() {
                let at = k * l;
                self.chunk_with(s.add(at), d.add(at), V::and_u(w, mask));
                self.chunk_with(s.add(at + 16), d.add(at + 16), V::shr::<16>(w));
            }
        }
    }
}

impl<V: Simd> ChunkBody<V> for NarrowK<V> {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe { self.chunk(self.src.offset(off), self.dst.offset(off), e) }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut st = Stage::new();
            stage_in(self.src, st.f.as_mut_ptr(), c);
            self.chunk(st.f.as_ptr(), st.h.as_mut_ptr(), c.e);
            stage_out(st.h.as_ptr(), self.dst, c);
        }
    }
    #[inline(always)]
    unsafe fn full_run(&mut self, off: isize, e: u64, end: u64) {
        unsafe { conversion_full_run::<V, Self>(self, off, e, end) }
    }
}

rounds_chunks!(NarrowK, pairs);

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
        // One loop per rounding (the entry points pass `fmt` as a constant).
        per_rounding!(rounding, r => narrow_run::<V>(fmt, r, src, dst, coord, base))
    }
}

#[inline(always)]
unsafe fn narrow_run<V: Simd>(
    fmt: Narrow,
    rounding: Rounding,
    src: &[f32],
    dst: &mut [u16],
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        // One pointer for the body and the prefetching: a second `as_mut_ptr` would retag the
        // slice and invalidate the first (Miri, Stacked Borrows).
        let dst = dst.as_mut_ptr();
        let mut block = BitsBlock::new();
        let mut k = NarrowK::<V> {
            fmt,
            rounding,
            rng: RoundingBits::new(*coord, base + src.len() as u64, &mut block),
            src: src.as_ptr(),
            dst,
        };
        run_conversion::<V, _, _>(base, src, dst, &mut k);
    }
}

struct WidenK {
    fmt: Narrow,
    src: *const u16,
    dst: *mut f32,
}

impl WidenK {
    #[inline(always)]
    unsafe fn chunk<V: Simd>(&self, s: *const u16, d: *mut f32) {
        unsafe {
            let out = match self.fmt {
                Narrow::Bf16 => V::from_bits(V::load_u16_high(s)),
                Narrow::F16 => from_f16::<V>(V::load_u16(s)),
            };
            V::store(d, out);
        }
    }
}

impl<V: Simd> ChunkBody<V> for WidenK {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, _e: u64) {
        unsafe { self.chunk::<V>(self.src.offset(off), self.dst.offset(off)) }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut st = Stage::new();
            stage_in(self.src, st.h.as_mut_ptr(), c);
            self.chunk::<V>(st.h.as_ptr(), st.f.as_mut_ptr());
            stage_out(st.f.as_ptr(), self.dst, c);
        }
    }
}

/// bf16 or f16 -> f32 (exact).
#[inline(always)]
pub(crate) unsafe fn widen<V: Simd>(fmt: Narrow, src: &[u16], dst: &mut [f32]) {
    unsafe {
        let mut k = WidenK {
            fmt,
            src: src.as_ptr(),
            dst: dst.as_mut_ptr(),
        };
        run_chunks::<V, _>(0, src.len(), &mut k);
    }
}

struct SplitK {
    src: *const f32,
    top: *mut u16,
    trail: *mut u16,
}

#[inline(always)]
unsafe fn split_chunk<V: Simd>(s: *const f32, t: *mut u16, l: *mut u16) {
    unsafe {
        let b = V::to_bits(V::load(s));
        V::store_u16_halves(t, l, b);
    }
}

impl<V: Simd> ChunkBody<V> for SplitK {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, _e: u64) {
        unsafe {
            split_chunk::<V>(
                self.src.offset(off),
                self.top.offset(off),
                self.trail.offset(off),
            )
        }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut st = Stage::new();
            stage_in(self.src, st.f.as_mut_ptr(), c);
            split_chunk::<V>(st.f.as_ptr(), st.h.as_mut_ptr(), st.h2.as_mut_ptr());
            stage_out(st.h.as_ptr(), self.top, c);
            stage_out(st.h2.as_ptr(), self.trail, c);
        }
    }
}

/// f32 -> (top, trail).
#[inline(always)]
pub(crate) unsafe fn split<V: Simd>(src: &[f32], top: &mut [u16], trail: &mut [u16]) {
    unsafe {
        let mut k = SplitK {
            src: src.as_ptr(),
            top: top.as_mut_ptr(),
            trail: trail.as_mut_ptr(),
        };
        run_chunks::<V, _>(0, src.len(), &mut k);
    }
}

struct CombineK {
    top: *const u16,
    trail: *const u16,
    dst: *mut f32,
}

#[inline(always)]
unsafe fn combine_chunk<V: Simd>(t: *const u16, l: *const u16, d: *mut f32) {
    unsafe {
        let b = V::load_u16_halves(t, l);
        V::store(d, V::from_bits(b));
    }
}

impl<V: Simd> ChunkBody<V> for CombineK {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, _e: u64) {
        unsafe {
            combine_chunk::<V>(
                self.top.offset(off),
                self.trail.offset(off),
                self.dst.offset(off),
            )
        }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut st = Stage::new();
            stage_in(self.top, st.h.as_mut_ptr(), c);
            stage_in(self.trail, st.h2.as_mut_ptr(), c);
            combine_chunk::<V>(st.h.as_ptr(), st.h2.as_ptr(), st.f.as_mut_ptr());
            stage_out(st.f.as_ptr(), self.dst, c);
        }
    }
}

/// (top, trail) -> f32.
#[inline(always)]
pub(crate) unsafe fn combine<V: Simd>(top: &[u16], trail: &[u16], dst: &mut [f32]) {
    unsafe {
        let mut k = CombineK {
            top: top.as_ptr(),
            trail: trail.as_ptr(),
            dst: dst.as_mut_ptr(),
        };
        run_chunks::<V, _>(0, top.len(), &mut k);
    }
}
