//! The MLP as a Burn user writes it: `nn::Linear` layers with `nn::Relu` between them. The
//! examples train it on a synthetic task; the tests build it with seeded parameters and compare
//! backends on it.

use burn::nn::{Linear, Relu};
use burn::prelude::*;

/// Linear-ReLU-Linear-ReLU-Linear: two of Hypatia's fused Linear+ReLU kernels per forward.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    hidden1: Linear<B>,
    hidden2: Linear<B>,
    output: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    /// The model of three layers, input side first.
    pub fn from_layers([hidden1, hidden2, output]: [Linear<B>; 3]) -> Self {
        Self {
            hidden1,
            hidden2,
            output,
            act: Relu::new(),
        }
    }

    /// The three Linear layers, input side first.
    pub fn layers(&self) -> [&Linear<B>; 3] {
        [&self.hidden1, &self.hidden2, &self.output]
    }

    /// The output `[.., d_out]` of an input `[.., d_in]`.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let x = self.act.forward(self.hidden1.forward(x));
        let x = self.act.forward(self.hidden2.forward(x));
        self.output.forward(x)
    }
}
