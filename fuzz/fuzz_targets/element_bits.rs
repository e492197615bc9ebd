//! Differential fuzz target: every available backend against the reference (see halfstep::fuzzing).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(mismatch) = halfstep::fuzzing::check(halfstep::fuzzing::Target::ElementBits, data) {
        panic!("{mismatch}");
    }
});
