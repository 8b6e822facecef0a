//! Which execution a fused step gets on a device: one tiled kernel, the tensor-core engine, or
//! split; and whether a run of layers becomes one chain launch.
//!
//! The tiled kernel runs on plain units; it is all a device without matrix units (lavapipe,
//! most integrated GPUs) gets. Where the device has matrix units for the dtype, the step runs on
//! the [tensor-core engine](crate::kernel::engine), which autotunes per problem over the tiled
//! kernel, Burn's own matmul, cubek-matmul tilings and (on Hopper) Hypatia's `wgmma` kernel, so
//! the choice is measured, never assumed. On every device a step whose ops Burn's fused matmul
//! could run also races it ([`RacePolicy`](crate::config::RacePolicy)): on lavapipe that hands
//! most shapes to Burn. The choices read a [`HypatiaConfig`] passed in, so tests build the one
//! they need.

use crate::config::{ChainPolicy, ExecutionPolicy, F32Math, F32Precision, HypatiaConfig};
use crate::kernel::{ChainProblem, Epilogue, LinearProblem};
use crate::rewrite::Profile;
use burn_backend::DType;
use cubecl::prelude::*;

/// How one fused step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// One launch: tiled matmul with the epilogue in registers.
    Tiled,
    /// The tensor-core engine: its autotuned fastest candidate for the whole linear.
    TensorCore,
    /// The inner backend's matmul ops, then Hypatia's bias + activation kernel.
    Split,
}

impl Execution {
    /// A distinct bit per execution, for sets of them.
    pub(crate) fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Whether the inner backend's matmul runs `dtype` on matrix units (cmma or mma) here.
///
/// For f32 that is TF32; CubeCL does not always list a TF32 configuration, so any matrix unit
/// for f16 counts too: on the H100 Burn's f32 matmul beat the unit kernel from 1024×784×2048
/// on (0.64x and 0.42x at 2048³), and its results differ from exact f32 by TF32
/// rounding.
pub fn has_matrix_units<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> bool {
    let storage: StorageType = dtype.into();
    let half: StorageType = DType::F16.into();
    let matmul = &client.properties().features.matmul;
    matmul
        .cmma
        .iter()
        .chain(matmul.mma.iter())
        .any(|config| config.a_type == storage || (dtype == DType::F32 && config.a_type == half))
}

/// The execution for `problem` with `epilogue` on `client`'s device under `config`.
///
/// Without matrix units a plain matmul ([`Epilogue::Identity`]) is split, which is Burn's own
/// matmul and nothing else: the unit kernel has no epilogue pass to save there.
pub fn choose_execution<R: Runtime>(
    problem: &LinearProblem,
    epilogue: Epilogue,
    client: &ComputeClient<R>,
    config: &HypatiaConfig,
) -> Execution {
    match config.execution {
        ExecutionPolicy::Tiled => Execution::Tiled,
        ExecutionPolicy::TensorCore => Execution::TensorCore,
        ExecutionPolicy::Split => Execution::Split,
        ExecutionPolicy::Auto => {
            let f32 = problem.dtype == DType::F32;
            if f32 && config.f32 == F32Precision::Exact {
                // Every engine candidate but the tiled kernel multiplies f32 as TF32.
                Execution::Tiled
            } else if has_matrix_units(client, problem.dtype) {
                if f32 && problem.f32_math(config) == F32Math::Exact {
                    // Burn's f32 may be exact here: so is Hypatia's (decision record 0014).
                    Execution::Tiled
                } else if problem.is_small() {
                    // One tile's work: the tiled kernel, untuned (decision record 0016).
                    Execution::Tiled
                } else {
                    Execution::TensorCore
                }
            } else if epilogue == Epilogue::Identity {
                Execution::Split
            } else {
                Execution::Tiled
            }
        }
    }
}

/// Whether `chain` (accepted by [`check_chain`](crate::kernel::check_chain)) runs as one launch
/// on `client`'s device under `config`.
pub fn choose_chain<R: Runtime>(
    chain: &ChainProblem,
    client: &ComputeClient<R>,
    config: &HypatiaConfig,
) -> bool {
    match config.chain {
        ChainPolicy::Always => true,
        ChainPolicy::Never => false,
        ChainPolicy::Auto => {
            config.execution == ExecutionPolicy::Auto
                && Profile::for_device(
                    has_matrix_units(client, chain.dtype),
                    config.profile.as_deref(),
                )
                .prefers_chain(chain)
        }
    }
}
