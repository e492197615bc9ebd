//! The canonical sum of squares (SPEC.md §7): the one reduction order every backend and every
//! thread count must reproduce.
//!
//! Squares are taken in f64, where the square of an f32 is exact, so only the additions round.
//! Elements are cut into blocks of [`NORM_BLOCK`] by their *global* index `e` (the same index the
//! RNG uses, so SIMD chunks aligned for the RNG are aligned here too); inside a block, element `e`
//! goes to lane `e % 16`, each lane adding in index order; the 16 lanes are folded by a fixed tree
//! (`l += l + 8`, then `+ 4`, `+ 2`, `+ 1`); block sums are added in block order, from +0.

/// Elements per reduction block (a multiple of every vector width and of the RNG group).
pub const NORM_BLOCK: usize = 2048;
/// Partial sums per block.
pub const NORM_LANES: usize = 16;

/// Number of norm blocks that elements `base .. base + len` touch.
pub fn spanned_blocks(base: u64, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let b = NORM_BLOCK as u64;
    ((base + len as u64).div_ceil(b) - base / b) as usize
}

/// Folds 16 lane sums into one, in the canonical tree order.
#[inline]
pub fn fold_lanes(mut lanes: [f64; NORM_LANES]) -> f64 {
    let mut width = NORM_LANES / 2;
    while width > 0 {
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
        width /= 2;
    }
    lanes[0]
}

/// Adds the square of `x`, the element of global index `e`, to its lane's sum.
#[inline]
pub fn add_square(lanes: &mut [f64; NORM_LANES], e: u64, x: f32) {
    let x = f64::from(x);
    lanes[(e % NORM_LANES as u64) as usize] += x * x;
}

/// A running canonical sum of squares, fed one element at a time in global-index order.
#[derive(Clone, Debug)]
pub struct SumSquares {
    lanes: [f64; NORM_LANES],
    /// Global index of the next element.
    next: u64,
    /// Whether the current block has received an element.
    open: bool,
    total: f64,
}

impl SumSquares {
    /// An empty sum whose first element has global index `index_base`.
    pub fn new(index_base: u64) -> SumSquares {
        SumSquares {
            lanes: [0.0; NORM_LANES],
            next: index_base,
            open: false,
            total: 0.0,
        }
    }

    /// Adds the next element's square.
    #[inline]
    pub fn push(&mut self, x: f32) {
        add_square(&mut self.lanes, self.next, x);
        self.open = true;
        self.next += 1;
        if self.next.is_multiple_of(NORM_BLOCK as u64) {
            self.close_block();
        }
    }

    fn close_block(&mut self) {
        self.total += fold_lanes(self.lanes);
        self.lanes = [0.0; NORM_LANES];
        self.open = false;
    }

    /// The sum over every element pushed.
    pub fn finish(mut self) -> f64 {
        if self.open {
            self.close_block();
        }
        self.total
    }
}

/// The canonical sum of squares of a slice whose first element has global index `index_base`.
pub fn sum_squares(xs: &[f32], index_base: u64) -> f64 {
    let mut acc = SumSquares::new(index_base);
    xs.iter().for_each(|&x| acc.push(x));
    acc.finish()
}
