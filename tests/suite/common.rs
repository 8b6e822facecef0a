//! Shared helpers: the two backends, seeded data and tolerant comparison.

use burn::backend::wgpu::WgpuDevice;
use burn::tensor::{DType, TensorData};

/// The plain Burn backend (its own fusion on).
pub type Plain = burn::backend::Wgpu;
/// The same backend decorated by Hypatia.
pub type Fused = hypatia::Hypatia<Plain>;

pub fn device() -> WgpuDevice {
    WgpuDevice::default()
}

/// Deterministic values in [-1, 1) (a 64-bit LCG; no dependency, same on every machine).
pub fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Tolerance by dtype (relative to the largest magnitude of the reference).
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
        _ => 1e-5,
    }
}

/// Asserts equal shapes, identical NaN / ±Inf positions, and finite values within `tol`
/// relative error (‖a − b‖∞ / max(1, ‖b‖∞)).
pub fn assert_close(actual: &TensorData, expected: &TensorData, tol: f32) {
    assert_eq!(actual.shape, expected.shape, "shapes differ");
    let a: Vec<f32> = actual.clone().convert::<f32>().to_vec().unwrap();
    let b: Vec<f32> = expected.clone().convert::<f32>().to_vec().unwrap();
    let scale = b.iter().filter(|v| v.is_finite()).fold(1.0f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if y.is_nan() || x.is_nan() {
            assert!(x.is_nan() && y.is_nan(), "NaN mismatch at {i}: {x} vs {y}");
        } else if y.is_infinite() || x.is_infinite() {
            assert_eq!(x, y, "Inf mismatch at {i}");
        } else {
            assert!((x - y).abs() <= tol * scale, "value mismatch at {i}: {x} vs {y} (tol {tol}, scale {scale})");
        }
    }
}
