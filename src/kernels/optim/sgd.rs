//! SGD on vectors (SPEC.md §6.2).

use super::*;
use crate::reference::sgd::SgdConsts;
use crate::tensors::SgdTensor;

/// `PLAIN`: the step is known not to maximize, not to be the first, not Nesterov's, and without
/// dampening, so the chunk loop carries no test of those flags (callgrind: 6 of the 33
/// instructions of an AVX2 split-SGD chunk were the first three tests; LLVM did not unswitch the
/// loop), and no multiplication by `one_minus_dampening`, which is then 1.
pub(super) struct SgdOp<V: Simd, const PLAIN: bool> {
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
    // A NaN momentum buffer reaches the weights' FMA through `g` (Nesterov's FMA keeps it, and
    // the buffer is present only with `momentum != 0`), and `-lr * NaN` is NaN for any `lr`.
    const NAN_REACHES_W: bool = true;

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        _e: u64,
        _b: &mut Bufs<V, L>,
        _drawn: ChunkBits<V>,
    ) {
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
                } else if PLAIN {
                    // `1 · g` is `g` (a NaN's payload aside, and every NaN stored is made
                    // canonical): one multiplication fewer per chunk, which on Zen 4 takes a cycle
                    // of the FMA pipes that the rounds need too.
                    V::fma(self.momentum, v.s[0], g)
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
pub(crate) unsafe fn sgd<V: Simd>(
    c: &SgdConsts,
    ctx: &StepContext,
    t: &mut SgdTensor<'_>,
    step_len: StepLen,
) {
    unsafe {
        if c.maximize || c.first_step || c.nesterov || c.one_minus_dampening != 1.0 {
            sgd_op::<V, false>(c, ctx, t, step_len)
        } else {
            sgd_op::<V, true>(c, ctx, t, step_len)
        }
    }
}

#[inline(always)]
unsafe fn sgd_op<V: Simd, const PLAIN: bool>(
    c: &SgdConsts,
    ctx: &StepContext,
    t: &mut SgdTensor<'_>,
    step_len: StepLen,
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
            step_len,
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
        // Without momentum there is no state, so of the stochastic layouts only bf16-SR weights
        // differs from IPEX's and all f32 (the others would be copies of those).
        if s0.is_some() {
            drive_layouts!(
                V,
                n,
                base,
                ctx,
                st,
                d,
                &mut op,
                [Has, Has, Lacks, Lacks],
                all
            );
        } else {
            drive_layouts!(
                V,
                n,
                base,
                ctx,
                st,
                d,
                &mut op,
                [Has, Lacks, Lacks, Lacks],
                sr_weights
            );
        }
    }
}
