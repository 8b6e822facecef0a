//! A 2-hidden-layer MLP of `nn::Linear` + `nn::Relu`: inference, Hypatia vs Burn (training is
//! in `train.rs`).

use super::common::*;
use super::model::Mlp;
use burn::prelude::*;
use hypatia::FusedPattern;

const SIZES: [usize; 4] = [32, 64, 48, 8];

/// f32 agreement with Burn: exact-f32 kernels on wgpu; on CUDA Burn's f32 matmul runs TF32.
const F32_TOLERANCE: f32 = if cfg!(feature = "cuda") { 2e-3 } else { 1e-5 };

fn infer<B: Backend, const D: usize>(shape: [usize; D], bias: bool) -> TensorData {
    let device = B::Device::default();
    let model = Mlp::<B>::new(SIZES, bias, &device);
    let x = Tensor::<B, D>::from_data(data(7, &shape, 1.0), &device);
    model.forward(x).into_data()
}

#[test]
fn inference_equals_burn_and_runs_fused_kernels() {
    let _serial = serial();
    let before = executed();
    let actual = infer::<Fused, 2>([33, 32], true);
    assert_eq!(
        executed() - before,
        2,
        "both hidden layers run fused: {:?}",
        hypatia::stats(&device())
    );
    assert_close(&actual, &infer::<Plain, 2>([33, 32], true), F32_TOLERANCE);

    let before = executed();
    let actual = infer::<FusedBare, 2>([33, 32], true);
    assert_eq!(
        executed() - before,
        2,
        "Hypatia over a bare CubeBackend fuses too"
    );
    assert_close(&actual, &infer::<Plain, 2>([33, 32], true), F32_TOLERANCE);

    let before = executed();
    let actual = infer::<Fused, 3>([2, 5, 32], true);
    assert_eq!(executed() - before, 2, "rank-3 input runs fused too");
    assert_close(&actual, &infer::<Plain, 3>([2, 5, 32], true), F32_TOLERANCE);
}

#[test]
fn linear_without_bias_runs_fused() {
    let _serial = serial();
    let before = executed();
    let actual = infer::<Fused, 2>([9, 32], false);
    assert_eq!(
        executed() - before,
        2,
        "both bias-less hidden layers run as Linear+ReLU: {:?}",
        hypatia::stats(&device())
    );
    assert_close(&actual, &infer::<Plain, 2>([9, 32], false), F32_TOLERANCE);
}

/// Inference with every run of fused layers forced into MLP-chain launches: `launches` chain
/// launches, values equal to Burn's.
fn check_chained<const D: usize>(shape: [usize; D], bias: bool, launches: u64, specials: bool) {
    check_chained_sizes(SIZES, shape, bias, launches, specials);
}

fn check_chained_sizes<const D: usize>(
    sizes: [usize; 4],
    shape: [usize; D],
    bias: bool,
    launches: u64,
    specials: bool,
) {
    let device = device();
    let x = |seed| {
        let mut values = data(seed, &shape, 1.0).to_vec::<f32>().unwrap();
        if specials {
            values[0] = f32::NAN;
            values[shape[D - 1] + 1] = f32::INFINITY;
        }
        TensorData::new(values, shape)
    };
    poison::<Fused>(1 << 16, &device);
    let before = chain_launches();
    let model = Mlp::<Fused>::new(sizes, bias, &device);
    let actual = model.forward(Tensor::<Fused, D>::from_data(x(7), &device));
    let actual = actual.into_data();
    assert_eq!(
        chain_launches() - before,
        launches,
        "{shape:?}: {:?}",
        hypatia::stats(&device)
    );
    let plain = Mlp::<Plain>::new(sizes, bias, &device);
    let expected = plain.forward(Tensor::<Plain, D>::from_data(x(7), &device));
    assert_close(&actual, &expected.into_data(), F32_TOLERANCE);
}

#[test]
fn chained_layers_equal_burn_in_one_launch() {
    let _serial = serial();
    let _chain = ConfigGuard::set(|c| c.chain = hypatia::config::ChainPolicy::Always);
    for m in [1, 17, 33, 64] {
        check_chained([m, 32], true, 1, false);
    }
    check_chained([2, 5, 32], true, 1, false);
    check_chained([9, 32], false, 1, false);
    check_chained([17, 32], true, 1, true);
    // Odd widths: the weights are read one element at a time.
    check_chained_sizes([33, 17, 9, 5], [3, 33], true, 1, false);
    // More rows than the kernel takes: one launch per layer.
    check_chained([65, 32], true, 0, false);
    // With a forced execution the output Linear is claimed and joins the chain too.
    let _tiled = ConfigGuard::set(|c| c.execution = hypatia::config::ExecutionPolicy::Tiled);
    let chained = || {
        let stats = hypatia::stats(&device());
        [FusedPattern::LinearRelu, FusedPattern::Linear]
            .map(|p| stats.patterns.get(p).map_or(0, |p| p.chained))
    };
    let before = chained();
    check_chained([5, 32], true, 1, false);
    let after = chained();
    assert_eq!([after[0] - before[0], after[1] - before[1]], [2, 1]);
}

/// Ops handed to burn-fusion's thread one at a time, while the rest of the forward is still
/// being recorded, make the same single chain launch.
#[test]
fn eager_submission_keeps_one_chain_launch() {
    let _serial = serial();
    let _chain = ConfigGuard::set(|c| c.chain = hypatia::config::ChainPolicy::Always);
    let _submit = ConfigGuard::set(|c| c.submit = hypatia::config::SubmitPolicy::Eager);
    let _sync = ConfigGuard::set(|c| c.sync = hypatia::config::SyncPolicy::Spin);
    for m in [1, 33] {
        check_chained([m, 32], true, 1, false);
    }
    check_chained([2, 5, 32], true, 1, true);
    check_chained([65, 32], true, 0, false);
}

/// Under the default flush policy a chain launch goes to the device thread at once when that
/// thread is idle: after each read (which waits for everything) it is, so every forward's
/// block is flushed; under `Never` none is. The results stay Burn's.
#[test]
fn chain_launches_are_flushed_to_an_idle_device_thread() {
    let _serial = serial();
    let _chain = ConfigGuard::set(|c| c.chain = hypatia::config::ChainPolicy::Always);
    let device = device();
    let model = Mlp::<Fused>::new(SIZES, true, &device);
    let plain = Mlp::<Plain>::new(SIZES, true, &device);
    let flushes = || hypatia::stats(&device).host.flushes;
    for (policy, flushed) in [
        (hypatia::config::FlushPolicy::Auto, true),
        (hypatia::config::FlushPolicy::Never, false),
    ] {
        let _flush = ConfigGuard::set(|c| c.flush = policy);
        let before = (chain_launches(), flushes());
        for seed in 0..4 {
            let x = data(seed, &[3, SIZES[0]], 1.0);
            let actual = model.forward(Tensor::<Fused, 2>::from_data(x.clone(), &device));
            let expected = plain.forward(Tensor::<Plain, 2>::from_data(x, &device));
            assert_close(&actual.into_data(), &expected.into_data(), F32_TOLERANCE);
        }
        let launches = chain_launches() - before.0;
        assert_eq!(launches, 4, "{policy:?}: one chain launch a forward");
        let expected = if flushed { launches } else { 0 };
        assert_eq!(flushes() - before.1, expected, "{policy:?}");
    }
}

#[test]
fn no_chain_when_switched_off() {
    let _serial = serial();
    let _chain = ConfigGuard::set(|c| c.chain = hypatia::config::ChainPolicy::Never);
    let before = (chain_launches(), executed());
    let actual = infer::<Fused, 2>([3, 32], true);
    assert_eq!(chain_launches(), before.0);
    assert_eq!(
        executed() - before.1,
        2,
        "the hidden layers still run fused"
    );
    assert_close(&actual, &infer::<Plain, 2>([3, 32], true), F32_TOLERANCE);
}

/// One model, so one plan and one remembered chain decision: each forward must still follow
/// its own sizes and the policy in force (batch 3 in one launch, batch 65 layer by layer, none
/// while the policy says never), in any order, with Burn's results.
#[test]
fn a_remembered_chain_decision_follows_sizes_and_policy() {
    let _serial = serial();
    use hypatia::config::ChainPolicy::{Always, Never};
    let device = device();
    let model = Mlp::<Fused>::new(SIZES, true, &device);
    let plain = Mlp::<Plain>::new(SIZES, true, &device);
    let forwards = [
        (3, Always, 1),
        (65, Always, 0),
        (3, Always, 1),
        (3, Never, 0),
        (3, Always, 1),
        (65, Always, 0),
        (1, Always, 1),
    ];
    for (seed, (m, policy, launches)) in forwards.into_iter().enumerate() {
        let _chain = ConfigGuard::set(|c| c.chain = policy);
        let before = chain_launches();
        let x = data(seed as u64, &[m, SIZES[0]], 1.0);
        let actual = model.forward(Tensor::<Fused, 2>::from_data(x.clone(), &device));
        let actual = actual.into_data();
        assert_eq!(
            chain_launches() - before,
            launches,
            "forward {seed}: batch {m} under {policy:?}"
        );
        let expected = plain.forward(Tensor::<Plain, 2>::from_data(x, &device));
        assert_close(&actual, &expected.into_data(), F32_TOLERANCE);
    }
}

/// A model's biases are the same tensors from one forward to the next: once reshaped twice,
/// each Linear reads the row view made of its bias before (one reshape op less per layer), at
/// every input rank, still in one chain launch per forward and with Burn's results.
#[test]
fn a_models_biases_are_reshaped_once() {
    let _serial = serial();
    let _chain = ConfigGuard::set(|c| c.chain = hypatia::config::ChainPolicy::Always);
    let device = device();
    let model = Mlp::<Fused>::new(SIZES, true, &device);
    let plain = Mlp::<Plain>::new(SIZES, true, &device);
    let views = || hypatia::stats(&device).host.bias_views;
    let shapes: [&[usize]; 8] = [
        &[3, 32],
        &[3, 32],
        &[3, 32],
        &[5, 32],
        &[1, 32],
        // Rank 3: rows of rank 3, a view of its own for each bias.
        &[2, 3, 32],
        &[2, 3, 32],
        &[2, 3, 32],
    ];
    for (forward, shape) in shapes.into_iter().enumerate() {
        let before = (views(), chain_launches());
        let x = data(forward as u64, shape, 1.0);
        let (actual, expected) = if shape.len() == 2 {
            let x = || TensorData::new(x.to_vec::<f32>().unwrap(), [shape[0], shape[1]]);
            let actual = model.forward(Tensor::<Fused, 2>::from_data(x(), &device));
            let expected = plain.forward(Tensor::<Plain, 2>::from_data(x(), &device));
            (actual.into_data(), expected.into_data())
        } else {
            let x = || TensorData::new(x.to_vec::<f32>().unwrap(), [shape[0], shape[1], shape[2]]);
            let actual = model.forward(Tensor::<Fused, 3>::from_data(x(), &device));
            let expected = plain.forward(Tensor::<Plain, 3>::from_data(x(), &device));
            (actual.into_data(), expected.into_data())
        };
        assert_close(&actual, &expected, F32_TOLERANCE);
        // Kept at its second reshape at a rank: reused from the third forward at that rank on.
        let reused = if matches!(forward, 2..=4 | 7) { 3 } else { 0 };
        assert_eq!(
            views() - before.0,
            reused,
            "forward {forward}, input {shape:?}"
        );
        assert_eq!(chain_launches() - before.1, 1, "forward {forward}");
    }
}
