//! Every error kind: the call fails with that error and leaves every buffer bit-for-bit as it was.

mod common;
use common::*;
use halfstep::Engine;
use halfstep::fuzzing::{Case, Kinds, OptimizerStep, TensorData};
use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Checkpoint, Error, Grads, LambConfig,
    LambTensor, Optimizer, Replica, Rounding, SgdConfig, SgdTensor, State, StepContext,
    TensorStream, Weights, adagrad_step, adam_step, bf16, convert, lamb_step, sgd_step,
};

/// A full set of buffers in mixed formats, so "unchanged" covers every kind.
#[derive(Clone, Debug, PartialEq)]
struct Bufs {
    w: OwnedWeights,
    g: Vec<f32>,
    m: OwnedState,
    v: OwnedState,
    x: OwnedState,
}

fn bufs(n: usize, wk: WKind) -> Bufs {
    let mut r = rng(3);
    let vals: Vec<f32> = (0..n).map(|_| uniform(&mut r, 0.1, 1.0)).collect();
    Bufs {
        w: OwnedWeights::new(wk, &vals),
        g: vals.iter().map(|x| x - 0.5).collect(),
        m: OwnedState::new(Some(Rounding::Stochastic), &vals),
        v: OwnedState::new(None, &vals),
        x: OwnedState::new(None, &vals),
    }
}

fn ctx() -> StepContext {
    StepContext::new(1, 1)
}

/// Runs an Adam step on `b` (with or without the amsgrad buffer) and asserts it fails with
/// `want`, leaving `b` unchanged.
fn adam_fails(
    cfg: AdamConfig,
    ctx: StepContext,
    b: &mut Bufs,
    grads: &[f32],
    with_max: bool,
    stream: TensorStream,
    want: Error,
) {
    let before = b.clone();
    let mut t = AdamTensor {
        weights: b.w.view(),
        grads: Grads::F32(grads),
        exp_avg: b.m.view(),
        exp_avg_sq: b.v.view(),
        max_exp_avg_sq: with_max.then(|| b.x.view()),
        stream,
    };
    assert_eq!(adam_step(&cfg, &ctx, &mut t), Err(want));
    assert_eq!(*b, before, "buffers changed on error");
}

#[test]
fn length_mismatch() {
    let mut b = bufs(10, WKind::F32);
    let short = b.g[..9].to_vec();
    adam_fails(
        AdamConfig::adam(1e-3),
        ctx(),
        &mut b,
        &short,
        false,
        TensorStream::new(0),
        Error::LengthMismatch {
            buffer: "grads",
            expected: 10,
            found: 9,
        },
    );

    // A state buffer of the wrong length.
    let mut b = bufs(10, WKind::F32);
    let before = b.clone();
    let mut short_v = vec![0.0f32; 11];
    let mut t = LambTensor {
        weights: b.w.view(),
        grads: Grads::F32(&b.g),
        exp_avg: b.m.view(),
        exp_avg_sq: State::F32(&mut short_v),
        stream: TensorStream::new(0),
    };
    assert_eq!(
        lamb_step(&LambConfig::default(), &ctx(), &mut t),
        Err(Error::LengthMismatch {
            buffer: "exp_avg_sq",
            expected: 10,
            found: 11
        })
    );
    assert_eq!(b, before);
    assert_eq!(short_v, vec![0.0; 11]);

    // Split weights whose halves disagree.
    let mut top = vec![bf16::ONE; 4];
    let mut trail = vec![7u16; 3];
    let (g, mut s) = (vec![1.0f32; 4], vec![0.5f32; 4]);
    let mut t = AdagradTensor {
        weights: Weights::Split {
            top: &mut top,
            trail: &mut trail,
        },
        grads: Grads::F32(&g),
        sum: State::F32(&mut s),
        stream: TensorStream::new(0),
    };
    assert_eq!(
        adagrad_step(&AdagradConfig::default(), &ctx(), &mut t),
        Err(Error::LengthMismatch {
            buffer: "trail",
            expected: 4,
            found: 3
        })
    );
    assert_eq!(
        (top, trail, s),
        (vec![bf16::ONE; 4], vec![7u16; 3], vec![0.5f32; 4])
    );

    // Conversions.
    let src = [1.5f32; 5];
    let mut dst = vec![bf16::ZERO; 4];
    assert!(matches!(
        convert::f32_to_bf16(
            &src,
            &mut dst,
            Rounding::NearestEven,
            &ctx(),
            &TensorStream::new(0)
        ),
        Err(Error::LengthMismatch { .. })
    ));
    assert_eq!(dst, vec![bf16::ZERO; 4]);
}

#[test]
fn empty() {
    let mut b = bufs(0, WKind::Split);
    adam_fails(
        AdamConfig::adam(1e-3),
        ctx(),
        &mut b,
        &[],
        false,
        TensorStream::new(0),
        Error::Empty,
    );
    let mut out: [f32; 0] = [];
    assert_eq!(convert::bf16_to_f32(&[], &mut out), Err(Error::Empty));
}

/// Storage kinds for the hyperparameter tests: bf16-SR weights with a bf16-SR momentum buffer
/// (SGD), all f32, and split weights.
const SGD_KINDS: Kinds = Kinds {
    w: 3,
    g: 0,
    s: [2, 0, 0],
};
const F32_KINDS: Kinds = Kinds {
    w: 0,
    g: 0,
    s: [0, 0, 0],
};
const SPLIT_KINDS: Kinds = Kinds {
    w: 1,
    g: 0,
    s: [2, 0, 0],
};

/// `step` must fail with an invalid `name` and leave every buffer (of `kinds`) bit-for-bit unchanged.
fn rejects(step: OptimizerStep, kinds: Kinds, name: &str) {
    let case = Case {
        len: 8,
        off: 0,
        ctx: ctx(),
        stream: TensorStream::new(0),
    };
    let vals = |k: f32| {
        (0..8)
            .map(|i| 0.1 + k + 0.1 * i as f32)
            .collect::<Vec<f32>>()
    };
    let data = TensorData::new(
        case,
        kinds,
        vals(0.0),
        vals(-0.5),
        [vals(0.0), vals(0.2), vals(0.4)],
    );
    let mut d = data.clone();
    let err = step.run(Engine::global().unwrap(), &mut d).unwrap_err();
    assert!(
        matches!(err, Error::InvalidHyperparameter { name: n, .. } if n == name),
        "{step:?}: {err}"
    );
    assert_eq!(d.bits(), data.bits(), "{step:?}: buffers changed on error");
}

#[test]
fn invalid_hyperparameters_for_every_optimizer() {
    let nan = f32::NAN;
    let sgd = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let bad_sgd = [
        (SgdConfig { lr: nan, ..sgd }, "lr"),
        (SgdConfig { lr: -1.0, ..sgd }, "lr"),
        (
            SgdConfig {
                lr: f32::INFINITY,
                ..sgd
            },
            "lr",
        ),
        (
            SgdConfig {
                momentum: 1.5,
                ..sgd
            },
            "momentum",
        ),
        (
            SgdConfig {
                dampening: -0.1,
                ..sgd
            },
            "dampening",
        ),
        (
            SgdConfig {
                weight_decay: -1e-4,
                ..sgd
            },
            "weight_decay",
        ),
        (
            SgdConfig {
                nesterov: true,
                momentum: 0.0,
                ..sgd
            },
            "momentum",
        ),
        (
            SgdConfig {
                nesterov: true,
                dampening: 0.1,
                ..sgd
            },
            "dampening",
        ),
    ];
    for (cfg, name) in bad_sgd {
        rejects(
            OptimizerStep::Sgd(cfg, cfg.momentum != 0.0),
            SGD_KINDS,
            name,
        );
        assert!(
            Optimizer::new(cfg, 0).is_err(),
            "Optimizer::new must validate too"
        );
    }

    let adagrad = AdagradConfig::default();
    let bad_adagrad = [
        (
            AdagradConfig {
                eps: 0.0,
                ..adagrad
            },
            "eps",
        ),
        (
            AdagradConfig {
                eps: -1e-8,
                ..adagrad
            },
            "eps",
        ),
        (
            AdagradConfig {
                lr_decay: -0.5,
                ..adagrad
            },
            "lr_decay",
        ),
        (
            AdagradConfig {
                initial_accumulator_value: nan,
                ..adagrad
            },
            "initial_accumulator_value",
        ),
    ];
    for (cfg, name) in bad_adagrad {
        rejects(OptimizerStep::Adagrad(cfg), F32_KINDS, name);
        assert!(cfg.init_sum(&mut State::F32(&mut [1.0])).is_err());
    }

    let adam = AdamConfig::adamw(1e-3);
    for (cfg, name) in [
        (AdamConfig { beta1: 1.0, ..adam }, "beta1"),
        (
            AdamConfig {
                beta1: -0.1,
                ..adam
            },
            "beta1",
        ),
        (AdamConfig { beta2: nan, ..adam }, "beta2"),
        (
            AdamConfig {
                eps: f32::INFINITY,
                ..adam
            },
            "eps",
        ),
        (
            AdamConfig {
                weight_decay: nan,
                ..adam
            },
            "weight_decay",
        ),
    ] {
        rejects(OptimizerStep::Adam(cfg, false), SPLIT_KINDS, name);
    }

    let lamb = LambConfig::default();
    for (cfg, name) in [
        (
            LambConfig {
                max_trust_ratio: Some(0.0),
                ..lamb
            },
            "max_trust_ratio",
        ),
        (
            LambConfig {
                max_trust_ratio: Some(f32::INFINITY),
                ..lamb
            },
            "max_trust_ratio",
        ),
        (LambConfig { beta2: 1.0, ..lamb }, "beta2"),
        (
            LambConfig {
                lr: -0.0001,
                ..lamb
            },
            "lr",
        ),
    ] {
        rejects(OptimizerStep::Lamb(cfg), F32_KINDS, name);
    }
}

#[test]
fn step_zero() {
    let mut b = bufs(8, WKind::F32);
    let g = b.g.clone();
    adam_fails(
        AdamConfig::adam(1e-3),
        StepContext::new(1, 0),
        &mut b,
        &g,
        false,
        TensorStream::new(0),
        Error::StepZero,
    );
}

#[test]
fn step_overflow() {
    let mut b = bufs(8, WKind::F32);
    let before = b.clone();
    let mut opt = Optimizer::resume(
        AdamConfig::adam(1e-3),
        Checkpoint {
            seed: 1,
            steps_taken: u32::MAX,
        },
    )
    .unwrap();
    let g = b.g.clone();
    let mut t = [AdamTensor {
        weights: b.w.view(),
        grads: Grads::F32(&g),
        exp_avg: b.m.view(),
        exp_avg_sq: b.v.view(),
        max_exp_avg_sq: None,
        stream: TensorStream::new(0),
    }];
    assert_eq!(opt.step(&mut t), Err(Error::StepOverflow));
    assert_eq!(opt.checkpoint().steps_taken, u32::MAX);
    assert_eq!(b, before);
}

#[test]
fn state_mismatch() {
    let mut b = bufs(8, WKind::F32);
    let g = b.g.clone();
    adam_fails(
        AdamConfig {
            amsgrad: true,
            ..AdamConfig::adam(1e-3)
        },
        ctx(),
        &mut b,
        &g,
        false,
        TensorStream::new(0),
        Error::StateMismatch {
            buffer: "max_exp_avg_sq",
            required: true,
        },
    );
    adam_fails(
        AdamConfig::adam(1e-3),
        ctx(),
        &mut b,
        &g,
        true,
        TensorStream::new(0),
        Error::StateMismatch {
            buffer: "max_exp_avg_sq",
            required: false,
        },
    );

    for (cfg, give, required) in [
        (
            SgdConfig {
                momentum: 0.9,
                ..Default::default()
            },
            false,
            true,
        ),
        (SgdConfig::default(), true, false),
    ] {
        let before = b.clone();
        let momentum = give.then(|| b.m.view());
        let mut t = SgdTensor {
            weights: b.w.view(),
            grads: Grads::F32(&g),
            momentum,
            stream: TensorStream::new(0),
        };
        assert_eq!(
            sgd_step(&cfg, &ctx(), &mut t),
            Err(Error::StateMismatch {
                buffer: "momentum",
                required
            })
        );
        assert_eq!(b, before);
    }
}

#[test]
fn stream_out_of_range() {
    let mut b = bufs(8, WKind::F32);
    let g = b.g.clone();
    adam_fails(
        AdamConfig::adam(1e-3),
        ctx(),
        &mut b,
        &g,
        false,
        TensorStream::new(1 << 28),
        Error::StreamOutOfRange { stream: 1 << 28 },
    );
}

#[test]
fn index_out_of_range() {
    let mut b = bufs(20, WKind::F32);
    let g = b.g.clone();
    for base in [(1u64 << 51) - 10, u64::MAX - 5] {
        let s = TensorStream {
            id: 0,
            index_base: base,
        };
        adam_fails(
            AdamConfig::adam(1e-3),
            ctx(),
            &mut b,
            &g,
            false,
            s,
            Error::IndexOutOfRange {
                index_base: base,
                len: 20,
            },
        );
    }
    // Exactly up to the limit is fine.
    let s = TensorStream {
        id: 0,
        index_base: (1u64 << 51) - 20,
    };
    let mut t = AdamTensor {
        weights: b.w.view(),
        grads: Grads::F32(&g),
        exp_avg: b.m.view(),
        exp_avg_sq: b.v.view(),
        max_exp_avg_sq: None,
        stream: s,
    };
    assert_eq!(adam_step(&AdamConfig::adam(1e-3), &ctx(), &mut t), Ok(()));
}

#[test]
fn a_lamb_group_out_of_the_index_range_is_refused_and_sizing_for_it_does_not_panic() {
    for base in [(1u64 << 51) - 10, u64::MAX - 5] {
        let mut b = bufs(20, WKind::F32);
        let before = b.clone();
        let g = b.g.clone();
        let mut t = [LambTensor {
            weights: b.w.view(),
            grads: Grads::F32(&g),
            exp_avg: b.m.view(),
            exp_avg_sq: b.v.view(),
            stream: TensorStream {
                id: 0,
                index_base: base,
            },
        }];
        // Sizing happens before the step validates anything: it must not overflow.
        let _ = halfstep::LambWorkspace::for_tensors(&t);
        let mut opt = Optimizer::new(LambConfig::default(), 1).unwrap();
        opt.reserve(&t);
        assert_eq!(
            opt.step(&mut t),
            Err(Error::IndexOutOfRange {
                index_base: base,
                len: 20
            })
        );
        assert_eq!(b, before);
    }
}

#[test]
fn replica_out_of_range() {
    let mut b = bufs(8, WKind::Bf16(Rounding::Stochastic));
    let g = b.g.clone();
    adam_fails(
        AdamConfig::adam(1e-3),
        ctx().with_replica(Replica::Differing(u16::MAX)),
        &mut b,
        &g,
        false,
        TensorStream::new(0),
        Error::ReplicaOutOfRange { replica: u16::MAX },
    );
    // The largest valid replica index works.
    let mut t = AdamTensor {
        weights: b.w.view(),
        grads: Grads::F32(&g),
        exp_avg: b.m.view(),
        exp_avg_sq: b.v.view(),
        max_exp_avg_sq: None,
        stream: TensorStream::new(0),
    };
    assert_eq!(
        adam_step(
            &AdamConfig::adam(1e-3),
            &ctx().with_replica(Replica::Differing(u16::MAX - 1)),
            &mut t
        ),
        Ok(())
    );
}

#[test]
fn bad_checkpoint() {
    let good = Checkpoint {
        seed: 5,
        steps_taken: 7,
    }
    .to_bytes();
    assert_eq!(
        Checkpoint::from_bytes(&good),
        Ok(Checkpoint {
            seed: 5,
            steps_taken: 7
        })
    );
    assert_eq!(
        Checkpoint::from_bytes(&good[..15]),
        Err(Error::BadCheckpoint)
    );
    assert_eq!(
        good[0..4],
        4u32.to_le_bytes(),
        "blobs are written as version 4"
    );
    // Blobs of versions 1 (Philox4x32-10 bits), 2 (the second moment with a stream of its own)
    // and 3 (AMSGrad's maximum with a stream of its own) still resume their seed and step count.
    for version in [1, 2, 3] {
        let mut old = good;
        old[0] = version;
        assert_eq!(Checkpoint::from_bytes(&old), Checkpoint::from_bytes(&good));
    }
    for version in [0u32, 5, u32::MAX] {
        let mut wrong_version = good;
        wrong_version[0..4].copy_from_slice(&version.to_le_bytes());
        assert_eq!(
            Checkpoint::from_bytes(&wrong_version),
            Err(Error::BadCheckpoint),
            "version {version}"
        );
    }
}

#[test]
fn a_bad_tensor_in_a_group_leaves_the_good_ones_untouched() {
    let mut good = bufs(8, WKind::F32);
    let mut bad = bufs(8, WKind::F32);
    let (before_good, before_bad) = (good.clone(), bad.clone());
    let (g1, g2) = (good.g.clone(), bad.g[..7].to_vec());
    let mut opt = Optimizer::new(AdamConfig::adam(1e-3), 1).unwrap();
    let mut ts = [
        AdamTensor {
            weights: good.w.view(),
            grads: Grads::F32(&g1),
            exp_avg: good.m.view(),
            exp_avg_sq: good.v.view(),
            max_exp_avg_sq: None,
            stream: TensorStream::new(0),
        },
        AdamTensor {
            weights: bad.w.view(),
            grads: Grads::F32(&g2),
            exp_avg: bad.m.view(),
            exp_avg_sq: bad.v.view(),
            max_exp_avg_sq: None,
            stream: TensorStream::new(1),
        },
    ];
    assert!(matches!(
        opt.step(&mut ts),
        Err(Error::LengthMismatch { .. })
    ));
    assert_eq!((good, bad), (before_good, before_bad));
    assert_eq!(opt.checkpoint().steps_taken, 0);
}

#[test]
fn errors_describe_themselves() {
    let e = Error::InvalidHyperparameter {
        name: "beta1",
        value: 1.0,
        expected: "in [0, 1)",
    };
    assert_eq!(e.to_string(), "invalid beta1 = 1: must be in [0, 1)");
    let e = Error::LengthMismatch {
        buffer: "grads",
        expected: 10,
        found: 9,
    };
    assert_eq!(e.to_string(), "grads has 9 elements, expected 10");
}

#[test]
fn an_error_with_a_nan_value_equals_itself() {
    let e = Error::InvalidHyperparameter {
        name: "lr",
        value: f64::NAN,
        expected: "finite and >= 0",
    };
    assert_eq!(e, e.clone());
    assert_ne!(
        e,
        Error::InvalidHyperparameter {
            name: "lr",
            value: 1.0,
            expected: "finite and >= 0"
        }
    );
    assert_ne!(e, Error::Empty);
}
