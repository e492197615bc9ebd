//! Adagrad on vectors (SPEC.md §6.3).

use super::*;
use crate::reference::adagrad::AdagradConsts;
use crate::tensors::AdagradTensor;

pub(super) struct AdagradOp<V: Simd> {
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
    // A NaN sum makes the square root, the quotient and the weights' FMA NaN (`clr = 0` too).
    const NAN_REACHES_W: bool = true;
    const DIVIDES: bool = true;

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        _e: u64,
        _b: &mut Bufs<V, L>,
        _drawn: ChunkBits<V>,
    ) {
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
    step_len: StepLen,
) {
    unsafe {
        let n = t.weights.len();
        let d = DynBufs {
            w: Buf::weights(&mut t.weights),
            g: Some(Buf::grads(&t.grads)),
            s: [None, Some(Buf::state(&mut t.sum)), None],
            step_len,
        };
        let mut op = AdagradOp::<V> {
            c: *c,
            neg_clr: V::splat(-c.clr),
            wd: V::splat(c.weight_decay),
            eps: V::splat(c.eps),
            decay: decays(c.weight_decay),
        };
        let (base, st) = (t.stream.index_base, &t.stream);
        drive_layouts!(
            V,
            n,
            base,
            ctx,
            st,
            d,
            &mut op,
            [Has, Lacks, Has, Lacks],
            all
        );
    }
}
