//! What Hypatia fused in the example MLP, and why: runs one inference and one training step
//! with plan dumps on, then prints the fusion stats and, for each distinct window the planner
//! saw, its decision and the cost of the alternatives it chose between.
//!
//! ```text
//! cargo run --release --example inspect_fusions                       # dumps in target/hypatia-dumps
//! cargo run --release --example inspect_fusions -- --dump-dir /tmp/d  # or anywhere
//! dot -Tsvg target/hypatia-dumps/window-<key>.dot -o egraph.svg      # draw one e-graph
//! ```

#[path = "common/device.rs"]
mod device;
#[path = "common/mlp.rs"]
mod mlp;

use burn::backend::Autodiff;
use burn::nn::loss::CrossEntropyLossConfig;
use clap::Parser;
use hypatia::plan::dump::Dump;
use hypatia::plan::{Claim, Step};
use mlp::{B, Dataset, Mlp, print_stats};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Show what Hypatia fused in the example MLP, with plan dumps")]
struct Args {
    /// Where the plan dumps go (emptied first).
    #[arg(long, default_value = "target/hypatia-dumps")]
    dump_dir: PathBuf,
    /// Batch size of the inference and the training step.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Alternatives shown per root.
    #[arg(long, default_value_t = 3)]
    alternatives: usize,
}

/// One line per step of a plan: fused kernels by pattern, Burn's ops by index.
fn describe(claim: &Claim) -> String {
    match claim {
        Claim::Declined(reason) => format!("declined: {}", reason.key()),
        Claim::Fused(plan) => {
            let steps: Vec<String> = plan
                .steps
                .iter()
                .map(|step| match step {
                    Step::Fused(f) => format!(
                        "{}{} (ops {:?})",
                        f.epilogue.pattern(),
                        if f.bias_grad.is_some() {
                            " + bias gradient"
                        } else {
                            ""
                        },
                        f.ops
                    ),
                    Step::Run(op) => format!("burn op {op}"),
                    Step::BiasGrad(op) => format!("bias gradient {op} (skipped when fused)"),
                })
                .collect();
            format!("claims {} ops: {}", plan.len, steps.join(", "))
        }
    }
}

fn main() {
    let args = Args::parse();
    device::require_device();
    // Start empty, so every file listed below comes from this run.
    let _ = std::fs::remove_dir_all(&args.dump_dir);
    hypatia::config::update_config(|c| c.dump = Some(args.dump_dir.clone()));

    let device = burn::tensor::Device::<B>::default();
    let data = Dataset::generate(args.batch_size, 7);

    // Inference: two Linear+ReLU layers and a plain Linear.
    let model = Mlp::<B>::new(64, &device);
    let (x, _) = data.batch::<B>(0, data.len(), &device);
    let _ = model.forward(x).into_data();

    // One training step: the same forward under Autodiff, then its backward.
    type T = Autodiff<B>;
    let model = Mlp::<T>::new(64, &device);
    let (x, y) = data.batch::<T>(0, data.len(), &device);
    let loss = CrossEntropyLossConfig::new()
        .init(&device)
        .forward(model.forward(x), y);
    let _grads = loss.backward();
    print_stats(&device);

    let mut dumps: Vec<PathBuf> = std::fs::read_dir(&args.dump_dir)
        .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    dumps.retain(|p| p.extension().is_some_and(|e| e == "json"));
    dumps.sort();
    println!(
        "\n{} distinct windows planned; dumps in {}",
        dumps.len(),
        args.dump_dir.display()
    );
    for path in &dumps {
        let dump = match Dump::read(path) {
            Ok(dump) => dump,
            Err(error) => {
                eprintln!("{}: {error}", path.display());
                continue;
            }
        };
        let name = path.file_stem().unwrap_or_default().to_string_lossy();
        println!(
            "\n{name}: {} ops, e-graph {} nodes in {} classes ({}, {} us)",
            dump.window.len(),
            dump.egraph.nodes,
            dump.egraph.classes,
            dump.egraph.stop_reason,
            dump.egraph.micros
        );
        let plain = if dump.options.plain_matmuls {
            "on"
        } else {
            "off"
        };
        println!("  plain matmuls {plain}; {}", describe(&dump.claim));
        for op in &dump.window {
            println!("    {op}");
        }
        for root in &dump.alternatives {
            println!("  alternatives for t{}:", root.tensor);
            for term in root.terms.iter().take(args.alternatives) {
                println!("    cost {:>5}  {}", term.cost, term.term);
            }
        }
    }
}
