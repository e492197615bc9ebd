//! Lane primitives, one module per instruction set. Nothing here knows about optimizers,
//! rounding rules or the RNG layout: those are written once in `crate::kernels`, generic over
//! [`Simd`].
//!
//! Every method is `unsafe` and `#[inline(always)]`: the caller guarantees the CPU supports the
//! instruction set (the dispatcher only hands out a backend after detecting it), and inlining
//! into a `#[target_feature]` entry point is what lets the intrinsics compile to the real
//! instructions (the memchr pattern).

#![allow(unsafe_code)]

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
pub(crate) mod portable;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

/// The largest lane count of any backend (AVX-512).
pub(crate) const MAX_LANES: usize = 16;

/// Reduction lanes (in order) laid out as [`Simd::acc_add_squares_even_odd`]'s accumulator holds
/// them: lane `k` of the result is reduction lane `2k` for `k < 8`, `2(k - 8) + 1` for `k >= 8`.
#[inline(always)]
pub(crate) fn even_odd_layout(a: [f64; 16]) -> [f64; 16] {
    core::array::from_fn(|k| a[if k < 8 { 2 * k } else { 2 * (k - 8) + 1 }])
}

/// The inverse of [`even_odd_layout`]: the reduction lanes in order.
#[inline(always)]
pub(crate) fn from_even_odd_layout(a: [f64; 16]) -> [f64; 16] {
    core::array::from_fn(|l| a[l / 2 + 8 * (l % 2)])
}

/// The lanes of `x` (the first `V::LANES` of the array; the rest zero), for set-up code and
/// checks, not loops.
#[inline(always)]
pub(crate) unsafe fn u32_lanes<V: Simd>(x: V::U) -> [u32; MAX_LANES] {
    let mut out = [0u32; MAX_LANES];
    unsafe { V::store(out.as_mut_ptr().cast(), V::from_bits(x)) };
    out
}

/// A vector whose lane `l` is `f(l)`, for set-up code and checks, not loops.
#[inline(always)]
pub(crate) unsafe fn u32_vector<V: Simd>(f: impl Fn(usize) -> u32) -> V::U {
    let mut buf = [0u32; MAX_LANES];
    for (l, x) in buf.iter_mut().enumerate().take(V::LANES) {
        *x = f(l);
    }
    unsafe { V::to_bits(V::load(buf.as_ptr().cast())) }
}

/// A vector of `LANES` f32 / u32 lanes and the operations the kernels need.
///
/// Semantics are exact and identical on every ISA: IEEE f32 arithmetic with round-to-nearest-even
/// and subnormals, `fma` fused, integer ops mod 2^32. Comparisons produce a mask `M`; `select(m, a, b)`
/// takes `a` where `m` is set.
#[allow(clippy::missing_safety_doc)]
pub(crate) trait Simd: Copy + 'static {
    /// Lanes per vector (4, 8 or 16).
    const LANES: usize;
    /// `LANES` x f32.
    type F: Copy;
    /// `LANES` x u32.
    type U: Copy;
    /// A lane mask.
    type M: Copy;
    /// Sums of squares in f64 for the 16 reduction lanes of SPEC.md §7.
    type Acc: Copy;

    // ---- f32
    unsafe fn splat(x: f32) -> Self::F;
    unsafe fn load(p: *const f32) -> Self::F;
    unsafe fn store(p: *mut f32, v: Self::F);
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn sub(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn div(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn sqrt(a: Self::F) -> Self::F;
    /// Whether [`Self::sqrt_off_divider`] leaves the divider free (AVX-512), rather than being
    /// [`Self::sqrt`] itself.
    const SQRT_OFF_DIVIDER: bool = false;
    /// [`Self::sqrt`]'s bits, computed where the backend can on the multiply pipes, which leaves
    /// the divider, shared by square roots and divisions, to the rest of the loop.
    #[inline(always)]
    unsafe fn sqrt_off_divider(a: Self::F) -> Self::F {
        unsafe { Self::sqrt(a) }
    }
    /// `a * b + c`, rounded once.
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    unsafe fn is_nan(a: Self::F) -> Self::M;
    /// Lanes where `a` or `b` is NaN (one unordered compare on x86).
    #[inline(always)]
    unsafe fn is_nan2(a: Self::F, b: Self::F) -> Self::M {
        unsafe { Self::mask_or(Self::is_nan(a), Self::is_nan(b)) }
    }
    /// Lanes whose bits are an f32 NaN pattern: by default the integer test (magnitude above
    /// 0x7F80_0000). x86 overrides it with one unordered compare of the bits read as floats, which
    /// changes no lane; that test took three instructions on AVX2 and two on AVX-512, while on the
    /// portable backend the float compare came out slower than the integer one.
    #[inline(always)]
    unsafe fn is_nan_bits(b: Self::U) -> Self::M {
        unsafe {
            Self::gt_i32(
                Self::and_u(b, Self::splat_u(0x7FFF_FFFF)),
                Self::splat_u(0x7F80_0000),
            )
        }
    }
    /// Whether any lane of `m` is set.
    unsafe fn any(m: Self::M) -> bool;
    /// Ordered `a > b` (false if either is NaN).
    unsafe fn gt(a: Self::F, b: Self::F) -> Self::M;
    unsafe fn select(m: Self::M, a: Self::F, b: Self::F) -> Self::F;
    /// `new` where `new > kept` or `new` is NaN, else `kept`: ties (zeros of either sign) and a NaN
    /// `kept` give `kept` (AMSGrad's maximum, `reference::adam::amsgrad_max`).
    #[inline(always)]
    unsafe fn max_or_nan(kept: Self::F, new: Self::F) -> Self::F {
        unsafe {
            Self::select(
                Self::mask_or(Self::gt(new, kept), Self::is_nan(new)),
                new,
                kept,
            )
        }
    }
    /// Whether [`Self::max_unless_new_nan`] may give `kept` where `new` is NaN.
    const MAX_MAY_DROP_NEW_NAN: bool = false;
    /// [`Self::max_or_nan`], but where `new` is NaN it may give `kept`
    /// ([`Self::MAX_MAY_DROP_NEW_NAN`]): x86's `vmaxps` alone, whose caller finds a NaN `new` by
    /// the NaN test it runs anyway and puts it back off the hot path.
    #[inline(always)]
    unsafe fn max_unless_new_nan(kept: Self::F, new: Self::F) -> Self::F {
        unsafe { Self::max_or_nan(kept, new) }
    }
    unsafe fn mask_or(a: Self::M, b: Self::M) -> Self::M;

    // ---- u32
    unsafe fn splat_u(x: u32) -> Self::U;
    /// Lanes `0, 1, ..., LANES - 1`.
    unsafe fn iota() -> Self::U;
    unsafe fn add_u(a: Self::U, b: Self::U) -> Self::U;
    unsafe fn sub_u(a: Self::U, b: Self::U) -> Self::U;
    unsafe fn and_u(a: Self::U, b: Self::U) -> Self::U;
    unsafe fn or_u(a: Self::U, b: Self::U) -> Self::U;
    unsafe fn xor_u(a: Self::U, b: Self::U) -> Self::U;
    unsafe fn shr<const S: i32>(a: Self::U) -> Self::U;
    unsafe fn shl<const S: i32>(a: Self::U) -> Self::U;
    /// Per-lane logical shift right; counts >= 32 give 0.
    unsafe fn shr_var(a: Self::U, count: Self::U) -> Self::U;
    /// Per-lane shift left; counts >= 32 give 0.
    unsafe fn shl_var(a: Self::U, count: Self::U) -> Self::U;
    /// Signed 32-bit `a > b`.
    unsafe fn gt_i32(a: Self::U, b: Self::U) -> Self::M;
    unsafe fn eq_u(a: Self::U, b: Self::U) -> Self::M;
    unsafe fn min_i32(a: Self::U, b: Self::U) -> Self::U;
    unsafe fn max_i32(a: Self::U, b: Self::U) -> Self::U;
    unsafe fn select_u(m: Self::M, a: Self::U, b: Self::U) -> Self::U;
    /// Whether [`Self::select_u`] is one instruction: AVX-512's merge masking (the blend folds into
    /// the instruction before it) and NEON's `bsl`. Where false, a select against zero
    /// ([`Self::keep_u`], [`Self::clear_u`]) is the cheap form and a general select may cost
    /// several uops (AVX2's `vpblendvb`: three on Intel) or lanes of scalar code (portable).
    const CHEAP_SELECT: bool = false;
    /// `a` where `m` is set, else 0. AVX2 overrides it with a plain `vpand`: through the byte
    /// blend of [`Self::select_u`], LLVM rebuilt a byte mask from the whole-lane compare mask first.
    #[inline(always)]
    unsafe fn keep_u(m: Self::M, a: Self::U) -> Self::U {
        unsafe { Self::select_u(m, a, Self::splat_u(0)) }
    }
    /// 0 where `m` is set, else `a` (AVX2: `vpandn`).
    #[inline(always)]
    unsafe fn clear_u(m: Self::M, a: Self::U) -> Self::U {
        unsafe { Self::select_u(m, Self::splat_u(0), a) }
    }
    // ---- AES rounds (the ARS generator, `kernels::GroupBits`)
    /// One AES encryption round on each 128-bit block of `a` (lanes `4i .. 4i + 4` are block `i`,
    /// lane `4i` holding its bytes 0-3): ShiftRows, SubBytes, MixColumns, then XOR with
    /// `round_key`'s block, as x86's `AESENC` ([`crate::reference::ars::aes_enc`]).
    unsafe fn aes_enc(a: Self::U, round_key: Self::U) -> Self::U;
    /// The last round, without MixColumns, as x86's `AESENCLAST`.
    unsafe fn aes_enc_last(a: Self::U, round_key: Self::U) -> Self::U;
    /// Whether the backend has a faster form of the same AES rounds that only some of its CPUs
    /// run ([`Self::aes_enc_wide`]; AVX2: one 256-bit `VAESENC`, on Zen 3, Alder Lake and later,
    /// instead of two 128-bit `AESENC` and the moves between halves), chosen at run time once per
    /// stream ([`Self::wide_aes`]) by the kernels that use it (`kernels::GroupBits::WIDE_AES`).
    /// The bits are the same either way.
    const WIDE_AES: bool = false;
    /// Whether this CPU runs [`Self::aes_enc_wide`] (detected once).
    fn wide_aes() -> bool {
        false
    }
    /// [`Self::aes_enc`] in the wide form (only called when [`Self::wide_aes`]).
    #[inline(always)]
    unsafe fn aes_enc_wide(a: Self::U, round_key: Self::U) -> Self::U {
        unsafe { Self::aes_enc(a, round_key) }
    }
    /// [`Self::aes_enc_last`] in the wide form (only called when [`Self::wide_aes`]).
    #[inline(always)]
    unsafe fn aes_enc_last_wide(a: Self::U, round_key: Self::U) -> Self::U {
        unsafe { Self::aes_enc_last(a, round_key) }
    }
    /// Counter vectors whose ARS rounds run interleaved (`kernels::GroupBits`), a multiple of the
    /// `16 / LANES` vectors of one 32-element group: a round is one instruction whose latency
    /// (3-4 cycles) is several times its issue interval, so one vector at a time would leave the
    /// AES unit idle; each vector in flight holds one register.
    const RNG_VECTORS: usize = 2;
    /// Whether the first group of a fill passes through `core::hint::black_box`, so that LLVM
    /// cannot move the fill (which depends only on that group and runs once per span) into every
    /// chunk ahead of the test for it. It did so on AVX2 with the Philox generator (18% of the
    /// instructions of the bulk fill, callgrind).
    const RNG_FILL_OPAQUE: bool = false;
    /// Whether a fill that runs the wide rounds ([`Self::WIDE_AES`]) reads its counter vectors'
    /// starts (`kernels::GroupBits`' constants) from memory, as operands of its XORs, where LLVM
    /// would keep them in registers across the loop. With AVX2's 16 registers it kept all eight
    /// and spilled the conversion's values around them (the kernel bench's f32 -> bf16 SR
    /// 0.92-0.93x the time on Zen 5 read from memory).
    const RNG_STARTS_IN_MEMORY: bool = false;
    /// Whether the rounding kernels draw their bits a block at a time from the bulk fill, called
    /// out of line, rather than from AES rounds inside their loops (`kernels::RoundingBits`).
    const RNG_BLOCK: bool = false;
    /// Whether the stochastic conversions make their random bits span by span in their own loop,
    /// straight from the AES rounds' registers (`kernels::full_run_spans`), rather than as the
    /// other rounding kernels draw them ([`Self::RNG_BLOCK`]). Where the backend has a wide form
    /// of the rounds ([`Self::WIDE_AES`]), only on CPUs that run it.
    const CONVERSION_SPANS: bool = false;
    unsafe fn to_bits(a: Self::F) -> Self::U;
    unsafe fn from_bits(a: Self::U) -> Self::F;
    /// u32 -> f32 for lanes below 2^24 (exact).
    unsafe fn u32_to_f32(a: Self::U) -> Self::F;
    /// f32 -> integer, rounded toward zero (whatever MXCSR/FPCR says), for lanes in `[0, 2^31)`;
    /// other lanes (negative, NaN, too large) give any value.
    unsafe fn f32_to_u32_trunc(a: Self::F) -> Self::U;

    // ---- f16 in hardware
    /// Whether the ISA has an exact hardware f32 → f16 converter ([`Simd::store_f16_hw`]); the
    /// kernels run the integer rule where it has none.
    const F16_HW: bool = false;
    /// f32 → f16 bits (low half of each lane) by the hardware converter, nearest-even or
    /// `toward_zero`, NaNs quieted with their sign and top payload bits kept: SPEC.md §4.3's f16
    /// rule for those two roundings, bit for bit, whatever MXCSR/FPCR says. Only where
    /// [`Simd::F16_HW`].
    #[inline(always)]
    unsafe fn f32_to_f16_hw(_x: Self::F, _toward_zero: bool) -> Self::U {
        unreachable!("no f16 converter: Simd::F16_HW is false")
    }
    /// [`Simd::f32_to_f16_hw`] stored as `LANES` u16 at `p` by the converter itself, where the
    /// lanes and [`Simd::store_u16`] take a widening and a narrowing more.
    #[inline(always)]
    unsafe fn store_f16_hw(_p: *mut u16, _x: Self::F, _toward_zero: bool) {
        unreachable!("no f16 converter: Simd::F16_HW is false")
    }

    // ---- cache hints
    /// Whether [`Simd::prefetch`] does anything (the kernels skip their prefetching loop if not).
    const HAS_PREFETCH: bool = false;
    /// Asks for the cache line holding `p` to be brought into L1 ahead of its use. A hint: `p` is
    /// never dereferenced and need not point into any allocation. A no-op where the ISA has none.
    #[inline(always)]
    unsafe fn prefetch(_p: *const u8) {}
    /// Whether the optimizer kernels overlap consecutive full chunks, issuing each chunk's loads
    /// before the previous chunk's stores (`kernels::optim`, `Driver::full_run`: why). On for
    /// AVX-512, where a chunk is the 64 bytes between tensors allocated one after another; on
    /// AVX2 it added 2.5-7% instructions (16 registers) and the hosts that gain were not at hand.
    const OVERLAP_CHUNKS: bool = false;
    /// How many consecutive full chunks the optimizer kernels load and store together, buffer
    /// by buffer, where the weights are split (`kernels::optim`, `Driver::full_run`: why). On
    /// AVX-512, 2: the chunks whose 16-bit elements fill one 64-byte line. On AVX2 also 2 (half
    /// a line): 4 helped large split steps but slowed LAMB in cache (16 registers). 1 loads and
    /// stores chunk by chunk.
    const STORE_GROUP: usize = 1;
    /// Whether the optimizer kernels compile their hot storage layouts (`drive_layouts!`) rather
    /// than run every call through the run-time one (a `match` per buffer and chunk).
    const COMPILED_LAYOUTS: bool = true;
    /// Whether Adam folds its run-time flags into its arithmetic (the gradient's sign flipped by an
    /// XOR, the weights multiplied by 1 where they do not decay) rather than testing them in each
    /// chunk. On for AVX2: LLVM kept the tests in the loop, and with them it moved values between
    /// its 16 registers (AdamW with bf16-SR states: 10% fewer instructions without them, gungraun).
    /// Off elsewhere: AVX-512's took 1.08-1.10x the time on Zen 4 with the XOR (level on Emerald
    /// Rapids with all of it), and the portable code does the extra operations lane by lane (+4%
    /// instructions).
    const FLAGS_AS_ARITHMETIC: bool = false;
    /// Whether the optimizer loops that neither overlap their chunks nor make bits as they go
    /// run an op that allows it a chunk (or group) apart: the next one's first half before this
    /// one's second half and stores (`ElementOp::PIPELINED_CHUNKS`, Adam). On for AVX2: on Zen 4
    /// its AdamW layouts with a 16-bit buffer took 0.90-1.00x the time at 64K (level on an
    /// Emerald Rapids host), for 1-19% more instructions. Off where it was not measured
    /// (portable, NEON).
    const PIPELINES_CHUNKS: bool = false;
    /// Whether AMSGrad's steps in IPEX's and the all-f32 layouts run in the entry point of Adam's
    /// steps without it, where layouts are compiled (`kernels::optim::adam_entry`). On for AVX2:
    /// there AdamW's entry point is then the same code as before AMSGrad's other layouts were
    /// compiled (apart, AVX2's AdamW rows took 1.6-3.3% more instructions and split weights with
    /// bf16-SR states 1.01-1.04x the time on the Zen 4 VM). Off for AVX-512, whose AdamW layouts
    /// ran 0.95-0.98x the time without them (AMSGrad's own two 0.92-0.98x).
    const AMSGRAD_FP32_WITH_ADAM: bool = false;
    /// Whether LAMB's first pass, where it rounds both moments stochastically, sums u's squares
    /// in a loop of its own after the moments' loop, per norm block (`kernels::optim::lamb`'s
    /// `norms_apart`). On for AVX2: the two sums' f64 lanes take 8 of its 16 registers,
    /// and beside the moments' rounding LLVM kept the loop's values on the stack (bf16-SR states
    /// 0.83-0.94x the time on an Emerald Rapids VM; docs/DESIGN.md).
    const LAMB_NORMS_APART: bool = false;

    // ---- 16-bit memory
    /// Loads `LANES` u16, zero-extended.
    unsafe fn load_u16(p: *const u16) -> Self::U;
    /// Stores the low 16 bits of each lane.
    unsafe fn store_u16(p: *mut u16, v: Self::U);
    /// Loads `LANES` u16 into the lanes' high halves, the low halves zero (bf16 to f32 bits).
    #[inline(always)]
    unsafe fn load_u16_high(p: *const u16) -> Self::U {
        unsafe { Self::shl::<16>(Self::load_u16(p)) }
    }
    /// `hi[l] << 16 | lo[l]` per lane: `LANES` u16 from each (split weights).
    #[inline(always)]
    unsafe fn load_u16_halves(hi: *const u16, lo: *const u16) -> Self::U {
        unsafe { Self::unpack_u16_halves(Self::load_u16_raw(hi), Self::load_u16_raw(lo)) }
    }
    /// `LANES` u16 from `p`, arranged for [`Simd::unpack_u16_halves`]: [`Simd::load_u16_halves`]
    /// in parts, so that the driver can load the trails of several chunks before their tops.
    #[inline(always)]
    unsafe fn load_u16_raw(p: *const u16) -> Self::U {
        unsafe { Self::load_u16(p) }
    }
    /// `hi[l] << 16 | lo[l]` per lane from two [`Simd::load_u16_raw`].
    #[inline(always)]
    unsafe fn unpack_u16_halves(hi: Self::U, lo: Self::U) -> Self::U {
        unsafe { Self::or_u(Self::shl::<16>(hi), lo) }
    }
    /// Stores the high 16 bits of each lane to `hi` and the low 16 bits to `lo` (split weights,
    /// and the random bits of 32 elements, whose word holds two elements' bits).
    #[inline(always)]
    unsafe fn store_u16_halves(hi: *mut u16, lo: *mut u16, v: Self::U) {
        unsafe {
            let packed = Self::pack_u16_halves(v);
            Self::store_packed_lo(lo, packed);
            Self::store_packed_hi(hi, packed);
        }
    }
    /// `v` arranged so that [`Simd::store_packed_lo`] and [`Simd::store_packed_hi`] store its
    /// lanes' low and high 16 bits: [`Simd::store_u16_halves`] in two parts, so that the driver
    /// can store the trails of several chunks before their tops (`kernels::optim`, why).
    #[inline(always)]
    unsafe fn pack_u16_halves(v: Self::U) -> Self::U {
        v
    }
    /// Whether [`Simd::pack_u16_halves_pair`] is a form of its own, which the stores of split
    /// weights then take for each two chunks of a group.
    const PACKS_HALVES_PAIRS: bool = false;
    /// Two chunks' lanes' high and low 16 bits, each kind in element order in one vector:
    /// `[high, low]`, each `2 * LANES` values stored by one [`Simd::store`]. The default is
    /// the definition, lane by lane through memory, for the checks: the stores take the pair
    /// form only where [`Simd::PACKS_HALVES_PAIRS`] says a backend has its own.
    #[inline(always)]
    unsafe fn pack_u16_halves_pair(v: [Self::U; 2]) -> [Self::U; 2] {
        unsafe {
            let (x, y, l) = (
                u32_lanes::<Self>(v[0]),
                u32_lanes::<Self>(v[1]),
                Self::LANES,
            );
            let word = |i: usize| if i < l { x[i] } else { y[i - l] };
            let halves = |shift: u32| {
                u32_vector::<Self>(|j| {
                    (word(2 * j) >> shift) & 0xFFFF | ((word(2 * j + 1) >> shift) & 0xFFFF) << 16
                })
            };
            [halves(16), halves(0)]
        }
    }
    /// Whether [`Simd::pack_u16_halves_beside_aes`] is a form of its own.
    const PACKS_BESIDE_AES: bool = false;
    /// [`Simd::pack_u16_halves`] by operations that issue beside the AES rounds rather than on
    /// their port: the same result. For `fill_bits`, whose loop is the rounds and this, on the
    /// CPUs where that pays ([`crate::cpu::packs_beside_aes`]).
    #[inline(always)]
    unsafe fn pack_u16_halves_beside_aes(v: Self::U) -> Self::U {
        unsafe { Self::pack_u16_halves(v) }
    }
    /// Stores the low 16 bits of each lane of `v` (as [`Simd::pack_u16_halves`] left it).
    #[inline(always)]
    unsafe fn store_packed_lo(lo: *mut u16, packed: Self::U) {
        unsafe { Self::store_u16(lo, packed) }
    }
    /// Stores the high 16 bits of each lane of `v` (as [`Simd::pack_u16_halves`] left it).
    #[inline(always)]
    unsafe fn store_packed_hi(hi: *mut u16, packed: Self::U) {
        unsafe { Self::store_u16(hi, Self::shr::<16>(packed)) }
    }
    /// Stores the high 16 bits of each lane (a bf16 store of f32 bits that already carry their
    /// rounding increment: no shift first).
    #[inline(always)]
    unsafe fn store_u16_high(p: *mut u16, v: Self::U) {
        unsafe { Self::store_packed_hi(p, Self::pack_u16_halves(v)) }
    }

    /// Whether [`Simd::load_u16_high_pair`] and [`Simd::store_u16_high_pair`] take two consecutive
    /// chunks' bf16 values with one load per line read (AVX-512: a `vpermw` and two unpacks) and
    /// one store per line written (a two-table `vpermt2w`), so that the optimizers' grouped loops
    /// (`STORE_GROUP` 2) use them for bf16 buffers. Otherwise those loops keep their own order of loads and stores.
    /// (AVX2 overrides the store alone, which the stochastic bf16 conversion uses; its optimizers
    /// keep the one-chunk forms in element order, and take [`Simd::EVEN_ODD`] where they can.)
    const PAIRED_U16: bool = false;
    /// [`Simd::load_u16_high`] of the two chunks from `p`.
    #[inline(always)]
    unsafe fn load_u16_high_pair(p: *const u16) -> [Self::U; 2] {
        unsafe {
            [
                Self::load_u16_high(p),
                Self::load_u16_high(p.add(Self::LANES)),
            ]
        }
    }
    /// [`Simd::store_u16_high`] of the two chunks `v` to `p`.
    #[inline(always)]
    unsafe fn store_u16_high_pair(p: *mut u16, v: [Self::U; 2]) {
        unsafe {
            Self::store_u16_high(p, v[0]);
            Self::store_u16_high(p.add(Self::LANES), v[1]);
        }
    }

    // ---- Two chunks of 16-bit values in even/odd order
    // A line of `2 * LANES` 16-bit values (two chunks') as two vectors: lane `l` of the first
    // holds element `2l`, lane `l` of the second element `2l + 1`. Each 32-bit lane of the line
    // is one lane of both, so line and vectors convert with shifts, masks and blends and no
    // shuffle. For arithmetic that treats each lane alone, with every buffer in this order.

    /// Whether the optimizers' grouped loops (`STORE_GROUP` 2) take a pair of chunks whose
    /// buffers are all 16-bit in even/odd order. Element order takes shuffles per line read
    /// and written (AVX-512: a `vpermw` and two unpacks, a `vpermt2w`; AVX2: a `vpshufb` per
    /// chunk read, a `vpshufb` and a `vpermq` per chunk written).
    const EVEN_ODD: bool = false;

    /// The f32 bits of the bf16 line at `p`: even elements, then odd (low halves zero).
    #[inline(always)]
    unsafe fn load_u16_high_even_odd(p: *const u16) -> [Self::U; 2] {
        unsafe {
            let x = Self::to_bits(Self::load(p.cast()));
            [
                Self::shl::<16>(x),
                Self::and_u(x, Self::splat_u(0xFFFF_0000)),
            ]
        }
    }
    /// Stores the high halves of `v` (even elements, then odd) as the bf16 line at `p`.
    #[inline(always)]
    unsafe fn store_u16_high_even_odd(p: *mut u16, v: [Self::U; 2]) {
        unsafe {
            let high = Self::and_u(v[1], Self::splat_u(0xFFFF_0000));
            Self::store(
                p.cast(),
                Self::from_bits(Self::or_u(Self::shr::<16>(v[0]), high)),
            );
        }
    }
    /// The f32 bits of the split values whose tops are the line at `top` and trails the line at
    /// `trail`: even elements, then odd.
    #[inline(always)]
    unsafe fn load_split_even_odd(top: *const u16, trail: *const u16) -> [Self::U; 2] {
        unsafe {
            let t = Self::to_bits(Self::load(top.cast()));
            let l = Self::to_bits(Self::load(trail.cast()));
            [
                Self::or_u(Self::shl::<16>(t), Self::and_u(l, Self::splat_u(0xFFFF))),
                Self::or_u(
                    Self::and_u(t, Self::splat_u(0xFFFF_0000)),
                    Self::shr::<16>(l),
                ),
            ]
        }
    }
    /// Stores the f32 bits `v` (even elements, then odd) as split values: their high halves to
    /// the line at `top`, their low halves to the line at `trail`.
    #[inline(always)]
    unsafe fn store_split_even_odd(top: *mut u16, trail: *mut u16, v: [Self::U; 2]) {
        unsafe {
            let t = Self::or_u(
                Self::shr::<16>(v[0]),
                Self::and_u(v[1], Self::splat_u(0xFFFF_0000)),
            );
            let l = Self::or_u(
                Self::and_u(v[0], Self::splat_u(0xFFFF)),
                Self::shl::<16>(v[1]),
            );
            Self::store(top.cast(), Self::from_bits(t));
            Self::store(trail.cast(), Self::from_bits(l));
        }
    }
    /// The 16-bit values of a pair of chunks, given as words `w` (the first chunk's in the low
    /// halves, the second's in the high halves, as [`Simd::store_u16_halves`] takes them), in
    /// even/odd order: the even elements' values, then the odd ones', each in the low halves.
    #[inline(always)]
    unsafe fn even_odd_halves(w: Self::U) -> [Self::U; 2] {
        unsafe {
            let words = u32_lanes::<Self>(w);
            let l = Self::LANES;
            let half = |i: usize| {
                if i < l {
                    words[i] & 0xFFFF
                } else {
                    words[i - l] >> 16
                }
            };
            [
                u32_vector::<Self>(|j| half(2 * j)),
                u32_vector::<Self>(|j| half(2 * j + 1)),
            ]
        }
    }

    /// Lanes `2i` and `2i + 1` exchanged: element `e`'s bits become those of element `e ^ 1`
    /// (the second moment's bits from the first moment's stream, SPEC.md §3.2), in output words
    /// and in chunks alike.
    #[inline(always)]
    unsafe fn swap_pairs(a: Self::U) -> Self::U {
        unsafe {
            let x = u32_lanes::<Self>(a);
            u32_vector::<Self>(|l| x[l ^ 1])
        }
    }

    /// [`Simd::even_odd_halves`] of two chunks' 16-bit values given apart: `a` the first
    /// chunk's, `b` the second's, each in the low halves of its lanes with the high halves zero
    /// (as a bits block in element order holds them, `RoundingBits::r16_prepared`).
    #[inline(always)]
    unsafe fn even_odd_of_chunks(a: Self::U, b: Self::U) -> [Self::U; 2] {
        unsafe { Self::even_odd_halves(Self::or_u(a, Self::shl::<16>(b))) }
    }

    /// The lanes of `a` and `b` (a pair of chunks) in even/odd order: lane `l` of the first
    /// vector is lane `2l` of the two taken as one vector of twice the lanes (`a`'s first), of
    /// the second lane `2l + 1` (the even/odd layout of a bits block, `FillBlock`).
    #[inline(always)]
    unsafe fn even_odd_lanes(a: Self::U, b: Self::U) -> [Self::U; 2] {
        unsafe {
            let (x, y, l) = (u32_lanes::<Self>(a), u32_lanes::<Self>(b), Self::LANES);
            let lane = |i: usize| if i < l { x[i] } else { y[i - l] };
            [
                u32_vector::<Self>(|j| lane(2 * j)),
                u32_vector::<Self>(|j| lane(2 * j + 1)),
            ]
        }
    }

    /// Within each 128-bit block of four lanes, the even lanes of `a` and then of `b`, and the
    /// odd ones (lane `4k + j` of the first vector is lane `4k + 2j` of `a` for `j < 2`, lane
    /// `4k + 2j - 4` of `b` for `j ≥ 2`; of the second, one lane on): [`Simd::even_odd_lanes`]
    /// where the pair's blocks lie across `a` and `b` in alternation, as the even/odd block fill
    /// draws them ([`crate::kernels::bits`]' `GroupBits::new_for_blocks`), with no shuffle across
    /// blocks.
    #[inline(always)]
    unsafe fn even_odd_in_blocks(a: Self::U, b: Self::U) -> [Self::U; 2] {
        unsafe {
            let (x, y) = (u32_lanes::<Self>(a), u32_lanes::<Self>(b));
            let pick = |j: usize, odd: usize| {
                let (k, j) = (j / 4 * 4, j % 4);
                if j < 2 {
                    x[k + 2 * j + odd]
                } else {
                    y[k + 2 * j - 4 + odd]
                }
            };
            [
                u32_vector::<Self>(|j| pick(j, 0)),
                u32_vector::<Self>(|j| pick(j, 1)),
            ]
        }
    }

    /// The inverse of [`Simd::even_odd_lanes`]: a pair's even and odd lanes back in element
    /// order, as two chunks (lane `2l` of the two taken as one vector is lane `l` of `even`,
    /// lane `2l + 1` lane `l` of `odd`).
    #[inline(always)]
    unsafe fn lanes_in_order(even: Self::U, odd: Self::U) -> [Self::U; 2] {
        unsafe {
            let (x, y, l) = (u32_lanes::<Self>(even), u32_lanes::<Self>(odd), Self::LANES);
            let lane = |i: usize| {
                if i.is_multiple_of(2) {
                    x[i / 2]
                } else {
                    y[i / 2]
                }
            };
            [
                u32_vector::<Self>(lane),
                u32_vector::<Self>(|j| lane(l + j)),
            ]
        }
    }

    /// [`Simd::even_odd_lanes`] of the two chunks of 32-bit values from `p`.
    #[inline(always)]
    unsafe fn load_even_odd_lanes(p: *const u32) -> [Self::U; 2] {
        unsafe {
            let a = Self::to_bits(Self::load(p.cast()));
            let b = Self::to_bits(Self::load(p.add(Self::LANES).cast()));
            Self::even_odd_lanes(a, b)
        }
    }

    /// Stores [`Simd::lanes_in_order`] of `even` and `odd` as the two chunks of 32-bit values
    /// from `p`.
    #[inline(always)]
    unsafe fn store_lanes_in_order(p: *mut u32, even: Self::U, odd: Self::U) {
        unsafe {
            let [a, b] = Self::lanes_in_order(even, odd);
            Self::store(p.cast(), Self::from_bits(a));
            Self::store(p.add(Self::LANES).cast(), Self::from_bits(b));
        }
    }

    // ---- 8-bit and 4-bit memory (the low-bit formats)
    /// Loads `LANES` bytes, zero-extended.
    unsafe fn load_u8(p: *const u8) -> Self::U;
    /// Stores the low 8 bits of each lane (`LANES` bytes).
    unsafe fn store_u8(p: *mut u8, v: Self::U);
    /// Reads `LANES / 2` bytes; lane `2k` gets the low nibble of byte `k`, lane `2k + 1` the high.
    unsafe fn load_nibbles(p: *const u8) -> Self::U;
    /// Writes `LANES / 2` bytes: byte `k` = `(v[2k] & 0xF) | (v[2k + 1] & 0xF) << 4`.
    unsafe fn store_nibbles(p: *mut u8, v: Self::U);
    /// The largest lane, unsigned.
    unsafe fn reduce_max_u(a: Self::U) -> u32;

    // ---- f64 sums of squares (SPEC.md §7)
    unsafe fn acc_zero() -> Self::Acc;
    /// Adds `x²` (in f64, exact squares) of each lane to reduction lane `lane0 + lane`
    /// (`lane0` is `e mod 16` of the first lane, a multiple of `LANES`).
    unsafe fn acc_add_squares(acc: Self::Acc, x: Self::F, lane0: usize) -> Self::Acc;
    unsafe fn acc_lanes(acc: Self::Acc) -> [f64; 16];
    /// The accumulator whose [`Simd::acc_lanes`] are `lanes`.
    unsafe fn acc_from_lanes(lanes: [f64; 16]) -> Self::Acc;
    /// [`Simd::acc_add_squares`] of a pair of chunks in even/odd order (lane `l` of `even` holds
    /// the pair's element `2l`, of `odd` element `2l + 1`; `lane0` is `e mod 16` of its first
    /// element), into an accumulator in the even/odd layout ([`even_odd_layout`]): its lane `k`
    /// ([`Simd::acc_lanes`]) holds reduction lane `2k` for `k < 8` and `2(k - 8) + 1` for `k >= 8`. Each reduction lane
    /// takes its elements in index order, as in element order. By default through the lanes; the
    /// backends that take pairs in even/odd order have their own.
    #[inline(always)]
    unsafe fn acc_add_squares_even_odd(
        acc: Self::Acc,
        even: Self::F,
        odd: Self::F,
        lane0: usize,
    ) -> Self::Acc {
        unsafe {
            let mut a = Self::acc_lanes(acc);
            let (even, odd) = (
                u32_lanes::<Self>(Self::to_bits(even)),
                u32_lanes::<Self>(Self::to_bits(odd)),
            );
            for l in 0..Self::LANES {
                let k = (lane0 + 2 * l) % 16 / 2;
                // The square of an f32 is exact in f64, so this equals the fused form.
                let (x, y) = (
                    f64::from(f32::from_bits(even[l])),
                    f64::from(f32::from_bits(odd[l])),
                );
                a[k] += x * x;
                a[8 + k] += y * y;
            }
            Self::acc_from_lanes(a)
        }
    }
}

/// Checks of the backends' primitives, run by `tests/internals.rs` through
/// `halfstep::fuzzing::internals` (on every backend: `kernels::bits::checks`).
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::{MAX_LANES, Simd, u32_lanes as lanes, u32_vector as vector};

    /// The even/odd forms of a pair of chunks (`Simd::load_u16_high_even_odd` and the others)
    /// against their definition: lane `l` of the first vector is element `2l` of the pair, of
    /// the second element `2l + 1`; a store keeps only the halves it stores, whatever the others.
    #[inline(always)]
    pub(crate) unsafe fn check_even_odd<V: Simd>(name: &str) {
        let n = 2 * V::LANES;
        for seed in 0..8u32 {
            let value = |i: usize, k: u32| {
                let x = (i as u32).wrapping_mul(0x9E37_79B9) ^ seed.wrapping_mul(0x85EB_CA6B) ^ k;
                (x ^ x >> 15) as u16
            };
            let (mut top, mut trail) = ([0u16; 2 * MAX_LANES], [0u16; 2 * MAX_LANES]);
            for i in 0..n {
                top[i] = value(i, 1);
                trail[i] = value(i, 2);
            }
            let junk = |l: usize| u32::from(value(l, 3));
            unsafe {
                // bf16: high halves in, low halves zero; out, only the high halves.
                let [even, odd] = V::load_u16_high_even_odd(top.as_ptr());
                let (even, odd) = (lanes::<V>(even), lanes::<V>(odd));
                for l in 0..V::LANES {
                    assert_eq!(
                        even[l],
                        u32::from(top[2 * l]) << 16,
                        "{name}: bf16 even {l}"
                    );
                    assert_eq!(
                        odd[l],
                        u32::from(top[2 * l + 1]) << 16,
                        "{name}: bf16 odd {l}"
                    );
                }
                let mut line = [0u16; 2 * MAX_LANES];
                let pair = [
                    vector::<V>(|l| u32::from(top[2 * l]) << 16 | junk(l)),
                    vector::<V>(|l| u32::from(top[2 * l + 1]) << 16 | junk(l + 1)),
                ];
                V::store_u16_high_even_odd(line.as_mut_ptr(), pair);
                assert_eq!(line[..n], top[..n], "{name}: bf16 store");
                // Split: tops in the high halves, trails in the low halves, both ways.
                let [even, odd] = V::load_split_even_odd(top.as_ptr(), trail.as_ptr());
                let (even, odd) = (lanes::<V>(even), lanes::<V>(odd));
                let both = |i: usize| u32::from(top[i]) << 16 | u32::from(trail[i]);
                for l in 0..V::LANES {
                    assert_eq!(even[l], both(2 * l), "{name}: split even {l}");
                    assert_eq!(odd[l], both(2 * l + 1), "{name}: split odd {l}");
                }
                let (mut t, mut r) = ([0u16; 2 * MAX_LANES], [0u16; 2 * MAX_LANES]);
                let pair = [
                    vector::<V>(|l| both(2 * l)),
                    vector::<V>(|l| both(2 * l + 1)),
                ];
                V::store_split_even_odd(t.as_mut_ptr(), r.as_mut_ptr(), pair);
                assert_eq!(t[..n], top[..n], "{name}: split store, tops");
                assert_eq!(r[..n], trail[..n], "{name}: split store, trails");
                // A pair's 16-bit values as words (the first chunk's low, the second's high).
                let words = vector::<V>(|l| u32::from(top[l]) | u32::from(top[V::LANES + l]) << 16);
                let [even, odd] = V::even_odd_halves(words);
                let (even, odd) = (lanes::<V>(even), lanes::<V>(odd));
                for l in 0..V::LANES {
                    assert_eq!(even[l], u32::from(top[2 * l]), "{name}: halves even {l}");
                    assert_eq!(odd[l], u32::from(top[2 * l + 1]), "{name}: halves odd {l}");
                }
                // The same values given as two chunks (low halves, high halves zero).
                let a = vector::<V>(|l| u32::from(top[l]));
                let b = vector::<V>(|l| u32::from(top[V::LANES + l]));
                let [even, odd] = V::even_odd_of_chunks(a, b);
                let (even, odd) = (lanes::<V>(even), lanes::<V>(odd));
                for l in 0..V::LANES {
                    assert_eq!(even[l], u32::from(top[2 * l]), "{name}: chunks even {l}");
                    assert_eq!(odd[l], u32::from(top[2 * l + 1]), "{name}: chunks odd {l}");
                }
                // Two chunks' whole lanes.
                let a = vector::<V>(both);
                let b = vector::<V>(|l| both(V::LANES + l));
                let [even, odd] = V::even_odd_lanes(a, b);
                let [first, second] = V::lanes_in_order(even, odd);
                let (even, odd) = (lanes::<V>(even), lanes::<V>(odd));
                for l in 0..V::LANES {
                    assert_eq!(even[l], both(2 * l), "{name}: lanes even {l}");
                    assert_eq!(odd[l], both(2 * l + 1), "{name}: lanes odd {l}");
                }
                let (first, second) = (lanes::<V>(first), lanes::<V>(second));
                for l in 0..V::LANES {
                    assert_eq!(first[l], both(l), "{name}: lanes in order {l}");
                    assert_eq!(second[l], both(V::LANES + l), "{name}: lanes in order {l}");
                }
                // The same lanes with their blocks of four in alternation: the first vector
                // holding blocks 0, 2, 4, ... of the two taken as one, the second 1, 3, 5, ...
                let alternate = |v: usize| vector::<V>(|l| both(4 * (2 * (l / 4) + v) + l % 4));
                let [even, odd] = V::even_odd_in_blocks(alternate(0), alternate(1));
                let (even, odd) = (lanes::<V>(even), lanes::<V>(odd));
                for l in 0..V::LANES {
                    assert_eq!(even[l], both(2 * l), "{name}: in blocks even {l}");
                    assert_eq!(odd[l], both(2 * l + 1), "{name}: in blocks odd {l}");
                }
                // The same through memory, from and to a line one word past an alignment.
                let mut line = [0u32; 2 * MAX_LANES + 1];
                for (i, w) in line[1..=n].iter_mut().enumerate() {
                    *w = both(i);
                }
                let [even, odd] = V::load_even_odd_lanes(line[1..].as_ptr());
                let mut out = [junk(0); 2 * MAX_LANES + 2];
                V::store_lanes_in_order(out[1..].as_mut_ptr(), even, odd);
                let (even, odd) = (lanes::<V>(even), lanes::<V>(odd));
                for l in 0..V::LANES {
                    assert_eq!(even[l], both(2 * l), "{name}: loaded lanes even {l}");
                    assert_eq!(odd[l], both(2 * l + 1), "{name}: loaded lanes odd {l}");
                }
                assert_eq!(out[1..=n], line[1..=n], "{name}: lanes stored in order");
                assert_eq!(
                    [out[0], out[n + 1]],
                    [junk(0); 2],
                    "{name}: stored past the line"
                );
                // Two chunks' high and low 16-bit halves, each kind stored in element order.
                let [high, low] = V::pack_u16_halves_pair([a, b]);
                let mut halves = [[0u16; 2 * MAX_LANES + 2]; 2];
                for (packed, out) in [high, low].into_iter().zip(&mut halves) {
                    out.fill(0xDEAD);
                    V::store(out[1..].as_mut_ptr().cast(), V::from_bits(packed));
                    assert_eq!(
                        [out[0], out[n + 1]],
                        [0xDEAD; 2],
                        "{name}: halves pair, past"
                    );
                }
                for i in 0..n {
                    let w = both(i);
                    assert_eq!(
                        halves[0][1 + i],
                        (w >> 16) as u16,
                        "{name}: halves pair, high {i}"
                    );
                    assert_eq!(halves[1][1 + i], w as u16, "{name}: halves pair, low {i}");
                }
                // Sums of squares of four pairs of chunks, in element order and in even/odd order:
                // the same sums (bit for bit) in each reduction lane, laid out apart. Magnitudes
                // 2^-30 .. 2^30, so that the f64 sums round and their order shows.
                let x = |i: usize| {
                    let exponent = 97 + u32::from(value(i, 5)) % 60;
                    f32::from_bits(exponent << 23 | u32::from(value(i, 4)) << 7)
                };
                for lane0 in (0..16).step_by(2 * V::LANES) {
                    let from =
                        |f: &dyn Fn(usize) -> f32| V::from_bits(vector::<V>(|l| f(l).to_bits()));
                    let mut by_element = V::acc_zero();
                    let mut even_odd = V::acc_zero();
                    for pair in 0..4 {
                        let at = |i: usize| x(n * pair + i);
                        by_element = V::acc_add_squares(by_element, from(&at), lane0);
                        by_element = V::acc_add_squares(
                            by_element,
                            from(&|l| at(V::LANES + l)),
                            lane0 + V::LANES,
                        );
                        even_odd = V::acc_add_squares_even_odd(
                            even_odd,
                            from(&|l| at(2 * l)),
                            from(&|l| at(2 * l + 1)),
                            lane0,
                        );
                    }
                    let (a, b) = (V::acc_lanes(by_element), V::acc_lanes(even_odd));
                    for k in 0..8 {
                        assert_eq!(a[2 * k].to_bits(), b[k].to_bits(), "{name}: sums even {k}");
                        assert_eq!(
                            a[2 * k + 1].to_bits(),
                            b[8 + k].to_bits(),
                            "{name}: sums odd {k}"
                        );
                    }
                    let back = V::acc_lanes(V::acc_from_lanes(a));
                    assert_eq!(
                        a.map(f64::to_bits),
                        back.map(f64::to_bits),
                        "{name}: from lanes"
                    );
                }
            }
        }
    }

    /// [`Simd::sqrt_off_divider`] against [`Simd::sqrt`], bit for bit: every f32 whose sign bit
    /// is clear (zero, subnormals, normals, infinity, NaNs), a vector of 16 consecutive bit
    /// patterns at a time, so that vectors mixing the lanes it covers with those it leaves to the
    /// divider are among them; and every 65537th pattern with the sign set. Where the backend's
    /// is `sqrt` itself there is nothing to compare.
    #[inline(always)]
    pub(crate) unsafe fn check_sqrt_off_divider<V: Simd>(name: &str) {
        if !V::SQRT_OFF_DIVIDER {
            return;
        }
        let step = V::LANES as u32;
        // Lane by lane where a range of vectors differs somewhere (the OR of the differences).
        let differ = |first: u32| unsafe {
            let x = V::from_bits(V::add_u(V::iota(), V::splat_u(first)));
            V::sub_u(V::to_bits(V::sqrt_off_divider(x)), V::to_bits(V::sqrt(x)))
        };
        let report = |first: u32| {
            // SAFETY: the caller runs this with `V`'s target features.
            let (got, want) = unsafe {
                let x = V::from_bits(vector::<V>(|l| first.wrapping_add(l as u32)));
                (
                    lanes::<V>(V::to_bits(V::sqrt_off_divider(x))),
                    lanes::<V>(V::to_bits(V::sqrt(x))),
                )
            };
            for l in 0..V::LANES {
                let input = first.wrapping_add(l as u32);
                assert_eq!(got[l], want[l], "{name}: sqrt of {input:#010x}");
            }
        };
        let ranges = (0..1u32 << 31)
            .step_by(1 << 20)
            .map(|start| (start, start + (1 << 20), step))
            .chain(core::iter::once((1u32 << 31, u32::MAX - step, 65537)));
        for (start, end, stride) in ranges {
            let mut acc = unsafe { V::splat_u(0) };
            for first in (start..end).step_by(stride as usize) {
                acc = unsafe { V::or_u(acc, differ(first)) };
            }
            if unsafe { lanes::<V>(acc) }.iter().any(|&d| d != 0) {
                for first in (start..end).step_by(stride as usize) {
                    report(first);
                }
            }
        }
    }
}
