//! Models as Burn users write them, trained on `Autodiff<Hypatia<B>>` and on `Autodiff<B>`: the
//! same losses, parameters and predictions. Burn's guide model (convolutions, dropout, pooling,
//! Linear + ReLU) and a Transformer encoder classifier (embeddings, attention's batched matmuls,
//! layer norms, a GELU feed-forward, dropout): Hypatia claims their Linears and leaves the rest
//! to Burn, and the dropout masks, drawn from Burn's seeded generator, match on both backends.

use super::common::*;
use super::train::TRAIN_TOLERANCE;
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::module::{ModuleVisitor, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use hypatia::FusedPattern;

/// Burn's guide model (`examples/guide` at v0.21.0), as written there.
#[derive(Module, Debug)]
struct Guide<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: AdaptiveAvgPool2d,
    dropout: Dropout,
    linear1: Linear<B>,
    linear2: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Guide<B> {
    fn new(hidden: usize, classes: usize, device: &B::Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 8], [3, 3]).init(device),
            conv2: Conv2dConfig::new([8, 16], [3, 3]).init(device),
            pool: AdaptiveAvgPool2dConfig::new([8, 8]).init(),
            activation: Relu::new(),
            linear1: LinearConfig::new(16 * 8 * 8, hidden).init(device),
            linear2: LinearConfig::new(hidden, classes).init(device),
            dropout: DropoutConfig::new(0.5).init(),
        }
    }

    fn forward(&self, images: Tensor<B, 3>) -> Tensor<B, 2> {
        let [batch, height, width] = images.dims();
        let x = images.reshape([batch, 1, height, width]);
        let x = self.conv1.forward(x);
        let x = self.dropout.forward(x);
        let x = self.conv2.forward(x);
        let x = self.dropout.forward(x);
        let x = self.activation.forward(x);
        let x = self.pool.forward(x);
        let x = x.reshape([batch, 16 * 8 * 8]);
        let x = self.linear1.forward(x);
        let x = self.dropout.forward(x);
        let x = self.activation.forward(x);
        self.linear2.forward(x)
    }
}

/// A Transformer encoder classifier in the shape of Burn's `examples/text-classification`:
/// token and position embeddings, the encoder, the first position's features, a Linear head.
#[derive(Module, Debug)]
struct Encoder<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    encoder: TransformerEncoder<B>,
    head: Linear<B>,
}

const VOCAB: usize = 16;

impl<B: Backend> Encoder<B> {
    fn new(seq: usize, classes: usize, device: &B::Device) -> Self {
        let d_model = 32;
        Self {
            tokens: EmbeddingConfig::new(VOCAB, d_model).init(device),
            positions: EmbeddingConfig::new(seq, d_model).init(device),
            encoder: TransformerEncoderConfig::new(d_model, 64, 4, 2)
                .with_dropout(0.1)
                .with_norm_first(true)
                .init(device),
            head: LinearConfig::new(d_model, classes).init(device),
        }
    }

    fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        let [batch, seq] = tokens.dims();
        let device = tokens.device();
        let index = Tensor::<B, 1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .repeat_dim(0, batch);
        let x = self.tokens.forward(tokens) + self.positions.forward(index);
        let x = self.encoder.forward(TransformerEncoderInput::new(x));
        let [_, _, d_model] = x.dims();
        self.head
            .forward(x.slice([0..batch, 0..1]).reshape([batch, d_model]))
    }
}

/// What a run gives to compare: each step's loss, the trained parameters, the trained model's
/// predictions in evaluation mode (no dropout).
struct Run {
    losses: Vec<f32>,
    params: Vec<TensorData>,
    eval: TensorData,
}

/// Every float parameter of a module, in visiting order.
struct Params(Vec<TensorData>);

impl<B: Backend> ModuleVisitor<B> for Params {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.val().into_data());
    }
}

/// Seeds Burn as a user does, builds the model, and trains it with Adam and cross-entropy for
/// `steps`, `batch(model, step)` giving a step's logits and labels.
fn fit<B: AutodiffBackend, M: AutodiffModule<B>>(
    seed: u64,
    init: impl FnOnce(&B::Device) -> M,
    steps: usize,
    lr: f64,
    batch: impl Fn(&M, usize) -> (Tensor<B, 2>, Tensor<B, 1, Int>),
) -> (M, Vec<f32>) {
    let device = Default::default();
    B::seed(&device, seed);
    let mut model = init(&device);
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::with_capacity(steps);
    for step in 0..steps {
        let (logits, labels) = batch(&model, step);
        let loss = loss_fn.forward(logits, labels);
        losses.push(loss.clone().into_scalar().elem::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(lr, model, grads);
    }
    (model, losses)
}

fn run_of<B: Backend, M: Module<B>>(model: &M, losses: Vec<f32>, eval: TensorData) -> Run {
    let mut params = Params(Vec::new());
    model.visit(&mut params);
    Run {
        losses,
        params: params.0,
        eval,
    }
}

const GUIDE_BATCH: usize = 17;

/// Images whose class is the brightest of ten bands of rows, and their labels.
fn images<B: Backend>(step: usize, device: &B::Device) -> (Tensor<B, 3>, Tensor<B, 1, Int>) {
    let mut pixels: Vec<f32> = data(500 + step as u64, &[GUIDE_BATCH, 28, 28], 0.5)
        .to_vec()
        .unwrap();
    let labels: Vec<i64> = (0..GUIDE_BATCH)
        .map(|i| ((i * 7 + step * 3) % 10) as i64)
        .collect();
    for (image, label) in pixels.chunks_mut(28 * 28).zip(&labels) {
        let rows = (*label as usize * 28 / 10)..((*label as usize + 1) * 28 / 10);
        for v in &mut image[rows.start * 28..rows.end * 28] {
            *v += 1.0;
        }
    }
    (
        Tensor::from_data(TensorData::new(pixels, [GUIDE_BATCH, 28, 28]), device),
        Tensor::from_data(TensorData::new(labels, [GUIDE_BATCH]), device),
    )
}

fn train_guide<B: AutodiffBackend>(steps: usize) -> Run {
    let device = Default::default();
    let init = |device: &B::Device| Guide::<B>::new(64, 10, device);
    let (model, losses) = fit(7, init, steps, 1e-3, |model, step| {
        let (x, y) = images::<B>(step, &device);
        (model.forward(x), y)
    });
    let (x, _) = images::<B::InnerBackend>(steps, &device);
    run_of(&model, losses, model.valid().forward(x).into_data())
}

const SEQ: usize = 9;
const ENCODER_BATCH: usize = 5;

/// Token sequences whose class is their first token modulo 4, and their labels.
fn sequences<B: Backend>(
    step: usize,
    device: &B::Device,
) -> (Tensor<B, 2, Int>, Tensor<B, 1, Int>) {
    let tokens: Vec<i64> = values(900 + step as u64, ENCODER_BATCH * SEQ)
        .iter()
        .map(|v| ((v + 1.0) * 0.5 * VOCAB as f32) as i64 % VOCAB as i64)
        .collect();
    let labels: Vec<i64> = tokens.chunks(SEQ).map(|s| s[0] % 4).collect();
    (
        Tensor::from_data(TensorData::new(tokens, [ENCODER_BATCH, SEQ]), device),
        Tensor::from_data(TensorData::new(labels, [ENCODER_BATCH]), device),
    )
}

fn train_encoder<B: AutodiffBackend>(steps: usize) -> Run {
    let device = Default::default();
    let init = |device: &B::Device| Encoder::<B>::new(SEQ, 4, device);
    let (model, losses) = fit(11, init, steps, 3e-3, |model, step| {
        let (x, y) = sequences::<B>(step, &device);
        (model.forward(x), y)
    });
    let (x, _) = sequences::<B::InnerBackend>(steps, &device);
    run_of(&model, losses, model.valid().forward(x).into_data())
}

/// The fused steps Hypatia ran so far on the test device, all patterns.
fn fused_steps() -> u64 {
    let stats = hypatia::stats(&device());
    FusedPattern::ALL.iter().map(|p| stats.executed(*p)).sum()
}

fn assert_same_training(name: &str, fused: Run, plain: Run) {
    assert_eq!(fused.losses.len(), plain.losses.len());
    for (step, (f, p)) in fused.losses.iter().zip(&plain.losses).enumerate() {
        assert!(
            (f - p).abs() <= TRAIN_TOLERANCE * p.abs().max(1.0),
            "{name}: loss at step {step}: {f} on Hypatia, {p} on Burn"
        );
    }
    assert_eq!(fused.params.len(), plain.params.len());
    for (f, p) in fused.params.iter().zip(&plain.params) {
        assert_norm_close(f, p, TRAIN_TOLERANCE);
    }
    assert_norm_close(&fused.eval, &plain.eval, TRAIN_TOLERANCE);
}

#[test]
fn burns_guide_model_trains_as_on_burn() {
    let _serial = serial();
    let before = fused_steps();
    let fused = train_guide::<Autodiff<Fused>>(12);
    assert!(fused_steps() > before, "Hypatia fused the model's Linears");
    let plain = train_guide::<Autodiff<Plain>>(12);
    assert!(
        plain.losses[11] < plain.losses[0],
        "the model learns: {:?}",
        plain.losses
    );
    assert_same_training("guide", fused, plain);
}

#[test]
fn a_transformer_encoder_trains_as_on_burn() {
    let _serial = serial();
    let before = fused_steps();
    let fused = train_encoder::<Autodiff<Fused>>(12);
    assert!(
        fused_steps() > before,
        "Hypatia fused the encoder's Linears"
    );
    let plain = train_encoder::<Autodiff<Plain>>(12);
    assert!(
        plain.losses[11] < plain.losses[0],
        "the model learns: {:?}",
        plain.losses
    );
    assert_same_training("encoder", fused, plain);
}
