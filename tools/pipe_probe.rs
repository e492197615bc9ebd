//! Which vector instructions share the AES rounds' pipes, how fast the divider is, and what the
//! AVX2 bit fill's loop costs when written by hand (docs/DESIGN.md, "Zen 5's vector pipes" and "AVX2's
//! optimizers run the fill and then the step"; "Tried and declined, in the loops" for the square root).
//!
//! - pipes: six independent 256-bit (and, where the CPU has AVX-512, 512-bit) instructions of a
//!   kind, alone and interleaved with six `vaesenc`; where the pair takes the sum of the two, they
//!   share the rounds' pipes.
//! - beside FMAs: eight independent 512-bit FMAs alone and beside eight of a kind (Zen 4's pipes,
//!   which run a 512-bit operation as two halves).
//! - divider: independent `vsqrtps` and `vdivps` on 256 and 512 bits.
//! - fill: one span of the AVX2 fill (eight counter vectors, 40 rounds, 128 elements) with the
//!   stores of each block layout, as `asm!`.
//! - sqrt: a square root from `vrsqrt14ps`, one Newton step and an exact correction, compared bit
//!   for bit with `vsqrtps` on every positive f32, and timed in an Adagrad-like loop at 64K.
//!
//! Cycles at the clock a chain of dependent multiplies measures. Sections the CPU lacks are
//! skipped.
//!
//! `rustc -O -C target-cpu=native --edition 2024 tools/pipe_probe.rs -o target/pipe_probe && target/pipe_probe`
#![allow(unsafe_op_in_unsafe_fn)]
use std::arch::asm;
use std::arch::x86_64::*;
use std::time::Instant;

const ITERS: u64 = 2_000_000;

/// Fastest of five runs of `ITERS` calls of `body`, in cycles per call at `ghz`.
fn cycles(ghz: f64, mut body: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..ITERS {
            body();
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    best * ghz * 1e9 / ITERS as f64
}

/// The clock, from a chain of dependent 64-bit `imul`s (three cycles each on every x86-64 core
/// the library targets). A chain of adds measured 6.85 GHz on an Emerald Rapids CPU, whose renamer
/// runs some adds of an immediate in no cycle at all.
fn clock_ghz() -> f64 {
    let n = 50_000_000u64;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let mut x = 1u64;
        for _ in 0..n {
            unsafe {
                asm!("imul {0}, {0}", "imul {0}, {0}", "imul {0}, {0}", "imul {0}, {0}",
                     "imul {0}, {0}", "imul {0}, {0}", "imul {0}, {0}", "imul {0}, {0}",
                     inout(reg) x, options(nomem, nostack));
            }
        }
        std::hint::black_box(x);
        best = best.min(t.elapsed().as_secs_f64());
    }
    (n * 8 * 3) as f64 / best / 1e9
}

/// Six lines of `$op` into registers `$r` of width `$w` (`ymm` or `zmm`), operands `$rest`.
macro_rules! six_of {
    ($w:literal, $op:literal, $rest:expr, $($r:literal),+) => {
        concat!($($op, " ", $w, $r, ", ", $rest, "\n"),+)
    };
}

/// Six of one instruction (`$op` into registers 6..11 of width `$w` with operands `$rest`), alone
/// and beside six `vaesenc` of that width (registers 0..5): cycles per loop of each.
macro_rules! six {
    ($ghz:expr, $w:literal, $op:literal, $rest:literal) => {{
        let alone = cycles($ghz, || unsafe {
            asm!(
                six_of!($w, $op, $rest, "6", "7", "8", "9", "10", "11"),
                clobber_abi("C")
            )
        });
        let mixed = cycles($ghz, || unsafe {
            asm!(
                six_of!(
                    $w,
                    "vaesenc",
                    concat!($w, "14, ", $w, "15"),
                    "0",
                    "1",
                    "2",
                    "3",
                    "4",
                    "5"
                ),
                six_of!($w, $op, $rest, "6", "7", "8", "9", "10", "11"),
                clobber_abi("C")
            )
        });
        println!("| {} | {:.1} | {:.1} |", $op, alone, mixed);
    }};
}

fn pipes(ghz: f64) {
    println!(
        "\n256-bit instructions beside the AES rounds (cycles per six; `vaesenc` alone in the first row)\n"
    );
    println!("| six of | alone | with six `vaesenc` |\n|---|---|---|");
    six!(ghz, "ymm", "vaesenc", "ymm14, ymm15");
    six!(ghz, "ymm", "vmulps", "ymm14, ymm15");
    six!(ghz, "ymm", "vfmadd213ps", "ymm14, ymm15");
    six!(ghz, "ymm", "vaddps", "ymm14, ymm15");
    six!(ghz, "ymm", "vpaddd", "ymm14, ymm15");
    six!(ghz, "ymm", "vpand", "ymm14, ymm15");
    six!(ghz, "ymm", "vpsrld", "ymm14, 16");
    six!(ghz, "ymm", "vpblendw", "ymm14, ymm15, 0xaa");
    six!(ghz, "ymm", "vshufps", "ymm14, ymm15, 0x88");
    six!(ghz, "ymm", "vpshufd", "ymm14, 0xb1");
    six!(ghz, "ymm", "vpunpckldq", "ymm14, ymm15");
    six!(ghz, "ymm", "vpshufb", "ymm14, ymm15");
    six!(ghz, "ymm", "vpackusdw", "ymm14, ymm15");
    six!(ghz, "ymm", "vpermq", "ymm14, 0xd8");
    six!(ghz, "ymm", "vpermpd", "ymm14, 0xd8");
    six!(ghz, "ymm", "vpermd", "ymm14, ymm15");
    six!(ghz, "ymm", "vperm2i128", "ymm14, ymm15, 0x20");
}

/// The 512-bit kinds of the AVX-512 loops and of `fill_bits`' element order (`vpermw`, or a
/// `vpshufb` and a `vpermq`) beside the 512-bit rounds.
#[target_feature(enable = "avx512f,avx512bw,vaes")]
unsafe fn pipes_512(ghz: f64) {
    println!("\n512-bit instructions beside the AES rounds (cycles per six)\n");
    println!("| six of | alone | with six `vaesenc` |\n|---|---|---|");
    six!(ghz, "zmm", "vaesenc", "zmm14, zmm15");
    six!(ghz, "zmm", "vfmadd213ps", "zmm14, zmm15");
    six!(ghz, "zmm", "vpaddd", "zmm14, zmm15");
    six!(ghz, "zmm", "vpandd", "zmm14, zmm15");
    six!(ghz, "zmm", "vpternlogd", "zmm14, zmm15, 0x96");
    six!(ghz, "zmm", "vpblendmw", "zmm14, zmm15");
    six!(ghz, "zmm", "vpsrld", "zmm14, 16");
    six!(ghz, "zmm", "vpshufb", "zmm14, zmm15");
    six!(ghz, "zmm", "vpermd", "zmm14, zmm15");
    six!(ghz, "zmm", "vpermq", "zmm14, zmm15");
    six!(ghz, "zmm", "vpermw", "zmm14, zmm15");
    six!(ghz, "zmm", "vpermt2w", "zmm14, zmm15");
}

/// Cycles per instruction of four independent `$op`s with sources `$srcs` (`{x}`: `$x`, in a
/// register of class `$class`).
macro_rules! four {
    ($ghz:expr, $op:literal, $srcs:literal, $class:ident, $x:expr) => {{
        let x = $x;
        cycles($ghz, || unsafe {
            asm!(concat!($op, " {a}, ", $srcs), concat!($op, " {b}, ", $srcs),
                 concat!($op, " {c}, ", $srcs), concat!($op, " {d}, ", $srcs),
                 a = out($class) _, b = out($class) _, c = out($class) _, d = out($class) _,
                 x = in($class) x)
        }) / 4.0
    }};
}

/// `vsqrtps` and `vdivps` on 512 bits.
#[target_feature(enable = "avx512f")]
unsafe fn divider_512(ghz: f64) -> [f64; 2] {
    let x = _mm512_set1_ps(2.0);
    [
        four!(ghz, "vsqrtps", "{x}", zmm_reg, x),
        four!(ghz, "vdivps", "{x}, {x}", zmm_reg, x),
    ]
}

fn divider(ghz: f64) {
    println!("\nThe divider (cycles per instruction, independent)\n");
    let x = unsafe { _mm256_set1_ps(2.0) };
    let ymm = [
        four!(ghz, "vsqrtps", "{x}", ymm_reg, x),
        four!(ghz, "vdivps", "{x}, {x}", ymm_reg, x),
    ];
    let zmm = is_x86_feature_detected!("avx512f").then(|| unsafe { divider_512(ghz) });
    println!("| | 256-bit | 512-bit |\n|---|---|---|");
    for (k, name) in ["vsqrtps", "vdivps"].iter().enumerate() {
        match zmm {
            Some(z) => println!("| {name} | {:.2} | {:.2} |", ymm[k], z[k]),
            None => println!("| {name} | {:.2} | no AVX-512 |", ymm[k]),
        }
    }
}

/// One AES round (`$op`: `vaesenc` or `vaesenclast`) of the eight counter vectors ymm0..ymm7,
/// the round key in ymm15.
macro_rules! round {
    ($op:literal) => {
        concat!(
            $op,
            " ymm0, ymm0, ymm15\n",
            $op,
            " ymm1, ymm1, ymm15\n",
            $op,
            " ymm2, ymm2, ymm15\n",
            $op,
            " ymm3, ymm3, ymm15\n",
            $op,
            " ymm4, ymm4, ymm15\n",
            $op,
            " ymm5, ymm5, ymm15\n",
            $op,
            " ymm6, ymm6, ymm15\n",
            $op,
            " ymm7, ymm7, ymm15"
        )
    };
}

/// One span of the fill: round 0 from memory constants, 40 rounds, then the stores `$stores`
/// (which read ymm0..ymm7 and may use ymm8..ymm10; ymm12 holds 0xFFFF per word pair, ymm13 zero).
macro_rules! span {
    ($ghz:expr, $p:expr, $name:expr, $($stores:expr),*) => {{
        let mask = _mm256_set1_epi32(0xFFFF);
        let zero = _mm256_setzero_si256();
        let c = cycles($ghz, || unsafe {
            asm!(
                "vpxor ymm0, ymm14, [{p} + 0x2000]", "vpxor ymm1, ymm14, [{p} + 0x2020]",
                "vpxor ymm2, ymm14, [{p} + 0x2040]", "vpxor ymm3, ymm14, [{p} + 0x2060]",
                "vpxor ymm4, ymm14, [{p} + 0x2080]", "vpxor ymm5, ymm14, [{p} + 0x20a0]",
                "vpxor ymm6, ymm14, [{p} + 0x20c0]", "vpxor ymm7, ymm14, [{p} + 0x20e0]",
                round!("vaesenc"), round!("vaesenc"), round!("vaesenc"), round!("vaesenc"),
                round!("vaesenclast"),
                $($stores,)*
                p = in(reg) $p, in("ymm12") mask, in("ymm13") zero,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _,
                out("ymm5") _, out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _,
                out("ymm10") _, out("ymm11") _, out("ymm14") _, out("ymm15") _)
        });
        println!("| {} | {:.1} |", $name, c);
    }};
}

/// The even/odd stores of output vectors `$a` and `$b` at byte offset `$at` (even words) and
/// `$at + 0x800` (odd), with `$permute` after each in-lane pick (empty: the counters crossed).
macro_rules! even_odd {
    ($a:literal, $b:literal, $at:literal, $permute:literal) => {
        concat!(
            "vshufps ymm8, ",
            $a,
            ", ",
            $b,
            ", 0x88\n",
            "vshufps ymm9, ",
            $a,
            ", ",
            $b,
            ", 0xdd\n",
            $permute,
            "\n",
            "vpblendw ymm10, ymm8, ymm13, 0xaa\n",
            "vmovdqu [{p} + ",
            $at,
            "], ymm10\n",
            "vpblendw ymm10, ymm9, ymm13, 0xaa\n",
            "vmovdqu [{p} + ",
            $at,
            " + 0x800], ymm10\n",
            "vpsrld ymm8, ymm8, 16\n",
            "vmovdqu [{p} + ",
            $at,
            " + 0x20], ymm8\n",
            "vpsrld ymm9, ymm9, 16\n",
            "vmovdqu [{p} + ",
            $at,
            " + 0x820], ymm9"
        )
    };
}

/// As [`even_odd`], the halves paired first by a `vperm2i128` each (low halves of `$a` and `$b`
/// in ymm10, high halves in ymm11), so that the in-lane picks leave the words in order.
macro_rules! even_odd_halves_first {
    ($a:literal, $b:literal, $at:literal) => {
        concat!(
            "vperm2i128 ymm10, ", $a, ", ", $b, ", 0x20\n",
            "vperm2i128 ymm11, ", $a, ", ", $b, ", 0x31\n",
            "vshufps ymm8, ymm10, ymm11, 0x88\n",
            "vshufps ymm9, ymm10, ymm11, 0xdd\n",
            "vpblendw ymm10, ymm8, ymm13, 0xaa\n",
            "vmovdqu [{p} + ", $at, "], ymm10\n",
            "vpblendw ymm10, ymm9, ymm13, 0xaa\n",
            "vmovdqu [{p} + ", $at, " + 0x800], ymm10\n",
            "vpsrld ymm8, ymm8, 16\n",
            "vmovdqu [{p} + ", $at, " + 0x20], ymm8\n",
            "vpsrld ymm9, ymm9, 16\n",
            "vmovdqu [{p} + ", $at, " + 0x820], ymm9"
        )
    };
}

/// The in-order stores of output vector `$v` at byte offset `$at`: low halves, then high.
macro_rules! in_order {
    ($v:literal, $at:literal) => {
        concat!(
            "vpand ymm8, ",
            $v,
            ", ymm12\n",
            "vmovdqu [{p} + ",
            $at,
            "], ymm8\n",
            "vpsrld ",
            $v,
            ", ",
            $v,
            ", 16\n",
            "vmovdqu [{p} + ",
            $at,
            " + 0x20], ",
            $v
        )
    };
}

unsafe fn fill(ghz: f64) {
    println!("\nOne span of the AVX2 fill: 128 elements, 40 rounds (cycles)\n");
    println!("| stores | cycles |\n|---|---|");
    let mut buf = vec![0u32; 4096];
    let p = buf.as_mut_ptr();
    span!(ghz, p, "none (the rounds alone)",);
    span!(
        ghz,
        p,
        "in order (AND, shift, two stores a vector)",
        in_order!("ymm0", "0x000"),
        in_order!("ymm1", "0x040"),
        in_order!("ymm2", "0x080"),
        in_order!("ymm3", "0x0c0"),
        in_order!("ymm4", "0x100"),
        in_order!("ymm5", "0x140"),
        in_order!("ymm6", "0x180"),
        in_order!("ymm7", "0x1c0")
    );
    span!(
        ghz,
        p,
        "even/odd, as built (`vshufps`, `vpermpd`)",
        even_odd!(
            "ymm0",
            "ymm1",
            "0x000",
            "vpermpd ymm8, ymm8, 0xd8\nvpermpd ymm9, ymm9, 0xd8"
        ),
        even_odd!(
            "ymm2",
            "ymm3",
            "0x040",
            "vpermpd ymm8, ymm8, 0xd8\nvpermpd ymm9, ymm9, 0xd8"
        ),
        even_odd!(
            "ymm4",
            "ymm5",
            "0x080",
            "vpermpd ymm8, ymm8, 0xd8\nvpermpd ymm9, ymm9, 0xd8"
        ),
        even_odd!(
            "ymm6",
            "ymm7",
            "0x0c0",
            "vpermpd ymm8, ymm8, 0xd8\nvpermpd ymm9, ymm9, 0xd8"
        )
    );
    span!(
        ghz,
        p,
        "even/odd, halves paired first (`vperm2i128`, `vshufps`)",
        even_odd_halves_first!("ymm0", "ymm1", "0x000"),
        even_odd_halves_first!("ymm2", "ymm3", "0x040"),
        even_odd_halves_first!("ymm4", "ymm5", "0x080"),
        even_odd_halves_first!("ymm6", "ymm7", "0x0c0")
    );
    span!(
        ghz,
        p,
        "even/odd, counters crossed (no `vpermpd`)",
        even_odd!("ymm0", "ymm1", "0x000", ""),
        even_odd!("ymm2", "ymm3", "0x040", ""),
        even_odd!("ymm4", "ymm5", "0x080", ""),
        even_odd!("ymm6", "ymm7", "0x0c0", "")
    );
    std::hint::black_box(&buf);
}

/// The square root of `x` from `vrsqrt14ps`, one Newton step and a correction to the nearest,
/// with the lanes it does not cover: special values, negative numbers, and magnitudes under 2^-96,
/// where x - s² would lose bits. +0 gives +0. The library's `Avx512::sqrt_off_divider` is this
/// sequence (with `vsqrtps` for a vector with an uncovered lane); this probe is compiled alone by
/// `rustc`, so it keeps its own copy.
#[target_feature(enable = "avx512f")]
unsafe fn sqrt_newton(x: __m512) -> (__m512, u16) {
    let b = _mm512_castps_si512(x);
    let low = _mm512_set1_epi32(((127 - 96) << 23) as i32);
    let span = _mm512_set1_epi32((0x7F80_0000u32 - ((127 - 96) << 23)) as i32);
    let zero = _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512());
    let covered = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(b, low), span) | zero;
    let y = _mm512_rsqrt14_ps(_mm512_max_ps(x, _mm512_set1_ps(1e-30)));
    let s0 = _mm512_mul_ps(x, y);
    let h = _mm512_mul_ps(_mm512_set1_ps(0.5), y);
    let s = _mm512_fmadd_ps(_mm512_fnmadd_ps(s0, s0, x), h, s0);
    // s is within an ulp u: x - s² is exact, and the nearest is s + u where x - s² > s·u, s - u
    // where x - s² <= -s·u (both sides multiples of u², the midpoints' u²/4 between them).
    let exp = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(0x7F80_0000));
    let u = _mm512_mul_ps(_mm512_castsi512_ps(exp), _mm512_set1_ps(1.0 / 8_388_608.0));
    let d = _mm512_fnmadd_ps(s, s, x);
    let up = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_fnmadd_ps(s, u, d), _mm512_setzero_ps());
    let down =
        _mm512_cmp_ps_mask::<_CMP_LE_OQ>(_mm512_fmadd_ps(s, u, d), _mm512_setzero_ps()) & !zero;
    let s = _mm512_mask_add_ps(s, up, s, u);
    (_mm512_mask_sub_ps(s, down, s, u), !covered)
}

#[target_feature(enable = "avx512f")]
unsafe fn sqrt_exhaustive() -> (u64, u64) {
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let (mut wrong, mut uncovered) = (0u64, 0u64);
    for b in (0..1u64 << 31).step_by(16) {
        let x = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_set1_epi32(b as i32), lanes));
        let (s, not) = sqrt_newton(x);
        let ne = _mm512_cmpneq_epi32_mask(
            _mm512_castps_si512(s),
            _mm512_castps_si512(_mm512_sqrt_ps(x)),
        );
        wrong += (ne & !not).count_ones() as u64;
        uncovered += not.count_ones() as u64;
    }
    (wrong, uncovered)
}

/// Adagrad's update on 64K f32 elements, each vector's square root by `vsqrtps` (`mode` 0), every
/// other one's by the sequence (1) or all (2); a vector pair with an uncovered lane takes
/// `vsqrtps`.
#[target_feature(enable = "avx512f")]
unsafe fn adagrad(mode: u32, w: &mut [f32], g: &[f32], s: &mut [f32]) {
    let (neg_lr, eps) = (_mm512_set1_ps(-0.01), _mm512_set1_ps(1e-10));
    for i in (0..w.len()).step_by(32) {
        let (mut sum, mut gv, mut d, mut fallback) = (
            [_mm512_setzero_ps(); 2],
            [_mm512_setzero_ps(); 2],
            [_mm512_setzero_ps(); 2],
            0u16,
        );
        for k in 0..2 {
            gv[k] = _mm512_loadu_ps(g.as_ptr().add(i + 16 * k));
            sum[k] = _mm512_fmadd_ps(gv[k], gv[k], _mm512_loadu_ps(s.as_ptr().add(i + 16 * k)));
            let root = if mode == 0 || (mode == 1 && k == 0) {
                _mm512_sqrt_ps(sum[k])
            } else {
                let (r, not) = sqrt_newton(sum[k]);
                fallback |= not;
                r
            };
            d[k] = _mm512_add_ps(root, eps);
        }
        if fallback != 0 {
            for k in 0..2 {
                d[k] = _mm512_add_ps(_mm512_sqrt_ps(sum[k]), eps);
            }
        }
        for k in 0..2 {
            _mm512_storeu_ps(s.as_mut_ptr().add(i + 16 * k), sum[k]);
            let wv = _mm512_fmadd_ps(
                neg_lr,
                _mm512_div_ps(gv[k], d[k]),
                _mm512_loadu_ps(w.as_ptr().add(i + 16 * k)),
            );
            _mm512_storeu_ps(w.as_mut_ptr().add(i + 16 * k), wv);
        }
    }
}

fn sqrt(ghz: f64) {
    println!("\nA square root kept off the divider (AVX-512)\n");
    let t = Instant::now();
    let (wrong, uncovered) = unsafe { sqrt_exhaustive() };
    println!(
        "every positive f32: {wrong} differ from vsqrtps ({uncovered} left to vsqrtps; {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let n = 1 << 16;
    let mut w = vec![1.0f32; n];
    let g: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) * 1e-3).collect();
    let mut s = vec![0.1f32; n];
    println!("\n| Adagrad, 64K, square roots | ns per element | cycles per 32 |\n|---|---|---|");
    for (mode, name) in [
        "vsqrtps",
        "every other vector by the sequence",
        "all by the sequence",
    ]
    .iter()
    .enumerate()
    {
        let mut best = f64::MAX;
        for _ in 0..300 {
            let t = Instant::now();
            unsafe { adagrad(mode as u32, &mut w, &g, &mut s) };
            best = best.min(t.elapsed().as_secs_f64());
        }
        let ns = best * 1e9 / n as f64;
        println!("| {name} | {ns:.4} | {:.1} |", ns * ghz * 32.0);
    }
    std::hint::black_box(&w);
}

/// Eight lines of `$op` into registers 8..15 of width `$w` (`ymm` or `zmm`), operands `$rest`.
macro_rules! eight_of {
    ($w:literal, $op:literal, $rest:literal) => {
        concat!(
            $op, " ", $w, "8, ", $rest, "\n", $op, " ", $w, "9, ", $rest, "\n",
            $op, " ", $w, "10, ", $rest, "\n", $op, " ", $w, "11, ", $rest, "\n",
            $op, " ", $w, "12, ", $rest, "\n", $op, " ", $w, "13, ", $rest, "\n",
            $op, " ", $w, "14, ", $rest, "\n", $op, " ", $w, "15, ", $rest, "\n"
        )
    };
}

/// Eight independent 512-bit FMAs (registers 0..7), alone and beside eight of `$op`: the cycles
/// the eight add per loop. Where they add nothing, the instruction runs off the FMAs' pipes.
macro_rules! eight_beside_fmas {
    ($ghz:expr, $fmas:expr, $op:literal, $rest:literal) => {
        eight_beside_fmas!($ghz, $fmas, "zmm", $op, $rest)
    };
    ($ghz:expr, $fmas:expr, $w:literal, $op:literal, $rest:literal) => {{
        let both = cycles($ghz, || unsafe {
            asm!(fmas_512!(), eight_of!($w, $op, $rest), clobber_abi("C"))
        });
        println!("| {} | {:.1} |", $op, both - $fmas);
    }};
}

/// Eight independent 512-bit FMAs into zmm registers 0..7.
macro_rules! fmas_512 {
    () => {
        concat!(
            "vfmadd213ps zmm0, zmm20, zmm21\n", "vfmadd213ps zmm1, zmm20, zmm21\n",
            "vfmadd213ps zmm2, zmm20, zmm21\n", "vfmadd213ps zmm3, zmm20, zmm21\n",
            "vfmadd213ps zmm4, zmm20, zmm21\n", "vfmadd213ps zmm5, zmm20, zmm21\n",
            "vfmadd213ps zmm6, zmm20, zmm21\n", "vfmadd213ps zmm7, zmm20, zmm21\n"
        )
    };
}

/// 512-bit instructions beside eight independent 512-bit FMAs (docs/DESIGN.md, "Zen 4's pipes"):
/// on Zen 4, which runs a 512-bit operation as two halves, which ones share the FMAs' pipes.
#[target_feature(enable = "avx512f,avx512bw,vaes")]
unsafe fn beside_fmas_512(ghz: f64) {
    let fmas = cycles(ghz, || unsafe { asm!(fmas_512!(), clobber_abi("C")) });
    println!("\n512-bit instructions beside eight 512-bit FMAs ({fmas:.1} cycles alone)\n");
    println!("| eight of | cycles added |\n|---|---|");
    eight_beside_fmas!(ghz, fmas, "vpaddd", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "vpandd", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "vpslld", "zmm22, 16");
    eight_beside_fmas!(ghz, fmas, "vpsllq", "zmm22, 33");
    eight_beside_fmas!(ghz, fmas, "vpmaxud", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "vpermw", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "vpermq", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "ymm", "vextractf64x4", "zmm22, 1");
    eight_beside_fmas!(ghz, fmas, "vcvtps2pd", "ymm22");
    eight_beside_fmas!(ghz, fmas, "vaesenc", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "vmulpd", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "vpmaxuq", "zmm22, zmm23");
    eight_beside_fmas!(ghz, fmas, "vpternlogd", "zmm22, zmm23, 0x96");
}

fn main() {
    let ghz = clock_ghz();
    println!("clock {ghz:.2} GHz");
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("vaes") {
        pipes(ghz);
        unsafe { fill(ghz) };
    } else {
        println!("no AVX2 with VAES: pipes and fill skipped");
    }
    if is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("vaes") {
        unsafe { pipes_512(ghz) };
        unsafe { beside_fmas_512(ghz) };
    } else {
        println!("no AVX-512 with VAES: the 512-bit pipes skipped");
    }
    if is_x86_feature_detected!("avx") {
        divider(ghz);
    }
    if is_x86_feature_detected!("avx512f") {
        sqrt(ghz);
    } else {
        println!("no AVX-512: the square root skipped");
    }
}
