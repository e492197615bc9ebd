//! Slice conversions between f32 and the 16-bit formats, and the Split-SGD split/combine.
//! Stochastic modes draw their bits from the [`Purpose::Weights`] stream of `stream` at `ctx`.

use crate::error::{Error, Result};
use crate::reference::philox::element_bits;
use crate::reference::round::{self, Mode, Rounding};
use crate::reference::split;
use crate::rng::{Purpose, StepContext, TensorStream, coord};
use crate::storage::check_len;
use half::{bf16, f16};

fn check_pair(src: usize, dst: usize, dst_name: &'static str) -> Result<()> {
    if src == 0 {
        return Err(Error::Empty);
    }
    check_len(dst_name, src, dst)
}

/// Narrows `src` into `dst` with `f` given each element and its random bits (0 unless stochastic).
fn narrow<T>(
    src: &[f32],
    dst: &mut [T],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
    f: impl Fn(f32, Mode) -> T,
) -> Result<()> {
    check_pair(src.len(), dst.len(), "dst")?;
    stream.check(src.len())?;
    ctx.replica.slot()?;
    let c = coord(ctx, stream, Purpose::Weights);
    for (i, (d, &x)) in dst.iter_mut().zip(src).enumerate() {
        let r = match rounding {
            Rounding::Stochastic => element_bits(&c, stream.index_base + i as u64),
            _ => 0,
        };
        *d = f(x, Mode::new(rounding, r));
    }
    Ok(())
}

/// f32 -> bf16 with the given rounding (SPEC.md §4.1–4.2).
pub fn f32_to_bf16(
    src: &[f32],
    dst: &mut [bf16],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    narrow(src, dst, rounding, ctx, stream, |x, m| {
        bf16::from_bits(round::f32_to_bf16(x, m))
    })
}

/// f32 -> f16 with the given rounding, gradual underflow included (SPEC.md §4.3).
pub fn f32_to_f16(
    src: &[f32],
    dst: &mut [f16],
    rounding: Rounding,
    ctx: &StepContext,
    stream: &TensorStream,
) -> Result<()> {
    narrow(src, dst, rounding, ctx, stream, |x, m| {
        f16::from_bits(round::f32_to_f16(x, m))
    })
}

/// bf16 -> f32 (exact).
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) -> Result<()> {
    check_pair(src.len(), dst.len(), "dst")?;
    for (d, s) in dst.iter_mut().zip(src) {
        *d = round::bf16_to_f32(s.to_bits());
    }
    Ok(())
}

/// f16 -> f32 (exact).
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) -> Result<()> {
    check_pair(src.len(), dst.len(), "dst")?;
    for (d, s) in dst.iter_mut().zip(src) {
        *d = round::f16_to_f32(s.to_bits());
    }
    Ok(())
}

/// f32 master weights -> Split-SGD (top, trail). Exact; see SPEC.md §4.4 for NaN patterns.
pub fn split(src: &[f32], top: &mut [bf16], trail: &mut [u16]) -> Result<()> {
    check_pair(src.len(), top.len(), "top")?;
    check_len("trail", src.len(), trail.len())?;
    for ((t, l), &x) in top.iter_mut().zip(trail.iter_mut()).zip(src) {
        (*t, *l) = split::split_one(x);
    }
    Ok(())
}

/// Split-SGD (top, trail) -> f32 master weights. Exact.
pub fn combine(top: &[bf16], trail: &[u16], dst: &mut [f32]) -> Result<()> {
    check_pair(top.len(), trail.len(), "trail")?;
    check_len("dst", top.len(), dst.len())?;
    for ((d, &t), &l) in dst.iter_mut().zip(top).zip(trail) {
        *d = split::combine_one(t, l);
    }
    Ok(())
}
