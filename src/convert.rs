//! Slice conversions between f32 and the 16-bit formats, the Split-SGD split/combine, and the raw
//! random bits every stochastic rounding draws ([`fill_element_bits`]).
//! Stochastic modes draw their bits from the [`Purpose::Weights`] stream of `stream` at `ctx`.
//! The free functions run on [`Engine::global`]; the same operations are methods of [`Engine`].

use crate::dispatch::Engine;
use crate::error::Result;
use crate::reference::round::Rounding;
use crate::rng::{Purpose, StepContext, TensorStream, checked_coord};
use crate::storage::{check_len, check_nonempty, check_pair};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// The kernel signature shared by the two narrowing conversions.
type NarrowKernel = fn(&[f32], &mut [u16], Rounding, &crate::reference::bits::BitsCoord, u64);

/// Validates, then runs a narrowing kernel into `dst` (the 16-bit patterns).
fn narrow(
    kernel: NarrowKernel,
    src: &[f32],
    dst: &mut [u16],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    check_pair(src.len(), dst.len(), "dst")?;
    let c = checked_coord(ctx, stream, Purpose::Weights, src.len())?;
    kernel(src, dst, rounding, &c, stream.index_base);
    Ok(())
}

impl Engine {
    /// f32 -> bf16 with the given rounding (SPEC.md §4.1–4.2).
    pub fn f32_to_bf16(
        &self,
        src: &[f32],
        dst: &mut [bf16],
        rounding: Rounding,
        ctx: &StepContext,
        stream: &TensorStream,
    ) -> Result<()> {
        narrow(
            self.k.f32_to_bf16,
            src,
            dst.reinterpret_cast_mut(),
            rounding,
            ctx,
            stream,
        )
    }

    /// f32 -> f16 with the given rounding, gradual underflow included (SPEC.md §4.3).
    pub fn f32_to_f16(
        &self,
        src: &[f32],
        dst: &mut [f16],
        rounding: Rounding,
        ctx: &StepContext,
        stream: &TensorStream,
    ) -> Result<()> {
        narrow(
            self.k.f32_to_f16,
            src,
            dst.reinterpret_cast_mut(),
            rounding,
            ctx,
            stream,
        )
    }

    /// bf16 -> f32 (exact).
    pub fn bf16_to_f32(&self, src: &[bf16], dst: &mut [f32]) -> Result<()> {
        check_pair(src.len(), dst.len(), "dst")?;
        (self.k.bf16_to_f32)(src.reinterpret_cast(), dst);
        Ok(())
    }

    /// f16 -> f32 (exact).
    pub fn f16_to_f32(&self, src: &[f16], dst: &mut [f32]) -> Result<()> {
        check_pair(src.len(), dst.len(), "dst")?;
        (self.k.f16_to_f32)(src.reinterpret_cast(), dst);
        Ok(())
    }

    /// f32 master weights -> Split-SGD (top, trail). Exact; see SPEC.md §4.4 for NaN patterns.
    pub fn split(&self, src: &[f32], top: &mut [bf16], trail: &mut [u16]) -> Result<()> {
        check_pair(src.len(), top.len(), "top")?;
        check_len("trail", src.len(), trail.len())?;
        (self.k.split)(src, top.reinterpret_cast_mut(), trail);
        Ok(())
    }

    /// Split-SGD (top, trail) -> f32 master weights. Exact.
    pub fn combine(&self, top: &[bf16], trail: &[u16], dst: &mut [f32]) -> Result<()> {
        check_pair(top.len(), trail.len(), "trail")?;
        check_len("dst", top.len(), dst.len())?;
        (self.k.combine)(top.reinterpret_cast(), trail, dst);
        Ok(())
    }
}

/// f32 -> bf16 with the given rounding (SPEC.md §4.1–4.2).
pub fn f32_to_bf16(
    src: &[f32],
    dst: &mut [bf16],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    Engine::global()?.f32_to_bf16(src, dst, rounding, ctx, stream)
}

/// f32 -> f16 with the given rounding, gradual underflow included (SPEC.md §4.3).
pub fn f32_to_f16(
    src: &[f32],
    dst: &mut [f16],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    Engine::global()?.f32_to_f16(src, dst, rounding, ctx, stream)
}

/// bf16 -> f32 (exact).
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) -> Result<()> {
    Engine::global()?.bf16_to_f32(src, dst)
}

/// f16 -> f32 (exact).
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) -> Result<()> {
    Engine::global()?.f16_to_f32(src, dst)
}

/// f32 master weights -> Split-SGD (top, trail). Exact; see SPEC.md §4.4 for NaN patterns.
pub fn split(src: &[f32], top: &mut [bf16], trail: &mut [u16]) -> Result<()> {
    Engine::global()?.split(src, top, trail)
}

/// Split-SGD (top, trail) -> f32 master weights. Exact.
pub fn combine(top: &[bf16], trail: &[u16], dst: &mut [f32]) -> Result<()> {
    Engine::global()?.combine(top, trail, dst)
}

/// The random bits for elements `index_base .. index_base + out.len()` of one stream, in order,
/// on [`Engine::global`]. Fails on an out-of-range stream, replica or index.
pub fn fill_element_bits(
    ctx: &StepContext,
    stream: &TensorStream,
    purpose: Purpose,
    out: &mut [u16],
) -> Result<()> {
    Engine::global()?.fill_element_bits(ctx, stream, purpose, out)
}

impl Engine {
    /// [`fill_element_bits`] on this engine's backend.
    pub fn fill_element_bits(
        &self,
        ctx: &StepContext,
        stream: &TensorStream,
        purpose: Purpose,
        out: &mut [u16],
    ) -> Result<()> {
        check_nonempty(out.len())?;
        let c = checked_coord(ctx, stream, purpose, out.len())?;
        (self.k.fill_bits)(&c, stream.index_base, out);
        Ok(())
    }
}
