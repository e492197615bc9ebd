//! Buffers from C: element kinds, roundings, and the checks every pointer passes before it becomes a
//! slice (length, NULL, alignment, wrap-around, then no two buffers of a call sharing a byte).

use super::*;

/// Storage kind of a buffer.
pub const HS_F32: u32 = 0;
/// bf16 (16-bit) storage.
pub const HS_BF16: u32 = 1;
/// Split weights: `data` holds the bf16 tops, `trail` the low 16 bits.
pub const HS_SPLIT: u32 = 2;

/// Rounding of a bf16 buffer or a conversion: nearest, ties to even.
pub const HS_NEAREST_EVEN: u32 = 0;
/// Stochastic rounding with the element's random bits.
pub const HS_STOCHASTIC: u32 = 1;
/// Toward zero.
pub const HS_TOWARD_ZERO: u32 = 2;

pub(super) fn rounding(r: u32) -> Result<Rounding, Fail> {
    match r {
        HS_NEAREST_EVEN => Ok(Rounding::NearestEven),
        HS_STOCHASTIC => Ok(Rounding::Stochastic),
        HS_TOWARD_ZERO => Ok(Rounding::TowardZero),
        _ => Err(invalid(format!("unknown rounding {r}"))),
    }
}

/// Most elements one buffer may have: the element-index limit of SPEC.md §8 (2^51), which also keeps
/// every buffer's size in bytes far below `isize::MAX`, the most a Rust slice may span.
pub const HS_MAX_LEN: u64 = 2_251_799_813_685_248;
const _: () = assert!(HS_MAX_LEN == crate::reference::bits::MAX_ELEMENT_INDEX);

/// Whose buffer a check is about: `tensors[i].grads`, or a conversion's `src`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Name {
    pub(super) tensor: Option<usize>,
    pub(super) buffer: &'static str,
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tensor {
            Some(i) => write!(f, "tensors[{i}].{}", self.buffer),
            None => f.write_str(self.buffer),
        }
    }
}

/// A conversion's (or the call's own) buffer.
pub(super) fn arg(buffer: &'static str) -> Name {
    Name {
        tensor: None,
        buffer,
    }
}

/// The bytes a checked buffer spans, for the overlap check (`start == end` when empty).
#[derive(Clone, Copy, Debug)]
pub(super) struct Region {
    start: usize,
    end: usize,
    name: Name,
}

/// The checks every buffer passes before a slice is formed over it, in this order: its length
/// (at most [`HS_MAX_LEN`] elements: `HS_OUT_OF_RANGE`), NULL (allowed only for 0 elements),
/// alignment for `T`, and an address range that does not wrap around. Returns its byte range.
pub(super) fn region<T>(p: *const T, len: usize, name: Name) -> Result<Region, Fail> {
    if len as u64 > HS_MAX_LEN {
        return Err(Fail(
            HS_OUT_OF_RANGE,
            format!("{name} has {len} elements, more than 2^51"),
        ));
    }
    let start = p as usize;
    if len == 0 {
        return Ok(Region {
            start,
            end: start,
            name,
        });
    }
    if p.is_null() {
        return Err(Fail(HS_NULL_POINTER, format!("{name} is NULL")));
    }
    if !start.is_multiple_of(align_of::<T>()) {
        return Err(Fail(
            HS_MISALIGNED,
            format!("{name} is not {}-byte aligned", align_of::<T>()),
        ));
    }
    // `len <= 2^51` and elements of at most 128 bytes: no overflow in the product.
    match start.checked_add(len * size_of::<T>()) {
        Some(end) if end <= isize::MAX as usize => Ok(Region { start, end, name }),
        _ => Err(invalid(format!(
            "{name}: {len} elements from {start:#x} run past the end of the address space"
        ))),
    }
}

/// Fails with `HS_INVALID_ARGUMENT` naming two buffers that share a byte, if any do. Sorts
/// `regions` in place: O(n log n) for a group of n buffers, no allocation.
pub(super) fn disjoint(regions: &mut [Region]) -> Result<(), Fail> {
    regions.sort_unstable_by_key(|r| r.start);
    // The non-empty region reaching furthest so far: any later one starting before its end
    // overlaps it.
    let mut reach: Option<Region> = None;
    for r in regions.iter().filter(|r| r.start < r.end) {
        if let Some(prev) = reach
            && r.start < prev.end
        {
            return Err(invalid(format!("{} and {} overlap", prev.name, r.name)));
        }
        if reach.is_none_or(|prev| r.end > prev.end) {
            reach = Some(*r);
        }
    }
    Ok(())
}

/// Checks the buffers of a call that takes plain pointers (a conversion, a quantizer): each as
/// [`region`], then no two overlapping.
pub(super) fn check_buffers<const N: usize>(
    mut regions: [Result<Region, Fail>; N],
) -> Result<(), Fail> {
    let mut checked = [Region {
        start: 0,
        end: 0,
        name: arg(""),
    }; N];
    for (c, r) in checked.iter_mut().zip(regions.iter_mut()) {
        *c = std::mem::replace(r, Ok(*c))?;
    }
    disjoint(&mut checked)
}

/// [`region`]'s checks alone, for a pointer whose overlap is checked elsewhere or moot.
pub(super) fn check_ptr<T>(p: *const T, len: usize, what: &'static str) -> Result<(), Fail> {
    region(p, len, arg(what)).map(drop)
}

/// An element-wise conversion's `len` sources and `len` destinations, checked as
/// [`check_buffers`] (`src` and `dst` must not overlap), as slices.
pub(super) unsafe fn src_dst<'a, S, D>(
    src: *const S,
    dst: *mut D,
    len: usize,
) -> Result<(&'a [S], &'a mut [D]), Fail> {
    check_buffers([
        region(src, len, arg("src")),
        region(dst.cast_const(), len, arg("dst")),
    ])?;
    Ok(unsafe { (slice(src, len), slice_mut(dst, len)) })
}

/// A slice over a checked pointer (dangling for `len == 0`).
pub(super) unsafe fn slice<'a, T>(p: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

/// A mutable slice over a checked pointer (dangling for `len == 0`).
pub(super) unsafe fn slice_mut<'a, T>(p: *mut T, len: usize) -> &'a mut [T] {
    if len == 0 {
        &mut []
    } else {
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }
}
