//! Helpers shared by the integration tests.
#![allow(dead_code)]

use halfstep::PhiloxRng;
use rand_core::{Rng, SeedableRng};

/// A test-data generator (our own Philox, which tests/philox.rs checks against Random123's KATs).
pub fn rng(seed: u64) -> PhiloxRng {
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    PhiloxRng::from_seed(s)
}

/// A uniform f32 in [lo, hi).
pub fn uniform(r: &mut PhiloxRng, lo: f32, hi: f32) -> f32 {
    let u = (r.next_u32() >> 8) as f32 / (1u32 << 24) as f32;
    lo + (hi - lo) * u
}

/// A value of random sign and magnitude 2^[emin, emax) with a random mantissa.
pub fn log_uniform(r: &mut PhiloxRng, emin: i32, emax: i32) -> f32 {
    let e = emin + (r.next_u32() % (emax - emin) as u32) as i32;
    let m = 1.0 + (r.next_u32() >> 9) as f32 / (1u32 << 23) as f32;
    let s = if r.next_u32() & 1 == 0 { 1.0 } else { -1.0 };
    s * m * 2f32.powi(e)
}

/// Parses a hex field.
pub fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim(), 16).unwrap_or_else(|e| panic!("bad hex {s:?}: {e}"))
}

/// The non-comment lines of a test-data file, split on `sep`.
pub fn data_rows(text: &str, sep: char) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.split(sep)
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}
