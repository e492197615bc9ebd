//! Reference Adam / AdamW (SPEC.md §6.4).

use crate::reference::bits::element_bits;
use crate::rng::{Purpose, StepContext, coord};
use crate::tensors::AdamTensor;

/// The f32 constants one Adam step uses (SPEC.md §6.4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConsts {
    /// `f32(1 - f64(beta1))`.
    pub one_minus_beta1: f32,
    /// `beta2`.
    pub beta2: f32,
    /// `f32(1 - f64(beta2))`.
    pub one_minus_beta2: f32,
    /// `f32(f64(lr) / (1 - beta1^step))`.
    pub step_size: f32,
    /// `f32(1 / sqrt(1 - beta2^step))`.
    pub inv_sqrt_bc2: f32,
    /// `eps`.
    pub eps: f32,
    /// Adam: `weight_decay` (added to the gradient). Unused for AdamW.
    pub weight_decay: f32,
    /// AdamW: `f32(1 - f64(lr) * f64(weight_decay))` (multiplies the weight). Unused for Adam.
    pub decay_factor: f32,
    /// Whether any weight decay applies (`weight_decay != 0`).
    pub use_weight_decay: bool,
    /// AdamW rather than Adam.
    pub decoupled: bool,
    /// AMSGrad.
    pub amsgrad: bool,
    /// Maximize.
    pub maximize: bool,
}

/// The first- and second-moment updates shared by Adam and LAMB: `(m', v')`.
#[inline]
pub fn moments(
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    g: f32,
    m: f32,
    v: f32,
) -> (f32, f32) {
    let m = one_minus_beta1.mul_add(g - m, m);
    let v = beta2.mul_add(v, one_minus_beta2 * (g * g));
    (m, v)
}

/// NaN-propagating maximum for AMSGrad: `v` if `v > vmax` or `v` is NaN, else `vmax`.
#[inline]
pub fn amsgrad_max(vmax: f32, v: f32) -> f32 {
    if v > vmax || v.is_nan() { v } else { vmax }
}

/// The update of one element: `(p', m', v', vmax')` (`vmax` passes through unless amsgrad).
pub fn element(c: &AdamConsts, p: f32, g: f32, m: f32, v: f32, vmax: f32) -> (f32, f32, f32, f32) {
    let mut g = if c.maximize { -g } else { g };
    let mut p = p;
    if c.use_weight_decay {
        if c.decoupled {
            p *= c.decay_factor;
        } else {
            g = c.weight_decay.mul_add(p, g);
        }
    }
    let (m, v) = moments(c.one_minus_beta1, c.beta2, c.one_minus_beta2, g, m, v);
    let (vmax, v_used) = if c.amsgrad {
        let vmax = amsgrad_max(vmax, v);
        (vmax, vmax)
    } else {
        (vmax, v)
    };
    let denom = v_used.sqrt().mul_add(c.inv_sqrt_bc2, c.eps);
    ((-c.step_size).mul_add(m / denom, p), m, v, vmax)
}

/// Steps one tensor in place. The caller has validated the tensor against the configuration.
pub fn step(c: &AdamConsts, ctx: &StepContext, t: &mut AdamTensor<'_>) {
    let w_bits = coord(ctx, &t.stream, Purpose::Weights);
    let m_bits = coord(ctx, &t.stream, Purpose::FirstMoment);
    let v_bits = coord(ctx, &t.stream, Purpose::SecondMoment);
    let x_bits = coord(ctx, &t.stream, Purpose::MaxSecondMoment);
    for i in 0..t.weights.len() {
        let e = t.stream.index_base + i as u64;
        let vmax = t.max_exp_avg_sq.as_ref().map_or(0.0, |s| s.load(i));
        let (p, m, v, vmax) = element(
            c,
            t.weights.load(i),
            t.grads.load(i),
            t.exp_avg.load(i),
            t.exp_avg_sq.load(i),
            vmax,
        );
        t.exp_avg.store(i, m, || element_bits(&m_bits, e));
        t.exp_avg_sq.store(i, v, || element_bits(&v_bits, e));
        if let Some(s) = t.max_exp_avg_sq.as_mut() {
            s.store(i, vmax, || element_bits(&x_bits, e));
        }
        t.weights.store(i, p, || element_bits(&w_bits, e));
    }
}
