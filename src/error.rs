//! The one error type of the safe API. Every check runs before any buffer is written, so an
//! `Err` always means "nothing was touched".

use core::fmt;

/// Why a call was refused.
///
/// Equality compares the offending hyperparameter value by bits, so an error with a NaN value
/// equals itself.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// A LAMB workspace too small for the group (see `LambWorkspace::for_tensors`).
    WorkspaceTooSmall {
        /// Norm blocks the group needs.
        blocks: usize,
        /// Tensors in the group.
        tensors: usize,
    },
    /// A buffer's length differs from the weights' (or source's) length.
    LengthMismatch {
        /// Which buffer.
        buffer: &'static str,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        found: usize,
    },
    /// A step over zero elements (almost always a caller bug, so it is refused rather than ignored).
    Empty,
    /// A hyperparameter is out of its domain.
    InvalidHyperparameter {
        /// Its name, as in PyTorch.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The domain it must lie in.
        expected: &'static str,
    },
    /// Step 0 was requested: steps count from 1 (bias corrections divide by `1 - beta^step`).
    StepZero,
    /// The step counter would pass `u32::MAX` (the RNG counter word that holds it).
    StepOverflow,
    /// A state buffer the configuration needs is missing, or one it does not use was given.
    StateMismatch {
        /// Which buffer.
        buffer: &'static str,
        /// Whether the configuration needs it.
        required: bool,
    },
    /// A tensor stream id does not fit its 28 bits.
    StreamOutOfRange {
        /// The id given.
        stream: u32,
    },
    /// `index_base + len` reaches past the 2^51 element indices the RNG layout has.
    IndexOutOfRange {
        /// The first global element index.
        index_base: u64,
        /// The number of elements.
        len: usize,
    },
    /// A differing-mode replica index above 65534 (the slot is `replica + 1` in 16 bits).
    ReplicaOutOfRange {
        /// The index given.
        replica: u16,
    },
    /// A checkpoint blob of the wrong length or version.
    BadCheckpoint,
    /// A backend name (from `HALFSTEP_BACKEND` or [`crate::Backend::from_name`]) that does not exist.
    UnknownBackend {
        /// The name given.
        name: String,
    },
    /// A backend this CPU or build target cannot run was requested.
    BackendUnavailable {
        /// The backend.
        backend: crate::cpu::Backend,
    },
    /// The team of `Threads::calling_thread_pool` could not start its threads.
    CallingThreadPool {
        /// The thread count asked for.
        threads: usize,
        /// Why not.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::LengthMismatch {
                buffer,
                expected,
                found,
            } => write!(f, "{buffer} has {found} elements, expected {expected}"),
            Error::Empty => f.write_str("empty tensor: nothing to step"),
            Error::InvalidHyperparameter {
                name,
                value,
                expected,
            } => write!(f, "invalid {name} = {value}: must be {expected}"),
            Error::StepZero => f.write_str("step must be at least 1"),
            Error::StepOverflow => f.write_str("step counter would exceed u32::MAX"),
            Error::StateMismatch {
                buffer,
                required: true,
            } => write!(
                f,
                "{buffer} is required by this configuration but was not given"
            ),
            Error::StateMismatch {
                buffer,
                required: false,
            } => write!(
                f,
                "{buffer} was given but this configuration does not use it"
            ),
            Error::StreamOutOfRange { stream } => {
                write!(f, "stream id {stream} does not fit in 28 bits")
            }
            Error::IndexOutOfRange { index_base, len } => write!(
                f,
                "element indices {index_base}..{index_base}+{len} exceed the RNG's 2^51 range"
            ),
            Error::ReplicaOutOfRange { replica } => {
                write!(f, "replica index {replica} exceeds 65534")
            }
            Error::BadCheckpoint => f.write_str("checkpoint blob has the wrong length or version"),
            Error::UnknownBackend { name } => write!(
                f,
                "unknown backend {name:?} (expected one of reference, portable, avx2, avx512, neon, auto)"
            ),
            Error::WorkspaceTooSmall { blocks, tensors } => write!(
                f,
                "LAMB workspace too small: the group needs {blocks} norm blocks and {tensors} tensors (LambWorkspace::for_tensors)"
            ),
            Error::BackendUnavailable { backend } => {
                write!(
                    f,
                    "backend {backend} is not available on this CPU or target"
                )
            }
            Error::CallingThreadPool { threads, reason } => write!(
                f,
                "no pool of {threads} threads with the calling thread in it: {reason}"
            ),
        }
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        match (self, other) {
            (
                Error::InvalidHyperparameter {
                    name,
                    value,
                    expected,
                },
                Error::InvalidHyperparameter {
                    name: n,
                    value: v,
                    expected: x,
                },
            ) => name == n && value.to_bits() == v.to_bits() && expected == x,
            (Error::InvalidHyperparameter { .. }, _) | (_, Error::InvalidHyperparameter { .. }) => {
                false
            }
            // Every other variant holds only integers, strings and enums: a derived comparison.
            (a, b) => Comparable::from(a) == Comparable::from(b),
        }
    }
}

impl Eq for Error {}

/// `Error` without the float field, for a derived comparison of the other variants.
#[derive(PartialEq)]
enum Comparable<'a> {
    LengthMismatch(&'static str, usize, usize),
    Empty,
    StepZero,
    StepOverflow,
    StateMismatch(&'static str, bool),
    StreamOutOfRange(u32),
    IndexOutOfRange(u64, usize),
    ReplicaOutOfRange(u16),
    BadCheckpoint,
    UnknownBackend(&'a str),
    BackendUnavailable(crate::cpu::Backend),
    WorkspaceTooSmall(usize, usize),
    CallingThreadPool(usize, &'a str),
    Hyper,
}

impl<'a> From<&'a Error> for Comparable<'a> {
    fn from(e: &'a Error) -> Comparable<'a> {
        match e {
            Error::LengthMismatch {
                buffer,
                expected,
                found,
            } => Comparable::LengthMismatch(buffer, *expected, *found),
            Error::Empty => Comparable::Empty,
            Error::StepZero => Comparable::StepZero,
            Error::StepOverflow => Comparable::StepOverflow,
            Error::StateMismatch { buffer, required } => {
                Comparable::StateMismatch(buffer, *required)
            }
            Error::StreamOutOfRange { stream } => Comparable::StreamOutOfRange(*stream),
            Error::IndexOutOfRange { index_base, len } => {
                Comparable::IndexOutOfRange(*index_base, *len)
            }
            Error::ReplicaOutOfRange { replica } => Comparable::ReplicaOutOfRange(*replica),
            Error::BadCheckpoint => Comparable::BadCheckpoint,
            Error::UnknownBackend { name } => Comparable::UnknownBackend(name),
            Error::BackendUnavailable { backend } => Comparable::BackendUnavailable(*backend),
            Error::WorkspaceTooSmall { blocks, tensors } => {
                Comparable::WorkspaceTooSmall(*blocks, *tensors)
            }
            Error::CallingThreadPool { threads, reason } => {
                Comparable::CallingThreadPool(*threads, reason)
            }
            Error::InvalidHyperparameter { .. } => Comparable::Hyper,
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand for this crate's results.
pub type Result<T> = core::result::Result<T, Error>;

/// Refuses `value` for the hyperparameter `name` unless `ok` (`Error::InvalidHyperparameter`).
pub(crate) fn require(
    ok: bool,
    name: &'static str,
    value: f32,
    expected: &'static str,
) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidHyperparameter {
            name,
            value: f64::from(value),
            expected,
        })
    }
}
