//! Faults injected into fused steps, and verify mode, on the build's default device (wgpu,
//! lavapipe without a GPU; CUDA with the `cuda` feature). Each test uses a window of its own (rank and equal dims differ), so that
//! burn-fusion's plan store, shared by the process, hands each a fresh optimization.
use super::{Fault, VerifyMode, inject_fault};
use crate::config::{FusedPattern, RacePolicy, update_config};
use burn::prelude::*;
use burn::tensor::activation::relu;

#[cfg(not(feature = "cuda"))]
type Plain = burn::backend::Wgpu;
#[cfg(feature = "cuda")]
type Plain = burn::backend::Cuda;
type Fused = crate::Hypatia<Plain>;

fn device() -> burn_backend::tensor::Device<Plain> {
    Default::default()
}

/// Held for each test's body: the configuration and the injected fault these tests set are
/// the process's (burn-fusion's thread reads them), and they count the process's launches.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Keeps each step on Hypatia's kernel (no race against Burn's fused matmul, whose turns would
/// run Burn's side for some executions), then restores no fault, verify mode off and the
/// default race policy, even when an assertion fails.
struct Reset;

impl Reset {
    fn new() -> Self {
        update_config(|c| c.race = RacePolicy::Never);
        Self
    }
}

impl Drop for Reset {
    fn drop(&mut self) {
        inject_fault(Fault::None);
        update_config(|c| {
            c.verify = VerifyMode::Off;
            c.race = RacePolicy::Auto;
        });
    }
}

fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7 + seed * 13) % 23) as f32 - 11.0) / 8.0)
        .collect()
}

/// `relu(x · w + b)` for `x` of `x_shape` (its last dim is k) and `n` outputs.
fn linear_relu<B: Backend, const D: usize>(x_shape: [usize; D], n: usize) -> Tensor<B, D> {
    let device = Default::default();
    let k = x_shape[D - 1];
    let x = TensorData::new(values(x_shape.iter().product(), 1), x_shape);
    let x = Tensor::<B, D>::from_data(x, &device);
    let w = Tensor::<B, 2>::from_data(TensorData::new(values(k * n, 2), [k, n]), &device);
    let b = Tensor::<B, 1>::from_data(TensorData::new(values(n, 3), [n]), &device);
    relu(x.matmul(w.unsqueeze()) + b.unsqueeze())
}

fn assert_equal(fused: TensorData, plain: TensorData) {
    let (fused, plain) = (
        fused.to_vec::<f32>().unwrap(),
        plain.to_vec::<f32>().unwrap(),
    );
    assert_eq!(fused.len(), plain.len());
    for (f, p) in fused.iter().zip(&plain) {
        assert!((f - p).abs() <= 1e-5 * p.abs().max(1.0), "{f} vs {p}");
    }
}

fn fallbacks(reason: &str) -> u64 {
    let stats = crate::stats(&device());
    let pattern = stats
        .patterns
        .get(FusedPattern::LinearRelu)
        .cloned()
        .unwrap_or_default();
    pattern.fallbacks.get(reason).copied().unwrap_or(0)
}

fn fused_runs() -> u64 {
    crate::stats(&device()).executed(FusedPattern::LinearRelu)
}

#[test]
fn a_kernel_that_fails_to_launch_falls_back_to_burns_ops() {
    let _serial = serial();
    let _reset = Reset::new();
    let (before, runs) = (fallbacks("launch-failed"), fused_runs());
    inject_fault(Fault::Launch);
    let fused = linear_relu::<Fused, 3>([3, 5, 7], 4).into_data();
    assert_equal(fused, linear_relu::<Plain, 3>([3, 5, 7], 4).into_data());
    assert_eq!(
        fallbacks("launch-failed"),
        before + 1,
        "recorded with its reason"
    );
    // The fault is gone, but the step's kernel failed once: it stays on Burn's ops.
    inject_fault(Fault::None);
    let fused = linear_relu::<Fused, 3>([3, 5, 7], 4).into_data();
    assert_equal(fused, linear_relu::<Plain, 3>([3, 5, 7], 4).into_data());
    assert_eq!(fallbacks("launch-failed"), before + 2);
    assert_eq!(fused_runs(), runs, "no fused result was kept");
}

#[test]
fn strict_verify_fails_the_next_read_and_keeps_burns_result() {
    let _serial = serial();
    let _reset = Reset::new();
    let before = fallbacks("verify-mismatch");
    update_config(|c| c.verify = VerifyMode::Strict);
    inject_fault(Fault::WrongResult);
    let error = linear_relu::<Fused, 2>([6, 6], 5)
        .try_into_data()
        .expect_err("strict verify fails the read");
    let message = error.to_string();
    for expected in [
        "linear-relu",
        "x [6, 6] · w [6, 5]",
        "max abs error 1.000e0",
    ] {
        assert!(message.contains(expected), "{expected:?} in {message}");
    }
    assert_eq!(fallbacks("verify-mismatch"), before + 1);
    // Reported once; the step now runs Burn's ops, so reads succeed and are Burn's.
    let fused = linear_relu::<Fused, 2>([6, 6], 5).into_data();
    assert_equal(fused, linear_relu::<Plain, 2>([6, 6], 5).into_data());
    Fused::sync(&device()).expect("nothing left to report");
}

#[test]
fn strict_verify_fails_the_next_sync() {
    let _serial = serial();
    let _reset = Reset::new();
    update_config(|c| c.verify = VerifyMode::Strict);
    inject_fault(Fault::WrongResult);
    let y = linear_relu::<Fused, 2>([9, 4], 4);
    let error = Fused::sync(&device()).expect_err("strict verify fails sync");
    assert!(
        error.to_string().contains("hypatia verify: linear-relu"),
        "{error}"
    );
    assert_equal(
        y.into_data(),
        linear_relu::<Plain, 2>([9, 4], 4).into_data(),
    );
}

#[test]
fn warn_verify_falls_back_without_an_error() {
    let _serial = serial();
    let _reset = Reset::new();
    let before = fallbacks("verify-mismatch");
    update_config(|c| c.verify = VerifyMode::Warn);
    inject_fault(Fault::WrongResult);
    let fused = linear_relu::<Fused, 4>([2, 2, 3, 5], 3).into_data();
    assert_equal(fused, linear_relu::<Plain, 4>([2, 2, 3, 5], 3).into_data());
    assert_eq!(fallbacks("verify-mismatch"), before + 1);
}

#[test]
fn verify_accepts_the_real_kernel() {
    let _serial = serial();
    let _reset = Reset::new();
    let stats = || crate::stats(&device());
    let verified = |s: crate::FusionStats| {
        s.patterns
            .get(FusedPattern::LinearRelu)
            .map_or(0, |p| p.verified)
    };
    let (before, runs) = (verified(stats()), fused_runs());
    update_config(|c| c.verify = VerifyMode::Strict);
    let fused = linear_relu::<Fused, 3>([4, 4, 4], 4).into_data();
    assert_equal(fused, linear_relu::<Plain, 3>([4, 4, 4], 4).into_data());
    assert_eq!(verified(stats()), before + 1, "checked once and equal");
    // Verified steps run fused, unchecked, from then on.
    let fused = linear_relu::<Fused, 3>([4, 4, 4], 4).into_data();
    assert_equal(fused, linear_relu::<Plain, 3>([4, 4, 4], 4).into_data());
    assert_eq!(verified(stats()), before + 1);
    assert_eq!(fused_runs(), runs + 2);
}
