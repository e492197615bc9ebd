//! Steps on the process's OpenMP runtime ([`Threads::openmp`](crate::Threads::openmp)): the
//! step's pieces are handed out as on a team (`crate::team`), but the threads are the OpenMP
//! runtime's, reached through the entry points the caller passes in.
//!
//! Why: a process that already runs an OpenMP team (PyTorch's operators, DeepSpeed's CPU
//! optimizers) keeps that team's threads spinning for a while after each parallel region; a second
//! team of halfstep's own then finds its cores taken, and its members are preempted (16-core Xeon
//! host: docs/DESIGN.md, "Spinning peers slow the team down"). Run on the same runtime, a step
//! uses the threads that are already awake.

#![allow(unsafe_code)]

use std::any::Any;
use std::ffi::{c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;

/// `GOMP_parallel`'s type: runs `f(data)` on every thread of a new team of `threads` threads (0:
/// the runtime's current count), the calling thread as thread 0, and returns when every run has
/// returned.
pub type ParallelFn = unsafe extern "C" fn(
    f: unsafe extern "C" fn(data: *mut c_void),
    data: *mut c_void,
    threads: c_uint,
    flags: c_uint,
);

/// The entry points of an OpenMP runtime that steps run on ([`Threads::openmp`](crate::Threads::openmp)).
#[derive(Clone, Copy, Debug)]
pub struct OpenMp {
    parallel: ParallelFn,
    thread_num: unsafe extern "C" fn() -> c_int,
    max_threads: unsafe extern "C" fn() -> c_int,
}

impl OpenMp {
    /// The runtime whose `GOMP_parallel`, `omp_get_thread_num` and `omp_get_max_threads` these
    /// are. They are libgomp's ABI, which LLVM's `libomp` and Intel's `libiomp5` also export, for
    /// code compiled by GCC.
    ///
    /// # Safety
    ///
    /// The three are those entry points of one OpenMP runtime (or behave as libgomp documents
    /// them: `parallel` runs its function on the threads of one region, the caller among them,
    /// and returns after every run has returned), and the runtime stays loaded while this value or
    /// a copy of it (in a [`Threads`](crate::Threads)) lives.
    pub unsafe fn new(
        parallel: ParallelFn,
        thread_num: unsafe extern "C" fn() -> c_int,
        max_threads: unsafe extern "C" fn() -> c_int,
    ) -> OpenMp {
        OpenMp {
            parallel,
            thread_num,
            max_threads,
        }
    }

    /// Whether both name the same runtime.
    pub(crate) fn same(&self, other: &OpenMp) -> bool {
        std::ptr::fn_addr_eq(self.parallel, other.parallel)
    }

    /// The size of a team started now from this thread (at least 1).
    pub(crate) fn max_threads(&self) -> usize {
        // SAFETY: `OpenMp::new`'s contract: an entry point of a loaded runtime.
        usize::try_from(unsafe { (self.max_threads)() })
            .unwrap_or(1)
            .max(1)
    }

    /// Runs `f(member)` on a team of at most `threads` threads, this one as member 0, each member
    /// number below `threads` (the runtime may give fewer threads, as it does inside another
    /// parallel region, and `f` must leave nothing undone for the missing ones). Returns when every
    /// run has returned; a panic in any is resumed here.
    pub(crate) fn broadcast<F: Fn(usize) + Sync>(&self, threads: usize, f: &F) {
        let threads = threads.max(1);
        let job = Job {
            f,
            thread_num: self.thread_num,
            last: threads - 1,
            panic: Mutex::new(None),
        };
        let data = &job as *const Job<'_, F> as *mut c_void;
        let n = c_uint::try_from(threads).unwrap_or(c_uint::MAX);
        // SAFETY: `OpenMp::new`'s contract: `parallel` runs `run::<F>(data)` only on the
        // threads of this region, and returns after every run has, while `job` is alive here.
        unsafe { (self.parallel)(run::<F>, data, n, 0) };
        if let Some(p) = job.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            resume_unwind(p);
        }
    }
}

/// One region's job, on the stack of the thread that started it.
struct Job<'f, F> {
    f: &'f F,
    thread_num: unsafe extern "C" fn() -> c_int,
    /// The highest member number `f` may see.
    last: usize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// The region's body on each of its threads. A panic never leaves it (it would cross the runtime's
/// frames): it is kept for the starting thread.
unsafe extern "C" fn run<F: Fn(usize) + Sync>(data: *mut c_void) {
    // SAFETY: `data` is the `Job<F>` that `broadcast` passed, alive until the region ends.
    let job = unsafe { &*(data as *const Job<'_, F>) };
    // A runtime that numbers past the team's size still gives every item to one taker: members
    // only choose where to start (`Entered::drain`).
    // SAFETY: an entry point of the runtime running this region.
    let member = usize::try_from(unsafe { (job.thread_num)() })
        .unwrap_or(0)
        .min(job.last);
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| (job.f)(member))) {
        let mut slot = job.panic.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(p);
    }
}
