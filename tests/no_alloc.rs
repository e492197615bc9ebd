//! "No allocation on the step path": every optimizer step and conversion runs under a counting
//! global allocator and must not allocate.

use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Grads, LambConfig, LambTensor, Optimizer,
    Rounding, SgdConfig, SgdTensor, State, StepContext, TensorStream, Threads, Weights, bf16,
    convert,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns how many allocations it made.
fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

#[test]
fn optimizer_steps_and_conversions_do_not_allocate() {
    const N: usize = 4096;
    let grads: Vec<f32> = (0..N).map(|i| (i as f32).sin()).collect();
    let mut w = vec![bf16::ONE; N];
    let mut trail = vec![0u16; N];
    let (mut a, mut b, mut c) = (vec![0.0f32; N], vec![0.5f32; N], vec![0.5f32; N]);
    let mut s16 = vec![bf16::ZERO; N];
    // On the calling thread: the pool's own queues are rayon's business (see the test below).
    let mut sgd = Optimizer::new(
        SgdConfig {
            momentum: 0.9,
            ..Default::default()
        },
        1,
    )
    .unwrap()
    .with_threads(Threads::current());
    let mut adagrad = Optimizer::new(AdagradConfig::default(), 1)
        .unwrap()
        .with_threads(Threads::current());
    let mut adam = Optimizer::new(
        AdamConfig {
            amsgrad: true,
            ..AdamConfig::adamw(1e-3)
        },
        1,
    )
    .unwrap()
    .with_threads(Threads::current());
    let mut lamb = Optimizer::new(LambConfig::default(), 1)
        .unwrap()
        .with_threads(Threads::current());
    let mut out16 = vec![bf16::ZERO; N];
    let mut out32 = vec![0.0f32; N];
    // LAMB's workspace is made once, before the first step (without this the first step makes it).
    lamb.reserve(&[LambTensor {
        weights: Weights::Bf16(&mut w, Rounding::NearestEven),
        grads: Grads::F32(&grads),
        exp_avg: State::F32(&mut a),
        exp_avg_sq: State::F32(&mut b),
        stream: TensorStream::new(3),
    }]);

    let n = allocations(|| {
        sgd.step(&mut [SgdTensor {
            weights: Weights::Bf16(&mut w, Rounding::Stochastic),
            grads: Grads::F32(&grads),
            momentum: Some(State::Bf16(&mut s16, Rounding::Stochastic)),
            stream: TensorStream::new(0),
        }])
        .unwrap();
        adagrad
            .step(&mut [AdagradTensor {
                weights: Weights::Split {
                    top: &mut w,
                    trail: &mut trail,
                },
                grads: Grads::F32(&grads),
                sum: State::F32(&mut b),
                stream: TensorStream::new(1),
            }])
            .unwrap();
        adam.step(&mut [AdamTensor {
            weights: Weights::F32(&mut a),
            grads: Grads::F32(&grads),
            exp_avg: State::Bf16(&mut s16, Rounding::Stochastic),
            exp_avg_sq: State::F32(&mut b),
            max_exp_avg_sq: Some(State::F32(&mut c)),
            stream: TensorStream::new(2),
        }])
        .unwrap();
        lamb.step(&mut [LambTensor {
            weights: Weights::Bf16(&mut w, Rounding::NearestEven),
            grads: Grads::F32(&grads),
            exp_avg: State::F32(&mut a),
            exp_avg_sq: State::F32(&mut b),
            stream: TensorStream::new(3),
        }])
        .unwrap();
        let ctx = StepContext::new(1, 1);
        convert::f32_to_bf16(
            &grads,
            &mut out16,
            Rounding::Stochastic,
            &ctx,
            &TensorStream::new(4),
        )
        .unwrap();
        convert::bf16_to_f32(&out16, &mut out32).unwrap();
    });
    assert_eq!(n, 0, "the step path allocated {n} times");
    // The counter works (the test could not pass vacuously).
    assert!(allocations(|| drop(std::hint::black_box(vec![1u8; 10]))) >= 1);
}

#[test]
fn parallel_steps_allocate_nothing_of_their_own() {
    // On a pool, the pieces are forked with `join` (stack jobs, no allocation); rayon's queues
    // may still grow a block now and then. Print what a run of steps costs.
    const N: usize = 1 << 18;
    let pool = std::sync::Arc::new(
        rayon_core::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap(),
    );
    let grads: Vec<f32> = (0..N).map(|i| (i as f32).sin()).collect();
    let (mut w, mut m, mut v) = (vec![0.5f32; N], vec![0.0f32; N], vec![0.0f32; N]);
    let mut lamb = Optimizer::new(LambConfig::default(), 1)
        .unwrap()
        .with_threads(Threads::pool(pool).with_grain(4096));
    let mut step = |lamb: &mut Optimizer<LambConfig>| {
        let (h, t) = w.split_at_mut(N / 3);
        let (gh, gt) = grads.split_at(N / 3);
        let (mh, mt) = m.split_at_mut(N / 3);
        let (vh, vt) = v.split_at_mut(N / 3);
        lamb.step(&mut [
            LambTensor {
                weights: Weights::F32(h),
                grads: Grads::F32(gh),
                exp_avg: State::F32(mh),
                exp_avg_sq: State::F32(vh),
                stream: TensorStream::new(0),
            },
            LambTensor {
                weights: Weights::F32(t),
                grads: Grads::F32(gt),
                exp_avg: State::F32(mt),
                exp_avg_sq: State::F32(vt),
                stream: TensorStream::new(1),
            },
        ])
        .unwrap();
    };
    step(&mut lamb); // makes the workspace, starts the pool
    let n = allocations(|| (0..100).for_each(|_| step(&mut lamb)));
    println!("100 parallel LAMB steps: {n} allocations");
    assert!(n <= 10, "{n} allocations in 100 parallel steps");
}
