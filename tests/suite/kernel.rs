//! The fused Linear+ReLU kernel against Burn's unfused ops, through `Hypatia<Wgpu>`.

use super::common::*;
use burn::prelude::*;
use burn::tensor::activation::relu;

fn linear_relu<B: Backend>(x: Tensor<B, 2>, w: Tensor<B, 2>, b: Tensor<B, 1>) -> Tensor<B, 2> {
    relu(x.matmul(w) + b.unsqueeze())
}

#[test]
fn smoke_linear_relu_2d() {
    let device = device();
    let (m, k, n) = (17, 33, 65);
    let data = |seed, shape: [usize; 2]| TensorData::new(values(seed, shape[0] * shape[1]), shape);
    let x = data(1, [m, k]);
    let w = data(2, [k, n]);
    let b = TensorData::new(values(3, n), [n]);

    let expected = linear_relu(
        Tensor::<Plain, 2>::from_data(x.clone(), &device),
        Tensor::<Plain, 2>::from_data(w.clone(), &device),
        Tensor::<Plain, 1>::from_data(b.clone(), &device),
    )
    .into_data();
    let before = hypatia::stats(&device).executed("linear-relu");
    let actual = linear_relu(
        Tensor::<Fused, 2>::from_data(x, &device),
        Tensor::<Fused, 2>::from_data(w, &device),
        Tensor::<Fused, 1>::from_data(b, &device),
    )
    .into_data();
    assert_close(&actual, &expected, 1e-5);
    let stats = hypatia::stats(&device);
    println!("{}", serde_json::to_string_pretty(&stats).unwrap());
    assert!(stats.executed("linear-relu") > before, "the fused kernel did not run: {stats:?}");
}
