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

use crate::arch::{MAX_LANES, Simd};
use crate::reference::philox::{BitsCoord, M0, M1, W0, W1, mul_hi_lo, seed_key};
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

/// The Philox output words of one span of 128-element groups of one stream, cached until the
/// chunks leave the span.
///
/// A span is [`GroupBits::SPAN`] consecutive groups from a multiple of `SPAN`, filled in one go
/// so that [`Simd::PHILOX_CHAINS`] counter vectors run their rounds side by side (the rounds of
/// one vector are a dependency chain). On AVX-512 one group is only two counter vectors; a span of two
/// groups made `philox_bits` 15% faster (docs/DESIGN.md). The bits are the same whatever the span:
/// SPEC.md §3.2 fixes them per element.
///
/// `WORDS` picks how the span is kept: as Philox output words ([`Self::word32`], for the bulk fill,
/// which stores both halves of a word at once), or, by default, already split into one vector of
/// 16-bit values per chunk ([`Self::r16`]), so that a chunk's bits are one load with no choice of
/// half: with words, each chunk's shift-or-mask branch and index arithmetic were 13 of the 99
/// instructions of an AVX2 all-bf16 SR AdamW chunk (docs/DESIGN.md).
pub(crate) struct GroupBits<V: Simd, const WORDS: bool = false> {
    coord: BitsCoord,
    key: [u32; 2],
    /// First group of the cached span; `NO_SPAN` before the first fill.
    group: u64,
    /// With `WORDS`, `bits[4 * b + w]` is output word `w` of block vector `b` (blocks
    /// `16 * group + b * LANES + lane`). Otherwise `bits[i]` holds, in the low half of each lane,
    /// the bits of the span's chunk `i` (elements `128 * group + i * LANES + lane`).
    bits: [V::U; 8 * MAX_BLOCK_VECTORS],
    /// What the rounds share across lanes, set up by the first fill.
    rounds: RoundConsts<V>,
}

/// The parts of a stream's Philox rounds that are the same in every lane, computed once in scalar
/// code instead of per counter vector.
///
/// Counter words 1-3 of a block are the same for all blocks of a vector (SPEC.md §3: the high block
/// bits and replica slot, the step, the stream word); only word 0 varies. So round 0's product of
/// word 2 is a constant, which makes word 0 after round 0 a constant too, and with it round 1's
/// product of word 0. Rounds 0 and 1 then need one vector multiply each instead of two, and the
/// constants they leave (`c_r0`, `a_r1`, `b_r1`, `lo_r1`) are XORed or copied in. The round keys
/// are splatted here once rather than from a scalar register in every round.
struct RoundConsts<V: Simd> {
    /// Counter word 1 these constants were computed for; `u64::MAX` before the first fill.
    word1: u64,
    /// Round 0: word 2 after it is `hi(M0 * c0) ^ c_r0`.
    c_r0: V::U,
    /// Round 1: word 0 after it is `hi(M1 * c2) ^ a_r1`, word 2 is `c3 ^ b_r1`, word 3 is `lo_r1`.
    a_r1: V::U,
    b_r1: V::U,
    lo_r1: V::U,
    /// The keys of rounds 2 to 9.
    keys: [[V::U; 2]; 8],
}

/// Stored block vectors (one block per lane) of the largest span.
const MAX_BLOCK_VECTORS: usize = 4;

/// Never a group (groups are below 2^44), and far enough below `u64::MAX` that `g - NO_SPAN`
/// (wrapping) is at least any span for every group `g`.
const NO_SPAN: u64 = u64::MAX - 255;

impl<V: Simd, const WORDS: bool> GroupBits<V, WORDS> {
    /// Blocks one counter vector carries: one per lane, or with `even` one per even lane.
    const fn blocks_per_vector(even: bool) -> usize {
        if even { V::LANES / 2 } else { V::LANES }
    }
    /// Groups per fill: enough for one pass of [`Simd::PHILOX_CHAINS`] counter vectors.
    const SPAN: u64 = {
        let per_group = 16 / Self::blocks_per_vector(V::PHILOX_EVEN_LANES);
        let span = V::PHILOX_CHAINS.div_ceil(per_group);
        assert!(span * 16 / V::LANES <= MAX_BLOCK_VECTORS);
        // Spans start at multiples of the span, so a power of two never straddles a multiple of
        // 2^28 groups (2^32 blocks), where counter word 1 changes (`RoundConsts`).
        assert!(span.is_power_of_two());
        span as u64
    };

    #[inline(always)]
    pub unsafe fn new(coord: BitsCoord) -> Self {
        GroupBits {
            coord,
            key: seed_key(coord.seed),
            group: NO_SPAN,
            bits: [unsafe { V::splat_u(0) }; 8 * MAX_BLOCK_VECTORS],
            rounds: RoundConsts {
                word1: u64::MAX,
                c_r0: unsafe { V::splat_u(0) },
                a_r1: unsafe { V::splat_u(0) },
                b_r1: unsafe { V::splat_u(0) },
                lo_r1: unsafe { V::splat_u(0) },
                keys: [[unsafe { V::splat_u(0) }; 2]; 8],
            },
        }
    }

    /// Sets up [`RoundConsts`] for counter word 1 `word1` (the other words are the stream's).
    /// Runs on the first fill and when word 1 changes (once per 2^32 blocks). Inlined into the
    /// fill: an out-of-line call there made LLVM keep the chunk loops' vector constants in memory
    /// (gungraun, AVX2: bf16 SR +12% instructions).
    #[inline(always)]
    unsafe fn set_round_consts(&mut self, word1: u32) {
        unsafe {
            let (step, stream_word) = (self.coord.step, self.coord.stream_word);
            let key = |r: u32| {
                [
                    self.key[0].wrapping_add(r.wrapping_mul(W0)),
                    self.key[1].wrapping_add(r.wrapping_mul(W1)),
                ]
            };
            let [k0, k1] = key(0);
            let [k0_1, k1_1] = key(1);
            // Round 0 on the constant words; word 0 after it is the same in every lane.
            let (hi1, lo1) = mul_hi_lo(M1, step);
            let c0_r1 = hi1 ^ word1 ^ k0;
            // Round 1's product of that word.
            let (hi0_r1, lo0_r1) = mul_hi_lo(M0, c0_r1);
            let k = &mut self.rounds;
            k.word1 = u64::from(word1);
            k.c_r0 = V::splat_u(stream_word ^ k1);
            k.a_r1 = V::splat_u(lo1 ^ k0_1);
            k.b_r1 = V::splat_u(hi0_r1 ^ k1_1);
            k.lo_r1 = V::splat_u(lo0_r1);
            for r in 2..10 {
                let [a, b] = key(r);
                k.keys[r as usize - 2] = [V::splat_u(a), V::splat_u(b)];
            }
        }
    }

    /// Runs Philox4x32-10 on the blocks of the span from `group` (a multiple of
    /// [`Self::SPAN`]), in the layout the ISA prefers. Kernels reach it through
    /// [`PhiloxFill::fill_span`]: inlined on the SIMD backends, a call on the portable one.
    #[inline(always)]
    pub(crate) unsafe fn fill(&mut self, group: u64) {
        unsafe {
            debug_assert!(group.is_multiple_of(Self::SPAN));
            if V::PHILOX_EVEN_LANES {
                self.fill_layout::<true>(group)
            } else {
                self.fill_layout::<false>(group)
            }
            self.group = group;
        }
    }

    /// [`Self::fill_pass`] with as many counter vectors per pass as the ISA asks for and the
    /// layout allows (the even layout pairs them; the pass count must divide the span's).
    #[inline(always)]
    unsafe fn fill_layout<const EVEN: bool>(&mut self, group: u64) {
        unsafe {
            // Word 1 of every block of the span (an aligned span never straddles a change).
            let word1 = ((group * 16) >> 32) as u32 | u32::from(self.coord.replica_slot) << 16;
            if u64::from(word1) != self.rounds.word1 {
                self.set_round_consts(word1);
            }
            let total = Self::SPAN as usize * 16 / Self::blocks_per_vector(EVEN);
            let n = V::PHILOX_CHAINS.min(total);
            if n >= 4 && total.is_multiple_of(4) {
                self.fill_pass::<EVEN, 4>(group)
            } else if (n >= 2 || EVEN) && total.is_multiple_of(2) {
                self.fill_pass::<EVEN, 2>(group)
            } else {
                self.fill_pass::<EVEN, 1>(group)
            }
        }
    }

    /// Fills `words` for the span from `group`, `N` counter vectors at a time with their rounds
    /// interleaved. `words[4 * b + w]` lane `l` is word `w` of block `16 * group + b * LANES + l`.
    ///
    /// `EVEN`: each counter vector carries `LANES / 2` blocks in its even lanes and
    /// [`Simd::pack_even`] joins two of them at the end; the odd lanes carry garbage that never
    /// reaches an even lane (the multiply reads the even lanes, the XORs are lane-wise).
    #[inline(always)]
    unsafe fn fill_pass<const EVEN: bool, const N: usize>(&mut self, group: u64) {
        unsafe {
            let per_vector = Self::blocks_per_vector(EVEN);
            let total = Self::SPAN as usize * 16 / per_vector;
            let (m0, m1) = (V::splat_u(M0), V::splat_u(M1));
            // Each lane's block offset; in the even layout lanes 2j and 2j + 1 both get j (the
            // even one is the block's).
            let offsets = if EVEN {
                V::shr::<1>(V::iota())
            } else {
                V::iota()
            };
            let k = &self.rounds;
            for v in (0..total).step_by(N) {
                // Rounds 0 and 1, with the parts that are the same in every lane from `k`.
                let mut c = [[offsets; 4]; N];
                for (i, c) in c.iter_mut().enumerate() {
                    let first = group * 16 + ((v + i) * per_vector) as u64;
                    let c0 = V::add_u(V::splat_u(first as u32), offsets);
                    let (hi0, lo0) = mul_even_or_all::<V, EVEN>(c0, m0);
                    let c2 = V::xor_u(hi0, k.c_r0);
                    let (hi1, lo1) = mul_even_or_all::<V, EVEN>(c2, m1);
                    *c = [V::xor_u(hi1, k.a_r1), lo1, V::xor_u(lo0, k.b_r1), k.lo_r1];
                }
                // By reference: `for key in k.keys` copied the table (a `memcpy` call) per pass.
                for key in &k.keys {
                    philox_round::<V, EVEN, N>(&mut c, *key, [m0, m1]);
                }
                if EVEN {
                    for (j, xy) in c.chunks_exact(2).enumerate() {
                        let (x, y) = (&xy[0], &xy[1]);
                        let words = [
                            V::pack_even(x[0], y[0]),
                            V::pack_even(x[1], y[1]),
                            V::pack_even(x[2], y[2]),
                            V::pack_even(x[3], y[3]),
                        ];
                        Self::keep(&mut self.bits, v / 2 + j, words);
                    }
                } else {
                    for (j, c) in c.iter().enumerate() {
                        Self::keep(&mut self.bits, v + j, *c);
                    }
                }
            }
        }
    }

    /// Keeps the four output words of block vector `b` of the span in `bits`, in the `WORDS`
    /// layout or split into chunks (see the field).
    #[inline(always)]
    unsafe fn keep(bits: &mut [V::U; 8 * MAX_BLOCK_VECTORS], b: usize, words: [V::U; 4]) {
        unsafe {
            if WORDS {
                bits[4 * b..4 * b + 4].copy_from_slice(&words);
            } else {
                // Block vector `j` of group `d` gives chunks `k * nb + j` of the group, `k` being
                // the half: word `w`'s low half for `k = 2w`, its high half for `k = 2w + 1`.
                let nb = 16 / V::LANES;
                let first = b / nb * (128 / V::LANES) + b % nb;
                // Unchecked: `b` is below the span's `SPAN * 16 / LANES` block vectors, so `i + nb`
                // is below its `SPAN * 128 / LANES` chunks, at most `bits.len()` (the assert in
                // `SPAN`). With bounds checks, LLVM kept the conversions' kernel state in memory:
                // their rounding and format were reloaded and tested in every chunk (gungraun,
                // AVX2: bf16 SR +16% instructions instead of -15%).
                debug_assert!(b < Self::SPAN as usize * 16 / V::LANES);
                for (w, x) in words.iter().enumerate() {
                    let i = first + 2 * w * nb;
                    *bits.get_unchecked_mut(i) = V::and_u(*x, V::splat_u(0xFFFF));
                    *bits.get_unchecked_mut(i + nb) = V::shr::<16>(*x);
                }
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
                let nb = 16 / V::LANES;
                let c = (e & 127) as usize / V::LANES;
                let (k, b) = (c / nb, d * nb + c % nb);
                let w = self.bits[4 * b + (k >> 1)];
                if k & 1 == 1 {
                    V::shr::<16>(w)
                } else {
                    V::and_u(w, V::splat_u(0xFFFF))
                }
            } else {
                // Spans start at a multiple of the span, so the chunk within it is this.
                let chunks = Self::SPAN as usize * 128 / V::LANES;
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
            debug_assert!(WORDS && e.is_multiple_of(32) && j < 16 / V::LANES);
            let b = self.span_group(e) * (16 / V::LANES) + j;
            self.bits[4 * b + ((e & 127) >> 5) as usize]
        }
    }

    /// The group of global element `e` within the cached span, after filling the span from that
    /// group if it is not cached.
    #[inline(always)]
    unsafe fn span_group(&mut self, e: u64) -> usize {
        unsafe {
            let group = e >> 7;
            let mut d = group.wrapping_sub(self.group);
            if d >= Self::SPAN {
                d = group % Self::SPAN;
                let first = group - d;
                if V::PHILOX_FILL_OPAQUE {
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
/// on AVX2). The portable backend calls it out of line: inlined, its long fill (ten rounds, on
/// arrays) made LLVM stop inlining `core::array::from_fn`, which the portable primitives use,
/// into the largest kernels (callgrind: the bf16-SR AdamW +32%).
pub(crate) trait PhiloxFill {
    unsafe fn fill_span<const WORDS: bool>(bits: &mut GroupBits<Self, WORDS>, group: u64)
    where
        Self: Simd;
}

/// One Philox4x32 round (SPEC.md §3.1) on `N` vectors of blocks: one block per lane, or with
/// `EVEN` one per even lane (`Simd::mul_hi_lo_even`; the odd lanes carry garbage that never
/// reaches an even lane). All the vectors' products come first, then the XORs, so independent
/// multiplies stay next to each other (with one vector after another, AVX2 Philox ran 4% slower).
#[inline(always)]
unsafe fn philox_round<V: Simd, const EVEN: bool, const N: usize>(
    c: &mut [[V::U; 4]; N],
    key: [V::U; 2],
    m: [V::U; 2],
) {
    unsafe {
        // (hi0, lo0, hi1, lo1) per vector (`c` copied only to give it a value). No closure for
        // the multiply: it would lose the entry point's target features.
        let mut p = *c;
        for (p, c) in p.iter_mut().zip(c.iter()) {
            let (hi0, lo0) = mul_even_or_all::<V, EVEN>(c[0], m[0]);
            let (hi1, lo1) = mul_even_or_all::<V, EVEN>(c[2], m[1]);
            *p = [hi0, lo0, hi1, lo1];
        }
        for (c, p) in c.iter_mut().zip(p.iter()) {
            *c = [
                V::xor_u(V::xor_u(p[2], c[1]), key[0]),
                p[3],
                V::xor_u(V::xor_u(p[0], c[3]), key[1]),
                p[1],
            ];
        }
    }
}

/// `a * b` as (high, low) words in the lanes the layout uses: the even ones, or all.
#[inline(always)]
unsafe fn mul_even_or_all<V: Simd, const EVEN: bool>(a: V::U, b: V::U) -> (V::U, V::U) {
    unsafe {
        if EVEN {
            V::mul_hi_lo_even(a, b)
        } else {
            V::mul_hi_lo(a, b)
        }
    }
}

/// How far ahead of a full chunk the conversions prefetch, in elements: 4 KiB of f32 input (and
/// 2 KiB of bf16 output, 1 KiB of fp8).
const CONVERT_PREFETCH_AHEAD: isize = 1024;

/// Whether a conversion of `n` elements prefetches ahead of each full chunk: from
/// [`optim::PREFETCH_MIN`] elements, where software prefetching is on (Intel CPUs by default). The
/// stochastic ones gained most: their Philox fills are bursts of arithmetic with no loads, through
/// which the hardware prefetchers' streams fell behind (bf16 SR at 64M on the `device` host, Sapphire
/// Rapids: 0.866 → 0.603 ns per element). Nearest-even gained there too: bf16 and e4m3 at 16M–64M
/// took 0.55–0.80× the time, f16 (one `vcvtps2ph`) 0.84–1.06×, 1M–4M 0.80–1.03× (BENCHMARKS.md,
/// "Prefetching the stochastic conversions" and "Nearest-even conversions and fp4 quantizers").
#[inline(always)]
fn convert_prefetches<V: Simd>(n: usize) -> bool {
    V::HAS_PREFETCH && n >= optim::PREFETCH_MIN && crate::dispatch::software_prefetch()
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

/// Checks of the vector Philox against the reference, run by `tests/internals.rs` through
/// `halfstep::fuzzing::internals` (the layouts are private).
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;
    use crate::reference::philox::{block_counter, element_bits, philox4x32_10};

    /// The lanes of a span cache, vector after vector.
    #[inline(always)]
    unsafe fn lanes_of<V: Simd>(
        bits: &[V::U; 8 * MAX_BLOCK_VECTORS],
    ) -> [u32; 8 * MAX_BLOCK_VECTORS * MAX_LANES] {
        let mut got = [0u32; 8 * MAX_BLOCK_VECTORS * MAX_LANES];
        for (i, w) in bits.iter().enumerate() {
            unsafe { V::store(got[i * V::LANES..].as_mut_ptr().cast(), V::from_bits(*w)) };
        }
        got
    }

    /// Both Philox layouts of [`GroupBits`] on backend `V`, each kept as words and split into
    /// chunks, against the reference (word by word, and element by element), for groups whose
    /// blocks carry into the counter's high words and keys that wrap. One `GroupBits` per layout
    /// and form fills every span in turn, so its cached `RoundConsts` must follow
    /// counter word 1 as it changes (0 → 1 → 0xFFF → 0) from span to span.
    #[inline(always)]
    unsafe fn check_layouts<V: Simd>(name: &str) {
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
        let groups = [
            0u64,
            span,
            0x1000_0000 - span,
            0x1000_0000,
            (1 << 44) - span,
            0,
        ];
        for coord in coords {
            let mut lanes = unsafe { GroupBits::<V, true>::new(coord) };
            let mut even = unsafe { GroupBits::<V, true>::new(coord) };
            let mut lanes_split = unsafe { GroupBits::<V>::new(coord) };
            let mut even_split = unsafe { GroupBits::<V>::new(coord) };
            for group in groups {
                unsafe {
                    lanes.fill_layout::<false>(group);
                    even.fill_layout::<true>(group);
                    lanes_split.fill_layout::<false>(group);
                    even_split.fill_layout::<true>(group);
                }
                // Split into chunks: every element of the span, its 16 bits in the low half.
                for (layout, bits) in [("lanes", &lanes_split), ("even", &even_split)] {
                    let got = unsafe { lanes_of::<V>(&bits.bits) };
                    for (i, got) in got[..128 * span as usize].iter().enumerate() {
                        let e = group * 128 + i as u64;
                        if e >= 1 << 51 {
                            break; // past the last element (SPEC.md §3.2)
                        }
                        let want = u32::from(element_bits(&coord, e));
                        assert_eq!(*got, want, "{name} {layout} split: {coord:?} element {e}");
                    }
                }
                for (layout, bits) in [("lanes", &lanes), ("even", &even)] {
                    let got = unsafe { lanes_of::<V>(&bits.bits) };
                    // Every block of the span (two groups on AVX-512).
                    for block in 0..16 * span as usize {
                        if group * 16 + block as u64 >= 1 << 48 {
                            break; // computed, but no element maps to it (blocks < 2^48, SPEC.md §3.2)
                        }
                        let (b, l) = (block / V::LANES, block % V::LANES);
                        let want = philox4x32_10(
                            block_counter(&coord, group * 16 + block as u64),
                            seed_key(coord.seed),
                        );
                        for (w, want) in want.into_iter().enumerate() {
                            assert_eq!(
                                got[(4 * b + w) * V::LANES + l],
                                want,
                                "{name} {layout}: {coord:?} group {group} block {block} word {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Every backend this CPU runs (the others are skipped with a line on stderr).
    pub(crate) fn philox_layouts_match_the_reference_on_every_backend() {
        unsafe { check_layouts::<crate::arch::portable::Portable>("portable") };
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn avx2() {
                unsafe { check_layouts::<crate::arch::x86_64::avx2::Avx2>("avx2") }
            }
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
            unsafe fn avx512() {
                unsafe { check_layouts::<crate::arch::x86_64::avx512::Avx512>("avx512") }
            }
            use crate::dispatch::Backend;
            if Backend::Avx2.is_available() {
                unsafe { avx2() }
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
        unsafe {
            check_layouts::<crate::arch::aarch64::neon::Neon>("neon")
        };
    }
}
