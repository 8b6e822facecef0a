//! Burn's own optimizations run inside a block Hypatia's runtime holds: Burn's whole
//! optimizations (a block no Hypatia fuser claimed) and a race's Burn side (a step's ops).
//!
//! Generic in the burn-fusion runtime ([`CubeStream`]): `execute` does not name the runtime
//! that registers the fusers (`runtime`), so that side stays the only one a Burn port touches.

use super::run_unfused;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::optim::elemwise::{ElementWiseFuser, ElemwiseOptimization};
use burn_cubecl_fusion::optim::{CubeOptimization, matmul::MatmulOptimization};
use burn_cubecl_fusion::{CubeFusionHandle, FallbackOperation};
use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FusionRuntime, OperationFuser, UnfusedOp};
use burn_ir::OperationIr;

/// A burn-fusion runtime whose handles are CubeCL's: the stream a plan's block runs in
/// (Hypatia's own runtime, `runtime::HypatiaRuntime`).
pub trait CubeStream<R: CubeRuntime>: FusionRuntime<FusionHandle = CubeFusionHandle<R>> {}

impl<R: CubeRuntime, F: FusionRuntime<FusionHandle = CubeFusionHandle<R>>> CubeStream<R> for F {}

/// Burn's optimizations fall back to single ops of the block; here those are the block's ops
/// in the runtime that holds it.
struct UnfusedFallback<F: FusionRuntime> {
    operation: UnfusedOp<F>,
}

impl<R: CubeRuntime, F: CubeStream<R>> FallbackOperation<R> for UnfusedFallback<F> {
    fn run(&self, context: &mut Context<CubeFusionHandle<R>>) {
        self.operation.execute(&mut context.handles);
    }
}

// Safety of Send/Sync: `UnfusedOp` holds the op's closure state (tensor descriptions and
// handles), which burn-fusion itself moves across threads with the stream.
unsafe impl<F: FusionRuntime> Send for UnfusedFallback<F> {}
unsafe impl<F: FusionRuntime> Sync for UnfusedFallback<F> {}

/// Runs one of Burn's optimizations exactly as `burn-cubecl`'s `FusionCubeRuntime` does.
pub(crate) fn execute_burn<R: CubeRuntime, F: CubeStream<R>>(
    optimization: &mut CubeOptimization<R>,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<F>,
) {
    let fallback = fallback_at(execution, 0);
    match optimization {
        CubeOptimization::ElementWise(op) => op.execute(context),
        CubeOptimization::Matmul(op) => op.execute(context, fallback),
        CubeOptimization::Reduce(op) => op.execute(context, fallback),
        CubeOptimization::ReduceBroadcasted(op) => op.execute(context, fallback),
    }
}

/// Runs Burn's matmul optimization for block ops starting at `first_op` (a step's ops inside a
/// Hypatia block: see [`super::race`]).
pub(crate) fn execute_burn_at<R: CubeRuntime, F: CubeStream<R>>(
    optimization: &mut MatmulOptimization<R>,
    first_op: usize,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<F>,
) {
    optimization.execute(context, fallback_at(execution, first_op));
}

/// The single-op fallback Burn's optimizations ask for, for an optimization whose op 0 is block
/// op `first_op`.
fn fallback_at<R: CubeRuntime, F: CubeStream<R>>(
    execution: &OrderedExecution<F>,
    first_op: usize,
) -> impl Fn(usize) -> Box<dyn FallbackOperation<R>> + '_ {
    move |index| {
        Box::new(UnfusedFallback {
            operation: execution.operation_within_optimization(first_op + index),
        })
    }
}

/// Burn's elementwise fusion of a step's recomputed ops (block order; `ops` are the block's
/// relative ops, as the fuser was fed them): one kernel, as Burn's `ElementWiseFuser` would
/// have run them among the step's other ops (decision record 0023). `None` where there are
/// none, or the fuser does not take them all.
pub fn recompute_fused<R: CubeRuntime>(
    ops: &[OperationIr],
    recomputed: &[usize],
    device: &R::Device,
) -> Option<ElemwiseOptimization<R>> {
    if recomputed.is_empty() {
        return None;
    }
    match fuse_all(ElementWiseFuser::<R>::new(device.clone()), ops, recomputed)? {
        CubeOptimization::ElementWise(optimization) => Some(optimization),
        _ => None,
    }
}

/// `fuser`'s optimization of the block ops `indices` (`ops` are the block's relative ops), if
/// it takes them all.
pub(crate) fn fuse_all<R: CubeRuntime>(
    mut fuser: impl OperationFuser<CubeOptimization<R>>,
    ops: &[OperationIr],
    indices: &[usize],
) -> Option<CubeOptimization<R>> {
    for &op in indices {
        fuser.fuse(ops.get(op)?);
    }
    (fuser.len() == indices.len()).then(|| fuser.finish())
}

/// Runs a step's recomputed ops after its kernel: through Burn's elementwise fusion of them
/// where [`recompute_fused`] built one, else one by one.
pub(crate) fn run_recomputed<R: CubeRuntime, F: CubeStream<R>>(
    fused: Option<&ElemwiseOptimization<R>>,
    recomputed: &[usize],
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<F>,
) {
    match fused {
        Some(optimization) => optimization.execute(context),
        None => run_unfused(recomputed.iter().copied(), context, execution),
    }
}
