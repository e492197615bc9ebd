//! The conversion and quantizer cases: random bits, f32 to and from the 16-bit formats and split,
//! fp8 and the fp4 block formats.

use super::*;

pub(super) fn element_bits(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let c = case(u, 520)?;
    let purpose = [
        Purpose::Weights,
        Purpose::FirstMoment,
        Purpose::SecondMoment,
        Purpose::MaxSecondMoment,
    ][u.choose_index(4)?];
    let data = vec![0u16; c.len + c.off];
    Ok(compare(
        &(c, purpose),
        &data,
        |d| d.iter().map(|&x| u32::from(x)).collect(),
        |e, d| e.fill_element_bits(&c.ctx, &c.stream, purpose, &mut d[c.off..]),
    ))
}

/// Buffers for the conversion target.
#[derive(Clone, Debug)]
pub(super) struct ConvertData {
    src: Vec<f32>,
    src16: Vec<u16>,
    bf: Vec<bf16>,
    h: Vec<f16>,
    out: Vec<f32>,
    trail: Vec<u16>,
}

pub(super) fn convert(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let c = case(u, 520)?;
    let rounding = [
        Rounding::NearestEven,
        Rounding::Stochastic,
        Rounding::TowardZero,
    ][u.choose_index(3)?];
    let n = c.len + c.off;
    let data = ConvertData {
        src: values(u, n)?,
        src16: (0..n).map(|_| u16::arbitrary(u)).collect::<AResult<_>>()?,
        bf: vec![bf16::ZERO; n],
        h: vec![f16::ZERO; n],
        out: vec![0.0; n],
        trail: vec![0; n],
    };
    let bits = |d: &ConvertData| {
        let mut b: Vec<u32> = d.bf.iter().map(|x| u32::from(x.to_bits())).collect();
        b.extend(d.h.iter().map(|x| u32::from(x.to_bits())));
        b.extend(d.out.iter().map(|x| x.to_bits()));
        b.extend(d.trail.iter().map(|&x| u32::from(x)));
        b
    };
    let o = c.off;
    Ok(compare(&(c, rounding), &data, bits, |e, d| {
        let as_bf: Vec<bf16> = d.src16[o..].iter().map(|&x| bf16::from_bits(x)).collect();
        let as_h: Vec<f16> = d.src16[o..].iter().map(|&x| f16::from_bits(x)).collect();
        let r1 = e.f32_to_bf16(&d.src[o..], &mut d.bf[o..], rounding, &c.ctx, &c.stream);
        let r2 = e.f32_to_f16(&d.src[o..], &mut d.h[o..], rounding, &c.ctx, &c.stream);
        let mut widened = vec![0f32; as_bf.len()];
        let r3 = e.bf16_to_f32(&as_bf, &mut widened);
        let r4 = e.f16_to_f32(&as_h, &mut d.out[o..]);
        let mut w2 = widened.clone();
        let r5 = e.split(&widened, &mut d.bf[o..], &mut d.trail[o..]);
        let r6 = e.combine(&d.bf[o..], &d.trail[o..], &mut w2);
        d.out[o..]
            .iter_mut()
            .zip(&w2)
            .for_each(|(a, b)| *a = f32::from_bits(a.to_bits() ^ b.to_bits()));
        [r1, r2, r3, r4, r5, r6]
    }))
}

/// Buffers for the quantizer target.
#[derive(Clone, Debug)]
pub(super) struct QuantData {
    src: Vec<f32>,
    bytes: Vec<u8>,
    fp8: Vec<u8>,
    packed: Vec<u8>,
    scales: Vec<u8>,
    out: Vec<f32>,
}

pub(super) fn quant(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    use crate::quant::Fp8;
    // Up to a little past one 2048-element tile of the fp4 kernels.
    let c = case(u, 2200)?;
    let rounding = [
        Rounding::NearestEven,
        Rounding::Stochastic,
        Rounding::TowardZero,
    ][u.choose_index(3)?];
    let fmt = [Fp8::E4M3, Fp8::E5M2][u.choose_index(2)?];
    let n = c.len + c.off;
    // Either the general mix or block-typical magnitudes (most elements near the block's amax).
    let src = if bool::arbitrary(u)? {
        values(u, n)?
    } else {
        let scale = value(u)?;
        (0..n)
            .map(|_| Ok(scale * (f32::from(u8::arbitrary(u)?) - 128.0) / 16.0))
            .collect::<AResult<_>>()?
    };
    let pts_choice = u.int_in_range(0u8..=3)?;
    let pts_other = hyper(u, &[1.0, 0.01, 1e-6, 3e3])?;
    let data = QuantData {
        src,
        bytes: (0..n).map(|_| u8::arbitrary(u)).collect::<AResult<_>>()?,
        fp8: vec![0x5A; n],
        packed: vec![0x5A; n.div_ceil(2) + 8],
        scales: vec![0x5A; n.div_ceil(16) + 8],
        out: vec![0.0; 2 * n],
    };
    let bits = |d: &QuantData| {
        let mut b: Vec<u32> = d.fp8.iter().map(|&x| u32::from(x)).collect();
        b.extend(d.packed.iter().map(|&x| u32::from(x)));
        b.extend(d.scales.iter().map(|&x| u32::from(x)));
        b.extend(d.out.iter().map(|x| x.to_bits()));
        b
    };
    let (o, len) = (c.off, c.len);
    let (pb, sb) = (o / 2, o / 16);
    Ok(compare(&(c, rounding, fmt), &data, bits, |e, d| {
        let src = &d.src[o..];
        let own = e.nvfp4_tensor_scale(src);
        let pts = match pts_choice {
            0 | 1 => own.as_ref().copied().unwrap_or(1.0),
            _ => pts_other,
        };
        let r1 = e.f32_to_fp8(src, &mut d.fp8[o..], fmt, rounding, &c.ctx, &c.stream);
        let r2 = e.fp8_to_f32(&d.bytes[o..], &mut d.out[o..n], fmt);
        let (packed, scales) = (
            &mut d.packed[pb..pb + len.div_ceil(2)],
            &mut d.scales[sb..sb + len.div_ceil(16)],
        );
        let r3 = e.quantize_nvfp4(src, pts, packed, scales, rounding, &c.ctx, &c.stream);
        let r4 = e.dequantize_nvfp4(packed, scales, pts, &mut d.out[n + o..]);
        let mut mx = vec![0u8; len.div_ceil(32)];
        let mut mx_packed = vec![0u8; len.div_ceil(2)];
        let r5 = e.quantize_mxfp4(src, &mut mx_packed, &mut mx, rounding, &c.ctx, &c.stream);
        let mut back = vec![0f32; len];
        let r6 = e.dequantize_mxfp4(&mx_packed, &mx, &mut back);
        // Fold the MXFP4 results into the compared buffers.
        for (i, (b, p)) in back.iter().zip(&mx_packed).enumerate() {
            d.out[o + i] = f32::from_bits(d.out[o + i].to_bits() ^ b.to_bits().rotate_left(7));
            d.fp8[o + i] ^= p.rotate_left(3);
        }
        for (i, &m) in mx.iter().enumerate() {
            d.fp8[o + i] ^= m;
        }
        ([r1, r2, r3, r4, r5, r6], own.map(f32::to_bits))
    }))
}
