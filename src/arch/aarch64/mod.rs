//! aarch64 lane primitives.

pub(crate) mod neon;
