//! A burn-cuda program of Burn's newer line (0.22.1, or 0.23.0-pre.1 through `build.sh`): Burn's
//! own `Cuda` (its fusion and autotune on) timed as `examples/bench_linear` and
//! `examples/bench_train` time Hypatia on 0.21, so the two lines compare in one device call
//! (issue 70, `benches/results/nvidia-h200.md`).
//!
//! ```text
//! burn022-probe --dry                         built (this machine has no GPU)
//! burn022-probe --dtype bf16 [--shapes MxKxN,...] [--mlp B:I:H:O] [--runs 20]
//! ```
//!
//! Per shape, `relu(x · w + b)` on plain tensors, as `bench_linear` writes it: medians of timed
//! batches of about 1e13 FLOPs (10 to 500 launches), every output kept alive until the device
//! syncs, after three warm-up batches. Then one training step of the MLP (`nn::Linear`s with
//! ReLU between them, MSE loss, forward and backward), batches of 10 steps, as `bench_train`.
//! One line per row: `linear DTYPE MxKxN ms HOST_MS` and `train DTYPE B:I:H:O ms HOST_MS TFLOPS`
//! (the step's rate: one beyond the GPU's peak means the step did not run in full).
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, DeviceIndex, Distribution, FloatDType, Tensor, activation::relu};
use std::time::Instant;

/// Command-line value of `--name`, or `default`.
fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    (args.iter().position(|a| a == name))
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Medians over `runs` timed batches of `n` calls of `step`: ms per call until the sync, and
/// ms per call before it (the host's share).
fn measure<O>(device: &Device, n: usize, runs: usize, step: impl Fn() -> O) -> (f64, f64) {
    let batch = || {
        let start = Instant::now();
        let outs: Vec<O> = (0..n).map(|_| step()).collect();
        let host = start.elapsed().as_secs_f64();
        device.sync().expect("sync");
        let all = start.elapsed().as_secs_f64();
        drop(outs);
        (all * 1e3 / n as f64, host * 1e3 / n as f64)
    };
    for _ in 0..3 {
        batch();
    }
    let (ms, host): (Vec<f64>, Vec<f64>) = (0..runs).map(|_| batch()).unzip();
    (median(ms), median(host))
}

/// The MLP of `bench_train`: Linear, ReLU, ..., Linear.
struct Mlp {
    layers: Vec<Linear>,
}

impl Mlp {
    fn new(widths: &[usize], device: &Device) -> Self {
        let layers = (widths.windows(2))
            .map(|w| LinearConfig::new(w[0], w[1]).init(device))
            .collect();
        Self { layers }
    }

    fn forward(&self, mut x: Tensor<2>) -> Tensor<2> {
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i + 1 < self.layers.len() {
                x = relu(x);
            }
        }
        x
    }
}

fn main() {
    if std::env::args().any(|a| a == "--dry") {
        println!("built (burn-cuda, LLVM linked)");
        return;
    }
    let dtype = arg("--dtype", "f32");
    let runs: usize = arg("--runs", "20").parse().expect("--runs");
    let mut device = Device::cuda(DeviceIndex::Default);
    let float = match dtype.as_str() {
        "f32" => FloatDType::F32,
        "bf16" => FloatDType::BF16,
        "f16" => FloatDType::F16,
        other => panic!("--dtype {other}: f32, bf16 or f16"),
    };
    device.configure(float).expect("the device's float dtype");
    let normal = Distribution::Normal(0.0, 1.0);
    let shapes = arg(
        "--shapes",
        "256x256x512,1024x784x2048,2048x2048x2048,8192x1024x4096,8192x4096x4096",
    );
    for shape in shapes.split(',').filter(|s| !s.is_empty()) {
        let d: Vec<usize> = shape.split('x').map(|v| v.parse().expect("MxKxN")).collect();
        let (m, k, n) = (d[0], d[1], d[2]);
        let x = Tensor::<2>::random([m, k], normal, &device);
        let w = Tensor::<2>::random([k, n], normal, &device);
        let b = Tensor::<1>::random([n], normal, &device);
        let iters = ((1e13 / (2.0 * (m * k * n) as f64)) as usize).clamp(10, 500);
        let (ms, host) = measure(&device, iters, runs, || {
            relu(x.clone().matmul(w.clone()) + b.clone().unsqueeze())
        });
        println!("linear {dtype} {shape} {ms:.4} {host:.4}");
    }
    let mlp = arg("--mlp", "8192:1024:4096:1024");
    if !mlp.is_empty() {
        let spec: Vec<usize> = mlp.split(':').map(|v| v.parse().expect("B:I:H:O")).collect();
        let train = device.clone().autodiff();
        let model = Mlp::new(&[spec[1], spec[2], spec[2], spec[3]], &train);
        let x = Tensor::<2>::random([spec[0], spec[1]], normal, &train);
        let target = Tensor::<2>::random([spec[0], spec[3]], normal, &train);
        // Each step hands back its first weight's gradient, so a step whose backward did not
        // reach the weights fails here instead of timing less work.
        let step = || {
            let loss = (model.forward(x.clone()) - target.clone()).powi_scalar(2).mean();
            let grads = loss.backward();
            (model.layers[0].weight.val().grad(&grads)).expect("the first weight's gradient")
        };
        let (ms, host) = measure(&train, 10, runs, step);
        // Read back: the gradient was computed, and finite.
        let sum: f32 = step().sum().into_scalar();
        assert!(sum.is_finite(), "the first weight's gradient sums to {sum}");
        // Forward, then two products per Linear backward: 3 · 2 · batch · Σ in · out.
        let flops: f64 = 6.0
            * spec[0] as f64
            * [(spec[1], spec[2]), (spec[2], spec[2]), (spec[2], spec[3])]
                .iter()
                .map(|&(i, o)| (i * o) as f64)
                .sum::<f64>();
        let tflops = flops / (ms * 1e-3) / 1e12;
        println!("train {dtype} {mlp} {ms:.4} {host:.4} {tflops:.0}");
    }
}
