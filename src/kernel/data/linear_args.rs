//! What the tensor-core engine's candidates (and the Hopper kernel among them) run on: a
//! Linear's operands and outputs as Burn's tensors, and the layout checks they share.

use super::{Epilogue, LinearProblem, Operand};
pub use crate::config::F32Math;
use crate::config::{HypatiaConfig, WeightCopies, WgmmaOffer};
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;

/// Operands and outputs of one Linear on the engine: every candidate writes `out` (and `pre`).
#[derive(Clone, Debug)]
pub struct LinearArgs<R: CubeRuntime> {
    /// Input, padded to the output's rank.
    pub x: CubeTensor<R>,
    /// Weight `[.., k, n]`, padded to the output's rank.
    pub w: CubeTensor<R>,
    /// `w`'s burn-fusion id ([`Operand::id`]), under which a candidate may keep a copy of it in
    /// another layout.
    pub w_id: Option<u64>,
    /// Bias, a row of `n`.
    pub bias: Option<CubeTensor<R>>,
    /// Activation output, contiguous.
    pub out: CubeTensor<R>,
    /// Pre-activation output, contiguous, when asked for.
    pub pre: Option<CubeTensor<R>>,
    /// What the epilogue applies after the bias.
    pub epilogue: Epilogue,
    /// The gate of a backward epilogue ([`Epilogue::gated`]): the output's shape, rows
    /// contiguous or pitched (the Hopper kernel takes only contiguous ones).
    pub gate: Option<CubeTensor<R>>,
    /// Dropout's mask ([`Epilogue::dropout`]) or SiLU's saved sigmoid (tanh GELU's saved
    /// `tanh + 1`), laid out as the gate (the Hopper kernel takes only contiguous ones).
    pub mask: Option<CubeTensor<R>>,
    /// Tanh GELU's saved tanh input ([`Epilogue::has_aux`]), laid out as the gate (the Hopper
    /// kernel takes only contiguous ones).
    pub aux: Option<CubeTensor<R>>,
    /// The activation's run-time parameters (see
    /// [`EpilogueInputs::params`](crate::kernel::EpilogueInputs::params)).
    pub params: [f32; 2],
    /// `Σ_rows out` ([`LinearOutputs::bias_grad`](crate::kernel::LinearOutputs::bias_grad)), contiguous, when asked for.
    pub bias_grad: Option<CubeTensor<R>>,
    /// What the configuration lets the candidates do for this step.
    pub choices: EngineChoices,
}

/// What the configuration lets the engine's candidates do for one step, resolved before the
/// step runs (the engine reads no configuration itself).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineChoices {
    /// How f32 multiplies for this problem ([`HypatiaConfig::f32_math`]): under
    /// [`F32Math::Burn`] only Burn's matmul and the tiled kernel run f32.
    pub f32: F32Math,
    /// Which element types the Hopper `wgmma` kernel is offered ([`HypatiaConfig::wgmma`]).
    pub wgmma: WgmmaOffer,
    /// Device memory for K-major copies of f32 weights read again (decision record 0009).
    pub weight_copies: WeightCopies,
}

impl EngineChoices {
    /// The choices `config` makes for a problem whose f32 multiplies as `f32`.
    pub fn new(config: &HypatiaConfig, f32: F32Math) -> Self {
        Self {
            f32,
            wgmma: config.wgmma,
            weight_copies: config.weight_copies_mib,
        }
    }
}

impl<R: CubeRuntime> LinearArgs<R> {
    /// `tensor` as a kernel operand.
    pub(crate) fn operand(tensor: &CubeTensor<R>) -> Operand<R> {
        Operand {
            handle: tensor.clone().into(),
            shape: tensor.meta.shape().to_vec(),
            id: None,
        }
    }

    /// The Linear's problem: the output's shape and dtype, the inputs' `k`.
    pub fn problem(&self) -> LinearProblem {
        let shape = self.out.meta.shape().to_vec();
        let x = self.x.meta.shape();
        LinearProblem {
            batch: shape[..shape.len() - 2].iter().product(),
            k: x[x.len() - 1],
            out_shape: shape,
            dtype: self.out.dtype,
        }
    }
}

/// Whether `tensor` starts on 16 bytes (TMA's and vector loads' requirement).
pub(crate) fn is_aligned<R: CubeRuntime>(tensor: &CubeTensor<R>) -> bool {
    tensor.handle.offset_start.unwrap_or(0).is_multiple_of(16)
}

/// Whether `strides` are row-major for `shape` (size-1 dims may have any stride).
pub(crate) fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    let mut expected = 1;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected *= dim;
    }
    true
}
