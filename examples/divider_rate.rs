//! The throughput of the vector square root and divide at 256 and 512 bits, in ns per element:
//! the floor under every optimizer but SGD once the data is in cache (each element needs one
//! `sqrt` and one `div`, correctly rounded, SPEC.md §6). Eight independent chains, so the
//! divider, not latency, is what is timed.
//!
//! `cargo run --release --example divider_rate`

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
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::time::Instant;
    let rounds = std::hint::black_box(2_000_000usize);
    let instructions = (rounds * 8) as f64;
    let time = |f: &dyn Fn() -> f32| {
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            std::hint::black_box(f());
            best = best.min(t.elapsed().as_secs_f64());
        }
        best / instructions * 1e9
    };
    println!("ns per element (best of 5); a ymm instruction does 8 elements, a zmm one 16");
    for (which, name) in ["sqrt", "div", "sqrt+div"].iter().enumerate() {
        let which = which as u32;
        let mut line = format!("{name:>9}:");
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the features were detected above.
            let t = time(&|| unsafe { x86::ymm(rounds, std::hint::black_box(which)) });
            line += &format!("  avx2 {:.4}", t / 8.0);
        }
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: as above.
            let t = time(&|| unsafe { x86::zmm(rounds, std::hint::black_box(which)) });
            line += &format!("  avx512 {:.4}", t / 16.0);
        }
        println!("{line}");
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("divider_rate times x86 vector instructions; nothing to do on this target");
}
