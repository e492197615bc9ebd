//! Low-bit quantizers (SPEC.md §4.5–§4.7): fp8 E4M3 / E5M2 element-wise, and the NVFP4 and MXFP4
//! block formats (fp4 E2M1 elements packed two per byte, E4M3 or E8M0 block scales), nearest-even,
//! toward zero or stochastic. Stochastic rounding draws element `i`'s 16 bits from (`ctx`,
//! `stream`, global index `stream.index_base + i`, purpose Weights), like the other conversions;
//! block scales are deterministic.
//!
//! The free functions run on [`Engine::global`]; the same operations are methods of [`Engine`].
//! Every call validates first and writes nothing on error.

use crate::dispatch::Engine;
use crate::error::{Result, require};
pub use crate::reference::quant::Fp8;
use crate::reference::quant::{Fp4Scaling, MXFP4_BLOCK, NVFP4_BLOCK};
use crate::reference::round::Rounding;
use crate::rng::{Purpose, StepContext, TensorStream, checked_coord};
use crate::storage::{check_len, check_nonempty, check_pair};

fn check_blocks(n: usize, packed: usize, scales: usize, block: usize) -> Result<()> {
    check_nonempty(n)?;
    check_len("packed", n.div_ceil(2), packed)?;
    check_len("scales", n.div_ceil(block), scales)
}

fn check_tensor_scale(pts: f32) -> Result<()> {
    require(
        pts.is_finite() && pts > 0.0,
        "tensor_scale",
        pts,
        "finite and > 0",
    )
}

impl Engine {
    /// f32 -> fp8 codes.
    pub fn f32_to_fp8(
        &self,
        src: &[f32],
        dst: &mut [u8],
        format: Fp8,
        rounding: Rounding,
        ctx: &StepContext,
        stream: &TensorStream,
    ) -> Result<()> {
        check_pair(src.len(), dst.len(), "dst")?;
        let c = checked_coord(ctx, stream, Purpose::Weights, src.len())?;
        (self.k.f32_to_fp8)(format, src, dst, rounding, &c, stream.index_base);
        Ok(())
    }

    /// fp8 codes -> f32, exact.
    pub fn fp8_to_f32(&self, src: &[u8], dst: &mut [f32], format: Fp8) -> Result<()> {
        check_pair(src.len(), dst.len(), "dst")?;
        (self.k.fp8_to_f32)(format, src, dst);
        Ok(())
    }

    /// NVFP4's per-tensor scale for `src`: `amax / 2688`, at least 2^-143 (1 for an all-zero
    /// tensor); always a scale [`Engine::quantize_nvfp4`] accepts. Fails on an empty tensor and on
    /// one holding NaN or infinity.
    pub fn nvfp4_tensor_scale(&self, src: &[f32]) -> Result<f32> {
        check_nonempty(src.len())?;
        let s = crate::reference::quant::nvfp4_tensor_scale((self.k.amax_bits)(src));
        require(
            !s.is_nan(),
            "tensor amax",
            f32::NAN,
            "finite (the tensor holds NaN or infinity)",
        )?;
        Ok(s)
    }

    /// NVFP4: blocks of 16 from the slice start, E4M3 block scales relative to `tensor_scale` (see
    /// [`Engine::nvfp4_tensor_scale`]), E2M1 elements packed two per byte (element `2i` in the low
    /// nibble). `packed` must hold `ceil(n / 2)` bytes and `scales` `ceil(n / 16)`.
    #[allow(clippy::too_many_arguments)]
    pub fn quantize_nvfp4(
        &self,
        src: &[f32],
        tensor_scale: f32,
        packed: &mut [u8],
        scales: &mut [u8],
        rounding: Rounding,
        ctx: &StepContext,
        stream: &TensorStream,
    ) -> Result<()> {
        check_blocks(src.len(), packed.len(), scales.len(), NVFP4_BLOCK)?;
        check_tensor_scale(tensor_scale)?;
        let c = checked_coord(ctx, stream, Purpose::Weights, src.len())?;
        let scaling = Fp4Scaling::Nv { tensor_scale };
        (self.k.quantize_fp4)(
            scaling,
            src,
            packed,
            scales,
            rounding,
            &c,
            stream.index_base,
        );
        Ok(())
    }

    /// NVFP4 -> f32 (`dst.len()` elements).
    pub fn dequantize_nvfp4(
        &self,
        packed: &[u8],
        scales: &[u8],
        tensor_scale: f32,
        dst: &mut [f32],
    ) -> Result<()> {
        check_blocks(dst.len(), packed.len(), scales.len(), NVFP4_BLOCK)?;
        check_tensor_scale(tensor_scale)?;
        (self.k.dequantize_fp4)(Fp4Scaling::Nv { tensor_scale }, packed, scales, dst);
        Ok(())
    }

    /// MXFP4 (OCP MX v1.0): blocks of 32 from the slice start, E8M0 block scales, E2M1 elements
    /// packed two per byte. `packed` must hold `ceil(n / 2)` bytes and `scales` `ceil(n / 32)`.
    pub fn quantize_mxfp4(
        &self,
        src: &[f32],
        packed: &mut [u8],
        scales: &mut [u8],
        rounding: Rounding,
        ctx: &StepContext,
        stream: &TensorStream,
    ) -> Result<()> {
        check_blocks(src.len(), packed.len(), scales.len(), MXFP4_BLOCK)?;
        let c = checked_coord(ctx, stream, Purpose::Weights, src.len())?;
        (self.k.quantize_fp4)(
            Fp4Scaling::Mx,
            src,
            packed,
            scales,
            rounding,
            &c,
            stream.index_base,
        );
        Ok(())
    }

    /// MXFP4 -> f32 (`dst.len()` elements).
    pub fn dequantize_mxfp4(&self, packed: &[u8], scales: &[u8], dst: &mut [f32]) -> Result<()> {
        check_blocks(dst.len(), packed.len(), scales.len(), MXFP4_BLOCK)?;
        (self.k.dequantize_fp4)(Fp4Scaling::Mx, packed, scales, dst);
        Ok(())
    }
}

/// f32 -> fp8 codes.
pub fn f32_to_fp8(
    src: &[f32],
    dst: &mut [u8],
    format: Fp8,
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    Engine::global()?.f32_to_fp8(src, dst, format, rounding, ctx, stream)
}

/// fp8 codes -> f32, exact.
pub fn fp8_to_f32(src: &[u8], dst: &mut [f32], format: Fp8) -> Result<()> {
    Engine::global()?.fp8_to_f32(src, dst, format)
}

/// NVFP4's per-tensor scale for `src` (see [`Engine::nvfp4_tensor_scale`]).
pub fn nvfp4_tensor_scale(src: &[f32]) -> Result<f32> {
    Engine::global()?.nvfp4_tensor_scale(src)
}

/// NVFP4 quantization (see [`Engine::quantize_nvfp4`]).
pub fn quantize_nvfp4(
    src: &[f32],
    tensor_scale: f32,
    packed: &mut [u8],
    scales: &mut [u8],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    Engine::global()?.quantize_nvfp4(src, tensor_scale, packed, scales, rounding, ctx, stream)
}

/// NVFP4 -> f32 (`dst.len()` elements).
pub fn dequantize_nvfp4(
    packed: &[u8],
    scales: &[u8],
    tensor_scale: f32,
    dst: &mut [f32],
) -> Result<()> {
    Engine::global()?.dequantize_nvfp4(packed, scales, tensor_scale, dst)
}

/// MXFP4 quantization (see [`Engine::quantize_mxfp4`]).
pub fn quantize_mxfp4(
    src: &[f32],
    packed: &mut [u8],
    scales: &mut [u8],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    Engine::global()?.quantize_mxfp4(src, packed, scales, rounding, ctx, stream)
}

/// MXFP4 -> f32 (`dst.len()` elements).
pub fn dequantize_mxfp4(packed: &[u8], scales: &[u8], dst: &mut [f32]) -> Result<()> {
    Engine::global()?.dequantize_mxfp4(packed, scales, dst)
}

/// f32 -> E8M0 scale codes (SPEC.md §4.6: the nearest power of two, ties up; 0xFF for zero,
/// negative, NaN and infinity). Scalar on every backend: scales are few.
pub fn f32_to_e8m0(src: &[f32], dst: &mut [u8]) -> Result<()> {
    check_pair(src.len(), dst.len(), "dst")?;
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = crate::reference::quant::f32_to_e8m0(x);
    }
    Ok(())
}

/// E8M0 scale codes -> f32, exact (`2^(c - 127)`; 0xFF is NaN, `0x7FC00000`).
pub fn e8m0_to_f32(src: &[u8], dst: &mut [f32]) -> Result<()> {
    check_pair(src.len(), dst.len(), "dst")?;
    for (d, &c) in dst.iter_mut().zip(src) {
        *d = crate::reference::quant::e8m0_to_f32(c);
    }
    Ok(())
}
