//! Status codes, the per-thread last error, and the panic boundary every entry point runs in
//! ([`boundary`]): a panic becomes `HS_PANIC`, an `Error` its status and message.

use super::*;

/// What a call returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum hs_status {
    /// Success.
    HS_OK = 0,
    /// A required pointer was NULL.
    HS_NULL_POINTER = 1,
    /// A pointer is not aligned for its element type (4 bytes for f32, 2 for 16-bit).
    HS_MISALIGNED = 2,
    /// Buffer lengths disagree, or a buffer has no elements (SPEC.md §8).
    HS_LENGTH_MISMATCH = 3,
    /// A hyperparameter is outside its domain.
    HS_INVALID_HYPERPARAMETER = 4,
    /// Step 0 or overflow, stream id, element index or replica out of range; a length above
    /// `HS_MAX_LEN` or a thread count above `HS_MAX_THREADS`.
    HS_OUT_OF_RANGE = 5,
    /// An optional state buffer is missing or given when the configuration says otherwise.
    HS_STATE_MISMATCH = 6,
    /// An unknown storage kind, rounding, format, purpose or backend name; buffers that overlap;
    /// a checkpoint blob of the wrong length or version.
    HS_INVALID_ARGUMENT = 7,
    /// The backend is not available on this CPU.
    HS_BACKEND_UNAVAILABLE = 8,
    /// A bug: halfstep panicked; the call's buffers may be partly written.
    HS_PANIC = 9,
}

thread_local! {
    /// The last failure's message on this thread; `None` after a success (clearing it does not
    /// allocate, so a successful step allocates nothing).
    pub(super) static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

pub(super) fn set_error(msg: Option<String>) {
    let c = msg.map(|m| CString::new(m.replace('\0', " ")).unwrap_or_default());
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// A failed check: the status and its message.
pub(super) struct Fail(pub(super) hs_status, pub(super) String);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let status = match e {
            Error::LengthMismatch { .. } | Error::Empty => HS_LENGTH_MISMATCH,
            Error::InvalidHyperparameter { .. } => HS_INVALID_HYPERPARAMETER,
            Error::StepZero
            | Error::StepOverflow
            | Error::StreamOutOfRange { .. }
            | Error::IndexOutOfRange { .. }
            | Error::ReplicaOutOfRange { .. } => HS_OUT_OF_RANGE,
            Error::StateMismatch { .. } => HS_STATE_MISMATCH,
            Error::BackendUnavailable { .. } => HS_BACKEND_UNAVAILABLE,
            _ => HS_INVALID_ARGUMENT,
        };
        Fail(status, e.to_string())
    }
}

/// The panic boundary every entry point runs behind: calls `f`, records its failure message for
/// `hs_last_error` (or clears it), and returns its value, or `on_error(status)` on a failure or a
/// panic (`HS_PANIC`).
pub(super) fn boundary<T>(
    f: impl FnOnce() -> Result<T, Fail>,
    on_error: impl FnOnce(hs_status) -> T,
) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => {
            set_error(None);
            v
        }
        Ok(Err(Fail(status, msg))) => {
            set_error(Some(msg));
            on_error(status)
        }
        Err(_) => {
            set_error(Some("halfstep panicked (a bug: please report it)".into()));
            on_error(HS_PANIC)
        }
    }
}

/// [`boundary`] for the entry points that return a status.
pub(super) fn guard(f: impl FnOnce() -> Result<(), Fail>) -> hs_status {
    boundary(|| f().map(|()| HS_OK), |status| status)
}

/// [`boundary`] for the constructors: a new heap object, or NULL.
pub(super) fn guard_new<T>(f: impl FnOnce() -> Result<T, Fail>) -> *mut T {
    boundary(
        || f().map(|v| Box::into_raw(Box::new(v))),
        |_| std::ptr::null_mut(),
    )
}

pub(super) fn null(what: &str) -> Fail {
    Fail(HS_NULL_POINTER, format!("{what} is NULL"))
}

/// `&*p`, or `HS_NULL_POINTER` naming `what`.
pub(super) unsafe fn required_ref<'a, T>(p: *const T, what: &str) -> Result<&'a T, Fail> {
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// `&mut *p`, or `HS_NULL_POINTER` naming `what`.
pub(super) unsafe fn required_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Fail> {
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

pub(super) fn invalid(msg: impl Into<String>) -> Fail {
    Fail(HS_INVALID_ARGUMENT, msg.into())
}

/// Why the last call on this thread failed (empty after a success). Valid until the next call.
#[unsafe(no_mangle)]
pub extern "C" fn hs_last_error() -> *const c_char {
    LAST_ERROR.with(|e| match &*e.borrow() {
        Some(m) => m.as_ptr(),
        None => c"".as_ptr(),
    })
}
