//! The MLP the inference tests share: three seeded `nn::Linear` layers with `nn::Relu` between
//! them, the same parameters on every backend.

use super::common::*;
use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

#[path = "../../examples/common/model.rs"]
mod user_model;
pub use user_model::Mlp;

/// A `[d_in, d_out]` layer whose weight (and bias) are drawn from `seed`, within the bound of
/// Burn's default initialiser (1/√d_in).
fn seeded_linear<B: Backend>(
    dims: [usize; 2],
    seed: u64,
    bias: bool,
    device: &B::Device,
) -> Linear<B> {
    let [d_in, d_out] = dims;
    let mut linear = LinearConfig::new(d_in, d_out)
        .with_bias(bias)
        .init::<B>(device);
    let scale = 1.0 / (d_in as f32).sqrt();
    linear.weight =
        Param::from_tensor(Tensor::from_data(data(seed, &[d_in, d_out], scale), device));
    if bias {
        linear.bias = Some(Param::from_tensor(Tensor::from_data(
            data(seed + 1, &[d_out], scale),
            device,
        )));
    }
    linear
}

impl<B: Backend> Mlp<B> {
    /// Same seeded parameters on every backend.
    pub fn new(sizes: [usize; 4], bias: bool, device: &B::Device) -> Self {
        Self::from_layers([
            seeded_linear([sizes[0], sizes[1]], 100, bias, device),
            seeded_linear([sizes[1], sizes[2]], 200, bias, device),
            seeded_linear([sizes[2], sizes[3]], 300, bias, device),
        ])
    }
}
