//! The low-bit quantizers (SPEC.md §4.5–§4.7) on vectors: fp8 element-wise, fp4 with NVFP4 / MXFP4
//! block scaling, and the amax scan.
//!
//! The fp4 kernels work in tiles of [`TILE`] elements from the slice start: block scales first
//! (an integer max per block, then the scale rule of `crate::reference::quant`, per block and
//! scalar, so the scale arithmetic is the reference's own), then the element codes into a stack
//! buffer with chunks aligned to the **global** index (the RNG layout), then the nibble packing
//! with chunks aligned to the slice start (element `2i` in the low nibble of byte `i`). Blocks
//! start at the slice start while RNG chunks follow the global index, so a chunk may straddle two
//! blocks: each lane then takes its own block's divisor.

use super::Simd;
use super::round::{Small, from_small, to_small};
use super::{
    BitsBlock, Chunk, ChunkBody, RoundingBits, conversion_full_run, run_chunks, run_conversion,
    stage_in, stage_out,
};
use crate::arch::MAX_LANES;
use crate::reference::bits::BitsCoord;
use crate::reference::quant::{self as q, E2M1, E4M3, E5M2, Fp4Scaling, Fp8};
use crate::reference::round::Rounding;

const E4M3_V: Small = Small::of(E4M3);
const E5M2_V: Small = Small::of(E5M2);
const E2M1_V: Small = Small::of(E2M1);

/// Elements per tile of the fp4 quantizer: a multiple of both block sizes, small enough that its
/// codes (one byte each) and divisors stay on the stack and in L1.
pub(crate) const TILE: usize = 2048;

/// Block scale codes and element factors (divisors for NVFP4, reciprocals for MXFP4) for `LANES` blocks with amax bits `amax` (SPEC.md §4.7,
/// as `crate::reference::quant::{nvfp4,mxfp4}_block_scale`, lane-wise).
#[inline(always)]
unsafe fn block_scales<V: Simd>(scaling: Fp4Scaling, amax: V::U) -> (V::U, V::F) {
    unsafe {
        let s = V::splat_u;
        let non_finite = V::gt_i32(amax, s(0x7F7F_FFFF));
        match scaling {
            Fp4Scaling::Nv { tensor_scale } => {
                // t = (amax / 6) / pts, clamped to [2^-6, 448] (t is never NaN here: amax finite,
                // pts finite and > 0), then E4M3 nearest-even.
                let t = V::div(
                    V::div(V::from_bits(amax), V::splat(6.0)),
                    V::splat(tensor_scale),
                );
                let (lo, hi) = (V::splat(q::pow2(-6)), V::splat(448.0));
                let t = V::select(V::gt(t, hi), hi, V::select(V::gt(lo, t), lo, t));
                let code = to_small::<V, 3>(&E4M3_V, V::to_bits(t), Rounding::NearestEven, s(0));
                let code = V::select_u(non_finite, s(0x7F), code);
                let divisor = V::mul(V::splat(tensor_scale), from_small::<V, 3>(&E4M3_V, code));
                (code, divisor)
            }
            Fp4Scaling::Mx => {
                // floor(log2 amax): the exponent field, or for subnormals the exponent of the
                // (exact) integer conversion of the pattern, 149 lower.
                let exp = V::shr::<23>(amax);
                let sub = V::sub_u(V::shr::<23>(V::to_bits(V::u32_to_f32(amax))), s(149));
                let log2 = V::select_u(V::eq_u(exp, s(0)), sub, exp);
                // log2 - 2 (+ 127 - 127: `log2` is still biased) clamped to [0, 254].
                let code = V::min_i32(V::max_i32(V::sub_u(log2, s(2)), s(0)), s(254));
                let code = V::select_u(V::eq_u(amax, s(0)), s(127), code);
                let code = V::select_u(non_finite, s(0xFF), code);
                // Elements divide by X = 2^(code - 127); they multiply by 1/X = 2^(127 - code)
                // instead, which is exact and gives the same bits (both round the same real
                // x * 2^(127 - code) once; 1/X is representable for every code, 2^-127 as a
                // subnormal). NaN for a NaN scale, like X.
                let inv = V::shl::<23>(V::sub_u(s(254), code));
                let inv = V::select_u(V::eq_u(code, s(254)), s(0x0040_0000), inv);
                let inv = V::select_u(non_finite, s(0x7FC0_0000), inv);
                (code, V::from_bits(inv))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// fp8

struct ToFp8<V: Simd> {
    fmt: Fp8,
    rounding: Rounding,
    rng: RoundingBits<V>,
    src: *const f32,
    dst: *mut u8,
}

impl<V: Simd> ToFp8<V> {
    #[inline(always)]
    unsafe fn chunk(&mut self, s: *const f32, d: *mut u8, e: u64) {
        unsafe {
            let r = self.rng.for_rounding::<false>(self.rounding, e);
            self.chunk_with(s, d, r)
        }
    }

    /// The chunk at `s` rounded with the random bits `r` (low halves).
    #[inline(always)]
    unsafe fn chunk_with(&self, s: *const f32, d: *mut u8, r: V::U) {
        unsafe {
            let b = V::to_bits(V::load(s));
            let code = match self.fmt {
                Fp8::E4M3 => to_small::<V, 3>(&E4M3_V, b, self.rounding, r),
                Fp8::E5M2 => to_small::<V, 2>(&E5M2_V, b, self.rounding, r),
            };
            V::store_u8(d, code);
        }
    }
}

impl<V: Simd> ChunkBody<V> for ToFp8<V> {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe { self.chunk(self.src.offset(off), self.dst.offset(off), e) }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut f = [0f32; MAX_LANES];
            let mut b = [0u8; MAX_LANES];
            stage_in(self.src, f.as_mut_ptr(), c);
            self.chunk(f.as_ptr(), b.as_mut_ptr(), c.e);
            stage_out(b.as_ptr(), self.dst, c);
        }
    }
    #[inline(always)]
    unsafe fn full_run(&mut self, off: isize, e: u64, end: u64) {
        unsafe { conversion_full_run::<V, Self>(self, off, e, end) }
    }
}

rounds_chunks!(ToFp8);

/// f32 -> fp8 codes with `rounding`, random bits from `coord` at global index `base`.
#[inline(always)]
pub(crate) unsafe fn f32_to_fp8<V: Simd>(
    fmt: Fp8,
    src: &[f32],
    dst: &mut [u8],
    rounding: Rounding,
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        // One loop per format and rounding: with both constant in the loop, its per-chunk
        // `match`es fold away.
        match fmt {
            Fp8::E4M3 => {
                per_rounding!(rounding, r => fp8_run::<V>(Fp8::E4M3, r, src, dst, coord, base))
            }
            Fp8::E5M2 => {
                per_rounding!(rounding, r => fp8_run::<V>(Fp8::E5M2, r, src, dst, coord, base))
            }
        }
    }
}

#[inline(always)]
unsafe fn fp8_run<V: Simd>(
    fmt: Fp8,
    rounding: Rounding,
    src: &[f32],
    dst: &mut [u8],
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        // One pointer for the body and the prefetching: a second `as_mut_ptr` would retag the
        // slice and invalidate the first (Miri, Stacked Borrows).
        let dst = dst.as_mut_ptr();
        let mut block = BitsBlock::new();
        let mut k = ToFp8::<V> {
            fmt,
            rounding,
            rng: RoundingBits::new(*coord, base + src.len() as u64, &mut block),
            src: src.as_ptr(),
            dst,
        };
        run_conversion::<V, _, _>(base, src, dst, &mut k);
    }
}

struct FromFp8 {
    fmt: Fp8,
    src: *const u8,
    dst: *mut f32,
}

impl FromFp8 {
    #[inline(always)]
    unsafe fn chunk<V: Simd>(&self, s: *const u8, d: *mut f32) {
        unsafe {
            let c = V::load_u8(s);
            let x = match self.fmt {
                Fp8::E4M3 => from_small::<V, 3>(&E4M3_V, c),
                Fp8::E5M2 => from_small::<V, 2>(&E5M2_V, c),
            };
            V::store(d, x);
        }
    }
}

impl<V: Simd> ChunkBody<V> for FromFp8 {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, _e: u64) {
        unsafe { self.chunk::<V>(self.src.offset(off), self.dst.offset(off)) }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut b = [0u8; MAX_LANES];
            let mut f = [0f32; MAX_LANES];
            stage_in(self.src, b.as_mut_ptr(), c);
            self.chunk::<V>(b.as_ptr(), f.as_mut_ptr());
            stage_out(f.as_ptr(), self.dst, c);
        }
    }
}

/// fp8 codes -> f32 (exact).
#[inline(always)]
pub(crate) unsafe fn fp8_to_f32<V: Simd>(fmt: Fp8, src: &[u8], dst: &mut [f32]) {
    unsafe {
        let mut k = FromFp8 {
            fmt,
            src: src.as_ptr(),
            dst: dst.as_mut_ptr(),
        };
        run_chunks::<V, _>(0, src.len(), &mut k);
    }
}

// ---------------------------------------------------------------------------------------------
// amax

/// The integer max of `bits & 0x7FFFFFFF` over `n` elements at `p` (SPEC.md §4.7's amax).
#[inline(always)]
unsafe fn amax_at<V: Simd>(p: *const f32, n: usize) -> u32 {
    unsafe {
        let magnitude = V::splat_u(0x7FFF_FFFF);
        let mut acc = V::splat_u(0);
        let full = n - n % V::LANES;
        let mut i = 0;
        while i < full {
            // Magnitudes are below 2^31, so the signed max is the unsigned one.
            acc = V::max_i32(acc, V::and_u(V::to_bits(V::load(p.add(i))), magnitude));
            i += V::LANES;
        }
        if full < n {
            // Zero padding cannot raise a max of magnitudes.
            let mut f = [0f32; MAX_LANES];
            core::ptr::copy_nonoverlapping(p.add(full), f.as_mut_ptr(), n - full);
            acc = V::max_i32(acc, V::and_u(V::to_bits(V::load(f.as_ptr())), magnitude));
        }
        V::reduce_max_u(acc)
    }
}

/// amax bits of a whole slice (0 for an empty one).
#[inline(always)]
pub(crate) unsafe fn amax_bits<V: Simd>(src: &[f32]) -> u32 {
    unsafe { amax_at::<V>(src.as_ptr(), src.len()) }
}

// ---------------------------------------------------------------------------------------------
// fp4 with block scales

/// The element codes of one tile: `codes[i] = e2m1(src[i] / divisor of i's block)` (or
/// `src[i] * reciprocal`, where that is exact: MXFP4).
struct Fp4Codes<V: Simd> {
    divide: bool,
    rounding: Rounding,
    rng: RoundingBits<V>,
    /// log2 of the block size.
    block_shift: u32,
    src: *const f32,
    codes: *mut u8,
    divisors: *const f32,
    /// Whether full chunks prefetch the next tile ([`ChunkBody::prefetch`]).
    prefetch: bool,
}

impl<V: Simd> Fp4Codes<V> {
    /// Lanes `lo..hi` of the chunk whose lane 0 is tile element `off` are valid.
    #[inline(always)]
    unsafe fn chunk(
        &mut self,
        s: *const f32,
        d: *mut u8,
        e: u64,
        off: isize,
        lo: usize,
        hi: usize,
    ) {
        unsafe {
            // Shifts, not divisions: a division per chunk costs as much as the rest of it.
            let first = (off + lo as isize) as usize >> self.block_shift;
            let last = (off + hi as isize - 1) as usize >> self.block_shift;
            let mut divisor = V::splat(*self.divisors.add(first));
            if last != first {
                // Lanes from `start` on belong to the next block.
                let start = (last << self.block_shift) as isize - off;
                let next = V::gt_i32(V::iota(), V::splat_u((start - 1) as u32));
                divisor = V::select(next, V::splat(*self.divisors.add(last)), divisor);
            }
            let r = self.rng.for_rounding::<false>(self.rounding, e);
            let x = if self.divide {
                V::div(V::load(s), divisor)
            } else {
                V::mul(V::load(s), divisor)
            };
            V::store_u8(
                d,
                to_small::<V, 1>(&E2M1_V, V::to_bits(x), self.rounding, r),
            );
        }
    }
}

impl<V: Simd> ChunkBody<V> for Fp4Codes<V> {
    #[inline(always)]
    fn prefetching(&self) -> bool {
        self.prefetch
    }
    /// The next tile's line at this chunk's offset: its amax pass reads it right after this
    /// tile's codes, a burst of arithmetic with no loads through which the hardware prefetchers
    /// fall behind (past the slice's end the hint does nothing; docs/DESIGN.md, "SIMD backends").
    #[inline(always)]
    unsafe fn prefetch(&mut self, off: isize) {
        // One prefetch per 64-byte line of f32: every chunk at 16 lanes, every other one at 8.
        let chunks_per_line = (64 / (4 * V::LANES)).max(1);
        if (off as usize / V::LANES).is_multiple_of(chunks_per_line) {
            unsafe { V::prefetch(self.src.wrapping_offset(off + TILE as isize).cast()) }
        }
    }
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, e: u64) {
        unsafe {
            let (s, d) = (self.src.offset(off), self.codes.offset(off));
            self.chunk(s, d, e, off, 0, V::LANES)
        }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            let mut f = [0f32; MAX_LANES];
            let mut b = [0u8; MAX_LANES];
            stage_in(self.src, f.as_mut_ptr(), c);
            self.chunk(f.as_ptr(), b.as_mut_ptr(), c.e, c.off, c.lo, c.hi);
            stage_out(b.as_ptr(), self.codes, c);
        }
    }
}

/// Packs `n` codes two per byte into `dst` (`ceil(n / 2)` bytes).
#[inline(always)]
unsafe fn pack<V: Simd>(codes: *const u8, n: usize, dst: *mut u8) {
    unsafe {
        let mut i = 0;
        while i + V::LANES <= n {
            V::store_nibbles(dst.add(i / 2), V::load_u8(codes.add(i)));
            i += V::LANES;
        }
        if i < n {
            // The zero padding makes an odd count's last high nibble 0.
            let mut b = [0u8; MAX_LANES];
            let mut out = [0u8; MAX_LANES / 2];
            core::ptr::copy_nonoverlapping(codes.add(i), b.as_mut_ptr(), n - i);
            V::store_nibbles(out.as_mut_ptr(), V::load_u8(b.as_ptr()));
            core::ptr::copy_nonoverlapping(out.as_ptr(), dst.add(i / 2), (n - i).div_ceil(2));
        }
    }
}

/// NVFP4 / MXFP4 quantization of `src` (SPEC.md §4.7): `scales` gets one code per block, `packed`
/// the E2M1 codes two per byte; element `i` rounds with the bits of global index `base + i`.
#[inline(always)]
pub(crate) unsafe fn quantize_fp4<V: Simd>(
    scaling: Fp4Scaling,
    src: &[f32],
    packed: &mut [u8],
    scales: &mut [u8],
    rounding: Rounding,
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        // One loop per scaling and rounding, as `f32_to_fp8`: the codes pass then neither tests
        // the rounding nor chooses between dividing and multiplying per chunk.
        match scaling {
            Fp4Scaling::Nv { tensor_scale } => per_rounding!(rounding, r => fp4_run::<V>(
                Fp4Scaling::Nv { tensor_scale }, src, packed, scales, r, coord, base
            )),
            Fp4Scaling::Mx => per_rounding!(rounding, r => fp4_run::<V>(
                Fp4Scaling::Mx, src, packed, scales, r, coord, base
            )),
        }
    }
}

#[inline(always)]
unsafe fn fp4_run<V: Simd>(
    scaling: Fp4Scaling,
    src: &[f32],
    packed: &mut [u8],
    scales: &mut [u8],
    rounding: Rounding,
    coord: &BitsCoord,
    base: u64,
) {
    unsafe {
        let block = scaling.block();
        const MAX_BLOCKS: usize = TILE / q::NVFP4_BLOCK;
        let mut divisors = [0f32; MAX_BLOCKS];
        let mut amax = [0f32; MAX_BLOCKS];
        let mut block_codes = [0u8; MAX_BLOCKS];
        // Every code is written before it is read (the chunks cover the tile, pack reads `tn`
        // of them): left uninitialized, which saves zeroing 2 KiB per call on small tensors.
        let mut codes = [const { core::mem::MaybeUninit::<u8>::uninit() }; TILE];
        let mut bits = BitsBlock::new();
        let mut k = Fp4Codes::<V> {
            divide: matches!(scaling, Fp4Scaling::Nv { .. }),
            rounding,
            rng: RoundingBits::new(*coord, base + src.len() as u64, &mut bits),
            block_shift: block.trailing_zeros(),
            src: src.as_ptr(),
            codes: codes.as_mut_ptr().cast(),
            divisors: divisors.as_ptr(),
            prefetch: super::convert_prefetches::<V>(src.len()),
        };
        let mut t0 = 0;
        while t0 < src.len() {
            let tn = TILE.min(src.len() - t0);
            let tile = src.as_ptr().add(t0);
            // amax per block (as f32 patterns, so the vector load reads them), then the scales of
            // LANES blocks at a time; lanes past the last block compute unused values.
            let blocks = tn.div_ceil(block);
            for (j, a) in amax[..blocks].iter_mut().enumerate() {
                *a = f32::from_bits(amax_at::<V>(tile.add(j * block), block.min(tn - j * block)));
            }
            let mut j = 0;
            while j < blocks {
                let (c, d) = block_scales::<V>(scaling, V::to_bits(V::load(amax.as_ptr().add(j))));
                V::store_u8(block_codes.as_mut_ptr().add(j), c);
                V::store(divisors.as_mut_ptr().add(j), d);
                j += V::LANES;
            }
            scales[t0 / block..t0 / block + blocks].copy_from_slice(&block_codes[..blocks]);
            // Fresh pointers each tile: the arrays were written through other borrows since.
            k.src = tile;
            k.codes = codes.as_mut_ptr().cast();
            k.divisors = divisors.as_ptr();
            run_chunks::<V, _>(base + t0 as u64, tn, &mut k);
            pack::<V>(codes.as_ptr().cast(), tn, packed.as_mut_ptr().add(t0 / 2));
            t0 += tn;
        }
    }
}

struct Fp4Values {
    scaling: Fp4Scaling,
    packed: *const u8,
    scales: *const u8,
    dst: *mut f32,
    /// The block whose scale `scale` holds.
    block: usize,
    scale: f32,
}

impl Fp4Values {
    /// Elements `off ..` (chunk-aligned from the slice start, so within one block).
    #[inline(always)]
    unsafe fn chunk<V: Simd>(&mut self, p: *const u8, d: *mut f32, off: usize) {
        unsafe {
            let b = off >> self.scaling.block().trailing_zeros();
            if b != self.block {
                let code = *self.scales.add(b);
                self.scale = match self.scaling {
                    Fp4Scaling::Nv { .. } => q::to_f32(E4M3, code),
                    Fp4Scaling::Mx => q::e8m0_to_f32(code),
                };
                self.block = b;
            }
            let x = from_small::<V, 1>(&E2M1_V, V::load_nibbles(p));
            let y = match self.scaling {
                // (e2m1 * s) * pts, as the reference: two roundings in this order.
                Fp4Scaling::Nv { tensor_scale } => {
                    V::mul(V::mul(x, V::splat(self.scale)), V::splat(tensor_scale))
                }
                Fp4Scaling::Mx => V::mul(x, V::splat(self.scale)),
            };
            V::store(d, y);
        }
    }
}

impl<V: Simd> ChunkBody<V> for Fp4Values {
    #[inline(always)]
    unsafe fn full(&mut self, off: isize, _e: u64) {
        unsafe {
            let off = off as usize;
            self.chunk::<V>(self.packed.add(off / 2), self.dst.add(off), off)
        }
    }
    #[inline(always)]
    unsafe fn partial(&mut self, c: &Chunk) {
        unsafe {
            // Chunks start at the slice start, so only the tail is partial (lanes 0..hi).
            let off = c.off as usize;
            let mut b = [0u8; MAX_LANES / 2];
            let mut f = [0f32; MAX_LANES];
            core::ptr::copy_nonoverlapping(
                self.packed.add(off / 2),
                b.as_mut_ptr(),
                c.hi.div_ceil(2),
            );
            self.chunk::<V>(b.as_ptr(), f.as_mut_ptr(), off);
            stage_out(f.as_ptr(), self.dst, c);
        }
    }
}

/// NVFP4 / MXFP4 -> f32 for `dst.len()` elements.
#[inline(always)]
pub(crate) unsafe fn dequantize_fp4<V: Simd>(
    scaling: Fp4Scaling,
    packed: &[u8],
    scales: &[u8],
    dst: &mut [f32],
) {
    unsafe {
        let mut k = Fp4Values {
            scaling,
            packed: packed.as_ptr(),
            scales: scales.as_ptr(),
            dst: dst.as_mut_ptr(),
            block: usize::MAX,
            scale: 0.0,
        };
        run_chunks::<V, _>(0, dst.len(), &mut k);
    }
}
