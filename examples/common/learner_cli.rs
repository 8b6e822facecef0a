//! The options `train_learner` and `train_multi_gpu` take, and the backend and strategy they
//! name (a part of [`super`], split off to keep files small).

use super::{Report, RunConfig, TrainBackend, train};
use burn::train::ExecutionStrategy;
use std::path::PathBuf;

/// Which backend trains: `Autodiff<Hypatia<B>>`, or Burn's `Autodiff<B>` beside it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// `Autodiff<Hypatia<B>>`.
    Hypatia,
    /// Burn's own `Autodiff<B>`.
    Burn,
}

/// The float type the model trains in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 (TF32 matmuls on CUDA, as Burn's).
    F32,
    /// bf16 (CUDA only).
    Bf16,
}

/// burn-train's execution strategies.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// One device.
    Single,
    /// `ExecutionStrategy::MultiDevice`: a model replica per device, gradients moved to the
    /// first device and added there, which steps the optimizer.
    MultiDevice,
    /// `ExecutionStrategy::ddp`: a replica and an optimizer per device, gradients all-reduced
    /// (mean) by collectives (NCCL on CUDA). Needs the `distributed` feature.
    Ddp,
}

/// The options both examples take.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Which backend trains.
    #[arg(long, value_enum, default_value_t = Which::Hypatia)]
    pub backend: Which,
    /// The float type.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    pub dtype: Precision,
    /// Train on the handwritten digits, or on a synthetic task of `--features` inputs and
    /// `--classes` classes made on the device (for GPU-bound throughput).
    #[arg(long, default_value = "digits", value_parser = ["digits", "synthetic"])]
    pub data: String,
    /// Synthetic inputs.
    #[arg(long, default_value_t = 1024)]
    pub features: usize,
    /// Synthetic classes.
    #[arg(long, default_value_t = 1024)]
    pub classes: usize,
    /// Synthetic training samples per epoch.
    #[arg(long, default_value_t = 65536)]
    pub samples: usize,
    /// Hidden widths, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "256,256")]
    pub hidden: Vec<usize>,
    /// Epochs.
    #[arg(long, default_value_t = 8)]
    pub epochs: usize,
    /// Samples per batch on each device.
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Seed of the weights and the shuffling.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Data loader threads.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Checkpoints and metric logs (default: target/learner-example/<backend>).
    #[arg(long)]
    pub artifact_dir: Option<PathBuf>,
    /// burn-train's CLI renderer even on a terminal (default: its TUI there).
    #[arg(long)]
    pub cli: bool,
    /// Save the model, optimizer and scheduler after each epoch with burn-train's file
    /// checkpointer (see the book's Learner chapter for Burn 0.21's fault with it).
    #[arg(long)]
    pub checkpoint: bool,
    /// After the run, print Hypatia's statistics of each device as JSON (`hypatia::stats`:
    /// fused steps by pattern, races, e-graph runs and their time, host hand-overs).
    #[arg(long)]
    pub stats: bool,
    /// After the run, print each device's host time per step: forward, backward (with DDP's
    /// gradient sync) and the gap between steps (`step_times`).
    #[arg(long)]
    pub step_times: bool,
}

impl RunArgs {
    /// The run these options describe.
    pub fn config(&self) -> RunConfig {
        let data = match self.data.as_str() {
            "synthetic" => super::Data::Synthetic {
                features: self.features,
                classes: self.classes,
                samples: self.samples,
            },
            _ => super::Data::Digits,
        };
        let name = format!("{:?}", self.backend).to_lowercase();
        RunConfig {
            data,
            hidden: self.hidden.clone(),
            epochs: self.epochs,
            batch_size: self.batch_size,
            learning_rate: self.lr,
            seed: self.seed,
            workers: self.workers,
            artifact_dir: (self.artifact_dir.clone())
                .unwrap_or_else(|| PathBuf::from("target/learner-example").join(name)),
            cli: self.cli,
            checkpoint: self.checkpoint,
        }
    }
}

/// Burn's backend for float type `F`: `Cuda<F>` with the `cuda` feature, else `Wgpu<F>`.
#[cfg(feature = "cuda")]
pub type Inner<F> = burn::backend::Cuda<F>;
/// Burn's backend for float type `F`: `Cuda<F>` with the `cuda` feature, else `Wgpu<F>`.
#[cfg(not(feature = "cuda"))]
pub type Inner<F> = burn::backend::Wgpu<F>;
/// The device type of every backend here.
pub type Device = burn::tensor::Device<Inner<f32>>;

/// `n` devices: CUDA devices `0..n`; on wgpu one, the default adapter.
///
/// Burn 0.21's wgpu backend cannot move a tensor to another device (cubecl-wgpu 0.10 has no
/// device-to-device transfer, and Burn's own `Wgpu` panics with "not implemented" in
/// `MultiDevice`; it has no collectives for `ddp`), so several devices need CUDA: without it
/// this refuses `n > 1` with that reason instead of training into the panic.
pub fn devices(n: usize) -> Vec<Device> {
    #[cfg(feature = "cuda")]
    {
        (0..n).map(burn::backend::cuda::CudaDevice::new).collect()
    }
    #[cfg(not(feature = "cuda"))]
    {
        if n > 1 {
            eprintln!(
                "--devices {n}: Burn 0.21's wgpu backend cannot move tensors between devices \
                 (cubecl-wgpu 0.10 has no device-to-device transfer), on Hypatia or on Burn; \
                 several devices need a build with `--features cuda`"
            );
            std::process::exit(2);
        }
        vec![burn::backend::wgpu::WgpuDevice::DefaultDevice; n]
    }
}

/// burn-train's strategy over `devices`.
pub fn strategy<B: TrainBackend>(kind: Strategy, devices: Vec<B::Device>) -> ExecutionStrategy<B> {
    use burn::train::MultiDeviceOptim;
    match kind {
        Strategy::Single => ExecutionStrategy::single(devices[0].clone()),
        Strategy::MultiDevice => {
            ExecutionStrategy::multi(devices, MultiDeviceOptim::OptimMainDevice)
        }
        #[cfg(feature = "distributed")]
        Strategy::Ddp => {
            use burn::tensor::backend::distributed::{DistributedConfig, ReduceOperation};
            let config = DistributedConfig {
                all_reduce_op: ReduceOperation::Mean,
            };
            ExecutionStrategy::ddp(devices, config)
        }
        #[cfg(not(feature = "distributed"))]
        Strategy::Ddp => panic!("--strategy ddp needs the `distributed` feature"),
    }
}

/// Trains on `kind` over `devices` with the backend and float type `args` name, then prints
/// the report (and, for Hypatia, how many steps it fused).
pub fn run(args: &RunArgs, kind: Strategy, devices: Vec<Device>) -> Report {
    use burn::backend::Autodiff;
    match (args.backend, args.dtype) {
        (Which::Hypatia, Precision::F32) => {
            run_on::<Autodiff<hypatia::Hypatia<Inner<f32>>>>(args, kind, devices)
        }
        (Which::Burn, Precision::F32) => run_on::<Autodiff<Inner<f32>>>(args, kind, devices),
        #[cfg(feature = "cuda")]
        (Which::Hypatia, Precision::Bf16) => {
            run_on::<Autodiff<hypatia::Hypatia<Inner<half::bf16>>>>(args, kind, devices)
        }
        #[cfg(feature = "cuda")]
        (Which::Burn, Precision::Bf16) => {
            run_on::<Autodiff<Inner<half::bf16>>>(args, kind, devices)
        }
        #[cfg(not(feature = "cuda"))]
        (_, Precision::Bf16) => panic!("--dtype bf16 needs the `cuda` feature"),
    }
}

/// [`run`] on the backend `B` (which should be the one `args` names: its float type, and
/// Hypatia's or Burn's).
pub fn run_on<B: TrainBackend<Device = Device>>(
    args: &RunArgs,
    kind: Strategy,
    devices: Vec<Device>,
) -> Report {
    let config = args.config();
    if args.step_times {
        super::step_times::enable();
    }
    let main = devices[0].clone();
    let report = train::<B>(&config, &main, strategy::<B>(kind, devices.clone()));
    println!("{report}");
    if args.step_times {
        print!("{}", super::step_times::report());
    }
    if args.backend == Which::Hypatia {
        for device in &devices {
            let stats = hypatia::stats(device);
            let fused = stats.executed_total();
            println!("hypatia on {device:?}: {fused} fused steps");
            if args.stats {
                let json = serde_json::to_string(&stats).expect("stats serialise");
                println!("hypatia stats on {device:?}: {json}");
            }
        }
    }
    report
}
