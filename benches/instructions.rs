//! Instruction counts (gungraun, callgrind) of every kernel at 4096 elements on the reference,
//! portable and avx2 backends (valgrind hides AVX-512), the quantizers included. CI compares the counts
//! with `benches/instructions-baseline.json` (tools/instructions_gate.py): more than 2% more
//! instructions fails unless the same commit updates the baseline and says why.
//!
//! `cargo bench --bench instructions` (needs valgrind and `gungraun-runner` 0.19.1).

use gungraun::prelude::*;
use halfstep::rng::Purpose;
use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Backend, Engine, Grads, LambConfig,
    LambTensor, LambWorkspace, Rounding, SgdConfig, SgdTensor, State, StepContext, TensorStream,
    Threads, Weights, bf16, f16,
};
use std::hint::black_box;

const N: usize = 4096;

type Kernel = Box<dyn FnMut()>;

fn engine(b: Backend) -> Engine {
    Engine::new(b).unwrap_or_else(|e| panic!("{b}: {e}"))
}

fn values(scale: f32) -> Vec<f32> {
    (0..N).map(|i| ((i as f32) * 0.618).sin() * scale).collect()
}

fn split_weights() -> (Vec<bf16>, Vec<u16>, Vec<bf16>) {
    let (mut top, mut trail) = (vec![bf16::ZERO; N], vec![0u16; N]);
    halfstep::convert::split(&values(0.5), &mut top, &mut trail).unwrap();
    let g = values(0.01).iter().map(|&x| bf16::from_f32(x)).collect();
    (top, trail, g)
}

fn ctx() -> StepContext {
    StepContext::new(7, 3)
}

fn random_bits(b: Backend) -> Kernel {
    let e = engine(b);
    let mut out = vec![0u16; N];
    Box::new(move || {
        e.fill_element_bits(&ctx(), &TensorStream::new(1), Purpose::Weights, &mut out)
            .unwrap();
        black_box(&out);
    })
}

fn bf16_sr(b: Backend) -> Kernel {
    to_bf16(b, Rounding::Stochastic)
}

fn bf16_nearest(b: Backend) -> Kernel {
    to_bf16(b, Rounding::NearestEven)
}

fn to_bf16(b: Backend, rounding: Rounding) -> Kernel {
    let e = engine(b);
    let (src, mut dst) = (values(1.0), vec![bf16::ZERO; N]);
    Box::new(move || {
        e.f32_to_bf16(&src, &mut dst, rounding, &ctx(), &TensorStream::new(1))
            .unwrap();
        black_box(&dst);
    })
}

fn f16_sr(b: Backend) -> Kernel {
    let e = engine(b);
    let (src, mut dst) = (values(1.0), vec![f16::ZERO; N]);
    Box::new(move || {
        e.f32_to_f16(
            &src,
            &mut dst,
            Rounding::Stochastic,
            &ctx(),
            &TensorStream::new(1),
        )
        .unwrap();
        black_box(&dst);
    })
}

fn sgd(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let mut m = vec![0f32; N];
    let cfg = SgdConfig {
        lr: 1e-3,
        momentum: 0.9,
        ..Default::default()
    };
    Box::new(move || {
        let mut t = SgdTensor {
            weights: Weights::Split {
                top: &mut top,
                trail: &mut trail,
            },
            grads: Grads::Bf16(&g),
            momentum: Some(State::F32(&mut m)),
            stream: TensorStream::new(1),
        };
        e.sgd_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

fn adagrad(b: Backend) -> Kernel {
    adagrad_with(b, 0.1f32, |s| State::F32(s))
}

/// Split weights, bf16 gradients, a bf16-SR sum: the compiled layout of the criterion bench's
/// `sr_adagrad_split_bf16sr_states`, whose loop makes its random bits as it goes on AVX2.
fn adagrad_bf16sr_states(b: Backend) -> Kernel {
    adagrad_with(b, bf16::from_f32(0.1), bf16_sr_state)
}

/// A bf16 state that rounds stochastically.
fn bf16_sr_state(s: &mut [bf16]) -> State<'_> {
    State::Bf16(s, Rounding::Stochastic)
}

/// Adagrad on split weights and bf16 gradients, the sum made of `sum0` by `state`.
fn adagrad_with<T: Copy + 'static>(
    b: Backend,
    sum0: T,
    state: impl Fn(&mut [T]) -> State<'_> + 'static,
) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let mut s = vec![sum0; N];
    let cfg = AdagradConfig::default();
    Box::new(move || {
        let mut t = AdagradTensor {
            weights: Weights::Split {
                top: &mut top,
                trail: &mut trail,
            },
            grads: Grads::Bf16(&g),
            sum: state(&mut s),
            stream: TensorStream::new(1),
        };
        e.adagrad_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

/// The Adam tensor the split-weight Adam rows step: split weights, bf16 gradients, the moments
/// given.
fn adam_split_tensor<'a>(
    top: &'a mut [bf16],
    trail: &'a mut [u16],
    g: &'a [bf16],
    exp_avg: State<'a>,
    exp_avg_sq: State<'a>,
) -> AdamTensor<'a> {
    AdamTensor {
        weights: Weights::Split { top, trail },
        grads: Grads::Bf16(g),
        exp_avg,
        exp_avg_sq,
        max_exp_avg_sq: None,
        stream: TensorStream::new(1),
    }
}

fn adam(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let (mut m, mut v) = (vec![0f32; N], vec![0f32; N]);
    let cfg = AdamConfig::adam(1e-3);
    Box::new(move || {
        let (m, v) = (State::F32(&mut m), State::F32(&mut v));
        let mut t = adam_split_tensor(&mut top, &mut trail, &g, m, v);
        e.adam_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

/// AdamW with bf16 weights and moments, every store stochastic, and f32 or bf16 gradients.
fn adamw_sr(b: Backend, bf16_grads: bool) -> Kernel {
    let e = engine(b);
    let mut w: Vec<bf16> = values(0.5).iter().map(|&x| bf16::from_f32(x)).collect();
    let g = values(0.01);
    let gb: Vec<bf16> = g.iter().map(|&x| bf16::from_f32(x)).collect();
    let (mut m, mut v) = (vec![bf16::ZERO; N], vec![bf16::ZERO; N]);
    let cfg = AdamConfig::adamw(1e-3);
    Box::new(move || {
        let mut t = AdamTensor {
            weights: Weights::Bf16(&mut w, Rounding::Stochastic),
            grads: if bf16_grads {
                Grads::Bf16(&gb)
            } else {
                Grads::F32(&g)
            },
            exp_avg: State::Bf16(&mut m, Rounding::Stochastic),
            exp_avg_sq: State::Bf16(&mut v, Rounding::Stochastic),
            max_exp_avg_sq: None,
            stream: TensorStream::new(1),
        };
        e.adam_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

/// f32 gradients: a storage combination with no compiled layout (each buffer's kind matched per
/// chunk).
fn adamw_bf16_sr(b: Backend) -> Kernel {
    adamw_sr(b, false)
}

/// Everything bf16: the compiled layout of the criterion bench's `adamw_bf16_sr_everywhere`.
fn adamw_all_bf16_sr(b: Backend) -> Kernel {
    adamw_sr(b, true)
}

/// f32 weights and gradients, bf16-SR moments (12 bytes per parameter): the compiled layout of
/// the criterion bench's `adamw_f32_bf16sr_states`.
fn adamw_f32_bf16sr_states(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut w, g) = (values(0.5), values(0.01));
    let (mut m, mut v) = (vec![bf16::ZERO; N], vec![bf16::ZERO; N]);
    let cfg = AdamConfig::adamw(1e-3);
    Box::new(move || {
        let mut t = AdamTensor {
            weights: Weights::F32(&mut w),
            grads: Grads::F32(&g),
            exp_avg: State::Bf16(&mut m, Rounding::Stochastic),
            exp_avg_sq: State::Bf16(&mut v, Rounding::Stochastic),
            max_exp_avg_sq: None,
            stream: TensorStream::new(1),
        };
        e.adam_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

/// f32 moments and bf16 gradients, with f32 master weights or bf16 weights rounded to nearest: the
/// mixed layouts, compiled (the criterion bench's `adamw_f32_bf16grad` and
/// `sr_adamw_bf16nearest_weights`): through the run-time access they took 1.94x and 1.75x the
/// instructions, so a fall back to it fails the gate. The AdamW rows keep setups of their own: one
/// setup for all of them, choosing each buffer's width inside the measured closure, added 540-700
/// instructions to each row's count (1.0-3.7% of the AVX2 ones).
fn adamw_mixed(b: Backend, bf16_weights: bool) -> Kernel {
    let e = engine(b);
    let mut w = values(0.5);
    let mut wb: Vec<bf16> = w.iter().map(|&x| bf16::from_f32(x)).collect();
    let g: Vec<bf16> = values(0.01).iter().map(|&x| bf16::from_f32(x)).collect();
    let (mut m, mut v) = (vec![0f32; N], vec![0f32; N]);
    let cfg = AdamConfig::adamw(1e-3);
    Box::new(move || {
        let weights = match bf16_weights {
            true => Weights::Bf16(&mut wb, Rounding::NearestEven),
            false => Weights::F32(&mut w),
        };
        let mut t = AdamTensor {
            weights,
            grads: Grads::Bf16(&g),
            exp_avg: State::F32(&mut m),
            exp_avg_sq: State::F32(&mut v),
            max_exp_avg_sq: None,
            stream: TensorStream::new(1),
        };
        e.adam_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

fn adamw_f32_bf16grad(b: Backend) -> Kernel {
    adamw_mixed(b, false)
}

fn adamw_bf16_nearest(b: Backend) -> Kernel {
    adamw_mixed(b, true)
}

/// Split weights, bf16 gradients, bf16-SR moments (10 bytes per parameter): the compiled layout of
/// the criterion bench's `sr_adamw_split_bf16sr_states`, the package's `weights="split",
/// states="bf16"`.
fn adamw_split_bf16sr_states(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let (mut m, mut v) = (vec![bf16::ZERO; N], vec![bf16::ZERO; N]);
    let cfg = AdamConfig::adamw(1e-3);
    Box::new(move || {
        let sr = Rounding::Stochastic;
        let (m, v) = (State::Bf16(&mut m, sr), State::Bf16(&mut v, sr));
        let mut t = adam_split_tensor(&mut top, &mut trail, &g, m, v);
        e.adam_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

/// The LAMB tensor the LAMB rows step: split weights, bf16 gradients, the moments given.
fn lamb_tensor<'a>(
    top: &'a mut [bf16],
    trail: &'a mut [u16],
    g: &'a [bf16],
    exp_avg: State<'a>,
    exp_avg_sq: State<'a>,
) -> LambTensor<'a> {
    LambTensor {
        weights: Weights::Split { top, trail },
        grads: Grads::Bf16(g),
        exp_avg,
        exp_avg_sq,
        stream: TensorStream::new(1),
    }
}

/// The single-tensor call: no workspace, so pass 2 recomputes each direction.
fn lamb(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let (mut m, mut v) = (vec![0f32; N], vec![0f32; N]);
    let cfg = LambConfig::default();
    Box::new(move || {
        let mut t = lamb_tensor(
            &mut top,
            &mut trail,
            &g,
            State::F32(&mut m),
            State::F32(&mut v),
        );
        e.lamb_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

/// The single-tensor call on split weights with bf16-SR moments: pass 1 takes its chunks in
/// pairs in even/odd order where the backend can (AVX2, AVX-512), which the group step, whose
/// kept directions are f32, does not.
fn lamb_bf16sr_states(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let (mut m, mut v) = (vec![bf16::ZERO; N], vec![bf16::ZERO; N]);
    let cfg = LambConfig::default();
    Box::new(move || {
        let sr = Rounding::Stochastic;
        let (m, v) = (State::Bf16(&mut m, sr), State::Bf16(&mut v, sr));
        let mut t = lamb_tensor(&mut top, &mut trail, &g, m, v);
        e.lamb_step(&cfg, &ctx(), &mut t).unwrap();
    })
}

/// LAMB as `Optimizer` and the C ABI run it: a group step with a workspace, which keeps each
/// direction from pass 1 for pass 2 (groups up to 2^20 elements).
fn lamb_group(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let (mut m, mut v) = (vec![0f32; N], vec![0f32; N]);
    let cfg = LambConfig::default();
    // Sized here, in the setup, so the measured call does not allocate it.
    let mut ws = LambWorkspace::for_tensors(&[lamb_tensor(
        &mut top,
        &mut trail,
        &g,
        State::F32(&mut m),
        State::F32(&mut v),
    )]);
    Box::new(move || {
        let mut t = [lamb_tensor(
            &mut top,
            &mut trail,
            &g,
            State::F32(&mut m),
            State::F32(&mut v),
        )];
        e.step_group(&cfg, &ctx(), &mut t, &mut ws, &Threads::current())
            .unwrap();
    })
}

/// The group step of split weights with bf16-SR moments (10 bytes per parameter): LAMB's
/// stochastic entry points (pass 1; pass 2 keeps to the weights, IPEX's layout).
fn lamb_group_bf16sr_states(b: Backend) -> Kernel {
    let e = engine(b);
    let (mut top, mut trail, g) = split_weights();
    let (mut m, mut v) = (vec![bf16::ZERO; N], vec![bf16::ZERO; N]);
    let cfg = LambConfig::default();
    // Sized in the setup, as `lamb_group`'s.
    let mut ws = LambWorkspace::for_tensors(&[lamb_tensor(
        &mut top,
        &mut trail,
        &g,
        State::Bf16(&mut m, Rounding::Stochastic),
        State::Bf16(&mut v, Rounding::Stochastic),
    )]);
    Box::new(move || {
        let mut t = [lamb_tensor(
            &mut top,
            &mut trail,
            &g,
            State::Bf16(&mut m, Rounding::Stochastic),
            State::Bf16(&mut v, Rounding::Stochastic),
        )];
        e.step_group(&cfg, &ctx(), &mut t, &mut ws, &Threads::current())
            .unwrap();
    })
}

fn nvfp4_sr(b: Backend) -> Kernel {
    let e = engine(b);
    let src = values(3.0);
    let (mut packed, mut scales) = (vec![0u8; N / 2], vec![0u8; N / 16]);
    Box::new(move || {
        let pts = e.nvfp4_tensor_scale(&src).unwrap();
        e.quantize_nvfp4(
            &src,
            pts,
            &mut packed,
            &mut scales,
            Rounding::Stochastic,
            &ctx(),
            &TensorStream::new(1),
        )
        .unwrap();
        black_box(&packed);
    })
}

fn mxfp4_nearest(b: Backend) -> Kernel {
    let e = engine(b);
    let src = values(3.0);
    let (mut packed, mut scales) = (vec![0u8; N / 2], vec![0u8; N / 32]);
    Box::new(move || {
        e.quantize_mxfp4(
            &src,
            &mut packed,
            &mut scales,
            Rounding::NearestEven,
            &ctx(),
            &TensorStream::new(1),
        )
        .unwrap();
        black_box(&packed);
    })
}

fn e4m3_sr(b: Backend) -> Kernel {
    let e = engine(b);
    let src = values(3.0);
    let mut out = vec![0u8; N];
    Box::new(move || {
        e.f32_to_fp8(
            &src,
            &mut out,
            halfstep::quant::Fp8::E4M3,
            Rounding::Stochastic,
            &ctx(),
            &TensorStream::new(1),
        )
        .unwrap();
        black_box(&out);
    })
}

#[library_benchmark]
#[bench::random_bits_reference(args = (Backend::Reference), setup = random_bits)]
#[bench::random_bits_portable(args = (Backend::Portable), setup = random_bits)]
#[bench::random_bits_avx2(args = (Backend::Avx2), setup = random_bits)]
#[bench::bf16_sr_reference(args = (Backend::Reference), setup = bf16_sr)]
#[bench::bf16_sr_portable(args = (Backend::Portable), setup = bf16_sr)]
#[bench::bf16_sr_avx2(args = (Backend::Avx2), setup = bf16_sr)]
#[bench::bf16_nearest_reference(args = (Backend::Reference), setup = bf16_nearest)]
#[bench::bf16_nearest_portable(args = (Backend::Portable), setup = bf16_nearest)]
#[bench::bf16_nearest_avx2(args = (Backend::Avx2), setup = bf16_nearest)]
#[bench::f16_sr_reference(args = (Backend::Reference), setup = f16_sr)]
#[bench::f16_sr_portable(args = (Backend::Portable), setup = f16_sr)]
#[bench::f16_sr_avx2(args = (Backend::Avx2), setup = f16_sr)]
fn conversions(mut kernel: Kernel) {
    kernel();
}

#[library_benchmark]
#[bench::sgd_reference(args = (Backend::Reference), setup = sgd)]
#[bench::sgd_portable(args = (Backend::Portable), setup = sgd)]
#[bench::sgd_avx2(args = (Backend::Avx2), setup = sgd)]
#[bench::adagrad_reference(args = (Backend::Reference), setup = adagrad)]
#[bench::adagrad_portable(args = (Backend::Portable), setup = adagrad)]
#[bench::adagrad_avx2(args = (Backend::Avx2), setup = adagrad)]
#[bench::adagrad_bf16sr_states_avx2(args = (Backend::Avx2), setup = adagrad_bf16sr_states)]
#[bench::adam_reference(args = (Backend::Reference), setup = adam)]
#[bench::adam_portable(args = (Backend::Portable), setup = adam)]
#[bench::adam_avx2(args = (Backend::Avx2), setup = adam)]
#[bench::adamw_bf16_sr_reference(args = (Backend::Reference), setup = adamw_bf16_sr)]
#[bench::adamw_bf16_sr_portable(args = (Backend::Portable), setup = adamw_bf16_sr)]
#[bench::adamw_bf16_sr_avx2(args = (Backend::Avx2), setup = adamw_bf16_sr)]
#[bench::adamw_all_bf16_sr_portable(args = (Backend::Portable), setup = adamw_all_bf16_sr)]
#[bench::adamw_all_bf16_sr_avx2(args = (Backend::Avx2), setup = adamw_all_bf16_sr)]
#[bench::adamw_f32_bf16sr_states_portable(args = (Backend::Portable), setup = adamw_f32_bf16sr_states)]
#[bench::adamw_f32_bf16sr_states_avx2(args = (Backend::Avx2), setup = adamw_f32_bf16sr_states)]
#[bench::adamw_split_bf16sr_states_portable(args = (Backend::Portable), setup = adamw_split_bf16sr_states)]
#[bench::adamw_split_bf16sr_states_avx2(args = (Backend::Avx2), setup = adamw_split_bf16sr_states)]
#[bench::adamw_f32_bf16grad_avx2(args = (Backend::Avx2), setup = adamw_f32_bf16grad)]
#[bench::adamw_bf16_nearest_avx2(args = (Backend::Avx2), setup = adamw_bf16_nearest)]
#[bench::lamb_reference(args = (Backend::Reference), setup = lamb)]
#[bench::lamb_portable(args = (Backend::Portable), setup = lamb)]
#[bench::lamb_avx2(args = (Backend::Avx2), setup = lamb)]
#[bench::lamb_bf16sr_states_avx2(args = (Backend::Avx2), setup = lamb_bf16sr_states)]
#[bench::lamb_group_reference(args = (Backend::Reference), setup = lamb_group)]
#[bench::lamb_group_portable(args = (Backend::Portable), setup = lamb_group)]
#[bench::lamb_group_avx2(args = (Backend::Avx2), setup = lamb_group)]
#[bench::lamb_group_bf16sr_states_portable(args = (Backend::Portable), setup = lamb_group_bf16sr_states)]
#[bench::lamb_group_bf16sr_states_avx2(args = (Backend::Avx2), setup = lamb_group_bf16sr_states)]
fn optimizers(mut kernel: Kernel) {
    kernel();
}

#[library_benchmark]
#[bench::e4m3_sr_reference(args = (Backend::Reference), setup = e4m3_sr)]
#[bench::e4m3_sr_portable(args = (Backend::Portable), setup = e4m3_sr)]
#[bench::e4m3_sr_avx2(args = (Backend::Avx2), setup = e4m3_sr)]
#[bench::nvfp4_sr_reference(args = (Backend::Reference), setup = nvfp4_sr)]
#[bench::nvfp4_sr_portable(args = (Backend::Portable), setup = nvfp4_sr)]
#[bench::nvfp4_sr_avx2(args = (Backend::Avx2), setup = nvfp4_sr)]
#[bench::mxfp4_nearest_reference(args = (Backend::Reference), setup = mxfp4_nearest)]
#[bench::mxfp4_nearest_portable(args = (Backend::Portable), setup = mxfp4_nearest)]
#[bench::mxfp4_nearest_avx2(args = (Backend::Avx2), setup = mxfp4_nearest)]
fn quantizers(mut kernel: Kernel) {
    kernel();
}

library_benchmark_group!(
    name = kernels,
    benchmarks = [conversions, optimizers, quantizers]
);
// AVX2's loops that may make their random bits in the loop do so on Intel CPUs and leave them to
// the fill on AMD's (`HALFSTEP_BITS`): one choice for every machine, so that the counts do not
// rest on the vendor valgrind reports (GenuineIntel on an AMD Zen 3 CPU). The environment is
// otherwise cleared under valgrind.
main!(
    config = LibraryBenchmarkConfig::default().env("HALFSTEP_BITS", "loop");
    library_benchmark_groups = kernels
);
