//! Long runs: 10,000 training steps with device memory and the plan cache flat after warm-up,
//! two threads training two models at once, each equal to the same training alone, and (CUDA)
//! the user models trained 200 steps to Burn's final loss and accuracy.

use super::common::*;
use super::model::Mlp;
use burn::backend::Autodiff;
use burn::nn::loss::{MseLoss, Reduction};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use cubecl::Runtime as _;

/// A small MLP (8 → 16 → 16 → 4, batch 8, MSE, Adam) trained for `steps` on four fixed
/// batches; `each(step)` runs after every step. Returns the loss every 100 steps and the
/// parameters.
fn train<B: AutodiffBackend>(
    seed: u64,
    steps: usize,
    mut each: impl FnMut(usize),
) -> (Vec<f32>, Vec<TensorData>) {
    let device = Default::default();
    let mut model = Mlp::<B>::new([8, 16, 16, 4], true, &device);
    let mut optim = AdamConfig::new().init();
    let batches: Vec<_> = (0..4)
        .map(|i| {
            let x = Tensor::<B, 2>::from_data(data(seed + i, &[8, 8], 1.0), &device);
            let y = Tensor::<B, 2>::from_data(data(seed + 10 + i, &[8, 4], 1.0), &device);
            (x, y)
        })
        .collect();
    let mut losses = Vec::new();
    for step in 0..steps {
        let (x, y) = batches[step % 4].clone();
        let loss = MseLoss::new().forward(model.forward(x), y, Reduction::Mean);
        if step % 100 == 0 {
            losses.push(loss.clone().into_scalar().elem::<f32>());
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
        each(step);
    }
    let params = model
        .layers()
        .iter()
        .map(|l| l.weight.val().into_data())
        .collect();
    (losses, params)
}

fn bytes_in_use() -> u64 {
    let device = device();
    Fused::sync(&device).expect("sync");
    Runtime::client(&device)
        .memory_usage()
        .expect("memory usage")
        .bytes_in_use
}

#[test]
fn ten_thousand_steps_keep_memory_and_plans_flat() {
    let _serial = serial();
    const STEPS: usize = 10_000;
    const WARM_UP: usize = 500;
    let start = std::time::Instant::now();
    let fused_before = executed();
    let (mut memory, mut windows, mut egg_runs) = (Vec::new(), Vec::new(), Vec::new());
    let (losses, _) = train::<Autodiff<Fused>>(1, STEPS, |step| {
        if (step + 1) % WARM_UP == 0 {
            memory.push(bytes_in_use());
            windows.push(hypatia::runtime::cached_windows());
            egg_runs.push(hypatia::stats(&device()).egg.runs);
        }
    });
    eprintln!(
        "{STEPS} steps in {:.1} s; bytes in use every {WARM_UP} steps: {memory:?}; cached \
         windows: {windows:?}; e-graph runs: {egg_runs:?}; losses: {:?}",
        start.elapsed().as_secs_f64(),
        &losses[..5]
    );
    assert!(
        losses[losses.len() - 1] < 0.5 * losses[0],
        "it learns: {losses:?}"
    );
    let fused = executed() - fused_before;
    assert!(
        fused >= 2 * STEPS as u64,
        "two fused Linear+ReLU per step: {fused}"
    );
    // After warm-up nothing grows: no leaked tensors, no new windows, no e-graph runs.
    let warm = memory[1];
    assert!(
        memory[1..].iter().all(|&m| m <= warm + warm / 10),
        "device memory grows: {memory:?}"
    );
    assert_eq!(windows[1..].iter().max(), Some(&windows[1]), "{windows:?}");
    assert_eq!(
        egg_runs[1..].iter().max(),
        Some(&egg_runs[1]),
        "{egg_runs:?}"
    );
}

#[test]
fn two_threads_train_two_models_at_once() {
    let _serial = serial();
    const STEPS: usize = 300;
    // Each model alone first (this also starts both fusion services before the threads do).
    let alone: Vec<_> = [21, 42]
        .map(|seed| train::<Autodiff<Plain>>(seed, STEPS, |_| {}))
        .into();
    let together: Vec<_> = [21, 42]
        .map(|seed| std::thread::spawn(move || train::<Autodiff<Fused>>(seed, STEPS, |_| {})))
        .into_iter()
        .map(|thread| thread.join().expect("a training thread panicked"))
        .collect();
    // On CUDA both backends run f32 matmuls in TF32, rounded differently (see train.rs).
    let (loss_tol, param_tol) = if cfg!(feature = "cuda") {
        (2e-2, 5e-2)
    } else {
        (1e-3, 1e-3)
    };
    for ((losses, params), (plain_losses, plain_params)) in together.iter().zip(&alone) {
        for (f, p) in losses.iter().zip(plain_losses) {
            assert!(
                (f - p).abs() <= loss_tol * p.abs().max(1.0),
                "loss {f} vs {p}"
            );
        }
        for (f, p) in params.iter().zip(plain_params) {
            assert_norm_close(f, p, param_tol);
        }
    }
    assert_ne!(together[0].1[0], together[1].1[0], "two different models");
}

/// Burn's guide model, the Transformer encoder and the SiLU classifier (`user_models.rs`) train
/// 200 steps in f32 to Burn's final loss and accuracy, within twice Burn's spread against
/// Burn without its fusion (a CUDA build's `CubeBackend`).
#[cfg(feature = "cuda")]
#[test]
fn user_models_train_200_steps_as_on_burn() {
    let _serial = serial();
    super::user_models::trains_200_steps_as_on_burn::<f32>();
}
