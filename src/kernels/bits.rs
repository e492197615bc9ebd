//! The random bits on vectors: ARS-5 (SPEC.md §3.1–3.2) a span of groups at a time ([`GroupBits`]),
//! the bits a rounding kernel reads chunk by chunk ([`RoundingBits`]: from that span cache, or from
//! a block the bulk fill makes out of line), how a backend reaches the fills ([`BitsFill`]), and the
//! bulk fill of a slice ([`fill_bits`]).

use super::{Chunk, ChunkBody, Simd, Stage, full_run_plain, run_chunks, stage_out};
use crate::arch::{self, MAX_LANES};
use crate::reference::ars::round_keys;
use crate::reference::bits::{BitsCoord, seed_key};
use crate::reference::round::Rounding;

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
    /// Whether a group's two output vectors hold its blocks in alternation, for the even/odd
    /// layout of a bits block ([`Self::new_for_blocks`]).
    alternate: bool,
}

/// The parts of a stream's ARS counters and keys that are the same for every span, computed once
/// in scalar code: counter words 1-3 are fixed within a span (SPEC.md §3.2: the high block bits
/// and replica slot, the step, the stream word), and so are the low bits of word 0 that number a
/// block within its span; and the six round keys for the whole stream.
struct CounterConsts<V: Simd> {
    /// Counter word 1 `start` was built for; `u64::MAX` before the first fill.
    word1: u64,
    /// Counter vector `v` of a span from block 0, already XOR-ed with round key 0: block `i` of it
    /// is `(v * LANES / 4 + i, word1, step, stream_word) ^ key0` (`4 * (v / 2) + v % 2 + 2 * i`
    /// where blocks alternate: [`GroupBits::new_for_blocks`]). A span's first block is a
    /// multiple of its `4 * SPAN` blocks, a power of two, so its block `j` is `first + j =
    /// first ^ j`, and its vector `v` after round 0 is `start[v] ^ (first, 0, 0, 0)`: one XOR
    /// where an addition and the XOR with the key were two.
    start: [V::U; MAX_RNG_VECTORS],
    /// All ones in word 0 of each block, zero elsewhere.
    word0: V::U,
    /// The round keys of ARS-5, each repeated in every block.
    keys: [V::U; 6],
    /// The rounds run in the backend's wide form ([`crate::arch::Simd::WIDE_AES`]).
    wide: bool,
}

/// Groups from a multiple of which a [`PairDraw`] may run: counter word 1 holds the block
/// number's bits 32-47, which change every 2^30 groups.
pub(crate) const SEQ_GROUPS: u64 = 1 << 30;

/// What the in-order draws of a step's streams share, group after group
/// ([`RoundingBits::next_pair`]): the round keys after round 0, the same for every stream of a
/// step (each has the step's seed), and the group's first block number in word 0 of each block.
/// Each stream adds only its own counter constants. One set of keys for all the streams of a loop:
/// with a set per stream LLVM kept them on the stack, and the step loaded every key once per
/// stream and group (Zen 4 loads one 512-bit vector per cycle).
pub(crate) struct PairDraw<V: Simd> {
    /// Round keys 1-5, each repeated in every block.
    keys: [V::U; 5],
    /// `(4g, 0, 0, 0)` in every block for group `g`: the low half of its first block number.
    block0: V::U,
    /// `(4, 0, 0, 0)` in every block: one group on.
    next: V::U,
}

impl<V: Simd> PairDraw<V> {
    /// At the group of element `e`, a multiple of 32, for the streams of `seed`.
    #[inline(always)]
    pub(crate) unsafe fn new(seed: u64, e: u64) -> Self {
        unsafe {
            debug_assert!(e.is_multiple_of(32));
            let keys: [[u32; 4]; 6] = round_keys(seed_key(seed));
            let first = (e >> 5) * 4;
            PairDraw {
                keys: core::array::from_fn(|i| per_block::<V>(|_| keys[i + 1])),
                block0: per_block::<V>(|_| [first as u32, 0, 0, 0]),
                next: per_block::<V>(|_| [4, 0, 0, 0]),
            }
        }
    }

    /// Moves on to the next group (its block number's low half wraps where counter word 1
    /// changes, past which no run goes: [`SEQ_GROUPS`]).
    #[inline(always)]
    pub(crate) unsafe fn advance(&mut self) {
        unsafe { self.block0 = V::add_u(self.block0, self.next) }
    }
}

/// Counter vectors of the largest span.
const MAX_RNG_VECTORS: usize = 8;

/// Never a group (groups are below 2^46), and far enough below `u64::MAX` that `g - NO_SPAN`
/// (wrapping) is at least any span for every group `g`.
const NO_SPAN: u64 = u64::MAX - 255;

/// ARS-5's rounds 1-5 on the first `n` vectors of `x` (round 0, the key XOR, done), in the
/// backend's wide form or not: a span's [`crate::arch::Simd::RNG_VECTORS`], or one group's
/// ([`GroupBits::group_words`]). Round by round across the vectors, so that independent AES
/// instructions issue back to back.
#[inline(always)]
unsafe fn ars_rounds<V: Simd, const WIDE: bool, const N: usize>(
    x: &mut [V::U; N],
    n: usize,
    keys: &[V::U; 6],
) {
    unsafe {
        for key in &keys[1..5] {
            for x in x.iter_mut().take(n) {
                *x = if WIDE {
                    V::aes_enc_wide(*x, *key)
                } else {
                    V::aes_enc(*x, *key)
                };
            }
        }
        for x in x.iter_mut().take(n) {
            *x = if WIDE {
                V::aes_enc_last_wide(*x, keys[5])
            } else {
                V::aes_enc_last(*x, keys[5])
            };
        }
    }
}

/// Round 0 of ARS-5 on the first `n` vectors of `x`: the counters' constants from `starts`
/// XOR-ed with `f`, the span's first block in word 0. `starts` must point to `n` vectors (of
/// `CounterConsts::start`, which holds `MAX_RNG_VECTORS`).
#[inline(always)]
unsafe fn round0<V: Simd, const N: usize>(
    x: &mut [V::U; N],
    n: usize,
    starts: *const V::U,
    f: V::U,
) {
    for (v, x) in x.iter_mut().enumerate().take(n) {
        *x = unsafe { V::xor_u(*starts.add(v), f) };
    }
}

/// `p`, hidden from LLVM (its address passes through an empty `asm!`, no instruction), so that
/// what it points to is read where it is used ([`crate::arch::Simd::RNG_STARTS_IN_MEMORY`]).
#[inline(always)]
fn opaque_ptr<T>(p: *const T) -> *const T {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mut addr = p.addr();
        // SAFETY: the template is a comment; it reads and writes nothing but `addr`'s register.
        unsafe {
            core::arch::asm!(
                "/* {0} */",
                inout(reg) addr,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        p.with_addr(addr)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    p
}

/// A vector whose block `i` (lanes `4i .. 4i + 4`) is `f(i)`.
#[inline(always)]
unsafe fn per_block<V: Simd>(f: impl Fn(usize) -> [u32; 4]) -> V::U {
    unsafe { arch::u32_vector::<V>(|l| f(l / 4)[l % 4]) }
}

impl<V: Simd, const WORDS: bool> GroupBits<V, WORDS> {
    /// Output vectors per group (16 words).
    const PER_GROUP: usize = 16 / V::LANES;

    /// The offset, from the span's first element, of the elements whose bits are the low halves
    /// of the span's output vector `v` ([`Self::span_words`]); its high halves are the 16 after.
    #[inline(always)]
    pub(crate) const fn word_offset(v: usize) -> usize {
        32 * (v / Self::PER_GROUP) + v % Self::PER_GROUP * V::LANES
    }
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
                    start: [V::splat_u(0); MAX_RNG_VECTORS],
                    word0: V::splat_u(0),
                    keys: [V::splat_u(0); 6],
                    wide: false,
                },
                alternate: false,
            }
        }
    }

    /// Whether [`Self::new_for_blocks`] alternates the blocks: with two output vectors per group.
    pub(crate) const ALTERNATES: bool = Self::PER_GROUP == 2;

    /// [`Self::new`] for a bits block's fill in one of its layouts ([`FillBlock`]). For the
    /// even/odd layout with two output vectors per group (8 lanes), vector `j` of a group holds
    /// its blocks `j` and `j + 2` rather than `2j` and `2j + 1`: the words of a pair of chunks'
    /// even and odd elements are then picks within each 128-bit block of the two
    /// ([`crate::arch::Simd::even_odd_in_blocks`]), where blocks in order took a shuffle across
    /// the vectors' halves besides. The same words, in other lanes.
    #[inline(always)]
    pub unsafe fn new_for_blocks(coord: BitsCoord, even_odd: bool) -> Self {
        unsafe {
            let mut bits = Self::new(coord);
            bits.alternate = even_odd && Self::ALTERNATES;
            bits
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
            k.word0 = per_block::<V>(|_| [u32::MAX, 0, 0, 0]);
            let keys: [[u32; 4]; 6] = round_keys(seed_key(c.seed));
            for (v, key) in k.keys.iter_mut().zip(keys) {
                *v = per_block::<V>(|_| key);
            }
            let key0 = keys[0];
            for (v, start) in k.start.iter_mut().enumerate().take(V::RNG_VECTORS) {
                let ctr = |i: usize| [(v * V::LANES / 4 + i) as u32, word1, c.step, c.stream_word];
                *start = per_block::<V>(|i| core::array::from_fn(|w| ctr(i)[w] ^ key0[w]));
            }
            if Self::ALTERNATES && self.alternate {
                Self::alternate_blocks(&mut k.start);
            }
            k.wide = Self::WIDE_AES && V::wide_aes();
        }
    }

    /// The counter vectors of [`CounterConsts::start`] with each group's blocks in alternation
    /// ([`Self::new_for_blocks`]): of a group's two vectors, holding blocks 0, 1 and 2, 3, the
    /// first takes blocks 0 and 2, the second 1 and 3. Out of line: with the choice of block
    /// numbers inlined in `set_consts`, AVX2 Adagrad's bf16-SR states, whose loop draws a group at
    /// a time, executed 1.8% more instructions than before; with this call, 0.9% (gungraun).
    #[inline(never)]
    fn alternate_blocks(start: &mut [V::U; MAX_RNG_VECTORS]) {
        let half = V::LANES / 2;
        let lanes = start.as_mut_ptr().cast::<u32>();
        for v in (0..V::RNG_VECTORS).step_by(2) {
            for l in 0..half {
                // SAFETY: both lanes are within `start` (`v + 1 < RNG_VECTORS <= MAX_RNG_VECTORS`),
                // whose vectors are plain lanes of u32.
                unsafe {
                    core::ptr::swap(
                        lanes.add(v * V::LANES + half + l),
                        lanes.add((v + 1) * V::LANES + l),
                    )
                };
            }
        }
    }

    /// Counter word 1 of block `first`.
    #[inline(always)]
    fn word1(&self, first: u64) -> u32 {
        (first >> 32) as u32 | u32::from(self.coord.replica_slot) << 16
    }

    /// Sets up [`CounterConsts`] for block `first`'s counter word 1 unless they are for it.
    #[inline(always)]
    unsafe fn consts_for(&mut self, first: u64) {
        unsafe {
            let word1 = self.word1(first);
            if u64::from(word1) != self.consts.word1 {
                self.set_consts(word1);
            }
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
    /// halves are the bits of elements
    /// `32 * group + 32 * (v / PER_GROUP) + (v % PER_GROUP) * LANES + lane` and its high halves
    /// those of the elements 16 further on. Where the blocks alternate
    /// ([`Self::new_for_blocks`]), vector `v` holds blocks `4 * (group + v / 2) + v % 2` and the
    /// one 2 on.
    #[inline(always)]
    pub(crate) unsafe fn span_words(&mut self, group: u64) -> [V::U; MAX_RNG_VECTORS] {
        unsafe {
            // Word 1 of every block of the span (an aligned span never straddles a change).
            self.consts_for(group * 4);
            let starts = self.starts();
            let mut x = if Self::WIDE_AES && self.consts.wide {
                self.span_rounds::<true>(group, starts)
            } else {
                self.span_rounds::<false>(group, starts)
            };
            // A second moment's stream: word `w` of a block holds the bits of elements `w` and
            // `w + 16` of its group, so exchanging words `2i` and `2i + 1` gives each element its
            // partner's (`e ^ 1`), in every form made from these words.
            if self.coord.swap_pairs {
                for x in x.iter_mut().take(V::RNG_VECTORS) {
                    *x = V::swap_pairs(*x);
                }
            }
            x
        }
    }

    /// Where [`Self::span_rounds`] reads the counters' constants: `CounterConsts::start`, through
    /// a pointer hidden from LLVM where the backend asks for them from memory
    /// ([`crate::arch::Simd::RNG_STARTS_IN_MEMORY`]; the wide rounds only: the 128-bit ones, which
    /// split each vector, took 1-2% more instructions). Valid while `self` is not moved.
    #[inline(always)]
    pub(crate) fn starts(&self) -> *const V::U {
        let starts = self.consts.start.as_ptr();
        if V::RNG_STARTS_IN_MEMORY && Self::WIDE_AES && self.consts.wide {
            opaque_ptr(starts)
        } else {
            starts
        }
    }

    /// [`Self::span_words`] with the constants already set up for the span's counter word 1
    /// ([`Self::begin_spans`]) and the words as ARS-5 gives them (no exchange of partners);
    /// `starts` is [`Self::starts`]. `WIDE`: the rounds' form, which must be the one the
    /// constants were set up for (`CounterConsts::wide`).
    #[inline(always)]
    pub(crate) unsafe fn span_rounds<const WIDE: bool>(
        &self,
        group: u64,
        starts: *const V::U,
    ) -> [V::U; MAX_RNG_VECTORS] {
        unsafe {
            debug_assert!(group.is_multiple_of(Self::SPAN));
            let first = group * 4;
            let k = &self.consts;
            debug_assert_eq!(k.word1, u64::from(self.word1(first)));
            debug_assert_eq!(k.wide, WIDE);
            // Round 0 (the key XOR) on the counters: `CounterConsts::start` and the span's first
            // block in word 0.
            let f = V::and_u(V::splat_u(first as u32), k.word0);
            let mut x = [f; MAX_RNG_VECTORS];
            round0::<V, MAX_RNG_VECTORS>(&mut x, V::RNG_VECTORS, starts, f);
            ars_rounds::<V, WIDE, MAX_RNG_VECTORS>(&mut x, V::RNG_VECTORS, &k.keys);
            x
        }
    }

    /// The ARS-5 output words of the group of element `e` (a multiple of 32), as
    /// [`Self::span_words`] gives that group's vectors, drawn alone: for a loop that makes one
    /// group's bits at a time, with no span cache to store and load.
    #[inline(always)]
    pub(crate) unsafe fn group_words(&mut self, e: u64) -> [V::U; 4] {
        unsafe {
            let group = e >> 5;
            let span = group - group % Self::SPAN;
            self.consts_for(span * 4);
            let starts = self.starts();
            let k = &self.consts;
            let f = V::and_u(V::splat_u((span * 4) as u32), k.word0);
            let j0 = (group % Self::SPAN) as usize * Self::PER_GROUP;
            let mut x = [f; 4];
            round0::<V, 4>(&mut x, Self::PER_GROUP, starts.add(j0), f);
            if Self::WIDE_AES && k.wide {
                ars_rounds::<V, true, 4>(&mut x, Self::PER_GROUP, &k.keys);
            } else {
                ars_rounds::<V, false, 4>(&mut x, Self::PER_GROUP, &k.keys);
            }
            if self.coord.swap_pairs {
                for x in x.iter_mut().take(Self::PER_GROUP) {
                    *x = V::swap_pairs(*x);
                }
            }
            x
        }
    }

    /// Sets up the counter constants for a run of up to `spans` whole spans from group `g` (a
    /// multiple of [`Self::SPAN`]) and gives how many of them come before counter word 1 changes
    /// (every [`SEQ_GROUPS`] groups): those [`Self::span_rounds`] then draws without testing it.
    #[inline(always)]
    pub(crate) unsafe fn begin_spans(&mut self, g: u64, spans: u64) -> u64 {
        unsafe {
            debug_assert!(g.is_multiple_of(Self::SPAN));
            self.consts_for(g * 4);
            spans.min((SEQ_GROUPS - g % SEQ_GROUPS) / Self::SPAN)
        }
    }

    /// Sets up the counter constants for [`Self::group_word`] from group `g` on. The groups
    /// drawn must not cross a multiple of 2^30 groups, where counter word 1 changes
    /// ([`SEQ_GROUPS`]).
    #[inline(always)]
    pub(crate) unsafe fn begin_groups(&mut self, g: u64) {
        unsafe {
            debug_assert_eq!(Self::PER_GROUP, 1);
            self.consts_for(g * 4);
        }
    }

    /// The ARS-5 output words of the group `d` is at, one vector (`PER_GROUP == 1`), for a loop
    /// that takes the groups in order: one XOR and the rounds, with no span cache to store, load
    /// and index, and no test in the loop. As [`Self::span_words`] for a span of one group:
    /// `start[0]` holds blocks 0-3 after round 0, and the group's first block is a multiple of 4.
    /// The words as ARS-5 gives them: a second moment's stream ([`BitsCoord::swap_pairs`]) leaves
    /// the exchange of partners to its caller ([`RoundingBits::next_pair`]).
    #[inline(always)]
    pub(crate) unsafe fn group_word(&self, d: &PairDraw<V>) -> V::U {
        unsafe {
            debug_assert_eq!(Self::PER_GROUP, 1);
            let mut x = V::xor_u(self.consts.start[0], d.block0);
            for key in &d.keys[..4] {
                x = V::aes_enc(x, *key);
            }
            V::aes_enc_last(x, d.keys[4])
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

    /// The 16 random bits (one per lane, in the low half) of the chunk starting at global `e`.
    #[inline(always)]
    pub unsafe fn r16(&mut self, e: u64) -> V::U {
        unsafe { self.r16_filled::<true>(e) }
    }

    /// [`Self::r16`] with the span's fill called out of line ([`BitsFill::fill_span_out_of_line`]).
    #[inline(always)]
    pub unsafe fn r16_alone(&mut self, e: u64) -> V::U {
        unsafe { self.r16_filled::<false>(e) }
    }

    /// [`Self::r16`], the span filled through [`BitsFill::fill_span`] where `FILL_INLINE`.
    #[inline(always)]
    unsafe fn r16_filled<const FILL_INLINE: bool>(&mut self, e: u64) -> V::U {
        unsafe {
            debug_assert!(e.is_multiple_of(V::LANES as u64));
            let d = self.span_group::<FILL_INLINE>(e);
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
            self.bits[self.span_group::<true>(e) * Self::PER_GROUP + j]
        }
    }

    /// The group of global element `e` within the cached span, after filling the span from that
    /// group if it is not cached (through [`BitsFill::fill_span`] where `FILL_INLINE`, else
    /// [`BitsFill::fill_span_out_of_line`]).
    #[inline(always)]
    unsafe fn span_group<const FILL_INLINE: bool>(&mut self, e: u64) -> usize {
        unsafe {
            let group = e >> 5;
            let mut d = group.wrapping_sub(self.group);
            if d >= Self::SPAN {
                d = group % Self::SPAN;
                let first = group - d;
                if !FILL_INLINE {
                    V::fill_span_out_of_line(self, first);
                } else if V::RNG_FILL_OPAQUE {
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
    /// [`GroupBits::fill`] out of line on every backend, for the chunks a loop that draws its
    /// groups' bits in order leaves to be taken alone ([`RoundingBits::r16_alone`]): inlined
    /// there, a span's eight ARS rounds were copied into each of a layout's single-chunk paths,
    /// and AVX-512's optimizer entry points took twice the build (docs/DESIGN.md, "Build time").
    unsafe fn fill_span_out_of_line<const WORDS: bool>(
        bits: &mut GroupBits<Self, WORDS>,
        group: u64,
    ) where
        Self: arch::Simd;
    /// [`fill_block`] on this backend, always out of line (see [`RoundingBits`]).
    unsafe fn fill_block(
        block: *mut BitsBlock<Self>,
        base: u64,
        from: usize,
        n: usize,
        first: bool,
    ) where
        Self: arch::Simd;
}

/// The bulk fill: whole spans stored as words.
struct FillBits<'a, V: Simd, const BESIDE_AES: bool> {
    /// As words: `full_run` stores both halves of each at once.
    rng: &'a mut GroupBits<V, true>,
    dst: *mut u16,
}

impl<V: Simd, const BESIDE_AES: bool> FillBits<'_, V, BESIDE_AES> {
    /// Word vector `w`'s low halves to `lo`, its high halves to `lo + 16`: packed by
    /// [`crate::arch::Simd::pack_u16_halves_beside_aes`] where `BESIDE_AES`.
    #[inline(always)]
    unsafe fn store_halves(lo: *mut u16, w: V::U) {
        unsafe {
            if BESIDE_AES {
                let packed = V::pack_u16_halves_beside_aes(w);
                V::store_packed_lo(lo, packed);
                V::store_packed_hi(lo.add(16), packed);
            } else {
                V::store_u16_halves(lo.add(16), lo, w);
            }
        }
    }

    /// The 32 elements from `e` (a multiple of 32) through the span cache.
    #[inline(always)]
    unsafe fn words32(&mut self, off: isize, e: u64) {
        unsafe {
            let l = V::LANES;
            for j in 0..16 / l {
                let w = self.rng.word32(e, j);
                Self::store_halves(self.dst.offset(off + (j * l) as isize), w);
            }
        }
    }
}

impl<V: Simd, const BESIDE_AES: bool> ChunkBody<V> for FillBits<'_, V, BESIDE_AES> {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe { V::store_u16(self.dst.offset(off), self.rng.r16(e)) }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut st = Stage::new();
            V::store_u16(st.h.as_mut_ptr(), self.rng.r16(c.e));
            stage_out(st.h.as_ptr(), self.dst, c);
        }
    }
    /// 32 elements at a time where they start at a multiple of 32: each output word then holds
    /// two of them, stored by one `store_u16_halves` instead of a shift or mask and a narrowing
    /// store per chunk. Whole spans go from the AES rounds' registers straight to `dst`, without
    /// the span cache (a store and a load per vector).
    #[inline(always)]
    unsafe fn full_run(&mut self, mut off: isize, mut e: u64, end: u64) {
        unsafe {
            let span = 32 * GroupBits::<V, true>::SPAN;
            let head_end = e.next_multiple_of(32).min(end);
            full_run_plain::<V, Self>(self, off, e, head_end);
            off += (head_end - e) as isize;
            e = head_end;
            while e + 32 <= end && !e.is_multiple_of(span) {
                self.words32(off, e);
                off += 32;
                e += 32;
            }
            while e + span <= end {
                let words = self.rng.span_words(e / 32);
                for (v, w) in words.iter().enumerate().take(V::RNG_VECTORS) {
                    let at = GroupBits::<V, true>::word_offset(v) as isize;
                    Self::store_halves(self.dst.offset(off + at), *w);
                }
                off += span as isize;
                e += span;
            }
            while e + 32 <= end {
                self.words32(off, e);
                off += 32;
                e += 32;
            }
            full_run_plain::<V, Self>(self, off, e, end);
        }
    }
}

/// SPEC.md §3.2: the bits of elements `base .. base + out.len()`, in element order by the
/// backend's shuffles that issue beside the AES rounds where the CPU gains by them
/// ([`crate::cpu::packs_beside_aes`]).
#[inline(always)]
pub(crate) unsafe fn fill_bits<V: Simd>(coord: &BitsCoord, base: u64, out: &mut [u16]) {
    unsafe {
        if V::PACKS_BESIDE_AES && crate::cpu::packs_beside_aes() {
            fill_bits_packed::<V, true>(coord, base, out)
        } else {
            fill_bits_packed::<V, false>(coord, base, out)
        }
    }
}

/// [`fill_bits`] with the values packed by [`crate::arch::Simd::pack_u16_halves_beside_aes`]
/// or not.
#[inline(always)]
unsafe fn fill_bits_packed<V: Simd, const BESIDE_AES: bool>(
    coord: &BitsCoord,
    base: u64,
    out: &mut [u16],
) {
    unsafe {
        let mut rng = GroupBits::new(*coord);
        let mut k = FillBits::<V, BESIDE_AES> {
            rng: &mut rng,
            dst: out.as_mut_ptr(),
        };
        run_chunks::<V, _>(base, out.len(), &mut k);
    }
}

/// The out-of-line fill of a [`BitsBlock`], in one of two layouts:
///
/// - in order (`EVEN_ODD` false): each element's 16 bits in the low half of a 32-bit word of its
///   own, so that a chunk's bits are one plain vector load (no widening load in the rounding
///   loop) and the fill stores the AES output words with a mask and a shift, where packing them
///   to 16 bits took two shuffles per vector on the ports the AES rounds use;
/// - even/odd ([`RoundingBits::use_even_odd_blocks`]): the words of the block's even elements
///   (element `2k` in word `k`), then, from word [`ODD_WORDS`], of its odd ones. A pair of chunks
///   from an even element then reads its bits in even/odd order as two plain vector loads, where
///   the words in order took two loads and four shuffles and shifts per stream, and a second
///   moment's pair reads the same two vectors the other way round, from its first moment's block.
struct FillBlock<'a, V: Simd, const EVEN_ODD: bool> {
    rng: &'a mut GroupBits<V, true>,
    dst: *mut u32,
}

/// Where the odd elements' words of a block in the even/odd layout start.
const ODD_WORDS: usize = BLOCK / 2;

/// The word of a block in the even/odd layout that holds element `i` of the block.
#[inline(always)]
const fn even_odd_word(i: usize) -> usize {
    i % 2 * ODD_WORDS + i / 2
}

/// [`RoundingBits`]' `partner` of a second moment that reads its first moment's blocks: never
/// the address of a block.
const READS_FIRST_MOMENTS: *const u32 = core::ptr::dangling();

impl<V: Simd, const EVEN_ODD: bool> FillBlock<'_, V, EVEN_ODD> {
    /// Whether the generator's blocks alternate across a group's two output vectors
    /// ([`GroupBits::new_for_blocks`]).
    const ALTERNATE: bool = EVEN_ODD && GroupBits::<V, true>::ALTERNATES;

    /// In order: output word vector `w` of 32 elements from element offset `off - j * LANES`:
    /// its low halves to `off ..`, its high halves to `off + 16 ..`.
    #[inline(always)]
    unsafe fn store_word(&mut self, off: isize, w: V::U) {
        unsafe {
            let lo = V::and_u(w, V::splat_u(0xFFFF));
            V::store(self.dst.offset(off).cast(), V::from_bits(lo));
            V::store(
                self.dst.offset(off + 16).cast(),
                V::from_bits(V::shr::<16>(w)),
            );
        }
    }

    /// Even/odd: the bits of a pair of chunks from element offset `off` (even) and of the pair
    /// 16 elements on, `a` and `b` holding the first pair's in their low halves and the second's
    /// in their high halves (two output word vectors, or one vector's halves split apart).
    #[inline(always)]
    unsafe fn store_pairs(&mut self, off: isize, a: V::U, b: V::U) {
        unsafe {
            let [even, odd] = if const { Self::ALTERNATE } {
                V::even_odd_in_blocks(a, b)
            } else {
                V::even_odd_lanes(a, b)
            };
            let (e, o) = (
                self.dst.offset(off / 2),
                self.dst.add(ODD_WORDS).offset(off / 2),
            );
            let low = V::splat_u(0xFFFF);
            V::store(e.cast(), V::from_bits(V::and_u(even, low)));
            V::store(o.cast(), V::from_bits(V::and_u(odd, low)));
            V::store(e.add(8).cast(), V::from_bits(V::shr::<16>(even)));
            V::store(o.add(8).cast(), V::from_bits(V::shr::<16>(odd)));
        }
    }

    /// The output word vectors `words` of whole groups from element offset `off`, as
    /// [`GroupBits::span_words`] gives them. Even/odd: with two or more per group, side by side
    /// in pairs ([`Self::store_pairs`]); with one (16 lanes), each vector's two chunks (low
    /// halves, high halves) as the pair, stored as they come.
    #[inline(always)]
    unsafe fn store_words(&mut self, off: isize, words: &[V::U]) {
        unsafe {
            debug_assert_eq!(self.rng.alternate, Self::ALTERNATE);
            let word_offset = |v: usize| GroupBits::<V, true>::word_offset(v) as isize;
            if const { !EVEN_ODD } {
                for (v, w) in words.iter().enumerate() {
                    self.store_word(off + word_offset(v), *w);
                }
            } else if const { GroupBits::<V, true>::PER_GROUP == 1 } {
                for (v, w) in words.iter().enumerate() {
                    let at = (off + word_offset(v)) / 2;
                    let low = V::and_u(*w, V::splat_u(0xFFFF));
                    let [even, odd] = V::even_odd_lanes(low, V::shr::<16>(*w));
                    V::store(self.dst.offset(at).cast(), V::from_bits(even));
                    V::store(self.dst.add(ODD_WORDS).offset(at).cast(), V::from_bits(odd));
                }
            } else {
                for v in (0..words.len()).step_by(2) {
                    self.store_pairs(off + word_offset(v), words[v], words[v + 1]);
                }
            }
        }
    }

    /// The 32 elements from `e` (a multiple of 32) through the span cache: a group of a span
    /// the fill starts or ends inside.
    #[inline(always)]
    unsafe fn group(&mut self, off: isize, e: u64) {
        unsafe {
            const PER_GROUP_MAX: usize = 16 / 4; // 16 words over lanes of at least four
            let per_group = GroupBits::<V, true>::PER_GROUP;
            let mut words = [V::splat_u(0); PER_GROUP_MAX];
            for (j, w) in words.iter_mut().enumerate().take(per_group) {
                *w = self.rng.word32(e, j);
            }
            self.store_words(off, &words[..per_group]);
        }
    }

    /// The bits of the chunk from `e` (in the low halves), as [`GroupBits::r16`] gives them in
    /// order: from the group's two output vectors lane by lane where the blocks alternate (the
    /// chunks at a fill's end only).
    #[inline(always)]
    unsafe fn r16(&mut self, e: u64) -> V::U {
        unsafe {
            if const { !Self::ALTERNATE } {
                return self.rng.r16(e);
            }
            let g = e - e % 32;
            let words = [
                arch::u32_lanes::<V>(self.rng.word32(g, 0)),
                arch::u32_lanes::<V>(self.rng.word32(g, 1)),
            ];
            arch::u32_vector::<V>(|l| {
                // Element `i` of the group: word `i % 4` of its block `i % 16 / 4`, half `i / 16`.
                let i = (e % 32) as usize + l;
                let block = i % 16 / 4;
                (words[block % 2][block / 2 * 4 + i % 4] >> (16 * (i / 16))) & 0xFFFF
            })
        }
    }

    /// The bits `r` of the chunk at element offset `off`, lanes `lanes` only.
    #[inline(always)]
    unsafe fn store_chunk(&mut self, off: isize, r: V::U, lanes: core::ops::Range<usize>) {
        unsafe {
            if const { !EVEN_ODD } && lanes == (0..V::LANES) {
                return V::store(self.dst.offset(off).cast(), V::from_bits(r));
            }
            // Lane by lane: the fill's ends only.
            let x = arch::u32_lanes::<V>(r);
            for l in lanes {
                let i = off as usize + l;
                *self.dst.add(if EVEN_ODD { even_odd_word(i) } else { i }) = x[l];
            }
        }
    }
}

impl<V: Simd, const EVEN_ODD: bool> ChunkBody<V> for FillBlock<'_, V, EVEN_ODD> {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe {
            let r = self.r16(e);
            self.store_chunk(off, r, 0..V::LANES)
        }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let r = self.r16(c.e);
            self.store_chunk(c.off, r, c.lo..c.hi)
        }
    }
    /// As [`FillBits`]' run: whole spans from the AES rounds' registers. A copy with its own
    /// stores: written once for both fills, over a trait for the store, the fills executed
    /// 4–30% more instructions (gungraun, AVX2: `random_bits` +30%).
    #[inline(always)]
    unsafe fn full_run(&mut self, mut off: isize, mut e: u64, end: u64) {
        unsafe {
            const { assert!(MAX_RNG_VECTORS.is_multiple_of(2)) };
            let span = 32 * GroupBits::<V, true>::SPAN;
            let head_end = e.next_multiple_of(32).min(end);
            full_run_plain::<V, Self>(self, off, e, head_end);
            off += (head_end - e) as isize;
            e = head_end;
            while e + 32 <= end && !e.is_multiple_of(span) {
                self.group(off, e);
                off += 32;
                e += 32;
            }
            while e + span <= end {
                let words = self.rng.span_words(e / 32);
                self.store_words(off, &words[..V::RNG_VECTORS]);
                off += span as isize;
                e += span;
            }
            while e + 32 <= end {
                self.group(off, e);
                off += 32;
                e += 32;
            }
            full_run_plain::<V, Self>(self, off, e, end);
        }
    }
}

/// The bits of elements `base + from .. base + from + n` (`base` a multiple of [`BLOCK`], `from`
/// of 32, `from + n` at most `BLOCK`) into `block`'s buffer ([`FillBlock`]), with the block's
/// generator, which the `first` fill sets up (so that the stream's constants are computed once
/// per call, not once per block).
#[inline(always)]
pub(crate) unsafe fn fill_block<V: Simd>(
    block: *mut BitsBlock<V>,
    base: u64,
    from: usize,
    n: usize,
    first: bool,
) {
    unsafe {
        debug_assert!(base.is_multiple_of(BLOCK as u64) && from.is_multiple_of(32));
        debug_assert!(from + n <= BLOCK);
        let partner = (*block).partner.assume_init();
        if partner == READS_FIRST_MOMENTS {
            return;
        }
        if !partner.is_null() {
            return copy_partners(block, partner, from, n);
        }
        // In the even/odd layout element `from` (even) has word `from / 2` of each half.
        let even_odd = (*block).even_odd.assume_init();
        let dst =
            (&raw mut (*block).bits)
                .cast::<u32>()
                .add(if even_odd { from / 2 } else { from });
        if first {
            (*block).rng.write(GroupBits::new_for_blocks(
                (*block).coord.assume_init(),
                even_odd,
            ));
        }
        let rng = (*block).rng.assume_init_mut();
        let e = base + from as u64;
        if even_odd {
            run_chunks::<V, _>(e, n, &mut FillBlock::<V, true> { rng, dst });
        } else {
            run_chunks::<V, _>(e, n, &mut FillBlock::<V, false> { rng, dst });
        }
    }
}

/// A conversion that can round each full chunk with random bits handed to it, for
/// [`full_run_spans`].
pub(crate) trait RoundsChunks<V: Simd> {
    /// Rounds the full chunk at local offset `off` with the random bits `r` (one per lane, in the
    /// low half): the bits [`RoundingBits::r16`] gives that chunk.
    unsafe fn round_full(&mut self, off: isize, r: V::U);
    /// The full chunks at `off` and `off + 16`, with the bits `lo` and `hi`: the two chunks one
    /// output word of [`full_run_spans`] rounds.
    #[inline(always)]
    unsafe fn round_pair(&mut self, off: isize, lo: V::U, hi: V::U) {
        unsafe {
            self.round_full(off, lo);
            self.round_full(off + 16, hi);
        }
    }
    /// The four full chunks of one 32-element group at `off` where a group's bits are two output
    /// words (8 lanes): word `w[0]` rounds the chunks at `off` (low halves) and `off + 16` (high
    /// halves), `w[1]` those at `off + 8` and `off + 24`; `mask` keeps a word's low halves.
    #[inline(always)]
    unsafe fn round_group(&mut self, off: isize, w: [V::U; 2], mask: V::U) {
        unsafe {
            for (k, w) in w.into_iter().enumerate() {
                let at = off + (k * V::LANES) as isize;
                self.round_pair(at, V::and_u(w, mask), V::shr::<16>(w));
            }
        }
    }
    /// The stream whose bits [`full_run_spans`] makes for this conversion, where it should
    /// ([`spans_inline`]); `None`: the chunks take their bits from their [`RoundingBits`].
    fn span_coord(&self) -> Option<BitsCoord>;
    /// Whether the rounding takes no random bits (nearest-even, toward zero), so that any chunks
    /// may be rounded with zero bits in place of theirs, and [`Self::round_pair`] and
    /// [`Self::round_group`] may be used on chunks that are not a span's.
    #[inline(always)]
    fn rounds_without_bits(&self) -> bool {
        false
    }
}

/// A conversion's full chunks where its rounding takes no random bits
/// ([`RoundsChunks::rounds_without_bits`]: nearest-even, toward zero): 32 elements at a time, as
/// [`full_run_spans`] hands them over ([`RoundsChunks::round_group`] where a group is two words,
/// [`RoundsChunks::round_pair`] where it is one), with zero bits, then the last full chunks one
/// by one; chunk by chunk where a group is more words (NEON). A bf16 body then tests the 32 for
/// NaN once and stores them in 256- or 512-bit lines, where chunk by chunk it took a test and a
/// branch and a 128-bit store with a shuffle per 8 lanes on AVX2 (Zen 5 VM, 64K: 0.118 ns per
/// element, 1.4× stochastic rounding's time; now 0.055).
#[inline(always)]
pub(crate) unsafe fn full_run_groups<V: Simd, B: ChunkBody<V> + RoundsChunks<V>>(
    body: &mut B,
    mut off: isize,
    mut e: u64,
    end: u64,
) {
    unsafe {
        let per_group = GroupBits::<V, true>::PER_GROUP;
        let zero = V::splat_u(0);
        while per_group <= 2 && e + 32 <= end {
            if body.prefetching() {
                body.prefetch(off);
                body.prefetch(off + 16);
            }
            if per_group == 2 {
                body.round_group(off, [zero, zero], zero);
            } else {
                body.round_pair(off, zero, zero);
            }
            off += 32;
            e += 32;
        }
        full_run_plain::<V, B>(body, off, e, end)
    }
}

/// Whether a conversion with `rounding` runs its full chunks through [`full_run_spans`]: a
/// stochastic one on a backend with [`crate::arch::Simd::CONVERSION_SPANS`] (AVX2, AVX-512), on
/// AVX2 only where the CPU has the wide AES rounds (VAES). A conversion's loop has the registers
/// the rounds need, which an optimizer's does not; with the rounds in it, they overlap the
/// conversion's loads, shuffles and stores, where AVX2's block made the two run one after the
/// other and AVX-512's span cache stored every span's bits to the stack and loaded them back
/// (docs/DESIGN.md, "Random bits: ARS-5"). NEON keeps its span cache: not measured there.
#[inline(always)]
pub(crate) fn spans_inline<V: Simd>(rounding: Rounding) -> bool {
    rounding == Rounding::Stochastic && V::CONVERSION_SPANS && (!V::WIDE_AES || V::wide_aes())
}

/// The full chunks from local offset `off` (global index `e`) up to global `end`, with the bits of
/// `coord`'s stream (a conversion's: never a second moment's) made span by span ([`GroupBits`] with
/// words) in this loop, a whole span's a span ahead of its rounding: each output word's low halves
/// round its chunk, its high halves the chunk 16 elements on (SPEC.md §3.2, as [`FillBlock`] lays
/// them out), the two handed over together in whole spans ([`RoundsChunks::round_pair`]). A span
/// the run starts or ends inside rounds only its chunks in `e .. end`, one by one. Each chunk is
/// prefetched ahead of first where the body prefetches.
#[inline(always)]
pub(crate) unsafe fn full_run_spans<V: Simd, B: ChunkBody<V> + RoundsChunks<V>>(
    body: &mut B,
    coord: BitsCoord,
    mut off: isize,
    mut e: u64,
    end: u64,
) {
    unsafe {
        const { assert!(V::RNG_VECTORS <= MAX_RNG_VECTORS) };
        // The whole spans take the words as ARS-5 gives them: the conversions draw the weights'
        // stream, never a second moment's, whose words exchange partners. (Tested per run, in
        // the condition of the whole spans, it made the release build's AVX-512 bf16 SR loop
        // 1.13x the time.)
        debug_assert!(!coord.swap_pairs);
        let span = 32 * GroupBits::<V, true>::SPAN;
        let mut rng = GroupBits::<V, true>::new(coord);
        let mask = V::splat_u(0xFFFF);
        #[inline(always)]
        unsafe fn round<V: Simd, B: ChunkBody<V> + RoundsChunks<V>>(
            b: &mut B,
            off: isize,
            r: V::U,
        ) {
            unsafe {
                if b.prefetching() {
                    b.prefetch(off);
                }
                b.round_full(off, r);
            }
        }
        // The span's words in the wide rounds where the backend has them: the conversions run
        // here only with those ([`spans_inline`]).
        #[inline(always)]
        unsafe fn rounds<V: Simd>(
            rng: &GroupBits<V, true>,
            g: u64,
            starts: *const V::U,
        ) -> [V::U; MAX_RNG_VECTORS] {
            unsafe {
                if V::WIDE_AES {
                    rng.span_rounds::<true>(g, starts)
                } else {
                    rng.span_rounds::<false>(g, starts)
                }
            }
        }
        while e < end {
            let first = e - e % span;
            // Local offset of the span's first element (which may lie before the slice).
            let o = off - (e - first) as isize;
            if first == e && first + span <= end {
                // Whole spans up to the next change of counter word 1, each one's words made
                // before the span ahead of it is rounded: in program order its rounds go ahead of
                // that span's chunks, which then do not wait for the rounds' latency (Zen 5 VM,
                // 64K: AVX-512 0.039 -> 0.032 ns per element, AVX2 0.086 -> 0.076). The
                // constants are set up once for the run, so that a span's rounds test nothing:
                // tests per span of word 1, of the pair exchange and of the rounds' form made
                // f32 -> bf16 SR 1.05x the time on AVX2 and in AVX-512's kernel bench
                // (docs/DESIGN.md).
                let g = first / 32;
                let spans = rng.begin_spans(g, (end - first) / span);
                let starts = rng.starts();
                let mut next = rounds(&rng, g, starts);
                for k in 0..spans {
                    let words = next;
                    if k + 1 < spans {
                        next = rounds(&rng, g + (k + 1) * GroupBits::<V, true>::SPAN, starts);
                    }
                    round_span::<V, B>(body, o + (k * span) as isize, &words, mask);
                }
                off = o + (spans * span) as isize;
                e = first + spans * span;
            } else {
                let words = rng.span_words(first / 32);
                for (v, w) in words.iter().enumerate().take(V::RNG_VECTORS) {
                    let at = GroupBits::<V, true>::word_offset(v) as u64;
                    for (half, r) in [(0, V::and_u(*w, mask)), (16, V::shr::<16>(*w))] {
                        let ce = first + at + half;
                        if ce >= e && ce < end {
                            round(body, o + (at + half) as isize, r);
                        }
                    }
                }
                off = o + span as isize;
                e = first + span;
            }
        }
    }
}

/// [`full_run_spans`]' whole span at local offset `o`, with its output words `words`.
#[inline(always)]
unsafe fn round_span<V: Simd, B: ChunkBody<V> + RoundsChunks<V>>(
    body: &mut B,
    o: isize,
    words: &[V::U; MAX_RNG_VECTORS],
    mask: V::U,
) {
    unsafe {
        // Unrolled by hand: as a loop, LLVM kept the words on the stack.
        macro_rules! word {
            ($v:expr) => {
                if $v < V::RNG_VECTORS {
                    let c = o + GroupBits::<V, true>::word_offset($v) as isize;
                    if body.prefetching() {
                        body.prefetch(c);
                        body.prefetch(c + 16);
                    }
                    let w = words[$v];
                    body.round_pair(c, V::and_u(w, mask), V::shr::<16>(w));
                }
            };
        }
        // Where a group is two words (8 lanes), both go together, so that the body can round
        // the group's four chunks at once ([`RoundsChunks::round_group`]). Two prefetches reach
        // every line of the group's 32 elements (the f32 input's line past the second one is
        // the next group's first), as in [`full_run_groups`].
        macro_rules! group {
            ($v:expr) => {
                if $v + 1 < V::RNG_VECTORS {
                    let c = o + GroupBits::<V, true>::word_offset($v) as isize;
                    if body.prefetching() {
                        body.prefetch(c);
                        body.prefetch(c + 16);
                    }
                    body.round_group(c, [words[$v], words[$v + 1]], mask);
                }
            };
        }
        if const { GroupBits::<V, true>::PER_GROUP == 2 } {
            group!(0);
            group!(2);
            group!(4);
            group!(6);
        } else {
            word!(0);
            word!(1);
            word!(2);
            word!(3);
            word!(4);
            word!(5);
            word!(6);
            word!(7);
        }
    }
}

/// Elements per block of [`RoundingBits`]' out-of-line fill: 4 KiB of words, which stay in L1
/// until the chunks read them, and enough elements that the call and the constants the kernel
/// reloads after it (the kernel's loop keeps them in registers otherwise) cost little per element.
/// The fill is a pause in the step's memory traffic: against 2048, a step whose buffers stream from
/// memory (4M and 64M elements, AVX2, Zen 4) ran 0.75–0.98× the time, in cache level
/// (docs/DESIGN.md).
const BLOCK: usize = 1024;

/// Never a block start (element indices are below 2^51), and far enough below `u64::MAX` that
/// `e - NO_BLOCK` (wrapping) is at least [`BLOCK`] for every element `e`.
const NO_BLOCK: u64 = u64::MAX - BLOCK as u64;

/// The random bits of one stream for a rounding kernel (SPEC.md §3.2), read chunk by chunk
/// ([`Self::r16`]), in one of two ways chosen per backend
/// ([`crate::arch::Simd::RNG_BLOCK`]); the bits are the same either way:
///
/// - **inline**: a [`GroupBits`] span cache, its AES rounds inside the rounding loop. Where the
///   backend has many registers and its widest AES rounds on every CPU it runs on (AVX-512's
///   VAES, NEON), this is the cheaper way.
/// - **block**: [`BLOCK`] elements at a time, made by the bulk fill ([`fill_bits`], through
///   [`BitsFill::fill_block`], a call) into a buffer on the kernel's stack, one 32-bit word per
///   element, and read back as one vector load per chunk (or per half of a pair of chunks in
///   even/odd order: [`Self::use_even_odd_blocks`]). On AVX2, inline rounds shared the loop's
///   16 registers with the update's constants, the counters and the round keys, and could run
///   only the 128-bit AES-NI rounds every AVX2 CPU has; out of line, the bulk fill runs its own
///   tight loop, on 256-bit VAES where the CPU has it (docs/DESIGN.md, "Random bits: ARS-5").
///   A loop the divider bounds makes its bits itself instead, a group at a time and half a block
///   ahead of its reads, the block a ring ([`Self::fill_group_ring`]): beside the divisions the
///   rounds cost nothing.
pub(crate) struct RoundingBits<V: Simd> {
    /// The span cache (inline only; uninitialized in block mode).
    span: core::mem::MaybeUninit<GroupBits<V>>,
    /// The stream, handed to the block on its first fill (not at construction: a kernel whose
    /// stores draw no bits need not write its blocks).
    coord: BitsCoord,
    /// First element of the cached block (a multiple of [`BLOCK`]); [`NO_BLOCK`] before the
    /// first fill. Block mode only, as are the fields below.
    start: u64,
    /// One past the last element the kernel rounds: a block is filled no further than the chunk
    /// holding it, so that a short call does not pay for a whole block.
    end: u64,
    /// The buffer and generator, a [`BitsBlock`] of the kernel's. A pointer, not the block
    /// itself: the fill is a call that writes it, and with the block inside the kernel's state
    /// the call would be handed the state's address, after which LLVM keeps every field of the
    /// state in memory and reloads it in every chunk.
    block: *mut BitsBlock<V>,
    /// The block's bits, one element per 32-bit word; in the even/odd layout, the words of the
    /// block's even elements (a second moment sharing its first moment's block: that block's odd
    /// ones).
    bits: *const u32,
    /// The first moment's block bits this second moment's blocks copy, or null: handed to the
    /// block on its first fill ([`Self::copy_blocks_of`]); [`READS_FIRST_MOMENTS`] for a second
    /// moment that reads its first moment's blocks and fills none
    /// ([`Self::share_even_odd_blocks_of`], [`Self::read_first_moments`]).
    partner: *const u32,
}

/// The buffer of one [`RoundingBits`] in block mode, filled up to the block's last chunk the
/// kernel reads and never read beyond it, the stream's coordinates and its generator. Left
/// uninitialized until used: a kernel whose roundings draw no bits, or a backend that draws them
/// inline, pays nothing for it.
#[repr(C, align(64))]
pub(crate) struct BitsBlock<V: Simd> {
    bits: [core::mem::MaybeUninit<u32>; BLOCK],
    /// Set before the first fill.
    coord: core::mem::MaybeUninit<BitsCoord>,
    /// Set by the first fill.
    rng: core::mem::MaybeUninit<GroupBits<V, true>>,
    /// Set before the first fill: where not null, the first moment's block bits this (second
    /// moment's) block copies with partners exchanged instead of drawing
    /// ([`RoundingBits::copy_blocks_of`]). Uninitialized until then, as the rest: a block built
    /// with a field set was copied whole onto the kernel's stack, the whole block on every call.
    partner: core::mem::MaybeUninit<*const u32>,
    /// Set before the first fill: the layout of its words, even/odd or in order ([`FillBlock`]).
    even_odd: core::mem::MaybeUninit<bool>,
}

impl<V: Simd> BitsBlock<V> {
    #[inline(always)]
    pub const fn new() -> Self {
        BitsBlock {
            bits: [core::mem::MaybeUninit::uninit(); BLOCK],
            coord: core::mem::MaybeUninit::uninit(),
            rng: core::mem::MaybeUninit::uninit(),
            partner: core::mem::MaybeUninit::uninit(),
            even_odd: core::mem::MaybeUninit::uninit(),
        }
    }
}

impl<V: Simd> RoundingBits<V> {
    /// The bits of `coord`'s stream for a kernel that rounds elements below `end` (global); in
    /// block mode kept in `block`, which must outlive the kernel's use of them.
    #[inline(always)]
    pub unsafe fn new(coord: BitsCoord, end: u64, block: &mut BitsBlock<V>) -> Self {
        const { assert!(BLOCK.is_multiple_of(MAX_LANES)) };
        // Both pointers from one raw pointer: the fill writes through one, `r16` reads the other.
        let block: *mut BitsBlock<V> = block;
        RoundingBits {
            span: if V::RNG_BLOCK {
                core::mem::MaybeUninit::uninit()
            } else {
                core::mem::MaybeUninit::new(unsafe { GroupBits::new(coord) })
            },
            coord,
            start: NO_BLOCK,
            end,
            bits: unsafe { (&raw const (*block).bits).cast() },
            partner: core::ptr::null(),
            block,
        }
    }

    /// The bits a rounding with `rounding` consumes for the chunk at global `e`: [`Self::r16`]
    /// (with `PREPARED`, [`Self::r16_prepared`]) when stochastic, zeros otherwise (the RNG runs
    /// only when its bits are used).
    #[inline(always)]
    pub unsafe fn for_rounding<const PREPARED: bool>(
        &mut self,
        rounding: Rounding,
        e: u64,
    ) -> V::U {
        unsafe {
            if rounding != Rounding::Stochastic {
                V::splat_u(0)
            } else if PREPARED {
                self.r16_prepared(e)
            } else {
                self.r16(e)
            }
        }
    }

    /// The 16 random bits (one per lane, in the low half) of the chunk starting at global `e`
    /// (below `end`).
    #[inline(always)]
    pub unsafe fn r16(&mut self, e: u64) -> V::U {
        unsafe {
            if V::RNG_BLOCK && e.wrapping_sub(self.start) >= BLOCK as u64 {
                self.refill(e, false);
            }
            self.r16_prepared(e)
        }
    }

    /// [`Self::r16`] without a fill in block mode, for a kernel that fills blocks at its own
    /// boundaries ([`Self::prepare`]): a call inside the rounding loop, even one taken once per
    /// block, made LLVM keep the loop's values in memory around it (AVX2, Zen 3: split SGD with
    /// bf16 states 4-10% slower than with the rounds inline, and 9-11% faster this way).
    #[inline(always)]
    pub unsafe fn r16_prepared(&mut self, e: u64) -> V::U {
        unsafe {
            if !V::RNG_BLOCK {
                return self.span.assume_init_mut().r16(e);
            }
            let d = e.wrapping_sub(self.start);
            debug_assert!(e.is_multiple_of(V::LANES as u64) && e < self.end && d < BLOCK as u64);
            // A second moment reading its first moment's blocks takes its bits from the loop.
            debug_assert!(self.partner != READS_FIRST_MOMENTS);
            V::to_bits(V::load(self.bits.add(d as usize).cast()))
        }
    }

    /// [`Self::r16`] with the span's fill called out of line, for the chunks a loop that draws its
    /// groups' bits in order ([`Self::IN_ORDER`]) leaves to be taken alone, at a run's ends.
    #[inline(always)]
    pub unsafe fn r16_alone(&mut self, e: u64) -> V::U {
        unsafe {
            debug_assert!(Self::IN_ORDER);
            self.span.assume_init_mut().r16_alone(e)
        }
    }

    /// [`Self::for_rounding`] (prepared) of the two chunks from `e`, in even/odd order
    /// ([`crate::arch::Simd::even_odd_of_chunks`]): the bits of the pair's even elements, then of
    /// its odd ones; zeros unless `rounding` is stochastic. Blocks in element order.
    #[inline(always)]
    pub unsafe fn for_rounding_even_odd(&mut self, rounding: Rounding, e: u64) -> [V::U; 2] {
        unsafe {
            if rounding != Rounding::Stochastic {
                return [V::splat_u(0); 2];
            }
            let first = self.r16_prepared(e);
            V::even_odd_of_chunks(first, self.r16_prepared(e + V::LANES as u64))
        }
    }

    /// The bits of the two chunks from `e` in even/odd order, as
    /// [`Self::for_rounding_even_odd`] gives a stochastic rounding's, from blocks in the even/odd
    /// layout ([`Self::use_even_odd_blocks`]): two plain loads.
    #[inline(always)]
    pub unsafe fn pair_from_even_odd_blocks(&self, e: u64) -> [V::U; 2] {
        unsafe {
            let d = e.wrapping_sub(self.start);
            debug_assert!(V::RNG_BLOCK);
            let pair = 2 * V::LANES as u64;
            debug_assert!(e.is_multiple_of(V::LANES as u64) && d + pair <= BLOCK as u64);
            debug_assert!(e + pair <= self.end.next_multiple_of(V::LANES as u64));
            let at = (d / 2) as usize;
            [
                V::to_bits(V::load(self.bits.add(at).cast())),
                V::to_bits(V::load(self.odd().add(at).cast())),
            ]
        }
    }

    /// [`Self::r16_prepared`] of the chunk at global `e` from blocks in the even/odd layout,
    /// lane by lane: for the chunks a kernel that reads its pairs from such blocks takes alone
    /// (a run's ends), not for loops.
    #[inline(always)]
    pub unsafe fn r16_even_odd_blocks(&self, e: u64) -> V::U {
        unsafe {
            let d = e.wrapping_sub(self.start) as usize;
            debug_assert!(V::RNG_BLOCK);
            debug_assert!(e.is_multiple_of(V::LANES as u64) && e < self.end && d < BLOCK);
            let (even, odd) = (self.bits, self.odd());
            arch::u32_vector::<V>(|l| {
                let i = d + l;
                *(if i.is_multiple_of(2) { even } else { odd }).add(i / 2)
            })
        }
    }

    /// In the even/odd layout, where the words of the block's odd elements start (a second
    /// moment reading its first moment's blocks: where the first moment's even ones do), kept
    /// in the place of the span cache, which block mode leaves unused: as a field of its own,
    /// the pointer changed the code LLVM made for AVX2's steps in element order (one more load
    /// per chunk; gungraun: all-bf16 AdamW +1.3%). Set by [`Self::use_even_odd_blocks`] or
    /// [`Self::share_even_odd_blocks_of`] before it is read.
    #[inline(always)]
    unsafe fn odd(&self) -> *const u32 {
        unsafe { self.span.as_ptr().cast::<*const u32>().read() }
    }

    /// Sets [`Self::odd`].
    #[inline(always)]
    fn set_odd(&mut self, odd: *const u32) {
        debug_assert!(V::RNG_BLOCK);
        // SAFETY: the span cache's place is at least a pointer's size and alignment (it holds
        // vectors), and block mode never reads it as a span cache.
        unsafe { self.span.as_mut_ptr().cast::<*const u32>().write(odd) }
    }

    /// Makes this stream's blocks take the even/odd layout ([`FillBlock`]), for a kernel
    /// that reads its chunks' bits in pairs in even/odd order ([`Self::pair_from_even_odd_blocks`])
    /// and those of any chunk alone through [`Self::r16_even_odd_blocks`], and prepares them with
    /// [`Self::prepare`] in that layout; before the first fill.
    #[inline(always)]
    pub fn use_even_odd_blocks(&mut self) {
        if V::RNG_BLOCK {
            debug_assert!(self.start == NO_BLOCK && self.partner.is_null());
            self.set_odd(self.bits.wrapping_add(ODD_WORDS));
        }
    }

    /// Makes this second moment's stream read the blocks of `first`, its first moment's (same
    /// tensor, step and elements; even/odd layout), with partners exchanged (SPEC.md §3.2): each
    /// even element's bits are its odd partner's, and the other way round, so the two vectors
    /// of a pair change places, and no block of this stream is filled or copied. `first` must be
    /// prepared for each element before this stream is ([`Self::prepare`]).
    #[inline(always)]
    pub fn share_even_odd_blocks_of(&mut self, first: &RoundingBits<V>) {
        if V::RNG_BLOCK {
            self.read_first_moments(first);
            // SAFETY: `first` is in the even/odd layout (above).
            self.bits = unsafe { first.odd() };
            self.set_odd(first.bits);
        }
    }

    /// Whether a backend can draw a 32-element group's bits in order, with no span cache
    /// ([`GroupBits::group_word`]): one vector of words per group, rounds inline.
    pub(crate) const IN_ORDER: bool = !V::RNG_BLOCK && GroupBits::<V>::PER_GROUP == 1;

    /// Readies [`Self::next_pair`] for the groups from element `e`, a multiple of 32 (see
    /// [`GroupBits::begin_groups`]).
    #[inline(always)]
    pub unsafe fn begin_pairs(&mut self, e: u64) {
        unsafe {
            debug_assert!(Self::IN_ORDER && e.is_multiple_of(32));
            self.span.assume_init_mut().begin_groups(e >> 5);
        }
    }

    /// The bits of the two chunks (in the low halves) of the group `d` is at, as [`Self::r16`]
    /// of each; `d` was made with this stream's seed. As the stream's counters give them: for a
    /// second moment's stream ([`BitsCoord::swap_pairs`]) the caller exchanges partners
    /// ([`partners`]).
    #[inline(always)]
    pub unsafe fn next_pair(&self, d: &PairDraw<V>) -> [V::U; 2] {
        unsafe {
            let w = self.span.assume_init_ref().group_word(d);
            [V::and_u(w, V::splat_u(0xFFFF)), V::shr::<16>(w)]
        }
    }

    /// [`Self::next_pair`] in even/odd order ([`crate::arch::Simd::even_odd_halves`]): the bits
    /// of the pair's even elements, then of its odd ones (partners not exchanged, as there).
    #[inline(always)]
    pub unsafe fn next_pair_even_odd(&self, d: &PairDraw<V>) -> [V::U; 2] {
        unsafe { V::even_odd_halves(self.span.assume_init_ref().group_word(d)) }
    }

    /// In block mode, fills the block holding element `e` unless it is the one cached: from here
    /// to the block's end, [`Self::r16_prepared`] reads its bits, or, in the even/odd layout
    /// (`even_odd`, [`Self::use_even_odd_blocks`]), [`Self::pair_from_even_odd_blocks`] and
    /// [`Self::r16_even_odd_blocks`].
    #[inline(always)]
    pub unsafe fn prepare(&mut self, e: u64, even_odd: bool) {
        unsafe {
            if V::RNG_BLOCK && e.wrapping_sub(self.start) >= BLOCK as u64 {
                self.refill(e, even_odd);
            }
        }
    }

    /// The stream these bits are drawn from.
    #[inline(always)]
    pub fn coord(&self) -> BitsCoord {
        self.coord
    }

    /// Elements per block in block mode: a kernel that calls [`Self::prepare`] does so at each
    /// multiple of it.
    pub const BLOCK: u64 = BLOCK as u64;

    /// Makes this second moment's stream read `first`'s blocks, its first moment's (same tensor,
    /// step and elements), and fill none: in element order the loop reads `first`'s words and
    /// exchanges partners itself (SPEC.md §3.2), so this stream's own words are never read.
    /// `first` must be prepared for each element before this stream is ([`Self::prepare`]).
    #[inline(always)]
    pub fn read_first_moments(&mut self, first: &RoundingBits<V>) {
        if V::RNG_BLOCK {
            debug_assert!(self.coord.swap_pairs && first.end == self.end);
            debug_assert!(self.start == NO_BLOCK && self.partner.is_null());
            self.partner = READS_FIRST_MOMENTS;
            self.bits = first.bits;
        }
    }

    /// Makes this second moment's stream copy each block from `first`'s, its first moment's
    /// (same tensor, step and elements), with partners exchanged (SPEC.md §3.2), where the
    /// backend draws a block at a time: a load, a shuffle and a store per vector, where the
    /// rounds took five AES instructions per block. `first` must be prepared for each element
    /// before this stream is, and neither filled yet ([`Self::prepare`]). The copy runs in the
    /// out-of-line fill: called between the pieces of the optimizers' runs, it changed the code
    /// LLVM made for LAMB's loops, which draw no bits (gungraun, AVX2: +6-8% instructions).
    #[inline(always)]
    pub fn copy_blocks_of(&mut self, first: &RoundingBits<V>) {
        if V::RNG_BLOCK {
            debug_assert!(self.coord.swap_pairs && first.end == self.end);
            debug_assert!(self.start == NO_BLOCK);
            self.partner = first.bits;
        }
    }

    /// Fills the block holding element `e`, up to the chunk holding `end - 1`, in the even/odd
    /// layout or not.
    #[inline(always)]
    unsafe fn refill(&mut self, e: u64, even_odd: bool) {
        unsafe {
            // Not through `prepare_part`: so, LLVM's code for the conversions that read blocks
            // took 4-13% more instructions (gungraun, AVX2).
            let start = e - e % BLOCK as u64;
            let n = (self.end.min(start + BLOCK as u64) - start)
                .next_multiple_of(V::LANES as u64)
                .min(BLOCK as u64);
            let first = self.start == NO_BLOCK;
            if first {
                (*self.block).coord.write(self.coord);
                (*self.block).partner.write(self.partner);
                (*self.block).even_odd.write(even_odd);
            }
            V::fill_block(self.block, start, 0, n as usize, first);
            self.start = start;
        }
    }

    /// In block mode, makes the block holding element `e` the one [`Self::r16_prepared`] and its
    /// kin read, without filling it: for a kernel that made its bits ahead
    /// ([`Self::fill_group_ring`]).
    #[inline(always)]
    pub fn hold_block(&mut self, e: u64) {
        if V::RNG_BLOCK {
            self.start = e - e % BLOCK as u64;
        }
    }

    /// In block mode, the bits of the 32 elements from `e` (a multiple of 32, after a first fill
    /// by [`Self::prepare_part`]) into their places in the block, taken as a ring: element `e`'s
    /// at `e % BLOCK`, whichever block is held.
    #[inline(always)]
    pub unsafe fn fill_group_ring(&mut self, e: u64, even_odd: bool) {
        unsafe {
            if !V::RNG_BLOCK {
                return;
            }
            debug_assert!(e.is_multiple_of(32) && self.start != NO_BLOCK);
            if e >= self.end {
                return;
            }
            if let Some(place) = self.ring_place(e, 32) {
                let words = place.rng.group_words(e);
                place.store(&words[..GroupBits::<V, true>::PER_GROUP], even_odd);
            }
        }
    }

    /// Elements of a span: what [`Self::fill_span_ring`] makes in one go.
    pub const SPAN_ELEMENTS: u64 = 32 * GroupBits::<V, true>::SPAN;

    /// As [`Self::fill_group_ring`], for the span of [`Self::SPAN_ELEMENTS`] from `e` (a multiple
    /// of it): all its counter vectors' rounds interleaved, as the fill runs them, and one test
    /// of the stream's constants per span. Words past the stream's end go to places of the ring
    /// the loop has read and no element reads.
    #[inline(always)]
    pub unsafe fn fill_span_ring(&mut self, e: u64, even_odd: bool) {
        unsafe {
            if !V::RNG_BLOCK {
                return;
            }
            debug_assert!(e.is_multiple_of(Self::SPAN_ELEMENTS) && self.start != NO_BLOCK);
            if let Some(place) = self.ring_place(e, Self::SPAN_ELEMENTS as usize) {
                let words = place.rng.span_words(e / 32);
                place.store(&words[..V::RNG_VECTORS], even_odd);
            }
        }
    }

    /// Where the words of the `n` elements from `e` go in the held block, taken as a ring, if this
    /// stream makes them: not a second moment that reads its first moment's block, nor a stream
    /// that copies its partner's words (which this copies).
    #[inline(always)]
    unsafe fn ring_place(&mut self, e: u64, n: usize) -> Option<RingPlace<'_, V>> {
        unsafe {
            let block = self.block;
            let partner = (*block).partner.assume_init();
            if partner == READS_FIRST_MOMENTS {
                return None;
            }
            let at = (e % BLOCK as u64) as usize;
            if !partner.is_null() {
                copy_partners(block, partner, at, n);
                return None;
            }
            Some(RingPlace {
                rng: (*block).rng.assume_init_mut(),
                dst: (&raw mut (*block).bits).cast::<u32>(),
                at,
            })
        }
    }

    /// In block mode, whether the block holding element `e` is the one cached.
    #[inline(always)]
    pub fn holds(&self, e: u64) -> bool {
        V::RNG_BLOCK && e.wrapping_sub(self.start) < BLOCK as u64
    }

    /// In block mode, fills the bits of the elements from `e` (a multiple of 32) to `stop` of
    /// the block holding `e`, no further than the block's end and the chunk holding `end - 1`,
    /// and makes that block the cached one: the first fill of a kernel that makes the rest of
    /// its bits in its loop ([`Self::fill_group_ring`]).
    #[inline(always)]
    pub unsafe fn prepare_part(&mut self, e: u64, stop: u64, even_odd: bool) {
        unsafe {
            if !V::RNG_BLOCK {
                return;
            }
            let start = e - e % BLOCK as u64;
            let first = self.start == NO_BLOCK;
            if first {
                (*self.block).coord.write(self.coord);
                (*self.block).partner.write(self.partner);
                (*self.block).even_odd.write(even_odd);
            }
            let to = (stop.min(self.end).min(start + BLOCK as u64) - start)
                .next_multiple_of(V::LANES as u64)
                .min(BLOCK as u64);
            let from = e - start;
            if to > from {
                V::fill_block(
                    self.block,
                    start,
                    from as usize,
                    (to - from) as usize,
                    first,
                );
            }
            self.start = start;
        }
    }
}

/// A stream's generator and the place in its block's ring of the words it makes next
/// ([`RoundingBits::fill_group_ring`], [`RoundingBits::fill_span_ring`]).
struct RingPlace<'a, V: Simd> {
    rng: &'a mut GroupBits<V, true>,
    dst: *mut u32,
    at: usize,
}

impl<V: Simd> RingPlace<'_, V> {
    /// Stores output word vectors `words`, as [`GroupBits::span_words`] gives them, from the
    /// place on.
    #[inline(always)]
    unsafe fn store(self, words: &[V::U], even_odd: bool) {
        let (rng, dst, at) = (self.rng, self.dst, self.at as isize);
        unsafe {
            if even_odd {
                FillBlock::<V, true> { rng, dst }.store_words(at, words)
            } else {
                FillBlock::<V, false> { rng, dst }.store_words(at, words)
            }
        }
    }
}

/// Words `from .. from + n` (multiples of the lane count) of a first moment's bits block `src`
/// into the block `dst` with partners exchanged: the second moment's block (SPEC.md §3.2).
#[inline(always)]
pub(crate) unsafe fn copy_partners<V: Simd>(
    dst: *mut BitsBlock<V>,
    src: *const u32,
    from: usize,
    n: usize,
) {
    unsafe {
        debug_assert!(n.is_multiple_of(V::LANES) && from.is_multiple_of(V::LANES));
        debug_assert!(from + n <= BLOCK);
        let dst = (&raw mut (*dst).bits).cast::<u32>();
        for i in (from..from + n).step_by(V::LANES) {
            let w = V::to_bits(V::load(src.add(i).cast()));
            V::store(dst.add(i).cast(), V::from_bits(V::swap_pairs(w)));
        }
    }
}

/// A second moment's bits for a pair of chunks from its first moment's, `pair` as
/// [`RoundingBits::next_pair`] gives them (in even/odd order where `even_odd`): each element takes
/// its partner's, `e ^ 1` (SPEC.md §3.2). In even/odd order the partners are the two vectors'
/// lanes of one index, so this is a swap of the vectors, with no instruction.
#[inline(always)]
pub(crate) unsafe fn partners<V: Simd>(pair: [V::U; 2], even_odd: bool) -> [V::U; 2] {
    unsafe {
        if even_odd {
            [pair[1], pair[0]]
        } else {
            [V::swap_pairs(pair[0]), V::swap_pairs(pair[1])]
        }
    }
}

/// Checks of the vector ARS fill against the reference, run by `tests/internals.rs` through
/// `halfstep::fuzzing::internals` (the span cache is private).
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;
    use crate::reference::ars::ars4x32_5;
    use crate::reference::bits::{MAX_ELEMENT_INDEX, block_counter, element_bits};

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

    /// The streams the fill checks take: extreme and ordinary coordinates, and a second
    /// moment's stream.
    fn check_coords() -> [BitsCoord; 4] {
        let third = BitsCoord {
            seed: 0x0123_4567_89AB_CDEF,
            step: 7,
            stream_word: 0x31,
            replica_slot: 3,
            swap_pairs: false,
        };
        [
            BitsCoord {
                seed: 0,
                step: 0,
                stream_word: 0,
                replica_slot: 0,
                swap_pairs: false,
            },
            BitsCoord {
                seed: u64::MAX,
                step: u32::MAX,
                stream_word: 0xDEAD_BEEF,
                replica_slot: 0xFFFF,
                swap_pairs: false,
            },
            third,
            // A second moment's stream: partners exchanged.
            BitsCoord {
                swap_pairs: true,
                ..third
            },
        ]
    }

    /// [`GroupBits`] on backend `V`, kept as words and split into chunks, against the reference
    /// (block by block, and element by element), for spans whose blocks carry into counter word 1
    /// and keys that wrap. One `GroupBits` per form fills every span in turn, so its cached
    /// `CounterConsts` must follow counter word 1 as it changes (0 → 1 → 0x3FFF → 0) from span to
    /// span. And [`RoundingBits`] (inline or block, as the backend draws them) element by element,
    /// chunk after chunk across block boundaries, from a start inside a block up to an end inside
    /// one (its last block is filled only that far).
    #[inline(always)]
    unsafe fn check_fill<V: Simd>(name: &str) {
        let coords = check_coords();
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
                // As words: every block of the span, its four words in four consecutive lanes
                // (partners exchanged for a second moment's stream).
                let got = unsafe { lanes_of::<V>(&words.bits) };
                for block in 0..4 * span as usize {
                    let out = ars4x32_5(
                        block_counter(&coord, group * 4 + block as u64),
                        seed_key(coord.seed),
                    );
                    let want: [u32; 4] =
                        core::array::from_fn(|w| out[if coord.swap_pairs { w ^ 1 } else { w }]);
                    assert_eq!(
                        got[4 * block..4 * block + 4],
                        want,
                        "{name} words: {coord:?} group {group} block {block}"
                    );
                }
                // The kernels' bits over three blocks and a bit, from the span's first element
                // and from a chunk inside a block (the last span: as near the end as that fits).
                // Under Miri, which runs the portable backend (inline bits: no blocks), two spans
                // from inside the first and the last span of the first coordinates: the reference
                // computes a whole ARS block per element, slow there.
                let miri_skips = coord != coords[0] || !(group == 0 || group >= 1 << 45);
                if cfg!(miri) && miri_skips {
                    continue;
                }
                let l = V::LANES as u64;
                let length = if cfg!(miri) {
                    2 * 32 * span
                } else {
                    3 * BLOCK as u64
                };
                let start = (group * 32).min(MAX_ELEMENT_INDEX - 4 * BLOCK as u64);
                let firsts = if cfg!(miri) {
                    &[start + 3 * l][..]
                } else {
                    &[start, start + 3 * l][..]
                };
                for &first in firsts {
                    let end = first + length + 5 * l + 1;
                    let mut block = BitsBlock::<V>::new();
                    let mut bits = unsafe { RoundingBits::<V>::new(coord, end, &mut block) };
                    let mut e = first;
                    while e < end {
                        let got = unsafe { arch::u32_lanes::<V>(bits.r16(e)) };
                        for (i, got) in got[..V::LANES].iter().enumerate() {
                            let want = u32::from(element_bits(&coord, e + i as u64));
                            assert_eq!(
                                *got, want,
                                "{name} kernel bits: {coord:?} element {e} + {i}"
                            );
                        }
                        e += l;
                    }
                }
            }
        }
    }

    /// The bulk fill with its values packed both ways ([`fill_bits_packed`]) against the
    /// reference, on every backend: every stream of [`check_coords`], from a span's start and
    /// from inside a chunk, over lengths that end inside a chunk, a group and a span.
    #[inline(always)]
    unsafe fn check_fill_bits<V: Simd>(name: &str) {
        let coords = check_coords();
        let span = 32 * GroupBits::<V, true>::SPAN as usize;
        let l = V::LANES;
        // Under Miri (the portable backend), two lengths of one stream: the reference computes a
        // whole ARS block per element, slow there.
        let (streams, lengths) = if cfg!(miri) {
            (&coords[..1], vec![3 * l + 1, span + 33])
        } else {
            (&coords[..], vec![0, 1, l - 1, 31, 33, 2 * span + 5 * l + 3])
        };
        for &coord in streams {
            for first in [7 * span as u64, 7 * span as u64 + 3] {
                for &n in &lengths {
                    let want: Vec<u16> = (0..n)
                        .map(|i| element_bits(&coord, first + i as u64))
                        .collect();
                    let mut got = vec![0u16; n];
                    unsafe { fill_bits_packed::<V, false>(&coord, first, &mut got) };
                    assert_eq!(got, want, "{name} fill_bits: {coord:?} from {first}, {n}");
                    got.fill(0);
                    unsafe { fill_bits_packed::<V, true>(&coord, first, &mut got) };
                    assert_eq!(
                        got, want,
                        "{name} fill_bits beside the rounds: {coord:?} from {first}, {n}"
                    );
                }
            }
        }
    }

    /// The block fill in both layouts ([`FillBlock`]) against the reference, on every backend
    /// (the kernels fill blocks only on AVX2): every stream of [`check_coords`], from a block's
    /// start, over a whole block and over a part that ends one chunk past a group.
    #[inline(always)]
    unsafe fn check_block_layouts<V: Simd>(name: &str) {
        let coords = check_coords();
        /// Elements `base .. base + n` of `coord` filled into a block in one layout.
        #[inline(always)]
        unsafe fn filled<V: Simd, const EVEN_ODD: bool>(
            coord: BitsCoord,
            base: u64,
            n: usize,
        ) -> [u32; BLOCK] {
            let mut dst = [0u32; BLOCK];
            let mut rng = unsafe { GroupBits::<V, true>::new_for_blocks(coord, EVEN_ODD) };
            let mut fill = FillBlock::<V, EVEN_ODD> {
                rng: &mut rng,
                dst: dst.as_mut_ptr(),
            };
            unsafe { run_chunks::<V, _>(base, n, &mut fill) };
            dst
        }
        let base = 5 * BLOCK as u64;
        let n_cut = (3 * 32 + V::LANES).min(BLOCK);
        // Under Miri (the portable backend), the cut part of two streams: the reference computes
        // a whole ARS block per element, slow there.
        let (streams, sizes) = if cfg!(miri) {
            (&coords[2..], &[n_cut][..])
        } else {
            (&coords[..], &[BLOCK, n_cut][..])
        };
        for &coord in streams {
            for &n in sizes {
                let want = |i: usize| u32::from(element_bits(&coord, base + i as u64));
                let in_order = unsafe { filled::<V, false>(coord, base, n) };
                for (i, got) in in_order[..n].iter().enumerate() {
                    assert_eq!(
                        *got,
                        want(i),
                        "{name} block in order: {coord:?} {n} element {i}"
                    );
                }
                let even_odd = unsafe { filled::<V, true>(coord, base, n) };
                for i in 0..n {
                    let got = even_odd[even_odd_word(i)];
                    assert_eq!(
                        got,
                        want(i),
                        "{name} block even/odd: {coord:?} {n} element {i}"
                    );
                }
            }
        }
    }

    /// Runs the check `$check::<V>(name)` on every backend this CPU runs, inside its target
    /// features (the others are skipped with a line on stderr); AVX2 with both forms of the AES
    /// rounds.
    macro_rules! on_every_backend {
        ($($check:ident)::+) => {{
            unsafe { $($check)::+::<crate::arch::portable::Portable>("portable") };
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,f16c,aes")]
                unsafe fn avx2() {
                    unsafe { $($check)::+::<crate::arch::x86_64::avx2::Avx2>("avx2") }
                }
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,aes,vaes")]
                unsafe fn avx512() {
                    unsafe { $($check)::+::<crate::arch::x86_64::avx512::Avx512>("avx512") }
                }
                use crate::arch::x86_64::set_vaes_rounds;
                use crate::cpu::Backend;
                if Backend::Avx2.is_available() {
                    // 128-bit AES-NI, and 256-bit VAES where the CPU has it.
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
                    unsafe { $($check)::+::<crate::arch::aarch64::neon::Neon>("neon") }
                }
                if crate::cpu::Backend::Neon.is_available() {
                    unsafe { neon() }
                } else {
                    eprintln!("skipping neon: this CPU lacks it");
                }
            }
        }};
    }

    /// The span caches on every backend this CPU runs.
    pub(crate) fn fill_matches_the_reference_on_every_backend() {
        on_every_backend!(check_fill);
        on_every_backend!(check_fill_bits);
        on_every_backend!(check_block_layouts);
    }

    /// The even/odd forms of a pair of chunks on every backend this CPU runs.
    pub(crate) fn even_odd_forms_on_every_backend() {
        on_every_backend!(crate::arch::checks::check_even_odd);
    }

    /// `Simd::sqrt_off_divider` against `Simd::sqrt` on every backend this CPU runs.
    pub(crate) fn square_roots_on_every_backend() {
        on_every_backend!(crate::arch::checks::check_sqrt_off_divider);
    }
}
