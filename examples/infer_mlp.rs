//! Load the MLP that `train_mlp` saved and predict with `Hypatia<B>`: the test set's accuracy,
//! a few predictions, and what Hypatia fused (inference runs one Linear+ReLU kernel per hidden
//! layer).
//!
//! ```text
//! cargo run --release --example train_mlp    # first: trains and saves target/mlp-example
//! cargo run --release --example infer_mlp
//! ```

#[path = "common/device.rs"]
mod device;
#[path = "common/mlp.rs"]
mod mlp;

use burn::prelude::*;
use clap::Parser;
use mlp::{B, Dataset, Mlp, TEST_SEED, accuracy, print_stats};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Load the MLP train_mlp saved and predict on Hypatia")]
struct Args {
    /// Where `train_mlp` wrote the model.
    #[arg(long, default_value_os_t = mlp::default_out_dir())]
    model_dir: PathBuf,
    /// Samples to predict.
    #[arg(long, default_value_t = 1024)]
    samples: usize,
}

fn main() {
    let args = Args::parse();
    device::require_device();
    let device = burn::tensor::Device::<B>::default();
    let model = match Mlp::<B>::load(&args.model_dir, &device) {
        Ok(model) => model,
        Err(error) => {
            eprintln!(
                "no model in {}: {error}\nrun `cargo run --release --example train_mlp` first",
                args.model_dir.display()
            );
            std::process::exit(1);
        }
    };
    println!(
        "backend: {}; model from {} (hidden width {})",
        B::name(&device),
        args.model_dir.display(),
        model.hidden()
    );
    let test = Dataset::generate(args.samples, TEST_SEED);
    let (x, labels) = test.batch::<B>(0, test.len(), &device);
    let logits = model.forward(x);
    let predicted = logits.clone().argmax(1).squeeze_dim::<1>(1);
    let shown = 8.min(test.len());
    let predicted_head: Vec<i64> = predicted
        .slice(0..shown)
        .into_data()
        .convert::<i64>()
        .to_vec()
        .unwrap();
    let labels_head: Vec<i64> = labels
        .clone()
        .slice(0..shown)
        .into_data()
        .convert::<i64>()
        .to_vec()
        .unwrap();
    println!("first {shown} predictions: {predicted_head:?}");
    println!("their labels:          {labels_head:?}");
    println!(
        "accuracy on {} samples: {:.1}%",
        test.len(),
        100.0 * accuracy(logits, labels)
    );
    print_stats(&device);
}
