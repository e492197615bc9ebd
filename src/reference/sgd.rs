//! Reference SGD (SPEC.md §6.2).

use crate::reference::bits::element_bits;
use crate::rng::{Purpose, StepContext, coord};
use crate::tensors::SgdTensor;

/// The f32 constants one SGD step uses (SPEC.md §6.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConsts {
    /// `lr`.
    pub lr: f32,
    /// `momentum`.
    pub momentum: f32,
    /// `f32(1 - f64(dampening))`.
    pub one_minus_dampening: f32,
    /// `weight_decay`.
    pub weight_decay: f32,
    /// Whether a momentum buffer is used (momentum != 0).
    pub use_momentum: bool,
    /// Step 1: the momentum buffer is set to the gradient, its old contents ignored.
    pub first_step: bool,
    /// Nesterov.
    pub nesterov: bool,
    /// Maximize.
    pub maximize: bool,
}

/// The update of one element: new weight and new momentum (when momentum is used).
pub fn element(c: &SgdConsts, p: f32, g: f32, buf: f32) -> (f32, f32) {
    let mut g = if c.maximize { -g } else { g };
    if c.weight_decay != 0.0 {
        g = c.weight_decay.mul_add(p, g);
    }
    let mut buf_new = buf;
    if c.use_momentum {
        buf_new = if c.first_step {
            g
        } else {
            c.momentum.mul_add(buf, c.one_minus_dampening * g)
        };
        g = if c.nesterov {
            c.momentum.mul_add(buf_new, g)
        } else {
            buf_new
        };
    }
    ((-c.lr).mul_add(g, p), buf_new)
}

/// Steps one tensor in place. The caller has validated the tensor against the configuration.
pub fn step(c: &SgdConsts, ctx: &StepContext, t: &mut SgdTensor<'_>) {
    let w_bits = coord(ctx, &t.stream, Purpose::Weights);
    let m_bits = coord(ctx, &t.stream, Purpose::FirstMoment);
    for i in 0..t.weights.len() {
        let e = t.stream.index_base + i as u64;
        let p = t.weights.load(i);
        let g = t.grads.load(i);
        let buf = t.momentum.as_ref().map_or(0.0, |m| m.load(i));
        let (p, buf) = element(c, p, g, buf);
        if let Some(m) = t.momentum.as_mut() {
            m.store(i, buf, || element_bits(&m_bits, e));
        }
        t.weights.store(i, p, || element_bits(&w_bits, e));
    }
}
