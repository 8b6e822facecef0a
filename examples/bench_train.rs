//! One MLP training step (Linear-ReLU-Linear-ReLU-Linear, MSE loss, forward + backward):
//! `Autodiff<Hypatia<B>>` vs `Autodiff<B>` (Burn's fusion on), side by side in one process per
//! dtype. Medians of `--runs` timed batches of `--steps` steps, every gradient kept alive until
//! `sync`, after a warm-up that lets autotune settle. Memory: the device's bytes in use at the
//! step's high points (after the forward, with the activations autodiff keeps, and after the
//! backward, with every gradient) above what was in use before the step.
//!
//! ```text
//! cargo run --release --features cuda --example bench_train -- --dtypes f32,bf16 --json out.json
//! ```

use burn::backend::Autodiff;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::Element;
use burn::tensor::activation::relu;
use burn::tensor::backend::AutodiffBackend;
use clap::Parser;
use std::time::Instant;

#[path = "common/bench.rs"]
mod bench;
use bench::runtime::*;
use bench::{PerDtype, median, rows_for, write_json};

#[derive(Parser, Debug)]
struct Args {
    /// Element types, comma separated: f32, f16, bf16.
    #[arg(long, default_value = "f32,bf16")]
    dtypes: String,
    /// MLPs as batch:d_in:hidden:d_out, comma separated.
    #[arg(long, default_value = "1024:784:2048:10,8192:1024:4096:1024")]
    mlps: String,
    /// Steps per timed batch.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Timed batches (the median is reported).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Leave out the table header (used for the per-dtype child processes).
    #[arg(long)]
    no_header: bool,
}

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Mlp<B> {
    fn new(d_in: usize, hidden: usize, d_out: usize, device: &B::Device) -> Self {
        let widths = [d_in, hidden, hidden, d_out];
        let layers = widths
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).init(device))
            .collect();
        Self { layers }
    }

    fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i + 1 < self.layers.len() {
                x = relu(x);
            }
        }
        x
    }
}

fn bytes_in_use(device: &<Runtime as cubecl::Runtime>::Device) -> u64 {
    use cubecl::Runtime as _;
    Runtime::client(device)
        .memory_usage()
        .map_or(0, |u| u.bytes_in_use)
}

/// Step time (ms, median) and memory high-water (MiB) of `Autodiff<B>` on one MLP.
fn time<B: AutodiffBackend>(spec: [usize; 4], args: &Args) -> (f64, f64)
where
    B::Device: Into<<Runtime as cubecl::Runtime>::Device> + Clone,
{
    let [batch, d_in, hidden, d_out] = spec;
    let device = B::Device::default();
    let model = Mlp::<B>::new(d_in, hidden, d_out, &device);
    let dtype = B::FloatElem::dtype();
    let x = Tensor::<B, 2>::random(
        [batch, d_in],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    assert_eq!(x.dtype(), dtype, "one float dtype per process (Burn 0.21)");
    let target = Tensor::<B, 2>::random(
        [batch, d_out],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let step = || {
        let diff = model.forward(x.clone()) - target.clone();
        let loss = diff.powi_scalar(2).mean();
        loss.backward()
    };
    let sync = || B::sync(&device).expect("sync");
    // Step time, and the host's share of it: the time to record and launch the steps before
    // the sync (when it is close to the step time, the step is bound by the host, not the GPU).
    let batch_ms = || {
        let start = Instant::now();
        let grads: Vec<_> = (0..args.steps).map(|_| step()).collect();
        let host = start.elapsed().as_secs_f64() * 1e3 / args.steps as f64;
        sync();
        let ms = start.elapsed().as_secs_f64() * 1e3 / args.steps as f64;
        drop(grads);
        (ms, host)
    };
    for _ in 0..3 {
        batch_ms();
    }
    let (times, hosts): (Vec<f64>, Vec<f64>) = (0..args.runs).map(|_| batch_ms()).unzip();
    let ms = median(times);
    eprintln!(
        "bench_train: {} ms per step, {} ms of it recording and launching (medians)",
        ms,
        median(hosts)
    );
    // Memory: one step at a time, sampled at its high points.
    let memory_device: <Runtime as cubecl::Runtime>::Device = device.clone().into();
    sync();
    let before = bytes_in_use(&memory_device);
    let diff = model.forward(x.clone()) - target.clone();
    let loss = diff.powi_scalar(2).mean();
    sync();
    let forward = bytes_in_use(&memory_device);
    let grads = loss.backward();
    sync();
    let backward = bytes_in_use(&memory_device);
    drop(grads);
    let high = forward.max(backward).saturating_sub(before);
    (ms, high as f64 / (1 << 20) as f64)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    mlp: String,
    dtype: String,
    hypatia_ms: f64,
    burn_ms: f64,
    hypatia_mib: f64,
    burn_mib: f64,
    /// Fused steps per training step: forward linear-relu, relu gradients, plain matmuls.
    fused_per_step: [f64; 3],
}

fn run<F: burn_cubecl::FloatElement>(args: &Args, rows: &mut Vec<Row>) {
    let device = burn::tensor::Device::<PlainOf<F>>::default();
    let dtype = format!("{:?}", F::dtype()).to_lowercase();
    for mlp in args.mlps.split(',') {
        let spec: Vec<usize> = mlp
            .split(':')
            .map(|d| d.parse().expect("batch:d_in:hidden:d_out"))
            .collect();
        let spec = [spec[0], spec[1], spec[2], spec[3]];
        let patterns = ["linear-relu", "matmul-relu-grad", "matmul"];
        let count = || patterns.map(|p| hypatia::stats(&device).executed(p));
        let before = count();
        // Markers on stderr split a BURN_FUSION_LOG trace by backend.
        eprintln!("bench_train: {mlp} {dtype} hypatia");
        let (hypatia_ms, hypatia_mib) = time::<Autodiff<hypatia::Hypatia<PlainOf<F>>>>(spec, args);
        let after = count();
        let egg = hypatia::stats(&device).egg;
        eprintln!(
            "bench_train: {mlp} {dtype} e-graph runs so far {} ({} us in all)",
            egg.runs, egg.total_micros
        );
        eprintln!("bench_train: {mlp} {dtype} burn");
        let (burn_ms, burn_mib) = time::<Autodiff<PlainOf<F>>>(spec, args);
        // Warm-up, timed and memory steps.
        let steps = ((3 + args.runs) * args.steps + 1) as f64;
        let fused_per_step = [0, 1, 2].map(|i| (after[i] - before[i]) as f64 / steps);
        let flops =
            6.0 * (spec[0] * (spec[1] * spec[2] + spec[2] * spec[2] + spec[2] * spec[3])) as f64;
        let tflops = |ms: f64| flops / (ms * 1e-3) / 1e12;
        println!(
            "{mlp:<22} {dtype:>5} {hypatia_ms:>9.4} {burn_ms:>9.4} {:>7.2}x {:>7.1} {:>7.1} {hypatia_mib:>9.1} {burn_mib:>9.1}  {:.1}/{:.1}/{:.1}",
            burn_ms / hypatia_ms,
            tflops(hypatia_ms),
            tflops(burn_ms),
            fused_per_step[0],
            fused_per_step[1],
            fused_per_step[2],
        );
        rows.push(Row {
            mlp: mlp.to_string(),
            dtype: dtype.clone(),
            hypatia_ms,
            burn_ms,
            hypatia_mib,
            burn_mib,
            fused_per_step,
        });
    }
}

impl PerDtype<Row> for Args {
    fn run<F: burn_cubecl::FloatElement>(&self, rows: &mut Vec<Row>) {
        run::<F>(self, rows)
    }
}

fn main() {
    // RUST_LOG=hypatia=debug shows what each window planned or why it was declined.
    env_logger::init();
    let args = Args::parse();
    if !args.no_header {
        println!(
            "{:<22} {:>5} {:>9} {:>9} {:>8} {:>7} {:>7} {:>9} {:>9}  fused/step (linear-relu/relu-grad/matmul)",
            "batch:d_in:hidden:d_out",
            "dtype",
            "hypatia",
            "burn",
            "vs burn",
            "TF/s hy",
            "TF/s bu",
            "MiB hy",
            "MiB bu"
        );
    }
    let rows = rows_for(&args.dtypes, &args);
    write_json(args.json.as_deref(), &rows);
}
