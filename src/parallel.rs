//! The parallel driver: one step over a parameter group, cut into pieces that a pool's threads
//! take. Only *where* work runs is decided here; every piece runs the same single-thread kernel
//! over a sub-range of one tensor, and the bits are a function of the global element index
//! (SPEC.md §3, §7), so the result is the same on any number of threads. Nothing is allocated.
//!
//! A group whose elements add up to at most the grain runs on the calling thread, tensor after
//! tensor, without touching the pool (small groups lose more to waking workers than they gain).
//! Larger groups are cut at global element indices that are multiples of [`SPLIT_ALIGN`] (a LAMB
//! norm block: a whole number of RNG groups and of cache lines):
//! - on rayon's pools, recursively with `rayon_core::join`, into pieces of at most
//!   `max(grain / 4, elements / (4 × pool threads))`: a list of tensors larger than a piece is
//!   halved at the tensor boundary nearest half its elements, so small tensors stay together on one
//!   worker, and a single tensor larger than a piece is halved at the aligned index nearest its
//!   middle;
//! - on a team ([`Threads::calling_thread_pool`], `crate::team`), from the front into pieces of
//!   about `elements / (4 × members)` (`elements / (8 × members)` for large groups), which the
//!   members and the calling thread take one at a time from a batch on the calling thread's stack
//!   (each piece as its tensor, start and length; the taker cuts its buffers itself).
//!
//! Where the caller stands matters for small steps: a thread outside a rayon pool hands the whole
//! step over and sleeps until it comes back, microseconds per call (`examples/handoff.rs`;
//! docs/DESIGN.md, "Parallel driver"); a team has the calling thread as one of its members, as
//! OpenMP's master thread is one of its team, and its other members spin between steps.

use std::sync::Arc;

use rayon_core::ThreadPool;

use crate::error::{Error, Result};
use crate::openmp::OpenMp;
use crate::reference::norm::{NORM_BLOCK, spanned_blocks};
use crate::team::{Batch, Entered, Team};
use crate::tensors::Pieces;

/// Pieces are cut at global element indices that are multiples of this: one LAMB norm block,
/// 16 RNG groups, 128 cache lines of f32 (or 64 of bf16).
pub const SPLIT_ALIGN: usize = NORM_BLOCK;

/// `elements` (at least 1) rounded up to a multiple of [`SPLIT_ALIGN`]; saturating, so that a
/// count near `usize::MAX` means "never split", not a wrapped 0.
fn aligned(elements: usize) -> usize {
    elements
        .max(1)
        .div_ceil(SPLIT_ALIGN)
        .saturating_mul(SPLIT_ALIGN)
}

/// The default grain: groups of at most this many elements stay on the calling thread. Chosen by
/// benchmark for pools the caller hands its steps to: many cores gain from smaller groups than two
/// do, and 64K is the compromise (docs/DESIGN.md, "Parallel driver"). A
/// [`Threads::calling_thread_pool`] pays no hand-off and has a finer one ([`calling_thread_grain`]).
pub const DEFAULT_GRAIN: usize = 64 * 1024;

/// The default grain of a [`Threads::calling_thread_pool`] of `threads` threads: 16K elements
/// (one thread: [`DEFAULT_GRAIN`], as cutting gains nothing there). Such a pool pays no hand-off,
/// so splitting pays from smaller groups than [`DEFAULT_GRAIN`]; 16K was the best grain, or within
/// the spread of the best, for every optimizer at 32K and 64K elements on 2, 4 and 16 threads of
/// the 16-core Xeon host (docs/DESIGN.md, "Parallel driver").
pub const fn calling_thread_grain(threads: usize) -> usize {
    match threads {
        0 | 1 => DEFAULT_GRAIN,
        _ => 16 * 1024,
    }
}

#[derive(Clone, Debug)]
enum Pool {
    Current,
    Global,
    Caller(Arc<ThreadPool>),
    Team(Arc<Team>),
    /// `threads` of them (0: the runtime's count at each step).
    OpenMp {
        omp: OpenMp,
        threads: usize,
    },
}

/// Where a step's work runs, and how finely it is cut. The bits never depend on it.
#[derive(Clone, Debug)]
pub struct Threads {
    pool: Pool,
    grain: usize,
}

impl Default for Threads {
    /// [`Threads::global`].
    fn default() -> Self {
        Threads::global()
    }
}

impl PartialEq for Threads {
    fn eq(&self, other: &Threads) -> bool {
        self.grain == other.grain
            && match (&self.pool, &other.pool) {
                (Pool::Current, Pool::Current) | (Pool::Global, Pool::Global) => true,
                (Pool::Caller(a), Pool::Caller(b)) => Arc::ptr_eq(a, b),
                (Pool::Team(a), Pool::Team(b)) => Arc::ptr_eq(a, b),
                (Pool::OpenMp { omp: a, threads: m }, Pool::OpenMp { omp: b, threads: n }) => {
                    a.same(b) && m == n
                }
                _ => false,
            }
    }
}

impl Threads {
    /// Everything on the calling thread.
    pub fn current() -> Threads {
        Threads {
            pool: Pool::Current,
            grain: DEFAULT_GRAIN,
        }
    }

    /// rayon's global pool (its size: `RAYON_NUM_THREADS`, else one thread per CPU).
    pub fn global() -> Threads {
        Threads {
            pool: Pool::Global,
            grain: DEFAULT_GRAIN,
        }
    }

    /// The caller's pool.
    pub fn pool(pool: Arc<ThreadPool>) -> Threads {
        Threads {
            pool: Pool::Caller(pool),
            grain: DEFAULT_GRAIN,
        }
    }

    /// A team of `threads` threads of which the calling thread is one (`0`: one per CPU, as
    /// `std::thread::available_parallelism` counts them), in the manner of an OpenMP team: the
    /// `threads - 1` others are started here and live as long as the returned value and its
    /// clones. The thread that calls a step and the other members take the step's pieces between
    /// them; between steps the members spin for 100 µs (`team::SPIN`) before they park, so steps
    /// called one after another pay no wake-up. One step runs on a team at a time: a step called
    /// from another thread while the team is busy runs on that thread alone.
    /// None of this changes the bits.
    ///
    /// The grain is [`calling_thread_grain`] of the team's size; every share is at least a quarter
    /// of it, so small groups use fewer members.
    pub fn calling_thread_pool(threads: usize) -> Result<Threads> {
        let n = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let team = Team::new(n).map_err(|e| Error::CallingThreadPool {
            threads,
            reason: e.to_string(),
        })?;
        Ok(Threads {
            pool: Pool::Team(Arc::new(team)),
            grain: calling_thread_grain(n),
        })
    }

    /// Steps on the threads of an OpenMP runtime the process has loaded, `threads` of them (`0`:
    /// as many as a parallel region started by the stepping thread would have, read at each step:
    /// `omp_set_num_threads`, `torch.set_num_threads`), the stepping thread one of them. The
    /// pieces are those of a [`Threads::calling_thread_pool`] of that size, with the same grain;
    /// the runtime starts and joins the threads. Where a process already runs OpenMP work (PyTorch,
    /// DeepSpeed), its threads are the ones awake between steps, and a team of halfstep's own would
    /// compete with them for the cores (docs/DESIGN.md, "Parallel driver"). Steps may be called
    /// from several threads at once, and from inside a parallel region (a nested region, whose size the
    /// runtime decides: often one thread). None of this changes the bits.
    pub fn openmp(omp: OpenMp, threads: usize) -> Threads {
        Threads {
            pool: Pool::OpenMp { omp, threads },
            grain: calling_thread_grain(if threads == 0 { 2 } else { threads }),
        }
    }

    /// The same pool with another grain (elements; rounded up to a multiple of [`SPLIT_ALIGN`]):
    /// groups up to this size stay on the calling thread, and pieces are at least a quarter of
    /// it. Finer grains spread small groups over more threads at a higher fixed cost per piece;
    /// `with_grain(1)` cuts every tensor at every [`SPLIT_ALIGN`] boundary it can.
    pub fn with_grain(self, elements: usize) -> Threads {
        Threads {
            grain: aligned(elements),
            ..self
        }
    }

    /// The grain in elements.
    pub fn grain(&self) -> usize {
        self.grain
    }

    /// Runs `f(i, range)` over the elements of a group of tensors, where tensor `i` has
    /// `tensors[i].0` elements and global index base `tensors[i].1` (its stream's `index_base`),
    /// cut into the pieces an element-wise step of that group is cut into on this pool and run on
    /// its threads: each element in exactly one call, `range` within `0..tensors[i].0` and never
    /// empty. For work of one's own that should run as the optimizer's steps do (a same-traffic
    /// memory loop beside a step, a gradient scale) without a second pool. Allocates one
    /// descriptor per tensor for the call (a step allocates nothing).
    pub fn for_each_piece(
        &self,
        tensors: &[(usize, u64)],
        f: impl Fn(usize, std::ops::Range<usize>) + Sync,
    ) {
        let mut ts: Vec<RangePiece> = tensors
            .iter()
            .enumerate()
            .filter(|&(_, &(len, _))| len > 0)
            .map(|(tensor, &(len, base))| RangePiece {
                tensor,
                start: 0,
                len,
                base,
            })
            .collect();
        for_group::<RangePieces, (), _>(self, &mut ts, (), &RangeLeaf(f));
    }

    /// Runs `f` with how to cut the work: [`Split::Serial`] for [`Threads::current`] or a group
    /// within one grain, else the pool's way.
    pub(crate) fn run<R: Send>(&self, elements: usize, f: impl FnOnce(Split<'_>) -> R + Send) -> R {
        if elements <= self.grain {
            return f(Split::Serial);
        }
        let piece = |threads: usize| {
            let p = (self.grain / 4).max(elements.div_ceil(4 * threads.max(1)));
            aligned(p)
        };
        match &self.pool {
            Pool::Current => f(Split::Serial),
            // `join` from outside a pool runs in the global one.
            Pool::Global => f(Split::Rayon {
                piece: piece(rayon_core::current_num_threads()),
            }),
            Pool::Caller(p) => p.install(|| {
                f(Split::Rayon {
                    piece: piece(p.current_num_threads()),
                })
            }),
            Pool::Team(team) => match team.enter() {
                Some(entered) => f(Split::Team {
                    team: &entered,
                    min: aligned(self.grain / 4),
                }),
                // Another thread is stepping on this team: this step runs here, same bits.
                None => f(Split::Serial),
            },
            Pool::OpenMp { omp, threads } => {
                let size = match threads {
                    0 => omp.max_threads(),
                    n => *n,
                };
                f(Split::Team {
                    team: &Entered::openmp(omp, size),
                    min: aligned(self.grain / 4),
                })
            }
        }
    }
}

/// A piece of [`Threads::for_each_piece`]'s tensor `tensor`: elements `start .. start + len`,
/// the first at global index `base`.
#[derive(Clone, Copy)]
struct RangePiece {
    tensor: usize,
    start: usize,
    len: usize,
    base: u64,
}

/// [`Pieces`] of index ranges.
struct RangePieces;

impl Pieces for RangePieces {
    type Tensor<'a> = RangePiece;

    fn tensor_len(t: &RangePiece) -> usize {
        t.len
    }
    fn tensor_base(t: &RangePiece) -> u64 {
        t.base
    }
    fn reborrow(t: &mut RangePiece) -> RangePiece {
        *t
    }
    fn split_at<'s>(t: RangePiece, mid: usize) -> (RangePiece, RangePiece)
    where
        Self: 's,
    {
        (
            RangePiece { len: mid, ..t },
            RangePiece {
                start: t.start + mid,
                len: t.len - mid,
                base: t.base + mid as u64,
                ..t
            },
        )
    }
    #[allow(unsafe_code)]
    unsafe fn piece(t: &RangePiece, start: usize, len: usize) -> RangePiece {
        RangePiece {
            start: t.start + start,
            len,
            base: t.base + start as u64,
            ..*t
        }
    }
}

/// [`Threads::for_each_piece`]'s closure on each piece.
struct RangeLeaf<F>(F);

impl<F: Fn(usize, std::ops::Range<usize>) + Sync> Leaf<RangePieces, ()> for RangeLeaf<F> {
    fn run(&self, t: RangePiece, _: ()) {
        (self.0)(t.tensor, t.start..t.start + t.len)
    }
}

/// How a step's work is cut, and where the pieces run.
#[derive(Clone, Copy)]
pub(crate) enum Split<'t> {
    /// Everything on the calling thread, tensor after tensor.
    Serial,
    /// Halves handed to rayon's `join` down to pieces of at most `piece` elements.
    Rayon { piece: usize },
    /// Four or eight pieces per member of the team, taken by whichever member is free; members take
    /// part only while each has at least `min` elements.
    Team { team: &'t Entered<'t>, min: usize },
}

impl Split<'_> {
    /// Whether a list of tensors, or one tensor, of `total` elements is cut (rayon).
    fn cuts(&self, total: usize) -> bool {
        match *self {
            Split::Rayon { piece } => total > piece,
            Split::Serial | Split::Team { .. } => false,
        }
    }

    /// Runs `fa` here and `fb` beside it (rayon), or one after the other.
    fn join(self, fa: impl FnOnce() + Send, fb: impl FnOnce() + Send) {
        match self {
            Split::Rayon { .. } => {
                rayon_core::join(fa, fb);
            }
            Split::Serial | Split::Team { .. } => {
                fa();
                fb();
            }
        }
    }
}

/// Per-piece data that is cut along with the tensors: LAMB's block sums (cut at the same
/// block), its per-tensor ratios (cut at tensor boundaries), its kept directions (cut at the
/// same element), or nothing.
pub(crate) trait Side: Send + Sized {
    /// Cuts after `elements` elements, which span `blocks` norm blocks; `tensors` is `Some(k)`
    /// when the cut is between the first `k` tensors of a list and the rest, `None` when it is
    /// inside one tensor.
    fn cut(self, elements: usize, blocks: usize, tensors: Option<usize>) -> (Self, Self);
}

impl Side for () {
    fn cut(self, _: usize, _: usize, _: Option<usize>) -> ((), ()) {
        ((), ())
    }
}

/// Block sums: one pair per norm block, tensor after tensor.
impl Side for &mut [[f64; 2]] {
    fn cut(self, _: usize, blocks: usize, _: Option<usize>) -> (Self, Self) {
        self.split_at_mut(blocks)
    }
}

/// One value per tensor; a piece of one tensor keeps its tensor's value.
impl Side for &[f32] {
    fn cut(self, _: usize, _: usize, tensors: Option<usize>) -> (Self, Self) {
        match tensors {
            Some(k) => self.split_at(k),
            None => (self, self),
        }
    }
}

/// One value per element, tensor after tensor (LAMB's kept directions), or none.
impl Side for Option<&mut [f32]> {
    fn cut(self, elements: usize, _: usize, _: Option<usize>) -> (Self, Self) {
        match self {
            Some(s) => {
                let (a, b) = s.split_at_mut(elements);
                (Some(a), Some(b))
            }
            None => (None, None),
        }
    }
}

/// Two sides cut together.
impl<A: Side, B: Side> Side for (A, B) {
    fn cut(self, elements: usize, blocks: usize, tensors: Option<usize>) -> (Self, Self) {
        let (a0, a1) = self.0.cut(elements, blocks, tensors);
        let (b0, b1) = self.1.cut(elements, blocks, tensors);
        ((a0, b0), (a1, b1))
    }
}

/// What runs on one piece: a sub-range of one tensor with its side data.
pub(crate) trait Leaf<C: Pieces, S: Side>: Sync {
    fn run(&self, t: C::Tensor<'_>, side: S);
}

/// Runs `leaf` over every element of `ts`, cut as the module documentation says.
pub(crate) fn for_group<C: Pieces, S: Side, L: Leaf<C, S>>(
    threads: &Threads,
    ts: &mut [C::Tensor<'_>],
    side: S,
    leaf: &L,
) {
    let total = group_len::<C>(ts);
    threads.run(total, |split| for_pieces::<C, S, L>(split, ts, side, leaf));
}

/// The elements of a group, over all its tensors.
pub(crate) fn group_len<C: Pieces>(ts: &[C::Tensor<'_>]) -> usize {
    ts.iter().map(C::tensor_len).sum()
}

/// [`for_group`] inside a [`Threads::run`] the caller already holds (`split` as it hands out),
/// so that several passes over one group enter the pool once.
pub(crate) fn for_pieces<C: Pieces, S: Side, L: Leaf<C, S>>(
    split: Split<'_>,
    ts: &mut [C::Tensor<'_>],
    side: S,
    leaf: &L,
) {
    match split {
        Split::Team { team, min } => team_pieces::<C, S, L>(team, min, ts, side, leaf),
        _ => list::<C, S, L>(ts, side, leaf, split),
    }
}

/// Pieces a team takes at most at once: eight per member of a 16-thread team. A group cut into
/// more (a larger team, or many small tensors) is run in several rounds.
const TEAM_BATCH: usize = 128;

/// A team cuts eight pieces per member where each still holds this many times a member's least
/// share `min` (32K elements at the default grain: from 4M elements on 16 threads), else four. On
/// hosts whose vCPUs run at uneven speeds the step ends when the slowest member finishes the
/// piece it is in, and a smaller piece ends sooner. At 256K elements on 16 threads (pieces of 2K)
/// the extra pieces cost more than they saved, at 1M about as much (docs/DESIGN.md, "Parallel
/// driver").
const FINE_PIECE_MINS: usize = 8;

/// Where four pieces per member would be smaller, a team's pieces hold this many elements, or a
/// member's whole share where that is less: one piece per member at 256K elements on 16 threads.
/// Each piece costs its claim and a kernel call's setup, and below this size that cost more than
/// the balance saved (16-core Xeon host, AdamW on libgomp's threads, 16 threads: 32K–256K
/// elements 0.82–0.95× the time, 1M and 4M level; docs/DESIGN.md, "Parallel driver").
const PIECE_ELEMENTS: usize = 16 * 1024;

/// A piece of a group's tensor `tensor`: its elements `start .. start + len`. What the calling
/// thread hands a team's members per piece; each takes its tensor piece through
/// [`Pieces::piece`] (a copy of every buffer's slice cost the calling thread a write to a line a
/// member had read, about 0.1 µs per piece on the 16-core Xeon host; docs/DESIGN.md, "Parallel
/// driver").
#[derive(Clone, Copy)]
struct PieceAt {
    tensor: usize,
    start: usize,
    len: usize,
}

/// [`for_pieces`] on a team: the group cut from the front into pieces of about
/// `elements / (8 × members)`, or `elements / (4 × members)` where those would be under
/// [`FINE_PIECE_MINS`] × `min` but at least [`PIECE_ELEMENTS`] or a member's share (at
/// [`SPLIT_ALIGN`] boundaries, tensors never joined), which the members take one at a time.
fn team_pieces<C: Pieces, S: Side, L: Leaf<C, S>>(
    team: &Entered<'_>,
    min: usize,
    ts: &mut [C::Tensor<'_>],
    side: S,
    leaf: &L,
) {
    let total = group_len::<C>(ts);
    let members = team.size().min(total / min.max(1));
    if members <= 1 {
        return list::<C, S, L>(ts, side, leaf, Split::Serial);
    }
    let piece = match aligned(total.div_ceil(8 * members)) {
        fine if fine >= FINE_PIECE_MINS.saturating_mul(min) => fine,
        _ => aligned(total.div_ceil(4 * members))
            .max(aligned(total.div_ceil(members).min(PIECE_ELEMENTS))),
    };
    let align = SPLIT_ALIGN as u64;
    // Shared while the pieces run: each piece is taken from its tensor through `&`.
    let ts: &[C::Tensor<'_>] = ts;
    let run = |(at, s): (PieceAt, S)| {
        // SAFETY: `at` is within its tensor (cut below), the pieces of a batch are disjoint and
        // each is taken once (`Entered::drain`), and `ts` reaches no buffer while they run.
        #[allow(unsafe_code)]
        let t = unsafe { C::piece(&ts[at.tensor], at.start, at.len) };
        leaf.run(t, s)
    };
    let mut batch = Batch::<(PieceAt, S), TEAM_BATCH>::new();
    let mut side = side;
    for (tensor, t) in ts.iter().enumerate() {
        let (len, base) = (C::tensor_len(t), C::tensor_base(t));
        let (mut mine, rest) = side.cut(len, tensor_blocks::<C>(t), Some(1));
        side = rest;
        let mut start = 0;
        loop {
            if batch.is_full() {
                team.drain(members - 1, &mut batch, &run);
            }
            let at = base + start as u64;
            // The first aligned global index at least `piece` past the start.
            let cut = (at + piece as u64).div_ceil(align) * align;
            let rest = len - start;
            if cut >= at + rest as u64 {
                batch.push((
                    PieceAt {
                        tensor,
                        start,
                        len: rest,
                    },
                    mine,
                ));
                break;
            }
            let mid = (cut - at) as usize;
            let (sa, sb) = mine.cut(mid, spanned_blocks(at, mid), None);
            batch.push((
                PieceAt {
                    tensor,
                    start,
                    len: mid,
                },
                sa,
            ));
            (start, mine) = (start + mid, sb);
        }
    }
    team.drain(members - 1, &mut batch, &run);
}

fn tensor_blocks<C: Pieces>(t: &C::Tensor<'_>) -> usize {
    spanned_blocks(C::tensor_base(t), C::tensor_len(t))
}

fn list<C: Pieces, S: Side, L: Leaf<C, S>>(
    ts: &mut [C::Tensor<'_>],
    side: S,
    leaf: &L,
    split: Split<'_>,
) {
    let total = group_len::<C>(ts);
    if ts.len() <= 1 || !split.cuts(total) {
        // One tensor, or several not worth cutting between: one after the other, each maybe cut.
        let mut side = side;
        for t in ts.iter_mut() {
            let (mine, rest) = side.cut(C::tensor_len(t), tensor_blocks::<C>(t), Some(1));
            side = rest;
            range::<C, S, L>(C::reborrow(t), mine, leaf, split);
        }
        return;
    }
    // The first tensor boundary at or past half the elements, keeping both halves non-empty.
    let mut k = 0;
    let mut acc = 0;
    while k < ts.len() - 1 && acc < total / 2 {
        acc += C::tensor_len(&ts[k]);
        k += 1;
    }
    let k = k.max(1);
    let left_blocks = ts[..k].iter().map(tensor_blocks::<C>).sum();
    let left_elements = group_len::<C>(&ts[..k]);
    let (sa, sb) = side.cut(left_elements, left_blocks, Some(k));
    let (a, b) = ts.split_at_mut(k);
    split.join(
        || list::<C, S, L>(a, sa, leaf, split),
        || list::<C, S, L>(b, sb, leaf, split),
    );
}

fn range<C: Pieces, S: Side, L: Leaf<C, S>>(t: C::Tensor<'_>, side: S, leaf: &L, split: Split<'_>) {
    let (len, base) = (C::tensor_len(&t), C::tensor_base(&t));
    if !split.cuts(len) {
        leaf.run(t, side);
        return;
    }
    // The aligned global index nearest the middle, strictly inside the range.
    let align = SPLIT_ALIGN as u64;
    let mid_e = (base + len as u64 / 2) / align * align;
    let mid_e = if mid_e <= base { mid_e + align } else { mid_e };
    if mid_e >= base + len as u64 {
        leaf.run(t, side);
        return;
    }
    let mid = (mid_e - base) as usize;
    let (sa, sb) = side.cut(mid, spanned_blocks(base, mid), None);
    let (a, b) = C::split_at(t, mid);
    split.join(
        || range::<C, S, L>(a, sa, leaf, split),
        || range::<C, S, L>(b, sb, leaf, split),
    );
}

/// Checks of the private block arithmetic, run by `tests/internals.rs`.
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;

    pub(crate) fn block_counts() {
        let b = NORM_BLOCK;
        assert_eq!(spanned_blocks(0, 0), 0);
        assert_eq!(spanned_blocks(0, 1), 1);
        assert_eq!(spanned_blocks(0, b), 1);
        assert_eq!(spanned_blocks(0, b + 1), 2);
        assert_eq!(spanned_blocks(b as u64 - 1, 2), 2);
        assert_eq!(spanned_blocks(b as u64 - 1, 1), 1);
        assert_eq!(spanned_blocks(5, 3 * b), 4);
    }
}
