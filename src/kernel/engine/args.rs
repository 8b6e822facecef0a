//! How the engine runs [`LinearArgs`]: Burn's matmul or a cubek tiling followed by the split
//! epilogue pass, the tiled unit kernel, and the autotune key.

use super::Inputs;
use crate::kernel::{
    Epilogue, EpilogueInputs, LinearArgs, is_aligned, is_contiguous, launch_bias_activation_into,
    launch_fused_linear_into,
};
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;

/// Largest problem (FLOPs) the tiled unit kernel is tuned on: beyond it, it always lost.
const TILED_MAX_FLOPS: f64 = 1.0e9;

impl<R: CubeRuntime> LinearArgs<R> {
    /// Whether the epilogue does nothing: the matmul may write `out` directly.
    fn is_plain(&self) -> bool {
        self.epilogue == Epilogue::Identity
            && self.bias.is_none()
            && self.pre.is_none()
            && self.bias_grad.is_none()
    }

    /// Calls `launch` with the epilogue and its bias and gate as kernel operands.
    fn with_epilogue<T>(&self, launch: impl FnOnce(EpilogueInputs<'_, R>) -> T) -> T {
        let (bias, gate) = (
            self.bias.as_ref().map(Self::operand),
            self.gate.as_ref().map(Self::operand),
        );
        launch(EpilogueInputs {
            epilogue: self.epilogue,
            bias: bias.as_ref(),
            gate: gate.as_ref(),
            params: self.params,
            bias_grad: self.bias_grad.is_some(),
        })
    }

    /// Runs `matmul` into a scratch buffer, then Hypatia's bias + activation kernel into the
    /// outputs (straight into `out` when there is nothing to apply).
    pub(super) fn split(
        &self,
        matmul: impl FnOnce(Inputs<R>) -> Result<(), String>,
    ) -> Result<(), String> {
        if self.is_plain() {
            return matmul((self.x.clone(), self.w.clone(), self.out.clone()));
        }
        let product = CubeTensor::new_contiguous(
            self.out.client.clone(),
            self.out.device.clone(),
            self.out.meta.shape().clone(),
            self.out
                .client
                .empty(self.out.meta.shape().num_elements() * self.out.dtype.size()),
            self.out.dtype,
        );
        matmul((self.x.clone(), self.w.clone(), product.clone()))?;
        self.with_epilogue(|epilogue| {
            launch_bias_activation_into(
                &Self::operand(&product),
                epilogue,
                self.out.clone().into(),
                self.pre.clone().map(Into::into),
                self.bias_grad.clone().map(Into::into),
            )
        });
        Ok(())
    }

    /// Rows of the output, rounded up to a power of two: the autotune key's `m`. A candidate
    /// that declines by size reads this, never the exact `m`, so that it declines every
    /// problem of a key or none (a choice replayed on a problem its candidate declines would
    /// panic in CubeCL's tuner).
    pub(super) fn key_rows(&self) -> usize {
        let shape = self.out.meta.shape();
        shape[..shape.len() - 1]
            .iter()
            .product::<usize>()
            .next_power_of_two()
    }

    /// The tiled unit kernel, whole linear in one launch.
    pub(super) fn tiled(&self) -> Result<(), String> {
        let problem = self.problem();
        let n = self.out.meta.shape()[self.out.meta.shape().len() - 1];
        if 2.0 * (self.key_rows() * problem.k * n) as f64 > TILED_MAX_FLOPS {
            return Err("larger than the unit kernel is tuned on".into());
        }
        self.with_epilogue(|epilogue| {
            launch_fused_linear_into(
                &problem,
                &Self::operand(&self.x),
                &Self::operand(&self.w),
                epilogue,
                self.out.clone().into(),
                self.pre.clone().map(Into::into),
                self.bias_grad.clone().map(Into::into),
            )
        });
        Ok(())
    }

    /// The autotune key: exact `n` and `k` (a model's weights), `m` by power of two, and every
    /// property that decides whether a candidate applies (layouts and alignment of every
    /// operand and the gate, outputs, which dtypes the Hopper kernel is offered). Two problems
    /// of one key must be accepted by the same candidates: CubeCL's tuner replays a key's
    /// choice and panics if it declines.
    pub fn key(&self) -> String {
        let shape = self.out.meta.shape();
        let layout = |t: &CubeTensor<R>| {
            let (shape, strides) = (t.meta.shape(), t.meta.strides());
            let r = shape.len();
            format!(
                "{:?}/{}/{}{}",
                &strides[r - 2..],
                is_contiguous(shape, strides),
                shape[..r - 2].iter().all(|&d| d == 1),
                if is_aligned(t) { "a" } else { "u" }
            )
        };
        format!(
            "m{} n{} k{} {:?} x{} w{} b{} p{} g{} {:?}{} {:?}",
            self.key_rows(),
            shape[shape.len() - 1],
            self.problem().k,
            self.out.dtype,
            layout(&self.x),
            layout(&self.w),
            self.bias
                .as_ref()
                .map_or("-".into(), |b| format!("{:?}", b.meta.strides().last())),
            self.pre.is_some(),
            self.gate.as_ref().map_or("-".into(), layout),
            self.epilogue,
            if self.bias_grad.is_some() { " db" } else { "" },
            crate::config::config().wgmma,
        )
    }
}
