//! The four optimizers (SPEC.md §5–7), each written once: generic over the lane type, with every
//! storage kind handled by the shared load/store below.

use super::round::{canonicalize, from_bf16, to_bf16};
use super::{Chunk, ChunkBody, GroupBits, Stage, run_chunks, stage_in, stage_out};
use crate::arch::Simd;
use crate::optim::{
    AdagradConsts, AdagradTensor, AdamConsts, AdamTensor, LambConsts, LambTensor, SgdConsts,
    SgdTensor,
};
use crate::reference::norm::{NORM_BLOCK, NORM_LANES, fold_lanes};
use crate::reference::round::Rounding;
use crate::rng::{Purpose, StepContext, TensorStream, coord};
use crate::storage::{Grads, State, Weights};

/// One buffer as raw pointers to element 0 of the slice. Gradients are never written.
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

    /// `LANES` elements from local index `off`, widened to f32 (exact).
    #[inline(always)]
    unsafe fn load<V: Simd>(&self, off: isize) -> V::F {
        unsafe {
            match *self {
                Buf::F32(p) => V::load(p.offset(off)),
                Buf::Split(t, l) => V::from_bits(V::or_u(
                    V::shl::<16>(V::load_u16(t.offset(off))),
                    V::load_u16(l.offset(off)),
                )),
                Buf::Bf16(p, _) => from_bf16::<V>(V::load_u16(p.offset(off))),
            }
        }
    }

    /// The bits `v` is stored as (NaN canonicalised, then narrowed for bf16); `rng` supplies the
    /// random bits of the chunk at global index `e`, drawn only for stochastic rounding.
    #[inline(always)]
    unsafe fn encode<V: Simd>(&self, v: V::F, rng: &mut GroupBits<V>, e: u64) -> V::U {
        unsafe {
            let b = V::to_bits(canonicalize::<V>(v));
            match *self {
                Buf::F32(_) | Buf::Split(..) => b,
                Buf::Bf16(_, rounding) => {
                    let r = rng.for_rounding(rounding, e);
                    to_bf16::<V>(b, rounding, r)
                }
            }
        }
    }

    /// What reading the buffer back would give after storing `v`.
    #[inline(always)]
    unsafe fn as_stored<V: Simd>(&self, v: V::F, rng: &mut GroupBits<V>, e: u64) -> V::F {
        unsafe {
            let b = self.encode::<V>(v, rng, e);
            match *self {
                Buf::Bf16(..) => from_bf16::<V>(b),
                _ => V::from_bits(b),
            }
        }
    }

    #[inline(always)]
    unsafe fn load_or<V: Simd>(b: Option<Buf>, off: isize, zero: V::F) -> V::F {
        unsafe {
            match b {
                Some(b) => b.load::<V>(off),
                None => zero,
            }
        }
    }

    #[inline(always)]
    unsafe fn store<V: Simd>(&self, off: isize, v: V::F, rng: &mut GroupBits<V>, e: u64) {
        unsafe {
            let b = self.encode::<V>(v, rng, e);
            match *self {
                Buf::F32(p) => V::store(p.offset(off), V::from_bits(b)),
                Buf::Split(t, l) => {
                    V::store_u16(t.offset(off), V::shr::<16>(b));
                    V::store_u16(l.offset(off), b);
                }
                Buf::Bf16(p, _) => V::store_u16(p.offset(off), b),
            }
        }
    }

    /// Copies the chunk's valid lanes into `st` and returns a buffer over the stage (lane l at 0 + l).
    #[inline(always)]
    unsafe fn stage(&self, st: &mut Stage, c: &Chunk) -> Buf {
        unsafe {
            match *self {
                Buf::F32(p) => {
                    stage_in(p, st.f.as_mut_ptr(), c);
                    Buf::F32(st.f.as_mut_ptr())
                }
                Buf::Split(t, l) => {
                    stage_in(t, st.h.as_mut_ptr(), c);
                    stage_in(l, st.h2.as_mut_ptr(), c);
                    Buf::Split(st.h.as_mut_ptr(), st.h2.as_mut_ptr())
                }
                Buf::Bf16(p, r) => {
                    stage_in(p, st.h.as_mut_ptr(), c);
                    Buf::Bf16(st.h.as_mut_ptr(), r)
                }
            }
        }
    }

    /// Copies the valid lanes of a stage back.
    #[inline(always)]
    unsafe fn unstage(&self, st: &Stage, c: &Chunk) {
        unsafe {
            match *self {
                Buf::F32(p) => stage_out(st.f.as_ptr(), p, c),
                Buf::Split(t, l) => {
                    stage_out(st.h.as_ptr(), t, c);
                    stage_out(st.h2.as_ptr(), l, c);
                }
                Buf::Bf16(p, _) => stage_out(st.h.as_ptr(), p, c),
            }
        }
    }
}

/// The buffers of one tensor: weights, gradients, and up to three states (slot 0 = first
/// moment / momentum, 1 = second moment / Adagrad sum, 2 = AMSGrad max), with their RNG streams.
struct Bufs<V: Simd> {
    w: Buf,
    g: Option<Buf>,
    s: [Option<Buf>; 3],
    rng_w: GroupBits<V>,
    rng_s: [GroupBits<V>; 3],
}

impl<V: Simd> Bufs<V> {
    #[inline(always)]
    unsafe fn new(
        ctx: &StepContext,
        stream: &TensorStream,
        w: Buf,
        g: Option<Buf>,
        s: [Option<Buf>; 3],
    ) -> Self {
        unsafe {
            Bufs {
                w,
                g,
                s,
                rng_w: GroupBits::new(coord(ctx, stream, Purpose::Weights)),
                rng_s: [
                    GroupBits::new(coord(ctx, stream, Purpose::FirstMoment)),
                    GroupBits::new(coord(ctx, stream, Purpose::SecondMoment)),
                    GroupBits::new(coord(ctx, stream, Purpose::MaxSecondMoment)),
                ],
            }
        }
    }
}

/// One chunk's values: weights, gradients, states.
struct Vals<V: Simd> {
    p: V::F,
    g: V::F,
    s: [V::F; 3],
}

/// One optimizer's (or pass's) arithmetic on a chunk. A trait with an always-inlined method
/// rather than a closure, so the code compiles with the entry point's target features.
trait ElementOp<V: Simd> {
    /// Whether the pass writes the weights, and each state slot.
    const WRITE_W: bool;
    const WRITE_S: [bool; 3];
    /// Transforms the loaded values of the chunk at global index `e`.
    unsafe fn apply(&mut self, v: &mut Vals<V>, e: u64, b: &mut Bufs<V>);
}

#[inline(always)]
unsafe fn store_slot<V: Simd>(
    write: bool,
    slot: Option<Buf>,
    off: isize,
    v: V::F,
    rng: &mut GroupBits<V>,
    e: u64,
) {
    if write && let Some(b) = slot {
        unsafe { b.store::<V>(off, v, rng, e) }
    }
}

/// Loads one chunk from `(w, g, s)` at `off`, applies `op`, stores what the op writes.
#[inline(always)]
unsafe fn process<V: Simd, O: ElementOp<V>>(
    op: &mut O,
    b: &mut Bufs<V>,
    w: Buf,
    g: Option<Buf>,
    s: [Option<Buf>; 3],
    off: isize,
    e: u64,
) {
    unsafe {
        let zero = V::splat(0.0);
        let mut v = Vals {
            p: w.load::<V>(off),
            g: Buf::load_or::<V>(g, off, zero),
            s: [
                Buf::load_or::<V>(s[0], off, zero),
                Buf::load_or::<V>(s[1], off, zero),
                Buf::load_or::<V>(s[2], off, zero),
            ],
        };
        op.apply(&mut v, e, b);
        // Spelled out per slot: a loop over the slots was not unrolled and cost a quarter of all
        // instructions (callgrind).
        let [r0, r1, r2] = &mut b.rng_s;
        store_slot::<V>(O::WRITE_S[0], s[0], off, v.s[0], r0, e);
        store_slot::<V>(O::WRITE_S[1], s[1], off, v.s[1], r1, e);
        store_slot::<V>(O::WRITE_S[2], s[2], off, v.s[2], r2, e);
        if O::WRITE_W {
            w.store::<V>(off, v.p, &mut b.rng_w, e);
        }
    }
}

/// The element-wise driver: a [`ChunkBody`] that runs full chunks through [`process`] in place
/// and stages partial ones.
struct Driver<'a, V: Simd, O: ElementOp<V>> {
    b: &'a mut Bufs<V>,
    op: &'a mut O,
    w: Buf,
    g: Option<Buf>,
    s: [Option<Buf>; 3],
}

impl<V: Simd, O: ElementOp<V>> ChunkBody<V> for Driver<'_, V, O> {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe { process::<V, O>(self.op, self.b, self.w, self.g, self.s, off, e) }
    }

    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let (w, g, s) = (self.w, self.g, self.s);
            let mut st = [
                Stage::new(),
                Stage::new(),
                Stage::new(),
                Stage::new(),
                Stage::new(),
            ];
            let [sw, sg, s0, s1, s2] = &mut st;
            let w2 = w.stage(sw, c);
            let g2 = match g {
                Some(g) => Some(g.stage(sg, c)),
                None => None,
            };
            let stage = |slot: Option<Buf>, st: &mut Stage| match slot {
                Some(b) => Some(b.stage(st, c)),
                None => None,
            };
            let s_st = [stage(s[0], s0), stage(s[1], s1), stage(s[2], s2)];
            process::<V, O>(self.op, self.b, w2, g2, s_st, 0, c.e);
            if O::WRITE_W {
                w.unstage(&st[0], c);
            }
            for (i, slot) in s.into_iter().enumerate() {
                if O::WRITE_S[i]
                    && let Some(b) = slot
                {
                    b.unstage(&st[2 + i], c);
                }
            }
        }
    }
}

/// Runs `op` over the tensor of `n` elements starting at global index `base`.
#[inline(always)]
unsafe fn drive<V: Simd, O: ElementOp<V>>(n: usize, base: u64, b: &mut Bufs<V>, op: &mut O) {
    unsafe {
        let (w, g, s) = (b.w, b.g, b.s);
        let mut d = Driver { b, op, w, g, s };
        run_chunks::<V, _>(base, n, &mut d);
    }
}

#[inline(always)]
unsafe fn neg<V: Simd>(x: V::F) -> V::F {
    unsafe { V::from_bits(V::xor_u(V::to_bits(x), V::splat_u(0x8000_0000))) }
}

// ---------------------------------------------------------------------------------------------

struct SgdOp<V: Simd> {
    c: SgdConsts,
    neg_lr: V::F,
    momentum: V::F,
    omd: V::F,
    wd: V::F,
}

impl<V: Simd> ElementOp<V> for SgdOp<V> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [true, false, false];

    #[inline(always)]
    unsafe fn apply(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V>) {
        unsafe {
            let c = &self.c;
            let mut g = if c.maximize { neg::<V>(v.g) } else { v.g };
            if c.weight_decay != 0.0 {
                g = V::fma(self.wd, v.p, g);
            }
            if c.use_momentum {
                let buf = if c.first_step {
                    g
                } else {
                    V::fma(self.momentum, v.s[0], V::mul(self.omd, g))
                };
                g = if c.nesterov {
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
        let n = t.weights.len();
        // Without momentum there is no buffer (slot 0 is None), so nothing is written there.
        let s0 = match t.momentum.as_mut() {
            Some(m) => Some(Buf::state(m)),
            None => None,
        };
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            Some(Buf::grads(&t.grads)),
            [s0, None, None],
        );
        let mut op = SgdOp::<V> {
            c: *c,
            neg_lr: V::splat(-c.lr),
            momentum: V::splat(c.momentum),
            omd: V::splat(c.one_minus_dampening),
            wd: V::splat(c.weight_decay),
        };
        drive::<V, _>(n, t.stream.index_base, &mut b, &mut op);
    }
}

struct AdagradOp<V: Simd> {
    c: AdagradConsts,
    neg_clr: V::F,
    wd: V::F,
    eps: V::F,
}

impl<V: Simd> ElementOp<V> for AdagradOp<V> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [false, true, false];

    #[inline(always)]
    unsafe fn apply(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V>) {
        unsafe {
            let mut g = if self.c.maximize { neg::<V>(v.g) } else { v.g };
            if self.c.weight_decay != 0.0 {
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
        let s1 = Some(Buf::state(&mut t.sum));
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            Some(Buf::grads(&t.grads)),
            [None, s1, None],
        );
        let mut op = AdagradOp::<V> {
            c: *c,
            neg_clr: V::splat(-c.clr),
            wd: V::splat(c.weight_decay),
            eps: V::splat(c.eps),
        };
        drive::<V, _>(n, t.stream.index_base, &mut b, &mut op);
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
    unsafe fn apply(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V>) {
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
            let v_used = if c.amsgrad {
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
        let s = [
            Some(Buf::state(&mut t.exp_avg)),
            Some(Buf::state(&mut t.exp_avg_sq)),
            s2,
        ];
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            Some(Buf::grads(&t.grads)),
            s,
        );
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
        drive::<V, _>(n, t.stream.index_base, &mut b, &mut op);
    }
}

/// LAMB's splatted constants.
#[derive(Clone, Copy)]
struct LambV<V: Simd> {
    c: LambConsts,
    inv_bc1: V::F,
    inv_bc2: V::F,
    eps: V::F,
    wd: V::F,
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
            if self.c.weight_decay != 0.0 {
                V::fma(self.wd, p, u)
            } else {
                u
            }
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

/// Pass 1: moments, and the norms of p and of u computed from the moments as stored.
struct LambPass1<V: Simd> {
    k: LambV<V>,
    omb1: V::F,
    beta2: V::F,
    omb2: V::F,
    sm: Buf,
    sv: Buf,
    norms: BlockNorms<V>,
}

impl<V: Simd> ElementOp<V> for LambPass1<V> {
    const WRITE_W: bool = false;
    const WRITE_S: [bool; 3] = [true, true, false];

    #[inline(always)]
    unsafe fn apply(&mut self, v: &mut Vals<V>, e: u64, b: &mut Bufs<V>) {
        unsafe {
            let (m, vv) = moments::<V>(self.omb1, self.beta2, self.omb2, v.g, v.s[0], v.s[1]);
            let [r0, r1, _] = &mut b.rng_s;
            let m_stored = self.sm.as_stored::<V>(m, r0, e);
            let v_stored = self.sv.as_stored::<V>(vv, r1, e);
            // Staged lanes outside the slice hold zeros, so they add +0 to both sums.
            let u = self.k.direction(v.p, m_stored, v_stored);
            self.norms.add(v.p, u, e);
            v.s[0] = m;
            v.s[1] = vv;
        }
    }
}

/// Pass 2: the weights, with u recomputed from the same stored moments.
struct LambPass2<V: Simd> {
    k: LambV<V>,
    neg_lr_ratio: V::F,
}

impl<V: Simd> ElementOp<V> for LambPass2<V> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [false; 3];

    #[inline(always)]
    unsafe fn apply(&mut self, v: &mut Vals<V>, _e: u64, _b: &mut Bufs<V>) {
        unsafe {
            v.p = V::fma(
                self.neg_lr_ratio,
                self.k.direction(v.p, v.s[0], v.s[1]),
                v.p,
            );
        }
    }
}

impl<V: Simd> LambV<V> {
    #[inline(always)]
    unsafe fn new(c: &LambConsts) -> Self {
        unsafe {
            LambV::<V> {
                c: *c,
                inv_bc1: V::splat(c.inv_bc1),
                inv_bc2: V::splat(c.inv_bc2),
                eps: V::splat(c.eps),
                wd: V::splat(c.weight_decay),
            }
        }
    }
}

/// LAMB pass 1 over one tensor (or a piece of one): moments stored, and the canonical sums of
/// squares of p and u of every norm block the piece touches written to `out` in block order.
/// A piece must not share a block with another piece (the parallel driver cuts at block edges).
#[inline(always)]
pub(crate) unsafe fn lamb_pass1<V: Simd>(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    out: &mut [[f64; 2]],
) {
    unsafe {
        let n = t.weights.len();
        let base = t.stream.index_base;
        debug_assert_eq!(out.len(), crate::parallel::blocks(base, n));
        let (sm, sv) = (Buf::state(&mut t.exp_avg), Buf::state(&mut t.exp_avg_sq));
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            Some(Buf::grads(&t.grads)),
            [Some(sm), Some(sv), None],
        );
        let mut p1 = LambPass1::<V> {
            k: LambV::new(c),
            omb1: V::splat(c.one_minus_beta1),
            beta2: V::splat(c.beta2),
            omb2: V::splat(c.one_minus_beta2),
            sm,
            sv,
            norms: BlockNorms::new(base, out.as_mut_ptr()),
        };
        drive::<V, _>(n, base, &mut b, &mut p1);
        p1.norms.close();
    }
}

/// LAMB pass 2 over one tensor (or a piece): `p = fma(-lr_ratio, u, p)`.
#[inline(always)]
pub(crate) unsafe fn lamb_pass2<V: Simd>(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    lr_ratio: f32,
) {
    unsafe {
        let n = t.weights.len();
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            None,
            [
                Some(Buf::state(&mut t.exp_avg)),
                Some(Buf::state(&mut t.exp_avg_sq)),
                None,
            ],
        );
        let mut p2 = LambPass2::<V> {
            k: LambV::new(c),
            neg_lr_ratio: V::splat(-lr_ratio),
        };
        drive::<V, _>(n, t.stream.index_base, &mut b, &mut p2);
    }
}
