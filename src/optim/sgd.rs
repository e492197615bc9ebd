use super::{Step, require_nonneg};
use crate::dispatch::Engine;
use crate::error::Result;
use crate::error::require;
use crate::reference::sgd::SgdConsts;
use crate::rng::StepContext;
use crate::storage::check_optional;
use crate::tensors::SgdTensor;

/// SGD hyperparameters, with PyTorch's meaning and defaults (`torch.optim.SGD`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate: finite, >= 0.
    pub lr: f32,
    /// Momentum factor in [0, 1]; 0 means no momentum buffer.
    pub momentum: f32,
    /// Dampening in [0, 1] (must be 0 with nesterov).
    pub dampening: f32,
    /// L2 penalty added to the gradient: finite, >= 0.
    pub weight_decay: f32,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// Maximize the objective (negate the gradient).
    pub maximize: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

impl SgdConfig {
    /// Checks every hyperparameter.
    pub fn validate(&self) -> Result<()> {
        require_nonneg("lr", self.lr)?;
        let unit = "in [0, 1]";
        require(
            (0.0..=1.0).contains(&self.momentum),
            "momentum",
            self.momentum,
            unit,
        )?;
        require(
            (0.0..=1.0).contains(&self.dampening),
            "dampening",
            self.dampening,
            unit,
        )?;
        require_nonneg("weight_decay", self.weight_decay)?;
        if self.nesterov {
            require(
                self.momentum > 0.0,
                "momentum",
                self.momentum,
                "> 0 with nesterov",
            )?;
            require(
                self.dampening == 0.0,
                "dampening",
                self.dampening,
                "0 with nesterov",
            )?;
        }
        Ok(())
    }

    /// The constants for `step` (>= 1).
    pub fn consts(&self, step: u32) -> SgdConsts {
        SgdConsts {
            lr: self.lr,
            momentum: self.momentum,
            one_minus_dampening: (1.0 - f64::from(self.dampening)) as f32,
            weight_decay: self.weight_decay,
            use_momentum: self.momentum != 0.0,
            first_step: step == 1,
            nesterov: self.nesterov,
            maximize: self.maximize,
        }
    }
}

super::tensor_pieces!(SgdConfig, SgdTensor);

impl Step for SgdConfig {
    super::elementwise_step_items!(SgdTensor);

    fn validate(&self) -> Result<()> {
        SgdConfig::validate(self)
    }

    fn check_tensor(&self, t: &SgdTensor<'_>) -> Result<()> {
        let n = t.weights.check()?;
        t.grads.check(n)?;
        check_optional(&t.momentum, "momentum", self.momentum != 0.0, n)?;
        t.stream.check(n)
    }

    fn step_checked(&self, engine: &Engine, ctx: &StepContext, t: &mut SgdTensor<'_>) {
        (engine.k.sgd)(&self.consts(ctx.step), ctx, t, engine.step_len());
    }
}

/// One SGD step on one tensor. Validates everything, then updates in place.
pub fn sgd_step(config: &SgdConfig, ctx: &StepContext, tensor: &mut SgdTensor<'_>) -> Result<()> {
    config.step_one(&Engine::global()?, ctx, tensor)
}
