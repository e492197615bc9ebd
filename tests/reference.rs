//! Unit checks of the scalar reference's building blocks (`halfstep::reference`).

mod round {
    use halfstep::reference::round::*;

    #[test]
    fn f16_subnormal_widening_is_exact_and_keeps_signed_zero() {
        // 2^-24 spelled as bits: Miri deliberately perturbs `powi`.
        let tiny = f32::from_bits(0x3380_0000);
        assert_eq!(f16_to_f32(0x0001), tiny);
        assert_eq!(f16_to_f32(0x83FF), -1023.0 * tiny);
        assert_eq!(f16_to_f32(0x8000).to_bits(), 0x8000_0000);
        assert_eq!(f16_to_f32(0x0000).to_bits(), 0);
    }

    #[test]
    fn round_magnitude_carries_into_next_binade() {
        // 1.999... in f16 RNE -> 2.0 (0x4000).
        let a = 0x3FFF_FFFF;
        assert_eq!(
            round_magnitude(a, F16_MAN, F16_EMIN, Mode::NearestEven),
            0x4000
        );
        // Largest f16 subnormal + a bit more than half a quantum -> smallest normal 0x0400.
        let x = (1023.0f64 + 0.75) * f64::from_bits(0x3E70_0000_0000_0000); // 2^-24
        let a = (x as f32).to_bits();
        assert_eq!(
            round_magnitude(a, F16_MAN, F16_EMIN, Mode::NearestEven),
            0x0400
        );
    }
}

mod quant {
    use halfstep::reference::quant::*;

    #[test]
    fn e2m1_decodes_its_eight_magnitudes() {
        let v: Vec<f32> = (0..8).map(|c| to_f32(E2M1, c)).collect();
        assert_eq!(v, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(to_f32(E2M1, 0xF), -6.0);
    }

    #[test]
    fn fp8_extremes() {
        assert_eq!(to_f32(E4M3, 0x7E), 448.0);
        assert_eq!(to_f32(E4M3, 0x01), pow2(-9));
        assert!(to_f32(E4M3, 0xFF).is_nan());
        assert_eq!(to_f32(E5M2, 0x7B), 57344.0);
        assert_eq!(to_f32(E5M2, 0x7C), f32::INFINITY);
        assert!(to_f32(E5M2, 0x7D).is_nan());
        assert_eq!(to_f32(E5M2, 0x01), pow2(-16));
    }
}

mod philox {
    use halfstep::reference::philox::*;

    #[test]
    fn mul_hi_lo_is_the_full_product() {
        assert_eq!(
            mul_hi_lo(0xFFFF_FFFF, 0xFFFF_FFFF),
            (0xFFFF_FFFE, 0x0000_0001)
        );
        assert_eq!(mul_hi_lo(M0, 2), (1, 0xA4A2_3EA6));
    }
}

mod norm {
    use halfstep::reference::norm::*;

    #[test]
    fn blocks_and_lanes_follow_the_global_index() {
        // Element 2047 closes block 0 alone when the slice starts there: its square is block 0's
        // sum, and the rest start block 1 in lanes 0, 1, ...
        let xs = [3.0f32, 1.0, 2.0];
        assert_eq!(sum_squares(&xs, 2047), 14.0);
    }

    #[test]
    fn lane_fold_is_the_documented_tree() {
        let lanes: [f64; 16] = core::array::from_fn(|i| (i + 1) as f64);
        assert_eq!(fold_lanes(lanes), 136.0);
        // 2^53 + 1 + 1: the tree adds lanes 0 and 8 first, then 4 and 12 ... so the two ones meet.
        let mut lanes = [0.0f64; 16];
        lanes[0] = 9007199254740992.0;
        lanes[1] = 1.0;
        lanes[9] = 1.0;
        assert_eq!(fold_lanes(lanes), 9007199254740994.0);
    }
}

mod powers {
    use halfstep::optim::powi_f64;
    use halfstep::reference::powi;

    #[test]
    fn powi_is_the_spec_loop_bit_for_bit() {
        // Betas as f32 hyperparameters give them, 0 and the largest below 1 among them.
        let bases = [
            0.0f32,
            0.5,
            0.9,
            0.95,
            0.99,
            0.999,
            0.9999,
            f32::from_bits(0x3F7F_FFFF),
        ];
        let last = if cfg!(miri) { 1 << 9 } else { 1 << 16 };
        let steps = (0..=last).chain((0..32).flat_map(|k| {
            let p = 1u32 << k;
            [p - 1, p, p | 1, p.wrapping_mul(3) / 2, u32::MAX >> k]
        }));
        for t in steps {
            for base in bases {
                let base = f64::from(base);
                assert_eq!(
                    powi_f64(base, t).to_bits(),
                    powi(base, t).to_bits(),
                    "{base}^{t}"
                );
            }
        }
    }
}
