//! Conformance: Burn's tensor and autodiff operations give the same results on `Hypatia<Wgpu>`
//! as on plain `Wgpu`. Hypatia claims only Linear patterns; every other op goes through its
//! forwarding backend and Burn's own fusers, and this suite proves that layer op by op.
//!
//! Each case is one generic function run on both backends; floats must agree within f32
//! roundoff (Burn's fusers may group ops differently once Hypatia's fuser has seen them),
//! ints and bools exactly.

use super::check::burn_tolerance;
use super::common::*;
use burn::backend::Autodiff;
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::nn::{LayerNormConfig, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation as act;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::module as m;
use burn::tensor::ops::{ConvOptions, InterpolateMode, InterpolateOptions};
use burn::tensor::{DType, IndexingUpdateOp};

fn f<B: Backend, const D: usize>(seed: u64, shape: [usize; D], d: &B::Device) -> Tensor<B, D> {
    Tensor::from_data(data(seed, &shape, 2.0), d)
}

/// Positive values in [0.5, 2.5), for logs, roots and divisions.
fn pos<B: Backend, const D: usize>(seed: u64, shape: [usize; D], d: &B::Device) -> Tensor<B, D> {
    f::<B, D>(seed, shape, d).abs().add_scalar(0.5)
}

/// Ints in [-7, 7].
fn i<B: Backend, const D: usize>(seed: u64, shape: [usize; D], d: &B::Device) -> Tensor<B, D, Int> {
    f::<B, D>(seed, shape, d).mul_scalar(3.5).round().int()
}

fn idx<B: Backend, const D: usize>(
    values: Vec<i64>,
    shape: [usize; D],
    d: &B::Device,
) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(values, shape), d)
}

/// Defines each case as a function generic over the backend, and `$table()` listing them.
macro_rules! cases {
    ($table:ident<$bound:ident> { $($name:ident(|$d:ident| $body:expr);)* }) => {
        $(
            #[allow(clippy::redundant_closure_call)]
            fn $name<B: $bound>($d: &B::Device) -> Vec<TensorData> {
                $body
            }
        )*
        /// (name, on Hypatia, on Burn).
        fn $table<F: $bound<Device = TestDevice>, P: $bound<Device = TestDevice>>()
            -> Vec<Case> {
            vec![$((stringify!($name), $name::<F> as fn(&TestDevice) -> Vec<TensorData>, $name::<P> as fn(&TestDevice) -> Vec<TensorData>)),*]
        }
    };
}

cases! { forward_cases<Backend> {
    // Float elementwise.
    binary(|d| {
        let (a, b) = (f::<B, 2>(1, [5, 7], d), pos::<B, 2>(2, [5, 7], d));
        vec![
            (a.clone() + b.clone()).into_data(),
            (a.clone() - b.clone()).into_data(),
            (a.clone() * b.clone()).into_data(),
            (a.clone() / b.clone()).into_data(),
            a.clone().remainder(b.clone()).into_data(),
            b.clone().powf(a.clone()).into_data(),
            a.clone().max_pair(b.clone()).into_data(),
            a.atan2(b).into_data(),
        ]
    });
    scalar(|d| {
        let a = f::<B, 2>(3, [4, 9], d);
        vec![
            a.clone().add_scalar(1.5).mul_scalar(-2.0).sub_scalar(0.25).div_scalar(3.0).into_data(),
            a.clone().powf_scalar(2.0).into_data(),
            a.clone().powi_scalar(3).into_data(),
            a.clone().clamp(-0.5, 0.75).into_data(),
            a.remainder_scalar(0.7).into_data(),
        ]
    });
    unary(|d| {
        let a = f::<B, 2>(4, [6, 5], d);
        let p = pos::<B, 2>(5, [6, 5], d);
        vec![
            a.clone().exp().into_data(), p.clone().log().into_data(), p.clone().sqrt().into_data(),
            a.clone().abs().into_data(), a.clone().neg().into_data(), a.clone().sin().into_data(),
            a.clone().cos().into_data(), a.clone().tanh().into_data(), a.clone().erf().into_data(),
            p.clone().recip().into_data(), a.clone().floor().into_data(), a.clone().ceil().into_data(),
            a.clone().round().into_data(), a.clone().sign().into_data(), p.log1p().into_data(),
            a.square().into_data(),
        ]
    });
    activations(|d| {
        let a = f::<B, 3>(6, [2, 3, 8], d);
        vec![
            act::relu(a.clone()).into_data(), act::gelu(a.clone()).into_data(),
            act::gelu_approximate(a.clone()).into_data(), act::silu(a.clone()).into_data(),
            act::sigmoid(a.clone()).into_data(), act::leaky_relu(a.clone(), 0.1).into_data(),
            act::softmax(a.clone(), 2).into_data(), act::log_softmax(a.clone(), 1).into_data(),
            act::softplus(a.clone(), 1.0).into_data(), act::mish(a.clone()).into_data(),
            act::hard_sigmoid(a.clone(), 0.2, 0.5).into_data(), act::elu(a, 1.0).into_data(),
        ]
    });
    comparisons(|d| {
        let (a, b) = (f::<B, 2>(7, [5, 6], d), f::<B, 2>(8, [5, 6], d));
        vec![
            a.clone().greater(b.clone()).into_data(), a.clone().lower_equal(b.clone()).into_data(),
            a.clone().equal(a.clone()).into_data(), a.clone().greater_elem(0.1).into_data(),
            a.clone().lower_elem(-0.3).into_data(),
            a.clone().mask_where(a.clone().lower_elem(0.0), b.clone()).into_data(),
            a.clone().mask_fill(b.lower_equal_elem(0.0), 0.0).into_data(),
            a.clone().is_nan().into_data(),
            (a.clone() / a.clone().sub_scalar(0.5).floor()).is_inf().into_data(),
        ]
    });
    // Reductions.
    reductions(|d| {
        let a = f::<B, 3>(9, [3, 5, 7], d);
        vec![
            a.clone().sum().into_data(), a.clone().mean().into_data(),
            a.clone().sum_dim(1).into_data(), a.clone().mean_dim(2).into_data(),
            a.clone().max().into_data(), a.clone().min_dim(0).into_data(),
            a.clone().max_dim(2).into_data(), a.clone().argmax(1).into_data(),
            a.clone().argmin(2).into_data(), a.clone().prod_dim(0).into_data(),
            a.clone().var(1).into_data(), a.clone().cumsum(2).into_data(),
            a.clone().cumprod(1).into_data(), a.clone().max_abs().into_data(),
        ]
    });
    sorting(|d| {
        let a = f::<B, 2>(10, [4, 9], d);
        let (values, indices) = a.clone().sort_with_indices(1);
        vec![
            values.into_data(), indices.into_data(), a.clone().sort_descending(0).into_data(),
            a.clone().topk(3, 1).into_data(), a.argsort(1).into_data(),
        ]
    });
    // Matmul, with broadcasting.
    matmul(|d| {
        vec![
            f::<B, 2>(11, [7, 5], d).matmul(f(12, [5, 3], d)).into_data(),
            f::<B, 3>(13, [2, 4, 6], d).matmul(f(14, [2, 6, 5], d)).into_data(),
            f::<B, 4>(15, [2, 1, 3, 4], d).matmul(f(16, [1, 3, 4, 2], d)).into_data(),
            f::<B, 3>(17, [3, 4, 5], d).matmul(f(18, [1, 5, 2], d)).into_data(),
            f::<B, 2>(19, [6, 4], d).transpose().matmul(f(20, [6, 3], d)).into_data(),
        ]
    });
    linear_layers(|d| {
        let no_bias = LinearConfig::new(6, 4).with_bias(false).init::<B>(d);
        let with_bias = LinearConfig::new(6, 4).init::<B>(d);
        let x = f::<B, 3>(21, [2, 5, 6], d);
        // Same parameters on both backends: load them from data.
        let load = |t: Tensor<B, 2>| Tensor::<B, 2>::from_data(data(22, &t.dims(), 0.5), d);
        let w = load(no_bias.weight.val());
        vec![
            x.clone().matmul(w.clone().unsqueeze()).into_data(),
            m::linear(x.clone(), w.clone(), Some(f(23, [4], d))).into_data(),
            act::relu(m::linear(x, w, None)).into_data(),
            with_bias.weight.val().shape().dims::<2>().iter().map(|&v| v as i64).collect::<Vec<_>>()
                .pipe(|v| TensorData::new(v, [2])),
        ]
    });
    // Reshapes and views.
    shapes(|d| {
        let a = f::<B, 3>(24, [2, 3, 4], d);
        vec![
            a.clone().reshape([4, 6]).into_data(), a.clone().swap_dims(0, 2).into_data(),
            a.clone().permute([1, 2, 0]).into_data(), a.clone().transpose().into_data(),
            a.clone().flatten::<2>(1, 2).into_data(), a.clone().unsqueeze_dim::<4>(1).into_data(),
            a.clone().slice([0..1, 0..3, 0..4]).squeeze_dim::<2>(0).into_data(),
            f::<B, 2>(25, [1, 4], d).expand([3, 4]).into_data(),
            a.clone().repeat_dim(1, 2).into_data(), a.clone().flip([0, 2]).into_data(),
            a.clone().narrow(2, 1, 2).into_data(),
            Tensor::cat(a.clone().chunk(2, 2), 1).into_data(),
            Tensor::stack::<4>(vec![a.clone(), a.clone().neg()], 1).into_data(),
            a.clone().roll_dim(1, 2).into_data(), a.triu(0).into_data(),
        ]
    });
    // Slicing and indexing.
    indexing(|d| {
        let a = f::<B, 2>(26, [5, 6], d);
        let rows = idx::<B, 1>(vec![4, 0, 2], [3], d);
        let gather = idx::<B, 2>((0..30).map(|v| (v * 7 % 6) as i64).collect(), [5, 6], d);
        vec![
            a.clone().slice([1..4, 2..5]).into_data(),
            a.clone().slice_assign([1..3, 0..2], f(27, [2, 2], d)).into_data(),
            a.clone().slice_fill([0..2, 3..6], -1.0).into_data(),
            a.clone().select(0, rows.clone()).into_data(),
            a.clone().select_assign(0, rows, f(28, [3, 6], d), IndexingUpdateOp::Add).into_data(),
            a.clone().gather(1, gather.clone()).into_data(),
            a.clone().scatter(1, gather, f(29, [5, 6], d), IndexingUpdateOp::Add).into_data(),
        ]
    });
    // Convolutions, pooling, interpolation.
    convolution(|d| {
        let x = f::<B, 4>(30, [2, 3, 9, 8], d);
        vec![
            m::conv2d(x.clone(), f(31, [4, 3, 3, 3], d), Some(f(32, [4], d)),
                ConvOptions::new([1, 1], [1, 1], [1, 1], 1)).into_data(),
            m::conv2d(x.clone(), f(33, [6, 1, 3, 2], d), None,
                ConvOptions::new([2, 1], [0, 1], [1, 2], 3)).into_data(),
            m::conv1d(f::<B, 3>(34, [2, 3, 11], d), f(35, [5, 3, 3], d), None,
                ConvOptions::new([1], [1], [1], 1)).into_data(),
            m::max_pool2d(x.clone(), [2, 2], [2, 2], [0, 0], [1, 1], false).into_data(),
            m::avg_pool2d(x.clone(), [3, 3], [1, 1], [1, 1], true, false).into_data(),
            m::adaptive_avg_pool2d(x.clone(), [3, 2]).into_data(),
            m::interpolate(x, [5, 12], InterpolateOptions::new(InterpolateMode::Bilinear)).into_data(),
        ]
    });
    // Losses and normalisation.
    losses(|d| {
        let logits = f::<B, 2>(36, [8, 5], d);
        let classes = idx::<B, 1>(vec![0, 4, 2, 1, 3, 3, 0, 2], [8], d);
        let norm = LayerNormConfig::new(5).init::<B>(d);
        vec![
            CrossEntropyLossConfig::new().init(d).forward(logits.clone(), classes).into_data(),
            MseLoss::new().forward(logits.clone(), f(37, [8, 5], d), Reduction::Mean).into_data(),
            norm.forward(logits).into_data(),
        ]
    });
    // Ints.
    ints(|d| {
        let (a, b) = (i::<B, 2>(38, [4, 5], d), i::<B, 2>(39, [4, 5], d));
        let nonzero = b.clone().abs().add_scalar(1);
        vec![
            (a.clone() + b.clone()).into_data(), (a.clone() * b.clone()).into_data(),
            (a.clone() / nonzero.clone()).into_data(), a.clone().remainder(nonzero).into_data(),
            a.clone().sum_dim(1).into_data(), a.clone().argmax(0).into_data(),
            a.clone().greater(b.clone()).into_data(), a.clone().float().into_data(),
            a.clone().bitwise_and(b.clone()).into_data(), a.clone().bitwise_xor(b).into_data(),
            a.clone().cumsum(1).into_data(), a.clamp(-2, 3).into_data(),
            Tensor::<B, 1, Int>::arange(3..17, d).into_data(),
            idx::<B, 1>(vec![2, 0, 1], [3], d).one_hot::<2>(4).into_data(),
        ]
    });
    // Bools.
    bools(|d| {
        let (a, b) = (f::<B, 2>(40, [4, 6], d).greater_elem(0.0), f::<B, 2>(41, [4, 6], d).lower_elem(0.2));
        vec![
            a.clone().bool_not().into_data(), a.clone().bool_and(b.clone()).into_data(),
            a.clone().bool_or(b.clone()).into_data(), a.clone().bool_xor(b.clone()).into_data(),
            a.clone().equal(b).into_data(), a.clone().any().into_data(), a.clone().all_dim(1).into_data(),
            a.clone().int().into_data(), a.clone().float().into_data(),
            a.argwhere().into_data(),
        ]
    });
    // Casts and dtypes.
    casts(|d| {
        let a = f::<B, 2>(42, [3, 7], d);
        vec![
            a.clone().cast(DType::F16).cast(DType::F32).into_data(),
            a.clone().int().into_data(),
            Tensor::<B, 2>::zeros([2, 3], d).into_data(), Tensor::<B, 2>::ones([2, 3], d).into_data(),
            Tensor::<B, 2>::full([2, 3], 0.25, d).into_data(),
            a.clone().zeros_like().into_data(),
            Tensor::<B, 2>::eye(4, d).into_data(),
        ]
    });
}}

/// Gradients of every input of a composite of ops, through `Autodiff`.
fn grads<B: AutodiffBackend, const N: usize>(
    inputs: [Tensor<B, 2>; N],
    f: impl FnOnce([Tensor<B, 2>; N]) -> Tensor<B, 1>,
) -> Vec<TensorData> {
    let inputs = inputs.map(|t| t.require_grad());
    let grads = f(inputs.clone()).backward();
    inputs
        .iter()
        .map(|t| t.grad(&grads).expect("a gradient").into_data())
        .collect()
}

cases! { autodiff_cases<AutodiffBackend> {
    grad_elementwise(|d| grads([f::<B, 2>(50, [5, 6], d), pos(51, [5, 6], d)], |[a, b]| {
        (a.clone().exp() * b.clone().log() + a.clone().tanh() / b.clone()
            + act::gelu(a.clone()) * act::sigmoid(b.clone()) - a.powf_scalar(2.0)).sum()
    }));
    grad_reductions(|d| grads([f::<B, 2>(52, [4, 7], d)], |[a]| {
        a.clone().max_dim(1).sum() + a.clone().mean_dim(0).sum() * 2.0
            + a.clone().var(1).sum() + a.cumsum(1).sum()
    }));
    grad_matmul(|d| grads([f::<B, 2>(53, [5, 4], d), f(54, [4, 3], d), f(55, [1, 3], d)],
        |[x, w, b]| act::relu(x.matmul(w) + b).powf_scalar(2.0).sum()));
    grad_no_bias_linear(|d| grads([f::<B, 2>(56, [6, 3], d), f(57, [3, 5], d)],
        |[x, w]| act::relu(x.matmul(w)).sum()));
    grad_softmax_cross_entropy(|d| grads([f::<B, 2>(58, [6, 4], d)], |[logits]| {
        let classes = idx::<B, 1>(vec![0, 3, 1, 2, 2, 0], [6], d);
        CrossEntropyLossConfig::new().init(d).forward(logits.clone(), classes)
            + act::log_softmax(logits, 1).sum()
    }));
    grad_views(|d| grads([f::<B, 2>(59, [4, 6], d)], |[a]| {
        let rows = idx::<B, 1>(vec![3, 1], [2], d);
        let parts = a.clone().chunk(3, 1);
        (a.clone().transpose().reshape([3, 8]).slice([0..2, 1..7]).sum()
            + a.clone().select(0, rows).sum() * 3.0
            + Tensor::cat(parts, 0).flip([0]).narrow(0, 2, 5).sum()
            + a.clone().repeat_dim(0, 2).mul_scalar(0.5).sum())
            * a.mean()
    }));
    grad_gather_mask(|d| grads([f::<B, 2>(60, [4, 5], d)], |[a]| {
        let indices = idx::<B, 2>((0..20).map(|v| (v * 3 % 5) as i64).collect(), [4, 5], d);
        let mask = a.clone().lower_elem(0.0);
        (a.clone().gather(1, indices) * 2.0).sum() + a.mask_fill(mask, 0.0).powf_scalar(3.0).sum()
    }));
    grad_conv_pool(|d| {
        let x = f::<B, 4>(61, [1, 2, 7, 6], d).require_grad();
        let w = f::<B, 4>(62, [3, 2, 3, 3], d).require_grad();
        let y = m::conv2d(x.clone(), w.clone(), None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
        let y = m::max_pool2d(y, [2, 2], [2, 2], [0, 0], [1, 1], false);
        let grads = (m::avg_pool2d(y, [2, 2], [1, 1], [0, 0], true, false).sum()).backward();
        vec![x.grad(&grads).unwrap().into_data(), w.grad(&grads).unwrap().into_data()]
    });
    grad_layer_norm(|d| {
        let norm = LayerNormConfig::new(6).init::<B>(d);
        grads([f::<B, 2>(63, [5, 6], d)], |[a]| norm.forward(a).powf_scalar(2.0).sum())
    });
}}

/// Extends values with a method-call form, for building data inline.
trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<T> Pipe for T {}

/// A case: its name, run on Hypatia, run on Burn.
type Case = (&'static str, Runner, Runner);
type Runner = fn(&TestDevice) -> Vec<TensorData>;

fn assert_same(case: &str, fused: Vec<TensorData>, plain: Vec<TensorData>) {
    assert_eq!(fused.len(), plain.len(), "{case}: output count");
    for (k, (f, p)) in fused.iter().zip(&plain).enumerate() {
        assert_eq!(f.dtype, p.dtype, "{case}[{k}]: dtype");
        assert_eq!(f.shape, p.shape, "{case}[{k}]: shape");
        if f.dtype.is_float() {
            let values = |t: &TensorData| t.clone().convert::<f32>().to_vec::<f32>().unwrap();
            let (fv, pv) = (values(f), values(p));
            let scale = pv
                .iter()
                .filter(|v| v.is_finite())
                .fold(1f32, |m, v| m.max(v.abs()));
            // f32 roundoff; TF32 on CUDA, where Hypatia's matmuls may pick other kernels.
            let tol = burn_tolerance(DType::F32);
            for (j, (a, b)) in fv.iter().zip(&pv).enumerate() {
                let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * scale;
                assert!(same, "{case}[{k}] element {j}: Hypatia {a} vs Burn {b}");
            }
        } else {
            assert_eq!(f.as_bytes(), p.as_bytes(), "{case}[{k}]: values");
        }
    }
}

fn run_all(cases: Vec<Case>) -> usize {
    let device = device();
    let mut outputs = 0;
    for (name, fused, plain) in cases {
        let (f, p) = (fused(&device), plain(&device));
        outputs += f.len();
        assert_same(name, f, p);
    }
    outputs
}

#[test]
fn tensor_ops_match_burn() {
    let _serial = serial();
    let outputs = run_all(forward_cases::<Fused, Plain>());
    assert!(outputs >= 140, "{outputs} outputs compared");
}

#[test]
fn autodiff_ops_match_burn() {
    let _serial = serial();
    let outputs = run_all(autodiff_cases::<Autodiff<Fused>, Autodiff<Plain>>());
    assert!(outputs >= 12, "{outputs} gradients compared");
}
