//! Thread-count invariance: a group step gives the same bits on 1, 2, 3, 4, 7 and 16 threads (rayon
//! pools, teams and an OpenMP-like runtime, and on the calling thread, and on rayon's global pool), for every backend and
//! optimizer, and the same bits as stepping each tensor alone. With the finest grain, pools of
//! several threads cut the larger tensors at many 2048-element boundaries (pieces of about
//! elements / (4 × threads)), and teams give each member a share of at least 2048 elements.
//! `Threads::for_each_piece` hands out every element once on each of those pools.

mod common;
use common::rng;
use halfstep::fuzzing::{Case, Kinds, OptimizerStep, TensorData, internals};
use halfstep::{
    AdagradConfig, AdamConfig, Backend, Engine, LambConfig, LambTensor, LambWorkspace, OpenMp,
    Optimizer, Replica, SPLIT_ALIGN, SgdConfig, StepContext, TensorStream, Threads,
    calling_thread_grain,
};
use rand_core::Rng;
use std::sync::Arc;

const POOL_SIZES: [usize; 6] = [1, 2, 3, 4, 7, 16];

fn pool(threads: usize) -> Arc<rayon_core::ThreadPool> {
    Arc::new(
        rayon_core::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap(),
    )
}

/// Every way of running a group the tests compare: the calling thread, the global pool, and
/// pools of every size in [`POOL_SIZES`] with the finest grain and with a middling one.
fn thread_setups() -> Vec<(String, Threads)> {
    let mut v = vec![
        ("current".to_string(), Threads::current()),
        ("global".to_string(), Threads::global()),
        (
            "global, finest grain".to_string(),
            Threads::global().with_grain(1),
        ),
    ];
    for n in POOL_SIZES {
        let p = pool(n);
        v.push((
            format!("{n} threads, finest grain"),
            Threads::pool(p.clone()).with_grain(1),
        ));
        v.push((
            format!("{n} threads, grain 3 x {SPLIT_ALIGN}"),
            Threads::pool(p).with_grain(3 * SPLIT_ALIGN),
        ));
        let team = Threads::calling_thread_pool(n).unwrap();
        v.push((format!("team of {n}"), team.clone()));
        v.push((format!("team of {n}, finest grain"), team.with_grain(1)));
        let omp = Threads::openmp(openmp_like(), n);
        v.push((format!("OpenMP-like runtime, {n} threads"), omp.clone()));
        v.push((
            format!("OpenMP-like runtime, {n} threads, finest grain"),
            omp.with_grain(1),
        ));
    }
    v.push((
        "OpenMP-like runtime, its own count (3)".to_string(),
        Threads::openmp(openmp_like(), 0).with_grain(1),
    ));
    v
}

/// A stand-in with libgomp's entry points, for `Threads::openmp` where no OpenMP runtime is linked
/// (tests/c/openmp.c steps on a real one): each region starts its threads afresh, numbers them
/// `0..n` with the caller as 0, and returns when all have returned; its own count is 3.
fn openmp_like() -> OpenMp {
    internals::openmp_stand_in()
}

/// (length, index base) of the group's tensors: tiny, odd, straddling norm blocks, several
/// blocks, one long enough to be cut many times, and two shards of one stream.
const SHAPES: [(usize, u64, u32); 9] = [
    (1, 0, 0),
    (17, 5, 1),
    (2047, 1, 2),
    (2049, 2047, 3),
    (6000, 100, 4),
    (40_000, 3, 5),
    (3, 2048 * 7 - 1, 6),
    (4500, 0, 7),
    (4500, 4500, 7),
];

/// A group with a different storage combination per tensor.
fn group(seed: u64, combo: usize) -> Vec<TensorData> {
    let mut r = rng(seed);
    let ctx = StepContext {
        seed: r.next_u64(),
        step: 3,
        replica: Replica::Differing(2),
    };
    SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(len, index_base, id))| {
            let case = Case {
                len,
                off: i % 16,
                ctx,
                stream: TensorStream { id, index_base },
            };
            let mut vals = |scale: f32| -> Vec<f32> {
                (0..len + case.off)
                    .map(|_| common::uniform(&mut r, -scale, scale))
                    .collect()
            };
            let (w, g) = (vals(1.0), vals(0.1));
            let s = [
                vals(0.01),
                vals(0.01).iter().map(|x| x.abs()).collect(),
                vals(0.01).iter().map(|x| x.abs()).collect(),
            ];
            TensorData::new(case, Kinds::nth(combo + 37 * i), w, g, s)
        })
        .collect()
}

fn steps() -> Vec<OptimizerStep> {
    vec![
        OptimizerStep::Sgd(
            SgdConfig {
                lr: 0.1,
                momentum: 0.9,
                nesterov: true,
                weight_decay: 1e-4,
                ..Default::default()
            },
            true,
        ),
        OptimizerStep::Sgd(SgdConfig::default(), false),
        OptimizerStep::Adagrad(AdagradConfig::default()),
        OptimizerStep::Adam(
            AdamConfig {
                amsgrad: true,
                ..AdamConfig::adam(1e-3)
            },
            true,
        ),
        OptimizerStep::Adam(AdamConfig::adamw(1e-3), false),
        OptimizerStep::Lamb(LambConfig::default()),
        OptimizerStep::Lamb(LambConfig {
            max_trust_ratio: Some(0.5),
            weight_decay: 0.0,
            ..Default::default()
        }),
    ]
}

fn bits(ds: &[TensorData]) -> Vec<Vec<u32>> {
    ds.iter().map(TensorData::bits).collect()
}

fn engines() -> Vec<Engine> {
    common::available_engines("parallel", true)
}

/// A step, the group it runs on, and the bits it must give.
type GroupCase = (OptimizerStep, Vec<TensorData>, Vec<Vec<u32>>);

/// Each step of [`steps`] on its group, each tensor stepped alone on the reference: the bits
/// every way of running the group must give.
fn oracle() -> Vec<GroupCase> {
    let reference = Engine::new(Backend::Reference).unwrap();
    steps()
        .into_iter()
        .enumerate()
        .map(|(k, step)| {
            let data = group(k as u64, 11 * k);
            let mut alone = data.clone();
            for d in &mut alone {
                step.run(reference, d).unwrap();
            }
            let expected = bits(&alone);
            assert_ne!(expected, bits(&data), "{step:?} changed nothing");
            (step, data, expected)
        })
        .collect()
}

/// Runs every step of the oracle as a group on every backend with `threads`, comparing bits.
fn assert_groups_match(cases: &[GroupCase], name: &str, threads: &Threads) {
    for (step, data, expected) in cases {
        for e in engines() {
            let mut got = data.clone();
            step.run_group(e, &mut got, threads).unwrap();
            for (t, (g, x)) in bits(&got).iter().zip(expected).enumerate() {
                if let Some(i) = g.iter().zip(x).position(|(a, b)| a != b) {
                    panic!(
                        "{step:?} on {} with {name}: tensor {t} ({:?}) differs at word {i}: {:#x} vs {:#x}",
                        e.backend(),
                        SHAPES[t],
                        g[i],
                        x[i]
                    );
                }
            }
        }
    }
}

#[test]
fn group_steps_are_identical_on_every_thread_count_and_to_single_tensor_steps() {
    let cases = oracle();
    for (name, threads) in &thread_setups() {
        assert_groups_match(&cases, name, threads);
    }
}

#[test]
fn calling_thread_pools_give_the_same_bits_from_any_thread() {
    let cases = oracle();
    let threads = Threads::calling_thread_pool(3).unwrap();
    assert_eq!(threads.grain(), calling_thread_grain(3));
    assert_eq!(threads, threads.clone());
    assert_ne!(
        Threads::calling_thread_pool(3).unwrap(),
        threads,
        "a new team each call"
    );
    // From a worker of a rayon pool, and from a plain thread other than the one that made it.
    pool(2).install(|| assert_groups_match(&cases, "a team from a rayon worker", &threads));
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_groups_match(
                &cases,
                "a team from another thread",
                &threads.clone().with_grain(1),
            )
        });
    });
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        Threads::calling_thread_pool(0).unwrap().grain(),
        calling_thread_grain(n)
    );
}

/// LAMB tensors over a group's buffers, stream `i` for tensor `i`.
fn lamb_tensors(data: &mut [TensorData]) -> Vec<LambTensor<'_>> {
    data.iter_mut()
        .enumerate()
        .map(|(i, d)| {
            let (w, g, [m, v, _]) = d.views();
            LambTensor {
                weights: w,
                grads: g,
                exp_avg: m,
                exp_avg_sq: v,
                stream: TensorStream::new(i as u32),
            }
        })
        .collect()
}

#[test]
fn optimizer_runs_agree_across_pools_over_several_steps() {
    // Three LAMB steps through `Optimizer` (its own workspace, grown on the first step).
    let run = |threads: Threads| {
        let mut data = group(99, 5);
        let mut opt = Optimizer::new(LambConfig::default(), 7)
            .unwrap()
            .with_threads(threads);
        for _ in 0..3 {
            let mut ts = lamb_tensors(&mut data);
            opt.step(&mut ts).unwrap();
        }
        bits(&data)
    };
    let one = run(Threads::current());
    for n in POOL_SIZES {
        assert_eq!(
            run(Threads::pool(pool(n)).with_grain(1)),
            one,
            "{n} threads"
        );
        assert_eq!(
            run(Threads::calling_thread_pool(n).unwrap().with_grain(1)),
            one,
            "team of {n}"
        );
        assert_eq!(
            run(Threads::openmp(openmp_like(), n).with_grain(1)),
            one,
            "OpenMP-like runtime, {n} threads"
        );
    }
}

/// Three threads step the same groups on `threads` at once, `rounds` times each.
fn steps_from_three_threads_at_once(threads: &Threads, name: &str, rounds: usize) {
    let cases = oracle();
    std::thread::scope(|s| {
        for k in 0..3 {
            let cases = &cases;
            s.spawn(move || {
                for _ in 0..rounds {
                    assert_groups_match(cases, &format!("{name}, caller {k}"), threads);
                }
            });
        }
    });
}

#[test]
fn a_team_stepped_from_several_threads_at_once_gives_the_same_bits() {
    // One step holds the team; a step called meanwhile from another thread runs on that thread.
    let team = Threads::calling_thread_pool(4).unwrap().with_grain(1);
    steps_from_three_threads_at_once(&team, "team of 4", 4);
}

#[test]
fn an_openmp_runtime_stepped_from_several_threads_at_once_gives_the_same_bits() {
    // Each step is a region of its own, as OpenMP runs regions started by different threads.
    let omp = Threads::openmp(openmp_like(), 4).with_grain(1);
    steps_from_three_threads_at_once(&omp, "OpenMP-like runtime", 2);
}

#[test]
fn a_lamb_workspace_that_is_too_small_is_refused_before_any_write() {
    let mut data = group(3, 0);
    let before = bits(&data);
    let e = Engine::new(Backend::Reference).unwrap();
    let mut ts = lamb_tensors(&mut data);
    let ctx = StepContext::new(1, 1);
    let small = LambWorkspace::for_tensors(&ts[..2]);
    let err = e
        .step_group(
            &LambConfig::default(),
            &ctx,
            &mut ts,
            &mut small.clone(),
            &Threads::current(),
        )
        .unwrap_err();
    assert!(
        matches!(err, halfstep::Error::WorkspaceTooSmall { tensors: 9, .. }),
        "{err}"
    );
    drop(ts);
    assert_eq!(bits(&data), before);
    // The right size works, and fits any smaller group too.
    let mut ts = lamb_tensors(&mut data);
    let mut ws = LambWorkspace::for_tensors(&ts);
    let threads = Threads::current();
    e.step_group(&LambConfig::default(), &ctx, &mut ts, &mut ws, &threads)
        .unwrap();
    e.step_group(
        &LambConfig::default(),
        &ctx,
        &mut ts[3..5],
        &mut ws,
        &threads,
    )
    .unwrap();
}

#[test]
fn lamb_groups_give_the_same_bits_whether_or_not_the_workspace_keeps_directions() {
    // A workspace sized for a group above the keeping cap (2^20 elements) has no room for this
    // group's directions, so pass 2 recomputes u; one from `for_tensors` keeps them.
    let n = (1 << 20) + 1;
    let (mut w, g, mut m, mut v) = (vec![0f32; n], vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let mut rest = LambTensor {
        weights: halfstep::Weights::F32(&mut w),
        grads: halfstep::Grads::F32(&g),
        exp_avg: halfstep::State::F32(&mut m),
        exp_avg_sq: halfstep::State::F32(&mut v),
        stream: TensorStream::new(0),
    };
    // As many tensors as the group has, so only the directions are missing.
    let mut big_group = vec![];
    for _ in 1..SHAPES.len() {
        let (one, tail) = rest.split_at(1);
        big_group.push(one);
        rest = tail;
    }
    big_group.push(rest);
    let big = LambWorkspace::for_tensors(&big_group);
    drop(big_group);
    let ctx = StepContext::new(5, 2);
    let cfg = LambConfig::default();
    for e in engines() {
        for combo in [0, 7, 101] {
            let data = group(combo as u64, combo);
            let mut kept = data.clone();
            let mut ts = lamb_tensors(&mut kept);
            let mut ws = LambWorkspace::for_tensors(&ts);
            e.step_group(&cfg, &ctx, &mut ts, &mut ws, &Threads::current())
                .unwrap();
            drop(ts);
            assert_ne!(bits(&kept), bits(&data), "the step changed nothing");
            for (name, threads) in thread_setups() {
                let mut recomputed = data.clone();
                let mut ts = lamb_tensors(&mut recomputed);
                e.step_group(&cfg, &ctx, &mut ts, &mut big.clone(), &threads)
                    .unwrap();
                drop(ts);
                assert_eq!(
                    bits(&recomputed),
                    bits(&kept),
                    "{} with {name}, combo {combo}",
                    e.backend()
                );
            }
        }
    }
}

#[test]
fn for_each_piece_covers_every_element_once_on_every_pool() {
    // The group's shapes, an empty tensor and a large one: each element in exactly one call,
    // within its tensor, on every pool; on a cut tensor the pieces start at multiples of
    // SPLIT_ALIGN of the global index, as a step's. With the large tensor, teams of 2 and 3 at the
    // finest grain cut eight pieces per member (pieces of at least 8 x 2048 elements): a team of 2
    // cuts the large tensor into 14 pieces, where four per member would make 7.
    let mut tensors: Vec<(usize, u64)> = SHAPES.iter().map(|&(n, base, _)| (n, base)).collect();
    tensors.push((0, 9));
    tensors.push((300_000, 3 * SPLIT_ALIGN as u64 + 5));
    let large = tensors.len() - 1;
    let mut large_checked = false;
    for (name, threads) in thread_setups() {
        let seen: Vec<Vec<std::sync::atomic::AtomicU32>> = tensors
            .iter()
            .map(|&(n, _)| (0..n).map(|_| Default::default()).collect())
            .collect();
        let large_pieces = std::sync::atomic::AtomicU32::new(0);
        threads.for_each_piece(&tensors, |i, r| {
            if i == large {
                large_pieces.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            assert!(
                r.start < r.end && r.end <= tensors[i].0,
                "{name}: {i} {r:?}"
            );
            if r.start > 0 {
                let global = tensors[i].1 + r.start as u64;
                assert_eq!(global % SPLIT_ALIGN as u64, 0, "{name}: {i} {r:?}");
            }
            for c in &seen[i][r] {
                c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        for (i, s) in seen.iter().enumerate() {
            for (e, c) in s.iter().enumerate() {
                assert_eq!(
                    c.load(std::sync::atomic::Ordering::Relaxed),
                    1,
                    "{name}: {i}[{e}]"
                );
            }
        }
        if name == "team of 2, finest grain" {
            large_checked = true;
            let pieces = large_pieces.load(std::sync::atomic::Ordering::Relaxed);
            assert!(pieces > 8, "{name}: the large tensor in {pieces} pieces");
        }
    }
    // A renamed setup would otherwise skip the piece count unseen.
    assert!(large_checked, "no setup named \"team of 2, finest grain\"");
}
