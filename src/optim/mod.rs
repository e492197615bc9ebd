//! The safe optimizer API: hyperparameter configs (validated), the constants each step derives
//! from them on the host (in f64, SPEC.md §6.1), per-tensor argument bundles, the stateless step
//! functions, and [`Optimizer`], which owns the step counter and seed that make a run
//! checkpointable.
//!
//! Every step function validates everything first and only then writes; an `Err` means no
//! buffer was touched. Nothing on the step path allocates.

mod adagrad;
mod adam;
mod lamb;
mod sgd;

pub use adagrad::{AdagradConfig, adagrad_step};
pub use adam::{AdamConfig, adam_step};
pub use lamb::{LambConfig, LambWorkspace, lamb_step};
pub use sgd::{SgdConfig, sgd_step};

pub use crate::reference::adagrad::AdagradConsts;
pub use crate::reference::adam::AdamConsts;
pub use crate::reference::lamb::LambConsts;
pub use crate::reference::sgd::SgdConsts;
pub use crate::tensors::{AdagradTensor, AdamTensor, LambTensor, Pieces, SgdTensor};

use crate::dispatch::Engine;
use crate::error::{Error, Result, require};
use crate::parallel::{self, Leaf, Threads};
use crate::rng::StepContext;

/// `base^exp` by binary exponentiation in f64, in exactly this order, so that any language
/// reproduces it (libm `pow` is not correctly rounded everywhere). SPEC.md §6.1; the same bits as
/// [`crate::reference::powi`], which writes the loop as the SPEC does.
pub fn powi_f64(base: f64, mut exp: u32) -> f64 {
    let mut result = 1.0f64;
    let mut b = base;
    while exp > 0 {
        // `result *= b` where the bit is set, else `result *= 1.0` (exact): the factor chosen by
        // a mask, as LLVM keeps a branch on the step's bits for an `if`, and those bits change at
        // every step (Zen 5 VM: a 16-element Adam call 0.445 → 0.38 µs, a 4K-element step on two
        // threads 0.91-0.93x the time).
        let mask = 0u64.wrapping_sub(u64::from(exp & 1));
        result *= f64::from_bits(b.to_bits() & mask | 1.0f64.to_bits() & !mask);
        b *= b;
        exp >>= 1;
    }
    result
}

fn require_nonneg(name: &'static str, value: f32) -> Result<()> {
    require(
        value.is_finite() && value >= 0.0,
        name,
        value,
        "finite and >= 0",
    )
}

fn require_beta(name: &'static str, value: f32) -> Result<()> {
    require((0.0..1.0).contains(&value), name, value, "in [0, 1)")
}

fn require_eps(value: f32) -> Result<()> {
    require(
        value.is_finite() && value > 0.0,
        "eps",
        value,
        "finite and > 0",
    )
}

pub(crate) fn require_step(ctx: &StepContext) -> Result<()> {
    if ctx.step == 0 {
        return Err(Error::StepZero);
    }
    ctx.replica.slot().map(|_| ())
}

/// An optimizer configuration: how to check and step one tensor, and a parameter group on many
/// threads. [`Optimizer`] and [`Engine::step_group`] drive it.
pub trait Step: Pieces {
    /// Scratch memory a group step needs, made once and reused (LAMB's per-block norms); `()`
    /// for the optimizers that need none.
    type Workspace: Clone + core::fmt::Debug + Default + Send;

    /// Checks the hyperparameters.
    fn validate(&self) -> Result<()>;
    /// Checks one tensor's buffers against this configuration (no writes).
    fn check_tensor(&self, t: &Self::Tensor<'_>) -> Result<()>;
    /// Steps one tensor on `engine`. Must only be called after both checks passed.
    fn step_checked(&self, engine: &Engine, ctx: &StepContext, t: &mut Self::Tensor<'_>);

    /// Grows `ws` to fit `tensors` (allocates only if it is too small).
    fn reserve(ws: &mut Self::Workspace, tensors: &[Self::Tensor<'_>]);
    /// Checks that `ws` fits `tensors`.
    fn check_workspace(ws: &Self::Workspace, tensors: &[Self::Tensor<'_>]) -> Result<()>;
    /// Steps a group on `engine` and `threads`. Must only be called after every check passed.
    fn step_group_checked(
        &self,
        engine: &Engine,
        ctx: &StepContext,
        tensors: &mut [Self::Tensor<'_>],
        ws: &mut Self::Workspace,
        threads: &Threads,
    );

    /// Checks everything a group step needs, writing nothing.
    fn check_group(
        &self,
        ctx: &StepContext,
        tensors: &[Self::Tensor<'_>],
        ws: &Self::Workspace,
    ) -> Result<()> {
        self.validate()?;
        require_step(ctx)?;
        for t in tensors {
            self.check_tensor(t)?;
        }
        Self::check_workspace(ws, tensors)
    }

    /// Validates everything, then steps one tensor on `engine`.
    fn step_one(&self, engine: &Engine, ctx: &StepContext, t: &mut Self::Tensor<'_>) -> Result<()> {
        self.validate()?;
        require_step(ctx)?;
        self.check_tensor(t)?;
        self.step_checked(engine, ctx, t);
        Ok(())
    }
}

/// Runs an element-wise optimizer's single-tensor step on every piece of a group.
struct EachPiece<'c, C> {
    config: &'c C,
    engine: &'c Engine,
    ctx: &'c StepContext,
}

impl<C: Step> Leaf<C, ()> for EachPiece<'_, C> {
    fn run(&self, mut t: C::Tensor<'_>, _: ()) {
        self.config.step_checked(self.engine, self.ctx, &mut t);
    }
}

/// The group step of an optimizer whose update is element-wise (SGD, Adagrad, Adam): every
/// piece is stepped on its own; the pieces' bits are the whole tensor's (SPEC.md §3.2).
fn elementwise_group<C: Step>(
    config: &C,
    engine: &Engine,
    ctx: &StepContext,
    tensors: &mut [C::Tensor<'_>],
    threads: &Threads,
) {
    let total = parallel::group_len::<C>(tensors);
    let leaf = EachPiece {
        config,
        engine: &engine.for_step(total),
        ctx,
    };
    parallel::for_group::<C, (), _>(threads, tensors, (), &leaf);
}

/// [`Pieces`] for an optimizer configuration, through its tensor type's own methods.
macro_rules! tensor_pieces {
    ($config:ident, $tensor:ident) => {
        impl $crate::tensors::Pieces for $config {
            type Tensor<'a> = $tensor<'a>;

            fn tensor_len(t: &$tensor<'_>) -> usize {
                t.len()
            }
            fn tensor_base(t: &$tensor<'_>) -> u64 {
                t.stream.index_base
            }
            fn reborrow<'s>(t: &'s mut $tensor<'_>) -> $tensor<'s> {
                t.reborrow()
            }
            fn split_at<'s>(t: $tensor<'s>, mid: usize) -> ($tensor<'s>, $tensor<'s>)
            where
                Self: 's,
            {
                t.split_at(mid)
            }
            #[allow(unsafe_code)]
            unsafe fn piece<'b>(t: &'b $tensor<'_>, start: usize, len: usize) -> $tensor<'b> {
                // SAFETY: the trait's contract is the method's.
                unsafe { t.piece(start, len) }
            }
        }
    };
}
use tensor_pieces;

/// The [`Step`] items shared by the element-wise optimizers: no workspace, [`elementwise_group`].
macro_rules! elementwise_step_items {
    ($tensor:ident) => {
        type Workspace = ();

        fn reserve(_: &mut (), _: &[$tensor<'_>]) {}
        fn check_workspace(_: &(), _: &[$tensor<'_>]) -> $crate::Result<()> {
            Ok(())
        }
        fn step_group_checked(
            &self,
            engine: &$crate::Engine,
            ctx: &$crate::StepContext,
            tensors: &mut [$tensor<'_>],
            _: &mut (),
            threads: &$crate::Threads,
        ) {
            super::elementwise_group(self, engine, ctx, tensors, threads)
        }
    };
}
use elementwise_step_items;

/// A configured optimizer with its RNG state (seed, step count): the part of a run's state that
/// is not in the tensors. [`Optimizer::checkpoint`] and [`Optimizer::resume`] save and restore it.
#[derive(Clone, Debug)]
pub struct Optimizer<C: Step> {
    config: C,
    seed: u64,
    steps_taken: u32,
    engine: Engine,
    threads: Threads,
    workspace: C::Workspace,
}

/// The RNG state of an [`Optimizer`]: seed and number of steps taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Checkpoint {
    /// The run's seed.
    pub seed: u64,
    /// Steps taken so far (the next step is `steps_taken + 1`).
    pub steps_taken: u32,
}

impl Checkpoint {
    /// The random-bit layout the blob's steps draw from: 4 is ARS-5 with the second moment's bits
    /// taken from the first moment's stream and AMSGrad's maximum rounded with the second
    /// moment's (SPEC.md §3.2). A blob of version 1 (Philox4x32-10 bits), 2 (ARS-5, the second
    /// moment with a stream of its own) or 3 (AMSGrad's maximum with a stream of its own) is read
    /// as the same seed and step count, and its run continues with version 4's bits.
    const VERSION: u32 = 4;

    /// 16 bytes: version, seed, steps taken (little-endian u32, u64, u32).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&Self::VERSION.to_le_bytes());
        b[4..12].copy_from_slice(&self.seed.to_le_bytes());
        b[12..16].copy_from_slice(&self.steps_taken.to_le_bytes());
        b
    }

    /// Parses [`Checkpoint::to_bytes`]'s output.
    pub fn from_bytes(b: &[u8]) -> Result<Checkpoint> {
        let b: &[u8; 16] = b.try_into().map_err(|_| Error::BadCheckpoint)?;
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if !(1..=Self::VERSION).contains(&word(0)) {
            return Err(Error::BadCheckpoint);
        }
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&b[4..12]);
        Ok(Checkpoint {
            seed: u64::from_le_bytes(seed),
            steps_taken: word(12),
        })
    }
}

impl<C: Step> Optimizer<C> {
    /// A new run with `seed`, no steps taken. Fails on invalid hyperparameters.
    pub fn new(config: C, seed: u64) -> Result<Optimizer<C>> {
        Optimizer::resume(
            config,
            Checkpoint {
                seed,
                steps_taken: 0,
            },
        )
    }

    /// Continues a run from a checkpoint, on the process-wide [`Engine::global`].
    pub fn resume(config: C, checkpoint: Checkpoint) -> Result<Optimizer<C>> {
        config.validate()?;
        Ok(Optimizer {
            config,
            seed: checkpoint.seed,
            steps_taken: checkpoint.steps_taken,
            engine: Engine::global()?,
            threads: Threads::global(),
            workspace: C::Workspace::default(),
        })
    }

    /// The same optimizer running its kernels on `engine` (any backend gives the same bits).
    pub fn on(self, engine: Engine) -> Optimizer<C> {
        Optimizer { engine, ..self }
    }

    /// The same optimizer running on `threads` (any number of threads gives the same bits).
    /// The default is [`Threads::global`].
    pub fn with_threads(self, threads: Threads) -> Optimizer<C> {
        Optimizer { threads, ..self }
    }

    /// Where the steps run.
    pub fn threads(&self) -> &Threads {
        &self.threads
    }

    /// Makes the workspace fit `tensors` now, so that no step allocates (LAMB; a no-op for the
    /// others). Without it, the first step of a group larger than any before grows it.
    pub fn reserve(&mut self, tensors: &[C::Tensor<'_>]) {
        C::reserve(&mut self.workspace, tensors);
    }

    /// The engine the kernels run on.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The hyperparameters.
    pub fn config(&self) -> &C {
        &self.config
    }

    /// The RNG state to save with the tensors.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            seed: self.seed,
            steps_taken: self.steps_taken,
        }
    }

    /// Takes one step over all `tensors` (a parameter group) with bits shared by all replicas,
    /// on this optimizer's engine and threads. Every tensor is checked before any is written; on
    /// error nothing changes, the step count included.
    pub fn step(&mut self, tensors: &mut [C::Tensor<'_>]) -> Result<()> {
        self.step_with_replica(tensors, crate::rng::Replica::Identical)
    }

    /// As [`Optimizer::step`], with the given replica mode for the rounding bits.
    pub fn step_with_replica(
        &mut self,
        tensors: &mut [C::Tensor<'_>],
        replica: crate::rng::Replica,
    ) -> Result<()> {
        let step = self.steps_taken.checked_add(1).ok_or(Error::StepOverflow)?;
        let ctx = StepContext {
            seed: self.seed,
            step,
            replica,
        };
        replica.slot()?;
        for t in tensors.iter() {
            self.config.check_tensor(t)?;
        }
        C::reserve(&mut self.workspace, tensors);
        self.config.step_group_checked(
            &self.engine,
            &ctx,
            tensors,
            &mut self.workspace,
            &self.threads,
        );
        self.steps_taken = step;
        Ok(())
    }
}

impl Engine {
    /// One step of `config` over a parameter group, on this engine's backend and `threads`:
    /// the stateless form of [`Optimizer::step`] (the caller keeps the seed and step count in
    /// `ctx`). Every tensor, and the workspace (`&mut ()` for all but LAMB; see
    /// `LambWorkspace`), is checked before anything is written. Never allocates.
    pub fn step_group<C: Step>(
        &self,
        config: &C,
        ctx: &StepContext,
        tensors: &mut [C::Tensor<'_>],
        workspace: &mut C::Workspace,
        threads: &Threads,
    ) -> Result<()> {
        config.check_group(ctx, tensors, workspace)?;
        config.step_group_checked(self, ctx, tensors, workspace, threads);
        Ok(())
    }

    /// [`sgd_step`] on this engine's backend.
    pub fn sgd_step(
        &self,
        config: &SgdConfig,
        ctx: &StepContext,
        t: &mut SgdTensor<'_>,
    ) -> Result<()> {
        config.step_one(self, ctx, t)
    }

    /// [`adagrad_step`] on this engine's backend.
    pub fn adagrad_step(
        &self,
        config: &AdagradConfig,
        ctx: &StepContext,
        t: &mut AdagradTensor<'_>,
    ) -> Result<()> {
        config.step_one(self, ctx, t)
    }

    /// [`adam_step`] on this engine's backend.
    pub fn adam_step(
        &self,
        config: &AdamConfig,
        ctx: &StepContext,
        t: &mut AdamTensor<'_>,
    ) -> Result<()> {
        config.step_one(self, ctx, t)
    }

    /// [`lamb_step`] on this engine's backend.
    pub fn lamb_step(
        &self,
        config: &LambConfig,
        ctx: &StepContext,
        t: &mut LambTensor<'_>,
    ) -> Result<()> {
        config.step_one(self, ctx, t)
    }
}

/// Checks of how a team's members take their pieces, run by `tests/internals.rs` (and Miri).
#[cfg(feature = "fuzzing")]
pub(crate) mod checks {
    use super::*;
    use crate::reference::round::Rounding;
    use crate::rng::TensorStream;
    use crate::storage::{Grads, State, Weights};
    use half::bf16;

    /// Writes each element's global index into every buffer of its piece, after checking that the
    /// grads hold it.
    struct MarkIndices;

    impl Leaf<AdamConfig, ()> for MarkIndices {
        fn run(&self, t: AdamTensor<'_>, _: ()) {
            let base = t.stream.index_base as usize;
            let Grads::F32(g) = t.grads else {
                panic!("f32 grads")
            };
            for (i, &x) in g.iter().enumerate() {
                assert_eq!(x, (base + i) as f32, "grads at {}", base + i);
            }
            let (
                Weights::Split { top, trail },
                State::F32(m),
                State::Bf16(v, _),
                Some(State::F32(x)),
            ) = (t.weights, t.exp_avg, t.exp_avg_sq, t.max_exp_avg_sq)
            else {
                panic!("the storage this check builds")
            };
            for i in 0..top.len() {
                let k = base + i;
                top[i] = bf16::from_bits(k as u16);
                trail[i] = (k as u16).swap_bytes();
                m[i] = k as f32;
                v[i] = bf16::from_bits(!(k as u16));
                x[i] = -(k as f32);
            }
        }
    }

    /// A team of three with the finest grain cuts a 4500-element tensor at 4096 and gives its two
    /// pieces to two members, which write them at once through `Pieces::piece` (Miri checks that
    /// their borrows of the buffers do not overlap); every element of every buffer is written
    /// once, with its own index.
    pub(crate) fn members_take_pieces_of_one_tensor_at_once() {
        let lens = [4500, 2100];
        let total: usize = lens.iter().sum();
        let grads: Vec<f32> = (0..total).map(|k| k as f32).collect();
        let mut top = vec![bf16::ZERO; total];
        let mut trail = vec![0u16; total];
        let mut m = vec![0f32; total];
        let mut v = vec![bf16::ZERO; total];
        let mut x = vec![0f32; total];
        {
            let (mut top, mut trail, mut m, mut v, mut x) = (
                top.as_mut_slice(),
                trail.as_mut_slice(),
                m.as_mut_slice(),
                v.as_mut_slice(),
                x.as_mut_slice(),
            );
            let mut ts = Vec::new();
            let mut base = 0;
            for len in lens {
                let (t0, t1) = top.split_at_mut(len);
                let (l0, l1) = trail.split_at_mut(len);
                let (m0, m1) = m.split_at_mut(len);
                let (v0, v1) = v.split_at_mut(len);
                let (x0, x1) = x.split_at_mut(len);
                (top, trail, m, v, x) = (t1, l1, m1, v1, x1);
                ts.push(AdamTensor {
                    weights: Weights::Split { top: t0, trail: l0 },
                    grads: Grads::F32(&grads[base..base + len]),
                    exp_avg: State::F32(m0),
                    exp_avg_sq: State::Bf16(v0, Rounding::Stochastic),
                    max_exp_avg_sq: Some(State::F32(x0)),
                    stream: TensorStream {
                        id: 0,
                        index_base: base as u64,
                    },
                });
                base += len;
            }
            let team = Threads::calling_thread_pool(3).unwrap().with_grain(1);
            parallel::for_group::<AdamConfig, (), _>(&team, &mut ts, (), &MarkIndices);
        }
        for k in 0..total {
            assert_eq!(top[k].to_bits(), k as u16, "top at {k}");
            assert_eq!(trail[k], (k as u16).swap_bytes(), "trail at {k}");
            assert_eq!(m[k], k as f32, "exp_avg at {k}");
            assert_eq!(v[k].to_bits(), !(k as u16), "exp_avg_sq at {k}");
            assert_eq!(x[k], -(k as f32), "max_exp_avg_sq at {k}");
        }
    }
}
