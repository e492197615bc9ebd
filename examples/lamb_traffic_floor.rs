//! The floor under any LAMB step on split weights, bf16 gradients and f32 moments: loops that
//! move exactly the bytes such a step must move and run the square roots and divisions it must
//! run, and do nothing else.
//!
//! LAMB scales every update of a tensor by ‖p‖ / ‖u‖, so no weight can be written before the
//! whole tensor has been read: two passes. Pass 1 reads g (2 bytes), p (top + trail, 4), m and v
//! (8), writes m and v (8), and needs u = m̂ / (√v̂ + ε) + λp, one correctly rounded square root
//! and division per element (SPEC.md §6.5). Pass 2 reads and writes p (8) and needs each
//! element's u again, one of two ways:
//!
//! - **kept**: u written in pass 1 and read back (4 + 4 bytes), as halfstep's workspace does up
//!   to 2^20 elements;
//! - **recomputed**: m and v read again (8 bytes) and a second square root and division.
//!
//! Both loops do that traffic, with integer adds and xors in place of the rest of the arithmetic,
//! in two passes with a barrier between them, on `threads` threads (the calling thread and
//! spinning workers, as OpenMP's team). The floor is the faster of the two. It is measured, not
//! derived: a LAMB, halfstep's or another's, that moves these bytes with ordinary loads and
//! stores has all of this work and more, so it does not run below it on the same machine.
//! (Keeping u for some elements and not for others costs a mix of the two, so it is no faster
//! than the faster one.)
//!
//! Same command line and schedule as `examples/step_timer.rs` (median of 5 batches of about
//! 2e8 / n steps, ns per parameter), so `tools/peers_side_by_side.py --floor` runs it beside the
//! peers: `cargo run --release --example lamb_traffic_floor -- lamb <elements> <threads>`. Prints
//! the floor on stdout and both loops' times on stderr. x86_64 with AVX2 only: elsewhere it
//! prints `-`.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: lamb_traffic_floor lamb <elements> <threads>";
    let kernel = args.get(1).expect(usage).as_str();
    let n: usize = args.get(2).expect(usage).parse().expect(usage);
    let threads: usize = args.get(3).expect(usage).parse().expect(usage);
    assert!(threads >= 1, "{usage}");
    // Only LAMB has a floor here: the peers script asks for every kernel it runs.
    if kernel != "lamb" {
        println!("-");
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (n, threads);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        let kept = x86::time::<true>(n, threads);
        let recomputed = x86::time::<false>(n, threads);
        eprintln!("kept {kept:.4} recomputed {recomputed:.4}");
        println!("{:.4}", kept.min(recomputed));
        return;
    }
    println!("-");
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// One thread's share of the buffers (element ranges are multiples of 8).
    struct Share<'a> {
        g: &'a [u16],
        top: &'a mut [u16],
        trail: &'a mut [u16],
        m: &'a mut [u32],
        v: &'a mut [u32],
        u: &'a mut [u32],
        sink: __m256i,
    }

    /// u's square root and division (m and v hold the bits of floats near 1).
    #[target_feature(enable = "avx2")]
    fn direction(m: __m256i, v: __m256i) -> __m256i {
        let (m, v) = (_mm256_castsi256_ps(m), _mm256_castsi256_ps(v));
        _mm256_castps_si256(_mm256_div_ps(m, _mm256_sqrt_ps(v)))
    }

    /// Eight u16 from `p`, zero-extended to 32 bits.
    #[target_feature(enable = "avx2")]
    unsafe fn widen(p: *const u16) -> __m256i {
        unsafe { _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())) }
    }

    /// Eight u32 from `p`.
    #[target_feature(enable = "avx2")]
    unsafe fn load(p: *const u32) -> __m256i {
        unsafe { _mm256_loadu_si256(p.cast()) }
    }

    /// Eight 32-bit lanes (each below 2^16) narrowed to u16: pack within each 128-bit lane, then
    /// gather the two 64-bit results into the low 128 bits.
    #[target_feature(enable = "avx2")]
    fn narrow(x: __m256i) -> __m128i {
        let x = _mm256_packus_epi32(x, x);
        _mm256_castsi256_si128(_mm256_permute4x64_epi64(x, 0b1000))
    }

    /// Pass 1: reads g, top, trail, m, v; writes m, v, and u if `KEEP`; one square root and
    /// division per element.
    #[target_feature(enable = "avx2")]
    unsafe fn pass1<const KEEP: bool>(s: &mut Share<'_>) {
        unsafe {
            let mut i = 0;
            while i + 8 <= s.g.len() {
                let gp = _mm256_xor_si256(widen(s.g.as_ptr().add(i)), widen(s.top.as_ptr().add(i)));
                let x = _mm256_xor_si256(gp, widen(s.trail.as_ptr().add(i)));
                let m = _mm256_xor_si256(load(s.m.as_ptr().add(i)), x);
                let v = _mm256_xor_si256(load(s.v.as_ptr().add(i)), x);
                let u = direction(m, v);
                if KEEP {
                    _mm256_storeu_si256(s.u.as_mut_ptr().add(i).cast(), u);
                } else {
                    // Consumed, so the division is not dropped.
                    s.sink = _mm256_xor_si256(s.sink, u);
                }
                _mm256_storeu_si256(s.v.as_mut_ptr().add(i).cast(), v);
                _mm256_storeu_si256(s.m.as_mut_ptr().add(i).cast(), m);
                i += 8;
            }
        }
    }

    /// Pass 2: reads top and trail, and u if `KEEP` (else m and v, and one square root and
    /// division per element); writes top and trail.
    #[target_feature(enable = "avx2")]
    unsafe fn pass2<const KEEP: bool>(s: &mut Share<'_>) {
        unsafe {
            let mut i = 0;
            while i + 8 <= s.top.len() {
                let top = _mm256_slli_epi32(widen(s.top.as_ptr().add(i)), 16);
                let p = _mm256_or_si256(top, widen(s.trail.as_ptr().add(i)));
                let u = if KEEP {
                    load(s.u.as_ptr().add(i))
                } else {
                    direction(load(s.m.as_ptr().add(i)), load(s.v.as_ptr().add(i)))
                };
                let p = _mm256_add_epi32(p, u);
                let hi = narrow(_mm256_srli_epi32(p, 16));
                let lo = narrow(_mm256_and_si256(p, _mm256_set1_epi32(0xffff)));
                _mm_storeu_si128(s.top.as_mut_ptr().add(i).cast(), hi);
                _mm_storeu_si128(s.trail.as_mut_ptr().add(i).cast(), lo);
                i += 8;
            }
        }
    }

    /// A sense-counting spin barrier: the workers spin, as OpenMP's do between parallel loops.
    struct Barrier {
        arrived: AtomicUsize,
        generation: AtomicUsize,
        threads: usize,
    }

    impl Barrier {
        fn wait(&self) {
            let gen_now = self.generation.load(Ordering::Acquire);
            if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
                self.arrived.store(0, Ordering::Relaxed);
                self.generation.fetch_add(1, Ordering::Release);
            } else {
                while self.generation.load(Ordering::Acquire) == gen_now {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// ns per element, median of 5 batches (the peers' schedule).
    pub fn time<const KEEP: bool>(n: usize, threads: usize) -> f64 {
        // m and v start at 1.0 and pass 1 xors 16-bit values into them: they stay floats in
        // [1, 2), so the division never meets a subnormal (which would slow it).
        let g = vec![1u16; n];
        let (mut top, mut trail) = (vec![2u16; n], vec![3u16; n]);
        let one = 1.0f32.to_bits();
        let (mut m, mut v, mut u) = (vec![one; n], vec![one; n], vec![0u32; n]);
        // Shares cut at multiples of 8 elements; the last takes the rest.
        let per = n.div_ceil(threads).next_multiple_of(8);
        let mut shares: Vec<Share<'_>> = Vec::new();
        {
            let (mut g, mut top, mut trail) = (&g[..], &mut top[..], &mut trail[..]);
            let (mut m, mut v, mut u) = (&mut m[..], &mut v[..], &mut u[..]);
            while !g.is_empty() {
                let k = per.min(g.len());
                let (g0, g1) = g.split_at(k);
                let (t0, t1) = std::mem::take(&mut top).split_at_mut(k);
                let (r0, r1) = std::mem::take(&mut trail).split_at_mut(k);
                let (m0, m1) = std::mem::take(&mut m).split_at_mut(k);
                let (v0, v1) = std::mem::take(&mut v).split_at_mut(k);
                let (u0, u1) = std::mem::take(&mut u).split_at_mut(k);
                shares.push(Share {
                    g: g0,
                    top: t0,
                    trail: r0,
                    m: m0,
                    v: v0,
                    u: u0,
                    sink: unsafe { _mm256_setzero_si256() },
                });
                (g, top, trail, m, v, u) = (g1, t1, r1, m1, v1, u1);
            }
        }
        let team = shares.len();
        let barrier = Barrier {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            threads: team,
        };
        let reps = (2e8 as usize / n).clamp(3, 200);
        // Every thread runs the same schedule: one warm-up step, then 5 batches of `reps`.
        let run = |s: &mut Share<'_>, mut mark: Option<&mut Vec<Instant>>| {
            for step in 0..1 + 5 * reps {
                if let Some(marks) = mark.as_deref_mut()
                    && (step == 1 || (step > 1 && (step - 1) % reps == 0))
                {
                    marks.push(Instant::now());
                }
                unsafe { pass1::<KEEP>(s) };
                barrier.wait();
                unsafe { pass2::<KEEP>(s) };
                barrier.wait();
            }
            if let Some(marks) = mark {
                marks.push(Instant::now());
            }
            std::hint::black_box(&s.sink);
        };
        let mut marks = Vec::new();
        std::thread::scope(|scope| {
            let mut it = shares.iter_mut();
            let mine = it.next().unwrap();
            for s in it {
                scope.spawn(|| run(s, None));
            }
            run(mine, Some(&mut marks));
        });
        std::hint::black_box((&top, &trail, &m, &v, &u));
        let mut times: Vec<f64> = marks
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() / reps as f64)
            .collect();
        assert_eq!(times.len(), 5);
        times.sort_by(f64::total_cmp);
        times[2] * 1e9 / n as f64
    }
}
