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
        while e < last_full_end {
            body.full(off, e);
            off += V::LANES as isize;
            e += l;
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

    /// Runs Philox4x32-10 on the 16 blocks of `group`.
    #[inline(always)]
    unsafe fn fill(&mut self, group: u64) {
        unsafe {
            let nb = 16 / V::LANES;
            let first_block = group * 16;
            let c1 = V::splat_u(
                ((first_block >> 32) as u32) | (u32::from(self.coord.replica_slot) << 16),
            );
            let c2 = V::splat_u(self.coord.step);
            let c3 = V::splat_u(self.coord.stream_word);
            let (m0, m1) = (V::splat_u(M0), V::splat_u(M1));
            for b in 0..nb {
                // The 16 blocks of a group differ only in their low 4 bits: no carry into word 1.
                let lo = (first_block as u32).wrapping_add((b * V::LANES) as u32);
                let mut c = [V::add_u(V::splat_u(lo), V::iota()), c1, c2, c3];
                let mut k = self.key;
                for r in 0..10 {
                    if r > 0 {
                        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
                    }
                    let (hi0, lo0) = V::mul_hi_lo(c[0], m0);
                    let (hi1, lo1) = V::mul_hi_lo(c[2], m1);
                    c = [
                        V::xor_u(V::xor_u(hi1, c[1]), V::splat_u(k[0])),
                        lo1,
                        V::xor_u(V::xor_u(hi0, c[3]), V::splat_u(k[1])),
                        lo0,
                    ];
                }
                self.words[4 * b..4 * b + 4].copy_from_slice(&c);
            }
            self.group = group;
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
