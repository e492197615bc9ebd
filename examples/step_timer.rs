//! Times one of halfstep's optimizer steps the way `tools/peers_side_by_side.py` times the peers:
//! the median over 5 batches of repeated steps, in ns per parameter. Storage as the peer rows:
//! split weights + bf16 grads + f32 state (IPEX), or all f32 (`adamw_f32`, PyTorch's fused AdamW).
//!
//! `cargo run --release --example step_timer -- <sgd|adagrad|adam|lamb|adamw_f32> <elements> <threads> [grain]`
//! (`STEP_TIMER_HANDOFF=1`: the steps are handed to a pool the timing thread is not in).

use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Engine, Grads, LambConfig, LambTensor,
    LambWorkspace, SgdConfig, SgdTensor, State, Step, StepContext, TensorStream, Threads, Weights,
    bf16,
};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: step_timer <sgd|adagrad|adam|lamb|adamw_f32> <elements> <threads> [grain]";
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
    let w: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.618).sin() * 0.02).collect();
    let g32: Vec<f32> = w.iter().map(|x| x * 0.05).collect();
    let g16: Vec<bf16> = g32.iter().map(|&x| bf16::from_f32(x)).collect();
    let (mut top, mut trail) = (vec![bf16::ZERO; n], vec![0u16; n]);
    halfstep::convert::split(&w, &mut top, &mut trail).unwrap();
    let (mut w32, mut s0, mut s1) = (w.clone(), vec![0f32; n], vec![0f32; n]);
    let mut ws = LambWorkspace::default();
    let ctx = StepContext::new(1, 1);
    let stream = TensorStream::new(0);
    let mut step = || match kernel {
        "sgd" => {
            let cfg = SgdConfig {
                lr: 0.01,
                momentum: 0.9,
                weight_decay: 1e-4,
                ..Default::default()
            };
            let mut t = [SgdTensor {
                weights: Weights::Split {
                    top: &mut top,
                    trail: &mut trail,
                },
                grads: Grads::Bf16(&g16),
                momentum: Some(State::F32(&mut s0)),
                stream,
            }];
            e.step_group(&cfg, &ctx, &mut t, &mut (), &th).unwrap();
        }
        "adagrad" => {
            let cfg = AdagradConfig {
                lr: 0.01,
                weight_decay: 1e-4,
                ..Default::default()
            };
            let mut t = [AdagradTensor {
                weights: Weights::Split {
                    top: &mut top,
                    trail: &mut trail,
                },
                grads: Grads::Bf16(&g16),
                sum: State::F32(&mut s0),
                stream,
            }];
            e.step_group(&cfg, &ctx, &mut t, &mut (), &th).unwrap();
        }
        "adam" | "adamw_f32" => {
            let split = kernel == "adam";
            let cfg = AdamConfig {
                weight_decay: 1e-2,
                ..AdamConfig::adamw(1e-2)
            };
            let mut t = [AdamTensor {
                weights: if split {
                    Weights::Split {
                        top: &mut top,
                        trail: &mut trail,
                    }
                } else {
                    Weights::F32(&mut w32)
                },
                grads: if split {
                    Grads::Bf16(&g16)
                } else {
                    Grads::F32(&g32)
                },
                exp_avg: State::F32(&mut s0),
                exp_avg_sq: State::F32(&mut s1),
                max_exp_avg_sq: None,
                stream,
            }];
            e.step_group(&cfg, &ctx, &mut t, &mut (), &th).unwrap();
        }
        "lamb" => {
            let cfg = LambConfig {
                lr: 0.01,
                weight_decay: 0.01,
                ..Default::default()
            };
            let mut t = [LambTensor {
                weights: Weights::Split {
                    top: &mut top,
                    trail: &mut trail,
                },
                grads: Grads::Bf16(&g16),
                exp_avg: State::F32(&mut s0),
                exp_avg_sq: State::F32(&mut s1),
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
