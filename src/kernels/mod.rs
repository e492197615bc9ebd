//! Every kernel, written once, generic over the lane type [`Simd`]. The per-ISA modules in
//! `crate::arch` hold only primitives; `crate::dispatch` instantiates these functions once per
//! backend inside a `#[target_feature]` entry point.
//!
//! Layout of the work: elements are processed in chunks of `LANES` aligned to the **global**
//! element index, so that chunk boundaries line up with the RNG groups (SPEC.md §3.2) and with
//! the reduction lanes (§7) wherever a slice starts. A chunk that is only partly inside the slice
//! (the head and the tail) is copied into zeroed stack buffers and runs through exactly the same
//! vector code; only the valid lanes are copied back.

#![allow(unsafe_code)]
// `match` instead of `Option::map`: closures here would lose the target features (see `ChunkBody`).
#![allow(clippy::manual_map)]

/// `$body` with `$r` bound to the value of `$rounding`, as a constant: one copy of `$body` per
/// rounding, so that the loops in it test the rounding once per call instead of once per chunk
/// (with it a runtime value, each chunk of an fp8 stochastic conversion ran two more branches and
/// reloaded its vector constants from memory: 18% more instructions on AVX2, callgrind).
macro_rules! per_rounding {
    ($rounding:expr, $r:ident => $body:expr) => {
        match $rounding {
            Rounding::NearestEven => {
                let $r = Rounding::NearestEven;
                $body
            }
            Rounding::Stochastic => {
                let $r = Rounding::Stochastic;
                $body
            }
            Rounding::TowardZero => {
                let $r = Rounding::TowardZero;
                $body
            }
        }
    };
}

/// [`RoundsChunks`] for a conversion body with the fields `rounding`, `rng` (its
/// [`RoundingBits`]), `src` and `dst` and a method `chunk_with(s, d, r)` that rounds the chunk at
/// `s` into `d` with the bits `r`; with `pairs`, also `pair_with(s, d, lo, hi)`, which rounds the
/// chunks at `s` and `s + 16` ([`RoundsChunks::round_pair`]).
macro_rules! rounds_chunks {
    ($body:ident, pairs) => {
        rounds_chunks!($body, {
            #[inline(always)]
            unsafe fn round_pair(&mut self, off: isize, lo: V::U, hi: V::U) {
                unsafe { self.pair_with(self.src.offset(off), self.dst.offset(off), lo, hi) }
            }
            #[inline(always)]
            unsafe fn round_group(&mut self, off: isize, w: [V::U; 2], mask: V::U) {
                unsafe { self.group_with(self.src.offset(off), self.dst.offset(off), w, mask) }
            }
            #[inline(always)]
            fn rounds_without_bits(&self) -> bool {
                self.rounding != $crate::reference::round::Rounding::Stochastic
            }
        });
    };
    ($body:ident) => {
        rounds_chunks!($body, {});
    };
    ($body:ident, { $($pair:tt)* }) => {
        impl<V: Simd> $crate::kernels::RoundsChunks<V> for $body<V> {
            $($pair)*
            #[inline(always)]
            unsafe fn round_full(&mut self, off: isize, r: V::U) {
                unsafe { self.chunk_with(self.src.offset(off), self.dst.offset(off), r) }
            }
            #[inline(always)]
            fn span_coord(&self) -> Option<$crate::reference::bits::BitsCoord> {
                $crate::kernels::spans_inline::<V>(self.rounding).then(|| self.rng.coord())
            }
        }
    };
}

pub(crate) mod bits;
pub(crate) mod convert;
pub(crate) mod optim;
pub(crate) mod quant;
pub(crate) mod round;

use crate::arch::{self, MAX_LANES};

use crate::reference::bits::BitsCoord;
pub(crate) use bits::{
    BitsBlock, BitsFill, GroupBits, PairDraw, RoundingBits, RoundsChunks, SEQ_GROUPS,
    full_run_groups, full_run_spans, partners, spans_inline,
};

/// One chunk of `V::LANES` lanes: lane `l` is global element `e + l`, local element `off + l`;
/// lanes `lo..hi` are inside the slice.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunk {
    pub e: u64,
    pub off: isize,
    pub lo: usize,
    pub hi: usize,
}

/// What a kernel does with one chunk: `full` for a chunk entirely inside the slice (local offset
/// `off`, global index `e`), `partial` for the head or tail chunk, which it stages.
///
/// A trait rather than a closure: closures defined in these generic functions would be compiled
/// without the entry point's target features, and every intrinsic in them would become a call.
pub(crate) trait ChunkBody<V: Simd> {
    unsafe fn full(&mut self, off: isize, e: u64);
    unsafe fn partial(&mut self, c: &Chunk);
    /// Whether [`ChunkBody::prefetch`] runs before each full chunk (asked once per call).
    #[inline(always)]
    fn prefetching(&self) -> bool {
        false
    }
    /// Prefetches ahead of the full chunk at local offset `off`.
    #[inline(always)]
    unsafe fn prefetch(&mut self, _off: isize) {}
    /// Runs the full chunks from local offset `off` (global index `e`) up to global index `end`
    /// in order, prefetching before each where [`ChunkBody::prefetching`]: [`ChunkBody::full`]
    /// one after another, unless the body overlaps them.
    #[inline(always)]
    unsafe fn full_run(&mut self, off: isize, e: u64, end: u64) {
        unsafe { full_run_plain::<V, Self>(self, off, e, end) }
    }
}

/// [`ChunkBody::full_run`]'s default: `full` chunk after chunk.
#[inline(always)]
pub(crate) unsafe fn full_run_plain<V: Simd, B: ChunkBody<V> + ?Sized>(
    body: &mut B,
    mut off: isize,
    mut e: u64,
    end: u64,
) {
    unsafe {
        let l = V::LANES as u64;
        // Two copies of the loop: a test per chunk cost two instructions per chunk where
        // prefetching is off (LLVM did not unswitch it), and only this loop, not the whole
        // kernel, is worth duplicating.
        if body.prefetching() {
            while e < end {
                body.prefetch(off);
                body.full(off, e);
                off += V::LANES as isize;
                e += l;
            }
        } else {
            while e < end {
                body.full(off, e);
                off += V::LANES as isize;
                e += l;
            }
        }
    }
}

/// Runs `body` over the `LANES`-aligned chunks covering global indices `base .. base + n`, in
/// order: a partial head chunk, a counted loop over full chunks, a partial tail chunk.
#[inline(always)]
pub(crate) unsafe fn run_chunks<V: Simd, B: ChunkBody<V>>(base: u64, n: usize, body: &mut B) {
    unsafe {
        if n == 0 {
            return;
        }
        let l = V::LANES as u64;
        let end = base + n as u64;
        let first_full = base.div_ceil(l) * l;
        let last_full_end = end / l * l;
        let chunk = |e: u64| Chunk {
            e,
            off: (e as i128 - base as i128) as isize,
            lo: base.saturating_sub(e) as usize,
            hi: (end - e).min(l) as usize,
        };
        if first_full >= last_full_end {
            // No full chunk: one or two partial ones.
            let mut e = base - base % l;
            while e < end {
                body.partial(&chunk(e));
                e += l;
            }
            return;
        }
        if first_full > base {
            body.partial(&chunk(first_full - l));
        }
        body.full_run((first_full - base) as isize, first_full, last_full_end);
        if last_full_end < end {
            body.partial(&chunk(last_full_end));
        }
    }
}

/// The lane type every kernel runs on: an ISA's primitives ([`arch::Simd`]) and its random-bit
/// fill ([`BitsFill`]), which `dispatch` compiles inside the backend's target features.
pub(crate) trait Simd: arch::Simd + BitsFill {}

impl<V: arch::Simd + BitsFill> Simd for V {}

/// How far ahead of a full chunk the conversions prefetch, in elements: 4 KiB of f32 input (and
/// 2 KiB of bf16 output, 1 KiB of fp8).
const CONVERT_PREFETCH_AHEAD: isize = 1024;

/// Whether a conversion of `n` elements prefetches ahead of each full chunk: from
/// [`optim::PREFETCH_MIN`] elements, where software prefetching is on for long runs (Intel CPUs by
/// default; not Zen 3's large pieces, measured on the optimizer steps only): a
/// stochastic conversion's random-bit fill is a burst of arithmetic with no loads, through which the
/// hardware prefetchers' streams fall behind (docs/DESIGN.md, "SIMD backends").
#[inline(always)]
fn convert_prefetches<V: Simd>(n: usize) -> bool {
    V::HAS_PREFETCH
        && n >= optim::PREFETCH_MIN
        && crate::cpu::prefetch() == crate::cpu::Prefetch::LongRuns
}

/// A conversion's chunk body with prefetching added: [`CONVERT_PREFETCH_AHEAD`] elements past each
/// full chunk in the input and output (a hint: past the end of either it does nothing).
struct Prefetched<'a, B, T> {
    body: &'a mut B,
    src: *const f32,
    dst: *mut T,
}

impl<V: Simd, B: ChunkBody<V> + RoundsChunks<V>, T> ChunkBody<V> for Prefetched<'_, B, T> {
    #[inline(always)]
    fn prefetching(&self) -> bool {
        true
    }
    #[inline(always)]
    unsafe fn prefetch(&mut self, off: isize) {
        unsafe {
            V::prefetch(
                self.src
                    .wrapping_offset(off + CONVERT_PREFETCH_AHEAD)
                    .cast(),
            );
            V::prefetch(
                self.dst
                    .wrapping_offset(off + CONVERT_PREFETCH_AHEAD)
                    .cast(),
            );
        }
    }
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe { self.body.full(off, e) }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe { self.body.partial(c) }
    }
    #[inline(always)]
    unsafe fn full_run(&mut self, off: isize, e: u64, end: u64) {
        unsafe { conversion_full_run::<V, Self>(self, off, e, end) }
    }
}

impl<V: Simd, B: RoundsChunks<V>, T> RoundsChunks<V> for Prefetched<'_, B, T> {
    #[inline(always)]
    unsafe fn round_full(&mut self, off: isize, r: V::U) {
        unsafe { self.body.round_full(off, r) }
    }
    #[inline(always)]
    unsafe fn round_pair(&mut self, off: isize, lo: V::U, hi: V::U) {
        unsafe { self.body.round_pair(off, lo, hi) }
    }
    #[inline(always)]
    unsafe fn round_group(&mut self, off: isize, w: [V::U; 2], mask: V::U) {
        unsafe { self.body.round_group(off, w, mask) }
    }
    #[inline(always)]
    fn span_coord(&self) -> Option<BitsCoord> {
        self.body.span_coord()
    }
    #[inline(always)]
    fn rounds_without_bits(&self) -> bool {
        self.body.rounds_without_bits()
    }
}

/// A conversion's full chunks ([`ChunkBody::full_run`]): span by span with the bits made in the
/// loop where [`RoundsChunks::span_coord`] says so, else chunk by chunk.
#[inline(always)]
pub(crate) unsafe fn conversion_full_run<V: Simd, B: ChunkBody<V> + RoundsChunks<V>>(
    body: &mut B,
    off: isize,
    e: u64,
    end: u64,
) {
    unsafe {
        match body.span_coord() {
            Some(coord) => full_run_spans::<V, B>(body, coord, off, e, end),
            None if body.rounds_without_bits() => full_run_groups::<V, B>(body, off, e, end),
            None => full_run_plain::<V, B>(body, off, e, end),
        }
    }
}

/// [`run_chunks`] for a conversion from `src` to `dst` (element `i` of the body's slices is
/// element `i` of both), prefetching where [`convert_prefetches`] says so.
#[inline(always)]
pub(crate) unsafe fn run_conversion<V: Simd, B: ChunkBody<V> + RoundsChunks<V>, T>(
    base: u64,
    src: &[f32],
    dst: *mut T,
    body: &mut B,
) {
    unsafe {
        if convert_prefetches::<V>(src.len()) {
            let mut p = Prefetched {
                body,
                src: src.as_ptr(),
                dst,
            };
            run_chunks::<V, _>(base, src.len(), &mut p)
        } else {
            run_chunks::<V, _>(base, src.len(), body)
        }
    }
}

/// Zeroed stack buffers for one partial chunk of one f32 or 16-bit buffer.
pub(crate) struct Stage {
    pub f: [f32; MAX_LANES],
    pub h: [u16; MAX_LANES],
    pub h2: [u16; MAX_LANES],
}

impl Stage {
    pub const fn new() -> Stage {
        Stage {
            f: [0.0; MAX_LANES],
            h: [0; MAX_LANES],
            h2: [0; MAX_LANES],
        }
    }
}

/// Copies the valid lanes of `src` (local offset `c.off`) into `dst` lane positions.
#[inline(always)]
pub(crate) unsafe fn stage_in<T: Copy>(src: *const T, dst: *mut T, c: &Chunk) {
    unsafe {
        for l in c.lo..c.hi {
            *dst.add(l) = *src.offset(c.off + l as isize);
        }
    }
}

/// Copies the valid lanes back from a stage.
#[inline(always)]
pub(crate) unsafe fn stage_out<T: Copy>(src: *const T, dst: *mut T, c: &Chunk) {
    unsafe {
        for l in c.lo..c.hi {
            *dst.offset(c.off + l as isize) = *src.add(l);
        }
    }
}
