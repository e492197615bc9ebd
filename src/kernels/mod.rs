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

pub(crate) mod convert;
pub(crate) mod optim;
pub(crate) mod quant;
pub(crate) mod round;

use crate::arch::{self, MAX_LANES};
use crate::reference::ars::round_keys;
use crate::reference::bits::{BitsCoord, seed_key};
use crate::reference::round::Rounding;

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

/// The ARS-5 output words of one span of 32-element groups of one stream (SPEC.md §3.2), cached
/// until the chunks leave the span.
///
/// A span is [`GroupBits::SPAN`] consecutive groups from a multiple of `SPAN`, filled in one go
/// so that [`crate::arch::Simd::RNG_VECTORS`] counter vectors run their AES rounds side by side (the rounds of
/// one vector are a dependency chain of the AES unit's latency). The bits are the same whatever
/// the span: SPEC.md §3.2 fixes them per element.
///
/// Each 128-bit block of a vector is one ARS block, and a group's four blocks (16 words) give
/// their low halves to its first 16 elements and their high halves to the next 16, so a vector of
/// output words is two chunks' bits on every lane width, with no shuffle.
///
/// `WORDS` picks how the span is kept: as output words ([`Self::word32`], for the bulk fill, which
/// stores both halves of a word at once), or, by default, already split into one vector of
/// 16-bit values per chunk ([`Self::r16`]), so that a chunk's bits are one load with no choice of
/// half (a chunk's shift-or-mask branch and index arithmetic were 13 of the 99 instructions of an
/// AVX2 all-bf16 SR AdamW chunk: docs/DESIGN.md).
pub(crate) struct GroupBits<V: Simd, const WORDS: bool = false> {
    coord: BitsCoord,
    /// First group of the cached span; `NO_SPAN` before the first fill.
    group: u64,
    /// With `WORDS`, `bits[v]` is output vector `v` of the span (blocks
    /// `4 * group + v * LANES / 4 ..`). Otherwise `bits[i]` holds, in the low half of each lane,
    /// the bits of the span's chunk `i` (elements `32 * group + i * LANES + lane`).
    bits: [V::U; 2 * MAX_RNG_VECTORS],
    /// What every counter vector of the stream shares, set up by the first fill.
    consts: CounterConsts<V>,
}

/// The parts of a stream's ARS counters and keys that are the same for every vector, computed
/// once in scalar code: counter words 1-3 are fixed within a span (SPEC.md §3.2: the high block
/// bits and replica slot, the step, the stream word) and the six round keys for the whole stream.
struct CounterConsts<V: Simd> {
    /// Counter word 1 `template` was built for; `u64::MAX` before the first fill.
    word1: u64,
    /// Block `i` of a vector: `(i, word1, step, stream_word)`; a vector's counters are this plus
    /// its first block's number in word 0 of each block.
    template: V::U,
    /// All ones in word 0 of each block, zero elsewhere.
    word0: V::U,
    /// The round keys of ARS-5, each repeated in every block.
    keys: [V::U; 6],
    /// The rounds run in the backend's wide form ([`crate::arch::Simd::WIDE_AES`]).
    wide: bool,
}

/// Counter vectors of the largest span.
const MAX_RNG_VECTORS: usize = 8;

/// Never a group (groups are below 2^46), and far enough below `u64::MAX` that `g - NO_SPAN`
/// (wrapping) is at least any span for every group `g`.
const NO_SPAN: u64 = u64::MAX - 255;

/// ARS-5's rounds 1-5 on the first [`crate::arch::Simd::RNG_VECTORS`] vectors of `x` (round 0, the key
/// XOR, done), in the backend's wide form or not. Round by round across the vectors, so that
/// independent AES instructions issue back to back.
#[inline(always)]
unsafe fn ars_rounds<V: Simd, const WIDE: bool>(x: &mut [V::U; MAX_RNG_VECTORS], keys: &[V::U; 6]) {
    unsafe {
        for key in &keys[1..5] {
            for x in x.iter_mut().take(V::RNG_VECTORS) {
                *x = if WIDE {
                    V::aes_enc_wide(*x, *key)
                } else {
                    V::aes_enc(*x, *key)
                };
            }
        }
        for x in x.iter_mut().take(V::RNG_VECTORS) {
            *x = if WIDE {
                V::aes_enc_last_wide(*x, keys[5])
            } else {
                V::aes_enc_last(*x, keys[5])
            };
        }
    }
}

/// A vector whose block `i` (lanes `4i .. 4i + 4`) is `f(i)`.
#[inline(always)]
unsafe fn per_block<V: Simd>(f: impl Fn(usize) -> [u32; 4]) -> V::U {
    let mut buf = [0u32; MAX_LANES];
    for (l, x) in buf.iter_mut().enumerate().take(V::LANES) {
        *x = f(l / 4)[l % 4];
    }
    unsafe { V::to_bits(V::load(buf.as_ptr().cast())) }
}

impl<V: Simd, const WORDS: bool> GroupBits<V, WORDS> {
    /// Output vectors per group (16 words).
    const PER_GROUP: usize = 16 / V::LANES;
    /// Whether this span cache may run the backend's wide AES rounds ([`crate::arch::Simd::WIDE_AES`]): only
    /// the bulk fill (`WORDS`). In the rounding kernels the run-time choice between the two forms
    /// changed the code LLVM made for the whole loop: on a CPU without VAES (AVX2, 128-bit rounds)
    /// they ran 1–6% slower, LAMB's split layout, which draws no bits, among them (docs/DESIGN.md).
    const WIDE_AES: bool = V::WIDE_AES && WORDS;
    /// Groups per fill: one pass of [`crate::arch::Simd::RNG_VECTORS`] counter vectors.
    pub(crate) const SPAN: u64 = {
        let span = V::RNG_VECTORS / Self::PER_GROUP;
        assert!(span >= 1 && span * Self::PER_GROUP == V::RNG_VECTORS);
        assert!(V::RNG_VECTORS <= MAX_RNG_VECTORS);
        // Spans start at multiples of the span, so a power of two never straddles a multiple of
        // 2^30 groups (2^32 blocks), where counter word 1 changes (`CounterConsts`).
        assert!(span.is_power_of_two());
        span as u64
    };

    #[inline(always)]
    pub unsafe fn new(coord: BitsCoord) -> Self {
        unsafe {
            GroupBits {
                coord,
                group: NO_SPAN,
                bits: [V::splat_u(0); 2 * MAX_RNG_VECTORS],
                consts: CounterConsts {
                    word1: u64::MAX,
                    template: V::splat_u(0),
                    word0: V::splat_u(0),
                    keys: [V::splat_u(0); 6],
                    wide: false,
                },
            }
        }
    }

    /// Sets up [`CounterConsts`] for the spans whose counter word 1 is `word1`. Inlined: a call
    /// in the chunk loop made LLVM keep the loop's vector constants in memory.
    #[inline(always)]
    unsafe fn set_consts(&mut self, word1: u32) {
        unsafe {
            let c = self.coord;
            let k = &mut self.consts;
            k.word1 = u64::from(word1);
            k.template = per_block::<V>(|i| [i as u32, word1, c.step, c.stream_word]);
            k.word0 = per_block::<V>(|_| [u32::MAX, 0, 0, 0]);
            let keys: [[u32; 4]; 6] = round_keys(seed_key(c.seed));
            for (v, key) in k.keys.iter_mut().zip(keys) {
                *v = per_block::<V>(|_| key);
            }
            k.wide = Self::WIDE_AES && V::wide_aes();
        }
    }

    /// Runs ARS-5 on the blocks of the span from `group` (a multiple of [`Self::SPAN`]). Kernels
    /// reach it through [`BitsFill::fill_span`]: inlined on the SIMD backends, a call on the
    /// portable one.
    #[inline(always)]
    pub(crate) unsafe fn fill(&mut self, group: u64) {
        unsafe {
            let x = self.span_words(group);
            for (v, x) in x.iter().enumerate().take(V::RNG_VECTORS) {
                Self::keep(&mut self.bits, v, *x);
            }
            self.group = group;
        }
    }

    /// The ARS-5 output words of the span from `group` (a multiple of [`Self::SPAN`]), in vectors
    /// `0 .. RNG_VECTORS`: vector `v` holds blocks `4 * group + v * LANES / 4 ..`, so its low
    /// halves are the bits of elements `32 * group + 32 * (v / PER_GROUP) + (v % PER_GROUP) * LANES
    /// + lane` and its high halves those of the elements 16 further on.
    #[inline(always)]
    pub(crate) unsafe fn span_words(&mut self, group: u64) -> [V::U; MAX_RNG_VECTORS] {
        unsafe {
            debug_assert!(group.is_multiple_of(Self::SPAN));
            let first = group * 4;
            // Word 1 of every block of the span (an aligned span never straddles a change).
            let word1 = (first >> 32) as u32 | u32::from(self.coord.replica_slot) << 16;
            if u64::from(word1) != self.consts.word1 {
                self.set_consts(word1);
            }
            let k = &self.consts;
            // The first vector's counters, then each the previous one's plus `LANES / 4` blocks
            // in word 0 (no carry: the span's blocks share word 1).
            let mut ctr = V::add_u(k.template, V::and_u(V::splat_u(first as u32), k.word0));
            let step = V::and_u(V::splat_u((V::LANES / 4) as u32), k.word0);
            let mut x = [k.template; MAX_RNG_VECTORS];
            for x in x.iter_mut().take(V::RNG_VECTORS) {
                *x = V::xor_u(ctr, k.keys[0]);
                ctr = V::add_u(ctr, step);
            }
            if Self::WIDE_AES && k.wide {
                ars_rounds::<V, true>(&mut x, &k.keys);
            } else {
                ars_rounds::<V, false>(&mut x, &k.keys);
            }
            x
        }
    }

    /// Keeps output vector `v` of the span in `bits`, as words or split into chunks (see the
    /// field).
    #[inline(always)]
    unsafe fn keep(bits: &mut [V::U; 2 * MAX_RNG_VECTORS], v: usize, words: V::U) {
        unsafe {
            // Unchecked: `v` is below `RNG_VECTORS`, so `lo + PER_GROUP` is below the span's
            // `2 * RNG_VECTORS` chunks, at most `bits.len()` (the asserts in `SPAN`). With bounds
            // checks, LLVM kept the conversions' kernel state in memory: their rounding and format
            // were reloaded and tested in every chunk (gungraun, AVX2).
            debug_assert!(v < V::RNG_VECTORS);
            if WORDS {
                *bits.get_unchecked_mut(v) = words;
            } else {
                // Vector `j` of group `d` holds chunk `j` of the group in its low halves and chunk
                // `PER_GROUP + j` in its high halves.
                let (d, j) = (v / Self::PER_GROUP, v % Self::PER_GROUP);
                let lo = 2 * Self::PER_GROUP * d + j;
                *bits.get_unchecked_mut(lo) = V::and_u(words, V::splat_u(0xFFFF));
                *bits.get_unchecked_mut(lo + Self::PER_GROUP) = V::shr::<16>(words);
            }
        }
    }

    /// The bits a rounding with `rounding` consumes for the chunk at global `e`: [`Self::r16`] when
    /// stochastic, zeros otherwise (the RNG runs only when its bits are used).
    #[inline(always)]
    pub unsafe fn for_rounding(&mut self, rounding: Rounding, e: u64) -> V::U {
        unsafe {
            if rounding == Rounding::Stochastic {
                self.r16(e)
            } else {
                V::splat_u(0)
            }
        }
    }

    /// The 16 random bits (one per lane, in the low half) of the chunk starting at global `e`.
    #[inline(always)]
    pub unsafe fn r16(&mut self, e: u64) -> V::U {
        unsafe {
            debug_assert!(e.is_multiple_of(V::LANES as u64));
            let d = self.span_group(e);
            if WORDS {
                let c = (e & 31) as usize / V::LANES;
                let w = self.bits[d * Self::PER_GROUP + c % Self::PER_GROUP];
                if c >= Self::PER_GROUP {
                    V::shr::<16>(w)
                } else {
                    V::and_u(w, V::splat_u(0xFFFF))
                }
            } else {
                // Spans start at a multiple of the span, so the chunk within it is this.
                let chunks = Self::SPAN as usize * 32 / V::LANES;
                self.bits[(e / V::LANES as u64) as usize % chunks]
            }
        }
    }

    /// Output word vector `j` (`j < 16 / LANES`) of the 32 elements from global `e`, a multiple of
    /// 32: lane `l`'s low half is element `e + j * LANES + l`'s bits, its high half element
    /// `e + 16 + j * LANES + l`'s ([`Self::r16`] of those two chunks, in one vector).
    #[inline(always)]
    pub unsafe fn word32(&mut self, e: u64, j: usize) -> V::U {
        unsafe {
            debug_assert!(WORDS && e.is_multiple_of(32) && j < Self::PER_GROUP);
            self.bits[self.span_group(e) * Self::PER_GROUP + j]
        }
    }

    /// The group of global element `e` within the cached span, after filling the span from that
    /// group if it is not cached.
    #[inline(always)]
    unsafe fn span_group(&mut self, e: u64) -> usize {
        unsafe {
            let group = e >> 5;
            let mut d = group.wrapping_sub(self.group);
            if d >= Self::SPAN {
                d = group % Self::SPAN;
                let first = group - d;
                if V::RNG_FILL_OPAQUE {
                    V::fill_span(self, core::hint::black_box(first));
                } else {
                    V::fill_span(self, first);
                }
            }
            d as usize
        }
    }
}

/// How a backend's kernels reach [`GroupBits::fill`]; `dispatch`'s `simd_backend!` implements it
/// next to the kernels' entry points, inside the backend's target features.
///
/// The SIMD backends inline the fill: a call in the chunk loop would make LLVM reload every
/// vector constant of the loop from memory on each chunk (callgrind: bf16 SR +17% instructions
/// on AVX2). The portable backend calls it out of line: inlined, its long fill (software AES
/// rounds on arrays) made LLVM stop inlining `core::array::from_fn`, which the portable
/// primitives use, into the largest kernels.
pub(crate) trait BitsFill {
    unsafe fn fill_span<const WORDS: bool>(bits: &mut GroupBits<Self, WORDS>, group: u64)
    where
        Self: arch::Simd;
}

/// The lane type every kernel runs on: an ISA's primitives ([`arch::Simd`]) and its random-bit
/// fill ([`BitsFill`]), which `dispatch` compiles inside the backend's target features.
pub(crate) trait Simd: arch::Simd + BitsFill {}

impl<V: arch::Simd + BitsFill> Simd for V {}

/// How far ahead of a full chunk the conversions prefetch, in elements: 4 KiB of f32 input (and
/// 2 KiB of bf16 output, 1 KiB of fp8).
const CONVERT_PREFETCH_AHEAD: isize = 1024;

/// Whether a conversion of `n` elements prefetches ahead of each full chunk: from
/// [`optim::PREFETCH_MIN`] elements, where software prefetching is on (Intel CPUs by default). The
/// stochastic ones gained most: their random-bit fills are bursts of arithmetic with no loads, through
/// which the hardware prefetchers' streams fell behind (bf16 SR at 64M on the 16-core Xeon host, Sapphire
/// Rapids: 0.866 → 0.603 ns per element). Nearest-even gained there too: bf16 and e4m3 at 16M–64M
/// took 0.55–0.80× the time, f16 (one `vcvtps2ph`) 0.84–1.06×, 1M–4M 0.80–1.03× (BENCHMARKS.md's history,
/// "Prefetching the stochastic conversions" and "Nearest-even conversions and fp4 quantizers").
#[inline(always)]
fn convert_prefetches<V: Simd>(n: usize) -> bool {
    V::HAS_PREFETCH && n >= optim::PREFETCH_MIN && crate::cpu::software_prefetch()
}

/// A conversion's chunk body with prefetching added: [`CONVERT_PREFETCH_AHEAD`] elements past each
/// full chunk in the input and output (a hint: past the end of either it does nothing).
struct Prefetched<'a, B, T> {
    body: &'a mut B,
    src: *const f32,
    dst: *mut T,
}

impl<V: Simd, B: ChunkBody<V>, T> ChunkBody<V> for Prefetched<'_, B, T> {
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
}

/// [`run_chunks`] for a conversion from `src` to `dst` (element `i` of the body's slices is
/// element `i` of both), prefetching where [`convert_prefetches`] says so.
#[inline(always)]
pub(crate) unsafe fn run_conversion<V: Simd, B: ChunkBody<V>, T>(
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

/// Checks of the vector ARS fill against the reference, run by `tests/internals.rs` through
/// `halfstep::fuzzing::internals` (the span cache is private).
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;
    use crate::reference::ars::ars4x32_5;
    use crate::reference::bits::{block_counter, element_bits};

    /// The lanes of a span cache, vector after vector.
    #[inline(always)]
    unsafe fn lanes_of<V: Simd>(
        bits: &[V::U; 2 * MAX_RNG_VECTORS],
    ) -> [u32; 2 * MAX_RNG_VECTORS * MAX_LANES] {
        let mut got = [0u32; 2 * MAX_RNG_VECTORS * MAX_LANES];
        for (i, w) in bits.iter().enumerate() {
            unsafe { V::store(got[i * V::LANES..].as_mut_ptr().cast(), V::from_bits(*w)) };
        }
        got
    }

    /// [`GroupBits`] on backend `V`, kept as words and split into chunks, against the reference
    /// (block by block, and element by element), for spans whose blocks carry into counter word 1
    /// and keys that wrap. One `GroupBits` per form fills every span in turn, so its cached
    /// `CounterConsts` must follow counter word 1 as it changes (0 → 1 → 0x3FFF → 0) from span to
    /// span.
    #[inline(always)]
    unsafe fn check_fill<V: Simd>(name: &str) {
        let coords = [
            BitsCoord {
                seed: 0,
                step: 0,
                stream_word: 0,
                replica_slot: 0,
            },
            BitsCoord {
                seed: u64::MAX,
                step: u32::MAX,
                stream_word: 0xDEAD_BEEF,
                replica_slot: 0xFFFF,
            },
            BitsCoord {
                seed: 0x0123_4567_89AB_CDEF,
                step: 7,
                stream_word: 0x31,
                replica_slot: 3,
            },
        ];
        // Spans start at multiples of the span: the last span before word 1 turns 1, the first
        // after it, the last span of all.
        let span = GroupBits::<V>::SPAN;
        let groups = [0u64, span, (1 << 30) - span, 1 << 30, (1 << 46) - span, 0];
        for coord in coords {
            let mut words = unsafe { GroupBits::<V, true>::new(coord) };
            let mut split = unsafe { GroupBits::<V>::new(coord) };
            for group in groups {
                unsafe {
                    words.fill(group);
                    split.fill(group);
                }
                // Split into chunks: every element of the span, its 16 bits in the low half.
                let got = unsafe { lanes_of::<V>(&split.bits) };
                for (i, got) in got[..32 * span as usize].iter().enumerate() {
                    let e = group * 32 + i as u64;
                    let want = u32::from(element_bits(&coord, e));
                    assert_eq!(*got, want, "{name} split: {coord:?} element {e}");
                }
                // As words: every block of the span, its four words in four consecutive lanes.
                let got = unsafe { lanes_of::<V>(&words.bits) };
                for block in 0..4 * span as usize {
                    let want = ars4x32_5(
                        block_counter(&coord, group * 4 + block as u64),
                        seed_key(coord.seed),
                    );
                    assert_eq!(
                        got[4 * block..4 * block + 4],
                        want,
                        "{name} words: {coord:?} group {group} block {block}"
                    );
                }
            }
        }
    }

    /// Every backend this CPU runs (the others are skipped with a line on stderr).
    pub(crate) fn fill_matches_the_reference_on_every_backend() {
        unsafe { check_fill::<crate::arch::portable::Portable>("portable") };
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma,f16c,aes")]
            unsafe fn avx2() {
                unsafe { check_fill::<crate::arch::x86_64::avx2::Avx2>("avx2") }
            }
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,aes,vaes")]
            unsafe fn avx512() {
                unsafe { check_fill::<crate::arch::x86_64::avx512::Avx512>("avx512") }
            }
            use crate::arch::x86_64::set_vaes_rounds;
            use crate::cpu::Backend;
            if Backend::Avx2.is_available() {
                // Both forms of the rounds: 128-bit AES-NI, and 256-bit VAES where the CPU has it.
                set_vaes_rounds(Some(false));
                unsafe { avx2() }
                if std::is_x86_feature_detected!("vaes") {
                    set_vaes_rounds(Some(true));
                    unsafe { avx2() }
                } else {
                    eprintln!("skipping avx2 with VAES: this CPU lacks it");
                }
                set_vaes_rounds(None);
            } else {
                eprintln!("skipping avx2: this CPU lacks it");
            }
            if Backend::Avx512.is_available() {
                unsafe { avx512() }
            } else {
                eprintln!("skipping avx512: this CPU lacks it");
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            #[target_feature(enable = "neon,aes")]
            unsafe fn neon() {
                unsafe { check_fill::<crate::arch::aarch64::neon::Neon>("neon") }
            }
            if crate::cpu::Backend::Neon.is_available() {
                unsafe { neon() }
            } else {
                eprintln!("skipping neon: this CPU lacks it");
            }
        }
    }
}
