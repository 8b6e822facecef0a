//! Kernel: what a fused step launches, one folder per kernel.
//!
//! - `data` (its items re-exported here): what every kernel takes and gives, as plain data:
//!   [`Epilogue`], [`LinearProblem`] and [`check_linear`], [`Operand`]s and [`LinearOutputs`],
//!   an MLP chain's [`ChainProblem`] and [`check_chain`], [`KernelError`]. It imports no
//!   kernel, so the rewrite and plan stages depend on it alone.
//! - [`tiled`]: the CubeCL tiled matmul with the bias + activation epilogue in registers, the
//!   path of every device without matrix units, and the split execution's epilogue pass.
//! - [`engine`]: the tensor-core engine, the one place that knows every candidate (Burn's
//!   matmul, cubek-matmul tilings, the tiled kernel, the Hopper kernel) and autotunes them.
//! - `hopper` (with the `cuda` feature): the `wgmma` kernel, CUDA C++.
//! - [`chain`]: the MLP chain, a run of layers in one launch (a CubeCL kernel, and on CUDA the
//!   grid-wide CUDA C++ kernel).
//! - [`row_sum`]: the column sums of a bias gradient.
//! - [`cuda`]: the hand-written kernels' shared header, the one generator of their source, and
//!   their launch through CubeCL.
//!
//! Input: device handles with their real shapes and strides (any layout: transposed and
//! broadcast operands are read through strides). Output: freshly allocated contiguous handles,
//! or a [`KernelError`] *before* anything is launched, so the caller can fall back cleanly.
//! Pitfall: the activation must keep NaN (`x <= 0 ? 0 : x`, never `max(x, 0)`), like Burn's relu.

#[allow(missing_docs)] // #[cube] generates an undocumented expand module.
pub mod chain;
#[allow(missing_docs)]
mod cube_epilogue;
pub mod cuda;
mod data;
pub mod engine;
#[cfg(feature = "cuda")]
pub mod hopper;
#[allow(missing_docs)]
pub mod row_sum;
pub mod tiled;

pub use cube_epilogue::{activate, gate_grad, relu_keep_nan, store_epilogue};
pub use data::*;
pub use row_sum::{sum_output_rows, sum_rows};
pub use tiled::{
    bias_activation_kernel, launch_bias_activation, launch_bias_activation_into,
    launch_fused_linear, launch_fused_linear_into,
};
