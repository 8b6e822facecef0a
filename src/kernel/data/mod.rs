//! What the kernels take and give, as plain data: the epilogue, a Linear's problem, operands
//! and outputs, an MLP chain's problem, errors. Nothing here launches or names a kernel, so the
//! rewrite and plan stages read it without depending on any kernel.

mod chain;
mod epilogue;
mod error;
mod operand;
mod problem;

pub use chain::*;
pub use epilogue::*;
pub use error::*;
pub use operand::*;
pub use problem::*;
