use super::{Step, powi_f64, require, require_beta, require_eps, require_nonneg};
use crate::dispatch::Engine;
use crate::error::Result;
use crate::rng::{StepContext, TensorStream};
use crate::storage::{Grads, State, Weights};

/// LAMB hyperparameters (NVLAMB, as in IPEX's fused LAMB: bias-corrected Adam direction plus
/// decoupled weight decay, scaled per tensor by the trust ratio ‖p‖ / ‖u‖).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LambConfig {
    /// Learning rate: finite, >= 0.
    pub lr: f32,
    /// First-moment decay, in [0, 1).
    pub beta1: f32,
    /// Second-moment decay, in [0, 1).
    pub beta2: f32,
    /// Added after the square root: finite, > 0.
    pub eps: f32,
    /// Decoupled weight decay added to the update direction: finite, >= 0.
    pub weight_decay: f32,
    /// Upper clamp of the trust ratio: finite and > 0 when given.
    pub max_trust_ratio: Option<f32>,
}

impl Default for LambConfig {
    fn default() -> Self {
        LambConfig {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-6,
            weight_decay: 0.01,
            max_trust_ratio: None,
        }
    }
}

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

impl LambConfig {
    /// Checks every hyperparameter.
    pub fn validate(&self) -> Result<()> {
        require_nonneg("lr", self.lr)?;
        require_beta("beta1", self.beta1)?;
        require_beta("beta2", self.beta2)?;
        require_eps(self.eps)?;
        require_nonneg("weight_decay", self.weight_decay)?;
        if let Some(m) = self.max_trust_ratio {
            require(
                m.is_finite() && m > 0.0,
                "max_trust_ratio",
                m,
                "finite and > 0",
            )?;
        }
        Ok(())
    }

    /// The constants for `step` (>= 1).
    pub fn consts(&self, step: u32) -> LambConsts {
        let bc1 = 1.0 - powi_f64(f64::from(self.beta1), step);
        let bc2 = 1.0 - powi_f64(f64::from(self.beta2), step);
        LambConsts {
            one_minus_beta1: (1.0 - f64::from(self.beta1)) as f32,
            beta2: self.beta2,
            one_minus_beta2: (1.0 - f64::from(self.beta2)) as f32,
            inv_bc1: (1.0 / bc1) as f32,
            inv_bc2: (1.0 / bc2) as f32,
            eps: self.eps,
            weight_decay: self.weight_decay,
            lr: self.lr,
            max_trust_ratio: self.max_trust_ratio,
        }
    }
}

/// One tensor's buffers for a LAMB step (the trust ratio is per tensor).
#[derive(Debug)]
pub struct LambTensor<'a> {
    /// Weights, updated in place.
    pub weights: Weights<'a>,
    /// Gradients.
    pub grads: Grads<'a>,
    /// First moment.
    pub exp_avg: State<'a>,
    /// Second moment.
    pub exp_avg_sq: State<'a>,
    /// Where this tensor's random bits come from.
    pub stream: TensorStream,
}

impl Step for LambConfig {
    type Tensor<'a> = LambTensor<'a>;

    fn validate(&self) -> Result<()> {
        LambConfig::validate(self)
    }

    fn check_tensor(&self, t: &LambTensor<'_>) -> Result<()> {
        let n = t.weights.check()?;
        t.grads.check(n)?;
        t.exp_avg.check("exp_avg", n)?;
        t.exp_avg_sq.check("exp_avg_sq", n)?;
        t.stream.check(n)
    }

    fn step_checked(&self, engine: &Engine, ctx: &StepContext, t: &mut LambTensor<'_>) {
        (engine.k.lamb)(&self.consts(ctx.step), ctx, t);
    }
}

/// One LAMB step on one tensor (two passes, no workspace). Validates everything, then updates
/// in place.
pub fn lamb_step(
    config: &LambConfig,
    ctx: &StepContext,
    tensor: &mut LambTensor<'_>,
) -> Result<()> {
    config.step_one(&Engine::global()?, ctx, tensor)
}
