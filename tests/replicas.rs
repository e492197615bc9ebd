//! Replicas and checkpoints (SPEC.md §3.3): identical-mode replicas stay bit-identical under SR,
//! differing-mode replicas round differently, runs reproduce, and resume == uninterrupted.

mod common;
use common::*;
use halfstep::{
    AdamConfig, AdamTensor, Checkpoint, Optimizer, Replica, Rounding, TensorStream, bf16,
};

const N: usize = 517;

/// One replica's training state: bf16 SR weights, bf16 SR moments.
#[derive(Clone, Debug, PartialEq)]
struct Replicated {
    w: OwnedWeights,
    m: OwnedState,
    v: OwnedState,
}

impl Replicated {
    fn new() -> Self {
        let mut r = rng(5);
        let p: Vec<f32> = (0..N).map(|_| uniform(&mut r, -1.0, 1.0)).collect();
        Replicated {
            w: OwnedWeights::new(WKind::Bf16(Rounding::Stochastic), &p),
            m: OwnedState::new(Some(Rounding::Stochastic), &vec![0.0; N]),
            v: OwnedState::new(Some(Rounding::Stochastic), &vec![0.0; N]),
        }
    }

    fn bits(&self) -> Vec<u32> {
        [self.w.bits(), self.m.bits(), self.v.bits()].concat()
    }
}

/// The gradient every replica sees at `step` (as after an all-reduce): a pull toward a target
/// plus step-dependent noise, computed from the given weights.
fn grad(w: &[f32], step: u32) -> Vec<bf16> {
    let mut r = rng(1000 + u64::from(step));
    w.iter()
        .enumerate()
        .map(|(i, &x)| {
            bf16::from_f32(x - (i as f32 / N as f32) + 0.01 * uniform(&mut r, -1.0, 1.0))
        })
        .collect()
}

fn step(opt: &mut Optimizer<AdamConfig>, s: &mut Replicated, g: &[bf16], replica: Replica) {
    let mut t = [AdamTensor {
        weights: s.w.view(),
        grads: halfstep::Grads::Bf16(g),
        exp_avg: s.m.view(),
        exp_avg_sq: s.v.view(),
        max_exp_avg_sq: None,
        stream: TensorStream::new(9),
    }];
    opt.step_with_replica(&mut t, replica).unwrap();
}

fn config() -> AdamConfig {
    AdamConfig::adamw(1e-3)
}

/// `replicas` replicas for `steps` steps; replica 0's weights drive the shared gradient.
fn train(replicas: usize, steps: u32, mode: impl Fn(usize) -> Replica) -> Vec<Replicated> {
    let mut states = vec![Replicated::new(); replicas];
    let mut opts: Vec<_> = (0..replicas)
        .map(|_| Optimizer::new(config(), 0xC0FFEE).unwrap())
        .collect();
    for s in 1..=steps {
        let g = grad(&states[0].w.values(), s);
        for r in 0..replicas {
            step(&mut opts[r], &mut states[r], &g, mode(r));
        }
    }
    states
}

#[test]
fn identical_mode_replicas_stay_bit_identical_for_100_sr_steps() {
    let states = train(4, 100, |_| Replica::Identical);
    for r in 1..4 {
        assert_eq!(states[r].bits(), states[0].bits(), "replica {r} drifted");
    }
    // And the run did move the weights (the test would be vacuous otherwise).
    assert_ne!(states[0].w.bits(), Replicated::new().w.bits());
}

#[test]
fn differing_mode_replicas_round_differently() {
    let states = train(4, 1, |r| Replica::Differing(r as u16));
    for a in 0..4 {
        for b in a + 1..4 {
            let differ = states[a]
                .w
                .bits()
                .iter()
                .zip(&states[b].w.bits())
                .filter(|(x, y)| x != y)
                .count();
            assert!(
                differ > N / 20,
                "replicas {a} and {b} differ in only {differ} weights"
            );
        }
    }
}

#[test]
fn runs_reproduce_bit_for_bit() {
    let a = train(2, 30, |r| Replica::Differing(r as u16));
    let b = train(2, 30, |r| Replica::Differing(r as u16));
    assert_eq!(a, b);
}

#[test]
fn checkpoint_and_resume_at_step_50_equals_an_uninterrupted_run() {
    let uninterrupted = train(1, 100, |_| Replica::Identical).remove(0);

    let mut s = Replicated::new();
    let mut opt = Optimizer::new(config(), 0xC0FFEE).unwrap();
    for k in 1..=50 {
        let g = grad(&s.w.values(), k);
        step(&mut opt, &mut s, &g, Replica::Identical);
    }
    // "Save": the RNG state as bytes, the tensors as copies; drop the optimizer.
    let blob = opt.checkpoint().to_bytes();
    let saved = s.clone();
    let _ = opt; // the optimizer object is not needed to resume

    let mut s = saved;
    let mut opt = Optimizer::resume(config(), Checkpoint::from_bytes(&blob).unwrap()).unwrap();
    assert_eq!(opt.checkpoint().steps_taken, 50);
    for k in 51..=100 {
        let g = grad(&s.w.values(), k);
        step(&mut opt, &mut s, &g, Replica::Identical);
    }
    assert_eq!(s.bits(), uninterrupted.bits());

    // Resuming with the wrong step count does not reproduce the run (the step is in the counter).
    let mut s2 = Replicated::new();
    let mut opt2 = Optimizer::new(config(), 0xC0FFEE).unwrap();
    let g = grad(&s2.w.values(), 1);
    step(&mut opt2, &mut s2, &g, Replica::Identical);
    let mut s3 = Replicated::new();
    let mut opt3 = Optimizer::resume(
        config(),
        Checkpoint {
            seed: 0xC0FFEE,
            steps_taken: 1,
        },
    )
    .unwrap();
    step(&mut opt3, &mut s3, &g, Replica::Identical);
    assert_ne!(s2.w.bits(), s3.w.bits());
}
