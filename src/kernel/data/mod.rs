//! What the kernels take and give, as plain data: the epilogue, a Linear's problem, operands
//! and outputs, the engine's launch arguments, an MLP chain's problem, errors. Nothing here
//! launches or names a kernel, so the rewrite and plan stages read it without depending on any
//! kernel, and the kernels share it without depending on each other.

mod chain_problem;
mod epilogue;
mod error;
mod linear_args;
mod operand;
mod problem;

pub use chain_problem::*;
pub use epilogue::*;
pub use error::*;
pub use linear_args::*;
pub use operand::*;
pub use problem::*;
