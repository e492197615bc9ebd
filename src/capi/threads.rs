//! Thread pools (`hs_threads`): rayon's global pool, a new pool, a team the calling thread is one
//! of, or the process's OpenMP runtime.

use super::*;
use crate::OpenMp;
use std::ffi::{c_int, c_uint, c_void};

/// Where group steps run (opaque): `hs_threads_new`.
pub struct hs_threads(pub(super) Threads);

/// Most threads `hs_threads_new` and `hs_threads_calling_thread` start.
pub const HS_MAX_THREADS: u32 = 1024;

pub(super) fn check_threads(n: u32) -> Result<(), Fail> {
    if n > HS_MAX_THREADS {
        return Err(Fail(
            HS_OUT_OF_RANGE,
            format!("{n} threads: at most {HS_MAX_THREADS}"),
        ));
    }
    Ok(())
}

/// Where steps run: `n == 0` rayon's global pool, `n == 1` the calling thread only,
/// `2 <= n <= HS_MAX_THREADS` a new pool of `n` threads. NULL on failure (see `hs_last_error`).
/// Free with `hs_threads_free`; passing NULL to a step means the global pool.
#[unsafe(no_mangle)]
pub extern "C" fn hs_threads_new(n: u32) -> *mut hs_threads {
    guard_new(|| {
        check_threads(n)?;
        Ok(hs_threads(match n {
            0 => Threads::global(),
            1 => Threads::current(),
            n => rayon_core::ThreadPoolBuilder::new()
                .num_threads(n as usize)
                .build()
                .map(|p| Threads::pool(Arc::new(p)))
                .map_err(|e| invalid(format!("starting {n} threads: {e}")))?,
        }))
    })
}

/// A team of `n` threads of which the calling thread is one (`n == 0`: one per CPU; at most
/// `HS_MAX_THREADS`), as an OpenMP team: the thread that calls a step and the `n - 1` team threads
/// take the step's pieces between them; between steps the team threads spin for about 100 µs,
/// then sleep. The team's threads live until the handle is freed
/// (`hs_threads_free`). One step at a time runs on a team: a step called from another thread
/// while one runs does its work on its own thread. NULL on failure (see `hs_last_error`): the
/// threads could not be started.
#[unsafe(no_mangle)]
pub extern "C" fn hs_threads_calling_thread(n: u32) -> *mut hs_threads {
    guard_new(|| {
        check_threads(n)?;
        Ok(hs_threads(Threads::calling_thread_pool(n as usize)?))
    })
}

/// `GOMP_parallel`'s type: runs `f(data)` on each thread of a new team of `threads` threads (0: the
/// runtime's count), the caller as thread 0, and returns when every run has returned.
pub type hs_omp_parallel = Option<
    unsafe extern "C" fn(
        f: unsafe extern "C" fn(data: *mut c_void),
        data: *mut c_void,
        threads: c_uint,
        flags: c_uint,
    ),
>;

/// `omp_get_thread_num`'s and `omp_get_max_threads`' type.
pub type hs_omp_count = Option<unsafe extern "C" fn() -> c_int>;

/// Steps on the threads of the process's OpenMP runtime, the stepping thread one of them: pass its
/// `GOMP_parallel`, `omp_get_thread_num` and `omp_get_max_threads` (in a program built with
/// `-fopenmp`, the functions themselves; LLVM's and Intel's runtimes export these libgomp names
/// too), and `n` threads (`n == 0`: `omp_get_max_threads()` of the stepping thread, read at each
/// step; at most `HS_MAX_THREADS`). A process that already runs OpenMP work keeps its threads
/// spinning between regions; a team of halfstep's own (`hs_threads_calling_thread`) would compete
/// with them for the cores. The pieces are those of a team of the same size, with the same grain.
/// Steps may run from several threads at once and from inside a parallel region (a nested region,
/// whose size the runtime decides: often one thread). The runtime must stay loaded until the handle is freed (`hs_threads_free`). NULL on
/// failure (see `hs_last_error`): a NULL function, or `n` out of range.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_threads_openmp(
    parallel: hs_omp_parallel,
    thread_num: hs_omp_count,
    max_threads: hs_omp_count,
    n: u32,
) -> *mut hs_threads {
    guard_new(|| {
        check_threads(n)?;
        let null = |name: &str| Fail(HS_NULL_POINTER, format!("{name} is NULL"));
        let parallel = parallel.ok_or_else(|| null("parallel"))?;
        let thread_num = thread_num.ok_or_else(|| null("thread_num"))?;
        let max_threads = max_threads.ok_or_else(|| null("max_threads"))?;
        // SAFETY: this function's contract: the caller's OpenMP runtime, loaded while the handle lives.
        let omp = unsafe { OpenMp::new(parallel, thread_num, max_threads) };
        Ok(hs_threads(Threads::openmp(omp, n as usize)))
    })
}

/// Sets the grain of `threads`: steps over groups of at most `elements` elements run on the
/// calling thread alone, larger ones are cut into pieces of at least a quarter of it. It is
/// rounded up to a multiple of 2048 (a LAMB norm block). The default is 65536 for
/// `hs_threads_new`, and 16384 for `hs_threads_calling_thread(n >= 2)`, whose team pays no
/// hand-off (both chosen by benchmark: docs/DESIGN.md, "Parallel driver"). Only where work runs changes,
/// never the bits. `HS_NULL_POINTER`, or `HS_INVALID_ARGUMENT` for `elements == 0`; on an error
/// the grain is unchanged. Not while a step on another thread uses the same handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_threads_set_grain(
    threads: *mut hs_threads,
    elements: usize,
) -> hs_status {
    guard(|| {
        let t = unsafe { required_mut(threads, "threads")? };
        if elements == 0 {
            return Err(invalid("grain: 0 elements (at least 1)"));
        }
        t.0 = t.0.clone().with_grain(elements);
        Ok(())
    })
}

/// The grain of `threads` in elements (see `hs_threads_set_grain`); 0 for NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_threads_grain(threads: *const hs_threads) -> usize {
    unsafe { threads.as_ref() }.map_or(0, |t| t.0.grain())
}

/// Frees a `hs_threads` (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_threads_free(threads: *mut hs_threads) {
    if !threads.is_null() {
        drop(unsafe { Box::from_raw(threads) });
    }
}
