//! Property tests of the MLP-chain kernel: random three-layer MLPs (`nn::Linear` + ReLU twice,
//! then a `nn::Linear`) of 1 to 64 rows, forced into chain launches (`ChainPolicy::Always`),
//! against Burn's forward and a float64 reference.
//!
//! A problem draws the rows (1..=64, the grid kernel's FMA and tensor-core items both), the
//! widths (the tile edges of `properties::EDGES` and 1..=300), a rank of 2 or 3, bias or none,
//! and NaN/±Inf in the input. Where the chain kernel takes the hidden layers
//! (`kernel::check_chain` with the device's limits), at least one chain launch must run.

use super::common::*;
use super::model::Mlp;
use super::properties::{judge, reference_tolerance, round_to, runner, values};
use burn::prelude::*;
use burn::tensor::{DType, Element};
use hypatia::config::{ChainPolicy, ExecutionPolicy};
use hypatia::kernel::Epilogue;
use hypatia::kernel::{ChainLimits, check_chain};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// One random chained-MLP problem.
#[derive(Clone, Debug)]
pub struct ChainCase {
    /// x's leading dims: `[m]` or `[a, b]` with `a · b` rows.
    pub lead: Vec<usize>,
    /// Input, two hidden and output widths.
    pub sizes: [usize; 4],
    pub bias: bool,
    pub seed: u64,
    /// Special values in x (NaN, ±Inf, ±0.0, subnormals).
    pub specials: usize,
}

impl ChainCase {
    fn rows(&self) -> usize {
        self.lead.iter().product()
    }
}

fn width() -> impl Strategy<Value = usize> {
    super::properties::dim()
}

pub fn chain_case() -> impl Strategy<Value = ChainCase> {
    let lead = prop_oneof![
        3 => (1..=64usize).prop_map(|m| vec![m]),
        1 => (1..=8usize, 1..=8usize).prop_map(|(a, b)| vec![a, b]),
    ];
    (
        lead,
        [width(), width(), width(), width()],
        any::<bool>(),
        any::<u64>(),
        0..4usize,
    )
        .prop_map(|(lead, sizes, bias, seed, specials)| ChainCase {
            lead,
            sizes,
            bias,
            seed,
            specials,
        })
}

/// The MLP's input, rounded to `dtype`.
fn input(case: &ChainCase, dtype: DType) -> Vec<f32> {
    let len = case.rows() * case.sizes[0];
    round_to(values(case.seed, len, 1.0, case.specials), dtype)
}

fn forward<B: Backend, const D: usize>(case: &ChainCase, x: &[f32]) -> TensorData {
    let device = B::Device::default();
    let dtype = B::FloatElem::dtype();
    let model = Mlp::<B>::new(case.sizes, case.bias, &device);
    let mut shape = [0; D];
    shape[..D - 1].copy_from_slice(&case.lead);
    shape[D - 1] = case.sizes[0];
    let x = TensorData::new(x.to_vec(), shape).convert_dtype(dtype);
    model
        .forward(Tensor::<B, D>::from_data(x, &device))
        .into_data()
}

/// The forward in float64 from the model's own parameters (read back from `model`, so rounded
/// as the device holds them), Burn's relu (NaN stays NaN).
fn reference<B: Backend>(case: &ChainCase, x: &[f32]) -> Vec<f32> {
    let model = Mlp::<B>::new(case.sizes, case.bias, &B::Device::default());
    let read = |t: Tensor<B, 2>| -> Vec<f64> {
        let v = t.into_data().convert::<f32>().to_vec::<f32>().unwrap();
        v.into_iter().map(f64::from).collect()
    };
    let mut h: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for (i, layer) in model.layers().into_iter().enumerate() {
        let (k, n) = (case.sizes[i], case.sizes[i + 1]);
        let w = read(layer.weight.val());
        let b = match &layer.bias {
            Some(b) => read(b.val().unsqueeze()),
            None => vec![0.0; n],
        };
        let hidden = i < 2;
        h = (h.chunks(k))
            .flat_map(|row| {
                (0..n).map(|j| {
                    let y = b[j] + (0..k).map(|l| row[l] * w[l * n + j]).sum::<f64>();
                    if hidden && y <= 0.0 { 0.0 } else { y }
                })
            })
            .collect();
    }
    h.into_iter().map(|v| v as f32).collect()
}

/// Whether the chain kernel takes the two hidden layers of `case` on the test device.
fn takes(case: &ChainCase, dtype: DType) -> bool {
    let client = <Runtime as cubecl::Runtime>::client(&device());
    let [k, h1, h2, _] = case.sizes;
    let mut shape = case.lead.clone();
    shape.push(k);
    let strides: Vec<usize> = (0..shape.len())
        .map(|i| shape[i + 1..].iter().product())
        .collect();
    let (w1, w2, b1, b2) = ([k, h1], [h1, h2], [h1], [h2]);
    let layers = [
        (&w1[..], case.bias.then_some(&b1[..]), dtype, Epilogue::Relu),
        (&w2[..], case.bias.then_some(&b2[..]), dtype, Epilogue::Relu),
    ];
    check_chain((&shape, &strides, dtype), &layers, ChainLimits::of(&client)).is_ok()
}

/// `cases` random chained MLPs in `F`: Hypatia's forward equals float64 (or Burn's, where Burn
/// differs), with at least one chain launch wherever the kernel takes the hidden layers.
/// Returns the cases where Burn differed from float64.
pub fn check_chains<F, P, H>(cases: u32) -> Vec<ChainCase>
where
    F: Element,
    P: Backend<FloatElem = F>,
    H: Backend<FloatElem = F, Device = P::Device>,
{
    let dtype = F::dtype();
    let _chain = ConfigGuard::set(|c| c.chain = ChainPolicy::Always);
    let burn_wrong = std::cell::RefCell::new(Vec::new());
    runner(cases)
        .run(&chain_case(), |case| {
            let x = input(&case, dtype);
            poison::<H>(1 << 16, &Default::default());
            let before = chain_launches();
            let (fused, plain) = match case.lead.len() {
                1 => (forward::<H, 2>(&case, &x), forward::<P, 2>(&case, &x)),
                _ => (forward::<H, 3>(&case, &x), forward::<P, 3>(&case, &x)),
            };
            let launches = chain_launches() - before;
            if takes(&case, dtype) && launches == 0 {
                return Err(TestCaseError::fail(format!(
                    "no chain launch for {case:?}: {:?}",
                    hypatia::stats(&device())
                )));
            }
            let reference = reference::<P>(&case, &x);
            // Three matmuls deep: the gradient bound, which covers two.
            let tol = reference_tolerance(dtype, true, ExecutionPolicy::Auto);
            let burn_tol = 2.0 * super::check::burn_tolerance(dtype);
            if judge("output", &fused, &plain, &reference, tol, burn_tol)? {
                burn_wrong.borrow_mut().push(case);
            }
            Ok(())
        })
        .unwrap();
    burn_wrong.into_inner()
}
