//! One tensor's buffers for each optimizer's step, and how the thread pool cuts a bundle into
//! pieces without knowing the optimizer ([`Pieces`]). A piece's stream starts at its first
//! element's global index, so stepping the pieces gives the bits of stepping the whole (SPEC.md
//! §3.2).

use crate::rng::TensorStream;
use crate::storage::{Grads, State, Weights, piece_optional, reborrow_optional, split_optional};

/// A family of tensor bundles (one optimizer's), cut and reborrowed by the thread pool. The
/// optimizer configurations implement it ([`crate::optim::Step`] builds on it).
pub trait Pieces: Sync + 'static {
    /// One tensor's buffers.
    type Tensor<'a>: Send + Sync;
    /// Number of elements of `t`.
    fn tensor_len(t: &Self::Tensor<'_>) -> usize;
    /// Global element index of `t`'s element 0.
    fn tensor_base(t: &Self::Tensor<'_>) -> u64;
    /// `t`, borrowed for a shorter time.
    fn reborrow<'s>(t: &'s mut Self::Tensor<'_>) -> Self::Tensor<'s>;
    /// `t` cut into elements `..mid` and `mid..` (the second with its stream offset by `mid`).
    fn split_at<'s>(t: Self::Tensor<'s>, mid: usize) -> (Self::Tensor<'s>, Self::Tensor<'s>)
    where
        Self: 's;
    /// Elements `start..start + len` of `*t` as a tensor of their own (its stream offset by
    /// `start`), taken through a shared reference: a team's members each take their pieces of the
    /// group's tensors themselves, so the calling thread hands out three numbers per piece, not a
    /// copy of every buffer's slice (`parallel::team_pieces`).
    ///
    /// # Safety
    ///
    /// In bounds; while the piece lives, nothing else reaches its elements (the pieces taken at
    /// once are disjoint, and `*t` is not used to reach them).
    #[allow(unsafe_code)]
    unsafe fn piece<'b>(t: &'b Self::Tensor<'_>, start: usize, len: usize) -> Self::Tensor<'b>;
}

/// One tensor's buffers for an SGD step.
#[derive(Debug)]
pub struct SgdTensor<'a> {
    /// Weights, updated in place.
    pub weights: Weights<'a>,
    /// Gradients.
    pub grads: Grads<'a>,
    /// Momentum buffer: required iff `momentum != 0`. Overwritten with the gradient on step 1.
    pub momentum: Option<State<'a>>,
    /// Where this tensor's random bits come from.
    pub stream: TensorStream,
}

impl<'a> SgdTensor<'a> {
    /// Number of elements (the weights' length).
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same tensor, borrowed for a shorter time.
    pub fn reborrow(&mut self) -> SgdTensor<'_> {
        SgdTensor {
            weights: self.weights.reborrow(),
            grads: self.grads,
            momentum: reborrow_optional(&mut self.momentum),
            stream: self.stream,
        }
    }

    /// Elements `..mid` and `mid..` as two tensors; the second's stream starts at
    /// `index_base + mid`, so stepping both gives the bits of stepping the whole. Panics if `mid`
    /// exceeds a buffer's length.
    pub fn split_at(self, mid: usize) -> (SgdTensor<'a>, SgdTensor<'a>) {
        let (wa, wb) = self.weights.split_at(mid);
        let (ga, gb) = self.grads.split_at(mid);
        let (ma, mb) = split_optional(self.momentum, mid);
        (
            SgdTensor {
                weights: wa,
                grads: ga,
                momentum: ma,
                stream: self.stream,
            },
            SgdTensor {
                weights: wb,
                grads: gb,
                momentum: mb,
                stream: self.stream.offset(mid),
            },
        )
    }

    /// Elements `start..start + len` as a tensor of their own, its stream starting at
    /// `index_base + start`, taken through `&self` ([`Pieces::piece`]).
    ///
    /// # Safety
    ///
    /// In bounds for every buffer; while the piece lives, nothing else reaches its elements of
    /// any buffer.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn piece(&self, start: usize, len: usize) -> SgdTensor<'_> {
        // SAFETY: the caller's contract, for each buffer.
        unsafe {
            SgdTensor {
                weights: self.weights.piece(start, len),
                grads: self.grads.piece(start, len),
                momentum: piece_optional(&self.momentum, start, len),
                stream: self.stream.offset(start),
            }
        }
    }
}

/// One tensor's buffers for an Adagrad step.
#[derive(Debug)]
pub struct AdagradTensor<'a> {
    /// Weights, updated in place.
    pub weights: Weights<'a>,
    /// Gradients.
    pub grads: Grads<'a>,
    /// The running sum of squared gradients (PyTorch's `sum`).
    pub sum: State<'a>,
    /// Where this tensor's random bits come from.
    pub stream: TensorStream,
}

impl<'a> AdagradTensor<'a> {
    /// Number of elements (the weights' length).
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same tensor, borrowed for a shorter time.
    pub fn reborrow(&mut self) -> AdagradTensor<'_> {
        AdagradTensor {
            weights: self.weights.reborrow(),
            grads: self.grads,
            sum: self.sum.reborrow(),
            stream: self.stream,
        }
    }

    /// Elements `..mid` and `mid..` as two tensors; the second's stream starts at
    /// `index_base + mid`, so stepping both gives the bits of stepping the whole. Panics if `mid`
    /// exceeds a buffer's length.
    pub fn split_at(self, mid: usize) -> (AdagradTensor<'a>, AdagradTensor<'a>) {
        let (wa, wb) = self.weights.split_at(mid);
        let (ga, gb) = self.grads.split_at(mid);
        let (sa, sb) = self.sum.split_at(mid);
        (
            AdagradTensor {
                weights: wa,
                grads: ga,
                sum: sa,
                stream: self.stream,
            },
            AdagradTensor {
                weights: wb,
                grads: gb,
                sum: sb,
                stream: self.stream.offset(mid),
            },
        )
    }

    /// Elements `start..start + len` as a tensor of their own, its stream starting at
    /// `index_base + start`, taken through `&self` ([`Pieces::piece`]).
    ///
    /// # Safety
    ///
    /// In bounds for every buffer; while the piece lives, nothing else reaches its elements of
    /// any buffer.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn piece(&self, start: usize, len: usize) -> AdagradTensor<'_> {
        // SAFETY: the caller's contract, for each buffer.
        unsafe {
            AdagradTensor {
                weights: self.weights.piece(start, len),
                grads: self.grads.piece(start, len),
                sum: self.sum.piece(start, len),
                stream: self.stream.offset(start),
            }
        }
    }
}

/// One tensor's buffers for an Adam / AdamW step.
#[derive(Debug)]
pub struct AdamTensor<'a> {
    /// Weights, updated in place.
    pub weights: Weights<'a>,
    /// Gradients.
    pub grads: Grads<'a>,
    /// First moment (`exp_avg`).
    pub exp_avg: State<'a>,
    /// Second moment (`exp_avg_sq`).
    pub exp_avg_sq: State<'a>,
    /// AMSGrad's running maximum: required iff `amsgrad`.
    pub max_exp_avg_sq: Option<State<'a>>,
    /// Where this tensor's random bits come from.
    pub stream: TensorStream,
}

impl<'a> AdamTensor<'a> {
    /// Number of elements (the weights' length).
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether the buffers are of IPEX's layout (split weights, bf16 gradients, f32 states) or all
    /// f32: AMSGrad's steps in them run apart from its stochastic layouts, in Adam's entry point
    /// or one of their own by backend (`kernels::optim::adam_entry`).
    pub(crate) fn in_fp32_peers_layout(&self) -> bool {
        let states_f32 = [
            Some(&self.exp_avg),
            Some(&self.exp_avg_sq),
            self.max_exp_avg_sq.as_ref(),
        ]
        .into_iter()
        .all(|s| !matches!(s, Some(State::Bf16(..))));
        states_f32
            && matches!(
                (&self.weights, &self.grads),
                (Weights::Split { .. }, Grads::Bf16(_)) | (Weights::F32(_), Grads::F32(_))
            )
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same tensor, borrowed for a shorter time.
    pub fn reborrow(&mut self) -> AdamTensor<'_> {
        AdamTensor {
            weights: self.weights.reborrow(),
            grads: self.grads,
            exp_avg: self.exp_avg.reborrow(),
            exp_avg_sq: self.exp_avg_sq.reborrow(),
            max_exp_avg_sq: reborrow_optional(&mut self.max_exp_avg_sq),
            stream: self.stream,
        }
    }

    /// Elements `..mid` and `mid..` as two tensors; the second's stream starts at
    /// `index_base + mid`, so stepping both gives the bits of stepping the whole. Panics if `mid`
    /// exceeds a buffer's length.
    pub fn split_at(self, mid: usize) -> (AdamTensor<'a>, AdamTensor<'a>) {
        let (wa, wb) = self.weights.split_at(mid);
        let (ga, gb) = self.grads.split_at(mid);
        let (ma, mb) = self.exp_avg.split_at(mid);
        let (va, vb) = self.exp_avg_sq.split_at(mid);
        let (xa, xb) = split_optional(self.max_exp_avg_sq, mid);
        (
            AdamTensor {
                weights: wa,
                grads: ga,
                exp_avg: ma,
                exp_avg_sq: va,
                max_exp_avg_sq: xa,
                stream: self.stream,
            },
            AdamTensor {
                weights: wb,
                grads: gb,
                exp_avg: mb,
                exp_avg_sq: vb,
                max_exp_avg_sq: xb,
                stream: self.stream.offset(mid),
            },
        )
    }

    /// Elements `start..start + len` as a tensor of their own, its stream starting at
    /// `index_base + start`, taken through `&self` ([`Pieces::piece`]).
    ///
    /// # Safety
    ///
    /// In bounds for every buffer; while the piece lives, nothing else reaches its elements of
    /// any buffer.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn piece(&self, start: usize, len: usize) -> AdamTensor<'_> {
        // SAFETY: the caller's contract, for each buffer.
        unsafe {
            AdamTensor {
                weights: self.weights.piece(start, len),
                grads: self.grads.piece(start, len),
                exp_avg: self.exp_avg.piece(start, len),
                exp_avg_sq: self.exp_avg_sq.piece(start, len),
                max_exp_avg_sq: piece_optional(&self.max_exp_avg_sq, start, len),
                stream: self.stream.offset(start),
            }
        }
    }
}

/// One tensor's buffers for a LAMB step (the trust ratio is per tensor).
#[derive(Debug)]
pub struct LambTensor<'a> {
    /// Weights, updated in place.
    pub weights: Weights<'a>,
    /// Gradients.
    pub grads: Grads<'a>,
    /// First moment.
    pub exp_avg: State<'a>,
    /// Second moment.
    pub exp_avg_sq: State<'a>,
    /// Where this tensor's random bits come from.
    pub stream: TensorStream,
}

impl<'a> LambTensor<'a> {
    /// Number of elements (the weights' length).
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the weights are bf16: pass 2 with kept directions then runs LAMB's stochastic
    /// entry points (`kernels::optim::lamb_pass2`).
    pub(crate) fn has_bf16_weights(&self) -> bool {
        matches!(self.weights, Weights::Bf16(..))
    }

    /// Whether the weights or a moment are bf16: the other passes then run LAMB's stochastic entry
    /// points (`kernels::optim::lamb_pass1`).
    pub(crate) fn has_bf16(&self) -> bool {
        self.has_bf16_weights()
            || matches!(self.exp_avg, State::Bf16(..))
            || matches!(self.exp_avg_sq, State::Bf16(..))
    }

    /// The same tensor, borrowed for a shorter time.
    pub fn reborrow(&mut self) -> LambTensor<'_> {
        LambTensor {
            weights: self.weights.reborrow(),
            grads: self.grads,
            exp_avg: self.exp_avg.reborrow(),
            exp_avg_sq: self.exp_avg_sq.reborrow(),
            stream: self.stream,
        }
    }

    /// Elements `..mid` and `mid..` as two tensors; the second's stream starts at
    /// `index_base + mid`. (LAMB's trust ratio is per tensor: stepping the halves separately is
    /// *not* stepping the whole; the group step splits passes, not steps.) Panics if `mid`
    /// exceeds a buffer's length.
    pub fn split_at(self, mid: usize) -> (LambTensor<'a>, LambTensor<'a>) {
        let (wa, wb) = self.weights.split_at(mid);
        let (ga, gb) = self.grads.split_at(mid);
        let (ma, mb) = self.exp_avg.split_at(mid);
        let (va, vb) = self.exp_avg_sq.split_at(mid);
        (
            LambTensor {
                weights: wa,
                grads: ga,
                exp_avg: ma,
                exp_avg_sq: va,
                stream: self.stream,
            },
            LambTensor {
                weights: wb,
                grads: gb,
                exp_avg: mb,
                exp_avg_sq: vb,
                stream: self.stream.offset(mid),
            },
        )
    }

    /// Elements `start..start + len` as a tensor of their own, its stream starting at
    /// `index_base + start`, taken through `&self` ([`Pieces::piece`]).
    ///
    /// # Safety
    ///
    /// In bounds for every buffer; while the piece lives, nothing else reaches its elements of
    /// any buffer.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn piece(&self, start: usize, len: usize) -> LambTensor<'_> {
        // SAFETY: the caller's contract, for each buffer.
        unsafe {
            LambTensor {
                weights: self.weights.piece(start, len),
                grads: self.grads.piece(start, len),
                exp_avg: self.exp_avg.piece(start, len),
                exp_avg_sq: self.exp_avg_sq.piece(start, len),
                stream: self.stream.offset(start),
            }
        }
    }
}
