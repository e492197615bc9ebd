//! Philox4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
//! element-indexed random-bit layout of SPEC.md §3.
//!
//! Plain scalar code: this *is* the definition that every backend's vectorized Philox must reproduce.

/// Multiplier applied to counter word 0 in each round.
pub const M0: u32 = 0xD251_1F53;
/// Multiplier applied to counter word 2 in each round.
pub const M1: u32 = 0xCD9E_8D57;
/// Weyl increment of key word 0 between rounds (golden ratio).
pub const W0: u32 = 0x9E37_79B9;
/// Weyl increment of key word 1 between rounds (sqrt(3) - 1).
pub const W1: u32 = 0xBB67_AE85;

/// The round count halfstep uses everywhere (Random123's recommended default).
pub const ROUNDS: u32 = 10;

/// Elements whose bits come from one group of 16 Philox blocks (16 blocks x 4 words x 2 halves).
pub const GROUP_ELEMENTS: u64 = 128;

/// Element indices must stay below this: the block number has 48 bits (SPEC.md §3).
pub const MAX_ELEMENT_INDEX: u64 = 1 << 51;

/// The full 64-bit product `a * b` split into (high, low) 32-bit words.
#[inline]
pub fn mul_hi_lo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// One Philox4x32 round with the given round key.
#[inline]
pub fn round(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mul_hi_lo(M0, ctr[0]);
    let (hi1, lo1) = mul_hi_lo(M1, ctr[2]);
    [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0]
}

/// Philox4x32 with `rounds` rounds. The first round uses the key as given; the key is bumped by
/// (W0, W1), wrapping, before each later round.
pub fn philox4x32_r(mut ctr: [u32; 4], mut key: [u32; 2], rounds: u32) -> [u32; 4] {
    for r in 0..rounds {
        if r > 0 {
            key = [key[0].wrapping_add(W0), key[1].wrapping_add(W1)];
        }
        ctr = round(ctr, key);
    }
    ctr
}

/// Philox4x32-10.
#[inline]
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    philox4x32_r(ctr, key, ROUNDS)
}

/// The 64-bit seed as a Philox key: word 0 is the low half.
#[inline]
pub fn seed_key(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// Coordinates of one stream of element-indexed random bits: everything but the element index.
///
/// Counter words (SPEC.md §3): `c0 = block[0..32]`, `c1 = block[32..48] | replica_slot << 16`,
/// `c2 = step`, `c3 = stream_word`; key = seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BitsCoord {
    /// The 64-bit seed (the Philox key).
    pub seed: u64,
    /// The optimizer step (counter word 2).
    pub step: u32,
    /// `tensor_stream << 4 | purpose` (counter word 3).
    pub stream_word: u32,
    /// 0 for bits shared by all replicas, `r + 1` for replica `r`'s own bits (upper half of word 1).
    pub replica_slot: u16,
}

/// Philox block number and (word, half) position that supply element `e`'s 16 random bits.
///
/// `j = e & 15`, `k = (e >> 4) & 7`, `block = (e >> 7) * 16 + j`; the bits are half `k & 1`
/// (0 = low 16 bits) of output word `k >> 1`.
#[inline]
pub fn element_position(e: u64) -> (u64, usize, u32) {
    let j = e & 15;
    let k = (e >> 4) & 7;
    let block = (e >> 7) * 16 + j;
    (block, (k >> 1) as usize, (k & 1) as u32)
}

/// The Philox counter for `block` within the stream `c`.
#[inline]
pub fn block_counter(c: &BitsCoord, block: u64) -> [u32; 4] {
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
    let (block, word, half) = element_position(e);
    let out = philox4x32_10(block_counter(c, block), seed_key(c.seed));
    (out[word] >> (16 * half)) as u16
}
