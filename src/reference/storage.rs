//! Reading and writing one element of each storage kind (SPEC.md §5): the only place the
//! reference optimizers touch memory, so each optimizer's body is written once for all formats.

use super::round::{self, Mode, canonicalize_nan};
use super::split;
use crate::storage::{Grads, State, Weights};
use half::bf16;

impl Weights<'_> {
    /// Element `i` as f32 (exact for every kind).
    pub(crate) fn load(&self, i: usize) -> f32 {
        match self {
            Weights::F32(w) => w[i],
            Weights::Split { top, trail } => split::combine_one(top[i], trail[i]),
            Weights::Bf16(w, _) => w[i].to_f32(),
        }
    }

    /// Stores `v` into element `i`: NaN is canonicalised, then `Split` keeps it whole and `Bf16`
    /// rounds with its rule, asking `bits` for the element's random bits only when stochastic.
    pub(crate) fn store(&mut self, i: usize, v: f32, bits: impl FnOnce() -> u16) {
        let v = canonicalize_nan(v);
        match self {
            Weights::F32(w) => w[i] = v,
            Weights::Split { top, trail } => (top[i], trail[i]) = split::split_one(v),
            Weights::Bf16(w, rounding) => w[i] = narrow(v, *rounding, bits),
        }
    }
}

impl Grads<'_> {
    /// Element `i` as f32 (exact).
    pub(crate) fn load(&self, i: usize) -> f32 {
        match self {
            Grads::F32(g) => g[i],
            Grads::Bf16(g) => g[i].to_f32(),
        }
    }
}

impl State<'_> {
    /// Element `i` as f32 (exact).
    pub(crate) fn load(&self, i: usize) -> f32 {
        match self {
            State::F32(s) => s[i],
            State::Bf16(s, _) => s[i].to_f32(),
        }
    }

    /// Stores `v` into element `i` (NaN canonicalised; bf16 rounded with the buffer's rule).
    pub(crate) fn store(&mut self, i: usize, v: f32, bits: impl FnOnce() -> u16) {
        let v = canonicalize_nan(v);
        match self {
            State::F32(s) => s[i] = v,
            State::Bf16(s, rounding) => s[i] = narrow(v, *rounding, bits),
        }
    }
}

fn narrow(v: f32, rounding: round::Rounding, bits: impl FnOnce() -> u16) -> bf16 {
    let r = match rounding {
        round::Rounding::Stochastic => bits(),
        _ => 0,
    };
    bf16::from_bits(round::f32_to_bf16(v, Mode::new(rounding, r)))
}
