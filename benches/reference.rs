//! Baseline timings of the scalar reference (the SIMD backends' benchmarks come with them).
//! `cargo bench --bench reference`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use halfstep::{
    AdamConfig, AdamTensor, Grads, Rounding, State, StepContext, TensorStream, Weights, adam_step,
    bf16, convert, rng,
};
use std::hint::black_box;

const N: usize = 1 << 16;

fn bench(c: &mut Criterion) {
    let ctx = StepContext::new(7, 1);
    let stream = TensorStream::new(1);
    let src: Vec<f32> = (0..N).map(|i| (i as f32).sin()).collect();

    let mut g = c.benchmark_group("reference_64k");
    g.throughput(Throughput::Elements(N as u64));
    let mut bits = vec![0u16; N];
    g.bench_function("philox_element_bits", |b| {
        b.iter(|| {
            rng::fill_element_bits(&ctx, &stream, rng::Purpose::Weights, black_box(&mut bits))
        })
    });
    let mut dst = vec![bf16::ZERO; N];
    for (name, r) in [
        ("bf16_nearest", Rounding::NearestEven),
        ("bf16_stochastic", Rounding::Stochastic),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| convert::f32_to_bf16(black_box(&src), &mut dst, r, &ctx, &stream))
        });
    }
    let (mut w, mut m, mut v) = (src.clone(), vec![0f32; N], vec![0f32; N]);
    let cfg = AdamConfig::adamw(1e-3);
    g.bench_function("adamw_f32", |b| {
        b.iter(|| {
            adam_step(
                &cfg,
                &ctx,
                &mut AdamTensor {
                    weights: Weights::F32(&mut w),
                    grads: Grads::F32(black_box(&src)),
                    exp_avg: State::F32(&mut m),
                    exp_avg_sq: State::F32(&mut v),
                    max_exp_avg_sq: None,
                    stream,
                },
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
