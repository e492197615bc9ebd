//! ARS-R (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; Random123's
//! `ars.h`): R rounds of AES with a Weyl-sequence key schedule, on a 128-bit counter and key.
//!
//! Plain scalar code, byte by byte as FIPS-197 states the AES round: this *is* the definition that
//! every backend's AES instructions (x86 `AESENC`, aarch64 `AESE` + `AESMC`) must reproduce.

/// The round count halfstep uses for element bits (SPEC.md §3.1).
pub const ROUNDS: u32 = 5;

/// The Weyl increment added to each 64-bit half of the key before every round after the first:
/// (low half: golden ratio, high half: sqrt(3) - 1), as Random123's `ars.h`.
pub const WEYL: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xBB67_AE85_84CA_A73B];

/// The AES S-box (FIPS-197 §5.1.1), computed: the multiplicative inverse in GF(2^8) modulo
/// x^8 + x^4 + x^3 + x + 1 (0 maps to 0), then the affine map with constant 0x63.
pub const SBOX: [u8; 256] = {
    let mut s = [0u8; 256];
    let mut x = 0;
    while x < 256 {
        // The inverse as x^254 (square-and-multiply over the fixed exponent).
        let mut inv = 1u8;
        let mut base = x as u8;
        let mut e = 254u32;
        while e > 0 {
            if e & 1 == 1 {
                inv = gf_mul(inv, base);
            }
            base = gf_mul(base, base);
            e >>= 1;
        }
        if x == 0 {
            inv = 0;
        }
        let b = inv;
        s[x] = b ^ b.rotate_left(1) ^ b.rotate_left(2) ^ b.rotate_left(3) ^ b.rotate_left(4) ^ 0x63;
        x += 1;
    }
    s
};

/// `{02} · a` in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1 (FIPS-197 §4.2.1's `xtime`).
pub const fn xtime(a: u8) -> u8 {
    (a << 1) ^ if a & 0x80 != 0 { 0x1B } else { 0 }
}

/// Multiplication in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1: `xtime` per bit of `b`.
pub const fn gf_mul(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 == 1 {
            p ^= a;
        }
        a = xtime(a);
        b >>= 1;
    }
    p
}

/// A 128-bit AES state as four little-endian u32 words: byte `4c + r` of the block (row `r`,
/// column `c` of FIPS-197's state) is bits `8r .. 8r + 8` of word `c`.
pub type Block = [u32; 4];

fn bytes(b: Block) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (c, w) in b.iter().enumerate() {
        out[4 * c..4 * c + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

fn words(s: [u8; 16]) -> Block {
    core::array::from_fn(|c| {
        u32::from_le_bytes([s[4 * c], s[4 * c + 1], s[4 * c + 2], s[4 * c + 3]])
    })
}

/// SubBytes then ShiftRows: row `r` of the result's column `c` is the S-box of row `r` of column
/// `(c + r) mod 4`.
fn sub_shift(s: [u8; 16]) -> [u8; 16] {
    core::array::from_fn(|i| {
        let (r, c) = (i % 4, i / 4);
        SBOX[usize::from(s[4 * ((c + r) % 4) + r])]
    })
}

/// MixColumns: each column times the fixed polynomial {03}x^3 + {01}x^2 + {01}x + {02}, i.e.
/// row `r` becomes `{02}·a[r] ^ {03}·a[r+1] ^ a[r+2] ^ a[r+3]` (rows mod 4).
fn mix_columns(s: [u8; 16]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for c in 0..4 {
        let a = &s[4 * c..4 * c + 4];
        for r in 0..4 {
            let a1 = a[(r + 1) % 4];
            out[4 * c + r] = xtime(a[r]) ^ xtime(a1) ^ a1 ^ a[(r + 2) % 4] ^ a[(r + 3) % 4];
        }
    }
    out
}

fn xor(a: Block, b: Block) -> Block {
    core::array::from_fn(|i| a[i] ^ b[i])
}

/// One AES encryption round, as x86's `AESENC`: ShiftRows, SubBytes, MixColumns, then XOR with
/// the round key.
pub fn aes_enc(state: Block, round_key: Block) -> Block {
    xor(words(mix_columns(sub_shift(bytes(state)))), round_key)
}

/// The last AES round, as x86's `AESENCLAST`: ShiftRows, SubBytes, then XOR with the round key.
pub fn aes_enc_last(state: Block, round_key: Block) -> Block {
    xor(words(sub_shift(bytes(state))), round_key)
}

/// The key plus the Weyl increment, each 64-bit half (words 0-1 and 2-3) wrapping on its own.
pub fn next_round_key(k: Block) -> Block {
    let lo = (u64::from(k[0]) | u64::from(k[1]) << 32).wrapping_add(WEYL[0]);
    let hi = (u64::from(k[2]) | u64::from(k[3]) << 32).wrapping_add(WEYL[1]);
    [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32]
}

/// The `rounds + 1` round keys of ARS-`rounds`: the key, then each the previous plus [`WEYL`].
pub fn round_keys<const N: usize>(key: Block) -> [Block; N] {
    let mut k = [key; N];
    for i in 1..N {
        k[i] = next_round_key(k[i - 1]);
    }
    k
}

/// ARS-`rounds` (`1 <= rounds <= 10`): XOR with the key, `rounds - 1` [`aes_enc`] rounds, one
/// [`aes_enc_last`]; the key is bumped by [`WEYL`] before each AES round.
pub fn ars4x32_r(ctr: Block, key: Block, rounds: u32) -> Block {
    assert!((1..=10).contains(&rounds));
    let mut k = key;
    let mut v = xor(ctr, k);
    for _ in 1..rounds {
        k = next_round_key(k);
        v = aes_enc(v, k);
    }
    k = next_round_key(k);
    aes_enc_last(v, k)
}

/// ARS-5, the generator of element bits.
#[inline]
pub fn ars4x32_5(ctr: Block, key: Block) -> Block {
    ars4x32_r(ctr, key, ROUNDS)
}

/// AES-128 encryption (FIPS-197) of `block` under `key`, with the standard key expansion:
/// Random123's `aesni4x32`, checked against its and FIPS-197's known answers so that the round
/// functions above are tested on their own, apart from ARS's key schedule.
pub fn aes128_encrypt(block: Block, key: Block) -> Block {
    let mut rk = [key; 11];
    let mut rcon = 1u8;
    for i in 1..11 {
        let prev = rk[i - 1];
        let t = prev[3].rotate_right(8);
        let t = u32::from_le_bytes(t.to_le_bytes().map(|b| SBOX[usize::from(b)])) ^ u32::from(rcon);
        rcon = gf_mul(rcon, 2);
        let w0 = prev[0] ^ t;
        let w1 = prev[1] ^ w0;
        let w2 = prev[2] ^ w1;
        rk[i] = [w0, w1, w2, prev[3] ^ w2];
    }
    let mut v = xor(block, rk[0]);
    for k in &rk[1..10] {
        v = aes_enc(v, *k);
    }
    aes_enc_last(v, rk[10])
}
