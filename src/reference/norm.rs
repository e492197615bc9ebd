//! The canonical sum of squares (SPEC.md §7): the one reduction order every backend and every
//! thread count must reproduce.
//!
//! Squares are taken in f64, where the square of an f32 is exact, so only the additions round.
//! Elements are cut into blocks of [`NORM_BLOCK`] by their index within the tensor; inside a
//! block, element `i` goes to lane `i % 16`, each lane adding in index order; the 16 lanes are
//! folded by a fixed tree (`l += l + 8`, then `+ 4`, `+ 2`, `+ 1`); block sums are added left to
//! right, starting from +0.

/// Elements per reduction block (a multiple of every vector width and of the RNG group).
pub const NORM_BLOCK: usize = 2048;
/// Partial sums per block.
pub const NORM_LANES: usize = 16;

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

/// A running canonical sum of squares, fed one element at a time in index order.
#[derive(Clone, Debug)]
pub struct SumSquares {
    lanes: [f64; NORM_LANES],
    in_block: usize,
    total: f64,
}

impl Default for SumSquares {
    fn default() -> Self {
        SumSquares {
            lanes: [0.0; NORM_LANES],
            in_block: 0,
            total: 0.0,
        }
    }
}

impl SumSquares {
    /// Adds the next element's square.
    #[inline]
    pub fn push(&mut self, x: f32) {
        let x = f64::from(x);
        self.lanes[self.in_block % NORM_LANES] += x * x;
        self.in_block += 1;
        if self.in_block == NORM_BLOCK {
            self.close_block();
        }
    }

    fn close_block(&mut self) {
        self.total += fold_lanes(self.lanes);
        self.lanes = [0.0; NORM_LANES];
        self.in_block = 0;
    }

    /// The sum over every element pushed.
    pub fn finish(mut self) -> f64 {
        if self.in_block > 0 {
            self.close_block();
        }
        self.total
    }
}

/// The canonical sum of squares of a slice.
pub fn sum_squares(xs: &[f32]) -> f64 {
    let mut acc = SumSquares::default();
    xs.iter().for_each(|&x| acc.push(x));
    acc.finish()
}
