//! How a tensor's values are held in memory. An optimizer step reads every format as f32, does
//! its arithmetic in f32, and writes back in the buffer's own format (SPEC.md §5).

use crate::error::{Error, Result};
use half::bf16;

pub use crate::reference::round::Rounding;

/// The weights of one tensor, updated in place.
#[derive(Debug)]
pub enum Weights<'a> {
    /// Plain f32 master weights.
    F32(&'a mut [f32]),
    /// An f32 master weight kept as two 16-bit halves (IPEX's Split-SGD layout): `top` is the bf16
    /// model weight (the high half of the f32 bits), `trail` the low half. Nothing is lost.
    Split {
        /// High 16 bits: the bf16 weight the model computes with.
        top: &'a mut [bf16],
        /// Low 16 bits.
        trail: &'a mut [u16],
    },
    /// bf16 weights only; the new f32 value is rounded back with the given rule.
    Bf16(&'a mut [bf16], Rounding),
}

/// The gradient of one tensor (read only).
#[derive(Clone, Copy, Debug)]
pub enum Grads<'a> {
    /// f32 gradients.
    F32(&'a [f32]),
    /// bf16 gradients (widened exactly).
    Bf16(&'a [bf16]),
}

/// One optimizer-state buffer (momentum, `exp_avg`, `exp_avg_sq`, Adagrad's `sum`, ...).
#[derive(Debug)]
pub enum State<'a> {
    /// f32 state.
    F32(&'a mut [f32]),
    /// bf16 state, rounded back with the given rule (stochastic is the usual choice).
    Bf16(&'a mut [bf16], Rounding),
}

impl Weights<'_> {
    /// Number of elements; for `Split` the top's length (the trail is checked against it).
    pub fn len(&self) -> usize {
        match self {
            Weights::F32(w) => w.len(),
            Weights::Split { top, .. } => top.len(),
            Weights::Bf16(w, _) => w.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that the weights are non-empty and (for `Split`) that both halves agree; returns the length.
    pub(crate) fn check(&self) -> Result<usize> {
        if let Weights::Split { top, trail } = self
            && top.len() != trail.len()
        {
            return Err(Error::LengthMismatch {
                buffer: "trail",
                expected: top.len(),
                found: trail.len(),
            });
        }
        if self.is_empty() {
            return Err(Error::Empty);
        }
        Ok(self.len())
    }
}

impl Grads<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Grads::F32(g) => g.len(),
            Grads::Bf16(g) => g.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn check(&self, n: usize) -> Result<()> {
        check_len("grads", n, self.len())
    }
}

impl State<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            State::F32(s) => s.len(),
            State::Bf16(s, _) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn check(&self, buffer: &'static str, n: usize) -> Result<()> {
        check_len(buffer, n, self.len())
    }
}

/// Checks an optional state buffer: present iff `required`, and of length `n`.
pub(crate) fn check_optional(
    s: &Option<State<'_>>,
    buffer: &'static str,
    required: bool,
    n: usize,
) -> Result<()> {
    match (s, required) {
        (Some(s), true) => s.check(buffer, n),
        (None, false) => Ok(()),
        (_, required) => Err(Error::StateMismatch { buffer, required }),
    }
}

pub(crate) fn check_len(buffer: &'static str, expected: usize, found: usize) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            buffer,
            expected,
            found,
        })
    }
}
