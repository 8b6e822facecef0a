//! [`CostModel`]: what extraction minimises.
//!
//! A first model in kernel launches: every op Burn runs unfused is one launch and one pass
//! over its tensors; a matmul weighs two (it reads operands more than once); views are almost
//! free. A fused node with an epilogue costs a matmul plus the epilogue, so it is never cheaper
//! than the matmul it replaces but cheaper than matmul + bias + activation (or + mask) run
//! apart; a plain fused matmul costs slightly less than Burn's. Size-aware
//! decisions (shapes too small to pay) are made at run time, where sizes are known.

use super::{Profile, TensorGraph, TensorLang};
use crate::kernel::MAX_CHAIN_ROWS;
use burn_backend::DType;
use egg::{CostFunction, Id, Language};

/// Cost of one unfused elementwise launch (one read and one write pass).
pub const LAUNCH: f64 = 10.0;
/// Cost of a matmul launch.
pub const MATMUL: f64 = 2.0 * LAUNCH;
/// Cost of a metadata-only op (reshape, swap_dims).
pub const VIEW: f64 = 1.0;
/// Extra cost of applying an epilogue in registers before the store.
pub const EPILOGUE: f64 = 1.0;
/// What a layer saves by joining its input's launch (one launch, and the hidden activation's
/// round trip through global memory). Whether the chain kernel runs for the real sizes is
/// decided at run time (see `execute::choose_chain`); a chain that does not runs layer by layer.
pub const CHAINED: f64 = LAUNCH / 2.0;

/// The launch-count cost function used by extraction.
#[derive(Clone, Copy, Debug, Default)]
pub struct CostModel;

impl CostModel {
    /// Cost of `node` alone, without its children.
    pub fn node_cost(node: &TensorLang) -> f64 {
        match node {
            TensorLang::Tensor(_)
            | TensorLang::Shape(_)
            | TensorLang::Scalar(_)
            | TensorLang::Dims(_) => 0.0,
            TensorLang::Reshape(_) | TensorLang::SwapDims(_) => VIEW,
            TensorLang::Matmul(_) => MATMUL,
            TensorLang::Linear(_) => MATMUL + LAUNCH,
            // Hypatia's engine for the matmul alone: never worse than Burn's (it is one of its
            // candidates), so extraction takes it wherever nothing larger covers the matmul.
            TensorLang::FusedMatmul(_) => MATMUL - EPILOGUE,
            // Every other fused node: the matmul and an epilogue in registers.
            TensorLang::FusedLinearRelu(_)
            | TensorLang::FusedMatmulReluGrad(_)
            | TensorLang::FusedMatmulGeluGrad(_)
            | TensorLang::FusedMatmulReluGradDropout(_)
            | TensorLang::FusedMatmulGeluGradDropout(_)
            | TensorLang::FusedMatmulSiluGrad(_)
            | TensorLang::FusedMatmulGeluTanhGrad(_)
            | TensorLang::FusedMatmulLeakyReluGrad(_)
            | TensorLang::FusedMatmulSwigluGrad(_)
            | TensorLang::FusedLinear(_)
            | TensorLang::FusedLinearGelu(_)
            | TensorLang::FusedLinearGeluTanh(_)
            | TensorLang::FusedLinearSilu(_)
            | TensorLang::FusedLinearLeakyRelu(_)
            | TensorLang::FusedLinearClamp(_) => MATMUL + EPILOGUE,
            // Two matmuls of one input and the epilogue (x · u stays a matmul of its own where
            // a kernel has no second operand: decision record 0031).
            TensorLang::FusedLinearSwiglu(_) => 2.0 * MATMUL + EPILOGUE,
            TensorLang::ChainLinearRelu(_) | TensorLang::ChainLinear(_) => {
                MATMUL + EPILOGUE - CHAINED
            }
            TensorLang::ElemOf(_) | TensorLang::NoBias(_) => 0.0,
            TensorLang::Add(_)
            | TensorLang::LowerEqualElem(_)
            | TensorLang::LowerElem(_)
            | TensorLang::Lower(_)
            | TensorLang::MaskFill(_)
            | TensorLang::MaskWhere(_)
            | TensorLang::Zeros(_)
            | TensorLang::Full(_)
            | TensorLang::Relu(_)
            | TensorLang::Mul(_)
            | TensorLang::MulScalar(_)
            | TensorLang::DivScalar(_)
            | TensorLang::AddScalar(_)
            | TensorLang::PowfScalar(_)
            | TensorLang::Erf(_)
            | TensorLang::Tanh(_)
            | TensorLang::Exp(_)
            | TensorLang::Log(_)
            | TensorLang::Cast(_)
            | TensorLang::Clamp(_) => LAUNCH,
            // An activation run as Burn's ops: Burn's elementwise fusion makes it one launch.
            TensorLang::Gelu(_)
            | TensorLang::GeluTanh(_)
            | TensorLang::Silu(_)
            | TensorLang::LeakyRelu(_)
            | TensorLang::GeluGrad(_)
            | TensorLang::Sigmoid(_) => LAUNCH,
        }
    }
}

impl CostFunction<TensorLang> for CostModel {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TensorLang, mut costs: C) -> Self::Cost
    where
        C: FnMut(Id) -> Self::Cost,
    {
        enode.fold(Self::node_cost(enode), |sum, id| sum + costs(id))
    }
}

/// Extraction by predicted time (µs) on a device [`Profile`], for e-graphs whose leaves carry
/// real sizes (the rewrite API, tools; a captured window has relative dims, and there the same
/// profile decides at run time, see `execute::choose_chain`).
///
/// A fused node costs one layer launch ([`Profile::layer_time`]); a `chain-*` node costs what
/// its layer adds to the chain's launch (every cube streams the layer's weights and computes
/// its rows; on the grid-wide kernel, the layer's waves of work items) plus half of what a chain launch costs over a layer launch (a three-layer chain
/// has two chained nodes). Narrow layers therefore extract as chains and wide ones layer by
/// layer:
///
/// ```
/// use hypatia::rewrite::Profile;
/// use hypatia::rewrite::{Limits, SizedCost, TensorGraph, saturate};
/// let mlp = |m: usize, k: usize, n: usize| {
///     let x = format!("t1:bf16:{m}x{k}");
///     let layer1 = format!("(relu (add (matmul {x} t2:bf16:{k}x{n}) t3:bf16:{n}))");
///     format!("(relu (add (matmul {layer1} t4:bf16:{n}x{n}) t5:bf16:{n}))")
/// };
/// let best = |expr: String, profile: Profile| {
///     let mut egraph = TensorGraph::default();
///     let root = egraph.add_expr(&expr.parse().unwrap());
///     let saturated = saturate(egraph, &Limits::default());
///     let cost = SizedCost::new(&saturated.egraph, profile);
///     egg::Extractor::new(&saturated.egraph, cost).find_best(root).1.to_string()
/// };
/// // The H100 with the portable chain kernel (one cube per block of rows, one SM streaming
/// // every weight): narrow layers chain, 784→512 and 4096³ run one launch per layer.
/// let portable = || Profile { grid: None, ..Profile::hopper() };
/// assert!(best(mlp(1, 64, 64), portable()).starts_with("(chain-linear-relu"));
/// assert!(best(mlp(1, 784, 512), portable()).starts_with("(fused-linear-relu"));
/// assert!(best(mlp(4096, 4096, 4096), portable()).starts_with("(fused-linear-relu"));
/// // With CUDA's grid-wide chain kernel, which spreads each layer over every SM, 784→512
/// // chains too; 4096³ still does not.
/// assert!(best(mlp(1, 784, 512), Profile::hopper()).starts_with("(chain-linear-relu"));
/// assert!(best(mlp(4096, 4096, 4096), Profile::hopper()).starts_with("(fused-linear-relu"));
/// ```
pub struct SizedCost<'a> {
    egraph: &'a TensorGraph,
    profile: Profile,
}

impl<'a> SizedCost<'a> {
    /// Costs on `profile` for the sizes of `egraph`'s leaves.
    pub fn new(egraph: &'a TensorGraph, profile: Profile) -> Self {
        Self { egraph, profile }
    }

    fn shape(&self, id: Id) -> Option<(Vec<usize>, DType)> {
        let info = self.egraph[id].data.as_ref()?;
        let dtype = match info.elem {
            super::Elem::F16 => DType::F16,
            super::Elem::BF16 => DType::BF16,
            super::Elem::F64 => DType::F64,
            _ => DType::F32,
        };
        Some((info.shape.iter().map(|&d| d.max(1)).collect(), dtype))
    }

    /// `(m, k, n, dtype)` of a matmul-like node over `x` and `w`.
    fn mkn(&self, x: Id, w: Id) -> Option<(usize, usize, usize, DType)> {
        let ((x, dtype), (w, _)) = (self.shape(x)?, self.shape(w)?);
        let [m, k, n] = Profile::matmul_dims(&x, &w)?;
        Some((m, k, n, dtype))
    }

    /// Predicted µs of `node` alone.
    pub fn node_time(&self, node: &TensorLang) -> f64 {
        let p = &self.profile;
        let children = node.children();
        if node.is_chained() {
            let Some((m, k, n, dtype)) = self.mkn(children[0], children[1]) else {
                return f64::INFINITY;
            };
            // A chained layer costs its share of the chain's launch beyond a step's, plus its
            // stream (grid-wide kernel where the profile has one, else one cube per row block).
            if let (Some(grid), Some(layer)) = (p.grid, p.grid_layer_time(m, n, dtype)) {
                return layer + (grid.launch_us - p.step_us).max(0.0) / 2.0;
            }
            let rows = m.next_power_of_two().min(MAX_CHAIN_ROWS);
            let extra_launch = (p.chain_launch_us - p.step_us).max(0.0) / 2.0;
            return p.chain_layer_time(m, rows, k, n, dtype) + extra_launch;
        }
        if node.fused().is_some() || matches!(node, TensorLang::Matmul(_) | TensorLang::Linear(_)) {
            let Some((m, k, n, dtype)) = self.mkn(children[0], children[1]) else {
                return f64::INFINITY;
            };
            let epilogue = match node {
                TensorLang::Linear(_) => p.step_us,
                _ => 0.0,
            };
            return p.layer_time(m, k, n, dtype) + epilogue;
        }
        let launches = CostModel::node_cost(node);
        if launches == 0.0 {
            0.0
        } else if launches <= VIEW {
            0.1
        } else {
            // An op run as Burn's: one launch (and a pass over its output).
            p.step_us
        }
    }
}

impl CostFunction<TensorLang> for SizedCost<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TensorLang, mut costs: C) -> Self::Cost
    where
        C: FnMut(Id) -> Self::Cost,
    {
        let own = self.node_time(enode);
        enode.fold(own, |sum, id| sum + costs(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egg::RecExpr;

    fn cost(expr: &str) -> f64 {
        let expr: RecExpr<TensorLang> = expr.parse().unwrap();
        CostModel.cost_rec(&expr)
    }

    #[test]
    fn fused_linear_relu_is_cheaper_than_its_parts() {
        let parts = cost(
            "(mask-fill (add (matmul t1:f32:1x2 t2:f32:2x3) t3:f32:0x3) (le (add (matmul t1:f32:1x2 t2:f32:2x3) t3:f32:0x3) scalar:0) scalar:1)",
        );
        let fused = cost("(fused-linear-relu t1:f32:1x2 t2:f32:2x3 t3:f32:0x3)");
        // Tree cost counts the shared add twice: 2 * (20 + 10) + 10 + 10 = 80.
        assert_eq!(parts, 80.0);
        assert_eq!(fused, 21.0);
    }

    #[test]
    fn gated_matmul_is_cheaper_than_plain_matmul_and_mask() {
        let parts = cost(
            "(mask-fill (fused-matmul t1:f32:1x2 t2:f32:2x3) (le t4:f32:1x3 scalar:0) scalar:1)",
        );
        let fused = cost("(fused-matmul-relu-grad t1:f32:1x2 t2:f32:2x3 t4:f32:1x3)");
        assert!(fused < parts, "{fused} >= {parts}");
    }

    #[test]
    fn a_chained_layer_is_cheaper_than_the_same_layer_alone() {
        let alone = cost(
            "(fused-linear-relu (fused-linear-relu t1:f32:1x2 t2:f32:2x3 t3:f32:3) t4:f32:3x4 t5:f32:4)",
        );
        let chained = cost(
            "(chain-linear-relu (fused-linear-relu t1:f32:1x2 t2:f32:2x3 t3:f32:3) t4:f32:3x4 t5:f32:4)",
        );
        assert!(chained < alone, "{chained} >= {alone}");
    }

    #[test]
    fn fused_linear_relu_never_costs_less_than_its_matmul() {
        let matmul = cost("(matmul t1:f32:1x2 t2:f32:2x3)");
        let fused = cost("(fused-linear-relu t1:f32:1x2 t2:f32:2x3 t3:f32:3)");
        assert!(fused > matmul, "{fused} <= {matmul}");
    }
}
