//! The step context (seed, step, replica) that every call drawing random bits takes.

use super::*;

/// `hs_step_context.replica` for bits shared by every replica.
pub const HS_REPLICA_IDENTICAL: u32 = u32::MAX;

/// Seed, step (>= 1 for optimizer steps) and replica (`HS_REPLICA_IDENTICAL` or 0..=65534).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hs_step_context {
    /// The run's seed.
    pub seed: u64,
    /// The step number.
    pub step: u32,
    /// Replica index, or `HS_REPLICA_IDENTICAL`.
    pub replica: u32,
}

pub(super) fn context(c: *const hs_step_context) -> Result<StepContext, Fail> {
    let c = unsafe { required_ref(c, "context")? };
    let replica = match c.replica {
        HS_REPLICA_IDENTICAL => Replica::Identical,
        r => Replica::Differing(
            u16::try_from(r)
                .map_err(|_| Fail(HS_OUT_OF_RANGE, format!("replica {r} exceeds 65534")))?,
        ),
    };
    Ok(StepContext {
        seed: c.seed,
        step: c.step,
        replica,
    })
}
