//! Train the Learner example's MLP on several devices through burn-train's own strategies:
//! `--strategy multi-device` (`ExecutionStrategy::MultiDevice`) or `--strategy ddp`
//! (`ExecutionStrategy::ddp`, collectives over NCCL; needs the `distributed` feature).
//! `--devices 1 --strategy single` is the one-device baseline; `--backend burn` runs Burn's own
//! backend under the same strategy. `--batch-size` is per device.
//!
//! ```text
//! cargo run --release --features cuda,distributed --example train_multi_gpu -- \
//!     --devices 2 --strategy ddp --dtype bf16 --data synthetic --hidden 4096 --batch-size 8192
//! ```
//! Several devices need CUDA: Burn 0.21's wgpu backend cannot move tensors between devices, on
//! Hypatia or on Burn, so without the `cuda` feature `--devices` above 1 is refused.

#[path = "common/device.rs"]
mod device;
#[path = "common/learner.rs"]
mod learner;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Train with burn-train's multi-device strategies on Hypatia or Burn")]
struct Args {
    /// Devices to train on.
    #[arg(long, default_value_t = 2)]
    devices: usize,
    /// burn-train's execution strategy.
    #[arg(long, value_enum, default_value_t = learner::Strategy::MultiDevice)]
    strategy: learner::Strategy,
    #[command(flatten)]
    run: learner::RunArgs,
}

fn main() {
    let args = Args::parse();
    device::require_device();
    let devices = learner::devices(args.devices);
    learner::run(&args.run, args.strategy, devices);
}
