//! Element-wise conversions: f32 to and from bf16/f16, Split-SGD split and combine, and the raw
//! random bits.

use super::*;

/// f32 -> bf16 (`to_f16 == 0`) or f16 (`to_f16 != 0`) with `rounding`; stochastic bits from
/// (`ctx`, `stream_id`, `index_base + i`) with purpose Weights.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_f32_to_16(
    src: *const f32,
    dst: *mut u16,
    len: usize,
    to_f16: u8,
    rounding_mode: u32,
    ctx: *const hs_step_context,
    stream_id: u32,
    index_base: u64,
) -> hs_status {
    guard(|| {
        let ctx = context(ctx)?;
        let r = rounding(rounding_mode)?;
        let stream = stream_of(stream_id, index_base);
        let e = engine()?;
        if to_f16 != 0 {
            let (src, dst) = unsafe { src_dst(src, dst.cast::<f16>(), len)? };
            e.f32_to_f16(src, dst, r, &ctx, &stream)?;
        } else {
            let (src, dst) = unsafe { src_dst(src, dst.cast::<bf16>(), len)? };
            e.f32_to_bf16(src, dst, r, &ctx, &stream)?;
        }
        Ok(())
    })
}

/// bf16 (`from_f16 == 0`) or f16 (`from_f16 != 0`) -> f32, exact.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_16_to_f32(
    src: *const u16,
    dst: *mut f32,
    len: usize,
    from_f16: u8,
) -> hs_status {
    guard(|| {
        let e = engine()?;
        if from_f16 != 0 {
            let (src, dst) = unsafe { src_dst(src.cast::<f16>(), dst, len)? };
            e.f16_to_f32(src, dst)?;
        } else {
            let (src, dst) = unsafe { src_dst(src.cast::<bf16>(), dst, len)? };
            e.bf16_to_f32(src, dst)?;
        }
        Ok(())
    })
}

/// f32 -> split (bf16 top, 16-bit trail), exact.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_split(
    src: *const f32,
    top: *mut u16,
    trail: *mut u16,
    len: usize,
) -> hs_status {
    guard(|| {
        check_buffers([
            region(src, len, arg("src")),
            region(top.cast_const(), len, arg("top")),
            region(trail.cast_const(), len, arg("trail")),
        ])?;
        let e = engine()?;
        unsafe {
            e.split(
                slice(src, len),
                slice_mut(top.cast::<bf16>(), len),
                slice_mut(trail, len),
            )?;
        }
        Ok(())
    })
}

/// split -> f32, exact.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_combine(
    top: *const u16,
    trail: *const u16,
    dst: *mut f32,
    len: usize,
) -> hs_status {
    guard(|| {
        check_buffers([
            region(top, len, arg("top")),
            region(trail, len, arg("trail")),
            region(dst.cast_const(), len, arg("dst")),
        ])?;
        let e = engine()?;
        unsafe {
            e.combine(
                slice(top.cast::<bf16>(), len),
                slice(trail, len),
                slice_mut(dst, len),
            )?;
        }
        Ok(())
    })
}

/// The 16 random bits of elements `index_base .. index_base + len` of stream `stream_id` for
/// `purpose` (0 weights, 1 first moment, 2 second moment, 3 AMSGrad max), SPEC.md §3.2. The
/// second moment's bits of element `e` are the first moment's of `e ^ 1`, and AMSGrad's maximum's
/// are the second moment's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_fill_element_bits(
    ctx: *const hs_step_context,
    stream_id: u32,
    index_base: u64,
    purpose: u32,
    out: *mut u16,
    len: usize,
) -> hs_status {
    guard(|| {
        check_ptr(out, len, "out")?;
        let ctx = context(ctx)?;
        let purpose = match purpose {
            0 => Purpose::Weights,
            1 => Purpose::FirstMoment,
            2 => Purpose::SecondMoment,
            3 => Purpose::MaxSecondMoment,
            p => return Err(invalid(format!("unknown purpose {p}"))),
        };
        let stream = stream_of(stream_id, index_base);
        engine()?.fill_element_bits(&ctx, &stream, purpose, unsafe { slice_mut(out, len) })?;
        Ok(())
    })
}
