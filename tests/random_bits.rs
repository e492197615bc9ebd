//! The generators against Random123's known answers (ARS for element bits, Philox4x32 for the
//! sequential generator), the rand_core generator through its traits, and the element-indexed
//! layout's invariances.

mod common;
use common::{data_rows, hex};
use halfstep::convert::fill_element_bits;
use halfstep::reference::ars::{aes128_encrypt, ars4x32_5, ars4x32_r};
use halfstep::reference::bits::{BitsCoord, element_bits, element_position};
use halfstep::reference::philox::{self, philox4x32_r};
use halfstep::rng::Purpose;
use halfstep::{PhiloxRng, Replica, StepContext, TensorStream};
use rand_core::{Rng, SeedableRng};

const KAT: &str = include_str!("data/philox4x32_kat.txt");
const ARS_KAT: &str = include_str!("data/ars4x32_kat.txt");

#[test]
fn every_random123_ars4x32_and_aesni4x32_kat_line_matches() {
    let rows = data_rows(ARS_KAT, ' ');
    assert_eq!(rows.len(), 7, "expected 4 aesni4x32 and 3 ars4x32 lines");
    for row in rows {
        let rounds: u32 = row[1].parse().unwrap();
        let w: Vec<u32> = row[2..].iter().map(|s| hex(s)).collect();
        let (ctr, key) = ([w[0], w[1], w[2], w[3]], [w[4], w[5], w[6], w[7]]);
        let out = match row[0].as_str() {
            "aesni4x32" => aes128_encrypt(ctr, key),
            "ars4x32" => ars4x32_r(ctr, key, rounds),
            other => panic!("unexpected generator {other}"),
        };
        assert_eq!(out, [w[8], w[9], w[10], w[11]], "KAT line {row:?}");
    }
}

#[test]
fn ars5_is_the_ars_round_function_with_five_rounds() {
    let (ctr, key) = ([1, 2, 3, 4], [5, 6, 7, 8]);
    assert_eq!(ars4x32_5(ctr, key), ars4x32_r(ctr, key, 5));
    assert_ne!(ars4x32_5(ctr, key), ars4x32_r(ctr, key, 4));
}

#[test]
fn element_position_covers_a_group_once() {
    // The 32 elements of group 3 use 4 blocks x 4 words x 2 halves, each exactly once.
    let mut seen = [[[false; 2]; 4]; 4];
    for e in 3 * 32..4 * 32 {
        let (block, word, half) = element_position(e);
        assert!((12..16).contains(&block));
        let slot = &mut seen[(block - 12) as usize][word][half as usize];
        assert!(!*slot, "element {e} reuses a slot");
        *slot = true;
    }
}

#[test]
fn every_random123_philox4x32_kat_line_matches() {
    let rows = data_rows(KAT, ' ');
    assert_eq!(rows.len(), 6, "expected the 3 R=10 and 3 R=7 lines");
    for row in rows {
        assert_eq!(row[0], "philox4x32");
        let rounds: u32 = row[1].parse().unwrap();
        let w: Vec<u32> = row[2..].iter().map(|s| hex(s)).collect();
        let out = philox4x32_r([w[0], w[1], w[2], w[3]], [w[4], w[5]], rounds);
        assert_eq!(out, [w[6], w[7], w[8], w[9]], "KAT line {row:?}");
        if rounds == 10 {
            assert_eq!(
                philox::philox4x32_10([w[0], w[1], w[2], w[3]], [w[4], w[5]]),
                out
            );
        }
    }
}

/// The pi-digits KAT key and counter, as a 16-byte seed for the sequential generator.
fn pi_seed() -> [u8; 16] {
    let words = [0xa4093822u32, 0x299f31d0, 0x13198a2e, 0x03707344];
    let mut s = [0u8; 16];
    for (i, w) in words.iter().enumerate() {
        s[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    s
}

#[test]
fn rand_core_generator_follows_its_documented_word_order() {
    // Block n is philox(ctr = (n, 0, s0, s1), key); words come out 0, 1, 2, 3.
    let mut g = PhiloxRng::from_seed(pi_seed());
    let key = [0xa4093822, 0x299f31d0];
    let b0 = philox4x32_r([0, 0, 0x13198a2e, 0x03707344], key, 10);
    let b1 = philox4x32_r([1, 0, 0x13198a2e, 0x03707344], key, 10);
    let words: Vec<u32> = (0..8).map(|_| g.next_u32()).collect();
    assert_eq!(words, [b0, b1].concat());

    // next_u64 = lo | hi << 32 of consecutive words.
    let mut g = PhiloxRng::from_seed(pi_seed());
    assert_eq!(g.next_u64(), u64::from(b0[0]) | u64::from(b0[1]) << 32);
    assert_eq!(g.next_u32(), b0[2]);
    // A u64 straddling a block boundary takes the last word of one block and the first of the next.
    assert_eq!(g.next_u64(), u64::from(b0[3]) | u64::from(b1[0]) << 32);

    // fill_bytes: little-endian words; a partial last word uses its low bytes.
    let mut g = PhiloxRng::from_seed(pi_seed());
    let mut bytes = [0u8; 7];
    g.fill_bytes(&mut bytes);
    assert_eq!(bytes[..4], b0[0].to_le_bytes());
    assert_eq!(bytes[4..], b0[1].to_le_bytes()[..3]);
    assert_eq!(
        g.next_u32(),
        b0[2],
        "the rest of a partly used word is discarded"
    );
}

#[test]
fn rand_core_generator_works_through_generic_code() {
    fn draw<R: Rng>(r: &mut R) -> (u32, u64) {
        (r.next_u32(), r.next_u64())
    }
    fn make<S: SeedableRng>(seed: S::Seed) -> S {
        S::from_seed(seed)
    }
    let mut a: PhiloxRng = make(pi_seed());
    let mut b = PhiloxRng::from_seed(pi_seed());
    assert_eq!(draw(&mut a), draw(&mut b));
    let mut c = PhiloxRng::seed_from_u64(1);
    let mut d = PhiloxRng::seed_from_u64(2);
    assert_ne!(draw(&mut c), draw(&mut d));
    // The first output of the all-zero seed is Random123's zero KAT.
    let mut z = PhiloxRng::from_seed([0; 16]);
    assert_eq!(z.next_u32(), 0x6627e8d5);
    assert_eq!(z.block_position(), 1);
}

#[test]
fn element_bits_follow_the_spec_layout() {
    // Recompute a few elements straight from the SPEC.md formula.
    let c = BitsCoord {
        seed: 0x0123_4567_89AB_CDEF,
        step: 9,
        stream_word: 5 << 4 | 2,
        replica_slot: 3,
        swap_pairs: false,
    };
    for e in [
        0u64,
        1,
        15,
        16,
        31,
        32,
        33,
        127,
        128,
        129,
        1000,
        (1 << 40) + 77,
        (1 << 51) - 1,
    ] {
        let i = e & 31;
        let w = i & 15;
        let block = (e >> 5) * 4 + (w >> 2);
        let ctr = [block as u32, (block >> 32) as u32 | 3 << 16, 9, 5 << 4 | 2];
        let out = ars4x32_r(ctr, [0x89AB_CDEF, 0x0123_4567, 0, 0], 5);
        let want = (out[(w & 3) as usize] >> (16 * (i >> 4))) as u16;
        assert_eq!(element_bits(&c, e), want, "element {e}");
    }
}

#[test]
fn bits_depend_only_on_the_global_index_not_on_chunking() {
    let ctx = StepContext::new(77, 3);
    let n = 1000;
    let mut whole = vec![0u16; n];
    fill_element_bits(&ctx, &TensorStream::new(4), Purpose::Weights, &mut whole).unwrap();
    // Any split into shards with the right index_base reproduces the whole.
    for cut in [1usize, 7, 128, 129, 500, 999] {
        let mut a = vec![0u16; cut];
        let mut b = vec![0u16; n - cut];
        let s = |base| TensorStream {
            id: 4,
            index_base: base,
        };
        fill_element_bits(&ctx, &s(0), Purpose::Weights, &mut a).unwrap();
        fill_element_bits(&ctx, &s(cut as u64), Purpose::Weights, &mut b).unwrap();
        assert_eq!([a, b].concat(), whole, "cut at {cut}");
    }
}

#[test]
fn the_second_moment_takes_the_first_moments_bits_of_each_partner() {
    // SPEC.md §3.2: element e of the second moment rounds with the bits the first moment gives
    // e ^ 1, so that an element's two moments take different output words and one ARS-5 call
    // serves both.
    let ctx = StepContext::new(0x5EED, 12).with_replica(Replica::Differing(4));
    let bits = |purpose: Purpose, base: u64, n: usize| {
        let mut out = vec![0u16; n];
        let s = TensorStream {
            id: 9,
            index_base: base,
        };
        fill_element_bits(&ctx, &s, purpose, &mut out).unwrap();
        out
    };
    let first = bits(Purpose::FirstMoment, 0, 4096);
    for (base, n) in [(0u64, 4096usize), (1, 7), (3, 1000), (31, 66), (2047, 3)] {
        let second = bits(Purpose::SecondMoment, base, n);
        for (i, r) in second.iter().enumerate() {
            let e = base + i as u64;
            assert_eq!(*r, first[(e ^ 1) as usize], "element {e}, from {base}");
        }
    }
    let second = bits(Purpose::SecondMoment, 0, 4096);
    let same = first.iter().zip(&second).filter(|(a, b)| a == b).count();
    assert!(
        same < 8,
        "{same}/4096 elements round both moments with the same bits"
    );
    // Both from the first moment's counters (purpose 1), the second with partners exchanged.
    let reference = |swap_pairs| {
        let c = BitsCoord {
            seed: 0x5EED,
            step: 12,
            stream_word: 9 << 4 | 1,
            replica_slot: 5,
            swap_pairs,
        };
        (0..64).map(|e| element_bits(&c, e)).collect::<Vec<_>>()
    };
    assert_eq!(reference(false), first[..64]);
    assert_eq!(reference(true), second[..64]);
}

#[test]
fn every_coordinate_changes_the_bits() {
    let base = StepContext::new(1, 1);
    let bits = |ctx: StepContext, id: u32, purpose: Purpose| {
        let mut out = vec![0u16; 256];
        fill_element_bits(&ctx, &TensorStream::new(id), purpose, &mut out).unwrap();
        out
    };
    let b0 = bits(base, 0, Purpose::Weights);
    let others = [
        bits(StepContext::new(2, 1), 0, Purpose::Weights),
        bits(StepContext::new(1 << 32, 1), 0, Purpose::Weights),
        bits(StepContext::new(1, 2), 0, Purpose::Weights),
        bits(base, 1, Purpose::Weights),
        bits(base, 0, Purpose::FirstMoment),
        bits(base, 0, Purpose::SecondMoment),
        bits(
            base.with_replica(Replica::Differing(0)),
            0,
            Purpose::Weights,
        ),
        bits(
            base.with_replica(Replica::Differing(1)),
            0,
            Purpose::Weights,
        ),
    ];
    for (i, o) in others.iter().enumerate() {
        // 256 16-bit values agreeing in more than a handful of places would mean a shared stream.
        let same = o.iter().zip(&b0).filter(|(a, b)| a == b).count();
        assert!(
            same < 8,
            "variant {i} shares {same}/256 values with the base stream"
        );
    }
    // Identical mode is the same as a run without replicas.
    assert_eq!(
        bits(base.with_replica(Replica::Identical), 0, Purpose::Weights),
        b0
    );
}

#[test]
fn element_bits_are_uniform_enough() {
    // A smoke test of the layout (ARS-5 itself is vetted by TestU01 upstream): each of the
    // 16 bit positions is set about half the time over 2^16 elements.
    let mut out = vec![0u16; 1 << 16];
    fill_element_bits(
        &StepContext::new(5, 1),
        &TensorStream::new(0),
        Purpose::Weights,
        &mut out,
    )
    .unwrap();
    for bit in 0..16 {
        let ones = out.iter().filter(|&&x| x >> bit & 1 == 1).count() as f64;
        // 6 sigma of a Binomial(65536, 1/2) is 768.
        assert!((ones - 32768.0).abs() < 768.0, "bit {bit}: {ones} ones");
    }
}
