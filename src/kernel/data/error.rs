//! [`KernelError`]: why a fused kernel was not launched.

use burn_backend::DType;

/// A reason the fused kernel cannot run on some inputs; nothing was launched.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// The kernel runs f32, f16 and bf16 with one element type for every operand.
    #[error("unsupported element types: lhs {lhs:?}, rhs {rhs:?}, bias {bias:?}")]
    UnsupportedDtype {
        /// Left operand type.
        lhs: DType,
        /// Right operand type.
        rhs: DType,
        /// Bias type, if any.
        bias: Option<DType>,
    },
    /// Shapes that a matmul with a row bias does not accept.
    #[error("incompatible shapes: lhs {lhs:?}, rhs {rhs:?}, bias {bias:?}")]
    IncompatibleShapes {
        /// Left operand shape.
        lhs: Vec<usize>,
        /// Right operand shape.
        rhs: Vec<usize>,
        /// Bias shape, if any.
        bias: Option<Vec<usize>>,
    },
    /// More cubes in one grid dimension than a launch allows.
    #[error("grid too large: {cubes} cubes along one axis (limit {limit})")]
    GridTooLarge {
        /// Cubes needed.
        cubes: usize,
        /// The limit.
        limit: usize,
    },
    /// A relu-backward gate that is not a contiguous tensor of the output's shape and type.
    #[error(
        "unsupported gate: shape {shape:?} for an output of {out:?}, or strided, or another type"
    )]
    UnsupportedGate {
        /// The gate's shape.
        shape: Vec<usize>,
        /// The output's shape.
        out: Vec<usize>,
    },
    /// A chain the MLP-chain kernel does not take (too many rows, layers too wide, an
    /// activation it has no epilogue for); its layers run one launch each.
    #[error("outside the MLP-chain kernel's bounds: {0}")]
    OutsideChainBounds(String),
    /// The output would be empty; Burn's own path handles zero-sized tensors.
    #[error("empty problem: m={m}, n={n}, batch={batch}")]
    Empty {
        /// Rows.
        m: usize,
        /// Columns.
        n: usize,
        /// Batch count.
        batch: usize,
    },
}

impl KernelError {
    /// A short stable name, used as a key in [`FusionStats`](crate::FusionStats).
    pub fn key(&self) -> &'static str {
        match self {
            KernelError::UnsupportedDtype { .. } => "unsupported-dtype",
            KernelError::IncompatibleShapes { .. } => "incompatible-shapes",
            KernelError::GridTooLarge { .. } => "grid-too-large",
            KernelError::UnsupportedGate { .. } => "unsupported-gate",
            KernelError::Empty { .. } => "empty",
            KernelError::OutsideChainBounds(_) => "outside-chain-bounds",
        }
    }
}
