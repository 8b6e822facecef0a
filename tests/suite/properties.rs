//! Property tests: random problems for every fused pattern, forward and backward, on
//! `Hypatia<B>` against the unfused inner backend `B`.
//!
//! A problem draws M, K, N in 1..=300 (primes, 1, 17, 33, 65, tile edges such as 63/64/65 and
//! 127/128/129, and K off multiples of 8, 16 and 64 favoured), a rank of 2 to 4 for x, bias or
//! none, a layout per operand (contiguous, transposed or sliced, the last two read through
//! strides), an execution policy and values in [-scale, scale) with NaN, ±Inf, ±0.0 and
//! subnormals sprinkled in. Results must agree within [`reference_tolerance`] with NaN and ±Inf
//! in the same places.
//!
//! Each case states what it checks through its policy, so no case depends on which side of a
//! race won (the tests run with races off) or on the device's cost model:
//! - a forced execution ([`ExecutionPolicy::Tiled`], `Split`, and `TensorCore` where the device
//!   has matrix units for the dtype) must run as Hypatia's kernel on that path;
//! - [`ExecutionPolicy::Auto`] checks only that the result equals Burn's (or float64): whether
//!   Hypatia claims the step there is the device's choice.
//!
//! Cases are seeded (`PROPTEST_RNG_SEED` picks another seed, `PROPTEST_CASES` another count),
//! so CI is repeatable; a failure prints the shrunk problem and Hypatia's stats.

use super::check::burn_tolerance;
use super::common::*;
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::activation::{gelu, gelu_approximate, leaky_relu, relu, silu};
use burn::tensor::{DType, Element};
use hypatia::FusedPattern;
use hypatia::config::ExecutionPolicy;
use hypatia::execute::verify::Difference;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

/// How an operand is laid out in memory.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    Contiguous,
    /// Stored with its last two dims swapped, then `swap_dims`: column-major strides.
    Transposed,
    /// A window of a larger tensor: row stride longer than the row, non-zero offset.
    Sliced,
}

/// The activation whose backward a backward case checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    /// `relu`: its gradient is `mask_fill(dy · vᵀ, pre <= 0, 0)`.
    Relu,
    /// Exact `gelu`: its gradient is Burn's `gelu_backward(pre, dy · vᵀ)`.
    Gelu,
    /// `silu`: its gradient is `Autodiff`'s of `pre · sigmoid(pre)`, with the saved sigmoid.
    Silu,
    /// `gelu_approximate`: its gradient is `Autodiff`'s of its ops, with the saved `tanh + 1`
    /// and tanh input.
    GeluTanh,
    /// `leaky_relu` with slope [`LEAKY_SLOPE`]: its gradient is `Autodiff`'s of
    /// `mask_where(pre, pre < 0, pre · slope)`, with the saved bool mask.
    LeakyRelu,
    /// SwiGLU's gate side, `silu(pre) ⊙ up` with `up` a second tensor of `pre`'s shape (the up
    /// projection): its gradient is SiLU's of `(dy · vᵀ) ⊙ up`.
    Swiglu,
}

/// The forward a forward case checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Forward {
    /// `relu(x·w (+ b))`.
    LinearRelu,
    /// SwiGLU's `silu(x·w (+ b)) ⊙ (x·u)`, `u` a second weight of `w`'s shape (the up
    /// projection).
    Swiglu,
}

impl Forward {
    /// The pattern of the fused step.
    fn pattern(self) -> FusedPattern {
        match self {
            Forward::LinearRelu => FusedPattern::LinearRelu,
            Forward::Swiglu => FusedPattern::LinearSwiglu,
        }
    }
}

/// The slope of [`Act::LeakyRelu`] (burn-nn's `LeakyReluConfig` default).
pub const LEAKY_SLOPE: f64 = 0.01;

impl Act {
    /// The pattern of the fused backward step.
    fn grad_pattern(self) -> FusedPattern {
        match self {
            Act::Relu => FusedPattern::MatmulReluGrad,
            Act::Gelu => FusedPattern::MatmulGeluGrad,
            Act::Silu => FusedPattern::MatmulSiluGrad,
            Act::GeluTanh => FusedPattern::MatmulGeluTanhGrad,
            Act::LeakyRelu => FusedPattern::MatmulLeakyReluGrad,
            Act::Swiglu => FusedPattern::MatmulSwigluGrad,
        }
    }

    /// The activation's derivative at `pre` times `dh`, in float64: relu's mask (a NaN `pre`
    /// keeps `dh`, like Burn's `mask_fill`), the tanh approximation's derivative Burn 0.21's
    /// `gelu_backward` computes for both GELUs, SiLU's, or tanh GELU's as `Autodiff` composes
    /// it, each in Burn's order (SwiGLU's: SiLU's of `dh` already times the up projection).
    fn grad(self, pre: f64, dh: f64) -> f64 {
        match self {
            Act::Relu if pre <= 0.0 => 0.0,
            Act::Relu => dh,
            Act::Gelu => gelu_grad_reference(pre) * dh,
            Act::Silu | Act::Swiglu => silu_grad_reference(pre, dh),
            Act::GeluTanh => gelu_tanh_grad_reference(pre, dh),
            // A NaN `pre` is not below zero: its gradient passes, as through Burn's mask.
            Act::LeakyRelu if pre < 0.0 => dh * LEAKY_SLOPE,
            Act::LeakyRelu => dh,
        }
    }
}

/// One random Linear(+bias) → ReLU problem.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Leading dims of x (rank 2 + lead.len()).
    pub lead: Vec<usize>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub bias: bool,
    pub x_layout: Layout,
    pub w_layout: Layout,
    pub policy: ExecutionPolicy,
    /// Seed of the values.
    pub seed: u64,
    /// Special values per operand (NaN, ±Inf, ±0.0, subnormals) at seeded positions.
    pub specials: usize,
}

/// Sizes at the kernels' edges: 1 row, primes, the tiled kernel's and the engine's tile edges
/// (multiples of 16, 64 and 128, one either side), and K off multiples of 8, 16 and 64.
pub const EDGES: [usize; 24] = [
    1, 2, 3, 7, 8, 9, 13, 15, 16, 17, 31, 33, 61, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257,
    293,
];

pub fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 1..=300usize,
        2 => prop::sample::select(EDGES.to_vec()),
    ]
}

fn layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(vec![Layout::Contiguous, Layout::Transposed, Layout::Sliced])
}

/// The policies a problem may run under on the test device in `dtype`: `Auto`, and each
/// execution that can be forced there (the tensor-core engine only with matrix units).
pub fn policies(dtype: DType) -> Vec<ExecutionPolicy> {
    let client = <Runtime as cubecl::Runtime>::client(&device());
    let mut policies = vec![
        ExecutionPolicy::Auto,
        ExecutionPolicy::Tiled,
        ExecutionPolicy::Split,
    ];
    if hypatia::execute::has_matrix_units(&client, dtype) {
        policies.push(ExecutionPolicy::TensorCore);
    }
    policies
}

pub fn problem(policies: Vec<ExecutionPolicy>) -> impl Strategy<Value = Problem> {
    (
        prop::collection::vec(1..=3usize, 0..=2),
        (dim(), dim(), dim()),
        any::<bool>(),
        (layout(), layout()),
        prop::sample::select(policies),
        any::<u64>(),
        0..6usize,
    )
        .prop_map(
            |(lead, (m, k, n), bias, (x_layout, w_layout), policy, seed, specials)| Problem {
                lead,
                m,
                k,
                n,
                bias,
                x_layout,
                w_layout,
                policy,
                seed,
                specials,
            },
        )
}

/// A seeded runner: `PROPTEST_CASES` or `cases`, `PROPTEST_RNG_SEED` or a fixed seed.
pub fn runner(cases: u32) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0048_7970_6174_6961);
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    })
}

pub const SPECIALS: [f32; 7] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1.0e-40,  // subnormal
    -3.0e-39, // subnormal
];

/// `len` seeded values in [-scale, scale) with `specials` special values at seeded places.
pub fn values(seed: u64, len: usize, scale: f32, specials: usize) -> Vec<f32> {
    let mut v: Vec<f32> = super::common::values(seed, len)
        .into_iter()
        .map(|x| x * scale)
        .collect();
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    for s in 0..specials {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
        let at = (state >> 33) as usize % len;
        v[at] = SPECIALS[(s + (state >> 60) as usize) % SPECIALS.len()];
    }
    v
}

/// A tensor of logical `shape` laid out as `layout`, holding `logical` (row-major).
fn operand<B: Backend, const D: usize>(
    logical: &[f32],
    shape: [usize; D],
    layout: Layout,
    device: &B::Device,
) -> Tensor<B, D> {
    let dtype = B::FloatElem::dtype();
    let (rows, cols) = (shape[D - 2], shape[D - 1]);
    let batch: usize = shape[..D - 2].iter().product();
    let at = |b: usize, r: usize, c: usize| logical[(b * rows + r) * cols + c];
    match layout {
        Layout::Contiguous => {
            let data = TensorData::new(logical.to_vec(), shape).convert_dtype(dtype);
            Tensor::from_data(data, device)
        }
        Layout::Transposed => {
            let mut stored = shape;
            stored.swap(D - 2, D - 1);
            let values = (0..batch)
                .flat_map(|b| (0..cols).flat_map(move |c| (0..rows).map(move |r| (b, r, c))))
                .map(|(b, r, c)| at(b, r, c))
                .collect::<Vec<_>>();
            let data = TensorData::new(values, stored).convert_dtype(dtype);
            Tensor::<B, D>::from_data(data, device).swap_dims(D - 2, D - 1)
        }
        Layout::Sliced => {
            // One extra row above, two extra columns on the left, one on the right.
            let mut stored = shape;
            stored[D - 2] += 1;
            stored[D - 1] += 3;
            let values = (0..batch)
                .flat_map(|b| {
                    (0..rows + 1).flat_map(move |r| (0..cols + 3).map(move |c| (b, r, c)))
                })
                .map(|(b, r, c)| match (r.checked_sub(1), c.checked_sub(2)) {
                    (Some(r), Some(c)) if c < cols => at(b, r, c),
                    _ => f32::NAN, // read only if the strides are wrong
                })
                .collect::<Vec<_>>();
            let data = TensorData::new(values, stored).convert_dtype(dtype);
            let ranges: [core::ops::Range<usize>; D] = core::array::from_fn(|i| match i {
                _ if i == D - 2 => 1..rows + 1,
                _ if i == D - 1 => 2..cols + 2,
                _ => 0..shape[i],
            });
            Tensor::<B, D>::from_data(data, device).slice(ranges)
        }
    }
}

/// Width of the second layer in the backward problem.
const OUT: usize = 5;

/// The problem's values in logical row-major order: x, w, bias, the second layer `v`
/// (`[n, OUT]`) and the upstream gradient (`[.., m, OUT]`).
struct Values {
    x: Vec<f32>,
    w: Vec<f32>,
    b: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    /// A dropout mask of `pre`'s shape: ones, and zeros where the forward dropped.
    mask: Vec<f32>,
    /// SwiGLU's up projection, of `pre`'s shape.
    up: Vec<f32>,
    /// SwiGLU's up-projection weight, of `w`'s shape (the forward's second matmul).
    u: Vec<f32>,
}

/// The keep probability of the backward cases' dropout (Burn's `Dropout` with `prob` 0.1).
const KEEP: f64 = 0.9;

impl Problem {
    fn batch(&self) -> usize {
        self.lead.iter().product()
    }

    /// The values, rounded to `dtype` (as the device holds them).
    fn values(&self, scale: f32, dtype: DType) -> Values {
        let (batch, (m, k, n)) = (self.batch(), (self.m, self.k, self.n));
        let round = |v: Vec<f32>| round_to(v, dtype);
        Values {
            x: round(values(self.seed, batch * m * k, scale, self.specials)),
            w: round(values(self.seed + 1, k * n, scale, self.specials / 2)),
            b: round(values(self.seed + 2, n, scale, self.specials / 3)),
            v: round(values(self.seed + 4, n * OUT, 1.0, 0)),
            g: round(values(self.seed + 3, batch * m * OUT, 1.0, 0)),
            mask: (values(self.seed + 5, batch * m * n, 1.0, 0).iter())
                .map(|&u| {
                    if u < (1.0 - 2.0 * KEEP) as f32 {
                        0.0
                    } else {
                        1.0
                    }
                })
                .collect(),
            up: round(values(self.seed + 6, batch * m * n, 1.0, 0)),
            u: round(values(self.seed + 7, k * n, scale, self.specials / 2)),
        }
    }

    /// `x · w` in float64, `w` a `[k, n]` weight.
    fn product(&self, v: &Values, w: &[f32]) -> Vec<f64> {
        let (batch, (m, k, n)) = (self.batch(), (self.m, self.k, self.n));
        let mut out = vec![0.0f64; batch * m * n];
        for (row, out) in out.chunks_mut(n).enumerate() {
            for (j, o) in out.iter_mut().enumerate() {
                *o = (0..k)
                    .map(|l| v.x[row * k + l] as f64 * w[l * n + j] as f64)
                    .sum::<f64>();
            }
        }
        out
    }

    /// `pre = x·w (+ b)` in float64.
    fn pre(&self, v: &Values) -> Vec<f64> {
        let n = self.n;
        let mut pre = self.product(v, &v.w);
        for (i, o) in pre.iter_mut().enumerate() {
            *o += if self.bias { v.b[i % n] as f64 } else { 0.0 };
        }
        pre
    }

    /// `which` forward in float64: `relu(x·w (+ b))` with Burn's relu (NaN stays NaN), or
    /// SwiGLU's `silu(x·w (+ b)) ⊙ (x·u)` with Burn's sigmoid.
    fn forward_reference(&self, scale: f32, dtype: DType, which: Forward) -> Vec<f32> {
        let v = self.values(scale, dtype);
        let pre = self.pre(&v);
        match which {
            Forward::LinearRelu => pre
                .iter()
                .map(|&p| if p <= 0.0 { 0.0 } else { p as f32 })
                .collect(),
            Forward::Swiglu => (pre.iter().zip(self.product(&v, &v.u)))
                .map(|(&a, b)| (a * sigmoid_reference(a) * b) as f32)
                .collect(),
        }
    }

    /// Gradients of `sum((act(x·w + b) · v) ⊙ g)` for x, w and b, in float64 (with `dropout`,
    /// of `sum((dropout(act(x·w + b)) · v) ⊙ g)` under the problem's mask).
    fn backward_reference(
        &self,
        scale: f32,
        dtype: DType,
        act: Act,
        dropout: bool,
    ) -> Vec<Vec<f32>> {
        let v = self.values(scale, dtype);
        let pre = self.pre(&v);
        let (rows, (k, n)) = (self.batch() * self.m, (self.k, self.n));
        // dpre = act'(pre) applied to g · vᵀ.
        let mut dpre = vec![0.0f64; rows * n];
        for r in 0..rows {
            for j in 0..n {
                let dh: f64 = (0..OUT)
                    .map(|o| v.g[r * OUT + o] as f64 * v.v[j * OUT + o] as f64)
                    .sum();
                // Dropout's backward as Burn runs it: scaled in the dtype's scalar, masked.
                let dh = match dropout {
                    true => dh * (1.0 / KEEP) as f32 as f64 * v.mask[r * n + j] as f64,
                    false => dh,
                };
                // SwiGLU's product: `mul(dh, up)`.
                let dh = match act {
                    Act::Swiglu => dh * v.up[r * n + j] as f64,
                    _ => dh,
                };
                dpre[r * n + j] = act.grad(pre[r * n + j], dh);
            }
        }
        let dx = (0..rows * k)
            .map(|i| {
                (0..n)
                    .map(|j| dpre[i / k * n + j] * v.w[i % k * n + j] as f64)
                    .sum::<f64>() as f32
            })
            .collect();
        let dw = (0..k * n)
            .map(|i| {
                (0..rows)
                    .map(|r| v.x[r * k + i / n] as f64 * dpre[r * n + i % n])
                    .sum::<f64>() as f32
            })
            .collect();
        let db = (0..n)
            .map(|j| (0..rows).map(|r| dpre[r * n + j]).sum::<f64>() as f32)
            .collect();
        let mut grads = vec![dx, dw];
        if self.bias {
            grads.push(db);
        }
        grads
    }
}

/// `v` rounded to `dtype`, as the device holds it.
pub fn round_to(v: Vec<f32>, dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F16 => v
            .into_iter()
            .map(|x| half::f16::from_f32(x).to_f32())
            .collect(),
        DType::BF16 => v
            .into_iter()
            .map(|x| half::bf16::from_f32(x).to_f32())
            .collect(),
        _ => v,
    }
}

/// x, w, the bias, the second layer and the upstream gradient.
type Inputs<B, const D: usize> = (
    Tensor<B, D>,
    Tensor<B, D>,
    Option<Tensor<B, D>>,
    Tensor<B, D>,
    Tensor<B, D>,
);

/// The problem's tensors on `B`: x, w (as `[1.., k, n]`), the bias row, the second layer and
/// the upstream gradient.
fn inputs<B: Backend, const D: usize>(p: &Problem, scale: f32, device: &B::Device) -> Inputs<B, D> {
    let dtype = B::FloatElem::dtype();
    let v = p.values(scale, dtype);
    let mut x_shape = [1; D];
    x_shape[..D - 2].copy_from_slice(&p.lead);
    x_shape[D - 2] = p.m;
    x_shape[D - 1] = p.k;
    let x = operand::<B, D>(&v.x, x_shape, p.x_layout, device);
    let w = operand::<B, 2>(&v.w, [p.k, p.n], p.w_layout, device).unsqueeze::<D>();
    let bias = p.bias.then(|| {
        let b = TensorData::new(v.b.clone(), [p.n]).convert_dtype(dtype);
        Tensor::<B, 1>::from_data(b, device).unsqueeze::<D>()
    });
    let second = TensorData::new(v.v, [p.n, OUT]).convert_dtype(dtype);
    let second = Tensor::<B, 2>::from_data(second, device).unsqueeze::<D>();
    let mut g_shape = x_shape;
    g_shape[D - 1] = OUT;
    let g = TensorData::new(v.g, g_shape).convert_dtype(dtype);
    (x, w, bias, second, Tensor::from_data(g, device))
}

/// `which` forward on `B`: `relu(x·w (+ b))`, or SwiGLU's as burn-nn's `SwiGlu` runs it,
/// `silu(x·w (+ b)) ⊙ (x·u)`, the up projection's weight `u` laid out as `w`.
fn forward<B: Backend, const D: usize>(p: &Problem, scale: f32, which: Forward) -> TensorData {
    let device = Default::default();
    let (x, w, bias, _, _) = inputs::<B, D>(p, scale, &device);
    let y = x.clone().matmul(w);
    let y = match bias {
        Some(b) => y + b,
        None => y,
    };
    match which {
        Forward::LinearRelu => relu(y),
        Forward::Swiglu => {
            let u = p.values(scale, B::FloatElem::dtype()).u;
            let u = operand::<B, 2>(&u, [p.k, p.n], p.w_layout, &device).unsqueeze::<D>();
            silu(y) * x.matmul(u)
        }
    }
    .into_data()
}

/// Gradients of `sum((act(x·w + b) · v) ⊙ g)` for x, w and b: the activation's gradient is
/// then a function of `pre` applied to `dy · vᵀ`, the gated matmul Hypatia fuses. With
/// `dropout`, Burn's dropout runs between the activation and `v` (its ops, on the problem's
/// mask): the gradient reaches the gate as `(dy · vᵀ · 1/keep) ⊙ mask`.
fn backward<B: burn::tensor::backend::AutodiffBackend, const D: usize>(
    p: &Problem,
    scale: f32,
    act: Act,
    dropout: bool,
) -> Vec<TensorData> {
    let device = Default::default();
    let (x, w, bias, second, g) = inputs::<B, D>(p, scale, &device);
    let (x, w) = (x.require_grad(), w.require_grad());
    let bias = bias.map(|b| b.require_grad());
    let y = x.clone().matmul(w.clone());
    let y = match bias.clone() {
        Some(b) => y + b,
        None => y,
    };
    let h = match act {
        Act::Relu => relu(y),
        Act::Gelu => gelu(y),
        Act::Silu => silu(y),
        Act::GeluTanh => gelu_approximate(y),
        Act::LeakyRelu => leaky_relu(y, LEAKY_SLOPE),
        Act::Swiglu => {
            let up = p.values(scale, B::FloatElem::dtype()).up;
            let dims = y.dims();
            silu(y)
                * Tensor::from_data(
                    TensorData::new(up, dims).convert_dtype(B::FloatElem::dtype()),
                    &device,
                )
        }
    };
    let h = match dropout {
        // burn-nn's `Dropout::forward`, its random tensor given.
        true => {
            let values = p.values(scale, B::FloatElem::dtype()).mask;
            let mask = TensorData::new(values, h.dims()).convert_dtype(B::FloatElem::dtype());
            (h * Tensor::from_data(mask, &device)) * (1.0 / KEEP)
        }
        false => h,
    };
    let grads = (h.matmul(second) * g).sum().backward();
    let mut out = vec![
        x.grad(&grads).expect("x grad").into_data(),
        w.grad(&grads).expect("w grad").into_data(),
    ];
    if let Some(b) = bias {
        out.push(b.grad(&grads).expect("b grad").into_data());
    }
    out
}

/// Steps of `pattern` Hypatia ran so far, on any path.
fn steps(pattern: FusedPattern) -> u64 {
    hypatia::stats(&device()).executed(pattern)
}

/// Values scale per dtype: ±2 in f32; ±1 in f16 and bf16, whose sums of up to 300 products
/// must stay well inside their range and precision.
pub fn scale<F: Element>() -> f32 {
    if F::dtype() == DType::F32 { 2.0 } else { 1.0 }
}

/// Whether a result in `dtype` under `policy` may come from TF32 tensor cores: f32 on CUDA,
/// except a forward forced onto the tiled kernel (plain f32 units). Burn's f32 matmul runs TF32
/// there, and so do the engine's candidates; gradients pass through Burn's matmuls too.
fn tf32(dtype: DType, gradient: bool, policy: ExecutionPolicy) -> bool {
    cfg!(feature = "cuda") && dtype == DType::F32 && (gradient || policy != ExecutionPolicy::Tiled)
}

/// Bound on `|a − b| / max(1, max |b|)` against the float64 reference (inputs rounded to the
/// dtype first), by dtype and path; the one place the property tests' tolerances are set:
/// - exact f32: sums of 300 products round at ~1e-5 of the largest; gradients pass through two
///   matmuls;
/// - TF32 (see [`tf32`]): operands round to 10 mantissa bits (2⁻¹¹ relative each where cubek
///   rounds, 2⁻¹⁰ toward zero where the Hopper kernel's `wgmma` truncates), so a sum of products
///   is off by ~1e-3 of its scale; gradients, through two such matmuls, ~1e-2;
/// - f16 (11 bits): results round to 2⁻¹¹ and Burn keeps f16 intermediates;
/// - bf16 (8 bits): results round to 2⁻⁹ of their scale, intermediates too.
pub fn reference_tolerance(dtype: DType, gradient: bool, policy: ExecutionPolicy) -> f32 {
    match (dtype, gradient) {
        (DType::F32, false) if tf32(dtype, gradient, policy) => 5e-3,
        (DType::F32, true) if tf32(dtype, gradient, policy) => 1e-2,
        (DType::F32, false) => 1e-4,
        (DType::F32, true) => 2e-4,
        (DType::BF16, false) => 1e-2,
        (DType::BF16, true) => 3e-2,
        (_, false) => 4e-3,
        (_, true) => 1e-2,
    }
}

/// Whether `a` equals `b` within `tol` (relative to `max(1, max |b|)`), with NaN and ±Inf in
/// the same places: verify mode's own comparison. `Err` says how far apart they are.
pub fn agree(a: &[f32], b: &[f32], tol: f32) -> Result<(), String> {
    let difference = Difference::between(a, b);
    match difference.within(tol as f64) {
        true => Ok(()),
        false => Err(format!("{difference:?} (tolerance {tol})")),
    }
}

/// One output of a case: Hypatia must equal the float64 reference, or, where Burn itself
/// differs from the reference, equal Burn (Hypatia ran Burn's op there). Returns whether
/// Burn differed from the reference.
pub fn judge(
    what: &str,
    hypatia: &TensorData,
    burn: &TensorData,
    reference: &[f32],
    tol: f32,
    burn_tol: f32,
) -> Result<bool, TestCaseError> {
    let values = |t: &TensorData| t.clone().convert::<f32>().to_vec::<f32>().unwrap();
    let (h, b) = (values(hypatia), values(burn));
    let burn_wrong = agree(&b, reference, tol).err();
    match (agree(&h, reference, tol), &burn_wrong) {
        (Ok(()), _) => {}
        (Err(_), Some(_)) if agree(&h, &b, burn_tol).is_ok() => {}
        (Err(error), _) => {
            // The engine's last candidate: on a device with matrix units, likely the one that
            // ran this output's step.
            let candidate = hypatia::kernel::engine::last_candidate::<Runtime>();
            return Err(TestCaseError::fail(format!(
                "{what}: Hypatia vs float64: {error}; Burn vs float64: {burn_wrong:?}; \
                 engine's last candidate: {candidate:?}"
            )));
        }
    }
    if let Some(error) = &burn_wrong {
        eprintln!("Burn differs from float64 in {what}: {error}");
    }
    Ok(burn_wrong.is_some())
}

/// `$run::<$backend, D>($args)` with D the rank of the problem's x.
macro_rules! at_rank {
    ($p:expr, $run:ident::<$backend:ty>($($arg:expr),*)) => {
        match $p.lead.len() {
            0 => $run::<$backend, 2>($($arg),*),
            1 => $run::<$backend, 3>($($arg),*),
            _ => $run::<$backend, 4>($($arg),*),
        }
    };
}

/// Runs `case` on `cases` random problems in `dtype`, each under its execution policy;
/// returns the problems where `case` found Burn differing from float64.
fn run_problems(
    cases: u32,
    dtype: DType,
    case: impl Fn(&Problem) -> Result<bool, TestCaseError>,
) -> Vec<Problem> {
    let burn_wrong = std::cell::RefCell::new(Vec::new());
    let start = std::time::Instant::now();
    runner(cases)
        .run(&problem(policies(dtype)), |p| {
            let _policy = ConfigGuard::set(|c| c.execution = p.policy);
            let wrong = case(&p)?;
            // Progress, so that a run stopped by a time limit shows how far it got.
            eprintln!("{dtype:?} case done at {:.0?}: {p:?}", start.elapsed());
            if wrong {
                burn_wrong.borrow_mut().push(p);
            }
            Ok(())
        })
        .unwrap();
    burn_wrong.into_inner()
}

/// Under a forced execution, `pattern` must have run on Hypatia's side since `before` (its
/// steps on every path); under `Auto` that is the device's choice (see the module docs).
fn ran_fused(p: &Problem, pattern: FusedPattern, before: u64) -> Result<(), TestCaseError> {
    if steps(pattern) > before {
        return Ok(());
    }
    let stats = hypatia::stats(&device());
    let why = format!(
        "{pattern} did not run on Hypatia's side under {:?}: {p:?}; {:?}; declined: {:?}",
        p.policy,
        stats.patterns.get(pattern),
        stats.declined,
    );
    if p.policy != ExecutionPolicy::Auto {
        return Err(TestCaseError::fail(why));
    }
    // Said, so that a device's choices show in the log.
    eprintln!("{why}");
    Ok(())
}

/// `P` and `H` with float type `F`: Hypatia's forward equals the float64 reference (or Burn,
/// where Burn itself differs), and under a forced execution each case, with a bias or without,
/// ran as Hypatia's Linear+ReLU. Returns the cases where Burn differed from the reference.
pub fn check_forward<F, P, H>(cases: u32) -> Vec<Problem>
where
    F: Element,
    P: Backend<FloatElem = F>,
    H: Backend<FloatElem = F, Device = P::Device>,
{
    check_forward_of::<F, P, H>(cases, Forward::LinearRelu)
}

/// [`check_forward`] of `which` forward: under a forced execution each case ran as its
/// pattern's step.
pub fn check_forward_of<F, P, H>(cases: u32, which: Forward) -> Vec<Problem>
where
    F: Element,
    P: Backend<FloatElem = F>,
    H: Backend<FloatElem = F, Device = P::Device>,
{
    let (dtype, s) = (F::dtype(), scale::<F>());
    run_problems(cases, dtype, |p| {
        let before = steps(which.pattern());
        let fused = at_rank!(p, forward::<H>(p, s, which));
        let plain = at_rank!(p, forward::<P>(p, s, which));
        ran_fused(p, which.pattern(), before)?;
        let reference = p.forward_reference(s, dtype, which);
        let tol = reference_tolerance(dtype, false, p.policy);
        judge(
            "output",
            &fused,
            &plain,
            &reference,
            tol,
            burn_tolerance(dtype),
        )
    })
}

/// Gradients through `Autodiff<H>` equal the float64 reference (or Burn's, where Burn itself
/// differs), and under a forced execution relu's gradient ran fused. Returns the cases where
/// Burn differed.
pub fn check_backward<F, P, H>(cases: u32) -> Vec<Problem>
where
    F: Element,
    P: Differentiable + Backend<FloatElem = F>,
    H: Differentiable + Backend<FloatElem = F, Device = P::Device>,
{
    check_backward_of::<F, P, H>(cases, Act::Relu, false)
}

/// [`check_backward`] through `act`, and with `dropout` through Burn's dropout after it (a
/// seeded mask): under a forced execution its gradient ran fused.
pub fn check_backward_of<F, P, H>(cases: u32, act: Act, dropout: bool) -> Vec<Problem>
where
    F: Element,
    P: Differentiable + Backend<FloatElem = F>,
    H: Differentiable + Backend<FloatElem = F, Device = P::Device>,
{
    let (dtype, s) = (F::dtype(), scale::<F>());
    run_problems(cases, dtype, |p| {
        let before = steps(act.grad_pattern());
        let fused = at_rank!(p, backward::<Autodiff<H>>(p, s, act, dropout));
        let plain = at_rank!(p, backward::<Autodiff<P>>(p, s, act, dropout));
        ran_fused(p, act.grad_pattern(), before)?;
        let reference = p.backward_reference(s, dtype, act, dropout);
        let tol = reference_tolerance(dtype, true, p.policy);
        let mut wrong = false;
        for ((name, f), (b, r)) in ["dx", "dw", "db"]
            .iter()
            .zip(&fused)
            .zip(plain.iter().zip(&reference))
        {
            wrong |= judge(name, f, b, r, tol, 2.0 * burn_tolerance(dtype))?;
        }
        Ok(wrong)
    })
}
