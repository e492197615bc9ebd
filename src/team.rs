//! A team of threads in the manner of an OpenMP team: the thread that steps is member 0, the
//! others are threads of the team's own that wait for work spinning, then parked. A step's pieces
//! go into a [`Batch`] on the stepping thread's stack; the stepping thread hands a pointer to one
//! job (on its stack too) to the members it wants through their mailboxes, and every one of them,
//! itself included, runs its own share of the batch's pieces (the same share at every step of a
//! group), then takes what is left of the others' until none is left (so a slow core takes fewer),
//! then says it is done. Nothing is allocated per step.
//!
//! Why not rayon's pool for this: a rayon worker that finds no work sleeps after a few dozen
//! rounds of looking, and a step that then forks wakes the workers one `join` at a time, each
//! wake-up a futex round trip. Between two steps of a training loop that is every step; an
//! OpenMP team spins first (docs/DESIGN.md, "Parallel driver").

#![allow(unsafe_code)]

use std::any::Any;
use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::openmp::OpenMp;

/// How long an idle member spins on its mailbox before it parks: longer than the gap between two
/// calls of a loop that steps parameter groups one after another, shorter than a forward pass.
pub const SPIN: Duration = Duration::from_micros(100);

/// A job on its sender's stack; `execute` is the first field, so a pointer to the header is a
/// pointer to the job.
#[repr(C)]
struct Header {
    execute: unsafe fn(*const Header, usize),
}

/// One closure run by the sender and by `pending` members at once.
#[repr(C)]
struct SharedJob<'f, F> {
    header: Header,
    f: &'f F,
    pending: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl<F: Fn(usize) + Sync> SharedJob<'_, F> {
    /// Runs the job on receiving member `member`.
    ///
    /// Safety: `this` points to a live `SharedJob<F>` whose sender waits for `pending` to reach
    /// zero before it goes out of scope; after the decrement this function touches nothing of it.
    unsafe fn execute(this: *const Header, member: usize) {
        // SAFETY: the caller's contract; the header is the first field of a `repr(C)` job.
        let job = unsafe { &*(this as *const Self) };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| (job.f)(member))) {
            let mut slot = job.panic.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(p);
        }
        job.pending.fetch_sub(1, Ordering::Release);
    }
}

/// One member's mailbox, alone on its cache line (128 bytes: adjacent lines are fetched in pairs
/// on Intel), so that a member waiting on its own does not take the line of another's.
#[repr(align(128))]
struct Member {
    mailbox: AtomicPtr<Header>,
    /// Set while the member may be parked or about to park: only then does a sender unpark it
    /// (an `unpark` for each member at each step was a locked instruction per member on the
    /// sender's path).
    parking: AtomicBool,
    thread: OnceLock<Thread>,
}

pub(crate) struct Shared {
    /// Index 0 is the stepping thread's place and is never sent to.
    members: Box<[Member]>,
    shutdown: AtomicBool,
}

/// A team of `size()` threads: the calling thread and `size() - 1` of its own.
pub struct Team {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    /// One step on the team at a time; a second caller steps on its own thread instead.
    busy: Mutex<()>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team").field("size", &self.size()).finish()
    }
}

impl Team {
    /// A team of `size` threads (at least 1), starting `size - 1` threads.
    pub fn new(size: usize) -> std::io::Result<Team> {
        let size = size.max(1);
        let shared = Arc::new(Shared {
            members: (0..size)
                .map(|_| Member {
                    mailbox: AtomicPtr::new(ptr::null_mut()),
                    parking: AtomicBool::new(false),
                    thread: OnceLock::new(),
                })
                .collect(),
            shutdown: AtomicBool::new(false),
        });
        let mut team = Team {
            shared,
            handles: Vec::with_capacity(size - 1),
            busy: Mutex::new(()),
        };
        for index in 1..size {
            let shared = team.shared.clone();
            // On failure `team` drops here, which stops the members already started.
            let handle = thread::Builder::new()
                .name(format!("halfstep-team-{index}"))
                // The main thread's size: an unoptimised build's kernels need more than the
                // default 2 MiB (README).
                .stack_size(8 << 20)
                .spawn(move || wait_for_work(&shared, index))?;
            let _ = team.shared.members[index]
                .thread
                .set(handle.thread().clone());
            team.handles.push(handle);
        }
        Ok(team)
    }

    /// The number of threads, the caller included.
    pub fn size(&self) -> usize {
        self.shared.members.len()
    }

    /// The team for one step, or `None` while another thread steps on it.
    pub(crate) fn enter(&self) -> Option<Entered<'_>> {
        let guard = match self.busy.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(Entered::Team {
            shared: &self.shared,
            _guard: guard,
        })
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        for m in &self.shared.members[1..] {
            if let Some(t) = m.thread.get() {
                t.unpark();
            }
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The threads one step runs on: a team held by the step, or a team of an OpenMP runtime.
pub(crate) enum Entered<'t> {
    Team {
        shared: &'t Shared,
        _guard: MutexGuard<'t, ()>,
    },
    OpenMp {
        omp: &'t OpenMp,
        size: usize,
    },
}

impl<'t> Entered<'t> {
    /// A step on `omp`'s threads, `size` of them (at least 1) the caller included.
    pub(crate) fn openmp(omp: &'t OpenMp, size: usize) -> Self {
        Entered::OpenMp {
            omp,
            size: size.max(1),
        }
    }

    /// The number of members, the caller included.
    pub(crate) fn size(&self) -> usize {
        match self {
            Entered::Team { shared, .. } => shared.members.len(),
            Entered::OpenMp { size, .. } => *size,
        }
    }

    /// Runs `f(member)` on this thread (member 0) and on up to `helpers` other members (members
    /// `1 ..= helpers`, at most `size() - 1`) at once: on those that take the job before this
    /// thread's own run of `f` returns; the job is
    /// taken back from the others' mailboxes, so a member that the system has not run meanwhile
    /// does not hold the step (`f` must leave nothing undone for them: [`Entered::drain`]'s
    /// does not). Returns when every run has returned. A panic in any is resumed here after all
    /// are done.
    pub(crate) fn broadcast<F: Fn(usize) + Sync>(&self, helpers: usize, f: &F) {
        let helpers = helpers.min(self.size() - 1);
        let shared = match self {
            Entered::Team { shared, .. } => shared,
            // The runtime's own hand-off: its threads run `f` as they start; a thread the system
            // has not run meanwhile holds the region's end, not the items (`drain`).
            Entered::OpenMp { omp, .. } => return omp.broadcast(helpers + 1, f),
        };
        let job = SharedJob {
            header: Header {
                execute: SharedJob::<F>::execute,
            },
            f,
            pending: AtomicUsize::new(helpers),
            panic: Mutex::new(None),
        };
        // From the whole job, not its first field: the members read all of it.
        let header = &job as *const SharedJob<F> as *mut Header;
        let members = &shared.members[1..=helpers];
        for member in members {
            member.mailbox.store(header, Ordering::Release);
        }
        // Against the member's store of `parking` and fence before its last look at the mailbox
        // (`wait_for_work`): either it sees the job or this sees `parking` and wakes it.
        fence(Ordering::SeqCst);
        for member in members {
            if member.parking.load(Ordering::Relaxed)
                && let Some(t) = member.thread.get()
            {
                t.unpark();
            }
        }
        let ran = catch_unwind(AssertUnwindSafe(|| f(0)));
        for member in members {
            // Exactly one of this and the member's `swap` gets the pointer. A plain load first:
            // a member that took the job has cleared it, and the loads of all the members'
            // lines overlap where each locked exchange waited for the one before.
            if member.mailbox.load(Ordering::Relaxed) == header
                && member
                    .mailbox
                    .compare_exchange(
                        header,
                        ptr::null_mut(),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                job.pending.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // `job` lives on this stack: wait for every member that took it, whatever `f` did here.
        let mut spin = Spin::new();
        while job.pending.load(Ordering::Acquire) != 0 {
            if !spin.round() {
                thread::yield_now();
            }
        }
        if let Err(p) = ran {
            resume_unwind(p);
        }
        if let Some(p) = job.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            resume_unwind(p);
        }
    }

    /// Runs `f` on every item of `batch`, each once, on this thread and `helpers` members, and
    /// empties it. Member `m` of the `k` taking part first runs its own items, `m * len / k ..
    /// (m + 1) * len / k`: the same ones at every step of the same group, so that what it read and
    /// wrote at the last step is still in its own caches (16-core Xeon host, AdamW at 1M on 16
    /// threads: docs/DESIGN.md, "Parallel driver"). Then it takes what is left of the others',
    /// from the end of each, so that a member the system has not run, or a slow one, holds up no
    /// more than the item it is in.
    pub(crate) fn drain<T: Send, const N: usize>(
        &self,
        helpers: usize,
        batch: &mut Batch<T, N>,
        f: &(impl Fn(T) + Sync),
    ) {
        const { assert!(N <= 128, "one bit of `taken` per item") };
        let len = std::mem::replace(&mut batch.len, 0);
        let items = Items(batch.items.as_ptr());
        let helpers = helpers.min(len.saturating_sub(1)).min(self.size() - 1);
        let members = helpers + 1;
        // Item `i`'s bit is bit `i % 64` of word `i / 64`.
        let taken = [AtomicU64::new(0), AtomicU64::new(0)];
        let run = |i: usize| {
            let (taken, bit) = (&taken[i / 64], 1u64 << (i % 64));
            if taken.load(Ordering::Relaxed) & bit == 0
                && taken.fetch_or(bit, Ordering::Relaxed) & bit == 0
            {
                // SAFETY: items `..len` were written by `push`, and the bit gives each index to
                // one taker.
                f(unsafe { items.take(i) });
            }
        };
        self.broadcast(helpers, &|member| {
            let share = |m: usize| m * len / members..(m + 1) * len / members;
            share(member).for_each(run);
            for k in 1..members {
                share((member + k) % members).rev().for_each(run);
            }
        });
    }
}

/// Up to `N` items on the stack, for [`Entered::drain`].
pub(crate) struct Batch<T, const N: usize> {
    items: [MaybeUninit<T>; N],
    len: usize,
}

impl<T, const N: usize> Batch<T, N> {
    pub(crate) fn new() -> Self {
        Batch {
            items: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Whether there is no room for another item.
    pub(crate) fn is_full(&self) -> bool {
        self.len == N
    }

    /// Adds `item`; the batch must not be full.
    pub(crate) fn push(&mut self, item: T) {
        assert!(self.len < N, "batch full");
        self.items[self.len].write(item);
        self.len += 1;
    }
}

/// The items of a batch being drained, shared by the members that take them.
struct Items<T>(*const MaybeUninit<T>);

// SAFETY: each item is moved out by exactly one thread (the index comes from one counter), and
// `T: Send`.
unsafe impl<T: Send> Sync for Items<T> {}

impl<T> Items<T> {
    /// Safety: item `i` was written and is taken only once.
    unsafe fn take(&self, i: usize) -> T {
        // SAFETY: the caller's contract.
        unsafe { (*self.0.add(i)).assume_init_read() }
    }
}

/// Waiting by spinning: `round` pauses once and says whether the wait is still within [`SPIN`]
/// (the clock is read once every 64 rounds); past it, the caller blocks its own way.
struct Spin {
    since: Option<Instant>,
    rounds: u32,
}

impl Spin {
    fn new() -> Spin {
        Spin {
            since: None,
            rounds: 0,
        }
    }

    fn round(&mut self) -> bool {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(64)
            && self.since.get_or_insert_with(Instant::now).elapsed() >= SPIN
        {
            return false;
        }
        std::hint::spin_loop();
        true
    }
}

/// A member's life: take a job from the mailbox, run it, wait for the next; spin for [`SPIN`]
/// after each job, then park until a sender unparks it.
fn wait_for_work(shared: &Shared, index: usize) {
    let me = &shared.members[index];
    let mailbox = &me.mailbox;
    loop {
        let mut spin = Spin::new();
        let job = loop {
            // Read before taking: a locked exchange at every round would hold the line, which
            // the sender must take to post the job.
            if !mailbox.load(Ordering::Relaxed).is_null() {
                let j = mailbox.swap(ptr::null_mut(), Ordering::Acquire);
                if !j.is_null() {
                    break j;
                }
            }
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            if !spin.round() {
                // Say so before the last look at the mailbox (the sender's fence pairs with this
                // one), then park: it returns at the sender's `unpark` (or spuriously; an
                // `unpark` that came first makes it return at once).
                me.parking.store(true, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                if mailbox.load(Ordering::Relaxed).is_null()
                    && !shared.shutdown.load(Ordering::Acquire)
                {
                    thread::park();
                }
                me.parking.store(false, Ordering::Relaxed);
            }
        };
        // SAFETY: a sender stores a pointer to a live job and waits for its `pending` count to
        // reach zero (this member's decrement included) before the job goes out of scope.
        unsafe { ((*job).execute)(job, index) };
    }
}

/// Checks of the hand-out, run by `tests/internals.rs` (and Miri, which checks the unsafe code).
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// How many times each of the `N` slots of a batch was taken when `entered` drains items
    /// `0..len` with `helpers` helpers.
    fn drain_counts<const N: usize>(entered: &Entered<'_>, helpers: usize, len: usize) -> Vec<u32> {
        let seen: Vec<AtomicU32> = (0..N).map(|_| AtomicU32::new(0)).collect();
        let mut batch = Batch::<usize, N>::new();
        for i in 0..len {
            batch.push(i);
        }
        assert_eq!(batch.is_full(), len == N);
        entered.drain(helpers, &mut batch, &|i| {
            seen[i].fetch_add(1, Ordering::Relaxed);
        });
        seen.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }

    /// Items `..len` taken once each, the rest never.
    fn assert_each_taken_once(counts: &[u32], len: usize, what: &str) {
        assert!(
            counts[..len].iter().all(|&c| c == 1),
            "{what}, {len}: {counts:?}"
        );
        assert!(
            counts[len..].iter().all(|&c| c == 0),
            "{what}, {len}: {counts:?}"
        );
    }

    /// A panic in the run of item 5 of 8 reaches the caller of `drain`.
    fn a_panic_reaches_the_caller(entered: &Entered<'_>, helpers: usize) {
        let mut batch = Batch::<usize, 16>::new();
        for i in 0..8 {
            batch.push(i);
        }
        let caught = catch_unwind(AssertUnwindSafe(|| {
            entered.drain(helpers, &mut batch, &|i| assert_ne!(i, 5, "item 5"));
        }));
        assert!(caught.is_err(), "the panic of item 5 was lost");
    }

    /// Every item of a batch is taken exactly once, by any member, at every batch length; a panic
    /// in one member reaches the caller after the others are done, and the team steps on.
    pub(crate) fn every_item_once_and_panics_reach_the_caller() {
        let team = Team::new(4).unwrap();
        let entered = team.enter().unwrap();
        assert!(
            team.enter().is_none(),
            "a second step while one holds the team"
        );
        for len in [0, 1, 2, 5, 16] {
            assert_each_taken_once(&drain_counts::<16>(&entered, 3, len), len, "team of 4");
        }
        // Past 64 items the bits are in a second word.
        for len in [64, 65, 100, 128] {
            assert_each_taken_once(&drain_counts::<128>(&entered, 3, len), len, "team of 4");
        }
        a_panic_reaches_the_caller(&entered, 3);
        let ran = AtomicU32::new(0);
        entered.broadcast(3, &|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        let ran = ran.load(Ordering::Relaxed);
        assert!(
            (1..=4).contains(&ran),
            "the caller and up to three members: {ran}"
        );
        drop(entered);
        assert!(team.enter().is_some());
        parked_members_are_woken();
    }

    /// Members that have parked (after [`SPIN`] without work) take the next step's job: the
    /// caller's own run waits until every member has joined it.
    fn parked_members_are_woken() {
        let team = Team::new(3).unwrap();
        for _ in 0..3 {
            thread::sleep(SPIN * 20);
            let entered = team.enter().unwrap();
            let joined = AtomicU32::new(0);
            entered.broadcast(2, &|member| {
                joined.fetch_add(1, Ordering::AcqRel);
                if member == 0 {
                    let since = Instant::now();
                    while joined.load(Ordering::Acquire) < 3 {
                        assert!(
                            since.elapsed() < Duration::from_secs(30),
                            "a parked member was not woken"
                        );
                        thread::yield_now();
                    }
                }
            });
        }
    }

    std::thread_local!(static MEMBER: std::cell::Cell<std::ffi::c_int> = const { std::cell::Cell::new(0) });

    /// A runtime with libgomp's entry points: each region starts its threads afresh, numbers them
    /// `0..n` with the caller as 0, and returns when all have returned.
    unsafe extern "C" fn parallel(
        f: unsafe extern "C" fn(*mut std::ffi::c_void),
        data: *mut std::ffi::c_void,
        threads: std::ffi::c_uint,
        _flags: std::ffi::c_uint,
    ) {
        // The region's data to each thread as a pointer, not an address: Miri then follows its
        // provenance into the region (an integer cast would hide a bad access there).
        struct Data(*mut std::ffi::c_void);
        // SAFETY: the region's data is made to be shared by its threads (libgomp's contract); each
        // thread takes it through `&Data`.
        unsafe impl Sync for Data {}
        let data = &Data(data);
        thread::scope(|s| {
            for member in 1..threads.max(1) {
                s.spawn(move || {
                    MEMBER.set(member as std::ffi::c_int);
                    // SAFETY: the region's function and data, alive until the scope ends.
                    unsafe { f(data.0) }
                });
            }
            // SAFETY: as above.
            unsafe { f(data.0) };
        });
    }

    /// [`parallel`] with 3 threads whatever the region asks for.
    unsafe extern "C" fn parallel_of_three(
        f: unsafe extern "C" fn(*mut std::ffi::c_void),
        data: *mut std::ffi::c_void,
        _threads: std::ffi::c_uint,
        flags: std::ffi::c_uint,
    ) {
        // SAFETY: the caller's region.
        unsafe { parallel(f, data, 3, flags) }
    }

    unsafe extern "C" fn thread_num() -> std::ffi::c_int {
        MEMBER.get()
    }

    unsafe extern "C" fn max_threads() -> std::ffi::c_int {
        3
    }

    /// The stand-in runtime of [`parallel`], [`thread_num`] and [`max_threads`].
    pub(crate) fn stand_in() -> OpenMp {
        // SAFETY: the three behave as libgomp's and live as long as the program.
        unsafe { OpenMp::new(parallel, thread_num, max_threads) }
    }

    /// The same on an OpenMP runtime's threads: every item once at every batch length, a panic in
    /// one member reaches the caller, and a runtime that gives a region more threads than asked
    /// (3 where a step of 2 members asked for 2) still gives every item to one taker.
    pub(crate) fn openmp_every_item_once_and_panics_reach_the_caller() {
        let omp = stand_in();
        assert_eq!(omp.max_threads(), 3);
        for size in [1, 2, 3] {
            let entered = Entered::openmp(&omp, size);
            let what = format!("OpenMP, {size} threads");
            for len in [0, 1, 2, 5, 16] {
                assert_each_taken_once(&drain_counts::<16>(&entered, size - 1, len), len, &what);
            }
            for len in [65, 128] {
                assert_each_taken_once(&drain_counts::<128>(&entered, size - 1, len), len, &what);
            }
        }
        a_panic_reaches_the_caller(&Entered::openmp(&omp, 3), 2);
        let members: Vec<AtomicU32> = (0..3).map(|_| AtomicU32::new(0)).collect();
        omp.broadcast(2, &|m| {
            members[m].fetch_add(1, Ordering::Relaxed);
        });
        let members: Vec<u32> = members.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(
            members,
            [1, 1, 0],
            "a region of 2 threads: members 0 and 1 once each"
        );
        // A runtime that gives a region 3 threads where 2 were asked for: the third is numbered 1.
        // SAFETY: libgomp's behaviour but for the count; the functions live as long as the program.
        let wide = unsafe { OpenMp::new(parallel_of_three, thread_num, max_threads) };
        let counts = drain_counts::<16>(&Entered::openmp(&wide, 2), 1, 16);
        assert!(counts.iter().all(|&c| c == 1), "{counts:?}");
    }
}
