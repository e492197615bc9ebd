//! The four optimizers (SPEC.md §5–7), each written once, generic over the lane type: here the
//! storage access every buffer goes through (`Access`, one type per storage kind, and `Layout`, the
//! kinds of one call's buffers) and the element-wise driver; one file per optimizer below.

use super::Simd;
use super::round::{canonicalize, to_bf16, to_bf16_high};
use super::{
    BitsBlock, Chunk, ChunkBody, RoundingBits, SEQ_GROUPS, Stage, full_run_plain, run_chunks,
    stage_in, stage_out,
};
use crate::cpu::{Ahead, StepBuffers};
use crate::reference::round::Rounding;
use crate::rng::{Purpose, StepContext, TensorStream, coord};
use crate::storage::{Grads, State, Weights};

/// Runs `$body` with `$i` bound to 0, 1, … `$g - 1` (`$g` at most 4, known at compile time),
/// unrolled in the source. A `for` loop over a group was left rolled where the body was large
/// (LAMB, Adam), with the group's arrays in memory: LAMB at 64K elements ran 30% slower on AVX2.
macro_rules! unrolled {
    ($g:expr, $i:ident => $body:block) => {{
        const { assert!($g <= 4) };
        if 0 < $g {
            let $i: usize = 0;
            $body
        }
        if 1 < $g {
            let $i: usize = 1;
            $body
        }
        if 2 < $g {
            let $i: usize = 2;
            $body
        }
        if 3 < $g {
            let $i: usize = 3;
            $body
        }
    }};
}

/// One buffer as raw pointers to element 0 of the slice, its kind known only at run time (the
/// storage kinds a caller passed). Gradients are never written.
#[derive(Clone, Copy)]
enum Buf {
    F32(*mut f32),
    Split(*mut u16, *mut u16),
    Bf16(*mut u16, Rounding),
}

impl Buf {
    fn weights(w: &mut Weights<'_>) -> Buf {
        match w {
            Weights::F32(s) => Buf::F32(s.as_mut_ptr()),
            Weights::Split { top, trail } => {
                Buf::Split(top.as_mut_ptr().cast(), trail.as_mut_ptr())
            }
            Weights::Bf16(s, r) => Buf::Bf16(s.as_mut_ptr().cast(), *r),
        }
    }

    fn state(s: &mut State<'_>) -> Buf {
        match s {
            State::F32(s) => Buf::F32(s.as_mut_ptr()),
            State::Bf16(s, r) => Buf::Bf16(s.as_mut_ptr().cast(), *r),
        }
    }

    /// Read-only view of the gradients (the pointer is never written through).
    fn grads(g: &Grads<'_>) -> Buf {
        match g {
            Grads::F32(s) => Buf::F32(s.as_ptr().cast_mut()),
            Grads::Bf16(s) => Buf::Bf16(s.as_ptr().cast_mut().cast(), Rounding::NearestEven),
        }
    }
}

/// How one buffer of a chunk is read and written. Implemented by one type per storage kind, so
/// that the hot storage combinations compile to a loop with no per-chunk `match` (see
/// `drive_layouts!` below), by [`Absent`] for a buffer the call does not have, and by [`Buf`],
/// which picks the kind at run time for every other combination.
trait Access<V: Simd>: Copy {
    /// Whether the call has this buffer (false only for [`Absent`]). The optimizers read it
    /// instead of their `use_momentum` / `amsgrad` flags, which validation ties to the buffer's
    /// presence, so the branch is decided at compile time.
    const PRESENT: bool = true;

    /// Whether the kind is f32 (or absent): decides the layout's prefetch distance.
    const WIDE: bool = false;

    /// Whether calls with this kind of weights load and store their chunks in groups
    /// (`Driver::full_run`: why): split weights and bf16 weights rounded to nearest (in groups,
    /// SGD's took 0.79x the time on AVX-512 and 0.91x on AVX2, Zen 4, 64K); grouped, all-f32
    /// steps lost time in cache and gained only where their buffers collided (docs/DESIGN.md).
    /// Layouts whose stores draw their bits in pairs run in groups whatever their weights
    /// (`Driver::PAIRED_DRAWS`).
    const GROUPED: bool = false;

    /// Whether stores must hold canonical NaNs (SPEC.md §5): every kind the caller passes. Not
    /// the library's own scratch, nor an absent buffer.
    const CANONICAL: bool = true;

    /// Whether the kind can round stochastically (bf16, or the run-time kind): the driver then
    /// fills its random bits block by block (`Driver::full_run`).
    const MAY_DRAW_BITS: bool = false;

    /// Whether the kind is known only at run time (the run-time kind, [`Buf`]).
    const RUN_TIME: bool = false;

    /// Whether every store of the kind rounds stochastically (bf16 SR, a constant of the
    /// layout), so that its bits may come from the driver (`Driver::SHARES_FIRST_BITS`), whose
    /// stores then honour them: not the run-time kind.
    const ALWAYS_DRAWS: bool = false;

    /// Whether a stochastic store of a pair of chunks ([`Access::store_group`]) takes the bits
    /// the driver has drawn for the group, where the backend pairs 16-bit stores: bf16 only.
    const PAIRED_DRAWS: bool = false;

    /// Whether the kind loads and stores a pair of chunks in even/odd order
    /// ([`Access::load_even_odd`]): the 16-bit kinds, an absent buffer, and f32 (at a cost:
    /// [`Access::EVEN_ODD_PERMUTES`]).
    const EVEN_ODD: bool = false;

    /// Whether the kind's even/odd order costs a permute per vector each way (f32: the pair's
    /// two lines split into even and odd lanes), where the 16-bit kinds' costs nothing over
    /// element order. The driver takes the order with such a buffer only where the divider
    /// hides the permutes (`Driver::EVEN_ODD`).
    const EVEN_ODD_PERMUTES: bool = false;

    /// Whether this buffer's stores draw random bits.
    #[inline(always)]
    fn draws_bits(&self) -> bool {
        false
    }

    /// This kind's view of `b`, or `None` when `b` is of another kind (or absent / present
    /// where this one is not).
    fn from_buf(b: Option<Buf>) -> Option<Self>;

    /// `LANES` elements from local index `off`, widened to f32 (exact).
    unsafe fn load(&self, off: isize) -> V::F;

    /// [`Access::load`] of `G` consecutive chunks from `off`: chunk by chunk, but for split
    /// weights all trails before all tops (`Driver::full_run`: why).
    #[inline(always)]
    unsafe fn load_group<const G: usize>(&self, off: isize) -> [V::F; G] {
        unsafe { load_chunks::<V, Self, G>(self, off) }
    }

    /// The bits `v` is stored as (narrowed for bf16); `rng` supplies the random bits of the chunk
    /// at global index `e`, drawn only for stochastic rounding. By default the full f32 bits (f32
    /// and split buffers). NaNs are already canonical: the driver's `process` canonicalises before storing.
    #[inline(always)]
    unsafe fn encode(&self, v: V::F, _rng: &mut RoundingBits<V>, _e: u64) -> V::U {
        unsafe { V::to_bits(v) }
    }

    /// What reading the buffer back would give after storing `v`, whose NaNs must be canonical
    /// where the kind may be bf16 ([`Access::MAY_DRAW_BITS`]); f32 kinds return `v` as it came.
    /// LAMB, the one user, canonicalises first, once per chunk for both moments: the rounding
    /// then needs no NaN lanes of its own. A stochastic rounding takes the bits `drawn` where the
    /// driver drew them for the chunk's store ([`RoundingBits::next_pair`]), so both see the same.
    #[inline(always)]
    unsafe fn as_stored(
        &self,
        v: V::F,
        _rng: &mut RoundingBits<V>,
        _e: u64,
        _drawn: Option<V::U>,
    ) -> V::F {
        v
    }

    /// Stores `v` (NaNs already canonical where [`Access::CANONICAL`]).
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut RoundingBits<V>, e: u64);

    /// Stores `G` consecutive chunks, `vs[i]` at local index `off + i * LANES` (global
    /// `e + i * LANES`): chunk by chunk, but for split weights all trails before all tops
    /// (`Driver::full_run`: why). A stochastic store of a pair of chunks takes the bits `drawn`
    /// where the driver has drawn them ([`RoundingBits::next_pair`]).
    #[inline(always)]
    unsafe fn store_group<const G: usize>(
        &self,
        off: isize,
        vs: &[V::F; G],
        rng: &mut RoundingBits<V>,
        e: u64,
        _drawn: Option<[V::U; 2]>,
    ) {
        unsafe { store_chunks::<V, Self, G>(self, off, vs, rng, e) }
    }

    /// The two chunks from `off` in even/odd order ([`crate::arch::Simd::load_u16_high_even_odd`]).
    /// Called only where [`Access::EVEN_ODD`], for a buffer the op reads (not [`KeptBuf`]).
    #[inline(always)]
    unsafe fn load_even_odd(&self, _off: isize) -> [V::F; 2] {
        unreachable!("load_even_odd of a kind without even/odd loads")
    }

    /// Stores the two chunks `vs` from `off` (global `e`), given in even/odd order; a stochastic
    /// store takes the bits `drawn` for them in the same order where the driver drew them, else
    /// `rng`'s ([`RoundingBits::for_rounding_even_odd`]). Called only where [`Access::EVEN_ODD`].
    #[inline(always)]
    unsafe fn store_even_odd(
        &self,
        _off: isize,
        _vs: [V::F; 2],
        _rng: &mut RoundingBits<V>,
        _e: u64,
        _drawn: Option<[V::U; 2]>,
    ) {
        unreachable!("store_even_odd of a kind without EVEN_ODD")
    }

    /// Prefetches `ahead` bytes past local index `off` (which may lie past the buffer).
    #[inline(always)]
    unsafe fn prefetch(&self, _off: isize, _ahead: usize) {}

    /// Copies the chunk's valid lanes into `st` and returns a view of the stage (lane l at 0 + l).
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Self;

    /// Copies the valid lanes of a stage back.
    unsafe fn unstage(&self, st: &Stage, c: &Chunk);
}

/// [`Access::load_group`] chunk by chunk.
#[inline(always)]
unsafe fn load_chunks<V: Simd, A: Access<V>, const G: usize>(a: &A, off: isize) -> [V::F; G] {
    unsafe {
        let mut v = [V::splat(0.0); G];
        unrolled!(G, i => {
            v[i] = a.load(off + (i * V::LANES) as isize);
        });
        v
    }
}

/// [`Access::store_group`] chunk by chunk.
#[inline(always)]
unsafe fn store_chunks<V: Simd, A: Access<V>, const G: usize>(
    a: &A,
    off: isize,
    vs: &[V::F; G],
    rng: &mut RoundingBits<V>,
    e: u64,
) {
    unrolled!(G, i => {
        unsafe { a.store(off + (i * V::LANES) as isize, vs[i], rng, e + (i * V::LANES) as u64) }
    });
}

/// An f32 buffer; `CANONICAL` is [`Access::CANONICAL`] (false only for [`ScratchBuf`]).
#[derive(Clone, Copy)]
struct F32Buf<const CANONICAL: bool = true>(*mut f32);

/// Split weights: the bf16 top half and the 16-bit trail (SPEC.md §4.4).
#[derive(Clone, Copy)]
struct SplitBuf(*mut u16, *mut u16);

/// A bf16 buffer and the rounding its stores use: the caller's (the second field, read at run
/// time) where `R` is [`ANY_ROUNDING`], else the one `R` names, fixed by the layout so that the
/// per-chunk tests on it fold away (`drive_layouts!`).
#[derive(Clone, Copy)]
struct Bf16Buf<const R: u8 = ANY_ROUNDING>(*mut u16, Rounding);

/// [`Bf16Buf`]'s parameter: the rounding is read at run time.
const ANY_ROUNDING: u8 = 0;
/// [`Bf16Buf`]'s parameter: every store rounds stochastically.
const STOCHASTIC: u8 = 1;
/// [`Bf16Buf`]'s parameter: every store rounds to nearest, ties to even (no random bits).
const NEAREST: u8 = 2;

impl<const R: u8> Bf16Buf<R> {
    #[inline(always)]
    fn rounding(&self) -> Rounding {
        match R {
            STOCHASTIC => Rounding::Stochastic,
            NEAREST => Rounding::NearestEven,
            _ => self.1,
        }
    }
}

/// A buffer the call does not have: reads as zeros, stores nothing.
#[derive(Clone, Copy)]
struct Absent;

/// The library's own f32 scratch (LAMB's kept directions): stored as computed, NaN payload and
/// all, since it is only read back by pass 2, which must see what it would have recomputed.
type ScratchBuf = F32Buf<false>;

/// LAMB's kept directions as pass 1 writes them: a [`ScratchBuf`] whose pairs in even/odd order,
/// stored back in element order ([`crate::arch::Simd::lanes_in_order`]), do not count as
/// permuting ([`Access::EVEN_ODD_PERMUTES`]), so that pass 1 takes its pairs in even/odd order
/// wherever its other buffers are 16-bit, and pass 2, whatever order it takes, reads each element
/// where it lies. Pass 1 only writes it (its op reads no state slot 2), so it keeps the trait's
/// `load_even_odd`, never called.
#[derive(Clone, Copy)]
struct KeptBuf(ScratchBuf);

/// Two f32 chunks from `p` as a pair in even/odd order
/// ([`crate::arch::Simd::load_even_odd_lanes`]).
#[inline(always)]
unsafe fn load_f32_even_odd<V: Simd>(p: *const f32) -> [V::F; 2] {
    unsafe {
        let [even, odd] = V::load_even_odd_lanes(p.cast());
        [V::from_bits(even), V::from_bits(odd)]
    }
}

/// Stores a pair given in even/odd order as two f32 chunks from `p`, in element order
/// ([`crate::arch::Simd::store_lanes_in_order`]).
#[inline(always)]
unsafe fn store_f32_even_odd<V: Simd>(p: *mut f32, vs: [V::F; 2]) {
    unsafe { V::store_lanes_in_order(p.cast(), V::to_bits(vs[0]), V::to_bits(vs[1])) }
}

impl<V: Simd, const CANONICAL: bool> Access<V> for F32Buf<CANONICAL> {
    const WIDE: bool = true;
    const CANONICAL: bool = CANONICAL;
    const EVEN_ODD: bool = true;
    const EVEN_ODD_PERMUTES: bool = true;

    #[inline(always)]
    unsafe fn load_even_odd(&self, off: isize) -> [V::F; 2] {
        unsafe { load_f32_even_odd::<V>(self.0.offset(off)) }
    }

    #[inline(always)]
    unsafe fn store_even_odd(
        &self,
        off: isize,
        vs: [V::F; 2],
        _rng: &mut RoundingBits<V>,
        _e: u64,
        _drawn: Option<[V::U; 2]>,
    ) {
        unsafe { store_f32_even_odd::<V>(self.0.offset(off), vs) }
    }

    fn from_buf(b: Option<Buf>) -> Option<Self> {
        match b {
            Some(Buf::F32(p)) => Some(F32Buf::<CANONICAL>(p)),
            _ => None,
        }
    }

    #[inline(always)]
    unsafe fn load(&self, off: isize) -> V::F {
        unsafe { V::load(self.0.offset(off)) }
    }

    #[inline(always)]
    unsafe fn store(&self, off: isize, v: V::F, _rng: &mut RoundingBits<V>, _e: u64) {
        unsafe { V::store(self.0.offset(off), v) }
    }

    #[inline(always)]
    unsafe fn prefetch(&self, off: isize, ahead: usize) {
        unsafe { prefetch_ahead::<V, _>(self.0, off, ahead) }
    }

    #[inline(always)]
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Self {
        unsafe {
            stage_in(self.0, st.f.as_mut_ptr(), c);
            F32Buf::<CANONICAL>(st.f.as_mut_ptr())
        }
    }

    #[inline(always)]
    unsafe fn unstage(&self, st: &Stage, c: &Chunk) {
        unsafe { stage_out(st.f.as_ptr(), self.0, c) }
    }
}

impl<V: Simd> Access<V> for SplitBuf {
    const GROUPED: bool = true;
    const EVEN_ODD: bool = true;

    #[inline(always)]
    unsafe fn load_even_odd(&self, off: isize) -> [V::F; 2] {
        unsafe {
            let [even, odd] = V::load_split_even_odd(self.0.offset(off), self.1.offset(off));
            [V::from_bits(even), V::from_bits(odd)]
        }
    }

    #[inline(always)]
    unsafe fn store_even_odd(
        &self,
        off: isize,
        vs: [V::F; 2],
        _rng: &mut RoundingBits<V>,
        _e: u64,
        _drawn: Option<[V::U; 2]>,
    ) {
        unsafe {
            let bits = [V::to_bits(vs[0]), V::to_bits(vs[1])];
            V::store_split_even_odd(self.0.offset(off), self.1.offset(off), bits)
        }
    }

    fn from_buf(b: Option<Buf>) -> Option<Self> {
        match b {
            Some(Buf::Split(t, l)) => Some(SplitBuf(t, l)),
            _ => None,
        }
    }

    #[inline(always)]
    unsafe fn load(&self, off: isize) -> V::F {
        unsafe { V::from_bits(V::load_u16_halves(self.0.offset(off), self.1.offset(off))) }
    }

    #[inline(always)]
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut RoundingBits<V>, e: u64) {
        unsafe {
            let b = <Self as Access<V>>::encode(self, v, rng, e);
            V::store_u16_halves(self.0.offset(off), self.1.offset(off), b);
        }
    }

    #[inline(always)]
    unsafe fn load_group<const G: usize>(&self, off: isize) -> [V::F; G] {
        unsafe {
            let mut lo = [V::splat_u(0); G];
            unrolled!(G, i => {
                lo[i] = V::load_u16_raw(self.1.offset(off + (i * V::LANES) as isize));
            });
            let mut v = [V::splat(0.0); G];
            unrolled!(G, i => {
                let hi = V::load_u16_raw(self.0.offset(off + (i * V::LANES) as isize));
                v[i] = V::from_bits(V::unpack_u16_halves(hi, lo[i]));
            });
            v
        }
    }

    #[inline(always)]
    unsafe fn store_group<const G: usize>(
        &self,
        off: isize,
        vs: &[V::F; G],
        _rng: &mut RoundingBits<V>,
        _e: u64,
        _drawn: Option<[V::U; 2]>,
    ) {
        unsafe {
            // Split bits need no random bits (`encode` is the f32 bits).
            if const { V::PACKS_HALVES_PAIRS && G.is_multiple_of(2) } {
                // Each two chunks' halves packed together: one store of each kind per pair.
                let mut packed = [V::splat_u(0); G];
                unrolled!(G / 2, k => {
                    let pair = [V::to_bits(vs[2 * k]), V::to_bits(vs[2 * k + 1])];
                    [packed[2 * k], packed[2 * k + 1]] = V::pack_u16_halves_pair(pair);
                });
                unrolled!(G / 2, k => {
                    let at = off + (2 * k * V::LANES) as isize;
                    V::store(self.0.offset(at).cast(), V::from_bits(packed[2 * k]));
                });
                unrolled!(G / 2, k => {
                    let at = off + (2 * k * V::LANES) as isize;
                    V::store(self.1.offset(at).cast(), V::from_bits(packed[2 * k + 1]));
                });
                return;
            }
            let mut packed = [V::splat_u(0); G];
            unrolled!(G, i => {
                packed[i] = V::pack_u16_halves(V::to_bits(vs[i]));
            });
            unrolled!(G, i => {
                V::store_packed_hi(self.0.offset(off + (i * V::LANES) as isize), packed[i]);
            });
            unrolled!(G, i => {
                V::store_packed_lo(self.1.offset(off + (i * V::LANES) as isize), packed[i]);
            });
        }
    }

    #[inline(always)]
    unsafe fn prefetch(&self, off: isize, ahead: usize) {
        unsafe {
            prefetch_ahead::<V, _>(self.0, off, ahead);
            prefetch_ahead::<V, _>(self.1, off, ahead);
        }
    }

    #[inline(always)]
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Self {
        unsafe {
            stage_in(self.0, st.h.as_mut_ptr(), c);
            stage_in(self.1, st.h2.as_mut_ptr(), c);
            SplitBuf(st.h.as_mut_ptr(), st.h2.as_mut_ptr())
        }
    }

    #[inline(always)]
    unsafe fn unstage(&self, st: &Stage, c: &Chunk) {
        unsafe {
            stage_out(st.h.as_ptr(), self.0, c);
            stage_out(st.h2.as_ptr(), self.1, c);
        }
    }
}

impl<const R: u8> Bf16Buf<R> {
    /// The f32 bits of `v` (global index `e`) with this buffer's rounding increment added: what
    /// [`crate::arch::Simd::store_u16_high`] stores. `v`'s NaNs are canonical.
    #[inline(always)]
    unsafe fn rounded_high<V: Simd>(&self, v: V::F, rng: &mut RoundingBits<V>, e: u64) -> V::U {
        unsafe {
            let r = rng.for_rounding::<true>(self.rounding(), e);
            self.rounded_high_with::<V>(v, r)
        }
    }

    /// [`Self::rounded_high`] with the chunk's bits `r` already drawn (zeros unless stochastic).
    #[inline(always)]
    unsafe fn rounded_high_with<V: Simd>(&self, v: V::F, r: V::U) -> V::U {
        unsafe {
            #[cfg(debug_assertions)]
            {
                use crate::reference::round::CANONICAL_NAN_F32;
                let lanes = crate::arch::u32_lanes::<V>(V::to_bits(v));
                let canonical = |x: &u32| !f32::from_bits(*x).is_nan() || *x == CANONICAL_NAN_F32;
                debug_assert!(lanes[..V::LANES].iter().all(canonical));
            }
            to_bf16_high::<V>(V::to_bits(v), self.rounding(), r)
        }
    }
}

impl<V: Simd, const R: u8> Access<V> for Bf16Buf<R> {
    const GROUPED: bool = R == NEAREST;
    const MAY_DRAW_BITS: bool = R != NEAREST;
    const ALWAYS_DRAWS: bool = R == STOCHASTIC;
    const PAIRED_DRAWS: bool = V::PAIRED_U16;
    const EVEN_ODD: bool = true;

    #[inline(always)]
    unsafe fn load_even_odd(&self, off: isize) -> [V::F; 2] {
        unsafe {
            let [even, odd] = V::load_u16_high_even_odd(self.0.offset(off));
            [V::from_bits(even), V::from_bits(odd)]
        }
    }

    #[inline(always)]
    unsafe fn store_even_odd(
        &self,
        off: isize,
        vs: [V::F; 2],
        rng: &mut RoundingBits<V>,
        e: u64,
        drawn: Option<[V::U; 2]>,
    ) {
        unsafe {
            // Where the backend draws in blocks (AVX2), the block's; otherwise the driver draws
            // every stochastic store's bits (`Driver::EVEN_ODD`). Zeros for a rounding that takes
            // no bits: `to_bf16_high` reads them only for SR.
            let r = match drawn {
                Some(r) => r,
                None if V::RNG_BLOCK => rng.for_rounding_even_odd(self.rounding(), e),
                None => {
                    debug_assert!(self.rounding() != Rounding::Stochastic);
                    [V::splat_u(0); 2]
                }
            };
            let high = [
                self.rounded_high_with::<V>(vs[0], r[0]),
                self.rounded_high_with::<V>(vs[1], r[1]),
            ];
            V::store_u16_high_even_odd(self.0.offset(off), high)
        }
    }

    #[inline(always)]
    fn draws_bits(&self) -> bool {
        self.rounding() == Rounding::Stochastic
    }

    fn from_buf(b: Option<Buf>) -> Option<Self> {
        match b {
            Some(Buf::Bf16(p, r)) if Bf16Buf::<R>(p, r).rounding() == r => Some(Bf16Buf(p, r)),
            _ => None,
        }
    }

    #[inline(always)]
    unsafe fn load(&self, off: isize) -> V::F {
        unsafe { V::from_bits(V::load_u16_high(self.0.offset(off))) }
    }

    #[inline(always)]
    unsafe fn encode(&self, v: V::F, rng: &mut RoundingBits<V>, e: u64) -> V::U {
        unsafe {
            let r = rng.for_rounding::<true>(self.rounding(), e);
            to_bf16::<V>(V::to_bits(v), self.rounding(), r)
        }
    }

    /// The top half of what [`Access::store`] stores, with the low half cleared.
    #[inline(always)]
    unsafe fn as_stored(
        &self,
        v: V::F,
        rng: &mut RoundingBits<V>,
        e: u64,
        drawn: Option<V::U>,
    ) -> V::F {
        unsafe {
            let r = match drawn {
                Some(r) => r,
                None => rng.for_rounding::<true>(self.rounding(), e),
            };
            let high = to_bf16_high::<V>(V::to_bits(v), self.rounding(), r);
            V::from_bits(V::and_u(high, V::splat_u(0xFFFF_0000)))
        }
    }

    /// `v`'s NaNs are canonical ([`Access::CANONICAL`]), so the rounding needs no NaN lanes of its
    /// own ([`to_bf16_high`]).
    #[inline(always)]
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut RoundingBits<V>, e: u64) {
        unsafe {
            V::store_u16_high(self.0.offset(off), self.rounded_high(v, rng, e));
        }
    }

    #[inline(always)]
    unsafe fn load_group<const G: usize>(&self, off: isize) -> [V::F; G] {
        unsafe {
            if const { G == 2 && V::PAIRED_U16 } {
                let pair = V::load_u16_high_pair(self.0.offset(off));
                // Spelled out, not `array::from_fn`: LLVM left that closure out of line, a call
                // per group that passed both chunks through memory.
                let mut v = [V::splat(0.0); G];
                v[0] = V::from_bits(pair[0]);
                v[G - 1] = V::from_bits(pair[1]);
                return v;
            }
            load_chunks::<V, Self, G>(self, off)
        }
    }

    #[inline(always)]
    unsafe fn store_group<const G: usize>(
        &self,
        off: isize,
        vs: &[V::F; G],
        rng: &mut RoundingBits<V>,
        e: u64,
        drawn: Option<[V::U; 2]>,
    ) {
        unsafe {
            if const { G == 2 && V::PAIRED_U16 } {
                let (first, second) = if let Some(r) = drawn {
                    (
                        self.rounded_high_with::<V>(vs[0], r[0]),
                        self.rounded_high_with::<V>(vs[G - 1], r[1]),
                    )
                } else {
                    (
                        self.rounded_high(vs[0], rng, e),
                        self.rounded_high(vs[G - 1], rng, e + V::LANES as u64),
                    )
                };
                return V::store_u16_high_pair(self.0.offset(off), [first, second]);
            }
            // Bits given for chunks stored one by one: zeros for values already as stored
            // (`ElementOp::ROUNDS_IN_APPLY`), so no block is read.
            if let (Some(r), true) = (drawn, G <= 2) {
                unrolled!(G, i => {
                    // `min`: `i` is 0 or 1 here, but the copies for larger groups must compile.
                    let high = self.rounded_high_with::<V>(vs[i], r[i.min(1)]);
                    V::store_u16_high(self.0.offset(off + (i * V::LANES) as isize), high);
                });
                return;
            }
            store_chunks::<V, Self, G>(self, off, vs, rng, e)
        }
    }

    #[inline(always)]
    unsafe fn prefetch(&self, off: isize, ahead: usize) {
        unsafe { prefetch_ahead::<V, _>(self.0, off, ahead) }
    }

    #[inline(always)]
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Self {
        unsafe {
            stage_in(self.0, st.h.as_mut_ptr(), c);
            Bf16Buf::<R>(st.h.as_mut_ptr(), self.1)
        }
    }

    #[inline(always)]
    unsafe fn unstage(&self, st: &Stage, c: &Chunk) {
        unsafe { stage_out(st.h.as_ptr(), self.0, c) }
    }
}

impl<V: Simd> Access<V> for Absent {
    const PRESENT: bool = false;
    const WIDE: bool = true;
    const CANONICAL: bool = false;
    const EVEN_ODD: bool = true;

    #[inline(always)]
    unsafe fn load_even_odd(&self, _off: isize) -> [V::F; 2] {
        unsafe { [V::splat(0.0); 2] }
    }

    #[inline(always)]
    unsafe fn store_even_odd(
        &self,
        _off: isize,
        _vs: [V::F; 2],
        _rng: &mut RoundingBits<V>,
        _e: u64,
        _drawn: Option<[V::U; 2]>,
    ) {
    }

    fn from_buf(b: Option<Buf>) -> Option<Self> {
        match b {
            None => Some(Absent),
            Some(_) => None,
        }
    }

    #[inline(always)]
    unsafe fn load(&self, _off: isize) -> V::F {
        unsafe { V::splat(0.0) }
    }

    #[inline(always)]
    unsafe fn store(&self, _off: isize, _v: V::F, _rng: &mut RoundingBits<V>, _e: u64) {}

    #[inline(always)]
    unsafe fn stage(&self, _st: &mut Stage, _c: &Chunk) -> Self {
        Absent
    }

    #[inline(always)]
    unsafe fn unstage(&self, _st: &Stage, _c: &Chunk) {}
}

impl<V: Simd> Access<V> for KeptBuf {
    const WIDE: bool = true;
    const CANONICAL: bool = false;
    const EVEN_ODD: bool = true;

    fn from_buf(b: Option<Buf>) -> Option<Self> {
        <ScratchBuf as Access<V>>::from_buf(b).map(KeptBuf)
    }

    #[inline(always)]
    unsafe fn load(&self, off: isize) -> V::F {
        unsafe { Access::<V>::load(&self.0, off) }
    }

    #[inline(always)]
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut RoundingBits<V>, e: u64) {
        unsafe { Access::<V>::store(&self.0, off, v, rng, e) }
    }

    #[inline(always)]
    unsafe fn store_even_odd(
        &self,
        off: isize,
        vs: [V::F; 2],
        rng: &mut RoundingBits<V>,
        e: u64,
        drawn: Option<[V::U; 2]>,
    ) {
        unsafe { Access::<V>::store_even_odd(&self.0, off, vs, rng, e, drawn) }
    }

    #[inline(always)]
    unsafe fn prefetch(&self, off: isize, ahead: usize) {
        unsafe { Access::<V>::prefetch(&self.0, off, ahead) }
    }

    #[inline(always)]
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Self {
        unsafe { KeptBuf(Access::<V>::stage(&self.0, st, c)) }
    }

    #[inline(always)]
    unsafe fn unstage(&self, st: &Stage, c: &Chunk) {
        unsafe { Access::<V>::unstage(&self.0, st, c) }
    }
}

/// The run-time kind: each method picks the typed one. Used for a buffer that must be present.
impl<V: Simd> Access<V> for Buf {
    const MAY_DRAW_BITS: bool = true;
    const RUN_TIME: bool = true;

    #[inline(always)]
    fn draws_bits(&self) -> bool {
        matches!(self, Buf::Bf16(_, Rounding::Stochastic))
    }

    fn from_buf(b: Option<Buf>) -> Option<Self> {
        b
    }

    #[inline(always)]
    unsafe fn load(&self, off: isize) -> V::F {
        unsafe {
            match *self {
                Buf::F32(p) => Access::<V>::load(&F32Buf::<true>(p), off),
                Buf::Split(t, l) => Access::<V>::load(&SplitBuf(t, l), off),
                Buf::Bf16(p, r) => Access::<V>::load(&Bf16Buf::<ANY_ROUNDING>(p, r), off),
            }
        }
    }

    #[inline(always)]
    unsafe fn encode(&self, v: V::F, rng: &mut RoundingBits<V>, e: u64) -> V::U {
        unsafe {
            match *self {
                Buf::F32(p) => F32Buf::<true>(p).encode(v, rng, e),
                Buf::Split(t, l) => SplitBuf(t, l).encode(v, rng, e),
                Buf::Bf16(p, r) => Bf16Buf::<ANY_ROUNDING>(p, r).encode(v, rng, e),
            }
        }
    }

    #[inline(always)]
    unsafe fn as_stored(
        &self,
        v: V::F,
        rng: &mut RoundingBits<V>,
        e: u64,
        drawn: Option<V::U>,
    ) -> V::F {
        unsafe {
            match *self {
                Buf::F32(p) => F32Buf::<true>(p).as_stored(v, rng, e, drawn),
                Buf::Split(t, l) => SplitBuf(t, l).as_stored(v, rng, e, drawn),
                Buf::Bf16(p, r) => Bf16Buf::<ANY_ROUNDING>(p, r).as_stored(v, rng, e, drawn),
            }
        }
    }

    #[inline(always)]
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut RoundingBits<V>, e: u64) {
        unsafe {
            match *self {
                Buf::F32(p) => F32Buf::<true>(p).store(off, v, rng, e),
                Buf::Split(t, l) => SplitBuf(t, l).store(off, v, rng, e),
                Buf::Bf16(p, r) => Bf16Buf::<ANY_ROUNDING>(p, r).store(off, v, rng, e),
            }
        }
    }

    #[inline(always)]
    unsafe fn prefetch(&self, off: isize, ahead: usize) {
        unsafe {
            match *self {
                Buf::F32(p) => Access::<V>::prefetch(&F32Buf::<true>(p), off, ahead),
                Buf::Split(t, l) => Access::<V>::prefetch(&SplitBuf(t, l), off, ahead),
                Buf::Bf16(p, r) => {
                    Access::<V>::prefetch(&Bf16Buf::<ANY_ROUNDING>(p, r), off, ahead)
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Self {
        unsafe {
            match *self {
                Buf::F32(p) => {
                    let F32Buf(q) = Access::<V>::stage(&F32Buf::<true>(p), st, c);
                    Buf::F32(q)
                }
                Buf::Split(t, l) => {
                    let SplitBuf(a, b) = Access::<V>::stage(&SplitBuf(t, l), st, c);
                    Buf::Split(a, b)
                }
                Buf::Bf16(p, r) => {
                    let Bf16Buf(q, r) = Access::<V>::stage(&Bf16Buf::<ANY_ROUNDING>(p, r), st, c);
                    Buf::Bf16(q, r)
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn unstage(&self, st: &Stage, c: &Chunk) {
        unsafe {
            match *self {
                Buf::F32(p) => Access::<V>::unstage(&F32Buf::<true>(p), st, c),
                Buf::Split(t, l) => Access::<V>::unstage(&SplitBuf(t, l), st, c),
                Buf::Bf16(p, r) => Access::<V>::unstage(&Bf16Buf::<ANY_ROUNDING>(p, r), st, c),
            }
        }
    }
}

/// The access type of each buffer of one call: weights, gradients, and the three state slots
/// (0 = first moment / momentum, 1 = second moment / Adagrad sum, 2 = AMSGrad max).
trait Layout<V: Simd> {
    type W: Access<V>;
    type G: Access<V>;
    type S0: Access<V>;
    type S1: Access<V>;
    type S2: Access<V>;

    /// Whether every buffer is f32 (or absent).
    const ALL_F32: bool =
        Self::W::WIDE && Self::G::WIDE && Self::S0::WIDE && Self::S1::WIDE && Self::S2::WIDE;

    /// What the step's buffers are, for the prefetch rule ([`StepBuffers`]; never
    /// [`StepBuffers::F32Divides`], [`StepBuffers::F32LambPass`] or
    /// [`StepBuffers::NarrowDivides`], which the driver tells from the op).
    const BUFFERS: StepBuffers = if !Self::ALL_F32 {
        let states = Self::S0::PRESENT as u8 + Self::S1::PRESENT as u8 + Self::S2::PRESENT as u8;
        if states == 1 && Self::S0::WIDE && Self::S1::WIDE && Self::S2::WIDE {
            StepBuffers::NarrowOneState
        } else {
            StepBuffers::Narrow
        }
    } else if Self::S0::PRESENT && Self::S1::PRESENT {
        StepBuffers::F32TwoStates
    } else {
        StepBuffers::PlainF32
    };

    /// How far ahead of a full chunk (bytes, in every buffer) the driver prefetches: 2 KiB when
    /// every buffer is f32, else 4 KiB (see [`PREFETCH_AHEAD_BYTES`]).
    const PREFETCH_AHEAD_BYTES: usize = if Self::ALL_F32 {
        PREFETCH_AHEAD_BYTES_F32
    } else {
        PREFETCH_AHEAD_BYTES
    };

    /// Whether some buffer's kind is known only at run time ([`Access::RUN_TIME`]).
    const RUN_TIME: bool = Self::W::RUN_TIME
        || Self::G::RUN_TIME
        || Self::S0::RUN_TIME
        || Self::S1::RUN_TIME
        || Self::S2::RUN_TIME;

    /// Whether every buffer loads and stores pairs of chunks in even/odd order
    /// ([`Access::EVEN_ODD`]).
    const EVEN_ODD: bool = Self::W::EVEN_ODD
        && Self::G::EVEN_ODD
        && Self::S0::EVEN_ODD
        && Self::S1::EVEN_ODD
        && Self::S2::EVEN_ODD;

    /// How many of the states are of a kind whose even/odd order permutes
    /// ([`Access::EVEN_ODD_PERMUTES`]).
    const PERMUTED_STATES: u8 = Self::S0::EVEN_ODD_PERMUTES as u8
        + Self::S1::EVEN_ODD_PERMUTES as u8
        + Self::S2::EVEN_ODD_PERMUTES as u8;

    /// Whether a buffer the step stores to can round stochastically (see [`Access::MAY_DRAW_BITS`]).
    const MAY_DRAW_BITS: bool = Self::W::MAY_DRAW_BITS
        || Self::S0::MAY_DRAW_BITS
        || Self::S1::MAY_DRAW_BITS
        || Self::S2::MAY_DRAW_BITS;
}

struct Lay<W, G, S0, S1, S2>(core::marker::PhantomData<(W, G, S0, S1, S2)>);

impl<V: Simd, W: Access<V>, G: Access<V>, S0: Access<V>, S1: Access<V>, S2: Access<V>> Layout<V>
    for Lay<W, G, S0, S1, S2>
{
    type W = W;
    type G = G;
    type S0 = S0;
    type S1 = S1;
    type S2 = S2;
}

/// A buffer the call has, of kind `T` (used in `drive_layouts!` slot patterns).
type Has<T> = T;
/// A buffer the call does not have, whatever the layout's kind `T` for it.
type Lacks<T> = <T as AbsentFor>::Absent;
/// A workspace buffer of the library's own (LAMB's kept directions): [`ScratchBuf`] in every
/// layout.
type Scratch<T> = <T as AbsentFor>::Scratch;
/// LAMB's kept directions as pass 1 writes them: [`KeptBuf`] in every layout.
type Kept<T> = <T as AbsentFor>::Kept;

trait AbsentFor {
    type Absent;
    type Scratch;
    type Kept;
}

impl<T> AbsentFor for T {
    type Absent = Absent;
    type Scratch = ScratchBuf;
    type Kept = KeptBuf;
}

/// The buffers of one call as passed (kinds known at run time).
#[derive(Clone, Copy)]
struct DynBufs {
    w: Buf,
    g: Option<Buf>,
    s: [Option<Buf>; 3],
    /// The whole step's length, for the prefetch rule.
    step_len: StepLen,
}

/// The buffers of one tensor with their access types, and their RNG streams.
struct Bufs<V: Simd, L: Layout<V>> {
    w: L::W,
    g: L::G,
    s0: L::S0,
    s1: L::S1,
    s2: L::S2,
    rng_w: RoundingBits<V>,
    rng_s: [RoundingBits<V>; 3],
    /// [`DynBufs::step_len`].
    step_len: StepLen,
}

impl<V: Simd, L: Layout<V>> Bufs<V, L> {
    /// The typed view of `d`, or `None` when some buffer is not of `L`'s kind; the random bits
    /// for elements below `end` (global), kept in `blocks` where the backend draws them a block
    /// at a time ([`RoundingBits`]).
    #[inline(always)]
    unsafe fn of(
        ctx: &StepContext,
        stream: &TensorStream,
        d: DynBufs,
        end: u64,
        blocks: &mut [BitsBlock<V>; 4],
    ) -> Option<Self> {
        let [bw, b0, b1, b2] = blocks;
        let bits = |p, b| unsafe { RoundingBits::new(coord(ctx, stream, p), end, b) };
        Some(Bufs {
            w: L::W::from_buf(Some(d.w))?,
            g: L::G::from_buf(d.g)?,
            s0: L::S0::from_buf(d.s[0])?,
            s1: L::S1::from_buf(d.s[1])?,
            s2: L::S2::from_buf(d.s[2])?,
            rng_w: bits(Purpose::Weights, bw),
            rng_s: [
                bits(Purpose::FirstMoment, b0),
                bits(Purpose::SecondMoment, b1),
                bits(Purpose::MaxSecondMoment, b2),
            ],
            step_len: d.step_len,
        })
    }
}

/// Runs `$op` over the tensor with the buffers `$d` ([`DynBufs`]) through [`drive`], with
/// compile-time access for the storage layouts the benchmarks run, and run-time access (a `match`
/// per buffer and chunk) for every other combination, or for every call on a backend without
/// `COMPILED_LAYOUTS` (the portable one on x86_64). The last argument names the set:
///
/// - `all`: IPEX's (split weights, bf16 gradients, f32 states), all f32 (PyTorch's fused AdamW),
///   each of those with bf16 states rounded stochastically (10 and 12 bytes per parameter), bf16
///   weights rounded stochastically with bf16 gradients and f32 states, all bf16 with every
///   store stochastic, and the mixed layouts: f32 master weights and states with bf16 gradients
///   (ZeRO-Offload's layout with the gradients as an accelerator sends them), bf16 weights
///   rounded to nearest with bf16 gradients and f32 or bf16-SR states (the package's
///   `rounding="nearest"`); through the run-time access these took up to 2.8x the time of
///   their compiled forms;
/// - `fp32_peers`: IPEX's and all f32 only. For LAMB's second pass and for AMSGrad (no benchmark
///   runs it, and DeepSpeed's CPU Adam has none);
/// - `fp32_master`: IPEX's, all f32 and f32 master weights and states with bf16 gradients. For
///   LAMB's first pass without a bf16 buffer: through the run-time access the master step took
///   1.11x the time of the all-f32 step, and compiled it takes 0.86-0.95x the time it took;
/// - `sr_weights`: IPEX's, all f32, the mixed layouts and bf16-SR weights: for a step with no
///   state (SGD without momentum), where the other stochastic layouts are copies of these;
/// - `stochastic all`: `all`'s stochastic layouts and no others; `stochastic memory_saving`:
///   the two memory-saving layouts (split weights with bf16-SR states, bf16-SR weights with f32
///   states); `stochastic sr_weights`: the second alone. For LAMB's entry points of its own for
///   these layouts: compiled beside IPEX's in one function, they changed the code of IPEX's
///   layout around them (gungraun, AVX2, LAMB +7% instructions);
/// - `run_time`: none.
///
/// Every layout compiled is another copy of the optimizer's loops for LLVM to optimise, and these
/// copies are most of the library's build (docs/DESIGN.md, "Build time"). All bf16 rounded to
/// nearest runs through the run-time access: compiled, it was 6% faster on AVX2 and a fifth of
/// the release build. `$G`, `$S0`, `$S1`, `$S2` are [`Has`] or [`Lacks`]: which buffers this
/// call has. Same arithmetic in every case, so the same bits; only the `match` per chunk is gone.
macro_rules! drive_layouts {
    ($V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident], run_time) => {{
        type Any = Lay<Buf, $G<Buf>, $S0<Buf>, $S1<Buf>, $S2<Buf>>;
        // The random bits' blocks, one per stream, outside the kernel's state (`RoundingBits`).
        let mut blocks = [const { BitsBlock::<$V>::new() }; 4];
        match Bufs::<$V, Any>::of($ctx, $stream, $d, $base + $n as u64, &mut blocks) {
            Some(mut b) => drive::<$V, Any, _>($n, $base, &mut b, $op),
            None => unreachable!("the run-time layout takes any buffers"),
        }
    }};
    // The stochastic set `$set` alone, else the run-time access: for entry points of their own
    // (LAMB's: `lamb_pass1`, why).
    ($V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident], stochastic $set:ident) => {{
        let (n, base, ctx, stream, d, op) = ($n, $base, $ctx, $stream, $d, $op);
        let mut blocks = [const { BitsBlock::<$V>::new() }; 4];
        if const { !<$V as crate::arch::Simd>::COMPILED_LAYOUTS } {
            drive_layouts!($V, n, base, ctx, stream, d, op, [$G, $S0, $S1, $S2], run_time)
        } else if drive_layouts!(@$set, $V, n, base, ctx, stream, d, op, &mut blocks,
                                 [$G, $S0, $S1, $S2]) {
        } else {
            drive_layouts!($V, n, base, ctx, stream, d, op, [$G, $S0, $S1, $S2], run_time)
        }
    }};
    ($V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident], $set:ident) => {{
        let (n, base, ctx, stream, d, op) = ($n, $base, $ctx, $stream, $d, $op);
        let end = base + n as u64;
        // The random bits' blocks, one per stream, outside the kernel's state (`RoundingBits`).
        let mut blocks = [const { BitsBlock::<$V>::new() }; 4];
        type Ipex = Lay<SplitBuf, $G<Bf16Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>;
        type AllF32 = Lay<F32Buf, $G<F32Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>;
        if const { !<$V as crate::arch::Simd>::COMPILED_LAYOUTS } {
            drive_layouts!($V, n, base, ctx, stream, d, op, [$G, $S0, $S1, $S2], run_time)
        } else if drive_layouts!(@$set, $V, n, base, ctx, stream, d, op, &mut blocks,
                                 [$G, $S0, $S1, $S2]) {
        } else if let Some(mut b) = Bufs::<$V, Ipex>::of(ctx, stream, d, end, &mut blocks) {
            drive::<$V, Ipex, _>(n, base, &mut b, op)
        } else if let Some(mut b) = Bufs::<$V, AllF32>::of(ctx, stream, d, end, &mut blocks) {
            drive::<$V, AllF32, _>(n, base, &mut b, op)
        } else if drive_layouts!(@mixed $set, $V, n, base, ctx, stream, d, op, &mut blocks,
                                 [$G, $S0, $S1, $S2]) {
        } else {
            drive_layouts!($V, n, base, ctx, stream, d, op, [$G, $S0, $S1, $S2], run_time)
        }
    }};
    // The stochastic layouts: the two memory-saving ones, f32 weights and gradients with bf16-SR
    // states, and all bf16. True if one of them ran.
    (@all, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {{
        type Sr = Bf16Buf<STOCHASTIC>;
        drive_layouts!(@memory_saving, $V, $n, $base, $ctx, $stream, $d, $op, $blocks,
                       [$G, $S0, $S1, $S2])
            || drive_layouts!(@one Lay<F32Buf, $G<F32Buf>, $S0<Sr>, $S1<Sr>, $S2<Sr>>,
                              $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
            || drive_layouts!(@one Lay<Sr, $G<Bf16Buf>, $S0<Sr>, $S1<Sr>, $S2<Sr>>,
                              $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
    }};
    // The two memory-saving layouts: split weights with bf16-SR states, bf16-SR weights with f32
    // states, both with bf16 gradients.
    (@memory_saving, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {{
        type Sr = Bf16Buf<STOCHASTIC>;
        drive_layouts!(@one Lay<SplitBuf, $G<Bf16Buf>, $S0<Sr>, $S1<Sr>, $S2<Sr>>,
                       $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
            || drive_layouts!(@sr_weights, $V, $n, $base, $ctx, $stream, $d, $op, $blocks,
                              [$G, $S0, $S1, $S2])
    }};
    // bf16-SR weights alone: for a pass that reads no state.
    (@sr_weights, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        drive_layouts!(@one Lay<Bf16Buf<STOCHASTIC>, $G<Bf16Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>,
                       $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
    };
    // One layout `$L`: true if the buffers are of its kinds (and it ran).
    (@one $L:ty, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr) => {{
        if let Some(mut b) = Bufs::<$V, $L>::of($ctx, $stream, $d, $base + $n as u64, $blocks) {
            drive::<$V, $L, _>($n, $base, &mut b, $op);
            true
        } else {
            false
        }
    }};
    (@fp32_peers, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        false
    };
    (@fp32_master, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        false
    };
    // `fp32_master`'s mixed layout: f32 master weights and states with bf16 gradients alone.
    (@mixed fp32_master, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        drive_layouts!(@one Lay<F32Buf, $G<Bf16Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>,
                       $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
    };
    // The mixed layouts, in the other sets but `fp32_peers`: f32 master weights and states with
    // bf16 gradients, and bf16 weights rounded to nearest with bf16 gradients and f32 or bf16-SR
    // states. True if one of them ran.
    (@mixed fp32_peers, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        false
    };
    (@mixed $set:ident, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     $blocks:expr, [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        drive_layouts!(@one Lay<F32Buf, $G<Bf16Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>,
                       $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
            || drive_layouts!(@one Lay<Bf16Buf<NEAREST>, $G<Bf16Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>,
                              $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
            || drive_layouts!(@one Lay<Bf16Buf<NEAREST>, $G<Bf16Buf>, $S0<Bf16Buf<STOCHASTIC>>,
                                       $S1<Bf16Buf<STOCHASTIC>>, $S2<Bf16Buf<STOCHASTIC>>>,
                              $V, $n, $base, $ctx, $stream, $d, $op, $blocks)
    };
}

/// How far ahead of a full chunk (bytes, in every buffer it touches) the driver prefetches: one
/// 4 KiB page. The hardware prefetchers keep up with one or two streams; an optimizer step runs
/// four to seven (split weights are two). The distances were chosen by sweeps (docs/DESIGN.md,
/// "SIMD backends"); with six streams, 8 KiB ahead would fill L1.
const PREFETCH_AHEAD_BYTES: usize = 4096;

/// The distance when every buffer is f32 (PyTorch's fused AdamW layout): half a page, best for
/// that layout and worse for the ones with 16-bit buffers.
const PREFETCH_AHEAD_BYTES_F32: usize = 2048;

/// How far ahead a prefetching chunk of a layout whose own distance is `layout` bytes prefetches
/// under the rule's `ahead`: a page where the rule says so, else the layout's distance. A constant
/// where the layout's distance is a page already (`ahead` is then not read).
#[inline(always)]
const fn prefetch_ahead_bytes(layout: usize, ahead: Option<Ahead>) -> usize {
    if layout < PREFETCH_AHEAD_BYTES && matches!(ahead, Some(Ahead::Page)) {
        PREFETCH_AHEAD_BYTES
    } else {
        layout
    }
}

/// Prefetches the line `bytes` past element `off` of `p` (which may lie past the buffer: a
/// prefetch is a hint and never faults).
#[inline(always)]
unsafe fn prefetch_ahead<V: Simd, T>(p: *mut T, off: isize, bytes: usize) {
    let ahead = (bytes / core::mem::size_of::<T>()) as isize;
    unsafe { V::prefetch(p.wrapping_offset(off + ahead).cast()) }
}

/// Pieces shorter than this do not prefetch: up to here the data tends to be in L2 or L3, where
/// the extra instructions cost more than the latency they hide. A piece, not a tensor: the
/// parallel driver cuts large tensors into pieces of `elements / (8 × threads)` on a team.
pub(crate) const PREFETCH_MIN: usize = 128 * 1024;

/// The elements of the whole step a kernel call runs a piece of: a group's, across its tensors
/// and threads; 0 where the caller does not say (the piece is then taken for the step). Whether
/// the step's buffers outgrow the caches decides where some CPUs prefetch
/// ([`crate::cpu::Prefetch::step_piece`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StepLen(pub usize);

/// Whether and how far ahead a step's piece of `n` elements (at least [`PREFETCH_MIN`])
/// prefetches, in a step of `step_len` with the buffers `buffers`
/// ([`crate::cpu::Prefetch::step_piece`]; docs/DESIGN.md, "SIMD backends": on Zen 3 at 1M
/// elements, inside its L3, prefetching cost 2–31%; on Zen 5, one thread, at 2M–4M the all-f32
/// SGD lost 7–27% half a page ahead and gained nothing a page ahead, where the all-f32 Adagrad and
/// Adam gained 6–29% a page ahead).
#[inline(always)]
fn step_prefetch(n: usize, step_len: StepLen, buffers: StepBuffers) -> Option<Ahead> {
    crate::cpu::prefetch().step_piece(n, n.max(step_len.0), buffers)
}

mod adagrad;
mod adam;
mod driver;
mod lamb;
mod sgd;

pub(crate) use adagrad::adagrad;
pub(crate) use adam::{adam, entry as adam_entry};
pub(crate) use lamb::{lamb_pass1, lamb_pass2};
pub(crate) use sgd::sgd;

use driver::{ChunkBits, ElementOp, SIGN_BIT, Vals, decays, drive, flip_sign, neg};

/// Checks of the layouts' constants, run by `tests/internals.rs`.
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::driver::step_buffers;
    use super::*;
    use crate::arch::portable::Portable;

    fn buffers<L: Layout<Portable>>() -> StepBuffers {
        L::BUFFERS
    }

    /// How the prefetch rule sees each layout, as the optimizers' slot patterns give them.
    pub(crate) fn layouts_step_buffers() {
        use StepBuffers::*;
        type F = F32Buf;
        type H = Bf16Buf;
        type Sr = Bf16Buf<STOCHASTIC>;
        type S = SplitBuf;
        type R = Buf;
        // SGD without and with momentum, Adagrad (its sum in slot 1), LAMB's pass 2 reading the
        // kept update.
        assert_eq!(
            buffers::<Lay<F, Has<F>, Lacks<F>, Lacks<F>, Lacks<F>>>(),
            PlainF32
        );
        assert_eq!(
            buffers::<Lay<F, Has<F>, Has<F>, Lacks<F>, Lacks<F>>>(),
            PlainF32
        );
        assert_eq!(
            buffers::<Lay<F, Has<F>, Lacks<F>, Has<F>, Lacks<F>>>(),
            PlainF32
        );
        assert_eq!(
            buffers::<Lay<F, Lacks<F>, Scratch<F>, Lacks<F>, Lacks<F>>>(),
            PlainF32
        );
        // Adam and AdamW, AMSGrad, LAMB's pass 2 from the moments.
        assert_eq!(
            buffers::<Lay<F, Has<F>, Has<F>, Has<F>, Lacks<F>>>(),
            F32TwoStates
        );
        assert_eq!(
            buffers::<Lay<F, Has<F>, Has<F>, Has<F>, Has<F>>>(),
            F32TwoStates
        );
        assert_eq!(
            buffers::<Lay<F, Lacks<F>, Has<F>, Has<F>, Lacks<F>>>(),
            F32TwoStates
        );
        // A buffer other than f32, or kinds known only at run time; with one f32 state (SGD's
        // momentum, Adagrad's sum) told apart.
        assert_eq!(
            buffers::<Lay<S, Has<H>, Has<F>, Lacks<F>, Lacks<F>>>(),
            NarrowOneState
        );
        assert_eq!(
            buffers::<Lay<Sr, Has<H>, Lacks<F>, Has<F>, Lacks<F>>>(),
            NarrowOneState
        );
        assert_eq!(
            buffers::<Lay<S, Has<H>, Has<F>, Has<F>, Lacks<F>>>(),
            Narrow
        );
        assert_eq!(
            buffers::<Lay<S, Has<H>, Lacks<Sr>, Has<Sr>, Lacks<Sr>>>(),
            Narrow
        );
        assert_eq!(
            buffers::<Lay<F, Has<F>, Has<Sr>, Lacks<Sr>, Lacks<Sr>>>(),
            Narrow
        );
        assert_eq!(
            buffers::<Lay<R, Has<R>, Has<R>, Lacks<R>, Lacks<R>>>(),
            Narrow
        );
        // With the op: of the plain f32 steps only Adagrad's divides.
        type P = Portable;
        type AdagradF32 = Lay<F, Has<F>, Lacks<F>, Has<F>, Lacks<F>>;
        type SgdF32 = Lay<F, Has<F>, Has<F>, Lacks<F>, Lacks<F>>;
        type AdamF32 = Lay<F, Has<F>, Has<F>, Has<F>, Lacks<F>>;
        type AdagradSplit = Lay<S, Has<H>, Lacks<F>, Has<F>, Lacks<F>>;
        assert_eq!(
            step_buffers::<P, AdagradF32, adagrad::AdagradOp<P>>(),
            F32Divides
        );
        assert_eq!(step_buffers::<P, SgdF32, sgd::SgdOp<P, true>>(), PlainF32);
        assert_eq!(step_buffers::<P, SgdF32, sgd::SgdOp<P, false>>(), PlainF32);
        assert_eq!(step_buffers::<P, AdamF32, adam::AdamOp<P>>(), F32TwoStates);
        // LAMB's first pass reads the weights; its second from the moments reads no gradients.
        type LambPass1F32 = Lay<F, Has<F>, Has<F>, Has<F>, Kept<F>>;
        type LambPass2F32 = Lay<F, Lacks<F>, Has<F>, Has<F>, Lacks<F>>;
        assert_eq!(
            step_buffers::<P, LambPass1F32, lamb::LambPass1<P, true>>(),
            F32LambPass
        );
        assert_eq!(
            step_buffers::<P, LambPass2F32, lamb::LambPass2<P, false>>(),
            F32LambPass
        );
        // Adagrad's narrow weights with its f32 sum; SGD's split step with f32 momentum does not
        // divide, and Adagrad's bf16-SR sum is not f32.
        assert_eq!(
            step_buffers::<P, AdagradSplit, adagrad::AdagradOp<P>>(),
            NarrowDivides
        );
        type AdagradSrWeights = Lay<Sr, Has<H>, Lacks<F>, Has<F>, Lacks<F>>;
        assert_eq!(
            step_buffers::<P, AdagradSrWeights, adagrad::AdagradOp<P>>(),
            NarrowDivides
        );
        type SgdSplit = Lay<S, Has<H>, Has<F>, Lacks<F>, Lacks<F>>;
        assert_eq!(step_buffers::<P, SgdSplit, sgd::SgdOp<P, true>>(), Narrow);
        type AdagradSrSum = Lay<S, Has<H>, Lacks<Sr>, Has<Sr>, Lacks<Sr>>;
        assert_eq!(
            step_buffers::<P, AdagradSrSum, adagrad::AdagradOp<P>>(),
            Narrow
        );
        type AdamSplit = Lay<S, Has<H>, Has<F>, Has<F>, Lacks<F>>;
        assert_eq!(step_buffers::<P, AdamSplit, adam::AdamOp<P>>(), Narrow);
        // The distance a prefetching chunk takes: half a page for the all-f32 layouts unless the
        // rule says a page; a page for the others either way.
        let f32_bytes = <AdamF32 as Layout<P>>::PREFETCH_AHEAD_BYTES;
        let narrow_bytes = <AdagradSplit as Layout<P>>::PREFETCH_AHEAD_BYTES;
        assert_eq!((f32_bytes, narrow_bytes), (2048, 4096));
        assert_eq!(prefetch_ahead_bytes(f32_bytes, Some(Ahead::Layout)), 2048);
        assert_eq!(prefetch_ahead_bytes(f32_bytes, Some(Ahead::Page)), 4096);
        for ahead in [Some(Ahead::Layout), Some(Ahead::Page)] {
            assert_eq!(prefetch_ahead_bytes(narrow_bytes, ahead), 4096);
        }
    }
}
