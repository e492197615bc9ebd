//! The four optimizers (SPEC.md §5–7), each written once: generic over the lane type, with every
//! storage kind handled by the shared load/store below.

use super::Simd;
use super::round::{canonicalize, from_bf16, to_bf16};
use super::{Chunk, ChunkBody, GroupBits, Stage, full_run_plain, run_chunks, stage_in, stage_out};
use crate::reference::adagrad::AdagradConsts;
use crate::reference::adam::AdamConsts;
use crate::reference::lamb::LambConsts;
use crate::reference::norm::{NORM_BLOCK, NORM_LANES, fold_lanes};
use crate::reference::round::Rounding;
use crate::reference::sgd::SgdConsts;
use crate::rng::{Purpose, StepContext, TensorStream, coord};
use crate::storage::{Grads, State, Weights};
use crate::tensors::{AdagradTensor, AdamTensor, LambTensor, SgdTensor};

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
    /// (`Driver::full_run`: why): split weights only. Grouped too, f32 SGD at 64K elements ran
    /// 10% (AVX-512) and 19% (AVX2) slower on Zen 4; all-f32 steps gained only where their
    /// buffers collided.
    const GROUPED: bool = false;

    /// Whether stores must hold canonical NaNs (SPEC.md §5): every kind the caller passes. Not
    /// the library's own scratch, nor an absent buffer.
    const CANONICAL: bool = true;

    /// This kind's view of `b`, or `None` when `b` is of another kind (or absent / present
    /// where this one is not).
    fn from_buf(b: Option<Buf>) -> Option<Self>;

    /// `LANES` elements from local index `off`, widened to f32 (exact).
    unsafe fn load(&self, off: isize) -> V::F;

    /// [`Access::load`] of `G` consecutive chunks from `off`: chunk by chunk, but for split
    /// weights all trails before all tops (`Driver::full_run`: why).
    #[inline(always)]
    unsafe fn load_group<const G: usize>(&self, off: isize) -> [V::F; G] {
        unsafe {
            let mut v = [V::splat(0.0); G];
            unrolled!(G, i => {
                v[i] = self.load(off + (i * V::LANES) as isize);
            });
            v
        }
    }

    /// The bits `v` is stored as (narrowed for bf16); `rng` supplies the random bits of the chunk
    /// at global index `e`, drawn only for stochastic rounding. By default the full f32 bits (f32
    /// and split buffers). NaNs are already canonical: [`process`] canonicalises before storing.
    #[inline(always)]
    unsafe fn encode(&self, v: V::F, _rng: &mut GroupBits<V>, _e: u64) -> V::U {
        unsafe { V::to_bits(v) }
    }

    /// What reading the buffer back would give after storing `v`, but for a NaN's payload: a
    /// NaN reads back canonical, and is returned as it came. Nothing downstream can tell (LAMB,
    /// the one user, feeds it to arithmetic whose NaN results are canonicalised when stored, and
    /// to norms whose NaN only fails comparisons).
    #[inline(always)]
    unsafe fn as_stored(&self, v: V::F, _rng: &mut GroupBits<V>, _e: u64) -> V::F {
        v
    }

    /// Stores `v` (NaNs already canonical where [`Access::CANONICAL`]).
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut GroupBits<V>, e: u64);

    /// Stores `G` consecutive chunks, `vs[i]` at local index `off + i * LANES` (global
    /// `e + i * LANES`): chunk by chunk, but for split weights all trails before all tops
    /// (`Driver::full_run`: why).
    #[inline(always)]
    unsafe fn store_group<const G: usize>(
        &self,
        off: isize,
        vs: &[V::F; G],
        rng: &mut GroupBits<V>,
        e: u64,
    ) {
        unrolled!(G, i => {
            unsafe { self.store(off + (i * V::LANES) as isize, vs[i], rng, e + (i * V::LANES) as u64) }
        });
    }

    /// Prefetches `ahead` bytes past local index `off` (which may lie past the buffer).
    #[inline(always)]
    unsafe fn prefetch(&self, _off: isize, _ahead: usize) {}

    /// Copies the chunk's valid lanes into `st` and returns a view of the stage (lane l at 0 + l).
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Self;

    /// Copies the valid lanes of a stage back.
    unsafe fn unstage(&self, st: &Stage, c: &Chunk);
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

impl<const R: u8> Bf16Buf<R> {
    #[inline(always)]
    fn rounding(&self) -> Rounding {
        match R {
            STOCHASTIC => Rounding::Stochastic,
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

impl<V: Simd, const CANONICAL: bool> Access<V> for F32Buf<CANONICAL> {
    const WIDE: bool = true;
    const CANONICAL: bool = CANONICAL;

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
    unsafe fn store(&self, off: isize, v: V::F, _rng: &mut GroupBits<V>, _e: u64) {
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
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut GroupBits<V>, e: u64) {
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
        _rng: &mut GroupBits<V>,
        _e: u64,
    ) {
        unsafe {
            // Split bits need no random bits (`encode` is the f32 bits).
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

impl<V: Simd, const R: u8> Access<V> for Bf16Buf<R> {
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
    unsafe fn encode(&self, v: V::F, rng: &mut GroupBits<V>, e: u64) -> V::U {
        unsafe {
            let r = rng.for_rounding(self.rounding(), e);
            to_bf16::<V>(V::to_bits(v), self.rounding(), r)
        }
    }

    #[inline(always)]
    unsafe fn as_stored(&self, v: V::F, rng: &mut GroupBits<V>, e: u64) -> V::F {
        unsafe { from_bf16::<V>(<Self as Access<V>>::encode(self, v, rng, e)) }
    }

    #[inline(always)]
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut GroupBits<V>, e: u64) {
        unsafe {
            let b = <Self as Access<V>>::encode(self, v, rng, e);
            V::store_u16(self.0.offset(off), b);
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
    unsafe fn store(&self, _off: isize, _v: V::F, _rng: &mut GroupBits<V>, _e: u64) {}

    #[inline(always)]
    unsafe fn stage(&self, _st: &mut Stage, _c: &Chunk) -> Self {
        Absent
    }

    #[inline(always)]
    unsafe fn unstage(&self, _st: &Stage, _c: &Chunk) {}
}

/// The run-time kind: each method picks the typed one. Used for a buffer that must be present.
impl<V: Simd> Access<V> for Buf {
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
    unsafe fn encode(&self, v: V::F, rng: &mut GroupBits<V>, e: u64) -> V::U {
        unsafe {
            match *self {
                Buf::F32(p) => F32Buf::<true>(p).encode(v, rng, e),
                Buf::Split(t, l) => SplitBuf(t, l).encode(v, rng, e),
                Buf::Bf16(p, r) => Bf16Buf::<ANY_ROUNDING>(p, r).encode(v, rng, e),
            }
        }
    }

    #[inline(always)]
    unsafe fn as_stored(&self, v: V::F, rng: &mut GroupBits<V>, e: u64) -> V::F {
        unsafe {
            match *self {
                Buf::F32(p) => F32Buf::<true>(p).as_stored(v, rng, e),
                Buf::Split(t, l) => SplitBuf(t, l).as_stored(v, rng, e),
                Buf::Bf16(p, r) => Bf16Buf::<ANY_ROUNDING>(p, r).as_stored(v, rng, e),
            }
        }
    }

    #[inline(always)]
    unsafe fn store(&self, off: isize, v: V::F, rng: &mut GroupBits<V>, e: u64) {
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

    /// How far ahead of a full chunk (bytes, in every buffer) the driver prefetches: 2 KiB when
    /// every buffer is f32, else 4 KiB (see [`PREFETCH_AHEAD_BYTES`]).
    const PREFETCH_AHEAD_BYTES: usize =
        if Self::W::WIDE && Self::G::WIDE && Self::S0::WIDE && Self::S1::WIDE && Self::S2::WIDE {
            PREFETCH_AHEAD_BYTES_F32
        } else {
            PREFETCH_AHEAD_BYTES
        };
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

trait AbsentFor {
    type Absent;
    type Scratch;
}

impl<T> AbsentFor for T {
    type Absent = Absent;
    type Scratch = ScratchBuf;
}

/// The buffers of one call as passed (kinds known at run time).
#[derive(Clone, Copy)]
struct DynBufs {
    w: Buf,
    g: Option<Buf>,
    s: [Option<Buf>; 3],
}

/// The buffers of one tensor with their access types, and their RNG streams.
struct Bufs<V: Simd, L: Layout<V>> {
    w: L::W,
    g: L::G,
    s0: L::S0,
    s1: L::S1,
    s2: L::S2,
    rng_w: GroupBits<V>,
    rng_s: [GroupBits<V>; 3],
}

impl<V: Simd, L: Layout<V>> Bufs<V, L> {
    /// The typed view of `d`, or `None` when some buffer is not of `L`'s kind.
    #[inline(always)]
    unsafe fn of(ctx: &StepContext, stream: &TensorStream, d: DynBufs) -> Option<Self> {
        unsafe {
            Some(Bufs {
                w: L::W::from_buf(Some(d.w))?,
                g: L::G::from_buf(d.g)?,
                s0: L::S0::from_buf(d.s[0])?,
                s1: L::S1::from_buf(d.s[1])?,
                s2: L::S2::from_buf(d.s[2])?,
                rng_w: GroupBits::new(coord(ctx, stream, Purpose::Weights)),
                rng_s: [
                    GroupBits::new(coord(ctx, stream, Purpose::FirstMoment)),
                    GroupBits::new(coord(ctx, stream, Purpose::SecondMoment)),
                    GroupBits::new(coord(ctx, stream, Purpose::MaxSecondMoment)),
                ],
            })
        }
    }
}

/// Runs `$op` over the tensor with the buffers `$d` ([`DynBufs`]) through [`drive`], with
/// compile-time access for the hot storage layouts — IPEX's (split weights, bf16 gradients, f32
/// states), the same with bf16 states rounded stochastically (10 bytes per parameter), bf16
/// weights rounded stochastically with bf16 gradients and f32 states, all f32 (PyTorch's fused
/// AdamW), all bf16 with every store stochastic, all bf16 with the roundings read at run time —
/// and run-time access otherwise (a `match` per buffer and chunk). LAMB's passes leave out the two
/// stochastic layouts (`no_sr_layouts`): with them, its IPEX layout's code changed around them
/// (gungraun, AVX2: LAMB with groups +6% instructions), and each LAMB layout is two passes to
/// compile. `$G`, `$S0`, `$S1`, `$S2` are
/// [`Has`] or [`Lacks`]: which buffers this call has. Same arithmetic in every case, so the same
/// bits; only the `match` per chunk is gone.
macro_rules! drive_layouts {
    ($V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        drive_layouts!($V, $n, $base, $ctx, $stream, $d, $op, [$G, $S0, $S1, $S2], sr_layouts)
    };
    ($V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident], $sr:ident) => {{
        let (n, base, ctx, stream, d, op) = ($n, $base, $ctx, $stream, $d, $op);
        type Ipex = Lay<SplitBuf, $G<Bf16Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>;
        type AllF32 = Lay<F32Buf, $G<F32Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>;
        type AllBf16 = Lay<Bf16Buf, $G<Bf16Buf>, $S0<Bf16Buf>, $S1<Bf16Buf>, $S2<Bf16Buf>>;
        type Sr = Bf16Buf<STOCHASTIC>;
        type AllBf16Sr = Lay<Sr, $G<Bf16Buf>, $S0<Sr>, $S1<Sr>, $S2<Sr>>;
        type Any = Lay<Buf, $G<Buf>, $S0<Buf>, $S1<Buf>, $S2<Buf>>;
        if drive_layouts!(@$sr, $V, n, base, ctx, stream, d, op, [$G, $S0, $S1, $S2]) {
        } else if let Some(mut b) = Bufs::<$V, Ipex>::of(ctx, stream, d) {
            drive::<$V, Ipex, _>(n, base, &mut b, op)
        } else if let Some(mut b) = Bufs::<$V, AllF32>::of(ctx, stream, d) {
            drive::<$V, AllF32, _>(n, base, &mut b, op)
        } else if let Some(mut b) = Bufs::<$V, AllBf16Sr>::of(ctx, stream, d) {
            drive::<$V, AllBf16Sr, _>(n, base, &mut b, op)
        } else if let Some(mut b) = Bufs::<$V, AllBf16>::of(ctx, stream, d) {
            drive::<$V, AllBf16, _>(n, base, &mut b, op)
        } else if let Some(mut b) = Bufs::<$V, Any>::of(ctx, stream, d) {
            drive::<$V, Any, _>(n, base, &mut b, op)
        } else {
            unreachable!("the slot pattern does not match the buffers passed")
        }
    }};
    // The memory-saving layouts: split weights with bf16 states, and bf16 weights with f32
    // states, each stored stochastically, bf16 gradients. True if one of them ran.
    (@sr_layouts, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {{
        type Sr = Bf16Buf<STOCHASTIC>;
        type SplitSrStates = Lay<SplitBuf, $G<Bf16Buf>, $S0<Sr>, $S1<Sr>, $S2<Sr>>;
        type SrWeights = Lay<Sr, $G<Bf16Buf>, $S0<F32Buf>, $S1<F32Buf>, $S2<F32Buf>>;
        if let Some(mut b) = Bufs::<$V, SplitSrStates>::of($ctx, $stream, $d) {
            drive::<$V, SplitSrStates, _>($n, $base, &mut b, $op);
            true
        } else if let Some(mut b) = Bufs::<$V, SrWeights>::of($ctx, $stream, $d) {
            drive::<$V, SrWeights, _>($n, $base, &mut b, $op);
            true
        } else {
            false
        }
    }};
    (@no_sr_layouts, $V:ty, $n:expr, $base:expr, $ctx:expr, $stream:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident]) => {
        false
    };
}

/// One chunk's values: weights, gradients, states.
struct Vals<V: Simd> {
    p: V::F,
    g: V::F,
    s: [V::F; 3],
}

impl<V: Simd> Clone for Vals<V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V: Simd> Copy for Vals<V> {}

/// One optimizer's (or pass's) arithmetic on a chunk. A trait with an always-inlined method
/// rather than a closure, so the code compiles with the entry point's target features.
trait ElementOp<V: Simd> {
    /// Whether the pass writes the weights, and each state slot.
    const WRITE_W: bool;
    const WRITE_S: [bool; 3];
    /// Whether the pass reads each state slot (a slot it only writes is not loaded).
    const READ_S: [bool; 3] = [true; 3];
    /// Transforms the loaded values of the chunk at global index `e`.
    unsafe fn apply<L: Layout<V>>(&mut self, v: &mut Vals<V>, e: u64, b: &mut Bufs<V, L>);
}

/// The buffers one chunk reads and writes (the tensor's, or a stage's).
struct ChunkBufs<V: Simd, L: Layout<V>> {
    w: L::W,
    g: L::G,
    s0: L::S0,
    s1: L::S1,
    s2: L::S2,
}

/// Loads one chunk from `c` at `off`, applies `op`, stores what the op writes.
#[inline(always)]
unsafe fn process<V: Simd, L: Layout<V>, O: ElementOp<V>>(
    op: &mut O,
    b: &mut Bufs<V, L>,
    c: &ChunkBufs<V, L>,
    off: isize,
    e: u64,
) {
    unsafe { finish::<V, L, O>(op, b, c, load_vals::<V, L, O>(c, off), off, e) }
}

/// The values of the chunk at `off` that `O` reads (zero for the states it does not).
#[inline(always)]
unsafe fn load_vals<V: Simd, L: Layout<V>, O: ElementOp<V>>(
    c: &ChunkBufs<V, L>,
    off: isize,
) -> Vals<V> {
    unsafe { load_group::<V, L, O, 1>(c, off)[0] }
}

/// The values of the `G` chunks from `off`, loaded buffer by buffer ([`Access::load_group`]);
/// a state slot the op does not read is left zero.
#[inline(always)]
unsafe fn load_group<V: Simd, L: Layout<V>, O: ElementOp<V>, const G: usize>(
    c: &ChunkBufs<V, L>,
    off: isize,
) -> [Vals<V>; G] {
    unsafe {
        let zero = [V::splat(0.0); G];
        let p = c.w.load_group::<G>(off);
        let g = c.g.load_group::<G>(off);
        let s0 = if O::READ_S[0] {
            c.s0.load_group::<G>(off)
        } else {
            zero
        };
        let s1 = if O::READ_S[1] {
            c.s1.load_group::<G>(off)
        } else {
            zero
        };
        let s2 = if O::READ_S[2] {
            c.s2.load_group::<G>(off)
        } else {
            zero
        };
        let mut v = [Vals::<V> {
            p: zero[0],
            g: zero[0],
            s: [zero[0]; 3],
        }; G];
        unrolled!(G, i => {
            v[i] = Vals {
                p: p[i],
                g: g[i],
                s: [s0[i], s1[i], s2[i]],
            };
        });
        v
    }
}

/// Applies `op` to the chunk's values `v` (loaded from `off`) and stores what the op writes.
#[inline(always)]
unsafe fn finish<V: Simd, L: Layout<V>, O: ElementOp<V>>(
    op: &mut O,
    b: &mut Bufs<V, L>,
    c: &ChunkBufs<V, L>,
    v: Vals<V>,
    off: isize,
    e: u64,
) {
    unsafe { finish_group::<V, L, O, 1>(op, b, c, [v], off, e) }
}

/// [`finish`] for `G` consecutive chunks from `off` (global `e`): applies `op` to each in order,
/// then stores them buffer by buffer ([`Access::store_group`]).
#[inline(always)]
unsafe fn finish_group<V: Simd, L: Layout<V>, O: ElementOp<V>, const G: usize>(
    op: &mut O,
    b: &mut Bufs<V, L>,
    c: &ChunkBufs<V, L>,
    mut vs: [Vals<V>; G],
    off: isize,
    e: u64,
) {
    unsafe {
        unrolled!(G, i => {
            compute::<V, L, O>(op, b, &mut vs[i], e + (i * V::LANES) as u64);
        });
        let [r0, r1, r2] = &mut b.rng_s;
        // Gathered per buffer (no closures: see `any_nan`), and stored in the reverse of the
        // order loaded: of two buffers whose lines collide, the one loaded last is the one in
        // L1, so it is stored first.
        let mut x = [V::splat(0.0); G];
        if O::WRITE_S[2] {
            unrolled!(G, i => {
                x[i] = vs[i].s[2];
            });
            c.s2.store_group(off, &x, r2, e);
        }
        if O::WRITE_S[1] {
            unrolled!(G, i => {
                x[i] = vs[i].s[1];
            });
            c.s1.store_group(off, &x, r1, e);
        }
        if O::WRITE_S[0] {
            unrolled!(G, i => {
                x[i] = vs[i].s[0];
            });
            c.s0.store_group(off, &x, r0, e);
        }
        if O::WRITE_W {
            unrolled!(G, i => {
                x[i] = vs[i].p;
            });
            c.w.store_group(off, &x, &mut b.rng_w, e);
        }
    }
}

/// Applies `op` to one chunk's values (global index `e`) and canonicalises the NaNs it stores.
#[inline(always)]
unsafe fn compute<V: Simd, L: Layout<V>, O: ElementOp<V>>(
    op: &mut O,
    b: &mut Bufs<V, L>,
    v: &mut Vals<V>,
    e: u64,
) {
    unsafe {
        op.apply(v, e, b);
        // NaN canonicalisation (SPEC.md §5) for the whole chunk at once: an unordered compare
        // per pair of stored vectors and one test, the blends only when some lane is NaN
        // (it was a compare and a blend per stored vector: on AVX2 the blend is a multi-uop
        // `vblendvps`, on Sapphire Rapids' AVX-512 both take one of the two ports that run 512-bit uops).
        let canon = [
            O::WRITE_S[0] && L::S0::CANONICAL,
            O::WRITE_S[1] && L::S1::CANONICAL,
            O::WRITE_S[2] && L::S2::CANONICAL,
            O::WRITE_W && L::W::CANONICAL,
        ];
        if any_nan::<V>(canon, [v.s[0], v.s[1], v.s[2], v.p]) {
            if canon[0] {
                v.s[0] = canonicalize::<V>(v.s[0]);
            }
            if canon[1] {
                v.s[1] = canonicalize::<V>(v.s[1]);
            }
            if canon[2] {
                v.s[2] = canonicalize::<V>(v.s[2]);
            }
            if canon[3] {
                v.p = canonicalize::<V>(v.p);
            }
        }
    }
}

/// Whether any lane of the vectors `xs[i]` with `on[i]` is NaN (`on` is known at compile time).
/// Straight-line calls, no loop or closure: LLVM kept a loop over the four in memory, and a
/// closure would be compiled without the entry point's target features.
#[inline(always)]
unsafe fn any_nan<V: Simd>(on: [bool; 4], xs: [V::F; 4]) -> bool {
    unsafe {
        let mut acc = NanAcc::<V> {
            mask: None,
            pending: None,
        };
        acc.push(on[0], xs[0]);
        acc.push(on[1], xs[1]);
        acc.push(on[2], xs[2]);
        acc.push(on[3], xs[3]);
        if let Some(y) = acc.pending {
            acc.or(V::is_nan(y));
        }
        match acc.mask {
            Some(m) => V::any(m),
            None => false,
        }
    }
}

/// [`any_nan`]'s running mask, and a vector waiting for a partner (a compare takes two).
struct NanAcc<V: Simd> {
    mask: Option<V::M>,
    pending: Option<V::F>,
}

impl<V: Simd> NanAcc<V> {
    #[inline(always)]
    unsafe fn push(&mut self, on: bool, x: V::F) {
        if on {
            match self.pending.take() {
                Some(y) => unsafe { self.or(V::is_nan2(y, x)) },
                None => self.pending = Some(x),
            }
        }
    }

    #[inline(always)]
    unsafe fn or(&mut self, m: V::M) {
        self.mask = Some(match self.mask {
            Some(a) => unsafe { V::mask_or(a, m) },
            None => m,
        });
    }
}

/// The element-wise driver: a [`ChunkBody`] that runs full chunks through [`process`] in place
/// and stages partial ones.
struct Driver<'a, V: Simd, L: Layout<V>, O: ElementOp<V>> {
    b: &'a mut Bufs<V, L>,
    op: &'a mut O,
    c: ChunkBufs<V, L>,
    /// Whether full chunks prefetch ([`Layout::PREFETCH_AHEAD_BYTES`] ahead).
    prefetch: bool,
}

impl<V: Simd, L: Layout<V>, O: ElementOp<V>> ChunkBody<V> for Driver<'_, V, L, O> {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe { process::<V, L, O>(self.op, self.b, &self.c, off, e) }
    }

    #[inline(always)]
    fn prefetching(&self) -> bool {
        self.prefetch
    }

    /// Full chunks overlapped where [`crate::arch::Simd::OVERLAP_CHUNKS`]: each chunk's loads are issued
    /// before the previous chunk's stores. Why: tensors allocated one after another (glibc's
    /// heap, and so PyTorch's) lie their size plus 64 bytes apart. Where that size is a multiple
    /// of 1 MiB, a load from one buffer falls one chunk after a store to the buffer allocated
    /// after it, at an address equal modulo 1 MiB, and on Sapphire Rapids the in-order loop ran
    /// 2-3x slower (docs/DESIGN.md, "SIMD backends"). The bits are
    /// the same: a chunk still reads only its own elements, and a call's buffers never overlap.
    ///
    /// And, where the weights are split, loaded and stored in groups of [`crate::arch::Simd::STORE_GROUP`]
    /// chunks, buffer by buffer (all of a group's trails, then all its tops; stores in the
    /// reverse order of the loads) rather than chunk by chunk. Why: AMD's L1 holds one line per
    /// set and "µtag" (a hash of address bits 12-27), so two buffers whose lines collide evict
    /// each other at every access, and stores retire in order. A split tensor of 64M elements,
    /// allocated as two 128 MiB buffers one after another (PyTorch, glibc), collides along half
    /// its length; chunk by chunk, split SGD ran 1.6x slower on AVX-512 and 2.7x on AVX2 than
    /// with the buffers apart (docs/DESIGN.md). Grouped, a group's accesses to one
    /// line follow each other. Same bits: each chunk is computed as alone, in the same order.
    #[inline(always)]
    unsafe fn full_run(&mut self, off: isize, e: u64, end: u64) {
        unsafe {
            // Inline-const conditions: rustc instantiates only the branch taken, so each driver
            // compiles one loop, not all three (the library's build spends its time on these).
            if const { L::W::GROUPED && V::STORE_GROUP == 2 } {
                self.full_run_grouped::<2>(off, e, end)
            } else if const { L::W::GROUPED && V::STORE_GROUP == 4 } {
                self.full_run_grouped::<4>(off, e, end)
            } else {
                self.full_run_chunks(off, e, end)
            }
        }
    }

    #[inline(always)]
    unsafe fn prefetch(&mut self, off: isize) {
        unsafe {
            let (c, ahead) = (&self.c, L::PREFETCH_AHEAD_BYTES);
            c.w.prefetch(off, ahead);
            c.g.prefetch(off, ahead);
            if O::READ_S[0] || O::WRITE_S[0] {
                c.s0.prefetch(off, ahead);
            }
            if O::READ_S[1] || O::WRITE_S[1] {
                c.s1.prefetch(off, ahead);
            }
            if O::READ_S[2] || O::WRITE_S[2] {
                c.s2.prefetch(off, ahead);
            }
        }
    }

    #[inline(always)]
    unsafe fn partial(&mut self, ch: &Chunk) {
        unsafe {
            let c = &self.c;
            let mut st = [
                Stage::new(),
                Stage::new(),
                Stage::new(),
                Stage::new(),
                Stage::new(),
            ];
            let [sw, sg, s0, s1, s2] = &mut st;
            let staged = ChunkBufs::<V, L> {
                w: c.w.stage(sw, ch),
                g: c.g.stage(sg, ch),
                s0: c.s0.stage(s0, ch),
                s1: c.s1.stage(s1, ch),
                s2: c.s2.stage(s2, ch),
            };
            process::<V, L, O>(self.op, self.b, &staged, 0, ch.e);
            if O::WRITE_W {
                c.w.unstage(&st[0], ch);
            }
            if O::WRITE_S[0] {
                c.s0.unstage(&st[2], ch);
            }
            if O::WRITE_S[1] {
                c.s1.unstage(&st[3], ch);
            }
            if O::WRITE_S[2] {
                c.s2.unstage(&st[4], ch);
            }
        }
    }
}

impl<V: Simd, L: Layout<V>, O: ElementOp<V>> Driver<'_, V, L, O> {
    /// [`ChunkBody::full_run`] chunk by chunk: overlapped where [`crate::arch::Simd::OVERLAP_CHUNKS`], with
    /// a copy of the loop per prefetch case (as in `full_run_plain`: a test per chunk cost f32
    /// SGD at 64K 8-15% on AVX-512).
    #[inline(always)]
    unsafe fn full_run_chunks(&mut self, mut off: isize, mut e: u64, end: u64) {
        unsafe {
            let l = V::LANES as u64;
            if const { !V::OVERLAP_CHUNKS } {
                return full_run_plain::<V, Self>(self, off, e, end);
            }
            // At least one full chunk (`run_chunks`); with exactly one, the loops below are empty
            // and the last `finish` computes it.
            let last = end - l;
            let mut v = load_vals::<V, L, O>(&self.c, off);
            if self.prefetch {
                while e < last {
                    self.prefetch(off);
                    let next = load_vals::<V, L, O>(&self.c, off + V::LANES as isize);
                    finish::<V, L, O>(self.op, self.b, &self.c, v, off, e);
                    v = next;
                    off += V::LANES as isize;
                    e += l;
                }
                self.prefetch(off);
            } else {
                while e < last {
                    let next = load_vals::<V, L, O>(&self.c, off + V::LANES as isize);
                    finish::<V, L, O>(self.op, self.b, &self.c, v, off, e);
                    v = next;
                    off += V::LANES as isize;
                    e += l;
                }
            }
            finish::<V, L, O>(self.op, self.b, &self.c, v, off, e);
        }
    }

    /// [`ChunkBody::full_run`] with groups of `G` chunks, and the chunks after the last group
    /// one by one. One copy of each loop body, with the prefetch test in the group loop (once
    /// per group): a copy per case had made the test profile's build of the crate take minutes
    /// longer.
    #[inline(always)]
    unsafe fn full_run_grouped<const G: usize>(&mut self, mut off: isize, mut e: u64, end: u64) {
        unsafe {
            let (l, gl) = (V::LANES as u64, (G * V::LANES) as u64);
            let last = e + (end - e) / gl * gl;
            if last - e >= 2 * gl {
                let mut v = load_group::<V, L, O, G>(&self.c, off);
                while e + gl < last {
                    if self.prefetch {
                        unrolled!(G, i => {
                            self.prefetch(off + (i * V::LANES) as isize);
                        });
                    }
                    if V::OVERLAP_CHUNKS {
                        // The next group's loads before this group's stores.
                        let next = load_group::<V, L, O, G>(&self.c, off + gl as isize);
                        finish_group::<V, L, O, G>(self.op, self.b, &self.c, v, off, e);
                        v = next;
                    } else {
                        finish_group::<V, L, O, G>(self.op, self.b, &self.c, v, off, e);
                        v = load_group::<V, L, O, G>(&self.c, off + gl as isize);
                    }
                    off += gl as isize;
                    e += gl;
                }
                finish_group::<V, L, O, G>(self.op, self.b, &self.c, v, off, e);
                off += gl as isize;
                e += gl;
            }
            while e < end {
                process::<V, L, O>(self.op, self.b, &self.c, off, e);
                off += l as isize;
                e += l;
            }
        }
    }
}

/// How far ahead of a full chunk (bytes, in every buffer it touches) the driver prefetches: one
/// 4 KiB page. The hardware prefetchers keep up with one or two streams; an optimizer step runs
/// four to seven (split weights are two), and at 64M elements on one thread the kernels sat 5–20%
/// under a copy loop that keeps as many streams in flight. Measured on one thread, AVX-512
/// (`step_timer`, medians of 3, docs/DESIGN.md): 4–8 KiB were best from 4M elements up, 1 KiB
/// no better than none; with six streams, 8 KiB ahead would fill L1.
const PREFETCH_AHEAD_BYTES: usize = 4096;

/// The distance when every buffer is f32 (PyTorch's fused AdamW layout): half a page. Measured
/// the same way: all-f32 AdamW at 64M elements ran 0.442 ns/param at 2 KiB, 0.498 at 4 KiB and
/// 0.476 without prefetching, while 2 KiB cost the layouts with 16-bit buffers 20–30% at 4M.
const PREFETCH_AHEAD_BYTES_F32: usize = 2048;

/// Prefetches the line `bytes` past element `off` of `p` (which may lie past the buffer: a
/// prefetch is a hint and never faults).
#[inline(always)]
unsafe fn prefetch_ahead<V: Simd, T>(p: *mut T, off: isize, bytes: usize) {
    let ahead = (bytes / core::mem::size_of::<T>()) as isize;
    unsafe { V::prefetch(p.wrapping_offset(off + ahead).cast()) }
}

/// Pieces shorter than this do not prefetch: up to here the data tends to be in L2 or L3, where
/// the extra instructions cost more than the latency they hide. A piece, not a tensor: the
/// parallel driver cuts large tensors into pieces of `elements / (4 × threads)`.
pub(crate) const PREFETCH_MIN: usize = 128 * 1024;

/// Runs `op` over the tensor of `n` elements starting at global index `base`.
#[inline(always)]
unsafe fn drive<V: Simd, L: Layout<V>, O: ElementOp<V>>(
    n: usize,
    base: u64,
    b: &mut Bufs<V, L>,
    op: &mut O,
) {
    unsafe {
        let c = ChunkBufs::<V, L> {
            w: b.w,
            g: b.g,
            s0: b.s0,
            s1: b.s1,
            s2: b.s2,
        };
        let prefetch = V::HAS_PREFETCH && n >= PREFETCH_MIN && crate::cpu::software_prefetch();
        run_chunks::<V, _>(base, n, &mut Driver { b, op, c, prefetch });
    }
}

/// `weight_decay != 0`, decided once per call. `black_box` keeps it a `bool`: otherwise LLVM
/// folds it back into a float compare in every chunk, a uop on a vector port.
#[inline(always)]
fn decays(weight_decay: f32) -> bool {
    core::hint::black_box(weight_decay != 0.0)
}

#[inline(always)]
unsafe fn neg<V: Simd>(x: V::F) -> V::F {
    unsafe { V::from_bits(V::xor_u(V::to_bits(x), V::splat_u(0x8000_0000))) }
}

// ---------------------------------------------------------------------------------------------

/// `PLAIN`: the step is known not to maximize, not to be the first, and not Nesterov's, so the
/// chunk loop carries no test of those three flags (callgrind: 6 of the 33 instructions of an
/// AVX2 split-SGD chunk were those tests; LLVM did not unswitch the loop).
struct SgdOp<V: Simd, const PLAIN: bool> {
    c: SgdConsts,
    neg_lr: V::F,
    momentum: V::F,
    omd: V::F,
    wd: V::F,
    /// Whether weight decay applies ([`decays`]).
    decay: bool,
}

impl<V: Simd, const PLAIN: bool> ElementOp<V> for SgdOp<V, PLAIN> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [true, false, false];

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V, L>) {
        unsafe {
            let c = &self.c;
            let mut g = if !PLAIN && c.maximize {
                neg::<V>(v.g)
            } else {
                v.g
            };
            if self.decay {
                g = V::fma(self.wd, v.p, g);
            }
            if L::S0::PRESENT {
                debug_assert!(c.use_momentum);
                let buf = if !PLAIN && c.first_step {
                    g
                } else {
                    V::fma(self.momentum, v.s[0], V::mul(self.omd, g))
                };
                g = if !PLAIN && c.nesterov {
                    V::fma(self.momentum, buf, g)
                } else {
                    buf
                };
                v.s[0] = buf;
            }
            v.p = V::fma(self.neg_lr, g, v.p);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn sgd<V: Simd>(c: &SgdConsts, ctx: &StepContext, t: &mut SgdTensor<'_>) {
    unsafe {
        if c.maximize || c.first_step || c.nesterov {
            sgd_op::<V, false>(c, ctx, t)
        } else {
            sgd_op::<V, true>(c, ctx, t)
        }
    }
}

#[inline(always)]
unsafe fn sgd_op<V: Simd, const PLAIN: bool>(
    c: &SgdConsts,
    ctx: &StepContext,
    t: &mut SgdTensor<'_>,
) {
    unsafe {
        let n = t.weights.len();
        // Without momentum there is no buffer (slot 0 is absent), so nothing is written there.
        let s0 = match t.momentum.as_mut() {
            Some(m) => Some(Buf::state(m)),
            None => None,
        };
        let d = DynBufs {
            w: Buf::weights(&mut t.weights),
            g: Some(Buf::grads(&t.grads)),
            s: [s0, None, None],
        };
        let mut op = SgdOp::<V, PLAIN> {
            c: *c,
            neg_lr: V::splat(-c.lr),
            momentum: V::splat(c.momentum),
            omd: V::splat(c.one_minus_dampening),
            wd: V::splat(c.weight_decay),
            decay: decays(c.weight_decay),
        };
        let (base, st) = (t.stream.index_base, &t.stream);
        if s0.is_some() {
            drive_layouts!(V, n, base, ctx, st, d, &mut op, [Has, Has, Lacks, Lacks]);
        } else {
            drive_layouts!(V, n, base, ctx, st, d, &mut op, [Has, Lacks, Lacks, Lacks]);
        }
    }
}

struct AdagradOp<V: Simd> {
    c: AdagradConsts,
    neg_clr: V::F,
    wd: V::F,
    eps: V::F,
    /// Whether weight decay applies ([`decays`]).
    decay: bool,
}

impl<V: Simd> ElementOp<V> for AdagradOp<V> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [false, true, false];

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V, L>) {
        unsafe {
            let mut g = if self.c.maximize { neg::<V>(v.g) } else { v.g };
            if self.decay {
                g = V::fma(self.wd, v.p, g);
            }
            let sum = V::fma(g, g, v.s[1]);
            let denom = V::add(V::sqrt(sum), self.eps);
            v.s[1] = sum;
            v.p = V::fma(self.neg_clr, V::div(g, denom), v.p);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn adagrad<V: Simd>(
    c: &AdagradConsts,
    ctx: &StepContext,
    t: &mut AdagradTensor<'_>,
) {
    unsafe {
        let n = t.weights.len();
        let d = DynBufs {
            w: Buf::weights(&mut t.weights),
            g: Some(Buf::grads(&t.grads)),
            s: [None, Some(Buf::state(&mut t.sum)), None],
        };
        let mut op = AdagradOp::<V> {
            c: *c,
            neg_clr: V::splat(-c.clr),
            wd: V::splat(c.weight_decay),
            eps: V::splat(c.eps),
            decay: decays(c.weight_decay),
        };
        let (base, st) = (t.stream.index_base, &t.stream);
        drive_layouts!(V, n, base, ctx, st, d, &mut op, [Has, Lacks, Has, Lacks]);
    }
}

/// The moment updates shared by Adam and LAMB.
#[inline(always)]
unsafe fn moments<V: Simd>(
    omb1: V::F,
    beta2: V::F,
    omb2: V::F,
    g: V::F,
    m: V::F,
    v: V::F,
) -> (V::F, V::F) {
    unsafe {
        (
            V::fma(omb1, V::sub(g, m), m),
            V::fma(beta2, v, V::mul(omb2, V::mul(g, g))),
        )
    }
}

struct AdamOp<V: Simd> {
    c: AdamConsts,
    omb1: V::F,
    beta2: V::F,
    omb2: V::F,
    neg_step: V::F,
    inv_sqrt_bc2: V::F,
    eps: V::F,
    wd: V::F,
    decay: V::F,
}

impl<V: Simd> ElementOp<V> for AdamOp<V> {
    const WRITE_W: bool = true;
    // Slot 2 is None unless amsgrad, so "writing" it is a no-op otherwise.
    const WRITE_S: [bool; 3] = [true, true, true];

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V, L>) {
        unsafe {
            let c = &self.c;
            let mut g = if c.maximize { neg::<V>(v.g) } else { v.g };
            let mut p = v.p;
            if c.use_weight_decay {
                if c.decoupled {
                    p = V::mul(p, self.decay);
                } else {
                    g = V::fma(self.wd, p, g);
                }
            }
            let (m, vv) = moments::<V>(self.omb1, self.beta2, self.omb2, g, v.s[0], v.s[1]);
            debug_assert_eq!(L::S2::PRESENT, c.amsgrad);
            let v_used = if L::S2::PRESENT {
                let bigger = V::mask_or(V::gt(vv, v.s[2]), V::is_nan(vv));
                v.s[2] = V::select(bigger, vv, v.s[2]);
                v.s[2]
            } else {
                vv
            };
            let denom = V::fma(V::sqrt(v_used), self.inv_sqrt_bc2, self.eps);
            v.s[0] = m;
            v.s[1] = vv;
            v.p = V::fma(self.neg_step, V::div(m, denom), p);
        }
    }
}

#[inline(always)]
pub(crate) unsafe fn adam<V: Simd>(c: &AdamConsts, ctx: &StepContext, t: &mut AdamTensor<'_>) {
    unsafe {
        let n = t.weights.len();
        let s2 = match t.max_exp_avg_sq.as_mut() {
            Some(x) => Some(Buf::state(x)),
            None => None,
        };
        let d = DynBufs {
            w: Buf::weights(&mut t.weights),
            g: Some(Buf::grads(&t.grads)),
            s: [
                Some(Buf::state(&mut t.exp_avg)),
                Some(Buf::state(&mut t.exp_avg_sq)),
                s2,
            ],
        };
        let mut op = AdamOp::<V> {
            c: *c,
            omb1: V::splat(c.one_minus_beta1),
            beta2: V::splat(c.beta2),
            omb2: V::splat(c.one_minus_beta2),
            neg_step: V::splat(-c.step_size),
            inv_sqrt_bc2: V::splat(c.inv_sqrt_bc2),
            eps: V::splat(c.eps),
            wd: V::splat(c.weight_decay),
            decay: V::splat(c.decay_factor),
        };
        let (base, st) = (t.stream.index_base, &t.stream);
        if s2.is_some() {
            drive_layouts!(V, n, base, ctx, st, d, &mut op, [Has, Has, Has, Has]);
        } else {
            drive_layouts!(V, n, base, ctx, st, d, &mut op, [Has, Has, Has, Lacks]);
        }
    }
}

/// LAMB's splatted constants.
#[derive(Clone, Copy)]
struct LambV<V: Simd> {
    inv_bc1: V::F,
    inv_bc2: V::F,
    eps: V::F,
    wd: V::F,
    /// Whether weight decay applies ([`decays`]).
    decay: bool,
}

impl<V: Simd> LambV<V> {
    /// The update direction from the weight and the stored moments.
    #[inline(always)]
    unsafe fn direction(&self, p: V::F, m: V::F, v: V::F) -> V::F {
        unsafe {
            let u = V::div(
                V::mul(m, self.inv_bc1),
                V::add(V::sqrt(V::mul(v, self.inv_bc2)), self.eps),
            );
            if self.decay { V::fma(self.wd, p, u) } else { u }
        }
    }
}

/// The canonical sums of squares (SPEC.md §7) of p and u per norm block, over chunks fed in
/// global-index order; each block's pair goes to `out[block - first]` when the block is done.
struct BlockNorms<V: Simd> {
    p: V::Acc,
    u: V::Acc,
    block: u64,
    first: u64,
    out: *mut [f64; 2],
}

impl<V: Simd> BlockNorms<V> {
    #[inline(always)]
    unsafe fn new(base: u64, out: *mut [f64; 2]) -> Self {
        unsafe {
            BlockNorms {
                p: V::acc_zero(),
                u: V::acc_zero(),
                block: u64::MAX,
                first: base / NORM_BLOCK as u64,
                out,
            }
        }
    }

    #[inline(always)]
    unsafe fn add(&mut self, p: V::F, u: V::F, e: u64) {
        unsafe {
            let block = e / NORM_BLOCK as u64;
            if block != self.block {
                self.close();
                self.block = block;
            }
            let lane = (e % NORM_LANES as u64) as usize;
            self.p = V::acc_add_squares(self.p, p, lane);
            self.u = V::acc_add_squares(self.u, u, lane);
        }
    }

    #[inline(always)]
    unsafe fn close(&mut self) {
        unsafe {
            if self.block != u64::MAX {
                *self.out.add((self.block - self.first) as usize) = [
                    fold_lanes(V::acc_lanes(self.p)),
                    fold_lanes(V::acc_lanes(self.u)),
                ];
                self.p = V::acc_zero();
                self.u = V::acc_zero();
            }
        }
    }
}

/// Pass 1: moments, and the norms of p and of u computed from the moments as stored; with
/// `KEEP`, u also goes to state slot 2 (the workspace's directions) for pass 2.
struct LambPass1<V: Simd, const KEEP: bool> {
    k: LambV<V>,
    omb1: V::F,
    beta2: V::F,
    omb2: V::F,
    norms: BlockNorms<V>,
}

impl<V: Simd, const KEEP: bool> LambPass1<V, KEEP> {
    #[inline(always)]
    unsafe fn new(c: &LambConsts, norms: BlockNorms<V>) -> Self {
        unsafe {
            LambPass1 {
                k: LambV::new(c),
                omb1: V::splat(c.one_minus_beta1),
                beta2: V::splat(c.beta2),
                omb2: V::splat(c.one_minus_beta2),
                norms,
            }
        }
    }
}

impl<V: Simd, const KEEP: bool> ElementOp<V> for LambPass1<V, KEEP> {
    const WRITE_W: bool = false;
    const WRITE_S: [bool; 3] = [true, true, KEEP];
    const READ_S: [bool; 3] = [true, true, false];

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(&mut self, v: &mut Vals<V>, e: u64, b: &mut Bufs<V, L>) {
        unsafe {
            let (m, vv) = moments::<V>(self.omb1, self.beta2, self.omb2, v.g, v.s[0], v.s[1]);
            let [r0, r1, _] = &mut b.rng_s;
            let m_stored = b.s0.as_stored(m, r0, e);
            let v_stored = b.s1.as_stored(vv, r1, e);
            // Staged lanes outside the slice hold zeros, so they add +0 to both sums.
            let u = self.k.direction(v.p, m_stored, v_stored);
            self.norms.add(v.p, u, e);
            v.s[0] = m;
            v.s[1] = vv;
            v.s[2] = u;
        }
    }
}

/// Pass 2: the weights, with u recomputed from the same stored moments, or with `KEPT` read
/// from state slot 0 where pass 1 kept it (the same value, without a second divide and square
/// root per element).
struct LambPass2<V: Simd, const KEPT: bool> {
    k: LambV<V>,
    neg_lr_ratio: V::F,
}

impl<V: Simd, const KEPT: bool> ElementOp<V> for LambPass2<V, KEPT> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [false; 3];

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V, L>) {
        unsafe {
            let u = if KEPT {
                v.s[0]
            } else {
                self.k.direction(v.p, v.s[0], v.s[1])
            };
            v.p = V::fma(self.neg_lr_ratio, u, v.p);
        }
    }
}

impl<V: Simd> LambV<V> {
    #[inline(always)]
    unsafe fn new(c: &LambConsts) -> Self {
        unsafe {
            LambV::<V> {
                inv_bc1: V::splat(c.inv_bc1),
                inv_bc2: V::splat(c.inv_bc2),
                eps: V::splat(c.eps),
                wd: V::splat(c.weight_decay),
                decay: decays(c.weight_decay),
            }
        }
    }
}

/// LAMB pass 1 over one tensor (or a piece of one): moments stored, and the canonical sums of
/// squares of p and u of every norm block the piece touches written to `out` in block order;
/// each u also to `kept` when given (one f32 per element of the piece).
/// A piece must not share a block with another piece (the parallel driver cuts at block edges).
#[inline(always)]
pub(crate) unsafe fn lamb_pass1<V: Simd>(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    out: &mut [[f64; 2]],
    kept: Option<&mut [f32]>,
) {
    unsafe {
        let n = t.weights.len();
        let base = t.stream.index_base;
        debug_assert_eq!(out.len(), crate::reference::norm::spanned_blocks(base, n));
        let norms = BlockNorms::new(base, out.as_mut_ptr());
        let mut d = DynBufs {
            w: Buf::weights(&mut t.weights),
            g: Some(Buf::grads(&t.grads)),
            s: [
                Some(Buf::state(&mut t.exp_avg)),
                Some(Buf::state(&mut t.exp_avg_sq)),
                None,
            ],
        };
        let st = &t.stream;
        match kept {
            Some(kept) => {
                debug_assert_eq!(kept.len(), n);
                d.s[2] = Some(Buf::F32(kept.as_mut_ptr()));
                let mut p1 = LambPass1::<V, true>::new(c, norms);
                drive_layouts!(
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p1,
                    [Has, Has, Has, Scratch],
                    no_sr_layouts
                );
                p1.norms.close();
            }
            None => {
                let mut p1 = LambPass1::<V, false>::new(c, norms);
                drive_layouts!(
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p1,
                    [Has, Has, Has, Lacks],
                    no_sr_layouts
                );
                p1.norms.close();
            }
        }
    }
}

/// LAMB pass 2 over one tensor (or a piece): `p = fma(-lr_ratio, u, p)`, u read from `kept`
/// when pass 1 kept it, else recomputed from the stored moments (the same value).
#[inline(always)]
pub(crate) unsafe fn lamb_pass2<V: Simd>(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    lr_ratio: f32,
    kept: Option<&[f32]>,
) {
    unsafe {
        let n = t.weights.len();
        let (base, st) = (t.stream.index_base, &t.stream);
        let (k, neg_lr_ratio) = (LambV::new(c), V::splat(-lr_ratio));
        let w = Buf::weights(&mut t.weights);
        match kept {
            Some(kept) => {
                debug_assert_eq!(kept.len(), n);
                // Read only: pass 2 has no store to slot 0.
                let d = DynBufs {
                    w,
                    g: None,
                    s: [Some(Buf::F32(kept.as_ptr().cast_mut())), None, None],
                };
                let mut p2 = LambPass2::<V, true> { k, neg_lr_ratio };
                drive_layouts!(
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p2,
                    [Lacks, Scratch, Lacks, Lacks],
                    no_sr_layouts
                );
            }
            None => {
                let d = DynBufs {
                    w,
                    g: None,
                    s: [
                        Some(Buf::state(&mut t.exp_avg)),
                        Some(Buf::state(&mut t.exp_avg_sq)),
                        None,
                    ],
                };
                let mut p2 = LambPass2::<V, false> { k, neg_lr_ratio };
                drive_layouts!(
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p2,
                    [Lacks, Has, Has, Lacks],
                    no_sr_layouts
                );
            }
        }
    }
}
