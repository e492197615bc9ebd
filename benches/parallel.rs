//! Thread scaling of group steps (criterion): each optimizer in IPEX's storage combination (split
//! weights, bf16 gradients, f32 state; AdamW all f32 as PyTorch's fused row) over single tensors
//! and over a GPT-2-small-shaped parameter list (148 tensors, 124.4M parameters), on pools of
//! each thread count, next to a same-traffic copy loop run on the same pool (the roof).
//!
//! `cargo bench --bench parallel`; environment: `HALFSTEP_BENCH_THREADS=1,2` (pool sizes),
//! `HALFSTEP_BENCH_WORKLOADS=64K,1M,16M,64M,gpt2` (workloads), `HALFSTEP_BENCH_OPTIMIZERS=sgd,lamb`
//! (default all). A `grain` group times steps of 16K..512K elements with the group kept on the
//! calling thread vs handed to the pool, which is how `DEFAULT_GRAIN` was chosen.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Engine, Grads, LambConfig, LambTensor,
    LambWorkspace, SgdConfig, SgdTensor, State, StepContext, TensorStream, Threads, Weights, bf16,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// GPT-2 small's parameter shapes (token and position embeddings, 12 blocks, final norm).
fn gpt2_small() -> Vec<usize> {
    let (d, vocab, ctx) = (768, 50257, 1024);
    let mut v = vec![vocab * d, ctx * d];
    for _ in 0..12 {
        v.extend([
            d,
            d,
            d * 3 * d,
            3 * d,
            d * d,
            d,
            d,
            d,
            d * 4 * d,
            4 * d,
            4 * d * d,
            d,
        ]);
    }
    v.extend([d, d]);
    v
}

fn workload(name: &str) -> Vec<usize> {
    match name {
        "gpt2" => gpt2_small(),
        s => {
            let (num, unit) = s.split_at(s.len() - 1);
            let n: usize = num.parse().expect("a size like 64K or 16M");
            vec![n << if unit == "M" { 20 } else { 10 }]
        }
    }
}

fn pool(threads: usize) -> (Arc<rayon_core::ThreadPool>, Threads) {
    let p = Arc::new(
        rayon_core::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap(),
    );
    (p.clone(), Threads::pool(p))
}

/// The buffers of a model in IPEX's layout (and f32 copies for the AdamW row).
struct Model {
    top: Vec<Vec<bf16>>,
    trail: Vec<Vec<u16>>,
    g16: Vec<Vec<bf16>>,
    s: [Vec<Vec<f32>>; 2],
    w32: Vec<Vec<f32>>,
    g32: Vec<Vec<f32>>,
}

impl Model {
    fn new(sizes: &[usize], f32_copies: bool) -> Model {
        let val = |i: usize| ((i as f32) * 0.618).sin() * 0.02;
        let w: Vec<Vec<f32>> = sizes.iter().map(|&n| (0..n).map(val).collect()).collect();
        let mut top: Vec<Vec<bf16>> = sizes.iter().map(|&n| vec![bf16::ZERO; n]).collect();
        let mut trail: Vec<Vec<u16>> = sizes.iter().map(|&n| vec![0; n]).collect();
        for ((w, t), l) in w.iter().zip(&mut top).zip(&mut trail) {
            halfstep::convert::split(w, t, l).unwrap();
        }
        let g32: Vec<Vec<f32>> = w
            .iter()
            .map(|w| w.iter().map(|x| x * 0.01).collect())
            .collect();
        let zeros = || sizes.iter().map(|&n| vec![0.0f32; n]).collect::<Vec<_>>();
        Model {
            g16: g32
                .iter()
                .map(|g| g.iter().map(|&x| bf16::from_f32(x)).collect())
                .collect(),
            top,
            trail,
            s: [zeros(), zeros()],
            w32: if f32_copies { w } else { Vec::new() },
            g32: if f32_copies { g32 } else { Vec::new() },
        }
    }
}

/// The same traffic as a kernel, moved by memcpy and a reduction on the same pool: `write`
/// bytes per element copied, the rest of `read` summed.
struct CopyRoof {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl CopyRoof {
    fn new(n: usize, read: usize, write: usize) -> CopyRoof {
        CopyRoof {
            src: vec![1u8; n * read],
            dst: vec![0u8; n * write],
        }
    }

    fn run(&mut self, threads: usize) {
        fn go(src: &[u8], dst: &mut [u8], pieces: usize) -> u64 {
            if pieces > 1 {
                let half = pieces / 2;
                let (s, d) = (
                    (src.len() / pieces * half) & !63,
                    (dst.len() / pieces * half) & !63,
                );
                let (sa, sb) = src.split_at(s);
                let (da, db) = dst.split_at_mut(d);
                let (a, b) = rayon_core::join(|| go(sa, da, half), || go(sb, db, pieces - half));
                return a.wrapping_add(b);
            }
            let w = dst.len().min(src.len());
            dst[..w].copy_from_slice(&src[..w]);
            src[w..]
                .chunks(8)
                .map(|c| c.iter().map(|&b| u64::from(b)).sum::<u64>())
                .fold(0u64, u64::wrapping_add)
        }
        black_box(go(&self.src, &mut self.dst, threads * 4));
    }
}

struct Opt {
    name: &'static str,
    /// Bytes read and written per element by one step (both LAMB passes).
    read: usize,
    write: usize,
}

const OPTS: [Opt; 5] = [
    Opt {
        name: "sgd_split_bf16grad_f32momentum",
        read: 10,
        write: 8,
    },
    Opt {
        name: "adagrad_split_bf16grad_f32sum",
        read: 10,
        write: 8,
    },
    Opt {
        name: "adam_split_bf16grad_f32state",
        read: 14,
        write: 12,
    },
    Opt {
        name: "adamw_f32",
        read: 16,
        write: 12,
    },
    Opt {
        name: "lamb_split_bf16grad_f32state",
        read: 26,
        write: 12,
    },
];

fn split_weights<'a>(top: &'a mut [bf16], trail: &'a mut [u16]) -> Weights<'a> {
    Weights::Split { top, trail }
}

/// One group step of optimizer `name` over the whole model.
fn step(
    name: &str,
    m: &mut Model,
    e: &Engine,
    ctx: &StepContext,
    threads: &Threads,
    ws: &mut LambWorkspace,
) {
    let Model {
        top,
        trail,
        g16,
        s: [s0, s1],
        w32,
        g32,
    } = m;
    let parts = top
        .iter_mut()
        .zip(trail.iter_mut())
        .zip(g16.iter())
        .zip(s0.iter_mut().zip(s1.iter_mut()))
        .enumerate();
    match name {
        "sgd_split_bf16grad_f32momentum" => {
            let cfg = SgdConfig {
                lr: 1e-3,
                momentum: 0.9,
                ..Default::default()
            };
            let mut ts: Vec<_> = parts
                .map(|(i, (((t, l), g), (a, _)))| SgdTensor {
                    weights: split_weights(t, l),
                    grads: Grads::Bf16(g),
                    momentum: Some(State::F32(a)),
                    stream: TensorStream::new(i as u32),
                })
                .collect();
            e.step_group(&cfg, ctx, &mut ts, &mut (), threads).unwrap();
        }
        "adagrad_split_bf16grad_f32sum" => {
            let cfg = AdagradConfig::default();
            let mut ts: Vec<_> = parts
                .map(|(i, (((t, l), g), (a, _)))| AdagradTensor {
                    weights: split_weights(t, l),
                    grads: Grads::Bf16(g),
                    sum: State::F32(a),
                    stream: TensorStream::new(i as u32),
                })
                .collect();
            e.step_group(&cfg, ctx, &mut ts, &mut (), threads).unwrap();
        }
        "adam_split_bf16grad_f32state" => {
            let cfg = AdamConfig::adam(1e-3);
            let mut ts: Vec<_> = parts
                .map(|(i, (((t, l), g), (a, b)))| AdamTensor {
                    weights: split_weights(t, l),
                    grads: Grads::Bf16(g),
                    exp_avg: State::F32(a),
                    exp_avg_sq: State::F32(b),
                    max_exp_avg_sq: None,
                    stream: TensorStream::new(i as u32),
                })
                .collect();
            e.step_group(&cfg, ctx, &mut ts, &mut (), threads).unwrap();
        }
        "adamw_f32" => {
            let cfg = AdamConfig::adamw(1e-3);
            let mut ts: Vec<_> = w32
                .iter_mut()
                .zip(g32.iter())
                .zip(s0.iter_mut().zip(s1.iter_mut()))
                .enumerate()
                .map(|(i, ((w, g), (a, b)))| AdamTensor {
                    weights: Weights::F32(w),
                    grads: Grads::F32(g),
                    exp_avg: State::F32(a),
                    exp_avg_sq: State::F32(b),
                    max_exp_avg_sq: None,
                    stream: TensorStream::new(i as u32),
                })
                .collect();
            e.step_group(&cfg, ctx, &mut ts, &mut (), threads).unwrap();
        }
        "lamb_split_bf16grad_f32state" => {
            let cfg = LambConfig::default();
            let mut ts: Vec<_> = parts
                .map(|(i, (((t, l), g), (a, b)))| LambTensor {
                    weights: split_weights(t, l),
                    grads: Grads::Bf16(g),
                    exp_avg: State::F32(a),
                    exp_avg_sq: State::F32(b),
                    stream: TensorStream::new(i as u32),
                })
                .collect();
            if ws_too_small(ws, &ts) {
                *ws = LambWorkspace::for_tensors(&ts);
            }
            e.step_group(&cfg, ctx, &mut ts, ws, threads).unwrap();
        }
        other => panic!("unknown optimizer {other}"),
    }
}

fn ws_too_small(ws: &LambWorkspace, ts: &[LambTensor<'_>]) -> bool {
    use halfstep::Step;
    LambConfig::check_workspace(ws, ts).is_err()
}

fn configure(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, n: usize) {
    if n >= 1 << 22 {
        // One step per sample: a 64M step takes ~0.1 s on one thread.
        g.sampling_mode(criterion::SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
    } else {
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
    }
}

fn scaling(c: &mut Criterion) {
    let e = Engine::global().unwrap();
    let ctx = StepContext::new(7, 3);
    let threads: Vec<usize> = env_list("HALFSTEP_BENCH_THREADS", "1,2")
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let wanted = env_list("HALFSTEP_BENCH_OPTIMIZERS", &OPTS.map(|o| o.name).join(","));
    for w in env_list("HALFSTEP_BENCH_WORKLOADS", "64K,1M,16M,64M,gpt2") {
        let sizes = workload(&w);
        let n: usize = sizes.iter().sum();
        let mut model = Model::new(&sizes, wanted.iter().any(|o| o.starts_with("adamw")));
        let mut ws = LambWorkspace::default();
        for o in OPTS
            .iter()
            .filter(|o| wanted.iter().any(|x| o.name.starts_with(x.as_str())))
        {
            let mut g = c.benchmark_group(format!("{}/{}B-per-elem/{w}", o.name, o.read + o.write));
            g.throughput(Throughput::Elements(n as u64));
            configure(&mut g, n);
            let mut roof = CopyRoof::new(n, o.read, o.write);
            for &t in &threads {
                let (p, th) = pool(t);
                g.bench_function(BenchmarkId::new("copy-roof", format!("{t}T")), |b| {
                    b.iter(|| p.install(|| roof.run(t)))
                });
                g.bench_function(BenchmarkId::new(e.backend().name(), format!("{t}T")), |b| {
                    b.iter(|| step(o.name, &mut model, &e, &ctx, &th, &mut ws))
                });
            }
            g.finish();
        }
    }
}

/// Where the calling thread stops being the better place: split-Adam steps of growing size on
/// two threads with the grain above the size (stays on the caller) and at the split unit.
fn grain(c: &mut Criterion) {
    let e = Engine::global().unwrap();
    let ctx = StepContext::new(7, 3);
    let t: usize = env_list("HALFSTEP_BENCH_THREADS", "1,2")
        .iter()
        .map(|t| t.parse().unwrap())
        .max()
        .unwrap();
    for k in [16usize, 32, 64, 128, 256, 512] {
        let n = k << 10;
        let mut model = Model::new(&[n], false);
        let mut ws = LambWorkspace::default();
        let mut g = c.benchmark_group(format!("grain/adam_split/{k}K"));
        g.throughput(Throughput::Elements(n as u64));
        configure(&mut g, n);
        let caller = Threads::current();
        let spread = pool(t).1.with_grain(n / (2 * t));
        for (name, th) in [("calling-thread", &caller), ("pool", &spread)] {
            g.bench_function(BenchmarkId::new(name, format!("{t}T")), |b| {
                b.iter(|| {
                    step(
                        "adam_split_bf16grad_f32state",
                        &mut model,
                        &e,
                        &ctx,
                        th,
                        &mut ws,
                    )
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, grain, scaling);
criterion_main!(benches);
