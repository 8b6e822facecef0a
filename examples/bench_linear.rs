//! Linear + bias + ReLU forward: `Hypatia<B>` vs Burn's `B` (its fusion on) vs `CubeBackend`
//! (no fusion), in one process. Medians of `--runs` timed batches of up to `--iters` launches
//! (fewer for large problems), every output kept alive until `sync`, after a warm-up that lets
//! autotune settle. Prints a table and, with `--json`, writes one record per shape and dtype.
//!
//! ```text
//! cargo run --release --features cuda --example bench_linear -- --dtypes bf16 --json out.json
//! ```

use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::{Element, bf16, f16};
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
    /// Element types, comma separated: f32, f16, bf16.
    #[arg(long, default_value = "f32,f16,bf16")]
    dtypes: String,
    /// Shapes as MxKxN, comma separated.
    #[arg(
        long,
        default_value = "256x256x512,1024x784x2048,2048x2048x2048,8192x1024x4096,8192x4096x1024,8192x4096x4096,16384x8192x8192"
    )]
    shapes: String,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Leave out the table header (used for the per-dtype child processes).
    #[arg(long)]
    no_header: bool,
    /// Launches per timed batch.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Timed batches (the median is reported).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Also time Hypatia forced onto these tensor-core engine candidates, comma separated
    /// (e.g. `wgmma 128x256 s4 g1,wgmma 128x256 s4 g16 persistent`): one line each.
    #[arg(long, default_value = "")]
    candidates: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median milliseconds of one Linear+ReLU on backend `B`.
fn time<B: Backend>(m: usize, k: usize, n: usize, args: &Args) -> f64 {
    // About 20 ms of work per timed batch at 100 TFLOP/s, at least one launch.
    let iters = args
        .iters
        .min((2e12 / (2.0 * (m * k * n) as f64)).max(1.0) as usize);
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
    assert_eq!(x.dtype(), dtype, "one float dtype per process (Burn 0.21)");
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
        batch(iters);
    }
    median((0..args.runs).map(|_| batch(iters)).collect())
}

/// One row of the table.
#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    m: usize,
    k: usize,
    n: usize,
    dtype: String,
    hypatia_ms: f64,
    burn_ms: f64,
    cube_ms: f64,
    hypatia_tflops: f64,
    burn_tflops: f64,
    /// How Hypatia ran the step: `tiled`, `tensor-core: <candidate>` or `split`.
    path: String,
    /// Milliseconds of Hypatia forced onto each `--candidates` entry.
    #[serde(default)]
    candidates: Vec<(String, f64)>,
}

fn run<F: burn_cubecl::FloatElement>(args: &Args, rows: &mut Vec<Row>) {
    let device = burn::tensor::Device::<PlainOf<F>>::default();
    let dtype = format!("{:?}", F::dtype()).to_lowercase();
    for shape in args.shapes.split(',') {
        let dims: Vec<usize> = shape
            .split('x')
            .map(|d| d.parse().expect("MxKxN"))
            .collect();
        let (m, k, n) = (dims[0], dims[1], dims[2]);
        let before = hypatia::stats(&device);
        let hypatia = time::<hypatia::Hypatia<PlainOf<F>>>(m, k, n, args);
        let after = hypatia::stats(&device);
        let count = |s: &hypatia::FusionStats, f: fn(&hypatia::PatternStats) -> u64| {
            s.patterns.get("linear-relu").map_or(0, f)
        };
        let path = [
            (
                "tiled",
                count(&after, |p| p.executed) - count(&before, |p| p.executed),
            ),
            (
                "tensor-core",
                count(&after, |p| p.tensor_core) - count(&before, |p| p.tensor_core),
            ),
            (
                "split",
                count(&after, |p| p.split) - count(&before, |p| p.split),
            ),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, _)| match name {
            // The engine's autotuned choice, e.g. `tensor-core: wgmma 128x256 s4`.
            "tensor-core" => format!(
                "{name}: {}",
                hypatia::kernel::tensor_core::last_candidate::<Runtime>().unwrap_or_default()
            ),
            _ => name.to_string(),
        })
        .collect::<Vec<_>>()
        .join("+");
        let mut candidates = Vec::new();
        for name in args.candidates.split(',').filter(|c| !c.is_empty()) {
            hypatia::kernel::tensor_core::force_candidate(Some(name));
            let ms = time::<hypatia::Hypatia<PlainOf<F>>>(m, k, n, args);
            hypatia::kernel::tensor_core::force_candidate(None);
            let ran = hypatia::kernel::tensor_core::last_candidate::<Runtime>().unwrap_or_default();
            let note = if ran == name {
                String::new()
            } else {
                format!(" (declined: ran {ran})")
            };
            println!("  {shape:<16} {dtype:>5} {ms:>10.4}  {name}{note}");
            candidates.push((name.to_string(), ms));
        }
        let burn = time::<PlainOf<F>>(m, k, n, args);
        let cube = time::<Bare<F>>(m, k, n, args);
        let tflops = |ms: f64| 2.0 * (m * k * n) as f64 / (ms * 1e-3) / 1e12;
        println!(
            "{shape:<18} {dtype:>5} {hypatia:>10.4} {burn:>10.4} {cube:>10.4} {:>8.1} {:>8.1} {:>7.2}x  {path}",
            tflops(hypatia),
            tflops(burn),
            burn / hypatia
        );
        rows.push(Row {
            m,
            k,
            n,
            dtype: dtype.clone(),
            hypatia_ms: hypatia,
            burn_ms: burn,
            cube_ms: cube,
            hypatia_tflops: tflops(hypatia),
            burn_tflops: tflops(burn),
            path,
            candidates,
        });
    }
}

/// Runs one dtype in a child process and returns its rows: Burn 0.21 fixes a device's float
/// dtype at the first tensor of the process, so a second dtype in the same process would
/// silently run in the first one's.
fn run_child(args: &Args, dtype: &str) -> Vec<Row> {
    let json =
        std::env::temp_dir().join(format!("bench_linear_{}_{dtype}.json", std::process::id()));
    let status = std::process::Command::new(std::env::current_exe().expect("own path"))
        .args(["--dtypes", dtype, "--shapes", &args.shapes, "--no-header"])
        .args([
            "--iters",
            &args.iters.to_string(),
            "--runs",
            &args.runs.to_string(),
        ])
        .args(["--candidates", &args.candidates])
        .arg("--json")
        .arg(&json)
        .status()
        .expect("spawn the benchmark for one dtype");
    assert!(status.success(), "{dtype} benchmark failed");
    let rows = std::fs::read_to_string(&json).expect("child's json");
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&rows).expect("child's rows")
}

fn main() {
    let args = Args::parse();
    if !args.no_header {
        println!(
            "{:<18} {:>5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8}  path",
            "M x K x N", "dtype", "hypatia", "burn", "cube", "TF/s hy", "TF/s bu", "vs burn"
        );
    }
    let dtypes: Vec<&str> = args.dtypes.split(',').collect();
    let mut rows = Vec::new();
    if let [dtype] = dtypes.as_slice() {
        match *dtype {
            "f32" => run::<f32>(&args, &mut rows),
            "f16" => run::<f16>(&args, &mut rows),
            "bf16" => run::<bf16>(&args, &mut rows),
            other => panic!("unknown dtype {other}"),
        }
    } else {
        for dtype in dtypes {
            rows.extend(run_child(&args, dtype));
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows).unwrap()).expect("write json");
    }
}
