//! The values the C smoke test (`tests/c/smoke.c`) must reproduce through the C ABI: three steps
//! of each optimizer on small deterministic tensors, run here through the Rust API on the
//! reference backend, then NVFP4 and fp8 E4M3 quantization of the same weights with stochastic
//! rounding. One line per case: its name, then every output word in hex.
//!
//! `cargo run --example capi_expected > target/capi_expected.txt`

use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Backend, Engine, Grads, LambConfig,
    LambTensor, LambWorkspace, Rounding, SgdConfig, SgdTensor, State, StepContext, TensorStream,
    Threads, Weights, bf16,
};

/// Must match tests/c/smoke.c.
const N: usize = 100;
const INDEX_BASE: u64 = 3;
const SEED: u64 = 7;

fn weights() -> Vec<f32> {
    (0..N).map(|i| ((i % 7) as f32 - 3.0) * 0.125).collect()
}

fn grads(step: u32) -> Vec<f32> {
    (0..N)
        .map(|i| (((i * 5 + step as usize) % 11) as f32 - 5.0) * 0.015625)
        .collect()
}

fn hex32(xs: &[f32]) -> String {
    xs.iter().map(|x| format!(" {:08x}", x.to_bits())).collect()
}

fn hex16(xs: impl Iterator<Item = u16>) -> String {
    xs.map(|x| format!(" {x:04x}")).collect()
}

fn main() {
    let e = Engine::new(Backend::Reference).unwrap();
    let th = Threads::current();
    let stream = |id| TensorStream {
        id,
        index_base: INDEX_BASE,
    };

    // SGD, split weights, momentum + nesterov.
    let (mut top, mut trail) = (vec![bf16::ZERO; N], vec![0u16; N]);
    e.split(&weights(), &mut top, &mut trail).unwrap();
    let mut mom = vec![0f32; N];
    let cfg = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        nesterov: true,
        weight_decay: 0.01,
        ..Default::default()
    };
    for step in 1..=3 {
        let g = grads(step);
        let mut t = [SgdTensor {
            weights: Weights::Split {
                top: &mut top,
                trail: &mut trail,
            },
            grads: Grads::F32(&g),
            momentum: Some(State::F32(&mut mom)),
            stream: stream(0),
        }];
        e.step_group(&cfg, &StepContext::new(SEED, step), &mut t, &mut (), &th)
            .unwrap();
    }
    println!(
        "sgd{}{}{}",
        hex16(top.iter().map(|x| x.to_bits())),
        hex16(trail.iter().copied()),
        hex32(&mom)
    );

    // Adagrad, split weights.
    let (mut top, mut trail) = (vec![bf16::ZERO; N], vec![0u16; N]);
    e.split(&weights(), &mut top, &mut trail).unwrap();
    let mut sum = vec![0f32; N];
    let cfg = AdagradConfig {
        lr: 0.05,
        ..Default::default()
    };
    for step in 1..=3 {
        let g = grads(step);
        let mut t = [AdagradTensor {
            weights: Weights::Split {
                top: &mut top,
                trail: &mut trail,
            },
            grads: Grads::F32(&g),
            sum: State::F32(&mut sum),
            stream: stream(1),
        }];
        e.step_group(&cfg, &StepContext::new(SEED, step), &mut t, &mut (), &th)
            .unwrap();
    }
    println!(
        "adagrad{}{}{}",
        hex16(top.iter().map(|x| x.to_bits())),
        hex16(trail.iter().copied()),
        hex32(&sum)
    );

    // AdamW, f32 weights, bf16 stochastic first moment.
    let mut w = weights();
    let mut m = vec![bf16::ZERO; N];
    let mut v = vec![0f32; N];
    let cfg = AdamConfig::adamw(1e-2);
    for step in 1..=3 {
        let g = grads(step);
        let mut t = [AdamTensor {
            weights: Weights::F32(&mut w),
            grads: Grads::F32(&g),
            exp_avg: State::Bf16(&mut m, Rounding::Stochastic),
            exp_avg_sq: State::F32(&mut v),
            max_exp_avg_sq: None,
            stream: stream(2),
        }];
        e.step_group(&cfg, &StepContext::new(SEED, step), &mut t, &mut (), &th)
            .unwrap();
    }
    println!(
        "adamw{}{}{}",
        hex32(&w),
        hex16(m.iter().map(|x| x.to_bits())),
        hex32(&v)
    );

    // LAMB, bf16 stochastic weights.
    let w32 = weights();
    let mut w = vec![bf16::ZERO; N];
    e.f32_to_bf16(
        &w32,
        &mut w,
        Rounding::NearestEven,
        &StepContext::new(SEED, 1),
        &stream(3),
    )
    .unwrap();
    let (mut m, mut v) = (vec![0f32; N], vec![0f32; N]);
    let cfg = LambConfig {
        lr: 1e-2,
        ..Default::default()
    };
    for step in 1..=3 {
        let g = grads(step);
        let mut t = [LambTensor {
            weights: Weights::Bf16(&mut w, Rounding::Stochastic),
            grads: Grads::F32(&g),
            exp_avg: State::F32(&mut m),
            exp_avg_sq: State::F32(&mut v),
            stream: stream(3),
        }];
        let mut ws = LambWorkspace::for_tensors(&t);
        e.step_group(&cfg, &StepContext::new(SEED, step), &mut t, &mut ws, &th)
            .unwrap();
    }
    println!(
        "lamb{}{}{}",
        hex16(w.iter().map(|x| x.to_bits())),
        hex32(&m),
        hex32(&v)
    );

    // NVFP4 and E4M3, stochastic, streams 5 and 6, of values with bits below every quantum.
    let w: Vec<f32> = (0..N).map(|i| ((i % 13) as f32 - 6.0) * 0.0371).collect();
    let ctx = StepContext::new(SEED, 1);
    let pts = halfstep::quant::nvfp4_tensor_scale(&w).unwrap();
    let (mut packed, mut scales) = (vec![0u8; N.div_ceil(2)], vec![0u8; N.div_ceil(16)]);
    halfstep::quant::quantize_nvfp4(
        &w,
        pts,
        &mut packed,
        &mut scales,
        Rounding::Stochastic,
        &ctx,
        &stream(5),
    )
    .unwrap();
    let bytes = |b: &[u8]| -> String { b.iter().map(|x| format!(" {x:02x}")).collect() };
    println!(
        "nvfp4 {:08x}{}{}",
        pts.to_bits(),
        bytes(&packed),
        bytes(&scales)
    );
    let mut codes = vec![0u8; N];
    halfstep::quant::f32_to_fp8(
        &w,
        &mut codes,
        halfstep::quant::Fp8::E4M3,
        Rounding::Stochastic,
        &ctx,
        &stream(6),
    )
    .unwrap();
    println!("e4m3{}", bytes(&codes));
}
