//! AVX-512 (F/BW/VL/DQ): 16 lanes in `__m512` / `__m512i`; masks are `__mmask16`.

use crate::arch::Simd;
use core::arch::x86_64::*;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512;

static IOTA: [u32; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

impl Simd for Avx512 {
    const LANES: usize = 16;
    type F = __m512;
    type U = __m512i;
    type M = __mmask16;
    /// Reduction lanes 0-7 and 8-15.
    type Acc = [__m512d; 2];

    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn div(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_div_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sqrt(a: __m512) -> __m512 {
        unsafe { _mm512_sqrt_ps(a) }
    }
    const SQRT_OFF_DIVIDER: bool = true;
    /// `vrsqrt14ps` (relative error under 2^-14), one Newton step (`s` within an ulp of the root),
    /// then the correctly rounded root by the sign of the exact residual `x - s²` against `±s·u`
    /// (`u` the ulp of `s`; both sides are multiples of `u²/4`, so no tie is missed). Equal to
    /// `vsqrtps` on every f32 from 2^-96 up (checked on all of them: `fuzzing::internals`); a
    /// vector with any other lane (zero excepted: negative, NaN, infinite, or so small that
    /// `x - s²` would round) takes `vsqrtps` whole.
    #[inline(always)]
    unsafe fn sqrt_off_divider(x: __m512) -> __m512 {
        unsafe {
            let b = _mm512_castps_si512(x);
            let low: i32 = (127 - 96) << 23;
            let zero = _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512());
            let span = _mm512_set1_epi32(0x7F80_0000 - low);
            let covered =
                _mm512_cmplt_epu32_mask(_mm512_sub_epi32(b, _mm512_set1_epi32(low)), span) | zero;
            if covered != 0xFFFF {
                return _mm512_sqrt_ps(x);
            }
            let y = _mm512_rsqrt14_ps(_mm512_max_ps(x, _mm512_set1_ps(1e-30)));
            let s0 = _mm512_mul_ps(x, y);
            let h = _mm512_mul_ps(_mm512_set1_ps(0.5), y);
            let s = _mm512_fmadd_ps(_mm512_fnmadd_ps(s0, s0, x), h, s0);
            let exp = _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(0x7F80_0000));
            let u = _mm512_mul_ps(_mm512_castsi512_ps(exp), _mm512_set1_ps(1.0 / 8_388_608.0));
            let d = _mm512_fnmadd_ps(s, s, x);
            let zeros = _mm512_setzero_ps();
            let up = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_fnmadd_ps(s, u, d), zeros);
            let down = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(_mm512_fmadd_ps(s, u, d), zeros) & !zero;
            let s = _mm512_mask_add_ps(s, up, s, u);
            _mm512_mask_sub_ps(s, down, s, u)
        }
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn is_nan(a: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a) }
    }
    #[inline(always)]
    unsafe fn gt(a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b) }
    }
    #[inline(always)]
    unsafe fn select(m: __mmask16, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mask_blend_ps(m, b, a) }
    }
    const MAX_MAY_DROP_NEW_NAN: bool = true;
    #[inline(always)]
    unsafe fn max_unless_new_nan(kept: __m512, new: __m512) -> __m512 {
        // `vmaxps` returns its second operand unless the first is greater: the rule on ties and
        // for a NaN `kept`.
        unsafe { _mm512_max_ps(new, kept) }
    }
    #[inline(always)]
    unsafe fn mask_or(a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }
    #[inline(always)]
    unsafe fn is_nan2(a: __m512, b: __m512) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b) }
    }
    #[inline(always)]
    unsafe fn is_nan_bits(b: __m512i) -> __mmask16 {
        unsafe { Self::is_nan(Self::from_bits(b)) }
    }
    #[inline(always)]
    unsafe fn any(m: __mmask16) -> bool {
        m != 0
    }

    #[inline(always)]
    unsafe fn splat_u(x: u32) -> __m512i {
        unsafe { _mm512_set1_epi32(x as i32) }
    }
    #[inline(always)]
    unsafe fn iota() -> __m512i {
        unsafe { _mm512_loadu_si512(IOTA.as_ptr().cast()) }
    }
    #[inline(always)]
    unsafe fn add_u(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub_u(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn and_u(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_and_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn or_u(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_or_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn xor_u(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_xor_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn swap_pairs(a: __m512i) -> __m512i {
        unsafe { _mm512_shuffle_epi32::<0xB1>(a) }
    }
    // The immediate forms take a `u32` const; a per-lane shift by a splat costs the same.
    #[inline(always)]
    unsafe fn shr<const S: i32>(a: __m512i) -> __m512i {
        unsafe { _mm512_srlv_epi32(a, _mm512_set1_epi32(S)) }
    }
    #[inline(always)]
    unsafe fn shl<const S: i32>(a: __m512i) -> __m512i {
        unsafe { _mm512_sllv_epi32(a, _mm512_set1_epi32(S)) }
    }
    #[inline(always)]
    unsafe fn shr_var(a: __m512i, c: __m512i) -> __m512i {
        unsafe { _mm512_srlv_epi32(a, c) }
    }
    #[inline(always)]
    unsafe fn shl_var(a: __m512i, c: __m512i) -> __m512i {
        unsafe { _mm512_sllv_epi32(a, c) }
    }
    #[inline(always)]
    unsafe fn gt_i32(a: __m512i, b: __m512i) -> __mmask16 {
        unsafe { _mm512_cmpgt_epi32_mask(a, b) }
    }
    #[inline(always)]
    unsafe fn eq_u(a: __m512i, b: __m512i) -> __mmask16 {
        unsafe { _mm512_cmpeq_epi32_mask(a, b) }
    }
    #[inline(always)]
    unsafe fn min_i32(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_min_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn max_i32(a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_max_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn select_u(m: __mmask16, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_mask_blend_epi32(m, b, a) }
    }
    #[inline(always)]
    unsafe fn aes_enc(a: __m512i, round_key: __m512i) -> __m512i {
        unsafe { _mm512_aesenc_epi128(a, round_key) }
    }
    #[inline(always)]
    unsafe fn aes_enc_last(a: __m512i, round_key: __m512i) -> __m512i {
        unsafe { _mm512_aesenclast_epi128(a, round_key) }
    }
    const RNG_VECTORS: usize = 8;
    // The span cache stored every span's bits to the stack and loaded them back: f32 -> bf16 SR
    // took 1.83 times nearest-even's time in cache, 1.32 this way (docs/DESIGN.md, "Random bits").
    const CONVERSION_SPANS: bool = true;
    const HAS_PREFETCH: bool = true;
    const OVERLAP_CHUNKS: bool = true;
    const STORE_GROUP: usize = 2;
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
    const F16_HW: bool = true;
    #[inline(always)]
    unsafe fn f32_to_f16_hw(x: __m512, toward_zero: bool) -> __m512i {
        unsafe { _mm512_cvtepu16_epi32(f16_bits(x, toward_zero)) }
    }
    #[inline(always)]
    unsafe fn store_f16_hw(p: *mut u16, x: __m512, toward_zero: bool) {
        // One `vcvtps2ph` and a store: no widening to lanes and narrowing back.
        unsafe { _mm256_storeu_si256(p.cast(), f16_bits(x, toward_zero)) }
    }
    const CHEAP_SELECT: bool = true;
    #[inline(always)]
    unsafe fn to_bits(a: __m512) -> __m512i {
        unsafe { _mm512_castps_si512(a) }
    }
    #[inline(always)]
    unsafe fn from_bits(a: __m512i) -> __m512 {
        unsafe { _mm512_castsi512_ps(a) }
    }
    #[inline(always)]
    unsafe fn u32_to_f32(a: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    unsafe fn f32_to_u32_trunc(a: __m512) -> __m512i {
        unsafe { _mm512_cvttps_epi32(a) }
    }

    #[inline(always)]
    unsafe fn load_u16(p: *const u16) -> __m512i {
        unsafe { _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_u16(p: *mut u16, v: __m512i) {
        unsafe { _mm256_storeu_si256(p.cast(), _mm512_cvtepi32_epi16(v)) }
    }

    #[inline(always)]
    unsafe fn load_u16_high(p: *const u16) -> __m512i {
        unsafe {
            // One zero-masked `vpermw` (port 5) where a widening load (port 5) and a shift (port
            // 0, which the FMAs want) did it.
            let x = _mm512_castsi256_si512(_mm256_loadu_si256(p.cast()));
            _mm512_maskz_permutexvar_epi16(0xAAAA_AAAA, word_indices(&SPREAD_WORDS), x)
        }
    }
    #[inline(always)]
    unsafe fn load_u16_raw(p: *const u16) -> __m512i {
        unsafe { _mm512_castsi256_si512(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn unpack_u16_halves(hi: __m512i, lo: __m512i) -> __m512i {
        unsafe {
            // [lo 0-15 | hi 0-15] as words, interleaved by one `vpermw` (port 5 once, where two
            // widening loads took it twice and a shift and an OR followed).
            let both = _mm512_inserti64x4::<1>(lo, _mm512_castsi512_si256(hi));
            _mm512_permutexvar_epi16(word_indices(&INTERLEAVE_HALVES), both)
        }
    }
    #[inline(always)]
    unsafe fn pack_u16_halves(v: __m512i) -> __m512i {
        // One `vpermw` gathers [lo 0-15 | hi 0-15]; the upper half is stored by
        // `vextracti64x4` to memory, which needs no shuffle port. Two `vpmovdw` (two port-5
        // uops each) and a shift did this before.
        unsafe { _mm512_permutexvar_epi16(word_indices(&GATHER_HALVES), v) }
    }
    const PACKS_BESIDE_AES: bool = true;
    #[inline(always)]
    unsafe fn pack_u16_halves_beside_aes(v: __m512i) -> __m512i {
        unsafe { gather_halves_by_two_shuffles(v) }
    }
    #[inline(always)]
    unsafe fn store_packed_lo(lo: *mut u16, packed: __m512i) {
        unsafe { _mm256_storeu_si256(lo.cast(), _mm512_castsi512_si256(packed)) }
    }
    #[inline(always)]
    unsafe fn store_packed_hi(hi: *mut u16, packed: __m512i) {
        unsafe { _mm256_storeu_si256(hi.cast(), _mm512_extracti64x4_epi64::<1>(packed)) }
    }

    const PAIRED_U16: bool = true;
    const EVEN_ODD: bool = true;
    #[inline(always)]
    unsafe fn load_u16_high_pair(p: *const u16) -> [__m512i; 2] {
        unsafe {
            // One line read whole, one `vpermw` (`Words::PairLanes`), and the in-lane unpacks
            // with zero, which on Zen 4 leave the FMAs' pipes free: two `vpermt2w` took them
            // (SGD with bf16 states or weights 0.94-0.97x the time on Zen 4, 0.95-0.96x on
            // the 16-core Xeon host; AdamW level).
            let x = _mm512_loadu_si512(p.cast());
            let x = _mm512_permutexvar_epi16(word_indices(&PAIR_LANES), x);
            let zero = _mm512_setzero_si512();
            [
                _mm512_unpacklo_epi16(zero, x),
                _mm512_unpackhi_epi16(zero, x),
            ]
        }
    }
    #[inline(always)]
    unsafe fn store_u16_high_pair(p: *mut u16, v: [__m512i; 2]) {
        unsafe {
            // One `vpermt2w` gathers both chunks' high halves into one line and one store writes
            // it, where each chunk took a `vpermw` and a 256-bit store.
            let line = _mm512_permutex2var_epi16(v[0], word_indices(&PAIR_GATHER_HIGH), v[1]);
            _mm512_storeu_si512(p.cast(), line);
        }
    }

    // The even/odd forms with word blends (`vpblendmw`, `ODD_WORDS` from the second operand)
    // and zero-masked moves where the generic forms take a mask and an OR: on Zen 4 these run
    // beside the FMAs, where `vpternlogd` would take their pipes.
    #[inline(always)]
    unsafe fn load_u16_high_even_odd(p: *const u16) -> [__m512i; 2] {
        unsafe {
            let x = _mm512_loadu_si512(p.cast());
            [
                _mm512_slli_epi32::<16>(x),
                _mm512_maskz_mov_epi16(ODD_WORDS, x),
            ]
        }
    }
    #[inline(always)]
    unsafe fn store_u16_high_even_odd(p: *mut u16, v: [__m512i; 2]) {
        unsafe {
            let line = _mm512_mask_blend_epi16(ODD_WORDS, _mm512_srli_epi32::<16>(v[0]), v[1]);
            _mm512_storeu_si512(p.cast(), line);
        }
    }
    #[inline(always)]
    unsafe fn load_split_even_odd(top: *const u16, trail: *const u16) -> [__m512i; 2] {
        unsafe {
            let t = _mm512_loadu_si512(top.cast());
            let l = _mm512_loadu_si512(trail.cast());
            [
                _mm512_mask_blend_epi16(ODD_WORDS, l, _mm512_slli_epi32::<16>(t)),
                _mm512_mask_blend_epi16(ODD_WORDS, _mm512_srli_epi32::<16>(l), t),
            ]
        }
    }
    #[inline(always)]
    unsafe fn store_split_even_odd(top: *mut u16, trail: *mut u16, v: [__m512i; 2]) {
        unsafe {
            let t = _mm512_mask_blend_epi16(ODD_WORDS, _mm512_srli_epi32::<16>(v[0]), v[1]);
            let l = _mm512_mask_blend_epi16(ODD_WORDS, v[0], _mm512_slli_epi32::<16>(v[1]));
            _mm512_storeu_si512(top.cast(), t);
            _mm512_storeu_si512(trail.cast(), l);
        }
    }
    #[inline(always)]
    unsafe fn even_odd_halves(w: __m512i) -> [__m512i; 2] {
        unsafe {
            // One `vpermw` puts the 32 values in element order ([lo 0-15 | hi 0-15]); each
            // 32-bit lane then holds an even element's value and the odd one's after it. Two
            // zero-masked `vpermw`, one per half, in place of the AND and the shift: slower on
            // Zen 4 (SGD with bf16-SR states 1.07x the time, AdamW 1.05x) and on Zen 5 (1.03x,
            // 1.07x).
            let x = _mm512_permutexvar_epi16(word_indices(&GATHER_HALVES), w);
            [
                _mm512_and_si512(x, _mm512_set1_epi32(0xFFFF)),
                _mm512_srli_epi32::<16>(x),
            ]
        }
    }

    #[inline(always)]
    unsafe fn load_u8(p: *const u8) -> __m512i {
        unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_u8(p: *mut u8, v: __m512i) {
        unsafe { _mm_storeu_si128(p.cast(), _mm512_cvtepi32_epi8(v)) }
    }
    #[inline(always)]
    unsafe fn load_nibbles(p: *const u8) -> __m512i {
        unsafe {
            // One byte per 64-bit lane; its high nibble moves to the lane's upper u32.
            let x = _mm512_cvtepu8_epi64(_mm_loadl_epi64(p.cast()));
            let lo = _mm512_and_si512(x, _mm512_set1_epi64(0xF));
            let hi = _mm512_slli_epi64::<28>(_mm512_and_si512(x, _mm512_set1_epi64(0xF0)));
            _mm512_or_si512(lo, hi)
        }
    }
    #[inline(always)]
    unsafe fn store_nibbles(p: *mut u8, v: __m512i) {
        unsafe {
            // Within each 64-bit lane, the upper u32's nibble moves next to the lower one's.
            let v = _mm512_and_si512(v, _mm512_set1_epi32(0xF));
            let pairs = _mm512_or_si512(v, _mm512_srli_epi64::<28>(v));
            _mm_storel_epi64(p.cast(), _mm512_cvtepi64_epi8(pairs))
        }
    }
    #[inline(always)]
    unsafe fn reduce_max_u(a: __m512i) -> u32 {
        unsafe { _mm512_reduce_max_epu32(a) }
    }

    #[inline(always)]
    unsafe fn acc_zero() -> [__m512d; 2] {
        unsafe { [_mm512_setzero_pd(); 2] }
    }
    #[inline(always)]
    unsafe fn acc_add_squares(acc: [__m512d; 2], x: __m512, _lane0: usize) -> [__m512d; 2] {
        unsafe {
            let (lo, hi) = widen_halves(x);
            [
                _mm512_fmadd_pd(lo, lo, acc[0]),
                _mm512_fmadd_pd(hi, hi, acc[1]),
            ]
        }
    }
    #[inline(always)]
    unsafe fn acc_lanes(acc: [__m512d; 2]) -> [f64; 16] {
        unsafe {
            let mut out = [0.0f64; 16];
            _mm512_storeu_pd(out.as_mut_ptr(), acc[0]);
            _mm512_storeu_pd(out.as_mut_ptr().add(8), acc[1]);
            out
        }
    }
    #[inline(always)]
    unsafe fn acc_from_lanes(lanes: [f64; 16]) -> [__m512d; 2] {
        unsafe {
            [
                _mm512_loadu_pd(lanes.as_ptr()),
                _mm512_loadu_pd(lanes.as_ptr().add(8)),
            ]
        }
    }
    #[inline(always)]
    unsafe fn even_odd_lanes(a: __m512i, b: __m512i) -> [__m512i; 2] {
        unsafe {
            // One two-table `vpermt2d` per half: index `i < 16` is lane `i` of `a`, `16 + i` lane
            // `i` of `b`.
            let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
            [
                _mm512_permutex2var_epi32(a, even, b),
                _mm512_permutex2var_epi32(a, odd, b),
            ]
        }
    }
    #[inline(always)]
    unsafe fn lanes_in_order(even: __m512i, odd: __m512i) -> [__m512i; 2] {
        unsafe {
            // One two-table `vpermt2d` per chunk: index `i < 16` is lane `i` of `even`, `16 + i`
            // lane `i` of `odd`.
            let first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
            let second =
                _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
            [
                _mm512_permutex2var_epi32(even, first, odd),
                _mm512_permutex2var_epi32(even, second, odd),
            ]
        }
    }
    /// A pair is 32 elements from a multiple of 32 (`lane0` is 0): the even elements' low and
    /// high halves are reduction lanes 0, 2, ..., 14 both, the low half first.
    #[inline(always)]
    unsafe fn acc_add_squares_even_odd(
        acc: [__m512d; 2],
        even: __m512,
        odd: __m512,
        lane0: usize,
    ) -> [__m512d; 2] {
        unsafe {
            debug_assert_eq!(lane0, 0);
            let ((el, eh), (ol, oh)) = (widen_halves(even), widen_halves(odd));
            [
                _mm512_fmadd_pd(eh, eh, _mm512_fmadd_pd(el, el, acc[0])),
                _mm512_fmadd_pd(oh, oh, _mm512_fmadd_pd(ol, ol, acc[1])),
            ]
        }
    }
}

/// The low and high eight lanes of `x`, widened to f64 (exact).
#[inline(always)]
unsafe fn widen_halves(x: __m512) -> (__m512d, __m512d) {
    unsafe {
        (
            _mm512_cvtps_pd(_mm512_castps512_ps256(x)),
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(x),
            ))),
        )
    }
}

/// `vpermw` indices, as a vector.
#[inline(always)]
unsafe fn word_indices(idx: &'static [u16; 32]) -> __m512i {
    unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) }
}

/// `vpermw` index tables ([`word_table`]), and `vpermt2w` ones (`Pair…`), whose index `i < 32` is
/// word `i` of the first table and `32 + i` word `i` of the second.
#[derive(Clone, Copy)]
enum Words {
    /// A line of 32 u16 with words `4k..4k + 4`, then `16 + 4k..16 + 4k + 4`, in 128-bit lane
    /// `k`: each lane's low four words, unpacked to the high halves of 32-bit lanes, are then
    /// lanes `4k..4k + 4` of the first chunk, its high four those of the second.
    PairLanes,
    /// Tables: two chunks of 16 lanes. Words `0..16` are the first chunk's high halves, words
    /// `16..32` the second's.
    PairGatherHigh,
    /// Word `2l` of the result is word `l` (lane `l`'s low half, from the lower 256 bits), word
    /// `2l + 1` is word `16 + l` (its high half, from the upper 256 bits).
    InterleaveHalves,
    /// The inverse: words `0..16` are the lanes' low halves (words `2l`), words `16..32` their
    /// high halves (words `2l + 1`).
    GatherHalves,
    /// Words `2l` and `2l + 1` are both word `l`: 16 u16 spread to 32-bit lanes.
    Spread,
}

/// Index tables of a line of two chunks ([`word_table`]).
static PAIR_LANES: [u16; 32] = word_table(Words::PairLanes);
static PAIR_GATHER_HIGH: [u16; 32] = word_table(Words::PairGatherHigh);

static INTERLEAVE_HALVES: [u16; 32] = word_table(Words::InterleaveHalves);
static GATHER_HALVES: [u16; 32] = word_table(Words::GatherHalves);
/// The high half of every 32-bit lane, as a mask of 16-bit words.
const ODD_WORDS: __mmask32 = 0xAAAA_AAAA;
static SPREAD_WORDS: [u16; 32] = word_table(Words::Spread);

// Checked when the crate compiles: gathering after interleaving puts every word back, spreading
// repeats each word twice, and gathering the high halves of a line's two unpacked chunks gives
// back every word of the line.
const _: () = {
    let (interleave, gather) = (
        word_table(Words::InterleaveHalves),
        word_table(Words::GatherHalves),
    );
    let spread = word_table(Words::Spread);
    let lanes = word_table(Words::PairLanes);
    let high = word_table(Words::PairGatherHigh);
    assert!(interleave[0] == 0 && interleave[1] == 16 && interleave[31] == 31);
    let mut w = 0;
    while w < 32 {
        assert!(interleave[gather[w] as usize] as usize == w);
        assert!(spread[w] as usize == w / 2);
        // Index `high[w]` picks the high half (an odd word) of lane `l` of chunk `c`, which
        // the unpack took from word `8 * (l / 4) + 4 * c + l % 4` of the permuted line: the
        // line's word `w`.
        let h = high[w] as usize;
        let (c, l) = (h / 32, h % 32 / 2);
        assert!(h % 2 == 1 && lanes[8 * (l / 4) + 4 * c + l % 4] as usize == w);
        w += 1;
    }
};

/// The 32 indices of `kind`.
const fn word_table(kind: Words) -> [u16; 32] {
    let mut t = [0u16; 32];
    let mut w = 0;
    while w < 32 {
        let x = w as u16;
        t[w] = match kind {
            Words::PairLanes if x % 8 < 4 => 4 * (x / 8) + x % 8,
            Words::PairLanes => 16 + 4 * (x / 8) + x % 8 - 4,
            Words::PairGatherHigh if x < 16 => 2 * x + 1,
            Words::PairGatherHigh => 32 + 2 * (x - 16) + 1,
            Words::InterleaveHalves if x.is_multiple_of(2) => x / 2,
            Words::InterleaveHalves => 16 + x / 2,
            Words::GatherHalves if x < 16 => 2 * x,
            Words::GatherHalves => 2 * (x - 16) + 1,
            Words::Spread => x / 2,
        };
        w += 1;
    }
    t
}

/// [`Simd::pack_u16_halves`]'s result by a `vpshufb` (in each 128-bit lane, its words' low
/// halves, then their high halves) and a `vpermq` (each lane's low 64 bits, then each lane's high
/// 64 bits). On Intel's cores both issue beside the 512-bit AES rounds, where the one `vpermw`
/// takes their port (an `asm!` probe on the Emerald Rapids VM: six `vpermw` beside six rounds
/// 11.1–12.7 cycles, six `vpshufb` or `vpermq` 6.0–6.6; docs/DESIGN.md). `asm!`, because LLVM folds
/// the two back into the `vpermw`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn gather_halves_by_two_shuffles(v: __m512i) -> __m512i {
    let lanes = _mm512_broadcast_i32x4(_mm_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
    ));
    let halves = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    let mut x = v;
    // SAFETY: registers only; the caller runs with AVX-512 BW.
    unsafe {
        core::arch::asm!(
            "vpshufb {x}, {x}, {lanes}",
            "vpermq {x}, {halves}, {x}",
            x = inout(zmm_reg) x,
            lanes = in(zmm_reg) lanes,
            halves = in(zmm_reg) halves,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    x
}

/// `x` converted to f16 by `vcvtps2ph`, nearest-even or `toward_zero`: [`Simd::f32_to_f16_hw`]'s
/// and [`Simd::store_f16_hw`]'s converter.
#[inline(always)]
unsafe fn f16_bits(x: __m512, toward_zero: bool) -> __m256i {
    unsafe {
        // The immediate picks the rounding (MXCSR.RC is not read); f32 subnormals round to ±0
        // in f16 either way, so MXCSR.DAZ cannot change a result.
        if toward_zero {
            _mm512_cvtps_ph::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x)
        } else {
            _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)
        }
    }
}
