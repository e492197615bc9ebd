use super::{Step, powi_f64, require_beta, require_eps, require_nonneg};
use crate::dispatch::Engine;
use crate::error::{Error, Result, require};
use crate::kernels::optim::StepLen;
use crate::parallel::{self, Leaf, Threads};
use crate::reference::lamb::LambConsts;
use crate::reference::lamb::scaled_lr;
use crate::reference::norm::{NORM_BLOCK, spanned_blocks};
use crate::rng::StepContext;
use crate::tensors::LambTensor;

/// LAMB hyperparameters (NVLAMB, as in IPEX's fused LAMB: bias-corrected Adam direction plus
/// decoupled weight decay, scaled per tensor by the trust ratio ‖p‖ / ‖u‖).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LambConfig {
    /// Learning rate: finite, >= 0.
    pub lr: f32,
    /// First-moment decay, in [0, 1).
    pub beta1: f32,
    /// Second-moment decay, in [0, 1).
    pub beta2: f32,
    /// Added after the square root: finite, > 0.
    pub eps: f32,
    /// Decoupled weight decay added to the update direction: finite, >= 0.
    pub weight_decay: f32,
    /// Upper clamp of the trust ratio: finite and > 0 when given.
    pub max_trust_ratio: Option<f32>,
}

impl Default for LambConfig {
    fn default() -> Self {
        LambConfig {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-6,
            weight_decay: 0.01,
            max_trust_ratio: None,
        }
    }
}

impl LambConfig {
    /// Checks every hyperparameter.
    pub fn validate(&self) -> Result<()> {
        require_nonneg("lr", self.lr)?;
        require_beta("beta1", self.beta1)?;
        require_beta("beta2", self.beta2)?;
        require_eps(self.eps)?;
        require_nonneg("weight_decay", self.weight_decay)?;
        if let Some(m) = self.max_trust_ratio {
            require(
                m.is_finite() && m > 0.0,
                "max_trust_ratio",
                m,
                "finite and > 0",
            )?;
        }
        Ok(())
    }

    /// The constants for `step` (>= 1).
    pub fn consts(&self, step: u32) -> LambConsts {
        let bc1 = 1.0 - powi_f64(f64::from(self.beta1), step);
        let bc2 = 1.0 - powi_f64(f64::from(self.beta2), step);
        LambConsts {
            one_minus_beta1: (1.0 - f64::from(self.beta1)) as f32,
            beta2: self.beta2,
            one_minus_beta2: (1.0 - f64::from(self.beta2)) as f32,
            inv_bc1: (1.0 / bc1) as f32,
            inv_bc2: (1.0 / bc2) as f32,
            eps: self.eps,
            weight_decay: self.weight_decay,
            lr: self.lr,
            max_trust_ratio: self.max_trust_ratio,
        }
    }
}

super::tensor_pieces!(LambConfig, LambTensor);

impl Step for LambConfig {
    fn validate(&self) -> Result<()> {
        LambConfig::validate(self)
    }

    fn check_tensor(&self, t: &LambTensor<'_>) -> Result<()> {
        let n = t.weights.check()?;
        t.grads.check(n)?;
        t.exp_avg.check("exp_avg", n)?;
        t.exp_avg_sq.check("exp_avg_sq", n)?;
        t.stream.check(n)
    }

    type Workspace = LambWorkspace;

    /// One tensor, no workspace: pass 1 runs over segments of `SEGMENT_BLOCKS` norm blocks,
    /// their block sums collected on the stack and added in order.
    fn step_checked(&self, engine: &Engine, ctx: &StepContext, t: &mut LambTensor<'_>) {
        let c = self.consts(ctx.step);
        // Pass 1 runs in segments; the step is the whole tensor, or the group it is a piece of.
        let step_len = StepLen(t.len().max(engine.step_len().0));
        let mut sums = [[0.0f64; 2]; SEGMENT_BLOCKS];
        let mut total = [0.0f64; 2];
        let segment = (SEGMENT_BLOCKS * NORM_BLOCK) as u64;
        let mut rest = t.reborrow();
        while !rest.is_empty() {
            let base = rest.stream.index_base;
            let mid = ((base / segment + 1) * segment - base).min(rest.len() as u64) as usize;
            let (mut piece, tail) = rest.split_at(mid);
            let sums = &mut sums[..spanned_blocks(base, mid)];
            (engine.k.lamb_pass1)(&c, ctx, &mut piece, sums, None, step_len);
            add_blocks(&mut total, sums);
            rest = tail;
        }
        let lr_ratio = scaled_lr(&c, total[0], total[1]);
        (engine.k.lamb_pass2)(&c, ctx, t, lr_ratio, None, step_len);
    }

    fn reserve(ws: &mut LambWorkspace, tensors: &[LambTensor<'_>]) {
        let (blocks, n) = LambWorkspace::needs(tensors);
        if ws.sums.len() < blocks {
            ws.sums.resize(blocks, [0.0; 2]);
        }
        if ws.lr_ratios.len() < n {
            ws.lr_ratios.resize(n, 0.0);
        }
        let elements = LambWorkspace::elements(tensors);
        if elements <= KEEP_DIRECTIONS_MAX && ws.directions.len() < elements {
            ws.directions.resize(elements, 0.0);
        }
    }

    fn check_workspace(ws: &LambWorkspace, tensors: &[LambTensor<'_>]) -> Result<()> {
        let (blocks, n) = LambWorkspace::needs(tensors);
        if ws.sums.len() < blocks || ws.lr_ratios.len() < n {
            return Err(Error::WorkspaceTooSmall { blocks, tensors: n });
        }
        Ok(())
    }

    /// Pass 1 over every piece (block sums into the workspace), the trust ratios per tensor in
    /// order on this thread, pass 2 over every piece.
    fn step_group_checked(
        &self,
        engine: &Engine,
        ctx: &StepContext,
        tensors: &mut [LambTensor<'_>],
        ws: &mut LambWorkspace,
        threads: &Threads,
    ) {
        let c = self.consts(ctx.step);
        let (n_blocks, n) = LambWorkspace::needs(tensors);
        let elements = LambWorkspace::elements(tensors);
        let sums = &mut ws.sums[..n_blocks];
        let mut kept = (elements <= KEEP_DIRECTIONS_MAX)
            .then(|| ws.directions.get_mut(..elements))
            .flatten();
        let engine = &engine.for_step(elements);
        let pass1 = Pass1 { c: &c, engine, ctx };
        let pass2 = Pass2 { c: &c, engine, ctx };
        let ratios = &mut ws.lr_ratios[..n];
        // Both passes inside one entry into the pool: a second entry would pay the hand-off to
        // the workers and the wait for them again (~20 µs each on the 2-core VM).
        threads.run(elements, |split| {
            let side = (&mut *sums, kept.as_deref_mut());
            parallel::for_pieces::<LambConfig, _, _>(split, tensors, side, &pass1);
            let mut rest = &sums[..];
            for (t, r) in tensors.iter().zip(&mut *ratios) {
                let (mine, tail) = rest.split_at(spanned_blocks(t.stream.index_base, t.len()));
                let mut total = [0.0f64; 2];
                add_blocks(&mut total, mine);
                *r = scaled_lr(&c, total[0], total[1]);
                rest = tail;
            }
            let side = (&*ratios, kept);
            parallel::for_pieces::<LambConfig, _, _>(split, tensors, side, &pass2);
        });
    }
}

/// Norm blocks per pass-1 segment of a single-tensor step (the block sums of one segment live on
/// the stack: 1 KiB).
const SEGMENT_BLOCKS: usize = 64;

/// Adds block sums in block order (SPEC.md §7).
fn add_blocks(total: &mut [f64; 2], sums: &[[f64; 2]]) {
    for s in sums {
        total[0] += s[0];
        total[1] += s[1];
    }
}

struct Pass1<'c> {
    c: &'c LambConsts,
    engine: &'c Engine,
    ctx: &'c StepContext,
}

impl<'s> Leaf<LambConfig, (&'s mut [[f64; 2]], Option<&'s mut [f32]>)> for Pass1<'_> {
    fn run(&self, mut t: LambTensor<'_>, (sums, kept): (&mut [[f64; 2]], Option<&mut [f32]>)) {
        let step_len = self.engine.step_len();
        (self.engine.k.lamb_pass1)(self.c, self.ctx, &mut t, sums, kept, step_len);
    }
}

struct Pass2<'c> {
    c: &'c LambConsts,
    engine: &'c Engine,
    ctx: &'c StepContext,
}

impl<'s> Leaf<LambConfig, (&'s [f32], Option<&'s mut [f32]>)> for Pass2<'_> {
    fn run(&self, mut t: LambTensor<'_>, (lr_ratio, kept): (&[f32], Option<&mut [f32]>)) {
        let step_len = self.engine.step_len();
        (self.engine.k.lamb_pass2)(
            self.c,
            self.ctx,
            &mut t,
            lr_ratio[0],
            kept.as_deref(),
            step_len,
        );
    }
}

/// The scratch of a LAMB group step: the sums of squares of ‖p‖ and ‖u‖ per norm block of every
/// tensor (16 bytes per 2048 elements), each tensor's `lr * trust ratio`, and for a group of at
/// most 2^20 elements each element's direction (4 bytes per element; a
/// workspace without room for them recomputes them, with the same bits). Make it once and
/// reuse it; [`Optimizer`](crate::Optimizer) keeps its own.
#[derive(Clone, Debug, Default)]
pub struct LambWorkspace {
    sums: Vec<[f64; 2]>,
    lr_ratios: Vec<f32>,
    directions: Vec<f32>,
}

/// Groups of at most this many elements keep each element's direction u from pass 1 for pass 2
/// in the workspace (4 bytes per element, so at most 4 MiB): pass 2 then reads u instead of the
/// two moments and skips the divide and square root, the same value (SPEC.md §6.5). About 10%
/// faster from 64K to 512K elements on AVX-512, even at 1M; above that the kernel is bound by
/// memory and the extra write stream costs more than the arithmetic it saves (docs/DESIGN.md).
const KEEP_DIRECTIONS_MAX: usize = 1 << 20;

impl LambWorkspace {
    /// A workspace that fits `tensors` (and any group with no more blocks and tensors).
    pub fn for_tensors(tensors: &[LambTensor<'_>]) -> LambWorkspace {
        let mut ws = LambWorkspace::default();
        <LambConfig as Step>::reserve(&mut ws, tensors);
        ws
    }

    /// Elements of a group.
    fn elements(tensors: &[LambTensor<'_>]) -> usize {
        parallel::group_len::<LambConfig>(tensors)
    }

    /// Norm blocks and tensors of a group. A tensor whose index range is invalid counts no
    /// blocks (its step is refused before the workspace is looked at), so sizing a workspace for
    /// a bad group neither overflows nor allocates without bound.
    fn needs(tensors: &[LambTensor<'_>]) -> (usize, usize) {
        let blocks = tensors
            .iter()
            .filter(|t| t.stream.check(t.len()).is_ok())
            .map(|t| spanned_blocks(t.stream.index_base, t.len()))
            .sum();
        (blocks, tensors.len())
    }
}

/// One LAMB step on one tensor (two passes, no workspace, on the calling thread). Validates everything, then updates
/// in place.
pub fn lamb_step(
    config: &LambConfig,
    ctx: &StepContext,
    tensor: &mut LambTensor<'_>,
) -> Result<()> {
    config.step_one(&Engine::global()?, ctx, tensor)
}
