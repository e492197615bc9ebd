//! Philox4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): the
//! sequential generator [`crate::PhiloxRng`] (SPEC.md §3.4). Element bits come from ARS-5
//! ([`crate::reference::bits`]).

/// Multiplier applied to counter word 0 in each round.
pub const M0: u32 = 0xD251_1F53;
/// Multiplier applied to counter word 2 in each round.
pub const M1: u32 = 0xCD9E_8D57;
/// Weyl increment of key word 0 between rounds (golden ratio).
pub const W0: u32 = 0x9E37_79B9;
/// Weyl increment of key word 1 between rounds (sqrt(3) - 1).
pub const W1: u32 = 0xBB67_AE85;

/// The round count of [`crate::PhiloxRng`] (Random123's recommended default).
pub const ROUNDS: u32 = 10;

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
