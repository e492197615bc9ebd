//! Prints test vectors for `tools/spec_check.py`, which recomputes them from docs/SPEC.md's text
//! in Python: element-indexed random bits (§3.2) and conversions (§4).
//!
//! `cargo run --release --example spec_vectors | python3 tools/spec_check.py`

use halfstep::convert::fill_element_bits;
use halfstep::reference::round::{Mode, f32_to_bf16, f32_to_f16};
use halfstep::rng::{MAX_STREAM, Purpose};
use halfstep::{PhiloxRng, Replica, StepContext, TensorStream};
use rand_core::{Rng, SeedableRng};
use std::io::Write;

fn main() {
    let mut r = PhiloxRng::seed_from_u64(0x5EC);
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    // bits SEED STEP TENSOR PURPOSE SLOT E R16 (hex except decimal PURPOSE and E), as the
    // library's fill gives them (its dispatched backend) for one element at a time.
    let purposes = [
        Purpose::Weights,
        Purpose::FirstMoment,
        Purpose::SecondMoment,
        Purpose::MaxSecondMoment,
    ];
    for i in 0..4000u64 {
        let slot = (r.next_u32() as u16).min(u16::MAX - 1);
        let replica = match slot {
            0 => Replica::Identical,
            s => Replica::Differing(s - 1),
        };
        let ctx = StepContext::new(r.next_u64(), r.next_u32()).with_replica(replica);
        let (tensor, purpose) = (r.next_u32() & MAX_STREAM, purposes[i as usize % 4]);
        let e = match i % 3 {
            0 => i,
            1 => r.next_u64() & ((1 << 51) - 1),
            _ => (1 << 51) - 1 - (r.next_u64() & 0xFFFF),
        };
        let stream = TensorStream {
            id: tensor,
            index_base: e,
        };
        let mut bits = [0u16];
        fill_element_bits(&ctx, &stream, purpose, &mut bits).unwrap();
        writeln!(
            out,
            "bits {:x} {:x} {tensor:x} {} {slot:x} {e} {:x}",
            ctx.seed, ctx.step, purpose as u8, bits[0]
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
