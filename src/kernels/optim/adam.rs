//! Adam / AdamW on vectors (SPEC.md §6.4), and the moment updates LAMB shares.

use super::*;
use crate::reference::adam::AdamConsts;
use crate::tensors::AdamTensor;

/// The moment updates shared by Adam and LAMB.
#[inline(always)]
pub(super) unsafe fn moments<V: Simd>(
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

/// `HEAD_AHEAD`: whether the in-order loop runs the next group's moments and square roots before
/// this group's divisions, NaN tests and stores ([`ElementOp::PIPELINED`]).
pub(super) struct AdamOp<V: Simd, const HEAD_AHEAD: bool = false> {
    c: AdamConsts,
    omb1: V::F,
    beta2: V::F,
    omb2: V::F,
    neg_step: V::F,
    inv_sqrt_bc2: V::F,
    eps: V::F,
    wd: V::F,
    /// AdamW's `decay_factor` where it decays the weights, else 1.
    decay: V::F,
    /// The sign bit where `maximize`, else zero (`Simd::FLAGS_AS_ARITHMETIC`).
    sign: V::U,
    /// Adam's weight decay, added to the gradient (`Simd::FLAGS_AS_ARITHMETIC`).
    coupled_decay: bool,
}

impl<V: Simd, const HEAD_AHEAD: bool> ElementOp<V> for AdamOp<V, HEAD_AHEAD> {
    const WRITE_W: bool = true;
    // Slot 2 is None unless amsgrad, so "writing" it is a no-op otherwise.
    const WRITE_S: [bool; 3] = [true, true, true];
    // A NaN first moment, second moment or maximum (AMSGrad's maximum keeps a NaN on either side,
    // SPEC.md §6.4) makes the quotient NaN, and the weights' FMA keeps it: `lr = 0` too (0 × NaN).
    const NAN_REACHES_W: bool = true;
    // But for a NaN second moment beside a maximum that is not NaN, where the backend takes the
    // larger by `vmaxps` alone (x86; `put_back_nans`). Not in the entry point of the steps
    // without AMSGrad, where AVX2 keeps AMSGrad's IPEX and all-f32 layouts
    // (`Simd::AMSGRAD_FP32_WITH_ADAM`; `HEAD_AHEAD` is AMSGrad's own entry point's): there LLVM
    // gave Adam's layouts other registers, and split Adam one more instruction per chunk
    // (gungraun).
    const MAY_DROP_S1_NAN: bool =
        V::MAX_MAY_DROP_NEW_NAN && (HEAD_AHEAD || !V::AMSGRAD_FP32_WITH_ADAM);
    const DIVIDES: bool = true;
    const BITS_IN_LOOP_UP_TO: usize = 1;
    // Each chunk tested as it is computed: with a pair's two chunks computed side by side, LLVM
    // threaded the tests of the run-time flags (maximize, weight decay) across them, and AVX2's
    // Adam executed 6% more instructions (gungraun); AVX-512's was level either way.
    const NAN_TEST_PER_GROUP: bool = false;
    const PIPELINED_CHUNKS: bool = true;
    const PIPELINED: bool = HEAD_AHEAD;
    const TAIL_RELOADS_W: bool = true;

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    ) {
        unsafe {
            self.head(v, e, b, drawn);
            self.tail::<L>(v, e);
        }
    }

    /// The moments and the denominator, which the chunk's square root waits on; the
    /// denominator left in the gradients' place, which the tail does not read.
    #[inline(always)]
    unsafe fn head<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        _e: u64,
        _b: &mut Bufs<V, L>,
        _drawn: ChunkBits<V>,
    ) {
        unsafe {
            let c = &self.c;
            let (g, p) = if const { V::FLAGS_AS_ARITHMETIC } {
                let mut g = flip_sign::<V>(v.g, self.sign);
                let p = self.head_weights(v.p);
                if self.coupled_decay {
                    g = V::fma(self.wd, v.p, g);
                }
                (g, p)
            } else {
                let mut g = if c.maximize { neg::<V>(v.g) } else { v.g };
                let mut p = v.p;
                if c.use_weight_decay {
                    if c.decoupled {
                        p = self.head_weights(p);
                    } else {
                        g = V::fma(self.wd, p, g);
                    }
                }
                (g, p)
            };
            let (m, vv) = moments::<V>(self.omb1, self.beta2, self.omb2, g, v.s[0], v.s[1]);
            debug_assert_eq!(L::S2::PRESENT, c.amsgrad);
            let v_used = if L::S2::PRESENT {
                v.s[2] = if Self::MAY_DROP_S1_NAN {
                    V::max_unless_new_nan(v.s[2], vv)
                } else {
                    V::max_or_nan(v.s[2], vv)
                };
                v.s[2]
            } else {
                vv
            };
            v.g = V::fma(V::sqrt(v_used), self.inv_sqrt_bc2, self.eps);
            v.s[0] = m;
            v.s[1] = vv;
            v.p = p;
        }
    }

    /// A NaN second moment makes the maximum NaN, its square root and the weights too
    /// (`max_or_nan`'s rule, which `max_unless_new_nan` leaves to this).
    #[inline(always)]
    unsafe fn put_back_nans(v: &mut Vals<V>) {
        unsafe {
            let nan = V::is_nan(v.s[1]);
            v.s[2] = V::select(nan, v.s[1], v.s[2]);
            v.p = V::select(nan, v.s[1], v.p);
        }
    }

    /// The weights as the head leaves them: AdamW's decay applied.
    #[inline(always)]
    unsafe fn head_weights(&self, p: V::F) -> V::F {
        unsafe {
            // Where the flags are arithmetic, `decay` is 1 without AdamW's decay: `p · 1` is `p`
            // (subnormals kept, SPEC.md §1; a NaN's payload aside, and every NaN stored is
            // canonical).
            if V::FLAGS_AS_ARITHMETIC || self.c.use_weight_decay && self.c.decoupled {
                V::mul(p, self.decay)
            } else {
                p
            }
        }
    }

    /// The weights' update from the head's moments and denominator.
    #[inline(always)]
    unsafe fn tail<L: Layout<V>>(&mut self, v: &mut Vals<V>, _e: u64) {
        unsafe {
            v.p = V::fma(self.neg_step, V::div(v.s[0], v.g), v.p);
        }
    }
}

/// Adam's entry points where the backend compiles layouts (`dispatch`): AMSGrad's steps (a
/// running maximum of the second moment) run the stochastic layouts (the `all` set) in one of
/// their own, and IPEX's and the all-f32 layouts in a second one unless the backend keeps those
/// in the entry point of the steps without AMSGrad (`Simd::AMSGRAD_FP32_WITH_ADAM`). In that
/// entry point AMSGrad's `all` set changed LLVM's code for AdamW's layouts (AVX-512 split AdamW
/// 1.035-1.065x the time, Zen 4 VM; docs/DESIGN.md).
pub(crate) mod entry {
    /// Steps without AMSGrad; on a backend without compiled layouts, every step.
    pub(crate) const PLAIN: u8 = 0;
    /// AMSGrad in IPEX's layout or all f32.
    pub(crate) const AMSGRAD_FP32: u8 = 1;
    /// AMSGrad in the other layouts: the stochastic ones compiled, the rest at run time.
    pub(crate) const AMSGRAD_SR: u8 = 2;
}

/// AMSGrad's stochastic layouts run a group ahead in the in-order loop (`AdamOp`'s `HEAD_AHEAD`):
/// AVX-512 on Zen 4 at 64K, the layouts with a bf16-SR buffer took 0.80-0.95x the time. Not the
/// other entry points: in AdamW's, which holds its f32 and IPEX layouts too, LLVM's code for those
/// changed and they took 1.06-1.07x the time (docs/DESIGN.md).
#[inline(always)]
pub(crate) unsafe fn adam<V: Simd, const ENTRY: u8>(
    c: &AdamConsts,
    ctx: &StepContext,
    t: &mut AdamTensor<'_>,
    step_len: StepLen,
) {
    unsafe {
        if const { ENTRY == entry::AMSGRAD_SR } {
            adam_in::<V, ENTRY, true>(c, ctx, t, step_len)
        } else {
            adam_in::<V, ENTRY, false>(c, ctx, t, step_len)
        }
    }
}

/// [`adam()`] with `AdamOp`'s `HEAD_AHEAD`.
#[inline(always)]
unsafe fn adam_in<V: Simd, const ENTRY: u8, const HEAD_AHEAD: bool>(
    c: &AdamConsts,
    ctx: &StepContext,
    t: &mut AdamTensor<'_>,
    step_len: StepLen,
) {
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
            step_len,
        };
        let mut op = AdamOp::<V, HEAD_AHEAD> {
            c: *c,
            omb1: V::splat(c.one_minus_beta1),
            beta2: V::splat(c.beta2),
            omb2: V::splat(c.one_minus_beta2),
            neg_step: V::splat(-c.step_size),
            inv_sqrt_bc2: V::splat(c.inv_sqrt_bc2),
            eps: V::splat(c.eps),
            wd: V::splat(c.weight_decay),
            decay: V::splat(if c.use_weight_decay && c.decoupled {
                c.decay_factor
            } else {
                1.0
            }),
            sign: V::splat_u(if c.maximize { SIGN_BIT } else { 0 }),
            coupled_decay: core::hint::black_box(c.use_weight_decay && !c.decoupled),
        };
        let (base, st) = (t.stream.index_base, &t.stream);
        // Conditions on constants, so that rustc instantiates only the layouts an entry runs.
        if const { ENTRY == entry::AMSGRAD_SR } {
            drive_layouts!(V, n, base, ctx, st, d, &mut op, [Has, Has, Has, Has], stochastic all);
        } else if const { ENTRY == entry::AMSGRAD_FP32 && V::AMSGRAD_FP32_WITH_ADAM } {
            unreachable!("AMSGrad's fp32 layouts run in Adam's entry point on this backend");
        } else if const {
            ENTRY == entry::AMSGRAD_FP32 || !V::COMPILED_LAYOUTS || V::AMSGRAD_FP32_WITH_ADAM
        } && (ENTRY == entry::AMSGRAD_FP32 || s2.is_some())
        {
            drive_layouts!(
                V,
                n,
                base,
                ctx,
                st,
                d,
                &mut op,
                [Has, Has, Has, Has],
                fp32_peers
            );
        } else if const { ENTRY == entry::PLAIN } {
            debug_assert!(s2.is_none(), "AMSGrad runs an entry point of its own here");
            drive_layouts!(V, n, base, ctx, st, d, &mut op, [Has, Has, Has, Lacks], all);
        }
    }
}
