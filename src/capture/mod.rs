//! Capture: the ops a fuser has seen, as plain data.
//!
//! Input: burn-fusion's *relative* `OperationIr`s, in the order the block fed them. Output: a
//! [`Window`] of [`CapturedOp`]s, each classified into the few [`OpKind`]s Hypatia reasons about
//! or [`OpKind::Opaque`]. Relative means ids, dims and scalars are placeholders: equal dims share an
//! id (`0` always stands for size 1) and a scalar is only an id into the context. So nothing here
//! may depend on real sizes or scalar values; the plan records what must be checked at run time.

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
mod window;

pub use window::*;
