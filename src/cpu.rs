//! The CPU this process runs on: which backends it can run ([`Backend`]), whether the x86
//! backends issue software prefetches ([`software_prefetch`]), where AVX-512's Adagrad takes its
//! square roots ([`ROOTS_ENV`]), how its bulk fill of random bits orders them
//! ([`packs_beside_aes`]) and where AVX2's optimizer loops take theirs ([`BITS_ENV`]). Below
//! everything that computes, so that kernels and errors can name a backend without reaching up to
//! the dispatch table.

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
    /// tensors and threads) and its buffers ([`StepBuffers`]): a step with a buffer other than f32
    /// from [`LARGE_PIECE`] elements; an all-f32 step from [`LARGE_F32_STEP`]; an all-f32 step that
    /// divides on its pieces of [`LARGE_PIECE`] (Adam's of [`PAGE_ADAM_PIECE`]), a page ahead where
    /// the step is shorter than [`PAGE_TWO_STATES_STEP`] (two states) or [`PAGE_ONE_STATE_STEP`]
    /// (one), and with two states half a page ahead beyond; and one that divides and is shorter
    /// than [`MID_F32_STEP_END`] on its pieces of [`MID_F32_PIECE`], half a page ahead; and a
    /// narrow step with one f32 state that divides and is shorter than [`NARROW_DIVIDES_STEP_END`]
    /// on its pieces of [`NARROW_DIVIDES_PIECE`]. Zen 5 EPYC CPUs: there a step with a narrow
    /// buffer whose buffers outgrow the L3 gains however it is cut, and split Adagrad on one
    /// thread's pieces past the L2; the all-f32 steps that divide gain on one thread's pieces past
    /// the L2 (half a page ahead) and of 2M and more, a page ahead just past the L3 (half a page
    /// ahead Adagrad's lost), Adam's half a page ahead beyond, neither on two threads' small
    /// pieces; SGD's f32 steps lose at 2M–4M and are level at 16M.
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

/// [`Prefetch::LargeSteps`]: an all-f32 step with two states shorter than this, in elements,
/// prefetches its pieces of [`PAGE_ADAM_PIECE`] (Adam) or [`LARGE_PIECE`] (LAMB) a page ahead. On
/// Zen 5, one thread, a page ahead the f32 AdamW took 0.75–0.85 of its time half a page ahead at
/// 2M and 0.87–0.98 at 3M, LAMB 0.77–0.79 and 0.77–0.78, but Adam and AdamW 1.01–1.11 at 4M.
pub(crate) const PAGE_TWO_STATES_STEP: usize = 4 << 20;

/// [`Prefetch::LargeSteps`]: Adam's and AdamW's all-f32 steps shorter than
/// [`PAGE_TWO_STATES_STEP`] prefetch their pieces of this many elements or more a page ahead (LAMB's
/// passes from [`LARGE_PIECE`]). On Zen 5, one thread, a page ahead Adam and AdamW took 0.98–1.00 of
/// their time without prefetching at 1M, 0.86–0.96 at 1.06M–1.19M and 0.79–0.83 at 1.38M–1.75M
/// (AdamW with AMSGrad's maximum 0.85–0.97 at 1M–1.75M), where LAMB took 1.06–1.09 at
/// 1.13M–1.31M.
pub(crate) const PAGE_ADAM_PIECE: usize = 1 << 20;

/// [`Prefetch::LargeSteps`]: an all-f32 step with one state that divides (Adagrad) shorter than
/// this, in elements, prefetches its pieces of [`LARGE_PIECE`] a page ahead. On Zen 5, one thread,
/// Adagrad took 0.84–0.91 of its time without prefetching at 2M–6M a page ahead (1.03–1.21 half a
/// page ahead), 0.99 at 8M.
pub(crate) const PAGE_ONE_STATE_STEP: usize = 8 << 20;

/// [`Prefetch::LargeSteps`]: an all-f32 step that divides, shorter than [`MID_F32_STEP_END`],
/// prefetches its pieces of this many elements or more half a page ahead: one thread's steps that
/// outgrow the L2 (1 MiB a core) but not the L3. On Zen 5, one thread, Adam and AdamW took
/// 0.78–0.80 of their time without prefetching at 256K elements and 0.76–0.93 at 512K, Adagrad
/// 0.86–0.91 at 256K–704K, LAMB 0.93–0.96 at 256K–512K; at 128K 0.88–0.98. Two threads' pieces
/// of such steps are under 96K, where no piece prefetches (`PREFETCH_MIN`).
pub(crate) const MID_F32_PIECE: usize = 128 << 10;

/// [`MID_F32_PIECE`]'s window ends here, in elements: at 768K AdamW and LAMB took 1.01–1.06 of
/// their time half a page ahead, and at 1M every all-f32 step was level with or without.
pub(crate) const MID_F32_STEP_END: usize = 768 << 10;

/// [`Prefetch::LargeSteps`]: a step with narrow weights or gradients and one f32 state that
/// divides (split Adagrad, and Adagrad's bf16-SR weights), shorter than [`NARROW_DIVIDES_STEP_END`],
/// prefetches its pieces of this many elements or more a page ahead (the narrow layouts'
/// distance): one thread's steps past the L2. On Zen 5, one thread, bf16 gradients, split Adagrad
/// took 0.88–0.99 of its time without prefetching at 512K–1.38M elements (1.00 at 256K), the
/// bf16-SR weights 0.92–1.02 (1.04 at 256K); the bf16-SR sum lost 2–4%, and so is not in the
/// class. Through the package at 1M (three calls of each build): 0.140–0.149 → 0.137–0.138 ns
/// per parameter.
pub(crate) const NARROW_DIVIDES_PIECE: usize = 512 << 10;

/// [`NARROW_DIVIDES_PIECE`]'s window ends here, in elements: at 1.5M split Adagrad took 0.99–1.06
/// of its time a page ahead, and from [`LARGE_PIECE`] every narrow step prefetches.
pub(crate) const NARROW_DIVIDES_STEP_END: usize = 3 << 19;

/// An optimizer step's buffers, and for the plain f32 ones whether the update divides, as far as
/// [`Prefetch::LargeSteps`] tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StepBuffers {
    /// A buffer other than f32: split or bf16 weights, bf16 gradients or states.
    Narrow,
    /// As the layout gives it: split or bf16 weights, or bf16 gradients, with one state, f32
    /// (split Adagrad, SGD's split step with momentum). [`StepBuffers::of_op`] makes it
    /// [`StepBuffers::NarrowDivides`] or [`StepBuffers::Narrow`].
    NarrowOneState,
    /// Split or bf16 weights, or bf16 gradients, with one f32 state, in an update that divides:
    /// Adagrad.
    NarrowDivides,
    /// Every buffer f32, with two states or more, in a pass that reads gradients and writes the
    /// weights: Adam, AdamW.
    F32TwoStates,
    /// Every buffer f32, with two states, in a pass that reads no gradients or leaves the weights
    /// unwritten: LAMB's first pass (the weights read, the moments and norms computed) and its
    /// second from the moments (no gradients).
    F32LambPass,
    /// Every buffer f32, with one state at most, in an update that divides: Adagrad.
    F32Divides,
    /// Every buffer f32, with one state at most, in an update that does not divide: SGD, LAMB's
    /// second pass where it reads the update its first pass kept.
    PlainF32,
}

impl StepBuffers {
    /// A layout's buffers ([`StepBuffers::Narrow`], [`StepBuffers::NarrowOneState`],
    /// [`StepBuffers::F32TwoStates`] or [`StepBuffers::PlainF32`]) in a pass that divides where
    /// `divides` and that reads gradients and writes the weights where `updates`: all f32 with
    /// one state at most and dividing are [`StepBuffers::F32Divides`], with two states and not
    /// updating [`StepBuffers::F32LambPass`]; narrow with one f32 state and dividing are
    /// [`StepBuffers::NarrowDivides`], else [`StepBuffers::Narrow`].
    pub(crate) const fn of_op(self, divides: bool, updates: bool) -> Self {
        match self {
            StepBuffers::PlainF32 if divides => StepBuffers::F32Divides,
            StepBuffers::F32TwoStates if !updates => StepBuffers::F32LambPass,
            StepBuffers::NarrowOneState if divides => StepBuffers::NarrowDivides,
            StepBuffers::NarrowOneState => StepBuffers::Narrow,
            other => other,
        }
    }
}

/// How far ahead a prefetching piece of an optimizer step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ahead {
    /// The layout's own distance: a page, or half a page where every buffer is f32.
    Layout,
    /// A whole page in every buffer.
    Page,
}

impl Prefetch {
    /// Whether and how far ahead an optimizer step's piece of `n` elements, long enough for the
    /// kernels to prefetch at all, prefetches under this setting, in a step of `step_len`
    /// elements in all (at least `n`) with the buffers `buffers`.
    pub(crate) fn step_piece(
        self,
        n: usize,
        step_len: usize,
        buffers: StepBuffers,
    ) -> Option<Ahead> {
        let layout = |on: bool| on.then_some(Ahead::Layout);
        match self {
            Prefetch::LongRuns => Some(Ahead::Layout),
            Prefetch::LargePieces => layout(n >= LARGE_PIECE),
            Prefetch::LargeSteps => match buffers {
                StepBuffers::NarrowDivides
                    if n >= NARROW_DIVIDES_PIECE && step_len < NARROW_DIVIDES_STEP_END =>
                {
                    Some(Ahead::Layout)
                }
                StepBuffers::Narrow | StepBuffers::NarrowOneState | StepBuffers::NarrowDivides => {
                    layout(step_len >= LARGE_PIECE)
                }
                StepBuffers::F32TwoStates | StepBuffers::F32LambPass | StepBuffers::F32Divides
                    if n >= MID_F32_PIECE && step_len < MID_F32_STEP_END =>
                {
                    Some(Ahead::Layout)
                }
                StepBuffers::F32TwoStates
                    if n >= PAGE_ADAM_PIECE && step_len < PAGE_TWO_STATES_STEP =>
                {
                    Some(Ahead::Page)
                }
                StepBuffers::F32LambPass if n >= LARGE_PIECE && step_len < PAGE_TWO_STATES_STEP => {
                    Some(Ahead::Page)
                }
                StepBuffers::F32Divides if n >= LARGE_PIECE && step_len < PAGE_ONE_STATE_STEP => {
                    Some(Ahead::Page)
                }
                StepBuffers::F32TwoStates | StepBuffers::F32LambPass => {
                    layout(n >= LARGE_PIECE || step_len >= LARGE_F32_STEP)
                }
                StepBuffers::F32Divides | StepBuffers::PlainF32 => {
                    layout(step_len >= LARGE_F32_STEP)
                }
            },
            Prefetch::Off => None,
        }
    }
}

/// Whether the x86 backends issue software prefetches at all (optimizer steps, stochastic
/// conversions; a hint that never changes a bit). `auto` (the default) turns them on where they
/// were measured to pay: on Intel CPUs for long runs, on AMD's Zen 3 for the optimizer steps'
/// pieces of 2M elements and more, on Zen 5 EPYC CPUs for the pieces of the steps of 2M elements
/// and more (the all-f32 steps from 32M, and those that divide on pieces of 2M, Adam's of 1M: a
/// page ahead in Adagrad's steps under 8M and Adam's and LAMB's under 4M, half a page in Adam's and
/// LAMB's beyond), half a page ahead for one thread's all-f32 steps that divide at 128K–768K
/// elements, and a page ahead for one thread's split Adagrad (narrow weights, f32 sum) at
/// 512K–1.5M; on the other AMD CPUs measured they cost time (docs/DESIGN.md, "SIMD backends").
/// Decided once per process; a value other than `on`, `off` or `auto` is reported on stderr once
/// and read as `auto`.
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

/// The environment variable that chooses where the AVX-512 Adagrad step takes its square roots:
/// `split` (every other one on the multiply pipes; in the layouts that round stochastically every
/// fourth, three in eight with f32 weights), `divider`, or `auto` (split on Intel CPUs). The bits
/// are the same either way.
pub const ROOTS_ENV: &str = "HALFSTEP_ROOTS";

/// Whether Adagrad's loops take every other chunk's square root off the divider (where a store
/// rounds stochastically every fourth, three in eight with f32 weights) on a backend that can
/// (`Simd::sqrt_off_divider`, AVX-512), the same bits either way.
/// `auto` (or unset): on Intel CPUs, whose divider, shared by square roots and divisions, bounds
/// Adagrad in cache (an Emerald Rapids CPU and 16-core Sapphire Rapids hosts: f32 Adagrad at 64K
/// on one thread 0.74–0.91x the time, split 0.78–0.99x); not on AMD's, where it cost time (a probe
/// loop on Zen 5: 1.13–1.21x).
/// `split` and `divider` force it on and off. Decided once per process; another value is reported on
/// stderr once and read as `auto`.
pub(crate) fn roots_off_divider() -> bool {
    static SETTING: OnceLock<bool> = OnceLock::new();
    *SETTING.get_or_init(|| on_intel_unless(ROOTS_ENV, "split", "divider"))
}

/// A choice made on Intel CPUs unless the environment variable `name` says `on` (true) or `off`
/// (false); unset, empty or `auto`: whether the CPU is Intel's. Another value is reported on stderr
/// and read as `auto`.
fn on_intel_unless(name: &str, on: &str, off: &str) -> bool {
    let value = std::env::var(name).ok();
    intel_choice(value.as_deref(), on, off).unwrap_or_else(|other| {
        eprintln!("halfstep: {name}={other:?} is not {on}, {off} or auto; using auto");
        intel()
    })
}

/// A value of [`on_intel_unless`]'s variable read: `on` true, `off` false, unset, empty or `auto`
/// whether the CPU is Intel's; anything else is returned as the error.
fn intel_choice(value: Option<&str>, on: &str, off: &str) -> core::result::Result<bool, String> {
    match value.map(str::trim) {
        Some(v) if v == on => Ok(true),
        Some(v) if v == off => Ok(false),
        None | Some("") | Some("auto") => Ok(intel()),
        Some(other) => Err(other.to_string()),
    }
}

/// The environment variable that chooses where the AVX2 backend makes the random bits of the
/// optimizer steps whose loops may make them as they go (Adagrad's stochastic layouts, Adam's and
/// LAMB's bf16-SR weights): `loop`, `fill` (a block at a time before the loop reaches it), or
/// `auto` (the loop on Intel CPUs). The bits are the same either way.
pub const BITS_ENV: &str = "HALFSTEP_BITS";

/// Whether the steps that can ([`BITS_ENV`]) make their random bits in their loops.
/// `auto` (or unset): on Intel CPUs, where the AES rounds ran beside the divider (an Emerald Rapids
/// CPU and 16-core host, AVX2, 64K: Adagrad's bf16-SR states 0.90x the time, Adam's and LAMB's
/// bf16-SR weights 0.94-0.97x); not on AMD's, where the rounds take the pipes of the loop's
/// multiplies and the divider leaves them less room (Zen 3: the fill took Adagrad's bf16-SR states
/// 0.94x the time, its bf16-SR weights 0.81x, AdamW's 0.89x, LAMB's 0.90x).
/// `loop` and `fill` force it on and off. Decided once per process; another value is reported on
/// stderr once and read as `auto`.
pub(crate) fn bits_in_loop() -> bool {
    static SETTING: OnceLock<bool> = OnceLock::new();
    *SETTING.get_or_init(|| on_intel_unless(BITS_ENV, "loop", "fill"))
}

/// Whether `fill_bits` puts the values in element order by two shuffles that issue beside the
/// AES rounds rather than by one on their port (`Simd::pack_u16_halves_beside_aes`; the same
/// bits): on Intel CPUs, whose 512-bit `vpermw` issues on the port of the 512-bit rounds (the
/// Emerald Rapids VM: 0.054–0.064 ns per 16 bits against 0.064–0.071, `convert_timer`); not on
/// AMD's, where each of the two takes a share of the pipes the rounds use (not measured there).
/// Decided once per process.
pub(crate) fn packs_beside_aes() -> bool {
    static SETTING: OnceLock<bool> = OnceLock::new();
    *SETTING.get_or_init(intel)
}

/// Whether the CPU's vendor is Intel (CPUID leaf 0); false off x86.
fn intel() -> bool {
    cpu_id().0 == INTEL
}

/// `auto`'s choice, from the CPU's vendor, family and model (CPUID leaves 0 and 1).
fn prefetch_auto() -> Prefetch {
    let (vendor, family, model) = cpu_id();
    prefetch_for(vendor, family, model)
}

/// The CPU's vendor words (CPUID leaf 0: EBX, EDX, ECX), family and model; zeros off x86.
#[allow(unsafe_code)]
fn cpu_id() -> ((u32, u32, u32), u32, u32) {
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
        ((r0.ebx, r0.edx, r0.ecx), family, model)
    }
    #[cfg(not(target_arch = "x86_64"))]
    ((0, 0, 0), 0, 0)
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

    /// `HALFSTEP_ROOTS` and `HALFSTEP_BITS` values, as [`on_intel_unless`] reads them.
    pub(crate) fn intel_choices_read_their_words() {
        for (on, off) in [("split", "divider"), ("loop", "fill")] {
            assert_eq!(intel_choice(Some(on), on, off), Ok(true));
            assert_eq!(intel_choice(Some(&format!(" {off} ")), on, off), Ok(false));
            for auto in [None, Some(""), Some("auto")] {
                assert_eq!(intel_choice(auto, on, off), Ok(intel()));
            }
            assert_eq!(intel_choice(Some("on"), on, off), Err("on".to_string()));
            assert_eq!(intel_choice(Some(off), off, on), Ok(true));
        }
    }

    /// Which optimizer-step pieces each setting prefetches, and how far ahead.
    pub(crate) fn step_pieces_by_setting() {
        use Ahead::*;
        use StepBuffers::*;
        let (large, f32_step) = (LARGE_PIECE, LARGE_F32_STEP);
        let (two_states, one_state) = (PAGE_TWO_STATES_STEP, PAGE_ONE_STATE_STEP);
        let steps = Prefetch::LargeSteps;
        let small = 1 << 17;
        let all = [
            Narrow,
            NarrowOneState,
            NarrowDivides,
            F32TwoStates,
            F32LambPass,
            F32Divides,
            PlainF32,
        ];
        for buffers in all {
            assert_eq!(Prefetch::LongRuns.step_piece(1, 1, buffers), Some(Layout));
            assert_eq!(Prefetch::Off.step_piece(f32_step, f32_step, buffers), None);
            // Zen 3's rule reads the piece, not the step.
            assert_eq!(
                Prefetch::LargePieces.step_piece(large - 1, f32_step, buffers),
                None
            );
            assert_eq!(
                Prefetch::LargePieces.step_piece(large, large, buffers),
                Some(Layout)
            );
            // Zen 5's reads the step, and for the f32 steps that divide the piece too.
            assert_eq!(steps.step_piece(small, f32_step, buffers), Some(Layout));
        }
        for buffers in [Narrow, NarrowOneState, F32LambPass, F32Divides, PlainF32] {
            assert_eq!(steps.step_piece(large - 1, large - 1, buffers), None);
        }
        for narrow in [Narrow, NarrowOneState, NarrowDivides] {
            assert_eq!(steps.step_piece(small, large, narrow), Some(Layout));
            assert_eq!(steps.step_piece(one_state, one_state, narrow), Some(Layout));
        }
        // One thread's narrow steps with one f32 state that divide, past the L2: a page ahead.
        let (narrow, narrow_end) = (NARROW_DIVIDES_PIECE, NARROW_DIVIDES_STEP_END);
        assert_eq!(
            steps.step_piece(narrow, narrow, NarrowDivides),
            Some(Layout)
        );
        assert_eq!(
            steps.step_piece(narrow_end - 1, narrow_end - 1, NarrowDivides),
            Some(Layout)
        );
        assert_eq!(
            steps.step_piece(narrow - 1, narrow_end - 1, NarrowDivides),
            None
        );
        assert_eq!(steps.step_piece(narrow, narrow_end, NarrowDivides), None);
        assert_eq!(steps.step_piece(large - 1, large - 1, NarrowDivides), None);
        for other in [Narrow, NarrowOneState] {
            assert_eq!(steps.step_piece(narrow, narrow, other), None);
        }
        let adam = PAGE_ADAM_PIECE;
        for (divides, page_from, page_below) in [
            (F32TwoStates, adam, two_states),
            (F32LambPass, large, two_states),
            (F32Divides, large, one_state),
        ] {
            assert_eq!(steps.step_piece(small, f32_step - 1, divides), None);
            assert_eq!(steps.step_piece(page_from, page_from, divides), Some(Page));
            assert_eq!(
                steps.step_piece(page_from, page_below - 1, divides),
                Some(Page)
            );
            // Two threads' pieces of such a step are too short.
            assert_eq!(
                steps.step_piece(page_from - 1, page_below - 1, divides),
                None
            );
            assert_eq!(steps.step_piece(page_from, f32_step, divides), Some(Layout));
        }
        for two in [F32TwoStates, F32LambPass] {
            assert_eq!(steps.step_piece(two_states, two_states, two), Some(Layout));
        }
        assert_eq!(steps.step_piece(adam - 1, adam - 1, F32TwoStates), None);
        assert_eq!(steps.step_piece(one_state, one_state, F32Divides), None);
        assert_eq!(steps.step_piece(large, f32_step - 1, PlainF32), None);
        // One thread's steps past the L2: the f32 steps that divide, half a page ahead.
        let (mid, mid_end) = (MID_F32_PIECE, MID_F32_STEP_END);
        for divides in [F32TwoStates, F32LambPass, F32Divides] {
            assert_eq!(steps.step_piece(mid, mid, divides), Some(Layout));
            assert_eq!(
                steps.step_piece(mid_end - 1, mid_end - 1, divides),
                Some(Layout)
            );
            assert_eq!(steps.step_piece(mid - 1, mid_end - 1, divides), None);
            assert_eq!(steps.step_piece(mid, mid_end, divides), None);
        }
        for other in [Narrow, NarrowDivides, PlainF32] {
            assert_eq!(steps.step_piece(mid, mid, other), None);
        }
        for updates in [false, true] {
            assert_eq!(PlainF32.of_op(true, updates), F32Divides);
            assert_eq!(PlainF32.of_op(false, updates), PlainF32);
            assert_eq!(Narrow.of_op(true, updates), Narrow);
            assert_eq!(NarrowOneState.of_op(true, updates), NarrowDivides);
            assert_eq!(NarrowOneState.of_op(false, updates), Narrow);
        }
        assert_eq!(F32TwoStates.of_op(true, true), F32TwoStates);
        assert_eq!(F32TwoStates.of_op(false, false), F32LambPass);
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
