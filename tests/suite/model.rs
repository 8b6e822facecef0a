//! The MLP the inference tests share: three seeded `nn::Linear` layers with `nn::Relu` between
//! them, the same parameters on every backend.

use super::common::*;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    hidden1: Linear<B>,
    hidden2: Linear<B>,
    output: Linear<B>,
    act: Relu,
}

fn seeded_linear<B: Backend>(
    d_in: usize,
    d_out: usize,
    seed: u64,
    bias: bool,
    device: &B::Device,
) -> Linear<B> {
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
        Self {
            hidden1: seeded_linear(sizes[0], sizes[1], 100, bias, device),
            hidden2: seeded_linear(sizes[1], sizes[2], 200, bias, device),
            output: seeded_linear(sizes[2], sizes[3], 300, bias, device),
            act: Relu::new(),
        }
    }

    /// The three Linear layers, input side first.
    pub fn layers(&self) -> [&Linear<B>; 3] {
        [&self.hidden1, &self.hidden2, &self.output]
    }

    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let x = self.act.forward(self.hidden1.forward(x));
        let x = self.act.forward(self.hidden2.forward(x));
        self.output.forward(x)
    }
}
