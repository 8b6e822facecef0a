//! Plan: what a claimed block runs, as serialisable data that replays without egg.
//!
//! Input: the window and the rewritten e-graph. Output: a [`Claim`]: either a [`Plan`] (steps
//! in block order, each a fused kernel or one op run as Burn would) or the [`Reason`] it was
//! declined. Invariant: a plan claims a prefix of the block, its first op is part of a fused
//! step, and no op outside a fused step reads a value that the fused kernel does not write.
//! [`dump`] writes what the planner saw and chose for each window (`HYPATIA_DUMP`).

mod build;
mod candidates;
mod cover;
pub mod dump;
mod steps;

pub use build::*;
pub use candidates::*;
pub use steps::*;

#[cfg(test)]
mod tests;
