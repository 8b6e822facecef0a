//! The tiled kernel: a CubeCL matmul on plain units whose epilogue adds the bias and applies
//! the activation, and the split execution's bias + activation pass over Burn's matmul.

#[allow(missing_docs)] // #[cube] generates an undocumented expand module.
mod bias_activation;
#[allow(missing_docs)]
mod kernel;
mod launch;

pub use bias_activation::bias_activation_kernel;
pub use kernel::*;
pub use launch::*;
