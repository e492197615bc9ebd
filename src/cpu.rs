//! The CPU this process runs on: which backends it can run ([`Backend`]) and whether the x86
//! backends issue software prefetches ([`software_prefetch`]). Below everything that computes, so
//! that kernels and errors can name a backend without reaching up to the dispatch table.

use std::sync::OnceLock;

/// An implementation of every kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The scalar reference (`src/reference/`): the specification, always available.
    Reference,
    /// 8 lanes in plain arrays, for any target.
    Portable,
    /// AVX2 + FMA + F16C + AES-NI (x86_64).
    Avx2,
    /// AVX-512 F/BW/VL/DQ + VAES (x86_64: Ice Lake, Zen 4 and later; the earlier AVX-512 CPUs
    /// run [`Backend::Avx2`]).
    Avx512,
    /// NEON + the AES instructions of the crypto extension (aarch64).
    Neon,
}

/// Every backend, fastest first.
pub const ALL_BACKENDS: [Backend; 5] = [
    Backend::Avx512,
    Backend::Avx2,
    Backend::Neon,
    Backend::Portable,
    Backend::Reference,
];

impl Backend {
    /// The name `HALFSTEP_BACKEND` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Reference => "reference",
            Backend::Portable => "portable",
            Backend::Avx2 => "avx2",
            Backend::Avx512 => "avx512",
            Backend::Neon => "neon",
        }
    }

    /// Whether this CPU (and build target) can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Reference | Backend::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => {
                std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("fma")
                    && std::is_x86_feature_detected!("f16c")
                    && std::is_x86_feature_detected!("aes")
            }
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512 => {
                std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512dq")
                    && std::is_x86_feature_detected!("vaes")
                    && std::is_x86_feature_detected!("aes")
            }
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => {
                std::arch::is_aarch64_feature_detected!("neon")
                    && std::arch::is_aarch64_feature_detected!("aes")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The backends this machine can run, fastest first.
    pub fn available() -> Vec<Backend> {
        ALL_BACKENDS
            .into_iter()
            .filter(|b| b.is_available())
            .collect()
    }

    /// The fastest available backend.
    pub fn detect() -> Backend {
        ALL_BACKENDS
            .into_iter()
            .find(|b| b.is_available())
            .unwrap_or(Backend::Reference)
    }
}

impl core::fmt::Display for Backend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The environment variable that overrides [`software_prefetch`]: `on`, `off` or `auto`.
pub const PREFETCH_ENV: &str = "HALFSTEP_PREFETCH";

/// Whether the x86 backends issue software prefetches on long runs (optimizer steps, stochastic
/// conversions; a hint that never changes a bit). `auto` (the default) turns them on for Intel
/// CPUs only, where they pay; on AMD they cost time (docs/DESIGN.md, "Software prefetching").
/// Decided once per process; a value other than `on`, `off` or `auto` is reported on stderr once
/// and read as `auto`.
pub fn software_prefetch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let value = std::env::var(PREFETCH_ENV).ok();
        prefetch_setting(value.as_deref()).unwrap_or_else(|other| {
            eprintln!("halfstep: {PREFETCH_ENV}={other:?} is not on, off or auto; using auto");
            prefetch_pays()
        })
    })
}

/// A `HALFSTEP_PREFETCH` value read: `on`/`1` and `off`/`0` force it, unset, empty or `auto`
/// take [`prefetch_pays`]; anything else is returned as the error.
fn prefetch_setting(value: Option<&str>) -> core::result::Result<bool, String> {
    match value.map(str::trim) {
        Some("on") | Some("1") => Ok(true),
        Some("off") | Some("0") => Ok(false),
        None | Some("") | Some("auto") => Ok(prefetch_pays()),
        Some(other) => Err(other.to_string()),
    }
}

/// `auto`'s choice: software prefetching on Intel CPUs, off elsewhere.
#[allow(unsafe_code)]
fn prefetch_pays() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID leaf 0: the vendor string in EBX, EDX, ECX.
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is available on every x86_64 CPU.
        let r = unsafe { core::arch::x86_64::__cpuid(0) };
        (r.ebx, r.edx, r.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e) // "Genu" "ineI" "ntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Checks of the private prefetch setting, run by `tests/internals.rs`.
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;

    pub(crate) fn prefetch_setting_reads_on_off_auto() {
        assert_eq!(prefetch_setting(Some("on")), Ok(true));
        assert_eq!(prefetch_setting(Some(" 1 ")), Ok(true));
        assert_eq!(prefetch_setting(Some("off")), Ok(false));
        assert_eq!(prefetch_setting(Some("0")), Ok(false));
        for auto in [None, Some(""), Some("auto")] {
            assert_eq!(prefetch_setting(auto), Ok(prefetch_pays()));
        }
        assert_eq!(prefetch_setting(Some("yes")), Err("yes".to_string()));
    }

    /// `auto` is on exactly for Intel CPUs: checked against the kernel's own reading of the vendor.
    pub(crate) fn prefetch_pays_on_intel_only() {
        if cfg!(not(all(target_arch = "x86_64", target_os = "linux"))) {
            return;
        }
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            eprintln!("skipped: /proc/cpuinfo is not readable");
            return;
        };
        let vendor = info
            .lines()
            .find_map(|l| l.strip_prefix("vendor_id"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string());
        match vendor {
            Some(v) => assert_eq!(prefetch_pays(), v == "GenuineIntel", "vendor {v}"),
            None => eprintln!("skipped: no vendor_id in /proc/cpuinfo"),
        }
    }
}
