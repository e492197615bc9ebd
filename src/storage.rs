//! How a tensor's values are held in memory. An optimizer step reads every format as f32, does
//! its arithmetic in f32, and writes back in the buffer's own format (SPEC.md §5).

use crate::error::{Error, Result};
use half::bf16;

use crate::reference::round::Rounding;

/// The weights of one tensor, updated in place.
#[derive(Debug)]
pub enum Weights<'a> {
    /// Plain f32 master weights.
    F32(&'a mut [f32]),
    /// An f32 master weight kept as two 16-bit halves (IPEX's Split-SGD layout): `top` is the bf16
    /// model weight (the high half of the f32 bits), `trail` the low half. Nothing is lost.
    Split {
        /// High 16 bits: the bf16 weight the model computes with.
        top: &'a mut [bf16],
        /// Low 16 bits.
        trail: &'a mut [u16],
    },
    /// bf16 weights only; the new f32 value is rounded back with the given rule.
    Bf16(&'a mut [bf16], Rounding),
}

/// The gradient of one tensor (read only).
#[derive(Clone, Copy, Debug)]
pub enum Grads<'a> {
    /// f32 gradients.
    F32(&'a [f32]),
    /// bf16 gradients (widened exactly).
    Bf16(&'a [bf16]),
}

/// One optimizer-state buffer (momentum, `exp_avg`, `exp_avg_sq`, Adagrad's `sum`, ...).
#[derive(Debug)]
pub enum State<'a> {
    /// f32 state.
    F32(&'a mut [f32]),
    /// bf16 state, rounded back with the given rule (stochastic is the usual choice).
    Bf16(&'a mut [bf16], Rounding),
}

impl Weights<'_> {
    /// Number of elements; for `Split` the top's length (the trail is checked against it).
    pub fn len(&self) -> usize {
        match self {
            Weights::F32(w) => w.len(),
            Weights::Split { top, .. } => top.len(),
            Weights::Bf16(w, _) => w.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that the weights are non-empty and (for `Split`) that both halves agree; returns the length.
    pub(crate) fn check(&self) -> Result<usize> {
        if let Weights::Split { top, trail } = self
            && top.len() != trail.len()
        {
            return Err(Error::LengthMismatch {
                buffer: "trail",
                expected: top.len(),
                found: trail.len(),
            });
        }
        if self.is_empty() {
            return Err(Error::Empty);
        }
        Ok(self.len())
    }
}

impl Grads<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Grads::F32(g) => g.len(),
            Grads::Bf16(g) => g.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn check(&self, n: usize) -> Result<()> {
        check_len("grads", n, self.len())
    }
}

impl State<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            State::F32(s) => s.len(),
            State::Bf16(s, _) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn check(&self, buffer: &'static str, n: usize) -> Result<()> {
        check_len(buffer, n, self.len())
    }
}

// Splitting a buffer at an element index: how a tensor is cut into pieces for threads, or into
// shards for ranks (see `SgdTensor::split_at` and friends). `mid <= len` is the caller's to check.

impl<'a> Weights<'a> {
    /// The same weights, borrowed for a shorter time.
    pub fn reborrow(&mut self) -> Weights<'_> {
        match self {
            Weights::F32(w) => Weights::F32(w),
            Weights::Split { top, trail } => Weights::Split { top, trail },
            Weights::Bf16(w, r) => Weights::Bf16(w, *r),
        }
    }

    /// Elements `..mid` and `mid..`. Panics if `mid > len` (for `Split`, of either half).
    pub fn split_at(self, mid: usize) -> (Weights<'a>, Weights<'a>) {
        match self {
            Weights::F32(w) => {
                let (a, b) = w.split_at_mut(mid);
                (Weights::F32(a), Weights::F32(b))
            }
            Weights::Split { top, trail } => {
                let (ta, tb) = top.split_at_mut(mid);
                let (la, lb) = trail.split_at_mut(mid);
                (
                    Weights::Split { top: ta, trail: la },
                    Weights::Split { top: tb, trail: lb },
                )
            }
            Weights::Bf16(w, r) => {
                let (a, b) = w.split_at_mut(mid);
                (Weights::Bf16(a, r), Weights::Bf16(b, r))
            }
        }
    }
}

impl<'a> Grads<'a> {
    /// Elements `..mid` and `mid..`. Panics if `mid > len`.
    pub fn split_at(self, mid: usize) -> (Grads<'a>, Grads<'a>) {
        match self {
            Grads::F32(g) => {
                let (a, b) = g.split_at(mid);
                (Grads::F32(a), Grads::F32(b))
            }
            Grads::Bf16(g) => {
                let (a, b) = g.split_at(mid);
                (Grads::Bf16(a), Grads::Bf16(b))
            }
        }
    }
}

impl<'a> State<'a> {
    /// The same state, borrowed for a shorter time.
    pub fn reborrow(&mut self) -> State<'_> {
        match self {
            State::F32(s) => State::F32(s),
            State::Bf16(s, r) => State::Bf16(s, *r),
        }
    }

    /// Elements `..mid` and `mid..`. Panics if `mid > len`.
    pub fn split_at(self, mid: usize) -> (State<'a>, State<'a>) {
        match self {
            State::F32(s) => {
                let (a, b) = s.split_at_mut(mid);
                (State::F32(a), State::F32(b))
            }
            State::Bf16(s, r) => {
                let (a, b) = s.split_at_mut(mid);
                (State::Bf16(a, r), State::Bf16(b, r))
            }
        }
    }
}

// Taking a piece through a shared reference: a team's members each take their own pieces of
// one group's tensors at once (`parallel::team_pieces`), so the calling thread hands out only
// where each piece starts instead of a split copy of every buffer (see `tensors::Pieces::piece`).

/// Elements `start..start + len` of the slice `*s`, reached through the pointer it holds: the
/// piece claims its own elements only, where a copy of the `&mut` would claim the whole slice.
///
/// # Safety
///
/// `start + len` is within the slice; while the result lives, nothing else reaches these elements
/// (other pieces are disjoint from it, and `*s` is not used).
#[allow(unsafe_code)]
#[allow(clippy::mut_from_ref)] // what it is for, under the contract above
unsafe fn sub_slice<'b, T>(s: &'b &mut [T], start: usize, len: usize) -> &'b mut [T] {
    // SAFETY: `&mut [T]` and `*mut [T]` have the same layout; reading the pointer reborrows
    // nothing.
    let whole = unsafe { (s as *const &mut [T]).cast::<*mut [T]>().read() };
    assert!(
        start <= whole.len() && len <= whole.len() - start,
        "piece out of bounds"
    );
    // SAFETY: in bounds (above), and unaliased by the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(whole.cast::<T>().add(start), len) }
}

impl Weights<'_> {
    /// Elements `start..start + len` as weights of their own, taken through `&self`.
    ///
    /// # Safety
    ///
    /// As [`sub_slice`]: in bounds, and nothing else reaches these elements while the piece lives.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn piece(&self, start: usize, len: usize) -> Weights<'_> {
        // SAFETY: the caller's contract, for each buffer.
        unsafe {
            match self {
                Weights::F32(w) => Weights::F32(sub_slice(w, start, len)),
                Weights::Split { top, trail } => Weights::Split {
                    top: sub_slice(top, start, len),
                    trail: sub_slice(trail, start, len),
                },
                Weights::Bf16(w, r) => Weights::Bf16(sub_slice(w, start, len), *r),
            }
        }
    }
}

impl<'a> Grads<'a> {
    /// Elements `start..start + len`. Panics if they are out of bounds.
    pub(crate) fn piece(&self, start: usize, len: usize) -> Grads<'a> {
        match *self {
            Grads::F32(g) => Grads::F32(&g[start..start + len]),
            Grads::Bf16(g) => Grads::Bf16(&g[start..start + len]),
        }
    }
}

impl State<'_> {
    /// Elements `start..start + len` as a state of their own, taken through `&self`.
    ///
    /// # Safety
    ///
    /// As [`Weights::piece`].
    #[allow(unsafe_code)]
    pub(crate) unsafe fn piece(&self, start: usize, len: usize) -> State<'_> {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                State::F32(s) => State::F32(sub_slice(s, start, len)),
                State::Bf16(s, r) => State::Bf16(sub_slice(s, start, len), *r),
            }
        }
    }
}

/// [`State::piece`] for an optional buffer.
///
/// # Safety
///
/// As [`Weights::piece`].
#[allow(unsafe_code)]
pub(crate) unsafe fn piece_optional<'b>(
    s: &'b Option<State<'_>>,
    start: usize,
    len: usize,
) -> Option<State<'b>> {
    // SAFETY: the caller's contract.
    s.as_ref().map(|s| unsafe { s.piece(start, len) })
}

/// [`State::reborrow`] for an optional buffer.
pub(crate) fn reborrow_optional<'s>(s: &'s mut Option<State<'_>>) -> Option<State<'s>> {
    s.as_mut().map(State::reborrow)
}

/// [`State::split_at`] for an optional buffer.
pub(crate) fn split_optional<'a>(
    s: Option<State<'a>>,
    mid: usize,
) -> (Option<State<'a>>, Option<State<'a>>) {
    match s {
        Some(s) => {
            let (a, b) = s.split_at(mid);
            (Some(a), Some(b))
        }
        None => (None, None),
    }
}

/// Checks an optional state buffer: present iff `required`, and of length `n`.
pub(crate) fn check_optional(
    s: &Option<State<'_>>,
    buffer: &'static str,
    required: bool,
    n: usize,
) -> Result<()> {
    match (s, required) {
        (Some(s), true) => s.check(buffer, n),
        (None, false) => Ok(()),
        (_, required) => Err(Error::StateMismatch { buffer, required }),
    }
}

/// SPEC.md §8: every buffer of every call has at least one element.
pub(crate) fn check_nonempty(len: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::Empty);
    }
    Ok(())
}

/// A conversion's source of `src` elements and its destination `dst_name` of `dst`: non-empty and
/// the same length.
pub(crate) fn check_pair(src: usize, dst: usize, dst_name: &'static str) -> Result<()> {
    check_nonempty(src)?;
    check_len(dst_name, src, dst)
}

pub(crate) fn check_len(buffer: &'static str, expected: usize, found: usize) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            buffer,
            expected,
            found,
        })
    }
}
