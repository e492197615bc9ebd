//! The optimizer cases: one tensor of each optimizer over any storage kinds, and groups on
//! several thread pools.

use super::*;

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

pub(super) fn tensor(u: &mut Unstructured<'_>, max_len: usize) -> AResult<TensorData> {
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
    if let OptimizerStep::Lamb(cfg) = step {
        // A group step keeps each direction from pass 1 for pass 2 in its workspace (small
        // groups); the single-tensor step recomputes it. Both must give the reference's bits.
        compare(
            &(step, data.c, data.kinds, "group step, directions kept"),
            data,
            TensorData::bits,
            |e, d| step.run_group(e, core::slice::from_mut(d), &Threads::current()),
        )?;
        // Pass 1's block sums themselves: an error in their order or lanes seldom reaches the
        // weights, since the trust ratio is rounded to f32.
        compare(
            &(step, data.c, data.kinds, "pass 1's block sums"),
            data,
            TensorData::bits,
            |e, d| lamb_block_sums(cfg, e, d),
        )?;
    }
    Ok(())
}

/// LAMB's pass 1 alone over `d` on `e` (the moments stored, as the step stores them): the bits
/// of each norm block's sums of squares of p and of u, every NaN as one (a NaN sum makes the
/// trust ratio NaN whatever its payload: SPEC.md §6.5, only its being NaN is observable).
fn lamb_block_sums(
    cfg: &LambConfig,
    e: Engine,
    d: &mut TensorData,
) -> crate::Result<Vec<[u64; 2]>> {
    use crate::optim::Step;
    let c = d.c;
    let (weights, grads, [s0, s1, _]) = d.views();
    let mut t = LambTensor {
        weights,
        grads,
        exp_avg: s0,
        exp_avg_sq: s1,
        stream: c.stream,
    };
    // The checks of the step (`Step::step_one`), so that pass 1 sees only what it would.
    Step::validate(cfg)?;
    crate::optim::require_step(&c.ctx)?;
    cfg.check_tensor(&t)?;
    let mut sums =
        vec![[0.0f64; 2]; crate::reference::norm::spanned_blocks(c.stream.index_base, c.len)];
    (e.k.lamb_pass1)(
        &cfg.consts(c.ctx.step),
        &c.ctx,
        &mut t,
        &mut sums,
        None,
        Default::default(),
    );
    let bits = |x: f64| {
        if x.is_nan() {
            f64::NAN.to_bits()
        } else {
            x.to_bits()
        }
    };
    Ok(sums.iter().map(|s| s.map(bits)).collect())
}

pub(super) fn sgd(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&sgd_step(u)?, &data))
}

pub(super) fn sgd_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
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

pub(super) fn adagrad(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&adagrad_step(u)?, &data))
}

pub(super) fn adagrad_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
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

pub(super) fn adam(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&adam_step(u)?, &data))
}

pub(super) fn adam_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
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

pub(super) fn lamb(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
    let data = tensor(u, 520)?;
    Ok(compare_step(&lamb_step(u)?, &data))
}

pub(super) fn lamb_step(u: &mut Unstructured<'_>) -> AResult<OptimizerStep> {
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
pub(super) fn pools() -> &'static [Arc<ThreadPool>] {
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

/// Teams of 2 to 4 members (the calling thread and threads of the team's own), made once.
fn teams() -> &'static [Threads] {
    static TEAMS: OnceLock<Vec<Threads>> = OnceLock::new();
    TEAMS.get_or_init(|| {
        (2..=4)
            .map(|n| Threads::calling_thread_pool(n).expect("a team"))
            .collect()
    })
}

pub(super) fn group(u: &mut Unstructured<'_>) -> AResult<Result<(), String>> {
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
/// tensor stepped alone, then runs every backend on rayon pools of 1 to 4 threads and teams of 2
/// to 4 with `grain` and reports the first difference in result or bits.
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
    let setups = pools()
        .iter()
        .enumerate()
        .map(|(i, pool)| (format!("{} threads", i + 1), Threads::pool(pool.clone())))
        .chain(
            teams()
                .iter()
                .enumerate()
                .map(|(i, team)| (format!("a team of {}", i + 2), team.clone())),
        )
        .collect::<Vec<_>>();
    for e in engines {
        for (name, threads) in &setups {
            let mut d = data.to_vec();
            let got = step.run_group(e, &mut d, &threads.clone().with_grain(grain));
            let got_bits = all_bits(&d);
            if got != want || got_bits != want_bits {
                let at = got_bits.iter().zip(&want_bits).position(|(a, b)| a != b);
                return Err(format!(
                    "{} on {name}, grain {grain}: result {got:?} (reference {want:?}), first different word {at:?}\nstep: {step:?}",
                    e.backend(),
                ));
            }
        }
    }
    Ok(())
}
