//! One training step of each user model, forward and backward, on `Autodiff<Hypatia<B>>`, on
//! `Autodiff<B>` and on Burn's `NdArray<f64>` (the float64 reference) from the same parameters
//! and batch: the loss, the logits and every parameter's gradient on Hypatia are no further
//! from float64 than twice Burn's own distance (so where Burn is exact, Hypatia is exact; where
//! Burn rounds, as its tensor-core f32 kernels do on CUDA, Hypatia rounds no worse), or than
//! a floor of f32's rounding through a model. Dropout is off: its masks come from each
//! backend's own generator, which float64 on the CPU cannot repeat.

use super::*;
use burn::module::ModuleMapper;

/// Burn's float64 reference.
type Float64 = Autodiff<burn::backend::NdArray<f64>>;

/// Below this relative distance from float64 a tensor counts as exact in f32: a model's
/// rounding through its layers, on lavapipe 1e-7 to 1e-6.
const FLOOR: f64 = 1e-5;

/// Sets every float parameter, in visiting order, to the next of the values given.
struct Load<'a>(std::slice::Iter<'a, TensorData>);

impl<B: Backend> ModuleMapper<B> for Load<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let data = self.0.next().expect("as many values as parameters").clone();
        let loaded = Tensor::from_data(data, &tensor.device()).require_grad();
        Param::from_mapped_value(id, loaded, mapper)
    }
}

/// Every float parameter's gradient, in visiting order (`None` where it has none).
struct Gradients<'a, B: AutodiffBackend>(&'a B::Gradients, Vec<Option<TensorData>>);

impl<B: AutodiffBackend> ModuleVisitor<B> for Gradients<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let grad = param.val().grad(self.0).map(|g| g.into_data());
        self.1.push(grad);
    }
}

/// Step 0 of a model on `B`, from `params`: the loss, the logits, then every parameter's
/// gradient.
fn step<B: AutodiffBackend, M: AutodiffModule<B>>(
    init: fn(&B::Device) -> M,
    params: &[TensorData],
    batch: Batch<M, B>,
) -> Vec<Option<TensorData>> {
    let device = Default::default();
    let model = init(&device).map(&mut Load(params.iter()));
    let (logits, labels) = batch(&model, 0);
    let loss = CrossEntropyLossConfig::new()
        .init(&device)
        .forward(logits.clone(), labels);
    let grads = loss.backward();
    let mut gradients = Gradients::<B>(&grads, Vec::new());
    model.visit(&mut gradients);
    [Some(loss.into_data()), Some(logits.into_data())]
        .into_iter()
        .chain(gradients.1)
        .collect()
}

fn values(data: &TensorData) -> Vec<f64> {
    data.clone().convert::<f64>().to_vec().unwrap()
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Whether Hypatia's tensors are within twice Burn's distance from float64, or the floor
/// (`Err` names each one that is not). A distance is relative to the reference's norm, but at
/// least a thousandth of its largest gradient's: a gradient that is zero in exact arithmetic
/// (an attention key's bias) is rounding on every backend.
fn as_close(
    name: &str,
    fused: &[Option<TensorData>],
    plain: &[Option<TensorData>],
    reference: &[Option<TensorData>],
) -> Result<(), String> {
    assert_eq!(fused.len(), reference.len(), "{name}: parameters");
    assert_eq!(plain.len(), reference.len(), "{name}: parameters");
    let largest = (reference.iter().flatten())
        .map(|r| norm(&values(r)))
        .fold(0.0, f64::max);
    let (mut worst_fused, mut worst_plain) = (0.0f64, 0.0f64);
    let mut failures = Vec::new();
    for (i, ((f, p), r)) in fused.iter().zip(plain).zip(reference).enumerate() {
        let what = match i {
            0 => "the loss".to_string(),
            1 => "the logits".to_string(),
            i => format!("parameter {}'s gradient", i - 2),
        };
        let (f, p, r) = match (f, p, r) {
            (Some(f), Some(p), Some(r)) => (f, p, r),
            (None, None, None) => continue,
            _ => panic!("{name}: {what} exists on some backends only"),
        };
        let r = values(r);
        let scale = norm(&r).max(1e-3 * largest).max(f64::MIN_POSITIVE);
        let distance = |x: &TensorData| {
            let x = values(x);
            assert_eq!(x.len(), r.len(), "{name}: {what}'s shape");
            let diff: Vec<f64> = x.iter().zip(&r).map(|(a, b)| a - b).collect();
            norm(&diff) / scale
        };
        let (df, dp) = (distance(f), distance(p));
        // Every tensor is measured before any fails: which ones part from float64 says where.
        if df.is_nan() || df > 2.0 * dp + FLOOR {
            failures.push(format!(
                "{what} is {df:.1e} from float64 on Hypatia, {dp:.1e} on Burn"
            ));
        }
        worst_fused = worst_fused.max(df);
        worst_plain = worst_plain.max(dp);
    }
    eprintln!(
        "{name}, one step from float64 (worst tensor): Hypatia {worst_fused:.1e}, Burn \
         {worst_plain:.1e}"
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}", failures.join("; ")))
    }
}

/// The parameters a model starts from: Burn's, seeded, as in `fit`.
fn initial<M: Module<PlainOf<f32>>>(seed: u64, init: fn(&TestDevice) -> M) -> Vec<TensorData> {
    let device = device();
    PlainOf::<f32>::seed(&device, seed);
    let mut params = Params(Vec::new());
    init(&device).visit(&mut params);
    params.0
}

/// One model's step on the three backends, compared.
macro_rules! step_as_close {
    ($name:literal, $seed:literal, $init:ident, $batch:ident) => {{
        let params = initial($seed, $init::<PlainOf<f32>>);
        let before = fused_steps();
        let fused = step($init::<Autodiff<FusedOf<f32>>>, &params, $batch);
        assert!(fused_steps() > before, "{}: Hypatia fused no step", $name);
        let plain = step($init::<Autodiff<PlainOf<f32>>>, &params, $batch);
        let reference = step($init::<Float64>, &params, $batch);
        as_close($name, &fused, &plain, &reference)
    }};
}

fn guide<B: Backend>(device: &B::Device) -> Guide<B> {
    Guide::new(64, 10, 0.0, device)
}

fn bert<B: Backend>(device: &B::Device) -> Encoder<B> {
    Encoder::new(SEQ, 4, 0.0, device)
}

fn silu_mlp<B: Backend>(device: &B::Device) -> SiluMlp<B> {
    SiluMlp::new(device)
}

fn llama<B: Backend>(device: &B::Device) -> Llama<B> {
    Llama::new(device)
}

/// Burn's guide model, the BERT-style encoder, the SiLU classifier and the Llama-style layer
/// (dropout off), one f32 step each: Hypatia as close to float64 as Burn. Every model runs
/// before any fails.
pub fn steps_as_close_to_float64_as_burns() {
    let failures: Vec<String> = [
        step_as_close!("guide", 7, guide, guide_batch),
        step_as_close!("bert", 11, bert, encoder_batch),
        step_as_close!("silu-mlp", 17, silu_mlp, silu_mlp_batch),
        step_as_close!("llama", 13, llama, llama_batch),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
