//! Train an MLP on a synthetic classification task with `Autodiff<Hypatia<B>>`, save it with
//! Burn's recorder, reload it and run inference with `Hypatia<B>`, then print what Hypatia
//! fused. Each epoch reports its mean step time; the end reports a training step's device
//! memory: in use at its high points, and its peak (allocator pages reserved). The loss curve
//! goes to `<out-dir>/loss.png`, the model to `<out-dir>/model.mpk` (read by `infer_mlp`).
//!
//! ```text
//! cargo run --release --example train_mlp              # wgpu: any GPU, or the CPU via lavapipe
//! cargo run --release --features cuda --example train_mlp -- --json
//! ```

#[path = "common/device.rs"]
mod device;
#[path = "common/memory.rs"]
mod memory;
#[path = "common/mlp.rs"]
mod mlp;

use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use mlp::{B, Dataset, Mlp, Runtime, TEST_SEED, accuracy, print_stats};
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "Train, save, reload and run an MLP on Hypatia")]
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
    /// Where the model and the loss curve are written.
    #[arg(long, default_value_os_t = mlp::default_out_dir())]
    out_dir: PathBuf,
    /// Print the fusion stats as one JSON line at the end.
    #[arg(long)]
    json: bool,
}

/// The mean training loss of each epoch, as a line chart.
fn plot_losses(losses: &[f32], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    // Plotters draws text with ab_glyph from a registered font: no system fonts needed.
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "DejaVu Sans did not load")?;
    let root = BitMapBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = losses.iter().copied().fold(0.0f32, f32::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption("Training loss (Autodiff<Hypatia<..>>)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(1f32..losses.len().max(2) as f32, 0f32..top.max(1e-3))?;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc("mean cross-entropy")
        .label_style(("sans-serif", 14))
        .draw()?;
    let points = losses.iter().enumerate().map(|(i, &l)| (i as f32 + 1.0, l));
    chart.draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))?;
    chart.draw_series(points.map(|p| Circle::new(p, 4, BLUE.filled())))?;
    root.present()?;
    Ok(())
}

fn main() {
    let args = Args::parse();
    device::require_device();
    let device = burn::tensor::Device::<B>::default();
    let train = Dataset::generate(args.samples, 7);
    let test = Dataset::generate(args.samples / 4, TEST_SEED);
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
    // Memory held before the first step (the model, the optimizer has no state yet), with the
    // allocator's free pages given back first so that what it reserves later is the steps'.
    let baseline = memory::cleanup::<Runtime>(&device);
    let mut high_water = (0u64, 0u64);
    let sample = |high: &mut (u64, u64)| {
        let (in_use, reserved) = memory::usage::<Runtime>(&device);
        *high = (high.0.max(in_use), high.1.max(reserved));
    };
    let mut epoch_losses = Vec::new();
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
            sample(&mut high_water);
            acc_sum += accuracy(logits, y);
            let grads = loss.backward();
            T::sync(&device).expect("device work finished");
            sample(&mut high_water);
            let grads = GradientsParams::from_grads(grads, &model);
            model = optim.step(3e-3, model, grads);
            bar.set_message(format!("loss {:.4}", loss_sum / (b + 1) as f32));
            bar.inc(1);
        }
        bar.finish_and_clear();
        epoch_losses.push(loss_sum / batches as f32);
        println!(
            "epoch {epoch:>2}: loss {:.4}  train accuracy {:>5.1}%  step {:.2} ms",
            loss_sum / batches as f32,
            100.0 * acc_sum / batches as f32,
            epoch_start.elapsed().as_secs_f64() * 1e3 / batches as f64
        );
    }
    println!(
        "trained in {:.1}s; device memory of a step above the model: {:.2} MiB in use at its \
         high points, {:.2} MiB peak (allocator pages reserved)",
        start.elapsed().as_secs_f32(),
        memory::mib(high_water.0.saturating_sub(baseline.0)),
        memory::mib(high_water.1.saturating_sub(baseline.1)),
    );

    let model = model.valid(); // Mlp<Hypatia<Inner>>: inference without autodiff
    let (x, y) = test.batch::<B>(0, test.len(), &device);
    let logits = model.forward(x.clone());
    println!("test accuracy: {:.1}%", 100.0 * accuracy(logits.clone(), y));

    // Save with Burn's recorder, load into a fresh model, and check it predicts the same.
    model.save(&args.out_dir).expect("model saved");
    let reloaded = Mlp::<B>::load(&args.out_dir, &device).expect("model loaded");
    let again = reloaded.forward(x);
    let same_predictions = logits
        .clone()
        .argmax(1)
        .equal(again.clone().argmax(1))
        .all();
    let same_predictions: bool = same_predictions.into_scalar().elem();
    let max_diff: f32 = (logits - again).abs().max().into_scalar().elem();
    println!(
        "saved to {}; reloaded: same predictions {same_predictions}, max logit difference {max_diff:.1e}",
        args.out_dir.join("model.mpk").display()
    );
    assert!(same_predictions, "the reloaded model predicts differently");

    let png = args.out_dir.join("loss.png");
    match plot_losses(&epoch_losses, &png) {
        Ok(()) => println!("loss curve: {}", png.display()),
        Err(error) => eprintln!("no loss curve written: {error}"),
    }

    print_stats(&device);
    if args.json {
        let stats = hypatia::stats(&device);
        let json = serde_json::to_string(&stats).expect("stats serialise");
        println!("{json}");
    }
}
