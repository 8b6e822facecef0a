//! # Hypatia
//!
//! Makes Burn models faster without changing them. Swap one type:
//!
//! ```no_run
//! # #[cfg(feature = "wgpu")] {
//! use burn::prelude::*;
//! type B = hypatia::Hypatia<burn::backend::Wgpu>; // or Hypatia<burn::backend::Cuda>
//! type T = burn::backend::Autodiff<B>;            // to train
//! let device = Default::default();
//! let x = Tensor::<B, 2>::ones([8, 4], &device);
//! let w = Tensor::<B, 2>::ones([4, 3], &device);
//! let b = Tensor::<B, 1>::ones([3], &device);
//! let y = burn::tensor::activation::relu(x.matmul(w) + b.unsqueeze()); // one fused kernel
//! println!("{}", hypatia::stats(&device).executed(hypatia::FusedPattern::LinearRelu));
//! # let _ = (y, core::marker::PhantomData::<T>);
//! # }
//! ```
//!
//! Hypatia sits in Burn's lazy op stream (burn-fusion) and runs five stages:
//!
//! 1. **[`capture`]**: the fuser is fed Burn's `OperationIr`s; they become a [`Window`](capture::Window).
//! 2. **[`rewrite`]**: the window is lowered into an egg e-graph and rewritten until
//!    `relu(matmul(x, w) + reshape(b))`, in every form Burn emits, is a `fused-linear-relu` node
//!    (and likewise GELU, tanh GELU, SiLU, LeakyReLU, clamp, a Linear without bias or without
//!    activation, and ReLU's backward).
//! 3. **[`plan`]**: the cheapest extraction becomes a serialisable [`Plan`](plan::Plan) that
//!    replays without egg.
//! 4. **`execute`**: a plan's steps run in order, each as one fused kernel, a chained run of
//!    layers, or a turn of its race against Burn's own fused matmul; a step whose kernel cannot
//!    run (or whose first launch or verification fails) runs Burn's own ops, exactly as before.
//! 5. **`kernel`**: the kernels a step launches: a CubeCL tiled matmul with a bias +
//!    activation epilogue, the tensor-core engine (cubek tilings, Burn's matmul, Hypatia's
//!    Hopper `wgmma` kernel, autotuned), the MLP chain.
//!
//! Whatever Hypatia does not claim runs on the inner backend, and Burn's own fusers still see
//! every op Hypatia leaves alone.
//!
//! `runtime` holds the burn-fusion roles that tie the stages together, `backend` the types that
//! forward every op (to burn-fusion, and from it to the inner `CubeBackend`), `host` how the
//! caller's, burn-fusion's and CubeCL's threads hand work to each other, [`config`] every
//! setting (`hypatia.toml`, `HYPATIA_*`), and [`stats()`] tells what was fused and why not.
//! Imports go one way, from `backend` and `runtime` down the stages to [`config`], which
//! imports nothing of the crate: no stage names the runtime that registers the fusers, so a port
//! to another way of registering them touches `runtime` and `backend` only.
//!
//! The public API is what a user and a rule author need: the backend type and its stats, the
//! configuration, and the rewrite, plan and capture stages, which run without a device. The
//! running half (`backend`, `execute`, `host`, `kernel`, `runtime`) is the crate's own; its
//! tests, benchmarks and examples see it as public modules through the `internals` feature,
//! and the hand-written op streams of `capture::fixtures` through `fixtures`.
//!
//! The rewrite stage needs no device:
//!
//! ```
//! use hypatia::rewrite::{Limits, TensorGraph, saturate};
//! // relu(x·W + b) as Burn 0.21 emits it for `nn::Linear` + `relu`.
//! let expr = "(mask-fill (add (matmul t1:f32:1x2 t2:f32:2x3) (reshape t3:f32:3 shape:0x3))
//!                        (le (add (matmul t1:f32:1x2 t2:f32:2x3) (reshape t3:f32:3 shape:0x3)) scalar:0)
//!                        scalar:1)";
//! let mut egraph = TensorGraph::default();
//! let root = egraph.add_expr(&expr.parse().unwrap());
//! let best = saturate(egraph, &Limits::default()).find_best(root).1;
//! assert_eq!(best.to_string(), "(fused-linear-relu t1:f32:1x2 t2:f32:2x3 t3:f32:3)");
//! ```
#![warn(missing_docs)]
// What the crate's tests, benchmarks and examples call is public there (`internals`); a user's
// build compiles the same code without them, where their helpers are unused. The `internals`
// build (CI's clippy of every target) still finds what nothing uses.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

pub mod capture;
pub mod config;
pub mod plan;
pub mod rewrite;
mod stats;

// The running half: public to the crate's own tests, benchmarks and examples only (its
// dev-dependency on itself turns `internals` on).
#[cfg(feature = "internals")]
pub mod backend;
#[cfg(not(feature = "internals"))]
mod backend;
#[cfg(feature = "internals")]
pub mod execute;
#[cfg(not(feature = "internals"))]
mod execute;
#[cfg(feature = "internals")]
pub mod host;
#[cfg(not(feature = "internals"))]
mod host;
#[cfg(feature = "internals")]
pub mod kernel;
#[cfg(not(feature = "internals"))]
mod kernel;
#[cfg(feature = "internals")]
pub mod runtime;
#[cfg(not(feature = "internals"))]
mod runtime;

pub use backend::{HypatiaBackend, HypatiaFusion};
pub use kernel::{Activation, Epilogue, Gate};
pub use runtime::{HypatiaFuser, HypatiaOptimization, HypatiaRuntime};
pub use stats::{
    EggStats, FusedPattern, FusionStats, HostStats, PatternCounters, PatternStats, reset_stats,
    stats,
};

use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::{Fusion, FusionBackend};

/// Maps a Burn backend to the Hypatia backend that decorates it.
///
/// Implemented for `Fusion<CubeBackend<..>>` (what `burn::backend::Wgpu` and `Cuda` are) and for
/// a bare `CubeBackend<..>`; both decorate the same inner `CubeBackend`.
pub trait Decorate {
    /// The delegating backend whose fusion runtime is Hypatia's.
    type Backend: FusionBackend;
    /// What `Hypatia<Self>` names: burn-fusion over [`Decorate::Backend`].
    type Fusion: burn_backend::Backend;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> Decorate
    for Fusion<CubeBackend<R, F, I, BT>>
{
    type Backend = HypatiaBackend<R, F, I, BT>;
    type Fusion = HypatiaFusion<R, F, I, BT>;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> Decorate
    for CubeBackend<R, F, I, BT>
{
    type Backend = HypatiaBackend<R, F, I, BT>;
    type Fusion = HypatiaFusion<R, F, I, BT>;
}

/// `B` with Hypatia's fused Linear kernels: `Hypatia<Wgpu>`, `Hypatia<Cuda<bf16>>`, ...
pub type Hypatia<B> = <B as Decorate>::Fusion;

/// The book's chapters and the decision records as doc tests: `cargo test` compiles and runs
/// every Rust block in `book/src` and `docs/decisions`, so a snippet that stops compiling or
/// asserting fails CI.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../book/src/introduction.md")]
    struct Introduction;
    #[doc = include_str!("../book/src/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../book/src/how-it-works.md")]
    struct HowItWorks;
    #[doc = include_str!("../book/src/walkthrough.md")]
    struct Walkthrough;
    #[doc = include_str!("../book/src/activations.md")]
    struct Activations;
    #[doc = include_str!("../book/src/training.md")]
    struct Training;
    #[doc = include_str!("../book/src/learner.md")]
    struct Learner;
    #[doc = include_str!("../book/src/transformers.md")]
    struct Transformers;
    #[doc = include_str!("../book/src/writing-rules.md")]
    struct WritingRules;
    #[doc = include_str!("../book/src/performance.md")]
    struct Performance;
    #[doc = include_str!("../book/src/troubleshooting.md")]
    struct Troubleshooting;
    #[doc = include_str!("../book/src/decisions.md")]
    struct Decisions;
    #[doc = include_str!("../docs/decisions/0001-tf32.md")]
    struct Decision0001;
    #[doc = include_str!("../docs/decisions/0002-learner-checkpointer.md")]
    struct Decision0002;
    #[doc = include_str!("../docs/decisions/0003-several-devices-submit-batched.md")]
    struct Decision0003;
    #[doc = include_str!("../docs/decisions/0004-hopper-wgmma-kernel.md")]
    struct Decision0004;
    #[doc = include_str!("../docs/decisions/0005-mlp-chain-kernels.md")]
    struct Decision0005;
    #[doc = include_str!("../docs/decisions/0006-host-hand-over.md")]
    struct Decision0006;
    #[doc = include_str!("../docs/decisions/0007-split-and-race.md")]
    struct Decision0007;
    #[doc = include_str!("../docs/decisions/0008-learner-test-loader.md")]
    struct Decision0008;
    #[doc = include_str!("../docs/decisions/0009-tf32-weight-copies.md")]
    struct Decision0009;
    #[doc = include_str!("../docs/decisions/0010-collectives-pushed.md")]
    struct Decision0010;
    #[doc = include_str!("../docs/decisions/0011-collective-sync-queued.md")]
    struct Decision0011;
    #[doc = include_str!("../docs/decisions/0012-one-gpu-stream.md")]
    struct Decision0012;
    #[doc = include_str!("../docs/decisions/0013-ddp-metric-read.md")]
    struct Decision0013;
    #[doc = include_str!("../docs/decisions/0014-f32-follows-burn.md")]
    struct Decision0014;
    #[doc = include_str!("../docs/decisions/0015-declined-windows.md")]
    struct Decision0015;
    #[doc = include_str!("../docs/decisions/0016-small-problems-tiled.md")]
    struct Decision0016;
    #[doc = include_str!("../docs/decisions/0017-one-test-build.md")]
    struct Decision0017;
    #[doc = include_str!("../docs/decisions/0018-configuration-passed-down.md")]
    struct Decision0018;
    #[doc = include_str!("../docs/decisions/0019-burn-fused-matmul-key.md")]
    struct Decision0019;
    #[doc = include_str!("../docs/decisions/0020-burn-0-22-port.md")]
    struct Decision0020;
    #[doc = include_str!("../docs/decisions/0021-gelu-backward.md")]
    struct Decision0021;
    #[doc = include_str!("../docs/decisions/0022-silu-backward.md")]
    struct Decision0022;
    #[doc = include_str!("../docs/decisions/0023-kept-values-recomputed.md")]
    struct Decision0023;
    #[doc = include_str!("../docs/decisions/0024-small-batch-timed-awake.md")]
    struct Decision0024;
    #[doc = include_str!("../docs/decisions/0025-trainings-compared-by-outcome.md")]
    struct Decision0025;
    #[doc = include_str!("../docs/decisions/0026-views-join-the-claim.md")]
    struct Decision0026;
    #[doc = include_str!("../docs/decisions/0027-rounded-where-burn-rounds.md")]
    struct Decision0027;
    #[doc = include_str!("../docs/decisions/0028-gelu-tanh-backward.md")]
    struct Decision0028;
    #[doc = include_str!("../docs/decisions/0029-leaky-relu-backward.md")]
    struct Decision0029;
    #[doc = include_str!("../docs/decisions/0030-swiglu-backward.md")]
    struct Decision0030;
    #[doc = include_str!("../docs/decisions/0031-swiglu-forward.md")]
    struct Decision0031;
    #[doc = include_str!("../docs/decisions/0032-burn-reference-alone.md")]
    struct Decision0032;
    #[doc = include_str!("../docs/decisions/0033-gate-call-6-warm.md")]
    struct Decision0033;
}
