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

/// Where the x86 backends issue software prefetches (a hint that never changes a bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prefetch {
    /// Nowhere.
    Off,
    /// On the optimizer steps' pieces of [`LARGE_PIECE`] elements or more only: the Zen 3 CPUs,
    /// where prefetching pays out of the L3 and costs inside it.
    LargePieces,
    /// On the pieces of the large optimizer steps, by the whole step's length (a group's, across
    /// tensors and threads) and its buffers ([`StepBuffers`]): a step with a buffer other than
    /// f32 from [`LARGE_PIECE`] elements; an all-f32 step from [`LARGE_F32_STEP`], and one with
    /// two states on its pieces of [`LARGE_PIECE`] too. Zen 5 EPYC CPUs: there a step with a
    /// narrow buffer whose buffers outgrow the L3 gains however it is cut, the all-f32 steps
    /// with two states gain on large pieces but not on two threads' small ones, and the plain
    /// f32 steps lose at 2M–4M elements and are level at 16M.
    LargeSteps,
    /// On the optimizer steps' and the conversions' long runs: Intel CPUs, or
    /// `HALFSTEP_PREFETCH=on`.
    LongRuns,
}

/// [`Prefetch::LargePieces`]' threshold, in elements: from 2M elements (16–28 bytes each in a step)
/// a step's buffers outgrow a Zen 3 CPU's 32 MiB L3 (and a Zen 5 CPU's).
pub(crate) const LARGE_PIECE: usize = 2 << 20;

/// [`Prefetch::LargeSteps`]' threshold for the all-f32 steps, in elements: on Zen 5 the plain
/// ones lose at 2M–4M, are level at 16M and gain from 64M.
pub(crate) const LARGE_F32_STEP: usize = 32 << 20;

/// An optimizer step's buffers, as far as [`Prefetch::LargeSteps`] tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StepBuffers {
    /// A buffer other than f32: split or bf16 weights, bf16 gradients or states.
    Narrow,
    /// Every buffer f32, with two states or more: Adam, AdamW, LAMB's first pass.
    F32TwoStates,
    /// Every buffer f32, with one state at most: SGD, Adagrad, LAMB's second pass where it
    /// reads the update its first pass kept.
    PlainF32,
}

impl Prefetch {
    /// Whether an optimizer step's piece of `n` elements, long enough for the kernels to
    /// prefetch at all, prefetches under this setting, in a step of `step_len` elements in all
    /// (at least `n`) with the buffers `buffers`.
    pub(crate) fn step_piece(self, n: usize, step_len: usize, buffers: StepBuffers) -> bool {
        match self {
            Prefetch::LongRuns => true,
            Prefetch::LargePieces => n >= LARGE_PIECE,
            Prefetch::LargeSteps => match buffers {
                StepBuffers::Narrow => step_len >= LARGE_PIECE,
                StepBuffers::F32TwoStates => n >= LARGE_PIECE || step_len >= LARGE_F32_STEP,
                StepBuffers::PlainF32 => step_len >= LARGE_F32_STEP,
            },
            Prefetch::Off => false,
        }
    }
}

/// Whether the x86 backends issue software prefetches at all (optimizer steps, stochastic
/// conversions; a hint that never changes a bit). `auto` (the default) turns them on where they
/// were measured to pay: on Intel CPUs for long runs, on AMD's Zen 3 for the optimizer steps' pieces
/// of 2M elements and more, on Zen 5 EPYC CPUs for the pieces of the steps of 2M elements and more
/// (32M for the all-f32 steps, or pieces of 2M for Adam's and LAMB's); on the other AMD CPUs
/// measured they cost time (docs/DESIGN.md, "SIMD backends"). Decided once per process; a value
/// other than `on`, `off` or `auto` is reported on stderr once and read as `auto`.
pub fn software_prefetch() -> bool {
    prefetch() != Prefetch::Off
}

/// The prefetch setting of this process ([`software_prefetch`]).
pub(crate) fn prefetch() -> Prefetch {
    static SETTING: OnceLock<Prefetch> = OnceLock::new();
    *SETTING.get_or_init(|| {
        let value = std::env::var(PREFETCH_ENV).ok();
        prefetch_setting(value.as_deref()).unwrap_or_else(|other| {
            eprintln!("halfstep: {PREFETCH_ENV}={other:?} is not on, off or auto; using auto");
            prefetch_auto()
        })
    })
}

/// A `HALFSTEP_PREFETCH` value read: `on`/`1` and `off`/`0` force it, unset, empty or `auto`
/// take [`prefetch_auto`]; anything else is returned as the error.
fn prefetch_setting(value: Option<&str>) -> core::result::Result<Prefetch, String> {
    match value.map(str::trim) {
        Some("on") | Some("1") => Ok(Prefetch::LongRuns),
        Some("off") | Some("0") => Ok(Prefetch::Off),
        None | Some("") | Some("auto") => Ok(prefetch_auto()),
        Some(other) => Err(other.to_string()),
    }
}

/// `auto`'s choice, from the CPU's vendor, family and model (CPUID leaves 0 and 1).
#[allow(unsafe_code)]
fn prefetch_auto() -> Prefetch {
    #[cfg(target_arch = "x86_64")]
    {
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is available on every x86_64 CPU.
        let (r0, r1) = unsafe {
            (
                core::arch::x86_64::__cpuid(0),
                core::arch::x86_64::__cpuid(1),
            )
        };
        // The family and model as Linux's /proc/cpuinfo shows them: the extended family counts
        // where the base family is 15, the extended model on the families that have one (6, 15).
        let base = (r1.eax >> 8) & 0xf;
        let family = if base == 0xf {
            base + ((r1.eax >> 20) & 0xff)
        } else {
            base
        };
        let model = ((r1.eax >> 12) & 0xf0) | ((r1.eax >> 4) & 0xf);
        prefetch_for((r0.ebx, r0.edx, r0.ecx), family, model)
    }
    // No x86 vendor: off.
    #[cfg(not(target_arch = "x86_64"))]
    prefetch_for((0, 0, 0), 0, 0)
}

/// The vendor words of CPUID leaf 0 (EBX, EDX, ECX) for Intel and AMD.
const INTEL: (u32, u32, u32) = (0x756e_6547, 0x4965_6e69, 0x6c65_746e); // "Genu" "ineI" "ntel"
const AMD: (u32, u32, u32) = (0x6874_7541, 0x6974_6e65, 0x444d_4163); // "Auth" "enti" "cAMD"

/// `auto`'s choice for a CPU: Intel prefetches long runs; AMD family 25 (19h) models 0x00–0x0F
/// and 0x20–0x5F (Zen 3 and 3+) the optimizer steps' large pieces; family 26 (1Ah) models
/// 0x00–0x0F (Zen 5 EPYC, the kind measured) the pieces of large steps; every other CPU nothing.
fn prefetch_for(vendor: (u32, u32, u32), family: u32, model: u32) -> Prefetch {
    match (vendor, family, model) {
        (INTEL, _, _) => Prefetch::LongRuns,
        (AMD, 0x19, 0x00..=0x0f | 0x20..=0x5f) => Prefetch::LargePieces,
        (AMD, 0x1a, 0x00..=0x0f) => Prefetch::LargeSteps,
        _ => Prefetch::Off,
    }
}

/// Checks of the private prefetch setting, run by `tests/internals.rs`.
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;

    pub(crate) fn prefetch_setting_reads_on_off_auto() {
        assert_eq!(prefetch_setting(Some("on")), Ok(Prefetch::LongRuns));
        assert_eq!(prefetch_setting(Some(" 1 ")), Ok(Prefetch::LongRuns));
        assert_eq!(prefetch_setting(Some("off")), Ok(Prefetch::Off));
        assert_eq!(prefetch_setting(Some("0")), Ok(Prefetch::Off));
        for auto in [None, Some(""), Some("auto")] {
            assert_eq!(prefetch_setting(auto), Ok(prefetch_auto()));
        }
        assert_eq!(prefetch_setting(Some("yes")), Err("yes".to_string()));
    }

    /// Which optimizer-step pieces each setting prefetches.
    pub(crate) fn step_pieces_by_setting() {
        use StepBuffers::*;
        let (large, f32_step, steps) = (LARGE_PIECE, LARGE_F32_STEP, Prefetch::LargeSteps);
        let small = 1 << 17;
        for buffers in [Narrow, F32TwoStates, PlainF32] {
            assert!(Prefetch::LongRuns.step_piece(1, 1, buffers));
            assert!(!Prefetch::Off.step_piece(f32_step, f32_step, buffers));
            // Zen 3's rule reads the piece, not the step.
            assert!(!Prefetch::LargePieces.step_piece(large - 1, f32_step, buffers));
            assert!(Prefetch::LargePieces.step_piece(large, large, buffers));
            // Zen 5's reads the step, and for Adam's f32 steps the piece too.
            assert!(!steps.step_piece(large - 1, large - 1, buffers));
            assert!(steps.step_piece(small, f32_step, buffers));
        }
        assert!(steps.step_piece(small, large, Narrow));
        assert!(!steps.step_piece(small, f32_step - 1, F32TwoStates));
        assert!(steps.step_piece(large, large, F32TwoStates));
        assert!(!steps.step_piece(large, f32_step - 1, PlainF32));
    }

    /// `auto` by vendor, family and model; and on this CPU, against the kernel's own reading of
    /// them.
    pub(crate) fn prefetch_auto_follows_the_cpu() {
        assert_eq!(prefetch_for(INTEL, 6, 0x8f), Prefetch::LongRuns);
        assert_eq!(prefetch_for(AMD, 0x19, 0x01), Prefetch::LargePieces); // Zen 3, Milan
        assert_eq!(prefetch_for(AMD, 0x19, 0x21), Prefetch::LargePieces); // Zen 3, Vermeer
        assert_eq!(prefetch_for(AMD, 0x19, 0x50), Prefetch::LargePieces); // Zen 3, Cezanne
        assert_eq!(prefetch_for(AMD, 0x19, 0x11), Prefetch::Off); // Zen 4, Genoa
        assert_eq!(prefetch_for(AMD, 0x19, 0x61), Prefetch::Off); // Zen 4, Raphael
        assert_eq!(prefetch_for(AMD, 0x1a, 0x02), Prefetch::LargeSteps); // Zen 5, Turin
        assert_eq!(prefetch_for(AMD, 0x1a, 0x44), Prefetch::Off); // Zen 5, Granite Ridge
        assert_eq!(prefetch_for(AMD, 0x17, 0x31), Prefetch::Off); // Zen 2
        assert_eq!(prefetch_for((0, 0, 0), 0x19, 0x01), Prefetch::Off);
        if cfg!(not(all(target_arch = "x86_64", target_os = "linux"))) {
            return;
        }
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            eprintln!("skipped: /proc/cpuinfo is not readable");
            return;
        };
        let field = |name: &str| {
            info.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        let (Some(vendor), Some(family), Some(model)) =
            (field("vendor_id"), field("cpu family"), field("model"))
        else {
            eprintln!("skipped: no vendor_id, cpu family or model in /proc/cpuinfo");
            return;
        };
        let (family, model): (u32, u32) = (family.parse().unwrap(), model.parse().unwrap());
        let expected = match vendor.as_str() {
            "GenuineIntel" => Prefetch::LongRuns,
            "AuthenticAMD" => prefetch_for(AMD, family, model),
            _ => Prefetch::Off,
        };
        assert_eq!(
            prefetch_auto(),
            expected,
            "{vendor} family {family} model {model}"
        );
    }
}
