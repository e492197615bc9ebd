//! Whether AVX2's stochastic steps would gain by making a block's random bits inside the previous
//! block's loop rather than in a fill before it (docs/DESIGN.md, "AVX2's optimizers run the fill and
//! then the step"). A stand-alone probe, 64K elements (in L2), ARS-5's rounds on 256-bit VAES, three
//! steps whose bf16 states round stochastically: an SGD-like one (FMAs only), an Adagrad-like one
//! (a square root and a division per element, so the divider bounds it) and an AdamW-like one (two
//! moments, a square root and a division, 32 random bits per element); ns per element:
//!
//! - bits from a buffer, no rounds: the step's own cost;
//! - a block of 1024 elements' bits filled, eight counter vectors in flight, before the block's
//!   loop, as the library's AVX2 backend does;
//! - the next block's bits made inside this block's loop, one counter vector per 16 elements (two
//!   for the AdamW-like step), into the other of two buffers.
//!
//! The bit layout and the update are not SPEC.md's: only where the rounds' time goes is measured.
//!
//! `rustc -O --edition 2024 tools/fill_interleave.rs -o target/fill_interleave && target/fill_interleave`
#![allow(unsafe_op_in_unsafe_fn)]
use std::arch::x86_64::*;
use std::time::Instant;

const N: usize = 65536;
const BLOCK: usize = 1024;

struct Keys {
    k: [__m256i; 6],
}

#[target_feature(enable = "avx2,vaes,aes")]
unsafe fn keys() -> Keys {
    let weyl = _mm_set_epi64x(0xBB67AE8584CAA73Bu64 as i64, 0x9E3779B97F4A7C15u64 as i64);
    let mut k = _mm_set_epi64x(0, 12345);
    let mut out = [_mm256_setzero_si256(); 6];
    for i in 0..6 {
        out[i] = _mm256_broadcastsi128_si256(k);
        k = _mm_add_epi64(k, weyl);
    }
    Keys { k: out }
}

/// The 16 elements' bits from counter vector `c`: 5 rounds, split into two vectors of u32 words.
#[target_feature(enable = "avx2,vaes,aes")]
#[inline]
unsafe fn rounds(ks: &Keys, c: __m256i) -> (__m256i, __m256i) {
    let mut x = _mm256_xor_si256(c, ks.k[0]);
    x = _mm256_aesenc_epi128(x, ks.k[1]);
    x = _mm256_aesenc_epi128(x, ks.k[2]);
    x = _mm256_aesenc_epi128(x, ks.k[3]);
    x = _mm256_aesenc_epi128(x, ks.k[4]);
    x = _mm256_aesenclast_epi128(x, ks.k[5]);
    (
        _mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)),
        _mm256_srli_epi32::<16>(x),
    )
}

#[target_feature(enable = "avx2,vaes,aes")]
unsafe fn fill(ks: &Keys, block: u64, dst: *mut u32, vectors: usize) {
    let step = _mm256_set1_epi32(2);
    let mut c = _mm256_add_epi32(
        _mm256_set_epi32(13, 11, 7, 1, 13, 11, 7, 0),
        _mm256_set1_epi32((block * 128) as i32),
    );
    // eight counter vectors in flight, as the library's fill
    for v in (0..vectors).step_by(8) {
        let mut x = [_mm256_setzero_si256(); 8];
        for i in 0..8 {
            x[i] = _mm256_xor_si256(c, ks.k[0]);
            c = _mm256_add_epi32(c, step);
        }
        for r in 1..5 {
            for i in 0..8 {
                x[i] = _mm256_aesenc_epi128(x[i], ks.k[r]);
            }
        }
        for i in 0..8 {
            x[i] = _mm256_aesenclast_epi128(x[i], ks.k[5]);
            _mm256_storeu_si256(
                dst.add((v + i) * 16) as *mut _,
                _mm256_and_si256(x[i], _mm256_set1_epi32(0xFFFF)),
            );
            _mm256_storeu_si256(
                dst.add((v + i) * 16 + 8) as *mut _,
                _mm256_srli_epi32::<16>(x[i]),
            );
        }
    }
}

/// A bf16 line's two vectors of f32 (the halves' order is the probe's own).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load16(p: *const u16) -> (__m256, __m256) {
    let z = _mm256_setzero_si256();
    let x = _mm256_loadu_si256(p as *const _);
    (
        _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x)),
        _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x)),
    )
}

/// Two vectors rounded stochastically to a bf16 line, their bits at `b`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store16(p: *mut u16, x0: __m256, x1: __m256, b: *const u32) {
    let r0 = _mm256_add_epi32(_mm256_castps_si256(x0), _mm256_loadu_si256(b as *const _));
    let r1 = _mm256_add_epi32(
        _mm256_castps_si256(x1),
        _mm256_loadu_si256(b.add(8) as *const _),
    );
    let (r0, r1) = (_mm256_srli_epi32::<16>(r0), _mm256_srli_epi32::<16>(r1));
    _mm256_storeu_si256(p as *mut _, _mm256_packus_epi32(r0, r1));
}

/// One pair of chunks (16 elements) of the step from element `i`, its bits at `b` (`MODE` words
/// per element there, one for steps 0 and 1): 0 SGD-like, 1 Adagrad-like (the state a sum of
/// squares, the update divided by its root), 2 AdamW-like (`m` and `v` the moments).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn step16<const MODE: u8>(
    w: *mut f32,
    g: *const f32,
    [m, v]: [*mut u16; 2],
    b: *const u32,
    i: usize,
    mu: __m256,
    nlr: __m256,
) {
    let (m0, m1) = load16(m.add(i));
    let (g0, g1) = (_mm256_loadu_ps(g.add(i)), _mm256_loadu_ps(g.add(i + 8)));
    let words = if MODE == 2 { 2 } else { 1 };
    let b = b.add(i % BLOCK * words);
    let (u0, u1) = match MODE {
        0 => {
            let n0 = _mm256_fmadd_ps(mu, m0, g0);
            let n1 = _mm256_fmadd_ps(mu, m1, g1);
            store16(m.add(i), n0, n1, b);
            (n0, n1)
        }
        1 => {
            let n0 = _mm256_fmadd_ps(g0, g0, m0);
            let n1 = _mm256_fmadd_ps(g1, g1, m1);
            store16(m.add(i), n0, n1, b);
            let eps = _mm256_set1_ps(1e-10);
            (
                _mm256_div_ps(g0, _mm256_add_ps(_mm256_sqrt_ps(n0), eps)),
                _mm256_div_ps(g1, _mm256_add_ps(_mm256_sqrt_ps(n1), eps)),
            )
        }
        _ => {
            let (v0, v1) = load16(v.add(i));
            let (omb1, beta2, omb2) = (
                _mm256_set1_ps(0.1),
                _mm256_set1_ps(0.999),
                _mm256_set1_ps(1e-3),
            );
            let nm0 = _mm256_fmadd_ps(omb1, _mm256_sub_ps(g0, m0), m0);
            let nm1 = _mm256_fmadd_ps(omb1, _mm256_sub_ps(g1, m1), m1);
            let nv0 = _mm256_fmadd_ps(beta2, v0, _mm256_mul_ps(omb2, _mm256_mul_ps(g0, g0)));
            let nv1 = _mm256_fmadd_ps(beta2, v1, _mm256_mul_ps(omb2, _mm256_mul_ps(g1, g1)));
            store16(m.add(i), nm0, nm1, b);
            store16(v.add(i), nv0, nv1, b.add(16));
            let eps = _mm256_set1_ps(1e-8);
            (
                _mm256_div_ps(nm0, _mm256_add_ps(_mm256_sqrt_ps(nv0), eps)),
                _mm256_div_ps(nm1, _mm256_add_ps(_mm256_sqrt_ps(nv1), eps)),
            )
        }
    };
    _mm256_storeu_ps(
        w.add(i),
        _mm256_fmadd_ps(nlr, u0, _mm256_loadu_ps(w.add(i))),
    );
    _mm256_storeu_ps(
        w.add(i + 8),
        _mm256_fmadd_ps(nlr, u1, _mm256_loadu_ps(w.add(i + 8))),
    );
}

#[target_feature(enable = "avx2,fma,vaes,aes")]
unsafe fn run<const MODE: u8>(
    kind: u8,
    ks: &Keys,
    w: &mut [f32],
    g: &[f32],
    mv: [&mut [u16]; 2],
    bufs: &mut [[u32; 2 * BLOCK]; 2],
) {
    let (mu, nlr) = (_mm256_set1_ps(0.9), _mm256_set1_ps(-1e-3));
    let (wp, gp) = (w.as_mut_ptr(), g.as_ptr());
    let mv = mv.map(|x| x.as_mut_ptr());
    // Counter vectors per 16 elements.
    let per16 = if MODE == 2 { 2 } else { 1 };
    match kind {
        0 => {
            let b = bufs[0].as_ptr();
            let mut i = 0;
            while i < N {
                step16::<MODE>(wp, gp, mv, b, i, mu, nlr);
                i += 16;
            }
        }
        1 => {
            for blk in 0..N / BLOCK {
                fill(ks, blk as u64, bufs[0].as_mut_ptr(), BLOCK / 16 * per16);
                let b = bufs[0].as_ptr();
                let base = blk * BLOCK;
                let mut i = 0;
                while i < BLOCK {
                    step16::<MODE>(wp, gp, mv, b, base + i, mu, nlr);
                    i += 16;
                }
            }
        }
        _ => {
            fill(ks, 0, bufs[0].as_mut_ptr(), BLOCK / 16 * per16);
            let step = _mm256_set1_epi32(2);
            for blk in 0..N / BLOCK {
                let (cur, next) = if blk % 2 == 0 {
                    let (a, b) = bufs.split_at_mut(1);
                    (&a[0], &mut b[0])
                } else {
                    let (a, b) = bufs.split_at_mut(1);
                    (&b[0], &mut a[0])
                };
                let (b, nb) = (cur.as_ptr(), next.as_mut_ptr());
                let mut c = _mm256_add_epi32(
                    _mm256_set_epi32(13, 11, 7, 1, 13, 11, 7, 0),
                    _mm256_set1_epi32(((blk + 1) * 128 * per16) as i32),
                );
                let base = blk * BLOCK;
                let mut i = 0;
                while i < BLOCK {
                    for j in 0..per16 {
                        let (lo, hi) = rounds(ks, c);
                        c = _mm256_add_epi32(c, step);
                        _mm256_storeu_si256(nb.add(i * per16 + 16 * j) as *mut _, lo);
                        _mm256_storeu_si256(nb.add(i * per16 + 16 * j + 8) as *mut _, hi);
                    }
                    step16::<MODE>(wp, gp, mv, b, base + i, mu, nlr);
                    i += 16;
                }
            }
        }
    }
}

fn main() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
        || !is_x86_feature_detected!("vaes")
    {
        println!("no AVX2 with FMA and VAES: nothing to time");
        return;
    }
    let mut w = vec![1.0f32; N];
    let g = vec![0.5f32; N];
    let (mut m, mut v) = (vec![0x3f80u16; N], vec![0x3f80u16; N]);
    let mut bufs = Box::new([[0u32; 2 * BLOCK]; 2]);
    let ks = unsafe { keys() };
    for _round in 0..3 {
        for mode in 0..3u8 {
            println!(
                "{}",
                ["sgd-like", "adagrad-like", "adamw-like"][mode as usize]
            );
            for kind in [0u8, 1, 2] {
                let mut ts = vec![];
                for _ in 0..15 {
                    let t = Instant::now();
                    for _ in 0..50 {
                        let mv = [&mut m[..], &mut v[..]];
                        unsafe {
                            match mode {
                                0 => run::<0>(kind, &ks, &mut w, &g, mv, &mut bufs),
                                1 => run::<1>(kind, &ks, &mut w, &g, mv, &mut bufs),
                                _ => run::<2>(kind, &ks, &mut w, &g, mv, &mut bufs),
                            }
                        };
                    }
                    ts.push(t.elapsed().as_secs_f64() / 50.0 / N as f64 * 1e9);
                }
                ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
                let name = [
                    "bits from a buffer, no rounds",
                    "fill, then the block's loop",
                    "next block's rounds in the loop",
                ][kind as usize];
                println!(
                    "{name:34} {:.4} ns per element (median of 15; min {:.4})",
                    ts[7], ts[0]
                );
            }
        }
        println!();
    }
    std::hint::black_box((&w, &m, &v));
}
