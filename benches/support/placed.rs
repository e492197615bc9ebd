//! A benchmark's buffer of `n` elements at a chosen place inside an over-allocated `Vec`: shared
//! by `benches/kernels.rs`, `benches/parallel.rs` and `examples/step_timer.rs`, whose rows depend
//! on where their buffers lie (docs/DESIGN.md, "PyTorch package").

/// The package's state slots (`_SLOTS` in `python/halfstep/__init__.py`): the first moment (also
/// SGD's momentum and Adagrad's sum), the second moment and the trails.
#[allow(dead_code)] // not every user places every kind
pub const FIRST_MOMENT: usize = 1;
#[allow(dead_code)]
pub const SECOND_MOMENT: usize = 2;
#[allow(dead_code)]
pub const TRAIL: usize = 4;

/// `n` elements at a chosen place inside an over-allocated `Vec`.
pub struct Placed<T> {
    v: Vec<T>,
    start: usize,
    n: usize,
}

impl<T: Copy> Placed<T> {
    /// `n` copies of `x`, starting `offset` bytes past an `align`-byte boundary and `skip` bytes
    /// (a multiple of `align`) further.
    pub fn at(x: T, n: usize, align: usize, offset: usize, skip: usize) -> Self {
        let size = std::mem::size_of::<T>();
        assert!(offset.is_multiple_of(size) && offset < align && skip.is_multiple_of(align));
        let v = vec![x; n + (2 * align + skip) / size];
        let misalign = v.as_ptr() as usize % align;
        let start = ((align - misalign) % align + offset + skip) / size;
        Placed { v, start, n }
    }

    /// `n` copies of `x` placed as the PyTorch package places state `slot` of the parameter
    /// `weights` (`_state_like`, `_SLOTS`): `slot × 768` bytes past the weights' offset within a
    /// 4 KiB page and, from 4 MiB on, `slot` whole pages further.
    #[allow(dead_code)] // not every user places states
    pub fn state_of<W>(weights: &[W], x: T, n: usize, slot: usize) -> Self {
        const PAGE: usize = 4096;
        let large = n * std::mem::size_of::<T>() >= 4 << 20;
        let offset = (weights.as_ptr() as usize + slot * 768) % PAGE;
        Self::at(x, n, PAGE, offset, if large { slot * PAGE } else { 0 })
    }
}

impl<T> std::ops::Deref for Placed<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.v[self.start..self.start + self.n]
    }
}

impl<T> std::ops::DerefMut for Placed<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.v[self.start..self.start + self.n]
    }
}
