//! Adapters that let Burn's own fusers and optimizations run inside [`HypatiaRuntime`].

use super::{HypatiaOptimization, HypatiaRuntime};
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::optim::{CubeOptimization, matmul::MatmulOptimization};
use burn_cubecl_fusion::{CubeFusionHandle, FallbackOperation};
use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FuserProperties, FuserStatus, OperationFuser, UnfusedOp};
use burn_ir::OperationIr;

/// One of Burn's fusers, its optimization wrapped in [`HypatiaOptimization::Burn`].
pub struct BurnFuser<R: CubeRuntime> {
    inner: Box<dyn OperationFuser<CubeOptimization<R>>>,
}

impl<R: CubeRuntime> BurnFuser<R> {
    /// Wraps `inner`.
    pub fn new(inner: impl OperationFuser<CubeOptimization<R>> + 'static) -> Self {
        Self {
            inner: Box::new(inner),
        }
    }
}

impl<R: CubeRuntime> OperationFuser<HypatiaOptimization<R>> for BurnFuser<R> {
    fn fuse(&mut self, operation: &OperationIr) {
        self.inner.fuse(operation)
    }

    fn finish(&mut self) -> HypatiaOptimization<R> {
        HypatiaOptimization::Burn(self.inner.finish())
    }

    fn reset(&mut self) {
        self.inner.reset()
    }

    fn status(&self) -> FuserStatus {
        self.inner.status()
    }

    fn properties(&self) -> FuserProperties {
        self.inner.properties()
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn clone_dyn(&self) -> Box<dyn OperationFuser<HypatiaOptimization<R>>> {
        Box::new(Self {
            inner: self.inner.clone_dyn(),
        })
    }
}

/// Burn's optimizations fall back to single ops of the block; here those ops are Hypatia's.
struct UnfusedFallback<R: CubeRuntime> {
    operation: UnfusedOp<HypatiaRuntime<R>>,
}

impl<R: CubeRuntime> FallbackOperation<R> for UnfusedFallback<R> {
    fn run(&self, context: &mut Context<CubeFusionHandle<R>>) {
        self.operation.execute(&mut context.handles);
    }
}

// Safety of Send/Sync: `UnfusedOp` holds the op's closure state (tensor descriptions and
// handles), which burn-fusion itself moves across threads with the stream.
unsafe impl<R: CubeRuntime> Send for UnfusedFallback<R> {}
unsafe impl<R: CubeRuntime> Sync for UnfusedFallback<R> {}

/// Runs one of Burn's optimizations exactly as `burn-cubecl`'s `FusionCubeRuntime` does.
pub(crate) fn execute_burn<R: CubeRuntime>(
    optimization: &mut CubeOptimization<R>,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<HypatiaRuntime<R>>,
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
pub(crate) fn execute_burn_at<R: CubeRuntime>(
    optimization: &mut MatmulOptimization<R>,
    first_op: usize,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<HypatiaRuntime<R>>,
) {
    optimization.execute(context, fallback_at(execution, first_op));
}

/// The single-op fallback Burn's optimizations ask for, for an optimization whose op 0 is block
/// op `first_op`.
fn fallback_at<R: CubeRuntime>(
    execution: &OrderedExecution<HypatiaRuntime<R>>,
    first_op: usize,
) -> impl Fn(usize) -> Box<dyn FallbackOperation<R>> + '_ {
    move |index| {
        Box::new(UnfusedFallback {
            operation: execution.operation_within_optimization(first_op + index),
        })
    }
}
