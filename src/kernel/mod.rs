//! Kernel: a CubeCL tiled matmul whose epilogue adds the bias and applies the activation.
//!
//! Input: device handles with their real shapes and strides (any layout: transposed and
//! broadcast operands are read through strides). Output: freshly allocated contiguous handles,
//! or a [`KernelError`] *before* anything is launched, so the caller can fall back cleanly.
//! Pitfall: the activation must keep NaN (`x <= 0 ? 0 : x`, never `max(x, 0)`), like Burn's relu.

#[allow(missing_docs)] // #[cube] generates an undocumented expand module.
pub mod chain;
#[cfg(feature = "cuda")]
mod cuda;
#[allow(missing_docs)]
mod epilogue;
mod error;
#[cfg(feature = "cuda")]
pub mod hopper;
mod launch;
mod policy;
mod profile;
#[allow(missing_docs)]
mod row_sum;
pub mod tensor_core;
#[allow(missing_docs)]
mod tiled;

pub use epilogue::*;
pub use error::*;
pub use launch::*;
pub use policy::*;
pub use profile::*;
pub use row_sum::sum_rows;
