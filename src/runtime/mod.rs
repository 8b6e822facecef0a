//! burn-fusion roles: the runtime, the fuser, the optimizations.
//!
//! [`HypatiaRuntime`] lists [`HypatiaFuser`] first and Burn's four fusers after it (adapted by
//! [`BurnFuser`]), so Burn keeps fusing what Hypatia leaves alone. The fuser's `finish` is where
//! capture → rewrite → plan runs; [`HypatiaOptimization`] hands a plan to
//! [`execute`](crate::execute), and Burn's own optimizations to Burn.
//! Pitfall: burn-fusion caches optimizations by relative window and replays them without
//! calling any fuser, so an optimization must read real shapes and scalars from the context.

mod burn_fuser;
mod fuser;
mod optimization;

pub use burn_fuser::*;
pub use fuser::*;
pub use optimization::*;
