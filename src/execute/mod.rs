//! Execute: runs a [`Plan`](crate::plan::Plan) on a device, or Burn's ops where it cannot.
//!
//! One file a part of running a plan:
//!
//! - `policy`: [`choose_execution`] and [`choose_chain`], how a step or a run of layers runs on
//!   a device (the tiled kernel, the tensor-core engine, split, one chain launch).
//! - `step_loop`: [`LinearOptimization`], the step loop: the plan's steps in order, each as a
//!   chained run, a turn of its race, or alone.
//! - `step`: one fused step on its kernel.
//! - [`race`]: a step against Burn's own way of running the same ops, per real shape.
//! - `chain`: a run of layers as one MLP-chain launch.
//! - `probe`: a step's first launch, checked before it is trusted.
//! - [`verify`]: a fused result compared with Burn's ops (`HYPATIA_VERIFY`).
//! - `fallback`: the claimed ops run one by one on the inner backend, exactly as Burn would
//!   ([`FallbackReason`] says why), and the errors kept for the user's next sync.
//! - `burn_path`: Burn's own optimizations and ops, run from a step (the race's Burn side, the
//!   windows Hypatia hands back to Burn's fusers).
//! - `context`: what a step reads from burn-fusion's context (real shapes, scalars, handles)
//!   and what it releases.
//!
//! Pitfall: burn-fusion caches optimizations by relative window and replays them without
//! calling any fuser, so an execution must read real shapes and scalars from the context.

mod burn_path;
mod chain;
pub(crate) mod context;
mod fallback;
#[cfg(all(test, feature = "wgpu"))]
mod fallback_tests;
mod policy;
mod probe;
pub mod race;
mod step;
mod step_loop;
pub mod verify;

pub(crate) use burn_path::execute_burn;
pub use burn_path::{CubeStream, recompute_fused};
pub use fallback::{FallbackReason, run_unfused};
pub(crate) use fallback::{defer_error, take_deferred};
pub use policy::*;
#[cfg(test)]
pub(crate) use probe::{Fault, inject_fault, injected};
pub(crate) use probe::{after_first_launch, before_first_launch};
pub use step_loop::*;
pub use verify::{Mismatch, VerifyMode};
