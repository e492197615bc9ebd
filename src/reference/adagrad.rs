//! Reference Adagrad (SPEC.md §6.3).

use crate::reference::bits::element_bits;
use crate::rng::{Purpose, StepContext, coord};
use crate::tensors::AdagradTensor;

/// The f32 constants one Adagrad step uses (SPEC.md §6.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdagradConsts {
    /// `f32(f64(lr) / (1 + f64(step - 1) * f64(lr_decay)))`.
    pub clr: f32,
    /// `weight_decay`.
    pub weight_decay: f32,
    /// `eps`.
    pub eps: f32,
    /// Maximize.
    pub maximize: bool,
}

/// The update of one element: new weight and new sum.
pub fn element(c: &AdagradConsts, p: f32, g: f32, sum: f32) -> (f32, f32) {
    let mut g = if c.maximize { -g } else { g };
    if c.weight_decay != 0.0 {
        g = c.weight_decay.mul_add(p, g);
    }
    let sum = g.mul_add(g, sum);
    let denom = sum.sqrt() + c.eps;
    ((-c.clr).mul_add(g / denom, p), sum)
}

/// Steps one tensor in place. The caller has validated the tensor against the configuration.
pub fn step(c: &AdagradConsts, ctx: &StepContext, t: &mut AdagradTensor<'_>) {
    let w_bits = coord(ctx, &t.stream, Purpose::Weights);
    let s_bits = coord(ctx, &t.stream, Purpose::SecondMoment);
    for i in 0..t.weights.len() {
        let e = t.stream.index_base + i as u64;
        let (p, sum) = element(c, t.weights.load(i), t.grads.load(i), t.sum.load(i));
        t.sum.store(i, sum, || element_bits(&s_bits, e));
        t.weights.store(i, p, || element_bits(&w_bits, e));
    }
}
