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
    /// Whether square roots are taken off the divider ([`crate::cpu::roots_off_divider`]): which
    /// chunks', [`off_divider`] says.
    split_roots: bool,
}

impl<V: Simd> ElementOp<V> for AdagradOp<V> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [false, true, false];
    // A NaN sum makes the square root, the quotient and the weights' FMA NaN (`clr = 0` too).
    const NAN_REACHES_W: bool = true;
    const DIVIDES: bool = true;
    const BITS_IN_LOOP_UP_TO: usize = 4;

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    ) {
        unsafe { self.apply_in_group(v, e, b, drawn, 0, 1) }
    }

    #[inline(always)]
    unsafe fn apply_in_group<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        _b: &mut Bufs<V, L>,
        _drawn: ChunkBits<V>,
        i: usize,
        group: usize,
    ) {
        unsafe {
            let mut g = if self.c.maximize { neg::<V>(v.g) } else { v.g };
            if self.decay {
                g = V::fma(self.wd, v.p, g);
            }
            let sum = V::fma(g, g, v.s[1]);
            let off = off_divider::<V>(self.split_roots, L::MAY_DRAW_BITS, L::W::WIDE, e, i, group);
            let denom = V::add(root::<V>(sum, off), self.eps);
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
            split_roots: V::SQRT_OFF_DIVIDER && crate::cpu::roots_off_divider(),
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

/// Whether chunk `i` of a group of `group` at global index `e` takes its square root off the
/// divider (`Simd::sqrt_off_divider`), where `split_roots` ([`crate::cpu::roots_off_divider`]):
/// every other chunk, by its place in a group (a constant once inlined) or, a chunk alone, by its
/// index. A test on the index inside a group's loop cost split Adagrad the gain (1.00x the time at
/// 64K on the Emerald Rapids VM, against 0.80x). Where a store may round stochastically (`draws`),
/// the second chunk of every other group, and no chunk alone: there the sequence shares the pipes
/// with the AES rounds, and every other chunk left those layouts level at 64K and 1.13-1.16x the
/// time at 1M on Emerald Rapids CPUs, where every fourth took them 0.89-0.99x at 64K and 0.90-0.93x
/// at 1M (a 16-core host, medians of two sets); a layout stepped chunk by chunk, testing the index,
/// took 1.06x. With f32 weights, which leave the pipes more room than split or bf16 weights, the
/// second chunk of three groups in four: f32 weights with bf16-SR states 0.94-0.96x the time at
/// 64K on the Xeon VM with 480 MiB L3, level at 1M and 64M; 0.96x at 64K and 0.95-0.97x at 1M on
/// a 16-core Emerald Rapids host (docs/DESIGN.md).
#[inline(always)]
fn off_divider<V: Simd>(
    split_roots: bool,
    draws: bool,
    f32_weights: bool,
    e: u64,
    i: usize,
    group: usize,
) -> bool {
    V::SQRT_OFF_DIVIDER
        && split_roots
        && if group >= 2 {
            let g = e / (2 * V::LANES as u64);
            let group_takes = match (draws, f32_weights) {
                (false, _) => true,
                (true, false) => g % 2 == 1,
                (true, true) => !g.is_multiple_of(4),
            };
            i % 2 == 1 && group_takes
        } else {
            !draws && (e / V::LANES as u64) % 2 == 1
        }
}

/// The square root of `x` by the divider or off it ([`off_divider`]): the same bits.
#[inline(always)]
unsafe fn root<V: Simd>(x: V::F, off_divider: bool) -> V::F {
    unsafe {
        if off_divider {
            V::sqrt_off_divider(x)
        } else {
            V::sqrt(x)
        }
    }
}
