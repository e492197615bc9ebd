//! Times the f32 conversions that round: bf16 and f16 nearest-even and stochastic, fp8 (E4M3)
//! stochastic, and the random bits alone (`fill_element_bits`, 16 per element), in ns per element,
//! each the fastest of `reps` calls (default 200), the six interleaved call by call so that all
//! see the same machine state. The ratios of one run are
//! what to read on a noisy host: stochastic over nearest-even, and one build over another.
//!
//! Every buffer starts 64-byte aligned, as PyTorch's tensors do: a `Vec` from the heap starts 16
//! bytes past a line, where each 64-byte access of AVX-512 touches two lines.
//!
//! The input is `amplitude * sin(0.37 i)`, amplitude 3 unless given: 1e-5 puts every value in
//! f16's subnormal range, where its stochastic rounding takes the integer rule.
//!
//! `PAGES=huge` asks Linux for 2 MiB pages under every buffer (`madvise(MADV_HUGEPAGE)` before the
//! first write), `PAGES=small` for 4 KiB pages (`MADV_NOHUGEPAGE`); unset, the system's setting
//! decides (`/sys/kernel/mm/transparent_hugepage/enabled`; under `madvise`, 4 KiB). From memory
//! the conversions move with the page size: on the Xeon VM with 480 MiB L3 the bf16 and f16
//! conversions of 64M elements took 1.16-1.36x the time on 4 KiB pages.
//!
//! `cargo run --release --example convert_timer -- <elements> [reps] [amplitude]`
//! (`HALFSTEP_BACKEND` picks the backend, `HALFSTEP_VAES=off` AVX2's 128-bit rounds).

use halfstep::convert::fill_element_bits;
use halfstep::convert::{f32_to_bf16, f32_to_f16};
use halfstep::quant::{Fp8, f32_to_fp8};
use halfstep::{Purpose, Rounding, StepContext, TensorStream, bf16, f16};
use std::time::Instant;

fn main() {
    let usage = "usage: convert_timer <elements> [reps] [amplitude]";
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().expect(usage).parse().expect(usage);
    let reps: usize = args.next().map_or(200, |s| s.parse().expect(usage));
    let amplitude: f32 = args.next().map_or(3.0, |s| s.parse().expect(usage));
    let mut src_buf = Aligned::new(0f32, n);
    let src = src_buf.slice();
    for (i, x) in src.iter_mut().enumerate() {
        *x = (i as f32 * 0.37).sin() * amplitude;
    }
    let src = &*src;
    let (mut b16, mut h16) = (Aligned::new(bf16::ZERO, n), Aligned::new(f16::ZERO, n));
    let (mut q8, mut bits) = (Aligned::new(0u8, n), Aligned::new(0u16, n));
    let (b16, h16, q8, bits) = (b16.slice(), h16.slice(), q8.slice(), bits.slice());
    let ctx = StepContext::new(1, 1);
    let stream = TensorStream::new(3);
    let mut best = [f64::MAX; 6];
    for _ in 0..reps {
        for (k, t) in best.iter_mut().enumerate() {
            let start = Instant::now();
            match k {
                0 => f32_to_bf16(src, b16, Rounding::NearestEven, &ctx, &stream),
                1 => f32_to_bf16(src, b16, Rounding::Stochastic, &ctx, &stream),
                2 => f32_to_f16(src, h16, Rounding::Stochastic, &ctx, &stream),
                3 => f32_to_f16(src, h16, Rounding::NearestEven, &ctx, &stream),
                5 => fill_element_bits(&ctx, &stream, Purpose::Weights, bits),
                _ => f32_to_fp8(src, q8, Fp8::E4M3, Rounding::Stochastic, &ctx, &stream),
            }
            .expect("the buffers match");
            *t = t.min(start.elapsed().as_secs_f64());
        }
    }
    let ns = |t: f64| t * 1e9 / n as f64;
    println!("elements {n}, fastest of {reps} calls, ns per element:");
    println!(
        "bf16 nearest {:.4}  bf16 SR {:.4}  f16 nearest {:.4}  f16 SR {:.4}  e4m3 SR {:.4}  \
         bf16 SR / nearest {:.2}  f16 SR / nearest {:.2}  bits {:.4}",
        ns(best[0]),
        ns(best[1]),
        ns(best[3]),
        ns(best[2]),
        ns(best[4]),
        best[1] / best[0],
        best[2] / best[3],
        ns(best[5])
    );
}

/// `n` elements of `T` from a 64-byte boundary, inside an over-allocated `Vec`.
struct Aligned<T> {
    v: Vec<T>,
    start: usize,
    n: usize,
}

impl<T: Copy> Aligned<T> {
    fn new(x: T, n: usize) -> Aligned<T> {
        let size = std::mem::size_of::<T>();
        let mut v: Vec<T> = Vec::with_capacity(n + 64 / size);
        advise_pages(v.as_mut_ptr().cast(), v.capacity() * size);
        v.resize(n + 64 / size, x);
        let start = (64 - v.as_ptr() as usize % 64) % 64 / size;
        Aligned { v, start, n }
    }

    fn slice(&mut self) -> &mut [T] {
        &mut self.v[self.start..self.start + self.n]
    }
}

/// `PAGES`' advice for the whole 2 MiB pages inside `bytes` bytes from `p` (not yet written), on
/// Linux; elsewhere, or unset, none.
fn advise_pages(p: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        unsafe extern "C" {
            fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
        }
        const HUGE: usize = 2 << 20;
        let advice = match std::env::var("PAGES").as_deref() {
            Ok("huge") => 14,  // MADV_HUGEPAGE
            Ok("small") => 15, // MADV_NOHUGEPAGE
            Ok(other) => panic!("PAGES={other}: huge or small"),
            Err(_) => return,
        };
        let lo = (p as usize).next_multiple_of(HUGE);
        let hi = (p as usize + bytes) / HUGE * HUGE;
        if hi > lo {
            // Advice: where the kernel declines it, the pages are what they would have been.
            unsafe { madvise(lo as *mut u8, hi - lo, advice) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, bytes);
}
