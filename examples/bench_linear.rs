//! Linear + bias + ReLU forward: `Hypatia<B>` vs Burn's `B` (its fusion on) vs `CubeBackend`
//! (no fusion), in one process. Medians of `--runs` timed batches of `--iters` launches, every
//! output kept alive until `sync`, after a warm-up that lets autotune settle.
//!
//! ```text
//! cargo run --release --features cuda --example bench_linear -- --dtype f16
//! ```

use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::{DType, Element, bf16, f16};
use clap::Parser;
use std::time::Instant;

#[cfg(not(feature = "cuda"))]
mod runtime {
    pub type Runtime = cubecl::wgpu::WgpuRuntime;
    pub type PlainOf<F> = burn::backend::Wgpu<F, i32>;
}
#[cfg(feature = "cuda")]
mod runtime {
    pub type Runtime = cubecl::cuda::CudaRuntime;
    pub type PlainOf<F> = burn::backend::Cuda<F, i32>;
}
use runtime::*;

type Bare<F> = burn_cubecl::CubeBackend<Runtime, F, i32, u8>;

#[derive(Parser, Debug)]
struct Args {
    /// f32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Shapes as MxKxN, comma separated.
    #[arg(long, default_value = "256x256x512,1024x784x2048,2048x2048x2048")]
    shapes: String,
    /// Launches per timed batch.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Timed batches (the median is reported).
    #[arg(long, default_value_t = 20)]
    runs: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median milliseconds of one Linear+ReLU on backend `B`.
fn time<B: Backend>(m: usize, k: usize, n: usize, args: &Args) -> f64 {
    let device = B::Device::default();
    let dtype = B::FloatElem::dtype();
    let rand = |shape: Vec<usize>, seed: u64| {
        let len: usize = shape.iter().product();
        let mut s = seed;
        let v: Vec<f32> = (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect();
        TensorData::new(v, shape).convert_dtype(dtype)
    };
    let x = Tensor::<B, 2>::from_data(rand(vec![m, k], 1), &device);
    let w = Tensor::<B, 2>::from_data(rand(vec![k, n], 2), &device);
    let b = Tensor::<B, 1>::from_data(rand(vec![n], 3), &device);
    let step = || relu(x.clone().matmul(w.clone()) + b.clone().unsqueeze());
    let batch = |iters: usize| {
        let start = Instant::now();
        let outs: Vec<_> = (0..iters).map(|_| step()).collect();
        B::sync(&device).expect("sync");
        let elapsed = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
        drop(outs);
        elapsed
    };
    for _ in 0..3 {
        batch(args.iters);
    }
    median((0..args.runs).map(|_| batch(args.iters)).collect())
}

fn run<F: burn_cubecl::FloatElement>(args: &Args) {
    println!(
        "{:<16} {:>6} {:>11} {:>11} {:>11} {:>8} {:>9}",
        "M x K x N", "dtype", "hypatia ms", "burn ms", "cube ms", "TFLOP/s", "vs burn"
    );
    for shape in args.shapes.split(',') {
        let dims: Vec<usize> = shape
            .split('x')
            .map(|d| d.parse().expect("MxKxN"))
            .collect();
        let (m, k, n) = (dims[0], dims[1], dims[2]);
        let hypatia = time::<hypatia::Hypatia<PlainOf<F>>>(m, k, n, args);
        let burn = time::<PlainOf<F>>(m, k, n, args);
        let cube = time::<Bare<F>>(m, k, n, args);
        let tflops = 2.0 * (m * k * n) as f64 / (hypatia * 1e-3) / 1e12;
        println!(
            "{shape:<16} {:>6} {hypatia:>11.4} {burn:>11.4} {cube:>11.4} {tflops:>8.2} {:>8.2}x",
            format!("{:?}", F::dtype()).to_lowercase(),
            burn / hypatia
        );
    }
    let device = burn::tensor::Device::<PlainOf<F>>::default();
    println!(
        "{}",
        serde_json::to_string(&hypatia::stats(&device)).unwrap()
    );
}

fn main() {
    let args = Args::parse();
    match args.dtype.as_str() {
        "f32" => run::<f32>(&args),
        "f16" => run::<f16>(&args),
        "bf16" => run::<bf16>(&args),
        other => panic!("unknown dtype {other}"),
    }
    let _ = DType::F32;
}
