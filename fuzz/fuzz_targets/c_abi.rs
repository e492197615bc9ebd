//! The C ABI's optimizer steps with hostile descriptors, on every backend against the reference:
//! no panic, nothing written on a refusal, the same status and bits (see halfstep::fuzzing).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(mismatch) = halfstep::fuzzing::check(halfstep::fuzzing::Target::CAbi, data) {
        panic!("{mismatch}");
    }
});
