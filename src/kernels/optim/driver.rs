//! The element-wise driver: each chunk's values loaded through the call's [`Layout`], one
//! optimizer's [`ElementOp`] applied, the results stored, chunk after chunk over the tensor
//! ([`drive`]); NaN gradients and weights tracked for the canonical NaN rule.

use super::*;
use crate::kernels::{PairDraw, partners};

/// One chunk's values: weights, gradients, states.
pub(super) struct Vals<V: Simd> {
    pub(super) p: V::F,
    pub(super) g: V::F,
    pub(super) s: [V::F; 3],
}

impl<V: Simd> Clone for Vals<V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V: Simd> Copy for Vals<V> {}

/// One optimizer's (or pass's) arithmetic on a chunk. A trait with an always-inlined method
/// rather than a closure, so the code compiles with the entry point's target features.
pub(super) trait ElementOp<V: Simd> {
    /// Whether the pass writes the weights, and each state slot.
    const WRITE_W: bool;
    const WRITE_S: [bool; 3];
    /// Whether the pass reads each state slot (a slot it only writes is not loaded).
    const READ_S: [bool; 3] = [true; 3];
    /// Whether every NaN lane of a vector the pass stores is a NaN lane of the new weights too
    /// (each stored value flows into the weights' update through operations that keep a NaN):
    /// the NaN test of a chunk or group ([`compute`], [`compute_group`]) then looks at the weights
    /// alone.
    const NAN_REACHES_W: bool = false;
    /// Whether, in a layout with state 2, a NaN lane of state 1 may be missing from state 2 and
    /// the weights as `apply` leaves them (AMSGrad's maximum by `Simd::max_unless_new_nan`): the
    /// NaN test then looks at state 1 too, and where it finds a NaN, [`ElementOp::put_back_nans`]
    /// mends the chunk before its NaNs are made canonical.
    const MAY_DROP_S1_NAN: bool = false;
    /// Where [`ElementOp::MAY_DROP_S1_NAN`], sets what `apply` would have computed from state 1's
    /// NaN lanes in `v`. Off the hot path: only for a chunk whose NaN test found one.
    #[inline(always)]
    unsafe fn put_back_nans(_v: &mut Vals<V>) {}
    /// Whether a group's chunks are all computed before their one NaN test, whose compares pair
    /// vectors across the chunks ([`compute_group`]), rather than each chunk tested as it is
    /// computed.
    const NAN_TEST_PER_GROUP: bool = true;
    /// Whether `apply` rounds values as they will be stored (LAMB's `Access::as_stored`) and
    /// leaves those for the stores: the driver then hands it the bits it drew for the chunk's
    /// stores (`apply`'s `drawn`), and the stores zero bits, since a bf16 value's rounding adds
    /// nothing to it (the drawn bits' registers are then free from the group's arithmetic on).
    const ROUNDS_IN_APPLY: bool = false;
    /// Whether `apply` canonicalises states 0 and 1 itself where either may round
    /// stochastically (LAMB: its rounding in `apply` takes canonical NaNs), so that the driver's
    /// NaN test ([`nan_tested`]) leaves them out.
    const CANONICAL_DRAWN_STATES: bool = false;
    /// Whether `apply` takes a correctly rounded square root and division per element, so that
    /// in cache the divider bounds the loop (Adagrad, Adam): see `Driver::EVEN_ODD_BLOCKS`; and
    /// on Zen 5 it tells Adagrad's all-f32 step from SGD's for the prefetch rule
    /// ([`StepBuffers::of_op`]).
    const DIVIDES: bool = false;
    /// Where the backend draws its bits a block at a time, the most buffers the op stores that
    /// may round stochastically for which the step's loop makes the bits as it goes, a group at
    /// a time ahead of the groups it computes (`Driver::FILLS_AHEAD`), rather than a fill making
    /// each block before its run; 0: never. Adagrad, whose loop the divider bounds, leaving the
    /// AES rounds' pipes idle: every layout (AVX2 on an Emerald Rapids CPU, bf16-SR states 0.90x
    /// the time at 64K). Adam and LAMB: their bf16-SR weights (one buffer, 0.94-0.97x), not
    /// their bf16-SR moments (two, whose bits their loops, holding more values, made slower:
    /// 1.03-1.19x; docs/DESIGN.md); counted by `Driver::STREAMS_FILLED`, so that Adam's moments
    /// beside f32 weights, which take one stream's bits, make them in its loop (0.96-0.97x at
    /// 64K). Where the CPU gains by it ([`crate::cpu::bits_in_loop`]: on Intel's, not on AMD's
    /// Zen 3, where the fill took these layouts 0.81-0.94x the time).
    const BITS_IN_LOOP_UP_TO: usize = 0;
    /// Whether `apply` treats each lane alone, whatever element it holds: the driver may then
    /// hand it a pair of chunks in even/odd order (`Driver::EVEN_ODD`). Not LAMB's first pass,
    /// whose sums of squares go to lanes by element index (SPEC.md §7).
    const BY_LANE: bool = true;
    /// Whether an op that does not treat each lane alone takes a pair of chunks in even/odd
    /// order through [`ElementOp::apply_even_odd`] (LAMB's first pass, which sums the pair's
    /// squares in the even/odd layout, `Simd::acc_add_squares_even_odd`). Only where the pair's
    /// bits reach `apply` and its lanes are whole reduction lanes (`Driver::EVEN_ODD`): drawn in
    /// order for whole 32-element groups, or read from blocks in the even/odd layout for pairs
    /// from multiples of 16 (`Driver::PAIRS_FROM_BLOCKS`).
    const EVEN_ODD_PAIRS: bool = false;
    /// Whether the in-order loop ([`Driver::PIPELINED`]) runs `apply` (or `apply_even_odd`) on
    /// each group in two halves, software-pipelined: the next group's [`ElementOp::head`] before
    /// this group's [`ElementOp::tail`], NaN test (per group or per chunk, as the op tests) and
    /// stores. Same arithmetic, same order of the sums. LAMB's first pass, whose divisions take
    /// the moments as stored: with their stochastic rounding in the same group, the divisions
    /// waited on the rounding's latency (AVX-512 on Zen 4, bf16-SR states at 64K: 0.93-0.96x the
    /// time; docs/DESIGN.md). AMSGrad's stochastic layouts (`adam::AdamOp`'s `HEAD_AHEAD`).
    const PIPELINED: bool = false;
    /// Whether the chunk loop that neither overlaps its chunks nor makes bits as it goes runs
    /// [`ElementOp::head`] of the next chunk before [`ElementOp::tail`], NaN test and stores of
    /// this one (`Driver::full_run_pipelined`), for an op that tests each chunk alone and rounds
    /// nothing in `apply`, where the backend takes it (`Simd::PIPELINES_CHUNKS`). Adam: a chunk's
    /// square root then starts a chunk ahead of its division and the NaN test that waits on it
    /// (AVX2 on Zen 4, 64K: its 16-bit layouts 0.90-1.00x the time; docs/DESIGN.md).
    const PIPELINED_CHUNKS: bool = false;
    /// Transforms the loaded values of the chunk at global index `e`. `drawn` holds the bits the
    /// driver has drawn for the chunk's stochastic stores, where it has ([`ChunkBits`]): an op
    /// that rounds a value as it will be stored (LAMB's `Access::as_stored`) takes those.
    unsafe fn apply<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    );
    /// `apply` on chunk `i` of a group of `g` chunks ([`compute_group`]; both constants once
    /// inlined), for an op that treats a group's chunks differently (Adagrad's square roots).
    /// Where the op tests NaNs per group ([`ElementOp::NAN_TEST_PER_GROUP`]).
    #[inline(always)]
    unsafe fn apply_in_group<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
        _i: usize,
        _g: usize,
    ) {
        unsafe { self.apply(v, e, b, drawn) }
    }
    /// `apply` on a pair of chunks in even/odd order from global `e` (lane `l` of `x` holds
    /// element `e + 2l`, of `y` element `e + 2l + 1`), with the bits drawn for each. By default
    /// each alone, as for an op that treats each lane alone ([`ElementOp::BY_LANE`]).
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
            self.apply(x, e, b, drawn[0]);
            self.apply(y, e + V::LANES as u64, b, drawn[1]);
        }
    }
    /// The first half of `apply` where [`ElementOp::PIPELINED`]: what the chunk's stores take (by
    /// default the whole of it).
    #[inline(always)]
    unsafe fn head<L: Layout<V>>(
        &mut self,
        v: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: ChunkBits<V>,
    ) {
        unsafe { self.apply(v, e, b, drawn) }
    }
    /// The rest of `apply`, on the chunk at `e` that [`ElementOp::head`] left, before it is
    /// stored.
    #[inline(always)]
    unsafe fn tail<L: Layout<V>>(&mut self, _v: &mut Vals<V>, _e: u64) {}
    /// Whether the chunk loop run a chunk apart ([`ElementOp::PIPELINED_CHUNKS`]) may load a
    /// chunk's weights again for its tail, as [`ElementOp::head_weights`] makes them, instead of
    /// keeping what the head left across the next chunk's head ([`Driver::RELOADS_W`]): the
    /// head reads the weights only through `head_weights`, save under a run-time flag (Adam's
    /// L2 decay), whose use reads the head's own load.
    const TAIL_RELOADS_W: bool = false;
    /// What [`ElementOp::head`] leaves in the weights' place from the loaded weights `p`
    /// (by default `p`), for [`ElementOp::TAIL_RELOADS_W`].
    #[inline(always)]
    unsafe fn head_weights(&self, p: V::F) -> V::F {
        p
    }
    /// [`ElementOp::head`] of each chunk of a pair in even/odd order (from `e`, lanes as for
    /// [`ElementOp::apply_even_odd`]).
    #[inline(always)]
    unsafe fn head_even_odd<L: Layout<V>>(
        &mut self,
        x: &mut Vals<V>,
        y: &mut Vals<V>,
        e: u64,
        b: &mut Bufs<V, L>,
        drawn: [ChunkBits<V>; 2],
    ) {
        unsafe {
            self.head(x, e, b, drawn[0]);
            self.head(y, e + V::LANES as u64, b, drawn[1]);
        }
    }
    /// [`ElementOp::tail`] of a pair in even/odd order.
    #[inline(always)]
    unsafe fn tail_even_odd<L: Layout<V>>(&mut self, _x: &mut Vals<V>, _y: &mut Vals<V>, _e: u64) {}
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

/// [`load_group`] of a pair of chunks (`G` is 2) in even/odd order (`Driver::EVEN_ODD`). Its own
/// function, as is [`store_even_odd`]: as a parameter of `load_group` and `store_vals`, the order
/// changed the code LLVM made for AVX2's AdamW with bf16-SR states (+5% instructions, gungraun).
#[inline(always)]
unsafe fn load_even_odd<V: Simd, L: Layout<V>, O: ElementOp<V>, const G: usize>(
    c: &ChunkBufs<V, L>,
    off: isize,
) -> [Vals<V>; G] {
    unsafe {
        debug_assert_eq!(G, 2);
        let zero = [V::splat(0.0); 2];
        let p = c.w.load_even_odd(off);
        let g = c.g.load_even_odd(off);
        let s0 = if O::READ_S[0] {
            c.s0.load_even_odd(off)
        } else {
            zero
        };
        let s1 = if O::READ_S[1] {
            c.s1.load_even_odd(off)
        } else {
            zero
        };
        let s2 = if O::READ_S[2] {
            c.s2.load_even_odd(off)
        } else {
            zero
        };
        let mut v = [Vals::<V> {
            p: zero[0],
            g: zero[0],
            s: [zero[0]; 3],
        }; G];
        // Spelled out, as in `Access::load_group` of a bf16 pair.
        v[0] = Vals {
            p: p[0],
            g: g[0],
            s: [s0[0], s1[0], s2[0]],
        };
        v[G - 1] = Vals {
            p: p[1],
            g: g[1],
            s: [s0[1], s1[1], s2[1]],
        };
        v
    }
}

/// [`store_vals`] of a pair of chunks (`G` is 2) in even/odd order (`Driver::EVEN_ODD`), with
/// the bits `drawn` for them in that order.
#[inline(always)]
unsafe fn store_even_odd<V: Simd, L: Layout<V>, O: ElementOp<V>, const G: usize>(
    b: &mut Bufs<V, L>,
    c: &ChunkBufs<V, L>,
    vs: [Vals<V>; G],
    off: isize,
    e: u64,
    drawn: Drawn<V>,
) {
    unsafe {
        debug_assert_eq!(G, 2);
        let drawn = stored_bits::<V, O>(drawn);
        let (x, y) = (&vs[0], &vs[G - 1]);
        let [r0, r1, r2] = &mut b.rng_s;
        // In the reverse of the order loaded, as `store_vals`.
        if O::WRITE_S[2] {
            c.s2.store_even_odd(off, [x.s[2], y.s[2]], r2, e, drawn[3]);
        }
        if O::WRITE_S[1] {
            c.s1.store_even_odd(off, [x.s[1], y.s[1]], r1, e, drawn[2]);
        }
        if O::WRITE_S[0] {
            c.s0.store_even_odd(off, [x.s[0], y.s[0]], r0, e, drawn[1]);
        }
        if O::WRITE_W {
            c.w.store_even_odd(off, [x.p, y.p], &mut b.rng_w, e, drawn[0]);
        }
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
        compute_group::<V, L, O, G, false>(op, b, &mut vs, e, &[None; 4]);
        store_vals::<V, L, O, G>(b, c, vs, off, e, [None; 4]);
    }
}

/// [`compute`] on each of `G` consecutive chunks from global `e`, in order, each with its part
/// of the bits `drawn` for the group's stores; with one NaN test for the group where the op
/// allows ([`ElementOp::NAN_TEST_PER_GROUP`]). `EO`: the group is a pair in even/odd order, which
/// an op that does not treat each lane alone takes whole ([`ElementOp::apply_even_odd`]).
#[inline(always)]
unsafe fn compute_group<V: Simd, L: Layout<V>, O: ElementOp<V>, const G: usize, const EO: bool>(
    op: &mut O,
    b: &mut Bufs<V, L>,
    vs: &mut [Vals<V>; G],
    e: u64,
    drawn: &Drawn<V>,
) {
    unsafe {
        if const { EO && !O::BY_LANE } {
            debug_assert!(G == 2 && O::NAN_TEST_PER_GROUP);
            let bits = [apply_bits::<V, O>(drawn, 0), apply_bits::<V, O>(drawn, 1)];
            let (x, y) = vs.split_at_mut(1);
            op.apply_even_odd(&mut x[0], &mut y[0], e, b, bits);
        } else {
            unrolled!(G, i => {
                let bits = apply_bits::<V, O>(drawn, i);
                let ei = e + (i * V::LANES) as u64;
                if const { O::NAN_TEST_PER_GROUP } {
                    op.apply_in_group(&mut vs[i], ei, b, bits, i, G);
                } else {
                    compute::<V, L, O>(op, b, &mut vs[i], ei, bits);
                }
            });
        }
        if const { O::NAN_TEST_PER_GROUP } {
            canonicalize_group::<V, L, O, G>(vs);
        }
    }
}

/// The NaN test of a computed group where the op tests per group
/// ([`ElementOp::NAN_TEST_PER_GROUP`]).
#[inline(always)]
unsafe fn canonicalize_group<V: Simd, L: Layout<V>, O: ElementOp<V>, const G: usize>(
    vs: &mut [Vals<V>; G],
) {
    unsafe {
        // The group's tested vectors pair across its chunks: a pair of chunks whose weights'
        // NaNs cover the states' takes one compare where each chunk took one (a compare takes a
        // cycle of the FMA pipes on Zen 4; docs/DESIGN.md, "NaN canonicalisation").
        let tested = nan_tested::<V, L, O>();
        let mut acc = NanAcc::<V>::new();
        unrolled!(G, i => {
            acc.push_stored(tested, &vs[i]);
        });
        if acc.any() {
            unrolled!(G, i => {
                if const { O::MAY_DROP_S1_NAN && L::S2::PRESENT } {
                    O::put_back_nans(&mut vs[i]);
                }
                canonicalize_stored::<V, L, O>(&mut vs[i]);
            });
        }
    }
}

/// Stores what `O` writes of the `G` computed chunks `vs` from `off` (global `e`), buffer by
/// buffer ([`Access::store_group`], with the bits `drawn` for each).
#[inline(always)]
unsafe fn store_vals<V: Simd, L: Layout<V>, O: ElementOp<V>, const G: usize>(
    b: &mut Bufs<V, L>,
    c: &ChunkBufs<V, L>,
    vs: [Vals<V>; G],
    off: isize,
    e: u64,
    drawn: Drawn<V>,
) {
    unsafe {
        let drawn = stored_bits::<V, O>(drawn);
        let [r0, r1, r2] = &mut b.rng_s;
        // Gathered per buffer (no closures: see `NanAcc::push_stored`), and stored in the reverse
        // of the order loaded: of two buffers whose lines collide, the one loaded last is the one
        // in L1, so it is stored first.
        let mut x = [V::splat(0.0); G];
        if O::WRITE_S[2] {
            unrolled!(G, i => {
                x[i] = vs[i].s[2];
            });
            c.s2.store_group::<G>(off, &x, r2, e, drawn[3]);
        }
        if O::WRITE_S[1] {
            unrolled!(G, i => {
                x[i] = vs[i].s[1];
            });
            c.s1.store_group::<G>(off, &x, r1, e, drawn[2]);
        }
        if O::WRITE_S[0] {
            unrolled!(G, i => {
                x[i] = vs[i].s[0];
            });
            c.s0.store_group::<G>(off, &x, r0, e, drawn[1]);
        }
        if O::WRITE_W {
            unrolled!(G, i => {
                x[i] = vs[i].p;
            });
            c.w.store_group::<G>(off, &x, &mut b.rng_w, e, drawn[0]);
        }
    }
}

/// Chunk `i`'s part of the bits `drawn`, for an op that takes them in `apply`
/// ([`ElementOp::ROUNDS_IN_APPLY`]): built for every op, the unused bits cost the portable steps
/// 13-22% more instructions and AVX2's Adam 4% (gungraun).
#[inline(always)]
fn apply_bits<V: Simd, O: ElementOp<V>>(drawn: &Drawn<V>, i: usize) -> ChunkBits<V> {
    if const { O::ROUNDS_IN_APPLY } {
        chunk_bits::<V>(drawn, i)
    } else {
        [None; 4]
    }
}

/// The bits a group's stores take: those `drawn` for them, or zeros for every store where
/// `apply` left the values as stored ([`ElementOp::ROUNDS_IN_APPLY`]), which a bf16 store then
/// writes without reading a block's bits or adding.
#[inline(always)]
fn stored_bits<V: Simd, O: ElementOp<V>>(drawn: Drawn<V>) -> Drawn<V> {
    if const { O::ROUNDS_IN_APPLY } {
        [Some([unsafe { V::splat_u(0) }; 2]); 4]
    } else {
        drawn
    }
}

/// Chunk `i`'s part of a group's bits `drawn` (none past a pair). No closures: see
/// `NanAcc::push_stored`.
#[inline(always)]
fn chunk_bits<V: Simd>(drawn: &Drawn<V>, i: usize) -> ChunkBits<V> {
    #[inline(always)]
    fn part<U: Copy>(pair: Option<[U; 2]>, i: usize) -> Option<U> {
        match pair {
            Some(p) if i < 2 => Some(p[i]),
            _ => None,
        }
    }
    [
        part(drawn[0], i),
        part(drawn[1], i),
        part(drawn[2], i),
        part(drawn[3], i),
    ]
}

/// Applies `op` to one chunk's values (global index `e`; `drawn`: the bits drawn for its
/// stores) and canonicalises the NaNs it stores.
#[inline(always)]
unsafe fn compute<V: Simd, L: Layout<V>, O: ElementOp<V>>(
    op: &mut O,
    b: &mut Bufs<V, L>,
    v: &mut Vals<V>,
    e: u64,
    drawn: ChunkBits<V>,
) {
    unsafe {
        op.apply(v, e, b, drawn);
        canonicalize_group::<V, L, O, 1>(core::array::from_mut(v));
    }
}

/// [`compute`]'s second half where the loop is pipelined ([`ElementOp::PIPELINED_CHUNKS`]):
/// the op's [`ElementOp::tail`] on `v` as its head left it, then the chunk's NaN test.
#[inline(always)]
unsafe fn tail_tested<V: Simd, L: Layout<V>, O: ElementOp<V>>(op: &mut O, v: &mut Vals<V>, e: u64) {
    unsafe {
        op.tail::<L>(v, e);
        canonicalize_group::<V, L, O, 1>(core::array::from_mut(v));
    }
}

/// Which of a chunk's stored vectors (states 0-2, weights) the NaN test of SPEC.md §5's
/// canonicalisation looks at: an unordered compare per pair of them and one test for the whole
/// chunk or group, the blends only when some lane is NaN (it was a compare and a blend per
/// stored vector: on AVX2 the blend is a multi-uop `vblendvps`, on Sapphire Rapids' AVX-512 both
/// take one of the two ports that run 512-bit uops). The weights alone where their NaNs cover
/// the states' (Adam: three stored vectors took two compares; each takes one of the two pipes
/// the FMAs use on Zen 4).
#[inline(always)]
const fn nan_tested<V: Simd, L: Layout<V>, O: ElementOp<V>>() -> [bool; 4] {
    let done = O::CANONICAL_DRAWN_STATES && (L::S0::MAY_DRAW_BITS || L::S1::MAY_DRAW_BITS);
    let canon = [
        O::WRITE_S[0] && L::S0::CANONICAL && !done,
        O::WRITE_S[1] && L::S1::CANONICAL && !done,
        O::WRITE_S[2] && L::S2::CANONICAL,
        O::WRITE_W && L::W::CANONICAL,
    ];
    // State 1's NaNs may not reach the weights, nor state 2, which `canon` may test in its place.
    let s1 = O::MAY_DROP_S1_NAN && L::S2::PRESENT;
    if O::NAN_REACHES_W && canon[3] {
        [false, s1, false, true]
    } else {
        [canon[0], canon[1] || s1, canon[2], canon[3]]
    }
}

/// Canonicalises the NaN lanes of every vector of `v` that `O` stores to a canonicalising kind.
#[inline(always)]
unsafe fn canonicalize_stored<V: Simd, L: Layout<V>, O: ElementOp<V>>(v: &mut Vals<V>) {
    unsafe {
        if O::WRITE_S[0] && L::S0::CANONICAL {
            v.s[0] = canonicalize::<V>(v.s[0]);
        }
        if O::WRITE_S[1] && L::S1::CANONICAL {
            v.s[1] = canonicalize::<V>(v.s[1]);
        }
        if O::WRITE_S[2] && L::S2::CANONICAL {
            v.s[2] = canonicalize::<V>(v.s[2]);
        }
        if O::WRITE_W && L::W::CANONICAL {
            v.p = canonicalize::<V>(v.p);
        }
    }
}

/// A NaN test's running mask, and a vector waiting for a partner (a compare takes two).
struct NanAcc<V: Simd> {
    mask: Option<V::M>,
    pending: Option<V::F>,
}

impl<V: Simd> NanAcc<V> {
    #[inline(always)]
    fn new() -> Self {
        NanAcc {
            mask: None,
            pending: None,
        }
    }

    /// Pushes the stored vectors of `v` that `tested` names (states 0-2, weights; known at
    /// compile time). Straight-line calls, no loop or closure: LLVM kept a loop over the four in
    /// memory, and a closure would be compiled without the entry point's target features.
    #[inline(always)]
    unsafe fn push_stored(&mut self, tested: [bool; 4], v: &Vals<V>) {
        unsafe {
            self.push(tested[0], v.s[0]);
            self.push(tested[1], v.s[1]);
            self.push(tested[2], v.s[2]);
            self.push(tested[3], v.p);
        }
    }

    #[inline(always)]
    unsafe fn push(&mut self, on: bool, x: V::F) {
        if on {
            match self.pending.take() {
                Some(y) => unsafe { self.or(V::is_nan2(y, x)) },
                None => self.pending = Some(x),
            }
        }
    }

    /// Whether any lane of the vectors pushed is NaN.
    #[inline(always)]
    unsafe fn any(mut self) -> bool {
        unsafe {
            if let Some(y) = self.pending {
                self.or(V::is_nan(y));
            }
            match self.mask {
                Some(m) => V::any(m),
                None => false,
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
///
/// `IN_LOOP`: whether the loop may make the blocks' random bits as it goes
/// ([`Self::FILLS_AHEAD`]); [`drive`] picks it at run time ([`crate::cpu::bits_in_loop`]).
struct Driver<'a, V: Simd, L: Layout<V>, O: ElementOp<V>, const IN_LOOP: bool> {
    b: &'a mut Bufs<V, L>,
    op: &'a mut O,
    c: ChunkBufs<V, L>,
    /// Whether full chunks prefetch, and how far ahead: [`Layout::PREFETCH_AHEAD_BYTES`], or a
    /// page where the CPU's rule says so ([`step_prefetch`]).
    prefetch: Option<Ahead>,
    /// Where [`Self::FILLS_AHEAD`]: the first element (a multiple of 32) whose bits are not in
    /// the blocks yet; 0 before the run's first fill.
    filled: u64,
}

/// How far ahead of the group it computes the step's loop makes random bits, where it makes
/// them in the loop (`Driver::FILLS_AHEAD`): half a block, so that the words it writes, a block
/// on, are ones the loop has read.
const FILL_AHEAD: u64 = 512;

impl<V: Simd, L: Layout<V>, O: ElementOp<V>, const IN_LOOP: bool> ChunkBody<V>
    for Driver<'_, V, L, O, IN_LOOP>
{
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe {
            let drawing = self.drawing();
            Self::process_chunk(self.op, self.b, &self.c, off, e, drawing)
        }
    }

    #[inline(always)]
    fn prefetching(&self) -> bool {
        self.prefetch.is_some()
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
    ///
    /// Where the backend draws random bits a block at a time ([`crate::arch::Simd::RNG_BLOCK`]) and
    /// a buffer may round stochastically, the run is cut at the blocks' boundaries and the blocks
    /// are filled between the pieces, outside the chunk loop (`RoundingBits::r16_prepared`: why).
    #[inline(always)]
    unsafe fn full_run(&mut self, mut off: isize, mut e: u64, end: u64) {
        unsafe {
            if const { V::RNG_BLOCK && L::MAY_DRAW_BITS } {
                // One piece where no buffer draws bits (the run-time layout's nearest-even
                // stores): cut into blocks, LAMB over a group of small tensors took 7% more
                // instructions on AVX2.
                let block = if self.draws_bits() {
                    RoundingBits::<V>::BLOCK
                } else {
                    u64::MAX / 2
                };
                while e < end {
                    let stop = (e - e % block).saturating_add(block).min(end);
                    if const { Self::FILLS_AHEAD } {
                        self.fill_ahead_from(e);
                    } else {
                        self.prepare_bits(e);
                    }
                    self.full_run_unblocked(off, e, stop);
                    off += (stop - e) as isize;
                    e = stop;
                }
            } else {
                self.full_run_unblocked(off, e, end)
            }
        }
    }

    #[inline(always)]
    unsafe fn prefetch(&mut self, off: isize) {
        unsafe {
            let ahead = prefetch_ahead_bytes(L::PREFETCH_AHEAD_BYTES, self.prefetch);
            let c = &self.c;
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
            if const { V::RNG_BLOCK && L::MAY_DRAW_BITS } {
                self.prepare_bits(ch.e);
            }
            let drawing = self.drawing();
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
            Self::process_chunk(self.op, self.b, &staged, 0, ch.e, drawing);
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

/// Runs `$body` with `$rng` bound to the random bits of each stream that the op's stores draw
/// from (`Driver::drawing`) and `$k` to its place in [`Drawn`] (weights, then state slots 0-2),
/// inside a `Driver` method. A macro, not a closure (see `NanAcc::push_stored`) nor a loop over
/// the streams, which changed AVX2's code (gungraun: Adam +2.3%).
macro_rules! each_drawing_stream {
    ($d:expr, ($k:ident, $rng:ident) => $body:expr) => {{
        let drawing = $d.drawing();
        let b = &mut *$d.b;
        if drawing[0] {
            let ($k, $rng) = (0usize, &mut b.rng_w);
            $body;
        }
        if drawing[1] {
            let ($k, $rng) = (1usize, &mut b.rng_s[0]);
            $body;
        }
        if drawing[2] {
            let ($k, $rng) = (2usize, &mut b.rng_s[1]);
            $body;
        }
        if drawing[3] {
            let ($k, $rng) = (3usize, &mut b.rng_s[2]);
            $body;
        }
    }};
}

/// Whether every stream the driver draws from holds the block of element `e` already.
#[inline(always)]
fn each_holds<V: Simd, L: Layout<V>, O: ElementOp<V>, const IN_LOOP: bool>(
    d: &mut Driver<'_, V, L, O, IN_LOOP>,
    e: u64,
) -> bool {
    let mut all = true;
    each_drawing_stream!(d, (_k, rng) => all &= rng.holds(e));
    all
}

/// The bits of a group's stochastic paired stores, drawn before the group is computed
/// ([`Driver::draw_pairs`]): weights, then state slots 0-2; `None` where the buffer draws none.
type Drawn<V> = [Option<[<V as crate::arch::Simd>::U; 2]>; 4];

/// One chunk's part of [`Drawn`]: the bits of its stores, in the same order.
pub(super) type ChunkBits<V> = [Option<<V as crate::arch::Simd>::U>; 4];

impl<V: Simd, L: Layout<V>, O: ElementOp<V>, const IN_LOOP: bool> Driver<'_, V, L, O, IN_LOOP> {
    /// Which buffers the op stores can round stochastically (their kinds can): weights, then
    /// state slots 0-2, the order of [`Drawn`].
    const STORED_MAY_DRAW: [bool; 4] = [
        O::WRITE_W && L::W::MAY_DRAW_BITS,
        O::WRITE_S[0] && L::S0::MAY_DRAW_BITS,
        O::WRITE_S[1] && L::S1::MAY_DRAW_BITS,
        O::WRITE_S[2] && L::S2::MAY_DRAW_BITS,
    ];

    /// How many of the buffers the op stores can round stochastically.
    const STORES_DRAWING: usize = {
        let m = Self::STORED_MAY_DRAW;
        m[0] as usize + m[1] as usize + m[2] as usize + m[3] as usize
    };

    /// Whether a buffer the op stores can round stochastically.
    const STORES_MAY_DRAW: bool = Self::STORES_DRAWING > 0;

    /// Whether the stores draw their bits a group at a time, in order ([`Self::draw_pairs`]):
    /// some stored buffer can round stochastically, every such buffer takes the bits drawn for a
    /// pair of chunks ([`Access::PAIRED_DRAWS`]), and the backend draws them without a span
    /// cache. Such layouts run in groups of 2 chunks (whatever the weights), the groups in order.
    const PAIRED_DRAWS: bool = {
        let m = Self::STORED_MAY_DRAW;
        let paired = [
            L::W::PAIRED_DRAWS,
            L::S0::PAIRED_DRAWS,
            L::S1::PAIRED_DRAWS,
            L::S2::PAIRED_DRAWS,
        ];
        V::STORE_GROUP == 2
            && RoundingBits::<V>::IN_ORDER
            && Self::STORES_MAY_DRAW
            && (!m[0] || paired[0])
            && (!m[1] || paired[1])
            && (!m[2] || paired[2])
            && (!m[3] || paired[3])
    };

    /// Whether the in-order loop ([`Self::PAIRED_DRAWS`]) runs the op on its groups in two halves
    /// a group apart ([`ElementOp::PIPELINED`]): only there is each group's computation and store
    /// in the driver's hands (the other loops finish a chunk or group in one call).
    const PIPELINED: bool = O::PIPELINED && Self::PAIRED_DRAWS;

    /// Whether the chunk loop runs the op a chunk apart ([`ElementOp::PIPELINED_CHUNKS`]): where
    /// the weights or a state are 16-bit (with all of them f32 the loop ran level, for 7-10%
    /// more instructions). Not AMSGrad (a maximum in slot 2) with grouped weights (split, or
    /// bf16 rounded to nearest), where the loop a chunk apart keeps more values than AVX2's 16
    /// registers hold: in order, on the Xeon VM with 480 MiB L3 at 64K, split weights took
    /// 0.93x the time, with bf16-SR states 0.91-0.93x, bf16 weights rounded to nearest
    /// 0.96-1.00x (on a 16-core Emerald Rapids host 0.99-1.03x); all bf16 took 1.06x in order,
    /// and f32 weights with bf16-SR states level, so those keep the loop a chunk apart
    /// (docs/DESIGN.md).
    const PIPELINED_CHUNKS: bool = V::PIPELINES_CHUNKS
        && O::PIPELINED_CHUNKS
        && !(L::W::WIDE && L::S0::WIDE && L::S1::WIDE && L::S2::WIDE)
        && !(L::S2::PRESENT && L::W::GROUPED)
        && !O::NAN_TEST_PER_GROUP
        && !O::ROUNDS_IN_APPLY
        && O::BY_LANE
        && !L::RUN_TIME
        && !V::OVERLAP_CHUNKS
        && !Self::FILLS_AHEAD;

    /// Whether the chunk loop run a chunk apart loads each chunk's weights again for its tail
    /// ([`ElementOp::TAIL_RELOADS_W`]), where a store rounds stochastically: the head's weights
    /// would be live across the next chunk's head, and beside the bits and 16-bit conversions
    /// AVX2's 16 registers spill (Zen 4 VM, 64K: AMSGrad's stochastic layouts 0.95-0.99x the
    /// time, AdamW's 0.98-1.00x). Not where no store rounds: split AMSGrad took 1.06x.
    const RELOADS_W: bool = Self::PIPELINED_CHUNKS && O::TAIL_RELOADS_W && Self::STORES_MAY_DRAW;

    /// Whether a layout whose weights do not ask for groups ([`Access::GROUPED`]) runs in groups
    /// of two chunks all the same: where the stores read their bits from blocks (AVX2), some
    /// store draws, and the op neither divides nor sums by element. Each group is stored before
    /// the next is loaded. SGD's stochastic layouts with f32 or bf16-SR weights took 0.91-0.98x
    /// the time so, LAMB's bf16-SR weights 0.97-0.99x; grouped (with paired 16-bit stores),
    /// Adam's layouts ran level to 1.05x and LAMB's first pass 0.98-1.02x (docs/DESIGN.md,
    /// "Memory access forms").
    const GROUPS_BLOCK_DRAWS: bool =
        V::RNG_BLOCK && Self::STORES_MAY_DRAW && !O::DIVIDES && O::BY_LANE;

    /// Whether the grouped loop takes each pair of chunks in even/odd order
    /// ([`crate::arch::Simd::load_u16_high_even_odd`]): lane `l` of the first vector holds the
    /// pair's element `2l`, of the second element `2l + 1`, so that a 16-bit line and its two
    /// vectors convert with no shuffle, where element order takes one or two per line (on Zen 4
    /// the shuffles share pipes with the FMAs and AES rounds). Where the backend takes this
    /// order ([`crate::arch::Simd::EVEN_ODD`]), every buffer is 16-bit or absent, the op treats
    /// each lane alone (or takes the pair whole where it can get the pair's bits:
    /// [`ElementOp::EVEN_ODD_PAIRS`]), and the stores' bits, if any, can follow: drawn in this
    /// order by the in-order loop ([`Self::PAIRED_DRAWS`]), or two chunks' bits from the block put
    /// in it (AVX2, [`RoundingBits::for_rounding_even_odd`]). Same bits: each element meets the
    /// same values and bits as in element order.
    ///
    /// An f32 buffer takes the order too, a permute per vector each way
    /// ([`Access::EVEN_ODD_PERMUTES`]), where it is the step's one f32 state, the op divides and
    /// no store draws bits (split Adagrad): there the divider hides the permutes while the 16-bit
    /// buffers save their shuffles (Zen 5 VM, one thread: AVX-512 0.95× the time at 64K, 0.96×
    /// at 1M; AVX2 0.91-0.92×). With two f32 states (Adam) the permutes cost 7-12%, with one
    /// where the op does not divide (SGD) 6%, and beside bf16-SR weights the f32 sum 13-17% at
    /// 1M on AVX-512; f32 weights and gradients stay in element order (docs/DESIGN.md).
    const EVEN_ODD: bool = V::EVEN_ODD
        && V::STORE_GROUP == 2
        && L::EVEN_ODD
        && !L::W::EVEN_ODD_PERMUTES
        && !L::G::EVEN_ODD_PERMUTES
        && (L::PERMUTED_STATES == 0 || L::PERMUTED_STATES == 1 && O::DIVIDES && !L::MAY_DRAW_BITS)
        && (O::BY_LANE || O::EVEN_ODD_PAIRS && (Self::PAIRED_DRAWS || Self::PAIRS_FROM_BLOCKS))
        && (!Self::STORES_MAY_DRAW || Self::PAIRED_DRAWS || V::RNG_BLOCK);

    /// Whether a loop that draws no bits in order can hand an op that takes a pair whole
    /// ([`ElementOp::EVEN_ODD_PAIRS`]) its pairs: where the backend draws a block at a time and
    /// the blocks of any stochastic store take the even/odd layout (the conditions of
    /// [`Self::EVEN_ODD_BLOCKS`] but the order itself), so that `apply` gets each pair's bits
    /// ([`Self::finish_g`]). Such a loop starts its pairs at multiples of 16 elements
    /// ([`Self::full_run_grouped`]), where the pair's lanes are whole reduction lanes.
    const PAIRS_FROM_BLOCKS: bool = V::RNG_BLOCK
        && (!Self::STORES_MAY_DRAW
            || (L::W::GROUPED || Self::PAIRED_DRAWS)
                && (!O::DIVIDES || Self::STORED_MAY_DRAW[1] && Self::STORED_MAY_DRAW[2]));

    /// Which buffers the op stores round stochastically in this call ([`Self::STORED_MAY_DRAW`]'s
    /// order).
    #[inline(always)]
    fn drawing(&self) -> [bool; 4] {
        let (m, c) = (Self::STORED_MAY_DRAW, &self.c);
        [
            m[0] && c.w.draws_bits(),
            m[1] && c.s0.draws_bits(),
            m[2] && c.s1.draws_bits(),
            m[3] && c.s2.draws_bits(),
        ]
    }

    /// Whether the backend draws random bits a block at a time ([`crate::arch::Simd::RNG_BLOCK`]),
    /// the loop reads them in even/odd pairs ([`Self::EVEN_ODD`], in the grouped loop), and the
    /// layout pays: the blocks then take the even/odd layout
    /// ([`RoundingBits::use_even_odd_blocks`]), the pairs read their bits in the loop
    /// ([`Self::even_odd_block_bits`]) and the chunks taken alone through
    /// [`Self::process_chunk`]. The layout moves the bits' shuffles out of the loop into the
    /// fill, which runs alone, and saves the second moment's copy: a loop bound by its divider
    /// whose stores draw one stream's bits hid those shuffles, and only lost (Adagrad's bf16-SR
    /// sum, AVX2: 1.05-1.10x the time on the 16-core Xeon host, level on Zen 4).
    const EVEN_ODD_BLOCKS: bool = V::RNG_BLOCK
        && Self::EVEN_ODD
        && Self::STORES_MAY_DRAW
        && (L::W::GROUPED || Self::PAIRED_DRAWS)
        && V::STORE_GROUP == 2
        && (!O::DIVIDES || Self::STORED_MAY_DRAW[1] && Self::STORED_MAY_DRAW[2]);

    /// Whether both moments' stores round stochastically, the layout says so
    /// ([`Access::ALWAYS_DRAWS`]), with bits from blocks in element order, chunk by chunk: the
    /// loop then reads the first moment's words and hands the second moment the same words with
    /// partners exchanged ([`Self::first_moments_bits`]). The compiled grouped layouts whose
    /// moments both round (split or nearest-rounded bf16 weights) take bf16 gradients, so the
    /// even/odd blocks. The run-time kind keeps a copy of the first moment's blocks
    /// ([`RoundingBits::copy_blocks_of`]): through it, this path changed LLVM's code for LAMB's
    /// f32 and IPEX layouts on AVX2, which share their entry points with it.
    const SHARES_FIRST_BITS: bool = V::RNG_BLOCK
        && O::WRITE_S[0]
        && O::WRITE_S[1]
        && L::S0::ALWAYS_DRAWS
        && L::S1::ALWAYS_DRAWS
        && !Self::EVEN_ODD_BLOCKS
        && !(L::W::GROUPED || Self::PAIRED_DRAWS || Self::GROUPS_BLOCK_DRAWS);

    /// Where the backend draws its bits a block at a time, lays out the blocks for the loop
    /// ([`Self::EVEN_ODD_BLOCKS`]), and where both moments round stochastically, has the rounds
    /// run once for the two (SPEC.md §3.2): the second moment reads the first moment's blocks,
    /// in the even/odd layout as its own ([`RoundingBits::share_even_odd_blocks_of`]), in
    /// element order through the loop ([`RoundingBits::read_first_moments`],
    /// [`Self::first_moments_bits`]); otherwise its blocks are copies of the first moment's
    /// with partners exchanged ([`RoundingBits::copy_blocks_of`]). AMSGrad's maximum, which
    /// takes the second moment's bits, reads them the same way.
    #[inline(always)]
    fn arrange_bits(&mut self) {
        if const { Self::EVEN_ODD_BLOCKS } {
            each_drawing_stream!(self, (_k, rng) => rng.use_even_odd_blocks());
        }
        if const {
            V::RNG_BLOCK
                && Self::STORED_MAY_DRAW[1]
                && (Self::STORED_MAY_DRAW[2] || Self::STORED_MAY_DRAW[3])
        } {
            let d = self.drawing();
            let [s0, s1, s2] = &mut self.b.rng_s;
            if d[1] && d[2] {
                Self::read_first_moments_blocks(s1, s0);
            }
            if d[1] && d[3] {
                Self::read_first_moments_blocks(s2, s0);
            }
        }
    }

    /// Makes `stream`, drawn from the first moment's counters with partners exchanged (the
    /// second moment's, AMSGrad maximum's), read `first`'s blocks as [`Self::arrange_bits`] says.
    #[inline(always)]
    fn read_first_moments_blocks(stream: &mut RoundingBits<V>, first: &RoundingBits<V>) {
        if const { Self::EVEN_ODD_BLOCKS } {
            stream.share_even_odd_blocks_of(first);
        } else if const { Self::SHARES_FIRST_BITS } {
            stream.read_first_moments(first);
        } else {
            stream.copy_blocks_of(first);
        }
    }

    /// Where [`Self::SHARES_FIRST_BITS`] and both moments draw (`drawing`), the bits of both
    /// moments' stores for the chunk at `e`: the first moment's words from its block, and the
    /// same words with partners exchanged for the second and for AMSGrad's maximum (SPEC.md
    /// §3.2), one `vpshufd` where a copy of the block took a load, a shuffle and a store per
    /// vector. No bits otherwise.
    #[inline(always)]
    unsafe fn first_moments_bits(b: &mut Bufs<V, L>, e: u64, drawing: [bool; 4]) -> Drawn<V> {
        unsafe {
            let mut drawn = [None; 4];
            if const { Self::SHARES_FIRST_BITS } && drawing[1] && drawing[2] {
                let r = b.rng_s[0].r16_prepared(e);
                drawn[1] = Some([r, r]);
                drawn[2] = Some(partners::<V>([r, r], false));
                if drawing[3] {
                    drawn[3] = drawn[2];
                }
            }
            drawn
        }
    }

    /// [`process`] on the chunk of `c` at `off` (global `e`), with the bits of its stochastic
    /// stores read from blocks in the even/odd layout where [`Self::EVEN_ODD_BLOCKS`]
    /// ([`RoundingBits::r16_even_odd_blocks`]), or drawn with the span's fill out of line where
    /// [`Self::PAIRED_DRAWS`] ([`RoundingBits::r16_alone`]): the chunks such a loop takes alone,
    /// at a run's ends; both moments' from the first moment's block where
    /// [`Self::SHARES_FIRST_BITS`] (every chunk of such a layout's loop). Same bits: each
    /// element meets its own.
    ///
    /// `drawing`: [`Self::drawing`]. An associated function, taking the driver's fields apart,
    /// so that a caller can hand it a stage's buffers or the driver's own.
    #[inline(always)]
    unsafe fn process_chunk(
        op: &mut O,
        b: &mut Bufs<V, L>,
        c: &ChunkBufs<V, L>,
        off: isize,
        e: u64,
        drawing: [bool; 4],
    ) {
        unsafe {
            if const { Self::EVEN_ODD_BLOCKS || Self::PAIRED_DRAWS || Self::SHARES_FIRST_BITS } {
                let drawn = Self::chunk_drawn(b, e, drawing);
                let mut vs = [load_vals::<V, L, O>(c, off)];
                compute_group::<V, L, O, 1, false>(op, b, &mut vs, e, &drawn);
                store_vals::<V, L, O, 1>(b, c, vs, off, e, drawn);
            } else {
                process::<V, L, O>(op, b, c, off, e)
            }
        }
    }

    /// The bits [`Self::process_chunk`] hands the stores of the chunk at `e`: none where the
    /// stores draw their own.
    #[inline(always)]
    unsafe fn chunk_drawn(b: &mut Bufs<V, L>, e: u64, drawing: [bool; 4]) -> Drawn<V> {
        unsafe {
            if const { Self::SHARES_FIRST_BITS } {
                Self::first_moments_bits(b, e, drawing)
            } else if const { Self::EVEN_ODD_BLOCKS || Self::PAIRED_DRAWS } {
                let mut drawn: Drawn<V> = [None; 4];
                let [s0, s1, s2] = &mut b.rng_s;
                for (k, rng) in [&mut b.rng_w, s0, s1, s2].into_iter().enumerate() {
                    if drawing[k] {
                        let r = if const { Self::EVEN_ODD_BLOCKS } {
                            rng.r16_even_odd_blocks(e)
                        } else {
                            rng.r16_alone(e)
                        };
                        drawn[k] = Some([r, r]);
                    }
                }
                drawn
            } else {
                [None; 4]
            }
        }
    }

    /// The second half of [`Self::process_chunk`] where the loop is pipelined
    /// ([`ElementOp::PIPELINED_CHUNKS`]): `v` as [`ElementOp::head`] left it, finished, tested
    /// for NaNs and stored. The same operations in the same order as `compute` and `store_vals`.
    #[inline(always)]
    unsafe fn finish_pipelined(
        op: &mut O,
        b: &mut Bufs<V, L>,
        c: &ChunkBufs<V, L>,
        mut v: Vals<V>,
        off: isize,
        e: u64,
        drawing: [bool; 4],
    ) {
        unsafe {
            let drawn = Self::chunk_drawn(b, e, drawing);
            if const { Self::RELOADS_W } {
                v.p = op.head_weights(load_vals::<V, L, O>(c, off).p);
            }
            tail_tested::<V, L, O>(op, &mut v, e);
            store_vals::<V, L, O, 1>(b, c, [v], off, e, drawn);
        }
    }

    /// Whether a buffer the op stores rounds stochastically.
    #[inline(always)]
    fn draws_bits(&self) -> bool {
        let d = self.drawing();
        d[0] || d[1] || d[2] || d[3]
    }

    /// Fills the random bits' blocks holding element `e` for every buffer the op stores that
    /// rounds stochastically (`RoundingBits::prepare`), out of the chunk loop.
    #[inline(always)]
    unsafe fn prepare_bits(&mut self, e: u64) {
        let even_odd = Self::EVEN_ODD_BLOCKS;
        each_drawing_stream!(self, (_k, rng) => unsafe { rng.prepare(e, even_odd) });
    }

    /// Whether the step's loop makes the blocks' random bits as it goes, [`FILL_AHEAD`]
    /// elements ahead of the group it computes, each block a ring
    /// ([`ElementOp::BITS_IN_LOOP_UP_TO`]).
    /// Both loops that take them make them (`grouped_loop`, and `full_run_chunks` where chunks
    /// do not overlap); the overlapping chunk loop does not.
    const FILLS_AHEAD: bool = IN_LOOP && Self::MAY_FILL_AHEAD;

    /// How many streams' bits the loop would make, as [`ElementOp::BITS_IN_LOOP_UP_TO`] counts
    /// them: one per store that can round stochastically, but one for both moments where the
    /// second reads the first moment's words in the loop ([`Self::SHARES_FIRST_BITS`]). Moments
    /// that share even/odd blocks count two: made in the loop, with the grouped loop's values,
    /// AdamW's split weights with bf16-SR states took 1.07x the fill's time (docs/DESIGN.md).
    /// AMSGrad's maximum, which reads the first moment's words too, still counts: with the one
    /// stream made in its loop, AMSGrad's f32 weights with bf16-SR states took 1.10x the time
    /// (AVX2 on a Sapphire Rapids class Xeon, 64K).
    const STREAMS_FILLED: usize = Self::STORES_DRAWING - Self::SHARES_FIRST_BITS as usize;

    /// Whether the layout and op let the loop make the bits as it goes ([`Self::FILLS_AHEAD`]
    /// where `IN_LOOP`).
    const MAY_FILL_AHEAD: bool = V::RNG_BLOCK
        && Self::STORES_MAY_DRAW
        && Self::STREAMS_FILLED <= O::BITS_IN_LOOP_UP_TO
        && L::MAY_DRAW_BITS
        && ((L::W::GROUPED || Self::PAIRED_DRAWS) && (V::STORE_GROUP == 2 || V::STORE_GROUP == 4)
            || !V::OVERLAP_CHUNKS);

    /// Where [`Self::FILLS_AHEAD`], readies the blocks for the run from element `e`, the start of
    /// a run or of a block within it: the bits of the elements up to [`FILL_AHEAD`] on, unless
    /// made already, and each stream's block the one holding `e`.
    #[inline(always)]
    unsafe fn fill_ahead_from(&mut self, e: u64) {
        unsafe {
            if !self.draws_bits() {
                return;
            }
            let from = e - e % 32;
            let block = RoundingBits::<V>::BLOCK;
            let even_odd = Self::EVEN_ODD_BLOCKS;
            if self.filled <= from || self.filled > from + FILL_AHEAD + 32 {
                if each_holds(self, e) {
                    // Filled whole by a chunk taken before the run.
                    self.filled = e - e % block + block;
                } else {
                    let to = from + FILL_AHEAD;
                    each_drawing_stream!(self, (_k, rng) => rng.prepare_part(from, to, even_odd));
                    let mut at = (from - from % block + block).min(to);
                    while at < to {
                        each_drawing_stream!(self, (_k, rng) => rng.fill_group_ring(at, even_odd));
                        at += 32;
                    }
                    self.filled = to;
                }
            }
            each_drawing_stream!(self, (_k, rng) => rng.hold_block(e));
        }
    }

    /// Where [`Self::FILLS_AHEAD`]: the bits of the next 32 elements not yet made (of the next
    /// span where one starts there), while they lie within [`FILL_AHEAD`] of the group from `e` (a
    /// block's words, a ring: those a block on in the places the loop has read).
    #[inline(always)]
    unsafe fn fill_ahead(&mut self, e: u64) {
        unsafe {
            if self.draws_bits() && self.filled < e + FILL_AHEAD {
                let at = self.filled;
                let even_odd = Self::EVEN_ODD_BLOCKS;
                // A span at a time from a span's start: its eight counter vectors keep the AES
                // unit busy where a group's two wait on their rounds' latency, and the stream's
                // constants are tested once a span (group by group, Adagrad's bf16-SR states took
                // 1.07-1.22x the time, AdamW's bf16-SR weights 1.02-1.17x: Emerald Rapids VM,
                // medians; docs/DESIGN.md).
                let span = RoundingBits::<V>::SPAN_ELEMENTS;
                if at.is_multiple_of(span) {
                    each_drawing_stream!(self, (_k, rng) => rng.fill_span_ring(at, even_odd));
                    self.filled = at + span;
                } else {
                    each_drawing_stream!(self, (_k, rng) => rng.fill_group_ring(at, even_odd));
                    self.filled = at + 32;
                }
            }
        }
    }

    /// [`ChunkBody::full_run`] within one block of random bits (or all of it where none are
    /// drawn a block at a time).
    #[inline(always)]
    unsafe fn full_run_unblocked(&mut self, off: isize, e: u64, end: u64) {
        unsafe {
            // Inline-const conditions: rustc instantiates only the branch taken, so each driver
            // compiles one loop, not all three (the library's build spends its time on these).
            if const {
                (L::W::GROUPED || Self::PAIRED_DRAWS || Self::GROUPS_BLOCK_DRAWS)
                    && V::STORE_GROUP == 2
            } {
                self.full_run_grouped::<2>(off, e, end)
            } else if const { L::W::GROUPED && V::STORE_GROUP == 4 } {
                self.full_run_grouped::<4>(off, e, end)
            } else {
                self.full_run_chunks(off, e, end)
            }
        }
    }

    /// [`ChunkBody::full_run`] chunk by chunk: overlapped where [`crate::arch::Simd::OVERLAP_CHUNKS`], with
    /// a copy of the loop per prefetch case (as in `full_run_plain`: a test per chunk cost f32
    /// SGD at 64K 8-15% on AVX-512).
    #[inline(always)]
    unsafe fn full_run_chunks(&mut self, mut off: isize, mut e: u64, end: u64) {
        unsafe {
            let l = V::LANES as u64;
            if const { !V::OVERLAP_CHUNKS && Self::FILLS_AHEAD } {
                while e < end {
                    if self.prefetching() {
                        self.prefetch(off);
                    }
                    self.fill_ahead(e);
                    self.full(off, e);
                    off += V::LANES as isize;
                    e += l;
                }
                return;
            }
            if const { Self::PIPELINED_CHUNKS } {
                return self.full_run_pipelined(off, e, end);
            }
            if const { !V::OVERLAP_CHUNKS } {
                return full_run_plain::<V, Self>(self, off, e, end);
            }
            // At least one full chunk (`run_chunks`); with exactly one, the loops below are empty
            // and the last `finish` computes it.
            let last = end - l;
            let mut v = load_vals::<V, L, O>(&self.c, off);
            if self.prefetching() {
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

    /// [`Self::full_run_chunks`] a chunk apart ([`Self::PIPELINED_CHUNKS`]): the next chunk
    /// loaded and its [`ElementOp::head`] run before this chunk's tail and stores. The chunks
    /// still never overlap in memory: a chunk reads only its own elements. A copy of the loop
    /// per prefetch case, as in `full_run_plain`.
    #[inline(always)]
    unsafe fn full_run_pipelined(&mut self, off: isize, e: u64, end: u64) {
        unsafe {
            if self.prefetching() {
                self.pipelined_loop::<true>(off, e, end)
            } else {
                self.pipelined_loop::<false>(off, e, end)
            }
        }
    }

    /// [`Self::full_run_pipelined`]'s loop, prefetching where `PREFETCH`.
    #[inline(always)]
    unsafe fn pipelined_loop<const PREFETCH: bool>(
        &mut self,
        mut off: isize,
        mut e: u64,
        end: u64,
    ) {
        unsafe {
            let l = V::LANES as u64;
            // At least one full chunk, as in `full_run_chunks`.
            let last = end - l;
            let drawing = self.drawing();
            let mut v = load_vals::<V, L, O>(&self.c, off);
            self.op.head(&mut v, e, self.b, [None; 4]);
            while e < last {
                if PREFETCH {
                    self.prefetch(off);
                }
                let mut next = load_vals::<V, L, O>(&self.c, off + V::LANES as isize);
                self.op.head(&mut next, e + l, self.b, [None; 4]);
                Self::finish_pipelined(self.op, self.b, &self.c, v, off, e, drawing);
                v = next;
                off += V::LANES as isize;
                e += l;
            }
            Self::finish_pipelined(self.op, self.b, &self.c, v, off, e, drawing);
        }
    }

    /// [`ChunkBody::full_run`] with groups of `G` chunks, and the chunks after the last group
    /// one by one. One copy of each loop body, with the prefetch test in the group loop (once
    /// per group): a copy per case had made the test profile's build of the crate take minutes
    /// longer.
    ///
    /// Where the stores of a pair of chunks can draw their bits in order, a group at a time
    /// ([`RoundingBits::next_pair`]), the groups start at multiples of 32 elements (a chunk alone
    /// first where the run starts half-way through one), the streams are readied before the
    /// loop, and the run is cut where counter word 1 changes ([`SEQ_GROUPS`]).
    #[inline(always)]
    unsafe fn full_run_grouped<const G: usize>(&mut self, off: isize, e: u64, end: u64) {
        unsafe {
            // Inline-const conditions, as in `full_run_unblocked`.
            if const { G == 2 && Self::PAIRED_DRAWS } {
                self.full_run_in_order::<G>(off, e, end)
            } else {
                let (mut off, mut e) = (off, e);
                // An op that takes pairs whole gets them from multiples of two chunks (16 elements
                // on AVX2: `Self::PAIRS_FROM_BLOCKS`).
                if const { G == 2 && Self::EVEN_ODD && !O::BY_LANE } {
                    let pair = 2 * V::LANES as u64;
                    if !e.is_multiple_of(pair) && e < end {
                        let drawing = self.drawing();
                        Self::process_chunk(self.op, self.b, &self.c, off, e, drawing);
                        off += V::LANES as isize;
                        e += V::LANES as u64;
                    }
                }
                self.grouped_loop::<G, false>(off, e, end)
            }
        }
    }

    /// [`Self::full_run_grouped`] with the bits of the paired stores in order.
    #[inline(always)]
    unsafe fn full_run_in_order<const G: usize>(&mut self, mut off: isize, mut e: u64, end: u64) {
        unsafe {
            let l = V::LANES as u64;
            if !e.is_multiple_of(32) && e < end {
                let drawing = self.drawing();
                Self::process_chunk(self.op, self.b, &self.c, off, e, drawing);
                off += l as isize;
                e += l;
            }
            let run = 32 * SEQ_GROUPS;
            while e < end {
                let stop = (e - e % run).saturating_add(run).min(end);
                self.grouped_loop::<G, true>(off, e, stop);
                off += (stop - e) as isize;
                e = stop;
            }
        }
    }

    /// Readies every stream whose stores draw bits for the groups from element `e`, and gives
    /// what their draws share. Every stream of a step has the step's seed (`Bufs::of`).
    #[inline(always)]
    unsafe fn begin_pairs(&mut self, e: u64) -> PairDraw<V> {
        unsafe {
            let seed = self.b.rng_w.coord().seed;
            each_drawing_stream!(self, (_k, rng) => {
                debug_assert_eq!(rng.coord().seed, seed);
                rng.begin_pairs(e)
            });
            PairDraw::new(seed, e)
        }
    }

    /// The bits of the group `d` is at for every stream whose stores draw them, in even/odd
    /// order where the loop takes its chunks so ([`Self::EVEN_ODD`]). The second moment's are the
    /// first moment's with partners exchanged (SPEC.md §3.2): where both round, the rounds run
    /// once for the two (Zen 4: Adam with bf16-SR states 0.87x the time, docs/DESIGN.md), and
    /// AMSGrad's maximum takes the second moment's.
    #[inline(always)]
    unsafe fn draw_pairs(&mut self, d: &PairDraw<V>) -> Drawn<V> {
        unsafe {
            let drawing = self.drawing();
            let b = &*self.b;
            let mut drawn = [None; 4];
            if drawing[0] {
                drawn[0] = Some(Self::pair_of(&b.rng_w, d));
            }
            if drawing[1] {
                drawn[1] = Some(Self::pair_of(&b.rng_s[0], d));
            }
            if drawing[2] || drawing[3] {
                debug_assert!({
                    let first = b.rng_s[0].coord();
                    [1, 2].iter().all(|&i| {
                        let c = b.rng_s[i].coord();
                        !drawing[i + 1] || (c.swap_pairs && c.stream_word == first.stream_word)
                    })
                });
                // The maximum's counters are the second moment's, so either stream draws them.
                let pair = match drawn[1] {
                    Some(pair) => pair,
                    None => Self::pair_of(&b.rng_s[if drawing[2] { 1 } else { 2 }], d),
                };
                let second = Some(partners::<V>(pair, Self::EVEN_ODD));
                if drawing[2] {
                    drawn[2] = second;
                }
                if drawing[3] {
                    drawn[3] = second;
                }
            }
            drawn
        }
    }

    /// One stream's bits of the group `d` is at, as its counters give them.
    #[inline(always)]
    unsafe fn pair_of(rng: &RoundingBits<V>, d: &PairDraw<V>) -> [V::U; 2] {
        unsafe {
            if const { Self::EVEN_ODD } {
                rng.next_pair_even_odd(d)
            } else {
                rng.next_pair(d)
            }
        }
    }

    /// The `G` chunks from `off`, for the grouped loop: a pair in even/odd order where
    /// [`Self::EVEN_ODD`].
    #[inline(always)]
    unsafe fn load_g<const G: usize>(&self, off: isize) -> [Vals<V>; G] {
        unsafe {
            if const { Self::EVEN_ODD && G == 2 } {
                load_even_odd::<V, L, O, G>(&self.c, off)
            } else {
                load_group::<V, L, O, G>(&self.c, off)
            }
        }
    }

    /// [`store_vals`] for the grouped loop, in even/odd order where [`Self::EVEN_ODD`].
    #[inline(always)]
    unsafe fn store_g<const G: usize>(
        &mut self,
        vs: [Vals<V>; G],
        off: isize,
        e: u64,
        drawn: Drawn<V>,
    ) {
        unsafe {
            if const { Self::EVEN_ODD && G == 2 } {
                let drawn = if const { Self::EVEN_ODD_BLOCKS } {
                    self.even_odd_block_bits(e)
                } else {
                    drawn
                };
                store_even_odd::<V, L, O, G>(self.b, &self.c, vs, off, e, drawn)
            } else {
                store_vals::<V, L, O, G>(self.b, &self.c, vs, off, e, drawn)
            }
        }
    }

    /// The bits of the pair at `e` for every stream whose stores draw them, from blocks in the
    /// even/odd layout ([`Self::EVEN_ODD_BLOCKS`]).
    #[inline(always)]
    unsafe fn even_odd_block_bits(&mut self, e: u64) -> Drawn<V> {
        unsafe {
            let mut drawn = [None; 4];
            each_drawing_stream!(self, (k, rng) => drawn[k] = Some(rng.pair_from_even_odd_blocks(e)));
            drawn
        }
    }

    /// [`compute_group`] for the grouped loop, in even/odd order where [`Self::EVEN_ODD`].
    #[inline(always)]
    unsafe fn compute_g<const G: usize>(
        &mut self,
        vs: &mut [Vals<V>; G],
        e: u64,
        drawn: &Drawn<V>,
    ) {
        unsafe {
            if const { Self::EVEN_ODD } {
                compute_group::<V, L, O, G, true>(self.op, self.b, vs, e, drawn)
            } else {
                compute_group::<V, L, O, G, false>(self.op, self.b, vs, e, drawn)
            }
        }
    }

    /// [`Self::compute_g`], or where [`Self::PIPELINED`] its first half ([`Self::tail_g`] the rest).
    #[inline(always)]
    unsafe fn head_g<const G: usize>(&mut self, vs: &mut [Vals<V>; G], e: u64, drawn: &Drawn<V>) {
        unsafe {
            if const { Self::PIPELINED && Self::EVEN_ODD && !O::BY_LANE } {
                debug_assert_eq!(G, 2);
                let bits = [apply_bits::<V, O>(drawn, 0), apply_bits::<V, O>(drawn, 1)];
                let (x, y) = vs.split_at_mut(1);
                self.op.head_even_odd(&mut x[0], &mut y[0], e, self.b, bits);
            } else if const { Self::PIPELINED } {
                unrolled!(G, i => {
                    let bits = apply_bits::<V, O>(drawn, i);
                    self.op.head(&mut vs[i], e + (i * V::LANES) as u64, self.b, bits);
                });
            } else {
                self.compute_g::<G>(vs, e, drawn)
            }
        }
    }

    /// Where [`Self::PIPELINED`], the rest of the group from `e` that [`Self::head_g`] began, and
    /// its NaN test (each chunk's, for an op that tests chunks alone); otherwise nothing.
    #[inline(always)]
    unsafe fn tail_g<const G: usize>(&mut self, vs: &mut [Vals<V>; G], e: u64) {
        unsafe {
            if const { Self::PIPELINED } {
                if const { Self::EVEN_ODD && !O::BY_LANE } {
                    // Such an op tests per group (`compute_group`).
                    let (x, y) = vs.split_at_mut(1);
                    self.op.tail_even_odd::<L>(&mut x[0], &mut y[0], e);
                    canonicalize_group::<V, L, O, G>(vs);
                } else if const { O::NAN_TEST_PER_GROUP } {
                    unrolled!(G, i => {
                        self.op.tail::<L>(&mut vs[i], e + (i * V::LANES) as u64);
                    });
                    canonicalize_group::<V, L, O, G>(vs);
                } else {
                    unrolled!(G, i => {
                        tail_tested::<V, L, O>(self.op, &mut vs[i], e + (i * V::LANES) as u64);
                    });
                }
            }
        }
    }

    /// [`finish_group`] for the grouped loop, in even/odd order where [`Self::EVEN_ODD`].
    #[inline(always)]
    unsafe fn finish_g<const G: usize>(&mut self, mut vs: [Vals<V>; G], off: isize, e: u64) {
        unsafe {
            // An op that rounds in `apply` takes the pair's bits there (its stores then add none).
            let drawn = if const { Self::EVEN_ODD_BLOCKS && O::ROUNDS_IN_APPLY && G == 2 } {
                self.even_odd_block_bits(e)
            } else {
                [None; 4]
            };
            self.compute_g::<G>(&mut vs, e, &drawn);
            self.store_g::<G>(vs, off, e, [None; 4]);
        }
    }

    /// [`ElementOp::head`] of each chunk of the group from `e`, where the grouped loop is
    /// pipelined ([`Self::PIPELINED_CHUNKS`]: an op that treats each lane alone, so a pair in
    /// even/odd order too).
    #[inline(always)]
    unsafe fn head_pipelined_g<const G: usize>(&mut self, vs: &mut [Vals<V>; G], e: u64) {
        unsafe {
            unrolled!(G, i => {
                self.op.head(&mut vs[i], e + (i * V::LANES) as u64, self.b, [None; 4]);
            });
        }
    }

    /// [`Self::finish_g`] of a group whose heads ran ([`Self::head_pipelined_g`]): each chunk's
    /// tail and NaN test, then the group's stores.
    #[inline(always)]
    unsafe fn finish_pipelined_g<const G: usize>(
        &mut self,
        mut vs: [Vals<V>; G],
        off: isize,
        e: u64,
    ) {
        unsafe {
            if const { Self::RELOADS_W } {
                let again = self.load_g::<G>(off);
                unrolled!(G, i => {
                    vs[i].p = self.op.head_weights(again[i].p);
                });
            }
            unrolled!(G, i => {
                tail_tested::<V, L, O>(self.op, &mut vs[i], e + (i * V::LANES) as u64);
            });
            self.store_g::<G>(vs, off, e, [None; 4]);
        }
    }

    /// [`Self::full_run_grouped`]'s loop over one piece.
    #[inline(always)]
    unsafe fn grouped_loop<const G: usize, const IN_ORDER: bool>(
        &mut self,
        mut off: isize,
        mut e: u64,
        end: u64,
    ) {
        unsafe {
            let (l, gl) = (V::LANES as u64, (G * V::LANES) as u64);
            let last = e + (end - e) / gl * gl;
            if last - e >= 2 * gl {
                // In order, an op that divides computes each group before storing the previous
                // one: the next divisions reach the divider ahead of the rounds and stores (Zen 4:
                // 2-4% off the bf16-SR states steps, docs/DESIGN.md). Any other op stores first,
                // so that no group's values are live across the next one's and LLVM copies none
                // at the loop's end (Zen 5: SGD with bf16-SR states 0.93-0.96x the time).
                let mut draw = if const { IN_ORDER } {
                    Some(self.begin_pairs(e))
                } else {
                    None
                };
                let mut cur = self.load_g::<G>(off);
                if const { !IN_ORDER && Self::PIPELINED_CHUNKS } {
                    self.head_pipelined_g::<G>(&mut cur, e);
                }
                // A group's bits are drawn two groups ahead of its arithmetic and kept for its
                // stores (and `apply`, where it rounds values as they will be stored: LAMB), so
                // that the rounds' latency lies off the loop's path: drawn for the group being
                // stored, SGD's bf16-SR steps took 1.07-1.11x the time and LAMB, drawing as the
                // group was computed, 1.02-1.03x (Zen 4, docs/DESIGN.md).
                let (mut cur_drawn, mut next_drawn) = ([None; 4], [None; 4]);
                if const { IN_ORDER } {
                    if let Some(d) = draw.as_mut() {
                        cur_drawn = self.draw_pairs(d);
                        d.advance();
                        next_drawn = self.draw_pairs(d);
                        d.advance();
                    }
                    self.head_g::<G>(&mut cur, e, &cur_drawn);
                }
                while e + gl < last {
                    if const { Self::FILLS_AHEAD } {
                        self.fill_ahead(e);
                    }
                    if self.prefetching() {
                        unrolled!(G, i => {
                            self.prefetch(off + (i * V::LANES) as isize);
                        });
                    }
                    // Inline-const branches, so that the other loops' builds do not carry this
                    // one (`draw` is always `Some` here).
                    if const { IN_ORDER } {
                        if let Some(d) = draw.as_mut() {
                            // The bits of the group two on.
                            let drawn = self.draw_pairs(d);
                            d.advance();
                            // A pipelined op's tail of this group after the next one's head.
                            if const { O::DIVIDES || Self::PIPELINED } {
                                let mut next = self.load_g::<G>(off + gl as isize);
                                self.head_g::<G>(&mut next, e + gl, &next_drawn);
                                self.tail_g::<G>(&mut cur, e);
                                self.store_g::<G>(cur, off, e, cur_drawn);
                                cur = next;
                            } else {
                                self.store_g::<G>(cur, off, e, cur_drawn);
                                cur = self.load_g::<G>(off + gl as isize);
                                self.compute_g::<G>(&mut cur, e + gl, &next_drawn);
                            }
                            (cur_drawn, next_drawn) = (next_drawn, drawn);
                        }
                    } else if const { Self::PIPELINED_CHUNKS } {
                        let mut next = self.load_g::<G>(off + gl as isize);
                        self.head_pipelined_g::<G>(&mut next, e + gl);
                        self.finish_pipelined_g::<G>(cur, off, e);
                        cur = next;
                    } else if V::OVERLAP_CHUNKS {
                        // The next group's loads before this group's stores.
                        let next = self.load_g::<G>(off + gl as isize);
                        self.finish_g::<G>(cur, off, e);
                        cur = next;
                    } else {
                        self.finish_g::<G>(cur, off, e);
                        cur = self.load_g::<G>(off + gl as isize);
                    }
                    off += gl as isize;
                    e += gl;
                }
                if const { IN_ORDER } {
                    self.tail_g::<G>(&mut cur, e);
                    self.store_g::<G>(cur, off, e, cur_drawn);
                } else if const { Self::PIPELINED_CHUNKS } {
                    self.finish_pipelined_g::<G>(cur, off, e);
                } else {
                    self.finish_g::<G>(cur, off, e);
                }
                off += gl as isize;
                e += gl;
            }
            while e < end {
                let drawing = self.drawing();
                Self::process_chunk(self.op, self.b, &self.c, off, e, drawing);
                off += l as isize;
                e += l;
            }
        }
    }
}

/// Runs `op` over the tensor of `n` elements starting at global index `base`.
#[inline(always)]
pub(super) unsafe fn drive<V: Simd, L: Layout<V>, O: ElementOp<V>>(
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
        // The length first: a short step never reads the setting (whose first read looks up the
        // environment).
        let prefetch = if V::HAS_PREFETCH && n >= PREFETCH_MIN {
            step_prefetch(n, b.step_len, const { step_buffers::<V, L, O>() })
        } else {
            None
        };
        // Where the loop may make the bits, the CPU decides whether it does: two copies of the
        // loop, for those layouts only (for the others the test is a constant false and the
        // second copy dead code).
        if Driver::<V, L, O, true>::MAY_FILL_AHEAD && !crate::cpu::bits_in_loop() {
            run_driver(
                Driver::<V, L, O, false> {
                    b,
                    op,
                    c,
                    prefetch,
                    filled: 0,
                },
                base,
                n,
            )
        } else {
            run_driver(
                Driver::<V, L, O, true> {
                    b,
                    op,
                    c,
                    prefetch,
                    filled: 0,
                },
                base,
                n,
            )
        }
    }
}

/// Runs `driver` over the `n` elements from global index `base`.
#[inline(always)]
unsafe fn run_driver<V: Simd, L: Layout<V>, O: ElementOp<V>, const IN_LOOP: bool>(
    mut driver: Driver<'_, V, L, O, IN_LOOP>,
    base: u64,
    n: usize,
) {
    unsafe {
        driver.arrange_bits();
        run_chunks::<V, _>(base, n, &mut driver);
    }
}

/// How the prefetch rule sees a step of the layout `L` and the op `O`: the layout's buffers, for
/// the plain f32 ones and the narrow ones with one f32 state whether the op divides, and for the
/// all-f32 ones with two states whether it reads gradients and writes the weights
/// ([`StepBuffers::of_op`]).
pub(super) const fn step_buffers<V: Simd, L: Layout<V>, O: ElementOp<V>>() -> StepBuffers {
    L::BUFFERS.of_op(O::DIVIDES, O::WRITE_W && <L::G as Access<V>>::PRESENT)
}

/// `weight_decay != 0`, decided once per call. `black_box` keeps it a `bool`: otherwise LLVM
/// folds it back into a float compare in every chunk, a uop on a vector port.
#[inline(always)]
pub(super) fn decays(weight_decay: f32) -> bool {
    core::hint::black_box(weight_decay != 0.0)
}

/// The sign bit of an f32.
pub(super) const SIGN_BIT: u32 = 0x8000_0000;

/// `x` with its sign flipped in the lanes where `sign` holds [`SIGN_BIT`] (and kept where zero).
#[inline(always)]
pub(super) unsafe fn flip_sign<V: Simd>(x: V::F, sign: V::U) -> V::F {
    unsafe { V::from_bits(V::xor_u(V::to_bits(x), sign)) }
}

#[inline(always)]
pub(super) unsafe fn neg<V: Simd>(x: V::F) -> V::F {
    unsafe { flip_sign::<V>(x, V::splat_u(SIGN_BIT)) }
}
