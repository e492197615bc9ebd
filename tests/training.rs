//! The demo's claim as a test: on the demo's problem, bf16 nearest-even stalls while stochastic
//! rounding and Split-SGD track f32.

#[path = "../examples/demo.rs"]
#[allow(dead_code)]
mod demo;
use demo::{Problem, Storage, train};

#[test]
fn nearest_even_stalls_where_stochastic_rounding_and_split_track_f32() {
    let p = Problem::new();
    let steps = 1000;
    let f32_run = train(&p, Storage::F32, steps);
    let nearest = train(&p, Storage::Bf16Nearest, steps);
    let sr = train(&p, Storage::Bf16Stochastic, steps);
    let split = train(&p, Storage::Split, steps);
    let last = steps as usize;
    // Everyone starts at the same loss and f32 converges.
    assert!(
        f32_run[0] > 1.0 && f32_run[last] < 1e-6,
        "f32: {} -> {}",
        f32_run[0],
        f32_run[last]
    );
    // Nearest-even stops improving: the last 700 steps change nothing.
    assert_eq!(
        nearest[300], nearest[last],
        "nearest-even should have stalled"
    );
    assert!(
        nearest[last] > 0.1,
        "nearest-even stalled at {}",
        nearest[last]
    );
    // SR and split get within a few orders of magnitude of f32's progress, far below the stall.
    assert!(sr[last] < 1e-3, "SR at {}", sr[last]);
    assert!(split[last] < 1e-6, "split at {}", split[last]);
    assert!(nearest[last] > 100.0 * sr[last]);
}
