//! Quantizers: fp8 (E4M3, E5M2), E8M0, and the NVFP4 / MXFP4 block formats.

use super::*;
use crate::reference::quant::{MXFP4_BLOCK, NVFP4_BLOCK};

/// `hs_f32_to_fp8` / `hs_fp8_to_f32` format: E4M3 (`e4m3fn`).
pub const HS_E4M3: u32 = 0;
/// fp8 E5M2.
pub const HS_E5M2: u32 = 1;

pub(super) fn fp8(format: u32) -> Result<crate::quant::Fp8, Fail> {
    match format {
        HS_E4M3 => Ok(crate::quant::Fp8::E4M3),
        HS_E5M2 => Ok(crate::quant::Fp8::E5M2),
        f => Err(invalid(format!("unknown fp8 format {f}"))),
    }
}

/// f32 -> fp8 codes (SPEC.md §4.5; overflow saturates), stochastic bits as `hs_f32_to_16`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_f32_to_fp8(
    src: *const f32,
    dst: *mut u8,
    len: usize,
    format: u32,
    rounding_mode: u32,
    ctx: *const hs_step_context,
    stream_id: u32,
    index_base: u64,
) -> hs_status {
    guard(|| {
        let (src, dst) = unsafe { src_dst(src, dst, len)? };
        let (f, r, ctx) = (fp8(format)?, rounding(rounding_mode)?, context(ctx)?);
        let stream = stream_of(stream_id, index_base);
        Ok(engine()?.f32_to_fp8(src, dst, f, r, &ctx, &stream)?)
    })
}

/// fp8 codes -> f32, exact.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_fp8_to_f32(
    src: *const u8,
    dst: *mut f32,
    len: usize,
    format: u32,
) -> hs_status {
    guard(|| {
        let (src, dst) = unsafe { src_dst(src, dst, len)? };
        let f = fp8(format)?;
        Ok(engine()?.fp8_to_f32(src, dst, f)?)
    })
}

/// f32 -> E8M0 scale codes (SPEC.md §4.6: the nearest power of two, ties up; 0xFF for zero,
/// negative, NaN and infinity).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_f32_to_e8m0(src: *const f32, dst: *mut u8, len: usize) -> hs_status {
    guard(|| {
        let (src, dst) = unsafe { src_dst(src, dst, len)? };
        Ok(crate::quant::f32_to_e8m0(src, dst)?)
    })
}

/// E8M0 scale codes -> f32, exact (0xFF gives NaN `0x7FC00000`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_e8m0_to_f32(src: *const u8, dst: *mut f32, len: usize) -> hs_status {
    guard(|| {
        let (src, dst) = unsafe { src_dst(src, dst, len)? };
        Ok(crate::quant::e8m0_to_f32(src, dst)?)
    })
}

/// NVFP4's per-tensor scale of `src` into `*out` (`max(amax / 2688, 2^-143)`; 1 for all zeros).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_nvfp4_tensor_scale(
    src: *const f32,
    len: usize,
    out: *mut f32,
) -> hs_status {
    guard(|| {
        check_buffers([
            region(src, len, arg("src")),
            region(out.cast_const(), 1, arg("out")),
        ])?;
        let s = engine()?.nvfp4_tensor_scale(unsafe { slice(src, len) })?;
        unsafe { *out = s };
        Ok(())
    })
}

/// The buffers of a block-format call: `src` or `dst` (`len` floats), `packed` (`ceil(len / 2)`
/// bytes) and `scales` (`ceil(len / block)`), checked as [`check_buffers`]. Returns the byte counts.
pub(super) fn block_buffers(
    floats: *const f32,
    floats_name: &'static str,
    packed: *const u8,
    scales: *const u8,
    len: usize,
    block: usize,
) -> Result<(usize, usize), Fail> {
    let (np, ns) = (len.div_ceil(2), len.div_ceil(block));
    check_buffers([
        region(floats, len, arg(floats_name)),
        region(packed, np, arg("packed")),
        region(scales, ns, arg("scales")),
    ])?;
    Ok((np, ns))
}

/// NVFP4-quantizes `len` floats (SPEC.md §4.7): `packed` gets `ceil(len / 2)` bytes, `scales`
/// `ceil(len / 16)` E4M3 codes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_quantize_nvfp4(
    src: *const f32,
    len: usize,
    tensor_scale: f32,
    packed: *mut u8,
    scales: *mut u8,
    rounding_mode: u32,
    ctx: *const hs_step_context,
    stream_id: u32,
    index_base: u64,
) -> hs_status {
    guard(|| {
        let (np, ns) = block_buffers(src, "src", packed, scales, len, NVFP4_BLOCK)?;
        let (r, ctx) = (rounding(rounding_mode)?, context(ctx)?);
        let stream = stream_of(stream_id, index_base);
        unsafe {
            Ok(engine()?.quantize_nvfp4(
                slice(src, len),
                tensor_scale,
                slice_mut(packed, np),
                slice_mut(scales, ns),
                r,
                &ctx,
                &stream,
            )?)
        }
    })
}

/// NVFP4 -> `len` floats.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_dequantize_nvfp4(
    packed: *const u8,
    scales: *const u8,
    tensor_scale: f32,
    dst: *mut f32,
    len: usize,
) -> hs_status {
    guard(|| {
        let (np, ns) = block_buffers(dst, "dst", packed, scales, len, NVFP4_BLOCK)?;
        unsafe {
            Ok(engine()?.dequantize_nvfp4(
                slice(packed, np),
                slice(scales, ns),
                tensor_scale,
                slice_mut(dst, len),
            )?)
        }
    })
}

/// MXFP4-quantizes `len` floats (SPEC.md §4.7): `packed` gets `ceil(len / 2)` bytes, `scales`
/// `ceil(len / 32)` E8M0 codes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_quantize_mxfp4(
    src: *const f32,
    len: usize,
    packed: *mut u8,
    scales: *mut u8,
    rounding_mode: u32,
    ctx: *const hs_step_context,
    stream_id: u32,
    index_base: u64,
) -> hs_status {
    guard(|| {
        let (np, ns) = block_buffers(src, "src", packed, scales, len, MXFP4_BLOCK)?;
        let (r, ctx) = (rounding(rounding_mode)?, context(ctx)?);
        let stream = stream_of(stream_id, index_base);
        unsafe {
            Ok(engine()?.quantize_mxfp4(
                slice(src, len),
                slice_mut(packed, np),
                slice_mut(scales, ns),
                r,
                &ctx,
                &stream,
            )?)
        }
    })
}

/// MXFP4 -> `len` floats.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_dequantize_mxfp4(
    packed: *const u8,
    scales: *const u8,
    dst: *mut f32,
    len: usize,
) -> hs_status {
    guard(|| {
        let (np, ns) = block_buffers(dst, "dst", packed, scales, len, MXFP4_BLOCK)?;
        unsafe {
            Ok(engine()?.dequantize_mxfp4(
                slice(packed, np),
                slice(scales, ns),
                slice_mut(dst, len),
            )?)
        }
    })
}
