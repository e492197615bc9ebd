//! "No allocation on the step path": every optimizer step and conversion runs under a counting
//! global allocator and must not allocate.

use halfstep::{
    AdagradConfig, AdagradTensor, AdamConfig, AdamTensor, Grads, LambConfig, LambTensor, OpenMp,
    Optimizer, Rounding, SgdConfig, SgdTensor, State, StepContext, TensorStream, Threads, Weights,
    bf16, convert,
    quant::{self, Fp8},
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Counting is on (only inside `allocations`).
static MEASURING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's allocations count while measuring: the measuring thread, and the workers of
    /// the pools the tests build. Other threads (the test harness starting the next test) do not.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.load(Ordering::SeqCst) && COUNTED.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Tests that measure take this lock, so that one test's pool workers never count in another's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `f` and returns how many allocations it (and any counted pool worker) made.
fn allocations(f: impl FnOnce()) -> usize {
    COUNTED.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    MEASURING.store(true, Ordering::SeqCst);
    f();
    MEASURING.store(false, Ordering::SeqCst);
    COUNTED.with(|c| c.set(false));
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

#[test]
fn optimizer_steps_and_conversions_do_not_allocate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 4096;
    let grads: Vec<f32> = (0..N).map(|i| (i as f32).sin()).collect();
    let mut w = vec![bf16::ONE; N];
    let mut trail = vec![0u16; N];
    let (mut q8, mut q4) = (vec![0u8; N], vec![0u8; N / 2]);
    let (mut nv, mut mx) = (vec![0u8; N / 16], vec![0u8; N / 32]);
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
        // The quantizers (the fp4 ones keep their tile buffers on the stack).
        let s = TensorStream::new(5);
        quant::f32_to_fp8(&grads, &mut q8, Fp8::E4M3, Rounding::Stochastic, &ctx, &s).unwrap();
        quant::fp8_to_f32(&q8, &mut out32, Fp8::E5M2).unwrap();
        let pts = quant::nvfp4_tensor_scale(&grads).unwrap();
        quant::quantize_nvfp4(
            &grads,
            pts,
            &mut q4,
            &mut nv,
            Rounding::Stochastic,
            &ctx,
            &s,
        )
        .unwrap();
        quant::dequantize_nvfp4(&q4, &nv, pts, &mut out32).unwrap();
        quant::quantize_mxfp4(&grads, &mut q4, &mut mx, Rounding::NearestEven, &ctx, &s).unwrap();
        quant::dequantize_mxfp4(&q4, &mx, &mut out32).unwrap();
    });
    assert_eq!(n, 0, "the step path allocated {n} times");
    // The counter works (the test could not pass vacuously).
    assert!(allocations(|| drop(std::hint::black_box(vec![1u8; 10]))) >= 1);
}

#[test]
fn parallel_steps_allocate_nothing_of_their_own() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // On a pool, the pieces are forked with `join` (stack jobs, no allocation); rayon's queues
    // may still grow a block now and then. Print what a run of steps costs.
    // Kept for the whole process: a dropped pool's threads would allocate while exiting, inside
    // another test's count.
    static POOL: std::sync::OnceLock<std::sync::Arc<rayon_core::ThreadPool>> =
        std::sync::OnceLock::new();
    let pool = POOL
        .get_or_init(|| {
            std::sync::Arc::new(
                rayon_core::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .start_handler(|_| COUNTED.with(|c| c.set(true)))
                    .build()
                    .unwrap(),
            )
        })
        .clone();
    let n = lamb_steps_allocations(Threads::pool(pool).with_grain(4096));
    println!("100 parallel LAMB steps: {n} allocations");
    assert!(n <= 10, "{n} allocations in 100 parallel steps");
    // On the calling thread's pool (counted: the calling thread, which does its share of the work
    // there; the other worker is rayon's own thread, started without a handler).
    let n = std::thread::spawn(|| {
        let threads = Threads::calling_thread_pool(2).unwrap();
        lamb_steps_allocations(threads.with_grain(4096))
    })
    .join()
    .unwrap();
    println!("100 LAMB steps on the calling thread's pool: {n} allocations");
    assert!(
        n <= 10,
        "{n} allocations in 100 steps on the calling thread's pool"
    );
}

thread_local! {
    /// The member number [`parallel_in_turn`] is running.
    static MEMBER: Cell<c_int> = const { Cell::new(0) };
}

/// Regions [`parallel_in_turn`] has run.
static REGIONS: AtomicUsize = AtomicUsize::new(0);

/// An OpenMP runtime's `GOMP_parallel` that runs a region's threads one after another on the
/// calling thread, numbered as libgomp numbers them (the first to run takes every piece, the
/// others find none left): the whole step runs where allocations are counted.
unsafe extern "C" fn parallel_in_turn(
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
    threads: c_uint,
    _flags: c_uint,
) {
    REGIONS.fetch_add(1, Ordering::SeqCst);
    for member in (0..threads.max(1)).rev() {
        MEMBER.set(member as c_int);
        // SAFETY: the region's function and data, alive for this call.
        unsafe { f(data) };
    }
    MEMBER.set(0);
}

unsafe extern "C" fn thread_num() -> c_int {
    MEMBER.get()
}

unsafe extern "C" fn max_threads() -> c_int {
    4
}

#[test]
fn steps_on_an_openmp_runtime_do_not_allocate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the three behave as libgomp's (one region's threads, numbered from 0, the caller
    // among them; returns when all have run) and live as long as the program.
    let omp = unsafe { OpenMp::new(parallel_in_turn, thread_num, max_threads) };
    for threads in [4, 0] {
        let regions = REGIONS.load(Ordering::SeqCst);
        let n = lamb_steps_allocations(Threads::openmp(omp, threads).with_grain(4096));
        assert_eq!(
            n, 0,
            "100 LAMB steps on an OpenMP runtime ({threads} threads) allocated {n} times"
        );
        let regions = REGIONS.load(Ordering::SeqCst) - regions;
        assert!(regions >= 101, "the steps ran in {regions} regions");
    }
}

/// Allocations made by 100 LAMB steps over two tensors (2^18 elements) on `threads`, after a
/// first step that makes the workspace and starts the pool.
fn lamb_steps_allocations(threads: Threads) -> usize {
    const N: usize = 1 << 18;
    let grads: Vec<f32> = (0..N).map(|i| (i as f32).sin()).collect();
    let (mut w, mut m, mut v) = (vec![0.5f32; N], vec![0.0f32; N], vec![0.0f32; N]);
    let mut lamb = Optimizer::new(LambConfig::default(), 1)
        .unwrap()
        .with_threads(threads);
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
    allocations(|| (0..100).for_each(|_| step(&mut lamb)))
}

#[test]
fn c_abi_steps_do_not_allocate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use halfstep::capi::*;
    const N: usize = 4096;
    let grads: Vec<f32> = (0..N).map(|i| (i as f32).cos()).collect();
    let (mut w, mut m) = (vec![0.5f32; N], vec![0.0f32; N]);
    let threads = hs_threads_new(1);
    let buf = |kind, data: *mut f32| hs_buffer {
        kind,
        rounding: HS_STOCHASTIC,
        data: data.cast(),
        trail: std::ptr::null_mut(),
    };
    let mut t = hs_tensor {
        len: N,
        weights: buf(HS_F32, w.as_mut_ptr()),
        grads: buf(HS_F32, grads.as_ptr().cast_mut()),
        state: [
            buf(HS_F32, m.as_mut_ptr()),
            buf(HS_F32, std::ptr::null_mut()),
            buf(HS_F32, std::ptr::null_mut()),
        ],
        stream_id: 0,
        index_base: 0,
    };
    let cfg = hs_sgd_config {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: 0,
        maximize: 0,
    };
    let ctx = |step| hs_step_context {
        seed: 1,
        step,
        replica: HS_REPLICA_IDENTICAL,
    };
    // The first call on a thread may set up thread-locals.
    unsafe { hs_sgd_step(&cfg, &ctx(1), &mut t, 1, threads) };
    let n = allocations(|| {
        for step in 2..10 {
            let st = unsafe { hs_sgd_step(&cfg, &ctx(step), &mut t, 1, threads) };
            assert_eq!(st, hs_status::HS_OK);
        }
    });
    unsafe { hs_threads_free(threads) };
    assert_eq!(n, 0, "C ABI steps allocated {n} times");
}
