//! The adapter that lets Burn's own fusers run inside [`HypatiaRuntime`](super::HypatiaRuntime)
//! (their optimizations run through [`execute`](crate::execute)).

use super::HypatiaOptimization;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::optim::CubeOptimization;
use burn_fusion::{FuserProperties, FuserStatus, OperationFuser};
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
