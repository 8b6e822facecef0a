//! Fallback: run claimed ops exactly as Burn would, one by one, on the inner backend.
//!
//! Used when a plan cannot run as fused (a scalar guard fails, a shape the kernel does not
//! take): the block was claimed, so Hypatia owes it an execution. Each op's own closure (what
//! `Fusion` registered) runs on the inner backend, so results are Burn's bit for bit.

use crate::runtime::HypatiaRuntime;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_fusion::stream::{Context, OrderedExecution};

/// Why a claimed plan (or one of its steps) ran Burn's ops instead of the fused kernel.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FallbackReason {
    /// The activation's scalars were not zero (e.g. `clamp_min(x, 0.5)` has relu's shape).
    #[error("scalar {id} is {value}, the fused activation needs 0")]
    NonZeroScalar {
        /// Relative scalar id.
        id: u64,
        /// Its value at run time.
        value: f64,
    },
    /// The kernel refused the real shapes or types.
    #[error("kernel: {0}")]
    Kernel(#[from] crate::kernel::KernelError),
}

impl FallbackReason {
    /// A short stable name, used as a key in [`FusionStats`](crate::FusionStats).
    pub fn key(&self) -> &'static str {
        match self {
            FallbackReason::NonZeroScalar { .. } => "non-zero-scalar",
            FallbackReason::Kernel(error) => error.key(),
        }
    }
}

/// Runs block ops `indices` (in that order) through their unfused closures.
pub fn run_unfused<R: CubeRuntime>(
    indices: impl IntoIterator<Item = usize>,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<HypatiaRuntime<R>>,
) {
    for index in indices {
        execution
            .operation_within_optimization(index)
            .execute(&mut context.handles);
    }
}
