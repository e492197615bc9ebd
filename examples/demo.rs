//! halfstep demo: train one small model four ways and watch bf16 nearest-even stall.
//!
//! A linear regression on built-in synthetic data (64 features, 512 samples), full-batch SGD
//! with momentum, weights held as f32, bf16 rounded to nearest, bf16 stochastically rounded, and
//! Split-SGD (bf16 top + 16-bit trail). The bf16 variants run the forward and backward pass on
//! the bf16 weights, as mixed-precision training does. Updates smaller than half a bf16 ulp are
//! lost by nearest-even, so it stops improving; stochastic rounding keeps them in expectation,
//! and the split layout keeps them exactly.
//!
//! `cargo run --release --example demo` (also writes the loss curves to `target/demo_loss.svg`, or to
//! the path given as the first argument).

use halfstep::{
    Grads, Optimizer, PhiloxRng, Rounding, SgdConfig, SgdTensor, State, TensorStream, Weights, bf16,
};
use rand_core::{Rng, SeedableRng};

pub const FEATURES: usize = 64;
pub const SAMPLES: usize = 512;
pub const LR: f32 = 2e-3;
pub const MOMENTUM: f32 = 0.9;

/// How the weights are stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Storage {
    F32,
    Bf16Nearest,
    Bf16Stochastic,
    Split,
}

pub const STORAGES: [Storage; 4] = [
    Storage::F32,
    Storage::Bf16Nearest,
    Storage::Bf16Stochastic,
    Storage::Split,
];

impl Storage {
    pub fn name(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::Bf16Nearest => "bf16 nearest",
            Storage::Bf16Stochastic => "bf16 SR",
            Storage::Split => "split",
        }
    }
}

/// The synthetic problem: features `x` (row-major, variance 1) and targets `y = x w*`, where the
/// true weights `w*` are bf16 values, so every storage can represent the exact answer and the
/// comparison isolates what rounding the updates does.
pub struct Problem {
    x: Vec<f32>,
    y: Vec<f32>,
}

impl Problem {
    pub fn new() -> Problem {
        let mut r = PhiloxRng::seed_from_u64(2024);
        let mut uniform =
            |lo: f32, hi: f32| lo + (hi - lo) * (r.next_u32() >> 8) as f32 / 16_777_216.0;
        let w_true: Vec<f32> = (0..FEATURES)
            .map(|_| bf16::from_f32(uniform(0.5, 2.5)).to_f32())
            .collect();
        let x: Vec<f32> = (0..FEATURES * SAMPLES)
            .map(|_| uniform(-1.732, 1.732))
            .collect();
        let y = (0..SAMPLES)
            .map(|s| {
                let row = &x[s * FEATURES..(s + 1) * FEATURES];
                row.iter().zip(&w_true).map(|(a, b)| a * b).sum::<f32>()
            })
            .collect();
        Problem { x, y }
    }

    /// Mean squared error / 2 and its gradient at `w`.
    pub fn loss_and_grad(&self, w: &[f32], grad: &mut [f32]) -> f64 {
        grad.fill(0.0);
        let mut loss = 0.0f64;
        for s in 0..SAMPLES {
            let row = &self.x[s * FEATURES..(s + 1) * FEATURES];
            let err = row.iter().zip(w).map(|(a, b)| a * b).sum::<f32>() - self.y[s];
            loss += f64::from(err) * f64::from(err);
            for (g, a) in grad.iter_mut().zip(row) {
                *g += err * a / SAMPLES as f32;
            }
        }
        loss / (2 * SAMPLES) as f64
    }
}

impl Default for Problem {
    fn default() -> Self {
        Problem::new()
    }
}

/// Trains with `storage` for `steps` steps; returns the loss before each step and after the last.
pub fn train(problem: &Problem, storage: Storage, steps: u32) -> Vec<f64> {
    let config = SgdConfig {
        lr: LR,
        momentum: MOMENTUM,
        ..Default::default()
    };
    let mut opt = Optimizer::new(config, 7).expect("valid hyperparameters");
    // Start every weight at 1.0 (a "pretrained" model to fine-tune).
    let mut w32 = vec![1.0f32; FEATURES];
    let mut top = vec![bf16::ONE; FEATURES];
    let mut trail = vec![0u16; FEATURES];
    let mut momentum = vec![0.0f32; FEATURES];
    let mut grad = vec![0.0f32; FEATURES];
    let mut model = vec![0.0f32; FEATURES];
    let mut losses = Vec::with_capacity(steps as usize + 1);
    for step in 0..=steps {
        // The weights the forward pass sees: f32, or the bf16 values (the split layout's top).
        match storage {
            Storage::F32 => model.copy_from_slice(&w32),
            _ => model
                .iter_mut()
                .zip(&top)
                .for_each(|(m, t)| *m = t.to_f32()),
        }
        losses.push(problem.loss_and_grad(&model, &mut grad));
        if step == steps {
            break;
        }
        let weights = match storage {
            Storage::F32 => Weights::F32(&mut w32),
            Storage::Bf16Nearest => Weights::Bf16(&mut top, Rounding::NearestEven),
            Storage::Bf16Stochastic => Weights::Bf16(&mut top, Rounding::Stochastic),
            Storage::Split => Weights::Split {
                top: &mut top,
                trail: &mut trail,
            },
        };
        let mut tensors = [SgdTensor {
            weights,
            grads: Grads::F32(&grad),
            momentum: Some(State::F32(&mut momentum)),
            stream: TensorStream::new(0),
        }];
        opt.step(&mut tensors).expect("buffers match");
    }
    losses
}

#[allow(dead_code)] // tests/training.rs includes this file for `train` alone
fn main() {
    let steps = 3000;
    let problem = Problem::new();
    let runs: Vec<Vec<f64>> = STORAGES
        .iter()
        .map(|&s| train(&problem, s, steps))
        .collect();
    println!(
        "halfstep demo: linear regression, {FEATURES} features x {SAMPLES} samples, \
         SGD lr {LR} momentum {MOMENTUM}, {steps} steps"
    );
    println!("loss (MSE/2) by weight storage:\n");
    print!("{:>6}", "step");
    STORAGES.iter().for_each(|s| print!("  {:>13}", s.name()));
    println!();
    for step in [0u32, 10, 30, 100, 300, 1000, 2000, 3000] {
        print!("{step:>6}");
        runs.iter()
            .for_each(|r| print!("  {:>13.6e}", r[step as usize]));
        println!();
    }
    println!("\nfirst step with loss below 1e-4 (f32's loss then, for scale):");
    for (s, r) in STORAGES.iter().zip(&runs) {
        match r.iter().position(|&l| l < 1e-4) {
            Some(k) => println!(
                "  {:>13}: step {k:>5}  (f32 at that step: {:.2e})",
                s.name(),
                runs[0][k]
            ),
            None => println!(
                "  {:>13}: never (stalled at {:.3e})",
                s.name(),
                r[steps as usize]
            ),
        }
    }
    println!(
        "\nbf16 nearest-even loses every update smaller than half a bf16 ulp and stalls;\n\
         stochastic rounding keeps them in expectation and Split-SGD keeps them exactly."
    );
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/demo_loss.svg".into());
    match std::fs::write(&path, loss_svg(&runs)) {
        Ok(()) => println!("\nloss curves: {path}"),
        Err(e) => eprintln!("could not write {path}: {e}"),
    }
}

/// The loss curves as an SVG line chart: log10 loss against step, one polyline per storage.
#[allow(dead_code)] // as `main`
fn loss_svg(runs: &[Vec<f64>]) -> String {
    let (w, h, m) = (720.0, 420.0, 60.0);
    let steps = runs[0].len() - 1;
    let (lo, hi) = (-12.0f64, 2.0f64); // log10 loss range shown
    let x = |i: usize| m + (w - 2.0 * m) * i as f64 / steps as f64;
    let y = |l: f64| {
        let v = l.max(1e-300).log10().clamp(lo, hi);
        h - m - (h - 2.0 * m) * (v - lo) / (hi - lo)
    };
    let colors = ["#222222", "#d62728", "#1f77b4", "#2ca02c"];
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{m}\" y=\"24\" font-size=\"15\">halfstep demo: loss (MSE/2, log scale) by weight storage</text>\n"
    );
    for e in (lo as i32..=hi as i32).step_by(2) {
        let yy = y(10f64.powi(e));
        svg += &format!(
            "<line x1=\"{m}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\
             <text x=\"8\" y=\"{:.1}\">1e{e}</text>\n",
            w - m,
            yy + 4.0
        );
    }
    for k in 0..=6 {
        let i = steps * k / 6;
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{i}</text>\n",
            x(i),
            h - m + 18.0
        );
    }
    svg += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n",
        w / 2.0,
        h - 12.0
    );
    for (r, (s, c)) in runs.iter().zip(STORAGES.iter().zip(colors)) {
        let pts: Vec<String> = r
            .iter()
            .enumerate()
            .step_by((steps / 600).max(1))
            .map(|(i, &l)| format!("{:.1},{:.1}", x(i), y(l)))
            .collect();
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.6\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        let ly = 44.0 + 16.0 * STORAGES.iter().position(|t| t == s).unwrap_or(0) as f64;
        svg += &format!(
            "<line x1=\"{}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"3\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>\n",
            w - 200.0,
            w - 180.0,
            w - 174.0,
            ly + 4.0,
            s.name()
        );
    }
    svg + "</svg>\n"
}
