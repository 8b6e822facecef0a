//! The Linear+ReLU check shared by the test binaries: one problem on `Hypatia<B>` (poisoned
//! memory first) and on `B`, against each other and a float64 host reference.

use super::common::*;
use super::model::Mlp;
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::module::linear;
use burn::tensor::{DType, Element};
use hypatia::FusedPattern;
use hypatia::config::ExecutionPolicy;

/// Element-wise tolerance (relative to the largest magnitude): Burn's f32 matmul on CUDA uses
/// TF32 tensor cores, and so may Hypatia's engine, which tunes over the same kernels; both
/// then differ from each other and from float64 by TF32 rounding.
pub fn burn_tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 if cfg!(feature = "cuda") => 2e-3,
        _ => tolerance(dtype),
    }
}

/// `relu(linear(x, w, b))` on `Hypatia` equals Burn's, with a `sync` of Hypatia's forward
/// before either is read.
pub fn linear_relu_matches_burn(x: &TensorData, w: &TensorData, b: &TensorData) {
    let device = device();
    let f = relu(linear(
        Tensor::<Fused, 2>::from_data(x.clone(), &device),
        Tensor::from_data(w.clone(), &device),
        Some(Tensor::from_data(b.clone(), &device)),
    ));
    Fused::sync(&device).expect("sync");
    let p = relu(linear(
        Tensor::<Plain, 2>::from_data(x.clone(), &device),
        Tensor::from_data(w.clone(), &device),
        Some(Tensor::from_data(b.clone(), &device)),
    ));
    // On CUDA both sides' f32 matmuls run TF32, rounded differently by each kernel.
    assert_close(&f.into_data(), &p.into_data(), burn_tolerance(DType::F32));
}

/// Bound on ‖out − ref‖₂ / ‖ref‖₂ against the float64 reference: 1e-5 for f32, 2e-3 for f16,
/// 1e-2 for bf16. On CUDA f32 runs as TF32 (Burn's matmul and the engine's candidates): the
/// Hopper kernel's `wgmma` truncates each operand to a 10-bit mantissa, up to 2⁻¹⁰ relative and
/// always toward zero, so the error of a product (up to 2⁻⁹ ≈ 2e-3) does not average out over a
/// sum; an H100 measured 6.8e-4 on these tests' data, against 5e-4 before. So f16's 2e-3.
pub fn norm_tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 if cfg!(feature = "cuda") => 2e-3,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        _ => 1e-2,
    }
}

/// One Linear+ReLU problem.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Leading dims of x, then m; x is `[lead.., m, k]`.
    pub lead: &'static [usize],
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// x is stored `[.., k, m]` and transposed (a strided view).
    pub transpose_x: bool,
    /// w is stored `[n, k]` and transposed, as a `[out, in]` layout would be.
    pub transpose_w: bool,
    /// Put NaN and ±Inf into x.
    pub specials: bool,
}

pub const fn case(m: usize, k: usize, n: usize) -> Case {
    Case {
        lead: &[],
        m,
        k,
        n,
        transpose_x: false,
        transpose_w: false,
        specials: false,
    }
}

impl Case {
    /// The same case with x's leading dims `lead`.
    pub const fn lead(self, lead: &'static [usize]) -> Case {
        Case { lead, ..self }
    }

    /// The same case with x stored transposed.
    pub const fn transposed_x(self) -> Case {
        Case {
            transpose_x: true,
            ..self
        }
    }

    /// The same case with w stored transposed.
    pub const fn transposed_w(self) -> Case {
        Case {
            transpose_w: true,
            ..self
        }
    }

    /// The same case with NaN and ±Inf in x.
    pub const fn with_specials(self) -> Case {
        Case {
            specials: true,
            ..self
        }
    }
}

/// Runs the case on `B`; returns the output and the inputs as `B` holds them (rounded to
/// its float type, in logical layout) for the float64 reference.
fn forward<B: Backend, const D: usize>(
    case: &Case,
    device: &B::Device,
) -> (TensorData, [TensorData; 3]) {
    let mut x_shape: Vec<usize> = case.lead.to_vec();
    if case.transpose_x {
        x_shape.extend([case.k, case.m]);
    } else {
        x_shape.extend([case.m, case.k]);
    }
    let mut x = data(11, &x_shape, 1.0);
    if case.specials {
        let mut v: Vec<f32> = x.to_vec().unwrap();
        let len = v.len();
        v[0] = f32::NAN;
        v[len / 2] = f32::INFINITY;
        v[len - 1] = f32::NEG_INFINITY;
        x = TensorData::new(v, x_shape.clone());
    }
    let dtype = B::FloatElem::dtype();
    let x = Tensor::<B, D>::from_data(x.convert_dtype(dtype), device);
    // Burn 0.21 fixes a device's float dtype at its first tensor in the process and silently
    // converts later data to it: a test of another dtype must run in its own test binary.
    assert_eq!(
        x.dtype(),
        dtype,
        "this device already holds another float dtype"
    );
    let x = if case.transpose_x {
        x.swap_dims(D - 2, D - 1)
    } else {
        x
    };
    let w_shape = if case.transpose_w {
        [case.n, case.k]
    } else {
        [case.k, case.n]
    };
    let w = Tensor::<B, 2>::from_data(data(12, &w_shape, 0.5).convert_dtype(dtype), device);
    let w = if case.transpose_w { w.transpose() } else { w };
    let b = Tensor::<B, 1>::from_data(data(13, &[case.n], 0.5).convert_dtype(dtype), device);
    let inputs = [x.to_data(), w.to_data(), b.to_data()];
    let out = relu(x.matmul(w.unsqueeze::<D>()) + b.unsqueeze::<D>()).into_data();
    (out, inputs)
}

/// `relu(x · w + b)` in float64 on the host, with IEEE NaN / Inf semantics and Burn's relu.
fn reference([x, w, b]: &[TensorData; 3]) -> TensorData {
    let as_f64 = |d: &TensorData| -> Vec<f64> {
        d.clone()
            .convert::<f32>()
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect()
    };
    let (xv, wv, bv) = (as_f64(x), as_f64(w), as_f64(b));
    let rank = x.shape.len();
    let (m, k, n) = (x.shape[rank - 2], x.shape[rank - 1], w.shape[1]);
    let batch = xv.len() / (m * k);
    let mut out = Vec::with_capacity(batch * m * n);
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let mut acc = bv[j];
                for l in 0..k {
                    acc += xv[bi * m * k + i * k + l] * wv[l * n + j];
                }
                out.push(if acc <= 0.0 { 0.0 } else { acc } as f32);
            }
        }
    }
    let mut shape = x.shape.clone();
    shape[rank - 1] = n;
    TensorData::new(out, shape)
}

/// Runs every case on `H` (poisoned memory first) and on `P`; `H` must match the float64
/// reference within its dtype's tolerance and Burn within Burn's own precision, and each case
/// must have gone through `counter`.
pub fn check_with<P: Backend, H: Backend<Device = P::Device>, const D: usize>(
    cases: &[Case],
    counter: fn(&hypatia::FusionStats) -> u64,
    reference_tolerance: f32,
) {
    let _ = device();
    let device = P::Device::default();
    let count = || counter(&hypatia::stats(&device));
    let before = count();
    let dtype = P::FloatElem::dtype();
    for case in cases {
        eprintln!("checking {case:?}");
        let out_len = case.lead.iter().product::<usize>() * case.m * case.n;
        poison::<H>(out_len, &device);
        let (actual, inputs) = forward::<H, D>(case, &device);
        let (burn, _) = forward::<P, D>(case, &device);
        let expected = reference(&inputs);
        assert_close(&actual, &expected, reference_tolerance);
        assert_norm_close(&actual, &expected, norm_tolerance(dtype));
        assert_close(&actual, &burn, burn_tolerance(dtype));
    }
    assert_eq!(
        count() - before,
        cases.len() as u64,
        "every case must run fused: {:?}",
        hypatia::stats(&device)
    );
}

pub fn check<P: Backend, H: Backend<Device = P::Device>, const D: usize>(cases: &[Case]) {
    let tol = burn_tolerance(P::FloatElem::dtype());
    check_with::<P, H, D>(cases, |s| s.executed(FusedPattern::LinearRelu), tol);
}

pub const SHAPES: &[Case] = &[
    case(1, 1, 1),
    case(17, 33, 65),
    case(64, 64, 64),
    case(65, 130, 67),
    case(128, 3, 257),
    case(5, 300, 1),
];

/// Whether the test device computes in `F` (else the half tests say they are skipped).
pub fn has_arithmetic<F: burn_cubecl::FloatElement>() -> bool {
    let dtype = F::dtype();
    let supported = PlainOf::<F>::supports_dtype(&device(), dtype);
    if !supported {
        eprintln!("skipped: this device has no {dtype:?} arithmetic");
    }
    supported
}

/// The half-precision suite for float type `F` (each in its own test binary: see `forward`).
#[allow(dead_code)] // used by tests/half_*.rs only
pub fn check_half<F: burn_cubecl::FloatElement>() {
    if !has_arithmetic::<F>() {
        return;
    }
    check::<PlainOf<F>, FusedOf<F>, 2>(SHAPES);
    let cases = [case(17, 33, 65).lead(&[3]).transposed_w()];
    check::<PlainOf<F>, FusedOf<F>, 3>(&cases);
}

/// Linear + bias + ReLU in `F` with `k = 1`, where the product is exact in f32 and no order
/// of summation can part Hypatia from Burn: equal to Burn's bit for bit, on each kernel path
/// that stores through the shared epilogue. Burn stores the matmul's product in `F` and rounds
/// again after the bias; rounding once, after the bias, differs in the last bit wherever the
/// product is not representable in `F` (decision record 0027).
#[allow(dead_code)] // used by the half tests only
pub fn check_half_rounding<F: burn_cubecl::FloatElement>() {
    if !has_arithmetic::<F>() {
        return;
    }
    let device = device();
    for policy in [ExecutionPolicy::Tiled, ExecutionPolicy::Split] {
        let _guard = ConfigGuard::set(|c| c.execution = policy);
        for case in [case(17, 1, 65), case(64, 1, 130)] {
            let before = hypatia::stats(&device).executed(FusedPattern::LinearRelu);
            poison::<FusedOf<F>>(case.m * case.n, &device);
            let (actual, _) = forward::<FusedOf<F>, 2>(&case, &device);
            let (burn, _) = forward::<PlainOf<F>, 2>(&case, &device);
            let bits = |data: &TensorData| -> Vec<u64> {
                let values = data.clone().convert::<f64>();
                let values = values.as_slice::<f64>().unwrap();
                values.iter().map(|v| v.to_bits()).collect()
            };
            let (a, b) = (bits(&actual), bits(&burn));
            let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            assert_eq!(
                differ,
                0,
                "{policy:?} {case:?}: {differ} of {} outputs differ from Burn's",
                a.len()
            );
            assert_eq!(
                hypatia::stats(&device).executed(FusedPattern::LinearRelu) - before,
                1,
                "{policy:?} {case:?} must run fused"
            );
        }
    }
}

/// A 784→512→512→10 MLP (Linear+ReLU, Linear+ReLU, Linear) in `F` runs as one MLP-chain
/// launch per forward and equals Burn's forward, at batches that take the grid-wide kernel's
/// FMA items (1, 4) and its tensor-core items (5, 8, 32, 33, 64) on CUDA, plus a rank-3 input.
#[allow(dead_code)] // used by tests/half_*.rs only
pub fn check_half_chain<F: burn_cubecl::FloatElement>() {
    if !has_arithmetic::<F>() {
        return;
    }
    let device = device();
    let dtype = F::dtype();
    let _chain = ConfigGuard::set(|c| c.chain = hypatia::config::ChainPolicy::Always);
    let sizes = [784, 512, 512, 10];
    let fused = Mlp::<FusedOf<F>>::new(sizes, true, &device);
    let plain = Mlp::<PlainOf<F>>::new(sizes, true, &device);
    let check = |shape: &[usize]| {
        let x = data(7, shape, 1.0);
        poison::<FusedOf<F>>(1 << 16, &device);
        let before = chain_launches();
        let (actual, expected) = match *shape {
            [_, _] => forwards::<F, 2>(&fused, &plain, x),
            [_, _, _] => forwards::<F, 3>(&fused, &plain, x),
            _ => unreachable!("rank 2 or 3"),
        };
        assert_eq!(
            chain_launches() - before,
            1,
            "{shape:?}: {:?}",
            hypatia::stats(&device)
        );
        assert_close(&actual, &expected, tolerance(dtype));
    };
    for m in [1, 4, 5, 8, 32, 33, 64] {
        check(&[m, 784]);
    }
    check(&[3, 7, 784]);
}

/// `x` through the same MLP on Hypatia and on Burn.
fn forwards<F: burn_cubecl::FloatElement, const D: usize>(
    fused: &Mlp<FusedOf<F>>,
    plain: &Mlp<PlainOf<F>>,
    x: TensorData,
) -> (TensorData, TensorData) {
    let device = device();
    let actual = fused.forward(Tensor::<FusedOf<F>, D>::from_data(x.clone(), &device));
    let expected = plain.forward(Tensor::<PlainOf<F>, D>::from_data(x, &device));
    (actual.into_data(), expected.into_data())
}

/// One of the property suites (`properties.rs`, `chain_properties.rs`), for the half-precision
/// binaries: each is a test of its own, so that a device runs them as separate processes.
#[allow(dead_code)] // used by tests/half_*.rs only
#[derive(Clone, Copy, Debug)]
pub enum Properties {
    /// Linear+ReLU forward, 12 cases.
    Forward,
    /// Linear+ReLU backward, 6 cases.
    Backward,
    /// Linear+GELU backward through dropout, 6 cases.
    GeluBackward,
    /// Linear+SiLU backward, 6 cases.
    SiluBackward,
    /// Linear+tanh GELU backward, 6 cases.
    GeluTanhBackward,
    /// Linear+LeakyReLU backward, 6 cases.
    LeakyReluBackward,
    /// SwiGLU's gate-side backward, 6 cases.
    SwigluBackward,
    /// SwiGLU's forward, 6 cases.
    SwigluForward,
    /// Chained MLPs, 6 cases.
    Chains,
}

/// Property cases in `F` through Hypatia's kernels against float64 and Burn.
#[allow(dead_code)] // used by tests/half_*.rs only
pub fn check_half_properties<F: burn_cubecl::FloatElement>(which: Properties) {
    use super::chain_properties::check_chains;
    use super::properties::{
        Act, Forward, check_backward, check_backward_of, check_forward, check_forward_of,
    };
    if !has_arithmetic::<F>() {
        return;
    }
    let burn_wrong = match which {
        Properties::Forward => format!("{:?}", check_forward::<F, PlainOf<F>, FusedOf<F>>(12)),
        Properties::Backward => format!("{:?}", check_backward::<F, PlainOf<F>, FusedOf<F>>(6)),
        Properties::GeluBackward => format!(
            "{:?}",
            check_backward_of::<F, PlainOf<F>, FusedOf<F>>(6, Act::Gelu, true)
        ),
        Properties::SiluBackward => format!(
            "{:?}",
            check_backward_of::<F, PlainOf<F>, FusedOf<F>>(6, Act::Silu, false)
        ),
        Properties::GeluTanhBackward => format!(
            "{:?}",
            check_backward_of::<F, PlainOf<F>, FusedOf<F>>(6, Act::GeluTanh, false)
        ),
        Properties::LeakyReluBackward => format!(
            "{:?}",
            check_backward_of::<F, PlainOf<F>, FusedOf<F>>(6, Act::LeakyRelu, false)
        ),
        Properties::SwigluBackward => format!(
            "{:?}",
            check_backward_of::<F, PlainOf<F>, FusedOf<F>>(6, Act::Swiglu, false)
        ),
        Properties::SwigluForward => {
            format!(
                "{:?}",
                check_forward_of::<F, PlainOf<F>, FusedOf<F>>(6, Forward::Swiglu)
            )
        }
        Properties::Chains => format!("{:?}", check_chains::<F, PlainOf<F>, FusedOf<F>>(6)),
    };
    eprintln!("{which:?}: cases where Burn differs from float64: {burn_wrong}");
}
