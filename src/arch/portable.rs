//! The portable backend: 8 lanes held in plain arrays, every operation a loop that LLVM is free
//! to vectorize for whatever the target has. `fma` is `f32::mul_add` (a software fused
//! multiply-add where the target lacks one: slow, but exact, as SPEC.md §1 requires).

use super::Simd;

/// 8 lanes in arrays.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Portable;

const L: usize = 8;

#[inline(always)]
fn map_f(a: [f32; L], f: impl Fn(f32) -> f32) -> [f32; L] {
    core::array::from_fn(|i| f(a[i]))
}
#[inline(always)]
fn zip_f(a: [f32; L], b: [f32; L], f: impl Fn(f32, f32) -> f32) -> [f32; L] {
    core::array::from_fn(|i| f(a[i], b[i]))
}
#[inline(always)]
fn zip_u(a: [u32; L], b: [u32; L], f: impl Fn(u32, u32) -> u32) -> [u32; L] {
    core::array::from_fn(|i| f(a[i], b[i]))
}

/// The AES round as table lookups (FIPS-197 §5.2.1's "T-tables"): `TE[s]` is column
/// `(2, 1, 1, 3) · SBOX[s]` (rows 0-3 in bytes 0-3), the contribution of a byte from row 0; the
/// byte from row `r` contributes `TE[s]` rotated left by `8r` bits. 16 lookups per block and round
/// instead of [`crate::reference::ars`]'s byte-wise MixColumns.
const TE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let s = crate::reference::ars::SBOX[i];
        let s2 = crate::reference::ars::xtime(s);
        let s3 = s2 ^ s;
        t[i] = u32::from_le_bytes([s2, s, s, s3]);
        i += 1;
    }
    t
};

/// One AES round on each 4-lane block: with `MIX`, `AESENC`, else `AESENCLAST`.
#[inline(always)]
fn aes_round<const MIX: bool>(a: [u32; L], k: [u32; L]) -> [u32; L] {
    let sbox = &crate::reference::ars::SBOX;
    core::array::from_fn(|i| {
        // Column `c` of the block takes row `r` from column `c + r` (ShiftRows).
        let (b, c) = (i / 4 * 4, i % 4);
        let byte = |r: usize| (a[b + (c + r) % 4] >> (8 * r)) as u8 as usize;
        let col = if MIX {
            TE[byte(0)]
                ^ TE[byte(1)].rotate_left(8)
                ^ TE[byte(2)].rotate_left(16)
                ^ TE[byte(3)].rotate_left(24)
        } else {
            u32::from_le_bytes([sbox[byte(0)], sbox[byte(1)], sbox[byte(2)], sbox[byte(3)]])
        };
        col ^ k[i]
    })
}

impl Simd for Portable {
    const LANES: usize = L;
    type F = [f32; L];
    type U = [u32; L];
    type M = [bool; L];
    type Acc = [f64; 16];

    #[inline(always)]
    unsafe fn splat(x: f32) -> [f32; L] {
        [x; L]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; L] {
        unsafe { p.cast::<[f32; L]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: [f32; L]) {
        unsafe { p.cast::<[f32; L]>().write_unaligned(v) }
    }
    #[inline(always)]
    unsafe fn add(a: [f32; L], b: [f32; L]) -> [f32; L] {
        zip_f(a, b, |x, y| x + y)
    }
    #[inline(always)]
    unsafe fn sub(a: [f32; L], b: [f32; L]) -> [f32; L] {
        zip_f(a, b, |x, y| x - y)
    }
    #[inline(always)]
    unsafe fn mul(a: [f32; L], b: [f32; L]) -> [f32; L] {
        zip_f(a, b, |x, y| x * y)
    }
    #[inline(always)]
    unsafe fn div(a: [f32; L], b: [f32; L]) -> [f32; L] {
        zip_f(a, b, |x, y| x / y)
    }
    #[inline(always)]
    unsafe fn sqrt(a: [f32; L]) -> [f32; L] {
        map_f(a, f32::sqrt)
    }
    #[inline(always)]
    unsafe fn fma(a: [f32; L], b: [f32; L], c: [f32; L]) -> [f32; L] {
        core::array::from_fn(|i| a[i].mul_add(b[i], c[i]))
    }
    #[inline(always)]
    unsafe fn is_nan(a: [f32; L]) -> [bool; L] {
        a.map(f32::is_nan)
    }
    #[inline(always)]
    unsafe fn gt(a: [f32; L], b: [f32; L]) -> [bool; L] {
        core::array::from_fn(|i| a[i] > b[i])
    }
    #[inline(always)]
    unsafe fn select(m: [bool; L], a: [f32; L], b: [f32; L]) -> [f32; L] {
        core::array::from_fn(|i| if m[i] { a[i] } else { b[i] })
    }
    #[inline(always)]
    unsafe fn mask_or(a: [bool; L], b: [bool; L]) -> [bool; L] {
        core::array::from_fn(|i| a[i] | b[i])
    }
    #[inline(always)]
    unsafe fn is_nan2(a: [f32; L], b: [f32; L]) -> [bool; L] {
        core::array::from_fn(|i| a[i].is_nan() | b[i].is_nan())
    }
    #[inline(always)]
    unsafe fn any(m: [bool; L]) -> bool {
        // Without short-circuiting, so LLVM can OR the lanes in vector registers.
        m.iter().fold(false, |acc, &x| acc | x)
    }

    #[inline(always)]
    unsafe fn splat_u(x: u32) -> [u32; L] {
        [x; L]
    }
    #[inline(always)]
    unsafe fn iota() -> [u32; L] {
        core::array::from_fn(|i| i as u32)
    }
    #[inline(always)]
    unsafe fn add_u(a: [u32; L], b: [u32; L]) -> [u32; L] {
        zip_u(a, b, u32::wrapping_add)
    }
    #[inline(always)]
    unsafe fn sub_u(a: [u32; L], b: [u32; L]) -> [u32; L] {
        zip_u(a, b, u32::wrapping_sub)
    }
    #[inline(always)]
    unsafe fn and_u(a: [u32; L], b: [u32; L]) -> [u32; L] {
        zip_u(a, b, |x, y| x & y)
    }
    #[inline(always)]
    unsafe fn or_u(a: [u32; L], b: [u32; L]) -> [u32; L] {
        zip_u(a, b, |x, y| x | y)
    }
    #[inline(always)]
    unsafe fn xor_u(a: [u32; L], b: [u32; L]) -> [u32; L] {
        zip_u(a, b, |x, y| x ^ y)
    }
    #[inline(always)]
    unsafe fn shr<const S: i32>(a: [u32; L]) -> [u32; L] {
        a.map(|x| x >> S)
    }
    #[inline(always)]
    unsafe fn shl<const S: i32>(a: [u32; L]) -> [u32; L] {
        a.map(|x| x << S)
    }
    #[inline(always)]
    unsafe fn shr_var(a: [u32; L], c: [u32; L]) -> [u32; L] {
        zip_u(a, c, |x, n| x.checked_shr(n).unwrap_or(0))
    }
    #[inline(always)]
    unsafe fn shl_var(a: [u32; L], c: [u32; L]) -> [u32; L] {
        zip_u(a, c, |x, n| x.checked_shl(n).unwrap_or(0))
    }
    #[inline(always)]
    unsafe fn gt_i32(a: [u32; L], b: [u32; L]) -> [bool; L] {
        core::array::from_fn(|i| (a[i] as i32) > (b[i] as i32))
    }
    #[inline(always)]
    unsafe fn eq_u(a: [u32; L], b: [u32; L]) -> [bool; L] {
        core::array::from_fn(|i| a[i] == b[i])
    }
    #[inline(always)]
    unsafe fn min_i32(a: [u32; L], b: [u32; L]) -> [u32; L] {
        zip_u(a, b, |x, y| (x as i32).min(y as i32) as u32)
    }
    #[inline(always)]
    unsafe fn max_i32(a: [u32; L], b: [u32; L]) -> [u32; L] {
        zip_u(a, b, |x, y| (x as i32).max(y as i32) as u32)
    }
    #[inline(always)]
    unsafe fn select_u(m: [bool; L], a: [u32; L], b: [u32; L]) -> [u32; L] {
        core::array::from_fn(|i| if m[i] { a[i] } else { b[i] })
    }
    #[inline(always)]
    unsafe fn aes_enc(a: [u32; L], round_key: [u32; L]) -> [u32; L] {
        aes_round::<true>(a, round_key)
    }
    #[inline(always)]
    unsafe fn aes_enc_last(a: [u32; L], round_key: [u32; L]) -> [u32; L] {
        aes_round::<false>(a, round_key)
    }
    const RNG_VECTORS: usize = 2;
    // On x86_64 this backend is the fallback for CPUs without AVX2 and AES-NI and the tests' second
    // implementation, not a fast path: its optimizers take the run-time layout, which takes a third
    // off the release build. Elsewhere (aarch64 cores without the crypto extension, other targets)
    // it is the fast path and compiles them.
    const COMPILED_LAYOUTS: bool = !cfg!(target_arch = "x86_64");
    #[inline(always)]
    unsafe fn to_bits(a: [f32; L]) -> [u32; L] {
        a.map(f32::to_bits)
    }
    #[inline(always)]
    unsafe fn from_bits(a: [u32; L]) -> [f32; L] {
        a.map(f32::from_bits)
    }
    #[inline(always)]
    unsafe fn u32_to_f32(a: [u32; L]) -> [f32; L] {
        a.map(|x| x as f32)
    }
    #[inline(always)]
    unsafe fn f32_to_u32_trunc(a: [f32; L]) -> [u32; L] {
        a.map(|x| x as u32)
    }

    #[inline(always)]
    unsafe fn load_u16(p: *const u16) -> [u32; L] {
        unsafe { p.cast::<[u16; L]>().read_unaligned() }.map(u32::from)
    }
    #[inline(always)]
    unsafe fn store_u16(p: *mut u16, v: [u32; L]) {
        unsafe { p.cast::<[u16; L]>().write_unaligned(v.map(|x| x as u16)) }
    }

    #[inline(always)]
    unsafe fn load_u8(p: *const u8) -> [u32; L] {
        unsafe { p.cast::<[u8; L]>().read_unaligned() }.map(u32::from)
    }
    #[inline(always)]
    unsafe fn store_u8(p: *mut u8, v: [u32; L]) {
        unsafe { p.cast::<[u8; L]>().write_unaligned(v.map(|x| x as u8)) }
    }
    #[inline(always)]
    unsafe fn load_nibbles(p: *const u8) -> [u32; L] {
        let b = unsafe { p.cast::<[u8; L / 2]>().read_unaligned() };
        core::array::from_fn(|i| u32::from(b[i / 2] >> (4 * (i % 2))) & 0xF)
    }
    #[inline(always)]
    unsafe fn store_nibbles(p: *mut u8, v: [u32; L]) {
        let b: [u8; L / 2] =
            core::array::from_fn(|k| ((v[2 * k] & 0xF) | (v[2 * k + 1] & 0xF) << 4) as u8);
        unsafe { p.cast::<[u8; L / 2]>().write_unaligned(b) }
    }
    #[inline(always)]
    unsafe fn reduce_max_u(a: [u32; L]) -> u32 {
        a.into_iter().fold(0, u32::max)
    }

    #[inline(always)]
    unsafe fn acc_zero() -> [f64; 16] {
        [0.0; 16]
    }
    #[inline(always)]
    unsafe fn acc_add_squares(mut acc: [f64; 16], x: [f32; L], lane0: usize) -> [f64; 16] {
        for (i, &v) in x.iter().enumerate() {
            // The square of an f32 is exact in f64, so this equals the fused form bit for bit.
            let v = f64::from(v);
            acc[lane0 + i] += v * v;
        }
        acc
    }
    #[inline(always)]
    unsafe fn acc_lanes(acc: [f64; 16]) -> [f64; 16] {
        acc
    }
    #[inline(always)]
    unsafe fn acc_from_lanes(lanes: [f64; 16]) -> [f64; 16] {
        lanes
    }
}
