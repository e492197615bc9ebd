//! An optimizer's checkpoint (seed and step count) as 16 bytes.

use super::*;

/// Bytes of a checkpoint blob (SPEC.md §3.3).
pub const HS_CHECKPOINT_BYTES: usize = 16;

/// Writes the `HS_CHECKPOINT_BYTES`-byte checkpoint of a run with `seed` that has taken
/// `steps_taken` steps (its next step is `steps_taken + 1`) to `out`, in the current version.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_checkpoint_encode(
    seed: u64,
    steps_taken: u32,
    out: *mut u8,
) -> hs_status {
    guard(|| {
        check_ptr(out, HS_CHECKPOINT_BYTES, "out")?;
        let blob = crate::Checkpoint { seed, steps_taken }.to_bytes();
        unsafe { slice_mut(out, HS_CHECKPOINT_BYTES) }.copy_from_slice(&blob);
        Ok(())
    })
}

/// Reads a checkpoint blob of `len` bytes (any version this library reads) into `*seed` and
/// `*steps_taken`; `HS_INVALID_ARGUMENT` for a blob of the wrong length or an unknown version.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_checkpoint_decode(
    blob: *const u8,
    len: usize,
    seed: *mut u64,
    steps_taken: *mut u32,
) -> hs_status {
    guard(|| {
        check_ptr(blob, len, "blob")?;
        check_ptr(seed, 1, "seed")?;
        check_ptr(steps_taken, 1, "steps_taken")?;
        let seed = unsafe { required_mut(seed, "seed")? };
        let steps_taken = unsafe { required_mut(steps_taken, "steps_taken")? };
        let c = crate::Checkpoint::from_bytes(unsafe { slice(blob, len) })?;
        (*seed, *steps_taken) = (c.seed, c.steps_taken);
        Ok(())
    })
}
