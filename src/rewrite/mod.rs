//! Rewrite: an e-graph over the captured window, where Linear + activation become fused nodes.
//!
//! Input: a window lowered into [`TensorLang`] ([`lower`]: the rewrite stage reads capture's window, never the other way). Output: the
//! cheapest equivalent term for each candidate root, extracted by [`CostModel`], which predicts from the device's measured [`Profile`]. All rewriting
//! happens in [`saturate`], the only caller of egg's `Runner`, under node, iteration and time
//! limits. Pitfall: e-graph rules see *relative* dims (`0` is size 1) and scalar ids, never
//! values; conditions that need values become run-time guards in the plan.

mod analysis;
mod cost;
#[allow(missing_docs)] // define_language! variants carry no docs; the enum documents them.
mod lang;
mod lower;
mod profile;
mod rules;
mod saturate;

pub use analysis::*;
pub use cost::*;
pub use lang::*;
pub use lower::*;
pub use profile::*;
pub use rules::*;
pub use saturate::*;
