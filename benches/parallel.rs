//! Thread scaling of group steps (criterion): each optimizer in IPEX's storage combination (split
//! weights, bf16 gradients, f32 state), and SGD, Adagrad and AdamW all f32 (PyTorch's fused rows),
//! over single tensors and over a GPT-2-small-shaped parameter list (148 tensors, 124.4M
//! parameters), on pools of each thread count, next to a same-traffic copy loop run on the same
//! pool (the roof). Trails, states and the roof's buffers lie as the PyTorch package places a
//! parameter's states (`Placed::state_of`).
//!
//! `cargo bench --bench parallel`; environment: `HALFSTEP_BENCH_THREADS=1,2` (pool sizes),
//! `HALFSTEP_BENCH_WORKLOADS=64K,256K,1M,4M,16M,64M,gpt2` (workloads),
//! `HALFSTEP_BENCH_OPTIMIZERS=sgd,lamb` (default all), `HALFSTEP_BENCH_POOL=team|openmp|rayon`
//! (default `team`: `Threads::calling_thread_pool`, with the roof cut into the step's own pieces by
//! `Threads::for_each_piece`; `openmp`: `Threads::openmp` on the OpenMP runtime loaded from
//! `HALFSTEP_BENCH_OPENMP` (default `libgomp.so.1`), the pool the PyTorch package steps on where
//! torch runs on OpenMP, the roof cut the same way; `rayon`: `Threads::pool` on a rayon pool, the
//! roof cut by `join`). A `grain` group times steps of 16K..512K elements with the group kept on the
//! calling thread vs handed to the pool, which is how `DEFAULT_GRAIN` was chosen.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Engine, Grads, LambConfig, LambTensor,
    LambWorkspace, SgdConfig, SgdTensor, State, StepContext, TensorStream, Threads, Weights, bf16,
};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[path = "support/placed.rs"]
mod placed;
use placed::{FIRST_MOMENT, Placed, SECOND_MOMENT, TRAIL};

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// GPT-2 small's parameter shapes (token and position embeddings, 12 blocks, final norm).
fn gpt2_small() -> Vec<usize> {
    let (d, vocab, ctx) = (768, 50257, 1024);
    let mut v = vec![vocab * d, ctx * d];
    for _ in 0..12 {
        v.extend([
            d,
            d,
            d * 3 * d,
            3 * d,
            d * d,
            d,
            d,
            d,
            d * 4 * d,
            4 * d,
            4 * d * d,
            d,
        ]);
    }
    v.extend([d, d]);
    v
}

fn workload(name: &str) -> Vec<usize> {
    match name {
        "gpt2" => gpt2_small(),
        s => {
            let (num, unit) = s.split_at(s.len() - 1);
            let n: usize = num.parse().expect("a size like 64K or 16M");
            vec![n << if unit == "M" { 20 } else { 10 }]
        }
    }
}

/// The pool kinds the bench steps on.
#[derive(Clone, Copy)]
enum PoolKind {
    Team,
    OpenMp(halfstep::OpenMp),
    Rayon,
}

/// The OpenMP runtime at `path`, loaded for the rest of the process.
fn openmp_runtime(path: &str) -> halfstep::OpenMp {
    // SAFETY: an OpenMP runtime's initialisers are safe to run; the library is leaked, so it
    // stays loaded while the entry points are used.
    let lib: &'static libloading::Library = Box::leak(Box::new(
        unsafe { libloading::Library::new(path) }
            .unwrap_or_else(|e| panic!("HALFSTEP_BENCH_OPENMP={path}: {e}")),
    ));
    /// The entry point `name`, of type `T`.
    unsafe fn sym<T: Copy>(lib: &libloading::Library, path: &str, name: &[u8]) -> T {
        // SAFETY: the caller names a symbol of type `T`.
        *unsafe { lib.get::<T>(name) }.unwrap_or_else(|e| panic!("{path}: {e}"))
    }
    // SAFETY: the symbols are libgomp's ABI entry points with these types (`OpenMp::new`).
    unsafe {
        halfstep::OpenMp::new(
            sym(lib, path, b"GOMP_parallel\0"),
            sym(lib, path, b"omp_get_thread_num\0"),
            sym(lib, path, b"omp_get_max_threads\0"),
        )
    }
}

fn pool(threads: usize) -> (Arc<rayon_core::ThreadPool>, Threads) {
    let p = Arc::new(
        rayon_core::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap(),
    );
    (p.clone(), Threads::pool(p))
}

/// The buffers of a model in IPEX's layout (and f32 copies for the AdamW row). Trails and states
/// are placed as the PyTorch package places them, from the top halves (`Placed::state_of`); the
/// AdamW row steps the same states beside its own f32 weights.
struct Model {
    top: Vec<Vec<bf16>>,
    trail: Vec<Placed<u16>>,
    g16: Vec<Vec<bf16>>,
    s: [Vec<Placed<f32>>; 2],
    w32: Vec<Vec<f32>>,
    g32: Vec<Vec<f32>>,
}

impl Model {
    fn new(sizes: &[usize], f32_copies: bool) -> Model {
        let val = |i: usize| ((i as f32) * 0.618).sin() * 0.02;
        let w: Vec<Vec<f32>> = sizes.iter().map(|&n| (0..n).map(val).collect()).collect();
        let mut top: Vec<Vec<bf16>> = sizes.iter().map(|&n| vec![bf16::ZERO; n]).collect();
        let mut trail: Vec<Placed<u16>> = top
            .iter()
            .map(|t| Placed::state_of(t, 0u16, t.len(), TRAIL))
            .collect();
        for ((w, t), l) in w.iter().zip(&mut top).zip(&mut trail) {
            halfstep::convert::split(w, t, l).unwrap();
        }
        let g32: Vec<Vec<f32>> = w
            .iter()
            .map(|w| w.iter().map(|x| x * 0.01).collect())
            .collect();
        let zeros = |slot| {
            top.iter()
                .map(|t| Placed::state_of(t, 0.0f32, t.len(), slot))
                .collect::<Vec<_>>()
        };
        Model {
            g16: g32
                .iter()
                .map(|g| g.iter().map(|&x| bf16::from_f32(x)).collect())
                .collect(),
            s: [zeros(FIRST_MOMENT), zeros(SECOND_MOMENT)],
            top,
            trail,
            w32: if f32_copies { w } else { Vec::new() },
            g32: if f32_copies { g32 } else { Vec::new() },
        }
    }
}

/// The roof: a loop with exactly a kernel's memory streams and none of its arithmetic. Per pass,
/// the buffers the kernel only reads are summed and the buffers it updates are read and written
/// back in place (`x + 1`), chunk by chunk so that all streams are in flight together, as in the
/// kernel; the element range is cut over the same pool. (A memcpy of the same byte count is not a
/// roof: one read and one write stream draw less bandwidth than the kernel's four to six streams.)
/// Buffers as (bytes per element, 32-bit words). A pass's buffers lie as a step's do: each placed
/// as the package places a parameter's states, from the first (`Placed::state_of`, slot = its
/// place in the pass).
type Buffers = Vec<(usize, Placed<u32>)>;

struct StreamRoof {
    /// Per pass: the read-only and the updated buffers.
    passes: Vec<(Buffers, Buffers)>,
    n: usize,
    /// The workload's tensors as `Threads::for_each_piece` takes them (every stream at index base
    /// 0, as `step`'s), and where each starts in the buffers, which hold them end to end.
    pieces: Vec<(usize, u64)>,
    firsts: Vec<usize>,
    /// The pass whose elements take a square root and a division (`RoofLoop::Divider`).
    divider_pass: Option<usize>,
}

/// An updated buffer's words, shared by the team's pieces, each of which writes only its own.
#[derive(Clone, Copy)]
struct SharedWords(*mut u32, usize);
// SAFETY: the pieces of `Threads::for_each_piece` are disjoint, so no word is written by two
// threads (`StreamRoof::run_on`).
unsafe impl Send for SharedWords {}
unsafe impl Sync for SharedWords {}

/// Elements per chunk of the roof loop (pieces are cut at multiples of it). Every stream advances
/// by one chunk before the next: 256 elements are 8–16 cache lines per stream, so all streams are in
/// flight together, as in a kernel. With 4096 (16 KiB of f32 per stream) the loop ran 6–17% slower
/// on one thread here (fewer streams prefetched at once), below the kernels it is meant to bound.
const ROOF_CHUNK: usize = 256;

/// The words holding elements `lo..hi` of a buffer of `b` bytes per element.
fn word_range(b: usize, lo: usize, hi: usize) -> std::ops::Range<usize> {
    lo * b / 4..(hi * b).div_ceil(4)
}

/// How the roof's chunk loop runs. `Plain` is compiled for the crate's target (baseline x86-64:
/// SSE2) and leaves prefetching to the hardware. `Prefetched` is the same loop with AVX2 where
/// the CPU has it, and a software prefetch of every stream `ahead` elements ahead, as the kernels
/// do: on the 16-core host the kernels ran 20–35% faster than `Plain` on one thread, so `Plain`
/// alone was no roof there. The scaling table takes the faster of the two per thread count.
///
/// `Divider` is `Prefetched` with one correctly rounded square root and one division per element
/// of the pass that has them in the optimizer (the first 4-byte updated buffer, as
/// `x / (sqrt(x) + 1)`): the traffic and the divider's work of Adagrad and Adam and nothing else,
/// which every step of theirs has to do at least (BENCHMARKS.md, "Floors").
#[derive(Clone, Copy, PartialEq)]
enum RoofLoop {
    Plain,
    Prefetched { ahead: usize },
    Divider { ahead: usize },
}

/// Elements the prefetching roof reads ahead of the chunk it works on (2 KiB of f32, 1 KiB of
/// bf16 per stream, as the all-f32 kernels); `HALFSTEP_BENCH_ROOF_AHEAD` overrides it. On the
/// 16-core host 512 gave the fastest roof at 64M on 1 and 16 threads (1024 was 3–19% slower on
/// four of five rows, 2048 slower still).
const ROOF_AHEAD: usize = 512;

/// Runs the roof over elements `lo..hi`; `rw` holds the updated buffers' words for exactly
/// those elements.
fn roof_piece(
    ro: &Buffers,
    rw: Vec<(usize, &mut [u32])>,
    lo: usize,
    hi: usize,
    pieces: usize,
    how: RoofLoop,
) -> u32 {
    if pieces > 1 && hi - lo >= 2 * ROOF_CHUNK {
        let mid =
            lo + ((hi - lo) / pieces * (pieces / 2)).max(ROOF_CHUNK) / ROOF_CHUNK * ROOF_CHUNK;
        let (mut left, mut right) = (Vec::new(), Vec::new());
        for (b, words) in rw {
            let (l, r) = words.split_at_mut((mid - lo) * b / 4);
            left.push((b, l));
            right.push((b, r));
        }
        let (x, y) = rayon_core::join(
            || roof_piece(ro, left, lo, mid, pieces / 2, how),
            || roof_piece(ro, right, mid, hi, pieces - pieces / 2, how),
        );
        return x.wrapping_add(y);
    }
    let mut rw = rw;
    roof_range(ro, &mut rw, lo, hi, how)
}

/// The roof over elements `lo..hi` on this thread.
fn roof_range(
    ro: &Buffers,
    rw: &mut [(usize, &mut [u32])],
    lo: usize,
    hi: usize,
    how: RoofLoop,
) -> u32 {
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::arch::is_x86_feature_detected!("avx2");
    match how {
        RoofLoop::Plain => roof_chunks::<false, false>(ro, rw, lo, hi, 0),
        #[cfg(target_arch = "x86_64")]
        RoofLoop::Prefetched { ahead } if avx2 => {
            // SAFETY: AVX2 is present (checked just above).
            unsafe { roof_chunks_avx2::<false>(ro, rw, lo, hi, ahead) }
        }
        #[cfg(target_arch = "x86_64")]
        RoofLoop::Divider { ahead } if avx2 => {
            // SAFETY: as above.
            unsafe { roof_chunks_avx2::<true>(ro, rw, lo, hi, ahead) }
        }
        RoofLoop::Prefetched { ahead } => roof_chunks::<true, false>(ro, rw, lo, hi, ahead),
        RoofLoop::Divider { ahead } => roof_chunks::<true, true>(ro, rw, lo, hi, ahead),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn roof_chunks_avx2<const DIVIDE: bool>(
    ro: &Buffers,
    rw: &mut [(usize, &mut [u32])],
    lo: usize,
    hi: usize,
    ahead: usize,
) -> u32 {
    roof_chunks::<true, DIVIDE>(ro, rw, lo, hi, ahead)
}

/// Prefetches the cache lines of `words[r]`, clipped to the buffer.
#[inline(always)]
fn prefetch_words(words: &[u32], r: std::ops::Range<usize>) {
    let r = r.start.min(words.len())..r.end.min(words.len());
    for i in r.step_by(16) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `i` is in bounds; a prefetch has no architectural effect.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(words.as_ptr().add(i).cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (words, i);
    }
}

/// The roof's loop over `lo..hi`, one chunk of every stream after another.
#[inline(always)]
fn roof_chunks<const PREFETCH: bool, const DIVIDE: bool>(
    ro: &Buffers,
    rw: &mut [(usize, &mut [u32])],
    lo: usize,
    hi: usize,
    ahead: usize,
) -> u32 {
    let mut acc = 0u32;
    let mut e = lo;
    while e < hi {
        let end = (e + ROOF_CHUNK).min(hi);
        for (b, words) in ro {
            if PREFETCH {
                prefetch_words(words, word_range(*b, e + ahead, end + ahead));
            }
            acc = words[word_range(*b, e, end)]
                .iter()
                .fold(acc, |s, &x| s.wrapping_add(x));
        }
        let mut divided = !DIVIDE;
        for (b, words) in rw.iter_mut() {
            if PREFETCH {
                prefetch_words(words, word_range(*b, e - lo + ahead, end - lo + ahead));
            }
            let r = word_range(*b, e - lo, end - lo);
            let r = r.start..r.end.min(words.len());
            if !divided && *b == 4 {
                divided = true;
                // The exponent bits set keep every input a normal number in [1, 2) (a subnormal
                // would take a microcode assist on some CPUs), and so does the result.
                words[r].iter_mut().for_each(|x| {
                    let v = f32::from_bits(*x | 0x3f80_0000);
                    *x = (v / (v.sqrt() + 1.0)).to_bits();
                });
            } else {
                words[r].iter_mut().for_each(|x| *x = x.wrapping_add(1));
            }
        }
        e = end;
    }
    acc
}

impl StreamRoof {
    /// `passes`: bytes per element of the read-only and of the updated buffers, per pass.
    fn new(
        sizes: &[usize],
        passes: &[(&[usize], &[usize])],
        divider_pass: Option<usize>,
    ) -> StreamRoof {
        let n: usize = sizes.iter().sum();
        let words = |b: usize| (n * b).div_ceil(4);
        let place = |(ro, rw): &(&[usize], &[usize])| {
            let first = Placed::at(1u32, words(ro[0]), 4096, 0, 0);
            let rest: Vec<_> = (ro[1..].iter().chain(rw.iter()).enumerate())
                .map(|(i, &b)| (b, Placed::state_of(&first, 1u32, words(b), i + 1)))
                .collect();
            let mut bufs = std::iter::once((ro[0], first)).chain(rest);
            let ro: Buffers = bufs.by_ref().take(ro.len()).collect();
            (ro, bufs.collect::<Buffers>())
        };
        let mut first = 0;
        let firsts = sizes
            .iter()
            .map(|&len| {
                // Even starts: no two tensors' pieces share a word of a 16-bit buffer.
                assert!(first % 2 == 0, "tensors of odd length");
                first += len;
                first - len
            })
            .collect();
        StreamRoof {
            passes: passes.iter().map(place).collect(),
            n,
            pieces: sizes.iter().map(|&len| (len, 0)).collect(),
            firsts,
            divider_pass,
        }
    }

    /// The roof on `threads`, cut tensor by tensor into the pieces a step of the workload is cut
    /// into there. Nothing is allocated here but `for_each_piece`'s descriptors.
    fn run_on(&mut self, threads: &Threads, how: RoofLoop) {
        let (pieces, firsts) = (&self.pieces, &self.firsts);
        for (pass, (ro, rw)) in self.passes.iter_mut().enumerate() {
            let how = Self::pass_loop(how, self.divider_pass, pass);
            assert!(rw.len() <= 4, "at most four updated buffers");
            let mut shared = [(0, SharedWords(std::ptr::null_mut(), 0)); 4];
            for (s, (b, w)) in shared.iter_mut().zip(rw.iter_mut()) {
                *s = (*b, SharedWords(w.as_mut_ptr(), w.len()));
            }
            let shared = &shared[..rw.len()];
            let sum = AtomicU32::new(0);
            threads.for_each_piece(pieces, |i, r| {
                let (lo, hi) = (firsts[i] + r.start, firsts[i] + r.end);
                let mut views: [(usize, &mut [u32]); 4] = Default::default();
                for (view, &(b, SharedWords(p, len))) in views.iter_mut().zip(shared) {
                    let words = word_range(b, lo, hi);
                    let words = words.start..words.end.min(len);
                    // SAFETY: in bounds; pieces are disjoint and start at even elements (cut at
                    // multiples of `SPLIT_ALIGN` within tensors that start at even elements), so
                    // no word of a 16-bit buffer is in two pieces.
                    *view = (b, unsafe {
                        std::slice::from_raw_parts_mut(p.add(words.start), words.len())
                    });
                }
                let x = roof_range(ro, &mut views[..shared.len()], lo, hi, how);
                sum.fetch_add(x, Ordering::Relaxed);
            });
            black_box(sum.into_inner());
        }
    }

    /// The loop of pass `pass`: `Divider` only where the optimizer divides.
    fn pass_loop(how: RoofLoop, divider_pass: Option<usize>, pass: usize) -> RoofLoop {
        match how {
            RoofLoop::Divider { ahead } if divider_pass != Some(pass) => {
                RoofLoop::Prefetched { ahead }
            }
            how => how,
        }
    }

    fn run(&mut self, threads: usize, how: RoofLoop) {
        for (pass, (ro, rw)) in self.passes.iter_mut().enumerate() {
            let how = Self::pass_loop(how, self.divider_pass, pass);
            let views = rw.iter_mut().map(|(b, w)| (*b, &mut w[..])).collect();
            black_box(roof_piece(ro, views, 0, self.n, threads * 4, how));
        }
    }
}

struct Opt {
    name: &'static str,
    /// Per pass over memory: bytes per element of each buffer only read, and of each updated.
    passes: &'static [(&'static [usize], &'static [usize])],
    /// The pass with a square root and a division per element, if any.
    divider_pass: Option<usize>,
}

impl Opt {
    /// Bytes moved per element (each read once, each write once).
    fn bytes(&self) -> usize {
        self.passes
            .iter()
            .map(|(ro, rw)| ro.iter().sum::<usize>() + 2 * rw.iter().sum::<usize>())
            .sum()
    }
}

const OPTS: [Opt; 7] = [
    // grads; top, trail, momentum
    Opt {
        name: "sgd_split_bf16grad_f32momentum",
        passes: &[(&[2], &[2, 2, 4])],
        divider_pass: None,
    },
    // grads; weights, momentum (torch's fused SGD)
    Opt {
        name: "sgd_f32",
        passes: &[(&[4], &[4, 4])],
        divider_pass: None,
    },
    Opt {
        name: "adagrad_f32",
        passes: &[(&[4], &[4, 4])],
        divider_pass: Some(0),
    },
    Opt {
        name: "adagrad_split_bf16grad_f32sum",
        passes: &[(&[2], &[2, 2, 4])],
        divider_pass: Some(0),
    },
    Opt {
        name: "adam_split_bf16grad_f32state",
        passes: &[(&[2], &[2, 2, 4, 4])],
        divider_pass: Some(0),
    },
    Opt {
        name: "adamw_f32",
        passes: &[(&[4], &[4, 4, 4])],
        divider_pass: Some(0),
    },
    // pass 1: top, trail, grads; m, v. pass 2: m, v; top, trail.
    Opt {
        name: "lamb_split_bf16grad_f32state",
        passes: &[(&[2, 2, 2], &[4, 4]), (&[4, 4], &[2, 2])],
        divider_pass: Some(0),
    },
];

/// One tensor's buffers as a step takes them: its weights, gradients and two f32 states.
struct Part<'a> {
    stream: TensorStream,
    w: Weights<'a>,
    g: Grads<'a>,
    a: &'a mut [f32],
    b: &'a mut [f32],
}

/// The model's tensors in the layout of optimizer `name`: every buffer f32 for the `_f32` rows,
/// else split weights with bf16 gradients (IPEX's). An iterator, so that a step allocates no more
/// than the tensor list the engine takes.
fn parts<'a>(name: &str, m: &'a mut Model) -> impl Iterator<Item = Part<'a>> + 'a {
    let Model {
        top,
        trail,
        g16,
        s: [s0, s1],
        w32,
        g32,
    } = m;
    let f32 = name.ends_with("_f32");
    // Both layouts chained, the one not taken cut to nothing: one iterator type for either.
    let only = |taken: bool| if taken { usize::MAX } else { 0 };
    let f32_buffers = w32
        .iter_mut()
        .zip(g32.iter())
        .take(only(f32))
        .map(|(w, g)| (Weights::F32(w), Grads::F32(g)));
    let split_buffers = top
        .iter_mut()
        .zip(trail.iter_mut())
        .zip(g16.iter())
        .take(only(!f32))
        .map(|((top, trail), g)| {
            let w = Weights::Split {
                top,
                trail: &mut trail[..],
            };
            (w, Grads::Bf16(g))
        });
    f32_buffers
        .chain(split_buffers)
        .zip(s0.iter_mut().zip(s1.iter_mut()))
        .enumerate()
        .map(|(i, ((w, g), (a, b)))| Part {
            stream: TensorStream::new(i as u32),
            w,
            g,
            a: &mut a[..],
            b: &mut b[..],
        })
}

/// One group step of optimizer `name` over the whole model.
fn step(
    name: &str,
    m: &mut Model,
    e: &Engine,
    ctx: &StepContext,
    threads: &Threads,
    ws: &mut LambWorkspace,
) {
    let parts = parts(name, m);
    match name.split('_').next().unwrap() {
        "sgd" => {
            let cfg = SgdConfig {
                lr: 1e-3,
                momentum: 0.9,
                ..Default::default()
            };
            let mut ts: Vec<_> = parts
                .map(|p| SgdTensor {
                    weights: p.w,
                    grads: p.g,
                    momentum: Some(State::F32(p.a)),
                    stream: p.stream,
                })
                .collect();
            e.step_group(&cfg, ctx, &mut ts, &mut (), threads).unwrap();
        }
        "adagrad" => {
            let cfg = AdagradConfig::default();
            let mut ts: Vec<_> = parts
                .map(|p| AdagradTensor {
                    weights: p.w,
                    grads: p.g,
                    sum: State::F32(p.a),
                    stream: p.stream,
                })
                .collect();
            e.step_group(&cfg, ctx, &mut ts, &mut (), threads).unwrap();
        }
        adam @ ("adam" | "adamw") => {
            let cfg = if adam == "adam" {
                AdamConfig::adam(1e-3)
            } else {
                AdamConfig::adamw(1e-3)
            };
            let mut ts: Vec<_> = parts
                .map(|p| AdamTensor {
                    weights: p.w,
                    grads: p.g,
                    exp_avg: State::F32(p.a),
                    exp_avg_sq: State::F32(p.b),
                    max_exp_avg_sq: None,
                    stream: p.stream,
                })
                .collect();
            e.step_group(&cfg, ctx, &mut ts, &mut (), threads).unwrap();
        }
        "lamb" => {
            let cfg = LambConfig::default();
            let mut ts: Vec<_> = parts
                .map(|p| LambTensor {
                    weights: p.w,
                    grads: p.g,
                    exp_avg: State::F32(p.a),
                    exp_avg_sq: State::F32(p.b),
                    stream: p.stream,
                })
                .collect();
            if ws_too_small(ws, &ts) {
                *ws = LambWorkspace::for_tensors(&ts);
            }
            e.step_group(&cfg, ctx, &mut ts, ws, threads).unwrap();
        }
        other => panic!("unknown optimizer {other}"),
    }
}

fn ws_too_small(ws: &LambWorkspace, ts: &[LambTensor<'_>]) -> bool {
    use halfstep::Step;
    LambConfig::check_workspace(ws, ts).is_err()
}

fn configure(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, n: usize) {
    if n >= 1 << 22 {
        // One step per sample: a 64M step takes ~0.1 s on one thread.
        g.sampling_mode(criterion::SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
    } else {
        g.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
    }
}

fn scaling(c: &mut Criterion) {
    let e = Engine::global().unwrap();
    let ctx = StepContext::new(7, 3);
    let threads: Vec<usize> = env_list("HALFSTEP_BENCH_THREADS", "1,2")
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let wanted = env_list("HALFSTEP_BENCH_OPTIMIZERS", &OPTS.map(|o| o.name).join(","));
    let prefetched = RoofLoop::Prefetched {
        ahead: env_list("HALFSTEP_BENCH_ROOF_AHEAD", &ROOF_AHEAD.to_string())[0]
            .parse()
            .unwrap(),
    };
    let kind = match env_list("HALFSTEP_BENCH_POOL", "team")[0].as_str() {
        "team" => PoolKind::Team,
        "openmp" => PoolKind::OpenMp(openmp_runtime(
            &std::env::var("HALFSTEP_BENCH_OPENMP").unwrap_or_else(|_| "libgomp.so.1".into()),
        )),
        "rayon" => PoolKind::Rayon,
        other => panic!("HALFSTEP_BENCH_POOL={other}: team, openmp or rayon"),
    };
    for w in env_list("HALFSTEP_BENCH_WORKLOADS", "64K,256K,1M,4M,16M,64M,gpt2") {
        let sizes = workload(&w);
        let n: usize = sizes.iter().sum();
        let f32_copies = OPTS.iter().any(|o| {
            o.name.ends_with("_f32") && wanted.iter().any(|x| o.name.starts_with(x.as_str()))
        });
        let mut model = Model::new(&sizes, f32_copies);
        let mut ws = LambWorkspace::default();
        for o in OPTS
            .iter()
            .filter(|o| wanted.iter().any(|x| o.name.starts_with(x.as_str())))
        {
            let mut g = c.benchmark_group(format!("{}/{}B-per-elem/{w}", o.name, o.bytes()));
            g.throughput(Throughput::Elements(n as u64));
            configure(&mut g, n);
            let mut roof = StreamRoof::new(&sizes, o.passes, o.divider_pass);
            for &t in &threads {
                let (rayon, th) = match kind {
                    PoolKind::Rayon => {
                        let (p, th) = pool(t);
                        (Some(p), th)
                    }
                    PoolKind::Team => (None, Threads::calling_thread_pool(t).unwrap()),
                    PoolKind::OpenMp(omp) => (None, Threads::openmp(omp, t)),
                };
                let divider = match prefetched {
                    RoofLoop::Prefetched { ahead } => RoofLoop::Divider { ahead },
                    _ => unreachable!(),
                };
                let roofs = [
                    ("copy-roof", RoofLoop::Plain),
                    ("copy-roof-pf", prefetched),
                    ("divider-floor", divider),
                ];
                let roofs = &roofs[..if o.divider_pass.is_some() { 3 } else { 2 }];
                for &(id, how) in roofs {
                    g.bench_function(BenchmarkId::new(id, format!("{t}T")), |b| {
                        b.iter(|| match &rayon {
                            Some(p) => p.install(|| roof.run(t, how)),
                            None => roof.run_on(&th, how),
                        })
                    });
                }
                g.bench_function(BenchmarkId::new(e.backend().name(), format!("{t}T")), |b| {
                    b.iter(|| step(o.name, &mut model, &e, &ctx, &th, &mut ws))
                });
            }
            g.finish();
        }
    }
}

/// Where the calling thread stops being the better place: split-Adam steps of growing size on
/// two threads with the grain above the size (stays on the caller) and at the split unit.
fn grain(c: &mut Criterion) {
    let e = Engine::global().unwrap();
    let ctx = StepContext::new(7, 3);
    let t: usize = env_list("HALFSTEP_BENCH_THREADS", "1,2")
        .iter()
        .map(|t| t.parse().unwrap())
        .max()
        .unwrap();
    for k in [16usize, 32, 64, 128, 256, 512] {
        let n = k << 10;
        let mut model = Model::new(&[n], false);
        let mut ws = LambWorkspace::default();
        let mut g = c.benchmark_group(format!("grain/adam_split/{k}K"));
        g.throughput(Throughput::Elements(n as u64));
        configure(&mut g, n);
        let caller = Threads::current();
        let spread = pool(t).1.with_grain(n / (2 * t));
        for (name, th) in [("calling-thread", &caller), ("pool", &spread)] {
            g.bench_function(BenchmarkId::new(name, format!("{t}T")), |b| {
                b.iter(|| {
                    step(
                        "adam_split_bf16grad_f32state",
                        &mut model,
                        &e,
                        &ctx,
                        th,
                        &mut ws,
                    )
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, grain, scaling);
criterion_main!(benches);
