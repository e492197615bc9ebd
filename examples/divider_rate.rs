//! The throughput of the vector square root and divide at 256 and 512 bits, in ns per element:
//! the floor under every optimizer but SGD once the data is in cache (each element needs one
//! `sqrt` and one `div`, correctly rounded, SPEC.md §6). Eight independent chains, so the
//! divider, not latency, is what is timed.
//!
//! With a thread count (`-- 16`) the same loops run on that many threads at once, and the time per
//! element is also given for all of them together: the floor of a step on that many cores, at the
//! clock they keep when all of them run wide vector code.
//!
//! Where the CPU has VAES, the last lines time the AES rounds of stochastic rounding (ARS-5: five
//! rounds per 128 bits, 16 bits per rounding) alone and beside `sqrt + div`, in the same loop on
//! independent registers, for one and two roundings per element: whether the rounds can run under
//! the divider's work or must add their time to it.
//!
//! `cargo run --release --example divider_rate [-- THREADS]`

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `which`: 0 sqrt, 1 div, 2 sqrt then div.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn ymm(rounds: usize, which: u32) -> f32 {
        let mut a = [_mm256_set1_ps(1.5); 8];
        let d = _mm256_set1_ps(1.0001);
        for _ in 0..rounds {
            for x in &mut a {
                *x = match which {
                    0 => _mm256_sqrt_ps(*x),
                    1 => _mm256_div_ps(d, *x),
                    _ => _mm256_div_ps(d, _mm256_sqrt_ps(*x)),
                };
            }
        }
        let s = a
            .iter()
            .fold(_mm256_setzero_ps(), |s, x| _mm256_add_ps(s, *x));
        _mm256_cvtss_f32(s)
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn zmm(rounds: usize, which: u32) -> f32 {
        let mut a = [_mm512_set1_ps(1.5); 8];
        let d = _mm512_set1_ps(1.0001);
        for _ in 0..rounds {
            for x in &mut a {
                *x = match which {
                    0 => _mm512_sqrt_ps(*x),
                    1 => _mm512_div_ps(d, *x),
                    _ => _mm512_div_ps(d, _mm512_sqrt_ps(*x)),
                };
            }
        }
        let s = a
            .iter()
            .fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, *x));
        _mm512_reduce_add_ps(s)
    }

    /// `sqrt + div` on 8 chains (if `divide`) and, beside them, the AES rounds of `roundings`
    /// stochastic roundings per element (16 bits each, five rounds per 128 bits) on 8 states of
    /// their own: per 16-element chunk, `roundings * 256 / 512` vectors of five rounds.
    #[target_feature(enable = "avx512f,vaes")]
    pub unsafe fn zmm_rounds(rounds: usize, divide: bool, roundings: usize) -> f32 {
        let mut a = [_mm512_set1_ps(1.5); 8];
        let mut r: [__m512i; 8] = core::array::from_fn(|i| _mm512_set1_epi32(i as i32));
        let k = _mm512_set1_epi32(0x5bd1_e995);
        let d = _mm512_set1_ps(1.0001);
        for _ in 0..rounds {
            for (i, x) in a.iter_mut().enumerate() {
                if divide {
                    *x = _mm512_div_ps(d, _mm512_sqrt_ps(*x));
                }
                // Two roundings per element: one 512-bit block per chunk; one: every other chunk.
                if roundings == 2 || (roundings == 1 && i % 2 == 0) {
                    for _ in 0..5 {
                        r[i] = _mm512_aesenc_epi128(r[i], k);
                    }
                }
            }
        }
        let s = a
            .iter()
            .fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, *x));
        let t = r
            .iter()
            .fold(_mm512_setzero_si512(), |s, x| _mm512_xor_si512(s, *x));
        _mm512_reduce_add_ps(s) + _mm512_reduce_add_epi32(t) as f32
    }
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::time::Instant;
    let threads: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("the argument is a thread count"))
        .unwrap_or(1)
        .max(1);
    let rounds = std::hint::black_box(200_000usize);
    let instructions = (rounds * 8) as f64;
    // Every thread runs batches of `rounds` from one start until 0.3 s have passed; the figure is
    // the time per instruction of the slowest thread, and the wall time over all threads' batches
    // together (the rate of the whole machine, which a step that hands its pieces out reaches
    // even where some threads run slower than others). Best of five.
    let time = |f: &(dyn Fn() -> f32 + Sync)| {
        let (mut one, mut all) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..5 {
            let barrier = std::sync::Barrier::new(threads);
            let runs: Vec<(f64, usize)> = std::thread::scope(|s| {
                let runs: Vec<_> = (0..threads)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            let t = Instant::now();
                            let mut batches = 0;
                            while t.elapsed().as_secs_f64() < 0.3 {
                                std::hint::black_box(f());
                                batches += 1;
                            }
                            (t.elapsed().as_secs_f64(), batches)
                        })
                    })
                    .collect();
                runs.into_iter().map(|r| r.join().unwrap()).collect()
            });
            let slowest = runs.iter().map(|&(t, b)| t / b as f64).fold(0.0, f64::max);
            let wall = runs.iter().map(|r| r.0).fold(0.0, f64::max);
            let batches: usize = runs.iter().map(|r| r.1).sum();
            one = one.min(slowest);
            all = all.min(wall / batches as f64);
        }
        (one / instructions * 1e9, all / instructions * 1e9)
    };
    println!(
        "ns per element (best of 5) on {threads} thread(s) at once; a ymm instruction does 8 elements, a zmm one 16"
    );
    if threads > 1 {
        println!("each figure: the slowest thread's / all threads' together");
    }
    let show = |(one, all): (f64, f64), lanes: f64| {
        if threads > 1 {
            format!("{:.4} / {:.4}", one / lanes, all / lanes)
        } else {
            format!("{:.4}", one / lanes)
        }
    };
    for (which, name) in ["sqrt", "div", "sqrt+div"].iter().enumerate() {
        let which = which as u32;
        let mut line = format!("{name:>9}:");
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the features were detected above.
            let t = time(&|| unsafe { x86::ymm(rounds, std::hint::black_box(which)) });
            line += &format!("  avx2 {}", show(t, 8.0));
        }
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: as above.
            let t = time(&|| unsafe { x86::zmm(rounds, std::hint::black_box(which)) });
            line += &format!("  avx512 {}", show(t, 16.0));
        }
        println!("{line}");
    }
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("vaes") {
        for roundings in [1, 2] {
            let mut line = format!("{roundings} SR/elt:");
            for (divide, name) in [(false, "rounds"), (true, "sqrt+div+rounds")] {
                // SAFETY: the features were detected above.
                let t = time(&|| unsafe {
                    x86::zmm_rounds(rounds, std::hint::black_box(divide), roundings)
                });
                line += &format!("  avx512 {name} {}", show(t, 16.0));
            }
            println!("{line}");
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("divider_rate times x86 vector instructions; nothing to do on this target");
}
