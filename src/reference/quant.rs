//! Low-bit formats (SPEC.md §4.5–§4.7): fp8 E4M3 (`e4m3fn`) and E5M2, fp4 E2M1, E8M0 scales, and
//! the NVFP4 and MXFP4 block formats. Element rounding is SPEC §4.3's general rule; these functions
//! add each format's parameters, its saturation and its NaN/Inf policy.

use crate::reference::round::{Mode, round_magnitude};

/// A small float format: `man` mantissa bits, minimum normal exponent `emin`, and the codes
/// (magnitude bits, sign excluded) of its largest finite value, its NaN and its infinity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// Explicit mantissa bits.
    pub man: u32,
    /// Minimum normal exponent (unbiased).
    pub emin: i32,
    /// Magnitude code of the largest finite value (overflow saturates here).
    pub max: u8,
    /// Magnitude code a NaN encodes to, if the format has NaN.
    pub nan: Option<u8>,
    /// Magnitude code of infinity, if the format has one.
    pub inf: Option<u8>,
    /// The sign bit.
    pub sign: u8,
}

/// fp8 E4M3 (`float8_e4m3fn`): bias 7, max 448 (0x7E), NaN 0x7F, no infinity.
pub const E4M3: Format = Format {
    man: 3,
    emin: -6,
    max: 0x7E,
    nan: Some(0x7F),
    inf: None,
    sign: 0x80,
};

/// fp8 E5M2: bias 15, max 57344 (0x7B), infinity 0x7C, NaN 0x7E (quiet).
pub const E5M2: Format = Format {
    man: 2,
    emin: -14,
    max: 0x7B,
    nan: Some(0x7E),
    inf: Some(0x7C),
    sign: 0x80,
};

/// fp4 E2M1: bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6; no NaN, no infinity. A 4-bit code.
pub const E2M1: Format = Format {
    man: 1,
    emin: 0,
    max: 0x7,
    nan: None,
    inf: None,
    sign: 0x8,
};

/// An fp8 format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8 {
    /// E4M3 (`float8_e4m3fn`): max 448, NaN, no infinity; overflow saturates.
    E4M3,
    /// E5M2: max 57344, infinity and NaN; finite overflow saturates.
    E5M2,
}

impl Fp8 {
    pub(crate) fn format(self) -> Format {
        match self {
            Fp8::E4M3 => E4M3,
            Fp8::E5M2 => E5M2,
        }
    }
}

/// The block scaling of an fp4 tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Fp4Scaling {
    /// NVFP4: blocks of 16, E4M3 block scales relative to the per-tensor scale.
    Nv { tensor_scale: f32 },
    /// MXFP4: blocks of 32, E8M0 block scales.
    Mx,
}

impl Fp4Scaling {
    pub(crate) fn block(self) -> usize {
        match self {
            Fp4Scaling::Nv { .. } => NVFP4_BLOCK,
            Fp4Scaling::Mx => MXFP4_BLOCK,
        }
    }
}

/// f32 -> `fmt` (SPEC.md §4.5). Finite values round by the general rule and **saturate** at the
/// largest finite value (in every mode); infinities become infinity where the format has one,
/// else saturate; NaN becomes the format's NaN with the sign kept, or +0 where it has none.
pub fn f32_to(fmt: Format, x: f32, mode: Mode) -> u8 {
    let b = x.to_bits();
    let sign = if b >> 31 == 1 { fmt.sign } else { 0 };
    let a = b & 0x7FFF_FFFF;
    if a > 0x7F80_0000 {
        return match fmt.nan {
            Some(n) => sign | n,
            None => 0,
        };
    }
    if a == 0x7F80_0000 {
        return sign | fmt.inf.unwrap_or(fmt.max);
    }
    let m = round_magnitude(a, fmt.man, fmt.emin, mode).min(u64::from(fmt.max));
    sign | m as u8
}

/// `fmt` -> f32, exact. NaN codes give the canonical quiet NaN with the code's sign.
pub fn to_f32(fmt: Format, c: u8) -> f32 {
    let negative = c & fmt.sign != 0;
    let m = c & (fmt.sign - 1);
    let sign = if negative { 0x8000_0000u32 } else { 0 };
    let is_inf = fmt.inf == Some(m);
    // Every code above the infinity (E5M2) or equal to the NaN code (E4M3) is NaN.
    let is_nan = match (fmt.nan, fmt.inf) {
        (Some(_), Some(inf)) => m > inf,
        (Some(n), None) => m == n,
        _ => false,
    };
    if is_nan {
        return f32::from_bits(sign | 0x7FC0_0000);
    }
    if is_inf {
        return f32::from_bits(sign | 0x7F80_0000);
    }
    let exp = i32::from(m >> fmt.man);
    let frac = u32::from(m) & ((1 << fmt.man) - 1);
    // value = sig * 2^(e - man): exact in f32 for every format here.
    let (sig, e) = if exp == 0 {
        (frac, fmt.emin)
    } else {
        (frac | 1 << fmt.man, exp - 1 + fmt.emin)
    };
    let mag = sig as f32 * pow2(e - fmt.man as i32);
    f32::from_bits(sign | mag.to_bits())
}

/// 2^e as an f32 for -149 <= e <= 127, built from bits (exact).
pub fn pow2(e: i32) -> f32 {
    debug_assert!((-149..=127).contains(&e));
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (e + 149))
    }
}

/// E8M0 (`float8_e8m0fnu`) code 0xFF: NaN.
pub const E8M0_NAN: u8 = 0xFF;

/// E8M0 scale -> f32: `2^(c - 127)`, NaN for 0xFF.
pub fn e8m0_to_f32(c: u8) -> f32 {
    if c == E8M0_NAN {
        f32::NAN
    } else {
        pow2(i32::from(c) - 127)
    }
}

/// `floor(log2 a)` of a positive finite f32 magnitude pattern `a`.
fn floor_log2(a: u32) -> i32 {
    let biased = (a >> 23) as i32;
    if biased == 0 {
        // Subnormal: the highest set bit of the fraction.
        (31 - a.leading_zeros() as i32) - 149
    } else {
        biased - 127
    }
}

/// f32 -> E8M0 as `ml_dtypes.float8_e8m0fnu` casts (SPEC.md §4.6): the nearest power of two,
/// ties (mantissa exactly 1.5) **up**; below 2^-127 gives 2^-127; zero, negatives, NaN, infinity
/// and values that round above 2^127 give 0xFF (NaN: the format has no zero and no sign).
pub fn f32_to_e8m0(x: f32) -> u8 {
    let b = x.to_bits();
    if b >> 31 == 1 || b == 0 || b >= 0x7F80_0000 {
        return E8M0_NAN;
    }
    let e = floor_log2(b);
    // The bit just below the leading one decides: mantissa >= 1.5 rounds up.
    let below = if e >= -126 {
        (b >> 22) & 1
    } else {
        let lead = (e + 149) as u32; // position of the leading bit
        if lead == 0 { 0 } else { (b >> (lead - 1)) & 1 }
    };
    let e = e + below as i32;
    match e + 127 {
        c if c < 0 => 0,
        c if c > 254 => E8M0_NAN,
        c => c as u8,
    }
}

/// Largest magnitude bit pattern of a block, as SPEC.md §4.7 defines amax: an integer max over
/// `bits & 0x7FFFFFFF`, so any NaN wins over infinity, which wins over every finite value.
pub fn amax_bits(xs: &[f32]) -> u32 {
    xs.iter()
        .map(|x| x.to_bits() & 0x7FFF_FFFF)
        .max()
        .unwrap_or(0)
}

/// Elements per NVFP4 block.
pub const NVFP4_BLOCK: usize = 16;
/// Elements per MXFP4 block.
pub const MXFP4_BLOCK: usize = 32;

/// The least NVFP4 tensor scale [`nvfp4_tensor_scale`] returns: 2^-143, so that `pts · s` is at
/// least 2^-149 (not 0) for every block scale `s >= 2^-6`.
pub const NVFP4_MIN_TENSOR_SCALE: f32 = f32::from_bits(1 << (149 - 143));

/// NVFP4's per-tensor scale from the tensor's amax bits: `max(amax / 2688, 2^-143)` (2688 = 448 · 6)
/// in f32; 1 for an all-zero tensor; NaN for a tensor holding NaN or infinity.
pub fn nvfp4_tensor_scale(amax: u32) -> f32 {
    if amax >= 0x7F80_0000 {
        f32::NAN
    } else if amax == 0 {
        1.0
    } else {
        (f32::from_bits(amax) / 2688.0).max(NVFP4_MIN_TENSOR_SCALE)
    }
}

/// NVFP4 block scale (E4M3 code) for a block with amax bits `amax`, given the tensor scale `pts`:
/// `e4m3_nearest(clamp((amax / 6) / pts, 2^-6, 448))`, each operation in f32; 0x7F (NaN) for a
/// block holding NaN or infinity.
pub fn nvfp4_block_scale(amax: u32, pts: f32) -> u8 {
    if amax >= 0x7F80_0000 {
        return 0x7F;
    }
    let t = (f32::from_bits(amax) / 6.0) / pts;
    let t = t.clamp(pow2(-6), 448.0);
    f32_to(E4M3, t, Mode::NearestEven)
}

/// MXFP4 block scale (E8M0 code) for a block with amax bits `amax` (OCP MX v1.0):
/// `floor(log2 amax) - 2 + 127` clamped to [0, 254]; 127 (scale 1) for an all-zero block; 0xFF
/// (NaN) for a block holding NaN or infinity.
pub fn mxfp4_block_scale(amax: u32) -> u8 {
    if amax >= 0x7F80_0000 {
        E8M0_NAN
    } else if amax == 0 {
        127
    } else {
        (floor_log2(amax) - 2 + 127).clamp(0, 254) as u8
    }
}

/// One element of a block: `e2m1(x / divisor)` (f32 division), or 0 in a block whose scale is NaN.
pub fn fp4_element(x: f32, divisor: f32, scale_is_nan: bool, mode: Mode) -> u8 {
    if scale_is_nan {
        0
    } else {
        f32_to(E2M1, x / divisor, mode)
    }
}

/// NVFP4-quantizes `src` (SPEC.md §4.7): blocks of 16 elements from the slice start, block scale
/// per [`nvfp4_block_scale`], element `i` as `e2m1(x / (pts * s))` with `s` the decoded block
/// scale, rounded with `mode(i)` (nearest, toward zero, or stochastic with element `i`'s bits).
/// `packed` holds `ceil(n / 2)` bytes, `scales` `ceil(n / 16)` E4M3 codes.
pub fn quantize_nvfp4(
    src: &[f32],
    pts: f32,
    packed: &mut [u8],
    scales: &mut [u8],
    mode: impl Fn(usize) -> Mode,
) {
    clear_odd_tail(src.len(), packed);
    for (b, block) in src.chunks(NVFP4_BLOCK).enumerate() {
        let code = nvfp4_block_scale(amax_bits(block), pts);
        scales[b] = code;
        let divisor = pts * to_f32(E4M3, code);
        for (j, &x) in block.iter().enumerate() {
            let i = b * NVFP4_BLOCK + j;
            set_nibble(packed, i, fp4_element(x, divisor, code == 0x7F, mode(i)));
        }
    }
}

/// NVFP4 -> f32: `(e2m1(c) * s) * pts`, each product in f32; NaN in a block with a NaN scale.
pub fn dequantize_nvfp4(packed: &[u8], scales: &[u8], pts: f32, dst: &mut [f32]) {
    for (i, d) in dst.iter_mut().enumerate() {
        let s = to_f32(E4M3, scales[i / NVFP4_BLOCK]);
        *d = (to_f32(E2M1, nibble(packed, i)) * s) * pts;
    }
}

/// MXFP4-quantizes `src` (SPEC.md §4.7): blocks of 32, E8M0 scale per [`mxfp4_block_scale`],
/// element `i` as `e2m1(x / X)` with `X = 2^(scale - 127)`.
pub fn quantize_mxfp4(
    src: &[f32],
    packed: &mut [u8],
    scales: &mut [u8],
    mode: impl Fn(usize) -> Mode,
) {
    clear_odd_tail(src.len(), packed);
    for (b, block) in src.chunks(MXFP4_BLOCK).enumerate() {
        let code = mxfp4_block_scale(amax_bits(block));
        scales[b] = code;
        let divisor = e8m0_to_f32(code);
        for (j, &x) in block.iter().enumerate() {
            let i = b * MXFP4_BLOCK + j;
            set_nibble(
                packed,
                i,
                fp4_element(x, divisor, code == E8M0_NAN, mode(i)),
            );
        }
    }
}

/// MXFP4 -> f32: `e2m1(c) * X`; NaN in a block with a NaN scale.
pub fn dequantize_mxfp4(packed: &[u8], scales: &[u8], dst: &mut [f32]) {
    for (i, d) in dst.iter_mut().enumerate() {
        *d = to_f32(E2M1, nibble(packed, i)) * e8m0_to_f32(scales[i / MXFP4_BLOCK]);
    }
}

/// An odd element count leaves the last byte's high nibble 0.
fn clear_odd_tail(n: usize, packed: &mut [u8]) {
    if n % 2 == 1 {
        packed[n / 2] = 0;
    }
}

/// Writes element `i`'s 4-bit code (low nibble for even `i`, high for odd).
pub fn set_nibble(packed: &mut [u8], i: usize, code: u8) {
    let shift = 4 * (i % 2);
    packed[i / 2] = (packed[i / 2] & !(0xF << shift)) | (code & 0xF) << shift;
}

/// Packs 4-bit codes two per byte: element `2i` in the low nibble of byte `i`, `2i + 1` in the
/// high nibble (an odd count leaves the last high nibble 0).
pub fn pack_nibbles(codes: &[u8], out: &mut [u8]) {
    for (i, o) in out.iter_mut().enumerate() {
        let lo = codes.get(2 * i).copied().unwrap_or(0) & 0xF;
        let hi = codes.get(2 * i + 1).copied().unwrap_or(0) & 0xF;
        *o = lo | hi << 4;
    }
}

/// Element `i`'s 4-bit code from packed bytes.
pub fn nibble(packed: &[u8], i: usize) -> u8 {
    (packed[i / 2] >> (4 * (i % 2))) & 0xF
}
