//! Criterion benchmarks: every kernel on every available backend at 4K, 64K, 1M, 16M and 64M
//! elements, on 1 and 2 threads, each next to a same-traffic copy loop (reads and writes exactly
//! the bytes the kernel must move) run the same way: the roof. Throughput is reported in elements
//! and bytes; bytes per element are also in the group name. On `t` threads the tensor is cut into
//! `t` equal pieces (whole RNG groups and fp4 blocks, each with its own index base, as the
//! parallel driver cuts it) stepped at once on a pool of `t` threads. The optimizer steps' states
//! and trails are placed as the PyTorch package places them (`Placed::state_of`).
//!
//! `cargo bench --bench kernels` (all), or filter: `cargo bench --bench kernels -- 'adam.*/1Mx'`.
//! Environment: `HALFSTEP_BENCH_SIZES=65536,1048576` (elements), `HALFSTEP_BENCH_THREADS=1,2`,
//! `HALFSTEP_BENCH_SLOW=1` to include the reference above 1M and the portable backend above 16M.
//! `python3 tools/bench_report.py` turns the saved results into docs/bench/'s tables and plots.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use halfstep::rng::Purpose;
use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Backend, Engine, Grads, LambConfig,
    LambTensor, LambWorkspace, Rounding, SgdConfig, SgdTensor, State, StepContext, TensorStream,
    Threads, Weights, bf16, f16,
};
use std::hint::black_box;
use std::time::Duration;

#[path = "support/placed.rs"]
mod placed;
use placed::{FIRST_MOMENT, Placed, SECOND_MOMENT, TRAIL};

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

fn sizes() -> Vec<usize> {
    env_list(
        "HALFSTEP_BENCH_SIZES",
        &[1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 26],
    )
}

fn threads() -> Vec<usize> {
    env_list("HALFSTEP_BENCH_THREADS", &[1, 2])
}

/// One piece of a kernel's work (its own buffers), runnable on any thread.
type Piece = Box<dyn FnMut(Engine) + Send>;

/// Runs every piece, halving the list with `join` (on the pool the caller installed).
fn run_pieces(pieces: &mut [Piece], e: Engine) {
    match pieces.len() {
        0 => {}
        1 => pieces[0](e),
        k => {
            let (a, b) = pieces.split_at_mut(k / 2);
            rayon_core::join(|| run_pieces(a, e), || run_pieces(b, e));
        }
    }
}

fn label(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{}M", n >> 20)
    } else {
        format!("{}K", n >> 10)
    }
}

fn engines() -> Vec<Engine> {
    Backend::available()
        .into_iter()
        .map(|b| Engine::new(b).unwrap())
        .collect()
}

/// Moves `read` f32-sized words in and `write` out per element: the memory roof for a kernel of
/// the same traffic (`bytes = 4 * (read + write)` per element, in 32-bit words).
struct CopyLoop {
    src: Vec<Vec<u32>>,
    dst: Vec<Vec<u32>>,
}

impl CopyLoop {
    fn new(n: usize, read_bytes: f64, write_bytes: f64) -> Self {
        let words = |b: f64| (b * n as f64 / 4.0).ceil() as usize;
        CopyLoop {
            src: vec![vec![1u32; words(read_bytes)]],
            dst: vec![vec![0u32; words(write_bytes)]],
        }
    }
    fn run(&mut self) {
        // memcpy (glibc picks its fastest variant for the CPU) moves the written bytes; the rest of
        // the reads go through a vectorizable sum.
        let (s, d) = (&self.src[0], &mut self.dst[0]);
        let w = d.len().min(s.len());
        d[..w].copy_from_slice(&s[..w]);
        let extra: u32 = s[w..].iter().fold(0u32, |a, &x| a.wrapping_add(x));
        d[w..].fill(extra);
        black_box((extra, &d));
    }
}

/// Registers `name` for every size and thread count: one copy-loop roof and one run per backend.
/// `make(elements, index_base)` builds one piece.
fn group(
    c: &mut Criterion,
    name: &str,
    read_bytes: impl Into<f64>,
    write_bytes: impl Into<f64>,
    mut make: impl FnMut(usize, u64) -> Piece,
) {
    let (read_bytes, write_bytes) = (read_bytes.into(), write_bytes.into());
    for n in sizes() {
        for t in threads() {
            let pool = rayon_core::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap();
            let mut g = c.benchmark_group(format!("{name}/{}B-per-elem", read_bytes + write_bytes));
            g.throughput(Throughput::ElementsAndBytes {
                elements: n as u64,
                bytes: ((read_bytes + write_bytes) * n as f64) as u64,
            });
            if n >= 1 << 20 {
                g.sample_size(10)
                    .warm_up_time(Duration::from_millis(300))
                    .measurement_time(Duration::from_secs(1));
            } else {
                g.warm_up_time(Duration::from_millis(200))
                    .measurement_time(Duration::from_millis(700));
            }
            let id = |f: &str| BenchmarkId::new(f, format!("{}x{t}T", label(n)));
            // One thread runs on the calling thread, as a single-tensor call does.
            let timed = |pieces: &mut Vec<Piece>, e: Engine| {
                if t == 1 {
                    run_pieces(pieces, e)
                } else {
                    pool.install(|| run_pieces(pieces, e))
                }
            };
            // Buffers are built on a row's first call: criterion calls only the rows its filter
            // selects, and building every group's 64M inputs took most of a filtered run.
            let piece = n / t;
            let mut copy: Option<Vec<Piece>> = None;
            let any = Engine::new(Backend::Reference).unwrap();
            g.bench_function(id("copy-roof"), |b| {
                let copy = copy.get_or_insert_with(|| {
                    (0..t)
                        .map(|_| {
                            let mut c = CopyLoop::new(piece, read_bytes, write_bytes);
                            Box::new(move |_: Engine| c.run()) as Piece
                        })
                        .collect()
                });
                b.iter(|| timed(copy, any))
            });
            drop(copy);
            let mut run: Option<Vec<Piece>> = None;
            for e in engines() {
                // Seconds per sample, and not product paths (their smaller sizes show the trend):
                // the reference above 1M and the portable backend above 16M run only when asked.
                let slow = (e.backend() == Backend::Reference && n > 1 << 20)
                    || (e.backend() == Backend::Portable && n > 1 << 24);
                if slow && std::env::var_os("HALFSTEP_BENCH_SLOW").is_none() {
                    continue;
                }
                g.bench_function(id(e.backend().name()), |b| {
                    let run = run.get_or_insert_with(|| {
                        (0..t).map(|k| make(piece, (k * piece) as u64)).collect()
                    });
                    b.iter(|| timed(run, e))
                });
            }
            g.finish();
        }
    }
}

/// The bench tensors' stream: one id, its elements from `base`.
fn stream(base: u64) -> TensorStream {
    TensorStream {
        id: 1,
        index_base: base,
    }
}

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i as f32) * 0.618).sin()).collect()
}

/// IPEX-style model state: split weights (top, trail) and bf16 gradients.
fn split_model(n: usize) -> (Vec<bf16>, Placed<u16>, Vec<bf16>) {
    let w = data(n);
    let mut top = vec![bf16::ZERO; n];
    let mut trail = Placed::state_of(&top, 0u16, n, TRAIL);
    halfstep::convert::split(&w, &mut top, &mut trail).unwrap();
    let g = w.iter().map(|&x| bf16::from_f32(x * 0.01)).collect();
    (top, trail, g)
}

fn benches(c: &mut Criterion) {
    let ctx = StepContext::new(7, 3);

    group(c, "random_bits", 0, 2, |n, base| {
        let stream = stream(base);
        let mut out = vec![0u16; n];
        Box::new(move |e: Engine| {
            e.fill_element_bits(&ctx, &stream, Purpose::Weights, &mut out)
                .unwrap()
        })
    });
    for (name, r) in [
        ("f32_to_bf16_nearest", Rounding::NearestEven),
        ("f32_to_bf16_stochastic", Rounding::Stochastic),
    ] {
        group(c, name, 4, 2, |n, base| {
            let stream = stream(base);
            let (src, mut dst) = (data(n), vec![bf16::ZERO; n]);
            Box::new(move |e: Engine| e.f32_to_bf16(&src, &mut dst, r, &ctx, &stream).unwrap())
        });
    }
    for (name, r) in [
        ("f32_to_f16_nearest", Rounding::NearestEven),
        ("f32_to_f16_stochastic", Rounding::Stochastic),
    ] {
        group(c, name, 4, 2, |n, base| {
            let stream = stream(base);
            let (src, mut dst) = (data(n), vec![f16::ZERO; n]);
            Box::new(move |e: Engine| e.f32_to_f16(&src, &mut dst, r, &ctx, &stream).unwrap())
        });
    }

    // IPEX's rows: split weights (top + trail), bf16 gradients, f32 state.
    group(c, "sgd_split_bf16grad_f32momentum", 10, 8, |n, base| {
        let stream = stream(base);
        let (mut top, mut trail, g) = split_model(n);
        let mut m = Placed::state_of(&top, 0f32, n, FIRST_MOMENT);
        let cfg = SgdConfig {
            lr: 1e-3,
            momentum: 0.9,
            ..Default::default()
        };
        Box::new(move |e: Engine| {
            e.sgd_step(
                &cfg,
                &ctx,
                &mut SgdTensor {
                    weights: Weights::Split {
                        top: &mut top,
                        trail: &mut trail,
                    },
                    grads: Grads::Bf16(&g),
                    momentum: Some(State::F32(&mut m)),
                    stream,
                },
            )
            .unwrap()
        })
    });
    group(c, "adagrad_split_bf16grad_f32sum", 10, 8, |n, base| {
        let stream = stream(base);
        let (mut top, mut trail, g) = split_model(n);
        let mut s = Placed::state_of(&top, 0.1f32, n, FIRST_MOMENT);
        let cfg = AdagradConfig::default();
        Box::new(move |e: Engine| {
            e.adagrad_step(
                &cfg,
                &ctx,
                &mut AdagradTensor {
                    weights: Weights::Split {
                        top: &mut top,
                        trail: &mut trail,
                    },
                    grads: Grads::Bf16(&g),
                    sum: State::F32(&mut s),
                    stream,
                },
            )
            .unwrap()
        })
    });
    group(c, "adam_split_bf16grad_f32state", 14, 12, |n, base| {
        let stream = stream(base);
        let (mut top, mut trail, g) = split_model(n);
        let (mut m, mut v) = (
            Placed::state_of(&top, 0f32, n, FIRST_MOMENT),
            Placed::state_of(&top, 0f32, n, SECOND_MOMENT),
        );
        let cfg = AdamConfig::adam(1e-3);
        Box::new(move |e: Engine| {
            e.adam_step(
                &cfg,
                &ctx,
                &mut AdamTensor {
                    weights: Weights::Split {
                        top: &mut top,
                        trail: &mut trail,
                    },
                    grads: Grads::Bf16(&g),
                    exp_avg: State::F32(&mut m),
                    exp_avg_sq: State::F32(&mut v),
                    max_exp_avg_sq: None,
                    stream,
                },
            )
            .unwrap()
        })
    });
    // PyTorch's fused AdamW row: everything f32; and f32 master weights and states with bf16
    // gradients (ZeRO-Offload's layout with the gradients as an accelerator sends them).
    for (name, bf16_grads) in [("adamw_f32", false), ("adamw_f32_bf16grad", true)] {
        let read_bytes = if bf16_grads { 14 } else { 16 };
        group(c, name, read_bytes, 12, |n, base| {
            let stream = stream(base);
            let (mut w, g) = (data(n), data(n));
            let gb: Vec<bf16> = match bf16_grads {
                true => g.iter().map(|&x| bf16::from_f32(x)).collect(),
                false => Vec::new(),
            };
            let (mut m, mut v) = (
                Placed::state_of(&w, 0f32, n, FIRST_MOMENT),
                Placed::state_of(&w, 0f32, n, SECOND_MOMENT),
            );
            let cfg = AdamConfig::adamw(1e-3);
            Box::new(move |e: Engine| {
                e.adam_step(
                    &cfg,
                    &ctx,
                    &mut AdamTensor {
                        weights: Weights::F32(&mut w),
                        grads: if bf16_grads {
                            Grads::Bf16(&gb)
                        } else {
                            Grads::F32(&g)
                        },
                        exp_avg: State::F32(&mut m),
                        exp_avg_sq: State::F32(&mut v),
                        max_exp_avg_sq: None,
                        stream,
                    },
                )
                .unwrap()
            })
        });
    }
    // f32 weights and gradients with bf16 states rounded stochastically (12 bytes per parameter).
    group(c, "adamw_f32_bf16sr_states", 12, 8, |n, base| {
        let stream = stream(base);
        let (mut w, g) = (data(n), data(n));
        let (mut m, mut v) = (
            Placed::state_of(&w, bf16::ZERO, n, FIRST_MOMENT),
            Placed::state_of(&w, bf16::ZERO, n, SECOND_MOMENT),
        );
        let cfg = AdamConfig::adamw(1e-3);
        Box::new(move |e: Engine| {
            e.adam_step(
                &cfg,
                &ctx,
                &mut AdamTensor {
                    weights: Weights::F32(&mut w),
                    grads: Grads::F32(&g),
                    exp_avg: State::Bf16(&mut m, Rounding::Stochastic),
                    exp_avg_sq: State::Bf16(&mut v, Rounding::Stochastic),
                    max_exp_avg_sq: None,
                    stream,
                },
            )
            .unwrap()
        })
    });
    // bf16 weights and bf16 states, every store stochastic (the RNG-heaviest step) or every store
    // rounded to nearest (no random bits; a layout with run-time access).
    for (name, r) in [
        ("adamw_bf16_sr_everywhere", Rounding::Stochastic),
        ("adamw_bf16_nearest_everywhere", Rounding::NearestEven),
    ] {
        group(c, name, 8, 6, |n, base| {
            let stream = stream(base);
            let w = data(n);
            let mut wb: Vec<bf16> = w.iter().map(|&x| bf16::from_f32(x)).collect();
            let g: Vec<bf16> = w.iter().map(|&x| bf16::from_f32(x * 0.01)).collect();
            let (mut m, mut v) = (
                Placed::state_of(&wb, bf16::ZERO, n, FIRST_MOMENT),
                Placed::state_of(&wb, bf16::ZERO, n, SECOND_MOMENT),
            );
            let cfg = AdamConfig::adamw(1e-3);
            Box::new(move |e: Engine| {
                e.adam_step(
                    &cfg,
                    &ctx,
                    &mut AdamTensor {
                        weights: Weights::Bf16(&mut wb, r),
                        grads: Grads::Bf16(&g),
                        exp_avg: State::Bf16(&mut m, r),
                        exp_avg_sq: State::Bf16(&mut v, r),
                        max_exp_avg_sq: None,
                        stream,
                    },
                )
                .unwrap()
            })
        });
    }
    // LAMB reads p, g, m, v and writes m, v in pass 1, reads p, m, v and writes p in pass 2.
    group(c, "lamb_split_bf16grad_f32state", 28, 12, |n, base| {
        let stream = stream(base);
        let (mut top, mut trail, g) = split_model(n);
        let (mut m, mut v) = (
            Placed::state_of(&top, 0f32, n, FIRST_MOMENT),
            Placed::state_of(&top, 0f32, n, SECOND_MOMENT),
        );
        let cfg = LambConfig::default();
        Box::new(move |e: Engine| {
            e.lamb_step(
                &cfg,
                &ctx,
                &mut LambTensor {
                    weights: Weights::Split {
                        top: &mut top,
                        trail: &mut trail,
                    },
                    grads: Grads::Bf16(&g),
                    exp_avg: State::F32(&mut m),
                    exp_avg_sq: State::F32(&mut v),
                    stream,
                },
            )
            .unwrap()
        })
    });
}

/// The quantizers on every backend: fp8 E4M3 / E5M2 and NVFP4 / MXFP4, nearest and stochastic,
/// and their decoders, each next to a copy loop moving the same bytes (fp4: half a byte per
/// element plus one scale byte per block).
fn quantizers(c: &mut Criterion) {
    use halfstep::quant::Fp8;
    let ctx = StepContext::new(7, 3);
    for (mode, r) in [
        ("nearest", Rounding::NearestEven),
        ("stochastic", Rounding::Stochastic),
    ] {
        for (name, fmt) in [("e4m3", Fp8::E4M3), ("e5m2", Fp8::E5M2)] {
            group(c, &format!("{name}_{mode}"), 4.0, 1.0, |n, base| {
                let stream = stream(base);
                let src = data(n);
                let mut codes = vec![0u8; n];
                Box::new(move |e: Engine| {
                    e.f32_to_fp8(&src, &mut codes, fmt, r, &ctx, &stream)
                        .unwrap()
                })
            });
        }
        // NVFP4 (blocks of 16, a tensor scale taken per call as a user would) and MXFP4 (32).
        for (name, block) in [("nvfp4", 16), ("mxfp4", 32)] {
            let nv = block == 16;
            group(
                c,
                &format!("{name}_{mode}"),
                4.0,
                0.5 + 1.0 / block as f64,
                |n, base| {
                    let stream = stream(base);
                    let src = data(n);
                    let (mut packed, mut scales) =
                        (vec![0u8; n.div_ceil(2)], vec![0u8; n.div_ceil(block)]);
                    Box::new(move |e: Engine| {
                        let (p, s) = (&mut packed, &mut scales);
                        if nv {
                            let pts = e.nvfp4_tensor_scale(&src).unwrap();
                            e.quantize_nvfp4(&src, pts, p, s, r, &ctx, &stream).unwrap()
                        } else {
                            e.quantize_mxfp4(&src, p, s, r, &ctx, &stream).unwrap()
                        }
                    })
                },
            );
        }
    }
    group(c, "e4m3_to_f32", 1.0, 4.0, |n, _| {
        let codes: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
        let mut dst = vec![0f32; n];
        Box::new(move |e: Engine| e.fp8_to_f32(&codes, &mut dst, Fp8::E4M3).unwrap())
    });
    group(c, "nvfp4_to_f32", 0.5 + 1.0 / 16.0, 4.0, |n, _| {
        let packed: Vec<u8> = (0..n.div_ceil(2)).map(|i| (i * 37) as u8).collect();
        let scales: Vec<u8> = (0..n.div_ceil(16)).map(|i| (i % 100) as u8 + 8).collect();
        let mut dst = vec![0f32; n];
        Box::new(move |e: Engine| {
            e.dequantize_nvfp4(&packed, &scales, 0.01, &mut dst)
                .unwrap()
        })
    });
}

/// What stochastic rounding costs each optimizer: `sr_<optimizer>_<storage>`, bf16 gradients,
/// with IPEX's split weights and f32 states (`split`, the exact-f32 baseline), split weights and
/// bf16 states rounded stochastically (`split_bf16sr_states`), or bf16 weights rounded
/// stochastically and f32 states (`bf16sr_weights`). SGD with momentum, Adagrad, AdamW, LAMB.
fn sr_costs(c: &mut Criterion) {
    let ctx = StepContext::new(7, 3);
    for opt in ["sgd", "adagrad", "adamw", "lamb"] {
        let states = match opt {
            "sgd" | "adagrad" => 1.0,
            _ => 2.0,
        };
        // bf16 weights rounded to nearest: what the stochastic weights' rounding costs over it.
        for storage in [
            "split",
            "split_bf16sr_states",
            "bf16sr_weights",
            "bf16nearest_weights",
        ] {
            let (wb, sb) = match storage {
                "split" => (4.0, 4.0),
                "split_bf16sr_states" => (4.0, 2.0),
                _ => (2.0, 4.0),
            };
            // Read weights, gradients and states, write weights and states (LAMB reads the weights
            // and states again in its second pass). LAMB steps as the C ABI and the package step
            // it, with a workspace: up to 2^20 elements its first pass writes each element's
            // direction and its second reads that in place of the states (4 bytes more per element
            // than counted here with bf16 states, as many with f32 ones).
            let passes = if opt == "lamb" { 2.0 } else { 1.0 };
            let read = passes * (wb + states * sb) + 2.0;
            let write = wb + states * sb;
            group(c, &format!("sr_{opt}_{storage}"), read, write, |n, base| {
                let stream = stream(base);
                let (mut top, mut trail, g) = split_model(n);
                let mut w16 = top.clone();
                // Placed as the PyTorch package places them: allocated one after another, the
                // bf16-state rows at 64M elements took 1.7-3.6x the time on the Zen 4 VM.
                let (mut a32, mut b32) = (
                    Placed::state_of(&top, 0.1f32, n, FIRST_MOMENT),
                    Placed::state_of(&top, 0.1f32, n, SECOND_MOMENT),
                );
                let (mut a16, mut b16) = (
                    Placed::state_of(&top, bf16::from_f32(0.1), n, FIRST_MOMENT),
                    Placed::state_of(&top, bf16::from_f32(0.1), n, SECOND_MOMENT),
                );
                let bf16_states = storage == "split_bf16sr_states";
                let bf16_weights = match storage {
                    "bf16sr_weights" => Some(Rounding::Stochastic),
                    "bf16nearest_weights" => Some(Rounding::NearestEven),
                    _ => None,
                };
                let mut ws: Option<LambWorkspace> = None;
                Box::new(move |e: Engine| {
                    let weights = match bf16_weights {
                        Some(r) => Weights::Bf16(&mut w16, r),
                        None => Weights::Split {
                            top: &mut top,
                            trail: &mut trail,
                        },
                    };
                    let (sa, sb) = if bf16_states {
                        (
                            State::Bf16(&mut a16, Rounding::Stochastic),
                            State::Bf16(&mut b16, Rounding::Stochastic),
                        )
                    } else {
                        (State::F32(&mut a32), State::F32(&mut b32))
                    };
                    let grads = Grads::Bf16(&g);
                    match opt {
                        "sgd" => {
                            let cfg = SgdConfig {
                                lr: 1e-3,
                                momentum: 0.9,
                                ..Default::default()
                            };
                            let mut t = SgdTensor {
                                weights,
                                grads,
                                momentum: Some(sa),
                                stream,
                            };
                            e.sgd_step(&cfg, &ctx, &mut t).unwrap()
                        }
                        "adagrad" => {
                            let mut t = AdagradTensor {
                                weights,
                                grads,
                                sum: sa,
                                stream,
                            };
                            e.adagrad_step(&AdagradConfig::default(), &ctx, &mut t)
                                .unwrap()
                        }
                        "adamw" => {
                            let mut t = AdamTensor {
                                weights,
                                grads,
                                exp_avg: sa,
                                exp_avg_sq: sb,
                                max_exp_avg_sq: None,
                                stream,
                            };
                            e.adam_step(&AdamConfig::adamw(1e-3), &ctx, &mut t).unwrap()
                        }
                        _ => {
                            let mut t = [LambTensor {
                                weights,
                                grads,
                                exp_avg: sa,
                                exp_avg_sq: sb,
                                stream,
                            }];
                            // Sized on the first call (criterion's warm-up), not in the timed ones.
                            let ws = ws.get_or_insert_with(|| LambWorkspace::for_tensors(&t));
                            let cfg = LambConfig::default();
                            e.step_group(&cfg, &ctx, &mut t, ws, &Threads::current())
                                .unwrap()
                        }
                    }
                })
            });
        }
    }
}

criterion_group!(kernels, benches, quantizers, sr_costs);
criterion_main!(kernels);
