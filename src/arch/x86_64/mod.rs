//! x86_64 lane primitives.

pub(crate) mod avx2;
pub(crate) mod avx512;
