//! The element-indexed random bits of SPEC.md §3.2: which ARS-5 block, word and half give each
//! element its 16 bits.
//!
//! Plain scalar code: this *is* the definition that every backend's vectorized fill reproduces.

use crate::reference::ars::{Block, ars4x32_5};

/// Elements whose bits come from one group of 4 ARS blocks (4 blocks x 4 words x 2 halves).
pub const GROUP_ELEMENTS: u64 = 32;

/// Element indices must stay below this: the block number has 48 bits (SPEC.md §3.2).
pub const MAX_ELEMENT_INDEX: u64 = 1 << 51;

/// Coordinates of one stream of element-indexed random bits: everything but the element index.
///
/// Counter words (SPEC.md §3.2): `c0 = block[0..32]`, `c1 = block[32..48] | replica_slot << 16`,
/// `c2 = step`, `c3 = stream_word`; key = `(seed[0..32], seed[32..64], 0, 0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BitsCoord {
    /// The 64-bit seed (key words 0 and 1).
    pub seed: u64,
    /// The optimizer step (counter word 2).
    pub step: u32,
    /// `tensor_stream << 4 | purpose` (counter word 3).
    pub stream_word: u32,
    /// 0 for bits shared by all replicas, `r + 1` for replica `r`'s own bits (upper half of word 1).
    pub replica_slot: u16,
    /// Each element takes the bits this stream gives element `e ^ 1`: the second moment's bits,
    /// drawn from the first moment's stream (SPEC.md §3.2), so that one ARS-5 call serves both.
    pub swap_pairs: bool,
}

/// The ARS key of a seed: word 0 is the seed's low half, words 2 and 3 are zero.
#[inline]
pub fn seed_key(seed: u64) -> Block {
    [seed as u32, (seed >> 32) as u32, 0, 0]
}

/// ARS block number and (word, half) position that supply element `e`'s 16 random bits.
///
/// `i = e & 31`, `w = i & 15`; the block is `(e >> 5) * 4 + (w >> 2)`, the word `w & 3`, the half
/// `i >> 4` (0 = low 16 bits).
#[inline]
pub fn element_position(e: u64) -> (u64, usize, u32) {
    let i = e & 31;
    let w = i & 15;
    ((e >> 5) * 4 + (w >> 2), (w & 3) as usize, (i >> 4) as u32)
}

/// The ARS counter for `block` within the stream `c`.
#[inline]
pub fn block_counter(c: &BitsCoord, block: u64) -> Block {
    debug_assert!(block < 1 << 48);
    [
        block as u32,
        ((block >> 32) as u32) | (u32::from(c.replica_slot) << 16),
        c.step,
        c.stream_word,
    ]
}

/// The 16 random bits of element `e` (a global element index, below [`MAX_ELEMENT_INDEX`]).
pub fn element_bits(c: &BitsCoord, e: u64) -> u16 {
    debug_assert!(e < MAX_ELEMENT_INDEX);
    let e = if c.swap_pairs { e ^ 1 } else { e };
    let (block, word, half) = element_position(e);
    let out = ars4x32_5(block_counter(c, block), seed_key(c.seed));
    (out[word] >> (16 * half)) as u16
}
