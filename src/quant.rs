//! Low-bit quantizers (SPEC.md §4.5–§4.7): fp8 E4M3 / E5M2 element-wise, and the NVFP4 and MXFP4
//! block formats (fp4 E2M1 elements packed two per byte, E4M3 or E8M0 block scales), nearest-even,
//! toward zero or stochastic. Stochastic rounding draws element `i`'s 16 bits from (`ctx`,
//! `stream`, global index `stream.index_base + i`, purpose Weights), like the other conversions;
//! block scales are deterministic.
//!
//! These run the reference implementation on every backend (the SIMD paths are not written yet);
//! they validate like every other call and write nothing on error.

use crate::error::{Error, Result};
use crate::reference::philox::element_bits;
use crate::reference::quant::{self as q, E4M3, E5M2, Format, MXFP4_BLOCK, NVFP4_BLOCK};
use crate::reference::round::Mode;
use crate::rng::{Purpose, StepContext, TensorStream, coord};
use crate::storage::{Rounding, check_len};

/// An fp8 format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8 {
    /// E4M3 (`float8_e4m3fn`): max 448, NaN, no infinity; overflow saturates.
    E4M3,
    /// E5M2: max 57344, infinity and NaN; finite overflow saturates.
    E5M2,
}

impl Fp8 {
    fn format(self) -> Format {
        match self {
            Fp8::E4M3 => E4M3,
            Fp8::E5M2 => E5M2,
        }
    }
}

/// Validates the RNG coordinates of `len` elements and returns each element's rounding mode.
fn modes(
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
    len: usize,
) -> Result<impl Fn(usize) -> Mode> {
    stream.check(len)?;
    ctx.replica.slot()?;
    let c = coord(ctx, stream, Purpose::Weights);
    let base = stream.index_base;
    Ok(move |i: usize| {
        let bits = if rounding == Rounding::Stochastic {
            element_bits(&c, base + i as u64)
        } else {
            0
        };
        Mode::new(rounding, bits)
    })
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
    check_len("dst", src.len(), dst.len())?;
    let mode = modes(rounding, ctx, stream, src.len())?;
    for (i, (d, &x)) in dst.iter_mut().zip(src).enumerate() {
        *d = q::f32_to(format.format(), x, mode(i));
    }
    Ok(())
}

/// fp8 codes -> f32, exact.
pub fn fp8_to_f32(src: &[u8], dst: &mut [f32], format: Fp8) -> Result<()> {
    check_len("dst", src.len(), dst.len())?;
    for (d, &c) in dst.iter_mut().zip(src) {
        *d = q::to_f32(format.format(), c);
    }
    Ok(())
}

fn check_blocks(n: usize, packed: usize, scales: usize, block: usize) -> Result<()> {
    check_len("packed", n.div_ceil(2), packed)?;
    check_len("scales", n.div_ceil(block), scales)
}

/// NVFP4's per-tensor scale for `src`: `amax / 2688` (1 for an all-zero tensor). Fails on a
/// tensor holding NaN or infinity.
pub fn nvfp4_tensor_scale(src: &[f32]) -> Result<f32> {
    let s = q::nvfp4_tensor_scale(q::amax_bits(src));
    if s.is_nan() {
        return Err(Error::InvalidHyperparameter {
            name: "tensor amax",
            value: f64::NAN,
            expected: "finite (the tensor holds NaN or infinity)",
        });
    }
    Ok(s)
}

fn check_tensor_scale(pts: f32) -> Result<()> {
    if pts.is_finite() && pts > 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidHyperparameter {
            name: "tensor_scale",
            value: f64::from(pts),
            expected: "finite and > 0",
        })
    }
}

/// NVFP4: blocks of 16 from the slice start, E4M3 block scales relative to `tensor_scale` (see
/// [`nvfp4_tensor_scale`]), E2M1 elements packed two per byte (element `2i` in the low nibble).
/// `packed` must hold `ceil(n / 2)` bytes and `scales` `ceil(n / 16)`.
pub fn quantize_nvfp4(
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
    let mode = modes(rounding, ctx, stream, src.len())?;
    q::quantize_nvfp4(src, tensor_scale, packed, scales, mode);
    Ok(())
}

/// NVFP4 -> f32 (`dst.len()` elements).
pub fn dequantize_nvfp4(
    packed: &[u8],
    scales: &[u8],
    tensor_scale: f32,
    dst: &mut [f32],
) -> Result<()> {
    check_blocks(dst.len(), packed.len(), scales.len(), NVFP4_BLOCK)?;
    check_tensor_scale(tensor_scale)?;
    q::dequantize_nvfp4(packed, scales, tensor_scale, dst);
    Ok(())
}

/// MXFP4 (OCP MX v1.0): blocks of 32 from the slice start, E8M0 block scales, E2M1 elements
/// packed two per byte. `packed` must hold `ceil(n / 2)` bytes and `scales` `ceil(n / 32)`.
pub fn quantize_mxfp4(
    src: &[f32],
    packed: &mut [u8],
    scales: &mut [u8],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    check_blocks(src.len(), packed.len(), scales.len(), MXFP4_BLOCK)?;
    let mode = modes(rounding, ctx, stream, src.len())?;
    q::quantize_mxfp4(src, packed, scales, mode);
    Ok(())
}

/// MXFP4 -> f32 (`dst.len()` elements).
pub fn dequantize_mxfp4(packed: &[u8], scales: &[u8], dst: &mut [f32]) -> Result<()> {
    check_blocks(dst.len(), packed.len(), scales.len(), MXFP4_BLOCK)?;
    q::dequantize_mxfp4(packed, scales, dst);
    Ok(())
}
