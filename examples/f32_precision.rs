//! What an f32 matmul computes, per problem shape and layout: exact f32, or TF32 rounded to
//! nearest, or TF32 truncated; for Burn's own backend (its autotuned pick) and for Hypatia under
//! the `f32` setting in force (`HYPATIA_F32`). Decision record 0014 reads its table.
//!
//! Each problem runs twice. Once on positive operands (uniform in [0.5, 1.5)), where every
//! product has the same sign, so that TF32's rounding shows as the mean signed relative error
//! against a float64 reference: near 0 for exact f32 and for round-to-nearest, about -2⁻¹⁰
//! where both operands are truncated (toward zero). Once on signed operands (uniform in
//! [-1, 1)): the relative error norm `|y - ref| / |ref|`, the number the tests bound.
//! Rows are sampled (64 at most) so that the float64 reference stays cheap at 2048³.
//!
//! Hypatia's fused steps race Burn's fused matmul, and a race's first runs are Burn's: set
//! `HYPATIA_RACE=never` to measure Hypatia's own kernel (`HYPATIA_ENGINE_CANDIDATE` picks one
//! engine candidate; the last column names the engine candidate that ran last, if any).
//!
//! ```text
//! HYPATIA_RACE=never cargo run --release --features cuda --example f32_precision
//! HYPATIA_RACE=never HYPATIA_F32=tf32 cargo run --release --features cuda --example f32_precision
//! ```

use burn::prelude::*;
use burn::tensor::{TensorData, activation};
use clap::Parser;

#[path = "common/bench.rs"]
#[allow(dead_code)] // the runtime alone
mod bench;
#[path = "common/device.rs"]
mod device;
use bench::runtime::*;

type Burn = PlainOf<f32>;
type Hyp = hypatia::Hypatia<Burn>;

#[derive(Parser, Debug)]
struct Args {
    /// Shapes as MxKxN, comma separated.
    #[arg(
        long,
        default_value = "1x64x64,17x64x64,45x32x64,45x64x32,45x5x32,132x64x256,132x256x64,256x256x512,511x511x511,512x512x512,1024x784x2048,2048x2048x2048"
    )]
    shapes: String,
    /// Layouts: nn (x · w, Linear's forward), nt (dy · wᵀ, its input gradient), tn (xᵀ · dy,
    /// its weight gradient).
    #[arg(long, default_value = "nn,nt,tn")]
    layouts: String,
}

/// Uniform values in `[lo, lo + 1)` from a fixed sequence.
fn values(len: usize, seed: u64, lo: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// One problem: operands as stored (row-major), and how the matmul reads them.
struct Problem {
    m: usize,
    k: usize,
    n: usize,
    layout: String,
    x: Vec<f32>,
    w: Vec<f32>,
    b: Vec<f32>,
}

impl Problem {
    fn new(m: usize, k: usize, n: usize, layout: &str, lo: f32) -> Self {
        Self {
            m,
            k,
            n,
            layout: layout.into(),
            x: values(m * k, 1 + (m * k) as u64, lo),
            w: values(k * n, 2 + (k * n) as u64, lo),
            b: values(n, 3 + n as u64, lo),
        }
    }

    /// x[r][i] as the matmul reads it.
    fn x_at(&self, r: usize, i: usize) -> f64 {
        match self.layout.as_str() {
            "tn" => self.x[i * self.m + r] as f64, // stored [k, m]
            _ => self.x[r * self.k + i] as f64,
        }
    }

    /// w[i][c] as the matmul reads it.
    fn w_at(&self, i: usize, c: usize) -> f64 {
        match self.layout.as_str() {
            "nt" => self.w[c * self.k + i] as f64, // stored [n, k]
            _ => self.w[i * self.n + c] as f64,
        }
    }

    /// The sampled rows.
    fn rows(&self) -> Vec<usize> {
        let step = self.m.div_ceil(64);
        (0..self.m).step_by(step).collect()
    }

    /// The float64 reference of the sampled rows, with `relu(· + b)` if `linear`.
    fn reference(&self, linear: bool) -> Vec<f64> {
        let mut out = Vec::new();
        for r in self.rows() {
            for c in 0..self.n {
                let mut s = 0.0;
                for i in 0..self.k {
                    s += self.x_at(r, i) * self.w_at(i, c);
                }
                if linear {
                    s = (s + self.b[c] as f64).max(0.0);
                }
                out.push(s);
            }
        }
        out
    }

    /// The matmul (or `relu(x·w + b)`) on backend `B`: the sampled rows.
    fn run<B: Backend>(&self, linear: bool, device: &B::Device) -> Vec<f64> {
        let (m, k, n) = (self.m, self.k, self.n);
        let tensor = |data: &[f32], shape: [usize; 2]| {
            Tensor::<B, 2>::from_data(TensorData::new(data.to_vec(), shape), device)
        };
        let x = match self.layout.as_str() {
            "tn" => tensor(&self.x, [k, m]).transpose(),
            _ => tensor(&self.x, [m, k]),
        };
        let w = match self.layout.as_str() {
            "nt" => tensor(&self.w, [n, k]).transpose(),
            _ => tensor(&self.w, [k, n]),
        };
        let mut y = x.matmul(w);
        if linear {
            let b = Tensor::<B, 1>::from_data(TensorData::new(self.b.clone(), [n]), device);
            y = activation::relu(y + b.unsqueeze());
        }
        let all: Vec<f32> = y.into_data().to_vec().expect("f32 output");
        self.rows()
            .into_iter()
            .flat_map(|r| all[r * n..(r + 1) * n].iter().map(|&v| v as f64))
            .collect()
    }
}

/// Mean signed relative error (positive data).
fn signed(y: &[f64], reference: &[f64]) -> f64 {
    let rel = y
        .iter()
        .zip(reference)
        .map(|(y, r)| (y - r) / r.abs().max(1e-30));
    rel.sum::<f64>() / y.len() as f64
}

/// `|y - ref| / |ref|`.
fn norm_error(y: &[f64], reference: &[f64]) -> f64 {
    let diff: f64 = y.iter().zip(reference).map(|(y, r)| (y - r).powi(2)).sum();
    let norm: f64 = reference.iter().map(|r| r * r).sum();
    (diff / norm.max(1e-300)).sqrt()
}

/// What the errors say: `exact` (signed data within f32's rounding), else `tf32-trunc` where
/// positive data comes out biased toward zero, else `tf32-rn`.
fn class(mean: f64, norm: f64) -> &'static str {
    if norm < 2e-5 {
        "exact"
    } else if mean < -2f64.powi(-12) {
        "tf32-trunc"
    } else {
        "tf32-rn"
    }
}

fn main() {
    let args = Args::parse();
    device::require_device();
    let device = Default::default();
    let mode = hypatia::config::config().f32;
    println!("Hypatia f32 = {mode:?}");
    println!(
        "| shape | layout | op | Burn | Burn bias | Burn error | Hypatia | Hypatia bias | Hypatia error | ratio | fused | candidate |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for shape in args.shapes.split(',') {
        let dims: Vec<usize> = shape.split('x').map(|d| d.parse().unwrap()).collect();
        let [m, k, n] = dims[..] else {
            panic!("shape {shape} is not MxKxN")
        };
        for layout in args.layouts.split(',') {
            for linear in [false, true] {
                if linear && layout != "nn" {
                    continue;
                }
                let positive = Problem::new(m, k, n, layout, 0.5);
                let signed_data = Problem::new(m, k, n, layout, -1.0);
                let (ref_pos, ref_signed) =
                    (positive.reference(linear), signed_data.reference(linear));
                let burn_pos = positive.run::<Burn>(linear, &device);
                let burn_signed = signed_data.run::<Burn>(linear, &device);
                let before = hypatia::stats(&device).executed_total();
                let hyp_pos = positive.run::<Hyp>(linear, &device);
                let hyp_signed = signed_data.run::<Hyp>(linear, &device);
                let fused = hypatia::stats(&device).executed_total() - before;
                let candidate =
                    hypatia::kernel::engine::last_candidate::<Runtime>().unwrap_or_default();
                let burn_mean = signed(&burn_pos, &ref_pos);
                let hyp_mean = signed(&hyp_pos, &ref_pos);
                let burn_err = norm_error(&burn_signed, &ref_signed);
                let hyp_err = norm_error(&hyp_signed, &ref_signed);
                println!(
                    "| {shape} | {layout} | {} | {} | {burn_mean:.1e} | {burn_err:.1e} | {} | {hyp_mean:.1e} | {hyp_err:.1e} | {:.2} | {fused} | {candidate} |",
                    if linear { "relu(x·w+b)" } else { "x·w" },
                    class(burn_mean, burn_err),
                    class(hyp_mean, hyp_err),
                    hyp_err / burn_err.max(1e-9),
                );
            }
        }
    }
}
