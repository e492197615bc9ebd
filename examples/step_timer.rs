//! Times one of halfstep's optimizer steps the way `tools/peers_side_by_side.py` times the peers:
//! the median over 5 batches of repeated steps, in ns per parameter. Storage as the peer rows:
//! split weights + bf16 grads + f32 state (IPEX's rows: `sgd`, `adagrad`, `adam`, `lamb`), or all f32
//! (PyTorch's fused CPU rows: `sgd_f32`, `adagrad_f32`, `adam_f32`, `adamw_f32`; and `amsgrad_f32`,
//! AdamW with AMSGrad's maximum, and `lamb_f32`, which no peer has); `lamb_bf16sr` and
//! `sgd_bf16sr`: LAMB's and SGD's split weights and bf16 grads with bf16 moments rounded
//! stochastically (the `sgd` and `lamb` rows with their states in bf16).
//!
//! `cargo run --release --example step_timer -- <kernel> <elements> <threads> [grain]`
//! (`STEP_TIMER_HANDOFF=1`: the steps are handed to a pool the timing thread is not in).
//!
//! Where the buffers start: the weights and grads 64-byte aligned, as PyTorch's tensors; the states
//! and trails as the PyTorch package places them from the weights (`Placed::state_of`). Instead,
//! `STEP_TIMER_OFFSET=B` starts every buffer B bytes past a 64-byte boundary (split cache lines), and
//! `STEP_TIMER_PAGE_OFFSETS=W,G,S0,S1[,T]` starts the weights, grads, the two states and the
//! trails (T, default W) at those byte offsets within a 4 KiB page (where a load may falsely wait
//! on an earlier store to another buffer whose address has the same low 12 bits: "4K aliasing";
//! and on AMD, where buffers at one offset share L1 sets: the PyTorch package's slots are
//! `64,64,832,1600,3136`). `STEP_TIMER_ADDRESSES=1` prints where each buffer starts and exits (to
//! check which buffers collide in AMD's L1 µtags).

use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Engine, Grads, LambConfig, LambTensor,
    LambWorkspace, SgdConfig, SgdTensor, State, Step, StepContext, TensorStream, Threads, Weights,
    bf16,
};
use std::time::Instant;

#[path = "../benches/support/placed.rs"]
mod placed_buffers;
use placed_buffers::{FIRST_MOMENT, Placed, SECOND_MOMENT, TRAIL};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: step_timer <sgd|sgd_bf16sr|adagrad|adam|lamb|lamb_bf16sr|sgd_f32|adagrad_f32|adam_f32|adamw_f32|amsgrad_f32|lamb_f32> \
                 <elements> <threads> [grain]";
    let kernel = args.get(1).expect(usage).as_str();
    let n: usize = args.get(2).expect(usage).parse().expect(usage);
    let threads: usize = args.get(3).expect(usage).parse().expect(usage);
    // Threads as OpenMP's team in the peers: the calling thread and `threads - 1` others. With
    // STEP_TIMER_HANDOFF=1, a pool of `threads` that the calling thread hands each step to.
    let th = if threads <= 1 {
        Threads::current()
    } else if std::env::var_os("STEP_TIMER_HANDOFF").is_some() {
        Threads::pool(std::sync::Arc::new(
            rayon_core::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap(),
        ))
    } else {
        Threads::calling_thread_pool(threads).unwrap()
    };
    // An optional fourth argument: the grain (elements) instead of the default.
    let th = match args.get(4) {
        Some(g) => th.with_grain(g.parse().expect(usage)),
        None => th,
    };
    let e = Engine::global().unwrap();
    // Buffers start 64-byte aligned, as PyTorch's tensors do (the peers' buffers); a `Vec` of
    // 128 KiB or more starts 16 bytes past a page (glibc's mmap'd chunks).
    let offset: usize = std::env::var("STEP_TIMER_OFFSET").map_or(0, |s| s.parse().expect(usage));
    let page: Option<Vec<usize>> = std::env::var("STEP_TIMER_PAGE_OFFSETS").ok().map(|s| {
        let v: Vec<usize> = s.split(',').map(|x| x.parse().expect(usage)).collect();
        assert!(
            v.len() == 4 || v.len() == 5,
            "STEP_TIMER_PAGE_OFFSETS=W,G,S0,S1[,T] (bytes within a page)"
        );
        v
    });
    // Where buffer `k` (0 weights, 1 grads, 2 and 3 the states, 4 the trails) starts.
    let package_places = page.is_none() && std::env::var_os("STEP_TIMER_OFFSET").is_none();
    let at = |k: usize| match &page {
        Some(v) => Place::InPage(*v.get(k).unwrap_or(&v[0])),
        None if package_places && k >= 2 => Place::Slot(match k {
            2 => FIRST_MOMENT,
            3 => SECOND_MOMENT,
            _ => TRAIL,
        }),
        None => Place::PastLine(offset),
    };
    // `_f32` rows: f32 weights and grads; the others: split weights and bf16 grads.
    let f32_row = kernel.ends_with("_f32");
    let w: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.618).sin() * 0.02).collect();
    let g32v: Vec<f32> = w.iter().map(|x| x * 0.05).collect();
    let g16v: Vec<bf16> = g32v.iter().map(|&x| bf16::from_f32(x)).collect();
    let mut top = placed(bf16::ZERO, n, at(0));
    let mut trail = placed_from(&top, 0u16, n, at(4));
    halfstep::convert::split(&w, &mut top, &mut trail).unwrap();
    let (mut g32, mut g16) = (placed(0f32, n, at(1)), placed(bf16::ZERO, n, at(1)));
    g32.copy_from_slice(&g32v);
    g16.copy_from_slice(&g16v);
    let (g32, g16) = (&*g32, &*g16);
    let mut w32 = placed(0f32, n, at(0));
    w32.copy_from_slice(&w);
    let state = |k| {
        if f32_row {
            placed_from(&w32, 0f32, n, at(k))
        } else {
            placed_from(&top, 0f32, n, at(k))
        }
    };
    let (mut s0, mut s1) = (state(2), state(3));
    // AMSGrad's maximum for `amsgrad_f32` only, at the trails' offset (unused by f32 rows).
    let n2 = if kernel == "amsgrad_f32" { n } else { 0 };
    let mut s2 = placed_from(&w32, 0f32, n2, at(4));
    // bf16 moments for `lamb_bf16sr` and `sgd_bf16sr` only (empty otherwise, so the other rows'
    // memory is as it was).
    let nh = if kernel.ends_with("_bf16sr") { n } else { 0 };
    let (mut h0, mut h1) = (
        placed_from(&top, bf16::ZERO, nh, at(2)),
        placed_from(&top, bf16::ZERO, nh, at(3)),
    );
    if std::env::var_os("STEP_TIMER_ADDRESSES").is_some() {
        for (name, p) in [
            ("top", top.as_ptr() as usize),
            ("trail", trail.as_ptr() as usize),
            ("g32", g32.as_ptr() as usize),
            ("g16", g16.as_ptr() as usize),
            ("w32", w32.as_ptr() as usize),
            ("s0", s0.as_ptr() as usize),
            ("s1", s1.as_ptr() as usize),
        ] {
            eprintln!("{name} {p:#x}");
        }
        return;
    }
    let mut ws = LambWorkspace::default();
    // Step 2, not 1: step 1 of SGD with momentum only copies the gradient into the buffer, and
    // the peers' rows are later steps.
    let ctx = StepContext::new(1, 2);
    let stream = TensorStream::new(0);
    // SGD's rows, with f32 or bf16-SR momentum.
    let sgd = SgdConfig {
        lr: 0.01,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..Default::default()
    };
    let mut step = || match kernel {
        "sgd" | "sgd_f32" | "sgd_bf16sr" => {
            let momentum = if kernel == "sgd_bf16sr" {
                State::Bf16(&mut h0, halfstep::Rounding::Stochastic)
            } else {
                State::F32(&mut s0)
            };
            let mut t = [SgdTensor {
                weights: weights(f32_row, &mut w32, &mut top, &mut trail),
                grads: grads(f32_row, g32, g16),
                momentum: Some(momentum),
                stream,
            }];
            e.step_group(&sgd, &ctx, &mut t, &mut (), &th).unwrap();
        }
        "adagrad" | "adagrad_f32" => {
            let cfg = AdagradConfig {
                lr: 0.01,
                weight_decay: 1e-4,
                ..Default::default()
            };
            let mut t = [AdagradTensor {
                weights: weights(f32_row, &mut w32, &mut top, &mut trail),
                grads: grads(f32_row, g32, g16),
                sum: State::F32(&mut s0),
                stream,
            }];
            e.step_group(&cfg, &ctx, &mut t, &mut (), &th).unwrap();
        }
        "adam" | "adam_f32" | "adamw_f32" | "amsgrad_f32" => {
            // IPEX's adam_fused_step and PyTorch's _fused_adamw_ decouple the decay; the
            // `adam_f32` row is PyTorch's _fused_adam_, which adds it to the gradient.
            let amsgrad = kernel == "amsgrad_f32";
            let cfg = AdamConfig {
                weight_decay: 1e-2,
                decoupled_weight_decay: kernel != "adam_f32",
                amsgrad,
                ..AdamConfig::adam(1e-2)
            };
            let mut t = [AdamTensor {
                weights: weights(f32_row, &mut w32, &mut top, &mut trail),
                grads: grads(f32_row, g32, g16),
                exp_avg: State::F32(&mut s0),
                exp_avg_sq: State::F32(&mut s1),
                max_exp_avg_sq: amsgrad.then(|| State::F32(&mut s2)),
                stream,
            }];
            e.step_group(&cfg, &ctx, &mut t, &mut (), &th).unwrap();
        }
        "lamb" | "lamb_f32" => {
            let cfg = LambConfig {
                lr: 0.01,
                weight_decay: 0.01,
                ..Default::default()
            };
            let mut t = [LambTensor {
                weights: weights(f32_row, &mut w32, &mut top, &mut trail),
                grads: grads(f32_row, g32, g16),
                exp_avg: State::F32(&mut s0),
                exp_avg_sq: State::F32(&mut s1),
                stream,
            }];
            if LambConfig::check_workspace(&ws, &t).is_err() {
                ws = LambWorkspace::for_tensors(&t);
            }
            e.step_group(&cfg, &ctx, &mut t, &mut ws, &th).unwrap();
        }
        "lamb_bf16sr" => {
            let cfg = LambConfig {
                lr: 0.01,
                weight_decay: 0.01,
                ..Default::default()
            };
            let sr = halfstep::Rounding::Stochastic;
            let mut t = [LambTensor {
                weights: weights(f32_row, &mut w32, &mut top, &mut trail),
                grads: grads(f32_row, g32, g16),
                exp_avg: State::Bf16(&mut h0, sr),
                exp_avg_sq: State::Bf16(&mut h1, sr),
                stream,
            }];
            if LambConfig::check_workspace(&ws, &t).is_err() {
                ws = LambWorkspace::for_tensors(&t);
            }
            e.step_group(&cfg, &ctx, &mut t, &mut ws, &th).unwrap();
        }
        other => panic!("unknown kernel {other}; {usage}"),
    };
    // Same schedule as the peers: about 2e8 / n repetitions per batch (3..200), 5 batches.
    let reps = (2e8 as usize / n).clamp(3, 200);
    step();
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            (0..reps).for_each(|_| step());
            t.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!("{:.4}", times[2] * 1e9 / n as f64);
}

/// Where a buffer starts: `PastLine(b)`, `b` bytes past a 64-byte boundary; `InPage(b)`, `b`
/// bytes past a 4 KiB boundary; `Slot(s)`, as the package places state slot `s` of the weights.
#[derive(Clone, Copy)]
enum Place {
    PastLine(usize),
    InPage(usize),
    Slot(usize),
}

/// `n` copies of `x` starting at `place` (not a `Slot`: [`placed_from`]).
fn placed<T: Copy>(x: T, n: usize, place: Place) -> Placed<T> {
    match place {
        Place::PastLine(b) => Placed::at(x, n, 64, b, 0),
        Place::InPage(b) => Placed::at(x, n, 4096, b, 0),
        Place::Slot(_) => unreachable!("a slot is placed from the weights"),
    }
}

/// `n` copies of `x` starting at `place`, a `Slot` of `weights`.
fn placed_from<W, T: Copy>(weights: &[W], x: T, n: usize, place: Place) -> Placed<T> {
    match place {
        Place::Slot(s) => Placed::state_of(weights, x, n, s),
        place => placed(x, n, place),
    }
}

fn weights<'a>(
    f32_row: bool,
    w32: &'a mut [f32],
    top: &'a mut [bf16],
    trail: &'a mut [u16],
) -> Weights<'a> {
    if f32_row {
        Weights::F32(w32)
    } else {
        Weights::Split { top, trail }
    }
}

fn grads<'a>(f32_row: bool, g32: &'a [f32], g16: &'a [bf16]) -> Grads<'a> {
    if f32_row {
        Grads::F32(g32)
    } else {
        Grads::Bf16(g16)
    }
}
