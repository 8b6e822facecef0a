//! Execute: runs a [`Plan`](crate::plan::Plan) on a device, the stage between plan and
//! fallback.
//!
//! [`choose_execution`] and [`choose_chain`] decide how a step or a run of layers runs on a
//! device. [`LinearOptimization`] is the step loop (`steps`): each step of a plan runs as a chained run
//! of layers (`chain`, one MLP-chain launch), as a turn of its race against Burn's fused matmul
//! ([`race`]), or alone (`step`: the tiled kernel, the tensor-core engine or split, with its
//! first-launch and verify checks). `context` reads real shapes, scalars and handles from
//! burn-fusion's context. What cannot run fused runs Burn's ops
//! ([`fallback`](crate::fallback)), which also compares verified results.
//! Pitfall: burn-fusion caches optimizations by relative window and replays them without
//! calling any fuser, so an execution must read real shapes and scalars from the context.

mod burn;
mod chain;
pub(crate) mod context;
mod policy;
pub mod race;
mod step;
mod steps;

pub use burn::CubeStream;
pub(crate) use burn::execute_burn;
pub use policy::*;
pub use steps::*;
