//! The library's private invariants, through `halfstep::fuzzing::internals`.

use halfstep::fuzzing::internals;

#[test]
fn random_bit_fill_matches_the_reference_on_every_backend() {
    internals::random_bit_fill();
}

#[test]
fn even_odd_forms_match_their_definition_on_every_backend() {
    internals::even_odd_forms();
}

#[test]
#[cfg_attr(miri, ignore = "2^31 square roots: too slow under Miri")]
fn square_roots_off_the_divider_match_the_divider_on_every_backend() {
    internals::square_roots();
}

#[test]
#[cfg_attr(miri, ignore = "CPUID is not supported under Miri")]
fn prefetch_setting_reads_on_off_auto_and_follows_the_cpu() {
    internals::prefetch_setting();
}

#[test]
#[cfg_attr(miri, ignore = "CPUID is not supported under Miri")]
fn roots_and_bits_settings_read_their_words_and_follow_the_cpu() {
    internals::intel_choices();
}

#[test]
fn block_counts() {
    internals::block_counts();
}

#[test]
fn team_hand_out() {
    internals::team_hand_out();
}

#[test]
fn team_pieces() {
    internals::team_pieces();
}

#[test]
fn openmp_hand_out() {
    internals::openmp_hand_out();
}

#[test]
fn grain_is_rounded_to_the_split_alignment() {
    use halfstep::{DEFAULT_GRAIN, SPLIT_ALIGN, Threads};
    assert_eq!(Threads::current().with_grain(1).grain(), SPLIT_ALIGN);
    assert_eq!(
        Threads::global().with_grain(SPLIT_ALIGN + 1).grain(),
        2 * SPLIT_ALIGN
    );
    assert_eq!(Threads::global().grain(), DEFAULT_GRAIN);
    // The largest grains saturate instead of wrapping to 0 (which would split everything).
    assert_eq!(Threads::global().with_grain(usize::MAX).grain(), usize::MAX);
    assert!(
        Threads::global()
            .with_grain(usize::MAX - SPLIT_ALIGN)
            .grain()
            >= usize::MAX - SPLIT_ALIGN
    );
}
