//! The four optimizers (SPEC.md §5–7), each written once: generic over the lane type, with every
//! storage kind handled by the shared load/store below.

use super::round::{canonicalize, from_bf16, to_bf16};
use super::{Chunk, GroupBits, Stage, for_each_chunk, stage_in, stage_out};
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

    /// The bits `v` is stored as (NaN canonicalised, then narrowed for bf16); `r` gives the
    /// chunk's random bits and is called only for stochastic rounding.
    #[inline(always)]
    unsafe fn encode<V: Simd>(&self, v: V::F, r: impl FnOnce() -> V::U) -> V::U {
        unsafe {
            let b = V::to_bits(canonicalize::<V>(v));
            match *self {
                Buf::F32(_) | Buf::Split(..) => b,
                Buf::Bf16(_, rounding) => {
                    let r = if rounding == Rounding::Stochastic {
                        r()
                    } else {
                        V::splat_u(0)
                    };
                    to_bf16::<V>(b, rounding, r)
                }
            }
        }
    }

    /// What reading the buffer back would give after storing `v`.
    #[inline(always)]
    unsafe fn as_stored<V: Simd>(&self, v: V::F, r: impl FnOnce() -> V::U) -> V::F {
        unsafe {
            let b = self.encode::<V>(v, r);
            match *self {
                Buf::Bf16(..) => from_bf16::<V>(b),
                _ => V::from_bits(b),
            }
        }
    }

    #[inline(always)]
    unsafe fn store<V: Simd>(&self, off: isize, v: V::F, r: impl FnOnce() -> V::U) {
        unsafe {
            let b = self.encode::<V>(v, r);
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

const STATE_PURPOSES: [Purpose; 3] = [
    Purpose::FirstMoment,
    Purpose::SecondMoment,
    Purpose::MaxSecondMoment,
];

impl<V: Simd> Bufs<V> {
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
                rng_s: STATE_PURPOSES.map(|p| GroupBits::new(coord(ctx, stream, p))),
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

/// Which buffers a pass writes back: weights, then each state slot.
#[derive(Clone, Copy)]
struct Writes {
    w: bool,
    s: [bool; 3],
}

/// The element-wise driver: loads each chunk, lets `op` transform it, stores what `writes` says.
/// `op` gets the chunk and the buffers (for [`Buf::as_stored`] and the RNG streams).
#[inline(always)]
unsafe fn drive<V: Simd>(
    n: usize,
    base: u64,
    b: &mut Bufs<V>,
    writes: Writes,
    mut op: impl FnMut(&mut Vals<V>, &Chunk, &mut Bufs<V>),
) {
    unsafe {
        let zero = V::splat(0.0);
        let mut body = |w: Buf,
                        g: Option<Buf>,
                        s: [Option<Buf>; 3],
                        off: isize,
                        c: &Chunk,
                        b: &mut Bufs<V>| {
            let mut v = Vals {
                p: w.load::<V>(off),
                g: g.map_or(zero, |g| g.load::<V>(off)),
                s: s.map(|s| s.map_or(zero, |s| s.load::<V>(off))),
            };
            op(&mut v, c, b);
            for (i, rng) in b.rng_s.iter_mut().enumerate() {
                if let (true, Some(sb)) = (writes.s[i], s[i]) {
                    sb.store::<V>(off, v.s[i], || rng.r16(c.e));
                }
            }
            if writes.w {
                let rng = &mut b.rng_w;
                w.store::<V>(off, v.p, || rng.r16(c.e));
            }
        };
        for_each_chunk::<V>(base, n, |c| {
            let (w, g, s) = (b.w, b.g, b.s);
            if c.is_full::<V>() {
                body(w, g, s, c.off, &c, b);
            } else {
                let mut st = [
                    Stage::new(),
                    Stage::new(),
                    Stage::new(),
                    Stage::new(),
                    Stage::new(),
                ];
                let [sw, sg, s0, s1, s2] = &mut st;
                let w2 = w.stage(sw, &c);
                let g2 = g.map(|g| g.stage(sg, &c));
                let s2v = [
                    s[0].map(|x| x.stage(s0, &c)),
                    s[1].map(|x| x.stage(s1, &c)),
                    s[2].map(|x| x.stage(s2, &c)),
                ];
                body(w2, g2, s2v, 0, &c, b);
                if writes.w {
                    w.unstage(&st[0], &c);
                }
                for i in 0..3 {
                    if let (true, Some(sb)) = (writes.s[i], s[i]) {
                        sb.unstage(&st[2 + i], &c);
                    }
                }
            }
        });
    }
}

#[inline(always)]
unsafe fn neg<V: Simd>(x: V::F) -> V::F {
    unsafe { V::from_bits(V::xor_u(V::to_bits(x), V::splat_u(0x8000_0000))) }
}

// ---------------------------------------------------------------------------------------------

#[inline(always)]
pub(crate) unsafe fn sgd<V: Simd>(c: &SgdConsts, ctx: &StepContext, t: &mut SgdTensor<'_>) {
    unsafe {
        let n = t.weights.len();
        let s0 = t.momentum.as_mut().map(Buf::state);
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            Some(Buf::grads(&t.grads)),
            [s0, None, None],
        );
        let (neg_lr, mom, omd, wd) = (
            V::splat(-c.lr),
            V::splat(c.momentum),
            V::splat(c.one_minus_dampening),
            V::splat(c.weight_decay),
        );
        let writes = Writes {
            w: true,
            s: [c.use_momentum, false, false],
        };
        drive::<V>(n, t.stream.index_base, &mut b, writes, |v, _, _| {
            let mut g = if c.maximize { neg::<V>(v.g) } else { v.g };
            if c.weight_decay != 0.0 {
                g = V::fma(wd, v.p, g);
            }
            if c.use_momentum {
                let buf = if c.first_step {
                    g
                } else {
                    V::fma(mom, v.s[0], V::mul(omd, g))
                };
                g = if c.nesterov { V::fma(mom, buf, g) } else { buf };
                v.s[0] = buf;
            }
            v.p = V::fma(neg_lr, g, v.p);
        });
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
        let (neg_clr, wd, eps) = (V::splat(-c.clr), V::splat(c.weight_decay), V::splat(c.eps));
        let writes = Writes {
            w: true,
            s: [false, true, false],
        };
        drive::<V>(n, t.stream.index_base, &mut b, writes, |v, _, _| {
            let mut g = if c.maximize { neg::<V>(v.g) } else { v.g };
            if c.weight_decay != 0.0 {
                g = V::fma(wd, v.p, g);
            }
            let sum = V::fma(g, g, v.s[1]);
            let denom = V::add(V::sqrt(sum), eps);
            v.s[1] = sum;
            v.p = V::fma(neg_clr, V::div(g, denom), v.p);
        });
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

#[inline(always)]
pub(crate) unsafe fn adam<V: Simd>(c: &AdamConsts, ctx: &StepContext, t: &mut AdamTensor<'_>) {
    unsafe {
        let n = t.weights.len();
        let s = [
            Some(Buf::state(&mut t.exp_avg)),
            Some(Buf::state(&mut t.exp_avg_sq)),
            t.max_exp_avg_sq.as_mut().map(Buf::state),
        ];
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            Some(Buf::grads(&t.grads)),
            s,
        );
        let (omb1, beta2, omb2) = (
            V::splat(c.one_minus_beta1),
            V::splat(c.beta2),
            V::splat(c.one_minus_beta2),
        );
        let (neg_step, inv_sqrt_bc2, eps) = (
            V::splat(-c.step_size),
            V::splat(c.inv_sqrt_bc2),
            V::splat(c.eps),
        );
        let (wd, decay) = (V::splat(c.weight_decay), V::splat(c.decay_factor));
        let writes = Writes {
            w: true,
            s: [true, true, c.amsgrad],
        };
        drive::<V>(n, t.stream.index_base, &mut b, writes, |v, _, _| {
            let mut g = if c.maximize { neg::<V>(v.g) } else { v.g };
            let mut p = v.p;
            if c.use_weight_decay {
                if c.decoupled {
                    p = V::mul(p, decay);
                } else {
                    g = V::fma(wd, p, g);
                }
            }
            let (m, vv) = moments::<V>(omb1, beta2, omb2, g, v.s[0], v.s[1]);
            let v_used = if c.amsgrad {
                let bigger = V::mask_or(V::gt(vv, v.s[2]), V::is_nan(vv));
                v.s[2] = V::select(bigger, vv, v.s[2]);
                v.s[2]
            } else {
                vv
            };
            let denom = V::fma(V::sqrt(v_used), inv_sqrt_bc2, eps);
            v.s[0] = m;
            v.s[1] = vv;
            v.p = V::fma(neg_step, V::div(m, denom), p);
        });
    }
}

/// LAMB's update direction from the weight and the stored moments.
#[inline(always)]
unsafe fn direction<V: Simd>(c: &LambConsts, k: &LambV<V>, p: V::F, m: V::F, v: V::F) -> V::F {
    unsafe {
        let u = V::div(
            V::mul(m, k.inv_bc1),
            V::add(V::sqrt(V::mul(v, k.inv_bc2)), k.eps),
        );
        if c.weight_decay != 0.0 {
            V::fma(k.wd, p, u)
        } else {
            u
        }
    }
}

struct LambV<V: Simd> {
    inv_bc1: V::F,
    inv_bc2: V::F,
    eps: V::F,
    wd: V::F,
}

/// Canonical sums of squares (SPEC.md §7) over chunks fed in global-index order.
struct Norm<V: Simd> {
    acc: V::Acc,
    block: u64,
    total: f64,
}

impl<V: Simd> Norm<V> {
    unsafe fn new() -> Self {
        Norm {
            acc: unsafe { V::acc_zero() },
            block: u64::MAX,
            total: 0.0,
        }
    }

    #[inline(always)]
    unsafe fn add(&mut self, x: V::F, e: u64) {
        unsafe {
            let block = e / NORM_BLOCK as u64;
            if block != self.block {
                self.close();
                self.block = block;
            }
            self.acc = V::acc_add_squares(self.acc, x, (e % NORM_LANES as u64) as usize);
        }
    }

    unsafe fn close(&mut self) {
        unsafe {
            if self.block != u64::MAX {
                self.total += fold_lanes(V::acc_lanes(self.acc));
                self.acc = V::acc_zero();
            }
        }
    }

    unsafe fn finish(mut self) -> f64 {
        unsafe { self.close() };
        self.total
    }
}

#[inline(always)]
pub(crate) unsafe fn lamb<V: Simd>(c: &LambConsts, ctx: &StepContext, t: &mut LambTensor<'_>) {
    unsafe {
        let n = t.weights.len();
        let base = t.stream.index_base;
        let s = [
            Some(Buf::state(&mut t.exp_avg)),
            Some(Buf::state(&mut t.exp_avg_sq)),
            None,
        ];
        let mut b = Bufs::<V>::new(
            ctx,
            &t.stream,
            Buf::weights(&mut t.weights),
            Some(Buf::grads(&t.grads)),
            s,
        );
        let k = LambV::<V> {
            inv_bc1: V::splat(c.inv_bc1),
            inv_bc2: V::splat(c.inv_bc2),
            eps: V::splat(c.eps),
            wd: V::splat(c.weight_decay),
        };
        let (omb1, beta2, omb2) = (
            V::splat(c.one_minus_beta1),
            V::splat(c.beta2),
            V::splat(c.one_minus_beta2),
        );

        // Pass 1: moments, and the norms of p and of u from the moments as stored.
        let (mut np, mut nu) = (Norm::<V>::new(), Norm::<V>::new());
        let writes = Writes {
            w: false,
            s: [true, true, false],
        };
        drive::<V>(n, base, &mut b, writes, |v, ch, bufs| {
            let (m, vv) = moments::<V>(omb1, beta2, omb2, v.g, v.s[0], v.s[1]);
            let (sm, sv) = (
                bufs.s[0].unwrap_or(Buf::F32(core::ptr::null_mut())),
                bufs.s[1].unwrap_or(Buf::F32(core::ptr::null_mut())),
            );
            let (r0, r1) = bufs.rng_s.split_at_mut(1);
            let m_stored = sm.as_stored::<V>(m, || r0[0].r16(ch.e));
            let v_stored = sv.as_stored::<V>(vv, || r1[0].r16(ch.e));
            // Staged lanes outside the slice hold zeros, so they add +0 to both sums.
            np.add(v.p, ch.e);
            nu.add(direction::<V>(c, &k, v.p, m_stored, v_stored), ch.e);
            v.s[0] = m;
            v.s[1] = vv;
        });
        let lr_ratio = V::splat(-crate::reference::lamb::scaled_lr(
            c,
            np.finish(),
            nu.finish(),
        ));

        // Pass 2: the weights, with u recomputed from the same stored moments.
        b.g = None;
        let writes = Writes {
            w: true,
            s: [false; 3],
        };
        drive::<V>(n, base, &mut b, writes, |v, _, _| {
            v.p = V::fma(lr_ratio, direction::<V>(c, &k, v.p, v.s[0], v.s[1]), v.p);
        });
    }
}
