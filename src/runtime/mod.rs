//! burn-fusion roles: the runtime, the fuser, the optimizations.
//!
//! [`HypatiaRuntime`] lists [`HypatiaFuser`] first and Burn's four fusers after it (adapted by
//! [`BurnFuser`]), so Burn keeps fusing what Hypatia leaves alone. The fuser's `finish` is where
//! capture → rewrite → plan runs; [`LinearOptimization`] executes a plan (kernel, or fallback).
//! [`race`] times a step against Burn's own fused matmul where the real shapes could favour it.
//! [`sync`] is the backend's wait for the device, without parking burn-fusion's thread at once;
//! [`submit`] is how the caller's thread hands ops to burn-fusion's thread and waits for them;
//! [`pace`] keeps those hand-offs, and Hypatia's launches to CubeCL's thread, from waiting on a
//! busy thread.
//! Pitfall: burn-fusion caches optimizations by relative window and replays them without
//! calling any fuser, so an optimization must read real shapes and scalars from the context.

pub(crate) mod bias;
mod burn;
mod chain;
mod fuser;
mod linear;
mod optimization;
pub mod pace;
pub mod race;
pub mod submit;
pub mod sync;

pub use burn::*;
pub use fuser::*;
pub use linear::*;
pub use optimization::*;
