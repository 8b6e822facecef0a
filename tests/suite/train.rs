//! Training through `Autodiff<Hypatia<B>>` equals training through `Autodiff<B>`: the fused
//! backward (relu's gradient gated in the matmul epilogue, weight gradients `xᵀ·dy` read
//! through strides) changes nothing but speed.

use super::check::burn_tolerance;
use super::common::*;
use super::model::Mlp;
use super::user_models;
use burn::backend::Autodiff;
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use hypatia::FusedPattern;
use hypatia::config::{ExecutionPolicy, FlushPolicy};

/// Every parameter of `model`, in layer order.
fn parameters<B: Backend>(model: &Mlp<B>) -> Vec<TensorData> {
    model
        .layers()
        .iter()
        .flat_map(|l| {
            [
                l.weight.val().into_data(),
                l.bias
                    .as_ref()
                    .expect("built with a bias")
                    .val()
                    .into_data(),
            ]
        })
        .collect()
}

/// The gradient of every parameter and of the input after one MSE backward pass.
pub(super) fn gradients<B: AutodiffBackend, const D: usize>(
    widths: [usize; 4],
    x: TensorData,
    target: TensorData,
) -> Vec<TensorData> {
    let device = Default::default();
    let model = Mlp::<B>::new(widths, true, &device);
    let x = Tensor::<B, D>::from_data(x, &device).require_grad();
    let target = Tensor::<B, D>::from_data(target, &device);
    let loss = MseLoss::new().forward(model.forward(x.clone()), target, Reduction::Mean);
    let grads = loss.backward();
    let mut all: Vec<TensorData> = model
        .layers()
        .iter()
        .flat_map(|l| {
            let bias = l.bias.as_ref().expect("built with a bias");
            [
                l.weight.grad(&grads).expect("weight grad").into_data(),
                bias.grad(&grads).expect("bias grad").into_data(),
            ]
        })
        .collect();
    all.push(x.grad(&grads).expect("input grad").into_data());
    all
}

fn pattern_count(pattern: FusedPattern) -> u64 {
    hypatia::stats(&device()).executed(pattern)
}

/// Bias gradients produced by `pattern`'s steps so far.
fn bias_grad_count(pattern: FusedPattern) -> u64 {
    let stats = hypatia::stats(&device());
    stats.patterns.get(pattern).map_or(0, |p| p.bias_grads)
}

/// What one [`check_backward`] ran: gated steps, plain matmuls, bias gradients in a
/// relu-backward kernel, and bias gradients summed from a weight gradient's `dy` (the output
/// layer's).
struct Backward {
    gated: u64,
    plain: u64,
    bias_grads: u64,
    plain_bias_grads: u64,
}

/// One backward pass of odd-sized MLPs, rank 2 and rank 3, with NaN and ±Inf in the input:
/// every gradient (the bias gradients summed in the relu-backward kernels among them) equals
/// Burn's, NaN for NaN.
fn check_backward(policy: ExecutionPolicy) -> Backward {
    let _policy = ConfigGuard::set(|c| c.execution = policy);
    let (grad_before, matmul_before) = (
        pattern_count(FusedPattern::MatmulReluGrad),
        pattern_count(FusedPattern::Matmul),
    );
    let bias_before = bias_grad_count(FusedPattern::MatmulReluGrad);
    let plain_bias_before = bias_grad_count(FusedPattern::Matmul);
    let tol = grad_tolerance();
    let widths = [33, 65, 17, 9];
    for (batch, specials) in [(17, false), (1, false), (65, true)] {
        let mut x = data(11, &[batch, widths[0]], 1.0);
        if specials {
            let mut values: Vec<f32> = x.to_vec().unwrap();
            values[3] = f32::NAN;
            values[40] = f32::INFINITY;
            values[77] = f32::NEG_INFINITY;
            x = TensorData::new(values, [batch, widths[0]]);
        }
        let target = data(12, &[batch, widths[3]], 1.0);
        poison::<Fused>(batch * 65 * 4, &device());
        let fused = gradients::<Autodiff<Fused>, 2>(widths, x.clone(), target.clone());
        let plain = gradients::<Autodiff<Plain>, 2>(widths, x, target);
        for (i, (f, p)) in fused.iter().zip(&plain).enumerate() {
            if specials {
                // NaN spreads through every weight gradient; the positions must agree.
                let (f, p): (Vec<f32>, Vec<f32>) = (f.to_vec().unwrap(), p.to_vec().unwrap());
                let nan = |v: &[f32]| v.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
                assert_eq!(nan(&f), nan(&p), "gradient {i}: NaN positions differ");
            } else {
                assert_close(f, p, tol);
            }
        }
    }
    let x = data(13, &[3, 5, widths[0]], 1.0);
    let target = data(14, &[3, 5, widths[3]], 1.0);
    let fused = gradients::<Autodiff<Fused>, 3>(widths, x.clone(), target.clone());
    let plain = gradients::<Autodiff<Plain>, 3>(widths, x, target);
    for (f, p) in fused.iter().zip(&plain) {
        assert_close(f, p, tol);
    }
    Backward {
        gated: pattern_count(FusedPattern::MatmulReluGrad) - grad_before,
        plain: pattern_count(FusedPattern::Matmul) - matmul_before,
        bias_grads: bias_grad_count(FusedPattern::MatmulReluGrad) - bias_before,
        plain_bias_grads: bias_grad_count(FusedPattern::Matmul) - plain_bias_before,
    }
}

#[test]
fn backward_matches_burn() {
    let _serial = serial();
    let ran = check_backward(ExecutionPolicy::Auto);
    assert!(ran.gated > 0, "relu's gradient never ran fused");
    assert!(ran.bias_grads > 0, "no bias gradient came from a kernel");
}

#[test]
fn backward_matches_burn_with_launches_flushed() {
    let _serial = serial();
    // Handing each block's launches to the device thread at once (`FlushPolicy::Blocks`)
    // changes when they run, never what they compute; the plans are those of the default.
    let _flush = ConfigGuard::set(|c| c.flush = FlushPolicy::Blocks);
    let ran = check_backward(ExecutionPolicy::Tiled);
    assert!(
        ran.gated > 0 && ran.plain > 0 && ran.bias_grads > 0,
        "gated {}, plain {}, bias gradients {}",
        ran.gated,
        ran.plain,
        ran.bias_grads
    );
}

#[test]
fn auto_flushes_only_blocks_predicted_to_keep_the_device_busy() {
    let _serial = serial();
    use burn::tensor::DType;
    use hypatia::config::AUTO_FLUSH_MIN_GPU_US;
    use hypatia::execute::has_matrix_units;
    use hypatia::rewrite::Profile;
    let device = device();
    let client = <Runtime as cubecl::Runtime>::client(&device);
    let profile = Profile::for_device(
        has_matrix_units(&client, DType::F32),
        hypatia::config::config().profile.as_deref(),
    );
    let predicted = |s: usize| profile.gpu_time(s, s, s, DType::F32);
    // Square Linear + ReLU layers well clear of the threshold on this device's profile: a
    // 32-wide one below it and a 128-wide one above it on lavapipe, 1024 and 4096 on an H100.
    let sizes = || (4..=12).map(|p| 1usize << p);
    let small = (sizes().rev())
        .find(|&s| predicted(s) < AUTO_FLUSH_MIN_GPU_US / 4.0)
        .expect("a layer predicted well below the threshold");
    let large = (sizes().find(|&s| predicted(s) >= AUTO_FLUSH_MIN_GPU_US * 2.0))
        .expect("a layer predicted well above the threshold");
    let cases = [
        (FlushPolicy::Auto, small, false),
        (FlushPolicy::Auto, large, true),
        (FlushPolicy::Never, large, false),
        (FlushPolicy::Blocks, small, true),
    ];
    for (policy, size, flushes) in cases {
        let _flush = ConfigGuard::set(|c| c.flush = policy);
        let x = Tensor::<Fused, 2>::from_data(data(1, &[size, size], 1.0), &device);
        let w = Tensor::<Fused, 2>::from_data(data(2, &[size, size], 0.5), &device);
        let b = Tensor::<Fused, 1>::from_data(data(3, &[size], 0.5), &device);
        let before = hypatia::stats(&device).host;
        let _ = burn::tensor::activation::relu(x.matmul(w) + b.unsqueeze()).into_data();
        let after = hypatia::stats(&device).host;
        let ran = after.executions - before.executions;
        let flushed = after.flushes - before.flushes;
        let label = format!("{policy:?} at {size} ({:.0} µs predicted)", predicted(size));
        assert!(ran > 0, "{label}: no claimed block ran");
        assert_eq!(
            flushed,
            if flushes { ran } else { 0 },
            "{label}: {ran} blocks ran"
        );
    }
}

#[test]
fn backward_with_every_matmul_fused_matches_burn() {
    let _serial = serial();
    // Forcing an execution claims plain matmuls too (weight gradients, the last layer).
    // The output layer's bias gradient then comes from its weight gradient's step.
    let ran = check_backward(ExecutionPolicy::Tiled);
    assert!(
        ran.gated > 0 && ran.plain > 0 && ran.bias_grads > 0 && ran.plain_bias_grads > 0,
        "gated {}, plain {}, bias gradients {} (from weight gradients {})",
        ran.gated,
        ran.plain,
        ran.bias_grads,
        ran.plain_bias_grads
    );
}

#[test]
fn verify_mode_checks_a_bias_gradient_summed_from_dy() {
    let _serial = serial();
    // Strict verify compares each fused step's first execution with Burn's ops, the output
    // layer's bias gradient (summed from its weight gradient's `dy`) among them: a wrong sum
    // would fail the next sync.
    use hypatia::config::VerifyMode;
    let _config = ConfigGuard::set(|c| {
        c.execution = ExecutionPolicy::Tiled;
        c.verify = VerifyMode::Strict;
    });
    let verified = || {
        let stats = hypatia::stats(&device());
        stats
            .patterns
            .get(FusedPattern::Matmul)
            .map_or(0, |p| p.verified)
    };
    let before = verified();
    // Widths of their own, so that the steps are new to the plan store and verified here.
    let widths = [19, 23, 29, 7];
    let x = data(21, &[37, widths[0]], 1.0);
    let target = data(22, &[37, widths[3]], 1.0);
    let fused = gradients::<Autodiff<Fused>, 2>(widths, x.clone(), target.clone());
    let plain = gradients::<Autodiff<Plain>, 2>(widths, x, target);
    for (f, p) in fused.iter().zip(&plain) {
        assert_close(f, p, grad_tolerance());
    }
    <Fused as Backend>::sync(&device()).expect("every verified step matched Burn's");
    assert!(verified() > before, "no weight gradient was verified");
}

#[test]
fn bias_gradients_match_burn_on_every_execution() {
    let _serial = serial();
    // The split sums the output in a second pass; the engine autotunes over candidates that
    // sum in the epilogue (its tiled kernel) and that do not (Burn's matmul first).
    for policy in [ExecutionPolicy::Split, ExecutionPolicy::TensorCore] {
        let ran = check_backward(policy);
        assert!(
            ran.gated > 0 && ran.bias_grads > 0,
            "{policy:?}: gated {}, bias gradients {}",
            ran.gated,
            ran.bias_grads
        );
    }
}

/// What [`train`] saw.
struct Trained {
    losses: Vec<f32>,
    params: Vec<TensorData>,
    /// Hypatia's e-graph runs on the test device so far, after each step.
    egg_runs: Vec<u64>,
}

/// The example's MLP (32 → 128 → 128 → 8, cross-entropy, Adam at 3e-3) trained for `steps`
/// on fixed batches.
fn train<B: AutodiffBackend>(steps: usize) -> Trained {
    let device = Default::default();
    let mut model = Mlp::<B>::new([32, 128, 128, 8], true, &device);
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let mut losses = Vec::with_capacity(steps);
    let mut egg_runs = Vec::with_capacity(steps);
    for step in 0..steps {
        // Ten fixed batches; a sample's class is the largest of its first 8 features.
        let features = data(1000 + (step % 10) as u64, &[64, 32], 2.0);
        let values: Vec<f32> = features.to_vec().unwrap();
        let labels: Vec<i64> = values
            .chunks(32)
            .map(|row| {
                let top = row[..8]
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1));
                top.expect("8 features").0 as i64
            })
            .collect();
        let x = Tensor::<B, 2>::from_data(features, &device);
        let y = Tensor::<B, 1, Int>::from_data(TensorData::new(labels, [64]), &device);
        let loss = loss_fn.forward(model.forward(x), y);
        losses.push(loss.clone().into_scalar().elem::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(3e-3, model, grads);
        egg_runs.push(hypatia::stats(&device).egg.runs);
    }
    Trained {
        losses,
        params: parameters(&model),
        egg_runs,
    }
}

#[test]
fn adam_training_matches_burn() {
    let _serial = serial();
    let before = pattern_count(FusedPattern::MatmulReluGrad);
    let fused = train::<Autodiff<Fused>>(100);
    assert!(
        pattern_count(FusedPattern::MatmulReluGrad) - before >= 200,
        "two fused relu gradients per step"
    );
    // Plans are cached: once every distinct window has been seen, steps replay them. (Steps
    // free their temporaries in varying orders; those drops must not make windows distinct.)
    assert_eq!(
        fused.egg_runs[99], fused.egg_runs[19],
        "e-graph runs after each step: {:?}",
        fused.egg_runs
    );
    let plain = train::<Autodiff<Plain>>(100);
    let (fused_losses, fused_params) = (fused.losses, fused.params);
    let (plain_losses, plain_params) = (plain.losses, plain.params);
    assert!(
        fused_losses[99] < 0.5 * fused_losses[0],
        "the model learns: {fused_losses:?}"
    );
    for (step, (f, p)) in fused_losses.iter().zip(&plain_losses).enumerate() {
        assert!(
            (f - p).abs() <= train_tolerance(burn::tensor::DType::F32) * p.abs().max(1.0),
            "loss at step {step}: {f} vs {p}"
        );
    }
    for (f, p) in fused_params.iter().zip(&plain_params) {
        assert_norm_close(f, p, train_tolerance(burn::tensor::DType::F32));
    }
}

/// Element-wise gradient tolerance. On CUDA both Burn's f32 matmul and Hypatia's run TF32
/// (unit roundoff u = 2⁻¹¹ ≈ 4.9e-4), and a gradient passes through up to three matmuls of
/// depth ≤ 65: their rounding differs by up to ~K·u each. Seen on an H100: 3.9e-3 at one
/// element of the first layer's weight gradient. A wrong gate or a lost bias is off by O(1).
pub(super) fn grad_tolerance() -> f32 {
    if cfg!(feature = "cuda") {
        1e-2
    } else {
        burn_tolerance(burn::tensor::DType::F32)
    }
}

/// `relu(relu(x·w + b))` (rule `relu-idempotent`): the value and every gradient through
/// `Autodiff<Hypatia<..>>` equal Burn's, with NaN and ±Inf in x.
#[test]
fn relu_applied_twice_matches_burn() {
    let _serial = serial();
    fn run<B: AutodiffBackend>(x: &TensorData, w: &TensorData, b: &TensorData) -> Vec<TensorData> {
        let device = Default::default();
        let x = Tensor::<B, 2>::from_data(x.clone(), &device).require_grad();
        let w = Tensor::<B, 2>::from_data(w.clone(), &device).require_grad();
        let b = Tensor::<B, 1>::from_data(b.clone(), &device).require_grad();
        let y = burn::tensor::activation::relu(burn::tensor::activation::relu(
            x.clone().matmul(w.clone()) + b.clone().unsqueeze(),
        ));
        let grads = (y.clone() * y.clone()).sum().backward();
        let grad = |t: Option<Tensor<B::InnerBackend, 2>>| t.expect("a gradient").into_data();
        vec![
            y.inner().into_data(),
            grad(x.grad(&grads)),
            grad(w.grad(&grads)),
            b.grad(&grads).expect("a gradient").into_data(),
        ]
    }
    let mut values: Vec<f32> = data(21, &[17, 33], 1.0).to_vec().unwrap();
    values[5] = f32::NAN;
    values[40] = f32::INFINITY;
    let x = TensorData::new(values, [17, 33]);
    let (w, b) = (data(22, &[33, 65], 1.0), data(23, &[65], 1.0));
    let plain = run::<Autodiff<Plain>>(&x, &w, &b);
    Plain::sync(&device()).unwrap();
    let fused = run::<Autodiff<Fused>>(&x, &w, &b);
    // assert_close also requires NaN and ±Inf in the same places.
    for (f, p) in fused.iter().zip(&plain) {
        assert_close(f, p, grad_tolerance());
    }
}

/// One step of each user model (`user_models/float64.rs`), forward and backward, is as close
/// to Burn's float64 reference on Hypatia as on Burn, tensor by tensor (not under
/// `distributed`, whose `Autodiff` cannot differentiate the reference backend).
#[cfg(not(feature = "distributed"))]
#[test]
fn user_model_steps_are_as_close_to_float64_as_on_burn() {
    let _serial = serial();
    user_models::steps_as_close_to_float64_as_burns();
}

/// Burn's guide model (`user_models.rs`) trains on Hypatia as on Burn.
#[test]
fn burns_guide_model_trains_as_on_burn() {
    let _serial = serial();
    user_models::guide_trains_as_on_burn::<f32>();
}

/// A Transformer encoder classifier (`user_models.rs`) trains on Hypatia as on Burn.
#[test]
fn a_transformer_encoder_trains_as_on_burn() {
    let _serial = serial();
    user_models::encoder_trains_as_on_burn::<f32>();
}

/// A BERT-style encoder (`user_models.rs`, no dropout) trains on Hypatia as on Burn, its
/// feed-forward GELU fused forward and backward.
#[test]
fn a_bert_style_encoder_trains_as_on_burn_with_its_gelu_fused() {
    let _serial = serial();
    user_models::bert_trains_as_on_burn::<f32>();
}

/// A classifier with a SiLU hidden layer (`user_models.rs`) trains on Hypatia as on Burn, its
/// SiLU backward fused.
#[test]
fn a_silu_classifier_trains_as_on_burn_with_its_silu_backward_fused() {
    let _serial = serial();
    user_models::silu_mlp_trains_as_on_burn::<f32>();
}

/// A GPT-2-style classifier (tanh GELU, `user_models.rs`) trains on Hypatia as on Burn, its tanh
/// GELU backward fused.
#[test]
fn a_tanh_gelu_classifier_trains_as_on_burn_with_its_backward_fused() {
    let _serial = serial();
    user_models::gelu_tanh_mlp_trains_as_on_burn::<f32>();
}

/// A classifier with burn-nn's `LeakyRelu` (`user_models.rs`) trains on Hypatia as on Burn,
/// its LeakyReLU backward fused.
#[test]
fn a_leaky_relu_classifier_trains_as_on_burn_with_its_backward_fused() {
    let _serial = serial();
    user_models::leaky_relu_mlp_trains_as_on_burn::<f32>();
}

/// A Llama-style decoder layer (`user_models.rs`) trains on Hypatia as on Burn, bit for bit
/// where Hypatia claims none of its steps.
#[test]
fn a_llama_style_layer_trains_as_on_burn() {
    let _serial = serial();
    user_models::llama_trains_as_on_burn::<f32>();
}

/// With every pattern switched off Hypatia's fuser holds no block open, and a Llama-style layer
/// trains bit for bit as on Burn: Hypatia's backend forwards every op unchanged. (With patterns
/// on, a fuser held open for a window it then declines changes burn-fusion's exploration, and the
/// layer's parameters part by about 1e-6 on lavapipe: decision record 0015.) In a fresh process
/// (the child below), since burn-fusion replays the plans stored before a setting changes.
#[test]
fn nothing_claimed_trains_bit_for_bit_as_on_burn() {
    let _serial = serial();
    // Every pattern by the name `HYPATIA_DISABLE` takes (its serde name).
    let names: Vec<String> = (hypatia::config::Pattern::ALL.iter())
        .map(|p| {
            serde_json::to_value(p)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let all_off = names.join(",");
    let child = "suite::train::nothing_claimed_child";
    let limit = std::time::Duration::from_secs(1800);
    if let Err(e) = in_child(child, &[("HYPATIA_DISABLE", &all_off)], limit) {
        panic!("{e}");
    }
}

#[test]
#[ignore = "run by `nothing_claimed_trains_bit_for_bit_as_on_burn` in a process of its own"]
fn nothing_claimed_child() {
    let config = hypatia::config::config();
    let all_off = hypatia::config::Pattern::ALL;
    assert!(all_off.iter().all(|&p| config.disabled(p)), "{config:?}");
    user_models::llama_trains_as_on_burn::<f32>();
}
