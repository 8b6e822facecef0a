//! Train an MLP classifier with burn-train's `SupervisedTraining` + `Learner` on
//! `Autodiff<Hypatia<B>>`, exactly as Burn's own examples train (loss and accuracy metrics, a
//! file checkpointer, the TUI dashboard on a terminal and the CLI renderer elsewhere), on the
//! UCI handwritten digits shipped in `examples/data`. `--backend burn` trains plain
//! `Autodiff<B>` with the same seed, for comparison.
//!
//! ```text
//! cargo run --release --example train_learner                      # wgpu, or lavapipe
//! cargo run --release --example train_learner -- --backend burn
//! cargo run --release --features cuda --example train_learner -- --dtype bf16 \
//!     --data synthetic --hidden 4096 --batch-size 8192 --epochs 3 # GPU-bound throughput
//! ```

#[path = "common/device.rs"]
mod device;
#[path = "common/learner.rs"]
mod learner;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Train an MLP classifier with burn-train's Learner on Hypatia or Burn")]
struct Args {
    #[command(flatten)]
    run: learner::RunArgs,
}

fn main() {
    let args = Args::parse();
    device::require_device();
    learner::run(&args.run, learner::Strategy::Single, learner::devices(1));
}
