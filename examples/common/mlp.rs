//! What `train_mlp`, `infer_mlp` and `inspect_fusions` share: the backend, the model, the
//! synthetic task and where the trained model is kept.

#![allow(dead_code)] // each example uses part of it

use burn::nn::LinearConfig;
use burn::prelude::*;
use burn::record::{DefaultRecorder, RecorderError};
use std::path::{Path, PathBuf};

#[cfg(not(feature = "cuda"))]
pub type Inner = burn::backend::Wgpu;
#[cfg(not(feature = "cuda"))]
pub type Runtime = cubecl::wgpu::WgpuRuntime;
#[cfg(feature = "cuda")]
pub type Inner = burn::backend::Cuda;
#[cfg(feature = "cuda")]
pub type Runtime = cubecl::cuda::CudaRuntime;

/// The one line a Burn user changes.
pub type B = hypatia::Hypatia<Inner>;

/// Input features of the synthetic task.
pub const FEATURES: usize = 32;
/// Classes of the synthetic task.
pub const CLASSES: usize = 8;
/// Seed of the test set (the training set uses 7).
pub const TEST_SEED: u64 = 8;

/// Where `train_mlp` writes the model and the loss curve, and `infer_mlp` reads the model.
pub fn default_out_dir() -> PathBuf {
    PathBuf::from("target/mlp-example")
}

#[path = "model.rs"]
mod model;
pub use model::Mlp;

impl<B: Backend> Mlp<B> {
    /// A freshly initialised model with `hidden` units in each hidden layer.
    pub fn new(hidden: usize, device: &B::Device) -> Self {
        Self::from_layers([
            LinearConfig::new(FEATURES, hidden).init(device),
            LinearConfig::new(hidden, hidden).init(device),
            LinearConfig::new(hidden, CLASSES).init(device),
        ])
    }

    /// The hidden width this model was built with.
    pub fn hidden(&self) -> usize {
        self.layers()[0].weight.dims()[1]
    }

    /// Saves the parameters in `dir` with Burn's default recorder (named MessagePack), and
    /// the hidden width beside them so [`Mlp::load`] can rebuild the model.
    pub fn save(self, dir: &Path) -> Result<(), RecorderError> {
        std::fs::create_dir_all(dir).map_err(|e| RecorderError::Unknown(e.to_string()))?;
        std::fs::write(dir.join("hidden.txt"), self.hidden().to_string())
            .map_err(|e| RecorderError::Unknown(e.to_string()))?;
        self.save_file(dir.join("model"), &DefaultRecorder::new())
    }

    /// Loads a model saved by [`Mlp::save`].
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, RecorderError> {
        let hidden = std::fs::read_to_string(dir.join("hidden.txt"))
            .map_err(|e| RecorderError::FileNotFound(format!("{}: {e}", dir.display())))?;
        let hidden = hidden
            .trim()
            .parse()
            .map_err(|e| RecorderError::Unknown(format!("hidden.txt: {e}")))?;
        Self::new(hidden, device).load_file(dir.join("model"), &DefaultRecorder::new(), device)
    }
}

/// Gaussian blobs, one per class, around centres fixed by `CENTRES_SEED`; `seed` draws the
/// samples, so train and test sets share the task but not the points.
pub struct Dataset {
    features: Vec<f32>,
    labels: Vec<i64>,
}

impl Dataset {
    /// `samples` points drawn with `seed`, classes in turn.
    pub fn generate(samples: usize, seed: u64) -> Self {
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

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Samples `start..end` as features `[n, FEATURES]` and labels `[n]`.
    pub fn batch<B: Backend>(
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

/// The fraction of rows whose largest logit is the label.
pub fn accuracy<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> f32 {
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

/// Prints what Hypatia fused on `device`, one row per pattern.
pub fn print_stats(device: &burn::tensor::Device<B>) {
    B::sync(device).expect("device work finished");
    let stats = hypatia::stats(device);
    println!("\nHypatia fusion stats");
    println!(
        "{:<17} {:>8} {:>9} {:>12} {:>6} {:>11} {:>7} {:>11}  fallbacks",
        "pattern", "matched", "tiled", "tensor-core", "split", "bias grads", "raced", "burn's side"
    );
    // `raced`: real shapes timed against Burn's fused matmul; `burn's side`: steps it ran
    // because it measured faster there (or while racing).
    for (name, p) in &stats.patterns {
        println!(
            "{name:<17} {:>8} {:>9} {:>12} {:>6} {:>11} {:>7} {:>11}  {:?}",
            p.matched,
            p.tiled,
            p.tensor_core,
            p.split,
            p.bias_grads,
            p.raced,
            p.burn_fused,
            p.fallbacks
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
}
