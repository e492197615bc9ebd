//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the same differential
//! checks the cargo-fuzz targets run, on stable, plus a few thousand pseudo-random inputs per
//! target so the checks themselves are exercised even where the corpus is thin.

use halfstep::fuzzing::{TARGETS, check};
use rand_core::{Rng, SeedableRng};
use std::path::Path;

#[test]
fn committed_corpus_replays_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut replayed = 0;
    for &target in TARGETS {
        let dir = root.join(target.name());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            panic!("no corpus directory {}", dir.display());
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if let Err(m) = check(target, &data) {
                panic!("{} ({}): {m}", target.name(), path.display());
            }
            replayed += 1;
        }
    }
    println!("fuzz_corpus: replayed {replayed} inputs");
    assert!(replayed >= TARGETS.len(), "every target needs a corpus");
}

#[test]
fn pseudo_random_inputs_agree() {
    let mut r = halfstep::PhiloxRng::seed_from_u64(0xF022);
    for &target in TARGETS {
        for i in 0..300 {
            let mut data = vec![0u8; 64 + (i * 37) % 3000];
            r.fill_bytes(&mut data);
            if let Err(m) = check(target, &data) {
                panic!("{} (random input {i}): {m}", target.name());
            }
        }
    }
}
