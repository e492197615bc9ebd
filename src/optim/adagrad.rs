use super::{Step, require_eps, require_nonneg};
use crate::dispatch::Engine;
use crate::error::Result;
use crate::reference;
use crate::reference::adagrad::AdagradConsts;
use crate::rng::StepContext;
use crate::storage::State;
use crate::tensors::AdagradTensor;

/// Adagrad hyperparameters, with PyTorch's meaning and defaults (`torch.optim.Adagrad`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdagradConfig {
    /// Learning rate: finite, >= 0.
    pub lr: f32,
    /// Learning-rate decay: finite, >= 0.
    pub lr_decay: f32,
    /// L2 penalty added to the gradient: finite, >= 0.
    pub weight_decay: f32,
    /// Added after the square root: finite, > 0.
    pub eps: f32,
    /// The value [`AdagradConfig::init_sum`] fills the `sum` state with: finite, >= 0.
    pub initial_accumulator_value: f32,
    /// Maximize the objective (negate the gradient).
    pub maximize: bool,
}

impl Default for AdagradConfig {
    fn default() -> Self {
        AdagradConfig {
            lr: 1e-2,
            lr_decay: 0.0,
            weight_decay: 0.0,
            eps: 1e-10,
            initial_accumulator_value: 0.0,
            maximize: false,
        }
    }
}

impl AdagradConfig {
    /// Checks every hyperparameter.
    pub fn validate(&self) -> Result<()> {
        require_nonneg("lr", self.lr)?;
        require_nonneg("lr_decay", self.lr_decay)?;
        require_nonneg("weight_decay", self.weight_decay)?;
        require_eps(self.eps)?;
        require_nonneg("initial_accumulator_value", self.initial_accumulator_value)
    }

    /// The constants for `step` (>= 1).
    pub fn consts(&self, step: u32) -> AdagradConsts {
        let decay = 1.0 + f64::from(step - 1) * f64::from(self.lr_decay);
        AdagradConsts {
            clr: (f64::from(self.lr) / decay) as f32,
            weight_decay: self.weight_decay,
            eps: self.eps,
            maximize: self.maximize,
        }
    }

    /// Fills a fresh `sum` state with `initial_accumulator_value` (rounded to nearest for bf16).
    pub fn init_sum(&self, sum: &mut State<'_>) -> Result<()> {
        self.validate()?;
        let v = self.initial_accumulator_value;
        match sum {
            State::F32(s) => s.fill(v),
            State::Bf16(s, _) => s.fill(half::bf16::from_bits(
                reference::round::f32_to_bf16_nearest(v),
            )),
        }
        Ok(())
    }
}

super::tensor_pieces!(AdagradConfig, AdagradTensor);

impl Step for AdagradConfig {
    super::elementwise_step_items!(AdagradTensor);

    fn validate(&self) -> Result<()> {
        AdagradConfig::validate(self)
    }

    fn check_tensor(&self, t: &AdagradTensor<'_>) -> Result<()> {
        let n = t.weights.check()?;
        t.grads.check(n)?;
        t.sum.check("sum", n)?;
        t.stream.check(n)
    }

    fn step_checked(&self, engine: &Engine, ctx: &StepContext, t: &mut AdagradTensor<'_>) {
        (engine.k.adagrad)(&self.consts(ctx.step), ctx, t, engine.step_len());
    }
}

/// One Adagrad step on one tensor. Validates everything, then updates in place.
pub fn adagrad_step(
    config: &AdagradConfig,
    ctx: &StepContext,
    tensor: &mut AdagradTensor<'_>,
) -> Result<()> {
    config.step_one(&Engine::global()?, ctx, tensor)
}
