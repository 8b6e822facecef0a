//! What `train_learner`, `train_multi_gpu` and the Learner test share: an MLP classifier trained
//! the way Burn's own examples train (burn-train's `SupervisedTraining` + `Learner`, its loss
//! and accuracy metrics, a file checkpointer, its CLI/TUI renderer), on any `AutodiffBackend`
//! and any of burn-train's execution strategies. Nothing here names Hypatia: the examples pick
//! `Autodiff<Hypatia<B>>` or `Autodiff<B>` by a type parameter.

#![allow(dead_code)] // each example uses part of it

#[path = "learner_cli.rs"]
mod cli;
pub use cli::*;
#[path = "step_times.rs"]
pub mod step_times;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::prelude::*;
use burn::record::CompactRecorder;
use burn::tensor::backend::AutodiffBackend;
use burn::train::logger::{FileMetricLogger, MetricLogger};
use burn::train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn::train::metric::{AccuracyMetric, LossMetric, MetricDefinition, MetricId, NumericEntry};
use burn::train::renderer::CliMetricsRenderer;
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, SupervisedTraining,
    TrainOutput, TrainStep,
};
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The backends the examples train on: any `AutodiffBackend`, and with the `distributed`
/// feature one Burn can run DDP on (`Autodiff<Hypatia<Cuda>>` is both).
#[cfg(feature = "distributed")]
pub trait TrainBackend:
    AutodiffBackend + burn::tensor::backend::distributed::DistributedBackend
{
}
#[cfg(feature = "distributed")]
impl<B: AutodiffBackend + burn::tensor::backend::distributed::DistributedBackend> TrainBackend
    for B
{
}
/// The backends the examples train on: any `AutodiffBackend`.
#[cfg(not(feature = "distributed"))]
pub trait TrainBackend: AutodiffBackend {}
#[cfg(not(feature = "distributed"))]
impl<B: AutodiffBackend> TrainBackend for B {}

/// Linear + ReLU for each hidden width, then a Linear to the class logits.
#[derive(Module, Debug)]
pub struct Classifier<B: Backend> {
    hidden: Vec<Linear<B>>,
    output: Linear<B>,
    act: Relu,
}

impl<B: Backend> Classifier<B> {
    /// `features → hidden[0] → … → classes`.
    pub fn new(features: usize, hidden: &[usize], classes: usize, device: &B::Device) -> Self {
        let mut width = features;
        let hidden = hidden
            .iter()
            .map(|&next| {
                let layer = LinearConfig::new(width, next).init(device);
                width = next;
                layer
            })
            .collect();
        Self {
            hidden,
            output: LinearConfig::new(width, classes).init(device),
            act: Relu::new(),
        }
    }

    /// Logits `[batch, classes]`.
    pub fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        for layer in &self.hidden {
            x = self.act.forward(layer.forward(x));
        }
        self.output.forward(x)
    }

    fn classify(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        let logits = self.forward(batch.inputs);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, logits, batch.targets)
    }
}

impl<B: AutodiffBackend> TrainStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> TrainOutput<ClassificationOutput<B>> {
        // Timed under `--step-times` only, which also names the device on every step.
        let timed =
            step_times::enabled().then(|| (Instant::now(), format!("{:?}", batch.inputs.device())));
        let item = self.classify(batch);
        let forward = Instant::now();
        let grads = item.loss.backward();
        if let Some((start, device)) = timed {
            step_times::record(device, start, forward);
        }
        TrainOutput::new(self, grads, item)
    }
}

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

/// One example: its features (empty for [`Data::Synthetic`], whose features the batcher makes
/// on the device) and its class.
#[derive(Clone, Debug)]
pub struct Sample {
    features: Vec<f32>,
    label: usize,
}

/// A batch on a device.
#[derive(Clone, Debug)]
pub struct Batch<B: Backend> {
    inputs: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
}

/// What to train on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data {
    /// The UCI handwritten digits (8×8 pixels, 10 classes; `examples/data/README.md`):
    /// 1437 training and 360 validation images.
    Digits,
    /// A synthetic task sized for a GPU-bound step: class `c`'s features are
    /// `sin(c·ωⱼ + φⱼ)` plus Gaussian noise, made on the device by the batcher, so the host
    /// uploads only the labels.
    Synthetic {
        /// Input features.
        features: usize,
        /// Classes.
        classes: usize,
        /// Training samples per epoch.
        samples: usize,
    },
}

impl Data {
    /// `(features, classes)`.
    pub fn dims(&self) -> (usize, usize) {
        match *self {
            Data::Digits => (64, 10),
            Data::Synthetic {
                features, classes, ..
            } => (features, classes),
        }
    }

    /// `(training, validation)` samples.
    pub fn split(&self) -> (Vec<Sample>, Vec<Sample>) {
        match *self {
            Data::Digits => {
                let all = digits();
                // Every fifth image validates: both splits hold every class and writer.
                let (valid, train): (Vec<_>, Vec<_>) =
                    all.into_iter().enumerate().partition(|(i, _)| i % 5 == 4);
                let strip = |v: Vec<(usize, Sample)>| v.into_iter().map(|(_, s)| s).collect();
                (strip(train), strip(valid))
            }
            Data::Synthetic {
                classes, samples, ..
            } => {
                let labels = |n: usize, offset: usize| {
                    (0..n)
                        .map(|i| Sample {
                            features: Vec::new(),
                            label: (i * 7919 + offset) % classes,
                        })
                        .collect::<Vec<_>>()
                };
                (labels(samples, 0), labels((samples / 8).max(1), 13))
            }
        }
    }
}

/// The digits as shipped (scikit-learn's copy of the UCI test set): 1797 rows of 64 pixels
/// (0..16) and the digit.
fn digits() -> Vec<Sample> {
    let gz: &[u8] = include_bytes!("../data/digits.csv.gz");
    let mut csv = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut csv)
        .expect("examples/data/digits.csv.gz is a gzip'd CSV");
    csv.lines()
        .map(|line| {
            let values: Vec<f32> = line.split(',').map(|v| v.parse().unwrap()).collect();
            let (pixels, label) = values.split_at(64);
            Sample {
                features: pixels.iter().map(|p| p / 16.0).collect(),
                label: label[0] as usize,
            }
        })
        .collect()
}

/// Makes a [`Batch`] on the device the loader asks for.
#[derive(Clone, Debug)]
pub struct ClassBatcher {
    data: Data,
}

impl<B: Backend> Batcher<B, Sample, Batch<B>> for ClassBatcher {
    fn batch(&self, items: Vec<Sample>, device: &B::Device) -> Batch<B> {
        let n = items.len();
        let labels: Vec<i64> = items.iter().map(|s| s.label as i64).collect();
        let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(labels, [n]), device);
        let inputs = match self.data {
            Data::Digits => {
                let flat: Vec<f32> = items.into_iter().flat_map(|s| s.features).collect();
                let data = TensorData::new(flat, [n, 64]).convert::<B::FloatElem>();
                Tensor::from_data(data, device)
            }
            Data::Synthetic { features, .. } => {
                let class = targets.clone().float().reshape([n, 1]);
                let j = Tensor::<B, 1, Int>::arange(0..features as i64, device)
                    .float()
                    .reshape([1, features]);
                let pattern = (class * (j.clone() * 0.37 + 0.1) + j * 1.3).sin();
                let noise = Tensor::random(
                    [n, features],
                    burn::tensor::Distribution::Normal(0.0, 0.3),
                    device,
                );
                pattern + noise
            }
        };
        Batch { inputs, targets }
    }
}

/// How a run trains.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// What to train on.
    pub data: Data,
    /// Hidden widths.
    pub hidden: Vec<usize>,
    /// Epochs.
    pub epochs: usize,
    /// Samples per batch, on each device.
    pub batch_size: usize,
    /// Adam's learning rate.
    pub learning_rate: f64,
    /// Seed of the weights and of the shuffling.
    pub seed: u64,
    /// Data loader threads.
    pub workers: usize,
    /// Checkpoints, metric logs and the experiment log.
    pub artifact_dir: PathBuf,
    /// burn-train's CLI renderer instead of its default (the TUI on a terminal).
    pub cli: bool,
    /// Save model, optimizer and scheduler after each epoch (burn-train's file checkpointer).
    pub checkpoint: bool,
}

/// What a run reports: burn-train's per-epoch means, and its training throughput.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// Mean training loss of each epoch.
    pub train_loss: Vec<f64>,
    /// Mean validation loss of each epoch.
    pub valid_loss: Vec<f64>,
    /// Validation accuracy (%) of each epoch.
    pub valid_accuracy: Vec<f64>,
    /// Training samples per second of each epoch (all devices), between its first and its
    /// last logged step.
    pub samples_per_second: Vec<f64>,
    /// Wall time of `launch`, seconds.
    pub seconds: f64,
}

/// What one epoch of one split logged: per metric name, the sum of its values weighted by their
/// counts, and the count (burn-train's `Aggregate::Mean`); for training, when its steps arrived.
#[derive(Default)]
struct EpochLog {
    sums: HashMap<String, (f64, usize)>,
    first: Option<Instant>,
    last: Option<Instant>,
    steps: usize,
}

impl EpochLog {
    fn mean(&self, name: &str) -> Option<f64> {
        self.sums
            .get(name)
            .filter(|(_, count)| *count > 0)
            .map(|(sum, count)| sum / *count as f64)
    }
}

#[derive(Default)]
struct Logged {
    names: HashMap<MetricId, String>,
    train: Vec<EpochLog>,
    valid: Vec<EpochLog>,
    valid_epochs_ended: usize,
}

/// A metric logger that keeps each epoch's means in memory, as burn-train's event store hands
/// them over. The run's figures come from here, not from the metric files: `launch` can return
/// before burn-train's event-store thread has written the last epoch's files (its summary reads
/// them as they are then), and a test that read them compared half-written epochs.
#[derive(Clone, Default)]
struct Recorder {
    logged: Arc<(Mutex<Logged>, Condvar)>,
}

impl Recorder {
    /// Waits until the validation of `epochs` epochs has ended (every event of the run has then
    /// reached this logger), or `timeout` passed.
    fn wait_for(&self, epochs: usize, timeout: Duration) -> std::sync::MutexGuard<'_, Logged> {
        let (logged, ended) = &*self.logged;
        let (guard, _) = ended
            .wait_timeout_while(logged.lock().unwrap(), timeout, |l| {
                l.valid_epochs_ended < epochs
            })
            .unwrap();
        guard
    }
}

impl MetricLogger for Recorder {
    fn log(&mut self, update: MetricsUpdate, epoch: usize, split: &Split) {
        let now = Instant::now();
        let mut logged = self.logged.0.lock().unwrap();
        let logged = &mut *logged;
        let epochs = match split {
            Split::Train => &mut logged.train,
            Split::Valid => &mut logged.valid,
            Split::Test(_) => return,
        };
        while epochs.len() < epoch {
            epochs.push(EpochLog::default());
        }
        let log = &mut epochs[epoch - 1];
        if *split == Split::Train {
            log.first.get_or_insert(now);
            log.last = Some(now);
            log.steps += 1;
        }
        for update in &update.entries_numeric {
            let Some(name) = logged.names.get(&update.entry.metric_id) else {
                continue;
            };
            let (value, count) = match update.numeric_entry {
                NumericEntry::Value(v) => (v, 1),
                NumericEntry::Aggregated {
                    aggregated_value,
                    count,
                } => (aggregated_value * count as f64, count),
            };
            let sum = log.sums.entry(name.clone()).or_default();
            sum.0 += value;
            sum.1 += count;
        }
    }

    fn read_numeric(&mut self, _: &str, _: usize, _: &Split) -> Result<Vec<NumericEntry>, String> {
        // Not a source for burn-train's own look-ups: the file logger answers those.
        Err("the example's recorder keeps means only".into())
    }

    fn log_metric_definition(&mut self, definition: MetricDefinition) {
        let mut logged = self.logged.0.lock().unwrap();
        logged.names.insert(definition.metric_id, definition.name);
    }

    fn log_epoch_summary(&mut self, summary: EpochSummary) {
        if summary.split == Split::Valid {
            self.logged.0.lock().unwrap().valid_epochs_ended += 1;
            self.logged.1.notify_all();
        }
    }
}

/// Trains a [`Classifier`] with burn-train on `strategy` (its first device holds the model).
pub fn train<B: TrainBackend>(
    config: &RunConfig,
    device: &B::Device,
    strategy: ExecutionStrategy<B>,
) -> Report {
    std::fs::remove_dir_all(&config.artifact_dir).ok();
    std::fs::create_dir_all(&config.artifact_dir).expect("the artifact dir can be made");
    B::seed(device, config.seed);
    let (features, classes) = config.data.dims();
    let (train, valid) = config.data.split();
    let batcher = ClassBatcher { data: config.data };
    let loader_train = DataLoaderBuilder::new(batcher.clone())
        .batch_size(config.batch_size)
        .shuffle(config.seed)
        .num_workers(config.workers)
        .build(InMemDataset::new(train));
    let loader_valid = DataLoaderBuilder::new(batcher)
        .batch_size(config.batch_size)
        .num_workers(config.workers)
        .build(InMemDataset::new(valid));

    let recorder = Recorder::default();
    let mut training = SupervisedTraining::new(&config.artifact_dir, loader_train, loader_valid)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .with_metric_logger(FileMetricLogger::new(&config.artifact_dir))
        .with_metric_logger(recorder.clone())
        .with_training_strategy(strategy.into())
        .num_epochs(config.epochs)
        .summary();
    if config.cli {
        training = training.renderer(CliMetricsRenderer::new());
    }
    if config.checkpoint {
        // Opt-in: Burn 0.21's fusion can lose a tensor when burn-train's checkpointer thread
        // reads the model or optimizer while the training thread runs on ("Should have handle
        // for tensor", tracel-ai/burn#4347), with Burn's own backends too (decision record 0002).
        training = training.with_file_checkpointer(CompactRecorder::new());
    }

    let model = Classifier::<B>::new(features, &config.hidden, classes, device);
    let start = Instant::now();
    let _result = training.launch(Learner::new(
        model,
        AdamConfig::new().init(),
        config.learning_rate,
    ));
    let seconds = start.elapsed().as_secs_f64();

    // burn-train hands the last events over on its own threads after `launch` returns.
    let logged = recorder.wait_for(config.epochs, Duration::from_secs(120));
    let means = |epochs: &[EpochLog], name: &str| -> Vec<f64> {
        epochs.iter().map_while(|e| e.mean(name)).collect()
    };
    let samples_per_second = logged
        .train
        .iter()
        .map(|log| match (log.first, log.last) {
            (Some(first), Some(last)) if last > first => {
                // Every strategy logs each device's step: `batch_size` samples each.
                let samples = log.steps.saturating_sub(1) * config.batch_size;
                samples as f64 / (last - first).as_secs_f64()
            }
            _ => 0.0,
        })
        .collect();
    Report {
        train_loss: means(&logged.train, "Loss"),
        valid_loss: means(&logged.valid, "Loss"),
        valid_accuracy: means(&logged.valid, "Accuracy"),
        samples_per_second,
        seconds,
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "epoch  train-loss  valid-loss  valid-acc%  samples/s")?;
        for (i, loss) in self.train_loss.iter().enumerate() {
            let at = |v: &Vec<f64>| v.get(i).copied().unwrap_or(f64::NAN);
            writeln!(
                f,
                "{:>5}  {:>10.4}  {:>10.4}  {:>10.2}  {:>9.0}",
                i + 1,
                loss,
                at(&self.valid_loss),
                at(&self.valid_accuracy),
                at(&self.samples_per_second)
            )?;
        }
        write!(f, "launch took {:.2} s", self.seconds)
    }
}
