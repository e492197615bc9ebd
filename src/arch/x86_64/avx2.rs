//! AVX2 + FMA + F16C: 8 lanes in `__m256` / `__m256i`; masks are all-ones lanes.

use crate::arch::Simd;
use core::arch::x86_64::*;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2;

impl Simd for Avx2 {
    const LANES: usize = 8;
    const STORE_GROUP: usize = 2;
    const FLAGS_AS_ARITHMETIC: bool = true;
    const PIPELINES_CHUNKS: bool = true;
    const AMSGRAD_FP32_WITH_ADAM: bool = true;
    const LAMB_NORMS_APART: bool = true;
    type F = __m256;
    type U = __m256i;
    type M = __m256i;
    /// Reduction lanes 0-3, 4-7, 8-11, 12-15.
    type Acc = [__m256d; 4];

    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn div(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_div_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sqrt(a: __m256) -> __m256 {
        unsafe { _mm256_sqrt_ps(a) }
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn is_nan(a: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, a)) }
    }
    #[inline(always)]
    unsafe fn gt(a: __m256, b: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GT_OQ>(a, b)) }
    }
    #[inline(always)]
    unsafe fn select(m: __m256i, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m)) }
    }
    const MAX_MAY_DROP_NEW_NAN: bool = true;
    #[inline(always)]
    unsafe fn max_unless_new_nan(kept: __m256, new: __m256) -> __m256 {
        // `vmaxps` returns its second operand unless the first is greater: the rule on ties and
        // for a NaN `kept`.
        unsafe { _mm256_max_ps(new, kept) }
    }
    #[inline(always)]
    unsafe fn max_or_nan(kept: __m256, new: __m256) -> __m256 {
        unsafe {
            // `vmaxps` returns its second operand unless the first is greater: on ties and where
            // either is NaN. That is the rule but for a NaN `new`, which the blend puts back: a
            // compare, a `vmaxps` and a blend where two compares, an OR and a blend were.
            let new_nan = _mm256_castsi256_ps(Self::is_nan(new));
            _mm256_blendv_ps(_mm256_max_ps(new, kept), new, new_nan)
        }
    }
    #[inline(always)]
    unsafe fn mask_or(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn is_nan2(a: __m256, b: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, b)) }
    }
    #[inline(always)]
    unsafe fn is_nan_bits(b: __m256i) -> __m256i {
        unsafe { Self::is_nan(Self::from_bits(b)) }
    }
    #[inline(always)]
    unsafe fn any(m: __m256i) -> bool {
        unsafe { sign_mask(m) != 0 }
    }

    #[inline(always)]
    unsafe fn splat_u(x: u32) -> __m256i {
        unsafe { _mm256_set1_epi32(x as i32) }
    }
    #[inline(always)]
    unsafe fn iota() -> __m256i {
        unsafe { _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7) }
    }
    #[inline(always)]
    unsafe fn add_u(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub_u(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn and_u(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_and_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn or_u(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn xor_u(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_xor_si256(a, b) }
    }
    #[inline(always)]
    unsafe fn swap_pairs(a: __m256i) -> __m256i {
        unsafe { _mm256_shuffle_epi32::<0xB1>(a) }
    }
    #[inline(always)]
    unsafe fn shr<const S: i32>(a: __m256i) -> __m256i {
        unsafe { _mm256_srli_epi32::<S>(a) }
    }
    #[inline(always)]
    unsafe fn shl<const S: i32>(a: __m256i) -> __m256i {
        unsafe { _mm256_slli_epi32::<S>(a) }
    }
    #[inline(always)]
    unsafe fn shr_var(a: __m256i, c: __m256i) -> __m256i {
        unsafe { _mm256_srlv_epi32(a, c) }
    }
    #[inline(always)]
    unsafe fn shl_var(a: __m256i, c: __m256i) -> __m256i {
        unsafe { _mm256_sllv_epi32(a, c) }
    }
    #[inline(always)]
    unsafe fn gt_i32(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_cmpgt_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn eq_u(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_cmpeq_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn min_i32(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_min_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn max_i32(a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_max_epi32(a, b) }
    }
    #[inline(always)]
    unsafe fn select_u(m: __m256i, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_blendv_epi8(b, a, m) }
    }
    #[inline(always)]
    unsafe fn keep_u(m: __m256i, a: __m256i) -> __m256i {
        unsafe { _mm256_and_si256(m, a) }
    }
    #[inline(always)]
    unsafe fn clear_u(m: __m256i, a: __m256i) -> __m256i {
        unsafe { _mm256_andnot_si256(m, a) }
    }
    #[inline(always)]
    unsafe fn aes_enc(a: __m256i, round_key: __m256i) -> __m256i {
        // AES-NI works on 128 bits; the 256-bit form needs VAES, which the AVX2 CPUs before
        // Ice Lake and Zen 3 lack.
        unsafe {
            let lo = _mm_aesenc_si128(_mm256_castsi256_si128(a), _mm256_castsi256_si128(round_key));
            let hi = _mm_aesenc_si128(
                _mm256_extracti128_si256::<1>(a),
                _mm256_extracti128_si256::<1>(round_key),
            );
            _mm256_set_m128i(hi, lo)
        }
    }
    #[inline(always)]
    unsafe fn aes_enc_last(a: __m256i, round_key: __m256i) -> __m256i {
        unsafe {
            let lo =
                _mm_aesenclast_si128(_mm256_castsi256_si128(a), _mm256_castsi256_si128(round_key));
            let hi = _mm_aesenclast_si128(
                _mm256_extracti128_si256::<1>(a),
                _mm256_extracti128_si256::<1>(round_key),
            );
            // Joined in a register: left to LLVM, the halves went to the span cache as two 128-bit
            // stores, which the 256-bit loads of the chunks then could not forward from (a stall
            // per load; `random_bits` ran at half the speed of the rounds alone).
            opaque(_mm256_set_m128i(hi, lo))
        }
    }
    const WIDE_AES: bool = true;
    fn wide_aes() -> bool {
        super::vaes_rounds()
    }
    #[inline(always)]
    unsafe fn aes_enc_wide(a: __m256i, round_key: __m256i) -> __m256i {
        unsafe { vaesenc(a, round_key) }
    }
    #[inline(always)]
    unsafe fn aes_enc_last_wide(a: __m256i, round_key: __m256i) -> __m256i {
        unsafe { vaesenclast(a, round_key) }
    }
    const RNG_VECTORS: usize = 8;
    const RNG_FILL_OPAQUE: bool = true;
    const RNG_STARTS_IN_MEMORY: bool = true;
    // The update's constants, the counters and the round keys do not all fit AVX2's 16
    // registers, and inline the rounds are the 128-bit ones every AVX2 CPU has; the block fill
    // runs VAES where the CPU has it (docs/DESIGN.md, "Random bits: ARS-5").
    const RNG_BLOCK: bool = true;
    const CONVERSION_SPANS: bool = true;
    const HAS_PREFETCH: bool = true;
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
    const F16_HW: bool = true;
    #[inline(always)]
    unsafe fn f32_to_f16_hw(x: __m256, toward_zero: bool) -> __m256i {
        unsafe { _mm256_cvtepu16_epi32(f16_bits(x, toward_zero)) }
    }
    #[inline(always)]
    unsafe fn store_f16_hw(p: *mut u16, x: __m256, toward_zero: bool) {
        // One `vcvtps2ph` and a store: no widening to lanes and narrowing back.
        unsafe { _mm_storeu_si128(p.cast(), f16_bits(x, toward_zero)) }
    }
    #[inline(always)]
    unsafe fn to_bits(a: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(a) }
    }
    #[inline(always)]
    unsafe fn from_bits(a: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(a) }
    }
    #[inline(always)]
    unsafe fn u32_to_f32(a: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    unsafe fn f32_to_u32_trunc(a: __m256) -> __m256i {
        unsafe { _mm256_cvttps_epi32(a) }
    }

    #[inline(always)]
    unsafe fn load_u16(p: *const u16) -> __m256i {
        unsafe { _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_u16(p: *mut u16, v: __m256i) {
        unsafe { store_halves::<0b11_01_10_00>(p, v) }
    }
    #[inline(always)]
    unsafe fn load_u16_high(p: *const u16) -> __m256i {
        unsafe {
            // Both 128-bit lanes get all 8 words from a broadcast load (a load-port uop only);
            // one in-lane `vpshufb` then puts words 0-3 (lane 0) and 4-7 (lane 1) into the
            // dwords' high halves, zeroing the low. A widening load and a shift did this: two
            // uops, one on the lane-crossing shuffle port.
            let x = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
            _mm256_shuffle_epi8(
                x,
                _mm256_setr_epi8(
                    -1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, //
                    -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15,
                ),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_u16_raw(p: *const u16) -> __m256i {
        // Opaque: seeing two broadcasts, LLVM turns `unpack_u16_halves`' three in-lane uops
        // into two `vpermq` (the lane-crossing port, Intel's port 5) and a `vpunpcklwd`.
        unsafe { opaque(_mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()))) }
    }
    #[inline(always)]
    unsafe fn unpack_u16_halves(h: __m256i, l: __m256i) -> __m256i {
        unsafe {
            // From broadcast loads, `vpunpcklwd` interleaves words 0-3 (right for lane 0) and
            // `vpunpckhwd` words 4-7 (right for lane 1); a blend takes each lane from its own.
            // Three uops, none lane-crossing, where two widening loads, a shift and an OR took
            // four, two of them on the lane-crossing shuffle port.
            _mm256_blend_epi32::<0xF0>(_mm256_unpacklo_epi16(l, h), _mm256_unpackhi_epi16(l, h))
        }
    }
    #[inline(always)]
    unsafe fn pack_u16_halves(v: __m256i) -> __m256i {
        unsafe {
            // One shuffle puts both halves in place: quadwords [lo 0-3, hi 0-3, lo 4-7, hi 4-7]
            // become [lo 0-7 | hi 0-7].
            let halves = _mm256_shuffle_epi8(v, halves_shuffle());
            // Opaque: LLVM otherwise derives each stored half from `halves` with a `vpermq` of
            // its own, two lane-crossing uops where one is needed.
            opaque(_mm256_permute4x64_epi64::<0b11_01_10_00>(halves))
        }
    }
    const PACKS_HALVES_PAIRS: bool = true;
    #[inline(always)]
    unsafe fn pack_u16_halves_pair(v: [__m256i; 2]) -> [__m256i; 2] {
        unsafe {
            // Each chunk's halves gathered in-lane (quadwords: low 0-3, high 0-3, low 4-7, high
            // 4-7), the two chunks' quadwords of each kind interleaved, then put in order by one
            // `vpermq`. As many instructions as two `pack_u16_halves` and their 128-bit stores,
            // which LLVM pairs into 256-bit stores, the high lanes' by a `vperm2f128` (eight uops
            // on Zen 1, where a `vpermq` is two). Opaque between the steps: LLVM otherwise
            // merges them into shuffles of its own choice, ten where six are needed.
            let s0 = opaque(_mm256_shuffle_epi8(v[0], halves_shuffle()));
            let s1 = opaque(_mm256_shuffle_epi8(v[1], halves_shuffle()));
            let order = |x: __m256i| _mm256_permute4x64_epi64::<0b11_01_10_00>(opaque(x));
            [
                order(_mm256_unpackhi_epi64(s0, s1)),
                order(_mm256_unpacklo_epi64(s0, s1)),
            ]
        }
    }
    #[inline(always)]
    unsafe fn store_packed_lo(lo: *mut u16, packed: __m256i) {
        unsafe { _mm_storeu_si128(lo.cast(), _mm256_castsi256_si128(packed)) }
    }
    #[inline(always)]
    unsafe fn store_packed_hi(hi: *mut u16, packed: __m256i) {
        unsafe { _mm_storeu_si128(hi.cast(), _mm256_extracti128_si256::<1>(packed)) }
    }
    #[inline(always)]
    unsafe fn store_u16_high(p: *mut u16, v: __m256i) {
        unsafe { store_halves::<0b10_00_11_01>(p, v) }
    }
    #[inline(always)]
    unsafe fn store_u16_high_pair(p: *mut u16, v: [__m256i; 2]) {
        unsafe {
            // Both chunks' high halves packed in-lane (quadwords: first 0-3, second 0-3, first
            // 4-7, second 4-7; each value below 2^16, so the pack's saturation changes none), then
            // put in order by one `vpermq`, and one 256-bit store: two shifts, two shuffles and a
            // store where each chunk took a `vpshufb`, a `vpermq` and a 128-bit store.
            let packed =
                _mm256_packus_epi32(_mm256_srli_epi32::<16>(v[0]), _mm256_srli_epi32::<16>(v[1]));
            _mm256_storeu_si256(p.cast(), _mm256_permute4x64_epi64::<0b11_01_10_00>(packed));
        }
    }

    // The even/odd forms of the loads and stores are the generic ones: shifts, masks and ORs,
    // no shuffle (a `vpblendw` in place of a mask and an OR runs on the shuffle port on Intel,
    // and ran level on Zen 4).
    const EVEN_ODD: bool = true;
    #[inline(always)]
    unsafe fn even_odd_of_chunks(a: __m256i, b: __m256i) -> [__m256i; 2] {
        unsafe {
            // Packed in-lane (quadwords: a 0-3, b 0-3, a 4-7, b 4-7; each value below 2^16, so
            // the pack's saturation changes none), put in element order by one `vpermq`: each
            // 32-bit lane then holds an even element's value and the odd one's after it.
            let x = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(a, b));
            [
                _mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)),
                _mm256_srli_epi32::<16>(x),
            ]
        }
    }
    #[inline(always)]
    unsafe fn lanes_in_order(even: __m256i, odd: __m256i) -> [__m256i; 2] {
        unsafe {
            // Each input's middle quadwords swapped by a `vpermq` (elements 0, 2, 8, 10 | 4, 6,
            // 12, 14 and the odd ones so), then interleaved in-lane: as many shuffles as
            // interleaving first and pairing the halves by a `vperm2i128` each (eight uops on
            // Zen 1, where a `vpermq` is two). Opaque so that LLVM cannot turn them back.
            let order = |x: __m256i| opaque(_mm256_permute4x64_epi64::<0b11_01_10_00>(x));
            let (even, odd) = (order(even), order(odd));
            [
                _mm256_unpacklo_epi32(even, odd),
                _mm256_unpackhi_epi32(even, odd),
            ]
        }
    }
    #[inline(always)]
    unsafe fn even_odd_lanes(a: __m256i, b: __m256i) -> [__m256i; 2] {
        unsafe {
            // The halves paired first (`vperm2i128`: a's and b's low halves, then their high
            // halves), then in-lane picks (`vshufps`), which leave the words in order. Picks
            // first and a `vpermq` each after took 1.06x the cycles in the AVX2 fill's span
            // on Zen 3, whose `vpermq` shares the AES rounds' pipes (tools/pipe_probe.rs).
            Self::even_odd_in_blocks(
                _mm256_permute2x128_si256::<0x20>(a, b),
                _mm256_permute2x128_si256::<0x31>(a, b),
            )
        }
    }

    #[inline(always)]
    unsafe fn even_odd_in_blocks(a: __m256i, b: __m256i) -> [__m256i; 2] {
        unsafe {
            // In-lane picks (`vshufps`), which leave the words in order.
            let (a, b) = (_mm256_castsi256_ps(a), _mm256_castsi256_ps(b));
            [
                _mm256_castps_si256(_mm256_shuffle_ps::<0b10_00_10_00>(a, b)),
                _mm256_castps_si256(_mm256_shuffle_ps::<0b11_01_11_01>(a, b)),
            ]
        }
    }
    #[inline(always)]
    unsafe fn load_even_odd_lanes(p: *const u32) -> [__m256i; 2] {
        unsafe {
            // The halves paired by the loads (a 128-bit load and one inserted into its high
            // lane, which takes no shuffle port), then `even_odd_lanes`' in-lane picks: as many
            // instructions, two `vperm2i128` fewer (eight uops each on Zen 1).
            let half = |i: usize| _mm_loadu_si128(p.add(4 * i).cast());
            let pair = |i: usize| {
                _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(half(i)), half(i + 2))
            };
            Self::even_odd_in_blocks(pair(0), pair(1))
        }
    }

    #[inline(always)]
    unsafe fn load_u8(p: *const u8) -> __m256i {
        unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast())) }
    }
    #[inline(always)]
    unsafe fn store_u8(p: *mut u8, v: __m256i) {
        unsafe {
            // Byte 0 of each u32 to the low dword of its 128-bit half, then the two dwords together.
            let bytes = _mm256_shuffle_epi8(
                v,
                _mm256_setr_epi8(
                    0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, //
                    0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                ),
            );
            let joined =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
            _mm_storel_epi64(p.cast(), _mm256_castsi256_si128(joined))
        }
    }
    #[inline(always)]
    unsafe fn load_nibbles(p: *const u8) -> __m256i {
        unsafe {
            // One byte per 64-bit lane; its high nibble moves to the lane's upper u32.
            let w = p.cast::<i32>().read_unaligned();
            let x = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(w));
            let lo = _mm256_and_si256(x, _mm256_set1_epi64x(0xF));
            let hi = _mm256_slli_epi64::<28>(_mm256_and_si256(x, _mm256_set1_epi64x(0xF0)));
            _mm256_or_si256(lo, hi)
        }
    }
    #[inline(always)]
    unsafe fn store_nibbles(p: *mut u8, v: __m256i) {
        unsafe {
            // Within each 64-bit lane, the upper u32's nibble moves next to the lower one's; then
            // byte 0 of each 64-bit lane is gathered into the low dword.
            let v = _mm256_and_si256(v, _mm256_set1_epi32(0xF));
            let pairs = _mm256_or_si256(v, _mm256_srli_epi64::<28>(v));
            let bytes = _mm256_shuffle_epi8(
                pairs,
                _mm256_setr_epi8(
                    0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, //
                    -1, -1, 0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                ),
            );
            let joined = _mm_or_si128(
                _mm256_castsi256_si128(bytes),
                _mm256_extracti128_si256::<1>(bytes),
            );
            p.cast::<i32>().write_unaligned(_mm_cvtsi128_si32(joined))
        }
    }
    #[inline(always)]
    unsafe fn reduce_max_u(a: __m256i) -> u32 {
        unsafe {
            let m = _mm_max_epu32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
            let m = _mm_max_epu32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
            let m = _mm_max_epu32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
            _mm_cvtsi128_si32(m) as u32
        }
    }

    #[inline(always)]
    unsafe fn acc_zero() -> [__m256d; 4] {
        unsafe { [_mm256_setzero_pd(); 4] }
    }
    #[inline(always)]
    unsafe fn acc_add_squares(mut acc: [__m256d; 4], x: __m256, lane0: usize) -> [__m256d; 4] {
        unsafe {
            let (lo, hi) = widen_halves(x);
            if lane0 == 0 {
                acc[0] = _mm256_fmadd_pd(lo, lo, acc[0]);
                acc[1] = _mm256_fmadd_pd(hi, hi, acc[1]);
            } else {
                acc[2] = _mm256_fmadd_pd(lo, lo, acc[2]);
                acc[3] = _mm256_fmadd_pd(hi, hi, acc[3]);
            }
            acc
        }
    }
    /// A pair from a multiple of 16 (`lane0` 0): the even vector's lanes are reduction lanes
    /// 0, 2, … 14, the odd one's 1, 3, … 15, so each half of a vector feeds one accumulator.
    #[inline(always)]
    unsafe fn acc_add_squares_even_odd(
        mut acc: [__m256d; 4],
        even: __m256,
        odd: __m256,
        lane0: usize,
    ) -> [__m256d; 4] {
        unsafe {
            debug_assert_eq!(lane0, 0);
            let ((el, eh), (ol, oh)) = (widen_halves(even), widen_halves(odd));
            acc[0] = _mm256_fmadd_pd(el, el, acc[0]);
            acc[1] = _mm256_fmadd_pd(eh, eh, acc[1]);
            acc[2] = _mm256_fmadd_pd(ol, ol, acc[2]);
            acc[3] = _mm256_fmadd_pd(oh, oh, acc[3]);
            acc
        }
    }
    #[inline(always)]
    unsafe fn acc_lanes(acc: [__m256d; 4]) -> [f64; 16] {
        unsafe {
            let mut out = [0.0f64; 16];
            for (i, a) in acc.iter().enumerate() {
                _mm256_storeu_pd(out.as_mut_ptr().add(4 * i), *a);
            }
            out
        }
    }
    #[inline(always)]
    unsafe fn acc_from_lanes(lanes: [f64; 16]) -> [__m256d; 4] {
        unsafe { core::array::from_fn(|i| _mm256_loadu_pd(lanes.as_ptr().add(4 * i))) }
    }
}

/// The low and high four lanes of `x`, widened to f64 (exact).
#[inline(always)]
unsafe fn widen_halves(x: __m256) -> (__m256d, __m256d) {
    unsafe {
        (
            _mm256_cvtps_pd(_mm256_castps256_ps128(x)),
            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)),
        )
    }
}

/// One AES round on both 128-bit halves of `x` (`VAESENC`). `asm!`, because the intrinsic needs
/// `vaes` in the caller's target features, which would exclude the AVX2 CPUs without it from the
/// whole backend.
///
/// # Safety
/// The CPU must have VAES (`super::vaes_rounds`).
#[inline]
#[target_feature(enable = "avx")]
unsafe fn vaesenc(mut x: __m256i, round_key: __m256i) -> __m256i {
    // SAFETY: registers only; the caller checked VAES.
    unsafe {
        core::arch::asm!(
            "vaesenc {x}, {x}, {k}",
            x = inout(ymm_reg) x,
            k = in(ymm_reg) round_key,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    x
}

/// The last AES round on both halves (`VAESENCLAST`), as [`vaesenc`].
///
/// # Safety
/// As [`vaesenc`].
#[inline]
#[target_feature(enable = "avx")]
unsafe fn vaesenclast(mut x: __m256i, round_key: __m256i) -> __m256i {
    // SAFETY: as `vaesenc`.
    unsafe {
        core::arch::asm!(
            "vaesenclast {x}, {x}, {k}",
            x = inout(ymm_reg) x,
            k = in(ymm_reg) round_key,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    x
}

/// The sign bits of `m`'s eight dwords (`vmovmskps`). `asm!`, because from the intrinsic, tested
/// against zero, LLVM makes a `vtestps`: two uops where this is one, in a step's NaN test, which
/// waits at the end of the step's longest chain.
#[inline]
#[target_feature(enable = "avx")]
unsafe fn sign_mask(m: __m256i) -> u32 {
    let signs: u32;
    // SAFETY: reads the register holding `m` and writes `signs`; no memory, no flags.
    unsafe {
        core::arch::asm!(
            "vmovmskps {0:e}, {1}",
            out(reg) signs,
            in(ymm_reg) m,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    signs
}

/// `x`, hidden from LLVM's shuffle combining (an empty `asm!`, no instruction): it cannot merge
/// the shuffles before this point with those after it into lane-crossing ones of its own choice.
#[inline]
#[target_feature(enable = "avx")]
fn opaque(mut x: __m256i) -> __m256i {
    // SAFETY: the template is a comment; it reads and writes nothing but `x`'s register.
    unsafe {
        core::arch::asm!("/* {0} */", inout(ymm_reg) x, options(pure, nomem, nostack, preserves_flags));
    }
    x
}

/// Stores eight 16-bit halves of `v`'s dwords: each 128-bit lane's low halves go to its low 8
/// bytes and its high halves to its high 8 (`halves_shuffle`), then `ORDER` (a `vpermq` control)
/// brings the two lanes' quadwords of one kind down: `0b11_01_10_00` the low halves
/// (`store_u16`), `0b10_00_11_01` the high ones (`store_u16_high`).
#[inline(always)]
unsafe fn store_halves<const ORDER: i32>(p: *mut u16, v: __m256i) {
    unsafe {
        let halves = _mm256_shuffle_epi8(v, halves_shuffle());
        let ordered = _mm256_permute4x64_epi64::<ORDER>(halves);
        _mm_storeu_si128(p.cast(), _mm256_castsi256_si128(ordered));
    }
}

/// `vpshufb` control: in each 128-bit lane, bytes 0-1, 4-5, 8-9, 12-13 (the dwords' low halves)
/// to bytes 0-7 and bytes 2-3, 6-7, 10-11, 14-15 (the high halves) to bytes 8-15.
#[inline(always)]
unsafe fn halves_shuffle() -> __m256i {
    unsafe {
        _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, //
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
        )
    }
}

/// `x` converted to f16 by `vcvtps2ph`, nearest-even or `toward_zero`: [`Simd::f32_to_f16_hw`]'s
/// and [`Simd::store_f16_hw`]'s converter.
#[inline(always)]
unsafe fn f16_bits(x: __m256, toward_zero: bool) -> __m128i {
    unsafe {
        // F16C. The immediate picks the rounding (MXCSR.RC is not read); f32 subnormals round
        // to ±0 in f16 either way, so MXCSR.DAZ cannot change a result.
        if toward_zero {
            _mm256_cvtps_ph::<_MM_FROUND_TO_ZERO>(x)
        } else {
            _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)
        }
    }
}
