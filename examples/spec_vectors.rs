//! Prints test vectors for `tools/spec_check.py`, which recomputes them from docs/SPEC.md's text
//! in Python: element-indexed random bits (§3.2) and conversions (§4).
//!
//! `cargo run --release --example spec_vectors | python3 tools/spec_check.py`

use halfstep::PhiloxRng;
use halfstep::reference::bits::{BitsCoord, element_bits};
use halfstep::reference::round::{Mode, f32_to_bf16, f32_to_f16};
use rand_core::{Rng, SeedableRng};
use std::io::Write;

fn main() {
    let mut r = PhiloxRng::seed_from_u64(0x5EC);
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    // bits SEED STEP STREAM_WORD SLOT E R16 (hex except decimal E)
    for i in 0..3000u64 {
        let c = BitsCoord {
            seed: r.next_u64(),
            step: r.next_u32(),
            stream_word: r.next_u32(),
            replica_slot: r.next_u32() as u16,
        };
        let e = match i % 3 {
            0 => i,
            1 => r.next_u64() & ((1 << 51) - 1),
            _ => (1 << 51) - 1 - (r.next_u64() & 0xFFFF),
        };
        writeln!(
            out,
            "bits {:x} {:x} {:x} {:x} {e} {:x}",
            c.seed,
            c.step,
            c.stream_word,
            c.replica_slot,
            element_bits(&c, e)
        )
        .unwrap();
    }
    // FORMAT MODE X R RESULT (hex)
    let specials = [
        0u32,
        0x8000_0000,
        1,
        0x807F_FFFF,
        0x7F7F_FFFF,
        0xFF7F_8000,
        0x7F80_0000,
        0xFF80_0000,
        0x7F80_0001,
        0xFFC0_0001,
        0x7FFF_FFFF,
        0x477F_E000,
        0x477F_F000,
        0x3380_0000,
        0x3300_0000,
        0x387F_E000,
    ];
    for i in 0..60_000u32 {
        let bits = if i < 16 * 16 {
            specials[(i % 16) as usize]
        } else {
            match i % 4 {
                0 => r.next_u32(),
                // Around f16's subnormal and normal ranges.
                1 => (r.next_u32() & 0x8FFF_FFFF) | 0x3000_0000,
                2 => (r.next_u32() & 0x87FF_FFFF) | 0x3800_0000,
                _ => (r.next_u32() & 0x80FF_FFFF) | 0x4700_0000,
            }
        };
        let x = f32::from_bits(bits);
        let rb = r.next_u32() as u16;
        for (name, mode) in [
            ("n", Mode::NearestEven),
            ("s", Mode::Stochastic(rb)),
            ("z", Mode::TowardZero),
        ] {
            writeln!(
                out,
                "bf16 {name} {bits:x} {rb:x} {:x}",
                f32_to_bf16(x, mode)
            )
            .unwrap();
            writeln!(out, "f16 {name} {bits:x} {rb:x} {:x}", f32_to_f16(x, mode)).unwrap();
        }
    }
}
