//! Quantizers (SPEC.md §4.5–§4.7): conversion vectors, SR unbiasedness by enumerating every random
//! value in each branch (normal, subnormal, below the smallest subnormal), seeds, a 1000 x 1000
//! statistical check of NVFP4 and MXFP4, round-trip error bounds, packing, and errors.

mod common;
use common::{hex, log_uniform, pow2, rng};
use halfstep::quant::{self, Fp8};
use halfstep::reference::quant::{self as q, E2M1, E4M3, E5M2, Format};
use halfstep::reference::round::Mode;
use halfstep::{Error, Rounding, StepContext, TensorStream};
use rand_core::Rng;

const VECTORS: &str = include_str!("data/conversion_vectors.csv");

#[test]
fn conversion_vectors_agree_except_the_documented_policies() {
    let rows = common::data_rows(VECTORS, ',');
    let header = &rows[0];
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (c4, c5, c2, c8) = (col("e4m3fn"), col("e5m2"), col("e2m1fn"), col("e8m0fnu"));
    let mut saturate4 = 0;
    let mut saturate5 = 0;
    let mut e2m1_nan = 0;
    let mut nan_sign = 0;
    let mut checked = 0;
    for r in &rows[1..] {
        let x = f32::from_bits(hex(&r[0]));
        let is_nan = x.is_nan();
        let (ml4, ml5, ml2, ml8) = (
            hex(&r[c4]) as u8,
            hex(&r[c5]) as u8,
            hex(&r[c2]) as u8,
            hex(&r[c8]) as u8,
        );
        let (o4, o5, o2, o8) = (
            q::f32_to(E4M3, x, Mode::NearestEven),
            q::f32_to(E5M2, x, Mode::NearestEven),
            q::f32_to(E2M1, x, Mode::NearestEven),
            q::f32_to_e8m0(x),
        );
        checked += 1;
        // e4m3fn: ml_dtypes turns overflow and infinity into NaN; we saturate to +-448.
        if o4 != ml4 {
            if !is_nan && ml4 & 0x7F == 0x7F && o4 & 0x7F == 0x7E && ml4 & 0x80 == o4 & 0x80 {
                saturate4 += 1;
            } else if is_nan && ml4 & 0x7F == 0x7F && o4 & 0x7F == 0x7F {
                nan_sign += 1;
            } else {
                panic!(
                    "e4m3 {x:e} ({:08x}): ours {o4:02x}, ml_dtypes {ml4:02x}",
                    x.to_bits()
                );
            }
        }
        // e5m2: ml_dtypes turns finite overflow into infinity; we saturate to +-57344.
        if o5 != ml5 {
            if x.is_finite() && ml5 & 0x7F == 0x7C && o5 & 0x7F == 0x7B && ml5 & 0x80 == o5 & 0x80 {
                saturate5 += 1;
            } else if is_nan && ml5 & 0x7F == 0x7E && o5 & 0x7F == 0x7E {
                nan_sign += 1;
            } else {
                panic!(
                    "e5m2 {x:e} ({:08x}): ours {o5:02x}, ml_dtypes {ml5:02x}",
                    x.to_bits()
                );
            }
        }
        // e2m1 has no NaN: ml_dtypes gives 0x8 (-0), we give +0.
        if o2 != ml2 {
            assert!(
                is_nan && ml2 == 0x8 && o2 == 0,
                "e2m1 {x:e}: ours {o2:x}, ml_dtypes {ml2:x}"
            );
            e2m1_nan += 1;
        }
        assert_eq!(o8, ml8, "e8m0 {x:e} ({:08x})", x.to_bits());
    }
    println!(
        "{checked} rows: e4m3 saturation {saturate4}, e5m2 saturation {saturate5}, NaN sign kept {nan_sign}, \
         e2m1 NaN -> +0 {e2m1_nan}; every other code identical"
    );
    assert!(checked > 600 && saturate4 > 0 && saturate5 > 0 && e2m1_nan > 0);
}

/// Exact decoded value of `x` rounded up/down, and how many of the 65536 random values round it up.
fn enumerate(fmt: Format, x: f32) -> (u32, f64) {
    let mut ups = 0u32;
    let mut sum = 0f64;
    let down = q::to_f32(fmt, q::f32_to(fmt, x, Mode::TowardZero)).abs();
    for r in 0..=u16::MAX {
        let v = q::to_f32(fmt, q::f32_to(fmt, x, Mode::Stochastic(r)));
        if v.abs() > down {
            ups += 1;
        }
        sum += f64::from(v);
    }
    (ups, sum / 65536.0)
}

/// The quantum (ulp) of `fmt` at magnitude `m` (m > 0, below saturation).
fn quantum(fmt: Format, m: f64) -> f64 {
    let e = m.log2().floor().max(f64::from(fmt.emin));
    (e - f64::from(fmt.man)).exp2()
}

#[test]
fn stochastic_rounding_is_unbiased_in_every_branch_by_enumeration() {
    let mut r = rng(7);
    for (name, fmt, max) in [
        ("e4m3", E4M3, 448.0f64),
        ("e5m2", E5M2, 57344.0),
        ("e2m1", E2M1, 6.0),
    ] {
        // Inputs built as (k + j / 2^16) quanta: at most 16 bits below the quantum, so the count of
        // round-ups is exactly j and the mean is exactly x.
        let min_sub = f64::from(fmt.emin - fmt.man as i32).exp2();
        let mut cases = 0;
        for branch in ["normal", "subnormal", "below smallest subnormal"] {
            for _ in 0..40 {
                let (k, q) = match branch {
                    "normal" => {
                        let range = (max.log2().floor() as i32 - fmt.emin) as u32;
                        let e = fmt.emin + (r.next_u32() % range) as i32;
                        let q = f64::from(e - fmt.man as i32).exp2();
                        let k = (1u64 << fmt.man) + u64::from(r.next_u32()) % (1 << fmt.man);
                        (k, q)
                    }
                    "subnormal" => (u64::from(r.next_u32()) % (1 << fmt.man), min_sub),
                    _ => (0, min_sub),
                };
                let j = u64::from(r.next_u32() % 65536);
                let m = (k as f64 + j as f64 / 65536.0) * q;
                if m == 0.0 || m + q > max {
                    continue; // zero, or rounding up would saturate
                }
                let x = if r.next_u32() & 1 == 0 { m } else { -m } as f32;
                assert_eq!(f64::from(x).abs(), m, "{name}: test input not exact");
                assert_eq!(quantum(fmt, m), q, "{name} {branch}: quantum");
                let (ups, mean) = enumerate(fmt, x);
                assert_eq!(u64::from(ups), j, "{name} {branch} x = {x:e}");
                assert_eq!(mean, f64::from(x), "{name} {branch} x = {x:e}: mean");
                cases += 1;
            }
        }
        assert!(cases >= 80, "{name}: only {cases} cases");
    }
}

#[test]
fn stochastic_rounding_depends_on_the_seed_and_nearest_does_not() {
    let src: Vec<f32> = (0..4096).map(|i| 1.0 + i as f32 * 1e-4).collect();
    let run = |seed, rounding| {
        let mut out = vec![0u8; src.len()];
        quant::f32_to_fp8(
            &src,
            &mut out,
            Fp8::E4M3,
            rounding,
            &StepContext::new(seed, 1),
            &TensorStream::new(0),
        )
        .unwrap();
        out
    };
    assert_ne!(run(1, Rounding::Stochastic), run(2, Rounding::Stochastic));
    assert_eq!(run(1, Rounding::Stochastic), run(1, Rounding::Stochastic));
    assert_eq!(run(1, Rounding::NearestEven), run(2, Rounding::NearestEven));
}

/// Quantizes and dequantizes `x` with `format` ("nvfp4" or "mxfp4") and returns the values, and the
/// divisor (block scale) of each element.
fn round_trip(
    format: &str,
    x: &[f32],
    pts: f32,
    rounding: Rounding,
    step: u32,
) -> (Vec<f32>, Vec<f32>) {
    let n = x.len();
    let mut packed = vec![0u8; n.div_ceil(2)];
    let ctx = StepContext::new(99, step);
    let s = TensorStream::new(3);
    let mut out = vec![0f32; n];
    let divisors: Vec<f32> = if format == "nvfp4" {
        let mut scales = vec![0u8; n.div_ceil(16)];
        quant::quantize_nvfp4(x, pts, &mut packed, &mut scales, rounding, &ctx, &s).unwrap();
        quant::dequantize_nvfp4(&packed, &scales, pts, &mut out).unwrap();
        (0..n)
            .map(|i| pts * q::to_f32(E4M3, scales[i / 16]))
            .collect()
    } else {
        let mut scales = vec![0u8; n.div_ceil(32)];
        quant::quantize_mxfp4(x, &mut packed, &mut scales, rounding, &ctx, &s).unwrap();
        quant::dequantize_mxfp4(&packed, &scales, &mut out).unwrap();
        (0..n).map(|i| q::e8m0_to_f32(scales[i / 32])).collect()
    };
    (out, divisors)
}

#[test]
fn repeated_stochastic_quantization_of_a_million_values_averages_to_the_input() {
    const N: usize = 1000 * 1000;
    const REPS: u32 = 24;
    let mut r = rng(11);
    let x: Vec<f32> = (0..N).map(|_| log_uniform(&mut r, -8, 4)).collect();
    for format in ["nvfp4", "mxfp4"] {
        let pts = quant::nvfp4_tensor_scale(&x).unwrap();
        let mut sum = vec![0f64; N];
        let mut divisors = Vec::new();
        for step in 1..=REPS {
            let (v, d) = round_trip(format, &x, pts, Rounding::Stochastic, step);
            sum.iter_mut()
                .zip(&v)
                .for_each(|(s, &v)| *s += f64::from(v));
            divisors = d;
        }
        // Elements whose scaled value exceeds 6 saturate (a deterministic, documented bias): skip.
        let (mut bias, mut spread, mut count) = (0f64, 0f64, 0usize);
        for i in 0..N {
            let v = f64::from(x[i]) / f64::from(divisors[i]);
            if v.abs() > 6.0 {
                continue;
            }
            let quantum = if v.abs() < 1.0 {
                0.5
            } else {
                quantum(E2M1, v.abs())
            };
            let err =
                (sum[i] / f64::from(REPS) - f64::from(x[i])) / (quantum * f64::from(divisors[i]));
            bias += err;
            spread += err.abs();
            count += 1;
        }
        let (bias, spread) = (bias / count as f64, spread / count as f64);
        println!(
            "{format}: {count} elements, mean error {bias:.2e} quanta, mean |error| {spread:.3} quanta"
        );
        // Each average of 24 draws has standard deviation <= 0.5 / sqrt(24) ~ 0.1 quantum; over
        // ~1M elements the mean error is ~1e-4 quantum if unbiased.
        assert!(count > N / 2);
        assert!(bias.abs() < 2e-3, "{format}: mean error {bias} quanta");
        assert!(spread < 0.12, "{format}: mean |error| {spread} quanta");
        // Nearest-even on the same data is deterministic and its error does not average out.
        let (v, _) = round_trip(format, &x, pts, Rounding::NearestEven, 1);
        let rne: f64 = (0..N)
            .filter(|&i| (f64::from(x[i]) / f64::from(divisors[i])).abs() <= 6.0)
            .map(|i| (f64::from(v[i]) - f64::from(x[i])).abs() / f64::from(divisors[i]))
            .sum::<f64>()
            / count as f64;
        assert!(rne > 0.1, "{format}: nearest-even error {rne}");
    }
}

#[test]
fn nearest_round_trips_are_within_half_a_quantum() {
    let mut r = rng(5);
    // fp8: half an ulp below saturation; saturated values are clamped to the largest finite one.
    for (fmt, f, max) in [(E4M3, Fp8::E4M3, 448.0f32), (E5M2, Fp8::E5M2, 57344.0)] {
        let x: Vec<f32> = (0..100_000)
            .map(|_| log_uniform(&mut r, fmt.emin - 10, max.log2() as i32 + 2))
            .collect();
        let mut c = vec![0u8; x.len()];
        quant::f32_to_fp8(
            &x,
            &mut c,
            f,
            Rounding::NearestEven,
            &StepContext::new(1, 1),
            &TensorStream::new(0),
        )
        .unwrap();
        let mut y = vec![0f32; x.len()];
        quant::fp8_to_f32(&c, &mut y, f).unwrap();
        for (&x, &y) in x.iter().zip(&y) {
            let m = f64::from(x.abs());
            if m > f64::from(max) {
                assert_eq!(y.abs(), max, "{x:e} saturates");
            } else {
                let bound = quantum(fmt, m.max(pow2(fmt.emin) as f64)) / 2.0;
                assert!(
                    (f64::from(y) - f64::from(x)).abs() <= bound,
                    "{x:e} -> {y:e}"
                );
            }
        }
    }
    // Blocks: within half an E2M1 quantum of the scaled value, times the divisor; above 6 the
    // element saturates at 6 (NVFP4: by at most the E4M3 rounding of the scale; MXFP4: below 8).
    let x: Vec<f32> = (0..100_000).map(|_| log_uniform(&mut r, -20, 10)).collect();
    for format in ["nvfp4", "mxfp4"] {
        let pts = quant::nvfp4_tensor_scale(&x).unwrap();
        let (y, d) = round_trip(format, &x, pts, Rounding::NearestEven, 1);
        for i in 0..x.len() {
            let v = f64::from(x[i]) / f64::from(d[i]);
            let got = f64::from(y[i]) / f64::from(d[i]);
            if v.abs() > 6.0 {
                // (NVFP4 dequantizes as (e * s) * pts, one rounding away from e * divisor.)
                assert!(
                    (got.abs() - 6.0).abs() <= 6e-6,
                    "{format}: {v} saturates to {got}"
                );
                assert!(
                    v.abs() < if format == "nvfp4" { 6.0 * 1.07 } else { 8.0 },
                    "{format}: {v}"
                );
            } else {
                let bound = if v.abs() < 1.0 {
                    0.25
                } else {
                    quantum(E2M1, v.abs()) / 2.0
                };
                assert!(
                    (got - v).abs() <= bound * (1.0 + 1e-6),
                    "{format}: {v} -> {got}"
                );
            }
        }
    }
}

#[test]
fn blocks_pack_low_nibble_first_and_keep_non_finite_blocks_apart() {
    // MXFP4, one block: amax 6 -> scale 2^(2 - 2) = 1, so the codes are the values' own.
    let mut x = vec![0f32; 32];
    x[0] = 0.5; // code 1
    x[1] = 6.0; // code 7
    x[2] = -1.0; // code 0xA
    let (mut packed, mut scales) = (vec![0u8; 16], vec![0u8; 1]);
    let ctx = StepContext::new(1, 1);
    quant::quantize_mxfp4(
        &x,
        &mut packed,
        &mut scales,
        Rounding::NearestEven,
        &ctx,
        &TensorStream::new(0),
    )
    .unwrap();
    assert_eq!(scales[0], 127);
    assert_eq!(packed[0], 0x71);
    assert_eq!(packed[1] & 0xF, 0xA);
    // A NaN in the second block: its scale is NaN, its elements decode to NaN, the first block is
    // untouched by it; an odd count leaves the last high nibble 0.
    let mut y: Vec<f32> = (0..33).map(|i| i as f32 * 0.1).collect();
    y[20] = f32::NAN;
    let (mut packed, mut scales) = (vec![0xFFu8; 17], vec![0u8; 3]);
    quant::quantize_nvfp4(
        &y,
        1.0 / 64.0,
        &mut packed,
        &mut scales,
        Rounding::NearestEven,
        &ctx,
        &TensorStream::new(0),
    )
    .unwrap();
    assert_eq!((scales[1], packed[16] >> 4), (0x7F, 0));
    let mut out = vec![0f32; 33];
    quant::dequantize_nvfp4(&packed, &scales, 1.0 / 64.0, &mut out).unwrap();
    assert!(out[16..32].iter().all(|v| v.is_nan()));
    assert!(out[..16].iter().chain(&out[32..]).all(|v| v.is_finite()));
}

#[test]
fn bad_arguments_are_refused_before_any_write() {
    let x = vec![1.0f32; 40];
    let ctx = StepContext::new(1, 1);
    let s = TensorStream::new(0);
    let (mut packed, mut scales) = (vec![7u8; 20], vec![7u8; 3]);
    let err = quant::quantize_nvfp4(
        &x,
        1.0,
        &mut packed[..19],
        &mut scales,
        Rounding::Stochastic,
        &ctx,
        &s,
    );
    assert!(matches!(
        err,
        Err(Error::LengthMismatch {
            buffer: "packed",
            ..
        })
    ));
    let err = quant::quantize_nvfp4(
        &x,
        0.0,
        &mut packed,
        &mut scales,
        Rounding::Stochastic,
        &ctx,
        &s,
    );
    assert!(matches!(
        err,
        Err(Error::InvalidHyperparameter {
            name: "tensor_scale",
            ..
        })
    ));
    let err = quant::quantize_mxfp4(
        &x,
        &mut packed,
        &mut scales[..1],
        Rounding::Stochastic,
        &ctx,
        &s,
    );
    assert!(matches!(
        err,
        Err(Error::LengthMismatch {
            buffer: "scales",
            ..
        })
    ));
    let far = TensorStream {
        id: 0,
        index_base: (1 << 51) - 10,
    };
    let err = quant::quantize_mxfp4(
        &x,
        &mut packed,
        &mut scales[..2],
        Rounding::Stochastic,
        &ctx,
        &far,
    );
    assert!(matches!(err, Err(Error::IndexOutOfRange { .. })));
    assert!(packed.iter().chain(&scales).all(|&b| b == 7));
    assert!(quant::nvfp4_tensor_scale(&[1.0, f32::INFINITY]).is_err());
    assert_eq!(quant::nvfp4_tensor_scale(&[0.0, -0.0]).unwrap(), 1.0);
}

/// SPEC.md §8: every conversion and quantizer refuses an empty buffer (`Error::Empty`), on every
/// backend, before writing.
#[test]
fn empty_buffers_are_refused_by_every_conversion() {
    use halfstep::{Purpose, bf16, f16};
    let ctx = StepContext::new(1, 1);
    let s = TensorStream::new(0);
    let empty = |r: halfstep::Result<()>| matches!(r, Err(Error::Empty));
    for e in common::available_engines("quant", true) {
        let (mut f, mut b, mut h) = ([0f32; 0], [bf16::ZERO; 0], [f16::ZERO; 0]);
        let (mut u16s, mut u8s) = ([0u16; 0], [0u8; 0]);
        let ok = [
            empty(e.f32_to_bf16(&[], &mut b, Rounding::NearestEven, &ctx, &s)),
            empty(e.f32_to_f16(&[], &mut h, Rounding::Stochastic, &ctx, &s)),
            empty(e.bf16_to_f32(&[], &mut f)),
            empty(e.f16_to_f32(&[], &mut f)),
            empty(e.split(&[], &mut b, &mut u16s)),
            empty(e.combine(&[], &[], &mut f)),
            empty(e.fill_element_bits(&ctx, &s, Purpose::Weights, &mut u16s)),
            empty(e.f32_to_fp8(&[], &mut u8s, Fp8::E4M3, Rounding::Stochastic, &ctx, &s)),
            empty(e.fp8_to_f32(&[], &mut f, Fp8::E5M2)),
            matches!(e.nvfp4_tensor_scale(&[]), Err(Error::Empty)),
            empty(e.quantize_nvfp4(&[], 1.0, &mut [], &mut [], Rounding::Stochastic, &ctx, &s)),
            empty(e.dequantize_nvfp4(&[], &[], 1.0, &mut f)),
            empty(e.quantize_mxfp4(&[], &mut [], &mut [], Rounding::Stochastic, &ctx, &s)),
            empty(e.dequantize_mxfp4(&[], &[], &mut f)),
            empty(quant::f32_to_e8m0(&[], &mut [])),
            empty(quant::e8m0_to_f32(&[], &mut f)),
        ];
        let refused: Vec<usize> = (0..ok.len()).filter(|&i| !ok[i]).collect();
        assert!(
            refused.is_empty(),
            "{}: calls {refused:?} accepted an empty buffer",
            e.backend()
        );
    }
}

/// SPEC.md §4.6: f32 -> E8M0 rounds to the nearest power of two, ties up, in every binade; for
/// x in (2^-127, 1.5 * 2^-127) that is code 0 where ml_dtypes gives 1.
#[test]
fn e8m0_rounds_to_the_nearest_power_of_two_in_every_binade() {
    let cases = [
        (0x0040_0000, 0x00), // 2^-127
        (0x0040_0001, 0x00), // just above 2^-127: ml_dtypes 0x01
        (0x0041_5e39, 0x00), // ml_dtypes 0x01
        (0x005F_FFFF, 0x00), // just below 1.5 * 2^-127: ml_dtypes 0x01
        (0x0060_0000, 0x01), // 1.5 * 2^-127: a tie, up
        (0x0000_0001, 0x00), // 2^-149: clamped to the least code
        (0x0080_0000, 0x01), // 2^-126
        (0x00BF_FFFF, 0x01),
        (0x00C0_0000, 0x02), // 1.5 * 2^-126: up
        (0x3F80_0000, 0x7F), // 1
        (0x3FC0_0000, 0x80), // 1.5 -> 2
        (0x7F00_0000, 0xFE), // 2^127
        (0x7F40_0000, 0xFF), // 1.5 * 2^127 rounds to 2^128: NaN
        (0x0000_0000, 0xFF), // zero: no code
        (0xBF80_0000, 0xFF), // negative
        (0x7F80_0000, 0xFF), // infinity
        (0x7FC0_0000, 0xFF), // NaN
    ];
    let xs: Vec<f32> = cases.iter().map(|&(b, _)| f32::from_bits(b)).collect();
    let mut codes = vec![0u8; xs.len()];
    quant::f32_to_e8m0(&xs, &mut codes).unwrap();
    for ((b, want), got) in cases.iter().zip(&codes) {
        assert_eq!(*got, *want, "f32 {b:08x} -> E8M0");
    }
    let mut back = vec![0f32; 256];
    quant::e8m0_to_f32(&(0..=255u8).collect::<Vec<_>>(), &mut back).unwrap();
    assert_eq!(back[0].to_bits(), 0x0040_0000);
    assert_eq!(back[127], 1.0);
    assert_eq!(back[254].to_bits(), 0x7F00_0000);
    assert_eq!(back[255].to_bits(), 0x7FC0_0000);
}

/// SPEC.md §4.7: the NVFP4 tensor scale is at least 2^-143, a scale the quantizer accepts, and
/// every code of a NaN-scale block decodes to the scale's NaN, `sign | 0x7FC00000` (0x7FC00000
/// for the 0x7F the quantizer writes); fp8 NaN codes decode to `sign | 0x7FC00000`. On every
/// backend.
#[test]
fn nvfp4_scales_and_decoded_nans_are_as_specified() {
    let ctx = StepContext::new(1, 1);
    let s = TensorStream::new(0);
    for e in common::available_engines("quant", true) {
        let b = e.backend();
        let mut tiny = vec![0f32; 40];
        tiny[17] = f32::from_bits(0x100); // amax / 2688 underflows to 0
        let pts = e.nvfp4_tensor_scale(&tiny).unwrap();
        assert_eq!(pts.to_bits(), 1 << 6, "{b}: 2^-143");
        let (mut packed, mut scales) = (vec![0u8; 20], vec![0u8; 3]);
        e.quantize_nvfp4(
            &tiny,
            pts,
            &mut packed,
            &mut scales,
            Rounding::NearestEven,
            &ctx,
            &s,
        )
        .unwrap();
        let mut back = vec![0f32; 40];
        e.dequantize_nvfp4(&packed, &scales, pts, &mut back)
            .unwrap();
        assert!(back[17] > 0.0 && back.iter().all(|v| v.is_finite()), "{b}");
        let scale = f32::from_bits(0x0080_0000) * 0.75; // normal amax: the plain quotient
        assert_eq!(
            e.nvfp4_tensor_scale(&[scale * 2688.0]).unwrap(),
            scale,
            "{b}"
        );

        // Every code of a NaN-scale block decodes to the scale's quiet NaN, whatever its own sign.
        let packed: Vec<u8> = (0..=255u8).collect();
        let mut out = vec![0f32; 512];
        e.dequantize_nvfp4(&packed, &[0x7F; 32], 1.0, &mut out)
            .unwrap();
        assert!(
            out.iter().all(|v| v.to_bits() == 0x7FC0_0000),
            "{b}: NVFP4 NaN block"
        );
        e.dequantize_nvfp4(&packed, &[0xFF; 32], 1.0, &mut out)
            .unwrap();
        assert!(
            out.iter().all(|v| v.to_bits() == 0xFFC0_0000),
            "{b}: NVFP4 -NaN block"
        );
        e.dequantize_mxfp4(&packed, &[0xFF; 16], &mut out).unwrap();
        assert!(
            out.iter().all(|v| v.to_bits() == 0x7FC0_0000),
            "{b}: MXFP4 NaN block"
        );
        let mut nan = [0f32; 4];
        e.fp8_to_f32(&[0x7F, 0xFF, 0x7F, 0xFF], &mut nan, Fp8::E4M3)
            .unwrap();
        let bits: Vec<u32> = nan.iter().map(|v| v.to_bits()).collect();
        assert_eq!(
            bits,
            [0x7FC0_0000, 0xFFC0_0000, 0x7FC0_0000, 0xFFC0_0000],
            "{b}: E4M3"
        );
        e.fp8_to_f32(&[0x7D, 0xFE, 0x7C, 0xFC], &mut nan, Fp8::E5M2)
            .unwrap();
        let bits: Vec<u32> = nan.iter().map(|v| v.to_bits()).collect();
        assert_eq!(
            bits,
            [0x7FC0_0000, 0xFFC0_0000, 0x7F80_0000, 0xFF80_0000],
            "{b}: E5M2"
        );
    }
}

/// SPEC.md §3.2: a stochastic conversion or quantizer called with `(stream_id, index_base)` rounds
/// value `i` with `r16(index_base + i)` of purpose 0 (Weights) and `tensor_id = stream_id`, counting
/// `i` from the slice start across blocks; on every backend, against the formula.
#[test]
fn quantizers_draw_the_bits_of_index_base_plus_i_with_purpose_weights() {
    use halfstep::reference::bits::{BitsCoord, element_bits};
    let (seed, step, id, base) = (9u64, 3u32, 5u32, 1000u64);
    let ctx = StepContext::new(seed, step);
    let stream = TensorStream {
        id,
        index_base: base,
    };
    let coord = BitsCoord {
        seed,
        step,
        stream_word: id << 4,
        replica_slot: 0,
        swap_pairs: false,
    };
    let r = |i: usize| Mode::Stochastic(element_bits(&coord, base + i as u64));
    let mut g = rng(31);
    let x: Vec<f32> = (0..77)
        .map(|i| {
            let v = log_uniform(&mut g, -8, 3);
            if i % 3 == 0 { -v } else { v }
        })
        .collect();
    let fp8: Vec<u8> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| q::f32_to(E4M3, v, r(i)))
        .collect();
    let n = x.len();
    let (mut nv_p, mut nv_s) = (vec![0u8; n.div_ceil(2)], vec![0u8; n.div_ceil(16)]);
    q::quantize_nvfp4(&x, 0.01, &mut nv_p, &mut nv_s, r);
    let (mut mx_p, mut mx_s) = (vec![0u8; n.div_ceil(2)], vec![0u8; n.div_ceil(32)]);
    q::quantize_mxfp4(&x, &mut mx_p, &mut mx_s, r);
    for e in common::available_engines("quant", true) {
        let b = e.backend();
        let mut got = vec![0u8; n];
        e.f32_to_fp8(&x, &mut got, Fp8::E4M3, Rounding::Stochastic, &ctx, &stream)
            .unwrap();
        assert_eq!(got, fp8, "{b}: e4m3");
        let (mut p, mut s) = (vec![0u8; n.div_ceil(2)], vec![0u8; n.div_ceil(16)]);
        e.quantize_nvfp4(
            &x,
            0.01,
            &mut p,
            &mut s,
            Rounding::Stochastic,
            &ctx,
            &stream,
        )
        .unwrap();
        assert_eq!((p, s), (nv_p.clone(), nv_s.clone()), "{b}: nvfp4");
        let (mut p, mut s) = (vec![0u8; n.div_ceil(2)], vec![0u8; n.div_ceil(32)]);
        e.quantize_mxfp4(&x, &mut p, &mut s, Rounding::Stochastic, &ctx, &stream)
            .unwrap();
        assert_eq!((p, s), (mx_p.clone(), mx_s.clone()), "{b}: mxfp4");
    }
}
