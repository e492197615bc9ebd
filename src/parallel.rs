//! The parallel driver: one step over a parameter group, cut into pieces that rayon's workers
//! take. Only *where* work runs is decided here; every piece runs the same single-thread kernel
//! over a sub-range of one tensor, and the bits are a function of the global element index
//! (SPEC.md §3, §7), so the result is the same on any number of threads.
//!
//! How the work is cut (recursively, with `rayon_core::join`, so nothing is allocated):
//! - a group whose elements add up to at most the grain runs on the calling thread, tensor after
//!   tensor, without touching the pool (small groups lose more to waking workers than they gain);
//! - otherwise the target piece size is `max(grain / 4, elements / (4 × pool threads))`: about four
//!   pieces per thread for load balance, none so small that its fixed cost dominates;
//! - a list of tensors larger than a piece is halved at the tensor boundary nearest half its
//!   elements, so small tensors stay together and are batched onto one worker;
//! - a single tensor larger than a piece is halved at a global element index that is a multiple
//!   of [`SPLIT_ALIGN`] (a LAMB norm block: a whole number of RNG groups and of cache lines).
//!
//! Where the caller stands matters for small steps: a thread outside the pool hands the whole
//! step over and sleeps until it comes back, microseconds per call (`examples/handoff.rs`;
//! docs/DESIGN.md, "Parallel driver"). [`Threads::calling_thread_pool`] makes the calling thread
//! one of the pool's threads instead, as OpenMP's master thread is one of its team.

use std::cell::RefCell;
use std::sync::Arc;

use rayon_core::ThreadPool;

use crate::error::{Error, Result};
use crate::reference::norm::{NORM_BLOCK, spanned_blocks};
use crate::tensors::Pieces;

/// Pieces are cut at global element indices that are multiples of this: one LAMB norm block,
/// 16 RNG groups, 128 cache lines of f32 (or 64 of bf16).
pub const SPLIT_ALIGN: usize = NORM_BLOCK;

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

    /// The calling thread's own pool: `threads` threads of which the calling thread is one
    /// (rayon's `use_current_thread`; `0`: rayon's default count on the first call, whatever
    /// the thread's pool has on later ones). A step called from this
    /// thread runs its share of the work here, with no hand-off to the pool and no sleep while
    /// waiting for it; the other `threads - 1` threads are started on the first call.
    ///
    /// rayon lets a thread belong to one pool for its lifetime, so the pool is made once per
    /// thread and kept until the thread exits: later calls on the same thread return the same
    /// pool, and fail if `threads` differs ([`Error::CallingThreadPool`]), as they do on a thread
    /// that already works for another rayon pool. Steps called from other threads still run on
    /// it (handing off, like [`Threads::pool`]), and `Threads::global()` steps called on this
    /// thread run on this pool too, since rayon now counts the thread as one of its workers.
    /// None of this changes the bits.
    ///
    /// The grain is [`calling_thread_grain`] of the pool's size.
    pub fn calling_thread_pool(threads: usize) -> Result<Threads> {
        thread_local! {
            static POOL: RefCell<Option<Arc<ThreadPool>>> = const { RefCell::new(None) };
        }
        let fail = |reason: String| Error::CallingThreadPool { threads, reason };
        POOL.with(|cell| {
            let mut cell = cell.borrow_mut();
            if let Some(p) = &*cell {
                if threads != 0 && p.current_num_threads() != threads {
                    return Err(fail(format!(
                        "this thread's pool has {} threads",
                        p.current_num_threads()
                    )));
                }
                return Ok(Threads::calling(p.clone()));
            }
            let pool = rayon_core::ThreadPoolBuilder::new()
                .num_threads(threads)
                .use_current_thread()
                .build()
                .map_err(|e| fail(e.to_string()))?;
            let pool = Arc::new(pool);
            *cell = Some(pool.clone());
            Ok(Threads::calling(pool))
        })
    }

    fn calling(pool: Arc<ThreadPool>) -> Threads {
        let grain = calling_thread_grain(pool.current_num_threads());
        Threads::pool(pool).with_grain(grain)
    }

    /// The same pool with another grain (elements; rounded up to a multiple of [`SPLIT_ALIGN`]):
    /// groups up to this size stay on the calling thread, and pieces are at least a quarter of
    /// it. Finer grains spread small groups over more threads at a higher fixed cost per piece;
    /// `with_grain(1)` cuts every tensor at every [`SPLIT_ALIGN`] boundary it can.
    pub fn with_grain(self, elements: usize) -> Threads {
        Threads {
            // Saturating: a grain near `usize::MAX` means "never split", not a wrapped 0.
            grain: elements
                .max(1)
                .div_ceil(SPLIT_ALIGN)
                .saturating_mul(SPLIT_ALIGN),
            ..self
        }
    }

    /// The grain in elements.
    pub fn grain(&self) -> usize {
        self.grain
    }

    /// Runs `f` with the piece size to cut at: `None` (do not fork) on the calling thread for
    /// [`Threads::current`] or a group within one grain, else inside the pool.
    pub(crate) fn run<R: Send>(
        &self,
        elements: usize,
        f: impl FnOnce(Option<usize>) -> R + Send,
    ) -> R {
        if elements <= self.grain {
            return f(None);
        }
        let piece = |threads: usize| {
            let p = (self.grain / 4).max(elements.div_ceil(4 * threads.max(1)));
            Some(p.div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN)
        };
        match &self.pool {
            Pool::Current => f(None),
            // `join` from outside a pool runs in the global one.
            Pool::Global => f(piece(rayon_core::current_num_threads())),
            Pool::Caller(p) => p.install(|| f(piece(p.current_num_threads()))),
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
    let total: usize = ts.iter().map(C::tensor_len).sum();
    threads.run(total, |piece| for_pieces::<C, S, L>(piece, ts, side, leaf));
}

/// [`for_group`] inside a [`Threads::run`] the caller already holds (`piece` as it hands out), so
/// that several passes over one group enter the pool once.
pub(crate) fn for_pieces<C: Pieces, S: Side, L: Leaf<C, S>>(
    piece: Option<usize>,
    ts: &mut [C::Tensor<'_>],
    side: S,
    leaf: &L,
) {
    match piece {
        Some(piece) => list::<C, S, L>(ts, side, leaf, true, piece),
        None => list::<C, S, L>(ts, side, leaf, false, usize::MAX),
    }
}

fn tensor_blocks<C: Pieces>(t: &C::Tensor<'_>) -> usize {
    spanned_blocks(C::tensor_base(t), C::tensor_len(t))
}

fn list<C: Pieces, S: Side, L: Leaf<C, S>>(
    ts: &mut [C::Tensor<'_>],
    side: S,
    leaf: &L,
    parallel: bool,
    piece: usize,
) {
    let total: usize = ts.iter().map(C::tensor_len).sum();
    if !parallel || total <= piece || ts.len() <= 1 {
        // One tensor: maybe cut it; several within one grain: one after the other, here.
        let mut side = side;
        for t in ts.iter_mut() {
            let (mine, rest) = side.cut(C::tensor_len(t), tensor_blocks::<C>(t), Some(1));
            side = rest;
            if parallel {
                range::<C, S, L>(C::reborrow(t), mine, leaf, piece);
            } else {
                leaf.run(C::reborrow(t), mine);
            }
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
    let left_elements = ts[..k].iter().map(C::tensor_len).sum();
    let (sa, sb) = side.cut(left_elements, left_blocks, Some(k));
    let (a, b) = ts.split_at_mut(k);
    rayon_core::join(
        || list::<C, S, L>(a, sa, leaf, true, piece),
        || list::<C, S, L>(b, sb, leaf, true, piece),
    );
}

fn range<C: Pieces, S: Side, L: Leaf<C, S>>(t: C::Tensor<'_>, side: S, leaf: &L, piece: usize) {
    let (len, base) = (C::tensor_len(&t), C::tensor_base(&t));
    // The aligned global index nearest the middle, strictly inside the range.
    let align = SPLIT_ALIGN as u64;
    let mid_e = (base + len as u64 / 2) / align * align;
    let mid_e = if mid_e <= base { mid_e + align } else { mid_e };
    if len <= piece || mid_e >= base + len as u64 {
        leaf.run(t, side);
        return;
    }
    let mid = (mid_e - base) as usize;
    let (sa, sb) = side.cut(mid, spanned_blocks(base, mid), None);
    let (a, b) = C::split_at(t, mid);
    rayon_core::join(
        || range::<C, S, L>(a, sa, leaf, piece),
        || range::<C, S, L>(b, sb, leaf, piece),
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
