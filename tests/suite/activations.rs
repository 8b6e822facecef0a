//! Linear + each activation Burn 0.21 provides (GELU, tanh GELU, SiLU, LeakyReLU, clamp /
//! ReLU6, ReLU), with and without bias, at rank 2 and 3, on every execution path: `Hypatia<B>`
//! (poisoned memory first) against `B` and a float64 reference, and each case counted under
//! its pattern. Plus a Linear without activation, and a GELU-shaped function with another
//! constant, which the plan's guards must leave to Burn.

use super::check::{burn_tolerance, norm_tolerance};
use super::common::*;
use super::train::grad_tolerance;
use burn::prelude::*;
use burn::tensor::activation;
use burn::tensor::{DType, Element};
use hypatia::FusedPattern;
use hypatia::config::ExecutionPolicy;

/// An activation as a Burn user writes it, and its float64 reference.
#[derive(Clone, Copy, Debug)]
enum Act {
    Gelu,
    GeluTanh,
    Silu,
    LeakyRelu(f64),
    Clamp(f64, f64),
    Relu,
    /// No activation: a Linear alone.
    None,
}

impl Act {
    fn apply<B: Backend, const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        match *self {
            Act::Gelu => activation::gelu(x),
            Act::GeluTanh => activation::gelu_approximate(x),
            Act::Silu => activation::silu(x),
            Act::LeakyRelu(slope) => activation::leaky_relu(x, slope),
            Act::Clamp(min, max) => x.clamp(min, max),
            Act::Relu => activation::relu(x),
            Act::None => x,
        }
    }

    fn reference(&self, x: f64) -> f64 {
        match *self {
            Act::Gelu => x * (libm::erf(x / std::f64::consts::SQRT_2) + 1.0) / 2.0,
            Act::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
            }
            Act::Silu => x / (1.0 + (-x).exp()),
            Act::LeakyRelu(slope) => {
                if x < 0.0 {
                    x * slope
                } else {
                    x
                }
            }
            Act::Clamp(min, max) => x.clamp(min, max),
            Act::Relu => {
                if x <= 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Act::None => x,
        }
    }

    fn pattern(&self, bias: bool) -> FusedPattern {
        match self {
            Act::Gelu => FusedPattern::LinearGelu,
            Act::GeluTanh => FusedPattern::LinearGeluTanh,
            Act::Silu => FusedPattern::LinearSilu,
            Act::LeakyRelu(_) => FusedPattern::LinearLeakyRelu,
            Act::Clamp(..) => FusedPattern::LinearClamp,
            Act::Relu => FusedPattern::LinearRelu,
            Act::None if bias => FusedPattern::Linear,
            Act::None => FusedPattern::Matmul,
        }
    }
}

/// `x`: `[lead.., m, k]`; NaN and ±Inf put into x when `specials`.
#[derive(Clone, Copy, Debug)]
struct Shape {
    lead: usize,
    m: usize,
    k: usize,
    n: usize,
}

const SHAPES: [Shape; 4] = [
    Shape {
        lead: 1,
        m: 1,
        k: 1,
        n: 1,
    },
    Shape {
        lead: 1,
        m: 17,
        k: 33,
        n: 65,
    },
    Shape {
        lead: 1,
        m: 65,
        k: 130,
        n: 67,
    },
    Shape {
        lead: 3,
        m: 5,
        k: 17,
        n: 9,
    },
];

/// `act(x · w + b)` on `B` (x scaled to reach each activation's curved part); the output and
/// the inputs as `B` holds them.
fn forward<B: Backend>(
    act: Act,
    bias: bool,
    shape: Shape,
    specials: bool,
    device: &B::Device,
) -> (TensorData, [TensorData; 3]) {
    let dtype = B::FloatElem::dtype();
    let mut x = data(21, &[shape.lead, shape.m, shape.k], 3.0);
    if specials {
        let mut v: Vec<f32> = x.to_vec().unwrap();
        let len = v.len();
        v[0] = f32::NAN;
        v[len / 2] = f32::INFINITY;
        v[len - 1] = f32::NEG_INFINITY;
        x = TensorData::new(v, x.shape.clone());
    }
    let x = Tensor::<B, 3>::from_data(x.convert_dtype(dtype), device);
    let w = Tensor::<B, 2>::from_data(
        data(22, &[shape.k, shape.n], 1.0).convert_dtype(dtype),
        device,
    );
    let b = Tensor::<B, 1>::from_data(data(23, &[shape.n], 1.0).convert_dtype(dtype), device);
    let inputs = [x.to_data(), w.to_data(), b.to_data()];
    let pre = x.matmul(w.unsqueeze::<3>());
    let pre = if bias { pre + b.unsqueeze::<3>() } else { pre };
    (act.apply(pre).into_data(), inputs)
}

/// `act(x · w + b)` in float64 on the host.
fn reference(act: Act, bias: bool, [x, w, b]: &[TensorData; 3]) -> TensorData {
    let as_f64 = |d: &TensorData| -> Vec<f64> {
        let v: Vec<f32> = d.clone().convert::<f32>().to_vec().unwrap();
        v.into_iter().map(f64::from).collect()
    };
    let (xv, wv, bv) = (as_f64(x), as_f64(w), as_f64(b));
    let (m, k, n) = (x.shape[1], x.shape[2], w.shape[1]);
    let batch = x.shape[0];
    let mut out = Vec::with_capacity(batch * m * n);
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let mut acc = if bias { bv[j] } else { 0.0 };
                for l in 0..k {
                    acc += xv[(bi * m + i) * k + l] * wv[l * n + j];
                }
                out.push(act.reference(acc) as f32);
            }
        }
    }
    TensorData::new(out, vec![batch, m, n])
}

/// Every case of `act` under `policy`: equal to Burn (NaN and ±Inf included), to float64 on
/// finite inputs, and run fused under its pattern.
fn check_activation(act: Act, policy: ExecutionPolicy, shapes: &[Shape]) {
    let device = device();
    let _guard = ConfigGuard::set(|c| c.execution = policy);
    let dtype = DType::F32;
    for bias in [true, false] {
        let pattern = act.pattern(bias);
        let before = hypatia::stats(&device).executed(pattern);
        let mut cases = 0;
        for &shape in shapes {
            for specials in [false, true] {
                let case = format!("{act:?} bias {bias} {shape:?} specials {specials} {policy:?}");
                poison::<Fused>(shape.lead * shape.m * shape.n, &device);
                let (actual, inputs) = forward::<Fused>(act, bias, shape, specials, &device);
                let (burn, _) = forward::<Plain>(act, bias, shape, specials, &device);
                eprintln!("checking {case}");
                // TF32 (CUDA's f32 matmuls, Burn's and Hypatia's) rounds the matmul, so the two
                // differ in proportion to its size, not to the activation's (a clamp's output
                // is ≤ 1 where its input reaches 20; seen on an H100: 4e-3 there).
                let matmul_scale = scale_of(&reference(Act::None, bias, &inputs));
                assert_close_at(&actual, &burn, burn_tolerance(dtype), matmul_scale);
                if !specials {
                    let expected = reference(act, bias, &inputs);
                    assert_close(&actual, &expected, 10.0 * burn_tolerance(dtype));
                    assert_norm_close(&actual, &expected, norm_tolerance(dtype));
                }
                cases += 1;
            }
        }
        let after = hypatia::stats(&device).executed(pattern);
        assert_eq!(
            after - before,
            cases,
            "every {act:?} case (bias {bias}) must run fused as {pattern}: {:?}",
            hypatia::stats(&device)
        );
    }
}

const ACTIVATIONS: [Act; 6] = [
    Act::Gelu,
    Act::GeluTanh,
    Act::Silu,
    Act::LeakyRelu(0.2),
    Act::Clamp(0.0, 6.0),
    Act::Relu,
];

#[test]
fn every_activation_matches_burn_tiled() {
    let _serial = serial();
    for act in ACTIVATIONS {
        check_activation(act, ExecutionPolicy::Tiled, &SHAPES);
    }
}

#[test]
fn every_activation_matches_burn_split() {
    let _serial = serial();
    for act in ACTIVATIONS {
        check_activation(act, ExecutionPolicy::Split, &SHAPES);
    }
}

/// The tensor-core engine (on lavapipe its autotune keeps Burn's matmul, with Hypatia's
/// epilogue kernel after it).
#[test]
fn every_activation_matches_burn_on_the_engine() {
    let _serial = serial();
    for act in ACTIVATIONS {
        check_activation(act, ExecutionPolicy::TensorCore, &SHAPES[1..2]);
    }
}

/// Run-time parameters are read at each execution: one plan, several slopes and bounds.
#[test]
fn parameters_change_between_calls() {
    let _serial = serial();
    let device = device();
    for act in [
        Act::LeakyRelu(0.01),
        Act::LeakyRelu(-1.5),
        Act::Clamp(-0.5, 0.25),
        Act::Clamp(1.0, 1.0),
    ] {
        check_activation(act, ExecutionPolicy::Auto, &SHAPES[1..2]);
    }
    let stats = hypatia::stats(&device);
    assert!(
        stats.patterns[FusedPattern::LinearLeakyRelu]
            .fallbacks
            .is_empty(),
        "{stats:?}"
    );
}

/// A Linear without activation (and a bare matmul) runs on Hypatia's kernels where plain
/// matmuls are claimed (forcing an execution claims them on any device).
#[test]
fn linear_without_activation_matches_burn() {
    let _serial = serial();
    check_activation(Act::None, ExecutionPolicy::Tiled, &SHAPES);
    check_activation(Act::None, ExecutionPolicy::Split, &SHAPES[1..]);
}

/// `x · (erf(x / 1.5) + 1) / 2` has GELU's ops but not its constant: the plan's guard sends
/// it to Burn's ops, with Burn's result, and says why.
#[test]
fn a_gelu_with_another_constant_runs_as_burn() {
    let _serial = serial();
    fn not_gelu<B: Backend>(x: Tensor<B, 2>, w: Tensor<B, 2>, b: Tensor<B, 1>) -> TensorData {
        let pre = x.matmul(w) + b.unsqueeze();
        (pre.clone() * ((pre / 1.5).erf() + 1.0) / 2.0).into_data()
    }
    let device = device();
    let inputs = |seed| {
        (
            data(seed, &[17, 33], 3.0),
            data(seed + 1, &[33, 65], 1.0),
            data(seed + 2, &[65], 1.0),
        )
    };
    let run = |fused: bool| {
        let (x, w, b) = inputs(31);
        if fused {
            not_gelu::<Fused>(
                Tensor::from_data(x, &device),
                Tensor::from_data(w, &device),
                Tensor::from_data(b, &device),
            )
        } else {
            not_gelu::<Plain>(
                Tensor::from_data(x, &device),
                Tensor::from_data(w, &device),
                Tensor::from_data(b, &device),
            )
        }
    };
    let before = hypatia::stats(&device);
    let actual = run(true);
    assert_close(&actual, &run(false), burn_tolerance(DType::F32));
    let after = hypatia::stats(&device);
    let mismatches = |s: &hypatia::FusionStats| {
        s.patterns
            .get(FusedPattern::LinearGelu)
            .and_then(|p| p.fallbacks.get("scalar-mismatch").copied())
            .unwrap_or(0)
    };
    assert_eq!(mismatches(&after) - mismatches(&before), 1, "{after:?}");
    assert_eq!(
        after.executed(FusedPattern::LinearGelu),
        before.executed(FusedPattern::LinearGelu)
    );
}

/// `nn::Linear` without bias, then GELU, as a model writes it; with the layer a temporary, so
/// its weight is dropped between the matmul and the GELU. Forcing an execution claims plain
/// matmuls, as devices with matrix units do: the drop must not end the window at the matmul.
#[test]
fn nn_linear_without_bias_fuses_with_gelu() {
    let _serial = serial();
    for policy in [ExecutionPolicy::Auto, ExecutionPolicy::Tiled] {
        let _guard = ConfigGuard::set(|c| c.execution = policy);
        linear_without_bias_then_gelu();
    }
}

fn linear_without_bias_then_gelu() {
    use burn::module::Param;
    use burn::nn::Linear;
    fn layer<B: Backend>(device: &B::Device) -> Linear<B> {
        let weight = Tensor::from_data(data(42, &[33, 65], 0.5), device);
        Linear {
            weight: Param::from_tensor(weight),
            bias: None,
        }
    }
    let device = device();
    let x = data(41, &[2, 17, 33], 2.0);
    let before = hypatia::stats(&device).executed(FusedPattern::LinearGelu);
    let fused = layer::<Fused>(&device).forward(Tensor::<Fused, 3>::from_data(x.clone(), &device));
    let actual = activation::gelu(fused).into_data();
    let plain = layer::<Plain>(&device).forward(Tensor::<Plain, 3>::from_data(x, &device));
    let expected = activation::gelu(plain).into_data();
    assert_close(&actual, &expected, burn_tolerance(DType::F32));
    assert_eq!(
        hypatia::stats(&device).executed(FusedPattern::LinearGelu) - before,
        1
    );
}

/// Under `Autodiff` every activation trains as on Burn: the gradients of x, w and b equal
/// `Autodiff<Plain>`'s. Which forwards fuse there depends on what Autodiff keeps for its
/// backward: ReLU, GELU, tanh GELU, SiLU and LeakyReLU do (asserted), the others are printed
/// (see the book's "What fuses").
#[test]
fn gradients_match_burn_under_autodiff() {
    let _serial = serial();
    use burn::backend::Autodiff;
    fn grads<B: burn::tensor::backend::AutodiffBackend>(
        act: Act,
        device: &B::Device,
    ) -> [TensorData; 3] {
        let x = Tensor::<B, 2>::from_data(data(51, &[17, 33], 3.0), device).require_grad();
        let w = Tensor::<B, 2>::from_data(data(52, &[33, 65], 1.0), device).require_grad();
        let b = Tensor::<B, 1>::from_data(data(53, &[65], 1.0), device).require_grad();
        let y = act.apply(x.clone().matmul(w.clone()) + b.clone().unsqueeze());
        let g = (y.clone() * y).sum().backward();
        [
            x.grad(&g).unwrap().into_data(),
            w.grad(&g).unwrap().into_data(),
            b.grad(&g).unwrap().into_data(),
        ]
    }
    let device = device();
    for act in ACTIVATIONS {
        let pattern = act.pattern(true);
        let before = hypatia::stats(&device).executed(pattern);
        let fused = grads::<Autodiff<Fused>>(act, &device);
        let plain = grads::<Autodiff<Plain>>(act, &device);
        for (name, (f, p)) in ["x", "w", "b"].iter().zip(fused.iter().zip(&plain)) {
            eprintln!("{act:?} grad {name}");
            // On CUDA both run TF32 (seen on an H100: 1.4e-4 in GELU's x gradient).
            assert_close(f, p, grad_tolerance().max(1e-4));
        }
        let ran = hypatia::stats(&device).executed(pattern) - before;
        eprintln!("{act:?} under Autodiff: {pattern} ran {ran} time(s)");
        // Autodiff's own relu and gelu keep only the pre-activation, which the kernel writes;
        // tanh GELU, SiLU and LeakyReLU are composed at the autodiff level and keep values of
        // the pre-activation alone (LeakyReLU only its mask), which Burn's ops compute from the
        // written one (decision record 0023).
        if matches!(
            act,
            Act::Gelu | Act::Relu | Act::GeluTanh | Act::Silu | Act::LeakyRelu(_)
        ) {
            assert_eq!(ran, 1, "{act:?} must fuse under Autodiff");
        }
    }
}

/// Linear + LeakyReLU under `Autodiff` writes its pre-activation for the kept mask's
/// recomputation alone, which burn-fusion frees after the block (decision record 0023):
/// repeated training steps leave device memory flat (a leaked 256 × 1024 f32 pre-activation
/// would add 1 MiB a step).
#[test]
fn leaky_relu_under_autodiff_frees_its_pre_activation() {
    use burn::backend::Autodiff;
    use cubecl::Runtime as _;
    let _serial = serial();
    type B = Autodiff<Fused>;
    let device = device();
    let bytes_in_use = || {
        Fused::sync(&device).expect("sync");
        let client = Runtime::client(&device);
        client.memory_usage().expect("memory usage").bytes_in_use
    };
    let w = Tensor::<B, 2>::from_data(data(61, &[64, 1024], 0.1), &device).require_grad();
    let step = |seed: u64| {
        let x = Tensor::<B, 2>::from_data(data(seed, &[256, 64], 1.0), &device);
        let y = activation::leaky_relu(x.matmul(w.clone()), 0.2);
        let grads = (y.clone() * y).sum().backward();
        w.grad(&grads).expect("w grad").into_data()
    };
    let pattern = FusedPattern::LinearLeakyRelu;
    let before = hypatia::stats(&device).executed(pattern);
    (0..5).for_each(|i| drop(step(70 + i)));
    let warm = bytes_in_use();
    (5..25).for_each(|i| drop(step(70 + i)));
    let after = bytes_in_use();
    let ran = hypatia::stats(&device).executed(pattern) - before;
    eprintln!("bytes in use after 5 steps: {warm}, after 25: {after}");
    assert_eq!(ran, 25, "Linear + LeakyReLU fused in every step");
    assert!(
        after <= warm + (4 << 20),
        "device memory grows: {warm} bytes in use after 5 steps, {after} after 25"
    );
}
