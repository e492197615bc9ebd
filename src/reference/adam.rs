//! Reference Adam / AdamW (SPEC.md §6.4).

use crate::optim::{AdamConsts, AdamTensor};
use crate::reference::bits::element_bits;
use crate::rng::{Purpose, StepContext, coord};

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
