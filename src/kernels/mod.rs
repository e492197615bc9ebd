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

pub(crate) mod convert;
pub(crate) mod optim;
pub(crate) mod quant;
pub(crate) mod round;

use crate::arch::{MAX_LANES, Simd};
use crate::reference::philox::{BitsCoord, M0, M1, W0, W1, seed_key};
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
        let mut off = (first_full - base) as isize;
        let mut e = first_full;
        // Two copies of the loop: a test per chunk cost two instructions per chunk where
        // prefetching is off (LLVM did not unswitch it), and only this loop, not the whole
        // kernel, is worth duplicating.
        if body.prefetching() {
            while e < last_full_end {
                body.prefetch(off);
                body.full(off, e);
                off += V::LANES as isize;
                e += l;
            }
        } else {
            while e < last_full_end {
                body.full(off, e);
                off += V::LANES as isize;
                e += l;
            }
        }
        if last_full_end < end {
            body.partial(&chunk(last_full_end));
        }
    }
}

/// The Philox output words of one 128-element group of one stream, cached until the group changes.
pub(crate) struct GroupBits<V: Simd> {
    coord: BitsCoord,
    key: [u32; 2],
    group: u64,
    /// `words[4 * b + w]`: output word `w` of block vector `b` (blocks `16 * group + b * LANES + lane`).
    words: [V::U; 16],
}

impl<V: Simd> GroupBits<V> {
    #[inline(always)]
    pub unsafe fn new(coord: BitsCoord) -> Self {
        GroupBits {
            coord,
            key: seed_key(coord.seed),
            group: u64::MAX,
            words: [unsafe { V::splat_u(0) }; 16],
        }
    }

    /// Runs Philox4x32-10 on the 16 blocks of `group`, in the layout the ISA prefers.
    #[inline(always)]
    unsafe fn fill(&mut self, group: u64) {
        unsafe {
            if V::PHILOX_EVEN_LANES {
                self.fill_even(group)
            } else {
                self.fill_lanes(group)
            }
            self.group = group;
        }
    }

    /// The counter words 1..3 of every block of `group` (word 0 is the block's low 32 bits).
    #[inline(always)]
    unsafe fn counter_words(&self, group: u64) -> [V::U; 3] {
        unsafe {
            // The 16 blocks of a group differ only in their low 4 bits: no carry into word 1.
            let first_block = group * 16;
            let c1 = (first_block >> 32) as u32 | u32::from(self.coord.replica_slot) << 16;
            [
                V::splat_u(c1),
                V::splat_u(self.coord.step),
                V::splat_u(self.coord.stream_word),
            ]
        }
    }

    /// One block per lane: `words[4 * b + w]` lane `l` is word `w` of block `16 * group + b * LANES + l`.
    #[inline(always)]
    unsafe fn fill_lanes(&mut self, group: u64) {
        unsafe {
            let [c1, c2, c3] = self.counter_words(group);
            let (m0, m1) = (V::splat_u(M0), V::splat_u(M1));
            for b in 0..16 / V::LANES {
                let lo = ((group * 16) as u32).wrapping_add((b * V::LANES) as u32);
                let mut c = [[V::add_u(V::splat_u(lo), V::iota()), c1, c2, c3]];
                let mut k = self.key;
                for r in 0..10 {
                    if r > 0 {
                        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
                    }
                    let key = [V::splat_u(k[0]), V::splat_u(k[1])];
                    philox_round::<V, false, 1>(&mut c, key, [m0, m1]);
                }
                self.words[4 * b..4 * b + 4].copy_from_slice(&c[0]);
            }
        }
    }

    /// The same words as [`Self::fill_lanes`], computed one block per even lane: two vectors `x`,
    /// `y` each carry `LANES / 2` blocks, and [`Simd::pack_even`] joins them at the end. The odd
    /// lanes carry garbage that never reaches an even lane (the multiply reads the even lanes,
    /// the XORs are lane-wise).
    #[inline(always)]
    unsafe fn fill_even(&mut self, group: u64) {
        unsafe {
            let [c1, c2, c3] = self.counter_words(group);
            let (m0, m1) = (V::splat_u(M0), V::splat_u(M1));
            // Lanes 2j and 2j + 1 both get j; the even one is the block's.
            let pairs = V::shr::<1>(V::iota());
            for b in 0..16 / V::LANES {
                let lo = ((group * 16) as u32).wrapping_add((b * V::LANES) as u32);
                let x = [V::add_u(V::splat_u(lo), pairs), c1, c2, c3];
                let y0 = V::add_u(V::splat_u(lo + (V::LANES / 2) as u32), pairs);
                let mut xy = [x, [y0, c1, c2, c3]];
                let mut k = self.key;
                for r in 0..10 {
                    if r > 0 {
                        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
                    }
                    let key = [V::splat_u(k[0]), V::splat_u(k[1])];
                    philox_round::<V, true, 2>(&mut xy, key, [m0, m1]);
                }
                let [x, y] = xy;
                let words = &mut self.words[4 * b..4 * b + 4];
                for (out, (x, y)) in words.iter_mut().zip(x.into_iter().zip(y)) {
                    *out = V::pack_even(x, y);
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
            let group = e >> 7;
            if group != self.group {
                self.fill(group);
            }
            let nb = 16 / V::LANES;
            let c = (e & 127) as usize / V::LANES;
            let (k, b) = (c / nb, c % nb);
            let w = self.words[4 * b + (k >> 1)];
            if k & 1 == 1 {
                V::shr::<16>(w)
            } else {
                V::and_u(w, V::splat_u(0xFFFF))
            }
        }
    }
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
            let ((hi0, lo0), (hi1, lo1)) = if EVEN {
                (V::mul_hi_lo_even(c[0], m[0]), V::mul_hi_lo_even(c[2], m[1]))
            } else {
                (V::mul_hi_lo(c[0], m[0]), V::mul_hi_lo(c[2], m[1]))
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::philox::{block_counter, philox4x32_10};

    /// Both Philox layouts of [`GroupBits`] on backend `V` against the reference, word by word,
    /// for groups whose blocks carry into the counter's high words and keys that wrap.
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
        let groups = [0u64, 1, 0x0FFF_FFFF, 0x1000_0000, (1 << 44) - 1];
        for coord in coords {
            for group in groups {
                let mut lanes = unsafe { GroupBits::<V>::new(coord) };
                let mut even = unsafe { GroupBits::<V>::new(coord) };
                unsafe {
                    lanes.fill_lanes(group);
                    even.fill_even(group);
                }
                for (layout, bits) in [("lanes", &lanes), ("even", &even)] {
                    let mut got = [0u32; 16 * MAX_LANES];
                    for (i, w) in bits.words.iter().enumerate() {
                        unsafe {
                            V::store(got[i * V::LANES..].as_mut_ptr().cast(), V::from_bits(*w))
                        };
                    }
                    for block in 0..16 {
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

    #[test]
    fn philox_layouts_match_the_reference_on_every_backend() {
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
                println!("skipping avx2: this CPU lacks it");
            }
            if Backend::Avx512.is_available() {
                unsafe { avx512() }
            } else {
                println!("skipping avx512: this CPU lacks it");
            }
        }
        #[cfg(target_arch = "aarch64")]
        unsafe {
            check_layouts::<crate::arch::aarch64::neon::Neon>("neon")
        };
    }
}
