use super::{Step, powi_f64, require_beta, require_eps, require_nonneg};
use crate::dispatch::Engine;
use crate::error::Result;
use crate::reference::adam::AdamConsts;
use crate::rng::StepContext;
use crate::storage::check_optional;
use crate::tensors::AdamTensor;

/// Adam / AdamW hyperparameters, with PyTorch's meaning (`torch.optim.Adam`, `torch.optim.AdamW`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate: finite, >= 0.
    pub lr: f32,
    /// First-moment decay, in [0, 1).
    pub beta1: f32,
    /// Second-moment decay, in [0, 1).
    pub beta2: f32,
    /// Added to the denominator after the square root: finite, > 0.
    pub eps: f32,
    /// Weight decay: finite, >= 0. Decoupled (AdamW) or L2 (Adam) per `decoupled_weight_decay`.
    pub weight_decay: f32,
    /// AdamW (`p *= 1 - lr * wd` first) when true; Adam (`g += wd * p`) when false.
    pub decoupled_weight_decay: bool,
    /// Keep the running maximum of the second moment and use it in the denominator.
    pub amsgrad: bool,
    /// Maximize the objective (negate the gradient).
    pub maximize: bool,
}

impl AdamConfig {
    /// `torch.optim.Adam`'s defaults with the given learning rate.
    pub fn adam(lr: f32) -> AdamConfig {
        AdamConfig {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled_weight_decay: false,
            amsgrad: false,
            maximize: false,
        }
    }

    /// `torch.optim.AdamW`'s defaults (weight decay 0.01) with the given learning rate.
    pub fn adamw(lr: f32) -> AdamConfig {
        AdamConfig {
            weight_decay: 1e-2,
            decoupled_weight_decay: true,
            ..AdamConfig::adam(lr)
        }
    }
}

impl AdamConfig {
    /// Checks every hyperparameter.
    pub fn validate(&self) -> Result<()> {
        require_nonneg("lr", self.lr)?;
        require_beta("beta1", self.beta1)?;
        require_beta("beta2", self.beta2)?;
        require_eps(self.eps)?;
        require_nonneg("weight_decay", self.weight_decay)
    }

    /// The constants for `step` (>= 1).
    pub fn consts(&self, step: u32) -> AdamConsts {
        let lr = f64::from(self.lr);
        let bc1 = 1.0 - powi_f64(f64::from(self.beta1), step);
        let bc2 = 1.0 - powi_f64(f64::from(self.beta2), step);
        AdamConsts {
            one_minus_beta1: (1.0 - f64::from(self.beta1)) as f32,
            beta2: self.beta2,
            one_minus_beta2: (1.0 - f64::from(self.beta2)) as f32,
            step_size: (lr / bc1) as f32,
            inv_sqrt_bc2: (1.0 / bc2.sqrt()) as f32,
            eps: self.eps,
            weight_decay: self.weight_decay,
            decay_factor: (1.0 - lr * f64::from(self.weight_decay)) as f32,
            use_weight_decay: self.weight_decay != 0.0,
            decoupled: self.decoupled_weight_decay,
            amsgrad: self.amsgrad,
            maximize: self.maximize,
        }
    }
}

super::tensor_pieces!(AdamConfig, AdamTensor);

impl Step for AdamConfig {
    super::elementwise_step_items!(AdamTensor);

    fn validate(&self) -> Result<()> {
        AdamConfig::validate(self)
    }

    fn check_tensor(&self, t: &AdamTensor<'_>) -> Result<()> {
        let n = t.weights.check()?;
        t.grads.check(n)?;
        t.exp_avg.check("exp_avg", n)?;
        t.exp_avg_sq.check("exp_avg_sq", n)?;
        check_optional(&t.max_exp_avg_sq, "max_exp_avg_sq", self.amsgrad, n)?;
        t.stream.check(n)
    }

    fn step_checked(&self, engine: &Engine, ctx: &StepContext, t: &mut AdamTensor<'_>) {
        (engine.k.adam)(&self.consts(ctx.step), ctx, t, engine.step_len());
    }
}

/// One Adam / AdamW step on one tensor. Validates everything, then updates in place.
pub fn adam_step(
    config: &AdamConfig,
    ctx: &StepContext,
    tensor: &mut AdamTensor<'_>,
) -> Result<()> {
    config.step_one(&Engine::global()?, ctx, tensor)
}
