//! Differential checks for the fuzzers and the corpus replay (feature `fuzzing`).
//!
//! [`check`] decodes one case from arbitrary bytes — lengths, start offsets, index bases,
//! storage kinds, values with special-value masks, seeds, steps, streams, replicas and
//! hyperparameters, extreme and invalid ones included — runs the reference and every available
//! backend on it, and reports any difference in output bits or in accept/reject as an `Err`
//! holding a reproducer description. `fuzz/` wraps it in cargo-fuzz targets; `tests/fuzz_corpus.rs`
//! replays the committed corpus with it on stable.

use crate::rng::Purpose;
use crate::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Backend, Engine, Grads, LambConfig,
    LambTensor, Replica, Rounding, SgdConfig, SgdTensor, State, Step, StepContext, TensorStream,
    Threads, Weights, bf16, f16,
};
use arbitrary::{Arbitrary, Result as AResult, Unstructured};
use core::fmt::Debug;
use rayon_core::ThreadPool;
use std::sync::{Arc, OnceLock};

/// A kernel family with its own fuzz target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Element-indexed random bits.
    ElementBits,
    /// f32 <-> bf16 / f16 in every rounding mode, split and combine.
    Convert,
    /// SGD.
    Sgd,
    /// Adagrad.
    Adagrad,
    /// Adam / AdamW.
    Adam,
    /// LAMB.
    Lamb,
    /// A group of tensors (any optimizer) stepped in one call on thread pools of several sizes.
    Group,
    /// fp8 E4M3 / E5M2 and NVFP4 / MXFP4 quantization and dequantization.
    Quant,
}

/// Every target.
pub const TARGETS: [Target; 8] = [
    Target::ElementBits,
    Target::Convert,
    Target::Sgd,
    Target::Adagrad,
    Target::Adam,
    Target::Lamb,
    Target::Group,
    Target::Quant,
];

impl Target {
    /// The cargo-fuzz target and corpus directory name.
    pub fn name(self) -> &'static str {
        match self {
            Target::ElementBits => "element_bits",
            Target::Convert => "convert",
            Target::Sgd => "sgd",
            Target::Adagrad => "adagrad",
            Target::Adam => "adam",
            Target::Lamb => "lamb",
            Target::Group => "group",
            Target::Quant => "quant",
        }
    }
}

/// Decodes `data` as a case for `target` and compares every available backend with the reference.
pub fn check(target: Target, data: &[u8]) -> Result<(), String> {
    let mut u = Unstructured::new(data);
    // Running out of bytes is not a failure: the decoders fall back to defaults.
    let r = match target {
        Target::ElementBits => element_bits(&mut u),
        Target::Convert => convert(&mut u),
        Target::Sgd => sgd(&mut u),
        Target::Adagrad => adagrad(&mut u),
        Target::Adam => adam(&mut u),
        Target::Lamb => lamb(&mut u),
        Target::Group => group(&mut u),
        Target::Quant => quant(&mut u),
    };
    match r {
        Ok(r) => r,
        Err(_) => Ok(()),
    }
}

/// f32 patterns worth hitting on purpose (NaN payloads high and low, infinities, zeros,
/// subnormals, extremes, rounding ties, binade crossings, f16 limits).
const SPECIALS: [u32; 24] = [
    0x7FC0_0000,
    0xFFC0_0001,
    0x7FA0_0000,
    0x7F80_0001,
    0xFF80_FFFF,
    0x7F80_0000,
    0xFF80_0000,
    0x0000_0000,
    0x8000_0000,
    0x0000_0001,
    0x807F_FFFF,
    0x0080_0000,
    0x7F7F_FFFF,
    0xFF7F_FFFF,
    0x7F7F_8000,
    0x3F80_8000,
    0x3F80_1000,
    0x3F7F_FFFF,
    0x477F_E000,
    0x477F_F000,
    0x3880_0000,
    0x3380_0000,
    0x3300_0000,
    0x3340_0000,
];

fn value(u: &mut Unstructured<'_>) -> AResult<f32> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => f32::from_bits(u32::arbitrary(u)?),
        1 => f32::from_bits(SPECIALS[u.choose_index(SPECIALS.len())?]),
        _ => {
            // An ordinary value: magnitude 2^-40 .. 2^20, either sign.
            let e = i32::from(u.int_in_range(0u8..=60)?) - 40;
            let m = 1.0 + (u32::arbitrary(u)? >> 9) as f32 / (1u32 << 23) as f32;
            let s = if bool::arbitrary(u)? { -1.0 } else { 1.0 };
            // 2^e from bits: exact everywhere (`powi` is perturbed under Miri).
            s * m * crate::reference::quant::pow2(e)
        }
    })
}

fn values(u: &mut Unstructured<'_>, n: usize) -> AResult<Vec<f32>> {
    (0..n).map(|_| value(u)).collect()
}

/// A hyperparameter: usually one of `typical`, sometimes an extreme or invalid pattern.
fn hyper(u: &mut Unstructured<'_>, typical: &[f32]) -> AResult<f32> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => f32::from_bits(u32::arbitrary(u)?),
        1 => [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            1e-30,
            3e38,
            f32::INFINITY,
            f32::NAN,
            0.999_999,
        ][u.choose_index(10)?],
        _ => typical[u.choose_index(typical.len())?],
    })
}

/// Everything a case shares: the slice length, its start offset into the buffers (alignment),
/// and the RNG coordinates.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Elements in the slice.
    pub len: usize,
    /// Elements before the slice in each buffer.
    pub off: usize,
    /// Seed, step and replica.
    pub ctx: StepContext,
    /// Tensor id and index base.
    pub stream: TensorStream,
}

fn case(u: &mut Unstructured<'_>, max_len: usize) -> AResult<Case> {
    let len = u.int_in_range(0usize..=max_len)?;
    let off = u.int_in_range(0usize..=15)?;
    let step = match u.int_in_range(0u8..=5)? {
        0 => 0,
        1 => u32::MAX,
        2 => u32::arbitrary(u)?,
        k => u32::from(k) - 2,
    };
    let replica = match u.int_in_range(0u8..=3)? {
        0 => Replica::Differing(u16::arbitrary(u)?),
        1 => Replica::Differing(u16::MAX),
        _ => Replica::Identical,
    };
    let id = if u.ratio(1, 16)? {
        u32::arbitrary(u)?
    } else {
        u32::arbitrary(u)? & ((1 << 28) - 1)
    };
    let limit = 1u64 << 51;
    let index_base = match u.int_in_range(0u8..=6)? {
        0 => limit - len as u64,
        1 => limit - len as u64 + 1,
        2 => u64::arbitrary(u)?,
        3 => u64::arbitrary(u)? % limit,
        k => [0, 1, 127, 2047][usize::from(k - 3)],
    };
    Ok(Case {
        len,
        off,
        ctx: StepContext {
            seed: u64::arbitrary(u)?,
            step,
            replica,
        },
        stream: TensorStream { id, index_base },
    })
}

/// Every engine to compare with the reference.
fn backends() -> Vec<Engine> {
    Backend::available()
        .into_iter()
        .filter(|&b| b != Backend::Reference)
        .filter_map(|b| Engine::new(b).ok())
        .collect()
}

fn reference() -> Engine {
    Engine::new(Backend::Reference).expect("the reference is always available")
}

/// Runs `run` on the reference and every backend, each on a fresh copy of `data`, and compares
/// the results and the bit patterns of every buffer (`bits`).
fn compare<D: Clone, R: PartialEq + Debug>(
    case: &dyn Debug,
    data: &D,
    bits: impl Fn(&D) -> Vec<u32>,
    run: impl Fn(Engine, &mut D) -> R,
) -> Result<(), String> {
    let mut want_data = data.clone();
    let want = run(reference(), &mut want_data);
    let want_bits = bits(&want_data);
    for e in backends() {
        let mut d = data.clone();
        let got = run(e, &mut d);
        if got != want {
            return Err(format!(
                "{}: result {got:?}, reference {want:?}\ncase: {case:#?}",
                e.backend()
            ));
        }
        let got_bits = bits(&d);
        if let Some(i) = got_bits.iter().zip(&want_bits).position(|(a, b)| a != b) {
            return Err(format!(
                "{}: output word {i} is {:#010x}, reference {:#010x}\ncase: {case:#?}",
                e.backend(),
                got_bits[i],
                want_bits[i]
            ));
        }
    }
    Ok(())
}

fn element_bits(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let c = case(u, 520)?;
    let purpose = [
        Purpose::Weights,
        Purpose::FirstMoment,
        Purpose::SecondMoment,
        Purpose::MaxSecondMoment,
    ][u.choose_index(4)?];
    let data = vec![0u16; c.len + c.off];
    Ok(compare(
        &(c, purpose),
        &data,
        |d| d.iter().map(|&x| u32::from(x)).collect(),
        |e, d| e.fill_element_bits(&c.ctx, &c.stream, purpose, &mut d[c.off..]),
    ))
}

/// Buffers for the conversion target.
#[derive(Clone, Debug)]
struct ConvertData {
    src: Vec<f32>,
    src16: Vec<u16>,
    bf: Vec<bf16>,
    h: Vec<f16>,
    out: Vec<f32>,
    trail: Vec<u16>,
}

fn convert(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let c = case(u, 520)?;
    let rounding = [
        Rounding::NearestEven,
        Rounding::Stochastic,
        Rounding::TowardZero,
    ][u.choose_index(3)?];
    let n = c.len + c.off;
    let data = ConvertData {
        src: values(u, n)?,
        src16: (0..n).map(|_| u16::arbitrary(u)).collect::<AResult<_>>()?,
        bf: vec![bf16::ZERO; n],
        h: vec![f16::ZERO; n],
        out: vec![0.0; n],
        trail: vec![0; n],
    };
    let bits = |d: &ConvertData| {
        let mut b: Vec<u32> = d.bf.iter().map(|x| u32::from(x.to_bits())).collect();
        b.extend(d.h.iter().map(|x| u32::from(x.to_bits())));
        b.extend(d.out.iter().map(|x| x.to_bits()));
        b.extend(d.trail.iter().map(|&x| u32::from(x)));
        b
    };
    let o = c.off;
    Ok(compare(&(c, rounding), &data, bits, |e, d| {
        let as_bf: Vec<bf16> = d.src16[o..].iter().map(|&x| bf16::from_bits(x)).collect();
        let as_h: Vec<f16> = d.src16[o..].iter().map(|&x| f16::from_bits(x)).collect();
        let r1 = e.f32_to_bf16(&d.src[o..], &mut d.bf[o..], rounding, &c.ctx, &c.stream);
        let r2 = e.f32_to_f16(&d.src[o..], &mut d.h[o..], rounding, &c.ctx, &c.stream);
        let mut widened = vec![0f32; as_bf.len()];
        let r3 = e.bf16_to_f32(&as_bf, &mut widened);
        let r4 = e.f16_to_f32(&as_h, &mut d.out[o..]);
        let mut w2 = widened.clone();
        let r5 = e.split(&widened, &mut d.bf[o..], &mut d.trail[o..]);
        let r6 = e.combine(&d.bf[o..], &d.trail[o..], &mut w2);
        d.out[o..]
            .iter_mut()
            .zip(&w2)
            .for_each(|(a, b)| *a = f32::from_bits(a.to_bits() ^ b.to_bits()));
        [r1, r2, r3, r4, r5, r6]
    }))
}

/// Buffers for the quantizer target.
#[derive(Clone, Debug)]
struct QuantData {
    src: Vec<f32>,
    bytes: Vec<u8>,
    fp8: Vec<u8>,
    packed: Vec<u8>,
    scales: Vec<u8>,
    out: Vec<f32>,
}

fn quant(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    use crate::quant::Fp8;
    // Up to a little past one 2048-element tile of the fp4 kernels.
    let c = case(u, 2200)?;
    let rounding = [
        Rounding::NearestEven,
        Rounding::Stochastic,
        Rounding::TowardZero,
    ][u.choose_index(3)?];
    let fmt = [Fp8::E4M3, Fp8::E5M2][u.choose_index(2)?];
    let n = c.len + c.off;
    // Either the general mix or block-typical magnitudes (most elements near the block's amax).
    let src = if bool::arbitrary(u)? {
        values(u, n)?
    } else {
        let scale = value(u)?;
        (0..n)
            .map(|_| Ok(scale * (f32::from(u8::arbitrary(u)?) - 128.0) / 16.0))
            .collect::<AResult<_>>()?
    };
    let pts_choice = u.int_in_range(0u8..=3)?;
    let pts_other = hyper(u, &[1.0, 0.01, 1e-6, 3e3])?;
    let data = QuantData {
        src,
        bytes: (0..n).map(|_| u8::arbitrary(u)).collect::<AResult<_>>()?,
        fp8: vec![0x5A; n],
        packed: vec![0x5A; n.div_ceil(2) + 8],
        scales: vec![0x5A; n.div_ceil(16) + 8],
        out: vec![0.0; 2 * n],
    };
    let bits = |d: &QuantData| {
        let mut b: Vec<u32> = d.fp8.iter().map(|&x| u32::from(x)).collect();
        b.extend(d.packed.iter().map(|&x| u32::from(x)));
        b.extend(d.scales.iter().map(|&x| u32::from(x)));
        b.extend(d.out.iter().map(|x| x.to_bits()));
        b
    };
    let (o, len) = (c.off, c.len);
    let (pb, sb) = (o / 2, o / 16);
    Ok(compare(&(c, rounding, fmt), &data, bits, |e, d| {
        let src = &d.src[o..];
        let own = e.nvfp4_tensor_scale(src);
        let pts = match pts_choice {
            0 | 1 => own.as_ref().copied().unwrap_or(1.0),
            _ => pts_other,
        };
        let r1 = e.f32_to_fp8(src, &mut d.fp8[o..], fmt, rounding, &c.ctx, &c.stream);
        let r2 = e.fp8_to_f32(&d.bytes[o..], &mut d.out[o..n], fmt);
        let (packed, scales) = (
            &mut d.packed[pb..pb + len.div_ceil(2)],
            &mut d.scales[sb..sb + len.div_ceil(16)],
        );
        let r3 = e.quantize_nvfp4(src, pts, packed, scales, rounding, &c.ctx, &c.stream);
        let r4 = e.dequantize_nvfp4(packed, scales, pts, &mut d.out[n + o..]);
        let mut mx = vec![0u8; len.div_ceil(32)];
        let mut mx_packed = vec![0u8; len.div_ceil(2)];
        let r5 = e.quantize_mxfp4(src, &mut mx_packed, &mut mx, rounding, &c.ctx, &c.stream);
        let mut back = vec![0f32; len];
        let r6 = e.dequantize_mxfp4(&mx_packed, &mx, &mut back);
        // Fold the MXFP4 results into the compared buffers.
        for (i, (b, p)) in back.iter().zip(&mx_packed).enumerate() {
            d.out[o + i] = f32::from_bits(d.out[o + i].to_bits() ^ b.to_bits().rotate_left(7));
            d.fp8[o + i] ^= p.rotate_left(3);
        }
        for (i, &m) in mx.iter().enumerate() {
            d.fp8[o + i] ^= m;
        }
        ([r1, r2, r3, r4, r5, r6], own.map(f32::to_bits))
    }))
}

/// One tensor held in every storage format; [`Kinds`] picks which ones a step sees.
#[derive(Clone, Debug)]
pub struct TensorData {
    c: Case,
    kinds: Kinds,
    w32: Vec<f32>,
    top: Vec<bf16>,
    trail: Vec<u16>,
    g32: Vec<f32>,
    g16: Vec<bf16>,
    s32: [Vec<f32>; 3],
    s16: [Vec<bf16>; 3],
}

/// Elements after each slice that no kernel may touch.
pub const GUARD: usize = 8;

/// The shortest tensor (or piece of one) whose optimizer step, conversion or quantization
/// prefetches ahead; tests run longer tensors to cover that path too.
pub const PREFETCH_MIN: usize = crate::kernels::optim::PREFETCH_MIN;

/// The storage kinds of one step: weights 0 = f32, 1 = split, 2/3/4 = bf16 nearest/stochastic/
/// toward zero; gradients 0 = f32, 1 = bf16; states 0 = f32, 1/2 = bf16 nearest/stochastic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds {
    /// Weight kind, 0..=4.
    pub w: u8,
    /// Gradient kind, 0..=1.
    pub g: u8,
    /// State kinds (momentum / first moment, second moment / sum, AMSGrad max), each 0..=2.
    pub s: [u8; 3],
}

impl Kinds {
    /// How many combinations there are (5 x 2 x 3^3).
    pub const COUNT: usize = 270;

    /// Combination `i` of [`Kinds::COUNT`].
    pub fn nth(i: usize) -> Kinds {
        let i = i % Self::COUNT;
        Kinds {
            w: (i % 5) as u8,
            g: (i / 5 % 2) as u8,
            s: [(i / 10 % 3) as u8, (i / 30 % 3) as u8, (i / 90 % 3) as u8],
        }
    }
}

impl TensorData {
    /// A tensor whose slice (after `case.off` leading elements) starts at global index
    /// `case.stream.index_base`. Each value array has `case.off + case.len` elements; bf16 and
    /// split forms are the f32 values truncated (so every kind starts from the same bits).
    ///
    /// Every buffer gets [`GUARD`] extra elements after the slice; they are part of
    /// [`TensorData::bits`], so a kernel writing past the end of a slice shows up as a difference.
    pub fn new(case: Case, kinds: Kinds, w: Vec<f32>, g: Vec<f32>, s: [Vec<f32>; 3]) -> TensorData {
        let guard = |mut v: Vec<f32>| {
            v.extend(std::iter::repeat_n(f32::from_bits(0x7FC0_1234), GUARD));
            v
        };
        let (w, g, s) = (guard(w), guard(g), s.map(guard));
        let bf = |v: &Vec<f32>| {
            v.iter()
                .map(|&x| bf16::from_bits((x.to_bits() >> 16) as u16))
                .collect::<Vec<_>>()
        };
        TensorData {
            c: case,
            kinds,
            top: bf(&w),
            trail: w.iter().map(|x| x.to_bits() as u16).collect(),
            w32: w,
            g16: bf(&g),
            g32: g,
            s16: [bf(&s[0]), bf(&s[1]), bf(&s[2])],
            s32: s,
        }
    }
}

fn tensor(u: &mut Unstructured<'_>, max_len: usize) -> AResult<TensorData> {
    let c = case(u, max_len)?;
    let n = c.len + c.off;
    let (w, g) = (values(u, n)?, values(u, n)?);
    let s = [values(u, n)?, values(u, n)?, values(u, n)?];
    let kinds = Kinds {
        w: u.int_in_range(0u8..=4)?,
        g: u.int_in_range(0u8..=1)?,
        s: [
            u.int_in_range(0u8..=2)?,
            u.int_in_range(0u8..=2)?,
            u.int_in_range(0u8..=2)?,
        ],
    };
    Ok(TensorData::new(c, kinds, w, g, s))
}

impl TensorData {
    /// Borrowed views of the buffers in this tensor's storage kinds.
    pub fn views(&mut self) -> (Weights<'_>, Grads<'_>, [State<'_>; 3]) {
        let (o, e) = (self.c.off, self.c.off + self.c.len);
        let rounding = [
            Rounding::NearestEven,
            Rounding::Stochastic,
            Rounding::TowardZero,
        ];
        let weights = match self.kinds.w {
            0 => Weights::F32(&mut self.w32[o..e]),
            1 => Weights::Split {
                top: &mut self.top[o..e],
                trail: &mut self.trail[o..e],
            },
            k => Weights::Bf16(&mut self.top[o..e], rounding[usize::from(k - 2)]),
        };
        let grads = if self.kinds.g == 0 {
            Grads::F32(&self.g32[o..e])
        } else {
            Grads::Bf16(&self.g16[o..e])
        };
        let [a, b, c] = &mut self.s32;
        let [a16, b16, c16] = &mut self.s16;
        fn mk<'a>(k: u8, o: usize, e: usize, f: &'a mut [f32], h: &'a mut [bf16]) -> State<'a> {
            match k {
                0 => State::F32(&mut f[o..e]),
                1 => State::Bf16(&mut h[o..e], Rounding::NearestEven),
                _ => State::Bf16(&mut h[o..e], Rounding::Stochastic),
            }
        }
        let states = [
            mk(self.kinds.s[0], o, e, a, a16),
            mk(self.kinds.s[1], o, e, b, b16),
            mk(self.kinds.s[2], o, e, c, c16),
        ];
        (weights, grads, states)
    }

    /// Every buffer's bit patterns (gradients included: they must stay untouched).
    pub fn bits(&self) -> Vec<u32> {
        let mut b: Vec<u32> = self.w32.iter().map(|x| x.to_bits()).collect();
        let b16 = |v: &Vec<bf16>| v.iter().map(|x| u32::from(x.to_bits())).collect::<Vec<_>>();
        b.extend(b16(&self.top));
        b.extend(self.trail.iter().map(|&x| u32::from(x)));
        b.extend(self.g32.iter().map(|x| x.to_bits()));
        b.extend(b16(&self.g16));
        for i in 0..3 {
            b.extend(self.s32[i].iter().map(|x| x.to_bits()));
            b.extend(b16(&self.s16[i]));
        }
        b
    }
}

/// One optimizer step to compare: the configuration and which optional state buffers to pass.
#[derive(Clone, Copy, Debug)]
pub enum OptimizerStep {
    /// SGD; `true` passes the momentum buffer (state slot 0).
    Sgd(SgdConfig, bool),
    /// Adagrad (sum in state slot 1).
    Adagrad(AdagradConfig),
    /// Adam / AdamW; `true` passes the AMSGrad buffer (state slot 2).
    Adam(AdamConfig, bool),
    /// LAMB.
    Lamb(LambConfig),
}

impl OptimizerStep {
    /// Runs the step on `e` over `d`'s buffers.
    pub fn run(&self, e: Engine, d: &mut TensorData) -> crate::Result<()> {
        let c = d.c;
        let (weights, grads, [s0, s1, s2]) = d.views();
        match *self {
            OptimizerStep::Sgd(cfg, give) => e.sgd_step(
                &cfg,
                &c.ctx,
                &mut SgdTensor {
                    weights,
                    grads,
                    momentum: give.then_some(s0),
                    stream: c.stream,
                },
            ),
            OptimizerStep::Adagrad(cfg) => e.adagrad_step(
                &cfg,
                &c.ctx,
                &mut AdagradTensor {
                    weights,
                    grads,
                    sum: s1,
                    stream: c.stream,
                },
            ),
            OptimizerStep::Adam(cfg, give) => e.adam_step(
                &cfg,
                &c.ctx,
                &mut AdamTensor {
                    weights,
                    grads,
                    exp_avg: s0,
                    exp_avg_sq: s1,
                    max_exp_avg_sq: give.then_some(s2),
                    stream: c.stream,
                },
            ),
            OptimizerStep::Lamb(cfg) => e.lamb_step(
                &cfg,
                &c.ctx,
                &mut LambTensor {
                    weights,
                    grads,
                    exp_avg: s0,
                    exp_avg_sq: s1,
                    stream: c.stream,
                },
            ),
        }
    }
}

impl OptimizerStep {
    /// Runs the step as one group call over all of `ds` (with `ds[0]`'s seed, step and replica)
    /// on `e` and `threads`, with a fresh workspace.
    pub fn run_group(
        &self,
        e: Engine,
        ds: &mut [TensorData],
        threads: &Threads,
    ) -> crate::Result<()> {
        fn group<C: Step>(
            e: Engine,
            cfg: &C,
            ctx: &StepContext,
            mut ts: Vec<C::Tensor<'_>>,
            threads: &Threads,
        ) -> crate::Result<()> {
            let mut ws = C::Workspace::default();
            C::reserve(&mut ws, &ts);
            e.step_group(cfg, ctx, &mut ts, &mut ws, threads)
        }
        let Some(first) = ds.first() else {
            return Ok(());
        };
        let ctx = first.c.ctx;
        let parts = ds.iter_mut().map(|d| {
            let stream = d.c.stream;
            let (w, g, s) = d.views();
            (w, g, s, stream)
        });
        match *self {
            OptimizerStep::Sgd(cfg, give) => {
                let ts = parts
                    .map(|(weights, grads, [s0, ..], stream)| SgdTensor {
                        weights,
                        grads,
                        momentum: give.then_some(s0),
                        stream,
                    })
                    .collect();
                group(e, &cfg, &ctx, ts, threads)
            }
            OptimizerStep::Adagrad(cfg) => {
                let ts = parts
                    .map(|(weights, grads, [_, sum, _], stream)| AdagradTensor {
                        weights,
                        grads,
                        sum,
                        stream,
                    })
                    .collect();
                group(e, &cfg, &ctx, ts, threads)
            }
            OptimizerStep::Adam(cfg, give) => {
                let ts = parts
                    .map(|(weights, grads, [s0, s1, s2], stream)| AdamTensor {
                        weights,
                        grads,
                        exp_avg: s0,
                        exp_avg_sq: s1,
                        max_exp_avg_sq: give.then_some(s2),
                        stream,
                    })
                    .collect();
                group(e, &cfg, &ctx, ts, threads)
            }
            OptimizerStep::Lamb(cfg) => {
                let ts = parts
                    .map(|(weights, grads, [s0, s1, _], stream)| LambTensor {
                        weights,
                        grads,
                        exp_avg: s0,
                        exp_avg_sq: s1,
                        stream,
                    })
                    .collect();
                group(e, &cfg, &ctx, ts, threads)
            }
        }
    }
}

/// Runs `step` on the reference and on every other available backend, each on a fresh copy of
/// `data`, and reports the first difference in result or in any output bit.
pub fn compare_step(step: &OptimizerStep, data: &TensorData) -> Result<(), String> {
    compare(
        &(step, data.c, data.kinds),
        data,
        TensorData::bits,
        |e, d| step.run(e, d),
    )?;
    if let OptimizerStep::Lamb(_) = step {
        // A group step keeps each direction from pass 1 for pass 2 in its workspace (small
        // groups); the single-tensor step recomputes it. Both must give the reference's bits.
        compare(
            &(step, data.c, data.kinds, "group step, directions kept"),
            data,
            TensorData::bits,
            |e, d| step.run_group(e, core::slice::from_mut(d), &Threads::current()),
        )?;
    }
    Ok(())
}

fn sgd(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&sgd_step(u)?, &data))
}

fn sgd_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
    let cfg = SgdConfig {
        lr: hyper(u, &[1e-3, 0.1, 1.0])?,
        momentum: hyper(u, &[0.0, 0.9, 0.5])?,
        dampening: hyper(u, &[0.0, 0.1])?,
        weight_decay: hyper(u, &[0.0, 1e-4, 0.1])?,
        nesterov: bool::arbitrary(u)?,
        maximize: bool::arbitrary(u)?,
    };
    Ok(OptimizerStep::Sgd(cfg, bool::arbitrary(u)?))
}

fn adagrad(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&adagrad_step(u)?, &data))
}

fn adagrad_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
    let cfg = AdagradConfig {
        lr: hyper(u, &[1e-2, 0.1])?,
        lr_decay: hyper(u, &[0.0, 0.01])?,
        weight_decay: hyper(u, &[0.0, 1e-4])?,
        eps: hyper(u, &[1e-10, 1e-6])?,
        initial_accumulator_value: hyper(u, &[0.0, 0.1])?,
        maximize: bool::arbitrary(u)?,
    };
    Ok(OptimizerStep::Adagrad(cfg))
}

fn adam(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&adam_step(u)?, &data))
}

fn adam_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
    let cfg = AdamConfig {
        lr: hyper(u, &[1e-3, 1e-2])?,
        beta1: hyper(u, &[0.9, 0.0, 0.5])?,
        beta2: hyper(u, &[0.999, 0.0, 0.95])?,
        eps: hyper(u, &[1e-8, 1e-6])?,
        weight_decay: hyper(u, &[0.0, 0.01, 0.1])?,
        decoupled_weight_decay: bool::arbitrary(u)?,
        amsgrad: bool::arbitrary(u)?,
        maximize: bool::arbitrary(u)?,
    };
    Ok(OptimizerStep::Adam(cfg, bool::arbitrary(u)?))
}

fn lamb(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&lamb_step(u)?, &data))
}

fn lamb_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
    let cfg = LambConfig {
        lr: hyper(u, &[1e-3, 1e-2])?,
        beta1: hyper(u, &[0.9, 0.0])?,
        beta2: hyper(u, &[0.999, 0.95])?,
        eps: hyper(u, &[1e-6, 1e-8])?,
        weight_decay: hyper(u, &[0.0, 0.01])?,
        max_trust_ratio: if bool::arbitrary(u)? {
            Some(hyper(u, &[1.0, 10.0])?)
        } else {
            None
        },
    };
    Ok(OptimizerStep::Lamb(cfg))
}

/// Pools of 1 to 4 threads, made once per process.
fn pools() -> &'static [Arc<ThreadPool>] {
    static POOLS: OnceLock<Vec<Arc<ThreadPool>>> = OnceLock::new();
    POOLS.get_or_init(|| {
        (1..=4)
            .map(|n| {
                Arc::new(
                    rayon_core::ThreadPoolBuilder::new()
                        .num_threads(n)
                        .build()
                        .expect("a thread pool"),
                )
            })
            .collect()
    })
}

fn group(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let n = u.int_in_range(1usize..=4)?;
    let mut data = Vec::with_capacity(n);
    for i in 0..n {
        let mut d = tensor(u, if i == 0 { 520 } else { 6000 })?;
        if let Some(first) = data.first() {
            let first: &TensorData = first;
            d.c.ctx = first.c.ctx;
        }
        data.push(d);
    }
    let step = match u.int_in_range(0u8..=3)? {
        0 => sgd_step(u)?,
        1 => adagrad_step(u)?,
        2 => adam_step(u)?,
        _ => lamb_step(u)?,
    };
    let grain = [1, 3 * crate::SPLIT_ALIGN, crate::DEFAULT_GRAIN][u.choose_index(3)?];
    Ok(compare_group(&step, &data, grain))
}

/// Steps `data` as one group on the reference on the calling thread, checks that against each
/// tensor stepped alone, then runs every backend on pools of 1 to 4 threads with `grain` and
/// reports the first difference in result or bits.
pub fn compare_group(
    step: &OptimizerStep,
    data: &[TensorData],
    grain: usize,
) -> Result<(), String> {
    let all_bits = |ds: &[TensorData]| ds.iter().flat_map(TensorData::bits).collect::<Vec<_>>();
    let mut want_data = data.to_vec();
    let want = step.run_group(reference(), &mut want_data, &Threads::current());
    let want_bits = all_bits(&want_data);
    // A group is all or nothing: accepted, it equals each tensor stepped alone; refused, it
    // wrote nothing.
    let mut alone = data.to_vec();
    let alone_ok = alone
        .iter_mut()
        .map(|d| step.run(reference(), d))
        .all(|r| r.is_ok());
    match &want {
        Ok(()) if !alone_ok => {
            return Err(format!("group accepted, a tensor alone refused: {step:?}"));
        }
        Ok(()) if all_bits(&alone) != want_bits => {
            return Err(format!(
                "group differs from tensors stepped alone: {step:?}"
            ));
        }
        Err(e) if all_bits(data) != want_bits => {
            return Err(format!("refused group ({e}) was written: {step:?}"));
        }
        _ => {}
    }
    let mut engines = backends();
    engines.push(reference());
    for e in engines {
        for (i, pool) in pools().iter().enumerate() {
            let mut d = data.to_vec();
            let got = step.run_group(e, &mut d, &Threads::pool(pool.clone()).with_grain(grain));
            let got_bits = all_bits(&d);
            if got != want || got_bits != want_bits {
                let at = got_bits.iter().zip(&want_bits).position(|(a, b)| a != b);
                return Err(format!(
                    "{} on {} threads, grain {grain}: result {got:?} (reference {want:?}), first different word {at:?}\nstep: {step:?}",
                    e.backend(),
                    i + 1
                ));
            }
        }
    }
    Ok(())
}

/// Checks of private invariants, for `tests/internals.rs` (and Miri): each panics on a failure.
/// They live here rather than in `#[cfg(test)]` modules so that `cargo test` compiles the library
/// once, not a second time as its own test harness.
pub mod internals {
    /// The vector ARS fill's span caches, as words and split into chunks, against the reference
    /// on every backend.
    pub fn random_bit_fill() {
        crate::kernels::checks::fill_matches_the_reference_on_every_backend();
    }

    /// `HALFSTEP_PREFETCH` values, and `auto` on exactly for Intel CPUs.
    pub fn prefetch_setting() {
        crate::cpu::checks::prefetch_setting_reads_on_off_auto();
        crate::cpu::checks::prefetch_pays_on_intel_only();
    }

    /// How many LAMB norm blocks a piece of a tensor touches.
    pub fn block_counts() {
        crate::parallel::checks::block_counts();
    }
}
