//! The tiled kernel: a CubeCL matmul on plain units whose epilogue adds the bias and applies
//! the activation, and the split execution's bias + activation pass over Burn's matmul.

#[allow(missing_docs)] // #[cube] generates an undocumented expand module.
mod bias_activation;
#[allow(missing_docs)]
mod cubecl_line;
mod launch;
#[allow(missing_docs)]
mod matmul;

pub use bias_activation::bias_activation_kernel;
pub use cubecl_line::*;
pub use launch::*;
pub use matmul::*;
