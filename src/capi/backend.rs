//! The library's version, the backend in use, and forcing one.

use super::*;

/// Forced backend: 0 = none (HALFSTEP_BACKEND or detection), else 1 + index in ALL_BACKENDS.
pub(super) static FORCED: AtomicU8 = AtomicU8::new(0);

pub(super) fn engine() -> Result<Engine, Fail> {
    match FORCED.load(Ordering::Relaxed) {
        0 => Ok(Engine::global()?),
        i => Ok(Engine::new(crate::ALL_BACKENDS[usize::from(i - 1)])?),
    }
}

/// The library version, e.g. "0.1.0".
#[unsafe(no_mangle)]
pub extern "C" fn hs_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The name of the backend calls run on ("avx512", "avx2", "neon", "portable", "reference"), or
/// NULL if the one `HALFSTEP_BACKEND` names is not usable (see `hs_last_error`).
#[unsafe(no_mangle)]
pub extern "C" fn hs_backend() -> *const c_char {
    boundary(
        || {
            // Backend names are static; the NUL comes from a static table.
            Ok(match engine()?.backend().name() {
                "avx512" => c"avx512".as_ptr(),
                "avx2" => c"avx2".as_ptr(),
                "neon" => c"neon".as_ptr(),
                "portable" => c"portable".as_ptr(),
                _ => c"reference".as_ptr(),
            })
        },
        |_| std::ptr::null(),
    )
}

/// 1 if backend `name` can run on this CPU, 0 if not or unknown.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_backend_available(name: *const c_char) -> i32 {
    boundary(
        || {
            if name.is_null() {
                return Ok(0);
            }
            let name = unsafe { CStr::from_ptr(name) };
            let ok = name
                .to_str()
                .ok()
                .and_then(|n| Backend::from_name(n).ok())
                .is_some_and(Backend::is_available);
            Ok(i32::from(ok))
        },
        |_| 0,
    )
}

/// Runs every later call of this process on backend `name` ("auto" restores the default:
/// `HALFSTEP_BACKEND`, else detection). An unknown or unavailable name changes nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hs_force_backend(name: *const c_char) -> hs_status {
    guard(|| {
        if name.is_null() {
            return Err(null("name"));
        }
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| invalid("backend name is not UTF-8"))?;
        if name == "auto" {
            FORCED.store(0, Ordering::Relaxed);
            return Ok(());
        }
        let b = Backend::from_name(name)?;
        Engine::new(b)?;
        let i = crate::ALL_BACKENDS
            .iter()
            .position(|&x| x == b)
            .unwrap_or(0);
        FORCED.store(i as u8 + 1, Ordering::Relaxed);
        Ok(())
    })
}
