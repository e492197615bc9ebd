//! LAMB's two passes on vectors (SPEC.md §6.5, §7): block norms of p and u, then the update scaled by
//! the trust ratio.

use super::adam::moments;
use super::*;
use crate::arch::{even_odd_layout, from_even_odd_layout};
use crate::reference::lamb::LambConsts;
use crate::reference::norm::{NORM_BLOCK, NORM_LANES, add_square, fold_lanes};
use crate::tensors::LambTensor;

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
    /// Whether the sums are in the even/odd layout (`Simd::acc_add_squares_even_odd`), as the
    /// last pair added left them; a run's chunks alone take element order.
    even_odd: bool,
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
                even_odd: false,
            }
        }
    }

    /// Sums for the one norm block of element `e` alone, written to `out` when closed.
    #[inline(always)]
    unsafe fn for_block(e: u64, out: *mut [f64; 2]) -> Self {
        unsafe {
            let mut sums = Self::new(e, out);
            sums.block = e / NORM_BLOCK as u64;
            sums
        }
    }

    /// Starts the block of element `e` where it is not the current one.
    #[inline(always)]
    unsafe fn enter(&mut self, e: u64) {
        unsafe {
            let block = e / NORM_BLOCK as u64;
            if block != self.block {
                self.close();
                self.block = block;
            }
        }
    }

    /// Adds a chunk in element order; `EO`: pairs in even/odd order may have come before (the
    /// layout's buffers take that order), so the sums may have to change layout first. Without
    /// `U`, p's square alone, into the one block the sums were made for ([`Self::for_block`]; u's
    /// sum made apart: [`norms_apart`]).
    #[inline(always)]
    unsafe fn add<const EO: bool, const U: bool>(&mut self, p: V::F, u: V::F, e: u64) {
        unsafe {
            if U {
                self.enter(e);
            }
            if EO && self.even_odd {
                self.relayout(false);
            }
            let lane = (e % NORM_LANES as u64) as usize;
            self.p = V::acc_add_squares(self.p, p, lane);
            if U {
                self.u = V::acc_add_squares(self.u, u, lane);
            }
        }
    }

    /// [`Self::add`] of a pair of chunks in even/odd order from `e`, a multiple of 16 (the
    /// driver's pairs: a whole 32-element group, or on AVX2 16 elements), which no block edge
    /// cuts (`NORM_BLOCK` is a multiple of 32). `U` as for [`Self::add`].
    #[inline(always)]
    unsafe fn add_even_odd<const U: bool>(&mut self, p: [V::F; 2], u: [V::F; 2], e: u64) {
        unsafe {
            if U {
                self.enter(e);
            }
            if !self.even_odd {
                self.relayout(true);
            }
            let lane = (e % NORM_LANES as u64) as usize;
            self.p = V::acc_add_squares_even_odd(self.p, p[0], p[1], lane);
            if U {
                self.u = V::acc_add_squares_even_odd(self.u, u[0], u[1], lane);
            }
        }
    }

    /// Puts the sums in the even/odd layout (`even_odd`) or in element order, at the ends of a
    /// run. Inlined: out of line, the call took the sums' address, and the loop kept them in
    /// memory.
    #[inline(always)]
    unsafe fn relayout(&mut self, even_odd: bool) {
        unsafe {
            let order = |acc: V::Acc| {
                let a = V::acc_lanes(acc);
                V::acc_from_lanes(if even_odd {
                    even_odd_layout(a)
                } else {
                    from_even_odd_layout(a)
                })
            };
            (self.p, self.u) = (order(self.p), order(self.u));
            self.even_odd = even_odd;
        }
    }

    /// The reduction lanes of `acc`, in order.
    #[inline(always)]
    unsafe fn lanes(&self, acc: V::Acc) -> [f64; 16] {
        unsafe {
            let a = V::acc_lanes(acc);
            if self.even_odd {
                from_even_odd_layout(a)
            } else {
                a
            }
        }
    }

    #[inline(always)]
    unsafe fn close(&mut self) {
        unsafe {
            if self.block != u64::MAX {
                *self.out.add((self.block - self.first) as usize) = [
                    fold_lanes(self.lanes(self.p)),
                    fold_lanes(self.lanes(self.u)),
                ];
                self.p = V::acc_zero();
                self.u = V::acc_zero();
            }
        }
    }
}

/// Pass 1: moments, and the norms of p and of u computed from the moments as stored; with
/// `KEEP`, u also goes to state slot 2 (the workspace's directions) for pass 2. Without `SUM_U`
/// the sum of p alone, u's left to [`sum_of_squares`] ([`norms_apart`]).
pub(super) struct LambPass1<V: Simd, const KEEP: bool, const SUM_U: bool = true> {
    k: LambV<V>,
    omb1: V::F,
    beta2: V::F,
    omb2: V::F,
    norms: BlockNorms<V>,
}

impl<V: Simd, const KEEP: bool, const SUM_U: bool> LambPass1<V, KEEP, SUM_U> {
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

impl<V: Simd, const KEEP: bool, const SUM_U: bool> LambPass1<V, KEEP, SUM_U> {
    /// The moments of one vector of values, as stored.
    #[inline(always)]
    unsafe fn moments_as_stored<L: Layout<V>>(
        &mut self,
        v: &Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    ) -> (V::F, V::F) {
        unsafe {
            let (mut m, mut vv) =
                moments::<V>(self.omb1, self.beta2, self.omb2, v.g, v.s[0], v.s[1]);
            // `as_stored` of a bf16 buffer takes canonical NaNs: one test for both moments
            // here, where its rounding had a NaN test per moment (AVX-512: 3 uops each).
            if (L::S0::MAY_DRAW_BITS || L::S1::MAY_DRAW_BITS) && V::any(V::is_nan2(m, vv)) {
                m = canonicalize::<V>(m);
                vv = canonicalize::<V>(vv);
            }
            let [r0, r1, _] = &mut b.rng_s;
            (
                b.s0.as_stored(m, r0, e, drawn[1]),
                b.s1.as_stored(vv, r1, e, drawn[2]),
            )
        }
    }

    /// The moments of one vector of values, left in `v` as stored, and u from them (also in
    /// `v.s[2]`).
    #[inline(always)]
    unsafe fn moments_and_direction<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    ) -> V::F {
        unsafe {
            let (m_stored, v_stored) = self.moments_as_stored(v, e, b, drawn);
            let u = self.k.direction(v.p, m_stored, v_stored);
            // As stored: their stores then add nothing (`ElementOp::ROUNDS_IN_APPLY`).
            v.s[0] = m_stored;
            v.s[1] = v_stored;
            v.s[2] = u;
            u
        }
    }

    /// u from the weight and the moments `v` holds as stored ([`ElementOp::head`]), also left
    /// in `v.s[2]`.
    #[inline(always)]
    unsafe fn direction_of(&self, v: &mut Vals<V>) -> V::F {
        unsafe {
            let u = self.k.direction(v.p, v.s[0], v.s[1]);
            v.s[2] = u;
            u
        }
    }

    /// Adds a chunk's squares to the sums.
    #[inline(always)]
    unsafe fn add_squares<L: Layout<V>>(&mut self, p: V::F, u: V::F, e: u64) {
        unsafe {
            // Staged lanes outside the slice hold zeros, so they add +0 to both sums. Pairs in
            // even/odd order may have come before only where the driver can take them
            // (`Driver::EVEN_ODD`: paired draws, so paired 16-bit stores, or blocks of bits).
            if const { L::EVEN_ODD && V::EVEN_ODD && (V::PAIRED_U16 || V::RNG_BLOCK) } {
                self.norms.add::<true, SUM_U>(p, u, e);
            } else {
                self.norms.add::<false, SUM_U>(p, u, e);
            }
        }
    }
}

impl<V: Simd, const KEEP: bool, const SUM_U: bool> ElementOp<V> for LambPass1<V, KEEP, SUM_U> {
    const WRITE_W: bool = false;
    const WRITE_S: [bool; 3] = [true, true, KEEP];
    const ROUNDS_IN_APPLY: bool = true;
    const CANONICAL_DRAWN_STATES: bool = true;
    const BY_LANE: bool = false;
    const EVEN_ODD_PAIRS: bool = true;
    const PIPELINED: bool = true;
    const READ_S: [bool; 3] = [true, true, false];

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    ) {
        unsafe {
            // One sequence rather than `head` then `tail` through `v` (as `apply_even_odd`), which
            // changed the code LLVM made for AVX2's stochastic first pass (not pipelined there).
            let u = self.moments_and_direction(v, e, b, drawn);
            self.add_squares::<L>(v.p, u, e);
        }
    }

    #[inline(always)]
    unsafe fn apply_even_odd<L: Layout<V>>(
        &mut self,
        x: &mut Vals<V>,
        y: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: [ChunkBits<V>; 2],
    ) {
        unsafe {
            let ux = self.moments_and_direction(x, e, b, drawn[0]);
            let uy = self.moments_and_direction(y, e + V::LANES as u64, b, drawn[1]);
            self.norms.add_even_odd::<SUM_U>([x.p, y.p], [ux, uy], e);
        }
    }

    #[inline(always)]
    unsafe fn head<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    ) {
        unsafe {
            (v.s[0], v.s[1]) = self.moments_as_stored(v, e, b, drawn);
        }
    }

    #[inline(always)]
    unsafe fn tail<L: Layout<V>>(&mut self, v: &mut Vals<V>, e: u64) {
        unsafe {
            let u = self.direction_of(v);
            self.add_squares::<L>(v.p, u, e);
        }
    }

    #[inline(always)]
    unsafe fn tail_even_odd<L: Layout<V>>(&mut self, x: &mut Vals<V>, y: &mut Vals<V>, e: u64) {
        unsafe {
            let (ux, uy) = (self.direction_of(x), self.direction_of(y));
            self.norms.add_even_odd::<SUM_U>([x.p, y.p], [ux, uy], e);
        }
    }
}

/// Pass 2: the weights, with u recomputed from the same stored moments, or with `KEPT` read
/// from state slot 0 where pass 1 kept it (the same value, without a second divide and square
/// root per element).
pub(super) struct LambPass2<V: Simd, const KEPT: bool> {
    k: LambV<V>,
    neg_lr_ratio: V::F,
}

impl<V: Simd, const KEPT: bool> ElementOp<V> for LambPass2<V, KEPT> {
    const WRITE_W: bool = true;
    const WRITE_S: [bool; 3] = [false; 3];
    const BITS_IN_LOOP_UP_TO: usize = 1;

    #[inline(always)]
    unsafe fn apply<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        _e: u64,
        _b: &mut Bufs<V, L>,
        _drawn: ChunkBits<V>,
    ) {
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

/// `drive_layouts!` with LAMB's sets: `$fp32_set` (IPEX's and all f32, and for pass 1 f32 master
/// weights with bf16 gradients) where `$sr` is false, the stochastic layouts `$set` where it is
/// true.
macro_rules! lamb_layouts {
    ($sr:expr, $V:ty, $n:expr, $base:expr, $ctx:expr, $st:expr, $d:expr, $op:expr,
     [$G:ident, $S0:ident, $S1:ident, $S2:ident], $set:ident, $fp32_set:ident) => {
        if const { $sr } {
            drive_layouts!($V, $n, $base, $ctx, $st, $d, $op, [$G, $S0, $S1, $S2], stochastic $set)
        } else {
            drive_layouts!($V, $n, $base, $ctx, $st, $d, $op, [$G, $S0, $S1, $S2], $fp32_set)
        }
    };
}

/// LAMB pass 1 over one tensor (or a piece of one): moments stored, and the canonical sums of
/// squares of p and u of every norm block the piece touches written to `out` in block order;
/// each u also to `kept` when given (one f32 per element of the piece).
/// A piece must not share a block with another piece (the parallel driver cuts at block edges).
///
/// `SR` picks the layouts compiled: IPEX's, all f32 and f32 master weights with bf16 gradients
/// (false; the master layout through the run-time access took 1.11x the all-f32 step), or the
/// stochastic ones (true: the two memory-saving layouts, f32 weights and gradients with bf16-SR
/// states, and all bf16 with bf16-SR states, the set `all`; the last two through the run-time
/// access took 1.3-1.4x the time), each set in entry points of its own (`dispatch`), chosen per
/// tensor by [`LambTensor::has_bf16`]. In one function, the stochastic layouts changed the code
/// LLVM made for IPEX's layout around them (gungraun, AVX2: +7% instructions); any other
/// combination runs through the run-time access in either.
#[inline(always)]
pub(crate) unsafe fn lamb_pass1<V: Simd, const SR: bool>(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    out: &mut [[f64; 2]],
    kept: Option<&mut [f32]>,
    step_len: StepLen,
) {
    unsafe {
        let n = t.weights.len();
        let base = t.stream.index_base;
        debug_assert_eq!(out.len(), crate::reference::norm::spanned_blocks(base, n));
        if const { SR && V::LAMB_NORMS_APART } && rounds_moments(t) {
            return norms_apart::<V>(c, ctx, t, out, kept, step_len);
        }
        let norms = BlockNorms::new(base, out.as_mut_ptr());
        match kept {
            Some(kept) => {
                debug_assert_eq!(kept.len(), n);
                let d = pass1_bufs(t, Some(kept.as_mut_ptr()), step_len);
                let st = &t.stream;
                let mut p1 = LambPass1::<V, true>::new(c, norms);
                lamb_layouts!(
                    SR,
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p1,
                    [Has, Has, Has, Kept],
                    all,
                    fp32_master
                );
                p1.norms.close();
            }
            None => {
                let d = pass1_bufs(t, None, step_len);
                let st = &t.stream;
                let mut p1 = LambPass1::<V, false>::new(c, norms);
                lamb_layouts!(
                    SR,
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p1,
                    [Has, Has, Has, Lacks],
                    all,
                    fp32_master
                );
                p1.norms.close();
            }
        }
    }
}

/// Pass 1's buffers: the tensor's, and where u is kept (state slot 2, one f32 per element of
/// `t`), if it is.
///
/// Pass 1 reads the weights and stores none, so the rounding of bf16 weights is moot: given as
/// stochastic, bf16 weights rounded to nearest take the compiled layouts of bf16-SR weights
/// (through the run-time access, beside bf16-SR moments, LAMB took 1.3-1.9x the time).
#[inline(always)]
fn pass1_bufs(t: &mut LambTensor<'_>, kept: Option<*mut f32>, step_len: StepLen) -> DynBufs {
    let w = match Buf::weights(&mut t.weights) {
        Buf::Bf16(p, _) => Buf::Bf16(p, Rounding::Stochastic),
        w => w,
    };
    DynBufs {
        w,
        g: Some(Buf::grads(&t.grads)),
        s: [
            Some(Buf::state(&mut t.exp_avg)),
            Some(Buf::state(&mut t.exp_avg_sq)),
            kept.map(Buf::F32),
        ],
        step_len,
    }
}

/// Whether a tensor's first pass rounds both moments stochastically (bf16-SR states).
fn rounds_moments(t: &LambTensor<'_>) -> bool {
    let sr = |s: &State<'_>| matches!(s, State::Bf16(_, Rounding::Stochastic));
    sr(&t.exp_avg) && sr(&t.exp_avg_sq)
}

/// [`lamb_pass1`] in two loops per norm block ([`crate::arch::Simd::LAMB_NORMS_APART`]): the moments, u
/// (kept in `kept`, or for the block in 8 KiB on the stack) and the sum of squares of p, then
/// the sum of squares of u ([`sum_of_squares`]). The same sums as in one loop.
#[inline(always)]
unsafe fn norms_apart<V: Simd>(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    out: &mut [[f64; 2]],
    kept: Option<&mut [f32]>,
    step_len: StepLen,
) {
    unsafe {
        let first = t.stream.index_base / NORM_BLOCK as u64;
        // u's place: the workspace, each block at its own offset; without one, 8 KiB on the stack
        // that every block reuses. Left uninitialised (a zeroed array cost an 8 KiB memset per
        // call, with a workspace too): only raw pointers reach it, and the moments' loop writes
        // u to each of a block's elements (`WRITE_S[2]`) before `sum_of_squares` reads them.
        let mut block_u = core::mem::MaybeUninit::<[f32; NORM_BLOCK]>::uninit();
        let (whole, moves) = match kept {
            Some(k) => {
                debug_assert_eq!(k.len(), t.len());
                (k.as_mut_ptr(), true)
            }
            None => (block_u.as_mut_ptr().cast::<f32>(), false),
        };
        let mut rest = t.reborrow();
        let mut done = 0;
        while !rest.is_empty() {
            let base = rest.stream.index_base;
            let len = (NORM_BLOCK - (base % NORM_BLOCK as u64) as usize).min(rest.len());
            let (mut piece, tail) = rest.split_at(len);
            let u = whole.add(if moves { done } else { 0 });
            let sums = &mut out[(base / NORM_BLOCK as u64 - first) as usize];
            let mut moments =
                LambPass1::<V, true, false>::new(c, BlockNorms::for_block(base, sums));
            let d = pass1_bufs(&mut piece, Some(u), step_len);
            let st = &piece.stream;
            lamb_layouts!(
                true,
                V,
                len,
                base,
                ctx,
                st,
                d,
                &mut moments,
                [Has, Has, Has, Kept],
                all,
                fp32_peers
            );
            moments.norms.close();
            sums[1] = sum_of_squares::<V>(u, base, len);
            done += len;
            rest = tail;
        }
    }
}

/// The sum of squares of `len` f32 from `x`, the first at global index `e0`, all in one norm
/// block (SPEC.md §7): each whole set of lanes (16 elements from a multiple of 16) in vectors,
/// each widened from memory, the elements before and after those one by one; the same sum,
/// since every lane adds the same exact squares in the same order.
#[inline(always)]
unsafe fn sum_of_squares<V: Simd>(x: *const f32, e0: u64, len: usize) -> f64 {
    unsafe {
        let add = |lanes: &mut _, i: usize| add_square(lanes, e0 + i as u64, *x.add(i));
        let head = ((NORM_LANES as u64 - e0 % NORM_LANES as u64) as usize % NORM_LANES).min(len);
        let end = head + (len - head) / NORM_LANES * NORM_LANES;
        let mut lanes = [0f64; NORM_LANES];
        for i in 0..head {
            add(&mut lanes, i);
        }
        let mut acc = V::acc_from_lanes(lanes);
        for i in (head..end).step_by(NORM_LANES) {
            for k in 0..NORM_LANES / V::LANES {
                let lane0 = k * V::LANES;
                acc = V::acc_add_squares(acc, V::load(x.add(i + lane0)), lane0);
            }
        }
        lanes = V::acc_lanes(acc);
        for i in end..len {
            add(&mut lanes, i);
        }
        fold_lanes(lanes)
    }
}

/// LAMB pass 2 over one tensor (or a piece): `p = fma(-lr_ratio, u, p)`, u read from `kept`
/// when pass 1 kept it, else recomputed from the stored moments (the same value). `SR` as for
/// [`lamb_pass1`]; with `kept`, pass 2 touches only the weights, so its stochastic set is bf16-SR
/// weights alone ([`LambTensor::has_bf16_weights`]).
#[inline(always)]
pub(crate) unsafe fn lamb_pass2<V: Simd, const SR: bool>(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    lr_ratio: f32,
    kept: Option<&[f32]>,
    step_len: StepLen,
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
                    step_len,
                };
                let mut p2 = LambPass2::<V, true> { k, neg_lr_ratio };
                lamb_layouts!(
                    SR,
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p2,
                    [Lacks, Scratch, Lacks, Lacks],
                    sr_weights,
                    fp32_peers
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
                    step_len,
                };
                let mut p2 = LambPass2::<V, false> { k, neg_lr_ratio };
                lamb_layouts!(
                    SR,
                    V,
                    n,
                    base,
                    ctx,
                    st,
                    d,
                    &mut p2,
                    [Lacks, Has, Has, Lacks],
                    memory_saving,
                    fp32_peers
                );
            }
        }
    }
}
