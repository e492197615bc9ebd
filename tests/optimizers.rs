//! Every optimizer x storage combination against an f64 evaluation of the same formulas, within
//! the documented bound (SPEC.md §6.6), plus one test per PyTorch-specific detail.

// Index loops read best here: several parallel arrays per element.
#![allow(clippy::needless_range_loop)]

mod common;
use common::*;
use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, LambConfig, LambTensor, Rounding,
    SgdConfig, SgdTensor, StepContext, TensorStream, adagrad_step, adam_step, lamb_step, sgd_step,
};
use std::ops::{Add, Div, Mul, Neg, Sub};

const N: usize = 300;
const EPS32: f64 = 1.0 / (1u64 << 24) as f64;

/// An f64 value with a running magnitude `s` (the same expression over absolute values): the
/// f32 evaluation's rounding error is at most a small multiple of `EPS32 * s`.
#[derive(Clone, Copy, Debug)]
struct V {
    v: f64,
    s: f64,
}
fn k(x: f32) -> V {
    V {
        v: f64::from(x),
        s: f64::from(x).abs(),
    }
}
fn kd(x: f64) -> V {
    V { v: x, s: x.abs() }
}
impl Add for V {
    type Output = V;
    fn add(self, o: V) -> V {
        V {
            v: self.v + o.v,
            s: self.s + o.s,
        }
    }
}
impl Sub for V {
    type Output = V;
    fn sub(self, o: V) -> V {
        V {
            v: self.v - o.v,
            s: self.s + o.s,
        }
    }
}
impl Mul for V {
    type Output = V;
    fn mul(self, o: V) -> V {
        V {
            v: self.v * o.v,
            s: self.s * o.s,
        }
    }
}
impl Div for V {
    type Output = V;
    fn div(self, o: V) -> V {
        V {
            v: self.v / o.v,
            s: self.s / o.v.abs(),
        }
    }
}
impl Neg for V {
    type Output = V;
    fn neg(self) -> V {
        V {
            v: -self.v,
            s: self.s,
        }
    }
}
impl V {
    fn sqrt(self) -> V {
        V {
            v: self.v.sqrt(),
            s: self.s.sqrt(),
        }
    }
}

/// The documented bound: 32 f32 rounding errors of the expression's magnitude, plus the storage
/// rounding (half a bf16 ulp for nearest-even, one ulp for stochastic; a bf16 ulp is <= 2^-7 |x|).
fn assert_close(what: &str, got: f32, want: V, storage: Option<Rounding>) {
    let arith = 32.0 * EPS32 * want.s;
    let store = match storage {
        None => 0.0,
        Some(Rounding::NearestEven) => (want.v.abs() + arith) / 256.0,
        Some(_) => (want.v.abs() + arith) / 128.0,
    };
    let err = (f64::from(got) - want.v).abs();
    assert!(
        err <= arith + store,
        "{what}: got {got:e}, f64 gives {:e} (err {err:e} > {:e})",
        want.v,
        arith + store
    );
}

fn w_rounding(w: WKind) -> Option<Rounding> {
    match w {
        WKind::Bf16(r) => Some(r),
        _ => None,
    }
}

/// Random inputs: weights, gradients (wide range of magnitudes) and two states (one >= 0).
fn inputs(seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut r = rng(seed);
    let p = (0..N).map(|_| uniform(&mut r, -2.0, 2.0)).collect();
    let g = (0..N).map(|_| log_uniform(&mut r, -10, 2)).collect();
    let m = (0..N).map(|_| uniform(&mut r, -0.5, 0.5)).collect();
    let v = (0..N).map(|_| uniform(&mut r, 0.0, 1.0)).collect();
    (p, g, m, v)
}

/// Runs `f` for every weight x gradient x state kind, naming the combination.
fn for_each_combo(mut f: impl FnMut(WKind, bool, Option<Rounding>, String)) {
    for w in W_KINDS {
        for g in G_BF16 {
            for s in S_KINDS {
                f(
                    w,
                    g,
                    s,
                    format!("weights {w:?}, bf16 grads {g}, state {s:?}"),
                );
            }
        }
    }
}

fn sgd_oracle(c: &SgdConfig, first: bool, p: f32, g: f32, buf: f32) -> (V, V) {
    let (p, buf) = (k(p), k(buf));
    let mut g = if c.maximize { -k(g) } else { k(g) };
    if c.weight_decay != 0.0 {
        g = g + k(c.weight_decay) * p;
    }
    let mut b = buf;
    if c.momentum != 0.0 {
        b = if first {
            g
        } else {
            k(c.momentum) * buf + kd(1.0 - f64::from(c.dampening)) * g
        };
        g = if c.nesterov { g + k(c.momentum) * b } else { b };
    }
    (p - k(c.lr) * g, b)
}

#[test]
fn sgd_matches_f64_in_every_storage_combination() {
    let configs = [
        SgdConfig {
            lr: 0.1,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            dampening: 0.1,
            weight_decay: 0.01,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 1e-3,
            nesterov: true,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.02,
            momentum: 0.5,
            maximize: true,
            ..Default::default()
        },
    ];
    let (p0, g0, m0, _) = inputs(1);
    for cfg in configs {
        for step in [1, 3] {
            for_each_combo(|wk, gk, sk, name| {
                let mut w = OwnedWeights::new(wk, &p0);
                let grads = OwnedGrads::new(gk, &g0);
                let mut buf = OwnedState::new(sk, &m0);
                let (p_in, g_in, b_in) = (w.values(), grads.values(), buf.values());
                let use_m = cfg.momentum != 0.0;
                let mut t = SgdTensor {
                    weights: w.view(),
                    grads: grads.view(),
                    momentum: use_m.then(|| buf.view()),
                    stream: TensorStream::new(3),
                };
                sgd_step(&cfg, &StepContext::new(99, step), &mut t).unwrap();
                let (p_out, b_out) = (w.values(), buf.values());
                for i in 0..N {
                    let (wp, wb) = sgd_oracle(&cfg, step == 1, p_in[i], g_in[i], b_in[i]);
                    assert_close(
                        &format!("{cfg:?} step {step} {name} p[{i}]"),
                        p_out[i],
                        wp,
                        w_rounding(wk),
                    );
                    if use_m {
                        assert_close(
                            &format!("{cfg:?} step {step} {name} buf[{i}]"),
                            b_out[i],
                            wb,
                            sk,
                        );
                    }
                }
            });
        }
    }
}

fn adagrad_oracle(c: &AdagradConfig, step: u32, p: f32, g: f32, s: f32) -> (V, V) {
    let p = k(p);
    let mut g = if c.maximize { -k(g) } else { k(g) };
    if c.weight_decay != 0.0 {
        g = g + k(c.weight_decay) * p;
    }
    let clr = f64::from(c.lr) / (1.0 + f64::from(step - 1) * f64::from(c.lr_decay));
    let s = k(s) + g * g;
    (p - kd(clr) * (g / (s.sqrt() + k(c.eps))), s)
}

#[test]
fn adagrad_matches_f64_in_every_storage_combination() {
    let configs = [
        AdagradConfig {
            lr: 0.1,
            ..Default::default()
        },
        AdagradConfig {
            lr: 0.1,
            lr_decay: 0.01,
            weight_decay: 0.01,
            eps: 1e-6,
            ..Default::default()
        },
        AdagradConfig {
            lr: 0.05,
            maximize: true,
            ..Default::default()
        },
    ];
    let (p0, g0, _, s0) = inputs(2);
    for cfg in configs {
        for step in [1, 5] {
            for_each_combo(|wk, gk, sk, name| {
                let mut w = OwnedWeights::new(wk, &p0);
                let grads = OwnedGrads::new(gk, &g0);
                let mut sum = OwnedState::new(sk, &s0);
                let (p_in, g_in, s_in) = (w.values(), grads.values(), sum.values());
                let mut t = AdagradTensor {
                    weights: w.view(),
                    grads: grads.view(),
                    sum: sum.view(),
                    stream: TensorStream::new(3),
                };
                adagrad_step(&cfg, &StepContext::new(99, step), &mut t).unwrap();
                let (p_out, s_out) = (w.values(), sum.values());
                for i in 0..N {
                    let (wp, ws) = adagrad_oracle(&cfg, step, p_in[i], g_in[i], s_in[i]);
                    assert_close(
                        &format!("{cfg:?} step {step} {name} p[{i}]"),
                        p_out[i],
                        wp,
                        w_rounding(wk),
                    );
                    assert_close(
                        &format!("{cfg:?} step {step} {name} sum[{i}]"),
                        s_out[i],
                        ws,
                        sk,
                    );
                }
            });
        }
    }
}

fn adam_oracle(c: &AdamConfig, step: u32, p: f32, g: f32, m: f32, v: f32, vmax: f32) -> [V; 4] {
    let mut p = k(p);
    let mut g = if c.maximize { -k(g) } else { k(g) };
    let lr = f64::from(c.lr);
    if c.weight_decay != 0.0 {
        if c.decoupled_weight_decay {
            p = p * kd(1.0 - lr * f64::from(c.weight_decay));
        } else {
            g = g + k(c.weight_decay) * p;
        }
    }
    let (b1, b2) = (f64::from(c.beta1), f64::from(c.beta2));
    let m = k(m) + kd(1.0 - b1) * (g - k(m));
    let v = kd(b2) * k(v) + kd(1.0 - b2) * (g * g);
    let vmax = if c.amsgrad && (v.v > f64::from(vmax) || v.v.is_nan()) {
        v
    } else {
        k(vmax)
    };
    let v_used = if c.amsgrad { vmax } else { v };
    let bc1 = 1.0 - b1.powi(step as i32);
    let bc2 = 1.0 - b2.powi(step as i32);
    let denom = v_used.sqrt() / kd(bc2.sqrt()) + k(c.eps);
    [p - kd(lr / bc1) * (m / denom), m, v, vmax]
}

#[test]
fn adam_and_adamw_match_f64_in_every_storage_combination() {
    let configs = [
        AdamConfig::adam(1e-2),
        AdamConfig::adamw(1e-2),
        AdamConfig {
            weight_decay: 0.1,
            ..AdamConfig::adam(1e-2)
        },
        AdamConfig {
            amsgrad: true,
            ..AdamConfig::adamw(1e-2)
        },
        AdamConfig {
            maximize: true,
            beta1: 0.0,
            beta2: 0.5,
            eps: 1e-3,
            ..AdamConfig::adam(1e-3)
        },
    ];
    let (p0, g0, m0, v0) = inputs(3);
    let vmax0: Vec<f32> = v0
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 2 == 0 { v * 1.5 } else { v * 0.5 })
        .collect();
    for cfg in configs {
        for step in [1, 10] {
            for_each_combo(|wk, gk, sk, name| {
                let mut w = OwnedWeights::new(wk, &p0);
                let grads = OwnedGrads::new(gk, &g0);
                let (mut m, mut v, mut x) = (
                    OwnedState::new(sk, &m0),
                    OwnedState::new(sk, &v0),
                    OwnedState::new(sk, &vmax0),
                );
                let ins = (
                    w.values(),
                    grads.values(),
                    m.values(),
                    v.values(),
                    x.values(),
                );
                let mut t = AdamTensor {
                    weights: w.view(),
                    grads: grads.view(),
                    exp_avg: m.view(),
                    exp_avg_sq: v.view(),
                    max_exp_avg_sq: cfg.amsgrad.then(|| x.view()),
                    stream: TensorStream::new(3),
                };
                adam_step(&cfg, &StepContext::new(99, step), &mut t).unwrap();
                let outs = [w.values(), m.values(), v.values(), x.values()];
                for i in 0..N {
                    let want =
                        adam_oracle(&cfg, step, ins.0[i], ins.1[i], ins.2[i], ins.3[i], ins.4[i]);
                    let names = ["p", "m", "v", "vmax"];
                    for j in 0..4 {
                        if j == 3 && !cfg.amsgrad {
                            continue;
                        }
                        let storage = if j == 0 { w_rounding(wk) } else { sk };
                        assert_close(
                            &format!("{cfg:?} step {step} {name} {}[{i}]", names[j]),
                            outs[j][i],
                            want[j],
                            storage,
                        );
                    }
                }
            });
        }
    }
}

#[test]
fn lamb_matches_f64_in_every_storage_combination() {
    let configs = [
        LambConfig {
            lr: 1e-2,
            ..Default::default()
        },
        LambConfig {
            lr: 1e-2,
            weight_decay: 0.0,
            ..Default::default()
        },
        LambConfig {
            lr: 1e-2,
            max_trust_ratio: Some(0.5),
            ..Default::default()
        },
    ];
    let (p0, g0, m0, v0) = inputs(4);
    for cfg in configs {
        for step in [1, 7] {
            for_each_combo(|wk, gk, sk, name| {
                let mut w = OwnedWeights::new(wk, &p0);
                let grads = OwnedGrads::new(gk, &g0);
                let (mut m, mut v) = (OwnedState::new(sk, &m0), OwnedState::new(sk, &v0));
                let (p_in, g_in, m_in, v_in) = (w.values(), grads.values(), m.values(), v.values());
                let mut t = LambTensor {
                    weights: w.view(),
                    grads: grads.view(),
                    exp_avg: m.view(),
                    exp_avg_sq: v.view(),
                    stream: TensorStream::new(3),
                };
                lamb_step(&cfg, &StepContext::new(99, step), &mut t).unwrap();
                let (p_out, m_out, v_out) = (w.values(), m.values(), v.values());
                let (b1, b2) = (f64::from(cfg.beta1), f64::from(cfg.beta2));
                let (bc1, bc2) = (1.0 - b1.powi(step as i32), 1.0 - b2.powi(step as i32));
                // Moments, then the direction from the moments as stored.
                let mut u = Vec::new();
                for i in 0..N {
                    let g = k(g_in[i]);
                    let wm = k(m_in[i]) + kd(1.0 - b1) * (g - k(m_in[i]));
                    let wv = kd(b2) * k(v_in[i]) + kd(1.0 - b2) * (g * g);
                    assert_close(
                        &format!("{cfg:?} step {step} {name} m[{i}]"),
                        m_out[i],
                        wm,
                        sk,
                    );
                    assert_close(
                        &format!("{cfg:?} step {step} {name} v[{i}]"),
                        v_out[i],
                        wv,
                        sk,
                    );
                    let d = (k(m_out[i]) / kd(bc1)) / ((k(v_out[i]) / kd(bc2)).sqrt() + k(cfg.eps));
                    u.push(d + k(cfg.weight_decay) * k(p_in[i]));
                }
                let pn = p_in
                    .iter()
                    .map(|&p| f64::from(p).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let un = u.iter().map(|d| d.v * d.v).sum::<f64>().sqrt();
                let mut ratio = if pn > 0.0 && un > 0.0 { pn / un } else { 1.0 };
                if let Some(mx) = cfg.max_trust_ratio {
                    ratio = ratio.min(f64::from(mx));
                }
                for i in 0..N {
                    let want = k(p_in[i]) - kd(f64::from(cfg.lr) * ratio) * u[i];
                    assert_close(
                        &format!("{cfg:?} step {step} {name} p[{i}]"),
                        p_out[i],
                        want,
                        w_rounding(wk),
                    );
                }
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// PyTorch-specific details, one test each.

#[test]
fn sgd_first_step_sets_momentum_to_the_gradient_without_dampening() {
    let cfg = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.5,
        ..Default::default()
    };
    let (mut w, mut buf) = (vec![1.0f32, 2.0], vec![123.0f32, -7.0]); // stale contents: ignored on step 1
    let g = [0.5f32, -0.25];
    let t = |step, w: &mut Vec<f32>, buf: &mut Vec<f32>| {
        let mut t = SgdTensor {
            weights: halfstep::Weights::F32(w),
            grads: halfstep::Grads::F32(&g),
            momentum: Some(halfstep::State::F32(buf)),
            stream: TensorStream::new(0),
        };
        sgd_step(&cfg, &StepContext::new(1, step), &mut t).unwrap();
    };
    t(1, &mut w, &mut buf);
    assert_eq!(
        buf,
        [0.5, -0.25],
        "step 1: buf = g, not (1 - dampening) * g"
    );
    assert_eq!(w, [1.0 - 0.1 * 0.5, 2.0 + 0.1 * 0.25]);
    t(2, &mut w, &mut buf);
    assert_eq!(
        buf,
        [0.9 * 0.5 + 0.5 * 0.5, 0.9 * -0.25 + 0.5 * -0.25],
        "step 2: mu * buf + (1 - d) * g"
    );
}

#[test]
fn adagrad_adds_eps_after_the_square_root() {
    let cfg = AdagradConfig {
        lr: 1.0,
        eps: 1e-2,
        ..Default::default()
    };
    let (mut w, mut s) = (vec![0.0f32], vec![0.0f32]);
    let g = [1e-3f32];
    let mut t = AdagradTensor {
        weights: halfstep::Weights::F32(&mut w),
        grads: halfstep::Grads::F32(&g),
        sum: halfstep::State::F32(&mut s),
        stream: TensorStream::new(0),
    };
    adagrad_step(&cfg, &StepContext::new(1, 1), &mut t).unwrap();
    let after = -1e-3 / (1e-3 + 1e-2); // -0.0909...
    let inside = -1e-3 / (1e-6f64 + 1e-2).sqrt(); // -0.00995...
    assert!(
        (f64::from(w[0]) - after).abs() < 1e-6,
        "got {}, eps-after-sqrt gives {after}, eps-inside gives {inside}",
        w[0]
    );
}

#[test]
fn adamw_decays_the_weight_before_the_adam_update_and_adam_adds_decay_to_the_gradient() {
    let run = |cfg: AdamConfig| {
        let (mut w, mut m, mut v) = (vec![1.0f32], vec![0.0f32], vec![0.0f32]);
        let g = [2.0f32];
        let mut t = AdamTensor {
            weights: halfstep::Weights::F32(&mut w),
            grads: halfstep::Grads::F32(&g),
            exp_avg: halfstep::State::F32(&mut m),
            exp_avg_sq: halfstep::State::F32(&mut v),
            max_exp_avg_sq: None,
            stream: TensorStream::new(0),
        };
        adam_step(&cfg, &StepContext::new(1, 1), &mut t).unwrap();
        (w[0], m[0])
    };
    // Step 1: m_hat = g, v_hat = g^2, so the Adam update is lr * g / (|g| + eps) ~ lr.
    let (w, m) = run(AdamConfig {
        lr: 0.1,
        weight_decay: 0.5,
        eps: 1e-12,
        ..AdamConfig::adamw(0.1)
    });
    assert!(
        (w - 0.85).abs() < 1e-6,
        "AdamW: 1 * (1 - 0.05) - 0.1 = 0.85 (decay after the update would give 0.855), got {w}"
    );
    assert!(
        (m - 0.2).abs() < 1e-7,
        "AdamW leaves the gradient alone: m = 0.1 * 2"
    );
    let (w, m) = run(AdamConfig {
        lr: 0.1,
        weight_decay: 0.5,
        eps: 1e-12,
        ..AdamConfig::adam(0.1)
    });
    assert!(
        (w - 0.9).abs() < 1e-6,
        "Adam (L2): g' = 2.5 > 0, update 0.1, got {w}"
    );
    assert!(
        (m - 0.25).abs() < 1e-7,
        "Adam adds wd * p to the gradient: m = 0.1 * 2.5, got {m}"
    );
}

#[test]
fn amsgrad_uses_the_running_maximum() {
    let cfg = AdamConfig {
        amsgrad: true,
        beta1: 0.0,
        beta2: 0.0,
        eps: 1e-12,
        ..AdamConfig::adam(1.0)
    };
    let (mut w, mut m, mut v, mut x) = (
        vec![0.0f32; 2],
        vec![0.0f32; 2],
        vec![0.0f32; 2],
        vec![16.0f32, 0.0],
    );
    let g = [1.0f32, 1.0];
    let mut t = AdamTensor {
        weights: halfstep::Weights::F32(&mut w),
        grads: halfstep::Grads::F32(&g),
        exp_avg: halfstep::State::F32(&mut m),
        exp_avg_sq: halfstep::State::F32(&mut v),
        max_exp_avg_sq: Some(halfstep::State::F32(&mut x)),
        stream: TensorStream::new(0),
    };
    adam_step(&cfg, &StepContext::new(1, 1), &mut t).unwrap();
    assert_eq!(x, [16.0, 1.0]);
    assert_eq!(w, [-0.25, -1.0], "denominator sqrt(max) = 4 for element 0");
}

#[test]
fn lamb_zero_norm_guard_uses_ratio_one_so_zero_layers_still_train() {
    let cfg = LambConfig {
        lr: 0.1,
        weight_decay: 0.0,
        eps: 1e-12,
        ..Default::default()
    };
    let run = |p: Vec<f32>, g: Vec<f32>| {
        let (mut w, mut m, mut v) = (p, vec![0.0f32; 4], vec![0.0f32; 4]);
        let mut t = LambTensor {
            weights: halfstep::Weights::F32(&mut w),
            grads: halfstep::Grads::F32(&g),
            exp_avg: halfstep::State::F32(&mut m),
            exp_avg_sq: halfstep::State::F32(&mut v),
            stream: TensorStream::new(0),
        };
        lamb_step(&cfg, &StepContext::new(1, 1), &mut t).unwrap();
        w
    };
    // ‖p‖ = 0: ratio 1, so p = -lr * u with u = g / |g| = ±1 at step 1.
    let w = run(vec![0.0; 4], vec![1.0, -2.0, 3.0, -4.0]);
    for (got, want) in w.iter().zip([-0.1f32, 0.1, -0.1, 0.1]) {
        assert!((got - want).abs() < 1e-6, "{w:?}");
    }
    // ‖u‖ = 0 (zero gradient, no decay): ratio 1 and nothing moves; no NaN from 0/0.
    assert_eq!(
        run(vec![1.0, 2.0, 3.0, 4.0], vec![0.0; 4]),
        [1.0, 2.0, 3.0, 4.0]
    );
    // Both > 0: ratio = ‖p‖ / ‖u‖ = sqrt(30) / 2.
    let w = run(vec![1.0, 2.0, 3.0, 4.0], vec![1.0, -2.0, 3.0, -4.0]);
    let r = 30f64.sqrt() / 2.0;
    for (i, s) in [-1.0, 1.0, -1.0, 1.0].iter().enumerate() {
        let want = (i + 1) as f64 + 0.1 * r * s;
        assert!(
            (f64::from(w[i]) - want).abs() < 1e-6,
            "{i}: {} vs {want}",
            w[i]
        );
    }
}

#[test]
fn hyperparameters_stay_f32_and_are_not_rounded_to_bf16() {
    // PyTorch's bf16 vector paths once rounded momentum 0.9 to bf16 (0.8984375); with f32 weights
    // and a bf16 gradient the step must still use 0.9 exactly as an f32.
    let cfg = SgdConfig {
        lr: 1.0,
        momentum: 0.9,
        ..Default::default()
    };
    let (mut w, mut buf) = (vec![0.0f32], vec![1.0f32]);
    let g = [halfstep::bf16::from_f32(0.0)];
    let mut t = SgdTensor {
        weights: halfstep::Weights::F32(&mut w),
        grads: halfstep::Grads::Bf16(&g),
        momentum: Some(halfstep::State::F32(&mut buf)),
        stream: TensorStream::new(0),
    };
    sgd_step(&cfg, &StepContext::new(1, 2), &mut t).unwrap();
    assert_eq!(buf[0], 0.9f32);
}

// ---------------------------------------------------------------------------------------------
// The random bits an optimizer uses are the documented ones.

#[test]
fn stochastic_rounding_in_a_step_uses_the_documented_stream_and_purpose_bits() {
    use halfstep::convert::fill_element_bits;
    use halfstep::reference::round::f32_to_bf16_stochastic;
    use halfstep::rng::Purpose;
    let cfg = AdamConfig::adamw(1e-2);
    let (p0, g0, m0, v0) = inputs(8);
    let ctx = StepContext::new(0xABCD, 4);
    let stream = TensorStream {
        id: 77,
        index_base: 1000,
    };
    let mut w = OwnedWeights::new(WKind::Bf16(Rounding::Stochastic), &p0);
    let (mut m, mut v) = (
        OwnedState::new(Some(Rounding::Stochastic), &m0),
        OwnedState::new(Some(Rounding::Stochastic), &v0),
    );
    let ins = (w.values(), m.values(), v.values());
    let mut t = AdamTensor {
        weights: w.view(),
        grads: halfstep::Grads::F32(&g0),
        exp_avg: m.view(),
        exp_avg_sq: v.view(),
        max_exp_avg_sq: None,
        stream,
    };
    adam_step(&cfg, &ctx, &mut t).unwrap();
    let bits = |purpose| {
        let mut b = vec![0u16; N];
        fill_element_bits(&ctx, &stream, purpose, &mut b).unwrap();
        b
    };
    let (bw, bm, bv) = (
        bits(Purpose::Weights),
        bits(Purpose::FirstMoment),
        bits(Purpose::SecondMoment),
    );
    let c = cfg.consts(4);
    for i in 0..N {
        let (p, mm, vv, _) =
            halfstep::reference::adam::element(&c, ins.0[i], g0[i], ins.1[i], ins.2[i], 0.0);
        assert_eq!(
            w.top[i].to_bits(),
            f32_to_bf16_stochastic(p, bw[i]),
            "p[{i}]"
        );
        assert_eq!(
            m.bf16[i].to_bits(),
            f32_to_bf16_stochastic(mm, bm[i]),
            "m[{i}]"
        );
        assert_eq!(
            v.bf16[i].to_bits(),
            f32_to_bf16_stochastic(vv, bv[i]),
            "v[{i}]"
        );
    }
}

#[test]
fn stepping_a_tensor_in_shards_equals_stepping_it_whole() {
    // With index_base set, each shard draws the same bits it would as part of the whole (ZeRO).
    let cfg = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let (p0, g0, m0, _) = inputs(9);
    let run = |cuts: &[usize]| {
        let mut w = OwnedWeights::new(WKind::Bf16(Rounding::Stochastic), &p0);
        let mut m = OwnedState::new(Some(Rounding::Stochastic), &m0);
        let bounds: Vec<usize> = [&[0][..], cuts, &[N]].concat();
        for s in bounds.windows(2) {
            let (a, b) = (s[0], s[1]);
            let mut t = SgdTensor {
                weights: halfstep::Weights::Bf16(&mut w.top[a..b], Rounding::Stochastic),
                grads: halfstep::Grads::F32(&g0[a..b]),
                momentum: Some(halfstep::State::Bf16(
                    &mut m.bf16[a..b],
                    Rounding::Stochastic,
                )),
                stream: TensorStream {
                    id: 5,
                    index_base: a as u64,
                },
            };
            sgd_step(&cfg, &StepContext::new(3, 2), &mut t).unwrap();
        }
        (w.bits(), m.bits())
    };
    let whole = run(&[]);
    for cuts in [&[1][..], &[128], &[100, 101, 250]] {
        assert_eq!(run(cuts), whole, "cuts {cuts:?}");
    }
}
