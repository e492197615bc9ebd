//! The C ABI from Rust: group steps through `hs_*_step` give the bits of the Rust API; every
//! pointer and argument error returns its status, sets `hs_last_error`, and writes nothing.

use halfstep::capi::hs_status::*;
use halfstep::capi::*;
use halfstep::{
    AdamConfig, AdamTensor, Backend, Engine, Grads, LambConfig, LambTensor, LambWorkspace,
    SgdConfig, SgdTensor, State, StepContext, TensorStream, Threads, Weights, bf16,
};
use std::ffi::CStr;
use std::ptr::null_mut;

/// `hs_force_backend` is the process's, and the test harness runs tests on several threads: the
/// tests that force backends take turns, so each step runs on the backend its loop forced.
static FORCING: std::sync::Mutex<()> = std::sync::Mutex::new(());

const N: usize = 300;

/// Buffers for one tensor: split weights, f32 grads, three f32 states.
#[derive(Clone)]
struct Bufs {
    top: Vec<bf16>,
    trail: Vec<u16>,
    g: Vec<f32>,
    s: [Vec<f32>; 3],
}

fn bufs(seed: usize) -> Bufs {
    let v = |k: usize| -> Vec<f32> {
        (0..N)
            .map(|i| (((i * 7 + k * 13 + seed) % 23) as f32 - 11.0) * 0.03125)
            .collect()
    };
    let w = v(1);
    let (mut top, mut trail) = (vec![bf16::ZERO; N], vec![0u16; N]);
    halfstep::convert::split(&w, &mut top, &mut trail).unwrap();
    Bufs {
        top,
        trail,
        g: v(2),
        s: [
            vec![0.0; N],
            v(3).iter().map(|x| x.abs()).collect(),
            vec![0.0; N],
        ],
    }
}

fn buf(kind: u32, data: *mut f32) -> hs_buffer {
    hs_buffer {
        kind,
        rounding: HS_STOCHASTIC,
        data: data.cast(),
        trail: null_mut(),
    }
}

fn none() -> hs_buffer {
    buf(HS_F32, null_mut())
}

/// A descriptor over `b`: split weights, f32 grads, the first `states` states.
fn desc(b: &mut Bufs, states: usize, id: u32) -> hs_tensor {
    let mut s = [none(); 3];
    for (k, st) in s.iter_mut().enumerate().take(states) {
        *st = buf(HS_F32, b.s[k].as_mut_ptr());
    }
    hs_tensor {
        len: N,
        weights: hs_buffer {
            kind: HS_SPLIT,
            rounding: HS_NEAREST_EVEN,
            data: b.top.as_mut_ptr().cast(),
            trail: b.trail.as_mut_ptr(),
        },
        grads: buf(HS_F32, b.g.as_mut_ptr()),
        state: s,
        stream_id: id,
        index_base: 5,
    }
}

fn bits32(xs: &[f32]) -> Vec<u32> {
    xs.iter().map(|x| x.to_bits()).collect()
}

fn ctx() -> hs_step_context {
    hs_step_context {
        seed: 42,
        step: 3,
        replica: HS_REPLICA_IDENTICAL,
    }
}

fn rust_ctx() -> StepContext {
    StepContext::new(42, 3)
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(hs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn bits(b: &Bufs) -> Vec<u32> {
    let mut v: Vec<u32> = b.top.iter().map(|x| u32::from(x.to_bits())).collect();
    v.extend(b.trail.iter().map(|&x| u32::from(x)));
    for s in &b.s {
        v.extend(s.iter().map(|x| x.to_bits()));
    }
    v
}

#[test]
fn group_steps_match_the_rust_api_across_batches() {
    let e = Engine::new(Backend::Reference).unwrap();
    // More tensors than one stack batch.
    let count = HS_BATCH + 7;
    let mut c_side: Vec<Bufs> = (0..count).map(bufs).collect();
    let mut r_side = c_side.clone();

    // SGD with momentum.
    let mut descs: Vec<hs_tensor> = c_side
        .iter_mut()
        .enumerate()
        .map(|(i, b)| desc(b, 1, i as u32))
        .collect();
    let cfg = hs_sgd_config {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: 1,
        maximize: 0,
    };
    let st = unsafe {
        hs_sgd_step(
            &cfg,
            &ctx(),
            descs.as_mut_ptr(),
            descs.len(),
            std::ptr::null(),
        )
    };
    assert_eq!(st, HS_OK, "{}", last_error());
    let grads: Vec<Vec<f32>> = r_side.iter().map(|b| b.g.clone()).collect();
    let mut ts: Vec<SgdTensor<'_>> = r_side
        .iter_mut()
        .zip(&grads)
        .enumerate()
        .map(|(i, (b, g))| {
            let [m, _, _] = &mut b.s;
            SgdTensor {
                weights: Weights::Split {
                    top: &mut b.top,
                    trail: &mut b.trail,
                },
                grads: Grads::F32(g),
                momentum: Some(State::F32(m)),
                stream: TensorStream {
                    id: i as u32,
                    index_base: 5,
                },
            }
        })
        .collect();
    let rc = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        nesterov: true,
        ..Default::default()
    };
    e.step_group(&rc, &rust_ctx(), &mut ts, &mut (), &Threads::current())
        .unwrap();
    drop(ts);
    for (a, b) in c_side.iter().zip(&r_side) {
        assert_eq!(bits(a), bits(b));
    }

    // LAMB with a workspace, on a 3-thread pool.
    let ws = hs_lamb_workspace_new();
    let threads = hs_threads_new(3);
    assert!(!ws.is_null() && !threads.is_null());
    let mut descs: Vec<hs_tensor> = c_side
        .iter_mut()
        .enumerate()
        .map(|(i, b)| desc(b, 2, i as u32))
        .collect();
    let cfg = hs_lamb_config {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-6,
        weight_decay: 0.01,
        max_trust_ratio: 0.0,
    };
    let st = unsafe { hs_lamb_step(&cfg, &ctx(), descs.as_mut_ptr(), descs.len(), threads, ws) };
    assert_eq!(st, HS_OK, "{}", last_error());
    unsafe {
        hs_lamb_workspace_free(ws);
        hs_threads_free(threads);
    }
    let mut ts: Vec<LambTensor<'_>> = r_side
        .iter_mut()
        .zip(&grads)
        .enumerate()
        .map(|(i, (b, g))| {
            let [m, v, _] = &mut b.s;
            LambTensor {
                weights: Weights::Split {
                    top: &mut b.top,
                    trail: &mut b.trail,
                },
                grads: Grads::F32(g),
                exp_avg: State::F32(m),
                exp_avg_sq: State::F32(v),
                stream: TensorStream {
                    id: i as u32,
                    index_base: 5,
                },
            }
        })
        .collect();
    let mut rws = LambWorkspace::for_tensors(&ts);
    e.step_group(
        &LambConfig {
            lr: 1e-2,
            ..Default::default()
        },
        &rust_ctx(),
        &mut ts,
        &mut rws,
        &Threads::current(),
    )
    .unwrap();
    drop(ts);
    for (a, b) in c_side.iter().zip(&r_side) {
        assert_eq!(bits(a), bits(b));
    }
}

#[test]
fn quantizers_on_every_forced_backend_give_the_same_bits() {
    let _turn = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    // Each forced backend's own kernels (the entry points must route through the forced engine,
    // not the process-wide one) must give the reference's bytes.
    let src: Vec<f32> = (0..333).map(|i| ((i as f32) * 0.37).sin() * 40.0).collect();
    let mut results = Vec::new();
    for b in Backend::available() {
        let name = std::ffi::CString::new(b.name()).unwrap();
        assert_eq!(unsafe { hs_force_backend(name.as_ptr()) }, HS_OK);
        let (mut fp8, mut packed, mut scales, mut mx) =
            (vec![0u8; 333], vec![0u8; 167], vec![0u8; 21], vec![0u8; 11]);
        let (mut pts, mut back) = (0f32, vec![0f32; 333]);
        let c = ctx();
        unsafe {
            let p = src.as_ptr();
            assert_eq!(
                hs_f32_to_fp8(p, fp8.as_mut_ptr(), 333, HS_E5M2, HS_STOCHASTIC, &c, 4, 9),
                HS_OK
            );
            assert_eq!(hs_nvfp4_tensor_scale(p, 333, &mut pts), HS_OK);
            let (pp, sp) = (packed.as_mut_ptr(), scales.as_mut_ptr());
            assert_eq!(
                hs_quantize_nvfp4(p, 333, pts, pp, sp, HS_STOCHASTIC, &c, 4, 5),
                HS_OK
            );
            assert_eq!(
                hs_dequantize_nvfp4(pp, sp, pts, back.as_mut_ptr(), 333),
                HS_OK
            );
            let mp = mx.as_mut_ptr();
            assert_eq!(
                hs_quantize_mxfp4(p, 333, pp, mp, HS_NEAREST_EVEN, &c, 4, 0),
                HS_OK
            );
        }
        results.push((fp8, packed, scales, mx, pts.to_bits(), bits32(&back)));
    }
    assert_eq!(unsafe { hs_force_backend(c"auto".as_ptr()) }, HS_OK);
    assert!(
        results.len() >= 2,
        "the reference and at least one other backend"
    );
    assert!(results.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn adam_on_every_forced_backend_gives_the_same_bits() {
    let _turn = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let mut results = Vec::new();
    for b in Backend::available() {
        let name = std::ffi::CString::new(b.name()).unwrap();
        assert_eq!(unsafe { hs_force_backend(name.as_ptr()) }, HS_OK);
        let got = unsafe { CStr::from_ptr(hs_backend()) }.to_str().unwrap();
        assert_eq!(got, b.name());
        let mut x = bufs(1);
        let mut d = [desc(&mut x, 3, 9)];
        let cfg = hs_adam_config {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
            decoupled_weight_decay: 1,
            amsgrad: 1,
            maximize: 0,
        };
        let st = unsafe { hs_adam_step(&cfg, &ctx(), d.as_mut_ptr(), 1, std::ptr::null()) };
        assert_eq!(st, HS_OK, "{}", last_error());
        results.push(bits(&x));
    }
    assert_eq!(unsafe { hs_force_backend(c"auto".as_ptr()) }, HS_OK);
    assert!(results.windows(2).all(|w| w[0] == w[1]));
    // The same step through Rust.
    let mut y = bufs(1);
    let g = y.g.clone();
    let [m, v, mx] = &mut y.s;
    let mut t = AdamTensor {
        weights: Weights::Split {
            top: &mut y.top,
            trail: &mut y.trail,
        },
        grads: Grads::F32(&g),
        exp_avg: State::F32(m),
        exp_avg_sq: State::F32(v),
        max_exp_avg_sq: Some(State::F32(mx)),
        stream: TensorStream {
            id: 9,
            index_base: 5,
        },
    };
    let cfg = AdamConfig {
        lr: 1e-2,
        beta2: 0.99,
        weight_decay: 0.1,
        amsgrad: true,
        ..AdamConfig::adamw(1e-2)
    };
    Engine::new(Backend::Reference)
        .unwrap()
        .adam_step(&cfg, &rust_ctx(), &mut t)
        .unwrap();
    assert_eq!(results[0], bits(&y));
}

/// Runs `f` on a fresh tensor and checks it returns `want`, leaves every buffer as it was, and
/// leaves a message.
fn refused(want: hs_status, f: impl FnOnce(&mut hs_tensor) -> hs_status) {
    let mut b = bufs(3);
    let before = bits(&b);
    let mut d = desc(&mut b, 1, 0);
    assert_eq!(f(&mut d), want);
    assert!(!last_error().is_empty());
    assert_eq!(bits(&b), before);
}

fn sgd(d: &mut hs_tensor, cfg: hs_sgd_config, ctx: hs_step_context) -> hs_status {
    unsafe { hs_sgd_step(&cfg, &ctx, d, 1, std::ptr::null()) }
}

const SGD: hs_sgd_config = hs_sgd_config {
    lr: 0.1,
    momentum: 0.9,
    dampening: 0.0,
    weight_decay: 0.0,
    nesterov: 0,
    maximize: 0,
};

#[test]
fn every_bad_argument_is_refused_before_any_write() {
    refused(HS_NULL_POINTER, |d| unsafe {
        hs_sgd_step(std::ptr::null(), &ctx(), d, 1, std::ptr::null())
    });
    refused(HS_NULL_POINTER, |d| unsafe {
        hs_sgd_step(&SGD, std::ptr::null(), d, 1, std::ptr::null())
    });
    refused(HS_NULL_POINTER, |d| {
        d.grads.data = null_mut();
        sgd(d, SGD, ctx())
    });
    refused(HS_MISALIGNED, |d| {
        d.state[0].data = unsafe { d.state[0].data.cast::<u8>().add(1).cast() };
        d.len -= 1;
        sgd(d, SGD, ctx())
    });
    refused(HS_INVALID_ARGUMENT, |d| {
        d.state[0].data = d.grads.data;
        sgd(d, SGD, ctx())
    });
    refused(HS_INVALID_ARGUMENT, |d| {
        d.weights.kind = 7;
        sgd(d, SGD, ctx())
    });
    refused(HS_INVALID_HYPERPARAMETER, |d| {
        sgd(d, hs_sgd_config { lr: -1.0, ..SGD }, ctx())
    });
    refused(HS_OUT_OF_RANGE, |d| {
        sgd(d, SGD, hs_step_context { step: 0, ..ctx() })
    });
    refused(HS_OUT_OF_RANGE, |d| {
        d.stream_id = 1 << 28;
        sgd(d, SGD, ctx())
    });
    refused(HS_STATE_MISMATCH, |d| {
        d.state[0] = none();
        sgd(d, SGD, ctx())
    });
    refused(HS_LENGTH_MISMATCH, |d| {
        d.len = 0;
        sgd(d, SGD, ctx())
    });
    // A bad second tensor stops the whole group before the first is written.
    let (mut a, mut b) = (bufs(4), bufs(5));
    let (ba, bb) = (bits(&a), bits(&b));
    let mut d = [desc(&mut a, 1, 0), desc(&mut b, 1, 1)];
    d[1].stream_id = u32::MAX;
    assert_eq!(
        unsafe { hs_sgd_step(&SGD, &ctx(), d.as_mut_ptr(), 2, std::ptr::null()) },
        HS_OUT_OF_RANGE
    );
    assert_eq!((bits(&a), bits(&b)), (ba.clone(), bb.clone()));
    // Buffers shared across the tensors of a group, or a tensor over the descriptor array: refused,
    // naming both, before any write. A huge length is refused as out of range, before the overlap
    // check could misread it.
    for case in 0..4 {
        let mut d = [desc(&mut a, 1, 0), desc(&mut b, 1, 1)];
        match case {
            0 => d[1].grads.data = d[0].grads.data,
            1 => d[1].state[0].data = unsafe { d[0].weights.trail.add(N / 2).cast() },
            2 => d[0].weights.data = d.as_mut_ptr().cast(),
            _ => d[1].len = (1 << 51) + 1,
        }
        let want = if case == 3 {
            HS_OUT_OF_RANGE
        } else {
            HS_INVALID_ARGUMENT
        };
        let st = unsafe { hs_sgd_step(&SGD, &ctx(), d.as_mut_ptr(), 2, std::ptr::null()) };
        assert_eq!(st, want, "case {case}: {}", last_error());
        let msg = last_error();
        let named = match case {
            0 => msg.contains("tensors[0].grads") && msg.contains("tensors[1].grads"),
            1 => msg.contains("tensors[0].trail") && msg.contains("tensors[1].state[0]"),
            2 => {
                msg.contains("tensors[0].weights")
                    && (msg.starts_with("tensors and") || msg.ends_with("and tensors overlap"))
            }
            _ => msg.contains("tensors[1]") && msg.contains("2^51"),
        };
        assert!(named, "case {case}: {msg}");
        assert_eq!((bits(&a), bits(&b)), (ba.clone(), bb.clone()));
    }
    // Backends.
    assert_eq!(
        unsafe { hs_force_backend(c"bogus".as_ptr()) },
        HS_INVALID_ARGUMENT
    );
    assert_eq!(unsafe { hs_backend_available(c"reference".as_ptr()) }, 1);
    assert_eq!(unsafe { hs_backend_available(c"bogus".as_ptr()) }, 0);
    // A success clears the message.
    let mut ok = bufs(6);
    let mut d = desc(&mut ok, 1, 0);
    assert_eq!(sgd(&mut d, SGD, ctx()), HS_OK);
    assert_eq!(last_error(), "");
}

#[test]
fn quantizers_match_the_rust_api() {
    let x: Vec<f32> = (0..100)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.07)
        .collect();
    let c = ctx();
    let s = TensorStream {
        id: 4,
        index_base: 9,
    };
    let rc = rust_ctx();
    // fp8 E5M2, stochastic.
    let (mut a, mut b) = (vec![0u8; 100], vec![0u8; 100]);
    let st = unsafe {
        hs_f32_to_fp8(
            x.as_ptr(),
            a.as_mut_ptr(),
            100,
            HS_E5M2,
            HS_STOCHASTIC,
            &c,
            4,
            9,
        )
    };
    assert_eq!(st, HS_OK, "{}", last_error());
    halfstep::quant::f32_to_fp8(
        &x,
        &mut b,
        halfstep::quant::Fp8::E5M2,
        halfstep::Rounding::Stochastic,
        &rc,
        &s,
    )
    .unwrap();
    assert_eq!(a, b);
    // NVFP4 and MXFP4, stochastic, and back.
    let mut pts = 0f32;
    assert_eq!(
        unsafe { hs_nvfp4_tensor_scale(x.as_ptr(), 100, &mut pts) },
        HS_OK
    );
    assert_eq!(pts, halfstep::quant::nvfp4_tensor_scale(&x).unwrap());
    let (mut pa, mut sa, mut pb, mut sb) =
        (vec![0u8; 50], vec![0u8; 7], vec![0u8; 50], vec![0u8; 7]);
    let st = unsafe {
        hs_quantize_nvfp4(
            x.as_ptr(),
            100,
            pts,
            pa.as_mut_ptr(),
            sa.as_mut_ptr(),
            HS_STOCHASTIC,
            &c,
            4,
            9,
        )
    };
    assert_eq!(st, HS_OK, "{}", last_error());
    halfstep::quant::quantize_nvfp4(
        &x,
        pts,
        &mut pb,
        &mut sb,
        halfstep::Rounding::Stochastic,
        &rc,
        &s,
    )
    .unwrap();
    assert_eq!((&pa, &sa), (&pb, &sb));
    let mut back = vec![0f32; 100];
    assert_eq!(
        unsafe { hs_dequantize_nvfp4(pa.as_ptr(), sa.as_ptr(), pts, back.as_mut_ptr(), 100) },
        HS_OK
    );
    let mut want = vec![0f32; 100];
    halfstep::quant::dequantize_nvfp4(&pb, &sb, pts, &mut want).unwrap();
    assert_eq!(
        back.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    let (mut ma, mut ms) = (vec![0u8; 50], vec![0u8; 4]);
    let st = unsafe {
        hs_quantize_mxfp4(
            x.as_ptr(),
            100,
            ma.as_mut_ptr(),
            ms.as_mut_ptr(),
            HS_NEAREST_EVEN,
            &c,
            4,
            9,
        )
    };
    assert_eq!(st, HS_OK, "{}", last_error());
    assert_eq!(
        unsafe { hs_dequantize_mxfp4(ma.as_ptr(), ms.as_ptr(), back.as_mut_ptr(), 100) },
        HS_OK
    );
    // Errors: NULL scales, unknown format, bad tensor scale.
    let st = unsafe {
        hs_quantize_nvfp4(
            x.as_ptr(),
            100,
            pts,
            pa.as_mut_ptr(),
            null_mut(),
            HS_STOCHASTIC,
            &c,
            4,
            9,
        )
    };
    assert_eq!(st, HS_NULL_POINTER);
    let st = unsafe { hs_f32_to_fp8(x.as_ptr(), a.as_mut_ptr(), 100, 9, HS_STOCHASTIC, &c, 4, 9) };
    assert_eq!(st, HS_INVALID_ARGUMENT);
    let st = unsafe {
        hs_quantize_nvfp4(
            x.as_ptr(),
            100,
            -1.0,
            pa.as_mut_ptr(),
            sa.as_mut_ptr(),
            HS_STOCHASTIC,
            &c,
            4,
            9,
        )
    };
    assert_eq!(st, HS_INVALID_HYPERPARAMETER);
}

#[test]
fn a_pool_grain_moves_work_but_never_bits() {
    // One f32 tensor long enough that a grain of 1 (rounded to 2048) cuts it into many pieces.
    const LEN: usize = 10 * 2048 + 77;
    let fresh = || -> [Vec<f32>; 3] {
        let v = |k: usize| -> Vec<f32> {
            (0..LEN)
                .map(|i| (((i * 7 + k * 13) % 29) as f32 - 14.0) * 0.0625)
                .collect()
        };
        [v(1), v(2), vec![0.0; LEN]]
    };
    let step = |[w, g, m]: &mut [Vec<f32>; 3], threads: *const hs_threads| {
        let mut d = hs_tensor {
            len: LEN,
            weights: buf(HS_F32, w.as_mut_ptr()),
            grads: buf(HS_F32, g.as_mut_ptr()),
            state: [buf(HS_F32, m.as_mut_ptr()), none(), none()],
            stream_id: 0,
            index_base: 0,
        };
        for s in 1..=2 {
            let c = hs_step_context { step: s, ..ctx() };
            let st = unsafe { hs_sgd_step(&SGD, &c, &mut d, 1, threads) };
            assert_eq!(st, HS_OK, "{}", last_error());
        }
    };
    let one = hs_threads_new(1);
    let mut want = fresh();
    step(&mut want, one);

    let pool = hs_threads_new(3);
    assert!(!one.is_null() && !pool.is_null());
    assert_eq!(unsafe { hs_threads_grain(pool) }, 65536);
    assert_eq!(unsafe { hs_threads_set_grain(pool, 1) }, HS_OK);
    assert_eq!(unsafe { hs_threads_grain(pool) }, 2048);
    let mut got = fresh();
    step(&mut got, pool);
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(bits32(a), bits32(b));
    }

    // Errors: NULL, and a grain of 0, which leaves the grain as it was.
    assert_eq!(
        unsafe { hs_threads_set_grain(null_mut(), 4096) },
        HS_NULL_POINTER
    );
    assert!(!last_error().is_empty());
    assert_eq!(
        unsafe { hs_threads_set_grain(pool, 0) },
        HS_INVALID_ARGUMENT
    );
    assert!(last_error().contains("grain"));
    assert_eq!(unsafe { hs_threads_grain(pool) }, 2048);
    assert_eq!(unsafe { hs_threads_grain(std::ptr::null()) }, 0);
    unsafe {
        hs_threads_free(one);
        hs_threads_free(pool);
    }
}
