//! The random-bit generators that were candidates for element bits, timed side by side in one
//! process (docs/DESIGN.md, "Random bits: ARS-5"): Philox4x32-10 and -7 (AVX2 with one block per
//! even lane, as halfstep ran it, and AVX-512), ARS-5 and ARS-7 with 128-bit AES-NI (ARS-5 also
//! with the values put in element order, as the library's `fill_bits` stores them without VAES,
//! three ways), and ARS-5 with VAES on 256 and 512 bits (on 512 also in element order, by one
//! permutation or by two shuffles). Each fills 16K 16-bit values
//! (in L1) 200 times, eight independent blocks or vectors in flight; median of 15. The bit layouts
//! differ from SPEC.md's: only the cost of the rounds is measured.
//!
//! `rustc -O --edition 2024 tools/rng_candidates.rs -o target/rng_candidates && target/rng_candidates`
#![allow(unsafe_op_in_unsafe_fn)]
use std::arch::x86_64::*;
use std::time::Instant;

const N: usize = 1 << 14;

#[target_feature(enable = "avx2")]
unsafe fn philox_avx2<const R: usize>(out: &mut [u16], seed: u64) {
    // 2 chains x 4 blocks in even lanes of ymm (as the library's AVX2 layout), 8 words -> 16 u16 per vector
    let m0 = _mm256_set1_epi64x(0xD2511F53);
    let m1 = _mm256_set1_epi64x(0xCD9E8D57);
    let lo32 = _mm256_set1_epi64x(0xFFFF_FFFF);
    let mut keys = [[_mm256_setzero_si256(); 2]; 10];
    let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
    for r in 0..R { keys[r] = [_mm256_set1_epi64x(k0 as i64), _mm256_set1_epi64x(k1 as i64)]; k0 = k0.wrapping_add(0x9E3779B9); k1 = k1.wrapping_add(0xBB67AE85); }
    let p = out.as_mut_ptr() as *mut __m256i;
    let mut blk = 0i64;
    for v in 0..(out.len() / 32) {
        let mut c = [[_mm256_setzero_si256(); 4]; 2];
        for ch in 0..2 {
            c[ch][0] = _mm256_add_epi64(_mm256_set1_epi64x(blk), _mm256_set_epi64x(3, 2, 1, 0));
            c[ch][1] = _mm256_set1_epi64x(7); c[ch][2] = _mm256_set1_epi64x(11); c[ch][3] = _mm256_set1_epi64x(13);
            blk += 4;
        }
        for r in 0..R {
            for ch in 0..2 {
                let x = c[ch];
                let p0 = _mm256_mul_epu32(x[0], m0);
                let p1 = _mm256_mul_epu32(x[2], m1);
                c[ch] = [
                    _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), x[1]), keys[r][0]),
                    _mm256_and_si256(p1, lo32),
                    _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), x[3]), keys[r][1]),
                    _mm256_and_si256(p0, lo32),
                ];
            }
        }
        // pack even lanes of 2 chains x 4 words -> 4 vectors of 8 words = 64 u16? store 2 ymm (32 u16)
        let a = _mm256_or_si256(c[0][0], _mm256_slli_epi64(c[0][1], 32));
        let b = _mm256_or_si256(c[0][2], _mm256_slli_epi64(c[0][3], 32));
        let d = _mm256_or_si256(c[1][0], _mm256_slli_epi64(c[1][1], 32));
        let e = _mm256_or_si256(c[1][2], _mm256_slli_epi64(c[1][3], 32));
        // 8 blocks x 4 words = 32 words = 64 u16: store 4 ymm
        _mm256_storeu_si256(p.add(4 * v % (out.len() / 16)), a);
        _mm256_storeu_si256(p.add((4 * v + 1) % (out.len() / 16)), b);
        _mm256_storeu_si256(p.add((4 * v + 2) % (out.len() / 16)), d);
        _mm256_storeu_si256(p.add((4 * v + 3) % (out.len() / 16)), e);
        if 4 * v + 4 >= out.len() / 16 { break; }
    }
}

#[target_feature(enable = "avx2,aes")]
unsafe fn ars_aesni<const R: usize>(out: &mut [u16], seed: u64) {
    let weyl = _mm_set_epi64x(0xBB67AE8584CAA73Bu64 as i64, 0x9E3779B97F4A7C15u64 as i64);
    let mut rk = [_mm_setzero_si128(); 11];
    rk[0] = _mm_set_epi64x(0, seed as i64);
    for i in 1..=R { rk[i] = _mm_add_epi64(rk[i - 1], weyl); }
    let p = out.as_mut_ptr() as *mut __m128i;
    let base = _mm_set_epi32(13, 11, 7, 0);
    const W: usize = 8;
    for v in (0..out.len() / 8).step_by(W) {
        let mut x = [_mm_setzero_si128(); W];
        for i in 0..W { x[i] = _mm_xor_si128(_mm_add_epi32(base, _mm_cvtsi32_si128((v + i) as i32)), rk[0]); }
        for r in 1..R { for i in 0..W { x[i] = _mm_aesenc_si128(x[i], rk[r]); } }
        for i in 0..W { x[i] = _mm_aesenclast_si128(x[i], rk[R]); _mm_storeu_si128(p.add(v + i), x[i]); }
    }
}

/// ARS-5 on 128-bit AES-NI with its values put in SPEC.md's element order, as `fill_bits` stores
/// them without VAES: per 32-element group of four blocks the words' low halves, then their high
/// halves. ORDER 1: the library's form, two blocks joined in a ymm, one `vpshufb` and one `vpermq`;
/// 2: per block a `vpshufb` and two 64-bit stores; 3: `vpand`/`vpsrld` and `vpackusdw` per two blocks.
#[target_feature(enable = "avx2,aes")]
unsafe fn ars_aesni_ordered<const ORDER: u8>(out: &mut [u16], seed: u64) {
    let weyl = _mm_set_epi64x(0xBB67AE8584CAA73Bu64 as i64, 0x9E3779B97F4A7C15u64 as i64);
    let mut rk = [_mm_setzero_si128(); 6];
    rk[0] = _mm_set_epi64x(0, seed as i64);
    for i in 1..6 { rk[i] = _mm_add_epi64(rk[i - 1], weyl); }
    let sh = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                              0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    let (mask, base, p) = (_mm_set1_epi32(0xFFFF), _mm_set_epi32(13, 11, 7, 0), out.as_mut_ptr());
    for g in (0..out.len() / 32).step_by(2) {
        let mut x = [_mm_setzero_si128(); 8];
        for i in 0..8 { x[i] = _mm_xor_si128(_mm_add_epi32(base, _mm_cvtsi32_si128((4 * g + i) as i32)), rk[0]); }
        for r in 1..5 { for i in 0..8 { x[i] = _mm_aesenc_si128(x[i], rk[r]); } }
        for i in 0..8 { x[i] = _mm_aesenclast_si128(x[i], rk[5]); }
        for (h, b) in x.chunks(4).enumerate() {
            let q = p.add(32 * (g + h));
            for k in 0..2 {
                let (a, c) = (b[2 * k], b[2 * k + 1]);
                match ORDER {
                    1 => {
                        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(_mm256_set_m128i(c, a), sh));
                        _mm_storeu_si128(q.add(8 * k).cast(), _mm256_castsi256_si128(w));
                        _mm_storeu_si128(q.add(16 + 8 * k).cast(), _mm256_extracti128_si256::<1>(w));
                    }
                    2 => for (j, v) in [a, c].into_iter().enumerate() {
                        let v = _mm_shuffle_epi8(v, _mm256_castsi256_si128(sh));
                        _mm_storel_epi64(q.add(8 * k + 4 * j).cast(), v);
                        _mm_storeh_pd(q.add(16 + 8 * k + 4 * j).cast(), _mm_castsi128_pd(v));
                    },
                    _ => {
                        _mm_storeu_si128(q.add(8 * k).cast(), _mm_packus_epi32(_mm_and_si128(a, mask), _mm_and_si128(c, mask)));
                        _mm_storeu_si128(q.add(16 + 8 * k).cast(), _mm_packus_epi32(_mm_srli_epi32::<16>(a), _mm_srli_epi32::<16>(c)));
                    }
                }
            }
        }
    }
}

#[target_feature(enable = "avx2,aes,vaes")]
unsafe fn ars_vaes256<const R: usize>(out: &mut [u16], seed: u64) {
    let weyl = _mm_set_epi64x(0xBB67AE8584CAA73Bu64 as i64, 0x9E3779B97F4A7C15u64 as i64);
    let mut rk = [_mm256_setzero_si256(); 11];
    let mut k = _mm_set_epi64x(0, seed as i64);
    rk[0] = _mm256_broadcastsi128_si256(k);
    for i in 1..=R { k = _mm_add_epi64(k, weyl); rk[i] = _mm256_broadcastsi128_si256(k); }
    let p = out.as_mut_ptr() as *mut __m256i;
    let base = _mm256_set_epi32(13, 11, 7, 1, 13, 11, 7, 0);
    const W: usize = 8;
    for v in (0..out.len() / 16).step_by(W) {
        let mut x = [_mm256_setzero_si256(); W];
        for i in 0..W { x[i] = _mm256_xor_si256(_mm256_add_epi32(base, _mm256_set1_epi32(2 * (v + i) as i32)), rk[0]); }
        for r in 1..R { for i in 0..W { x[i] = _mm256_aesenc_epi128(x[i], rk[r]); } }
        for i in 0..W { x[i] = _mm256_aesenclast_epi128(x[i], rk[R]); _mm256_storeu_si256(p.add(v + i), x[i]); }
    }
}

#[target_feature(enable = "avx512f,avx512bw,aes,vaes")]
unsafe fn ars_vaes512<const R: usize, const ORDER: u8>(out: &mut [u16], seed: u64) {
    let weyl = _mm_set_epi64x(0xBB67AE8584CAA73Bu64 as i64, 0x9E3779B97F4A7C15u64 as i64);
    let mut rk = [_mm512_setzero_si512(); 11];
    let mut k = _mm_set_epi64x(0, seed as i64);
    rk[0] = _mm512_broadcast_i32x4(k);
    for i in 1..=R { k = _mm_add_epi64(k, weyl); rk[i] = _mm512_broadcast_i32x4(k); }
    let p = out.as_mut_ptr() as *mut __m512i;
    let base = _mm512_set_epi32(13, 11, 7, 3, 13, 11, 7, 2, 13, 11, 7, 1, 13, 11, 7, 0);
    const W: usize = 8;
    // ORDER 1 and 2: SPEC.md §3.2's element order, as `fill_bits` stores the values: the low halves
    // of a vector's 16 words, then the high halves; by one `vpermw` per 32 roundings (1), or by a
    // `vpshufb` within each 128-bit lane and a `vpermq` of the lanes' 64-bit halves (2), which on Intel
    // CPUs leave the rounds' port to them (as `fill_bits` there).
    let order = _mm512_set_epi16(
        31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0,
    );
    let lanes = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    let halves = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    for v in (0..out.len() / 32).step_by(W) {
        let mut x = [_mm512_setzero_si512(); W];
        for i in 0..W { x[i] = _mm512_xor_si512(_mm512_add_epi32(base, _mm512_set1_epi32(4 * (v + i) as i32)), rk[0]); }
        for r in 1..R { for i in 0..W { x[i] = _mm512_aesenc_epi128(x[i], rk[r]); } }
        for i in 0..W {
            x[i] = _mm512_aesenclast_epi128(x[i], rk[R]);
            let y = match ORDER {
                1 => _mm512_permutexvar_epi16(order, x[i]),
                2 => {
                    // `asm!`: LLVM folds the two intrinsics back into the one `vpermw`.
                    let mut y = x[i];
                    std::arch::asm!("vpshufb {y}, {y}, {l}", "vpermq {y}, {h}, {y}", y = inout(zmm_reg) y,
                        l = in(zmm_reg) lanes, h = in(zmm_reg) halves, options(pure, nomem, nostack));
                    y
                }
                _ => x[i],
            };
            _mm512_storeu_si512(p.add(v + i) as *mut _, y);
        }
    }
}

#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn philox_avx512<const R: usize>(out: &mut [u16], seed: u64) {
    let m0 = _mm512_set1_epi64(0xD2511F53);
    let m1 = _mm512_set1_epi64(0xCD9E8D57);
    let lo32 = _mm512_set1_epi64(0xFFFF_FFFF);
    let mut keys = [[_mm512_setzero_si512(); 2]; 10];
    let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
    for r in 0..R { keys[r] = [_mm512_set1_epi64(k0 as i64), _mm512_set1_epi64(k1 as i64)]; k0 = k0.wrapping_add(0x9E3779B9); k1 = k1.wrapping_add(0xBB67AE85); }
    let p = out.as_mut_ptr() as *mut __m512i;
    let nv = out.len() / 32;
    let mut blk = 0i64;
    let mut v = 0;
    while v + 8 <= nv {
        let mut c = [[_mm512_setzero_si512(); 4]; 4];
        for ch in 0..4 {
            c[ch][0] = _mm512_add_epi64(_mm512_set1_epi64(blk), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
            c[ch][1] = _mm512_set1_epi64(7); c[ch][2] = _mm512_set1_epi64(11); c[ch][3] = _mm512_set1_epi64(13);
            blk += 8;
        }
        for r in 0..R {
            for ch in 0..4 {
                let x = c[ch];
                let p0 = _mm512_mul_epu32(x[0], m0);
                let p1 = _mm512_mul_epu32(x[2], m1);
                c[ch] = [
                    _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p1, 32), x[1]), keys[r][0]),
                    _mm512_and_si512(p1, lo32),
                    _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p0, 32), x[3]), keys[r][1]),
                    _mm512_and_si512(p0, lo32),
                ];
            }
        }
        // 32 blocks x 4 words = 128 words = 256 u16 = 8 zmm
        for ch in 0..4 {
            _mm512_storeu_si512(p.add(v) as *mut _, _mm512_or_si512(c[ch][0], _mm512_slli_epi64(c[ch][1], 32)));
            _mm512_storeu_si512(p.add(v + 1) as *mut _, _mm512_or_si512(c[ch][2], _mm512_slli_epi64(c[ch][3], 32)));
            v += 2;
        }
    }
}

/// Median ns per 16-bit value of `f` over 15 batches.
fn bench(name: &str, f: &dyn Fn(&mut [u16], u64)) {
    let mut buf = vec![0u16; N];
    let mut ts = vec![];
    for rep in 0..15 {
        let t = Instant::now();
        for i in 0..200 { f(&mut buf, i + rep); }
        ts.push(t.elapsed().as_secs_f64() / (200.0 * N as f64) * 1e9);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{name:28} {:.4} ns per 16 bits (median of 15; min {:.4})  checksum {}", ts[7], ts[0], buf.iter().map(|&x| x as u64).sum::<u64>());
}

fn main() {
    let avx512 = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("vaes");
    for _ in 0..2 {
        bench("philox4x32-10 avx2", &|b, s| unsafe { philox_avx2::<10>(b, s) });
        bench("philox4x32-7 avx2", &|b, s| unsafe { philox_avx2::<7>(b, s) });
        bench("ars-5 aes-ni xmm", &|b, s| unsafe { ars_aesni::<5>(b, s) });
        bench("ars-7 aes-ni xmm", &|b, s| unsafe { ars_aesni::<7>(b, s) });
        bench("ars-5 aes-ni, element order", &|b, s| unsafe { ars_aesni_ordered::<1>(b, s) });
        bench("ars-5 aes-ni, order by blocks", &|b, s| unsafe { ars_aesni_ordered::<2>(b, s) });
        bench("ars-5 aes-ni, order by packs", &|b, s| unsafe { ars_aesni_ordered::<3>(b, s) });
        let orders: Vec<Vec<u16>> = (1..=3u8)
            .map(|o| {
                let mut v = vec![0u16; 4096];
                unsafe { [ars_aesni_ordered::<1>, ars_aesni_ordered::<2>, ars_aesni_ordered::<3>][o as usize - 1](&mut v, 7) };
                v
            })
            .collect();
        assert!(orders[0] == orders[1] && orders[0] == orders[2], "the 128-bit element orders differ");
        if is_x86_feature_detected!("vaes") {
            bench("ars-5 vaes ymm", &|b, s| unsafe { ars_vaes256::<5>(b, s) });
        }
        if avx512 {
            bench("philox4x32-10 avx512", &|b, s| unsafe { philox_avx512::<10>(b, s) });
            bench("philox4x32-7 avx512", &|b, s| unsafe { philox_avx512::<7>(b, s) });
            bench("ars-5 vaes zmm", &|b, s| unsafe { ars_vaes512::<5, 0>(b, s) });
            bench("ars-5 vaes zmm, element order", &|b, s| unsafe { ars_vaes512::<5, 1>(b, s) });
            bench("ars-5 vaes zmm, order by 2 shuffles", &|b, s| unsafe { ars_vaes512::<5, 2>(b, s) });
            bench("ars-7 vaes zmm", &|b, s| unsafe { ars_vaes512::<7, 0>(b, s) });
            let (mut a, mut b) = (vec![0u16; 4096], vec![0u16; 4096]);
            unsafe { (ars_vaes512::<5, 1>(&mut a, 7), ars_vaes512::<5, 2>(&mut b, 7)) };
            assert!(a == b, "the two element orders differ");
        }
    }
}
