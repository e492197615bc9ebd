//! Helpers shared by the integration tests.
#![allow(dead_code)]

use halfstep::PhiloxRng;
use rand_core::{Rng, SeedableRng};

/// A test-data generator (our own Philox, which tests/philox.rs checks against Random123's KATs).
pub fn rng(seed: u64) -> PhiloxRng {
    let mut s = [0u8; 16];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    PhiloxRng::from_seed(s)
}

/// A uniform f32 in [lo, hi).
pub fn uniform(r: &mut PhiloxRng, lo: f32, hi: f32) -> f32 {
    let u = (r.next_u32() >> 8) as f32 / (1u32 << 24) as f32;
    lo + (hi - lo) * u
}

/// A value of random sign and magnitude 2^[emin, emax) with a random mantissa.
pub fn log_uniform(r: &mut PhiloxRng, emin: i32, emax: i32) -> f32 {
    let e = emin + (r.next_u32() % (emax - emin) as u32) as i32;
    let m = 1.0 + (r.next_u32() >> 9) as f32 / (1u32 << 23) as f32;
    let s = if r.next_u32() & 1 == 0 { 1.0 } else { -1.0 };
    s * m * pow2(e)
}

/// 2^e for e in -126..=127, built from bits (exact; `powi` is not, e.g. under Miri).
pub fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// Parses a hex field.
pub fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim(), 16).unwrap_or_else(|e| panic!("bad hex {s:?}: {e}"))
}

/// The non-comment lines of a test-data file, split on `sep`.
pub fn data_rows(text: &str, sep: char) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.split(sep)
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

use halfstep::{Grads, Rounding, State, Weights, bf16};

/// The weight storage kinds, as the tests enumerate them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WKind {
    F32,
    Split,
    Bf16(Rounding),
}

/// Every weight kind: f32, split, bf16 nearest-even, bf16 stochastic.
pub const W_KINDS: [WKind; 4] = [
    WKind::F32,
    WKind::Split,
    WKind::Bf16(Rounding::NearestEven),
    WKind::Bf16(Rounding::Stochastic),
];

/// Gradient kinds: f32 or bf16.
pub const G_BF16: [bool; 2] = [false, true];

/// State kinds: None = f32, Some(r) = bf16 rounded with r.
pub const S_KINDS: [Option<Rounding>; 3] = [
    None,
    Some(Rounding::NearestEven),
    Some(Rounding::Stochastic),
];

fn to_bf16(xs: &[f32]) -> Vec<bf16> {
    xs.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// Owned weights of one kind.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedWeights {
    pub kind: WKind,
    pub f32: Vec<f32>,
    pub top: Vec<bf16>,
    pub trail: Vec<u16>,
}

impl OwnedWeights {
    /// `xs` stored as `kind` (bf16 kinds round to nearest first).
    pub fn new(kind: WKind, xs: &[f32]) -> Self {
        let mut w = OwnedWeights {
            kind,
            f32: vec![],
            top: vec![],
            trail: vec![],
        };
        match kind {
            WKind::F32 => w.f32 = xs.to_vec(),
            WKind::Split => {
                w.top = xs
                    .iter()
                    .map(|x| bf16::from_bits((x.to_bits() >> 16) as u16))
                    .collect();
                w.trail = xs.iter().map(|x| x.to_bits() as u16).collect();
            }
            WKind::Bf16(_) => w.top = to_bf16(xs),
        }
        w
    }

    pub fn view(&mut self) -> Weights<'_> {
        match self.kind {
            WKind::F32 => Weights::F32(&mut self.f32),
            WKind::Split => Weights::Split {
                top: &mut self.top,
                trail: &mut self.trail,
            },
            WKind::Bf16(r) => Weights::Bf16(&mut self.top, r),
        }
    }

    /// The values as f32 (exact).
    pub fn values(&self) -> Vec<f32> {
        match self.kind {
            WKind::F32 => self.f32.clone(),
            WKind::Split => self
                .top
                .iter()
                .zip(&self.trail)
                .map(|(t, l)| f32::from_bits(u32::from(t.to_bits()) << 16 | u32::from(*l)))
                .collect(),
            WKind::Bf16(_) => self.top.iter().map(|t| t.to_f32()).collect(),
        }
    }

    /// The raw bit patterns of every buffer, for bit-exact comparisons.
    pub fn bits(&self) -> Vec<u32> {
        let mut b: Vec<u32> = self.f32.iter().map(|x| x.to_bits()).collect();
        b.extend(self.top.iter().map(|x| u32::from(x.to_bits())));
        b.extend(self.trail.iter().map(|&x| u32::from(x)));
        b
    }
}

/// Owned gradients.
#[derive(Clone, Debug)]
pub struct OwnedGrads {
    pub f32: Vec<f32>,
    pub bf16: Option<Vec<bf16>>,
}

impl OwnedGrads {
    pub fn new(bf16: bool, xs: &[f32]) -> Self {
        OwnedGrads {
            f32: xs.to_vec(),
            bf16: bf16.then(|| to_bf16(xs)),
        }
    }
    pub fn view(&self) -> Grads<'_> {
        match &self.bf16 {
            Some(b) => Grads::Bf16(b),
            None => Grads::F32(&self.f32),
        }
    }
    pub fn values(&self) -> Vec<f32> {
        match &self.bf16 {
            Some(b) => b.iter().map(|x| x.to_f32()).collect(),
            None => self.f32.clone(),
        }
    }
}

/// An owned state buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedState {
    pub kind: Option<Rounding>,
    pub f32: Vec<f32>,
    pub bf16: Vec<bf16>,
}

impl OwnedState {
    pub fn new(kind: Option<Rounding>, xs: &[f32]) -> Self {
        match kind {
            None => OwnedState {
                kind,
                f32: xs.to_vec(),
                bf16: vec![],
            },
            Some(_) => OwnedState {
                kind,
                f32: vec![],
                bf16: to_bf16(xs),
            },
        }
    }
    pub fn view(&mut self) -> State<'_> {
        match self.kind {
            None => State::F32(&mut self.f32),
            Some(r) => State::Bf16(&mut self.bf16, r),
        }
    }
    pub fn values(&self) -> Vec<f32> {
        match self.kind {
            None => self.f32.clone(),
            Some(_) => self.bf16.iter().map(|x| x.to_f32()).collect(),
        }
    }
    pub fn bits(&self) -> Vec<u32> {
        let mut b: Vec<u32> = self.f32.iter().map(|x| x.to_bits()).collect();
        b.extend(self.bf16.iter().map(|x| u32::from(x.to_bits())));
        b
    }
}

/// The backends this CPU and target run, as engines (the reference among them only with
/// `with_reference`), after one line for each backend it lacks, once per test binary. The line
/// goes straight to stderr: `println!` is captured by the test harness and shown only for a
/// failing test, so a skipped backend would pass unseen.
///
/// Where `HALFSTEP_BACKEND` names a backend, only that one (CI runs the suites once per backend
/// so: each run checks its own, where each had checked them all, and a plain `cargo test` checks
/// them all at once); a line says so.
pub fn available_engines(suite: &str, with_reference: bool) -> Vec<halfstep::Engine> {
    use halfstep::{ALL_BACKENDS, Backend, Engine};
    use std::io::Write;
    let forced = match std::env::var(halfstep::BACKEND_ENV)
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("auto") => None,
        Some(name) => Some(Backend::from_name(name).expect("HALFSTEP_BACKEND names a backend")),
    };
    static REPORT: std::sync::Once = std::sync::Once::new();
    REPORT.call_once(|| {
        let mut err = std::io::stderr().lock();
        match forced {
            Some(Backend::Reference) if !with_reference => {
                let _ = writeln!(
                    err,
                    "{suite}: HALFSTEP_BACKEND=reference: no other backend to compare with the reference"
                );
            }
            Some(b) => {
                let _ = writeln!(err, "{suite}: HALFSTEP_BACKEND={b}: that backend only");
            }
            None => {}
        }
        for b in ALL_BACKENDS.into_iter().filter(|b| !b.is_available()) {
            let _ = writeln!(
                err,
                "{suite}: skipping backend {b}: not available on this CPU/target"
            );
        }
    });
    Backend::available()
        .into_iter()
        .filter(|&b| with_reference || b != Backend::Reference)
        .filter(|&b| forced.is_none_or(|f| b == f || b == Backend::Reference))
        .map(|b| Engine::new(b).unwrap())
        .collect()
}
