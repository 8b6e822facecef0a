//! Train an MLP on a synthetic classification task with `Autodiff<Hypatia<B>>`, then run
//! inference with `Hypatia<B>` and print what Hypatia fused. Each epoch reports its mean step
//! time; the end reports the device memory high-water of a training step.
//!
//! ```text
//! cargo run --release --example train_mlp              # wgpu: any GPU, or the CPU via lavapipe
//! cargo run --release --features cuda --example train_mlp -- --json
//! ```

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;

#[cfg(not(feature = "cuda"))]
type Inner = burn::backend::Wgpu;
#[cfg(not(feature = "cuda"))]
type Runtime = cubecl::wgpu::WgpuRuntime;
#[cfg(feature = "cuda")]
type Inner = burn::backend::Cuda;
#[cfg(feature = "cuda")]
type Runtime = cubecl::cuda::CudaRuntime;

/// The one line a Burn user changes.
type B = hypatia::Hypatia<Inner>;

#[derive(Parser, Debug)]
#[command(about = "Train and run an MLP on Hypatia")]
struct Args {
    /// Training epochs.
    #[arg(long, default_value_t = 6)]
    epochs: usize,
    /// Samples in the synthetic training set.
    #[arg(long, default_value_t = 4096)]
    samples: usize,
    /// Batch size.
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Hidden width of both hidden layers.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// Print the fusion stats as one JSON line at the end.
    #[arg(long)]
    json: bool,
}

const FEATURES: usize = 32;
const CLASSES: usize = 8;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    hidden1: Linear<B>,
    hidden2: Linear<B>,
    output: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    fn new(hidden: usize, device: &B::Device) -> Self {
        Self {
            hidden1: LinearConfig::new(FEATURES, hidden).init(device),
            hidden2: LinearConfig::new(hidden, hidden).init(device),
            output: LinearConfig::new(hidden, CLASSES).init(device),
            act: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = self.act.forward(self.hidden1.forward(x));
        let x = self.act.forward(self.hidden2.forward(x));
        self.output.forward(x)
    }
}

/// Gaussian blobs, one per class, around centres fixed by `CENTRES_SEED`; `seed` draws the
/// samples, so train and test sets share the task but not the points.
struct Dataset {
    features: Vec<f32>,
    labels: Vec<i64>,
}

impl Dataset {
    fn generate(samples: usize, seed: u64) -> Self {
        const CENTRES_SEED: u64 = 42;
        let uniform = |mut state: u64| {
            move || {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 11) as f64 / (1u64 << 53) as f64).max(1e-12)
            }
        };
        let normal = |u: &mut dyn FnMut() -> f64| {
            let (a, b) = (u(), u());
            ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32
        };
        let mut centre_draws = uniform(CENTRES_SEED);
        let centres: Vec<f32> = (0..CLASSES * FEATURES)
            .map(|_| normal(&mut centre_draws))
            .collect();
        let mut uniform = uniform(seed);
        let mut features = Vec::with_capacity(samples * FEATURES);
        let mut labels = Vec::with_capacity(samples);
        for i in 0..samples {
            let class = i % CLASSES;
            labels.push(class as i64);
            for f in 0..FEATURES {
                features.push(centres[class * FEATURES + f] + 1.2 * normal(&mut uniform));
            }
        }
        Self { features, labels }
    }

    fn len(&self) -> usize {
        self.labels.len()
    }

    fn batch<B: Backend>(
        &self,
        start: usize,
        end: usize,
        device: &B::Device,
    ) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let x = TensorData::new(
            self.features[start * FEATURES..end * FEATURES].to_vec(),
            [end - start, FEATURES],
        );
        let y = TensorData::new(self.labels[start..end].to_vec(), [end - start]);
        (Tensor::from_data(x, device), Tensor::from_data(y, device))
    }
}

fn accuracy<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> f32 {
    let total = labels.dims()[0] as f32;
    let correct = logits
        .argmax(1)
        .squeeze_dim::<1>(1)
        .equal(labels)
        .int()
        .sum()
        .into_scalar()
        .elem::<f32>();
    correct / total
}

/// Bytes the device's allocator has handed out and not yet taken back.
fn bytes_in_use(device: &burn::tensor::Device<B>) -> u64 {
    use cubecl::Runtime as _;
    Runtime::client(device)
        .memory_usage()
        .map_or(0, |u| u.bytes_in_use)
}

fn main() {
    let args = Args::parse();
    let device = burn::tensor::Device::<B>::default();
    let train = Dataset::generate(args.samples, 7);
    let test = Dataset::generate(args.samples / 4, 8);
    println!(
        "backend: {}  (train {} samples, test {})",
        B::name(&device),
        train.len(),
        test.len()
    );

    type T = Autodiff<B>;
    let mut model = Mlp::<T>::new(args.hidden, &device);
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let batches = train.len().div_ceil(args.batch_size);
    let start = Instant::now();
    T::sync(&device).expect("device work finished");
    // Memory held before the first step (the model, the optimizer has no state yet).
    let baseline = bytes_in_use(&device);
    let mut high_water = 0u64;
    for epoch in 1..=args.epochs {
        let bar = ProgressBar::new(batches as u64).with_style(
            ProgressStyle::with_template("epoch {prefix} [{bar:30}] {pos}/{len} {msg}")
                .expect("valid template"),
        );
        bar.set_prefix(format!("{epoch}/{}", args.epochs));
        let (mut loss_sum, mut acc_sum) = (0.0, 0.0);
        let epoch_start = Instant::now();
        for b in 0..batches {
            let end = ((b + 1) * args.batch_size).min(train.len());
            let (x, y) = train.batch::<T>(b * args.batch_size, end, &device);
            let logits = model.forward(x);
            let loss = loss_fn.forward(logits.clone(), y.clone());
            // Reading the loss runs the forward: the activations autodiff keeps are alive.
            loss_sum += loss.clone().into_scalar().elem::<f32>();
            high_water = high_water.max(bytes_in_use(&device));
            acc_sum += accuracy(logits, y);
            let grads = loss.backward();
            T::sync(&device).expect("device work finished");
            high_water = high_water.max(bytes_in_use(&device));
            let grads = GradientsParams::from_grads(grads, &model);
            model = optim.step(3e-3, model, grads);
            bar.set_message(format!("loss {:.4}", loss_sum / (b + 1) as f32));
            bar.inc(1);
        }
        bar.finish_and_clear();
        println!(
            "epoch {epoch:>2}: loss {:.4}  train accuracy {:>5.1}%  step {:.2} ms",
            loss_sum / batches as f32,
            100.0 * acc_sum / batches as f32,
            epoch_start.elapsed().as_secs_f64() * 1e3 / batches as f64
        );
    }
    println!(
        "trained in {:.1}s; device memory of a step (high-water above the model): {:.2} MiB",
        start.elapsed().as_secs_f32(),
        high_water.saturating_sub(baseline) as f64 / (1 << 20) as f64
    );

    let model = model.valid(); // Mlp<Hypatia<Inner>>: inference without autodiff
    let (x, y) = test.batch::<B>(0, test.len(), &device);
    let acc = accuracy(model.forward(x), y);
    println!("test accuracy: {:.1}%", 100.0 * acc);

    B::sync(&device).expect("device work finished");
    let stats = hypatia::stats(&device);
    println!("\nHypatia fusion stats");
    println!(
        "{:<14} {:>8} {:>9} {:>12} {:>6}  fallbacks",
        "pattern", "matched", "executed", "tensor-core", "split"
    );
    for (name, p) in &stats.patterns {
        println!(
            "{name:<14} {:>8} {:>9} {:>12} {:>6}  {:?}",
            p.matched, p.executed, p.tensor_core, p.split, p.fallbacks
        );
    }
    println!("declined windows: {:?}", stats.declined);
    println!(
        "egg: {} runs, {:.2} ms total, {:.2} ms max, {} stopped by a limit",
        stats.egg.runs,
        stats.egg.total_micros as f64 / 1e3,
        stats.egg.max_micros as f64 / 1e3,
        stats.egg.limited
    );
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&stats).expect("stats serialise")
        );
    }
}
