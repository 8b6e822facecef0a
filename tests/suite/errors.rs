//! Bad input: a user's shape or dtype mistake gives, under Hypatia, exactly the outcome it
//! gives under Burn (the same panic message, or the same result where Burn accepts it), and
//! the fuser keeps working afterwards.

use super::common::*;
use burn::nn::LinearConfig;
use burn::prelude::*;
use burn::tensor::activation::relu;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A panic's message, or the values (as f32) the computation produced.
fn outcome(run: impl FnOnce() -> TensorData) -> Result<Vec<f32>, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // expected panics: keep the test log readable
    let result = catch_unwind(AssertUnwindSafe(run));
    std::panic::set_hook(hook);
    match result {
        Ok(data) => Ok(data.convert::<f32>().to_vec().unwrap()),
        Err(payload) => Err(payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into())),
    }
}

/// Runs the body on `Hypatia<Wgpu>` and on `Wgpu`: same panic message, or results within f32
/// tolerance. Returns Burn's outcome.
macro_rules! same_outcome {
    (|$device:ident| $body:expr) => {{
        fn run<B: Backend>($device: &B::Device) -> TensorData {
            $body
        }
        let fused = outcome(|| run::<Fused>(&device()));
        // Let the ops queued before a panic finish first: CubeCL 0.10 deadlocks when a
        // second fusion service starts on a device while the first is creating its fusers.
        let _ = Fused::sync(&device());
        let plain = outcome(|| run::<Plain>(&device()));
        match (&fused, &plain) {
            (Err(f), Err(p)) => assert_eq!(f, p, "different errors"),
            (Ok(f), Ok(p)) => assert_close(
                &TensorData::new(f.clone(), [f.len()]),
                &TensorData::new(p.clone(), [p.len()]),
                // On CUDA Burn's f32 matmul runs TF32; Hypatia's kernels may not.
                if cfg!(feature = "cuda") { 2e-3 } else { 1e-5 },
            ),
            _ => panic!("Hypatia: {fused:?}\nBurn: {plain:?}"),
        }
        plain
    }};
}

fn tensor<B: Backend, const D: usize>(shape: [usize; D], device: &B::Device) -> Tensor<B, D> {
    Tensor::from_data(data(7, &shape, 1.0), device)
}

#[test]
fn shape_and_dtype_mistakes_fail_as_in_burn() {
    let _serial = serial();
    let errors = [
        // Inner dims differ.
        same_outcome!(|d| tensor::<B, 2>([4, 3], d)
            .matmul(tensor([5, 2], d))
            .into_data()),
        // A Linear+ReLU whose bias does not broadcast.
        same_outcome!(|d| {
            let y = tensor::<B, 2>([4, 3], d).matmul(tensor([3, 5], d));
            relu(y + tensor::<B, 1>([6], d).unsqueeze()).into_data()
        }),
        // An nn::Linear fed the wrong width.
        same_outcome!(|d| {
            let linear = LinearConfig::new(8, 4).init::<B>(d);
            relu(linear.forward(tensor::<B, 2>([3, 7], d))).into_data()
        }),
        // Batch dims that do not broadcast.
        same_outcome!(|d| tensor::<B, 3>([2, 4, 3], d)
            .matmul(tensor([3, 3, 5], d))
            .into_data()),
        // A reshape to another element count.
        same_outcome!(|d| tensor::<B, 2>([4, 3], d).reshape([5, 2]).into_data()),
    ];
    for error in &errors {
        assert!(error.is_err(), "Burn rejects this input: {error:?}");
    }
    // Mixed dtypes: whatever Burn does (it converts), Hypatia does. (Not compared: a 0-row
    // Linear+ReLU, on which Burn 0.21's own fusion stream panics on its device thread, with or
    // without Hypatia.)
    let _ = same_outcome!(|d| {
        let w = tensor::<B, 2>([3, 5], d).cast(burn::tensor::DType::F16);
        relu(tensor::<B, 2>([4, 3], d).matmul(w)).into_data()
    });
    // The fuser is unharmed: a valid Linear+ReLU still runs fused and right.
    let before = executed();
    same_outcome!(|d| {
        let y = tensor::<B, 2>([4, 3], d).matmul(tensor([3, 5], d));
        relu(y + tensor::<B, 1>([5], d).unsqueeze()).into_data()
    })
    .expect("a valid Linear+ReLU");
    assert!(executed() > before, "a later linear-relu ran fused");
}
