//! What entering a rayon pool costs: the fixed price of every group step that goes to a rayon
//! pool, and why the calling thread's pool is a team of halfstep's own instead (docs/DESIGN.md,
//! "Parallel driver").
//!
//! `cargo run --release --example handoff -- [threads]` (default 2). Each call forks two halves
//! of `w` µs of spinning with `join` (w = 0 and 20), and the time per call is printed for:
//! - a thread outside the pool, which `install`s the call (what `Threads::pool` and
//!   `Threads::global` pay when `step` is called from a plain thread: inject the job, wake a
//!   worker, sleep until it is done);
//! - a thread that is one of the pool's threads (rayon's `use_current_thread`): the `join` runs
//!   here and the other half is stolen by a worker.
//!
//! With two threads or more the halves run side by side, so a call ideally takes `w`.

use std::time::{Duration, Instant};

const CALLS: u32 = 5_000;

fn spin(us: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

/// Mean µs per call over `CALLS` calls (after one to start the threads).
fn per_call(mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    (0..CALLS).for_each(|_| f());
    t.elapsed().as_secs_f64() / f64::from(CALLS) * 1e6
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .map_or(2, |s| s.parse().expect("usage: handoff [threads]"));
    let outside = rayon_core::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    // A pool the calling thread is one of, on a thread of its own (a thread joins one pool for life).
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<f64>();
    let member = std::thread::spawn(move || {
        // From here rayon counts this thread as its pool's worker 0: `join` runs in that pool.
        let _pool = rayon_core::ThreadPoolBuilder::new()
            .num_threads(threads)
            .use_current_thread()
            .build()
            .unwrap();
        for w in rx {
            let t = per_call(|| {
                rayon_core::join(|| spin(w), || spin(w));
            });
            done_tx.send(t).unwrap();
        }
    });
    println!("{threads} threads: µs per call, mean of {CALLS} (each half spins w µs)");
    for w in [0u64, 20] {
        let out = per_call(|| {
            outside.install(|| rayon_core::join(|| spin(w), || spin(w)));
        });
        tx.send(w).unwrap();
        let inside = done_rx.recv().unwrap();
        println!(
            "  w = {w:>2}: from outside the pool {out:6.2}   from one of its threads {inside:6.2}"
        );
    }
    drop(tx);
    member.join().unwrap();
}
