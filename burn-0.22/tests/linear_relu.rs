//! Hypatia registered on Burn 0.22 (lavapipe or any Vulkan/Metal GPU): `relu(x · w + b)` as
//! users write it (`nn::Linear`, plain tensors), at odd shapes, rank 3, without bias and with
//! NaN, equals Burn's own ops and a float64 reference, and ran as Hypatia's kernel.

use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, DeviceKind, Tensor, TensorData, activation::relu};
use std::sync::{Mutex, MutexGuard, Once};

/// The device, with Hypatia registered before its first tensor; the lock serialises the tests
/// (`set_claiming` is process-wide).
fn device() -> (Device, MutexGuard<'static, ()>) {
    static REGISTER: Once = Once::new();
    static LOCK: Mutex<()> = Mutex::new(());
    REGISTER.call_once(|| hypatia::register().expect("registered before any tensor"));
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    (Device::wgpu(DeviceKind::DefaultDevice), guard)
}

/// Values in [-1, 1) from a seed, some exactly zero (relu's edge).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|i| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 11 == 3 {
                0.0
            } else {
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            }
        })
        .collect()
}

fn read(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().expect("f32")
}

/// `f` run on Hypatia's kernel and on Burn's own ops: (Hypatia, Burn), and the kernel ran once
/// per call of `f` while claiming and never without.
fn both(f: impl Fn() -> Vec<f32>) -> (Vec<f32>, Vec<f32>) {
    let (launched, _) = hypatia::counts();
    let ours = f();
    let (after, fell_back) = hypatia::counts();
    assert_eq!(after, launched + 1, "Hypatia's kernel ran the segment");
    hypatia::set_claiming(false);
    let burn = f();
    hypatia::set_claiming(true);
    assert_eq!(
        hypatia::counts(),
        (after, fell_back + 1),
        "Burn's ops ran the segment"
    );
    (ours, burn)
}

/// relu(x · w + b) in float64, `[m, k] · [k, n]`.
fn reference(x: &[f32], w: &[f32], b: Option<&[f32]>, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = b.map_or(0.0, |b| b[j] as f64);
            for l in 0..k {
                s += x[i * k + l] as f64 * w[l * n + j] as f64;
            }
            out[i * n + j] = if s <= 0.0 { 0.0 } else { s };
        }
    }
    out
}

fn assert_close(ours: &[f32], burn: &[f32], reference: &[f64], k: usize) {
    assert_eq!(ours.len(), reference.len());
    // f32 accumulation over k terms of magnitude below 1.
    let tolerance = 1e-6 * (k as f64).sqrt().max(1.0) * 4.0;
    for (i, ((&o, &b), &r)) in ours.iter().zip(burn).zip(reference).enumerate() {
        assert!(
            (o as f64 - r).abs() <= tolerance,
            "[{i}] Hypatia {o} vs float64 {r}"
        );
        assert!(
            (o - b).abs() as f64 <= tolerance,
            "[{i}] Hypatia {o} vs Burn {b}"
        );
    }
}

/// `relu(x.matmul(w) + b.unsqueeze())` on plain tensors of these values, `[m, k] · [k, n]`.
fn plain(device: &Device, x: &[f32], w: &[f32], b: &[f32], [m, k, n]: [usize; 3]) -> Vec<f32> {
    let x = Tensor::<2>::from_data(TensorData::new(x.to_vec(), [m, k]), device);
    let w = Tensor::<2>::from_data(TensorData::new(w.to_vec(), [k, n]), device);
    let b = Tensor::<1>::from_data(TensorData::new(b.to_vec(), [n]), device);
    read(relu(x.matmul(w) + b.unsqueeze()))
}

#[test]
fn plain_tensors_at_odd_shapes() {
    let (device, _lock) = device();
    for (m, k, n) in [(1, 1, 1), (17, 33, 65), (65, 5, 17), (130, 70, 3)] {
        let (xv, wv, bv) = (values(m * k, 1), values(k * n, 2), values(n, 3));
        let (ours, burn) = both(|| plain(&device, &xv, &wv, &bv, [m, k, n]));
        assert_close(&ours, &burn, &reference(&xv, &wv, Some(&bv), m, k, n), k);
    }
}

/// An `nn::Linear` with these weights (row layout: `[d_input, d_output]`).
fn linear(device: &Device, w: &[f32], b: Option<&[f32]>, k: usize, n: usize) -> Linear {
    let mut layer = LinearConfig::new(k, n).with_bias(b.is_some()).init(device);
    layer.weight = layer
        .weight
        .map(|_| Tensor::from_data(TensorData::new(w.to_vec(), [k, n]), device));
    if let (Some(param), Some(b)) = (layer.bias.take(), b) {
        layer.bias =
            Some(param.map(|_| Tensor::from_data(TensorData::new(b.to_vec(), [n]), device)));
    }
    layer
}

#[test]
fn nn_linear_with_and_without_bias() {
    let (device, _lock) = device();
    let (m, k, n) = (33, 17, 45);
    let (xv, wv, bv) = (values(m * k, 4), values(k * n, 5), values(n, 6));
    for bias in [Some(bv.as_slice()), None] {
        let layer = linear(&device, &wv, bias, k, n);
        let run = || {
            let x = Tensor::<2>::from_data(TensorData::new(xv.clone(), [m, k]), &device);
            read(relu(layer.forward(x)))
        };
        let (ours, burn) = both(run);
        assert_close(&ours, &burn, &reference(&xv, &wv, bias, m, k, n), k);
    }
}

#[test]
fn nn_linear_on_a_rank_3_input() {
    let (device, _lock) = device();
    // [2, 9, 16] folds its batches into the rows (Burn's `MergeBatches`); [4, 64, 16] keeps
    // them (rows fill the tiles) and unsqueezes the weight.
    for (batch, rows, k, n) in [(2, 9, 16, 24), (4, 64, 16, 8)] {
        let (xv, wv, bv) = (values(batch * rows * k, 7), values(k * n, 8), values(n, 9));
        let layer = linear(&device, &wv, Some(&bv), k, n);
        let run = || {
            let x = Tensor::<3>::from_data(TensorData::new(xv.clone(), [batch, rows, k]), &device);
            let y = relu(layer.forward(x));
            assert_eq!(y.dims(), [batch, rows, n]);
            read(y.reshape([batch * rows, n]))
        };
        let (ours, burn) = both(run);
        assert_close(
            &ours,
            &burn,
            &reference(&xv, &wv, Some(&bv), batch * rows, k, n),
            k,
        );
    }
}

#[test]
fn nan_stays_nan_as_in_burn() {
    let (device, _lock) = device();
    let (m, k, n) = (5, 3, 7);
    let mut xv = values(m * k, 10);
    xv[4] = f32::NAN; // row 1
    xv[9] = f32::INFINITY; // row 3
    let (wv, bv) = (values(k * n, 11), values(n, 12));
    let (ours, burn) = both(|| plain(&device, &xv, &wv, &bv, [m, k, n]));
    for (i, (o, b)) in ours.iter().zip(&burn).enumerate() {
        assert!(
            o.to_bits() == b.to_bits() || o == b,
            "[{i}] Hypatia {o} vs Burn {b}"
        );
    }
    assert!(
        ours[n..2 * n].iter().all(|v| v.is_nan()),
        "relu(NaN) is NaN, as Burn's"
    );
}
