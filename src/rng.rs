//! Where random bits come from: the per-step context, replicas, tensor streams, and a sequential
//! Philox generator for `rand_core` users. The bit layout itself is in SPEC.md §3 and
//! [`crate::reference::bits`].

use crate::error::{Error, Result};
use crate::reference::bits::{BitsCoord, MAX_ELEMENT_INDEX};
use crate::reference::philox;
use rand_core::{Infallible, SeedableRng, TryRng};

/// Whose bits an operation uses when several data-parallel replicas run the same step
/// (PopART's IdenticalSeeds / DifferingSeeds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Replica {
    /// Every replica draws the same bits (replica slot 0). Use it for weight updates: replicas
    /// that start identical and see the same reduced gradient stay bit-identical. It is also what
    /// a run without replicas uses.
    #[default]
    Identical,
    /// Replica `r` (0..=65534) draws its own bits (slot `r + 1`), e.g. for forward-pass rounding.
    Differing(u16),
}

impl Replica {
    /// The 16-bit slot in counter word 1.
    pub fn slot(self) -> Result<u16> {
        match self {
            Replica::Identical => Ok(0),
            Replica::Differing(r) if r < u16::MAX => Ok(r + 1),
            Replica::Differing(r) => Err(Error::ReplicaOutOfRange { replica: r }),
        }
    }
}

/// What a tensor's random bits are for; one tensor's buffers each get their own bits: the value
/// is the low nibble of counter word 3, except for the second moment and AMSGrad's maximum, which
/// take the first moment's counters and give each element its pair partner's bits (SPEC.md §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Purpose {
    /// The weights (or the values of a standalone conversion).
    Weights = 0,
    /// The first-moment / momentum buffer.
    FirstMoment = 1,
    /// The second-moment buffer (Adam's `exp_avg_sq`, Adagrad's `sum`): element `e` rounds with
    /// the bits the first moment gives element `e ^ 1`.
    SecondMoment = 2,
    /// AMSGrad's `max_exp_avg_sq`: the second moment's bits. The maximum stored is `v` rounded
    /// with them, or the maximum as loaded, which no rounding changes.
    MaxSecondMoment = 3,
}

/// The largest tensor stream id (28 bits).
pub const MAX_STREAM: u32 = (1 << 28) - 1;

/// The optimizer-step part of the RNG coordinates, shared by every tensor of one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepContext {
    /// The run's seed (key words 0 and 1 of ARS-5, SPEC.md §3.2).
    pub seed: u64,
    /// The optimizer step, counting from 1.
    pub step: u32,
    /// Whose bits this operation uses.
    pub replica: Replica,
}

impl StepContext {
    /// Step `step` of a run seeded with `seed`, with bits shared by all replicas.
    pub fn new(seed: u64, step: u32) -> StepContext {
        StepContext {
            seed,
            step,
            replica: Replica::Identical,
        }
    }

    /// The same step with another replica mode.
    pub fn with_replica(self, replica: Replica) -> StepContext {
        StepContext { replica, ..self }
    }
}

/// A tensor's place in the RNG: a caller-chosen stream id (one per tensor: never a pointer) and the
/// global index of its first element, so that a tensor split into shards draws the same bits as
/// the whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TensorStream {
    /// The tensor's id, below 2^28.
    pub id: u32,
    /// The global element index of element 0 of this slice.
    pub index_base: u64,
}

impl TensorStream {
    /// Stream `id`, starting at element 0.
    pub fn new(id: u32) -> TensorStream {
        TensorStream { id, index_base: 0 }
    }

    /// The stream of the elements from local index `mid` on (same id, `index_base + mid`): the
    /// right half of a split tensor draws exactly the bits it drew as part of the whole.
    pub fn offset(&self, mid: usize) -> TensorStream {
        TensorStream {
            id: self.id,
            index_base: self.index_base + mid as u64,
        }
    }

    /// Checks that the id fits and that `len` elements from `index_base` stay in the index range.
    pub(crate) fn check(&self, len: usize) -> Result<()> {
        if self.id > MAX_STREAM {
            return Err(Error::StreamOutOfRange { stream: self.id });
        }
        let end = self.index_base.checked_add(len as u64);
        if end.is_none_or(|end| end > MAX_ELEMENT_INDEX) {
            return Err(Error::IndexOutOfRange {
                index_base: self.index_base,
                len,
            });
        }
        Ok(())
    }
}

/// The full coordinates for one (step, tensor, purpose). Callers validate `ctx.replica` and the
/// stream first (every public entry point does, before touching memory). The second moment and
/// AMSGrad's maximum draw from the first moment's stream, each element taking its pair partner's
/// bits (SPEC.md §3.2).
pub(crate) fn coord(ctx: &StepContext, t: &TensorStream, purpose: Purpose) -> BitsCoord {
    debug_assert!(ctx.replica.slot().is_ok() && t.id <= MAX_STREAM);
    let second = matches!(purpose, Purpose::SecondMoment | Purpose::MaxSecondMoment);
    let counted = if second {
        Purpose::FirstMoment
    } else {
        purpose
    };
    BitsCoord {
        seed: ctx.seed,
        step: ctx.step,
        stream_word: (t.id << 4) | counted as u32,
        replica_slot: ctx.replica.slot().unwrap_or(0),
        swap_pairs: second,
    }
}

/// Checks `ctx`'s replica and `len` elements of `stream` (in that order: the stream first), then
/// gives their coordinates for `purpose`: what every entry point that draws bits checks first.
pub(crate) fn checked_coord(
    ctx: &StepContext,
    stream: &TensorStream,
    purpose: Purpose,
    len: usize,
) -> Result<BitsCoord> {
    stream.check(len)?;
    ctx.replica.slot()?;
    Ok(coord(ctx, stream, purpose))
}

/// A sequential Philox4x32-10 generator for code that wants a `rand_core` RNG.
///
/// Seed: 16 bytes, little-endian words `k0, k1, s0, s1`. Output block `n` (n = 0, 1, ...) is
/// `philox4x32_10(counter = (n_lo32, n_hi32, s0, s1), key = (k0, k1))`; `next_u32` returns its
/// words 0, 1, 2, 3 in that order, then moves to block `n + 1`. `next_u64` is
/// `lo | hi << 32` of two consecutive `next_u32` words; `fill_bytes` writes consecutive words
/// little-endian (a partial last word uses its low bytes and discards the rest).
/// The block counter wraps after 2^64 blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhiloxRng {
    key: [u32; 2],
    stream: [u32; 2],
    block: u64,
    buf: [u32; 4],
    /// Next unread word of `buf`; 4 means empty.
    pos: usize,
}

impl PhiloxRng {
    /// A generator with the given key and stream words, at block 0.
    pub fn new(key: [u32; 2], stream: [u32; 2]) -> PhiloxRng {
        PhiloxRng {
            key,
            stream,
            block: 0,
            buf: [0; 4],
            pos: 4,
        }
    }

    /// The index of the next block to be generated (checkpointable with the key and stream).
    pub fn block_position(&self) -> u64 {
        self.block
    }

    fn refill(&mut self) {
        let ctr = [
            self.block as u32,
            (self.block >> 32) as u32,
            self.stream[0],
            self.stream[1],
        ];
        self.buf = philox::philox4x32_10(ctr, self.key);
        self.block = self.block.wrapping_add(1);
        self.pos = 0;
    }

    fn word(&mut self) -> u32 {
        if self.pos == 4 {
            self.refill();
        }
        let w = self.buf[self.pos];
        self.pos += 1;
        w
    }
}

impl TryRng for PhiloxRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> core::result::Result<u32, Infallible> {
        Ok(self.word())
    }

    fn try_next_u64(&mut self) -> core::result::Result<u64, Infallible> {
        let lo = u64::from(self.word());
        let hi = u64::from(self.word());
        Ok(lo | hi << 32)
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> core::result::Result<(), Infallible> {
        for chunk in dst.chunks_mut(4) {
            let w = self.word().to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        Ok(())
    }
}

impl SeedableRng for PhiloxRng {
    type Seed = [u8; 16];

    fn from_seed(seed: [u8; 16]) -> PhiloxRng {
        let w = |i: usize| u32::from_le_bytes([seed[i], seed[i + 1], seed[i + 2], seed[i + 3]]);
        PhiloxRng::new([w(0), w(4)], [w(8), w(12)])
    }
}
