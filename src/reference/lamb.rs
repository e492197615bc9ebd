//! Reference LAMB (SPEC.md §6.5): pass 1 updates the moments and accumulates ‖p‖² and ‖u‖²;
//! the trust ratio is formed in f64; pass 2 recomputes `u` from the *stored* moments and writes
//! the weights. Both passes read the same stored values, so no workspace is needed and the
//! direction the norm measured is the direction applied.

use crate::reference::adam::moments;
use crate::reference::bits::element_bits;
use crate::reference::norm::{NORM_BLOCK, SumSquares};
use crate::rng::{Purpose, StepContext, coord};
use crate::tensors::LambTensor;

/// The f32 constants one LAMB step uses (SPEC.md §6.5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LambConsts {
    /// `f32(1 - f64(beta1))`.
    pub one_minus_beta1: f32,
    /// `beta2`.
    pub beta2: f32,
    /// `f32(1 - f64(beta2))`.
    pub one_minus_beta2: f32,
    /// `f32(1 / (1 - beta1^step))`.
    pub inv_bc1: f32,
    /// `f32(1 / (1 - beta2^step))`.
    pub inv_bc2: f32,
    /// `eps`.
    pub eps: f32,
    /// `weight_decay`.
    pub weight_decay: f32,
    /// `lr` (combined with the trust ratio in f64 between the passes).
    pub lr: f32,
    /// The trust-ratio clamp.
    pub max_trust_ratio: Option<f32>,
}

/// The update direction `u` for one element from the weight and the stored moments.
#[inline]
pub fn direction(c: &LambConsts, p: f32, m: f32, v: f32) -> f32 {
    let m_hat = m * c.inv_bc1;
    let v_hat = v * c.inv_bc2;
    let u = m_hat / (v_hat.sqrt() + c.eps);
    if c.weight_decay != 0.0 {
        c.weight_decay.mul_add(p, u)
    } else {
        u
    }
}

/// `f32(lr * ratio)` where `ratio = ‖p‖ / ‖u‖` if both norms are > 0, else 1, then clamped to
/// `max_trust_ratio` (a NaN ratio stays NaN). All in f64.
pub fn scaled_lr(c: &LambConsts, sum_sq_p: f64, sum_sq_u: f64) -> f32 {
    let (p_norm, u_norm) = (sum_sq_p.sqrt(), sum_sq_u.sqrt());
    let mut ratio = if p_norm > 0.0 && u_norm > 0.0 {
        p_norm / u_norm
    } else {
        1.0
    };
    if let Some(max) = c.max_trust_ratio
        && ratio > f64::from(max)
    {
        ratio = f64::from(max);
    }
    (f64::from(c.lr) * ratio) as f32
}

/// Pass 1's element loop: moments updated and stored; `visit(e, p, u)` sees each element's
/// global index, weight and direction (from the moments as stored), in index order.
fn update_moments(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    mut visit: impl FnMut(u64, f32, f32),
) {
    let m_bits = coord(ctx, &t.stream, Purpose::FirstMoment);
    let v_bits = coord(ctx, &t.stream, Purpose::SecondMoment);
    for i in 0..t.weights.len() {
        let e = t.stream.index_base + i as u64;
        let p = t.weights.load(i);
        let g = t.grads.load(i);
        let (m, v) = moments(
            c.one_minus_beta1,
            c.beta2,
            c.one_minus_beta2,
            g,
            t.exp_avg.load(i),
            t.exp_avg_sq.load(i),
        );
        t.exp_avg.store(i, m, || element_bits(&m_bits, e));
        t.exp_avg_sq.store(i, v, || element_bits(&v_bits, e));
        visit(
            e,
            p,
            direction(c, p, t.exp_avg.load(i), t.exp_avg_sq.load(i)),
        );
    }
}

/// Pass 1: moments updated and stored; returns the canonical sums of squares of `p` and `u`.
pub fn pass1(c: &LambConsts, ctx: &StepContext, t: &mut LambTensor<'_>) -> (f64, f64) {
    let base = t.stream.index_base;
    let (mut sp, mut su) = (SumSquares::new(base), SumSquares::new(base));
    update_moments(c, ctx, t, |_, p, u| {
        sp.push(p);
        su.push(u);
    });
    (sp.finish(), su.finish())
}

/// Pass 1 for a piece of a tensor, as the parallel driver runs it: instead of the totals, the
/// canonical sums of each norm block the piece touches, `out[k]` for block
/// `index_base / NORM_BLOCK + k`. Adding `out` in order, from +0, gives [`pass1`]'s totals (that
/// is how [`pass1`] adds blocks), so pieces cut at block edges give the whole tensor's norms.
pub fn pass1_blocks(
    c: &LambConsts,
    ctx: &StepContext,
    t: &mut LambTensor<'_>,
    out: &mut [[f64; 2]],
) {
    let first = t.stream.index_base / NORM_BLOCK as u64;
    let mut current: Option<(usize, SumSquares, SumSquares)> = None;
    update_moments(c, ctx, t, |e, p, u| {
        let k = (e / NORM_BLOCK as u64 - first) as usize;
        let (_, sp, su) = match &mut current {
            Some(block) if block.0 == k => block,
            _ => {
                if let Some((j, sp, su)) = current.take() {
                    out[j] = [sp.finish(), su.finish()];
                }
                current.insert((k, SumSquares::new(e), SumSquares::new(e)))
            }
        };
        sp.push(p);
        su.push(u);
    });
    if let Some((j, sp, su)) = current {
        out[j] = [sp.finish(), su.finish()];
    }
}

/// Pass 2: `p = fma(-lr_ratio, u, p)` with `u` recomputed from the stored moments.
pub fn pass2(c: &LambConsts, ctx: &StepContext, t: &mut LambTensor<'_>, lr_ratio: f32) {
    let w_bits = coord(ctx, &t.stream, Purpose::Weights);
    for i in 0..t.weights.len() {
        let e = t.stream.index_base + i as u64;
        let p = t.weights.load(i);
        let u = direction(c, p, t.exp_avg.load(i), t.exp_avg_sq.load(i));
        t.weights
            .store(i, (-lr_ratio).mul_add(u, p), || element_bits(&w_bits, e));
    }
}

/// Steps one tensor in place. The caller has validated the tensor against the configuration.
pub fn step(c: &LambConsts, ctx: &StepContext, t: &mut LambTensor<'_>) {
    let (sp, su) = pass1(c, ctx, t);
    let lr_ratio = scaled_lr(c, sp, su);
    pass2(c, ctx, t, lr_ratio);
}
