//! NEON: 4 lanes in `float32x4_t` / `uint32x4_t`; masks are all-ones lanes. Integer NEON only
//! for the 16-bit formats (stdarch has no BF16 intrinsics).

use crate::arch::Simd;
use core::arch::aarch64::*;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Neon;

static IOTA: [u32; 4] = [0, 1, 2, 3];

impl Simd for Neon {
    const LANES: usize = 4;
    type F = float32x4_t;
    type U = uint32x4_t;
    type M = uint32x4_t;
    /// Reduction lanes in pairs: 0-1, 2-3, ..., 14-15.
    type Acc = [float64x2_t; 8];
    const CHEAP_SELECT: bool = true;

    #[inline(always)]
    unsafe fn splat(x: f32) -> float32x4_t {
        unsafe { vdupq_n_f32(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> float32x4_t {
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: float32x4_t) {
        unsafe { vst1q_f32(p, v) }
    }
    #[inline(always)]
    unsafe fn add(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vaddq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vsubq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vmulq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn div(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vdivq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn sqrt(a: float32x4_t) -> float32x4_t {
        unsafe { vsqrtq_f32(a) }
    }
    #[inline(always)]
    unsafe fn fma(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        // vfmaq_f32(c, a, b) = c + a * b, rounded once.
        unsafe { vfmaq_f32(c, a, b) }
    }
    #[inline(always)]
    unsafe fn is_nan(a: float32x4_t) -> uint32x4_t {
        unsafe { vmvnq_u32(vceqq_f32(a, a)) }
    }
    #[inline(always)]
    unsafe fn gt(a: float32x4_t, b: float32x4_t) -> uint32x4_t {
        unsafe { vcgtq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn select(m: uint32x4_t, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vbslq_f32(m, a, b) }
    }
    #[inline(always)]
    unsafe fn mask_or(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vorrq_u32(a, b) }
    }
    #[inline(always)]
    unsafe fn any(m: uint32x4_t) -> bool {
        unsafe { vmaxvq_u32(m) != 0 }
    }

    #[inline(always)]
    unsafe fn splat_u(x: u32) -> uint32x4_t {
        unsafe { vdupq_n_u32(x) }
    }
    #[inline(always)]
    unsafe fn iota() -> uint32x4_t {
        unsafe { vld1q_u32(IOTA.as_ptr()) }
    }
    #[inline(always)]
    unsafe fn add_u(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vaddq_u32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub_u(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vsubq_u32(a, b) }
    }
    #[inline(always)]
    unsafe fn and_u(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vandq_u32(a, b) }
    }
    #[inline(always)]
    unsafe fn or_u(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vorrq_u32(a, b) }
    }
    #[inline(always)]
    unsafe fn xor_u(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { veorq_u32(a, b) }
    }
    #[inline(always)]
    unsafe fn swap_pairs(a: uint32x4_t) -> uint32x4_t {
        unsafe { vrev64q_u32(a) }
    }
    #[inline(always)]
    unsafe fn shr<const S: i32>(a: uint32x4_t) -> uint32x4_t {
        unsafe { vshrq_n_u32::<S>(a) }
    }
    #[inline(always)]
    unsafe fn shl<const S: i32>(a: uint32x4_t) -> uint32x4_t {
        unsafe { vshlq_n_u32::<S>(a) }
    }
    #[inline(always)]
    unsafe fn shr_var(a: uint32x4_t, c: uint32x4_t) -> uint32x4_t {
        // USHL reads a signed count from the low byte: clamp to 32 first so every count >= 32
        // gives 0, as on x86.
        unsafe {
            let c = vminq_u32(c, vdupq_n_u32(32));
            vshlq_u32(a, vnegq_s32(vreinterpretq_s32_u32(c)))
        }
    }
    #[inline(always)]
    unsafe fn shl_var(a: uint32x4_t, c: uint32x4_t) -> uint32x4_t {
        unsafe { vshlq_u32(a, vreinterpretq_s32_u32(vminq_u32(c, vdupq_n_u32(32)))) }
    }
    #[inline(always)]
    unsafe fn gt_i32(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vcgtq_s32(vreinterpretq_s32_u32(a), vreinterpretq_s32_u32(b)) }
    }
    #[inline(always)]
    unsafe fn eq_u(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vceqq_u32(a, b) }
    }
    #[inline(always)]
    unsafe fn min_i32(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe {
            vreinterpretq_u32_s32(vminq_s32(
                vreinterpretq_s32_u32(a),
                vreinterpretq_s32_u32(b),
            ))
        }
    }
    #[inline(always)]
    unsafe fn max_i32(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe {
            vreinterpretq_u32_s32(vmaxq_s32(
                vreinterpretq_s32_u32(a),
                vreinterpretq_s32_u32(b),
            ))
        }
    }
    #[inline(always)]
    unsafe fn select_u(m: uint32x4_t, a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        unsafe { vbslq_u32(m, a, b) }
    }
    // stdarch marks the AES intrinsics `inline(always)` with target feature `aes`, which this
    // method lacks; it is inlined only into the backend's entry points, which enable it.
    #[allow(inline_always_mismatching_target_features)]
    #[inline(always)]
    unsafe fn aes_enc(a: uint32x4_t, round_key: uint32x4_t) -> uint32x4_t {
        // `AESE` XORs its key first, then SubBytes and ShiftRows: with a zero key, followed by
        // `AESMC` (MixColumns) and the XOR, it is x86's `AESENC`.
        unsafe {
            let s = vaesmcq_u8(vaeseq_u8(vreinterpretq_u8_u32(a), vdupq_n_u8(0)));
            veorq_u32(vreinterpretq_u32_u8(s), round_key)
        }
    }
    #[allow(inline_always_mismatching_target_features)]
    #[inline(always)]
    unsafe fn aes_enc_last(a: uint32x4_t, round_key: uint32x4_t) -> uint32x4_t {
        unsafe {
            let s = vaeseq_u8(vreinterpretq_u8_u32(a), vdupq_n_u8(0));
            veorq_u32(vreinterpretq_u32_u8(s), round_key)
        }
    }
    const RNG_VECTORS: usize = 8;
    #[inline(always)]
    unsafe fn to_bits(a: float32x4_t) -> uint32x4_t {
        unsafe { vreinterpretq_u32_f32(a) }
    }
    #[inline(always)]
    unsafe fn from_bits(a: uint32x4_t) -> float32x4_t {
        unsafe { vreinterpretq_f32_u32(a) }
    }
    #[inline(always)]
    unsafe fn u32_to_f32(a: uint32x4_t) -> float32x4_t {
        unsafe { vcvtq_f32_u32(a) }
    }
    #[inline(always)]
    unsafe fn f32_to_u32_trunc(a: float32x4_t) -> uint32x4_t {
        // FCVTZU: toward zero by its encoding, not by FPCR.
        unsafe { vcvtq_u32_f32(a) }
    }

    #[inline(always)]
    unsafe fn load_u16(p: *const u16) -> uint32x4_t {
        unsafe { vmovl_u16(vld1_u16(p)) }
    }
    #[inline(always)]
    unsafe fn store_u16(p: *mut u16, v: uint32x4_t) {
        unsafe { vst1_u16(p, vmovn_u32(v)) }
    }

    #[inline(always)]
    unsafe fn load_u8(p: *const u8) -> uint32x4_t {
        unsafe {
            let w = p.cast::<u32>().read_unaligned();
            let b = vreinterpret_u8_u32(vdup_n_u32(w));
            vmovl_u16(vget_low_u16(vmovl_u8(b)))
        }
    }
    #[inline(always)]
    unsafe fn store_u8(p: *mut u8, v: uint32x4_t) {
        unsafe {
            let h = vmovn_u32(v);
            let b = vmovn_u16(vcombine_u16(h, h));
            let w = vget_lane_u32::<0>(vreinterpret_u32_u8(b));
            p.cast::<u32>().write_unaligned(w)
        }
    }
    #[inline(always)]
    unsafe fn load_nibbles(p: *const u8) -> uint32x4_t {
        unsafe {
            let (b0, b1) = (u32::from(*p), u32::from(*p.add(1)));
            let lanes = [b0 & 0xF, b0 >> 4, b1 & 0xF, b1 >> 4];
            vld1q_u32(lanes.as_ptr())
        }
    }
    #[inline(always)]
    unsafe fn store_nibbles(p: *mut u8, v: uint32x4_t) {
        unsafe {
            // Within each 64-bit lane, the upper u32's nibble moves next to the lower one's.
            let v = vreinterpretq_u64_u32(vandq_u32(v, vdupq_n_u32(0xF)));
            let pairs = vorrq_u64(v, vshrq_n_u64::<28>(v));
            *p = vgetq_lane_u64::<0>(pairs) as u8;
            *p.add(1) = vgetq_lane_u64::<1>(pairs) as u8;
        }
    }
    #[inline(always)]
    unsafe fn reduce_max_u(a: uint32x4_t) -> u32 {
        unsafe { vmaxvq_u32(a) }
    }

    #[inline(always)]
    unsafe fn acc_zero() -> [float64x2_t; 8] {
        unsafe { [vdupq_n_f64(0.0); 8] }
    }
    #[inline(always)]
    unsafe fn acc_add_squares(
        mut acc: [float64x2_t; 8],
        x: float32x4_t,
        lane0: usize,
    ) -> [float64x2_t; 8] {
        unsafe {
            let lo = vcvt_f64_f32(vget_low_f32(x));
            let hi = vcvt_high_f64_f32(x);
            let i = lane0 / 2;
            acc[i] = vfmaq_f64(acc[i], lo, lo);
            acc[i + 1] = vfmaq_f64(acc[i + 1], hi, hi);
            acc
        }
    }
    #[inline(always)]
    unsafe fn acc_lanes(acc: [float64x2_t; 8]) -> [f64; 16] {
        unsafe {
            let mut out = [0.0f64; 16];
            for (i, a) in acc.iter().enumerate() {
                vst1q_f64(out.as_mut_ptr().add(2 * i), *a);
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn acc_from_lanes(lanes: [f64; 16]) -> [float64x2_t; 8] {
        unsafe { core::array::from_fn(|i| vld1q_f64(lanes.as_ptr().add(2 * i))) }
    }
}
